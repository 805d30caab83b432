/* model_desc_internal.h - what the model JSON readers share: the bounds on every size, the cJSON
 * field helpers (model_json.c: each field read once, a duplicate refused, messages
 * "PATH: FIELD: expected ..., found ...") and the readers an ArchSpec lists (ArchKeyReader: the shared
 * ones in model_desc.c, the RoPE families' in model_desc_llama.c). Not part of the public interface. */
#ifndef GT_MODEL_DESC_INTERNAL_H
#define GT_MODEL_DESC_INTERNAL_H

#include <cjson/cJSON.h>

#include "arch.h"
#include "model_desc.h"

#define MODEL_JSON_MAX_BYTES (1u << 20)
#define MODEL_JSON_MAX_DEPTH 64

/* Bounds: sizes fit an int with room (4 * n_embd, (n_head + 2 n_kv_head) * head_dim ...) and the
 * parameter count fits uint64 by far. */
#define MAX_N_LAYER 1024
#define MAX_N_HEAD 1024
#define MAX_N_EMBD 65536
#define MAX_N_INNER (4 * 65536)
#define MAX_VOCAB (16 * 1024 * 1024)
#define MAX_POSITIONS (1 << 20)
/* Llama family: head_dim at most 4096 and n_head * head_dim at most MAX_N_EMBD, so the fused
 * q|k|v width (n_head + 2 n_kv_head) * head_dim <= 3 * MAX_N_EMBD, like GPT-2's 3 * n_embd. */
#define MAX_HEAD_DIM 4096
#define MAX_ATTN_DIM MAX_N_EMBD

/* Room for one found value in a message (mj_found). */
#define MJ_FOUND_MAX 96

/* 1-based line and column of byte off. */
void mj_line_col(const char *buf, size_t len, size_t off, int *line, int *col);

/* "null", "true", "a number", "an array", ... ("nothing" for NULL). */
const char *mj_type_name(const cJSON *j);

/* s in double quotes for messages: at most 48 bytes of it, control bytes as \xNN. Returns buf
 * (cap >= 16). */
const char *mj_quote(const char *s, char *buf, size_t cap);

/* v as the shortest of %.15g / %.17g that reads back as v ("0.1", not "0.10000000000000001"). */
const char *mj_num(double v, char *buf, size_t cap);

/* A found value as text for messages: numbers and short strings shown (control bytes escaped),
 * others by type. Returns buf. */
const char *mj_found(const cJSON *j, char *buf, size_t cap);

/* The one member `name` of obj (NULL when absent); a second one is an error (cJSON would silently
 * take the first). label names the field in messages ("rope_scaling.factor"); NULL: name. */
int mj_get(const cJSON *obj, const char *name, const char *label, const cJSON **out, const char *path,
           GtError *err);

/* An integer field in [lo, hi] (12.0 counts as 12). required=false and absent or null: *out
 * untouched, *present=false (present may be NULL). */
int mj_get_int(const cJSON *obj, const char *name, const char *label, bool required, int lo, int hi, int *out,
               bool *present, const char *path, GtError *err);

/* A boolean field; absent (or null when null_ok): *out untouched, *present=false. */
int mj_get_bool(const cJSON *obj, const char *name, const char *label, bool null_ok, bool *out, bool *present,
                const char *path, GtError *err);

/* A finite number field; absent (or null when null_ok): *out untouched, *present=false.
 * `what` describes the expected value in messages ("a number > 0"). */
int mj_get_number(const cJSON *obj, const char *name, const char *label, bool null_ok, const char *what,
                  double *out, bool *present, const char *path, GtError *err);

/* Depth of [ and { outside strings: deep nesting is refused before cJSON recurses into it. */
int mj_check_nesting(const char *json, size_t len, const char *path, GtError *err);

/* The readers an ArchSpec lists (ArchKeyReader): */
/* the sizes of d->arch's description (ArchSpec.sizes), read in its order into d */
int model_desc_read_sizes(ModelDesc *d, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err);
/* n_head dividing n_embd (named as the size table names them): GPT-2's heads */
int model_desc_heads_divide(ModelDesc *d, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err);
/* the norm's epsilon, the MLP's activation and tie_word_embeddings, by the description's keys */
int model_desc_block_keys(ModelDesc *d, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err);
/* The RoPE families' keys of family fam (arch.h: how its keys differ from its
 * siblings'), read by model_desc.c in this order around the shared ones: architectures (before
 * the sizes), num_key_value_heads and head_dim (after them), and after the norm, activation and
 * tie: biases, keys refused unless at their default, RoPE and the attention window. */
int model_desc_rope_architectures(ModelDesc *desc, const cJSON *root, const ArchFamily *fam, const char *path,
                                  GtError *err);
int model_desc_rope_heads(ModelDesc *desc, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err);
int model_desc_rope_keys(ModelDesc *desc, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err);

#endif
