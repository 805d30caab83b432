/* kernels_attention.cu - causal multi-head self-attention with grouped-query heads and an
 * optional sliding window, flash-style.
 *
 * Layouts (backend.h): qkv[B, T, (NH + 2 NKV) hs]: NH query heads | NKV key heads | NKV value
 * heads, hs channels each; query head h reads kv head g = h / (NH / NKV) (gtc_att_kv_head;
 * NKV = NH: plain multi-head). out[B, T, NH hs]; lse[B, NH, T] = log sum_j exp(scale q_t . k_j)
 * over the keys j that t sees, scale = 1/sqrt(hs): j in [gtc_att_first_key(t, window), t], i.e.
 * j <= t and, with window > 0, t - j < window. Key tiles wholly outside a block's band are never
 * visited; partial ones are masked. Nothing of size B*NH*T*T is ever stored: scores live in
 * registers, one key tile at a time.
 *
 * Forward: one block per (query tile of ATT_BR rows, head, batch); 4 warps, each owning ATT_BR/4
 * query rows. Key/value tiles of 32 rows go through shared memory; lane j scores key j of the
 * tile, the warp keeps the online-softmax state (max, sum) and each lane owns channels
 * d = lane + 32 r (r < 4, so hs <= 128) of the output accumulator.
 *
 * Backward (no atomics):
 *   D[b,h,t] = sum_d dout * out            (into the caller's workspace)
 *   P_tj = exp(scale * q_t . k_j - lse_t), dP_tj = dout_t . v_j, dS_tj = P_tj (dP_tj - D_t)
 *   dv_j = sum_h sum_t P_tj dout_t,  dk_j = scale sum_h sum_t dS_tj q_t
 *            (kernel 1: one block per (key tile, kv head), looping over the query heads h of the
 *             kv head's group in order, and for each over the query tiles that see the keys)
 *   dq_t = scale sum_j dS_tj k_j   (kernel 2: one block per query tile, looping over key tiles)
 * Every dq/dk/dv element is written once by one thread, sums run in a fixed order, so the result
 * is deterministic and dqkv is fully overwritten. With NKV = NH and no window every loop is the
 * one of plain multi-head attention, so those shapes keep their bits.
 *
 * Precision: qkv, out, dout and dqkv are act_t (fp32 or bf16, b->act_dtype); lse and the
 * workspace D are fp32. The kernels are templated on the act storage type and widen to fp32 as
 * they load tiles into shared memory, so shared memory (layout and size) and all the math are
 * fp32 whatever the act dtype; out and dqkv are rounded once as they are stored.
 *
 * Dispatch: with bf16 activations and head size 64, 96 or 128, forward and backward run on tensor
 * cores (kernels_attention_tc.cu; the backward's D kernel below is shared); every other case (fp32
 * always, bf16 with other head sizes, devices before sm_80) runs the CUDA-core kernels in this
 * file, which fp32 keeps exactly. The choice depends on the dtype and the shapes only (and, fixed
 * once when the backend opens, on the device: its tile variant by opt-in shared memory, every
 * head size fitting sm_86/89's 99 KiB), so a recompute takes the same path and gets the same bits. The
 * tensor-core results differ from the CUDA-core path's by the bf16 rounding of P (and of dS in
 * dK) before they enter a product, and by the products' accumulation order: within the
 * bf16 bound (1e-2 relative) of the CPU reference; lse keeps fp32 accuracy (computed from fp32
 * scores and unrounded P). */
#include "cuda_common.cuh"

#include <math.h>

#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_BR 16 /* query rows per block (forward, dq) */
#define ATT_BC 32 /* keys per tile = warp size (forward, dq) */
#define ATT_BK 16 /* key rows per block (dk/dv) */
#define ATT_BQ 32 /* queries per tile = warp size (dk/dv) */
#define ATT_RPW (ATT_BR / ATT_WARPS) /* rows per warp */
#define ATT_KPW (ATT_BK / ATT_WARPS) /* keys per warp */
#define ATT_MAX_HS 128
#define ATT_DPL (ATT_MAX_HS / 32) /* channels per lane */

/* padded row stride of shared tiles: odd, so lanes reading rows (stride ld) hit distinct banks */
static __host__ __device__ inline int att_ld(int hs) { return (hs & 1) ? hs : hs + 1; }

static size_t att_fwd_smem(int hs) {
    return (size_t)((ATT_BR + ATT_BC) * att_ld(hs) + ATT_BC * hs) * sizeof(float);
}
static size_t att_dq_smem(int hs) {
    return (size_t)((2 * ATT_BR + 2 * ATT_BC) * att_ld(hs)) * sizeof(float);
}
static size_t att_dkdv_smem(int hs) {
    return (size_t)((2 * ATT_BK + 2 * ATT_BQ) * att_ld(hs) + 2 * ATT_BQ) * sizeof(float);
}

/* A lane owns channels d = lane + 32 r (r < ATT_DPL) of a row accumulator acc. For rows j in
 * [j0, j1) of a shared tile (row stride `stride`): acc += x_j * rows[j], x_j being lane j's x
 * (shuffled). Rows in order, so the sums are the same whatever calls it. */
__device__ __forceinline__ void att_axpy_rows(float (&acc)[ATT_DPL], float x, const float *rows,
                                              int stride, int j0, int j1, int hs, int lane) {
    for (int j = j0; j < j1; j++) {
        float xj = __shfl_sync(0xffffffffu, x, j);
        const float *row = rows + j * stride;
        #pragma unroll
        for (int r = 0; r < ATT_DPL; r++) {
            int d = lane + 32 * r;
            if (d < hs) acc[r] += xj * row[d];
        }
    }
}

/* a . b over hs channels, in channel order, each step one explicit FMA (no compiler choice) */
__device__ __forceinline__ float att_dot(const float *a, const float *b, int hs) {
    float s = 0.0f;
    for (int d = 0; d < hs; d++) s = fmaf(a[d], b[d], s);
    return s;
}

/* the score scale * (q . k), the same bits in the forward and both backward kernels: the
 * backward's dS = P (dP - D) cancels on peaked rows only if its P is the P that made out (and so
 * D = dout . out). Computed separately, an FMA the compiler fused in one kernel and not in
 * another put a 1-ulp difference into the scores and 10x the fp32 error into dq (found by the
 * CUDA simulator, tests/test_ops.c ops::attention's ramp case). */
__device__ __forceinline__ float att_score(const float *q, const float *k, int hs, float scale) {
    return __fmul_rn(att_dot(q, k, hs), scale);
}

/* row[d] = acc * mul for the lane's channels, rounded to the act dtype */
template <typename Act>
__device__ __forceinline__ void att_store_row(Act *row, const float (&acc)[ATT_DPL], float mul,
                                              int hs, int lane) {
    #pragma unroll
    for (int r = 0; r < ATT_DPL; r++) {
        int d = lane + 32 * r;
        if (d < hs) store_from_f32(row, d, acc[r] * mul);
    }
}

/* load rows [r0, r0 + rows) of one head's slice (row stride `stride` elements in global, act
 * dtype) into an fp32 shared tile with row stride ld; rows at or past T are zero */
template <typename Act>
__device__ __forceinline__ void att_load_tile(float *dst, int ld, const Act *src, size_t stride,
                                              int r0, int rows, int T, int hs) {
    for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx - r * hs;
        int t = r0 + r;
        dst[r * ld + d] = t < T ? load_f32(src, (size_t)t * stride + d) : 0.0f;
    }
}

/* ------------------------------------------------------------------ forward */

template <typename Act>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(Act *out, float *lse, const Act *qkv, int T, int NH, int NKV, int hs,
                             int window, float scale, const int *pos) {
    extern __shared__ float sm[];
    int ld = att_ld(hs);
    float *Qs = sm;                 /* [ATT_BR][ld] */
    float *Ks = Qs + ATT_BR * ld;   /* [ATT_BC][ld] */
    float *Vs = Ks + ATT_BC * ld;   /* [ATT_BC][hs] */
    int q0 = blockIdx.x * ATT_BR, h = blockIdx.y, bb = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = gtc_att_kv_head(h, NH, NKV);
    const size_t C = (size_t)NH * hs, C3 = (size_t)(NH + 2 * NKV) * hs;
    const Act *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * hs;
    const Act *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)g * hs;
    const Act *vbase = kbase + (size_t)NKV * hs;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr; /* packed rows: this sequence's positions */

    att_load_tile(Qs, ld, qbase, C3, q0, ATT_BR, T, hs);

    float m[ATT_RPW], l[ATT_RPW], o[ATT_RPW][ATT_DPL];
    #pragma unroll
    for (int i = 0; i < ATT_RPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        #pragma unroll
        for (int r = 0; r < ATT_DPL; r++) o[i][r] = 0.0f;
    }
    int q_last = min(q0 + ATT_BR, T) - 1;
    /* the first key tile holding a key the block's first query sees (0 without a window) */
    int k_first = gtc_att_first_key_pos(q0, window, posr) / ATT_BC * ATT_BC;
    for (int k0 = k_first; k0 <= q_last; k0 += ATT_BC) {
        __syncthreads(); /* previous tile fully used (and Qs loaded, first time) */
        att_load_tile(Ks, ld, kbase, C3, k0, ATT_BC, T, hs);
        att_load_tile(Vs, hs, vbase, C3, k0, ATT_BC, T, hs);
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < ATT_RPW; i++) {
            int r = warp + ATT_WARPS * i;
            int t = q0 + r;
            int jlo = t < T ? gtc_att_first_key_pos(t, window, posr) : 0;
            /* warp-uniform: no key of the tile in [jlo, t] */
            if (t >= T || k0 > t || k0 + ATT_BC <= jlo) continue;
            int j = k0 + lane;
            float s = -INFINITY;
            if (j <= t && j >= jlo) {
                s = att_score(Qs + r * ld, Ks + lane * ld, hs, scale);
            }
            float mt = gtc_warp_max(s); /* finite: a key of [jlo, t] is in the tile */
            float mnew = fmaxf(m[i], mt);
            float p = (j <= t && j >= jlo) ? expf(s - mnew) : 0.0f;
            float alpha = expf(m[i] - mnew); /* exp(-inf) = 0 on the first tile */
            l[i] = l[i] * alpha + gtc_warp_sum(p);
            m[i] = mnew;
            #pragma unroll
            for (int r2 = 0; r2 < ATT_DPL; r2++) o[i][r2] *= alpha;
            att_axpy_rows(o[i], p, Vs, hs, max(0, jlo - k0), min(ATT_BC, t - k0 + 1), hs, lane);
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_RPW; i++) {
        int r = warp + ATT_WARPS * i;
        int t = q0 + r;
        if (t >= T) continue;
        float inv = 1.0f / l[i];
        att_store_row(out + ((size_t)bb * T + t) * C + (size_t)h * hs, o[i], inv, hs, lane);
        if (lane == 0) lse[((size_t)bb * NH + h) * T + t] = m[i] + logf(l[i]);
    }
}

/* ------------------------------------------------------------------ backward */

/* D[b,h,t] = sum_d dout[b,t,h,d] * out[b,t,h,d]; one warp per (b, h, t) */
template <typename Act>
__global__ void attention_backward_d_kernel(float *D, const Act *dout, const Act *out, int B,
                                            int T, int NH, int hs) {
    size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= (size_t)B * NH * T) return;
    const size_t C = (size_t)NH * hs;
    int t = (int)(row % T);
    int h = (int)((row / T) % NH);
    size_t bb = row / ((size_t)T * NH);
    size_t off = (bb * T + t) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += load_f32(dout, off + d) * load_f32(out, off + d);
    s = gtc_warp_sum(s);
    if (lane == 0) D[row] = s;
}

/* dk, dv for one tile of ATT_BK keys of kv head g; loops over the query heads of g's group in
 * order, and for each over the query tiles that can see the keys */
template <typename Act>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkdv_kernel(Act *dqkv, const Act *dout, const Act *qkv, const float *lse,
                                   const float *D, int T, int NH, int NKV, int hs, int window,
                                   float scale, const int *pos) {
    extern __shared__ float sm[];
    int ld = att_ld(hs);
    float *Ks = sm;                  /* [ATT_BK][ld] */
    float *Vs = Ks + ATT_BK * ld;    /* [ATT_BK][ld] */
    float *Qs = Vs + ATT_BK * ld;    /* [ATT_BQ][ld] */
    float *dOs = Qs + ATT_BQ * ld;   /* [ATT_BQ][ld] */
    float *Ls = dOs + ATT_BQ * ld;   /* [ATT_BQ] lse */
    float *Ds = Ls + ATT_BQ;         /* [ATT_BQ] D */
    int k0 = blockIdx.x * ATT_BK, g = blockIdx.y, bb = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = NH / NKV; /* query heads per kv head */
    const size_t C = (size_t)NH * hs, C3 = (size_t)(NH + 2 * NKV) * hs;
    const Act *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)g * hs;
    const Act *vbase = kbase + (size_t)NKV * hs;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr; /* packed rows: this sequence's positions */

    att_load_tile(Ks, ld, kbase, C3, k0, ATT_BK, T, hs);
    att_load_tile(Vs, ld, vbase, C3, k0, ATT_BK, T, hs);

    float dk[ATT_KPW][ATT_DPL], dv[ATT_KPW][ATT_DPL];
    #pragma unroll
    for (int i = 0; i < ATT_KPW; i++)
        #pragma unroll
        for (int r = 0; r < ATT_DPL; r++) dk[i][r] = dv[i][r] = 0.0f;

    /* queries t >= k0 (and, with a window, before the last key's query end) see this tile */
    const int q_end = gtc_att_query_end(min(k0 + ATT_BK, T) - 1, window, T);
    for (int h = g * G; h < g * G + G; h++) {
        const Act *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * hs;
        const Act *dobase = dout + (size_t)bb * T * C + (size_t)h * hs;
        const float *lrow = lse + ((size_t)bb * NH + h) * T;
        const float *drow = D + ((size_t)bb * NH + h) * T;
        /* start at the query tile holding k0 */
        for (int q0 = (k0 / ATT_BQ) * ATT_BQ; q0 < q_end; q0 += ATT_BQ) {
            __syncthreads();
            att_load_tile(Qs, ld, qbase, C3, q0, ATT_BQ, T, hs);
            att_load_tile(dOs, ld, dobase, C, q0, ATT_BQ, T, hs);
            for (int r = threadIdx.x; r < ATT_BQ; r += blockDim.x) {
                int t = q0 + r;
                Ls[r] = t < T ? lrow[t] : 0.0f;
                Ds[r] = t < T ? drow[t] : 0.0f;
            }
            __syncthreads();
            #pragma unroll
            for (int i = 0; i < ATT_KPW; i++) {
                int kr = warp + ATT_WARPS * i;
                int j = k0 + kr;
                int tend = gtc_att_query_end(j, window, T); /* queries [j, tend) see key j */
                /* warp-uniform: no query of the tile sees key j */
                if (j >= T || q0 + ATT_BQ - 1 < j || q0 >= tend) continue;
                int t = q0 + lane;
                float p = 0.0f, ds = 0.0f;
                /* positions: t sees key j only within its own example (t - posr[t] <= j) */
                if (t < tend && t >= j && (!posr || t - posr[t] <= j)) {
                    p = expf(att_score(Qs + lane * ld, Ks + kr * ld, hs, scale) - Ls[lane]);
                    ds = p * (att_dot(dOs + lane * ld, Vs + kr * ld, hs) - Ds[lane]);
                }
                int ii0 = max(0, j - q0), ii1 = min(ATT_BQ, tend - q0);
                att_axpy_rows(dv[i], p, dOs, ld, ii0, ii1, hs, lane);
                att_axpy_rows(dk[i], ds, Qs, ld, ii0, ii1, hs, lane);
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_KPW; i++) {
        int j = k0 + warp + ATT_WARPS * i;
        if (j >= T) continue;
        Act *dkrow = dqkv + ((size_t)bb * T + j) * C3 + C + (size_t)g * hs;
        att_store_row(dkrow, dk[i], scale, hs, lane);
        att_store_row(dkrow + (size_t)NKV * hs, dv[i], 1.0f, hs, lane);
    }
}

/* dq for one tile of ATT_BR queries; loops over the key tiles they see */
template <typename Act>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(Act *dqkv, const Act *dout, const Act *qkv, const float *lse,
                                 const float *D, int T, int NH, int NKV, int hs, int window,
                                 float scale, const int *pos) {
    extern __shared__ float sm[];
    int ld = att_ld(hs);
    float *Qs = sm;                 /* [ATT_BR][ld] */
    float *dOs = Qs + ATT_BR * ld;  /* [ATT_BR][ld] */
    float *Ks = dOs + ATT_BR * ld;  /* [ATT_BC][ld] */
    float *Vs = Ks + ATT_BC * ld;   /* [ATT_BC][ld] */
    int q0 = blockIdx.x * ATT_BR, h = blockIdx.y, bb = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = gtc_att_kv_head(h, NH, NKV);
    const size_t C = (size_t)NH * hs, C3 = (size_t)(NH + 2 * NKV) * hs;
    const Act *qbase = qkv + (size_t)bb * T * C3 + (size_t)h * hs;
    const Act *kbase = qkv + (size_t)bb * T * C3 + C + (size_t)g * hs;
    const Act *vbase = kbase + (size_t)NKV * hs;
    const Act *dobase = dout + (size_t)bb * T * C + (size_t)h * hs;
    const float *lrow = lse + ((size_t)bb * NH + h) * T;
    const float *drow = D + ((size_t)bb * NH + h) * T;
    const int *posr = pos ? pos + (size_t)bb * T : nullptr; /* packed rows: this sequence's positions */

    att_load_tile(Qs, ld, qbase, C3, q0, ATT_BR, T, hs);
    att_load_tile(dOs, ld, dobase, C, q0, ATT_BR, T, hs);

    float dq[ATT_RPW][ATT_DPL], Lr[ATT_RPW], Dr[ATT_RPW];
    #pragma unroll
    for (int i = 0; i < ATT_RPW; i++) {
        int t = q0 + warp + ATT_WARPS * i;
        Lr[i] = t < T ? lrow[t] : 0.0f;
        Dr[i] = t < T ? drow[t] : 0.0f;
        #pragma unroll
        for (int r = 0; r < ATT_DPL; r++) dq[i][r] = 0.0f;
    }
    int q_last = min(q0 + ATT_BR, T) - 1;
    int k_first = gtc_att_first_key_pos(q0, window, posr) / ATT_BC * ATT_BC;
    for (int k0 = k_first; k0 <= q_last; k0 += ATT_BC) {
        __syncthreads();
        att_load_tile(Ks, ld, kbase, C3, k0, ATT_BC, T, hs);
        att_load_tile(Vs, ld, vbase, C3, k0, ATT_BC, T, hs);
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < ATT_RPW; i++) {
            int r = warp + ATT_WARPS * i;
            int t = q0 + r;
            int jlo = t < T ? gtc_att_first_key_pos(t, window, posr) : 0;
            if (t >= T || k0 > t || k0 + ATT_BC <= jlo) continue; /* warp-uniform */
            int j = k0 + lane;
            float ds = 0.0f;
            if (j <= t && j >= jlo) {
                float p = expf(att_score(Qs + r * ld, Ks + lane * ld, hs, scale) - Lr[i]);
                ds = p * (att_dot(dOs + r * ld, Vs + lane * ld, hs) - Dr[i]);
            }
            att_axpy_rows(dq[i], ds, Ks, ld, max(0, jlo - k0), min(ATT_BC, t - k0 + 1), hs, lane);
        }
    }
    #pragma unroll
    for (int i = 0; i < ATT_RPW; i++) {
        int t = q0 + warp + ATT_WARPS * i;
        if (t >= T) continue;
        att_store_row(dqkv + ((size_t)bb * T + t) * C3 + (size_t)h * hs, dq[i], scale, hs, lane);
    }
}

/* ------------------------------------------------------------------ host side */

int gtc_attention_init(CudaImpl *im, GtError *err) {
    /* the largest tiles (hs = 128) need more than the default 48 KiB of dynamic shared memory;
     * one setting per instantiation (fp32 and bf16 act dtype: same tiles, same sizes) */
    struct {
        const void *fn;
        size_t bytes;
        const char *name;
    } k[] = {
        {(const void *)attention_forward_kernel<float>, att_fwd_smem(ATT_MAX_HS),
         "attention_forward<fp32>"},
        {(const void *)attention_backward_dkdv_kernel<float>, att_dkdv_smem(ATT_MAX_HS),
         "attention_dkdv<fp32>"},
        {(const void *)attention_backward_dq_kernel<float>, att_dq_smem(ATT_MAX_HS),
         "attention_dq<fp32>"},
        {(const void *)attention_forward_kernel<gtc_bf16>, att_fwd_smem(ATT_MAX_HS),
         "attention_forward<bf16>"},
        {(const void *)attention_backward_dkdv_kernel<gtc_bf16>, att_dkdv_smem(ATT_MAX_HS),
         "attention_dkdv<bf16>"},
        {(const void *)attention_backward_dq_kernel<gtc_bf16>, att_dq_smem(ATT_MAX_HS),
         "attention_dq<bf16>"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (gtc_set_smem_limit(k[i].fn, k[i].bytes, k[i].name, err)) return -1;
    return gtc_attention_tc_init(im, err); /* the tensor-core kernels' limits */
}

/* a shape the kernels cannot run is a bug in the caller (model_desc validates): one line, exit 1 */
static void att_check_shape(int NH, int NKV, int hd, int window) {
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0 || hd < 1 || hd > ATT_MAX_HS || window < 0) {
        fprintf(stderr,
                "%s:%d: attention: unsupported shape NH=%d NKV=%d hd=%d window=%d (need NKV "
                "dividing NH, hd 1..%d, window >= 0)\n",
                __FILE__, __LINE__, NH, NKV, hd, window, ATT_MAX_HS);
        exit(GT_EXIT_FAILURE);
    }
}

template <typename Act>
static void attention_forward_t(Backend *b, Act *out, float *lse, const Act *qkv, int B, int T,
                                int NH, int NKV, int hs, int window, const int *pos) {
    float scale = 1.0f / sqrtf((float)hs);
    dim3 grid((unsigned)((T + ATT_BR - 1) / ATT_BR), (unsigned)NH, (unsigned)B);
    GTC_LAUNCH(attention_forward_kernel<Act>, grid, ATT_THREADS, att_fwd_smem(hs), gtc_stream(b),
               out, lse, qkv, T, NH, NKV, hs, window, scale, pos);
    CUDA_CHECK_LAUNCH();
}

void gtc_attention_forward(Backend *b, act_t *out, float *lse, const act_t *qkv, int B, int T,
                           int NH, int NKV, int hd, int window, const int *pos) {
    if (B <= 0 || T <= 0) return;
    att_check_shape(NH, NKV, hd, window);
    if (gtc_act_bf16(b) && gtc_attention_tc_supported(b, hd))
        gtc_attention_tc_forward(b, (gtc_bf16 *)out, lse, (const gtc_bf16 *)qkv, B, T, NH, NKV, hd,
                                 window, pos);
    else if (gtc_act_bf16(b))
        attention_forward_t(b, (gtc_bf16 *)out, lse, (const gtc_bf16 *)qkv, B, T, NH, NKV, hd,
                            window, pos);
    else
        attention_forward_t(b, (float *)out, lse, (const float *)qkv, B, T, NH, NKV, hd, window, pos);
}

/* D = rowsum(dout * out) into the workspace (both paths) */
template <typename Act>
static void attention_backward_d(Backend *b, float *workspace, const Act *dout, const Act *out,
                                 int B, int T, int NH, int hs) {
    size_t rows = (size_t)B * NH * T;
    int rows_per_block = GTC_THREADS / 32;
    GTC_LAUNCH(attention_backward_d_kernel<Act>,
               (unsigned)((rows + rows_per_block - 1) / rows_per_block), GTC_THREADS, 0,
               gtc_stream(b), workspace, dout, out, B, T, NH, hs);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
static void attention_backward_t(Backend *b, Act *dqkv, float *workspace, const Act *dout,
                                 const Act *qkv, const Act *out, const float *lse, int B, int T,
                                 int NH, int NKV, int hs, int window, const int *pos) {
    float scale = 1.0f / sqrtf((float)hs);
    cudaStream_t st = gtc_stream(b);
    attention_backward_d(b, workspace, dout, out, B, T, NH, hs);
    dim3 gk((unsigned)((T + ATT_BK - 1) / ATT_BK), (unsigned)NKV, (unsigned)B);
    GTC_LAUNCH(attention_backward_dkdv_kernel<Act>, gk, ATT_THREADS, att_dkdv_smem(hs), st, dqkv,
               dout, qkv, lse, workspace, T, NH, NKV, hs, window, scale, pos);
    CUDA_CHECK_LAUNCH();
    dim3 gq((unsigned)((T + ATT_BR - 1) / ATT_BR), (unsigned)NH, (unsigned)B);
    GTC_LAUNCH(attention_backward_dq_kernel<Act>, gq, ATT_THREADS, att_dq_smem(hs), st, dqkv, dout,
               qkv, lse, workspace, T, NH, NKV, hs, window, scale, pos);
    CUDA_CHECK_LAUNCH();
}

void gtc_attention_backward(Backend *b, act_t *dqkv, float *workspace, const act_t *dout,
                            const act_t *qkv, const act_t *out, const float *lse, int B, int T,
                            int NH, int NKV, int hd, int window, const int *pos) {
    if (B <= 0 || T <= 0) return;
    att_check_shape(NH, NKV, hd, window);
    if (gtc_act_bf16(b) && gtc_attention_tc_supported(b, hd)) {
        attention_backward_d(b, workspace, (const gtc_bf16 *)dout, (const gtc_bf16 *)out, B, T, NH,
                             hd);
        gtc_attention_tc_backward(b, (gtc_bf16 *)dqkv, workspace, (const gtc_bf16 *)dout,
                                  (const gtc_bf16 *)qkv, lse, B, T, NH, NKV, hd, window, pos);
    } else if (gtc_act_bf16(b))
        attention_backward_t(b, (gtc_bf16 *)dqkv, workspace, (const gtc_bf16 *)dout,
                             (const gtc_bf16 *)qkv, (const gtc_bf16 *)out, lse, B, T, NH, NKV, hd,
                             window, pos);
    else
        attention_backward_t(b, (float *)dqkv, workspace, (const float *)dout, (const float *)qkv,
                             (const float *)out, lse, B, T, NH, NKV, hd, window, pos);
}
