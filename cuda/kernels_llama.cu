/* kernels_llama.cu - the CUDA backend's Llama-family ops: RMSNorm (forward, backward, fused
 * residual + RMSNorm, per head as Qwen3's q/k norm), rotary position embeddings (forward, backward) and SwiGLU (forward,
 * backward). Contracts: backend.h; the formulas are the CPU backend's (backend_cpu*.c), so the
 * two agree to rounding (RoPE bit for bit).
 *
 * act_t tensors are fp32 or bf16 (b->act_dtype): each op dispatches to a kernel templated on the
 * storage type (Act = float or __nv_bfloat16), reads through load_f32, computes in fp32 and
 * rounds each act_t output once through store_from_f32 (cuda_common.cuh). rstd and the RMSNorm
 * weight gradient are fp32. Determinism: no atomics; dw is summed in a fixed order: with dinp in
 * one pass (kernels_misc.cu's single-pass norm backward: fp32 partials per warp, per block, then
 * the blocks in order), or for per-head norms and rows too wide for that, in layernorm's two-pass
 * column reduction (fp32 partials over fixed row chunks, then the chunks in order).
 *
 * RMSNorm (HF's LlamaRMSNorm): rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w. One warp per
 * row; the squares are summed with explicit fmaf in lane order, so rmsnorm_forward and
 * residual_rmsnorm_forward (which share rmsnorm_row_finish) compute the same bits whatever the
 * compiler contracts. Backward, with xhat = x * rstd and dn = dout * w:
 *   dinp += (dn - xhat * mean(dn * xhat)) * rstd,   dw += sum over rows of dout * xhat.
 *
 * RoPE (HF's rotate_half): x[i] <- x[i] c - x[i + hd/2] s, x[i + hd/2] <- x[i + hd/2] c + x[i] s
 * on the NH query and NKV key heads, in place; one thread per pair (i, i + hd/2). The products
 * and the sum are rounded separately (__fmul_rn / __fadd_rn), never fused into an FMA, so the
 * result is the CPU's plain-float x*c - y*s bit for bit. Backward: the inverse rotation.
 *
 * SwiGLU: out = silu(g) * u with silu(g) = g / (1 + exp(-g)); backward with sig = 1/(1+exp(-g)):
 *   dg = dout * u * sig * (1 + g (1 - sig)),   du = dout * silu(g). */
#include "cuda_common.cuh"

#include <math.h>

/* ------------------------------------------------------------------ RMSNorm */

/* The rest of one row's RMSNorm forward for the calling warp, once each lane has summed the
 * squares of its elements x[lane], x[lane + 32], ... in that order (fmaf) into s. Shared by
 * rmsnorm_forward and residual_rmsnorm_forward, so the two compute the same bits. */
template <typename Act>
__device__ __forceinline__ void rmsnorm_row_finish(Act *o, float *rstd, int row, const Act *x,
                                                   const Act *w, int C, float eps, int lane,
                                                   float s) {
    float ms = gtc_warp_sum(s) / (float)C;
    float r = 1.0f / sqrtf(ms + eps);
    for (int c = lane; c < C; c += 32) store_from_f32(o, c, load_f32(x, c) * r * load_f32(w, c));
    if (lane == 0 && rstd) rstd[row] = r;
}

/* one warp per row */
template <typename Act>
__global__ void rmsnorm_forward_kernel(Act *out, float *rstd, const Act *inp, const Act *w, int N,
                                       int C, float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* warp-uniform */
    const Act *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = load_f32(x, c);
        s = fmaf(v, v, s);
    }
    rmsnorm_row_finish(out + (size_t)row * C, rstd, row, x, w, C, eps, lane, s);
}

/* res = x + y rounded once (add_kernel's arithmetic), then rmsnorm_forward's row on the value
 * res now holds. res may alias x or y: each element is read, then written, by one thread, and
 * later passes read only res. */
template <typename Act>
__global__ void residual_rmsnorm_forward_kernel(Act *res, Act *out, float *rstd, const Act *x,
                                                const Act *y, const Act *w, int N, int C,
                                                float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* warp-uniform */
    const size_t off = (size_t)row * C;
    const Act *xr = x + off, *yr = y + off;
    Act *rr = res + off;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        store_from_f32(rr, c, load_f32(xr, c) + load_f32(yr, c));
        float v = load_f32(rr, c);
        s = fmaf(v, v, s);
    }
    rmsnorm_row_finish(out + off, rstd, row, (const Act *)rr, w, C, eps, lane, s);
}

/* One row's gradient through the norm for the calling warp: (dn - xhat * mean(dn * xhat)) * rstd
 * with dn = dout * w, added to dx (ACC: a read-modify-write in fp32, rounded once per element) or
 * written over it. dx may equal dy: each element is read, then written, by one lane. Shared by
 * rmsnorm_backward and head_rmsnorm_backward. */
template <bool ACC, typename Act>
__device__ __forceinline__ void rmsnorm_row_backward(Act *dx, const Act *dy, const Act *x,
                                                     const Act *w, float r, int C, int lane) {
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += load_f32(dy, c) * load_f32(w, c) * (load_f32(x, c) * r);
    float mdnx = gtc_warp_sum(s) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float xh = load_f32(x, c) * r;
        float g = (load_f32(dy, c) * load_f32(w, c) - xh * mdnx) * r;
        store_from_f32(dx, c, ACC ? load_f32(dx, c) + g : g);
    }
}

/* dinp += the row's gradient; one warp per row */
template <typename Act>
__global__ void rmsnorm_backward_dinp_kernel(Act *dinp, const Act *dout, const Act *inp,
                                             const Act *w, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    rmsnorm_row_backward<true>(dinp + off, dout + off, inp + off, w, rstd[row], C, lane);
}

/* ------------------------------------------------------------------ per-head RMSNorm */

/* One warp per (row n, head h) of the R = NH + 2*NKV heads of hd values: h < NH + NKV (q, then
 * k heads) is rmsnorm_forward's row with wq or wk, rstd[n * (NH + NKV) + h]; a v head is copied. */
template <typename Act>
__global__ void head_rmsnorm_forward_kernel(Act *out, float *rstd, const Act *inp, const Act *wq,
                                            const Act *wk, int N, int NH, int NKV, int hd,
                                            float eps) {
    const int H = NH + NKV, R = H + NKV;
    size_t warp = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)N * R) return; /* warp-uniform */
    int n = (int)(warp / R), h = (int)(warp % R);
    const size_t off = warp * hd;
    const Act *x = inp + off;
    Act *o = out + off;
    if (h >= H) {
        for (int c = lane; c < hd; c += 32) o[c] = x[c];
        return;
    }
    float s = 0.0f;
    for (int c = lane; c < hd; c += 32) {
        float v = load_f32(x, c);
        s = fmaf(v, v, s);
    }
    rmsnorm_row_finish(o, rstd, n * H + h, x, h < NH ? wq : wk, hd, eps, lane, s);
}

/* one warp per (row, head): a q or k head's gradient written over dinp's, a v head copied */
template <typename Act>
__global__ void head_rmsnorm_backward_kernel(Act *dinp, const Act *dout, const Act *inp,
                                             const Act *wq, const Act *wk, const float *rstd, int N,
                                             int NH, int NKV, int hd) {
    const int H = NH + NKV, R = H + NKV;
    size_t warp = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)N * R) return; /* warp-uniform */
    int n = (int)(warp / R), h = (int)(warp % R);
    const size_t off = warp * hd;
    if (h >= H) {
        for (int c = lane; c < hd; c += 32) dinp[off + c] = dout[off + c];
        return;
    }
    rmsnorm_row_backward<false>(dinp + off, dout + off, inp + off, h < NH ? wq : wk,
                                rstd[(size_t)n * H + h], hd, lane);
}

template <typename Act>
static void head_rmsnorm_forward_t(Backend *b, Act *out, float *rstd, const Act *inp, const Act *wq,
                                   const Act *wk, int N, int NH, int NKV, int hd, float eps) {
    size_t warps = (size_t)N * (NH + 2 * NKV), per_block = GTC_THREADS / 32;
    GTC_LAUNCH(head_rmsnorm_forward_kernel<Act>, (unsigned)((warps + per_block - 1) / per_block),
               GTC_THREADS, 0, gtc_stream(b), out, rstd, inp, wq, wk, N, NH, NKV, hd, eps);
    CUDA_CHECK_LAUNCH();
}

static void head_rmsnorm_check(int NH, int NKV, int hd) {
    if (NH <= 0 || NKV <= 0 || hd <= 0) {
        fprintf(stderr, "%s:%d: head_rmsnorm: unsupported shape NH=%d NKV=%d hd=%d\n", __FILE__,
                __LINE__, NH, NKV, hd);
        exit(GT_EXIT_FAILURE);
    }
}

void gtc_head_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp,
                              const act_t *wq, const act_t *wk, int N, int NH, int NKV, int hd,
                              float eps) {
    if (N <= 0) return;
    head_rmsnorm_check(NH, NKV, hd);
    if (gtc_act_bf16(b))
        head_rmsnorm_forward_t(b, (gtc_bf16 *)out, rstd, (const gtc_bf16 *)inp,
                               (const gtc_bf16 *)wq, (const gtc_bf16 *)wk, N, NH, NKV, hd, eps);
    else
        head_rmsnorm_forward_t(b, (float *)out, rstd, (const float *)inp, (const float *)wq,
                               (const float *)wk, N, NH, NKV, hd, eps);
}

/* dwq, dwk first (they read dout, which dinp may overwrite: same stream, in order), then dinp */
template <typename Act>
static void head_rmsnorm_backward_t(Backend *b, Act *dinp, float *dwq, float *dwk, const Act *dout,
                                    const Act *inp, const Act *wq, const Act *wk,
                                    const float *rstd, int N, int NH, int NKV, int hd) {
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hd;
    if (dwq) gtc_norm_param_grads_rows(b, dwq, dout, inp, rstd, N, NH, R, H, hd);
    if (dwk)
        gtc_norm_param_grads_rows(b, dwk, dout + (size_t)NH * hd, inp + (size_t)NH * hd, rstd + NH,
                                  N, NKV, R, H, hd);
    if (!dinp) return;
    size_t warps = (size_t)N * (NH + 2 * NKV), per_block = GTC_THREADS / 32;
    GTC_LAUNCH(head_rmsnorm_backward_kernel<Act>, (unsigned)((warps + per_block - 1) / per_block),
               GTC_THREADS, 0, gtc_stream(b), dinp, dout, inp, wq, wk, rstd, N, NH, NKV, hd);
    CUDA_CHECK_LAUNCH();
}

void gtc_head_rmsnorm_backward(Backend *b, act_t *dinp, float *dwq, float *dwk, const act_t *dout,
                               const act_t *inp, const act_t *wq, const act_t *wk,
                               const float *rstd, int N, int NH, int NKV, int hd) {
    if (N <= 0) return;
    head_rmsnorm_check(NH, NKV, hd);
    if (gtc_act_bf16(b))
        head_rmsnorm_backward_t(b, (gtc_bf16 *)dinp, dwq, dwk, (const gtc_bf16 *)dout,
                                (const gtc_bf16 *)inp, (const gtc_bf16 *)wq, (const gtc_bf16 *)wk,
                                rstd, N, NH, NKV, hd);
    else
        head_rmsnorm_backward_t(b, (float *)dinp, dwq, dwk, (const float *)dout,
                                (const float *)inp, (const float *)wq, (const float *)wk, rstd, N,
                                NH, NKV, hd);
}

template <typename Act>
static void rmsnorm_forward_t(Backend *b, Act *out, float *rstd, const Act *inp, const Act *w,
                              int N, int C, float eps) {
    int rows_per_block = GTC_THREADS / 32;
    GTC_LAUNCH(rmsnorm_forward_kernel<Act>, (N + rows_per_block - 1) / rows_per_block, GTC_THREADS,
               0, gtc_stream(b), out, rstd, inp, w, N, C, eps);
    CUDA_CHECK_LAUNCH();
}

void gtc_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *w,
                         int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    if (gtc_act_bf16(b))
        rmsnorm_forward_t(b, (gtc_bf16 *)out, rstd, (const gtc_bf16 *)inp, (const gtc_bf16 *)w, N,
                          C, eps);
    else
        rmsnorm_forward_t(b, (float *)out, rstd, (const float *)inp, (const float *)w, N, C, eps);
}

template <typename Act>
static void residual_rmsnorm_forward_t(Backend *b, Act *res, Act *out, float *rstd, const Act *x,
                                       const Act *y, const Act *w, int N, int C, float eps) {
    int rows_per_block = GTC_THREADS / 32;
    GTC_LAUNCH(residual_rmsnorm_forward_kernel<Act>, (N + rows_per_block - 1) / rows_per_block,
               GTC_THREADS, 0, gtc_stream(b), res, out, rstd, x, y, w, N, C, eps);
    CUDA_CHECK_LAUNCH();
}

void gtc_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x,
                                  const act_t *y, const act_t *w, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    if (gtc_act_bf16(b))
        residual_rmsnorm_forward_t(b, (gtc_bf16 *)res, (gtc_bf16 *)out, rstd, (const gtc_bf16 *)x,
                                   (const gtc_bf16 *)y, (const gtc_bf16 *)w, N, C, eps);
    else
        residual_rmsnorm_forward_t(b, (float *)res, (float *)out, rstd, (const float *)x,
                                   (const float *)y, (const float *)w, N, C, eps);
}

template <typename Act>
static void rmsnorm_backward_t(Backend *b, Act *dinp, float *dw, const Act *dout, const Act *inp,
                               const Act *w, const float *rstd, int N, int C) {
    cudaStream_t st = gtc_stream(b);
    if (dw) { /* dinp and dw in one pass over dout and inp (kernels_misc.cu), when C fits */
        bool done = false;
        gtc_rmsnorm_backward_single_pass(b, dinp, dw, dout, inp, w, rstd, N, C, &done);
        if (done) return;
    }
    if (dinp) {
        int rows_per_block = GTC_THREADS / 32;
        GTC_LAUNCH(rmsnorm_backward_dinp_kernel<Act>, (N + rows_per_block - 1) / rows_per_block,
                   GTC_THREADS, 0, st, dinp, dout, inp, w, rstd, N, C);
        CUDA_CHECK_LAUNCH();
    }
    /* dw: the column reduction layernorm uses, with no mean (kernels_misc.cu) */
    if (dw) gtc_norm_param_grads(b, dw, NULL, dout, inp, NULL, rstd, N, C);
}

void gtc_rmsnorm_backward(Backend *b, act_t *dinp, float *dw, const act_t *dout, const act_t *inp,
                          const act_t *w, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (gtc_act_bf16(b))
        rmsnorm_backward_t(b, (gtc_bf16 *)dinp, dw, (const gtc_bf16 *)dout, (const gtc_bf16 *)inp,
                           (const gtc_bf16 *)w, rstd, N, C);
    else
        rmsnorm_backward_t(b, (float *)dinp, dw, (const float *)dout, (const float *)inp,
                           (const float *)w, rstd, N, C);
}

/* ------------------------------------------------------------------ RoPE */

/* One thread per (b, t, head, i), heads 0 .. NH+NKV-1 (q then k) of the row, i < hd/2.
 * dir = +1: forward rotation; -1: the inverse (backward). pos0: the first position of t = 0. */
template <typename Act>
__global__ void rope_kernel(Act *qkv, const float *cosv, const float *sinv, int BT, int T,
                            int pos0, int NH, int NKV, int hd, int dir, const int *pos) {
    const int half = hd / 2, nheads = NH + NKV;
    const size_t stride = (size_t)(NH + 2 * NKV) * hd;
    const size_t n = (size_t)BT * nheads * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t rest = idx / half;
        int head = (int)(rest % nheads);
        size_t bt = rest / nheads;
        int p = pos ? pos[bt] : pos0 + (int)(bt % T); /* packed rows: the token's position */
        float c = cosv[(size_t)p * half + i], s = sinv[(size_t)p * half + i];
        size_t o = bt * stride + (size_t)head * hd + i;
        float x0 = load_f32(qkv, o), x1 = load_f32(qkv, o + half);
        float y0, y1;
        if (dir > 0) {
            y0 = __fadd_rn(__fmul_rn(x0, c), -__fmul_rn(x1, s));
            y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
        } else {
            y0 = __fadd_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            y1 = __fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x0, s));
        }
        store_from_f32(qkv, o, y0);
        store_from_f32(qkv, o + half, y1);
    }
}

static void rope_check(int NH, int NKV, int hd) {
    if (NH <= 0 || NKV <= 0 || hd <= 0 || hd % 2 != 0) {
        fprintf(stderr, "%s:%d: rope: unsupported shape NH=%d NKV=%d hd=%d (hd must be even)\n",
                __FILE__, __LINE__, NH, NKV, hd);
        exit(GT_EXIT_FAILURE);
    }
}

static void rope_launch(Backend *b, act_t *qkv, const float *cosv, const float *sinv, int B,
                        int T, int pos0, int NH, int NKV, int hd, int dir, const int *pos) {
    if (B <= 0 || T <= 0) return;
    rope_check(NH, NKV, hd);
    size_t n = (size_t)B * T * (NH + NKV) * (hd / 2);
    unsigned blocks = gtc_blocks(n, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(rope_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b), (gtc_bf16 *)qkv,
                   cosv, sinv, B * T, T, pos0, NH, NKV, hd, dir, pos);
    else
        GTC_LAUNCH(rope_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)qkv, cosv,
                   sinv, B * T, T, pos0, NH, NKV, hd, dir, pos);
    CUDA_CHECK_LAUNCH();
}

void gtc_rope_forward(Backend *b, act_t *qkv, const float *cosv, const float *sinv, int B, int T,
                      int pos0, int NH, int NKV, int hd, const int *pos) {
    rope_launch(b, qkv, cosv, sinv, B, T, pos0, NH, NKV, hd, 1, pos);
}

void gtc_rope_backward(Backend *b, act_t *dqkv, const float *cosv, const float *sinv, int B, int T,
                       int NH, int NKV, int hd, const int *pos) {
    rope_launch(b, dqkv, cosv, sinv, B, T, 0, NH, NKV, hd, -1, pos);
}

/* ------------------------------------------------------------------ SwiGLU */

/* SwiGLU's per-element formulas, shared by the packed and the scalar paths (the same bits) */
__device__ __forceinline__ float swiglu_out(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ __forceinline__ void swiglu_grad(float g, float u, float dy, float &dg, float &du) {
    float sig = 1.0f / (1.0f + expf(-g));
    float silu = g * sig;
    dg = dy * u * (sig * (1.0f + g * (1.0f - sig)));
    du = dy * silu;
}

/* The N * I outputs as npack packs of P = GTC_PACK(Act) columns (16-byte loads of gate, up and
 * dout, stores of out / dgate, dup; only when I % P == 0 and the pointers are 16-byte aligned,
 * else npack = 0), then one element per thread for the rest. Bytes per output (bf16): forward 4
 * read + 2 written, backward 6 read + 4 written. dinp may alias inp: each thread reads its
 * inputs before writing the same elements. */
template <typename Act>
__global__ void swiglu_forward_kernel(Act *out, const Act *inp, int N, int I, size_t npack) {
    constexpr int P = GTC_PACK(Act);
    const size_t n = (size_t)N * I, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t q = tid; q < npack; q += stride) {
        const size_t idx = q * P, row = idx / I;
        const Act *in = inp + row * 2 * (size_t)I + idx % I;
        float g[P], u[P], o[P];
        load_pack<P>(g, in);
        load_pack<P>(u, in + I);
#pragma unroll
        for (int k = 0; k < P; k++) o[k] = swiglu_out(g[k], u[k]);
        store_pack<P>(out + idx, o);
    }
    for (size_t idx = npack * P + tid; idx < n; idx += stride) {
        size_t row = idx / I;
        int i = (int)(idx % I);
        const Act *in = inp + row * 2 * (size_t)I;
        store_from_f32(out, idx, swiglu_out(load_f32(in, i), load_f32(in, (size_t)I + i)));
    }
}

/* dinp[n, i] = d gate, dinp[n, I + i] = d up */
template <typename Act>
__global__ void swiglu_backward_kernel(Act *dinp, const Act *inp, const Act *dout, int N, int I, size_t npack) {
    constexpr int P = GTC_PACK(Act);
    const size_t n = (size_t)N * I, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t q = tid; q < npack; q += stride) {
        const size_t idx = q * P, row = idx / I, col = idx % I;
        const Act *in = inp + row * 2 * (size_t)I + col;
        Act *din = dinp + row * 2 * (size_t)I + col;
        float g[P], u[P], dy[P], dg[P], du[P];
        load_pack<P>(g, in);
        load_pack<P>(u, in + I);
        load_pack<P>(dy, dout + idx);
#pragma unroll
        for (int k = 0; k < P; k++) swiglu_grad(g[k], u[k], dy[k], dg[k], du[k]);
        store_pack<P>(din, dg);
        store_pack<P>(din + I, du);
    }
    for (size_t idx = npack * P + tid; idx < n; idx += stride) {
        size_t row = idx / I;
        int i = (int)(idx % I);
        const Act *in = inp + row * 2 * (size_t)I;
        Act *din = dinp + row * 2 * (size_t)I;
        float dg, du;
        swiglu_grad(load_f32(in, i), load_f32(in, (size_t)I + i), load_f32(dout, idx), dg, du);
        store_from_f32(din, i, dg);
        store_from_f32(din, (size_t)I + i, du);
    }
}

/* packs of the N * I outputs when the layout allows (see the kernels), else 0 */
template <typename Act>
static size_t swiglu_packs(const Act *a, const Act *b, const Act *c, int N, int I) {
    const int P = GTC_PACK(Act);
    if (I % P != 0 || !gtc_aligned16(a) || !gtc_aligned16(b) || (c && !gtc_aligned16(c))) return 0;
    return (size_t)N * I / P;
}

template <typename Act>
static void swiglu_forward_t(Backend *b, Act *out, const Act *inp, int N, int I) {
    size_t npack = swiglu_packs(out, inp, (const Act *)NULL, N, I);
    size_t work = npack + ((size_t)N * I - npack * GTC_PACK(Act));
    GTC_LAUNCH(swiglu_forward_kernel<Act>, gtc_blocks(work, GTC_THREADS), GTC_THREADS, 0, gtc_stream(b), out,
               inp, N, I, npack);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
static void swiglu_backward_t(Backend *b, Act *dinp, const Act *inp, const Act *dout, int N, int I) {
    size_t npack = swiglu_packs(dinp, inp, dout, N, I);
    size_t work = npack + ((size_t)N * I - npack * GTC_PACK(Act));
    GTC_LAUNCH(swiglu_backward_kernel<Act>, gtc_blocks(work, GTC_THREADS), GTC_THREADS, 0, gtc_stream(b), dinp,
               inp, dout, N, I, npack);
    CUDA_CHECK_LAUNCH();
}

void gtc_swiglu_forward(Backend *b, act_t *out, const act_t *inp, int N, int I) {
    if (N <= 0 || I <= 0) return;
    if (gtc_act_bf16(b))
        swiglu_forward_t(b, (gtc_bf16 *)out, (const gtc_bf16 *)inp, N, I);
    else
        swiglu_forward_t(b, (float *)out, (const float *)inp, N, I);
}

void gtc_swiglu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, int N, int I) {
    if (N <= 0 || I <= 0) return;
    if (gtc_act_bf16(b))
        swiglu_backward_t(b, (gtc_bf16 *)dinp, (const gtc_bf16 *)inp, (const gtc_bf16 *)dout, N, I);
    else
        swiglu_backward_t(b, (float *)dinp, (const float *)inp, (const float *)dout, N, I);
}
