/* backend_cpu_decode.c - the CPU backend's generation ops (kv_store, attention_cached of
 * backend.h): the KV cache is read element by element in its own dtype (fp32, or bf16 widened
 * on the fly), never widened whole, since a cache is many times the size of one call's tokens.
 * Each (token, query head) is one thread's work in a fixed order (two passes: the scores and
 * their maximum, then exp, sum and the weighted values in ascending key order), so the bits do
 * not depend on the thread count. */
#include "backend_cpu_internal.h"

#include <stdlib.h>
#include <string.h>

void cpu_kv_store(Backend *b, act_t *kc, act_t *vc, const act_t *qkv, const int *slot, const int *pos, int N, int NH,
                  int NKV, int hd, int ctx) {
    const size_t es = gt_dtype_size(b->act_dtype), R = (size_t)(NH + 2 * NKV) * hd, KV = (size_t)NKV * hd;
    for (int i = 0; i < N; i++) {
        const char *row = (const char *)qkv + (size_t)i * R * es;
        const size_t at = ((size_t)slot[i] * ctx + (size_t)pos[i]) * KV * es;
        memcpy((char *)kc + at, row + (size_t)NH * hd * es, KV * es);
        memcpy((char *)vc + at, row + (size_t)(NH + NKV) * hd * es, KV * es);
    }
}

/* n values of x (act dtype) from element off, as fp32 */
static inline void widen(float *dst, const act_t *x, size_t off, int n, bool bf) {
    if (bf)
        for (int c = 0; c < n; c++) dst[c] = gt_bf16_to_f32(((const uint16_t *)x)[off + c]);
    else
        memcpy(dst, (const float *)x + off, (size_t)n * sizeof *dst);
}

void cpu_attention_cached(Backend *b, act_t *out, const act_t *qkv, const act_t *kc, const act_t *vc, const int *slot,
                          const int *pos, int N, int NH, int NKV, int hd, int ctx, int window) {
    const bool bf = b->act_dtype == GT_BF16;
    const size_t R = (size_t)(NH + 2 * NKV) * hd, KV = (size_t)NKV * hd;
    const int G = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hd);
    int most = 0; /* the longest row any token reads */
    for (int i = 0; i < N; i++)
        if (pos[i] + 1 > most) most = pos[i] + 1;
#pragma omp parallel num_threads(nthr(b)) if ((size_t)N * NH * (size_t)most * hd >= PAR_MIN)
    {
        /* per thread: the scores of one row, and q, k_j, v_j and the output widened */
        float *s = gt_xmalloc(((size_t)most + 4 * (size_t)hd) * sizeof *s);
        float *q = s + most, *kj = q + hd, *acc = kj + hd, *vj = acc + hd;
#pragma omp for schedule(static)
        for (long w = 0; w < (long)N * NH; w++) {
            const int i = (int)(w / NH), h = (int)(w % NH), g = h / G, p = pos[i];
            const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            const size_t base = (size_t)slot[i] * ctx * KV + (size_t)g * hd;
            widen(q, qkv, (size_t)i * R + (size_t)h * hd, hd, bf);
            float mx = -INFINITY;
            for (int j = lo; j <= p; j++) {
                const float *k = bf ? kj : (const float *)kc + base + (size_t)j * KV;
                if (bf) widen(kj, kc, base + (size_t)j * KV, hd, true);
                s[j - lo] = dot_f(q, k, hd) * scale;
                if (s[j - lo] > mx) mx = s[j - lo];
            }
            float sum = 0.0f;
            for (int c = 0; c < hd; c++) acc[c] = 0.0f;
            for (int j = lo; j <= p; j++) {
                const float e = expf(s[j - lo] - mx);
                const float *v = bf ? vj : (const float *)vc + base + (size_t)j * KV;
                if (bf) widen(vj, vc, base + (size_t)j * KV, hd, true);
                sum += e;
                for (int c = 0; c < hd; c++) acc[c] += e * v[c];
            }
            const float inv = 1.0f / sum;
            const size_t o = (size_t)i * NH * hd + (size_t)h * hd;
            if (bf)
                for (int c = 0; c < hd; c++) ((uint16_t *)out)[o + c] = gt_f32_to_bf16(acc[c] * inv);
            else
                for (int c = 0; c < hd; c++) ((float *)out)[o + c] = acc[c] * inv;
        }
        free(s);
    }
}
