/* generate.h - batched generation: many prompts decoded at once over a KV cache (decode.h), with
 * continuous batching: each prompt takes a free cache slot, is prefilled in chunks, then decodes
 * one token per step beside the other rows; a row that finishes (EOS, a stop string, its token
 * budget, or prompt + generation filling the cache's ctx positions) leaves and the next prompt takes its slot.
 *
 * Decoding follows transformers' generate: greedy (do_sample false) is the argmax of the logits
 * (the lowest id on a tie, as torch.argmax); sampling applies temperature, then top-k, then top-p
 * (HF's warper order) and draws from the example's own random stream, seeded by (seed, example
 * index) and advanced once per token, so a sampled generation does not depend on the batch it ran
 * in, the slot it took or the other prompts. */
#ifndef GT_GENERATE_H
#define GT_GENERATE_H

#include "decode.h"
#include "tokenizer.h"

#define GEN_MAX_EOS 8
#define GEN_MAX_STOP 16

typedef struct {
    int max_new_tokens;
    bool do_sample;
    double temperature; /* > 0 (sampling) */
    int top_k;          /* 0: off */
    double top_p;       /* 1: off */
    uint64_t seed;
    int eos[GEN_MAX_EOS]; /* stop after generating any of these (it is kept in the ids, not the text) */
    int n_eos;
    /* stop strings: generation stops as soon as the decoded text contains one (after the prompt);
     * the text is cut before it (vLLM's default), the ids keep the token that completed it */
    const char *stop[GEN_MAX_STOP];
    int n_stop;
    const Tokenizer *tok; /* decodes the text (required with stop strings; NULL: no text) */
    int prefill_chunk;    /* prompt tokens per model_decode call (<= 0: 512) */
} GenOptions;

typedef enum { GEN_FINISH_EOS = 0, GEN_FINISH_STOP, GEN_FINISH_LENGTH, GEN_FINISH_CONTEXT } GenFinish;
const char *gen_finish_name(GenFinish f); /* "eos", "stop", "length", "context" */

typedef struct {
    const int *ids; /* the prompt's token ids */
    int n;          /* >= 1, n < the cache's ctx */
} GenPrompt;

typedef struct {
    long index;         /* the prompt's index in the caller's array */
    const int *ids;     /* the generated ids (EOS included when it ended the row) */
    int n;
    const char *text;   /* decoded generated text (skip_special_tokens), cut at a stop string; NULL
                         * without a tokenizer */
    GenFinish finish;
} GenResult;

/* Called for each prompt as its row finishes (completion order, not prompt order); the result is
 * valid only during the call. Nonzero: stop (return that, err set). */
typedef int (*GenDoneFn)(void *ctx, const GenResult *r, GtError *err);

/* Generate for prompts[0..n) on m with kv (its slots are the batch); progress (may be NULL) is
 * called after every decode step with the prompts finished so far. Stops early on a signal
 * (gt_stop_signal) and returns 1 then (the rows finished so far were reported). */
typedef void (*GenProgressFn)(void *ctx, long done, long total, long tokens);
int generate_run(Model *m, KvCache *kv, const GenPrompt *prompts, long n, const GenOptions *o, GenDoneFn done,
                 GenProgressFn progress, void *ctx, GtError *err);

/* One token from logits[V] as generate_run draws it (greedy or the warpers), rng the example's
 * stream (advanced once when sampling). */
int gen_pick_token(const float *logits, int V, const GenOptions *o, uint64_t *rng);
/* The example's stream, from the run's seed and the prompt's index. */
uint64_t gen_rng_seed(uint64_t seed, long index);

#endif
