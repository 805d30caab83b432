/* config_write.c - the run config written back: output_dir/resolved_config.yaml (every key with
 * its final value, auto-fit's choices included, paths absolute, as YAML the config reader loads
 * again) and the lexical normalisation every path of a config goes through. */
#include "config_schema.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ paths */

int config_clean_path(char *p, size_t cap) {
    char abs[2 * GT_PATH_MAX + 2];
    if (!p[0]) return 0;
    if (p[0] == '/') {
        snprintf(abs, sizeof abs, "%s", p);
    } else {
        char cwd[GT_PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return -1;
        snprintf(abs, sizeof abs, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, p);
    }
    /* components, "." and empty ones dropped, ".." taking the one before it */
    char work[sizeof abs], out[sizeof abs];
    memcpy(work, abs, sizeof work);
    const char *comp[GT_PATH_MAX / 2 + 1];
    int n = 0;
    bool dotdot = false;
    for (char *save = NULL, *c = strtok_r(work, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0) continue;
        if (strcmp(c, "..") == 0) {
            dotdot = true;
            if (n > 0) n--;
            continue;
        }
        if (n < (int)(sizeof comp / sizeof *comp)) comp[n++] = c;
    }
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) len += (size_t)snprintf(out + len, sizeof out - len, "/%s", comp[i]);
    if (n == 0) snprintf(out, sizeof out, "/");
    else if (abs[strlen(abs) - 1] == '/') snprintf(out + len, sizeof out - len, "/"); /* "file/" is not "file" */
    /* ".." after a symbolic link is not lexical: keep the absolute spelling when they differ */
    struct stat a, b;
    const char *res = out;
    if (dotdot && stat(abs, &a) == 0 && (stat(out, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino))
        res = abs;
    if (strlen(res) >= cap) return -1;
    snprintf(p, cap, "%s", res);
    return 0;
}

/* ------------------------------------------------------------------ resolved config */

/* s as a YAML double-quoted scalar: what YAML does not allow raw in a stream (C0 and C1 controls,
 * DEL, U+FEFF, U+FFFE, U+FFFF) escaped, so that the reader gets the same bytes back */
static void put_quoted(GtBytes *b, const char *s) {
    gt_bytes_put(b, "\"", 1);
    const unsigned char *c = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left > 0) {
        char e[16];
        size_t used = 1;
        if (*c == '"' || *c == '\\') snprintf(e, sizeof e, "\\%c", *c);
        else if (*c == '\n') snprintf(e, sizeof e, "\\n");
        else if (*c == '\t') snprintf(e, sizeof e, "\\t");
        else if (*c == '\r') snprintf(e, sizeof e, "\\r");
        else if (*c < 0x20 || *c == 0x7f) snprintf(e, sizeof e, "\\x%02x", *c);
        else if (*c < 0x80) e[0] = (char)*c, e[1] = '\0';
        else {
            long k = gt_utf8_sequence(c, left);
            if (k <= 0) { /* not UTF-8 (the reader refuses such values): as it is */
                e[0] = (char)*c, e[1] = '\0';
            } else {
                used = (size_t)k;
                unsigned cp = k == 2 ? (c[0] & 0x1fu) << 6 | (c[1] & 0x3fu)
                              : k == 3 ? (c[0] & 0x0fu) << 12 | (c[1] & 0x3fu) << 6 | (c[2] & 0x3fu)
                                       : 0x10000u; /* 4 bytes: printable */
                if ((cp >= 0x80 && cp <= 0x9f) || cp == 0xfeff || cp == 0xfffe || cp == 0xffff)
                    snprintf(e, sizeof e, "\\u%04x", cp);
                else
                    memcpy(e, c, used), e[used] = '\0';
            }
        }
        gt_bytes_put(b, e, strlen(e));
        c += used;
        left -= used;
    }
    gt_bytes_put(b, "\"", 1);
}

static void put_value(GtBytes *b, const KeySpec *k, const RunConfig *cfg) {
    char val[GT_PATH_MAX + 64];
    if (k->strings && ((const char *)cfg + k->offset)[0]) { /* a flow list of its strings, each exact */
        const char *p = (const char *)cfg + k->offset;
        char item[GT_PATH_MAX];
        gt_bytes_put(b, "[", 1);
        for (int i = 0; *p || i == 0; i++) {
            size_t len = strcspn(p, (const char[]){CONFIG_LIST_SEP, '\0'});
            snprintf(item, sizeof item, "%.*s", (int)len, p);
            if (i) gt_bytes_put(b, ", ", 2);
            put_quoted(b, item);
            p += len + (p[len] != '\0');
        }
        gt_bytes_put(b, "]", 1);
        return;
    }
    if (k->type == KT_STRING || k->type == KT_PATH) {
        put_quoted(b, (const char *)cfg + k->offset);
        return;
    }
    cfg_value_text(k, cfg, val, sizeof val);
    gt_bytes_put(b, val, strlen(val));
}

static const char *source_text(const RunConfig *cfg, int i, char *buf, size_t cap) {
    switch (cfg->source[i]) {
    case CFG_SRC_FILE: snprintf(buf, cap, "file:%d", cfg->source_line[i]); break;
    case CFG_SRC_SET: snprintf(buf, cap, "--set"); break;
    case CFG_SRC_AUTOFIT: snprintf(buf, cap, "auto-fit"); break;
    default: snprintf(buf, cap, "default"); break;
    }
    return buf;
}

char *config_resolved_text(const RunConfig *cfg, size_t *len) {
    GtBytes b = {0};
    char line[GT_PATH_MAX + 64], src[32];
    snprintf(line, sizeof line,
             "# resolved_config.yaml - every key of this run with its final value and where it came from (written\n"
             "# by gtrain at the start of the run; paths absolute; keys at their default are comments).\n"
             "# gtrain --config resolved_config.yaml runs the same run again.\n");
    gt_bytes_put(&b, line, strlen(line));
    /* top-level keys first, then one mapping per prefix (data:, lr_scheduler_kwargs:, lora:) in table order */
    for (int pass = 0; pass < CONFIG_N_KEYS; pass++) {
        const KeySpec *head = &CONFIG_SCHEMA[pass];
        const char *dot = strchr(head->key, '.');
        bool first_of_prefix = true;
        if (dot) /* a prefix is written at its first key */
            for (int j = 0; j < pass; j++)
                if (!CONFIG_SCHEMA[j].alias_of && strncmp(CONFIG_SCHEMA[j].key, head->key, (size_t)(dot - head->key + 1)) == 0)
                    first_of_prefix = false;
        if (head->alias_of || (dot && !first_of_prefix)) continue;
        if (dot && strncmp(head->key, "lora.", 5) == 0 && !cfg->lora.enabled) continue; /* a lora: section makes a LoRA run */
        /* a key left at its default is written as a comment: given, some keys are checked against
         * others (an eval batch size without data.val), and a default is a default either way */
        if (!dot) {
            snprintf(line, sizeof line, "%s%s: ", cfg->source[pass] == CFG_SRC_DEFAULT ? "# " : "", head->key);
            gt_bytes_put(&b, line, strlen(line));
            put_value(&b, head, cfg);
            snprintf(line, sizeof line, "  # %s\n", source_text(cfg, pass, src, sizeof src));
            gt_bytes_put(&b, line, strlen(line));
            continue;
        }
        bool given = false; /* a mapping whose keys are all defaults is a comment too (an empty one is null) */
        for (int j = pass; j < CONFIG_N_KEYS; j++)
            if (!CONFIG_SCHEMA[j].alias_of && strncmp(CONFIG_SCHEMA[j].key, head->key, (size_t)(dot - head->key + 1)) == 0 &&
                cfg->source[j] != CFG_SRC_DEFAULT)
                given = true;
        snprintf(line, sizeof line, "%s%.*s:\n", given ? "" : "# ", (int)(dot - head->key), head->key);
        gt_bytes_put(&b, line, strlen(line));
        for (int j = pass; j < CONFIG_N_KEYS; j++) {
            const KeySpec *k = &CONFIG_SCHEMA[j];
            if (k->alias_of || strncmp(k->key, head->key, (size_t)(dot - head->key + 1)) != 0) continue;
            snprintf(line, sizeof line, "%s  %s: ", cfg->source[j] == CFG_SRC_DEFAULT ? "# " : "",
                     k->key + (dot - head->key) + 1);
            gt_bytes_put(&b, line, strlen(line));
            put_value(&b, k, cfg);
            snprintf(line, sizeof line, "  # %s\n", source_text(cfg, j, src, sizeof src));
            gt_bytes_put(&b, line, strlen(line));
        }
    }
    gt_bytes_put(&b, "", 1); /* NUL-terminated */
    *len = b.n - 1;
    return b.p;
}

int config_write_resolved(const RunConfig *cfg, const char *path, GtError *err) {
    size_t len;
    char *text = config_resolved_text(cfg, &len);
    int rc = gt_write_file_atomic(path, text, len, err);
    free(text);
    return rc;
}

void config_set_fitted(RunConfig *cfg, int B, int A, bool recompute, int every_n_layers, bool offload) {
    if (cfg->per_device_train_batch_size != 0) return; /* not auto: nothing was fitted */
    cfg->per_device_train_batch_size = B;
    cfg->gradient_accumulation_steps = A;
    cfg->gradient_checkpointing = recompute;
    cfg->every_n_layers = recompute ? every_n_layers : 1;
    cfg->offload = recompute && offload;
    static const char *const keys[] = {"per_device_train_batch_size", "gradient_accumulation_steps",
                                       "gradient_checkpointing", "every_n_layers", "offload"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int k = config_schema_index(keys[i]);
        if (k >= 0) cfg->source[k] = CFG_SRC_AUTOFIT, cfg->source_line[k] = 0;
    }
}
