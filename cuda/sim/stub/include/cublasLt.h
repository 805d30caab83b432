/* cublasLt.h - TEMPORARY stub for the CUDA simulator (make test-cudasim) until the cuBLASLt model
 * (another developer's) lands: the names backend_cuda.cu uses; the heuristic finds no algorithm,
 * so the backend takes its cuBLAS fallback. Removed from the build once cuda/sim/cublas.cpp exists. */
#ifndef GTCSIM_STUB_CUBLASLT_H
#define GTCSIM_STUB_CUBLASLT_H
#include <stdint.h>
#include "cublas_v2.h"

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 10,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 11,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;
typedef enum { CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2 } cublasLtReductionScheme_t;

extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t n);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t n);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int n,
                                              cublasLtMatmulHeuristicResult_t *r, int *found);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsbytes, cudaStream_t s);
}
#endif
