/* ops_fixture.c - see ops_fixture.h. */
#include "ops_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
