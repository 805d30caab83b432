/* nccl.cpp - the CUDA simulator's model of NCCL (cuda/sim/include/nccl.h): the subset that
 * cuda/dist_nccl.cu calls, on the host, with the ranks as MPI processes (mpirun -np N).
 *
 * - ncclGetUniqueId: a magic string, a random 64-bit tag and the creator's pid.
 * - ncclCommInitRankConfig: nranks 1 needs no MPI. nranks > 1 needs MPI up (MPI_Init by the
 *   caller, as src/run/dist.c does under mpirun); it is collective over MPI_COMM_WORLD (every process
 *   calls it at the same point): a dup of MPI_COMM_WORLD, an all-gather of (tag, nranks, rank) and
 *   a split by tag give the communicator, ordered by NCCL rank; disagreements fail loudly.
 * - Collectives (ncclAllReduce, ncclReduceScatter, ncclAllGather) validate their arguments when
 *   called (as NCCL documents: null comm, counts, types, ops; buffers must be device memory; the
 *   only overlapping form is NCCL's in-place one) and queue their work on the stream with their
 *   buffers declared (gtcsim::enqueue_ranges: the race check sees them from then on). The work
 *   first all-gathers a descriptor (sequence number, kind, type, op, count): every rank must
 *   call the same collectives in the same order with the same counts, else all fail loudly
 *   naming each rank's call. Then it copies the device buffer to the host,
 *   exchanges it (MPI_Iallgather / MPI_Ialltoall, polled with a deadline: GTCSIM_NCCL_TIMEOUT
 *   seconds, default 120), reduces in rank order 0, 1, ... (deterministic, identical on every
 *   rank; float sums in float as NCCL's kernels do, bf16 ones in fp32 rounded to bf16 at each step)
 *   and writes the result back.
 * - Non-blocking communicators (config.blocking = 0): init and finalize return ncclInProgress and
 *   every second collective does too; the state (ncclCommGetAsyncError) turns ncclSuccess after a
 *   poll or two (finalize: once the queued work has run). Any other call on a communicator whose
 *   state is ncclInProgress breaks NCCL's rule and fails loudly.
 * - Errors NCCL reports by return code are returned (with ncclGetLastError's text, also printed);
 *   misuse that NCCL would not report (a hang, undefined behaviour) aborts via gtcsim::fail. */
#include "gtcsim.h"

#include <cuda_bf16.h>
#include <nccl.h>

#include <mpi.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace {

const char ID_MAGIC[16] = "gtcsim-nccl-id1";

struct IdBody {
    char magic[16];
    uint64_t tag;
    uint64_t pid;
};
static_assert(sizeof(IdBody) <= NCCL_UNIQUE_ID_BYTES);

enum Kind : uint32_t { K_ALLREDUCE = 1, K_REDUCESCATTER = 2, K_ALLGATHER = 3 };
const char *kind_name(uint32_t k) {
    return k == K_ALLREDUCE ? "ncclAllReduce" : k == K_REDUCESCATTER ? "ncclReduceScatter" : k == K_ALLGATHER ? "ncclAllGather" : "?";
}

/* what every rank's collective #seq must agree on */
struct Desc {
    uint64_t seq, count, tag;
    uint32_t kind, dtype, op, rank;
};

} // namespace

struct ncclComm {
    uint64_t tag = 0;
    int nranks = 1, rank = 0;
    bool blocking = true;
    MPI_Comm mpi = MPI_COMM_NULL;
    ncclResult_t state = ncclSuccess; /* what ncclCommGetAsyncError reports */
    int polls_left = 0;               /* ncclInProgress turns ncclSuccess after this many polls */
    bool finalizing = false, finalized = false, aborted = false;
    uint64_t seq = 0;     /* collectives issued */
    long pending = 0;     /* queued, not yet run */
    unsigned calls = 0;   /* collectives called (non-blocking: every second one is "in progress") */
    std::string last;     /* ncclGetLastError */
};

namespace {

std::mutex g_mu; /* the registry and every communicator's state */
std::map<ncclComm *, std::shared_ptr<ncclComm>> g_comms;
std::string g_last; /* last error not tied to a live communicator */

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double timeout_s() {
    const char *e = getenv("GTCSIM_NCCL_TIMEOUT");
    double t = e && *e ? atof(e) : 120.0;
    return t > 0 ? t : 120.0;
}

/* Set the last error (of c, or the global one) and print it; returns r. */
__attribute__((format(printf, 3, 4))) ncclResult_t err(ncclComm *c, ncclResult_t r, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gtcsim: nccl: %s\n", msg);
    std::lock_guard<std::mutex> lk(g_mu);
    if (c) c->last = msg;
    g_last = msg;
    return r;
}

/* The live communicator behind comm; a destroyed or foreign handle fails loudly (NCCL would crash). */
std::shared_ptr<ncclComm> live(ncclComm_t comm, const char *call) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_comms.find(comm);
    if (it == g_comms.end())
        gtcsim::fail("%s: communicator %p is not live (destroyed, aborted, or never created)", call, (void *)comm);
    return it->second;
}

/* NCCL's non-blocking rule: while the state is ncclInProgress only polling (and abort) is allowed. */
void require_settled(const ncclComm *c, const char *call) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (c->state == ncclInProgress)
        gtcsim::fail("%s on a communicator whose state is ncclInProgress: a non-blocking communicator must be "
                     "polled with ncclCommGetAsyncError until ncclSuccess before any other NCCL call",
                     call);
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* ------------------------------------------------------------------------------ MPI */

void check_thread(const char *what) {
    int provided = MPI_THREAD_SINGLE, is_main = 0;
    MPI_Query_thread(&provided);
    MPI_Is_thread_main(&is_main);
    if (!is_main && provided < MPI_THREAD_SERIALIZED)
        gtcsim::fail("%s runs on a thread other than MPI's main thread, but MPI was initialised with thread level "
                     "%d (< MPI_THREAD_SERIALIZED): the simulator must run NCCL work on the main thread",
                     what, provided);
}

/* Wait for a non-blocking MPI request, polled, bounded by GTCSIM_NCCL_TIMEOUT. */
void wait_req(MPI_Request *req, const ncclComm *c, const char *what) {
    const double deadline = now_s() + timeout_s();
    for (unsigned spins = 0;; spins++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) gtcsim::fail("%s: rank %d: MPI_Test failed (code %d)", what, c->rank, rc);
        if (done) return;
        if (now_s() > deadline)
            gtcsim::fail("%s: rank %d of %d waited %g s (GTCSIM_NCCL_TIMEOUT) for the other ranks: one of them did not "
                         "call this collective (it skipped it, called another, or died)",
                         what, c->rank, c->nranks, timeout_s());
        if (spins < 100) {
            sched_yield();
        } else {
            timespec ts = {0, 200000};
            nanosleep(&ts, nullptr);
        }
    }
}

void allgather_bytes(const void *send, void *recv, size_t bytes, const ncclComm *c, const char *what) {
    if (bytes > (size_t)INT32_MAX) gtcsim::fail("%s: %zu bytes per rank: more than the model exchanges at once", what, bytes);
    MPI_Request req;
    int rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi, &req);
    if (rc != MPI_SUCCESS) gtcsim::fail("%s: rank %d: MPI_Iallgather failed (code %d)", what, c->rank, rc);
    wait_req(&req, c, what);
}

void alltoall_bytes(const void *send, void *recv, size_t bytes, const ncclComm *c, const char *what) {
    if (bytes > (size_t)INT32_MAX) gtcsim::fail("%s: %zu bytes per rank: more than the model exchanges at once", what, bytes);
    MPI_Request req;
    int rc = MPI_Ialltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->mpi, &req);
    if (rc != MPI_SUCCESS) gtcsim::fail("%s: rank %d: MPI_Ialltoall failed (code %d)", what, c->rank, rc);
    wait_req(&req, c, what);
}

/* ------------------------------------------------------------------------------ reductions */

template <typename T> T combine(T a, T b, ncclRedOp_t op) {
    if constexpr (std::is_floating_point_v<T>) {
        switch (op) {
        case ncclSum: return a + b;
        case ncclProd: return a * b;
        case ncclMax: return std::fmax(a, b);
        case ncclMin: return std::fmin(a, b);
        default: break;
        }
    } else {
        using U = std::make_unsigned_t<T>; /* wraps like the hardware, no signed overflow */
        switch (op) {
        case ncclSum: return (T)(U)((U)a + (U)b);
        case ncclProd: return (T)(U)((U)a * (U)b);
        case ncclMax: return a > b ? a : b;
        case ncclMin: return a < b ? a : b;
        default: break;
        }
    }
    gtcsim::fail("nccl: reduction op %d is not modelled", (int)op);
}

/* ncclBfloat16: each combine in fp32, the result rounded to bf16 to nearest even (NaN stays a quiet
 * NaN), as NCCL's bf16 reduction (__hadd, __hmax, ...) computes it; the conversions are the
 * simulator's cuda_bf16.h, the ones the simulated kernels use */
struct Bf16 {
    uint16_t bits;
};
Bf16 combine(Bf16 a, Bf16 b, ncclRedOp_t op) {
    const float s = combine(__bfloat162float(__ushort_as_bfloat16(a.bits)), __bfloat162float(__ushort_as_bfloat16(b.bits)), op);
    return Bf16{__bfloat16_as_ushort(__float2bfloat16_rn(s))};
}

/* out[i] = in_0[i] op in_1[i] op ... in rank order; in_r starts at all + r * stride bytes */
template <typename T> void reduce_t(void *out, const char *all, size_t count, int n, size_t stride, ncclRedOp_t op) {
    T *o = (T *)out;
    for (size_t i = 0; i < count; i++) {
        T acc;
        memcpy(&acc, all + i * sizeof(T), sizeof(T));
        for (int r = 1; r < n; r++) {
            T v;
            memcpy(&v, all + (size_t)r * stride + i * sizeof(T), sizeof(T));
            acc = combine(acc, v, op);
        }
        o[i] = acc;
    }
}

void reduce(void *out, const char *all, size_t count, int n, size_t stride, ncclDataType_t t, ncclRedOp_t op) {
    switch (t) {
    case ncclInt8: return reduce_t<int8_t>(out, all, count, n, stride, op);
    case ncclUint8: return reduce_t<uint8_t>(out, all, count, n, stride, op);
    case ncclInt32: return reduce_t<int32_t>(out, all, count, n, stride, op);
    case ncclUint32: return reduce_t<uint32_t>(out, all, count, n, stride, op);
    case ncclInt64: return reduce_t<int64_t>(out, all, count, n, stride, op);
    case ncclUint64: return reduce_t<uint64_t>(out, all, count, n, stride, op);
    case ncclFloat32: return reduce_t<float>(out, all, count, n, stride, op);
    case ncclFloat64: return reduce_t<double>(out, all, count, n, stride, op);
    case ncclBfloat16: return reduce_t<Bf16>(out, all, count, n, stride, op);
    default: gtcsim::fail("nccl: reductions on data type %d are not modelled", (int)t);
    }
}

/* ------------------------------------------------------------------------------ collectives */

struct Coll {
    uint32_t kind;
    const void *send;
    void *recv;
    size_t count; /* NCCL's count argument: recvcount (reduce-scatter), sendcount (all-gather) */
    ncclDataType_t dtype;
    ncclRedOp_t op;
    uint64_t seq;
    size_t send_bytes, recv_bytes;
};

void check_descs(const ncclComm *c, const Desc &mine, const char *what) {
    std::vector<Desc> all((size_t)c->nranks);
    allgather_bytes(&mine, all.data(), sizeof mine, c, what);
    bool same = true;
    for (const Desc &d : all)
        same = same && d.seq == mine.seq && d.kind == mine.kind && d.dtype == mine.dtype && d.op == mine.op &&
               d.count == mine.count && d.tag == mine.tag;
    if (same) return;
    std::string list;
    for (const Desc &d : all) {
        char line[200];
        snprintf(line, sizeof line, "\n  rank %u: collective #%llu %s count %llu type %u op %u", d.rank,
                 (unsigned long long)d.seq, kind_name(d.kind), (unsigned long long)d.count, d.dtype, d.op);
        list += line;
    }
    gtcsim::fail("nccl: the ranks' collectives do not match (every rank must call the same collectives in the same "
                 "order with the same counts, types and ops; real NCCL would hang or corrupt):%s",
                 list.c_str());
}

void run(const std::shared_ptr<ncclComm> &c, const Coll &k) {
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (c->aborted) { /* ncclCommAbort ended it */
            c->pending--;
            return;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s #%llu", kind_name(k.kind), (unsigned long long)k.seq);
    if (!gtcsim::is_device_range(k.send, k.send_bytes) || !gtcsim::is_device_range(k.recv, k.recv_bytes))
        gtcsim::fail("%s: a buffer is no longer device memory when the collective runs (freed before it ran?)", what);
    const size_t es = type_size(k.dtype), n = (size_t)c->nranks;
    std::vector<char> in(k.send_bytes), out(k.recv_bytes);
    memcpy(in.data(), k.send, k.send_bytes);
    if (n > 1) {
        check_thread(what);
        Desc d = {k.seq, k.count, c->tag, k.kind, (uint32_t)k.dtype, (uint32_t)k.op, (uint32_t)c->rank};
        check_descs(c.get(), d, what);
    }
    const size_t block = k.count * es;
    if (k.kind == K_ALLREDUCE) {
        std::vector<char> all(n * block);
        if (n > 1) allgather_bytes(in.data(), all.data(), block, c.get(), what);
        else memcpy(all.data(), in.data(), block);
        reduce(out.data(), all.data(), k.count, (int)n, block, k.dtype, k.op);
    } else if (k.kind == K_REDUCESCATTER) {
        std::vector<char> mine(n * block); /* block r: rank r's slice `rank` */
        if (n > 1) alltoall_bytes(in.data(), mine.data(), block, c.get(), what);
        else memcpy(mine.data(), in.data(), block);
        reduce(out.data(), mine.data(), k.count, (int)n, block, k.dtype, k.op);
    } else {
        if (n > 1) allgather_bytes(in.data(), out.data(), block, c.get(), what);
        else memcpy(out.data(), in.data(), block);
    }
    memcpy(k.recv, out.data(), k.recv_bytes);
    std::lock_guard<std::mutex> lk(g_mu);
    c->pending--;
}

/* [a, a + an) and [b, b + bn) share a byte */
bool overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

ncclResult_t collective(uint32_t kind, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t dtype,
                        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    const char *name = kind_name(kind);
    if (!comm) return err(nullptr, ncclInvalidArgument, "%s: comm argument is NULL", name);
    std::shared_ptr<ncclComm> c = live(comm, name);
    require_settled(c.get(), name);
    if (c->finalizing || c->finalized)
        return err(c.get(), ncclInvalidUsage, "%s: the communicator was finalized (ncclCommFinalize)", name);
    if ((int)dtype < 0 || (int)dtype >= (int)ncclNumTypes)
        return err(c.get(), ncclInvalidArgument, "%s: invalid type %d", name, (int)dtype);
    if (kind != K_ALLGATHER && ((int)op < 0 || (int)op >= (int)ncclNumOps))
        return err(c.get(), ncclInvalidArgument, "%s: invalid reduction operation %d", name, (int)op);
    if (count == 0) return ncclSuccess; /* NCCL: nothing to do, nothing exchanged */
    const size_t es = type_size(dtype), n = (size_t)c->nranks;
    if (count > SIZE_MAX / es / n) return err(c.get(), ncclInvalidArgument, "%s: count %zu overflows", name, count);
    const size_t block = count * es;
    const size_t send_bytes = kind == K_REDUCESCATTER ? n * block : block;
    const size_t recv_bytes = kind == K_ALLGATHER ? n * block : block;
    if (!sendbuff || !gtcsim::is_device_range(sendbuff, send_bytes))
        return err(c.get(), ncclInvalidArgument, "%s: sendbuff %p (%zu bytes) is not device memory (cudaMalloc)", name,
                   sendbuff, send_bytes);
    if (!recvbuff || !gtcsim::is_device_range(recvbuff, recv_bytes))
        return err(c.get(), ncclInvalidArgument, "%s: recvbuff %p (%zu bytes) is not device memory (cudaMalloc)", name,
                   recvbuff, recv_bytes);
    /* the only overlap NCCL defines is its in-place form */
    const char *inplace_ok = nullptr;
    bool inplace = false;
    if (kind == K_ALLREDUCE) {
        inplace = sendbuff == recvbuff;
        inplace_ok = "recvbuff == sendbuff";
    } else if (kind == K_REDUCESCATTER) {
        inplace = recvbuff == (const char *)sendbuff + (size_t)c->rank * block;
        inplace_ok = "recvbuff == sendbuff + rank * recvcount";
    } else {
        inplace = sendbuff == (const char *)recvbuff + (size_t)c->rank * block;
        inplace_ok = "sendbuff == recvbuff + rank * sendcount";
    }
    if (!inplace && overlap(sendbuff, send_bytes, recvbuff, recv_bytes))
        gtcsim::fail("%s on rank %d: sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap, but not in NCCL's "
                     "in-place form (%s): undefined behaviour",
                     name, c->rank, sendbuff, send_bytes, recvbuff, recv_bytes, inplace_ok);
    Coll k = {kind, sendbuff, recvbuff, count, dtype, op, 0, send_bytes, recv_bytes};
    bool in_progress;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        k.seq = c->seq++;
        c->pending++;
        in_progress = !c->blocking && (c->calls++ % 2 == 1);
    }
    /* the buffers declared now: a kernel of another stream that runs first, not ordered with this
     * collective, is a race the simulator sees */
    gtcsim::enqueue_ranges(stream, name, {{sendbuff, send_bytes, false}, {recvbuff, recv_bytes, true}}, [c, k] { run(c, k); });
    if (!in_progress) return ncclSuccess;
    std::lock_guard<std::mutex> lk(g_mu);
    if (c->state == ncclSuccess) {
        c->state = ncclInProgress;
        c->polls_left = 1;
    }
    return ncclInProgress;
}

uint64_t random_tag() {
    uint64_t t = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &t, sizeof t) != (ssize_t)sizeof t) t = 0;
        close(fd);
    }
    if (!t) t = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(now_s() * 1e9);
    return t ? t : 1;
}

/* nranks > 1: the MPI communicator of this NCCL communicator (collective over MPI_COMM_WORLD) */
ncclResult_t connect(ncclComm *c) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) MPI_Finalized(&down);
    if (!up || down)
        return err(nullptr, ncclInvalidUsage,
                   "ncclCommInitRankConfig: %d ranks: the simulator's NCCL runs its ranks as MPI processes; MPI is %s "
                   "(launch with mpirun and MPI_Init first; forked ranks and the id file alone are not modelled)",
                   c->nranks, down ? "finalized" : "not initialised");
    check_thread("ncclCommInitRankConfig");
    int wsize = 0, wrank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if (c->nranks > wsize)
        return err(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: %d ranks but only %d MPI processes",
                   c->nranks, wsize);
    MPI_Comm dup = MPI_COMM_NULL;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS) gtcsim::fail("ncclCommInitRankConfig: MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    struct Who {
        uint64_t tag;
        int32_t nranks, rank;
    } me = {c->tag, c->nranks, c->rank};
    std::vector<Who> all((size_t)wsize);
    ncclComm probe = *c;
    probe.mpi = dup;
    probe.nranks = wsize;
    allgather_bytes(&me, all.data(), sizeof me, &probe, "ncclCommInitRankConfig");
    int color = -1, members = 0;
    std::vector<int> seen((size_t)c->nranks, -1);
    for (int w = 0; w < wsize; w++) {
        if (all[(size_t)w].tag != c->tag) continue;
        if (color < 0) color = w;
        members++;
        const Who &o = all[(size_t)w];
        if (o.nranks != c->nranks || o.rank < 0 || o.rank >= c->nranks || seen[(size_t)o.rank] >= 0)
            gtcsim::fail("ncclCommInitRankConfig: MPI process %d says rank %d of %d, this one (MPI %d) rank %d of %d: the "
                         "ranks of one id must agree on nranks and be distinct",
                         w, o.rank, o.nranks, wrank, c->rank, c->nranks);
        seen[(size_t)o.rank] = w;
    }
    if (members != c->nranks)
        gtcsim::fail("ncclCommInitRankConfig: %d MPI processes hold this id, nranks is %d (real NCCL would hang)", members,
                     c->nranks);
    if (MPI_Comm_split(dup, color, c->rank, &c->mpi) != MPI_SUCCESS)
        gtcsim::fail("ncclCommInitRankConfig: MPI_Comm_split failed");
    MPI_Comm_free(&dup);
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    int r = -1;
    MPI_Comm_rank(c->mpi, &r);
    if (r != c->rank) gtcsim::fail("ncclCommInitRankConfig: MPI rank %d for NCCL rank %d", r, c->rank);
    return ncclSuccess;
}

} // namespace

/* ------------------------------------------------------------------------------ the API */

extern "C" ncclResult_t ncclGetVersion(int *version) {
    if (!version) return err(nullptr, ncclInvalidArgument, "ncclGetVersion: version argument is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!uniqueId) return err(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId argument is NULL");
    memset(uniqueId, 0, sizeof *uniqueId);
    IdBody b;
    memcpy(b.magic, ID_MAGIC, sizeof b.magic);
    b.tag = random_tag();
    b.pid = (uint64_t)getpid();
    memcpy(uniqueId->internal, &b, sizeof b);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                               ncclConfig_t *config) {
    const char *name = "ncclCommInitRankConfig";
    if (!comm) return err(nullptr, ncclInvalidArgument, "%s: comm argument is NULL", name);
    *comm = nullptr;
    if (nranks < 1) return err(nullptr, ncclInvalidArgument, "%s: invalid nranks %d", name, nranks);
    if (rank < 0 || rank >= nranks)
        return err(nullptr, ncclInvalidArgument, "%s: rank %d is not in [0, %d)", name, rank, nranks);
    IdBody b;
    memcpy(&b, commId.internal, sizeof b);
    if (memcmp(b.magic, ID_MAGIC, sizeof b.magic) != 0 || b.tag == 0)
        return err(nullptr, ncclInvalidArgument,
                   "%s: the unique id did not come from ncclGetUniqueId (all zero: rank 0's id never reached rank %d?)",
                   name, rank);
    bool blocking = true;
    if (config) {
        if (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef ||
            config->version != (unsigned)NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH))
            return err(nullptr, ncclInvalidArgument, "%s: config was not initialised with NCCL_CONFIG_INITIALIZER", name);
        if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
            return err(nullptr, ncclInvalidArgument, "%s: config.blocking %d is not 0 or 1", name, config->blocking);
        blocking = config->blocking != 0;
    }
    auto c = std::make_shared<ncclComm>();
    c->tag = b.tag;
    c->nranks = nranks;
    c->rank = rank;
    c->blocking = blocking;
    if (nranks > 1) {
        ncclResult_t r = connect(c.get());
        if (r != ncclSuccess) return r;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    g_comms[c.get()] = c;
    *comm = c.get();
    if (blocking) return ncclSuccess;
    c->state = ncclInProgress; /* as NCCL: the caller polls until the setup is done */
    c->polls_left = 2;
    return ncclInProgress;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!comm) return err(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: comm argument is NULL");
    std::shared_ptr<ncclComm> c = live(comm, "ncclCommGetAsyncError");
    if (!asyncError) return err(c.get(), ncclInvalidArgument, "ncclCommGetAsyncError: asyncError argument is NULL");
    std::lock_guard<std::mutex> lk(g_mu);
    if (c->state == ncclInProgress) {
        if (c->polls_left > 0) {
            c->polls_left--;
        } else if (!c->finalizing || c->pending == 0) {
            c->state = ncclSuccess;
            if (c->finalizing) {
                c->finalizing = false;
                c->finalized = true;
            }
        }
    }
    *asyncError = c->state;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return err(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm argument is NULL");
    std::shared_ptr<ncclComm> c = live(comm, "ncclCommFinalize");
    require_settled(c.get(), "ncclCommFinalize");
    std::lock_guard<std::mutex> lk(g_mu);
    if (c->finalizing || c->finalized) {
        c->last = "ncclCommFinalize: called twice";
        return ncclInvalidUsage;
    }
    if (c->blocking) {
        if (c->pending)
            gtcsim::fail("ncclCommFinalize (blocking) with %ld collectives still queued: the model cannot flush them; "
                         "synchronise the stream first",
                         c->pending);
        c->finalized = true;
        return ncclSuccess;
    }
    c->finalizing = true; /* ncclSuccess once the queued collectives have run */
    c->state = ncclInProgress;
    c->polls_left = 1;
    return ncclInProgress;
}

static void forget(const std::shared_ptr<ncclComm> &c) {
    std::lock_guard<std::mutex> lk(g_mu);
    g_comms.erase(c.get());
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess; /* as NCCL */
    std::shared_ptr<ncclComm> c = live(comm, "ncclCommDestroy");
    require_settled(c.get(), "ncclCommDestroy (after ncclCommFinalize the state must be ncclSuccess first)");
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (c->pending) /* NCCL would finalize (flush) first; the model cannot run the stream */
            gtcsim::fail("ncclCommDestroy with %ld collectives still queued on its streams", c->pending);
    }
    if (c->mpi != MPI_COMM_NULL) {
        int down = 0;
        MPI_Finalized(&down);
        if (!down) MPI_Comm_free(&c->mpi);
    }
    forget(c);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess; /* as NCCL */
    std::shared_ptr<ncclComm> c = live(comm, "ncclCommAbort");
    {
        std::lock_guard<std::mutex> lk(g_mu);
        c->aborted = true; /* queued collectives are skipped when they run; the MPI communicator is
                            * left alone: a peer may still be in a collective on it */
    }
    forget(c);
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

extern "C" const char *ncclGetLastError(ncclComm_t comm) {
    static thread_local std::string copy; /* stable after the lock is released */
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = comm ? g_comms.find(comm) : g_comms.end();
    copy = it != g_comms.end() && !it->second->last.empty() ? it->second->last : g_last;
    return copy.c_str();
}

extern "C" ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return collective(K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

extern "C" ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream) {
    return collective(K_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

extern "C" ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                      ncclComm_t comm, cudaStream_t stream) {
    return collective(K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream);
}
