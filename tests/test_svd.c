/* test_svd.c - src/model/svd.c against independent references: a naive double-precision one-sided
 * Jacobi SVD written here, matrices with a spectrum known by construction, PEFT's identities
 * for PiSSA's A, B and W_res, and (where Debian's python3-torch is installed) torch.linalg.svd. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svd.h"
#include "test_util.h"

/* ---- the test's own helpers (none from src/model/svd.c) ---- */

static float *random_matrix(int rows, int cols, uint64_t seed) {
    float *w = malloc(sizeof(float) * (size_t)rows * cols);
    cr_assert(w);
    uint64_t st = seed;
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = (float)test_normal(&st);
    return w;
}


/* Reference thin SVD of W [rows, cols]: U [rows, k], S [k], Vh [k, cols], k = min. */
static void ref_svd(const float *W, int rows, int cols, double *U, double *S, double *Vh) {
    int tall = rows >= cols, m = tall ? rows : cols, n = tall ? cols : rows;
    double *a = malloc(sizeof(double) * (size_t)m * n), *u = malloc(sizeof(double) * (size_t)m * n),
           *v = malloc(sizeof(double) * (size_t)n * n);
    cr_assert(a && u && v);
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) a[tall ? i * cols + c : c * rows + i] = W[i * cols + c];
    test_jacobi_svd(a, m, n, u, S, v);
    for (int j = 0; j < n; j++) {
        if (tall) { /* W = u S v^T */
            for (int i = 0; i < rows; i++) U[i * n + j] = u[i * n + j];
            for (int c = 0; c < cols; c++) Vh[j * cols + c] = v[c * n + j];
        } else { /* W^T = u S v^T, W = v S u^T */
            for (int i = 0; i < rows; i++) U[i * n + j] = v[i * n + j];
            for (int c = 0; c < cols; c++) Vh[j * cols + c] = u[c * n + j];
        }
    }
    free(a); free(u); free(v);
}

/* Distance to the nearest neighbour of S[j] (S descending, length k), relative to S[0]. */
static double rel_gap(const double *S, int k, int j) {
    double g = INFINITY;
    if (j > 0) g = fmin(g, S[j - 1] - S[j]);
    if (j + 1 < k) g = fmin(g, S[j] - S[j + 1]);
    return g / S[0];
}

/* Compare the module's (U [rows, r], S, Vh [r, cols]) with a reference of rank k >= r, pair by
 * pair up to the sign of each pair (one sign for U[:, j] and Vh[j, :] together).
 * Tolerances: S to 1e-5 relative (fp32 output: 6e-8, double computation: 1e-15 of S[0]).
 * A singular vector's error is bounded by (perturbation / gap) (Wedin): the double computations
 * on both sides perturb by ~1e-15 S[0], the fp32 rounding of the output adds 6e-8 per entry, so
 * tol_j = 1e-6 + 1e-12 / rel_gap_j. */
static void expect_matches(const float *U, const float *S, const float *Vh, const double *Ur, const double *Sr,
                           const double *Vhr, int rows, int cols, int r, int k) {
    for (int j = 0; j < r; j++) {
        cr_expect(fabs(S[j] - Sr[j]) <= 1e-5 * Sr[j] + 1e-12 * Sr[0], "S[%d] = %.9g, reference %.9g", j, S[j], Sr[j]);
        double dot = 0;
        for (int i = 0; i < rows; i++) dot += U[i * r + j] * Ur[i * k + j];
        double sg = dot < 0 ? -1 : 1, tol = 1e-6 + 1e-12 / rel_gap(Sr, k, j), eu = 0, ev = 0;
        for (int i = 0; i < rows; i++) eu = fmax(eu, fabs(U[i * r + j] - sg * Ur[i * k + j]));
        for (int c = 0; c < cols; c++) ev = fmax(ev, fabs(Vh[j * cols + c] - sg * Vhr[j * cols + c]));
        cr_expect(eu <= tol && ev <= tol, "pair %d of %dx%d: |dU| %.3g |dVh| %.3g > %.3g", j, rows, cols, eu, ev, tol);
        /* the documented sign convention: the largest |U[:, j]| entry is positive */
        int best = 0;
        for (int i = 1; i < rows; i++) if (fabs(U[i * r + j]) > fabs(U[best * r + j])) best = i;
        cr_expect(U[best * r + j] > 0, "pair %d: the largest entry of U[:, %d] is negative", j, j);
    }
}

/* max |X^T X - I| for X with n orthonormal columns, X [m, n] row-major (cs = 1) or its
 * transpose (rows of X [n, m], cs = 0) */
static double orth_err(const float *X, int m, int n, int columns) {
    double e = 0;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            double d = 0;
            for (int i = 0; i < m; i++)
                d += columns ? (double)X[i * n + a] * X[i * n + b] : (double)X[a * m + i] * X[b * m + i];
            e = fmax(e, fabs(d - (a == b)));
        }
    return e;
}

/* ---- (a) exact against the Jacobi reference ---- */

Test(svd, exact_matches_an_independent_jacobi_svd) {
    const int shapes[][3] = {{40, 24, 24}, {40, 24, 5}, {24, 40, 24}, {24, 40, 7}, {17, 17, 17}, {1, 9, 1}, {9, 1, 1}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int rows = shapes[t][0], cols = shapes[t][1], r = shapes[t][2], k = rows < cols ? rows : cols;
        float *W = random_matrix(rows, cols, 100 + t);
        double *Ur = malloc(sizeof(double) * rows * k), *Sr = malloc(sizeof(double) * k), *Vhr = malloc(sizeof(double) * k * cols);
        float *U = malloc(sizeof(float) * rows * r), *S = malloc(sizeof(float) * r), *Vh = malloc(sizeof(float) * r * cols);
        cr_assert(Ur && Sr && Vhr && U && S && Vh);
        ref_svd(W, rows, cols, Ur, Sr, Vhr);
        GtError err = {0};
        cr_assert_eq(svd_topr(W, rows, cols, r, -1, 0, U, S, Vh, &err), 0, "%s", err.msg);
        expect_matches(U, S, Vh, Ur, Sr, Vhr, rows, cols, r, k);
        cr_expect(orth_err(U, rows, r, 1) < 1e-6 && orth_err(Vh, cols, r, 0) < 1e-6, "%dx%d: not orthonormal", rows, cols);
        free(W); free(Ur); free(Sr); free(Vhr); free(U); free(S); free(Vh);
    }
}

/* ---- (b), (c) PiSSA ---- */

/* |W_res + s B A - W| entry by entry, in double, against the bound of the rounding of W_res:
 * W_res = fl32(W - t) with t = s B @ A in double (error <= r 2^-53 sum|s B A|), so
 * |W_res + t' - W| <= 2^-24 |W_res| (1 + 2^-23) + (2r + 2) 2^-53 (sum|s B A| + |W|). Returns the
 * largest |error| for the report. */
static double expect_reconstructs(const float *W, const float *W_res, const float *A, const float *B,
                                  int rows, int cols, int r, double s) {
    double worst = 0;
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) {
            double t = 0, ta = 0;
            for (int j = 0; j < r; j++) {
                double p = s * (double)B[i * r + j] * (double)A[j * cols + c];
                t += p, ta += fabs(p);
            }
            double w = W[i * cols + c], e = fabs((double)W_res[i * cols + c] + t - w);
            double bound = 0x1p-24 * fabs((double)W_res[i * cols + c]) * (1 + 0x1p-23) + (2.0 * r + 2) * 0x1p-53 * (ta + fabs(w));
            cr_expect(e <= bound, "W_res + sBA - W at [%d, %d]: %.3g > bound %.3g", i, c, e, bound);
            worst = fmax(worst, e);
        }
    return worst;
}

Test(svd, pissa_residual_plus_adapter_reproduces_w) {
    const int rows = 64, cols = 48, r = 8;
    float *W = random_matrix(rows, cols, 7), *A = malloc(sizeof(float) * r * cols), *B = malloc(sizeof(float) * rows * r),
          *Wr = malloc(sizeof(float) * rows * cols), *Win = malloc(sizeof(float) * rows * cols),
          *A2 = malloc(sizeof(float) * r * cols), *B2 = malloc(sizeof(float) * rows * r);
    cr_assert(A && B && Wr && Win && A2 && B2);
    const double scales[] = {lora_scale(16, r, false), lora_scale(16, r, true), 1.0, 0.25};
    const int niters[] = {-1, 0, 2};
    for (size_t si = 0; si < 4; si++)
        for (size_t ni = 0; ni < 3; ni++) {
            GtError err = {0};
            cr_assert_eq(pissa_init(W, rows, cols, r, scales[si], niters[ni], 42, A, B, Wr, &err), 0, "%s", err.msg);
            double worst = expect_reconstructs(W, Wr, A, B, rows, cols, r, scales[si]);
            cr_log_info("pissa scale %g niter %d: max |W_res + sBA - W| = %.3g (entries of W ~ N(0, 1))", scales[si], niters[ni], worst);
            /* in place (W_res aliasing W) gives the same bits */
            memcpy(Win, W, sizeof(float) * rows * cols);
            cr_assert_eq(pissa_init(Win, rows, cols, r, scales[si], niters[ni], 42, A2, B2, Win, &err), 0, "%s", err.msg);
            cr_expect(memcmp(Win, Wr, sizeof(float) * rows * cols) == 0 && memcmp(A, A2, sizeof(float) * r * cols) == 0 &&
                      memcmp(B, B2, sizeof(float) * rows * r) == 0, "in-place pissa_init differs");
        }
    free(W); free(A); free(B); free(Wr); free(Win); free(A2); free(B2);
}

/* PEFT's definitions: A = diag(sqrt(S/s)) Vh_r, B = U_r diag(sqrt(S/s)), so A A^T = B^T B =
 * diag(S/s) (Vh, U orthonormal); each row of A and column of B is the reference singular vector
 * times sqrt(S_j / s), with one sign per pair. Tolerances: fp32 rounding of A, B (6e-8 relative
 * per entry, summed over cols terms: ~cols * 6e-8 at worst) -> 1e-5 of S_0 / s. */
Test(svd, pissa_factors_are_peft_definitions) {
    const int rows = 40, cols = 24, r = 6, k = 24;
    const double s = lora_scale(12, r, false);
    float *W = random_matrix(rows, cols, 11), *A = malloc(sizeof(float) * r * cols), *B = malloc(sizeof(float) * rows * r),
          *Wr = malloc(sizeof(float) * rows * cols);
    double *Ur = malloc(sizeof(double) * rows * k), *Sr = malloc(sizeof(double) * k), *Vhr = malloc(sizeof(double) * k * cols);
    cr_assert(A && B && Wr && Ur && Sr && Vhr);
    ref_svd(W, rows, cols, Ur, Sr, Vhr);
    GtError err = {0};
    cr_assert_eq(pissa_init(W, rows, cols, r, s, -1, 0, A, B, Wr, &err), 0, "%s", err.msg);
    double tol = 1e-5 * Sr[0] / s;
    for (int a = 0; a < r; a++)
        for (int b = 0; b < r; b++) {
            double aa = 0, bb = 0, want = a == b ? Sr[a] / s : 0;
            for (int c = 0; c < cols; c++) aa += (double)A[a * cols + c] * A[b * cols + c];
            for (int i = 0; i < rows; i++) bb += (double)B[i * r + a] * B[i * r + b];
            cr_expect(fabs(aa - want) <= tol && fabs(bb - want) <= tol, "(A A^T)[%d,%d] = %.8g, (B^T B) = %.8g, want %.8g",
                      a, b, aa, bb, want);
        }
    for (int j = 0; j < r; j++) {
        double f = sqrt(Sr[j] / s), da = 0, db = 0, ea = 0, eb = 0, tv = (1e-6 + 1e-12 / rel_gap(Sr, k, j)) * f;
        for (int c = 0; c < cols; c++) da += A[j * cols + c] * Vhr[j * cols + c];
        for (int i = 0; i < rows; i++) db += B[i * r + j] * Ur[i * k + j];
        cr_expect((da > 0) == (db > 0), "pair %d: A and B carry different signs", j);
        double sg = da < 0 ? -1 : 1;
        for (int c = 0; c < cols; c++) ea = fmax(ea, fabs(A[j * cols + c] - sg * f * Vhr[j * cols + c]));
        for (int i = 0; i < rows; i++) eb = fmax(eb, fabs(B[i * r + j] - sg * f * Ur[i * k + j]));
        cr_expect(ea <= tv && eb <= tv, "pair %d: |dA| %.3g |dB| %.3g > %.3g", j, ea, eb, tv);
    }
    free(W); free(A); free(B); free(Wr); free(Ur); free(Sr); free(Vhr);
}

/* PEFT's rank-2r conversion: W + s [B | -B0] [A ; A0] = W_res + s B A, and the saved alpha keeps
 * the scale. A, B are "trained": A0, B0 plus a perturbation. */
Test(svd, pissa_converted_to_rank_2r_lora_on_the_original_w) {
    const int rows = 30, cols = 20, r = 4;
    const double alpha = 8, s = lora_scale(alpha, r, false);
    float *W = random_matrix(rows, cols, 5), *A0 = malloc(sizeof(float) * r * cols), *B0 = malloc(sizeof(float) * rows * r),
          *Wr = malloc(sizeof(float) * rows * cols), *A = random_matrix(r, cols, 6), *B = random_matrix(rows, r, 8),
          *A2 = malloc(sizeof(float) * 2 * r * cols), *B2 = malloc(sizeof(float) * rows * 2 * r);
    cr_assert(A0 && B0 && Wr && A2 && B2);
    GtError err = {0};
    cr_assert_eq(pissa_init(W, rows, cols, r, s, -1, 0, A0, B0, Wr, &err), 0, "%s", err.msg);
    for (int i = 0; i < r * cols; i++) A[i] = A0[i] + 0.1f * A[i];
    for (int i = 0; i < rows * r; i++) B[i] = B0[i] + 0.1f * B[i];
    pissa_to_lora_2r(A, B, A0, B0, rows, cols, r, A2, B2);
    for (int j = 0; j < r; j++)
        for (int c = 0; c < cols; c++)
            cr_assert(A2[j * cols + c] == A[j * cols + c] && A2[(r + j) * cols + c] == A0[j * cols + c]);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < r; j++)
            cr_assert(B2[i * 2 * r + j] == B[i * r + j] && B2[i * 2 * r + r + j] == -B0[i * r + j]);
    /* the same linear map, to the rounding of W_res (as expect_reconstructs), plus double sums */
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) {
            double lhs = W[i * cols + c], rhs = Wr[i * cols + c], mag = fabs(lhs);
            for (int j = 0; j < 2 * r; j++) lhs += s * (double)B2[i * 2 * r + j] * A2[j * cols + c], mag += fabs(s * B2[i * 2 * r + j] * A2[j * cols + c]);
            for (int j = 0; j < r; j++) rhs += s * (double)B[i * r + j] * A[j * cols + c];
            double bound = 0x1p-24 * fabs((double)Wr[i * cols + c]) * 1.0001 + (4.0 * r + 4) * 0x1p-53 * mag;
            cr_expect(fabs(lhs - rhs) <= bound, "[%d, %d]: %.3g > %.3g", i, c, fabs(lhs - rhs), bound);
        }
    for (int rs = 0; rs < 2; rs++) {
        double a2 = pissa_lora_alpha_2r(alpha, rs);
        cr_expect(fabs(lora_scale(a2, 2 * r, rs) - lora_scale(alpha, r, rs)) < 1e-14, "rslora %d: scale changed", rs);
    }
    cr_expect(pissa_lora_alpha_2r(alpha, false) == 2 * alpha);
    free(W); free(A0); free(B0); free(Wr); free(A); free(B); free(A2); free(B2);
}

/* ---- (d) randomised on a known spectrum ---- */

/* Q [m, n] row-major with orthonormal columns: modified Gram-Schmidt twice on a Gaussian matrix */

/* W = Q1 diag(s) Q2^T, s_i = 0.7^i, 300 x 200, r = 10. Theory (Halko et al. 2009 sec. 10.4;
 * Gu 2015, "Subspace iteration randomization and singular value problems", thm 4.3): with p
 * subspace iterations the j-th computed value satisfies
 *     0 <= 1 - S_j / s_j  <~  C (s_{r+1} / s_j)^(2(2p+1)),
 * C depending on the Gaussian draw through the smallest singular value of an r x r Gaussian
 * block (heavy-tailed without oversampling, and PEFT calls svd_lowrank with q = r, no
 * oversampling). The stated tolerance per value is 1e-6 (fp32 output: 6e-8) plus that bound with
 * C = 1000 (over the 8 seeds below the largest C seen is 378, logged). It bites where the ratio
 * is small: p = 2: the top 5 within 2e-6, S_9 (j = 8) within 0.8; p = 4: the top 5 at fp32
 * rounding, S_9 within 2.6e-3. Without oversampling the r-th value (ratio 0.7) carries no
 * guarantee (bound > 1): measured up to 27% (p = 2) and 9% (p = 4) low. Computed values never
 * exceed the true ones beyond rounding (they are singular values of a projection of W). And niter 4's summed error is below niter 0's. */
Test(svd, randomised_captures_the_top_singular_values_of_a_known_spectrum) {
    const int rows = 300, cols = 200, r = 10;
    double *q1 = test_random_orthonormal(rows, cols, 21), *q2 = test_random_orthonormal(cols, cols, 22), sv[200];
    for (int i = 0; i < cols; i++) sv[i] = pow(0.7, i);
    float *W = malloc(sizeof(float) * rows * cols), *U = malloc(sizeof(float) * rows * r), *S = malloc(sizeof(float) * r),
          *Vh = malloc(sizeof(float) * r * cols), *U2 = malloc(sizeof(float) * rows * r), *S2 = malloc(sizeof(float) * r),
          *Vh2 = malloc(sizeof(float) * r * cols);
    cr_assert(W && U && S && Vh && U2 && S2 && Vh2);
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) {
            double a = 0;
            for (int l = 0; l < cols; l++) a += q1[i * cols + l] * sv[l] * q2[c * cols + l];
            W[i * cols + c] = (float)a;
        }
    const double C = 1000;
    double cmax = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        double sum[5] = {0}, top[5] = {0}, all[5] = {0};
        for (int p = 0; p <= 4; p += 2) {
            GtError err = {0};
            cr_assert_eq(svd_topr(W, rows, cols, r, p, seed, U, S, Vh, &err), 0, "%s", err.msg);
            for (int j = 0; j < r; j++) {
                double e = (sv[j] - S[j]) / sv[j], bound = pow(sv[r] / sv[j], 2 * (2 * p + 1));
                cr_expect(e >= -1e-6, "seed %d niter %d: S[%d] = %.9g above the true %.9g", (int)seed, p, j, S[j], sv[j]);
                if (p > 0) {
                    cr_expect(e <= 1e-6 + C * bound, "seed %d niter %d: S[%d] relative error %.3g > %.3g", (int)seed, p, j, e,
                              1e-6 + C * bound);
                    if (e > 1e-6) cmax = fmax(cmax, e / bound);
                }
                sum[p] += fabs(e), all[p] = fmax(all[p], fabs(e));
                if (j < r / 2) top[p] = fmax(top[p], fabs(e));
                if (j > 0) cr_expect(S[j] <= S[j - 1], "S not descending");
            }
            cr_expect(orth_err(U, rows, r, 1) < 1e-5 && orth_err(Vh, cols, r, 0) < 1e-5, "niter %d: not orthonormal", p);
            cr_log_info("seed %d niter %d: S rel error top-5 max %.3g, all-10 max %.3g, sum %.3g", (int)seed, p, top[p], all[p], sum[p]);
        }
        cr_expect(top[2] <= 1e-5 && top[4] <= 1e-5, "seed %d: top half %.3g (p=2) %.3g (p=4) > 1e-5", (int)seed, top[2], top[4]);
        cr_expect(sum[4] < sum[0], "seed %d: niter 4 (%.3g) does not beat niter 0 (%.3g)", (int)seed, sum[4], sum[0]);
    }
    cr_log_info("randomised: largest C seen %.3g (tolerance uses %g)", cmax, C);
    /* deterministic from the seed; another seed draws another test matrix */
    GtError err = {0};
    cr_assert_eq(svd_topr(W, rows, cols, r, 1, 9, U, S, Vh, &err), 0, "%s", err.msg);
    cr_assert_eq(svd_topr(W, rows, cols, r, 1, 9, U2, S2, Vh2, &err), 0, "%s", err.msg);
    cr_expect(memcmp(U, U2, sizeof(float) * rows * r) == 0 && memcmp(Vh, Vh2, sizeof(float) * r * cols) == 0, "not deterministic");
    cr_assert_eq(svd_topr(W, rows, cols, r, 1, 10, U2, S2, Vh2, &err), 0, "%s", err.msg);
    cr_expect(memcmp(S, S2, sizeof(float) * r) != 0, "the seed is not used");
    free(q1); free(q2); free(W); free(U); free(S); free(Vh); free(U2); free(S2); free(Vh2);
}

/* ---- errors ---- */

Test(svd, bad_arguments_are_one_line_code_2) {
    float W[12] = {0}, U[12], S[4], Vh[12], A[12], B[12], R[12];
    struct { int rows, cols, r, niter; } bad[] = {{3, 4, 0, -1}, {3, 4, 4, -1}, {3, 4, 2, -2}, {0, 4, 1, -1}, {3, -1, 1, 2}};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        GtError err = {0};
        cr_expect_eq(svd_topr(W, bad[t].rows, bad[t].cols, bad[t].r, bad[t].niter, 0, U, S, Vh, &err), -1);
        cr_expect_eq(err.code, GT_EXIT_BAD_INPUT, "case %zu: code %d (%s)", t, err.code, err.msg);
        cr_expect(err.msg[0] && !strchr(err.msg, '\n'), "case %zu: %s", t, err.msg);
    }
    GtError err = {0};
    W[5] = NAN;
    cr_expect_eq(svd_topr(W, 3, 4, 2, -1, 0, U, S, Vh, &err), -1);
    cr_expect(err.code == GT_EXIT_BAD_INPUT && strstr(err.msg, "W[1, 1]"), "%s", err.msg);
    W[5] = 0;
    err = (GtError){0};
    cr_expect_eq(pissa_init(W, 3, 4, 2, 0.0, -1, 0, A, B, R, &err), -1);
    cr_expect(err.code == GT_EXIT_BAD_INPUT && strstr(err.msg, "scale"), "%s", err.msg);
    err = (GtError){0};
    cr_expect_eq(pissa_init(W, 3, 4, 5, 1.0, -1, 0, A, B, R, &err), -1);
    cr_expect(err.code == GT_EXIT_BAD_INPUT && strstr(err.msg, "rank"), "%s", err.msg);
    /* a zero matrix is legal: S = 0, W_res = 0 */
    err = (GtError){0};
    cr_expect_eq(svd_topr(W, 3, 4, 3, -1, 0, U, S, Vh, &err), 0, "%s", err.msg);
    cr_expect(S[0] == 0 && S[2] == 0);
}

/* ---- (e) torch.linalg.svd ---- */

static void read_f64(const char *path, double *x, size_t n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    cr_assert_eq(fread(x, sizeof(double), n, f), n, "%s: short", path);
    fclose(f);
}

Test(svd, matches_torch_linalg_svd, .timeout = 120) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT not set (run through make test)");
    test_require_refs();
    const int shapes[][2] = {{50, 30}, {30, 50}};
    char dir[256];
    test_scratch_make(dir, sizeof dir, "gt_test_svd");
    for (int t = 0; t < 2; t++) {
        int rows = shapes[t][0], cols = shapes[t][1], k = rows < cols ? rows : cols, r = k;
        float *W = random_matrix(rows, cols, 300 + t), *U = malloc(sizeof(float) * rows * r), *S = malloc(sizeof(float) * r),
              *Vh = malloc(sizeof(float) * r * cols);
        double *Ut = malloc(sizeof(double) * rows * k), *St = malloc(sizeof(double) * k), *Vht = malloc(sizeof(double) * k * cols);
        cr_assert(U && S && Vh && Ut && St && Vht);
        test_write_file(test_join(dir, "w.f32"), W, sizeof(float) * rows * cols);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/torch_svd.py' '%s' %d %d '%s'", root,
                 test_join(dir, "w.f32"), rows, cols, test_join(dir, "out"));
        cr_assert_eq(system(cmd), 0, "%s failed", cmd);
        read_f64(test_join(dir, "out.S"), St, k);
        read_f64(test_join(dir, "out.U"), Ut, (size_t)rows * k);
        read_f64(test_join(dir, "out.Vh"), Vht, (size_t)k * cols);
        GtError err = {0};
        cr_assert_eq(svd_topr(W, rows, cols, r, -1, 0, U, S, Vh, &err), 0, "%s", err.msg);
        expect_matches(U, S, Vh, Ut, St, Vht, rows, cols, r, k); /* |U|, |Vh| up to one sign per pair */
        free(W); free(U); free(S); free(Vh); free(Ut); free(St); free(Vht);
    }
    test_scratch_remove(dir);
}
