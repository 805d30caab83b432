/* hf_weights.h - the weights of a Hugging Face model directory as downloaded, read one tensor (or
 * one block of rows) at a time: model.safetensors, or the shards model-00001-of-0000N.safetensors
 * that model.safetensors.index.json lists. Model-independent: which names a model wants, their
 * shapes, transposes and row blocks are the caller's; this layer finds, validates and reads.
 *
 * Nothing holds the whole model: open reads only the index and each shard's header; a read pulls
 * one tensor, an element range or a range of rows, converted to fp32, into the caller's buffer
 * (pread at validated offsets), so a 7B model streams through a staging buffer of any size.
 *
 * What hf_weights_open accepts (path):
 *   - a directory: DIR/model.safetensors if it exists (as transformers' from_pretrained, which
 *     looks for it first), else DIR/model.safetensors.index.json; neither: one error;
 *   - a file whose name ends in ".json": an index; its shards are files beside it;
 *   - any other file: one .safetensors file.
 * Links are followed (the Hugging Face cache's snapshot directories are links into blobs/); every
 * file must be a regular file once opened.
 *
 * The index (from the internet, so hostile until checked; every refusal is one line naming the
 * file and the tensor or shard, code GT_EXIT_BAD_INPUT):
 *   {"metadata": {"total_size": N, ...}, "weight_map": {"tensor name": "shard file name", ...}}
 *   - at most HF_INDEX_MAX_BYTES, nested at most HF_INDEX_MAX_DEPTH, no NUL (raw or \u0000),
 *     valid JSON with nothing after it, an object; "metadata" or "weight_map" given twice: refused;
 *   - weight_map: an object of strings, not empty, at most HF_MAX_TENSORS entries; a tensor
 *     given twice is refused (even to the same shard: cJSON keeps both, json.load the last);
 *   - a shard name is a plain file name beside the index: not empty, no '/' (so neither absolute
 *     nor a path through ".."), not "." or "..", no control character, at most 255 bytes. Hugging
 *     Face writes shards flat beside the index, and a name that reaches elsewhere is refused
 *     rather than followed; "a..b.safetensors" (no '/') is only a name and is accepted;
 *   - at most HF_MAX_SHARDS distinct shards; each must exist (named in the refusal) and be a valid
 *     safetensors file (safetensors_open validates its header);
 *   - every listed tensor must be in the header of the shard it is mapped to;
 *   - a tensor the index maps to shard A that shard B's header also holds is refused (two copies:
 *     which one would be meant?);
 *   - a tensor in a shard's header that weight_map does not list at all is ignored with a warning
 *     (transformers reads the index as the inventory too; such files exist);
 *   - metadata: optional; if given, an object; total_size, if given, a non-negative integer
 *     (<= 2^53) not above the sum of the shards' file sizes (refused otherwise; it never sizes an
 *     allocation). Hugging Face writes the sum of the listed tensors' data bytes: another value is
 *     a warning, not a refusal (the data itself is validated shard by shard). Other keys of
 *     metadata (newer transformers add total_parameters) are ignored.
 * Warnings are not printed here: hf_weights_warning() hands them to the caller (gt_warn).
 *
 * bitsandbytes 4-bit weights (the *-bnb-4bit directories transformers' save_pretrained writes for a
 * model loaded with BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")): a weight
 * X stored as
 *   X                                   U8 [ceil(numel / 2), 1]  packed codes (nf4.h)
 *   X.absmax                            U8 [nblocks] (double quantization) or F32 [nblocks]
 *   X.quant_map                         F32 [16], equal to NF4_CODE
 *   X.nested_absmax, X.nested_quant_map F32 [ceil(nblocks / 256)], F32 [256] equal to
 *                                       NF4_DYNAMIC_CODE (double quantization only)
 *   X.quant_state.bitsandbytes__nf4     U8: the JSON bnb_state.h reads (shape, blocksize, dtype, ...)
 * is one logical tensor X: count, info, find, check_shape and the reads see it with the
 * quant_state's shape and its values dequantized (nf4_dequantize_f32, as bitsandbytes'
 * dequantize_4bit computes them, rounded to the quant_state's dtype as dequantize_4bit returns
 * them); its siblings are no tensors of their own. hf_weights_nf4 / hf_weights_read_nf4 give its
 * format and its bytes as they are. Checked at open, each refusal one line naming the file, the
 * tensor and the key (code 2): the quant_state (bnb_state.h; "bitsandbytes__fp4" and quant_type
 * fp4 refused: NF4 only); X U8 of ceil(numel / 2) bytes; absmax of the dtype and count the
 * quant_state implies; quant_map present and NF4_CODE; with double quantization nested_absmax
 * and nested_quant_map present, of their sizes, nested_quant_map NF4_DYNAMIC_CODE; without it
 * neither; a sibling whose weight has no quant_state; any other U8 tensor (U8 is read only as
 * bitsandbytes' storage).
 *
 * Tensor order (hf_weights_info's i): weight_map's order in the index, the file's order for one
 * .safetensors. Errors of reads name the shard file: "SHARD: tensor NAME: expected ..., found ...".
 * A HfWeights is read-only after open; reads of different tensors may run from several threads. */
#ifndef GT_HF_WEIGHTS_H
#define GT_HF_WEIGHTS_H

#include "nf4.h"
#include "safetensors.h"

#define HF_SINGLE_FILE "model.safetensors"
#define HF_INDEX_FILE "model.safetensors.index.json"
#define HF_INDEX_MAX_BYTES (64u << 20) /* a 100k-tensor index is ~10 MB */
#define HF_INDEX_MAX_DEPTH 16          /* the index is 3 levels deep */
#define HF_MAX_SHARDS 10000            /* Llama-3.1-405B has 191; each open shard holds a descriptor */
#define HF_MAX_TENSORS (1 << 20)
#define HF_MAX_WARNINGS 4

typedef struct HfWeights HfWeights;

typedef enum { HF_QUANT_NONE = 0, HF_QUANT_NF4 } HfQuant;

/* One tensor of the model directory. Pointers stay valid until hf_weights_close. */
typedef struct {
    const char *name;
    const SafeTensors *shard; /* the file that holds it: safetensors_path(shard) names it */
    int shard_index;          /* its index inside that file, for safetensors_* calls (a 4-bit
                                 weight: its packed U8 tensor; read it through hf_weights) */
    StDtype dtype;            /* a 4-bit weight: the dtype it dequantizes to (its quant_state's) */
    HfQuant quant;            /* HF_QUANT_NF4: a bitsandbytes 4-bit weight */
    int ndim;                 /* 0..ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* a 4-bit weight: the logical shape (its quant_state's) */
    int64_t numel;
} HfTensorInfo;

/* Open and validate (see above). Returns 0, or -1 with err filled (GT_EXIT_BAD_INPUT for a bad
 * or missing file, GT_EXIT_FAILURE when a file cannot be read); *out is NULL on failure. */
int hf_weights_open(HfWeights **out, const char *path, GtError *err);
void hf_weights_close(HfWeights *w); /* NULL is fine */

/* Does directory dir hold weights hf_weights_open reads (HF_SINGLE_FILE or HF_INDEX_FILE, as
 * open looks for them)? When not, and found is given: what it holds instead, for a message
 * ("only config.json", "config.json, pytorch_model.bin (PyTorch pickle weights are not read: ...)"). */
bool hf_weights_dir_has_weights(const char *dir, char *found, size_t cap);

/* The file that names the set in messages: the index, or the one .safetensors. */
const char *hf_weights_path(const HfWeights *w);
bool hf_weights_is_sharded(const HfWeights *w); /* true when read through an index */

/* Tensors: count, the i-th (0 <= i < count; -1 otherwise), and lookup by exact name (-1 if absent).
 * Iterating i = 0..count-1 lets a caller report the tensors its model does not have. */
int hf_weights_count(const HfWeights *w);
int hf_weights_info(const HfWeights *w, int i, HfTensorInfo *info);
int hf_weights_find(const HfWeights *w, const char *name);
/* name, or name without optional_prefix when it starts with it and the full name is absent (GPT-2
 * checkpoints with and without "transformer."); optional_prefix NULL: hf_weights_find */
int hf_weights_find_prefixed(const HfWeights *w, const char *name, const char *optional_prefix);

/* The shard files (one for a single .safetensors), in the order of their first use in the index. */
int hf_weights_shard_count(const HfWeights *w);

/* Sum of the listed tensors' data bytes (what total_size should say). */
uint64_t hf_weights_data_bytes(const HfWeights *w);

/* Warnings found at open (unlisted tensors, a total_size that differs), one line each. */
int hf_weights_warning_count(const HfWeights *w);
const char *hf_weights_warning(const HfWeights *w, int k);

/* Check tensor i against the shape a model wants: 0, or -1 with
 * "SHARD: tensor NAME: expected shape [a, b], found [c, d]" (code 2). */
int hf_weights_check_shape(const HfWeights *w, int i, int ndim, const int64_t *shape, GtError *err);

/* Reads, converted to fp32 (F32, BF16 and F16 files). Whole tensor: n must be its element count
 * (code 2 otherwise, as safetensors_read_f32). Element range [elem_offset, elem_offset + n) in
 * row-major order. Rows [row0, row0 + nrows) along the first dimension (ndim >= 1; a row is the
 * product of the other dimensions) into dst, which holds cap floats. A range outside the tensor
 * or a dst too small is the caller's error (code 1); a short read, code 2. Every value read is a
 * weight: a NaN or an infinity is refused (code 2: "FILE: tensor NAME: element E: expected a
 * finite weight, found nan, which is not finite"), whatever reads it (a model's weights, an adapter, merge's base). */
int hf_weights_read_f32(const HfWeights *w, int i, float *dst, size_t n, GtError *err);
int hf_weights_read_range_f32(const HfWeights *w, int i, uint64_t elem_offset, size_t n, float *dst, GtError *err);
int hf_weights_read_rows_f32(const HfWeights *w, int i, int64_t row0, int64_t nrows, float *dst, size_t cap,
                             GtError *err);

/* 1 when tensor i is a bitsandbytes 4-bit weight (f: its logical numel, blocksize, nested), else 0 */
int hf_weights_nf4(const HfWeights *w, int i, Nf4Format *f);
/* its unit as nf4.h lays it out (nf4_layout(f).bytes bytes into unit): the packed codes, absmax, and with double quant nested_absmax and the offset, copied as they are (no re-quantization) */
int hf_weights_read_nf4(const HfWeights *w, int i, void *unit, GtError *err);
/* (hf_weights_read_nf4: 0, or -1 with err: code 1 when i is not a 4-bit weight, code 2 for a short
 * read or a scale that is not finite (F32 absmax, nested_absmax, the offset); the padding between
 * the parts is zero.) */

#endif
