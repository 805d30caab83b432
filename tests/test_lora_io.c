/* test_lora_io.c - LoRA and PiSSA runs of the gtrain binary against Hugging Face PEFT itself
 * (tests/tools/peft_lora.py: transformers' model classes, peft's LoraConfig / get_peft_model /
 * PeftModel.from_pretrained / save_pretrained, in the test references' venv; nothing of gtrain's).
 *
 * The program writes a small Llama-family (or GPT-2) checkpoint with transformers' save_pretrained
 * and a PEFT adapter with PEFT's; gtrain continues training the adapter (lora.init_from) and its 5
 * AdamW losses match PEFT's (float64, HF Trainer's AdamW and clipping written out) to 1e-4; gtrain's
 * exact PiSSA run matches PEFT's PiSSA run; PeftModel.from_pretrained loads the adapter gtrain saved
 * (a plain LoRA, or PiSSA's rank-2r conversion) onto the ORIGINAL base and gets gtrain's final eval
 * loss to 1e-5. PiSSA's initialisation itself: gtrain's initial adapter (output_dir/pissa_init) and
 * its residual base (written out here from an in-process lora_pissa_init on the same base: gtrain
 * keeps it in memory only) against PEFT's pissa_init on the same base, exact (fp32 and bf16 bases,
 * Llama, Mistral, GPT-2) and pissa_niter_4;
 * and PEFT's own conversion (save_pretrained with path_initial_model_for_weight_conversion) of the
 * trained adapter against the file gtrain saved.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"
#include "lora.h"
#include "model.h"
#include "recompute.h"
#include "safetensors.h"
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

/* a command's stdout (caller frees); the test fails on a nonzero exit */
static char *sh(const char *cmd) { return test_sh_output(false, "%s", cmd); }

/* a scratch directory with the base model (peft_lora.py make-base FIXTURE --dtype DTYPE: transformers'
 * class for the config's model_type, save_pretrained; make_args adds to the command) and the rows as
 * tokens.txt (the program's) and data.jsonl (gtrain's). A fixture not under tests/fixtures/hf_configs
 * is a path. */
static void ws_make_base(Ws *w, const char *fixture, const char *dtype, const char *make_args) {
    w->root = need_torch();
    w->bin = test_gtrain_bin();
    test_scratch_make(w->dir, sizeof w->dir, "gt_lora_io");
    snprintf(w->base, sizeof w->base, "%s/base", w->dir);
    snprintf(w->toks, sizeof w->toks, "%s/tokens.txt", w->dir);
    snprintf(w->jsonl, sizeof w->jsonl, "%s/data.jsonl", w->dir);
    char cmd[2048];
    char cfgpath[512];
    if (fixture[0] == '/') snprintf(cfgpath, sizeof cfgpath, "%s", fixture);
    else snprintf(cfgpath, sizeof cfgpath, "%s/tests/fixtures/hf_configs/%s", w->root, fixture);
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' make-base '%s' '%s' --seed 5 --dtype %s --std 0.1 %s",
             w->root, cfgpath, w->base, dtype, make_args);
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

static void ws_make(Ws *w, const char *fixture, const char *dtype) { ws_make_base(w, fixture, dtype, ""); }

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

/* PEFT's training (peft_lora.py train), after the commands in pre (ending in " + ", or ""), in one process */
static void ref_train(const Ws *w, const char *pre, const char *how, const char *out_dir, RefRun *r) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' %strain '%s' '%s' %s --steps %d --lr 1e-2 "
             "--weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 --digits 17 --out '%s'",
             w->root, pre, w->base, w->toks, how, STEPS, out_dir);
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
    double wl = 0, wg = 0;
    for (int s = 0; s < STEPS; s++) {
        wl = fmax(wl, fabs(l->loss[s] - r->loss[s]) / fabs(r->loss[s]));
        wg = fmax(wg, fabs(l->grad_norm[s] - r->grad_norm[s]) / r->grad_norm[s]);
        cr_assert(fabs(l->loss[s] - r->loss[s]) <= 1e-4 * fabs(r->loss[s]),
                  "%s step %d: gtrain's loss %.9g, PEFT's %.9g (rel %.2e)", what, s + 1, l->loss[s], r->loss[s],
                  fabs(l->loss[s] - r->loss[s]) / fabs(r->loss[s]));
        /* grad_norm (before clipping) of fp32 gradients against float64 ones */
        cr_assert(fabs(l->grad_norm[s] - r->grad_norm[s]) <= 1e-4 * r->grad_norm[s],
                  "%s step %d: gtrain's grad norm %.9g, PEFT's %.9g", what, s + 1, l->grad_norm[s], r->grad_norm[s]);
    }
    /* the final eval (after the last update) against the program's final loss */
    cr_assert(fabs(l->eval_loss[0] - r->final) <= 1e-4 * fabs(r->final),
              "%s: gtrain's final eval loss %.9g, PEFT's final loss %.9g", what, l->eval_loss[0], r->final);
    cr_log_info("%s: %d AdamW steps against PEFT's: losses within %.2e, grad norms within %.2e, final loss %.2e "
                "(relative)", what, STEPS, wl, wg, fabs(l->eval_loss[0] - r->final) / fabs(r->final));
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

/* gtrain's PiSSA initialisation in process, on the base as a run loads it (fp32): the adapters'
 * config from conf_dir's adapter_config.json (a run's pissa_init: r, lora_alpha, use_rslora,
 * modules) with init_lora_weights "pissa" (niter -1) or "pissa_niter_N"; lora_pissa_init (what a
 * run's trainer calls) writes the initial adapter into init_dir, and the residual base of every
 * adapted block, [out, in] under the HF module's name ("model.layers.0.self_attn.q_proj.weight";
 * GPT-2's Conv1D blocks too are written [out, in]), goes to the file residual: gtrain keeps it in
 * memory only. */
static void gtrain_pissa_dump(const Ws *w, const char *conf_dir, int niter, uint64_t seed, bool bf16,
                              const char *init_dir, const char *residual) {
    ModelDesc d;
    PeftConfig pc;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&d, w->base, &err), 0, "%s", err.msg);
    cr_assert_eq(lora_desc_from_adapter(&d, conf_dir, &pc, &err), 0, "%s", err.msg);
    if (niter < 0) snprintf(pc.init, sizeof pc.init, "pissa");
    else snprintf(pc.init, sizeof pc.init, "pissa_niter_%d", niter);
    Backend *be = test_backend_open();
    backend_set_act_dtype(be, bf16 ? GT_BF16 : GT_F32);
    Model *m = NULL;
    cr_assert_eq(model_create(&m, &d, be, 1, 8, recompute_policy(false, 1, false, d.n_layer), 3, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(checkpoint_load_weights(m, w->base, &err), 0, "%s", err.msg);
    lora_set_run(m, &pc, init_dir);
    cr_assert_eq(lora_pissa_init(m, niter, seed, true, &err), 0, "%s", err.msg);
    const size_t nb = m->base_layout.total;
    float *base = malloc(nb * sizeof *base);
    cr_assert(base);
    cr_assert_eq(model_download_base(m, 0, base, nb, &err), 0, "%s", err.msg);
    LoraSite sites[PEFT_MODULE_COUNT];
    const int ns = lora_sites(&m->desc, sites), nt = d.n_layer * ns;
    StTensorOut *t = calloc((size_t)nt, sizeof *t);
    char (*names)[PEFT_KEY_MAX] = calloc((size_t)nt, sizeof *names);
    cr_assert(t && names);
    const char *pre = "base_model.model.", *suf = ".lora_A.weight";
    for (int l = 0, n = 0; l < d.n_layer; l++)
        for (int k = 0; k < ns; k++, n++) {
            const LoraSite *s = &sites[k];
            const int ti = param_layout_role(&m->base_layout, l, s->role);
            cr_assert(ti >= 0);
            char key[PEFT_KEY_MAX];
            cr_assert_eq(peft_key(key, sizeof key, d.arch, l, s->module, false), 0);
            const size_t kl = strlen(key);
            cr_assert(strncmp(key, pre, strlen(pre)) == 0 && kl > strlen(suf) + strlen(pre), "%s", key);
            snprintf(names[n], sizeof names[n], "%.*s.weight", (int)(kl - strlen(pre) - strlen(suf)), key + strlen(pre));
            t[n] = (StTensorOut){names[n], ST_F32, 2, {s->rows, s->in},
                                 base + m->base_layout.tensors[ti].offset + (size_t)s->row0 * (size_t)s->in};
        }
    cr_assert_eq(safetensors_write(residual, t, nt, NULL, 0, &err), 0, "%s", err.msg);
    free(t), free(names), free(base);
    model_free(m);
    backend_close(be);
}

/* One PEFT process for a finished run in dir out (each reference call pays torch's, transformers'
 * and peft's imports): the base's loss alone (returned), PeftModel.from_pretrained(base, out)'s
 * loss, which must be gtrain's final eval loss to 1e-5 (the saved adapter, a plain LoRA or PiSSA's
 * rank-2r conversion, over the ORIGINAL base); for a PiSSA run (pissa_niter -1: exact, N:
 * pissa_niter_N; -2: not PiSSA) also gtrain's PiSSA initialisation on the same base (adapter and
 * residual, gtrain_pissa_dump) against PEFT's pissa_init (peft_lora.py pissa-check: the bounds are
 * there), and PEFT's rank-2r conversion of the trained adapter (the first halves of what gtrain
 * saved, with out/pissa_init as the initial adapter) against gtrain's file (convert-check). */
static double peft_check_run(const Ws *w, const char *what, const char *out, const Losses *l, int pissa_niter) {
    char cmd[8192], gi[256], res[256], extra[4096] = "";
    if (pissa_niter != -2) {
        const char *init = test_join(out, "pissa_init");
        cr_assert(access(test_join(init, "adapter_model.safetensors"), F_OK) == 0, "%s: no initial adapter", init);
        snprintf(gi, sizeof gi, "%s/gt-pissa-init", w->dir);
        snprintf(res, sizeof res, "%s/gt-residual.safetensors", w->dir);
        gtrain_pissa_dump(w, init, pissa_niter, 3, false, gi, res);
        char nit[32] = "";
        if (pissa_niter >= 0) snprintf(nit, sizeof nit, "--niter %d", pissa_niter);
        snprintf(extra, sizeof extra, " + pissa-check '%s' '%s' '%s' %s --seed 3 + convert-check '%s' '%s' '%s'", w->base,
                 gi, res, nit, w->base, init, out);
    }
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' loss '%s' - '%s' + loss '%s' '%s' '%s'%s", w->root,
             w->base, w->toks, w->base, out, w->toks, extra);
    char *o = sh(cmd), *end, *p = o;
    const double base = strtod(p, &end);
    cr_assert(end != p && isfinite(base), "%s: no base loss in:\n%s", what, o);
    p = end;
    const double got = strtod(p, &end);
    cr_assert(end != p && isfinite(got), "%s: no adapter loss in:\n%s", what, o);
    cr_assert(fabs(got - l->eval_loss[0]) <= 1e-5 * fabs(l->eval_loss[0]),
              "%s: gtrain's saved adapter over the original base gives %.9g in PEFT, gtrain's final eval loss %.9g",
              what, got, l->eval_loss[0]);
    cr_log_info("%s: PEFT's loss of the saved adapter %.12g, gtrain's %.12g (relative %.2e)%s", what, got,
                l->eval_loss[0], fabs(got - l->eval_loss[0]) / fabs(l->eval_loss[0]), end);
    free(o);
    return base;
}

/* (a) + (c): continue training an adapter PEFT made (get_peft_model + save_pretrained) */
static void continue_adapter(const char *fixture, const char *base_dtype, const char *adapter_args, int r, double alpha,
                             bool rslora) {
    Ws w;
    ws_make(&w, fixture, base_dtype);
    char cmd[4096], adapter[256], ref_out[256], how[512], lora[512], out[256];
    snprintf(adapter, sizeof adapter, "%s/adapter", w.dir);
    snprintf(ref_out, sizeof ref_out, "%s/ref-trained", w.dir);
    snprintf(cmd, sizeof cmd, "make-adapter '%s' '%s' %s --seed 11 --std 0.1 + ", w.base, adapter, adapter_args);
    RefRun ref;
    snprintf(how, sizeof how, "--adapter '%s'", adapter);
    ref_train(&w, cmd, how, ref_out, &ref);

    /* init_from: the adapter's config gives r, alpha and the modules */
    snprintf(lora, sizeof lora, "  init_from: %s\n  lora_dropout: 0.0\n", adapter);
    Losses l;
    gtrain_run(&w, "run", lora, &l);
    char what[128];
    snprintf(what, sizeof what, "%s + adapter (%s)", fixture, adapter_args);
    expect_losses(what, &l, &ref);
    snprintf(out, sizeof out, "%s/run", w.dir);
    expect_adapter_dir(out, r, alpha, rslora);
    const double b = peft_check_run(&w, what, out, &l, -2);
    /* the adapter matters: gtrain must apply it from step 1 */
    cr_assert(fabs(ref.loss[0] - b) > 1e-3, "the adapter should change the loss (%.9g with it, %.9g without)",
              ref.loss[0], b);
    ws_done(&w);
}

Test(lora_io, continue_bf16_q_v_adapter_on_llama_like_peft, .timeout = 240) {
    continue_adapter("tiny-llama.json", "f32", "--r 8 --alpha 16 --targets q_proj,v_proj --dtype bf16", 8, 16, false);
}

Test(lora_io, continue_all_linear_rslora_adapter_on_qwen2_like_peft, .timeout = 240) {
    continue_adapter("tiny-qwen2.json", "bf16", "--r 4 --alpha 6 --targets all-linear --rslora --dtype f32", 4, 6, true);
}

/* GPT-2: PEFT's adapter on HF's Conv1D modules (fan_in_fan_out; c_proj names both attn.c_proj and
 * mlp.c_proj) */
Test(lora_io, continue_conv1d_adapter_on_gpt2_like_peft, .timeout = 240) {
    continue_adapter("tiny-gpt2.json", "f32", "--r 4 --alpha 8 --targets c_attn,c_proj,c_fc", 4, 8, false);
}

/* Phi-3: PEFT adapts HF's fused qkv_proj and gate_up_proj as one nn.Linear each: one adapter over all
 * the rows of the fused weight */
Test(lora_io, continue_fused_adapter_on_phi3_like_peft, .timeout = 240) {
    continue_adapter("tiny-phi3.json", "f32", "--r 4 --alpha 8 --targets qkv_proj,o_proj,gate_up_proj,down_proj", 4, 8,
                     false);
}

/* lora.base_dtype: bf16 under fp32 activations, on an fp32 base: PEFT continuing the same adapter on
 * the same base whose decoder layers' linear weights torch rounded to bf16 (peft_lora.py train
 * --base-linear-bf16) gives gtrain's 5 steps (loss, grad norm, final loss within 1e-4); and PEFT on
 * the unrounded base is at least 10 times farther from gtrain's losses than that (a gtrain that kept
 * the base fp32, or rounded other tensors, lands on the wrong side: the check can fail) */
static void bf16_base_like_peft(const char *fixture, const char *adapter_args) {
    Ws w;
    ws_make(&w, fixture, "f32");
    char cmd[4096], adapter[256], ref_out[256], ref32_out[256], how[512], lora[512];
    snprintf(adapter, sizeof adapter, "%s/adapter", w.dir);
    snprintf(ref_out, sizeof ref_out, "%s/ref-bf16", w.dir);
    snprintf(ref32_out, sizeof ref32_out, "%s/ref-f32", w.dir);
    snprintf(cmd, sizeof cmd, "make-adapter '%s' '%s' %s --seed 11 --std 0.1 + ", w.base, adapter, adapter_args);
    RefRun ref, ref32;
    snprintf(how, sizeof how, "--adapter '%s' --base-linear-bf16", adapter);
    ref_train(&w, cmd, how, ref_out, &ref);
    snprintf(how, sizeof how, "--adapter '%s'", adapter);
    ref_train(&w, "", how, ref32_out, &ref32);
    snprintf(lora, sizeof lora, "  init_from: %s\n  lora_dropout: 0.0\n  base_dtype: bf16\n", adapter);
    Losses l;
    gtrain_run(&w, "run", lora, &l);
    char what[160];
    snprintf(what, sizeof what, "%s + adapter (%s), bf16 base", fixture, adapter_args);
    expect_losses(what, &l, &ref);
    double near = 0, far = 0;
    for (int s = 0; s < STEPS; s++) {
        near = fmax(near, fabs(l.loss[s] - ref.loss[s]) / fabs(ref.loss[s]));
        far = fmax(far, fabs(l.loss[s] - ref32.loss[s]) / fabs(ref32.loss[s]));
    }
    cr_assert(far > 10 * near, "%s: gtrain's losses are within %.2e of PEFT's on the bf16-rounded base but also within "
              "%.2e of PEFT's on the fp32 one: the check cannot tell", what, near, far);
    cr_log_info("%s: losses within %.2e of PEFT on the bf16-rounded base, %.2e from PEFT on the fp32 base", what, near,
                far);
    ws_done(&w);
}

Test(lora_io, bf16_base_under_fp32_is_peft_on_the_rounded_llama, .timeout = 240) {
    bf16_base_like_peft("tiny-llama.json", "--r 4 --alpha 8 --targets all-linear");
}

Test(lora_io, bf16_base_under_fp32_is_peft_on_the_rounded_gpt2, .timeout = 240) {
    bf16_base_like_peft("tiny-gpt2.json", "--r 4 --alpha 8 --targets c_attn,c_proj,c_fc");
}

/* PEFT names its targets in full below 20 adapted modules; gtrain reads each as its module in every
 * layer, so an adapter PEFT made for layer 0 alone (target_modules ["model.layers.0.self_attn.q_proj"])
 * is refused, one line naming layer 1's missing tensor, exit 2 and no output_dir */
/* DoRA (use_dora): PEFT's adapter with its magnitude vectors (PEFT's ||W|| at creation, then random
 * A and B, so the magnitude is not the norm of W + s B A), continued by gtrain: the losses and grad
 * norms (the magnitudes' gradients in them) of 5 steps against PEFT's DoRA layers, and the saved
 * adapter (lora_magnitude_vector keys, use_dora true) loaded by PeftModel.from_pretrained */
Test(lora_io, continue_dora_adapter_on_llama_like_peft, .timeout = 240) {
    continue_adapter("tiny-llama.json", "f32", "--r 4 --alpha 8 --targets q_proj,v_proj,o_proj,down_proj --dora", 4, 8,
                     false);
}

/* all seven modules (q|k|v and gate|up blocks of fused weights, each block's own norm), rslora, a bf16 base */
Test(lora_io, continue_all_linear_rslora_dora_adapter_on_a_bf16_qwen2_like_peft, .timeout = 240) {
    continue_adapter("tiny-qwen2.json", "bf16", "--r 4 --alpha 6 --targets all-linear --rslora --dora --dtype f32", 4, 6,
                     true);
}

Test(lora_io, continue_dora_conv1d_adapter_on_gpt2_like_peft, .timeout = 240) {
    continue_adapter("tiny-gpt2.json", "f32", "--r 4 --alpha 8 --targets c_attn,c_proj,c_fc --dora", 4, 8, false);
}

Test(lora_io, peft_adapter_of_one_layer_is_refused, .timeout = 120) {
    Ws w;
    ws_make(&w, "tiny-llama.json", "f32");
    char cmd[4096], cfg[256], out[256];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' make-adapter '%s' '%s/adapter' --r 4 --alpha 8 "
             "--targets model.layers.0.self_attn.q_proj", w.root, w.base, w.dir);
    free(sh(cmd));
    snprintf(cfg, sizeof cfg, "%s/run.yaml", w.dir);
    snprintf(out, sizeof out, "%s/run", w.dir);
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    fprintf(f, "model: %s\ndata:\n  train: %s\n  format: jsonl\n  seq_len: %d\nper_device_train_batch_size: %d\n"
            "max_steps: 1\nnum_threads: 1\noutput_dir: %s\nlora:\n  init_from: %s/adapter\n", w.base, w.jsonl, T_SEQ, ROWS,
            out, w.dir);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' 2>&1 >/dev/null", w.bin, cfg);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char err[4096];
    err[fread(err, 1, sizeof err - 1, p)] = '\0';
    const int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d: %s", st, err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
    cr_assert(strstr(err, "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight") && strstr(err, "every layer"),
              "%s", err);
    cr_assert(access(out, F_OK) != 0, "%s was created", out);
    ws_done(&w);
}

/* (b) + (c): exact PiSSA r 4 from the same base, in gtrain and in PEFT */
static void pissa_run(const char *fixture, const char *targets_yaml, const char *targets_arg, bool rslora) {
    Ws w;
    ws_make(&w, fixture, "f32");
    char how[512], lora[512], ref_out[256], out[256];
    snprintf(ref_out, sizeof ref_out, "%s/ref-pissa", w.dir);
    snprintf(how, sizeof how, "--init pissa --r 4 --alpha 8 --targets %s%s", targets_arg, rslora ? " --rslora" : "");
    RefRun ref;
    ref_train(&w, "", how, ref_out, &ref);

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
    const double b = peft_check_run(&w, what, out, &l, -1);
    /* W_res + s B A = W: PiSSA starts at the base's loss (PEFT's W_res is float32) */
    cr_assert(fabs(ref.loss[0] - b) <= 1e-6 * b, "PEFT's PiSSA step 1 %.12g, the base %.12g", ref.loss[0], b);
    ws_done(&w);
}

Test(lora_io, pissa_exact_all_linear_on_llama_like_peft, .timeout = 240) {
    pissa_run("tiny-llama.json", "all-linear", "all-linear", false);
}

Test(lora_io, pissa_exact_rslora_attention_on_mistral_like_peft, .timeout = 240) {
    pissa_run("tiny-mistral.json", "[q_proj, k_proj, v_proj, o_proj]", "q_proj,k_proj,v_proj,o_proj", true);
}

Test(lora_io, pissa_exact_conv1d_on_gpt2_like_peft, .timeout = 240) {
    pissa_run("tiny-gpt2.json", "[c_attn, c_proj, c_fc]", "c_attn,c_proj,c_fc", false);
}

/* Qwen3: the adapters on q_proj / k_proj act before the per-head q_norm / k_norm, as PEFT's do */
Test(lora_io, continue_all_linear_adapter_on_qwen3_like_peft, .timeout = 240) {
    continue_adapter("tiny-qwen3.json", "f32", "--r 4 --alpha 8 --targets all-linear --dtype f32", 4, 8, false);
}

Test(lora_io, pissa_exact_all_linear_on_phi3_like_peft, .timeout = 240) {
    pissa_run("tiny-phi3.json", "all-linear", "all-linear", false);
}

/* pissa_niter_4: gtrain's randomised SVD is not torch's (its own Gaussian test matrix), so no
 * loss-for-loss comparison; but the run starts at the base's loss, its saved rank-2r conversion
 * over the original base gives its final loss in PEFT, and on a base whose every weight has the
 * spectrum 0.25^j (make-base --spectrum 0.25) gtrain's and PEFT's randomised PiSSA both match the
 * exact SVD's factors within subspace iteration's own error (pissa-check --niter 4). */
Test(lora_io, pissa_niter_run_starts_at_the_base_and_saves_a_loadable_conversion, .timeout = 240) {
    Ws w;
    ws_make_base(&w, "tiny-llama.json", "f32", "--spectrum 0.25");
    Losses l;
    gtrain_run(&w, "run", "  r: 4\n  lora_alpha: 8\n  lora_dropout: 0.0\n  target_modules: [gate_proj, up_proj, down_proj]\n"
               "  init_lora_weights: pissa_niter_4\n", &l);
    cr_assert(l.eval_loss[0] < l.loss[0], "the loss should fall: %.9g -> %.9g", l.loss[0], l.eval_loss[0]);
    char out[256];
    snprintf(out, sizeof out, "%s/run", w.dir);
    expect_adapter_dir(out, 8, 16, false);
    const double b = peft_check_run(&w, "tiny-llama PiSSA niter 4", out, &l, 4);
    cr_assert(fabs(l.loss[0] - b) <= 1e-5 * b, "PiSSA (niter 4) step 1: gtrain's loss %.9g, the base's %.9g", l.loss[0], b);
    ws_done(&w);
}

/* PiSSA's initialisation on a bf16 base (the PiSSA recipe's precision: bf16): gtrain reads the base
 * in bf16 and holds W - s B A in bf16, rounded once from double; PEFT's pissa_init on the bf16 model
 * runs its SVD on the weights widened to float32 and rounds its float32 residual to bf16. Exact SVD,
 * all seven modules, rslora: pissa-check --dtype bf16 (the residuals within one bf16 ulp besides
 * the products' difference). */
Test(lora_io, pissa_init_on_a_bf16_base_like_peft, .timeout = 120) {
    Ws w;
    ws_make(&w, "tiny-llama.json", "bf16");
    char conf[256], gi[256], res[256], cmd[4096];
    snprintf(conf, sizeof conf, "%s/conf", w.dir);
    snprintf(gi, sizeof gi, "%s/gt-pissa-init", w.dir);
    snprintf(res, sizeof res, "%s/gt-residual.safetensors", w.dir);
    cr_assert_eq(mkdir(conf, 0755), 0);
    PeftConfig pc;
    peft_config_defaults(&pc);
    pc.r = 4, pc.lora_alpha = 8, pc.use_rslora = true;
    bool mask[PEFT_MODULE_COUNT] = {0};
    for (int k = PEFT_Q_PROJ; k <= PEFT_DOWN_PROJ; k++) mask[k] = true;
    peft_config_set_targets(&pc, mask);
    GtError err = {0};
    cr_assert_eq(peft_config_write(conf, &pc, &err), 0, "%s", err.msg);
    gtrain_pissa_dump(&w, conf, -1, 3, true, gi, res);
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/peft_lora.py' pissa-check '%s' '%s' '%s' --dtype bf16", w.root, w.base,
             gi, res);
    char *out = sh(cmd);
    cr_log_info("%s", out);
    free(out);
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
    char out[256];
    snprintf(out, sizeof out, "%s/run", w.dir);
    const double b = peft_check_run(&w, "tiny-llama init true, dropout 0.1", out, &l, -2);
    cr_assert(fabs(l.loss[0] - b) <= 1e-5 * b, "init true (B = 0) step 1: gtrain's loss %.9g, the base's %.9g", l.loss[0], b);
    cr_assert(fabs(l.eval_loss[0] - b) > 1e-4, "the adapters should have moved the loss (%.9g, base %.9g)", l.eval_loss[0], b);
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
    ws_done(&w);
}
