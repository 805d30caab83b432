/* test_cublas_sim.cpp - standalone test of the simulator's cuBLAS/cuBLASLt model
 * (cuda/sim/cublas.cpp, cublaslt.cpp), against a private stand-in of the gtcsim.h runtime
 * interface: "device" buffers are malloc'd and registered in a table, enqueue runs the work at
 * once, and fail() throws so each class of invalid argument can be checked to abort with its message.
 * Results are compared bit for bit with an independent naive double reference (bf16 rounding
 * from src/common.h). Run: make test-cudasim-blas. */
#include <cublasLt.h>
#include <cublas_v2.h>

#include "gtcsim.h"

extern "C" {
#include "common.h"
}

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

/* ------------------------------------------------------------------ gtcsim stand-in */

struct SimFail : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct Buf {
    char *p;
    size_t n;
};
static std::vector<Buf> g_bufs;
static int g_enqueued, g_noted_writes;
static cudaStream_t g_last_stream;

namespace gtcsim {
void fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    throw SimFail(msg);
}
bool is_device_range(const void *p, size_t bytes) {
    for (const Buf &b : g_bufs)
        if ((const char *)p >= b.p && (const char *)p + bytes <= b.p + b.n && (const char *)p < b.p + b.n) return true;
    return false;
}
bool is_pinned_range(const void *, size_t) { return false; }
void enqueue(cudaStream_t s, const char *, std::function<void()> work) {
    g_enqueued++;
    g_last_stream = s;
    work();
}
void note_access(const void *p, size_t bytes, bool write) {
    if (!is_device_range(p, bytes)) fail("note_access of %zu bytes at %p outside device memory", bytes, p);
    if (write) g_noted_writes++;
}
/* the cost model's counters (cost.cpp) are off in this stand-in, as without GTCSIM_COST */
bool cost_on() { return false; }
bool cost_fast_blas() { return false; }
void cost_blas(const char *, double, bool, double, double) {}
} // namespace gtcsim

static void *dev_alloc(size_t bytes) {
    size_t n = (bytes + 255) & ~(size_t)255;
    char *p = (char *)aligned_alloc(256, n ? n : 256);
    memset(p, 0xFF, n ? n : 256); /* NaN poison */
    g_bufs.push_back({p, bytes});
    return p;
}

/* ------------------------------------------------------------------ test plumbing */

static int g_checks, g_failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_failures++;                                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)
/* expr must abort through gtcsim::fail with a message containing `needle` */
static void expect_fail(const char *what, const char *needle, const std::function<void()> &f) {
    g_checks++;
    try {
        f();
    } catch (const SimFail &e) {
        if (strstr(e.what(), needle)) return;
        g_failures++;
        fprintf(stderr, "FAIL %s: message \"%s\" lacks \"%s\"\n", what, e.what(), needle);
        return;
    }
    g_failures++;
    fprintf(stderr, "FAIL %s: did not abort\n", what);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand() {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* a column-major rows x cols matrix with leading dimension ld, of type t, in "device" memory */
struct M {
    cudaDataType t;
    int rows, cols, ld;
    void *p;
};
static size_t tsize(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }
static M mat(cudaDataType t, int rows, int cols, int ld) {
    M m{t, rows, cols, ld, nullptr};
    m.p = dev_alloc(((size_t)(cols - 1) * ld + rows) * tsize(t));
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) {
            float v = frand();
            size_t e = (size_t)j * ld + i;
            if (t == CUDA_R_16BF) ((uint16_t *)m.p)[e] = gt_f32_to_bf16(v);
            else ((float *)m.p)[e] = v;
        }
    return m;
}
static double get(const M &m, int i, int j) {
    size_t e = (size_t)j * m.ld + i;
    return m.t == CUDA_R_16BF ? gt_bf16_to_f32(((uint16_t *)m.p)[e]) : ((float *)m.p)[e];
}
static double round_to(cudaDataType t, double v) {
    float f = (float)v;
    return t == CUDA_R_16BF ? gt_bf16_to_f32(gt_f32_to_bf16(f)) : f;
}

/* the reference: out[i, j] for D = alpha op(A) op(B) + beta C + bias, aux = that, D = gelu(it) */
struct Ref {
    std::vector<double> d, aux;
};
static Ref reference(int ta, int tb, int m, int n, int k, const M &A, const M &B, const M *C, double alpha,
                     double beta, const M *bias, bool gelu, cudaDataType dt) {
    Ref r;
    r.d.resize((size_t)m * n);
    r.aux.resize((size_t)m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double a = ta ? get(A, l, i) : get(A, i, l);
                double b = tb ? get(B, j, l) : get(B, l, j);
                s += a * b;
            }
            double v = alpha * s;
            if (beta != 0) v += beta * get(*C, i, j);
            if (bias) v += get(*bias, i, 0);
            r.aux[(size_t)j * m + i] = round_to(dt, v);
            if (gelu) v = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
            r.d[(size_t)j * m + i] = round_to(dt, v);
        }
    return r;
}
static int mismatches(const std::vector<double> &want, const M &got) {
    int bad = 0;
    for (int j = 0; j < got.cols; j++)
        for (int i = 0; i < got.rows; i++) {
            double w = want[(size_t)j * got.rows + i], g = get(got, i, j);
            if (!(w == g)) {
                if (bad < 3) fprintf(stderr, "  [%d,%d] want %.9g got %.9g\n", i, j, w, g);
                bad++;
            }
        }
    return bad;
}

/* ------------------------------------------------------------------ cuBLASLt plumbing */

static void ok(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw SimFail(std::string(what) + ": " + cublasGetStatusString(s));
}
static cublasLtHandle_t g_lt;
static void *g_ws;
static const size_t kWs = (size_t)1 << 20;

struct LtCall {
    int ta = 0, tb = 0;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int32_t bias_type = -1;
    void *aux = nullptr;
    int64_t aux_ld = 0;
    uint32_t align_ab = 16, align_cd = 16;
    size_t max_ws = kWs, ws_bytes = kWs;
    void *ws = nullptr; /* default: g_ws */
    float alpha = 1, beta = 0;
    /* the layouts as given to cuBLASLt (default: the matrices' own) */
    int lay_override = 0;
    uint64_t arows = 0, acols = 0;
    int64_t alda = 0;
    const void *bias_at_run = nullptr; /* set after the heuristic, as backend_cuda.cu does */
    bool change_trans_after = false;
    bool destroy_desc_first = false;
};

/* plan (descriptors + heuristic) and run D = op(A) op(B) (+ beta C) through cuBLASLt; C == D */
static cublasStatus_t lt_run(const LtCall &c, const M &A, const M &B, const M &D) {
    cublasLtMatmulDesc_t op;
    ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    cublasOperation_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
    ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
    cublasLtEpilogue_t e = (cublasLtEpilogue_t)c.epi;
    ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "epilogue");
    if (c.bias) ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof c.bias), "bias");
    if (c.bias_type != -1)
        ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c.bias_type, sizeof c.bias_type), "bt");
    if (c.aux) {
        ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof c.aux), "aux");
        ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &c.aux_ld, sizeof c.aux_ld), "auxld");
    }
    cublasLtMatrixLayout_t la, lb, lc;
    if (c.lay_override) ok(cublasLtMatrixLayoutCreate(&la, A.t, c.arows, c.acols, c.alda), "la");
    else ok(cublasLtMatrixLayoutCreate(&la, A.t, A.rows, A.cols, A.ld), "la");
    ok(cublasLtMatrixLayoutCreate(&lb, B.t, B.rows, B.cols, B.ld), "lb");
    ok(cublasLtMatrixLayoutCreate(&lc, D.t, D.rows, D.cols, D.ld), "lc");
    cublasLtMatmulPreference_t pref;
    ok(cublasLtMatmulPreferenceCreate(&pref), "pref");
    ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c.max_ws, sizeof c.max_ws), "ws");
    const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t a = i < 2 ? c.align_ab : c.align_cd;
        ok(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &a, sizeof a), "align");
    }
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, lc, lc, pref, 1, &heur, &found);
    if (s == CUBLAS_STATUS_SUCCESS && found == 1) {
        if (c.change_trans_after) {
            cublasOperation_t t2 = c.ta ? CUBLAS_OP_N : CUBLAS_OP_T;
            ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t2, sizeof t2), "t2");
        }
        if (c.bias_at_run)
            ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias_at_run, sizeof c.bias_at_run), "b");
        if (c.destroy_desc_first) ok(cublasLtMatmulDescDestroy(op), "destroy");
        s = cublasLtMatmul(g_lt, op, &c.alpha, A.p, la, B.p, lb, &c.beta, D.p, lc, D.p, lc, &heur.algo,
                           c.ws ? c.ws : g_ws, c.ws_bytes, nullptr);
    } else if (s == CUBLAS_STATUS_SUCCESS) {
        s = CUBLAS_STATUS_NOT_SUPPORTED;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    if (!c.destroy_desc_first) cublasLtMatmulDescDestroy(op);
    return s;
}

/* ------------------------------------------------------------------ correctness */

static const char *tn(cudaDataType t) { return t == CUDA_R_16BF ? "bf16" : "fp32"; }

static void test_lt_correct() {
    const cudaDataType combos[3][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
    const uint32_t epis[4] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                              CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
    const int m = 24, n = 7, k = 19;
    int runs = 0;
    for (auto &cb : combos)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (uint32_t epi : epis)
                    for (int beta = 0; beta < 2; beta++) {
                        if (beta && epi != CUBLASLT_EPILOGUE_DEFAULT) continue;
                        const cudaDataType at = cb[0], dt = cb[1];
                        M A = ta ? mat(at, k, m, k + 3) : mat(at, m, k, m + 5);
                        M B = tb ? mat(at, n, k, n + 2) : mat(at, k, n, k + 1);
                        M D = mat(dt, m, n, m + 4);
                        M C0 = D; /* beta = 1 reads the initial D */
                        std::vector<char> c0(((size_t)(n - 1) * D.ld + m) * tsize(dt));
                        memcpy(c0.data(), D.p, c0.size());
                        C0.p = c0.data();
                        LtCall c;
                        c.ta = ta, c.tb = tb, c.epi = epi, c.beta = (float)beta;
                        c.align_cd = (uint32_t)tsize(dt); /* ld * esize not a multiple of 16 */
                        c.align_ab = (uint32_t)tsize(at);
                        M bias = mat(dt, m, 1, m);
                        M aux = mat(dt, m, n, 32);
                        const bool has_bias = epi & CUBLASLT_EPILOGUE_BIAS, has_aux = epi & 128;
                        if (has_bias) c.bias = bias.p;
                        if (has_aux) c.aux = aux.p, c.aux_ld = 32;
                        cublasStatus_t s = lt_run(c, A, B, D);
                        CHECK(s == CUBLAS_STATUS_SUCCESS, "lt %s->%s: %s", tn(at), tn(dt), cublasGetStatusName(s));
                        Ref r = reference(ta, tb, m, n, k, A, B, &C0, 1.0, beta, has_bias ? &bias : nullptr,
                                          epi & CUBLASLT_EPILOGUE_GELU, dt);
                        int bad = mismatches(r.d, D);
                        CHECK(bad == 0, "lt %s->%s ta %d tb %d epi %u beta %d: %d mismatches", tn(at), tn(dt), ta,
                              tb, epi, beta, bad);
                        if (has_aux) {
                            bad = mismatches(r.aux, aux);
                            CHECK(bad == 0, "lt aux %s->%s ta %d tb %d epi %u: %d mismatches", tn(at), tn(dt), ta,
                                  tb, epi, bad);
                        }
                        /* the padding between columns is never written */
                        CHECK(std::isnan(get(D, m, 0)), "D padding written (not NaN poison)");
                        runs++;
                    }
    /* an fp32 bias with a bf16 D */
    M A = mat(CUDA_R_16BF, 16, 8, 16), B = mat(CUDA_R_16BF, 8, 5, 8), D = mat(CUDA_R_16BF, 16, 5, 16);
    M bias = mat(CUDA_R_32F, 16, 1, 16);
    LtCall c;
    c.ta = 0, c.epi = CUBLASLT_EPILOGUE_BIAS, c.bias = bias.p, c.bias_type = CUDA_R_32F;
    CHECK(lt_run(c, A, B, D) == CUBLAS_STATUS_SUCCESS, "fp32 bias with bf16 D");
    CHECK(mismatches(reference(0, 0, 16, 5, 8, A, B, nullptr, 1, 0, &bias, false, CUDA_R_16BF).d, D) == 0,
          "fp32 bias with bf16 D values");
    printf("cuBLASLt: %d configurations bit-identical to the double reference\n", runs + 1);
}

/* BGRADB: the weight gradient's layout (TRANSA N, TRANSB T, bf16 A/B, fp32 C/D): D as any GEMM and the
 * bias gradient bias[j] = sum over l of op(B)[l, j] = B[j, l] WRITTEN (the NaN poison already there, and
 * the element past n, must not survive / must survive), against the double sum rounded once to fp32 */
static void test_lt_bgradb() {
    const int m = 24, n = 16, k = 37;
    int runs = 0;
    for (int beta = 0; beta < 2; beta++)
        for (int32_t bt : {(int32_t)-1, (int32_t)CUDA_R_32F}) {
            M A = mat(CUDA_R_16BF, m, k, m + 8), B = mat(CUDA_R_16BF, n, k, n + 8), D = mat(CUDA_R_32F, m, n, m + 4);
            std::vector<char> c0(((size_t)(n - 1) * D.ld + m) * 4);
            memcpy(c0.data(), D.p, c0.size());
            M C0 = D;
            C0.p = c0.data();
            float *bias = (float *)dev_alloc((size_t)(n + 1) * 4); /* NaN poison, one past n too */
            LtCall c;
            c.ta = 0, c.tb = 1, c.epi = CUBLASLT_EPILOGUE_BGRADB, c.bias = bias, c.bias_type = bt, c.beta = (float)beta;
            cublasStatus_t st = lt_run(c, A, B, D);
            CHECK(st == CUBLAS_STATUS_SUCCESS, "bgradb: %s", cublasGetStatusName(st));
            int bad = mismatches(reference(0, 1, m, n, k, A, B, &C0, 1.0, beta, nullptr, false, CUDA_R_32F).d, D);
            CHECK(bad == 0, "bgradb D beta %d bias type %d: %d mismatches", beta, bt, bad);
            bad = 0;
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int l = 0; l < k; l++) s += get(B, j, l);
                if (!((double)(float)s == (double)bias[j])) {
                    if (bad < 3) fprintf(stderr, "  bias[%d] want %.9g got %.9g\n", j, (double)(float)s, (double)bias[j]);
                    bad++;
                }
            }
            CHECK(bad == 0, "bgradb bias gradient beta %d bias type %d: %d mismatches", beta, bt, bad);
            CHECK(std::isnan(bias[n]), "bgradb wrote past the n columns");
            runs++;
        }
    /* written, not accumulated: a second call leaves the same bits */
    M A = mat(CUDA_R_16BF, 16, 8, 16), B = mat(CUDA_R_16BF, 8, 8, 8), D = mat(CUDA_R_32F, 16, 8, 16);
    float *bias = (float *)dev_alloc(8 * 4);
    LtCall c;
    c.tb = 1, c.epi = CUBLASLT_EPILOGUE_BGRADB, c.bias = bias;
    ok(lt_run(c, A, B, D), "bgradb once");
    std::vector<float> first(bias, bias + 8);
    ok(lt_run(c, A, B, D), "bgradb twice");
    CHECK(memcmp(first.data(), bias, 8 * 4) == 0, "bgradb accumulated into the bias instead of writing it");
    printf("cuBLASLt BGRADB: %d configurations, D and the bias gradient bit-identical to the double reference\n",
           runs + 1);
}

/* BGRADB outside its modelled layout and types, and its bias pointer, abort by name */
static void test_lt_bgradb_invalid() {
    const int m = 16, n = 8, k = 8;
    const uint32_t bg = CUBLASLT_EPILOGUE_BGRADB;
    M A = mat(CUDA_R_16BF, m, k, m), Bt = mat(CUDA_R_16BF, n, k, n), Bn = mat(CUDA_R_16BF, k, n, k);
    M D = mat(CUDA_R_32F, m, n, m), Dbf = mat(CUDA_R_16BF, m, n, m);
    M A32 = mat(CUDA_R_32F, m, k, m), Bt32 = mat(CUDA_R_32F, n, k, n);
    float *bias = (float *)dev_alloc((size_t)n * 4);
    { LtCall c; c.tb = 0, c.epi = bg, c.bias = bias;
      expect_fail("bgradb TRANSB N", "BGRADB with TRANSA N, TRANSB N", [&] { lt_run(c, A, Bn, D); }); }
    { M At = mat(CUDA_R_16BF, k, m, k); LtCall c; c.ta = 1, c.tb = 1, c.epi = bg, c.bias = bias;
      expect_fail("bgradb TRANSA T", "BGRADB with TRANSA T", [&] { lt_run(c, At, Bt, D); }); }
    { LtCall c; c.tb = 1, c.epi = bg, c.bias = bias;
      expect_fail("bgradb fp32 A/B", "A/B CUDA_R_32F", [&] { lt_run(c, A32, Bt32, D); });
      expect_fail("bgradb bf16 D", "C/D CUDA_R_16BF", [&] { lt_run(c, A, Bt, Dbf); }); }
    { LtCall c; c.tb = 1, c.epi = bg, c.bias = bias, c.bias_type = CUDA_R_16BF;
      expect_fail("bgradb bf16 bias", "bias gradient CUDA_R_16BF is not modelled", [&] { lt_run(c, A, Bt, D); }); }
    { LtCall c; c.tb = 1, c.epi = bg;
      expect_fail("bgradb bias NULL", "BGRADB writes the bias gradient but CUBLASLT_MATMUL_DESC_BIAS_POINTER is NULL",
                  [&] { lt_run(c, A, Bt, D); }); }
    { float *shortb = (float *)dev_alloc((size_t)(n - 1) * 4); LtCall c; c.tb = 1, c.epi = bg, c.bias = shortb;
      expect_fail("bgradb bias extent", "the n columns of D", [&] { lt_run(c, A, Bt, D); }); }
    { LtCall c; c.tb = 1, c.epi = bg, c.bias = D.p;
      expect_fail("bgradb bias overlaps D", "overlaps", [&] { lt_run(c, A, Bt, D); }); }
    { LtCall c; c.tb = 1, c.epi = bg, c.bias = bias, c.alpha = 0.5f;
      expect_fail("bgradb alpha", "only alpha 1 is modelled", [&] { lt_run(c, A, Bt, D); }); }
    { LtCall c; c.tb = 1, c.epi = CUBLASLT_EPILOGUE_BGRADA, c.bias = bias;
      expect_fail("bgrada", "epilogue 256 is not modelled", [&] { lt_run(c, A, Bt, D); }); }
    printf("cuBLASLt BGRADB: other layouts, types, BGRADA and bad bias pointers abort by name\n");
}

static void test_blas_correct(cublasHandle_t h) {
    const int m = 9, n = 6, k = 11;
    int runs = 0;
    for (int ex = 0; ex < 3; ex++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int beta = 0; beta < 2; beta++) {
                    cudaDataType at = ex == 0 ? CUDA_R_32F : CUDA_R_16BF, ct = ex == 2 ? CUDA_R_16BF : CUDA_R_32F;
                    M A = ta ? mat(at, k, m, k + 2) : mat(at, m, k, m + 1);
                    M B = tb ? mat(at, n, k, n) : mat(at, k, n, k + 3);
                    M C = mat(ct, m, n, m + 2);
                    std::vector<char> c0(((size_t)(n - 1) * C.ld + m) * tsize(ct));
                    memcpy(c0.data(), C.p, c0.size());
                    M C0 = C;
                    C0.p = c0.data();
                    float alpha = 1.5f, b = (float)beta;
                    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
                    if (ex == 0)
                        ok(cublasSgemm(h, oa, ob, m, n, k, &alpha, (float *)A.p, A.ld, (float *)B.p, B.ld, &b,
                                       (float *)C.p, C.ld), "sgemm");
                    else
                        ok(cublasGemmEx(h, oa, ob, m, n, k, &alpha, A.p, at, A.ld, B.p, at, B.ld, &b, C.p, ct, C.ld,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "gemmex");
                    Ref r = reference(ta, tb, m, n, k, A, B, &C0, alpha, beta, nullptr, false, ct);
                    int bad = mismatches(r.d, C);
                    CHECK(bad == 0, "%s ta %d tb %d beta %d: %d mismatches", ex ? "GemmEx" : "Sgemm", ta, tb, beta, bad);
                    runs++;
                }
    CHECK(g_last_stream == (cudaStream_t)0x1234, "cublasSetStream's stream used");
    /* TF32 math: close to, but not the same as, fp32 */
    ok(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), "tf32");
    M A = mat(CUDA_R_32F, 8, 64, 8), B = mat(CUDA_R_32F, 64, 8, 64), C = mat(CUDA_R_32F, 8, 8, 8);
    float one = 1, zero = 0;
    ok(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 64, &one, (float *)A.p, 8, (float *)B.p, 64, &zero,
                   (float *)C.p, 8), "sgemm tf32");
    Ref r = reference(0, 0, 8, 8, 64, A, B, nullptr, 1, 0, nullptr, false, CUDA_R_32F);
    double maxd = 0;
    for (int i = 0; i < 64; i++) maxd = std::fmax(maxd, std::fabs(r.d[i] - get(C, i % 8, i / 8)));
    CHECK(maxd > 0 && maxd < 1e-2, "TF32 differs from fp32 by %g", maxd);
    ok(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "pedantic");
    printf("cuBLAS: %d Sgemm/GemmEx configurations bit-identical; TF32 math off by %.2g\n", runs, maxd);
}

/* ------------------------------------------------------------------ invalid arguments */

static void test_lt_invalid() {
    const int m = 16, n = 8, k = 8;
    M A = mat(CUDA_R_32F, m, k, m), B = mat(CUDA_R_32F, k, n, k), D = mat(CUDA_R_32F, m, n, m);
    M Abf = mat(CUDA_R_16BF, m, k, m), Bbf = mat(CUDA_R_16BF, k, n, k), Dbf = mat(CUDA_R_16BF, m, n, m);
    LtCall base;
    CHECK(lt_run(base, A, B, D) == CUBLAS_STATUS_SUCCESS, "baseline");
    { LtCall c; c.lay_override = 1, c.arows = m, c.acols = k, c.alda = m - 1;
      expect_fail("ld < rows", "leading dimension 15 is less than its 16 rows", [&] { lt_run(c, A, B, D); }); }
    { LtCall c; c.lay_override = 1, c.arows = m, c.acols = k + 1, c.alda = m;
      expect_fail("k mismatch", "their k differ", [&] { lt_run(c, A, B, D); }); }
    { LtCall c; c.lay_override = 1, c.arows = m + 8, c.acols = k, c.alda = m + 8;
      expect_fail("m vs D", "op(A) op(B) is", [&] { lt_run(c, A, B, D); }); }
    { LtCall c; c.lay_override = 1, c.arows = m, c.acols = k, c.alda = m + 4; /* wrong ld: reads past A */
      expect_fail("wrong ld past allocation", "A (16 x 8 CUDA_R_32F, ld 20", [&] { lt_run(c, A, B, D); }); }
    { LtCall c; c.ta = 1; c.lay_override = 1, c.arows = m, c.acols = k, c.alda = m; /* transposed: op(A) 8x16 */
      expect_fail("transposed operand", "their k differ", [&] { lt_run(c, A, B, D); }); }
    { M A4 = A; A4.p = (char *)A.p + 4; LtCall c; /* 4-byte aligned A with 16 promised */
      M Abig = mat(CUDA_R_32F, m + 1, k, m + 1); A4.p = (char *)Abig.p + 4;
      expect_fail("alignment", "A 0x", [&] { lt_run(c, A4, B, D); });
      c.align_ab = 4; CHECK(lt_run(c, A4, B, D) == CUBLAS_STATUS_SUCCESS, "4-byte alignment promised"); }
    { LtCall c; c.align_ab = 2; CHECK(lt_run(c, A, B, D) == CUBLAS_STATUS_NOT_SUPPORTED, "alignment below element"); }
    { LtCall c; c.ws_bytes = 256;
      expect_fail("workspace size", "workspaceSizeInBytes 256 is less than", [&] { lt_run(c, A, B, D); }); }
    { std::vector<char> host(kWs); LtCall c; c.ws = host.data();
      expect_fail("host workspace", "workspace 0x", [&] { lt_run(c, A, B, D); }); }
    { LtCall c; c.max_ws = 0, c.ws_bytes = 0; CHECK(lt_run(c, A, B, D) == CUBLAS_STATUS_SUCCESS, "no workspace"); }
    CHECK(lt_run(base, A, B, Dbf) == CUBLAS_STATUS_NOT_SUPPORTED, "fp32 A/B with bf16 D refused");
    CHECK(lt_run(base, Abf, B, D) == CUBLAS_STATUS_NOT_SUPPORTED, "mixed A/B types refused");
    { LtCall c; c.epi = CUBLASLT_EPILOGUE_BIAS;
      expect_fail("bias NULL", "BIAS_POINTER is NULL", [&] { lt_run(c, A, B, D); }); }
    { M shortb = mat(CUDA_R_32F, m - 1, 1, m - 1); LtCall c; c.epi = CUBLASLT_EPILOGUE_BIAS, c.bias = shortb.p;
      expect_fail("bias extent", "bias 0x", [&] { lt_run(c, A, B, D); }); }
    { M bb = mat(CUDA_R_16BF, m, 1, m); LtCall c; c.epi = CUBLASLT_EPILOGUE_BIAS, c.bias = bb.p, c.bias_type = CUDA_R_16BF;
      CHECK(lt_run(c, A, B, D) == CUBLAS_STATUS_NOT_SUPPORTED, "bf16 bias with fp32 D refused"); }
    { M bb = mat(CUDA_R_16BF, m, 1, m); LtCall c; c.epi = CUBLASLT_EPILOGUE_BIAS, c.bias = bb.p;
      M b2 = mat(CUDA_R_16BF, m + 1, 1, m + 1); c.bias_at_run = (char *)b2.p + 2;
      expect_fail("bias alignment", "bias 0x", [&] { lt_run(c, Abf, Bbf, Dbf); }); }
    M aux = mat(CUDA_R_16BF, m, n, m);
    for (int64_t ald : {(int64_t)m + 4, (int64_t)m - 8, (int64_t)0}) {
        LtCall c; c.epi = CUBLASLT_EPILOGUE_GELU_AUX, c.aux = aux.p, c.aux_ld = ald;
        expect_fail("aux ld", "EPILOGUE_AUX_LD", [&] { lt_run(c, Abf, Bbf, Dbf); });
    }
    { LtCall c; c.epi = CUBLASLT_EPILOGUE_GELU_AUX, c.aux = aux.p, c.aux_ld = m + 8;
      expect_fail("aux extent", "aux (EPILOGUE_AUX_POINTER", [&] { lt_run(c, Abf, Bbf, Dbf); }); }
    { LtCall c; c.epi = CUBLASLT_EPILOGUE_GELU_AUX; c.aux_ld = m;
      cublasLtMatmulDesc_t op; ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "d");
      int64_t ld = m; ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), "ld");
      cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_GELU_AUX;
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "e");
      cublasLtMatrixLayout_t la, lb, ld_;
      ok(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m), "la");
      ok(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k), "lb");
      ok(cublasLtMatrixLayoutCreate(&ld_, CUDA_R_16BF, m, n, m), "lc");
      float one = 1, zero = 0;
      expect_fail("aux NULL", "EPILOGUE_AUX_POINTER", [&] {
          cublasLtMatmul(g_lt, op, &one, Abf.p, la, Bbf.p, lb, &zero, Dbf.p, ld_, Dbf.p, ld_, nullptr, nullptr, 0, nullptr); });
      cublasLtMatmulAlgo_t junk; memset(&junk, 0x5A, sizeof junk);
      expect_fail("garbage algo", "not one cublasLtMatmulAlgoGetHeuristic returned", [&] {
          cublasLtMatmul(g_lt, op, &one, Abf.p, la, Bbf.p, lb, &zero, Dbf.p, ld_, Dbf.p, ld_, &junk, nullptr, 0, nullptr); });
      expect_fail("alpha on device", "device memory", [&] {
          cublasLtMatmul(g_lt, op, Abf.p, Abf.p, la, Bbf.p, lb, &zero, Dbf.p, ld_, Dbf.p, ld_, nullptr, nullptr, 0, nullptr); });
      expect_fail("D overlaps A", "overlaps", [&] {
          cublasLtMatmul(g_lt, op, &one, Abf.p, la, Bbf.p, lb, &zero, Abf.p, ld_, Abf.p, ld_, nullptr, nullptr, 0, nullptr); });
      M Dw = mat(CUDA_R_16BF, m + 8, n, m + 8);
      cublasLtMatrixLayout_t lw; ok(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16BF, m, n, m + 8), "lw");
      expect_fail("in place, two layouts", "in place (C == D)", [&] {
          cublasLtMatmul(g_lt, op, &one, Abf.p, la, Bbf.p, lb, &one, Dw.p, ld_, Dw.p, lw, nullptr, nullptr, 0, nullptr); });
      expect_fail("wrong attribute size", "sizeInBytes 4, but the attribute is 8", [&] {
          int32_t small = 8; cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &small, sizeof small); });
      expect_fail("epilogue not modelled", "not modelled", [&] {
          cublasLtEpilogue_t r = CUBLASLT_EPILOGUE_RELU; cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &r, sizeof r); });
      ok(cublasLtMatrixLayoutDestroy(la), "destroy la");
      expect_fail("layout use after destroy", "used after it was destroyed", [&] {
          cublasLtMatmul(g_lt, op, &one, Abf.p, la, Bbf.p, lb, &zero, Dbf.p, ld_, Dbf.p, ld_, nullptr, nullptr, 0, nullptr); });
      expect_fail("double destroy", "used after it was destroyed", [&] { cublasLtMatrixLayoutDestroy(la); });
      expect_fail("wrong kind", "is a cublasLtMatrixLayout_t, not a cublasLtMatmulDesc_t", [&] {
          cublasLtMatmulDescDestroy((cublasLtMatmulDesc_t)lb); });
      (void)c; }
    { LtCall c; c.change_trans_after = true; c.lay_override = 0;
      M Asq = mat(CUDA_R_32F, m, m, m), Bsq = mat(CUDA_R_32F, m, n, m);
      expect_fail("algo for another problem", "algo was found for another problem", [&] { lt_run(c, Asq, Bsq, D); }); }
    { LtCall c; c.destroy_desc_first = true;
      expect_fail("desc use after destroy", "used after it was destroyed", [&] { lt_run(c, A, B, D); }); }
    /* column blocks of one buffer: extents overlap, elements do not */
    { M X = mat(CUDA_R_32F, 2 * m, k, 2 * m); M Ain = X; Ain.rows = m; M Dout = X; Dout.p = (char *)X.p + m * 4;
      Dout.rows = m, Dout.cols = n; LtCall c; c.align_cd = 4;
      M Bx = mat(CUDA_R_32F, k, n, k);
      std::vector<char> saveA(((size_t)(k - 1) * 2 * m + m) * 4); memcpy(saveA.data(), X.p, saveA.size());
      M A0 = Ain; A0.p = saveA.data();
      CHECK(lt_run(c, Ain, Bx, Dout) == CUBLAS_STATUS_SUCCESS, "interleaved column blocks accepted");
      CHECK(mismatches(reference(0, 0, m, n, k, A0, Bx, nullptr, 1, 0, nullptr, false, CUDA_R_32F).d, Dout) == 0,
            "interleaved column blocks values"); }
}

static void test_blas_invalid(cublasHandle_t h) {
    M A = mat(CUDA_R_32F, 8, 4, 8), B = mat(CUDA_R_32F, 4, 6, 4), C = mat(CUDA_R_32F, 8, 6, 8);
    float one = 1, zero = 0;
    float *a = (float *)A.p, *b = (float *)B.p, *c = (float *)C.p;
    ok(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, 8, b, 4, &zero, c, 8), "baseline");
    expect_fail("lda", "lda 7 < max(1, 8)", [&] { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, 7, b, 4, &zero, c, 8); });
    expect_fail("ldb", "ldb 3 <", [&] { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, 8, b, 3, &zero, c, 8); });
    expect_fail("ldc", "ldc 7 <", [&] { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, 8, b, 4, &zero, c, 7); });
    expect_fail("transposed A past allocation", "A (4 x 8", [&] {
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 8, 6, 4, &one, a, 4, b, 4, &zero, c, 8); /* needs 4 x 8 at ld 4: fits */
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 8, 6, 4, &one, a, 5, b, 4, &zero, c, 8); });
    expect_fail("C past allocation", "C (8 x 6", [&] { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, 8, b, 4, &zero, c, 9); });
    expect_fail("C overlaps A", "overlaps", [&] { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 4, &one, a, 8, b, 4, &zero, a, 8); });
    expect_fail("host C", "not inside one live device allocation", [&] {
        std::vector<float> hc(64); cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, 8, b, 4, &zero, hc.data(), 8); });
    expect_fail("GemmEx types", "not a combination cuBLAS supports", [&] {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 6, 4, &one, a, CUDA_R_32F, 8, b, CUDA_R_32F, 4, &zero, c,
                     CUDA_R_16BF, 8, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); });
    expect_fail("math mode", "not a cublasMath_t", [&] { cublasSetMathMode(h, (cublasMath_t)77); });
    expect_fail("op", "not a valid cublasOperation_t", [&] {
        cublasSgemm(h, (cublasOperation_t)3, CUBLAS_OP_N, 8, 6, 4, &one, a, 8, b, 4, &zero, c, 8); });
    cublasHandle_t h2;
    ok(cublasCreate(&h2), "create");
    ok(cublasDestroy(h2), "destroy");
    expect_fail("handle after destroy", "used after it was destroyed", [&] { cublasSetStream(h2, nullptr); });
}

/* GTCSIM_GEMM_AUDIT=1: a GEMM off the 16-byte path aborts naming the first operand at fault */
static void test_audit(cublasHandle_t h) {
    setenv("GTCSIM_GEMM_AUDIT", "1", 1);
    const cudaDataType bf = CUDA_R_16BF;
    { /* every operand aligned: runs */
        M A = mat(bf, 16, 24, 16), B = mat(bf, 24, 5, 24), D = mat(bf, 16, 5, 16);
        LtCall c;
        CHECK(lt_run(c, A, B, D) == CUBLAS_STATUS_SUCCESS, "audit: an aligned bf16 GEMM runs");
    }
    { /* D's contiguous extent 17 rows: GPT-2's odd vocabulary as the logits' m */
        M A = mat(bf, 24, 17, 24), B = mat(bf, 24, 5, 24), D = mat(bf, 17, 5, 24);
        LtCall c;
        c.ta = 1; /* A stored [k, m]: its contiguous extent is k */
        expect_fail("audit: odd m", "D's 17 stored rows", [&] { lt_run(c, A, B, D); });
    }
    { /* A's leading dimension 20 elements = 40 bytes */
        M A = mat(bf, 16, 24, 20), B = mat(bf, 24, 5, 24), D = mat(bf, 16, 5, 16);
        LtCall c;
        c.align_ab = 8;
        expect_fail("audit: ld", "A's leading dimension 20", [&] { lt_run(c, A, B, D); });
    }
    { /* aligned, but only 2 bytes promised to the heuristic */
        M A = mat(bf, 16, 24, 16), B = mat(bf, 24, 5, 24), D = mat(bf, 16, 5, 16);
        LtCall c;
        c.align_ab = 2;
        expect_fail("audit: promise", "promised to the heuristic only 2-byte", [&] { lt_run(c, A, B, D); });
    }
    { /* plain cuBLAS: never the 16-byte path */
        M A = mat(bf, 16, 8, 16), B = mat(bf, 8, 4, 8), C = mat(bf, 16, 4, 16);
        const float one = 1, zero = 0;
        expect_fail("audit: cublasGemmEx", "plain cuBLAS (cublasGemmEx)", [&] {
            cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 16, 4, 8, &one, A.p, bf, 16, B.p, bf, 8, &zero, C.p, bf, 16,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); });
    }
    unsetenv("GTCSIM_GEMM_AUDIT");
    printf("GEMM audit: aligned runs; odd extent, ld, promise and plain cuBLAS each named\n");
}

int main() {
    ok(cublasLtCreate(&g_lt), "cublasLtCreate");
    g_ws = dev_alloc(kWs);
    cublasHandle_t h;
    ok(cublasCreate(&h), "cublasCreate");
    ok(cublasSetStream(h, (cudaStream_t)0x1234), "cublasSetStream");
    ok(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    try {
        test_lt_correct();
        test_lt_bgradb();
        test_lt_bgradb_invalid();
        test_blas_correct(h);
        test_lt_invalid();
        test_blas_invalid(h);
        test_audit(h);
    } catch (const SimFail &e) {
        fprintf(stderr, "FAIL: unexpected abort: %s\n", e.what());
        g_failures++;
    }
    CHECK(g_noted_writes > 0, "note_access called for outputs");
    CHECK(strcmp(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "the functionality requested is not supported") == 0,
          "status string");
    ok(cublasDestroy(h), "cublasDestroy");
    ok(cublasLtDestroy(g_lt), "cublasLtDestroy");
    printf("test_cublas_sim: %d checks, %d failures, %d stream works queued\n", g_checks, g_failures, g_enqueued);
    return g_failures ? 1 : 0;
}
