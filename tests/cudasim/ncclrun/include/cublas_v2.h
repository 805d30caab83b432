/* cublas_v2.h - a test-only stand-in (tests/cudasim/ncclrun): the cuBLAS names cuda_common.cuh uses. */
#pragma once
typedef struct cublasContext *cublasHandle_t;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };
const char *cublasGetStatusString(cublasStatus_t s);
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
