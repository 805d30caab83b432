/* test_silent.c - issue 24's silent wrong results, through the binary: a model directory without
 * weights (refused unless init: random, and the "weights:" line every run prints, checked against
 * the file's own header); non-finite weights refused at load naming the tensor (a base, a LoRA
 * run's base, init_from, merge's base and adapter) and a merge whose W + s B A overflows; a run whose
 * every step was skipped is a failure that saves nothing; the config.json a checkpoint saves is the
 * one read at start, though the file is edited during the run; gtrain sample reads no tokenizer
 * from a neighbouring directory; an unconverted PiSSA adapter ("pissa" and "pissa_niter_N" alike)
 * refused by merge and lora.init_from; BOS/EOS/PAD as transformers' AutoTokenizer reports them for
 * the real tokenizers (tests/tools/hf_special_tokens.py), and the later sources HF defines. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "safetensors.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "tok_hf_util.h"
#include "tokenizer.h"

/* ---------------------------------------------------------------- helpers */

/* Rewrite the .safetensors at path (as F32) with tensor name's element idx (-1: every element) set to v. */
static void poke(const char *path, const char *name, long idx, float v) {
    SafeTensors *in = NULL;
    GtError err = {0};
    cr_assert_eq(safetensors_open(&in, path, &err), 0, "%s", err.msg);
    int n = safetensors_count(in);
    StTensorOut *ts = calloc((size_t)n, sizeof *ts);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    char **names = calloc((size_t)n, sizeof *names);
    cr_assert(ts && bufs && names);
    bool found = false;
    for (int i = 0; i < n; i++) {
        int64_t numel = safetensors_numel(in, i);
        bufs[i] = malloc((size_t)(numel ? numel : 1) * sizeof(float));
        names[i] = strdup(safetensors_name(in, i));
        cr_assert(bufs[i] && names[i]);
        cr_assert_eq(safetensors_read_f32(in, i, bufs[i], (size_t)numel, &err), 0, "%s", err.msg);
        ts[i].name = names[i];
        ts[i].dtype = ST_F32;
        safetensors_shape(in, i, ts[i].shape, &ts[i].ndim);
        ts[i].data = bufs[i];
        if (strcmp(names[i], name) == 0) {
            found = true;
            for (int64_t k = 0; k < numel; k++)
                if (idx < 0 || k == idx) bufs[i][k] = v;
        }
    }
    safetensors_close(in);
    cr_assert(found, "no tensor %s in %s", name, path);
    cr_assert_eq(safetensors_write(path, ts, n, NULL, 0, &err), 0, "%s", err.msg);
    for (int i = 0; i < n; i++) free(bufs[i]), free(names[i]);
    free(bufs), free(names), free(ts);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    free(test_sh_voutput(true, fmt, ap));
    va_end(ap);
}

static const char *wpath(const Ws *w, const char *name) { return test_join(w->dir, name); }

static char *kv(const char *key, const char *value) {
    static char buf[8][1200];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s=%s", key, value);
    return b;
}

/* the fixture trained one step into w->dir/NAME: a GPT-2 model directory (config.json, model.safetensors) */
static void make_model_dir(const Ws *w, const char *name) {
    int st = run(w, NULL, name, "max_steps=1", "save_steps=0", kv("output_dir", wpath(w, name)), NULL);
    expect_exit(w, name, st, 0);
}

/* a copy of model directory src as dst (its config.json and model.safetensors) */
static void copy_model_dir(const Ws *w, const char *src, const char *dst) {
    char a[600], b[600];
    snprintf(a, sizeof a, "%s", wpath(w, dst));
    cr_assert_eq(mkdir(a, 0755), 0);
    snprintf(b, sizeof b, "%s", wpath(w, src));
    copy_file(test_join(b, "config.json"), test_join(a, "config.json"));
    copy_file(test_join(b, "model.safetensors"), test_join(a, "model.safetensors"));
}

/* ---------------------------------------------------------------- 1. a model directory without weights */

Test(silent, model_dir_without_weights_is_refused_unless_init_random, .timeout = 120) {
    Ws w;
    ws_init(&w);
    make_model_dir(&w, "m");
    char nw[400];
    snprintf(nw, sizeof nw, "%s", wpath(&w, "noweights"));
    cr_assert_eq(mkdir(nw, 0755), 0);
    copy_file(test_join(wpath(&w, "m"), "config.json"), test_join(nw, "config.json"));

    /* an interrupted download: config.json alone */
    int st = run(&w, NULL, "cfgonly", kv("model", nw), NULL);
    expect_one_line(&w, "cfgonly", st, 2, "model", "init: random");
    char *e = read_log(&w, "cfgonly", "err");
    cr_assert_not_null(strstr(e, "only config.json"), "the line must say what was found: %s", e);
    cr_assert_not_null(strstr(e, "model.safetensors"), "the line must say what was expected: %s", e);
    free(e);
    cr_assert(!exists(w.out), "a refused run created its output_dir");
    /* PyTorch's pickle weights only */
    put_file(test_join(nw, "pytorch_model.bin"), "not read", 8);
    st = run(&w, NULL, "bin", kv("model", nw), NULL);
    expect_one_line(&w, "bin", st, 2, "pytorch_model.bin", "init: random");
    cr_assert(!exists(w.out), "a refused run created its output_dir");
    /* gtrain plan refuses it too (config time) */
    /* random init when asked for, said so */
    st = run(&w, NULL, "random", kv("model", nw), "init=random", "max_steps=1", NULL);
    expect_exit(&w, "random", st, 0);
    char *o = read_log(&w, "random", "out");
    cr_assert_not_null(strstr(o, "weights: random init"), "no line saying random init: %s", o);
    free(o);
    /* init: random names no weights; init: pretrained needs some */
    st = run(&w, NULL, "both", kv("model", nw), "init=random", kv("init_from", wpath(&w, "m")), NULL);
    expect_one_line(&w, "both", st, 2, "init", "init_from");
    st = run(&w, NULL, "pre", "init=pretrained", NULL); /* the fixture's model is a config file */
    expect_one_line(&w, "pre", st, 2, "init", "init_from");

    /* a directory with weights: the line names the file, and its tensors, parameters and dtype
     * as the file's own header counts them */
    char mf[500];
    snprintf(mf, sizeof mf, "%s", test_join(wpath(&w, "m"), "model.safetensors"));
    SafeTensors *s = NULL;
    GtError err = {0};
    cr_assert_eq(safetensors_open(&s, mf, &err), 0, "%s", err.msg);
    long long params = 0;
    int tensors = safetensors_count(s);
    for (int i = 0; i < tensors; i++) params += safetensors_numel(s, i);
    safetensors_close(s);
    st = run(&w, NULL, "pretrained", kv("model", wpath(&w, "m")), "max_steps=1", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "pretrained", st, 0);
    o = read_log(&w, "pretrained", "out");
    char want[700];
    snprintf(want, sizeof want, "weights: initialised from %s: %d tensors, %lld parameters, F32, 1 file\n", mf, tensors, params);
    cr_assert_not_null(strstr(o, want), "expected \"%s\" in: %s", want, o);
    free(o);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 2. non-finite weights */

Test(silent, nonfinite_weights_are_refused_at_load_naming_the_tensor, .timeout = 120) {
    Ws w;
    ws_init(&w);
    make_model_dir(&w, "m");
    copy_model_dir(&w, "m", "nan");
    poke(test_join(wpath(&w, "nan"), "model.safetensors"), "transformer.ln_f.weight", 3, NAN);
    copy_model_dir(&w, "m", "inf");
    poke(test_join(wpath(&w, "inf"), "model.safetensors"), "transformer.wte.weight", 100, -INFINITY);
    char nanfile[500];
    snprintf(nanfile, sizeof nanfile, "%s", test_join(wpath(&w, "nan"), "model.safetensors"));

    int st = run(&w, NULL, "nan", kv("model", wpath(&w, "nan")), NULL);
    expect_one_line(&w, "nan", st, 2, nanfile, "tensor transformer.ln_f.weight: element 3: expected a finite weight");
    cr_assert(!exists(w.out), "a refused run created its output_dir");
    st = run(&w, NULL, "inf", kv("model", wpath(&w, "inf")), NULL);
    expect_one_line(&w, "inf", st, 2, "transformer.wte.weight", "element 100");
    st = run(&w, NULL, "initfrom", kv("init_from", nanfile), NULL);
    expect_one_line(&w, "initfrom", st, 2, nanfile, "transformer.ln_f.weight");
    /* a LoRA run on that base: refused at load, no adapter written */
    st = run(&w, NULL, "lora", kv("model", wpath(&w, "nan")), "lora.r=2", "lora.target_modules=c_attn", NULL);
    expect_one_line(&w, "lora", st, 2, nanfile, "transformer.ln_f.weight");
    cr_assert(!exists(test_join(w.out, "adapter_model.safetensors")), "an adapter was written for a NaN base");
    ws_fini(&w);
}

/* Finite weights whose forward overflows (ln_f scaled to 3e38): every step is skipped; a run that
 * trained nothing is not a success and saves no weights */
Test(silent, a_run_whose_every_step_was_skipped_fails_and_saves_nothing, .timeout = 120) {
    Ws w;
    ws_init(&w);
    make_model_dir(&w, "m");
    copy_model_dir(&w, "m", "huge");
    poke(test_join(wpath(&w, "huge"), "model.safetensors"), "transformer.ln_f.weight", -1, 3e38f);
    int st = run(&w, NULL, "huge", kv("model", wpath(&w, "huge")), "max_steps=3", "save_steps=0", "max_skipped_steps=0",
                 NULL);
    expect_exit(&w, "huge", st, 1);
    char *e = read_log(&w, "huge", "err");
    cr_assert_eq(count_substr(e, "step skipped"), 3, "expected 3 skipped steps: %s", e);
    const char *last = strstr(e, "gtrain: ");
    cr_assert_not_null(last, "no final error line: %s", e);
    cr_assert_not_null(strstr(last, "nothing was trained"), "the final line must say nothing was trained: %s", e);
    free(e);
    cr_assert(!exists(test_join(w.out, "model.safetensors")), "a run that trained nothing saved weights");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 3. config.json read once */

Test(silent, the_saved_config_json_is_the_one_read_at_start, .timeout = 120) {
    Ws w;
    ws_init(&w);
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert_not_null(root, "GTRAIN_ROOT is not set (run through make test)");
    char dir[400], cfg[600];
    snprintf(dir, sizeof dir, "%s", wpath(&w, "llama"));
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(cfg, sizeof cfg, "%s/tests/fixtures/hf_configs/tiny-llama.json", root);
    copy_file(cfg, test_join(dir, "config.json"));
    Proc p;
    const char *sets[] = {kv("model", dir), "init=random", "max_steps=60", "save_steps=20"};
    start_v(&p, &w, w.cfg, NULL, "edit", sets, 4);
    wait_for_step(&p, &w, "edit");
    const char *edited = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                         "\"vocab_size\": 256, \"max_position_embeddings\": 256, \"rms_norm_eps\": 0.5, "
                         "\"edited_during_the_run\": true}\n";
    put_file(test_join(dir, "config.json"), edited, strlen(edited));
    int st = wait_proc(&p);
    expect_exit(&w, "edit", st, 0);
    const char *saved[] = {"config.json", "checkpoint-20/config.json", "checkpoint-40/config.json",
                           "checkpoint-60/config.json"};
    bool late = false;
    for (size_t i = 0; i < sizeof saved / sizeof *saved; i++) {
        char *t = slurp(test_join(w.out, saved[i]), NULL);
        cr_assert_not_null(t, "no %s", saved[i]);
        cJSON *j = cJSON_Parse(t);
        cr_assert(cJSON_IsObject(j), "%s is not a JSON object", saved[i]);
        cr_assert_null(cJSON_GetObjectItemCaseSensitive(j, "edited_during_the_run"), "%s is the edited file", saved[i]);
        const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
        cr_assert(cJSON_IsNumber(eps) && eps->valuedouble == 1e-05, "%s: rms_norm_eps is not the trained model's", saved[i]);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "torch_dtype");
        cr_assert(cJSON_IsString(dt) && strcmp(dt->valuestring, "float32") == 0, "%s: torch_dtype", saved[i]);
        late = late || i > 0;
        cJSON_Delete(j);
        free(t);
    }
    cr_assert(late);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 4. sample's tokenizer */

/* gtrain sample ARGS > dir/tag.out; its exit status */
static int sample(const Ws *w, const char *tag, const char *checkpoint) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "'%s' sample --checkpoint '%s' --prompt-ids 1,2,3 --max-new-tokens 12 --temperature 0 "
             ">'%s/%s.out' 2>'%s/%s.err'", test_gtrain_bin(), checkpoint, w->dir, tag, w->dir, tag);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

Test(silent, sample_reads_only_the_checkpoints_own_tokenizer, .timeout = 120) {
    Ws w;
    ws_init(&w);
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert_not_null(root, "GTRAIN_ROOT is not set (run through make test)");
    char tok[600];
    snprintf(tok, sizeof tok, "%s/tests/fixtures/tokenizer/tiny-bpe/tokenizer.json", root);
    /* a run without a tokenizer: its checkpoint samples ids */
    int st = run(&w, NULL, "plain", "max_steps=2", NULL);
    expect_exit(&w, "plain", st, 0);
    char ck[400];
    snprintf(ck, sizeof ck, "%s", test_join(w.out, "checkpoint-2"));
    cr_assert_eq(sample(&w, "before", ck), 0, "%s", read_log(&w, "before", "err"));
    cr_assert_eq(sample(&w, "run_before", w.out), 0, "%s", read_log(&w, "run_before", "err"));
    /* a tokenizer.json appears in the directories around it: nothing changes */
    copy_file(tok, test_join(w.out, "tokenizer.json"));
    copy_file(tok, test_join(w.dir, "tokenizer.json"));
    cr_assert_eq(sample(&w, "after", ck), 0, "%s", read_log(&w, "after", "err"));
    char *a = read_log(&w, "before", "out"), *b = read_log(&w, "after", "out");
    cr_assert(strlen(a) > 6, "no sample: %s", a);
    cr_assert_str_eq(b, a, "the sample of %s changed with a tokenizer.json in its parent directory", ck);
    free(a), free(b);
    unlink(test_join(w.out, "tokenizer.json"));
    cr_assert_eq(sample(&w, "run_after", w.out), 0, "%s", read_log(&w, "run_after", "err"));
    a = read_log(&w, "run_before", "out"), b = read_log(&w, "run_after", "out");
    cr_assert_str_eq(b, a, "the sample of %s changed with a tokenizer.json in its parent directory", w.out);
    free(a), free(b);

    /* a run with a tokenizer keeps it in every checkpoint, as read at start */
    const char *m300 = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"vocab_size\": 300, "
                       "\"n_positions\": 32}\n";
    put_file(wpath(&w, "model300.json"), m300, strlen(m300));
    st = run(&w, NULL, "tok", "max_steps=2", kv("model", wpath(&w, "model300.json")), kv("tokenizer", tok),
             kv("output_dir", wpath(&w, "out-tok")), NULL);
    expect_exit(&w, "tok", st, 0);
    cr_assert(files_equal(test_join(wpath(&w, "out-tok"), "checkpoint-2/tokenizer.json"), tok),
              "checkpoint-2 does not hold the run's tokenizer.json");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 5. merge and adapters (PEFT's files) */

static int gtrain_cmd(const char *dir, const char *tag, const char *args) {
    char cmd[6000];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/%s.out' 2>'%s/%s.err'", test_gtrain_bin(), args, dir, tag, dir, tag);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void expect_line(const char *dir, const char *tag, int st, int code, const char *n1, const char *n2) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s.err", dir, tag);
    char *e = slurp(p, NULL);
    cr_assert_not_null(e);
    cr_assert_eq(st, code, "%s: exit %d, expected %d: %s", tag, st, code, e);
    cr_assert(strncmp(e, "gtrain: ", 8) == 0 && count_lines(e) == 1, "%s: not one line: %s", tag, e);
    cr_assert_not_null(strstr(e, n1), "%s: does not name %s: %s", tag, n1, e);
    cr_assert_not_null(strstr(e, n2), "%s: does not name %s: %s", tag, n2, e);
    free(e);
}

/* no entry of dir whose name starts with prefix */
static void assert_none_like(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    cr_assert(d);
    for (struct dirent *de; (de = readdir(d));)
        cr_assert(strncmp(de->d_name, prefix, strlen(prefix)) != 0, "%s/%s was left behind", dir, de->d_name);
    closedir(d);
}

static void replace_text(const char *path, const char *old, const char *new) {
    char *t = slurp(path, NULL);
    cr_assert_not_null(t);
    char *at = strstr(t, old);
    cr_assert(at, "%s: no \"%s\"", path, old);
    size_t n = strlen(t) + strlen(new) + 1;
    char *out = malloc(n);
    cr_assert(out);
    snprintf(out, n, "%.*s%s%s", (int)(at - t), t, new, at + strlen(old));
    put_file(path, out, strlen(out));
    free(out), free(t);
}

Test(silent, merge_and_init_from_refuse_nonfinite_and_unconverted_pissa_adapters, .timeout = 300) {
    test_require_refs();
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert_not_null(root, "GTRAIN_ROOT is not set (run through make test)");
    char dir[256], args[3000];
    test_scratch_make(dir, sizeof dir, "gt_silent_merge");
    const char *ref = "tests/tools/peft_merge_ref.py";
    sh("cd '%s' && " PY " tests/tools/hf_models.py make tests/fixtures/hf_configs/tiny-llama.json '%s/base' --seed 2 && "
       PY " %s adapter '%s/base' '%s/good' --targets q_proj,down_proj --r 4",
       root, dir, ref, dir, dir);
    const char *A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    const char *B = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
#define MERGE(ad, base) \
    snprintf(args, sizeof args, "merge --base '%s/%s' --adapter '%s/%s' --out '%s/out'", dir, base, dir, ad, dir)
    MERGE("good", "base");
    cr_assert_eq(gtrain_cmd(dir, "good", args), 0, "the good adapter does not merge");
    rm_tree(test_join(dir, "out"));

    /* a NaN in the adapter */
    sh("cp -r '%s/good' '%s/nan'", dir, dir);
    poke(test_join(dir, "nan/adapter_model.safetensors"), A, 5, NAN);
    MERGE("nan", "base");
    expect_line(dir, "nan", gtrain_cmd(dir, "nan", args), 2, "nan/adapter_model.safetensors", A);
    cr_assert(!exists(test_join(dir, "out")));
    assert_none_like(dir, ".out.merge-");
    /* values whose product overflows float: W + s B A is not finite */
    sh("cp -r '%s/good' '%s/big'", dir, dir);
    poke(test_join(dir, "big/adapter_model.safetensors"), A, -1, 1e30f);
    poke(test_join(dir, "big/adapter_model.safetensors"), B, -1, 1e30f);
    MERGE("big", "base");
    expect_line(dir, "big", gtrain_cmd(dir, "big", args), 2, "model.layers.0.self_attn.q_proj.weight",
                "expected a finite merged weight");
    cr_assert(!exists(test_join(dir, "out")));
    assert_none_like(dir, ".out.merge-");
    /* a NaN in the base */
    sh("cp -r '%s/base' '%s/nanbase'", dir, dir);
    poke(test_join(dir, "nanbase/model.safetensors"), "model.norm.weight", 0, NAN);
    MERGE("good", "nanbase");
    expect_line(dir, "nanbase", gtrain_cmd(dir, "nanbase", args), 2, "nanbase/model.safetensors", "model.norm.weight");
    cr_assert(!exists(test_join(dir, "out")));

    /* unconverted PiSSA adapters, exact and randomised alike: merge and lora.init_from apply them as
     * given, each with the same warning naming the file and init_lora_weights */
    const char *inits[] = {"\"pissa\"", "\"pissa_niter_4\""};
    char yaml[3000], data[300];
    snprintf(data, sizeof data, "%s/train.txt", dir);
    FILE *f = fopen(data, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fprintf(f, "line %d of some text to train on\n", i);
    fclose(f);
    for (int k = 0; k < 2; k++) {
        char name[32], repl[64], cfile[400], tag[40], yp[400];
        snprintf(name, sizeof name, "pissa%d", k);
        sh("cp -r '%s/good' '%s/%s'", dir, dir, name);
        snprintf(repl, sizeof repl, "\"init_lora_weights\": %s", inits[k]);
        replace_text(test_join(test_join(dir, name), "adapter_config.json"), "\"init_lora_weights\": true", repl);
        snprintf(cfile, sizeof cfile, "%s/%s/adapter_config.json: init_lora_weights is %s: an unconverted PiSSA adapter",
                 dir, name, inits[k]);
        MERGE(name, "base");
        cr_assert_eq(gtrain_cmd(dir, name, args), 0, "%s: the merge failed", name);
        rm_tree(test_join(dir, "out"));
        snprintf(yaml, sizeof yaml,
                 "model: %s/base\ndata:\n  train: %s\n  seq_len: 16\nper_device_train_batch_size: 2\nmax_steps: 1\n"
                 "save_steps: 0\nnum_threads: 1\noutput_dir: %s/run-%s\nsample_max_new_tokens: 0\n"
                 "lora:\n  r: 4\n  lora_alpha: 8\n  target_modules: [q_proj, down_proj]\n  init_from: %s/%s\n",
                 dir, data, dir, name, dir, name);
        snprintf(yp, sizeof yp, "%s/%s.yaml", dir, name);
        put_file(yp, yaml, strlen(yaml));
        snprintf(args, sizeof args, "--config '%s'", yp);
        snprintf(tag, sizeof tag, "init-%s", name);
        cr_assert_eq(gtrain_cmd(dir, tag, args), 0, "%s: the run failed", tag);
        const char *tags[] = {name, tag};
        for (int q = 0; q < 2; q++) {
            char p[500];
            snprintf(p, sizeof p, "%s/%s.err", dir, tags[q]);
            char *e = slurp(p, NULL);
            cr_assert_not_null(e);
            cr_assert_eq(count_substr(e, cfile), 1, "%s: expected one warning \"%s\" in: %s", tags[q], cfile, e);
            free(e);
        }
    }
    /* the same run from the plain adapter works (the refusal above is the one change) */
    snprintf(yaml, sizeof yaml,
             "model: %s/base\ndata:\n  train: %s\n  seq_len: 16\nper_device_train_batch_size: 2\nmax_steps: 1\n"
             "save_steps: 0\nnum_threads: 1\noutput_dir: %s/run-good\nsample_max_new_tokens: 0\n"
             "lora:\n  r: 4\n  lora_alpha: 8\n  target_modules: [q_proj, down_proj]\n  init_from: %s/good\n",
             dir, data, dir, dir);
    char yp[400];
    snprintf(yp, sizeof yp, "%s/good.yaml", dir);
    put_file(yp, yaml, strlen(yaml));
    snprintf(args, sizeof args, "--config '%s'", yp);
    cr_assert_eq(gtrain_cmd(dir, "init-good", args), 0, "the plain adapter does not continue");
    /* and one with a NaN is refused at load */
    snprintf(yaml, sizeof yaml,
             "model: %s/base\ndata:\n  train: %s\n  seq_len: 16\nper_device_train_batch_size: 2\nmax_steps: 1\n"
             "save_steps: 0\nnum_threads: 1\noutput_dir: %s/run-nan\nsample_max_new_tokens: 0\n"
             "lora:\n  r: 4\n  lora_alpha: 8\n  target_modules: [q_proj, down_proj]\n  init_from: %s/nan\n",
             dir, data, dir, dir);
    put_file(yp, yaml, strlen(yaml));
    expect_line(dir, "init-nan", gtrain_cmd(dir, "init-nan", args), 2, "nan/adapter_model.safetensors", A);
#undef MERGE
    test_scratch_remove(dir);
}

/* ---------------------------------------------------------------- 6. BOS / EOS / PAD */

/* gtrain's ids for the tokenizer in dir, and transformers' AutoTokenizer's */
static void special_ids(const char *dir, int got[3], int want[3]) {
    Tokenizer *t = NULL;
    GtError err = {0};
    cr_assert_eq(tokenizer_load(&t, dir, &err), 0, "%s", err.msg);
    got[0] = tokenizer_bos_id(t), got[1] = tokenizer_eos_id(t), got[2] = tokenizer_pad_id(t);
    char line[600];
    cr_log_info("%s: %s", dir, tokenizer_special_line(t, line, sizeof line));
    tokenizer_free(t);
    if (!want) return;
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert_not_null(root, "GTRAIN_ROOT is not set (run through make test)");
    char *out = test_sh_output(false, "timeout 120 " PY " '%s/tests/tools/hf_special_tokens.py' '%s'", root, dir);
    cr_assert_eq(sscanf(out, "bos %d eos %d pad %d", &want[0], &want[1], &want[2]), 3, "reference: %s", out);
    free(out);
}

static void expect_hf(const char *dir) {
    int got[3], want[3];
    special_ids(dir, got, want);
    const char *what[] = {"bos", "eos", "pad"};
    for (int k = 0; k < 3; k++)
        cr_expect_eq(got[k], want[k], "%s: %s %d, AutoTokenizer's %s_token_id %d", dir, what[k], got[k], what[k], want[k]);
}

Test(silent, special_tokens_are_autotokenizers_for_the_real_tokenizers, .timeout = 300) {
    test_require_refs();
    const char *names[] = {"llama2", "llama3", "llama3_1", "qwen3"};
    for (int i = 0; i < 4; i++) {
        char tok[600];
        ref_tokenizer_file(names[i], tok, sizeof tok); /* DIR/tokenizer.json */
        *strrchr(tok, '/') = '\0';
        expect_hf(tok);
    }
}

Test(silent, special_tokens_from_addedtoken_dicts_generation_config_and_config, .timeout = 300) {
    test_require_refs();
    char src[600], dir[256];
    ref_tokenizer_file("llama2", src, sizeof src);
    test_scratch_make(dir, sizeof dir, "gt_silent_special");
    copy_file(src, test_join(dir, "tokenizer.json"));
    /* AddedToken dicts, as older transformers wrote them */
    const char *tc = "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\", \"lstrip\": false, "
                     "\"normalized\": false, \"rstrip\": false, \"single_word\": false}, "
                     "\"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"</s>\", \"lstrip\": false, "
                     "\"normalized\": false, \"rstrip\": false, \"single_word\": false}, "
                     "\"pad_token\": \"<unk>\", \"tokenizer_class\": \"LlamaTokenizer\"}";
    test_write_file(test_join(dir, "tokenizer_config.json"), tc, strlen(tc));
    expect_hf(dir);
    /* no tokenizer_config.json: generation_config.json's ids (the first of a list), then config.json's */
    unlink(test_join(dir, "tokenizer_config.json"));
    const char *gc = "{\"bos_token_id\": 1, \"eos_token_id\": [2, 0], \"pad_token_id\": null}";
    const char *cc = "{\"model_type\": \"llama\", \"bos_token_id\": 0, \"eos_token_id\": 0, \"pad_token_id\": 0}";
    test_write_file(test_join(dir, "generation_config.json"), gc, strlen(gc));
    test_write_file(test_join(dir, "config.json"), cc, strlen(cc));
    int got[3];
    special_ids(dir, got, NULL);
    cr_assert(got[0] == 1 && got[1] == 2 && got[2] == 0, "expected bos 1 eos 2 (generation_config.json) pad 0 "
              "(config.json), found %d %d %d", got[0], got[1], got[2]);
    /* hostile: a token the tokenizer lacks, an id outside it, a value of another type: one line naming file and key */
    struct {
        const char *file, *text, *key;
    } bad[] = {
        {"tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}", "eos_token"},
        {"tokenizer_config.json", "{\"bos_token\": {\"lstrip\": false}}", "bos_token"},
        {"tokenizer_config.json", "{\"pad_token\": 3}", "pad_token"},
        {"generation_config.json", "{\"eos_token_id\": [2, 99999]}", "eos_token_id"},
        {"generation_config.json", "{\"bos_token_id\": 1.5}", "bos_token_id"},
        {"generation_config.json", "[1, 2]", "expected a JSON object"},
        {"tokenizer_config.json", "{\"eos_token\": ", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unlink(test_join(dir, "tokenizer_config.json"));
        test_write_file(test_join(dir, "generation_config.json"), gc, strlen(gc));
        test_write_file(test_join(dir, bad[i].file), bad[i].text, strlen(bad[i].text));
        Tokenizer *t = NULL;
        GtError err = {0};
        cr_assert_neq(tokenizer_load(&t, dir, &err), 0, "%s %s: loaded", bad[i].file, bad[i].text);
        cr_assert_null(t);
        cr_assert_eq(err.code, 2, "%s: code %d", bad[i].text, err.code);
        cr_assert_not_null(strstr(err.msg, test_join(dir, bad[i].file)), "the message must name the file: %s", err.msg);
        cr_assert_not_null(strstr(err.msg, bad[i].key), "the message must name %s: %s", bad[i].key, err.msg);
        cr_assert_null(strchr(err.msg, '\n'), "not one line: %s", err.msg);
    }
    test_scratch_remove(dir);
}

/* A run prints the ids it uses, and SFT's EOS is Qwen3's <|im_end|> (tokenizer_config.json's
 * eos_token, what TRL appends), not the <|endoftext|> of the old name list: the line is checked
 * against AutoTokenizer's ids and names */
Test(silent, a_run_prints_qwen3s_special_tokens_as_autotokenizer_has_them, .timeout = 300) {
    test_require_refs();
    char tok[600];
    ref_tokenizer_file("qwen3", tok, sizeof tok);
    *strrchr(tok, '/') = '\0';
    int got[3], want[3];
    special_ids(tok, got, want);
    Ws w;
    ws_init(&w);
    const char *m = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 16, "
                    "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                    "\"num_key_value_heads\": 1, \"max_position_embeddings\": 64, \"vocab_size\": 151669, "
                    "\"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": true}";
    put_file(wpath(&w, "qwen-tiny.json"), m, strlen(m));
    const char *data = "{\"prompt\": \"Q: one?\\nA:\", \"completion\": \" two.\"}\n"
                       "{\"prompt\": \"Q: three?\\nA:\", \"completion\": \" four.\"}\n";
    put_file(wpath(&w, "train.jsonl"), data, strlen(data));
    int st = run(&w, NULL, "qwen", kv("model", wpath(&w, "qwen-tiny.json")), kv("tokenizer", tok),
                 kv("data.train", wpath(&w, "train.jsonl")), "data.format=jsonl", "data.seq_len=16", "max_steps=1",
                 "save_steps=0", "eval_steps=0", "data.val_fraction=0", NULL);
    expect_exit(&w, "qwen", st, 0);
    char *o = read_log(&w, "qwen", "out");
    char line[300];
    snprintf(line, sizeof line, "special tokens: bos none, eos %d <|im_end|> (tokenizer_config.json), pad %d "
             "<|endoftext|> (tokenizer_config.json)\n", want[1], want[2]);
    cr_assert_eq(want[0], -1, "AutoTokenizer gives Qwen3 a BOS now: %d", want[0]);
    cr_assert_not_null(strstr(o, line), "expected \"%s\" in: %s", line, o);
    free(o);
    ws_fini(&w);
}
