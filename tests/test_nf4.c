/* test_nf4.c - nf4.c against bitsandbytes itself (its CPU path, tests/tools/bnb_nf4_ref.py): the
 * code tables, the packed 4-bit codes and absmax of quantize_4bit (with and without double
 * quantization, blocksizes 64 and 128, a numel that is odd and not a multiple of the blocksize, an
 * all-zero block, an outlier), the nested state given bnb's offset, and dequantize_4bit's fp32 and
 * bf16 values from bnb's own unit, bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nf4.h"
#include "test_util.h"

typedef struct {
    const char *name;
    int64_t numel;
    int blocksize;
    bool nested;
} Case;

static const Case CASES[] = {
    {"dq64", 64 * 300 + 64, 64, true},  /* 301 blocks: two nested blocks */
    {"sq64", 64 * 40, 64, false},
    {"dq128", 128 * 9 + 38, 128, true}, /* a remainder block */
    {"odd", 1001, 64, true},            /* odd numel: a padded last nibble */
    {"odd_sq", 333, 64, false},
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    cr_assert(len >= 0);
    rewind(f);
    void *p = malloc((size_t)len + 1);
    cr_assert(p);
    cr_assert_eq(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* values of several scales: normal, a block of zeros, one outlier */
static float *case_input(const Case *c, uint64_t seed) {
    float *x = malloc((size_t)c->numel * sizeof *x);
    cr_assert(x);
    uint64_t st = seed;
    for (int64_t i = 0; i < c->numel; i++) x[i] = (float)(test_normal(&st) * (0.02 + 0.01 * (double)(i % 7)));
    for (int64_t i = c->blocksize; i < 2 * c->blocksize && i < c->numel; i++) x[i] = 0.0f;
    x[c->numel / 2] = 3.5f;
    return x;
}

Test(nf4, matches_bitsandbytes, .timeout = 300) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT not set (run through make test)");
    test_require_refs();
    char dir[128], args[1024] = "";
    test_scratch_make(dir, sizeof dir, "gt_nf4");
    float *in[N_CASES];
    for (int c = 0; c < N_CASES; c++) {
        in[c] = case_input(&CASES[c], 1000 + (uint64_t)c);
        char name[64];
        snprintf(name, sizeof name, "%s.f32", CASES[c].name);
        test_write_file(test_join(dir, name), in[c], (size_t)CASES[c].numel * sizeof(float));
        snprintf(args + strlen(args), sizeof args - strlen(args), " %s:%lld:%d:%d", CASES[c].name,
                 (long long)CASES[c].numel, CASES[c].blocksize, CASES[c].nested);
    }
    free(test_sh_output(true, PY " '%s/tests/tools/bnb_nf4_ref.py' '%s'%s", root, dir, args));

    size_t n;
    float *codes = read_all(test_join(dir, "codes.f32"), &n);
    cr_assert_eq(n, (16 + 256) * sizeof(float));
    cr_assert(memcmp(codes, NF4_CODE, sizeof NF4_CODE) == 0, "NF4_CODE differs from bnb's get_4bit_type(\"nf4\")");
    cr_assert(memcmp(codes + 16, NF4_DYNAMIC_CODE, sizeof NF4_DYNAMIC_CODE) == 0,
              "NF4_DYNAMIC_CODE differs from bnb's create_dynamic_map(signed=True)");
    free(codes);

    for (int c = 0; c < N_CASES; c++) {
        const Case *k = &CASES[c];
        Nf4Format f = {k->numel, k->blocksize, k->nested};
        Nf4Layout l;
        nf4_layout(&f, &l);
        char path[64];
#define REF(ext) (snprintf(path, sizeof path, "%s.%s", k->name, ext), read_all(test_join(dir, path), &n))
        uint8_t *ours = malloc(l.bytes), *theirs = calloc(1, l.bytes);
        cr_assert(ours && theirs);
        nf4_quantize(&f, in[c], ours);

        uint8_t *packed = REF("packed");
        cr_assert_eq(n, ((size_t)k->numel + 1) / 2, "%s: bnb packed %zu bytes", k->name, n);
        cr_assert(memcmp(ours, packed, n) == 0, "%s: packed 4-bit codes differ from bnb's", k->name);
        memcpy(theirs, packed, n);
        uint8_t *absmax = REF("absmax");
        cr_assert_eq(n, (size_t)l.nblocks * (k->nested ? 1 : 4), "%s: bnb absmax %zu bytes", k->name, n);
        memcpy(theirs + l.absmax, absmax, n);
        if (!k->nested) {
            cr_assert(memcmp(ours + l.absmax, absmax, n) == 0, "%s: absmax differs from bnb's", k->name);
        } else {
            float *off = REF("offset"), ours_off;
            memcpy(&ours_off, ours + l.offset, 4);
            /* the correctly rounded mean vs torch's float sum: within a few ulps */
            cr_assert(fabsf(ours_off - off[0]) <= 4e-7f * fabsf(off[0]), "%s: offset %.9g vs bnb's %.9g", k->name,
                      ours_off, off[0]);
            float *nested = REF("nested");
            cr_assert_eq(n, (size_t)l.nnested * 4);
            memcpy(theirs + l.nested_absmax, nested, n);
            memcpy(theirs + l.offset, off, 4);
            /* with bnb's own offset: the nested scales are bnb's bit for bit; each absmax code is
             * the nearest dynamic code to (absmax - offset) / scale, where bnb's native CPU search
             * (BinSearch in float) may return the other neighbour near a midpoint: ours is then
             * bnb's or its neighbour, and never farther */
            nf4_quantize_with_offset(&f, in[c], off[0], ours);
            cr_assert(memcmp(ours, packed, ((size_t)k->numel + 1) / 2) == 0);
            cr_assert(memcmp(ours + l.nested_absmax, nested, n) == 0, "%s: nested absmax differs from bnb's", k->name);
            const float *scale = nested;
            int64_t moved = 0;
            for (int64_t b = 0; b < l.nblocks; b++) {
                const int qo = ours[l.absmax + (size_t)b], qb = absmax[b];
                cr_assert(abs(qo - qb) <= 1, "%s: absmax %lld code %d, bnb's %d", k->name, (long long)b, qo, qb);
                if (qo == qb) continue;
                moved++;
                float am = 0.0f; /* this block's absmax as bnb's quantize_4bit computed it */
                for (int64_t e = b * k->blocksize; e < (b + 1) * k->blocksize && e < k->numel; e++)
                    am = fmaxf(am, fabsf(in[c][e]));
                const double v = ((double)am - off[0]) / scale[b / NF4_NESTED_BLOCK];
                cr_assert(fabs(v - NF4_DYNAMIC_CODE[qo]) <= fabs(v - NF4_DYNAMIC_CODE[qb]) + 1e-6,
                          "%s: absmax %lld: our code %d is farther than bnb's %d", k->name, (long long)b, qo, qb);
            }
            cr_assert(moved * 50 <= l.nblocks, "%s: %lld of %lld absmax codes differ from bnb's", k->name,
                      (long long)moved, (long long)l.nblocks);
            free(off);
            free(nested);
        }
        float *deq32 = REF("deq32"), *mine = malloc((size_t)k->numel * 4);
        cr_assert_eq(n, (size_t)k->numel * 4);
        nf4_dequantize_f32(&f, theirs, 0, k->numel, mine);
        cr_assert(memcmp(mine, deq32, n) == 0, "%s: fp32 dequantized values differ from bnb's", k->name);
        /* a range inside the tensor, across a block boundary */
        const int64_t e0 = k->blocksize / 2 + 1, cnt = k->numel - e0 - 3;
        nf4_dequantize_f32(&f, theirs, e0, cnt, mine);
        cr_assert(memcmp(mine, deq32 + e0, (size_t)cnt * 4) == 0, "%s: a range's values differ", k->name);
        uint16_t *deq16 = REF("deq16"), *mine16 = malloc((size_t)k->numel * 2);
        cr_assert_eq(n, (size_t)k->numel * 2);
        nf4_dequantize_bf16(&f, theirs, 0, k->numel, mine16);
        cr_assert(memcmp(mine16, deq16, n) == 0, "%s: bf16 dequantized values differ from bnb's", k->name);
#undef REF
        free(ours), free(theirs), free(packed), free(absmax), free(deq32), free(mine), free(deq16), free(mine16);
        free(in[c]);
    }
    test_scratch_remove(dir);
}

/* The QLoRA paper's definitions, independently: each value's code is the nearest NF4 value to
 * x / absmax (a double comparison), and the absmax is the block's max |x|. */
Test(nf4, nearest_code_by_definition) {
    Nf4Format f = {64 * 50 + 10, 64, false};
    Nf4Layout l;
    nf4_layout(&f, &l);
    float *x = malloc((size_t)f.numel * 4), *back = malloc((size_t)f.numel * 4);
    uint8_t *u = malloc(l.bytes);
    cr_assert(x && back && u);
    uint64_t st = 7;
    for (int64_t i = 0; i < f.numel; i++) x[i] = (float)test_normal(&st);
    nf4_quantize(&f, x, u);
    nf4_dequantize_f32(&f, u, 0, f.numel, back);
    for (int64_t b = 0; b < l.nblocks; b++) {
        double m = 0;
        for (int64_t e = b * 64; e < (b + 1) * 64 && e < f.numel; e++) m = fmax(m, fabs(x[e]));
        cr_assert_float_eq(nf4_absmax(&f, u, b), (float)m, 0, "block %lld absmax", (long long)b);
        for (int64_t e = b * 64; e < (b + 1) * 64 && e < f.numel; e++) {
            const double v = x[e] / m;
            double best = 1e9;
            for (int q = 0; q < 16; q++) best = fmin(best, fabs(v - NF4_CODE[q]));
            const double got = fabs((double)back[e] / m - v);
            cr_assert(got <= best + 1e-6, "element %lld: |deq - x| / absmax %.9g, the nearest code is %.9g away",
                      (long long)e, got, best);
        }
    }
    free(x), free(back), free(u);
}

Test(nf4, format_check) {
    char why[128];
    Nf4Format ok = {100, 64, true}, bad_bs = {100, 48, false}, big = {100, 8192, false}, empty = {0, 64, false};
    cr_assert_eq(nf4_format_check(&ok, why, sizeof why), 0);
    cr_assert_eq(nf4_format_check(&bad_bs, why, sizeof why), -1);
    cr_assert(strstr(why, "blocksize 48"), "%s", why);
    cr_assert_eq(nf4_format_check(&big, why, sizeof why), -1);
    cr_assert_eq(nf4_format_check(&empty, why, sizeof why), -1);
    Nf4Layout l;
    nf4_layout(&ok, &l); /* 50 packed bytes, 2 absmax codes, 1 nested scale, the offset */
    cr_assert_eq(l.absmax, 64);
    cr_assert_eq(l.nested_absmax, 80);
    cr_assert_eq(l.offset, 84);
    cr_assert_eq(l.bytes, 96);
}
