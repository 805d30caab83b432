/* mma.h - the CUDA simulator's wmma (make test-cudasim; it replaced the tests/tcsim mock): the
 * bf16 16x16x16 fragments cuda/kernels_attention_tc.cu uses, with an opaque accumulator layout
 * (lane l owns the elements e with e % 32 == l; the others read NaN), so code that looks inside
 * a fragment or lets one lane stand for the warp computes garbage. Every call checks alignment
 * (32 bytes), the leading dimension and that the 16 rows lie in shared memory, and counts itself
 * per lane: __syncwarp fails when the lanes of a warp made different numbers of wmma calls. This
 * proves the kernels' logic (indexing, masking, barriers), not the hardware's wmma. */
#ifndef GTCSIM_MMA_H
#define GTCSIM_MMA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the simulator's wmma has 16x16x16 fragments only");
    float v[256];
};

static inline void gtcsim_wmma_check(const void *p, unsigned ld, unsigned mult, size_t elem,
                                     const char *what) {
    if (((uintptr_t)p & 31u) != 0) gtcsim::fail("%s: pointer %p not 32-byte aligned", what, p);
    if (ld % mult) gtcsim::fail("%s: leading dimension %u not a multiple of %u", what, ld, mult);
    if (!gtcsim::in_shared(p, ((size_t)15 * ld + 16) * elem))
        gtcsim::fail("%s: 16 rows of ld %u at %p are not inside shared memory", what, ld, p);
}
/* A: a[m][k] */
template <class L>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, L> &f,
                             const __nv_bfloat16 *p, unsigned ld) {
    gtcsim::wmma_count();
    gtcsim_wmma_check(p, ld, 8, 2, "wmma::load_matrix_sync(matrix_a)");
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++)
            f.v[m * 16 + k] =
                __bfloat162float(std::is_same<L, row_major>::value ? p[m * ld + k] : p[k * ld + m]);
}
/* B: b[k][n] */
template <class L>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, L> &f,
                             const __nv_bfloat16 *p, unsigned ld) {
    gtcsim::wmma_count();
    gtcsim_wmma_check(p, ld, 8, 2, "wmma::load_matrix_sync(matrix_b)");
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++)
            f.v[k * 16 + n] =
                __bfloat162float(std::is_same<L, row_major>::value ? p[k * ld + n] : p[n * ld + k]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ld, layout_t lay) {
    gtcsim::wmma_count();
    gtcsim_wmma_check(p, ld, 4, 4, "wmma::load_matrix_sync(accumulator)");
    if (lay != mem_row_major) gtcsim::fail("wmma::load_matrix_sync: only mem_row_major is simulated");
    int lane = gtcsim::lane_id();
    for (int e = 0; e < 256; e++) f.v[e] = (e % 32 == lane) ? p[(e / 16) * ld + e % 16] : NAN;
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ld, layout_t lay) {
    gtcsim::wmma_count();
    gtcsim_wmma_check(p, ld, 4, 4, "wmma::store_matrix_sync");
    if (lay != mem_row_major) gtcsim::fail("wmma::store_matrix_sync: only mem_row_major is simulated");
    int lane = gtcsim::lane_id();
    for (int e = lane; e < 256; e += 32) p[(e / 16) * ld + e % 16] = f.v[e];
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float x) {
    gtcsim::wmma_count();
    for (int e = 0; e < 256; e++) f.v[e] = x;
}
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    gtcsim::wmma_count();
    gtcsim::cost_mma(16, 16, 16);
    float r[256];
    int lane = gtcsim::lane_id();
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            if ((m * 16 + n) % 32 != lane) {
                r[m * 16 + n] = NAN;
                continue;
            }
            float s = c.v[m * 16 + n];
            for (int k = 0; k < 16; k++) s += a.v[m * 16 + k] * b.v[k * 16 + n];
            r[m * 16 + n] = s;
        }
    memcpy(d.v, r, sizeof r);
}
} // namespace wmma
} // namespace nvcuda

#endif
