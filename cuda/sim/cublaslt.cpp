/* cublaslt.cpp - the CUDA simulator's cuBLASLt API (cuda/sim/include/cublasLt.h): handles, matrix
 * layouts, matmul descriptors, preferences, the heuristic and cublasLtMatmul, on the model in
 * cublas.cpp (see there for what is computed and checked; the shared internals: cublas_model.h). */
#include <cublasLt.h>

#include "cublas_model.h"
#include "gtcsim.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

using gtcsim::fail;
using namespace gtcsim_blas;

/* ------------------------------------------------------------------ cuBLASLt objects */

namespace {
struct LtObj : Obj {
    LtObj() : Obj(Kind::Lt) {}
};
struct PrefObj : Obj {
    uint64_t max_ws = 0;                        /* documented default: no workspace */
    uint32_t red_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    uint32_t align[4] = {256, 256, 256, 256};  /* documented default: 256 bytes */
    PrefObj() : Obj(Kind::Pref) {}
};

bool type_known(int32_t t) { return t >= 0 && t <= CUDA_R_4F_E2M1; }
/* the epilogues modelled: DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, BGRADB (in the one
 * layout lt_setup names) */
bool epilogue_modelled(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
           e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_BGRADB;
}
unsigned cap16(const void *p) { return std::min(16u, ptr_align(p)); }

template <class T> void set_attr(const char *api, const char *attr, const void *buf, size_t got, T *dst) {
    if (!buf) fail("%s(%s): buf is NULL", api, attr);
    if (got != sizeof(T))
        fail("%s(%s): sizeInBytes %zu, but the attribute is %zu bytes", api, attr, got, sizeof(T));
    memcpy(dst, buf, sizeof(T));
}
#define GTC_ATTR(name) case name: return #name
const char *desc_attr_name(int a) {
    switch (a) {
        GTC_ATTR(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE); GTC_ATTR(CUBLASLT_MATMUL_DESC_SCALE_TYPE);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_POINTER_MODE); GTC_ATTR(CUBLASLT_MATMUL_DESC_TRANSA);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_TRANSB); GTC_ATTR(CUBLASLT_MATMUL_DESC_TRANSC);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_FILL_MODE); GTC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_BIAS_POINTER); GTC_ATTR(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER); GTC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET); GTC_ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE);
        GTC_ATTR(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
    }
    return "a cublasLtMatmulDescAttributes_t this model does not handle";
}
void check_compute(const char *api, int32_t compute, int32_t scale) {
    if (!compute_modelled(compute))
        fail("%s: compute type %d is not modelled by the simulator (CUBLAS_COMPUTE_32F, _PEDANTIC, "
             "_FAST_TF32)", api, compute);
    if (scale != CUDA_R_32F)
        fail("%s: scale type %s with a CUBLAS_COMPUTE_32F* compute type: cuBLASLt supports only CUDA_R_32F",
             api, tname(scale));
}
} // namespace

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) fail("cublasLtCreate: lightHandle is NULL");
    *h = reinterpret_cast<cublasLtHandle_t>(static_cast<Obj *>(make<LtObj>()));
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    destroy(h, Kind::Lt, "cublasLtDestroy");
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type,
                                                     uint64_t rows, uint64_t cols, int64_t ld) {
    const char *api = "cublasLtMatrixLayoutCreate";
    if (!out) fail("%s: matLayout is NULL", api);
    if (!type_known(type)) fail("%s: %d is not a cudaDataType", api, (int)type);
    if (ld < 0) fail("%s: ld %lld is negative", api, (long long)ld);
    LayoutObj *l = make<LayoutObj>();
    l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
    *out = reinterpret_cast<cublasLtMatrixLayout_t>(static_cast<Obj *>(l));
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    if (l) destroy(l, Kind::Layout, "cublasLtMatrixLayoutDestroy");
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t h,
                                                           cublasLtMatrixLayoutAttribute_t attr,
                                                           const void *buf, size_t size) {
    const char *api = "cublasLtMatrixLayoutSetAttribute";
    LayoutObj *l = get<LayoutObj>(h, Kind::Layout, api, "matLayout");
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
        uint32_t v;
        set_attr(api, "CUBLASLT_MATRIX_LAYOUT_TYPE", buf, size, &v);
        if (!type_known((int32_t)v)) fail("%s: %u is not a cudaDataType", api, v);
        l->type = (int32_t)v;
        break;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
        int32_t v;
        set_attr(api, "CUBLASLT_MATRIX_LAYOUT_ORDER", buf, size, &v);
        if (v != CUBLASLT_ORDER_COL) fail("%s: order %d: only CUBLASLT_ORDER_COL is modelled", api, v);
        break;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS: set_attr(api, "CUBLASLT_MATRIX_LAYOUT_ROWS", buf, size, &l->rows); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: set_attr(api, "CUBLASLT_MATRIX_LAYOUT_COLS", buf, size, &l->cols); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: {
        int64_t v;
        set_attr(api, "CUBLASLT_MATRIX_LAYOUT_LD", buf, size, &v);
        if (v < 0) fail("%s: ld %lld is negative", api, (long long)v);
        l->ld = v;
        break;
    }
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
        int32_t v;
        set_attr(api, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT", buf, size, &v);
        if (v != 1) fail("%s: batch count %d: only 1 is modelled", api, v);
        break;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        set_attr(api, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET", buf, size, &l->batch_stride);
        break;
    default: fail("%s: layout attribute %d is not modelled", api, (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute,
                                                   cudaDataType_t scale) {
    const char *api = "cublasLtMatmulDescCreate";
    if (!out) fail("%s: matmulDesc is NULL", api);
    check_compute(api, compute, scale);
    DescObj *d = make<DescObj>();
    d->compute = compute, d->scale = scale;
    *out = reinterpret_cast<cublasLtMatmulDesc_t>(static_cast<Obj *>(d));
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    if (d) destroy(d, Kind::Desc, "cublasLtMatmulDescDestroy");
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t h, cublasLtMatmulDescAttributes_t attr,
                                                         const void *buf, size_t size) {
    const char *api = "cublasLtMatmulDescSetAttribute";
    DescObj *d = get<DescObj>(h, Kind::Desc, api, "matmulDesc");
    const char *an = desc_attr_name(attr);
    int32_t i32;
    int64_t i64;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        set_attr(api, an, buf, size, &i32);
        check_compute(api, i32, d->scale);
        d->compute = i32;
        break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        set_attr(api, an, buf, size, &i32);
        check_compute(api, d->compute, i32);
        break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        set_attr(api, an, buf, size, &i32);
        if (i32 != CUBLASLT_POINTER_MODE_HOST) fail("%s(%s): pointer mode %d: only HOST is modelled", api, an, i32);
        break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        set_attr(api, an, buf, size, &i32);
        if (i32 != CUBLAS_OP_N && i32 != CUBLAS_OP_T && i32 != CUBLAS_OP_C)
            fail("%s(%s): %d is not CUBLAS_OP_N, _T or _C", api, an, i32);
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = i32;
        break;
    case CUBLASLT_MATMUL_DESC_TRANSC:
        set_attr(api, an, buf, size, &i32);
        if (i32 != CUBLAS_OP_N) fail("%s(%s): %d: cuBLASLt supports only CUBLAS_OP_N", api, an, i32);
        break;
    case CUBLASLT_MATMUL_DESC_FILL_MODE:
        set_attr(api, an, buf, size, &i32);
        if (i32 != CUBLAS_FILL_MODE_FULL) fail("%s(%s): %d: only CUBLAS_FILL_MODE_FULL is modelled", api, an, i32);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        uint32_t e;
        set_attr(api, an, buf, size, &e);
        if (!epilogue_modelled(e))
            fail("%s(%s): epilogue %u is not modelled (DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, "
                 "GELU_AUX_BIAS, BGRADB)", api, an, e);
        d->epilogue = e;
        break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: set_attr(api, an, buf, size, &d->bias); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: set_attr(api, an, buf, size, &d->aux); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE:
        set_attr(api, an, buf, size, &i64);
        if (i64 < 0) fail("%s(%s): %lld is negative", api, an, (long long)i64);
        (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD        ? d->aux_ld
         : attr == CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE    ? d->bias_bstride
         : attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE ? d->aux_bstride
                                                              : d->alpha_bstride) = i64;
        break;
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
        set_attr(api, an, buf, size, &d->sm_count);
        if (d->sm_count < 0) fail("%s(%s): %d is negative", api, an, d->sm_count);
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        set_attr(api, an, buf, size, &i32);
        if (i32 != -1 && !type_known(i32)) fail("%s(%s): %d is not a cudaDataType", api, an, i32);
        (attr == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE ? d->bias_type : d->aux_type) = i32;
        break;
    default: fail("%s: attribute %d (%s) is not modelled", api, (int)attr, an);
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    if (!out) fail("cublasLtMatmulPreferenceCreate: pref is NULL");
    *out = reinterpret_cast<cublasLtMatmulPreference_t>(static_cast<Obj *>(make<PrefObj>()));
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    if (p) destroy(p, Kind::Pref, "cublasLtMatmulPreferenceDestroy");
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t h,
                                                               cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void *buf, size_t size) {
    const char *api = "cublasLtMatmulPreferenceSetAttribute";
    PrefObj *p = get<PrefObj>(h, Kind::Pref, api, "pref");
    uint32_t u32;
    uint64_t u64;
    float f;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
        set_attr(api, "CUBLASLT_MATMUL_PREF_SEARCH_MODE", buf, size, &u32);
        if (u32 != CUBLASLT_SEARCH_BEST_FIT) fail("%s: search mode %u: only BEST_FIT is modelled", api, u32);
        break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        set_attr(api, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES", buf, size, &p->max_ws);
        break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        set_attr(api, "CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK", buf, size, &u32);
        if (u32 & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK)
            fail("%s: reduction scheme mask 0x%x has bits outside CUBLASLT_REDUCTION_SCHEME_MASK", api, u32);
        p->red_mask = u32;
        break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        const int which = (int)attr - (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
        set_attr(api, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES", buf, size, &u32);
        if (u32 == 0 || (u32 & (u32 - 1)) != 0)
            fail("%s: MIN_ALIGNMENT_%c_BYTES %u is not a power of two (not modelled)", api, "ABCD"[which], u32);
        p->align[which] = u32;
        break;
    }
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
        set_attr(api, "CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT", buf, size, &f);
        break;
    case CUBLASLT_MATMUL_PREF_IMPL_MASK:
        set_attr(api, "CUBLASLT_MATMUL_PREF_IMPL_MASK", buf, size, &u64);
        break;
    default: fail("%s: preference attribute %d is not modelled", api, (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ heuristic and matmul */

namespace {
/* the modelled algorithm: split-K partials of fp32 m x n in the workspace when some reduction
 * scheme is allowed and workspace is offered (capped by it); none otherwise */
uint64_t ws_need(const PrefObj *p, const Job &j) {
    if (!(p->red_mask & CUBLASLT_REDUCTION_SCHEME_MASK) || !p->max_ws) return 0;
    uint64_t need = ((uint64_t)j.m * (uint64_t)j.n * 4u + 255u) & ~(uint64_t)255u;
    return std::min<uint64_t>(need, p->max_ws);
}
} // namespace

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t op,
                                                         cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                         cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                         cublasLtMatmulPreference_t pref, int requested,
                                                         cublasLtMatmulHeuristicResult_t results[], int *count) {
    const char *api = "cublasLtMatmulAlgoGetHeuristic";
    get<LtObj>(lt, Kind::Lt, api, "lightHandle");
    const DescObj *d = get<DescObj>(op, Kind::Desc, api, "operationDesc");
    const LayoutObj *la = get<LayoutObj>(Adesc, Kind::Layout, api, "Adesc");
    const LayoutObj *lb = get<LayoutObj>(Bdesc, Kind::Layout, api, "Bdesc");
    const LayoutObj *lc = get<LayoutObj>(Cdesc, Kind::Layout, api, "Cdesc");
    const LayoutObj *ld = get<LayoutObj>(Ddesc, Kind::Layout, api, "Ddesc");
    const PrefObj *p = get<PrefObj>(pref, Kind::Pref, api, "preference");
    if (requested <= 0) fail("%s: requestedAlgoCount %d must be positive", api, requested);
    if (!results || !count) fail("%s: heuristicResultsArray or returnAlgoCount is NULL", api);
    *count = 0;
    Job j;
    cublasStatus_t st = lt_setup(api, d, la, lb, lc, ld, j);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const int32_t types[4] = {la->type, lb->type, lc->type, ld->type};
    for (int i = 0; i < 4; i++)
        if (p->align[i] < esize(types[i])) return CUBLAS_STATUS_NOT_SUPPORTED; /* no kernel reads unaligned elements */
    AlgoRec r = lt_rec(d, j, p->align, cap16(d->bias), cap16(d->aux), ws_need(p, j));
    memset(&results[0], 0, sizeof results[0]);
    memcpy(results[0].algo.data, &r, sizeof r);
    results[0].workspaceSize = (size_t)r.ws;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                         cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                         cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                         const cublasLtMatmulAlgo_t *algo, void *workspace, size_t ws_bytes,
                                         cudaStream_t stream) {
    const char *api = "cublasLtMatmul";
    get<LtObj>(lt, Kind::Lt, api, "lightHandle");
    const DescObj *d = get<DescObj>(op, Kind::Desc, api, "computeDesc");
    const LayoutObj *la = get<LayoutObj>(Adesc, Kind::Layout, api, "Adesc");
    const LayoutObj *lb = get<LayoutObj>(Bdesc, Kind::Layout, api, "Bdesc");
    const LayoutObj *lc = get<LayoutObj>(Cdesc, Kind::Layout, api, "Cdesc");
    const LayoutObj *ld = get<LayoutObj>(Ddesc, Kind::Layout, api, "Ddesc");
    Job j;
    cublasStatus_t st = lt_setup(api, d, la, lb, lc, ld, j);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    j.alpha = host_scalar(api, "alpha", alpha);
    j.beta = host_scalar(api, "beta", beta);
    j.A.p = A, j.B.p = B, j.C.p = C, j.D.p = D, j.biasp = d->bias, j.Aux.p = d->aux;
    AlgoRec r;
    if (!algo) { /* implicit heuristic, as cuBLASLt does: the pointers' own alignment */
        uint32_t al[4] = {ptr_align(A), ptr_align(B), ptr_align(C ? C : D), ptr_align(D)};
        const int32_t types[4] = {la->type, lb->type, lc->type, ld->type};
        for (int i = 0; i < 4; i++)
            if (al[i] < esize(types[i])) return CUBLAS_STATUS_NOT_SUPPORTED;
        PrefObj tmp;
        tmp.max_ws = ws_bytes;
        r = lt_rec(d, j, al, cap16(d->bias), cap16(d->aux), ws_need(&tmp, j));
    } else {
        memcpy(&r, algo->data, sizeof r);
        if (r.magic != kAlgoMagic || r.check != rec_hash(r))
            fail("%s: algo is not one cublasLtMatmulAlgoGetHeuristic returned (uninitialised or corrupted)", api);
        const uint32_t none[4] = {1, 1, 1, 1};
        AlgoRec want = lt_rec(d, j, none, 1, 1, 0);
        if (r.compute != want.compute || r.at != want.at || r.bt != want.bt || r.ct != want.ct ||
            r.dt != want.dt || r.biast != want.biast || r.auxt != want.auxt || r.ta != want.ta ||
            r.tb != want.tb || r.epilogue != want.epilogue)
            fail("%s: algo was found for another problem (compute %d/%d, types A %s/%s B %s/%s C %s/%s D %s/%s, "
                 "TRANSA %d/%d, TRANSB %d/%d, epilogue %d/%d: heuristic's/this call's)", api, r.compute,
                 want.compute, tname(r.at), tname(want.at), tname(r.bt), tname(want.bt), tname(r.ct),
                 tname(want.ct), tname(r.dt), tname(want.dt), r.ta, want.ta, r.tb, want.tb, r.epilogue,
                 want.epilogue);
    }
    if (j.m == 0 || j.n == 0) return CUBLAS_STATUS_SUCCESS;
    const bool use_ab = j.k > 0 && j.alpha != 0.0;
    if (use_ab) {
        check_device(api, "A", j.A);
        check_device(api, "B", j.B);
    }
    check_device(api, "D", j.D);
    if (j.beta != 0.0) check_device(api, "C", j.C);
    if (C == D) {
        if (lc->ld != ld->ld || lc->type != ld->type)
            fail("%s: in place (C == D) needs C and D to have one layout, but ldc %lld, ldd %lld, types %s, %s",
                 api, (long long)lc->ld, (long long)ld->ld, tname(lc->type), tname(ld->type));
    } else if (j.beta != 0.0) {
        check_disjoint(api, "D", j.D, "C", j.C);
    }
    if (use_ab) {
        check_disjoint(api, "D", j.D, "A", j.A);
        check_disjoint(api, "D", j.D, "B", j.B);
    }
    Mat bias;
    if (j.bias) {
        if (!j.biasp) fail("%s: the epilogue adds a bias but CUBLASLT_MATMUL_DESC_BIAS_POINTER is NULL", api);
        bias.p = j.biasp, bias.type = j.bias_type, bias.rows = j.m, bias.cols = 1, bias.ld = j.m;
        if (!gtcsim::is_device_range(j.biasp, extent(bias)))
            fail("%s: bias %p (%lld %s: the m rows of D) is not inside one live device allocation", api, j.biasp,
                 (long long)j.m, tname(j.bias_type));
        check_disjoint(api, "D", j.D, "bias", bias);
    }
    if (j.bgrad) { /* an output: the n columns' sums of op(B) */
        if (j.alpha != 1.0)
            fail("%s: BGRADB with alpha %g: only alpha 1 is modelled (whether alpha scales the bias gradient "
                 "is not documented)", api, j.alpha);
        if (!j.biasp) fail("%s: BGRADB writes the bias gradient but CUBLASLT_MATMUL_DESC_BIAS_POINTER is NULL", api);
        bias.p = j.biasp, bias.type = j.bias_type, bias.rows = j.n, bias.cols = 1, bias.ld = j.n;
        if (!gtcsim::is_device_range(j.biasp, extent(bias)))
            fail("%s: bias gradient %p (%lld %s: the n columns of D) is not inside one live device allocation",
                 api, j.biasp, (long long)j.n, tname(j.bias_type));
        check_disjoint(api, "bias gradient", bias, "D", j.D);
        if (use_ab) {
            check_disjoint(api, "bias gradient", bias, "A", j.A);
            check_disjoint(api, "bias gradient", bias, "B", j.B);
        }
        if (j.beta != 0.0) check_disjoint(api, "bias gradient", bias, "C", j.C);
    }
    if (j.aux) {
        if (!j.Aux.p) fail("%s: the GELU_AUX epilogue needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", api);
        check_device(api, "aux (EPILOGUE_AUX_POINTER with EPILOGUE_AUX_LD)", j.Aux);
        check_disjoint(api, "aux", j.Aux, "D", j.D);
        if (use_ab) {
            check_disjoint(api, "aux", j.Aux, "A", j.A);
            check_disjoint(api, "aux", j.Aux, "B", j.B);
        }
        if (j.beta != 0.0) check_disjoint(api, "aux", j.Aux, "C", j.C);
        if (j.bias) check_disjoint(api, "aux", j.Aux, "bias", bias);
    }
    const char *why = "promised to the heuristic (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES)";
    const void *ptrs[4] = {use_ab ? A : nullptr, use_ab ? B : nullptr, j.beta != 0.0 ? C : nullptr, D};
    const char *names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++) check_aligned(api, names[i], ptrs[i], 1u << r.align_log[i], why);
    if (j.bias || j.bgrad)
        check_aligned(api, "bias", j.biasp, 1u << r.align_log[4],
                      "the heuristic saw at CUBLASLT_MATMUL_DESC_BIAS_POINTER (its algorithm may rely on them)");
    if (j.aux)
        check_aligned(api, "aux", j.Aux.p, 1u << r.align_log[5],
                      "the heuristic saw at CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    if (ws_bytes < r.ws)
        fail("%s: workspaceSizeInBytes %zu is less than the %llu bytes the algorithm needs", api, ws_bytes,
             (unsigned long long)r.ws);
    if (ws_bytes) {
        if (!workspace) fail("%s: workspace is NULL with workspaceSizeInBytes %zu", api, ws_bytes);
        if (!gtcsim::is_device_range(workspace, ws_bytes))
            fail("%s: workspace %p of %zu bytes is not inside one live device allocation", api, workspace,
                 ws_bytes);
        Mat w;
        w.p = workspace, w.type = CUDA_R_16BF, w.rows = (int64_t)(ws_bytes / 2), w.cols = 1, w.ld = w.rows;
        for (const Mat *x : {&j.A, &j.B, &j.C, &j.D, &j.Aux, &bias})
            if (x->p && (x != &j.C || j.beta != 0.0) && (x != &j.Aux || j.aux) && (x != &bias || j.bias || j.bgrad))
                check_disjoint(api, "workspace", w, "an operand", *x);
    }
    j.ws = workspace, j.ws_bytes = (size_t)r.ws;
    gemm_audit(api, j, r.align_log);
    gtcsim::enqueue(stream, api, [j] { run(j); });
    return CUBLAS_STATUS_SUCCESS;
}
