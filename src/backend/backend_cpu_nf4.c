/* backend_cpu_nf4.c - the CPU backend's dequant_nf4 (backend.h): a 4-bit base weight's unit
 * (nf4.h) into fp32 or bf16, through nf4.h's own nf4_dequantize_f32 / _bf16 (the one definition of
 * the values), split over OpenMP threads by whole absmax blocks. Each element is computed by one
 * thread from its byte and its block's absmax alone, so the result does not depend on the thread
 * count. */
#include "backend_cpu_internal.h"

void cpu_dequant_nf4(Backend *b, void *dst, GtDtype dst_dtype, const void *unit, const Nf4Format *f) {
    const int64_t bs = f->blocksize, nblocks = (f->numel + bs - 1) / bs;
    /* blocks per task: about 64 Ki elements, so a small unit runs on one thread */
    const int64_t per = (65536 + bs - 1) / bs, ntasks = (nblocks + per - 1) / per;
#pragma omp parallel for schedule(static) num_threads(nthr(b)) if (ntasks > 1)
    for (int64_t k = 0; k < ntasks; k++) {
        const int64_t e0 = k * per * bs, e1 = e0 + per * bs < f->numel ? e0 + per * bs : f->numel;
        if (dst_dtype == GT_BF16)
            nf4_dequantize_bf16(f, unit, e0, e1 - e0, (uint16_t *)dst + e0);
        else
            nf4_dequantize_f32(f, unit, e0, e1 - e0, (float *)dst + e0);
    }
}
