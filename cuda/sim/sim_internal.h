/* sim_internal.h - what the CUDA simulator's runtime (runtime.cpp) and kernel executor
 * (kernel.cpp) share beyond gtcsim.h; not for the cuBLAS/NCCL models. */
#pragma once
#include <cstddef>
#include <functional>

#include "include/cuda_runtime.h"

namespace gtcsim {

/* H100/H200-like limits the launches and attributes are checked against */
constexpr size_t kSmemDefaultPerBlock = 48 << 10; /* without cudaFuncSetAttribute */
constexpr size_t kSmemOptinPerBlock = 227 << 10;  /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
constexpr size_t kSmemPerSM = 228 << 10;
constexpr int kMaxThreadsPerBlock = 1024;

/* the runtime's record of the last error (cudaGetLastError) */
void set_last_error(cudaError_t e);
/* the dynamic shared-memory limit of a kernel (cudaFuncSetAttribute, 48 KiB by default) */
size_t func_smem_limit(const void *fn);
/* run every block of a launch now (called from queued work, device memory accessible) */
void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
/* once per process, at its first kernel: the test it runs for, appended to GTCSIM_USAGE_LOG */
void note_first_kernel();
/* the kernel running now, or nullptr (for fault messages) */
const char *current_kernel();
/* is p inside the simulator's dynamic shared memory or a fiber stack guard (fault messages) */
const char *describe_sim_address(const void *p);

} // namespace gtcsim
