/* ops_positions.c - the position ops (encoder, rope, attention; backend.h's pos) on packed rows
 * against the double references applied to each example on its own: a row of several segments
 * (positions restarting at 0) must give, segment by segment, what the reference gives on that
 * segment alone as a sequence from position 0. Run by test_backend_ops.c's encoder, rope and
 * attention rows on a backend with GT_CAP_POSITIONS. */
#include "ops_fixture.h"
#include "ref_llama_ops.h"
#include "ref_ops.h"

#include <string.h>

/* positions of B rows of T: segments of random lengths 1..max_len (the last one cut at T) */
void pos_random_segments(Rng *r, int *pos, int B, int T, int max_len) {
    for (int b = 0; b < B; b++) {
        int len = 0, p = 0;
        for (int t = 0; t < T; t++) {
            if (p == len) {
                len = 1 + (int)(rng_next(r) % (uint64_t)max_len);
                p = 0;
            }
            pos[(size_t)b * T + t] = p++;
        }
    }
}

/* the segment of row b holding t: its start and length */
static int seg_len(const int *pos_row, int T, int s) {
    int n = 1;
    while (s + n < T && pos_row[s + n] != 0) n++;
    return n;
}

/* gather rows s..s+n-1 of row b (width w) of x into y[n*w] */
static void gather(double *y, const double *x, int b, int T, int s, int n, size_t w) {
    memcpy(y, x + ((size_t)b * T + s) * w, (size_t)n * w * sizeof *y);
}
static void scatter(double *x, const double *y, int b, int T, int s, int n, size_t w) {
    memcpy(x + ((size_t)b * T + s) * w, y, (size_t)n * w * sizeof *y);
}

void check_attention_pos(GtDtype act, AttCase c, int max_len, uint64_t seed) {
    Fx fx;
    fx_open_as(&fx, act);
    Rng r = {seed};
    const int B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, hs = c.hd;
    const size_t R = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs;
    const size_t n3 = (size_t)B * T * R, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = rand_a(&fx, &r, n3, -2, 2), *dout = rand_a(&fx, &r, nout, -1, 1);
    int *pos = hmem(&fx, (size_t)B * T * sizeof(int));
    pos_random_segments(&r, pos, B, T, max_len);
    int *d_pos = dup_i(&fx, pos, (size_t)B * T);
    void *d_qkv = dup_a(&fx, qkv, n3), *d_out = dnan_a(&fx, nout);
    float *d_lse = dnan(&fx, nl);
    fx.be->ops->attention_forward(fx.be, d_out, d_lse, d_qkv, B, T, NH, NKV, hs, c.window, d_pos);
    void *d_dqkv = dnan_a(&fx, n3);
    float *d_ws = dnan(&fx, backend_attention_workspace_floats(fx.be->act_dtype, B, T, NH, NKV, hs));
    fx.be->ops->attention_backward(fx.be, d_dqkv, d_ws, dup_a(&fx, dout, nout), d_qkv, d_out, d_lse, B, T, NH, NKV,
                                   hs, c.window, d_pos);

    double *rqkv = to_d(&fx, qkv, n3), *rdout = to_d(&fx, dout, nout);
    double *ro = hd(&fx, nout), *rl = hd(&fx, nl), *rd = hd(&fx, n3);
    const double *out_given = act == GT_BF16 ? to_d(&fx, get_a(&fx, d_out, nout), nout) : NULL;
    double *sq = hd(&fx, (size_t)T * R), *so = hd(&fx, (size_t)T * C), *sl = hd(&fx, (size_t)NH * T);
    double *sdo = hd(&fx, (size_t)T * C), *sd = hd(&fx, (size_t)T * R), *sog = hd(&fx, (size_t)T * C);
    int segs = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            const int n = seg_len(pos + (size_t)b * T, T, s);
            gather(sq, rqkv, b, T, s, n, R);
            gather(sdo, rdout, b, T, s, n, C);
            ref_attention_gqa_forward(so, sl, sq, 1, n, NH, NKV, hs, c.window);
            if (out_given) gather(sog, out_given, b, T, s, n, C);
            ref_attention_gqa_backward(sd, sdo, sq, out_given ? sog : NULL, 1, n, NH, NKV, hs, c.window);
            scatter(ro, so, b, T, s, n, C);
            scatter(rd, sd, b, T, s, n, R);
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < n; t++) rl[((size_t)b * NH + h) * T + s + t] = sl[(size_t)h * n + t];
            s += n;
            segs++;
        }
    cr_assert_gt(segs, B, "the rows hold several segments");
#define ATT_FMT "positions: B=%d T=%d NH=%d NKV=%d hd=%d window=%d, %d segments"
#define ATT_ARGS B, T, NH, NKV, hs, c.window, segs
    CHECK_A("attention out", get_a(&fx, d_out, nout), ro, nout, ATT_FMT, ATT_ARGS);
    CHECK("attention lse", get_f(&fx, d_lse, nl), rl, nl, ATT_FMT, ATT_ARGS);
    CHECK_A("attention dqkv", get_a(&fx, d_dqkv, n3), rd, n3, ATT_FMT, ATT_ARGS);
#undef ATT_FMT
#undef ATT_ARGS
    fx_close(&fx);
}

void check_encoder_pos(Fx *fx, Rng *r, int B, int T, int C, int V, double act_tol) {
    const size_t BT = (size_t)B * T, VC = (size_t)V * C, TC = (size_t)T * C;
    int *tok = rand_i(fx, r, BT, V), *pos = hmem(fx, BT * sizeof(int));
    pos_random_segments(r, pos, B, T, T / 3 + 1);
    float *wte = rand_a(fx, r, VC, -1, 1), *wpe = rand_a(fx, r, TC, -1, 1), *dout = rand_a(fx, r, BT * C, -1, 1);
    float *dwte0 = rand_f(fx, r, VC, -1, 1), *dwpe0 = rand_f(fx, r, TC, -1, 1);
    int *d_tok = dup_i(fx, tok, BT), *d_pos = dup_i(fx, pos, BT);
    void *d_out = dnan_a(fx, BT * C);
    float *d_dwte = dup_f(fx, dwte0, VC), *d_dwpe = dup_f(fx, dwpe0, TC);
    fx->be->ops->encoder_forward(fx->be, d_out, d_tok, dup_a(fx, wte, VC), dup_a(fx, wpe, TC), B, T, C, d_pos);
    fx->be->ops->encoder_backward(fx->be, d_dwte, d_dwpe, dup_a(fx, dout, BT * C), d_tok, B, T, C, d_pos);
    /* the reference: each segment as a sequence of its own, B = 1 from position 0 */
    double *ro = hd(fx, BT * C), *rdwte = to_d(fx, dwte0, VC), *rdwpe = to_d(fx, dwpe0, TC);
    double *rwte = to_d(fx, wte, VC), *rwpe = to_d(fx, wpe, TC), *rdout = to_d(fx, dout, BT * C);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            const int n = seg_len(pos + (size_t)b * T, T, s);
            const size_t o = (size_t)b * T + s;
            ref_encoder_forward(ro + o * C, tok + o, rwte, rwpe, 1, n, C);
            ref_encoder_backward(rdwte, rdwpe, rdout + o * C, tok + o, 1, n, C);
            s += n;
        }
    CHECK_TOL(act_tol, "encoder out (positions)", get_a(fx, d_out, BT * C), ro, BT * C, "B=%d T=%d C=%d", B, T, C);
    CHECK_TOL(TOL, "encoder dwte (positions)", get_f(fx, d_dwte, VC), rdwte, VC, "B=%d T=%d C=%d", B, T, C);
    CHECK_TOL(TOL, "encoder dwpe (positions)", get_f(fx, d_dwpe, TC), rdwpe, TC, "B=%d T=%d C=%d", B, T, C);
}

void check_rope_pos(Fx *fx, Rng *r, int B, int T, int NH, int NKV, int hs, double act_tol) {
    const size_t R = (size_t)(NH + 2 * NKV) * hs, n = (size_t)B * T * R, ntab = (size_t)T * (hs / 2);
    double *dc = hd(fx, ntab), *ds = hd(fx, ntab);
    float *fc = hf(fx, ntab), *fs = hf(fx, ntab);
    ref_rope_tables(dc, ds, T, hs, 10000.0);
    for (size_t i = 0; i < ntab; i++) { /* the op's fp32 tables; the reference reads the same values */
        fc[i] = (float)dc[i];
        fs[i] = (float)ds[i];
        dc[i] = fc[i];
        ds[i] = fs[i];
    }
    int *pos = hmem(fx, (size_t)B * T * sizeof(int));
    pos_random_segments(r, pos, B, T, T / 3 + 1);
    float *d_c = dup_f(fx, fc, ntab), *d_s = dup_f(fx, fs, ntab);
    float *x = rand_a(fx, r, n, -2, 2), *dy = rand_a(fx, r, n, -1, 1);
    void *d_x = dup_a(fx, x, n), *d_dy = dup_a(fx, dy, n);
    int *d_pos = dup_i(fx, pos, (size_t)B * T);
    fx->be->ops->rope_forward(fx->be, d_x, d_c, d_s, B, T, 0, NH, NKV, hs, d_pos);
    fx->be->ops->rope_backward(fx->be, d_dy, d_c, d_s, B, T, NH, NKV, hs, d_pos);
    double *rx = to_d(fx, x, n), *rdy = to_d(fx, dy, n);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            const int len = seg_len(pos + (size_t)b * T, T, s);
            const size_t o = ((size_t)b * T + s) * R;
            ref_rope_forward(rx + o, dc, ds, 1, len, 0, NH, NKV, hs);
            ref_rope_backward(rdy + o, dc, ds, 1, len, NH, NKV, hs);
            s += len;
        }
    CHECK_TOL(act_tol, "rope forward (positions)", get_a(fx, d_x, n), rx, n, "B=%d T=%d hd=%d", B, T, hs);
    CHECK_TOL(act_tol, "rope backward (positions)", get_a(fx, d_dy, n), rdy, n, "B=%d T=%d hd=%d", B, T, hs);
}
