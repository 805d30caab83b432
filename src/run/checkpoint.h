/* checkpoint.h - weights in Hugging Face's format (hf_checkpoint.c), and run checkpoints with exact
 * resume (checkpoint.c).
 *
 * Weights: DIR/model.safetensors, or shards model-0000k-of-0000N.safetensors and
 * model.safetensors.index.json past save_max_shard_size (save_pretrained's split), with HF's names
 * from arch.c's table (GPT2LMHeadModel: "transformer.h.0.attn.c_attn.weight", Conv1D weights stored
 * [in, out]; LlamaForCausalLM and kin: "model.layers.0.self_attn.q_proj.weight", q/k/v and
 * gate/up split out of gtrain's fused tensors, Phi3ForCausalLM's fused qkv_proj / gate_up_proj as
 * they are; lm_head.weight only when untied) plus
 * DIR/config.json, so AutoModelForCausalLM.from_pretrained(DIR) loads a gtrain run. Every tensor
 * streams through the model's host staging buffer.
 *
 * A run checkpoint is output_dir/checkpoint-N/ holding model.safetensors, config.json,
 * optimizer.safetensors (AdamW exp_avg / exp_avg_sq per tensor, fp32), trainer_state.json and,
 * for a run with a tokenizer, tokenizer.json.
 * It is written into output_dir/.checkpoint-N.tmp and renamed when complete, so a directory named
 * checkpoint-N is always whole; trainer_state.json is written last. Since the data rows of a step
 * depend only on (seed, step, row), the step number is the whole data/RNG position. */
#ifndef GT_CHECKPOINT_H
#define GT_CHECKPOINT_H

#include "config.h"
#include "model.h"
#include "tokenizer.h"

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

/* The weights (dtype fp32 or bf16), sharded at max_shard_bytes (0: HF's 5GB), + config.json into
 * dir (which must exist). */
int checkpoint_save_weights(const char *dir, Model *m, bool bf16, uint64_t max_shard_bytes, GtError *err);

/* dir/config.json (atomically): the config.json at src, copied with torch_dtype ("float32" or
 * "bfloat16", and transformers 5's dtype when src has it) set and no quantization_config (gtrain
 * writes full-precision weights only). What checkpoint_save_weights writes
 * for the Llama family, and gtrain merge for both architectures. From the bytes of src read earlier
 * (bytes NULL: read src now); src names it in messages. 0, or -1 (code 1; code 2 when src is no
 * longer a JSON object). */
int checkpoint_write_config(const char *dir, const char *src, const char *bytes, size_t n, bool bf16, GtError *err);

/* Load HF weights: path is a model directory, a model.safetensors.index.json, or one .safetensors
 * (hf_weights.h). GPT-2 names with or without the "transformer." prefix; F32, BF16 or F16; every
 * tensor of the model must be there with HF's shape, and no other (but attention-mask and rotary
 * buffers, and a tied model's lm_head.weight, which are ignored). A NaN or infinite value is
 * refused (code 2), naming the shard file, the tensor and the element. */
int checkpoint_load_weights(Model *m, const char *path, GtError *err);

/* What a load read, for the run's "weights:" line. */
typedef struct {
    char path[GT_PATH_MAX];  /* the index or the one .safetensors */
    int n_tensors;           /* HF tensors read */
    uint64_t n_values;       /* their elements */
    int n_shards;            /* files */
    char dtypes[16];         /* "F32", "BF16", "F32+BF16", ... */
} WeightsLoadInfo;
/* checkpoint_load_weights, filling info (NULL: none) */
int checkpoint_load_weights_info(Model *m, const char *path, WeightsLoadInfo *info, GtError *err);

/* Write output_dir/checkpoint-<step>/ atomically (a checkpoint of that step already there is
 * replaced; rotation and ownership are rundir.c's). adam_m_full/adam_v_full: the whole AdamW state
 * on the host when it is sharded (ZeRO-1; the file format does not depend on sharding), else NULL.
 * tok: the run's tokenizer (NULL: none), saved as tokenizer.json from the bytes it was read from,
 * so the checkpoint reads text back on its own (gtrain sample) as HF's Trainer's checkpoints do. */
int checkpoint_save(const char *output_dir, Model *m, const TrainerState *st, const float *adam_m_full,
                    const float *adam_v_full, uint64_t max_shard_bytes, const Tokenizer *tok, GtError *err);

/* Read checkpoint dir into the model (weights + this rank's shard of the optimizer) and st.
 * Validated: every AdamW moment finite, second moments >= 0, adam_step what the run could reach. */
int checkpoint_load(const char *dir, Model *m, TrainerState *st, GtError *err);

/* read trainer_state.json of a checkpoint directory (validated) */
int checkpoint_read_state(const char *dir, TrainerState *st, GtError *err);

#endif
