/* host mock of the CUDA features the tensor-core attention kernels use: one std::thread per
 * CUDA thread, std::barrier for __syncthreads/__syncwarp, wmma with opaque-layout semantics */
#pragma once
#include <barrier>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
extern "C" {
#include "common.h"
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__

struct Dim3 { unsigned x = 0, y = 0, z = 0; };
extern thread_local Dim3 threadIdx;
extern Dim3 blockIdx;

/* bf16 conversions: the project's own (common.h), which round as CUDA's do */
struct __nv_bfloat16 { uint16_t x; };
static inline float __bfloat162float(__nv_bfloat16 h) { return gt_bf16_to_f32(h.x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{gt_f32_to_bf16(f)}; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { __nv_bfloat16 h; h.x = s; return h; }
typedef __nv_bfloat16 gtc_bf16;

struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

/* block-wide sync state (one block runs at a time) */
struct Sync {
    std::barrier<> *block;
    std::barrier<> *warp[4];
    float xch[4][32];
    std::atomic<long> wmma_count[128];
    const unsigned char *smem_lo, *smem_hi;
};
extern Sync g_sync;

static inline void fail(const char *m) { fprintf(stderr, "MOCK FAILURE: %s (thread %u block %u)\n", m, threadIdx.x, blockIdx.x); abort(); }

static inline void __syncthreads() { g_sync.block->arrive_and_wait(); }
static inline void __syncwarp() {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_sync.warp[w]->arrive_and_wait();
    /* every lane of the warp made the same number of (collective) wmma calls */
    long mine = g_sync.wmma_count[threadIdx.x].load();
    for (int i = 0; i < 32; i++)
        if (g_sync.wmma_count[w * 32 + i].load() != mine) fail("non-uniform wmma calls within a warp");
    g_sync.warp[w]->arrive_and_wait();
    (void)l;
}
static inline float __shfl_xor_sync(unsigned, float v, int m) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_sync.warp[w]->arrive_and_wait(); /* previous exchange fully read */
    g_sync.xch[w][l] = v;
    g_sync.warp[w]->arrive_and_wait();
    float r = g_sync.xch[w][l ^ m];
    return r;
}

namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { float v[256]; };

static inline void count() { g_sync.wmma_count[threadIdx.x]++; }
static inline void check_ptr(const void *p, unsigned ld, unsigned mult, size_t elem, bool rows16) {
    if (((uintptr_t)p & 31u) != 0) fail("wmma pointer not 32-byte aligned");
    if (ld % mult) fail("wmma ld not a multiple");
    const unsigned char *lo = (const unsigned char *)p;
    const unsigned char *hi = lo + ((size_t)15 * ld + 16) * elem;
    if (lo < g_sync.smem_lo || hi > g_sync.smem_hi) fail("wmma access outside shared memory");
    (void)rows16;
}
/* A: a[m][k] */
template <class L> inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ld) {
    count(); check_ptr(p, ld, 8, 2, true);
    for (int m = 0; m < 16; m++) for (int k = 0; k < 16; k++)
        f.v[m * 16 + k] = __bfloat162float(std::is_same<L, row_major>::value ? p[m * ld + k] : p[k * ld + m]);
}
/* B: b[k][n] */
template <class L> inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ld) {
    count(); check_ptr(p, ld, 8, 2, true);
    for (int k = 0; k < 16; k++) for (int n = 0; n < 16; n++)
        f.v[k * 16 + n] = __bfloat162float(std::is_same<L, row_major>::value ? p[k * ld + n] : p[n * ld + k]);
}
/* accumulators: each lane owns elements e with e % 32 == lane (an opaque distribution) */
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ld, layout_t lay) {
    count(); check_ptr(p, ld, 4, 4, true);
    if (lay != mem_row_major) fail("layout");
    int lane = threadIdx.x & 31;
    for (int e = 0; e < 256; e++) f.v[e] = (e % 32 == lane) ? p[(e / 16) * ld + e % 16] : NAN;
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ld, layout_t lay) {
    count(); check_ptr(p, ld, 4, 4, true);
    if (lay != mem_row_major) fail("layout");
    int lane = threadIdx.x & 31;
    for (int e = lane; e < 256; e += 32) p[(e / 16) * ld + e % 16] = f.v[e];
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float x) { count(); for (int e = 0; e < 256; e++) f.v[e] = x; }
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
    count();
    float r[256];
    int lane = threadIdx.x & 31;
    for (int m = 0; m < 16; m++) for (int n = 0; n < 16; n++) {
        if ((m * 16 + n) % 32 != lane) { r[m * 16 + n] = NAN; continue; }
        float s = c.v[m * 16 + n];
        for (int k = 0; k < 16; k++) s += a.v[m * 16 + k] * b.v[k * 16 + n];
        r[m * 16 + n] = s;
    }
    memcpy(d.v, r, sizeof r);
}
} }
