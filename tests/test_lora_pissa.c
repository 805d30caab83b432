/* test_lora_pissa.c - a PiSSA model and LoRA's initialisation, each check against an independent
 * reference or an exact invariant (suite lora_train, continued from test_lora_train.c; the helpers
 * both use in lora_train_fixture.c):
 *   PiSSA          the initialised model is the base model (loss), W_res + s B A = W per block,
 *                  A and B are a Jacobi SVD's (written here) singular pairs, pissa_niter_4
 *                  captures a known decaying spectrum, the rank-2r conversion over the original
 *                  base gives the trained PiSSA model's loss
 *   init           lora_init_tensor's distributions (gaussian, false, true) by statistics */
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

/* where the module's weight sits in gtrain's fused base tensors (q | k | v, gate | up), from the
 * dims: the tensor's role and the first of its rows */
static TensorRole module_site(const ModelDesc *d, int mod, int64_t *row0) {
    const int QD = d->n_head * d->head_dim, KD = d->n_kv_head * d->head_dim;
    *row0 = 0;
    switch (mod) {
    case PEFT_Q_PROJ: return ROLE_QKV_W;
    case PEFT_K_PROJ: *row0 = QD; return ROLE_QKV_W;
    case PEFT_V_PROJ: *row0 = QD + KD; return ROLE_QKV_W;
    case PEFT_O_PROJ: return ROLE_O_W;
    case PEFT_GATE_PROJ: return ROLE_FC_W;
    case PEFT_UP_PROJ: *row0 = d->n_inner; return ROLE_FC_W;
    case PEFT_DOWN_PROJ: return ROLE_DOWN_W;
    case PEFT_C_ATTN: return ROLE_QKV_W;
    case PEFT_ATTN_C_PROJ: return ROLE_O_W;
    case PEFT_C_FC: return ROLE_FC_W;
    default: return ROLE_DOWN_W;
    }
}

static float *get_base(Model *m) {
    const size_t n = m->base_layout.total;
    float *h = malloc(n * sizeof *h);
    GtError err = {0};
    cr_assert_eq(model_download_base(m, 0, h, n, &err), 0, "%s", err.msg);
    return h;
}


static double eval_loss(Model *m, const int *tok, const int *tgt, int rows) {
    GtError err = {0};
    double s = 0;
    cr_assert_eq(model_step(m, tok, tgt, rows, 1.0f, false, &s, &err), 0, "%s", err.msg);
    const long n = count_items(tgt, (size_t)rows * m->T);
    cr_assert(n > 0);
    return s / (double)n;
}

/* ---------------------------------------------------------------- 4. PiSSA on a model */


/* thin SVD of W [rows, cols] (fp32): U [rows, k], S [k], Vh [k, cols], k = min(rows, cols) */
static void ref_svd(const float *W, int rows, int cols, double *U, double *S, double *Vh) {
    const int tall = rows >= cols, m = tall ? rows : cols, n = tall ? cols : rows;
    double *a = malloc(sizeof(double) * (size_t)m * n), *u = malloc(sizeof(double) * (size_t)m * n),
           *v = malloc(sizeof(double) * (size_t)n * n);
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) a[tall ? i * cols + c : c * rows + i] = W[i * cols + c];
    test_jacobi_svd(a, m, n, u, S, v);
    for (int j = 0; j < n; j++) {
        if (tall) {
            for (int i = 0; i < rows; i++) U[i * n + j] = u[i * n + j];
            for (int c = 0; c < cols; c++) Vh[j * cols + c] = v[c * n + j];
        } else {
            for (int i = 0; i < rows; i++) U[i * n + j] = v[i * n + j];
            for (int c = 0; c < cols; c++) Vh[j * cols + c] = u[c * n + j];
        }
    }
    free(a), free(u), free(v);
}

enum { PB = 2, PT = 8 };

typedef struct {
    ModelDesc d;
    bool llama;
    Backend *be;
    Model *m;
    float *base_h; /* the original base (base_layout) */
    char dir[256], init_dir[300];
    int tok[PB * PT], tgt[PB * PT];
} Pissa;

/* a LoRA model of the original base base_h, its PiSSA run set (lora_set_run) with the initial
 * adapter's directory in a fresh scratch directory */
static void pissa_open(Pissa *f, bool llama, uint32_t targets, int r, double alpha, bool rslora, double p,
                       uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->llama = llama;
    f->d = lora_fix_desc(llama, 2, r, alpha, targets, rslora, p, LORA_INIT_TRUE);
    f->be = test_backend_open();
    backend_set_act_dtype(f->be, GT_F32);
    GtError err = {0};
    cr_assert_eq(model_create(&f->m, &f->d, f->be, PB, PT, recompute_policy(false, 1, false, 2), 3, &err), 0, "%s",
                 err.msg);
    f->base_h = random_base(&f->m->base_layout, seed);
    put_base(f->m, f->base_h);
    PeftConfig pc;
    peft_config_defaults(&pc);
    pc.r = r, pc.lora_alpha = alpha, pc.use_rslora = rslora, pc.lora_dropout = p;
    snprintf(pc.init, sizeof pc.init, "pissa");
    bool mask[PEFT_MODULE_COUNT];
    for (int k = 0; k < PEFT_MODULE_COUNT; k++) mask[k] = targets >> k & 1u;
    peft_config_set_targets(&pc, mask);
    test_scratch_make(f->dir, sizeof f->dir, "gt_lora_train");
    snprintf(f->init_dir, sizeof f->init_dir, "%s/pissa_init", f->dir);
    lora_set_run(f->m, &pc, f->init_dir);
    lora_fix_tokens(f->tok, f->tgt, PB * PT, f->d.vocab_size, seed + 1, 5);
}

static void pissa_close(Pissa *f) {
    model_free(f->m);
    backend_close(f->be);
    test_scratch_remove(f->dir);
    free(f->base_h);
}

/* the loss of a plain model (no LoRA) holding base_h */
static double base_model_loss(const ModelDesc *d_lora, const float *base_h, const int *tok, const int *tgt) {
    ModelDesc d0 = *d_lora;
    d0.adapter.r = 0, d0.adapter.targets = 0, d0.adapter.dropout = 0;
    Backend *be = test_backend_open();
    backend_set_act_dtype(be, GT_F32);
    Model *m0 = NULL;
    GtError err = {0};
    cr_assert_eq(model_create(&m0, &d0, be, PB, PT, recompute_policy(false, 1, false, d0.n_layer), 3, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(m0->layout.total, (size_t)base_params_from_dims(&d0));
    put_base(m0, base_h);
    const double l = eval_loss(m0, tok, tgt, PB);
    model_free(m0);
    backend_close(be);
    return l;
}

/* the adapter tensor of (layer, module, B?) in the model's layout */
static const ParamTensor *adapter(const Model *m, int layer, int mod, bool lora_B) {
    for (int i = 0; i < m->layout.n_tensors; i++) {
        const ParamTensor *t = &m->layout.tensors[i];
        if (t->layer == layer && (int)lora_tensor_module(&m->desc, i) == mod &&
            (lora_tensor_part(&m->desc, i) == PEFT_PART_B) == lora_B)
            return t;
    }
    cr_assert_fail("no adapter for layer %d module %d", layer, mod);
    return NULL;
}

/* the float offset of (layer, module)'s weight block [rows, in] in the base layout (from the dims) */
static size_t block_offset(const Model *m, int layer, int mod) {
    int64_t row0;
    const TensorRole role = module_site(&m->desc, mod, &row0);
    const int ti = param_layout_role(&m->base_layout, layer, role);
    cr_assert(ti >= 0);
    int in, out;
    lora_fix_module_dims(&m->desc, mod, &in, &out);
    const ParamTensor *t = &m->base_layout.tensors[ti];
    cr_assert(t->shape[1] == in && row0 + out <= t->shape[0], "%s: [%lld, %lld] cannot hold module %d's block", t->name,
              (long long)t->shape[0], (long long)t->shape[1], mod);
    return t->offset + (size_t)row0 * (size_t)in;
}

/* (a) the initialised model is the base model, (b) W_res + s B A = W per adapted block and every
 * other base value untouched, (c) A's rows and B's columns are sqrt(S_j / s) times the reference
 * SVD's singular vectors (one sign per pair), and the initial adapter written is the model's */
static void check_pissa_init(bool llama, bool rslora) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    const int r = 3;
    Pissa f;
    pissa_open(&f, llama, targets, r, 6.0, rslora, 0.0, 700 + rslora);
    Model *m = f.m;
    const double s = lora_fix_scaling(6.0, r, rslora);
    const double l0 = base_model_loss(&f.d, f.base_h, f.tok, f.tgt);
    GtError err = {0};
    cr_assert_eq(lora_pissa_init(m, -1, 31, true, &err), 0, "%s", err.msg);
    /* (a) evaluation and a training step (dropout 0) */
    const double l1 = eval_loss(m, f.tok, f.tgt, PB);
    double ls = 0;
    model_zero_grads(m);
    cr_assert_eq(model_step(m, f.tok, f.tgt, PB, 1.0f, true, &ls, &err), 0, "%s", err.msg);
    const double l2 = ls / (double)count_items(f.tgt, PB * PT);
    cr_assert(fabs(l1 - l0) <= 1e-5 * fabs(l0), "PiSSA model's loss %.9g, the base model's %.9g", l1, l0);
    cr_assert(fabs(l2 - l0) <= 1e-5 * fabs(l0), "PiSSA model's training loss %.9g, the base model's %.9g", l2, l0);

    float *wres = get_base(m), *ad = dev_floats(f.be, m->params, m->layout.total);
    const size_t nb = m->base_layout.total;
    bool *covered = calloc(nb, sizeof *covered);
    double worst_rec = 0, worst_vec = 0;
    for (int l = 0; l < f.d.n_layer; l++)
        for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
            if (!(targets & BIT(mod))) continue;
            int in, rows;
            lora_fix_module_dims(&f.d, mod, &in, &rows);
            const size_t off = block_offset(m, l, mod);
            const float *W = f.base_h + off, *Wr = wres + off;
            const float *A = ad + adapter(m, l, mod, false)->offset, *B = ad + adapter(m, l, mod, true)->offset;
            /* (b) to the rounding of W_res (test_svd.c's bound: W_res = fl32(W - s B A)) */
            double wmax = 0, dmax = 0, sba = 0, wn = 0;
            for (int i = 0; i < rows; i++)
                for (int c = 0; c < in; c++) {
                    double t = 0, ta = 0;
                    for (int j = 0; j < r; j++) {
                        const double pj = s * (double)B[i * r + j] * (double)A[j * in + c];
                        t += pj, ta += fabs(pj);
                    }
                    const double w = W[(size_t)i * in + c], wr = Wr[(size_t)i * in + c], e = fabs(wr + t - w);
                    const double bound = 0x1p-24 * fabs(wr) * (1 + 0x1p-23) + (2.0 * r + 2) * 0x1p-53 * (ta + fabs(w));
                    cr_assert(e <= bound, "layer %d %s [%d, %d]: |W_res + sBA - W| = %.3g > %.3g", l,
                              peft_module_path(mod), i, c, e, bound);
                    wmax = fmax(wmax, fabs(w)), dmax = fmax(dmax, e), sba += t * t, wn += w * w;
                    covered[off + (size_t)i * in + c] = true;
                }
            worst_rec = fmax(worst_rec, dmax / wmax);
            /* the adapter carries the block's principal part: W_res is not W */
            cr_assert(sba > 0.2 * wn, "layer %d %s: ||s B A||^2 = %.3g of ||W||^2 = %.3g", l, peft_module_path(mod), sba,
                      wn);
            /* (c) against the Jacobi SVD of the original block */
            const int k = rows < in ? rows : in;
            double *U = malloc(sizeof(double) * rows * k), *S = malloc(sizeof(double) * k),
                   *Vh = malloc(sizeof(double) * k * in);
            ref_svd(W, rows, in, U, S, Vh);
            for (int j = 0; j < r; j++) {
                double gap = INFINITY;
                if (j > 0) gap = fmin(gap, S[j - 1] - S[j]);
                if (j + 1 < k) gap = fmin(gap, S[j] - S[j + 1]);
                gap /= S[0];
                /* an fp32 output (6e-8 per entry) and a singular vector's sensitivity 1 / gap (Wedin) to
                 * the double computations' ~1e-15 S_0 */
                const double fj = sqrt(S[j] / s), tol = (1e-6 + 1e-12 / gap) * fj;
                double da = 0, db = 0, ea = 0, eb = 0;
                for (int c = 0; c < in; c++) da += A[j * in + c] * Vh[j * in + c];
                for (int i = 0; i < rows; i++) db += B[i * r + j] * U[i * k + j];
                cr_assert((da > 0) == (db > 0), "layer %d %s pair %d: A and B carry different signs", l,
                          peft_module_path(mod), j);
                const double sg = da < 0 ? -1 : 1;
                for (int c = 0; c < in; c++) ea = fmax(ea, fabs(A[j * in + c] - sg * fj * Vh[j * in + c]));
                for (int i = 0; i < rows; i++) eb = fmax(eb, fabs(B[i * r + j] - sg * fj * U[i * k + j]));
                cr_assert(ea <= tol && eb <= tol, "layer %d %s pair %d (S %.6g, gap %.3g): |dA| %.3g |dB| %.3g > %.3g", l,
                          peft_module_path(mod), j, S[j], gap, ea, eb, tol);
                worst_vec = fmax(worst_vec, fmax(ea, eb) / fj);
            }
            free(U), free(S), free(Vh);
        }
    for (size_t k = 0; k < nb; k++)
        if (!covered[k])
            cr_assert(memcmp(&wres[k], &f.base_h[k], sizeof(float)) == 0, "base value %zu (not adapted) changed: %g -> %g",
                      k, f.base_h[k], wres[k]);
    /* the initial adapter written: the model's adapters bit for bit, rank r */
    bool mask[PEFT_MODULE_COUNT];
    for (int k = 0; k < PEFT_MODULE_COUNT; k++) mask[k] = targets >> k & 1u;
    PeftEntry *ent = NULL;
    const int ne = peft_entries_for(&f.d, mask, &ent);
    cr_assert_eq(2 * ne, m->layout.n_tensors);
    PeftAdapter *pa = NULL;
    PeftConfig ic;
    cr_assert_eq(peft_adapter_open(&pa, f.init_dir, f.d.arch, ent, ne, &ic, &err), 0, "%s", err.msg);
    cr_assert(ic.r == r && ic.use_rslora == rslora && fabs(ic.lora_alpha - 6.0) < 1e-12, "initial adapter: r %d alpha %g",
              ic.r, ic.lora_alpha);
    for (int e = 0; e < ne; e++)
        for (int b = 0; b <= 1; b++) {
            const ParamTensor *t = adapter(m, ent[e].layer, ent[e].module, b);
            float *x = malloc(t->numel * sizeof *x);
            cr_assert_eq(peft_adapter_read(pa, e, b, x, t->numel, &err), 0, "%s", err.msg);
            cr_assert(memcmp(x, ad + t->offset, t->numel * sizeof *x) == 0, "%s: the initial adapter's differs", t->name);
            free(x);
        }
    peft_adapter_close(pa);
    free(ent);
    cr_log_info("%s%s: PiSSA loss %.9g, base %.9g; max |W_res + sBA - W| %.3g of max |W|; A, B within %.3g of the "
                "reference singular vectors", llama ? "llama" : "gpt2", rslora ? " rslora" : "", l1, l0, worst_rec,
                worst_vec);
    free(covered), free(wres), free(ad);
    pissa_close(&f);
}

Test(lora_train, llama_pissa_init_is_the_base_model_and_the_top_singular_pairs) {
    check_pissa_init(true, false);
    check_pissa_init(true, true);
}
Test(lora_train, gpt2_pissa_init_is_the_base_model_and_the_top_singular_pairs) { check_pissa_init(false, false); }


/* (d) every adapted block W = Q1 diag(s) Q2^T with s_i = 2 * 0.5^i: the singular values PiSSA
 * captures, S_j = scale ||B[:, j]|| ||A[j, :]|| (A = diag(sqrt(S / s)) Vh, B = U diag(sqrt(S / s))),
 * against the exact ones. Randomised subspace iteration with p iterations and no oversampling
 * (test_svd.c's theory: Halko et al. 2009, Gu 2015): 0 <= 1 - S_j / s_j <~ C (s_r / s_j)^(2(2p+1)).
 * Stated tolerance for pissa_niter_4: 1e-5 (fp32 rounding of A, B and W) + 1000 (s_r / s_j)^18,
 * i.e. 1e-5 for the top two (1.5e-8 at most for j = 1), 3.8e-3 for the third (ratio 1/2); and
 * never above the true value beyond 1e-5. The exact SVD ("pissa") gets all three within 1e-5. */
Test(lora_train, pissa_niter_4_captures_a_decaying_spectrum) {
    const int r = 3;
    for (int exact = 0; exact <= 1; exact++) {
        Pissa f;
        pissa_open(&f, true, LLAMA_ALL, r, 6.0, false, 0.0, 900);
        Model *m = f.m;
        const double sc = lora_fix_scaling(6.0, r, false);
        int nblock = 0;
        for (int l = 0; l < f.d.n_layer; l++)
            for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
                if (!(LLAMA_ALL & BIT(mod))) continue;
                int in, rows;
                lora_fix_module_dims(&f.d, mod, &in, &rows);
                const int k = rows < in ? rows : in;
                double *q1 = test_random_orthonormal(rows, k, 1000 + nblock), *q2 = test_random_orthonormal(in, k, 2000 + nblock);
                float *W = f.base_h + block_offset(m, l, mod);
                for (int i = 0; i < rows; i++)
                    for (int c = 0; c < in; c++) {
                        double a = 0;
                        for (int j = 0; j < k; j++) a += q1[i * k + j] * 2.0 * pow(0.5, j) * q2[c * k + j];
                        W[(size_t)i * in + c] = (float)a;
                    }
                free(q1), free(q2);
                nblock++;
            }
        put_base(m, f.base_h);
        GtError err = {0};
        cr_assert_eq(lora_pissa_init(m, exact ? -1 : 4, 77, false, &err), 0, "%s", err.msg);
        float *ad = dev_floats(f.be, m->params, m->layout.total);
        double worst[3] = {0};
        for (int l = 0; l < f.d.n_layer; l++)
            for (int mod = 0; mod < PEFT_MODULE_COUNT; mod++) {
                if (!(LLAMA_ALL & BIT(mod))) continue;
                int in, rows;
                lora_fix_module_dims(&f.d, mod, &in, &rows);
                const float *A = ad + adapter(m, l, mod, false)->offset, *B = ad + adapter(m, l, mod, true)->offset;
                for (int j = 0; j < r; j++) {
                    double na = 0, nbj = 0;
                    for (int c = 0; c < in; c++) na += (double)A[j * in + c] * A[j * in + c];
                    for (int i = 0; i < rows; i++) nbj += (double)B[i * r + j] * B[i * r + j];
                    const double S = sc * sqrt(na) * sqrt(nbj), sv = 2.0 * pow(0.5, j), e = 1 - S / sv;
                    const double tol = 1e-5 + (exact ? 0 : 1000 * pow(0.5, 18.0 * (r - j)));
                    cr_assert(e >= -1e-5 && e <= tol, "%s layer %d %s: S_%d = %.9g, exact %.9g (relative error %.3g, "
                              "tolerance %.3g)", exact ? "pissa" : "pissa_niter_4", l, peft_module_path(mod), j, S, sv,
                              e, tol);
                    worst[j] = fmax(worst[j], fabs(e));
                }
            }
        cr_log_info("%s: %d blocks, worst relative error of S_0, S_1, S_2: %.3g %.3g %.3g", exact ? "pissa" : "pissa_niter_4",
                    nblock, worst[0], worst[1], worst[2]);
        free(ad);
        pissa_close(&f);
    }
}

/* ---------------------------------------------------------------- 5. the rank-2r conversion */

/* A PiSSA run trains a few AdamW steps (dropout 0.1, two micro-batches, clipping at 1) and saves
 * (lora_save_adapter: PEFT's conversion to a plain LoRA of rank 2r relative to the ORIGINAL base).
 * A plain LoRA model of rank 2r with the same scale (lora_alpha 2 alpha, or sqrt(2) alpha under
 * rslora: alpha / r and alpha / sqrt(r) kept), holding the original base, loads the directory: its
 * loss is the trained PiSSA model's, to 1e-5, while both are well away from the base model's. Its
 * adapters are [A ; A0] and [B | -B0] bit for bit (A, B the trained adapters, A0, B0 the initial
 * adapter written by lora_pissa_init). And a PiSSA model resuming from the same directory over
 * the original base rebuilds W_res bit for bit and the trained loss exactly. */
static void check_conversion(bool llama, bool rslora) {
    const uint32_t targets = llama ? LLAMA_ALL : GPT_ALL;
    const int r = 3;
    const double alpha = 6.0;
    Pissa f;
    pissa_open(&f, llama, targets, r, alpha, rslora, 0.1, 800 + 2 * llama + rslora);
    Model *m = f.m;
    const char *what = llama ? (rslora ? "llama rslora" : "llama") : (rslora ? "gpt2 rslora" : "gpt2");
    GtError err = {0};
    cr_assert_eq(lora_pissa_init(m, -1, 5, true, &err), 0, "%s", err.msg);
    const double l_base = base_model_loss(&f.d, f.base_h, f.tok, f.tgt);
    RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.95, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    int tok[2 * PB * PT], tgt[2 * PB * PT];
    m->ad.dropout_seed = 17;
    for (int step = 1; step <= 4; step++) {
        lora_fix_tokens(tok, tgt, 2 * PB * PT, f.d.vocab_size, 40 + step, 7);
        const long items = count_items(tgt, 2 * PB * PT);
        double s = 0;
        m->ad.dropout_step = step;
        cr_assert_eq(trainer_accumulate(m, tok, tgt, PB, 2, 1, LOSS_NORM_TOKENS, items, &s, &err), 0, "%s", err.msg);
        clip_grads(m, grad_global_norm(m), 1.0);
        adamw_step(m, 1e-2, &cfg, step);
        model_zero_grads(m);
    }
    const double l_trained = eval_loss(m, f.tok, f.tgt, PB);
    cr_assert(fabs(l_trained - l_base) > 1e-3 * fabs(l_base), "%s: training moved the loss only from %.9g to %.9g", what,
              l_base, l_trained);
    char conv[320];
    snprintf(conv, sizeof conv, "%s/converted", f.dir);
    cr_assert_eq(mkdir(conv, 0755), 0);
    cr_assert_eq(lora_save_adapter(conv, m, false, &err), 0, "%s", err.msg);

    /* the saved config: a plain LoRA of rank 2r with PEFT's converted alpha */
    PeftConfig cc;
    cr_assert_eq(peft_config_read(conv, &cc, &err), 0, "%s", err.msg);
    const double alpha2 = rslora ? sqrt(2.0) * alpha : 2 * alpha;
    cr_assert(cc.r == 2 * r && fabs(cc.lora_alpha - alpha2) <= 1e-12 * alpha2 && cc.use_rslora == rslora &&
              strcmp(cc.init, "true") == 0, "%s: converted config r %d lora_alpha %.17g use_rslora %d init %s", what,
              cc.r, cc.lora_alpha, cc.use_rslora, cc.init);
    cr_assert(fabs(lora_fix_scaling(alpha2, 2 * r, rslora) - lora_fix_scaling(alpha, r, rslora)) <= 1e-15 * lora_fix_scaling(alpha, r, rslora));

    /* the plain rank-2r model on the original base */
    const ModelDesc d2 = lora_fix_desc(llama, 2, 2 * r, alpha2, targets, rslora, 0.0, LORA_INIT_TRUE);
    Model *m2 = NULL;
    cr_assert_eq(model_create(&m2, &d2, f.be, PB, PT, recompute_policy(false, 1, false, 2), 9, &err), 0, "%s", err.msg);
    put_base(m2, f.base_h);
    cr_assert_eq(lora_load_adapter(m2, conv, &err), 0, "%s: %s", what, err.msg);
    const double l_conv = eval_loss(m2, f.tok, f.tgt, PB);
    cr_assert(fabs(l_conv - l_trained) <= 1e-5 * fabs(l_trained),
              "%s: the converted adapter over the original base gives %.9g, the trained PiSSA model %.9g (base %.9g)",
              what, l_conv, l_trained, l_base);

    /* its adapters: [A ; A0] and [B | -B0] */
    float *ad = dev_floats(f.be, m->params, m->layout.total), *ad2 = dev_floats(f.be, m2->params, m2->layout.total);
    bool mask[PEFT_MODULE_COUNT];
    for (int k = 0; k < PEFT_MODULE_COUNT; k++) mask[k] = targets >> k & 1u;
    PeftEntry *ent = NULL;
    const int ne = peft_entries_for(&f.d, mask, &ent);
    PeftAdapter *pa = NULL;
    PeftConfig ic;
    cr_assert_eq(peft_adapter_open(&pa, f.init_dir, f.d.arch, ent, ne, &ic, &err), 0, "%s", err.msg);
    for (int e = 0; e < ne; e++) {
        const int in = (int)ent[e].in, out = (int)ent[e].out;
        float *a0 = malloc(sizeof(float) * r * in), *b0 = malloc(sizeof(float) * out * r);
        cr_assert_eq(peft_adapter_read(pa, e, false, a0, (size_t)r * in, &err), 0, "%s", err.msg);
        cr_assert_eq(peft_adapter_read(pa, e, true, b0, (size_t)out * r, &err), 0, "%s", err.msg);
        const float *A = ad + adapter(m, ent[e].layer, ent[e].module, false)->offset;
        const float *B = ad + adapter(m, ent[e].layer, ent[e].module, true)->offset;
        const float *A2 = ad2 + adapter(m2, ent[e].layer, ent[e].module, false)->offset;
        const float *B2 = ad2 + adapter(m2, ent[e].layer, ent[e].module, true)->offset;
        cr_assert(memcmp(A2, A, sizeof(float) * r * in) == 0 && memcmp(A2 + r * in, a0, sizeof(float) * r * in) == 0,
                  "%s entry %d: lora_A is not [A ; A0]", what, e);
        size_t moved = 0;
        for (int i = 0; i < out; i++)
            for (int j = 0; j < r; j++) {
                cr_assert(B2[i * 2 * r + j] == B[i * r + j] && B2[i * 2 * r + r + j] == -b0[i * r + j],
                          "%s entry %d: lora_B[%d] is not [B | -B0]", what, e, i);
                moved += B[i * r + j] != b0[i * r + j];
            }
        cr_assert(moved > 0, "%s entry %d: B did not train", what, e);
        free(a0), free(b0);
    }
    peft_adapter_close(pa);
    free(ent);

    /* resuming the PiSSA run from the directory: the residual base bit for bit, the same loss */
    Model *m3 = NULL;
    cr_assert_eq(model_create(&m3, &f.d, f.be, PB, PT, recompute_policy(false, 1, false, 2), 9, &err), 0, "%s", err.msg);
    put_base(m3, f.base_h);
    lora_set_run(m3, m->ad.peft, f.init_dir);
    cr_assert_eq(lora_load_adapter(m3, conv, &err), 0, "%s: %s", what, err.msg);
    float *w1 = get_base(m), *w3 = get_base(m3), *ad3 = dev_floats(f.be, m3->params, m3->layout.total);
    cr_assert(memcmp(w1, w3, m->base_layout.total * sizeof(float)) == 0, "%s: the resumed residual base differs", what);
    cr_assert(memcmp(ad, ad3, m->layout.total * sizeof(float)) == 0, "%s: the resumed adapters differ", what);
    const double l_resumed = eval_loss(m3, f.tok, f.tgt, PB);
    cr_assert_eq(l_resumed, l_trained, "%s: resumed loss %.9g, trained %.9g", what, l_resumed, l_trained);
    cr_log_info("%s: base %.9g, trained PiSSA %.9g, converted rank-%d LoRA on the original base %.9g (relative %.3g)",
                what, l_base, l_trained, 2 * r, l_conv, fabs(l_conv - l_trained) / l_trained);
    free(w1), free(w3), free(ad), free(ad2), free(ad3);
    model_free(m2), model_free(m3);
    pissa_close(&f);
}

Test(lora_train, llama_pissa_converted_to_rank_2r_keeps_the_trained_loss) {
    check_conversion(true, false);
    check_conversion(true, true);
}
Test(lora_train, gpt2_pissa_converted_to_rank_2r_keeps_the_trained_loss) {
    check_conversion(false, false);
    check_conversion(false, true);
}

/* ---------------------------------------------------------------- 6. lora_init_tensor */

typedef struct {
    double mean, sd, m4, within1; /* within1: the fraction with |x - mean| < sd */
} Moments;

static Moments moments(const float *x, size_t n) {
    Moments mo = {0};
    for (size_t i = 0; i < n; i++) mo.mean += x[i];
    mo.mean /= (double)n;
    double m2 = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = x[i] - mo.mean;
        m2 += d * d, mo.m4 += d * d * d * d;
    }
    m2 /= (double)n, mo.m4 /= (double)n;
    mo.sd = sqrt(m2);
    for (size_t i = 0; i < n; i++) mo.within1 += fabs(x[i] - mo.mean) < mo.sd;
    mo.within1 /= (double)n;
    return mo;
}

/* the tensor [rows, cols] of a layout: lora_A [r, in] or lora_B [out, r] (which one: its index, lora.h's
 * lora_tensor_part: even A, odd B) */
static ParamTensor init_tensor(int64_t rows, int64_t cols) {
    ParamTensor t;
    memset(&t, 0, sizeof t);
    t.ndim = 2, t.shape[0] = rows, t.shape[1] = cols, t.numel = (size_t)(rows * cols);
    t.role = ROLE_QKV_W;
    return t;
}

/* values of tensor i from seed, whole; and checked against chunked calls (deterministic in the
 * element: a chunk of the staging buffer gets the same values as the whole tensor) */
static float *init_values(const ParamTensor *t, const ModelDesc *d, uint64_t seed, int i) {
    float *x = malloc(t->numel * sizeof *x), *y = malloc(t->numel * sizeof *y);
    lora_init_tensor(t, d, seed, i, 0, t->numel, x);
    for (size_t k0 = 0; k0 < t->numel; k0 += 1000) {
        const size_t n = t->numel - k0 < 1000 ? t->numel - k0 : 1000;
        lora_init_tensor(t, d, seed, i, k0, n, y + k0);
    }
    cr_assert(memcmp(x, y, t->numel * sizeof *x) == 0, "chunked initialisation differs from the whole tensor's");
    free(y);
    return x;
}

/* gaussian: A ~ normal(0, 1/r) (nn.init.normal_(std = 1 / r), PEFT's "gaussian"), B zero. Over
 * n = 32768 values, each bound 5 standard errors of the statistic: the mean within 5 sigma / sqrt(n),
 * the sample sd within 5 sigma / sqrt(2n) of sigma, the fraction within one sd 0.6827 within
 * 5 sqrt(0.2166 / n), the kurtosis 3 within 5 sqrt(24 / n). r = 4 and 16: std 1/r, not 1/sqrt(r). */
Test(lora_train, init_gaussian_is_normal_with_std_1_over_r_and_b_zero) {
    for (int r = 4; r <= 16; r *= 4) {
        ModelDesc d = lora_fix_base(true, 2);
        d.adapter.r = r, d.adapter.init = LORA_INIT_GAUSSIAN;
        const int in = 32768 / r;
        const ParamTensor ta = init_tensor(r, in), tb = init_tensor(in, r);
        float *a = init_values(&ta, &d, 12345, 2), *b = init_values(&tb, &d, 12345, 3);
        const size_t n = ta.numel;
        const double sigma = 1.0 / r;
        const Moments mo = moments(a, n);
        const double kurt = mo.m4 / (mo.sd * mo.sd * mo.sd * mo.sd);
        cr_assert(fabs(mo.mean) <= 5 * sigma / sqrt((double)n), "r %d: mean %.4g (sigma %.4g)", r, mo.mean, sigma);
        cr_assert(fabs(mo.sd - sigma) <= 5 * sigma / sqrt(2.0 * n), "r %d: sd %.6g, want %.6g", r, mo.sd, sigma);
        cr_assert(fabs(mo.within1 - 0.682689) <= 5 * sqrt(0.2166 / n), "r %d: %.4f within one sd", r, mo.within1);
        cr_assert(fabs(kurt - 3) <= 5 * sqrt(24.0 / n), "r %d: kurtosis %.4f", r, kurt);
        for (size_t k = 0; k < tb.numel; k++) cr_assert_eq(b[k], 0.0f, "r %d: lora_B[%zu] = %g", r, k, b[k]);
        /* another tensor index or seed: other values (correlation ~ 1/sqrt(n)) */
        float *a2 = init_values(&ta, &d, 12345, 4), *a3 = init_values(&ta, &d, 12346, 2);
        double c2 = 0, c3 = 0;
        for (size_t k = 0; k < n; k++) c2 += (double)a[k] * a2[k], c3 += (double)a[k] * a3[k];
        c2 /= n * sigma * sigma, c3 /= n * sigma * sigma;
        cr_assert(fabs(c2) < 5 / sqrt((double)n) && fabs(c3) < 5 / sqrt((double)n),
                  "r %d: correlation %.4f with another tensor, %.4f with another seed", r, c2, c3);
        cr_log_info("gaussian r %d: mean %.3g, sd %.6g (1/r %.6g), within 1 sd %.4f, kurtosis %.3f", r, mo.mean, mo.sd,
                    sigma, mo.within1, kurt);
        free(a), free(b), free(a2), free(a3);
    }
}

/* uniform(-b, b) with b = 1 / sqrt(fan_in) (kaiming_uniform_(a = sqrt(5))): every |x| <= b, the
 * largest within 1e-3 b of it (n = 32768: the chance of none in the top 1e-3 is e^-16), mean
 * within 5 b / sqrt(3n), mean square b^2 / 3 within 5 b^2 sqrt(4 / (45 n)) */
static void expect_uniform(const float *x, size_t n, double bound, const char *what) {
    double big = 0, mean = 0, ms = 0;
    for (size_t k = 0; k < n; k++) {
        cr_assert(fabs(x[k]) <= bound * (1 + 1e-6), "%s[%zu] = %g outside (-%g, %g)", what, k, x[k], bound, bound);
        big = fmax(big, fabs(x[k])), mean += x[k], ms += (double)x[k] * x[k];
    }
    mean /= (double)n, ms /= (double)n;
    cr_assert(big >= bound * (1 - 1e-3), "%s: largest %g of bound %g", what, big, bound);
    cr_assert(fabs(mean) <= 5 * bound / sqrt(3.0 * n), "%s: mean %g", what, mean);
    cr_assert(fabs(ms - bound * bound / 3) <= 5 * bound * bound * sqrt(4.0 / (45.0 * n)), "%s: mean square %g, want %g",
              what, ms, bound * bound / 3);
    cr_log_info("%s: bound %.6g, largest %.6g, mean %.3g, mean square / (b^2/3) %.5f", what, bound, big, mean,
                ms / (bound * bound / 3));
}

/* false: both A and B Kaiming-uniform (A's fan_in in, B's fan_in r: nn.Linear(r, out)'s default),
 * so the adapter is not a no-op; true: A the same, B zero */
Test(lora_train, init_false_is_uniform_for_both_and_true_zeroes_b) {
    const int r = 4, in = 8192, out = 8192;
    ModelDesc d = lora_fix_base(true, 2);
    d.adapter.r = r;
    const ParamTensor ta = init_tensor(r, in), tb = init_tensor(out, r);
    d.adapter.init = LORA_INIT_FALSE;
    float *a = init_values(&ta, &d, 99, 0), *b = init_values(&tb, &d, 99, 1);
    expect_uniform(a, ta.numel, 1 / sqrt((double)in), "false lora_A");
    expect_uniform(b, tb.numel, 1 / sqrt((double)r), "false lora_B");
    d.adapter.init = LORA_INIT_TRUE;
    float *a1 = init_values(&ta, &d, 99, 0), *b1 = init_values(&tb, &d, 99, 1);
    expect_uniform(a1, ta.numel, 1 / sqrt((double)in), "true lora_A");
    for (size_t k = 0; k < tb.numel; k++) cr_assert_eq(b1[k], 0.0f, "true: lora_B[%zu] = %g", k, b1[k]);
    free(a), free(b), free(a1), free(b1);
}
