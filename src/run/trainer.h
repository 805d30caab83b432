/* trainer.h - the training loop: exact gradient accumulation, clipping, AdamW, schedule, eval, logs. */
#ifndef GT_TRAINER_H
#define GT_TRAINER_H

#include "config.h"
#include "model.h"
#include "model_desc.h"
#include "tokenizer.h"

/* Targets that count: labels != -100. */
long count_items(const int *targets, size_t n);
/* save_max_shard_size in bytes */
uint64_t trainer_max_shard_bytes(const RunConfig *cfg);

/* The forward/backward half of one optimizer step: A micro-batches of B rows x m->T tokens,
 * laid out one after the other in tokens/targets (host). Under LOSS_NORM_TOKENS each micro-batch's
 * loss gradient is scaled by 1/num_items (num_items = valid targets over ALL micro-batches, and
 * over all ranks), so the accumulated gradient is the big batch's; under LOSS_NORM_STEPS each
 * micro-batch's mean loss is divided by A and by world, the ranks the gradients are summed over
 * (HF's fallback; DDP averages over ranks). Grads are ADDED to. *loss_sum gets the
 * sum of per-token losses (divide by num_items for the token-weighted mean). m->grad_ready, when
 * set, fires during the last micro-batch only. Micro-batch a runs with m->ad.dropout_row0 =
 * (a * world + m->data_rank) * B, its first row in the step's batch (LoRA dropout's index). */
int trainer_accumulate(Model *m, const int *tokens, const int *targets, int B, int A, int world,
                       LossNormalization norm, long num_items, double *loss_sum, GtError *err);

typedef struct {
    long steps;
    double last_loss;     /* the last step's logged loss (token mean; under steps the mean of micro-batch means) */
    double first_loss;
    double last_val_loss; /* NaN when there was no eval */
    double first_val_loss;
    double tokens_per_sec;
    int stopped_by_signal; /* SIGTERM/SIGINT ended the run after a checkpoint */
    /* for the end-of-run summary (trainer_summary_print) */
    long start_step, max_steps; /* the step this process started from (a resumed run's checkpoint), the run's last */
    double tokens, seconds;     /* trained by this process, in the training loop's wall time */
    long first_step, best_step; /* of first_loss and best_loss (the lowest finite step loss) */
    double best_loss;
    long first_val_step, last_val_step, best_val_step;
    double best_val_loss;
    uint64_t mem_planned, mem_measured; /* device bytes: the plan's total, the backend's high-water mark */
    /* the backend's host_waits and syncs (backend.h) in this process's optimizer steps, from the
     * step's start to its log line (eval and checkpoints not counted) */
    uint64_t host_waits, syncs;
    char weights[GT_PATH_MAX + 64];     /* where the weights are ("" when none were written) */
} TrainSummary;

/* The end-of-run summary, a few lines through gt_log: steps, tokens, time, mean tok/s, the
 * losses (first, last, best, with their steps), eval losses, peak device memory planned and
 * measured, where the weights are. */
void trainer_summary_print(const TrainSummary *s);
/* One line about a data split the run opened: examples, tokens (and before truncation), how
 * many examples were truncated and how many train nothing. which: "train" or "val". */
struct DataSource;
void trainer_log_data(const char *which, const char *path, const struct DataSource *d);
/* gtrain plan with data.packing: the training data opened as a run opens it (tokenizer, split),
 * and its trainer_log_data line: how many rows the examples pack into, the padding left. */
int trainer_plan_data(const RunConfig *cfg, const ModelDesc *desc, GtError *err);

/* The eval windows of val a run evaluates: all, or eval_max_batches x per_device_eval_batch_size. */
struct DataSource;
long trainer_eval_windows(const RunConfig *cfg, const struct DataSource *val);
/* The mean loss over val's first n_windows eval windows (data_fill_eval_pos), in chunks of m's
 * rows; tok, tgt (and pos, for packed data, else NULL) hold m's rows x seq_len. progress (may be
 * NULL) after each chunk. The trainer's eval and gtrain eval both measure through it. */
typedef void (*EvalProgressFn)(void *ctx, long done, long total);
int trainer_eval_loss(Model *m, const struct DataSource *val, long n_windows, int *tok, int *tgt, int *pos,
                      EvalProgressFn progress, void *ctx, double *mean_loss, long *n_tokens, GtError *err);
/* The run's data splits (a text file with val_fraction and no val file splits itself: *split_train
 * and *split_val DATA_SPLIT_TRAIN / _VAL); returns the val path ("" for none). */
const char *trainer_data_splits(const RunConfig *cfg, int *split_train, int *split_val);
/* How the run's text becomes tokens (data.* keys, the tokenizer or NULL): data.h's DataText. */
struct DataText;
void trainer_data_text(const RunConfig *cfg, const Tokenizer *tok, struct DataText *out);

/* Run the whole job described by cfg, on this rank of dist (world 1 without a launcher). */
struct Dist;
/* desc and peft as lora_configure applied the config's lora: section (peft: the config its adapter
 * files carry; unused without LoRA). */
int trainer_run(const RunConfig *cfg, const ModelDesc *desc, const PeftConfig *peft, struct Dist *dist,
                TrainSummary *summary, GtError *err);

#endif
