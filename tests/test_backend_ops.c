/* test_backend_ops.c - every entry of the backend ops table (backend.h's BackendOps), run from one
 * table on the backend under test against the double-precision references, as ggml's
 * test-backend-ops does: each row names the entries it runs, the shapes, and a runner that fills
 * random inputs, calls the entries (the optional fused ones through backend.c's wrappers, so a
 * backend that leaves one NULL runs the composition) and compares every output with the
 * reference (ref_ops.c, ref_llama_ops.c; attention through ops_fixture.c's check) within TOL for
 * fp32 outputs and fx.act_tol for act-typed ones (TOL_BF16 under bf16).
 *
 * The backend: test_backend_open(), the CPU by default, the CUDA backend with
 * GTRAIN_TEST_DEVICE=cuda (scripts/test-cudasim.sh runs it on the simulator). Suites
 * backend_ops (fp32 activations) and backend_ops_bf16.
 *
 * The encoder, rope and attention rows also run with per-token positions (packed rows: segments
 * restarting at 0) on a backend with GT_CAP_POSITIONS, against the references per segment
 * (ops_positions.c).
 * The decode row (kv_store, attention_cached) runs a history of decoding calls against a double
 * reference on the backend under test and on the CPU backend (ops_decode.c).
 *
 * Besides the values:
 *   - coverage: the table plus the infrastructure entries (memory, timer, close) name every slot
 *     of BackendOps exactly once, and their count is sizeof(BackendOps) / sizeof(a pointer); an
 *     entry added to backend.h without a row here fails backend_ops::covers_every_entry;
 *   - the backend fills every entry but the optional ones backend.h lists;
 *   - optional entries: with the entry NULLed in a copy of the backend's table, the wrapper gives
 *     the unfused ops' result bit for bit, and the backend's own fused entry (where it has one)
 *     gives the same bits (bf16 matmul_gelu on CUDA: within the bf16 bound, backend.h says why). */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "dropout.h"
#include "ops_fixture.h"
#include "ref_llama_ops.h"
#include "ref_ops.h"
#include "test_backend_select.h"

/* act-typed output vs reference, fx a pointer */
#define CHK_A(what, a, b, n) CHECK_TOL(fx->act_tol, what, a, b, n, "%s, %s", gt_dtype_name(fx->act), k_shape)
#define CHK(what, a, b, n) CHECK_TOL(TOL, what, a, b, n, "%s, %s", gt_dtype_name(fx->act), k_shape)

/* the current row's shape, for the messages (one test runs the rows in turn) */
static char k_shape[128];

typedef void (*OpRun)(Fx *fx, Rng *r, const int *s);
enum { MAX_SHAPES = 3, MAX_DIMS = 6, MAX_COVERS = 8 };
typedef struct {
    const char *name;
    OpRun run;
    const char *covers[MAX_COVERS]; /* the BackendOps entries it runs */
    int shapes[MAX_SHAPES][MAX_DIMS]; /* runner-specific; a row starting with 0: none */
} OpCase;

/* ------------------------------------------------------------------ runners */

/* s: B, T, C, V */
static void run_encoder(Fx *fx, Rng *r, const int *s) {
    const int B = s[0], T = s[1], C = s[2], V = s[3];
    const size_t BT = (size_t)B * T, VC = (size_t)V * C, TC = (size_t)T * C;
    int *tok = rand_i(fx, r, BT, V);
    tok[0] = tok[BT - 1] = V - 1;
    float *wte = rand_a(fx, r, VC, -1, 1), *wpe = rand_a(fx, r, TC, -1, 1), *dout = rand_a(fx, r, BT * C, -1, 1);
    float *dwte0 = rand_f(fx, r, VC, -1, 1), *dwpe0 = rand_f(fx, r, TC, -1, 1);
    int *d_tok = dup_i(fx, tok, BT);
    void *d_out = dnan_a(fx, BT * C);
    float *d_dwte = dup_f(fx, dwte0, VC), *d_dwpe = dup_f(fx, dwpe0, TC);
    fx->be->ops->encoder_forward(fx->be, d_out, d_tok, dup_a(fx, wte, VC), dup_a(fx, wpe, TC), B, T, C, NULL);
    fx->be->ops->encoder_backward(fx->be, d_dwte, d_dwpe, dup_a(fx, dout, BT * C), d_tok, B, T, C, NULL);
    double *ro = hd(fx, BT * C), *rdwte = to_d(fx, dwte0, VC), *rdwpe = to_d(fx, dwpe0, TC);
    ref_encoder_forward(ro, tok, to_d(fx, wte, VC), to_d(fx, wpe, TC), B, T, C);
    ref_encoder_backward(rdwte, rdwpe, to_d(fx, dout, BT * C), tok, B, T, C);
    CHK_A("encoder out", get_a(fx, d_out, BT * C), ro, BT * C);
    CHK("encoder dwte", get_f(fx, d_dwte, VC), rdwte, VC);
    CHK("encoder dwpe", get_f(fx, d_dwpe, TC), rdwpe, TC);
    /* packed rows: per-token positions (ops_positions.c) */
    if (fx->be->ops->caps & GT_CAP_POSITIONS) check_encoder_pos(fx, r, B, T, C, V, fx->act_tol);
}

/* s: N, C */
static void run_layernorm(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], C = s[1];
    const size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *inp = rand_a(fx, r, NC, -2, 3), *w = rand_a(fx, r, C, 0.5f, 1.5f), *bias = rand_a(fx, r, C, -1, 1);
    float *dout = rand_a(fx, r, NC, -1, 1), *dinp0 = rand_a(fx, r, NC, -1, 1);
    float *dw0 = rand_f(fx, r, C, -1, 1), *db0 = rand_f(fx, r, C, -1, 1);
    void *d_inp = dup_a(fx, inp, NC), *d_w = dup_a(fx, w, C), *d_out = dnan_a(fx, NC), *d_dinp = dup_a(fx, dinp0, NC);
    float *d_mean = dnan(fx, N), *d_rstd = dnan(fx, N), *d_dw = dup_f(fx, dw0, C), *d_db = dup_f(fx, db0, C);
    fx->be->ops->layernorm_forward(fx->be, d_out, d_mean, d_rstd, d_inp, d_w, dup_a(fx, bias, C), N, C, eps);
    fx->be->ops->layernorm_backward(fx->be, d_dinp, d_dw, d_db, dup_a(fx, dout, NC), d_inp, d_w, d_mean, d_rstd, N,
                                    C);
    double *rinp = to_d(fx, inp, NC), *rw = to_d(fx, w, C), *ro = hd(fx, NC), *rm = hd(fx, N), *rs = hd(fx, N);
    double *rdinp = to_d(fx, dinp0, NC), *rdw = to_d(fx, dw0, C), *rdb = to_d(fx, db0, C);
    ref_layernorm_forward(ro, rm, rs, rinp, rw, to_d(fx, bias, C), N, C, eps);
    ref_layernorm_backward(rdinp, rdw, rdb, to_d(fx, dout, NC), rinp, rw, N, C, eps);
    CHK_A("layernorm out", get_a(fx, d_out, NC), ro, NC);
    CHK("layernorm mean", get_f(fx, d_mean, N), rm, N);
    CHK("layernorm rstd", get_f(fx, d_rstd, N), rs, N);
    CHK_A("layernorm dinp (accumulated)", get_a(fx, d_dinp, NC), rdinp, NC);
    CHK("layernorm dw", get_f(fx, d_dw, C), rdw, C);
    CHK("layernorm dbias", get_f(fx, d_db, C), rdb, C);
}

/* s: N, C, OC */
static void run_matmul(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], C = s[1], OC = s[2];
    const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *inp = rand_a(fx, r, NC, -1, 1), *w = rand_a(fx, r, OCC, -1, 1), *bias = rand_a(fx, r, OC, -1, 1);
    float *dout = rand_a(fx, r, NO, -1, 1), *dw0 = rand_f(fx, r, OCC, -1, 1), *db0 = rand_f(fx, r, OC, -1, 1);
    void *d_inp = dup_a(fx, inp, NC), *d_w = dup_a(fx, w, OCC), *d_out = dnan_a(fx, NO), *d_dinp = dnan_a(fx, NC);
    float *d_dw = dup_f(fx, dw0, OCC), *d_db = dup_f(fx, db0, OC);
    fx->be->ops->matmul_forward(fx->be, d_out, d_inp, d_w, dup_a(fx, bias, OC), N, C, OC, OC);
    fx->be->ops->matmul_backward(fx->be, d_dinp, d_dw, d_db, dup_a(fx, dout, NO), d_inp, d_w, N, C, OC, OC);
    double *rinp = to_d(fx, inp, NC), *rw = to_d(fx, w, OCC), *ro = hd(fx, NO), *rdinp = hd(fx, NC);
    double *rdw = to_d(fx, dw0, OCC), *rdb = to_d(fx, db0, OC);
    ref_matmul_forward(ro, rinp, rw, to_d(fx, bias, OC), N, C, OC);
    ref_matmul_backward(rdinp, rdw, rdb, to_d(fx, dout, NO), rinp, rw, N, C, OC);
    CHK_A("matmul out", get_a(fx, d_out, NO), ro, NO);
    CHK_A("matmul dinp", get_a(fx, d_dinp, NC), rdinp, NC);
    CHK("matmul dw", get_f(fx, d_dw, OCC), rdw, OCC);
    CHK("matmul dbias", get_f(fx, d_db, OC), rdb, OC);
}

/* s: M, N, K, pad. The adapters' strided gemm in its four transpose forms, C in the act dtype and
 * in fp32, beta 0 and 1, every operand with pad columns beyond its rows (C's padding must come
 * back bit for bit: it is another block's output), against the double sum */
static void run_gemm(Fx *fx, Rng *r, const int *s) {
    const int M = s[0], N = s[1], K = s[2], pad = s[3];
    const float alpha = 0.625f;
    for (int i = 0; i < 8; i++) {
        const bool ta = i & 1, tb = i >> 1 & 1, f32 = i >> 2;
        const float beta = i % 3 == 0 ? 0.0f : 1.0f;
        const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        const int lda = ac + pad, ldb = bc + 2 * pad, ldc = N + pad;
        const size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)M * ldc;
        float *A = rand_a(fx, r, na, -1, 1), *B = rand_a(fx, r, nb, -1, 1);
        float *C = f32 ? rand_f(fx, r, nc, -2, 2) : rand_a(fx, r, nc, -2, 2);
        void *dC = f32 ? (void *)dup_f(fx, C, nc) : dup_a(fx, C, nc);
        fx->be->ops->gemm(fx->be, ta, tb, M, N, K, alpha, dup_a(fx, A, na), lda, dup_a(fx, B, nb), ldb, beta, dC,
                          f32 ? GT_F32 : fx->act, ldc);
        double *rc = to_d(fx, C, nc);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double acc = 0.0;
                for (int k = 0; k < K; k++)
                    acc += (double)A[ta ? (size_t)k * lda + m : (size_t)m * lda + k] *
                           B[tb ? (size_t)n * ldb + k : (size_t)k * ldb + n];
                rc[(size_t)m * ldc + n] = alpha * acc + (beta != 0.0f ? (double)C[(size_t)m * ldc + n] : 0.0);
            }
        const float *got = f32 ? get_f(fx, dC, nc) : get_a(fx, dC, nc);
        size_t bad_pad = 0;
        for (int m = 0; m < M; m++)
            for (int n = N; n < ldc; n++) bad_pad += got[(size_t)m * ldc + n] != C[(size_t)m * ldc + n];
        cr_expect_eq(bad_pad, 0, "gemm ta %d tb %d beta %g: %zu padding element(s) of C changed (%s)", ta, tb,
                     (double)beta, bad_pad, k_shape);
        if (f32)
            CHK(ta ? (tb ? "gemm TT fp32 C" : "gemm TN fp32 C") : (tb ? "gemm NT fp32 C" : "gemm NN fp32 C"), got, rc, nc);
        else
            CHK_A(ta ? (tb ? "gemm TT" : "gemm TN") : (tb ? "gemm NT" : "gemm NN"), got, rc, nc);
    }
}

/* s: B, T, NH, NKV, hd, window (ops_fixture.c's check opens its own fixture) */
static void run_attention(Fx *fx, Rng *r, const int *s) {
    AttCase c = {s[0], s[1], s[2], s[3], s[4], s[5]};
    check_attention_gqa(fx->act, c, false, rng_next(r));
    /* packed rows: segments of up to T/3+1 tokens (ops_positions.c) */
    if (fx->be->ops->caps & GT_CAP_POSITIONS) check_attention_pos(fx->act, c, c.T / 3 + 1, rng_next(r));
}

/* s: n */
static void run_gelu(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0];
    float *inp = rand_a(fx, r, n, -5, 5), *dout = rand_a(fx, r, n, -1, 1);
    void *d_inp = dup_a(fx, inp, n), *d_out = dnan_a(fx, n), *d_dinp = dnan_a(fx, n);
    fx->be->ops->gelu_forward(fx->be, d_out, d_inp, n);
    fx->be->ops->gelu_backward(fx->be, d_dinp, d_inp, dup_a(fx, dout, n), n);
    double *rinp = to_d(fx, inp, n), *ro = hd(fx, n), *rd = hd(fx, n);
    ref_gelu_forward(ro, rinp, n);
    ref_gelu_backward(rd, rinp, to_d(fx, dout, n), n);
    CHK_A("gelu out", get_a(fx, d_out, n), ro, n);
    CHK_A("gelu dinp", get_a(fx, d_dinp, n), rd, n);
}

/* s: n */
static void run_add(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0];
    float *x = rand_a(fx, r, n, -2, 2), *y = rand_a(fx, r, n, -2, 2);
    void *d_out = dnan_a(fx, n);
    fx->be->ops->add(fx->be, d_out, dup_a(fx, x, n), dup_a(fx, y, n), n);
    double *ro = hd(fx, n);
    ref_add(ro, to_d(fx, x, n), to_d(fx, y, n), n);
    CHK_A("add out", get_a(fx, d_out, n), ro, n);
}

/* s: N, C (through backend_residual_layernorm_forward) */
static void run_residual_layernorm(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], C = s[1];
    const size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *x = rand_a(fx, r, NC, -2, 2), *y = rand_a(fx, r, NC, -1, 3), *w = rand_a(fx, r, C, 0.5f, 1.5f);
    float *bias = rand_a(fx, r, C, -1, 1);
    void *d_res = dnan_a(fx, NC), *d_out = dnan_a(fx, NC);
    float *d_mean = dnan(fx, N), *d_rstd = dnan(fx, N);
    backend_residual_layernorm_forward(fx->be, d_res, d_out, d_mean, d_rstd, dup_a(fx, x, NC), dup_a(fx, y, NC),
                                       dup_a(fx, w, C), dup_a(fx, bias, C), N, C, eps);
    float *res = get_a(fx, d_res, NC);
    double *rres = hd(fx, NC), *ro = hd(fx, NC), *rm = hd(fx, N), *rs = hd(fx, N);
    ref_add(rres, to_d(fx, x, NC), to_d(fx, y, NC), NC);
    /* the norm of the res the op rounded (bf16, as specified) or of the exact sum (fp32) */
    ref_layernorm_forward(ro, rm, rs, fx->act == GT_BF16 ? to_d(fx, res, NC) : rres, to_d(fx, w, C), to_d(fx, bias, C),
                          N, C, eps);
    CHK_A("residual_layernorm res", res, rres, NC);
    CHK_A("residual_layernorm out", get_a(fx, d_out, NC), ro, NC);
    CHK("residual_layernorm mean", get_f(fx, d_mean, N), rm, N);
    CHK("residual_layernorm rstd", get_f(fx, d_rstd, N), rs, N);
}

/* s: N, C, OC (through backend_matmul_gelu_forward) */
static void run_matmul_gelu(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], C = s[1], OC = s[2];
    const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *inp = rand_a(fx, r, NC, -1, 1), *w = rand_a(fx, r, OCC, -0.6f, 0.6f), *bias = rand_a(fx, r, OC, -1, 1);
    void *d_out = dnan_a(fx, NO), *d_pre = dnan_a(fx, NO);
    backend_matmul_gelu_forward(fx->be, d_out, d_pre, dup_a(fx, inp, NC), dup_a(fx, w, OCC), dup_a(fx, bias, OC), N, C,
                                OC);
    float *pre = get_a(fx, d_pre, NO);
    double *rpre = hd(fx, NO), *ro = hd(fx, NO);
    ref_matmul_forward(rpre, to_d(fx, inp, NC), to_d(fx, w, OCC), to_d(fx, bias, OC), N, C, OC);
    ref_gelu_forward(ro, fx->act == GT_BF16 ? to_d(fx, pre, NO) : rpre, NO);
    CHK_A("matmul_gelu pre", pre, rpre, NO);
    CHK_A("matmul_gelu out", get_a(fx, d_out, NO), ro, NO);
}

/* s: N, C */
static void run_rmsnorm(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], C = s[1];
    const size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *inp = rand_a(fx, r, NC, -2, 3), *w = rand_a(fx, r, C, 0.5f, 1.5f), *dout = rand_a(fx, r, NC, -1, 1);
    float *dinp0 = rand_a(fx, r, NC, -1, 1), *dw0 = rand_f(fx, r, C, -1, 1);
    void *d_inp = dup_a(fx, inp, NC), *d_w = dup_a(fx, w, C), *d_out = dnan_a(fx, NC), *d_dinp = dup_a(fx, dinp0, NC);
    float *d_rstd = dnan(fx, N), *d_dw = dup_f(fx, dw0, C);
    fx->be->ops->rmsnorm_forward(fx->be, d_out, d_rstd, d_inp, d_w, N, C, eps);
    fx->be->ops->rmsnorm_backward(fx->be, d_dinp, d_dw, dup_a(fx, dout, NC), d_inp, d_w, d_rstd, N, C);
    double *rinp = to_d(fx, inp, NC), *rw = to_d(fx, w, C), *ro = hd(fx, NC), *rs = hd(fx, N);
    double *rdinp = to_d(fx, dinp0, NC), *rdw = to_d(fx, dw0, C);
    ref_rmsnorm_forward(ro, rs, rinp, rw, N, C, eps);
    ref_rmsnorm_backward(rdinp, rdw, to_d(fx, dout, NC), rinp, rw, N, C, eps);
    CHK_A("rmsnorm out", get_a(fx, d_out, NC), ro, NC);
    CHK("rmsnorm rstd", get_f(fx, d_rstd, N), rs, N);
    CHK_A("rmsnorm dinp (accumulated)", get_a(fx, d_dinp, NC), rdinp, NC);
    CHK("rmsnorm dw", get_f(fx, d_dw, C), rdw, C);
}

/* s: N, C (through backend_residual_rmsnorm_forward) */
static void run_residual_rmsnorm(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], C = s[1];
    const size_t NC = (size_t)N * C;
    const float eps = 1e-6f;
    float *x = rand_a(fx, r, NC, -2, 2), *y = rand_a(fx, r, NC, -1, 3), *w = rand_a(fx, r, C, 0.5f, 1.5f);
    void *d_res = dnan_a(fx, NC), *d_out = dnan_a(fx, NC);
    float *d_rstd = dnan(fx, N);
    backend_residual_rmsnorm_forward(fx->be, d_res, d_out, d_rstd, dup_a(fx, x, NC), dup_a(fx, y, NC), dup_a(fx, w, C),
                                     N, C, eps);
    float *res = get_a(fx, d_res, NC);
    double *rres = hd(fx, NC), *ro = hd(fx, NC), *rs = hd(fx, N);
    ref_add(rres, to_d(fx, x, NC), to_d(fx, y, NC), NC);
    ref_rmsnorm_forward(ro, rs, fx->act == GT_BF16 ? to_d(fx, res, NC) : rres, to_d(fx, w, C), N, C, eps);
    CHK_A("residual_rmsnorm res", res, rres, NC);
    CHK_A("residual_rmsnorm out", get_a(fx, d_out, NC), ro, NC);
    CHK("residual_rmsnorm rstd", get_f(fx, d_rstd, N), rs, N);
}

/* s: N, NH, NKV, hd; dinp == dout (in place) */
static void run_head_rmsnorm(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], NH = s[1], NKV = s[2], hs = s[3], H = NH + NKV;
    const size_t n = (size_t)N * (H + NKV) * hs, nr = (size_t)N * H, hn = (size_t)hs;
    const float eps = 1e-6f;
    float *inp = rand_a(fx, r, n, -2, 3), *wq = rand_a(fx, r, hn, 0.5f, 1.5f), *wk = rand_a(fx, r, hn, 0.5f, 1.5f);
    float *dout = rand_a(fx, r, n, -1, 1), *dwq0 = rand_f(fx, r, hn, -1, 1), *dwk0 = rand_f(fx, r, hn, -1, 1);
    void *d_inp = dup_a(fx, inp, n), *d_wq = dup_a(fx, wq, hn), *d_wk = dup_a(fx, wk, hn), *d_out = dnan_a(fx, n);
    void *d_d = dup_a(fx, dout, n);
    float *d_rstd = dnan(fx, nr), *d_dwq = dup_f(fx, dwq0, hn), *d_dwk = dup_f(fx, dwk0, hn);
    fx->be->ops->head_rmsnorm_forward(fx->be, d_out, d_rstd, d_inp, d_wq, d_wk, N, NH, NKV, hs, eps);
    fx->be->ops->head_rmsnorm_backward(fx->be, d_d, d_dwq, d_dwk, d_d, d_inp, d_wq, d_wk, d_rstd, N, NH, NKV, hs);
    double *rinp = to_d(fx, inp, n), *rwq = to_d(fx, wq, hn), *rwk = to_d(fx, wk, hn);
    double *ro = hd(fx, n), *rs = hd(fx, nr), *rdinp = hd(fx, n), *rdwq = to_d(fx, dwq0, hn), *rdwk = to_d(fx, dwk0, hn);
    ref_head_rmsnorm_forward(ro, rs, rinp, rwq, rwk, N, NH, NKV, hs, eps);
    ref_head_rmsnorm_backward(rdinp, rdwq, rdwk, to_d(fx, dout, n), rinp, rwq, rwk, N, NH, NKV, hs, eps);
    CHK_A("head_rmsnorm out", get_a(fx, d_out, n), ro, n);
    CHK("head_rmsnorm rstd", get_f(fx, d_rstd, nr), rs, nr);
    CHK_A("head_rmsnorm dinp (in place)", get_a(fx, d_d, n), rdinp, n);
    CHK("head_rmsnorm dwq", get_f(fx, d_dwq, hn), rdwq, hn);
    CHK("head_rmsnorm dwk", get_f(fx, d_dwk, hn), rdwk, hn);
}

/* s: B, T, pos0, NH, NKV, hd */
static void run_rope(Fx *fx, Rng *r, const int *s) {
    const int B = s[0], T = s[1], pos0 = s[2], NH = s[3], NKV = s[4], hs = s[5];
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * hs, ntab = (size_t)(pos0 + T) * (hs / 2);
    double *dc = hd(fx, ntab), *ds = hd(fx, ntab);
    float *fc = hf(fx, ntab), *fs = hf(fx, ntab);
    ref_rope_tables(dc, ds, pos0 + T, hs, 10000.0);
    for (size_t i = 0; i < ntab; i++) { /* the op's fp32 tables; the reference reads the same values */
        fc[i] = (float)dc[i];
        fs[i] = (float)ds[i];
        dc[i] = fc[i];
        ds[i] = fs[i];
    }
    float *d_c = dup_f(fx, fc, ntab), *d_s = dup_f(fx, fs, ntab);
    float *x = rand_a(fx, r, n, -2, 2), *dy = rand_a(fx, r, n, -1, 1);
    void *d_x = dup_a(fx, x, n), *d_dy = dup_a(fx, dy, n);
    fx->be->ops->rope_forward(fx->be, d_x, d_c, d_s, B, T, pos0, NH, NKV, hs, NULL);
    fx->be->ops->rope_backward(fx->be, d_dy, d_c, d_s, B, T, NH, NKV, hs, NULL);
    double *rx = to_d(fx, x, n), *rdy = to_d(fx, dy, n);
    ref_rope_forward(rx, dc, ds, B, T, pos0, NH, NKV, hs);
    /* the backward at pos0 0: its own tables start at position 0, the same rows */
    ref_rope_backward(rdy, dc, ds, B, T, NH, NKV, hs);
    CHK_A("rope forward", get_a(fx, d_x, n), rx, n);
    CHK_A("rope backward", get_a(fx, d_dy, n), rdy, n);
    /* packed rows: per-token positions (ops_positions.c) */
    if (fx->be->ops->caps & GT_CAP_POSITIONS) check_rope_pos(fx, r, B, T, NH, NKV, hs, fx->act_tol);
}

/* s: N, I */
static void run_swiglu(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], I = s[1];
    const size_t NI = (size_t)N * I;
    float *inp = rand_a(fx, r, 2 * NI, -6, 6), *dout = rand_a(fx, r, NI, -1, 1);
    void *d_inp = dup_a(fx, inp, 2 * NI), *d_out = dnan_a(fx, NI), *d_dinp = dnan_a(fx, 2 * NI);
    fx->be->ops->swiglu_forward(fx->be, d_out, d_inp, N, I);
    fx->be->ops->swiglu_backward(fx->be, d_dinp, d_inp, dup_a(fx, dout, NI), N, I);
    double *rinp = to_d(fx, inp, 2 * NI), *ro = hd(fx, NI), *rd = hd(fx, 2 * NI);
    ref_swiglu_forward(ro, rinp, N, I);
    ref_swiglu_backward(rd, rinp, to_d(fx, dout, NI), N, I);
    CHK_A("swiglu out", get_a(fx, d_out, NI), ro, NI);
    CHK_A("swiglu dinp", get_a(fx, d_dinp, 2 * NI), rd, 2 * NI);
}

/* s: N, V (ld = V; test_ops.c covers the padded stride) */
static void run_crossentropy(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], V = s[1];
    const size_t NV = (size_t)N * V;
    const float scale = 1.0f / 37.0f;
    float *logits = rand_a(fx, r, NV, -4, 4);
    int *tgt = rand_i(fx, r, N, V);
    for (int n = 0; n < N; n += 3) tgt[n] = -100;
    void *d_logits = dup_a(fx, logits, NV);
    float *d_loss = dnan(fx, N);
    fx->be->ops->crossentropy(fx->be, d_loss, d_logits, dup_i(fx, tgt, N), N, V, V, scale, 1);
    double *rloss = hd(fx, N), *rdl = hd(fx, NV);
    ref_crossentropy(rloss, rdl, to_d(fx, logits, NV), tgt, N, V, scale);
    CHK("crossentropy losses", get_f(fx, d_loss, N), rloss, N);
    CHK_A("crossentropy dlogits", get_a(fx, d_logits, NV), rdl, NV);
}

/* s: n, t, off (fp32 tensors whatever the act dtype). adamw with the act-dtype copy written in the same pass, on tensors starting off
 * elements into their buffers (off 1: not 16-byte aligned, every element through the kernels'
 * scalar path): param, m, v against ref_adamw, and the copy bit for bit the reference's rounding
 * of the param the op returned (ref_round_bf16; the value itself under fp32) */
static void run_adamw(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0], off = (size_t)s[2];
    const int t = s[1];
    float *p = rand_f(fx, r, n, -1, 1), *g = rand_f(fx, r, n, -1, 1), *m = rand_f(fx, r, n, -0.1f, 0.1f);
    float *v = rand_f(fx, r, n, 0, 0.01f);
    float *d_p = dnan(fx, n + off) + off, *d_g = dnan(fx, n + off) + off, *d_m = dnan(fx, n + off) + off;
    float *d_v = dnan(fx, n + off) + off;
    act_t *d_c = backend_act_at(fx->be, dnan_a(fx, n + off), off);
    GtError err = {0};
    cr_assert_eq(fx->be->ops->to_device(fx->be, d_p, p, n * sizeof(float), &err), 0, "%s", err.msg);
    cr_assert_eq(fx->be->ops->to_device(fx->be, d_g, g, n * sizeof(float), &err), 0, "%s", err.msg);
    cr_assert_eq(fx->be->ops->to_device(fx->be, d_m, m, n * sizeof(float), &err), 0, "%s", err.msg);
    cr_assert_eq(fx->be->ops->to_device(fx->be, d_v, v, n * sizeof(float), &err), 0, "%s", err.msg);
    const AdamwRun run = {0, n, 0.1f}; /* one run (test_ops_adamw.c: many) */
    fx->be->ops->adamw(fx->be, d_p, d_g, d_m, d_v, d_c, &run, 1, 3e-3f, 0.9f, 0.95f, 1e-8f, t);
    double *rp = to_d(fx, p, n), *rm = to_d(fx, m, n), *rv = to_d(fx, v, n);
    ref_adamw(rp, to_d(fx, g, n), rm, rv, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    const float *got = get_f(fx, d_p, n), *copy = get_a(fx, d_c, n);
    CHK("adamw param", got, rp, n);
    CHK("adamw m", get_f(fx, d_m, n), rm, n);
    CHK("adamw v", get_f(fx, d_v, n), rv, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (double)copy[i] != (fx->act == GT_BF16 ? ref_round_bf16(got[i]) : (double)got[i]);
    cr_expect_eq(bad, 0, "adamw act copy: %zu of %zu values are not the rounding of the new param (%s)", bad, n,
                 k_shape);
}

/* s: n: sum_squares, scale, to_act on one fp32 vector */
static void run_vector(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0];
    float *x = rand_f(fx, r, n, -2, 2);
    float *d_x = dup_f(fx, x, n);
    double got = fx->be->ops->sum_squares(fx->be, d_x, n), want = ref_sum_squares(to_d(fx, x, n), n);
    cr_expect_leq(fabs(got - want), 1e-12 * want, "sum_squares: %.17g vs %.17g (%s)", got, want, k_shape);
    void *d_a = dnan_a(fx, n);
    fx->be->ops->to_act(fx->be, d_a, d_x, n);
    CHK_A("to_act", get_a(fx, d_a, n), to_d(fx, x, n), n);
    fx->be->ops->scale(fx->be, d_x, -0.375f, n);
    double *rs = to_d(fx, x, n);
    for (size_t i = 0; i < n; i++) rs[i] *= -0.375;
    CHK("scale", get_f(fx, d_x, n), rs, n);
}

/* s: N, cols, ldd, lds */
static void run_axpby_rows(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], cols = s[1], ldd = s[2], lds = s[3];
    const size_t nd = (size_t)N * ldd, ns = (size_t)N * lds;
    const float alpha = 0.37f, beta = -1.25f;
    float *dst = rand_a(fx, r, nd, -3, 3), *src = rand_a(fx, r, ns, -2, 2);
    void *d_dst = dup_a(fx, dst, nd);
    fx->be->ops->axpby_rows(fx->be, d_dst, ldd, dup_a(fx, src, ns), lds, N, cols, alpha, beta);
    double *rd = to_d(fx, dst, nd); /* the padding columns stay as they were */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < cols; j++)
            rd[(size_t)n * ldd + j] = (double)alpha * src[(size_t)n * lds + j] + (double)beta * dst[(size_t)n * ldd + j];
    CHK_A("axpby_rows dst", get_a(fx, d_dst, nd), rd, nd);
}

/* s: n, p in 1/1000. The mask is dropout.h's definition (test_ops_lora.c checks it against its own
 * splitmix64); here: kept elements times scale, the others 0 */
static void run_dropout(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0];
    const double p = s[1] / 1000.0;
    const uint32_t thr = gt_dropout_threshold(p);
    const float scale = (float)(1.0 / (1.0 - p));
    const uint64_t key = rng_next(r), base = rng_next(r) >> 20;
    float *x = rand_a(fx, r, n, -2, 2);
    void *d_out = dnan_a(fx, n);
    fx->be->ops->dropout(fx->be, d_out, dup_a(fx, x, n), n, key, base, thr, scale);
    double *ro = hd(fx, n);
    for (size_t i = 0; i < n; i++) ro[i] = gt_dropout_keep(key, base + i, thr) ? (double)x[i] * scale : 0.0;
    CHK_A("dropout out", get_a(fx, d_out, n), ro, n);
}

/* s: n bytes: to_device / to_host / dev_copy / zero / the offload copies, the bytes round trip (the
 * host side of the offload in host_alloc memory, as the run's) */
static void run_memory(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0];
    unsigned char *h = hmem(fx, n), *back = hmem(fx, n), *zeros = hmem(fx, n);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)rng_next(r);
    void *a = dmem(fx, n), *b = dmem(fx, n), *host = fx->be->ops->host_alloc(fx->be, n); /* freed below */
    cr_assert_not_null(host, "host_alloc(%zu)", n);
    up(fx, a, h, n);
    fx->be->ops->dev_copy(fx->be, b, a, n);
    down(fx, back, b, n);
    cr_expect(memcmp(back, h, n) == 0, "to_device + dev_copy + to_host changed the bytes (%s)", k_shape);
    /* the copy stream reads a until offload_wait orders the compute stream's zero after it */
    fx->be->ops->offload_to_host(fx->be, host, a, n, 1);
    fx->be->ops->offload_wait(fx->be, 1);
    fx->be->ops->zero(fx->be, a, n);
    fx->be->ops->synchronize(fx->be);
    down(fx, back, a, n);
    cr_expect(memcmp(back, zeros, n) == 0, "zero left non-zero bytes (%s)", k_shape);
    fx->be->ops->offload_to_device(fx->be, a, host, n, 0);
    fx->be->ops->offload_wait(fx->be, 0);
    down(fx, back, a, n);
    cr_expect(memcmp(back, h, n) == 0, "offload_to_host + offload_to_device changed the bytes (%s)", k_shape);
    fx->be->ops->host_free(fx->be, host);
}

/* the timer and the memory report: sane values */
static void run_info(Fx *fx, Rng *r, const int *s) {
    (void)r;
    (void)s;
    fx->be->ops->timer_start(fx->be);
    double ms = fx->be->ops->timer_elapsed_ms(fx->be);
    cr_expect(ms >= 0.0 && ms < 60e3, "timer_elapsed_ms %g", ms);
    uint64_t fr = 0, tot = 0;
    fx->be->ops->memory_info(fx->be, &fr, &tot);
    cr_expect(fr <= tot, "memory_info: free %llu > total %llu", (unsigned long long)fr, (unsigned long long)tot);
}

/* s: N, rows, in, r. DoRA's three entries (backend.h): the row norms of W + scale B A, the
 * magnitude's forward on an adapted block of a wider output (ldo > rows) and its backward, against
 * the formulas in double (the forward and backward from the backend's own norms, which the first
 * check has compared) */
static void run_dora(Fx *fx, Rng *r, const int *s) {
    const int N = s[0], rows = s[1], in = s[2], rk = s[3], ld = rows + 3;
    const float scale = 0.625f;
    const size_t nz = (size_t)N * rows, no = (size_t)N * ld;
    float *W = rand_a(fx, r, (size_t)rows * in, -1, 1), *A = rand_a(fx, r, (size_t)rk * in, -1, 1);
    float *B = rand_a(fx, r, (size_t)rows * rk, -1, 1), *mag = rand_a(fx, r, (size_t)rows, 0.5f, 2);
    float *d_norm = dnan(fx, (size_t)rows);
    fx->be->ops->dora_norm(fx->be, d_norm, dup_a(fx, W, (size_t)rows * in), dup_a(fx, A, (size_t)rk * in),
                           dup_a(fx, B, (size_t)rows * rk), rows, in, rk, scale);
    double *rn = hd(fx, (size_t)rows);
    for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < in; j++) {
            double v = W[(size_t)i * in + j];
            for (int k = 0; k < rk; k++) v += (double)scale * B[(size_t)i * rk + k] * A[(size_t)k * in + j];
            ss += v * v;
        }
        rn[i] = sqrt(ss);
    }
    const float *norm = get_f(fx, d_norm, (size_t)rows);
    CHK("dora_norm", norm, rn, (size_t)rows);
    float *z = rand_a(fx, r, nz, -2, 2), *y = rand_a(fx, r, nz, -2, 2), *out = rand_a(fx, r, no, -2, 2);
    float *dout = rand_a(fx, r, no, -1, 1), *dmag0 = rand_f(fx, r, (size_t)rows, -1, 1);
    void *d_z = dup_a(fx, z, nz), *d_y = dup_a(fx, y, nz), *d_mag = dup_a(fx, mag, (size_t)rows), *d_out = dup_a(fx, out, no);
    fx->be->ops->dora_forward(fx->be, d_out, ld, d_z, d_y, d_mag, d_norm, N, rows, scale);
    double *ro = to_d(fx, out, no); /* the columns past rows stay as they were */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < rows; i++) {
            const double g = (double)mag[i] / norm[i];
            const size_t k = (size_t)n * rows + i;
            ro[(size_t)n * ld + i] += (g - 1) * z[k] + g * scale * y[k];
        }
    CHK_A("dora_forward out", get_a(fx, d_out, no), ro, no);
    float *d_dmag = dup_f(fx, dmag0, (size_t)rows);
    void *d_dz = dnan_a(fx, nz), *d_dy = dnan_a(fx, nz);
    fx->be->ops->dora_backward(fx->be, d_dmag, d_dz, d_dy, dup_a(fx, dout, no), ld, d_z, d_y, d_mag, d_norm, N, rows,
                               scale);
    double *rdz = hd(fx, nz), *rdy = hd(fx, nz), *rdm = to_d(fx, dmag0, (size_t)rows);
    for (int i = 0; i < rows; i++) {
        const double g = (double)mag[i] / norm[i];
        double acc = 0;
        for (int n = 0; n < N; n++) {
            const size_t k = (size_t)n * rows + i;
            const double d = dout[(size_t)n * ld + i];
            rdz[k] = (g - 1) * d;
            rdy[k] = g * scale * d;
            acc += d * (z[k] + (double)scale * y[k]) / norm[i];
        }
        rdm[i] += acc;
    }
    CHK_A("dora_backward dz", get_a(fx, d_dz, nz), rdz, nz);
    CHK_A("dora_backward dy", get_a(fx, d_dy, nz), rdy, nz);
    CHK("dora_backward dmag", get_f(fx, d_dmag, (size_t)rows), rdm, (size_t)rows);
}

/* s: n. convert: fp32 -> bf16 rounds as ref_round_bf16 (bit for bit), bf16 -> fp32 is exact, a
 * same-dtype convert a copy */
static void run_convert(Fx *fx, Rng *r, const int *s) {
    const size_t n = (size_t)s[0];
    float *x = rand_f(fx, r, n, -3, 3);
    float *d_x = dup_f(fx, x, n), *d_back = dnan(fx, n), *d_same = dnan(fx, n);
    void *d_bf = dmem(fx, n * 2);
    fx->be->ops->convert(fx->be, d_bf, GT_BF16, d_x, GT_F32, n);
    fx->be->ops->convert(fx->be, d_back, GT_F32, d_bf, GT_BF16, n);
    fx->be->ops->convert(fx->be, d_same, GT_F32, d_x, GT_F32, n);
    const float *back = get_f(fx, d_back, n), *same = get_f(fx, d_same, n);
    size_t bad = 0, bad_copy = 0;
    for (size_t i = 0; i < n; i++) {
        bad += (double)back[i] != ref_round_bf16(x[i]);
        bad_copy += memcmp(&same[i], &x[i], sizeof x[i]) != 0;
    }
    cr_expect_eq(bad, 0, "convert fp32 -> bf16 -> fp32: %zu of %zu values are not the reference's rounding (%s)", bad, n,
                 k_shape);
    cr_expect_eq(bad_copy, 0, "convert fp32 -> fp32: %zu of %zu values changed (%s)", bad_copy, n, k_shape);
}

/* s: numel, blocksize, nested. dequant_nf4 of a unit nf4.h's host nf4_quantize wrote (random
 * values, a block of zeros, a lone huge value): fp32 and bf16 outputs bit for bit nf4.h's
 * nf4_dequantize_f32 / _bf16 (the format's one definition, checked against bitsandbytes itself) */
static void run_dequant_nf4(Fx *fx, Rng *r, const int *s) {
    const Nf4Format f = {s[0], s[1], s[2] != 0};
    const size_t n = (size_t)f.numel, bytes = (size_t)nf4_bytes(&f);
    float *x = rand_f(fx, r, n, -2, 2);
    for (size_t i = 0; i < n && i < (size_t)f.blocksize; i++) x[i] = 0.0f; /* absmax 0 */
    if (n > (size_t)f.blocksize + 3) x[f.blocksize + 3] = 3e4f;
    uint8_t *unit = hmem(fx, bytes);
    nf4_quantize(&f, x, unit);
    void *d_unit = dmem(fx, bytes);
    up(fx, d_unit, unit, bytes);
    float *want = hf(fx, n);
    uint16_t *want16 = hmem(fx, n * 2);
    nf4_dequantize_f32(&f, unit, 0, f.numel, want);
    nf4_dequantize_bf16(&f, unit, 0, f.numel, want16);
    float *d_out = dnan(fx, n);
    void *d_out16 = dmem(fx, n * 2);
    fx->be->ops->dequant_nf4(fx->be, d_out, GT_F32, d_unit, &f);
    fx->be->ops->dequant_nf4(fx->be, d_out16, GT_BF16, d_unit, &f);
    const float *got = get_f(fx, d_out, n);
    const uint16_t *got16 = get_raw(fx, d_out16, n * 2);
    size_t bad = 0, bad16 = 0;
    for (size_t i = 0; i < n; i++) {
        bad += memcmp(&got[i], &want[i], sizeof got[i]) != 0;
        bad16 += got16[i] != want16[i];
    }
    cr_expect_eq(bad, 0, "dequant_nf4 fp32: %zu of %zu values are not nf4.h's (%s)", bad, n, k_shape);
    cr_expect_eq(bad16, 0, "dequant_nf4 bf16: %zu of %zu values are not nf4.h's (%s)", bad16, n, k_shape);
}

/* ------------------------------------------------------------------ the table */

/* Shapes: small (the simulator runs them too), rows not multiples of 8 or 32, one above the CPU's
 * threading threshold where it matters. */
static const OpCase k_ops[] = {
    {"encoder", run_encoder, {"encoder_forward", "encoder_backward"}, {{2, 7, 20, 11}, {3, 33, 64, 50}}},
    {"layernorm", run_layernorm, {"layernorm_forward", "layernorm_backward"}, {{14, 20}, {257, 96}}},
    {"matmul", run_matmul, {"matmul_forward", "matmul_backward"}, {{14, 20, 60}, {33, 64, 17}}},
    {"gemm", run_gemm, {"gemm"}, {{14, 20, 16, 3}, {70, 33, 48, 8}, {5, 7, 1, 2}}},
    {"attention", run_attention, {"attention_forward", "attention_backward"},
     {{2, 37, 4, 2, 16, 0}, {1, 70, 4, 1, 16, 5}, {1, 20, 2, 2, 64, 0}}},
    {"gelu", run_gelu, {"gelu_forward", "gelu_backward"}, {{1000}, {20001}}},
    {"add", run_add, {"add"}, {{37}, {20001}}},
    {"residual_layernorm", run_residual_layernorm, {"residual_layernorm_forward"}, {{14, 20}, {257, 96}}},
    {"matmul_gelu", run_matmul_gelu, {"matmul_gelu_forward"}, {{14, 20, 60}, {33, 64, 24}}},
    {"rmsnorm", run_rmsnorm, {"rmsnorm_forward", "rmsnorm_backward"}, {{14, 20}, {257, 96}}},
    {"residual_rmsnorm", run_residual_rmsnorm, {"residual_rmsnorm_forward"}, {{14, 20}, {257, 96}}},
    {"head_rmsnorm", run_head_rmsnorm, {"head_rmsnorm_forward", "head_rmsnorm_backward"},
     {{13, 4, 2, 64}, {7, 4, 1, 128}, {9, 2, 2, 20}}},
    {"rope", run_rope, {"rope_forward", "rope_backward"}, {{2, 7, 3, 2, 2, 8}, {2, 37, 11, 4, 2, 64}}},
    {"swiglu", run_swiglu, {"swiglu_forward", "swiglu_backward"}, {{7, 13}, {64, 300}, {9, 40}}},
    {"crossentropy", run_crossentropy, {"crossentropy"}, {{10, 11}, {33, 257}}},
    {"adamw", run_adamw, {"adamw"}, {{17, 1, 0}, {20001, 7, 0}, {20001, 3, 1}}},
    {"vector", run_vector, {"sum_squares", "scale", "to_act"}, {{9}, {20001}}},
    {"axpby_rows", run_axpby_rows, {"axpby_rows"}, {{5, 33, 40, 33}, {130, 150, 160, 152}}},
    {"dropout", run_dropout, {"dropout"}, {{1000, 100}, {20001, 500}}},
    {"memory", run_memory,
     {"to_device", "to_host", "dev_copy", "zero", "offload_to_host", "offload_to_device", "offload_wait",
      "synchronize"},
     {{1}, {100003}}},
    {"info", run_info, {"timer_start", "timer_elapsed_ms", "memory_info"}, {{1}}},
    {"dora", run_dora, {"dora_norm", "dora_forward", "dora_backward"}, {{7, 13, 20, 4}, {33, 64, 48, 8}}},
    {"convert", run_convert, {"convert"}, {{1}, {20001}}},
    {"dequant_nf4", run_dequant_nf4, {"dequant_nf4"}, {{77, 64, 0}, {20001, 64, 1}, {140001, 32, 0}}},
    {"decode", check_decode_ops, {"kv_store", "attention_cached"}, {{8, 2, 64, 0}, {8, 2, 128, 16}, {2, 1, 256, 7}}},
};

/* Entries no row checks a value of: the fixture's own (every row opens, allocates and closes
 * with them; the memory row's host buffer comes from host_alloc) */
static const char *const k_infrastructure[] = {"name", "caps", "close", "dev_alloc", "dev_free", "host_alloc", "host_free"};

/* backend.h's optional entries (backend.c composes them when NULL) */
static const char *const k_optional[] = {"residual_layernorm_forward", "residual_rmsnorm_forward",
                                         "matmul_gelu_forward"};

#define SLOT(f) {#f, offsetof(BackendOps, f)}
static const struct {
    const char *name;
    size_t off;
} k_slots[] = {
    SLOT(name), SLOT(caps), SLOT(close), SLOT(dev_alloc), SLOT(dev_free), SLOT(host_alloc), SLOT(host_free), SLOT(to_device),
    SLOT(to_host), SLOT(dev_copy), SLOT(zero), SLOT(synchronize), SLOT(offload_to_host), SLOT(offload_to_device),
    SLOT(offload_wait), SLOT(encoder_forward), SLOT(encoder_backward), SLOT(layernorm_forward),
    SLOT(layernorm_backward), SLOT(matmul_forward), SLOT(matmul_backward), SLOT(gemm), SLOT(attention_forward),
    SLOT(attention_backward), SLOT(gelu_forward), SLOT(gelu_backward), SLOT(add), SLOT(residual_layernorm_forward),
    SLOT(matmul_gelu_forward), SLOT(rmsnorm_forward), SLOT(rmsnorm_backward), SLOT(residual_rmsnorm_forward),
    SLOT(head_rmsnorm_forward), SLOT(head_rmsnorm_backward), SLOT(rope_forward), SLOT(rope_backward),
    SLOT(swiglu_forward), SLOT(swiglu_backward), SLOT(crossentropy), SLOT(adamw), SLOT(sum_squares), SLOT(scale),
    SLOT(to_act), SLOT(timer_start), SLOT(timer_elapsed_ms), SLOT(memory_info), SLOT(axpby_rows), SLOT(dropout),
    SLOT(dora_norm), SLOT(dora_forward), SLOT(dora_backward), SLOT(convert), SLOT(dequant_nf4), SLOT(kv_store),
    SLOT(attention_cached),
};
#define NSLOTS (sizeof k_slots / sizeof k_slots[0])
#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

static bool name_in(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (list[i] && strcmp(list[i], name) == 0) return true;
    return false;
}

/* how many times the table and the infrastructure list name the entry */
static int times_named(const char *name) {
    int k = name_in(name, k_infrastructure, NELEMS(k_infrastructure));
    for (size_t i = 0; i < NELEMS(k_ops); i++) k += name_in(name, k_ops[i].covers, MAX_COVERS);
    return k;
}

Test(backend_ops, covers_every_entry) {
    /* every slot of the struct is listed (pointers, the name and the functions, and the caps flags,
     * which take a pointer's slot after the name) */
    cr_expect_eq(NSLOTS * sizeof(void *), sizeof(BackendOps),
                 "BackendOps has %zu pointer slots, this test lists %zu: a new entry needs a row in k_ops",
                 sizeof(BackendOps) / sizeof(void *), NSLOTS);
    for (size_t i = 0; i < NSLOTS; i++)
        cr_expect_eq(times_named(k_slots[i].name), 1, "entry %s is named %d times by the table (want once)",
                     k_slots[i].name, times_named(k_slots[i].name));
    for (size_t i = 0; i < NELEMS(k_ops); i++)
        for (int j = 0; j < MAX_COVERS && k_ops[i].covers[j]; j++) {
            bool known = false;
            for (size_t k = 0; k < NSLOTS; k++) known |= strcmp(k_slots[k].name, k_ops[i].covers[j]) == 0;
            cr_expect(known, "row %s names %s, which is not a BackendOps entry", k_ops[i].name, k_ops[i].covers[j]);
        }
    /* the backend under test fills every entry but the optional ones */
    Backend *b = test_backend_open();
    for (size_t i = 0; i < NSLOTS; i++) {
        if (strcmp(k_slots[i].name, "caps") == 0) continue; /* flags, not an entry */
        void (*fn)(void) = NULL;
        memcpy(&fn, (const char *)b->ops + k_slots[i].off, sizeof fn);
        if (!name_in(k_slots[i].name, k_optional, NELEMS(k_optional)))
            cr_expect(fn != NULL, "the %s backend leaves %s NULL, which backend.h does not list as optional",
                      b->ops->name, k_slots[i].name);
    }
    backend_close(b);
}

static void run_table(GtDtype act) {
    for (size_t i = 0; i < NELEMS(k_ops); i++) {
        for (int k = 0; k < MAX_SHAPES && k_ops[i].shapes[k][0]; k++) {
            const int *s = k_ops[i].shapes[k];
            int len = snprintf(k_shape, sizeof k_shape, "%s", k_ops[i].name);
            for (int d = 0; d < MAX_DIMS && s[d] && len < (int)sizeof k_shape - 12; d++)
                len += snprintf(k_shape + len, sizeof k_shape - (size_t)len, "%s%d", d ? "," : " [", s[d]);
            snprintf(k_shape + len, sizeof k_shape - (size_t)len, "]");
            Fx fx;
            fx_open_as(&fx, act);
            Rng r = {1000 + 10 * i + (uint64_t)k};
            k_ops[i].run(&fx, &r, s);
            fx_close(&fx);
        }
    }
}
Test(backend_ops, every_op_vs_reference, .timeout = 300) { run_table(GT_F32); }
Test(backend_ops_bf16, every_op_vs_reference, .timeout = 300) { run_table(GT_BF16); }

/* ------------------------------------------------------------------ optional entries */

/* The optional entries through their backend.c wrapper three ways: with the backend's table as it
 * is, with the entry NULLed in a copy of the table (the composition), and as the unfused ops
 * called here; the composition must equal the unfused ops bit for bit, and the backend's own
 * fused entry too (except CUDA's bf16 matmul_gelu: the bf16 bound). */
enum { NOUT = 4 };
typedef struct {
    void *out[NOUT];
    size_t bytes[NOUT];
} Outs;

/* which: 0 residual_layernorm, 1 residual_rmsnorm, 2 matmul_gelu; how: 0 the backend's table,
 * 1 the entry NULLed, 2 the unfused ops by hand. Inputs from a fixed seed; outputs' bytes in o. */
static void optional_run(Fx *fx, int which, int how, Outs *o) {
    Rng r = {2000 + (uint64_t)which};
    const int N = 37, C = 96, OC = 80;
    const size_t NC = (size_t)N * C, NO = (size_t)N * OC, ab = gt_dtype_size(fx->act);
    BackendOps nulled = *fx->be->ops;
    const BackendOps *orig = fx->be->ops;
    nulled.residual_layernorm_forward = NULL;
    nulled.residual_rmsnorm_forward = NULL;
    nulled.matmul_gelu_forward = NULL;
    void *x = dup_a(fx, rand_a(fx, &r, NC, -2, 2), NC), *y = dup_a(fx, rand_a(fx, &r, NC, -2, 2), NC);
    void *w = dup_a(fx, rand_a(fx, &r, (size_t)OC * C, -0.6f, 0.6f), (size_t)OC * C);
    void *bias = dup_a(fx, rand_a(fx, &r, C, -1, 1), C); /* the norm's C, or the GEMM's first OC < C */
    void *a = dnan_a(fx, NC > NO ? NC : NO), *c = dnan_a(fx, NC > NO ? NC : NO); /* res/out or pre/out */
    float *m = dnan(fx, N), *s = dnan(fx, N);
    memset(o, 0, sizeof *o);
    if (how == 1) fx->be->ops = &nulled;
    if (which == 0) {
        if (how == 2) {
            fx->be->ops->add(fx->be, a, x, y, NC);
            fx->be->ops->layernorm_forward(fx->be, c, m, s, a, w, bias, N, C, 1e-5f);
        } else {
            backend_residual_layernorm_forward(fx->be, a, c, m, s, x, y, w, bias, N, C, 1e-5f);
        }
        *o = (Outs){{a, c, m, s}, {NC * ab, NC * ab, N * 4, N * 4}};
    } else if (which == 1) {
        if (how == 2) {
            fx->be->ops->add(fx->be, a, x, y, NC);
            fx->be->ops->rmsnorm_forward(fx->be, c, s, a, w, N, C, 1e-6f);
        } else {
            backend_residual_rmsnorm_forward(fx->be, a, c, s, x, y, w, N, C, 1e-6f);
        }
        *o = (Outs){{a, c, s}, {NC * ab, NC * ab, N * 4}};
    } else {
        if (how == 2) {
            fx->be->ops->matmul_forward(fx->be, a, x, w, bias, N, C, OC, OC);
            fx->be->ops->gelu_forward(fx->be, c, a, NO);
        } else {
            backend_matmul_gelu_forward(fx->be, c, a, x, w, bias, N, C, OC);
        }
        *o = (Outs){{a, c}, {NO * ab, NO * ab}};
    }
    fx->be->ops = orig;
    for (int i = 0; i < NOUT && o->out[i]; i++) o->out[i] = get_raw(fx, o->out[i], o->bytes[i]);
}

static void optional_entries(GtDtype act) {
    static const char *const names[3] = {"residual_layernorm_forward", "residual_rmsnorm_forward",
                                         "matmul_gelu_forward"};
    for (int which = 0; which < 3; which++) {
        Fx fx;
        fx_open_as(&fx, act);
        Outs own, composed, unfused;
        optional_run(&fx, which, 0, &own);
        optional_run(&fx, which, 1, &composed);
        optional_run(&fx, which, 2, &unfused);
        bool fused_close_only = which == 2 && act == GT_BF16 && strcmp(fx.be->ops->name, "cuda") == 0;
        for (int i = 0; i < NOUT && own.out[i]; i++) {
            cr_expect(memcmp(composed.out[i], unfused.out[i], own.bytes[i]) == 0,
                      "%s NULLed: output %d is not the unfused ops' bit for bit (%s, %s backend)", names[which], i,
                      gt_dtype_name(act), fx.be->ops->name);
            if (fused_close_only) {
                size_t n = own.bytes[i] / 2;
                float *f = hf(&fx, n);
                double *u = hd(&fx, n);
                for (size_t k = 0; k < n; k++) {
                    f[k] = gt_bf16_to_f32(((uint16_t *)own.out[i])[k]);
                    u[k] = gt_bf16_to_f32(((uint16_t *)unfused.out[i])[k]);
                }
                CHECK_TOL(TOL_BF16, "matmul_gelu fused vs unfused", f, u, n, "output %d", i);
            } else {
                cr_expect(memcmp(own.out[i], unfused.out[i], own.bytes[i]) == 0,
                          "%s: the %s backend's entry differs from the unfused ops in output %d (%s)", names[which],
                          fx.be->ops->name, i, gt_dtype_name(act));
            }
        }
        fx_close(&fx);
    }
}
Test(backend_ops, optional_entries_compose_bit_for_bit) { optional_entries(GT_F32); }
Test(backend_ops_bf16, optional_entries_compose_bit_for_bit) { optional_entries(GT_BF16); }
