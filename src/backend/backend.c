/* backend.c - backend selection, the tracking allocator shared by every backend, and the one
 * place that composes an optional (fused) op a backend leaves out (backend.h). */
#include "backend.h"
#include "cuda_module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_mem_category_names[MEM_COUNT] = {
    [MEM_PARAMS] = "params",
    [MEM_FROZEN] = "frozen",
    [MEM_GRADS] = "grads",
    [MEM_OPTIMIZER] = "optimizer",
    [MEM_ACTIVATIONS] = "activations",
    [MEM_RECOMPUTE_STASH] = "recompute_stash",
    [MEM_RECOMPUTE_SCRATCH] = "recompute_scratch",
    [MEM_WORKSPACE] = "workspace",
    [MEM_LOGITS] = "logits",
    [MEM_HOST_OFFLOAD] = "host_offload",
    [MEM_HOST_STAGING] = "host_staging",
    [MEM_KV_CACHE] = "kv_cache",
};

const char *mem_category_name(MemCategory c) {
    return (c >= 0 && c < MEM_COUNT) ? k_mem_category_names[c] : "?";
}

bool mem_category_on_device(MemCategory c) { return c != MEM_HOST_OFFLOAD && c != MEM_HOST_STAGING; }

void backend_reserve(Backend *b, uint64_t bytes, const char *what) {
    char sz[32];
    const size_t n = strlen(b->runtime_reserve_what);
    b->runtime_reserve += bytes;
    snprintf(b->runtime_reserve_what + n, sizeof b->runtime_reserve_what - n, "%s%s %s", n ? ", " : "", what,
             gt_format_bytes(sz, sizeof sz, bytes));
}

uint64_t backend_auto_limit(const Backend *b) {
    /* 1, not 0: a limit of 0 means none, and a reserve above the free memory leaves nothing */
    return b->device_free_bytes > b->runtime_reserve ? b->device_free_bytes - b->runtime_reserve : 1;
}

const char *backend_built_list(void) {
#ifdef GT_HAVE_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}

int backend_open(Backend **out, DeviceKind kind, int local_rank, int num_threads, GtError *err) {
    *out = NULL;
    switch (kind) {
    case DEVICE_CPU:
        return cpu_backend_create(out, num_threads, err);
    case DEVICE_CUDA:
        return backend_open_cuda(out, local_rank, err);
    case DEVICE_AUTO:
    default:
        if (backend_gpu_count() > 0) {
            /* a GPU, but the module's CUDA libraries absent (cuBLAS, NCCL): the CPU, said once */
            const GtCudaModule *m;
            GtError why = {0};
            if (cuda_module_load(&m, NULL, 0, &why) == 0) return backend_open_cuda(out, local_rank, err);
            gt_warn("device: auto: a GPU is visible, but %s; running on the CPU\n", why.msg);
        }
        return cpu_backend_create(out, num_threads, err);
    }
}

void backend_close(Backend *b) {
    if (b && b->ops && b->ops->close) b->ops->close(b);
}

void *backend_alloc(Backend *b, MemCategory cat, size_t bytes, GtError *err) {
    char have[32], want[32];
    void *p = mem_category_on_device(cat) ? b->ops->dev_alloc(b, bytes) : b->ops->host_alloc(b, bytes);
    if (!p) {
        gt_error(err, GT_EXIT_FAILURE, "%s: out of %s memory allocating %s for %s (%s in use)",
                 b->device_name, mem_category_on_device(cat) ? "device" : "host",
                 gt_format_bytes(want, sizeof want, bytes), mem_category_name(cat),
                 gt_format_bytes(have, sizeof have, b->mem.device_current));
        return NULL;
    }
    /* zeroed, and so touched now: memory the system overcommitted fails here, at start, not in the
     * middle of a step, and step 1 does not pay the page faults */
    if (mem_category_on_device(cat))
        b->ops->zero(b, p, bytes);
    else
        memset(p, 0, bytes); /* host memory on every backend */
    MemTracker *m = &b->mem;
    m->current[cat] += bytes;
    if (m->current[cat] > m->peak[cat]) m->peak[cat] = m->current[cat];
    if (mem_category_on_device(cat)) {
        m->device_current += bytes;
        if (m->device_current > m->device_peak) m->device_peak = m->device_current;
    }
    return p;
}

void backend_free(Backend *b, MemCategory cat, void *p, size_t bytes) {
    if (!p) return;
    if (mem_category_on_device(cat)) {
        b->ops->dev_free(b, p);
        b->mem.device_current -= bytes;
    } else {
        b->ops->host_free(b, p);
    }
    b->mem.current[cat] -= bytes;
}

float *backend_alloc_floats(Backend *b, MemCategory cat, size_t n, GtError *err) {
    size_t bytes;
    if (!gt_mul_size(n, sizeof(float), &bytes)) {
        gt_error(err, GT_EXIT_FAILURE, "allocation of %zu floats overflows", n);
        return NULL;
    }
    return backend_alloc(b, cat, bytes, err);
}

size_t gt_dtype_size(GtDtype t) {
    if (t == GT_NF4) { /* a bug: an NF4 tensor's bytes are its units' (nf4.h), never numel * size */
        fprintf(stderr, "gtrain: internal error: gt_dtype_size(nf4)\n");
        abort();
    }
    return t == GT_BF16 ? 2 : 4;
}
const char *gt_dtype_name(GtDtype t) { return t == GT_NF4 ? "nf4" : t == GT_BF16 ? "bf16" : "fp32"; }

void backend_set_act_dtype(Backend *b, GtDtype t) { b->act_dtype = t; }

int backend_act_to_host_f32(Backend *b, float *host_dst, const act_t *dev_src, size_t n, GtError *err) {
    return backend_to_host_f32(b, host_dst, dev_src, b->act_dtype, n, err);
}

int backend_to_host_f32(Backend *b, float *host_dst, const void *dev_src, GtDtype t, size_t n, GtError *err) {
    if (t == GT_F32) return b->ops->to_host(b, host_dst, dev_src, n * sizeof(float), err);
    /* bf16: fetch into the upper half of the destination, then widen front to back (element i is
     * written at byte 4i, after the bf16 at byte 2n + 2i >= 4i has been read) */
    uint16_t *half = (uint16_t *)(void *)((char *)host_dst + n * sizeof(uint16_t));
    if (b->ops->to_host(b, half, dev_src, n * sizeof(uint16_t), err)) return -1;
    for (size_t i = 0; i < n; i++) host_dst[i] = gt_bf16_to_f32(half[i]);
    return 0;
}

/* ------------------------------------------------------------------ optional entries */

void backend_residual_layernorm_forward(Backend *b, act_t *res, act_t *out, float *mean, float *rstd, const act_t *x,
                                        const act_t *y, const act_t *w, const act_t *bias, int N, int C, float eps) {
    if (b->ops->residual_layernorm_forward) {
        b->ops->residual_layernorm_forward(b, res, out, mean, rstd, x, y, w, bias, N, C, eps);
        return;
    }
    b->ops->add(b, res, x, y, (size_t)N * C);
    b->ops->layernorm_forward(b, out, mean, rstd, res, w, bias, N, C, eps);
}

void backend_matmul_gelu_forward(Backend *b, act_t *out_gelu, act_t *pre, const act_t *inp, const act_t *w,
                                 const act_t *bias, int N, int C, int OC) {
    if (b->ops->matmul_gelu_forward) {
        b->ops->matmul_gelu_forward(b, out_gelu, pre, inp, w, bias, N, C, OC);
        return;
    }
    b->ops->matmul_forward(b, pre, inp, w, bias, N, C, OC, OC);
    b->ops->gelu_forward(b, out_gelu, pre, (size_t)N * OC);
}

void backend_residual_rmsnorm_forward(Backend *b, act_t *res, act_t *out, float *rstd, const act_t *x, const act_t *y,
                                      const act_t *w, int N, int C, float eps) {
    if (b->ops->residual_rmsnorm_forward) {
        b->ops->residual_rmsnorm_forward(b, res, out, rstd, x, y, w, N, C, eps);
        return;
    }
    b->ops->add(b, res, x, y, (size_t)N * C);
    b->ops->rmsnorm_forward(b, out, rstd, res, w, N, C, eps);
}
