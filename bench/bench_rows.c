/* bench_rows.c - time the backend's row ops alone (norms forward and backward, SwiGLU,
 * cross-entropy) at the shapes of the device check's runs (scripts/device-check-stages.sh; not a
 * test). usage: bench_rows cpu|cuda [iters] [fp32|bf16] [peak GB/s]
 * Mistral-7B's rows (N = B 4 x T 512, C 4096, I 14336, V 32000, 1024 logits rows) and GPT-2's (N =
 * 16 x 1024, C 768, V 50257 at the LM head's padded stride, 655 logits rows: the 64 MiB chunk).
 * Inputs are zero-filled (the kernels' time does not depend on the values). Per op one line: the
 * median us over iters after one warm-up, the bytes an op must move (each act element read or
 * written once: the floor), that over the time in GB/s and, with a peak, the fraction of it.
 * Last, GPT-2's token gradient (encoder_backward's dwte, N 16 x 1024, C 768, V 50257) on tokens drawn
 * log-uniformly over the vocabulary (token k about as often as 1/(k+1): the most frequent one at 6 %
 * of the positions, as the commonest tokens of English text), and on one token at every position
 * (its additions are one chain per channel: the slowest case); the floor is dout read once and each
 * distinct token's fp32 row read and written once. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { RMS_FWD, RMS_RES_FWD, RMS_BWD, RMS_BWD_DW, LN_FWD, LN_RES_FWD, LN_BWD, SWIGLU_FWD, SWIGLU_BWD, CE };
typedef struct {
    const char *name;
    int op, N, C, V;  /* rows, width (SwiGLU: I), vocabulary (cross-entropy: C is the stride) */
    double elems_moved; /* act elements read + written per row element */
} RowCase;

static const RowCase cases[] = {
    {"mistral rmsnorm_forward", RMS_FWD, 2048, 4096, 0, 2},
    {"mistral residual_rmsnorm_forward", RMS_RES_FWD, 2048, 4096, 0, 4},
    {"mistral rmsnorm_backward (dinp only: LoRA)", RMS_BWD, 2048, 4096, 0, 4},
    {"mistral rmsnorm_backward (dinp + dw)", RMS_BWD_DW, 2048, 4096, 0, 4},
    {"mistral swiglu_forward", SWIGLU_FWD, 2048, 14336, 0, 3},
    {"mistral swiglu_backward", SWIGLU_BWD, 2048, 14336, 0, 5},
    {"mistral crossentropy (1024 rows)", CE, 1024, 32000, 32000, 2},
    {"gpt2 layernorm_forward", LN_FWD, 16384, 768, 0, 2},
    {"gpt2 residual_layernorm_forward", LN_RES_FWD, 16384, 768, 0, 4},
    {"gpt2 layernorm_backward (dinp + dw + dbias)", LN_BWD, 16384, 768, 0, 4},
    {"gpt2 crossentropy (655 rows)", CE, 655, 50304, 50257, 2},
};

/* one call of the case's op on the buffers a, b2, c (act: N x 2C each), f (fp32: 2C), g (fp32: N) */
static void run_op(Backend *b, const RowCase *k, act_t *a, act_t *b2, act_t *c, act_t *w, float *f, float *g,
                   float *g2, int *tgt) {
    const BackendOps *op = b->ops;
    const int N = k->N, C = k->C;
    switch (k->op) {
    case RMS_FWD: op->rmsnorm_forward(b, b2, g, a, w, N, C, 1e-5f); break;
    case RMS_RES_FWD: backend_residual_rmsnorm_forward(b, c, b2, g, a, c, w, N, C, 1e-5f); break;
    case RMS_BWD: op->rmsnorm_backward(b, c, NULL, b2, a, w, g, N, C); break;
    case RMS_BWD_DW: op->rmsnorm_backward(b, c, f, b2, a, w, g, N, C); break;
    case LN_FWD: op->layernorm_forward(b, b2, g, g2, a, w, w, N, C, 1e-5f); break;
    case LN_RES_FWD: backend_residual_layernorm_forward(b, c, b2, g, g2, a, c, w, w, N, C, 1e-5f); break;
    case LN_BWD: op->layernorm_backward(b, c, f, f + C, b2, a, w, g, g2, N, C); break;
    case SWIGLU_FWD: op->swiglu_forward(b, b2, a, N, C); break;
    case SWIGLU_BWD: op->swiglu_backward(b, c, a, b2, N, C); break;
    case CE: op->crossentropy(b, g, a, tgt, N, k->V, C, 1.0f / (float)N, 1); break;
    }
}

/* encoder_backward's dwte at GPT-2's shape: the median us over iters, printed as a rows line */
static int bench_encoder(Backend *b, const char *dev, int iters, double peak, double *ms, bool one_token) {
    enum { EB = 16, ET = 1024, EC = 768, EV = 50257 };
    const size_t N = (size_t)EB * ET;
    GtError err = {0};
    int *tok = malloc(N * sizeof(int));
    unsigned char *seen = calloc(EV, 1);
    const size_t db = backend_act_bytes(b, N * EC), wb = (size_t)EV * EC * sizeof(float);
    act_t *dout = tok && seen ? backend_alloc(b, MEM_ACTIVATIONS, db, &err) : NULL;
    float *dwte = dout ? backend_alloc(b, MEM_GRADS, wb, &err) : NULL;
    int *d_tok = dwte ? backend_alloc(b, MEM_ACTIVATIONS, N * sizeof(int), &err) : NULL;
    if (!d_tok) {
        fprintf(stderr, "bench_rows: out of memory: %s\n", err.msg[0] ? err.msg : "host");
        return 1;
    }
    uint64_t x = 42;
    size_t distinct = 0;
    for (size_t i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's MMIX LCG */
        const double u = (double)(x >> 11) * (1.0 / 9007199254740992.0);
        int t = one_token ? 0 : (int)floor(exp(u * log((double)EV + 1.0))) - 1;
        tok[i] = t < 0 ? 0 : t >= EV ? EV - 1 : t;
        distinct += !seen[tok[i]];
        seen[tok[i]] = 1;
    }
    if (b->ops->to_device(b, d_tok, tok, N * sizeof(int), &err) != 0) {
        fprintf(stderr, "bench_rows: %s\n", err.msg);
        return 1;
    }
    b->ops->zero(b, dout, db);
    b->ops->zero(b, dwte, wb);
    for (int it = -1; it < iters; it++) {
        b->ops->timer_start(b);
        b->ops->encoder_backward(b, dwte, NULL, dout, d_tok, EB, ET, EC, NULL);
        double t = b->ops->timer_elapsed_ms(b);
        if (it >= 0) ms[it] = t;
    }
    qsort(ms, (size_t)iters, sizeof(double), cmp_double);
    const double us = ms[iters / 2] * 1e3;
    const double bytes = (double)db + (double)distinct * EC * 8.0 + (double)N * sizeof(int);
    printf("rows %s gpt2 encoder_backward dwte (%s, %zu distinct): %.1f us, %.1f MB moved, %.0f GB/s", dev,
           one_token ? "one token everywhere" : "log-uniform tokens", distinct, us, bytes / 1e6, bytes / us / 1e3);
    if (peak > 0) printf(" (%.0f%% of %.0f GB/s)", 100.0 * bytes / us / 1e3 / peak, peak);
    printf("\n");
    backend_free(b, MEM_ACTIVATIONS, d_tok, N * sizeof(int));
    backend_free(b, MEM_GRADS, dwte, wb);
    backend_free(b, MEM_ACTIVATIONS, dout, db);
    free(seen);
    free(tok);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: bench_rows cpu|cuda [iters] [fp32|bf16] [peak GB/s]\n");
        return 2;
    }
    DeviceKind dev = argv[1][0] == 'c' && argv[1][1] == 'u' ? DEVICE_CUDA : DEVICE_CPU;
    const int iters = argc > 2 ? atoi(argv[2]) : 10;
    const int bf16 = argc > 3 ? argv[3][0] == 'b' : 1;
    const double peak = argc > 4 ? atof(argv[4]) : 0.0;
    if (iters < 1 || peak < 0) {
        fprintf(stderr, "bench_rows: expected iters >= 1 and peak >= 0\n");
        return 2;
    }
    GtError err = {0};
    Backend *b = NULL;
    if (backend_open(&b, dev, 0, 2, &err) != 0) {
        fprintf(stderr, "bench_rows: %s\n", err.msg);
        return 1;
    }
    if (bf16) backend_set_act_dtype(b, GT_BF16);
    size_t most = 0, maxc = 0, maxn = 0; /* elements of the largest act buffer, widest row, most rows */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t e = (size_t)cases[i].N * (size_t)cases[i].C * 2;
        if (e > most) most = e;
        if ((size_t)cases[i].C * 2 > maxc) maxc = (size_t)cases[i].C * 2;
        if ((size_t)cases[i].N > maxn) maxn = (size_t)cases[i].N;
    }
    const size_t ab = backend_act_bytes(b, most);
    act_t *a = backend_alloc(b, MEM_ACTIVATIONS, ab, &err);
    act_t *b2 = a ? backend_alloc(b, MEM_ACTIVATIONS, ab, &err) : NULL;
    act_t *c = b2 ? backend_alloc(b, MEM_ACTIVATIONS, ab, &err) : NULL;
    act_t *w = c ? backend_alloc(b, MEM_PARAMS, backend_act_bytes(b, maxc), &err) : NULL;
    float *f = w ? backend_alloc_floats(b, MEM_GRADS, maxc, &err) : NULL;
    float *g = f ? backend_alloc_floats(b, MEM_ACTIVATIONS, maxn, &err) : NULL;
    float *g2 = g ? backend_alloc_floats(b, MEM_ACTIVATIONS, maxn, &err) : NULL;
    int *tgt = g2 ? backend_alloc(b, MEM_ACTIVATIONS, maxn * sizeof(int), &err) : NULL;
    double *ms = malloc(sizeof(double) * (size_t)iters);
    if (!tgt || !ms) {
        fprintf(stderr, "bench_rows: out of memory: %s\n", tgt ? "host" : err.msg);
        return 1;
    }
    b->ops->zero(b, a, ab);
    b->ops->zero(b, b2, ab);
    b->ops->zero(b, c, ab);
    b->ops->zero(b, w, backend_act_bytes(b, maxc));
    b->ops->zero(b, f, maxc * sizeof(float));
    b->ops->zero(b, g, maxn * sizeof(float));
    b->ops->zero(b, g2, maxn * sizeof(float));
    b->ops->zero(b, tgt, maxn * sizeof(int)); /* target 0 everywhere */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const RowCase *k = &cases[i];
        for (int it = -1; it < iters; it++) {
            b->ops->timer_start(b);
            run_op(b, k, a, b2, c, w, f, g, g2, tgt);
            double t = b->ops->timer_elapsed_ms(b);
            if (it >= 0) ms[it] = t;
        }
        qsort(ms, (size_t)iters, sizeof(double), cmp_double);
        const double us = ms[iters / 2] * 1e3;
        const double bytes = (double)backend_act_bytes(b, 1) * k->elems_moved * k->N * (k->op == CE ? k->V : k->C);
        printf("rows %s %s: %.1f us, %.1f MB moved, %.0f GB/s", argv[1], k->name, us, bytes / 1e6, bytes / us / 1e3);
        if (peak > 0) printf(" (%.0f%% of %.0f GB/s)", 100.0 * bytes / us / 1e3 / peak, peak);
        printf("\n");
    }
    for (int one = 0; one < 2; one++)
        if (bench_encoder(b, argv[1], iters, peak, ms, one)) return 1;
    free(ms);
    backend_free(b, MEM_ACTIVATIONS, tgt, maxn * sizeof(int));
    backend_free(b, MEM_ACTIVATIONS, g2, maxn * sizeof(float));
    backend_free(b, MEM_ACTIVATIONS, g, maxn * sizeof(float));
    backend_free(b, MEM_GRADS, f, maxc * sizeof(float));
    backend_free(b, MEM_PARAMS, w, backend_act_bytes(b, maxc));
    backend_free(b, MEM_ACTIVATIONS, c, ab);
    backend_free(b, MEM_ACTIVATIONS, b2, ab);
    backend_free(b, MEM_ACTIVATIONS, a, ab);
    backend_close(b);
    return 0;
}
