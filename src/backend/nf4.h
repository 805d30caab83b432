/* nf4.h - bitsandbytes' 4-bit NormalFloat (NF4) format (QLoRA, Dettmers et al. 2023): the one home
 * of its numbers, its byte layout and its host quantize/dequantize. A frozen base weight stored 4-bit
 * is one "unit" per Hugging Face tensor (a fused gtrain tensor holds one unit per HF block), laid out
 * so that a bitsandbytes checkpoint's tensors copy in as they are:
 *
 *   packed   uint8 [ceil(numel / 2)]     two codes a byte, element 2i in the high nibble (bnb's
 *                                        `weight`, shape [ceil(numel/2), 1] in its files)
 *   absmax   nested: uint8 [nblocks]     codes of NF4_DYNAMIC_CODE (bnb's `absmax` with
 *                                        compress_statistics / bnb_4bit_use_double_quant)
 *            else:   fp32  [nblocks]     each block's absmax itself
 *   nested:  fp32 [nnested] nested_absmax, then fp32 offset (quant_state's "nested_offset")
 *
 * each part starting at a multiple of 16 bytes from the unit's start (nf4_layout), nblocks =
 * ceil(numel / blocksize), nnested = ceil(nblocks / 256). Element e is
 *   NF4_CODE[code(e)] * absmax(e / blocksize)                      (fp32, then rounded to the dtype)
 *   absmax(i) = NF4_DYNAMIC_CODE[q(i)] * nested_absmax[i / 256] + offset   (nested; fp32 each step)
 * exactly as bitsandbytes' dequantize_4bit computes it on the CPU. C and CUDA C++ both include this. */
#ifndef GT_NF4_H
#define GT_NF4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NF4_NESTED_BLOCK 256 /* absmax values per nested fp32 scale (bnb's fixed nested blocksize) */
#define NF4_ALIGN 16         /* each part of a unit starts at a multiple of this from the unit */

/* bitsandbytes' NF4 values (get_4bit_type("nf4")), index = the 4-bit code, ascending */
extern const float NF4_CODE[16];
/* bitsandbytes' create_dynamic_map(signed=True): the 8-bit code of nested absmax values, ascending
 * (bnb files store it as `nested_quant_map`) */
extern const float NF4_DYNAMIC_CODE[256];

typedef struct {
    int64_t numel; /* elements of the quantized tensor (one HF tensor), >= 1 */
    int blocksize; /* elements per absmax: 64 (bnb's default); a power of two in [32, 4096] */
    bool nested;   /* double quantization (bnb_4bit_use_double_quant) */
} Nf4Format;

typedef struct {
    int64_t nblocks, nnested;  /* absmax values; nested scales (0 unless nested) */
    size_t packed, absmax;     /* byte offsets from the unit's start (packed is 0) */
    size_t nested_absmax, offset; /* nested only (else 0) */
    size_t bytes;              /* the whole unit, a multiple of NF4_ALIGN */
} Nf4Layout;

/* "" when f is a format this module handles, else what is wrong ("blocksize 48: expected a power
 * of two in [32, 4096]") in why[cap]; returns 0 or -1 */
int nf4_format_check(const Nf4Format *f, char *why, size_t cap);
void nf4_layout(const Nf4Format *f, Nf4Layout *l);

/* Quantize f->numel fp32 values into unit (nf4_layout(f).bytes, every byte written) as
 * bitsandbytes' quantize_4bit(A, blocksize, quant_type="nf4", compress_statistics=nested) does on
 * the CPU: absmax = max |x| over the block; x * (1 / absmax) clamped to [-1, 1]; the code the
 * nearest NF4 value (a tie to the lower); nested: offset = the mean of the absmax values, and
 * absmax - offset quantized to 8 bits in blocks of 256 as bnb's CPU quantize_blockwise does
 * (x / blockmax, the nearest dynamic code, a tie to the lower). Two differences, both in the
 * nested state: the offset is the correctly rounded mean (a double sum), where torch's float mean
 * can differ in its last bit; and the code is always the nearest, where bnb's native search
 * (BinSearch's float buckets) returns the other neighbour for a few values near a midpoint
 * (tests/test_nf4.c measures both). The 4-bit codes and every dequantized value are bnb's. */
void nf4_quantize(const Nf4Format *f, const float *src, void *unit);
/* The same with a given offset (nested only): for the check against bnb with its own offset. */
void nf4_quantize_with_offset(const Nf4Format *f, const float *src, float offset, void *unit);

/* absmax of block i (fp32; nested: dequantized as above) */
float nf4_absmax(const Nf4Format *f, const void *unit, int64_t i);
/* elements [e0, e0 + n) of unit as fp32, or as bf16 (the fp32 value rounded to nearest even) */
void nf4_dequantize_f32(const Nf4Format *f, const void *unit, int64_t e0, int64_t n, float *dst);
void nf4_dequantize_bf16(const Nf4Format *f, const void *unit, int64_t e0, int64_t n, uint16_t *dst);

static inline uint64_t nf4_bytes(const Nf4Format *f) {
    Nf4Layout l;
    nf4_layout(f, &l);
    return l.bytes;
}

#ifdef __cplusplus
}
#endif

#endif
