/* sample.h - text generation from a trained model: `gtrain sample`, and the demo's closing sample. */
#ifndef GT_SAMPLE_H
#define GT_SAMPLE_H

#include "model.h"
#include "peft.h"
#include "tokenizer.h"

/* The random stream sampling draws from (splitmix64): the next 64 bits, *s advanced. */
uint64_t sample_rng_next(uint64_t *s);

/* Draw a token from logits[V] with temperature (<= 0: greedy) and top-k (0: all); rng advanced. */
int sample_token(const float *logits, int V, double temperature, int top_k, uint64_t *rng);

/* the most tokens one `gtrain sample` generates (as the config's sample_max_new_tokens) */
#define SAMPLE_MAX_NEW_TOKENS (1 << 20)

typedef struct {
    const char *checkpoint;  /* a run dir or checkpoint-N dir: config.json + model.safetensors */
    const char *prompt;      /* text: through the tokenizer, or byte-level (vocab 256 models) */
    const char *tokenizer;   /* a tokenizer.json or directory; NULL: the checkpoint's, its run's, the base's */
    const char *prompt_ids;  /* "1,2,3": token ids, for models with a vocabulary of their own */
    int max_new_tokens;
    double temperature;
    int top_k;               /* 0: all; at most the vocabulary; -1: 40, or all of a smaller vocabulary */
    uint64_t seed;
} SampleOptions;

/* Continue prompt[n_prompt] by n_new tokens, printing them to out (decoded through tok when it is
 * not NULL, else bytes when text, else ids).
 * The window is the last m->T tokens: the prompt is run once, then each token alone against the
 * kept keys and values (model_forward_rows); once the window is full every token re-runs the
 * whole window (it slides by one). A model with recomputed layers keeps no keys: every token then
 * re-runs the sequence so far. */
int sample_continue(Model *m, const int *prompt, int n_prompt, int n_new, double temperature, int top_k,
                    uint64_t *rng, const Tokenizer *tok, bool text, FILE *out, GtError *err);

/* A model named by a directory (gtrain sample's and eval's --checkpoint): a run directory or a
 * checkpoint-N (config.json and full weights), or a PEFT adapter directory (its base model's
 * config.json and weights, the adapter on them, unmerged). */
typedef struct {
    ModelDesc desc;                  /* the architecture, with the adapter's layout applied */
    char dir[GT_PATH_MAX];           /* as given */
    char model_dir[GT_PATH_MAX];     /* where the weights are: dir, or the adapter's base */
    char cfg_path[GT_PATH_MAX + 16]; /* model_dir/config.json */
    bool lora;                       /* dir is a PEFT adapter */
    PeftConfig pc;                   /* its adapter_config.json */
} CheckpointModel;
/* Read dir's description (key names the option in messages: "--checkpoint"); a directory that is
 * none of these is one line, code 2. */
int checkpoint_model_open(CheckpointModel *cm, const char *dir, const char *key, GtError *err);
/* Load its weights (and adapter) into m, made from cm->desc. */
int checkpoint_model_load(Model *m, const CheckpointModel *cm, GtError *err);
/* Its tokenizer: given (a file or directory) when not NULL or "", else the directory's own
 * tokenizer.json, else a PEFT adapter's base model's; *tok NULL when there is none. */
int checkpoint_model_tokenizer(Tokenizer **tok, const CheckpointModel *cm, const char *given, GtError *err);

/* Load the checkpoint on the CPU/GPU (device auto) and print the continuation to out. */
int sample_run(const SampleOptions *o, FILE *out, GtError *err);

#endif
