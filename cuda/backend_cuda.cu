/* backend_cuda.cu - the CUDA backend: device, streams, memory, offload, GEMMs, and the ops table.
 * The kernels live in kernels_misc.cu, kernels_llama.cu (RMSNorm, RoPE, SwiGLU), kernels_lora.cu
 * (axpby_rows, dropout), kernels_attention.cu and kernels_attention_tc.cu; see cuda_common.cuh for the error
 * policy (ops exit(1) with "file:line: call: error" on a CUDA/cuBLAS failure).
 *
 * Streams: every op runs on one compute stream. Offload copies run on a copy stream, ordered after
 * the compute issued so far by an event, and signal completion through the slot's event; the
 * compute stream waits on that event in offload_wait. Nothing here synchronises the whole device;
 * only the calls that hand a value to the host (to_device/to_host, sum_squares, synchronize) wait
 * for a stream.
 *
 * Precision (b->act_dtype, backend.h): with fp32 activations the GEMMs are fp32 with TF32 OFF
 * (cuBLAS pedantic math, cuBLASLt CUBLAS_COMPUTE_32F), so results compare with the CPU backend at
 * 1e-5. With bf16 activations A/B are bf16 and the GEMMs compute and accumulate in fp32
 * (CUBLAS_COMPUTE_32F, fp32 scale type): forward and dinp write bf16 (rounded once, bias included),
 * dw accumulates into the fp32 gradient (C/D fp32). matmul_gelu_forward fuses the fc GEMM with its
 * GELU through cuBLASLt's GELU_AUX_BIAS epilogue under bf16 (see there), and matmul_backward's dw GEMM
 * sums the bias gradient in its BGRADB epilogue under bf16 (gemm_dw_bgrad_epilogue). */
#include "cuda_common.cuh"

extern "C" {
#include "cuda_module.h"
}

#include <cuda_profiler_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ scratch */

void *gtc_scratch(Backend *b, size_t bytes) {
    CudaImpl *im = gtc_impl(b);
    if (bytes <= im->scratch_bytes) return im->scratch;
    size_t want = im->scratch_bytes ? im->scratch_bytes : GTC_SCRATCH_BYTES;
    while (want < bytes) want *= 2;
    /* the old buffer may still be read by queued kernels */
    CUDA_CHECK(cudaStreamSynchronize(im->compute));
    if (im->scratch) CUDA_CHECK(cudaFree(im->scratch));
    im->scratch = NULL;
    im->scratch_bytes = 0;
    CUDA_CHECK(cudaMalloc(&im->scratch, want));
    im->scratch_bytes = want;
    return im->scratch;
}

/* ------------------------------------------------------------------ memory */

static void *cu_dev_alloc(Backend *b, size_t bytes) {
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it: out of memory is reported by the caller */
        return NULL;
    }
    return p;
}

static void cu_dev_free(Backend *b, void *p) {
    (void)b;
    if (p) CUDA_CHECK(cudaFree(p));
}

static void *cu_host_alloc(Backend *b, size_t bytes) {
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_host_free(Backend *b, void *p) {
    (void)b;
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

/* synchronous copies, ordered after the compute issued so far */
static int cu_copy_sync(Backend *b, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                        const char *what, GtError *err) {
    b->host_waits++;
    if (!bytes) return 0;
    CudaImpl *im = gtc_impl(b);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, im->compute);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->compute);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gt_error(err, GT_EXIT_FAILURE, "%s:%d: %s of %zu bytes: %s", __FILE__, __LINE__,
                        what, bytes, cudaGetErrorString(e));
    }
    return 0;
}

static int cu_to_device(Backend *b, void *dev_dst, const void *host_src, size_t bytes,
                        GtError *err) {
    return cu_copy_sync(b, dev_dst, host_src, bytes, cudaMemcpyHostToDevice, "copy to device", err);
}

static int cu_to_host(Backend *b, void *host_dst, const void *dev_src, size_t bytes, GtError *err) {
    return cu_copy_sync(b, host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, "copy to host", err);
}

static void cu_dev_copy(Backend *b, void *dev_dst, const void *dev_src, size_t bytes) {
    if (!bytes || dev_dst == dev_src) return;
    CUDA_CHECK(cudaMemcpyAsync(dev_dst, dev_src, bytes, cudaMemcpyDeviceToDevice, gtc_stream(b)));
}

static void cu_zero(Backend *b, void *dev_dst, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemsetAsync(dev_dst, 0, bytes, gtc_stream(b)));
}

static void cu_synchronize(Backend *b) {
    CudaImpl *im = gtc_impl(b);
    b->host_waits++;
    b->syncs++;
    CUDA_CHECK(cudaStreamSynchronize(im->copy));
    CUDA_CHECK(cudaStreamSynchronize(im->compute));
}

/* ------------------------------------------------------------------ offload */

static void offload_copy(Backend *b, void *dst, const void *src, size_t bytes, int slot,
                         cudaMemcpyKind kind) {
    CudaImpl *im = gtc_impl(b);
    slot &= 1;
    /* the copy sees everything the compute stream has issued so far */
    CUDA_CHECK(cudaEventRecord(im->ready[slot], im->compute));
    CUDA_CHECK(cudaStreamWaitEvent(im->copy, im->ready[slot], 0));
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, im->copy));
    CUDA_CHECK(cudaEventRecord(im->done[slot], im->copy));
}

static void cu_offload_to_host(Backend *b, void *host_dst, const void *dev_src, size_t bytes,
                               int slot) {
    offload_copy(b, host_dst, dev_src, bytes, slot, cudaMemcpyDeviceToHost);
}

static void cu_offload_to_device(Backend *b, void *dev_dst, const void *host_src, size_t bytes,
                                 int slot) {
    offload_copy(b, dev_dst, host_src, bytes, slot, cudaMemcpyHostToDevice);
}

static void cu_offload_wait(Backend *b, int slot) {
    CudaImpl *im = gtc_impl(b);
    CUDA_CHECK(cudaStreamWaitEvent(im->compute, im->done[slot & 1], 0));
}

/* ------------------------------------------------------------------ GEMM
 *
 * cuBLAS is column-major; our tensors are row-major. A row-major [R, K] matrix with row stride K
 * is, byte for byte, the column-major [K, R] matrix (its transpose) with leading dimension K. So
 * every row-major product Y = X W is computed as the column-major Y^T = W^T X^T:
 *
 * forward   out[N,OC] = inp[N,C] @ w[OC,C]^T
 *           col-major: out^T[OC,N] = w[OC,C] @ inp^T[C,N]
 *           w in memory is col-major [C,OC] (ld C)  -> op T gives [OC,C]
 *           inp in memory is col-major [C,N] (ld C) -> op N
 *           m = OC, n = N, k = C, lda = C, ldb = C, ldc = OC; bias[OC] is per row m of the
 *           col-major result = per output channel: cuBLASLt's BIAS epilogue.
 * dinp      dinp[N,C] = dout[N,OC] @ w[OC,C]
 *           col-major: dinp^T[C,N] = w^T[C,OC] @ dout^T[OC,N]
 *           w in memory is col-major [C,OC] (ld C) -> op N; dout is col-major [OC,N] (ld OC) -> op N
 *           m = C, n = N, k = OC, lda = C, ldb = OC, ldc = C, beta = 0 (overwrite)
 * dw        dw[OC,C] += dout[N,OC]^T @ inp[N,C]
 *           col-major: dw^T[C,OC] += inp^T[C,N] @ dout[N,OC]
 *           inp in memory is col-major [C,N] (ld C) -> op N; dout is col-major [OC,N] (ld OC)
 *           -> op T gives [N,OC];  m = C, n = OC, k = N, lda = C, ldb = OC, ldc = C, beta = 1
 *
 * Element types: A and B are the act dtype; C/D is the act dtype for forward and dinp and fp32
 * for dw (fp32 accumulation into the fp32 gradient). The forward's bias has D's type; the bias
 * gradient that dw's GEMM writes under bf16 (gemm_dw_bgrad_epilogue) is fp32, D's type too.
 *
 * Algorithm choice (and so the bits) must not depend on which buffer a tensor happens to live in,
 * or recompute would not be bit-identical: the alignment we promise cuBLASLt is 16 bytes when all
 * pointers have it and every leading dimension is a multiple of 16 bytes (4 fp32 or 8 bf16
 * elements), and otherwise each matrix's element size (4 for fp32, 2 for bf16), never the
 * pointers' exact alignment. */

static int ptr_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
static int ld_aligned16(int ld, size_t esize) { return ((size_t)ld * esize) % 16u == 0; }
static cudaDataType_t cuda_type(GtDtype t) { return t == GT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* plain cuBLAS when cuBLASLt has no algorithm (or the bias is not 16-byte aligned).
 * fp32: cublasSgemm (pedantic fp32) and the bias added after.
 * bf16 A/B: cublasGemmEx with CUBLAS_COMPUTE_32F; a bias (only with beta = 0) is first copied
 * into every column of C, which the GEMM then adds with beta = 1, so a bf16 D is rounded once
 * (as the cuBLASLt epilogue and the CPU do). */
static void gemm_fallback(Backend *b, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, float alpha, GtDtype abt, const void *A, int lda, const void *B, int ldb,
                          GtDtype cdt, void *Cm, int ldc, const void *bias, float beta) {
    CudaImpl *im = gtc_impl(b);
    if (abt == GT_F32 && cdt == GT_F32) {
        CUBLAS_CHECK(cublasSgemm(im->cublas, ta, tb, m, n, k, &alpha, (const float *)A, lda,
                                 (const float *)B, ldb, &beta, (float *)Cm, ldc));
        if (bias) gtc_add_bias(b, GT_F32, Cm, bias, n, m, ldc); /* col-major [m, n] = row-major [n, m] */
        return;
    }
    if (bias) {
        gtc_fill_bias(b, cdt, Cm, bias, n, m, ldc); /* col-major [m, n] = row-major [n, m] */
        beta = 1.0f;
    }
    CUBLAS_CHECK(cublasGemmEx(im->cublas, ta, tb, m, n, k, &alpha, A, cuda_type(abt), lda, B,
                              cuda_type(abt), ldb, &beta, Cm, cuda_type(cdt), ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* A cuBLASLt preference: our workspace, the alignment promised for A/B and for C/D, and for a
 * bf16 output a split-K whose partial sums stay fp32 (no in-place or output-type reduction, which
 * would add the partials in bf16): D is rounded once. fp32 keeps cuBLASLt's default. */
static cublasLtMatmulPreference_t lt_preference(uint32_t align_ab, uint32_t align_cd, bool bf16_out) {
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = GTC_LT_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t align = i < 2 ? align_ab : align_cd;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &align, sizeof align));
    }
    if (bf16_out) {
        uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                          &red, sizeof red));
    }
    return pref;
}

/* The cuBLASLt plan of one GEMM shape (gemm's arguments but the pointers): its descriptors and the
 * heuristic's algorithm, made on first use and kept, so a step does not rebuild descriptors and
 * re-run the heuristic for every call. The heuristic sees a stand-in bias pointer aligned to
 * exactly 16 bytes (the bias path is taken only with 16-byte-aligned biases), so the algorithm
 * depends on the shape alone. found == 0: cuBLASLt has none; gemm takes the cuBLAS fallback. */
static void gemm_plan_build(Backend *b, GtcGemmPlan *p) {
    CudaImpl *im = gtc_impl(b);
    const GtcGemmKey *key = &p->key;
    const cublasOperation_t ta = (cublasOperation_t)key->ta, tb = (cublasOperation_t)key->tb;
    const int m = key->m, n = key->n, k = key->k;
    const GtDtype abt = (GtDtype)key->abt, cdt = (GtDtype)key->cdt;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key->bias) {
        const void *probe = (const char *)im->lt_workspace + 16;
        const bool bgrad = key->bias == GTC_GEMM_BGRADB; /* gemm_dw_bgrad_epilogue: fp32 D and bias */
        cublasLtEpilogue_t epi = bgrad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &probe,
                                                    sizeof probe));
        if (cdt != GT_F32 || bgrad) { /* the default (D's type) made explicit; a forward fp32 D keeps it */
            int32_t bias_type = (int32_t)cuda_type(cdt);
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                        &bias_type, sizeof bias_type));
        }
    }
    /* layouts describe the matrices as stored (before op); C and D share one */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, cuda_type(abt), ta == CUBLAS_OP_N ? m : k,
                                            ta == CUBLAS_OP_N ? k : m, key->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(abt), tb == CUBLAS_OP_N ? k : n,
                                            tb == CUBLAS_OP_N ? n : k, key->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(cdt), m, n, key->ldc));
    cublasLtMatmulPreference_t pref = lt_preference(key->align_ab, key->align_cd, cdt != GT_F32);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(im->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1,
                                                       &heur, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    /* only "not supported" means: no algorithm, use the fallback; any other status is an argument
     * error of ours (CUBLAS_STATUS_INVALID_VALUE) and must not hide behind the fallback */
    if (hs != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(hs);
    p->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->found) p->algo = heur.algo;
}

static void gemm_plan_destroy(GtcGemmPlan *p) {
    /* best effort (also on the way out) */
    if (p->lc) (void)cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) (void)cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) (void)cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) (void)cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

/* the plan for key: found, or built in a free slot (when all GTC_GEMM_PLANS are taken, the slots
 * are reused in turn; a plan rebuilt for the same key gets the same algorithm) */
static GtcGemmPlan *gemm_plan(Backend *b, const GtcGemmKey *key) {
    CudaImpl *im = gtc_impl(b);
    for (int i = 0; i < im->n_gemm_plans; i++)
        if (memcmp(&im->gemm_plans[i].key, key, sizeof *key) == 0) return &im->gemm_plans[i];
    int slot;
    if (im->n_gemm_plans < GTC_GEMM_PLANS) {
        slot = im->n_gemm_plans++;
    } else {
        slot = im->next_gemm_plan;
        im->next_gemm_plan = (im->next_gemm_plan + 1) % GTC_GEMM_PLANS;
        /* the descriptors may still be read by queued work only through cuBLASLt's own copies:
         * cublasLtMatmul takes what it needs at launch, so they can go now */
        gemm_plan_destroy(&im->gemm_plans[slot]);
    }
    GtcGemmPlan *p = &im->gemm_plans[slot];
    p->key = *key;
    gemm_plan_build(b, p);
    return p;
}

/* C[m,n] (col-major) = alpha op(A) op(B) + beta C (+ bias[m] per row); A, B of type abt, C (and
 * bias) of type cdt; fp32 compute (no TF32). beta is 0 or 1, and a bias comes only with beta = 0.
 * One cuBLAS(Lt) call on the shape as given; gtc_gemm (gemm_align.cu) calls it on aligned parts. */
void gtc_gemm_one(Backend *b, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                 GtDtype abt, const void *A, int lda, const void *B, int ldb, GtDtype cdt,
                 void *Cm, int ldc, const void *bias, float beta) {
    CudaImpl *im = gtc_impl(b);
    if (m <= 0 || n <= 0) return;
    if ((beta != 0.0f && beta != 1.0f) || (bias && beta != 0.0f)) {
        fprintf(stderr, "%s:%d: gemm: beta %g with%s bias is not supported\n", __FILE__, __LINE__,
                (double)beta, bias ? "" : "out");
        exit(GT_EXIT_FAILURE);
    }
    size_t ab_size = gt_dtype_size(abt), cd_size = gt_dtype_size(cdt);
    if (k <= 0) { /* empty sum: C = beta C (+ bias) */
        if (beta == 0.0f)
            CUDA_CHECK(cudaMemset2DAsync(Cm, (size_t)ldc * cd_size, 0, (size_t)m * cd_size, (size_t)n, im->compute));
        if (bias) gtc_add_bias(b, cdt, Cm, bias, n, m, ldc);
        return;
    }
    int al16 = ptr_aligned16(A) && ptr_aligned16(B) && ptr_aligned16(Cm) &&
               (!bias || ptr_aligned16(bias)) && ld_aligned16(lda, ab_size) &&
               ld_aligned16(ldb, ab_size) && ld_aligned16(ldc, cd_size);
    uint32_t align_ab = al16 ? 16u : (uint32_t)ab_size;
    uint32_t align_cd = al16 ? 16u : (uint32_t)cd_size;
    if (bias && !al16) { /* keep the epilogue on the well-trodden path only */
        gemm_fallback(b, ta, tb, m, n, k, alpha, abt, A, lda, B, ldb, cdt, Cm, ldc, bias, beta);
        return;
    }

    GtcGemmKey key;
    memset(&key, 0, sizeof key); /* the padding too: keys are compared with memcmp */
    key.ta = (int)ta, key.tb = (int)tb, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb;
    key.ldc = ldc, key.abt = (int)abt, key.cdt = (int)cdt, key.bias = bias ? GTC_GEMM_BIAS : 0;
    key.align_ab = align_ab, key.align_cd = align_cd;
    GtcGemmPlan *plan = gemm_plan(b, &key);
    if (plan->found) {
        if (bias)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                        sizeof bias));
        CUBLAS_CHECK(cublasLtMatmul(im->lt, plan->op, &alpha, A, plan->la, B, plan->lb, &beta, Cm, plan->lc, Cm,
                                    plan->lc, &plan->algo, im->lt_workspace, GTC_LT_WORKSPACE_BYTES,
                                    im->compute));
    } else {
        /* no cuBLASLt algorithm for this shape/alignment/types: plain cuBLAS */
        gemm_fallback(b, ta, tb, m, n, k, alpha, abt, A, lda, B, ldb, cdt, Cm, ldc, bias, beta);
    }
}

static GtDtype act_dtype(Backend *b) { return gtc_act_bf16(b) ? GT_BF16 : GT_F32; }

static void cu_matmul_forward(Backend *b, act_t *out, const act_t *inp, const act_t *w,
                              const act_t *bias, int N, int C, int OC, int ldo) {
    GtDtype at = act_dtype(b);
    gtc_gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, at, w, C, inp, C, at, out, ldo, bias, 0.0f);
}

/* ---- matmul + GELU ----
 *
 * pre[N,OC] = inp @ w^T + bias and out_gelu = gelu(pre), the GEMM mapped as matmul_forward's
 * (m = OC, n = N, k = C; both outputs col-major [OC, N] with ld OC = row-major [N, OC]).
 *
 * bf16 activations: one cuBLASLt call with CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without a
 * bias): D = gelu(A B + bias) goes to out_gelu, and the GELU input A B + bias to the aux buffer
 * pre (col-major [OC, N], AUX_LD = OC, which cuBLASLt wants a multiple of 8; its element type
 * defaults to D's, bf16). cuBLASLt's GELU is the tanh form (gelu_new), the one gelu_forward
 * computes. NOTE: the epilogue computes the gelu inside cuBLASLt from the UNROUNDED fp32
 * pre-activation, while the pair matmul_forward + gelu_forward computes it from pre rounded to
 * bf16; so out_gelu may differ from the pair's by a bf16 ulp (the op tests use the 1e-2 bf16
 * bound there, not bit identity), and pre may differ too where cuBLASLt picks another algorithm
 * than matmul_forward's GEMM. Backward reads pre (gelu_backward), as stored.
 *
 * Taken only when every pointer (inp, w, bias, pre, out_gelu) is 16-byte aligned, C and OC are
 * multiples of 8 elements and the heuristic finds an algorithm; otherwise, and ALWAYS for fp32
 * activations (which must stay within 1e-5 of the CPU, and bit-identical to the pair), the pair
 * itself: the GEMM of matmul_forward, then the gelu kernel.
 *
 * Bits must not depend on where the buffers live (recompute): cuBLASLt's heuristic looks at the
 * bias and aux pointer values to infer their alignment, so the heuristic is asked with stand-in
 * pointers aligned to exactly 16 bytes, and the real pointers are set only for the matmul. The
 * algorithm then depends on the shapes and the 16-byte rule only, never on a pointer's exact
 * alignment. */
static bool gemm_gelu_epilogue(Backend *b, act_t *out_gelu, act_t *pre, const act_t *inp,
                               const act_t *w, const act_t *bias, int N, int C, int OC) {
    CudaImpl *im = gtc_impl(b);
    const size_t es = gt_dtype_size(GT_BF16);
    if (N <= 0 || C <= 0 || OC <= 0) return false;
    if (!(ptr_aligned16(inp) && ptr_aligned16(w) && (!bias || ptr_aligned16(bias)) &&
          ptr_aligned16(pre) && ptr_aligned16(out_gelu) && ld_aligned16(C, es) &&
          ld_aligned16(OC, es) && OC % 8 == 0))
        return false;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int m = OC, n = N, k = C;
    const cudaDataType_t bf = CUDA_R_16BF;
    /* stand-ins for the heuristic: real device memory, aligned to 16 bytes and no more */
    const void *probe = (const char *)im->lt_workspace + 16;

    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) {
        int32_t bias_type = (int32_t)bf;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof bias_type));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &probe,
                                                    sizeof probe));
    }
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &probe,
                                                sizeof probe));
    int64_t aux_ld = OC;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof aux_ld));
    /* layouts as stored (before op): w is col-major [C, OC] (ld C), inp col-major [C, N] (ld C),
     * D col-major [OC, N] (ld OC) */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, bf, k, m, C));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, bf, k, n, C));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, bf, m, n, OC));
    pref = lt_preference(16u, 16u, true); /* as gemm(): D (and the aux) rounded once */
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(im->lt, op, la, lb, lc, lc, pref, 1, &heur,
                                                       &found);
    bool done = false;
    if (hs != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(hs); /* as in gemm_plan_init */
    if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &pre, sizeof pre));
        if (bias)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias, sizeof bias));
        float alpha = 1.0f, beta = 0.0f;
        cublasStatus_t ms = cublasLtMatmul(im->lt, op, &alpha, w, la, inp, lb, &beta, out_gelu, lc,
                                           out_gelu, lc, &heur.algo, im->lt_workspace,
                                           GTC_LT_WORKSPACE_BYTES, im->compute);
        if (ms == CUBLAS_STATUS_SUCCESS) {
            done = true;
        } else if (ms == CUBLAS_STATUS_NOT_SUPPORTED) { /* INVALID_VALUE is a bug of ours: CUBLAS_CHECK */
            /* refused before launching anything, and the same for every call of this shape
             * (so recompute keeps its bits): the pair below; said once per backend */
            if (!im->gelu_epilogue_refused)
                gt_log("cuda: cuBLASLt GELU epilogue refused (%s) for %d x %d x %d: using the GEMM + "
                       "gelu kernel for that shape\n", cublasGetStatusString(ms), N, C, OC);
            im->gelu_epilogue_refused = true;
        } else {
            CUBLAS_CHECK(ms);
        }
    }
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));
    return done;
}

static void cu_matmul_gelu_forward(Backend *b, act_t *out_gelu, act_t *pre, const act_t *inp,
                                   const act_t *w, const act_t *bias, int N, int C, int OC) {
    if (act_dtype(b) == GT_BF16 && gemm_gelu_epilogue(b, out_gelu, pre, inp, w, bias, N, C, OC))
        return;
    cu_matmul_forward(b, pre, inp, w, bias, N, C, OC, OC);
    if (N > 0 && OC > 0) gtc_gelu_forward(b, out_gelu, pre, (size_t)N * OC);
}

/* ---- dW with the bias gradient in its epilogue ----
 *
 * matmul_backward's dw GEMM (m = C, n = OC, k = N: A = inp op N, B = dout op T, D = dw fp32, beta 1)
 * with CUBLASLT_EPILOGUE_BGRADB: cuBLASLt also writes bias[j] = sum over k of op(B)[k, j], the sum of
 * dout's N rows = the bias gradient (cublasLt.h: "the bias size corresponds to the number of columns
 * of the matrix D; the reduction happens over the GEMM's k dimension"), as fp32 (BIAS_DATA_TYPE
 * CUDA_R_32F: D's type, the documented default, made explicit), so dout is read once instead of a
 * second time by the column sum. The layout is the one public uses of BGRADB take (apex's fused_dense
 * linear_bias_backward, Paddle's fused_gemm_epilogue: TRANSA N, TRANSB T, m = in, n = out features,
 * k = the rows, the output's gradient as B), each with a fallback when cuBLASLt refuses, as here.
 *
 * The epilogue WRITES; gradients ACCUMULATE across micro-batches (backend.h), so it writes into the
 * backend's scratch (OC floats, inside the GTC_SCRATCH_BYTES taken when the backend opens, never grown
 * for OC <= 1M: no allocation in the step) and gtc_accumulate_f32 adds that into dbias (one more
 * rounding per micro-batch, the same as the column sum's final add).
 *
 * Determinism: the algorithm comes from gemm_plan on the shape alone (the heuristic sees a stand-in
 * bias pointer aligned to exactly 16 bytes; the scratch is 256-byte aligned) and cuBLASLt's results
 * are the same bits run to run for one algorithm, stream and workspace (cuBLAS's reproducibility
 * rule; no atomics mode applies to cublasLtMatmul); the add is elementwise.
 *
 * Taken only with bf16 activations (fp32 keeps the GEMM + the column sum: it must stay within 1e-5 of
 * the CPU), every pointer 16-byte aligned, C and OC multiples of 8 (this GEMM's leading dimensions are
 * its contiguous extents, so any other shape is off the 16-byte path, where gemm_align.cu does not
 * split either), N > 0, and when the heuristic finds an algorithm and cublasLtMatmul accepts it; false
 * (nothing done) otherwise. */
static bool gemm_dw_bgrad_epilogue(Backend *b, float *dw, float *dbias, const act_t *dout, const act_t *inp, int N,
                                   int C, int OC) {
    CudaImpl *im = gtc_impl(b);
    if (act_dtype(b) != GT_BF16 || N <= 0 || C <= 0 || OC <= 0 || C % 8 != 0 || OC % 8 != 0 ||
        !(ptr_aligned16(inp) && ptr_aligned16(dout) && ptr_aligned16(dw)))
        return false;
    float *grad = (float *)gtc_scratch(b, (size_t)OC * sizeof(float));
    GtcGemmKey key;
    memset(&key, 0, sizeof key); /* the padding too: keys are compared with memcmp */
    key.ta = (int)CUBLAS_OP_N, key.tb = (int)CUBLAS_OP_T, key.m = C, key.n = OC, key.k = N, key.lda = C;
    key.ldb = OC, key.ldc = C, key.abt = (int)GT_BF16, key.cdt = (int)GT_F32, key.bias = GTC_GEMM_BGRADB;
    key.align_ab = 16u, key.align_cd = 16u;
    GtcGemmPlan *plan = gemm_plan(b, &key);
    if (!plan->found) return false;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &grad, sizeof grad));
    const float alpha = 1.0f, beta = 1.0f;
    cublasStatus_t ms = cublasLtMatmul(im->lt, plan->op, &alpha, inp, plan->la, dout, plan->lb, &beta, dw, plan->lc,
                                       dw, plan->lc, &plan->algo, im->lt_workspace, GTC_LT_WORKSPACE_BYTES,
                                       im->compute);
    if (ms == CUBLAS_STATUS_NOT_SUPPORTED) { /* refused before launching anything, the same for the shape */
        if (!im->bgrad_epilogue_refused)
            gt_log("cuda: cuBLASLt BGRADB epilogue refused (%s) for %d x %d x %d: using the GEMM + column sum "
                   "for that shape\n", cublasGetStatusString(ms), N, C, OC);
        im->bgrad_epilogue_refused = true;
        return false;
    }
    CUBLAS_CHECK(ms);
    gtc_accumulate_f32(b, dbias, grad, OC);
    return true;
}

static void cu_matmul_backward(Backend *b, act_t *dinp, float *dw, float *dbias, const act_t *dout,
                               const act_t *inp, const act_t *w, int N, int C, int OC, int ldo) {
    GtDtype at = act_dtype(b);
    if (dbias && ldo != OC) { /* backend.h: a bias gradient needs contiguous dout rows */
        fprintf(stderr, "%s:%d: matmul_backward: dbias with dout row stride %d != %d\n", __FILE__, __LINE__,
                ldo, OC);
        exit(GT_EXIT_FAILURE);
    }
    if (dinp) gtc_gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, at, w, C, dout, ldo, at, dinp, C, NULL, 0.0f);
    if (dw && dbias && gemm_dw_bgrad_epilogue(b, dw, dbias, dout, inp, N, C, OC)) return;
    if (dw) gtc_gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, at, inp, C, dout, ldo, GT_F32, dw, C, NULL, 1.0f);
    if (dbias) gtc_colsum_accumulate(b, dbias, dout, N, OC); /* fixed order, no atomics */
}

/* backend.h's gemm, row-major C[M,N] = alpha op(A) op(B) + beta C: as column-major, the same bytes
 * are C^T = op(B)^T op(A)^T, so B goes first with its own transpose flag (as cu_matmul_forward's
 * w^T inp). One cuBLASLt call: beta 1 accumulates into the output block in place (a strided ldc:
 * the block of a fused weight's output), the sum rounded once to cdt. */
static void cu_gemm_op(Backend *b, bool ta, bool tb, int M, int N, int K, float alpha, const act_t *A, int lda,
                       const act_t *B, int ldb, float beta, void *C, GtDtype cdt, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (cdt != GT_F32 && cdt != act_dtype(b)) {
        fprintf(stderr, "%s:%d: gemm: output dtype %s is neither fp32 nor the act dtype\n", __FILE__, __LINE__,
                gt_dtype_name(cdt));
        exit(GT_EXIT_FAILURE);
    }
    gtc_gemm(b, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K < 0 ? 0 : K, alpha, act_dtype(b), B,
         ldb, A, lda, cdt, C, ldc, NULL, beta);
}

/* ------------------------------------------------------------------ open / close */

static void cu_destroy_impl(CudaImpl *im) {
    if (!im) return;
    /* best effort: errors on the way out are ignored (the device may be gone) */
    if (im->compute) (void)cudaStreamSynchronize(im->compute);
    if (im->copy) (void)cudaStreamSynchronize(im->copy);
    for (int i = 0; i < im->n_gemm_plans; i++) gemm_plan_destroy(&im->gemm_plans[i]);
    if (im->lt) (void)cublasLtDestroy(im->lt);
    if (im->cublas) (void)cublasDestroy(im->cublas);
    if (im->lt_workspace) (void)cudaFree(im->lt_workspace);
    if (im->scratch) (void)cudaFree(im->scratch);
    if (im->ss_partials) (void)cudaFree(im->ss_partials);
    if (im->ss_host) (void)cudaFreeHost(im->ss_host);
    for (int s = 0; s < 2; s++) {
        if (im->ready[s]) (void)cudaEventDestroy(im->ready[s]);
        if (im->done[s]) (void)cudaEventDestroy(im->done[s]);
        if (im->timer[s]) (void)cudaEventDestroy(im->timer[s]);
    }
    if (im->copy) (void)cudaStreamDestroy(im->copy);
    if (im->compute) (void)cudaStreamDestroy(im->compute);
    (void)cudaGetLastError();
    free(im);
}

static void cu_close(Backend *b) {
    if (!b) return;
    cu_destroy_impl(gtc_impl(b));
    free(b);
}

static void cu_memory_info(Backend *b, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)b;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        (void)cudaGetLastError();
        f = t = 0;
    }
    *free_bytes = f;
    *total_bytes = t;
}

static void cu_timer_start(Backend *b) {
    CudaImpl *im = gtc_impl(b);
    if (im->profile_step && ++im->timed_steps == im->profile_step) CUDA_CHECK(cudaProfilerStart());
    CUDA_CHECK(cudaEventRecord(im->timer[0], im->compute));
}

static double cu_timer_elapsed_ms(Backend *b) {
    CudaImpl *im = gtc_impl(b);
    float ms = 0.0f;
    b->host_waits++;
    CUDA_CHECK(cudaEventRecord(im->timer[1], im->compute));
    CUDA_CHECK(cudaEventSynchronize(im->timer[1]));
    CUDA_CHECK(cudaEventElapsedTime(&ms, im->timer[0], im->timer[1]));
    if (im->profile_step && im->timed_steps == im->profile_step) CUDA_CHECK(cudaProfilerStop());
    return ms;
}

/* GTRAIN_PROFILE_STEP: unset or empty, 0 (no profiler range), or the step whose ops a profiler
 * started with --profile-from-start off sees (cu_timer_start) */
static int profile_step_from_env(long *out, GtError *err) {
    const char *v = getenv("GTRAIN_PROFILE_STEP");
    *out = 0;
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "GTRAIN_PROFILE_STEP: expected a step number (1 or more; 0 for none), found '%.40s'", v);
    *out = n;
    return 0;
}

static const BackendOps k_cuda_ops = {
    /* .name = */ "cuda",
    /* .caps = */ GT_CAP_DEVICE_MEMORY | GT_CAP_NATIVE_BF16 | GT_CAP_NCCL | GT_CAP_DRIVER_MEM_VIEW | GT_CAP_POSITIONS,
    /* .close = */ cu_close,
    /* .dev_alloc = */ cu_dev_alloc,
    /* .dev_free = */ cu_dev_free,
    /* .host_alloc = */ cu_host_alloc,
    /* .host_free = */ cu_host_free,
    /* .to_device = */ cu_to_device,
    /* .to_host = */ cu_to_host,
    /* .dev_copy = */ cu_dev_copy,
    /* .zero = */ cu_zero,
    /* .synchronize = */ cu_synchronize,
    /* .offload_to_host = */ cu_offload_to_host,
    /* .offload_to_device = */ cu_offload_to_device,
    /* .offload_wait = */ cu_offload_wait,
    /* .encoder_forward = */ gtc_encoder_forward,
    /* .encoder_backward = */ gtc_encoder_backward,
    /* .layernorm_forward = */ gtc_layernorm_forward,
    /* .layernorm_backward = */ gtc_layernorm_backward,
    /* .matmul_forward = */ cu_matmul_forward,
    /* .matmul_backward = */ cu_matmul_backward,
    /* .gemm = */ cu_gemm_op,
    /* .attention_forward = */ gtc_attention_forward,
    /* .attention_backward = */ gtc_attention_backward,
    /* .gelu_forward = */ gtc_gelu_forward,
    /* .gelu_backward = */ gtc_gelu_backward,
    /* .add = */ gtc_add,
    /* .residual_layernorm_forward = */ gtc_residual_layernorm_forward,
    /* .matmul_gelu_forward = */ cu_matmul_gelu_forward,
    /* .rmsnorm_forward = */ gtc_rmsnorm_forward,
    /* .rmsnorm_backward = */ gtc_rmsnorm_backward,
    /* .residual_rmsnorm_forward = */ gtc_residual_rmsnorm_forward,
    /* .head_rmsnorm_forward = */ gtc_head_rmsnorm_forward,
    /* .head_rmsnorm_backward = */ gtc_head_rmsnorm_backward,
    /* .rope_forward = */ gtc_rope_forward,
    /* .rope_backward = */ gtc_rope_backward,
    /* .swiglu_forward = */ gtc_swiglu_forward,
    /* .swiglu_backward = */ gtc_swiglu_backward,
    /* .crossentropy = */ gtc_crossentropy,
    /* .adamw = */ gtc_adamw,
    /* .sum_squares = */ gtc_sum_squares,
    /* .scale = */ gtc_scale,
    /* .to_act = */ gtc_to_act,
    /* .timer_start = */ cu_timer_start,
    /* .timer_elapsed_ms = */ cu_timer_elapsed_ms,
    /* .memory_info = */ cu_memory_info,
    /* .axpby_rows = */ gtc_axpby_rows,
    /* .dropout = */ gtc_dropout,
    /* .dora_norm = */ gtc_dora_norm,
    /* .dora_forward = */ gtc_dora_forward,
    /* .dora_backward = */ gtc_dora_backward,
    /* .convert = */ gtc_convert,
    /* .dequant_nf4 = */ gtc_dequant_nf4,
    /* .kv_store = */ gtc_kv_store,
    /* .attention_cached = */ gtc_attention_cached,
};

/* creation-time checks: a failure becomes a one-line GtError and cleans up */
#define TRY_CUDA(call)                                                                            \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            (void)cudaGetLastError();                                                             \
            gt_error(err, GT_EXIT_FAILURE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,            \
                     cudaGetErrorString(e_));                                                     \
            goto fail;                                                                            \
        }                                                                                         \
    } while (0)
#define TRY_CUBLAS(call)                                                                          \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            gt_error(err, GT_EXIT_FAILURE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,            \
                     cublasGetStatusString(s_));                                                  \
            goto fail;                                                                            \
        }                                                                                         \
    } while (0)

extern "C" int cuda_backend_create(Backend **out, int local_rank, GtError *err) {
    *out = NULL;
    char why[256] = "";
    int count = cuda_device_count(why, sizeof why);
    if (count <= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "device: cuda asked for, but no CUDA device is usable: %s", why);
    if (local_rank < 0 || local_rank >= count)
        return gt_error(err, GT_EXIT_FAILURE, "device: local rank %d has no GPU (%d visible)",
                        local_rank, count);

    Backend *b = (Backend *)calloc(1, sizeof *b);
    CudaImpl *im = (CudaImpl *)calloc(1, sizeof *im);
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    char ws[32], sc[32];
    if (!b || !im) {
        free(b);
        free(im);
        return gt_error(err, GT_EXIT_FAILURE, "cuda: out of host memory opening the backend");
    }
    im->device = local_rank;
    if (profile_step_from_env(&im->profile_step, err)) {
        free(b);
        free(im);
        return -1;
    }
    TRY_CUDA(cudaSetDevice(local_rank));
    TRY_CUDA(cudaGetDeviceProperties(&prop, local_rank));
    TRY_CUDA(cudaStreamCreateWithFlags(&im->compute, cudaStreamNonBlocking));
    TRY_CUDA(cudaStreamCreateWithFlags(&im->copy, cudaStreamNonBlocking));
    for (int s = 0; s < 2; s++) {
        TRY_CUDA(cudaEventCreateWithFlags(&im->ready[s], cudaEventDisableTiming));
        TRY_CUDA(cudaEventCreateWithFlags(&im->done[s], cudaEventDisableTiming));
        TRY_CUDA(cudaEventCreate(&im->timer[s])); /* timing enabled */
    }
    TRY_CUBLAS(cublasCreate(&im->cublas));
    TRY_CUBLAS(cublasSetStream(im->cublas, im->compute));
    /* pedantic: fp32 stays fp32 (no TF32, no reduced-precision reductions) */
    TRY_CUBLAS(cublasSetMathMode(im->cublas, CUBLAS_PEDANTIC_MATH));
    TRY_CUBLAS(cublasLtCreate(&im->lt));
    TRY_CUDA(cudaMalloc(&im->lt_workspace, GTC_LT_WORKSPACE_BYTES));
    TRY_CUDA(cudaMalloc(&im->scratch, GTC_SCRATCH_BYTES));
    im->scratch_bytes = GTC_SCRATCH_BYTES;
    TRY_CUDA(cudaMalloc(&im->ss_partials, (GTC_SS_PARTS + 1) * sizeof(double)));
    TRY_CUDA(cudaHostAlloc(&im->ss_host, sizeof(double), cudaHostAllocDefault));
    if (gtc_attention_init(im, err) != 0) goto fail;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total_b));

    b->ops = &k_cuda_ops;
    b->impl = im;
    b->num_threads = 1;
    snprintf(b->device_name, sizeof b->device_name, "%.100s (sm_%d%d)", prop.name, prop.major,
             prop.minor);
    b->device_free_bytes = free_b;
    b->device_total_bytes = total_b;
    backend_reserve(b, GTC_CUBLAS_WORKSPACE_BYTES(prop.major), "cuBLAS workspace");
    backend_reserve(b, GTC_MODULES_RESERVE_BYTES, "kernel modules (allowance)");
    gt_log("cuda: %s, backend-internal buffers %s cuBLASLt workspace + %s reduction scratch "
           "(not in the plan's categories)\n",
           b->device_name, gt_format_bytes(ws, sizeof ws, GTC_LT_WORKSPACE_BYTES),
           gt_format_bytes(sc, sizeof sc, GTC_SCRATCH_BYTES));
    *out = b;
    return 0;

fail:
    cu_destroy_impl(im);
    free(b);
    return -1;
}
