/* test_generate.c - gtrain's batched greedy generation (generate_run over a KV cache, decode.h /
 * generate.h) against transformers' own generate() (tests/tools/hf_generate.py: each prompt ALONE,
 * batch 1, eager attention, use_cache, do_sample=False, exactly N new tokens, fp32 unless said), suite
 * generate. Ten prompts of very different lengths (1, 3, 40, 150, ... tokens; ctx 256) go through ONE
 * generate_run with 3 slots, so rows finish and later prompts take their slots, and a prefill chunk
 * of 16, so the 150-token prompt is prefilled in 10 calls beside other rows' decode steps; 64 new
 * tokens each, no EOS. Models: tiny random checkpoints written by save_pretrained
 * (tests/tools/hf_models.py; weights N(0, 0.1) so the logits are not flat): Llama (GQA), Mistral with
 * sliding_window 16 (well below prompt + generation), Qwen2 (q/k/v biases, tied head), GPT-2 (learned
 * positions, n_positions 256); a Llama with a PEFT LoRA adapter on every linear (lora_A and lora_B
 * random: B nonzero), unmerged in both, and PEFT's merge_and_unload() of it and gtrain merge's output in
 * gtrain against the unmerged reference; a bitsandbytes NF4 directory with a LoRA adapter
 * (tests/tools/bnb_qlora.py; the reference dequantizes every Linear4bit with bitsandbytes'
 * dequantize_4bit to fp32); and bf16 (gtrain precision bf16 against HF in torch.bfloat16). Where a
 * feature is under test, gtrain without it must generate something else (Mistral with the window taken
 * out of config.json, the base without its adapter, the fp32 base the NF4 one was quantized from): the
 * comparison can see it. And EOS (eos_rows_leave_early_...): rows ending at different steps leave the
 * batch early; ids up to and including the EOS and the finish reason equal transformers'.
 *
 * Equal token for token. The one honest exception: a step where the reference's own top-1 and
 * top-2 logits are within TIE_F32 (1e-4; gtrain's fp32 logits are about 1e-6 from HF's) is a near
 * tie whose winner rounding decides; that prompt is compared up to that step, and the test says so
 * in its log (none found at the time of writing). Every difference elsewhere fails with the step and
 * the margin. bf16: see bf16_llama. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_fixture.h"
#include "hf_fixture.h"
#include "test_backend_select.h"
#include "test_util.h"

#define N_PROMPTS 10
#define NEW_TOKENS 64
#define SLOTS 3
#define CHUNK 16
#define CTX 256
#define TIE_F32 1e-4

static const int LENS[N_PROMPTS] = {1, 3, 40, 150, 7, 90, 2, 64, 120, 15};

/* gtrain's generations o against the reference's (hf ids, margins); a first difference at a step
 * whose reference margin is below tie ends that prompt's comparison there (a near tie), any other
 * fails. Returns the tokens compared; *cut counts prompts cut short. */
static long compare(const char *what, const GenFixOut *o, const int *hf, const double *margin, double tie, int *cut) {
    long compared = 0;
    *cut = 0;
    for (long i = 0; i < N_PROMPTS; i++) {
        cr_assert_eq(o->n[i], NEW_TOKENS, "%s: prompt %ld (%d tokens): %d ids generated, expected %d", what, i, LENS[i],
                     o->n[i], NEW_TOKENS);
        cr_assert_eq(o->finish[i], GEN_FINISH_LENGTH, "%s: prompt %ld finished by %s", what, i,
                     gen_finish_name(o->finish[i]));
        for (int t = 0; t < NEW_TOKENS; t++) {
            const int want = hf[i * NEW_TOKENS + t], got = o->ids[i][t];
            const double mg = margin[i * NEW_TOKENS + t];
            if (got != want) {
                cr_assert(mg < tie,
                          "%s: prompt %ld (%d tokens) step %d: gtrain %d, transformers %d (the reference's top-2 margin "
                          "there %.3g, not a near tie: >= %.1g)",
                          what, i, LENS[i], t, got, want, mg, tie);
                cr_log_info("%s: prompt %ld step %d: gtrain %d, transformers %d at a near tie (reference margin %.3g "
                            "< %.1g): compared up to there", what, i, t, got, want, mg, tie);
                (*cut)++;
                break;
            }
            compared++;
        }
    }
    return compared;
}

typedef struct {
    const char *label;
    const char *make;    /* shell commands in the scratch directory making the model(s); %1$s the root */
    const char *gt_dir;  /* what gtrain loads */
    const char *gt_adapter;
    const char *hf_args; /* hf_generate.py greedy's MODELDIR [--adapter DIR] [--dtype ...] [--merged-out DIR] */
    GtDtype act;
    double tie;          /* near-tie margin */
    const char *also[2]; /* more models gtrain runs (no adapter) against the same reference (merged ones), or NULL */
    const char *differs; /* a model (no adapter) whose generations must NOT all equal the reference's: the
                          * feature under test matters (the window taken out, the adapter left off), or NULL */
} Case;

static void against_generate(const Case *c) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128], make[2048];
    test_scratch_make(dir, sizeof dir, "gt_gen");
    snprintf(make, sizeof make, c->make, root);
    free(test_sh_output(false, "cd '%s' && %s", dir, make));

    GtError err = {0};
    ModelDesc d;
    cr_assert_eq(model_desc_load(&d, test_join(dir, c->gt_dir), &err), 0, "%s", err.msg);
    GenFixPrompts pr;
    gen_fix_prompts(&pr, LENS, N_PROMPTS, d.vocab_size, 0x9e3779b97f4a7c15ull);
    cr_assert_eq(gen_fix_write_prompts(&pr, test_join(dir, "prompts.txt")), 0);
    char *out = test_sh_output(false, "cd '%s' && " PY " '%s/tests/tools/hf_generate.py' greedy %s prompts.txt --new %d",
                               dir, root, c->hf_args, NEW_TOKENS);
    int *hf;
    double *margin;
    gen_fix_read_hf(out, N_PROMPTS, NEW_TOKENS, &hf, &margin, NULL);
    free(out);
    double min_margin = INFINITY;
    for (int k = 0; k < N_PROMPTS * NEW_TOKENS; k++) min_margin = fmin(min_margin, margin[k]);

    if (c->differs) { /* the feature matters: without it some prompt's generation changes */
        GenFixModel g;
        cr_assert_eq(gen_fix_open(&g, test_join(dir, c->differs), NULL, c->act, SLOTS, CTX, CHUNK, &err), 0, "%s: %s",
                     c->label, err.msg);
        GenOptions opt = {.max_new_tokens = NEW_TOKENS, .temperature = 1, .top_p = 1, .prefill_chunk = CHUNK};
        GenFixOut o;
        gen_fix_out_init(&o, N_PROMPTS);
        cr_assert_eq(gen_fix_generate(&g, &pr, &opt, &o, &err), 0, "%s: %s", c->label, err.msg);
        int differ = 0;
        for (long i = 0; i < N_PROMPTS; i++)
            differ += o.n[i] != NEW_TOKENS || memcmp(o.ids[i], hf + i * NEW_TOKENS, NEW_TOKENS * sizeof(int)) != 0;
        cr_assert(differ > 0, "%s: %s generates what the reference does: the test cannot see the feature", c->label,
                  c->differs);
        cr_log_info("%s: %s differs from the reference on %d of %d prompts", c->label, c->differs, differ, N_PROMPTS);
        gen_fix_out_free(&o);
        gen_fix_close(&g);
    }
    for (int run = 0; run < 3 && (run == 0 || c->also[run - 1]); run++) {
        const char *gdir = run ? c->also[run - 1] : c->gt_dir;
        const char *adapter = run ? NULL : c->gt_adapter;
        GenFixModel g;
        cr_assert_eq(gen_fix_open(&g, test_join(dir, gdir), adapter ? test_join(dir, adapter) : NULL, c->act, SLOTS, CTX,
                                  CHUNK, &err), 0, "%s: %s", c->label, err.msg);
        GenOptions opt = {.max_new_tokens = NEW_TOKENS, .do_sample = false, .temperature = 1, .top_p = 1,
                          .prefill_chunk = CHUNK};
        GenFixOut o;
        gen_fix_out_init(&o, N_PROMPTS);
        cr_assert_eq(gen_fix_generate(&g, &pr, &opt, &o, &err), 0, "%s: %s", c->label, err.msg);
        cr_assert_eq(o.done, N_PROMPTS, "%s: %ld prompts reported, expected %d", c->label, o.done, N_PROMPTS);
        char what[160];
        snprintf(what, sizeof what, "%s%s%s%s", c->label, run ? " (" : "", run ? gdir : "",
                 run ? ": merged, against the unmerged reference)" : "");
        int cut;
        const long compared = compare(what, &o, hf, margin, c->tie, &cut);
        /* the test has teeth: most of the tokens are compared */
        cr_assert(compared >= (long)N_PROMPTS * NEW_TOKENS / 2, "%s: only %ld of %d tokens compared", what, compared,
                  N_PROMPTS * NEW_TOKENS);
        cr_log_info("%s: %ld of %d tokens equal to transformers' generate (%d prompts cut at a near tie < %.1g); the "
                    "reference's smallest top-2 margin %.2e", what, compared, N_PROMPTS * NEW_TOKENS, cut, c->tie,
                    min_margin);
        gen_fix_out_free(&o);
        gen_fix_close(&g);
    }
    free(hf), free(margin);
    gen_fix_prompts_free(&pr);
    test_scratch_remove(dir);
}

#define HF_MAKE PY " '%1$s/tests/tools/hf_models.py' make '%1$s/tests/fixtures/hf_configs/"

Test(generate, llama_gqa_greedy_equals_transformers, .timeout = 300) {
    against_generate(&(Case){"Llama GQA 4/2", HF_MAKE "tiny-llama.json' m --seed 5 --init-std 0.1 >/dev/null", "m", NULL,
                             "m", GT_F32, TIE_F32, {NULL}, NULL});
}

Test(generate, mistral_window_16_greedy_equals_transformers, .timeout = 300) {
    against_generate(&(Case){"Mistral sliding_window 16",
                             HF_MAKE "tiny-mistral.json' m --seed 6 --init-std 0.1 >/dev/null && cp -r m nowindow && "
                             "sed -i 's/\"sliding_window\": 16/\"sliding_window\": null/' nowindow/config.json && "
                             "grep -q '\"sliding_window\": null' nowindow/config.json",
                             "m", NULL, "m", GT_F32, TIE_F32, {NULL}, "nowindow"});
}

Test(generate, qwen2_biases_tied_greedy_equals_transformers, .timeout = 300) {
    against_generate(&(Case){"Qwen2 q/k/v biases, tied",
                             HF_MAKE "tiny-qwen2.json' m --seed 7 --init-std 0.1 --bias-std 0.1 >/dev/null", "m", NULL,
                             "m", GT_F32, TIE_F32, {NULL}, NULL});
}

Test(generate, gpt2_greedy_equals_transformers, .timeout = 300) {
    against_generate(&(Case){"GPT-2 (n_positions 256)",
                             HF_MAKE "tiny-gpt2.json' m --seed 8 --init-std 0.1 --bias-std 0.1 --set n_positions=256 "
                             "--set n_ctx=256 --set attn_pdrop=0.0 --set embd_pdrop=0.0 --set resid_pdrop=0.0 >/dev/null",
                             "m", NULL, "m", GT_F32, TIE_F32, {NULL}, NULL});
}

/* PEFT's adapter unmerged in both; then, in gtrain, PEFT's merge_and_unload() (saved F32: peft-merged)
 * and gtrain merge's output (gtrain-merged) */
Test(generate, lora_unmerged_and_merged_greedy_equal_peft, .timeout = 300) {
    if (!test_gtrain_bin()) cr_skip_test("GTRAIN_BIN is not set (run through make test)");
    against_generate(&(Case){"Llama + LoRA r 4 all-linear (unmerged)",
                             HF_MAKE "tiny-llama.json' base --seed 9 --init-std 0.1 >/dev/null && " PY
                             " '%1$s/tests/tools/peft_lora.py' make-adapter base adapter --r 4 --alpha 8 "
                             "--targets all-linear --std 0.1 --seed 3 >/dev/null && "
                             "\"$GTRAIN_BIN\" merge --base base --adapter adapter --out gtrain-merged >/dev/null",
                             "base", "adapter", "base --adapter adapter --merged-out peft-merged", GT_F32, TIE_F32,
                             {"peft-merged", "gtrain-merged"}, "base"});
}

/* bitsandbytes' NF4 directory (double quant) + PEFT's LoRA, fp32 compute */
Test(generate, nf4_bnb_base_lora_greedy_equals_transformers, .timeout = 300) {
    against_generate(&(Case){"NF4 (bitsandbytes) Llama + LoRA r 4",
                             PY " '%1$s/tests/tools/bnb_qlora.py' make '%1$s/tests/fixtures/hf_configs/tiny-llama.json' . "
                             "--seed 5 --r 4 --alpha 8 --double-quant 1 >/dev/null",
                             "bnb", "adapter", "bnb --adapter adapter", GT_F32, TIE_F32, {NULL}, "base"});
}

/* bf16: gtrain precision bf16 against transformers with the model in torch.bfloat16 (weights rounded
 * to bf16 by both; both compute in bf16 with wider accumulation, but not in the same order, and HF
 * rounds each op's output to bf16 where gtrain keeps some in fp32), so the logits differ by a few bf16
 * steps (1/128 of |logit| near 1): a reference margin below TIE_BF16 is a near tie here */
#define TIE_BF16 0.1
Test(generate, bf16_llama_greedy_equals_transformers_bf16_up_to_near_ties, .timeout = 300) {
    against_generate(&(Case){"Llama GQA 4/2, bf16", HF_MAKE "tiny-llama.json' m --seed 5 --init-std 0.1 >/dev/null", "m",
                             NULL, "m --dtype bf16", GT_BF16, TIE_BF16, {NULL}, NULL});
}

/* EOS: rows end at different steps, so a row leaves the batch early and the next prompt takes its slot
 * at once. Three ids the reference generates (without EOS) at different steps of different prompts
 * become the EOS set of both sides (transformers' generation_config.eos_token_id); each prompt's ids up
 * to and including its first EOS, and why it ended, equal transformers'. */
Test(generate, eos_rows_leave_early_equal_transformers, .timeout = 300) {
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    test_require_refs();
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_gen_eos");
    free(test_sh_output(false, "cd '%s' && " PY " '%s/tests/tools/hf_models.py' make '%s/tests/fixtures/hf_configs/"
                        "tiny-llama.json' m --seed 12 --init-std 0.1 >/dev/null", dir, root, root));
    GtError err = {0};
    GenFixPrompts pr;
    gen_fix_prompts(&pr, LENS, N_PROMPTS, 256, 0x5151);
    cr_assert_eq(gen_fix_write_prompts(&pr, test_join(dir, "prompts.txt")), 0);
    const char *gen = "cd '%s' && " PY " '%s/tests/tools/hf_generate.py' greedy m prompts.txt --new %d%s";
    char *out = test_sh_output(false, gen, dir, root, NEW_TOKENS, "");
    int *free_run, *hf, len[N_PROMPTS];
    double *margin;
    gen_fix_read_hf(out, N_PROMPTS, NEW_TOKENS, &free_run, &margin, NULL);
    free(out), free(margin);
    GenOptions opt = {.max_new_tokens = NEW_TOKENS, .temperature = 1, .top_p = 1, .prefill_chunk = CHUNK};
    char eos_args[128] = "";
    for (int i = 0; i < N_PROMPTS && opt.n_eos < 3; i++) { /* prompt i's token at step 4 + 7 i */
        const int id = free_run[i * NEW_TOKENS + 4 + 7 * i];
        bool seen = false;
        for (int k = 0; k < opt.n_eos; k++) seen |= opt.eos[k] == id;
        if (seen) continue;
        opt.eos[opt.n_eos++] = id;
        snprintf(eos_args + strlen(eos_args), sizeof eos_args - strlen(eos_args), " --eos %d", id);
    }
    free(free_run);
    cr_assert_eq(opt.n_eos, 3);
    out = test_sh_output(false, gen, dir, root, NEW_TOKENS, eos_args);
    gen_fix_read_hf(out, N_PROMPTS, NEW_TOKENS, &hf, &margin, len);
    free(out);

    GenFixModel g;
    cr_assert_eq(gen_fix_open(&g, test_join(dir, "m"), NULL, GT_F32, SLOTS, CTX, CHUNK, &err), 0, "%s", err.msg);
    GenFixOut o;
    gen_fix_out_init(&o, N_PROMPTS);
    cr_assert_eq(gen_fix_generate(&g, &pr, &opt, &o, &err), 0, "%s", err.msg);
    int by_eos = 0, cut = 0, shortest = NEW_TOKENS, longest = 0;
    for (long i = 0; i < N_PROMPTS; i++) {
        int t = 0;
        for (; t < len[i] && t < o.n[i]; t++)
            if (o.ids[i][t] != hf[i * NEW_TOKENS + t]) break;
        if (t < len[i] && t < o.n[i]) { /* a difference: only at a near tie */
            const double mg = margin[i * NEW_TOKENS + t];
            cr_assert(mg < TIE_F32, "prompt %ld step %d: gtrain %d, transformers %d (reference margin %.3g)", i, t,
                      o.ids[i][t], hf[i * NEW_TOKENS + t], mg);
            cr_log_info("eos: prompt %ld step %d: a near tie (margin %.3g): compared up to there", i, t, mg);
            cut++;
            continue;
        }
        const bool eos = len[i] < NEW_TOKENS || (hf[i * NEW_TOKENS + len[i] - 1] == opt.eos[0] ||
                                                 hf[i * NEW_TOKENS + len[i] - 1] == opt.eos[1] ||
                                                 hf[i * NEW_TOKENS + len[i] - 1] == opt.eos[2]);
        cr_assert_eq(o.n[i], len[i], "prompt %ld: gtrain generated %d ids, transformers %d (EOS %s)", i, o.n[i], len[i],
                     eos_args);
        cr_assert_eq(o.finish[i], eos ? GEN_FINISH_EOS : GEN_FINISH_LENGTH, "prompt %ld: finished by %s", i,
                     gen_finish_name(o.finish[i]));
        if (eos) by_eos++, shortest = len[i] < shortest ? len[i] : shortest, longest = len[i] > longest ? len[i] : longest;
    }
    cr_assert(by_eos >= 3 && shortest < longest, "only %d prompts ended at an EOS (lengths %d..%d): the test needs rows "
              "leaving at different steps", by_eos, shortest, longest);
    cr_log_info("eos (%s): %d of %d prompts ended at an EOS after %d..%d ids, equal to transformers' (%d cut at a near tie)",
                eos_args, by_eos, N_PROMPTS, shortest, longest, cut);
    gen_fix_out_free(&o);
    gen_fix_close(&g);
    free(hf), free(margin);
    gen_fix_prompts_free(&pr);
    test_scratch_remove(dir);
}
