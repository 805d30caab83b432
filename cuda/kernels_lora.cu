/* kernels_lora.cu - the CUDA backend's LoRA ops (backend.h): axpby_rows (a strided, scaled row
 * update) and dropout with the counter-based mask of dropout.h. The formulas are the CPU
 * backend's (src/backend/backend_cpu_lora.c), and both ops give its bits exactly:
 *
 *   axpby_rows: dst = beta * d + alpha * s, each product rounded to fp32 and then the sum
 *     (__fmul_rn / __fadd_rn: nvcc would otherwise fuse one product and the sum into an FMA);
 *     beta == 0: alpha * s alone, dst never read. One rounding to the act dtype at the store.
 *   dropout: out[i] = gt_dropout_keep(key, base + i, threshold) ? inp[i] * scale : 0, the product one
 *     fp32 __fmul_rn; the mask is dropout.h's own function (GT_HD: __host__ __device__), so the
 *     host and the device drop the same elements.
 *
 * act_t tensors are fp32 or bf16 (b->act_dtype): each op dispatches to a kernel templated on the
 * storage type (Act = float or __nv_bfloat16), reads through load_f32 and rounds once through
 * store_from_f32 (cuda_common.cuh). Elementwise grid-stride kernels: each element is read and
 * then written by one thread, so in place (dst == src with ldd == lds; out == inp) is safe, and
 * the result never depends on the grid. */
#include "cuda_common.cuh"

#include "dropout.h"

/* ------------------------------------------------------------------ axpby_rows */

template <typename Act>
__global__ void axpby_rows_kernel(Act *dst, int ldd, const Act *src, int lds, int N, int cols,
                                  float alpha, float beta) {
    const size_t n = (size_t)N * cols;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t row = idx / (size_t)cols;
        size_t j = idx % (size_t)cols;
        size_t od = row * (size_t)ldd + j;
        float as = __fmul_rn(alpha, load_f32(src, row * (size_t)lds + j));
        float v = beta == 0.0f ? as : __fadd_rn(__fmul_rn(beta, load_f32(dst, od)), as);
        store_from_f32(dst, od, v);
    }
}

static void axpby_check(int ldd, int lds, int cols) {
    if (ldd < cols || lds < cols) {
        fprintf(stderr, "%s:%d: axpby_rows: row strides ldd=%d lds=%d below cols=%d\n", __FILE__,
                __LINE__, ldd, lds, cols);
        exit(GT_EXIT_FAILURE);
    }
}

void gtc_axpby_rows(Backend *b, act_t *dst, int ldd, const act_t *src, int lds, int N, int cols,
                    float alpha, float beta) {
    if (N <= 0 || cols <= 0) return;
    axpby_check(ldd, lds, cols);
    unsigned blocks = gtc_blocks((size_t)N * cols, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(axpby_rows_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b),
                   (gtc_bf16 *)dst, ldd, (const gtc_bf16 *)src, lds, N, cols, alpha, beta);
    else
        GTC_LAUNCH(axpby_rows_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)dst,
                   ldd, (const float *)src, lds, N, cols, alpha, beta);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ dropout */

template <typename Act>
__global__ void dropout_kernel(Act *out, const Act *inp, size_t n, uint64_t key, uint64_t base,
                               uint32_t threshold, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = load_f32(inp, i); /* read before out (which may alias inp) is written */
        store_from_f32(out, i,
                       gt_dropout_keep(key, base + (uint64_t)i, threshold) ? __fmul_rn(x, scale) : 0.0f);
    }
}

void gtc_dropout(Backend *b, act_t *out, const act_t *inp, size_t n, uint64_t key, uint64_t base,
                 uint32_t threshold, float scale) {
    if (n == 0) return;
    unsigned blocks = gtc_blocks(n, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(dropout_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b),
                   (gtc_bf16 *)out, (const gtc_bf16 *)inp, n, key, base, threshold, scale);
    else
        GTC_LAUNCH(dropout_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)out,
                   (const float *)inp, n, key, base, threshold, scale);
    CUDA_CHECK_LAUNCH();
}
