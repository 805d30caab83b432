/* ops_fixture.c - see ops_fixture.h. */
#include "ops_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "test_backend_select.h"

void fx_open_as(Fx *fx, GtDtype act) {
    memset(fx, 0, sizeof *fx);
    fx->be = test_backend_open();
    fx->act = act;
    fx->act_tol = act == GT_BF16 ? TOL_BF16 : TOL;
    backend_set_act_dtype(fx->be, act);
}
void fx_open(Fx *fx) { fx_open_as(fx, GT_F32); }

void fx_close(Fx *fx) {
    for (int i = 0; i < fx->ndev; i++) fx->be->ops->dev_free(fx->be, fx->dev[i]);
    for (int i = 0; i < fx->nhost; i++) free(fx->host[i]);
    backend_close(fx->be);
    memset(fx, 0, sizeof *fx);
}

void *hmem(Fx *fx, size_t bytes) {
    cr_assert_lt(fx->nhost, FX_MAX, "test fixture: too many host buffers");
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert_not_null(p, "out of host memory (%zu bytes)", bytes);
    fx->host[fx->nhost++] = p;
    return p;
}
float *hf(Fx *fx, size_t n) { return hmem(fx, n * sizeof(float)); }
double *hd(Fx *fx, size_t n) { return hmem(fx, n * sizeof(double)); }

void *dmem(Fx *fx, size_t bytes) {
    cr_assert_lt(fx->ndev, FX_MAX, "test fixture: too many device buffers");
    void *p = fx->be->ops->dev_alloc(fx->be, bytes ? bytes : 4);
    cr_assert_not_null(p, "out of device memory (%zu bytes)", bytes);
    fx->dev[fx->ndev++] = p;
    return p;
}

void up(Fx *fx, void *dev, const void *host, size_t bytes) {
    GtError err = {0};
    cr_assert_eq(fx->be->ops->to_device(fx->be, dev, host, bytes, &err), 0, "to_device: %s", err.msg);
}
void down(Fx *fx, void *host, const void *dev, size_t bytes) {
    GtError err = {0};
    cr_assert_eq(fx->be->ops->to_host(fx->be, host, dev, bytes, &err), 0, "to_host: %s", err.msg);
}

/* device copy of host floats */
float *dup_f(Fx *fx, const float *h, size_t n) {
    float *d = dmem(fx, n * sizeof(float));
    up(fx, d, h, n * sizeof(float));
    return d;
}
int *dup_i(Fx *fx, const int *h, size_t n) {
    int *d = dmem(fx, n * sizeof(int));
    up(fx, d, h, n * sizeof(int));
    return d;
}
/* fetch n floats from the device into a fresh host buffer */
float *get_f(Fx *fx, const float *d, size_t n) {
    float *h = hf(fx, n);
    down(fx, h, d, n * sizeof(float));
    return h;
}

/* act-typed tensors: host values are floats (already representable in the act dtype, see
 * rand_a); on the device they are stored in fx->act */
void *dup_a(Fx *fx, const float *h, size_t n) {
    if (fx->act == GT_F32) return dup_f(fx, h, n);
    uint16_t *b = malloc(n * sizeof(uint16_t) + 2);
    cr_assert_not_null(b);
    for (size_t i = 0; i < n; i++) b[i] = gt_f32_to_bf16(h[i]);
    void *d = dmem(fx, n * sizeof(uint16_t));
    up(fx, d, b, n * sizeof(uint16_t));
    free(b);
    return d;
}
/* n NaNs on the device: fp32 (dnan) or in the act dtype (dnan_a) */
static void *dnan_as(Fx *fx, size_t n, bool act) {
    float *h = malloc(n * sizeof(float) + 1);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    void *d = act ? dup_a(fx, h, n) : dup_f(fx, h, n);
    free(h);
    return d;
}
float *dnan(Fx *fx, size_t n) { return dnan_as(fx, n, false); }
void *dnan_a(Fx *fx, size_t n) { return dnan_as(fx, n, true); }
float *get_a(Fx *fx, const void *d, size_t n) {
    float *h = hf(fx, n);
    GtError err = {0};
    cr_assert_eq(backend_act_to_host_f32(fx->be, h, d, n, &err), 0, "%s", err.msg);
    return h;
}

float *rand_f(Fx *fx, Rng *r, size_t n, float lo, float hi) {
    float *h = hf(fx, n);
    for (size_t i = 0; i < n; i++) h[i] = rng_f(r, lo, hi);
    return h;
}
/* random values representable in the act dtype (rounded to bf16 under bf16) */
float *rand_a(Fx *fx, Rng *r, size_t n, float lo, float hi) {
    float *h = rand_f(fx, r, n, lo, hi);
    if (fx->act == GT_BF16)
        for (size_t i = 0; i < n; i++) h[i] = gt_bf16_to_f32(gt_f32_to_bf16(h[i]));
    return h;
}
int *rand_i(Fx *fx, Rng *r, size_t n, int hi) {
    int *h = hmem(fx, n * sizeof(int));
    for (size_t i = 0; i < n; i++) h[i] = (int)(rng_next(r) % (uint64_t)hi);
    return h;
}
double *to_d(Fx *fx, const float *f, size_t n) {
    double *d = hd(fx, n);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

/* max|a-b| / max(max|b|, 1e-6); infinite when a holds a NaN/Inf */
double rel_err(const float *a, const double *b, size_t n) {
    double num = 0.0, den = 1e-6;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* raw bytes of a device buffer (for bit-identity checks) */
void *get_raw(Fx *fx, const void *d, size_t bytes) {
    void *h = hmem(fx, bytes);
    down(fx, h, d, bytes);
    return h;
}

double fd_check(double *x, size_t n, const double *grad, LossFn loss, void *ctx) {
    double num = 0.0, den = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_H;
        double lp = loss(ctx);
        x[i] = x0 - FD_H;
        double lm = loss(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2 * FD_H);
        if (fabs(fd - grad[i]) > num) num = fabs(fd - grad[i]);
        if (fabs(grad[i]) > den) den = fabs(grad[i]);
    }
    return num / den;
}

double dotd(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

double *rand_d(Fx *fx, Rng *r, size_t n, double lo, double hi) {
    double *d = hd(fx, n);
    for (size_t i = 0; i < n; i++) d[i] = lo + (hi - lo) * rng_uniform(r);
    return d;
}

bool fx_open_threads(Fx *fx, GtDtype act, int num_threads) {
    memset(fx, 0, sizeof *fx);
    if (strcmp(test_device_name(), "cpu") != 0) return false;
    GtError err = {0};
    cr_assert_eq(cpu_backend_create(&fx->be, num_threads, &err), 0, "cpu backend failed to open: %s", err.msg);
    fx->act = act;
    fx->act_tol = act == GT_BF16 ? TOL_BF16 : TOL;
    backend_set_act_dtype(fx->be, act);
    return true;
}

void fx_free_host(Fx *fx) {
    for (int i = 0; i < fx->nhost; i++) free(fx->host[i]);
    fx->nhost = 0;
}

/* ------------------------------------------------------------------ attention */

/* ramp: the keys' scale goes as 8 / hd (exactly 1 at hd = 8): the largest scores, about 110 at
 * hd = 8 and 40 at hd = 64, keep rows peaked, while their fp32 rounding error (which exp turns
 * into a relative error of P, and which grows with the score and with hd) stays within the fp32
 * bound. The ramp draws q then k for each channel, as the GPT-2 test always has (its data are
 * unchanged by the grouped-query layout). */
void check_attention_gqa(GtDtype act, AttCase c, bool ramp, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const int B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, hs = c.hd;
    const size_t R = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs;
    size_t n3 = (size_t)B * T * R, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    /* spread of +-2 gives peaked and flat softmax rows alike */
    float *qkv = rand_a(&fx, &r, n3, -2, 2), *dout = rand_a(&fx, &r, nout, -1, 1);
    float ramp_amp = 40.0f * 8.0f / (float)hs;
    if (ramp)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (size_t ch = 0; ch < C; ch++) {
                    float f = (float)t / (float)T;
                    float *row = qkv + ((size_t)b * T + t) * R;
                    row[ch] = rng_f(&r, 0.5f, 1.5f);
                    if (ch < (size_t)NKV * hs) row[C + ch] = ramp_amp * f * f * f * rng_f(&r, 0.5f, 1.5f);
                }
    if (act == GT_BF16) /* the ramp's values too must be bf16 values */
        for (size_t i = 0; i < n3; i++) qkv[i] = gt_bf16_to_f32(gt_f32_to_bf16(qkv[i]));

    void *d_qkv = dup_a(&fx, qkv, n3), *d_out = dnan_a(&fx, nout);
    float *d_lse = dnan(&fx, nl);
    fx.be->ops->attention_forward(fx.be, d_out, d_lse, d_qkv, B, T, NH, NKV, hs, c.window, NULL);
    void *d_dqkv = dnan_a(&fx, n3);
    float *d_ws = dnan(&fx, backend_attention_workspace_floats(fx.be->act_dtype, B, T, NH, NKV, hs));
    fx.be->ops->attention_backward(fx.be, d_dqkv, d_ws, dup_a(&fx, dout, nout), d_qkv, d_out, d_lse, B, T, NH, NKV,
                                   hs, c.window, NULL);

    double *rqkv = to_d(&fx, qkv, n3), *ro = hd(&fx, nout), *rl = hd(&fx, nl), *rd = hd(&fx, n3);
    ref_attention_gqa_forward(ro, rl, rqkv, B, T, NH, NKV, hs, c.window);
    /* The backward's D = dout . out enters as datt - D, which nearly cancels on peaked rows (the
     * ramp), amplifying any error in out. bf16: the reference takes D from the rounded out the op
     * was given (the op cannot know better); fp32: the exact D, as the fp32 out is within 2^-24. */
    const double *out_given = act == GT_BF16 ? to_d(&fx, get_a(&fx, d_out, nout), nout) : NULL;
    ref_attention_gqa_backward(rd, to_d(&fx, dout, nout), rqkv, out_given, B, T, NH, NKV, hs, c.window);

#define ATT_FMT "B=%d T=%d NH=%d NKV=%d hd=%d window=%d ramp=%d"
#define ATT_ARGS B, T, NH, NKV, hs, c.window, ramp
    CHECK_A("attention out", get_a(&fx, d_out, nout), ro, nout, ATT_FMT, ATT_ARGS);
    CHECK("attention lse", get_f(&fx, d_lse, nl), rl, nl, ATT_FMT, ATT_ARGS);
    /* dqkv on the ramp: datt - D cancels to a few bits on the peaked rows, so fp32 rounding in the
     * op (its GEMMs' summation order: the BLAS kernel's) is amplified; 1.14e-5 was measured with
     * OpenBLAS's Haswell kernel (below 1e-5 with the Zen one), so the ramp's fp32 bound is 4 TOL */
    CHECK_TOL(ramp && act != GT_BF16 ? 4 * TOL : fx.act_tol, "attention dqkv", get_a(&fx, d_dqkv, n3), rd, n3,
              ATT_FMT, ATT_ARGS);
#undef ATT_FMT
#undef ATT_ARGS
    fx_close(&fx);
}
