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
 *
 * Grouped-query heads: query head h reads kv head h / G (G = NH / NKV query heads per kv head);
 * qkv rows are [NH q heads | NKV k heads | NKV v heads], hd wide each. Sliding window W: row t
 * sees keys t-W+1..t. Key tiles stay on the fixed grid k0 = 0, ATT_BK, ...; a tile no row of a
 * query block sees is skipped, a partly visible one is masked per row (att_lo, att_valid), as
 * the causal mask is. No window (or W >= T) takes exactly the path of plain causal attention.
 * Positions (packed rows, backend.h): row t's first key is also at least t - pos[t] (its example's
 * first token); as t - W + 1, that start never decreases with t, so a block's first row has the
 * block's first visible key and the same tile skipping holds. pos NULL: the code path without.
 *
 * Determinism: each work item (forward: a (b, h, query block); backward: a whole (b, kv head),
 * its G query heads in order h = g*G, g*G+1, ..., so dK and dV of the kv head sum the group's
 * heads in that order, no atomics) is computed by one thread with a fixed sequence of calls whose
 * shapes depend only on (T, hd, W), so the bits do not depend on which thread runs it, on
 * scheduling, or on the thread count. With NKV = NH and no window the calls are those of the plain
 * multi-head code before grouped heads were added: GPT-2's bits are unchanged. */
#define ATT_BQ 64 /* query rows per block */
#define ATT_BK 64 /* keys per tile */

typedef struct {
    int T, NH, NKV, hd;
    int G;       /* query heads per kv head */
    int W;       /* the window, W <= T (W = T: none; keys t-T+1..t are all of 0..t) */
    int R;       /* qkv row stride, (NH + 2*NKV) * hd */
    int C;       /* out / dout row stride, NH * hd */
    float scale; /* 1/sqrt(hd) */
} AttGeom;

static AttGeom att_geom(int T, int NH, int NKV, int hd, int window) {
    AttGeom g = {T, NH, NKV, hd, NH / NKV, (window <= 0 || window > T) ? T : window, (NH + 2 * NKV) * hd,
                 NH * hd, 1.0f / sqrtf((float)hd)};
    return g;
}

/* how many of the keys k0..k0+nk-1 query row q may see (causal mask): j < att_valid */
static inline int att_valid(int q, int k0, int nk) {
    int v = q - k0 + 1;
    return v < 0 ? 0 : (v > nk ? nk : v);
}

/* the first key query row q may see: the window's t - W + 1, or its example's first token
 * (pos: the sequence's positions, NULL without) */
static inline int att_start(int q, int W, const int *pos) {
    int s = q - W + 1;
    if (pos && q - pos[q] > s) s = q - pos[q];
    return s;
}

/* the first of the keys k0.. that query row q may see: j >= att_lo, at most hi */
static inline int att_lo(int q, int k0, int W, const int *pos, int hi) {
    int lo = att_start(q, W, pos) - k0;
    return lo < 0 ? 0 : (lo > hi ? hi : lo);
}

/* the first key tile query row q0 (and so every later row) may see */
static inline int att_first_tile(int q0, int W, const int *pos) {
    int j = att_start(q0, W, pos);
    return j > 0 ? j / ATT_BK * ATT_BK : 0;
}

static inline float max_f(const float *restrict a, int n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = a[i] > m ? a[i] : m;
    return m;
}

/* forward of one block of nq query rows starting at i0 of query head h of one sequence */
static void att_fwd_block(float *restrict o, float *restrict lse_row, const float *base, const AttGeom *g, int h,
                          int i0, int nq, const int *pos) {
    const int R = g->R, C = g->C, hs = g->hd, kvh = h / g->G;
    float S[ATT_BQ * ATT_BK] __attribute__((aligned(64)));
    float m[ATT_BQ], l[ATT_BQ];
    const float *q = base + (size_t)i0 * R + (size_t)h * hs;
    const float *k = base + (size_t)(g->NH + kvh) * hs;
    const float *v = base + (size_t)(g->NH + g->NKV + kvh) * hs;
    int kbeg = att_first_tile(i0, g->W, pos), kend = i0 + nq;
    for (int r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int k0 = kbeg; k0 < kend; k0 += ATT_BK) {
        int nk = kend - k0 < ATT_BK ? kend - k0 : ATT_BK;
        bool first = k0 == kbeg;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, g->scale, q, R, k + (size_t)k0 * R, R,
                    0.0f, S, ATT_BK);
        for (int r = 0; r < nq; r++) {
            float *s = S + (size_t)r * ATT_BK;
            int hi = att_valid(i0 + r, k0, nk), lo = att_lo(i0 + r, k0, g->W, pos, hi);
            float *sv = s + lo; /* the visible keys: sv[0 .. nv) */
            int nv = hi - lo;
            float mx = nv > 0 ? max_f(sv, nv) : -INFINITY;
            float mnew = mx > m[r] ? mx : m[r];
            float f = 1.0f;
            if (mnew > m[r]) {
                f = expf(m[r] - mnew); /* exp(-inf) = 0 on the first tile */
                m[r] = mnew;
            }
#pragma omp simd
            for (int j = 0; j < nv; j++) sv[j] = expf(sv[j] - mnew);
            for (int j = 0; j < lo; j++) s[j] = 0.0f;
            for (int j = hi; j < nk; j++) s[j] = 0.0f;
            l[r] = l[r] * f + sum_f(s, nk);
            if (!first && f != 1.0f) {
                float *orow = o + (size_t)r * C;
                for (int i = 0; i < hs; i++) orow[i] *= f;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, S, ATT_BK, v + (size_t)k0 * R, R,
                    first ? 0.0f : 1.0f, o, C);
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r];
        float *orow = o + (size_t)r * C;
        for (int i = 0; i < hs; i++) orow[i] *= inv;
        lse_row[r] = m[r] + logf(l[r]);
    }
}

static void f32_attention_forward(Backend *b, float *out, float *lse, const float *qkv, int B, const AttGeom *g,
                                  const int *pos) {
    const int T = g->T, NH = g->NH;
    int nqb = (T + ATT_BQ - 1) / ATT_BQ;
    int items = B * NH * nqb;
    /* items run largest query block first (causal: later blocks see more keys) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr(b)) if (items > 1 && (size_t)B * NH * T * T * g->hd >= PAR_MIN)
    for (int it = 0; it < items; it++) {
        int qb = nqb - 1 - it % nqb;
        int u = it / nqb;
        int h = u % NH;
        int bb = u / NH;
        int i0 = qb * ATT_BQ;
        int nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
        att_fwd_block(out + ((size_t)bb * T + i0) * g->C + (size_t)h * g->hd, lse + (size_t)u * T + i0,
                      qkv + (size_t)bb * T * g->R, g, h, i0, nq, pos ? pos + (size_t)bb * T : NULL);
    }
}

/* backward of kv head kvh of one sequence and its G query heads, in order: writes (overwrites)
 * the q columns of those heads and the k and v columns of kvh in dqkv. lse_b, D_b: [NH, T] */
static void att_bwd_group(float *dbase, const float *base, const float *dout, const float *lse_b, const float *D_b,
                          const AttGeom *g, int kvh, const int *pos) {
    const int T = g->T, R = g->R, C = g->C, hs = g->hd, W = g->W;
    float P[ATT_BQ * ATT_BK] __attribute__((aligned(64)));
    float dS[ATT_BQ * ATT_BK] __attribute__((aligned(64)));
    const size_t koff = (size_t)(g->NH + kvh) * hs, voff = (size_t)(g->NH + g->NKV + kvh) * hs;
    for (int hh = 0; hh < g->G; hh++) {
        const int h = kvh * g->G + hh;
        const size_t qoff = (size_t)h * hs;
        const float *lrow = lse_b + (size_t)h * T, *Drow = D_b + (size_t)h * T;
        /* key tiles outer: dK, dV of a tile are finished (for this head) before the next; dQ of
         * each query block accumulates over key tiles in increasing order */
        for (int k0 = 0; k0 < T; k0 += ATT_BK) {
            int nk = T - k0 < ATT_BK ? T - k0 : ATT_BK;
            const float *k = base + (size_t)k0 * R + koff;
            const float *v = base + (size_t)k0 * R + voff;
            float *dk = dbase + (size_t)k0 * R + koff;
            float *dv = dbase + (size_t)k0 * R + voff;
            int first = hh == 0; /* the group's first head overwrites dK, dV; the others add */
            for (int i0 = k0 / ATT_BQ * ATT_BQ; i0 < T; i0 += ATT_BQ) {
                int nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
                if (i0 + nq - 1 < k0) continue; /* no row of this block sees the tile (causal) */
                if (k0 + nk - 1 < att_start(i0, W, pos)) break; /* before what this block and all later see */
                const float *q = base + (size_t)i0 * R + qoff;
                const float *dy = dout + (size_t)i0 * C + qoff;
                float *dq = dbase + (size_t)i0 * R + qoff;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, g->scale, q, R, k, R, 0.0f, P,
                            ATT_BK);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dy, C, v, R, 0.0f, dS, ATT_BK);
                for (int r = 0; r < nq; r++) {
                    float *p = P + (size_t)r * ATT_BK, *ds = dS + (size_t)r * ATT_BK;
                    int hi = att_valid(i0 + r, k0, nk), lo = att_lo(i0 + r, k0, W, pos, hi);
                    float *pv = p + lo, *dsv = ds + lo; /* the visible keys: [0 .. nv) */
                    int nv = hi - lo;
                    float l = lrow[i0 + r], Dt = Drow[i0 + r];
#pragma omp simd
                    for (int j = 0; j < nv; j++) {
                        float pj = expf(pv[j] - l);
                        pv[j] = pj;
                        dsv[j] = pj * (dsv[j] - Dt) * g->scale;
                    }
                    for (int j = 0; j < lo; j++) {
                        p[j] = 0.0f;
                        ds[j] = 0.0f;
                    }
                    for (int j = hi; j < nk; j++) {
                        p[j] = 0.0f;
                        ds[j] = 0.0f;
                    }
                }
                float beta = first ? 0.0f : 1.0f;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, P, ATT_BK, dy, C, beta, dv, R);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, dS, ATT_BK, q, R, beta, dk, R);
                /* dQ: the block's first visible tile overwrites */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, dS, ATT_BK, k, R,
                            k0 > att_first_tile(i0, W, pos) ? 1.0f : 0.0f, dq, R);
                first = 0;
            }
        }
    }
}

static void f32_attention_backward(Backend *b, float *dqkv, float *workspace, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, const AttGeom *g, const int *pos) {
    const int T = g->T, NH = g->NH, hs = g->hd, C = g->C;
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
    int units = B * g->NKV;
    /* each (b, kv head) owns its heads' columns of dqkv for batch b: deterministic */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr(b)) if (units > 1 && (size_t)rows * T * hs >= PAR_MIN)
    for (int u = 0; u < units; u++) {
        int kvh = u % g->NKV;
        int bb = u / g->NKV;
        att_bwd_group(dqkv + (size_t)bb * T * g->R, qkv + (size_t)bb * T * g->R, dout + (size_t)bb * T * C,
                      lse + (size_t)bb * NH * T, D + (size_t)bb * NH * T, g, kvh, pos ? pos + (size_t)bb * T : NULL);
    }
}

/* ------------------------------------------------------------------ act dtype wrappers */

/* the caller (the model) validates the shapes; a bad one here is a bug: loud, never silent */
static void att_check(int NH, int NKV, int hd) {
    if (NH <= 0 || NKV <= 0 || hd <= 0 || NH % NKV != 0) {
        fprintf(stderr, "attention: bad heads NH=%d NKV=%d hd=%d (NKV must divide NH)\n", NH, NKV, hd);
        exit(GT_EXIT_FAILURE);
    }
}

void cpu_attention_forward(Backend *b, act_t *out, float *lse, const act_t *qkv, int B, int T, int NH, int NKV,
                           int hd, int window, const int *pos) {
    att_check(NH, NKV, hd);
    if (B <= 0 || T <= 0) return;
    const AttGeom g = att_geom(T, NH, NKV, hd, window);
    const size_t BT = (size_t)B * T;
    float *o = cpu_act_out(b, 0, out, BT * g.C, false);
    f32_attention_forward(b, o, lse, cpu_act_in(b, 1, qkv, BT * g.R), B, &g, pos);
    cpu_act_done(b, out, o, BT * g.C);
}

void cpu_attention_backward(Backend *b, act_t *dqkv, float *workspace, const act_t *dout, const act_t *qkv,
                            const act_t *out, const float *lse, int B, int T, int NH, int NKV, int hd, int window,
                            const int *pos) {
    att_check(NH, NKV, hd);
    if (B <= 0 || T <= 0) return;
    const AttGeom g = att_geom(T, NH, NKV, hd, window);
    const size_t BT = (size_t)B * T;
    float *dq = cpu_act_out(b, 0, dqkv, BT * g.R, false);
    f32_attention_backward(b, dq, workspace, cpu_act_in(b, 1, dout, BT * g.C), cpu_act_in(b, 2, qkv, BT * g.R),
                           cpu_act_in(b, 3, out, BT * g.C), lse, B, &g, pos);
    cpu_act_done(b, dqkv, dq, BT * g.R);
}
