/* kernels_decode.cu - the CUDA backend's generation ops (backend.h's kv_store and
 * attention_cached; the CPU's are src/backend/backend_cpu_decode.c): a flat batch of N tokens of
 * any cache rows (prompt chunks and one new token per decoding row), token i at row slot[i],
 * position pos[i]; the cache of one layer kc, vc [slots, ctx, NKV*hd] in the act dtype.
 *
 * kv_store: one thread per (token, kv channel) copies the token's k and v heads into its cache row
 * (a copy of the stored bits, no conversion).
 *
 * attention_cached: one block of DEC_THREADS (4 warps) per (token i, query head h); the keys
 * j = lo..pos[i] of row slot[i] (lo from the sliding window, gtc_att_first_key) in chunks of
 * DEC_CHUNK, with an online softmax, so any ctx runs in a fixed amount of shared memory:
 *   - scores: warp w scores keys w, w + 4, ... of the chunk, the lanes over the channels
 *     (d = lane + 32 r, coalesced reads of the key row), one butterfly sum (gtc_warp_sum): the
 *     same bits on every lane, s_j = (q . k_j) * (1/sqrt(hd)) as the CPU computes it;
 *   - the chunk's maximum and the running sum are computed by every thread over the chunk's
 *     scores in key order (the same bits everywhere, no block reduction to order);
 *   - thread t owns output channels d = t + DEC_THREADS r (hd <= DEC_MAX_HD) and accumulates
 *     p_j v_j[d] in ascending key order (coalesced reads of the value row), rescaling by
 *     exp(m_old - m_new) when a chunk raises the maximum.
 * Each output element is one thread's, in an order fixed by the shapes: deterministic, no
 * atomics. Cache rows are never read past pos[i] (nor before lo), so what an earlier tenant of the
 * slot left there is not seen. fp32 arithmetic on the act values (bf16 widened as it is read),
 * out rounded once. The result differs from the CPU's two-pass softmax by rounding only (the
 * online rescaling and the butterfly's order): within 1e-5 relative in fp32 (test_backend_ops's
 * decode row checks both against a double reference). */
#include "cuda_common.cuh"

#include <math.h>

#define DEC_THREADS 128 /* 4 warps per (token, query head) */
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_CHUNK 64 /* keys per chunk (shared memory: 2 * DEC_CHUNK floats) */
#define DEC_MAX_HD 256
#define DEC_QPL (DEC_MAX_HD / 32)          /* q channels per lane */
#define DEC_CPT (DEC_MAX_HD / DEC_THREADS) /* output channels per thread */

/* a shape the kernels cannot run is a bug in the caller (decode.c validates the model): one line,
 * exit 1 */
static void dec_check(const char *op, int N, int NH, int NKV, int hd, int ctx, int window) {
    if (N < 0 || NH <= 0 || NKV <= 0 || NH % NKV != 0 || hd < 1 || hd > DEC_MAX_HD || ctx < 1 || window < 0) {
        fprintf(stderr,
                "%s:%d: %s: unsupported shape N=%d NH=%d NKV=%d hd=%d ctx=%d window=%d (NKV must divide NH, "
                "1 <= hd <= %d)\n",
                __FILE__, __LINE__, op, N, NH, NKV, hd, ctx, window, DEC_MAX_HD);
        exit(GT_EXIT_FAILURE);
    }
}

/* ------------------------------------------------------------------ kv_store */

template <typename Act>
__global__ void kv_store_kernel(Act *kc, Act *vc, const Act *qkv, const int *slot, const int *pos, int N, int NH,
                                int NKV, int hd, int ctx) {
    const size_t KV = (size_t)NKV * hd, R = (size_t)(NH + 2 * NKV) * hd, n = (size_t)N * KV;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const size_t i = idx / KV, c = idx - i * KV;
        const size_t at = ((size_t)slot[i] * ctx + (size_t)pos[i]) * KV + c;
        const Act *row = qkv + i * R + (size_t)NH * hd;
        kc[at] = row[c];
        vc[at] = row[KV + c];
    }
}

void gtc_kv_store(Backend *b, act_t *kc, act_t *vc, const act_t *qkv, const int *slot, const int *pos, int N, int NH,
                  int NKV, int hd, int ctx) {
    dec_check("kv_store", N, NH, NKV, hd, ctx, 0);
    if (N == 0) return;
    const size_t n = (size_t)N * NKV * hd;
    const unsigned blocks = gtc_blocks(n, GTC_THREADS);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(kv_store_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b), (gtc_bf16 *)kc, (gtc_bf16 *)vc,
                   (const gtc_bf16 *)qkv, slot, pos, N, NH, NKV, hd, ctx);
    else
        GTC_LAUNCH(kv_store_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)kc, (float *)vc,
                   (const float *)qkv, slot, pos, N, NH, NKV, hd, ctx);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ attention_cached */

template <typename Act>
__global__ void __launch_bounds__(DEC_THREADS)
    attention_cached_kernel(Act *out, const Act *qkv, const Act *kc, const Act *vc, const int *slot, const int *pos,
                            int NH, int NKV, int hd, int ctx, int window, float scale) {
    __shared__ float s_score[DEC_CHUNK];
    __shared__ float s_p[DEC_CHUNK];
    const int i = blockIdx.x / NH, h = blockIdx.x - i * NH;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    const int g = gtc_att_kv_head(h, NH, NKV);
    const size_t KV = (size_t)NKV * hd, R = (size_t)(NH + 2 * NKV) * hd;
    const int last = pos[i]; /* the last key the token sees: itself */
    const int lo = gtc_att_first_key(pos[i], window);
    const Act *krow = kc + (size_t)slot[i] * ctx * KV + (size_t)g * hd; /* key j: krow + j * KV */
    const Act *vrow = vc + (size_t)slot[i] * ctx * KV + (size_t)g * hd;

    float q[DEC_QPL];
#pragma unroll
    for (int r = 0; r < DEC_QPL; r++) {
        const int d = lane + 32 * r;
        q[r] = d < hd ? load_f32(qkv, (size_t)i * R + (size_t)h * hd + d) : 0.0f;
    }
    float acc[DEC_CPT];
#pragma unroll
    for (int r = 0; r < DEC_CPT; r++) acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int c0 = lo; c0 <= last; c0 += DEC_CHUNK) {
        const int n = min(DEC_CHUNK, last - c0 + 1);
        for (int k = warp; k < n; k += DEC_WARPS) {
            const Act *key = krow + (size_t)(c0 + k) * KV;
            float part = 0.0f;
#pragma unroll
            for (int r = 0; r < DEC_QPL; r++) {
                const int d = lane + 32 * r;
                if (d < hd) part = fmaf(q[r], load_f32(key, d), part);
            }
            const float s = __fmul_rn(gtc_warp_sum(part), scale);
            if (lane == 0) s_score[k] = s;
        }
        __syncthreads();
        float cmax = -INFINITY;
        for (int k = 0; k < n; k++) cmax = fmaxf(cmax, s_score[k]);
        const float mnew = fmaxf(m, cmax);
        const float alpha = expf(m - mnew); /* exp(-inf) = 0 on the first chunk */
        if (tid < n) s_p[tid] = expf(s_score[tid] - mnew);
        __syncthreads();
        l *= alpha;
#pragma unroll
        for (int r = 0; r < DEC_CPT; r++) acc[r] *= alpha;
        for (int k = 0; k < n; k++) {
            const float p = s_p[k];
            const Act *val = vrow + (size_t)(c0 + k) * KV;
            l += p;
#pragma unroll
            for (int r = 0; r < DEC_CPT; r++) {
                const int d = tid + DEC_THREADS * r;
                if (d < hd) acc[r] = fmaf(p, load_f32(val, d), acc[r]);
            }
        }
        m = mnew;
        __syncthreads(); /* every thread is done with the chunk's scores before the next */
    }
    const float inv = 1.0f / l;
    Act *o = out + (size_t)i * NH * hd + (size_t)h * hd;
#pragma unroll
    for (int r = 0; r < DEC_CPT; r++) {
        const int d = tid + DEC_THREADS * r;
        if (d < hd) store_from_f32(o, d, acc[r] * inv);
    }
}

void gtc_attention_cached(Backend *b, act_t *out, const act_t *qkv, const act_t *kc, const act_t *vc, const int *slot,
                          const int *pos, int N, int NH, int NKV, int hd, int ctx, int window) {
    dec_check("attention_cached", N, NH, NKV, hd, ctx, window);
    if (N == 0) return;
    const size_t blocks = (size_t)N * NH;
    if (blocks > 0x7fffffffu) {
        fprintf(stderr, "%s:%d: attention_cached: %d tokens x %d heads is more blocks than a grid holds\n", __FILE__,
                __LINE__, N, NH);
        exit(GT_EXIT_FAILURE);
    }
    const float scale = 1.0f / sqrtf((float)hd);
    if (gtc_act_bf16(b))
        GTC_LAUNCH(attention_cached_kernel<gtc_bf16>, (unsigned)blocks, DEC_THREADS, 0, gtc_stream(b),
                   (gtc_bf16 *)out, (const gtc_bf16 *)qkv, (const gtc_bf16 *)kc, (const gtc_bf16 *)vc, slot, pos, NH,
                   NKV, hd, ctx, window, scale);
    else
        GTC_LAUNCH(attention_cached_kernel<float>, (unsigned)blocks, DEC_THREADS, 0, gtc_stream(b), (float *)out,
                   (const float *)qkv, (const float *)kc, (const float *)vc, slot, pos, NH, NKV, hd, ctx, window,
                   scale);
    CUDA_CHECK_LAUNCH();
}
