/* cuda_profiler_api.h - the simulator's profiler range calls. No profiler is attached, so, as on a
 * GPU without one, cudaProfilerStart and cudaProfilerStop do nothing and succeed; with
 * GTCSIM_PROFILER_LOG set each call also prints one line to stderr, so a test can see where a
 * program opens and closes its range (GTRAIN_PROFILE_STEP, tests/test_host_waits.c). */
#pragma once
#include <stdio.h>
#include <stdlib.h>

#include "cuda_runtime.h"

static inline cudaError_t cudaProfilerStart(void) {
    if (getenv("GTCSIM_PROFILER_LOG")) fprintf(stderr, "gtcsim: cudaProfilerStart\n");
    return cudaSuccess;
}
static inline cudaError_t cudaProfilerStop(void) {
    if (getenv("GTCSIM_PROFILER_LOG")) fprintf(stderr, "gtcsim: cudaProfilerStop\n");
    return cudaSuccess;
}
