/* checkpoint.h - weights in Hugging Face's format, and run checkpoints with exact resume.
 *
 * Weights: DIR/model.safetensors with HF GPT2LMHeadModel names ("transformer.h.0.attn.c_attn.weight",
 * Conv1D weights stored [in, out] as HF does; lm_head.weight only when untied) plus DIR/config.json,
 * so GPT2LMHeadModel.from_pretrained(DIR) loads a gtrain run.
 *
 * A run checkpoint is output_dir/checkpoint-N/ holding model.safetensors, config.json,
 * optimizer.safetensors (AdamW exp_avg / exp_avg_sq per tensor, fp32) and trainer_state.json.
 * It is written into output_dir/.checkpoint-N.tmp and renamed when complete, so a directory named
 * checkpoint-N is always whole; trainer_state.json is written last. Since the data rows of a step
 * depend only on (seed, step, row), the step number is the whole data/RNG position. */
#ifndef GT_CHECKPOINT_H
#define GT_CHECKPOINT_H

#include "config.h"
#include "model.h"

typedef struct {
    long global_step;     /* optimizer steps done */
    long max_steps;
    double epoch;
    uint64_t seed;
    long effective_batch;
    int world_size;
    int per_device_train_batch_size;
    int gradient_accumulation_steps;
    long skipped_steps;   /* steps skipped for non-finite loss/grad norm so far */
    long empty_steps;     /* steps whose micro-batches held no target token (no update) */
    long adam_t;          /* AdamW updates applied (the bias-correction step) */
} TrainerState;

/* model.safetensors (dtype fp32 or bf16) + config.json into dir (which must exist). */
int checkpoint_save_weights(const char *dir, Model *m, bool bf16, GtError *err);

/* Load HF GPT-2 weights: path is a model.safetensors or a directory holding one. Names with or
 * without the "transformer." prefix; fp32, bf16 or fp16; every tensor of the model must be there
 * with HF's shape. Non-finite values are warned about. */
int checkpoint_load_weights(Model *m, const char *path, GtError *err);

/* Write output_dir/checkpoint-<step>/ atomically (a checkpoint of that step already there is
 * replaced; rotation and ownership are rundir.c's). adam_m_full/adam_v_full: the whole AdamW state
 * on the host when it is sharded (ZeRO-1; the file format does not depend on sharding), else NULL. */
int checkpoint_save(const char *output_dir, Model *m, const TrainerState *st, const float *adam_m_full,
                    const float *adam_v_full, GtError *err);

/* Read checkpoint dir into the model (weights + this rank's shard of the optimizer) and st.
 * Validated: every AdamW moment finite, second moments >= 0, adam_step what the run could reach. */
int checkpoint_load(const char *dir, Model *m, TrainerState *st, GtError *err);

/* read trainer_state.json of a checkpoint directory (validated) */
int checkpoint_read_state(const char *dir, TrainerState *st, GtError *err);

#endif
