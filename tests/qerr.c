/* qerr.c - QPiSSA's against QLoRA's quantization error on one matrix (qerr.h). */
#include "qerr.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "svd.h"

void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
             const int *lwork, int *info);
void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda, const double *tau,
             double *work, const int *lwork, int *info);

static int oom(GtError *err, const char *what) {
    gt_error(err, 1, "qerr: out of memory (%s)", what);
    return -1;
}

/* splitmix64 + Box-Muller: a standard normal deviate */
static double normal(uint64_t *st) {
    uint64_t z[2];
    for (int i = 0; i < 2; i++) {
        uint64_t x = (*st += 0x9e3779b97f4a7c15ull);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        z[i] = x ^ (x >> 31);
    }
    double u1 = ((double)(z[0] >> 11) + 1.0) * 0x1p-53, u2 = (double)(z[1] >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Q [m, n] column-major with orthonormal columns (m >= n), from a Gaussian matrix */
static double *orthonormal(int m, int n, uint64_t seed, GtError *err) {
    double *q = malloc(sizeof(double) * (size_t)m * n), *tau = malloc(sizeof(double) * n), wq = 0, *work = NULL;
    int info = 0, lwork = -1;
    if (!q || !tau) goto fail;
    uint64_t st = seed;
    for (size_t i = 0; i < (size_t)m * n; i++) q[i] = normal(&st);
    dgeqrf_(&m, &n, q, &m, tau, &wq, &lwork, &info);
    lwork = (int)wq + 1;
    if (info == 0 && (work = malloc(sizeof(double) * lwork)) == NULL) goto fail;
    if (info == 0) dgeqrf_(&m, &n, q, &m, tau, work, &lwork, &info);
    if (info == 0) dorgqr_(&m, &n, &n, q, &m, tau, work, &lwork, &info);
    free(work), free(tau);
    if (info != 0) {
        free(q);
        gt_error(err, 1, "qerr: LAPACK QR failed (info %d)", info);
        return NULL;
    }
    return q;
fail:
    free(q), free(tau), free(work);
    oom(err, "orthonormal factor");
    return NULL;
}

float *qerr_spectrum_matrix(int rows, int cols, double power, uint64_t seed, GtError *err) {
    int k = rows < cols ? rows : cols;
    double *q1 = orthonormal(rows, k, seed, err), *q2 = q1 ? orthonormal(cols, k, seed + 1, err) : NULL;
    double *w = q2 ? malloc(sizeof(double) * (size_t)rows * cols) : NULL;
    float *out = w ? malloc(sizeof(float) * (size_t)rows * cols) : NULL;
    if (!out) {
        if (q2 && !out) oom(err, "W");
        free(q1), free(q2), free(w);
        return NULL;
    }
    for (int j = 0; j < k; j++) { /* q1[:, j] *= sv_j */
        double sv = pow(j + 1.0, -power);
        for (int i = 0; i < rows; i++) q1[(size_t)j * rows + i] *= sv;
    }
    /* w (column-major [rows, cols]) = q1 q2^T; out row-major */
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, rows, cols, k, 1.0, q1, rows, q2, cols, 0.0, w, rows);
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) out[(size_t)i * cols + c] = (float)w[(size_t)c * rows + i];
    free(q1), free(q2), free(w);
    return out;
}

/* dst = deq(nf4(src)) for n values in one unit */
static int roundtrip(const float *src, int64_t n, int blocksize, bool nested, float *dst, GtError *err) {
    Nf4Format f = {.numel = n, .blocksize = blocksize, .nested = nested};
    char why[160];
    if (nf4_format_check(&f, why, sizeof why)) {
        gt_error(err, 2, "qerr: %s", why);
        return -1;
    }
    uint64_t bytes = nf4_bytes(&f);
    void *unit = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!unit) return oom(err, "NF4 unit");
    nf4_quantize(&f, src, unit);
    nf4_dequantize_f32(&f, unit, 0, n, dst);
    free(unit);
    return 0;
}

int qerr_measure(const float *W, int rows, int cols, int r, double alpha, int niter, int blocksize, bool nested,
                 QerrRow *out, GtError *err) {
    size_t n = (size_t)rows * cols;
    double s = lora_scale(alpha, r, false);
    float *A = malloc(sizeof(float) * (size_t)r * cols), *B = malloc(sizeof(float) * (size_t)rows * r),
          *res = malloc(sizeof(float) * n), *dq = malloc(sizeof(float) * n);
    double *row = malloc(sizeof(double) * cols);
    int rc = -1;
    if (!A || !B || !res || !dq || !row) {
        oom(err, "A, B, residual");
        goto done;
    }
    double w2 = 0, ql2 = 0, qp2 = 0, ex2 = 0;
    if (roundtrip(W, (int64_t)n, blocksize, nested, dq, err)) goto done;
    for (size_t e = 0; e < n; e++) {
        double d = (double)W[e] - dq[e];
        w2 += (double)W[e] * W[e], ql2 += d * d;
    }
    if (pissa_init(W, rows, cols, r, s, niter, 1, A, B, res, err)) goto done;
    if (roundtrip(res, (int64_t)n, blocksize, nested, dq, err)) goto done;
    for (int i = 0; i < rows; i++) {
        for (int c = 0; c < cols; c++) row[c] = 0;
        for (int j = 0; j < r; j++) { /* row = s B[i, :] A, naive, in double */
            double b = s * (double)B[(size_t)i * r + j];
            const float *a = A + (size_t)j * cols;
            for (int c = 0; c < cols; c++) row[c] += b * (double)a[c];
        }
        for (int c = 0; c < cols; c++) {
            size_t e = (size_t)i * cols + c;
            double dp = (double)W[e] - ((double)dq[e] + row[c]), dx = (double)W[e] - ((double)res[e] + row[c]);
            qp2 += dp * dp, ex2 += dx * dx;
        }
    }
    *out = (QerrRow){.w = sqrt(w2), .qlora = sqrt(ql2), .qpissa = sqrt(qp2), .exact = sqrt(ex2)};
    rc = 0;
done:
    free(A), free(B), free(res), free(dq), free(row);
    return rc;
}
