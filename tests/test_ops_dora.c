/* test_ops_dora.c - the DoRA backend ops (backend.h): dora_norm, dora_forward and dora_backward,
 * suite dora_ops.
 *
 * Run on the backend of test_backend_open() (GTRAIN_TEST_DEVICE=cuda, as make test-cudasim sets,
 * runs them on the CUDA backend), both act dtypes, against a double-precision reference written
 * here from the definitions (not from the code under test), on the act-rounded inputs:
 *   norm_i = || W_i + s B_i A ||_2; g_i = m_i / norm_i;
 *   forward:  out[n, i] += (g_i - 1) z[n, i] + g_i s y[n, i]   (columns past rows untouched);
 *   backward: dz = (g - 1) dout, dy = g s dout, dmag_i += sum_n dout[n, i] (z + s y)[n, i] / norm_i.
 * Bounds: the norm is computed in double and rounded once: 2^-23 relative; the fp32 elementwise
 * outputs TOL (ops_fixture.h), bf16 ones the act tolerance; dmag (accumulated onto a nonzero fp32
 * start) 1e-6 relative. The backward in place (dz == z, dy == y) gives the out-of-place bits. The
 * same bits for 1 and 2 CPU threads, and the CUDA backend the CPU's bits (a GPU, or the
 * simulator; skipped without one). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"
#include "test_backend_select.h"

enum { DR = 37, DIN = 53, DRK = 5, DN = 29, DLDO = 45, DLDD = 41 };
static const float DS = 1.75f;

typedef struct {
    float *W, *A, *B, *m, *out, *z, *y, *dout, *dmag0; /* inputs (act-representable where act-typed) */
} DoraIn;

typedef struct {
    float *norm, *out, *dz, *dy, *dmag, *dz_ip, *dy_ip, *dmag_ip; /* widened to float */
    void *raw[5];
    size_t raw_bytes[5];
} DoraOut;

static float round_act(GtDtype act, float x) { return act == GT_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(x)) : x; }

static float *rnd(Rng *r, size_t n, float lo, float hi, GtDtype act) {
    float *p = malloc(n * sizeof *p);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) p[i] = round_act(act, rng_f(r, lo, hi));
    return p;
}

static DoraIn dora_inputs(GtDtype act) {
    Rng r = {77 + (uint64_t)act};
    DoraIn in;
    in.W = rnd(&r, (size_t)DR * DIN, -1, 1, act);
    in.A = rnd(&r, (size_t)DRK * DIN, -0.5f, 0.5f, act);
    in.B = rnd(&r, (size_t)DR * DRK, -0.5f, 0.5f, act);
    in.m = rnd(&r, DR, 2, 6, act);
    in.out = rnd(&r, (size_t)DN * DLDO, -2, 2, act);
    in.z = rnd(&r, (size_t)DN * DR, -2, 2, act);
    in.y = rnd(&r, (size_t)DN * DR, -2, 2, act);
    in.dout = rnd(&r, (size_t)DN * DLDD, -1, 1, act);
    in.dmag0 = rnd(&r, DR, -0.1f, 0.1f, GT_F32);
    return in;
}

static void in_free(DoraIn *in) {
    float *p[] = {in->W, in->A, in->B, in->m, in->out, in->z, in->y, in->dout, in->dmag0};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

static void *dev_act(Backend *b, GtDtype act, const float *x, size_t n) {
    GtError err = {0};
    const size_t es = gt_dtype_size(act);
    void *h = malloc(n * es), *d = b->ops->dev_alloc(b, n * es);
    cr_assert(h && d);
    for (size_t i = 0; i < n; i++)
        if (act == GT_F32) ((float *)h)[i] = x[i];
        else ((uint16_t *)h)[i] = gt_f32_to_bf16(x[i]);
    cr_assert_eq(b->ops->to_device(b, d, h, n * es, &err), 0, "%s", err.msg);
    free(h);
    return d;
}

/* n values of device buffer d (act, or fp32 when f32) into fresh host floats; the raw bytes too */
static float *host_vals(Backend *b, GtDtype act, const void *d, size_t n, void **raw, size_t *raw_bytes) {
    GtError err = {0};
    const size_t es = gt_dtype_size(act);
    void *h = malloc(n * es);
    float *f = malloc(n * sizeof *f);
    cr_assert(h && f);
    cr_assert_eq(b->ops->to_host(b, h, d, n * es, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) f[i] = act == GT_F32 ? ((float *)h)[i] : gt_bf16_to_f32(((uint16_t *)h)[i]);
    if (raw) *raw = h, *raw_bytes = n * es;
    else free(h);
    return f;
}

static DoraOut dora_run(Backend *b, GtDtype act, const DoraIn *in) {
    backend_set_act_dtype(b, act);
    DoraOut o = {0};
    void *W = dev_act(b, act, in->W, (size_t)DR * DIN), *A = dev_act(b, act, in->A, (size_t)DRK * DIN);
    void *B = dev_act(b, act, in->B, (size_t)DR * DRK), *m = dev_act(b, act, in->m, DR);
    void *out = dev_act(b, act, in->out, (size_t)DN * DLDO), *dout = dev_act(b, act, in->dout, (size_t)DN * DLDD);
    void *z = dev_act(b, act, in->z, (size_t)DN * DR), *y = dev_act(b, act, in->y, (size_t)DN * DR);
    void *z2 = dev_act(b, act, in->z, (size_t)DN * DR), *y2 = dev_act(b, act, in->y, (size_t)DN * DR);
    void *dz = dev_act(b, act, in->z, (size_t)DN * DR), *dy = dev_act(b, act, in->y, (size_t)DN * DR);
    float *norm = dev_act(b, GT_F32, in->dmag0, DR); /* overwritten */
    float *dmag = dev_act(b, GT_F32, in->dmag0, DR), *dmag2 = dev_act(b, GT_F32, in->dmag0, DR);
    b->ops->dora_norm(b, norm, W, A, B, DR, DIN, DRK, DS);
    b->ops->dora_forward(b, out, DLDO, z, y, m, norm, DN, DR, DS);
    b->ops->dora_backward(b, dmag, dz, dy, dout, DLDD, z, y, m, norm, DN, DR, DS);
    b->ops->dora_backward(b, dmag2, z2, y2, dout, DLDD, z2, y2, m, norm, DN, DR, DS); /* in place */
    o.norm = host_vals(b, GT_F32, norm, DR, &o.raw[0], &o.raw_bytes[0]);
    o.out = host_vals(b, act, out, (size_t)DN * DLDO, &o.raw[1], &o.raw_bytes[1]);
    o.dz = host_vals(b, act, dz, (size_t)DN * DR, &o.raw[2], &o.raw_bytes[2]);
    o.dy = host_vals(b, act, dy, (size_t)DN * DR, &o.raw[3], &o.raw_bytes[3]);
    o.dmag = host_vals(b, GT_F32, dmag, DR, &o.raw[4], &o.raw_bytes[4]);
    o.dz_ip = host_vals(b, act, z2, (size_t)DN * DR, NULL, NULL);
    o.dy_ip = host_vals(b, act, y2, (size_t)DN * DR, NULL, NULL);
    o.dmag_ip = host_vals(b, GT_F32, dmag2, DR, NULL, NULL);
    void *dev[] = {W, A, B, m, out, dout, z, y, z2, y2, dz, dy, norm, dmag, dmag2};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) b->ops->dev_free(b, dev[i]);
    return o;
}

static void out_free(DoraOut *o) {
    float *p[] = {o->norm, o->out, o->dz, o->dy, o->dmag, o->dz_ip, o->dy_ip, o->dmag_ip};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
    for (int i = 0; i < 5; i++) free(o->raw[i]);
}

/* max |a - b| / max(max |b|, 1e-6) */
static double err_of(const float *a, const double *b, size_t n) {
    double e = 0, mb = 1e-6;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        e = fmax(e, fabs(a[i] - b[i]));
        mb = fmax(mb, fabs(b[i]));
    }
    return e / mb;
}

static void against_double(GtDtype act) {
    Backend *b = test_backend_open();
    if (!b->ops->dora_norm) cr_skip_test("the %s backend has no DoRA ops", b->ops->name);
    DoraIn in = dora_inputs(act);
    DoraOut o = dora_run(b, act, &in);
    const double tol = act == GT_BF16 ? TOL_BF16 : TOL, s = DS;
    double norm[DR], g[DR];
    double *out = calloc((size_t)DN * DLDO, sizeof *out), *dz = calloc((size_t)DN * DR, sizeof *dz);
    double *dy = calloc((size_t)DN * DR, sizeof *dy), dmag[DR];
    cr_assert(out && dz && dy);
    for (int i = 0; i < DR; i++) {
        double acc = 0;
        for (int j = 0; j < DIN; j++) {
            double ba = 0;
            for (int k = 0; k < DRK; k++) ba += (double)in.B[i * DRK + k] * in.A[k * DIN + j];
            const double w = in.W[i * DIN + j] + s * ba;
            acc += w * w;
        }
        norm[i] = sqrt(acc);
        g[i] = in.m[i] / norm[i];
        double sum = 0;
        for (int n = 0; n < DN; n++) {
            const double d = in.dout[n * DLDD + i];
            sum += d * (in.z[n * DR + i] + s * in.y[n * DR + i]);
            dz[n * DR + i] = (g[i] - 1) * d;
            dy[n * DR + i] = g[i] * s * d;
        }
        dmag[i] = in.dmag0[i] + sum / norm[i];
    }
    for (int n = 0; n < DN; n++)
        for (int c = 0; c < DLDO; c++)
            out[n * DLDO + c] = in.out[n * DLDO + c] +
                                (c < DR ? (g[c] - 1) * in.z[n * DR + c] + g[c] * s * in.y[n * DR + c] : 0.0);
    const char *dt = gt_dtype_name(act);
    double e = err_of(o.norm, norm, DR);
    cr_expect_leq(e, 0x1p-23, "%s dora_norm: rel err %.3g", dt, e);
    e = err_of(o.out, out, (size_t)DN * DLDO);
    cr_expect_leq(e, tol, "%s dora_forward: rel err %.3g", dt, e);
    for (int n = 0; n < DN; n++) /* the columns past the block: untouched, bit for bit */
        for (int c = DR; c < DLDO; c++)
            cr_expect_eq(o.out[n * DLDO + c], in.out[n * DLDO + c], "%s dora_forward wrote column %d", dt, c);
    e = err_of(o.dz, dz, (size_t)DN * DR);
    cr_expect_leq(e, tol, "%s dora_backward dz: rel err %.3g", dt, e);
    e = err_of(o.dy, dy, (size_t)DN * DR);
    cr_expect_leq(e, tol, "%s dora_backward dy: rel err %.3g", dt, e);
    e = err_of(o.dmag, dmag, DR);
    cr_expect_leq(e, 1e-6, "%s dora_backward dmag: rel err %.3g", dt, e);
    cr_expect(memcmp(o.dz, o.dz_ip, (size_t)DN * DR * sizeof(float)) == 0 &&
                  memcmp(o.dy, o.dy_ip, (size_t)DN * DR * sizeof(float)) == 0 &&
                  memcmp(o.dmag, o.dmag_ip, DR * sizeof(float)) == 0,
              "%s dora_backward in place differs from out of place", dt);
    free(out), free(dz), free(dy);
    out_free(&o);
    in_free(&in);
    backend_close(b);
}

Test(dora_ops, against_double_fp32) { against_double(GT_F32); }
Test(dora_ops, against_double_bf16) { against_double(GT_BF16); }

static void expect_same_bits(const DoraOut *a, const DoraOut *b, GtDtype act, const char *what) {
    static const char *const names[5] = {"dora_norm", "dora_forward", "dora_backward dz", "dora_backward dy",
                                         "dora_backward dmag"};
    for (int i = 0; i < 5; i++)
        cr_expect(a->raw_bytes[i] == b->raw_bytes[i] && memcmp(a->raw[i], b->raw[i], a->raw_bytes[i]) == 0,
                  "%s %s: %s bits differ", gt_dtype_name(act), what, names[i]);
}

Test(dora_ops, same_bits_for_1_and_2_threads) {
    if (strcmp(test_device_name(), "cpu") != 0) cr_skip_test("thread counts are a CPU backend property");
    GtError err = {0};
    Backend *b1 = NULL, *b2 = NULL;
    cr_assert_eq(cpu_backend_create(&b1, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(cpu_backend_create(&b2, 2, &err), 0, "%s", err.msg);
    for (int a = 0; a < 2; a++) {
        GtDtype act = a ? GT_BF16 : GT_F32;
        DoraIn in = dora_inputs(act);
        DoraOut o1 = dora_run(b1, act, &in), o2 = dora_run(b2, act, &in);
        expect_same_bits(&o1, &o2, act, "1 vs 2 threads");
        out_free(&o1), out_free(&o2), in_free(&in);
    }
    backend_close(b1);
    backend_close(b2);
}

/* the CUDA backend gives the CPU backend's bits (a GPU, or the simulator) */
Test(dora_ops, cuda_bits_match_cpu, .timeout = 120) {
#ifdef GT_HAVE_CUDA
    if (backend_gpu_count() <= 0) cr_skip_test("no CUDA device visible");
    GtError err = {0};
    Backend *cpu = NULL, *gpu = NULL;
    cr_assert_eq(backend_open_cuda(&gpu, 0, &err), 0, "cuda backend: %s", err.msg);
    cr_assert_eq(cpu_backend_create(&cpu, 0, &err), 0, "cpu backend: %s", err.msg);
    for (int a = 0; a < 2; a++) {
        GtDtype act = a ? GT_BF16 : GT_F32;
        DoraIn in = dora_inputs(act);
        DoraOut oc = dora_run(cpu, act, &in), og = dora_run(gpu, act, &in);
        expect_same_bits(&og, &oc, act, "cuda vs cpu");
        out_free(&oc), out_free(&og), in_free(&in);
    }
    backend_close(gpu);
    backend_close(cpu);
#else
    cr_skip_test("this build has no CUDA backend (built: %s)", backend_built_list());
#endif
}
