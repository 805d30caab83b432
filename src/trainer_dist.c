/* trainer_dist.c - the trainer's collectives: which transport (MPI or NCCL) carries each of them. */
#include "trainer_internal.h"

#include <string.h>

#ifdef GT_HAVE_NCCL
#include "dist_nccl.h"
#endif

/* ---------------------------------------------------------------- collectives: MPI or NCCL
 * Device buffers (gradients, ZeRO-1 shards) go over NCCL on the CUDA backend, over MPI on the CPU.
 * Host values go over MPI when it is up (no queueing behind the gradients on NCCL's stream), else
 * over NCCL (srun alone: no MPI, the NCCL id came through dist_init_file). */
#ifdef GT_HAVE_NCCL
static bool host_over_nccl(const Trainer *t) {
    return t->nccl && strcmp(dist_transport(t->dist), "mpi") != 0;
}
#endif
int trainer_sum_i64(Trainer *t, int64_t *v, int n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allreduce_i64_host(t->nccl, v, n, err);
#endif
    return dist_allreduce_i64(t->dist, v, n, err);
}
int trainer_sum_f64(Trainer *t, double *v, int n, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allreduce_f64_host(t->nccl, v, n, err);
#endif
    return dist_allreduce_f64(t->dist, v, n, err);
}
int trainer_max_i32(Trainer *t, int *v, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allreduce_max_i32_host(t->nccl, v, err);
#endif
    return dist_allreduce_max_i32(t->dist, v, err);
}
int trainer_allgather_host(Trainer *t, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (host_over_nccl(t)) return nccl_allgather_host(t->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(t->dist, buf, shard, err);
}
/* model buffers (device memory on CUDA) */
int trainer_grads_reduce_scatter(Trainer *t, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (t->nccl) return nccl_reduce_scatter(t->nccl, buf, shard, err);
#endif
    return dist_reduce_scatter_f32(t->dist, buf, shard, err);
}
int trainer_params_allgather(Trainer *t, float *buf, size_t shard, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (t->nccl) return nccl_allgather(t->nccl, buf, shard, err);
#endif
    return dist_allgather_f32(t->dist, buf, shard, err);
}
/* the started gradient all-reduces: done before the optimizer reads the gradients. NCCL: the
 * compute stream waits on the device, and the host waits (bounded) before the grad norm's sync. */
int trainer_grads_wait(Trainer *t, GtError *err) {
#ifdef GT_HAVE_NCCL
    if (t->nccl) return nccl_wait_all(t->nccl, err) || nccl_sync(t->nccl, NULL, err) ? -1 : 0;
#endif
    return dist_wait_all(t->dist, err);
}

/* world > 1: NCCL on the CUDA backend; MPI is then only the launcher (or absent: srun alone) */
int trainer_open_comm(Trainer *t, GtError *err) {
    const RunConfig *cfg = t->cfg;
    if (t->world > 1 && (t->be->ops->caps & GT_CAP_DEVICE_MEMORY)) {
#ifdef GT_HAVE_NCCL
        if (nccl_open(&t->nccl, t->dist, t->be, cfg->dist_init_file, cfg->dist_timeout, err)) return -1;
        char v[64];
        gt_log("data parallel: %d ranks, gradients over %s (id %s)\n", t->world, nccl_version_string(v, sizeof v),
               strcmp(dist_transport(t->dist), "mpi") == 0 ? "over MPI" : "through dist_init_file");
#else
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: device: several ranks on the %s backend need NCCL, and this gtrain was built without it "
                        "(make CUDA=1 NCCL=1, needs nccl.h); or use device: cpu",
                        cfg->config_path, t->be->ops->name);
#endif
    }
    if (t->world > 1 && !t->nccl && strcmp(dist_transport(t->dist), "mpi") != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: %d ranks without MPI run only on GPUs (device: cuda, with dist_init_file); on the %s "
                        "backend launch with mpirun or srun --mpi=pmix",
                        cfg->config_path, t->world, t->be->ops->name);
    return 0;
}

