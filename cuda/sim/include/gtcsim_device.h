/* gtcsim_device.h - the device side of the CUDA language for the cuda/ sources compiled by the host C++
 * compiler (make test-cudasim); included by the simulator's cuda_runtime.h.
 *
 * Each CUDA thread of a block runs as a fiber of one host thread (runtime.cpp); blocks run one
 * after another. The built-in variables read the running fiber's indices; __syncthreads and the
 * warp intrinsics are real barriers between fibers, the shuffles really exchange the lanes'
 * values (full mask only: anything else fails loudly). __shared__ variables are statics placed in
 * the ELF section gtcsim_shared, which the runtime poisons (0xFF: NaN) before every block; the
 * dynamic shared memory (extern __shared__, rewritten by the build into a pointer to
 * gtcsim::dyn_smem()) is a fresh poisoned buffer per block, bounded by a guard page. */
#ifndef GTCSIM_DEVICE_H
#define GTCSIM_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../gtcsim.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("gtcsim_shared")))

namespace gtcsim {

/* the running fiber's built-in variables (set by the scheduler on every switch) */
extern uint3 g_thread_idx, g_block_idx;
extern dim3 g_block_dim, g_grid_dim;

void *dyn_smem(); /* the block's dynamic shared memory */
void syncthreads();
int syncthreads_or(int pred);
void syncwarp(unsigned mask);
/* lane exchange within the warp: every lane gives v and gets src_lane's (or the OR of all lanes'
 * predicates for ballot) */
uint64_t shfl(unsigned mask, uint64_t v, int src_lane, int width, const char *what);
unsigned ballot(unsigned mask, int pred);
int lane_id();
/* mma_ptx.cuh: every lane of the (full, converged) warp gives n <= 64 bytes and gets all 32 lanes'
 * (all[lane * n ..]) in one barrier, as the warp-collective mma.sync/ldmatrix exchange registers */
void warp_exchange(const void *mine, size_t n, void *all);
/* cp.async: the copy is queued, committed into the thread's next group and done only when a
 * cp.async.wait_group leaves that group out of the newest n (a missing wait reads poison) */
void cp_async(void *dst, const void *src, unsigned bytes);
void cp_async_commit();
void cp_async_wait(int n);
bool in_shared(const void *p, size_t bytes);

/* queue a kernel launch on stream s: checks the configuration now (an error becomes the launch's
 * cudaGetLastError), runs body for every thread of every block when the stream gets there */
void launch(const void *fn, const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            std::function<void()> body);
/* a pointer kernel argument must be null, device memory or pinned host memory */
void check_kernel_pointer(const char *kernel, int index, const void *p);

template <class... P, class... A>
void launch_kernel(void (*fn)(P...), const char *name, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t s, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<P>...> t(std::forward<A>(args)...);
    std::apply(
        [name](const auto &...x) {
            int i = 0;
            auto check = [&](const auto &v) {
                if constexpr (std::is_pointer_v<std::decay_t<decltype(v)>>)
                    check_kernel_pointer(name, i, (const void *)v);
                i++;
            };
            (check(x), ...);
        },
        t);
    launch((const void *)fn, name, grid, block, smem, s, [fn, t]() { std::apply(fn, t); });
}

} // namespace gtcsim

#define threadIdx (static_cast<const uint3 &>(::gtcsim::g_thread_idx))
#define blockIdx (static_cast<const uint3 &>(::gtcsim::g_block_idx))
#define blockDim (static_cast<const dim3 &>(::gtcsim::g_block_dim))
#define gridDim (static_cast<const dim3 &>(::gtcsim::g_grid_dim))
static constexpr int warpSize = 32;

static inline void __syncthreads() { gtcsim::syncthreads(); }
static inline int __syncthreads_or(int pred) { return gtcsim::syncthreads_or(pred); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { gtcsim::syncwarp(mask); }

template <class T> static inline T gtcsim_shfl(unsigned mask, T v, int src, int width, const char *what) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type wider than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = gtcsim::shfl(mask, u, src, width, what);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    return gtcsim_shfl(mask, v, src_lane, width, "__shfl_sync");
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return gtcsim_shfl(mask, v, gtcsim::lane_id() ^ lane_mask, width, "__shfl_xor_sync");
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int src = gtcsim::lane_id() + (int)delta;
    return gtcsim_shfl(mask, v, src < width ? src : gtcsim::lane_id(), width, "__shfl_down_sync");
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return gtcsim::ballot(mask, pred); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }

/* atomics: blocks and their threads never run at the same time, so a plain update is atomic */
template <class T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}

/* device math: the host's (the last bits may differ from CUDA's) */
static inline float __fdividef(float a, float b) { return a / b; }
/* __fmul_rn / __fadd_rn: rounded on their own, never fused into an FMA (nvcc's contract); the
 * empty asm keeps the host compiler (-ffp-contract=fast) from fusing them too */
static inline float __fmul_rn(float a, float b) { float r = a * b; __asm__("" : "+x"(r)); return r; }
static inline float __fadd_rn(float a, float b) { float r = a + b; __asm__("" : "+x"(r)); return r; }
static inline float __fsub_rn(float a, float b) { float r = a - b; __asm__("" : "+x"(r)); return r; }
static inline float __fdiv_rn(float a, float b) { float r = a / b; __asm__("" : "+x"(r)); return r; }
static inline double __dmul_rn(double a, double b) { double r = a * b; __asm__("" : "+x"(r)); return r; }
static inline double __dadd_rn(double a, double b) { double r = a + b; __asm__("" : "+x"(r)); return r; }
static inline double __ddiv_rn(double a, double b) { double r = a / b; __asm__("" : "+x"(r)); return r; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t max(size_t a, size_t b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

#endif
