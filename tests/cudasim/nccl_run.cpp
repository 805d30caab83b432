/* nccl_run.cpp - the real cuda/dist_nccl.cu run through the simulator's NCCL model
 * (cuda/sim/nccl.cpp), two ranks under `mpirun -np 2` with src/run/dist.c's MPI (make
 * test-cudasim-nccl), before the simulator's runtime (cuda/sim/runtime.cpp) exists.
 *
 * It carries a small stand-in CUDA runtime behind tests/cudasim/ncclrun/include/cuda_runtime.h
 * and the gtcsim.h interface: device memory is malloc'd, NaN-poisoned and kept in a table;
 * every stream is a queue that runs lazily (only cudaEventQuery and cudaStreamSynchronize make
 * progress), newest stream first, so a missing cudaStreamWaitEvent lets the communication stream
 * run before the compute work it needs and the result is wrong; events and stream waits are
 * honoured; cudaMemcpyAsync from pageable memory stages the source at the call, into pageable
 * memory it returns once the copy is done (as CUDA documents). The backend is a stand-in too:
 * a Backend named "cuda" whose CudaImpl has a compute stream, with "kernels" queued on it.
 *
 * It runs what tests/test_nccl.c's two-GPU test runs (bucketed all-reduce ordered between compute
 * work, reduce-scatter / all-gather in place, the bf16 all-reduce and reduce-scatter of
 * ddp_grad_dtype bf16, the host all-gather, host scalars), then a 1-rank
 * communicator per process. Exit 0: every check passed. */
#include "gtcsim.h"

#include "cuda_common.cuh"

extern "C" {
#include "dist.h"
#include "dist_nccl.h"
}

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

/* ------------------------------------------------------------------------------ stand-in runtime */

struct CUevent_st {
    uint64_t recorded = 0, completed = 0; /* generations */
};
struct Item {
    std::string what;
    std::function<void()> fn;          /* work */
    CUevent_st *record = nullptr;      /* or: the event to complete */
    CUevent_st *wait = nullptr;        /* or: the event to wait for */
    uint64_t gen = 0;
};
struct CUstream_st {
    std::deque<Item> q;
};

namespace {
std::map<const char *, size_t> g_dev, g_pinned; /* base -> bytes */
std::vector<CUstream_st *> g_streams;            /* in creation order; [0] is the legacy stream */
cudaError_t g_last_error = cudaSuccess;

bool in_table(const std::map<const char *, size_t> &t, const void *p, size_t bytes) {
    const char *c = (const char *)p;
    auto it = t.upper_bound(c);
    if (it == t.begin()) return false;
    --it;
    return c >= it->first && bytes <= it->second && (size_t)(c - it->first) <= it->second - bytes;
}

CUstream_st *stream_of(cudaStream_t s) {
    if (!s) return g_streams[0];
    for (CUstream_st *x : g_streams)
        if (x == s) return x;
    gtcsim::fail("not a live stream: %p", (void *)s);
}

/* run every runnable head of every queue, newest stream first, until nothing moves */
void progress() {
    for (bool moved = true; moved;) {
        moved = false;
        for (size_t i = g_streams.size(); i-- > 0;) {
            CUstream_st *s = g_streams[i];
            while (!s->q.empty()) {
                Item &h = s->q.front();
                if (h.wait && h.wait->completed < h.gen) break;
                Item it = std::move(h);
                s->q.pop_front();
                if (it.fn) it.fn();
                if (it.record && it.record->completed < it.gen) it.record->completed = it.gen;
                moved = true;
            }
        }
    }
}

void drain(CUstream_st *s, const char *what) {
    progress();
    if (!s->q.empty()) gtcsim::fail("%s: the stream waits for an event that is never recorded (deadlock)", what);
}
} // namespace

namespace gtcsim {
bool is_device_range(const void *p, size_t bytes) { return in_table(g_dev, p, bytes); }
bool is_pinned_range(const void *p, size_t bytes) { return in_table(g_pinned, p, bytes); }
void enqueue(cudaStream_t s, const char *what, std::function<void()> work) {
    Item it;
    it.what = what;
    it.fn = std::move(work);
    stream_of(s)->q.push_back(std::move(it));
}
void note_access(const void *p, size_t bytes, bool) {
    if (!is_device_range(p, bytes)) fail("note_access: %p (%zu bytes) is not device memory", p, bytes);
}
void enqueue_ranges(cudaStream_t s, const char *what, std::vector<Range> ranges, std::function<void()> work) {
    for (const Range &r : ranges)
        if (!is_device_range(r.p, r.bytes)) fail("%s: %p (%zu bytes) is not device memory", what, r.p, r.bytes);
    enqueue(s, what, std::move(work));
}
} // namespace gtcsim

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return "invalid argument";
    }
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new CUstream_st;
    g_streams.push_back(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    CUstream_st *x = stream_of(s);
    drain(x, "cudaStreamDestroy");
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == x) g_streams.erase(g_streams.begin() + (long)i);
    delete x;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    drain(stream_of(s), "cudaStreamSynchronize");
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    if (!e || flags) return cudaErrorInvalidValue;
    Item it;
    it.what = "cudaStreamWaitEvent";
    it.wait = e;
    it.gen = e->recorded; /* the work recorded so far, as CUDA */
    stream_of(s)->q.push_back(std::move(it));
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new CUevent_st;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e; /* (queued items holding it would be a bug the real runtime must catch) */
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return cudaErrorInvalidValue;
    Item it;
    it.what = "cudaEventRecord";
    it.record = e;
    it.gen = ++e->recorded;
    stream_of(s)->q.push_back(std::move(it));
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    progress();
    return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    char *m = (char *)malloc(bytes ? bytes : 1);
    memset(m, 0xff, bytes);
    g_dev[m] = bytes;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    auto it = g_dev.find((const char *)p);
    if (it == g_dev.end()) gtcsim::fail("cudaFree(%p): not a device allocation", p);
    progress(); /* as CUDA: cudaFree synchronises */
    memset(p, 0xff, it->second);
    g_dev.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) {
    char *m = (char *)malloc(bytes ? bytes : 1);
    g_pinned[m] = bytes;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    auto it = g_pinned.find((const char *)p);
    if (it == g_pinned.end()) gtcsim::fail("cudaFreeHost(%p): not a pinned allocation", p);
    g_pinned.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    const bool to_dev = kind == cudaMemcpyHostToDevice, from_dev = kind == cudaMemcpyDeviceToHost;
    if (!to_dev && !from_dev) gtcsim::fail("cudaMemcpyAsync: kind %d is not modelled here", (int)kind);
    const void *dev = to_dev ? dst : src, *host = to_dev ? src : dst;
    if (!gtcsim::is_device_range(dev, bytes)) gtcsim::fail("cudaMemcpyAsync: %p is not device memory", dev);
    if (gtcsim::is_device_range(host, bytes)) gtcsim::fail("cudaMemcpyAsync: %p is device memory", host);
    const bool pinned = gtcsim::is_pinned_range(host, bytes);
    if (to_dev && !pinned) { /* staged now: the caller may reuse src at once */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        gtcsim::enqueue(s, "cudaMemcpyAsync", [=] { memcpy(dst, staged->data(), bytes); });
        return cudaSuccess;
    }
    gtcsim::enqueue(s, "cudaMemcpyAsync", [=] { memcpy(dst, src, bytes); });
    if (from_dev && !pinned) drain(stream_of(s), "cudaMemcpyAsync into pageable memory"); /* returns when done */
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *, cudaFuncAttribute, int) { return cudaSuccess; }
const char *cublasGetStatusString(cublasStatus_t) { return "?"; }
__nv_bfloat16 __float2bfloat16_rn(float) { abort(); }

/* ------------------------------------------------------------------------------ the checks */

namespace {
int g_rank = 0, g_fail = 0, g_checks = 0;
#define CHECK(cond, ...)                                                                \
    do {                                                                                \
        g_checks++;                                                                     \
        if (!(cond)) {                                                                  \
            if (g_fail++ < 10) {                                                        \
                fprintf(stderr, "rank %d: %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                           \
                fputc('\n', stderr);                                                    \
            }                                                                           \
        }                                                                               \
    } while (0)

/* a "kernel" on the compute stream: x *= s */
void scale(CudaImpl *im, float *x, float s, size_t n) {
    gtcsim::enqueue(im->compute, "scale", [=] {
        gtcsim::note_access(x, n * sizeof(float), true);
        for (size_t i = 0; i < n; i++) x[i] *= s;
    });
}
/* another: x += a (does not commute with a sum over ranks: an order bug shows) */
void add(CudaImpl *im, float *x, float a, size_t n) {
    gtcsim::enqueue(im->compute, "add", [=] {
        gtcsim::note_access(x, n * sizeof(float), true);
        for (size_t i = 0; i < n; i++) x[i] += a;
    });
}
void to_device(CudaImpl *im, float *d, const float *h, size_t n) {
    cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, im->compute);
}
void to_host(CudaImpl *im, float *h, const float *d, size_t n) {
    cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, im->compute);
}

/* bf16 (ddp_grad_dtype bf16): x rounded to 8 significant bits to nearest even in double, and its
 * bits; rank r's value i: (i % 251 + 1) * (1 + r / 3) / 7 rounded so (sums of two need rounding) */
double ref_bf16(double x) {
    int e;
    const double m = frexp(x, &e);
    return x == 0 ? x : ldexp(nearbyint(ldexp(m, 8)), e - 8);
}
uint16_t bits(double x) {
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}
double bf16_in(int r, size_t i) { return ref_bf16((double)(i % 251 + 1) * (1.0 + r / 3.0) / 7.0); }
/* the sum over W ranks in rank order, each step rounded */
uint16_t bf16_want(int W, size_t i) {
    double acc = bf16_in(0, i);
    for (int r = 1; r < W; r++) acc = ref_bf16(acc + bf16_in(r, i));
    return bits(acc);
}

void bf16_collectives(NcclComm *c, CudaImpl *im, int R, int W) {
    GtError err = {};
    const size_t shard = 517, n = shard * (size_t)W;
    std::vector<uint16_t> h(n), back(n);
    for (size_t i = 0; i < n; i++) h[i] = bits(bf16_in(R, i));
    uint16_t *dev = nullptr;
    cudaMalloc(&dev, n * sizeof(uint16_t));
    cudaMemcpyAsync(dev, h.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, im->compute);
    CHECK(nccl_allreduce_bf16_start(c, dev, n / 3, &err) == 0, "%s", err.msg);
    CHECK(nccl_allreduce_bf16_start(c, dev + n / 3, n - n / 3, &err) == 0, "%s", err.msg);
    CHECK(nccl_wait_all(c, &err) == 0 && nccl_sync(c, nullptr, &err) == 0, "%s", err.msg);
    cudaMemcpyAsync(back.data(), dev, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, im->compute);
    cudaStreamSynchronize(im->compute);
    for (size_t i = 0; i < n; i++)
        CHECK(back[i] == bf16_want(W, i), "bf16 all-reduce %zu: 0x%04x, expected 0x%04x", i, back[i], bf16_want(W, i));
    cudaMemcpyAsync(dev, h.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, im->compute);
    CHECK(nccl_reduce_scatter_bf16(c, dev, shard, &err) == 0, "%s", err.msg);
    cudaMemcpyAsync(back.data(), dev, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, im->compute);
    cudaStreamSynchronize(im->compute);
    for (size_t i = (size_t)R * shard; i < (size_t)(R + 1) * shard; i++)
        CHECK(back[i] == bf16_want(W, i), "bf16 reduce-scatter %zu: 0x%04x, expected 0x%04x", i, back[i],
              bf16_want(W, i));
    cudaFree(dev);
}

void ranks(Dist *d, Backend *be, CudaImpl *im) {
    GtError err = {};
    NcclComm *c = nullptr;
    if (nccl_open(&c, d, be, nullptr, 60.0, &err)) gtcsim::fail("nccl_open: %s", err.msg);
    char ver[64];
    CHECK(strcmp(nccl_version_string(ver, sizeof ver), "NCCL 2.28.9") == 0, "%s", ver);
    const int R = dist_rank(d), W = dist_world(d);
    const size_t shard = 1003, n = shard * (size_t)W;
    const float tri = (float)(W * (W + 1) / 2);
    std::vector<float> h(n), back(n);
    for (size_t i = 0; i < n; i++) h[i] = (float)(R + 1) * (float)(i % 4096);
    float *dev = nullptr;
    cudaMalloc(&dev, n * sizeof(float));
    /* compute: x *= 2; the all-reduce must see it; compute after nccl_wait_all: x += 1 */
    to_device(im, dev, h.data(), n);
    scale(im, dev, 2.0f, n);
    CHECK(nccl_allreduce_start(c, dev, n / 3, &err) == 0, "%s", err.msg);
    CHECK(nccl_allreduce_start(c, dev + n / 3, n - n / 3, &err) == 0, "%s", err.msg);
    CHECK(nccl_poll(c, &err) == 0, "%s", err.msg);
    CHECK(nccl_wait_all(c, &err) == 0, "%s", err.msg);
    add(im, dev, 1.0f, n);
    CHECK(nccl_sync(c, nullptr, &err) == 0, "%s", err.msg);
    to_host(im, back.data(), dev, n);
    for (size_t i = 0; i < n; i++)
        CHECK(back[i] == 2.0f * tri * (float)(i % 4096) + 1.0f, "all-reduce %zu: %g", i, back[i]);
    /* reduce-scatter: this rank's shard holds the sum */
    to_device(im, dev, h.data(), n);
    CHECK(nccl_reduce_scatter(c, dev, shard, &err) == 0, "%s", err.msg);
    to_host(im, back.data(), dev, n);
    for (size_t i = (size_t)R * shard; i < (size_t)(R + 1) * shard; i++)
        CHECK(back[i] == tri * (float)(i % 4096), "reduce-scatter %zu: %g", i, back[i]);
    bf16_collectives(c, im, R, W);
    CHECK(nccl_allgather(c, dev, shard, &err) == 0, "%s", err.msg);
    to_host(im, back.data(), dev, n);
    for (size_t i = 0; i < n; i++) CHECK(back[i] == tri * (float)(i % 4096), "all-gather %zu: %g", i, back[i]);
    for (size_t i = 0; i < n; i++) back[i] = i / shard == (size_t)R ? (float)i : -1.0f;
    CHECK(nccl_allgather_host(c, back.data(), shard, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) CHECK(back[i] == (float)i, "host all-gather %zu: %g", i, back[i]);
    double v[2] = {0.5 * (R + 1), 1.0};
    int64_t items = 1000 + R;
    int mx = R == W - 1 ? 15 : 2;
    CHECK(nccl_allreduce_f64_host(c, v, 2, &err) == 0, "%s", err.msg);
    CHECK(nccl_allreduce_i64_host(c, &items, 1, &err) == 0, "%s", err.msg);
    CHECK(nccl_allreduce_max_i32_host(c, &mx, &err) == 0, "%s", err.msg);
    CHECK(v[0] == 0.5 * tri && v[1] == W && items == 1000 * W + W * (W - 1) / 2 && mx == 15, "host scalars %g %g %lld %d",
          v[0], v[1], (long long)items, mx);
    CHECK(nccl_allreduce_f64_host(c, v, NCCL_HOST_MAX + 1, &err) != 0, "more than NCCL_HOST_MAX");
    nccl_close(c);
    cudaFree(dev);
}

void one_rank(Backend *be, CudaImpl *im) {
    GtError err = {};
    NcclComm *c = nullptr;
    if (nccl_open_ranks(&c, 0, 1, nullptr, be, nullptr, 60.0, &err)) gtcsim::fail("nccl_open_ranks: %s", err.msg);
    const size_t n = 999;
    std::vector<float> h(n), back(n);
    for (size_t i = 0; i < n; i++) h[i] = (float)i * 0.25f;
    float *dev = nullptr;
    cudaMalloc(&dev, n * sizeof(float));
    to_device(im, dev, h.data(), n);
    scale(im, dev, 3.0f, n);
    CHECK(nccl_allreduce_start(c, dev, n, &err) == 0 && nccl_wait_all(c, &err) == 0, "%s", err.msg);
    scale(im, dev, 0.5f, n);
    CHECK(nccl_sync(c, nullptr, &err) == 0, "%s", err.msg);
    to_host(im, back.data(), dev, n);
    for (size_t i = 0; i < n; i++) CHECK(back[i] == h[i] * 1.5f, "1 rank %zu: %g", i, back[i]);
    CHECK(nccl_reduce_scatter(c, dev, n, &err) == 0 && nccl_allgather(c, dev, n, &err) == 0, "%s", err.msg);
    to_host(im, back.data(), dev, n);
    for (size_t i = 0; i < n; i++) CHECK(back[i] == h[i] * 1.5f, "1 rank zero1 %zu: %g", i, back[i]);
    nccl_close(c);
    cudaFree(dev);
}
} // namespace

int main(int argc, char **argv) {
    cudaStream_t legacy;
    cudaStreamCreateWithFlags(&legacy, 0); /* g_streams[0] */
    GtError err = {};
    Dist *d = nullptr;
    if (dist_init(&d, &argc, &argv, 60.0, &err)) gtcsim::fail("dist_init: %s", err.msg);
    g_rank = dist_rank(d);
    BackendOps ops = {};
    ops.name = "cuda";
    ops.caps = GT_CAP_NCCL; /* what cuda/dist_nccl.cu checks before it opens (the real cuda backend sets it) */
    CudaImpl *im = (CudaImpl *)calloc(1, sizeof(CudaImpl));
    cudaStreamCreateWithFlags(&im->compute, cudaStreamNonBlocking);
    Backend be = {};
    be.ops = &ops;
    be.impl = im;
    if (dist_world(d) > 1) ranks(d, &be, im);
    one_rank(&be, im);
    printf("nccl_run: rank %d of %d: %d checks through cuda/dist_nccl.cu, %d failed\n", g_rank, dist_world(d),
           g_checks, g_fail);
    fflush(stdout);
    int bad = g_fail;
    if (dist_world(d) > 1) {
        int64_t b = bad;
        if (dist_allreduce_i64(d, &b, 1, &err)) gtcsim::fail("%s", err.msg);
        bad = (int)b;
    }
    dist_finalize(d);
    return bad ? 1 : 0;
}
