/* test_ops_llama.c - the Llama-family backend ops (rmsnorm, residual_rmsnorm, rope, swiglu),
 * attention with grouped-query heads and a sliding window, and the encoder without a position
 * embedding: against the naive double references (ref_llama_ops.c, ref_ops.c); the references'
 * backward against central finite differences of their own forward (and rope's against its
 * transpose); accumulate-vs-overwrite semantics; determinism, across thread counts too.
 *
 * Structured as test_ops.c, with its fixture (ops_fixture.h): the backend from
 * test_backend_open() (GTRAIN_TEST_DEVICE=cuda runs these tests on the CUDA backend; an op the
 * backend leaves NULL skips its test), outputs poisoned with NaN, the rel error metric with
 * TOL = 1e-5 for fp32 outputs and TOL_BF16 = 1e-2 for act outputs under bf16 (suite
 * ops_llama_bf16), where the act inputs are drawn as bf16 values so the reference sees what the
 * op sees. rope is also checked bit for bit against backend.h's formula evaluated in plain fp32
 * (each product rounded, then the sum; no fused multiply-add), which the CPU backend computes and
 * a CUDA kernel can match (__fmul_rn / __fadd_rn, see backend_cpu_llama.c): one rotation, the
 * same bits on every backend. Shapes are small (the CUDA simulator runs these too;
 * test_on_cudasim() shortens the two head-size-128 attention cases). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"
#include "ref_llama_ops.h"
#include "ref_ops.h"
#include "test_backend_select.h"

/* an op the backend has not filled in yet skips the test (CUDA while its kernels are written) */
#define NEED_OP(fx, op)                                                                            \
    do {                                                                                           \
        if (!(fx).be->ops->op) cr_skip_test("the %s backend has no " #op " yet", (fx).be->ops->name); \
    } while (0)

/* ------------------------------------------------------------------ rmsnorm */

static void check_rmsnorm(GtDtype act, int N, int C, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, rmsnorm_forward);
    NEED_OP(fx, rmsnorm_backward);
    Rng r = {seed};
    size_t NC = (size_t)N * C;
    float eps = 1e-5f;
    float *inp = rand_a(&fx, &r, NC, -2, 3), *w = rand_a(&fx, &r, C, 0.5f, 1.5f);
    float *dout = rand_a(&fx, &r, NC, -1, 1), *dinp0 = rand_a(&fx, &r, NC, -1, 1);
    float *dw0 = rand_f(&fx, &r, C, -1, 1);

    void *d_inp = dup_a(&fx, inp, NC), *d_w = dup_a(&fx, w, C), *d_out = dnan_a(&fx, NC);
    float *d_rstd = dnan(&fx, N);
    fx.be->ops->rmsnorm_forward(fx.be, d_out, d_rstd, d_inp, d_w, N, C, eps);
    void *d_dout = dup_a(&fx, dout, NC), *d_dinp = dup_a(&fx, dinp0, NC);
    float *d_dw = dup_f(&fx, dw0, C);
    fx.be->ops->rmsnorm_backward(fx.be, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);

    double *rinp = to_d(&fx, inp, NC), *rw = to_d(&fx, w, C), *rdout = to_d(&fx, dout, NC);
    double *ro = hd(&fx, NC), *rs = hd(&fx, N);
    ref_rmsnorm_forward(ro, rs, rinp, rw, N, C, eps);
    double *rdinp = to_d(&fx, dinp0, NC), *rdw = to_d(&fx, dw0, C);
    ref_rmsnorm_backward(rdinp, rdw, rdout, rinp, rw, N, C, eps);

    CHECK_A("rmsnorm out", get_a(&fx, d_out, NC), ro, NC, "N=%d C=%d", N, C);
    CHECK("rmsnorm rstd", get_f(&fx, d_rstd, N), rs, N, "N=%d C=%d", N, C);
    CHECK_A("rmsnorm dinp (accumulated)", get_a(&fx, d_dinp, NC), rdinp, NC, "N=%d C=%d", N, C);
    CHECK("rmsnorm dw (accumulated)", get_f(&fx, d_dw, C), rdw, C, "N=%d C=%d", N, C);

    /* from zero: the gradient alone, not diluted by the pre-filled values */
    float *z = hf(&fx, NC);
    up(&fx, d_dinp, z, backend_act_bytes(fx.be, NC)); /* zero bits are 0 in both dtypes */
    up(&fx, d_dw, z, C * sizeof(float));
    fx.be->ops->rmsnorm_backward(fx.be, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    memset(rdinp, 0, NC * sizeof(double));
    memset(rdw, 0, C * sizeof(double));
    ref_rmsnorm_backward(rdinp, rdw, rdout, rinp, rw, N, C, eps);
    CHECK_A("rmsnorm dinp (from zero)", get_a(&fx, d_dinp, NC), rdinp, NC, "N=%d C=%d", N, C);
    CHECK("rmsnorm dw (from zero)", get_f(&fx, d_dw, C), rdw, C, "N=%d C=%d", N, C);
    fx_close(&fx);
}

static void rmsnorm_cases(GtDtype act) {
    check_rmsnorm(act, 14, 20, 101);
    check_rmsnorm(act, 5, 37, 102);
    check_rmsnorm(act, 256, 128, 103); /* threaded */
    check_rmsnorm(act, 3, 1000, 104);  /* long rows, dw over several channel blocks */
    check_rmsnorm(act, 4, 4096, 106);  /* Mistral's width (CUDA: 128 threads a row, 2 rows a block) */
    check_rmsnorm(act, 3, wide_c(act), 105);     /* CUDA: 8 packs a thread, dw in the two-pass reduction */
    check_rmsnorm(act, 2, wide_c(act) - 1, 107); /* and not a multiple of the pack */
}
Test(ops_llama, rmsnorm) { rmsnorm_cases(GT_F32); }
Test(ops_llama_bf16, rmsnorm) { rmsnorm_cases(GT_BF16); }

/* alias: 0 res is its own buffer, 1 res aliases x, 2 res aliases y */
static void check_residual_rmsnorm(GtDtype act, int N, int C, int alias, uint64_t seed) {
    static const char *alias_name[3] = {"none", "res = x", "res = y"};
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, residual_rmsnorm_forward);
    NEED_OP(fx, rmsnorm_forward);
    Rng r = {seed};
    size_t NC = (size_t)N * C, ab = backend_act_bytes(fx.be, NC);
    float eps = 1e-6f;
    float *x = rand_a(&fx, &r, NC, -2, 2), *y = rand_a(&fx, &r, NC, -1, 3), *w = rand_a(&fx, &r, C, 0.5f, 1.5f);
    void *d_w = dup_a(&fx, w, C);
    void *d_x = dup_a(&fx, x, NC), *d_y = dup_a(&fx, y, NC);
    void *d_res = alias == 1 ? d_x : alias == 2 ? d_y : dnan_a(&fx, NC);
    void *d_out = dnan_a(&fx, NC);
    float *d_rstd = dnan(&fx, N);
    fx.be->ops->residual_rmsnorm_forward(fx.be, d_res, d_out, d_rstd, d_x, d_y, d_w, N, C, eps);
    float *res = get_a(&fx, d_res, NC);

    /* res against the exact sum; out/rstd against the rmsnorm of the res the op rounded (bf16:
     * as specified, the rmsnorm reads the rounded res) or of the exact sum (fp32) */
    double *rres = hd(&fx, NC), *ro = hd(&fx, NC), *rs = hd(&fx, N);
    ref_add(rres, to_d(&fx, x, NC), to_d(&fx, y, NC), NC);
    ref_rmsnorm_forward(ro, rs, act == GT_BF16 ? to_d(&fx, res, NC) : rres, to_d(&fx, w, C), N, C, eps);
    CHECK_A("residual_rmsnorm res", res, rres, NC, "N=%d C=%d alias=%s", N, C, alias_name[alias]);
    CHECK_A("residual_rmsnorm out", get_a(&fx, d_out, NC), ro, NC, "N=%d C=%d alias=%s", N, C, alias_name[alias]);
    CHECK("residual_rmsnorm rstd", get_f(&fx, d_rstd, N), rs, N, "N=%d C=%d alias=%s", N, C, alias_name[alias]);

    /* the unfused pair on the same backend, aliased the same way: the same bits */
    void *u_x = dup_a(&fx, x, NC), *u_y = dup_a(&fx, y, NC);
    void *u_res = alias == 1 ? u_x : alias == 2 ? u_y : dnan_a(&fx, NC);
    void *u_out = dnan_a(&fx, NC);
    float *u_rstd = dnan(&fx, N);
    fx.be->ops->add(fx.be, u_res, u_x, u_y, NC);
    fx.be->ops->rmsnorm_forward(fx.be, u_out, u_rstd, u_res, d_w, N, C, eps);
    const void *fused[3] = {d_res, d_out, d_rstd}, *pair[3] = {u_res, u_out, u_rstd};
    const size_t bytes[3] = {ab, ab, N * sizeof(float)};
    const char *what[3] = {"res", "out", "rstd"};
    for (int i = 0; i < 3; i++)
        cr_expect(memcmp(get_raw(&fx, fused[i], bytes[i]), get_raw(&fx, pair[i], bytes[i]), bytes[i]) == 0,
                  "residual_rmsnorm %s differs from add + rmsnorm_forward (%s, N=%d C=%d alias=%s)", what[i],
                  gt_dtype_name(act), N, C, alias_name[alias]);
    fx_close(&fx);
}

static void residual_rmsnorm_cases(GtDtype act) {
    check_residual_rmsnorm(act, 14, 20, 0, 110);
    check_residual_rmsnorm(act, 14, 20, 1, 111);
    check_residual_rmsnorm(act, 5, 37, 2, 112);
    check_residual_rmsnorm(act, 256, 128, 0, 113); /* threaded */
    check_residual_rmsnorm(act, 256, 128, 2, 114);
    check_residual_rmsnorm(act, 3, wide_c(act), 1, 115); /* CUDA: 8 packs a thread */
}
Test(ops_llama, residual_rmsnorm) { residual_rmsnorm_cases(GT_F32); }
Test(ops_llama_bf16, residual_rmsnorm) { residual_rmsnorm_cases(GT_BF16); }

/* ------------------------------------------------------------------ rope */


typedef struct {
    float *fcos, *fsin;  /* the op's tables */
    double *dcos, *dsin; /* the same values in double, for the reference */
} RopeTab;

/* the tables of `positions` rows as the model builds them: in double (base 10000), rounded once
 * to fp32; the reference reads the rounded values */
static RopeTab rope_tab(Fx *fx, int positions, int hs) {
    size_t n = (size_t)positions * (hs / 2);
    RopeTab t = {hf(fx, n), hf(fx, n), hd(fx, n), hd(fx, n)};
    ref_rope_tables(t.dcos, t.dsin, positions, hs, 10000.0);
    for (size_t i = 0; i < n; i++) {
        t.fcos[i] = (float)t.dcos[i];
        t.fsin[i] = (float)t.dsin[i];
        t.dcos[i] = t.fcos[i];
        t.dsin[i] = t.fsin[i];
    }
    return t;
}

/* rope in plain fp32 as backend.h writes it, every product and every sum rounded (separate
 * statements: C never fuses across them), in place on x (fp32, bf16 values under bf16) and then
 * rounded to the act dtype: the bits any backend must give. dir +1: forward, -1: backward. */
static void rope_expect(float *x, const RopeTab *tab, GtDtype act, int B, int T, int pos0, int NH, int NKV, int hs,
                        int dir) {
    const int half = hs / 2;
    const size_t R = (size_t)(NH + 2 * NKV) * hs;
    for (int bt = 0; bt < B * T; bt++)
        for (int h = 0; h < NH + NKV; h++) {
            float *v = x + (size_t)bt * R + (size_t)h * hs;
            for (int i = 0; i < half; i++) {
                size_t p = (size_t)(pos0 + bt % T) * half + i;
                float c = tab->fcos[p], s = tab->fsin[p], a = v[i], y = v[i + half];
                float ac = a * c, ys = y * s, yc = y * c, as = a * s;
                float lo = dir > 0 ? ac - ys : ac + ys, hi = dir > 0 ? yc + as : yc - as;
                v[i] = act == GT_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(lo)) : lo;
                v[i + half] = act == GT_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(hi)) : hi;
            }
        }
}

/* got vs the expected bits; the first difference says whether it is in a v head (which rope
 * must never touch) */
static void expect_same_bits(const char *what, const float *got, const float *want, size_t n, int NH, int NKV, int hs,
                             const char *shape) {
    const size_t R = (size_t)(NH + 2 * NKV) * hs;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            bool in_v = i % R >= (size_t)(NH + NKV) * hs;
            cr_expect_fail("%s: element %zu (%s) is %.9g, the fp32 formula gives %.9g (%s)", what, i,
                           in_v ? "a v head, which must stay untouched" : "a q/k head", got[i], want[i], shape);
            return;
        }
}

static void check_rope(GtDtype act, int B, int T, int pos0, int NH, int NKV, int hs, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, rope_forward);
    NEED_OP(fx, rope_backward);
    Rng r = {seed};
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * hs, ntab = (size_t)(pos0 + T) * (hs / 2);
    char shape[96];
    snprintf(shape, sizeof shape, "%s B=%d T=%d pos0=%d NH=%d NKV=%d hd=%d", gt_dtype_name(act), B, T, pos0, NH, NKV,
             hs);
    RopeTab tab = rope_tab(&fx, pos0 + T, hs);
    float *d_cos = dup_f(&fx, tab.fcos, ntab), *d_sin = dup_f(&fx, tab.fsin, ntab);
    float *x = rand_a(&fx, &r, n, -2, 2), *dy = rand_a(&fx, &r, n, -1, 1);

    void *d_x = dup_a(&fx, x, n);
    fx.be->ops->rope_forward(fx.be, d_x, d_cos, d_sin, B, T, pos0, NH, NKV, hs, NULL);
    float *got = get_a(&fx, d_x, n);
    double *rx = to_d(&fx, x, n);
    ref_rope_forward(rx, tab.dcos, tab.dsin, B, T, pos0, NH, NKV, hs);
    CHECK_A("rope forward", got, rx, n, "%s", shape);
    float *want = hf(&fx, n);
    memcpy(want, x, n * sizeof(float));
    rope_expect(want, &tab, act, B, T, pos0, NH, NKV, hs, +1);
    expect_same_bits("rope forward", got, want, n, NH, NKV, hs, shape);

    void *d_dy = dup_a(&fx, dy, n);
    fx.be->ops->rope_backward(fx.be, d_dy, d_cos, d_sin, B, T, NH, NKV, hs, NULL);
    got = get_a(&fx, d_dy, n);
    double *rdy = to_d(&fx, dy, n);
    ref_rope_backward(rdy, tab.dcos, tab.dsin, B, T, NH, NKV, hs);
    CHECK_A("rope backward", got, rdy, n, "%s", shape);
    want = hf(&fx, n);
    memcpy(want, dy, n * sizeof(float));
    rope_expect(want, &tab, act, B, T, 0, NH, NKV, hs, -1);
    expect_same_bits("rope backward", got, want, n, NH, NKV, hs, shape);
    fx_close(&fx);
}

static void rope_cases(GtDtype act) {
    check_rope(act, 1, 5, 0, 1, 1, 8, 120);
    check_rope(act, 2, 7, 3, 2, 2, 8, 121);
    check_rope(act, 2, 37, 11, 4, 2, 64, 122); /* grouped kv heads; threaded */
    check_rope(act, 2, 16, 0, 4, 1, 64, 123);  /* one kv head */
    check_rope(act, 1, 9, 100, 2, 1, 128, 124); /* far positions */
}
Test(ops_llama, rope) { rope_cases(GT_F32); }
Test(ops_llama_bf16, rope) { rope_cases(GT_BF16); }

/* ------------------------------------------------------------------ swiglu */

static void check_swiglu(GtDtype act, int N, int I, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    NEED_OP(fx, swiglu_forward);
    NEED_OP(fx, swiglu_backward);
    Rng r = {seed};
    const size_t NI = (size_t)N * I;
    float *gate = rand_a(&fx, &r, NI, -6, 6), *upv = rand_a(&fx, &r, NI, -2, 2), *dout = rand_a(&fx, &r, NI, -1, 1);
    /* saturated gates (exp(-g) overflows or vanishes in fp32) must give silu = 0 or g, no NaN;
     * their up and dout small, so that the outputs keep the scale of the others */
    const float extreme[] = {-100.0f, 100.0f, -30.0f, 30.0f, 0.0f};
    for (size_t i = 0; i < sizeof extreme / sizeof extreme[0] && i < NI; i++) {
        size_t at = i * 7 % NI;
        gate[at] = extreme[i];
        upv[at] = dout[at] = 0.0625f;
    }
    float *inp = hf(&fx, 2 * NI);
    for (int nrow = 0; nrow < N; nrow++) {
        memcpy(inp + (size_t)nrow * 2 * I, gate + (size_t)nrow * I, (size_t)I * sizeof(float));
        memcpy(inp + (size_t)nrow * 2 * I + I, upv + (size_t)nrow * I, (size_t)I * sizeof(float));
    }
    void *d_inp = dup_a(&fx, inp, 2 * NI), *d_out = dnan_a(&fx, NI), *d_dinp = dnan_a(&fx, 2 * NI);
    fx.be->ops->swiglu_forward(fx.be, d_out, d_inp, N, I);
    fx.be->ops->swiglu_backward(fx.be, d_dinp, d_inp, dup_a(&fx, dout, NI), N, I);

    double *rinp = to_d(&fx, inp, 2 * NI), *ro = hd(&fx, NI), *rd = hd(&fx, 2 * NI);
    ref_swiglu_forward(ro, rinp, N, I);
    ref_swiglu_backward(rd, rinp, to_d(&fx, dout, NI), N, I);
    CHECK_A("swiglu out", get_a(&fx, d_out, NI), ro, NI, "N=%d I=%d", N, I);
    CHECK_A("swiglu dinp", get_a(&fx, d_dinp, 2 * NI), rd, 2 * NI, "N=%d I=%d", N, I);
    fx_close(&fx);
}

static void swiglu_cases(GtDtype act) {
    check_swiglu(act, 7, 13, 130);
    check_swiglu(act, 3, 1, 131);
    check_swiglu(act, 64, 300, 132); /* threaded */
    check_swiglu(act, 5, 1000, 133);
}
Test(ops_llama, swiglu) { swiglu_cases(GT_F32); }
Test(ops_llama_bf16, swiglu) { swiglu_cases(GT_BF16); }

/* ------------------------------------------------------------------ attention */

/* grouped-query heads and sliding windows (the check itself is shared with test_ops.c, in
 * ops_fixture.c). Tiles are 64 keys on the CPU: T = 37 is one ragged tile, 70 two, 130 three;
 * window 5 at T = 130 skips tile 0 for the last query block, window 40 masks tiles partly and
 * skips some. */
static void attention_gqa_cases(GtDtype act) {
    const int T_big = test_on_cudasim() ? 70 : 130; /* the hd 128 cases, shorter on the simulator */
    const struct {
        AttCase c;
        bool ramp;
    } k[] = {
        {{2, 37, 2, 2, 16, 0}, false},      /* plain multi-head */
        {{2, 37, 4, 2, 16, 0}, false},      /* 2 query heads per kv head */
        {{1, 70, 4, 1, 16, 5}, false},      /* one kv head (MQA), window 5 */
        {{2, 37, 4, 2, 16, 1}, false},      /* window 1: each row sees itself only */
        {{1, 130, 4, 2, 32, 5}, true},      /* window 5 over three tiles, max moving to later keys */
        {{2, 130, 4, 1, 16, 40}, true},     /* MQA, window 40: partly masked and skipped tiles */
        {{2, 37, 4, 2, 64, 100}, false},    /* window > T: all keys */
        {{1, 130, 4, 2, 64, 70}, false},    /* hd 64, a window across two tile edges */
        {{2, 64, 8, 2, 32, 16}, false},     /* 4 query heads per kv head, exactly one tile */
        {{1, 1, 2, 1, 8, 1}, false},        /* a single position */
        {{1, T_big, 2, 1, 128, 0}, false},  /* hd 128 */
        {{1, T_big, 4, 2, 128, 40}, true},  /* hd 128, window 40, ramp */
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) check_attention_gqa(act, k[i].c, k[i].ramp, 140 + i);
}
Test(ops_llama, attention_gqa_window) { attention_gqa_cases(GT_F32); }
Test(ops_llama_bf16, attention_gqa_window) { attention_gqa_cases(GT_BF16); }

/* the CUDA tensor-core backward in one pass: each split (backend.h's backend_attention_dq_splits)
 * adds the dS K of its units of 128 keys into its own fp32 slice of dQ, dq is the slices' sum;
 * here S = 3 (T 300: units 0, 1, 2, a window of 100 reaching across them, GQA), S = 2 at hd 128
 * and 96, and S = 1 at T 128 (one unit: one 128-key block, or two 64-key blocks on the 4-warp
 * variant, both adding into the same rows), and S = 4 over 5 and 6 units (more units than splits:
 * a second round, dealt in reverse, backend.h), against the double reference. The CPU runs the
 * same cases through its own kernels. */
static const AttCase split_cases[] = {
    {1, 300, 4, 2, 64, 100}, /* S = 3, GQA, window */
    {2, 200, 2, 1, 128, 0},  /* S = 2, hd 128, causal */
    {1, 128, 4, 2, 64, 50},  /* S = 1, GQA, window */
    {1, 150, 2, 1, 96, 70},  /* S = 2, hd 96, window */
    {1, 700, 4, 2, 64, 200}, /* S = 4, 6 units: the second round dealt in reverse, short */
    {1, 600, 2, 1, 96, 0},   /* S = 4, 5 units */
};
/* the 4-warp variant (64-key blocks), the one a 99 KiB device runs at hd 96 and 128 (hd 64 runs
 * 8 warps in 97 KiB), on the simulator through GTCSIM_SMEM_OPTIN_KIB (on a GPU or the CPU the
 * variable does nothing) */
static const AttCase split_cases_small_smem[] = {
    {1, 300, 4, 2, 128, 100}, /* S = 3, GQA, window */
    {1, 128, 4, 2, 96, 50},   /* S = 1: two 64-key blocks adding into the same rows */
    {2, 130, 2, 1, 128, 0},   /* S = 2, the second unit two keys long */
    {1, 600, 2, 1, 128, 90},  /* S = 4, 5 units, window */
};
static void attention_split_cases(const AttCase *c, size_t n) {
    for (size_t i = 0; i < n; i++) check_attention_gqa(GT_BF16, c[i], i == 0, 170 + i);
}
Test(ops_llama_bf16, attention_one_pass_backward_splits, .timeout = 240) {
    attention_split_cases(split_cases, sizeof split_cases / sizeof split_cases[0]);
}
Test(ops_llama_bf16, attention_one_pass_backward_splits_small_smem, .timeout = 240) {
    setenv("GTCSIM_SMEM_OPTIN_KIB", "99", 1);
    attention_split_cases(split_cases_small_smem, sizeof split_cases_small_smem / sizeof split_cases_small_smem[0]);
}

/* ------------------------------------------------------------------ encoder without wpe */

static void check_encoder_nopos(GtDtype act, int B, int T, int C, int V, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    size_t BT = (size_t)B * T;
    int *tok = rand_i(&fx, &r, BT, V);
    tok[0] = tok[BT - 1] = V - 1; /* at least one repeated token */
    float *wte = rand_a(&fx, &r, (size_t)V * C, -1, 1), *dout = rand_a(&fx, &r, BT * C, -1, 1);
    float *dwte0 = rand_f(&fx, &r, (size_t)V * C, -1, 1);
    int *d_tok = dup_i(&fx, tok, BT);
    void *d_out = dnan_a(&fx, BT * C);
    fx.be->ops->encoder_forward(fx.be, d_out, d_tok, dup_a(&fx, wte, (size_t)V * C), NULL, B, T, C, NULL);
    float *d_dwte = dup_f(&fx, dwte0, (size_t)V * C);
    fx.be->ops->encoder_backward(fx.be, d_dwte, NULL, dup_a(&fx, dout, BT * C), d_tok, B, T, C, NULL);

    double *ro = hd(&fx, BT * C), *rdwte = to_d(&fx, dwte0, (size_t)V * C);
    ref_encoder_forward(ro, tok, to_d(&fx, wte, (size_t)V * C), NULL, B, T, C);
    ref_encoder_backward(rdwte, NULL, to_d(&fx, dout, BT * C), tok, B, T, C);
    CHECK_A("encoder out (no wpe)", get_a(&fx, d_out, BT * C), ro, BT * C, "B=%d T=%d C=%d", B, T, C);
    CHECK("encoder dwte (no dwpe, accumulated)", get_f(&fx, d_dwte, (size_t)V * C), rdwte, (size_t)V * C, "C=%d", C);
    fx_close(&fx);
}

static void encoder_nopos_cases(GtDtype act) {
    check_encoder_nopos(act, 2, 7, 20, 11, 150);
    check_encoder_nopos(act, 4, 64, 128, 50, 151); /* threaded */
}
Test(ops_llama, encoder_without_wpe) { encoder_nopos_cases(GT_F32); }
Test(ops_llama_bf16, encoder_without_wpe) { encoder_nopos_cases(GT_BF16); }

/* ------------------------------------------------------------------ determinism */

/* Every op of this file run twice on the same inputs (the accumulating rmsnorm_backward from the
 * same pre-filled state) gives the same bits, and so does a CPU backend with 1 and with 2
 * threads: each output element is owned by one thread and summed in a fixed order. Sizes are above
 * the threaded thresholds. */
enum { NDET = 14 };
static const char *const k_det_names[NDET] = {
    "rmsnorm out", "rmsnorm rstd", "rmsnorm dinp", "rmsnorm dw", "residual_rmsnorm res", "residual_rmsnorm out",
    "residual_rmsnorm rstd", "rope forward", "rope backward", "swiglu out", "swiglu dinp", "attention out",
    "attention lse", "attention dqkv"};
typedef struct {
    void *bytes[NDET];
} DetOut;

/* the ops once on fx's backend, inputs drawn from a fixed seed; the outputs' bytes go to keep (a
 * host-only fixture that outlives fx) */
static void det_run(Fx *fx, Fx *keep, DetOut *o, size_t nbytes[NDET]) {
    Rng r = {160};
    const int N = 256, C = 128, B = 2, T = 130, NH = 4, NKV = 2, hs = 32, W = 40, NI_N = 64, I = 300;
    const size_t NC = (size_t)N * C, nq = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
    const size_t nl = (size_t)B * NH * T, NI = (size_t)NI_N * I, ntab = (size_t)T * (hs / 2);
    Backend *b = fx->be;
    const BackendOps *ops = b->ops;

    void *x = dup_a(fx, rand_a(fx, &r, NC, -2, 2), NC), *y = dup_a(fx, rand_a(fx, &r, NC, -2, 2), NC);
    void *w = dup_a(fx, rand_a(fx, &r, C, 0.5f, 1.5f), C), *dy = dup_a(fx, rand_a(fx, &r, NC, -1, 1), NC);
    void *rn_out = dnan_a(fx, NC), *dinp = dup_a(fx, rand_a(fx, &r, NC, -1, 1), NC);
    float *rstd = dnan(fx, N), *dw = dup_f(fx, rand_f(fx, &r, C, -1, 1), C);
    ops->rmsnorm_forward(b, rn_out, rstd, x, w, N, C, 1e-5f);
    ops->rmsnorm_backward(b, dinp, dw, dy, x, w, rstd, N, C);
    void *res = dnan_a(fx, NC), *rr_out = dnan_a(fx, NC);
    float *rr_rstd = dnan(fx, N);
    ops->residual_rmsnorm_forward(b, res, rr_out, rr_rstd, x, y, w, N, C, 1e-5f);

    RopeTab tab = rope_tab(fx, T, hs);
    float *cs = dup_f(fx, tab.fcos, ntab), *sn = dup_f(fx, tab.fsin, ntab);
    void *rq = dup_a(fx, rand_a(fx, &r, nq, -2, 2), nq), *rdq = dup_a(fx, rand_a(fx, &r, nq, -1, 1), nq);
    ops->rope_forward(b, rq, cs, sn, B, T, 0, NH, NKV, hs, NULL);
    ops->rope_backward(b, rdq, cs, sn, B, T, NH, NKV, hs, NULL);

    void *sg_in = dup_a(fx, rand_a(fx, &r, 2 * NI, -6, 6), 2 * NI), *sg_dy = dup_a(fx, rand_a(fx, &r, NI, -1, 1), NI);
    void *sg_out = dnan_a(fx, NI), *sg_din = dnan_a(fx, 2 * NI);
    ops->swiglu_forward(b, sg_out, sg_in, NI_N, I);
    ops->swiglu_backward(b, sg_din, sg_in, sg_dy, NI_N, I);

    void *qkv = dup_a(fx, rand_a(fx, &r, nq, -2, 2), nq), *a_dy = dup_a(fx, rand_a(fx, &r, no, -1, 1), no);
    void *a_out = dnan_a(fx, no), *a_dq = dnan_a(fx, nq);
    float *lse = dnan(fx, nl), *ws = dnan(fx, backend_attention_workspace_floats(b->act_dtype, B, T, NH, NKV, hs));
    ops->attention_forward(b, a_out, lse, qkv, B, T, NH, NKV, hs, W, NULL);
    ops->attention_backward(b, a_dq, ws, a_dy, qkv, a_out, lse, B, T, NH, NKV, hs, W, NULL);

    const void *outs[NDET] = {rn_out, rstd, dinp, dw, res, rr_out, rr_rstd, rq, rdq, sg_out, sg_din, a_out, lse, a_dq};
    const size_t ab = gt_dtype_size(b->act_dtype);
    const size_t nb[NDET] = {NC * ab, N * 4, NC * ab, C * 4, NC * ab, NC * ab, N * 4, nq * ab, nq * ab, NI * ab,
                             2 * NI * ab, no * ab, nl * 4, nq * ab};
    for (int i = 0; i < NDET; i++) {
        void *h = hmem(keep, nb[i]);
        down(fx, h, outs[i], nb[i]);
        o->bytes[i] = h;
        nbytes[i] = nb[i];
    }
}

static void det_compare(const DetOut *a, const DetOut *b, const size_t nbytes[NDET], GtDtype act, const char *how) {
    for (int i = 0; i < NDET; i++)
        cr_expect(memcmp(a->bytes[i], b->bytes[i], nbytes[i]) == 0, "%s (%s) differs %s", k_det_names[i],
                  gt_dtype_name(act), how);
}

static void deterministic(GtDtype act) {
    Fx keep, fx;
    memset(&keep, 0, sizeof keep);
    fx_open_as(&fx, act);
    NEED_OP(fx, rmsnorm_forward);
    NEED_OP(fx, rmsnorm_backward);
    NEED_OP(fx, residual_rmsnorm_forward);
    NEED_OP(fx, rope_forward);
    NEED_OP(fx, rope_backward);
    NEED_OP(fx, swiglu_forward);
    NEED_OP(fx, swiglu_backward);
    DetOut a, b;
    size_t nbytes[NDET];
    det_run(&fx, &keep, &a, nbytes);
    det_run(&fx, &keep, &b, nbytes);
    fx_close(&fx);
    det_compare(&a, &b, nbytes, act, "between two calls");
    /* the CPU backend: the same bits with 1 and 2 threads */
    if (fx_open_threads(&fx, act, 1)) {
        det_run(&fx, &keep, &a, nbytes);
        fx_close(&fx);
        cr_assert(fx_open_threads(&fx, act, 2));
        det_run(&fx, &keep, &b, nbytes);
        fx_close(&fx);
        det_compare(&a, &b, nbytes, act, "between 1 and 2 threads");
    }
    fx_free_host(&keep);
}
Test(ops_llama, deterministic) { deterministic(GT_F32); }
Test(ops_llama_bf16, deterministic) { deterministic(GT_BF16); }

/* ------------------------------------------------------------------ the references themselves */

typedef struct {
    double *inp, *w, *dout, *out;
    int N, C;
} RowCtx;

static double rmsnorm_loss(void *p) {
    RowCtx *c = p;
    ref_rmsnorm_forward(c->out, NULL, c->inp, c->w, c->N, c->C, 1e-5);
    return dotd(c->out, c->dout, (size_t)c->N * c->C);
}

Test(ops_llama, reference_rmsnorm) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {170};
    int N = 3, C = 7;
    size_t NC = (size_t)N * C;
    RowCtx c = {rand_d(&fx, &r, NC, -2, 2), rand_d(&fx, &r, C, 0.5, 1.5), rand_d(&fx, &r, NC, -1, 1), hd(&fx, NC),
                N, C};
    double *dinp = hd(&fx, NC), *dw = hd(&fx, C);
    ref_rmsnorm_backward(dinp, dw, c.dout, c.inp, c.w, N, C, 1e-5);
    FD_EXPECT("rmsnorm dinp", fd_check(c.inp, NC, dinp, rmsnorm_loss, &c));
    FD_EXPECT("rmsnorm dw", fd_check(c.w, C, dw, rmsnorm_loss, &c));
    /* by hand: x = (3, 4), rms = sqrt(12.5); w = (1, 2) */
    double x[2] = {3, 4}, w[2] = {1, 2}, o[2], s;
    ref_rmsnorm_forward(o, &s, x, w, 1, 2, 0.0);
    cr_expect(fabs(o[0] - 3 / sqrt(12.5)) < 1e-15 && fabs(o[1] - 8 / sqrt(12.5)) < 1e-15, "rmsnorm (3, 4): %g %g", o[0],
              o[1]);
    cr_expect(fabs(s - 1 / sqrt(12.5)) < 1e-15, "rmsnorm rstd %g", s);
    fx_free_host(&fx);
}

static double swiglu_loss(void *p) {
    RowCtx *c = p;
    ref_swiglu_forward(c->out, c->inp, c->N, c->C);
    return dotd(c->out, c->dout, (size_t)c->N * c->C);
}

Test(ops_llama, reference_swiglu) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {171};
    int N = 3, I = 5;
    size_t NI = (size_t)N * I;
    RowCtx c = {rand_d(&fx, &r, 2 * NI, -5, 5), NULL, rand_d(&fx, &r, NI, -1, 1), hd(&fx, NI), N, I};
    double *dinp = hd(&fx, 2 * NI);
    ref_swiglu_backward(dinp, c.inp, c.dout, N, I);
    FD_EXPECT("swiglu dinp", fd_check(c.inp, 2 * NI, dinp, swiglu_loss, &c));
    /* by hand: silu(1) = 1 / (1 + e^-1) = 0.7310585786300049, times up = 2 */
    double in[2] = {1, 2}, o;
    ref_swiglu_forward(&o, in, 1, 1);
    cr_expect(fabs(o - 2 * 0.7310585786300049) < 1e-15, "swiglu(1, 2) = %.17g", o);
    fx_free_host(&fx);
}

/* rope is linear and orthogonal: its backward is its transpose, <fwd(x), y> = <x, bwd(y)>, and it
 * is HF's rotate_half (x[i] pairs with x[i + hd/2]) at a hand-computed point */
Test(ops_llama, reference_rope) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {172};
    int B = 2, T = 5, NH = 2, NKV = 1, hs = 8;
    size_t n = (size_t)B * T * (NH + 2 * NKV) * hs, ntab = (size_t)T * (hs / 2);
    double *cs = hd(&fx, ntab), *sn = hd(&fx, ntab);
    ref_rope_tables(cs, sn, T, hs, 10000.0);
    double *x = rand_d(&fx, &r, n, -1, 1), *y = rand_d(&fx, &r, n, -1, 1);
    double *fx_ = hd(&fx, n), *by = hd(&fx, n);
    memcpy(fx_, x, n * sizeof(double));
    memcpy(by, y, n * sizeof(double));
    ref_rope_forward(fx_, cs, sn, B, T, 0, NH, NKV, hs);
    ref_rope_backward(by, cs, sn, B, T, NH, NKV, hs);
    double l = dotd(fx_, y, n), rt = dotd(x, by, n);
    cr_expect(fabs(l - rt) < 1e-12 * fabs(l), "rope: <fwd x, y> = %.17g, <x, bwd y> = %.17g", l, rt);
    double nx = dotd(x, x, n), nf = dotd(fx_, fx_, n);
    cr_expect(fabs(nx - nf) < 1e-12 * nx, "rope changes the norm: %.17g vs %.17g", nx, nf);

    /* one q, one k, one v head of 4 at position 1 (pos0 = 1, T = 1): angles 1 and 10000^-1/2 */
    double tc[4], ts[4];
    ref_rope_tables(tc, ts, 2, 4, 10000.0);
    double row[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    ref_rope_forward(row, tc, ts, 1, 1, 1, 1, 1, 4);
    double a0 = 1.0, a1 = 0.01;
    double want[12] = {1 * cos(a0) - 3 * sin(a0), 2 * cos(a1) - 4 * sin(a1), 3 * cos(a0) + 1 * sin(a0),
                       4 * cos(a1) + 2 * sin(a1), 5 * cos(a0) - 7 * sin(a0), 6 * cos(a1) - 8 * sin(a1),
                       7 * cos(a0) + 5 * sin(a0), 8 * cos(a1) + 6 * sin(a1), 9, 10, 11, 12};
    for (int i = 0; i < 12; i++)
        cr_expect(fabs(row[i] - want[i]) < 1e-14, "rope by hand: [%d] %.17g, want %.17g", i, row[i], want[i]);
    fx_free_host(&fx);
}

typedef struct {
    double *qkv, *dout, *out;
    AttCase s;
} GqaCtx;

static double gqa_loss(void *p) {
    GqaCtx *c = p;
    ref_attention_gqa_forward(c->out, NULL, c->qkv, c->s.B, c->s.T, c->s.NH, c->s.NKV, c->s.hd, c->s.window);
    return dotd(c->out, c->dout, (size_t)c->s.B * c->s.T * c->s.NH * c->s.hd);
}

Test(ops_llama, reference_attention_fd) {
    const AttCase shapes[] = {{1, 6, 4, 2, 4, 0}, {2, 7, 2, 1, 3, 3}, {1, 5, 3, 1, 4, 1}, {1, 6, 2, 2, 4, 2}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        Fx fx;
        memset(&fx, 0, sizeof fx);
        Rng r = {173 + k};
        AttCase s = shapes[k];
        size_t n3 = (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.hd, no = (size_t)s.B * s.T * s.NH * s.hd;
        GqaCtx c = {rand_d(&fx, &r, n3, -2, 2), rand_d(&fx, &r, no, -1, 1), hd(&fx, no), s};
        double *dqkv = hd(&fx, n3);
        ref_attention_gqa_backward(dqkv, c.dout, c.qkv, NULL, s.B, s.T, s.NH, s.NKV, s.hd, s.window);
        double e = fd_check(c.qkv, n3, dqkv, gqa_loss, &c);
        cr_expect_leq(e, FD_TOL, "attention dqkv (NH=%d NKV=%d window=%d): reference vs finite differences %.3g", s.NH,
                      s.NKV, s.window, e);
        fx_free_host(&fx);
    }
}

/* the reference's head mapping is HF's repeat_kv: grouped-query attention equals multi-head
 * attention on k and v heads repeated G times, whose dK, dV summed over each group are the
 * grouped ones; and window 1 gives out = the row's own v, lse = its own score */
Test(ops_llama, reference_attention_gqa_is_repeated_kv) {
    Fx fx;
    memset(&fx, 0, sizeof fx);
    Rng r = {180};
    const int B = 2, T = 9, NH = 6, NKV = 2, hs = 4, W = 4, G = NH / NKV;
    const size_t Rg = (size_t)(NH + 2 * NKV) * hs, Rm = (size_t)3 * NH * hs, C = (size_t)NH * hs;
    const size_t BT = (size_t)B * T, no = BT * C, nl = (size_t)B * NH * T;
    double *g = rand_d(&fx, &r, BT * Rg, -2, 2), *dout = rand_d(&fx, &r, no, -1, 1), *m = hd(&fx, BT * Rm);
    for (size_t bt = 0; bt < BT; bt++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                const double *gr = g + bt * Rg;
                double *mr = m + bt * Rm;
                mr[h * hs + i] = gr[h * hs + i];
                mr[C + h * hs + i] = gr[(NH + h / G) * hs + i];
                mr[2 * C + h * hs + i] = gr[(NH + NKV + h / G) * hs + i];
            }
    double *og = hd(&fx, no), *om = hd(&fx, no), *lg = hd(&fx, nl), *lm = hd(&fx, nl);
    ref_attention_gqa_forward(og, lg, g, B, T, NH, NKV, hs, W);
    ref_attention_gqa_forward(om, lm, m, B, T, NH, NH, hs, W);
    double *dg = hd(&fx, BT * Rg), *dm = hd(&fx, BT * Rm);
    ref_attention_gqa_backward(dg, dout, g, NULL, B, T, NH, NKV, hs, W);
    ref_attention_gqa_backward(dm, dout, m, NULL, B, T, NH, NH, hs, W);
    double worst = 0.0;
    for (size_t i = 0; i < no; i++) worst = fmax(worst, fabs(og[i] - om[i]));
    for (size_t i = 0; i < nl; i++) worst = fmax(worst, fabs(lg[i] - lm[i]));
    for (size_t bt = 0; bt < BT; bt++)
        for (int i = 0; i < hs; i++) {
            for (int h = 0; h < NH; h++) worst = fmax(worst, fabs(dg[bt * Rg + h * hs + i] - dm[bt * Rm + h * hs + i]));
            for (int kv = 0; kv < NKV; kv++)
                for (int part = 1; part <= 2; part++) {
                    double sum = 0.0;
                    for (int h = kv * G; h < (kv + 1) * G; h++) sum += dm[bt * Rm + part * C + h * hs + i];
                    worst = fmax(worst, fabs(dg[bt * Rg + (NH + (part - 1) * NKV + kv) * hs + i] - sum));
                }
        }
    cr_expect_lt(worst, 1e-12, "grouped-query reference vs repeated kv heads: %g", worst);

    ref_attention_gqa_forward(og, lg, g, B, T, NH, NKV, hs, 1);
    worst = 0.0;
    for (size_t bt = 0; bt < BT; bt++)
        for (int h = 0; h < NH; h++) {
            const double *q = g + bt * Rg + h * hs, *k = g + bt * Rg + (NH + h / G) * hs, *v = k + NKV * hs;
            for (int i = 0; i < hs; i++) worst = fmax(worst, fabs(og[bt * C + h * hs + i] - v[i]));
            double s = dotd(q, k, hs) / sqrt((double)hs);
            size_t b = bt / T, t = bt % T;
            worst = fmax(worst, fabs(lg[(b * NH + h) * T + t] - s));
        }
    cr_expect_lt(worst, 1e-12, "window 1: out must be the row's own v, lse its own score (%g)", worst);
    fx_free_host(&fx);
}
