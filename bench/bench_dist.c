/* bench_dist.c - the gradient all-reduce of data parallel on the CPU (src/run/dist.c), fp32 against
 * ddp_grad_dtype bf16, timed alone (make bench runs it under mpirun -np 2; not a test):
 *
 *   bench_dist N_VALUES BUCKETS REPS
 *
 * fp32: dist_allreduce_f32_start of each bucket, then dist_wait_all. bf16: what dist_comm.c does on
 * the CPU backend: each bucket converted to bf16 (to nearest even), dist_allreduce_bf16_start, then
 * dist_wait_all and the sums widened back. The two alternate REPS times after a barrier; rank 0
 * prints the median and the fastest of each. Values: small multiples of 1e-3 (the sum's values do
 * not change its time). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "dist.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const GtError *e) {
    fprintf(stderr, "bench_dist: %s\n", e->msg);
    exit(1);
}

int main(int argc, char **argv) {
    Dist *d = NULL;
    GtError e = {0};
    if (dist_init(&d, &argc, &argv, 600, &e)) die(&e);
    const size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 124439808;
    const size_t nb = argc > 2 ? strtoull(argv[2], NULL, 10) : 12;
    const int reps = argc > 3 ? atoi(argv[3]) : 7;
    if (n == 0 || nb == 0 || nb > n || reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_dist: usage: bench_dist N_VALUES BUCKETS REPS (N >= BUCKETS >= 1, 1 <= REPS <= 1000)\n");
        return 2;
    }
    float *g = gt_xmalloc(n * sizeof *g);
    uint16_t *h = gt_xmalloc(n * sizeof *h);
    double *t = gt_xcalloc(2 * (size_t)reps, sizeof *t);
    for (size_t i = 0; i < n; i++) g[i] = (float)(i % 1000) * 1e-3f;
    for (int rep = 0; rep < reps; rep++)
        for (int bf = 0; bf < 2; bf++) {
            if (dist_barrier(d, "bench_dist", &e)) die(&e);
            const double t0 = gt_now_seconds();
            for (size_t b = 0; b < nb; b++) {
                const size_t lo = b * (n / nb), hi = b == nb - 1 ? n : lo + n / nb;
                if (!bf) {
                    if (dist_allreduce_f32_start(d, g + lo, hi - lo, &e)) die(&e);
                    continue;
                }
                for (size_t i = lo; i < hi; i++) h[i] = gt_f32_to_bf16(g[i]);
                if (dist_allreduce_bf16_start(d, h + lo, hi - lo, &e) || dist_poll(d, &e)) die(&e);
            }
            if (dist_wait_all(d, &e)) die(&e);
            if (bf)
                for (size_t i = 0; i < n; i++) g[i] = gt_bf16_to_f32(h[i]);
            t[(size_t)bf * reps + rep] = gt_now_seconds() - t0;
        }
    for (int bf = 0; bf < 2; bf++) {
        double *tb = t + (size_t)bf * reps;
        qsort(tb, (size_t)reps, sizeof *tb, cmp_double);
        if (dist_rank(d) == 0)
            printf("bench_dist: %d ranks, %zu values in %zu buckets, %s: median %.3f s, fastest %.3f s (%d runs)\n",
                   dist_world(d), n, nb, bf ? "bf16 (convert, sum, widen)" : "fp32", tb[reps / 2], tb[0], reps);
    }
    free(g);
    free(h);
    free(t);
    dist_finalize(d);
    return 0;
}
