/* cublas.cpp - the CUDA simulator's model of the cuBLAS / cuBLASLt subset that the cuda/ sources use
 * (cuda/sim/include/cublasLt.h, cublas_v2.h), on the CPU and strict rather than fast: here the
 * model's core (objects, elements, matrices, the computation, the cuBLASLt problem checks, status
 * strings) and the plain cuBLAS API; the cuBLASLt API is in cublaslt.cpp, and what the two share
 * is declared in cublas_model.h.
 *
 * What it computes: D = alpha op(A) op(B) + beta C (+ bias[m] broadcast along the columns, then
 * GELU, with the pre-GELU value stored to the aux matrix), column-major as cuBLAS defines it; with
 * CUBLASLT_EPILOGUE_BGRADB also bias[j] = sum over k of op(B)[k, j] (n values, fp32, written, not
 * accumulated: the bias gradient, summed in double in k order and rounded once), only in the layout
 * lt_setup names (other BGRADB layouts, and BGRADA, abort as not modelled).
 * Products and sums are exact-then-rounded in double (every fp32/bf16 product is exact in double;
 * the k-sum runs in index order), and each output is rounded once: double -> fp32 (nearest) and,
 * for a bf16 output, fp32 -> bf16 (nearest even). Hardware accumulates in fp32 and rounds its fp32
 * result to bf16, so fp32 outputs may differ from a GPU's by fp32 rounding error, and bf16 outputs
 * round from the closest fp32 to the exact value (the hardware's fp32 accumulator is close to it).
 * GELU is the tanh form, in double. beta == 0 does not read C; alpha == 0 or k == 0 do not read A/B.
 * TF32 (CUBLAS_TF32_TENSOR_OP_MATH on fp32 cuBLAS calls, CUBLAS_COMPUTE_32F_FAST_TF32) rounds the
 * fp32 inputs to 10 mantissa bits (nearest, ties away) before multiplying.
 *
 * What it checks (a violation aborts through gtcsim::fail naming the call and the argument):
 * live handles/descriptors/layouts/preferences (destroyed ones stay known for a while, so a use
 * after destroy is named as such), attribute sizes and values, ld >= rows, m/n/k consistent
 * between op(A), op(B), C and D, every operand's exact extent (from rows, cols, ld and element
 * size) inside one live device allocation, the output not overlapping an input (elementwise, so
 * column blocks of one buffer are fine), in-place C == D only with identical layouts, alpha/beta
 * host pointers, the algorithm coming from the heuristic for this problem, pointers aligned as
 * promised to the heuristic (MIN_ALIGNMENT_*; bias and aux as their pointer values were then, up
 * to 16 bytes), the workspace at least what the algorithm needs and inside device memory, the GELU
 * aux leading dimension (>= rows of D, a multiple of 8). Type combinations cuBLASLt does not
 * support make the heuristic answer CUBLAS_STATUS_NOT_SUPPORTED, as the library does; features
 * cuBLASLt has but this model does not (other types, epilogues, pointer modes, batches) abort as
 * "not modelled" rather than be refused, so a gap in the model never hides as a fallback.
 * The GEMM audit (gemm_audit, cublas_model.h): every call is judged on the 16-byte path or not (named
 * "misaligned" in the cost model's counts); with GTCSIM_GEMM_AUDIT=1 a call off it aborts.
 *
 * Work runs as stream work (gtcsim::enqueue) with every operand declared (gtcsim::note_access);
 * descriptor contents are taken at call time, as cuBLASLt does. Depends on gtcsim.h (and the header-only
 * cuda_bf16.h of cuda/sim/include) only. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

#include "cublas_model.h"
#include "gtcsim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <vector>

using gtcsim::fail;

namespace gtcsim_blas {

/* ------------------------------------------------------------------ objects */

namespace {

const char *kind_name(Kind k) {
    switch (k) {
    case Kind::Handle: return "cublasHandle_t";
    case Kind::Lt: return "cublasLtHandle_t";
    case Kind::Desc: return "cublasLtMatmulDesc_t";
    case Kind::Layout: return "cublasLtMatrixLayout_t";
    case Kind::Pref: return "cublasLtMatmulPreference_t";
    }
    return "?";
}

struct HandleObj : Obj {
    cudaStream_t stream = nullptr;
    uint32_t math = CUBLAS_DEFAULT_MATH;
    HandleObj() : Obj(Kind::Handle) {}
};

std::mutex g_mu;
std::unordered_set<const Obj *> g_known; /* live and quarantined objects */
std::deque<Obj *> g_quarantine;          /* destroyed, kept so a later use is named */
constexpr size_t kQuarantine = 4096;

} // namespace

void track(Obj *o) {
    std::lock_guard<std::mutex> lk(g_mu);
    g_known.insert(o);
}

Obj *lookup(const void *h, Kind k, const char *api, const char *what, bool null_ok) {
    if (!h) {
        if (null_ok) return nullptr;
        fail("%s: %s (%s) is NULL", api, what, kind_name(k));
    }
    std::lock_guard<std::mutex> lk(g_mu);
    const Obj *o = reinterpret_cast<const Obj *>(h);
    if (!g_known.count(o))
        fail("%s: %s %p is not a %s created by this library (never created, or destroyed long ago)",
             api, what, h, kind_name(k));
    if (o->kind != k)
        fail("%s: %s %p is a %s, not a %s", api, what, h, kind_name(o->kind), kind_name(k));
    if (!o->live) fail("%s: %s %p (%s) is used after it was destroyed", api, what, h, kind_name(k));
    return const_cast<Obj *>(o);
}

void destroy(const void *h, Kind k, const char *api) {
    Obj *o = lookup(h, k, api, "the object");
    std::lock_guard<std::mutex> lk(g_mu);
    o->live = false;
    g_quarantine.push_back(o);
    if (g_quarantine.size() > kQuarantine) {
        Obj *old = g_quarantine.front();
        g_quarantine.pop_front();
        g_known.erase(old);
        delete old;
    }
}

/* ------------------------------------------------------------------ elements */

const char *tname(int32_t t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
    default: return t >= 0 && t <= CUDA_R_4F_E2M1 ? "a cudaDataType this model does not name"
                                                  : "not a cudaDataType";
    }
}

size_t esize(int32_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0; }

namespace {
bool type_modelled(int32_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
/* the simulator's cuda_bf16.h conversions (nearest even; NaN stays a quiet NaN), as the kernels' */
float bf16_to_f(uint16_t h) { return __bfloat162float(__ushort_as_bfloat16(h)); }
uint16_t f_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
float tf32(float f) { /* 10 mantissa bits, nearest with ties away (cvt.rna.tf32.f32) */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return f; /* inf, NaN */
    u = (u + 0x1000u) & 0xFFFFE000u;
    memcpy(&f, &u, 4);
    return f;
}
float load_f(const void *p, int32_t t, size_t i) {
    if (t == CUDA_R_16BF) return bf16_to_f(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
void store(void *p, int32_t t, size_t i, double v) {
    float f = (float)v;
    if (t == CUDA_R_16BF) ((uint16_t *)p)[i] = f_to_bf16(f);
    else ((float *)p)[i] = f;
}
double gelu(double x) {
    const double s = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
} // namespace

unsigned ptr_align(const void *p) { /* largest power of two dividing p, up to 256 */
    uintptr_t a = (uintptr_t)p;
    unsigned r = 1;
    while (r < 256 && (a & r) == 0) r <<= 1;
    return r;
}

/* ------------------------------------------------------------------ matrices */

size_t extent(const Mat &m) {
    if (m.rows <= 0 || m.cols <= 0) return 0;
    return (size_t)((m.cols - 1) * m.ld + m.rows) * esize(m.type);
}

namespace {
/* do two stored matrices share a byte (not just their extents)? */
bool overlap(const Mat &a, const Mat &b) {
    size_t ea = extent(a), eb = extent(b);
    if (!ea || !eb || !a.p || !b.p) return false;
    uintptr_t pa = (uintptr_t)a.p, pb = (uintptr_t)b.p;
    if (pa + ea <= pb || pb + eb <= pa) return false;
    const uintptr_t la = (uintptr_t)(a.ld * esize(a.type)), lb = (uintptr_t)(b.ld * esize(b.type));
    const uintptr_t ra = (uintptr_t)a.rows * esize(a.type), rb = (uintptr_t)b.rows * esize(b.type);
    int64_t i = 0, j = 0;
    while (i < a.cols && j < b.cols) { /* columns ascend and are disjoint (ld >= rows) */
        uintptr_t s1 = pa + (uintptr_t)i * la, s2 = pb + (uintptr_t)j * lb;
        if (s1 + ra <= s2) i++;
        else if (s2 + rb <= s1) j++;
        else return true;
    }
    return false;
}
} // namespace

void check_device(const char *api, const char *name, const Mat &m) {
    size_t e = extent(m);
    if (!e) return;
    if (!m.p) fail("%s: %s is NULL", api, name);
    if (!gtcsim::is_device_range(m.p, e))
        fail("%s: %s (%lld x %lld %s, ld %lld: %zu bytes from %p) is not inside one live device "
             "allocation (a wrong leading dimension, shape or transpose reads past it?)",
             api, name, (long long)m.rows, (long long)m.cols, tname(m.type), (long long)m.ld, e, m.p);
}
void check_disjoint(const char *api, const char *out, const Mat &o, const char *in, const Mat &i) {
    if (overlap(o, i))
        fail("%s: %s (%p, %lld x %lld, ld %lld) overlaps %s (%p, %lld x %lld, ld %lld): the output "
             "would overwrite memory the call reads or writes", api, out, o.p, (long long)o.rows,
             (long long)o.cols, (long long)o.ld, in, i.p, (long long)i.rows, (long long)i.cols,
             (long long)i.ld);
}
void check_aligned(const char *api, const char *name, const void *p, unsigned need, const char *why) {
    if (p && ((uintptr_t)p % need) != 0)
        fail("%s: %s %p is aligned to %u bytes, less than the %u bytes %s", api, name, p, ptr_align(p),
             need, why);
}

namespace {
void note(const Mat &m, bool write) {
    if (!extent(m)) return;
    if (m.ld == m.rows || m.cols == 1) {
        gtcsim::note_access(m.p, extent(m), write);
        return;
    }
    const size_t es = esize(m.type);
    for (int64_t j = 0; j < m.cols; j++)
        gtcsim::note_access((const char *)m.p + (size_t)(j * m.ld) * es, (size_t)m.rows * es, write);
}
} // namespace

/* ------------------------------------------------------------------ the audit */

void gemm_audit(const char *api, Job &j, const uint8_t *lt_align_log) {
    char why[200] = "";
    const bool use_ab = j.k > 0 && j.alpha != 0.0;
    const Mat *ops[4] = {use_ab ? &j.A : nullptr, use_ab ? &j.B : nullptr, j.beta != 0.0 ? &j.C : nullptr, &j.D};
    const char *names[4] = {"A", "B", "C", "D"};
    if (!lt_align_log) snprintf(why, sizeof why, "plain cuBLAS (%s) picks its own kernel; not the 16-byte path", api);
    for (int i = 0; i < 4 && !why[0]; i++) {
        if (!ops[i]) continue;
        const Mat &x = *ops[i];
        const size_t es = esize(x.type);
        if (((uintptr_t)x.p & 15u) != 0)
            snprintf(why, sizeof why, "%s at %p is not 16-byte aligned", names[i], x.p);
        else if (((size_t)x.ld * es) % 16u != 0)
            snprintf(why, sizeof why, "%s's leading dimension %lld is not a multiple of 16 bytes", names[i], (long long)x.ld);
        else if (((size_t)x.rows * es) % 16u != 0)
            snprintf(why, sizeof why, "%s's %lld stored rows (its contiguous extent) are not a multiple of 16 bytes",
                     names[i], (long long)x.rows);
        else if (lt_align_log[i] < 4)
            snprintf(why, sizeof why, "%s was promised to the heuristic only %u-byte aligned", names[i],
                     1u << lt_align_log[i]);
    }
    j.misaligned = why[0] != 0;
    const char *env = getenv("GTCSIM_GEMM_AUDIT");
    if (j.misaligned && env && !strcmp(env, "1"))
        fail("%s: GTCSIM_GEMM_AUDIT: m %lld n %lld k %lld (trans %s%s, %s -> %s) would not run on 16-byte kernels: %s",
             api, (long long)j.m, (long long)j.n, (long long)j.k, j.ta ? "T" : "N", j.tb ? "T" : "N", tname(j.A.type),
             tname(j.D.type), why);
}

/* ------------------------------------------------------------------ the computation */

void run(const Job &j) {
    const bool use_ab = j.k > 0 && j.alpha != 0.0;
    if (gtcsim::cost_on()) { /* the cost model's counts (cost.cpp); the workspace is no traffic */
        char name[160];
        snprintf(name, sizeof name, "%s %s%s %s->%s m %lld n %lld k %lld%s%s", j.api, j.ta ? "T" : "N",
                 j.tb ? "T" : "N", tname(j.A.type), tname(j.D.type), (long long)j.m, (long long)j.n,
                 (long long)(use_ab ? j.k : 0), j.bias ? " +bias" : j.bgrad ? " +bgradb" : "", j.gelu ? " +gelu" : "");
        if (j.misaligned) strncat(name, " misaligned", sizeof name - strlen(name) - 1);
        double rd = (use_ab ? (double)extent(j.A) + (double)extent(j.B) : 0.0) + (j.beta != 0.0 ? (double)extent(j.C) : 0.0) +
                    (j.bias ? (double)j.m * (double)esize(j.bias_type) : 0.0);
        /* BGRADB sums B inside the GEMM: B is read once; only its n sums are written */
        double wr = (double)extent(j.D) + (j.aux ? (double)extent(j.Aux) : 0.0) +
                    (j.bgrad ? (double)j.n * (double)esize(j.bias_type) : 0.0);
        gtcsim::cost_blas(name, use_ab ? 2.0 * (double)j.m * (double)j.n * (double)j.k : 0.0,
                          j.A.type == CUDA_R_16BF || j.tf32, rd, wr);
    }
    if (use_ab) {
        note(j.A, false);
        note(j.B, false);
    }
    if (j.beta != 0.0) note(j.C, false);
    if (j.bias) gtcsim::note_access(j.biasp, (size_t)j.m * esize(j.bias_type), false);
    if (j.ws_bytes) gtcsim::note_access(j.ws, j.ws_bytes, true);
    if (j.aux) note(j.Aux, true);
    if (j.bgrad) gtcsim::note_access(j.biasp, (size_t)j.n * esize(j.bias_type), true);
    note(j.D, true);
    const int64_t m = j.m, n = j.n, k = use_ab ? j.k : 0;
    if (gtcsim::cost_fast_blas()) { /* counted above; zeros instead of the arithmetic (cost.cpp) */
        for (int64_t c = 0; j.bgrad && c < n; c++) store(const_cast<void *>(j.biasp), j.bias_type, (size_t)c, 0.0);
        for (int64_t c = 0; c < n; c++)
            for (int64_t r = 0; r < m; r++) {
                if (j.aux) store(const_cast<void *>(j.Aux.p), j.Aux.type, (size_t)(r + c * j.Aux.ld), 0.0);
                store(const_cast<void *>(j.D.p), j.D.type, (size_t)(r + c * j.D.ld), 0.0);
            }
        return;
    }
    auto rd = [&](const Mat &x, int64_t r, int64_t c) {
        float f = load_f(x.p, x.type, (size_t)(r + c * x.ld));
        return j.tf32 ? tf32(f) : f;
    };
    std::vector<float> bcol((size_t)(n * k)); /* bcol[c * k + l] = op(B)[l, c] */
    for (int64_t c = 0; c < n; c++)
        for (int64_t l = 0; l < k; l++) bcol[(size_t)(c * k + l)] = j.tb ? rd(j.B, c, l) : rd(j.B, l, c);
    for (int64_t c = 0; j.bgrad && c < n; c++) { /* BGRADB: written, not accumulated; one rounding */
        double s = 0.0;
        for (int64_t l = 0; l < k; l++) s += bcol[(size_t)(c * k + l)];
        store(const_cast<void *>(j.biasp), j.bias_type, (size_t)c, s);
    }
    const int64_t IB = 64;
    std::vector<float> arow((size_t)(IB * k)); /* arow[(i - i0) * k + l] = op(A)[i, l] */
    for (int64_t i0 = 0; i0 < m; i0 += IB) {
        const int64_t ib = std::min(IB, m - i0);
        for (int64_t i = 0; i < ib; i++)
            for (int64_t l = 0; l < k; l++)
                arow[(size_t)(i * k + l)] = j.ta ? rd(j.A, l, i0 + i) : rd(j.A, i0 + i, l);
        /* 4 x 4 outputs at a time, each its own accumulator summed in l order: the bits of the
         * one-at-a-time loop, with 16 independent chains instead of one (~10x faster) */
        for (int64_t c0 = 0; c0 < n; c0 += 4) {
            const int64_t cb = std::min<int64_t>(4, n - c0);
            for (int64_t ii = 0; ii < ib; ii += 4) {
                const int64_t rb = std::min<int64_t>(4, ib - ii);
                const float *ar[4], *bc[4];
                for (int q = 0; q < 4; q++) {
                    ar[q] = arow.data() + (ii + std::min<int64_t>(q, rb - 1)) * k;
                    bc[q] = bcol.data() + (c0 + std::min<int64_t>(q, cb - 1)) * k;
                }
                /* 16 scalars, so that they stay in registers */
                double c00 = 0, c01 = 0, c02 = 0, c03 = 0, c10 = 0, c11 = 0, c12 = 0, c13 = 0;
                double c20 = 0, c21 = 0, c22 = 0, c23 = 0, c30 = 0, c31 = 0, c32 = 0, c33 = 0;
                for (int64_t l = 0; l < k; l++) {
                    const double a0 = ar[0][l], a1 = ar[1][l], a2 = ar[2][l], a3 = ar[3][l];
                    const double b0 = bc[0][l], b1 = bc[1][l], b2 = bc[2][l], b3 = bc[3][l];
                    c00 += a0 * b0, c01 += a0 * b1, c02 += a0 * b2, c03 += a0 * b3;
                    c10 += a1 * b0, c11 += a1 * b1, c12 += a1 * b2, c13 += a1 * b3;
                    c20 += a2 * b0, c21 += a2 * b1, c22 += a2 * b2, c23 += a2 * b3;
                    c30 += a3 * b0, c31 += a3 * b1, c32 += a3 * b2, c33 += a3 * b3;
                }
                const double acc[4][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23},
                                          {c30, c31, c32, c33}};
                for (int64_t cc = 0; cc < cb; cc++)
                    for (int64_t i = 0; i < rb; i++) {
                        const int64_t r = i0 + ii + i, c = c0 + cc;
                        double v = k ? j.alpha * acc[i][cc] : 0.0;
                        if (j.beta != 0.0) v += j.beta * (double)load_f(j.C.p, j.C.type, (size_t)(r + c * j.C.ld));
                        if (j.bias) v += (double)load_f(j.biasp, j.bias_type, (size_t)r);
                        if (j.aux) store(const_cast<void *>(j.Aux.p), j.Aux.type, (size_t)(r + c * j.Aux.ld), v);
                        if (j.gelu) v = gelu(v);
                        store(const_cast<void *>(j.D.p), j.D.type, (size_t)(r + c * j.D.ld), v);
                    }
            }
        }
    }
}

float host_scalar(const char *api, const char *name, const void *p) {
    if (!p) fail("%s: %s is NULL", api, name);
    if (gtcsim::is_device_range(p, sizeof(float)))
        fail("%s: %s %p is device memory, but the pointer mode is host", api, name, p);
    return *(const float *)p;
}

/* ------------------------------------------------------------------ cuBLASLt problem */

bool compute_modelled(int32_t c) {
    return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

namespace {
const char *op_name(int t) { return t ? "T" : "N"; }
uint8_t log2u(uint32_t v) {
    uint8_t l = 0;
    while ((1u << l) < v && l < 31) l++;
    return l;
}
} // namespace

uint64_t rec_hash(const AlgoRec &r) {
    unsigned char b[sizeof r];
    memcpy(b, &r, sizeof r);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < offsetof(AlgoRec, check); i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

cublasStatus_t lt_setup(const char *api, const DescObj *d, const LayoutObj *la, const LayoutObj *lb,
                        const LayoutObj *lc, const LayoutObj *ld, Job &j) {
    const LayoutObj *L[4] = {la, lb, lc, ld};
    const char *nm[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++) {
        if (!type_modelled(L[i]->type))
            fail("%s: %s type %s (%d) is not modelled by the simulator (CUDA_R_32F, CUDA_R_16BF)", api,
                 nm[i], tname(L[i]->type), L[i]->type);
        if (L[i]->ld < 1 || (uint64_t)L[i]->ld < L[i]->rows)
            fail("%s: %s leading dimension %lld is less than its %llu rows (column-major: ld >= rows)",
                 api, nm[i], (long long)L[i]->ld, (unsigned long long)L[i]->rows);
        if (L[i]->rows > INT32_MAX || L[i]->cols > INT32_MAX)
            fail("%s: %s is %llu x %llu, beyond int32 (not modelled)", api, nm[i],
                 (unsigned long long)L[i]->rows, (unsigned long long)L[i]->cols);
    }
    j.api = api;
    j.ta = d->transa != CUBLAS_OP_N;
    j.tb = d->transb != CUBLAS_OP_N;
    j.m = (int64_t)(j.ta ? la->cols : la->rows);
    j.k = (int64_t)(j.ta ? la->rows : la->cols);
    const int64_t kb = (int64_t)(j.tb ? lb->cols : lb->rows);
    j.n = (int64_t)(j.tb ? lb->rows : lb->cols);
    if (kb != j.k)
        fail("%s: op(A) is %lld x %lld (A %llu x %llu, TRANSA %s) but op(B) is %lld x %lld (B %llu x %llu, "
             "TRANSB %s): their k differ", api, (long long)j.m, (long long)j.k, (unsigned long long)la->rows,
             (unsigned long long)la->cols, op_name(j.ta), (long long)kb, (long long)j.n,
             (unsigned long long)lb->rows, (unsigned long long)lb->cols, op_name(j.tb));
    for (int i = 2; i < 4; i++)
        if ((int64_t)L[i]->rows != j.m || (int64_t)L[i]->cols != j.n)
            fail("%s: %s is %llu x %llu but op(A) op(B) is %lld x %lld (m x n)", api, nm[i],
                 (unsigned long long)L[i]->rows, (unsigned long long)L[i]->cols, (long long)j.m,
                 (long long)j.n);
    auto mat = [](const LayoutObj *l) {
        Mat x;
        x.type = l->type, x.rows = (int64_t)l->rows, x.cols = (int64_t)l->cols, x.ld = l->ld;
        return x;
    };
    j.A = mat(la), j.B = mat(lb), j.C = mat(lc), j.D = mat(ld);
    j.tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    /* cuBLASLt's table for CUBLAS_COMPUTE_32F(_PEDANTIC), scale CUDA_R_32F, restricted to the
     * modelled types: A/B 32F -> C/D 32F; A/B 16BF -> C/D 16BF or 32F; FAST_TF32: all 32F */
    const int32_t ab = la->type, cd = lc->type;
    bool ok = la->type == lb->type && lc->type == ld->type &&
              (ab == CUDA_R_16BF || cd == CUDA_R_32F) && (!j.tf32 || (ab == CUDA_R_32F && cd == CUDA_R_32F));
    if (!ok) return CUBLAS_STATUS_NOT_SUPPORTED;
    const uint32_t e = d->epilogue;
    j.bgrad = e == CUBLASLT_EPILOGUE_BGRADB;
    if (j.bgrad) {
        /* modelled in one layout and type set: the layout of its public uses (apex's fused_dense
         * linear_bias_backward, Paddle's fused_gemm_epilogue): the weight gradient D = A op(B) with
         * the output's gradient as B transposed (TRANSA N, TRANSB T), here with bf16 A/B, fp32 C/D and
         * an fp32 bias gradient (cublasLt.h: the bias type defaults to D's). Anything else aborts:
         * what else cuBLASLt supports is not documented, so the model must not guess. */
        const int32_t bt = d->bias_type == -1 ? ld->type : d->bias_type;
        if (j.ta || !j.tb || ab != CUDA_R_16BF || cd != CUDA_R_32F || bt != CUDA_R_32F)
            fail("%s: CUBLASLT_EPILOGUE_BGRADB with TRANSA %s, TRANSB %s, A/B %s, C/D %s, bias gradient %s is not "
                 "modelled (only TRANSA N, TRANSB T, A/B CUDA_R_16BF, C/D CUDA_R_32F, a CUDA_R_32F bias "
                 "gradient)", api, op_name(j.ta), op_name(j.tb), tname(ab), tname(cd), tname(bt));
        j.bias_type = bt;
        return CUBLAS_STATUS_SUCCESS;
    }
    j.bias = (e & CUBLASLT_EPILOGUE_BIAS) != 0;
    j.gelu = (e & CUBLASLT_EPILOGUE_GELU) != 0;
    j.aux = (e & 128u) != 0;
    if (j.bias) {
        /* default: D's type; a bf16 D also takes an fp32 bias */
        j.bias_type = d->bias_type == -1 ? ld->type : d->bias_type;
        if (!(j.bias_type == ld->type || (ld->type == CUDA_R_16BF && j.bias_type == CUDA_R_32F)))
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (j.aux) {
        const int32_t at = d->aux_type == -1 ? ld->type : d->aux_type;
        if (at != ld->type) return CUBLAS_STATUS_NOT_SUPPORTED; /* other aux types: fp8 only */
        if (d->aux_ld < j.m || d->aux_ld % 8 != 0)
            fail("%s: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD %lld must be a multiple of 8 and at least "
                 "the %lld rows of D (GELU aux)%s", api, (long long)d->aux_ld, (long long)j.m,
                 d->aux_ld == 0 ? "; it was never set" : "");
        j.Aux.type = at, j.Aux.rows = j.m, j.Aux.cols = j.n, j.Aux.ld = d->aux_ld;
    }
    return CUBLAS_STATUS_SUCCESS;
}

AlgoRec lt_rec(const DescObj *d, const Job &j, const uint32_t align[4], unsigned bias_align,
               unsigned aux_align, uint64_t ws) {
    AlgoRec r;
    memset(&r, 0, sizeof r);
    r.magic = kAlgoMagic;
    r.compute = (int8_t)d->compute;
    r.at = (int8_t)j.A.type, r.bt = (int8_t)j.B.type, r.ct = (int8_t)j.C.type, r.dt = (int8_t)j.D.type;
    r.biast = (int8_t)(j.bias || j.bgrad ? j.bias_type : -1);
    r.auxt = (int8_t)(j.aux ? j.Aux.type : -1);
    r.ta = (int8_t)j.ta, r.tb = (int8_t)j.tb;
    for (int i = 0; i < 4; i++) r.align_log[i] = log2u(align[i]);
    r.align_log[4] = j.bias || j.bgrad ? log2u(bias_align) : 0;
    r.align_log[5] = j.aux ? log2u(aux_align) : 0;
    r.epilogue = (uint16_t)d->epilogue;
    r.ws = ws;
    r.check = rec_hash(r);
    return r;
}

} // namespace gtcsim_blas

using namespace gtcsim_blas;

/* ------------------------------------------------------------------ status strings */

extern "C" const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
extern "C" const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown error";
}
extern "C" const char *cublasLtGetStatusName(cublasStatus_t s) { return cublasGetStatusName(s); }
extern "C" const char *cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }

/* ------------------------------------------------------------------ cuBLAS */

extern "C" cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) fail("cublasCreate: handle is NULL");
    *handle = reinterpret_cast<cublasHandle_t>(static_cast<Obj *>(make<HandleObj>()));
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    destroy(handle, Kind::Handle, "cublasDestroy");
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t s) {
    get<HandleObj>(handle, Kind::Handle, "cublasSetStream", "handle")->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *s) {
    HandleObj *h = get<HandleObj>(handle, Kind::Handle, "cublasGetStream", "handle");
    if (!s) fail("cublasGetStream: streamId is NULL");
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    HandleObj *h = get<HandleObj>(handle, Kind::Handle, "cublasGetMathMode", "handle");
    if (!mode) fail("cublasGetMathMode: mode is NULL");
    *mode = (cublasMath_t)h->math;
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    HandleObj *h = get<HandleObj>(handle, Kind::Handle, "cublasSetMathMode", "handle");
    const uint32_t base = (uint32_t)mode & ~(uint32_t)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (!(base == CUBLAS_DEFAULT_MATH || base == CUBLAS_TENSOR_OP_MATH || base == CUBLAS_PEDANTIC_MATH ||
          base == CUBLAS_TF32_TENSOR_OP_MATH || base == CUBLAS_FP32_EMULATED_BF16X9_MATH ||
          base == CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH))
        fail("cublasSetMathMode: %u is not a cublasMath_t", (unsigned)mode);
    h->math = (uint32_t)mode;
    return CUBLAS_STATUS_SUCCESS;
}

namespace {
/* cublas<t>gemm / cublasGemmEx: validate as the cuBLAS documentation states and queue the work */
cublasStatus_t blas_gemm(const char *api, cublasHandle_t handle, cublasOperation_t transa,
                         cublasOperation_t transb, int m, int n, int k, const void *alpha, const void *A,
                         int32_t at, int lda, const void *B, int32_t bt, int ldb, const void *beta, void *C,
                         int32_t ct, int ldc, int32_t compute, int algo) {
    HandleObj *h = get<HandleObj>(handle, Kind::Handle, api, "handle");
    for (int t : {(int)transa, (int)transb})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C)
            fail("%s: %d is not a valid cublasOperation_t (N, T or C)", api, t);
    if (m < 0 || n < 0 || k < 0) fail("%s: m %d, n %d, k %d: none may be negative", api, m, n, k);
    if (!((algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
          (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP)))
        fail("%s: %d is not a cublasGemmAlgo_t this model accepts", api, algo);
    Job j;
    j.api = api;
    j.ta = transa != CUBLAS_OP_N, j.tb = transb != CUBLAS_OP_N;
    j.m = m, j.n = n, j.k = k;
    const int ar = j.ta ? k : m, br = j.tb ? n : k;
    if (lda < std::max(1, ar))
        fail("%s: lda %d < max(1, %d), the rows of A as stored (transa %s, m %d, k %d)", api, lda, ar,
             op_name(j.ta), m, k);
    if (ldb < std::max(1, br))
        fail("%s: ldb %d < max(1, %d), the rows of B as stored (transb %s, k %d, n %d)", api, ldb, br,
             op_name(j.tb), k, n);
    if (ldc < std::max(1, m)) fail("%s: ldc %d < max(1, m = %d)", api, ldc, m);
    for (int32_t t : {at, bt, ct})
        if (!type_modelled(t)) fail("%s: type %s (%d) is not modelled by the simulator", api, tname(t), t);
    if (!compute_modelled(compute)) fail("%s: compute type %d is not modelled by the simulator", api, compute);
    if (!(at == bt && (at == CUDA_R_16BF || ct == CUDA_R_32F)))
        fail("%s: Atype %s, Btype %s, Ctype %s with compute type %d is not a combination cuBLAS supports "
             "(CUBLAS_STATUS_NOT_SUPPORTED)", api, tname(at), tname(bt), tname(ct), compute);
    j.alpha = host_scalar(api, "alpha", alpha);
    j.beta = host_scalar(api, "beta", beta);
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS; /* quick return, nothing referenced */
    const uint32_t mode = h->math & 0xfu;
    j.tf32 = at == CUDA_R_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
             (compute == CUBLAS_COMPUTE_32F_FAST_TF32 || mode == CUBLAS_TF32_TENSOR_OP_MATH);
    j.A.p = A, j.A.type = at, j.A.rows = ar, j.A.cols = j.ta ? m : k, j.A.ld = lda;
    j.B.p = B, j.B.type = bt, j.B.rows = br, j.B.cols = j.tb ? k : n, j.B.ld = ldb;
    j.C.p = C, j.C.type = ct, j.C.rows = m, j.C.cols = n, j.C.ld = ldc;
    j.D = j.C;
    if (k > 0 && j.alpha != 0.0) {
        check_device(api, "A", j.A);
        check_device(api, "B", j.B);
        check_disjoint(api, "C", j.C, "A", j.A);
        check_disjoint(api, "C", j.C, "B", j.B);
    }
    check_device(api, "C", j.C);
    for (const Mat *x : {&j.A, &j.B, &j.C})
        check_aligned(api, x == &j.A ? "A" : x == &j.B ? "B" : "C", x->p, (unsigned)esize(x->type),
                      "its element size needs");
    gemm_audit(api, j, nullptr);
    gtcsim::enqueue(h->stream, api, [j] { run(j); });
    return CUBLAS_STATUS_SUCCESS;
}
} // namespace

extern "C" cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k, const float *alpha,
                                         const float *A, int lda, const float *B, int ldb, const float *beta,
                                         float *C, int ldc) {
    return blas_gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B,
                     CUDA_R_32F, ldb, beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                       int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                       int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                                       void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                       cublasGemmAlgo_t algo) {
    return blas_gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                     beta, C, Ctype, ldc, computeType, algo);
}
