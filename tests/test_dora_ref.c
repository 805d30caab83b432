/* test_dora_ref.c - DoRA (use_dora) against the double-precision reference, suite dora_ref:
 * (1) the reference's own analytic DoRA backward (ref_lora_dora_backward: dA, dB, dm and dx with
 * the norm ||W + s B A||_row detached, as PEFT does) against central finite differences of its
 * forward with the norm frozen, for a lone module under a nonlinear loss; and the norm's
 * detachment matters there (the live-norm differences are far off), so the check sees it;
 * (2) a tiny GQA Llama (biases) and a tiny GPT-2 with DoRA on every target, random A, B (B nonzero)
 * and magnitudes: one model_step's loss and every adapter tensor's gradient (lora_A, lora_B,
 * lora_magnitude_vector) against the reference model's loss and its finite-difference gradients
 * with the norms frozen, without and with lora_dropout (PEFT's DoRA then adds (g - 1) W dropout(x)
 * + g s B A dropout(x) to the undropped base; the reference drops the same elements). A live norm
 * moves lora_A's gradients far beyond the tolerance, so an undetached norm would be seen. The reference knows the base by HF names (ref_llama.c, ref_gpt.c) and the
 * adapters by PEFT's shapes; test_dora_model.c has recompute and the layout, test_lora_io.c peft. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter.h"
#include "arch.h"
#include "lora.h"
#include "lora_fixture.h"
#include "model.h"
#include "ref_llama.h"
#include "ref_lora.h"
#include "test_backend_select.h"

enum { R = 3, BATCH = 2, SEQ = 6 };
static const double ALPHA = 6.0;

/* ---------------------------------------------------------------- (1) the reference's backward */

typedef struct {
    int rows, in, out;
    double *x, *W, *bias, *G; /* loss = sum G y + 0.5 sum y^2 over the module's output y */
} Lone;

static double lone_forward(const Lone *c, const RefLora *lo, double *y) {
    for (int n = 0; n < c->rows; n++)
        for (int o = 0; o < c->out; o++) {
            double s = c->bias[o];
            for (int i = 0; i < c->in; i++) s += c->W[(size_t)o * c->in + i] * c->x[(size_t)n * c->in + i];
            y[(size_t)n * c->out + o] = s;
        }
    ref_lora_apply(lo, 0, REF_LORA_Q_PROJ, c->x, c->rows, 0, c->in, y, c->out);
    double l = 0;
    for (size_t k = 0; k < (size_t)c->rows * c->out; k++) l += c->G[k] * y[k] + 0.5 * y[k] * y[k];
    return l;
}

static double lone_loss(void *vc, const RefLora *lo) {
    const Lone *c = vc;
    double *y = calloc((size_t)c->rows * c->out, sizeof *y);
    const double l = lone_forward(c, lo, y);
    free(y);
    return l;
}

/* d loss / d x by central differences (x is the context's, not an adapter's) */
static void lone_fd_dx(Lone *c, const RefLora *lo, double *dx) {
    for (size_t k = 0; k < (size_t)c->rows * c->in; k++) {
        const double keep = c->x[k], h = 1e-6 * (1 + fabs(keep));
        c->x[k] = keep + h;
        const double lp = lone_loss(c, lo);
        c->x[k] = keep - h;
        const double lm = lone_loss(c, lo);
        c->x[k] = keep;
        dx[k] = (lp - lm) / (2 * h);
    }
}

static double max_abs(const double *a, size_t n) {
    double m = 0;
    for (size_t k = 0; k < n; k++) m = fmax(m, fabs(a[k]));
    return m;
}

static double max_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t k = 0; k < n; k++) m = fmax(m, fabs(a[k] - b[k]));
    return m;
}

Test(dora_ref, analytic_backward_matches_finite_differences_with_the_norm_detached) {
    Lone c = {.rows = 5, .in = 7, .out = 6};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    c.x = calloc((size_t)c.rows * c.in, sizeof *c.x), c.W = calloc((size_t)c.out * c.in, sizeof *c.W);
    c.bias = calloc((size_t)c.out, sizeof *c.bias), c.G = calloc((size_t)c.rows * c.out, sizeof *c.G);
    for (size_t k = 0; k < (size_t)c.rows * c.in; k++) c.x[k] = lora_fix_rng_normal(&s);
    for (size_t k = 0; k < (size_t)c.out * c.in; k++) c.W[k] = 0.4 * lora_fix_rng_normal(&s);
    for (int o = 0; o < c.out; o++) c.bias[o] = 0.2 * lora_fix_rng_normal(&s);
    for (size_t k = 0; k < (size_t)c.rows * c.out; k++) c.G[k] = lora_fix_rng_normal(&s);
    RefLora lo;
    ref_lora_init(&lo, 1, R, ref_lora_scaling(ALPHA, R, false));
    RefLoraAdapter *a = ref_lora_add_dora(&lo, 0, REF_LORA_Q_PROJ, c.in, c.out, c.W);
    const size_t na = (size_t)R * c.in, nb = (size_t)c.out * R, nx = (size_t)c.rows * c.in;
    for (size_t k = 0; k < na; k++) a->A[k] = 0.3 * lora_fix_rng_normal(&s);
    for (size_t k = 0; k < nb; k++) a->B[k] = 0.3 * lora_fix_rng_normal(&s);
    for (int o = 0; o < c.out; o++) a->m[o] = 0.5 + lora_fix_rng_uniform(&s);

    /* the analytic backward: dy = G + y */
    ref_lora_freeze_norms(&lo);
    double *y = calloc((size_t)c.rows * c.out, sizeof *y), *dx = calloc(nx, sizeof *dx);
    lone_forward(&c, &lo, y);
    for (size_t k = 0; k < (size_t)c.rows * c.out; k++) y[k] += c.G[k];
    ref_lora_dora_backward(&lo, 0, REF_LORA_Q_PROJ, c.x, c.rows, y, dx);
    double *gA = malloc(na * sizeof *gA), *gB = malloc(nb * sizeof *gB), *gm = malloc((size_t)c.out * sizeof *gm);
    memcpy(gA, a->dA, na * sizeof *gA), memcpy(gB, a->dB, nb * sizeof *gB), memcpy(gm, a->dm, (size_t)c.out * sizeof *gm);

    /* finite differences with the norm frozen at the current A, B */
    const double big = ref_lora_fd_grads(&lo, lone_loss, &c, 1e-6);
    cr_assert(isfinite(big) && big > 1e-1, "gradients tiny (%g)", big);
    double *fdx = calloc(nx, sizeof *fdx);
    lone_fd_dx(&c, &lo, fdx);
    const struct { const char *name; const double *an, *fd; size_t n; } cmp[4] = {
        {"lora_A", gA, a->dA, na}, {"lora_B", gB, a->dB, nb}, {"magnitude", gm, a->dm, (size_t)c.out}, {"x", dx, fdx, nx}};
    for (int i = 0; i < 4; i++) {
        const double e = max_diff(cmp[i].an, cmp[i].fd, cmp[i].n), mx = max_abs(cmp[i].fd, cmp[i].n);
        cr_log_info("dora_ref lone %s: max |analytic - fd| %.3g, max |fd| %.3g", cmp[i].name, e, mx);
        cr_assert(mx > 1e-2, "%s: gradient nearly zero (%g)", cmp[i].name, mx);
        cr_assert(e <= 1e-7 * mx, "%s: analytic and finite differences differ by %.3g (largest %.3g)", cmp[i].name, e, mx);
    }

    /* the norm's detachment matters: with a live norm the differences of A, B are elsewhere */
    lo.freeze_norm = false;
    ref_lora_fd_grads(&lo, lone_loss, &c, 1e-6);
    const double live_a = max_diff(gA, a->dA, na), live_b = max_diff(gB, a->dB, nb);
    cr_log_info("dora_ref lone: live-norm differences off by %.3g (A), %.3g (B)", live_a, live_b);
    cr_assert(live_a > 1e-3 * max_abs(gA, na) && live_b > 1e-3 * max_abs(gB, nb),
              "a live norm gives the same gradients (%g, %g): the check would not see an undetached norm", live_a, live_b);

    ref_lora_free(&lo);
    free(c.x), free(c.W), free(c.bias), free(c.G), free(y), free(dx), free(fdx), free(gA), free(gB), free(gm);
}

/* ---------------------------------------------------------------- (2) gtrain's DoRA models */

typedef struct {
    ModelDesc d;
    bool llama;
    Backend *be;
    Model *m;
    float *base_h, *params_h;
    LoraFixRef r; /* the base */
    RefLora lo;
    int tok[BATCH * SEQ], tgt[BATCH * SEQ];
    long items;
} Fix;

/* the module's base weight [out, in] in the reference, by its HF name */
static const double *base_weight(Fix *f, int l, int mod) {
    static const char *const llama_names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                              "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                              "mlp.down_proj"};
    static const char *const gpt_names[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    char nm[128];
    if (f->llama) {
        cr_assert(mod >= REF_LORA_Q_PROJ && mod <= REF_LORA_DOWN_PROJ);
        snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, llama_names[mod]);
        RefTensor *t = ref_llama_find(f->r.ref, f->r.n_ref, nm);
        cr_assert(t, "reference has no %s", nm);
        return t->data;
    }
    cr_assert(mod >= REF_LORA_C_ATTN && mod <= REF_LORA_MLP_C_PROJ);
    snprintf(nm, sizeof nm, "h.%d.%s.weight", l, gpt_names[mod - REF_LORA_C_ATTN]);
    const int i = param_layout_find(&f->m->base_layout, nm);
    cr_assert(i >= 0, "base has no %s", nm);
    return f->r.base_d + f->m->base_layout.tensors[i].offset;
}

static Fix fix_open(bool llama, uint64_t seed, double p) {
    Fix f = {.llama = llama};
    f.d = lora_fix_desc(llama, 2, R, ALPHA, llama ? LORA_FIX_LLAMA_ALL : LORA_FIX_GPT_ALL, false, p, LORA_INIT_TRUE);
    f.d.adapter.dora = true;
    GtError err = {0};
    f.be = test_backend_open();
    cr_assert_eq(model_create(&f.m, &f.d, f.be, BATCH, SEQ, recompute_policy(false, 1, false, 2), 9, &err), 0, "%s",
                 err.msg);
    Model *m = f.m;
    uint64_t s = seed;
    const ParamLayout *bl = &m->base_layout, *pl = &m->layout;
    /* a random base; random A, B (B nonzero) and magnitudes in [0.5, 1.5] */
    f.base_h = malloc(bl->total * sizeof *f.base_h);
    f.params_h = malloc(pl->total * sizeof *f.params_h);
    cr_assert(f.base_h && f.params_h);
    lora_fix_dora_weights(m, &s, f.base_h, f.params_h);
    /* the reference's base */
    lora_fix_ref_open(&f.r, &f.d, bl, f.base_h);
    /* the reference's adapters: lora_A [r, in], lora_B [out, r], magnitude [out] by PEFT's names */
    ref_lora_init(&f.lo, f.d.n_layer, R, ref_lora_scaling(ALPHA, R, false));
    int seen = 0;
    for (int l = 0; l < f.d.n_layer; l++)
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
            if (!(f.d.adapter.targets & (1u << mod))) continue;
            const int idx = m->ad.idx[l][mod];
            cr_assert(idx >= 0 && adapter_tensor(&m->ad, idx, PEFT_PART_M) < pl->n_tensors, "layer %d module %d: no adapter", l, mod);
            const ParamTensor *ta = &pl->tensors[idx], *tb = &pl->tensors[adapter_tensor(&m->ad, idx, PEFT_PART_B)],
                              *tm = &pl->tensors[adapter_tensor(&m->ad, idx, PEFT_PART_M)];
            int in, out;
            lora_fix_module_dims(&f.d, mod, &in, &out);
            cr_assert(strstr(ta->name, ".lora_A.weight") && ta->shape[0] == R && ta->shape[1] == in, "%s", ta->name);
            cr_assert(strstr(tb->name, ".lora_B.weight") && tb->shape[0] == out && tb->shape[1] == R, "%s", tb->name);
            cr_assert(strstr(tm->name, ".lora_magnitude_vector") && tm->ndim == 1 && tm->shape[0] == out, "%s",
                      tm->name);
            RefLoraAdapter *a = ref_lora_add_dora(&f.lo, l, mod, in, out, base_weight(&f, l, mod));
            for (size_t k = 0; k < ta->numel; k++) a->A[k] = f.params_h[ta->offset + k];
            for (size_t k = 0; k < tb->numel; k++) a->B[k] = f.params_h[tb->offset + k];
            for (size_t k = 0; k < tm->numel; k++) a->m[k] = f.params_h[tm->offset + k];
            seen += 3;
        }
    cr_assert_eq(seen, pl->n_tensors);
    /* dropout: the micro-batch starts at row 3 of the step's batch; the reference drops the same elements */
    m->ad.dropout_seed = 4321 + seed, m->ad.dropout_step = 2, m->ad.dropout_row0 = 3;
    f.lo.p = p, f.lo.key = lora_fix_key;
    f.lo.seed = m->ad.dropout_seed, f.lo.step = m->ad.dropout_step, f.lo.row_base = m->ad.dropout_row0 * SEQ;
    lora_fix_tokens(f.tok, f.tgt, BATCH * SEQ, f.d.vocab_size, seed ^ 0x5151, 5);
    for (int i = 0; i < BATCH * SEQ; i++) f.items += f.tgt[i] >= 0;
    return f;
}

static void fix_close(Fix *f) {
    ref_lora_free(&f->lo);
    lora_fix_ref_close(&f->r);
    free(f->base_h), free(f->params_h);
    model_free(f->m);
    backend_close(f->be);
}

static double ref_loss(void *vf, const RefLora *lo) {
    Fix *f = vf;
    return lora_fix_ref_loss(&f->r, lo, f->tok, f->tgt, BATCH, SEQ);
}

static void check_model(bool llama, uint64_t seed, double p) {
    Fix f = fix_open(llama, seed, p);
    GtError err = {0};
    double loss_sum = 0;
    model_zero_grads(f.m);
    cr_assert_eq(model_step(f.m, f.tok, f.tgt, BATCH, (float)(1.0 / f.items), true, &loss_sum, &err), 0, "%s", err.msg);
    const double want = ref_loss(&f, &f.lo), got = loss_sum / f.items;
    cr_log_info("dora_ref %s p %g: loss %.9g, reference %.9g (rel %.3g)", llama ? "llama" : "gpt2", p, got, want,
                fabs(got - want) / fabs(want));
    cr_assert(isfinite(want) && fabs(got - want) <= 1e-5 * fabs(want), "loss %.9g vs reference %.9g", got, want);

    if (p > 0) { /* dropout moves the loss well beyond the tolerance, so the check saw the masks */
        RefLora nodrop = f.lo;
        nodrop.p = 0;
        const double l0 = ref_loss(&f, &nodrop);
        cr_log_info("dora_ref %s: dropout moves the reference loss by %.3g relative", llama ? "llama" : "gpt2",
                    fabs(want - l0) / fabs(l0));
        cr_assert(fabs(want - l0) > 1e-4 * fabs(l0), "dropout changes the loss only by %.3g", fabs(want - l0));
    }
    ref_lora_freeze_norms(&f.lo); /* PEFT's detached norm: the gradient of the loss with it constant */
    const double gmax = ref_lora_fd_grads(&f.lo, ref_loss, &f, 1e-6);
    cr_assert(isfinite(gmax) && gmax > 1e-3, "gradients tiny (%g)", gmax);
    float *g = malloc(f.m->layout.total * sizeof *g);
    cr_assert_eq(f.be->ops->to_host(f.be, g, f.m->grads, f.m->layout.total * sizeof *g, &err), 0, "%s", err.msg);
    double worst_rel[3] = {0};
    for (int l = 0; l < f.d.n_layer; l++)
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
            const RefLoraAdapter *a = &f.lo.ad[l][mod];
            if (!a->A) continue;
            const int idx = f.m->ad.idx[l][mod];
            for (int w = 0; w < 3; w++) {
                const ParamTensor *t = &f.m->layout.tensors[adapter_tensor(&f.m->ad, idx, w)];
                const double *fd = w == 0 ? a->dA : w == 1 ? a->dB : a->dm;
                double diff, big;
                size_t worst;
                lora_fix_grad_diff(g + t->offset, fd, t->numel, &diff, &big, &worst);
                cr_assert(big > 1e-3 * gmax, "%s: gradient nearly zero (%.3g of %.3g)", t->name, big, gmax);
                worst_rel[w] = fmax(worst_rel[w], diff / big);
                /* fp32 gradients against a double central difference, relative to the tensor's largest */
                cr_assert(diff <= 1e-4 * big, "%s[%zu]: gradient %.8g, reference %.8g (tensor's largest %.3g)", t->name,
                          worst, g[t->offset + worst], fd[worst], big);
            }
        }
    cr_log_info("dora_ref %s p %g: worst |gtrain - fd| / tensor max: lora_A %.3g, lora_B %.3g, magnitude %.3g (max grad %.3g)",
                llama ? "llama" : "gpt2", p, worst_rel[0], worst_rel[1], worst_rel[2], gmax);
    /* a gtrain that did not detach the norm would be seen: the live-norm gradients are far off */
    f.lo.freeze_norm = false;
    cr_assert(isfinite(ref_lora_fd_grads(&f.lo, ref_loss, &f, 1e-6)));
    double live = 0;
    for (int l = 0; l < f.d.n_layer; l++)
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
            const RefLoraAdapter *a = &f.lo.ad[l][mod];
            if (!a->A) continue;
            const ParamTensor *ta = &f.m->layout.tensors[f.m->ad.idx[l][mod]];
            for (size_t k = 0; k < ta->numel; k++) live = fmax(live, fabs((double)g[ta->offset + k] - a->dA[k]));
        }
    cr_log_info("dora_ref %s: with a live norm lora_A's gradients differ by up to %.3g", llama ? "llama" : "gpt2", live);
    cr_assert(live > 1e-2 * gmax, "a live norm changes lora_A's gradients only by %.3g of %.3g", live, gmax);
    free(g);
    fix_close(&f);
}

Test(dora_ref, llama_loss_and_every_adapter_gradient_match_the_reference) { check_model(true, 600, 0.0); }
Test(dora_ref, gpt2_loss_and_every_adapter_gradient_match_the_reference) { check_model(false, 610, 0.0); }
/* with lora_dropout: PEFT's DoRA then adds (g - 1) W dropout(x) + g s B A dropout(x) to the undropped base */
Test(dora_ref, llama_with_dropout_matches_the_reference) { check_model(true, 620, 0.1); }
Test(dora_ref, gpt2_with_dropout_matches_the_reference) { check_model(false, 630, 0.1); }
