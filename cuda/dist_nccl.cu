/* dist_nccl.cu - data parallel on the CUDA backend over NCCL; see src/run/dist_nccl.h.
 *
 * Compiled to nothing without GT_HAVE_NCCL (the Makefile builds every .cu file in cuda/; NCCL=0 or no
 * nccl.h leaves this file empty, so CUDA builds without NCCL are unaffected).
 *
 * Non-blocking communicator (ncclConfig_t.blocking = 0): an NCCL call may return ncclInProgress;
 * then, as NCCL requires, the communicator's state is polled with ncclCommGetAsyncError until it
 * is ncclSuccess before any other NCCL call or any work on the communication stream ("settle").
 * Every host wait here is such a poll, bounded by timeout_s; on expiry or an error the
 * communicator is aborted (ncclCommAbort ends its kernels) and the NcclComm stays failed: every
 * later call returns the first error again. */
#ifdef GT_HAVE_NCCL

#include "cuda_common.cuh"

#include <nccl.h>

#include "dist_nccl.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ID_FILE_MAGIC "gtrain-nccl-id 1"
#define ID_MAX_BYTES 1024

struct NcclComm {
    ncclComm_t comm;        /* NULL once aborted or destroyed */
    Backend *be;            /* borrowed: the CUDA backend */
    cudaStream_t compute;   /* borrowed: the backend's compute stream */
    cudaStream_t stream;    /* ours: every collective runs here */
    cudaEvent_t ready;      /* recorded on compute, waited on by stream */
    cudaEvent_t done;       /* recorded on stream, waited on by compute / polled by the host */
    int rank, world, device;
    double timeout_s;       /* <= 0: no limit */
    int n_started;          /* all-reduces started since the last nccl_sync */
    size_t started_floats;  /* values (floats or bf16) in them, for messages */
    void *dev_small;        /* NCCL_HOST_MAX * 8 bytes on the device (host scalars) */
    void *host_small;       /* the same, pinned */
    bool failed;            /* sticky: the first error, in fail */
    GtError fail;
};

/* ------------------------------------------------------------------------------ errors */

/* Abort the communicator (best effort) and keep err as the sticky error. Returns -1. */
static int set_failed(NcclComm *c, GtError *err) {
    if (c->comm) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
    (void)cudaGetLastError();
    if (!c->failed) {
        c->failed = true;
        if (err) c->fail = *err;
    }
    return -1;
}

__attribute__((format(printf, 4, 5))) static int failf(NcclComm *c, GtError *err, int code, const char *fmt, ...) {
    GtError local = {};
    GtError *e = err ? err : &local;
    char msg[GT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gt_error(e, code, "%s", msg);
    return c ? set_failed(c, e) : -1;
}

static int fail_cuda(NcclComm *c, const char *file, int line, const char *call, cudaError_t e, GtError *err) {
    return failf(c, err, GT_EXIT_FAILURE, "NCCL path: %s:%d: %s: %s", file, line, call, cudaGetErrorString(e));
}

static int fail_nccl(NcclComm *c, const char *file, int line, const char *call, ncclResult_t r, GtError *err) {
    const char *last = c && c->comm ? ncclGetLastError(c->comm) : ncclGetLastError(NULL);
    return failf(c, err, GT_EXIT_FAILURE, "NCCL: %s:%d: %s: %s%s%s%s", file, line, call, ncclGetErrorString(r),
                 last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
}

/* The sticky error, if any. */
static int check_failed(NcclComm *c, GtError *err) {
    if (!c) return gt_error(err, GT_EXIT_FAILURE, "NCCL: no communicator");
    if (!c->failed) return 0;
    if (err) *err = c->fail;
    return -1;
}

/* Let other processes have the CPU: yield at first, then sleep up to 1 ms. */
static void backoff(unsigned *spins) {
    unsigned s = (*spins)++;
    if (s < 64) {
        sched_yield();
        return;
    }
    long ns = 1000L << (s - 64 < 10 ? s - 64 : 10);
    struct timespec ts = {0, ns > 1000000L ? 1000000L : ns};
    nanosleep(&ts, NULL);
}

static double deadline_of(const NcclComm *c) {
    return c->timeout_s > 0 ? gt_now_seconds() + c->timeout_s : INFINITY;
}

static int fail_timeout(NcclComm *c, const char *what, GtError *err) {
    return failf(c, err, GT_EXIT_FAILURE,
                 "NCCL %s timed out after %g s waiting for the other ranks (communicator aborted)", what,
                 c->timeout_s);
}

/* The communicator's state: 0 when ncclSuccess, 1 while ncclInProgress, -1 (failed) on an error. */
static int comm_state(NcclComm *c, const char *what, GtError *err) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess) return fail_nccl(c, __FILE__, __LINE__, "ncclCommGetAsyncError", r, err);
    if (st == ncclInProgress) return 1;
    if (st != ncclSuccess) {
        char call[160];
        snprintf(call, sizeof call, "during %s", what);
        return fail_nccl(c, __FILE__, __LINE__, call, st, err);
    }
    return 0;
}

/* After a call returned ncclInProgress: poll until the communicator is ready, bounded. */
static int settle(NcclComm *c, const char *what, GtError *err) {
    double deadline = deadline_of(c);
    unsigned spins = 0;
    for (;;) {
        int s = comm_state(c, what, err);
        if (s <= 0) return s;
        if (gt_now_seconds() >= deadline) return fail_timeout(c, what, err);
        backoff(&spins);
    }
}

/* The host waits for ev (recorded on our stream), bounded, watching for NCCL errors. */
static int wait_event(NcclComm *c, cudaEvent_t ev, const char *what, GtError *err) {
    double deadline = deadline_of(c);
    unsigned spins = 0;
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess) return comm_state(c, what, err) < 0 ? -1 : 0;
        if (q != cudaErrorNotReady) return fail_cuda(c, __FILE__, __LINE__, "cudaEventQuery", q, err);
        if (comm_state(c, what, err) < 0) return -1;
        if (gt_now_seconds() >= deadline) return fail_timeout(c, what, err);
        backoff(&spins);
    }
}

/* checked calls (err is the caller's GtError *) */
#define NC_CUDA(c, call)                                                                   \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) return fail_cuda((c), __FILE__, __LINE__, #call, e_, err);  \
    } while (0)
#define NC_NCCL(c, call, what)                                                             \
    do {                                                                                   \
        ncclResult_t r_ = (call);                                                          \
        if (r_ == ncclInProgress) {                                                        \
            if (settle((c), (what), err)) return -1;                                       \
        } else if (r_ != ncclSuccess) {                                                    \
            return fail_nccl((c), __FILE__, __LINE__, #call, r_, err);                     \
        }                                                                                  \
    } while (0)

/* our stream waits for the compute stream's work issued so far */
static int after_compute(NcclComm *c, GtError *err) {
    NC_CUDA(c, cudaEventRecord(c->ready, c->compute));
    NC_CUDA(c, cudaStreamWaitEvent(c->stream, c->ready, 0));
    return 0;
}

/* the compute stream waits (on the device) for our stream's work issued so far */
static int join_compute(NcclComm *c, GtError *err) {
    NC_CUDA(c, cudaEventRecord(c->done, c->stream));
    NC_CUDA(c, cudaStreamWaitEvent(c->compute, c->done, 0));
    return 0;
}

/* the host waits, bounded, for our stream's work issued so far */
static int host_wait(NcclComm *c, const char *what, GtError *err) {
    NC_CUDA(c, cudaEventRecord(c->done, c->stream));
    return wait_event(c, c->done, what, err);
}

/* ------------------------------------------------------------------------------ id file */

extern "C" void nccl_job_key(char *buf, size_t cap) {
    if (!cap) return;
    const char *job = getenv("SLURM_JOB_ID"), *run = getenv("GTRAIN_RUN_ID");
    if (job && *job) {
        const char *step = getenv("SLURM_STEP_ID"), *restart = getenv("SLURM_RESTART_COUNT");
        snprintf(buf, cap, "slurm:%s.%s.%s", job, step && *step ? step : "-", restart && *restart ? restart : "0");
    } else if (run && *run) {
        snprintf(buf, cap, "run:%s", run);
    } else {
        buf[0] = 0;
    }
    for (char *p = buf; *p; p++) /* one token on one line */
        if (*p <= ' ' || *p == 0x7f) *p = '_';
}

extern "C" int nccl_id_file_write(const char *path, const void *id, size_t bytes, int world, GtError *err) {
    if (!path || !*path) return gt_error(err, GT_EXIT_BAD_INPUT, "dist_init_file: empty path");
    if (bytes > ID_MAX_BYTES) return gt_error(err, GT_EXIT_FAILURE, "NCCL id file: %zu bytes is too many", bytes);
    char key[256], tmp[GT_PATH_MAX + 32];
    nccl_job_key(key, sizeof key);
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) return gt_error(err, GT_EXIT_BAD_INPUT, "dist_init_file: path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return gt_error(err, GT_EXIT_FAILURE, "dist_init_file: cannot create %s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%s\nkey %s\nworld %d\nid ", ID_FILE_MAGIC, key[0] ? key : "-", world) < 0;
    const unsigned char *b = (const unsigned char *)id;
    for (size_t i = 0; i < bytes && !bad; i++) bad = fprintf(f, "%02x", b[i]) < 0;
    bad = bad || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad) {
        unlink(tmp);
        return gt_error(err, GT_EXIT_FAILURE, "dist_init_file: cannot write %s: %s", tmp, strerror(saved));
    }
    if (rename(tmp, path) != 0) { /* atomic: a reader sees the old file or the whole new one */
        saved = errno;
        unlink(tmp);
        return gt_error(err, GT_EXIT_FAILURE, "dist_init_file: cannot rename %s to %s: %s", tmp, path, strerror(saved));
    }
    return 0;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* 0: read this job's id; 1: no file yet; 2: a stale or foreign file (why in stale); -1: error */
static int id_file_try(const char *path, const char *key, void *id, size_t bytes, int world, char *stale,
                       size_t stale_cap, GtError *err) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 1;
        return gt_error(err, GT_EXIT_FAILURE, "dist_init_file: cannot open %s: %s", path, strerror(errno));
    }
    char text[ID_MAX_BYTES * 2 + 512];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char fkey[256] = "", hex[ID_MAX_BYTES * 2 + 2] = "";
    int fworld = -1, used = 0;
    size_t mlen = strlen(ID_FILE_MAGIC);
    if (strncmp(text, ID_FILE_MAGIC, mlen) != 0 || text[mlen] != '\n' ||
        sscanf(text + mlen + 1, "key %255s world %d id %2049s%n", fkey, &fworld, hex, &used) != 3) {
        snprintf(stale, stale_cap, "not a gtrain NCCL id file");
        return 2;
    }
    const char *want = key[0] ? key : "-";
    if (strcmp(fkey, want) != 0 || fworld != world) {
        snprintf(stale, stale_cap, "a stale file (job key %.100s, world %d; this launch: %.100s, world %d)", fkey, fworld,
                 want, world);
        return 2;
    }
    if (strlen(hex) != bytes * 2) {
        snprintf(stale, stale_cap, "an id of %zu hex digits, expected %zu", strlen(hex), bytes * 2);
        return 2;
    }
    unsigned char *out = (unsigned char *)id;
    for (size_t i = 0; i < bytes; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            snprintf(stale, stale_cap, "a malformed id");
            return 2;
        }
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

extern "C" int nccl_id_file_read(const char *path, void *id, size_t bytes, int world, double deadline, GtError *err) {
    if (!path || !*path) return gt_error(err, GT_EXIT_BAD_INPUT, "dist_init_file: empty path");
    if (bytes > ID_MAX_BYTES) return gt_error(err, GT_EXIT_FAILURE, "NCCL id file: %zu bytes is too many", bytes);
    char key[256], stale[320] = "";
    nccl_job_key(key, sizeof key);
    double start = gt_now_seconds();
    for (;;) {
        int r = id_file_try(path, key, id, bytes, world, stale, sizeof stale, err);
        if (r <= 0) return r;
        double now = gt_now_seconds();
        if (now >= deadline) {
            if (r == 1)
                return gt_error(err, GT_EXIT_FAILURE,
                                "dist_init_file: %s did not appear within %g s (rank 0 writes it; is the path on a "
                                "filesystem every node sees?)",
                                path, now - start);
            return gt_error(err, GT_EXIT_FAILURE,
                            "dist_init_file: %s holds %s and rank 0 did not replace it within %g s (delete it, or "
                            "check that rank 0 started)",
                            path, stale, now - start);
        }
        /* 20 ms, a shared filesystem is not hammered; no faster than the deadline */
        double left = deadline - now;
        long ns = left < 0.02 ? (long)(left * 1e9) + 1 : 20000000L;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------------------------ open / close */

static void destroy(NcclComm *c) {
    if (!c) return;
    if (c->stream) (void)cudaStreamSynchronize(c->stream); /* nothing left: waited or aborted */
    if (c->dev_small) (void)cudaFree(c->dev_small);
    if (c->host_small) (void)cudaFreeHost(c->host_small);
    if (c->ready) (void)cudaEventDestroy(c->ready);
    if (c->done) (void)cudaEventDestroy(c->done);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

/* set up streams and buffers; the communicator comes after */
static int open_resources(NcclComm *c, GtError *err) {
    NC_CUDA(c, cudaSetDevice(c->device));
    NC_CUDA(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    NC_CUDA(c, cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    NC_CUDA(c, cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    NC_CUDA(c, cudaMalloc(&c->dev_small, NCCL_HOST_MAX * sizeof(double)));
    NC_CUDA(c, cudaHostAlloc(&c->host_small, NCCL_HOST_MAX * sizeof(double), cudaHostAllocDefault));
    return 0;
}

/* the unique id from rank 0, over MPI or the file */
static int exchange_id(NcclComm *c, Dist *d, const char *init_file, ncclUniqueId *id, GtError *err) {
    if (c->rank == 0) NC_NCCL(c, ncclGetUniqueId(id), "ncclGetUniqueId");
    if (c->world == 1) return 0;
    if (d && strcmp(dist_transport(d), "mpi") == 0) return dist_broadcast(d, id, sizeof *id, 0, err);
    if (!init_file || !*init_file)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "world size %d without MPI: set dist_init_file to a path every node sees (rank 0 writes the "
                        "NCCL id there), or launch with mpirun / srun --mpi=pmix",
                        c->world);
    if (c->rank == 0) return nccl_id_file_write(init_file, id, sizeof *id, c->world, err);
    return nccl_id_file_read(init_file, id, sizeof *id, c->world, deadline_of(c), err);
}

extern "C" int nccl_open_ranks(NcclComm **out, int rank, int world, Dist *d, Backend *be, const char *init_file,
                               double timeout_s, GtError *err) {
    *out = NULL;
    if (!be || !be->ops || !(be->ops->caps & GT_CAP_NCCL))
        return gt_error(err, GT_EXIT_BAD_INPUT, "NCCL needs the cuda backend, found %s",
                        be && be->ops ? be->ops->name : "none");
    if (world < 1 || rank < 0 || rank >= world)
        return gt_error(err, GT_EXIT_FAILURE, "NCCL: rank %d of world %d is not a rank", rank, world);
    NcclComm *c = (NcclComm *)calloc(1, sizeof *c);
    if (!c) return gt_error(err, GT_EXIT_FAILURE, "NCCL: out of host memory");
    c->be = be;
    c->compute = gtc_stream(be);
    c->device = gtc_impl(be)->device;
    c->rank = rank;
    c->world = world;
    c->timeout_s = timeout_s;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; /* no NCCL call blocks the host: every wait is ours, with a deadline */
    ncclResult_t r;
    bool file_mode = world > 1 && !(d && strcmp(dist_transport(d), "mpi") == 0);
    if (open_resources(c, err) || exchange_id(c, d, init_file, &id, err)) goto fail;
    r = ncclCommInitRankConfig(&c->comm, world, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        fail_nccl(c, __FILE__, __LINE__, "ncclCommInitRankConfig", r, err);
        goto fail;
    }
    if (settle(c, "communicator setup (ncclCommInitRankConfig)", err)) goto fail;
    /* every rank has read the id once the communicator is up: the file is not needed any more */
    if (file_mode && rank == 0 && unlink(init_file) != 0 && errno != ENOENT)
        gt_warn("dist_init_file: cannot remove %s: %s\n", init_file, strerror(errno));
    *out = c;
    return 0;
fail:
    if (c->comm) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
    destroy(c);
    return -1;
}

extern "C" int nccl_open(NcclComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s,
                         GtError *err) {
    return nccl_open_ranks(out, dist_rank(d), dist_world(d), d, be, init_file, timeout_s, err);
}

extern "C" void nccl_close(NcclComm *c) {
    if (!c) return;
    if (c->comm && !c->failed) {
        GtError e = {};
        /* finish what was issued, then flush NCCL's own work; bounded, aborted past the timeout */
        if (host_wait(c, "the last collectives before closing", &e) == 0) {
            ncclResult_t r = ncclCommFinalize(c->comm);
            if (r == ncclInProgress) {
                if (settle(c, "closing the communicator (ncclCommFinalize)", &e) == 0) r = ncclSuccess;
            }
            if (r != ncclSuccess && c->comm) {
                if (!c->failed) fail_nccl(c, __FILE__, __LINE__, "ncclCommFinalize", r, &e);
            } else if (c->comm) {
                (void)ncclCommDestroy(c->comm);
                c->comm = NULL;
            }
        }
        if (c->failed) gt_warn("%s\n", c->fail.msg);
    }
    if (c->comm) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
    destroy(c);
}

extern "C" void nccl_abort(NcclComm *c) {
    if (!c) return;
    if (c->comm) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
    destroy(c);
}


extern "C" const char *nccl_version_string(char *buf, size_t cap) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    /* 2.9 and later: major * 10000 + minor * 100 + patch */
    snprintf(buf, cap, "NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
    return buf;
}

/* ------------------------------------------------------------------------------ collectives */

extern "C" int nccl_poll(NcclComm *c, GtError *err) {
    if (check_failed(c, err)) return -1;
    return comm_state(c, "the started collectives", err) < 0 ? -1 : 0;
}

/* an in-place sum of n values of type t (4 or 2 bytes) at dev_buf, started after the compute stream */
static int allreduce_start(NcclComm *c, void *dev_buf, size_t n, ncclDataType_t t, GtError *err) {
    if (check_failed(c, err)) return -1;
    if (n == 0) return 0;
    if (after_compute(c, err)) return -1;
    NC_NCCL(c, ncclAllReduce(dev_buf, dev_buf, n, t, ncclSum, c->comm, c->stream), "starting a gradient all-reduce");
    c->n_started++;
    c->started_floats += n;
    return 0;
}

extern "C" int nccl_allreduce_start(NcclComm *c, float *dev_buf, size_t n, GtError *err) {
    return allreduce_start(c, dev_buf, n, ncclFloat32, err);
}

extern "C" int nccl_allreduce_bf16_start(NcclComm *c, uint16_t *dev_buf, size_t n, GtError *err) {
    return allreduce_start(c, dev_buf, n, ncclBfloat16, err);
}

extern "C" int nccl_wait_all(NcclComm *c, GtError *err) {
    if (check_failed(c, err)) return -1;
    if (join_compute(c, err)) return -1;
    return comm_state(c, "the started all-reduces", err) < 0 ? -1 : 0;
}

extern "C" int nccl_sync(NcclComm *c, const char *what, GtError *err) {
    if (check_failed(c, err)) return -1;
    char w[192];
    if (what && *what)
        snprintf(w, sizeof w, "%s", what);
    else
        snprintf(w, sizeof w, "all-reduce of %d gradient bucket(s) (%zu floats)", c->n_started, c->started_floats);
    if (host_wait(c, w, err)) return -1;
    c->n_started = 0;
    c->started_floats = 0;
    return 0;
}

/* in place, values of es bytes of type t: NCCL's recvbuff == sendbuff + rank * recvcount */
static int reduce_scatter(NcclComm *c, void *dev_buf, size_t shard, size_t es, ncclDataType_t t, GtError *err) {
    if (check_failed(c, err)) return -1;
    if (shard == 0) return 0;
    char what[96];
    snprintf(what, sizeof what, "reduce-scatter of %d x %zu %s", c->world, shard, t == ncclBfloat16 ? "bf16 values" : "floats");
    if (after_compute(c, err)) return -1;
    NC_NCCL(c, ncclReduceScatter(dev_buf, (char *)dev_buf + (size_t)c->rank * shard * es, shard, t, ncclSum, c->comm,
                                 c->stream),
            what);
    if (join_compute(c, err)) return -1;
    return wait_event(c, c->done, what, err);
}

extern "C" int nccl_reduce_scatter(NcclComm *c, float *dev_buf, size_t shard, GtError *err) {
    return reduce_scatter(c, dev_buf, shard, sizeof(float), ncclFloat32, err);
}

extern "C" int nccl_reduce_scatter_bf16(NcclComm *c, uint16_t *dev_buf, size_t shard, GtError *err) {
    return reduce_scatter(c, dev_buf, shard, sizeof(uint16_t), ncclBfloat16, err);
}

extern "C" int nccl_allgather(NcclComm *c, float *dev_buf, size_t shard, GtError *err) {
    if (check_failed(c, err)) return -1;
    if (shard == 0) return 0;
    char what[96];
    snprintf(what, sizeof what, "all-gather of %d x %zu floats", c->world, shard);
    if (after_compute(c, err)) return -1;
    /* in place: NCCL's sendbuff == recvbuff + rank * sendcount */
    NC_NCCL(c, ncclAllGather(dev_buf + (size_t)c->rank * shard, dev_buf, shard, ncclFloat32, c->comm, c->stream), what);
    if (join_compute(c, err)) return -1;
    return wait_event(c, c->done, what, err);
}

extern "C" int nccl_allgather_host(NcclComm *c, float *host_buf, size_t shard, GtError *err) {
    if (check_failed(c, err)) return -1;
    if (shard == 0) return 0;
    char what[112];
    snprintf(what, sizeof what, "all-gather of %d x %zu floats (host)", c->world, shard);
    float *tmp = NULL;
    const size_t total = (size_t)c->world * shard, off = (size_t)c->rank * shard;
    cudaError_t e = cudaMalloc(&tmp, total * sizeof(float));
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not a broken communicator */
        return gt_error(err, GT_EXIT_FAILURE, "NCCL path: %s:%d: cudaMalloc of %zu bytes for %s: %s", __FILE__,
                        __LINE__, total * sizeof(float), what, cudaGetErrorString(e));
    }
    int rc = -1;
    ncclResult_t r;
    /* the host buffer is pageable: the copy back waits for the gather, so it is issued only after
     * the bounded wait (never a host block on a collective that may hang) */
    e = cudaMemcpyAsync(tmp + off, host_buf + off, shard * sizeof(float), cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) {
        fail_cuda(c, __FILE__, __LINE__, "cudaMemcpyAsync(to device)", e, err);
        goto out;
    }
    r = ncclAllGather(tmp + off, tmp, shard, ncclFloat32, c->comm, c->stream);
    if (r == ncclInProgress) {
        if (settle(c, what, err)) goto out;
    } else if (r != ncclSuccess) {
        fail_nccl(c, __FILE__, __LINE__, "ncclAllGather", r, err);
        goto out;
    }
    if (host_wait(c, what, err)) goto out;
    e = cudaMemcpyAsync(host_buf, tmp, total * sizeof(float), cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        fail_cuda(c, __FILE__, __LINE__, "cudaMemcpyAsync(to host)", e, err);
        goto out;
    }
    rc = 0;
out:
    if (cudaFree(tmp) != cudaSuccess) (void)cudaGetLastError();
    return rc;
}

/* v (bytes, count items of type t) summed / maxed over ranks through the small device buffer */
static int host_collective(NcclComm *c, void *v, size_t count, size_t item, ncclDataType_t t, ncclRedOp_t op,
                           const char *what, GtError *err) {
    if (check_failed(c, err)) return -1;
    if (count == 0) return 0;
    if (count > NCCL_HOST_MAX)
        return gt_error(err, GT_EXIT_FAILURE, "NCCL: %s of %zu values: at most %d", what, count, NCCL_HOST_MAX);
    const size_t bytes = count * item;
    memcpy(c->host_small, v, bytes);
    NC_CUDA(c, cudaMemcpyAsync(c->dev_small, c->host_small, bytes, cudaMemcpyHostToDevice, c->stream));
    NC_NCCL(c, ncclAllReduce(c->dev_small, c->dev_small, count, t, op, c->comm, c->stream), what);
    NC_CUDA(c, cudaMemcpyAsync(c->host_small, c->dev_small, bytes, cudaMemcpyDeviceToHost, c->stream));
    if (host_wait(c, what, err)) return -1;
    memcpy(v, c->host_small, bytes);
    return 0;
}

extern "C" int nccl_allreduce_f64_host(NcclComm *c, double *v, int n, GtError *err) {
    if (n < 0) return gt_error(err, GT_EXIT_FAILURE, "nccl_allreduce_f64_host: negative count %d", n);
    return host_collective(c, v, (size_t)n, sizeof(double), ncclFloat64, ncclSum, "all-reduce of scalars", err);
}

extern "C" int nccl_allreduce_i64_host(NcclComm *c, int64_t *v, int n, GtError *err) {
    if (n < 0) return gt_error(err, GT_EXIT_FAILURE, "nccl_allreduce_i64_host: negative count %d", n);
    return host_collective(c, v, (size_t)n, sizeof(int64_t), ncclInt64, ncclSum, "all-reduce of integer counts", err);
}

extern "C" int nccl_allreduce_max_i32_host(NcclComm *c, int *v, GtError *err) {
    return host_collective(c, v, 1, sizeof(int), ncclInt32, ncclMax, "agreement of all ranks (max all-reduce)", err);
}

#endif /* GT_HAVE_NCCL */
