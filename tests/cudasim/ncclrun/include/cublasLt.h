/* cublasLt.h - a test-only stand-in (tests/cudasim/ncclrun): the cuBLASLt types cuda_common.cuh names. */
#pragma once
#include <cstdint>
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
