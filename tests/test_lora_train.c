/* test_lora_train.c - training a LoRA model, each check against an independent reference or an
 * exact invariant (suite lora_train; its PiSSA and lora_init_tensor checks are in
 * test_lora_pissa.c, the helpers both use in lora_train_fixture.c):
 *   accumulation   (B, A) = (8, 1), (4, 2), (2, 4), (1, 8) over the same 8 rows, without dropout
 *                  and with it (the mask follows each row's place in the step's batch, not the
 *                  micro-batch): the accumulated adapter gradients, the AdamW update and the loss
 *                  agree with each other within test_model.c's bounds for full fine-tuning, and
 *                  the big batch with the double reference's finite differences (the reference's
 *                  own loss the same whichever split it is cut into)
 *   recompute      loss, every adapter gradient and the adapters after AdamW bit for bit the same
 *                  under every recompute / offload setting, fp32 and bf16, dropout 0.1
 *   plan           plan_memory per category == what model_create allocated, with the frozen base
 *                  and the trainable bytes also computed here from the dims alone */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "optim.h"
#include "peft.h"
#include "plan.h"
#include "ref_gpt.h"
#include "ref_llama.h"
#include "ref_lora.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "trainer.h"
#include "lora_train_fixture.h"

/* ---------------------------------------------------------------- helpers (the test's own) */

/* the other Llama: tied embeddings, MQA, MLP biases and none on the attention */
static ModelDesc tied_llama(ModelDesc d) {
    d.tie_word_embeddings = true, d.n_kv_head = 1, d.qkv_bias = false, d.o_bias = false, d.mlp_bias = true;
    return d;
}

static bool module_of(const ModelDesc *d, int mod) {
    if (d->arch == ARCH_PHI3)
        return mod == PEFT_QKV_PROJ || mod == PEFT_O_PROJ || mod == PEFT_GATE_UP_PROJ || mod == PEFT_DOWN_PROJ;
    return d->arch == ARCH_GPT2 ? mod >= PEFT_C_ATTN && mod <= PEFT_MLP_C_PROJ : mod < PEFT_C_ATTN;
}

/* the adapters' parameter count, from the dims: r (in + out) per adapted module and layer */
static uint64_t lora_params_from_dims(const ModelDesc *d) {
    uint64_t n = 0;
    for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
        if (!(d->adapter.targets & BIT(mod)) || !module_of(d, mod)) continue;
        int in, out;
        lora_fix_module_dims(d, mod, &in, &out);
        n += (uint64_t)d->adapter.r * (uint64_t)(in + out);
    }
    return n * (uint64_t)d->n_layer;
}

static float *random_floats(size_t n, double amp, uint64_t seed) {
    float *h = malloc(n * sizeof *h);
    uint64_t s = seed;
    for (size_t k = 0; k < n; k++) h[k] = (float)(amp * (2 * lora_fix_rng_uniform(&s) - 1));
    return h;
}

static void put_params(Model *m, const float *h) {
    GtError err = {0};
    cr_assert_eq(m->be->ops->to_device(m->be, m->params, h, m->layout.total * sizeof *h, &err), 0, "%s", err.msg);
    model_params_changed(m);
}

/* ---------------------------------------------------------------- the double reference */

typedef struct {
    ParamLayout bl; /* gtrain's base layout */
    LoraFixRef base;
    RefLora lo;
    const int *tok, *tgt; /* A micro-batches of B rows of T */
    int B, A, T;
    long items;           /* over all of them: LOSS_NORM_TOKENS */
} Ref;

/* the reference for base weights base_h (gtrain's base layout) and adapters ad_h (gtrain's adapter
 * layout, bound by each tensor's layer, module and A/B, their shapes checked against PEFT's) */
static void ref_open(Ref *r, const ModelDesc *d, const float *base_h, const float *ad_h, double alpha, bool rslora) {
    memset(r, 0, sizeof *r);
    param_layout_init(&r->bl, d);
    lora_fix_ref_open(&r->base, d, &r->bl, base_h);
    ref_lora_init(&r->lo, d->n_layer, d->adapter.r, ref_lora_scaling(alpha, d->adapter.r, rslora));
    ParamLayout pl;
    lora_layout_init(&pl, d);
    cr_assert_eq((uint64_t)pl.total, lora_params_from_dims(d));
    for (int e = 0; e < pl.n_tensors / 2; e++) {
        const int i = lora_entry_tensor(d, e, PEFT_PART_A);
        const ParamTensor *ta = &pl.tensors[i], *tb = &pl.tensors[lora_entry_tensor(d, e, PEFT_PART_B)];
        const char *ea = strstr(ta->name, ".lora_A.weight"), *eb = strstr(tb->name, ".lora_B.weight");
        cr_assert(ea && eb && ea - ta->name == eb - tb->name && strncmp(ta->name, tb->name, (size_t)(ea - ta->name)) == 0 &&
                      ta->layer == tb->layer,
                  "%s, %s", ta->name, tb->name);
        const PeftModule mod = lora_tensor_module(d, i);
        int in, out;
        lora_fix_module_dims(d, mod, &in, &out);
        cr_assert(ta->shape[0] == d->adapter.r && ta->shape[1] == in && tb->shape[0] == out && tb->shape[1] == d->adapter.r,
                  "%s: not PEFT's shapes", ta->name);
        RefLoraAdapter *a = ref_lora_add(&r->lo, ta->layer, mod, in, out);
        for (size_t k = 0; k < ta->numel; k++) a->A[k] = ad_h[ta->offset + k];
        for (size_t k = 0; k < tb->numel; k++) a->B[k] = ad_h[tb->offset + k];
    }
    param_layout_free(&pl);
}

static void ref_close(Ref *r) {
    ref_lora_free(&r->lo);
    lora_fix_ref_close(&r->base);
    param_layout_free(&r->bl);
}

/* the accumulated loss as trainer_accumulate defines it (LOSS_NORM_TOKENS): the sum over the
 * micro-batches of their summed token losses, micro-batch a dropping its rows as rows a * B .. of
 * the step's batch (one rank), over the items of all of them */
static double ref_accum_loss(void *vr, const RefLora *lo) {
    Ref *r = vr;
    double total = 0;
    const size_t rows = (size_t)r->B * r->T;
    for (int a = 0; a < r->A; a++) {
        RefLora la = *lo;
        la.row_base = (long)a * r->B * r->T;
        const int *tk = r->tok + a * rows, *tg = r->tgt + a * rows;
        if (r->base.llama) {
            const long n = count_items(tg, rows);
            if (n)
                total += ref_llama_loss_lora(&r->base.rc, r->base.ref, r->base.n_ref, &la, tk, tg, r->B, r->T) * (double)n;
        } else {
            long cnt = 0;
            total += ref_gpt_loss_sum_lora(&r->base.d, &r->bl, r->base.base_d, &la, tk, tg, r->B, r->T, &cnt);
        }
    }
    return total / (double)r->items;
}

/* the model's gradient (layout order) against the reference's finite differences, every tensor;
 * returns the largest reference gradient */
static double expect_grads_match_ref(Ref *r, const float *g, const ModelDesc *d, const char *what) {
    const double gmax = ref_lora_fd_grads(&r->lo, ref_accum_loss, r, 1e-6);
    cr_assert(isfinite(gmax) && gmax > 1e-3, "%s: reference gradients all tiny (%g)", what, gmax);
    ParamLayout pl;
    lora_layout_init(&pl, d);
    double worst = 0;
    for (int i = 0; i < pl.n_tensors; i++) {
        const ParamTensor *t = &pl.tensors[i];
        const RefLoraAdapter *a = &r->lo.ad[t->layer][lora_tensor_module(d, i)];
        const double *fd = strstr(t->name, ".lora_B.") ? a->dB : a->dA;
        double diff, big;
        size_t at;
        lora_fix_grad_diff(g + t->offset, fd, t->numel, &diff, &big, &at);
        /* test_lora_model's bound: fp32 gradients against a double central difference */
        cr_assert(diff <= 1e-4 * gmax, "%s: %s[%zu]: gradient %.8g, reference %.8g (largest %.3g)", what, t->name, at,
                  g[t->offset + at], fd[at], gmax);
        cr_assert(big > 1e-3 * gmax, "%s: %s: reference gradient nearly zero (%.3g of %.3g)", what, t->name, big, gmax);
        worst = fmax(worst, diff);
    }
    param_layout_free(&pl);
    cr_log_info("%s: gradients within %.3g of the reference's (largest %.3g)", what, worst / gmax, gmax);
    return gmax;
}

/* ---------------------------------------------------------------- 1. accumulation */

enum { AR = 3, AT = 8 };
static const double AALPHA = 6.0;
static const uint64_t DROP_SEED = 4242;
static const long DROP_STEP = 3;

typedef struct {
    float *grads, *params;
    double loss;
} Split;

static Split run_split(const ModelDesc *d, int B, int A, const int *tok, const int *tgt, const float *base_h,
                       const float *ad_h) {
    Backend *be = test_backend_open();
    backend_set_act_dtype(be, GT_F32);
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, d, be, B, AT, recompute_policy(false, 1, false, d->n_layer), 11, &err), 0, "%s",
                 err.msg);
    put_base(m, base_h);
    put_params(m, ad_h);
    m->ad.dropout_seed = DROP_SEED, m->ad.dropout_step = DROP_STEP;
    const long items = count_items(tgt, (size_t)8 * AT);
    double loss_sum = 0;
    cr_assert_eq(trainer_accumulate(m, tok, tgt, B, A, 1, LOSS_NORM_TOKENS, items, &loss_sum, &err), 0, "%s", err.msg);
    Split s = {.loss = loss_sum / (double)items};
    s.grads = dev_floats(be, m->grads, m->layout.total);
    RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.999, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    adamw_step(m, 1e-3, &cfg, 1);
    s.params = dev_floats(be, m->params, m->layout.total);
    model_free(m);
    backend_close(be);
    return s;
}

static void check_accumulation(bool llama, bool tied, uint32_t targets, double p) {
    ModelDesc d = lora_fix_desc(llama, 2, AR, AALPHA, targets, false, p, LORA_INIT_FALSE);
    if (tied) d = tied_llama(d);
    int tok[8 * AT], tgt[8 * AT];
    lora_fix_tokens(tok, tgt, 8 * AT, d.vocab_size, 1234 + targets, 0);
    for (int r = 0; r < 8; r++) /* row r has r of its targets masked: the counts differ, every row counts */
        for (int t = 0; t < r; t++) tgt[r * AT + t] = -100;
    const long items = count_items(tgt, 8 * AT);
    ParamLayout bl, pl;
    param_layout_init(&bl, &d);
    lora_layout_init(&pl, &d);
    const size_t n = pl.total;
    float *base_h = random_base(&bl, 50 + targets), *ad_h = random_floats(n, 0.3, 60 + targets);
    const int splits[4][2] = {{8, 1}, {4, 2}, {2, 4}, {1, 8}};
    Split s[4];
    for (int k = 0; k < 4; k++) s[k] = run_split(&d, splits[k][0], splits[k][1], tok, tgt, base_h, ad_h);
    char what[128];
    Ref r;
    ref_open(&r, &d, base_h, ad_h, AALPHA, false);
    r.lo.p = p, r.lo.key = lora_fix_key, r.lo.seed = DROP_SEED, r.lo.step = DROP_STEP;
    r.tok = tok, r.tgt = tgt, r.T = AT, r.items = items;
    const char *name = llama ? (tied ? "tied llama" : "llama") : "gpt2";
    char drop[32] = "";
    if (p > 0) snprintf(drop, sizeof drop, " dropout %g", p);
    /* one reference: the big batch (with dropout, the masks of its rows 0..7 at row_base 0) */
    r.B = 8, r.A = 1;
    snprintf(what, sizeof what, "%s targets %#x%s (8,1)", name, targets, drop);
    const double want = ref_accum_loss(&r, &r.lo);
    cr_assert(fabs(s[0].loss - want) <= 1e-5 * fabs(want), "%s: loss %.9g, reference %.9g", what, s[0].loss, want);
    /* the reference cut as each split is (micro-batch a at row_base a * B * T): the same loss */
    for (int k = 1; k < 4; k++) {
        r.B = splits[k][0], r.A = splits[k][1];
        const double cut = ref_accum_loss(&r, &r.lo);
        cr_assert(fabs(cut - want) <= 1e-12 * fabs(want), "%s: the reference cut (%d,%d) gives %.17g, whole %.17g",
                  what, r.B, r.A, cut, want);
    }
    r.B = 8, r.A = 1;
    expect_grads_match_ref(&r, s[0].grads, &d, what);
    const double gmax = test_max_abs(s[0].grads, n);
    for (int k = 1; k < 4; k++) {
        /* test_model.c's bounds for full fine-tuning: the same sums in another order (with
         * dropout too: every row has its own mask whatever micro-batch holds it) */
        const double dg = test_max_diff(s[k].grads, s[0].grads, n);
        cr_assert(dg <= 1e-5 * gmax, "%s vs (%d,%d): grads differ by %g (max %g)", what, splits[k][0], splits[k][1], dg,
                  gmax);
        cr_log_info("%s vs (%d,%d): grads within %.3g of the big batch's (relative to the largest)", what, splits[k][0],
                    splits[k][1], dg / gmax);
        double worst_p = 0;
        for (size_t i = 0; i < n; i++) {
            const double e = fabs((double)s[k].grads[i] - s[0].grads[i]);
            const double g = fmax(fabs(s[k].grads[i]), fabs(s[0].grads[i]));
            const double bound = 2e-3 * e / (g + 1e-8) + 2.4e-7 * (fabs(s[0].params[i]) + 1e-3);
            const double dp = fabs((double)s[k].params[i] - s[0].params[i]);
            cr_assert(dp <= bound, "%s vs (%d,%d): AdamW update of adapter value %zu differs by %g (bound %g)", what,
                      splits[k][0], splits[k][1], i, dp, bound);
            worst_p = fmax(worst_p, dp);
        }
        cr_assert(fabs(s[k].loss - s[0].loss) <= 1e-6 * fabs(s[0].loss), "%s vs (%d,%d): loss %.9g vs %.9g", what,
                  splits[k][0], splits[k][1], s[k].loss, s[0].loss);
        cr_log_info("%s vs (%d,%d): adapters after AdamW within %.3g, loss within %.3g (relative)", what, splits[k][0],
                    splits[k][1], worst_p, fabs(s[k].loss - s[0].loss) / fabs(s[0].loss));
    }
    ref_close(&r);
    for (int k = 0; k < 4; k++) free(s[k].grads), free(s[k].params);
    free(base_h), free(ad_h);
    param_layout_free(&bl), param_layout_free(&pl);
}

Test(lora_train, llama_accumulation_matches_the_big_batch, .timeout = 120) {
    const uint32_t sets[3] = {BIT(PEFT_Q_PROJ) | BIT(PEFT_V_PROJ), BIT(PEFT_O_PROJ) | BIT(PEFT_DOWN_PROJ), LLAMA_ALL};
    for (int k = 0; k < 3; k++) check_accumulation(true, false, sets[k], 0.0);
    check_accumulation(true, true, LLAMA_ALL, 0.0);
}
Test(lora_train, gpt2_accumulation_matches_the_big_batch, .timeout = 120) {
    const uint32_t sets[3] = {BIT(PEFT_C_ATTN), BIT(PEFT_ATTN_C_PROJ) | BIT(PEFT_C_FC), GPT_ALL};
    for (int k = 0; k < 3; k++) check_accumulation(false, false, sets[k], 0.0);
}
Test(lora_train, llama_accumulation_with_dropout_matches_the_big_batch, .timeout = 120) {
    check_accumulation(true, false, BIT(PEFT_K_PROJ) | BIT(PEFT_UP_PROJ), 0.1);
    check_accumulation(true, true, LLAMA_ALL, 0.1);
}
Test(lora_train, gpt2_accumulation_with_dropout_matches_the_big_batch, .timeout = 120) {
    /* one target set: the GPT-2 reference is the slow one (~1 ms a loss, 2 per adapter value) */
    check_accumulation(false, false, BIT(PEFT_C_ATTN) | BIT(PEFT_MLP_C_PROJ), 0.1);
}

/* ---------------------------------------------------------------- 2. recompute and offload */

typedef struct {
    double losses[3];
    float *grads1, *params3; /* the gradient of step 1, the adapters after 3 steps */
} RcRun;

/* 3 optimizer steps of 2 micro-batches (trainer_accumulate, clipping at 1, AdamW), dropout 0.1 */
static RcRun run_rc(const ModelDesc *d, GtDtype act, RecomputePolicy pol, const float *base_h, const float *ad_h) {
    enum { B = 2, T = 8 };
    Backend *be = test_backend_open();
    backend_set_act_dtype(be, act);
    Model *m = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m, d, be, B, T, pol, 5, &err), 0, "%s", err.msg);
    cr_assert_eq(m->act, act);
    put_base(m, base_h);
    put_params(m, ad_h);
    m->ad.dropout_seed = 99;
    RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.999, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    RcRun r = {.grads1 = NULL};
    int tok[2 * B * T], tgt[2 * B * T];
    for (int step = 1; step <= 3; step++) {
        lora_fix_tokens(tok, tgt, 2 * B * T, d->vocab_size, 300 + step, 5);
        const long items = count_items(tgt, 2 * B * T);
        m->ad.dropout_step = step;
        double s = 0;
        cr_assert_eq(trainer_accumulate(m, tok, tgt, B, 2, 1, LOSS_NORM_TOKENS, items, &s, &err), 0, "%s", err.msg);
        r.losses[step - 1] = s / (double)items;
        if (step == 1) r.grads1 = dev_floats(be, m->grads, m->layout.total);
        clip_grads(m, grad_global_norm(m), 1.0);
        adamw_step(m, 1e-2, &cfg, step);
        model_zero_grads(m);
    }
    r.params3 = dev_floats(be, m->params, m->layout.total);
    model_free(m);
    backend_close(be);
    return r;
}

/* every recompute setting of 4 layers (every_n_layers 1 and 2, offload off and on) against none,
 * bit for bit: the recomputed forward re-draws the same masks (a pure function of the key), and
 * nothing else may differ. fp32 and bf16 (the bf16 run must differ from the fp32 one: in effect). */
static void check_recompute_of(const ModelDesc d, const char *label) {
    ParamLayout bl;
    param_layout_init(&bl, &d);
    float *base_h = random_base(&bl, 7), *ad_h = random_floats(lora_params_from_dims(&d), 0.3, 8);
    const size_t n = lora_params_from_dims(&d);
    const RecomputePolicy pols[4] = {recompute_policy(true, 1, false, 4), recompute_policy(true, 2, false, 4),
                                     recompute_policy(true, 1, true, 4), recompute_policy(true, 2, true, 4)};
    double loss_f32 = 0;
    for (int act = GT_F32; act <= GT_BF16; act++) {
        RcRun base = run_rc(&d, (GtDtype)act, recompute_policy(false, 1, false, 4), base_h, ad_h);
        cr_assert(test_max_abs(base.grads1, n) > 1e-3, "gradients all tiny");
        for (int k = 0; k < 4; k++) {
            RcRun r = run_rc(&d, (GtDtype)act, pols[k], base_h, ad_h);
            const char *dt = gt_dtype_name((GtDtype)act);
            const int every = k % 2 ? 2 : 1, off = k >= 2;
            cr_assert(memcmp(r.losses, base.losses, sizeof base.losses) == 0,
                      "%s every_n_layers %d offload %d: losses %.9g %.9g %.9g, without recompute %.9g %.9g %.9g", dt,
                      every, off, r.losses[0], r.losses[1], r.losses[2], base.losses[0], base.losses[1],
                      base.losses[2]);
            cr_assert(memcmp(r.grads1, base.grads1, n * sizeof(float)) == 0,
                      "%s every_n_layers %d offload %d: adapter gradients not bit-identical (max diff %.3g)", dt, every,
                      off, test_max_diff(r.grads1, base.grads1, n));
            cr_assert(memcmp(r.params3, base.params3, n * sizeof(float)) == 0,
                      "%s every_n_layers %d offload %d: adapters after 3 steps not bit-identical", dt, every, off);
            free(r.grads1), free(r.params3);
        }
        if (act == GT_F32) loss_f32 = base.losses[0];
        else cr_assert(base.losses[0] != loss_f32, "bf16's loss equals fp32's bit for bit: bf16 is not in effect");
        cr_log_info("%s %s: step-1 loss %.9g, recompute and offload bit-identical", label,
                    gt_dtype_name((GtDtype)act), base.losses[0]);
        free(base.grads1), free(base.params3);
    }
    free(base_h), free(ad_h);
    param_layout_free(&bl);
}

static void check_recompute(bool llama) {
    check_recompute_of(lora_fix_desc(llama, 4, AR, AALPHA, llama ? LLAMA_ALL : GPT_ALL, false, 0.1, LORA_INIT_FALSE),
                       llama ? "llama" : "gpt2");
}

/* the families added by description: Phi-3's adapters on its fused qkv_proj / gate_up_proj, Qwen3's
 * on q/k/v before the per-head norm */
static ModelDesc family_desc(ModelArch arch, const char *model_type, uint32_t targets) {
    ModelDesc d = lora_fix_desc(true, 4, AR, AALPHA, targets, false, 0.1, LORA_INIT_FALSE);
    d.arch = arch, d.qkv_bias = d.o_bias = d.mlp_bias = false;
    snprintf(d.model_type, sizeof d.model_type, "%s", model_type);
    return d;
}

Test(lora_train, phi3_recompute_and_offload_are_bit_identical_fp32_and_bf16, .timeout = 60) {
    check_recompute_of(family_desc(ARCH_PHI3, "phi3",
                                   BIT(PEFT_QKV_PROJ) | BIT(PEFT_O_PROJ) | BIT(PEFT_GATE_UP_PROJ) | BIT(PEFT_DOWN_PROJ)),
                       "phi3");
}

Test(lora_train, qwen3_recompute_and_offload_are_bit_identical_fp32_and_bf16, .timeout = 60) {
    check_recompute_of(family_desc(ARCH_QWEN3, "qwen3", LLAMA_ALL), "qwen3");
}

Test(lora_train, llama_recompute_and_offload_are_bit_identical_fp32_and_bf16, .timeout = 60) { check_recompute(true); }
Test(lora_train, gpt2_recompute_and_offload_are_bit_identical_fp32_and_bf16, .timeout = 60) { check_recompute(false); }

/* ---------------------------------------------------------------- 3. the memory plan */

/* plan_memory per category == what model_create(_sharded) allocated (the backend's tracker), over
 * B, T, recompute, the act dtype, dropout and ZeRO-1 shards; and the categories LoRA changes,
 * computed here from the dims alone: the frozen base is the architecture's parameters once in
 * the act dtype; params, grads and AdamW state are the adapters only (ZeRO-1: padded to world
 * shards, AdamW per shard; bf16 adds a bf16 copy of the adapters); the workspace is the full
 * model's plus one adapter application's (x A^T and its gradient [BT, r] each, times the sites on one
 * fused weight, whose concatenated lora_A is one GEMM, rows padded to 8 elements; with dropout the input gradient [BT, widest
 * input] and the dropped input [BT, widest input]); every other category is the full model's (no
 * activation is kept per adapter). */
Test(lora_train, planned_equals_measured_with_adapters_and_a_frozen_base, .timeout = 60) {
    const int Bs[2] = {1, 3}, Ts[2] = {8, 24}, L = 3;
    /* world, rank: world 11 divides none of these adapter counts (r L = 15 times 56, 72, 232, 64, 32, 256):
     * padded shards */
    const int shards[5][2] = {{1, 0}, {2, 0}, {2, 1}, {11, 0}, {11, 10}};
    /* target sets whose widest input and widest output block differ both ways, and agree */
    const uint32_t sets[2][3] = {
        {BIT(PEFT_Q_PROJ) | BIT(PEFT_V_PROJ), BIT(PEFT_O_PROJ) | BIT(PEFT_DOWN_PROJ), LLAMA_ALL},
        {BIT(PEFT_C_ATTN), BIT(PEFT_ATTN_C_PROJ), GPT_ALL}};
    int cases = 0, padded = 0;
    for (int variant = 0; variant < 3; variant++) /* GPT-2, the Llama with biases, the tied MQA one */
    for (int ts = 0; ts < 3; ts++)
    for (int act = GT_F32; act <= GT_BF16; act++)
    for (int bi = 0; bi < 2; bi++)
    for (int ti = 0; ti < 2; ti++)
    for (int pk = 0; pk < 4; pk++)
    for (int drop = 0; drop <= 1; drop++)
    for (int sh = 0; sh < 5; sh++) {
        /* the simulator: one shape and target set, no recompute or every layer offloaded, world 1 or
         * 11 (padded shards): 48 configurations (each costs ~0.2 s of mprotect there; the whole grid
         * would take ten minutes) */
        if (test_on_cudasim() && (bi || ti || ts != 2 || (pk != 0 && pk != 3) || (sh != 0 && sh != 3))) continue;
        const int B = Bs[bi], T = Ts[ti], world = shards[sh][0], rank = shards[sh][1];
        const bool llama = variant > 0;
        const uint32_t targets = sets[!llama][ts];
        const RecomputePolicy pol = recompute_policy(pk > 0, pk == 2 ? 2 : 1, pk == 3, L);
        ModelDesc d = lora_fix_desc(llama, L, 5, 10.0, targets, false, drop ? 0.1 : 0.0, LORA_INIT_TRUE);
        ModelDesc d0 = lora_fix_base(llama, L);
        if (variant == 2) d = tied_llama(d), d0 = tied_llama(d0);
        const GtDtype a = (GtDtype)act;
        char what[160];
        snprintf(what, sizeof what, "%s targets %#x %s B%d T%d recompute %d dropout %d world %d rank %d",
                 variant == 2 ? "tied llama" : llama ? "llama" : "gpt2", targets, gt_dtype_name(a), B, T, pk, drop, world,
                 rank);
        MemPlan p, p0;
        cr_assert_eq(plan_memory(&p, &d, B, 1, world, T, pol, world > 1, a), 0, "%s", what);
        cr_assert_eq(plan_memory(&p0, &d0, B, 1, 1, T, pol, false, a), 0, "%s", what);
        Backend *be = test_backend_open();
        backend_set_act_dtype(be, a);
        Model *m = NULL;
        GtError err = {0};
        cr_assert_eq(model_create_sharded(&m, &d, be, B, T, pol, 1, world, rank, 0, &err), 0, "%s: %s", what, err.msg);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(p.bytes[c], be->mem.peak[c], "%s: %s planned %llu, measured %llu", what,
                         mem_category_name((MemCategory)c), (unsigned long long)p.bytes[c],
                         (unsigned long long)be->mem.peak[c]);
        cr_assert_eq(p.device_total, be->mem.device_peak, "%s", what);

        /* from the dims */
        const uint64_t nb = base_params_from_dims(&d), np = lora_params_from_dims(&d);
        const uint64_t ab = a == GT_BF16 ? 2 : 4, shard = (np + (uint64_t)world - 1) / (uint64_t)world;
        cr_assert_eq(arch_num_params(&d), nb, "%s: arch_num_params %llu, from the dims %llu", what,
                     (unsigned long long)arch_num_params(&d), (unsigned long long)nb);
        cr_assert_eq(p.n_params, nb, "%s: %llu base parameters, from the dims %llu", what,
                     (unsigned long long)p.n_params, (unsigned long long)nb);
        cr_assert_eq(p.n_trainable, np, "%s", what);
        cr_assert_eq((uint64_t)m->layout.total, np, "%s", what);
        cr_assert_eq((uint64_t)m->base_layout.total, nb, "%s", what);
        cr_assert_eq((uint64_t)m->shard, shard, "%s", what);
        padded += shard * world > np;
        cr_assert_eq(be->mem.peak[MEM_FROZEN], nb * ab, "%s: frozen %llu, want %llu", what,
                     (unsigned long long)be->mem.peak[MEM_FROZEN], (unsigned long long)(nb * ab));
        cr_assert_eq(be->mem.peak[MEM_PARAMS], shard * world * 4 + (a == GT_BF16 ? np * 2 : 0), "%s: params %llu", what,
                     (unsigned long long)be->mem.peak[MEM_PARAMS]);
        cr_assert_eq(be->mem.peak[MEM_GRADS], shard * world * 4, "%s: grads %llu", what,
                     (unsigned long long)be->mem.peak[MEM_GRADS]);
        cr_assert_eq(be->mem.peak[MEM_OPTIMIZER], 2 * shard * 4, "%s: optimizer %llu", what,
                     (unsigned long long)be->mem.peak[MEM_OPTIMIZER]);
        uint64_t in_max = 0, out_max = 0;
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++)
            if (targets & BIT(mod)) {
                int in, out;
                lora_fix_module_dims(&d, mod, &in, &out);
                in_max = in > (int)in_max ? (uint64_t)in : in_max;
                out_max = out > (int)out_max ? (uint64_t)out : out_max;
            }
        /* the sites on one weight at once: Llama's q, k, v on the fused qkv weight and gate, up on the
         * fused gate_up (GPT-2's modules are a weight each) */
        const uint32_t qkv = BIT(PEFT_Q_PROJ) | BIT(PEFT_K_PROJ) | BIT(PEFT_V_PROJ);
        const uint32_t gu = BIT(PEFT_GATE_PROJ) | BIT(PEFT_UP_PROJ);
        const int n_qkv = __builtin_popcount(targets & qkv), n_gu = __builtin_popcount(targets & gu);
        const uint64_t group = !llama ? 1 : (uint64_t)(n_qkv > n_gu ? (n_qkv > 1 ? n_qkv : 1) : (n_gu > 1 ? n_gu : 1));
        (void)out_max; /* no [BT, output block] under LoRA: B's GEMM accumulates into the base's output */
        /* x A^T and its gradient: r 5 times the group wide, each row padded to a multiple of 8 elements
         * (16-byte rows in bf16, for the GEMMs' fast path) */
        const uint64_t h_stride = (5 * group + 7) / 8 * 8;
        const uint64_t BT = (uint64_t)B * T, lora_ws = BT * ab * (2 * h_stride + (drop ? 2 * in_max : 0));
        cr_assert_eq(be->mem.peak[MEM_WORKSPACE], p0.bytes[MEM_WORKSPACE] + lora_ws, "%s: workspace %llu, the full "
                     "model's %llu + the adapters' %llu", what, (unsigned long long)be->mem.peak[MEM_WORKSPACE],
                     (unsigned long long)p0.bytes[MEM_WORKSPACE], (unsigned long long)lora_ws);
        const MemCategory same[] = {MEM_ACTIVATIONS, MEM_RECOMPUTE_STASH, MEM_RECOMPUTE_SCRATCH, MEM_LOGITS,
                                    MEM_HOST_OFFLOAD, MEM_HOST_STAGING};
        for (size_t c = 0; c < sizeof same / sizeof same[0]; c++)
            cr_assert_eq(be->mem.peak[same[c]], p0.bytes[same[c]], "%s: %s %llu, the full model's %llu", what,
                         mem_category_name(same[c]), (unsigned long long)be->mem.peak[same[c]],
                         (unsigned long long)p0.bytes[same[c]]);
        model_free(m);
        for (int c = 0; c < MEM_COUNT; c++)
            cr_assert_eq(be->mem.current[c], 0, "%s: leaked %s", what, mem_category_name((MemCategory)c));
        backend_close(be);
        cases++;
    }
    /* world 11 is two of the five shardings (one of the simulator's two) */
    cr_assert(padded == (test_on_cudasim() ? cases / 2 : 2 * cases / 5), "only %d of %d configurations have padded shards",
              padded, cases);
    cr_log_info("plan: %d configurations (%d with padded ZeRO-1 shards), planned == measured, frozen and trainable "
                "bytes from the dims", cases, padded);
}
