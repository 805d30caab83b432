/* bench_svd.c - time svd_topr, exact and randomised, on a Gaussian matrix (make bench; not a test).
 * usage: bench_svd ROWS COLS R [niter...]   (niter -1: exact; default: -1 4)
 * Prints one line per niter: shape, r, seconds, S[0] and S[r-1]. */
#include <stdio.h>
#include <stdlib.h>

#include "blas_setup.h"
#include "svd.h"

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    if (argc < 4) {
        fprintf(stderr, "usage: bench_svd ROWS COLS R [niter...]\n");
        return 2;
    }
    int rows = atoi(argv[1]), cols = atoi(argv[2]), r = atoi(argv[3]);
    if (rows < 1 || cols < 1 || r < 1) {
        fprintf(stderr, "bench_svd: bad shape\n");
        return 2;
    }
    size_t n = (size_t)rows * (size_t)cols;
    float *W = malloc(sizeof(float) * n), *U = malloc(sizeof(float) * (size_t)rows * r), *S = malloc(sizeof(float) * r),
          *Vh = malloc(sizeof(float) * (size_t)r * cols);
    if (!W || !U || !S || !Vh) {
        fprintf(stderr, "bench_svd: out of memory\n");
        return 1;
    }
    uint64_t x = 12345; /* uniform in [-1, 1): xorshift64 */
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        W[i] = (float)((double)(x >> 11) * 0x1p-52 - 1.0);
    }
    int def[] = {-1, 4}, cnt = argc > 4 ? argc - 4 : 2;
    for (int t = 0; t < cnt; t++) {
        int niter = argc > 4 ? atoi(argv[4 + t]) : def[t];
        GtError err = {0};
        double t0 = gt_now_seconds();
        if (svd_topr(W, rows, cols, r, niter, 1, U, S, Vh, &err)) {
            fprintf(stderr, "bench_svd: %s\n", err.msg);
            return err.code;
        }
        double dt = gt_now_seconds() - t0;
        char what[32];
        if (niter < 0) snprintf(what, sizeof what, "exact (dgesdd)");
        else snprintf(what, sizeof what, "randomised niter %d", niter);
        printf("svd_topr %dx%d r=%d %-20s %8.2f s   S[0] %.4f S[r-1] %.4f\n", rows, cols, r, what, dt, S[0], S[r - 1]);
        fflush(stdout);
    }
    free(W); free(U); free(S); free(Vh);
    return 0;
}
