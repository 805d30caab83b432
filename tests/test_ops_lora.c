/* test_ops_lora.c - the LoRA backend ops (backend.h): axpby_rows and dropout, suite lora_ops.
 *
 * Run on the backend of test_backend_open() (ops_fixture.h; GTRAIN_TEST_DEVICE=cuda, as make
 * test-cudasim sets, runs them on the CUDA backend), both act dtypes, against references written
 * here and independent of the code under test:
 *
 *   axpby_rows: dst = beta * d + alpha * s over N rows of cols, row strides ldd and lds.
 *     - the spec's arithmetic evaluated in the test, in fp32 (each product rounded, then the sum;
 *       volatile temporaries, so no compiler can fuse them into an FMA), rounded to the act
 *       dtype once with the test's own round-to-nearest-even: the op must give these BITS, fp32
 *       and bf16 alike (attainable: the CPU computes exactly this, the CUDA kernels with
 *       __fmul_rn / __fadd_rn);
 *     - the exact result in double, rounded once: fp32 within the fp32 evaluation's error bound
 *       (2u (|beta d| + |alpha s|), u = 2^-24); bf16 rounded from the exact double once, the op
 *       within 1 bf16 ulp of it plus that same fp32 bound. Bit equality with the exactly rounded
 *       value is not attainable: the spec computes in fp32 first, and the fp32 rounding can carry
 *       the value across (or onto) a bf16 rounding midpoint, so the two roundings differ by one
 *       bf16 ulp in rare elements (and by the fp32 error, which under cancellation can exceed an
 *       ulp of the small result).
 *     - the columns cols..ldd-1 of dst are left untouched (bit for bit); beta 0 never reads dst
 *       (dst poisoned with NaN, which 0 * NaN would spread); in place (dst == src, ldd == lds).
 *   dropout: out[i] = keep(key, base + i) ? inp[i] * scale : +0, the mask re-derived here from the
 *     test's own splitmix64 finaliser (Steele, Lea & Flood's published constants, written out
 *     below, not dropout.h's gt_mix64), the product in fp32 rounded once; bits compared, with
 *     base 0 and bases past 2^32. p = 0 keeps every element bit for bit; p = 0.1 and 0.5 drop a
 *     fraction within 4 standard deviations of p over 131,073 elements; the same key twice gives
 *     the same bits, a different key (one bit flipped) a different mask; out == inp in place gives
 *     the out-of-place bits. A call with base b over n elements gives elements [b, b + n) of one
 *     with base 0 over b + n elements, bit for bit (how LoRA drops a micro-batch's rows of the
 *     step's batch), and another base another mask.
 *   Both: the same bits for 1 and 2 CPU threads (CPU backend only), and the CUDA backend the
 *   CPU's bits (when the build has CUDA and a device: a GPU, or the simulator under make
 *   test-cudasim; skipped otherwise). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dropout.h"
#include "ops_fixture.h"
#include "test_backend_select.h"

#define NEED_OP(fx, op)                                                                            \
    do {                                                                                           \
        if (!(fx).be->ops->op) cr_skip_test("the %s backend has no " #op " yet", (fx).be->ops->name); \
    } while (0)

/* ------------------------------------------------------------------ the test's own references */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* an fp32 value (finite, not NaN) rounded to bf16, nearest even, returned widened to fp32 */
static float ref_bf16(float f) {
    uint32_t u = fbits(f);
    uint32_t lsb = (u >> 16) & 1u;
    u = (u + 0x7FFFu + lsb) & 0xFFFF0000u;
    return bitsf(u);
}
/* the act dtype's rounding of an fp32 value */
static float ref_round(GtDtype act, float f) { return act == GT_BF16 ? ref_bf16(f) : f; }

/* an exact (double) value rounded once to bf16 (8 significant bits), nearest even; normal range */
static double ref_bf16_exact(double r) {
    if (r == 0.0) return 0.0;
    int e;
    frexp(r, &e); /* r = f 2^e, 0.5 <= |f| < 1: the bf16 grid here is 2^(e-8) */
    double q = ldexp(1.0, e - 8);
    return nearbyint(r / q) * q; /* default rounding mode: ties to even */
}
/* one bf16 ulp at |x| */
static double ref_bf16_ulp(double x) {
    if (x == 0.0) return ldexp(1.0, -133);
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 8);
}

/* the spec's fp32 arithmetic: beta * d + alpha * s, each product rounded, then the sum; beta 0:
 * alpha * s alone */
static float ref_axpby_f32(float d, float s, float alpha, float beta) {
    volatile float as = alpha * s;
    if (beta == 0.0f) return as;
    volatile float bd = beta * d;
    volatile float v = bd + as;
    return v;
}

/* splitmix64's finaliser (the output function of Steele, Lea & Flood's SplitMix64, as in Vigna's
 * splitmix64.c): z += golden gamma; two xor-shift-multiply rounds; a final xor-shift */
static uint64_t ref_mix64(uint64_t z) {
    z += UINT64_C(0x9E3779B97F4A7C15);
    z ^= z >> 30;
    z *= UINT64_C(0xBF58476D1CE4E5B9);
    z ^= z >> 27;
    z *= UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return z;
}
/* dropout.h's rule: keep element i when the top 24 bits of mix(key ^ mix(i)) >= threshold */
static int ref_keep(uint64_t key, uint64_t i, uint32_t threshold) {
    return (uint32_t)(ref_mix64(key ^ ref_mix64(i)) >> 40) >= threshold;
}
/* round(p 2^24) */
static uint32_t ref_threshold(double p) { return (uint32_t)llround(p * 16777216.0); }

/* ------------------------------------------------------------------ axpby_rows */

typedef struct {
    int N, cols, ldd, lds;
    float alpha, beta;
    bool in_place;  /* dst == src (then ldd == lds) */
    bool nan_dst;   /* beta 0: dst's live columns poisoned with NaN (never read) */
} AxCase;

static void check_axpby(GtDtype act, AxCase c, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, axpby_rows);
    Rng r = {seed};
    if (c.in_place) cr_assert_eq(c.ldd, c.lds, "in place needs ldd == lds");
    const size_t nd = (size_t)c.N * c.ldd, ns = (size_t)c.N * c.lds;
    float *dst0 = rand_a(&fx, &r, nd, -3, 3);
    float *src = c.in_place ? dst0 : rand_a(&fx, &r, ns, -2, 2);
    if (c.nan_dst)
        for (int n = 0; n < c.N; n++)
            for (int j = 0; j < c.cols; j++) dst0[(size_t)n * c.ldd + j] = NAN;
    void *d_dst = dup_a(&fx, dst0, nd);
    const void *d_src = c.in_place ? d_dst : dup_a(&fx, src, ns);
    fx.be->ops->axpby_rows(fx.be, d_dst, c.ldd, d_src, c.lds, c.N, c.cols, c.alpha, c.beta);
    float *got = get_a(&fx, d_dst, nd);

    size_t bad_bits = 0, bad_exact = 0, bad_pad = 0;
    int first_n = -1, first_j = -1;
    float first_got = 0.0f, first_want = 0.0f;
    double worst = 0.0;
    for (int n = 0; n < c.N; n++)
        for (int j = 0; j < c.ldd; j++) {
            size_t o = (size_t)n * c.ldd + j;
            if (j >= c.cols) { /* padding: untouched */
                if (fbits(got[o]) != fbits(dst0[o])) bad_pad++;
                continue;
            }
            float d = dst0[o], s = src[(size_t)n * c.lds + j];
            float want = ref_round(act, ref_axpby_f32(d, s, c.alpha, c.beta));
            if (fbits(got[o]) != fbits(want)) {
                if (bad_bits++ == 0) {
                    first_n = n;
                    first_j = j;
                    first_got = got[o];
                    first_want = want;
                }
            }
            /* the exact value and the fp32 evaluation's error bound */
            double as = (double)c.alpha * s, bd = c.beta == 0.0f ? 0.0 : (double)c.beta * d;
            double exact = as + bd, bound = 2.001 * ldexp(1.0, -24) * (fabs(as) + fabs(bd)) + 1e-38;
            double err;
            if (act == GT_BF16) {
                double e1 = ref_bf16_exact(exact);
                err = fabs((double)got[o] - e1) / (ref_bf16_ulp(fmax(fabs(e1), fabs(got[o]))) + bound);
            } else {
                err = fabs((double)got[o] - exact) / bound;
            }
            if (!(err <= 1.0)) bad_exact++;
            if (err > worst || err != err) worst = err;
        }
    const char *dt = gt_dtype_name(act);
    cr_expect_eq(bad_bits, 0,
                 "%s axpby_rows N=%d cols=%d ldd=%d lds=%d alpha=%g beta=%g%s: %zu element(s) differ from the "
                 "fp32-arithmetic reference's bits (first at row %d col %d: got %.9g, want %.9g)",
                 dt, c.N, c.cols, c.ldd, c.lds, c.alpha, c.beta, c.in_place ? " in place" : "", bad_bits, first_n,
                 first_j, first_got, first_want);
    cr_expect_eq(bad_exact, 0,
                 "%s axpby_rows N=%d cols=%d alpha=%g beta=%g: %zu element(s) outside the bound of the exact "
                 "(double) result (worst %.3g of the bound)",
                 dt, c.N, c.cols, c.alpha, c.beta, bad_exact, worst);
    cr_expect_eq(bad_pad, 0, "%s axpby_rows N=%d cols=%d ldd=%d: %zu padding element(s) of dst changed", dt, c.N,
                 c.cols, c.ldd, bad_pad);
    fx_close(&fx);
}

static void axpby_cases(GtDtype act) {
    const AxCase cases[] = {
        /* N*cols >= 16384: the CPU's multi-threaded path */
        {130, 150, 160, 152, 0.37f, 1.0f, false, false},
        {130, 150, 160, 152, -1.75f, 0.0f, false, true},   /* beta 0: a scaled copy, dst not read */
        {5, 33, 40, 33, 2.5f, -1.3f, false, false},       /* general alpha, beta; lds == cols */
        {9, 17, 17, 29, 1.0f, 1.0f, false, false},        /* dst += src; ldd == cols */
        {3, 40, 48, 64, 0.1f, 0.5f, false, false},
        {64, 300, 307, 307, 0.3f, 0.8f, true, false},     /* in place */
        {64, 300, 307, 307, 0.625f, 0.0f, true, false},   /* in place, beta 0: dst *= alpha */
        {1, 1, 1, 1, 3.0f, 1.0f, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_axpby(act, cases[i], 100 + i);
}

Test(lora_ops, axpby_rows_fp32) { axpby_cases(GT_F32); }
Test(lora_ops, axpby_rows_bf16) { axpby_cases(GT_BF16); }

/* N = 0 or cols = 0 writes nothing */
Test(lora_ops, axpby_rows_empty) {
    Fx fx;
    fx_open(&fx);
    NEED_OP(fx, axpby_rows);
    float h[4] = {1, 2, 3, 4};
    float *d = dup_f(&fx, h, 4), *s = dnan(&fx, 4);
    fx.be->ops->axpby_rows(fx.be, d, 4, s, 4, 0, 4, 1.0f, 1.0f);
    fx.be->ops->axpby_rows(fx.be, d, 4, s, 4, 1, 0, 1.0f, 1.0f);
    cr_expect(memcmp(get_f(&fx, d, 4), h, sizeof h) == 0, "an empty axpby_rows changed dst");
    fx_close(&fx);
}

/* ------------------------------------------------------------------ dropout */

#define DROP_N 131073 /* >= 1e5, odd (not a multiple of any block) */

/* nonzero act values of either sign, |x| in [0.25, 2]: an output is 0 exactly when dropped */
static float *drop_inputs(Fx *fx, Rng *r, size_t n) {
    float *x = rand_a(fx, r, n, 0.25f, 2.0f);
    for (size_t i = 0; i < n; i++)
        if (rng_next(r) & 1) x[i] = -x[i];
    return x;
}

/* out (as fp32) against the reference: bits, and the dropped count; returns the number of
 * elements whose bits differ, *dropped the op's zeros, *ref_dropped the reference mask's drops */
static size_t drop_compare(GtDtype act, const float *got, const float *x, size_t n, uint64_t key, uint64_t base,
                           uint32_t thr, float scale, size_t *dropped, size_t *ref_dropped, size_t *first) {
    size_t bad = 0;
    *dropped = *ref_dropped = 0;
    *first = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        int keep = ref_keep(key, base + i, thr);
        volatile float prod = x[i] * scale;
        float want = keep ? ref_round(act, prod) : 0.0f;
        if (!keep) (*ref_dropped)++;
        if (got[i] == 0.0f) (*dropped)++;
        if (fbits(got[i]) != fbits(want)) {
            if (*first == (size_t)-1) *first = i;
            bad++;
        }
    }
    return bad;
}

static void check_dropout(GtDtype act, double p, uint64_t key, uint64_t base, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, dropout);
    Rng r = {seed};
    const size_t n = DROP_N;
    const uint32_t thr = ref_threshold(p);
    cr_assert_eq(gt_dropout_threshold(p), thr, "gt_dropout_threshold(%g) = %u, expected round(p 2^24) = %u", p,
                 gt_dropout_threshold(p), thr);
    const float scale = (float)(1.0 / (1.0 - p));
    float *x = drop_inputs(&fx, &r, n);
    void *d_x = dup_a(&fx, x, n), *d_out = dnan_a(&fx, n);
    fx.be->ops->dropout(fx.be, d_out, d_x, n, key, base, thr, scale);
    float *got = get_a(&fx, d_out, n);
    size_t dropped, ref_dropped, first;
    size_t bad = drop_compare(act, got, x, n, key, base, thr, scale, &dropped, &ref_dropped, &first);
    const char *dt = gt_dtype_name(act);
    cr_expect_eq(bad, 0,
                 "%s dropout p=%g key=%#llx base %llu: %zu of %zu elements differ from the reference mask * scale "
                 "(first %zu: got %.9g, input %.9g, reference keeps it: %d)",
                 dt, p, (unsigned long long)key, (unsigned long long)base, bad, n, first == (size_t)-1 ? 0 : first,
                 first == (size_t)-1 ? 0.0 : got[first], first == (size_t)-1 ? 0.0 : x[first],
                 first == (size_t)-1 ? 0 : ref_keep(key, base + first, thr));
    /* the dropped fraction: binomial(n, p) within 4 standard deviations */
    double frac = (double)dropped / (double)n, sd = sqrt(p * (1.0 - p) / (double)n);
    if (p == 0.0)
        cr_expect_eq(dropped, 0, "%s dropout p=0 dropped %zu elements", dt, dropped);
    else
        cr_expect_leq(fabs(frac - p), 4.0 * sd, "%s dropout p=%g: dropped fraction %.5f, outside p +- 4 sd (%.5f)",
                      dt, p, frac, 4.0 * sd);
    cr_expect_eq(dropped, ref_dropped, "%s dropout p=%g: %zu zeros, the reference mask drops %zu", dt, p, dropped,
                 ref_dropped);
    if (p == 0.0) /* everything kept, times exactly 1: the input's bits */
        cr_expect(memcmp(get_raw(&fx, d_out, backend_act_bytes(fx.be, n)), get_raw(&fx, d_x, backend_act_bytes(fx.be, n)),
                         backend_act_bytes(fx.be, n)) == 0,
                  "%s dropout p=0: the output is not the input bit for bit", dt);

    /* the same key again: the same bits; one key bit flipped: a different mask */
    void *d_out2 = dnan_a(&fx, n);
    fx.be->ops->dropout(fx.be, d_out2, d_x, n, key, base, thr, scale);
    const size_t bytes = backend_act_bytes(fx.be, n);
    void *raw1 = get_raw(&fx, d_out, bytes), *raw2 = get_raw(&fx, d_out2, bytes);
    cr_expect(memcmp(raw1, raw2, bytes) == 0, "%s dropout p=%g: the same key twice gave different bits", dt, p);
    if (p > 0.0) {
        fx.be->ops->dropout(fx.be, d_out2, d_x, n, key ^ 1u, base, thr, scale);
        float *got2 = get_a(&fx, d_out2, n);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) differ += (got[i] == 0.0f) != (got2[i] == 0.0f);
        /* independent masks differ in 2 p (1 - p) n places on average */
        double expect = 2.0 * p * (1.0 - p) * (double)n;
        cr_expect_geq((double)differ, 0.5 * expect,
                      "%s dropout p=%g: keys %#llx and %#llx give masks differing in %zu places (expected about %.0f)",
                      dt, p, (unsigned long long)key, (unsigned long long)(key ^ 1u), differ, expect);
        size_t d2, rd2, f2;
        cr_expect_eq(drop_compare(act, got2, x, n, key ^ 1u, base, thr, scale, &d2, &rd2, &f2), 0,
                     "%s dropout p=%g: the second key's output differs from the reference", dt, p);
    }

    /* in place: out == inp gives the out-of-place bits */
    void *d_io = dup_a(&fx, x, n);
    fx.be->ops->dropout(fx.be, d_io, d_io, n, key, base, thr, scale);
    cr_expect(memcmp(get_raw(&fx, d_io, bytes), raw1, bytes) == 0,
              "%s dropout p=%g in place: not the out-of-place bits", dt, p);
    fx_close(&fx);
}

static void dropout_cases(GtDtype act) {
    check_dropout(act, 0.0, UINT64_C(0x0123456789ABCDEF), 0, 7);
    check_dropout(act, 0.1, UINT64_C(0xD1B54A32D192ED03), 0, 8);
    check_dropout(act, 0.5, UINT64_C(42), 0, 9);
    /* bases past 2^32: the index is 64-bit on every backend */
    check_dropout(act, 0.1, UINT64_C(0xD1B54A32D192ED03), UINT64_C(0x100000003), 10);
    check_dropout(act, 0.5, UINT64_C(42), UINT64_C(0xFFFFFFFFFFF00000), 11);
}

Test(lora_ops, dropout_fp32, .timeout = 120) { dropout_cases(GT_F32); }
Test(lora_ops, dropout_bf16, .timeout = 120) { dropout_cases(GT_BF16); }

/* a call with base b over n elements is elements [b, b + n) of one with base 0 over b + n, bit for
 * bit (LoRA drops each micro-batch's rows with the step's whole-batch index); base b + 1 drops
 * another mask (the base is not ignored, nor its rows shifted onto the same ones) */
static void check_dropout_slices(GtDtype act, double p) {
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, dropout);
    Rng r = {31};
    const size_t n = 20011, bases[] = {1, 4096, 20011, 3 * 20011 + 5};
    const size_t big = bases[3] + n;
    const uint64_t key = UINT64_C(0x5DEECE66D1234567);
    const uint32_t thr = gt_dropout_threshold(p);
    const float scale = (float)(1.0 / (1.0 - p));
    const char *dt = gt_dtype_name(act);
    float *x = drop_inputs(&fx, &r, big);
    void *d_x = dup_a(&fx, x, big), *d_all = dnan_a(&fx, big);
    fx.be->ops->dropout(fx.be, d_all, d_x, big, key, 0, thr, scale);
    const size_t es = backend_act_bytes(fx.be, 1);
    unsigned char *all = get_raw(&fx, d_all, backend_act_bytes(fx.be, big));
    for (size_t k = 0; k < sizeof bases / sizeof *bases; k++) {
        const size_t b = bases[k];
        void *d_part = dup_a(&fx, x + b, n), *d_out = dnan_a(&fx, n);
        fx.be->ops->dropout(fx.be, d_out, d_part, n, key, b, thr, scale);
        unsigned char *part = get_raw(&fx, d_out, backend_act_bytes(fx.be, n));
        size_t bad = 0, first = (size_t)-1;
        for (size_t i = 0; i < n; i++)
            if (memcmp(part + i * es, all + (b + i) * es, es) != 0) {
                if (first == (size_t)-1) first = i;
                bad++;
            }
        cr_expect_eq(bad, 0, "%s dropout p=%g base %zu over %zu: %zu elements differ from elements [%zu, %zu) of one "
                     "over %zu (first %zu)", dt, p, b, n, bad, b, b + n, b + n, first);
        /* base b + 1 on the same inputs: about 2 p (1 - p) n elements change */
        fx.be->ops->dropout(fx.be, d_out, d_part, n, key, b + 1, thr, scale);
        float *got = get_a(&fx, d_out, n), *want = get_a(&fx, d_all, big);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) differ += (got[i] == 0.0f) != (want[b + i] == 0.0f);
        cr_expect_geq((double)differ, p * (1.0 - p) * (double)n,
                      "%s dropout p=%g: bases %zu and %zu drop masks differing in only %zu of %zu places", dt, p, b,
                      b + 1, differ, n);
    }
    fx_close(&fx);
}

Test(lora_ops, dropout_with_base_is_a_slice_of_the_longer_call, .timeout = 120) {
    check_dropout_slices(GT_F32, 0.1);
    check_dropout_slices(GT_BF16, 0.1);
    check_dropout_slices(GT_F32, 0.5);
}

/* the reference finaliser is splitmix64's: its first outputs from seed 0 (Vigna's splitmix64.c,
 * state += gamma then the mix of the new state, i.e. ref_mix64(k * gamma) for k = 0, 1, ...) */
Test(lora_ops, reference_mix64_known_values) {
    cr_expect_eq(ref_mix64(0), UINT64_C(0xE220A8397B1DCDAF));
    cr_expect_eq(ref_mix64(UINT64_C(0x9E3779B97F4A7C15)), UINT64_C(0x6E789E6AA1B965F4));
    cr_expect_eq(ref_mix64(UINT64_C(0x3C6EF372FE94F82A)), UINT64_C(0x06C45D188009454F));
}

/* ------------------------------------------------------------------ threads and backends */

/* both ops, both dtypes, on backend b (act dtype set): the raw bytes of their outputs, malloc'ed */
typedef struct {
    void *ax, *ax_ip, *drop;
    size_t ax_bytes, drop_bytes;
} LoraOut;

enum { XN = 97, XC = 211, XLDD = 224, XLDS = 215, XDN = 40009 };

static void *dev_copy_of(Backend *b, const void *h, size_t bytes) {
    GtError err = {0};
    void *d = b->ops->dev_alloc(b, bytes);
    cr_assert_not_null(d);
    cr_assert_eq(b->ops->to_device(b, d, h, bytes, &err), 0, "%s", err.msg);
    return d;
}
static void *host_copy_of(Backend *b, const void *d, size_t bytes) {
    GtError err = {0};
    void *h = malloc(bytes);
    cr_assert_not_null(h);
    cr_assert_eq(b->ops->to_host(b, h, d, bytes, &err), 0, "%s", err.msg);
    return h;
}
/* n act values of dtype act from the floats x (bf16: rounded) into a fresh host buffer */
static void *to_act_host(GtDtype act, const float *x, size_t n) {
    void *h = malloc(n * 4);
    cr_assert_not_null(h);
    if (act == GT_F32) memcpy(h, x, n * 4);
    else
        for (size_t i = 0; i < n; i++) ((uint16_t *)h)[i] = gt_f32_to_bf16(x[i]);
    return h;
}

static LoraOut lora_run(Backend *b, GtDtype act, const float *xd, const float *xs, const float *xdrop) {
    backend_set_act_dtype(b, act);
    const size_t es = gt_dtype_size(act), nd = (size_t)XN * XLDD, ns = (size_t)XN * XLDS;
    LoraOut o = {.ax_bytes = nd * es, .drop_bytes = (size_t)XDN * es};
    void *hd_ = to_act_host(act, xd, nd), *hs = to_act_host(act, xs, ns), *hx = to_act_host(act, xdrop, XDN);
    void *d_dst = dev_copy_of(b, hd_, nd * es), *d_src = dev_copy_of(b, hs, ns * es);
    b->ops->axpby_rows(b, d_dst, XLDD, d_src, XLDS, XN, XC, 0.37f, -0.9f);
    o.ax = host_copy_of(b, d_dst, nd * es);
    void *d_ip = dev_copy_of(b, hd_, nd * es);
    b->ops->axpby_rows(b, d_ip, XLDD, d_ip, XLDD, XN, XC, 1.5f, 1.0f);
    b->ops->axpby_rows(b, d_ip, XLDD, d_ip, XLDD, XN, XC, -0.3f, 0.0f);
    o.ax_ip = host_copy_of(b, d_ip, nd * es);
    void *d_x = dev_copy_of(b, hx, (size_t)XDN * es);
    b->ops->dropout(b, d_x, d_x, XDN, UINT64_C(0xFEEDFACECAFEBEEF), UINT64_C(0x2000000007), gt_dropout_threshold(0.3),
                    (float)(1.0 / (1.0 - 0.3)));
    o.drop = host_copy_of(b, d_x, (size_t)XDN * es);
    void *dev[] = {d_dst, d_src, d_ip, d_x};
    for (int i = 0; i < 4; i++) b->ops->dev_free(b, dev[i]);
    free(hd_);
    free(hs);
    free(hx);
    return o;
}

static void lora_free(LoraOut *o) {
    free(o->ax);
    free(o->ax_ip);
    free(o->drop);
}

static void lora_inputs(float **xd, float **xs, float **xdrop) {
    Rng r = {2024};
    size_t nd = (size_t)XN * XLDD, ns = (size_t)XN * XLDS;
    *xd = malloc(nd * 4);
    *xs = malloc(ns * 4);
    *xdrop = malloc((size_t)XDN * 4);
    cr_assert(*xd && *xs && *xdrop);
    for (size_t i = 0; i < nd; i++) (*xd)[i] = rng_f(&r, -3, 3);
    for (size_t i = 0; i < ns; i++) (*xs)[i] = rng_f(&r, -2, 2);
    for (size_t i = 0; i < XDN; i++) (*xdrop)[i] = rng_f(&r, -2, 2);
}

static void expect_same(const LoraOut *a, const LoraOut *b, GtDtype act, const char *what) {
    cr_expect(memcmp(a->ax, b->ax, a->ax_bytes) == 0, "%s %s: axpby_rows bits differ", gt_dtype_name(act), what);
    cr_expect(memcmp(a->ax_ip, b->ax_ip, a->ax_bytes) == 0, "%s %s: in-place axpby_rows bits differ",
              gt_dtype_name(act), what);
    cr_expect(memcmp(a->drop, b->drop, a->drop_bytes) == 0, "%s %s: dropout bits differ", gt_dtype_name(act), what);
}

/* elementwise ops: the same bits for any thread count (CPU backend) */
Test(lora_ops, same_bits_for_1_and_2_threads) {
    Fx f1, f2;
    if (!fx_open_threads(&f1, GT_F32, 1)) cr_skip_test("thread counts are a CPU backend property");
    cr_assert(fx_open_threads(&f2, GT_F32, 2));
    float *xd, *xs, *xdrop;
    lora_inputs(&xd, &xs, &xdrop);
    for (int a = 0; a < 2; a++) {
        GtDtype act = a ? GT_BF16 : GT_F32;
        LoraOut o1 = lora_run(f1.be, act, xd, xs, xdrop), o2 = lora_run(f2.be, act, xd, xs, xdrop);
        expect_same(&o1, &o2, act, "1 vs 2 threads");
        lora_free(&o1);
        lora_free(&o2);
    }
    free(xd);
    free(xs);
    free(xdrop);
    fx_close(&f1);
    fx_close(&f2);
}

/* the CUDA backend gives the CPU backend's bits (a GPU, or the simulator) */
Test(lora_ops, cuda_bits_match_cpu, .timeout = 120) {
#ifdef GT_HAVE_CUDA
    if (backend_gpu_count() <= 0) cr_skip_test("no CUDA device visible");
    GtError err = {0};
    Backend *cpu = NULL, *gpu = NULL;
    cr_assert_eq(backend_open_cuda(&gpu, 0, &err), 0, "cuda backend: %s", err.msg);
    cr_assert_eq(cpu_backend_create(&cpu, 0, &err), 0, "cpu backend: %s", err.msg);
    float *xd, *xs, *xdrop;
    lora_inputs(&xd, &xs, &xdrop);
    for (int a = 0; a < 2; a++) {
        GtDtype act = a ? GT_BF16 : GT_F32;
        LoraOut oc = lora_run(cpu, act, xd, xs, xdrop), og = lora_run(gpu, act, xd, xs, xdrop);
        expect_same(&og, &oc, act, "cuda vs cpu");
        lora_free(&oc);
        lora_free(&og);
    }
    free(xd);
    free(xs);
    free(xdrop);
    backend_close(gpu);
    backend_close(cpu);
#else
    cr_skip_test("this build has no CUDA backend (built: %s)", backend_built_list());
#endif
}
