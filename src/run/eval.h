/* eval.h - `gtrain eval`: a model measured without training and without writing into any run
 * directory. Without a generation task, the validation loss, perplexity and token count over the
 * config's validation data (the trainer's own eval windows and loss: trainer_eval_loss). With
 * generation.task, the task's prompts decoded in batches over a KV cache (generate.h), each answer
 * scored (scorers.h), the accuracy printed and one JSON line per example written to the results
 * file (whole, at the end, through a temporary name: an interrupted eval leaves none).
 *
 * The generation half (EvalGen) is also what a training run with generation.task runs at each eval,
 * on the training model (trainer_eval.c). */
#ifndef GT_EVAL_H
#define GT_EVAL_H

#include "config.h"
#include "decode.h"
#include "model_desc.h"
#include "tokenizer.h"

typedef struct {
    const char *checkpoint; /* --checkpoint DIR, or NULL: the config's model (and lora.init_from) */
    const char *output;     /* --output FILE, or NULL: generation.output */
} EvalOptions;

/* The command: cfg loaded, desc as lora_configure (and checkpoint_base_quant) made it from the
 * config (unused with a checkpoint, which brings its own). */
int eval_run(const RunConfig *cfg, const ModelDesc *desc, const EvalOptions *o, GtError *err);

/* ---------------------------------------------------------------- generation */

typedef struct EvalGen EvalGen;

/* Read generation.data's prompts and gold answers (generation.max_examples of them) for a model of
 * desc with tok (NULL: byte-level) and at most ctx_max positions; model_dir (may be NULL) is where
 * generation_config.json's eos_token_id is looked for. Every bad input (a prompt that leaves no room
 * in ctx_max, an empty dataset, a missing prompt or answer) is one line naming the file and row,
 * code 2. */
int eval_gen_open(EvalGen **out, const RunConfig *cfg, const ModelDesc *desc, const Tokenizer *tok, const char *model_dir,
                  int ctx_max, GtError *err);
void eval_gen_free(EvalGen *g);
long eval_gen_count(const EvalGen *g);
/* The cache's positions the prompts need: min(ctx_max, the longest prompt + max_new_tokens). */
int eval_gen_ctx(const EvalGen *g);
/* Prompt tokens per model_decode call (at most max_tokens: the model's rows per call). */
int eval_gen_prefill(const EvalGen *g, int max_tokens);

typedef struct {
    long n, correct;         /* examples scored, and correct */
    double accuracy;         /* correct / n */
    long tokens;             /* generated */
    double seconds;
    bool stopped;            /* a stop signal ended it early: nothing is complete */
} EvalGenSummary;

/* Generate for every prompt on m with kv, score, and put the results' JSON lines (prompt order)
 * into jsonl (may be NULL). progress: a \r line on a TTY, else a log line every tenth. */
int eval_gen_run(EvalGen *g, Model *m, KvCache *kv, bool tty, GtBytes *jsonl, EvalGenSummary *s, GtError *err);

/* "accuracy: 0.xxxx (n/N) task gsm8k" into buf */
const char *eval_gen_format(char *buf, size_t cap, const EvalGenSummary *s, const RunConfig *cfg);

#endif
