/* lora_runs_fixture.c - see lora_runs_fixture.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cJSON.h>
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run_util.h"
#include "safetensors.h"
#include "test_backend_select.h"
#include "test_util.h"

#include "lora_runs_fixture.h"

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
const char *J(const char *dir, const char *name) {
    static char buf[64][512];
    static int k = 0;
    char *p = buf[k++ % 64];
    cr_assert_lt((size_t)snprintf(p, 512, "%s/%s", dir, name), (size_t)512);
    return p;
}

/* a path under the workspace */
const char *wpath(const Ws *w, const char *name) { return J(w->dir, name); }

void write_text(const Ws *w, const char *name, const char *text) {
    put_file(wpath(w, name), text, strlen(text));
}

/* config.json of the tiny Llama fixture, with some fields replaced (NULL: as it is) */
void write_llama_json(const Ws *w, const char *name, int hidden, int inter, int layers) {
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
void make_base(const Ws *w, const char *mjson, const char *name) {
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
void lws_init(Ws *w) {
    if (!getenv("GTRAIN_ROOT") || !test_gtrain_bin()) cr_skip_test("GTRAIN_ROOT/GTRAIN_BIN not set (run through make test)");
    snprintf(w->dir, sizeof w->dir, "/tmp/gtrain-lora-XXXXXX");
    cr_assert_not_null(mkdtemp(w->dir));
    snprintf(w->cfg, sizeof w->cfg, "%s/lora.yaml", w->dir);
    snprintf(w->out, sizeof w->out, "%s/ref", w->dir);
    write_llama_json(w, "model.json", 0, 0, 0);
    put_words_text(wpath(w, "train.txt"), 16000, 2024);
    make_base(w, "model.json", "base");
    write_text(w, "lora.yaml", LORA_YAML);
}

/* run `gtrain --config cfg` with the sets; returns the wait status */
int run_cfg(const Ws *w, const char *cfg, const char *tag, const char *const *sets, int n) {
    Proc p;
    start_v(&p, w, cfg, NULL, tag, sets, n);
    return wait_proc(&p);
}

/* "key=value" in one of 16 rotating buffers */
const char *kv(const char *key, const char *value) {
    static char buf[16][600];
    static int k = 0;
    char *p = buf[k++ % 16];
    cr_assert_lt((size_t)snprintf(p, 600, "%s=%s", key, value), (size_t)600);
    return p;
}

/* ---------------------------------------------------------------- the model's adapters */

static int json_int(const cJSON *j, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : def;
}

/* the dimensions from a Llama config.json, read here */
Dims llama_dims(const char *path) {
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

int llama_mods(const Dims *d, Mod m[7]) {
    const Mod all[7] = {{"self_attn.q_proj", d->C, d->Q}, {"self_attn.k_proj", d->C, d->KV}, {"self_attn.v_proj", d->C, d->KV},
                        {"self_attn.o_proj", d->Q, d->C}, {"mlp.gate_proj", d->C, d->I},   {"mlp.up_proj", d->C, d->I},
                        {"mlp.down_proj", d->I, d->C}};
    memcpy(m, all, sizeof all);
    return 7;
}

void st_load(const char *path, StFile *f) {
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

int64_t st_numel(const StFile *f, int i) {
    int64_t n = 1;
    for (int d = 0; d < f->ndim[i]; d++) n *= f->shape[i][d];
    return n;
}

int st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->name[i], name) == 0) return i;
    return -1;
}

void st_save(const char *path, const StFile *f) {
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

void st_free(StFile *f) {
    for (int i = 0; i < f->n; i++) free(f->name[i]), free(f->data[i]);
    free(f->name), free(f->shape), free(f->ndim), free(f->data);
    memset(f, 0, sizeof *f);
}

/* dir holds an adapter and no copy of the base */
void expect_adapter_dir(const char *dir) {
    cr_assert(exists(J(dir, "adapter_model.safetensors")), "%s: no adapter_model.safetensors", dir);
    cr_assert(exists(J(dir, "adapter_config.json")), "%s: no adapter_config.json", dir);
    cr_assert(!exists(J(dir, "model.safetensors")), "%s: holds model.safetensors (a copy of the base)", dir);
    cr_assert(!exists(J(dir, "model.safetensors.index.json")), "%s: holds sharded base weights", dir);
}

/* the adapter's r from DIR/adapter_config.json */
int adapter_r(const char *dir) {
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
void expect_lora_checkpoint(const char *ck, const Dims *d, int r, int r_saved, const char *base_dir) {
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
double adapter_diff(const char *fa, const char *fb, double *scale) {
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

/* ---------------------------------------------------------------- the init_from configs */

cJSON *read_json(const char *path) {
    char *text = slurp(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j, "%s: not JSON", path);
    return j;
}

/* lora: with init_from alone (given by --set): r, alpha and the modules are the adapter's */
static const char INIT_YAML_TAIL[] = "lora:\n  lora_dropout: 0.0\n";
/* lora.r given in the YAML, disagreeing with the adapter's 4 */
static const char INIT_R_YAML_TAIL[] = "lora:\n  r: 8\n  lora_alpha: 8\n";

void write_init_configs(const Ws *w) {
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
