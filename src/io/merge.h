/* merge.h - gtrain merge: a base model and a PEFT LoRA adapter merged into one Hugging Face model
 * directory, as PEFT's merge_and_unload() followed by save_pretrained() would write it.
 *
 * Inputs:
 *   - the base: a model directory (config.json, and model.safetensors or an index and its shards),
 *     read with model_desc_load and hf_weights a tensor (or a range of one) at a time;
 *   - the adapter: a PEFT adapter directory (adapter_config.json, adapter_model.safetensors) read
 *     with peft.h against the modules the base's config gives (peft_config_targets,
 *     peft_entries_for, peft_adapter_open), scale = peft_scaling (alpha / r, alpha / sqrt(r)
 *     with use_rslora).
 * Every base tensor is written, in the base's order (hf_weights_info's), under its own name:
 *   - the weight of an adapted module (HF "<module>.weight" where PEFT's key is
 *     "base_model.model.<module>.lora_A.weight"; the module's HF tensor found in arch.c's table by
 *     that name, so which tensors a module has and whether HF stores it transposed is the table's)
 *     becomes W + scale * B @ A, element (o, i) computed in double as W[o, i] + scale *
 *     sum_k B[o, k] A[k, i] and rounded once to the output dtype; a Conv1D weight (GPT-2, stored
 *     [in, out], the table's `transposed`) gets the transpose of B @ A (PEFT's fan_in_fan_out);
 *   - every other tensor (biases, norms, embeddings, buffers) is copied, converted to the output
 *     dtype (exact from F32 to F32 and from BF16 to BF16 or F32).
 *   - DoRA (use_dora true): the adapted weight is (m / ||W + scale B @ A||) (W + scale B @ A) per
 *     output row (PEFT's DoRA merge, the norm of the unmerged weight plus the delta), the norms in
 *     double over one extra pass of the base tensor.
 * The output dtype: MERGE_DTYPE_FP32 or _BF16, or AUTO: the base's dtype when all its tensors
 * share F32 or BF16, else F32 (F16, or a mix).
 *   A bitsandbytes 4-bit base (hf_weights.h): its weights are read dequantized (fp32, rounded to
 *   their quant_state's dtype as bitsandbytes' dequantize_4bit returns them) and merged as any
 *   other; a 4-bit weight counts as that dtype (a *-bnb-4bit model of a bf16 model merges to bf16,
 *   of an fp32 one to fp32); one line on stderr says so; the output is never 4-bit, and its
 *   config.json has no quantization_config (checkpoint_write_config drops it).
 * config.json is the base's, copied with torch_dtype set (checkpoint_write_config); the weights
 * are hf_save's (save_pretrained's split at max_shard_bytes, 0 meaning "5GB", with the index when
 * there is more than one shard).
 *
 * Memory: one tensor's A and B (as doubles) and hf_save's staging buffer; the base streams
 * through the staging buffer, never a whole tensor of it.
 *
 * Refusals (one line naming the file and the key, code 2), all before anything is written: a bad
 * base config.json or index or shard; an adapter config that is not LoRA, targets modules the
 * base's architecture lacks, or does not read (peft.h); adapter tensors whose shapes do not match
 * r and the base's dimensions, of a layer the base lacks, or missing; a base without an adapted
 * module's weight, or with one whose shape does not match its config.json; an output directory
 * that exists and is not empty, is not a directory, or is a symbolic link.
 *
 * Output: written into a fresh hidden directory beside out (".NAME.merge-XXXXXX", same
 * filesystem), which is renamed to out (new, or an empty directory) only once the weights and
 * config.json are complete; on any failure (or SIGTERM/SIGINT while streaming) that directory and
 * everything in it is removed, so out either is the whole merged model or is as it was. */
#ifndef GT_MERGE_H
#define GT_MERGE_H

#include "common.h"

typedef enum { MERGE_DTYPE_AUTO = 0, MERGE_DTYPE_FP32, MERGE_DTYPE_BF16 } MergeDtype;

typedef struct {
    const char *base;         /* model directory */
    const char *adapter;      /* PEFT adapter directory */
    const char *out;          /* the merged model directory (new, or empty) */
    uint64_t max_shard_bytes; /* 0: HF_DEFAULT_MAX_SHARD_BYTES ("5GB") */
    MergeDtype dtype;
    size_t staging_bytes;     /* hf_save's staging buffer; 0: HF_DEFAULT_STAGING_BYTES */
} MergeOptions;

typedef struct {
    int n_tensors;    /* written */
    int n_adapted;    /* of them, merged with an adapter */
    int n_shards;     /* weight files */
    bool bf16;        /* the output dtype */
    double scale;     /* peft_scaling of the adapter */
    int r;
} MergeSummary;

/* Merge (see above). summary may be NULL. 0, or -1 with err (code 2 bad input, 1 failure). */
int merge_run(const MergeOptions *opt, MergeSummary *summary, GtError *err);

/* x rounded once to the nearest bfloat16 (ties to even), returned as the float holding it
 * exactly; overflow gives infinity, NaN stays NaN. (double -> float -> bf16 would round twice.) */
float merge_round_bf16(double x);

#endif
