/* gtcsim.h - the CUDA simulator's internal interface between its parts: the runtime and kernel
 * executor (runtime.cpp), the cuBLAS/cuBLASLt model (cublas.cpp, cublaslt.cpp) and the NCCL model
 * (nccl.cpp).
 * The simulator lets the unchanged sources in cuda/, compiled by the host C++ compiler against
 * the headers in cuda/sim/include/, run on the CPU (make test-cudasim). It is strict rather than
 * fast: device memory is a separate poisoned arena, work runs in stream order, and every API
 * argument is checked as the documentation states; a violation aborts naming the call. */
#pragma once
#include <cstddef>
#include <functional>

typedef struct CUstream_st *cudaStream_t; /* as CUDA's driver_types.h declares it */

namespace gtcsim {

/* Abort the process with "gtcsim: <message>" on stderr (printf-style). */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Is [p, p + bytes) inside one live device allocation (cudaMalloc)? */
bool is_device_range(const void *p, size_t bytes);
/* Is [p, p + bytes) inside one live pinned host allocation (cudaHostAlloc)? */
bool is_pinned_range(const void *p, size_t bytes);

/* Queue work on stream s (nullptr: the legacy default stream). It runs in stream order, after
 * everything queued on s before it and after the events s waits on; `what` names it in
 * messages. A library call (cublasLtMatmul, ncclAllReduce) queues its computation this way. */
void enqueue(cudaStream_t s, const char *what, std::function<void()> work);

/* Inside queued work: declare a device range read or written (for the cross-stream race check). */
void note_access(const void *p, size_t bytes, bool write);

} // namespace gtcsim
