/* kernels_attention_tc.cu - causal self-attention on tensor cores: bf16 act dtype, head size 64
 * or 128 (kernels_attention.cu dispatches here; it keeps the CUDA-core kernels for fp32, for
 * other head sizes, and for hs 128 on devices without the ~121 KiB of shared memory per block its
 * kernels need, see gtc_attention_tc_init). Same contract as the ops (backend.h): qkv[B, T,
 * (NH + 2 NKV) hs] with NH query | NKV key | NKV value heads, query head h reading kv head
 * gtc_att_kv_head(h); out[B, T, NH hs], lse[B, NH, T] = log sum_j exp(scale * q_t . k_j) over the
 * keys t sees (j in [gtc_att_first_key(t, window), t]; with positions, packed rows, from
 * gtc_att_first_key_pos: t's own example only), scale = 1/sqrt(hs). Key tiles (and 16-key
 * blocks of a warp) wholly outside the band are skipped; partial ones are masked.
 *
 * Products use nvcuda::wmma 16x16x16 tiles, bf16 operands and fp32 accumulators (sm_80 and
 * newer). Tiles: 64 query rows x 64 keys per block step, 4 warps of 16 rows each; shared-memory
 * tiles are bf16 rows padded by 8 elements, fp32 score rows padded by 4 (wmma wants leading
 * dimensions that are multiples of 8 bf16 / 4 floats and 32-byte aligned pointers: every region
 * below is a multiple of 32 bytes). Rows at or past T are zero-filled on load and masked.
 *
 * Forward (one block per (query tile, head, batch)), per warp and key tile:
 *   S = Q_w K^T (fp32, shared), online softmax per row in fp32 (two lanes per row; max and sum in
 *   registers), P = exp(scale S - m) rounded to bf16 into shared memory, the fp32 row sum l taken
 *   from the unrounded P; the fp32 output accumulator O lives in shared memory: rows rescaled by
 *   exp(m_old - m_new) with plain loads/stores, then loaded into accumulator fragments, += P V,
 *   stored back. At the end out = O / l (rounded to bf16 once) and lse = m + log l.
 * Backward (no atomics; D = rowsum(dout * out) comes from kernels_attention.cu):
 *   dK/dV kernel, one block per (key tile, kv head) looping over the query heads of the kv head's
 *   group in order (h = g G .. g G + G - 1, G = NH / NKV) and, for each, over the query tiles that
 *   see the keys, accumulating in the same registers:
 *     S^T = K Q^T, dP^T = V dO^T (fp32), P^T = exp(scale S^T - lse) (0 where j > t),
 *     dS^T = P^T (dP^T - D); P^T and dS^T rounded to bf16; dV += P^T dO, dK += dS^T Q in fp32
 *     accumulator fragments (registers); dK scaled, both rounded once at the end.
 *   dQ kernel, one block per query tile looping over key tiles: S, dP, dS as above, dQ += dS K
 *   with dS split into two bf16 parts (hi = bf16(dS), lo = bf16(dS - hi), two products): each
 *   row of dS sums to about 0, so dQ = sum_j dS_j (k_j - kbar) cancels when the keys share a
 *   large common part: one bf16 rounding of dS alone gave 2-3x the output's own rounding error
 *   there (host simulation of the ramp test); with hi + lo it is back at that floor.
 * Every dq/dk/dv element is written once by one thread; every sum runs in an order fixed by the
 * code and the shapes, so results are deterministic. The grid is 1-D (tile index x B*NH, heavy
 * tiles first), so no grid dimension limit applies below 2^31 blocks.
 *
 * Precision: differs from the CUDA-core path (and the CPU) by the bf16 rounding of P (forward
 * and backward) and of dS (in dK; dQ takes it as hi + lo) before they enter a product, and by
 * the products' accumulation order. q, k, v, dout are bf16 values already: their products are
 * exact and accumulate in fp32, and lse is computed in fp32 from the unrounded scores and P. Act
 * outputs stay within the bf16 bound (1e-2 relative), lse within fp32's.
 *
 * Shared memory per block (dynamic): forward 70.25 KiB (hs 64) / 110.25 KiB (hs 128); each
 * backward kernel 88.5 KiB / 120.5 KiB. Registers (ptxas, CUDA 13, sm_90): forward 116 / 126,
 * dK/dV 128 / 254 (its dK and dV accumulators are 2 * hs/16 fragments), dQ 80 / 128; no spills
 * (sm_80 too).
 *
 * Global loads/stores use 16-byte vectors when every pointer is 16-byte aligned (strides are:
 * every row stride and head offset is a multiple of hs, itself of 64), element by element
 * otherwise; both move the same values, so the bits of the result never depend on the buffers'
 * addresses (recompute stays bit-identical). */
#include "cuda_common.cuh"

#include <limits.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

using namespace nvcuda;

#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_TILE 64  /* query rows per block tile = keys per key tile */
#define TC_WM 16    /* rows per warp */
#define TC_LDS 68   /* fp32 score/staging row stride (64 + 4) */
#define TC_LDP 72   /* bf16 probability row stride (64 + 8) */

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
/* B = X^T read from a row-major X (col_major view) */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

/* shared-memory layouts (byte offsets); all multiples of 32 */
template <int HS> struct TcFwd {
    static constexpr int LD = HS + 8;  /* bf16 tile row stride */
    static constexpr int LDO = HS + 4; /* fp32 output accumulator row stride */
    static constexpr size_t TILE = (size_t)TC_TILE * LD * sizeof(bf16);
    static constexpr size_t Q = 0;
    static constexpr size_t K = Q + TILE;
    static constexpr size_t V = K + TILE;
    /* per warp: S 16 x TC_LDS fp32, P 16 x TC_LDP bf16, O 16 x LDO fp32, ROW 16 fp32 */
    static constexpr size_t S = V + TILE;
    static constexpr size_t P = S + (size_t)TC_WARPS * TC_WM * TC_LDS * sizeof(float);
    static constexpr size_t O = P + (size_t)TC_WARPS * TC_WM * TC_LDP * sizeof(bf16);
    static constexpr size_t ROW = O + (size_t)TC_WARPS * TC_WM * LDO * sizeof(float);
    static constexpr size_t BYTES = ROW + (size_t)TC_WARPS * TC_WM * sizeof(float);
    static_assert(TILE % 32 == 0 && S % 32 == 0 && P % 32 == 0 && O % 32 == 0 && ROW % 32 == 0,
                  "wmma pointers must be 32-byte aligned");
};

/* dK/dV and dQ kernels: K, V, Q, dO tiles, per-warp fp32 S and dP, two per-warp bf16 buffers
 * (B1, B2: P^T and dS^T in dK/dV; dS's high and low bf16 parts in dQ), then the 64 lse and D
 * values of the current query tile (dK/dV) or of the block's queries (dQ) */
template <int HS> struct TcBwd {
    static constexpr int LD = HS + 8;
    static constexpr size_t TILE = (size_t)TC_TILE * LD * sizeof(bf16);
    static constexpr size_t K = 0;
    static constexpr size_t V = K + TILE;
    static constexpr size_t Q = V + TILE;
    static constexpr size_t DO = Q + TILE;
    static constexpr size_t S = DO + TILE;
    static constexpr size_t DP = S + (size_t)TC_WARPS * TC_WM * TC_LDS * sizeof(float);
    static constexpr size_t B1 = DP + (size_t)TC_WARPS * TC_WM * TC_LDS * sizeof(float);
    static constexpr size_t B2 = B1 + (size_t)TC_WARPS * TC_WM * TC_LDP * sizeof(bf16);
    static constexpr size_t LSE = B2 + (size_t)TC_WARPS * TC_WM * TC_LDP * sizeof(bf16);
    static constexpr size_t DD = LSE + (size_t)TC_TILE * sizeof(float);
    static constexpr size_t BYTES = DD + (size_t)TC_TILE * sizeof(float);
    static_assert(TILE % 32 == 0 && S % 32 == 0 && DP % 32 == 0 && B1 % 32 == 0 && B2 % 32 == 0,
                  "wmma pointers must be 32-byte aligned");
};

/* rows [r0, r0 + 64) of one head's HS channels (global row stride `stride` elements) into a
 * bf16 shared tile with row stride LD; rows at or past T are zero */
template <int HS, int LD>
__device__ __forceinline__ void tc_load_tile(bf16 *dst, const bf16 *__restrict__ src,
                                             size_t stride, int r0, int T, int vec) {
    if (vec) {
        constexpr int CH = HS / 8; /* 16-byte chunks per row */
        for (int idx = threadIdx.x; idx < TC_TILE * CH; idx += TC_THREADS) {
            int r = idx / CH, c = (idx - r * CH) * 8;
            int t = r0 + r;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (t < T) v = *reinterpret_cast<const uint4 *>(src + (size_t)t * stride + c);
            *reinterpret_cast<uint4 *>(dst + r * LD + c) = v;
        }
    } else {
        for (int idx = threadIdx.x; idx < TC_TILE * HS; idx += TC_THREADS) {
            int r = idx / HS, c = idx - r * HS;
            int t = r0 + r;
            dst[r * LD + c] =
                t < T ? src[(size_t)t * stride + c] : __ushort_as_bfloat16((unsigned short)0);
        }
    }
}

/* the 64 fp32 values vals[r0 .. r0 + 63] (0 at or past T) into dst */
__device__ __forceinline__ void tc_load_row_vals(float *dst, const float *__restrict__ vals, int r0,
                                                 int T) {
    for (int i = threadIdx.x; i < TC_TILE; i += TC_THREADS) {
        int t = r0 + i;
        dst[i] = t < T ? vals[t] : 0.0f;
    }
}

__device__ __forceinline__ uint32_t tc_pack2(float a, float b) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(b)) << 16);
}

/* dst[0..8) = src[0..8) * mul rounded to bf16 (one rounding each) */
__device__ __forceinline__ void tc_store8(bf16 *dst, const float *src, float mul, int vec) {
    if (vec) {
        uint4 v = make_uint4(tc_pack2(src[0] * mul, src[1] * mul),
                             tc_pack2(src[2] * mul, src[3] * mul),
                             tc_pack2(src[4] * mul, src[5] * mul),
                             tc_pack2(src[6] * mul, src[7] * mul));
        *reinterpret_cast<uint4 *>(dst) = v;
    } else {
        #pragma unroll
        for (int k = 0; k < 8; k++) dst[k] = __float2bfloat16_rn(src[k] * mul);
    }
}

/* a warp's 16 x HS accumulator fragments -> global rows row0 .. row0 + 15 (those < T) of
 * `base + row * stride`, times mul, rounded to bf16; stage: the warp's 16 x TC_LDS fp32 buffer */
template <int HS>
__device__ __forceinline__ void tc_store_frags(bf16 *base, size_t stride, int row0, int T,
                                               const FragC (&acc)[HS / 16], float *stage,
                                               float mul, int vec, int lane) {
    #pragma unroll
    for (int g = 0; g < HS / 64; g++) {
        #pragma unroll
        for (int q = 0; q < 4; q++)
            wmma::store_matrix_sync(stage + q * 16, acc[g * 4 + q], TC_LDS, wmma::mem_row_major);
        __syncwarp();
        #pragma unroll
        for (int pass = 0; pass < 4; pass++) {
            int idx = pass * 32 + lane; /* 16 rows x 8 chunks of 8 */
            int rr = idx >> 3, cc = (idx & 7) * 8;
            int t = row0 + rr;
            if (t < T)
                tc_store8(base + (size_t)t * stride + g * 64 + cc, stage + rr * TC_LDS + cc, mul,
                          vec);
        }
        __syncwarp();
    }
}

/* The two score-shaped products of a backward warp, for its 16 rows against the 16-row blocks
 * nb in [nb_lo, nb_hi) of the other side: S = X_w Y^T and DP = Z_w W^T (X_w, Z_w: the warp's 16 x HS
 * slices; Y, W: 64 x HS tiles; all bf16 row-major with stride LD), stored fp32 row-major with
 * stride TC_LDS. dK/dV takes (K_w, Q, V_w, dO), dQ takes (Q_w, K, dO_w, V). */
template <int HS, int LD>
__device__ __forceinline__ void tc_score_products(float *S, float *DP, const bf16 *Xw, const bf16 *Y,
                                                  const bf16 *Zw, const bf16 *W, int nb_lo, int nb_hi) {
    #pragma unroll
    for (int nb = 0; nb < 4; nb++) {
        if (nb >= nb_lo && nb < nb_hi) {
            FragC s, dp;
            wmma::fill_fragment(s, 0.0f);
            wmma::fill_fragment(dp, 0.0f);
            #pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                FragA a;
                FragBt bt;
                wmma::load_matrix_sync(a, Xw + kk * 16, LD);
                wmma::load_matrix_sync(bt, Y + nb * 16 * LD + kk * 16, LD);
                wmma::mma_sync(s, a, bt, s);
                wmma::load_matrix_sync(a, Zw + kk * 16, LD);
                wmma::load_matrix_sync(bt, W + nb * 16 * LD + kk * 16, LD);
                wmma::mma_sync(dp, a, bt, dp);
            }
            wmma::store_matrix_sync(S + nb * 16, s, TC_LDS, wmma::mem_row_major);
            wmma::store_matrix_sync(DP + nb * 16, dp, TC_LDS, wmma::mem_row_major);
        }
    }
}

/* ------------------------------------------------------------------ forward */

/* at least 2 blocks per SM (all the shared memory lets sm_80 hold): without a minimum, ptxas
 * held the hs-64 forward to 96 registers and spilled once the sliding window came in */
template <int HS>
__global__ void __launch_bounds__(TC_THREADS, 2)
    attention_tc_forward_kernel(bf16 *__restrict__ out, float *__restrict__ lse,
                                const bf16 *__restrict__ qkv, int T, int NH, int NKV, int window,
                                int BH, int ntiles, float scale, int vec, const int *__restrict__ pos) {
    typedef TcFwd<HS> L;
    constexpr int LD = L::LD, LDO = L::LDO, NF = HS / 16;
    extern __shared__ __align__(128) unsigned char tc_smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(tc_smem + L::Q);
    bf16 *Ks = reinterpret_cast<bf16 *>(tc_smem + L::K);
    bf16 *Vs = reinterpret_cast<bf16 *>(tc_smem + L::V);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = reinterpret_cast<float *>(tc_smem + L::S) + warp * TC_WM * TC_LDS;
    bf16 *Pw = reinterpret_cast<bf16 *>(tc_smem + L::P) + warp * TC_WM * TC_LDP;
    float *Ow = reinterpret_cast<float *>(tc_smem + L::O) + warp * TC_WM * LDO;
    float *Rw = reinterpret_cast<float *>(tc_smem + L::ROW) + warp * TC_WM;

    int bh = (int)(blockIdx.x % (unsigned)BH);
    int qt = ntiles - 1 - (int)(blockIdx.x / (unsigned)BH); /* latest (heaviest) tiles first */
    int h = bh % NH, bb = bh / NH;
    int q0 = qt * TC_TILE;
    const int g = gtc_att_kv_head(h, NH, NKV);
    const size_t C = (size_t)NH * HS, C3 = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * HS;
    const bf16 *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)g * HS;
    const bf16 *vbase = kbase + (size_t)NKV * HS;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr; /* packed rows: this sequence's positions */

    tc_load_tile<HS, LD>(Qs, qbase, C3, q0, T, vec);
    for (int i = lane; i < TC_WM * LDO; i += 32) Ow[i] = 0.0f;
    __syncthreads();

    const int w0 = q0 + warp * TC_WM;   /* the warp's first row */
    const bool active = w0 < T;         /* warp-uniform: rows past T need no work */
    const int tlim = min(w0 + TC_WM - 1, T - 1); /* last key any valid row of the warp sees */
    /* first key any row of the warp sees (w0 < T when active; an inactive warp does no work) */
    const int wlo = gtc_att_first_key_pos(active ? w0 : 0, window, posr);
    const int r = lane >> 1, half = lane & 1; /* softmax: two lanes per row, even/odd columns */
    const int t = w0 + r;
    const int jmax = min(t, T - 1);     /* last key row t may use (rows past T: finite filler) */
    const int jmin = gtc_att_first_key_pos(jmax, window, posr); /* first key row t may use */

    FragA qa[NF];
    if (active) {
        #pragma unroll
        for (int kk = 0; kk < NF; kk++)
            wmma::load_matrix_sync(qa[kk], Qs + warp * TC_WM * LD + kk * 16, LD);
    }

    float m = -INFINITY, l = 0.0f; /* identical in both lanes of a row */
    int q_last = min(q0 + TC_TILE, T) - 1;
    /* from the key tile holding the first key the block's first row sees (0 without a window) */
    for (int k0 = gtc_att_first_key_pos(q0, window, posr) / TC_TILE * TC_TILE; k0 <= q_last; k0 += TC_TILE) {
        __syncthreads(); /* every warp is done with the previous K/V tile */
        tc_load_tile<HS, LD>(Ks, kbase, C3, k0, T, vec);
        tc_load_tile<HS, LD>(Vs, vbase, C3, k0, T, vec);
        __syncthreads();
        if (!active || k0 + TC_TILE <= wlo) continue; /* warp-uniform: no key of the warp here */
        /* 16-key blocks [kb0, nkb) hold the keys some row of the warp sees (k0 <= q0 <= w0 <= tlim;
         * kb0 is 0 without a window) */
        const int nkb = min(4, (tlim - k0) / 16 + 1);
        const int kb0 = max(0, (wlo - k0) / 16);

        /* S = Q_w K^T, blocks kb0 <= nb < nkb */
        #pragma unroll
        for (int nb = 0; nb < 4; nb++) {
            if (nb >= kb0 && nb < nkb) {
                FragC acc;
                wmma::fill_fragment(acc, 0.0f);
                #pragma unroll
                for (int kk = 0; kk < NF; kk++) {
                    FragBt kb;
                    wmma::load_matrix_sync(kb, Ks + nb * 16 * LD + kk * 16, LD);
                    wmma::mma_sync(acc, qa[kk], kb, acc);
                }
                wmma::store_matrix_sync(Sw + nb * 16, acc, TC_LDS, wmma::mem_row_major);
            }
        }
        __syncwarp();

        /* online softmax of row r over columns c = 2 i + half; valid: jmin <= key k0 + c <= jmax.
         * Without a window column 0 is always valid (k0 <= q0 <= min(t, T - 1)), so mt is finite;
         * with one a row may see no key of this tile (mt = -inf): while its m is -inf too it
         * keeps alpha = 1 (its O and l are still 0). Valid columns lie in [kb0 * 16, nkb * 16);
         * P is written (0 where masked) for all 64. */
        {
            const float *srow = Sw + r * TC_LDS;
            bf16 *prow = Pw + r * TC_LDP;
            const int cl = jmax - k0, cl0 = jmin - k0; /* valid: cl0 <= c <= cl */
            float mt = -INFINITY;
            #pragma unroll
            for (int i = 0; i < 32; i++) {
                int c = 2 * i + half;
                if (c <= cl && c >= cl0) mt = fmaxf(mt, srow[c] * scale);
            }
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
            float mnew = fmaxf(m, mt);
            /* exp(-inf) = 0 on the first tile the row sees */
            float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
            float sum = 0.0f;
            #pragma unroll
            for (int i = 0; i < 32; i++) {
                int c = 2 * i + half;
                float p = c <= cl && c >= cl0 ? expf(srow[c] * scale - mnew) : 0.0f;
                prow[c] = __float2bfloat16_rn(p);
                sum += p;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* same bits in both lanes */
            l = l * alpha + sum;
            m = mnew;
            if (half == 0) Rw[r] = alpha;
        }
        __syncwarp();

        /* O *= alpha (per row) */
        for (int idx = lane; idx < TC_WM * HS; idx += 32) {
            int rr = idx / HS, cc = idx - rr * HS;
            Ow[rr * LDO + cc] *= Rw[rr];
        }
        __syncwarp();

        /* O += P V over key blocks kb0 <= kb < nkb */
        FragA pa[4];
        #pragma unroll
        for (int kb = 0; kb < 4; kb++)
            if (kb >= kb0 && kb < nkb) wmma::load_matrix_sync(pa[kb], Pw + kb * 16, TC_LDP);
        #pragma unroll
        for (int nb = 0; nb < NF; nb++) {
            FragC acc;
            wmma::load_matrix_sync(acc, Ow + nb * 16, LDO, wmma::mem_row_major);
            #pragma unroll
            for (int kb = 0; kb < 4; kb++) {
                if (kb >= kb0 && kb < nkb) {
                    FragB vb;
                    wmma::load_matrix_sync(vb, Vs + kb * 16 * LD + nb * 16, LD);
                    wmma::mma_sync(acc, pa[kb], vb, acc);
                }
            }
            wmma::store_matrix_sync(Ow + nb * 16, acc, LDO, wmma::mem_row_major);
        }
        __syncwarp(); /* O stored before the next rescale; P, S read before they are rewritten */
    }

    if (!active) return; /* no block-wide barrier below */
    if (half == 0) {
        Rw[r] = 1.0f / l;
        if (t < T) lse[((size_t)bb * NH + h) * T + t] = m + logf(l);
    }
    __syncwarp();
    for (int idx = lane; idx < TC_WM * (HS / 8); idx += 32) {
        int rr = idx / (HS / 8), cc = (idx - rr * (HS / 8)) * 8;
        int tt = w0 + rr;
        if (tt < T)
            tc_store8(out + ((size_t)bb * T + tt) * C + (size_t)h * HS + cc, Ow + rr * LDO + cc,
                      Rw[rr], vec);
    }
}

/* ------------------------------------------------------------------ backward */

/* dK, dV for one tile of 64 keys (16 per warp) of kv head g; loops over the query heads of g's
 * group in order and, for each, over the query tiles that see the keys */
template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
    attention_tc_dkdv_kernel(bf16 *__restrict__ dqkv, const bf16 *__restrict__ dout,
                             const bf16 *__restrict__ qkv, const float *__restrict__ lse,
                             const float *__restrict__ D, int T, int NH, int NKV, int window,
                             int BKV, float scale, int vec, const int *__restrict__ pos) {
    typedef TcBwd<HS> L;
    constexpr int LD = L::LD, NF = HS / 16;
    extern __shared__ __align__(128) unsigned char tc_smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(tc_smem + L::K);
    bf16 *Vs = reinterpret_cast<bf16 *>(tc_smem + L::V);
    bf16 *Qs = reinterpret_cast<bf16 *>(tc_smem + L::Q);
    bf16 *dOs = reinterpret_cast<bf16 *>(tc_smem + L::DO);
    float *Ls = reinterpret_cast<float *>(tc_smem + L::LSE);
    float *Ds = reinterpret_cast<float *>(tc_smem + L::DD);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *STw = reinterpret_cast<float *>(tc_smem + L::S) + warp * TC_WM * TC_LDS;
    float *DPw = reinterpret_cast<float *>(tc_smem + L::DP) + warp * TC_WM * TC_LDS;
    bf16 *PTw = reinterpret_cast<bf16 *>(tc_smem + L::B1) + warp * TC_WM * TC_LDP;
    bf16 *DSw = reinterpret_cast<bf16 *>(tc_smem + L::B2) + warp * TC_WM * TC_LDP;

    int bg = (int)(blockIdx.x % (unsigned)BKV);
    int kt = (int)(blockIdx.x / (unsigned)BKV); /* earliest (heaviest) key tiles first */
    int g = bg % NKV, bb = bg / NKV;
    int k0 = kt * TC_TILE;
    const int G = NH / NKV; /* query heads per kv head */
    const size_t C = (size_t)NH * HS, C3 = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)g * HS;
    const bf16 *vbase = kbase + (size_t)NKV * HS;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr; /* packed rows: this sequence's positions */

    tc_load_tile<HS, LD>(Ks, kbase, C3, k0, T, vec);
    tc_load_tile<HS, LD>(Vs, vbase, C3, k0, T, vec);

    const int w0 = k0 + warp * TC_WM; /* the warp's first key */
    const bool active = w0 < T;       /* warp-uniform */
    const int r = lane >> 1, half = lane & 1;
    const int j = w0 + r; /* this lane pair's key */
    const int jq_end = gtc_att_query_end(j, window, T); /* queries [j, jq_end) see key j */
    /* one past the last query that sees a key of the warp / of the block (T without a window) */
    const int wq_end = gtc_att_query_end(min(w0 + TC_WM, T) - 1, window, T);
    const int q_end = gtc_att_query_end(min(k0 + TC_TILE, T) - 1, window, T);

    FragC dk[NF], dv[NF];
    #pragma unroll
    for (int nb = 0; nb < NF; nb++) {
        wmma::fill_fragment(dk[nb], 0.0f);
        wmma::fill_fragment(dv[nb], 0.0f);
    }

    for (int h = g * G; h < g * G + G; h++) {
        const bf16 *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * HS;
        const bf16 *dobase = dout + (size_t)bb * T * C + (size_t)h * HS;
        const float *lrow = lse + ((size_t)bb * NH + h) * T;
        const float *drow = D + ((size_t)bb * NH + h) * T;
        /* queries t >= k0 see this tile; the first query tile is the one starting at k0 */
        for (int q0 = k0; q0 < q_end; q0 += TC_TILE) {
            __syncthreads(); /* every warp is done with the previous Q/dO tile (K/V loads issued) */
            tc_load_tile<HS, LD>(Qs, qbase, C3, q0, T, vec);
            tc_load_tile<HS, LD>(dOs, dobase, C, q0, T, vec);
            tc_load_row_vals(Ls, lrow, q0, T);
            tc_load_row_vals(Ds, drow, q0, T);
            __syncthreads();
            if (!active || q0 >= wq_end) continue; /* warp-uniform */
            /* 16-query blocks [fb, nbe) hold the queries that may see a key of the warp: below
             * fb every query precedes key w0 (only on the diagonal tile, q0 == k0: fb = warp);
             * from nbe on every query is past T or past the window of the warp's last key.
             * fb < nbe since w0 < wq_end. */
            const int fb = max(0, (w0 - q0) / 16);
            const int nbe = min(4, (wq_end - 1 - q0) / 16 + 1);

            /* S^T = K_w Q^T, dP^T = V_w dO^T */
            tc_score_products<HS, LD>(STw, DPw, Ks + warp * TC_WM * LD, Qs,
                                      Vs + warp * TC_WM * LD, dOs, fb, nbe);
            __syncwarp();

            /* P^T, dS^T of key j (row r) against queries t = q0 + c, c = 2 i + half. Valid
             * (j <= t < jq_end <= T) columns lie in [fb * 16, nbe * 16), which were computed
             * above; all 64 columns are written (0 where masked). */
            {
                const float *srow = STw + r * TC_LDS, *dprow = DPw + r * TC_LDS;
                bf16 *prow = PTw + r * TC_LDP, *dsrow = DSw + r * TC_LDP;
                #pragma unroll
                for (int i = 0; i < 32; i++) {
                    int c = 2 * i + half;
                    int t = q0 + c;
                    float p = 0.0f, ds = 0.0f;
                    /* positions: t sees key j only within its own example (t - posr[t] <= j) */
                    if (t < jq_end && t >= j && (!posr || t - posr[t] <= j)) {
                        p = expf(srow[c] * scale - Ls[c]);
                        ds = p * (dprow[c] - Ds[c]);
                    }
                    prow[c] = __float2bfloat16_rn(p);
                    dsrow[c] = __float2bfloat16_rn(ds);
                }
            }
            __syncwarp();

            /* dV += P^T dO, dK += dS^T Q over query blocks [fb, nbe) */
            #pragma unroll
            for (int kb = 0; kb < 4; kb++) {
                if (kb >= fb && kb < nbe) {
                    FragA pa, dsa;
                    wmma::load_matrix_sync(pa, PTw + kb * 16, TC_LDP);
                    wmma::load_matrix_sync(dsa, DSw + kb * 16, TC_LDP);
                    #pragma unroll
                    for (int nb = 0; nb < NF; nb++) {
                        FragB b;
                        wmma::load_matrix_sync(b, dOs + kb * 16 * LD + nb * 16, LD);
                        wmma::mma_sync(dv[nb], pa, b, dv[nb]);
                        wmma::load_matrix_sync(b, Qs + kb * 16 * LD + nb * 16, LD);
                        wmma::mma_sync(dk[nb], dsa, b, dk[nb]);
                    }
                }
            }
            /* STw/DPw/PTw/DSw are rewritten only after the next iteration's __syncthreads */
        }
    }

    if (!active) return; /* no block-wide barrier below */
    __syncwarp();
    bf16 *dkbase = dqkv + (size_t)bb * T * C3 + C + (size_t)g * HS;
    tc_store_frags<HS>(dkbase, C3, w0, T, dk, STw, scale, vec, lane);
    tc_store_frags<HS>(dkbase + (size_t)NKV * HS, C3, w0, T, dv, STw, 1.0f, vec, lane);
}

/* dQ for one tile of 64 queries (16 per warp); loops over the key tiles they see */
template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
    attention_tc_dq_kernel(bf16 *__restrict__ dqkv, const bf16 *__restrict__ dout,
                           const bf16 *__restrict__ qkv, const float *__restrict__ lse,
                           const float *__restrict__ D, int T, int NH, int NKV, int window, int BH,
                           int ntiles, float scale, int vec, const int *__restrict__ pos) {
    typedef TcBwd<HS> L;
    constexpr int LD = L::LD, NF = HS / 16;
    extern __shared__ __align__(128) unsigned char tc_smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(tc_smem + L::K);
    bf16 *Vs = reinterpret_cast<bf16 *>(tc_smem + L::V);
    bf16 *Qs = reinterpret_cast<bf16 *>(tc_smem + L::Q);
    bf16 *dOs = reinterpret_cast<bf16 *>(tc_smem + L::DO);
    float *Ls = reinterpret_cast<float *>(tc_smem + L::LSE);
    float *Ds = reinterpret_cast<float *>(tc_smem + L::DD);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = reinterpret_cast<float *>(tc_smem + L::S) + warp * TC_WM * TC_LDS;
    float *DPw = reinterpret_cast<float *>(tc_smem + L::DP) + warp * TC_WM * TC_LDS;
    /* dS in two bf16 parts: high = bf16(dS), low = bf16(dS - high) */
    bf16 *DSw = reinterpret_cast<bf16 *>(tc_smem + L::B1) + warp * TC_WM * TC_LDP;
    bf16 *DLw = reinterpret_cast<bf16 *>(tc_smem + L::B2) + warp * TC_WM * TC_LDP;

    int bh = (int)(blockIdx.x % (unsigned)BH);
    int qt = ntiles - 1 - (int)(blockIdx.x / (unsigned)BH); /* latest (heaviest) tiles first */
    int h = bh % NH, bb = bh / NH;
    int q0 = qt * TC_TILE;
    const int g = gtc_att_kv_head(h, NH, NKV);
    const size_t C = (size_t)NH * HS, C3 = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * HS;
    const bf16 *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)g * HS;
    const bf16 *vbase = kbase + (size_t)NKV * HS;
    const bf16 *dobase = dout + (size_t)bb * T * C + (size_t)h * HS;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr; /* packed rows: this sequence's positions */

    tc_load_tile<HS, LD>(Qs, qbase, C3, q0, T, vec);
    tc_load_tile<HS, LD>(dOs, dobase, C, q0, T, vec);
    tc_load_row_vals(Ls, lse + ((size_t)bb * NH + h) * T, q0, T);
    tc_load_row_vals(Ds, D + ((size_t)bb * NH + h) * T, q0, T);

    const int w0 = q0 + warp * TC_WM;
    const bool active = w0 < T; /* warp-uniform */
    const int tlim = min(w0 + TC_WM - 1, T - 1);
    const int wlo = gtc_att_first_key_pos(active ? w0 : 0, window, posr); /* first key any row of the warp sees */
    const int r = lane >> 1, half = lane & 1;
    const int t = w0 + r;
    const int jmax = min(t, T - 1);
    const int jmin = gtc_att_first_key_pos(jmax, window, posr);

    FragC dq[NF];
    #pragma unroll
    for (int nb = 0; nb < NF; nb++) wmma::fill_fragment(dq[nb], 0.0f);

    int q_last = min(q0 + TC_TILE, T) - 1;
    for (int k0 = gtc_att_first_key_pos(q0, window, posr) / TC_TILE * TC_TILE; k0 <= q_last; k0 += TC_TILE) {
        __syncthreads(); /* every warp is done with the previous K/V tile (Q/dO/L/D loads issued) */
        tc_load_tile<HS, LD>(Ks, kbase, C3, k0, T, vec);
        tc_load_tile<HS, LD>(Vs, vbase, C3, k0, T, vec);
        __syncthreads();
        if (!active || k0 + TC_TILE <= wlo) continue; /* warp-uniform */
        const int nkb = min(4, (tlim - k0) / 16 + 1);
        const int kb0 = max(0, (wlo - k0) / 16);

        /* S = Q_w K^T, dP = dO_w V^T, key blocks kb0 <= nb < nkb */
        tc_score_products<HS, LD>(Sw, DPw, Qs + warp * TC_WM * LD, Ks, dOs + warp * TC_WM * LD, Vs, kb0, nkb);
        __syncwarp();

        /* dS of row r (query t) against keys k0 + c, c = 2 i + half; valid: t < T and
         * jmin <= k0 + c <= t, i.e. jmin - k0 <= c <= jmax - k0, which lies in
         * [kb0 * 16, nkb * 16). All 64 columns written. */
        {
            const float *srow = Sw + r * TC_LDS, *dprow = DPw + r * TC_LDS;
            bf16 *dsrow = DSw + r * TC_LDP, *dlrow = DLw + r * TC_LDP;
            const int cl = jmax - k0, cl0 = jmin - k0;
            const bool row_ok = t < T;
            const float Lr = Ls[warp * TC_WM + r], Dr = Ds[warp * TC_WM + r];
            #pragma unroll
            for (int i = 0; i < 32; i++) {
                int c = 2 * i + half;
                float ds = 0.0f;
                if (row_ok && c <= cl && c >= cl0) {
                    float p = expf(srow[c] * scale - Lr);
                    ds = p * (dprow[c] - Dr);
                }
                bf16 hi = __float2bfloat16_rn(ds);
                dsrow[c] = hi;
                dlrow[c] = __float2bfloat16_rn(ds - __bfloat162float(hi));
            }
        }
        __syncwarp();

        /* dQ += dS K over key blocks kb0 <= kb < nkb */
        #pragma unroll
        for (int kb = 0; kb < 4; kb++) {
            if (kb >= kb0 && kb < nkb) {
                FragA a, alo;
                wmma::load_matrix_sync(a, DSw + kb * 16, TC_LDP);
                wmma::load_matrix_sync(alo, DLw + kb * 16, TC_LDP);
                #pragma unroll
                for (int nb = 0; nb < NF; nb++) {
                    FragB b;
                    wmma::load_matrix_sync(b, Ks + kb * 16 * LD + nb * 16, LD);
                    wmma::mma_sync(dq[nb], a, b, dq[nb]);
                    wmma::mma_sync(dq[nb], alo, b, dq[nb]);
                }
            }
        }
    }

    if (!active) return; /* no block-wide barrier below */
    __syncwarp();
    bf16 *dqbase = dqkv + (size_t)bb * T * C3 + (size_t)h * HS;
    tc_store_frags<HS>(dqbase, C3, w0, T, dq, Sw, scale, vec, lane);
}

/* ------------------------------------------------------------------ host side */

/* im->tc_attention[0 / 1]: whether the device runs the tensor-core kernels for head size 64 / 128,
 * set once by gtc_attention_tc_init when the backend opens */
bool gtc_attention_tc_supported(Backend *b, int hs) {
    const CudaImpl *im = gtc_impl(b);
    return (hs == 64 && im->tc_attention[0]) || (hs == 128 && im->tc_attention[1]);
}

int gtc_attention_tc_init(CudaImpl *im, GtError *err) {
    struct {
        const void *fn;
        size_t bytes;
        const char *name;
        int slot; /* 0: hs 64, 1: hs 128 */
    } k[] = {
        {(const void *)attention_tc_forward_kernel<64>, TcFwd<64>::BYTES, "tc_forward<64>", 0},
        {(const void *)attention_tc_dkdv_kernel<64>, TcBwd<64>::BYTES, "tc_dkdv<64>", 0},
        {(const void *)attention_tc_dq_kernel<64>, TcBwd<64>::BYTES, "tc_dq<64>", 0},
        {(const void *)attention_tc_forward_kernel<128>, TcFwd<128>::BYTES, "tc_forward<128>", 1},
        {(const void *)attention_tc_dkdv_kernel<128>, TcBwd<128>::BYTES, "tc_dkdv<128>", 1},
        {(const void *)attention_tc_dq_kernel<128>, TcBwd<128>::BYTES, "tc_dq<128>", 1},
    };
    /* bf16 wmma needs sm_80+; a head size is enabled when the device lets a block have all the
     * shared memory its three kernels ask for (hs 128 needs ~121 KiB: sm_80/sm_90 yes, sm_86/89
     * with 99 KiB no, which then keep the CUDA-core path for it) */
    int dev = 0, optin = 0, major = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gt_error(err, GT_EXIT_FAILURE, "%s:%d: attention: device attributes: %s", __FILE__,
                        __LINE__, cudaGetErrorString(e));
    }
    bool ok[2] = {major >= 8, major >= 8};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].bytes > (size_t)optin) ok[k[i].slot] = false;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (ok[k[i].slot] && gtc_set_smem_limit(k[i].fn, k[i].bytes, k[i].name, err)) return -1;
    im->tc_attention[0] = ok[0];
    im->tc_attention[1] = ok[1];
    return 0;
}

static bool tc_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* blocks of the 1-D grid: ntiles * B * NH (exit on overflow: > 2^31 - 1 blocks) */
static unsigned tc_grid(int ntiles, int B, int NH) {
    long long n = (long long)ntiles * B * NH;
    if (n > INT_MAX || (long long)B * NH > INT_MAX) {
        fprintf(stderr, "%s:%d: attention: grid of %lld blocks too large (B=%d NH=%d)\n", __FILE__,
                __LINE__, n, B, NH);
        exit(GT_EXIT_FAILURE);
    }
    return (unsigned)n;
}

template <int HS>
static void tc_forward_t(Backend *b, gtc_bf16 *out, float *lse, const gtc_bf16 *qkv, int B, int T,
                         int NH, int NKV, int window, const int *pos) {
    float scale = 1.0f / sqrtf((float)HS);
    int ntiles = (T + TC_TILE - 1) / TC_TILE;
    unsigned blocks = tc_grid(ntiles, B, NH);
    int vec = tc_aligned16(out) && tc_aligned16(qkv);
    GTC_LAUNCH(attention_tc_forward_kernel<HS>, blocks, TC_THREADS, TcFwd<HS>::BYTES, gtc_stream(b),
               out, lse, qkv, T, NH, NKV, window, B * NH, ntiles, scale, vec, pos);
    CUDA_CHECK_LAUNCH();
}

/* dK/dV: one block per (key tile, kv head, batch); dQ: one per (query tile, query head, batch) */
template <int HS>
static void tc_backward_t(Backend *b, gtc_bf16 *dqkv, const float *D, const gtc_bf16 *dout,
                          const gtc_bf16 *qkv, const float *lse, int B, int T, int NH, int NKV,
                          int window, const int *pos) {
    float scale = 1.0f / sqrtf((float)HS);
    int ntiles = (T + TC_TILE - 1) / TC_TILE;
    int vec = tc_aligned16(dqkv) && tc_aligned16(dout) && tc_aligned16(qkv);
    cudaStream_t st = gtc_stream(b);
    GTC_LAUNCH(attention_tc_dkdv_kernel<HS>, tc_grid(ntiles, B, NKV), TC_THREADS, TcBwd<HS>::BYTES,
               st, dqkv, dout, qkv, lse, D, T, NH, NKV, window, B * NKV, scale, vec, pos);
    CUDA_CHECK_LAUNCH();
    GTC_LAUNCH(attention_tc_dq_kernel<HS>, tc_grid(ntiles, B, NH), TC_THREADS, TcBwd<HS>::BYTES, st,
               dqkv, dout, qkv, lse, D, T, NH, NKV, window, B * NH, ntiles, scale, vec, pos);
    CUDA_CHECK_LAUNCH();
}

void gtc_attention_tc_forward(Backend *b, gtc_bf16 *out, float *lse, const gtc_bf16 *qkv, int B,
                              int T, int NH, int NKV, int hd, int window, const int *pos) {
    if (B <= 0 || T <= 0) return;
    if (hd == 64)
        tc_forward_t<64>(b, out, lse, qkv, B, T, NH, NKV, window, pos);
    else
        tc_forward_t<128>(b, out, lse, qkv, B, T, NH, NKV, window, pos);
}

void gtc_attention_tc_backward(Backend *b, gtc_bf16 *dqkv, const float *D, const gtc_bf16 *dout,
                               const gtc_bf16 *qkv, const float *lse, int B, int T, int NH,
                               int NKV, int hd, int window, const int *pos) {
    if (B <= 0 || T <= 0) return;
    if (hd == 64)
        tc_backward_t<64>(b, dqkv, D, dout, qkv, lse, B, T, NH, NKV, window, pos);
    else
        tc_backward_t<128>(b, dqkv, D, dout, qkv, lse, B, T, NH, NKV, window, pos);
}
