/* test_lora_io.c - LoRA and PiSSA runs of the gtrain binary against an independent PyTorch program
 * (tests/tools/peft_lora.py over tests/tools/hf_llama.py's model: PEFT's adapter files, forward,
 * pissa_init and rank-2r conversion, AdamW in float64, nothing of gtrain's).
 *
 * transformers' save_pretrained writes a small Llama-family checkpoint (tests/tools/hf_models.py),
 * the program a PEFT adapter; gtrain continues training
 * the adapter (lora.init_from) and its 5 AdamW losses match the program's to 1e-4; gtrain's exact
 * PiSSA run matches the program's PiSSA run; the program loads the adapter gtrain saved (a plain
 * LoRA, or PiSSA's rank-2r conversion) onto the ORIGINAL base and gets gtrain's final eval loss to
 * 1e-5.
 *
 * Every step sees the whole batch: the rows are a jsonl file of ROWS examples {"prompt_ids": [t0],
 * "completion_ids": [t1 .. tT]} (seq_len T, so each row is exactly T+1 tokens, no padding, all T
 * positions predicted), and per_device_train_batch_size = ROWS with one micro-batch: the jsonl
 * sampler draws example perm_epoch(i % n) for i = step * ROWS + g, so each step is one epoch, all
 * ROWS examples in a permuted order (a different summation order only). The same file is data.val,
 * so the eval at the end (eval_steps 0) is the loss of the final adapter over all rows: the
 * program's "final loss". Dropout is 0 (gtrain's mask is its own function). Fails where
 * the test references are not installed (scripts/install-deps.sh --test-refs). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_backend_select.h"
#include "test_util.h"

#define ROWS 4
#define T_SEQ 24
#define STEPS 5

typedef struct {
    char dir[128], base[160], toks[160], jsonl[160];
    const char *root, *bin;
} Ws;

typedef struct {
    double loss[STEPS], grad_norm[STEPS], final;
} RefRun;

static const char *need_torch(void) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root || !test_gtrain_bin()) cr_skip_test("GTRAIN_ROOT/GTRAIN_BIN not set (run through make test)");
    test_require_refs();
    return root;
}

/* run a command, return its stdout (caller frees); the test fails on a nonzero exit */
static char *sh(const char *cmd) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t cap = 1 << 16, len = 0, n;
    char *out = malloc(cap);
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) len += n;
    out[len] = '\0';
    int st = pclose(p);
    cr_assert_eq(st, 0, "%s exited %d:\n%s", cmd, st, out);
    return out;
}

static double sh_number(const char *cmd) {
    char *out = sh(cmd), *end;
    double v = strtod(out, &end);
    cr_assert(end != out && isfinite(v), "%s printed no number:\n%s", cmd, out);
    free(out);
    return v;
}

/* a scratch directory with the base model (hf_models.py make FIXTURE --dtype DTYPE: transformers'
 * save_pretrained) and the rows as tokens.txt (the program's) and data.jsonl (gtrain's) */
static void ws_make(Ws *w, const char *fixture, const char *dtype) {
    w->root = need_torch();
    w->bin = test_gtrain_bin();
    test_scratch_make(w->dir, sizeof w->dir, "gt_lora_io");
    snprintf(w->base, sizeof w->base, "%s/base", w->dir);
    snprintf(w->toks, sizeof w->toks, "%s/tokens.txt", w->dir);
    snprintf(w->jsonl, sizeof w->jsonl, "%s/data.jsonl", w->dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/%s' '%s' --seed 5 "
             "--dtype %s --init-std 0.1", w->root, w->root, fixture, w->base, dtype);
    free(sh(cmd));
    FILE *ft = fopen(w->toks, "w"), *fj = fopen(w->jsonl, "w");
    cr_assert(ft && fj);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < ROWS; r++) {
        fprintf(fj, "{\"prompt_ids\": [");
        for (int t = 0; t <= T_SEQ; t++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            int tok = (int)(s % 256u); /* every fixture's vocab_size is 256 */
            fprintf(ft, "%d%c", tok, t == T_SEQ ? '\n' : ' ');
            fprintf(fj, t == 0 ? "%d], \"completion_ids\": [" : t == T_SEQ ? "%d]}\n" : "%d, ", tok);
        }
    }
    fclose(ft);
    fclose(fj);
}

static void ws_done(Ws *w) { test_scratch_remove(w->dir); }

/* the program's "step k loss L grad_norm G" lines and "final loss L" */
static void parse_ref(const char *out, RefRun *r) {
    const char *p = out;
    for (int k = 1; k <= STEPS; k++) {
        int step;
        p = strstr(p, "step ");
        cr_assert(p && sscanf(p, "step %d loss %lf grad_norm %lf", &step, &r->loss[k - 1], &r->grad_norm[k - 1]) == 3 &&
                      step == k, "no step %d in the program's output:\n%s", k, out);
        p++;
    }
    p = strstr(out, "final loss ");
    cr_assert(p && sscanf(p, "final loss %lf", &r->final) == 1, "no final loss in:\n%s", out);
}

static void ref_train(const Ws *w, const char *how, const char *out_dir, RefRun *r) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' train '%s' '%s' %s --steps %d --lr 1e-2 "
             "--weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 --digits 17 --out '%s'",
             w->root, w->base, w->toks, how, STEPS, out_dir);
    char *out = sh(cmd);
    parse_ref(out, r);
    free(out);
}

/* gtrain on the run config of this file with the given lora: section (NULL: none, full
 * fine-tuning); output_dir DIR/name */
static void gtrain_run(const Ws *w, const char *name, const char *lora_yaml, Losses *l) {
    char cfg[256], out[256], cmd[2048];
    snprintf(cfg, sizeof cfg, "%s/%s.yaml", w->dir, name);
    snprintf(out, sizeof out, "%s/%s", w->dir, name);
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    fprintf(f,
            "model: %s\n"
            "data:\n  train: %s\n  val: %s\n  format: jsonl\n  seq_len: %d\n"
            "per_device_train_batch_size: %d\nper_device_eval_batch_size: %d\ngradient_accumulation_steps: 1\n"
            "max_steps: %d\nlearning_rate: 1.0e-2\nlr_scheduler_type: constant\nwarmup_steps: 0\n"
            "weight_decay: 0.1\nadam_beta1: 0.9\nadam_beta2: 0.95\nadam_epsilon: 1.0e-8\nmax_grad_norm: 1.0\n"
            "precision: fp32\nlogging_steps: 1\neval_steps: 0\neval_max_batches: 0\nsave_steps: 0\n"
            "sample_max_new_tokens: 0\nseed: 3\nnum_threads: 1\noutput_dir: %s\n"
            "%s%s",
            w->base, w->jsonl, w->jsonl, T_SEQ, ROWS, ROWS, STEPS, out, lora_yaml ? "lora:\n" : "",
            lora_yaml ? lora_yaml : "");
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' >'%s.out' 2>&1", w->bin, cfg, out);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "%s.out", out);
        FILE *lf = fopen(cmd, "r");
        char log[4096] = "";
        if (lf) log[fread(log, 1, sizeof log - 1, lf)] = '\0', fclose(lf);
        cr_assert_fail("gtrain --config %s exited %d:\n%s", cfg, rc, log);
    }
    read_train_metrics(out, l);
    cr_assert_eq(l->n, STEPS, "%s: %d train records, expected %d", out, l->n, STEPS);
    cr_assert_eq(l->n_eval, 1, "%s: %d eval records, expected the one at the end", out, l->n_eval);
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(l->num_items[s], ROWS * T_SEQ, "step %d: %ld predicted tokens, expected the full batch's %d", s + 1,
                     l->num_items[s], ROWS * T_SEQ);
        cr_assert_eq(l->effective_batch[s], ROWS);
    }
}

static void expect_losses(const char *what, const Losses *l, const RefRun *r) {
    for (int s = 0; s < STEPS; s++) {
        cr_assert(fabs(l->loss[s] - r->loss[s]) <= 1e-4 * fabs(r->loss[s]),
                  "%s step %d: gtrain's loss %.9g, PyTorch's %.9g (rel %.2e)", what, s + 1, l->loss[s], r->loss[s],
                  fabs(l->loss[s] - r->loss[s]) / fabs(r->loss[s]));
        /* grad_norm (before clipping) of fp32 gradients against float64 ones */
        cr_assert(fabs(l->grad_norm[s] - r->grad_norm[s]) <= 1e-4 * r->grad_norm[s],
                  "%s step %d: gtrain's grad norm %.9g, PyTorch's %.9g", what, s + 1, l->grad_norm[s], r->grad_norm[s]);
    }
    /* the final eval (after the last update) against the program's final loss */
    cr_assert(fabs(l->eval_loss[0] - r->final) <= 1e-4 * fabs(r->final),
              "%s: gtrain's final eval loss %.9g, PyTorch's final loss %.9g", what, l->eval_loss[0], r->final);
}

/* output_dir is a PEFT adapter directory (never a copy of the base) with this r and lora_alpha */
static void expect_adapter_dir(const char *dir, int r, double alpha, bool rslora) {
    cr_assert(access(test_join(dir, "adapter_model.safetensors"), F_OK) == 0, "%s: no adapter_model.safetensors", dir);
    cr_assert(access(test_join(dir, "model.safetensors"), F_OK) != 0, "%s: holds a model.safetensors (the base)", dir);
    cr_assert(access(test_join(dir, "model.safetensors.index.json"), F_OK) != 0, "%s: holds sharded base weights", dir);
    FILE *f = fopen(test_join(dir, "adapter_config.json"), "rb");
    cr_assert(f, "%s: no adapter_config.json", dir);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    cr_assert(j, "%s/adapter_config.json: not JSON", dir);
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(j, "r"), *ja = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha"),
                *jp = cJSON_GetObjectItemCaseSensitive(j, "peft_type"), *ji = cJSON_GetObjectItemCaseSensitive(j, "init_lora_weights"),
                *js = cJSON_GetObjectItemCaseSensitive(j, "use_rslora");
    cr_assert(cJSON_IsNumber(jr) && jr->valuedouble == r, "%s: r should be %d:\n%s", dir, r, buf);
    cr_assert(cJSON_IsNumber(ja) && fabs(ja->valuedouble - alpha) <= 1e-12 * alpha, "%s: lora_alpha should be %.17g:\n%s",
              dir, alpha, buf);
    cr_assert(cJSON_IsString(jp) && strcmp(jp->valuestring, "LORA") == 0, "%s: peft_type", dir);
    cr_assert(cJSON_IsTrue(ji), "%s: init_lora_weights should be true (a plain LoRA):\n%s", dir, buf);
    cr_assert(rslora ? cJSON_IsTrue(js) : !cJSON_IsTrue(js), "%s: use_rslora should be %d", dir, rslora);
    cJSON_Delete(j);
}

/* the program's loss of the base with the adapter in dir */
static double ref_loss(const Ws *w, const char *adapter) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' loss '%s' '%s' '%s' --digits 17", w->root, w->base,
             adapter, w->toks);
    return sh_number(cmd);
}

static double base_loss(const Ws *w) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_models.py' loss '%s' '%s' --digits 17", w->root, w->base, w->toks);
    return sh_number(cmd);
}

/* (c): the program loads gtrain's saved adapter onto the original base: gtrain's final eval loss */
static void expect_saved_adapter_loss(const Ws *w, const char *what, const char *out, const Losses *l) {
    double got = ref_loss(w, out);
    cr_assert(fabs(got - l->eval_loss[0]) <= 1e-5 * fabs(l->eval_loss[0]),
              "%s: gtrain's saved adapter over the original base gives %.9g in PyTorch, gtrain's final eval loss %.9g",
              what, got, l->eval_loss[0]);
}

/* (a) + (c): continue training a program-made adapter */
static void continue_adapter(const char *fixture, const char *base_dtype, const char *adapter_args, int r, double alpha,
                             bool rslora) {
    Ws w;
    ws_make(&w, fixture, base_dtype);
    char cmd[4096], adapter[256], ref_out[256], how[512], lora[512], out[256];
    snprintf(adapter, sizeof adapter, "%s/adapter", w.dir);
    snprintf(ref_out, sizeof ref_out, "%s/ref-trained", w.dir);
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' make-adapter '%s' '%s' %s --seed 11 --std 0.1",
             w.root, w.base, adapter, adapter_args);
    free(sh(cmd));
    RefRun ref;
    snprintf(how, sizeof how, "--adapter '%s'", adapter);
    ref_train(&w, how, ref_out, &ref);
    /* the adapter matters: gtrain must apply it from step 1 */
    double b = base_loss(&w);
    cr_assert(fabs(ref.loss[0] - b) > 1e-3, "the adapter should change the loss (%.9g with it, %.9g without)",
              ref.loss[0], b);

    /* init_from: the adapter's config gives r, alpha and the modules */
    snprintf(lora, sizeof lora, "  init_from: %s\n  lora_dropout: 0.0\n", adapter);
    Losses l;
    gtrain_run(&w, "run", lora, &l);
    char what[128];
    snprintf(what, sizeof what, "%s + adapter (%s)", fixture, adapter_args);
    expect_losses(what, &l, &ref);
    snprintf(out, sizeof out, "%s/run", w.dir);
    expect_adapter_dir(out, r, alpha, rslora);
    expect_saved_adapter_loss(&w, what, out, &l);
    ws_done(&w);
}

Test(lora_io, continue_bf16_q_v_adapter_on_llama_like_pytorch, .timeout = 240) {
    continue_adapter("tiny-llama.json", "f32", "--r 8 --alpha 16 --targets q_proj,v_proj --dtype bf16", 8, 16, false);
}

Test(lora_io, continue_all_linear_rslora_adapter_on_qwen2_like_pytorch, .timeout = 240) {
    continue_adapter("tiny-qwen2.json", "bf16", "--r 4 --alpha 6 --targets all-linear --rslora --dtype f32", 4, 6, true);
}

/* (b) + (c): exact PiSSA r 4 from the same base, in gtrain and in the program */
static void pissa_run(const char *fixture, const char *targets_yaml, const char *targets_arg, bool rslora) {
    Ws w;
    ws_make(&w, fixture, "f32");
    char how[512], lora[512], ref_out[256], out[256], cmd[4096];
    snprintf(ref_out, sizeof ref_out, "%s/ref-pissa", w.dir);
    snprintf(how, sizeof how, "--init pissa --r 4 --alpha 8 --targets %s%s", targets_arg, rslora ? " --rslora" : "");
    RefRun ref;
    ref_train(&w, how, ref_out, &ref);
    double b = base_loss(&w);
    /* W_res + s B A = W: PiSSA starts at the base's loss (the base's by transformers in float64,
     * which keeps its norms, softmax and rope angles in float32: 1e-7) */
    cr_assert(fabs(ref.loss[0] - b) <= 1e-7 * b, "PyTorch's PiSSA step 1 %.12g, the base %.12g", ref.loss[0], b);

    snprintf(lora, sizeof lora, "  r: 4\n  lora_alpha: 8\n  lora_dropout: 0.0\n  target_modules: %s\n"
             "  use_rslora: %s\n  init_lora_weights: pissa\n", targets_yaml, rslora ? "true" : "false");
    Losses l;
    gtrain_run(&w, "run", lora, &l);
    char what[160];
    snprintf(what, sizeof what, "%s PiSSA r 4 (%s%s)", fixture, targets_arg, rslora ? ", rslora" : "");
    expect_losses(what, &l, &ref);
    snprintf(out, sizeof out, "%s/run", w.dir);
    /* PEFT's conversion: rank 2r, lora_alpha 2 alpha (rslora: sqrt(2) alpha), relative to the original base */
    expect_adapter_dir(out, 8, rslora ? 8 * sqrt(2.0) : 16, rslora);
    expect_saved_adapter_loss(&w, what, out, &l);
    /* output_dir/pissa_init: the initial adapter (rank r), whose s B0 A0 is the top-r part of each
     * base weight as torch.linalg.svd finds it */
    const char *init = test_join(out, "pissa_init");
    cr_assert(access(test_join(init, "adapter_model.safetensors"), F_OK) == 0, "%s: no initial adapter", init);
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' pissa-check '%s' '%s' --tol 1e-5", w.root, w.base, init);
    free(sh(cmd));
    ws_done(&w);
}

Test(lora_io, pissa_exact_all_linear_on_llama_like_pytorch, .timeout = 240) {
    pissa_run("tiny-llama.json", "all-linear", "all-linear", false);
}

Test(lora_io, pissa_exact_rslora_attention_on_mistral_like_pytorch, .timeout = 240) {
    pissa_run("tiny-mistral.json", "[q_proj, k_proj, v_proj, o_proj]", "q_proj,k_proj,v_proj,o_proj", true);
}

/* pissa_niter_4: gtrain's randomised SVD is not torch's (its own Gaussian test matrix), so no
 * loss-for-loss comparison; but the run starts at the base's loss, and its saved rank-2r conversion
 * over the original base gives its final loss in PyTorch. */
Test(lora_io, pissa_niter_run_starts_at_the_base_and_saves_a_loadable_conversion, .timeout = 240) {
    Ws w;
    ws_make(&w, "tiny-llama.json", "f32");
    Losses l;
    gtrain_run(&w, "run", "  r: 4\n  lora_alpha: 8\n  lora_dropout: 0.0\n  target_modules: [gate_proj, up_proj, down_proj]\n"
               "  init_lora_weights: pissa_niter_4\n", &l);
    double b = base_loss(&w);
    cr_assert(fabs(l.loss[0] - b) <= 1e-5 * b, "PiSSA (niter 4) step 1: gtrain's loss %.9g, the base's %.9g", l.loss[0], b);
    cr_assert(l.eval_loss[0] < l.loss[0], "the loss should fall: %.9g -> %.9g", l.loss[0], l.eval_loss[0]);
    char out[256];
    snprintf(out, sizeof out, "%s/run", w.dir);
    expect_adapter_dir(out, 8, 16, false);
    expect_saved_adapter_loss(&w, "tiny-llama PiSSA niter 4", out, &l);
    ws_done(&w);
}

/* The harness itself, without LoRA: full fine-tuning on the same rows and run config matches
 * transformers' LlamaForCausalLM under hf_models.py's full-batch float64 torch AdamW (every step sees
 * all rows; the final eval is the loss after the last update), so a LoRA mismatch above is LoRA's. */
Test(lora_io, full_fine_tuning_on_the_same_rows_matches_transformers, .timeout = 240) {
    Ws w;
    ws_make(&w, "tiny-llama.json", "f32");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_models.py' train '%s' '%s' --steps %d --lr 1e-2 --weight-decay 0.1 "
             "--beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 --digits 17 --out '%s/ref-full'",
             w.root, w.base, w.toks, STEPS, w.dir);
    char *out = sh(cmd);
    RefRun ref;
    const char *p = out;
    for (int k = 1; k <= STEPS; k++) {
        int step;
        p = strstr(p, "step ");
        cr_assert(p && sscanf(p, "step %d loss %lf", &step, &ref.loss[k - 1]) == 2 && step == k, "no step %d in:\n%s", k,
                  out);
        p++;
    }
    p = strstr(out, "final loss ");
    cr_assert(p && sscanf(p, "final loss %lf", &ref.final) == 1, "no final loss in:\n%s", out);
    free(out);
    Losses l;
    gtrain_run(&w, "full", NULL, &l);
    for (int s = 0; s < STEPS; s++)
        cr_assert(fabs(l.loss[s] - ref.loss[s]) <= 1e-5 * fabs(ref.loss[s]), "step %d: gtrain's loss %.9g, PyTorch's %.9g",
                  s + 1, l.loss[s], ref.loss[s]);
    cr_assert(fabs(l.eval_loss[0] - ref.final) <= 1e-5 * fabs(ref.final), "gtrain's final eval loss %.9g, PyTorch's %.9g",
              l.eval_loss[0], ref.final);
    ws_done(&w);
}

/* PEFT's defaults otherwise: init_lora_weights true (B = 0: step 1 is the base's loss; A is
 * gtrain's own random numbers, so no loss-for-loss comparison), target_modules unset (PEFT's
 * default for Llama: q_proj and v_proj, which the program reads from the saved config and checks
 * against the saved keys), and lora_dropout 0.1 while training: the final eval runs without dropout,
 * so the saved adapter over the base still gives gtrain's final eval loss. */
Test(lora_io, default_init_and_targets_with_dropout_save_what_was_evaluated, .timeout = 240) {
    Ws w;
    ws_make(&w, "tiny-llama.json", "bf16");
    Losses l;
    gtrain_run(&w, "run", "  r: 4\n  lora_alpha: 8\n  lora_dropout: 0.1\n", &l);
    double b = base_loss(&w);
    cr_assert(fabs(l.loss[0] - b) <= 1e-5 * b, "init true (B = 0) step 1: gtrain's loss %.9g, the base's %.9g", l.loss[0], b);
    cr_assert(fabs(l.eval_loss[0] - b) > 1e-4, "the adapters should have moved the loss (%.9g, base %.9g)", l.eval_loss[0], b);
    char out[256];
    snprintf(out, sizeof out, "%s/run", w.dir);
    expect_adapter_dir(out, 4, 8, false);
    FILE *f = fopen(test_join(out, "adapter_config.json"), "rb");
    cr_assert(f);
    char buf[1 << 16];
    buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(j, "target_modules");
    bool q = false, v = false;
    int n = cJSON_IsArray(tm) ? cJSON_GetArraySize(tm) : -1;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(tm, i);
        q |= cJSON_IsString(e) && strcmp(e->valuestring, "q_proj") == 0;
        v |= cJSON_IsString(e) && strcmp(e->valuestring, "v_proj") == 0;
    }
    cr_assert(n == 2 && q && v, "target_modules should be PEFT's default [q_proj, v_proj]:\n%s", buf);
    cJSON_Delete(j);
    expect_saved_adapter_loss(&w, "tiny-llama init true, dropout 0.1", out, &l);
    ws_done(&w);
}

/* peft_lora.py's own checks: B = 0 is the base, the adapter forward equals the merged weights (and
 * hf_llama.py's naive loops on them), PiSSA's identity W_res + s B A = W (exact and randomised) and
 * spectrum, adapter files round trip, the rank-2r conversion over the original base gives the
 * trained loss (with and without rslora), training moves only the adapters */
Test(lora_io, pytorch_reference_selftest, .timeout = 120) {
    const char *root = need_torch();
    char cmd[1024], line[512], fails[2048] = "";
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' selftest 2>&1", root);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    bool passed = false;
    while (fgets(line, sizeof line, p)) {
        if (!strncmp(line, "FAIL", 4) && strlen(fails) + strlen(line) < sizeof fails) strcat(fails, line);
        if (!strcmp(line, "selftest: all passed\n")) passed = true;
    }
    const int rc = pclose(p);
    cr_assert(passed && rc == 0, "%s: exit status %d\n%s", cmd, rc, fails);
}
