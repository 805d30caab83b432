/* test_lora_model.c - LoRA models (a GQA Llama with biases and a GPT-2) against the independent
 * double-precision references with adapters (tests/ref_lora.c through ref_llama.c / ref_gpt.c):
 * the loss and every adapter gradient against central finite differences of the reference, for
 * every target module alone and all together, with and without use_rslora, with and without
 * dropout (the mask a pure function of lora_dropout_key's ingredients, indexed over the step's
 * whole batch: the micro-batch starts at row dropout_row0 of it); evaluation does not drop; the frozen base gets no gradient and stays bit-identical
 * through optimizer steps; init_lora_weights true (B zero) gives the base model's loss; recompute
 * drops the same elements. The reference knows tensors only by HF names and PEFT's [r, in] /
 * [out, r] shapes, so a misplaced block, a wrong input or a transposed adapter shows up. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "optim.h"
#include "peft.h"
#include "ref_lora.h"
#include "ref_ops.h"
#include "test_backend_select.h"
#include "trainer.h"

_Static_assert((int)REF_LORA_Q_PROJ == (int)PEFT_Q_PROJ && (int)REF_LORA_K_PROJ == (int)PEFT_K_PROJ &&
               (int)REF_LORA_V_PROJ == (int)PEFT_V_PROJ && (int)REF_LORA_O_PROJ == (int)PEFT_O_PROJ &&
               (int)REF_LORA_GATE_PROJ == (int)PEFT_GATE_PROJ && (int)REF_LORA_UP_PROJ == (int)PEFT_UP_PROJ &&
               (int)REF_LORA_DOWN_PROJ == (int)PEFT_DOWN_PROJ && (int)REF_LORA_C_ATTN == (int)PEFT_C_ATTN &&
               (int)REF_LORA_ATTN_C_PROJ == (int)PEFT_ATTN_C_PROJ && (int)REF_LORA_C_FC == (int)PEFT_C_FC &&
               (int)REF_LORA_MLP_C_PROJ == (int)PEFT_MLP_C_PROJ && (int)REF_LORA_QKV_PROJ == (int)PEFT_QKV_PROJ &&
               (int)REF_LORA_GATE_UP_PROJ == (int)PEFT_GATE_UP_PROJ && (int)REF_LORA_MODULES == (int)PEFT_MODULE_COUNT,
               "ref_lora.h numbers modules as peft.h");

enum { R = 3, BATCH = 2, SEQ = 6 };
static const double ALPHA = 6.0;
#define LLAMA_ALL LORA_FIX_LLAMA_ALL
#define GPT_ALL LORA_FIX_GPT_ALL

static ModelDesc base_desc(bool llama) { return lora_fix_base(llama, 2); }

static ModelDesc lora_desc(bool llama, uint32_t targets, bool rslora, double p, LoraInit init) {
    return lora_fix_desc(llama, 2, R, ALPHA, targets, rslora, p, init);
}

/* ---------------------------------------------------------------- a model and its reference */

typedef struct {
    ModelDesc d;
    Backend *be;
    Model *m;
    float *base_h;    /* the base weights written into m->base (base_layout) */
    float *params_h;  /* the adapters in m->params (layout) */
    int *tok, *tgt;   /* BATCH x SEQ */
    long items;
    /* the reference */
    bool llama, init_true; /* init_true: the adapters are the model's own LORA_INIT_TRUE ones (B zero) */
    LoraFixRef r;     /* the base */
    RefLora lo;
} Fix;

static void fill_tokens(Fix *f, uint64_t seed) {
    const size_t n = (size_t)BATCH * SEQ;
    f->tok = malloc(n * sizeof *f->tok), f->tgt = malloc(n * sizeof *f->tgt);
    cr_assert(f->tok && f->tgt);
    lora_fix_tokens(f->tok, f->tgt, n, f->d.vocab_size, seed, 5);
    f->items = count_items(f->tgt, n);
}

/* a base tensor the run config's lora.base_dtype stores in its own dtype: the layers' matrices
 * (the linear weights), as documented; written from the shape here, not from gtrain's rule */
static bool linear_weight(const ParamTensor *t) { return t->layer >= 0 && t->ndim == 2; }

/* every base weight uniform(-0.3, 0.3) (norm weights around 1, biases +-0.2), into m->base;
 * round_linear: the linear weights rounded to bf16 here (ref_round_bf16) first. A base kept in the
 * act dtype under fp32 is written into m->base as it is; any other goes through model_upload_base
 * (which stores each tensor in its own dtype). */
static void load_random_base_as(Model *m, Backend *be, float *h, uint64_t seed, bool round_linear) {
    const ParamLayout *bl = &m->base_layout;
    uint64_t s = seed;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        cr_assert_not_null(t->spec, "base tensor %s is not in the architecture's table", t->name);
        const bool norm = t->role == ROLE_NORM1_W || t->role == ROLE_NORM2_W || t->role == ROLE_NORMF_W;
        const double a = t->ndim == 1 && !norm ? 0.2 : 0.3;
        for (size_t k = 0; k < t->numel; k++) h[t->offset + k] = (float)((norm ? 1.0 : 0.0) + a * (2 * lora_fix_rng_uniform(&s) - 1));
        if (round_linear && linear_weight(t))
            for (size_t k = 0; k < t->numel; k++) h[t->offset + k] = (float)ref_round_bf16(h[t->offset + k]);
    }
    GtError err = {0};
    cr_assert_not_null(m->base, "a LoRA model has no frozen base");
    if (m->act == GT_F32 && m->desc.adapter.base_dtype == BASE_DTYPE_AUTO) {
        cr_assert_eq(be->ops->to_device(be, m->base, h, bl->total * sizeof *h, &err), 0, "%s", err.msg);
    } else {
        float *tmp = malloc(bl->total * sizeof *tmp);
        memcpy(tmp, h, bl->total * sizeof *tmp);
        cr_assert_eq(model_upload_base(m, 0, tmp, bl->total, &err), 0, "%s", err.msg);
        free(tmp);
    }
    model_params_changed(m);
}

/* the model's adapters: checked against the targets (index, flags, PEFT shapes), and the model's
 * values (random ones first when randomise) into the reference */
static void bind_adapters(Fix *f, bool randomise, bool rslora, uint64_t seed) {
    Model *m = f->m;
    const ParamLayout *pl = &m->layout;
    GtError err = {0};
    cr_assert_eq(pl->total, (size_t)lora_num_params(&f->d), "the trainable layout is not the adapters alone");
    cr_assert_not_null(m->ad.idx);
    f->params_h = malloc(pl->total * sizeof *f->params_h);
    cr_assert_eq(f->be->ops->to_host(f->be, f->params_h, m->params, pl->total * sizeof(float), &err), 0, "%s", err.msg);
    if (randomise) {
        uint64_t s = seed;
        for (size_t k = 0; k < pl->total; k++) f->params_h[k] = (float)(0.3 * (2 * lora_fix_rng_uniform(&s) - 1));
        cr_assert_eq(f->be->ops->to_device(f->be, m->params, f->params_h, pl->total * sizeof(float), &err), 0, "%s",
                     err.msg);
        model_params_changed(m);
    }
    /* the reference's own scale: a model that ignored lora_scale, or peft_scaling wrong, shows up */
    ref_lora_init(&f->lo, f->d.n_layer, R, ref_lora_scaling(ALPHA, R, rslora));
    int seen = 0;
    for (int l = 0; l < f->d.n_layer; l++)
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
            const int idx = m->ad.idx[l][mod];
            if (!(f->d.adapter.targets & (1u << mod))) {
                cr_assert_eq(idx, -1, "layer %d: %s is not a target but has an adapter", l, peft_module_name(mod));
                continue;
            }
            const int ib = adapter_tensor(&m->ad, idx, PEFT_PART_B);
            cr_assert(idx >= 0 && ib < pl->n_tensors, "layer %d: %s has no adapter", l, peft_module_name(mod));
            const ParamTensor *ta = &pl->tensors[idx], *tb = &pl->tensors[ib];
            int in, out;
            lora_fix_module_dims(&f->d, mod, &in, &out);
            char ka[PEFT_KEY_MAX], kb[PEFT_KEY_MAX];
            cr_assert_eq(peft_key(ka, sizeof ka, f->d.arch, l, (PeftModule)mod, PEFT_PART_A), 0);
            cr_assert_eq(peft_key(kb, sizeof kb, f->d.arch, l, (PeftModule)mod, PEFT_PART_B), 0);
            cr_assert(strcmp(ta->name, ka) == 0 && ta->layer == l, "%s: not layer %d's %s lora_A", ta->name, l,
                      peft_module_name(mod));
            cr_assert(strcmp(tb->name, kb) == 0 && tb->layer == l, "%s: not layer %d's %s lora_B", tb->name, l,
                      peft_module_name(mod));
            cr_assert(ta->numel == (size_t)R * in && ta->shape[0] == R && ta->shape[1] == in,
                      "%s: [%lld, %lld], PEFT's lora_A is [%d, %d]", ta->name, (long long)ta->shape[0],
                      (long long)ta->shape[1], R, in);
            cr_assert(tb->numel == (size_t)out * R && tb->shape[0] == out && tb->shape[1] == R,
                      "%s: [%lld, %lld], PEFT's lora_B is [%d, %d]", tb->name, (long long)tb->shape[0],
                      (long long)tb->shape[1], out, R);
            RefLoraAdapter *a = ref_lora_add(&f->lo, l, mod, in, out);
            for (size_t k = 0; k < ta->numel; k++) a->A[k] = f->params_h[ta->offset + k];
            for (size_t k = 0; k < tb->numel; k++) a->B[k] = f->params_h[tb->offset + k];
            seen += 2;
        }
    cr_assert_eq(seen, pl->n_tensors, "the layout has %d tensors, the targets %d adapters", pl->n_tensors, seen);
    for (int i = 0; i < pl->n_tensors; i++) cr_assert_null(pl->tensors[i].spec, "%s", pl->tensors[i].name);
}

/* act: the activation dtype; round_linear: the base's linear weights rounded to bf16 by the test
 * (load_random_base_as), and the reference given the rounded values */
static Fix fix_open_as(ModelDesc d, bool rslora, bool randomise_adapters, RecomputePolicy pol, uint64_t seed,
                       GtDtype act, bool round_linear) {
    Fix f = {.d = d, .llama = d.arch == ARCH_LLAMA, .init_true = !randomise_adapters && d.adapter.init == LORA_INIT_TRUE};
    f.be = test_backend_open();
    backend_set_act_dtype(f.be, act);
    GtError err = {0};
    cr_assert_eq(model_create(&f.m, &d, f.be, BATCH, SEQ, pol, 7, &err), 0, "%s", err.msg);
    f.base_h = malloc(f.m->base_layout.total * sizeof *f.base_h);
    load_random_base_as(f.m, f.be, f.base_h, seed, round_linear);
    bind_adapters(&f, randomise_adapters, rslora, seed + 1);
    /* a micro-batch that starts at row 5 of the step's batch: its mask rows are 5 * SEQ on */
    f.m->ad.dropout_seed = 1234 + seed, f.m->ad.dropout_step = 5, f.m->ad.dropout_row0 = 5;
    f.lo.p = d.adapter.dropout, f.lo.key = lora_fix_key;
    f.lo.seed = f.m->ad.dropout_seed, f.lo.step = f.m->ad.dropout_step, f.lo.row_base = f.m->ad.dropout_row0 * SEQ;
    fill_tokens(&f, seed + 2);
    const ParamLayout *bl = &f.m->base_layout;
    lora_fix_ref_open(&f.r, &d, bl, f.base_h);
    if (f.llama) {
        int64_t elems = 0;
        for (int i = 0; i < f.r.n_ref; i++) elems += f.r.ref[i].rows * f.r.ref[i].cols;
        cr_assert_eq((uint64_t)elems, (uint64_t)bl->total, "reference has %lld base parameters, gtrain %zu",
                     (long long)elems, bl->total);
    }
    return f;
}

static Fix fix_open(ModelDesc d, bool rslora, bool randomise_adapters, RecomputePolicy pol, uint64_t seed) {
    return fix_open_as(d, rslora, randomise_adapters, pol, seed, GT_F32, false);
}

static void fix_close(Fix *f) {
    ref_lora_free(&f->lo);
    lora_fix_ref_close(&f->r);
    free(f->base_h), free(f->params_h), free(f->tok), free(f->tgt);
    model_free(f->m);
    backend_close(f->be);
}

/* the reference's mean loss with the adapters as f->lo has them (lo: f->lo or a variant) */
static double ref_loss(void *vf, const RefLora *lo) {
    Fix *f = vf;
    return lora_fix_ref_loss(&f->r, lo, f->tok, f->tgt, BATCH, SEQ);
}

static float *grads_host(Fix *f) {
    GtError err = {0};
    const size_t n = f->m->layout.total;
    float *g = malloc(n * sizeof *g);
    cr_assert_eq(f->be->ops->to_host(f->be, g, f->m->grads, n * sizeof *g, &err), 0, "%s", err.msg);
    return g;
}

/* one training micro-batch: model loss and gradients against the reference's loss and its
 * finite-difference gradients; then an evaluation step against the reference without dropout */
static void check_model(Fix *f, const char *what) {
    GtError err = {0};
    double loss_sum = 0;
    model_zero_grads(f->m);
    cr_assert_eq(model_step(f->m, f->tok, f->tgt, BATCH, (float)(1.0 / f->items), true, &loss_sum, &err), 0, "%s",
                 err.msg);
    const double want = ref_loss(f, &f->lo), got = loss_sum / f->items;
    cr_assert(isfinite(want));
    cr_assert(fabs(got - want) <= 1e-5 * fabs(want), "%s: loss %.9g vs reference %.9g", what, got, want);

    const double gmax = ref_lora_fd_grads(&f->lo, ref_loss, f, 1e-6);
    cr_assert(isfinite(gmax) && gmax > 1e-3, "%s: gradients are all tiny (%g): the test would prove nothing", what, gmax);
    float *g = grads_host(f);
    for (int l = 0; l < f->d.n_layer; l++)
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
            const RefLoraAdapter *a = &f->lo.ad[l][mod];
            if (!a->A) continue;
            const int idx = f->m->ad.idx[l][mod];
            for (int w = 0; w < 2; w++) {
                const ParamTensor *t = &f->m->layout.tensors[adapter_tensor(&f->m->ad, idx, w)];
                const double *fd = w ? a->dB : a->dA;
                double diff, big;
                size_t worst;
                lora_fix_grad_diff(g + t->offset, fd, t->numel, &diff, &big, &worst);
                /* fp32 gradients against a double central difference: ~1e-6 of the largest */
                cr_assert(diff <= 1e-4 * gmax, "%s: %s[%zu]: gradient %.8g, reference %.8g (largest %.3g)", what,
                          t->name, worst, g[t->offset + worst], fd[worst], gmax);
                /* every tensor carries signal (B = 0 leaves A's gradient 0: checked exactly) */
                if (w == 1 || big > 0)
                    cr_assert(big > 1e-3 * gmax, "%s: %s: gradient nearly zero (%.3g of %.3g)", what, t->name, big, gmax);
            }
        }
    free(g);

    /* evaluation (no compute_grad) does not drop */
    RefLora nodrop = f->lo;
    nodrop.p = 0;
    double eval_sum = 0;
    cr_assert_eq(model_step(f->m, f->tok, f->tgt, BATCH, 1.0f, false, &eval_sum, &err), 0, "%s", err.msg);
    const double want_eval = ref_loss(f, &nodrop);
    cr_assert(fabs(eval_sum / f->items - want_eval) <= 1e-5 * fabs(want_eval), "%s: eval loss %.9g vs reference %.9g",
              what, eval_sum / f->items, want_eval);
    /* and dropout moves the training loss well beyond the tolerance (1e-5), so the check above saw
     * it (measured: 4e-4 to 7e-4 relative for a single module) */
    if (f->lo.p > 0 && !f->init_true)
        cr_assert(fabs(want - want_eval) > 2e-4 * fabs(want_eval), "%s: dropout changes the reference loss only by %.3g",
                  what, fabs(want - want_eval));
}

/* the targets with and without use_rslora and dropout */
static void check_targets(bool llama, uint32_t targets) {
    for (int v = 0; v < 4; v++) {
        const bool rslora = v & 1;
        const double p = v & 2 ? 0.1 : 0.0;
        char what[96];
        snprintf(what, sizeof what, "%s targets %#x%s, dropout %g", llama ? "llama" : "gpt2", targets,
                 rslora ? " rslora" : "", p);
        Fix f = fix_open(lora_desc(llama, targets, rslora, p, LORA_INIT_TRUE), rslora, true,
                         recompute_policy(false, 1, false, 2), 100 + 10 * v + targets % 7);
        check_model(&f, what);
        fix_close(&f);
    }
}

Test(lora_model, llama_q_proj) { check_targets(true, 1u << PEFT_Q_PROJ); }
Test(lora_model, llama_k_proj) { check_targets(true, 1u << PEFT_K_PROJ); }
Test(lora_model, llama_v_proj) { check_targets(true, 1u << PEFT_V_PROJ); }
Test(lora_model, llama_o_proj) { check_targets(true, 1u << PEFT_O_PROJ); }
Test(lora_model, llama_gate_proj) { check_targets(true, 1u << PEFT_GATE_PROJ); }
Test(lora_model, llama_up_proj) { check_targets(true, 1u << PEFT_UP_PROJ); }
Test(lora_model, llama_down_proj) { check_targets(true, 1u << PEFT_DOWN_PROJ); }
Test(lora_model, gpt2_c_attn) { check_targets(false, 1u << PEFT_C_ATTN); }
Test(lora_model, gpt2_attn_c_proj) { check_targets(false, 1u << PEFT_ATTN_C_PROJ); }
Test(lora_model, gpt2_c_fc) { check_targets(false, 1u << PEFT_C_FC); }
Test(lora_model, gpt2_mlp_c_proj) { check_targets(false, 1u << PEFT_MLP_C_PROJ); }

Test(lora_model, llama_all_seven_modules) { check_targets(true, LLAMA_ALL); }
Test(lora_model, gpt2_all_four_modules) { check_targets(false, GPT_ALL); }

/* init_lora_weights true: A Kaiming-uniform, B zero, so the adapted model is the base model (the
 * same loss as a model without LoRA holding the same weights, with dropout too); A's gradient is
 * zero and B's the reference's */
static void check_init_true(bool llama) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    Fix f = fix_open(lora_desc(llama, targets, false, 0.1, LORA_INIT_TRUE), false, false,
                     recompute_policy(false, 1, false, 2), 300);
    for (int i = 0; i < f.m->layout.n_tensors; i++) {
        const ParamTensor *t = &f.m->layout.tensors[i];
        int in, out;
        lora_fix_module_dims(&f.d, lora_tensor_module(&f.d, i), &in, &out);
        const bool lora_B = strstr(t->name, ".lora_B.") != NULL;
        const double bound = 1.0 / sqrt((double)in);
        double big = 0;
        for (size_t k = 0; k < t->numel; k++) {
            const double x = f.params_h[t->offset + k];
            if (lora_B) cr_assert_eq(x, 0.0, "%s[%zu] = %g: lora_B starts at zero", t->name, k, x);
            else cr_assert(fabs(x) <= bound * (1 + 1e-6), "%s[%zu] = %g outside U(-1/sqrt(%d), ..)", t->name, k, x, in);
            big = fmax(big, fabs(x));
        }
        if (!lora_B) cr_assert(big > 0.5 * bound, "%s: largest %g of bound %g", t->name, big, bound);
    }
    /* the base model itself: no LoRA, the same weights as its params */
    ModelDesc d0 = base_desc(llama);
    Model *m0 = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m0, &d0, f.be, BATCH, SEQ, recompute_policy(false, 1, false, 2), 7, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(m0->layout.total, f.m->base_layout.total);
    cr_assert_eq(f.be->ops->to_device(f.be, m0->params, f.base_h, m0->layout.total * sizeof(float), &err), 0, "%s",
                 err.msg);
    model_params_changed(m0);
    double l0 = 0, l1 = 0, l2 = 0;
    cr_assert_eq(model_step(m0, f.tok, f.tgt, BATCH, 1.0f, false, &l0, &err), 0, "%s", err.msg);
    cr_assert_eq(model_step(f.m, f.tok, f.tgt, BATCH, 1.0f, false, &l1, &err), 0, "%s", err.msg);
    model_zero_grads(f.m);
    cr_assert_eq(model_step(f.m, f.tok, f.tgt, BATCH, (float)(1.0 / f.items), true, &l2, &err), 0, "%s", err.msg);
    cr_assert(fabs(l1 - l0) <= 1e-6 * fabs(l0), "eval loss %.9g, the base model's %.9g", l1, l0);
    cr_assert(fabs(l2 - l0) <= 1e-6 * fabs(l0), "training loss (dropout 0.1) %.9g, the base model's %.9g", l2, l0);
    const double base_ref = ref_loss(&f, NULL);
    cr_assert(fabs(l0 / f.items - base_ref) <= 1e-5 * base_ref, "base loss %.9g, reference %.9g", l0 / f.items, base_ref);
    float *g = grads_host(&f);
    for (int i = 0; i < f.m->layout.n_tensors; i++) {
        const ParamTensor *t = &f.m->layout.tensors[i];
        if (strstr(t->name, ".lora_B.")) continue;
        for (size_t k = 0; k < t->numel; k++)
            cr_assert_eq(g[t->offset + k], 0.0f, "%s[%zu]: gradient %g with B = 0", t->name, k, g[t->offset + k]);
    }
    free(g);
    model_free(m0);
    check_model(&f, llama ? "llama init true" : "gpt2 init true");
    fix_close(&f);
}

Test(lora_model, llama_init_true_is_the_base_model) { check_init_true(true); }
Test(lora_model, gpt2_init_true_is_the_base_model) { check_init_true(false); }

/* the frozen base: m->grads is adapter-sized, and a few optimizer steps (trainer_accumulate over
 * two micro-batches with dropout, AdamW with weight decay) leave the base bit for bit as loaded
 * while the adapters move. The accumulated gradient is the sum of the micro-batches', micro-batch
 * a dropping from row dropout_row0 = (a * world + data_rank) * B of the step's batch (the rows the
 * trainer's fill_step gives it): alone (world 1, rank 0) rows 0 and B, as rank 1 of 2 rows B and
 * 3B, so a trainer_accumulate that ignored the micro-batch, world or rank would drop other rows. */
static void check_frozen(bool llama) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    Fix f = fix_open(lora_desc(llama, targets, true, 0.1, LORA_INIT_FALSE), true, true,
                     recompute_policy(false, 1, false, 2), 400);
    Model *m = f.m;
    cr_assert(m->layout.total < m->base_layout.total / 2, "trainable %zu of base %zu", m->layout.total,
              m->base_layout.total);
    const size_t nb = m->base_layout.total, np = m->layout.total, n = (size_t)2 * BATCH * SEQ;
    int *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    uint64_t s = 77;
    for (size_t i = 0; i < n; i++) {
        tok[i] = (int)(lora_fix_rng_next(&s) % (uint64_t)f.d.vocab_size);
        tgt[i] = i % 7 == 2 ? -100 : (int)(lora_fix_rng_next(&s) % (uint64_t)f.d.vocab_size);
    }
    const long items = count_items(tgt, n);
    RunConfig cfg;
    config_defaults(&cfg);
    cfg.weight_decay = 0.1;
    GtError err = {0};
    float *before = malloc(nb * sizeof *before), *after = malloc(nb * sizeof *after);
    cr_assert_eq(f.be->ops->to_host(f.be, before, m->base, nb * sizeof(float), &err), 0, "%s", err.msg);
    cr_assert(memcmp(before, f.base_h, nb * sizeof(float)) == 0, "m->base does not read back as loaded");
    for (int step = 1; step <= 3; step++) {
        m->ad.dropout_step = step;
        float *by_hand[2] = {NULL, NULL};
        /* rank 1 of 2 first, then alone: the optimizer steps on the lone rank's gradient */
        for (int pass = 0; pass < 2; pass++) {
            const int world = pass == 0 ? 2 : 1, rank = pass == 0 ? 1 : 0;
            /* the two micro-batches one at a time, as the trainer must drop them */
            model_zero_grads(m);
            for (int a = 0; a < 2; a++) {
                double ls = 0;
                m->ad.dropout_row0 = ((long)a * world + rank) * BATCH;
                cr_assert_eq(model_step(m, tok + (size_t)a * BATCH * SEQ, tgt + (size_t)a * BATCH * SEQ, BATCH,
                                        (float)(1.0 / items), true, &ls, &err), 0, "%s", err.msg);
            }
            float *g1 = grads_host(&f);
            model_zero_grads(m);
            double loss = 0;
            m->ad.dropout_row0 = 99; /* the trainer's to set */
            m->data_rank = rank;  /* the trainer's when it creates the model */
            cr_assert_eq(trainer_accumulate(m, tok, tgt, BATCH, 2, world, LOSS_NORM_TOKENS, items, &loss, &err), 0,
                         "%s", err.msg);
            float *g2 = grads_host(&f);
            double diff = 0, big = 0;
            for (size_t k = 0; k < np; k++) diff = fmax(diff, fabs((double)g1[k] - g2[k])), big = fmax(big, fabs(g1[k]));
            cr_assert(big > 0 && diff <= 1e-6 * big,
                      "step %d, rank %d of %d: trainer_accumulate's gradient differs from micro-batches 0 and 1 dropped "
                      "from rows %d and %d by %.3g (largest %.3g): it must set m->ad.dropout_row0 to (a * world + "
                      "data_rank) * B for micro-batch a", step, rank, world, rank * BATCH, (world + rank) * BATCH, diff,
                      big);
            cr_assert_eq(m->ad.dropout_row0, (long)(world + rank) * BATCH, "step %d: dropout_row0 after micro-batch 1",
                         step);
            by_hand[pass] = g1;
            free(g2);
        }
        /* and the two sets of rows drop differently (far beyond the bound above) */
        double diff = 0, big = 0;
        for (size_t k = 0; k < np; k++)
            diff = fmax(diff, fabs((double)by_hand[0][k] - by_hand[1][k])), big = fmax(big, fabs(by_hand[1][k]));
        cr_assert(diff > 1e-3 * big, "step %d: rows {B, 3B} and {0, B} give the same gradient (%.3g of %.3g)", step,
                  diff, big);
        free(by_hand[0]), free(by_hand[1]);
        adamw_step(m, 1e-2, &cfg, step);
        model_params_changed(m);
    }
    cr_assert_eq(f.be->ops->to_host(f.be, after, m->base, nb * sizeof(float), &err), 0, "%s", err.msg);
    cr_assert(memcmp(before, after, nb * sizeof(float)) == 0, "the frozen base changed in training");
    float *p = malloc(np * sizeof *p);
    cr_assert_eq(f.be->ops->to_host(f.be, p, m->params, np * sizeof(float), &err), 0, "%s", err.msg);
    size_t moved = 0;
    for (size_t k = 0; k < np; k++) moved += p[k] != f.params_h[k];
    cr_assert(moved > np / 2, "only %zu of %zu adapter values moved", moved, np);
    free(p), free(before), free(after), free(tok), free(tgt);
    fix_close(&f);
}

Test(lora_model, llama_base_is_frozen) { check_frozen(true); }
Test(lora_model, gpt2_base_is_frozen) { check_frozen(false); }

/* recompute (every layer, offloaded or not) re-runs the forward with the same dropout masks: the
 * gradients are bit for bit those without recompute */
static void check_recompute(bool llama) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    const RecomputePolicy pols[3] = {recompute_policy(false, 1, false, 2), recompute_policy(true, 1, false, 2),
                                     recompute_policy(true, 1, true, 2)};
    float *g0 = NULL;
    double l0 = 0;
    for (int k = 0; k < 3; k++) {
        Fix f = fix_open(lora_desc(llama, targets, false, 0.1, LORA_INIT_FALSE), false, true, pols[k], 500);
        GtError err = {0};
        double ls = 0;
        model_zero_grads(f.m);
        cr_assert_eq(model_step(f.m, f.tok, f.tgt, BATCH, (float)(1.0 / f.items), true, &ls, &err), 0, "%s", err.msg);
        float *g = grads_host(&f);
        if (k == 0) {
            g0 = g, l0 = ls;
        } else {
            cr_assert_eq(ls, l0, "policy %d: loss %.9g, without recompute %.9g", k, ls, l0);
            cr_assert(memcmp(g, g0, f.m->layout.total * sizeof *g) == 0, "policy %d: gradients differ", k);
            free(g);
        }
        fix_close(&f);
    }
    free(g0);
}

Test(lora_model, llama_recompute_drops_the_same_elements) { check_recompute(true); }
Test(lora_model, gpt2_recompute_drops_the_same_elements) { check_recompute(false); }

/* ---------------------------------------------------------------- a base stored in its own dtype */

/* one training micro-batch (dropout on) and one evaluation: the losses and the adapter gradients */
static float *step_bits(Fix *f, double *train, double *eval) {
    GtError err = {0};
    model_zero_grads(f->m);
    cr_assert_eq(model_step(f->m, f->tok, f->tgt, BATCH, (float)(1.0 / f->items), true, train, &err), 0, "%s", err.msg);
    float *g = grads_host(f);
    cr_assert_eq(model_step(f->m, f->tok, f->tgt, BATCH, 1.0f, false, eval, &err), 0, "%s", err.msg);
    return g;
}

/* f's base: each tensor's storage dtype (the linear weights in lin, the rest in rest), the frozen
 * buffer's measured bytes from that, and what reads back (model_download_base) bit for bit the
 * loaded values as the test rounded them (lin bf16: ref_round_bf16; rest bf16 likewise) */
static void check_storage(Fix *f, GtDtype lin, GtDtype rest, const char *what) {
    const ParamLayout *bl = &f->m->base_layout;
    uint64_t bytes = 0;
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        const GtDtype want = linear_weight(t) ? lin : rest;
        cr_assert_eq(t->dtype, want, "%s: %s stored %s, expected %s", what, t->name, gt_dtype_name(t->dtype),
                     gt_dtype_name(want));
        bytes += t->numel * (want == GT_BF16 ? 2 : 4);
    }
    cr_assert_eq(f->be->mem.current[MEM_FROZEN], bytes, "%s: the frozen base takes %llu bytes, its tensors %llu", what,
                 (unsigned long long)f->be->mem.current[MEM_FROZEN], (unsigned long long)bytes);
    float *back = malloc(bl->total * sizeof *back);
    GtError err = {0};
    cr_assert_eq(model_download_base(f->m, 0, back, bl->total, &err), 0, "%s", err.msg);
    for (int i = 0; i < bl->n_tensors; i++) {
        const ParamTensor *t = &bl->tensors[i];
        const bool b16 = (linear_weight(t) ? lin : rest) == GT_BF16;
        for (size_t k = 0; k < t->numel; k++) {
            const float h = f->base_h[t->offset + k], want = b16 ? (float)ref_round_bf16(h) : h;
            cr_assert(memcmp(&back[t->offset + k], &want, sizeof want) == 0, "%s: %s[%zu] reads back %.9g, stored from "
                      "%.9g: expected %.9g", what, t->name, k, back[t->offset + k], h, want);
        }
    }
    free(back);
}

/* lora.base_dtype bf16 under fp32 activations: the linear weights stored bf16, the rest fp32
 * (check_storage); the model equals the double-precision reference given the bf16-rounded weights
 * (loss and every adapter gradient against its finite differences: check_model), and the
 * reference given the unrounded weights within bf16's error of W (relative 2^-9, bf16's unit
 * roundoff; measured 1.1e-4 GPT-2, 1.5e-4 Llama) and farther than the 1e-5 the rounded reference
 * is met to; it is BIT FOR BIT a model that keeps
 * the whole base fp32 with the linear weights rounded to bf16 on the host by the test; and
 * recompute (every layer, offloaded or not) changes no bit. */
static void check_bf16_base(bool llama) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    const ModelDesc d = lora_desc(llama, targets, false, 0.1, LORA_INIT_FALSE);
    ModelDesc d16 = d;
    d16.adapter.base_dtype = BASE_DTYPE_BF16;
    const RecomputePolicy pols[3] = {recompute_policy(false, 1, false, 2), recompute_policy(true, 1, false, 2),
                                     recompute_policy(true, 1, true, 2)};
    const char *what = llama ? "llama bf16 base" : "gpt2 bf16 base";
    Fix f = fix_open_as(d16, false, true, pols[0], 600, GT_F32, true);
    check_storage(&f, GT_BF16, GT_F32, what);
    check_model(&f, what);
    double t16, e16;
    float *g16 = step_bits(&f, &t16, &e16);

    /* the reference on the unrounded weights (the same seed: the same draws), evaluation loss */
    Fix u = fix_open_as(d, false, true, pols[0], 600, GT_F32, false);
    RefLora nodrop = u.lo;
    nodrop.p = 0;
    const double exact = ref_loss(&u, &nodrop), got = e16 / f.items, dev = fabs(got - exact) / fabs(exact);
    cr_assert(dev <= 0x1p-9, "%s: loss %.9g, the reference on the unrounded base %.9g (%.3g relative)", what, got, exact,
              dev);
    cr_assert(dev > 1e-5, "%s: loss %.9g within %.3g of the unrounded base's %.9g: the storage changed nothing", what,
              got, dev, exact);
    fix_close(&u);

    /* bit for bit: the fp32 base holding the test's rounding */
    Fix r = fix_open_as(d, false, true, pols[0], 600, GT_F32, true);
    double t32, e32;
    float *g32 = step_bits(&r, &t32, &e32);
    cr_assert(t16 == t32 && e16 == e32, "%s: losses %.17g / %.17g, the rounded fp32 base's %.17g / %.17g", what, t16,
              e16, t32, e32);
    cr_assert(memcmp(g16, g32, r.m->layout.total * sizeof *g16) == 0, "%s: gradients differ from the rounded fp32 base's",
              what);
    free(g32);
    fix_close(&r);

    for (int k = 1; k < 3; k++) {
        Fix h = fix_open_as(d16, false, true, pols[k], 600, GT_F32, true);
        double tk, ek;
        float *gk = step_bits(&h, &tk, &ek);
        cr_assert(tk == t16 && ek == e16, "%s, recompute policy %d: losses differ", what, k);
        cr_assert(memcmp(gk, g16, h.m->layout.total * sizeof *gk) == 0, "%s, recompute policy %d: gradients differ",
                  what, k);
        free(gk);
        fix_close(&h);
    }
    free(g16);
    fix_close(&f);
}

Test(lora_model, llama_bf16_base_is_the_rounded_fp32_base_bit_for_bit, .timeout = 60) { check_bf16_base(true); }
Test(lora_model, gpt2_bf16_base_is_the_rounded_fp32_base_bit_for_bit, .timeout = 60) { check_bf16_base(false); }

/* lora.base_dtype fp32 under bf16 activations: the linear weights stored fp32 (read back as
 * loaded), the rest bf16; converted to bf16 for each GEMM, the model is bit for bit the one whose
 * base is stored bf16 (auto), recompute and offload included */
static void check_fp32_base_bf16_act(bool llama) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    const ModelDesc d = lora_desc(llama, targets, false, 0.1, LORA_INIT_FALSE);
    ModelDesc d32 = d;
    d32.adapter.base_dtype = BASE_DTYPE_FP32;
    const RecomputePolicy pols[2] = {recompute_policy(false, 1, false, 2), recompute_policy(true, 1, true, 2)};
    const char *what = llama ? "llama fp32 base, bf16 activations" : "gpt2 fp32 base, bf16 activations";
    Fix a = fix_open_as(d, false, true, pols[0], 700, GT_BF16, false);
    check_storage(&a, GT_BF16, GT_BF16, "bf16 activations, auto base");
    double ta, ea;
    float *ga = step_bits(&a, &ta, &ea);
    cr_assert(isfinite(ta) && isfinite(ea));
    for (int k = 0; k < 2; k++) {
        Fix b = fix_open_as(d32, false, true, pols[k], 700, GT_BF16, false);
        if (k == 0) check_storage(&b, GT_F32, GT_BF16, what);
        double tb, eb;
        float *gb = step_bits(&b, &tb, &eb);
        cr_assert(tb == ta && eb == ea, "%s, policy %d: losses %.17g / %.17g, the bf16 base's %.17g / %.17g", what, k,
                  tb, eb, ta, ea);
        cr_assert(memcmp(gb, ga, b.m->layout.total * sizeof *gb) == 0, "%s, policy %d: gradients differ", what, k);
        free(gb);
        fix_close(&b);
    }
    free(ga);
    fix_close(&a);
}

Test(lora_model, llama_fp32_base_under_bf16_activations_is_the_bf16_base, .timeout = 60) { check_fp32_base_bf16_act(true); }
Test(lora_model, gpt2_fp32_base_under_bf16_activations_is_the_bf16_base, .timeout = 60) { check_fp32_base_bf16_act(false); }
