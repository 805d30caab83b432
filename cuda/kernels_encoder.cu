/* kernels_encoder.cu - the CUDA backend's token and position embedding: encoder_forward and
 * encoder_backward (backend.h), the bits of backend_cpu.c's loops.
 *
 * The token gradient dwte[tokens[i]] += dout[i] is the one place in cuda/ that groups rows by a
 * data-dependent key: a stable radix sort of the positions by token (integer work only), then one
 * warp per (token, channel chunk) that adds the token's rows in position order. See the section
 * "dwte" below for the design, its cost and its limits. Packed rows' position gradient
 * dwpe[pos[i]] += dout[i] is the same walk with the positions as keys. */
#include "cuda_common.cuh"

/* ------------------------------------------------------------------ encoder */

/* out[bt, :] = wte[tokens[bt], :] (+ wpe[position, :]): npack packs of P = GTC_PACK(Act) channels
 * (16-byte loads and stores; only when C % P == 0 and the three tensors are 16-byte aligned, else
 * npack = 0), then one element per thread. Bytes per element (bf16): 2 or 4 read, 2 written. */
template <typename Act>
__device__ __forceinline__ float encoder_value(const int *tokens, const Act *wte, const Act *wpe, const int *pos,
                                               size_t bt, int c, int T, int C) {
    int t = pos ? pos[bt] : (int)(bt % T); /* packed rows: the token's position */
    float v = load_f32(wte, (size_t)tokens[bt] * C + c);
    if (wpe) v += load_f32(wpe, (size_t)t * C + c); /* NULL: no position embedding (Llama) */
    return v;
}

template <typename Act>
__global__ void encoder_forward_kernel(Act *out, const int *tokens, const Act *wte, const Act *wpe, int BT, int T,
                                       int C, const int *pos, size_t npack) {
    constexpr int P = GTC_PACK(Act);
    const size_t n = (size_t)BT * C, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t q = tid; q < npack; q += stride) {
        const size_t i = q * P, bt = i / C;
        const int c = (int)(i % C), t = pos ? pos[bt] : (int)(bt % T);
        float v[P], e[P];
        load_pack<P>(v, wte + (size_t)tokens[bt] * C + c);
        if (wpe) {
            load_pack<P>(e, wpe + (size_t)t * C + c);
#pragma unroll
            for (int k = 0; k < P; k++) v[k] += e[k];
        }
        store_pack<P>(out + i, v);
    }
    for (size_t i = npack * P + tid; i < n; i += stride)
        store_from_f32(out, i, encoder_value(tokens, wte, wpe, pos, i / C, (int)(i % C), T, C));
}

template <typename Act>
static void encoder_forward_t(Backend *b, Act *out, const int *tokens, const Act *wte,
                              const Act *wpe, int B, int T, int C, const int *pos) {
    const size_t n = (size_t)B * T * C;
    const bool packed = C % GTC_PACK(Act) == 0 && gtc_aligned16(out) && gtc_aligned16(wte) && (!wpe || gtc_aligned16(wpe));
    const size_t npack = packed ? n / GTC_PACK(Act) : 0, work = npack + (n - npack * GTC_PACK(Act));
    GTC_LAUNCH(encoder_forward_kernel<Act>, gtc_blocks(work, GTC_THREADS), GTC_THREADS, 0,
               gtc_stream(b), out, tokens, wte, wpe, B * T, T, C, pos, npack);
    CUDA_CHECK_LAUNCH();
}

void gtc_encoder_forward(Backend *b, act_t *out, const int *tokens, const act_t *wte,
                         const act_t *wpe, int B, int T, int C, const int *pos) {
    if (gtc_act_bf16(b))
        encoder_forward_t(b, (gtc_bf16 *)out, tokens, (const gtc_bf16 *)wte, (const gtc_bf16 *)wpe,
                          B, T, C, pos);
    else
        encoder_forward_t(b, (float *)out, tokens, (const float *)wte, (const float *)wpe, B, T, C, pos);
}

/* dwpe[t, c] += sum_b dout[b, t, c]: one thread per (t, c), b summed in order (as the CPU). */
template <typename Act>
__global__ void encoder_backward_wpe_kernel(float *dwpe, const Act *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int bb = 0; bb < B; bb++) s += load_f32(dout, (size_t)bb * n + i);
        dwpe[i] += s;
    }
}

/* ------------------------------------------------------------------ dwte */

/* dwte[tokens[i]] += dout[i] for every position i: for each token, its rows are added into its
 * fp32 row (which already holds the earlier micro-batches' sums) in increasing position order,
 * one fp32 addition after another per channel: the CPU's sequential loop, bit for bit, whatever
 * the grid. No float atomics.
 *
 * 1. A stable sort of the positions 0..BT-1 by token: an LSD radix sort on the token's low
 *    ENC_KEY_BITS = 18 bits, ENC_PASSES = 2 passes of 9-bit digits (512 bins; every vocabulary up to
 *    262144 tokens: GPT-2's 50257, Llama-3's 128256, Qwen's 151936 sort exactly). Integer work
 *    only: the positions are split into at most ENC_MAX_TILES tiles of 256 x items; per pass, a
 *    tile's digit counts (hist[tile][digit]) give each (digit, tile) its first slot (the digits
 *    before it over all tiles, plus the same digit in the tiles before); within a tile, in rounds
 *    of 256 positions, a position's rank among the earlier ones with its digit comes from warp
 *    ballots and per-warp counts: so equal digits keep their order (stable), and the sort is a
 *    pure function of the tokens. Integer atomics only count (their sums do not depend on order).
 *    Launches: the first pass's counts (enc_sort_count_kernel), then one scatter per pass
 *    (enc_sort_scatter_kernel), the first of which also counts the second pass's digits.
 * 2. enc_wte_kernel: one warp per sorted index s and chunk of 32 x GTC_PACK(Act) channels (16-byte
 *    loads of dout where aligned, fp32 accumulators in registers); the warp of the first sorted
 *    index of a token owns that token: it walks the token's run in the sorted order (= position
 *    order) and adds its rows; the other warps return at once.
 *    Tokens of 2^18 or more: two tokens with the same low 18 bits land in one run of the sort,
 *    interleaved in position order; the owner of each (its first index in that run) takes only its
 *    own rows, so the result is still exact, only a run shared by many tokens is walked once per
 *    token.
 *
 * Cost: O(BT) integer work per pass + the dout rows once + each touched dwte row read and written
 * once (O(BT C + tiles x 512)); the walk of one token is a serial chain of its count of additions
 * per channel (the order the bits need), so a token repeated n times costs n dependent fp32 adds.
 * Scratch (gtc_scratch, inside the backend's 4 MiB up to BT = 327680): two int permutations of BT,
 * the sorted tokens and two count tables of at most ENC_MAX_TILES x 512 ints. */
#define ENC_DIGIT_BITS 9
#define ENC_BINS (1 << ENC_DIGIT_BITS)
#define ENC_PASSES 2
#define ENC_KEY_MASK ((1 << (ENC_DIGIT_BITS * ENC_PASSES)) - 1)
#define ENC_SORT_THREADS 256 /* positions per round of a tile; 8 warps */
#define ENC_SORT_WARPS (ENC_SORT_THREADS / 32)
#define ENC_MAX_TILES 64
#define ENC_WTE_WARPS 4 /* sorted indices per block of enc_wte_kernel */

__device__ __forceinline__ int enc_digit(int key, int shift) { return (int)(((unsigned)key >> shift) & (ENC_BINS - 1)); }

/* the sort's layout: tiles of `tile` positions (a multiple of ENC_SORT_THREADS), at most ENC_MAX_TILES */
typedef struct {
    int tile, ntiles;
} EncTiles;
static EncTiles enc_tiles(int BT) {
    const int per = ENC_SORT_THREADS * ENC_MAX_TILES;
    const int items = (BT + per - 1) / per;
    EncTiles t;
    t.tile = ENC_SORT_THREADS * (items > 0 ? items : 1);
    t.ntiles = (BT + t.tile - 1) / t.tile;
    return t;
}

/* count[tile][d] = positions of the tile whose token's first digit is d; count_next zeroed (the first
 * scatter adds the second pass's counts into it). Grid: one block of ENC_SORT_THREADS per tile. */
__global__ void enc_sort_count_kernel(int *count, int *count_next, const int *tokens, int BT, int tile) {
    __shared__ int s_count[ENC_BINS];
    for (int d = threadIdx.x; d < ENC_BINS; d += blockDim.x) {
        s_count[d] = 0;
        count_next[blockIdx.x * ENC_BINS + d] = 0;
    }
    __syncthreads();
    const int lo = blockIdx.x * tile, hi = min(lo + tile, BT);
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) atomicAdd(&s_count[enc_digit(tokens[i], 0)], 1);
    __syncthreads();
    for (int d = threadIdx.x; d < ENC_BINS; d += blockDim.x) count[blockIdx.x * ENC_BINS + d] = s_count[d];
}

/* exclusive prefix sum over the block of one int per thread (blockDim.x = ENC_SORT_THREADS), in thread
 * order; s_warp holds ENC_SORT_WARPS ints */
__device__ int enc_block_exclusive_scan(int v, int *s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_sync(0xffffffffu, x, lane >= o ? lane - o : lane);
        if (lane >= o) x += y;
    }
    if (lane == 31) s_warp[warp] = x;
    __syncthreads();
    int before = 0;
    for (int w = 0; w < warp; w++) before += s_warp[w];
    return before + x - v;
}

/* One stable pass: the positions in src (NULL: 0..BT-1) go to dst ordered by the digit of their
 * token at `shift`, equal digits in src's order; dst_key (NULL: none) gets their tokens alike.
 * count: this pass's [tile][digit] counts of src's tiles; count_next (NULL on the last pass): the
 * next digit's counts of dst's tiles, added here. Grid: one block of ENC_SORT_THREADS per tile.
 * Each thread owns digits 2 tid and 2 tid + 1. */
__global__ void enc_sort_scatter_kernel(int *dst, int *dst_key, const int *src, const int *tokens, const int *count,
                                        int *count_next, int BT, int tile, int ntiles, int shift) {
    __shared__ int s_next[ENC_BINS];                /* the next free slot of each digit */
    __shared__ int s_wcount[ENC_SORT_WARPS][ENC_BINS]; /* this round's positions per (warp, digit) */
    __shared__ int s_warp[ENC_SORT_WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, t = blockIdx.x;
    const int d0 = 2 * tid, d1 = 2 * tid + 1;
    /* each digit's slots start after all smaller digits, then after its own in the earlier tiles */
    int total0 = 0, total1 = 0, before0 = 0, before1 = 0;
    for (int k = 0; k < ntiles; k++) {
        const int c0 = count[k * ENC_BINS + d0], c1 = count[k * ENC_BINS + d1];
        total0 += c0;
        total1 += c1;
        if (k < t) {
            before0 += c0;
            before1 += c1;
        }
    }
    const int base = enc_block_exclusive_scan(total0 + total1, s_warp);
    s_next[d0] = base + before0;
    s_next[d1] = base + total0 + before1;
    for (int w = 0; w < ENC_SORT_WARPS; w++) s_wcount[w][d0] = s_wcount[w][d1] = 0;
    __syncthreads();

    for (int r0 = t * tile; r0 < min(t * tile + tile, BT); r0 += ENC_SORT_THREADS) {
        const int i = r0 + tid;
        const bool valid = i < BT;
        const int v = valid ? (src ? src[i] : i) : 0;
        const int key = valid ? tokens[v] : 0;
        const int d = enc_digit(key, shift);
        /* the lanes of this warp with the same digit (valid ones only) */
        unsigned peers = __ballot_sync(0xffffffffu, valid);
        for (int bit = 0; bit < ENC_DIGIT_BITS; bit++) {
            const int set = (d >> bit) & 1;
            const unsigned m = __ballot_sync(0xffffffffu, set);
            peers &= set ? m : ~m;
        }
        if (valid && lane == __ffs((int)peers) - 1) s_wcount[warp][d] = __popc(peers);
        __syncthreads();
        if (valid) {
            int at = s_next[d] + __popc(peers & ((1u << lane) - 1u));
            for (int w = 0; w < warp; w++) at += s_wcount[w][d];
            dst[at] = v;
            if (dst_key) dst_key[at] = key;
            if (count_next) atomicAdd(&count_next[(at / tile) * ENC_BINS + enc_digit(key, shift + ENC_DIGIT_BITS)], 1);
        }
        __syncthreads();
        for (int w = 0; w < ENC_SORT_WARPS; w++) {
            s_next[d0] += s_wcount[w][d0];
            s_next[d1] += s_wcount[w][d1];
            s_wcount[w][d0] = s_wcount[w][d1] = 0;
        }
        __syncthreads();
    }
}

/* dwte rows of the token owned by each warp, see the top of this section. sorted, skey: the positions
 * ordered by token (low ENC_KEY_BITS bits, stable) and their tokens. vec: C % P == 0 and dout,
 * dwte 16-byte aligned. Grid: (ceil(BT / ENC_WTE_WARPS), ceil(C / (32 P))), ENC_WTE_WARPS warps a
 * block. A token's walk is latency-bound (its additions are one chain per channel): the next 32
 * sorted entries are loaded while this 32's rows are added, and up to ENC_WTE_ROWS rows' loads are
 * in flight before their additions, in order. */
#define ENC_WTE_ROWS 16
template <typename Act>
__global__ void enc_wte_kernel(float *dwte, const Act *dout, const int *sorted, const int *skey, int BT, int C,
                               bool vec) {
    constexpr int P = GTC_PACK(Act);
    const int lane = threadIdx.x & 31;
    const int s = blockIdx.x * ENC_WTE_WARPS + (threadIdx.x >> 5);
    if (s >= BT) return; /* warp-uniform */
    const int tok = skey[s], low = tok & ENC_KEY_MASK;
    if (s > 0) { /* not the token's first sorted index: another warp owns it */
        int e = s - 1, et = skey[e];
        while ((et & ENC_KEY_MASK) == low) { /* equal low bits: tok itself, or tokens >= 2^18 */
            if (et == tok) return;
            if (--e < 0) break;
            et = skey[e];
        }
    }
    const int c0 = (blockIdx.y * 32 + lane) * P, n = min(P, C - c0); /* this lane's channels */
    float *dst = dwte + (size_t)tok * C + c0;
    float acc[P];
    for (int j = 0; j < P; j++) acc[j] = 0.0f;
    if (n > 0) {
        if (vec)
            load_pack<P>(acc, dst);
        else
            for (int j = 0; j < n; j++) acc[j] = dst[j];
    }
    int e = s + lane;
    int v = e < BT ? sorted[e] : 0, et = e < BT ? skey[e] : -1;
    for (;;) {
        const int en = e + 32; /* the next 32 entries, loaded now, used after this 32's rows */
        const int vn = en < BT ? sorted[en] : 0, etn = en < BT ? skey[en] : -1;
        unsigned hits = __ballot_sync(0xffffffffu, et == tok);
        const unsigned past = __ballot_sync(0xffffffffu, e >= BT || (et & ENC_KEY_MASK) != low);
        while (hits) { /* warp-uniform */
            int row[ENC_WTE_ROWS];
            int m = 0;
#pragma unroll
            for (int q = 0; q < ENC_WTE_ROWS; q++) {
                row[q] = __shfl_sync(0xffffffffu, v, hits ? __ffs((int)hits) - 1 : 0);
                if (hits) {
                    m++;
                    hits &= hits - 1u;
                }
            }
            if (n > 0) { /* lanes past C only took part in the shuffles */
                uint4 raw[ENC_WTE_ROWS];
#pragma unroll
                for (int q = 0; q < ENC_WTE_ROWS; q++)
                    if (q < m) raw[q] = gtc_raw_load(dout + (size_t)row[q] * C + c0, n, vec);
#pragma unroll
                for (int q = 0; q < ENC_WTE_ROWS; q++) {
                    if (q >= m) break;
                    float f[P];
                    gtc_raw_to_f32<Act>(f, raw[q]);
                    for (int j = 0; j < P; j++) acc[j] += f[j];
                }
            }
        }
        if (past) break; /* the run of tok's low bits ended in this chunk */
        e = en;
        v = vn;
        et = etn;
    }
    if (n > 0) {
        if (vec)
            store_pack<P>(dst, acc);
        else
            for (int j = 0; j < n; j++) dst[j] = acc[j];
    }
}

/* dst[keys[i]] += dout[i], i in order: keys are the tokens (dwte), or packed rows' positions (dwpe) */
template <typename Act>
static void encoder_backward_rows_by_key(Backend *b, float *dst, const Act *dout, const int *keys, int BT,
                                         int C) {
    cudaStream_t st = gtc_stream(b);
    const EncTiles tl = enc_tiles(BT);
    const size_t counts = (size_t)tl.ntiles * ENC_BINS;
    int *perm = (int *)gtc_scratch(b, (3 * (size_t)BT + 2 * counts) * sizeof(int));
    int *sorted = perm + BT, *skey = sorted + BT, *count = skey + BT, *count_next = count + counts;
    GTC_LAUNCH(enc_sort_count_kernel, tl.ntiles, ENC_SORT_THREADS, 0, st, count, count_next, keys, BT, tl.tile);
    CUDA_CHECK_LAUNCH();
    GTC_LAUNCH(enc_sort_scatter_kernel, tl.ntiles, ENC_SORT_THREADS, 0, st, perm, (int *)NULL, (const int *)NULL,
               keys, (const int *)count, count_next, BT, tl.tile, tl.ntiles, 0);
    CUDA_CHECK_LAUNCH();
    GTC_LAUNCH(enc_sort_scatter_kernel, tl.ntiles, ENC_SORT_THREADS, 0, st, sorted, skey, (const int *)perm, keys,
               (const int *)count_next, (int *)NULL, BT, tl.tile, tl.ntiles, ENC_DIGIT_BITS);
    CUDA_CHECK_LAUNCH();
    constexpr int P = GTC_PACK(Act);
    const bool vec = C % P == 0 && gtc_aligned16(dout) && gtc_aligned16(dst);
    const dim3 grid((unsigned)((BT + ENC_WTE_WARPS - 1) / ENC_WTE_WARPS), (unsigned)((C + 32 * P - 1) / (32 * P)));
    GTC_LAUNCH(enc_wte_kernel<Act>, grid, 32 * ENC_WTE_WARPS, 0, st, dst, dout, (const int *)sorted,
               (const int *)skey, BT, C, vec);
    CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ encoder_backward */

template <typename Act>
static void encoder_backward_t(Backend *b, float *dwte, float *dwpe, const Act *dout,
                               const int *tokens, int B, int T, int C, const int *pos) {
    cudaStream_t st = gtc_stream(b);
    if (dwte && B * T > 0) encoder_backward_rows_by_key(b, dwte, dout, tokens, B * T, C);
    if (dwpe && pos) { /* packed rows: the same walk, each row's position its key */
        if (B * T > 0) encoder_backward_rows_by_key(b, dwpe, dout, pos, B * T, C);
    } else if (dwpe) {
        size_t n = (size_t)T * C;
        GTC_LAUNCH(encoder_backward_wpe_kernel<Act>, gtc_blocks(n, GTC_THREADS), GTC_THREADS, 0, st,
                   dwpe, dout, B, T, C);
        CUDA_CHECK_LAUNCH();
    }
}

void gtc_encoder_backward(Backend *b, float *dwte, float *dwpe, const act_t *dout,
                          const int *tokens, int B, int T, int C, const int *pos) {
    if (gtc_act_bf16(b))
        encoder_backward_t(b, dwte, dwpe, (const gtc_bf16 *)dout, tokens, B, T, C, pos);
    else
        encoder_backward_t(b, dwte, dwpe, (const float *)dout, tokens, B, T, C, pos);
}

