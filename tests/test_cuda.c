/* test_cuda.c - checks specific to the CUDA backend, run against the CPU backend in the same
 * process. Without CUDA in the build, or without a visible GPU, every test here but the first is
 * skipped (never failed). The op-by-op comparison with the double reference lives in test_ops.c
 * (GTRAIN_TEST_DEVICE=cuda); this file covers what those tests cannot see:
 *   - no GPU: backend_gpu_count() is 0 and device=cuda fails with one clear line;
 *   - the copy stream: offload copies are ordered after compute issued before them, and compute
 *     after offload_wait sees the copied data;
 *   - shapes the op tests do not reach: B*T spanning several chunks of the encoder's dwte kernel;
 *   - encoder backward adds in the CPU's order, so it must match the CPU bit for bit;
 *   - a GEMM on pointers that are not 16-byte aligned (the cuBLASLt 4-byte-alignment path);
 *   - bf16 activations: every act_t op against the CPU backend's bf16 emulation (the reference);
 *   - the Llama-family ops (rmsnorm, residual_rmsnorm, rope, swiglu, encoder without wpe) against
 *     the CPU backend, rope bit for bit;
 *   - bf16 matmul_gelu (the cuBLASLt GELU epilogue) gives the same bits whatever 16-byte-aligned
 *     buffers it is given.
 * The attention kernels' own checks are in test_cuda_attention.c; the shared fixture in
 * cuda_fixture.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#ifdef GT_HAVE_CUDA

#include "cuda_fixture.h"

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
        b->ops->encoder_backward(b, d_dwte, d_dwpe, d_dout, d_tok, B, T, C, NULL);
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
        b->ops->matmul_forward(b, d_out, d_inp, d_w, d_b, N, C, OC, OC);
        b->ops->matmul_backward(b, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, OC);
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

/* ------------------------------------------------------------------ bf16 activations
 *
 * Both backends with act dtype bf16, fed the same bf16 bytes. Every act_t op is run on both;
 * outputs are poisoned with NaN first (accumulated ones start from the same random values), then
 * fetched, widened to fp32 on the host and compared with the CPU's (max error relative to the
 * CPU's largest magnitude, NaN never passes). Both compute in fp32 and round each bf16 output
 * once, so they differ only where fp32 summation order (or tanhf/expf) moves a value across a
 * bf16 rounding boundary: one bf16 ulp (2^-8 relative) here and there. */

#define BF_MAX_OUT 48
typedef struct {
    int count[2];                /* per backend (0 cpu, 1 gpu): outputs kept so far */
    const char *name[BF_MAX_OUT];
    size_t len[BF_MAX_OUT];
    float *v[2][BF_MAX_OUT];     /* fp32 (widened when bf16) host copies */
} BfRes;

static void bf_keep(BfRes *r, int k, const char *name, float *host, size_t n) {
    int i = r->count[k]++;
    cr_assert_lt(i, BF_MAX_OUT);
    if (k == 0) {
        r->name[i] = name;
        r->len[i] = n;
    } else {
        cr_assert_str_eq(r->name[i], name); /* both backends keep the same outputs in order */
    }
    r->v[k][i] = host;
}
static void bf_keep_bf16(BfRes *r, int k, Backend *b, const char *name, const void *d, size_t n) {
    bf_keep(r, k, name, fetch_bf16(b, d, n), n);
}
static void bf_keep_f32(BfRes *r, int k, Backend *b, const char *name, const float *d, size_t n) {
    bf_keep(r, k, name, fetch(b, d, n), n);
}

/* one matmul shape and its inputs */
typedef struct {
    int N, C, OC;
    char name[4][48]; /* out, dinp, dw, dbias */
    uint16_t *inp, *w, *bias, *dout;
    float *dw0, *db0;
} BfMatmul;

/* host inputs shared by both backends */
typedef struct {
    int B, T, C, NH, V, N;
    uint16_t *ln_inp, *ln_w, *ln_b, *ln_dout, *ln_dinp0;
    float *ln_dw0, *ln_db0;
    BfMatmul mm[2];
    uint16_t *qkv, *att_dout;
    uint16_t *g_in, *g_dout, *add_y;
    uint16_t *logits;
    int *targets;
    int *tokens;
    uint16_t *wte, *wpe, *enc_dout;
    float *dwte0, *dwpe0;
    float *f32_src;
} BfIn;

static void bf_matmul_inputs(BfMatmul *m, int N, int C, int OC, const char *tag) {
    const char *what[4] = {"out", "dinp", "dw (accumulated)", "dbias (accumulated)"};
    m->N = N;
    m->C = C;
    m->OC = OC;
    for (int i = 0; i < 4; i++) snprintf(m->name[i], sizeof m->name[i], "matmul %s %s", tag, what[i]);
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    m->inp = rand_bf16(ni, -1, 1);
    m->w = rand_bf16(nw, -1, 1);
    m->bias = rand_bf16(OC, -1, 1);
    m->dout = rand_bf16(no, -1, 1);
    m->dw0 = rand_host(nw, -1, 1);
    m->db0 = rand_host(OC, -1, 1);
}

static void bf_matmul_free(BfMatmul *m) {
    free(m->inp);
    free(m->w);
    free(m->bias);
    free(m->dout);
    free(m->dw0);
    free(m->db0);
}

/* matmul forward (with bias) + backward (dinp, dw, dbias) on one shape */
static void bf16_matmul(Backend *b, int k, BfRes *r, const BfMatmul *m) {
    int N = m->N, C = m->C, OC = m->OC;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    void *d_inp = dup_to(b, m->inp, ni * 2), *d_w = dup_to(b, m->w, nw * 2);
    void *d_b = dup_to(b, m->bias, (size_t)OC * 2), *d_out = dnan_bf16_on(b, no);
    void *d_dout = dup_to(b, m->dout, no * 2), *d_dinp = dnan_bf16_on(b, ni);
    float *d_dw = dup_to(b, m->dw0, nw * sizeof(float));
    float *d_db = dup_to(b, m->db0, (size_t)OC * sizeof(float));
    b->ops->matmul_forward(b, d_out, d_inp, d_w, d_b, N, C, OC, OC);
    b->ops->matmul_backward(b, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, OC);
    bf_keep_bf16(r, k, b, m->name[0], d_out, no);
    bf_keep_bf16(r, k, b, m->name[1], d_dinp, ni);
    bf_keep_f32(r, k, b, m->name[2], d_dw, nw);
    bf_keep_f32(r, k, b, m->name[3], d_db, (size_t)OC);
    void *bufs[] = {d_inp, d_w, d_b, d_out, d_dout, d_dinp, d_dw, d_db};
    bf_free_all(b, bufs, 8);
}

/* every act_t op on backend b (k: 0 cpu, 1 gpu), outputs kept in r */
static void bf16_run(Backend *b, int k, const BfIn *in, BfRes *r) {
    backend_set_act_dtype(b, GT_BF16);
    int B = in->B, T = in->T, C = in->C, NH = in->NH, V = in->V, N = in->N;
    size_t NC = (size_t)N * C, NL = (size_t)B * NH * T, NV = (size_t)N * V;

    /* layernorm forward + backward (dinp, dw, dbias accumulate) */
    {
        void *inp = dup_to(b, in->ln_inp, NC * 2), *w = dup_to(b, in->ln_w, (size_t)C * 2);
        void *bias = dup_to(b, in->ln_b, (size_t)C * 2), *out = dnan_bf16_on(b, NC);
        float *mean = dnan_on(b, N), *rstd = dnan_on(b, N);
        b->ops->layernorm_forward(b, out, mean, rstd, inp, w, bias, N, C, 1e-5f);
        void *dout = dup_to(b, in->ln_dout, NC * 2), *dinp = dup_to(b, in->ln_dinp0, NC * 2);
        float *dw = dup_to(b, in->ln_dw0, (size_t)C * sizeof(float));
        float *db = dup_to(b, in->ln_db0, (size_t)C * sizeof(float));
        b->ops->layernorm_backward(b, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
        bf_keep_bf16(r, k, b, "layernorm out", out, NC);
        bf_keep_f32(r, k, b, "layernorm mean", mean, N);
        bf_keep_f32(r, k, b, "layernorm rstd", rstd, N);
        bf_keep_bf16(r, k, b, "layernorm dinp (accumulated)", dinp, NC);
        bf_keep_f32(r, k, b, "layernorm dw (accumulated)", dw, C);
        bf_keep_f32(r, k, b, "layernorm dbias (accumulated)", db, C);
        void *bufs[] = {inp, w, bias, out, mean, rstd, dout, dinp, dw, db};
        bf_free_all(b, bufs, 10);
    }

    /* matmul: 16-byte-aligned leading dims (cuBLASLt, bias epilogue), then odd ones (2-byte
     * alignment promise, bias through the fallback) */
    for (int i = 0; i < 2; i++) bf16_matmul(b, k, r, &in->mm[i]);

    /* the fused forward ops: residual + layernorm (res aliasing x), then matmul + gelu on both
     * matmul shapes (aligned: the GPU's GELU epilogue; odd sizes: its GEMM + gelu kernel) */
    {
        void *x = dup_to(b, in->ln_inp, NC * 2), *y = dup_to(b, in->add_y, NC * 2);
        void *w = dup_to(b, in->ln_w, (size_t)C * 2), *bias = dup_to(b, in->ln_b, (size_t)C * 2);
        void *out = dnan_bf16_on(b, NC);
        float *mean = dnan_on(b, N), *rstd = dnan_on(b, N);
        b->ops->residual_layernorm_forward(b, x, out, mean, rstd, x, y, w, bias, N, C, 1e-5f);
        bf_keep_bf16(r, k, b, "residual_layernorm res", x, NC);
        bf_keep_bf16(r, k, b, "residual_layernorm out", out, NC);
        bf_keep_f32(r, k, b, "residual_layernorm mean", mean, N);
        bf_keep_f32(r, k, b, "residual_layernorm rstd", rstd, N);
        void *bufs[] = {x, y, w, bias, out, mean, rstd};
        bf_free_all(b, bufs, 7);
    }
    for (int i = 0; i < 2; i++) {
        static const char *names[2][2] = {{"matmul_gelu (aligned) pre", "matmul_gelu (aligned) out"},
                                          {"matmul_gelu (odd sizes) pre", "matmul_gelu (odd sizes) out"}};
        const BfMatmul *m = &in->mm[i];
        size_t ni = (size_t)m->N * m->C, nw = (size_t)m->OC * m->C, no = (size_t)m->N * m->OC;
        void *d_inp = dup_to(b, m->inp, ni * 2), *d_w = dup_to(b, m->w, nw * 2);
        void *d_b = dup_to(b, m->bias, (size_t)m->OC * 2);
        void *d_pre = dnan_bf16_on(b, no), *d_out = dnan_bf16_on(b, no);
        backend_matmul_gelu_forward(b, d_out, d_pre, d_inp, d_w, d_b, m->N, m->C, m->OC);
        bf_keep_bf16(r, k, b, names[i][0], d_pre, no);
        bf_keep_bf16(r, k, b, names[i][1], d_out, no);
        void *bufs[] = {d_inp, d_w, d_b, d_pre, d_out};
        bf_free_all(b, bufs, 5);
    }

    /* attention forward + backward */
    {
        void *qkv = dup_to(b, in->qkv, 3 * NC * 2), *dout = dup_to(b, in->att_dout, NC * 2);
        void *out = dnan_bf16_on(b, NC), *dqkv = dnan_bf16_on(b, 3 * NC);
        float *lse = dnan_on(b, NL), *ws = dnan_on(b, backend_attention_workspace_floats(b->act_dtype, B, T, NH, NH, C / NH));
        b->ops->attention_forward(b, out, lse, qkv, B, T, NH, NH, C / NH, 0, NULL);
        b->ops->attention_backward(b, dqkv, ws, dout, qkv, out, lse, B, T, NH, NH, C / NH, 0, NULL);
        bf_keep_bf16(r, k, b, "attention out", out, NC);
        bf_keep_f32(r, k, b, "attention lse", lse, NL);
        bf_keep_bf16(r, k, b, "attention dqkv", dqkv, 3 * NC);
        bf_keep_f32(r, k, b, "attention D (workspace)", ws, NL);
        void *bufs[] = {qkv, dout, out, dqkv, lse, ws};
        bf_free_all(b, bufs, 6);
    }

    /* gelu forward + backward, add */
    {
        void *x = dup_to(b, in->g_in, NC * 2), *gout = dnan_bf16_on(b, NC);
        void *gdout = dup_to(b, in->g_dout, NC * 2), *gdinp = dnan_bf16_on(b, NC);
        void *y = dup_to(b, in->add_y, NC * 2), *sum = dnan_bf16_on(b, NC);
        b->ops->gelu_forward(b, gout, x, NC);
        b->ops->gelu_backward(b, gdinp, x, gdout, NC);
        b->ops->add(b, sum, x, y, NC);
        bf_keep_bf16(r, k, b, "gelu out", gout, NC);
        bf_keep_bf16(r, k, b, "gelu dinp", gdinp, NC);
        bf_keep_bf16(r, k, b, "add out", sum, NC);
        void *bufs[] = {x, gout, gdout, gdinp, y, sum};
        bf_free_all(b, bufs, 6);
    }

    /* crossentropy with the gradient written over the logits */
    {
        void *logits = dup_to(b, in->logits, NV * 2);
        int *tg = dup_to(b, in->targets, (size_t)N * sizeof(int));
        float *losses = dnan_on(b, N);
        b->ops->crossentropy(b, losses, logits, tg, N, V, V, 1.0f / (float)N, 1);
        bf_keep_f32(r, k, b, "crossentropy losses", losses, N);
        bf_keep_bf16(r, k, b, "crossentropy dlogits", logits, NV);
        void *bufs[] = {logits, tg, losses};
        bf_free_all(b, bufs, 3);
    }

    /* encoder forward + backward (dwte, dwpe fp32, accumulated) */
    {
        int *tok = dup_to(b, in->tokens, (size_t)N * sizeof(int));
        void *wte = dup_to(b, in->wte, (size_t)V * C * 2), *wpe = dup_to(b, in->wpe, (size_t)T * C * 2);
        void *out = dnan_bf16_on(b, NC), *dout = dup_to(b, in->enc_dout, NC * 2);
        float *dwte = dup_to(b, in->dwte0, (size_t)V * C * sizeof(float));
        float *dwpe = dup_to(b, in->dwpe0, (size_t)T * C * sizeof(float));
        b->ops->encoder_forward(b, out, tok, wte, wpe, B, T, C, NULL);
        b->ops->encoder_backward(b, dwte, dwpe, dout, tok, B, T, C, NULL);
        bf_keep_bf16(r, k, b, "encoder out", out, NC);
        bf_keep_f32(r, k, b, "encoder dwte (accumulated)", dwte, (size_t)V * C);
        bf_keep_f32(r, k, b, "encoder dwpe (accumulated)", dwpe, (size_t)T * C);
        void *bufs[] = {tok, wte, wpe, out, dout, dwte, dwpe};
        bf_free_all(b, bufs, 7);
    }

    /* to_act: fp32 -> bf16 */
    {
        float *src = dup_to(b, in->f32_src, NC * sizeof(float));
        void *dst = dnan_bf16_on(b, NC);
        b->ops->to_act(b, dst, src, NC);
        bf_keep_bf16(r, k, b, "to_act", dst, NC);
        void *bufs[] = {src, dst};
        bf_free_all(b, bufs, 2);
    }
}

Test(cuda, bf16_ops_match_cpu_bf16, .timeout = 120) {
    Pair p;
    pair_open(&p);
    BfIn in = {.B = 2, .T = 37, .C = 64, .NH = 2, .V = 50};
    in.N = in.B * in.T;
    size_t N = (size_t)in.N, C = (size_t)in.C, NC = N * C, V = (size_t)in.V, T = (size_t)in.T;
    in.ln_inp = rand_bf16(NC, -2, 2);
    in.ln_w = rand_bf16(C, 0.5f, 1.5f);
    in.ln_b = rand_bf16(C, -0.5f, 0.5f);
    in.ln_dout = rand_bf16(NC, -1, 1);
    in.ln_dinp0 = rand_bf16(NC, -1, 1);
    in.ln_dw0 = rand_host(C, -1, 1);
    in.ln_db0 = rand_host(C, -1, 1);
    bf_matmul_inputs(&in.mm[0], in.N, in.C, 3 * in.C, "(aligned)");
    bf_matmul_inputs(&in.mm[1], 37, 45, 29, "(odd sizes)");
    in.qkv = rand_bf16(3 * NC, -2, 2);
    in.att_dout = rand_bf16(NC, -1, 1);
    in.g_in = rand_bf16(NC, -3, 3);
    in.g_dout = rand_bf16(NC, -1, 1);
    in.add_y = rand_bf16(NC, -3, 3);
    in.logits = rand_bf16(N * V, -4, 4);
    in.targets = malloc(N * sizeof(int));
    in.tokens = malloc(N * sizeof(int));
    cr_assert(in.targets && in.tokens);
    for (size_t i = 0; i < N; i++) {
        in.targets[i] = i % 7 == 3 ? -100 : (int)(frand(0, 1) * in.V) % in.V;
        in.tokens[i] = (int)(frand(0, 1) * in.V) % in.V;
    }
    in.wte = rand_bf16(V * C, -1, 1);
    in.wpe = rand_bf16(T * C, -1, 1);
    in.enc_dout = rand_bf16(NC, -1, 1);
    in.dwte0 = rand_host(V * C, -1, 1);
    in.dwpe0 = rand_host(T * C, -1, 1);
    in.f32_src = rand_host(NC, -3, 3);

    BfRes r;
    memset(&r, 0, sizeof r);
    bf16_run(p.cpu, 0, &in, &r);
    bf16_run(p.gpu, 1, &in, &r);
    cr_assert_eq(r.count[0], r.count[1]);
    for (int i = 0; i < r.count[0]; i++) {
        double e = rel(r.v[1][i], r.v[0][i], r.len[i]);
        cr_expect_leq(e, BF16_TOL, "bf16 %s: gpu vs cpu rel %.3g", r.name[i], e);
        if (strcmp(r.name[i], "to_act") == 0) /* one rounding of the same floats: same bits */
            cr_expect(memcmp(r.v[0][i], r.v[1][i], r.len[i] * sizeof(float)) == 0,
                      "bf16 to_act: gpu != cpu bits");
        free(r.v[0][i]);
        free(r.v[1][i]);
    }

    void *host[] = {in.ln_inp, in.ln_w, in.ln_b, in.ln_dout, in.ln_dinp0, in.ln_dw0, in.ln_db0,
                    in.qkv, in.att_dout, in.g_in, in.g_dout, in.add_y, in.logits, in.targets,
                    in.tokens, in.wte, in.wpe, in.enc_dout, in.dwte0, in.dwpe0, in.f32_src};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    bf_matmul_free(&in.mm[0]);
    bf_matmul_free(&in.mm[1]);
    pair_close(&p);
}

/* ------------------------------------------------------------------ Llama-family ops
 *
 * rmsnorm (forward, backward with dinp and dw accumulated), residual_rmsnorm (res aliasing x),
 * rope forward (pos0 > 0) and backward on grouped kv heads, swiglu forward and backward, and the
 * encoder without wpe, on both backends with the same inputs, in fp32 (GPU vs CPU within TOL) and
 * bf16 (within BF16_TOL). rope is the same plain-float formula on both (backend.h), so its output
 * must be the CPU's bit for bit in both dtypes, and so must the encoder's (one add, or none). */

typedef struct {
    int N, C, I, B, T, NH, NKV, hd, pos0, P, V;
    float *x, *w, *dy, *dx0, *dw0, *y;   /* rmsnorm: [N, C], [C]; dw0 fp32 */
    float *sw_in, *sw_dout;              /* swiglu: [N, 2I], [N, I] */
    float *qkv, *cosv, *sinv;            /* rope: [B, T, (NH + 2 NKV) hd], [P, hd/2] fp32 */
    int *tokens;                         /* encoder: [B * T] of V */
    float *wte, *enc_dout, *dwte0;       /* [V, hd], [B * T, hd], fp32 [V, hd] */
} LlIn;

/* n random values in [lo, hi), each a bf16 value (so both dtypes see the same inputs) */
static float *rand_bfvals(size_t n, float lo, float hi) {
    float *h = rand_host(n, lo, hi);
    for (size_t i = 0; i < n; i++) h[i] = gt_bf16_to_f32(gt_f32_to_bf16(h[i]));
    return h;
}
/* a device act_t copy of host floats (rounded to bf16 when the act dtype is bf16: exact here) */
static void *dup_act(Backend *b, const float *h, size_t n) {
    if (b->act_dtype == GT_F32) return dup_to(b, h, n * sizeof(float));
    uint16_t *t = malloc(n * sizeof(uint16_t) + 4);
    cr_assert_not_null(t);
    for (size_t i = 0; i < n; i++) t[i] = gt_f32_to_bf16(h[i]);
    void *d = dup_to(b, t, n * sizeof(uint16_t));
    free(t);
    return d;
}
static void *dnan_act(Backend *b, size_t n) {
    return b->act_dtype == GT_F32 ? (void *)dnan_on(b, n) : dnan_bf16_on(b, n);
}
static void keep_act(BfRes *r, int k, Backend *b, const char *name, const void *d, size_t n) {
    if (b->act_dtype == GT_F32)
        bf_keep_f32(r, k, b, name, d, n);
    else
        bf_keep_bf16(r, k, b, name, d, n);
}

static void llama_run(Backend *b, int k, GtDtype act, const LlIn *in, BfRes *r) {
    backend_set_act_dtype(b, act);
    const int N = in->N, C = in->C, I = in->I;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I;
    /* rmsnorm forward + backward */
    {
        void *x = dup_act(b, in->x, NC), *w = dup_act(b, in->w, C), *out = dnan_act(b, NC);
        float *rstd = dnan_on(b, N);
        b->ops->rmsnorm_forward(b, out, rstd, x, w, N, C, 1e-6f);
        void *dy = dup_act(b, in->dy, NC), *dx = dup_act(b, in->dx0, NC);
        float *dw = dup_to(b, in->dw0, (size_t)C * sizeof(float));
        b->ops->rmsnorm_backward(b, dx, dw, dy, x, w, rstd, N, C);
        keep_act(r, k, b, "rmsnorm out", out, NC);
        bf_keep_f32(r, k, b, "rmsnorm rstd", rstd, N);
        keep_act(r, k, b, "rmsnorm dinp (accumulated)", dx, NC);
        bf_keep_f32(r, k, b, "rmsnorm dw (accumulated)", dw, C);
        void *bufs[] = {x, w, out, rstd, dy, dx, dw};
        bf_free_all(b, bufs, 7);
    }
    /* residual + rmsnorm, res aliasing x */
    {
        void *x = dup_act(b, in->x, NC), *y = dup_act(b, in->y, NC), *w = dup_act(b, in->w, C);
        void *out = dnan_act(b, NC);
        float *rstd = dnan_on(b, N);
        b->ops->residual_rmsnorm_forward(b, x, out, rstd, x, y, w, N, C, 1e-6f);
        keep_act(r, k, b, "residual_rmsnorm res", x, NC);
        keep_act(r, k, b, "residual_rmsnorm out", out, NC);
        bf_keep_f32(r, k, b, "residual_rmsnorm rstd", rstd, N);
        void *bufs[] = {x, y, w, out, rstd};
        bf_free_all(b, bufs, 5);
    }
    /* rope forward at pos0, backward at 0, both in place */
    {
        size_t n3 = (size_t)in->B * in->T * (in->NH + 2 * in->NKV) * in->hd, nt = (size_t)in->P * (in->hd / 2);
        void *q = dup_act(b, in->qkv, n3), *dq = dup_act(b, in->qkv, n3);
        float *cs = dup_to(b, in->cosv, nt * sizeof(float)), *sn = dup_to(b, in->sinv, nt * sizeof(float));
        b->ops->rope_forward(b, q, cs, sn, in->B, in->T, in->pos0, in->NH, in->NKV, in->hd, NULL);
        b->ops->rope_backward(b, dq, cs, sn, in->B, in->T, in->NH, in->NKV, in->hd, NULL);
        keep_act(r, k, b, "rope forward", q, n3);
        keep_act(r, k, b, "rope backward", dq, n3);
        void *bufs[] = {q, dq, cs, sn};
        bf_free_all(b, bufs, 4);
    }
    /* swiglu forward + backward */
    {
        void *inp = dup_act(b, in->sw_in, 2 * NI), *out = dnan_act(b, NI);
        void *dout = dup_act(b, in->sw_dout, NI), *dinp = dnan_act(b, 2 * NI);
        b->ops->swiglu_forward(b, out, inp, N, I);
        b->ops->swiglu_backward(b, dinp, inp, dout, N, I);
        keep_act(r, k, b, "swiglu out", out, NI);
        keep_act(r, k, b, "swiglu dinp", dinp, 2 * NI);
        void *bufs[] = {inp, out, dout, dinp};
        bf_free_all(b, bufs, 4);
    }
    /* encoder without position embedding (wpe, dwpe NULL) */
    {
        const size_t BT = (size_t)in->B * in->T, VC = (size_t)in->V * in->hd;
        int *tok = dup_to(b, in->tokens, BT * sizeof(int));
        void *wte = dup_act(b, in->wte, VC), *out = dnan_act(b, BT * in->hd);
        void *dout = dup_act(b, in->enc_dout, BT * in->hd);
        float *dwte = dup_to(b, in->dwte0, VC * sizeof(float));
        b->ops->encoder_forward(b, out, tok, wte, NULL, in->B, in->T, in->hd, NULL);
        b->ops->encoder_backward(b, dwte, NULL, dout, tok, in->B, in->T, in->hd, NULL);
        keep_act(r, k, b, "encoder (no wpe) out", out, BT * in->hd);
        bf_keep_f32(r, k, b, "encoder (no wpe) dwte (accumulated)", dwte, VC);
        void *bufs[] = {tok, wte, out, dout, dwte};
        bf_free_all(b, bufs, 5);
    }
}

Test(cuda, llama_ops_match_cpu, .timeout = 120) {
    Pair p;
    pair_open(&p);
    LlIn in = {.N = 74, .C = 160, .I = 200, .B = 2, .T = 37, .NH = 4, .NKV = 2, .hd = 64, .pos0 = 5, .V = 29};
    in.P = in.pos0 + in.T;
    const size_t NC = (size_t)in.N * in.C, NI = (size_t)in.N * in.I, BT = (size_t)in.B * in.T;
    const size_t n3 = BT * (in.NH + 2 * in.NKV) * in.hd, half = (size_t)in.hd / 2;
    in.x = rand_bfvals(NC, -2, 2);
    in.w = rand_bfvals(in.C, 0.5f, 1.5f);
    in.dy = rand_bfvals(NC, -1, 1);
    in.dx0 = rand_bfvals(NC, -1, 1);
    in.dw0 = rand_host(in.C, -1, 1);
    in.y = rand_bfvals(NC, -2, 2);
    in.sw_in = rand_bfvals(2 * NI, -6, 6);
    in.sw_dout = rand_bfvals(NI, -1, 1);
    in.qkv = rand_bfvals(n3, -2, 2);
    in.cosv = malloc(in.P * half * sizeof(float));
    in.sinv = malloc(in.P * half * sizeof(float));
    in.tokens = malloc(BT * sizeof(int));
    cr_assert(in.cosv && in.sinv && in.tokens);
    for (int pos = 0; pos < in.P; pos++)
        for (size_t i = 0; i < half; i++) {
            double th = pos * pow(10000.0, -2.0 * (double)i / in.hd);
            in.cosv[pos * half + i] = (float)cos(th);
            in.sinv[pos * half + i] = (float)sin(th);
        }
    for (size_t i = 0; i < BT; i++) in.tokens[i] = (int)(frand(0, 1) * in.V) % in.V;
    in.wte = rand_bfvals((size_t)in.V * in.hd, -1, 1);
    in.enc_dout = rand_bfvals(BT * in.hd, -1, 1);
    in.dwte0 = rand_host((size_t)in.V * in.hd, -1, 1);

    for (int a = 0; a < 2; a++) {
        GtDtype act = a ? GT_BF16 : GT_F32;
        double tol = a ? BF16_TOL : TOL;
        BfRes r;
        memset(&r, 0, sizeof r);
        llama_run(p.cpu, 0, act, &in, &r);
        llama_run(p.gpu, 1, act, &in, &r);
        cr_assert_eq(r.count[0], r.count[1]);
        for (int i = 0; i < r.count[0]; i++) {
            double e = rel(r.v[1][i], r.v[0][i], r.len[i]);
            cr_expect_leq(e, tol, "%s %s: gpu vs cpu rel %.3g", gt_dtype_name(act), r.name[i], e);
            if (strncmp(r.name[i], "rope", 4) == 0 || strcmp(r.name[i], "encoder (no wpe) out") == 0)
                cr_expect(memcmp(r.v[0][i], r.v[1][i], r.len[i] * sizeof(float)) == 0,
                          "%s %s: gpu != cpu bits", gt_dtype_name(act), r.name[i]);
            free(r.v[0][i]);
            free(r.v[1][i]);
        }
    }
    void *host[] = {in.x, in.w, in.dy, in.dx0, in.dw0, in.y, in.sw_in, in.sw_dout, in.qkv, in.cosv, in.sinv,
                    in.tokens, in.wte, in.enc_dout, in.dwte0};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    pair_close(&p);
}

/* bf16 matmul_gelu (the GELU epilogue) on the same inputs in buffers at different addresses,
 * 16-byte aligned but offset differently from the allocations' larger alignment: the same bits
 * (the algorithm may depend on the 16-byte rule only, or recompute would not be bit-identical) */
Test(cuda, matmul_gelu_bits_independent_of_buffers) {
    Pair p;
    pair_open(&p);
    Backend *b = p.gpu;
    backend_set_act_dtype(b, GT_BF16);
    int N = 96, C = 64, OC = 256;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    uint16_t *inp = rand_bf16(ni, -1, 1), *w = rand_bf16(nw, -1, 1), *bias = rand_bf16(OC, -1, 1);
    uint16_t *got[2][2];
    const size_t offs[2] = {0, 16}; /* bytes past a cudaMalloc (256-byte aligned) address */
    for (int rep = 0; rep < 2; rep++) {
        size_t o = offs[rep];
        char *bi = dup_to(b, NULL, ni * 2 + o), *bw = dup_to(b, NULL, nw * 2 + o);
        char *bb = dup_to(b, NULL, (size_t)OC * 2 + o), *bp = dup_to(b, NULL, no * 2 + o);
        char *bo = dup_to(b, NULL, no * 2 + o);
        GtError err = {0};
        cr_assert_eq(b->ops->to_device(b, bi + o, inp, ni * 2, &err), 0, "%s", err.msg);
        cr_assert_eq(b->ops->to_device(b, bw + o, w, nw * 2, &err), 0, "%s", err.msg);
        cr_assert_eq(b->ops->to_device(b, bb + o, bias, (size_t)OC * 2, &err), 0, "%s", err.msg);
        b->ops->matmul_gelu_forward(b, bo + o, bp + o, bi + o, bw + o, bb + o, N, C, OC);
        for (int i = 0; i < 2; i++) {
            got[rep][i] = malloc(no * 2);
            cr_assert_not_null(got[rep][i]);
            cr_assert_eq(b->ops->to_host(b, got[rep][i], (i ? bo : bp) + o, no * 2, &err), 0, "%s", err.msg);
        }
        void *bufs[] = {bi, bw, bb, bp, bo};
        bf_free_all(b, bufs, 5);
    }
    cr_expect(memcmp(got[0][0], got[1][0], no * 2) == 0, "matmul_gelu pre: bits depend on the buffers");
    cr_expect(memcmp(got[0][1], got[1][1], no * 2) == 0, "matmul_gelu out: bits depend on the buffers");
    for (int rep = 0; rep < 2; rep++)
        for (int i = 0; i < 2; i++) free(got[rep][i]);
    free(inp);
    free(w);
    free(bias);
    pair_close(&p);
}

/* no GPU: the count is 0 (never an abort) and asking for cuda is one clear error */
Test(cuda, no_gpu_is_a_clean_error) {
    if (backend_gpu_count() > 0) cr_skip_test("a GPU is visible");
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
