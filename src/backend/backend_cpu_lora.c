/* backend_cpu_lora.c - the CPU backend's LoRA ops (backend.h): gemm (the strided GEMM an adapter
 * accumulates into its base's output block with, OpenBLAS through cpu_sgemm_par), axpby_rows (a
 * scaled update of strided rows) and dropout with the counter-based mask of dropout.h (element i of a call is mask
 * index base + i).
 *
 * Both work on the act_t values directly, fp32 or bf16 (uint16 bit patterns), without the
 * widening slots of backend_cpu.c: axpby_rows is strided (the widening helpers are contiguous) and
 * both are elementwise, so each element is widened, computed in fp32 and rounded once
 * (gt_f32_to_bf16, round to nearest even) where it is used.
 *
 * Arithmetic: axpby_rows computes beta * d + alpha * s with each product rounded to fp32 and then
 * the sum rounded, never fused into an FMA (GCC's -std=c11 implies -ffp-contract=off, and the
 * products are separate statements, which a compiler contracting within expressions leaves alone);
 * beta == 0 computes alpha * s alone, never reading dst. dropout computes inp * scale, one fp32
 * product. The CUDA kernels (cuda/kernels_lora.cu) compute the same with __fmul_rn / __fadd_rn,
 * so the two backends give the same bits.
 *
 * Determinism: elementwise; every element is written by one thread, whatever the thread count. */
#include "backend_cpu_internal.h"

#include "dropout.h"

#include <string.h>

/* ------------------------------------------------------------------ gemm */

/* a [rows, cols] block of act values (row stride ld) as fp32: the block itself under fp32 (*ldw =
 * ld), else widened row by row into the slot, compact (*ldw = cols): only the block is read, not
 * the columns between its rows (a fused weight's other blocks) */
static const float *block_in(Backend *b, int slot, const act_t *x, int rows, int cols, int ld, int *ldw) {
    *ldw = ld;
    if (b->act_dtype == GT_F32 || rows <= 0 || cols <= 0) return x;
    float *w = cpu_wide_slot(b, slot, (size_t)rows * cols);
    const uint16_t *s = x;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)rows * cols >= PAR_MIN)
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) w[(size_t)i * cols + j] = gt_bf16_to_f32(s[(size_t)i * ld + j]);
    *ldw = cols;
    return w;
}

void cpu_gemm(Backend *b, bool ta, bool tb, int M, int N, int K, float alpha, const act_t *A, int lda,
              const act_t *B, int ldb, float beta, void *C, GtDtype cdt, int ldc) {
    if (M <= 0 || N <= 0) return;
    const bool f32 = cdt == GT_F32 || b->act_dtype == GT_F32; /* C is fp32 */
    const size_t es = f32 ? sizeof(float) : sizeof(uint16_t);
    if (K <= 0) { /* the empty sum: C = beta C */
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) memset((char *)C + (size_t)i * ldc * es, 0, (size_t)N * es);
        return;
    }
    int la, lb;
    const float *a = block_in(b, 1, A, ta ? K : M, ta ? M : K, lda, &la);
    const float *bm = block_in(b, 2, B, tb ? N : K, tb ? K : N, ldb, &lb);
    if (f32) {
        cpu_sgemm(b, ta, tb, M, N, K, alpha, a, la, bm, lb, beta, C, ldc);
        return;
    }
    /* bf16 C: its block widened (beta 1) into a compact slot, the GEMM there, each element rounded once */
    float *c = cpu_wide_slot(b, 0, (size_t)M * N);
    uint16_t *Cb = C;
    const bool rd = beta != 0.0f;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)M * N >= PAR_MIN)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) c[(size_t)i * N + j] = rd ? gt_bf16_to_f32(Cb[(size_t)i * ldc + j]) : 0.0f;
    cpu_sgemm(b, ta, tb, M, N, K, alpha, a, la, bm, lb, beta, c, N);
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)M * N >= PAR_MIN)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) Cb[(size_t)i * ldc + j] = gt_f32_to_bf16(c[(size_t)i * N + j]);
}

/* ------------------------------------------------------------------ axpby_rows */

static inline float axpby1(float d, float s, float alpha, float beta) {
    float as = alpha * s;
    if (beta == 0.0f) return as;
    float bd = beta * d;
    return bd + as;
}

void cpu_axpby_rows(Backend *b, act_t *dst, int ldd, const act_t *src, int lds, int N, int cols, float alpha,
                    float beta) {
    if (N <= 0 || cols <= 0) return;
    const bool rd = beta != 0.0f; /* beta 0: dst is not read */
    if (b->act_dtype == GT_BF16) {
        uint16_t *D = dst;
        const uint16_t *S = src;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * cols >= PAR_MIN)
        for (int n = 0; n < N; n++) {
            uint16_t *d = D + (size_t)n * ldd;
            const uint16_t *s = S + (size_t)n * lds;
            for (int j = 0; j < cols; j++) {
                float dv = rd ? gt_bf16_to_f32(d[j]) : 0.0f;
                d[j] = gt_f32_to_bf16(axpby1(dv, gt_bf16_to_f32(s[j]), alpha, beta));
            }
        }
    } else {
        float *D = dst;
        const float *S = src;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * cols >= PAR_MIN)
        for (int n = 0; n < N; n++) {
            float *d = D + (size_t)n * ldd;
            const float *s = S + (size_t)n * lds;
            if (rd)
                for (int j = 0; j < cols; j++) {
                    float bd = beta * d[j], as = alpha * s[j];
                    d[j] = bd + as;
                }
            else
                for (int j = 0; j < cols; j++) d[j] = alpha * s[j];
        }
    }
}

/* ------------------------------------------------------------------ dropout */

void cpu_dropout(Backend *b, act_t *out, const act_t *inp, size_t n, uint64_t key, uint64_t base, uint32_t threshold,
                 float scale) {
    if (n == 0) return;
    const long long nn = (long long)n;
    if (b->act_dtype == GT_BF16) {
        uint16_t *o = out;
        const uint16_t *x = inp;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
        for (long long i = 0; i < nn; i++)
            o[i] = gt_dropout_keep(key, base + (uint64_t)i, threshold) ? gt_f32_to_bf16(gt_bf16_to_f32(x[i]) * scale) : 0;
    } else {
        float *o = out;
        const float *x = inp;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
        for (long long i = 0; i < nn; i++) o[i] = gt_dropout_keep(key, base + (uint64_t)i, threshold) ? x[i] * scale : 0.0f;
    }
}
