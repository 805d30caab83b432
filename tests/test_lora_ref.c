/* test_lora_ref.c - the reference models' LoRA adapters (tests/ref_lora.c, with ref_llama.c and
 * ref_gpt.c) checked before the model is checked against them: dropout.h's mask against its own
 * definition and ref_lora_apply's element index, B = 0 gives the base model's loss, the adapted
 * loss without dropout is the base model's with the merged weights W + scale B A (each module
 * alone and all together, Llama family and GPT-2), the finite-difference gradients against the
 * chain rule through the Llama reference's hand-written weight gradient, and dropout's keys and
 * its whole-batch row index (a batch cut into micro-batches at their row_base is the batch). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dropout.h"
#include "ref_gpt.h"
#include "ref_llama.h"
#include "ref_lora.h"

/* ---------------------------------------------------------------- deterministic values */

static uint64_t g_rng;
static double unif(void) { /* splitmix64 -> (0, 1) */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((double)((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0;
}
static double sym(double a) { return a * (2 * unif() - 1); }

static void make_tokens(int *tok, int *tgt, int n, int V, uint64_t seed) {
    g_rng = seed;
    for (int i = 0; i < n; i++) {
        tok[i] = (int)(unif() * V);
        tgt[i] = i % 5 == 3 ? -100 : (int)(unif() * V);
    }
}

/* a key function that is not lora_dropout_key (this suite checks the reference, not lora.c), and
 * records which (layer, module) asked */
static int g_key_calls[4][REF_LORA_MODULES];
static uint64_t test_key(uint64_t seed, long step, int layer, int module) {
    if (layer >= 0 && layer < 4) g_key_calls[layer][module]++;
    return gt_mix64(seed ^ gt_mix64((uint64_t)step * 1000003u + (uint64_t)layer * 131u + (uint64_t)module));
}

/* ---------------------------------------------------------------- the mask */

Test(lora_ref, mask_is_its_documented_definition) {
    /* dropout.h: kept when the top 24 bits of splitmix64-finalise(key ^ finalise(i)) >= round(p 2^24) */
    for (int trial = 0; trial < 3; trial++) {
        const double p = trial == 0 ? 0.1 : trial == 1 ? 0.5 : 0.03;
        const uint32_t thr = gt_dropout_threshold(p);
        cr_assert_eq(thr, (uint32_t)llround(p * 16777216.0));
        const uint64_t key = 0x1234567ull * (uint64_t)(trial + 1);
        long dropped = 0;
        const long n = 200000;
        for (long i = 0; i < n; i++) {
            uint64_t z = (uint64_t)i + 0x9e3779b97f4a7c15ull;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull, z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z = key ^ (z ^ (z >> 31));
            z += 0x9e3779b97f4a7c15ull;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull, z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            const int keep = (uint32_t)(z >> 40) >= thr;
            cr_assert_eq(gt_dropout_keep(key, (uint64_t)i, thr), keep, "p %g element %ld", p, i);
            dropped += !keep;
        }
        /* binomial: 5 standard deviations */
        const double sd = sqrt(n * p * (1 - p));
        cr_assert(fabs(dropped - n * p) < 5 * sd, "p %g: dropped %ld of %ld", p, dropped, n);
    }
    for (uint64_t i = 0; i < 1000; i++) cr_assert(gt_dropout_keep(99, i, gt_dropout_threshold(0.0)));
}

/* A = B = identity, scale 1: the adapter's output is dropout(x) itself, element by element, at
 * index (row_base + row0 + n) * in + c, kept ones times 1/(1-p); only the sum row_base + row0
 * counts (where the micro-batch starts in the step's batch, plus the row within it) */
Test(lora_ref, apply_drops_the_elements_of_its_index) {
    enum { IN = 5, ROWS = 7 };
    RefLora lo;
    ref_lora_init(&lo, 2, IN, 1.0);
    RefLoraAdapter *a = ref_lora_add(&lo, 1, REF_LORA_O_PROJ, IN, IN);
    for (int k = 0; k < IN; k++) a->A[k * IN + k] = a->B[k * IN + k] = 1.0;
    lo.p = 0.25, lo.seed = 42, lo.step = 3, lo.row_base = 40, lo.key = test_key;
    double x[ROWS * IN], y[ROWS * IN] = {0};
    g_rng = 5;
    for (int i = 0; i < ROWS * IN; i++) x[i] = sym(1.0) + 2.0;
    const long row0 = 11;
    ref_lora_apply(&lo, 1, REF_LORA_O_PROJ, x, ROWS, row0, IN, y, IN);
    const uint64_t key = test_key(42, 3, 1, REF_LORA_O_PROJ);
    int dropped = 0;
    for (int n = 0; n < ROWS; n++)
        for (int c = 0; c < IN; c++) {
            const int i = n * IN + c;
            const bool keep = gt_dropout_keep(key, (uint64_t)((40 + row0 + n) * IN + c), gt_dropout_threshold(0.25));
            dropped += !keep;
            cr_assert(fabs(y[i] - (keep ? x[i] / 0.75 : 0.0)) <= 1e-15 * fabs(x[i]), "row %d col %d: %.17g (x %.17g)",
                      n, c, y[i], x[i]);
        }
    cr_assert(dropped > 0 && dropped < ROWS * IN, "dropped %d of %d: the check would prove little", dropped, ROWS * IN);
    /* the same rows seen from a micro-batch starting 11 rows later: the same output, bit for bit;
     * one row later: another mask */
    double ys[ROWS * IN] = {0};
    lo.row_base = 40 + row0;
    ref_lora_apply(&lo, 1, REF_LORA_O_PROJ, x, ROWS, 0, IN, ys, IN);
    cr_assert(memcmp(ys, y, sizeof y) == 0, "row_base 40 + row0 11 and row_base 51 + row0 0 drop differently");
    memset(ys, 0, sizeof ys);
    lo.row_base = 40 + row0 + 1;
    ref_lora_apply(&lo, 1, REF_LORA_O_PROJ, x, ROWS, 0, IN, ys, IN);
    cr_assert(memcmp(ys, y, sizeof y) != 0, "row_base one row later drops the same elements");
    lo.row_base = 40;
    /* another module, layer or step: another mask; an unadapted module: nothing */
    double y2[ROWS * IN] = {0};
    ref_lora_apply(&lo, 0, REF_LORA_O_PROJ, x, ROWS, row0, IN, y2, IN);
    for (int i = 0; i < ROWS * IN; i++) cr_assert_eq(y2[i], 0.0);
    ref_lora_free(&lo);
}

/* ---------------------------------------------------------------- Llama family */

static RefLlamaCfg llama_cfg(void) {
    return (RefLlamaCfg){.hidden = 16, .inter = 24, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 4,
                         .vocab = 32, .eps = 1e-5, .theta = 10000.0, .qkv_bias = true, .mlp_bias = true};
}

static const char *const LLAMA_HF[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

static void llama_dims(const RefLlamaCfg *c, int module, int *in, int *out) {
    const int C = c->hidden, I = c->inter, QD = c->heads * c->head_dim, KD = c->kv_heads * c->head_dim;
    const int ins[7] = {C, C, C, QD, C, C, I}, outs[7] = {QD, KD, KD, C, I, I, C};
    *in = ins[module], *out = outs[module];
}

static RefTensor *llama_tensors(const RefLlamaCfg *c, int *n, uint64_t seed) {
    RefTensor *t = ref_llama_alloc(c, n);
    cr_assert_not_null(t);
    g_rng = seed;
    for (int i = 0; i < *n; i++) {
        const bool norm = strstr(t[i].name, "norm") != NULL;
        for (int64_t j = 0; j < t[i].rows * t[i].cols; j++) t[i].data[j] = (norm ? 1.0 : 0.0) + sym(0.4);
    }
    return t;
}

/* adapt the modules of mask (bit per module) on every layer, A and B uniform(-a, a) (B zero: b_zero) */
static void add_adapters(RefLora *lo, const RefLlamaCfg *c, uint32_t mask, double a, bool b_zero, uint64_t seed) {
    g_rng = seed;
    for (int l = 0; l < lo->layers; l++)
        for (int m = 0; m < 7; m++) {
            if (!(mask & (1u << m))) continue;
            int in, out;
            llama_dims(c, m, &in, &out);
            RefLoraAdapter *ad = ref_lora_add(lo, l, m, in, out);
            for (int k = 0; k < lo->r * in; k++) ad->A[k] = sym(a);
            for (int k = 0; k < out * lo->r; k++) ad->B[k] = b_zero ? 0.0 : sym(a);
        }
}

/* the base tensors with every adapter merged into its HF weight */
static RefTensor *llama_merged(const RefLlamaCfg *c, RefTensor *base, int n, const RefLora *lo) {
    int n2;
    RefTensor *t = ref_llama_alloc(c, &n2);
    cr_assert_eq(n2, n);
    for (int i = 0; i < n; i++) memcpy(t[i].data, base[i].data, (size_t)(t[i].rows * t[i].cols) * sizeof(double));
    for (int l = 0; l < c->layers; l++)
        for (int m = 0; m < 7; m++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, LLAMA_HF[m]);
            RefTensor *w = ref_llama_find(t, n, name);
            cr_assert_not_null(w, "%s", name);
            ref_lora_merge(lo, l, m, w->data, (int)w->rows, (int)w->cols);
        }
    return t;
}

enum { B = 2, T = 6 };

Test(lora_ref, llama_zero_B_is_the_base_model) {
    const RefLlamaCfg c = llama_cfg();
    int n;
    RefTensor *t = llama_tensors(&c, &n, 1);
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B * T, c.vocab, 2);
    const double base = ref_llama_loss(&c, t, n, tok, tgt, B, T, false);
    cr_assert(isfinite(base) && base > 0);
    cr_assert_eq(ref_llama_loss_lora(&c, t, n, NULL, tok, tgt, B, T), base);
    for (int drop = 0; drop < 2; drop++) {
        RefLora lo;
        ref_lora_init(&lo, c.layers, 3, 2.0);
        add_adapters(&lo, &c, 0x7f, 0.5, true, 3);
        if (drop) lo.p = 0.1, lo.key = test_key, lo.seed = 7;
        cr_assert_eq(ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T), base, "dropout %d", drop);
        ref_lora_free(&lo);
    }
    ref_llama_free(t, n);
}

Test(lora_ref, llama_adapters_are_the_merged_weights) {
    const RefLlamaCfg c = llama_cfg();
    int n;
    RefTensor *t = llama_tensors(&c, &n, 11);
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B * T, c.vocab, 12);
    const double base = ref_llama_loss(&c, t, n, tok, tgt, B, T, false);
    /* each module alone, then all seven */
    for (int k = 0; k <= 7; k++) {
        const uint32_t mask = k < 7 ? 1u << k : 0x7f;
        RefLora lo;
        ref_lora_init(&lo, c.layers, 3, ref_lora_scaling(6.0, 3, k % 2));
        add_adapters(&lo, &c, mask, 0.3, false, 13 + k);
        const double with = ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T);
        RefTensor *mt = llama_merged(&c, t, n, &lo);
        const double merged = ref_llama_loss(&c, mt, n, tok, tgt, B, T, false);
        cr_assert(fabs(with - merged) <= 1e-12 * fabs(merged), "modules %#x: %.17g vs merged %.17g", mask, with, merged);
        cr_assert(fabs(with - base) > 1e-4, "modules %#x: the adapters hardly change the loss (%.9g vs %.9g)", mask,
                  with, base);
        ref_llama_free(mt, n);
        ref_lora_free(&lo);
    }
    ref_llama_free(t, n);
}

typedef struct {
    const RefLlamaCfg *c;
    RefTensor *t;
    int n;
    const int *tok, *tgt;
} LlamaCtx;

static double llama_loss_fn(void *vctx, const RefLora *lo) {
    LlamaCtx *x = vctx;
    return ref_llama_loss_lora(x->c, x->t, x->n, lo, x->tok, x->tgt, B, T);
}

/* L(A, B) = L_base(W + s B A): dL/dB = s G A^T, dL/dA = s B^T G with G the hand-written
 * d L_base / d W at the merged weights (ref_llama.c's backward, itself checked by test_ref_llama) */
Test(lora_ref, llama_finite_differences_match_the_chain_rule) {
    const RefLlamaCfg c = llama_cfg();
    int n;
    RefTensor *t = llama_tensors(&c, &n, 21);
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B * T, c.vocab, 22);
    RefLora lo;
    ref_lora_init(&lo, c.layers, 3, ref_lora_scaling(4.0, 3, true));
    add_adapters(&lo, &c, 0x7f, 0.3, false, 23);
    LlamaCtx ctx = {&c, t, n, tok, tgt};
    const double big = ref_lora_fd_grads(&lo, llama_loss_fn, &ctx, 1e-6);
    cr_assert(isfinite(big) && big > 1e-3, "largest gradient %g", big);
    RefTensor *mt = llama_merged(&c, t, n, &lo);
    cr_assert(isfinite(ref_llama_loss(&c, mt, n, tok, tgt, B, T, true)));
    const int r = lo.r;
    double worst = 0;
    for (int l = 0; l < c.layers; l++)
        for (int m = 0; m < 7; m++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, LLAMA_HF[m]);
            const RefTensor *w = ref_llama_find(mt, n, name);
            const RefLoraAdapter *a = &lo.ad[l][m];
            const int in = a->in, out = a->out;
            for (int o = 0; o < out; o++)
                for (int k = 0; k < r; k++) {
                    double s = 0;
                    for (int i = 0; i < in; i++) s += w->grad[(size_t)o * in + i] * a->A[(size_t)k * in + i];
                    worst = fmax(worst, fabs(lo.scale * s - a->dB[(size_t)o * r + k]));
                }
            for (int k = 0; k < r; k++)
                for (int i = 0; i < in; i++) {
                    double s = 0;
                    for (int o = 0; o < out; o++) s += a->B[(size_t)o * r + k] * w->grad[(size_t)o * in + i];
                    worst = fmax(worst, fabs(lo.scale * s - a->dA[(size_t)k * in + i]));
                }
        }
    /* central differences with h ~ 1e-6 on a double loss: ~1e-9 */
    cr_assert(worst <= 1e-6 * big, "finite differences differ from the chain rule by %.3g (largest %.3g)", worst, big);
    ref_llama_free(mt, n);
    ref_lora_free(&lo);
    ref_llama_free(t, n);
}

Test(lora_ref, dropout_uses_one_key_per_layer_and_module) {
    const RefLlamaCfg c = llama_cfg();
    int n;
    RefTensor *t = llama_tensors(&c, &n, 31);
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B * T, c.vocab, 32);
    RefLora lo;
    ref_lora_init(&lo, c.layers, 3, 2.0);
    add_adapters(&lo, &c, 0x7f, 0.3, false, 33);
    const double plain = ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T);
    lo.p = 0.1, lo.key = test_key, lo.seed = 5, lo.step = 2, lo.row_base = 3 * T;
    memset(g_key_calls, 0, sizeof g_key_calls);
    const double dropped = ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T);
    for (int l = 0; l < c.layers; l++)
        for (int m = 0; m < REF_LORA_MODULES; m++)
            cr_assert(m < 7 ? g_key_calls[l][m] > 0 : g_key_calls[l][m] == 0, "layer %d module %d: %d key calls", l, m,
                      g_key_calls[l][m]);
    cr_assert(fabs(dropped - plain) > 1e-6, "dropout leaves the loss %.12g", plain);
    cr_assert_eq(ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T), dropped, "not a function of its key");
    const double ingredients[3][3] = {{6, 2, 3 * T}, {5, 3, 3 * T}, {5, 2, 2 * T}}; /* seed, step, row_base changed */
    for (int k = 0; k < 3; k++) {
        lo.seed = (uint64_t)ingredients[k][0], lo.step = (long)ingredients[k][1], lo.row_base = (long)ingredients[k][2];
        const double other = ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T);
        cr_assert(fabs(other - dropped) > 1e-9, "changing key ingredient %d leaves the loss", k);
    }
    ref_lora_free(&lo);
    ref_llama_free(t, n);
}

/* dropout's rows count over the step's whole batch: the B sequences as one micro-batch at
 * row_base 0 and as B micro-batches of one sequence at row_base b * T give the same summed token
 * loss (to double rounding); at row_base 0 each, the masks repeat and the sum differs */
Test(lora_ref, dropout_rows_count_over_the_steps_batch) {
    const RefLlamaCfg c = llama_cfg();
    int n;
    RefTensor *t = llama_tensors(&c, &n, 41);
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B * T, c.vocab, 42);
    RefLora lo;
    ref_lora_init(&lo, c.layers, 3, 2.0);
    add_adapters(&lo, &c, 0x7f, 0.3, false, 43);
    lo.p = 0.2, lo.key = test_key, lo.seed = 9, lo.step = 4, lo.row_base = 0;
    long items = 0;
    for (int i = 0; i < B * T; i++) items += tgt[i] != -100;
    const double whole = ref_llama_loss_lora(&c, t, n, &lo, tok, tgt, B, T) * (double)items;
    double split = 0, repeated = 0;
    for (int b = 0; b < B; b++) {
        long nb = 0;
        for (int i = 0; i < T; i++) nb += tgt[b * T + i] != -100;
        lo.row_base = (long)b * T;
        split += ref_llama_loss_lora(&c, t, n, &lo, tok + b * T, tgt + b * T, 1, T) * (double)nb;
        lo.row_base = 0;
        repeated += ref_llama_loss_lora(&c, t, n, &lo, tok + b * T, tgt + b * T, 1, T) * (double)nb;
    }
    cr_assert(fabs(split - whole) <= 1e-12 * fabs(whole), "split %.17g, whole %.17g", split, whole);
    cr_assert(fabs(repeated - whole) > 1e-6 * fabs(whole), "row_base 0 for every sequence gives the whole batch's %.12g",
              whole);
    ref_lora_free(&lo);
    ref_llama_free(t, n);
}

/* ---------------------------------------------------------------- GPT-2 */

Test(lora_ref, gpt2_adapters_are_the_merged_weights_and_zero_B_the_base) {
    ModelDesc d = {.n_layer = 2, .n_head = 2, .n_embd = 16, .n_inner = 64, .vocab_size = 32, .n_positions = 16,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    model_desc_defaults(&d);
    ParamLayout pl;
    param_layout_init(&pl, &d);
    double *p = malloc(pl.total * sizeof *p), *pm = malloc(pl.total * sizeof *pm);
    g_rng = 41;
    for (int i = 0; i < pl.n_tensors; i++) {
        const ParamTensor *t = &pl.tensors[i];
        const bool lnw = t->role == ROLE_NORM1_W || t->role == ROLE_NORM2_W || t->role == ROLE_NORMF_W;
        for (size_t k = 0; k < t->numel; k++) p[t->offset + k] = (lnw ? 1.0 : 0.0) + sym(0.3);
    }
    int tok[B * T], tgt[B * T];
    make_tokens(tok, tgt, B * T, d.vocab_size, 42);
    long cnt;
    const double base = ref_gpt_loss_sum(&d, &pl, p, tok, tgt, B, T, &cnt);
    const int C = d.n_embd, I = d.n_inner;
    const char *names[4] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"};
    const int ins[4] = {C, C, C, I}, outs[4] = {3 * C, C, I, C};
    for (int k = 0; k <= 4; k++) {
        const uint32_t mask = k < 4 ? 1u << k : 0xf;
        for (int zero = 0; zero < 2; zero++) {
            RefLora lo;
            ref_lora_init(&lo, d.n_layer, 3, ref_lora_scaling(6.0, 3, k % 2));
            g_rng = 43 + k;
            for (int l = 0; l < d.n_layer; l++)
                for (int m = 0; m < 4; m++) {
                    if (!(mask & (1u << m))) continue;
                    RefLoraAdapter *a = ref_lora_add(&lo, l, REF_LORA_C_ATTN + m, ins[m], outs[m]);
                    for (int e = 0; e < 3 * ins[m]; e++) a->A[e] = sym(0.3);
                    for (int e = 0; e < 3 * outs[m]; e++) a->B[e] = zero ? 0.0 : sym(0.3);
                }
            if (zero) { /* with dropout too: B = 0 leaves nothing to drop */
                lo.p = 0.1, lo.key = test_key;
                cr_assert_eq(ref_gpt_loss_sum_lora(&d, &pl, p, &lo, tok, tgt, B, T, &cnt), base, "modules %#x", mask);
                ref_lora_free(&lo);
                continue;
            }
            memcpy(pm, p, pl.total * sizeof *p);
            for (int l = 0; l < d.n_layer; l++)
                for (int m = 0; m < 4; m++) {
                    char name[64];
                    snprintf(name, sizeof name, "h.%d.%s", l, names[m]);
                    const int ti = param_layout_find(&pl, name);
                    cr_assert(ti >= 0, "%s", name);
                    ref_lora_merge(&lo, l, REF_LORA_C_ATTN + m, pm + pl.tensors[ti].offset, outs[m], ins[m]);
                }
            const double with = ref_gpt_loss_sum_lora(&d, &pl, p, &lo, tok, tgt, B, T, &cnt);
            const double merged = ref_gpt_loss_sum(&d, &pl, pm, tok, tgt, B, T, &cnt);
            cr_assert(fabs(with - merged) <= 1e-12 * fabs(merged), "modules %#x: %.17g vs merged %.17g", mask, with,
                      merged);
            cr_assert(fabs(with - base) > 1e-4, "modules %#x: the adapters hardly change the loss", mask);
            ref_lora_free(&lo);
        }
    }
    free(p), free(pm);
    param_layout_free(&pl);
}
