/* blas_setup.c - see blas_setup.h. */
#include "blas_setup.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char *blas_core_name(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

/* Cores whose sgemm kernels use AVX2/FMA or better: nothing to gain by switching. */
static bool core_is_fast(const char *core) {
    static const char *const fast[] = {"Haswell",     "Zen",       "SkylakeX",
                                       "Cooperlake",  "SapphireRapids"};
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++)
        if (strcasecmp(core, fast[i]) == 0) return true;
    return false;
}

const char *blas_better_coretype(const char *core) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!core || core_is_fast(core)) return NULL;
    __builtin_cpu_init();
    /* libgcc's checks include the OS's consent (XCR0) to save the wider registers. */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX"; /* 3x Haswell's sgemm on a 2-core Emerald Rapids (make bench) */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
#else
    (void)core;
    return NULL;
#endif
}

/* sgemm in all four transpose combinations, on a shape that takes OpenBLAS's small-matrix path
 * and one that takes its blocked kernel. A kernel we chose for a processor its library did not
 * recognise must earn its place before the run trusts it; the check must cost little (it runs
 * at every start on such a machine), so it is Freivalds': for random sign vectors x, C x against
 * A (B x) in double, O(mk + kn + mn) instead of O(mnk). The bound is the rigorous one for any
 * summation order, |C x - A B x| <= 2 k u |A| |B| |x| (u = 2^-24): a kernel that computes garbage
 * anywhere fails, rounding never does. */
bool blas_sgemm_check(BlasSgemmFn sgemm) {
    static const int shapes[2][3] = {{7, 5, 9}, {97, 83, 131}};
    enum { MAXD = 131 };
    static const double u = 1.0 / 16777216.0;
    float a[97 * 131], b[131 * 83], c[97 * 83];
    uint32_t x = 12345u;
    for (int s = 0; s < 2; s++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (int i = 0; i < m * k; i++) { x = x * 1664525u + 1013904223u; a[i] = (float)(x >> 8) / 16777216.0f - 0.5f; }
        for (int i = 0; i < k * n; i++) { x = x * 1664525u + 1013904223u; b[i] = (float)(x >> 8) / 16777216.0f - 0.5f; }
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                /* the same data read as op(A) m x k and op(B) k x n, row-major */
                const int lda = ta ? m : k, ldb = tb ? k : n;
                sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                      a, lda, b, ldb, 0.0f, c, n);
                for (int v = 0; v < 2; v++) {
                    double xs[MAXD], bx[MAXD], babs[MAXD];
                    for (int j = 0; j < n; j++) { x = x * 1664525u + 1013904223u; xs[j] = (x >> 31) ? 1.0 : -1.0; }
                    for (int p = 0; p < k; p++) {
                        double acc = 0, mag = 0;
                        for (int j = 0; j < n; j++) {
                            double bv = tb ? b[j * k + p] : b[p * n + j];
                            acc += bv * xs[j];
                            mag += fabs(bv);
                        }
                        bx[p] = acc, babs[p] = mag;
                    }
                    for (int i = 0; i < m; i++) {
                        double want = 0, bound = 0, got = 0;
                        for (int p = 0; p < k; p++) {
                            double av = ta ? a[p * m + i] : a[i * k + p];
                            want += av * bx[p];
                            bound += fabs(av) * babs[p];
                        }
                        for (int j = 0; j < n; j++) got += (double)c[i * n + j] * xs[j];
                        if (!(fabs(got - want) <= 2.0 * k * u * bound + 1e-30)) return false;
                    }
                }
            }
    }
    return true;
}

void cpu_runtime_setup(int argc, char **argv) {
    (void)argc;
    const char *marker = getenv("GTRAIN_BLAS_REEXEC");
    if (!argv || !argv[0]) return;
    if (marker && *marker) { /* re-executed once already: check a kernel we chose, never loop */
        if (strcmp(marker, "check") != 0) return;
        if (blas_sgemm_check(cblas_sgemm)) { setenv("GTRAIN_BLAS_REEXEC", "1", 1); return; }
        fprintf(stderr, "warning: OpenBLAS's %s kernel gave wrong sgemm results on this processor; "
                        "using Haswell's (set OPENBLAS_CORETYPE to choose)\n", blas_core_name());
        if (setenv("OPENBLAS_CORETYPE", "Haswell", 1) != 0 || setenv("GTRAIN_BLAS_REEXEC", "1", 1) != 0) return;
        fflush(NULL);
        execv("/proc/self/exe", argv);
        return; /* exec failed: carry on, warned */
    }
    bool reexec = false;
    const char *user = getenv("OPENBLAS_CORETYPE");
    const char *want = (user && *user) ? NULL : blas_better_coretype(blas_core_name());
    if (want && setenv("OPENBLAS_CORETYPE", want, 1) == 0) reexec = true;
    /* libgomp spins about 300k iterations at every barrier before sleeping. When other processes
     * share the cores (another job, CI running tests in parallel), a descheduled thread makes its
     * partners spin through whole time slices: one step of the demo model took 2600 ms instead of
     * 273 ms with three processes on two cores. A short spin keeps barriers quick when the cores
     * are ours and sane when they are shared. The user's own setting wins. */
    if (!getenv("GOMP_SPINCOUNT") && !getenv("OMP_WAIT_POLICY") && setenv("GOMP_SPINCOUNT", "1000", 1) == 0)
        reexec = true;
    /* An AVX-512 kernel is checked once in the new process before it is trusted */
    const char *next = (want && strcmp(want, "Haswell") != 0) ? "check" : "1";
    if (!reexec || setenv("GTRAIN_BLAS_REEXEC", next, 1) != 0) return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on as we are (the settings only take effect at load time) */
    if (want) unsetenv("OPENBLAS_CORETYPE");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("GTRAIN_BLAS_REEXEC");
}
