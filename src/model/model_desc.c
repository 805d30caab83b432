/* model_desc.c - the model description: a Hugging Face config.json read with cJSON. This file
 * checks the text (size, NUL bytes, nesting, syntax, trailing text), finds model_type's family in
 * arch.c's descriptions and reads the keys its ArchSpec names, in one sequence for every family:
 * its readers (ArchSpec.readers) in order: the sizes by the key table (model_desc_read_sizes), the
 * heads, the norm's epsilon, the activation and the tie (model_desc_block_keys); the RoPE families'
 * descriptions add their keys (model_desc_llama.c, which documents their fields), read by ArchFamily.
 *
 * GPT-2 (model_type "gpt2" or absent). Used fields: n_layer, n_head, n_embd, n_inner
 * (null/absent: 4*n_embd), vocab_size, n_positions (or n_ctx), layer_norm_epsilon (1e-5),
 * activation_function ("gelu_new" / "gelu_pytorch_tanh"), tie_word_embeddings (true). Every other
 * field is ignored. Any other model_type is refused. */
#include "model_desc.h"

#include "arch.h"
#include "model_desc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int model_desc_heads_divide(ModelDesc *d, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err) {
    (void)root, (void)fam;
    const ArchSpec *s = arch_spec(d->arch);
    if (d->n_embd % d->n_head == 0) return 0;
    const char *head = "", *embd = "";
    for (int i = 0; i < ARCH_MAX_SIZE_KEYS && s->sizes[i].key; i++) {
        if (s->sizes[i].field == FIELD_N_HEAD) head = s->sizes[i].key;
        if (s->sizes[i].field == FIELD_N_EMBD) embd = s->sizes[i].key;
    }
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a divisor of %s = %d, found %d", path, head, embd, d->n_embd,
                    d->n_head);
}

int model_desc_block_keys(ModelDesc *d, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err) {
    (void)fam;
    const ArchSpec *s = arch_spec(d->arch);
    const cJSON *j;
    char f[MJ_FOUND_MAX];
    bool present;
    d->layer_norm_epsilon = s->norm_eps_default;
    if (mj_get_number(root, s->norm_eps_key, NULL, false, "a number in (0, 1)", &d->layer_norm_epsilon, &present, path,
                      err))
        return -1;
    if (present && !(d->layer_norm_epsilon > 0 && d->layer_norm_epsilon < 1))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a number in (0, 1), found %s", path, s->norm_eps_key,
                        mj_num(d->layer_norm_epsilon, f, sizeof f));
    if (mj_get(root, s->act_key, NULL, &j, path, err)) return -1;
    bool known = false;
    for (int i = 0; j && cJSON_IsString(j) && i < 3 && s->act_values[i]; i++)
        known = known || strcmp(j->valuestring, s->act_values[i]) == 0;
    if (j && !known)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected %s, found %s", path, s->act_key, s->act_expected,
                        mj_found(j, f, sizeof f));
    d->tie_word_embeddings = s->tie_default;
    return mj_get_bool(root, "tie_word_embeddings", NULL, false, &d->tie_word_embeddings, NULL, path, err);
}

/* config.json's quantization_config (transformers writes it for a bitsandbytes model): a 4-bit NF4
 * base (quant_method "bitsandbytes", load_in_4bit true, bnb_4bit_quant_type "nf4") is d->quant,
 * prequantized (blocksize and nesting come from each tensor's quant_state at load, checked there);
 * anything else is refused. Absent or null: a full-precision base. */
static int read_quantization(ModelDesc *d, const cJSON *root, const char *path, GtError *err) {
    const cJSON *q = NULL, *j = NULL;
    char f[MJ_FOUND_MAX];
    if (mj_get(root, "quantization_config", NULL, &q, path, err)) return -1;
    if (!q || cJSON_IsNull(q)) return 0;
    if (!cJSON_IsObject(q))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: quantization_config: expected an object (bitsandbytes' 4-bit "
                        "config), found %s", path, mj_found(q, f, sizeof f));
    if (mj_get(q, "quant_method", "quantization_config.quant_method", &j, path, err)) return -1;
    if (!j || !cJSON_IsString(j) || strcmp(j->valuestring, "bitsandbytes") != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: quantization_config.quant_method: expected \"bitsandbytes\" (gtrain "
                        "reads bitsandbytes' 4-bit nf4 bases only), found %s", path, j ? mj_found(j, f, sizeof f) : "none");
    bool in8 = false, in4 = false, nested = false, present = false;
    if (mj_get_bool(q, "load_in_8bit", "quantization_config.load_in_8bit", true, &in8, NULL, path, err) ||
        mj_get_bool(q, "load_in_4bit", "quantization_config.load_in_4bit", true, &in4, NULL, path, err) ||
        mj_get_bool(q, "bnb_4bit_use_double_quant", "quantization_config.bnb_4bit_use_double_quant", true, &nested,
                    &present, path, err))
        return -1;
    if (in8)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: quantization_config.load_in_8bit: expected false (gtrain reads 4-bit "
                        "nf4 bases only, not LLM.int8()), found true", path);
    if (!in4)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: quantization_config.load_in_4bit: expected true (a bitsandbytes "
                        "4-bit base), found %s", path, "false or none");
    if (mj_get(q, "bnb_4bit_quant_type", "quantization_config.bnb_4bit_quant_type", &j, path, err)) return -1;
    if (!j || !cJSON_IsString(j) || strcmp(j->valuestring, "nf4") != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: quantization_config.bnb_4bit_quant_type: expected \"nf4\" (gtrain "
                        "reads NF4 only), found %s", path, j ? mj_found(j, f, sizeof f) : "none (bitsandbytes' default fp4)");
    d->quant.nf4 = true;
    d->quant.blocksize = 64;
    d->quant.nested = nested;
    d->quant.prequantized = true;
    return 0;
}

int model_desc_parse(ModelDesc *desc, const char *json, size_t len, const char *path, GtError *err) {
    memset(desc, 0, sizeof *desc);
    snprintf(desc->path, sizeof desc->path, "%s", path);
    if (len == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a JSON object, found an empty file", path);
    if (len > MODEL_JSON_MAX_BYTES)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a model JSON of at most 1 MiB, found %zu bytes", path, len);
    const char *nul = memchr(json, '\0', len);
    if (nul) {
        int line, col;
        mj_line_col(json, len, (size_t)(nul - json), &line, &col);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected JSON text, found a NUL byte (binary file?)", path,
                        line, col);
    }
    long esc = gt_json_nul_at(json, len); /* cJSON would cut "n_embd\u0000x" to "n_embd" */
    if (esc >= 0) {
        int line, col;
        mj_line_col(json, len, (size_t)esc, &line, &col);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected names and strings without NUL, found \\u0000",
                        path, line, col);
    }
    size_t skip = 0;
    if (len >= 3 && memcmp(json, "\xEF\xBB\xBF", 3) == 0) skip = 3; /* UTF-8 byte order mark */
    if (mj_check_nesting(json, len, path, err)) return -1;

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json + skip, len - skip, &end, false);
    if (!root) {
        size_t off = end ? (size_t)(end - json) : 0;
        if (off > len) off = len;
        while (off < len && (json[off] == ' ' || json[off] == '\t' || json[off] == '\n' || json[off] == '\r')) off++;
        int line, col;
        mj_line_col(json, len, off, &line, &col);
        if (off >= len)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected valid JSON, found the end of the file (truncated?)",
                            path, line, col);
        unsigned char ch = (unsigned char)json[off];
        char what[32];
        if (ch >= 0x20 && ch < 0x7f)
            snprintf(what, sizeof what, "'%c'", ch);
        else
            snprintf(what, sizeof what, "byte 0x%02x", ch);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected valid JSON, found %s at byte %zu", path, line, col,
                        what, off);
    }
    /* trailing garbage after the value */
    for (const char *p = end; p && p < json + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            int line, col;
            mj_line_col(json, len, (size_t)(p - json), &line, &col);
            cJSON_Delete(root);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected the end of the JSON, found more text", path, line,
                            col);
        }
    }
    int rc = -1;
    char f[96];
    const cJSON *j = NULL;
    if (!cJSON_IsObject(root)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a JSON object (a Hugging Face config.json), found %s", path,
                 mj_type_name(root));
        goto out;
    }
    /* the family: model_type (absent: GPT-2) names one in the descriptions */
    if (mj_get(root, "model_type", NULL, &j, path, err)) goto out;
    /* absent: the default family; present but not a string: no family (refused below) */
    const ArchFamily *fam = !j || cJSON_IsString(j) ? arch_family_of(j ? j->valuestring : NULL, &desc->arch) : NULL;
    if (j && !fam) {
        char known[256] = "";
        size_t n = 0;
        int total = 0, k = 0;
        for (int a = 0; a < ARCH_COUNT; a++) total += arch_spec((ModelArch)a)->n_families;
        for (int a = 0; a < ARCH_COUNT; a++)
            for (int i = 0; i < arch_spec((ModelArch)a)->n_families && n < sizeof known; i++, k++)
                n += (size_t)snprintf(known + n, sizeof known - n, "%s\"%s\"", k == 0 ? "" : k == total - 1 ? " or " : ", ",
                                      arch_spec((ModelArch)a)->families[i].model_type);
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: model_type: expected %s, found %s", path, known, mj_found(j, f, sizeof f));
        goto out;
    }
    snprintf(desc->model_type, sizeof desc->model_type, "%s", fam->model_type);
    /* the description's readers, in its order */
    const ArchSpec *s = arch_spec(desc->arch);
    for (int i = 0; i < ARCH_MAX_READERS && s->readers[i]; i++)
        if (s->readers[i](desc, root, fam, path, err)) goto out;
    if (read_quantization(desc, root, path, err)) goto out;
    model_desc_defaults(desc);
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

int model_desc_read_sizes(ModelDesc *d, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err) {
    (void)fam;
    const ArchSpec *s = arch_spec(d->arch);
    for (int i = 0; i < ARCH_MAX_SIZE_KEYS && s->sizes[i].key; i++) {
        const ArchSizeKey *k = &s->sizes[i];
        int *v = arch_size_field(d, k->field);
        bool present = false;
        if (k->embd_times) *v = k->embd_times * d->n_embd; /* the table reads n_embd before a key defaulting to it */
        if (mj_get_int(root, k->key, NULL, !k->embd_times && !k->alt, k->lo, k->hi, v, &present, path, err)) return -1;
        if (present || !k->alt) continue;
        if (mj_get_int(root, k->alt, NULL, false, k->lo, k->hi, v, &present, path, err)) return -1;
        if (!present)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected an integer in [%d, %d] (or %s), found no such field",
                            path, k->key, k->lo, k->hi, k->alt);
    }
    return 0;
}

int model_desc_load(ModelDesc *desc, const char *path, GtError *err) {
    char *source = NULL;
    int rc = model_desc_load_source(desc, path, &source, err);
    free(source);
    desc->source = NULL;
    desc->source_len = 0;
    return rc;
}

int model_desc_load_source(ModelDesc *desc, const char *path, char **source, GtError *err) {
    memset(desc, 0, sizeof *desc);
    *source = NULL;
    char *buf, file[GT_PATH_MAX];
    size_t n;
    struct stat sb;
    /* a Hugging Face model directory: its config.json */
    bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (snprintf(file, sizeof file, dir ? "%s/config.json" : "%s", path) >= (int)sizeof file)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%.200s...: expected a path of at most %d bytes", path, GT_PATH_MAX - 1);
    if (gt_read_small_file(file, "model JSON", MODEL_JSON_MAX_BYTES, &buf, &n, err)) return -1;
    int rc = model_desc_parse(desc, buf, n, file, err);
    if (rc) {
        free(buf);
        return rc;
    }
    *source = buf;
    desc->source = buf;
    desc->source_len = n;
    return 0;
}

void model_desc_defaults(ModelDesc *d) {
    if (d->n_kv_head == 0) d->n_kv_head = d->n_head;
    if (d->head_dim == 0 && d->n_head > 0) d->head_dim = d->n_embd / d->n_head;
    if (d->model_type[0] == '\0')
        snprintf(d->model_type, sizeof d->model_type, "%s", arch_spec(d->arch)->families[0].model_type);
}

uint64_t model_desc_num_params(const ModelDesc *d) { return arch_num_params(d); }
