/* trainer_internal.h - private to trainer*.c: the state of one training run (Trainer) and the
 * pieces of the run the loop (trainer.c) calls in the other files: opening the run and claiming
 * output_dir (trainer_open.c), eval and what a finished run adds beside its weights
 * (trainer_eval.c). The collectives are dist.h's DistComm. */
#ifndef GT_TRAINER_INTERNAL_H
#define GT_TRAINER_INTERNAL_H

#include "trainer.h"

#include "checkpoint.h"
#include "data.h"
#include "decode.h"
#include "dist.h"
#include "metrics.h"
#include "plan.h"
#include "rundir.h"
#include "tboard.h"

typedef struct {
    const RunConfig *cfg;
    const ModelDesc *desc;
    const PeftConfig *peft; /* the adapter files' config (LoRA runs) */
    Backend *be;
    Model *model;
    DataSource *train, *val;
    Tokenizer *tokenizer; /* the run's tokenizer, or NULL (byte-level) */
    MemPlan plan;
    MetricsWriter *metrics;
    struct EvalGen *gen; /* generation.task (rank 0): the task's prompts, run at each eval (eval.h) */
    KvCache *kv;         /* its cache, on the training model */
    RunDir *rundir; /* output_dir: rank 0 holds its lock; other ranks read it to find `latest` */
    TBoard *tb;
    TrainerState state;
    int world, rank;
    Dist *dist;
    DistComm *comm; /* the collectives, over MPI or NCCL (dist_comm.c) */
    GtError sync_err; /* an all-reduce started from backward that failed */
    int sync_failed;
    int *tok, *tgt;
    int *pos; /* per-token positions of packed rows (data.packing), else NULL */
    /* the step buffers (host_staging, pinned on CUDA: plan_step_batch_bytes), one allocation: the
     * tokens, targets and (data.packing) positions of a step's A micro-batches for the steps of
     * each parity (tok, tgt, pos point into the current step's), and the step's per-token losses */
    int *tok_buf[2], *tgt_buf[2], *pos_buf[2];
    float *losses;
    void *step_mem;
    size_t step_mem_bytes;
    char resumed_from[GT_PATH_MAX + 64]; /* the checkpoint resumed from, or "" */
    bool tty;
    double t_start;
    long start_step;
    long win_steps; /* the logging window: steps since the last logged one, their wall time and tokens */
    double win_secs, win_tokens;
} Trainer;

/* trainer_open.c: the backend, the plan, the data, the model and its weights, output_dir claimed
 * (resume), the resolved config written, adapters initialised, the step's token buffers */
int trainer_open(Trainer *t, TrainSummary *summary, GtError *err);

/* trainer_eval.c */
/* eval at `step` (rank 0): the log lines, the summary's eval losses, metrics and TensorBoard */
int trainer_eval(Trainer *t, long step, TrainSummary *summary, GtError *err);
/* output_dir/tokenizer.json */
int trainer_save_tokenizer(Trainer *t, GtError *err);
/* rank 0: sample_max_new_tokens tokens from the trained model, printed */
void trainer_sample_at_end(Trainer *t);

#endif
