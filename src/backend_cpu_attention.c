/* backend_cpu_attention.c - the CPU backend's causal self-attention (attention_forward,
 * attention_backward of backend.h): flash-style tiles of single-threaded cblas_sgemm calls, fp32
 * compute, the bf16 act dtype through the backend's widening helpers (backend_cpu_internal.h). */
#include "backend_cpu_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

/* Flash-style, tiled: per head, a block of ATT_BQ query rows meets one tile of keys at a time,
 * and every product of the two (S = Q K^T, P V, and in backward dP = dO V^T, dV += P^T dO,
 * dK += dS^T Q, dQ += dS K) is one single-threaded cblas_sgemm on the tile, reading q/k/v and
 * writing out/dqkv in place through their leading dimensions. Scratch is a tile or two of
 * ATT_BQ x ATT_BK floats on each thread's stack; B*NH*T*T is never formed.
 * Determinism: each work item (forward: a (b, h, query block); backward: a whole (b, h)) is
 * computed by one thread with a fixed sequence of calls whose shapes depend only on (T, hs), so
 * the bits do not depend on which thread runs it, on scheduling, or on the thread count. */
#define ATT_BQ 64 /* query rows per block */
#define ATT_BK 64 /* keys per tile */

/* how many of the keys k0..k0+nk-1 query row q may see (causal mask) */
static inline int att_valid(int q, int k0, int nk) {
    int v = q - k0 + 1;
    return v < 0 ? 0 : (v > nk ? nk : v);
}

static inline float max_f(const float *restrict a, int n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = a[i] > m ? a[i] : m;
    return m;
}

/* forward of one block of nq query rows starting at i0 of head h of one sequence */
static void att_fwd_block(float *restrict o, float *restrict lse_row, const float *base, int C,
                          int hs, int h, int i0, int nq, float scale) {
    size_t C3 = (size_t)3 * C;
    float S[ATT_BQ * ATT_BK] __attribute__((aligned(64)));
    float m[ATT_BQ], l[ATT_BQ];
    const float *q = base + (size_t)i0 * C3 + (size_t)h * hs;
    const float *k = base + C + (size_t)h * hs;
    const float *v = k + C;
    int kend = i0 + nq;
    for (int r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int k0 = 0; k0 < kend; k0 += ATT_BK) {
        int nk = kend - k0 < ATT_BK ? kend - k0 : ATT_BK;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, q, (int)C3,
                    k + (size_t)k0 * C3, (int)C3, 0.0f, S, ATT_BK);
        for (int r = 0; r < nq; r++) {
            float *s = S + (size_t)r * ATT_BK;
            int nv = att_valid(i0 + r, k0, nk);
            float mx = nv > 0 ? max_f(s, nv) : -INFINITY;
            float mnew = mx > m[r] ? mx : m[r];
            float f = 1.0f;
            if (mnew > m[r]) {
                f = expf(m[r] - mnew); /* exp(-inf) = 0 on the first tile */
                m[r] = mnew;
            }
#pragma omp simd
            for (int j = 0; j < nv; j++) s[j] = expf(s[j] - mnew);
            for (int j = nv; j < nk; j++) s[j] = 0.0f;
            l[r] = l[r] * f + sum_f(s, nk);
            if (k0 > 0 && f != 1.0f) {
                float *orow = o + (size_t)r * C;
                for (int i = 0; i < hs; i++) orow[i] *= f;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, S, ATT_BK,
                    v + (size_t)k0 * C3, (int)C3, k0 > 0 ? 1.0f : 0.0f, o, C);
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r];
        float *orow = o + (size_t)r * C;
        for (int i = 0; i < hs; i++) orow[i] *= inv;
        lse_row[r] = m[r] + logf(l[r]);
    }
}

static void f32_attention_forward(Backend *b, float *out, float *lse, const float *qkv, int B,
                                  int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    int nqb = (T + ATT_BQ - 1) / ATT_BQ;
    int items = B * NH * nqb;
    /* items run largest query block first (causal: later blocks see more keys) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr(b)) if (items > 1 && (size_t)B * NH * T * T * hs >= PAR_MIN)
    for (int it = 0; it < items; it++) {
        int qb = nqb - 1 - it % nqb;
        int u = it / nqb;
        int h = u % NH;
        int bb = u / NH;
        int i0 = qb * ATT_BQ;
        int nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
        att_fwd_block(out + ((size_t)bb * T + i0) * C + (size_t)h * hs, lse + (size_t)u * T + i0,
                      qkv + (size_t)bb * T * C3, C, hs, h, i0, nq, scale);
    }
}

/* backward of head h of one sequence: writes (overwrites) its q, k and v columns of dqkv */
static void att_bwd_head(float *dbase, const float *base, const float *dout, const float *lrow,
                         const float *Drow, int T, int C, int hs, int h, float scale) {
    size_t C3 = (size_t)3 * C;
    float P[ATT_BQ * ATT_BK] __attribute__((aligned(64)));
    float dS[ATT_BQ * ATT_BK] __attribute__((aligned(64)));
    size_t hoff = (size_t)h * hs;
    /* key tiles outer: dK, dV of a tile are finished before the next; dQ of each query block
     * accumulates over key tiles in increasing order */
    for (int k0 = 0; k0 < T; k0 += ATT_BK) {
        int nk = T - k0 < ATT_BK ? T - k0 : ATT_BK;
        const float *k = base + (size_t)k0 * C3 + C + hoff;
        const float *v = k + C;
        float *dk = dbase + (size_t)k0 * C3 + C + hoff;
        float *dv = dk + C;
        int first = 1;
        for (int i0 = k0 / ATT_BQ * ATT_BQ; i0 < T; i0 += ATT_BQ) {
            int nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
            if (i0 + nq - 1 < k0) continue; /* no row of this block sees the tile */
            const float *q = base + (size_t)i0 * C3 + hoff;
            const float *dy = dout + (size_t)i0 * C + hoff;
            float *dq = dbase + (size_t)i0 * C3 + hoff;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, q, (int)C3, k,
                        (int)C3, 0.0f, P, ATT_BK);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dy, C, v,
                        (int)C3, 0.0f, dS, ATT_BK);
            for (int r = 0; r < nq; r++) {
                float *p = P + (size_t)r * ATT_BK, *ds = dS + (size_t)r * ATT_BK;
                int nv = att_valid(i0 + r, k0, nk);
                float l = lrow[i0 + r], Dt = Drow[i0 + r];
#pragma omp simd
                for (int j = 0; j < nv; j++) {
                    float pj = expf(p[j] - l);
                    p[j] = pj;
                    ds[j] = pj * (ds[j] - Dt) * scale;
                }
                for (int j = nv; j < nk; j++) {
                    p[j] = 0.0f;
                    ds[j] = 0.0f;
                }
            }
            float beta = first ? 0.0f : 1.0f;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, P, ATT_BK, dy,
                        C, beta, dv, (int)C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, dS, ATT_BK, q,
                        (int)C3, beta, dk, (int)C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, dS, ATT_BK,
                        k, (int)C3, k0 > 0 ? 1.0f : 0.0f, dq, (int)C3);
            first = 0;
        }
    }
}

static void f32_attention_backward(Backend *b, float *dqkv, float *workspace, const float *dout,
                                   const float *qkv, const float *out, const float *lse, int B,
                                   int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    int rows = B * NH * T;
    float *D = workspace;
    /* D[b,h,t] = sum_i dout * out over the head's channels */
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if ((size_t)rows * hs >= PAR_MIN)
    for (int r = 0; r < rows; r++) {
        int t = r % T;
        int h = (r / T) % NH;
        int bb = r / (T * NH);
        size_t off = ((size_t)bb * T + t) * C + (size_t)h * hs;
        D[r] = dot_f(dout + off, out + off, hs);
    }
    int units = B * NH;
    /* each (b, h) owns its head's columns of dqkv for batch b: deterministic */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr(b)) if (units > 1 && (size_t)rows * T * hs >= PAR_MIN)
    for (int u = 0; u < units; u++) {
        int h = u % NH;
        int bb = u / NH;
        att_bwd_head(dqkv + (size_t)bb * T * C3, qkv + (size_t)bb * T * C3,
                     dout + (size_t)bb * T * C, lse + (size_t)u * T, D + (size_t)u * T, T, C, hs,
                     h, scale);
    }
}

/* ------------------------------------------------------------------ act dtype wrappers */

/* until grouped-query heads and the sliding window are in: plain multi-head only */
static void cpu_attention_check(int NH, int NKV, int window) {
    if (NKV != NH || window != 0) {
        fprintf(stderr, "attention: grouped-query heads / sliding window not implemented on the CPU yet\n");
        exit(GT_EXIT_FAILURE);
    }
}

void cpu_attention_forward(Backend *b, act_t *out, float *lse, const act_t *qkv, int B, int T, int NH,
                                  int NKV, int hd, int window) {
    cpu_attention_check(NH, NKV, window);
    const int C = NH * hd;
    const size_t BTC = (size_t)B * T * C;
    float *o = cpu_act_out(b, 0, out, BTC, false);
    f32_attention_forward(b, o, lse, cpu_act_in(b, 1, qkv, 3 * BTC), B, T, C, NH);
    cpu_act_done(b, out, o, BTC);
}

void cpu_attention_backward(Backend *b, act_t *dqkv, float *workspace, const act_t *dout, const act_t *qkv,
                                   const act_t *out, const float *lse, int B, int T, int NH, int NKV, int hd,
                                   int window) {
    cpu_attention_check(NH, NKV, window);
    const int C = NH * hd;
    const size_t BTC = (size_t)B * T * C;
    float *dq = cpu_act_out(b, 0, dqkv, 3 * BTC, false);
    f32_attention_backward(b, dq, workspace, cpu_act_in(b, 1, dout, BTC), cpu_act_in(b, 2, qkv, 3 * BTC),
                           cpu_act_in(b, 3, out, BTC), lse, B, T, C, NH);
    cpu_act_done(b, dqkv, dq, 3 * BTC);
}
