/* hf_weights_internal.h - the table behind hf_weights.h, shared by hf_weights.c (the files, the
 * index, the accessors) and hf_weights_bnb.c (bitsandbytes' 4-bit weights: their sibling tensors
 * folded into one logical tensor each). Not for other callers. */
#ifndef GT_HF_WEIGHTS_INTERNAL_H
#define GT_HF_WEIGHTS_INTERNAL_H

#include <cJSON.h>

#include "bnb_state.h"
#include "hf_weights.h"

typedef struct {
    const char *key; /* not owned; NULL: empty slot */
    int val;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, n; /* cap: a power of two, kept at least twice n */
} StrMap;

typedef struct {
    const char *name; /* owned by the index's cJSON tree, or by the shard's */
    int shard;
    int idx;     /* in the shard; -1 until found in its header */
    int logical; /* hf_weights_info's i, or -1 for a bitsandbytes sibling (absmax, quant_map, ...) */
    int bnb;     /* its BnbTensor (a bitsandbytes 4-bit weight), or -1 */
} Entry;

/* one bitsandbytes 4-bit weight: its quant_state and the entries (t's indices) of its parts */
typedef struct {
    BnbState s;
    int weight, absmax, nested_absmax; /* nested_absmax: -1 unless nested */
} BnbTensor;

struct HfWeights {
    char *path; /* the index, or the single file */
    cJSON *index;
    int n_shards;
    SafeTensors **shards;
    int n;      /* every tensor of the files (siblings included) */
    Entry *t;
    StrMap by_name; /* name -> t's index */
    int n_vis;  /* the logical tensors: t's indices in order */
    int *vis;
    int n_bnb;
    BnbTensor *bnb;
    uint64_t data_bytes;
    int n_warn;
    char warn[HF_MAX_WARNINGS][GT_ERR_MAX];
};

/* t's index of the file tensor called name, or -1 (siblings included) */
int hf_weights_raw_find(const HfWeights *w, const char *name);

/* Link bitsandbytes' 4-bit weights to their siblings, check them (see hf_weights.h) and build the
 * logical table (vis, logical). Called once at the end of hf_weights_open. 0, or -1 (code 2). */
int hf_weights_bnb_link(HfWeights *w, GtError *err);

/* elements [e0, e0 + n) of 4-bit weight b, dequantized and rounded to its dtype, as fp32 */
int hf_weights_bnb_read_range(const HfWeights *w, const BnbTensor *b, uint64_t e0, size_t n, float *dst, GtError *err);

#endif
