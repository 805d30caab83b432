/* blas_setup.c - see blas_setup.h. */
#include "blas_setup.h"

#include <cblas.h>
#include <stdbool.h>
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
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return NULL;
    /* Haswell's kernels (AVX2 + FMA) run on every AVX2/FMA x86-64 processor. SkylakeX (AVX-512)
     * is deliberately not chosen: older OpenBLAS builds are reported to compute wrong results
     * with it on some processors, and its sgemm gain is small. */
    return "Haswell";
#else
    (void)core;
    return NULL;
#endif
}

void blas_select_fast_kernel(int argc, char **argv) {
    (void)argc;
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (user && *user) return; /* the user (or our own re-exec) chose */
    const char *marker = getenv("GTRAIN_BLAS_REEXEC");
    if (marker && *marker) return; /* re-executed once already: never loop */
    const char *want = blas_better_coretype(blas_core_name());
    if (!want || !argv || !argv[0]) return;
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    if (setenv("GTRAIN_BLAS_REEXEC", "1", 1) != 0) {
        unsetenv("OPENBLAS_CORETYPE");
        return;
    }
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernel; leave the environment as it was */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("GTRAIN_BLAS_REEXEC");
}
