/* test_ops_head_norm.c - head_rmsnorm_forward/backward (Qwen3's per-head q_norm/k_norm, backend.h)
 * against the naive double reference (ref_head_rmsnorm_*, ref_llama_ops.c), the reference's
 * backward against central finite differences of its own forward, and determinism (two calls,
 * 1 vs 2 CPU threads). In suites ops_llama and ops_llama_bf16 beside the other Llama-family ops
 * (test_ops_llama.c), with the same fixture (ops_fixture.h): GTRAIN_TEST_DEVICE=cuda runs them on
 * the CUDA backend; TOL for fp32 outputs, TOL_BF16 for act outputs under bf16, inputs drawn as
 * act-dtype values so the reference sees what the op sees.
 *
 * Shapes: hd 64 and 128 (Qwen3's) and an odd hd (20: not a multiple of 8 lanes or of a warp);
 * NKV < NH and NKV == NH; N not a multiple of the CUDA kernel's 8 warps per block nor of the CPU's
 * channel block; one case above the CPU's threading threshold. The v heads must come through
 * bit for bit (forward: inp's, backward: dout's), and dinp == dout (in place) must give what a
 * separate dinp gives. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "ops_fixture.h"
#include "ref_llama_ops.h"
#include "test_backend_select.h"

typedef struct {
    int N, NH, NKV, hd;
} HeadCase;

/* the v heads of a [N, R] tensor's raw bytes: a equal to b, else the first differing element */
static void expect_v_heads_equal(const char *what, const void *a, const void *b, size_t esz, HeadCase c) {
    const size_t R = (size_t)(c.NH + 2 * c.NKV) * c.hd, v0 = (size_t)(c.NH + c.NKV) * c.hd, vn = (size_t)c.NKV * c.hd;
    for (int n = 0; n < c.N; n++) {
        const char *pa = (const char *)a + (n * R + v0) * esz, *pb = (const char *)b + (n * R + v0) * esz;
        if (memcmp(pa, pb, vn * esz) != 0) {
            cr_expect_fail("%s: the v heads of row %d are not copied bit for bit (N=%d NH=%d NKV=%d hd=%d)", what, n,
                           c.N, c.NH, c.NKV, c.hd);
            return;
        }
    }
}

static void check_head_rmsnorm(GtDtype act, HeadCase c, bool in_place, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const int H = c.NH + c.NKV;
    const size_t R = (size_t)(H + c.NKV) * c.hd, n = (size_t)c.N * R, nr = (size_t)c.N * H, hn = (size_t)c.hd;
    const size_t ab = backend_act_bytes(fx.be, n);
    const float eps = 1e-6f;
    char shape[96];
    snprintf(shape, sizeof shape, "%s N=%d NH=%d NKV=%d hd=%d%s", gt_dtype_name(act), c.N, c.NH, c.NKV, c.hd,
             in_place ? " in place" : "");
    float *inp = rand_a(&fx, &r, n, -2, 3), *wq = rand_a(&fx, &r, hn, 0.5f, 1.5f), *wk = rand_a(&fx, &r, hn, 0.5f, 1.5f);
    float *dout = rand_a(&fx, &r, n, -1, 1), *dwq0 = rand_f(&fx, &r, hn, -1, 1), *dwk0 = rand_f(&fx, &r, hn, -1, 1);

    void *d_inp = dup_a(&fx, inp, n), *d_wq = dup_a(&fx, wq, hn), *d_wk = dup_a(&fx, wk, hn);
    void *d_out = dnan_a(&fx, n);
    float *d_rstd = dnan(&fx, nr);
    fx.be->ops->head_rmsnorm_forward(fx.be, d_out, d_rstd, d_inp, d_wq, d_wk, c.N, c.NH, c.NKV, c.hd, eps);
    void *d_dout = dup_a(&fx, dout, n), *d_dinp = in_place ? d_dout : dnan_a(&fx, n);
    float *d_dwq = dup_f(&fx, dwq0, hn), *d_dwk = dup_f(&fx, dwk0, hn);
    fx.be->ops->head_rmsnorm_backward(fx.be, d_dinp, d_dwq, d_dwk, d_dout, d_inp, d_wq, d_wk, d_rstd, c.N, c.NH,
                                      c.NKV, c.hd);

    double *rinp = to_d(&fx, inp, n), *rwq = to_d(&fx, wq, hn), *rwk = to_d(&fx, wk, hn);
    double *ro = hd(&fx, n), *rs = hd(&fx, nr), *rdinp = hd(&fx, n);
    double *rdwq = to_d(&fx, dwq0, hn), *rdwk = to_d(&fx, dwk0, hn);
    ref_head_rmsnorm_forward(ro, rs, rinp, rwq, rwk, c.N, c.NH, c.NKV, c.hd, eps);
    ref_head_rmsnorm_backward(rdinp, rdwq, rdwk, to_d(&fx, dout, n), rinp, rwq, rwk, c.N, c.NH, c.NKV, c.hd, eps);

    CHECK_A("head_rmsnorm out", get_a(&fx, d_out, n), ro, n, "%s", shape);
    CHECK("head_rmsnorm rstd", get_f(&fx, d_rstd, nr), rs, nr, "%s", shape);
    CHECK_A("head_rmsnorm dinp (overwritten)", get_a(&fx, d_dinp, n), rdinp, n, "%s", shape);
    CHECK("head_rmsnorm dwq (accumulated)", get_f(&fx, d_dwq, hn), rdwq, hn, "%s", shape);
    CHECK("head_rmsnorm dwk (accumulated)", get_f(&fx, d_dwk, hn), rdwk, hn, "%s", shape);

    /* the v heads, bit for bit: out's are inp's, dinp's are dout's */
    const size_t esz = gt_dtype_size(act);
    void *raw_inp = get_raw(&fx, d_inp, ab), *raw_out = get_raw(&fx, d_out, ab);
    expect_v_heads_equal("head_rmsnorm forward", raw_out, raw_inp, esz, c);
    void *raw_dout = hmem(&fx, ab);
    if (act == GT_BF16)
        for (size_t i = 0; i < n; i++) ((uint16_t *)raw_dout)[i] = gt_f32_to_bf16(dout[i]);
    else
        memcpy(raw_dout, dout, ab);
    expect_v_heads_equal("head_rmsnorm backward", get_raw(&fx, d_dinp, ab), raw_dout, esz, c);
    fx_close(&fx);
}

static const HeadCase k_cases[] = {
    {13, 4, 2, 64},  /* 2 q heads per kv head; 13 rows */
    {7, 8, 2, 128},  /* hd 128, 4 q heads per kv head */
    {5, 2, 2, 64},   /* NKV == NH */
    {9, 3, 1, 20},   /* one kv head, hd 20: ragged lanes and channel blocks */
    {301, 4, 1, 64}, /* threaded on the CPU; several CUDA row chunks */
};

static void head_rmsnorm_cases(GtDtype act) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        check_head_rmsnorm(act, k_cases[i], false, 300 + i);
        check_head_rmsnorm(act, k_cases[i], true, 310 + i);
    }
}
Test(ops_llama, head_rmsnorm) { head_rmsnorm_cases(GT_F32); }
Test(ops_llama_bf16, head_rmsnorm) { head_rmsnorm_cases(GT_BF16); }

/* ------------------------------------------------------------------ determinism */

enum { HDET = 5 };
static const char *const k_hdet_names[HDET] = {"out", "rstd", "dinp", "dwq", "dwk"};

/* forward and backward once on fx's backend from a fixed seed; the outputs' bytes into keep */
static void hdet_run(Fx *fx, Fx *keep, void *bytes[HDET], size_t nb[HDET]) {
    Rng r = {320};
    const int N = 301, NH = 4, NKV = 2, hdim = 64, H = NH + NKV;
    const size_t n = (size_t)N * (H + NKV) * hdim, nr = (size_t)N * H;
    Backend *b = fx->be;
    void *inp = dup_a(fx, rand_a(fx, &r, n, -2, 2), n), *wq = dup_a(fx, rand_a(fx, &r, hdim, 0.5f, 1.5f), hdim);
    void *wk = dup_a(fx, rand_a(fx, &r, hdim, 0.5f, 1.5f), hdim), *dout = dup_a(fx, rand_a(fx, &r, n, -1, 1), n);
    void *out = dnan_a(fx, n), *dinp = dnan_a(fx, n);
    float *rstd = dnan(fx, nr), *dwq = dup_f(fx, rand_f(fx, &r, hdim, -1, 1), hdim);
    float *dwk = dup_f(fx, rand_f(fx, &r, hdim, -1, 1), hdim);
    b->ops->head_rmsnorm_forward(b, out, rstd, inp, wq, wk, N, NH, NKV, hdim, 1e-6f);
    b->ops->head_rmsnorm_backward(b, dinp, dwq, dwk, dout, inp, wq, wk, rstd, N, NH, NKV, hdim);
    const void *outs[HDET] = {out, rstd, dinp, dwq, dwk};
    const size_t sz[HDET] = {backend_act_bytes(b, n), nr * 4, backend_act_bytes(b, n), hdim * 4, hdim * 4};
    for (int i = 0; i < HDET; i++) {
        bytes[i] = hmem(keep, sz[i]);
        down(fx, bytes[i], outs[i], sz[i]);
        nb[i] = sz[i];
    }
}

static void hdet_compare(void *a[HDET], void *b[HDET], const size_t nb[HDET], GtDtype act, const char *how) {
    for (int i = 0; i < HDET; i++)
        cr_expect(memcmp(a[i], b[i], nb[i]) == 0, "head_rmsnorm %s (%s) differs %s", k_hdet_names[i],
                  gt_dtype_name(act), how);
}

static void head_deterministic(GtDtype act) {
    Fx keep, fx;
    memset(&keep, 0, sizeof keep);
    void *a[HDET], *b[HDET];
    size_t nb[HDET];
    fx_open_as(&fx, act);
    hdet_run(&fx, &keep, a, nb);
    hdet_run(&fx, &keep, b, nb);
    fx_close(&fx);
    hdet_compare(a, b, nb, act, "between two calls");
    if (fx_open_threads(&fx, act, 1)) {
        hdet_run(&fx, &keep, a, nb);
        fx_close(&fx);
        cr_assert(fx_open_threads(&fx, act, 2));
        hdet_run(&fx, &keep, b, nb);
        fx_close(&fx);
        hdet_compare(a, b, nb, act, "between 1 and 2 threads");
    }
    fx_free_host(&keep);
}
Test(ops_llama, head_rmsnorm_deterministic) { head_deterministic(GT_F32); }
Test(ops_llama_bf16, head_rmsnorm_deterministic) { head_deterministic(GT_BF16); }

/* ------------------------------------------------------------------ the reference itself */

typedef struct {
    double *inp, *wq, *wk, *dout, *out;
    HeadCase c;
} HeadCtx;

static double head_loss(void *p) {
    HeadCtx *h = p;
    ref_head_rmsnorm_forward(h->out, NULL, h->inp, h->wq, h->wk, h->c.N, h->c.NH, h->c.NKV, h->c.hd, 1e-5);
    return dotd(h->out, h->dout, (size_t)h->c.N * (h->c.NH + 2 * h->c.NKV) * h->c.hd);
}

/* the reference's backward (every head, v included, and both weights) against central
 * differences of its forward; and its q/k heads are ref_rmsnorm_forward's rows, by hand */
Test(ops_llama, reference_head_rmsnorm) {
    const HeadCase shapes[] = {{3, 2, 1, 4}, {2, 3, 3, 5}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        Fx fx;
        memset(&fx, 0, sizeof fx);
        Rng r = {330 + k};
        HeadCase c = shapes[k];
        size_t n = (size_t)c.N * (c.NH + 2 * c.NKV) * c.hd, hn = (size_t)c.hd;
        HeadCtx h = {rand_d(&fx, &r, n, -2, 2), rand_d(&fx, &r, hn, 0.5, 1.5), rand_d(&fx, &r, hn, 0.5, 1.5),
                     rand_d(&fx, &r, n, -1, 1), hd(&fx, n), c};
        double *dinp = hd(&fx, n), *dwq = hd(&fx, hn), *dwk = hd(&fx, hn);
        ref_head_rmsnorm_backward(dinp, dwq, dwk, h.dout, h.inp, h.wq, h.wk, c.N, c.NH, c.NKV, c.hd, 1e-5);
        FD_EXPECT("head_rmsnorm dinp", fd_check(h.inp, n, dinp, head_loss, &h));
        FD_EXPECT("head_rmsnorm dwq", fd_check(h.wq, hn, dwq, head_loss, &h));
        FD_EXPECT("head_rmsnorm dwk", fd_check(h.wk, hn, dwk, head_loss, &h));
        fx_free_host(&fx);
    }
    /* by hand: one row, q head (3, 4) with wq (1, 2), k head (0, 2) with wk (3, 1), v head (5, 6) */
    double x[6] = {3, 4, 0, 2, 5, 6}, wq[2] = {1, 2}, wk[2] = {3, 1}, o[6], s[2];
    ref_head_rmsnorm_forward(o, s, x, wq, wk, 1, 1, 1, 2, 0.0);
    const double want[6] = {3 / sqrt(12.5), 8 / sqrt(12.5), 0, 2 / sqrt(2.0), 5, 6};
    for (int i = 0; i < 6; i++) cr_expect(fabs(o[i] - want[i]) < 1e-15, "by hand [%d]: %.17g, want %.17g", i, o[i], want[i]);
    cr_expect(fabs(s[0] - 1 / sqrt(12.5)) < 1e-15 && fabs(s[1] - 1 / sqrt(2.0)) < 1e-15, "rstd %g %g", s[0], s[1]);
}
