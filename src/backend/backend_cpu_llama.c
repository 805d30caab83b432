/* backend_cpu_llama.c - the CPU backend's Llama-family ops (backend.h): RMSNorm (forward,
 * backward, fused with the residual add; per head, Qwen3's q/k norm), rotary position
 * embeddings (RoPE) and SwiGLU.
 *
 * Conventions as in backend_cpu.c: fp32 compute on fp32 buffers, the bf16 act dtype through the
 * widening helpers (each act_t output rounded once), parameter gradients accumulated in fp32.
 * Determinism: rows (or elements) are independent and each is written by one thread; the row
 * sums run in a fixed order (8 lanes, dot_f); rmsnorm's dw gives each thread a block of channels
 * and sums the rows in order in double, as layernorm's dw does. So every op here gives the same
 * bits for any thread count. */
#include "backend_cpu_internal.h"

#include <string.h>

/* ------------------------------------------------------------------ rmsnorm */

/* One row: rstd = 1/sqrt(mean(x^2) + eps), the sum of squares in fp32 in dot_f's fixed 8-lane
 * order, the mean as sum * (1/C) (as ln_row does); o = x * rstd * w. Shared by rmsnorm_forward and
 * residual_rmsnorm_forward, which must agree bit for bit. */
static inline float rms_row(float *o, const float *x, const float *w, int C, float invC, float eps) {
    float s = 1.0f / sqrtf(dot_f(x, x, C) * invC + eps);
    for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
    return s;
}

static void f32_rmsnorm_forward(Backend *b, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                                float eps) {
    float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float s = rms_row(out + (size_t)n * C, inp + (size_t)n * C, w, C, invC, eps);
        if (rstd) rstd[n] = s;
    }
}

/* res = x + y (rounded to bf16 first when round_bf16, as the bf16 add would store it), then
 * out = rmsnorm(res), one row at a time. res may alias x or y: each element of x and y is read
 * before res overwrites it. */
static void f32_residual_rmsnorm_forward(Backend *b, float *res, float *out, float *rstd, const float *x,
                                         const float *y, const float *w, int N, int C, float eps, bool round_bf16) {
    float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *r = res + (size_t)n * C;
        const float *xr = x + (size_t)n * C, *yr = y + (size_t)n * C;
        residual_row(r, xr, yr, C, round_bf16);
        float s = rms_row(out + (size_t)n * C, r, w, C, invC, eps);
        if (rstd) rstd[n] = s;
    }
}

/* y_c = w_c x_c r with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / C and
 *   dx_j = r (w_j dy_j) - x_j r^3 mean_c(w_c dy_c x_c),
 *   dw_c = sum over rows of dy_c x_c r.
 * One row's dx, added to dx (accumulate) or written over it; dx may equal dy (each dy[c] is read
 * before dx[c] is written). Shared by rmsnorm_backward and head_rmsnorm_backward. */
static inline void rms_row_backward(float *dx, const float *dy, const float *x, const float *w, float s, int C,
                                    float invC, bool accumulate) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; j++) a[j] += (dy[i + j] * w[i + j]) * x[i + j];
    float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < C; i++) sum += (dy[i] * w[i]) * x[i];
    float k = s * s * s * (sum * invC);
    if (accumulate)
        for (int c = 0; c < C; c++) dx[c] += s * (dy[c] * w[c]) - x[c] * k;
    else
        for (int c = 0; c < C; c++) dx[c] = s * (dy[c] * w[c]) - x[c] * k;
}

static void f32_rmsnorm_backward(Backend *b, float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C) {
    float invC = 1.0f / (float)C;
    /* 1. dinp (row-parallel; each row independent), accumulated */
    if (dinp) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * C >= PAR_MIN)
        for (int n = 0; n < N; n++)
            rms_row_backward(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, rstd[n], C, invC,
                             true);
    }
    /* 2. dw: layernorm's deterministic column reduction with no mean */
    if (dw) cpu_norm_param_grads(b, dw, NULL, dout, inp, NULL, rstd, N, C);
}

/* ------------------------------------------------------------------ head rmsnorm */

/* Qwen3's q_norm/k_norm: rmsnorm_forward's row (rms_row) on each of the NH + NKV q and k heads of
 * a row of R = (NH + 2*NKV) * hd values, with wq on the q heads and wk on the k heads; the v
 * heads copied. rstd[n * (NH + NKV) + h]. */
static void f32_head_rmsnorm_forward(Backend *b, float *out, float *rstd, const float *inp, const float *wq,
                                     const float *wk, int N, int NH, int NKV, int hd, float eps) {
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hd;
    float invC = 1.0f / (float)hd;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * R >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * R;
        float *o = out + (size_t)n * R;
        for (int h = 0; h < H; h++) {
            float s = rms_row(o + (size_t)h * hd, x + (size_t)h * hd, h < NH ? wq : wk, hd, invC, eps);
            if (rstd) rstd[(size_t)n * H + h] = s;
        }
        memcpy(o + (size_t)H * hd, x + (size_t)H * hd, (size_t)NKV * hd * sizeof(float));
    }
}

/* dwq, dwk: the column reduction over (row, head) rows, n then h, from dout BEFORE dinp is
 * written (dinp may equal dout); then dinp's q/k heads overwritten through rms_row_backward, its
 * v heads = dout's */
static void f32_head_rmsnorm_backward(Backend *b, float *dinp, float *dwq, float *dwk, const float *dout,
                                      const float *inp, const float *wq, const float *wk, const float *rstd, int N,
                                      int NH, int NKV, int hd) {
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hd;
    float invC = 1.0f / (float)hd;
    if (dwq) cpu_norm_param_grads_rows(b, dwq, NULL, dout, inp, NULL, rstd, N, NH, R, H, hd);
    if (dwk)
        cpu_norm_param_grads_rows(b, dwk, NULL, dout + (size_t)NH * hd, inp + (size_t)NH * hd, NULL, rstd + NH, N,
                                  NKV, R, H, hd);
    if (!dinp) return;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * R >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * R, *dy = dout + (size_t)n * R;
        float *dx = dinp + (size_t)n * R;
        for (int h = 0; h < H; h++)
            rms_row_backward(dx + (size_t)h * hd, dy + (size_t)h * hd, x + (size_t)h * hd, h < NH ? wq : wk,
                             rstd[(size_t)n * H + h], hd, invC, false);
        if (dx != dy) memcpy(dx + (size_t)H * hd, dy + (size_t)H * hd, (size_t)NKV * hd * sizeof(float));
    }
}

/* ------------------------------------------------------------------ rope */

/* HF's rotate_half: per head, x[i] pairs with x[i + hd/2]. The q heads and the k heads are the
 * first (NH + NKV) * hd values of each qkv row, contiguous; the v heads are never touched. Row
 * (b, t) is at position p = pos0 + t. dir = +1: the forward rotation by the angle, -1: the
 * inverse (the transpose, the backward). Plain float products and sums, no fmaf, and nothing
 * fused by the compiler (GCC's -std=c11 implies -ffp-contract=off): each product rounded, then
 * the sum. A CUDA kernel computing x*c - y*s the same way (__fmul_rn / __fsub_rn / __fadd_rn, or
 * nvcc --fmad=false) matches bit for bit; ops_llama::rope checks the bits. */
static void f32_rope(Backend *b, float *qkv, const float *cos, const float *sin, int B, int T, int pos0, int NH,
                     int NKV, int hd, int dir, const int *pos) {
    const int half = hd / 2, heads = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hd;
    const int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)BT * heads * hd >= PAR_MIN)
    for (int bt = 0; bt < BT; bt++) {
        const size_t p = (size_t)(pos ? pos[bt] : pos0 + bt % T);
        const float *cr = cos + p * half, *sr = sin + p * half;
        float *row = qkv + (size_t)bt * R;
        for (int h = 0; h < heads; h++) {
            float *x = row + (size_t)h * hd, *y = x + half;
            if (dir > 0)
                for (int i = 0; i < half; i++) {
                    float a = x[i], c = y[i];
                    x[i] = a * cr[i] - c * sr[i];
                    y[i] = c * cr[i] + a * sr[i];
                }
            else
                for (int i = 0; i < half; i++) {
                    float a = x[i], c = y[i];
                    x[i] = a * cr[i] + c * sr[i];
                    y[i] = c * cr[i] - a * sr[i];
                }
        }
    }
}

/* ------------------------------------------------------------------ swiglu */

/* out = silu(g) * u, silu(g) = g / (1 + exp(-g)); g very negative: exp(-g) = inf, silu = -0 */
static void f32_swiglu_forward(Backend *b, float *out, const float *inp, int N, int I) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * I >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * I, *u = g + I;
        float *o = out + (size_t)n * I;
#pragma omp simd
        for (int i = 0; i < I; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

/* with sig = 1/(1+exp(-g)): d silu/dg = sig + g sig (1 - sig) = sig (1 + g (1 - sig)), so
 * dg = dout u sig (1 + g (1 - sig)), du = dout silu(g) (silu as the forward computes it) */
static void f32_swiglu_backward(Backend *b, float *dinp, const float *inp, const float *dout, int N, int I) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * I >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * I, *u = g + I, *dy = dout + (size_t)n * I;
        float *dg = dinp + (size_t)n * 2 * I, *du = dg + I;
#pragma omp simd
        for (int i = 0; i < I; i++) {
            float gi = g[i], ui = u[i], dyi = dy[i]; /* all read first: dinp may alias inp */
            float den = 1.0f + expf(-gi);
            float sig = 1.0f / den;
            dg[i] = dyi * ui * sig * (1.0f + gi * (1.0f - sig));
            du[i] = dyi * (gi / den);
        }
    }
}

/* ------------------------------------------------------------------ act dtype wrappers */

void cpu_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *w, int N, int C,
                         float eps) {
    const size_t NC = (size_t)N * C;
    float *o = cpu_act_out(b, 0, out, NC, false);
    f32_rmsnorm_forward(b, o, rstd, cpu_act_in(b, 1, inp, NC), cpu_act_in(b, 2, w, (size_t)C), N, C, eps);
    cpu_act_done(b, out, o, NC);
}

void cpu_rmsnorm_backward(Backend *b, act_t *dinp, float *dw, const act_t *dout, const act_t *inp, const act_t *w,
                          const float *rstd, int N, int C) {
    const size_t NC = (size_t)N * C;
    float *di = cpu_act_out(b, 0, dinp, NC, true);
    f32_rmsnorm_backward(b, di, dw, cpu_act_in(b, 1, dout, NC), cpu_act_in(b, 2, inp, NC),
                         cpu_act_in(b, 3, w, (size_t)C), rstd, N, C);
    cpu_act_done(b, dinp, di, NC);
}

/* fused: widen x and y once, add and rmsnorm per row (res rounded to bf16 first under bf16), round
 * both outputs once. Equal to cpu_add + cpu_rmsnorm_forward bit for bit. */
void cpu_head_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *wq, const act_t *wk,
                              int N, int NH, int NKV, int hd, float eps) {
    const size_t n = (size_t)N * (NH + 2 * NKV) * hd;
    float *o = cpu_act_out(b, 0, out, n, false);
    f32_head_rmsnorm_forward(b, o, rstd, cpu_act_in(b, 1, inp, n), cpu_act_in(b, 2, wq, (size_t)hd),
                             cpu_act_in(b, 3, wk, (size_t)hd), N, NH, NKV, hd, eps);
    cpu_act_done(b, out, o, n);
}

/* under bf16, dout is widened into its own slot before dinp (slot 0, not read) is written, so
 * dinp == dout works as in fp32; the copied v heads are bf16 values, rounded back unchanged */
void cpu_head_rmsnorm_backward(Backend *b, act_t *dinp, float *dwq, float *dwk, const act_t *dout, const act_t *inp,
                               const act_t *wq, const act_t *wk, const float *rstd, int N, int NH, int NKV, int hd) {
    const size_t n = (size_t)N * (NH + 2 * NKV) * hd;
    const float *dy = cpu_act_in(b, 1, dout, n);
    float *di = dinp ? cpu_act_out(b, 0, dinp, n, false) : NULL;
    f32_head_rmsnorm_backward(b, di, dwq, dwk, dy, cpu_act_in(b, 2, inp, n), cpu_act_in(b, 3, wq, (size_t)hd),
                              cpu_act_in(b, 4, wk, (size_t)hd), rstd, N, NH, NKV, hd);
    if (di) cpu_act_done(b, dinp, di, n);
}

void cpu_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x, const act_t *y,
                                  const act_t *w, int N, int C, float eps) {
    const size_t NC = (size_t)N * C;
    const float *xw = cpu_act_in(b, 1, x, NC), *yw = cpu_act_in(b, 2, y, NC);
    const float *ww = cpu_act_in(b, 3, w, (size_t)C);
    float *r = cpu_act_out(b, 0, res, NC, false);
    float *o = cpu_act_out(b, 5, out, NC, false);
    f32_residual_rmsnorm_forward(b, r, o, rstd, xw, yw, ww, N, C, eps, b->act_dtype == GT_BF16);
    cpu_act_done(b, res, r, NC);
    cpu_act_done(b, out, o, NC);
}

/* in place; under bf16 the whole rows are widened and rounded back, which leaves the v heads'
 * bf16 values exactly as they were */
void cpu_rope_forward(Backend *b, act_t *qkv, const float *cos, const float *sin, int B, int T, int pos0, int NH,
                      int NKV, int hd, const int *pos) {
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * hd;
    float *x = cpu_act_out(b, 0, qkv, n, true);
    f32_rope(b, x, cos, sin, B, T, pos0, NH, NKV, hd, +1, pos);
    cpu_act_done(b, qkv, x, n);
}

void cpu_rope_backward(Backend *b, act_t *dqkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                       int hd, const int *pos) {
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * hd;
    float *x = cpu_act_out(b, 0, dqkv, n, true);
    f32_rope(b, x, cos, sin, B, T, 0, NH, NKV, hd, -1, pos);
    cpu_act_done(b, dqkv, x, n);
}

void cpu_swiglu_forward(Backend *b, act_t *out, const act_t *inp, int N, int I) {
    const size_t NI = (size_t)N * I;
    float *o = cpu_act_out(b, 0, out, NI, false);
    f32_swiglu_forward(b, o, cpu_act_in(b, 1, inp, 2 * NI), N, I);
    cpu_act_done(b, out, o, NI);
}

void cpu_swiglu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, int N, int I) {
    const size_t NI = (size_t)N * I;
    float *di = cpu_act_out(b, 0, dinp, 2 * NI, false);
    f32_swiglu_backward(b, di, cpu_act_in(b, 1, inp, 2 * NI), cpu_act_in(b, 2, dout, NI), N, I);
    cpu_act_done(b, dinp, di, 2 * NI);
}
