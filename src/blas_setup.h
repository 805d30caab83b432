/* blas_setup.h - make OpenBLAS use its fast kernel on any x86-64 machine.
 *
 * Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) picks its kernel once, when the library loads. On x86
 * processors newer than it knows (recent AMD EPYC / Intel) it falls back to a slow generic kernel
 * ("Prescott", ...), several times slower at sgemm. The choice can only be overridden through the
 * OPENBLAS_CORETYPE environment variable, read at load time, so blas_select_fast_kernel() sets it
 * and re-executes the program once (marker GTRAIN_BLAS_REEXEC=1). */
#ifndef GT_BLAS_SETUP_H
#define GT_BLAS_SETUP_H

/* Call first thing in main(). Returns normally when nothing needs doing, when the variable is
 * already set by the user, or when the re-exec fails (then the slow kernel stays in use). */
void blas_select_fast_kernel(int argc, char **argv);

/* The OpenBLAS core (kernel) in use, e.g. "Haswell", "Zen", "SkylakeX"; for logs. */
const char *blas_core_name(void);

/* The OPENBLAS_CORETYPE that blas_select_fast_kernel would set for a library that reports
 * `core` on this CPU, or NULL when the core in use is already a good one (exposed for tests). */
const char *blas_better_coretype(const char *core);

#endif
