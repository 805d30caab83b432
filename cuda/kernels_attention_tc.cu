/* kernels_attention_tc.cu - bf16 attention on tensor cores at FlashAttention-2's design (head
 * sizes 64, 96, 128; kernels_attention.cu dispatches here and keeps the CUDA-core kernels for
 * fp32 runs and other head sizes). Same contract as the ops (backend.h): qkv[B, T, (NH + 2 NKV) hs]
 * with NH query | NKV key | NKV value heads, query head h reading kv head gtc_att_kv_head(h);
 * out[B, T, NH hs], lse[B, NH, T] = log sum_j exp(scale * q_t . k_j) over the keys t sees (j in
 * [gtc_att_first_key(t, window), t]; with positions, packed rows, from gtc_att_first_key_pos:
 * t's own example only), scale = 1/sqrt(hs).
 *
 * Building blocks (mma_ptx.cuh): mma.sync m16n8k16 bf16 -> fp32, ldmatrix (.trans for the
 * operand whose reduction index runs down the rows), cp.async 16-byte copies double-buffering the
 * streamed tiles. Each warp owns 16 rows (queries, or keys in dK/dV); a block has W = 4 warps, or
 * W = 8 (the large variant, chosen at run time when the device's opt-in shared memory holds it:
 * sm_80 A100 and sm_90). Streamed tiles are 64 rows. Shared tiles are bf16 rows of hs elements;
 * hs 64 and 128 rows are swizzled (16-byte chunk c of row r stored at chunk (c & ~7) | ((c ^ r) & 7),
 * so the 8 rows an ldmatrix reads hit 8 different bank groups), hs 96 rows are padded by 8.
 *
 * Forward, one block per (16 W queries, head, batch): Q -> registers (A fragments) once; per key
 * tile: S = Q_w K^T in 8 accumulator tiles (registers), online softmax per row in fp32 (max and
 * sum across the quad of lanes that share the row), P = exp(scale S - m) rounded to bf16 into A
 * fragments straight from the accumulators, O (registers) rescaled by exp(m_old - m_new), O += P V;
 * the next K/V tile's cp.async copies run meanwhile. out = O / l (one bf16 rounding), lse = m +
 * log l. Key tiles wholly outside a warp's band are skipped; partial ones are masked.
 * Backward (D = rowsum(dout * out) from kernels_attention.cu), in one pass, deterministic, no
 * atomics: one block per (split s, kv head, batch), S splits from the shapes alone
 * (backend_attention_dq_splits, backend.h: not from the device, so the bits and the plan's
 * scratch do not depend on the GPU). The key units (FA_UNIT = 128 keys) are dealt to the splits
 * in rounds of S, snaking (fa_unit: round r gives split s unit r S + s when r is even, r S + S -
 * 1 - s when odd): under the causal mask an earlier unit has more query rows to visit, and the
 * blocks of one launch finish with the slowest, so each split's units pair a long with a short
 * one (causal, 8 units, S 4: 9 x 128 query rows a split, where units s, s + 4 gave 12 x 128 to
 * split 0 and 6 x 128 to split 3). Split s walks its units in increasing order, each as blocks
 * of 16 W keys (one block of 8 warps, two of 4); per key block, K and V in shared memory and
 * dK/dV accumulators in registers, one pass over the query heads of the kv head's group and
 * their query tiles (Q, dO, lse, D double-buffered):
 *   S^T = K_w Q^T, dP^T = V_w dO^T, P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - D), all in
 *   registers; dV += P^T dO, dK += dS^T Q (fp32, registers);
 *   dS^T to shared memory as two bf16 parts (hi = bf16(dS), lo = bf16(dS - hi): rows of dS sum
 *   to about 0, one rounding alone loses 2-3x the output's own rounding error when keys share a
 *   large common part), into the stage's Q and dO where they fit (dead by then), else a tile
 *   of their own; then each warp takes 16 query rows (and half the columns with 8 warps) and
 *   adds dS K over the block's keys, 64 keys at a time (hi, then lo), onto those rows of split
 *   s's fp32 dQ slice (the workspace): a plain read-modify-write that no other block touches,
 *   in the order of the loops, so 4 and 8 warps add the same terms in the same order; a tile
 *   that no earlier block of the split reached is written instead (the slices are not zeroed).
 * dK and dV are written once per key block; then fa_dq_sum_kernel: dq = bf16(scale * ((slice 0
 * + slice 1) + ...)) in split order over the slices that wrote the row (fa_split_reaches); with
 * one split, the block of a tile's own keys is the last to reach it and writes its dq itself. Cost: 6 tile products per (query, key) tile pair (S, dP,
 * dV, dK, and dQ's twice, hi and lo) against FlashAttention-2's 5 and the 8 of a separate dQ
 * kernel (S and dP twice); the price of determinism without atomics is the dQ slices' traffic
 * (a read and a write of 64 rows of fp32 per tile pair, where FA2 has atomicAdd's) and their
 * memory: S <= 4 slices of B T NH hs floats.
 *
 * Precision: as the CUDA-core path up to the bf16 rounding of P (and dS) before they enter a
 * product, and the products' accumulation order; q, k, v, dout are bf16 already, their products
 * exact in fp32. Outputs stay within the bf16 bound (1e-2 relative), lse within fp32's.
 *
 * Global copies of whole rows use cp.async when every pointer is 16-byte aligned (row strides
 * and head offsets are multiples of hs, itself of 32), element by element otherwise; both move
 * the same values, so the result's bits never depend on the buffers' addresses (recompute stays
 * bit-identical).
 *
 * Shared memory per block (KiB; forward / backward):   4 warps      8 warps
 *   hs 64                                             40 / 49      48 / 97
 *   hs 96                                             65 / 79      78 / 137
 *   hs 128                                            80 / 97      96 / 129
 * so sm_86/89 (99 KiB) run every head size with 4 warps, sm_80 (163 KiB) and sm_90 (227 KiB) with
 * 8. Registers (ptxas, CUDA 13, sm_80 / sm_90): forward 128-204 (Q fragments held; hs 64 spills
 * 8-16 bytes), backward 255 with 0-68 bytes of spills (dK and dV accumulators alone are
 * hs / 2 registers each, dS^T 32 more across the barrier before it goes to shared memory; dQ's
 * product holds 32 columns of accumulators at a time). */
#include "cuda_common.cuh"

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "mma_ptx.cuh"

typedef __nv_bfloat16 bf16;

#define FA_TILE 64 /* rows of a streamed tile (keys in the forward, queries in the backward) */
#define FA_UNIT BACKEND_ATT_DQ_KEYS /* keys of a backward split's unit (backend.h): 1 or 2 blocks */
/* the unit round r deals to split s of S: a snake, so that each split's causal work balances
 * (the top of the file; backend.h states it) */
__device__ __forceinline__ int fa_unit(int s, int r, int S) { return r * S + (r & 1 ? S - 1 - s : s); }
static_assert(FA_UNIT % 128 == 0, "a backward unit holds whole 4- and 8-warp key blocks");

/* ------------------------------------------------------------------ shared-memory tiles */

template <int HS> struct FaRow {
    static constexpr bool SWZ = HS % 64 == 0;     /* swizzled rows; else padded */
    static constexpr int LD = SWZ ? HS : HS + 8;  /* row stride in elements */
};

/* element offset of column c (a multiple of 8) of row r in a tile */
template <int HS> __device__ __forceinline__ int fa_off(int r, int c) {
    if (FaRow<HS>::SWZ) {
        int ch = c >> 3;
        ch = (ch & ~7) | ((ch ^ r) & 7);
        return r * FaRow<HS>::LD + ch * 8;
    }
    return r * FaRow<HS>::LD + c;
}

template <int HS> constexpr size_t fa_tile_bytes(int rows) { return (size_t)rows * FaRow<HS>::LD * sizeof(bf16); }

/* forward: Q (16 W rows), then 2 stages of K, V (64 rows each) */
template <int HS, int W> struct FaFwd {
    static constexpr size_t Q = 0;
    static constexpr size_t KV = Q + fa_tile_bytes<HS>(16 * W);
    static constexpr size_t STAGE = 2 * fa_tile_bytes<HS>(FA_TILE);
    static constexpr size_t BYTES = KV + 2 * STAGE;
};
/* the backward: K, V (16 W rows), then 2 stages of Q, dO (64 rows), lse and D (64 floats), then
 * dS^T hi and lo (16 W rows of 64 bf16, swizzled as hs 64): in the current stage's Q and dO,
 * dead by then, where they fit (4 warps; 8 warps at hs 128), else after the stages */
template <int HS, int W> struct FaBwd {
    static constexpr size_t K = 0;
    static constexpr size_t V = K + fa_tile_bytes<HS>(16 * W);
    static constexpr size_t ST = V + fa_tile_bytes<HS>(16 * W);
    static constexpr size_t STAGE = 2 * fa_tile_bytes<HS>(FA_TILE) + 2 * FA_TILE * sizeof(float);
    static constexpr size_t DS_BYTES = 2 * fa_tile_bytes<64>(16 * W);
    static constexpr bool DS_IN_STAGE = DS_BYTES <= 2 * fa_tile_bytes<HS>(FA_TILE);
    static constexpr size_t DS = ST + 2 * STAGE; /* when not in the stage */
    static constexpr size_t BYTES = DS + (DS_IN_STAGE ? 0 : DS_BYTES);
};

/* rows [r0, r0 + ROWS) of one head's HS channels (global row stride `stride`) into a tile; rows
 * at or past T are zero. With vec: cp.async, complete at the caller's gtc_cp_async_wait. */
template <int HS, int ROWS, int NT>
__device__ __forceinline__ void fa_load_tile(bf16 *dst, const bf16 *__restrict__ src, size_t stride,
                                             int r0, int T, int vec) {
    constexpr int CH = HS / 8;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NT) {
        int r = idx / CH, c = (idx - r * CH) * 8;
        int t = r0 + r;
        bf16 *d = dst + fa_off<HS>(r, c);
        if (t >= T)
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        else if (vec)
            gtc_cp_async16(d, src + (size_t)t * stride + c);
        else
            for (int k = 0; k < 8; k++) d[k] = src[(size_t)t * stride + c + k];
    }
}

/* the A fragment of rows m0 .. m0 + 15, columns k0 .. k0 + 15 of a tile (row-major operand) */
template <int HS> __device__ __forceinline__ void fa_ld_a(uint32_t (&a)[4], const bf16 *tile, int m0, int k0, int lane) {
    int i = lane >> 3;
    gtc_ldmatrix_x4(a, tile + fa_off<HS>(m0 + (i & 1) * 8 + (lane & 7), k0 + (i >> 1) * 8));
}
/* B fragments of two n8 tiles, B[k][n] = X[n][k] for rows n0 .. n0 + 15 of X, k0 .. k0 + 15:
 * b[0], b[1] for rows n0 .. n0 + 7, b[2], b[3] for n0 + 8 .. n0 + 15 (S = Q K^T: X = K) */
template <int HS> __device__ __forceinline__ void fa_ld_bt(uint32_t (&b)[4], const bf16 *tile, int n0, int k0, int lane) {
    int i = lane >> 3;
    gtc_ldmatrix_x4(b, tile + fa_off<HS>(n0 + (i >> 1) * 8 + (lane & 7), k0 + (i & 1) * 8));
}
/* B fragments of two n8 tiles, B[k][n] = X[k][n] for rows k0 .. k0 + 15 of X, columns n0 .. n0 + 15
 * (O = P V: X = V): b[0], b[1] for columns n0 .. n0 + 7, b[2], b[3] for n0 + 8 .. n0 + 15 */
template <int HS> __device__ __forceinline__ void fa_ld_b(uint32_t (&b)[4], const bf16 *tile, int k0, int n0, int lane) {
    int i = lane >> 3;
    gtc_ldmatrix_x4_t(b, tile + fa_off<HS>(k0 + (i & 1) * 8 + (lane & 7), n0 + (i >> 1) * 8));
}

/* the A fragment of k16 chunk j from accumulator tiles 2j, 2j+1 (values times mul, bf16) */
__device__ __forceinline__ void fa_acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = gtc_pack_bf16x2(c0[0], c0[1]);
    a[1] = gtc_pack_bf16x2(c0[2], c0[3]);
    a[2] = gtc_pack_bf16x2(c1[0], c1[1]);
    a[3] = gtc_pack_bf16x2(c1[2], c1[3]);
}

/* C += A Y^T for the A fragments a of chunk kc (16 rows x 16 columns) against the 64 rows of Y */
template <int HS>
__device__ __forceinline__ void fa_scores_chunk(float (&s)[8][4], const uint32_t (&a)[4], int kc, const bf16 *Y, int lane) {
    #pragma unroll
    for (int np = 0; np < 4; np++) {
        uint32_t b[4];
        fa_ld_bt<HS>(b, Y, np * 16, kc * 16, lane);
        gtc_mma_bf16_16816(s[2 * np], a, b[0], b[1]);
        gtc_mma_bf16_16816(s[2 * np + 1], a, b[2], b[3]);
    }
}
__device__ __forceinline__ void fa_zero(float (&s)[8][4]) {
    #pragma unroll
    for (int n = 0; n < 8; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = 0.0f;
}
/* C = X_w Y^T for the warp's 16 rows of X (tile rows xr0 ..) against the 64 rows of Y, X's
 * fragments read from shared memory chunk by chunk (the backward, whose registers hold dK/dV or dQ) */
template <int HS>
__device__ __forceinline__ void fa_scores(float (&s)[8][4], const bf16 *X, int xr0, const bf16 *Y, int lane) {
    fa_zero(s);
    #pragma unroll
    for (int kc = 0; kc < HS / 16; kc++) {
        uint32_t a[4];
        fa_ld_a<HS>(a, X, xr0, kc * 16, lane);
        fa_scores_chunk<HS>(s, a, kc, Y, lane);
    }
}

/* acc[HS/8] += A_frags(16 x 64) Y (Y: 64 x HS tile, row-major [k][n]) */
template <int HS>
__device__ __forceinline__ void fa_acc_av(float (&acc)[HS / 8][4], const uint32_t (&a)[4][4], const bf16 *Y, int lane) {
    #pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        #pragma unroll
        for (int dp = 0; dp < HS / 16; dp++) {
            uint32_t b[4];
            fa_ld_b<HS>(b, Y, kc * 16, dp * 16, lane);
            gtc_mma_bf16_16816(acc[2 * dp], a[kc], b[0], b[1]);
            gtc_mma_bf16_16816(acc[2 * dp + 1], a[kc], b[2], b[3]);
        }
    }
}

/* rows row0 + g and row0 + g + 8 (those < T) of a 16 x HS accumulator, times mul, as bf16 to
 * base + row * stride */
template <int HS>
__device__ __forceinline__ void fa_store_rows(bf16 *base, size_t stride, int row0, int T,
                                              const float (&acc)[HS / 8][4], const float (&mul)[2],
                                              int vec, int lane) {
    const int g = lane >> 2, tq = lane & 3;
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int t = row0 + g + 8 * hr;
        if (t >= T) continue;
        bf16 *row = base + (size_t)t * stride + 2 * tq;
        #pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            float x = acc[n][2 * hr] * mul[hr], y = acc[n][2 * hr + 1] * mul[hr];
            if (vec) {
                *reinterpret_cast<uint32_t *>(row + n * 8) = gtc_pack_bf16x2(x, y);
            } else {
                row[n * 8] = __float2bfloat16_rn(x);
                row[n * 8 + 1] = __float2bfloat16_rn(y);
            }
        }
    }
}

/* ------------------------------------------------------------------ forward */

template <int HS, int W>
__global__ void __launch_bounds__(W * 32)
    fa_forward_kernel(bf16 *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ qkv,
                      int T, int NH, int NKV, int window, int BH, int ntiles, float scale, int vec,
                      const int *__restrict__ pos) {
    typedef FaFwd<HS, W> L;
    constexpr int NT = W * 32, BR = 16 * W, ND = HS / 8;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(fa_smem + L::Q);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

    const int bh = (int)(blockIdx.x % (unsigned)BH);
    const int qt = ntiles - 1 - (int)(blockIdx.x / (unsigned)BH); /* latest (heaviest) tiles first */
    const int h = bh % NH, bb = bh / NH, q0 = qt * BR;
    const int kvh = gtc_att_kv_head(h, NH, NKV);
    const size_t C = (size_t)NH * HS, C3 = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * HS;
    const bf16 *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)kvh * HS;
    const bf16 *vbase = kbase + (size_t)NKV * HS;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr;

    const int q_last = min(q0 + BR, T) - 1;
    const int kstart = gtc_att_first_key_pos(q0, window, posr) / FA_TILE * FA_TILE;
    fa_load_tile<HS, BR, NT>(Qs, qbase, C3, q0, T, vec);
    {
        bf16 *Ks = reinterpret_cast<bf16 *>(fa_smem + L::KV);
        fa_load_tile<HS, FA_TILE, NT>(Ks, kbase, C3, kstart, T, vec);
        fa_load_tile<HS, FA_TILE, NT>(Ks + FA_TILE * FaRow<HS>::LD, vbase, C3, kstart, T, vec);
        gtc_cp_async_commit();
    }

    const int w0 = q0 + warp * 16;            /* the warp's first row */
    const bool active = w0 < T;               /* warp-uniform */
    const int tlim = min(w0 + 15, T - 1);     /* last key a valid row of the warp sees */
    const int wlo = gtc_att_first_key_pos(active ? w0 : 0, window, posr);
    int jmax[2], jmin[2]; /* rows w0 + g and w0 + g + 8 see keys jmin .. jmax (rows past T: filler) */
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        jmax[hr] = min(w0 + g + 8 * hr, T - 1);
        jmin[hr] = gtc_att_first_key_pos(jmax[hr], window, posr);
    }

    float o[ND][4];
    #pragma unroll
    for (int n = 0; n < ND; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* l: this lane's columns only */
    uint32_t qf[HS / 16][4]; /* the warp's 16 query rows as A fragments, loaded once */
    bool q_in_regs = false;  /* warp-uniform */

    int stage = 0;
    for (int k0 = kstart; k0 <= q_last; k0 += FA_TILE, stage ^= 1) {
        const bf16 *Ks = reinterpret_cast<const bf16 *>(fa_smem + L::KV + stage * L::STAGE);
        const bf16 *Vs = Ks + FA_TILE * FaRow<HS>::LD;
        if (k0 + FA_TILE <= q_last) { /* prefetch the next tile into the other stage */
            bf16 *Kn = reinterpret_cast<bf16 *>(fa_smem + L::KV + (stage ^ 1) * L::STAGE);
            fa_load_tile<HS, FA_TILE, NT>(Kn, kbase, C3, k0 + FA_TILE, T, vec);
            fa_load_tile<HS, FA_TILE, NT>(Kn + FA_TILE * FaRow<HS>::LD, vbase, C3, k0 + FA_TILE, T, vec);
            gtc_cp_async_commit();
            gtc_cp_async_wait<1>(); /* this tile (and Q) landed; the next may be in flight */
        } else {
            gtc_cp_async_wait<0>();
        }
        __syncthreads(); /* every thread's copies of this tile (and of Q, the first time) are visible */
        if (active && !q_in_regs) {
            #pragma unroll
            for (int kc = 0; kc < HS / 16; kc++) fa_ld_a<HS>(qf[kc], Qs, warp * 16, kc * 16, lane);
            q_in_regs = true;
        }
        if (active && k0 + FA_TILE > wlo && k0 <= tlim) { /* warp-uniform: some key of the warp here */
            float s[8][4];
            fa_zero(s);
            #pragma unroll
            for (int kc = 0; kc < HS / 16; kc++) fa_scores_chunk<HS>(s, qf[kc], kc, Ks, lane); /* S = Q_w K^T */
            /* online softmax: element e of tile n is row w0 + g + 8 (e >> 1), key k0 + 8 n + 2 tq + (e & 1) */
            float mt[2] = {-INFINITY, -INFINITY};
            #pragma unroll
            for (int n = 0; n < 8; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = k0 + 8 * n + 2 * tq + (e & 1), hr = e >> 1;
                    bool ok = j >= jmin[hr] && j <= jmax[hr];
                    s[n][e] = ok ? s[n][e] * scale : -INFINITY;
                    mt[hr] = fmaxf(mt[hr], s[n][e]);
                }
            float alpha[2];
            #pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 1));
                mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 2));
                float mnew = fmaxf(m[hr], mt[hr]);
                /* a row that has seen no key yet (mnew = -inf) keeps alpha 1 and P 0 */
                alpha[hr] = mnew == -INFINITY ? 1.0f : expf(m[hr] - mnew);
                m[hr] = mnew;
                l[hr] *= alpha[hr];
            }
            #pragma unroll
            for (int n = 0; n < 8; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    int hr = e >> 1;
                    float p = s[n][e] == -INFINITY ? 0.0f : expf(s[n][e] - m[hr]);
                    s[n][e] = p;
                    l[hr] += p;
                }
            #pragma unroll
            for (int n = 0; n < ND; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) o[n][e] *= alpha[e >> 1];
            uint32_t pa[4][4];
            #pragma unroll
            for (int kc = 0; kc < 4; kc++) fa_acc_to_a(pa[kc], s[2 * kc], s[2 * kc + 1]);
            fa_acc_av<HS>(o, pa, Vs, lane);
        }
        __syncthreads(); /* every warp is done with this stage before it is refilled */
    }

    if (!active) return;
    float inv[2];
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
        inv[hr] = 1.0f / l[hr];
        int t = w0 + g + 8 * hr;
        if (tq == 0 && t < T) lse[((size_t)bb * NH + h) * T + t] = m[hr] + logf(l[hr]);
    }
    fa_store_rows<HS>(out + (size_t)bb * T * C + (size_t)h * HS, C, w0, T, o, inv, vec, lane);
}

/* ------------------------------------------------------------------ backward, one pass */

/* the A fragment of rows m0 .. m0 + 15, columns k0 .. k0 + 15 of X^T, X a 64-column tile stored
 * [k][m] (dQ = dS K with dS^T in shared memory: X = dS^T, rows keys, columns queries) */
__device__ __forceinline__ void fa_ld_at(uint32_t (&a)[4], const bf16 *tile, int k0, int m0, int lane) {
    int i = lane >> 3;
    gtc_ldmatrix_x4_t(a, tile + fa_off<64>(k0 + (i >> 1) * 8 + (lane & 7), m0 + (i & 1) * 8));
}

template <int HS, int W>
__global__ void __launch_bounds__(W * 32)
    fa_bwd_kernel(bf16 *__restrict__ dqkv, float *__restrict__ dqpart, const bf16 *__restrict__ dout,
                  const bf16 *__restrict__ qkv, const float *__restrict__ lse, const float *__restrict__ D,
                  int T, int NH, int NKV, int window, int BKV, int S, size_t slice, float scale, int vec,
                  const int *__restrict__ pos) {
    typedef FaBwd<HS, W> L;
    constexpr int NT = W * 32, BK = 16 * W, ND = HS / 8;
    constexpr int NC = HS * 4 / W;               /* dQ columns of a warp (16 rows of a query tile) */
    constexpr int DQC = NC % 32 == 0 ? 32 : NC;  /* of them in registers at a time */
    extern __shared__ __align__(128) unsigned char fa_smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(fa_smem + L::K);
    bf16 *Vs = reinterpret_cast<bf16 *>(fa_smem + L::V);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

    const int bg = (int)(blockIdx.x % (unsigned)BKV), split = (int)(blockIdx.x / (unsigned)BKV);
    const int kvh = bg % NKV, bb = bg / NKV, G = NH / NKV;
    const size_t C = (size_t)NH * HS, C3 = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)kvh * HS;
    const bf16 *vbase = kbase + (size_t)NKV * HS;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr;
    float *dqs = dqpart + (size_t)split * slice + (size_t)bb * T * C; /* this split's slice, batch bb */
    const int rg = warp & 3, c0 = (warp >> 2) * NC; /* the warp's dQ rows 16 rg .., columns c0 .. */

    /* the split's key units (FA_UNIT keys: one a round, fa_unit), each in blocks of BK keys, in order */
    for (int r = 0; r * S * FA_UNIT < T; r++) {
        const int u = fa_unit(split, r, S);
        if (u * FA_UNIT >= T) continue; /* the last round is short of this split's unit */
        for (int k0 = u * FA_UNIT; k0 < min((u + 1) * FA_UNIT, T); k0 += BK) {
            /* query tiles [k0, q_end) of each head of the group see the block's keys */
            const int q_end = gtc_att_query_end(min(k0 + BK, T) - 1, window, T);
            const int nq = (q_end - k0 + FA_TILE - 1) / FA_TILE, niter = G * nq;
            /* the split's blocks before this one reached the query tiles below prev_end (their
             * ranges [k0', q_end') grow with k0'): a tile at or past it is new to the slice here,
             * its rows written, not added to (the slices are not zeroed) */
            const int prev_end = k0 > u * FA_UNIT ? gtc_att_query_end(k0 - 1, window, T)
                                 : r > 0 ? gtc_att_query_end((fa_unit(split, r - 1, S) + 1) * FA_UNIT - 1, window, T)
                                         : 0;

            auto load_stage = [&](int it) {
                int hq = kvh * G + it / nq, q0 = k0 + (it % nq) * FA_TILE;
                unsigned char *st = fa_smem + L::ST + (it & 1) * L::STAGE;
                bf16 *Qn = reinterpret_cast<bf16 *>(st), *dOn = Qn + FA_TILE * FaRow<HS>::LD;
                float *Ln = reinterpret_cast<float *>(dOn + FA_TILE * FaRow<HS>::LD), *Dn = Ln + FA_TILE;
                fa_load_tile<HS, FA_TILE, NT>(Qn, qkv + (size_t)bb * T * C3 + (size_t)hq * HS, C3, q0, T, vec);
                fa_load_tile<HS, FA_TILE, NT>(dOn, dout + (size_t)bb * T * C + (size_t)hq * HS, C, q0, T, vec);
                const float *lrow = lse + ((size_t)bb * NH + hq) * T, *drow = D + ((size_t)bb * NH + hq) * T;
                for (int i = threadIdx.x; i < FA_TILE; i += NT) {
                    int t = q0 + i;
                    Ln[i] = t < T ? lrow[t] : 0.0f;
                    Dn[i] = t < T ? drow[t] : 0.0f;
                }
            };

            /* the previous block's last iteration ended in a barrier: K, V are free */
            fa_load_tile<HS, BK, NT>(Ks, kbase, C3, k0, T, vec);
            fa_load_tile<HS, BK, NT>(Vs, vbase, C3, k0, T, vec);
            load_stage(0);
            gtc_cp_async_commit();

            const int w0 = k0 + warp * 16;  /* the warp's first key */
            const bool active = w0 < T;     /* warp-uniform */
            const int wq_end = gtc_att_query_end(min(w0 + 15, T - 1), window, T);
            int jk[2], jq_end[2]; /* keys w0 + g (+ 8): queries [jk, jq_end) see them */
            #pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                jk[hr] = w0 + g + 8 * hr;
                jq_end[hr] = gtc_att_query_end(jk[hr], window, T);
            }

            float dk[ND][4], dv[ND][4];
            #pragma unroll
            for (int n = 0; n < ND; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

            for (int it = 0; it < niter; it++) {
                const int hq = kvh * G + it / nq, q0 = k0 + (it % nq) * FA_TILE;
                if (it + 1 < niter) {
                    load_stage(it + 1);
                    gtc_cp_async_commit();
                    gtc_cp_async_wait<1>();
                } else {
                    gtc_cp_async_wait<0>();
                }
                __syncthreads();
                unsigned char *st = fa_smem + L::ST + (it & 1) * L::STAGE;
                /* warp-uniform: some query of the tile sees a key of the warp */
                const bool on = active && q0 < wq_end && q0 + FA_TILE > w0;
                float dp[8][4]; /* dS^T: element e of tile n is key jk[e >> 1], query q0 + 8 n + 2 tq + (e & 1) */
                fa_zero(dp);
                if (on) {
                    const bf16 *Qs = reinterpret_cast<const bf16 *>(st), *dOs = Qs + FA_TILE * FaRow<HS>::LD;
                    const float *Ls = reinterpret_cast<const float *>(dOs + FA_TILE * FaRow<HS>::LD), *Ds = Ls + FA_TILE;
                    float s[8][4];
                    fa_scores<HS>(s, Ks, warp * 16, Qs, lane);  /* S^T = K_w Q^T */
                    fa_scores<HS>(dp, Vs, warp * 16, dOs, lane); /* dP^T = V_w dO^T */
                    #pragma unroll
                    for (int n = 0; n < 8; n++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int c = 8 * n + 2 * tq + (e & 1), t = q0 + c, hr = e >> 1;
                            float p = 0.0f, ds = 0.0f;
                            if (t >= jk[hr] && t < jq_end[hr] && (!posr || t - posr[t] <= jk[hr])) {
                                p = expf(s[n][e] * scale - Ls[c]);
                                ds = p * (dp[n][e] - Ds[c]);
                            }
                            s[n][e] = p;
                            dp[n][e] = ds;
                        }
                    uint32_t pa[4][4];
                    #pragma unroll
                    for (int kc = 0; kc < 4; kc++) fa_acc_to_a(pa[kc], s[2 * kc], s[2 * kc + 1]);
                    fa_acc_av<HS>(dv, pa, dOs, lane); /* dV += P^T dO */
                    #pragma unroll
                    for (int kc = 0; kc < 4; kc++) fa_acc_to_a(pa[kc], dp[2 * kc], dp[2 * kc + 1]);
                    fa_acc_av<HS>(dk, pa, Qs, lane);  /* dK += dS^T Q */
                }
                __syncthreads(); /* every warp is done with this stage's Q and dO (dS may overwrite them) */
                /* dS^T of the block's keys into shared memory as hi = bf16(dS), lo = bf16(dS - hi):
                 * rows of dS sum to about 0, one rounding alone loses 2-3x the output's own rounding
                 * error when keys share a large common part */
                bf16 *dsh = reinterpret_cast<bf16 *>(L::DS_IN_STAGE ? st : fa_smem + L::DS), *dsl = dsh + BK * 64;
                #pragma unroll
                for (int n = 0; n < 8; n++)
                    #pragma unroll
                    for (int hr = 0; hr < 2; hr++) {
                        const int r = warp * 16 + g + 8 * hr, o = fa_off<64>(r, 8 * n) + 2 * tq;
                        float x = dp[n][2 * hr], y = dp[n][2 * hr + 1];
                        float xh = __bfloat162float(__float2bfloat16_rn(x)), yh = __bfloat162float(__float2bfloat16_rn(y));
                        *reinterpret_cast<uint32_t *>(dsh + o) = gtc_pack_bf16x2(xh, yh);
                        *reinterpret_cast<uint32_t *>(dsl + o) = gtc_pack_bf16x2(x - xh, y - yh);
                    }
                __syncthreads();
                /* dQ_s[rows q0 + 16 rg ..] += dS K over the block's keys, 64 keys at a time (hi then
                 * lo), onto the slice's values: the same order of additions for W = 4 and 8 */
                const int r0 = q0 + 16 * rg;
                const bool fresh = q0 >= prev_end;
                /* one split: no later block reaches the tile of the block's own keys, whose rows
                 * are then final: dq = bf16(scale * sum) straight into dqkv (no sum kernel) */
                const bool last = S == 1 && q0 < k0 + BK;
                if (r0 < T) {
                    float *dqh = dqs + (size_t)hq * HS;
                    #pragma unroll
                    for (int cc = 0; cc < NC; cc += DQC) {
                        float acc[DQC / 8][4];
                        #pragma unroll
                        for (int n = 0; n < DQC / 8; n++)
                            #pragma unroll
                            for (int e = 0; e < 4; e++) {
                                int t = r0 + g + 8 * (e >> 1), c = c0 + cc + 8 * n + 2 * tq + (e & 1);
                                acc[n][e] = t < T && !fresh ? dqh[(size_t)t * C + c] : 0.0f;
                            }
                        #pragma unroll
                        for (int kh = 0; kh < BK; kh += 64)
                            #pragma unroll
                            for (int part = 0; part < 2; part++) {
                                const bf16 *X = part ? dsl : dsh;
                                #pragma unroll
                                for (int kc = 0; kc < 4; kc++) {
                                    uint32_t a[4];
                                    fa_ld_at(a, X, kh + 16 * kc, 16 * rg, lane);
                                    #pragma unroll
                                    for (int dpi = 0; dpi < DQC / 16; dpi++) {
                                        uint32_t b[4];
                                        fa_ld_b<HS>(b, Ks, kh + 16 * kc, c0 + cc + 16 * dpi, lane);
                                        gtc_mma_bf16_16816(acc[2 * dpi], a, b[0], b[1]);
                                        gtc_mma_bf16_16816(acc[2 * dpi + 1], a, b[2], b[3]);
                                    }
                                }
                            }
                        #pragma unroll
                        for (int n = 0; n < DQC / 8; n++)
                            #pragma unroll
                            for (int hr = 0; hr < 2; hr++) {
                                const int t = r0 + g + 8 * hr, c = c0 + cc + 8 * n + 2 * tq;
                                if (t >= T) continue;
                                if (!last) {
                                    dqh[(size_t)t * C + c] = acc[n][2 * hr];
                                    dqh[(size_t)t * C + c + 1] = acc[n][2 * hr + 1];
                                    continue;
                                }
                                bf16 *d = dqkv + ((size_t)bb * T + t) * C3 + (size_t)hq * HS + c;
                                const float x = acc[n][2 * hr] * scale, y = acc[n][2 * hr + 1] * scale;
                                if (vec) {
                                    *reinterpret_cast<uint32_t *>(d) = gtc_pack_bf16x2(x, y);
                                } else {
                                    d[0] = __float2bfloat16_rn(x);
                                    d[1] = __float2bfloat16_rn(y);
                                }
                            }
                    }
                }
                __syncthreads(); /* the stage and dS are free for the next iteration's copies */
            }

            if (active) {
                bf16 *dkbase = dqkv + (size_t)bb * T * C3 + C + (size_t)kvh * HS;
                const float ks[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
                fa_store_rows<HS>(dkbase, C3, w0, T, dk, ks, vec, lane);
                fa_store_rows<HS>(dkbase + (size_t)NKV * HS, C3, w0, T, dv, one, vec, lane);
            }
        }
    }
}

/* whether split s (of S) wrote the rows of the query tile at q0 (a multiple of FA_TILE): its
 * last unit at or before q0 reaches it (the units' query ranges [128 u, q_end) grow with u): the
 * split's unit of q0's round, or else of the round before */
__device__ __forceinline__ bool fa_split_reaches(int s, int S, int q0, int window, int T) {
    const int ulast = q0 / FA_UNIT, r = ulast / S;
    int u = fa_unit(s, r, S);
    if (u > ulast) {
        if (r == 0) return false;
        u = fa_unit(s, r - 1, S);
    }
    return q0 < gtc_att_query_end(min((u + 1) * FA_UNIT, T) - 1, window, T);
}

/* dq (bf16, into dqkv) = scale * the sum of the slices that wrote the row, in s order (a slice
 * that did not holds stale values; one that wrote it with no key of its own seen holds +0) */
__global__ void fa_dq_sum_kernel(bf16 *__restrict__ dqkv, const float *__restrict__ dqpart, size_t slice,
                                 int S, int T, int window, size_t C, size_t C3, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < slice; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / C;
        const int q0 = (int)(row % (size_t)T) / FA_TILE * FA_TILE;
        float x = 0.0f;
        bool any = false;
        for (int s = 0; s < S; s++)
            if (fa_split_reaches(s, S, q0, window, T)) {
                float v = dqpart[(size_t)s * slice + i];
                x = any ? x + v : v;
                any = true;
            }
        dqkv[row * C3 + (i - row * C)] = __float2bfloat16_rn(x * scale);
    }
}

/* ------------------------------------------------------------------ host side */

/* im->fa_warps[i] for head size 64, 96, 128 (i = 0, 1, 2): 8 (large tiles), 4, or 0 (this
 * device cannot run them: the CUDA-core path) */
static int fa_slot(int hs) { return hs == 64 ? 0 : hs == 96 ? 1 : hs == 128 ? 2 : -1; }

bool gtc_attention_tc_supported(Backend *b, int hs) {
    int i = fa_slot(hs);
    return i >= 0 && gtc_impl(b)->fa_warps[i] > 0;
}

/* the two kernels of one (head size, warps) and their shared-memory bytes */
struct FaKernels {
    const void *fn[2];
    size_t bytes[2];
};
template <int HS, int W> static FaKernels fa_kernels() {
    FaKernels k = {{(const void *)fa_forward_kernel<HS, W>, (const void *)fa_bwd_kernel<HS, W>},
                   {FaFwd<HS, W>::BYTES, FaBwd<HS, W>::BYTES}};
    return k;
}

int gtc_attention_tc_init(CudaImpl *im, GtError *err) {
    /* per head size: the large variant (8 warps) where the device's opt-in shared memory holds all
     * two kernels (sm_80 A100 163 KiB, sm_90 227 KiB), else 4 warps (<= 97 KiB: sm_86/89's 99 KiB
     * hold every head size), else none; mma.sync bf16 needs sm_80 */
    const FaKernels ks[3][2] = {{fa_kernels<64, 4>(), fa_kernels<64, 8>()},
                                {fa_kernels<96, 4>(), fa_kernels<96, 8>()},
                                {fa_kernels<128, 4>(), fa_kernels<128, 8>()}};
    int dev = 0, optin = 0, major = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gt_error(err, GT_EXIT_FAILURE, "%s:%d: attention: device attributes: %s", __FILE__,
                        __LINE__, cudaGetErrorString(e));
    }
    for (int i = 0; i < 3; i++) {
        im->fa_warps[i] = 0;
        if (major < 8) continue;
        for (int v = 1; v >= 0; v--) {
            const FaKernels &k = ks[i][v];
            if (k.bytes[0] > (size_t)optin || k.bytes[1] > (size_t)optin) continue;
            for (int f = 0; f < 2; f++)
                if (gtc_set_smem_limit(k.fn[f], k.bytes[f], "attention (tensor cores)", err)) return -1;
            im->fa_warps[i] = v ? 8 : 4;
            break;
        }
    }
    return 0;
}

static bool fa_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* blocks of the 1-D grid: ntiles * B * NH (exit on overflow: > 2^31 - 1 blocks) */
static unsigned fa_grid(int ntiles, int B, int NH) {
    long long n = (long long)ntiles * B * NH;
    if (n > INT_MAX || (long long)B * NH > INT_MAX) {
        fprintf(stderr, "%s:%d: attention: grid of %lld blocks too large (B=%d NH=%d)\n", __FILE__,
                __LINE__, n, B, NH);
        exit(GT_EXIT_FAILURE);
    }
    return (unsigned)n;
}

template <int HS, int W>
static void fa_forward_t(Backend *b, gtc_bf16 *out, float *lse, const gtc_bf16 *qkv, int B, int T,
                         int NH, int NKV, int window, const int *pos) {
    float scale = 1.0f / sqrtf((float)HS);
    int ntiles = (T + 16 * W - 1) / (16 * W);
    int vec = fa_aligned16(out) && fa_aligned16(qkv);
    auto *fa_forward = fa_forward_kernel<HS, W>; /* one macro argument */
    GTC_LAUNCH(fa_forward, fa_grid(ntiles, B, NH), W * 32, (FaFwd<HS, W>::BYTES),
               gtc_stream(b), out, lse, qkv, T, NH, NKV, window, B * NH, ntiles, scale, vec, pos);
    CUDA_CHECK_LAUNCH();
}

template <int HS, int W>
static void fa_backward_t(Backend *b, gtc_bf16 *dqkv, float *workspace, const gtc_bf16 *dout,
                          const gtc_bf16 *qkv, const float *lse, int B, int T, int NH, int NKV,
                          int window, const int *pos) {
    float scale = 1.0f / sqrtf((float)HS);
    int vec = fa_aligned16(dqkv) && fa_aligned16(dout) && fa_aligned16(qkv);
    cudaStream_t st = gtc_stream(b);
    /* the workspace (backend.h): D, then S dQ slices (each row written before it is added to) */
    const int S = backend_attention_dq_splits(B, T, NKV);
    const size_t slice = (size_t)B * T * NH * HS;
    float *dqpart = workspace + backend_attention_rowsum_floats(B, T, NH);
    auto *fa_bwd = fa_bwd_kernel<HS, W>;
    GTC_LAUNCH(fa_bwd, fa_grid(S, B, NKV), W * 32, (FaBwd<HS, W>::BYTES), st, dqkv, dqpart, dout,
               qkv, lse, workspace, T, NH, NKV, window, B * NKV, S, slice, scale, vec, pos);
    CUDA_CHECK_LAUNCH();
    if (S == 1) return; /* fa_bwd wrote dq */
    GTC_LAUNCH(fa_dq_sum_kernel, gtc_blocks(slice, GTC_THREADS), GTC_THREADS, 0, st, dqkv, dqpart, slice, S,
               T, window, (size_t)NH * HS, (size_t)(NH + 2 * NKV) * HS, scale);
    CUDA_CHECK_LAUNCH();
}

/* the variant init chose for hd (a caller that did not ask gtc_attention_tc_supported: exit) */
static int fa_warps_for(Backend *b, int hd) {
    int i = fa_slot(hd);
    if (i < 0 || gtc_impl(b)->fa_warps[i] == 0) {
        fprintf(stderr, "%s:%d: attention: no tensor-core kernels for head size %d here\n", __FILE__, __LINE__, hd);
        exit(GT_EXIT_FAILURE);
    }
    return gtc_impl(b)->fa_warps[i];
}

/* (HS, W) from the head size and the variant init chose */
#define FA_DISPATCH(fn, hd, w, ...)                                                                \
    do {                                                                                           \
        if (hd == 64) (w == 8 ? fn<64, 8> : fn<64, 4>)(__VA_ARGS__);                               \
        else if (hd == 96) (w == 8 ? fn<96, 8> : fn<96, 4>)(__VA_ARGS__);                          \
        else (w == 8 ? fn<128, 8> : fn<128, 4>)(__VA_ARGS__);                                      \
    } while (0)

void gtc_attention_tc_forward(Backend *b, gtc_bf16 *out, float *lse, const gtc_bf16 *qkv, int B,
                              int T, int NH, int NKV, int hd, int window, const int *pos) {
    if (B <= 0 || T <= 0) return;
    int w = fa_warps_for(b, hd);
    FA_DISPATCH(fa_forward_t, hd, w, b, out, lse, qkv, B, T, NH, NKV, window, pos);
}

void gtc_attention_tc_backward(Backend *b, gtc_bf16 *dqkv, float *workspace, const gtc_bf16 *dout,
                               const gtc_bf16 *qkv, const float *lse, int B, int T, int NH,
                               int NKV, int hd, int window, const int *pos) {
    if (B <= 0 || T <= 0) return;
    int w = fa_warps_for(b, hd);
    FA_DISPATCH(fa_backward_t, hd, w, b, dqkv, workspace, dout, qkv, lse, B, T, NH, NKV, window, pos);
}
