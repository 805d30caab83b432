/* mma_selftest.cu - one warp runs the primitives of mma_ptx.cuh on a 16x16 A and a 16x16 B (two
 * n8 tiles) so tests/test_mma_ptx.c can compare them with a naive matmul: on a GPU it checks the
 * fragment layouts the attention kernels assume against the hardware, on the simulator it checks
 * the emulation. Fragments come from global memory by the documented per-lane layouts (mode 0),
 * from shared memory by ldmatrix (A) and ldmatrix.trans (B stored [k][n], mode 1), or by ldmatrix
 * of B stored transposed ([n][k], mode 2). Not used by the trainer. */
#include "cuda_common.cuh"
#include "mma_ptx.cuh"

#include <stdint.h>

__global__ void mma_selftest_kernel(float *__restrict__ d, const __nv_bfloat16 *__restrict__ a,
                                    const __nv_bfloat16 *__restrict__ b, int mode) {
    __shared__ __align__(16) __nv_bfloat16 as[256], bs[256], bts[256];
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3, i = lane >> 3;
    for (int e = lane; e < 256; e += 32) {
        as[e] = a[e];
        bs[e] = b[e];
        bts[(e & 15) * 16 + (e >> 4)] = b[e]; /* bts[n][k] = b[k][n] */
    }
    __syncwarp();
    auto bits = [](__nv_bfloat16 x) { return (uint32_t)__bfloat16_as_ushort(x); };
    auto pair = [&](const __nv_bfloat16 *m, int r0, int c0, int r1, int c1) {
        return bits(m[r0 * 16 + c0]) | (bits(m[r1 * 16 + c1]) << 16);
    };
    uint32_t af[4], bf[4];
    if (mode == 0) {
        af[0] = pair(a, g, 2 * t, g, 2 * t + 1);
        af[1] = pair(a, g + 8, 2 * t, g + 8, 2 * t + 1);
        af[2] = pair(a, g, 2 * t + 8, g, 2 * t + 9);
        af[3] = pair(a, g + 8, 2 * t + 8, g + 8, 2 * t + 9);
        for (int nt = 0; nt < 2; nt++) {
            bf[2 * nt] = pair(b, 2 * t, nt * 8 + g, 2 * t + 1, nt * 8 + g);
            bf[2 * nt + 1] = pair(b, 2 * t + 8, nt * 8 + g, 2 * t + 9, nt * 8 + g);
        }
    } else {
        gtc_ldmatrix_x4(af, as + ((i & 1) * 8 + (lane & 7)) * 16 + (i >> 1) * 8);
        if (mode == 1)
            gtc_ldmatrix_x4_t(bf, bs + ((i & 1) * 8 + (lane & 7)) * 16 + (i >> 1) * 8);
        else
            gtc_ldmatrix_x4(bf, bts + ((i >> 1) * 8 + (lane & 7)) * 16 + (i & 1) * 8);
    }
    for (int nt = 0; nt < 2; nt++) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        gtc_mma_bf16_16816(c, af, bf[2 * nt], bf[2 * nt + 1]);
        d[g * 16 + nt * 8 + 2 * t] = c[0];
        d[g * 16 + nt * 8 + 2 * t + 1] = c[1];
        d[(g + 8) * 16 + nt * 8 + 2 * t] = c[2];
        d[(g + 8) * 16 + nt * 8 + 2 * t + 1] = c[3];
    }
}

/* d[16][16] = a[16][16] b[16][16] (bf16 bits in, fp32 out) by mode; 0, or -1 with a CUDA error on
 * stderr (a device without sm_80 fails the launch) */
extern "C" int gtc_mma_selftest(int mode, const uint16_t *a, const uint16_t *b, float *d) {
    __nv_bfloat16 *da = nullptr, *db = nullptr;
    float *dd = nullptr;
    cudaError_t e = cudaMalloc((void **)&da, 512);
    if (e == cudaSuccess) e = cudaMalloc((void **)&db, 512);
    if (e == cudaSuccess) e = cudaMalloc((void **)&dd, 1024);
    if (e == cudaSuccess) e = cudaMemcpy(da, a, 512, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(db, b, 512, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        GTC_LAUNCH(mma_selftest_kernel, 1, 32, 0, (cudaStream_t)0, dd, da, db, mode);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(d, dd, 1024, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) fprintf(stderr, "%s:%d: mma self-test: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
    cudaError_t f1 = cudaFree(da), f2 = cudaFree(db), f3 = cudaFree(dd);
    return e == cudaSuccess && f1 == cudaSuccess && f2 == cudaSuccess && f3 == cudaSuccess ? 0 : -1;
}
