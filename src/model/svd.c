/* svd.c - top-r SVD of a fp32 row-major matrix (exact: LAPACK dgesdd; randomised: Halko et al.
 * as torch.svd_lowrank) and PEFT's PiSSA initialisation. See svd.h for the contract.
 *
 * Everything is computed in double: W is copied once to double (8 bytes per entry: 470 MB for
 * Mistral-7B's 14336 x 4096 MLP weights), which keeps the exact path accurate to ~1e-15
 * relative before the final fp32 rounding and costs the randomised path little (its time is
 * 2*niter+2 GEMMs of W against r columns).
 *
 * Layout trick: a row-major W [rows, cols] is, to LAPACK and column-major BLAS, the matrix
 * W^T [cols, rows] with leading dimension cols. The SVD of W^T is V S U^T, so dgesdd's "U" of
 * W^T (column-major cols x k) is exactly Vh [k, cols] row-major, and its "VT" (column-major
 * k x rows) is exactly U [rows, k] row-major: no transposes are needed.
 *
 * LAPACK comes from OpenBLAS (Debian's libopenblas0 exports the whole of LAPACK, already linked
 * through pkg-config openblas). Debian's OpenBLAS dev package ships no LAPACK header, so the
 * three Fortran routines used are declared here (LP64: Fortran INTEGER is int; the hidden
 * character-length argument is passed at the end, as lapack.h's LAPACK_FORTRAN_STRLEN_END). */
#include "svd.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

void dgesdd_(const char *jobz, const int *m, const int *n, double *a, const int *lda, double *s,
             double *u, const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork,
             int *iwork, int *info, size_t jobz_len);
void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
             const int *lwork, int *info);
void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda, const double *tau,
             double *work, const int *lwork, int *info);

/* n doubles, or NULL with err filled (code 1) on overflow or allocation failure */
static double *alloc_d(size_t n, const char *what, GtError *err) {
    size_t bytes;
    if (!gt_mul_size(n ? n : 1, sizeof(double), &bytes)) {
        gt_error(err, GT_EXIT_FAILURE, "svd: %s: size overflow", what);
        return NULL;
    }
    double *p = malloc(bytes);
    if (!p) {
        char b[32];
        gt_error(err, GT_EXIT_FAILURE, "svd: out of memory allocating %s (%s)", what,
                 gt_format_bytes(b, sizeof b, bytes));
    }
    return p;
}

static int lapack_fail(GtError *err, const char *routine, int info) {
    if (info < 0) return gt_error(err, GT_EXIT_FAILURE, "svd: LAPACK %s: argument %d had an illegal value", routine, -info);
    return gt_error(err, GT_EXIT_FAILURE, "svd: LAPACK %s did not converge (info %d)", routine, info);
}

/* A workspace size from a LAPACK query result, or -1 (err filled) when it does not fit an int */
static int lwork_from(double q, GtError *err) {
    if (!(q >= 1.0) || q > (double)INT_MAX)
        return gt_error(err, GT_EXIT_FAILURE, "svd: LAPACK workspace of %.0f entries is too large", q);
    return (int)q;
}

static int check_args(const float *W, int rows, int cols, int r, int niter, GtError *err) {
    if (rows < 1 || cols < 1)
        return gt_error(err, GT_EXIT_BAD_INPUT, "svd: matrix of %d x %d: both dimensions must be >= 1", rows, cols);
    int k = rows < cols ? rows : cols;
    if (r < 1 || r > k)
        return gt_error(err, GT_EXIT_BAD_INPUT, "svd: rank r = %d must be in [1, min(rows, cols) = %d] for a %d x %d matrix",
                        r, k, rows, cols);
    if (niter < -1)
        return gt_error(err, GT_EXIT_BAD_INPUT, "svd: niter = %d: expected -1 (exact) or a number of subspace iterations >= 0", niter);
    size_t n = (size_t)rows * (size_t)cols;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(W[i]))
            return gt_error(err, GT_EXIT_BAD_INPUT, "svd: W[%zu, %zu] is not finite (%g)", i / (size_t)cols,
                            i % (size_t)cols, (double)W[i]);
    return 0;
}

/* W (fp32 row-major) into a fresh double buffer */
static double *copy_to_double(const float *W, int rows, int cols, GtError *err) {
    size_t n = (size_t)rows * (size_t)cols;
    double *a = alloc_d(n, "a double copy of W", err);
    if (!a) return NULL;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (double)W[i];
    return a;
}

/* Exact: the top r of dgesdd's thin SVD. U [rows, r], Vh [r, cols] row-major, double. */
static int svd_exact(const float *W, int rows, int cols, int r, double *U, double *S, double *Vh, GtError *err) {
    int m = cols, n = rows, k = rows < cols ? rows : cols, info = 0, lwork = -1, rc = -1;
    double *a = NULL, *uo = NULL, *vto = NULL, *s = NULL, *work = NULL, wq = 0;
    int *iwork = NULL;
    if (!(a = copy_to_double(W, rows, cols, err))) goto done;
    if (!(uo = alloc_d((size_t)k * (size_t)cols, "the right singular vectors", err))) goto done;
    if (!(vto = alloc_d((size_t)k * (size_t)rows, "the left singular vectors", err))) goto done;
    if (!(s = alloc_d((size_t)k, "the singular values", err))) goto done;
    if (!(iwork = malloc(sizeof(int) * 8 * (size_t)k))) {
        gt_error(err, GT_EXIT_FAILURE, "svd: out of memory allocating the LAPACK integer workspace");
        goto done;
    }
    dgesdd_("S", &m, &n, a, &m, s, uo, &m, vto, &k, &wq, &lwork, iwork, &info, 1);
    if (info != 0) { lapack_fail(err, "dgesdd (workspace query)", info); goto done; }
    if ((lwork = lwork_from(wq, err)) < 0) goto done;
    if (!(work = alloc_d((size_t)lwork, "the LAPACK workspace", err))) goto done;
    dgesdd_("S", &m, &n, a, &m, s, uo, &m, vto, &k, work, &lwork, iwork, &info, 1);
    if (info != 0) { lapack_fail(err, "dgesdd", info); goto done; }
    for (int j = 0; j < r; j++) S[j] = s[j];
    memcpy(Vh, uo, sizeof(double) * (size_t)r * (size_t)cols);
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < r; j++) U[(size_t)i * r + j] = vto[(size_t)i * k + j];
    rc = 0;
done:
    free(a); free(uo); free(vto); free(s); free(work); free(iwork);
    return rc;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n standard normal doubles from seed: splitmix64, Box-Muller (both outputs used) */
static void gaussian_fill(double *x, size_t n, uint64_t seed) {
    uint64_t st = seed;
    const double two_pi = 6.283185307179586476925286766559;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix64(&st) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        double u2 = (double)(splitmix64(&st) >> 11) * 0x1.0p-53;         /* [0, 1) */
        double rad = sqrt(-2.0 * log(u1));
        x[i] = rad * cos(two_pi * u2);
        if (i + 1 < n) x[i + 1] = rad * sin(two_pi * u2);
    }
}

/* X [p, q] column-major (p >= q) <- the Q of its thin QR (torch.linalg.qr(X).Q) */
static int orthonormalise(double *X, int p, int q, double *tau, double *work, int lwork, GtError *err) {
    int info = 0;
    dgeqrf_(&p, &q, X, &p, tau, work, &lwork, &info);
    if (info != 0) return lapack_fail(err, "dgeqrf", info);
    dorgqr_(&p, &q, &q, X, &p, tau, work, &lwork, &info);
    if (info != 0) return lapack_fail(err, "dorgqr", info);
    return 0;
}

/* Largest optimal workspace of dgeqrf/dorgqr over the shapes [p, q] used, or -1 */
static int qr_lwork(int p, int q, GtError *err) {
    double wq = 0, x = 0, tau = 0;
    int info = 0, lwork = -1, best = 1;
    dgeqrf_(&p, &q, &x, &p, &tau, &wq, &lwork, &info);
    if (info != 0) return lapack_fail(err, "dgeqrf (workspace query)", info);
    int l = lwork_from(wq, err);
    if (l < 0) return -1;
    best = l > best ? l : best;
    dorgqr_(&p, &q, &q, &x, &p, &tau, &wq, &lwork, &info);
    if (info != 0) return lapack_fail(err, "dorgqr (workspace query)", info);
    if ((l = lwork_from(wq, err)) < 0) return -1;
    return l > best ? l : best;
}

/* Randomised (torch.svd_lowrank, the q < n branch: the range finder runs on A^T = W^T).
 * In column-major terms a = W^T [n = cols, m = rows]:
 *   G [m, q] Gaussian;  Y = orth(W^T G)                                   [n, q]
 *   niter times:        Z = orth(W Y);  Y = orth(W^T Z)
 *   Bt = W Y [m, q] = U1 diag(S) Vh1 (dgesdd);  U = U1;  V = Y Vh1^T      [n, q]
 * V column-major [n, q] is Vh [q, n] row-major. */
static int svd_random(const float *W, int rows, int cols, int q, int niter, uint64_t seed,
                      double *U, double *S, double *Vh, GtError *err) {
    int m = rows, n = cols, info = 0, rc = -1, lwork = -1, lq, lwork_svd;
    double *a = NULL, *y = NULL, *z = NULL, *u1 = NULL, *vh1 = NULL, *tau = NULL, *work = NULL, wq = 0;
    int *iwork = NULL;
    if (!(a = copy_to_double(W, rows, cols, err))) goto done;
    if (!(y = alloc_d((size_t)n * (size_t)q, "the row-space basis", err))) goto done;
    if (!(z = alloc_d((size_t)m * (size_t)q, "the column-space basis", err))) goto done;
    if (!(u1 = alloc_d((size_t)m * (size_t)q, "the left singular vectors", err))) goto done;
    if (!(vh1 = alloc_d((size_t)q * (size_t)q, "the small right singular vectors", err))) goto done;
    if (!(tau = alloc_d((size_t)q, "the QR reflectors", err))) goto done;
    if (!(iwork = malloc(sizeof(int) * 8 * (size_t)q))) {
        gt_error(err, GT_EXIT_FAILURE, "svd: out of memory allocating the LAPACK integer workspace");
        goto done;
    }
    if ((lq = qr_lwork(n > m ? n : m, q, err)) < 0) goto done;
    dgesdd_("S", &m, &q, z, &m, S, u1, &m, vh1, &q, &wq, &lwork, iwork, &info, 1);
    if (info != 0) { lapack_fail(err, "dgesdd (workspace query)", info); goto done; }
    if ((lwork_svd = lwork_from(wq, err)) < 0) goto done;
    lwork = lq > lwork_svd ? lq : lwork_svd;
    if (!(work = alloc_d((size_t)lwork, "the LAPACK workspace", err))) goto done;

    gaussian_fill(z, (size_t)m * (size_t)q, seed);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, q, m, 1.0, a, n, z, m, 0.0, y, n);
    if (orthonormalise(y, n, q, tau, work, lwork, err)) goto done;
    for (int it = 0; it < niter; it++) {
        cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, q, n, 1.0, a, n, y, n, 0.0, z, m);
        if (orthonormalise(z, m, q, tau, work, lwork, err)) goto done;
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, q, m, 1.0, a, n, z, m, 0.0, y, n);
        if (orthonormalise(y, n, q, tau, work, lwork, err)) goto done;
    }
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, q, n, 1.0, a, n, y, n, 0.0, z, m);
    dgesdd_("S", &m, &q, z, &m, S, u1, &m, vh1, &q, work, &lwork, iwork, &info, 1);
    if (info != 0) { lapack_fail(err, "dgesdd", info); goto done; }
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < m; i++)
        for (int j = 0; j < q; j++) U[(size_t)i * q + j] = u1[i + (size_t)j * m];
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, n, q, q, 1.0, y, n, vh1, q, 0.0, Vh, n);
    rc = 0;
done:
    free(a); free(y); free(z); free(u1); free(vh1); free(tau); free(work); free(iwork);
    return rc;
}

/* The sign convention of svd.h: the largest-magnitude entry of each column of U is positive. */
static void fix_signs(double *U, double *Vh, int rows, int cols, int r) {
    for (int j = 0; j < r; j++) {
        double best = -1.0;
        int sign = 1;
        for (int i = 0; i < rows; i++) {
            double v = U[(size_t)i * r + j];
            if (fabs(v) > best) best = fabs(v), sign = v < 0 ? -1 : 1;
        }
        if (sign > 0) continue;
        for (int i = 0; i < rows; i++) U[(size_t)i * r + j] = -U[(size_t)i * r + j];
        for (int c = 0; c < cols; c++) Vh[(size_t)j * cols + c] = -Vh[(size_t)j * cols + c];
    }
}

/* The double-precision triplets: U [rows, r], S [r], Vh [r, cols] (caller's buffers); the
 * arguments were checked */
static int svd_topr_d(const float *W, int rows, int cols, int r, int niter, uint64_t seed,
                      double *U, double *S, double *Vh, GtError *err) {
    int rc = niter < 0 ? svd_exact(W, rows, cols, r, U, S, Vh, err)
                       : svd_random(W, rows, cols, r, niter, seed, U, S, Vh, err);
    if (rc) return rc;
    fix_signs(U, Vh, rows, cols, r);
    return 0;
}

/* Fresh double buffers for U [rows, r], S [r], Vh [r, cols]; -1 with all freed on failure */
static int alloc_triplets(int rows, int cols, int r, double **U, double **S, double **Vh, GtError *err) {
    *U = alloc_d((size_t)rows * (size_t)r, "U", err);
    *S = *U ? alloc_d((size_t)r, "S", err) : NULL;
    *Vh = *S ? alloc_d((size_t)r * (size_t)cols, "Vh", err) : NULL;
    if (*Vh) return 0;
    free(*U); free(*S);
    *U = *S = NULL;
    return -1;
}

int svd_topr(const float *W, int rows, int cols, int r, int niter, uint64_t seed,
             float *U, float *S, float *Vh, GtError *err) {
    if (check_args(W, rows, cols, r, niter, err)) return -1;
    double *u, *s, *vh;
    if (alloc_triplets(rows, cols, r, &u, &s, &vh, err)) return -1;
    int rc = svd_topr_d(W, rows, cols, r, niter, seed, u, s, vh, err);
    if (rc == 0) {
        size_t nu = (size_t)rows * r, nv = (size_t)r * cols;
        for (size_t i = 0; i < nu; i++) U[i] = (float)u[i];
        for (int j = 0; j < r; j++) S[j] = (float)s[j];
        for (size_t i = 0; i < nv; i++) Vh[i] = (float)vh[i];
    }
    free(u); free(s); free(vh);
    return rc;
}

double lora_scale(double lora_alpha, int r, bool use_rslora) {
    return use_rslora ? lora_alpha / sqrt((double)r) : lora_alpha / (double)r;
}

int pissa_init(const float *W, int rows, int cols, int r, double scale, int niter, uint64_t seed,
               float *A, float *B, float *W_res, GtError *err) {
    if (!(scale > 0.0) || !isfinite(scale))
        return gt_error(err, GT_EXIT_BAD_INPUT, "pissa: the LoRA scale (lora_alpha / r) must be finite and > 0, found %g", scale);
    if (check_args(W, rows, cols, r, niter, err)) return -1;
    double *u, *s, *vh;
    if (alloc_triplets(rows, cols, r, &u, &s, &vh, err)) return -1;
    int rc = svd_topr_d(W, rows, cols, r, niter, seed, u, s, vh, err);
    if (rc) goto done;
    /* PEFT: Sr /= scale; lora_A = diag(sqrt(Sr)) @ Vh[:r]; lora_B = U[:, :r] @ diag(sqrt(Sr)) */
    for (int j = 0; j < r; j++) s[j] = sqrt(s[j] / scale);
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < r; j++)
        for (int c = 0; c < cols; c++) A[(size_t)j * cols + c] = (float)(s[j] * vh[(size_t)j * cols + c]);
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < r; j++) B[(size_t)i * r + j] = (float)(u[(size_t)i * r + j] * s[j]);
    rc = pissa_residual(W, rows, cols, r, scale, A, B, W_res, err);
done:
    free(u); free(s); free(vh);
    return rc;
}

int pissa_residual(const float *W, int rows, int cols, int r, double scale, const float *A, const float *B,
                   float *W_res, GtError *err) {
    /* a double GEMM over blocks of rows, one rounding to fp32 per entry. Memory: A in double plus
     * one block. */
    enum { BLOCK = 256 };
    int nb = rows < BLOCK ? rows : BLOCK, rc = -1;
    double *ad = NULL, *bd = NULL, *tmp = NULL;
    if (!(ad = alloc_d((size_t)r * (size_t)cols, "A in double", err))) goto done;
    if (!(bd = alloc_d((size_t)nb * (size_t)r, "a block of B in double", err))) goto done;
    if (!(tmp = alloc_d((size_t)nb * (size_t)cols, "a block of B @ A", err))) goto done;
    for (size_t i = 0; i < (size_t)r * cols; i++) ad[i] = (double)A[i];
    for (int i0 = 0; i0 < rows; i0 += nb) {
        int h = rows - i0 < nb ? rows - i0 : nb;
        for (size_t i = 0; i < (size_t)h * r; i++) bd[i] = (double)B[(size_t)i0 * r + i];
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h, cols, r, scale, bd, r, ad, cols, 0.0, tmp, cols);
        const float *w = W + (size_t)i0 * cols;
        float *o = W_res + (size_t)i0 * cols;
        for (size_t i = 0; i < (size_t)h * cols; i++) o[i] = (float)((double)w[i] - tmp[i]);
    }
    rc = 0;
done:
    free(ad); free(bd); free(tmp);
    return rc;
}

void pissa_to_lora_2r(const float *A, const float *B, const float *A0, const float *B0,
                      int rows, int cols, int r, float *A2, float *B2) {
    size_t na = (size_t)r * (size_t)cols;
    memcpy(A2, A, sizeof(float) * na);
    memcpy(A2 + na, A0, sizeof(float) * na);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < r; j++) {
            B2[(size_t)i * 2 * r + j] = B[(size_t)i * r + j];
            B2[(size_t)i * 2 * r + r + j] = -B0[(size_t)i * r + j];
        }
}

double pissa_lora_alpha_2r(double lora_alpha, bool use_rslora) {
    return use_rslora ? lora_alpha * sqrt(2.0) : lora_alpha * 2.0;
}

uint64_t pissa_host_bytes(int rows, int cols, int r, int niter) {
    const uint64_t m = (uint64_t)rows, n = (uint64_t)cols, q = (uint64_t)r, k = m < n ? m : n, mx = m > n ? m : n;
    uint64_t d = m * n; /* the double copy of W */
    if (niter < 0) /* dgesdd's outputs and its documented workspace for JOBZ = 'S' */
        d += k * (m + n) + k + 4 * k * k + 6 * k + mx;
    else /* the bases, the small SVD, and the larger of the QR (blocked: 64 columns) and dgesdd workspaces */
        d += q * n + 2 * q * m + q * q + q + (64 * mx > 4 * q * q + 6 * q + m ? 64 * mx : 4 * q * q + 6 * q + m);
    d += q * (m + n) + q;                 /* U, S, Vh */
    const uint64_t residual = q * n + 256 * q + 256 * n; /* pissa_residual, after the SVD's are freed */
    return 8 * (d > residual ? d : residual) + 8 * (uint64_t)k * 4;
}
