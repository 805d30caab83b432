/* bench_step.c - time a gtrain training step (make bench; not a test).
 * usage: bench_step MODEL.json B T [steps] [every_n_layers|0] [offload 0|1]
 * BENCH_PRECISION=bf16: bf16 activations (on the CPU an emulation, see backend_cpu.c).
 * BENCH_LORA_R=R: LoRA of rank R on every linear module (all-linear, alpha 2R), the base frozen;
 *   BENCH_BASE=nf4 stores its linear weights 4-bit (QLoRA: blocks of 64, double quant), bf16 in bf16.
 * Prints one line: model, shapes, median ms/step, tokens/s, sgemm GFLOP/s, peak RSS. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "blas_setup.h"
#include "lora.h"
#include "optim.h"
#include "plan.h"
#include "trainer.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* sgemm throughput on an n x n x n product, median of 5 */
static double sgemm_gflops(int n) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c) exit(1);
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = gt_now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = gt_now_seconds() - t0;
    }
    qsort(t, 5, sizeof t[0], cmp_double);
    free(a), free(b), free(c);
    return 2.0 * n * (double)n * n / t[2] / 1e9;
}

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    if (argc == 2 && strcmp(argv[1], "--blas-core") == 0) { /* for scripts/bench.sh: give torch the same kernel */
        const char *ct = getenv("OPENBLAS_CORETYPE");
        printf("%s\n", ct ? ct : blas_core_name());
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "usage: bench_step MODEL.json B T [steps] [every_n_layers|0] [offload]\n");
        return 2;
    }
    GtError err = {0};
    ModelDesc d;
    if (model_desc_load(&d, argv[1], &err)) {
        fprintf(stderr, "bench_step: %s\n", err.msg);
        return 2;
    }
    if (getenv("BENCH_LORA_R")) { /* all-linear adapters, as lora_configure applies them */
        d.adapter.r = atoi(getenv("BENCH_LORA_R"));
        d.adapter.scale = 2.0;
        for (int k = 0; k < PEFT_MODULE_COUNT; k++)
            if (peft_module_arch((PeftModule)k) == d.arch) d.adapter.targets |= 1u << k;
    }
    const char *base = getenv("BENCH_BASE"); /* the frozen base's storage under LoRA: nf4 (QLoRA) or bf16 */
    if (base && d.adapter.r > 0 && strcmp(base, "nf4") == 0) d.quant = (BaseQuant){.nf4 = true, .blocksize = 64, .nested = true};
    if (base && d.adapter.r > 0 && strcmp(base, "bf16") == 0) d.adapter.base_dtype = BASE_DTYPE_BF16;
    int B = atoi(argv[2]), T = atoi(argv[3]), steps = argc > 4 ? atoi(argv[4]) : 10;
    int every = argc > 5 ? atoi(argv[5]) : 0, off = argc > 6 ? atoi(argv[6]) : 0;
    Backend *be = NULL;
    if (backend_open(&be, DEVICE_CPU, 0, 0, &err)) {
        fprintf(stderr, "bench_step: %s\n", err.msg);
        return 1;
    }
    const char *prec = getenv("BENCH_PRECISION");
    backend_set_act_dtype(be, prec && strcmp(prec, "bf16") == 0 ? GT_BF16 : GT_F32);
    Model *m = NULL;
    if (model_create(&m, &d, be, B, T, recompute_policy(every > 0, every ? every : 1, off, d.n_layer), 1, &err)) {
        fprintf(stderr, "bench_step: %s\n", err.msg);
        return 1;
    }
    int *tok = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < B * T; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int)(s % (uint64_t)d.vocab_size);
        tgt[i] = (int)((s >> 20) % (uint64_t)d.vocab_size);
    }
    RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.999, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    double *t = calloc((size_t)steps, sizeof *t);
    const int warmup = getenv("BENCH_WARMUP") ? atoi(getenv("BENCH_WARMUP")) : 2;
    for (int i = -warmup; i < steps; i++) { /* warm-up steps first (BENCH_WARMUP, default 2) */
        double t0 = gt_now_seconds(), loss;
        if (trainer_accumulate(m, tok, tgt, B, 1, 1, LOSS_NORM_TOKENS, B * T, &loss, &err)) {
            fprintf(stderr, "bench_step: %s\n", err.msg);
            return 1;
        }
        double norm = grad_global_norm(m);
        clip_grads(m, norm, 1.0);
        adamw_step(m, 1e-4, &cfg, i + warmup + 1);
        model_zero_grads(m);
        be->ops->synchronize(be);
        if (i >= 0) t[i] = gt_now_seconds() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_double);
    double med = t[steps / 2];
    /* activation memory: planned (plan.c) and measured (the tracker's high-water marks) */
    MemPlan plan;
    plan_memory(&plan, &d, B, 1, 1, T, m->policy, false, m->act);
    const MemCategory act_cats[] = {MEM_ACTIVATIONS, MEM_RECOMPUTE_STASH, MEM_RECOMPUTE_SCRATCH};
    uint64_t act_plan = 0, act_meas = 0;
    for (int c = 0; c < 3; c++) act_plan += plan.bytes[act_cats[c]], act_meas += be->mem.peak[act_cats[c]];
    if (getenv("BENCH_MEMORY")) {
        printf("memory  recompute=%d offload=%d  activations planned %.2f MiB measured %.2f MiB  host_offload planned %.2f "
               "MiB measured %.2f MiB  device total planned %.2f MiB measured %.2f MiB  %.1f ms/step\n",
               every, off, act_plan / 1048576.0, act_meas / 1048576.0, plan.bytes[MEM_HOST_OFFLOAD] / 1048576.0,
               be->mem.peak[MEM_HOST_OFFLOAD] / 1048576.0, plan.device_total / 1048576.0, be->mem.device_peak / 1048576.0,
               med * 1e3);
        free(t), free(tok), free(tgt);
        model_free(m);
        backend_close(be);
        return 0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char lora[32] = "";
    if (d.adapter.r > 0)
        snprintf(lora, sizeof lora, " lora r%d%s", d.adapter.r,
                 d.quant.nf4 ? " base nf4" : d.adapter.base_dtype == BASE_DTYPE_BF16 ? " base bf16" : "");
    printf("gtrain  %-28s %s%s B=%d T=%d recompute=%d offload=%d  %8.1f ms/step  %9.0f tok/s  sgemm %6.1f GFLOP/s  "
           "peak RSS %.0f MiB  (%s, blas core %s)\n",
           argv[1], gt_dtype_name(m->act), lora, B, T, every, off, med * 1e3, B * T / med, sgemm_gflops(1024),
           ru.ru_maxrss / 1024.0, be->device_name, blas_core_name());
    free(t), free(tok), free(tgt);
    model_free(m);
    backend_close(be);
    return 0;
}
