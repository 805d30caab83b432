/* kernels_dora.cu - the CUDA backend's DoRA ops (backend.h): dora_norm, dora_forward and
 * dora_backward, the CPU backend's formulas (src/backend/backend_cpu_dora.c) with its bits:
 *
 *   dora_norm: one thread per row, the element W + scale * (B A) and the sum of squares in double
 *     with __dmul_rn / __dadd_rn (no FMA), in the order j = 0, 1, ..., k = 0, 1, ...; IEEE sqrt in
 *     double, one rounding to fp32.
 *   dora_forward: elementwise, fp32 with __fdiv_rn / __fsub_rn / __fmul_rn / __fadd_rn.
 *   dora_backward: one thread per column (i < rows) walking n = 0, 1, ... : dz and dy elementwise in
 *     fp32, the magnitude's sum in double, then dmag[i] += (float)(sum / norm[i]).
 *
 * act_t tensors are fp32 or bf16 (b->act_dtype), read through load_f32 and stored through
 * store_from_f32 (cuda_common.cuh). A row (or column) per thread is not the fastest shape; these
 * ops are a small part of a DoRA step (the norm is rows x in x r, the GEMMs N x in x rows). */
#include "cuda_common.cuh"

/* ------------------------------------------------------------------ dora_norm */

template <typename Act>
__global__ void dora_norm_kernel(float *norm, const Act *W, const Act *A, const Act *B, int rows, int in,
                                 int r, double s) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int j = 0; j < in; j++) {
            double ba = 0.0;
            for (int k = 0; k < r; k++)
                ba = __dadd_rn(ba, __dmul_rn((double)load_f32(B, (size_t)i * r + k),
                                             (double)load_f32(A, (size_t)k * in + j)));
            double w = __dadd_rn((double)load_f32(W, (size_t)i * in + j), __dmul_rn(s, ba));
            acc = __dadd_rn(acc, __dmul_rn(w, w));
        }
        norm[i] = (float)sqrt(acc);
    }
}

void gtc_dora_norm(Backend *b, float *norm, const act_t *W, const act_t *A, const act_t *B, int rows,
                   int in, int r, float scale) {
    if (rows <= 0) return;
    unsigned blocks = gtc_blocks((size_t)rows, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(dora_norm_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b), norm,
                   (const gtc_bf16 *)W, (const gtc_bf16 *)A, (const gtc_bf16 *)B, rows, in, r,
                   (double)scale);
    else
        GTC_LAUNCH(dora_norm_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), norm,
                   (const float *)W, (const float *)A, (const float *)B, rows, in, r, (double)scale);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ dora_forward */

template <typename Act>
__global__ void dora_forward_kernel(Act *out, int ldo, const Act *z, const Act *y, const Act *mag,
                                    const float *norm, int N, int rows, float scale) {
    const size_t n_el = (size_t)N * rows;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n_el;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t n = e / (size_t)rows, i = e % (size_t)rows;
        const float g = __fdiv_rn(load_f32(mag, i), norm[i]);
        const float a = __fsub_rn(g, 1.0f), c = __fmul_rn(g, scale);
        const float sum = __fadd_rn(__fmul_rn(a, load_f32(z, e)), __fmul_rn(c, load_f32(y, e)));
        const size_t o = n * (size_t)ldo + i;
        store_from_f32(out, o, __fadd_rn(load_f32(out, o), sum));
    }
}

void gtc_dora_forward(Backend *b, act_t *out, int ldo, const act_t *z, const act_t *y,
                      const act_t *mag, const float *norm, int N, int rows, float scale) {
    if (N <= 0 || rows <= 0) return;
    unsigned blocks = gtc_blocks((size_t)N * rows, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(dora_forward_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b),
                   (gtc_bf16 *)out, ldo, (const gtc_bf16 *)z, (const gtc_bf16 *)y,
                   (const gtc_bf16 *)mag, norm, N, rows, scale);
    else
        GTC_LAUNCH(dora_forward_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)out,
                   ldo, (const float *)z, (const float *)y, (const float *)mag, norm, N, rows, scale);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ dora_backward */

template <typename Act>
__global__ void dora_backward_kernel(float *dmag, Act *dz, Act *dy, const Act *dout, int ldd,
                                     const Act *z, const Act *y, const Act *mag, const float *norm,
                                     int N, int rows, float scale) {
    const double s = (double)scale;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
        const float g = __fdiv_rn(load_f32(mag, (size_t)i), norm[i]);
        const float a = __fsub_rn(g, 1.0f), c = __fmul_rn(g, scale);
        double acc = 0.0;
        for (int n = 0; n < N; n++) {
            const size_t e = (size_t)n * rows + i;
            const float d = load_f32(dout, (size_t)n * ldd + i);
            const double zy = __dadd_rn((double)load_f32(z, e), __dmul_rn(s, (double)load_f32(y, e)));
            acc = __dadd_rn(acc, __dmul_rn((double)d, zy));
            store_from_f32(dz, e, __fmul_rn(a, d));
            store_from_f32(dy, e, __fmul_rn(c, d));
        }
        dmag[i] = __fadd_rn(dmag[i], (float)__ddiv_rn(acc, (double)norm[i]));
    }
}

void gtc_dora_backward(Backend *b, float *dmag, act_t *dz, act_t *dy, const act_t *dout, int ldd,
                       const act_t *z, const act_t *y, const act_t *mag, const float *norm, int N,
                       int rows, float scale) {
    if (rows <= 0) return;
    unsigned blocks = gtc_blocks((size_t)rows, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(dora_backward_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b), dmag,
                   (gtc_bf16 *)dz, (gtc_bf16 *)dy, (const gtc_bf16 *)dout, ldd, (const gtc_bf16 *)z,
                   (const gtc_bf16 *)y, (const gtc_bf16 *)mag, norm, N, rows, scale);
    else
        GTC_LAUNCH(dora_backward_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), dmag,
                   (float *)dz, (float *)dy, (const float *)dout, ldd, (const float *)z,
                   (const float *)y, (const float *)mag, norm, N, rows, scale);
    CUDA_CHECK_LAUNCH();
}
