/* cuda_bf16.h - a test-only stand-in (tests/cudasim/ncclrun): the bf16 type cuda_common.cuh names. */
#pragma once
#include <cstring>
struct __nv_bfloat16 {
    unsigned short x;
};
inline float __bfloat162float(__nv_bfloat16 b) {
    unsigned u = (unsigned)b.x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
__nv_bfloat16 __float2bfloat16_rn(float f); /* never called here */
