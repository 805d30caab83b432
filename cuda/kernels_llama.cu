/* kernels_llama.cu - the CUDA backend's Llama-family ops: rotary position embeddings (forward,
 * backward) and SwiGLU (forward, backward); RMSNorm (plain, fused with the residual, per head) is
 * with LayerNorm in kernels_norms.cu. Contracts: backend.h; the formulas are the CPU backend's
 * (backend_cpu*.c), so the two agree to rounding (RoPE bit for bit).
 *
 * act_t tensors are fp32 or bf16 (b->act_dtype): each op dispatches to a kernel templated on the
 * storage type (Act = float or __nv_bfloat16), reads through load_f32, computes in fp32 and
 * rounds each act_t output once through store_from_f32 (cuda_common.cuh). No atomics.
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
