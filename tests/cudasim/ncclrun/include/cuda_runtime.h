/* cuda_runtime.h - a test-only stand-in (tests/cudasim/ncclrun): just the CUDA runtime calls that
 * cuda/dist_nccl.cu and cuda/cuda_common.cuh need, so that make test-cudasim-nccl can run the
 * real dist_nccl.cu through cuda/sim/nccl.cpp before the simulator's runtime exists. Streams,
 * events and device memory are modelled in tests/cudasim/nccl_run.cpp. Not the simulator's header. */
#pragma once
#include <cmath>
#include <cstddef>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline

/* cuda_common.cuh's 16-byte packed loads name it */
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600,
                   cudaErrorInvalidResourceHandle = 400 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaFuncSetAttribute(const void *fn, cudaFuncAttribute attr, int value);
template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; } /* never called here */
