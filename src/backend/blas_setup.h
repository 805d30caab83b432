/* blas_setup.h - make OpenBLAS use its fast kernel on any x86-64 machine.
 *
 * Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) picks its kernel once, when the library loads. On x86
 * processors newer than it knows (recent AMD EPYC / Intel) it falls back to a slow generic kernel
 * ("Prescott", ...), several times slower at sgemm. The choice can only be overridden through the
 * OPENBLAS_CORETYPE environment variable, read at load time, so cpu_runtime_setup() sets it
 * and re-executes the program once (marker GTRAIN_BLAS_REEXEC). On an AVX-512 processor it picks
 * SkylakeX's kernel (AVX-512), checked against double precision in the new process before it is
 * used; elsewhere Haswell's (AVX2 + FMA). */
#ifndef GT_BLAS_SETUP_H
#define GT_BLAS_SETUP_H

#include <cblas.h>
#include <stdbool.h>

/* Call first thing in main(). Sets, for this process, what OpenBLAS and libgomp only read when
 * they load: OPENBLAS_CORETYPE when the library fell back to a slow kernel, and a short OpenMP
 * spin (GOMP_SPINCOUNT) unless the user set a wait policy; then re-executes once. Returns
 * normally when nothing needs doing or when the re-exec fails. */
void cpu_runtime_setup(int argc, char **argv);

/* The OpenBLAS core (kernel) in use, e.g. "Haswell", "Zen", "SkylakeX"; for logs. */
const char *blas_core_name(void);

/* The OPENBLAS_CORETYPE that cpu_runtime_setup would set for a library that reports
 * `core` on this CPU, or NULL when the core in use is already a good one (exposed for tests). */
const char *blas_better_coretype(const char *core);

/* `sgemm` (cblas_sgemm's signature; cblas_sgemm itself for the kernel in use) in all four
 * transpose combinations on a small and a blocked shape, against double precision: false when it
 * is wrong. cpu_runtime_setup runs it once after choosing an AVX-512 kernel for a processor the
 * library did not recognise, and falls back to Haswell's. */
typedef void (*BlasSgemmFn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint,
                            blasint, float, const float *, blasint, const float *, blasint, float, float *,
                            blasint);
bool blas_sgemm_check(BlasSgemmFn sgemm);

#endif
