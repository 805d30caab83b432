/* dist.h - data parallel across processes: world size, rank, local rank, and the collectives the
 * trainer needs. CPU backend: MPI (Open MPI). CUDA backend: NCCL, its unique id broadcast over MPI,
 * or exchanged through dist_init_file on a shared filesystem for srun-only launches.
 * One process with no launcher is world size 1 and needs neither (every call is then a no-op).
 *
 * Rank discovery, in order: Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), PMI/PMIx
 * (PMI_RANK/PMI_SIZE), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), torchrun-style
 * (RANK, WORLD_SIZE, LOCAL_RANK).
 *
 * Failure: every collective waits at most `timeout_s`; on a timeout or an error this rank prints
 * one line naming itself and what it waited for, and the whole job is aborted (MPI_Abort), so no
 * rank hangs. */
#ifndef GT_DIST_H
#define GT_DIST_H

#include "backend.h"
#include "common.h"

typedef struct Dist Dist;

/* argc/argv for MPI_Init. timeout_s: collective timeout in seconds. */
int dist_init(Dist **out, int *argc, char ***argv, double timeout_s, GtError *err);
void dist_finalize(Dist *d); /* NULL is fine */
int dist_rank(const Dist *d);
int dist_world(const Dist *d);
int dist_local_rank(const Dist *d);
/* "mpi", "none" (world 1), "env" (world > 1 without MPI: srun alone, only NCCL communicates; built
 * with NCCL only), for logs */
const char *dist_transport(const Dist *d);

/* In-place sum over ranks of n floats at buf (host memory for the CPU backend). */
int dist_allreduce_f32(Dist *d, float *buf, size_t n, GtError *err);
/* Start an in-place sum without waiting (for overlapping with backward); dist_wait_all waits for
 * every started one. */
int dist_allreduce_f32_start(Dist *d, float *buf, size_t n, GtError *err);
/* The same on n bf16 values (uint16 bit patterns; ddp_grad_dtype bf16): each pairwise sum is taken
 * in fp32 and rounded to bf16 (to nearest even), as NCCL's bf16 sum. */
int dist_allreduce_bf16_start(Dist *d, uint16_t *buf, size_t n, GtError *err);
int dist_wait_all(Dist *d, GtError *err);
/* Sums of host scalars. */
int dist_allreduce_i64(Dist *d, int64_t *v, int n, GtError *err);
int dist_allreduce_f64(Dist *d, double *v, int n, GtError *err);
/* ZeRO-1: buf holds world * shard floats; after the call this rank's shard
 * buf[rank*shard .. (rank+1)*shard) holds the sum over ranks (the rest is undefined). */
int dist_reduce_scatter_f32(Dist *d, float *buf, size_t shard, GtError *err);
/* The same on bf16 values, summed as dist_allreduce_bf16_start sums them. */
int dist_reduce_scatter_bf16(Dist *d, uint16_t *buf, size_t shard, GtError *err);
/* every rank's shard gathered into buf (world * shard floats), in place */
int dist_allgather_f32(Dist *d, float *buf, size_t shard, GtError *err);
/* all ranks agree a value (e.g. 1 = "I failed"): max over ranks */
int dist_allreduce_max_i32(Dist *d, int *v, GtError *err);
/* End the whole job now: this rank's message is printed by the caller first. */
void dist_abort(Dist *d, int exit_code) __attribute__((noreturn));

/* --- additions (dist.c) --- */
/* "mpi" when built with MPI=1, else "none" (for --version). */
const char *dist_built(void);
/* Drive the started all-reduces forward without waiting (MPI's non-blocking collectives progress
 * only inside MPI calls): call it between layers of backward for real overlap. */
int dist_poll(Dist *d, GtError *err);
/* bytes from rank root to every rank (e.g. the NCCL unique id, or a config hash to compare). */
int dist_broadcast(Dist *d, void *buf, size_t bytes, int root, GtError *err);
/* Every rank waits for every other; what names the wait in a timeout message. */
int dist_barrier(Dist *d, const char *what, GtError *err);
/* Print "gtrain: rank R: <err->msg>" (just "gtrain: <msg>" at world size 1) and end the whole job
 * with err->code. For a failure on one rank: the others are stopped instead of waiting. */
void dist_fail(Dist *d, const GtError *err) __attribute__((noreturn));

/* ---- the run's communicator (dist_comm.c): one interface over MPI and NCCL ----
 * The transport of each collective is chosen once, at open: the backend's buffers over NCCL on a
 * backend with device memory (GT_CAP_DEVICE_MEMORY; refused when built without NCCL), over MPI
 * otherwise; host values over MPI when it is up, else NCCL. World 1: every call is a no-op. */
typedef struct DistComm DistComm;
/* Refused (code 2, naming config_path) when world > 1 has no transport for be. Logs NCCL's line.
 * grads_bf16 (ddp_grad_dtype bf16): the gradients' all-reduce and ZeRO-1's reduce-scatter sum in
 * bf16, as dist_allreduce_bf16_start (MPI) or ncclBfloat16 (NCCL) do; host values stay exact. */
int dist_comm_open(DistComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s, bool grads_bf16,
                   const char *config_path, GtError *err);
/* The gradient buffer (n floats: every range the all-reduces and the reduce-scatter are given lies
 * in it). With grads_bf16 and world > 1, its bf16 copy is allocated here in the backend's memory
 * (MEM_GRADS, n * 2 bytes: what plan_resolve adds to the plan); a no-op otherwise. */
int dist_comm_grads(DistComm *c, float *grads, size_t n, GtError *err);
/* ok: finalize (bounded); else abort, so no peer is waited for. Before the buffers it may still
 * read are freed. NULL is fine. */
void dist_comm_close(DistComm *c, bool ok);
/* host values: sums, a max, every rank's shard gathered in place (world * shard floats) */
int dist_comm_sum_i64(DistComm *c, int64_t *v, int n, GtError *err);
int dist_comm_sum_f64(DistComm *c, double *v, int n, GtError *err);
int dist_comm_max_i32(DistComm *c, int *v, GtError *err);
int dist_comm_allgather_host(DistComm *c, float *buf, size_t shard, GtError *err);
/* the backend's buffers: an in-place sum started without waiting (ordered after the compute
 * work issued so far), and the wait for every started one before the sums are read; ZeRO-1's
 * reduce-scatter and all-gather, as dist_reduce_scatter_f32 / dist_allgather_f32 */
int dist_comm_allreduce_start(DistComm *c, float *buf, size_t n, GtError *err);
int dist_comm_wait_all(DistComm *c, GtError *err);
int dist_comm_reduce_scatter(DistComm *c, float *buf, size_t shard, GtError *err);
int dist_comm_allgather(DistComm *c, float *buf, size_t shard, GtError *err);

#endif
