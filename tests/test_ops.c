/* test_ops.c - every backend op, forward and backward, against the naive double-precision
 * reference (ref_ops.c); the reference's backward against central finite differences of its own
 * forward; accumulate-vs-overwrite semantics; determinism.
 *
 * The backend under test comes from test_backend_open(): GTRAIN_TEST_DEVICE=cuda runs the same
 * tests against the CUDA backend. Inputs go to the device with ops->to_device and results come
 * back with ops->to_host; host pointers are never assumed to be device pointers.
 *
 * Error metric: rel = max_i |a_i - b_i| / max(max_i |b_i|, 1e-6), a = backend (fp32), b = double
 * reference on the same (fp32-representable) inputs. Bound 1e-5: each output here is a sum of at
 * most a few hundred fp32 terms, whose rounding error grows like sqrt(K) * 2^-24 (~1e-6 at
 * K = 256) relative to the output scale, with transcendental functions (expf, tanhf, logf) adding
 * a few ulp. So correct code lands around 1e-7..1e-6, while a real bug (a dropped term, a wrong
 * index, a missing scale) shows up at 1e-3 or more. Outputs are poisoned with NaN before each call
 * and the metric is infinite on any NaN, so an element the op forgot to write fails the test.
 *
 * bf16 (the ops_bf16 suite): the same checks with the backend's act dtype bf16. The act-typed
 * inputs are drawn as bf16 values, so the reference sees exactly what the op sees; an act output
 * is rounded once to bf16 (2^-9 relative), so act outputs must be within TOL_BF16 = 1e-2, while
 * fp32 outputs (parameter gradients, layernorm statistics, lse, losses), computed in fp32 from
 * exact inputs, keep the fp32 bound.
 *
 * The fused forward ops (residual_layernorm_forward, matmul_gelu_forward) are checked against the
 * reference and, bit for bit, against the pair of ops each replaces on the same backend; the one
 * exception is bf16 matmul_gelu on CUDA, whose GELU epilogue computes gelu from the unrounded
 * pre-activation (backend.h), checked against the pair with the bf16 bound instead. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas_setup.h"
#include "ops_fixture.h"
#include "ref_ops.h"
#include "test_backend_select.h"

/* ------------------------------------------------------------------ encoder */

static void check_encoder(GtDtype act, int B, int T, int C, int V, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t BT = (size_t)B * T;
    int *tok = rand_i(&fx, &r, BT, V);
    tok[0] = tok[BT - 1] = V - 1; /* at least one repeated token */
    float *wte = rand_a(&fx, &r, (size_t)V * C, -1, 1), *wpe = rand_a(&fx, &r, (size_t)T * C, -1, 1);
    float *dout = rand_a(&fx, &r, BT * C, -1, 1);
    float *dwte0 = rand_f(&fx, &r, (size_t)V * C, -1, 1), *dwpe0 = rand_f(&fx, &r, (size_t)T * C, -1, 1);

    int *d_tok = dup_i(&fx, tok, BT);
    void *d_out = dnan_a(&fx, BT * C);
    fx.be->ops->encoder_forward(fx.be, d_out, d_tok, dup_a(&fx, wte, (size_t)V * C),
                                dup_a(&fx, wpe, (size_t)T * C), B, T, C, NULL);
    float *d_dwte = dup_f(&fx, dwte0, (size_t)V * C), *d_dwpe = dup_f(&fx, dwpe0, (size_t)T * C);
    fx.be->ops->encoder_backward(fx.be, d_dwte, d_dwpe, dup_a(&fx, dout, BT * C), d_tok, B, T, C, NULL);

    double *ro = hd(&fx, BT * C);
    double *rdwte = to_d(&fx, dwte0, (size_t)V * C), *rdwpe = to_d(&fx, dwpe0, (size_t)T * C);
    ref_encoder_forward(ro, tok, to_d(&fx, wte, (size_t)V * C), to_d(&fx, wpe, (size_t)T * C), B, T, C);
    ref_encoder_backward(rdwte, rdwpe, to_d(&fx, dout, BT * C), tok, B, T, C);

    CHECK_A("encoder out", get_a(&fx, d_out, BT * C), ro, BT * C, "B=%d T=%d C=%d", B, T, C);
    CHECK("encoder dwte (accumulated)", get_f(&fx, d_dwte, (size_t)V * C), rdwte, (size_t)V * C, "C=%d", C);
    CHECK("encoder dwpe (accumulated)", get_f(&fx, d_dwpe, (size_t)T * C), rdwpe, (size_t)T * C, "C=%d", C);
    fx_close(&fx);
}

static void encoder_cases(GtDtype act) {
    check_encoder(act, 2, 7, 20, 11, 1);
    check_encoder(act, 4, 64, 128, 50, 2); /* big enough for the threaded paths */
}
Test(ops, encoder) { encoder_cases(GT_F32); }
Test(ops_bf16, encoder) { encoder_cases(GT_BF16); }

/* ------------------------------------------------------------------ layernorm */

static void check_layernorm(GtDtype act, int N, int C, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t NC = (size_t)N * C;
    float eps = 1e-5f;
    float *inp = rand_a(&fx, &r, NC, -2, 3), *w = rand_a(&fx, &r, C, 0.5f, 1.5f);
    float *bias = rand_a(&fx, &r, C, -0.5f, 0.5f), *dout = rand_a(&fx, &r, NC, -1, 1);
    float *dinp0 = rand_a(&fx, &r, NC, -1, 1), *dw0 = rand_f(&fx, &r, C, -1, 1);
    float *db0 = rand_f(&fx, &r, C, -1, 1);

    void *d_inp = dup_a(&fx, inp, NC), *d_w = dup_a(&fx, w, C);
    void *d_out = dnan_a(&fx, NC);
    float *d_mean = dnan(&fx, N), *d_rstd = dnan(&fx, N);
    fx.be->ops->layernorm_forward(fx.be, d_out, d_mean, d_rstd, d_inp, d_w, dup_a(&fx, bias, C), N, C, eps);
    void *d_dinp = dup_a(&fx, dinp0, NC);
    float *d_dw = dup_f(&fx, dw0, C), *d_db = dup_f(&fx, db0, C);
    fx.be->ops->layernorm_backward(fx.be, d_dinp, d_dw, d_db, dup_a(&fx, dout, NC), d_inp, d_w,
                                   d_mean, d_rstd, N, C);

    double *ro = hd(&fx, NC), *rm = hd(&fx, N), *rs = hd(&fx, N);
    double *rinp = to_d(&fx, inp, NC), *rw = to_d(&fx, w, C);
    ref_layernorm_forward(ro, rm, rs, rinp, rw, to_d(&fx, bias, C), N, C, eps);
    double *rdinp = to_d(&fx, dinp0, NC), *rdw = to_d(&fx, dw0, C), *rdb = to_d(&fx, db0, C);
    ref_layernorm_backward(rdinp, rdw, rdb, to_d(&fx, dout, NC), rinp, rw, N, C, eps);

    CHECK_A("layernorm out", get_a(&fx, d_out, NC), ro, NC, "N=%d C=%d", N, C);
    CHECK("layernorm mean", get_f(&fx, d_mean, N), rm, N, "N=%d C=%d", N, C);
    CHECK("layernorm rstd", get_f(&fx, d_rstd, N), rs, N, "N=%d C=%d", N, C);
    CHECK_A("layernorm dinp (accumulated)", get_a(&fx, d_dinp, NC), rdinp, NC, "N=%d C=%d", N, C);
    CHECK("layernorm dw (accumulated)", get_f(&fx, d_dw, C), rdw, C, "N=%d C=%d", N, C);
    CHECK("layernorm dbias (accumulated)", get_f(&fx, d_db, C), rdb, C, "N=%d C=%d", N, C);

    /* the same backward with zero-filled grads checks the gradient alone, not diluted by the
     * pre-filled values */
    float *z = hf(&fx, NC);
    up(&fx, d_dinp, z, backend_act_bytes(fx.be, NC)); /* zero bits are 0 in both dtypes */
    up(&fx, d_dw, z, C * sizeof(float));
    up(&fx, d_db, z, C * sizeof(float));
    fx.be->ops->layernorm_backward(fx.be, d_dinp, d_dw, d_db, dup_a(&fx, dout, NC), d_inp, d_w,
                                   d_mean, d_rstd, N, C);
    memset(rdinp, 0, NC * sizeof(double));
    memset(rdw, 0, C * sizeof(double));
    memset(rdb, 0, C * sizeof(double));
    ref_layernorm_backward(rdinp, rdw, rdb, to_d(&fx, dout, NC), rinp, rw, N, C, eps);
    CHECK_A("layernorm dinp (from zero)", get_a(&fx, d_dinp, NC), rdinp, NC, "N=%d C=%d", N, C);
    CHECK("layernorm dw (from zero)", get_f(&fx, d_dw, C), rdw, C, "N=%d C=%d", N, C);
    CHECK("layernorm dbias (from zero)", get_f(&fx, d_db, C), rdb, C, "N=%d C=%d", N, C);
    fx_close(&fx);
}

static void layernorm_cases(GtDtype act) {
    check_layernorm(act, 14, 20, 3);
    check_layernorm(act, 5, 37, 4);
    check_layernorm(act, 256, 128, 5);
    check_layernorm(act, 3, wide_c(act) - 1, 6); /* CUDA: 8 packs a thread, dw/dbias in the two-pass reduction */
    check_layernorm(act, 2100, 40, 7); /* CUDA: dw/dbias in one pass, each block's row groups 2 rows each */
}
Test(ops, layernorm) { layernorm_cases(GT_F32); }
Test(ops_bf16, layernorm) { layernorm_cases(GT_BF16); }

/* ------------------------------------------------------------------ matmul */

/* rows of `cols` values at stride ld (padding: NaN, so an op that reads it fails), and back */
static float *pad_rows(Fx *fx, const float *x, int rows, int cols, int ld) {
    float *p = hf(fx, (size_t)rows * ld);
    for (size_t i = 0; i < (size_t)rows * ld; i++) p[i] = NAN;
    for (int n = 0; n < rows; n++) memcpy(p + (size_t)n * ld, x + (size_t)n * cols, (size_t)cols * sizeof(float));
    return p;
}
static float *unpad_rows(Fx *fx, const float *p, int rows, int cols, int ld) {
    float *x = hf(fx, (size_t)rows * cols);
    for (int n = 0; n < rows; n++) memcpy(x + (size_t)n * cols, p + (size_t)n * ld, (size_t)cols * sizeof(float));
    return x;
}

/* ldo > OC: out and dout rows at stride ldo (dout's padding NaN; no bias gradient then) */
static void check_matmul_ld(GtDtype act, int N, int C, int OC, int ldo, bool with_bias, bool all_grads, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C, NL = (size_t)N * ldo;
    float *inp = rand_a(&fx, &r, NC, -1, 1), *w = rand_a(&fx, &r, OCC, -1, 1);
    float *bias = rand_a(&fx, &r, OC, -1, 1), *dout = rand_a(&fx, &r, NO, -1, 1);
    float *dw0 = rand_f(&fx, &r, OCC, -1, 1), *db0 = rand_f(&fx, &r, OC, -1, 1);
    const bool dbias = all_grads && ldo == OC;

    void *d_inp = dup_a(&fx, inp, NC), *d_w = dup_a(&fx, w, OCC), *d_out = dnan_a(&fx, NL);
    fx.be->ops->matmul_forward(fx.be, d_out, d_inp, d_w, with_bias ? dup_a(&fx, bias, OC) : NULL, N, C, OC, ldo);
    void *d_dinp = all_grads ? dnan_a(&fx, NC) : NULL;
    float *d_dw = dup_f(&fx, dw0, OCC);
    float *d_db = dbias ? dup_f(&fx, db0, OC) : NULL;
    fx.be->ops->matmul_backward(fx.be, d_dinp, d_dw, d_db, dup_a(&fx, pad_rows(&fx, dout, N, OC, ldo), NL), d_inp, d_w,
                                N, C, OC, ldo);

    double *rinp = to_d(&fx, inp, NC), *rw = to_d(&fx, w, OCC), *rdout = to_d(&fx, dout, NO);
    double *ro = hd(&fx, NO), *rdinp = hd(&fx, NC);
    double *rdw = to_d(&fx, dw0, OCC), *rdb = to_d(&fx, db0, OC);
    ref_matmul_forward(ro, rinp, rw, with_bias ? to_d(&fx, bias, OC) : NULL, N, C, OC);
    ref_matmul_backward(rdinp, rdw, rdb, rdout, rinp, rw, N, C, OC);

    CHECK_A("matmul out", unpad_rows(&fx, get_a(&fx, d_out, NL), N, OC, ldo), ro, NO, "N=%d C=%d OC=%d ldo=%d bias=%d",
            N, C, OC, ldo, with_bias);
    if (all_grads)
        CHECK_A("matmul dinp", get_a(&fx, d_dinp, NC), rdinp, NC, "N=%d C=%d OC=%d ldo=%d", N, C, OC, ldo);
    if (dbias) CHECK("matmul dbias (accumulated)", get_f(&fx, d_db, OC), rdb, OC, "N=%d C=%d OC=%d", N, C, OC);
    CHECK("matmul dw (accumulated)", get_f(&fx, d_dw, OCC), rdw, OCC, "N=%d C=%d OC=%d ldo=%d", N, C, OC, ldo);
    fx_close(&fx);
}

static void check_matmul(GtDtype act, int N, int C, int OC, bool with_bias, bool all_grads, uint64_t seed) {
    check_matmul_ld(act, N, C, OC, OC, with_bias, all_grads, seed);
}

static void matmul_cases(GtDtype act) {
    check_matmul(act, 14, 20, 60, true, true, 6);
    check_matmul(act, 33, 64, 17, false, true, 7);
    check_matmul(act, 7, 5, 3, true, false, 8); /* dinp and dbias NULL: skipped */
    check_matmul(act, 256, 128, 384, true, true, 9);
    /* the LM head's shape: an odd OC at a padded stride (dout's padding NaN) */
    check_matmul_ld(act, 19, 32, 257, 320, false, true, 10);
    check_matmul_ld(act, 9, 16, 5, 8, true, true, 11);
}
Test(ops, matmul) { matmul_cases(GT_F32); }
Test(ops_bf16, matmul) { matmul_cases(GT_BF16); }

/* ------------------------------------------------------------------ attention */

/* the plain multi-head case of the shared check (ops_fixture.c) */
static void check_attention(GtDtype act, int B, int T, int C, int NH, bool ramp, uint64_t seed) {
    check_attention_gqa(act, (AttCase){B, T, NH, NH, C / NH, 0}, ramp, seed);
}

static void attention_cases(GtDtype act) {
    check_attention(act, 2, 7, 20, 2, false, 10);
    check_attention(act, 1, 5, 12, 4, false, 11);
    check_attention(act, 2, 70, 32, 4, false, 12); /* T crosses a 64-key tile */
    check_attention(act, 1, 150, 16, 2, true, 15); /* three tiles, max moving to later ones */
    check_attention(act, 3, 16, 64, 4, false, 13);
    check_attention(act, 1, 1, 8, 2, false, 14);   /* a single position */
    /* head sizes 64 and 128: the CUDA backend's tensor-core path under bf16 (64-row tiles) */
    check_attention(act, 2, 150, 128, 2, false, 16); /* hs 64, three tiles, the last ragged */
    check_attention(act, 1, 64, 256, 2, false, 17);  /* hs 128, exactly one tile */
    check_attention(act, 1, 100, 256, 2, false, 20); /* hs 128, two tiles, the last ragged */
    check_attention(act, 1, 1, 64, 1, false, 18);    /* hs 64, a single position */
    check_attention(act, 1, 200, 128, 2, true, 19);  /* hs 64, ramp: peaked rows, moving max */
    check_attention(act, 1, 129, 128, 1, true, 21);  /* hs 128, ramp, one row in the third tile */
}
Test(ops, attention) { attention_cases(GT_F32); }
Test(ops_bf16, attention) { attention_cases(GT_BF16); }

/* ------------------------------------------------------------------ gelu, add, scale */

static void check_gelu(GtDtype act, size_t n, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    float *x = rand_a(&fx, &r, n, -5, 5), *dout = rand_a(&fx, &r, n, -1, 1);
    void *d_x = dup_a(&fx, x, n), *d_out = dnan_a(&fx, n), *d_dinp = dnan_a(&fx, n);
    fx.be->ops->gelu_forward(fx.be, d_out, d_x, n);
    fx.be->ops->gelu_backward(fx.be, d_dinp, d_x, dup_a(&fx, dout, n), n);
    void *d_inplace = dup_a(&fx, dout, n); /* dinp == dout */
    fx.be->ops->gelu_backward(fx.be, d_inplace, d_x, d_inplace, n);

    double *rx = to_d(&fx, x, n), *ro = hd(&fx, n), *rd = hd(&fx, n);
    ref_gelu_forward(ro, rx, n);
    ref_gelu_backward(rd, rx, to_d(&fx, dout, n), n);
    CHECK_A("gelu out", get_a(&fx, d_out, n), ro, n, "n=%zu", n);
    CHECK_A("gelu dinp", get_a(&fx, d_dinp, n), rd, n, "n=%zu", n);
    CHECK_A("gelu dinp in place", get_a(&fx, d_inplace, n), rd, n, "n=%zu", n);
    fx_close(&fx);
}

static void gelu_cases(GtDtype act) {
    check_gelu(act, 13, 20);
    check_gelu(act, 100003, 21);
}
Test(ops, gelu) { gelu_cases(GT_F32); }
Test(ops_bf16, gelu) { gelu_cases(GT_BF16); }

Test(ops, add_and_scale) {
    size_t sizes[] = {7, 70001};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        Fx fx;
        fx_open(&fx);
        Rng r = {30 + (uint64_t)k};
        float *x = rand_f(&fx, &r, n, -1, 1), *y = rand_f(&fx, &r, n, -1, 1);
        double *rx = to_d(&fx, x, n), *ro = hd(&fx, n);
        ref_add(ro, rx, to_d(&fx, y, n), n);
        float *d_x = dup_f(&fx, x, n), *d_y = dup_f(&fx, y, n), *d_o = dnan(&fx, n);
        fx.be->ops->add(fx.be, d_o, d_x, d_y, n);
        CHECK("add", get_f(&fx, d_o, n), ro, n, "n=%zu", n);
        fx.be->ops->add(fx.be, d_x, d_x, d_y, n); /* out aliases x */
        CHECK("add in place", get_f(&fx, d_x, n), ro, n, "n=%zu", n);
        fx.be->ops->scale(fx.be, d_y, -0.375f, n);
        for (size_t i = 0; i < n; i++) ro[i] = -0.375 * (double)y[i];
        CHECK("scale", get_f(&fx, d_y, n), ro, n, "n=%zu", n);
        fx_close(&fx);
    }
}

/* add (out aliasing x too) and to_act, in the act dtype */
static void check_add_to_act(GtDtype act, size_t n, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    float *x = rand_a(&fx, &r, n, -1, 1), *y = rand_a(&fx, &r, n, -1, 1);
    double *ro = hd(&fx, n);
    ref_add(ro, to_d(&fx, x, n), to_d(&fx, y, n), n);
    void *d_x = dup_a(&fx, x, n), *d_y = dup_a(&fx, y, n), *d_o = dnan_a(&fx, n);
    fx.be->ops->add(fx.be, d_o, d_x, d_y, n);
    CHECK_A("add", get_a(&fx, d_o, n), ro, n, "n=%zu", n);
    fx.be->ops->add(fx.be, d_x, d_x, d_y, n);
    CHECK_A("add in place", get_a(&fx, d_x, n), ro, n, "n=%zu", n);
    /* to_act: any fp32 values, rounded once */
    float *f = rand_f(&fx, &r, n, -3, 3);
    void *d_a = dnan_a(&fx, n);
    fx.be->ops->to_act(fx.be, d_a, dup_f(&fx, f, n), n);
    CHECK_A("to_act", get_a(&fx, d_a, n), to_d(&fx, f, n), n, "n=%zu", n);
    fx_close(&fx);
}

Test(ops, add_to_act) {
    check_add_to_act(GT_F32, 7, 32);
    check_add_to_act(GT_F32, 70001, 33);
}
Test(ops_bf16, add_to_act) {
    check_add_to_act(GT_BF16, 7, 32);
    check_add_to_act(GT_BF16, 70001, 33);
}

/* ------------------------------------------------------------------ fused forward ops */

/* alias: 0 res is its own buffer, 1 res aliases x, 2 res aliases y */
static void check_residual_layernorm(GtDtype act, int N, int C, int alias, uint64_t seed) {
    static const char *alias_name[3] = {"none", "res = x", "res = y"};
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t NC = (size_t)N * C, ab = backend_act_bytes(fx.be, NC);
    float eps = 1e-5f;
    float *x = rand_a(&fx, &r, NC, -2, 2), *y = rand_a(&fx, &r, NC, -1, 3);
    float *w = rand_a(&fx, &r, C, 0.5f, 1.5f), *bias = rand_a(&fx, &r, C, -0.5f, 0.5f);
    void *d_w = dup_a(&fx, w, C), *d_b = dup_a(&fx, bias, C);

    void *d_x = dup_a(&fx, x, NC), *d_y = dup_a(&fx, y, NC);
    void *d_res = alias == 1 ? d_x : alias == 2 ? d_y : dnan_a(&fx, NC);
    void *d_out = dnan_a(&fx, NC);
    float *d_mean = dnan(&fx, N), *d_rstd = dnan(&fx, N);
    fx.be->ops->residual_layernorm_forward(fx.be, d_res, d_out, d_mean, d_rstd, d_x, d_y, d_w, d_b, N, C, eps);
    float *res = get_a(&fx, d_res, NC);

    /* res against the exact sum; out/mean/rstd against the layernorm of the res the op rounded
     * (bf16: as specified, the layernorm reads the rounded res) or of the exact sum (fp32) */
    double *rres = hd(&fx, NC), *ro = hd(&fx, NC), *rm = hd(&fx, N), *rs = hd(&fx, N);
    ref_add(rres, to_d(&fx, x, NC), to_d(&fx, y, NC), NC);
    const double *ln_in = act == GT_BF16 ? to_d(&fx, res, NC) : rres;
    ref_layernorm_forward(ro, rm, rs, ln_in, to_d(&fx, w, C), to_d(&fx, bias, C), N, C, eps);
    CHECK_A("residual_layernorm res", res, rres, NC, "N=%d C=%d alias=%s", N, C, alias_name[alias]);
    CHECK_A("residual_layernorm out", get_a(&fx, d_out, NC), ro, NC, "N=%d C=%d alias=%s", N, C, alias_name[alias]);
    CHECK("residual_layernorm mean", get_f(&fx, d_mean, N), rm, N, "N=%d C=%d alias=%s", N, C, alias_name[alias]);
    CHECK("residual_layernorm rstd", get_f(&fx, d_rstd, N), rs, N, "N=%d C=%d alias=%s", N, C, alias_name[alias]);

    /* the unfused pair on the same backend, aliased the same way: the same bits */
    void *u_x = dup_a(&fx, x, NC), *u_y = dup_a(&fx, y, NC);
    void *u_res = alias == 1 ? u_x : alias == 2 ? u_y : dnan_a(&fx, NC);
    void *u_out = dnan_a(&fx, NC);
    float *u_mean = dnan(&fx, N), *u_rstd = dnan(&fx, N);
    fx.be->ops->add(fx.be, u_res, u_x, u_y, NC);
    fx.be->ops->layernorm_forward(fx.be, u_out, u_mean, u_rstd, u_res, d_w, d_b, N, C, eps);
    const void *fused[4] = {d_res, d_out, d_mean, d_rstd}, *pair[4] = {u_res, u_out, u_mean, u_rstd};
    const size_t bytes[4] = {ab, ab, N * sizeof(float), N * sizeof(float)};
    const char *what[4] = {"res", "out", "mean", "rstd"};
    for (int i = 0; i < 4; i++)
        cr_expect(memcmp(get_raw(&fx, fused[i], bytes[i]), get_raw(&fx, pair[i], bytes[i]), bytes[i]) == 0,
                  "residual_layernorm %s differs from add + layernorm_forward (%s, N=%d C=%d alias=%s)", what[i],
                  gt_dtype_name(act), N, C, alias_name[alias]);
    fx_close(&fx);
}

static void residual_layernorm_cases(GtDtype act) {
    check_residual_layernorm(act, 14, 20, 0, 40);
    check_residual_layernorm(act, 14, 20, 1, 41);
    check_residual_layernorm(act, 5, 37, 2, 42);
    check_residual_layernorm(act, 256, 128, 0, 43); /* threaded */
    check_residual_layernorm(act, 256, 128, 1, 44);
}
Test(ops, residual_layernorm) { residual_layernorm_cases(GT_F32); }
Test(ops_bf16, residual_layernorm) { residual_layernorm_cases(GT_BF16); }

static void check_matmul_gelu(GtDtype act, int N, int C, int OC, bool with_bias, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C, ab = backend_act_bytes(fx.be, NO);
    /* weights scaled so the pre-activations spread over GELU's curved region (|pre| up to ~4) */
    float *inp = rand_a(&fx, &r, NC, -1, 1), *w = rand_a(&fx, &r, OCC, -0.6f, 0.6f);
    float *bias = rand_a(&fx, &r, OC, -1, 1);
    void *d_inp = dup_a(&fx, inp, NC), *d_w = dup_a(&fx, w, OCC);
    void *d_b = with_bias ? dup_a(&fx, bias, OC) : NULL;
    void *d_out = dnan_a(&fx, NO), *d_pre = dnan_a(&fx, NO);
    backend_matmul_gelu_forward(fx.be, d_out, d_pre, d_inp, d_w, d_b, N, C, OC); /* optional entry: the wrapper */
    float *pre = get_a(&fx, d_pre, NO), *out = get_a(&fx, d_out, NO);

    double *rpre = hd(&fx, NO), *rout = hd(&fx, NO);
    ref_matmul_forward(rpre, to_d(&fx, inp, NC), to_d(&fx, w, OCC), with_bias ? to_d(&fx, bias, OC) : NULL, N, C, OC);
    /* bf16: gelu of the rounded pre the op stored, as specified; fp32: of the exact product */
    ref_gelu_forward(rout, act == GT_BF16 ? to_d(&fx, pre, NO) : rpre, NO);
    CHECK_A("matmul_gelu pre", pre, rpre, NO, "N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);
    CHECK_A("matmul_gelu out", out, rout, NO, "N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);

    /* the unfused pair on the same backend: the same bits when the backend composes the entry (the
     * CPU), but in bf16 a fused entry (CUDA's) may compute gelu in its epilogue from the unrounded fp32
     * pre-activation (backend.h): there the bound */
    void *u_pre = dnan_a(&fx, NO), *u_out = dnan_a(&fx, NO);
    fx.be->ops->matmul_forward(fx.be, u_pre, d_inp, d_w, d_b, N, C, OC, OC);
    fx.be->ops->gelu_forward(fx.be, u_out, u_pre, NO);
    if (act == GT_BF16 && fx.be->ops->matmul_gelu_forward) {
        CHECK_A("matmul_gelu pre vs matmul_forward", pre, to_d(&fx, get_a(&fx, u_pre, NO), NO), NO,
                "N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);
        CHECK_A("matmul_gelu out vs gelu_forward", out, to_d(&fx, get_a(&fx, u_out, NO), NO), NO,
                "N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);
    } else {
        cr_expect(memcmp(get_raw(&fx, d_pre, ab), get_raw(&fx, u_pre, ab), ab) == 0,
                  "matmul_gelu pre differs from matmul_forward (%s, N=%d C=%d OC=%d bias=%d)", gt_dtype_name(act),
                  N, C, OC, with_bias);
        cr_expect(memcmp(get_raw(&fx, d_out, ab), get_raw(&fx, u_out, ab), ab) == 0,
                  "matmul_gelu out differs from matmul_forward + gelu_forward (%s, N=%d C=%d OC=%d bias=%d)",
                  gt_dtype_name(act), N, C, OC, with_bias);
    }
    fx_close(&fx);
}

static void matmul_gelu_cases(GtDtype act) {
    check_matmul_gelu(act, 14, 20, 60, true, 50);
    check_matmul_gelu(act, 33, 64, 17, false, 51);
    check_matmul_gelu(act, 7, 5, 3, true, 52);
    check_matmul_gelu(act, 33, 64, 24, false, 53);  /* 16-byte leading dims, no bias (CUDA: GELU_AUX) */
    check_matmul_gelu(act, 256, 128, 384, true, 54); /* threaded; CUDA bf16: the GELU_AUX_BIAS epilogue */
}
Test(ops, matmul_gelu) { matmul_gelu_cases(GT_F32); }
Test(ops_bf16, matmul_gelu) { matmul_gelu_cases(GT_BF16); }

/* ------------------------------------------------------------------ cross-entropy */

/* ld > V: rows at stride ld, the padding NaN (read, it would poison the losses) */
static void check_crossentropy(GtDtype act, int N, int V, int ld, float offset, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t NV = (size_t)N * V, NL = (size_t)N * ld;
    float *logits = rand_a(&fx, &r, NV, offset - 4, offset + 4);
    int *tgt = rand_i(&fx, &r, N, V);
    for (int n = 0; n < N; n += 3) tgt[n] = -100; /* ignored rows */
    float scale = 1.0f / 37.0f;

    double *rl = to_d(&fx, logits, NV), *rloss = hd(&fx, N), *rdl = hd(&fx, NV);
    ref_crossentropy(rloss, rdl, rl, tgt, N, V, scale);

    int *d_tgt = dup_i(&fx, tgt, N);
    /* without the gradient: losses only, logits left as they were */
    void *d_logits = dup_a(&fx, pad_rows(&fx, logits, N, V, ld), NL);
    float *d_loss = dnan(&fx, N);
    fx.be->ops->crossentropy(fx.be, d_loss, d_logits, d_tgt, N, V, ld, scale, 0);
    CHECK("crossentropy losses (no grad)", get_f(&fx, d_loss, N), rloss, N, "N=%d V=%d ld=%d", N, V, ld);
    cr_expect(memcmp(unpad_rows(&fx, get_a(&fx, d_logits, NL), N, V, ld), logits, NV * sizeof(float)) == 0,
              "crossentropy without compute_grad changed the logits");
    /* with the gradient, in place */
    up(&fx, d_loss, get_f(&fx, dnan(&fx, N), N), N * sizeof(float));
    fx.be->ops->crossentropy(fx.be, d_loss, d_logits, d_tgt, N, V, ld, scale, 1);
    CHECK("crossentropy losses", get_f(&fx, d_loss, N), rloss, N, "N=%d V=%d ld=%d", N, V, ld);
    float *dl = unpad_rows(&fx, get_a(&fx, d_logits, NL), N, V, ld);
    CHECK_A("crossentropy dlogits", dl, rdl, NV, "N=%d V=%d", N, V);
    for (int n = 0; n < N; n += 3)
        for (int i = 0; i < V; i++)
            cr_expect(dl[(size_t)n * V + i] == 0.0f, "crossentropy: ignored row %d not zero", n);
    fx_close(&fx);
}

static void crossentropy_cases(GtDtype act) {
    check_crossentropy(act, 10, 11, 11, 0.0f, 40);
    /* large logits: must be max-subtracted (bf16 spaces values near 500 by 2, still a spread) */
    check_crossentropy(act, 9, 257, 257, 500.0f, 41);
    check_crossentropy(act, 64, 1000, 1000, 0.0f, 42);
    check_crossentropy(act, 7, 257, 320, 0.0f, 43); /* the padded stride of the LM head */
}
Test(ops, crossentropy) { crossentropy_cases(GT_F32); }
Test(ops_bf16, crossentropy) { crossentropy_cases(GT_BF16); }

/* ------------------------------------------------------------------ adamw, sum_squares */

Test(ops, adamw) {
    size_t sizes[] = {17, 50001};
    int steps[] = {1, 7};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        int t = steps[k];
        Fx fx;
        fx_open(&fx);
        Rng r = {50 + (uint64_t)k};
        float *p = rand_f(&fx, &r, n, -1, 1), *g = rand_f(&fx, &r, n, -1, 1);
        float *m = rand_f(&fx, &r, n, -0.1f, 0.1f), *v = rand_f(&fx, &r, n, 0, 0.01f);
        if (t == 1) { /* the first step starts from zero moments */
            memset(m, 0, n * sizeof(float));
            memset(v, 0, n * sizeof(float));
        }
        float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
        float *d_p = dup_f(&fx, p, n), *d_m = dup_f(&fx, m, n), *d_v = dup_f(&fx, v, n);
        const AdamwRun run = {0, n, wd};
        fx.be->ops->adamw(fx.be, d_p, dup_f(&fx, g, n), d_m, d_v, NULL, &run, 1, lr, b1, b2, eps, t);
        double *rp = to_d(&fx, p, n), *rm = to_d(&fx, m, n), *rv = to_d(&fx, v, n);
        ref_adamw(rp, to_d(&fx, g, n), rm, rv, n, lr, b1, b2, eps, wd, t);
        CHECK("adamw param", get_f(&fx, d_p, n), rp, n, "n=%zu t=%d", n, t);
        CHECK("adamw m", get_f(&fx, d_m, n), rm, n, "n=%zu t=%d", n, t);
        CHECK("adamw v", get_f(&fx, d_v, n), rv, n, "n=%zu t=%d", n, t);
        /* the update itself, not diluted by |p| */
        float *np = get_f(&fx, d_p, n);
        double *rdu = hd(&fx, n);
        float *fdu = hf(&fx, n);
        for (size_t i = 0; i < n; i++) {
            fdu[i] = (float)((double)np[i] - (double)p[i]);
            rdu[i] = rp[i] - (double)p[i];
        }
        cr_expect_leq(rel_err(fdu, rdu, n), 1e-3, "adamw update: rel err %.3g", rel_err(fdu, rdu, n));
        fx_close(&fx);
    }
}

Test(ops, sum_squares) {
    size_t sizes[] = {1, 9, 1000003};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        Fx fx;
        fx_open(&fx);
        Rng r = {60 + (uint64_t)k};
        float *x = rand_f(&fx, &r, n, -2, 2);
        float *d = dup_f(&fx, x, n);
        double got = fx.be->ops->sum_squares(fx.be, d, n);
        double want = ref_sum_squares(to_d(&fx, x, n), n);
        /* accumulated in double on both sides: only the summation order differs */
        cr_expect_leq(fabs(got - want), 1e-12 * want, "sum_squares n=%zu: %.17g vs %.17g", n, got, want);
        if (n > 1) { /* from the second element: not 16-byte aligned (the CUDA kernel's scalar path) */
            got = fx.be->ops->sum_squares(fx.be, d + 1, n - 1);
            want = ref_sum_squares(to_d(&fx, x + 1, n - 1), n - 1);
            cr_expect_leq(fabs(got - want), 1e-12 * want, "sum_squares unaligned n=%zu: %.17g vs %.17g", n - 1, got,
                          want);
        }
        fx_close(&fx);
    }
}

/* ------------------------------------------------------------------ memory ops */

Test(ops, memory_copies) {
    Fx fx;
    fx_open(&fx);
    Rng r = {70};
    size_t n = 1000;
    float *x = rand_f(&fx, &r, n, -1, 1);
    float *d_a = dup_f(&fx, x, n), *d_b = dnan(&fx, n);
    cr_assert(memcmp(get_f(&fx, d_a, n), x, n * sizeof(float)) == 0, "to_device/to_host round trip");
    fx.be->ops->dev_copy(fx.be, d_b, d_a, n * sizeof(float));
    fx.be->ops->synchronize(fx.be);
    cr_expect(memcmp(get_f(&fx, d_b, n), x, n * sizeof(float)) == 0, "dev_copy");
    fx.be->ops->zero(fx.be, d_b, n * sizeof(float));
    float *z = get_f(&fx, d_b, n);
    for (size_t i = 0; i < n; i++) cr_expect(z[i] == 0.0f, "zero: element %zu is %g", i, z[i]);

    float *h = fx.be->ops->host_alloc(fx.be, n * sizeof(float));
    cr_assert_not_null(h, "host_alloc");
    for (int slot = 0; slot < 2; slot++) {
        memset(h, 0, n * sizeof(float));
        fx.be->ops->offload_to_host(fx.be, h, d_a, n * sizeof(float), slot);
        fx.be->ops->offload_wait(fx.be, slot);
        fx.be->ops->synchronize(fx.be);
        cr_expect(memcmp(h, x, n * sizeof(float)) == 0, "offload_to_host slot %d", slot);
        fx.be->ops->zero(fx.be, d_b, n * sizeof(float));
        fx.be->ops->offload_to_device(fx.be, d_b, h, n * sizeof(float), slot);
        fx.be->ops->offload_wait(fx.be, slot);
        cr_expect(memcmp(get_f(&fx, d_b, n), x, n * sizeof(float)) == 0, "offload_to_device slot %d", slot);
    }
    fx.be->ops->host_free(fx.be, h);

    cr_expect(strlen(fx.be->device_name) > 0, "device_name is empty");
    cr_expect_gt(fx.be->device_total_bytes, 0, "device_total_bytes unknown");
    cr_expect_leq(fx.be->device_free_bytes, fx.be->device_total_bytes);
    fx_close(&fx);
}

/* The tracking allocator: categories add up, peaks stay. */
Test(ops, tracking_allocator) {
    Fx fx;
    fx_open(&fx);
    Backend *b = fx.be;
    GtError err = {0};
    void *p = backend_alloc(b, MEM_PARAMS, 4096, &err);
    void *q = backend_alloc(b, MEM_HOST_OFFLOAD, 1000, &err);
    cr_assert(p && q, "backend_alloc: %s", err.msg);
    cr_expect_eq(b->mem.current[MEM_PARAMS], 4096);
    cr_expect_eq(b->mem.current[MEM_HOST_OFFLOAD], 1000);
    cr_expect_eq(b->mem.device_current, 4096, "host offload must not count as device memory");
    backend_free(b, MEM_PARAMS, p, 4096);
    backend_free(b, MEM_HOST_OFFLOAD, q, 1000);
    cr_expect_eq(b->mem.current[MEM_PARAMS], 0);
    cr_expect_eq(b->mem.peak[MEM_PARAMS], 4096);
    cr_expect_eq(b->mem.device_peak, 4096);
    fx_close(&fx);
}

/* ------------------------------------------------------------------ determinism */

/* Every op run twice on the same inputs (accumulating ones from the same pre-filled state) must
 * give the same bits: this is what makes recompute bit-identical. Sizes are above the threaded
 * thresholds. */
Test(ops, deterministic) {
    Fx fx;
    fx_open(&fx);
    Rng r = {80};
    int B = 4, T = 64, C = 128, NH = 4, V = 300, OC = 384;
    size_t BT = (size_t)B * T, NC = BT * C, n3 = BT * 3 * C, nl = (size_t)B * NH * T;
    float *qkv = rand_f(&fx, &r, n3, -2, 2), *dout = rand_f(&fx, &r, NC, -1, 1);
    float *x = rand_f(&fx, &r, NC, -1, 1), *w = rand_f(&fx, &r, (size_t)OC * C, -1, 1);
    float *lw = rand_f(&fx, &r, C, 0.5f, 1.5f), *lb = rand_f(&fx, &r, C, -1, 1);
    float *dmm = rand_f(&fx, &r, BT * OC, -1, 1), *logits = rand_f(&fx, &r, BT * V, -3, 3);
    int *tok = rand_i(&fx, &r, BT, V);
    float *d_qkv = dup_f(&fx, qkv, n3), *d_dout = dup_f(&fx, dout, NC), *d_x = dup_f(&fx, x, NC);
    float *d_w = dup_f(&fx, w, (size_t)OC * C), *d_lw = dup_f(&fx, lw, C), *d_lb = dup_f(&fx, lb, C);
    float *d_dmm = dup_f(&fx, dmm, BT * OC);
    int *d_tok = dup_i(&fx, tok, BT);

    float *res[2][13];
    double ss[2];
    for (int rep = 0; rep < 2; rep++) {
        float *d_out = dnan(&fx, NC), *d_lse = dnan(&fx, nl), *d_dqkv = dnan(&fx, n3);
        float *d_ws = dnan(&fx, backend_attention_workspace_floats(fx.be->act_dtype, B, T, NH, NH, C / NH));
        fx.be->ops->attention_forward(fx.be, d_out, d_lse, d_qkv, B, T, NH, NH, C / NH, 0, NULL);
        fx.be->ops->attention_backward(fx.be, d_dqkv, d_ws, d_dout, d_qkv, d_out, d_lse, B, T, NH, NH, C / NH, 0, NULL);
        float *d_ln = dnan(&fx, NC), *d_m = dnan(&fx, BT), *d_s = dnan(&fx, BT);
        fx.be->ops->layernorm_forward(fx.be, d_ln, d_m, d_s, d_x, d_lw, d_lb, (int)BT, C, 1e-5f);
        float *d_dx = dup_f(&fx, x, NC), *d_dlw = dup_f(&fx, lw, C), *d_dlb = dup_f(&fx, lb, C);
        fx.be->ops->layernorm_backward(fx.be, d_dx, d_dlw, d_dlb, d_dout, d_x, d_lw, d_m, d_s, (int)BT, C);
        float *d_dinp = dnan(&fx, NC), *d_dw = dup_f(&fx, w, (size_t)OC * C), *d_db = dup_f(&fx, dmm, OC);
        fx.be->ops->matmul_backward(fx.be, d_dinp, d_dw, d_db, d_dmm, d_x, d_w, (int)BT, C, OC, OC);
        float *d_dwte = dup_f(&fx, w, (size_t)V * C), *d_dwpe = dup_f(&fx, x, (size_t)T * C);
        fx.be->ops->encoder_backward(fx.be, d_dwte, d_dwpe, d_dout, d_tok, B, T, C, NULL);
        float *d_lg = dup_f(&fx, logits, BT * V), *d_loss = dnan(&fx, BT);
        fx.be->ops->crossentropy(fx.be, d_loss, d_lg, d_tok, (int)BT, V, V, 0.01f, 1);
        float *outs[] = {d_out, d_lse, d_dqkv, d_ln, d_dx, d_dlw, d_dlb, d_dinp, d_dw, d_db, d_dwte, d_dwpe, d_lg};
        size_t ns[] = {NC, nl, n3, NC, NC, C, C, NC, (size_t)OC * C, OC, (size_t)V * C, (size_t)T * C, BT * V};
        for (int i = 0; i < 13; i++) res[rep][i] = get_f(&fx, outs[i], ns[i]);
        ss[rep] = fx.be->ops->sum_squares(fx.be, d_dqkv, n3);
        /* free this repetition's device buffers early: FX_MAX is small */
        for (int i = 0; i < fx.ndev; i++) {
            bool keep = false;
            void *keepers[] = {d_qkv, d_dout, d_x, d_w, d_lw, d_lb, d_dmm, d_tok};
            for (size_t k = 0; k < sizeof keepers / sizeof keepers[0]; k++) keep |= fx.dev[i] == keepers[k];
            if (!keep) {
                fx.be->ops->dev_free(fx.be, fx.dev[i]);
                fx.dev[i] = fx.dev[--fx.ndev];
                i--;
            }
        }
    }
    const char *names[] = {"attention out", "attention lse", "attention dqkv", "layernorm out",
                           "layernorm dinp", "layernorm dw", "layernorm dbias", "matmul dinp",
                           "matmul dw", "matmul dbias", "encoder dwte", "encoder dwpe", "crossentropy dlogits"};
    size_t ns[] = {NC, nl, n3, NC, NC, C, C, NC, (size_t)OC * C, OC, (size_t)V * C, (size_t)T * C, BT * V};
    for (int i = 0; i < 13; i++)
        cr_expect(memcmp(res[0][i], res[1][i], ns[i] * sizeof(float)) == 0, "%s differs between two runs", names[i]);
    cr_expect(memcmp(&ss[0], &ss[1], sizeof(double)) == 0, "sum_squares differs between two runs");
    fx_close(&fx);
}

/* ------------------------------------------------------------------ the reference vs finite differences */

typedef struct {
    double *inp, *w, *bias, *dout, *out;
    int N, C, OC;
} LnCtx;

static double ln_loss(void *p) {
    LnCtx *c = p;
    ref_layernorm_forward(c->out, NULL, NULL, c->inp, c->w, c->bias, c->N, c->C, 1e-5);
    return dotd(c->out, c->dout, (size_t)c->N * c->C);
}

Test(reference, layernorm_fd) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {90};
    int N = 3, C = 7;
    size_t NC = (size_t)N * C;
    LnCtx c = {rand_d(&fx, &r, NC, -2, 2), rand_d(&fx, &r, C, 0.5, 1.5), rand_d(&fx, &r, C, -1, 1),
               rand_d(&fx, &r, NC, -1, 1), hd(&fx, NC), N, C, 0};
    double *dinp = hd(&fx, NC), *dw = hd(&fx, C), *db = hd(&fx, C);
    ref_layernorm_backward(dinp, dw, db, c.dout, c.inp, c.w, N, C, 1e-5);
    FD_EXPECT("layernorm dinp", fd_check(c.inp, NC, dinp, ln_loss, &c));
    FD_EXPECT("layernorm dw", fd_check(c.w, C, dw, ln_loss, &c));
    FD_EXPECT("layernorm dbias", fd_check(c.bias, C, db, ln_loss, &c));
    for (int i = 0; i < fx.nhost; i++) free(fx.host[i]);
}

static double mm_loss(void *p) {
    LnCtx *c = p;
    ref_matmul_forward(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dotd(c->out, c->dout, (size_t)c->N * c->OC);
}

Test(reference, matmul_fd) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {91};
    int N = 4, C = 5, OC = 3;
    LnCtx c = {rand_d(&fx, &r, N * C, -1, 1), rand_d(&fx, &r, OC * C, -1, 1), rand_d(&fx, &r, OC, -1, 1),
               rand_d(&fx, &r, N * OC, -1, 1), hd(&fx, N * OC), N, C, OC};
    double *dinp = hd(&fx, N * C), *dw = hd(&fx, OC * C), *db = hd(&fx, OC);
    ref_matmul_backward(dinp, dw, db, c.dout, c.inp, c.w, N, C, OC);
    FD_EXPECT("matmul dinp", fd_check(c.inp, N * C, dinp, mm_loss, &c));
    FD_EXPECT("matmul dw", fd_check(c.w, OC * C, dw, mm_loss, &c));
    FD_EXPECT("matmul dbias", fd_check(c.bias, OC, db, mm_loss, &c));
    for (int i = 0; i < fx.nhost; i++) free(fx.host[i]);
}

typedef struct {
    double *qkv, *dout, *out;
    int B, T, C, NH;
} AttCtx;

static double att_loss(void *p) {
    AttCtx *c = p;
    ref_attention_forward(c->out, NULL, c->qkv, c->B, c->T, c->C, c->NH);
    return dotd(c->out, c->dout, (size_t)c->B * c->T * c->C);
}

Test(reference, attention_fd) {
    int shapes[][4] = {{1, 5, 8, 2}, {2, 4, 12, 3}};
    for (int s = 0; s < 2; s++) {
        Fx fx;
        memset(&fx, 0, sizeof fx);
        Rng r = {92 + (uint64_t)s};
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
        size_t n3 = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
        AttCtx c = {rand_d(&fx, &r, n3, -2, 2), rand_d(&fx, &r, no, -1, 1), hd(&fx, no), B, T, C, NH};
        double *dqkv = hd(&fx, n3);
        ref_attention_backward(dqkv, c.dout, c.qkv, NULL, B, T, C, NH);
        FD_EXPECT("attention dqkv", fd_check(c.qkv, n3, dqkv, att_loss, &c));
        /* lse really is the log-sum-exp of the scaled scores of row 0: only t2 = 0, so lse = s00 */
        double *lse = hd(&fx, (size_t)B * NH * T);
        ref_attention_forward(c.out, lse, c.qkv, B, T, C, NH);
        int hs = C / NH;
        double s00 = dotd(c.qkv, c.qkv + C, hs) / sqrt((double)hs);
        cr_expect(fabs(lse[0] - s00) < 1e-12, "reference lse of row 0: %g vs %g", lse[0], s00);
        for (int i = 0; i < fx.nhost; i++) free(fx.host[i]);
    }
}

typedef struct {
    double *x, *dout, *out;
    size_t n;
} GeluCtx;

static double gelu_loss(void *p) {
    GeluCtx *c = p;
    ref_gelu_forward(c->out, c->x, c->n);
    return dotd(c->out, c->dout, c->n);
}

Test(reference, gelu_fd) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {94};
    size_t n = 41;
    GeluCtx c = {rand_d(&fx, &r, n, -5, 5), rand_d(&fx, &r, n, -1, 1), hd(&fx, n), n};
    double *d = hd(&fx, n);
    ref_gelu_backward(d, c.x, c.dout, n);
    FD_EXPECT("gelu dinp", fd_check(c.x, n, d, gelu_loss, &c));
    /* and the forward is HF's gelu_new at a hand-computed point: gelu(1) = 0.8411919906 */
    double one = 1.0, g;
    ref_gelu_forward(&g, &one, 1);
    cr_expect(fabs(g - 0.8411919906082768) < 1e-12, "gelu(1) = %.12g", g);
    for (int i = 0; i < fx.nhost; i++) free(fx.host[i]);
}

typedef struct {
    double *logits, *losses;
    const int *tgt;
    int N, V;
    double scale;
} CeCtx;

static double ce_loss(void *p) {
    CeCtx *c = p;
    ref_crossentropy(c->losses, NULL, c->logits, c->tgt, c->N, c->V, c->scale);
    double s = 0.0;
    for (int n = 0; n < c->N; n++) s += c->losses[n];
    return c->scale * s;
}

Test(reference, crossentropy_fd) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {95};
    int N = 5, V = 7;
    int tgt[5] = {3, -100, 0, 6, -100};
    CeCtx c = {rand_d(&fx, &r, (size_t)N * V, -3, 3), hd(&fx, N), tgt, N, V, 0.25};
    double *dl = hd(&fx, (size_t)N * V);
    ref_crossentropy(c.losses, dl, c.logits, tgt, N, V, c.scale);
    FD_EXPECT("crossentropy dlogits", fd_check(c.logits, (size_t)N * V, dl, ce_loss, &c));
    /* hand-computed: uniform logits give loss log(V) */
    double flat[7] = {0}, l1;
    int t1 = 2;
    ref_crossentropy(&l1, NULL, flat, &t1, 1, 7, 1.0);
    cr_expect(fabs(l1 - log(7.0)) < 1e-12, "uniform logits: loss %g, want log 7", l1);
    for (int i = 0; i < fx.nhost; i++) free(fx.host[i]);
}

typedef struct {
    double *wte, *wpe, *dout, *out;
    const int *tok;
    int B, T, C;
} EncCtx;

static double enc_loss(void *p) {
    EncCtx *c = p;
    ref_encoder_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dotd(c->out, c->dout, (size_t)c->B * c->T * c->C);
}

Test(reference, encoder_fd) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {96};
    int B = 2, T = 3, C = 4, V = 5;
    int tok[6] = {1, 4, 1, 0, 1, 2};
    EncCtx c = {rand_d(&fx, &r, V * C, -1, 1), rand_d(&fx, &r, T * C, -1, 1),
                rand_d(&fx, &r, B * T * C, -1, 1), hd(&fx, B * T * C), tok, B, T, C};
    double *dwte = hd(&fx, V * C), *dwpe = hd(&fx, T * C);
    ref_encoder_backward(dwte, dwpe, c.dout, tok, B, T, C);
    FD_EXPECT("encoder dwte", fd_check(c.wte, V * C, dwte, enc_loss, &c));
    FD_EXPECT("encoder dwpe", fd_check(c.wpe, T * C, dwpe, enc_loss, &c));
    for (int i = 0; i < fx.nhost; i++) free(fx.host[i]);
}

/* The reference AdamW against a hand-computed first step: m = 0.1 g, v = 0.05 g^2 (b1 0.9,
 * b2 0.95), mhat = g, vhat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps). */
Test(reference, adamw_hand) {
    double p = 2.0, g = -0.5, m = 0.0, v = 0.0;
    ref_adamw(&p, &g, &m, &v, 1, 0.01, 0.9, 0.95, 1e-8, 0.1, 1);
    double want = 2.0 * (1 - 0.001) + 0.01 * 0.5 / (0.5 + 1e-8);
    cr_expect(fabs(p - want) < 1e-14, "adamw step 1: %.17g, want %.17g", p, want);
    cr_expect(fabs(m - (-0.05)) < 1e-15 && fabs(v - 0.0125) < 1e-15, "adamw moments %g %g", m, v);
}

/* ------------------------------------------------------------------ blas setup */

Test(blas, core_choice) {
    cr_expect_null(blas_better_coretype("Haswell"));
    cr_expect_null(blas_better_coretype("Zen"));
    cr_expect_null(blas_better_coretype("SkylakeX"));
    const char *c = blas_better_coretype("Prescott");
#if defined(__x86_64__)
    /* what /proc/cpuinfo's flags say, read independently of the compiler's cpuid helpers */
    FILE *f = fopen("/proc/cpuinfo", "r");
    cr_assert_not_null(f);
    char line[8192];
    bool avx512 = false, avx2fma = false;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            avx512 = strstr(line, " avx512f") && strstr(line, " avx512bw") && strstr(line, " avx512dq") &&
                     strstr(line, " avx512vl");
            avx2fma = strstr(line, " avx2") && strstr(line, " fma");
            break;
        }
    fclose(f);
    if (avx512)
        cr_expect_str_eq(c, "SkylakeX");
    else if (avx2fma)
        cr_expect_str_eq(c, "Haswell");
    else
        cr_expect_null(c);
#else
    cr_expect_null(c);
#endif
    cr_expect(strlen(blas_core_name()) > 0);
}

/* A wrong kernel, to show the start-up check can fail: right everywhere but one element, which is
 * off by 0.05 (a realistic broken kernel is off by far more, in many elements). */
static void sgemm_one_wrong(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, blasint m,
                            blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b,
                            blasint ldb, float beta, float *c, blasint ldc) {
    cblas_sgemm(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (m > 50 && ta == CblasTrans && tb == CblasNoTrans) c[(m / 2) * ldc + n / 3] += 0.05f;
}

/* The kernel this process runs passes the check it would have to pass when gtrain chooses it; a
 * kernel one element wrong in one transpose combination of the blocked shape fails it. */
Test(blas, sgemm_check_catches_a_wrong_kernel) {
    cr_expect(blas_sgemm_check(cblas_sgemm), "the %s kernel in use fails the check", blas_core_name());
    cr_expect_not(blas_sgemm_check(sgemm_one_wrong));
}

