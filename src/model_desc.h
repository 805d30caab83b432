/* model_desc.h - the model description, read from a Hugging Face GPT-2 style config.json. */
#ifndef GT_MODEL_DESC_H
#define GT_MODEL_DESC_H

#include "common.h"

typedef struct ModelDesc {
    char path[GT_PATH_MAX];
    int n_layer;
    int n_head;
    int n_embd;
    int n_inner;      /* default 4 * n_embd */
    int vocab_size;
    int n_positions;
    double layer_norm_epsilon; /* default 1e-5 */
    bool tie_word_embeddings;  /* default true */
} ModelDesc;

/* Load and validate a config.json. Errors name the file and the field; code 2. */
int model_desc_load(ModelDesc *desc, const char *path, GtError *err);

/* Parse from a JSON text already in memory (path is used in messages only). */
int model_desc_parse(ModelDesc *desc, const char *json, size_t len, const char *path, GtError *err);

/* Number of parameters (tied embeddings counted once). */
uint64_t model_desc_num_params(const ModelDesc *desc);

#endif
