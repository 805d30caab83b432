/* kernels_misc.cu - the CUDA backend's kernels except attention, the norms (kernels_norms.cu), the
 * Llama-family ops (kernels_llama.cu), the elementwise ones (kernels_elementwise.cu) and the
 * encoder (kernels_encoder.cu): the deterministic column reductions (parameter and bias
 * gradients), bias fills, cross-entropy and the sum of squares.
 *
 * Every op follows backend.h exactly and mirrors the formulas of backend_cpu.c, so the two agree
 * to rounding. Determinism: no atomics anywhere; every reduction has a fixed order.
 *
 * act_t tensors are fp32 or bf16 (b->act_dtype): each op dispatches to a kernel templated on the
 * storage type (Act = float or __nv_bfloat16), reads through load_f32, computes in fp32 (double
 * where noted) and rounds each act_t output once through store_from_f32 (cuda_common.cuh).
 * Parameter gradients, mean/rstd, losses and the optimizer's tensors are always fp32.
 *
 * Fused elsewhere: residual add + layernorm (kernels_norms.cu); bias + GELU is a cuBLASLt epilogue
 * (backend_cuda.cu, matmul_gelu_forward). */
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
/* The block step both column reductions end with: thread (tx, ty) of a COL_TX x COL_TY block holds
 * partial sums aw, ab of column tx; the COL_TY partials of a column are added in ty order through
 * shared memory. Every thread calls it (it holds a barrier); sw, sb are the column's sums in the
 * ty == 0 threads. */
__device__ __forceinline__ void col_block_sums(float aw, float ab, float (&s_w)[COL_TY][COL_TX],
                                               float (&s_b)[COL_TY][COL_TX], float &sw, float &sb) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    s_w[ty][tx] = aw;
    s_b[ty][tx] = ab;
    __syncthreads();
    sw = 0.0f;
    sb = 0.0f;
    if (ty == 0)
        for (int k = 0; k < COL_TY; k++) {
            sw += s_w[k][tx];
            sb += s_b[k][tx];
        }
}

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
    float sw, sb;
    col_block_sums(aw, ab, s_w, s_b, sw, sb);
    if (ty == 0 && c < C) {
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

/* dw[c] += the sum of pw[y * C + c] over y < parts (dw NULL: skipped), db likewise from pb: blocks of
 * COL_TX columns x COL_TY threads, thread ty adding the parts ty, ty + COL_TY, ... in order, then the
 * COL_TY sums in order (colsum_final_kernel's one thread a column waits on its parts' loads one by
 * one: hundreds of them here) */
__global__ void colsum_parts_kernel(float *dw, float *db, const float *pw, const float *pb, int C, int parts) {
    __shared__ float s_w[COL_TY][COL_TX];
    __shared__ float s_b[COL_TY][COL_TX];
    const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * COL_TX + tx;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int y = ty; y < parts; y += COL_TY) {
            if (dw) aw += pw[(size_t)y * C + c];
            if (db) ab += pb[(size_t)y * C + c];
        }
    float sw, sb;
    col_block_sums(aw, ab, s_w, s_b, sw, sb);
    if (ty == 0 && c < C) {
        if (dw) dw[c] += sw;
        if (db) db[c] += sb;
    }
}

/* the blocks' partials of kernels_norms.cu's single-pass norm backward into dw, db (colsum_parts_kernel) */
void gtc_colsum_partials(Backend *b, float *dw, float *db, const float *pw, const float *pb, int C, int parts) {
    GTC_LAUNCH(colsum_parts_kernel, (unsigned)((C + COL_TX - 1) / COL_TX), dim3(COL_TX, COL_TY), 0, gtc_stream(b), dw,
               db, pw, pb, C, parts);
    CUDA_CHECK_LAUNCH();
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

/* ------------------------------------------------------------------ cross-entropy
 *
 * One block of CE_THREADS per row, online softmax (FlashAttention-2's and Liger's single pass):
 * thread t takes the packs t, t + CE_THREADS, ... of the row (P = GTC_PACK(Act) logits; the last
 * pack holds V % P when that is not 0; packs move through one 16-byte access when ld % P == 0 and
 * logits is 16-byte aligned, else element by element: the same arithmetic) and keeps a running
 * max m and sum s of exp(x - m) in fp32: per pack, M = max(m, the pack's max) and
 * s = s * exp(m - M) + the pack's exp(x_j - M) in order. The threads' (m, s) pairs are combined in
 * a fixed order (ce_combine: butterflies within a warp, then the warps in order), so the bits
 * depend on V only. loss = log(s) + m - x[target]; with compute_grad the row becomes
 * dloss_scale * (exp(x - m) / s - onehot), from the packs the thread kept in registers (PPT of
 * them: CE_THREADS * PPT * P >= V; PPT 0, a wider row: read again). Bytes per logit (bf16): 2 read
 * (+ 2 written with the gradient); the three-pass form read 6 (max, sum, gradient).
 *
 * Precision (fp32 partials instead of the former double sum): s >= 1 (the max's own term); each
 * term exp(x - M) carries expf's error (<= 2 ulp) and one rounding per rescale of its thread's
 * running sum (a rescale happens only when the max grows, at most once per pack), then about
 * V / (CE_THREADS P) + P additions in its thread and log2(CE_THREADS) combinations: for V 50257,
 * fewer than 60 roundings, a relative error of s below 60 * 2^-24 = 3.6e-6, an absolute error of
 * log(s), and so of the loss, below 3.6e-6 (bf16 logits are exact in fp32; fp32 logits add the
 * rounding of m - x[target]). tests/test_ops.c's crossentropy cases check the losses against the
 * double reference at 1e-5 (relative to the largest loss), V up to 50257. */
#define CE_THREADS 512

/* (m, s) <- the pair for the union of the elements of (m, s) and (m2, s2). Each product and the
 * sum rounded as written (no contraction), so combine(a, b) and combine(b, a) give the same bits:
 * a butterfly leaves the same pair in every lane. */
__device__ __forceinline__ void ce_combine(float &m, float &s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return; /* both empty (s = s2 = 0) */
    s = __fadd_rn(__fmul_rn(s, expf(m - M)), __fmul_rn(s2, expf(m2 - M)));
    m = M;
}

/* one pack of cnt logits into the running (m, s) */
template <typename Act>
__device__ __forceinline__ void ce_accumulate(float &m, float &s, const uint4 &raw, int cnt) {
    float v[GTC_PACK(Act)];
    gtc_raw_to_f32<Act>(v, raw);
    float pm = -INFINITY;
#pragma unroll
    for (int j = 0; j < GTC_PACK(Act); j++)
        if (j < cnt) pm = fmaxf(pm, v[j]);
    const float M = fmaxf(m, pm);
    float add = 0.0f;
#pragma unroll
    for (int j = 0; j < GTC_PACK(Act); j++)
        if (j < cnt) add += expf(v[j] - M);
    s = m == -INFINITY ? add : s * expf(m - M) + add;
    m = M;
}

/* the gradient of one pack (first column c0, cnt logits) written over it */
template <typename Act>
__device__ __forceinline__ void ce_grad_store(Act *x, const uint4 &raw, int c0, int cnt, bool vec, float m, float f,
                                              int tgt, float dloss_scale) {
    float v[GTC_PACK(Act)];
    gtc_raw_to_f32<Act>(v, raw);
#pragma unroll
    for (int j = 0; j < GTC_PACK(Act); j++) {
        v[j] = expf(v[j] - m) * f;
        if (c0 + j == tgt) v[j] -= dloss_scale;
    }
    gtc_raw_store(x + c0, gtc_raw_from_f32<Act>(v), cnt, vec);
}

template <typename Act, int PPT>
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_kernel(float *losses, Act *logits, const int *targets, int V, int ld, float dloss_scale,
                        int compute_grad, int vec) {
    constexpr int P = GTC_PACK(Act);
    __shared__ float s_m[CE_THREADS / 32], s_s[CE_THREADS / 32];
    const int n = blockIdx.x, t = threadIdx.x, packs = (V + P - 1) / P;
    Act *x = logits + (size_t)n * ld;
    const int tgt = targets[n];
    if (tgt < 0 || tgt >= V) { /* -100: ignored, a zero row; another bad target (the caller validates) is loud */
        const float fill = tgt == -100 ? 0.0f : NAN;
        if (t == 0) losses[n] = fill;
        if (compute_grad) {
            float v[P];
            for (int j = 0; j < P; j++) v[j] = fill;
            const uint4 raw = gtc_raw_from_f32<Act>(v);
            for (int q = t; q < packs; q += CE_THREADS) {
                const int cnt = min(P, V - q * P);
                gtc_raw_store(x + q * P, raw, cnt, vec && cnt == P);
            }
        }
        return;
    }
    const float xt = load_f32(x, tgt); /* read by every thread before any write below (the barrier) */
    float m = -INFINITY, s = 0.0f;
    uint4 keep[PPT > 0 ? PPT : 1];
    if constexpr (PPT > 0) {
#pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int q = t + k * CE_THREADS, cnt = min(P, V - q * P);
            if (cnt <= 0) continue;
            keep[k] = gtc_raw_load(x + q * P, cnt, vec && cnt == P);
        }
#pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int q = t + k * CE_THREADS, cnt = min(P, V - q * P);
            if (cnt > 0) ce_accumulate<Act>(m, s, keep[k], cnt);
        }
    } else {
        for (int q = t; q < packs; q += CE_THREADS) {
            const int cnt = min(P, V - q * P);
            ce_accumulate<Act>(m, s, gtc_raw_load(x + q * P, cnt, vec && cnt == P), cnt);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ce_combine(m, s, m2, s2);
    }
    if ((t & 31) == 0) {
        s_m[t >> 5] = m;
        s_s[t >> 5] = s;
    }
    __syncthreads();
    m = s_m[0];
    s = s_s[0];
    for (int w = 1; w < CE_THREADS / 32; w++) ce_combine(m, s, s_m[w], s_s[w]);
    if (t == 0) losses[n] = logf(s) + (m - xt);
    if (!compute_grad) return;
    const float f = dloss_scale / s;
    if constexpr (PPT > 0) {
#pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int q = t + k * CE_THREADS, cnt = min(P, V - q * P);
            if (cnt > 0) ce_grad_store(x, keep[k], q * P, cnt, vec && cnt == P, m, f, tgt, dloss_scale);
        }
    } else {
        for (int q = t; q < packs; q += CE_THREADS) {
            const int cnt = min(P, V - q * P);
            const bool v = vec && cnt == P;
            ce_grad_store(x, gtc_raw_load(x + q * P, cnt, v), q * P, cnt, v, m, f, tgt, dloss_scale);
        }
    }
}

template <typename Act>
static void crossentropy_t(Backend *b, float *losses, Act *logits, const int *targets, int N, int V, int ld,
                           float dloss_scale, int compute_grad) {
    const int P = GTC_PACK(Act), packs = (V + P - 1) / P;
    const int vec = ld % P == 0 && gtc_aligned16(logits);
    cudaStream_t st = gtc_stream(b);
    if (packs <= CE_THREADS * 8)
        GTC_LAUNCH((crossentropy_kernel<Act, 8>), N, CE_THREADS, 0, st, losses, logits, targets, V, ld, dloss_scale,
                   compute_grad, vec);
    else if (packs <= CE_THREADS * 16)
        GTC_LAUNCH((crossentropy_kernel<Act, 16>), N, CE_THREADS, 0, st, losses, logits, targets, V, ld, dloss_scale,
                   compute_grad, vec);
    else
        GTC_LAUNCH((crossentropy_kernel<Act, 0>), N, CE_THREADS, 0, st, losses, logits, targets, V, ld, dloss_scale,
                   compute_grad, vec);
    CUDA_CHECK_LAUNCH();
}

void gtc_crossentropy(Backend *b, float *losses, act_t *logits, const int *targets, int N, int V,
                      int ld, float dloss_scale, int compute_grad) {
    if (N <= 0 || V <= 0) return;
    if (gtc_act_bf16(b))
        crossentropy_t(b, losses, (gtc_bf16 *)logits, targets, N, V, ld, dloss_scale, compute_grad);
    else
        crossentropy_t(b, losses, (float *)logits, targets, N, V, ld, dloss_scale, compute_grad);
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
