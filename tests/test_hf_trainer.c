/* test_hf_trainer.c - gtrain's training loop against the real Hugging Face transformers.Trainer (v5,
 * tests/tools/hf_trainer_ref.py): a tiny Llama (tests/fixtures/hf_configs/tiny-llama.json, weights
 * from transformers' save_pretrained) trained 4 steps on jsonl prompt_ids/completion_ids rows of
 * different lengths and completion counts, in file order (gtrain data.shuffle: false, Trainer's
 * SequentialSampler), fp32 on the CPU, same AdamW/schedule/warmup/decay/clipping on both sides.
 * Every step's loss, learning rate and gradient norm and the final weights must agree for
 *   (per_device_train_batch_size, gradient_accumulation_steps) = (8, 1), (2, 4), (1, 8): HF's
 *     num_items_in_batch normalisation (loss_normalization: tokens);
 *   gradient checkpointing with every_n_layers 2, and with offload (Trainer's own
 *     gradient_checkpointing_kwargs {"every_n_layers": 2} / {"offload": true});
 *   loss_normalization: steps against a Trainer whose loss is each micro-batch's mean divided by the
 *     accumulation count (model_accepts_loss_kwargs = False: the pre-2024 behaviour), at (2, 4) and
 *     (1, 8);
 *   cosine_with_min_lr with warmup as a ratio (the rest use linear with 1 warmup step);
 *   a tiny Qwen2 (tiny-qwen2.json: q/k/v biases, tied embeddings): Trainer's AdamW groups (no decay
 *     on biases and norms; both start away from 0 and 1 so that a decay would show);
 *   (2, 4)'s checkpoint-2 resumed as (1, 8): steps 3 and 4 and the weights are Trainer's (2, 4) run's
 *     (the file order goes on from the global row, whatever the split).
 * One Python process makes the model and data and runs every Trainer variant; gtrain runs each
 * variant through the binary. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_backend_select.h"
#include "test_util.h"

/* the run both sides train (TrainingArguments / run.yaml) */
#define STEPS 4
#define LR "2e-3"
#define WARMUP "1"
#define WEIGHT_DECAY "0.1"
#define BETA1 "0.9"
#define BETA2 "0.95"
#define EPS "1e-4"
#define CLIP "1.0"
#define SEED "7"
#define SEQ_LEN 24 /* rows are at most 25 = seq_len + 1 tokens: nothing is cut */

/* agreement: losses, lr and grad norms relative; weights absolute (they are O(1) and the steps move
 * them by up to ~4e-3). adam_epsilon 1e-4 (not 1e-8): a gradient that is rounding noise (k_proj's
 * bias: softmax ignores a shift of every score, so its true gradient is 0; embedding entries whose
 * contributions cancel) would otherwise be normalised by Adam into a full-size, implementation-
 * dependent step: with 1e-8 one such entry differs by 1.7e-5, with 1e-4 every weight agrees to
 * ~1 ulp (1.2e-7). Typical gradient entries are ~6e-3, so Adam still normalises them. */
#define LOSS_RTOL 1e-5
#define WEIGHT_ATOL 5e-7

typedef struct {
    const char *name;
    int B, A;
    const char *loss; /* tokens | steps */
    const char *gt_sets, *hf_args;
    int hf_checkpointed[2]; /* which of the 2 layers Trainer's model checkpoints */
    const char *resume_of;  /* NULL, or a variant: resume from its checkpoint-2 and compare with its Trainer run */
    const char *base;       /* NULL: the Llama ("base"); "base2": the Qwen2 (q/k/v biases, tied embeddings) */
} Variant;

#define BA(b, a) "\"per_device_train_batch_size\": " #b ", \"gradient_accumulation_steps\": " #a
static const Variant VARIANTS[] = {
    {"b8a1", 8, 1, "tokens", "", BA(8, 1), {0, 0}, NULL, NULL},
    {"b2a4", 2, 4, "tokens", "--set save_steps=2", BA(2, 4), {0, 0}, NULL, NULL},
    {"b1a8", 1, 8, "tokens", "", BA(1, 8), {0, 0}, NULL, NULL},
    {"b2a4_gc_every2", 2, 4, "tokens", "--set gradient_checkpointing=true --set every_n_layers=2",
     BA(2, 4) ", \"gradient_checkpointing\": true, \"gradient_checkpointing_kwargs\": {\"every_n_layers\": 2}", {1, 0}, NULL, NULL},
    {"b1a8_gc_offload", 1, 8, "tokens", "--set gradient_checkpointing=true --set offload=true",
     BA(1, 8) ", \"gradient_checkpointing\": true, \"gradient_checkpointing_kwargs\": {\"offload\": true}", {1, 1}, NULL, NULL},
    {"b2a4_steps", 2, 4, "steps", "", BA(2, 4), {0, 0}, NULL, NULL},
    /* another schedule, warmup as a ratio: ceil(0.3 * 4) = 2 steps (v5 spells the ratio as warmup_steps < 1) */
    {"b2a4_cosine_min_lr", 2, 4, "tokens",
     "--set lr_scheduler_type=cosine_with_min_lr --set lr_scheduler_kwargs.min_lr_rate=0.1 --set warmup_steps=0 "
     "--set warmup_ratio=0.3",
     BA(2, 4) ", \"lr_scheduler_type\": \"cosine_with_min_lr\", \"lr_scheduler_kwargs\": {\"min_lr_rate\": 0.1}, "
              "\"warmup_steps\": 0.3",
     {0, 0}, NULL, NULL},
    {"b1a8_steps", 1, 8, "steps", "", BA(1, 8), {0, 0}, NULL, NULL},
    /* b2a4's checkpoint-2 resumed as (1, 8): the file order goes on at global row 16 */
    {"b1a8_resumed", 1, 8, "tokens", "", NULL, {0, 0}, "b2a4", NULL},
    /* Qwen2: biases (no decay, as Trainer's get_decay_parameter_names) and a tied embedding */
    {"qwen2_b2a4", 2, 4, "tokens", "", BA(2, 4), {0, 0}, NULL, "base2"},
};
#define N_VARIANTS (int)(sizeof VARIANTS / sizeof VARIANTS[0])

static char g_dir[256];
static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_hf_trainer"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }
TestSuite(hf_trainer, .init = scratch_init, .fini = scratch_fini);

/* run a shell command; the test fails with its output unless it exits 0; the output in out */
static void sh(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sh(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *o = test_sh_voutput(true, fmt, ap);
    va_end(ap);
    snprintf(out, cap, "%s", o);
    free(o);
}

/* "key v1 v2 ..." from the reference's result.txt: the values into v (at most cap), their count */
static int result_row(const char *path, const char *key, double *v, int cap) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot read %s", path);
    char line[4096];
    int n = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            n = 0;
            for (char *s = line + kl, *e; n < cap; s = e) {
                double x = strtod(s, &e);
                if (e == s) break;
                v[n++] = x;
            }
            break;
        }
    fclose(f);
    cr_assert(n >= 0, "%s: no \"%s\" line", path, key);
    return n;
}

static void expect_close(const char *v, const char *what, int step, double got, double want, double rtol) {
    double d = fabs(got - want), tol = rtol * fmax(fabs(want), 1e-12);
    cr_expect(d <= tol, "%s: step %d %s: gtrain %.9g, Trainer %.9g (rel diff %.3g > %g)", v, step, what, got, want,
              d / fmax(fabs(want), 1e-300), rtol);
}

Test(hf_trainer, accumulation_recompute_and_steps_loss_match_trainer, .timeout = 600) {
    test_require_refs();
    const char *root = getenv("GTRAIN_ROOT"), *bin = test_gtrain_bin();
    cr_assert(root && bin, "GTRAIN_ROOT and GTRAIN_BIN must be set (run through make test)");
    static char out[1 << 16];

    /* the Trainer side: TrainingArguments common to every variant, then each variant's */
    char json[8192];
    int k = snprintf(json, sizeof json,
                     "{\"common\": {\"max_steps\": %d, \"learning_rate\": " LR ", \"lr_scheduler_type\": \"linear\", "
                     "\"warmup_steps\": " WARMUP ", \"weight_decay\": " WEIGHT_DECAY ", \"adam_beta1\": " BETA1
                     ", \"adam_beta2\": " BETA2 ", \"adam_epsilon\": " EPS ", \"max_grad_norm\": " CLIP
                     ", \"seed\": " SEED ", \"logging_steps\": 1, \"save_strategy\": \"no\", \"report_to\": [], "
                     "\"use_cpu\": true, \"optim\": \"adamw_torch\", \"train_sampling_strategy\": \"sequential\", "
                     "\"remove_unused_columns\": false, \"disable_tqdm\": true, \"dataloader_num_workers\": 0}, "
                     "\"variants\": [",
                     STEPS);
    for (int v = 0; v < N_VARIANTS; v++)
        if (!VARIANTS[v].resume_of)
            k += snprintf(json + k, sizeof json - (size_t)k,
                          "%s{\"name\": \"%s\", \"loss\": \"%s\", \"base\": \"%s\", \"args\": {%s}}", v ? ", " : "",
                          VARIANTS[v].name, VARIANTS[v].loss, VARIANTS[v].base ? VARIANTS[v].base : "base",
                          VARIANTS[v].hf_args);
    k += snprintf(json + k, sizeof json - (size_t)k, "]}\n");
    cr_assert(k < (int)sizeof json);
    test_write_file(test_join(g_dir, "variants.json"), json, strlen(json));
    sh(out, sizeof out, PY " '%s/tests/tools/hf_trainer_ref.py' run '%s/tests/fixtures/hf_configs/tiny-llama.json' '%s' "
       "'%s/variants.json' --seed 3 --n 16 --max-len %d --config2 '%s/tests/fixtures/hf_configs/tiny-qwen2.json'",
       root, root, g_dir, g_dir, SEQ_LEN + 1, root);

    /* the gtrain side: one run.yaml, each variant's batch split and recompute by --set */
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "model: %s/base\ntokenizer: none\ndata:\n  train: %s/train.jsonl\n  format: jsonl\n  seq_len: %d\n"
             "  shuffle: false\nmax_steps: %d\nlearning_rate: " LR "\nlr_scheduler_type: linear\nwarmup_steps: " WARMUP
             "\nweight_decay: " WEIGHT_DECAY "\nadam_beta1: " BETA1 "\nadam_beta2: " BETA2 "\nadam_epsilon: " EPS
             "\nmax_grad_norm: " CLIP "\nseed: " SEED "\nlogging_steps: 1\nsave_steps: 0\nnum_threads: 1\ndevice: cpu\n",
             g_dir, g_dir, SEQ_LEN, STEPS);
    test_write_file(test_join(g_dir, "run.yaml"), yaml, strlen(yaml));
    char pairs[8192] = "";
    size_t pl = 0;
    for (int v = 0; v < N_VARIANTS; v++) {
        const Variant *x = &VARIANTS[v];
        const char *hf = x->resume_of ? x->resume_of : x->name; /* the Trainer run to compare with */
        char resume[512] = "";
        if (x->resume_of) snprintf(resume, sizeof resume, "--set resume_from_checkpoint='%s/gt/%s/checkpoint-2'", g_dir, hf);
        sh(out, sizeof out,
           "'%s' --config '%s/run.yaml' --set output_dir='%s/gt/%s' --set per_device_train_batch_size=%d "
           "--set gradient_accumulation_steps=%d --set loss_normalization=%s --set model='%s/%s' %s %s",
           bin, g_dir, g_dir, x->name, x->B, x->A, x->loss, g_dir, x->base ? x->base : "base", x->gt_sets, resume);
        if (x->hf_checkpointed[0] || x->hf_checkpointed[1]) { /* both sides really recompute what was asked */
            char want[128];
            snprintf(want, sizeof want, "recompute every %d layer", strstr(x->gt_sets, "every_n_layers=2") ? 2 : 1);
            cr_assert(strstr(out, want), "%s: gtrain does not say \"%s\":\n%s", x->name, want, out);
            if (strstr(x->gt_sets, "offload")) cr_assert(strstr(out, ", offload"), "%s: no offload:\n%s", x->name, out);
        }
        char res[512];
        snprintf(res, sizeof res, "%s/hf/%s/result.txt", g_dir, hf);
        double gc[4];
        cr_assert_eq(result_row(res, "gradient_checkpointing", gc, 4), 2);
        for (int l = 0; l < 2; l++)
            cr_assert_eq((int)gc[l], x->hf_checkpointed[l], "%s: Trainer's layer %d checkpointed = %d, asked %d", x->name,
                         l, (int)gc[l], x->hf_checkpointed[l]);

        Losses g;
        read_train_metrics(test_join(test_join(g_dir, "gt"), x->name), &g);
        cr_assert_eq(g.n, STEPS, "%s: %d steps in metrics.jsonl", x->name, g.n);
        double hl[STEPS + 1], tm[STEPS + 1], lr[STEPS + 1], gn[STEPS + 1];
        cr_assert_eq(result_row(res, "logged_loss", hl, STEPS + 1), STEPS);
        cr_assert_eq(result_row(res, "token_mean_loss", tm, STEPS + 1), STEPS);
        cr_assert_eq(result_row(res, "lr", lr, STEPS + 1), STEPS);
        cr_assert_eq(result_row(res, "grad_norm", gn, STEPS + 1), STEPS);
        double worst = 0;
        const int first = x->resume_of ? 2 : 0; /* a resumed run logs steps 3 and 4 */
        if (x->resume_of) cr_assert(strstr(out, "resumed from"), "%s: not resumed:\n%s", x->name, out);
        for (int s = first; s < STEPS; s++) {
            cr_assert_eq(g.effective_batch[s], 8);
            /* Trainer's logged loss (the sum of the micro-batches' returned losses): under tokens each
             * is its token sum / num_items_in_batch, so the log is the step's token mean */
            if (strcmp(x->loss, "tokens") == 0)
                expect_close(x->name, "Trainer's logged loss vs its token mean", s + 1, hl[s], tm[s], 1e-6);
            expect_close(x->name, "loss", s + 1, g.loss[s], hl[s], LOSS_RTOL);
            expect_close(x->name, "lr", s + 1, g.lr[s], lr[s], 1e-8); /* metrics.jsonl: 9 digits */
            expect_close(x->name, "grad_norm", s + 1, g.grad_norm[s], gn[s], LOSS_RTOL);
            worst = fmax(worst, fabs(g.loss[s] - hl[s]) / fabs(hl[s]));
        }
        cr_log_info("%s: losses %.6f %.6f %.6f %.6f, max rel diff vs Trainer %s %.3g", x->name, g.loss[0], g.loss[1],
                    g.loss[2], g.loss[3], hf, worst);
        pl += (size_t)snprintf(pairs + pl, sizeof pairs - pl, " '%s/gt/%s/model.safetensors' '%s/hf/%s/model.safetensors'",
                               g_dir, x->name, g_dir, hf);
        cr_assert(pl < sizeof pairs);
    }
    /* the final weights; then the base, and Trainer's steps run, against Trainer's (2, 4) run: how far
     * the run moved the weights, and how far the other normalisation lands (what the tolerance tells apart) */
    sh(out, sizeof out,
       PY " '%s/tests/tools/hf_trainer_ref.py' compare%s '%s/base/model.safetensors' '%s/hf/b2a4/model.safetensors' "
       "'%s/hf/b2a4_steps/model.safetensors' '%s/hf/b2a4/model.safetensors'",
       root, pairs, g_dir, g_dir, g_dir, g_dir);
    const char *line = out;
    for (int v = 0; v <= N_VARIANTS + 1; v++) {
        double d, ref;
        int nt;
        char worst[256];
        cr_assert_eq(sscanf(line, "max_abs %lf max_ref %lf tensors %d worst %255s", &d, &ref, &nt, worst), 4,
                     "compare output: %s", out);
        if (v == N_VARIANTS) {
            cr_assert(d > 1000 * WEIGHT_ATOL, "the run barely moved the weights (%g): the comparison would be void", d);
            cr_log_info("the 4 steps move the weights by up to %.3g", d);
        } else if (v == N_VARIANTS + 1) {
            cr_assert(d > 100 * WEIGHT_ATOL, "Trainer's steps and tokens runs end %g apart: the test could not tell them apart", d);
            cr_log_info("Trainer's (2, 4) steps and tokens runs end up to %.3g apart", d);
        } else {
            cr_expect(d <= WEIGHT_ATOL, "%s: final weights differ from Trainer's by %.3g (in %s) > %g", VARIANTS[v].name,
                      d, worst, WEIGHT_ATOL);
            cr_log_info("%s: final weights max |gtrain - Trainer| %.3g (%s)", VARIANTS[v].name, d, worst);
        }
        line = strchr(line, '\n');
        cr_assert(line, "compare output: %s", out);
        line++;
    }
}
