/* module_entry.cu - the CUDA backend module's one exported symbol (cuda_module.h): the table of
 * what gtrain calls in here. Everything else in libgtrain-cuda.so is hidden (-fvisibility=hidden). */
#include "cuda_common.cuh"

extern "C" {
#include "cuda_module.h"
int gtc_mma_selftest(int mode, const uint16_t *a, const uint16_t *b, float *d); /* mma_selftest.cu */
#ifdef GT_HAVE_NCCL
#include "dist_nccl.h"
#endif
}

static const GtCudaModule k_module = {
    GT_CUDA_MODULE_ABI,
    sizeof(Backend),
    sizeof(BackendOps),
    sizeof(GtError),
    cuda_device_count,
    cuda_backend_create,
#ifdef GT_HAVE_NCCL
    nccl_open,
    nccl_open_ranks,
    nccl_close,
    nccl_abort,
    nccl_version_string,
    nccl_allreduce_start,
    nccl_wait_all,
    nccl_sync,
    nccl_poll,
    nccl_reduce_scatter,
    nccl_allgather,
    nccl_allgather_host,
    nccl_allreduce_f64_host,
    nccl_allreduce_i64_host,
    nccl_allreduce_max_i32_host,
    nccl_id_file_write,
    nccl_id_file_read,
    nccl_job_key,
    nccl_allreduce_bf16_start,
    nccl_reduce_scatter_bf16,
#else
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL,
#endif
    gtc_mma_selftest,
};

extern "C" __attribute__((visibility("default"))) const GtCudaModule *gtrain_cuda_module(void) { return &k_module; }
