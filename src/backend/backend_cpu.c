/* backend_cpu.c - the CPU backend: GEMM through OpenBLAS (cblas_sgemm), everything else plain C
 * with OpenMP. This is the reference backend every test runs. This file holds memory, the GPT-2
 * ops, the bf16 emulation and the ops table; attention is in backend_cpu_attention.c, the
 * Llama-family ops (RMSNorm, RoPE, SwiGLU) in backend_cpu_llama.c, the LoRA ops (axpby_rows,
 * dropout) in backend_cpu_lora.c, what they share in backend_cpu_internal.h.
 *
 * Determinism: every output element is written by exactly one thread, and every reduction runs
 * in an order fixed by the code, never by thread timing. Parameter-gradient reductions over rows
 * (layernorm dw/dbias, bias grads, encoder dwte/dwpe) give each thread a disjoint block of output
 * channels and sum the rows in order, so they are even independent of the thread count.
 * sum_squares sums fixed chunks and combines them in order (also thread-count independent).
 * GEMM results depend on the split of C across threads, which is fixed for a given thread count.
 *
 * Threads: one OpenMP pool does everything. OpenBLAS is set to 1 thread and each GEMM is split
 * across the OpenMP threads (sgemm_par); two pools (OpenBLAS pthreads + OpenMP) busy-waiting on
 * the same cores slowed every op down several times on a 2-core machine. */
#include "backend_cpu_internal.h"

#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CPU_ALIGN 64
/* sum_squares: number of fixed partial sums (thread-count independent) */
#define SS_PARTS 256

/* fp32 buffers the bf16 emulation widens act_t tensors into (see "precision" below) */
enum { WIDE_SLOTS = 6 };

typedef struct {
    int num_threads;
    double timer_start; /* seconds, for timer_elapsed_ms */
    float *wide[WIDE_SLOTS];
    size_t wide_cap[WIDE_SLOTS]; /* floats */
} CpuImpl;

/* ------------------------------------------------------------------ memory */

static void *cpu_alloc(Backend *b, size_t bytes) {
    (void)b;
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    if (n > SIZE_MAX - (CPU_ALIGN - 1)) return NULL;
    n = (n + CPU_ALIGN - 1) & ~(size_t)(CPU_ALIGN - 1);
    if (posix_memalign(&p, CPU_ALIGN, n) != 0) return NULL;
    return p;
}

static void cpu_free(Backend *b, void *p) {
    (void)b;
    free(p);
}

static int cpu_to_device(Backend *b, void *dst, const void *src, size_t bytes, GtError *err) {
    (void)err;
    b->host_waits++;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

static int cpu_to_host(Backend *b, void *dst, const void *src, size_t bytes, GtError *err) {
    (void)err;
    b->host_waits++;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

static void cpu_dev_copy(Backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_zero(Backend *b, void *dst, size_t bytes) {
    (void)b;
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_synchronize(Backend *b) {
    b->host_waits++;
    b->syncs++;
}

static void cpu_offload_to_host(Backend *b, void *dst, const void *src, size_t bytes, int slot) {
    (void)slot;
    cpu_dev_copy(b, dst, src, bytes);
}

static void cpu_offload_to_device(Backend *b, void *dst, const void *src, size_t bytes, int slot) {
    (void)slot;
    cpu_dev_copy(b, dst, src, bytes);
}

static void cpu_offload_wait(Backend *b, int slot) {
    (void)b;
    (void)slot;
}

/* ------------------------------------------------------------------ helpers */

/* dst[c] += column sums of src[N, ld] over rows, for c in [0, C); threads own channel blocks,
 * rows are summed in order in double: deterministic and thread-count independent. */
static void colsum_accumulate(Backend *b, float *dst, const float *src, int N, int C, size_t ld) {
    int nblk = (C + CH_BLOCK - 1) / CH_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (nblk > 1 && (size_t)N * C >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CH_BLOCK;
        int cn = C - c0 < CH_BLOCK ? C - c0 : CH_BLOCK;
        double acc[CH_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = src + (size_t)n * ld + c0;
            for (int j = 0; j < cn; j++) acc[j] += row[j];
        }
        for (int j = 0; j < cn; j++) dst[c0 + j] += (float)acc[j];
    }
}

/* ------------------------------------------------------------------ encoder */

static void f32_encoder_forward(Backend *b, float *out, const int *tokens, const float *wte,
                                const float *wpe, int B, int T, int C, const int *pos) {
    int BT = B * T;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)BT * C >= PAR_MIN)
    for (int bt = 0; bt < BT; bt++) {
        int t = bt % T;
        float *o = out + (size_t)bt * C;
        const float *we = wte + (size_t)tokens[bt] * C;
        if (!wpe) { /* no position embedding (Llama) */
            memcpy(o, we, (size_t)C * sizeof(float));
            continue;
        }
        const float *pe = wpe + (size_t)(pos ? pos[bt] : t) * C;
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

/* dst[keys[i]] += rows[i] for i in order: each thread owns a block of channels of every row of
 * dst and walks the rows in order, so repeated keys add up in the same order every time */
static void f32_rows_add_by_key(Backend *b, float *dst, const float *rows, const int *keys, int n, int C) {
    int nblk = (C + CH_BLOCK - 1) / CH_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (nblk > 1 && (size_t)n * C >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CH_BLOCK;
        int cn = C - c0 < CH_BLOCK ? C - c0 : CH_BLOCK;
        for (int i = 0; i < n; i++) {
            float *d = dst + (size_t)keys[i] * C + c0;
            const float *src = rows + (size_t)i * C + c0;
            for (int j = 0; j < cn; j++) d[j] += src[j];
        }
    }
}

static void f32_encoder_backward(Backend *b, float *dwte, float *dwpe, const float *dout,
                                 const int *tokens, int B, int T, int C, const int *pos) {
    int BT = B * T;
    if (dwte) f32_rows_add_by_key(b, dwte, dout, tokens, BT, C);
    /* packed rows: the position of each (b, t) is its key, as the token is dwte's */
    if (dwpe && pos) {
        f32_rows_add_by_key(b, dwpe, dout, pos, BT, C);
        return;
    }
    /* dwpe[t] += sum_b dout[b, t]: each t owned by one thread, b summed in order */
    if (dwpe) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)BT * C >= PAR_MIN)
        for (int t = 0; t < T; t++) {
            float *dst = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                float s = 0.0f;
                for (int bb = 0; bb < B; bb++) s += dout[((size_t)bb * T + t) * C + c];
                dst[c] += s;
            }
        }
    }
}

/* ------------------------------------------------------------------ layernorm */

/* one row of layernorm forward: o = (x - m) * s * w + bias; the row's mean and rstd returned.
 * Shared by layernorm_forward and residual_layernorm_forward, which must agree bit for bit. */
static inline void ln_row(float *o, float *m_out, float *s_out, const float *x, const float *w,
                          const float *bias, int C, float invC, float eps) {
    float m = sum_f(x, C) * invC;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; j++) {
            float d = x[i + j] - m;
            acc[j] += d * d;
        }
    float var = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < C; i++) {
        float d = x[i] - m;
        var += d * d;
    }
    var *= invC;
    float s = 1.0f / sqrtf(var + eps);
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + bias[c];
    *m_out = m;
    *s_out = s;
}

static void f32_layernorm_forward(Backend *b, float *out, float *mean, float *rstd,
                                  const float *inp, const float *w, const float *bias, int N,
                                  int C, float eps) {
    float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float m, s;
        ln_row(out + (size_t)n * C, &m, &s, inp + (size_t)n * C, w, bias, C, invC, eps);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

/* res = x + y, then out = layernorm(res), one row at a time (the row is still in cache when the
 * layernorm reads it). round_bf16: res is rounded to bf16 (nearest even) before the layernorm
 * reads it, as the bf16 emulation's add would store it. res may alias x or y: each element of x
 * and y is read before res overwrites it. */
static void f32_residual_layernorm_forward(Backend *b, float *res, float *out, float *mean,
                                           float *rstd, const float *x, const float *y,
                                           const float *w, const float *bias, int N, int C,
                                           float eps, bool round_bf16) {
    float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *r = res + (size_t)n * C;
        const float *xr = x + (size_t)n * C, *yr = y + (size_t)n * C;
        residual_row(r, xr, yr, C, round_bf16);
        float m, s;
        ln_row(out + (size_t)n * C, &m, &s, r, w, bias, C, invC, eps);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

static void f32_layernorm_backward(Backend *b, float *dinp, float *dw, float *dbias,
                                   const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, int N, int C) {
    float invC = 1.0f / (float)C;
    /* 1. dinp (row-parallel; each row independent) */
    if (dinp) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * C >= PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float a1[8] = {0}, a2[8] = {0};
            int i = 0;
            for (; i + 8 <= C; i += 8)
                for (int j = 0; j < 8; j++) {
                    float dn = dy[i + j] * w[i + j];
                    a1[j] += dn;
                    a2[j] += dn * ((x[i + j] - m) * s);
                }
            float s1 = ((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]));
            float s2 = ((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]));
            for (; i < C; i++) {
                float dn = dy[i] * w[i];
                s1 += dn;
                s2 += dn * ((x[i] - m) * s);
            }
            float mdn = s1 * invC, mdnx = s2 * invC;
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * s;
                dx[c] += (dy[c] * w[c] - mdn - xh * mdnx) * s;
            }
        }
    }
    /* 2. dw, dbias */
    if (dw || dbias) cpu_norm_param_grads(b, dw, dbias, dout, inp, mean, rstd, N, C);
}

void cpu_norm_param_grads_rows(Backend *b, float *dw, float *dbias, const float *dout, const float *inp,
                               const float *mean, const float *rstd, int N, int heads, size_t ld, int sld, int C) {
    /* threads own channel blocks, rows summed in order (double): n, then the heads of row n */
    int nblk = (C + CH_BLOCK - 1) / CH_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (nblk > 1 && (size_t)N * heads * C >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CH_BLOCK;
        int cn = C - c0 < CH_BLOCK ? C - c0 : CH_BLOCK;
        double aw[CH_BLOCK] = {0}, ab[CH_BLOCK] = {0};
        for (int n = 0; n < N; n++)
            for (int h = 0; h < heads; h++) {
                const float *x = inp + (size_t)n * ld + (size_t)h * C + c0;
                const float *dy = dout + (size_t)n * ld + (size_t)h * C + c0;
                size_t si = (size_t)n * sld + h;
                float m = mean ? mean[si] : 0.0f, s = rstd[si];
                for (int j = 0; j < cn; j++) {
                    aw[j] += dy[j] * ((x[j] - m) * s);
                    ab[j] += dy[j];
                }
            }
        if (dw)
            for (int j = 0; j < cn; j++) dw[c0 + j] += (float)aw[j];
        if (dbias)
            for (int j = 0; j < cn; j++) dbias[c0 + j] += (float)ab[j];
    }
}

/* ------------------------------------------------------------------ matmul */

/* Row-major C[M,N] = op(A)[M,K] @ op(B)[K,N] + beta*C, parallelised by OpenMP: each thread calls
 * a single-threaded cblas_sgemm on its own block of C's rows or columns (OpenBLAS itself is set
 * to one thread). One thread pool instead of two: OpenBLAS's pthreads and OpenMP's threads
 * busy-waiting against each other made every op several times slower on a 2-core machine.
 * Every element of C is computed by one sgemm call; the split is fixed by (M, N, thread count),
 * so results are deterministic for a given thread count. (Not across thread counts: OpenBLAS's
 * edge/small-matrix kernels round differently depending on the block shape.) */
#define GEMM_ALIGN 16
static void sgemm_par(Backend *b, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *Bm, int ldb, float beta, float *C, int ldc) {
    int nt = nthr(b);
    double work = (double)M * N * K;
    bool split_m = M >= N;
    int dim = split_m ? M : N;
    int chunk = (dim + nt - 1) / nt;
    chunk = (chunk + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
    int parts = chunk > 0 ? (dim + chunk - 1) / chunk : 1;
    if (nt == 1 || parts <= 1 || work < 262144.0) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int p = 0; p < parts; p++) {
        int i0 = p * chunk;
        int n = dim - i0 < chunk ? dim - i0 : chunk;
        if (split_m) {
            const float *Ap = ta == CblasNoTrans ? A + (size_t)i0 * lda : A + i0;
            cblas_sgemm(CblasRowMajor, ta, tb, n, N, K, alpha, Ap, lda, Bm, ldb, beta,
                        C + (size_t)i0 * ldc, ldc);
        } else {
            const float *Bp = tb == CblasNoTrans ? Bm + i0 : Bm + (size_t)i0 * ldb;
            cblas_sgemm(CblasRowMajor, ta, tb, M, n, K, alpha, A, lda, Bp, ldb, beta, C + i0, ldc);
        }
    }
}

void cpu_sgemm(Backend *b, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *Bm, int ldb, float beta, float *C, int ldc) {
    sgemm_par(b, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, Bm, ldb, beta,
              C, ldc);
}

static void f32_matmul_forward(Backend *b, float *out, const float *inp, const float *w,
                               const float *bias, int N, int C, int OC, int ldo) {
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)N * OC >= PAR_MIN)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * ldo, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    if (N == 1) { /* one row (a sampled token): GEMV, without GEMM's packing of all of w (half the time at 124M) */
        int nt = nthr(b), chunk = ((OC + nt - 1) / nt + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)OC * C >= 262144)
        for (int o0 = 0; o0 < OC; o0 += chunk) { /* as sgemm_par: a fixed split, one call per output */
            int no = OC - o0 < chunk ? OC - o0 : chunk;
            cblas_sgemv(CblasRowMajor, CblasNoTrans, no, C, 1.0f, w + (size_t)o0 * C, C, inp, 1, beta, out + o0, 1);
        }
        return;
    }
    sgemm_par(b, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out, ldo);
}

static void f32_matmul_backward(Backend *b, float *dinp, float *dw, float *dbias,
                                const float *dout, const float *inp, const float *w, int N, int C,
                                int OC, int ldo) {
    if (dinp) sgemm_par(b, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, ldo, w, C, 0.0f, dinp, C);
    if (dw) sgemm_par(b, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, ldo, inp, C, 1.0f, dw, C);
    if (dbias) colsum_accumulate(b, dbias, dout, N, OC, (size_t)ldo);
}

/* ------------------------------------------------------------------ gelu, add, scale */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static void f32_gelu_forward(Backend *b, float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

static void f32_gelu_backward(Backend *b, float *dinp, const float *inp, const float *dout,
                              size_t n) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float x2 = x * x;
        float u = GELU_K * (x + GELU_A * x2 * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x2);
        dinp[i] = g * dout[i];
    }
}

static void f32_add(Backend *b, float *out, const float *x, const float *y, size_t n) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = x[i] + y[i];
}

static void cpu_scale(Backend *b, float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* ------------------------------------------------------------------ cross-entropy */

static void f32_crossentropy(Backend *b, float *losses, float *logits, const int *targets, int N,
                             int V, int ld, float dloss_scale, int compute_grad) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (N > 1 && (size_t)N * V >= PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * ld;
        int tgt = targets[n];
        if (tgt == -100) {
            losses[n] = 0.0f;
            if (compute_grad) memset(x, 0, (size_t)V * sizeof(float));
            continue;
        }
        if (tgt < 0 || tgt >= V) { /* caller validates; make a bad target loud, never silent */
            losses[n] = NAN;
            if (compute_grad)
                for (int i = 0; i < V; i++) x[i] = NAN;
            continue;
        }
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        float xt = x[tgt];
        /* the loops below vectorise (expf through libmvec); sums in double, in a fixed order */
        double sum = 0.0;
        if (compute_grad) {
            /* keep exp(x - max) in place: the gradient needs it */
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < V; i++) {
                float e = expf(x[i] - mx);
                x[i] = e;
                sum += e;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < V; i++) sum += expf(x[i] - mx);
        }
        losses[n] = (float)(log(sum) + (double)mx - (double)xt);
        if (compute_grad) {
            float f = (float)((double)dloss_scale / sum);
#pragma omp simd
            for (int i = 0; i < V; i++) x[i] *= f;
            x[tgt] -= dloss_scale;
        }
    }
}

/* ------------------------------------------------------------------ optimizer, norms */

static void cpu_to_act(Backend *b, act_t *dst, const float *src, size_t n);

static void cpu_adamw(Backend *b, float *param, const float *grad, float *m, float *v, act_t *act_copy,
                      const AdamwRun *runs, int n_runs, float lr, float beta1, float beta2, float eps, int t) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float step = (float)((double)lr / bc1);
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    for (int r = 0; r < n_runs; r++) {
        const size_t lo = runs[r].begin, hi = runs[r].end;
        float decay = (float)(1.0 - (double)lr * (double)runs[r].weight_decay);
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (hi - lo >= PAR_MIN)
        for (size_t i = lo; i < hi; i++) {
            float g = grad[i];
            float mi = beta1 * m[i] + omb1 * g;
            float vi = beta2 * v[i] + omb2 * g * g;
            m[i] = mi;
            v[i] = vi;
            float p = param[i] * decay;
            param[i] = p - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
        }
        /* the CPU reads the params again: no bandwidth to save */
        if (act_copy && hi > lo) cpu_to_act(b, backend_act_at(b, act_copy, lo), param + lo, hi - lo);
    }
}

static double cpu_sum_squares(Backend *b, const float *x, size_t n) {
    b->host_waits++;
    double part[SS_PARTS];
    size_t chunk = (n + SS_PARTS - 1) / SS_PARTS;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (int p = 0; p < SS_PARTS; p++) {
        size_t i0 = (size_t)p * chunk;
        size_t i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
        if (i0 < i1) {
            double acc[4] = {0, 0, 0, 0};
            size_t i = i0;
            for (; i + 4 <= i1; i += 4)
                for (int j = 0; j < 4; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
            s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            for (; i < i1; i++) s += (double)x[i] * (double)x[i];
        }
        part[p] = s;
    }
    double total = 0.0;
    for (int p = 0; p < SS_PARTS; p++) total += part[p];
    return total;
}

/* ------------------------------------------------------------------ precision
 *
 * The ops above compute on fp32 buffers. With act_dtype fp32 the table's ops call them directly.
 * With bf16 they widen each act_t input into an fp32 buffer, run the same fp32 op, and round
 * each act_t output once to bf16 (nearest even): exactly the contract of backend.h, so this is
 * the reference the CUDA backend's bf16 kernels are checked against. It is an emulation, slower
 * than fp32 on a CPU; the widening buffers are the backend's own (not in the plan's categories),
 * grown on first use to the largest tensor seen. */

float *cpu_wide_slot(Backend *b, int slot, size_t n) {
    CpuImpl *im = b->impl;
    if (n > im->wide_cap[slot]) {
        im->wide[slot] = gt_xrealloc(im->wide[slot], (n ? n : 1) * sizeof(float));
        im->wide_cap[slot] = n;
    }
    return im->wide[slot];
}

static void widen(Backend *b, float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = gt_bf16_to_f32(src[i]);
}

static void narrow(Backend *b, uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = gt_f32_to_bf16(src[i]);
}

const float *cpu_act_in(Backend *b, int slot, const act_t *x, size_t n) {
    if (b->act_dtype == GT_F32 || !x) return x;
    float *w = cpu_wide_slot(b, slot, n);
    widen(b, w, x, n);
    return w;
}

float *cpu_act_out(Backend *b, int slot, act_t *x, size_t n, bool read) {
    if (b->act_dtype == GT_F32 || !x) return x;
    float *w = cpu_wide_slot(b, slot, n);
    if (read) widen(b, w, x, n);
    return w;
}

void cpu_act_done(Backend *b, act_t *x, const float *w, size_t n) {
    if (b->act_dtype == GT_F32 || !x) return;
    narrow(b, x, w, n);
}

static void cpu_encoder_forward(Backend *b, act_t *out, const int *tokens, const act_t *wte, const act_t *wpe,
                                int B, int T, int C, const int *pos) {
    /* bf16: widen the table rows up to the largest token and the largest position (pos[] may
     * hold any positions, e.g. a decode batch's, not only those below T; only the emulation
     * needs V and P, so the fp32 path skips the scan) */
    const size_t BTC = (size_t)B * T * C;
    int V = 0, P = pos ? 0 : T;
    if (b->act_dtype != GT_F32)
        for (int i = 0; i < B * T; i++) {
            if (tokens[i] + 1 > V) V = tokens[i] + 1;
            if (pos && pos[i] + 1 > P) P = pos[i] + 1;
        }
    float *o = cpu_act_out(b, 0, out, BTC, false);
    f32_encoder_forward(b, o, tokens, cpu_act_in(b, 1, wte, (size_t)V * C), cpu_act_in(b, 2, wpe, (size_t)P * C), B, T, C,
                        pos);
    cpu_act_done(b, out, o, BTC);
}

static void cpu_encoder_backward(Backend *b, float *dwte, float *dwpe, const act_t *dout, const int *tokens, int B,
                                 int T, int C, const int *pos) {
    f32_encoder_backward(b, dwte, dwpe, cpu_act_in(b, 0, dout, (size_t)B * T * C), tokens, B, T, C, pos);
}

static void cpu_layernorm_forward(Backend *b, act_t *out, float *mean, float *rstd, const act_t *inp, const act_t *w,
                                  const act_t *bias, int N, int C, float eps) {
    const size_t NC = (size_t)N * C;
    float *o = cpu_act_out(b, 0, out, NC, false);
    f32_layernorm_forward(b, o, mean, rstd, cpu_act_in(b, 1, inp, NC), cpu_act_in(b, 2, w, (size_t)C),
                          cpu_act_in(b, 3, bias, (size_t)C), N, C, eps);
    cpu_act_done(b, out, o, NC);
}

static void cpu_layernorm_backward(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                                   const act_t *inp, const act_t *w, const float *mean, const float *rstd, int N,
                                   int C) {
    const size_t NC = (size_t)N * C;
    float *di = cpu_act_out(b, 0, dinp, NC, true);
    f32_layernorm_backward(b, di, dw, dbias, cpu_act_in(b, 1, dout, NC), cpu_act_in(b, 2, inp, NC),
                           cpu_act_in(b, 3, w, (size_t)C), mean, rstd, N, C);
    cpu_act_done(b, dinp, di, NC);
}

/* strided act tensors are widened and rounded whole, padding included (it is unspecified) */
static void cpu_matmul_forward(Backend *b, act_t *out, const act_t *inp, const act_t *w, const act_t *bias, int N,
                               int C, int OC, int ldo) {
    float *o = cpu_act_out(b, 0, out, (size_t)N * ldo, false);
    f32_matmul_forward(b, o, cpu_act_in(b, 1, inp, (size_t)N * C), cpu_act_in(b, 2, w, (size_t)OC * C),
                       cpu_act_in(b, 3, bias, (size_t)OC), N, C, OC, ldo);
    cpu_act_done(b, out, o, (size_t)N * ldo);
}

static void cpu_matmul_backward(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                                const act_t *inp, const act_t *w, int N, int C, int OC, int ldo) {
    float *di = cpu_act_out(b, 0, dinp, (size_t)N * C, false);
    f32_matmul_backward(b, di, dw, dbias, cpu_act_in(b, 1, dout, (size_t)N * ldo), cpu_act_in(b, 2, inp, (size_t)N * C),
                        cpu_act_in(b, 3, w, (size_t)OC * C), N, C, OC, ldo);
    cpu_act_done(b, dinp, di, (size_t)N * C);
}

static void cpu_gelu_forward(Backend *b, act_t *out, const act_t *inp, size_t n) {
    float *o = cpu_act_out(b, 0, out, n, false);
    f32_gelu_forward(b, o, cpu_act_in(b, 1, inp, n), n);
    cpu_act_done(b, out, o, n);
}

static void cpu_gelu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, size_t n) {
    float *di = cpu_act_out(b, 0, dinp, n, false);
    f32_gelu_backward(b, di, cpu_act_in(b, 1, inp, n), cpu_act_in(b, 2, dout, n), n);
    cpu_act_done(b, dinp, di, n);
}

static void cpu_add(Backend *b, act_t *out, const act_t *x, const act_t *y, size_t n) {
    float *o = cpu_act_out(b, 0, out, n, false);
    f32_add(b, o, cpu_act_in(b, 1, x, n), cpu_act_in(b, 2, y, n), n);
    cpu_act_done(b, out, o, n);
}

/* fused: widen x and y once, add and layernorm per row (res rounded to bf16 first under bf16),
 * round both outputs once. Equal to cpu_add + cpu_layernorm_forward bit for bit. */
static void cpu_residual_layernorm_forward(Backend *b, act_t *res, act_t *out, float *mean, float *rstd,
                                           const act_t *x, const act_t *y, const act_t *w, const act_t *bias,
                                           int N, int C, float eps) {
    const size_t NC = (size_t)N * C;
    const float *xw = cpu_act_in(b, 1, x, NC), *yw = cpu_act_in(b, 2, y, NC);
    const float *ww = cpu_act_in(b, 3, w, (size_t)C), *bw = cpu_act_in(b, 4, bias, (size_t)C);
    float *r = cpu_act_out(b, 0, res, NC, false);
    float *o = cpu_act_out(b, 5, out, NC, false);
    f32_residual_layernorm_forward(b, r, o, mean, rstd, xw, yw, ww, bw, N, C, eps, b->act_dtype == GT_BF16);
    cpu_act_done(b, res, r, NC);
    cpu_act_done(b, out, o, NC);
}

static void cpu_crossentropy(Backend *b, float *losses, act_t *logits, const int *targets, int N, int V, int ld,
                             float dloss_scale, int compute_grad) {
    const size_t NV = (size_t)N * ld;
    float *x = cpu_act_out(b, 0, logits, NV, true);
    f32_crossentropy(b, losses, x, targets, N, V, ld, dloss_scale, compute_grad);
    if (compute_grad) cpu_act_done(b, logits, x, NV);
}

static void cpu_to_act(Backend *b, act_t *dst, const float *src, size_t n) {
    if (b->act_dtype == GT_F32) {
        if (dst != src) memcpy(dst, src, n * sizeof(float));
        return;
    }
    narrow(b, dst, src, n);
}

static void cpu_convert(Backend *b, void *dst, GtDtype dst_dtype, const void *src, GtDtype src_dtype, size_t n) {
    if (dst_dtype == src_dtype)
        memcpy(dst, src, n * gt_dtype_size(dst_dtype));
    else if (dst_dtype == GT_F32)
        widen(b, dst, src, n);
    else
        narrow(b, dst, src, n);
}

/* ------------------------------------------------------------------ open / close */

static void cpu_timer_start(Backend *b) { ((CpuImpl *)b->impl)->timer_start = gt_now_seconds(); }
static double cpu_timer_elapsed_ms(Backend *b) {
    b->host_waits++;
    return (gt_now_seconds() - ((CpuImpl *)b->impl)->timer_start) * 1e3;
}

static void cpu_close(Backend *b) {
    if (!b) return;
    CpuImpl *im = b->impl;
    if (im)
        for (int i = 0; i < WIDE_SLOTS; i++) free(im->wide[i]);
    free(b->impl);
    free(b);
}

static void cpu_memory_info(Backend *b, uint64_t *free_bytes, uint64_t *total_bytes);

static const BackendOps k_cpu_ops = {
    .name = "cpu",
    .caps = GT_CAP_POSITIONS,
    .close = cpu_close,
    .dev_alloc = cpu_alloc,
    .dev_free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .to_device = cpu_to_device,
    .to_host = cpu_to_host,
    .dev_copy = cpu_dev_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .offload_to_host = cpu_offload_to_host,
    .offload_to_device = cpu_offload_to_device,
    .offload_wait = cpu_offload_wait,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .add = cpu_add,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    /* matmul_gelu_forward: NULL, optional; backend.c composes matmul_forward + gelu_forward */
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .residual_rmsnorm_forward = cpu_residual_rmsnorm_forward,
    .head_rmsnorm_forward = cpu_head_rmsnorm_forward,
    .head_rmsnorm_backward = cpu_head_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .crossentropy = cpu_crossentropy,
    .adamw = cpu_adamw,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .to_act = cpu_to_act,
    .timer_start = cpu_timer_start,
    .timer_elapsed_ms = cpu_timer_elapsed_ms,
    .memory_info = cpu_memory_info,
    .gemm = cpu_gemm,
    .axpby_rows = cpu_axpby_rows,
    .dropout = cpu_dropout,
    .dora_norm = cpu_dora_norm,
    .dora_forward = cpu_dora_forward,
    .dora_backward = cpu_dora_backward,
    .convert = cpu_convert,
    .dequant_nf4 = cpu_dequant_nf4,
    .kv_store = cpu_kv_store,
    .attention_cached = cpu_attention_cached,
};

/* "model name : AMD EPYC 7763 64-Core Processor" from /proc/cpuinfo, else "unknown CPU" */
static void cpu_model_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *p = strchr(line, ':');
        if (!p) continue;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, "\r\n");
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        if (len > 0) snprintf(buf, cap, "%.*s", (int)len, p);
        break;
    }
    fclose(f);
}

/* MemAvailable / MemTotal from /proc/meminfo, in bytes (0 when unknown) */
static void cpu_meminfo(uint64_t *avail, uint64_t *total) {
    *avail = 0;
    *total = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (uint64_t)kb * 1024u;
        else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = (uint64_t)kb * 1024u;
    }
    fclose(f);
}

static void cpu_memory_info(Backend *b, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)b;
    cpu_meminfo(free_bytes, total_bytes);
}

int cpu_backend_create(Backend **out, int num_threads, GtError *err) {
    *out = NULL;
    if (num_threads < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "num_threads: expected >= 0, found %d", num_threads);
    Backend *b = calloc(1, sizeof *b);
    CpuImpl *impl = calloc(1, sizeof *impl);
    if (!b || !impl) {
        free(b);
        free(impl);
        return gt_error(err, GT_EXIT_FAILURE, "cpu backend: out of host memory");
    }
    if (num_threads == 0) {
        num_threads = omp_get_max_threads();
    } else {
        omp_set_num_threads(num_threads);
    }
    if (num_threads < 1) num_threads = 1;
    /* GEMMs are split across OpenMP threads (sgemm_par), each calling OpenBLAS single-threaded */
    openblas_set_num_threads(1);
    impl->num_threads = num_threads;
    b->ops = &k_cpu_ops;
    b->impl = impl;
    b->num_threads = num_threads;
    char model[96];
    cpu_model_name(model, sizeof model);
    snprintf(b->device_name, sizeof b->device_name, "cpu (%s, %d thread%s)", model, num_threads,
             num_threads == 1 ? "" : "s");
    cpu_meminfo(&b->device_free_bytes, &b->device_total_bytes);
    *out = b;
    return 0;
}
