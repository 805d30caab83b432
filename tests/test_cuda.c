/* test_cuda.c - checks specific to the CUDA backend, run against the CPU backend in the same
 * process. Without CUDA in the build, or without a visible GPU, every test here but the first is
 * skipped (never failed). The op-by-op comparison with the double reference lives in test_ops.c
 * (GTRAIN_TEST_DEVICE=cuda); this file covers what those tests cannot see:
 *   - no GPU: cuda_device_count() is 0 and device=cuda fails with one clear line;
 *   - the copy stream: offload copies are ordered after compute issued before them, and compute
 *     after offload_wait sees the copied data;
 *   - shapes the op tests do not reach: head size 128 (attention's large shared-memory path),
 *     T not a multiple of the tiles, B*T spanning several chunks of the encoder's dwte kernel;
 *   - encoder backward adds in the CPU's order, so it must match the CPU bit for bit;
 *   - a GEMM on pointers that are not 16-byte aligned (the cuBLASLt 4-byte-alignment path). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#ifdef GT_HAVE_CUDA

typedef struct {
    Backend *cpu, *gpu;
} Pair;

static void pair_open(Pair *p) {
    GtError err = {0};
    memset(p, 0, sizeof *p);
    if (cuda_device_count() <= 0) cr_skip_test("no GPU visible");
    cr_assert_eq(cuda_backend_create(&p->gpu, 0, &err), 0, "cuda backend: %s", err.msg);
    cr_assert_eq(cpu_backend_create(&p->cpu, 0, &err), 0, "cpu backend: %s", err.msg);
}

static void pair_close(Pair *p) {
    backend_close(p->gpu);
    backend_close(p->cpu);
}

static uint64_t rng_state = 12345;
static float frand(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}
static float *rand_host(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof(float) + 4);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) h[i] = frand(lo, hi);
    return h;
}

/* device buffer (on backend b) holding a copy of host h */
static void *dup_to(Backend *b, const void *h, size_t bytes) {
    GtError err = {0};
    void *d = b->ops->dev_alloc(b, bytes ? bytes : 4);
    cr_assert_not_null(d);
    if (h) cr_assert_eq(b->ops->to_device(b, d, h, bytes, &err), 0, "%s", err.msg);
    return d;
}
static float *dnan_on(Backend *b, size_t n) {
    float *h = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *d = dup_to(b, h, n * sizeof(float));
    free(h);
    return d;
}
static float *fetch(Backend *b, const float *d, size_t n) {
    GtError err = {0};
    float *h = malloc(n * sizeof(float) + 4);
    cr_assert_eq(b->ops->to_host(b, h, d, n * sizeof(float), &err), 0, "%s", err.msg);
    return h;
}
/* max|a-b| / max(max|b|, 1e-6); infinite on NaN */
static double rel(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 1e-6;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

#define TOL 1e-5

/* attention forward + backward, GPU vs CPU */
static void check_attention(Pair *p, int B, int T, int C, int NH) {
    size_t n3 = (size_t)B * T * 3 * C, nc = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = rand_host(n3, -2, 2), *dout = rand_host(nc, -1, 1);
    float *res[2][4];
    Backend *bs[2] = {p->cpu, p->gpu};
    for (int k = 0; k < 2; k++) {
        Backend *b = bs[k];
        float *d_qkv = dup_to(b, qkv, n3 * sizeof(float)), *d_dout = dup_to(b, dout, nc * sizeof(float));
        float *d_out = dnan_on(b, nc), *d_lse = dnan_on(b, nl), *d_dqkv = dnan_on(b, n3), *d_ws = dnan_on(b, nl);
        b->ops->attention_forward(b, d_out, d_lse, d_qkv, B, T, C, NH);
        b->ops->attention_backward(b, d_dqkv, d_ws, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
        res[k][0] = fetch(b, d_out, nc);
        res[k][1] = fetch(b, d_lse, nl);
        res[k][2] = fetch(b, d_dqkv, n3);
        res[k][3] = fetch(b, d_ws, nl);
        void *bufs[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv, d_ws};
        for (int i = 0; i < 6; i++) b->ops->dev_free(b, bufs[i]);
    }
    const char *names[] = {"out", "lse", "dqkv", "D (workspace)"};
    size_t ns[] = {nc, nl, n3, nl};
    for (int i = 0; i < 4; i++) {
        double e = rel(res[1][i], res[0][i], ns[i]);
        cr_expect_leq(e, TOL, "attention %s B=%d T=%d C=%d NH=%d: gpu vs cpu rel %.3g", names[i], B, T, C, NH, e);
        free(res[0][i]);
        free(res[1][i]);
    }
    free(qkv);
    free(dout);
}

Test(cuda, attention_head_sizes_and_ragged_tiles, .timeout = 120) {
    Pair p;
    pair_open(&p);
    check_attention(&p, 2, 77, 256, 2);   /* hs 128: > 48 KiB shared memory; T off the tiles */
    check_attention(&p, 1, 130, 192, 3);  /* hs 64 */
    check_attention(&p, 2, 33, 60, 2);    /* hs 30: odd channel counts, not a multiple of 32 */
    check_attention(&p, 1, 1, 64, 1);     /* a single position */
    pair_close(&p);
}

Test(cuda, encoder_backward_bit_identical_to_cpu) {
    Pair p;
    pair_open(&p);
    int B = 3, T = 300, C = 70, V = 17; /* B*T = 900 positions: several 256-chunks, many repeats */
    size_t BT = (size_t)B * T;
    int *tok = malloc(BT * sizeof(int));
    for (size_t i = 0; i < BT; i++) tok[i] = (int)(frand(0, 1) * V) % V;
    float *dout = rand_host(BT * C, -1, 1), *dwte0 = rand_host((size_t)V * C, -1, 1);
    float *dwpe0 = rand_host((size_t)T * C, -1, 1);
    float *res[2][2];
    Backend *bs[2] = {p.cpu, p.gpu};
    for (int k = 0; k < 2; k++) {
        Backend *b = bs[k];
        int *d_tok = dup_to(b, tok, BT * sizeof(int));
        float *d_dout = dup_to(b, dout, BT * C * sizeof(float));
        float *d_dwte = dup_to(b, dwte0, (size_t)V * C * sizeof(float));
        float *d_dwpe = dup_to(b, dwpe0, (size_t)T * C * sizeof(float));
        b->ops->encoder_backward(b, d_dwte, d_dwpe, d_dout, d_tok, B, T, C);
        res[k][0] = fetch(b, d_dwte, (size_t)V * C);
        res[k][1] = fetch(b, d_dwpe, (size_t)T * C);
        void *bufs[] = {d_tok, d_dout, d_dwte, d_dwpe};
        for (int i = 0; i < 4; i++) b->ops->dev_free(b, bufs[i]);
    }
    cr_expect(memcmp(res[0][0], res[1][0], (size_t)V * C * sizeof(float)) == 0, "dwte: gpu != cpu bits");
    cr_expect(memcmp(res[0][1], res[1][1], (size_t)T * C * sizeof(float)) == 0, "dwpe: gpu != cpu bits");
    for (int k = 0; k < 2; k++) {
        free(res[k][0]);
        free(res[k][1]);
    }
    free(tok);
    free(dout);
    free(dwte0);
    free(dwpe0);
    pair_close(&p);
}

/* compute, then offload: the copy must see the compute's result; offload back, wait, then
 * compute: the compute must see the copied data. Repeated on both slots, large enough that the
 * kernels are still running when the copy is issued. */
Test(cuda, offload_ordered_with_compute) {
    Pair p;
    pair_open(&p);
    Backend *b = p.gpu;
    size_t n = (size_t)16 << 20; /* 64 MiB */
    float *x = rand_host(n, -1, 1);
    float *d = dup_to(b, x, n * sizeof(float));
    float *h = b->ops->host_alloc(b, n * sizeof(float));
    cr_assert_not_null(h);
    for (int slot = 0; slot < 2; slot++) {
        GtError err = {0};
        cr_assert_eq(b->ops->to_device(b, d, x, n * sizeof(float), &err), 0, "%s", err.msg);
        b->ops->scale(b, d, 2.0f, n); /* async on compute */
        b->ops->offload_to_host(b, h, d, n * sizeof(float), slot);
        b->ops->offload_wait(b, slot);
        b->ops->synchronize(b);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != x[i] * 2.0f;
        cr_expect_eq(bad, 0, "slot %d: %zu elements copied out before the compute finished", slot, bad);
        for (size_t i = 0; i < n; i++) h[i] = x[i];
        b->ops->zero(b, d, n * sizeof(float));
        b->ops->offload_to_device(b, d, h, n * sizeof(float), slot);
        b->ops->offload_wait(b, slot);
        b->ops->scale(b, d, 3.0f, n); /* must run after the copy */
        float *got = fetch(b, d, n);
        bad = 0;
        for (size_t i = 0; i < n; i++) bad += got[i] != x[i] * 3.0f;
        cr_expect_eq(bad, 0, "slot %d: %zu elements computed before the copy in landed", slot, bad);
        free(got);
    }
    b->ops->host_free(b, h);
    b->ops->dev_free(b, d);
    free(x);
    pair_close(&p);
}

/* matmul forward/backward on pointers offset by one float (4-byte aligned only) */
Test(cuda, matmul_unaligned_pointers) {
    Pair p;
    pair_open(&p);
    int N = 37, C = 45, OC = 29;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = rand_host(ni, -1, 1), *w = rand_host(nw, -1, 1), *bias = rand_host(OC, -1, 1);
    float *dout = rand_host(no, -1, 1), *dw0 = rand_host(nw, -1, 1), *db0 = rand_host(OC, -1, 1);
    float *res[2][4];
    Backend *bs[2] = {p.cpu, p.gpu};
    for (int k = 0; k < 2; k++) {
        Backend *b = bs[k];
        /* one float of slack at the front of every buffer */
        float *d_inp = (float *)dup_to(b, NULL, (ni + 1) * sizeof(float)) + 1;
        float *d_w = (float *)dup_to(b, NULL, (nw + 1) * sizeof(float)) + 1;
        float *d_b = (float *)dup_to(b, NULL, (OC + 1) * sizeof(float)) + 1;
        float *d_out = (float *)dup_to(b, NULL, (no + 1) * sizeof(float)) + 1;
        float *d_dout = (float *)dup_to(b, NULL, (no + 1) * sizeof(float)) + 1;
        float *d_dinp = (float *)dup_to(b, NULL, (ni + 1) * sizeof(float)) + 1;
        float *d_dw = (float *)dup_to(b, NULL, (nw + 1) * sizeof(float)) + 1;
        float *d_db = (float *)dup_to(b, NULL, (OC + 1) * sizeof(float)) + 1;
        GtError err = {0};
        cr_assert_eq(b->ops->to_device(b, d_inp, inp, ni * sizeof(float), &err), 0);
        cr_assert_eq(b->ops->to_device(b, d_w, w, nw * sizeof(float), &err), 0);
        cr_assert_eq(b->ops->to_device(b, d_b, bias, OC * sizeof(float), &err), 0);
        cr_assert_eq(b->ops->to_device(b, d_dout, dout, no * sizeof(float), &err), 0);
        cr_assert_eq(b->ops->to_device(b, d_dw, dw0, nw * sizeof(float), &err), 0);
        cr_assert_eq(b->ops->to_device(b, d_db, db0, OC * sizeof(float), &err), 0);
        b->ops->matmul_forward(b, d_out, d_inp, d_w, d_b, N, C, OC);
        b->ops->matmul_backward(b, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
        res[k][0] = fetch(b, d_out, no);
        res[k][1] = fetch(b, d_dinp, ni);
        res[k][2] = fetch(b, d_dw, nw);
        res[k][3] = fetch(b, d_db, OC);
        float *bufs[] = {d_inp, d_w, d_b, d_out, d_dout, d_dinp, d_dw, d_db};
        for (int i = 0; i < 8; i++) b->ops->dev_free(b, bufs[i] - 1);
    }
    const char *names[] = {"out", "dinp", "dw (accumulated)", "dbias (accumulated)"};
    size_t ns[] = {no, ni, nw, (size_t)OC};
    for (int i = 0; i < 4; i++) {
        double e = rel(res[1][i], res[0][i], ns[i]);
        cr_expect_leq(e, TOL, "unaligned matmul %s: gpu vs cpu rel %.3g", names[i], e);
        free(res[0][i]);
        free(res[1][i]);
    }
    free(inp);
    free(w);
    free(bias);
    free(dout);
    free(dw0);
    free(db0);
    pair_close(&p);
}

/* no GPU: the count is 0 (never an abort) and asking for cuda is one clear error */
Test(cuda, no_gpu_is_a_clean_error) {
    if (cuda_device_count() > 0) cr_skip_test("a GPU is visible");
    Backend *b = NULL;
    GtError err = {0};
    cr_expect_neq(backend_open(&b, DEVICE_CUDA, 0, 1, &err), 0);
    cr_expect_null(b);
    cr_expect_neq(err.code, 0);
    cr_expect(strstr(err.msg, "cuda") != NULL, "message: %s", err.msg);
    cr_expect(strchr(err.msg, '\n') == NULL, "one line: %s", err.msg);
}

#else

Test(cuda, not_built) { cr_skip_test("built without CUDA (built: %s)", backend_built_list()); }

#endif
