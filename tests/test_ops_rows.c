/* test_ops_rows.c - the row ops' memory paths: rmsnorm, residual_rmsnorm, layernorm (forward,
 * backward) and crossentropy with every tensor one element past a 16-byte boundary, against the
 * same ops on aligned buffers (bit for bit: the CUDA row kernels move packs through one 16-byte
 * access only when every pointer is aligned, else element by element with the same arithmetic,
 * kernels_norms.cu; recompute's bit-identity relies on the result not depending on where a
 * buffer lies) and against the double references (ref_ops.c, ref_llama_ops.c); and the widths
 * at which the CUDA kernels change shape (test_ops.c and test_ops_llama.c hold the plain cases):
 * rows of several warps, rows held 16 packs a thread, vocabularies held 8 and 16 packs a thread
 * and wider ones read twice.
 *
 * Suites ops_llama / ops_llama_bf16 (fixture and tolerances: ops_fixture.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"
#include "ref_llama_ops.h"
#include "ref_ops.h"
#include "test_backend_select.h"

/* an act tensor holding h[0..n), on the device at an address one element past an allocation's
 * start (shift 1: not 16-byte aligned), or at the start (shift 0) */
static void *dev_a(Fx *fx, const float *h, size_t n, int shift) {
    float *t = calloc(n + 1, sizeof(float));
    cr_assert_not_null(t);
    memcpy(t + shift, h, n * sizeof(float));
    char *d = dup_a(fx, t, n + 1);
    free(t);
    return d + backend_act_bytes(fx->be, (size_t)shift);
}

/* the two device buffers hold the same bytes */
static bool same_bytes(Fx *fx, const void *a, const void *b, size_t bytes) {
    char *ha = malloc(bytes), *hb = malloc(bytes);
    cr_assert(ha && hb);
    down(fx, ha, a, bytes);
    down(fx, hb, b, bytes);
    const bool same = memcmp(ha, hb, bytes) == 0;
    free(ha);
    free(hb);
    return same;
}

typedef struct {
    void *res, *out, *dinp, *lout, *ldinp, *logits;
    float *rstd, *dw, *mean, *lrstd, *ldw, *ldb, *loss;
} RowOuts;

/* the row ops on tensors at the given shift; x, y, w, bias, dout, dinp0: host values */
static RowOuts run_rows(Fx *fx, int shift, int N, int C, int V, const float *x, const float *y, const float *w,
                        const float *bias, const float *dout, const float *dinp0, const float *lg, const int *tgt) {
    const size_t NC = (size_t)N * C;
    float *nan = hf(fx, NC > (size_t)N * V ? NC : (size_t)N * V);
    for (size_t i = 0; i < NC || i < (size_t)N * V; i++) nan[i] = NAN;
    RowOuts o;
    void *d_x = dev_a(fx, x, NC, shift), *d_y = dev_a(fx, y, NC, shift), *d_w = dev_a(fx, w, C, shift);
    void *d_b = dev_a(fx, bias, C, shift), *d_dout = dev_a(fx, dout, NC, shift);
    o.res = dev_a(fx, nan, NC, shift);
    o.out = dev_a(fx, nan, NC, shift);
    o.rstd = dnan(fx, N);
    backend_residual_rmsnorm_forward(fx->be, o.res, o.out, o.rstd, d_x, d_y, d_w, N, C, 1e-5f);
    o.dinp = dev_a(fx, dinp0, NC, shift);
    float *zero = hf(fx, C);
    o.dw = dup_f(fx, zero, C);
    fx->be->ops->rmsnorm_backward(fx->be, o.dinp, o.dw, d_dout, o.res, d_w, o.rstd, N, C);
    o.lout = dev_a(fx, nan, NC, shift);
    o.mean = dnan(fx, N);
    o.lrstd = dnan(fx, N);
    fx->be->ops->layernorm_forward(fx->be, o.lout, o.mean, o.lrstd, o.res, d_w, d_b, N, C, 1e-5f);
    o.ldinp = dev_a(fx, dinp0, NC, shift);
    o.ldw = dup_f(fx, zero, C);
    o.ldb = dup_f(fx, zero, C);
    fx->be->ops->layernorm_backward(fx->be, o.ldinp, o.ldw, o.ldb, d_dout, o.res, d_w, o.mean, o.lrstd, N, C);
    o.logits = dev_a(fx, lg, (size_t)N * V, shift);
    o.loss = dnan(fx, N);
    fx->be->ops->crossentropy(fx->be, o.loss, o.logits, dup_i(fx, tgt, N), N, V, V, 1.0f / 7.0f, 1);
    return o;
}

static void rows_unaligned(GtDtype act) {
    Fx fx;
    fx_open_as(&fx, act);
    if (!fx.be->ops->rmsnorm_forward) cr_skip_test("the %s backend has no rmsnorm", fx.be->ops->name);
    Rng r = {331};
    const int N = 6, C = 64, V = 1000; /* C, V multiples of the pack: aligned buffers take 16-byte accesses */
    const size_t NC = (size_t)N * C, NV = (size_t)N * V, ab = backend_act_bytes(fx.be, NC);
    float *x = rand_a(&fx, &r, NC, -2, 2), *y = rand_a(&fx, &r, NC, -1, 3), *w = rand_a(&fx, &r, C, 0.5f, 1.5f);
    float *bias = rand_a(&fx, &r, C, -0.5f, 0.5f), *dout = rand_a(&fx, &r, NC, -1, 1);
    float *dinp0 = rand_a(&fx, &r, NC, -1, 1), *lg = rand_a(&fx, &r, NV, -4, 4);
    int *tgt = rand_i(&fx, &r, N, V);
    tgt[2] = -100;
    RowOuts a = run_rows(&fx, 0, N, C, V, x, y, w, bias, dout, dinp0, lg, tgt);
    RowOuts u = run_rows(&fx, 1, N, C, V, x, y, w, bias, dout, dinp0, lg, tgt);
    const void *pa[] = {a.res, a.out, a.dinp, a.lout, a.ldinp, a.logits, a.rstd, a.dw, a.mean, a.lrstd, a.ldw, a.ldb, a.loss};
    const void *pu[] = {u.res, u.out, u.dinp, u.lout, u.ldinp, u.logits, u.rstd, u.dw, u.mean, u.lrstd, u.ldw, u.ldb, u.loss};
    const size_t bytes[] = {ab, ab, ab, ab, ab, backend_act_bytes(fx.be, NV), N * 4, C * 4, N * 4, N * 4, C * 4, C * 4, N * 4};
    const char *what[] = {"residual_rmsnorm res", "residual_rmsnorm out", "rmsnorm_backward dinp", "layernorm out",
                          "layernorm_backward dinp", "crossentropy dlogits", "rmsnorm rstd", "rmsnorm dw",
                          "layernorm mean", "layernorm rstd", "layernorm dw", "layernorm dbias", "crossentropy losses"};
    for (int i = 0; i < 13; i++)
        cr_expect(same_bytes(&fx, pa[i], pu[i], bytes[i]),
                  "%s: not 16-byte aligned differs from aligned (%s)", what[i], gt_dtype_name(act));

    /* the unaligned run against the double references (the norms of the res the op rounded) */
    float *res = get_a(&fx, u.res, NC);
    double *rres = hd(&fx, NC), *ro = hd(&fx, NC), *rs = hd(&fx, N), *rm = hd(&fx, N);
    ref_add(rres, to_d(&fx, x, NC), to_d(&fx, y, NC), NC);
    CHECK_A("res (unaligned)", res, rres, NC, "N=%d C=%d", N, C);
    double *rin = to_d(&fx, res, NC), *rw = to_d(&fx, w, C), *rdout = to_d(&fx, dout, NC);
    ref_rmsnorm_forward(ro, rs, rin, rw, N, C, 1e-5);
    CHECK_A("rmsnorm out (unaligned)", get_a(&fx, u.out, NC), ro, NC, "N=%d C=%d", N, C);
    CHECK("rmsnorm rstd (unaligned)", get_f(&fx, u.rstd, N), rs, N, "N=%d C=%d", N, C);
    double *rdinp = to_d(&fx, dinp0, NC), *rdw = hd(&fx, C), *rdb = hd(&fx, C);
    ref_rmsnorm_backward(rdinp, rdw, rdout, rin, rw, N, C, 1e-5);
    CHECK_A("rmsnorm dinp (unaligned)", get_a(&fx, u.dinp, NC), rdinp, NC, "N=%d C=%d", N, C);
    CHECK("rmsnorm dw (unaligned)", get_f(&fx, u.dw, C), rdw, C, "N=%d C=%d", N, C);
    ref_layernorm_forward(ro, rm, rs, rin, rw, to_d(&fx, bias, C), N, C, 1e-5);
    CHECK_A("layernorm out (unaligned)", get_a(&fx, u.lout, NC), ro, NC, "N=%d C=%d", N, C);
    rdinp = to_d(&fx, dinp0, NC);
    memset(rdw, 0, C * sizeof(double));
    ref_layernorm_backward(rdinp, rdw, rdb, rdout, rin, rw, N, C, 1e-5);
    CHECK_A("layernorm dinp (unaligned)", get_a(&fx, u.ldinp, NC), rdinp, NC, "N=%d C=%d", N, C);
    CHECK("layernorm dw (unaligned)", get_f(&fx, u.ldw, C), rdw, C, "N=%d C=%d", N, C);
    CHECK("layernorm dbias (unaligned)", get_f(&fx, u.ldb, C), rdb, C, "N=%d C=%d", N, C);
    double *rloss = hd(&fx, N), *rdl = hd(&fx, NV);
    ref_crossentropy(rloss, rdl, to_d(&fx, lg, NV), tgt, N, V, 1.0 / 7.0);
    CHECK("crossentropy losses (unaligned)", get_f(&fx, u.loss, N), rloss, N, "N=%d V=%d", N, V);
    CHECK_A("crossentropy dlogits (unaligned)", get_a(&fx, u.logits, NV), rdl, NV, "N=%d V=%d", N, V);
    fx_close(&fx);
}
Test(ops_llama, rows_unaligned) { rows_unaligned(GT_F32); }
Test(ops_llama_bf16, rows_unaligned) { rows_unaligned(GT_BF16); }

/* crossentropy over wide vocabularies: the losses and the gradient against the double reference.
 * CUDA (512 threads a row): bf16 32000 holds 8 packs a thread, 50257 (GPT-2's, not a multiple of
 * the pack) 16, 70001 more than that (read twice); fp32 32000 takes 16 packs a thread, the others
 * the twice-read path. Logits spread over [-8, 8]: the running max grows many times along a row. */
static void crossentropy_wide(GtDtype act) {
    static const int vocab[] = {32000, 50257, 70001};
    for (int k = 0; k < 3; k++) {
        Fx fx;
        fx_open_as(&fx, act);
        Rng r = {900 + (uint64_t)k};
        const int N = 3, V = vocab[k];
        const size_t NV = (size_t)N * V;
        float *lg = rand_a(&fx, &r, NV, -8, 8);
        int *tgt = rand_i(&fx, &r, N, V);
        double *rloss = hd(&fx, N), *rdl = hd(&fx, NV);
        ref_crossentropy(rloss, rdl, to_d(&fx, lg, NV), tgt, N, V, 0.25);
        void *d = dup_a(&fx, lg, NV);
        float *d_loss = dnan(&fx, N);
        fx.be->ops->crossentropy(fx.be, d_loss, d, dup_i(&fx, tgt, N), N, V, V, 0.25f, 1);
        CHECK("crossentropy losses (wide)", get_f(&fx, d_loss, N), rloss, N, "V=%d", V);
        CHECK_A("crossentropy dlogits (wide)", get_a(&fx, d, NV), rdl, NV, "V=%d", V);
        fx_close(&fx);
    }
}
Test(ops_llama, crossentropy_wide_vocab) { crossentropy_wide(GT_F32); }
Test(ops_llama_bf16, crossentropy_wide_vocab) { crossentropy_wide(GT_BF16); }
