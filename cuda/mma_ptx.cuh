/* mma_ptx.cuh - warp-level tensor-core primitives for the attention kernels (sm_80+):
 *   gtc_mma_bf16_16816   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (D = A B + C)
 *   gtc_ldmatrix_x4      ldmatrix.sync.aligned.m8n8.x4.shared.b16
 *   gtc_ldmatrix_x4_t    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
 *   gtc_cp_async16       cp.async.cg.shared.global 16 bytes; gtc_cp_async_commit / _wait<N>
 * Under nvcc these are inline PTX. Under the CUDA simulator (make test-cudasim) they are an exact
 * emulation of the PTX ISA's per-lane fragment layouts: every lane gives its registers (or the
 * 16-byte row its address points at) to one warp-wide exchange (gtcsim::warp_exchange, a barrier
 * as a shuffle is) and computes its own result registers from the others', so a kernel that puts
 * a value in the wrong register or lane computes garbage on the simulator as on a GPU; cp.async
 * copies only when a wait_group says the group is complete (a missing wait reads poison).
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", .bf16), g = lane / 4,
 * t = lane % 4; each 32-bit register holds two bf16, the lower column/k index in the low half:
 *   A 16x16 (row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
 *   B 16x8 (col):  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C/D 16x8 f32:  c0, c1 = C[g][2t], C[g][2t+1]; c2, c3 = C[g+8][2t], C[g+8][2t+1]
 *   ldmatrix x4: lanes 8i .. 8i+7 give the 8 row addresses (16 bytes each) of matrix i; register i
 *   of a lane gets matrix i's row g, elements 2t, 2t+1 (.trans: elements [2t][g] and [2t+1][g]).
 * So an accumulator pair of n8 tiles (2j, 2j+1) is, rounded to bf16, the A fragment of the k16
 * chunk j (a0 = c0c1 of tile 2j, a1 = c2c3 of 2j, a2 = c0c1 of 2j+1, a3 = c2c3 of 2j+1): P and
 * dS never leave registers. */
#ifndef GTC_MMA_PTX_CUH
#define GTC_MMA_PTX_CUH

#include <stdint.h>

/* two floats rounded to bf16 (nearest even) and packed, lo in the low half */
__device__ __forceinline__ uint32_t gtc_pack_bf16x2(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

#ifdef __CUDACC__

__device__ __forceinline__ void gtc_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void gtc_ldmatrix_x4(uint32_t (&r)[4], const void *smem_row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void gtc_ldmatrix_x4_t(uint32_t (&r)[4], const void *smem_row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void gtc_cp_async16(void *smem_dst, const void *gmem_src) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem_src));
}
__device__ __forceinline__ void gtc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void gtc_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#else /* the simulator */

__device__ __forceinline__ float gtc_bf16_lo(uint32_t w) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)(w & 0xFFFFu))); }
__device__ __forceinline__ float gtc_bf16_hi(uint32_t w) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)(w >> 16))); }

__device__ __forceinline__ void gtc_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
    gtcsim::cost_mma(16, 8, 16); /* the cost model's tensor-core FLOPs (cuda/sim/cost.cpp) */
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1}, all[32][6];
    gtcsim::warp_exchange(mine, sizeof mine, all);
    const int lane = gtcsim::lane_id(), g = lane >> 2, t = lane & 3;
    /* A[m][k] and B[k][n] from the lanes that hold them (layouts above) */
    auto A = [&](int m, int k) {
        int reg = (m >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), kk = k & 7;
        uint32_t w = all[(m & 7) * 4 + kk / 2][reg];
        return kk & 1 ? gtc_bf16_hi(w) : gtc_bf16_lo(w);
    };
    auto B = [&](int k, int n) {
        int kk = k & 7;
        uint32_t w = all[n * 4 + kk / 2][4 + (k >= 8)];
        return kk & 1 ? gtc_bf16_hi(w) : gtc_bf16_lo(w);
    };
    for (int e = 0; e < 4; e++) {
        int m = g + (e >= 2 ? 8 : 0), n = 2 * t + (e & 1);
        float acc = d[e];
        for (int k = 0; k < 16; k++) acc = fmaf(A(m, k), B(k, n), acc); /* bf16 products are exact */
        d[e] = acc;
    }
}

/* the 16-byte row at this lane's address, exchanged; reg i from matrix i (lanes 8i .. 8i+7) */
__device__ __forceinline__ void gtc_ldmatrix_sim(uint32_t (&r)[4], const void *smem_row, bool trans) {
    if (((uintptr_t)smem_row & 15u) != 0) gtcsim::fail("ldmatrix: row address %p not 16-byte aligned", smem_row);
    if (!gtcsim::in_shared(smem_row, 16)) gtcsim::fail("ldmatrix: row address %p not in shared memory", smem_row);
    unsigned short mine[8], all[32][8];
    memcpy(mine, smem_row, sizeof mine);
    gtcsim::warp_exchange(mine, sizeof mine, all);
    const int lane = gtcsim::lane_id(), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        unsigned short lo, hi;
        if (!trans) {
            lo = all[8 * i + g][2 * t];
            hi = all[8 * i + g][2 * t + 1];
        } else {
            lo = all[8 * i + 2 * t][g];
            hi = all[8 * i + 2 * t + 1][g];
        }
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}
__device__ __forceinline__ void gtc_ldmatrix_x4(uint32_t (&r)[4], const void *smem_row) { gtc_ldmatrix_sim(r, smem_row, false); }
__device__ __forceinline__ void gtc_ldmatrix_x4_t(uint32_t (&r)[4], const void *smem_row) { gtc_ldmatrix_sim(r, smem_row, true); }

__device__ __forceinline__ void gtc_cp_async16(void *smem_dst, const void *gmem_src) {
    if (!gtcsim::is_device_range(gmem_src, 16)) gtcsim::fail("cp.async: source %p not in device memory", gmem_src);
    gtcsim::cp_async(smem_dst, gmem_src, 16);
}
__device__ __forceinline__ void gtc_cp_async_commit() { gtcsim::cp_async_commit(); }
template <int N> __device__ __forceinline__ void gtc_cp_async_wait() { gtcsim::cp_async_wait(N); }

#endif
#endif
