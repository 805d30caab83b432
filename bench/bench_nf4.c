/* bench_nf4.c - the 4-bit NF4 base (issue 27) measured (make bench; not a test).
 * usage: bench_nf4 error          the quantization error table of the PiSSA paper (tests/qerr.h):
 *                                 U diag(k^-p) V^T, p 0.5 and 1, 512x512 and 1024x4096, r 16 .. 128,
 *                                 exact SVD, lora_alpha 16, blocksize 64, double quantization
 *        bench_nf4 dequant ROWS COLS [reps]
 *                                 nf4_dequantize_bf16 (host, one thread) on one ROWS x COLS unit
 *                                 against this machine's memory-bandwidth floor: a plain memcpy of
 *                                 the same bytes in the same run (bytes read + written / memcpy's
 *                                 bytes per second); then the CPU backend's dequant_nf4 (OpenMP)
 *                                 against a memcpy split over as many threads
 * Prints one line per row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backend.h"
#include "blas_setup.h"
#include "nf4.h"
#include "qerr.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int error_table(void) {
    const int shapes[][2] = {{512, 512}, {1024, 4096}}, ranks[] = {16, 32, 64, 128};
    const double powers[] = {0.5, 1.0};
    printf("%-10s %-8s %4s %9s %10s %10s %7s\n", "shape", "s_k", "r", "||W||_F", "QLoRA", "QPiSSA", "less");
    for (int sh = 0; sh < 2; sh++)
        for (int p = 0; p < 2; p++) {
            int rows = shapes[sh][0], cols = shapes[sh][1];
            GtError err = {0};
            float *W = qerr_spectrum_matrix(rows, cols, powers[p], 1000 + 10 * sh + p, &err);
            if (!W) {
                fprintf(stderr, "bench_nf4: %s\n", err.msg);
                return 1;
            }
            for (int k = 0; k < 4; k++) {
                QerrRow q;
                if (qerr_measure(W, rows, cols, ranks[k], 16, -1, 64, true, &q, &err)) {
                    fprintf(stderr, "bench_nf4: %s\n", err.msg);
                    free(W);
                    return 1;
                }
                char shape[24], sk[16];
                snprintf(shape, sizeof shape, "%dx%d", rows, cols);
                snprintf(sk, sizeof sk, "k^-%.1f", powers[p]);
                printf("%-10s %-8s %4d %9.4f %10.5f %10.5f %6.1f%%\n", shape, sk, ranks[k], q.w, q.qlora, q.qpissa,
                       100 * (1 - q.qpissa / q.qlora));
                fflush(stdout);
            }
            free(W);
        }
    return 0;
}

static int dequant(int rows, int cols, int reps) {
    int64_t n = (int64_t)rows * cols;
    Nf4Format f = {.numel = n, .blocksize = 64, .nested = true};
    uint64_t ub = nf4_bytes(&f);
    size_t ob = sizeof(uint16_t) * (size_t)n, cb = (size_t)(ub + ob); /* bytes the dequantize moves */
    float *src = malloc(sizeof(float) * (size_t)n);
    void *unit = aligned_alloc(64, (ub + 63) / 64 * 64);
    uint16_t *dst = aligned_alloc(64, (ob + 63) / 64 * 64);
    char *ca = aligned_alloc(64, (cb + 63) / 64 * 64), *cbuf = aligned_alloc(64, (cb + 63) / 64 * 64);
    double *td = malloc(sizeof(double) * reps), *tc = malloc(sizeof(double) * reps);
    if (!src || !unit || !dst || !ca || !cbuf || !td || !tc) {
        fprintf(stderr, "bench_nf4: out of memory\n");
        return 1;
    }
    uint64_t x = 12345;
    for (int64_t i = 0; i < n; i++) { /* uniform in [-1, 1) */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (float)((double)(x >> 11) * 0x1p-52 - 1.0);
    }
    nf4_quantize(&f, src, unit);
    memset(ca, 1, cb), memset(cbuf, 2, cb), memset(dst, 0, ob);
    for (int r = 0; r < reps; r++) { /* interleaved, so both see the same machine */
        double t0 = gt_now_seconds();
        nf4_dequantize_bf16(&f, unit, 0, n, dst);
        td[r] = gt_now_seconds() - t0;
        t0 = gt_now_seconds();
        memcpy(cbuf, ca, cb / 2); /* reads cb/2, writes cb/2: cb bytes moved, as the dequantize */
        tc[r] = gt_now_seconds() - t0;
    }
    qsort(td, reps, sizeof td[0], cmp_double), qsort(tc, reps, sizeof tc[0], cmp_double);
    double bw = (double)(cb / 2 * 2) / tc[reps / 2];
    printf("nf4_dequantize_bf16 %dx%d (blocksize 64, nested), 1 thread: %.2f ms, %.2f GB/s moved (%.1f MB in + %.1f MB "
           "out); memcpy of the same bytes %.2f ms (%.2f GB/s): %.2fx the floor\n",
           rows, cols, td[reps / 2] * 1e3, cb / td[reps / 2] / 1e9, ub / 1e6, ob / 1e6, tc[reps / 2] * 1e3, bw / 1e9,
           td[reps / 2] / tc[reps / 2]);
    /* the CPU backend's op (OpenMP over whole absmax blocks) against a memcpy split over as many threads */
    GtError err = {0};
    Backend *be = NULL;
    if (backend_open(&be, DEVICE_CPU, 0, 0, &err)) {
        fprintf(stderr, "bench_nf4: %s\n", err.msg);
        return 1;
    }
    const int nt = omp_get_max_threads();
    const size_t half = cb / 2, chunk = (half + (size_t)nt - 1) / (size_t)nt;
    for (int r = 0; r < reps; r++) {
        double t0 = gt_now_seconds();
        be->ops->dequant_nf4(be, dst, GT_BF16, unit, &f);
        td[r] = gt_now_seconds() - t0;
        t0 = gt_now_seconds();
#pragma omp parallel for num_threads(nt)
        for (int k = 0; k < nt; k++) {
            const size_t a = (size_t)k * chunk, len = a >= half ? 0 : half - a < chunk ? half - a : chunk;
            if (len) memcpy(cbuf + a, ca + a, len);
        }
        tc[r] = gt_now_seconds() - t0;
    }
    qsort(td, reps, sizeof td[0], cmp_double), qsort(tc, reps, sizeof tc[0], cmp_double);
    printf("cpu backend dequant_nf4 %dx%d to bf16, %d threads: %.2f ms, %.2f GB/s moved; memcpy of the same bytes on %d "
           "threads %.2f ms (%.2f GB/s): %.2fx the floor\n",
           rows, cols, nt, td[reps / 2] * 1e3, cb / td[reps / 2] / 1e9, nt, tc[reps / 2] * 1e3,
           (double)(half * 2) / tc[reps / 2] / 1e9, td[reps / 2] / tc[reps / 2]);
    backend_close(be);
    free(src), free(unit), free(dst), free(ca), free(cbuf), free(td), free(tc);
    return 0;
}

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "error") == 0) return error_table();
    if (argc >= 4 && strcmp(argv[1], "dequant") == 0) {
        int rows = atoi(argv[2]), cols = atoi(argv[3]), reps = argc > 4 ? atoi(argv[4]) : 9;
        if (rows < 1 || cols < 1 || reps < 1) {
            fprintf(stderr, "bench_nf4: bad shape or reps\n");
            return 2;
        }
        return dequant(rows, cols, reps);
    }
    fprintf(stderr, "usage: bench_nf4 error | bench_nf4 dequant ROWS COLS [reps]\n");
    return 2;
}
