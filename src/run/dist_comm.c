/* dist_comm.c - the run's communicator (dist.h's DistComm): which transport carries each
 * collective, chosen once at open, so its callers (the trainer) hold no #ifdef and no transport
 * test. Buffers in the backend's memory (gradients, ZeRO-1 shards, the weights) go over NCCL on a
 * backend with device memory (cuda/dist_nccl.cu, when built in), over MPI on the CPU (dist.c).
 * Host values go over MPI when it is up (no queueing behind the gradients on NCCL's stream), else
 * over NCCL (srun alone: no MPI, the NCCL id came through dist_init_file).
 *
 * ddp_grad_dtype bf16 (world > 1): dist_comm_grads allocates a bf16 copy of the gradient buffer in
 * the backend's memory (MEM_GRADS: the plan counts it, plan_resolve). A started all-reduce converts
 * its range of the gradients into the copy (the backend's convert: to nearest even), sums the copy
 * over the ranks in bf16 (MPI: dist_allreduce_bf16_start; NCCL: ncclBfloat16), and the wait widens
 * each started range back into the gradients (exact). ZeRO-1's reduce-scatter likewise, on this
 * rank's shard. The conversions are the backend's (one home for rounding); the transports move
 * 2 bytes per value. */
#include "dist.h"

#include <stdlib.h>
#include <string.h>

#ifdef GT_HAVE_NCCL
#include "dist_nccl.h"
#endif

struct DistComm {
    Dist *dist;
#ifdef GT_HAVE_NCCL
    NcclComm *nccl;      /* device backend, world > 1: the backend's buffers (NULL otherwise) */
    bool host_over_nccl; /* host values too: no MPI */
#endif
    Backend *be;
    bool grads_bf16;    /* ddp_grad_dtype bf16: the gradients' sums (all-reduce, reduce-scatter) in bf16 */
    float *grads;       /* dist_comm_grads' buffer, n_grads floats */
    size_t n_grads;
    uint16_t *copy;     /* its bf16 copy (MEM_GRADS), world > 1 and grads_bf16 only */
    size_t *started;    /* (offset, count) of each range started since the last wait */
    int n_started;
};

#define DIST_COMM_MAX_STARTED 1024 /* ranges started before a wait; more: the next start waits first */

int dist_comm_open(DistComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s, bool grads_bf16,
                   const char *config_path, GtError *err) {
    *out = NULL;
    DistComm *c = gt_xcalloc(1, sizeof *c);
    c->dist = d;
    c->be = be;
    c->grads_bf16 = grads_bf16;
    const int world = dist_world(d);
    const bool mpi = strcmp(dist_transport(d), "mpi") == 0;
    bool device_collectives = false;
    /* world > 1: NCCL on a backend with device memory; MPI is then only the launcher (or absent: srun alone) */
    if (world > 1 && (be->ops->caps & GT_CAP_DEVICE_MEMORY)) {
#ifdef GT_HAVE_NCCL
        if (nccl_open(&c->nccl, d, be, init_file, timeout_s, err)) {
            free(c);
            return -1;
        }
        c->host_over_nccl = !mpi;
        device_collectives = true;
        backend_reserve(be, NCCL_RESERVE_BYTES, "NCCL buffers");
        char v[64];
        gt_log("data parallel: %d ranks, gradients over %s (id %s)\n", world, nccl_version_string(v, sizeof v),
               mpi ? "over MPI" : "through dist_init_file");
#else
        (void)init_file, (void)timeout_s;
        free(c);
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: device: several ranks on the %s backend need NCCL, and this gtrain was built without it "
                        "(make CUDA=1 NCCL=1, needs nccl.h); or use device: cpu",
                        config_path, be->ops->name);
#endif
    }
    if (world > 1 && !device_collectives && !mpi) {
        dist_comm_close(c, false);
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: %d ranks without MPI run only on GPUs (device: cuda, with dist_init_file); on the %s "
                        "backend launch with mpirun or srun --mpi=pmix",
                        config_path, world, be->ops->name);
    }
    *out = c;
    return 0;
}

int dist_comm_grads(DistComm *c, float *grads, size_t n, GtError *err) {
    c->grads = grads;
    c->n_grads = n;
    if (!c->grads_bf16 || dist_world(c->dist) <= 1 || c->copy) return 0;
    c->copy = backend_alloc(c->be, MEM_GRADS, n * sizeof *c->copy, err);
    if (!c->copy) return -1;
    c->started = gt_xcalloc(2 * DIST_COMM_MAX_STARTED, sizeof *c->started);
    return 0;
}

void dist_comm_close(DistComm *c, bool ok) {
    if (!c) return;
#ifdef GT_HAVE_NCCL
    /* on a failure abort, so no finalize waits for peers */
    if (ok)
        nccl_close(c->nccl);
    else
        nccl_abort(c->nccl);
#else
    (void)ok;
#endif
    if (c->copy) backend_free(c->be, MEM_GRADS, c->copy, c->n_grads * sizeof *c->copy);
    free(c->started);
    free(c);
}

/* ---------------------------------------------------------------- host values */

int dist_comm_sum_i64(DistComm *c, int64_t *v, int n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->host_over_nccl) return nccl_allreduce_i64_host(c->nccl, v, n, err);
#endif
    return dist_allreduce_i64(c->dist, v, n, err);
}

int dist_comm_sum_f64(DistComm *c, double *v, int n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->host_over_nccl) return nccl_allreduce_f64_host(c->nccl, v, n, err);
#endif
    return dist_allreduce_f64(c->dist, v, n, err);
}

int dist_comm_max_i32(DistComm *c, int *v, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->host_over_nccl) return nccl_allreduce_max_i32_host(c->nccl, v, err);
#endif
    return dist_allreduce_max_i32(c->dist, v, err);
}

int dist_comm_allgather_host(DistComm *c, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->host_over_nccl) return nccl_allgather_host(c->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(c->dist, buf, shard, err);
}

/* ---------------------------------------------------------------- the backend's buffers */

/* the bf16 copy of grads[off .. off + n) (which must lie in the registered buffer), or NULL */
static uint16_t *copy_of(DistComm *c, const float *buf, size_t n, const char *what, GtError *err) {
    if (!c->grads || buf < c->grads || n > c->n_grads || (size_t)(buf - c->grads) > c->n_grads - n) {
        gt_error(err, GT_EXIT_FAILURE, "%s of %zu values: not in the gradient buffer given to dist_comm_grads", what, n);
        return NULL;
    }
    return c->copy + (buf - c->grads);
}

int dist_comm_allreduce_start(DistComm *c, float *buf, size_t n, GtError *err) {
    if (c->copy && n) {
        uint16_t *half = copy_of(c, buf, n, "a bf16 all-reduce", err);
        if (!half) return -1;
        if (c->n_started == DIST_COMM_MAX_STARTED && dist_comm_wait_all(c, err)) return -1;
        c->be->ops->convert(c->be, half, GT_BF16, buf, GT_F32, n); /* on the compute stream: before NCCL's start */
        c->started[2 * c->n_started] = (size_t)(buf - c->grads);
        c->started[2 * c->n_started + 1] = n;
        c->n_started++;
#ifdef GT_HAVE_NCCL
        if (c->nccl) return nccl_allreduce_bf16_start(c->nccl, half, n, err);
#endif
        return dist_allreduce_bf16_start(c->dist, half, n, err) || dist_poll(c->dist, err) ? -1 : 0;
    }
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_allreduce_start(c->nccl, buf, n, err); /* on NCCL's stream, after the compute stream's work */
#endif
    return dist_allreduce_f32_start(c->dist, buf, n, err) || dist_poll(c->dist, err) ? -1 : 0;
}

int dist_comm_wait_all(DistComm *c, GtError *err) {
    int rc;
#ifdef GT_HAVE_NCCL
    if (c->nccl)
        rc = nccl_wait_all(c->nccl, err) || nccl_sync(c->nccl, NULL, err) ? -1 : 0;
    else
#endif
        rc = dist_wait_all(c->dist, err);
    if (rc) return -1;
    /* the started ranges' sums back into the gradients (on the compute stream, after NCCL's) */
    for (int i = 0; i < c->n_started; i++) {
        const size_t off = c->started[2 * i], n = c->started[2 * i + 1];
        c->be->ops->convert(c->be, c->grads + off, GT_F32, c->copy + off, GT_BF16, n);
    }
    c->n_started = 0;
    return 0;
}

int dist_comm_reduce_scatter(DistComm *c, float *buf, size_t shard, GtError *err) {
    if (c->copy && shard) {
        const int world = dist_world(c->dist);
        const size_t mine = (size_t)dist_rank(c->dist) * shard;
        uint16_t *half = copy_of(c, buf, (size_t)world * shard, "a bf16 reduce-scatter", err);
        if (!half) return -1;
        c->be->ops->convert(c->be, half, GT_BF16, buf, GT_F32, (size_t)world * shard);
        int rc;
#ifdef GT_HAVE_NCCL
        if (c->nccl)
            rc = nccl_reduce_scatter_bf16(c->nccl, half, shard, err);
        else
#endif
            rc = dist_reduce_scatter_bf16(c->dist, half, shard, err);
        if (rc) return -1;
        c->be->ops->convert(c->be, buf + mine, GT_F32, half + mine, GT_BF16, shard);
        return 0;
    }
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_reduce_scatter(c->nccl, buf, shard, err);
#endif
    return dist_reduce_scatter_f32(c->dist, buf, shard, err);
}

int dist_comm_allgather(DistComm *c, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_allgather(c->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(c->dist, buf, shard, err);
}
