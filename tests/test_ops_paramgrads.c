/* test_ops_paramgrads.c - the accuracy contract of the parameter gradients that are column sums
 * over rows (backend.h, layernorm_backward): layernorm's dw and dbias and rmsnorm's dw, each within
 * gamma_K * (|dw0| + sum_r |term_r|) of a double-precision reference, K = max(32, ceil(N / 256))
 * + 268, at row counts where the order of the sum matters (N = 16384) and at row widths that take
 * the CUDA backend's single-pass kernel and its two-pass fallback (C = 8192 under layernorm).
 *
 * Why that K: the CUDA backend sums in fp32 in a fixed tree (kernels_norms.cu, kernels_misc.cu):
 * rows within a thread's row group (at most max(32, ceil(N / 256))), row groups (8), blocks (512:
 * 64 in each of 8 threads, then the 8) or, two-pass, row chunks (32), plus the += into dw, and each term dout * ((x - mean) * rstd)
 * carries at most 3 roundings; so each column's
 * computed sum is the exact sum of its terms each perturbed by at most gamma_K relative (the
 * standard bound for recursive summation, Higham 4.2). The CPU backend sums in double and lands
 * far inside. The bound is per column, so a dropped row or a partial added twice (an error of one
 * whole term, ~1/N of the column's mass at these sizes, far above gamma_K) fails it.
 *
 * And matmul_backward's bias gradient (a column sum of dout) with dw, accumulated over two
 * micro-batches, against the double reference (ref_ops.c) at test_ops.c's fp32 bound. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "backend.h"
#include "ops_fixture.h"
#include "ref_ops.h"
#include "test_backend_select.h"

/* the worst column of |got - want| / (gamma_K * mass); <= 1 meets the contract */
static double worst_ratio(const float *got, const double *want, const double *mass, int C, int N) {
    const double u = ldexp(1.0, -24);
    double K = (double)(N / 256 + (N % 256 != 0));
    if (K < 32) K = 32;
    K += 268;
    const double gamma = K * u / (1.0 - K * u);
    double worst = 0.0;
    for (int c = 0; c < C; c++) {
        double e = fabs((double)got[c] - want[c]) / (gamma * mass[c]);
        if (!(e <= worst)) worst = e; /* NaN propagates */
    }
    return worst;
}

/* layernorm (ln) or rmsnorm backward on N rows of C: dw (and db) checked */
static void check_case(GtDtype act, bool ln, int N, int C, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const size_t NC = (size_t)N * C;
    float *inp = rand_a(&fx, &r, NC, -2, 3), *dout = rand_a(&fx, &r, NC, -1, 1), *w = rand_a(&fx, &r, C, 0.5f, 1.5f);
    float *mean = rand_f(&fx, &r, (size_t)N, -0.5f, 0.5f), *rstd = rand_f(&fx, &r, (size_t)N, 0.5f, 2.0f);
    float *dw0 = rand_f(&fx, &r, (size_t)C, -1, 1), *db0 = rand_f(&fx, &r, (size_t)C, -1, 1);
    float *d_dw = dup_f(&fx, dw0, (size_t)C), *d_db = dup_f(&fx, db0, (size_t)C);
    void *d_inp = dup_a(&fx, inp, NC), *d_dout = dup_a(&fx, dout, NC), *d_w = dup_a(&fx, w, (size_t)C);
    float *d_rstd = dup_f(&fx, rstd, (size_t)N), *d_mean = dup_f(&fx, mean, (size_t)N);
    void *d_dinp = dup_a(&fx, hf(&fx, NC), NC); /* zeros; the gradient through the norm is test_ops.c's */
    if (ln)
        fx.be->ops->layernorm_backward(fx.be, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    else
        fx.be->ops->rmsnorm_backward(fx.be, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    double *want_w = hd(&fx, (size_t)C), *mass_w = hd(&fx, (size_t)C);
    double *want_b = hd(&fx, (size_t)C), *mass_b = hd(&fx, (size_t)C);
    for (int c = 0; c < C; c++) {
        want_w[c] = dw0[c], mass_w[c] = fabs(dw0[c]);
        want_b[c] = db0[c], mass_b[c] = fabs(db0[c]);
    }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)n * C + c;
            const double xh = ((double)inp[i] - (ln ? (double)mean[n] : 0.0)) * (double)rstd[n];
            want_w[c] += (double)dout[i] * xh;
            mass_w[c] += fabs((double)dout[i] * xh);
            want_b[c] += dout[i];
            mass_b[c] += fabs(dout[i]);
        }
    double ew = worst_ratio(get_f(&fx, d_dw, (size_t)C), want_w, mass_w, C, N);
    cr_expect_leq(ew, 1.0, "%s %s N=%d C=%d: dw off by %.3g of the bound gamma_K * sum |terms|", ln ? "layernorm" : "rmsnorm",
                  gt_dtype_name(act), N, C, ew);
    if (ln) {
        double eb = worst_ratio(get_f(&fx, d_db, (size_t)C), want_b, mass_b, C, N);
        cr_expect_leq(eb, 1.0, "layernorm %s N=%d C=%d: dbias off by %.3g of the bound", gt_dtype_name(act), N, C, eb);
    }
    fx_close(&fx);
}

static void cases(GtDtype act) {
    check_case(act, true, 16384, 40, 11);  /* many rows: 256 blocks of 64 rows */
    check_case(act, false, 16384, 40, 12);
    check_case(act, true, 300, 2000, 13);  /* 3 warps per block */
    check_case(act, false, 77, 8192, 14);  /* 1 warp per block */
    check_case(act, true, 77, 8192, 15);   /* dw and db do not fit a warp's shared rows: two passes */
}

Test(ops, norm_param_grads_fp32_bound, .timeout = 300) { cases(GT_F32); }
Test(ops_bf16, norm_param_grads_fp32_bound, .timeout = 300) { cases(GT_BF16); }

/* The bias gradient accumulated over two micro-batches into a dbias (and dw) that start non-zero,
 * as a training step's accumulation does, against the reference run twice. On CUDA with bf16 the
 * first shape (C, OC multiples of 8, 16-byte aligned) takes the dW GEMM's cuBLASLt BGRADB epilogue,
 * which WRITES its sums into a scratch that is then added: run twice, a scratch added twice or never,
 * or written straight into dbias, shows here. The second (C = 36: rows of 72 bytes, off the 16-byte
 * path) is refused the epilogue and keeps the GEMM + column sum. */
static void check_matmul_two_micro_batches(GtDtype act, int N, int C, int OC, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *w = rand_a(&fx, &r, OCC, -1, 1), *dw0 = rand_f(&fx, &r, OCC, -1, 1), *db0 = rand_f(&fx, &r, OC, -1, 1);
    void *d_w = dup_a(&fx, w, OCC);
    float *d_dw = dup_f(&fx, dw0, OCC), *d_db = dup_f(&fx, db0, OC);
    double *rw = to_d(&fx, w, OCC), *rdw = to_d(&fx, dw0, OCC), *rdb = to_d(&fx, db0, OC), *rdinp = hd(&fx, NC);
    for (int mb = 0; mb < 2; mb++) {
        float *inp = rand_a(&fx, &r, NC, -1, 1), *dout = rand_a(&fx, &r, NO, -1, 1);
        fx.be->ops->matmul_backward(fx.be, dnan_a(&fx, NC), d_dw, d_db, dup_a(&fx, dout, NO), dup_a(&fx, inp, NC), d_w,
                                    N, C, OC, OC);
        ref_matmul_backward(rdinp, rdw, rdb, to_d(&fx, dout, NO), to_d(&fx, inp, NC), rw, N, C, OC);
    }
    CHECK("matmul dbias (two micro-batches)", get_f(&fx, d_db, OC), rdb, OC, "N=%d C=%d OC=%d", N, C, OC);
    CHECK("matmul dw (two micro-batches)", get_f(&fx, d_dw, OCC), rdw, OCC, "N=%d C=%d OC=%d", N, C, OC);
    fx_close(&fx);
}
static void matmul_two_micro_batch_cases(GtDtype act) {
    check_matmul_two_micro_batches(act, 40, 32, 48, 21);
    check_matmul_two_micro_batches(act, 40, 36, 24, 22);
}
Test(ops, matmul_dbias_two_micro_batches) { matmul_two_micro_batch_cases(GT_F32); }
Test(ops_bf16, matmul_dbias_two_micro_batches) { matmul_two_micro_batch_cases(GT_BF16); }
