/* gtcsim.h - the CUDA simulator's internal interface between its parts: the runtime and kernel
 * executor (runtime.cpp), the cuBLAS/cuBLASLt model (cublas.cpp, cublaslt.cpp) and the NCCL model
 * (nccl.cpp).
 * The simulator lets the unchanged sources in cuda/, compiled by the host C++ compiler against
 * the headers in cuda/sim/include/, run on the CPU (make test-cudasim). It is strict rather than
 * fast: device memory is a separate poisoned arena, work runs in stream order, and every API
 * argument is checked as the documentation states; a violation aborts naming the call. */
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

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

/* A device (or pinned host) range that queued work reads or writes. */
struct Range {
    const void *p;
    size_t bytes;
    bool write;
};
/* enqueue, for work whose ranges are known when it is queued (a copy, a collective): they are
 * declared now, so the cross-stream race check sees them even against a kernel of another
 * stream that runs before this work does (runtime.cpp) */
void enqueue_ranges(cudaStream_t s, const char *what, std::vector<Range> ranges, std::function<void()> work);

/* Inside queued work: declare a device range read or written (for the cross-stream race check). */
void note_access(const void *p, size_t bytes, bool write);

/* ---- the work counters of the GPU cost model (cost.cpp; off unless GTCSIM_COST is set) */
bool cost_on();
bool cost_fast_blas(); /* GTCSIM_COST_FAST_BLAS=1: the cuBLAS model skips the arithmetic */
/* the runtime around each queued item it runs: its stream, number on that stream, description */
void cost_item_begin(int stream, uint64_t idx, const char *what);
void cost_item_end();
/* the kernel executor around a launch: count the device pages the launch touches */
void cost_kernel_begin(const char *name);
void cost_kernel_end();
/* the SIGSEGV handler: a fault at addr inside the device arena; true when it was a counted first
 * touch (the page is opened, the handler returns and the access repeats) */
bool cost_page_fault(void *addr, bool write);
/* one lane's share of a warp-level m x n x k tensor-core MMA (each of the 32 lanes calls it) */
void cost_mma(unsigned m, unsigned n, unsigned k);
/* a cuBLAS/cuBLASLt call: its name (with its shape), 2 m n k (on tensor cores or not) and the
 * bytes of its operands read and written */
void cost_blas(const char *name, double flops, bool tensor, double rd, double wr);
/* bytes a copy, memset or library call declares (note_access) */
void cost_access(size_t bytes, bool write);
/* cudaEventElapsedTime(a, b): the window whose items the counters report at exit */
void cost_window(int a_stream, uint64_t a_seq, int b_stream, uint64_t b_seq);
/* the runtime: protect every device page handed out (true) or open them again (false) */
void arena_protect(bool none);

} // namespace gtcsim
