/* test_ref_llama.c - the double-precision Llama-family reference (tests/ref_llama.c) checked before
 * anything is checked against it: its hand-written gradients against central finite differences
 * of its own loss (GQA, MQA, sliding window, biases, llama3 rope, tied and untied), grouped-query
 * attention against plain multi-head attention with the kv weights repeated (repeat_kv's head
 * mapping), and its loss against Hugging Face transformers' own classes (tests/tools/hf_models.py:
 * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM in float64) on the same checkpoint
 * (written by save_pretrained through `hf_models.py make`, read here with src/io/safetensors.h), which
 * fails where the test references are not installed. transformers keeps the RMSNorm statistics,
 * the softmax and the rotary angles of a float64 model in float32, so the two agree to 1e-7, not to
 * double rounding. */
#include <criterion/criterion.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_llama.h"
#include "safetensors.h"
#include "test_util.h"

/* ---------------------------------------------------------------- deterministic values */

static uint64_t g_rng;
static double unif(void) { /* splitmix64 -> (0, 1) */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((double)((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2.0 * log(unif())) * cos(2.0 * M_PI * unif()); }

/* weights std w_std, norm weights 1 + 0.1 N, biases 0.2 N */
static void fill(RefTensor *t, int n, double w_std, uint64_t seed) {
    g_rng = seed;
    for (int i = 0; i < n; i++) {
        const bool norm = strstr(t[i].name, "norm") != NULL, bias = strstr(t[i].name, ".bias") != NULL;
        for (int64_t j = 0; j < t[i].rows * t[i].cols; j++)
            t[i].data[j] = norm ? 1.0 + 0.1 * normal() : (bias ? 0.2 : w_std) * normal();
    }
}

static void make_tokens(int *tok, int *tgt, int B, int T, int V, uint64_t seed, bool some_ignored) {
    g_rng = seed;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)(unif() * V);
        tgt[i] = (int)(unif() * V);
        if (some_ignored && i % 5 == 3) tgt[i] = -100;
    }
}

/* ---------------------------------------------------------------- gradients vs finite differences */

static void check_grads(const RefLlamaCfg *c, const char *what) {
    int n;
    RefTensor *t = ref_llama_alloc(c, &n);
    cr_assert_not_null(t);
    fill(t, n, 0.5, 1234);
    enum { B = 2, T = 7 };
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B, T, c->vocab, 99, true);
    const double loss = ref_llama_loss(c, t, n, tok, tgt, B, T, true);
    cr_assert(isfinite(loss), "%s: loss %g", what, loss);
    cr_assert_eq(ref_llama_loss(c, t, n, tok, tgt, B, T, false), loss, "%s: the loss without gradients differs", what);
    /* every element of every tensor: central difference, step 1e-5 (error ~ h^2 f''' + eps/h ~ 1e-10) */
    const double h = 1e-5;
    double worst = 0, gmax = 0;
    const char *worst_name = "";
    long checked = 0;
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < t[i].rows * t[i].cols; j++) {
            const double keep = t[i].data[j];
            t[i].data[j] = keep + h;
            const double lp = ref_llama_loss(c, t, n, tok, tgt, B, T, false);
            t[i].data[j] = keep - h;
            const double lm = ref_llama_loss(c, t, n, tok, tgt, B, T, false);
            t[i].data[j] = keep;
            const double fd = (lp - lm) / (2 * h), g = t[i].grad[j];
            const double err = fabs(g - fd) / (1e-4 + fabs(fd));
            if (fabs(g) > gmax) gmax = fabs(g);
            if (err > worst) worst = err, worst_name = t[i].name;
            cr_assert(fabs(g - fd) <= 1e-8 + 1e-6 * fabs(fd), "%s: %s[%lld]: gradient %.12g, finite difference %.12g",
                      what, t[i].name, (long long)j, g, fd);
            checked++;
        }
    cr_log_info("ref_llama %s: %ld gradients match finite differences, worst relative error %.2e (%s), max |g| %.3g, loss %.6f",
                what, checked, worst, worst_name, gmax, loss);
    ref_llama_free(t, n);
}

static RefLlamaCfg tiny(void) {
    return (RefLlamaCfg){.hidden = 8, .inter = 12, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 4,
                         .vocab = 11, .eps = 1e-5, .theta = 10000.0};
}

TestSuite(ref_llama);

Test(ref_llama, gradients_gqa_window_biases_llama3_tied, .timeout = 60) {
    RefLlamaCfg c = tiny();
    c.window = 3, c.window_first_layer = 1; /* layer 0 full, layer 1 windowed (Qwen2's max_window_layers) */
    c.qkv_bias = c.o_bias = c.mlp_bias = true;
    c.tie = true;
    c.theta = 50.0; /* frequencies 1, 0.14 (wavelengths 6.3, 44): with original 64, high 4, low 1: kept, smoothed */
    c.llama3 = true, c.rope_factor = 4.0, c.low_freq_factor = 1.0, c.high_freq_factor = 4.0, c.original_max_positions = 64;
    check_grads(&c, "GQA 4/2, window 3 on layer 1, all biases, llama3, tied");
}

Test(ref_llama, gradients_mha_untied_no_bias, .timeout = 60) {
    RefLlamaCfg c = tiny();
    c.heads = c.kv_heads = 2;
    check_grads(&c, "MHA, untied, no bias");
}

Test(ref_llama, gradients_mqa_window_everywhere_qkv_bias_untied, .timeout = 60) {
    RefLlamaCfg c = tiny();
    c.kv_heads = 1, c.head_dim = 6; /* heads * head_dim = 24 != hidden */
    c.window = 2, c.qkv_bias = true, c.layers = 3;
    check_grads(&c, "MQA 4/1, head_dim 6, window 2 on every layer, q/k/v bias");
}

Test(ref_llama, gqa_equals_mha_with_repeated_kv_heads_and_window_past_T_is_none) {
    RefLlamaCfg g = tiny(), m = tiny();
    g.kv_heads = 2, m.kv_heads = 4;
    g.qkv_bias = m.qkv_bias = true;
    int ng, nm;
    RefTensor *tg = ref_llama_alloc(&g, &ng), *tm = ref_llama_alloc(&m, &nm);
    fill(tg, ng, 0.5, 7);
    /* the MHA model: every tensor copied, k/v rows of kv head h / 2 repeated for head h (repeat_kv) */
    for (int i = 0; i < nm; i++) {
        RefTensor *src = ref_llama_find(tg, ng, tm[i].name);
        cr_assert_not_null(src, "%s", tm[i].name);
        const bool kv = strstr(tm[i].name, "k_proj") || strstr(tm[i].name, "v_proj");
        if (!kv) {
            memcpy(tm[i].data, src->data, (size_t)(src->rows * src->cols) * sizeof(double));
            continue;
        }
        const int64_t rows_per_head = g.head_dim, cols = src->cols;
        for (int h = 0; h < m.heads; h++)
            memcpy(tm[i].data + h * rows_per_head * cols, src->data + (h / (g.heads / g.kv_heads)) * rows_per_head * cols,
                   (size_t)(rows_per_head * cols) * sizeof(double));
    }
    enum { B = 2, T = 6 };
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B, T, g.vocab, 5, false);
    const double lg = ref_llama_loss(&g, tg, ng, tok, tgt, B, T, false), lm = ref_llama_loss(&m, tm, nm, tok, tgt, B, T, false);
    cr_assert(fabs(lg - lm) < 1e-13, "GQA %.15g vs MHA with repeated kv %.15g", lg, lm);
    g.window = T; /* t - j < T for every j <= t: the same as no window */
    cr_assert(fabs(ref_llama_loss(&g, tg, ng, tok, tgt, B, T, false) - lg) < 1e-14);
    g.window = 2;
    cr_assert(fabs(ref_llama_loss(&g, tg, ng, tok, tgt, B, T, false) - lg) > 1e-6, "a window of 2 changes the loss");
    /* no valid target: 0 */
    for (int i = 0; i < B * T; i++) tgt[i] = -100;
    cr_assert_eq(ref_llama_loss(&g, tg, ng, tok, tgt, B, T, true), 0.0);
    ref_llama_free(tg, ng);
    ref_llama_free(tm, nm);
}

Test(ref_llama, llama3_frequencies_of_llama_3_1) {
    /* Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192: frequencies
     * 0..28 kept, 29..34 smoothed, 35..63 divided by 8 */
    RefLlamaCfg c = {.head_dim = 128, .theta = 500000.0, .llama3 = true, .rope_factor = 8.0, .low_freq_factor = 1.0,
                     .high_freq_factor = 4.0, .original_max_positions = 8192};
    double f[64];
    ref_llama_inv_freq(&c, f);
    for (int i = 0; i < 64; i++) {
        const double base = pow(500000.0, -i / 64.0);
        if (i <= 28) cr_assert(fabs(f[i] - base) <= 1e-15 * base, "%d", i);
        if (i >= 35) cr_assert(fabs(f[i] - base / 8) <= 1e-15 * base, "%d", i);
        if (i > 28 && i < 35) cr_assert(f[i] < base && f[i] > base / 8, "%d", i);
    }
    /* frequency 31 by hand: wavelen = 2 pi / base, smooth = (8192 / wavelen - 1) / 3 */
    const double b31 = pow(500000.0, -31 / 64.0), s = (8192.0 * b31 / (2 * M_PI) - 1.0) / 3.0;
    cr_assert(fabs(f[31] - ((1 - s) * b31 / 8 + s * b31)) < 1e-18, "%.17g", f[31]);
}

/* ---------------------------------------------------------------- against transformers */

static void write_config(const char *path, const RefLlamaCfg *c, const char *model_type) {
    char buf[2048];
    int o = snprintf(buf, sizeof buf,
                     "{\"model_type\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
                     "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
                     "\"rms_norm_eps\": %.17g, \"rope_theta\": %.17g, \"tie_word_embeddings\": %s, \"hidden_act\": \"silu\"",
                     model_type, c->hidden, c->inter, c->layers, c->heads, c->kv_heads, c->head_dim, c->vocab, c->eps,
                     c->theta, c->tie ? "true" : "false");
    if (c->llama3)
        o += snprintf(buf + o, sizeof buf - o,
                      ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, "
                      "\"high_freq_factor\": %.17g, \"original_max_position_embeddings\": %d}",
                      c->rope_factor, c->low_freq_factor, c->high_freq_factor, c->original_max_positions);
    if (!strcmp(model_type, "llama"))
        o += snprintf(buf + o, sizeof buf - o, ", \"attention_bias\": %s, \"mlp_bias\": %s", c->qkv_bias ? "true" : "false",
                      c->mlp_bias ? "true" : "false");
    if (!strcmp(model_type, "mistral"))
        o += snprintf(buf + o, sizeof buf - o, ", \"sliding_window\": %d", c->window);
    if (!strcmp(model_type, "qwen2"))
        o += snprintf(buf + o, sizeof buf - o, ", \"use_sliding_window\": %s, \"sliding_window\": %d, \"max_window_layers\": %d",
                      c->window ? "true" : "false", c->window ? c->window : 4096, c->window_first_layer);
    o += snprintf(buf + o, sizeof buf - o, "}\n");
    cr_assert_lt((size_t)o, sizeof buf);
    test_write_file(path, buf, (size_t)o);
}

/* every model*.safetensors of dir (one file or shards) into the tensors, each found exactly once */
static void read_checkpoint(const char *dir, RefTensor *t, int n) {
    glob_t gl;
    char pat[600];
    snprintf(pat, sizeof pat, "%s/model*.safetensors", dir);
    cr_assert_eq(glob(pat, 0, NULL, &gl), 0, "no safetensors in %s", dir);
    int *seen = calloc((size_t)n, sizeof *seen), found = 0;
    for (size_t f = 0; f < gl.gl_pathc; f++) {
        SafeTensors *st;
        GtError err = {0};
        cr_assert_eq(safetensors_open(&st, gl.gl_pathv[f], &err), 0, "%s", err.msg);
        for (int i = 0; i < safetensors_count(st); i++) {
            RefTensor *r = ref_llama_find(t, n, safetensors_name(st, i));
            cr_assert_not_null(r, "%s: unexpected tensor %s", gl.gl_pathv[f], safetensors_name(st, i));
            size_t numel = (size_t)(r->rows * r->cols);
            float *buf = malloc(numel * sizeof *buf);
            cr_assert_eq(safetensors_read_f32(st, i, buf, numel, &err), 0, "%s", err.msg);
            for (size_t j = 0; j < numel; j++) r->data[j] = buf[j]; /* F32/BF16/F16 -> float: exact */
            free(buf);
            seen[r - t]++, found++;
        }
        safetensors_close(st);
    }
    globfree(&gl);
    for (int i = 0; i < n; i++) cr_assert_eq(seen[i], 1, "%s found %d times", t[i].name, seen[i]);
    cr_assert_eq(found, n);
    free(seen);
}

typedef struct {
    char dir[128];
    const char *root;
    int in[3 * 10], tg[3 * 10]; /* B = 3 rows of T = 10 predictions: rows of 11 tokens in tokens.txt */
} PyCase;
enum { PB = 3, PT = 10 };

/* a scratch dir with config.json, tokens.txt and model/ written by `hf_models.py make` (save_pretrained) */
static void py_case(PyCase *pc, const RefLlamaCfg *c, const char *model_type, const char *dtype, long max_shard_bytes) {
    pc->root = getenv("GTRAIN_ROOT");
    if (!pc->root || !*pc->root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    test_scratch_make(pc->dir, sizeof pc->dir, "gt_refllama");
    write_config(test_join(pc->dir, "config.json"), c, model_type);
    int tok[PB * (PT + 1)];
    char rows[1024], cmd[2048];
    int o = 0;
    g_rng = 42;
    for (int b = 0; b < PB; b++)
        for (int t = 0; t <= PT; t++) {
            tok[b * (PT + 1) + t] = (int)(unif() * c->vocab);
            o += snprintf(rows + o, sizeof rows - o, "%d%c", tok[b * (PT + 1) + t], t == PT ? '\n' : ' ');
        }
    for (int b = 0; b < PB; b++)
        for (int t = 0; t < PT; t++) pc->in[b * PT + t] = tok[b * (PT + 1) + t], pc->tg[b * PT + t] = tok[b * (PT + 1) + t + 1];
    test_write_file(test_join(pc->dir, "tokens.txt"), rows, (size_t)o);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && " PY " '%s/tests/tools/hf_models.py' make config.json model --seed 3 --dtype %s "
             "--max-shard-bytes %ld --init-std 0.3 --bias-std 0.2 >/dev/null",
             pc->dir, pc->root, dtype, max_shard_bytes);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

static void against_pytorch(const RefLlamaCfg *c, const char *model_type, const char *dtype, long max_shard_bytes) {
    PyCase pc;
    py_case(&pc, c, model_type, dtype, max_shard_bytes);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' loss model tokens.txt --digits 17",
             pc.dir, pc.root);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    double theirs = NAN;
    cr_assert_eq(fscanf(p, "%lf", &theirs), 1, "no loss from %s", cmd);
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);
    int n;
    RefTensor *t = ref_llama_alloc(c, &n);
    read_checkpoint(test_join(pc.dir, "model"), t, n);
    const double ours = ref_llama_loss(c, t, n, pc.in, pc.tg, PB, PT, false);
    /* float64 over the same weights, but for transformers' float32 steps (about 4e-9 found) */
    cr_assert(fabs(ours - theirs) <= 1e-7 * fabs(theirs), "%s %s: ref_llama.c %.17g vs transformers %.17g", model_type,
              dtype, ours, theirs);
    cr_log_info("ref_llama vs transformers (%s, %s): %.17g vs %.17g (relative %.1e)", model_type, dtype, ours, theirs,
                fabs(ours - theirs) / fabs(theirs));
    ref_llama_free(t, n);
    test_scratch_remove(pc.dir);
}

Test(ref_llama, loss_equals_pytorch_qwen2_gqa_window_from_layer_1_tied_f32, .timeout = 120) {
    RefLlamaCfg c = {.hidden = 16, .inter = 24, .layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 4, .vocab = 41,
                     .eps = 1e-6, .theta = 1e6, .window = 3, .window_first_layer = 1, .qkv_bias = true, .tie = true};
    against_pytorch(&c, "qwen2", "f32", 0);
}

Test(ref_llama, loss_equals_pytorch_llama_mqa_llama3_biases_bf16_sharded, .timeout = 120) {
    RefLlamaCfg c = {.hidden = 16, .inter = 20, .layers = 2, .heads = 4, .kv_heads = 1, .head_dim = 6, .vocab = 41,
                     .eps = 1e-5, .theta = 500.0, .llama3 = true, .rope_factor = 4.0, .low_freq_factor = 1.0,
                     .high_freq_factor = 4.0, .original_max_positions = 128, .qkv_bias = true, .o_bias = true,
                     .mlp_bias = true};
    against_pytorch(&c, "llama", "bf16", 1500);
}

Test(ref_llama, loss_equals_pytorch_mistral_window_everywhere_f16, .timeout = 120) {
    RefLlamaCfg c = {.hidden = 16, .inter = 24, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .vocab = 41,
                     .eps = 1e-5, .theta = 10000.0, .window = 4};
    against_pytorch(&c, "mistral", "f16", 0);
}

/* `hf_models.py train` (transformers' Qwen2ForCausalLM in float64, torch.optim.AdamW with HF
 * Trainer's decay groups, clip_grad_norm_) against AdamW written out here over ref_llama's
 * gradients: the same losses and gradient norms at every step, the same saved weights (to 1e-7:
 * transformers' float32 steps) */
Test(ref_llama, pytorch_train_equals_c_adamw_over_ref_gradients, .timeout = 120) {
    const RefLlamaCfg c = {.hidden = 16, .inter = 24, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 4, .vocab = 41,
                           .eps = 1e-6, .theta = 1e6, .window = 3, .window_first_layer = 1, .qkv_bias = true, .tie = true};
    PyCase pc;
    py_case(&pc, &c, "qwen2", "f32", 0);
    enum { STEPS = 3 };
    const double lr = 1e-2, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8, clip = 0.5;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && " PY " '%s/tests/tools/hf_models.py' train model tokens.txt --steps %d --lr %g "
             "--weight-decay %g --beta1 %g --beta2 %g --eps %g --grad-clip %g --digits 17 --out trained",
             pc.dir, pc.root, STEPS, lr, wd, b1, b2, eps, clip);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    double py_loss[STEPS], py_norm[STEPS];
    for (int s = 0; s < STEPS; s++) {
        int k;
        cr_assert_eq(fscanf(p, " step %d loss %lf grad_norm %lf", &k, &py_loss[s], &py_norm[s]), 3, "%s: step %d", cmd, s + 1);
    }
    char rest[256];
    while (fgets(rest, sizeof rest, p)) {}
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);

    int n;
    RefTensor *t = ref_llama_alloc(&c, &n);
    read_checkpoint(test_join(pc.dir, "model"), t, n);
    double **m = calloc((size_t)n, sizeof *m), **v = calloc((size_t)n, sizeof *v);
    for (int i = 0; i < n; i++) m[i] = calloc((size_t)(t[i].rows * t[i].cols), sizeof(double)), v[i] = calloc((size_t)(t[i].rows * t[i].cols), sizeof(double));
    bool clipped = false;
    for (int s = 1; s <= STEPS; s++) {
        const double loss = ref_llama_loss(&c, t, n, pc.in, pc.tg, PB, PT, true);
        double ss = 0;
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < t[i].rows * t[i].cols; j++) ss += t[i].grad[j] * t[i].grad[j];
        const double norm = sqrt(ss), coef = clip / (norm + 1e-6) < 1.0 ? clip / (norm + 1e-6) : 1.0;
        clipped |= coef < 1.0;
        cr_assert(fabs(loss - py_loss[s - 1]) <= 1e-7 * loss, "step %d: loss %.17g vs %.17g", s, loss, py_loss[s - 1]);
        cr_assert(fabs(norm - py_norm[s - 1]) <= 1e-6 * norm, "step %d: grad norm %.17g vs %.17g", s, norm, py_norm[s - 1]);
        const double bc1 = 1 - pow(b1, s), bc2 = 1 - pow(b2, s);
        for (int i = 0; i < n; i++) {
            const bool decay = t[i].cols > 1; /* 2-D: embeddings and projections; not norms and biases */
            for (int64_t j = 0; j < t[i].rows * t[i].cols; j++) {
                const double g = t[i].grad[j] * coef;
                double *w = &t[i].data[j];
                if (decay) *w *= 1 - lr * wd;
                m[i][j] = b1 * m[i][j] + (1 - b1) * g;
                v[i][j] = b2 * v[i][j] + (1 - b2) * g * g;
                *w -= lr / bc1 * m[i][j] / (sqrt(v[i][j]) / sqrt(bc2) + eps);
            }
        }
    }
    cr_assert(clipped, "the clip never acted: the test would not see it");
    int nt;
    RefTensor *trained = ref_llama_alloc(&c, &nt);
    read_checkpoint(test_join(pc.dir, "trained"), trained, nt);
    /* in the L2 norm over all weights: AdamW divides a gradient by its own size, so an element
     * whose gradient is near zero moves by what transformers' float32 steps leave in it */
    double worst = 0, d2 = 0, w2 = 0;
    char where[160] = "";
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < t[i].rows * t[i].cols; j++) {
            const double a = t[i].data[j], b = trained[i].data[j];
            if (fabs(a - b) > worst) worst = fabs(a - b), snprintf(where, sizeof where, "%s[%lld]", t[i].name, (long long)j);
            d2 += (a - b) * (a - b), w2 += a * a;
        }
    cr_assert(sqrt(d2) <= 1e-6 * sqrt(w2), "C AdamW vs transformers: saved weights differ by %.3g in L2 norm (of %.3g; "
              "largest %.3g at %s)", sqrt(d2), sqrt(w2), worst, where);
    cr_log_info("transformers + torch AdamW == C AdamW over ref_llama gradients: %d steps, saved F32 weights within %.2e "
                "(L2, relative), largest element %.2e at %s", STEPS, sqrt(d2 / w2), worst, where);
    for (int i = 0; i < n; i++) free(m[i]), free(v[i]);
    free(m), free(v);
    ref_llama_free(t, n);
    ref_llama_free(trained, nt);
    test_scratch_remove(pc.dir);
}
