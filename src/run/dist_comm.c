/* dist_comm.c - the run's communicator (dist.h's DistComm): which transport carries each
 * collective, chosen once at open, so its callers (the trainer) hold no #ifdef and no transport
 * test. Buffers in the backend's memory (gradients, ZeRO-1 shards, the weights) go over NCCL on a
 * backend with device memory (cuda/dist_nccl.cu, when built in), over MPI on the CPU (dist.c).
 * Host values go over MPI when it is up (no queueing behind the gradients on NCCL's stream), else
 * over NCCL (srun alone: no MPI, the NCCL id came through dist_init_file). */
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
    bool grads_bf16; /* ddp_grad_dtype bf16: the gradients' sums (all-reduce, reduce-scatter) in bf16 */
};

int dist_comm_open(DistComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s, bool grads_bf16,
                   const char *config_path, GtError *err) {
    *out = NULL;
    DistComm *c = gt_xcalloc(1, sizeof *c);
    c->dist = d;
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
        if (grads_bf16) { /* not yet: refused rather than sent in fp32 unsaid */
            dist_comm_close(c, false);
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: ddp_grad_dtype: expected fp32 on the %s backend (bf16 gradients go over MPI on the "
                            "cpu backend only, not yet over NCCL), found bf16",
                            config_path, be->ops->name);
        }
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

int dist_comm_allreduce_start(DistComm *c, float *buf, size_t n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_allreduce_start(c->nccl, buf, n, err); /* on NCCL's stream, after the compute stream's work */
#endif
    if (c->grads_bf16) return dist_allreduce_bf16_start(c->dist, buf, n, err) || dist_poll(c->dist, err) ? -1 : 0;
    return dist_allreduce_f32_start(c->dist, buf, n, err) || dist_poll(c->dist, err) ? -1 : 0;
}

int dist_comm_wait_all(DistComm *c, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_wait_all(c->nccl, err) || nccl_sync(c->nccl, NULL, err) ? -1 : 0;
#endif
    return dist_wait_all(c->dist, err);
}

int dist_comm_reduce_scatter(DistComm *c, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_reduce_scatter(c->nccl, buf, shard, err);
#endif
    if (c->grads_bf16) return dist_reduce_scatter_bf16(c->dist, buf, shard, err);
    return dist_reduce_scatter_f32(c->dist, buf, shard, err);
}

int dist_comm_allgather(DistComm *c, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (c->nccl) return nccl_allgather(c->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(c->dist, buf, shard, err);
}
