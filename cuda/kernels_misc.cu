/* kernels_misc.cu - the CUDA backend's kernels except attention.
 *
 * Every op follows backend.h exactly and mirrors the formulas of backend_cpu.c, so the two agree
 * to rounding. Determinism: no atomics anywhere; every reduction has a fixed order.
 *
 * act_t tensors are fp32 or bf16 (b->act_dtype): each op dispatches to a kernel templated on the
 * storage type (Act = float or __nv_bfloat16), reads through load_f32, computes in fp32 (double
 * where noted) and rounds each act_t output once through store_from_f32 (cuda_common.cuh).
 * Parameter gradients, mean/rstd, losses and the optimizer's tensors are always fp32.
 *
 * Fused: residual add + layernorm (residual_layernorm_forward); bias + GELU is a cuBLASLt epilogue
 * (backend_cuda.cu, matmul_gelu_forward). The elementwise ops (gelu, add, scale, to_act, convert)
 * and AdamW are in kernels_elementwise.cu. */
#include "cuda_common.cuh"

#include <math.h>

/* ------------------------------------------------------------------ block reductions */

/* Sum over the block in a fixed order: butterflies within warps, then warp results in warp order.
 * Every thread gets the result. blockDim.x must be a multiple of 32 (<= 1024). */
__device__ double block_sum_d(double v, double *shared /* >= 33 */) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = gtc_warp_sum_d(v);
    __syncthreads(); /* shared may still be read from a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int w = 0; w < nwarps; w++) s += shared[w];
        shared[32] = s;
    }
    __syncthreads();
    return shared[32];
}

__device__ float block_max(float v, float *shared /* >= 33 */) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = gtc_warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int w = 0; w < nwarps; w++) m = fmaxf(m, shared[w]);
        shared[32] = m;
    }
    __syncthreads();
    return shared[32];
}

/* ------------------------------------------------------------------ encoder */

/* out[bt, :] = wte[tokens[bt], :] (+ wpe[position, :]): npack packs of P = GTC_PACK(Act) channels
 * (16-byte loads and stores; only when C % P == 0 and the three tensors are 16-byte aligned, else
 * npack = 0), then one element per thread. Bytes per element (bf16): 2 or 4 read, 2 written. */
template <typename Act>
__device__ __forceinline__ float encoder_value(const int *tokens, const Act *wte, const Act *wpe, const int *pos,
                                               size_t bt, int c, int T, int C) {
    int t = pos ? pos[bt] : (int)(bt % T); /* packed rows: the token's position */
    float v = load_f32(wte, (size_t)tokens[bt] * C + c);
    if (wpe) v += load_f32(wpe, (size_t)t * C + c); /* NULL: no position embedding (Llama) */
    return v;
}

template <typename Act>
__global__ void encoder_forward_kernel(Act *out, const int *tokens, const Act *wte, const Act *wpe, int BT, int T,
                                       int C, const int *pos, size_t npack) {
    constexpr int P = GTC_PACK(Act);
    const size_t n = (size_t)BT * C, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t q = tid; q < npack; q += stride) {
        const size_t i = q * P, bt = i / C;
        const int c = (int)(i % C), t = pos ? pos[bt] : (int)(bt % T);
        float v[P], e[P];
        load_pack<P>(v, wte + (size_t)tokens[bt] * C + c);
        if (wpe) {
            load_pack<P>(e, wpe + (size_t)t * C + c);
#pragma unroll
            for (int k = 0; k < P; k++) v[k] += e[k];
        }
        store_pack<P>(out + i, v);
    }
    for (size_t i = npack * P + tid; i < n; i += stride)
        store_from_f32(out, i, encoder_value(tokens, wte, wpe, pos, i / C, (int)(i % C), T, C));
}

template <typename Act>
static void encoder_forward_t(Backend *b, Act *out, const int *tokens, const Act *wte,
                              const Act *wpe, int B, int T, int C, const int *pos) {
    const size_t n = (size_t)B * T * C;
    const bool packed = C % GTC_PACK(Act) == 0 && gtc_aligned16(out) && gtc_aligned16(wte) && (!wpe || gtc_aligned16(wpe));
    const size_t npack = packed ? n / GTC_PACK(Act) : 0, work = npack + (n - npack * GTC_PACK(Act));
    GTC_LAUNCH(encoder_forward_kernel<Act>, gtc_blocks(work, GTC_THREADS), GTC_THREADS, 0,
               gtc_stream(b), out, tokens, wte, wpe, B * T, T, C, pos, npack);
    CUDA_CHECK_LAUNCH();
}

void gtc_encoder_forward(Backend *b, act_t *out, const int *tokens, const act_t *wte,
                         const act_t *wpe, int B, int T, int C, const int *pos) {
    if (gtc_act_bf16(b))
        encoder_forward_t(b, (gtc_bf16 *)out, tokens, (const gtc_bf16 *)wte, (const gtc_bf16 *)wpe,
                          B, T, C, pos);
    else
        encoder_forward_t(b, (float *)out, tokens, (const float *)wte, (const float *)wpe, B, T, C, pos);
}

/* dwpe[t, c] += sum_b dout[b, t, c]: one thread per (t, c), b summed in order (as the CPU). */
template <typename Act>
__global__ void encoder_backward_wpe_kernel(float *dwpe, const Act *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int bb = 0; bb < B; bb++) s += load_f32(dout, (size_t)bb * n + i);
        dwpe[i] += s;
    }
}

/* packed rows: dwpe[p, c] += the dout of the (b, t) at position p, in (b, t) order: one thread per
 * (p, c), as the CPU sums them */
template <typename Act>
__global__ void encoder_backward_wpe_pos_kernel(float *dwpe, const Act *dout, const int *pos, int BT, int T,
                                                int C) {
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int p = (int)(i / C), c = (int)(i % C);
        float s = 0.0f;
        for (int bt = 0; bt < BT; bt++)
            if (pos[bt] == p) s += load_f32(dout, (size_t)bt * C + c);
        dwpe[i] += s;
    }
}

/* dwte[tokens[i]] += dout[i] for every position i, deterministically and without atomics.
 *
 * One block per position i. The block first looks for an earlier position with the same token;
 * if there is one, another block owns this token and this block exits. Otherwise (i is the
 * token's first occurrence) the block walks the positions j >= i in chunks of blockDim.x, finds
 * the ones holding the same token (ballot + a fixed prefix over warps keeps them in position
 * order), and adds their dout rows into dwte[token] in that order, each thread owning channels
 * c = threadIdx.x + k * blockDim.x. The additions happen in the same order as the CPU's
 * sequential loop, so the result is the same bits whatever the grid.
 *
 * Cost: O(BT) token reads per first occurrence (tokens are 4 bytes and stay in L2), plus the
 * dout rows once. TODO(perf): a stable device sort of (token, position) would make it O(BT log BT)
 * for huge B*T. */
#define ENC_THREADS 256
template <typename Act>
__global__ void encoder_backward_wte_kernel(float *dwte, const Act *dout, const int *tokens,
                                            int BT, int C) {
    __shared__ int s_pos[ENC_THREADS];
    __shared__ int s_warp_count[ENC_THREADS / 32];
    int i = blockIdx.x;
    int tok = tokens[i];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* 1. an earlier occurrence? then someone else owns this token */
    for (int base = 0; base < i; base += ENC_THREADS) {
        int j = base + tid;
        int hit = (j < i) && tokens[j] == tok;
        if (__syncthreads_or(hit)) return; /* block-uniform */
    }

    /* 2. first occurrence: accumulate every j >= i with this token, in order */
    float *dst = dwte + (size_t)tok * C;
    for (int base = i; base < BT; base += ENC_THREADS) {
        int j = base + tid;
        int hit = (j < BT) && tokens[j] == tok;
        unsigned mask = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) s_warp_count[warp] = __popc(mask);
        __syncthreads();
        int offset = 0, total = 0;
        for (int w = 0; w < ENC_THREADS / 32; w++) {
            if (w < warp) offset += s_warp_count[w];
            total += s_warp_count[w];
        }
        if (hit) s_pos[offset + __popc(mask & ((1u << lane) - 1u))] = j;
        __syncthreads();
        for (int c = tid; c < C; c += ENC_THREADS) {
            float acc = dst[c];
            for (int k = 0; k < total; k++) acc += load_f32(dout, (size_t)s_pos[k] * C + c);
            dst[c] = acc;
        }
        __syncthreads(); /* s_pos and s_warp_count are reused */
    }
}

template <typename Act>
static void encoder_backward_t(Backend *b, float *dwte, float *dwpe, const Act *dout,
                               const int *tokens, int B, int T, int C, const int *pos) {
    cudaStream_t st = gtc_stream(b);
    if (dwte && B * T > 0) {
        GTC_LAUNCH(encoder_backward_wte_kernel<Act>, B * T, ENC_THREADS, 0, st, dwte, dout, tokens,
                   B * T, C);
        CUDA_CHECK_LAUNCH();
    }
    if (dwpe && pos) {
        size_t n = (size_t)T * C;
        GTC_LAUNCH(encoder_backward_wpe_pos_kernel<Act>, gtc_blocks(n, GTC_THREADS), GTC_THREADS, 0, st,
                   dwpe, dout, pos, B * T, T, C);
        CUDA_CHECK_LAUNCH();
    } else if (dwpe) {
        size_t n = (size_t)T * C;
        GTC_LAUNCH(encoder_backward_wpe_kernel<Act>, gtc_blocks(n, GTC_THREADS), GTC_THREADS, 0, st,
                   dwpe, dout, B, T, C);
        CUDA_CHECK_LAUNCH();
    }
}

void gtc_encoder_backward(Backend *b, float *dwte, float *dwpe, const act_t *dout,
                          const int *tokens, int B, int T, int C, const int *pos) {
    if (gtc_act_bf16(b))
        encoder_backward_t(b, dwte, dwpe, (const gtc_bf16 *)dout, tokens, B, T, C, pos);
    else
        encoder_backward_t(b, dwte, dwpe, (const float *)dout, tokens, B, T, C, pos);
}

/* ------------------------------------------------------------------ column reductions */

/* Parameter gradients that sum over rows (layernorm dw/dbias, matmul dbias) go in two fixed-order
 * passes: fp32 partial sums over RS contiguous row chunks (grid: column tiles x RS), then one thread
 * per column adds the RS partials in order. RS depends only on N, so the bits do not depend on the
 * device. fp32, not double (FP64 runs at 1/64 rate on GeForce cards): a column's sum over NR rows
 * takes k = ceil(NR / RS / COL_TY) + COL_TY + RS + 1 rounded additions in a fixed tree, so its error
 * is at most about k * 2^-24 * sum |terms| (backend.h states the bound for every path;
 * tests/test_ops_paramgrads.c checks it against a double reference at N = 16384). */
#define COL_TX 32
#define COL_TY 8
#define col_row_splits gtc_row_splits

/* if pb: pb[y, c] = sum over chunk y of dout[r, c]; if inp: pw[y, c] = sum dout[r, c] * xhat[r, c]
 * with xhat = (inp - mean) * rstd, mean NULL: 0 (RMSNorm; x - 0 is x exactly, so the bits are
 * those of x * rstd) (dout, inp: act dtype; mean, rstd: fp32). The NR = N * heads rows r, n = r /
 * heads, h = r % heads, start at n * ld + h * C, their statistics at mean/rstd[n * sld + h]: a
 * plain norm's rows are heads 1, ld C, sld 1; head_rmsnorm's are a row's q (or k) heads. */
template <typename Act>
__global__ void colsum_partial_kernel(float *pw, float *pb, const Act *dout, const Act *inp,
                                      const float *mean, const float *rstd, int NR, int heads,
                                      size_t ld, int sld, int C, int RS) {
    __shared__ float s_w[COL_TY][COL_TX];
    __shared__ float s_b[COL_TY][COL_TX];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * COL_TX + tx;
    int y = blockIdx.y;
    int chunk = (NR + RS - 1) / RS;
    int r0 = y * chunk;
    int r1 = min(NR, r0 + chunk);
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int r = r0 + ty; r < r1; r += COL_TY) {
            int n = heads == 1 ? r : r / heads, h = r - n * heads;
            size_t off = (size_t)n * ld + (size_t)h * C + c, si = (size_t)n * sld + h;
            float dy = load_f32(dout, off);
            ab += dy;
            if (inp) aw += dy * ((load_f32(inp, off) - (mean ? mean[si] : 0.0f)) * rstd[si]);
        }
    }
    s_w[ty][tx] = aw;
    s_b[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < COL_TY; k++) {
            sw += s_w[k][tx];
            sb += s_b[k][tx];
        }
        if (pb) pb[(size_t)y * C + c] = sb;
        if (inp) pw[(size_t)y * C + c] = sw;
    }
}

__global__ void colsum_final_kernel(float *dw, float *db, const float *pw, const float *pb, int C, int RS) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (dw) {
        float s = 0.0f;
        for (int y = 0; y < RS; y++) s += pw[(size_t)y * C + c];
        dw[c] += s;
    }
    if (db) {
        float s = 0.0f;
        for (int y = 0; y < RS; y++) s += pb[(size_t)y * C + c];
        db[c] += s;
    }
}

/* dw (if inp) and db: column reductions of dout (and dout * xhat) accumulated into dw/db, over
 * the rows colsum_partial_kernel describes */
template <typename Act>
static void colreduce_rows(Backend *b, float *dw, float *db, const Act *dout, const Act *inp,
                           const float *mean, const float *rstd, int N, int heads, size_t ld,
                           int sld, int C) {
    if (N <= 0 || heads <= 0 || C <= 0) return;
    int NR = N * heads;
    int RS = col_row_splits(NR);
    float *pw = (float *)gtc_scratch(b, (size_t)2 * RS * C * sizeof(float));
    float *pb = pw + (size_t)RS * C;
    cudaStream_t st = gtc_stream(b);
    dim3 grid((unsigned)((C + COL_TX - 1) / COL_TX), (unsigned)RS);
    dim3 block(COL_TX, COL_TY);
    GTC_LAUNCH(colsum_partial_kernel<Act>, grid, block, 0, st, pw, db ? pb : NULL, dout, inp, mean, rstd, NR,
               heads, ld, sld, C, RS);
    CUDA_CHECK_LAUNCH();
    GTC_LAUNCH(colsum_final_kernel, (C + 255) / 256, 256, 0, st, inp ? dw : NULL, db, pw, pb, C,
               RS);
    CUDA_CHECK_LAUNCH();
}

/* rows of C, contiguous */
template <typename Act>
static void colreduce(Backend *b, float *dw, float *db, const Act *dout, const Act *inp,
                      const float *mean, const float *rstd, int N, int C) {
    colreduce_rows<Act>(b, dw, db, dout, inp, mean, rstd, N, 1, (size_t)C, 1, C);
}

void gtc_norm_param_grads(Backend *b, float *dw, float *db, const act_t *dout, const act_t *inp,
                          const float *mean, const float *rstd, int N, int C) {
    if (gtc_act_bf16(b))
        colreduce<gtc_bf16>(b, dw, db, (const gtc_bf16 *)dout, (const gtc_bf16 *)inp, mean, rstd, N, C);
    else
        colreduce<float>(b, dw, db, (const float *)dout, (const float *)inp, mean, rstd, N, C);
}

void gtc_norm_param_grads_rows(Backend *b, float *dw, const act_t *dout, const act_t *inp,
                               const float *rstd, int N, int heads, size_t ld, int sld, int C) {
    if (gtc_act_bf16(b))
        colreduce_rows<gtc_bf16>(b, dw, NULL, (const gtc_bf16 *)dout, (const gtc_bf16 *)inp, NULL,
                                 rstd, N, heads, ld, sld, C);
    else
        colreduce_rows<float>(b, dw, NULL, (const float *)dout, (const float *)inp, NULL, rstd, N,
                              heads, ld, sld, C);
}

void gtc_colsum_accumulate(Backend *b, float *dst, const act_t *src, int N, int C) {
    if (gtc_act_bf16(b))
        colreduce<gtc_bf16>(b, NULL, dst, (const gtc_bf16 *)src, NULL, NULL, NULL, N, C);
    else
        colreduce<float>(b, NULL, dst, (const float *)src, NULL, NULL, NULL, N, C);
}

/* dst[c] += src[c] for c < C (fp32): colsum_final_kernel over one row of partial sums, i.e. the
 * bias gradient a cuBLASLt BGRADB epilogue wrote (backend_cuda.cu, gemm_dw_bgrad_epilogue) added
 * into the accumulating gradient */
void gtc_accumulate_f32(Backend *b, float *dst, const float *src, int C) {
    if (C <= 0) return;
    float *no_dw = NULL;
    const float *no_pw = NULL;
    GTC_LAUNCH(colsum_final_kernel, (C + 255) / 256, 256, 0, gtc_stream(b), no_dw, dst, no_pw, src, C, 1);
    CUDA_CHECK_LAUNCH();
}

/* out[n * ld + c] += bias[c] over n < N, c < C */
template <typename Act>
__global__ void add_bias_kernel(Act *out, const Act *bias, int N, int C, int ld) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t o = (i / C) * (size_t)ld + i % C;
        store_from_f32(out, o, load_f32(out, o) + load_f32(bias, i % C));
    }
}

/* out[n * ld + c] = bias[c]: a plain copy of the bias elements (no rounding) */
template <typename Act>
__global__ void fill_bias_kernel(Act *out, const Act *bias, int N, int C, int ld) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[(i / C) * (size_t)ld + i % C] = bias[i % C];
}

void gtc_add_bias(Backend *b, GtDtype t, void *out, const void *bias, int N, int C, int ld) {
    size_t n = (size_t)N * C;
    if (!n) return;
    unsigned blocks = gtc_blocks(n, GTC_THREADS);
    if (t == GT_BF16)
        GTC_LAUNCH(add_bias_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b),
                   (gtc_bf16 *)out, (const gtc_bf16 *)bias, N, C, ld);
    else
        GTC_LAUNCH(add_bias_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)out,
                   (const float *)bias, N, C, ld);
    CUDA_CHECK_LAUNCH();
}

void gtc_fill_bias(Backend *b, GtDtype t, void *out, const void *bias, int N, int C, int ld) {
    size_t n = (size_t)N * C;
    if (!n) return;
    unsigned blocks = gtc_blocks(n, GTC_THREADS);
    if (t == GT_BF16)
        GTC_LAUNCH(fill_bias_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b),
                   (gtc_bf16 *)out, (const gtc_bf16 *)bias, N, C, ld);
    else
        GTC_LAUNCH(fill_bias_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)out,
                   (const float *)bias, N, C, ld);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ layernorm */

/* The rest of one row's layernorm forward, for the calling warp, once each lane has summed its
 * elements x[lane], x[lane + 32], ... in that order into s: the mean (butterfly over the lanes),
 * the variance of x - mean (second pass), then the output (third pass), as the CPU. Shared by
 * layernorm_forward and residual_layernorm_forward, so the two compute the same bits. */
template <typename Act>
__device__ __forceinline__ void layernorm_row_finish(Act *o, float *mean, float *rstd, int row,
                                                     const Act *x, const Act *w, const Act *bias,
                                                     int C, float eps, int lane, float s) {
    float invC = 1.0f / (float)C;
    float m = gtc_warp_sum(s) * invC;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = load_f32(x, c) - m;
        v += d * d;
    }
    float var = gtc_warp_sum(v) * invC;
    float r = 1.0f / sqrtf(var + eps);
    for (int c = lane; c < C; c += 32)
        store_from_f32(o, c, (load_f32(x, c) - m) * r * load_f32(w, c) + load_f32(bias, c));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

/* one warp per row; two passes (mean, then variance of x - mean) as the CPU */
template <typename Act>
__global__ void layernorm_forward_kernel(Act *out, float *mean, float *rstd, const Act *inp,
                                         const Act *w, const Act *bias, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* warp-uniform */
    const Act *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += load_f32(x, c);
    layernorm_row_finish(out + (size_t)row * C, mean, rstd, row, x, w, bias, C, eps, lane, s);
}

template <typename Act>
static void layernorm_forward_t(Backend *b, Act *out, float *mean, float *rstd, const Act *inp,
                                const Act *w, const Act *bias, int N, int C, float eps) {
    int rows_per_block = GTC_THREADS / 32;
    GTC_LAUNCH(layernorm_forward_kernel<Act>, (N + rows_per_block - 1) / rows_per_block,
               GTC_THREADS, 0, gtc_stream(b), out, mean, rstd, inp, w, bias, N, C, eps);
    CUDA_CHECK_LAUNCH();
}

void gtc_layernorm_forward(Backend *b, act_t *out, float *mean, float *rstd, const act_t *inp,
                           const act_t *w, const act_t *bias, int N, int C, float eps) {
    if (N <= 0) return;
    if (gtc_act_bf16(b))
        layernorm_forward_t(b, (gtc_bf16 *)out, mean, rstd, (const gtc_bf16 *)inp,
                            (const gtc_bf16 *)w, (const gtc_bf16 *)bias, N, C, eps);
    else
        layernorm_forward_t(b, (float *)out, mean, rstd, (const float *)inp, (const float *)w,
                            (const float *)bias, N, C, eps);
}

/* res = x + y and out = layernorm(res), one warp per row (the layout of layernorm_forward).
 * The first pass reads x and y once, writes res rounded once (add_kernel's arithmetic) and sums
 * the value res now holds (load_f32 of what was stored: the rounded one), in layernorm_forward's
 * lane order; the rest is layernorm_row_finish on res. So every output is bit for bit
 * add + layernorm_forward. res may alias x or y: each element is read, then written, by the
 * same thread, and later passes read only res. */
template <typename Act>
__global__ void residual_layernorm_forward_kernel(Act *res, Act *out, float *mean, float *rstd,
                                                  const Act *x, const Act *y, const Act *w,
                                                  const Act *bias, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* warp-uniform */
    const size_t off = (size_t)row * C;
    const Act *xr = x + off, *yr = y + off;
    Act *rr = res + off;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        store_from_f32(rr, c, load_f32(xr, c) + load_f32(yr, c));
        s += load_f32(rr, c);
    }
    layernorm_row_finish(out + off, mean, rstd, row, (const Act *)rr, w, bias, C, eps, lane, s);
}

template <typename Act>
static void residual_layernorm_forward_t(Backend *b, Act *res, Act *out, float *mean, float *rstd,
                                         const Act *x, const Act *y, const Act *w, const Act *bias,
                                         int N, int C, float eps) {
    int rows_per_block = GTC_THREADS / 32;
    GTC_LAUNCH(residual_layernorm_forward_kernel<Act>, (N + rows_per_block - 1) / rows_per_block,
               GTC_THREADS, 0, gtc_stream(b), res, out, mean, rstd, x, y, w, bias, N, C, eps);
    CUDA_CHECK_LAUNCH();
}

void gtc_residual_layernorm_forward(Backend *b, act_t *res, act_t *out, float *mean, float *rstd,
                                    const act_t *x, const act_t *y, const act_t *w,
                                    const act_t *bias, int N, int C, float eps) {
    if (N <= 0) return;
    if (gtc_act_bf16(b))
        residual_layernorm_forward_t(b, (gtc_bf16 *)res, (gtc_bf16 *)out, mean, rstd,
                                     (const gtc_bf16 *)x, (const gtc_bf16 *)y, (const gtc_bf16 *)w,
                                     (const gtc_bf16 *)bias, N, C, eps);
    else
        residual_layernorm_forward_t(b, (float *)res, (float *)out, mean, rstd, (const float *)x,
                                     (const float *)y, (const float *)w, (const float *)bias, N, C,
                                     eps);
}

/* dinp += (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)) * rstd; one warp per row. The += is a
 * read-modify-write in fp32, rounded once per element. */
template <typename Act>
__global__ void layernorm_backward_dinp_kernel(Act *dinp, const Act *dout, const Act *inp,
                                               const Act *w, const float *mean, const float *rstd,
                                               int N, int C) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const Act *x = inp + (size_t)row * C;
    const Act *dy = dout + (size_t)row * C;
    Act *dx = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = load_f32(dy, c) * load_f32(w, c);
        s1 += dn;
        s2 += dn * ((load_f32(x, c) - m) * r);
    }
    float invC = 1.0f / (float)C;
    float mdn = gtc_warp_sum(s1) * invC;
    float mdnx = gtc_warp_sum(s2) * invC;
    for (int c = lane; c < C; c += 32) {
        float xh = (load_f32(x, c) - m) * r;
        store_from_f32(dx, c,
                       load_f32(dx, c) + (load_f32(dy, c) * load_f32(w, c) - mdn - xh * mdnx) * r);
    }
}

/* ------------------------------------------------------------------ single-pass norm backward
 *
 * LayerNorm (LN) or RMSNorm backward in one pass over dout and inp: dinp += the rows' gradients
 * (dinp NULL: none) and the column sums dw = sum_r dout * xhat (and, with pb, db = sum_r dout) as
 * fp32 partials per block, which colsum_final_kernel then adds in block order. The two-pass form
 * (the dinp kernel, then colreduce) read dout and inp twice: 4 + 2 (dinp) + 2 bytes per element
 * under bf16 read and 2 written, now 2 + 2 + 2 read and 2 written.
 *
 * Layout: block y takes rows [y * rpb, (y + 1) * rpb), rpb = max(16, ceil(N / 256)) (so the grid,
 * at most 256 blocks, depends on N only);
 * its nw warps take rows y * rpb + warp, + nw, ... one at a time, lane l the columns l, l + 32, ...
 * (the dinp kernels' order, so dinp's bits are theirs). Each warp adds its rows' dout * xhat into
 * its own fp32 row of shared memory (s[warp][c]: a lane owns its columns, no two threads write one
 * word); after a barrier thread t adds the nw warp rows of its columns in warp order into the
 * block's partial pw[y][c]. So every sum has a fixed order: rows within a warp, warps, blocks.
 * nw = (48 KiB / (C * 4 * arrays)) clamped to [1, 8] depends on C only; wider rows (no warp fits)
 * take the two-pass path. */
#define NB_SMEM_BYTES (48 * 1024)
#define NB_MAX_BLOCKS 256 /* about 2 blocks per SM on an H100 */

/* warps per block of the single-pass norm backward for rows of C (arrays: 1 dw, 2 dw and db); 0:
 * a warp's shared row does not fit, use the two-pass form */
static int norm_bwd_warps(int C, int arrays) {
    size_t per_warp = (size_t)C * sizeof(float) * (size_t)arrays;
    size_t nw = NB_SMEM_BYTES / per_warp;
    return nw > 8 ? 8 : (int)nw;
}

template <bool LN, typename Act>
__global__ void norm_backward_kernel(Act *dinp, float *pw, float *pb, const Act *dout, const Act *inp,
                                     const Act *w, const float *mean, const float *rstd, int N, int C, int rpb) {
    extern __shared__ float nb_smem[]; /* [nw][C] dw partials, then [nw][C] db partials if pb */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *sw = nb_smem + (size_t)warp * C;
    float *sb = pb ? nb_smem + (size_t)(nw + warp) * C : NULL;
    for (int c = lane; c < C; c += 32) {
        sw[c] = 0.0f;
        if (sb) sb[c] = 0.0f;
    }
    const int r0 = blockIdx.x * rpb, r1 = min(N, r0 + rpb);
    const float invC = 1.0f / (float)C;
    for (int row = r0 + warp; row < r1; row += nw) { /* warp-uniform */
        const Act *x = inp + (size_t)row * C;
        const Act *dy = dout + (size_t)row * C;
        const float m = LN ? mean[row] : 0.0f, r = rstd[row];
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float dn = load_f32(dy, c) * load_f32(w, c);
            if (LN) s1 += dn;
            s2 += dn * ((load_f32(x, c) - m) * r);
        }
        const float mdn = LN ? gtc_warp_sum(s1) * invC : 0.0f;
        const float mdnx = gtc_warp_sum(s2) * invC;
        Act *dx = dinp ? dinp + (size_t)row * C : NULL;
        for (int c = lane; c < C; c += 32) {
            const float xh = (load_f32(x, c) - m) * r, g = load_f32(dy, c);
            if (dx) {
                float d = LN ? (g * load_f32(w, c) - mdn - xh * mdnx) * r : (g * load_f32(w, c) - xh * mdnx) * r;
                store_from_f32(dx, c, load_f32(dx, c) + d);
            }
            sw[c] += g * xh;
            if (sb) sb[c] += g;
        }
    }
    __syncthreads(); /* every warp's partial rows are complete */
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float aw = 0.0f, ab = 0.0f;
        for (int k = 0; k < nw; k++) {
            aw += nb_smem[(size_t)k * C + c];
            if (pb) ab += nb_smem[(size_t)(nw + k) * C + c];
        }
        pw[(size_t)blockIdx.x * C + c] = aw;
        if (pb) pb[(size_t)blockIdx.x * C + c] = ab;
    }
}

/* dinp (NULL: none) += the gradient, dw += sum dout * xhat, db (NULL: none) += sum dout, in one pass;
 * false (nothing done) when rows of C are too wide for it */
template <bool LN, typename Act>
static bool norm_backward_single_pass(Backend *b, Act *dinp, float *dw, float *db, const Act *dout, const Act *inp,
                                      const Act *w, const float *mean, const float *rstd, int N, int C) {
    const int arrays = db ? 2 : 1, nw = norm_bwd_warps(C, arrays);
    if (nw < 1 || N <= 0 || C <= 0) return false;
    int rpb = (N + NB_MAX_BLOCKS - 1) / NB_MAX_BLOCKS;
    if (rpb < 16) rpb = 16;
    const int blocks = (N + rpb - 1) / rpb;
    float *pw = (float *)gtc_scratch(b, (size_t)arrays * blocks * C * sizeof(float));
    float *pb = db ? pw + (size_t)blocks * C : NULL;
    cudaStream_t st = gtc_stream(b);
    size_t smem = (size_t)arrays * nw * C * sizeof(float);
    GTC_LAUNCH((norm_backward_kernel<LN, Act>), blocks, nw * 32, smem, st, dinp, pw, pb, dout, inp, w, mean, rstd, N,
               C, rpb);
    CUDA_CHECK_LAUNCH();
    GTC_LAUNCH(colsum_final_kernel, (C + 255) / 256, 256, 0, st, dw, db, pw, pb, C, blocks);
    CUDA_CHECK_LAUNCH();
    return true;
}

void gtc_rmsnorm_backward_single_pass(Backend *b, act_t *dinp, float *dw, const act_t *dout, const act_t *inp,
                                      const act_t *w, const float *rstd, int N, int C, bool *done) {
    if (gtc_act_bf16(b))
        *done = norm_backward_single_pass<false>(b, (gtc_bf16 *)dinp, dw, (float *)NULL, (const gtc_bf16 *)dout,
                                                 (const gtc_bf16 *)inp, (const gtc_bf16 *)w, (const float *)NULL,
                                                 rstd, N, C);
    else
        *done = norm_backward_single_pass<false>(b, (float *)dinp, dw, (float *)NULL, (const float *)dout,
                                                 (const float *)inp, (const float *)w, (const float *)NULL, rstd,
                                                 N, C);
}

template <typename Act>
static void layernorm_backward_t(Backend *b, Act *dinp, float *dw, float *dbias, const Act *dout,
                                 const Act *inp, const Act *w, const float *mean,
                                 const float *rstd, int N, int C) {
    if (dw && norm_backward_single_pass<true>(b, dinp, dw, dbias, dout, inp, w, mean, rstd, N, C)) return;
    if (dinp) {
        int rows_per_block = GTC_THREADS / 32;
        GTC_LAUNCH(layernorm_backward_dinp_kernel<Act>, (N + rows_per_block - 1) / rows_per_block,
                   GTC_THREADS, 0, gtc_stream(b), dinp, dout, inp, w, mean, rstd, N, C);
        CUDA_CHECK_LAUNCH();
    }
    if (dw || dbias) {
        if (dw)
            colreduce<Act>(b, dw, dbias, dout, inp, mean, rstd, N, C);
        else
            colreduce<Act>(b, NULL, dbias, dout, NULL, NULL, NULL, N, C);
    }
}

void gtc_layernorm_backward(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                            const act_t *inp, const act_t *w, const float *mean, const float *rstd,
                            int N, int C) {
    if (N <= 0) return;
    if (gtc_act_bf16(b))
        layernorm_backward_t(b, (gtc_bf16 *)dinp, dw, dbias, (const gtc_bf16 *)dout,
                             (const gtc_bf16 *)inp, (const gtc_bf16 *)w, mean, rstd, N, C);
    else
        layernorm_backward_t(b, (float *)dinp, dw, dbias, (const float *)dout, (const float *)inp,
                             (const float *)w, mean, rstd, N, C);
}

/* ------------------------------------------------------------------ cross-entropy */

/* One block per row: max, then sum of exp(x - max) in double, loss = log(sum) + max - x[target];
 * with compute_grad the row becomes dloss_scale * (softmax - onehot), computed in fp32 from the
 * act_t logits and rounded once. Same formulas as the CPU. Without compute_grad the logits are
 * not written. */
#define CE_THREADS 512
template <typename Act>
__global__ void crossentropy_kernel(float *losses, Act *logits, const int *targets, int V, int ld,
                                    float dloss_scale, int compute_grad) {
    __shared__ float s_max[33];
    __shared__ double s_sum[33];
    int n = blockIdx.x;
    Act *x = logits + (size_t)n * ld;
    int tgt = targets[n];
    if (tgt == -100) {
        if (threadIdx.x == 0) losses[n] = 0.0f;
        if (compute_grad)
            for (int i = threadIdx.x; i < V; i += blockDim.x) store_from_f32(x, i, 0.0f);
        return;
    }
    if (tgt < 0 || tgt >= V) { /* the caller validates; a bad target is loud, never silent */
        if (threadIdx.x == 0) losses[n] = NAN;
        if (compute_grad)
            for (int i = threadIdx.x; i < V; i += blockDim.x) store_from_f32(x, i, NAN);
        return;
    }
    float xt = load_f32(x, tgt); /* read by every thread before any write below (reductions sync) */
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, load_f32(x, i));
    mx = block_max(mx, s_max);
    double sum = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += (double)expf(load_f32(x, i) - mx);
    sum = block_sum_d(sum, s_sum);
    if (threadIdx.x == 0) losses[n] = (float)(log(sum) + (double)mx - (double)xt);
    if (compute_grad) {
        float f = (float)((double)dloss_scale / sum);
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float g = expf(load_f32(x, i) - mx) * f;
            if (i == tgt) g -= dloss_scale;
            store_from_f32(x, i, g);
        }
    }
}

void gtc_crossentropy(Backend *b, float *losses, act_t *logits, const int *targets, int N, int V,
                      int ld, float dloss_scale, int compute_grad) {
    if (N <= 0) return;
    if (gtc_act_bf16(b))
        GTC_LAUNCH(crossentropy_kernel<gtc_bf16>, N, CE_THREADS, 0, gtc_stream(b), losses,
                   (gtc_bf16 *)logits, targets, V, ld, dloss_scale, compute_grad);
    else
        GTC_LAUNCH(crossentropy_kernel<float>, N, CE_THREADS, 0, gtc_stream(b), losses,
                   (float *)logits, targets, V, ld, dloss_scale, compute_grad);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ sum of squares */

/* Pass 1: GTC_SS_PARTS fixed contiguous chunks (independent of the device), each summed in double
 * by one block in a fixed order. Pass 2: one block adds the partials in order.
 * The chunk is a multiple of 8 floats, so with x 16-byte aligned (packed) each thread moves two
 * 16-byte packs per iteration (thread t: packs 2 (t + k B), 2 (t + k B) + 1 of its chunk), keeping
 * enough loads in flight to stream at bandwidth (measured on an H200 with one 4-byte load per
 * iteration and 256 chunks: 0.74 ms for GPT-2's 124M gradients, 0.67 TB/s); the chunk's last
 * elements (fewer than 8) and an unaligned x go one float per thread. */
__global__ void sum_squares_partial_kernel(double *partials, const float *x, size_t n,
                                           size_t chunk, int packed) {
    __shared__ double s[33];
    size_t i0 = (size_t)blockIdx.x * chunk;
    size_t i1 = i0 + chunk < n ? i0 + chunk : n;
    if (i0 > i1) i0 = i1;
    double acc = 0.0;
    size_t tail = i0;
    if (packed) {
        const size_t pairs = (i1 - i0) / 8; /* 8 floats: two packs */
        for (size_t p = threadIdx.x; p < pairs; p += blockDim.x) {
            float a[4], c[4]; /* both loads issued before the sums need them */
            load_pack<4>(a, x + i0 + 8 * p);
            load_pack<4>(c, x + i0 + 8 * p + 4);
#pragma unroll
            for (int k = 0; k < 4; k++) acc += (double)a[k] * (double)a[k];
#pragma unroll
            for (int k = 0; k < 4; k++) acc += (double)c[k] * (double)c[k];
        }
        tail = i0 + 8 * pairs;
    }
    for (size_t i = tail + threadIdx.x; i < i1; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    acc = block_sum_d(acc, s);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_squares_final_kernel(double *partials, int parts) {
    __shared__ double s[33];
    double acc = 0.0;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) acc += partials[i];
    acc = block_sum_d(acc, s);
    if (threadIdx.x == 0) partials[parts] = acc;
}

double gtc_sum_squares(Backend *b, const float *x, size_t n) {
    b->host_waits++; /* counted as a wait even when n is 0, as the CPU backend does */
    if (!n) return 0.0;
    CudaImpl *im = gtc_impl(b);
    size_t chunk = ((n + GTC_SS_PARTS - 1) / GTC_SS_PARTS + 7) / 8 * 8; /* whole packs */
    GTC_LAUNCH(sum_squares_partial_kernel, GTC_SS_PARTS, GTC_THREADS, 0, im->compute,
               im->ss_partials, x, n, chunk, gtc_aligned16(x) ? 1 : 0);
    CUDA_CHECK_LAUNCH();
    GTC_LAUNCH(sum_squares_final_kernel, 1, GTC_THREADS, 0, im->compute, im->ss_partials,
               GTC_SS_PARTS);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyAsync(im->ss_host, im->ss_partials + GTC_SS_PARTS, sizeof(double),
                               cudaMemcpyDeviceToHost, im->compute));
    CUDA_CHECK(cudaStreamSynchronize(im->compute));
    return *im->ss_host;
}
