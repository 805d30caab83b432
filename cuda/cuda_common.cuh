/* cuda_common.cuh - shared by the CUDA backend's translation units (the .cu files in cuda/).
 *
 * Error policy:
 *   - calls on paths that can report an error (backend creation, to_device/to_host) turn a CUDA
 *     failure into a GtError with "file:line: call: error string";
 *   - ops return void (backend.h), so a CUDA/cuBLAS failure inside an op prints
 *     "file:line: call: error string" on stderr and exits with status 1 (GT_EXIT_FAILURE). Such a
 *     failure means a bug or a dead device; there is nothing a caller could do with it.
 *   - kernel launches are checked with CUDA_CHECK_LAUNCH() (cudaGetLastError) right after.
 *
 * Determinism: no kernel that feeds a gradient uses atomics; every reduction has an order fixed by
 * the code and the shapes (grid sizes depend on shapes only, never on the device's SM count).
 *
 * Precision (backend.h): act_t tensors hold b->act_dtype elements, fp32 or bf16. Each op
 * dispatches on it (gtc_act_bf16) to a kernel templated on the storage type, float or
 * __nv_bfloat16; kernels read through load_f32, compute in fp32 (double where the fp32 path
 * already does) and write act_t outputs through store_from_f32, which rounds once to nearest
 * even. With T = float the helpers are plain loads and stores, so the fp32 path computes exactly
 * what it did before the templates. */
#ifndef GT_CUDA_COMMON_CUH
#define GT_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
}

/* ---- error checks ---- */

static inline void gtc_cuda_check(cudaError_t e, const char *call, const char *file, int line) {
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
        exit(GT_EXIT_FAILURE);
    }
}

static inline void gtc_cublas_check(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "%s:%d: %s: %s\n", file, line, call, cublasGetStatusString(s));
        exit(GT_EXIT_FAILURE);
    }
}

/* inside ops: print file:line and exit(1) on failure */
#define CUDA_CHECK(call) gtc_cuda_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) gtc_cublas_check((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH() gtc_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* ---- backend-private state ---- */

/* Internal scratch: not tracked by the MemTracker (it is the backend's, not the run's); its size
 * is printed once when the backend opens. */
#define GTC_LT_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace */
#define GTC_SCRATCH_BYTES ((size_t)4 << 20)       /* column-reduction partial sums, gemm_align.cu's padded
                                                   * tails (g x rows: 170 KiB for GPT-2's 10624-row chunk)
                                                   * the BGRADB epilogue's bias gradient (OC floats:
                                                   * 12 KiB for GPT-2's fc) and the encoder's sort of
                                                   * the positions by token (12 BT bytes + 256 KiB: 448
                                                   * KiB at B 16 T 1024); grows on demand */
/* The runtime's device memory after open, outside the tracked buffers (Backend.runtime_reserve);
 * the context, the cuBLASLt workspace and the scratch above are taken before the free figure is
 * read, so they are not in it.
 * - cuBLAS's own workspace, allocated at the first cuBLAS call on a stream: 32 MiB on Hopper
 *   (sm_90) and later, 4 MiB before (cuBLAS documentation, cublasSetWorkspace: the default
 *   workspace pool sizes);
 * - kernel modules loaded at their first launch (CUDA_MODULE_LOADING=LAZY, the default since CUDA
 *   12.2): gtrain's own are its .nv_fatbin, 3.3 MiB for sm_80 + sm_90 + PTX (measured: objdump -h
 *   build/gtrain), and the cuBLAS/cuBLASLt kernels a run uses; 256 MiB is an allowance for both,
 *   not a measurement (no GPU has run this yet: the device check's cudaMemGetInfo after steps
 *   against the plan measures it). */
#define GTC_CUBLAS_WORKSPACE_BYTES(major) ((size_t)((major) >= 9 ? 32 : 4) << 20)
#define GTC_MODULES_RESERVE_BYTES ((size_t)256 << 20)
#define GTC_SS_PARTS 1024                         /* sum_squares: fixed number of partial sums */

/* a GEMM shape as backend_cuda.cu's gemm() sees it (no pointers), and its cuBLASLt plan; bias: 0 none,
 * GTC_GEMM_BIAS (D = ... + bias[m]), GTC_GEMM_BGRADB (the epilogue writes bias[n] = sum_k op(B)[k, n], fp32) */
enum { GTC_GEMM_BIAS = 1, GTC_GEMM_BGRADB = 2 };
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, abt, cdt, bias;
    uint32_t align_ab, align_cd;
} GtcGemmKey;
typedef struct {
    GtcGemmKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int found; /* 0: no cuBLASLt algorithm, the cuBLAS fallback runs */
} GtcGemmPlan;
#define GTC_GEMM_PLANS 64 /* distinct GEMM shapes kept (a GPT-2 step uses about 20) */

typedef struct {
    int device;
    cudaStream_t compute;
    cudaStream_t copy;
    /* per offload slot: ready = "compute issued so far" (recorded on compute, waited on by copy),
     * done = "the slot's last copy finished" (recorded on copy, waited on by compute) */
    cudaEvent_t ready[2];
    cudaEvent_t done[2];
    cudaEvent_t timer[2]; /* timer_start / timer_elapsed_ms: recorded on the compute stream */
    /* GTRAIN_PROFILE_STEP=N: the N-th timed step (forward, backward, optimizer) runs between
     * cudaProfilerStart and cudaProfilerStop, so `ncu --profile-from-start off` sees exactly one step */
    long profile_step, timed_steps;
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    void *lt_workspace;
    void *scratch; /* column-reduction partials, gemm_align.cu's padded tails, bias gradients (gtc_scratch) */
    size_t scratch_bytes;
    double *ss_partials; /* GTC_SS_PARTS + 1 doubles on the device */
    double *ss_host;     /* 1 pinned double */
    GtcGemmPlan gemm_plans[GTC_GEMM_PLANS];
    int n_gemm_plans, next_gemm_plan;
    int fa_warps[3]; /* tensor-core attention for head size 64 / 96 / 128: warps per block (8, 4), 0: none */
    bool gelu_epilogue_refused; /* cuBLASLt refused the bf16 GELU epilogue (logged once) */
    bool bgrad_epilogue_refused; /* cuBLASLt refused the dW GEMM's BGRADB epilogue (logged once) */
} CudaImpl;

static inline CudaImpl *gtc_impl(Backend *b) { return (CudaImpl *)b->impl; }

/* Row chunks of the deterministic column reductions (layernorm/rmsnorm dw, bias gradients): the
 * partial sums over RS contiguous chunks of rows are added in order, so RS depends only on N. */
#define GTC_ROW_SPLITS_MAX 32
static inline int gtc_row_splits(int N) {
    int rs = (N + 255) / 256;
    if (rs < 1) rs = 1;
    if (rs > GTC_ROW_SPLITS_MAX) rs = GTC_ROW_SPLITS_MAX;
    return rs;
}
static inline cudaStream_t gtc_stream(Backend *b) { return gtc_impl(b)->compute; }

/* Scratch of at least `bytes` on the device (backend_cuda.cu). Growing it synchronises the
 * compute stream once (the old buffer may still be in use); it happens only when a larger
 * reduction than any before is asked for. */
void *gtc_scratch(Backend *b, size_t bytes);

/* ---- activation dtype ---- */

typedef __nv_bfloat16 gtc_bf16; /* the bf16 storage type of act_t tensors */

/* true when act_t tensors are bf16, false for fp32; any other value is a bug (exit 1) */
static inline bool gtc_act_bf16(const Backend *b) {
    if (b->act_dtype == GT_BF16) return true;
    if (b->act_dtype != GT_F32) {
        fprintf(stderr, "%s:%d: cuda: unknown activation dtype %d\n", __FILE__, __LINE__,
                (int)b->act_dtype);
        exit(GT_EXIT_FAILURE);
    }
    return false;
}

/* element i of an act_t tensor as fp32 (bf16 widening is exact) */
__device__ __forceinline__ float load_f32(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16 *p, size_t i) {
    return __bfloat162float(p[i]);
}
/* element i of an act_t tensor = v, rounded to nearest even for bf16 */
__device__ __forceinline__ void store_from_f32(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_from_f32(__nv_bfloat16 *p, size_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

/* ---- 16-byte packs (llm.c's Packed128): bandwidth-bound kernels move 16 bytes per load/store ----
 * A pack is GTC_PACK(T) = 16 / sizeof(T) elements (8 bf16, 4 fp32). load_pack / store_pack move N
 * elements (a multiple of the pack) starting at p through 16-byte accesses, widening to / rounding
 * from fp32 exactly as load_f32 / store_from_f32 do element by element, so a packed kernel computes
 * the bits of its scalar form. p must be 16-byte aligned: launchers check it (gtc_aligned16) and
 * fall back to the scalar tail for everything when it is not; the simulator checks it on every
 * access (a real GPU faults). */
#define GTC_PACK(T) ((int)(16 / sizeof(T)))

static inline bool gtc_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

__device__ __forceinline__ void gtc_check_aligned16(const void *p) {
#ifndef __CUDACC__
    if (!gtc_aligned16(p)) {
        fprintf(stderr, "cudasim: 16-byte access at %p, not 16-byte aligned\n", p);
        abort();
    }
#else
    (void)p;
#endif
}

template <int N, typename T>
__device__ __forceinline__ void load_pack(float (&out)[N], const T *p) {
    constexpr int per = GTC_PACK(T);
    static_assert(N % per == 0, "a pack load moves whole 16-byte words");
#pragma unroll
    for (int k = 0; k < N / per; k++) {
        gtc_check_aligned16(p + k * per);
        uint4 raw = *reinterpret_cast<const uint4 *>(p + k * per);
        T e[per];
        memcpy(e, &raw, sizeof raw);
#pragma unroll
        for (int j = 0; j < per; j++) out[k * per + j] = load_f32(e, j);
    }
}

template <int N, typename T>
__device__ __forceinline__ void store_pack(T *p, const float (&in)[N]) {
    constexpr int per = GTC_PACK(T);
    static_assert(N % per == 0, "a pack store moves whole 16-byte words");
#pragma unroll
    for (int k = 0; k < N / per; k++) {
        T e[per];
#pragma unroll
        for (int j = 0; j < per; j++) store_from_f32(e, j, in[k * per + j]);
        uint4 raw;
        memcpy(&raw, e, sizeof raw);
        gtc_check_aligned16(p + k * per);
        *reinterpret_cast<uint4 *>(p + k * per) = raw;
    }
}

/* One pack kept as its raw 16 bytes (the row kernels hold a row in registers this way, 4 words a
 * pack whatever the dtype): p[0 .. n) with n <= GTC_PACK(T), through one 16-byte access when vec
 * (the caller's promise: n is a whole pack and p is 16-byte aligned), else element by element;
 * the elements past n read as 0 and are never stored. */
template <typename T>
__device__ __forceinline__ uint4 gtc_raw_load(const T *p, int n, bool vec) {
    if (vec) {
        gtc_check_aligned16(p);
        return *reinterpret_cast<const uint4 *>(p);
    }
    T e[GTC_PACK(T)]; /* constant indices: registers, not a stack frame */
#pragma unroll
    for (int j = 0; j < GTC_PACK(T); j++) {
        if (j < n)
            e[j] = p[j];
        else
            store_from_f32(e, j, 0.0f);
    }
    uint4 raw;
    memcpy(&raw, e, sizeof raw);
    return raw;
}
template <typename T>
__device__ __forceinline__ void gtc_raw_store(T *p, const uint4 &raw, int n, bool vec) {
    if (vec) {
        gtc_check_aligned16(p);
        *reinterpret_cast<uint4 *>(p) = raw;
        return;
    }
    T e[GTC_PACK(T)];
    memcpy(e, &raw, sizeof raw);
#pragma unroll
    for (int j = 0; j < GTC_PACK(T); j++)
        if (j < n) p[j] = e[j];
}
/* a raw pack's elements as fp32 (load_f32's widening), and back (store_from_f32's rounding) */
template <typename T>
__device__ __forceinline__ void gtc_raw_to_f32(float (&out)[GTC_PACK(T)], const uint4 &raw) {
    T e[GTC_PACK(T)];
    memcpy(e, &raw, sizeof raw);
#pragma unroll
    for (int j = 0; j < GTC_PACK(T); j++) out[j] = load_f32(e, j);
}
template <typename T>
__device__ __forceinline__ uint4 gtc_raw_from_f32(const float (&in)[GTC_PACK(T)]) {
    T e[GTC_PACK(T)];
#pragma unroll
    for (int j = 0; j < GTC_PACK(T); j++) store_from_f32(e, j, in[j]);
    uint4 raw;
    memcpy(&raw, e, sizeof raw);
    return raw;
}

/* Raise a kernel's dynamic shared-memory limit to bytes (needed above 48 KiB); 0, or -1 with
 * err = "file:line: cudaFuncSetAttribute(name, bytes): error" */
static inline int gtc_set_smem_limit(const void *fn, size_t bytes, const char *name, GtError *err) {
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return gt_error(err, GT_EXIT_FAILURE, "%s:%d: cudaFuncSetAttribute(%s, %zu bytes shared memory): %s",
                    __FILE__, __LINE__, name, bytes, cudaGetErrorString(e));
}

/* ---- launch helpers ---- */

/* Every kernel launch in cuda/ is GTC_LAUNCH(kernel, grid, block, dynamic smem bytes, stream,
 * args...): `kernel<<<grid, block, smem, stream>>>(args...)` under nvcc; compiled by the host
 * C++ compiler against cuda/sim/include/ (make test-cudasim), a launch queued on the CUDA
 * simulator's stream (cuda/sim/runtime.cpp), which checks the configuration and the arguments.
 * A template kernel whose argument list has a comma goes in parentheses. */
#ifdef __CUDACC__
#define GTC_LAUNCH(kernel, grid, block, smem, stream, ...) \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#else
#define GTC_LAUNCH(kernel, grid, block, smem, stream, ...) \
    gtcsim::launch_kernel(kernel, #kernel, (grid), (block), (smem), (stream), __VA_ARGS__)
#endif

#define GTC_THREADS 256

/* blocks for a grid-stride elementwise kernel over n items (result never depends on the grid) */
static inline unsigned gtc_blocks(size_t n, int threads) {
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    if (blocks < 1) blocks = 1;
    if (blocks > 65536) blocks = 65536;
    return (unsigned)blocks;
}

/* Deterministic warp reductions: xor butterflies. Every lane ends with the same bits, since at
 * each level lane a computes x_a + x_b and lane b computes x_b + x_a (addition commutes). */
__device__ __forceinline__ float gtc_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double gtc_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float gtc_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- attention's head grouping and sliding window (kernels_attention*.cu; backend.h) ----
 * One definition for every attention kernel, CUDA-core and tensor-core alike. */

/* the kv head that query head h reads: NH / NKV query heads share each kv head (NKV divides NH;
 * NKV == NH: plain multi-head, kv head h) */
__host__ __device__ __forceinline__ int gtc_att_kv_head(int h, int NH, int NKV) {
    return h / (NH / NKV);
}
/* the first key position t sees: t - window + 1 with a sliding window (window > 0: keys j with
 * t - j < window), else 0; never below 0. Position t sees keys gtc_att_first_key(t) .. t. */
__host__ __device__ __forceinline__ int gtc_att_first_key(int t, int window) {
    return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}
/* with per-token positions (backend.h; posr: the sequence's, NULL without): also no key before
 * t's own example, t - posr[t]. t must be < T when posr is given. The start never decreases with
 * t, so a block's or warp's first row has its first visible key. */
__device__ __forceinline__ int gtc_att_first_key_pos(int t, int window, const int *posr) {
    int j = gtc_att_first_key(t, window);
    if (posr && t - posr[t] > j) j = t - posr[t];
    return j;
}
/* one past the last query position that sees key j: j + window with a window, else T (<= T) */
__host__ __device__ __forceinline__ int gtc_att_query_end(int j, int window, int T) {
    return window > 0 && j + window < T ? j + window : T;
}

/* ---- ops implemented in the kernel files (C++ linkage, internal to cuda/) ----
 * act_t arguments hold b->act_dtype elements (backend.h); float arguments are always fp32. */

/* kernels_encoder.cu (the encoder), kernels_misc.cu, kernels_norms.cu (layernorm),
 * kernels_elementwise.cu (gelu, add, scale, to_act, convert, AdamW) */
void gtc_encoder_forward(Backend *b, act_t *out, const int *tokens, const act_t *wte,
                         const act_t *wpe, int B, int T, int C, const int *pos);
void gtc_encoder_backward(Backend *b, float *dwte, float *dwpe, const act_t *dout,
                          const int *tokens, int B, int T, int C, const int *pos);
void gtc_layernorm_forward(Backend *b, act_t *out, float *mean, float *rstd, const act_t *inp,
                           const act_t *w, const act_t *bias, int N, int C, float eps);
void gtc_layernorm_backward(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                            const act_t *inp, const act_t *w, const float *mean, const float *rstd,
                            int N, int C);
/* res = x + y (rounded once), out = layernorm(res): bit for bit gtc_add + gtc_layernorm_forward */
void gtc_residual_layernorm_forward(Backend *b, act_t *res, act_t *out, float *mean, float *rstd,
                                    const act_t *x, const act_t *y, const act_t *w,
                                    const act_t *bias, int N, int C, float eps);
void gtc_gelu_forward(Backend *b, act_t *out, const act_t *inp, size_t n);
void gtc_gelu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, size_t n);
void gtc_add(Backend *b, act_t *out, const act_t *x, const act_t *y, size_t n);
void gtc_crossentropy(Backend *b, float *losses, act_t *logits, const int *targets, int N, int V, int ld,
                      float dloss_scale, int compute_grad);
void gtc_adamw(Backend *b, float *param, const float *grad, float *m, float *v, act_t *act_copy,
               const AdamwRun *runs, int n_runs, float lr, float beta1, float beta2, float eps, int t);
double gtc_sum_squares(Backend *b, const float *x, size_t n);
void gtc_scale(Backend *b, float *x, float s, size_t n);
void gtc_to_act(Backend *b, act_t *dst, const float *src, size_t n);
void gtc_convert(Backend *b, void *dst, GtDtype dst_dtype, const void *src, GtDtype src_dtype, size_t n);
/* kernels_nf4.cu */
void gtc_dequant_nf4(Backend *b, void *dst, GtDtype dst_dtype, const void *unit, const Nf4Format *f);
/* kernels_decode.cu: the generation ops (backend.h's kv_store, attention_cached) */
void gtc_kv_store(Backend *b, act_t *kc, act_t *vc, const act_t *qkv, const int *slot, const int *pos, int N, int NH,
                  int NKV, int hd, int ctx);
void gtc_attention_cached(Backend *b, act_t *out, const act_t *qkv, const act_t *kc, const act_t *vc, const int *slot,
                          const int *pos, int N, int NH, int NKV, int hd, int ctx, int window);
/* dst[c] += sum_n src[n * C + c] (src act dtype, dst fp32), rows summed in a fixed order (bias
 * gradients) */
void gtc_colsum_accumulate(Backend *b, float *dst, const act_t *src, int N, int C);
/* dst[c] += src[c] for c < C, fp32 (the BGRADB epilogue's bias gradient into dbias) */
void gtc_accumulate_f32(Backend *b, float *dst, const float *src, int C);
/* a norm's parameter gradients, deterministic: dw[c] += sum_n dout * (inp - mean) * rstd and
 * db[c] += sum_n dout (db NULL: skipped; mean NULL: 0, RMSNorm's dw) */
void gtc_norm_param_grads(Backend *b, float *dw, float *db, const act_t *dout, const act_t *inp,
                          const float *mean, const float *rstd, int N, int C);
/* RMSNorm's dw over the rows of head_rmsnorm: for n < N and h < heads (in that order), the C
 * values at dout/inp[n * ld + h * C] with rstd[n * sld + h]: dw[c] += sum dout * inp * rstd */
/* dw[c] += sum over y < parts of pw[y * C + c], db likewise from pb (NULL: skipped), in order */
void gtc_colsum_partials(Backend *b, float *dw, float *db, const float *pw, const float *pb, int C, int parts);
void gtc_norm_param_grads_rows(Backend *b, float *dw, const act_t *dout, const act_t *inp,
                               const float *rstd, int N, int heads, size_t ld, int sld, int C);
/* GEMM helpers with the element type given (out and bias both of type t):
 * out[n, c] += bias[c] (the fp32 fallback when the GEMM has no bias epilogue), and
 * out[n, c] = bias[c] (the bf16 fallback's prefill: the GEMM then adds with beta = 1, so the
 * bf16 result is rounded once, as the epilogue does) */
/* C[m,n] (col-major) = alpha op(A) op(B) + beta C (+ bias[m] per row): backend_cuda.cu's one cuBLAS(Lt)
 * call (gtc_gemm_one), and gemm_align.cu's gtc_gemm, which calls it on 16-byte-aligned parts of a shape
 * whose m, n or k is not a multiple of 16 bytes (see there) */
void gtc_gemm_one(Backend *b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                  GtDtype abt, const void *A, int lda, const void *B, int ldb, GtDtype cdt, void *Cm, int ldc,
                  const void *bias, float beta);
void gtc_gemm(Backend *b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, GtDtype abt,
              const void *A, int lda, const void *B, int ldb, GtDtype cdt, void *Cm, int ldc, const void *bias,
              float beta);
void gtc_add_bias(Backend *b, GtDtype t, void *out, const void *bias, int N, int C, int ld);
void gtc_fill_bias(Backend *b, GtDtype t, void *out, const void *bias, int N, int C, int ld);

/* kernels_norms.cu: RMSNorm (plain, fused, per head); kernels_llama.cu: RoPE, SwiGLU (backend.h's
 * Llama-family ops) */
void gtc_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *w,
                         int N, int C, float eps);
void gtc_rmsnorm_backward(Backend *b, act_t *dinp, float *dw, const act_t *dout, const act_t *inp,
                          const act_t *w, const float *rstd, int N, int C);
/* res = x + y (rounded once), out = rmsnorm(res): bit for bit gtc_add + gtc_rmsnorm_forward */
void gtc_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x,
                                  const act_t *y, const act_t *w, int N, int C, float eps);
/* per-head RMSNorm of qkv's q and k heads (Qwen3's q_norm/k_norm), v heads copied */
void gtc_head_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp,
                              const act_t *wq, const act_t *wk, int N, int NH, int NKV, int hd,
                              float eps);
void gtc_head_rmsnorm_backward(Backend *b, act_t *dinp, float *dwq, float *dwk, const act_t *dout,
                               const act_t *inp, const act_t *wq, const act_t *wk,
                               const float *rstd, int N, int NH, int NKV, int hd);
void gtc_rope_forward(Backend *b, act_t *qkv, const float *cosv, const float *sinv, int B, int T,
                      int pos0, int NH, int NKV, int hd, const int *pos);
void gtc_rope_backward(Backend *b, act_t *dqkv, const float *cosv, const float *sinv, int B, int T,
                       int NH, int NKV, int hd, const int *pos);
void gtc_swiglu_forward(Backend *b, act_t *out, const act_t *inp, int N, int I);
void gtc_swiglu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, int N,
                         int I);

/* kernels_lora.cu: the LoRA ops (backend.h's axpby_rows and dropout), bit for bit the CPU's */
void gtc_axpby_rows(Backend *b, act_t *dst, int ldd, const act_t *src, int lds, int N, int cols,
                    float alpha, float beta);
void gtc_dropout(Backend *b, act_t *out, const act_t *inp, size_t n, uint64_t key, uint64_t base,
                 uint32_t threshold, float scale);
/* kernels_dora.cu: the DoRA ops (backend.h), bit for bit the CPU's */
void gtc_dora_norm(Backend *b, float *norm, const act_t *W, const act_t *A, const act_t *B, int rows,
                   int in, int r, float scale);
void gtc_dora_forward(Backend *b, act_t *out, int ldo, const act_t *z, const act_t *y,
                      const act_t *mag, const float *norm, int N, int rows, float scale);
void gtc_dora_backward(Backend *b, float *dmag, act_t *dz, act_t *dy, const act_t *dout, int ldd,
                       const act_t *z, const act_t *y, const act_t *mag, const float *norm, int N,
                       int rows, float scale);

/* kernels_attention.cu */
/* sets the kernels' shared-memory limits and picks the tensor-core head sizes; 0 or -1 */
int gtc_attention_init(CudaImpl *im, GtError *err);
void gtc_attention_forward(Backend *b, act_t *out, float *lse, const act_t *qkv, int B, int T,
                           int NH, int NKV, int hd, int window, const int *pos);
void gtc_attention_backward(Backend *b, act_t *dqkv, float *workspace, const act_t *dout,
                            const act_t *qkv, const act_t *out, const float *lse, int B, int T,
                            int NH, int NKV, int hd, int window, const int *pos);

/* kernels_attention_tc.cu: the bf16 tensor-core attention (FlashAttention-2 design) that
 * gtc_attention_forward/backward dispatch to when the act dtype is bf16 and
 * gtc_attention_tc_supported(hs): hs 64, 96 or 128 on an sm_80+ device (fixed when the backend opens) */
bool gtc_attention_tc_supported(Backend *b, int hs);
/* called by gtc_attention_init: picks the supported head sizes for the current device and sets
 * their kernels' shared-memory limits; 0 or -1 */
int gtc_attention_tc_init(CudaImpl *im, GtError *err);
void gtc_attention_tc_forward(Backend *b, gtc_bf16 *out, float *lse, const gtc_bf16 *qkv, int B,
                              int T, int NH, int NKV, int hd, int window, const int *pos);
/* dqkv overwritten, given D[b,h,t] = sum_d dout * out (fp32, B*NH*T) already computed at the
 * start of workspace (backend_attention_workspace_floats: the dQ slices follow) */
void gtc_attention_tc_backward(Backend *b, gtc_bf16 *dqkv, float *workspace, const gtc_bf16 *dout,
                               const gtc_bf16 *qkv, const float *lse, int B, int T, int NH,
                               int NKV, int hd, int window, const int *pos);

#endif
