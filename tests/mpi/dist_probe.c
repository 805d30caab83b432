/* dist_probe - exercises src/run/dist.c under a real launcher, independently of the trainer.
 * Built as build/dist_probe (src/run/dist.c + src/common.c); tests/test_dist.c runs it through
 * `mpirun --allow-run-as-root --oversubscribe -np 2`.
 *
 *   dist_probe collectives              every collective, checked against closed-form sums; exit 0
 *   dist_probe world1                   no launcher: world 1, transport "none", no MPI_Init, no-ops
 *   dist_probe bf16                     2 ranks: the bf16 all-reduce and reduce-scatter (ddp_grad_dtype
 *                                       bf16) bit for bit against sums taken in double of the values
 *                                       rounded to bf16 in double (frexp/nearbyint, not the code under
 *                                       test), the sums rounded so too
 *   dist_probe timeout TIMEOUT SLEEP    rank 1 sleeps SLEEP s before an all-reduce; rank 0 must time
 *                                       out after TIMEOUT s and abort the job
 *   dist_probe kill                     rank 1 raises SIGKILL while rank 0 waits in an all-reduce
 *                                       (timeout 120 s): the launcher must end the job long before
 *   dist_probe fail                     rank 1 fails (dist_fail, code 2) while rank 0 waits
 *
 * Values are small integers (or halves) so every float sum is exact and the expected result is a
 * closed form: sum over r of (r + 1) * c = c * W (W + 1) / 2. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist.h"

#ifdef GT_HAVE_MPI
#include <mpi.h>
#endif

typedef struct {
    int checks, failures, rank;
} Tally;

static void check(Tally *t, bool ok, const char *what, long index, double got, double want) {
    t->checks++;
    if (ok) return;
    if (t->failures++ < 10)
        fprintf(stderr, "dist_probe: rank %d: %s[%ld]: got %.9g, expected %.9g\n", t->rank, what, index, got, want);
}

/* the probe's exit status and closing line for a mode's checks (label: "" or "bf16: ") */
static int report(const Tally *t, int world, const char *label) {
    if (t->failures) {
        fprintf(stderr, "dist_probe: rank %d of %d: %d of %d checks FAILED\n", t->rank, world, t->failures, t->checks);
        return 1;
    }
    printf("dist_probe: rank %d of %d: %sall %d checks passed\n", t->rank, world, label, t->checks);
    return 0;
}

static void die(const GtError *e) {
    fprintf(stderr, "dist_probe: %s\n", e->msg);
    exit(1);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* c(i): a small exact value per index */
static float coef(size_t i) { return (float)(i % 97) * 0.5f - 12.0f; }

static int run_collectives(Dist *d) {
    GtError e = {0};
    const int R = dist_rank(d), W = dist_world(d);
    const double tri = W * (W + 1) / 2.0; /* sum over r of (r + 1) */
    Tally t = {0, 0, R};
    check(&t, W >= 2, "world", 0, W, 2);
    check(&t, strcmp(dist_transport(d), W > 1 ? "mpi" : "none") == 0, "transport", 0, 0, 0);
    check(&t, dist_local_rank(d) >= 0 && dist_local_rank(d) < W, "local_rank", 0, dist_local_rank(d), R);

    /* blocking f32 all-reduce, a size that is not a multiple of anything in particular */
    const size_t n = 100003;
    float *a = gt_xmalloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = (float)(R + 1) * coef(i);
    if (dist_allreduce_f32(d, a, n, &e)) die(&e);
    for (size_t i = 0; i < n; i++) check(&t, a[i] == (float)(tri * coef(i)), "allreduce_f32", (long)i, a[i], tri * coef(i));
    if (dist_allreduce_f32(d, a, 0, &e)) die(&e); /* n = 0 is a no-op */

    /* started all-reduces: more than the pending list holds (exercises the full-list wait), with
     * work in between, dist_poll, then dist_wait_all */
    enum { NB = 150, BL = 257 };
    float *b = gt_xmalloc((size_t)NB * BL * sizeof *b);
    for (size_t i = 0; i < (size_t)NB * BL; i++) b[i] = (float)(R + 1) * coef(i + 7);
    double busy = 0;
    for (int k = 0; k < NB; k++) {
        if (dist_allreduce_f32_start(d, b + (size_t)k * BL, BL, &e)) die(&e);
        for (int j = 0; j < 1000; j++) busy += sqrt((double)j + k); /* "backward" of the next layer */
        if (k % 10 == 0 && dist_poll(d, &e)) die(&e);
    }
    if (dist_wait_all(d, &e)) die(&e);
    if (dist_wait_all(d, &e)) die(&e); /* nothing pending: no-op */
    for (size_t i = 0; i < (size_t)NB * BL; i++)
        check(&t, b[i] == (float)(tri * coef(i + 7)), "allreduce_f32_start", (long)i, b[i], tri * coef(i + 7));
    check(&t, busy > 0, "busy", 0, busy, 1);

    /* i64 (values beyond 2^32), f64, max */
    int64_t iv[3] = {((int64_t)1 << 40) * (R + 1), -(int64_t)(R + 1), 7};
    if (dist_allreduce_i64(d, iv, 3, &e)) die(&e);
    check(&t, iv[0] == ((int64_t)1 << 40) * (int64_t)tri, "allreduce_i64", 0, (double)iv[0], ((double)(1LL << 40)) * tri);
    check(&t, iv[1] == -(int64_t)tri, "allreduce_i64", 1, (double)iv[1], -tri);
    check(&t, iv[2] == 7 * (int64_t)W, "allreduce_i64", 2, (double)iv[2], 7.0 * W);
    double dv[2] = {R + 0.25, 1e300};
    if (dist_allreduce_f64(d, dv, 1, &e)) die(&e); /* only the first */
    check(&t, dv[0] == W * (W - 1) / 2.0 + 0.25 * W, "allreduce_f64", 0, dv[0], W * (W - 1) / 2.0 + 0.25 * W);
    check(&t, dv[1] == 1e300, "allreduce_f64 count", 1, dv[1], 1e300);
    int mx = R * 7 - 3;
    if (dist_allreduce_max_i32(d, &mx, &e)) die(&e);
    check(&t, mx == (W - 1) * 7 - 3, "allreduce_max_i32", 0, mx, (W - 1) * 7 - 3);

    /* ZeRO-1: reduce-scatter then all-gather */
    const size_t shard = 4099;
    float *z = gt_xmalloc((size_t)W * shard * sizeof *z);
    for (size_t i = 0; i < (size_t)W * shard; i++) z[i] = (float)(R + 1) * coef(i);
    if (dist_reduce_scatter_f32(d, z, shard, &e)) die(&e);
    for (size_t i = (size_t)R * shard; i < (size_t)(R + 1) * shard; i++)
        check(&t, z[i] == (float)(tri * coef(i)), "reduce_scatter_f32", (long)i, z[i], tri * coef(i));
    for (size_t i = 0; i < (size_t)W * shard; i++) /* the other shards: garbage that must be replaced */
        if (i < (size_t)R * shard || i >= (size_t)(R + 1) * shard) z[i] = NAN;
    for (size_t i = (size_t)R * shard; i < (size_t)(R + 1) * shard; i++) z[i] += 1.0f; /* "AdamW on the shard" */
    if (dist_allgather_f32(d, z, shard, &e)) die(&e);
    for (size_t i = 0; i < (size_t)W * shard; i++)
        check(&t, z[i] == (float)(tri * coef(i)) + 1.0f, "allgather_f32", (long)i, z[i], tri * coef(i) + 1.0);

    /* broadcast and barrier */
    char id[128];
    for (int i = 0; i < 128; i++) id[i] = (char)(R == 1 ? i * 3 + 1 : 0);
    if (dist_broadcast(d, id, sizeof id, 1, &e)) die(&e);
    for (int i = 0; i < 128; i++) check(&t, id[i] == (char)(i * 3 + 1), "broadcast", i, id[i], (char)(i * 3 + 1));
    if (dist_barrier(d, "end of probe", &e)) die(&e);
    check(&t, dist_broadcast(d, id, 1, W, &e) == -1 && strstr(e.msg, "root"), "broadcast bad root", 0, 0, 0);

    free(a);
    free(b);
    free(z);
    return report(&t, W, "");
}

/* x rounded to bf16 (8 significant bits) to nearest even, in double: frexp gives x = m 2^e with
 * 0.5 <= |m| < 1, so m 2^8 holds the 8 bits kept; nearbyint rounds half to even (the default
 * rounding mode). For normal values, which are all this probe makes. */
static double ref_bf16(double x) {
    if (x == 0) return x;
    int e;
    const double m = frexp(x, &e);
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

/* rank r's value i: 24 random bits at a scale from 2^-30 to 2^9 (a splitmix64 hash of (r, i)), so the
 * rounding to bf16 drops bits, sums of two bf16 values often tie, and magnitudes differ widely */
static float grad_value(int r, size_t i) {
    uint64_t z = ((uint64_t)r << 40) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double mant = (double)((int64_t)(z & 0xFFFFFF) - 0x800000); /* [-2^23, 2^23) */
    const int scale = (int)((z >> 32) % 40) - 53;
    const float v = (float)ldexp(mant, scale);
    return v != 0 ? v : 1.0f;
}

/* the bit pattern of x, a bf16 value (its float's low 16 bits are zero) */
static uint16_t bits_of(double x) {
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

/* rank r's value i as bf16, and the expected bf16 sum over 2 ranks: both rounded, added exactly in
 * double, rounded */
static uint16_t rank_bf16(int r, size_t i) { return bits_of(ref_bf16(grad_value(r, i))); }
static double want_bf16_sum(size_t i) { return ref_bf16(ref_bf16(grad_value(0, i)) + ref_bf16(grad_value(1, i))); }

static double value_of(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int run_bf16(Dist *d) {
    GtError e = {0};
    const int R = dist_rank(d), W = dist_world(d);
    Tally t = {0, 0, R};
    check(&t, W == 2, "world (the reference is for 2 ranks)", 0, W, 2);
    /* started all-reduces in buckets of different sizes, more of them than the pending list holds,
     * one of 2^20 values, then dist_wait_all */
    enum { NB = 70 };
    size_t sizes[NB], total = 0;
    for (int k = 0; k < NB; k++) total += sizes[k] = k == 3 ? (size_t)1 << 20 : 1 + (size_t)k * 977;
    uint16_t *g = gt_xmalloc(total * sizeof *g);
    for (size_t i = 0; i < total; i++) g[i] = rank_bf16(R, i);
    size_t off = 0, differs = 0;
    for (int k = 0; k < NB; k++) {
        if (dist_allreduce_bf16_start(d, g + off, sizes[k], &e)) die(&e);
        if (k % 7 == 0 && dist_poll(d, &e)) die(&e);
        off += sizes[k];
    }
    if (dist_wait_all(d, &e)) die(&e);
    for (size_t i = 0; i < total; i++) {
        const double want = want_bf16_sum(i);
        check(&t, g[i] == bits_of(want), "allreduce_bf16", (long)i, value_of(g[i]), want);
        differs += (float)want != grad_value(0, i) + grad_value(1, i);
    }
    /* the data exercise what bf16 changes: most sums differ from the fp32 sum */
    check(&t, differs > total / 2, "bf16 sums that differ from the fp32 sums", 0, (double)differs, (double)total / 2);

    /* ZeRO-1: reduce-scatter in bf16 */
    const size_t shard = 40099;
    uint16_t *z = gt_xmalloc((size_t)W * shard * sizeof *z);
    for (size_t i = 0; i < (size_t)W * shard; i++) z[i] = rank_bf16(R, i);
    if (dist_reduce_scatter_bf16(d, z, shard, &e)) die(&e);
    for (size_t i = (size_t)R * shard; i < (size_t)(R + 1) * shard; i++) {
        const double want = want_bf16_sum(i);
        check(&t, z[i] == bits_of(want), "reduce_scatter_bf16", (long)i, value_of(z[i]), want);
    }
    free(g);
    free(z);
    return report(&t, W, "bf16: ");
}

static int run_world1(Dist *d) {
    GtError e = {0};
    Tally t = {0, 0, 0};
    check(&t, dist_world(d) == 1 && dist_rank(d) == 0 && dist_local_rank(d) == 0, "world1", 0, dist_world(d), 1);
    check(&t, strcmp(dist_transport(d), "none") == 0, "transport none", 0, 0, 0);
#ifdef GT_HAVE_MPI
    int init = 1;
    MPI_Initialized(&init);
    check(&t, init == 0, "MPI_Init not called", 0, init, 0);
#endif
    float f[4] = {1, 2, 3, 4};
    uint16_t odd[2] = {0x3f81, 0xc041}; /* world 1: no sum, no change */
    int64_t i64 = 5;
    double f64 = 6;
    int mx = 7;
    if (dist_allreduce_f32(d, f, 4, &e) || dist_allreduce_f32_start(d, f, 4, &e) || dist_poll(d, &e) ||
        dist_wait_all(d, &e) || dist_allreduce_i64(d, &i64, 1, &e) || dist_allreduce_f64(d, &f64, 1, &e) ||
        dist_reduce_scatter_f32(d, f, 4, &e) || dist_allgather_f32(d, f, 4, &e) || dist_allreduce_max_i32(d, &mx, &e) ||
        dist_allreduce_bf16_start(d, odd, 2, &e) || dist_wait_all(d, &e) || dist_reduce_scatter_bf16(d, odd, 2, &e) ||
        dist_broadcast(d, f, sizeof f, 0, &e) || dist_barrier(d, "x", &e))
        die(&e);
    for (int i = 0; i < 4; i++) check(&t, f[i] == i + 1, "world1 no-op", i, f[i], i + 1);
    check(&t, odd[0] == 0x3f81 && odd[1] == 0xc041, "world1 bf16 no-op", 0, odd[0], 0x3f81);
    check(&t, i64 == 5 && f64 == 6 && mx == 7, "world1 scalars", 0, 0, 0);
    if (t.failures) return 1;
    printf("dist_probe: world 1: all %d checks passed\n", t.checks);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "collectives";
    double timeout = 60;
    if (strcmp(mode, "timeout") == 0) timeout = argc > 2 ? atof(argv[2]) : 2;
    if (strcmp(mode, "kill") == 0 || strcmp(mode, "fail") == 0) timeout = 120;
    Dist *d = NULL;
    GtError e = {0};
    if (dist_init(&d, &argc, &argv, timeout, &e)) {
        fprintf(stderr, "gtrain: %s\n", e.msg);
        return e.code ? e.code : 1;
    }
    int rc = 0;
    const int R = dist_rank(d);
    if (strcmp(mode, "collectives") == 0) {
        rc = run_collectives(d);
    } else if (strcmp(mode, "bf16") == 0) {
        rc = run_bf16(d);
    } else if (strcmp(mode, "world1") == 0) {
        rc = run_world1(d);
    } else if (strcmp(mode, "timeout") == 0) {
        double sl = argc > 3 ? atof(argv[3]) : 30;
        float x = 1;
        if (dist_allreduce_f32(d, &x, 1, &e)) die(&e); /* everyone is up */
        if (R == 1) sleep_s(sl);
        float v[16] = {0};
        if (dist_allreduce_f32(d, v, 16, &e)) die(&e);
        printf("dist_probe: rank %d: all-reduce completed (no timeout)\n", R);
    } else if (strcmp(mode, "kill") == 0 || strcmp(mode, "fail") == 0) {
        float x = 1;
        if (dist_allreduce_f32(d, &x, 1, &e)) die(&e); /* everyone is up */
        if (R == 1) {
            sleep_s(0.5); /* let rank 0 enter the all-reduce */
            if (mode[0] == 'k') raise(SIGKILL);
            GtError bad = {0};
            gt_error(&bad, GT_EXIT_BAD_INPUT, "probe.bin: cannot open: No such file or directory");
            dist_fail(d, &bad);
        }
        float v[1024] = {0};
        if (dist_allreduce_f32(d, v, 1024, &e)) die(&e);
        printf("dist_probe: rank %d: all-reduce completed although rank 1 is gone\n", R);
        rc = 3;
    } else {
        fprintf(stderr, "dist_probe: unknown mode '%s'\n", mode);
        rc = 2;
    }
    dist_finalize(d);
    return rc;
}
