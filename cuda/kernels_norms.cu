/* kernels_norms.cu - the CUDA backend's row norms: LayerNorm and RMSNorm forward (plain and fused
 * with the residual add), their backward (dinp, and dw/dbias in the same pass), and the per-head
 * RMSNorm of Qwen3's q/k heads. Contracts: backend.h; the formulas are the CPU backend's
 * (backend_cpu.c, backend_cpu_llama.c), so the two agree to rounding.
 *
 * Row layout (one definition for every kernel here). A row of C act elements is cut into packs of
 * P = GTC_PACK(Act) elements (8 bf16, 4 fp32; the last pack of a row holds C % P when that is not
 * 0). The tpr threads of a row (a multiple of 32) own packs t, t + tpr, ..., t + (PPT-1) tpr: thread
 * t's slots k < PPT. A row is read from global memory ONCE, into registers (its raw 16-byte packs,
 * 4 words a pack), and every later pass over it (variance, output, gradient) works from there.
 * Every sum over a row adds, in this order: a thread's slots in order, a slot's elements in order;
 * the threads by warp butterflies; the warps of the row in warp order (row_sum). The shape (PPT,
 * tpr, rows per block) depends on C only (row_shape), never on the device or on alignment: when
 * C % P != 0 or a pointer is not 16-byte aligned, packs are moved element by element instead of
 * through one 16-byte access, with the same arithmetic, so the bits do not change. A forward and
 * its fused residual form are one kernel (y NULL or not): the same bits by construction (recompute's
 * bit-identity, backend.h's fused-op contract).
 *
 * Launch shape: blocks of (tpr, rpb) threads, rpb = 256 / tpr rows a block (ROW_BLOCK = 256, the
 * kernels' __launch_bounds__: the wide instantiations take up to 255 registers a thread). PPT = 4
 * (a thread holds 4 packs: 16 registers a row-sized array) up to 256 x 4 packs (bf16 C <= 8192,
 * fp32 C <= 4096); PPT = 8 up to 2x that (bf16 C <= 16384, fp32 C <= 8192); wider rows are
 * refused with one line. GPT-2 (C 768 bf16: 96 packs): a warp a row, 3 packs a lane, 8 rows a
 * block; Mistral (C 4096 bf16: 512 packs): 128 threads a row, 4 packs each, 2 rows a block.
 * Latency is covered by the PPT (forward; 2 PPT fused, 3 PPT backward: dout, inp, dinp) independent
 * 16-byte loads a thread issues before its first sum, and by the rows in flight: the grid holds
 * every row (N / rpb blocks); the backward with dw has at most 512 blocks (NB_MAX_BLOCKS), each
 * looping over its rows, whose register-held column sums (2 x 4 packs, 64 registers) leave room
 * for one 256-thread block an SM under bf16 LayerNorm (190 registers; at GPT-2's width 9 loads of
 * 16 bytes in flight a thread, 36 KiB an SM: about an SM's share of HBM bandwidth x latency).
 *
 * Backward: dinp (ACCUMULATES, or is overwritten for the per-head norm) from dout, inp read once;
 * with dw (and db) the block's rows' dout * xhat (and dout) summed per column in registers (a
 * thread owns the same columns in every row), the row groups of the block added in order through
 * shared memory into the block's fp32 partial, and colsum_partials (kernels_misc.cu) adds the
 * blocks' partials in order: a fixed order that depends on N and C only, no atomics. Rows too wide
 * for registers (PPT 8) take dinp here and dw/db from the two-pass column reduction.
 *
 * Bytes per element (bf16): forward 2 read + 2 written (fused: 4 read + 4 written), backward 6 read
 * (dout, inp, dinp) + 2 written; the weights (C elements) stay in L1/L2. */
#include "cuda_common.cuh"

#include <math.h>

#define ROW_PPT 4       /* packs a thread holds for rows up to ROW_BLOCK threads x 4 packs */
#define ROW_PPT_WIDE 8  /* and up to ROW_BLOCK x 8 packs (16 took nvcc 20 s more an arch) */
#define ROW_BLOCK 256   /* threads a block (a row takes at most one block): __launch_bounds__ */
#define NB_MAX_BLOCKS 512 /* backward with dw: at most this many blocks (partials), about 4 per SM on an H100 */

/* ------------------------------------------------------------------ the row machinery */

typedef struct {
    int ppt, tpr, rpb; /* packs a thread, threads a row, rows a block; ppt 0: too wide */
} RowShape;

template <typename Act>
static RowShape row_shape(int C) {
    const int P = GTC_PACK(Act), packs = (C + P - 1) / P;
    RowShape s;
    s.ppt = packs <= ROW_PPT * ROW_BLOCK ? ROW_PPT : packs <= ROW_PPT_WIDE * ROW_BLOCK ? ROW_PPT_WIDE : 0;
    if (!s.ppt) {
        fprintf(stderr, "%s:%d: norm: rows of C=%d elements are wider than the CUDA row kernels take (at most %d)\n",
                __FILE__, __LINE__, C, ROW_PPT_WIDE * ROW_BLOCK * P);
        exit(GT_EXIT_FAILURE);
    }
    s.tpr = ((packs + s.ppt - 1) / s.ppt + 31) / 32 * 32;
    s.rpb = s.tpr >= ROW_BLOCK ? 1 : ROW_BLOCK / s.tpr;
    return s;
}

/* the row's sum of each thread's v, the same bits in every thread of the row: butterflies within
 * a warp, then (tpr > 32) the row's warps in order through sh (32 floats: a block has at most 32
 * warps). Every thread of the block calls it (it holds barriers when tpr > 32). */
__device__ __forceinline__ float row_sum(float v, float *sh, int tpr) {
    v = gtc_warp_sum(v);
    if (tpr <= 32) return v; /* block-uniform */
    const int nw = tpr >> 5;
    float *s = sh + threadIdx.y * nw;
    __syncthreads(); /* the reads of an earlier row_sum are done */
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.0f;
    for (int k = 0; k < nw; k++) t += s[k];
    return t;
}

/* elements of slot k's pack that are in the row (<= 0: none), and its first column */
template <typename Act>
__device__ __forceinline__ int row_slot_n(int k, int Cv, int t, int tpr, int &c0) {
    c0 = (t + k * tpr) * GTC_PACK(Act);
    return min(GTC_PACK(Act), Cv - c0);
}

/* the thread's slots of the row p (Cv elements: 0 for a row past N) into raw registers */
template <typename Act, int PPT>
__device__ __forceinline__ void row_load(uint4 (&r)[PPT], const Act *p, int Cv, int t, int tpr, bool vec) {
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
        r[k] = n > 0 ? gtc_raw_load(p + c0, n, vec && n == GTC_PACK(Act)) : make_uint4(0, 0, 0, 0);
    }
}

/* ------------------------------------------------------------------ forward */

/* One row: res = x + y rounded once (add's arithmetic; y NULL: no residual, the row is x), then
 * LN: mean, variance of x - mean, out = (x - mean) * rstd * w + bias; RMS: rstd = 1/sqrt(mean(x^2)
 * + eps), out = x * rstd * w. res may alias x or y: each pack is read, then written, by one thread. */
template <bool LN, typename Act, int PPT>
__device__ __forceinline__ void norm_row_forward(Act *res, Act *o, float *mean, float *rstd, const Act *x,
                                                 const Act *y, const Act *w, const Act *bias, int C, int Cv,
                                                 float eps, int t, int tpr, bool vec, float *sh) {
    constexpr int P = GTC_PACK(Act);
    uint4 xs[PPT];
    row_load<Act, PPT>(xs, x, Cv, t, tpr, vec);
    if (y) {
#pragma unroll
        for (int k = 0; k < PPT; k++) {
            int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
            if (n <= 0) continue;
            const bool v = vec && n == P;
            float a[P], b[P];
            gtc_raw_to_f32<Act>(a, xs[k]);
            gtc_raw_to_f32<Act>(b, gtc_raw_load(y + c0, n, v));
#pragma unroll
            for (int j = 0; j < P; j++) a[j] += b[j];
            xs[k] = gtc_raw_from_f32<Act>(a);
            gtc_raw_store(res + c0, xs[k], n, v);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
        float v[P];
        gtc_raw_to_f32<Act>(v, xs[k]);
#pragma unroll
        for (int j = 0; j < P; j++)
            if (j < n) s = LN ? s + v[j] : fmaf(v[j], v[j], s);
    }
    const float invC = 1.0f / (float)C;
    float m = 0.0f, r;
    if (LN) {
        m = row_sum(s, sh, tpr) * invC;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < PPT; k++) {
            int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
            float v[P];
            gtc_raw_to_f32<Act>(v, xs[k]);
#pragma unroll
            for (int j = 0; j < P; j++)
                if (j < n) q = fmaf(v[j] - m, v[j] - m, q);
        }
        r = 1.0f / sqrtf(row_sum(q, sh, tpr) * invC + eps);
    } else {
        r = 1.0f / sqrtf(row_sum(s, sh, tpr) / (float)C + eps);
    }
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
        if (n <= 0) continue;
        const bool v = vec && n == P;
        float xv[P], wv[P], bv[P];
        gtc_raw_to_f32<Act>(xv, xs[k]);
        gtc_raw_to_f32<Act>(wv, gtc_raw_load(w + c0, n, v));
        if (LN) gtc_raw_to_f32<Act>(bv, gtc_raw_load(bias + c0, n, v));
#pragma unroll
        for (int j = 0; j < P; j++) xv[j] = LN ? fmaf((xv[j] - m) * r, wv[j], bv[j]) : xv[j] * r * wv[j];
        gtc_raw_store(o + c0, gtc_raw_from_f32<Act>(xv), n, v);
    }
    if (t == 0 && Cv) {
        if (LN && mean) *mean = m;
        if (rstd) *rstd = r;
    }
}

/* rows of C: row = blockIdx.x * rpb + threadIdx.y (rows past N join the barriers, touch nothing) */
template <bool LN, typename Act, int PPT>
__global__ void __launch_bounds__(ROW_BLOCK) norm_forward_kernel(Act *res, Act *out, float *mean, float *rstd, const Act *x, const Act *y,
                                    const Act *w, const Act *bias, int N, int C, float eps, int vec) {
    __shared__ float sh[32];
    const int row = blockIdx.x * blockDim.y + threadIdx.y, Cv = row < N ? C : 0;
    const size_t off = (size_t)row * C;
    norm_row_forward<LN, Act, PPT>(res + off, out + off, mean ? mean + row : NULL, rstd ? rstd + row : NULL,
                                   x + off, y ? y + off : NULL, w, bias, C, Cv, eps, threadIdx.x, blockDim.x,
                                   vec != 0, sh);
}

template <bool LN, typename Act>
static void norm_forward(Backend *b, Act *res, Act *out, float *mean, float *rstd, const Act *x, const Act *y,
                         const Act *w, const Act *bias, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    const RowShape s = row_shape<Act>(C);
    const bool aligned = gtc_aligned16(out) && gtc_aligned16(x) && gtc_aligned16(w) &&
                         (!y || (gtc_aligned16(y) && gtc_aligned16(res))) && (!bias || gtc_aligned16(bias));
    const bool vec = C % GTC_PACK(Act) == 0 && aligned; /* else every pack element by element */
    const dim3 block((unsigned)s.tpr, (unsigned)s.rpb);
    const unsigned grid = (unsigned)((N + s.rpb - 1) / s.rpb);
    if (y == NULL) res = out; /* not written; keeps res + off a valid expression */
    if (s.ppt == ROW_PPT)
        GTC_LAUNCH((norm_forward_kernel<LN, Act, ROW_PPT>), grid, block, 0, gtc_stream(b), res, out, mean, rstd, x,
                   y, w, bias, N, C, eps, (int)vec);
    else
        GTC_LAUNCH((norm_forward_kernel<LN, Act, ROW_PPT_WIDE>), grid, block, 0, gtc_stream(b), res, out, mean,
                   rstd, x, y, w, bias, N, C, eps, (int)vec);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ backward */

/* One row's gradient with xhat = (x - m) * r (RMS: m = 0) and dn = dout * w:
 *   LN: dx (+)= (dn - mean(dn) - xhat * mean(dn * xhat)) * r;  RMS: dx (+)= (dn - xhat * mean(dn * xhat)) * r
 * (acc: a read-modify-write in fp32, rounded once; dx may equal dy: each pack is read, then
 * written, by one thread; dx's packs are loaded with dy's and x's, before the row's sums). DW: aw[k][j] += dout * xhat and (LN) ab[k][j] += dout for the thread's
 * columns. dx NULL: no dinp. */
template <bool LN, bool DW, typename Act, int PPT>
__device__ __forceinline__ void norm_row_backward(Act *dx, const Act *dy, const Act *x, const Act *w, float m, float r,
                                                  int C, int Cv, int t, int tpr, bool vec, bool acc, float *sh,
                                                  float (&aw)[PPT][GTC_PACK(Act)], float (&ab)[PPT][GTC_PACK(Act)]) {
    constexpr int P = GTC_PACK(Act);
    uint4 gs[PPT], xs[PPT], ds[PPT]; /* dx's old values too (acc): its loads in flight with the others */
    row_load<Act, PPT>(gs, dy, Cv, t, tpr, vec);
    row_load<Act, PPT>(xs, x, Cv, t, tpr, vec);
    row_load<Act, PPT>(ds, dx, dx && acc ? Cv : 0, t, tpr, vec);
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
        if (n <= 0) continue;
        float g[P], xv[P], wv[P];
        gtc_raw_to_f32<Act>(g, gs[k]);
        gtc_raw_to_f32<Act>(xv, xs[k]);
        gtc_raw_to_f32<Act>(wv, gtc_raw_load(w + c0, n, vec && n == P));
#pragma unroll
        for (int j = 0; j < P; j++) {
            if (j >= n) continue;
            const float dn = g[j] * wv[j], xh = (xv[j] - m) * r;
            if (LN) s1 += dn;
            s2 = fmaf(dn, xh, s2);
            if (DW) {
                aw[k][j] = fmaf(g[j], xh, aw[k][j]);
                if (LN) ab[k][j] += g[j];
            }
        }
    }
    const float invC = 1.0f / (float)C;
    const float mdn = LN ? row_sum(s1, sh, tpr) * invC : 0.0f;
    const float mdnx = row_sum(s2, sh, tpr) * invC;
    if (!dx) return;
#pragma unroll
    for (int k = 0; k < PPT; k++) {
        int c0, n = row_slot_n<Act>(k, Cv, t, tpr, c0);
        if (n <= 0) continue;
        const bool v = vec && n == P;
        float g[P], xv[P], wv[P], d[P];
        gtc_raw_to_f32<Act>(g, gs[k]);
        gtc_raw_to_f32<Act>(xv, xs[k]);
        gtc_raw_to_f32<Act>(wv, gtc_raw_load(w + c0, n, v));
        gtc_raw_to_f32<Act>(d, ds[k]);
#pragma unroll
        for (int j = 0; j < P; j++) {
            const float xh = (xv[j] - m) * r, dn = g[j] * wv[j];
            const float gr = LN ? (dn - mdn - xh * mdnx) * r : (dn - xh * mdnx) * r;
            d[j] = acc ? d[j] + gr : gr;
        }
        gtc_raw_store(dx + c0, gtc_raw_from_f32<Act>(d), n, v);
    }
}

/* Block y takes rows [y * rows, min(N, (y + 1) * rows)), its row group threadIdx.y the rows
 * y * rows + threadIdx.y, + rpb, ... (the same number of turns in every group: the barriers).
 * DW: the block's column sums into pw[y][c] (and pb), the row groups added in order through smem
 * (C floats a partial array: dynamic shared memory). */
template <bool LN, bool DW, typename Act, int PPT>
__global__ void __launch_bounds__(ROW_BLOCK) norm_backward_kernel(Act *dinp, float *pw, float *pb, const Act *dout, const Act *inp, const Act *w,
                                     const float *mean, const float *rstd, int N, int C, int rows, int vec, int acc) {
    constexpr int P = GTC_PACK(Act);
    __shared__ float sh[32];
    extern __shared__ float nb_smem[]; /* DW: [C] dw partial, then [C] db partial if pb */
    const int t = threadIdx.x, tpr = blockDim.x, ty = threadIdx.y, rpb = blockDim.y;
    float aw[PPT][P], ab[PPT][P];
#pragma unroll
    for (int k = 0; k < PPT; k++)
#pragma unroll
        for (int j = 0; j < P; j++) aw[k][j] = ab[k][j] = 0.0f;
    const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    for (int i = 0; i < rows; i += rpb) {
        const int row = r0 + i + ty, Cv = row < r1 ? C : 0;
        const size_t off = (size_t)row * C;
        const float m = LN && Cv ? mean[row] : 0.0f, r = Cv ? rstd[row] : 0.0f;
        norm_row_backward<LN, DW, Act, PPT>(dinp ? dinp + off : NULL, dout + off, inp + off, w, m, r, C, Cv, t, tpr,
                                            vec != 0, acc != 0, sh, aw, ab);
    }
    if constexpr (DW) {
        /* the row groups in order: group 0 writes, the next ones add, the last one stores the block's partial */
        for (int g = 0; g < rpb; g++) {
            if (ty == g) {
#pragma unroll
                for (int k = 0; k < PPT; k++) {
                    int c0, n = row_slot_n<Act>(k, C, t, tpr, c0);
#pragma unroll
                    for (int j = 0; j < P; j++) {
                        if (j >= n) continue;
                        const int c = c0 + j;
                        float sw = g ? nb_smem[c] + aw[k][j] : aw[k][j];
                        float sb = pb ? (g ? nb_smem[C + c] + ab[k][j] : ab[k][j]) : 0.0f;
                        if (g == rpb - 1) {
                            pw[(size_t)blockIdx.x * C + c] = sw;
                            if (pb) pb[(size_t)blockIdx.x * C + c] = sb;
                        } else {
                            nb_smem[c] = sw;
                            if (pb) nb_smem[C + c] = sb;
                        }
                    }
                }
            }
            __syncthreads();
        }
    }
}

/* dinp (NULL: none) (+)= the gradient; dw (NULL: none) += sum dout * xhat, db (NULL: none) += sum
 * dout, over the N rows */
template <bool LN, typename Act>
static void norm_backward(Backend *b, Act *dinp, float *dw, float *db, const Act *dout, const Act *inp, const Act *w,
                          const float *mean, const float *rstd, int N, int C, bool acc) {
    if (N <= 0 || C <= 0) return;
    const RowShape s = row_shape<Act>(C);
    const bool aligned = gtc_aligned16(dout) && gtc_aligned16(inp) && gtc_aligned16(w) && (!dinp || gtc_aligned16(dinp));
    const bool vec = aligned && C % GTC_PACK(Act) == 0; /* else every pack element by element */
    const dim3 block((unsigned)s.tpr, (unsigned)s.rpb);
    cudaStream_t st = gtc_stream(b);
    if ((dw || db) && s.ppt == ROW_PPT) { /* dinp and the column sums in one pass */
        int rows = (N + NB_MAX_BLOCKS - 1) / NB_MAX_BLOCKS;
        rows = (rows + s.rpb - 1) / s.rpb * s.rpb;
        const int blocks = (N + rows - 1) / rows, arrays = db ? 2 : 1;
        float *pw = (float *)gtc_scratch(b, (size_t)arrays * blocks * C * sizeof(float));
        float *pb = db ? pw + (size_t)blocks * C : NULL;
        const size_t smem = s.rpb > 1 ? (size_t)arrays * C * sizeof(float) : 0; /* rpb > 1: C <= 128 threads x 4 packs */
        GTC_LAUNCH((norm_backward_kernel<LN, true, Act, ROW_PPT>), blocks, block, smem, st, dinp, pw, pb, dout, inp, w,
                   mean, rstd, N, C, rows, (int)vec, (int)acc);
        CUDA_CHECK_LAUNCH();
        gtc_colsum_partials(b, dw, db, pw, pb, C, blocks);
        return;
    }
    if (dinp) {
        const unsigned grid = (unsigned)((N + s.rpb - 1) / s.rpb);
        if (s.ppt == ROW_PPT)
            GTC_LAUNCH((norm_backward_kernel<LN, false, Act, ROW_PPT>), grid, block, 0, st, dinp, (float *)NULL,
                       (float *)NULL, dout, inp, w, mean, rstd, N, C, s.rpb, (int)vec, (int)acc);
        else
            GTC_LAUNCH((norm_backward_kernel<LN, false, Act, ROW_PPT_WIDE>), grid, block, 0, st, dinp, (float *)NULL,
                       (float *)NULL, dout, inp, w, mean, rstd, N, C, s.rpb, (int)vec, (int)acc);
        CUDA_CHECK_LAUNCH();
    }
    /* rows too wide to sum columns in registers: the two-pass column reduction (kernels_misc.cu) */
    if (dw || db) gtc_norm_param_grads(b, dw, db, dout, dw ? (const act_t *)inp : NULL, mean, rstd, N, C);
}

/* ------------------------------------------------------------------ the ops: LayerNorm, RMSNorm */

#define GTC_ACT_DISPATCH(b, call_bf16, call_f32) \
    do {                                         \
        if (gtc_act_bf16(b))                     \
            call_bf16;                           \
        else                                     \
            call_f32;                            \
    } while (0)
#define BF(p) ((gtc_bf16 *)(p))
#define CBF(p) ((const gtc_bf16 *)(p))
#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))

void gtc_layernorm_forward(Backend *b, act_t *out, float *mean, float *rstd, const act_t *inp, const act_t *w,
                           const act_t *bias, int N, int C, float eps) {
    GTC_ACT_DISPATCH(b,
                     norm_forward<true>(b, (gtc_bf16 *)NULL, BF(out), mean, rstd, CBF(inp), (const gtc_bf16 *)NULL,
                                        CBF(w), CBF(bias), N, C, eps),
                     norm_forward<true>(b, (float *)NULL, F(out), mean, rstd, CF(inp), (const float *)NULL, CF(w),
                                        CF(bias), N, C, eps));
}

void gtc_residual_layernorm_forward(Backend *b, act_t *res, act_t *out, float *mean, float *rstd, const act_t *x,
                                    const act_t *y, const act_t *w, const act_t *bias, int N, int C, float eps) {
    GTC_ACT_DISPATCH(b,
                     norm_forward<true>(b, BF(res), BF(out), mean, rstd, CBF(x), CBF(y), CBF(w), CBF(bias), N, C, eps),
                     norm_forward<true>(b, F(res), F(out), mean, rstd, CF(x), CF(y), CF(w), CF(bias), N, C, eps));
}

void gtc_layernorm_backward(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout, const act_t *inp,
                            const act_t *w, const float *mean, const float *rstd, int N, int C) {
    GTC_ACT_DISPATCH(b,
                     norm_backward<true>(b, BF(dinp), dw, dbias, CBF(dout), CBF(inp), CBF(w), mean, rstd, N, C, true),
                     norm_backward<true>(b, F(dinp), dw, dbias, CF(dout), CF(inp), CF(w), mean, rstd, N, C, true));
}

void gtc_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *w, int N, int C,
                         float eps) {
    GTC_ACT_DISPATCH(b,
                     norm_forward<false>(b, (gtc_bf16 *)NULL, BF(out), (float *)NULL, rstd, CBF(inp),
                                         (const gtc_bf16 *)NULL, CBF(w), (const gtc_bf16 *)NULL, N, C, eps),
                     norm_forward<false>(b, (float *)NULL, F(out), (float *)NULL, rstd, CF(inp), (const float *)NULL,
                                         CF(w), (const float *)NULL, N, C, eps));
}

void gtc_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x, const act_t *y,
                                  const act_t *w, int N, int C, float eps) {
    GTC_ACT_DISPATCH(b,
                     norm_forward<false>(b, BF(res), BF(out), (float *)NULL, rstd, CBF(x), CBF(y), CBF(w),
                                         (const gtc_bf16 *)NULL, N, C, eps),
                     norm_forward<false>(b, F(res), F(out), (float *)NULL, rstd, CF(x), CF(y), CF(w),
                                         (const float *)NULL, N, C, eps));
}

void gtc_rmsnorm_backward(Backend *b, act_t *dinp, float *dw, const act_t *dout, const act_t *inp, const act_t *w,
                          const float *rstd, int N, int C) {
    GTC_ACT_DISPATCH(b,
                     norm_backward<false>(b, BF(dinp), dw, (float *)NULL, CBF(dout), CBF(inp), CBF(w),
                                          (const float *)NULL, rstd, N, C, true),
                     norm_backward<false>(b, F(dinp), dw, (float *)NULL, CF(dout), CF(inp), CF(w), (const float *)NULL,
                                          rstd, N, C, true));
}

/* ------------------------------------------------------------------ per-head RMSNorm */

/* One warp per (row n, head h) of the R = NH + 2 NKV heads of hd values (rows of hd: the row
 * layout above with tpr 32): h < NH + NKV (q, then k heads) is rmsnorm_forward's row with wq or
 * wk, rstd[n * (NH + NKV) + h]; a v head is copied. hd <= 32 x 4 packs (head_rmsnorm_check). */
template <typename Act>
__global__ void head_rmsnorm_forward_kernel(Act *out, float *rstd, const Act *inp, const Act *wq, const Act *wk,
                                            int N, int NH, int NKV, int hd, float eps, int vec) {
    const int H = NH + NKV, R = H + NKV, lane = threadIdx.x & 31;
    const size_t warp = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (warp >= (size_t)N * R) return; /* warp-uniform; tpr 32: row_sum has no barrier */
    const int n = (int)(warp / R), h = (int)(warp % R);
    const size_t off = warp * hd;
    if (h >= H) {
        uint4 v[ROW_PPT];
        row_load<Act, ROW_PPT>(v, inp + off, hd, lane, 32, vec != 0);
#pragma unroll
        for (int k = 0; k < ROW_PPT; k++) {
            int c0, m = row_slot_n<Act>(k, hd, lane, 32, c0);
            if (m > 0) gtc_raw_store(out + off + c0, v[k], m, vec && m == GTC_PACK(Act));
        }
        return;
    }
    norm_row_forward<false, Act, ROW_PPT>((Act *)NULL, out + off, (float *)NULL, rstd + (size_t)n * H + h, inp + off,
                                          (const Act *)NULL, h < NH ? wq : wk, (const Act *)NULL, hd, hd, eps, lane, 32,
                                          vec != 0, (float *)NULL);
}

/* one warp per (row, head): a q or k head's gradient written over dinp's, a v head copied */
template <typename Act>
__global__ void head_rmsnorm_backward_kernel(Act *dinp, const Act *dout, const Act *inp, const Act *wq, const Act *wk,
                                             const float *rstd, int N, int NH, int NKV, int hd, int vec) {
    constexpr int P = GTC_PACK(Act);
    const int H = NH + NKV, R = H + NKV, lane = threadIdx.x & 31;
    const size_t warp = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (warp >= (size_t)N * R) return; /* warp-uniform */
    const int n = (int)(warp / R), h = (int)(warp % R);
    const size_t off = warp * hd;
    if (h >= H) {
        uint4 v[ROW_PPT];
        row_load<Act, ROW_PPT>(v, dout + off, hd, lane, 32, vec != 0);
#pragma unroll
        for (int k = 0; k < ROW_PPT; k++) {
            int c0, m = row_slot_n<Act>(k, hd, lane, 32, c0);
            if (m > 0) gtc_raw_store(dinp + off + c0, v[k], m, vec && m == P);
        }
        return;
    }
    float aw[ROW_PPT][P], ab[ROW_PPT][P];
    norm_row_backward<false, false, Act, ROW_PPT>(dinp + off, dout + off, inp + off, h < NH ? wq : wk, 0.0f,
                                                  rstd[(size_t)n * H + h], hd, hd, lane, 32, vec != 0, false,
                                                  (float *)NULL, aw, ab);
}

static void head_rmsnorm_check(int NH, int NKV, int hd, int P) {
    if (NH <= 0 || NKV <= 0 || hd <= 0 || hd > 32 * ROW_PPT * P) {
        fprintf(stderr, "%s:%d: head_rmsnorm: unsupported shape NH=%d NKV=%d hd=%d (at most %d)\n", __FILE__,
                __LINE__, NH, NKV, hd, 32 * ROW_PPT * P);
        exit(GT_EXIT_FAILURE);
    }
}

template <typename Act>
static void head_rmsnorm_forward_t(Backend *b, Act *out, float *rstd, const Act *inp, const Act *wq, const Act *wk,
                                   int N, int NH, int NKV, int hd, float eps) {
    head_rmsnorm_check(NH, NKV, hd, GTC_PACK(Act));
    const bool vec = hd % GTC_PACK(Act) == 0 && gtc_aligned16(out) && gtc_aligned16(inp) && gtc_aligned16(wq) &&
                     gtc_aligned16(wk);
    size_t warps = (size_t)N * (NH + 2 * NKV), per_block = GTC_THREADS / 32;
    GTC_LAUNCH(head_rmsnorm_forward_kernel<Act>, (unsigned)((warps + per_block - 1) / per_block), GTC_THREADS, 0,
               gtc_stream(b), out, rstd, inp, wq, wk, N, NH, NKV, hd, eps, (int)vec);
    CUDA_CHECK_LAUNCH();
}

void gtc_head_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *wq,
                              const act_t *wk, int N, int NH, int NKV, int hd, float eps) {
    if (N <= 0) return;
    GTC_ACT_DISPATCH(b, head_rmsnorm_forward_t(b, BF(out), rstd, CBF(inp), CBF(wq), CBF(wk), N, NH, NKV, hd, eps),
                     head_rmsnorm_forward_t(b, F(out), rstd, CF(inp), CF(wq), CF(wk), N, NH, NKV, hd, eps));
}

/* dwq, dwk first (they read dout, which dinp may overwrite: same stream, in order), then dinp */
template <typename Act>
static void head_rmsnorm_backward_t(Backend *b, Act *dinp, float *dwq, float *dwk, const Act *dout, const Act *inp,
                                    const Act *wq, const Act *wk, const float *rstd, int N, int NH, int NKV, int hd) {
    head_rmsnorm_check(NH, NKV, hd, GTC_PACK(Act));
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hd;
    if (dwq) gtc_norm_param_grads_rows(b, dwq, dout, inp, rstd, N, NH, R, H, hd);
    if (dwk)
        gtc_norm_param_grads_rows(b, dwk, dout + (size_t)NH * hd, inp + (size_t)NH * hd, rstd + NH, N, NKV, R, H, hd);
    if (!dinp) return;
    const bool vec = hd % GTC_PACK(Act) == 0 && gtc_aligned16(dinp) && gtc_aligned16(dout) && gtc_aligned16(inp) &&
                     gtc_aligned16(wq) && gtc_aligned16(wk);
    size_t warps = (size_t)N * (NH + 2 * NKV), per_block = GTC_THREADS / 32;
    GTC_LAUNCH(head_rmsnorm_backward_kernel<Act>, (unsigned)((warps + per_block - 1) / per_block), GTC_THREADS, 0,
               gtc_stream(b), dinp, dout, inp, wq, wk, rstd, N, NH, NKV, hd, (int)vec);
    CUDA_CHECK_LAUNCH();
}

void gtc_head_rmsnorm_backward(Backend *b, act_t *dinp, float *dwq, float *dwk, const act_t *dout, const act_t *inp,
                               const act_t *wq, const act_t *wk, const float *rstd, int N, int NH, int NKV, int hd) {
    if (N <= 0) return;
    GTC_ACT_DISPATCH(b,
                     head_rmsnorm_backward_t(b, BF(dinp), dwq, dwk, CBF(dout), CBF(inp), CBF(wq), CBF(wk), rstd, N, NH,
                                             NKV, hd),
                     head_rmsnorm_backward_t(b, F(dinp), dwq, dwk, CF(dout), CF(inp), CF(wq), CF(wk), rstd, N, NH, NKV,
                                             hd));
}
