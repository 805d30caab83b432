/* backend_cpu_dora.c - the CPU backend's DoRA ops (backend.h): dora_norm (the row norms of
 * W + scale B A), dora_forward (the per-row magnitude applied to an adapted block of a linear's
 * output) and dora_backward (its gradients, the magnitude's reduced over the rows of the batch).
 *
 * The act values (fp32, or bf16 bit patterns) are widened element by element. Arithmetic is the
 * spec's, written as separate statements so nothing is fused into an FMA (GCC's -std=c11 implies
 * -ffp-contract=off): dora_norm in double, each product and sum rounded, one sqrt, one rounding to
 * fp32; dora_forward and the elementwise part of dora_backward in fp32; dora_backward's column sum
 * in double, in the order n = 0, 1, ... The CUDA kernels (cuda/kernels_dora.cu) compute the same
 * with one thread per row (dora_norm) or per column (dora_backward) and __dmul_rn / __fmul_rn ...,
 * so the two backends give the same bits.
 *
 * Determinism: every output element is computed by one thread in a fixed order, whatever the
 * thread count. */
#include "backend_cpu_internal.h"

static inline float ld(const Backend *b, const act_t *p, size_t i) {
    return b->act_dtype == GT_BF16 ? gt_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static inline void st(const Backend *b, act_t *p, size_t i, float v) {
    if (b->act_dtype == GT_BF16) ((uint16_t *)p)[i] = gt_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

void cpu_dora_norm(Backend *b, float *norm, const act_t *W, const act_t *A, const act_t *B, int rows, int in, int r,
                   float scale) {
    if (rows <= 0) return;
    const double s = (double)scale;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)rows * in * (r + 1) >= PAR_MIN)
    for (int i = 0; i < rows; i++) {
        double acc = 0.0;
        for (int j = 0; j < in; j++) {
            double ba = 0.0;
            for (int k = 0; k < r; k++) {
                double p = (double)ld(b, B, (size_t)i * r + k) * (double)ld(b, A, (size_t)k * in + j);
                ba = ba + p;
            }
            double sba = s * ba;
            double w = (double)ld(b, W, (size_t)i * in + j) + sba;
            double w2 = w * w;
            acc = acc + w2;
        }
        norm[i] = (float)sqrt(acc);
    }
}

void cpu_dora_forward(Backend *b, act_t *out, int ldo, const act_t *z, const act_t *y, const act_t *mag,
                      const float *norm, int N, int rows, float scale) {
    if (N <= 0 || rows <= 0) return;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * rows >= PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < rows; i++) {
            const float g = ld(b, mag, (size_t)i) / norm[i];
            const float a = g - 1.0f, c = g * scale;
            const size_t e = (size_t)n * rows + i, o = (size_t)n * ldo + i;
            const float az = a * ld(b, z, e), cy = c * ld(b, y, e);
            const float sum = az + cy;
            st(b, out, o, ld(b, out, o) + sum);
        }
}

void cpu_dora_backward(Backend *b, float *dmag, act_t *dz, act_t *dy, const act_t *dout, int ldd, const act_t *z,
                       const act_t *y, const act_t *mag, const float *norm, int N, int rows, float scale) {
    if (rows <= 0) return;
    const double s = (double)scale;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * rows >= PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float g = ld(b, mag, (size_t)i) / norm[i];
        const float a = g - 1.0f, c = g * scale;
        double acc = 0.0;
        for (int n = 0; n < N; n++) {
            const size_t e = (size_t)n * rows + i;
            const float d = ld(b, dout, (size_t)n * ldd + i);
            const double sy = s * (double)ld(b, y, e); /* z and y are read before dz and dy (may alias) are written */
            const double zy = (double)ld(b, z, e) + sy;
            const double p = (double)d * zy;
            acc = acc + p;
            st(b, dz, e, a * d);
            st(b, dy, e, c * d);
        }
        dmag[i] = dmag[i] + (float)(acc / (double)norm[i]);
    }
}
