/* test_hf_transformers.c - gtrain against Hugging Face transformers itself (tests/tools/hf_models.py:
 * GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM, Qwen3ForCausalLM, eager
 * attention, fp32).
 * For each family a tiny checkpoint with random weights is written by save_pretrained (sharded at
 * 20 kB, F32, BF16 or F16 storage) and loaded by gtrain (checkpoint_load_weights) and by from_pretrained:
 *   - the loss agrees to 1e-5 relative;
 *   - EVERY parameter's gradient agrees: max |gtrain - HF| over a tensor <= 1e-4 x the largest
 *     |gradient| of that same tensor (read through arch.c's HF names, Conv1D transposes, stacked
 *     blocks; a tied head is the embedding's gradient);
 *   - 5 full-batch steps of torch.optim.AdamW (HF Trainer's groups: no decay on biases and norm
 *     weights, gtrain's ArchTensor.decay rule, which the test checks against the decay names the
 *     tool reports), clip_grad_norm_ 1.0: each step's loss to 1e-5 relative, the gradient norm to
 *     1e-5 at step 1 and 1e-4 after, the weights after them to 1e-4 of their L2 norm;
 *   - what gtrain then saves (sharded) loads with from_pretrained and gives gtrain's loss (1e-5).
 * Mistral runs at T = 24 with sliding_window 16 (and a second window of 8 that must change the
 * loss: the window is really applied); one Qwen2 case has use_sliding_window with a window of 8. Fails where
 * the test references are not installed. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arch.h"
#include "checkpoint.h"
#include "hf_fixture.h"
#include "hf_weights.h"
#include "optim.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "trainer.h"

#define T_SEQ 24
#define ROWS 4
#define STEPS 5

typedef struct {
    const char *config; /* a tests/fixtures/hf_configs file, or NULL: HF_FIX_TINY_GPT2 */
    const char *dtype;  /* save_pretrained's storage: f32 | bf16 | f16 */
    const char *sets;   /* extra `hf_models.py make --set` arguments, or "" */
    const char *label;  /* what the messages call it */
    double lr;          /* AdamW's learning rate; 0: 1e-2 */
} Case;

static char *run_cmd(const char *cmd) { return test_sh_output(false, "%s", cmd); }

static void write_tokens(const char *path, int *tok, int *tgt, int V) {
    FILE *f = fopen(path, "w");
    cr_assert(f);
    uint64_t s = 777;
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

/* GPT-2's key bias (rows [C, 2C) of attn.c_attn's bias: gtrain's tensor NAME and HF's alike): without
 * RoPE it adds q.b_k to every score of a query, which softmax ignores, so its gradient is zero
 * but for rounding, and AdamW (which divides by the gradient's own size) moves it by up to lr a
 * step in a direction the rounding picks. Its gradients are checked to be noise in both; its
 * values after training are left out of the weight comparison. With RoPE (the Llama family) the
 * key bias is rotated per position and matters: no exception there. */
static bool key_bias_rows(const ModelDesc *d, const char *name, int64_t *k0, int64_t *k1) {
    const size_t n = strlen(name), sfx = strlen("c_attn.bias");
    if (d->arch != ARCH_GPT2 || n < sfx || strcmp(name + n - sfx, "c_attn.bias") != 0) return false;
    if (k0) *k0 = d->n_embd, *k1 = 2 * (int64_t)d->n_embd;
    return true;
}

/* gtrain's gradients (g: model m's grads after one accumulated step, on the host) against HF's (a
 * safetensors file under HF's parameter names): every HF tensor is some block of a gtrain tensor, and
 * every gtrain tensor is covered. The bound is per gtrain tensor: max |diff| <= 1e-4 * max |HF gradient| of that tensor. */
static void compare_grads(Model *m, const float *g, const char *grads_path, const char *what) {
    const ParamLayout *pl = &m->layout;
    GtError err = {0};
    HfWeights *w = NULL;
    cr_assert_eq(hf_weights_open(&w, grads_path, &err), 0, "%s", err.msg);
    int used = 0;
    double worst_rel = 0;
    char worst[160] = "";
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        double dmax = 0, gmax = 0, kb_ours = 0, kb_theirs = 0;
        int64_t k0 = 0, k1 = 0;
        const bool kbias = key_bias_rows(&m->desc, t->name, &k0, &k1);
        used += hf_fix_grad_blocks(&m->desc, t, g, w, what, k0, k1, &dmax, &gmax, &kb_ours, &kb_theirs);
        cr_assert(gmax > 0, "%s: %s: transformers' gradient is zero everywhere (nothing compared)", what, t->name);
        cr_assert(dmax <= 1e-4 * gmax, "%s: gradient of %s differs by %.3g (largest |gradient| %.3g, %.2g of it)", what,
                  t->name, dmax, gmax, dmax / gmax);
        if (kbias) { /* zero but for rounding in both (see key_bias_rows) */
            cr_assert(kb_ours <= 1e-6 * gmax && kb_theirs <= 1e-6 * gmax,
                      "%s: %s: the key bias's gradient should be rounding noise: gtrain %.3g, transformers %.3g (of %.3g)",
                      what, t->name, kb_ours, kb_theirs, gmax);
            cr_log_info("%s: %s: key-bias gradient (0 in exact arithmetic) %.2g in gtrain, %.2g in transformers, of %.2g",
                        what, t->name, kb_ours, kb_theirs, gmax);
        }
        if (dmax / gmax > worst_rel) worst_rel = dmax / gmax, snprintf(worst, sizeof worst, "%s", t->name);
    }
    cr_assert_eq(used, hf_weights_count(w), "%s: transformers has %d parameters, gtrain's table names %d", what,
                 hf_weights_count(w), used);
    cr_log_info("%s: %d gradients, worst %s at %.2e of its largest |gradient|", what, used, worst, worst_rel);
    hf_weights_close(w);
}

/* the decay rule: gtrain's ArchTensor.decay names exactly the HF parameters HF Trainer decays
 * (hf_models.py prints them, one "decay NAME" line each) */
static void check_decay(Model *m, const char *out, const char *what) {
    const ParamLayout *pl = &m->layout;
    for (int i = 0; i < pl->n_tensors; i++) {
        const ParamTensor *t = &pl->tensors[i];
        for (int b = 0; b < t->spec->n_blocks; b++) {
            char name[128], line[160];
            int64_t row0, rows;
            arch_block_name(t, b, name, sizeof name, &m->desc, &row0, &rows);
            snprintf(line, sizeof line, "decay %s\n", name);
            cr_assert_eq(strstr(out, line) != NULL, t->decay, "%s: %s: HF Trainer %s it, gtrain %s", what, name,
                         strstr(out, line) ? "decays" : "does not decay", t->decay ? "does" : "does not");
        }
    }
}

/* the L2 norm of the difference of two HF checkpoints, of the second, and the largest element
 * difference, GPT-2's key bias apart (its largest difference into kb_max) */
static void compare_weights(const ModelDesc *d, const char *a, const char *b, double *diff, double *wnorm, double *dmax,
                            double *kb_max) {
    HfWeights *wa = NULL, *wb = NULL;
    GtError err = {0};
    cr_assert_eq(hf_weights_open(&wa, a, &err), 0, "%s", err.msg);
    cr_assert_eq(hf_weights_open(&wb, b, &err), 0, "%s", err.msg);
    cr_assert_eq(hf_weights_count(wa), hf_weights_count(wb), "%s and %s hold different numbers of tensors", a, b);
    *diff = *wnorm = *dmax = *kb_max = 0;
    for (int i = 0; i < hf_weights_count(wa); i++) {
        HfTensorInfo ia, ib;
        hf_weights_info(wa, i, &ia);
        int k = hf_weights_find(wb, ia.name);
        cr_assert(k >= 0, "%s has no %s", b, ia.name);
        hf_weights_info(wb, k, &ib);
        cr_assert_eq(ia.numel, ib.numel, "%s: %lld vs %lld values", ia.name, (long long)ia.numel, (long long)ib.numel);
        float *x = malloc((size_t)ia.numel * sizeof *x), *y = malloc((size_t)ia.numel * sizeof *y);
        cr_assert_eq(hf_weights_read_f32(wa, i, x, (size_t)ia.numel, &err), 0, "%s", err.msg);
        cr_assert_eq(hf_weights_read_f32(wb, k, y, (size_t)ia.numel, &err), 0, "%s", err.msg);
        int64_t k0 = 0, k1 = 0;
        key_bias_rows(d, ia.name, &k0, &k1);
        for (int64_t q = 0; q < ia.numel; q++) {
            const double dq = fabs((double)x[q] - y[q]);
            if (q >= k0 && q < k1) { /* GPT-2's key bias: moved by rounding noise (key_bias_rows) */
                *kb_max = fmax(*kb_max, dq);
                continue;
            }
            if (dq > *dmax) *dmax = dq;
            *diff += dq * dq, *wnorm += (double)y[q] * y[q];
        }
        free(x), free(y);
    }
    *diff = sqrt(*diff), *wnorm = sqrt(*wnorm);
    hf_weights_close(wa);
    hf_weights_close(wb);
}

static void against_transformers(const Case *c) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128], cmd[4096];
    test_scratch_make(dir, sizeof dir, "gt_hf_tf");
    const char *ref = test_join(dir, "ref");
    snprintf(cmd, sizeof cmd, "--seed 5 --dtype %s --max-shard-bytes 20000 --init-std 0.1 --bias-std 0.1 %s", c->dtype,
             c->sets);
    hf_fix_make(root, dir, c->config, ref, cmd);
    char what[128];
    snprintf(what, sizeof what, "%s (%s storage)", c->label, c->dtype);

    ModelDesc d;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&d, ref, &err), 0, "%s", err.msg);
    int tok[ROWS * T_SEQ], tgt[ROWS * T_SEQ];
    write_tokens(test_join(dir, "tokens.txt"), tok, tgt, d.vocab_size);
    Backend *be = test_backend_open();
    Model *m = NULL;
    cr_assert_eq(model_create(&m, &d, be, ROWS, T_SEQ, recompute_policy(false, 1, false, d.n_layer), 1, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(checkpoint_load_weights(m, ref, &err), 0, "%s", err.msg);

    /* gtrain first: 5 full-batch steps (loss and gradient norm of each, step 1's gradients), the
     * trained weights saved (sharded) and their loss */
    const double lr = c->lr > 0 ? c->lr : 1e-2;
    RunConfig rc = {.adam_beta1 = 0.9, .adam_beta2 = 0.95, .adam_epsilon = 1e-8, .weight_decay = 0.1};
    const long items = count_items(tgt, ROWS * T_SEQ);
    double got_loss[STEPS + 1], got_norm[STEPS + 1];
    float *g1 = malloc(m->layout.total * sizeof *g1);
    cr_assert_not_null(g1);
    for (int step = 1; step <= STEPS; step++) {
        double s = 0;
        cr_assert_eq(trainer_accumulate(m, tok, tgt, ROWS, 1, 1, LOSS_NORM_TOKENS, items, &s, &err), 0, "%s", err.msg);
        got_loss[step] = s / (double)items, got_norm[step] = grad_global_norm(m);
        if (step == 1)
            cr_assert_eq(be->ops->to_host(be, g1, m->grads, m->layout.total * sizeof *g1, &err), 0, "%s", err.msg);
        clip_grads(m, got_norm[step], 1.0);
        adamw_step(m, lr, &rc, step);
        model_zero_grads(m);
    }
    const char *ours = test_join(dir, "gtrain-trained");
    cr_assert_eq(mkdir(ours, 0755), 0);
    cr_assert_eq(checkpoint_save_weights(ours, m, false, 20000, &err), 0, "%s", err.msg);
    const double got_final = mean_loss(m, tok, tgt);

    /* transformers: the same 5 steps with torch AdamW, step 1's gradients, the trained model saved
     * F32, and the loss of gtrain's saved weights through from_pretrained */
    snprintf(cmd, sizeof cmd, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' train ref tokens.txt --compute f32 "
             "--steps %d --lr %.17g --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 --digits 17 "
             "--grads grads/model.safetensors --print-decay --out ref-trained --eval-model gtrain-trained", dir, root, STEPS, lr);
    char *out = run_cmd(cmd);
    check_decay(m, out, what);
    double worst_loss = 0, worst_norm = 0, norm1 = 0;
    for (int step = 1; step <= STEPS; step++) {
        char key[32];
        snprintf(key, sizeof key, "step %d loss ", step);
        const double want = hf_fix_after(out, key), want_norm = hf_fix_after(strstr(out, key), "grad_norm ");
        cr_assert(fabs(got_loss[step] - want) <= 1e-5 * fabs(want), "%s step %d: gtrain's loss %.9g, transformers' %.9g",
                  what, step, got_loss[step], want);
        /* step 1 from the same weights: 1e-5; later steps from weights AdamW has moved apart where a
         * gradient is rounding noise (GPT-2's key bias, near-zero elements: see the weight check),
         * and the gradient norm feels that first: 1e-4 */
        cr_assert(fabs(got_norm[step] - want_norm) <= (step == 1 ? 1e-5 : 1e-4) * want_norm,
                  "%s step %d: gradient norm %.9g, transformers' %.9g", what, step, got_norm[step], want_norm);
        worst_loss = fmax(worst_loss, fabs(got_loss[step] - want) / fabs(want));
        if (step == 1) norm1 = fabs(got_norm[step] - want_norm) / want_norm;
        worst_norm = fmax(worst_norm, fabs(got_norm[step] - want_norm) / want_norm);
    }
    compare_grads(m, g1, test_join(dir, "grads/model.safetensors"), what);
    free(g1);

    /* the weights after 5 steps, and gtrain's saved files read by from_pretrained */
    double diff, wnorm, dmax, kb_max;
    compare_weights(&m->desc, ours, test_join(dir, "ref-trained"), &diff, &wnorm, &dmax, &kb_max);
    cr_assert(diff <= 1e-4 * wnorm, "%s: weights after %d steps differ by %.3g in L2 norm (of %.3g; largest element %.3g)",
              what, STEPS, diff, wnorm, dmax);
    const double want_final = hf_fix_after(out, "eval_model loss ");
    free(out);
    cr_assert(fabs(got_final - want_final) <= 1e-5 * fabs(want_final),
              "%s: gtrain's saved weights give %.9g in transformers, %.9g in gtrain", what, want_final, got_final);
    cr_log_info("%s: losses within %.1e, gradient norms within %.1e (step 1: %.1e), weights after %d steps within %.1e "
                "(L2, relative; largest element %.2e%s), saved weights' loss within %.1e", what, worst_loss, worst_norm,
                norm1, STEPS,
                diff / wnorm, dmax, m->desc.arch == ARCH_GPT2 ? "; the key bias apart" : "",
                fabs(got_final - want_final) / fabs(want_final));
    if (m->desc.arch == ARCH_GPT2) cr_log_info("%s: key bias after %d steps: largest difference %.2e", what, STEPS, kb_max);
    model_free(m);
    backend_close(be);
    test_scratch_remove(dir);
}

Test(hf_transformers, gpt2_f32_shards, .timeout = 120) { against_transformers(&(Case){NULL, "f32", "", "GPT-2", 0}); }

Test(hf_transformers, gpt2_bf16_shards, .timeout = 120) { against_transformers(&(Case){NULL, "bf16", "", "GPT-2", 0}); }

Test(hf_transformers, llama_gqa_bf16_shards, .timeout = 120) {
    against_transformers(&(Case){"tiny-llama.json", "bf16", "", "Llama GQA 4/2", 0});
}

/* every bias Llama has (attention_bias: q, k, v, o; mlp_bias: gate, up, down), llama3 rope scaling
 * (original_max_position_embeddings 8 < T, so the scaled bands matter), a tied head */
Test(hf_transformers, llama_all_biases_llama3_rope_tied_f32, .timeout = 120) {
    against_transformers(&(Case){"tiny-llama.json", "f32",
                                 "--set attention_bias=true --set mlp_bias=true --set tie_word_embeddings=true "
                                 "--set 'rope_scaling={\"rope_type\": \"llama3\", \"factor\": 4.0, \"low_freq_factor\": 1.0, "
                                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8}'",
                                 "Llama all biases, llama3 rope, tied", 0});
}

Test(hf_transformers, llama_f16_shards, .timeout = 120) { against_transformers(&(Case){"tiny-llama.json", "f16", "", "Llama GQA 4/2", 0}); }

Test(hf_transformers, mistral_window_16_below_t_f32_shards, .timeout = 120) {
    against_transformers(&(Case){"tiny-mistral.json", "f32", "", "Mistral window 16 < T", 0});
}

/* Phi-3: HF's fused qkv_proj and gate_up_proj (one block each), untied */
Test(hf_transformers, phi3_fused_f32_shards, .timeout = 120) {
    against_transformers(&(Case){"tiny-phi3.json", "f32", "", "Phi-3 fused qkv/gate_up, GQA 4/2", 0});
}

/* Phi-3's sliding_window (every layer) below T, a tied head, BF16 storage */
Test(hf_transformers, phi3_window_8_tied_bf16, .timeout = 120) {
    against_transformers(&(Case){"tiny-phi3.json", "bf16", "--set sliding_window=8 --set tie_word_embeddings=true",
                                 "Phi-3 window 8, tied", 0});
}

/* Qwen3: per-head q_norm / k_norm, head_dim 32 (n_head * head_dim = 128 != hidden_size 64), tied.
 * lr 3e-3, not 1e-2: q_norm / k_norm make the loss blind to each q and k head's scale, so the
 * q_proj / k_proj gradients have directions that are rounding noise, which AdamW (dividing by the
 * gradient's own size) turns into steps of up to lr; at 1e-2 the two trainings drift apart by 1e-5
 * of the loss by step 4 on the CUDA simulator although step 1's every gradient agrees to 2e-6 */
Test(hf_transformers, qwen3_qk_norm_head_dim_32_tied_f32_shards, .timeout = 120) {
    against_transformers(&(Case){"tiny-qwen3.json", "f32", "", "Qwen3 QK-norm, head_dim 32, tied", 3e-3});
}

/* attention_bias (q, k, v and o biases under the QK-norm), untied, a window of 8 on every layer, BF16 */
Test(hf_transformers, qwen3_attention_bias_window_8_bf16, .timeout = 120) {
    against_transformers(&(Case){"tiny-qwen3.json", "bf16",
                                 "--set attention_bias=true --set tie_word_embeddings=false --set use_sliding_window=true "
                                 "--set sliding_window=8 --set max_window_layers=0",
                                 "Qwen3 attention biases, window 8, untied", 3e-3});
}

Test(hf_transformers, qwen2_biases_tied_bf16_shards, .timeout = 120) {
    against_transformers(&(Case){"tiny-qwen2.json", "bf16", "", "Qwen2 q/k/v biases, tied", 0});
}

/* gtrain has one window for all layers (a window from layer 1 on is refused in model_desc_llama.c) */
Test(hf_transformers, qwen2_window_8_every_layer_f32, .timeout = 120) {
    against_transformers(&(Case){"tiny-qwen2.json", "f32",
                                 "--set use_sliding_window=true --set sliding_window=8 --set max_window_layers=0",
                                 "Qwen2 window 8 on every layer", 0});
}

/* the window is applied by transformers at T = 24: the same weights with a window of 8 instead of 16
 * give another loss (and gtrain, given each config, each loss); sdpa attention agrees with eager */
Test(hf_transformers, mistral_window_changes_the_loss_in_both, .timeout = 120) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128], cmd[4096];
    test_scratch_make(dir, sizeof dir, "gt_hf_win");
    double hf[2], gt[2];
    const int windows[2] = {16, 8};
    int tok[ROWS * T_SEQ], tgt[ROWS * T_SEQ];
    /* one checkpoint (BF16); w8 is the same files with sliding_window 8 in config.json */
    snprintf(cmd, sizeof cmd, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' make "
             "'%s/tests/fixtures/hf_configs/tiny-mistral.json' w16 --seed 5 --init-std 0.1 --dtype bf16 >/dev/null && "
             "cp -r w16 w8 && "
             "sed -i 's/\"sliding_window\": 16/\"sliding_window\": 8/' w8/config.json", dir, root, root);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    for (int k = 0; k < 2; k++) {
        char sub[16];
        snprintf(sub, sizeof sub, "w%d", windows[k]);
        ModelDesc d;
        GtError err = {0};
        cr_assert_eq(model_desc_load(&d, test_join(dir, sub), &err), 0, "%s", err.msg);
        cr_assert_eq(d.sliding_window, windows[k]);
        if (k == 0) write_tokens(test_join(dir, "tokens.txt"), tok, tgt, d.vocab_size);
        Backend *be = test_backend_open();
        Model *m = NULL;
        cr_assert_eq(model_create(&m, &d, be, ROWS, T_SEQ, recompute_policy(false, 1, false, d.n_layer), 1, &err), 0,
                     "%s", err.msg);
        cr_assert_eq(checkpoint_load_weights(m, test_join(dir, sub), &err), 0, "%s", err.msg);
        gt[k] = mean_loss(m, tok, tgt);
        model_free(m);
        backend_close(be);
    }
    snprintf(cmd, sizeof cmd, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' loss w16 tokens.txt --also w8 --compute f32 "
             "--digits 17", dir, root);
    char *out = run_cmd(cmd), *end;
    hf[0] = strtod(out, &end);
    hf[1] = strtod(end, NULL);
    free(out);
    for (int k = 0; k < 2; k++)
        cr_assert(fabs(gt[k] - hf[k]) <= 1e-5 * fabs(hf[k]), "window %d: gtrain %.9g, transformers %.9g", windows[k], gt[k],
                  hf[k]);
    cr_assert(fabs(hf[0] - hf[1]) > 1e-3 * fabs(hf[0]), "windows 16 and 8 give %.9g and %.9g in transformers", hf[0], hf[1]);
    /* transformers' sdpa attention applies the same window as its eager one */
    snprintf(cmd, sizeof cmd, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' loss w8 tokens.txt --compute f32 --attn sdpa "
             "--digits 17", dir, root);
    out = run_cmd(cmd);
    const double sdpa = strtod(out, NULL);
    free(out);
    cr_assert(fabs(sdpa - hf[1]) <= 1e-6 * fabs(hf[1]), "window 8: sdpa %.9g, eager %.9g", sdpa, hf[1]);
    cr_log_info("mistral T=%d: window 16 -> %.9g, window 8 -> %.9g (transformers), %.9g / %.9g (gtrain)", T_SEQ, hf[0],
                hf[1], gt[0], gt[1]);
    test_scratch_remove(dir);
}
