/* device_probe.cu - how many GPUs the CUDA runtime sees, and why none. Built twice: into the CUDA
 * backend module (cuda_backend_create asks it) and alone, with cudart only, into the probe module
 * (libgtrain-cuda-probe.so) that gtrain loads to answer device: auto and --version: loading cuBLAS
 * and cuBLASLt costs ~0.5 s and ~200 MB resident, which a run on the CPU must not pay. */
#include <cuda_runtime.h>

#include <stdio.h>

extern "C" {
#include "cuda_module.h"
}

/* cudaGetDeviceCount initialises the driver but creates no context. A driver older than the CUDA
 * runtime this was built with (cudaErrorInsufficientDriver, also what no driver at all reads as)
 * says so, not just "no GPU". */
extern "C" int cuda_device_count(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        (void)cudaGetLastError(); /* no driver / no device: not an error here */
        if (why && cap)
            snprintf(why, cap, "%s (no GPU, no driver, or a driver older than CUDA %d.%d, which this build needs)",
                     e != cudaSuccess ? cudaGetErrorString(e) : "no GPU visible", CUDART_VERSION / 1000,
                     (CUDART_VERSION % 1000) / 10);
        return 0;
    }
    return n;
}

/* the probe module's one exported symbol (GT_CUDA_PROBE_ENTRY) */
extern "C" __attribute__((visibility("default"))) int gtrain_cuda_probe(char *why, size_t cap) {
    return cuda_device_count(why, cap);
}
