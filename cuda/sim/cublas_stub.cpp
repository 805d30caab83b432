/* cublas_stub.cpp - TEMPORARY: the few cuBLAS/cuBLASLt entry points the backend links against,
 * for the CUDA simulator until the real model (cuda/sim/cublas.cpp, another developer's) lands;
 * mk/cudasim.mk leaves this file (and cuda/sim/stub/include/) out once cuda/sim/cublas.cpp
 * exists. cuBLASLt finds no algorithm (so the backend takes its cuBLAS fallback); cublasSgemm
 * and cublasGemmEx (fp32 / bf16 inputs, fp32 compute) are naive double loops queued on the
 * handle's stream, with only basic argument checks. */
#include <stdlib.h>
#include <string.h>

#include "gtcsim.h"
#include "include/cuda_bf16.h"
#include "stub/include/cublasLt.h"

struct cublasContext {
    cudaStream_t stream;
};

namespace {
double ld_elem(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_16BF) return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return (double)((const float *)p)[i];
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb, float beta,
                    void *C, cudaDataType_t ct, int ldc) {
    if (!h || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 || ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m ||
        ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    size_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    size_t ae = at == CUDA_R_16BF ? 2 : 4, be = bt == CUDA_R_16BF ? 2 : 4, ce = ct == CUDA_R_16BF ? 2 : 4;
    if (m && n && k) {
        if (!gtcsim::is_device_range(A, ((ac - 1) * lda + ar) * ae)) gtcsim::fail("cublas stub: A not device memory");
        if (!gtcsim::is_device_range(B, ((bc - 1) * ldb + br) * be)) gtcsim::fail("cublas stub: B not device memory");
    }
    if (m && n && !gtcsim::is_device_range(C, ((size_t)(n - 1) * ldc + m) * ce))
        gtcsim::fail("cublas stub: C not device memory");
    gtcsim::enqueue(h->stream, "cublas stub gemm", [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0.0;
                for (int l = 0; l < k; l++) {
                    double a = ld_elem(A, at, ta == CUBLAS_OP_N ? (size_t)l * lda + i : (size_t)i * lda + l);
                    double b = ld_elem(B, bt, tb == CUBLAS_OP_N ? (size_t)j * ldb + l : (size_t)l * ldb + j);
                    s += a * b;
                }
                size_t o = (size_t)j * ldc + i;
                float r = (float)(alpha * s + (beta != 0.0f ? beta * ld_elem(C, ct, o) : 0.0));
                if (ct == CUDA_R_16BF)
                    ((__nv_bfloat16 *)C)[o] = __float2bfloat16_rn(r);
                else
                    ((float *)C)[o] = r;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}
} // namespace

extern "C" {
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(stub: other)";
    }
}
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new cublasContext{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return gemm(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *beta, C, CUDA_R_32F, ldc);
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (compute != CUBLAS_COMPUTE_32F || at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb, *(const float *)beta, C, ct, ldc);
}

struct cublasLtContext {
    int x;
};
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cublasLtContext{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
/* descriptors are dummies: non-null pointers that are never dereferenced */
static char g_dummy[3];
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t) {
    *d = (cublasLtMatmulDesc_t)(void *)&g_dummy[0];
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *,
                                              size_t) {
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t, uint64_t, uint64_t, int64_t) {
    *l = (cublasLtMatrixLayout_t)(void *)&g_dummy[1];
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t)(void *)&g_dummy[2];
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *,
                                              int *found) {
    *found = 0; /* the stub has no cuBLASLt: the backend's cuBLAS fallback runs */
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                              cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *, const void *,
                              cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *,
                              void *, size_t, cudaStream_t) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
}
