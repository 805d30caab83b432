/* test_lora_runs.c - LoRA and PiSSA runs of the gtrain binary as a process (suite lora_runs):
 *
 * 1. resume: a run of N steps with save_steps and lora_dropout 0.1, and a second run resumed from
 *    its checkpoint-k into ANOTHER output_dir, end with byte-identical adapters (and the same
 *    losses, checkpoints and optimizer state); the same for PiSSA (pissa_niter_2: the resumed run
 *    rebuilds output_dir/pissa_init byte for byte), for gradient_accumulation_steps 2 with
 *    gradient checkpointing, and for exact PiSSA resumed from the checkpoint-0 a SIGTERM during
 *    loading saves. Checkpoints and output_dir hold the adapter alone: optimizer.safetensors holds
 *    exp_avg. / exp_avg_sq. of every PEFT adapter key (shapes from config.json's dimensions) and
 *    nothing of the base; there is no model.safetensors anywhere.
 * 2. data parallel: 2 MPI ranks x B against 1 rank x 2B (plain and ZeRO-1), without dropout and
 *    with lora_dropout 0.1 (the mask follows each row's place in the step's batch, so the ranks
 *    drop what the one rank drops; also 2 ranks x B/2 x 2 accumulation steps): the same losses and
 *    gradient norms (test_dist.c's bound) and the same adapter; a 2-rank ZeRO-1 run with dropout
 *    resumed from a checkpoint is bit-exact. Skipped without mpirun or an MPI build.
 * 3. hostile lora.init_from adapter directories: exit 2, one line naming the file and the key or
 *    tensor, and output_dir untouched (not created; an earlier run in it not removed even with
 *    overwrite_output_dir); an adapter with a NaN is warned about at load, its steps skipped, exit 1.
 * 4. gtrain plan: "trainable parameters: N" with N = sum over layers and modules of r (in + out)
 *    from config.json's dimensions (Llama, GPT-2 with c_proj in both blocks or one, init_from),
 *    and the memory table's frozen / params / grads / optimizer rows from those counts.
 *
 * The base is a tiny Llama (tests/fixtures/hf_configs/tiny-llama.json: 2 layers, 64 wide, 4 heads
 * of which 2 kv, SwiGLU 128) written by a 1-step full fine-tuning run of gtrain itself, so nothing
 * here needs Python. $GTRAIN_BIN is the binary, $GTRAIN_ROOT the repo root. */
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

#define STEPS 8
#define SAVE 3 /* checkpoints 3, 6, 8; the resumed runs start from checkpoint-3 */
#define R 4

/* ---------------------------------------------------------------- the workspace */

static const char LORA_YAML[] =
    "model: base\n"
    "data:\n  train: train.txt\n  format: text\n  seq_len: 32\n  val_fraction: 0.1\n"
    "per_device_train_batch_size: 4\ngradient_accumulation_steps: 1\n"
    "max_steps: 8\nlearning_rate: 1.0e-2\nlr_scheduler_type: cosine\nwarmup_steps: 1\n"
    "weight_decay: 0.1\nmax_grad_norm: 1.0\nlogging_steps: 1\neval_steps: 0\neval_max_batches: 2\n"
    "save_steps: 3\nseed: 7\nnum_threads: 1\noutput_dir: ref\nsample_max_new_tokens: 0\n"
    "lora:\n  r: 4\n  lora_alpha: 8\n  lora_dropout: 0.1\n  target_modules: all-linear\n";

/* the base: full fine-tuning for one step writes model.safetensors + config.json */
static const char BASE_YAML[] =
    "model: %s\n"
    "data:\n  train: train.txt\n  format: text\n  seq_len: 32\n  val_fraction: 0.1\n"
    "per_device_train_batch_size: 4\nmax_steps: 1\nlearning_rate: 1.0e-3\nlogging_steps: 1\neval_steps: 0\n"
    "save_steps: 0\nseed: 5\nnum_threads: 1\noutput_dir: %s\nsample_max_new_tokens: 0\n";

/* dir/name in one of 64 rotating buffers (test_join's 8 are too few for paths held across calls) */
static const char *J(const char *dir, const char *name) {
    static char buf[64][512];
    static int k = 0;
    char *p = buf[k++ % 64];
    cr_assert_lt((size_t)snprintf(p, 512, "%s/%s", dir, name), (size_t)512);
    return p;
}

/* a path under the workspace */
static const char *wpath(const Ws *w, const char *name) { return J(w->dir, name); }

static void write_text(const Ws *w, const char *name, const char *text) {
    put_file(wpath(w, name), text, strlen(text));
}

/* config.json of the tiny Llama fixture, with some fields replaced (NULL: as it is) */
static void write_llama_json(const Ws *w, const char *name, int hidden, int inter, int layers) {
    char from[512];
    snprintf(from, sizeof from, "%s/tests/fixtures/hf_configs/tiny-llama.json", getenv("GTRAIN_ROOT"));
    char *text = slurp(from, NULL);
    cr_assert_not_null(text, "cannot read %s", from);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j);
    if (hidden) cJSON_ReplaceItemInObject(j, "hidden_size", cJSON_CreateNumber(hidden));
    if (inter) cJSON_ReplaceItemInObject(j, "intermediate_size", cJSON_CreateNumber(inter));
    if (layers) cJSON_ReplaceItemInObject(j, "num_hidden_layers", cJSON_CreateNumber(layers));
    char *out = cJSON_Print(j);
    write_text(w, name, out);
    free(out);
    cJSON_Delete(j);
}

/* a base model directory name/ from model JSON mjson, by a 1-step full fine-tuning run */
static void make_base(const Ws *w, const char *mjson, const char *name) {
    char yaml[1024], cfg[300], tag[64];
    snprintf(yaml, sizeof yaml, BASE_YAML, mjson, name);
    snprintf(cfg, sizeof cfg, "%s/%s.yaml", w->dir, name);
    put_file(cfg, yaml, strlen(yaml));
    snprintf(tag, sizeof tag, "make-%s", name);
    Proc p;
    start_v(&p, w, cfg, NULL, tag, NULL, 0);
    expect_exit(w, tag, wait_proc(&p), 0);
    cr_assert(exists(J(wpath(w, name), "model.safetensors")), "%s: no base weights", name);
}

/* /tmp/gtrain-lora-XXXXXX with model.json (tiny Llama), train.txt, base/ and lora.yaml (w->cfg) */
static void lws_init(Ws *w) {
    if (!getenv("GTRAIN_ROOT") || !test_gtrain_bin()) cr_skip_test("GTRAIN_ROOT/GTRAIN_BIN not set (run through make test)");
    snprintf(w->dir, sizeof w->dir, "/tmp/gtrain-lora-XXXXXX");
    cr_assert_not_null(mkdtemp(w->dir));
    snprintf(w->cfg, sizeof w->cfg, "%s/lora.yaml", w->dir);
    snprintf(w->out, sizeof w->out, "%s/ref", w->dir);
    write_llama_json(w, "model.json", 0, 0, 0);
    static const char *const words[] = {"the ", "king ", "shall ", "speak ", "of ", "love, ", "and ", "war; ",
                                        "good ", "night\n", "sweet ", "prince. "};
    char *txt = malloc(16384);
    cr_assert_not_null(txt);
    size_t n = 0;
    uint32_t x = 2024;
    while (n < 16000) {
        x = x * 1664525u + 1013904223u;
        const char *wd = words[(x >> 16) % 12];
        memcpy(txt + n, wd, strlen(wd));
        n += strlen(wd);
    }
    put_file(wpath(w, "train.txt"), txt, n);
    free(txt);
    make_base(w, "model.json", "base");
    write_text(w, "lora.yaml", LORA_YAML);
}

/* run `gtrain --config cfg` with the sets; returns the wait status */
static int run_cfg(const Ws *w, const char *cfg, const char *tag, const char *const *sets, int n) {
    Proc p;
    start_v(&p, w, cfg, NULL, tag, sets, n);
    return wait_proc(&p);
}

/* "key=value" in one of 16 rotating buffers */
static const char *kv(const char *key, const char *value) {
    static char buf[16][600];
    static int k = 0;
    char *p = buf[k++ % 16];
    cr_assert_lt((size_t)snprintf(p, 600, "%s=%s", key, value), (size_t)600);
    return p;
}

/* ---------------------------------------------------------------- the model's adapters */

typedef struct {
    int L, C, Q, KV, I; /* layers, hidden, q rows, k/v rows, intermediate */
    int V, P;           /* vocab, positions (GPT-2) */
    bool tied;
} Dims;

static int json_int(const cJSON *j, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : def;
}

/* the dimensions from a Llama config.json, read here */
static Dims llama_dims(const char *path) {
    char *text = slurp(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j);
    Dims d = {0};
    d.L = json_int(j, "num_hidden_layers", 0);
    d.C = json_int(j, "hidden_size", 0);
    const int H = json_int(j, "num_attention_heads", 0), KVH = json_int(j, "num_key_value_heads", H);
    const int hd = json_int(j, "head_dim", d.C / H);
    d.Q = H * hd;
    d.KV = KVH * hd;
    d.I = json_int(j, "intermediate_size", 0);
    d.V = json_int(j, "vocab_size", 0);
    d.tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings"));
    cJSON_Delete(j);
    cr_assert(d.L > 0 && d.C > 0 && d.Q > 0 && d.KV > 0 && d.I > 0);
    return d;
}

/* Llama's modules in PEFT's order: name, in, out */
typedef struct {
    const char *path;
    int in, out;
} Mod;

static int llama_mods(const Dims *d, Mod m[7]) {
    const Mod all[7] = {{"self_attn.q_proj", d->C, d->Q}, {"self_attn.k_proj", d->C, d->KV}, {"self_attn.v_proj", d->C, d->KV},
                        {"self_attn.o_proj", d->Q, d->C}, {"mlp.gate_proj", d->C, d->I},   {"mlp.up_proj", d->C, d->I},
                        {"mlp.down_proj", d->I, d->C}};
    memcpy(m, all, sizeof all);
    return 7;
}

/* A safetensors file, every tensor as fp32 */
typedef struct {
    int n;
    char **name;
    int64_t (*shape)[ST_MAX_DIMS];
    int *ndim;
    float **data;
} StFile;

static void st_load(const char *path, StFile *f) {
    SafeTensors *st = NULL;
    GtError err = {0};
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    f->n = safetensors_count(st);
    f->name = calloc((size_t)f->n + 1, sizeof *f->name);
    f->shape = calloc((size_t)f->n + 1, sizeof *f->shape);
    f->ndim = calloc((size_t)f->n + 1, sizeof *f->ndim);
    f->data = calloc((size_t)f->n + 1, sizeof *f->data);
    cr_assert(f->name && f->shape && f->ndim && f->data);
    for (int i = 0; i < f->n; i++) {
        f->name[i] = strdup(safetensors_name(st, i));
        safetensors_shape(st, i, f->shape[i], &f->ndim[i]);
        size_t numel = (size_t)safetensors_numel(st, i);
        f->data[i] = malloc((numel ? numel : 1) * sizeof(float));
        cr_assert_not_null(f->data[i]);
        cr_assert_eq(safetensors_read_f32(st, i, f->data[i], numel, &err), 0, "%s", err.msg);
    }
    safetensors_close(st);
}

static int64_t st_numel(const StFile *f, int i) {
    int64_t n = 1;
    for (int d = 0; d < f->ndim[i]; d++) n *= f->shape[i][d];
    return n;
}

static int st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->name[i], name) == 0) return i;
    return -1;
}

static void st_save(const char *path, const StFile *f) {
    StTensorOut *t = calloc((size_t)f->n + 1, sizeof *t);
    cr_assert_not_null(t);
    for (int i = 0; i < f->n; i++) {
        t[i] = (StTensorOut){f->name[i], ST_F32, f->ndim[i], {0}, f->data[i]};
        memcpy(t[i].shape, f->shape[i], sizeof t[i].shape);
    }
    static const char *const meta[] = {"format", "pt"};
    GtError err = {0};
    cr_assert_eq(safetensors_write(path, t, f->n, meta, 1, &err), 0, "%s", err.msg);
    free(t);
}

static void st_free(StFile *f) {
    for (int i = 0; i < f->n; i++) free(f->name[i]), free(f->data[i]);
    free(f->name), free(f->shape), free(f->ndim), free(f->data);
    memset(f, 0, sizeof *f);
}

/* dir holds an adapter and no copy of the base */
static void expect_adapter_dir(const char *dir) {
    cr_assert(exists(J(dir, "adapter_model.safetensors")), "%s: no adapter_model.safetensors", dir);
    cr_assert(exists(J(dir, "adapter_config.json")), "%s: no adapter_config.json", dir);
    cr_assert(!exists(J(dir, "model.safetensors")), "%s: holds model.safetensors (a copy of the base)", dir);
    cr_assert(!exists(J(dir, "model.safetensors.index.json")), "%s: holds sharded base weights", dir);
}

/* the adapter's r from DIR/adapter_config.json */
static int adapter_r(const char *dir) {
    char *text = slurp(J(dir, "adapter_config.json"), NULL);
    cr_assert_not_null(text, "%s: no adapter_config.json", dir);
    cJSON *j = cJSON_Parse(text);
    free(text);
    int r = json_int(j, "r", -1);
    cJSON_Delete(j);
    return r;
}

/* checkpoint ck: the adapter (rank r_saved) and optimizer.safetensors with exactly exp_avg. and
 * exp_avg_sq. of every adapter key of the model (rank r, shapes from d), all finite, the second
 * moments >= 0; nothing named after a base tensor */
static void expect_lora_checkpoint(const char *ck, const Dims *d, int r, int r_saved, const char *base_dir) {
    expect_adapter_dir(ck);
    cr_assert(exists(J(ck, "trainer_state.json")), "%s: no trainer_state.json", ck);
    cr_assert_eq(adapter_r(ck), r_saved, "%s: adapter r", ck);
    StFile opt, base;
    st_load(J(ck, "optimizer.safetensors"), &opt);
    st_load(J(base_dir, "model.safetensors"), &base);
    Mod m[7];
    const int nm = llama_mods(d, m);
    cr_assert_eq(opt.n, 2 * 2 * d->L * nm, "%s/optimizer.safetensors: %d tensors, expected exp_avg and exp_avg_sq of %d "
                 "adapter tensors", ck, opt.n, 2 * d->L * nm);
    static const char *const moment[2] = {"exp_avg.", "exp_avg_sq."};
    for (int l = 0; l < d->L; l++)
        for (int k = 0; k < nm; k++)
            for (int b = 0; b < 2; b++)
                for (int s = 0; s < 2; s++) {
                    char key[256];
                    snprintf(key, sizeof key, "%sbase_model.model.model.layers.%d.%s.lora_%c.weight", moment[s], l, m[k].path,
                             b ? 'B' : 'A');
                    int i = st_find(&opt, key);
                    cr_assert_geq(i, 0, "%s/optimizer.safetensors: no %s", ck, key);
                    /* the moments are stored flat (checkpoint.c): the adapter's r x in or out x r elements */
                    const int64_t want0 = b ? m[k].out : r, want1 = b ? r : m[k].in;
                    cr_assert(st_numel(&opt, i) == want0 * want1 &&
                                  (opt.ndim[i] == 1 || (opt.ndim[i] == 2 && opt.shape[i][0] == want0)),
                              "%s: %s: %d dims, %lld elements, expected the %lld x %lld of the adapter", ck, key,
                              opt.ndim[i], (long long)st_numel(&opt, i), (long long)want0, (long long)want1);
                    for (int64_t e = 0; e < st_numel(&opt, i); e++)
                        cr_assert(isfinite(opt.data[i][e]) && (s == 0 || opt.data[i][e] >= 0), "%s: %s[%lld] = %g", ck,
                                  key, (long long)e, opt.data[i][e]);
                }
    for (int i = 0; i < base.n; i++)
        for (int s = 0; s < 2; s++) {
            char key[256];
            snprintf(key, sizeof key, "%s%s", moment[s], base.name[i]);
            cr_assert_lt(st_find(&opt, key), 0, "%s/optimizer.safetensors holds optimizer state of the base's %s", ck,
                         base.name[i]);
        }
    st_free(&opt);
    st_free(&base);
}

/* largest |a - b| over two adapters of the same keys and shapes; *scale the largest |a| */
static double adapter_diff(const char *fa, const char *fb, double *scale) {
    StFile a, b;
    st_load(fa, &a);
    st_load(fb, &b);
    cr_assert_eq(a.n, b.n, "%s and %s: %d and %d tensors", fa, fb, a.n, b.n);
    double md = 0, mx = 0;
    for (int i = 0; i < a.n; i++) {
        int j = st_find(&b, a.name[i]);
        cr_assert_geq(j, 0, "%s: no %s", fb, a.name[i]);
        cr_assert_eq(st_numel(&a, i), st_numel(&b, j), "%s: shapes differ", a.name[i]);
        for (int64_t e = 0; e < st_numel(&a, i); e++) {
            md = fmax(md, fabs((double)a.data[i][e] - (double)b.data[j][e]));
            mx = fmax(mx, fabs((double)a.data[i][e]));
        }
    }
    st_free(&a);
    st_free(&b);
    *scale = mx;
    return md;
}

/* ---------------------------------------------------------------- 1. resume */

static void expect_same_file(const char *a, const char *b) {
    cr_assert(exists(a), "no %s", a);
    cr_assert(files_equal(a, b), "%s differs from the unbroken run's %s", b, a);
}

/* the unbroken run into ref/, the resumed one from ref/checkpoint-SAVE into res/: the same files */
static void resume_case(Ws *w, const char *const *extra, int n_extra, bool pissa) {
    char ref[300], res[300], ck[320];
    snprintf(ref, sizeof ref, "%s/ref", w->dir);
    snprintf(res, sizeof res, "%s/res", w->dir);
    snprintf(ck, sizeof ck, "%s/checkpoint-%d", ref, SAVE);
    const char *sets[MAX_SETS];
    int n = 0;
    for (int i = 0; i < n_extra; i++) sets[n++] = extra[i];
    sets[n++] = kv("output_dir", ref);
    expect_exit(w, "ref", run_cfg(w, w->cfg, "ref", sets, n), 0);
    sets[n - 1] = kv("output_dir", res);
    sets[n++] = kv("resume_from_checkpoint", ck);
    expect_exit(w, "res", run_cfg(w, w->cfg, "res", sets, n), 0);
    char *o = read_log(w, "res", "out");
    cr_assert_not_null(strstr(o, "resumed from"), "the second run did not resume: %s", o);
    if (pissa)
        cr_assert_not_null(strstr(o, "initial PiSSA adapter rebuilt"), "the resumed PiSSA run did not rebuild pissa_init: %s", o);
    free(o);
    char res_path[320];
    snprintf(res_path, sizeof res_path, "%s/checkpoint-%d", res, SAVE);
    cr_assert(!exists(res_path), "%s: the resumed run saved its starting checkpoint again", res_path);

    /* the adapter, its config and every later checkpoint byte for byte */
    expect_adapter_dir(ref);
    expect_adapter_dir(res);
    expect_same_file(J(ref, "adapter_model.safetensors"), J(res, "adapter_model.safetensors"));
    expect_same_file(J(ref, "adapter_config.json"), J(res, "adapter_config.json"));
    static const int later[] = {2 * SAVE, STEPS};
    for (int i = 0; i < 2; i++) {
        const int s = later[i];
        char a[320], b[320];
        snprintf(a, sizeof a, "%s/checkpoint-%d", ref, s);
        snprintf(b, sizeof b, "%s/checkpoint-%d", res, s);
        static const char *const files[] = {"adapter_model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++) expect_same_file(J(a, files[f]), J(b, files[f]));
    }
    if (pissa) {
        const char *pa = J(ref, "pissa_init"), *pb = J(res, "pissa_init");
        expect_same_file(J(pa, "adapter_model.safetensors"), J(pb, "adapter_model.safetensors"));
        expect_same_file(J(pa, "adapter_config.json"), J(pb, "adapter_config.json"));
        cr_assert_eq(adapter_r(pb), R, "pissa_init: the initial adapter has rank r");
    }
    /* the losses after the checkpoint, to the bit */
    Losses a, b;
    read_train_metrics(ref, &a);
    read_train_metrics(res, &b);
    cr_assert_eq(a.n, STEPS);
    cr_assert_eq(b.n, STEPS);
    for (int s = SAVE; s < STEPS; s++)
        cr_assert(a.loss[s] == b.loss[s] && a.grad_norm[s] == b.grad_norm[s],
                  "step %d: loss %.17g / grad %.17g unbroken, %.17g / %.17g resumed", s + 1, a.loss[s], a.grad_norm[s],
                  b.loss[s], b.grad_norm[s]);

    /* only the adapters are trained and saved: PEFT keys of every module of every layer */
    Dims d = llama_dims(wpath(w, "model.json"));
    const int r_saved = pissa ? 2 * R : R;
    cr_assert_eq(adapter_r(ref), r_saved);
    expect_lora_checkpoint(ck, &d, R, r_saved, wpath(w, "base"));
    snprintf(ck, sizeof ck, "%s/checkpoint-%d", res, STEPS);
    expect_lora_checkpoint(ck, &d, R, r_saved, wpath(w, "base"));
}

Test(lora_runs, resume_with_dropout_into_another_output_dir_is_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    resume_case(&w, NULL, 0, false);
    /* the dropout is live (so the resumed run's masks were the unbroken run's): without it the adapter differs */
    const char *sets[] = {kv("output_dir", wpath(&w, "nodrop")), "lora.lora_dropout=0", "save_steps=0"};
    expect_exit(&w, "nodrop", run_cfg(&w, w.cfg, "nodrop", sets, 3), 0);
    cr_assert(!files_equal(J(wpath(&w, "ref"), "adapter_model.safetensors"),
                           J(wpath(&w, "nodrop"), "adapter_model.safetensors")),
              "lora_dropout 0.1 and 0 trained the same adapter: dropout is not applied");
    /* and the adapters moved: B starts at zero */
    StFile f;
    st_load(J(wpath(&w, "ref"), "adapter_model.safetensors"), &f);
    int ib = st_find(&f, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
    cr_assert_geq(ib, 0);
    double sum = 0;
    for (int64_t e = 0; e < st_numel(&f, ib); e++) sum += fabs(f.data[ib][e]);
    cr_assert_gt(sum, 0, "lora_B of down_proj is still zero after %d steps", STEPS);
    st_free(&f);
    ws_fini(&w);
}

Test(lora_runs, pissa_resume_into_another_output_dir_rebuilds_pissa_init_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const char *extra[] = {"lora.init_lora_weights=pissa_niter_2"};
    resume_case(&w, extra, 1, true);
    ws_fini(&w);
}

/* QPiSSA (PiSSA with lora.quantize_base nf4): the unbroken run takes the SVD of the full-precision W as
 * the base loads and quantizes the residual; the resumed one rebuilds that 4-bit residual from W and
 * the checkpoint's B0 A0: the same losses, adapters and initial adapter, bit for bit */
Test(lora_runs, qpissa_nf4_resume_into_another_output_dir_is_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const char *extra[] = {"lora.init_lora_weights=pissa_niter_2", "lora.quantize_base=nf4"};
    resume_case(&w, extra, 2, true);
    char *o = read_log(&w, "ref", "out"), *r = read_log(&w, "res", "out");
    cr_assert_not_null(strstr(o, "residual quantized (QPiSSA)"), "the unbroken run did not take QPiSSA's path: %s", o);
    cr_assert_not_null(strstr(r, "4-bit residual base rebuilt"), "the resumed run did not rebuild its 4-bit base: %s", r);
    free(o), free(r);
    ws_fini(&w);
}

Test(lora_runs, resume_with_accumulation_and_gradient_checkpointing_is_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const char *extra[] = {"per_device_train_batch_size=2", "gradient_accumulation_steps=2", "gradient_checkpointing=true"};
    resume_case(&w, extra, 3, false);
    char *o = read_log(&w, "res", "out");
    cr_assert_not_null(strstr(o, "= 2 x 1 x 2 = 4"), "not 2 micro-batches of 2: %s", o);
    cr_assert_not_null(strstr(o, "recompute every 1 layer"), "no gradient checkpointing: %s", o);
    free(o);
    ws_fini(&w);
}

/* exact PiSSA, stopped by SIGTERM while the SVD runs: checkpoint-0 holds the initial adapter, and a
 * run resumed from it into another output_dir is the unbroken run (the residual base is rebuilt
 * from the checkpoint, never the SVD taken again of the residual) */
Test(lora_runs, pissa_resumed_from_checkpoint_0_is_the_unbroken_run, .timeout = 120) {
    Ws w;
    lws_init(&w);
    write_llama_json(&w, "mid.json", 256, 512, 0); /* an exact SVD of ~0.3 s: a wide window for the signal */
    make_base(&w, "mid.json", "midbase");
    const char *common[] = {kv("model", wpath(&w, "midbase")), "lora.init_lora_weights=pissa", "lora.lora_dropout=0",
                            "max_steps=3", "save_steps=0"};
    const char *sets[8];
    int n = 0;
    for (int i = 0; i < 5; i++) sets[n++] = common[i];
    sets[n] = kv("output_dir", wpath(&w, "ref"));
    expect_exit(&w, "ref", run_cfg(&w, w.cfg, "ref", sets, n + 1), 0);
    bool got = false;
    char killed[300];
    for (int attempt = 0; attempt < 5 && !got; attempt++) {
        snprintf(killed, sizeof killed, "%s/killed%d", w.dir, attempt);
        sets[n] = kv("output_dir", killed);
        Proc p;
        start_v(&p, &w, w.cfg, NULL, "killed", sets, n + 1);
        /* the base is loaded just before the SVD: signal then */
        for (int i = 0; i < 20000; i++) {
            char *o = read_log(&w, "killed", "out");
            bool seen = strstr(o, "initialised from") != NULL;
            free(o);
            if (seen) break;
            int st;
            if (waitpid(p.pid, &st, WNOHANG) != 0) cr_assert_fail("the run ended before loading its base");
            sleep_s(0.0005);
        }
        kill(p.pid, SIGTERM);
        expect_exit(&w, "killed", wait_proc(&p), 0);
        got = exists(J(killed, "checkpoint-0"));
    }
    cr_assert(got, "5 SIGTERMs during loading left no checkpoint-0");
    char ck[320];
    snprintf(ck, sizeof ck, "%s/checkpoint-0", killed);
    sets[n] = kv("output_dir", wpath(&w, "res"));
    sets[n + 1] = kv("resume_from_checkpoint", ck);
    expect_exit(&w, "res", run_cfg(&w, w.cfg, "res", sets, n + 2), 0);
    char ref[300], res[300];
    snprintf(ref, sizeof ref, "%s/ref", w.dir);
    snprintf(res, sizeof res, "%s/res", w.dir);
    Losses a, b;
    read_train_metrics(ref, &a);
    read_train_metrics(res, &b);
    cr_assert_eq(b.n, 3);
    for (int s = 0; s < 3; s++)
        cr_assert(a.loss[s] == b.loss[s], "step %d: loss %.17g unbroken, %.17g resumed from checkpoint-0", s + 1, a.loss[s],
                  b.loss[s]);
    expect_same_file(J(ref, "adapter_model.safetensors"), J(res, "adapter_model.safetensors"));
    expect_same_file(J(J(ref, "pissa_init"), "adapter_model.safetensors"),
                     J(J(res, "pissa_init"), "adapter_model.safetensors"));
    ws_fini(&w);
}

static cJSON *read_json(const char *path);
static void write_init_configs(const Ws *w);

/* pissa_niter_0 (PEFT: any nonnegative number of iterations) runs, and the initial adapter it
 * writes says so and reads back (a run config and adapter_config.json accept the same values) */
Test(lora_runs, pissa_niter_0_writes_an_initial_adapter_that_reads_back, .timeout = 60) {
    Ws w;
    lws_init(&w);
    const char *sets[] = {kv("output_dir", wpath(&w, "ref")), "lora.init_lora_weights=pissa_niter_0", "max_steps=2",
                          "save_steps=0"};
    expect_exit(&w, "ref", run_cfg(&w, w.cfg, "ref", sets, 4), 0);
    char init[300];
    snprintf(init, sizeof init, "%s/ref/pissa_init", w.dir);
    cJSON *j = read_json(J(init, "adapter_config.json"));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "init_lora_weights");
    cr_assert(cJSON_IsString(v) && strcmp(v->valuestring, "pissa_niter_0") == 0, "%s: init_lora_weights", init);
    cJSON_Delete(j);
    cr_assert_eq(adapter_r(J(w.dir, "ref")), 2 * R);
    /* and it continues as an adapter (init_from reads it back through adapter_config.json) */
    write_init_configs(&w);
    const char *cont[] = {kv("lora.init_from", init), kv("output_dir", wpath(&w, "cont")), "max_steps=1"};
    expect_exit(&w, "cont", run_cfg(&w, wpath(&w, "init.yaml"), "cont", cont, 3), 0);
    ws_fini(&w);
}

/* gtrain sample on a LoRA run's output directory (its base_model_name_or_path with the adapter on)
 * continues a prompt greedily as gtrain merge's merged model does (merge is checked against a
 * float64 PyTorch merge in test_merge.c): a plain LoRA run, and a PiSSA run's rank-2r conversion
 * on the original base */
Test(lora_runs, sample_on_the_adapter_equals_sample_on_the_merged_model, .timeout = 120) {
    Ws w;
    lws_init(&w);
    for (int pissa = 0; pissa <= 1; pissa++) {
        char out[64], merged[64], tag[32];
        snprintf(out, sizeof out, "run%d", pissa);
        snprintf(merged, sizeof merged, "merged%d", pissa);
        snprintf(tag, sizeof tag, "run%d", pissa);
        const char *sets[] = {kv("output_dir", wpath(&w, out)), "max_steps=4", "save_steps=0",
                              pissa ? "lora.init_lora_weights=pissa_niter_2" : "lora.init_lora_weights=true"};
        expect_exit(&w, tag, run_cfg(&w, w.cfg, tag, sets, 4), 0);
        char cmd[2048], a[400], b[400];
        snprintf(cmd, sizeof cmd, "'%s' merge --base '%s' --adapter '%s' --out '%s' >/dev/null 2>&1", test_gtrain_bin(),
                 wpath(&w, "base"), wpath(&w, out), wpath(&w, merged));
        cr_assert_eq(system(cmd), 0, "gtrain merge of %s failed", out);
        snprintf(a, sizeof a, "%s/sample-%s.txt", w.dir, out);
        snprintf(b, sizeof b, "%s/sample-%s.txt", w.dir, merged);
        const char *dirs[2] = {out, merged}, *files[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            snprintf(cmd, sizeof cmd, "'%s' sample --checkpoint '%s' --prompt 'the king ' --max-new-tokens 24 "
                     "--temperature 0 > '%s' 2>/dev/null", test_gtrain_bin(), wpath(&w, dirs[k]), files[k]);
            cr_assert_eq(system(cmd), 0, "gtrain sample --checkpoint %s failed", dirs[k]);
        }
        size_t na = 0, nb = 0;
        char *ta = slurp(a, &na), *tb = slurp(b, &nb);
        cr_assert(na > strlen("the king "), "%s: no sample", a);
        cr_assert(na == nb && memcmp(ta, tb, na) == 0, "%s: the adapter's sample\n%.*s\nthe merged model's\n%.*s", out,
                  (int)na, ta, (int)nb, tb);
        /* and the adapter matters: the base alone continues otherwise (else this test could not fail) */
        char c[400];
        snprintf(c, sizeof c, "%s/sample-base.txt", w.dir);
        snprintf(cmd, sizeof cmd, "'%s' sample --checkpoint '%s' --prompt 'the king ' --max-new-tokens 24 "
                 "--temperature 0 > '%s' 2>/dev/null", test_gtrain_bin(), wpath(&w, "base"), c);
        cr_assert_eq(system(cmd), 0, "gtrain sample --checkpoint base failed");
        size_t nc = 0;
        char *tc = slurp(c, &nc);
        cr_assert(nc != na || memcmp(tc, ta, na) != 0, "%s: the adapter's sample is the base's:\n%.*s", out, (int)na, ta);
        free(ta), free(tb), free(tc);
    }
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 2. data parallel */

typedef struct {
    char mpirun[512];
} Mpi;

static void need_mpi(Mpi *m) {
    const char *path = getenv("PATH");
    bool found = false;
    char *copy = strdup(path ? path : ""), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        snprintf(m->mpirun, sizeof m->mpirun, "%s/mpirun", *d ? d : ".");
        found = access(m->mpirun, X_OK) == 0;
    }
    free(copy);
    if (!found) cr_skip_test("mpirun not found on PATH (install openmpi-bin)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null | grep -q 'dist:.*mpi'", test_gtrain_bin());
    if (system(cmd) != 0) cr_skip_test("gtrain --version does not list mpi (built with MPI=0)");
}

/* 2 ranks under mpirun (as test_dist.c launches them), stdout/stderr to dir/tag.{out,err}; the
 * whole process group is killed after limit_s */
static int run_mpi(const Ws *w, const Mpi *m, const char *tag, const char *const *sets, int n, double limit_s) {
    char out[320], err[320];
    snprintf(out, sizeof out, "%s/%s.out", w->dir, tag);
    snprintf(err, sizeof err, "%s/%s.err", w->dir, tag);
    const char *argv[64];
    int a = 0;
    const char *pre[] = {m->mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS=1",
                         "-x", "ASAN_OPTIONS=detect_leaks=0", test_gtrain_bin(), "--config", w->cfg};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) argv[a++] = pre[i];
    for (int i = 0; i < n && a < 60; i++) argv[a++] = "--set", argv[a++] = sets[i];
    argv[a] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid);
    const double t0 = now_s();
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) break;
        cr_assert(r == 0 || errno == EINTR, "waitpid: %s", strerror(errno));
        if (now_s() - t0 > limit_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            cr_assert_fail("%s: mpirun still running after %.0f s", tag, limit_s);
        }
        sleep_s(0.01);
    }
    return st;
}

/* test_dist.c's bound: float32 rounding of sums taken in another order, grown over the steps */
#define LOSS_RTOL 1e-5

static void expect_same_losses(const char *what, const Losses *a, const Losses *b) {
    cr_assert_eq(a->n, b->n, "%s: %d and %d steps", what, a->n, b->n);
    for (int s = 0; s < a->n; s++) {
        cr_assert_leq(fabs(a->loss[s] - b->loss[s]), LOSS_RTOL * fmax(1.0, fabs(a->loss[s])),
                      "%s: step %d: loss %.9g vs %.9g", what, s + 1, a->loss[s], b->loss[s]);
        cr_assert_leq(fabs(a->grad_norm[s] - b->grad_norm[s]), LOSS_RTOL * a->grad_norm[s],
                      "%s: step %d: grad norm %.9g vs %.9g", what, s + 1, a->grad_norm[s], b->grad_norm[s]);
        cr_assert_eq(a->num_items[s], b->num_items[s], "%s: step %d: num_items", what, s + 1);
        cr_assert_eq(a->effective_batch[s], b->effective_batch[s], "%s: step %d: effective batch", what, s + 1);
    }
}

/* The same adapter, element by element, to 1e-4 of its largest element: AdamW divides each
 * gradient by its own running RMS, so an element whose gradient is near zero can move by a few
 * times the float rounding of the other order of summation (measured: 5.4e-7 of 0.147, 1 rank
 * against 2, plain and ZeRO-1 alike); what the adapter does is checked by the final eval loss. */
#define ADAPTER_RTOL 1e-4

static void expect_same_adapter(const char *what, const char *da, const char *db) {
    double scale, d = adapter_diff(J(da, "adapter_model.safetensors"), J(db, "adapter_model.safetensors"),
                                   &scale);
    cr_assert_gt(scale, 0);
    cr_assert_leq(d, ADAPTER_RTOL * scale, "%s: adapters differ by %.3g (largest element %.3g)", what, d, scale);
    cr_log_info("%s: adapters differ by at most %.3g (largest element %.3g)", what, d, scale);
}

/* 1 rank x 4 against 2 ranks x 2 (plain) and a second 2-rank layout (ZeRO-1: 2 x 2, or with
 * accumulate 2 x 1 x 2 accumulation steps), drop the --set of lora.lora_dropout:
 * the same losses, gradient norms, final eval loss and adapter (the one rank's in w/one) */
static void two_ranks_match_one(Ws *w, const Mpi *m, const char *drop, bool accumulate) {
    const char *one[] = {kv("output_dir", wpath(w, "one")), drop, "per_device_train_batch_size=4", "save_steps=0"};
    expect_exit(w, "one", run_cfg(w, w->cfg, "one", one, 4), 0);
    const char *two[] = {kv("output_dir", wpath(w, "two")), drop, "per_device_train_batch_size=2", "save_steps=0",
                         "zero_stage=0", "gradient_accumulation_steps=1"};
    expect_exit(w, "two", run_mpi(w, m, "two", two, 6, 120), 0);
    two[0] = kv("output_dir", wpath(w, "zero1"));
    two[4] = "zero_stage=1";
    if (accumulate) two[2] = "per_device_train_batch_size=1", two[5] = "gradient_accumulation_steps=2";
    expect_exit(w, "zero1", run_mpi(w, m, "zero1", two, 6, 120), 0);
    char *o = read_log(w, "zero1", "out");
    const char *layout = accumulate ? "= 1 x 2 x 2 = 4" : "= 2 x 2 x 1 = 4";
    cr_assert_not_null(strstr(o, layout), "not %s: %s", layout, o);
    cr_assert_not_null(strstr(o, "ZeRO-1"), "no ZeRO-1 optimizer shards: %s", o);
    free(o);
    char what[2][160];
    snprintf(what[0], sizeof what[0], "1 rank x 4 vs 2 ranks x 2, %s", drop);
    snprintf(what[1], sizeof what[1], "1 rank x 4 vs 2 ranks x %s, ZeRO-1, %s", accumulate ? "1 x 2 steps" : "2", drop);
    Losses l1, l2, lz;
    read_train_metrics(wpath(w, "one"), &l1);
    read_train_metrics(wpath(w, "two"), &l2);
    read_train_metrics(wpath(w, "zero1"), &lz);
    cr_assert_eq(l1.n, STEPS);
    expect_same_losses(what[0], &l1, &l2);
    expect_same_losses(what[1], &l1, &lz);
    double worst = 0;
    for (int s = 0; s < l1.n; s++)
        worst = fmax(worst, fmax(fabs(l1.loss[s] - l2.loss[s]), fabs(l1.loss[s] - lz.loss[s])) / fabs(l1.loss[s]));
    cr_log_info("%s: losses within %.3g (relative) over %d steps", what[1], worst, l1.n);
    /* the final eval: what the saved adapter does, over the same validation windows */
    cr_assert(l1.n_eval == 1 && l2.n_eval == 1 && lz.n_eval == 1, "one eval at the end of each run");
    cr_assert_leq(fabs(l1.eval_loss[0] - l2.eval_loss[0]), LOSS_RTOL * l1.eval_loss[0], "%s: eval loss %.9g vs %.9g",
                  what[0], l1.eval_loss[0], l2.eval_loss[0]);
    cr_assert_leq(fabs(l1.eval_loss[0] - lz.eval_loss[0]), LOSS_RTOL * l1.eval_loss[0], "%s: eval loss %.9g vs %.9g",
                  what[1], l1.eval_loss[0], lz.eval_loss[0]);
    expect_adapter_dir(wpath(w, "two"));
    expect_adapter_dir(wpath(w, "zero1"));
    expect_same_adapter(what[0], wpath(w, "one"), wpath(w, "two"));
    expect_same_adapter(what[1], wpath(w, "one"), wpath(w, "zero1"));
}

Test(lora_runs, two_ranks_equal_one_rank_with_the_same_effective_batch, .timeout = 180) {
    Mpi m;
    need_mpi(&m);
    Ws w;
    lws_init(&w);
    two_ranks_match_one(&w, &m, "lora.lora_dropout=0", false);
    ws_fini(&w);
}

/* with dropout: rank r's micro-batch a drops its rows as rows (a * world + r) * B .. of the step's
 * batch, which the one rank's micro-batch holds at the same place, so the masks are the one
 * rank's; and the dropout is live (the adapter differs from the dropout-0 run's, far beyond the
 * bound) */
Test(lora_runs, two_ranks_equal_one_rank_with_dropout, .timeout = 240) {
    Mpi m;
    need_mpi(&m);
    Ws w;
    lws_init(&w);
    two_ranks_match_one(&w, &m, "lora.lora_dropout=0.1", true);
    const char *nodrop[] = {kv("output_dir", wpath(&w, "nodrop")), "lora.lora_dropout=0",
                            "per_device_train_batch_size=4", "save_steps=0"};
    expect_exit(&w, "nodrop", run_cfg(&w, w.cfg, "nodrop", nodrop, 4), 0);
    double scale, d = adapter_diff(J(wpath(&w, "one"), "adapter_model.safetensors"),
                                   J(wpath(&w, "nodrop"), "adapter_model.safetensors"), &scale);
    cr_assert_gt(d, 100 * ADAPTER_RTOL * scale, "lora_dropout 0.1 and 0 trained adapters within %.3g (largest %.3g): "
                 "dropout is not applied", d, scale);
    ws_fini(&w);
}

/* ZeRO-1 gathers the adapters' AdamW shards into the checkpoint and scatters them on resume */
Test(lora_runs, two_rank_zero1_resume_with_dropout_is_bit_exact, .timeout = 180) {
    Mpi m;
    need_mpi(&m);
    Ws w;
    lws_init(&w);
    char ck[320];
    snprintf(ck, sizeof ck, "%s/ref/checkpoint-%d", w.dir, SAVE);
    const char *sets[] = {kv("output_dir", wpath(&w, "ref")), "per_device_train_batch_size=2", "zero_stage=1",
                          "resume_from_checkpoint="};
    expect_exit(&w, "ref", run_mpi(&w, &m, "ref", sets, 3, 120), 0);
    sets[0] = kv("output_dir", wpath(&w, "res"));
    sets[3] = kv("resume_from_checkpoint", ck);
    expect_exit(&w, "res", run_mpi(&w, &m, "res", sets, 4, 120), 0);
    char ref[300], res[300];
    snprintf(ref, sizeof ref, "%s/ref", w.dir);
    snprintf(res, sizeof res, "%s/res", w.dir);
    expect_same_file(J(ref, "adapter_model.safetensors"), J(res, "adapter_model.safetensors"));
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/checkpoint-%d/optimizer.safetensors", ref, STEPS);
    snprintf(b, sizeof b, "%s/checkpoint-%d/optimizer.safetensors", res, STEPS);
    expect_same_file(a, b);
    Dims d = llama_dims(wpath(&w, "model.json"));
    expect_lora_checkpoint(ck, &d, R, R, wpath(&w, "base"));
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 3. hostile adapters */

typedef void (*Mutate)(const Ws *w, const char *dir);

static cJSON *read_json(const char *path) {
    char *text = slurp(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j, "%s: not JSON", path);
    return j;
}

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

/* lora: with init_from alone (given by --set): r, alpha and the modules are the adapter's */
static const char INIT_YAML_TAIL[] = "lora:\n  lora_dropout: 0.0\n";
/* lora.r given in the YAML, disagreeing with the adapter's 4 */
static const char INIT_R_YAML_TAIL[] = "lora:\n  r: 8\n  lora_alpha: 8\n";

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

static void write_init_configs(const Ws *w) {
    char text[2048];
    const char *lora = strstr(LORA_YAML, "lora:\n");
    cr_assert_not_null(lora);
    int head = (int)(lora - LORA_YAML);
    snprintf(text, sizeof text, "%.*s%s", head, LORA_YAML, INIT_YAML_TAIL);
    write_text(w, "init.yaml", text);
    snprintf(text, sizeof text, "%.*s%s", head, LORA_YAML, INIT_R_YAML_TAIL);
    write_text(w, "init_r.yaml", text);
    /* BAD's file:line for init_r.yaml: lora.r is its line 24 */
    char *t = slurp(wpath(w, "init_r.yaml"), NULL);
    int line = 1;
    for (const char *p = t; p < strstr(t, "  r: 8"); p++) line += *p == '\n';
    free(t);
    cr_assert_eq(line, 24, "init_r.yaml: lora.r is on line %d", line);
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
