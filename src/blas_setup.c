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

void cpu_runtime_setup(int argc, char **argv) {
    (void)argc;
    const char *marker = getenv("GTRAIN_BLAS_REEXEC");
    if ((marker && *marker) || !argv || !argv[0]) return; /* re-executed once already: never loop */
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
    if (!reexec || setenv("GTRAIN_BLAS_REEXEC", "1", 1) != 0) return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on as we are (the settings only take effect at load time) */
    if (want) unsetenv("OPENBLAS_CORETYPE");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("GTRAIN_BLAS_REEXEC");
}
