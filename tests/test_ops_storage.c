/* test_ops_storage.c - the storage op (backend.h's convert: a weight stored in one dtype into
 * another), suite storage_ops, on the backend of test_backend_open() (GTRAIN_TEST_DEVICE=cuda, as
 * make test-cudasim sets, runs it on the CUDA backend), against references independent of the code
 * under test:
 *   - fp32 -> bf16: every element the nearest bf16 from the definition (ref_round_bf16: double
 *     arithmetic, ties to the even neighbour), bit for bit: random values over many binades, values
 *     exactly halfway between two bf16 neighbours (both parities of the lower one, so a rounding
 *     that breaks ties up or down shows up), and +-0, +-Inf, NaN (stays a NaN);
 *   - bf16 -> fp32: exact (the same value back, read as fp32 by the test from the bits it wrote);
 *   - fp32 -> fp32 and bf16 -> bf16: copies, bit for bit;
 *   - n = 0 writes nothing; a length that is no multiple of a vector or block (1, 1029, 131,077).
 * The bf16 values the test puts on the device are written as bit patterns the test builds
 * itself (the top half of the fp32 of an exactly representable value). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"
#include "ref_ops.h"

/* the bits of a float, and the bf16 bits of a float that is exactly a bf16 (its top half) */
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n test inputs: specials first, then ties (the midpoint of two bf16 neighbours, the lower one's
 * last bit alternating), then random values with exponents over [-30, 30] */
static float *inputs(Fx *fx, size_t n, uint64_t seed) {
    float *x = hf(fx, n);
    Rng r = {seed};
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 3.0e38f, -1.1754944e-38f};
    const size_t ns = sizeof specials / sizeof specials[0];
    for (size_t i = 0; i < n; i++) {
        if (i < ns) {
            x[i] = specials[i];
        } else if (i % 3 == 0) { /* a midpoint: lower neighbour m 2^(e-8) (m in [128, 255]), plus half a step */
            const double m = 128 + (double)(rng_next(&r) % 127), e = (double)((int)(rng_next(&r) % 41) - 20);
            const double lo = (i / 3) % 2 ? (fmod(m, 2) == 0 ? m + 1 : m) : (fmod(m, 2) == 0 ? m : m + 1);
            x[i] = (float)((rng_next(&r) & 1 ? -1 : 1) * ldexp(lo + 0.5, (int)e - 8));
        } else {
            x[i] = (float)((rng_next(&r) & 1 ? -1 : 1) * ldexp(0.5 + 0.5 * rng_uniform(&r), (int)(rng_next(&r) % 61) - 30));
        }
    }
    return x;
}

static void check_n(size_t n, uint64_t seed) {
    Fx fx;
    fx_open(&fx);
    float *x = inputs(&fx, n, seed);
    float *dx = dup_f(&fx, x, n);
    uint16_t *b16 = dmem(&fx, n * sizeof(uint16_t) + 2);
    /* poison: n = 0 must write nothing, and nothing past n */
    uint16_t *poison = hmem(&fx, n * sizeof(uint16_t) + 2);
    memset(poison, 0xA5, n * sizeof(uint16_t) + 2);
    up(&fx, b16, poison, n * sizeof(uint16_t) + 2);
    fx.be->ops->convert(fx.be, b16, GT_BF16, dx, GT_F32, n);
    uint16_t *got = get_raw(&fx, b16, n * sizeof(uint16_t) + 2);
    cr_assert_eq(memcmp(got + n, poison + n, 2), 0, "n=%zu: convert wrote past its n elements", n);
    float *back_ref = hf(&fx, n + 1);
    for (size_t i = 0; i < n; i++) {
        const float want = (float)ref_round_bf16(x[i]);
        const float have = float_of((uint32_t)got[i] << 16);
        if (isnan(x[i]))
            cr_assert(isnan(have), "n=%zu [%zu]: NaN became %g", n, i, have);
        else
            cr_assert(bits_of(have) == bits_of(want), "n=%zu [%zu]: fp32 %.9g (%08x) -> bf16 %.9g, the nearest (ties "
                      "to even) is %.9g", n, i, x[i], bits_of(x[i]), have, want);
        back_ref[i] = have;
    }
    /* bf16 -> fp32: exact; the input is the test's own bits (got), read back as fp32 */
    float *wide = dnan(&fx, n + 1);
    uint16_t *db = dmem(&fx, n * sizeof(uint16_t) + 2);
    up(&fx, db, got, n * sizeof(uint16_t));
    fx.be->ops->convert(fx.be, wide, GT_F32, db, GT_BF16, n);
    float *w = get_raw(&fx, wide, (n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        cr_assert(isnan(back_ref[i]) ? isnan(w[i]) : bits_of(w[i]) == bits_of(back_ref[i]),
                  "n=%zu [%zu]: bf16 %04x widened to %.9g, exactly %.9g", n, i, got[i], w[i], back_ref[i]);
    cr_assert(isnan(w[n]), "n=%zu: the widening wrote past its n elements", n);
    /* the same dtype: copies */
    float *copy = dnan(&fx, n + 1);
    fx.be->ops->convert(fx.be, copy, GT_F32, dx, GT_F32, n);
    float *c = get_raw(&fx, copy, (n + 1) * sizeof(float));
    cr_assert(memcmp(c, x, n * sizeof(float)) == 0 && isnan(c[n]), "n=%zu: fp32 -> fp32 is not a copy", n);
    uint16_t *c16 = dmem(&fx, n * sizeof(uint16_t) + 2);
    up(&fx, c16, poison, n * sizeof(uint16_t) + 2);
    fx.be->ops->convert(fx.be, c16, GT_BF16, db, GT_BF16, n);
    uint16_t *cc = get_raw(&fx, c16, n * sizeof(uint16_t) + 2);
    cr_assert(memcmp(cc, got, n * sizeof(uint16_t)) == 0 && memcmp(cc + n, poison + n, 2) == 0,
              "n=%zu: bf16 -> bf16 is not a copy", n);
    fx_close(&fx);
}

Test(storage_ops, convert_rounds_to_nearest_even_and_widens_exactly) {
    check_n(0, 1);
    check_n(1, 2);
    check_n(1029, 3);
    check_n(131077, 4);
}

/* the act dtype set on the backend changes nothing: convert names both dtypes itself */
Test(storage_ops, convert_ignores_the_act_dtype) {
    Fx fx;
    fx_open_as(&fx, GT_BF16);
    const size_t n = 4099;
    float *x = inputs(&fx, n, 9);
    float *dx = dup_f(&fx, x, n);
    float *wide = dnan(&fx, n);
    uint16_t *b16 = dmem(&fx, n * sizeof(uint16_t));
    fx.be->ops->convert(fx.be, b16, GT_BF16, dx, GT_F32, n);
    fx.be->ops->convert(fx.be, wide, GT_F32, b16, GT_BF16, n);
    float *w = get_raw(&fx, wide, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        cr_assert(isnan(x[i]) ? isnan(w[i]) : w[i] == (float)ref_round_bf16(x[i]), "[%zu]: %.9g round trip %.9g", i,
                  x[i], w[i]);
    fx_close(&fx);
}
