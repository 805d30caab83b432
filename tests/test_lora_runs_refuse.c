/* test_lora_runs_refuse.c - LoRA runs of the gtrain binary as a process that are refused or only
 * planned (suite lora_runs, continued from test_lora_runs.c; the workspace in lora_runs_fixture.c):
 *
 * 3. hostile lora.init_from adapter directories: exit 2, one line naming the file and the key or
 *    tensor, and output_dir untouched (not created; an earlier run in it not removed even with
 *    overwrite_output_dir); an adapter with a NaN is warned about at load, its steps skipped, exit 1.
 * 4. gtrain plan: "trainable parameters: N" with N = sum over layers and modules of r (in + out)
 *    from config.json's dimensions (Llama, GPT-2 with c_proj in both blocks or one, init_from),
 *    and the memory table's frozen / params / grads / optimizer rows from those counts.
 * PiSSA's r: r above the smallest adapted matrix's rank is refused by plan and by a run, naming
 *    lora.r and that rank, before output_dir exists; r equal to it passes plan.
 *
 * The base is test_lora_runs.c's tiny Llama, written by a 1-step full fine-tuning run of gtrain
 * itself (lws_init), so nothing here needs Python. $GTRAIN_BIN is the binary, $GTRAIN_ROOT the repo
 * root. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cJSON.h>
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "safetensors.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "lora_runs_fixture.h"

/* ---------------------------------------------------------------- 3. hostile adapters */

typedef void (*Mutate)(const Ws *w, const char *dir);

static void write_json(const char *path, cJSON *j) {
    char *s = cJSON_Print(j);
    put_file(path, s, strlen(s));
    free(s);
    cJSON_Delete(j);
}

static void set_config(const char *dir, const char *key, cJSON *value) {
    const char *p = J(dir, "adapter_config.json");
    cJSON *j = read_json(p);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    cJSON_AddItemToObject(j, key, value);
    write_json(p, j);
}

static void m_peft_type(const Ws *w, const char *dir) { (void)w, set_config(dir, "peft_type", cJSON_CreateString("IA3")); }
static void m_r(const Ws *w, const char *dir) { (void)w, set_config(dir, "r", cJSON_CreateNumber(8)); }
static void m_dora(const Ws *w, const char *dir) { (void)w, set_config(dir, "use_dora", cJSON_CreateTrue()); }
static void m_foo(const Ws *w, const char *dir) {
    (void)w;
    const char *names[] = {"q_proj", "foo_proj"};
    set_config(dir, "target_modules", cJSON_CreateStringArray(names, 2));
}
static void m_no_weights(const Ws *w, const char *dir) { (void)w, unlink(J(dir, "adapter_model.safetensors")); }
static void m_bin_only(const Ws *w, const char *dir) {
    (void)w;
    cr_assert_eq(rename(J(dir, "adapter_model.safetensors"), J(dir, "adapter_model.bin")), 0);
}
static void m_truncated(const Ws *w, const char *dir) {
    (void)w;
    const char *p = J(dir, "adapter_model.safetensors");
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    cr_assert_eq(truncate(p, sb.st_size - 100), 0);
}
/* the weights of an adapter made for another base (32 wide, or 3 layers) */
static void m_other_base(const char *src, const char *dir) {
    copy_file(J(src, "adapter_model.safetensors"), J(dir, "adapter_model.safetensors"));
    copy_file(J(src, "adapter_config.json"), J(dir, "adapter_config.json"));
}
static void m_hidden32(const Ws *w, const char *dir) { m_other_base(wpath(w, "ad32"), dir); }
static void m_layers3(const Ws *w, const char *dir) { m_other_base(wpath(w, "ad3l"), dir); }

/* rewrite adapter_model.safetensors: drop tensors containing drop, add a DoRA magnitude */
static void edit_weights(const char *dir, const char *drop, bool add_dora, bool nan) {
    const char *p = J(dir, "adapter_model.safetensors");
    StFile f;
    st_load(p, &f);
    int k = 0;
    for (int i = 0; i < f.n; i++) {
        if (drop && strstr(f.name[i], drop)) {
            free(f.name[i]), free(f.data[i]);
            continue;
        }
        f.name[k] = f.name[i], f.data[k] = f.data[i], f.ndim[k] = f.ndim[i];
        memcpy(f.shape[k], f.shape[i], sizeof f.shape[k]);
        k++;
    }
    f.n = k;
    if (add_dora) { /* PEFT's DoRA: one magnitude per output row of each adapted module */
        f.name[f.n] = strdup("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector");
        f.ndim[f.n] = 1;
        f.shape[f.n][0] = 64;
        f.data[f.n] = calloc(64, sizeof(float));
        f.n++;
    }
    if (nan) {
        int i = st_find(&f, "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
        cr_assert_geq(i, 0);
        f.data[i][5] = NAN;
    }
    st_save(p, &f);
    st_free(&f);
}
static void m_absent(const Ws *w, const char *dir) { (void)w, edit_weights(dir, "self_attn.k_proj", false, false); }
/* use_dora true with a magnitude one short of q_proj's 64 output rows (made for another base) */
static void m_dora_short(const Ws *w, const char *dir) {
    (void)w;
    m_dora(w, dir);
    const char *p = J(dir, "adapter_model.safetensors");
    StFile f;
    st_load(p, &f);
    f.name[f.n] = strdup("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector");
    f.ndim[f.n] = 1;
    f.shape[f.n][0] = 63;
    f.data[f.n] = calloc(63, sizeof(float));
    f.n++;
    st_save(p, &f);
    st_free(&f);
}
static void m_magnitude(const Ws *w, const char *dir) { (void)w, edit_weights(dir, NULL, true, false); }

typedef struct {
    const char *name;
    Mutate mutate;
    const char *cfg;    /* the run config (a file in the workspace) */
    const char *blame;  /* the file the line must name: relative to the adapter dir, or "@" + workspace file */
    const char *key, *key2;
} BadAdapter;

static const BadAdapter BAD[] = {
    {"peft_type IA3", m_peft_type, "init.yaml", "adapter_config.json", "peft_type", "IA3"},
    {"config r 8, tensors of r 4", m_r, "init.yaml", "adapter_model.safetensors",
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "found [4, 64]"},
    {"made for a 32-wide base", m_hidden32, "init.yaml", "adapter_model.safetensors",
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "found [4, 32]"},
    {"made for a 3-layer base", m_layers3, "init.yaml", "adapter_model.safetensors", "layers.2.", "does not have"},
    {"unknown target module foo_proj", m_foo, "init.yaml", "adapter_config.json", "target_modules", "foo_proj"},
    {"targets whose tensors are absent", m_absent, "init.yaml", "adapter_model.safetensors",
     "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", "found nothing"},
    {"no adapter_model.safetensors", m_no_weights, "init.yaml", "adapter_model.safetensors", "no such file", NULL},
    {"a pickled adapter_model.bin only", m_bin_only, "init.yaml", "adapter_model.bin", "pickled", NULL},
    {"truncated adapter_model.safetensors", m_truncated, "init.yaml", "adapter_model.safetensors", NULL, NULL},
    {"a DoRA lora_magnitude_vector without use_dora", m_magnitude, "init.yaml", "adapter_model.safetensors",
     "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", "use_dora is false"},
    {"use_dora true without magnitudes", m_dora, "init.yaml", "adapter_model.safetensors",
     "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", "found nothing"},
    {"use_dora true, a magnitude of 63 rows for q_proj's 64", m_dora_short, "init.yaml", "adapter_model.safetensors",
     "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", "expected shape [64]"},
    {"lora.r in the YAML against the adapter's", NULL, "init_r.yaml", "@init_r.yaml:24:", "lora.r", "adapter's r 4"},
};

/* an adapter of r 4 on all 7 modules of model (a base directory) into out/ */
static void make_adapter(const Ws *w, const char *model, const char *out) {
    const char *sets[] = {kv("model", wpath(w, model)), kv("output_dir", wpath(w, out)), "max_steps=1", "save_steps=0"};
    char tag[64];
    snprintf(tag, sizeof tag, "make-%s", out);
    expect_exit(w, tag, run_cfg(w, w->cfg, tag, sets, 4), 0);
    expect_adapter_dir(wpath(w, out));
}

Test(lora_runs, hostile_init_from_adapters_are_one_line_and_change_nothing, .timeout = 120) {
    Ws w;
    lws_init(&w);
    write_init_configs(&w);
    make_adapter(&w, "base", "good");
    write_llama_json(&w, "m32.json", 32, 96, 0);
    make_base(&w, "m32.json", "base32");
    make_adapter(&w, "base32", "ad32");
    write_llama_json(&w, "m3l.json", 0, 0, 3);
    make_base(&w, "m3l.json", "base3l");
    make_adapter(&w, "base3l", "ad3l");

    /* the good adapter continues (so each refusal below is its mutation's) */
    const char *ok[] = {kv("lora.init_from", wpath(&w, "good")), kv("output_dir", wpath(&w, "ok")), "max_steps=2"};
    expect_exit(&w, "ok", run_cfg(&w, wpath(&w, "init.yaml"), "ok", ok, 3), 0);
    char *o = read_log(&w, "ok", "out");
    cr_assert_not_null(strstr(o, "adapters: continued from"), "%s", o);
    free(o);

    for (size_t c = 0; c < sizeof BAD / sizeof *BAD; c++) {
        const BadAdapter *b = &BAD[c];
        char ad[300], out[300], tag[32], blame[400];
        snprintf(ad, sizeof ad, "%s/bad%zu", w.dir, c);
        snprintf(out, sizeof out, "%s/out%zu", w.dir, c);
        snprintf(tag, sizeof tag, "bad%zu", c);
        cr_assert_eq(mkdir(ad, 0755), 0);
        copy_file(J(wpath(&w, "good"), "adapter_model.safetensors"), J(ad, "adapter_model.safetensors"));
        copy_file(J(wpath(&w, "good"), "adapter_config.json"), J(ad, "adapter_config.json"));
        if (b->mutate) b->mutate(&w, ad);
        if (b->blame[0] == '@')
            snprintf(blame, sizeof blame, "%s/%s", w.dir, b->blame + 1);
        else
            snprintf(blame, sizeof blame, "%s/%s", ad, b->blame);
        const char *sets[] = {kv("lora.init_from", ad), kv("output_dir", out)};
        int st = run_cfg(&w, wpath(&w, b->cfg), tag, sets, 2);
        char e[4096];
        log_text(&w, tag, "err", e, sizeof e);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "[%s] exit %d, expected 2; stderr: %s", b->name,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1, e);
        cr_expect_eq(count_lines(e), 1, "[%s] expected one line on stderr, found: %s", b->name, e);
        cr_expect(strstr(e, blame) != NULL, "[%s] the line does not name %s: %s", b->name, blame, e);
        if (b->key) cr_expect(strstr(e, b->key) != NULL, "[%s] the line does not name %s: %s", b->name, b->key, e);
        if (b->key2) cr_expect(strstr(e, b->key2) != NULL, "[%s] the line does not say %s: %s", b->name, b->key2, e);
        cr_expect(!exists(out), "[%s] the refused run created its output_dir %s", b->name, out);
    }

    /* a refused adapter leaves an earlier run's directory as it was, even with overwrite_output_dir */
    const char *prev[] = {kv("output_dir", wpath(&w, "prev")), "max_steps=2"};
    expect_exit(&w, "prev", run_cfg(&w, w.cfg, "prev", prev, 2), 0);
    char *before = tree_snapshot(wpath(&w, "prev"));
    char ad[300];
    snprintf(ad, sizeof ad, "%s/bad-dora", w.dir);
    cr_assert_eq(mkdir(ad, 0755), 0);
    copy_file(J(wpath(&w, "good"), "adapter_model.safetensors"), J(ad, "adapter_model.safetensors"));
    copy_file(J(wpath(&w, "good"), "adapter_config.json"), J(ad, "adapter_config.json"));
    m_magnitude(&w, ad);
    const char *over[] = {kv("lora.init_from", ad), kv("output_dir", wpath(&w, "prev")), "overwrite_output_dir=true"};
    expect_one_line(&w, "over", run_cfg(&w, wpath(&w, "init.yaml"), "over", over, 3), 2, ad, "lora_magnitude_vector");
    char *after = tree_snapshot(wpath(&w, "prev"));
    cr_assert_str_eq(after, before, "a refused adapter changed the earlier run's output_dir");
    free(before);
    free(after);
    ws_fini(&w);
}

/* A NaN in an adapter is refused at load, naming the file, the tensor and the element, before
 * output_dir is touched (as a NaN in a model's weights is: test_silent.c) */
Test(lora_runs, nan_adapter_is_refused_at_load, .timeout = 60) {
    Ws w;
    lws_init(&w);
    write_init_configs(&w);
    make_adapter(&w, "base", "good");
    char ad[300];
    snprintf(ad, sizeof ad, "%s/nan", w.dir);
    cr_assert_eq(mkdir(ad, 0755), 0);
    copy_file(J(wpath(&w, "good"), "adapter_model.safetensors"), J(ad, "adapter_model.safetensors"));
    copy_file(J(wpath(&w, "good"), "adapter_config.json"), J(ad, "adapter_config.json"));
    edit_weights(ad, NULL, false, true);
    const char *sets[] = {kv("lora.init_from", ad), kv("output_dir", wpath(&w, "out")), "max_steps=3",
                          "max_skipped_steps=2"};
    int st = run_cfg(&w, wpath(&w, "init.yaml"), "nan", sets, 4);
    char want[400];
    snprintf(want, sizeof want, "%s/adapter_model.safetensors: tensor ", ad);
    expect_one_line(&w, "nan", st, 2, want, "expected a finite weight, found nan");
    cr_assert(!exists(wpath(&w, "out")), "a refused adapter created output_dir");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 4. gtrain plan */

typedef struct {
    unsigned long long params, trainable;
    char rows[16][2][48]; /* category, planned */
    int n_rows;
} Plan;

/* `gtrain plan --config cfg --set ...`: the wait status (logs dir/tag.out, dir/tag.err) */
static int plan_status(const Ws *w, const char *cfg, const char *tag, const char *const *sets, int n) {
    const char *argv[40];
    int a = 0;
    argv[a++] = test_gtrain_bin();
    argv[a++] = "plan";
    argv[a++] = "--config";
    argv[a++] = cfg;
    for (int i = 0; i < n; i++) argv[a++] = "--set", argv[a++] = sets[i];
    argv[a] = NULL;
    char out[320], err[320];
    snprintf(out, sizeof out, "%s/%s.out", w->dir, tag);
    snprintf(err, sizeof err, "%s/%s.err", w->dir, tag);
    fflush(stdout);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) cr_assert_eq(errno, EINTR);
    return st;
}

static void run_plan(const Ws *w, const char *cfg, const char *tag, const char *const *sets, int n, Plan *p) {
    int st = plan_status(w, cfg, tag, sets, n);
    expect_exit(w, tag, st, 0);
    char *text = read_log(w, tag, "out");
    memset(p, 0, sizeof *p);
    const char *q = strstr(text, "\nparameters: ");
    cr_assert(q && sscanf(q, "\nparameters: %llu", &p->params) == 1, "[%s] no parameters line: %s", tag, text);
    q = strstr(text, "\ntrainable parameters: ");
    cr_assert(q && sscanf(q, "\ntrainable parameters: %llu", &p->trainable) == 1, "[%s] no trainable parameters line: %s",
              tag, text);
    /* the memory table: "  category  planned" rows up to "device total" */
    q = strstr(text, "  category ");
    cr_assert_not_null(q, "[%s] no memory table: %s", tag, text);
    q = strchr(q, '\n') + 1;
    while (*q && strncmp(q, "  device total", 14) != 0 && p->n_rows < 16) {
        char cat[32], num[32], unit[16];
        int k = sscanf(q, " %31s %31s %15s", cat, num, unit);
        cr_assert(k == 3, "[%s] odd memory row: %.80s", tag, q);
        snprintf(p->rows[p->n_rows][0], 48, "%s", cat);
        snprintf(p->rows[p->n_rows][1], 48, "%s %s", num, unit);
        p->n_rows++;
        q = strchr(q, '\n');
        cr_assert_not_null(q);
        q++;
    }
    free(text);
}

static const char *plan_row(const Plan *p, const char *cat) {
    for (int i = 0; i < p->n_rows; i++)
        if (strcmp(p->rows[i][0], cat) == 0) return p->rows[i][1];
    cr_assert_fail("no %s row in the memory table", cat);
    return NULL;
}

static void expect_row(const Plan *p, const char *what, const char *cat, uint64_t bytes) {
    char want[32];
    gt_format_bytes(want, sizeof want, bytes);
    cr_assert_str_eq(plan_row(p, cat), want, "%s: the %s row is %s, expected %s (%llu bytes)", what, cat, plan_row(p, cat),
                     want, (unsigned long long)bytes);
}

/* the memory rows of a LoRA model: fp32 adapters, gradients and AdamW moments; the base frozen once */
static void expect_lora_rows(const Plan *p, const char *what, unsigned long long n_params, unsigned long long n_lora,
                             int frozen_bytes) {
    expect_row(p, what, "frozen", n_params * (uint64_t)frozen_bytes);
    expect_row(p, what, "grads", n_lora * 4);
    expect_row(p, what, "optimizer", n_lora * 8);
    if (frozen_bytes == 4) expect_row(p, what, "params", n_lora * 4);
}

Test(lora_runs, plan_counts_trainable_parameters_from_the_dimensions, .timeout = 60) {
    Ws w;
    lws_init(&w);
    Dims d = llama_dims(wpath(&w, "model.json"));
    Mod m[7];
    llama_mods(&d, m);
    /* the full model, counted here: embeddings, per layer two norms, q|k|v, o, gate, up, down, the
     * final norm and (untied) the LM head */
    const unsigned long long n_params =
        (unsigned long long)d.V * d.C * (d.tied ? 1 : 2) +
        (unsigned long long)d.L * (2ull * d.C + (unsigned long long)d.C * (d.Q + 2 * d.KV) + (unsigned long long)d.Q * d.C +
                                   3ull * d.C * d.I) + d.C;
    static const struct {
        const char *targets; /* --set lora.target_modules */
        int r;
        unsigned mask;       /* bits: q k v o gate up down */
    } cases[] = {
        {"all-linear", 4, 0x7f}, {"q_proj,v_proj", 8, 0x05}, {"o_proj,down_proj", 2, 0x48}, {"mlp.gate_proj,k_proj", 16, 0x12},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        unsigned long long want = 0;
        for (int k = 0; k < 7; k++)
            if (cases[c].mask >> k & 1u) want += (unsigned long long)cases[c].r * (m[k].in + m[k].out);
        want *= (unsigned long long)d.L;
        char rr[16], tag[32];
        snprintf(rr, sizeof rr, "%d", cases[c].r);
        snprintf(tag, sizeof tag, "plan%zu", c);
        const char *sets[] = {kv("lora.target_modules", cases[c].targets), kv("lora.r", rr)};
        Plan p;
        run_plan(&w, w.cfg, tag, sets, 2, &p);
        cr_assert_eq(p.params, n_params, "%s: parameters %llu, counted %llu", cases[c].targets, p.params, n_params);
        cr_assert_eq(p.trainable, want, "%s r %d: trainable parameters %llu, counted %llu", cases[c].targets, cases[c].r,
                     p.trainable, want);
        expect_lora_rows(&p, cases[c].targets, n_params, want, 4);
    }
    /* bf16: the frozen base in the compute dtype, once */
    const char *bf[] = {"precision=bf16"};
    Plan p;
    run_plan(&w, w.cfg, "plan-bf16", bf, 1, &p);
    unsigned long long all = 0;
    for (int k = 0; k < 7; k++) all += (unsigned long long)R * (m[k].in + m[k].out);
    all *= (unsigned long long)d.L;
    cr_assert_eq(p.trainable, all);
    expect_lora_rows(&p, "bf16", n_params, all, 2);

    /* lora.init_from: r and the modules are the adapter's (here r 4 on q_proj and v_proj) */
    const char *mk[] = {kv("output_dir", wpath(&w, "qv")), "max_steps=1", "save_steps=0", "lora.target_modules=q_proj,v_proj"};
    expect_exit(&w, "qv", run_cfg(&w, w.cfg, "qv", mk, 4), 0);
    write_init_configs(&w);
    const char *in[] = {kv("lora.init_from", wpath(&w, "qv"))};
    run_plan(&w, wpath(&w, "init.yaml"), "plan-init", in, 1, &p);
    const unsigned long long qv = (unsigned long long)d.L * R * ((m[0].in + m[0].out) + (m[2].in + m[2].out));
    cr_assert_eq(p.trainable, qv, "init_from a q_proj,v_proj adapter: trainable %llu, counted %llu", p.trainable, qv);
    ws_fini(&w);
}

/* GPT-2: c_attn C -> 3C, attn.c_proj C -> C, c_fc C -> n_inner, mlp.c_proj n_inner -> C; PEFT's
 * "c_proj" matches both blocks' c_proj, "attn.c_proj" only the attention's */
Test(lora_runs, plan_counts_gpt2_modules_from_the_dimensions, .timeout = 60) {
    Ws w;
    lws_init(&w);
    const int L = 3, C = 48, V = 256, P = 64, I = 4 * C;
    char mj[256];
    snprintf(mj, sizeof mj, "{\"model_type\": \"gpt2\", \"n_layer\": %d, \"n_head\": 4, \"n_embd\": %d, \"vocab_size\": %d, "
             "\"n_positions\": %d}\n", L, C, V, P);
    write_text(&w, "gpt2.json", mj);
    const unsigned long long n_params =
        (unsigned long long)V * C + (unsigned long long)P * C +
        (unsigned long long)L * (4ull * C + (3ull * C * C + 3ull * C) + (1ull * C * C + C) + (1ull * C * I + I) + (1ull * I * C + C)) +
        2ull * C;
    static const struct {
        const char *targets;
        int r;
        unsigned mask; /* c_attn, attn.c_proj, c_fc, mlp.c_proj */
    } cases[] = {{"c_attn", 4, 0x1}, {"c_attn,c_proj", 2, 0xb}, {"attn.c_proj,c_fc", 8, 0x6}, {"all-linear", 1, 0xf}};
    const int in[4] = {C, C, C, I}, out[4] = {3 * C, C, I, C};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        unsigned long long want = 0;
        for (int k = 0; k < 4; k++)
            if (cases[c].mask >> k & 1u) want += (unsigned long long)cases[c].r * (in[k] + out[k]);
        want *= (unsigned long long)L;
        char rr[16], tag[32];
        snprintf(rr, sizeof rr, "%d", cases[c].r);
        snprintf(tag, sizeof tag, "gplan%zu", c);
        const char *sets[] = {kv("model", wpath(&w, "gpt2.json")), kv("lora.target_modules", cases[c].targets),
                              kv("lora.r", rr)};
        Plan p;
        run_plan(&w, w.cfg, tag, sets, 3, &p);
        cr_assert_eq(p.params, n_params, "GPT-2: parameters %llu, counted %llu", p.params, n_params);
        cr_assert_eq(p.trainable, want, "GPT-2 %s r %d: trainable parameters %llu, counted %llu", cases[c].targets,
                     cases[c].r, p.trainable, want);
        expect_lora_rows(&p, cases[c].targets, n_params, want, 4);
    }
    ws_fini(&w);
}

/* ---------------------------------------------------------------- PiSSA's r against the matrices' rank */


/* r above the smallest adapted matrix's rank: refused by plan and by a run, naming lora.r and that
 * rank, before output_dir exists; r equal to it passes plan */
Test(lora_runs, pissa_r_above_a_matrix_rank_is_refused_before_output_dir, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const Dims d = llama_dims(wpath(&w, "base/config.json"));
    int rank = d.C; /* every Llama module's min(in, out): q, k, v, o, gate, up, down */
    const int dims[][2] = {{d.C, d.Q}, {d.C, d.KV}, {d.Q, d.C}, {d.C, d.I}, {d.I, d.C}};
    for (int i = 0; i < 5; i++) {
        const int m = dims[i][0] < dims[i][1] ? dims[i][0] : dims[i][1];
        if (m < rank) rank = m;
    }
    char over[16], at[16], want[48];
    snprintf(over, sizeof over, "%d", rank + 1);
    snprintf(at, sizeof at, "%d", rank);
    snprintf(want, sizeof want, "at most %d", rank);
    const char *inits[] = {"pissa", "pissa_niter_2"};
    for (int k = 0; k < 2; k++) {
        const char *sets[] = {kv("lora.init_lora_weights", inits[k]), kv("lora.r", over), "lora.lora_alpha=8"};
        int st = plan_status(&w, w.cfg, "plan-over", sets, 3);
        expect_one_line(&w, "plan-over", st, 2, "lora.r", want);
        st = run_cfg(&w, w.cfg, "run-over", sets, 3);
        expect_one_line(&w, "run-over", st, 2, "lora.r", want);
        cr_assert(!exists(w.out), "a refused run created %s", w.out);
        const char *ok[] = {kv("lora.init_lora_weights", inits[k]), kv("lora.r", at), "lora.lora_alpha=8"};
        st = plan_status(&w, w.cfg, "plan-at", ok, 3);
        expect_exit(&w, "plan-at", st, 0);
    }
    ws_fini(&w);
}
