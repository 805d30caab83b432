/* test_mma_ptx.c - the warp-level primitives of cuda/mma_ptx.cuh (mma.sync m16n8k16 bf16,
 * ldmatrix, ldmatrix.trans) against a naive double-precision matmul: on the CUDA simulator this
 * checks its emulation of the PTX fragment layouts, on a GPU the layouts the attention kernels
 * assume. Builds without CUDA compile this file to nothing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "backend.h"
#include "common.h"
#include "cuda_module.h"

#ifdef GT_HAVE_CUDA

Test(mma_ptx, fragments_match_naive_matmul) {
    if (backend_gpu_count() <= 0) cr_skip_test("no GPU visible");
    const GtCudaModule *mod;
    GtError err = {0};
    cr_assert_eq(cuda_module_load(&mod, NULL, 0, &err), 0, "%s", err.msg);
    uint16_t a[256], b[256];
    uint64_t s = 12345;
    for (int i = 0; i < 256; i++) { /* distinct values, so a misplaced element shows */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = gt_f32_to_bf16((float)((int)(s >> 40 & 1023) - 512) / 128.0f);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = gt_f32_to_bf16((float)((int)(s >> 40 & 1023) - 512) / 256.0f);
    }
    float d[3][256];
    for (int mode = 0; mode < 3; mode++) cr_assert_eq(mod->mma_selftest(mode, a, b, d[mode]), 0, "mode %d", mode);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < 16; k++) {
                double p = (double)gt_bf16_to_f32(a[m * 16 + k]) * gt_bf16_to_f32(b[k * 16 + n]);
                ref += p;
                mag += fabs(p);
            }
            for (int mode = 0; mode < 3; mode++)
                cr_expect_leq(fabs(d[mode][m * 16 + n] - ref), 16 * 6e-8 * mag + 1e-30,
                              "mode %d: D[%d][%d] = %.9g, naive %.9g", mode, m, n, d[mode][m * 16 + n], ref);
        }
}
#endif
