/* model_desc.c - the model description: a Hugging Face GPT-2 config.json read with cJSON.
 *
 * Used fields: model_type ("gpt2"), n_layer, n_head, n_embd, n_inner (null/absent: 4*n_embd),
 * vocab_size, n_positions (or n_ctx), layer_norm_epsilon (1e-5), activation_function
 * ("gelu_new" / "gelu_pytorch_tanh"), tie_word_embeddings (true). Every other field is ignored. */
#include "model_desc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL_JSON_MAX_BYTES (1u << 20)
#define MODEL_JSON_MAX_DEPTH 64

/* Bounds: sizes fit an int with room (4 * n_embd, n_head * head_dim ...) and the parameter count
 * fits uint64 by far. */
#define MAX_N_LAYER 1024
#define MAX_N_HEAD 1024
#define MAX_N_EMBD 65536
#define MAX_N_INNER (4 * 65536)
#define MAX_VOCAB (16 * 1024 * 1024)
#define MAX_POSITIONS (1 << 20)

static void offset_to_line_col(const char *buf, size_t len, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (buf[i] == '\n')
            l++, c = 1;
        else
            c++;
    }
    *line = l;
    *col = c;
}

static const char *json_type_name(const cJSON *j) {
    if (!j) return "nothing";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return cJSON_IsTrue(j) ? "true" : "false";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "an invalid value";
}

/* A found value as text for messages: numbers and short strings shown, others by type. */
static const char *found_text(const cJSON *j, char *buf, size_t cap) {
    if (cJSON_IsNumber(j)) {
        snprintf(buf, cap, "%.17g", j->valuedouble);
    } else if (cJSON_IsString(j)) {
        size_t o = 0;
        buf[o++] = '"';
        for (const char *p = j->valuestring; *p && o + 8 < cap; p++) {
            if (p - j->valuestring >= 48) {
                memcpy(buf + o, "...", 3);
                o += 3;
                break;
            }
            unsigned char ch = (unsigned char)*p;
            if (ch < 0x20 || ch == 0x7f)
                o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
            else
                buf[o++] = (char)ch;
        }
        buf[o++] = '"';
        buf[o] = '\0';
    } else {
        snprintf(buf, cap, "%s", json_type_name(j));
    }
    return buf;
}

/* The one member called name; a second one is an error (cJSON would silently take the first). */
static int get_field(const cJSON *root, const char *name, const cJSON **out, const char *path, GtError *err) {
    const cJSON *found = NULL;
    *out = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (it->string && strcmp(it->string, name) == 0) {
            if (found)
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected the field once, found it twice", path, name);
            found = it;
        }
    }
    *out = found;
    return 0;
}

/* An integer field in [lo, hi]. required=false and absent/null: *out untouched, *present=false. */
static int get_int_field(const cJSON *root, const char *name, bool required, int lo, int hi, int *out,
                         bool *present, const char *path, GtError *err) {
    const cJSON *j = NULL;
    char f[96];
    if (get_field(root, name, &j, path, err)) return -1;
    if (present) *present = false;
    if (!j || (!required && cJSON_IsNull(j))) {
        if (required)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected an integer in [%d, %d], found no such field", path,
                            name, lo, hi);
        return 0;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || floor(j->valuedouble) != j->valuedouble ||
        j->valuedouble < lo || j->valuedouble > hi)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected an integer in [%d, %d], found %s", path, name, lo, hi,
                        found_text(j, f, sizeof f));
    *out = (int)j->valuedouble;
    if (present) *present = true;
    return 0;
}

/* Depth of [ and { outside strings; refuse deep nesting before cJSON recurses into it. */
static int check_nesting(const char *json, size_t len, const char *path, GtError *err) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = json[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > MODEL_JSON_MAX_DEPTH) {
                int line, col;
                offset_to_line_col(json, len, i, &line, &col);
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected JSON nested at most %d deep, found deeper nesting",
                                path, line, col, MODEL_JSON_MAX_DEPTH);
            }
        } else if (ch == ']' || ch == '}') {
            if (depth > 0) depth--;
        }
    }
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
        offset_to_line_col(json, len, (size_t)(nul - json), &line, &col);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected JSON text, found a NUL byte (binary file?)", path,
                        line, col);
    }
    long esc = gt_json_nul_at(json, len); /* cJSON would cut "n_embd\u0000x" to "n_embd" */
    if (esc >= 0) {
        int line, col;
        offset_to_line_col(json, len, (size_t)esc, &line, &col);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected names and strings without NUL, found \\u0000",
                        path, line, col);
    }
    size_t skip = 0;
    if (len >= 3 && memcmp(json, "\xEF\xBB\xBF", 3) == 0) skip = 3; /* UTF-8 byte order mark */
    if (check_nesting(json, len, path, err)) return -1;

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json + skip, len - skip, &end, false);
    if (!root) {
        size_t off = end ? (size_t)(end - json) : 0;
        if (off > len) off = len;
        while (off < len && (json[off] == ' ' || json[off] == '\t' || json[off] == '\n' || json[off] == '\r')) off++;
        int line, col;
        offset_to_line_col(json, len, off, &line, &col);
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
            offset_to_line_col(json, len, (size_t)(p - json), &line, &col);
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
                 json_type_name(root));
        goto out;
    }
    if (get_field(root, "model_type", &j, path, err)) goto out;
    if (j && !(cJSON_IsString(j) && strcmp(j->valuestring, "gpt2") == 0)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: model_type: expected \"gpt2\", found %s", path, found_text(j, f, sizeof f));
        goto out;
    }
    if (get_int_field(root, "n_layer", true, 1, MAX_N_LAYER, &desc->n_layer, NULL, path, err)) goto out;
    if (get_int_field(root, "n_head", true, 1, MAX_N_HEAD, &desc->n_head, NULL, path, err)) goto out;
    if (get_int_field(root, "n_embd", true, 1, MAX_N_EMBD, &desc->n_embd, NULL, path, err)) goto out;
    if (desc->n_embd % desc->n_head != 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: n_head: expected a divisor of n_embd = %d, found %d", path, desc->n_embd,
                 desc->n_head);
        goto out;
    }
    bool present = false;
    desc->n_inner = 4 * desc->n_embd;
    if (get_int_field(root, "n_inner", false, 1, MAX_N_INNER, &desc->n_inner, &present, path, err)) goto out;
    if (get_int_field(root, "vocab_size", true, 1, MAX_VOCAB, &desc->vocab_size, NULL, path, err)) goto out;
    if (get_int_field(root, "n_positions", false, 1, MAX_POSITIONS, &desc->n_positions, &present, path, err)) goto out;
    if (!present) {
        if (get_int_field(root, "n_ctx", false, 1, MAX_POSITIONS, &desc->n_positions, &present, path, err)) goto out;
        if (!present) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: n_positions: expected an integer in [1, %d] (or n_ctx), found no such field",
                     path, MAX_POSITIONS);
            goto out;
        }
    }
    desc->layer_norm_epsilon = 1e-5;
    if (get_field(root, "layer_norm_epsilon", &j, path, err)) goto out;
    if (j) {
        if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || !(j->valuedouble > 0) || !(j->valuedouble < 1)) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: layer_norm_epsilon: expected a number in (0, 1), found %s", path,
                     found_text(j, f, sizeof f));
            goto out;
        }
        desc->layer_norm_epsilon = j->valuedouble;
    }
    if (get_field(root, "activation_function", &j, path, err)) goto out;
    if (j && !(cJSON_IsString(j) &&
               (strcmp(j->valuestring, "gelu_new") == 0 || strcmp(j->valuestring, "gelu_pytorch_tanh") == 0))) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: activation_function: expected \"gelu_new\" or \"gelu_pytorch_tanh\" (tanh GELU), found %s", path,
                 found_text(j, f, sizeof f));
        goto out;
    }
    desc->tie_word_embeddings = true;
    if (get_field(root, "tie_word_embeddings", &j, path, err)) goto out;
    if (j) {
        if (!cJSON_IsBool(j)) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: tie_word_embeddings: expected true or false, found %s", path,
                     found_text(j, f, sizeof f));
            goto out;
        }
        desc->tie_word_embeddings = cJSON_IsTrue(j);
    }
    desc->arch = ARCH_GPT2;
    model_desc_defaults(desc);
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

int model_desc_load(ModelDesc *desc, const char *path, GtError *err) {
    memset(desc, 0, sizeof *desc);
    char *buf;
    size_t n;
    if (gt_read_small_file(path, "model JSON", MODEL_JSON_MAX_BYTES, &buf, &n, err)) return -1;
    int rc = model_desc_parse(desc, buf, n, path, err);
    free(buf);
    return rc;
}

void model_desc_defaults(ModelDesc *d) {
    if (d->n_kv_head == 0) d->n_kv_head = d->n_head;
    if (d->head_dim == 0 && d->n_head > 0) d->head_dim = d->n_embd / d->n_head;
    if (d->model_type[0] == '\0') snprintf(d->model_type, sizeof d->model_type, "%s", d->arch == ARCH_GPT2 ? "gpt2" : "llama");
}

uint64_t model_desc_num_params(const ModelDesc *d) {
    uint64_t V = (uint64_t)d->vocab_size, P = (uint64_t)d->n_positions, C = (uint64_t)d->n_embd,
             I = (uint64_t)d->n_inner, L = (uint64_t)d->n_layer;
    uint64_t per_layer = 2 * C               /* ln_1 */
                         + 3 * C * C + 3 * C /* attn.c_attn */
                         + C * C + C         /* attn.c_proj */
                         + 2 * C             /* ln_2 */
                         + C * I + I         /* mlp.c_fc */
                         + I * C + C;        /* mlp.c_proj */
    uint64_t n = V * C + P * C + L * per_layer + 2 * C; /* wte, wpe, blocks, ln_f */
    if (!d->tie_word_embeddings) n += V * C;           /* lm_head */
    return n;
}
