/* hf_writer.h - writing weights as Hugging Face's save_pretrained does: one model.safetensors, or
 * shards model-00001-of-0000N.safetensors plus model.safetensors.index.json, streamed: the caller
 * lists the tensors (name, dtype, shape) up front and hands each one's values through a fill
 * callback into a bounded staging buffer, so no host buffer of the whole model ever exists.
 * Model-independent: names, layouts (transposes) and which tensors are the caller's.
 *
 * The split is huggingface_hub's split_state_dict_into_shards_factory (what transformers'
 * save_pretrained calls), tensor by tensor in the given order, sizes in bytes of the saved dtype:
 *   - a tensor larger than max_shard_bytes goes into a shard of its own, appended to the list of
 *     shards at once; the shard being filled stays open (so with a max of 5 and sizes [1, 10, 1]
 *     the files hold {10} and then {1, 1}: that shard order is Hugging Face's, kept for identical
 *     file names and contents);
 *   - otherwise, when the current shard's size plus this tensor's exceeds the max (strictly), the
 *     current shard is closed and a new one started; a tensor that exactly fills it stays in it;
 *   - one shard: the file is model.safetensors and no index is written; N > 1 shards:
 *     model-%05d-of-%05d.safetensors (1-based) and the index.
 * The index is byte for byte what transformers writes (json.dumps(index, indent=2,
 * sort_keys=True) + "\n", so keys sorted by code point and non-ASCII escaped as \uXXXX):
 *   {"metadata": {"total_size": sum of every tensor's data bytes}, "weight_map": {name: file}}
 * Within a shard the tensors' data lie in shard order; each shard's __metadata__ is
 * {"format": "pt"} (what transformers writes and checks for) unless the options give another.
 *
 * Files and failures: every shard is written to NAME.tmp (never through a link), fsynced, and only
 * once all of them and the index are complete are they renamed into place (the index last), so an
 * error (ENOSPC, EFBIG, a failing fill) leaves no file under a final name and removes the .tmp
 * files: one line, code 1. Names this writer owns that would contradict the new set are removed
 * (lstat + unlink, a link is never followed): a sharded save removes a stale model.safetensors
 * (transformers and hf_weights would load it first), a single-file save a stale index, and either
 * removes model-NNNNN-of-MMMMM.safetensors files not in the new set (as save_pretrained does).
 * Renames are atomic one file at a time; a directory that must change as a whole is the caller's
 * to write beside and rename (checkpoint.c's .checkpoint-N.tmp). */
#ifndef GT_HF_WRITER_H
#define GT_HF_WRITER_H

#include "safetensors.h"

#define HF_DEFAULT_MAX_SHARD_BYTES 5000000000ULL /* "5GB", save_pretrained's default */
#define HF_DEFAULT_STAGING_BYTES ((size_t)16 << 20)
#define HF_MAX_SIZE_BYTES (1ULL << 60) /* the largest size hf_parse_size accepts */

/* A size as transformers' convert_file_size_to_int / huggingface_hub's parse_size_to_int read it:
 * "5GB" = 5*10^9, "500MB", "100KB", "1TB" (powers of 1000); "5GiB" = 5*2^30, "MiB", "KiB", "TiB"
 * (powers of 1024); a plain integer = bytes ("1000", "1000B"). Units are case-insensitive except
 * a final lowercase "b" after K/M/G/T ("5Gb", "5gb"): transformers reads it as bits and
 * huggingface_hub as bytes, so it is refused as ambiguous. A decimal fraction is allowed before a
 * unit ("1.5GB" = 1500000000, exactly: no binary rounding), spaces around the number and before
 * the unit are. The result must be in [1, HF_MAX_SIZE_BYTES]. Returns 0 with *out, or -1 with
 * "expected ..., found ..." in why[cap] (the config prefixes the file, line and key). */
int hf_parse_size(const char *text, uint64_t *out, char *why, size_t cap);

/* The split of n tensors (their dtype and shape; data is not used) into shards. */
typedef struct {
    int n_shards;          /* >= 1 */
    int *shard_of;         /* [n]: the shard (0-based) of tensor i */
    int *order;            /* [n]: tensor indices shard after shard, each shard's in its order */
    int *first;            /* [n_shards + 1]: shard s holds order[first[s] .. first[s + 1]) */
    uint64_t *shard_bytes; /* [n_shards]: data bytes of each shard */
    uint64_t total_bytes;  /* metadata.total_size */
} HfShardPlan;

/* Plan the shards. max_shard_bytes 0 means HF_DEFAULT_MAX_SHARD_BYTES. Checks the tensors as
 * safetensors_write does (names non-NULL, unique, not "__metadata__", valid UTF-8; ndim 0..4;
 * shapes >= 0 with no overflow) and dtype ST_F32 or ST_BF16. Returns 0, or -1 (code 1). */
int hf_plan_shards(HfShardPlan *plan, const StTensorOut *tensors, int n, uint64_t max_shard_bytes, GtError *err);
void hf_shard_plan_free(HfShardPlan *plan);

/* "model.safetensors" when n_shards == 1, else "model-%05d-of-%05d.safetensors" (shard 0-based). */
void hf_shard_file_name(char *buf, size_t cap, int shard, int n_shards);

/* Fill dst[n] with elements [elem_offset, elem_offset + n) of tensor `tensor` (the index in the
 * caller's list; values in the saved layout, row-major) as fp32; the writer rounds them to the
 * tensor's dtype (bf16: to nearest even, as gt_f32_to_bf16). Return 0, or -1 with err filled,
 * which stops the save (nothing is left behind). Calls come shard by shard in the plan's order
 * (not always the caller's order: see above), each tensor's ranges in ascending order and
 * covering it exactly once; each range is whole rows of the first dimension (ndim >= 2) whenever
 * one row fits in the staging buffer, and n never exceeds staging_bytes / 4. */
typedef int (*HfFillFn)(void *ctx, int tensor, uint64_t elem_offset, size_t n, float *dst, GtError *err);

typedef struct {
    uint64_t max_shard_bytes;   /* 0: HF_DEFAULT_MAX_SHARD_BYTES */
    size_t staging_bytes;       /* fp32 staging buffer; 0: HF_DEFAULT_STAGING_BYTES; at least 4 */
    float *staging;             /* the caller's buffer of staging_bytes (the model's, which the memory
                                 * plan counts); NULL: allocated and freed by hf_save */
    const char *const *meta_kv; /* each shard's __metadata__ as k0, v0, k1, v1...; NULL: format=pt */
    int n_meta;
} HfSaveOptions;

/* Write the tensors into dir (which must exist) as described above. opt may be NULL (defaults).
 * n >= 1. Returns 0, or -1 with err filled (code 1; one line naming the file). */
int hf_save(const char *dir, const StTensorOut *tensors, int n, const HfSaveOptions *opt, HfFillFn fill, void *ctx,
            GtError *err);

#endif
