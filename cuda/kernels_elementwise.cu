/* kernels_elementwise.cu - the CUDA backend's elementwise ops (gelu forward/backward, add, scale,
 * to_act, convert) and AdamW, moving 16 bytes per load and store (cuda_common.cuh's packs, llm.c's
 * Packed128 idea). Contracts: backend.h; the formulas are backend_cpu.c's.
 *
 * Layout: thread k of the grid-stride loop takes packs k, k + stride, ... of N elements (N = 16 /
 * the smaller element size: 8 for bf16, 4 for fp32), then the elements past the last whole pack
 * (the tail, fewer than N) one per thread. A pointer that is not 16-byte aligned makes the
 * launcher send every element through the tail. Each element is computed by the same expression
 * in both paths, so the result is the scalar kernel's bits whatever the size or alignment.
 * AdamW steps every run of tensors of a step (backend.h: each run its own weight decay) in one
 * launch over the packs of the whole range: a pack inside one run in one go, a pack across a
 * run's edge (or a gap between runs) element by element.
 *
 * Aliasing: each thread reads all inputs of its pack (or element) before writing it, so out may
 * alias an input (gelu_backward's dinp = dout, add's out = x or y).
 *
 * Bytes per element (bf16 activations): gelu forward 2 read + 2 written, gelu backward 4 + 2,
 * add 4 + 2, to_act 4 + 2; AdamW 16 read (param, grad, m, v) + 12 written (param, m, v) + 2 (the
 * bf16 copy it writes in the same pass: the separate to_act pass read 4 and wrote 2 more). */
#include "cuda_common.cuh"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* ------------------------------------------------------------------ the packed map */

/* elements per pack of a kernel reading In and writing Out: one 16-byte word of the smaller type */
template <typename Out, typename In>
__host__ __device__ constexpr int map_pack() {
    return GTC_PACK(Out) > GTC_PACK(In) ? GTC_PACK(Out) : GTC_PACK(In);
}

/* out[i] = op(a[i], b[i]) (b NULL: op(a[i], 0)) for i < n: npack whole packs, then the tail */
template <typename Out, typename In, typename Op>
__global__ void map_kernel(Out *out, const In *a, const In *b, size_t n, size_t npack, Op op) {
    constexpr int N = map_pack<Out, In>();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t p = tid; p < npack; p += stride) {
        float x[N], y[N], o[N];
        load_pack<N>(x, a + p * N);
        if (b)
            load_pack<N>(y, b + p * N);
        else
            for (int k = 0; k < N; k++) y[k] = 0.0f;
#pragma unroll
        for (int k = 0; k < N; k++) o[k] = op(x[k], y[k]);
        store_pack<N>(out + p * N, o);
    }
    for (size_t i = npack * N + tid; i < n; i += stride)
        store_from_f32(out, i, op(load_f32(a, i), b ? load_f32(b, i) : 0.0f));
}

template <typename Out, typename In, typename Op>
static void map_launch(Backend *bk, Out *out, const In *a, const In *b, size_t n, Op op) {
    if (!n) return;
    constexpr int N = map_pack<Out, In>();
    const bool packed = gtc_aligned16(out) && gtc_aligned16(a) && (!b || gtc_aligned16(b));
    const size_t npack = packed ? n / N : 0;
    const size_t work = npack + (n - npack * N); /* one thread per pack and per tail element */
    GTC_LAUNCH((map_kernel<Out, In, Op>), gtc_blocks(work, GTC_THREADS), GTC_THREADS, 0,
               gtc_stream(bk), out, a, b, n, npack, op);
    CUDA_CHECK_LAUNCH();
}

struct GeluForwardOp {
    __device__ __forceinline__ float operator()(float x, float) const {
        float u = GELU_K * (x + GELU_A * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
};

/* x: the forward's input, dy: the gradient of its output */
struct GeluBackwardOp {
    __device__ __forceinline__ float operator()(float x, float dy) const {
        float x2 = x * x;
        float u = GELU_K * (x + GELU_A * x2 * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x2);
        return g * dy;
    }
};

struct AddOp {
    __device__ __forceinline__ float operator()(float x, float y) const { return x + y; }
};

/* the element as it is (with a change of dtype: the exact widening or the rounding to nearest even) */
struct CopyOp {
    __device__ __forceinline__ float operator()(float x, float) const { return x; }
};

struct ScaleOp {
    float s;
    __device__ __forceinline__ float operator()(float x, float) const { return x * s; }
};

/* ------------------------------------------------------------------ the ops */

void gtc_gelu_forward(Backend *b, act_t *out, const act_t *inp, size_t n) {
    if (gtc_act_bf16(b))
        map_launch(b, (gtc_bf16 *)out, (const gtc_bf16 *)inp, (const gtc_bf16 *)NULL, n, GeluForwardOp{});
    else
        map_launch(b, (float *)out, (const float *)inp, (const float *)NULL, n, GeluForwardOp{});
}

void gtc_gelu_backward(Backend *b, act_t *dinp, const act_t *inp, const act_t *dout, size_t n) {
    if (gtc_act_bf16(b))
        map_launch(b, (gtc_bf16 *)dinp, (const gtc_bf16 *)inp, (const gtc_bf16 *)dout, n, GeluBackwardOp{});
    else
        map_launch(b, (float *)dinp, (const float *)inp, (const float *)dout, n, GeluBackwardOp{});
}

void gtc_add(Backend *b, act_t *out, const act_t *x, const act_t *y, size_t n) {
    if (gtc_act_bf16(b))
        map_launch(b, (gtc_bf16 *)out, (const gtc_bf16 *)x, (const gtc_bf16 *)y, n, AddOp{});
    else
        map_launch(b, (float *)out, (const float *)x, (const float *)y, n, AddOp{});
}

/* fp32 -> act dtype: a device copy on the compute stream for fp32, a rounding kernel for bf16 */
void gtc_to_act(Backend *b, act_t *dst, const float *src, size_t n) {
    if (!n) return;
    if (gtc_act_bf16(b))
        map_launch(b, (gtc_bf16 *)dst, src, (const float *)NULL, n, CopyOp{});
    else if ((const void *)dst != (const void *)src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, gtc_stream(b)));
}

/* a stored weight into the act dtype (or back): to_act's rounding, or the exact widening */
void gtc_convert(Backend *b, void *dst, GtDtype dst_dtype, const void *src, GtDtype src_dtype, size_t n) {
    if (!n) return;
    if (dst_dtype == src_dtype) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * gt_dtype_size(dst_dtype), cudaMemcpyDeviceToDevice,
                                   gtc_stream(b)));
        return;
    }
    if (dst_dtype == GT_F32)
        map_launch(b, (float *)dst, (const gtc_bf16 *)src, (const gtc_bf16 *)NULL, n, CopyOp{});
    else
        map_launch(b, (gtc_bf16 *)dst, (const float *)src, (const float *)NULL, n, CopyOp{});
}

void gtc_scale(Backend *b, float *x, float s, size_t n) {
    map_launch(b, x, (const float *)x, (const float *)NULL, n, ScaleOp{s});
}

/* ------------------------------------------------------------------ AdamW */

/* the AdamW scalars, computed on the host exactly as backend_cpu.c does */
struct AdamwStep {
    float beta1, beta2, omb1, omb2, step, inv_sqrt_bc2, decay, eps;
    /* one element: p, mi, vi updated in place from the gradient g */
    __device__ __forceinline__ void apply(float &p, float &mi, float &vi, float g) const {
        mi = beta1 * mi + omb1 * g;
        vi = beta2 * vi + omb2 * g * g;
        p = p * decay;
        p = p - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
};

/* The runs of one launch (backend.h's adamw), passed by value as a kernel parameter: element ranges
 * relative to the call's pointers, in increasing order, and each run's decay factor
 * 1 - lr * weight_decay. 128 runs take 2.6 KB of the 4 KB of kernel parameters every CUDA version
 * allows (GPT-2's 98 runs: one launch). */
#define GTC_ADAMW_RUNS 128
struct AdamwRuns {
    size_t begin[GTC_ADAMW_RUNS], end[GTC_ADAMW_RUNS];
    float decay[GTC_ADAMW_RUNS];
    int n;
};

/* the first run that ends after element i (runs.n: none): a binary search (7 steps for 128 runs) */
__device__ __forceinline__ int adamw_run_of(const AdamwRuns &runs, size_t i) {
    int lo = 0, hi = runs.n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (runs.end[mid] <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* element i: p, m, v (and copy) updated with its run's decay; untouched outside every run */
template <typename Act>
__device__ __forceinline__ void adamw_element(float *param, const float *grad, float *m, float *v, Act *copy,
                                              size_t i, AdamwStep s, const AdamwRuns &runs) {
    const int r = adamw_run_of(runs, i);
    if (r == runs.n || i < runs.begin[r]) return;
    s.decay = runs.decay[r];
    float p = param[i], mi = m[i], vi = v[i];
    s.apply(p, mi, vi, grad[i]);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (copy) store_from_f32(copy, i, p);
}

/* param, m, v updated over the runs; copy (NULL: none) = the new param in the act dtype, in the same
 * pass. Packs q0..q1-1 of N elements (16-byte accesses; none when a pointer is not 16-byte
 * aligned): a pack inside one run in one go, a pack across a run's edge element by element; then
 * the elements from max(q1 N, the first run's begin) to the last run's end one by one. */
template <typename Act>
__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, Act *copy, size_t q0, size_t q1,
                             AdamwStep s, AdamwRuns runs) {
    constexpr int N = GTC_PACK(Act) > GTC_PACK(float) ? GTC_PACK(Act) : GTC_PACK(float);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t q = q0 + tid; q < q1; q += stride) {
        const size_t o = q * N;
        const int r = adamw_run_of(runs, o);
        if (r < runs.n && runs.begin[r] <= o && o + N <= runs.end[r]) {
            AdamwStep sr = s;
            sr.decay = runs.decay[r];
            float p[N], g[N], mi[N], vi[N];
            load_pack<N>(p, param + o);
            load_pack<N>(g, grad + o);
            load_pack<N>(mi, m + o);
            load_pack<N>(vi, v + o);
#pragma unroll
            for (int k = 0; k < N; k++) sr.apply(p[k], mi[k], vi[k], g[k]);
            store_pack<N>(m + o, mi);
            store_pack<N>(v + o, vi);
            store_pack<N>(param + o, p);
            if (copy) store_pack<N>(copy + o, p);
        } else {
            for (int k = 0; k < N; k++) adamw_element(param, grad, m, v, copy, o + k, s, runs);
        }
    }
    const size_t first = q1 * N > runs.begin[0] ? q1 * N : runs.begin[0];
    for (size_t i = first + tid; i < runs.end[runs.n - 1]; i += stride)
        adamw_element(param, grad, m, v, copy, i, s, runs);
}

template <typename Act>
static void adamw_launch(Backend *b, float *param, const float *grad, float *m, float *v, Act *copy,
                         const AdamwRun *runs, int n_runs, float lr, const AdamwStep &s) {
    constexpr int N = GTC_PACK(Act) > GTC_PACK(float) ? GTC_PACK(Act) : GTC_PACK(float);
    const bool packed = gtc_aligned16(param) && gtc_aligned16(grad) && gtc_aligned16(m) && gtc_aligned16(v) &&
                        (!copy || gtc_aligned16(copy));
    for (int k0 = 0; k0 < n_runs; k0 += GTC_ADAMW_RUNS) {
        AdamwRuns t;
        t.n = 0;
        for (int k = k0; k < n_runs && k < k0 + GTC_ADAMW_RUNS; k++) {
            if (runs[k].end <= runs[k].begin) continue; /* empty */
            t.begin[t.n] = runs[k].begin;
            t.end[t.n] = runs[k].end;
            t.decay[t.n] = (float)(1.0 - (double)lr * (double)runs[k].weight_decay);
            t.n++;
        }
        if (!t.n) continue;
        const size_t lo = t.begin[0], hi = t.end[t.n - 1];
        /* the packs that hold an element of these runs, and the elements past the last whole pack */
        const size_t q0 = packed ? lo / N : 0, q1 = packed ? hi / N : 0;
        const size_t tail_from = q1 * N > lo ? q1 * N : lo;
        const size_t work = (q1 > q0 ? q1 - q0 : 0) + (hi - tail_from);
        GTC_LAUNCH(adamw_kernel<Act>, gtc_blocks(work, GTC_THREADS), GTC_THREADS, 0, gtc_stream(b), param, grad, m,
                   v, copy, q0, q1, s, t);
        CUDA_CHECK_LAUNCH();
    }
}

void gtc_adamw(Backend *b, float *param, const float *grad, float *m, float *v, act_t *act_copy,
               const AdamwRun *runs, int n_runs, float lr, float beta1, float beta2, float eps, int t) {
    if (n_runs <= 0) return;
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    AdamwStep s;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.omb1 = 1.0f - beta1;
    s.omb2 = 1.0f - beta2;
    s.step = (float)((double)lr / bc1);
    s.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    s.decay = 1.0f; /* each run's own: AdamwRuns.decay */
    s.eps = eps;
    if (act_copy == (act_t *)param) act_copy = NULL; /* fp32 act: the weights are the params */
    if (act_copy && gtc_act_bf16(b))
        adamw_launch(b, param, grad, m, v, (gtc_bf16 *)act_copy, runs, n_runs, lr, s);
    else
        adamw_launch(b, param, grad, m, v, (float *)act_copy, runs, n_runs, lr, s);
}
