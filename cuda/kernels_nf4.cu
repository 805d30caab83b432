/* kernels_nf4.cu - the CUDA backend's dequant_nf4 (backend.h): a 4-bit base weight's unit (nf4.h's
 * layout: packed codes, absmax, and with double quantization the nested absmax and offset) into
 * fp32 or bf16, one thread per packed byte (its two elements share a block: blocksize is even).
 *
 * Bit-identical to nf4.h's host nf4_dequantize_f32 / _bf16: the absmax is
 * NF4_DYNAMIC_CODE[q] * nested_absmax, then + offset (nested), the value NF4_CODE[code] * absmax,
 * each step one fp32 operation rounded to nearest (__fmul_rn / __fadd_rn: no FMA contraction),
 * bf16 by store_from_f32's round to nearest even, as gt_f32_to_bf16. The two tables are nf4.c's
 * (the one home of the numbers), passed by value with each launch. */
#include "cuda_common.cuh"

#include <string.h>

struct Nf4Tables {
    float code[16];
    float dyn[256];
};

template <typename Out>
__global__ void dequant_nf4_kernel(Out *dst, const uint8_t *unit, int64_t numel, int blocksize, int nested,
                                   size_t absmax_off, size_t nested_off, size_t offset_off, Nf4Tables t) {
    const int64_t nbytes = (numel + 1) / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nbytes;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = 2 * i, blk = e / blocksize;
        float a;
        if (nested) {
            const float scale = ((const float *)(unit + nested_off))[blk / NF4_NESTED_BLOCK];
            const float off = *(const float *)(unit + offset_off);
            a = __fadd_rn(__fmul_rn(t.dyn[unit[absmax_off + blk]], scale), off);
        } else {
            a = ((const float *)(unit + absmax_off))[blk];
        }
        const uint8_t byte = unit[i];
        store_from_f32(dst, (size_t)e, __fmul_rn(t.code[byte >> 4], a));
        if (e + 1 < numel) store_from_f32(dst, (size_t)e + 1, __fmul_rn(t.code[byte & 15], a));
    }
}

void gtc_dequant_nf4(Backend *b, void *dst, GtDtype dst_dtype, const void *unit, const Nf4Format *f) {
    if (f->numel <= 0) return;
    Nf4Layout l;
    nf4_layout(f, &l);
    Nf4Tables t;
    memcpy(t.code, NF4_CODE, sizeof t.code);
    memcpy(t.dyn, NF4_DYNAMIC_CODE, sizeof t.dyn);
    const size_t nbytes = (size_t)(f->numel + 1) / 2;
    const unsigned blocks = gtc_blocks(nbytes, GTC_THREADS);
    const uint8_t *u = (const uint8_t *)unit;
    if (dst_dtype == GT_BF16)
        GTC_LAUNCH(dequant_nf4_kernel<gtc_bf16>, blocks, GTC_THREADS, 0, gtc_stream(b), (gtc_bf16 *)dst, u, f->numel,
                   f->blocksize, f->nested ? 1 : 0, l.absmax, l.nested_absmax, l.offset, t);
    else
        GTC_LAUNCH(dequant_nf4_kernel<float>, blocks, GTC_THREADS, 0, gtc_stream(b), (float *)dst, u, f->numel,
                   f->blocksize, f->nested ? 1 : 0, l.absmax, l.nested_absmax, l.offset, t);
    CUDA_CHECK_LAUNCH();
}
