/* cuda_fixture.h - what the CUDA backend's own tests share (test_cuda.c, test_cuda_attention.c):
 * a Pair of backends (the CUDA backend under test and the CPU backend it is compared with; the
 * test is skipped without a visible GPU), seeded host data (rng_state: each test runs in its own
 * process, so every test starts from the same seed), device buffers filled and read back through
 * the ops table, NaN-poisoned outputs, bf16 bit patterns widened on the host, and the error
 * metric rel(a, b) = max|a-b| / max(max|b|, 1e-6), infinite on NaN; TOL bounds fp32 outputs,
 * BF16_TOL bf16 ones (test_cuda.c's bf16 section says why). */
#ifndef GT_TEST_CUDA_FIXTURE_H
#define GT_TEST_CUDA_FIXTURE_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef struct {
    Backend *cpu, *gpu;
} Pair;

static inline void pair_open(Pair *p) {
    GtError err = {0};
    memset(p, 0, sizeof *p);
    if (backend_gpu_count() <= 0) cr_skip_test("no GPU visible");
    cr_assert_eq(backend_open_cuda(&p->gpu, 0, &err), 0, "cuda backend: %s", err.msg);
    cr_assert_eq(cpu_backend_create(&p->cpu, 0, &err), 0, "cpu backend: %s", err.msg);
}

static inline void pair_close(Pair *p) {
    backend_close(p->gpu);
    backend_close(p->cpu);
}

static uint64_t rng_state = 12345;
static inline float frand(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}
static inline float *rand_host(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof(float) + 4);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) h[i] = frand(lo, hi);
    return h;
}

/* device buffer (on backend b) holding a copy of host h */
static inline void *dup_to(Backend *b, const void *h, size_t bytes) {
    GtError err = {0};
    void *d = b->ops->dev_alloc(b, bytes ? bytes : 4);
    cr_assert_not_null(d);
    if (h) cr_assert_eq(b->ops->to_device(b, d, h, bytes, &err), 0, "%s", err.msg);
    return d;
}
/* a device buffer of n elements of elem_size bytes, each a copy of *value */
static inline void *dfill_on(Backend *b, const void *value, size_t elem_size, size_t n) {
    char *h = malloc(n * elem_size + 4);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) memcpy(h + i * elem_size, value, elem_size);
    void *d = dup_to(b, h, n * elem_size);
    free(h);
    return d;
}
static inline float *dnan_on(Backend *b, size_t n) {
    const float nan = NAN;
    return dfill_on(b, &nan, sizeof nan, n);
}
static inline float *fetch(Backend *b, const float *d, size_t n) {
    GtError err = {0};
    float *h = malloc(n * sizeof(float) + 4);
    cr_assert_eq(b->ops->to_host(b, h, d, n * sizeof(float), &err), 0, "%s", err.msg);
    return h;
}
/* max|a-b| / max(max|b|, 1e-6); infinite on NaN */
static inline double rel(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 1e-6;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

#define TOL 1e-5

#define BF16_TOL 1e-2

/* n random floats in [lo, hi) rounded to bf16 bit patterns */
static inline uint16_t *rand_bf16(size_t n, float lo, float hi) {
    uint16_t *h = malloc(n * sizeof(uint16_t) + 4);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) h[i] = gt_f32_to_bf16(frand(lo, hi));
    return h;
}
/* a device bf16 buffer of n NaNs */
static inline void *dnan_bf16_on(Backend *b, size_t n) {
    const uint16_t nan = 0x7FC0u; /* bf16 quiet NaN */
    return dfill_on(b, &nan, sizeof nan, n);
}
/* a device bf16 buffer of n elements, widened to fp32 on the host */
static inline float *fetch_bf16(Backend *b, const void *d, size_t n) {
    GtError err = {0};
    uint16_t *h = malloc(n * sizeof(uint16_t) + 4);
    float *f = malloc(n * sizeof(float) + 4);
    cr_assert(h && f);
    cr_assert_eq(b->ops->to_host(b, h, d, n * sizeof(uint16_t), &err), 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) f[i] = gt_bf16_to_f32(h[i]);
    free(h);
    return f;
}
static inline void bf_free_all(Backend *b, void **bufs, int n) {
    for (int i = 0; i < n; i++) b->ops->dev_free(b, bufs[i]);
}

#endif
