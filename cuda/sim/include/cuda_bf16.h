/* cuda_bf16.h - the CUDA simulator's bf16 header (make test-cudasim): __nv_bfloat16 and the
 * conversions the cuda/ sources use, with CUDA's names; float -> bf16 rounds to nearest even, a NaN stays
 * a quiet NaN (as src/common.h's gt_f32_to_bf16, which the CPU backend uses). */
#ifndef GTCSIM_CUDA_BF16_H
#define GTCSIM_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16;
static inline __nv_bfloat16 __float2bfloat16_rn(float f);
static inline float __bfloat162float(__nv_bfloat16 h);

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    /* CUDA's conversions (cuda_bf16.hpp, both host and device) */
    __nv_bfloat16(float f);
    operator float() const;
};

static inline unsigned short gtcsim_f32_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)((u >> 16) | 0x0040u);
    return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) {
    __nv_bfloat16 h;
    h.__x = s;
    return h;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    return __ushort_as_bfloat16(gtcsim_f32_to_bf16_bits(f));
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16::__nv_bfloat16(float f) : __x(gtcsim_f32_to_bf16_bits(f)) {}
inline __nv_bfloat16::operator float() const { return __bfloat162float(*this); }

#endif
