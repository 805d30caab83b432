/* dist.c - see dist.h. World size, rank and local rank from the launcher's environment; the
 * collectives over MPI (Open MPI) when built with MPI=1 (GT_HAVE_MPI).
 *
 * - One process with no launcher (or a launcher that says world size 1) is world size 1: MPI_Init is
 *   NOT called, so a plain run needs no MPI runtime, and every collective is a no-op.
 * - World size > 1 needs an MPI launcher (mpirun, or srun --mpi=pmix/pmi2): MPI_Init, then MPI's
 *   rank and size, checked against what the environment said. Slurm or torchrun-style variables
 *   alone (no OMPI_/PMIX_/PMI_ variables) cannot wire MPI up and are refused with a message saying
 *   how to launch. Built without MPI, world size > 1 is refused ("built without MPI (make MPI=1)").
 * - Every collective is a non-blocking MPI call (MPI_Iallreduce, MPI_Ireduce_scatter_block,
 *   MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier) polled with MPI_Test until a deadline of timeout_s.
 *   On a timeout or an MPI error this rank prints one line naming itself and what it waited for,
 *   and aborts the whole job (MPI_Abort): no rank hangs.
 * - Determinism: blocking and started all-reduces both go through MPI_Iallreduce, so one algorithm
 *   (Open MPI's libnbc) is used for both; its choice depends only on the communicator size and the
 *   message size, so for a fixed world size the reduction order, and therefore every sum, is the
 *   same run after run. Buffers larger than DIST_CHUNK floats are reduced in fixed chunks. With two
 *   ranks a+b == b+a exactly, so every rank holds the same bits.
 *
 * No global mutable state: everything lives in the Dist struct. */
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef GT_HAVE_MPI
#include <mpi.h>
#endif

/* Requests started by dist_allreduce_f32_start and not yet waited for. When the list is full, the
 * next start first waits for all of them (correct, merely less overlap). */
#define DIST_MAX_PENDING 64
/* Largest count handed to one MPI call (MPI counts are int). Fixed, so chunking is deterministic. */
#define DIST_CHUNK ((size_t)1 << 30)

struct Dist {
    int rank, world, local_rank;
    double timeout_s;      /* <= 0: wait forever */
    bool mpi_initialized;  /* this Dist called MPI_Init (and so calls MPI_Finalize) */
    const char *transport; /* "mpi" | "none" | "env" (world > 1 without MPI: NCCL only) */
    char source[64];       /* where rank/size came from, for messages */
#ifdef GT_HAVE_MPI
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN */
    MPI_Request pending[DIST_MAX_PENDING];
    int n_pending;
    size_t pending_floats; /* values (floats or bf16) in the pending all-reduces, for messages */
    MPI_Op bf16_sum;       /* ddp_grad_dtype bf16: a + b in fp32, rounded to bf16 (bf16_setup) */
#endif
};

/* ------------------------------------------------------------------------------ environment */

/* -1: unset; -2: set but not a non-negative integer; else the value. */
static long env_long(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > INT_MAX) return -2;
    return v;
}

typedef struct {
    const char *rank, *size, *local; /* variable names; local may be NULL */
    const char *label;
} EnvScheme;

/* The order dist.h promises. PMIx publishes no size variable of its own (srun --mpi=pmix also sets
 * SLURM_NTASKS, and mpirun sets OMPI_COMM_WORLD_SIZE), so it only marks an MPI launcher below. */
static const EnvScheme SCHEMES[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_RANK/SIZE"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI_RANK/PMI_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_PROCID/SLURM_NTASKS"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK/WORLD_SIZE"},
};
#define N_SCHEMES ((int)(sizeof SCHEMES / sizeof SCHEMES[0]))

/* Variables that only a launcher able to wire MPI up sets. */
static bool env_has_mpi_launcher(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (getenv(names[i])) return true;
    return false;
}

/* Fills world/rank/local (world 1, rank 0, local 0 when nothing is set). */
static int env_discover(Dist *d, GtError *err) {
    d->world = 1;
    d->rank = 0;
    d->local_rank = 0;
    snprintf(d->source, sizeof d->source, "no launcher");
    for (int i = 0; i < N_SCHEMES; i++) {
        const EnvScheme *s = &SCHEMES[i];
        long size = env_long(s->size), rank = env_long(s->rank);
        if (size == -1 && rank == -1) continue;
        if (size == -2 || size == 0)
            return gt_error(err, GT_EXIT_BAD_INPUT, "environment: %s: expected a positive integer, found \"%s\"", s->size,
                            getenv(s->size));
        if (rank == -2)
            return gt_error(err, GT_EXIT_BAD_INPUT, "environment: %s: expected a non-negative integer, found \"%s\"",
                            s->rank, getenv(s->rank));
        if (size == -1 || rank == -1)
            return gt_error(err, GT_EXIT_BAD_INPUT, "environment: %s is set but %s is not", size == -1 ? s->rank : s->size,
                            size == -1 ? s->size : s->rank);
        if (rank >= size)
            return gt_error(err, GT_EXIT_BAD_INPUT, "environment: %s=%ld is not below %s=%ld", s->rank, rank, s->size, size);
        d->world = (int)size;
        d->rank = (int)rank;
        snprintf(d->source, sizeof d->source, "%s", s->label);
        long local = s->local ? env_long(s->local) : -1;
        if (local == -2)
            return gt_error(err, GT_EXIT_BAD_INPUT, "environment: %s: expected a non-negative integer, found \"%s\"",
                            s->local, getenv(s->local));
        d->local_rank = local >= 0 ? (int)local : -1; /* -1: ask MPI below (or 0) */
        return 0;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ MPI helpers */

#ifdef GT_HAVE_MPI

static void flush_all(void) {
    fflush(stdout);
    fflush(stderr);
}

/* One line naming the rank, then the whole job ends. */
__attribute__((noreturn)) static void die_mpi(Dist *d, int code, const char *call, const char *what) {
    char msg[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", code);
    fprintf(stderr, "gtrain: rank %d: %s failed during %s: %s\n", d->rank, call, what, msg);
    flush_all();
    MPI_Abort(d->comm != MPI_COMM_NULL ? d->comm : MPI_COMM_WORLD, GT_EXIT_FAILURE);
    exit(GT_EXIT_FAILURE); /* not reached */
}

__attribute__((noreturn)) static void die_timeout(Dist *d, const char *what) {
    fprintf(stderr, "gtrain: rank %d: %s timed out after %g s waiting for the other ranks\n", d->rank, what, d->timeout_s);
    flush_all();
    MPI_Abort(d->comm, GT_EXIT_FAILURE);
    exit(GT_EXIT_FAILURE); /* not reached */
}

#define CHECK_MPI(d, call, what)                             \
    do {                                                     \
        int rc_ = (call);                                    \
        if (rc_ != MPI_SUCCESS) die_mpi((d), rc_, #call, (what)); \
    } while (0)

/* Let the other ranks (and Open MPI's progress) have the CPU: yield at first, then sleep a little
 * longer each time, at most 1 ms, so a waiting rank does not starve an oversubscribed node. */
static void backoff(unsigned *spins) {
    unsigned s = (*spins)++;
    if (s < 64) {
        sched_yield();
        return;
    }
    long ns = 1000L << (s - 64 < 10 ? s - 64 : 10); /* 1 us .. ~1 ms */
    struct timespec ts = {0, ns > 1000000L ? 1000000L : ns};
    nanosleep(&ts, NULL);
}

/* Test the requests until all are done or the deadline passes (then abort). */
static void wait_requests(Dist *d, MPI_Request *reqs, int n, const char *what) {
    if (n == 0) return;
    double deadline = gt_now_seconds() + d->timeout_s;
    unsigned spins = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) die_mpi(d, rc, "MPI_Testall", what);
        if (done) return;
        if (d->timeout_s > 0 && gt_now_seconds() >= deadline) die_timeout(d, what);
        backoff(&spins);
    }
}

static void wait_one(Dist *d, MPI_Request *req, const char *what) { wait_requests(d, req, 1, what); }

/* ---- ddp_grad_dtype bf16: a contiguous buffer of bf16 values (uint16 bit patterns), MPI_UINT16_T
 * with bf16_sum, a user op that adds two bf16 values in fp32 and rounds the sum to bf16 (to nearest
 * even, gt_f32_to_bf16), as NCCL's bf16 sum does. Its order is MPI's algorithm, which depends only
 * on the world size and the count (see the top of this file); with 2 ranks a + b == b + a. */
static void bf16_sum_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type; /* only ever MPI_UINT16_T */
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = gt_f32_to_bf16(gt_bf16_to_f32(a[i]) + gt_bf16_to_f32(b[i]));
}

static int bf16_setup(Dist *d, GtError *err) {
    (void)err;
    if (d->bf16_sum == MPI_OP_NULL) CHECK_MPI(d, MPI_Op_create(bf16_sum_op, 1, &d->bf16_sum), "setting up the bf16 sum");
    return 0;
}
#endif /* GT_HAVE_MPI */

/* ------------------------------------------------------------------------------ init / finalize */

int dist_init(Dist **out, int *argc, char ***argv, double timeout_s, GtError *err) {
    *out = NULL;
    Dist *d = gt_xcalloc(1, sizeof *d);
    d->timeout_s = timeout_s;
    d->transport = "none";
#ifdef GT_HAVE_MPI
    d->comm = MPI_COMM_NULL;
    d->bf16_sum = MPI_OP_NULL;
#endif
    if (env_discover(d, err)) {
        free(d);
        return -1;
    }
    bool launcher = env_has_mpi_launcher();
#ifdef GT_HAVE_MPI
    /* an MPI launcher whose size variable we do not know (PMIX_RANK alone): ask MPI */
    bool ask_mpi = launcher && strcmp(d->source, "no launcher") == 0;
#else
    bool ask_mpi = false;
#endif
    if (d->world == 1 && !ask_mpi) {
        /* world size 1: no MPI at all */
        d->local_rank = d->local_rank < 0 ? 0 : d->local_rank;
        gt_log_set_rank(0);
        *out = d;
        return 0;
    }
#ifdef GT_HAVE_NCCL
    if (!launcher) {
        /* srun alone (or torchrun-style variables): no MPI to wire up. The CUDA backend's NCCL needs
         * none (its id goes through dist_init_file); the trainer refuses this on the CPU backend.
         * The collectives below refuse to run ("env" has no transport of its own). */
        if (d->local_rank < 0) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "rank %d: %s says world size %d but gives no local rank (SLURM_LOCALID or LOCAL_RANK, which "
                     "picks the GPU), and no MPI launcher started this process: set it, or launch with mpirun -np %d "
                     "or srun --mpi=pmix",
                     d->rank, d->source, d->world, d->world);
            free(d);
            return -1;
        }
        d->transport = "env";
        gt_log_set_rank(d->rank);
        *out = d;
        return 0;
    }
#endif
#ifndef GT_HAVE_MPI
    (void)argc;
    (void)argv;
    (void)launcher;
    gt_error(err, GT_EXIT_FAILURE, "rank %d: %s says world size %d, but gtrain was built without MPI (make MPI=1)", d->rank,
             d->source, d->world);
    free(d);
    return -1;
#else
    if (!launcher) {
        gt_error(err, GT_EXIT_FAILURE,
                 "rank %d: %s says world size %d, but no MPI launcher started this process (no OMPI_/PMIX_/PMI_ "
                 "variables): launch with mpirun -np %d, or srun --mpi=pmix",
                 d->rank, d->source, d->world, d->world);
        free(d);
        return -1;
    }
    int initialized = 0;
    if (MPI_Initialized(&initialized) != MPI_SUCCESS) initialized = 0;
    if (!initialized) {
        int provided = 0;
        /* MPI is called from the main thread only (OpenMP threads never call it). */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            gt_error(err, GT_EXIT_FAILURE, "rank %d: MPI_Init failed", d->rank);
            free(d);
            return -1;
        }
        d->mpi_initialized = true;
    }
    /* From here on errors come back as codes, which we check and turn into one line + abort. */
    CHECK_MPI(d, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "initialisation");
    CHECK_MPI(d, MPI_Comm_dup(MPI_COMM_WORLD, &d->comm), "initialisation");
    CHECK_MPI(d, MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN), "initialisation");
    int mrank = 0, msize = 0;
    CHECK_MPI(d, MPI_Comm_rank(d->comm, &mrank), "initialisation");
    CHECK_MPI(d, MPI_Comm_size(d->comm, &msize), "initialisation");
    if (strcmp(d->source, "no launcher") != 0 && (msize != d->world || mrank != d->rank)) {
        /* Leave MPI initialised: the caller exits non-zero and the launcher ends the job (an
         * MPI_Finalize here could wait for ranks that never arrive). */
        gt_error(err, GT_EXIT_FAILURE,
                 "rank %d: %s says rank %d of %d, but MPI sees rank %d of %d (is the launcher's MPI the one gtrain "
                 "was built with?)",
                 mrank, d->source, d->rank, d->world, mrank, msize);
        MPI_Comm_free(&d->comm);
        free(d);
        return -1;
    }
    d->rank = mrank;
    d->world = msize;
    if (d->local_rank < 0) { /* the launcher did not say: ranks sharing this node's memory */
        MPI_Comm node;
        CHECK_MPI(d, MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, mrank, MPI_INFO_NULL, &node), "initialisation");
        CHECK_MPI(d, MPI_Comm_rank(node, &d->local_rank), "initialisation");
        CHECK_MPI(d, MPI_Comm_free(&node), "initialisation");
    }
    d->transport = d->world > 1 ? "mpi" : "none";
    gt_log_set_rank(d->rank);
    *out = d;
    return 0;
#endif
}

void dist_finalize(Dist *d) {
    if (!d) return;
#ifdef GT_HAVE_MPI
    if (d->comm != MPI_COMM_NULL) {
        if (d->n_pending) {
            GtError e = {0};
            dist_wait_all(d, &e);
        }
        MPI_Comm_free(&d->comm);
    }
    if (d->bf16_sum != MPI_OP_NULL) MPI_Op_free(&d->bf16_sum);
    if (d->mpi_initialized) {
        int finalized = 0;
        if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
    }
#endif
    free(d);
}

int dist_rank(const Dist *d) { return d ? d->rank : 0; }
int dist_world(const Dist *d) { return d ? d->world : 1; }
int dist_local_rank(const Dist *d) { return d ? d->local_rank : 0; }
const char *dist_transport(const Dist *d) { return d ? d->transport : "none"; }

const char *dist_built(void) {
#if defined(GT_HAVE_MPI) && defined(GT_HAVE_NCCL)
    return "mpi nccl";
#elif defined(GT_HAVE_MPI)
    return "mpi";
#elif defined(GT_HAVE_NCCL)
    return "nccl";
#else
    return "none";
#endif
}

/* world > 1 with no MPI ("env": the CUDA backend's NCCL carries everything): a host collective
 * here would silently do nothing, so it is refused. */
static int no_transport(const Dist *d, const char *what, GtError *err) {
    if (!d || d->world <= 1 || strcmp(d->transport, "env") != 0) return 0;
    return gt_error(err, GT_EXIT_FAILURE,
                    "%s across %d ranks needs MPI, and this launch has none (%s): launch with mpirun or srun "
                    "--mpi=pmix",
                    what, d->world, d->source);
}

/* true when there is nothing to communicate */
static bool solo(const Dist *d) {
#ifdef GT_HAVE_MPI
    return !d || d->world <= 1 || d->comm == MPI_COMM_NULL;
#else
    (void)d;
    return true;
#endif
}

/* ------------------------------------------------------------------------------ collectives */

int dist_allreduce_f32(Dist *d, float *buf, size_t n, GtError *err) {
    if (no_transport(d, "dist_allreduce_f32", err)) return -1;
    (void)err;
    if (solo(d) || n == 0) return 0;
#ifdef GT_HAVE_MPI
    char what[96];
    snprintf(what, sizeof what, "all-reduce of %zu floats", n);
    for (size_t off = 0; off < n; off += DIST_CHUNK) {
        size_t k = n - off < DIST_CHUNK ? n - off : DIST_CHUNK;
        MPI_Request r;
        CHECK_MPI(d, MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, d->comm, &r), what);
        wait_one(d, &r, what);
    }
#endif
    return 0;
}

#ifdef GT_HAVE_MPI
/* Started in-place sums of n values of `size` bytes at buf, as type with op, in chunks. */
static int start_sums(Dist *d, void *buf, size_t n, size_t size, MPI_Datatype type, MPI_Op op, const char *what_type,
                      GtError *err) {
    for (size_t off = 0; off < n; off += DIST_CHUNK) {
        size_t k = n - off < DIST_CHUNK ? n - off : DIST_CHUNK;
        if (d->n_pending == DIST_MAX_PENDING && dist_wait_all(d, err)) return -1;
        char what[96];
        snprintf(what, sizeof what, "starting an all-reduce of %zu %s", k, what_type);
        CHECK_MPI(d, MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * size, (int)k, type, op, d->comm,
                                    &d->pending[d->n_pending]),
                  what);
        d->n_pending++;
        d->pending_floats += k;
    }
    return 0;
}
#endif

int dist_allreduce_f32_start(Dist *d, float *buf, size_t n, GtError *err) {
    if (no_transport(d, "dist_allreduce_f32_start", err)) return -1;
    if (solo(d) || n == 0) return 0;
#ifdef GT_HAVE_MPI
    return start_sums(d, buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM, "floats", err);
#else
    return 0;
#endif
}

int dist_allreduce_bf16_start(Dist *d, uint16_t *buf, size_t n, GtError *err) {
    if (no_transport(d, "dist_allreduce_bf16_start", err)) return -1;
    if (solo(d) || n == 0) return 0;
#ifdef GT_HAVE_MPI
    if (bf16_setup(d, err)) return -1;
    return start_sums(d, buf, n, sizeof *buf, MPI_UINT16_T, d->bf16_sum, "bf16 values", err);
#else
    (void)buf;
    return 0;
#endif
}

int dist_poll(Dist *d, GtError *err) {
    (void)err;
    if (solo(d)) return 0;
#ifdef GT_HAVE_MPI
    for (int i = 0; i < d->n_pending; i++) {
        if (d->pending[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        CHECK_MPI(d, MPI_Test(&d->pending[i], &done, MPI_STATUS_IGNORE), "progress of the started all-reduces");
    }
#endif
    return 0;
}

int dist_wait_all(Dist *d, GtError *err) {
    (void)err;
    if (solo(d)) return 0;
#ifdef GT_HAVE_MPI
    if (d->n_pending == 0) return 0;
    char what[128];
    snprintf(what, sizeof what, "all-reduce of %d gradient bucket(s) (%zu floats)", d->n_pending, d->pending_floats);
    wait_requests(d, d->pending, d->n_pending, what);
    d->n_pending = 0;
    d->pending_floats = 0;
#endif
    return 0;
}

int dist_allreduce_i64(Dist *d, int64_t *v, int n, GtError *err) {
    if (no_transport(d, "dist_allreduce_i64", err)) return -1;
    if (n < 0) return gt_error(err, GT_EXIT_FAILURE, "dist_allreduce_i64: negative count %d", n);
    if (solo(d) || n == 0) return 0;
#ifdef GT_HAVE_MPI
    MPI_Request r;
    const char *what = "all-reduce of integer counts";
    CHECK_MPI(d, MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_SUM, d->comm, &r), what);
    wait_one(d, &r, what);
#endif
    return 0;
}

int dist_allreduce_f64(Dist *d, double *v, int n, GtError *err) {
    if (no_transport(d, "dist_allreduce_f64", err)) return -1;
    if (n < 0) return gt_error(err, GT_EXIT_FAILURE, "dist_allreduce_f64: negative count %d", n);
    if (solo(d) || n == 0) return 0;
#ifdef GT_HAVE_MPI
    MPI_Request r;
    const char *what = "all-reduce of scalars";
    CHECK_MPI(d, MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, d->comm, &r), what);
    wait_one(d, &r, what);
#endif
    return 0;
}

#ifdef GT_HAVE_MPI
/* In place, MPI leaves this rank's sum at the START of buf; it is moved to its own shard. */
static int reduce_scatter(Dist *d, void *buf, size_t shard, size_t size, MPI_Datatype type, MPI_Op op,
                          const char *what_type, GtError *err) {
    if (shard > (size_t)INT_MAX)
        return gt_error(err, GT_EXIT_FAILURE, "reduce-scatter: a shard of %zu values is more than MPI's %d", shard, INT_MAX);
    char what[96];
    snprintf(what, sizeof what, "reduce-scatter of %d x %zu %s", d->world, shard, what_type);
    MPI_Request r;
    CHECK_MPI(d, MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)shard, type, op, d->comm, &r), what);
    wait_one(d, &r, what);
    if (d->rank != 0) memmove((char *)buf + (size_t)d->rank * shard * size, buf, shard * size);
    return 0;
}
#endif

int dist_reduce_scatter_f32(Dist *d, float *buf, size_t shard, GtError *err) {
    if (no_transport(d, "dist_reduce_scatter_f32", err)) return -1;
    if (solo(d) || shard == 0) return 0;
#ifdef GT_HAVE_MPI
    return reduce_scatter(d, buf, shard, sizeof *buf, MPI_FLOAT, MPI_SUM, "floats", err);
#else
    return 0;
#endif
}

int dist_reduce_scatter_bf16(Dist *d, uint16_t *buf, size_t shard, GtError *err) {
    if (no_transport(d, "dist_reduce_scatter_bf16", err)) return -1;
    if (solo(d) || shard == 0) return 0;
#ifdef GT_HAVE_MPI
    if (bf16_setup(d, err)) return -1;
    return reduce_scatter(d, buf, shard, sizeof *buf, MPI_UINT16_T, d->bf16_sum, "bf16 values", err);
#else
    (void)buf;
    return 0;
#endif
}

int dist_allgather_f32(Dist *d, float *buf, size_t shard, GtError *err) {
    if (no_transport(d, "dist_allgather_f32", err)) return -1;
    if (solo(d) || shard == 0) return 0;
#ifdef GT_HAVE_MPI
    if (shard > (size_t)INT_MAX)
        return gt_error(err, GT_EXIT_FAILURE, "all-gather: a shard of %zu floats is more than MPI's %d", shard, INT_MAX);
    char what[96];
    snprintf(what, sizeof what, "all-gather of %d x %zu floats", d->world, shard);
    MPI_Request r;
    CHECK_MPI(d, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, d->comm, &r), what);
    wait_one(d, &r, what);
#endif
    return 0;
}

int dist_allreduce_max_i32(Dist *d, int *v, GtError *err) {
    if (no_transport(d, "dist_allreduce_max_i32", err)) return -1;
    (void)err;
    if (solo(d)) return 0;
#ifdef GT_HAVE_MPI
    MPI_Request r;
    const char *what = "agreement of all ranks (max all-reduce)";
    CHECK_MPI(d, MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, d->comm, &r), what);
    wait_one(d, &r, what);
#endif
    return 0;
}

int dist_broadcast(Dist *d, void *buf, size_t bytes, int root, GtError *err) {
    if (no_transport(d, "dist_broadcast", err)) return -1;
    if (solo(d) || bytes == 0) return 0;
    if (root < 0 || root >= d->world)
        return gt_error(err, GT_EXIT_FAILURE, "dist_broadcast: root %d is not a rank of %d", root, d->world);
#ifdef GT_HAVE_MPI
    char what[96];
    snprintf(what, sizeof what, "broadcast of %zu bytes from rank %d", bytes, root);
    for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
        size_t k = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
        MPI_Request r;
        CHECK_MPI(d, MPI_Ibcast((char *)buf + off, (int)k, MPI_BYTE, root, d->comm, &r), what);
        wait_one(d, &r, what);
    }
#endif
    return 0;
}

int dist_barrier(Dist *d, const char *what, GtError *err) {
    if (no_transport(d, "dist_barrier", err)) return -1;
    (void)err;
    if (solo(d)) return 0;
#ifdef GT_HAVE_MPI
    char w[160];
    snprintf(w, sizeof w, "barrier (%s)", what && *what ? what : "all ranks");
    MPI_Request r;
    CHECK_MPI(d, MPI_Ibarrier(d->comm, &r), w);
    wait_one(d, &r, w);
#endif
    return 0;
}

/* ------------------------------------------------------------------------------ failure */

void dist_abort(Dist *d, int exit_code) {
    fflush(stdout);
    fflush(stderr);
#ifdef GT_HAVE_MPI
    if (d && d->comm != MPI_COMM_NULL) {
        MPI_Abort(d->comm, exit_code);
    } else {
        int init = 0, fin = 0;
        if (MPI_Initialized(&init) == MPI_SUCCESS && init && MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
            MPI_Abort(MPI_COMM_WORLD, exit_code);
    }
#else
    (void)d;
#endif
    exit(exit_code);
}

void dist_fail(Dist *d, const GtError *err) {
    int code = err && err->code ? err->code : GT_EXIT_FAILURE;
    const char *msg = err && err->msg[0] ? err->msg : "failed";
    if (dist_world(d) > 1)
        fprintf(stderr, "gtrain: rank %d: %s\n", dist_rank(d), msg);
    else
        fprintf(stderr, "gtrain: %s\n", msg);
    dist_abort(d, code);
}
