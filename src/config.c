/* config.c - the run config: defaults, config_load (the YAML reader, config_yaml.c, then the rules
 * between keys), the checks against the model, the printed resolved config and --help-config; all
 * driven by ONE schema table.
 *
 * Everything about a key lives in the schema table (config_table.c): its dotted name, type, where it is stored, its
 * default (as text, parsed by the same code as the file), bounds, enum names and one-line doc.
 * The same table parses the file, applies --set, validates, prints the resolved config, prints
 * `gtrain --help-config` and the README's config reference (--markdown). One value by its entry
 * (parse, print, bounds) is config_value.c's; the entry's layout is in config_schema.h. */
#include "config_parse.h"
#include "data.h"

#include "hf_weights.h"
#include "hf_writer.h"
#include "model_desc.h"
#include "sample.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCHEMA CONFIG_SCHEMA
#define N_KEYS CONFIG_N_KEYS

/* ------------------------------------------------------------------------------------------ */
/* small helpers */

int config_schema_count(void) { return N_KEYS; }

const char *config_schema_key(int i) { return (i >= 0 && i < N_KEYS) ? SCHEMA[i].key : NULL; }

int config_schema_index(const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(SCHEMA[i].key, key) == 0) return i;
    return -1;
}


/* ------------------------------------------------------------------------------------------ */
/* defaults */

void config_defaults(RunConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->config_dir, sizeof cfg->config_dir, ".");
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &SCHEMA[i];
        if (k->alias_of) continue;
        Scalar v = {k->def, strlen(k->def), false};
        char why[GT_ERR_MAX], val[GT_PATH_MAX]; /* parsed whole, then the field's own size copied */
        memset(val, 0, sizeof val);
        if (cfg_parse_value(k, &v, NULL, val, why, sizeof why) == 0) memcpy((char *)cfg + k->offset, val, k->size);
        else {
            /* the table is wrong: a bug, caught by the tests */
            fprintf(stderr, "gtrain: internal error: default of %s: %s\n", k->key, why);
            abort();
        }
    }
}

/* init against init_from and model: the weights a run would load exist, or random init was asked
 * for (a model directory without weights, an interrupted download, is never trained from random) */
static int check_init(const CfgCtx *c) {
    const RunConfig *cfg = c->cfg;
    char msg[GT_PATH_MAX + 700], found[512];
    struct stat st;
    const bool dir = stat(cfg->model, &st) == 0 && S_ISDIR(st.st_mode);
    if (cfg->init == INIT_RANDOM && cfg->init_from[0]) {
        snprintf(msg, sizeof msg, "expected no init_from with init: random (random init reads no weights), found "
                 "init_from %.*s", GT_PATH_MAX, cfg->init_from);
        return cfg_key_error(c, config_schema_index("init"), msg);
    }
    if (cfg->init == INIT_RANDOM || cfg->init_from[0]) return 0;
    if (dir && !hf_weights_dir_has_weights(cfg->model, found, sizeof found)) {
        snprintf(msg, sizeof msg, "expected a model directory holding its weights (" HF_SINGLE_FILE " or "
                 HF_INDEX_FILE "; init: random trains its architecture from random init), found %s in %.*s", found,
                 GT_PATH_MAX, cfg->model);
        return cfg_key_error(c, config_schema_index("model"), msg);
    }
    if (!dir && cfg->init == INIT_PRETRAINED) {
        snprintf(msg, sizeof msg, "expected weights to load (init_from, or model as a model directory holding them), "
                 "found model %.*s, a file, and no init_from", GT_PATH_MAX, cfg->model);
        return cfg_key_error(c, config_schema_index("init"), msg);
    }
    return 0;
}

/* A path that cannot serve its key whatever happens later: it runs through an existing file
 * (output_dir: some_file.txt/out), or a directory key names an existing non-directory. Checked at
 * load, so that `gtrain plan` reports it and a run creates nothing first; paths that do not exist
 * are the readers' to report (output_dir is created). */
static int check_path(const CfgCtx *c, int i, const char *path) {
    const KeySpec *k = &SCHEMA[i];
    char msg[GT_PATH_MAX + 128];
    struct stat st;
    if (keyspec_literal(k, path)) return 0;
    if (stat(path, &st) == 0) {
        if (!k->dir || S_ISDIR(st.st_mode)) return 0;
        snprintf(msg, sizeof msg, "expected a directory, found the %s %s",
                 S_ISREG(st.st_mode) ? "regular file" : "special file", path);
        return cfg_key_error(c, i, msg);
    }
    if (errno != ENOTDIR) return 0;
    char prefix[GT_PATH_MAX];
    for (const char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
        size_t n = (size_t)(p - path);
        memcpy(prefix, path, n);
        prefix[n] = '\0';
        if (stat(prefix, &st) == 0 && !S_ISDIR(st.st_mode)) {
            snprintf(msg, sizeof msg, "expected a path through directories, found %s, under %s %s", path,
                     S_ISREG(st.st_mode) ? "the regular file" : "the special file", prefix);
            return cfg_key_error(c, i, msg);
        }
    }
    return 0;
}

/* Rules between keys. */
static int validate(CfgCtx *c) {
    RunConfig *cfg = c->cfg;
    char msg[256];
    for (int i = 0; i < N_KEYS; i++) /* any lora.* key, in the file or by --set, is a lora: section */
        if (strncmp(SCHEMA[i].key, "lora.", 5) == 0 && cfg->source[i] != CFG_SRC_DEFAULT) cfg->lora.enabled = true;
    for (int i = 0; i < N_KEYS; i++) /* required paths first: they are the first thing to fix */
        if (SCHEMA[i].required && !((const char *)cfg + SCHEMA[i].offset)[0]) {
            snprintf(msg, sizeof msg, "expected %s (required), found nothing", SCHEMA[i].required);
            return cfg_key_error(c, i, msg);
        }
    for (int i = 0; i < N_KEYS; i++)
        if (SCHEMA[i].type == KT_PATH && ((const char *)cfg + SCHEMA[i].offset)[0] &&
            check_path(c, i, (const char *)cfg + SCHEMA[i].offset))
            return -1;
    if (check_init(c)) return -1;
    if (cfg->data.format == DATA_AUTO) cfg->data.format = data_format_for_path(cfg->data.train);
    if (cfg->offload && !cfg->gradient_checkpointing) {
        int i = config_schema_index("offload");
        if (c->file_seen[config_schema_index("gradient_checkpointing_kwargs.offload")] &&
            cfg->source[i] == CFG_SRC_FILE && !c->file_seen[i])
            i = config_schema_index("gradient_checkpointing_kwargs.offload");
        return cfg_key_error(c, i, "expected gradient_checkpointing: true (offload moves the inputs kept by gradient "
                               "checkpointing to host memory), found gradient_checkpointing: false");
    }
    if (cfg->per_device_train_batch_size == 0 && cfg->train_batch_size == 0)
        return cfg_key_error(c, config_schema_index("per_device_train_batch_size"),
                         "expected train_batch_size (the effective batch) to be set with \"auto\", found none");
    /* no validation data: another format without data.val, or text with val_fraction 0 */
    if (!cfg->data.val[0] && (cfg->data.format != DATA_TEXT || cfg->data.val_fraction == 0)) {
        char why[96];
        if (cfg->data.format != DATA_TEXT)
            snprintf(why, sizeof why, "format %s has no built-in validation split", config_data_format_name(cfg->data.format));
        else
            snprintf(why, sizeof why, "data.val_fraction 0 is no validation split");
        if (cfg->eval_steps > 0 && cfg->generation.task == 0) {
            snprintf(msg, sizeof msg, "expected data.val to be set (%s), found eval_steps %ld without data.val", why,
                     cfg->eval_steps);
            return cfg_key_error(c, config_schema_index("eval_steps"), msg);
        }
        int ie = config_schema_index("per_device_eval_batch_size");
        if (cfg->source[ie] != CFG_SRC_DEFAULT) {
            snprintf(msg, sizeof msg, "expected data.val to be set (%s), found an eval batch size without data.val", why);
            return cfg_key_error(c, ie, msg);
        }
    }
    if (cfg->generation.task != 0 && !cfg->generation.data[0])
        return cfg_key_error(c, config_schema_index("generation.data"),
                             "expected the task's prompts and answers (required with generation.task), found nothing");
    /* the floor of cosine_with_min_lr reaches AdamW as a float, like learning_rate itself */
    const double floor_lr = cfg->learning_rate * cfg->min_lr_rate;
    if (cfg->lr_scheduler_type == LR_COSINE_MIN_LR && floor_lr > 0 && floor_lr < FLT_MIN) {
        char a[32], b[32];
        cfg_fmt_double(cfg->learning_rate, a, sizeof a);
        cfg_fmt_double(cfg->min_lr_rate, b, sizeof b);
        snprintf(msg, sizeof msg, "expected learning_rate x min_lr_rate to be 0 or a normal 32-bit float (>= %g), found %s x %s = %g",
                 (double)FLT_MIN, a, b, floor_lr);
        return cfg_key_error(c, config_schema_index("lr_scheduler_kwargs.min_lr_rate"), msg);
    }
    return 0;
}

int config_load(RunConfig *cfg, const char *path, const char *const *sets, int n_sets, GtError *err) {
    config_defaults(cfg);
    CfgCtx *c = gt_xcalloc(1, sizeof *c);
    c->cfg = cfg;
    c->err = err;
    c->file = "";
    char *buf = NULL;
    int rc = 0;
    if (path) {
        if (strlen(path) >= GT_PATH_MAX) {
            free(c);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%.64s...: expected a path shorter than %d bytes, found a longer one",
                            path, GT_PATH_MAX);
        }
        snprintf(cfg->config_path, sizeof cfg->config_path, "%s", path);
        const char *slash = strrchr(path, '/');
        if (!slash)
            snprintf(cfg->config_dir, sizeof cfg->config_dir, ".");
        else if (slash == path)
            snprintf(cfg->config_dir, sizeof cfg->config_dir, "/");
        else
            snprintf(cfg->config_dir, sizeof cfg->config_dir, "%.*s", (int)(slash - path), path);
        c->file = cfg->config_path;
        size_t len = 0;
        if (cfg_read_file(path, &buf, &len, err)) {
            free(c);
            return -1;
        }
        c->buf = buf;
        c->len = len;
        rc = cfg_prescan(c);
        if (rc == 0) {
            if (!yaml_parser_initialize(&c->parser)) {
                rc = gt_error(err, GT_EXIT_FAILURE, "%s: out of memory", path);
            } else {
                yaml_parser_set_input_string(&c->parser, (const unsigned char *)buf, len);
                rc = cfg_parse_document(c);
                yaml_parser_delete(&c->parser);
            }
        }
    }
    for (int i = 0; rc == 0 && i < n_sets; i++) rc = cfg_apply_set(c, sets[i]);
    if (rc == 0) rc = validate(c);
    free(buf);
    free(c);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* checks against the model */

ConfigSource config_key_source(const RunConfig *cfg, const char *key, const char **file, int *line, int *col) {
    int i = config_schema_index(key);
    const ConfigSource src = i >= 0 ? cfg->source[i] : CFG_SRC_DEFAULT;
    *file = src == CFG_SRC_SET ? NULL : cfg->config_path[0] ? cfg->config_path : "config";
    *line = src == CFG_SRC_FILE ? cfg->source_line[i] : 0;
    *col = src == CFG_SRC_FILE ? cfg->source_col[i] : 0;
    return src;
}

int config_key_error(const RunConfig *cfg, const char *key, GtError *err, const char *msg) {
    const char *file;
    int line, col;
    config_key_source(cfg, key, &file, &line, &col);
    return gt_key_error(err, file, line, 0, key, msg);
}

int config_check_model(const RunConfig *cfg, const struct ModelDesc *desc, GtError *err) {
    char msg[GT_PATH_MAX + 256];
    if (cfg->every_n_layers > desc->n_layer) {
        snprintf(msg, sizeof msg, "expected at most n_layer = %d of %s, found %d", desc->n_layer, desc->path,
                 cfg->every_n_layers);
        int i = config_schema_index("every_n_layers");
        return config_key_error(cfg, SCHEMA[i].key, err, msg);
    }
    if (cfg->data.seq_len > desc->n_positions) {
        snprintf(msg, sizeof msg, "expected at most n_positions = %d of %s, found %d", desc->n_positions, desc->path,
                 cfg->data.seq_len);
        return config_key_error(cfg, "data.seq_len", err, msg);
    }
    if (cfg->data.format == DATA_TEXT && desc->vocab_size < 256) {
        snprintf(msg, sizeof msg, "expected a model with vocab_size >= 256 for byte-level text, found vocab_size %d in %s",
                 desc->vocab_size, desc->path);
        return config_key_error(cfg, "data.format", err, msg);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* printing */

void config_print_resolved(const RunConfig *cfg, FILE *out) {
    fprintf(out, "resolved config (%s):\n", cfg->config_path[0] ? cfg->config_path : "no config file");
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &SCHEMA[i];
        if (k->alias_of) continue;
        char val[GT_PATH_MAX + 64], src[32];
        cfg_value_text(k, cfg, val, sizeof val);
        const bool empty = (k->type == KT_PATH || k->type == KT_STRING) && !val[0];
        if (empty) snprintf(val, sizeof val, "\"\"");
        if (empty) {
            /* shown as "" */
        } else if (k->strings) { /* a list of exact strings: each quoted, as in YAML */
            char q[2 * sizeof val + 3];
            size_t n = 0;
            q[n++] = '[', q[n++] = '"';
            for (const char *c = val; *c && n + 8 < sizeof q; c++) {
                const char *e = *c == '\n' ? "\\n" : *c == '\t' ? "\\t" : *c == '\r' ? "\\r" : *c == '"' ? "\\\"" : *c == '\\' ? "\\\\" : *c == CONFIG_LIST_SEP ? "\", \"" : NULL;
                if (e) n += (size_t)snprintf(q + n, sizeof q - n, "%s", e);
                else q[n++] = *c;
            }
            q[n++] = '"', q[n++] = ']';
            q[n] = 0;
            snprintf(val, sizeof val, "%.*s", (int)(sizeof val - 1), q);
        } else if (k->type == KT_STRING && strpbrk(val, "\n\t\r\"\\")) { /* a template: one line, as YAML would quote it */
            char q[2 * sizeof val + 3];
            size_t n = 0;
            q[n++] = '"';
            for (const char *c = val; *c && n + 4 < sizeof q; c++) {
                const char *e = *c == '\n' ? "\\n" : *c == '\t' ? "\\t" : *c == '\r' ? "\\r" : *c == '"' ? "\\\"" : *c == '\\' ? "\\\\" : NULL;
                if (e) n += (size_t)snprintf(q + n, sizeof q - n, "%s", e);
                else q[n++] = *c;
            }
            q[n++] = '"';
            q[n] = 0;
            snprintf(val, sizeof val, "%.*s", (int)(sizeof val - 1), q);
        }
        if (k->type == KT_BYTES) {
            uint64_t b;
            memcpy(&b, (const char *)cfg + k->offset, sizeof b);
            if (b) {
                char h[32];
                size_t n = strlen(val);
                snprintf(val + n, sizeof val - n, " (%s)", gt_format_bytes(h, sizeof h, b));
            }
        }
        if (cfg->source[i] == CFG_SRC_FILE)
            snprintf(src, sizeof src, "file:%d", cfg->source_line[i]);
        else
            snprintf(src, sizeof src, "%s", cfg->source[i] == CFG_SRC_SET       ? "--set"
                                            : cfg->source[i] == CFG_SRC_AUTOFIT ? "auto-fit"
                                                                                : "default");
        fprintf(out, "  %-30s %-40s %s\n", k->key, val, src);
    }
}

static void default_text(const KeySpec *k, char *buf, size_t cap) {
    if (k->type == KT_PATH || k->type == KT_STRING)
        snprintf(buf, cap, "%s", k->def[0] ? k->def : "\"\"");
    else
        snprintf(buf, cap, "%s", k->def);
}

void config_print_help(FILE *out, int markdown) {
    char def[GT_PATH_MAX], b[256];
    if (markdown) {
        fprintf(out, "| key | type | default | bounds | description |\n");
        fprintf(out, "|---|---|---|---|---|\n");
        for (int i = 0; i < N_KEYS; i++) {
            const KeySpec *k = &SCHEMA[i];
            default_text(k, def, sizeof def);
            cfg_bounds_text(k, b, sizeof b);
            fprintf(out, "| `%s` | %s | `%s` | %s | ", k->key, cfg_type_name(k), def, b);
            if (k->alias_of) fprintf(out, "Same field as `%s`. ", k->alias_of);
            for (const char *p = k->doc; *p; p++) {
                if (*p == '|') fputc('\\', out);
                fputc(*p, out);
            }
            fprintf(out, " |\n");
        }
        return;
    }
    fprintf(out, "Run config keys (YAML). Nested keys are written dotted here (data.seq_len is\n"
                 "`data: {seq_len: ...}` in the file); override any key with --set key=value.\n"
                 "Relative paths in the file are resolved against the config file's directory;\n"
                 "paths given with --set and default paths are relative to the working directory.\n"
                 "float32 keys reach the optimizer as 32-bit floats and are checked as such\n"
                 "(adam_beta2 0.99999999 rounds to 1 and is refused).\n\n");
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &SCHEMA[i];
        default_text(k, def, sizeof def);
        cfg_bounds_text(k, b, sizeof b);
        fprintf(out, "%s\n    %s, default %s%s%s\n    ", k->key, cfg_type_name(k), def, b[0] ? "; allowed: " : "", b);
        if (k->alias_of) fprintf(out, "Same field as %s. ", k->alias_of);
        fprintf(out, "%s\n", k->doc);
    }
}
