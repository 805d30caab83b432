/* ops_decode.c - the generation ops (backend.h's kv_store and attention_cached) through a scripted
 * history of decoding calls, against a double-precision reference written here (the textbook
 * softmax over a cache kept in doubles), never against a backend's op. Run by test_backend_ops.c's
 * decode row on the backend under test and, when that is not the CPU, on the CPU backend too in
 * the same test, so both are checked against the same reference.
 *
 * The history (positions < 144, up to 4 slots): a first call prefills three rows; then flat
 * batches mixing a prompt chunk of a fresh slot, a chunk continuing a row, and single tokens of
 * other rows at different positions, in a shuffled token order; then slot 3 is reused by a new
 * prompt shorter than its earlier tenant's, whose keys stay in the cache past pos (finite values
 * that would change the result if read), and slot 0 starts out holding stale finite values; the
 * never-written rest of the cache is NaN; last, a row grows past 128 positions (several of the
 * CUDA kernel's key chunks) with keys growing along the row (a ramp), so a later chunk holds the
 * maximum score and what an online softmax accumulated must be rescaled. After each call the cache must hold the stored k/v bits
 * exactly (kv_store is a copy) and everything else untouched, and attention_cached's out must be
 * the reference's within the fixture's bound (TOL in fp32: the ops compute in fp32 on act values,
 * the reference in double on the same values; TOL_BF16 under bf16: out is rounded once).
 *
 * Also encoder_forward and rope_forward with arbitrary per-token positions (B = 1, T = n tokens at
 * positions like 5, 17, 3, 0: the decode batch, not a packing structure) against the references
 * applied token by token at each token's position. */
#include "ops_fixture.h"
#include "ref_llama_ops.h"
#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int slot, pos0, n; /* n tokens of row slot at positions pos0 .. pos0 + n - 1 */
} Seg;
enum { MAX_SEGS = 4, DEC_SLOTS = 4, DEC_CTX = 144 };
typedef struct {
    int nseg;
    Seg s[MAX_SEGS];
} Call;
static const Call k_calls[] = {
    {3, {{1, 0, 20}, {3, 0, 39}, {2, 0, 5}}},            /* prefill three rows */
    {4, {{3, 39, 1}, {0, 0, 23}, {1, 20, 1}, {2, 5, 6}}}, /* a fresh prompt, a chunk, single tokens */
    {4, {{0, 23, 1}, {3, 40, 1}, {1, 21, 1}, {2, 11, 1}}}, /* one token per row */
    {2, {{3, 0, 9}, {0, 24, 1}}},                          /* slot 3 reused: keys 9..40 are stale */
    {3, {{3, 9, 1}, {1, 22, 1}, {2, 12, 3}}},
    {2, {{2, 15, 120}, {0, 25, 1}}},           /* a long chunk: keys past one 64-key chunk */
    {3, {{2, 135, 1}, {3, 10, 1}, {1, 23, 2}}},
};
#define NCALLS (sizeof k_calls / sizeof k_calls[0])

static void *xmalloc_t(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    cr_assert_not_null(p, "out of host memory (%zu bytes)", bytes);
    return p;
}

/* n host floats (representable in the act dtype) as the act dtype's bytes */
static void to_act_bytes(GtDtype act, void *dst, const float *src, size_t n) {
    if (act == GT_BF16)
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = gt_f32_to_bf16(src[i]);
    else
        memcpy(dst, src, n * sizeof *src);
}

static float rand_act(Rng *r, GtDtype act, float lo, float hi) {
    float v = rng_f(r, lo, hi);
    return act == GT_BF16 ? gt_bf16_to_f32(gt_f32_to_bf16(v)) : v;
}

/* out[N, NH*hd] in double: token i, head h over keys lo..pos[i] of row slot[i] of K, V */
static void ref_attention_cached(double *out, const float *qkv, const double *K, const double *V, const int *slot,
                                 const int *pos, int N, int NH, int NKV, int hd, int ctx, int window) {
    const size_t KV = (size_t)NKV * hd, R = (size_t)(NH + 2 * NKV) * hd;
    double *s = xmalloc_t((size_t)ctx * sizeof *s);
    for (int i = 0; i < N; i++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NKV), p = pos[i];
            const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            const float *q = qkv + (size_t)i * R + (size_t)h * hd;
            const size_t base = (size_t)slot[i] * ctx * KV + (size_t)g * hd;
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= p; j++) {
                double d = 0;
                for (int c = 0; c < hd; c++) d += (double)q[c] * K[base + (size_t)j * KV + c];
                s[j] = d / sqrt((double)hd);
                if (s[j] > mx) mx = s[j];
            }
            for (int j = lo; j <= p; j++) sum += (s[j] = exp(s[j] - mx));
            double *o = out + (size_t)i * NH * hd + (size_t)h * hd;
            for (int c = 0; c < hd; c++) {
                double a = 0;
                for (int j = lo; j <= p; j++) a += s[j] * V[base + (size_t)j * KV + c];
                o[c] = a / sum;
            }
        }
    free(s);
}

/* s: NH, NKV, hd, window */
static void decode_history(Fx *fx, const int *s, uint64_t seed) {
    const int NH = s[0], NKV = s[1], hd = s[2], window = s[3], ctx = DEC_CTX, slots = DEC_SLOTS;
    const GtDtype act = fx->act;
    const size_t es = gt_dtype_size(act), KV = (size_t)NKV * hd, R = (size_t)(NH + 2 * NKV) * hd;
    const size_t ncache = (size_t)slots * ctx * KV;
    const char *be = fx->be->ops->name;
    Rng r = {seed};
    int maxN = 0;
    for (size_t c = 0; c < NCALLS; c++) {
        int n = 0;
        for (int k = 0; k < k_calls[c].nseg; k++) n += k_calls[c].s[k].n;
        if (n > maxN) maxN = n;
    }
    /* the cache: slot 0 holds an earlier tenant's finite values, the rest NaN */
    float *kc0 = xmalloc_t(ncache * sizeof *kc0), *vc0 = xmalloc_t(ncache * sizeof *vc0);
    double *K = xmalloc_t(ncache * sizeof *K), *V = xmalloc_t(ncache * sizeof *V);
    char *wantk = xmalloc_t(ncache * es), *wantv = xmalloc_t(ncache * es);
    for (size_t e = 0; e < ncache; e++) {
        const bool stale = e < (size_t)ctx * KV;
        kc0[e] = stale ? rand_act(&r, act, -4, 4) : NAN;
        vc0[e] = stale ? rand_act(&r, act, -8, 8) : NAN;
        K[e] = kc0[e];
        V[e] = vc0[e];
    }
    to_act_bytes(act, wantk, kc0, ncache);
    to_act_bytes(act, wantv, vc0, ncache);
    void *d_kc = dmem(fx, ncache * es), *d_vc = dmem(fx, ncache * es);
    up(fx, d_kc, wantk, ncache * es);
    up(fx, d_vc, wantv, ncache * es);
    void *d_qkv = dmem(fx, (size_t)maxN * R * es), *d_out = dmem(fx, (size_t)maxN * NH * hd * es);
    int *d_slot = dmem(fx, (size_t)maxN * sizeof(int)), *d_pos = dmem(fx, (size_t)maxN * sizeof(int));
    float *qkv = xmalloc_t((size_t)maxN * R * sizeof *qkv), *nan = xmalloc_t((size_t)maxN * NH * hd * sizeof *nan);
    char *qkv_bytes = xmalloc_t((size_t)maxN * R * es), *nan_bytes = xmalloc_t((size_t)maxN * NH * hd * es);
    double *ref = xmalloc_t((size_t)maxN * NH * hd * sizeof *ref);
    int *slot = xmalloc_t((size_t)maxN * sizeof *slot), *pos = xmalloc_t((size_t)maxN * sizeof *pos);
    char *gotk = xmalloc_t(ncache * es), *gotv = xmalloc_t(ncache * es);
    float *got = xmalloc_t((size_t)maxN * NH * hd * sizeof *got);
    for (size_t e = 0; e < (size_t)maxN * NH * hd; e++) nan[e] = NAN;
    to_act_bytes(act, nan_bytes, nan, (size_t)maxN * NH * hd);

    for (size_t c = 0; c < NCALLS; c++) {
        int N = 0;
        for (int k = 0; k < k_calls[c].nseg; k++)
            for (int t = 0; t < k_calls[c].s[k].n; t++) {
                slot[N] = k_calls[c].s[k].slot;
                pos[N++] = k_calls[c].s[k].pos0 + t;
            }
        for (int i = N - 1; i > 0; i--) { /* a shuffled flat batch: rows interleaved */
            const int j = (int)(rng_next(&r) % (uint64_t)(i + 1)), ts = slot[i], tp = pos[i];
            slot[i] = slot[j], pos[i] = pos[j], slot[j] = ts, pos[j] = tp;
        }
        for (int i = 0; i < N; i++) { /* keys grow along the row: a ramp */
            const float ramp = 1.0f + (float)pos[i] / 32.0f;
            for (size_t e = 0; e < R; e++) {
                const bool key = e >= (size_t)NH * hd && e < (size_t)NH * hd + KV;
                qkv[(size_t)i * R + e] = rand_act(&r, act, key ? -1.5f * ramp : -1.5f, key ? 1.5f * ramp : 1.5f);
            }
        }
        to_act_bytes(act, qkv_bytes, qkv, (size_t)N * R);
        up(fx, d_qkv, qkv_bytes, (size_t)N * R * es);
        up(fx, d_slot, slot, (size_t)N * sizeof(int));
        up(fx, d_pos, pos, (size_t)N * sizeof(int));
        up(fx, d_out, nan_bytes, (size_t)N * NH * hd * es);
        fx->be->ops->kv_store(fx->be, d_kc, d_vc, d_qkv, d_slot, d_pos, N, NH, NKV, hd, ctx);
        fx->be->ops->attention_cached(fx->be, d_out, d_qkv, d_kc, d_vc, d_slot, d_pos, N, NH, NKV, hd, ctx, window);
        /* what the cache must hold now, and the reference */
        for (int i = 0; i < N; i++) {
            const size_t at = ((size_t)slot[i] * ctx + (size_t)pos[i]) * KV, row = (size_t)i * R + (size_t)NH * hd;
            memcpy(wantk + at * es, qkv_bytes + row * es, KV * es);
            memcpy(wantv + at * es, qkv_bytes + (row + KV) * es, KV * es);
            for (size_t e = 0; e < KV; e++) {
                K[at + e] = qkv[row + e];
                V[at + e] = qkv[row + KV + e];
            }
        }
        ref_attention_cached(ref, qkv, K, V, slot, pos, N, NH, NKV, hd, ctx, window);
        down(fx, gotk, d_kc, ncache * es);
        down(fx, gotv, d_vc, ncache * es);
        size_t badk = 0, badv = 0;
        for (size_t e = 0; e < ncache; e++) {
            badk += memcmp(gotk + e * es, wantk + e * es, es) != 0;
            badv += memcmp(gotv + e * es, wantv + e * es, es) != 0;
        }
        cr_expect_eq(badk + badv, 0,
                     "kv_store (%s backend, %s, NH=%d NKV=%d hd=%d, call %zu): %zu key and %zu value elements of "
                     "the cache are not the stored bits (or were touched)",
                     be, gt_dtype_name(act), NH, NKV, hd, c, badk, badv);
        GtError err = {0};
        cr_assert_eq(backend_act_to_host_f32(fx->be, got, d_out, (size_t)N * NH * hd, &err), 0, "%s", err.msg);
        CHECK_TOL(fx->act_tol, "attention_cached out", got, ref, (size_t)N * NH * hd,
                  "%s backend, %s, NH=%d NKV=%d hd=%d window=%d, call %zu of %d tokens", be, gt_dtype_name(act), NH,
                  NKV, hd, window, c, N);
    }
    free(kc0), free(vc0), free(K), free(V), free(wantk), free(wantv), free(qkv), free(nan), free(qkv_bytes);
    free(nan_bytes), free(ref), free(slot), free(pos), free(gotk), free(gotv), free(got);
}

/* encoder_forward and rope_forward at arbitrary per-token positions (B = 1, T = n) */
static void any_positions(Fx *fx, Rng *r, int NH, int NKV, int hs) {
    enum { n = 9, P = 40, C = 24, Vocab = 13 };
    static const int pos[n] = {5, 17, 3, 0, 39, 1, 17, 22, 8};
    const size_t R = (size_t)(NH + 2 * NKV) * hs, nx = (size_t)n * R, ntab = (size_t)P * (hs / 2);
    int *d_pos = dup_i(fx, pos, n);
    /* encoder: out[i] = wte[tok[i]] + wpe[pos[i]] */
    int *tok = rand_i(fx, r, n, Vocab);
    float *wte = rand_a(fx, r, (size_t)Vocab * C, -1, 1), *wpe = rand_a(fx, r, (size_t)P * C, -1, 1);
    void *d_out = dnan_a(fx, (size_t)n * C);
    fx->be->ops->encoder_forward(fx->be, d_out, dup_i(fx, tok, n), dup_a(fx, wte, (size_t)Vocab * C),
                                 dup_a(fx, wpe, (size_t)P * C), 1, n, C, d_pos);
    double *ro = hd(fx, (size_t)n * C), *rwte = to_d(fx, wte, (size_t)Vocab * C), *rwpe = to_d(fx, wpe, (size_t)P * C);
    for (int i = 0; i < n; i++) ref_encoder_forward(ro + (size_t)i * C, tok + i, rwte, rwpe + (size_t)pos[i] * C, 1, 1, C);
    CHECK_TOL(fx->act_tol, "encoder_forward (any positions)", get_a(fx, d_out, (size_t)n * C), ro, (size_t)n * C,
              "%s backend, %s", fx->be->ops->name, gt_dtype_name(fx->act));
    /* rope: token i rotated at position pos[i] */
    double *dc = hd(fx, ntab), *ds = hd(fx, ntab);
    float *fc = hf(fx, ntab), *fs = hf(fx, ntab);
    ref_rope_tables(dc, ds, P, hs, 10000.0);
    for (size_t e = 0; e < ntab; e++) { /* the op's fp32 tables; the reference reads the same values */
        fc[e] = (float)dc[e], fs[e] = (float)ds[e];
        dc[e] = fc[e], ds[e] = fs[e];
    }
    float *x = rand_a(fx, r, nx, -2, 2);
    void *d_x = dup_a(fx, x, nx);
    fx->be->ops->rope_forward(fx->be, d_x, dup_f(fx, fc, ntab), dup_f(fx, fs, ntab), 1, n, 0, NH, NKV, hs, d_pos);
    double *rx = to_d(fx, x, nx);
    for (int i = 0; i < n; i++) ref_rope_forward(rx + (size_t)i * R, dc, ds, 1, 1, pos[i], NH, NKV, hs);
    CHECK_TOL(fx->act_tol, "rope_forward (any positions)", get_a(fx, d_x, nx), rx, nx, "%s backend, %s, hs=%d",
              fx->be->ops->name, gt_dtype_name(fx->act), hs);
}

/* the CPU backend with the fixture's act dtype (the companion run beside another backend) */
static void fx_open_cpu(Fx *fx, GtDtype act) {
    memset(fx, 0, sizeof *fx);
    GtError err = {0};
    cr_assert_eq(cpu_backend_create(&fx->be, 0, &err), 0, "cpu backend failed to open: %s", err.msg);
    fx->act = act;
    fx->act_tol = act == GT_BF16 ? TOL_BF16 : TOL;
    backend_set_act_dtype(fx->be, act);
}

/* s: NH, NKV, hd, window. The backend under test, then (when it is not the CPU) the CPU backend,
 * through the same history with the same values. */
void check_decode_ops(Fx *fx, Rng *r, const int *s) {
    const uint64_t seed = rng_next(r);
    decode_history(fx, s, seed);
    if (fx->be->ops->caps & GT_CAP_POSITIONS) any_positions(fx, r, s[0], s[1], s[2]);
    if (strcmp(fx->be->ops->name, "cpu") != 0) {
        Fx cpu;
        fx_open_cpu(&cpu, fx->act);
        decode_history(&cpu, s, seed);
        fx_close(&cpu);
    }
}
