/* backend_cpu_internal.h - what the CPU backend's source files share, not an API of its own:
 * backend_cpu.c (memory, the GPT-2 ops, the bf16 emulation, the ops table), backend_cpu_attention.c
 * (flash-style attention), backend_cpu_llama.c (RMSNorm, per-head RMSNorm, RoPE, SwiGLU), backend_cpu_nf4.c
 * (dequant_nf4), backend_cpu_decode.c (the KV cache's ops) and backend_cpu_lora.c
 * (the adapters' strided gemm, axpby_rows, dropout). The determinism rules
 * all of them follow are in backend_cpu.c's header comment. */
#ifndef GT_BACKEND_CPU_INTERNAL_H
#define GT_BACKEND_CPU_INTERNAL_H

#include "backend.h"

#include <math.h>

/* glibc's libmvec (>= 2.35) has AVX2/AVX-512 versions of these: declaring them SIMD lets the GELU,
 * softmax, attention and SwiGLU loops vectorise without -ffast-math (10x faster GELU, measured).
 * The vector and scalar versions may round differently, but a given element of a given op always
 * takes the same path, so results stay deterministic. */
extern float tanhf(float) __attribute__((simd("notinbranch")));
extern float expf(float) __attribute__((simd("notinbranch")));

/* channel block owned by one thread in the parameter-gradient reductions: one cache line */
#define CH_BLOCK 16
/* below this many elements an elementwise op runs on one thread (a fork costs more) */
#define PAR_MIN 16384

static inline int nthr(const Backend *b) { return b->num_threads > 0 ? b->num_threads : 1; }

/* A norm's parameter gradients over rows of C, deterministic (each thread owns a block of
 * channels; rows summed in order, in double): dw[c] += sum_r dout * (inp - mean) * rstd,
 * dbias[c] += sum_r dout; either may be NULL, and mean NULL is 0 (RMSNorm; x - 0 is x exactly).
 * The rows: for n < N and h < heads, in that order, the C values at inp[n*ld + h*C] (dout alike)
 * with statistics mean/rstd[n*sld + h] (head_rmsnorm's per-head rows; a plain norm is heads 1,
 * ld C, sld 1: cpu_norm_param_grads). backend_cpu.c. */
void cpu_norm_param_grads_rows(Backend *b, float *dw, float *dbias, const float *dout, const float *inp,
                               const float *mean, const float *rstd, int N, int heads, size_t ld, int sld, int C);
static inline void cpu_norm_param_grads(Backend *b, float *dw, float *dbias, const float *dout, const float *inp,
                                        const float *mean, const float *rstd, int N, int C) {
    cpu_norm_param_grads_rows(b, dw, dbias, dout, inp, mean, rstd, N, 1, (size_t)C, 1, C);
}

/* r = x + y over a row of C, rounded to bf16 when round_bf16 (as the bf16 add would store it): the
 * residual half of the fused residual + norm ops. r may alias x or y. */
static inline void residual_row(float *r, const float *x, const float *y, int C, bool round_bf16) {
    if (round_bf16)
        for (int c = 0; c < C; c++) r[c] = gt_bf16_to_f32(gt_f32_to_bf16(x[c] + y[c]));
    else
        for (int c = 0; c < C; c++) r[c] = x[c] + y[c];
}

/* dot product with 8 explicit lanes: vectorises without reassociation, fixed order. */
static inline float dot_f(const float *restrict a, const float *restrict x, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * x[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * x[i];
    return s;
}

static inline float sum_f(const float *restrict a, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i];
    return s;
}

/* ---- the bf16 emulation (backend_cpu.c, "precision"): the fp32 ops run on fp32 buffers; with
 * act dtype bf16 each act_t input is widened into one of the backend's fp32 slots (slot: 0..5,
 * distinct for the tensors of one call) and each act_t output rounded once. With act dtype fp32
 * these return the pointer itself and cpu_act_done does nothing. */
/* an act_t input as fp32 (NULL stays NULL) */
const float *cpu_act_in(Backend *b, int slot, const act_t *x, size_t n);
/* an act_t output as fp32; read: the op reads it too (accumulates, or works in place) */
float *cpu_act_out(Backend *b, int slot, act_t *x, size_t n, bool read);
/* the fp32 result w of cpu_act_out back into x (rounded to nearest even under bf16) */
void cpu_act_done(Backend *b, act_t *x, const float *w, size_t n);

/* ---- ops defined outside backend_cpu.c, for its ops table (contracts: backend.h) */
void cpu_attention_forward(Backend *b, act_t *out, float *lse, const act_t *qkv, int B, int T, int NH, int NKV,
                           int hd, int window, const int *pos);
void cpu_attention_backward(Backend *b, act_t *dqkv, float *workspace, const act_t *dout, const act_t *qkv,
                            const act_t *out, const float *lse, int B, int T, int NH, int NKV, int hd, int window,
                            const int *pos);
void cpu_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *w, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(Backend *b, act_t *dinp, float *dw, const act_t *dout, const act_t *inp, const act_t *w,
                          const float *rstd, int N, int C);
void cpu_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x, const act_t *y,
                                  const act_t *w, int N, int C, float eps);
void cpu_rope_forward(Backend *b, act_t *qkv, const float *cos, const float *sin, int B, int T, int pos0, int NH,
                      int NKV, int hd, const int *pos);
void cpu_rope_backward(Backend *b, act_t *dqkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                       int hd, const int *pos);
void cpu_head_rmsnorm_forward(Backend *b, act_t *out, float *rstd, const act_t *inp, const act_t *wq, const act_t *wk,
                              int N, int NH, int NKV, int hd, float eps);
void cpu_head_rmsnorm_backward(Backend *b, act_t *dinp, float *dwq, float *dwk, const act_t *dout, const act_t *inp,
                               const act_t *wq, const act_t *wk, const float *rstd, int N, int NH, int NKV, int hd);
void cpu_swiglu_forward(Backend *b, act_t *out, const act_t *inp, int N, int I);
void cpu_swiglu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, int N, int I);
/* backend_cpu.c: the fp32 GEMM every matmul goes through (row-major C = alpha op(A) op(B) + beta C,
 * split across the OpenMP threads, a fixed split for a thread count) and a widening slot as
 * cpu_act_in uses (grown to n floats, the backend's own) */
void cpu_sgemm(Backend *b, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *Bm, int ldb, float beta, float *C, int ldc);
float *cpu_wide_slot(Backend *b, int slot, size_t n);
/* backend_cpu_lora.c */
void cpu_gemm(Backend *b, bool ta, bool tb, int M, int N, int K, float alpha, const act_t *A, int lda,
              const act_t *B, int ldb, float beta, void *C, GtDtype cdt, int ldc);
void cpu_axpby_rows(Backend *b, act_t *dst, int ldd, const act_t *src, int lds, int N, int cols, float alpha,
                    float beta);
void cpu_dropout(Backend *b, act_t *out, const act_t *inp, size_t n, uint64_t key, uint64_t base, uint32_t threshold,
                 float scale);
/* backend_cpu_nf4.c */
void cpu_dequant_nf4(Backend *b, void *dst, GtDtype dst_dtype, const void *unit, const Nf4Format *f);
/* backend_cpu_decode.c: generation with a KV cache */
void cpu_kv_store(Backend *b, act_t *kc, act_t *vc, const act_t *qkv, const int *slot, const int *pos, int N, int NH,
                  int NKV, int hd, int ctx);
void cpu_attention_cached(Backend *b, act_t *out, const act_t *qkv, const act_t *kc, const act_t *vc, const int *slot,
                          const int *pos, int N, int NH, int NKV, int hd, int ctx, int window);

/* backend_cpu_dora.c */
void cpu_dora_norm(Backend *b, float *norm, const act_t *W, const act_t *A, const act_t *B, int rows, int in, int r,
                   float scale);
void cpu_dora_forward(Backend *b, act_t *out, int ldo, const act_t *z, const act_t *y, const act_t *mag,
                      const float *norm, int N, int rows, float scale);
void cpu_dora_backward(Backend *b, float *dmag, act_t *dz, act_t *dy, const act_t *dout, int ldd, const act_t *z,
                       const act_t *y, const act_t *mag, const float *norm, int N, int rows, float scale);

#endif
