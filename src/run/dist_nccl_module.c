/* dist_nccl_module.c - dist_nccl.h's functions, as gtrain calls them: each forwards to the CUDA
 * backend module's table (cuda_module.h), where cuda/dist_nccl.cu implements them; the module
 * loads on the first call (a communicator exists only on the CUDA backend, so it is loaded by
 * then). Built only with GT_HAVE_NCCL (the module this build makes has NCCL). */
#ifdef GT_HAVE_NCCL

#include "dist_nccl.h"

#include <stdio.h>

#include "cuda_module.h"

/* the module, with its NCCL entries; NULL with err filled when it has none */
static const GtCudaModule *nccl_module(GtError *err) {
    const GtCudaModule *m;
    if (cuda_module_load(&m, NULL, 0, err)) return NULL;
    if (!m->nccl_open) {
        gt_error(err, GT_EXIT_BAD_INPUT, "the CUDA backend module was built without NCCL (make NCCL=1, needs nccl.h)");
        return NULL;
    }
    return m;
}

int nccl_open(NcclComm **out, Dist *d, Backend *be, const char *init_file, double timeout_s, GtError *err) {
    *out = NULL;
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_open(out, d, be, init_file, timeout_s, err) : -1;
}

int nccl_open_ranks(NcclComm **out, int rank, int world, Dist *d, Backend *be, const char *init_file,
                    double timeout_s, GtError *err) {
    *out = NULL;
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_open_ranks(out, rank, world, d, be, init_file, timeout_s, err) : -1;
}

int nccl_allreduce_start(NcclComm *c, float *dev_buf, size_t n, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allreduce_start(c, dev_buf, n, err) : -1;
}

int nccl_allreduce_bf16_start(NcclComm *c, uint16_t *dev_buf, size_t n, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allreduce_bf16_start(c, dev_buf, n, err) : -1;
}

int nccl_reduce_scatter_bf16(NcclComm *c, uint16_t *dev_buf, size_t shard, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_reduce_scatter_bf16(c, dev_buf, shard, err) : -1;
}

int nccl_wait_all(NcclComm *c, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_wait_all(c, err) : -1;
}

int nccl_sync(NcclComm *c, const char *what, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_sync(c, what, err) : -1;
}

int nccl_poll(NcclComm *c, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_poll(c, err) : -1;
}

int nccl_reduce_scatter(NcclComm *c, float *dev_buf, size_t shard, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_reduce_scatter(c, dev_buf, shard, err) : -1;
}

int nccl_allgather(NcclComm *c, float *dev_buf, size_t shard, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allgather(c, dev_buf, shard, err) : -1;
}

int nccl_allgather_host(NcclComm *c, float *host_buf, size_t shard, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allgather_host(c, host_buf, shard, err) : -1;
}

int nccl_allreduce_f64_host(NcclComm *c, double *v, int n, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allreduce_f64_host(c, v, n, err) : -1;
}

int nccl_allreduce_i64_host(NcclComm *c, int64_t *v, int n, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allreduce_i64_host(c, v, n, err) : -1;
}

int nccl_allreduce_max_i32_host(NcclComm *c, int *v, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_allreduce_max_i32_host(c, v, err) : -1;
}

int nccl_id_file_write(const char *path, const void *id, size_t bytes, int world, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_id_file_write(path, id, bytes, world, err) : -1;
}

int nccl_id_file_read(const char *path, void *id, size_t bytes, int world, double deadline, GtError *err) {
    const GtCudaModule *m = nccl_module(err);
    return m ? m->nccl_id_file_read(path, id, bytes, world, deadline, err) : -1;
}

void nccl_close(NcclComm *c) {
    GtError err = {0};
    const GtCudaModule *m = c ? nccl_module(&err) : NULL;
    if (m) m->nccl_close(c);
}

void nccl_abort(NcclComm *c) {
    GtError err = {0};
    const GtCudaModule *m = c ? nccl_module(&err) : NULL;
    if (m) m->nccl_abort(c);
}

const char *nccl_version_string(char *buf, size_t cap) {
    GtError err = {0};
    const GtCudaModule *m = nccl_module(&err);
    if (m) return m->nccl_version_string(buf, cap);
    snprintf(buf, cap, "NCCL (not loaded: %s)", err.msg);
    return buf;
}

void nccl_job_key(char *buf, size_t cap) {
    GtError err = {0};
    const GtCudaModule *m = nccl_module(&err);
    if (m)
        m->nccl_job_key(buf, cap);
    else
        snprintf(buf, cap, "?");
}

#endif /* GT_HAVE_NCCL */
