/* test_nccl_sim.cpp - the simulator's NCCL model (cuda/sim/nccl.cpp) on its own, under
 * `mpirun -np 2` (also -np 1): make test-cudasim-nccl.
 *
 * It carries a private stand-in of the gtcsim.h runtime interface (device memory = malloc'd
 * buffers in a table, poisoned; enqueue runs the work at once, or defers it until flush() to
 * model a stream that has not run yet), so the model is tested before and apart from
 * cuda/sim/runtime.cpp.
 *
 *   test_nccl_sim                 every API call: results exact and identical on all ranks (bf16
 *                                 sums bit for bit against rounding in double, in rank order),
 *                                 in-place forms, argument errors as NCCL returns them, the
 *                                 non-blocking state machine, abort/finalize with queued work,
 *                                 and (in forked children, 1-rank communicators) the misuses that
 *                                 must abort: a call while ncclInProgress, a partial overlap,
 *                                 destroy with queued work, a use after destroy. Exit 0: passed.
 *   test_nccl_sim mismatch-count  rank 1 all-reduces one float more than rank 0: both must fail
 *   test_nccl_sim mismatch-order  rank 1 calls all-gather where rank 0 calls all-reduce
 *                                 (the make target expects a non-zero exit naming the mismatch) */
#include "gtcsim.h"

#include <nccl.h>

#include <mpi.h>

#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------ stand-in runtime */

namespace {
std::vector<std::pair<char *, size_t>> g_dev;              /* live "device" allocations */
std::vector<std::pair<std::string, std::function<void()>>> g_queue; /* deferred work */
bool g_defer = false;
long g_reads = 0, g_writes = 0;

void *dev_alloc(size_t bytes) {
    char *p = (char *)malloc(bytes);
    memset(p, 0xff, bytes); /* NaN bytes */
    g_dev.push_back({p, bytes});
    return p;
}
void dev_free(void *p) {
    for (size_t i = 0; i < g_dev.size(); i++)
        if (g_dev[i].first == p) {
            memset(p, 0xff, g_dev[i].second);
            free(p);
            g_dev.erase(g_dev.begin() + (long)i);
            return;
        }
    abort();
}
void flush() {
    auto q = std::move(g_queue);
    g_queue.clear();
    for (auto &w : q) w.second();
}
} // namespace

namespace gtcsim {
bool is_device_range(const void *p, size_t bytes) {
    for (auto &a : g_dev)
        if ((const char *)p >= a.first && bytes <= a.second && (const char *)p - a.first <= (ptrdiff_t)(a.second - bytes))
            return true;
    return false;
}
bool is_pinned_range(const void *, size_t) { return false; }
void enqueue(cudaStream_t, const char *what, std::function<void()> work) {
    if (g_defer)
        g_queue.push_back({what, std::move(work)});
    else
        work();
}
void note_access(const void *p, size_t bytes, bool write) {
    if (!is_device_range(p, bytes)) fail("note_access of a range that is not device memory");
    (write ? g_writes : g_reads)++;
}
void enqueue_ranges(cudaStream_t s, const char *what, std::vector<Range> ranges, std::function<void()> work) {
    for (const Range &r : ranges) note_access(r.p, r.bytes, r.write); /* declared when queued */
    enqueue(s, what, std::move(work));
}
} // namespace gtcsim

/* ------------------------------------------------------------------------------ helpers */

namespace {
int g_rank = 0, g_world = 1, g_checks = 0, g_failures = 0;
cudaStream_t const STREAM = nullptr;

#define CHECK(cond, ...)                                                                \
    do {                                                                                \
        g_checks++;                                                                     \
        if (!(cond)) {                                                                  \
            g_failures++;                                                               \
            fprintf(stderr, "rank %d: %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
        }                                                                               \
    } while (0)

/* as dist_nccl.cu: ncclInProgress means poll until the state is ncclSuccess */
ncclResult_t settle(ncclComm_t c, ncclResult_t r, int *polls = nullptr) {
    if (r != ncclInProgress) return r;
    ncclResult_t st = ncclInProgress;
    for (int k = 0; k < 1000 && st == ncclInProgress; k++) {
        if (ncclCommGetAsyncError(c, &st) != ncclSuccess) return ncclInternalError;
        if (polls) ++*polls;
    }
    return st;
}

ncclComm_t open_comm(int nranks, int rank, bool blocking, bool over_mpi) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) gtcsim::fail("ncclGetUniqueId");
    if (over_mpi) MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking ? 1 : 0;
    ncclComm_t c = nullptr;
    int polls = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &cfg);
    CHECK(blocking ? r == ncclSuccess : r == ncclInProgress, "init returned %d", (int)r);
    CHECK(settle(c, r, &polls) == ncclSuccess, "init did not settle");
    CHECK(blocking || polls > 0, "a non-blocking init needed no poll");
    return c;
}

void close_comm(ncclComm_t c) {
    ncclResult_t r = ncclCommFinalize(c);
    CHECK(settle(c, r) == ncclSuccess, "finalize: %d", (int)r);
    CHECK(ncclCommDestroy(c) == ncclSuccess, "destroy");
}

template <typename T> std::vector<T> to_host(const void *d, size_t n) {
    std::vector<T> v(n);
    memcpy(v.data(), d, n * sizeof(T));
    return v;
}
template <typename T> void *to_dev(const std::vector<T> &v) {
    void *d = dev_alloc(v.size() * sizeof(T));
    memcpy(d, v.data(), v.size() * sizeof(T));
    return d;
}

/* every rank holds the same bytes */
bool same_everywhere(const void *p, size_t bytes) {
    std::vector<char> all(bytes * (size_t)g_world);
    MPI_Allgather(p, (int)bytes, MPI_BYTE, all.data(), (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 1; r < g_world; r++)
        if (memcmp(all.data(), all.data() + (size_t)r * bytes, bytes) != 0) return false;
    return true;
}

/* ------------------------------------------------------------------------------ tests */

void test_basics() {
    int v = 0;
    CHECK(ncclGetVersion(&v) == ncclSuccess && v == 22809, "version %d", v);
    CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument, "null version");
    CHECK(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "error string");
    CHECK(strstr(ncclGetErrorString(ncclInProgress), "progress") != nullptr, "error string");
    ncclUniqueId a, b, zero;
    memset(&zero, 0, sizeof zero);
    CHECK(ncclGetUniqueId(&a) == ncclSuccess && ncclGetUniqueId(&b) == ncclSuccess, "ids");
    CHECK(memcmp(&a, &b, sizeof a) != 0, "two ids are equal");
    CHECK(ncclGetUniqueId(nullptr) == ncclInvalidArgument, "null id");
    ncclComm_t c = nullptr;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    CHECK(ncclCommInitRankConfig(nullptr, 1, a, 0, &cfg) == ncclInvalidArgument, "null comm");
    CHECK(ncclCommInitRankConfig(&c, 0, a, 0, &cfg) == ncclInvalidArgument && !c, "nranks 0");
    CHECK(ncclCommInitRankConfig(&c, 2, a, 2, &cfg) == ncclInvalidArgument && !c, "rank 2 of 2");
    CHECK(ncclCommInitRankConfig(&c, 1, zero, 0, &cfg) == ncclInvalidArgument && !c, "zero id");
    CHECK(strstr(ncclGetLastError(nullptr), "ncclGetUniqueId") != nullptr, "last error: %s", ncclGetLastError(nullptr));
    ncclConfig_t raw;
    memset(&raw, 0, sizeof raw);
    CHECK(ncclCommInitRankConfig(&c, 1, a, 0, &raw) == ncclInvalidArgument && !c, "uninitialised config");
    cfg.blocking = 7;
    CHECK(ncclCommInitRankConfig(&c, 1, a, 0, &cfg) == ncclInvalidArgument && !c, "blocking 7");
    /* a blocking 1-rank communicator (config NULL): no MPI, collectives are copies */
    CHECK(ncclCommInitRankConfig(&c, 1, a, 0, nullptr) == ncclSuccess && c, "blocking init");
    std::vector<float> h = {1.5f, -2.0f, 3.25f};
    void *d = to_dev(h), *o = dev_alloc(3 * sizeof(float));
    CHECK(ncclAllReduce(d, o, 3, ncclFloat32, ncclSum, c, STREAM) == ncclSuccess, "1-rank all-reduce");
    CHECK(to_host<float>(o, 3) == h, "1-rank all-reduce is a copy");
    CHECK(ncclCommGetAsyncError(c, nullptr) == ncclInvalidArgument, "null asyncError");
    CHECK(ncclCommFinalize(c) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess, "blocking close");
    CHECK(ncclCommDestroy(nullptr) == ncclSuccess && ncclCommAbort(nullptr) == ncclSuccess, "NULL destroy/abort");
    dev_free(d);
    dev_free(o);
}

void test_allreduce(ncclComm_t c) {
    const size_t n = 1001;
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = (float)(g_rank + 1) * (float)(i % 97) * 0.25f;
    void *d = to_dev(h), *o = dev_alloc(n * sizeof(float));
    const float tri = (float)(g_world * (g_world + 1) / 2);
    long reads = g_reads, writes = g_writes;
    CHECK(settle(c, ncclAllReduce(d, o, n, ncclFloat32, ncclSum, c, STREAM)) == ncclSuccess, "all-reduce");
    CHECK(g_reads == reads + 1 && g_writes == writes + 1, "declared ranges: %ld reads %ld writes", g_reads - reads,
          g_writes - writes);
    CHECK(settle(c, ncclAllReduce(d, d, n, ncclFloat32, ncclSum, c, STREAM)) == ncclSuccess, "in place");
    auto a = to_host<float>(o, n), b = to_host<float>(d, n);
    for (size_t i = 0; i < n; i++) {
        CHECK(a[i] == tri * (float)(i % 97) * 0.25f, "element %zu: %g", i, a[i]);
        CHECK(b[i] == a[i], "in place element %zu: %g vs %g", i, b[i], a[i]);
    }
    /* rounding: 0.1 * (r + 1) summed in float in rank order, identical on every rank */
    float x = 0.1f * (float)(g_rank + 1) + 1e-3f * (float)g_rank;
    void *dx = to_dev(std::vector<float>{x});
    CHECK(settle(c, ncclAllReduce(dx, dx, 1, ncclFloat32, ncclSum, c, STREAM)) == ncclSuccess, "scalar");
    float got = to_host<float>(dx, 1)[0], want = 0.0f;
    for (int r = 0; r < g_world; r++) want = r == 0 ? 0.1f : want + (0.1f * (float)(r + 1) + 1e-3f * (float)r);
    CHECK(got == want, "float sum in rank order: %.9g, expected %.9g", got, want);
    CHECK(same_everywhere(&got, sizeof got), "ranks differ");
    /* doubles, int64 (beyond 2^53), int32 max */
    void *dd = to_dev(std::vector<double>{0.5 * (g_rank + 1), 1e300, -1.0});
    void *di = to_dev(std::vector<int64_t>{((int64_t)1 << 60) + g_rank, 7});
    void *dm = to_dev(std::vector<int32_t>{g_rank == g_world - 1 ? 15 : -3, -g_rank});
    CHECK(settle(c, ncclAllReduce(dd, dd, 3, ncclFloat64, ncclSum, c, STREAM)) == ncclSuccess, "f64");
    CHECK(settle(c, ncclAllReduce(di, di, 2, ncclInt64, ncclSum, c, STREAM)) == ncclSuccess, "i64");
    CHECK(settle(c, ncclAllReduce(dm, dm, 2, ncclInt32, ncclMax, c, STREAM)) == ncclSuccess, "i32 max");
    auto vd = to_host<double>(dd, 3);
    auto vi = to_host<int64_t>(di, 2);
    auto vm = to_host<int32_t>(dm, 2);
    CHECK(vd[0] == 0.5 * tri && vd[1] == 1e300 * g_world && vd[2] == -g_world, "f64 %g %g %g", vd[0], vd[1], vd[2]);
    CHECK(vi[0] == ((int64_t)g_world << 60) + (int64_t)(g_world * (g_world - 1) / 2) && vi[1] == 7 * g_world,
          "i64 %lld %lld", (long long)vi[0], (long long)vi[1]);
    CHECK(vm[0] == 15 && vm[1] == 0, "i32 max %d %d", vm[0], vm[1]);
    for (void *p : {d, o, dx, dd, di, dm}) dev_free(p);
}

void test_zero1(ncclComm_t c) {
    const size_t shard = 37, n = shard * (size_t)g_world;
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = (float)(g_rank + 1) * (float)i;
    const float tri = (float)(g_world * (g_world + 1) / 2);
    /* reduce-scatter, in place: recvbuff = sendbuff + rank * recvcount */
    float *d = (float *)to_dev(h);
    CHECK(settle(c, ncclReduceScatter(d, d + (size_t)g_rank * shard, shard, ncclFloat32, ncclSum, c, STREAM)) ==
              ncclSuccess,
          "reduce-scatter in place");
    auto b = to_host<float>(d, n);
    for (size_t i = g_rank * shard; i < (g_rank + 1) * shard; i++) CHECK(b[i] == tri * (float)i, "rs %zu: %g", i, b[i]);
    /* out of place */
    float *s = (float *)to_dev(h), *r = (float *)dev_alloc(shard * sizeof(float));
    CHECK(settle(c, ncclReduceScatter(s, r, shard, ncclFloat32, ncclSum, c, STREAM)) == ncclSuccess, "rs");
    auto rr = to_host<float>(r, shard);
    for (size_t i = 0; i < shard; i++) CHECK(rr[i] == tri * (float)(g_rank * shard + i), "rs out %zu: %g", i, rr[i]);
    /* all-gather in place: sendbuff = recvbuff + rank * sendcount */
    CHECK(settle(c, ncclAllGather(d + (size_t)g_rank * shard, d, shard, ncclFloat32, c, STREAM)) == ncclSuccess,
          "all-gather in place");
    b = to_host<float>(d, n);
    for (size_t i = 0; i < n; i++) CHECK(b[i] == tri * (float)i, "ag %zu: %g", i, b[i]);
    /* out of place, rank r sends r's marker */
    float *g = (float *)dev_alloc(n * sizeof(float));
    CHECK(settle(c, ncclAllGather(r, g, shard, ncclFloat32, c, STREAM)) == ncclSuccess, "ag");
    auto gg = to_host<float>(g, n);
    for (size_t i = 0; i < n; i++) CHECK(gg[i] == tri * (float)i, "ag out %zu: %g", i, gg[i]);
    for (void *p : {(void *)d, (void *)s, (void *)r, (void *)g}) dev_free(p);
}

/* x rounded to bf16 (8 significant bits) to nearest even, in double (frexp, nearbyint: not the
 * model's bit arithmetic); the bits of such a value; rank r's value i (24 random bits at a scale
 * from 2^-30 to 2^9, so rounding drops bits and sums often tie) */
double ref_bf16(double x) {
    if (x == 0) return x;
    int e;
    const double m = frexp(x, &e);
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}
uint16_t bf16_bits(double x) {
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}
double rank_value(int r, size_t i) {
    uint64_t z = ((uint64_t)r << 40) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double v = ldexp((double)((int64_t)(z & 0xFFFFFF) - 0x800000), (int)((z >> 32) % 40) - 53);
    return ref_bf16(v != 0 ? v : 1.0);
}
/* the bf16 sum of value i over the ranks in rank order, each step rounded (exact in double before) */
uint16_t want_bf16(size_t i) {
    double acc = rank_value(0, i);
    for (int r = 1; r < g_world; r++) acc = ref_bf16(acc + rank_value(r, i));
    return bf16_bits(acc);
}

/* ncclBfloat16 sums (ddp_grad_dtype bf16): all-reduce in place and out of place, reduce-scatter in place */
void test_bf16(ncclComm_t c) {
    const size_t shard = 4099, n = shard * (size_t)g_world;
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; i++) h[i] = bf16_bits(rank_value(g_rank, i));
    void *d = to_dev(h), *o = dev_alloc(n * sizeof(uint16_t)), *z = to_dev(h);
    CHECK(settle(c, ncclAllReduce(d, o, n, ncclBfloat16, ncclSum, c, STREAM)) == ncclSuccess, "bf16 all-reduce");
    CHECK(settle(c, ncclAllReduce(d, d, n, ncclBfloat16, ncclSum, c, STREAM)) == ncclSuccess, "bf16 in place");
    auto a = to_host<uint16_t>(o, n), b = to_host<uint16_t>(d, n);
    size_t rounded = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(a[i] == want_bf16(i), "bf16 element %zu: 0x%04x, expected 0x%04x", i, a[i], want_bf16(i));
        CHECK(b[i] == a[i], "bf16 in place element %zu", i);
        double exact = 0;
        for (int r = 0; r < g_world; r++) exact += rank_value(r, i);
        rounded += (double)ref_bf16(exact) != exact || (g_world > 1 && bf16_bits(exact) != a[i]);
    }
    CHECK(g_world == 1 || rounded > n / 4, "only %zu of %zu sums needed rounding: the data test nothing", rounded, n);
    CHECK(same_everywhere(a.data(), n * sizeof(uint16_t)), "bf16 sums differ between ranks");
    uint16_t *zz = (uint16_t *)z;
    CHECK(settle(c, ncclReduceScatter(zz, zz + (size_t)g_rank * shard, shard, ncclBfloat16, ncclSum, c, STREAM)) ==
              ncclSuccess,
          "bf16 reduce-scatter in place");
    auto r = to_host<uint16_t>(z, n);
    for (size_t i = (size_t)g_rank * shard; i < (size_t)(g_rank + 1) * shard; i++)
        CHECK(r[i] == want_bf16(i), "bf16 rs %zu: 0x%04x, expected 0x%04x", i, r[i], want_bf16(i));
    for (void *p : {d, o, z}) dev_free(p);
}

void test_errors(ncclComm_t c) {
    float host[4] = {0, 0, 0, 0};
    float *d = (float *)dev_alloc(8 * sizeof(float) * (size_t)g_world);
    long reads = g_reads;
    CHECK(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, nullptr, STREAM) == ncclInvalidArgument, "null comm");
    CHECK(ncclAllReduce(host, host, 4, ncclFloat32, ncclSum, c, STREAM) == ncclInvalidArgument, "host buffer");
    CHECK(strstr(ncclGetLastError(c), "not device memory") != nullptr, "last error: %s", ncclGetLastError(c));
    CHECK(ncclAllReduce(d, host, 4, ncclFloat32, ncclSum, c, STREAM) == ncclInvalidArgument, "host recvbuff");
    CHECK(ncclAllReduce(nullptr, d, 4, ncclFloat32, ncclSum, c, STREAM) == ncclInvalidArgument, "null sendbuff");
    CHECK(ncclAllReduce(d, d, 4, (ncclDataType_t)99, ncclSum, c, STREAM) == ncclInvalidArgument, "bad type");
    CHECK(ncclAllReduce(d, d, 4, ncclFloat32, (ncclRedOp_t)42, c, STREAM) == ncclInvalidArgument, "bad op");
    /* one past the allocation */
    CHECK(ncclAllReduce(d, d, 8 * (size_t)g_world + 1, ncclFloat32, ncclSum, c, STREAM) == ncclInvalidArgument,
          "too long");
    CHECK(ncclReduceScatter(d, d, 8 + 1, ncclFloat32, ncclSum, c, STREAM) == ncclInvalidArgument,
          "reduce-scatter reads world * recvcount");
    CHECK(ncclAllGather(d, d, 8 + 1, ncclFloat32, c, STREAM) == ncclInvalidArgument,
          "all-gather writes world * sendcount");
    CHECK(ncclAllReduce(d, d, 0, ncclFloat32, ncclSum, c, STREAM) == ncclSuccess, "count 0");
    CHECK(g_reads == reads, "an erroneous or empty call queued work");
    dev_free(d);
}

/* deferred stream work: finalize waits for it; abort skips it */
void test_queued(ncclComm_t c) {
    std::vector<float> h(5, (float)(g_rank + 1));
    void *d = to_dev(h);
    g_defer = true;
    CHECK(settle(c, ncclAllReduce(d, d, 5, ncclFloat32, ncclSum, c, STREAM)) == ncclSuccess, "queued all-reduce");
    CHECK(to_host<float>(d, 5) == h, "the all-reduce ran before its stream did");
    ncclResult_t r = ncclCommFinalize(c), st = ncclSuccess;
    CHECK(r == ncclInProgress, "non-blocking finalize returned %d", (int)r);
    for (int k = 0; k < 10; k++) ncclCommGetAsyncError(c, &st);
    CHECK(st == ncclInProgress, "finalized with a collective still queued");
    flush();
    CHECK(settle(c, ncclInProgress) == ncclSuccess, "finalize after the flush");
    CHECK(to_host<float>(d, 5)[0] == (float)(g_world * (g_world + 1) / 2), "flushed all-reduce");
    CHECK(ncclCommDestroy(c) == ncclSuccess, "destroy");
    /* abort: a queued collective is skipped */
    ncclComm_t c2 = open_comm(g_world, g_rank, false, true);
    memcpy(d, h.data(), 5 * sizeof(float));
    CHECK(settle(c2, ncclAllReduce(d, d, 5, ncclFloat32, ncclSum, c2, STREAM)) == ncclSuccess, "queued");
    CHECK(ncclCommAbort(c2) == ncclSuccess, "abort");
    flush();
    CHECK(to_host<float>(d, 5) == h, "an aborted collective ran");
    g_defer = false;
    dev_free(d);
}

/* child: a misuse that must abort (SIGABRT) */
void expect_abort(const char *what, const std::function<void()> &fn) {
    fflush(nullptr);
    pid_t p = fork();
    if (p == 0) {
        rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(SIGABRT, SIG_DFL); /* not MPI's backtrace handler */
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s did not abort (status %d)", what, st);
}

void test_misuse() {
    expect_abort("a collective while the state is ncclInProgress", [] {
        ncclUniqueId id;
        ncclGetUniqueId(&id);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclComm_t c;
        if (ncclCommInitRankConfig(&c, 1, id, 0, &cfg) != ncclInProgress) _exit(3);
        void *d = dev_alloc(16);
        ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, STREAM); /* not polled first */
    });
    auto one = [] { return open_comm(1, 0, true, false); };
    expect_abort("all-reduce with partially overlapping buffers", [&] {
        ncclComm_t c = one();
        float *d = (float *)dev_alloc(64);
        ncclAllReduce(d, d + 1, 4, ncclFloat32, ncclSum, c, STREAM);
    });
    expect_abort("reduce-scatter overlapping not in NCCL's in-place form", [&] {
        ncclComm_t c = one();
        float *d = (float *)dev_alloc(64);
        ncclReduceScatter(d, d + 2, 4, ncclFloat32, ncclSum, c, STREAM); /* rank 0: only d is in place */
    });
    expect_abort("all-gather overlapping not in NCCL's in-place form", [&] {
        ncclComm_t c = one();
        float *d = (float *)dev_alloc(64);
        ncclAllGather(d + 1, d, 4, ncclFloat32, c, STREAM);
    });
    expect_abort("destroy with a collective still queued", [&] {
        ncclComm_t c = one();
        float *d = (float *)dev_alloc(64);
        g_defer = true;
        ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, STREAM);
        ncclCommDestroy(c);
    });
    expect_abort("a collective on a destroyed communicator", [&] {
        ncclComm_t c = one();
        float *d = (float *)dev_alloc(64);
        ncclCommDestroy(c);
        ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, STREAM);
    });
    expect_abort("a queued collective whose buffer was freed before it ran", [&] {
        ncclComm_t c = one();
        float *d = (float *)dev_alloc(64);
        g_defer = true;
        ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, STREAM);
        dev_free(d);
        flush();
    });
}

int mismatch(const char *mode) {
    ncclComm_t c = open_comm(g_world, g_rank, false, true);
    float *d = (float *)dev_alloc(64);
    if (strcmp(mode, "mismatch-count") == 0)
        settle(c, ncclAllReduce(d, d, g_rank == 1 ? 11 : 10, ncclFloat32, ncclSum, c, STREAM));
    else if (g_rank == 1)
        settle(c, ncclAllGather(d + g_rank, d, 1, ncclFloat32, c, STREAM));
    else
        settle(c, ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, c, STREAM));
    fprintf(stderr, "rank %d: the mismatch went unnoticed\n", g_rank);
    return 0;
}
} // namespace

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided); /* as src/run/dist.c */
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    if (argc > 1) {
        int rc = mismatch(argv[1]);
        MPI_Finalize();
        return rc;
    }
    test_basics();
    ncclComm_t c = open_comm(g_world, g_rank, false, true);
    test_allreduce(c);
    test_zero1(c);
    test_bf16(c);
    test_errors(c);
    test_queued(c);
    ncclComm_t b = open_comm(g_world, g_rank, true, true); /* blocking, over MPI */
    test_allreduce(b);
    close_comm(b);
    if (g_rank == 0) test_misuse();
    int bad = g_failures, all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("test_nccl_sim: rank %d of %d: %d checks, %d failed\n", g_rank, g_world, g_checks, g_failures);
    MPI_Finalize();
    return all_bad ? 1 : 0;
}
