/* bench_attention.c - time the backend's attention alone, forward + backward (scripts/device-check.sh;
 * not a test). usage: bench_attention cpu|cuda B T NH NKV HD [iters] [fp32|bf16]
 * Causal, no window, inputs zero (the kernels' time does not depend on the values). Prints one line:
 * median ms of forward+backward over iters after one warm-up, and TFLOP/s counted as FlashAttention-2
 * does for causal attention: forward 4 B NH T^2 HD / 2, backward 2.5 x forward. */
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 7 || argc > 9) {
        fprintf(stderr, "usage: bench_attention cpu|cuda B T NH NKV HD [iters] [fp32|bf16]\n");
        return 2;
    }
    DeviceKind dev = argv[1][0] == 'c' && argv[1][1] == 'u' ? DEVICE_CUDA : DEVICE_CPU;
    int B = atoi(argv[2]), T = atoi(argv[3]), NH = atoi(argv[4]), NKV = atoi(argv[5]), hd = atoi(argv[6]);
    int iters = argc > 7 ? atoi(argv[7]) : 10;
    int bf16 = argc > 8 ? argv[8][0] == 'b' : 1;
    if (B < 1 || T < 1 || NH < 1 || NKV < 1 || NH % NKV || hd < 1 || iters < 1) {
        fprintf(stderr, "bench_attention: expected positive B T NH NKV HD iters with NKV dividing NH\n");
        return 2;
    }
    GtError err = {0};
    Backend *b = NULL;
    if (backend_open(&b, dev, 0, 2, &err) != 0) {
        fprintf(stderr, "bench_attention: %s\n", err.msg);
        return 1;
    }
    if (bf16) backend_set_act_dtype(b, GT_BF16);
    size_t C3 = (size_t)(NH + 2 * NKV) * hd, rows = (size_t)B * T;
    act_t *qkv = backend_alloc(b, MEM_ACTIVATIONS, backend_act_bytes(b, rows * C3), &err);
    act_t *dqkv = qkv ? backend_alloc(b, MEM_WORKSPACE, backend_act_bytes(b, rows * C3), &err) : NULL;
    act_t *out = dqkv ? backend_alloc(b, MEM_ACTIVATIONS, backend_act_bytes(b, rows * NH * hd), &err) : NULL;
    act_t *dout = out ? backend_alloc(b, MEM_WORKSPACE, backend_act_bytes(b, rows * NH * hd), &err) : NULL;
    float *lse = dout ? backend_alloc_floats(b, MEM_ACTIVATIONS, (size_t)B * NH * T, &err) : NULL;
    const size_t nws = backend_attention_workspace_floats(b->act_dtype, B, T, NH, NKV, hd);
    float *ws = lse ? backend_alloc_floats(b, MEM_WORKSPACE, nws, &err) : NULL;
    double *ms = malloc(sizeof(double) * (size_t)iters);
    if (!ws || !ms) {
        fprintf(stderr, "bench_attention: out of memory: %s\n", ws ? "host" : err.msg);
        return 1;
    }
    for (int i = -1; i < iters; i++) {
        b->ops->timer_start(b);
        b->ops->attention_forward(b, out, lse, qkv, B, T, NH, NKV, hd, 0, NULL);
        b->ops->attention_backward(b, dqkv, ws, dout, qkv, out, lse, B, T, NH, NKV, hd, 0, NULL);
        double t = b->ops->timer_elapsed_ms(b);
        if (i >= 0) ms[i] = t;
    }
    qsort(ms, (size_t)iters, sizeof(double), cmp_double);
    double med = ms[iters / 2];
    double fwd = 4.0 * B * NH * (double)T * T * hd / 2.0;
    printf("attention %s %s B=%d T=%d NH=%d NKV=%d hd=%d causal: %.3f ms fwd+bwd, %.3g TFLOP/s (FA2 count: fwd 4BHT^2d/2, bwd 2.5x)\n",
           argv[1], bf16 ? "bf16" : "fp32", B, T, NH, NKV, hd, med, fwd * 3.5 / (med * 1e-3) / 1e12);
    free(ms);
    backend_free(b, MEM_WORKSPACE, ws, sizeof(float) * nws);
    backend_free(b, MEM_ACTIVATIONS, lse, sizeof(float) * (size_t)B * NH * T);
    backend_free(b, MEM_WORKSPACE, dout, backend_act_bytes(b, rows * NH * hd));
    backend_free(b, MEM_ACTIVATIONS, out, backend_act_bytes(b, rows * NH * hd));
    backend_free(b, MEM_WORKSPACE, dqkv, backend_act_bytes(b, rows * C3));
    backend_free(b, MEM_ACTIVATIONS, qkv, backend_act_bytes(b, rows * C3));
    backend_close(b);
    return 0;
}
