/* cuda_module.h - the one boundary between gtrain and its CUDA backend, which is a shared object
 * (libgtrain-cuda.so: the .cu files of cuda/ with cuBLAS, cuBLASLt, cudart and NCCL) opened with dlopen only
 * when a run asks for CUDA or device: auto asks whether a GPU exists. The main binary links none of
 * the CUDA libraries, so it starts (and runs on the CPU) where they are absent.
 *
 * The module exports one function, GT_CUDA_MODULE_ENTRY, returning its table below; everything else
 * in it is hidden (-fvisibility=hidden). What the module calls in gtrain (gt_error, gt_log,
 * backend_alloc, dist_* ...) resolves against the executable's exported symbols (-rdynamic).
 *
 * How many GPUs there are is asked of a second, small module, libgtrain-cuda-probe.so (cudart only,
 * cuda/device_probe.cu, entry GT_CUDA_PROBE_ENTRY): loading cuBLAS and cuBLASLt costs ~0.5 s and
 * ~200 MB resident, which device: auto on a machine without a GPU, and --version, must not pay.
 *
 * Where both are looked for (backend_module.c): $GTRAIN_BACKEND_DIR when set (only there), else the
 * folder of the running executable (/proc/self/exe). */
#ifndef GT_CUDA_MODULE_H
#define GT_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "common.h"
#include "dist.h"

#define GT_CUDA_MODULE_ABI 2 /* 2: nccl_allreduce_bf16_start, nccl_reduce_scatter_bf16 */
#define GT_CUDA_MODULE_ENTRY "gtrain_cuda_module"
#define GT_CUDA_MODULE_FILE "libgtrain-cuda.so"
#define GT_CUDA_PROBE_ENTRY "gtrain_cuda_probe"
#define GT_CUDA_PROBE_FILE "libgtrain-cuda-probe.so"
#define GT_BACKEND_DIR_ENV "GTRAIN_BACKEND_DIR"

typedef struct NcclComm NcclComm;

/* The table: the layout sizes let the loader refuse a module built against other headers. The
 * nccl_* entries are NULL in a module built without NCCL; their contracts are dist_nccl.h's. */
typedef struct GtCudaModule {
    int abi;                 /* GT_CUDA_MODULE_ABI */
    size_t sizeof_backend;   /* sizeof(Backend) */
    size_t sizeof_ops;       /* sizeof(BackendOps) */
    size_t sizeof_error;     /* sizeof(GtError) */
    /* GPUs the CUDA runtime sees, without creating a context; 0 with the reason in why */
    int (*device_count)(char *why, size_t cap);
    int (*backend_create)(Backend **out, int local_rank, GtError *err);

    int (*nccl_open)(NcclComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s, GtError *err);
    int (*nccl_open_ranks)(NcclComm **out, int rank, int world, Dist *d, Backend *be, const char *init_file,
                           double timeout_s, GtError *err);
    void (*nccl_close)(NcclComm *c);
    void (*nccl_abort)(NcclComm *c);
    const char *(*nccl_version_string)(char *buf, size_t cap);
    int (*nccl_allreduce_start)(NcclComm *c, float *dev_buf, size_t n, GtError *err);
    int (*nccl_wait_all)(NcclComm *c, GtError *err);
    int (*nccl_sync)(NcclComm *c, const char *what, GtError *err);
    int (*nccl_poll)(NcclComm *c, GtError *err);
    int (*nccl_reduce_scatter)(NcclComm *c, float *dev_buf, size_t shard, GtError *err);
    int (*nccl_allgather)(NcclComm *c, float *dev_buf, size_t shard, GtError *err);
    int (*nccl_allgather_host)(NcclComm *c, float *host_buf, size_t shard, GtError *err);
    int (*nccl_allreduce_f64_host)(NcclComm *c, double *v, int n, GtError *err);
    int (*nccl_allreduce_i64_host)(NcclComm *c, int64_t *v, int n, GtError *err);
    int (*nccl_allreduce_max_i32_host)(NcclComm *c, int *v, GtError *err);
    int (*nccl_id_file_write)(const char *path, const void *id, size_t bytes, int world, GtError *err);
    int (*nccl_id_file_read)(const char *path, void *id, size_t bytes, int world, double deadline, GtError *err);
    void (*nccl_job_key)(char *buf, size_t cap);
    int (*nccl_allreduce_bf16_start)(NcclComm *c, uint16_t *dev_buf, size_t n, GtError *err);
    int (*nccl_reduce_scatter_bf16)(NcclComm *c, uint16_t *dev_buf, size_t shard, GtError *err);
    /* tests only (tests/test_mma_ptx.c): one warp's mma.sync / ldmatrix fragments on a 16x16 bf16
     * product, mode 0 direct, 1 ldmatrix, 2 ldmatrix.trans (cuda/mma_selftest.cu); 0 on success */
    int (*mma_selftest)(int mode, const uint16_t *a, const uint16_t *b, float *d);
} GtCudaModule;

typedef const GtCudaModule *(*GtCudaModuleEntry)(void);
/* the probe's entry: cuda_device_count */
typedef int (*GtCudaProbeEntry)(char *why, size_t cap);

/* ---- the module's side (cuda/module_entry.cu fills the table from these) ---- */
int cuda_device_count(char *why, size_t cap);
int cuda_backend_create(Backend **out, int local_rank, GtError *err);

/* ---- gtrain's side (src/backend/backend_module.c) ---- */

/* The module, loaded (dlopen keeps one copy however often this is called; it is never unloaded).
 * Fails (code GT_EXIT_BAD_INPUT) with one line naming the file and why: missing, dlerror's text
 * (e.g. which CUDA library is absent), no entry point, or built against other headers. path (may
 * be NULL) receives the file looked for either way. */
int cuda_module_load(const GtCudaModule **out, char *path, size_t cap, GtError *err);
/* GPUs the probe module sees; 0 with why filled (no device, or the probe missing / not loading). */
int cuda_probe_count(char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
