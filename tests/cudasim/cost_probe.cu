/* cost_probe.cu - kernels and a cuBLAS call of known work, run on the CUDA simulator with
 * GTCSIM_COST set (make test-gpu-model, scripts/test-gpu-model.sh checks the counts it writes):
 *   copy_kernel      copies N bytes (N a multiple of 4 KiB, page aligned): reads N, writes N;
 *   mma_kernel       one warp, KT mma.sync m16n8k16 bf16: 2 * 16 * 8 * 16 * KT tensor FLOPs, reads
 *                    A (16 x 16 KT bf16) and B (16 KT x 8), 1 page each, and writes one 16x8 fp32
 *                    tile (1 page);
 *   cublasGemmEx     bf16 m x n x k: 2 m n k tensor FLOPs, reads A and B, writes D.
 * Usage: cost_probe N KT M NN K (sizes the script also uses to compute what it expects). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../../cuda/mma_ptx.cuh"
#include <stdio.h>
#include <stdlib.h>

/* cuda/cuda_common.cuh's launch, without its dependencies */
#ifdef GTCSIM_DEVICE_H
#define LAUNCH(kernel, grid, block, ...) gtcsim::launch_kernel(kernel, #kernel, (grid), (block), 0, nullptr, __VA_ARGS__)
#else
#define LAUNCH(kernel, grid, block, ...) kernel<<<(grid), (block)>>>(__VA_ARGS__)
#endif

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "cost_probe: %s: %s\n", #x, cudaGetErrorString(e_));          \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ void copy_kernel(const unsigned *src, unsigned *dst, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

/* one warp, KT mma.sync m16n8k16: each lane takes its A (4 words) and B (2 words) fragment registers
 * straight from global memory, tile t after tile t-1; A and B are all ones, so D = 16 KT everywhere */
__global__ void mma_kernel(const uint32_t *a, const uint32_t *b, float *c, int kt) {
    float d[4] = {0, 0, 0, 0};
    const int lane = threadIdx.x;
    for (int t = 0; t < kt; t++) {
        const uint32_t fa[4] = {a[t * 128 + lane * 4], a[t * 128 + lane * 4 + 1], a[t * 128 + lane * 4 + 2],
                                a[t * 128 + lane * 4 + 3]};
        gtc_mma_bf16_16816(d, fa, b[t * 64 + lane * 2], b[t * 64 + lane * 2 + 1]);
    }
    for (int i = 0; i < 4; i++) c[lane * 4 + i] = d[i];
}

__global__ void fill_kernel(unsigned short *p, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 0x3f80; /* bf16 1.0 */
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: cost_probe N KT M NN K\n");
        return 2;
    }
    size_t n = strtoull(argv[1], 0, 10);
    int kt = atoi(argv[2]), m = atoi(argv[3]), nn = atoi(argv[4]), k = atoi(argv[5]);
    unsigned *src, *dst;
    CK(cudaMalloc((void **)&src, n));
    CK(cudaMalloc((void **)&dst, n));
    CK(cudaMemset(src, 0, n));
    LAUNCH(copy_kernel, dim3((unsigned)((n / 4 + 255) / 256)), dim3(256), src, dst, n / 4);
    CK(cudaGetLastError());

    __nv_bfloat16 *a, *b;
    float *c;
    CK(cudaMalloc((void **)&a, (size_t)16 * 16 * kt * 2));
    CK(cudaMalloc((void **)&b, (size_t)16 * 8 * kt * 2));
    CK(cudaMalloc((void **)&c, 16 * 8 * 4));
    LAUNCH(fill_kernel, dim3((16 * 16 * kt + 255) / 256), dim3(256), (unsigned short *)a, (size_t)16 * 16 * kt);
    LAUNCH(fill_kernel, dim3((16 * 8 * kt + 255) / 256), dim3(256), (unsigned short *)b, (size_t)16 * 8 * kt);
    LAUNCH(mma_kernel, dim3(1), dim3(32), (const uint32_t *)a, (const uint32_t *)b, c, kt);
    CK(cudaGetLastError());

    __nv_bfloat16 *ga, *gb, *gd;
    CK(cudaMalloc((void **)&ga, (size_t)m * k * 2));
    CK(cudaMalloc((void **)&gb, (size_t)k * nn * 2));
    CK(cudaMalloc((void **)&gd, (size_t)m * nn * 2));
    CK(cudaMemset(ga, 0, (size_t)m * k * 2));
    CK(cudaMemset(gb, 0, (size_t)k * nn * 2));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    float alpha = 1, beta = 0;
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, nn, k, &alpha, ga, CUDA_R_16BF, m, gb, CUDA_R_16BF, k, &beta, gd,
                     CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return 1;
    CK(cudaDeviceSynchronize());
    float host[128];
    CK(cudaMemcpy(host, c, sizeof host, cudaMemcpyDeviceToHost));
    if (host[0] != 16.0f * kt) {
        fprintf(stderr, "cost_probe: mma result %g, expected %d\n", host[0], 16 * kt);
        return 1;
    }
    cublasDestroy(h);
    printf("cost_probe: ran\n");
    return 0;
}
