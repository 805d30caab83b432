/* dist_nccl.h - data parallel on the CUDA backend over NCCL (cuda/dist_nccl.cu). Only with
 * GT_HAVE_NCCL (make NCCL=1, or NCCL=auto with CUDA and nccl.h found).
 *
 * Init (nccl_open): rank 0 calls ncclGetUniqueId; the 128-byte id reaches the other ranks
 *   - over MPI (dist_broadcast) when the Dist has MPI up (mpirun, srun --mpi=pmix), else
 *   - through init_file on a filesystem every node sees (srun alone): rank 0 writes
 *     "<init_file>.tmp.<pid>" and renames it onto init_file (atomic on POSIX filesystems, NFS and
 *     Lustre included); the other ranks poll for it until the deadline. The file holds a job key
 *     (SLURM_JOB_ID.SLURM_STEP_ID.SLURM_RESTART_COUNT, else GTRAIN_RUN_ID, else none), the world
 *     size and the id in hex. A file whose key or world size differ is STALE (an earlier job or
 *     job step): the reader ignores it and keeps polling until rank 0's file replaces it, so a
 *     stale file never wires a rank into the wrong job. Without any job key a stale file cannot be
 *     told apart: set GTRAIN_RUN_ID to a fresh value per launch, or use a fresh path. Rank 0
 *     removes the file once the communicator is up (every rank has read it by then).
 *   then cudaSetDevice(the backend's device) and ncclCommInitRankConfig with blocking = 0.
 *
 * Streams: collectives run on a dedicated communication stream. nccl_allreduce_start first makes
 * it wait (cudaStreamWaitEvent) for an event recorded on the backend's compute stream, so the
 * gradients it reads are complete while the compute stream goes on with the rest of backward.
 * nccl_wait_all makes the compute stream wait for the communication stream: no host sync.
 *
 * Timeouts: the communicator is non-blocking, so no NCCL call blocks the host. Every host wait
 * (init, nccl_sync, the ZeRO-1 collectives, the host scalars, finalize) polls cudaEventQuery and
 * ncclCommGetAsyncError until timeout_s; on expiry or an NCCL error it calls ncclCommAbort (so the
 * stuck kernels end and the process can exit) and returns one line naming this rank and what it
 * waited for. After that every call fails at once with the same line. timeout_s <= 0: no limit.
 *
 * Errors: every CUDA and NCCL call is checked; a failure comes back as a GtError
 * "rank R: NCCL: <file>:<line>: <call>: <error> (<ncclGetLastError>)" and nothing exits here
 * (the caller ends the job: dist_fail).
 *
 * No global mutable state: everything lives in the NcclComm. */
#ifndef GT_DIST_NCCL_H
#define GT_DIST_NCCL_H

#ifdef GT_HAVE_NCCL

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "common.h"
#include "dist.h"

typedef struct NcclComm NcclComm;

/* NCCL's device buffers, for the backend's runtime_reserve: NCCL_BUFFSIZE (4 MiB by default, NCCL's
 * environment-variable documentation) per connection for the Simple protocol and about as much for
 * LL128, a send and a receive connection per channel, ring and tree, up to 16 channels on one node
 * (NCCL picks the count; 2 x 4 MiB x 2 x 2 x 16 = 512 MiB): an upper estimate, not a measurement. */
#define NCCL_RESERVE_BYTES ((uint64_t)512 << 20)

/* The communicator of this rank: rank/world from d (dist_rank, dist_world); the id over MPI when
 * dist_transport(d) is "mpi", else through init_file (required then, unless world is 1). be must
 * be the CUDA backend: the communicator lives on its device and orders after its compute stream. */
int nccl_open(NcclComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s, GtError *err);
/* The same with rank and world given (d may be NULL: then init_file is the only exchange). For
 * tests and launchers that know their rank without a Dist. */
int nccl_open_ranks(NcclComm **out, int rank, int world, Dist *d, Backend *be, const char *init_file,
                    double timeout_s, GtError *err);
/* Finalize (bounded by the timeout; abort past it) and free. NULL is fine. */
void nccl_close(NcclComm *c);
/* Abort the communicator now (a failure elsewhere on this rank: the peers then see an error or
 * time out instead of waiting for us) and free. NULL is fine. */
void nccl_abort(NcclComm *c);

/* "NCCL 2.28.9" (the linked library's version) into buf; returns buf. */
const char *nccl_version_string(char *buf, size_t cap);

/* Start an in-place sum over ranks of n floats at dev_buf (device memory), ordered after the
 * compute stream's work issued so far, on the communication stream. Returns without waiting. */
int nccl_allreduce_start(NcclComm *c, float *dev_buf, size_t n, GtError *err);
/* The same on n bf16 values (ncclBfloat16: NCCL adds two bf16 values in fp32 and rounds the sum to
 * bf16; ddp_grad_dtype bf16). */
int nccl_allreduce_bf16_start(NcclComm *c, uint16_t *dev_buf, size_t n, GtError *err);
/* The compute stream waits (on the device) for every collective started so far. No host sync;
 * reports an asynchronous NCCL error seen so far. */
int nccl_wait_all(NcclComm *c, GtError *err);
/* The host waits, at most the timeout, until every collective started so far has finished. Call
 * it before anything that synchronises the compute stream after nccl_wait_all (a sum_squares, a
 * to_host), or a dead peer would hang that sync forever. what names the wait in the message. */
int nccl_sync(NcclComm *c, const char *what, GtError *err);
/* Non-blocking check for an asynchronous NCCL error (e.g. between layers of backward). */
int nccl_poll(NcclComm *c, GtError *err);

/* ZeRO-1, same contract as dist.h, on device memory, ordered after the compute stream and with
 * the compute stream waiting for them; both wait on the host (bounded) before returning.
 * reduce-scatter: dev_buf holds world * shard floats; afterwards this rank's shard
 * dev_buf[rank*shard .. (rank+1)*shard) holds the sum over ranks (the rest is undefined). */
int nccl_reduce_scatter(NcclComm *c, float *dev_buf, size_t shard, GtError *err);
/* The same on bf16 values (ncclBfloat16). */
int nccl_reduce_scatter_bf16(NcclComm *c, uint16_t *dev_buf, size_t shard, GtError *err);
/* every rank's shard gathered into dev_buf (world * shard floats), in place */
int nccl_allgather(NcclComm *c, float *dev_buf, size_t shard, GtError *err);
/* The same on host memory (a checkpoint's AdamW shards when there is no MPI): through a
 * temporary device buffer of world * shard floats (not in the memory plan; freed on return). */
int nccl_allgather_host(NcclComm *c, float *host_buf, size_t shard, GtError *err);

/* Host scalars through a small device buffer (for launches without MPI; with MPI up, dist.c's
 * MPI calls are the cheaper path). Bounded host waits. n <= NCCL_HOST_MAX. */
#define NCCL_HOST_MAX 64
int nccl_allreduce_f64_host(NcclComm *c, double *v, int n, GtError *err);
int nccl_allreduce_i64_host(NcclComm *c, int64_t *v, int n, GtError *err);
int nccl_allreduce_max_i32_host(NcclComm *c, int *v, GtError *err);

/* The id-file protocol (exposed for tests; needs no GPU). bytes <= 1024.
 * write: rank 0's side, tmp + rename. read: poll until a file with this job's key and world size
 * appears, or until deadline (gt_now_seconds() time; <= 0: one look only). */
int nccl_id_file_write(const char *path, const void *id, size_t bytes, int world, GtError *err);
int nccl_id_file_read(const char *path, void *id, size_t bytes, int world, double deadline, GtError *err);
/* This launch's job key (see above) into buf; "" when there is none. */
void nccl_job_key(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* GT_HAVE_NCCL */
#endif
