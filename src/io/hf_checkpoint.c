/* hf_checkpoint.c - a model's weights in Hugging Face's layout, in and out, streamed tensor by
 * tensor through the model's host staging buffer (never a host copy of the whole model):
 *   - names, shapes, transposes and row blocks are arch.c's table; the files are hf_weights.c's
 *     (a model directory, an index.json and its shards, or one .safetensors) and hf_writer.c's
 *     (save_pretrained's sharding);
 *   - config.json: GPT-2's is written from the description (as it always was); a Llama-family
 *     model's is the config.json it was built from (the bytes read at start when the description
 *     kept them), with torch_dtype set.
 * The staging buffer (buffers.c) is STAGE_IO_BYTES for the streamed chunks, then room for the
 * largest transposed tensor (GPT-2's Conv1D weights, transposed whole). */
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "checkpoint.h"
#include "hf_weights.h"
#include "hf_writer.h"

#define CONFIG_MAX_BYTES (1u << 20)

/* the streamed part of the staging buffer, in floats, and the transpose scratch after it */
static size_t io_floats(const Model *m) { return m->stage_io_bytes / sizeof(float); }
static float *scratch(const Model *m) { return m->staging + io_floats(m); }

/* ---------------------------------------------------------------- config.json */

static int write_json(const char *dir, cJSON *j, GtError *err) {
    char *text = cJSON_Print(j);
    if (!text) return gt_error(err, GT_EXIT_FAILURE, "out of memory writing config.json");
    char path[GT_PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves no newline; its buffer has room for the NUL we replace */
    int rc = gt_write_file_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}

/* config.json from the description (ArchSpec.config_from_desc: GPT-2): its sizes by the key table
 * the reader reads, then the fields gtrain implements as constants */
static cJSON *config_from_desc(const ModelDesc *d) {
    const ArchSpec *s = arch_spec(d->arch);
    ModelDesc v = *d;
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(arch_hf_class(d)));
    cJSON_AddStringToObject(j, "model_type", arch_family(d)->model_type);
    for (int i = 0; i < ARCH_MAX_SIZE_KEYS && s->sizes[i].key; i++) {
        const int value = *arch_size_field(&v, s->sizes[i].field);
        cJSON_AddNumberToObject(j, s->sizes[i].key, value);
        if (s->sizes[i].alt) cJSON_AddNumberToObject(j, s->sizes[i].alt, value);
    }
    cJSON_AddNumberToObject(j, s->norm_eps_key, d->layer_norm_epsilon);
    cJSON_AddStringToObject(j, s->act_key, s->act_values[0]);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", d->tie_word_embeddings);
    /* gtrain trains without dropout */
    cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddBoolToObject(j, "scale_attn_weights", true);
    return j;
}

static void set_string(cJSON *j, const char *key, const char *value) {
    if (cJSON_GetObjectItemCaseSensitive(j, key))
        cJSON_ReplaceItemInObjectCaseSensitive(j, key, cJSON_CreateString(value));
    else
        cJSON_AddStringToObject(j, key, value);
}

/* src (a config.json already validated by model_desc.c) with torch_dtype (and transformers 5's
 * dtype, if present) set and no quantization_config (a 4-bit base's); NULL with err when it no longer reads as a JSON object. bytes: the text
 * read at start (model_desc_load_source), used instead of reading src again */
static cJSON *config_with_dtype(const char *src, const char *bytes, size_t n, const char *dtype, GtError *err) {
    char *text = NULL;
    size_t len = 0;
    if (!bytes && gt_read_small_file(src, "model config", CONFIG_MAX_BYTES, &text, &len, err)) return NULL;
    cJSON *j = bytes ? cJSON_ParseWithLength(bytes, n) : cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected the JSON object it held when it was first read", src);
        return NULL;
    }
    if (cJSON_GetObjectItemCaseSensitive(j, "dtype")) set_string(j, "dtype", dtype);
    set_string(j, "torch_dtype", dtype);
    /* the weights written are full precision (a 4-bit base's dequantized): no bitsandbytes config */
    cJSON_DeleteItemFromObjectCaseSensitive(j, "quantization_config");
    return j;
}

int checkpoint_write_config(const char *dir, const char *src, const char *bytes, size_t n, bool bf16, GtError *err) {
    cJSON *j = config_with_dtype(src, bytes, n, bf16 ? "bfloat16" : "float32", err);
    if (!j) return -1;
    int rc = write_json(dir, j, err);
    cJSON_Delete(j);
    return rc;
}

/* config.json from the description (GPT-2: ArchSpec.config_from_desc), or the one it was read
 * from, copied with torch_dtype set */
static int write_config(const char *dir, const ModelDesc *d, bool bf16, GtError *err) {
    if (!arch_spec(d->arch)->config_from_desc) return checkpoint_write_config(dir, d->path, d->source, d->source_len, bf16, err);
    cJSON *j = config_from_desc(d);
    set_string(j, "torch_dtype", bf16 ? "bfloat16" : "float32");
    int rc = write_json(dir, j, err);
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- the HF tensors of a model */

typedef struct {
    int tensor;         /* in the layout */
    int block;          /* which of the tensor's HF blocks (a 4-bit tensor's unit) */
    int64_t row0, rows; /* the gtrain rows this HF tensor holds */
    char name[128];
} HfBlock;

static HfBlock *model_blocks(const Model *m, int *n) {
    const ParamLayout *pl = &m->base_layout;
    int cap = 0;
    for (int i = 0; i < pl->n_tensors; i++) cap += pl->tensors[i].spec->n_blocks;
    HfBlock *b = gt_xcalloc((size_t)cap, sizeof *b);
    int k = 0;
    for (int i = 0; i < pl->n_tensors; i++)
        for (int j = 0; j < pl->tensors[i].spec->n_blocks; j++, k++) {
            b[k].tensor = i;
            b[k].block = j;
            arch_block_name(&pl->tensors[i], j, b[k].name, sizeof b[k].name, &m->desc, &b[k].row0, &b[k].rows);
        }
    *n = k;
    return b;
}

/* the HF shape of a block: [rows, cols], a vector [rows], or transposed [cols, rows] */
static int block_shape(const ParamTensor *t, const HfBlock *b, int64_t shape[2]) {
    if (t->ndim == 1) {
        shape[0] = b->rows;
        return 1;
    }
    shape[0] = t->transposed ? t->shape[1] : b->rows;
    shape[1] = t->transposed ? b->rows : t->shape[1];
    return 2;
}

/* ---------------------------------------------------------------- save */

typedef struct {
    Model *m;
    const HfBlock *blocks;
    int cached; /* the transposed tensor now in the scratch, or -1 */
} SaveCtx;

/* elements [e0, e0 + n) of HF tensor i (in HF's layout) as fp32 into dst */
static int save_fill(void *vctx, int i, uint64_t e0, size_t n, float *dst, GtError *err) {
    SaveCtx *c = vctx;
    Model *m = c->m;
    const HfBlock *b = &c->blocks[i];
    const ParamTensor *t = &m->base_layout.tensors[b->tensor];
    const size_t cols = (size_t)t->shape[1];
    if (!t->transposed) return model_download_base(m, t->offset + (size_t)b->row0 * cols + e0, dst, n, err);
    /* HF [in, out] from gtrain's [out, in]: the whole tensor once, read across */
    float *s = scratch(m);
    if (c->cached != b->tensor) {
        if (model_download_base(m, t->offset, s, t->numel, err)) return -1;
        c->cached = b->tensor;
    }
    const size_t out = (size_t)t->shape[0], in = cols;
    for (size_t k = 0; k < n; k++) {
        size_t e = (size_t)e0 + k, ii = e / out, o = e % out;
        dst[k] = s[o * in + ii];
    }
    return 0;
}

int checkpoint_save_weights(const char *dir, Model *m, bool bf16, uint64_t max_shard_bytes, GtError *err) {
    int n = 0;
    HfBlock *blocks = model_blocks(m, &n);
    StTensorOut *ts = gt_xcalloc((size_t)n, sizeof *ts);
    for (int i = 0; i < n; i++) {
        const ParamTensor *t = &m->base_layout.tensors[blocks[i].tensor];
        ts[i].name = blocks[i].name;
        ts[i].dtype = bf16 ? ST_BF16 : ST_F32;
        ts[i].ndim = block_shape(t, &blocks[i], ts[i].shape);
    }
    SaveCtx ctx = {m, blocks, -1};
    HfSaveOptions opt = {.max_shard_bytes = max_shard_bytes, .staging_bytes = m->stage_io_bytes,
                         .staging = m->staging};
    int rc = hf_save(dir, ts, n, &opt, save_fill, &ctx, err);
    if (rc == 0) rc = write_config(dir, &m->desc, bf16, err);
    free(ts);
    free(blocks);
    return rc;
}

/* ---------------------------------------------------------------- load */

/* HF tensors a checkpoint may hold that are not parameters: GPT-2's attention mask buffers, old
 * Llama checkpoints' rotary inverse frequencies */
static bool ignorable(const char *name) {
    static const char *const SUFFIXES[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof SUFFIXES / sizeof SUFFIXES[0]; i++) {
        size_t s = strlen(SUFFIXES[i]);
        if (len > s && strcmp(name + len - s, SUFFIXES[i]) == 0) return true;
    }
    return false;
}


/* one block into the params: streamed in chunks, or (transposed) gathered whole in the scratch */
static int load_block(Model *m, const HfWeights *w, int k, const HfBlock *b, GtError *err) {
    const ParamTensor *t = &m->base_layout.tensors[b->tensor];
    const size_t cols = (size_t)t->shape[1], numel = (size_t)b->rows * cols, chunk = io_floats(m);
    float *io = m->staging;
    if (!t->transposed) {
        const size_t dst = t->offset + (size_t)b->row0 * cols;
        for (size_t e0 = 0; e0 < numel; e0 += chunk) {
            size_t n = numel - e0 < chunk ? numel - e0 : chunk;
            if (hf_weights_read_range_f32(w, k, e0, n, io, err)) return -1;
            if (model_upload_base(m, dst + e0, io, n, err)) return -1;
        }
        return 0;
    }
    const size_t out = (size_t)t->shape[0], in = cols; /* HF [in, out] -> gtrain [out, in] */
    float *s = scratch(m);
    for (size_t e0 = 0; e0 < numel; e0 += chunk) {
        size_t n = numel - e0 < chunk ? numel - e0 : chunk;
        if (hf_weights_read_range_f32(w, k, e0, n, io, err)) return -1;
        for (size_t q = 0; q < n; q++) {
            size_t e = e0 + q, ii = e / out, o = e % out;
            s[o * in + ii] = io[q];
        }
    }
    return model_upload_base(m, t->offset, s, t->numel, err);
}

/* a bitsandbytes 4-bit tensor into a 4-bit base's unit: its bytes copied as they are (the same
 * format), or dequantized and quantized again as the base's with a warning (another blocksize or
 * nesting; *warned: said once). 1 when block b is not such a pair (the caller loads its values), 0 done, -1 error. */
static int load_nf4_block(Model *m, const HfWeights *w, int k, const HfBlock *b, bool *warned, GtError *err) {
    const ParamTensor *t = &m->base_layout.tensors[b->tensor];
    Nf4Format f;
    if (t->dtype != GT_NF4 || t->transposed || hf_weights_nf4(w, k, &f) != 1) return 1;
    Nf4Format mine;
    size_t at, e0;
    arch_nf4_unit(t, &m->desc, b->block, &mine, &at, &e0);
    /* a unit larger than the base's room (a smaller blocksize): through its fp32 values (load_block) */
    const bool fits = nf4_bytes(&f) <= m->base_layout.nf4_unit_bytes_max && f.numel == mine.numel;
    int rc = 1;
    if (fits) {
        if (hf_weights_read_nf4(w, k, m->nf4_unit, err)) return -1;
        if ((rc = model_upload_nf4_unit(m, b->tensor, b->block, m->nf4_unit, &f, err)) < 0) return -1;
    }
    if (rc == 1 && !*warned) /* once a load */
        gt_warn("%s: %s (and any other like it): 4-bit nf4 of blocksize %d%s, the base's is %d%s: dequantized and "
                "quantized again\n", hf_weights_path(w), b->name, f.blocksize, f.nested ? " with double quant" : "",
                mine.blocksize, mine.nested ? " with double quant" : "");
    *warned |= rc == 1;
    return fits ? 0 : 1;
}

int checkpoint_load_weights(Model *m, const char *path, GtError *err) {
    return checkpoint_load_weights_info(m, path, NULL, err);
}

int checkpoint_load_weights_info(Model *m, const char *path, WeightsLoadInfo *li, GtError *err) {
    HfWeights *w = NULL;
    if (li) memset(li, 0, sizeof *li);
    if (hf_weights_open(&w, path, err)) return -1;
    for (int k = 0; k < hf_weights_warning_count(w); k++) gt_warn("%s\n", hf_weights_warning(w, k));
    int n = 0, rc = -1;
    unsigned dtypes = 0;
    HfBlock *blocks = model_blocks(m, &n);
    const int count = hf_weights_count(w);
    bool *used = gt_xcalloc((size_t)count + 1, sizeof *used), warned = false;
    for (int i = 0; i < n; i++) {
        const ParamTensor *t = &m->base_layout.tensors[blocks[i].tensor];
        int k = hf_weights_find_prefixed(w, blocks[i].name, arch_spec(m->desc.arch)->hf_optional_prefix);
        if (k < 0) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected in the checkpoint (a %s has it), not found",
                     hf_weights_path(w), blocks[i].name, arch_hf_class(&m->desc));
            goto done;
        }
        int64_t shape[2];
        int nd = block_shape(t, &blocks[i], shape);
        if (hf_weights_check_shape(w, k, nd, shape, err)) goto done;
        if (!used[k] && li) {
            HfTensorInfo ti;
            hf_weights_info(w, k, &ti);
            li->n_tensors++;
            li->n_values += (uint64_t)ti.numel;
            dtypes |= ti.quant == HF_QUANT_NF4 ? 1u << 8 : 1u << ti.dtype; /* bit 8: bitsandbytes nf4 */
        }
        used[k] = true;
        const int q = load_nf4_block(m, w, k, &blocks[i], &warned, err);
        if (q < 0 || (q == 1 && load_block(m, w, k, &blocks[i], err))) goto done;
    }
    for (int k = 0; k < count; k++) {
        HfTensorInfo info;
        if (used[k] || hf_weights_info(w, k, &info) != 0 || ignorable(info.name)) continue;
        if (m->desc.tie_word_embeddings && strcmp(info.name, "lm_head.weight") == 0) {
            gt_warn("%s: lm_head.weight ignored: the model ties it to the token embedding\n",
                    safetensors_path(info.shard));
            continue;
        }
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %s: expected only the tensors of a %s with this config.json, "
                 "found one it does not have", safetensors_path(info.shard), info.name, arch_hf_class(&m->desc));
        goto done;
    }
    if (li) {
        snprintf(li->path, sizeof li->path, "%s", hf_weights_path(w));
        li->n_shards = hf_weights_shard_count(w);
        for (int d = ST_F32; d <= ST_F16; d++)
            if (dtypes & (1u << d))
                snprintf(li->dtypes + strlen(li->dtypes), sizeof li->dtypes - strlen(li->dtypes), "%s%s",
                         li->dtypes[0] ? "+" : "", st_dtype_name((StDtype)d));
        if (dtypes & (1u << 8))
            snprintf(li->dtypes + strlen(li->dtypes), sizeof li->dtypes - strlen(li->dtypes), "%sNF4", li->dtypes[0] ? "+" : "");
    }
    model_params_changed(m);
    rc = 0;
done:
    free(used);
    free(blocks);
    hf_weights_close(w);
    return rc;
}
