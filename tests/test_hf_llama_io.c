/* test_hf_llama_io.c - Llama, Mistral and Qwen2 checkpoints written by an independent PyTorch
 * program (tests/tools/hf_llama.py: its own model code, its own safetensors writer, HF's names,
 * sharded, BF16, F16 and F32) loaded by gtrain: the same loss to 1e-5; 5 AdamW steps against that
 * program's float64 AdamW (losses to 1e-5, saved weights to 1e-4 in L2 norm); and the
 * weights gtrain saves (sharded, HF layout) read back by that program with gtrain's loss. Fails where the
 * test references are not installed. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "hf_weights.h"
#include "optim.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "trainer.h"

#define T_SEQ 24
#define ROWS 4

static const char *need_torch(void) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set");
    test_require_refs();
    return root;
}

/* run a command, return its stdout (caller frees); the test fails on a nonzero exit */
static char *run(const char *cmd) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t n;
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) len += n;
    out[len] = '\0';
    int st = pclose(p);
    cr_assert_eq(st, 0, "%s exited %d:\n%s", cmd, st, out);
    return out;
}

static void write_tokens(const char *path, int *tok, int *tgt, int V) {
    FILE *f = fopen(path, "w");
    cr_assert(f);
    uint64_t s = 12345;
    for (int r = 0; r < ROWS; r++) {
        int row[T_SEQ + 1];
        for (int t = 0; t <= T_SEQ; t++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            row[t] = (int)(s % (uint64_t)V);
            fprintf(f, "%d%c", row[t], t == T_SEQ ? '\n' : ' ');
        }
        for (int t = 0; t < T_SEQ; t++) tok[r * T_SEQ + t] = row[t], tgt[r * T_SEQ + t] = row[t + 1];
    }
    fclose(f);
}

static double mean_loss(Model *m, const int *tok, const int *tgt) {
    double s = 0;
    GtError err = {0};
    cr_assert_eq(model_step(m, tok, tgt, ROWS, 1.0f, false, &s, &err), 0, "%s", err.msg);
    return s / (ROWS * T_SEQ);
}

/* every weight of two HF checkpoints: the L2 norm of the difference and of b, and where the largest
 * difference is */
static void compare_weights(const char *a, const char *b, double *diff, double *wnorm, char *worst, size_t cap) {
    HfWeights *wa = NULL, *wb = NULL;
    GtError err = {0};
    cr_assert_eq(hf_weights_open(&wa, a, &err), 0, "%s", err.msg);
    cr_assert_eq(hf_weights_open(&wb, b, &err), 0, "%s", err.msg);
    cr_assert_eq(hf_weights_count(wa), hf_weights_count(wb), "%s and %s hold different numbers of tensors", a, b);
    *diff = 0, *wnorm = 0;
    double dmax = 0;
    for (int i = 0; i < hf_weights_count(wa); i++) {
        HfTensorInfo ia;
        hf_weights_info(wa, i, &ia);
        int k = hf_weights_find(wb, ia.name);
        cr_assert(k >= 0, "%s has no %s", b, ia.name);
        float *x = malloc((size_t)ia.numel * sizeof *x), *y = malloc((size_t)ia.numel * sizeof *y);
        cr_assert_eq(hf_weights_read_f32(wa, i, x, (size_t)ia.numel, &err), 0, "%s", err.msg);
        cr_assert_eq(hf_weights_read_f32(wb, k, y, (size_t)ia.numel, &err), 0, "%s", err.msg);
        for (int64_t q = 0; q < ia.numel; q++) {
            double dq = fabs((double)x[q] - y[q]);
            if (dq > dmax) dmax = dq, snprintf(worst, cap, "%s[%lld] (%.3g)", ia.name, (long long)q, dq);
            *diff += dq * dq;
            *wnorm += (double)y[q] * y[q];
        }
        free(x), free(y);
    }
    *diff = sqrt(*diff), *wnorm = sqrt(*wnorm);
    hf_weights_close(wa);
    hf_weights_close(wb);
}

static void round_trip(const char *fixture, const char *dtype) {
    const char *root = need_torch();
    char dir[] = "/tmp/gt_hf_llama_XXXXXX", cmd[4096], ref[128], ours[128], trained[128], toks[128];
    cr_assert(mkdtemp(dir));
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(trained, sizeof trained, "%s/ref-trained", dir);
    snprintf(ours, sizeof ours, "%s/gtrain-trained", dir);
    snprintf(toks, sizeof toks, "%s/tokens.txt", dir);
    /* a sharded checkpoint with random weights (shards of ~20 KB: several files) */
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_llama.py' make '%s/tests/fixtures/hf_configs/%s' '%s' --seed 5 "
             "--dtype %s --max-shard-bytes 20000 --init-std 0.1", root, root, fixture, ref, dtype);
    free(run(cmd));

    ModelDesc d;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&d, ref, &err), 0, "%s", err.msg);
    int tok[ROWS * T_SEQ], tgt[ROWS * T_SEQ];
    write_tokens(toks, tok, tgt, d.vocab_size);
    Backend *be = test_backend_open();
    Model *m = NULL;
    cr_assert_eq(model_create(&m, &d, be, ROWS, T_SEQ, recompute_policy(false, 1, false, d.n_layer), 1, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(checkpoint_load_weights(m, ref, &err), 0, "%s", err.msg);

    /* 1. the loss of the loaded weights */
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_llama.py' loss '%s' '%s' --digits 17", root, ref, toks);
    char *out = run(cmd);
    double want = strtod(out, NULL), got = mean_loss(m, tok, tgt);
    free(out);
    cr_assert(fabs(got - want) <= 1e-5 * fabs(want), "%s %s: gtrain's loss %.9g, the PyTorch program's %.9g", fixture,
              dtype, got, want);

    /* 2. five AdamW steps, full batch, constant lr, clipping at 1.0 */
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_llama.py' train '%s' '%s' --steps 5 --lr 1e-2 --weight-decay 0.1 "
             "--beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 --digits 17 --out '%s'", root, ref, toks, trained);
    out = run(cmd);
    RunConfig cfg = {.adam_beta1 = 0.9, .adam_beta2 = 0.95, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    const char *line = out;
    for (int step = 1; step <= 5; step++) {
        double s = 0;
        long items = count_items(tgt, ROWS * T_SEQ);
        cr_assert_eq(trainer_accumulate(m, tok, tgt, ROWS, 1, 1, LOSS_NORM_TOKENS, items, &s, &err), 0, "%s", err.msg);
        int k;
        double ref_loss;
        line = strstr(line, "step ");
        cr_assert(line && sscanf(line, "step %d loss %lf", &k, &ref_loss) == 2 && k == step, "no step %d in:\n%s", step, out);
        line++;
        cr_assert(fabs(s / items - ref_loss) <= 1e-5 * fabs(ref_loss), "%s %s step %d: gtrain's loss %.9g, PyTorch's %.9g",
                  fixture, dtype, step, s / items, ref_loss);
        clip_grads(m, grad_global_norm(m), 1.0);
        adamw_step(m, 1e-2, &cfg, step);
        model_zero_grads(m);
    }
    free(out);
    cr_assert_eq(mkdir(ours, 0755), 0);
    cr_assert_eq(checkpoint_save_weights(ours, m, false, 20000, &err), 0, "%s", err.msg);
    /* relative in the L2 norm over all weights: fp32 against float64 gradients, which AdamW divides
     * by their own size, so an element whose gradient is rounding noise (a key bias: softmax
     * ignores a constant shift) may move by lr either way; the norm keeps such elements in
     * proportion */
    double diff, wnorm;
    char worst[192] = "";
    compare_weights(ours, trained, &diff, &wnorm, worst, sizeof worst);
    cr_assert(diff <= 1e-4 * wnorm, "%s %s: weights after 5 steps differ by %.3g in norm (of %.3g; most at %s)", fixture,
              dtype, diff, wnorm, worst);

    /* 3. gtrain's saved files, read by the PyTorch program: gtrain's loss */
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_llama.py' loss '%s' '%s' --digits 17", root, ours, toks);
    out = run(cmd);
    want = strtod(out, NULL);
    got = mean_loss(m, tok, tgt);
    free(out);
    cr_assert(fabs(got - want) <= 1e-5 * fabs(want), "%s: the saved weights give %.9g in PyTorch, %.9g in gtrain",
              fixture, want, got);
    model_free(m);
    backend_close(be);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(hf_llama, llama_gqa_bf16_shards_load_train_and_save_like_pytorch, .timeout = 180) {
    round_trip("tiny-llama.json", "bf16");
}

Test(hf_llama, mistral_window_f32_shards_load_train_and_save_like_pytorch, .timeout = 180) {
    round_trip("tiny-mistral.json", "f32");
}

Test(hf_llama, qwen2_biases_tied_bf16_shards_load_train_and_save_like_pytorch, .timeout = 180) {
    round_trip("tiny-qwen2.json", "bf16");
}

Test(hf_llama, llama_f16_shards_load_train_and_save_like_pytorch, .timeout = 180) { round_trip("tiny-llama.json", "f16"); }
