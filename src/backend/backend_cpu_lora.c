/* backend_cpu_lora.c - the CPU backend's LoRA ops (backend.h): axpby_rows (a scaled update of
 * strided rows) and dropout with the counter-based mask of dropout.h (element i of a call is mask
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
