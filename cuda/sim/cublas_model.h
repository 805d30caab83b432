/* cublas_model.h - the internals that the two halves of the CUDA simulator's cuBLAS/cuBLASLt model
 * share: cublas.cpp (the model's core and the plain cuBLAS API; see there for what it computes and
 * checks) and cublaslt.cpp (the cuBLASLt API). Everything here is defined in cublas.cpp; helpers
 * that only one file uses stay private to it. Not for the rest of the simulator. */
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

namespace gtcsim_blas {

/* ------------------------------------------------------------------ objects */

/* every handle, descriptor, layout and preference the model hands out is an Obj */
enum class Kind { Handle, Lt, Desc, Layout, Pref };

struct Obj {
    Kind kind;
    bool live = true;
    explicit Obj(Kind k) : kind(k) {}
    virtual ~Obj() = default;
};
struct LayoutObj : Obj {
    int32_t type = CUDA_R_32F;
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0, batch_stride = 0;
    LayoutObj() : Obj(Kind::Layout) {}
};
struct DescObj : Obj {
    int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    void *aux = nullptr;
    int64_t aux_ld = 0, bias_bstride = 0, aux_bstride = 0, alpha_bstride = 0;
    int32_t sm_count = 0, bias_type = -1, aux_type = -1;
    DescObj() : Obj(Kind::Desc) {}
};

/* record a newly created object as known (live) to the model */
void track(Obj *o);
template <class T> T *make() {
    T *o = new T();
    track(o);
    return o;
}
/* the live object h of kind k; anything else (NULL unless null_ok, unknown, another kind,
 * destroyed) aborts naming api and what */
Obj *lookup(const void *h, Kind k, const char *api, const char *what, bool null_ok = false);
template <class T> T *get(const void *h, Kind k, const char *api, const char *what) {
    return static_cast<T *>(lookup(h, k, api, what));
}
/* mark h destroyed; it stays known for a while, so a later use is named as use after destroy */
void destroy(const void *h, Kind k, const char *api);

/* ------------------------------------------------------------------ elements */

const char *tname(int32_t t);      /* a cudaDataType's name, for messages */
size_t esize(int32_t t);           /* bytes of a modelled element type (0 for others) */
unsigned ptr_align(const void *p); /* largest power of two dividing p, up to 256 */

/* ------------------------------------------------------------------ matrices */

struct Mat { /* a stored column-major matrix: column j is rows elements from p + j * ld */
    const void *p = nullptr;
    int32_t type = CUDA_R_32F;
    int64_t rows = 0, cols = 0, ld = 0;
};
size_t extent(const Mat &m); /* bytes from m.p to its last element's end (0 if empty) */
/* abort unless m (when not empty) lies inside one live device allocation */
void check_device(const char *api, const char *name, const Mat &m);
/* abort if the output o shares a byte with the operand i */
void check_disjoint(const char *api, const char *out, const Mat &o, const char *in, const Mat &i);
/* abort if p (when not NULL) is not aligned to need bytes */
void check_aligned(const char *api, const char *name, const void *p, unsigned need, const char *why);

/* ------------------------------------------------------------------ the computation */

struct Job {
    const char *api = "";
    int ta = 0, tb = 0; /* 0: N, 1: T */
    int64_t m = 0, n = 0, k = 0;
    Mat A, B, C, D, Aux; /* C.p unused when beta == 0; Aux only with `aux` */
    double alpha = 1, beta = 0;
    bool bias = false, gelu = false, aux = false, tf32 = false;
    bool bgrad = false;          /* BGRADB: biasp[c] = sum over l of op(B)[l, c] (n values), written */
    const void *biasp = nullptr; /* the bias (m values, read) or the bias gradient (n values, written) */
    int32_t bias_type = CUDA_R_32F;
    void *ws = nullptr;
    size_t ws_bytes = 0;
    bool misaligned = false; /* gemm_audit's verdict: named in the cost model's counts */
};
/* D = alpha op(A) op(B) + beta C (+ bias, GELU, aux), as stream work: declares every operand
 * (gtcsim::note_access) and computes */
void run(const Job &j);
/* a host-mode alpha/beta: not NULL, not device memory */
float host_scalar(const char *api, const char *name, const void *p);

/* The GEMM audit: would this call run on kernels that load 16 bytes at a time? cuBLASLt's heuristic
 * picks such kernels only when every operand it reads or writes (A, B, C when beta != 0, D) starts
 * on a 16-byte boundary, has a leading dimension and a contiguous extent (its stored rows) that are
 * multiples of 16 bytes, and the alignment promised to it (MIN_ALIGNMENT_*_BYTES, lt_align_log) is
 * 16; otherwise (and always for the plain cuBLAS calls, lt_align_log NULL) the kernel loads element
 * by element ("align1"/"align2"), as measured on an H200 for GPT-2's vocabulary of 50257
 * (bench/device-check-h200-2026-12-04.md). Sets j.misaligned; with GTCSIM_GEMM_AUDIT=1 in the
 * environment a misaligned call aborts naming its shape and the first operand at fault. */
void gemm_audit(const char *api, Job &j, const uint8_t *lt_align_log);

/* ------------------------------------------------------------------ cuBLASLt problem */

bool compute_modelled(int32_t c); /* CUBLAS_COMPUTE_32F, _PEDANTIC, _FAST_TF32 */

/* the identity of a heuristic's answer, packed into cublasLtMatmulAlgo_t */
struct AlgoRec {
    uint32_t magic;
    int8_t compute, at, bt, ct, dt, biast, auxt, ta, tb;
    uint8_t align_log[6]; /* A, B, C, D, bias, aux */
    uint16_t epilogue;
    uint64_t ws;
    uint64_t check;
};
static_assert(sizeof(AlgoRec) <= sizeof(cublasLtMatmulAlgo_t), "AlgoRec fits cublasLtMatmulAlgo_t");
inline constexpr uint32_t kAlgoMagic = 0x67745341u; /* "gtSA" */
uint64_t rec_hash(const AlgoRec &r); /* over every field before `check` */

/* Validate the descriptors of one cuBLASLt problem and fill j (no pointers). NOT_SUPPORTED for a
 * type combination cuBLASLt refuses; every argument error aborts. */
cublasStatus_t lt_setup(const char *api, const DescObj *d, const LayoutObj *la, const LayoutObj *lb,
                        const LayoutObj *lc, const LayoutObj *ld, Job &j);
/* the algorithm record for problem j of d, with the alignments it may rely on and its workspace */
AlgoRec lt_rec(const DescObj *d, const Job &j, const uint32_t align[4], unsigned bias_align,
               unsigned aux_align, uint64_t ws);

} // namespace gtcsim_blas
