/* config.c - the run config: YAML (libyaml event API) -> RunConfig, driven by ONE schema table.
 *
 * Everything about a key lives in the schema table (config_table.c): its dotted name, type, where it is stored, its
 * default (as text, parsed by the same code as the file), bounds, enum names and one-line doc.
 * The same table parses the file, applies --set, validates, prints the resolved config, prints
 * `gtrain --help-config` and the README's config reference (--markdown). One value by its entry
 * (parse, print, bounds) is config_value.c's; the entry's layout is in config_schema.h. */
#include "config_schema.h"

#include "hf_weights.h"
#include "hf_writer.h"
#include "lora.h"
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
#include <yaml.h>

#define CONFIG_MAX_BYTES (1u << 20) /* a run config is a few hundred bytes; refuse > 1 MiB */
#define CONFIG_MAX_DEPTH 4          /* sections are one level deep; anything deeper is refused */
#define KEY_MAX 256


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
        char why[GT_ERR_MAX];
        if (cfg_parse_value(k, &v, NULL, (char *)cfg + k->offset, why, sizeof why) != 0) {
            /* the table is wrong: a bug, caught by the tests */
            fprintf(stderr, "gtrain: internal error: default of %s: %s\n", k->key, why);
            abort();
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* unknown keys: nearest known key by edit distance */

static size_t edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > KEY_MAX) na = KEY_MAX;
    if (nb > KEY_MAX) nb = KEY_MAX;
    size_t row[KEY_MAX + 1];
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

static const char *nearest_key(const char *key) {
    const char *best = SCHEMA[0].key;
    size_t bd = (size_t)-1;
    for (int i = 0; i < N_KEYS; i++) {
        const char *cand = SCHEMA[i].alias_of ? SCHEMA[i].alias_of : SCHEMA[i].key;
        const char *last = strrchr(SCHEMA[i].key, '.');
        size_t d = edit_distance(key, SCHEMA[i].key);
        if (last) {
            /* "seq_len" at the top level is data.seq_len */
            size_t d2 = edit_distance(key, last + 1);
            if (d2 < d) d = d2;
        }
        if (d < bd) {
            bd = d;
            best = cand;
        }
    }
    return best;
}

/* Is name a section (a prefix "name." of some key)? */
static bool is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < N_KEYS; i++)
        if (strncmp(SCHEMA[i].key, name, n) == 0 && SCHEMA[i].key[n] == '.') return true;
    return false;
}

static void section_keys(const char *name, char *buf, size_t cap) {
    size_t n = strlen(name), o = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_KEYS && o < cap; i++)
        if (strncmp(SCHEMA[i].key, name, n) == 0 && SCHEMA[i].key[n] == '.')
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", SCHEMA[i].key + n + 1);
}

/* ------------------------------------------------------------------------------------------ */
/* the parse context */

typedef struct {
    RunConfig *cfg;
    const char *file; /* the config path as given, for messages */
    const char *buf;
    size_t len;
    yaml_parser_t parser;
    bool file_seen[GT_CONFIG_MAX_KEYS];
    int line[GT_CONFIG_MAX_KEYS], col[GT_CONFIG_MAX_KEYS];
    GtError *err;
} Ctx;

/* "run.yaml:3:5", "--set" or "run.yaml" for where key i got its value. */
static const char *where(const Ctx *c, int i, char *buf, size_t cap) {
    const RunConfig *cfg = c->cfg;
    if (cfg->source[i] == CFG_SRC_FILE)
        snprintf(buf, cap, "%s:%d:%d", c->file, c->line[i], c->col[i]);
    else
        snprintf(buf, cap, "%s", c->file[0] ? c->file : "config");
    return buf;
}

/* "run.yaml:3:5: key: msg" or "--set key: msg" */
static int key_error(const Ctx *c, int i, const char *msg) {
    char w[GT_PATH_MAX + 32];
    if (c->cfg->source[i] == CFG_SRC_SET)
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: %s", SCHEMA[i].key, msg);
    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: %s", where(c, i, w, sizeof w), SCHEMA[i].key, msg);
}

static void mark_source(Ctx *c, int i, ConfigSource src, int line, int col) {
    /* every spelling of the same field shares its source */
    for (int j = 0; j < N_KEYS; j++)
        if (SCHEMA[j].offset == SCHEMA[i].offset) {
            c->cfg->source[j] = src;
            c->cfg->source_line[j] = line;
            c->line[j] = line;
            c->col[j] = col;
        }
}

/* Set key i from a scalar. line > 0: from the file at line:col; else from --set. */
static int apply(Ctx *c, int i, const Scalar *v, int line, int col) {
    const KeySpec *k = &SCHEMA[i];
    char why[GT_ERR_MAX];
    char val[GT_PATH_MAX];
    _Static_assert(sizeof(double) <= GT_PATH_MAX, "value buffer");
    memset(val, 0, sizeof val);
    bool from_file = line > 0;
    char w[GT_PATH_MAX + 32];
    if (from_file)
        snprintf(w, sizeof w, "%s:%d:%d:", c->file, line, col);
    else
        snprintf(w, sizeof w, "--set");
    if (cfg_parse_value(k, v, from_file ? c->cfg->config_dir : NULL, val, why, sizeof why) != 0)
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s %s: %s", w, k->key, why);
    void *dst = (char *)c->cfg + k->offset;
    if (from_file) {
        /* the other spelling of the same field, also in the file, must agree */
        for (int j = 0; j < N_KEYS; j++) {
            if (j == i || SCHEMA[j].offset != k->offset || !c->file_seen[j]) continue;
            if (!cfg_same_value(k, val, dst)) {
                char old[GT_PATH_MAX], now[GT_PATH_MAX], a[128], b[128];
                cfg_value_text(&SCHEMA[j], c->cfg, old, sizeof old);
                memcpy((char *)c->cfg + k->offset, val, k->type == KT_PATH || k->type == KT_STRING ? GT_PATH_MAX : k->size);
                cfg_value_text(k, c->cfg, now, sizeof now);
                return gt_error(c->err, GT_EXIT_BAD_INPUT,
                                "%s %s: expected the same value as %s (line %d), found %s against %s", w, k->key,
                                SCHEMA[j].key, c->line[j], cfg_show(now, strlen(now), false, b, sizeof b),
                                cfg_show(old, strlen(old), false, a, sizeof a));
            }
        }
        c->file_seen[i] = true;
    }
    memcpy(dst, val, (k->type == KT_PATH || k->type == KT_STRING) ? GT_PATH_MAX : k->size);
    mark_source(c, i, from_file ? CFG_SRC_FILE : CFG_SRC_SET, from_file ? line : 0, from_file ? col : 0);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* YAML events */

static void offset_to_line_col(const char *buf, size_t len, size_t off, int *line, int *col) {
    int l = 1, cc = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (buf[i] == '\n')
            l++, cc = 1;
        else
            cc++;
    }
    *line = l;
    *col = cc;
}

static int yaml_syntax_error(Ctx *c, const yaml_parser_t *p, const char *file) {
    int line, col;
    if (p->error == YAML_READER_ERROR && c->buf) {
        offset_to_line_col(c->buf, c->len, p->problem_offset, &line, &col);
    } else {
        line = (int)p->problem_mark.line + 1;
        col = (int)p->problem_mark.column + 1;
    }
    if (p->error == YAML_MEMORY_ERROR)
        return gt_error(c->err, GT_EXIT_FAILURE, "%s: out of memory while parsing YAML", file);
    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected valid YAML, found a syntax error: %s%s%s", file,
                    line, col, p->problem ? p->problem : "unknown problem", p->context ? " " : "",
                    p->context ? p->context : "");
}

static const char *event_what(const yaml_event_t *e) {
    switch (e->type) {
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_ALIAS_EVENT: return "an alias";
    case YAML_SCALAR_EVENT: return "a scalar";
    default: return "the end of the document";
    }
}

/* Next event; anchors, aliases and tags are refused (alias bombs, surprises). */
static int next_event(Ctx *c, yaml_event_t *e) {
    if (!yaml_parser_parse(&c->parser, e)) return yaml_syntax_error(c, &c->parser, c->file);
    const char *anchor = NULL, *tag = NULL;
    if (e->type == YAML_SCALAR_EVENT) {
        anchor = (const char *)e->data.scalar.anchor;
        tag = (const char *)e->data.scalar.tag;
    } else if (e->type == YAML_MAPPING_START_EVENT) {
        anchor = (const char *)e->data.mapping_start.anchor;
        tag = (const char *)e->data.mapping_start.tag;
    } else if (e->type == YAML_SEQUENCE_START_EVENT) {
        anchor = (const char *)e->data.sequence_start.anchor;
        tag = (const char *)e->data.sequence_start.tag;
    }
    const char *bad = NULL;
    char name[128];
    if (e->type == YAML_ALIAS_EVENT)
        bad = "an alias", cfg_show((const char *)e->data.alias.anchor, strlen((const char *)e->data.alias.anchor),
                               false, name, sizeof name);
    else if (anchor)
        bad = "an anchor", cfg_show(anchor, strlen(anchor), false, name, sizeof name);
    else if (tag)
        bad = "a tag", cfg_show(tag, strlen(tag), false, name, sizeof name);
    if (bad) {
        int line = (int)e->start_mark.line + 1, col = (int)e->start_mark.column + 1;
        yaml_event_delete(e);
        return gt_error(c->err, GT_EXIT_BAD_INPUT,
                        "%s:%d:%d: expected plain values (anchors, aliases and tags are not supported), found %s (%s)",
                        c->file, line, col, bad, name);
    }
    return 0;
}

static Scalar scalar_of(const yaml_event_t *e) {
    Scalar v = {(const char *)e->data.scalar.value, e->data.scalar.length,
                e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE};
    return v;
}

/* After SEQUENCE_START of a list key: plain scalars up to SEQUENCE_END, joined by commas and
 * applied as one value (its check says what the names may be). */
static int read_list(Ctx *c, int idx, const char *shown, int vl, int vc) {
    char joined[GT_PATH_MAX];
    size_t o = 0;
    joined[0] = '\0';
    for (;;) {
        yaml_event_t ie;
        if (next_event(c, &ie)) return -1;
        if (ie.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ie);
            break;
        }
        Scalar v = ie.type == YAML_SCALAR_EVENT ? scalar_of(&ie) : (Scalar){"", 0, true};
        bool ok = ie.type == YAML_SCALAR_EVENT && v.n > 0 && !memchr(v.s, ',', v.n) && !memchr(v.s, '\0', v.n) &&
                  o + v.n + 2 < sizeof joined;
        if (!ok) {
            char found[128];
            if (ie.type == YAML_SCALAR_EVENT)
                cfg_show(v.s, v.n, v.quoted, found, sizeof found);
            else
                snprintf(found, sizeof found, "%s", event_what(&ie));
            int il = (int)ie.start_mark.line + 1, ic = (int)ie.start_mark.column + 1;
            yaml_event_delete(&ie);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected a list of names, found %s in it", c->file,
                            il, ic, shown, found);
        }
        o += (size_t)snprintf(joined + o, sizeof joined - o, "%s%.*s", o ? "," : "", (int)v.n, v.s);
        yaml_event_delete(&ie);
    }
    if (o == 0) /* not the default: PEFT's target_modules=[] adapts nothing */
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected a non-empty list of names (or no value for "
                        "the default), found an empty list", c->file, vl, vc, shown);
    Scalar v = {joined, o, true};
    return apply(c, idx, &v, vl, vc);
}

/* After MAPPING_START: read key/value pairs into cfg. prefix: "" or the section name. */
static int parse_mapping(Ctx *c, const char *prefix, int depth) {
    const char *sections_seen[8];
    int n_sections = 0;
    for (;;) {
        yaml_event_t ke, ve;
        if (next_event(c, &ke)) return -1;
        if (ke.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ke);
            return 0;
        }
        int kl = (int)ke.start_mark.line + 1, kc = (int)ke.start_mark.column + 1;
        if (ke.type != YAML_SCALAR_EVENT) {
            const char *what = event_what(&ke);
            yaml_event_delete(&ke);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected a key name, found %s", c->file, kl,
                            kc, prefix[0] ? prefix : "(top level)", what);
        }
        char full[KEY_MAX + 8], shown[160];
        const char *kname = (const char *)ke.data.scalar.value;
        size_t klen = ke.data.scalar.length;
        int w = prefix[0] ? snprintf(full, sizeof full, "%s.%s", prefix, kname) : snprintf(full, sizeof full, "%s", kname);
        bool key_ok = w >= 0 && w < KEY_MAX && memchr(kname, '\0', klen) == NULL;
        if (!key_ok) {
            cfg_show(kname, klen, false, shown, sizeof shown);
            yaml_event_delete(&ke);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: unknown key (see gtrain --help-config)",
                            c->file, kl, kc, shown);
        }
        yaml_event_delete(&ke);
        cfg_show(full, strlen(full), false, shown, sizeof shown);

        if (next_event(c, &ve)) return -1;
        int vl = (int)ve.start_mark.line + 1, vc = (int)ve.start_mark.column + 1;
        int idx = config_schema_index(full);
        if (idx >= 0) {
            if (c->file_seen[idx]) {
                yaml_event_delete(&ve);
                return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected each key once, found a duplicate (first at line %d)",
                                c->file, kl, kc, shown, c->line[idx]);
            }
            if (ve.type == YAML_SEQUENCE_START_EVENT && SCHEMA[idx].list) {
                yaml_event_delete(&ve);
                int rc = read_list(c, idx, shown, vl, vc);
                if (rc) return -1;
                continue;
            }
            if (ve.type != YAML_SCALAR_EVENT) {
                char exp[256];
                cfg_expected_text(&SCHEMA[idx], exp, sizeof exp);
                const char *what = event_what(&ve);
                yaml_event_delete(&ve);
                return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected %s, found %s", c->file, vl, vc,
                                shown, exp, what);
            }
            Scalar v = scalar_of(&ve);
            int rc = apply(c, idx, &v, vl, vc);
            yaml_event_delete(&ve);
            if (rc) return -1;
        } else if (is_section(full)) {
            const char *sec = NULL;
            for (int i = 0; i < N_KEYS && !sec; i++) {
                size_t n = strlen(full);
                if (strncmp(SCHEMA[i].key, full, n) == 0 && SCHEMA[i].key[n] == '.') sec = SCHEMA[i].key;
            }
            for (int s = 0; s < n_sections; s++)
                if (strncmp(sections_seen[s], full, strlen(full)) == 0 && sections_seen[s][strlen(full)] == '.') {
                    yaml_event_delete(&ve);
                    return gt_error(c->err, GT_EXIT_BAD_INPUT,
                                    "%s:%d:%d: %s: expected each key once, found a duplicate section", c->file, kl,
                                    kc, shown);
                }
            if (n_sections < (int)(sizeof sections_seen / sizeof sections_seen[0])) sections_seen[n_sections++] = sec;
            if (ve.type == YAML_MAPPING_START_EVENT) {
                yaml_event_delete(&ve);
                if (strcmp(full, "lora") == 0) c->cfg->lora.enabled = true; /* even lora: {} (PEFT's defaults) */
                if (depth + 1 >= CONFIG_MAX_DEPTH)
                    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected at most %d levels, found deeper nesting",
                                    c->file, vl, vc, shown, CONFIG_MAX_DEPTH);
                if (parse_mapping(c, full, depth + 1)) return -1;
            } else {
                Scalar v = ve.type == YAML_SCALAR_EVENT ? scalar_of(&ve) : (Scalar){"", 0, true};
                bool empty = ve.type == YAML_SCALAR_EVENT && cfg_is_null(&v);
                char keys[256], found[128];
                if (ve.type == YAML_SCALAR_EVENT)
                    cfg_show(v.s, v.n, v.quoted, found, sizeof found);
                else
                    snprintf(found, sizeof found, "%s", event_what(&ve));
                yaml_event_delete(&ve);
                if (!empty) {
                    section_keys(full, keys, sizeof keys);
                    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected a mapping with keys %s, found %s",
                                    c->file, vl, vc, shown, keys, found);
                }
            }
        } else {
            yaml_event_delete(&ve);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: unknown key (did you mean %s?)", c->file, kl,
                            kc, shown, nearest_key(full));
        }
    }
}

static int parse_document(Ctx *c) {
    yaml_event_t e;
    if (next_event(c, &e)) return -1; /* STREAM_START */
    yaml_event_delete(&e);
    if (next_event(c, &e)) return -1;
    if (e.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&e);
        return gt_error(c->err, GT_EXIT_BAD_INPUT,
                        "%s: expected a mapping of keys (at least model and data.train), found an empty file", c->file);
    }
    yaml_event_delete(&e); /* DOCUMENT_START */
    if (next_event(c, &e)) return -1;
    if (e.type != YAML_MAPPING_START_EVENT) {
        int line = (int)e.start_mark.line + 1, col = (int)e.start_mark.column + 1;
        bool empty = false;
        char found[128];
        if (e.type == YAML_SCALAR_EVENT) {
            Scalar v = scalar_of(&e);
            empty = cfg_is_null(&v);
            snprintf(found, sizeof found, "a scalar ");
            cfg_show(v.s, v.n, true, found + strlen(found), sizeof found - strlen(found));
        } else {
            snprintf(found, sizeof found, "%s", event_what(&e));
        }
        yaml_event_delete(&e);
        if (empty)
            return gt_error(c->err, GT_EXIT_BAD_INPUT,
                            "%s: expected a mapping of keys (at least model and data.train), found an empty document",
                            c->file);
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected a mapping of keys at the top level, found %s",
                        c->file, line, col, found);
    }
    yaml_event_delete(&e);
    if (parse_mapping(c, "", 0)) return -1;
    if (next_event(c, &e)) return -1; /* DOCUMENT_END */
    yaml_event_delete(&e);
    if (next_event(c, &e)) return -1;
    if (e.type != YAML_STREAM_END_EVENT) {
        int line = (int)e.start_mark.line + 1, col = (int)e.start_mark.column + 1;
        yaml_event_delete(&e);
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected a single YAML document, found a second one",
                        c->file, line, col);
    }
    yaml_event_delete(&e);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the file */

static int read_config_file(const char *path, char **out, size_t *out_len, GtError *err) {
    return gt_read_small_file(path, "run config", CONFIG_MAX_BYTES, out, out_len, err);
}

/* NUL bytes (binary files) and tabs (YAML forbids them in indentation; we refuse them anywhere so
 * that a config never means something other than it looks). */
static int prescan(const Ctx *c) {
    for (size_t i = 0; i < c->len; i++) {
        if (c->buf[i] == '\0' || c->buf[i] == '\t') {
            int line, col;
            offset_to_line_col(c->buf, c->len, i, &line, &col);
            if (c->buf[i] == '\0')
                return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected a YAML text file, found a NUL byte (binary file?)",
                                c->file, line, col);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: expected spaces, found a tab character (use spaces in YAML)",
                            c->file, line, col);
        }
    }
    return 0;
}

/* The value of one --set, read as a YAML stream that must hold exactly one plain scalar (or
 * nothing) in one implicit document: a document marker (---, ...), a directive or a second document
 * (learning_rate=$'1e-3\n---\nfoo') is refused, not cut off after the first scalar. */
static int set_value(Ctx *c, int idx, const char *shown, const char *value) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return gt_error(c->err, GT_EXIT_FAILURE, "--set %s: out of memory", shown);
    yaml_parser_set_input_string(&p, (const unsigned char *)value, strlen(value));
    yaml_event_t e, val;
    bool have_val = false, done = false;
    int rc = 0, docs = 0;
    char exp[256];
    cfg_expected_text(&SCHEMA[idx], exp, sizeof exp);
    while (rc == 0 && !done) {
        if (!yaml_parser_parse(&p, &e)) {
            rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected a YAML scalar, found a syntax error: %s", shown,
                          p.problem ? p.problem : "unknown problem");
            break;
        }
        switch (e.type) {
        case YAML_STREAM_START_EVENT: break;
        case YAML_STREAM_END_EVENT: done = true; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1)
                rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected %s, found several YAML documents", shown, exp);
            else if (!e.data.document_start.implicit)
                rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected %s, found a YAML document marker (---) or directive",
                              shown, exp);
            break;
        case YAML_DOCUMENT_END_EVENT:
            if (!e.data.document_end.implicit)
                rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected %s, found a YAML document end marker (...)",
                              shown, exp);
            break;
        default:
            if (e.type == YAML_SCALAR_EVENT && !e.data.scalar.anchor && !e.data.scalar.tag && !have_val) {
                val = e; /* kept (and freed) below: applied once the whole value is known to be one scalar */
                have_val = true;
                continue;
            }
            rc = gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected %s, found %s", shown, exp,
                          e.type == YAML_SCALAR_EVENT ? (have_val ? "several values" : "an anchor or tag") : event_what(&e));
            break;
        }
        yaml_event_delete(&e);
    }
    if (rc == 0) {
        Scalar v = have_val ? scalar_of(&val) : (Scalar){"", 0, false};
        rc = apply(c, idx, &v, 0, 0);
    }
    if (have_val) yaml_event_delete(&val);
    yaml_parser_delete(&p);
    return rc;
}

/* One --set "key=value": the value is read as a YAML scalar, with the file's type rules. */
static int apply_set(Ctx *c, const char *set) {
    char shown[160];
    const char *eq = strchr(set, '=');
    if (!eq)
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected key=value, found no '='",
                        cfg_show(set, strlen(set), false, shown, sizeof shown));
    if (eq == set)
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected key=value, found no key",
                        cfg_show(set, strlen(set), false, shown, sizeof shown));
    size_t klen = (size_t)(eq - set);
    char key[KEY_MAX + 1];
    if (klen > KEY_MAX) klen = KEY_MAX;
    memcpy(key, set, klen);
    key[klen] = '\0';
    cfg_show(key, strlen(key), false, shown, sizeof shown);
    /* libyaml would read a value starting with \xff\xfe as UTF-16, and the file is UTF-8 checked by
     * libyaml: check the command line here, key and value */
    for (size_t i = 0, n = strlen(set); i < n;) {
        size_t l = cfg_utf8_len((const unsigned char *)set + i, n - i);
        if (!l)
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected UTF-8 text, found the byte \\x%02x in the %s",
                            shown, (unsigned char)set[i], set + i < eq ? "key" : "value");
        i += l;
    }
    int idx = config_schema_index(key);
    if (idx < 0) {
        if (is_section(key)) {
            char keys[256];
            section_keys(key, keys, sizeof keys);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: expected a key with a value (%s.KEY with KEY one of %s), found a section",
                            shown, shown, keys);
        }
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: unknown key (did you mean %s?)", shown, nearest_key(key));
    }
    return set_value(c, idx, shown, eq + 1);
}

/* init against init_from and model: the weights a run would load exist, or random init was asked
 * for (a model directory without weights, an interrupted download, is never trained from random) */
static int check_init(const Ctx *c) {
    const RunConfig *cfg = c->cfg;
    char msg[GT_PATH_MAX + 700], found[512];
    struct stat st;
    const bool dir = stat(cfg->model, &st) == 0 && S_ISDIR(st.st_mode);
    if (cfg->init == INIT_RANDOM && cfg->init_from[0]) {
        snprintf(msg, sizeof msg, "expected no init_from with init: random (random init reads no weights), found "
                 "init_from %.*s", GT_PATH_MAX, cfg->init_from);
        return key_error(c, config_schema_index("init"), msg);
    }
    if (cfg->init == INIT_RANDOM || cfg->init_from[0]) return 0;
    if (dir && !hf_weights_dir_has_weights(cfg->model, found, sizeof found)) {
        snprintf(msg, sizeof msg, "expected a model directory holding its weights (" HF_SINGLE_FILE " or "
                 HF_INDEX_FILE "; init: random trains its architecture from random init), found %s in %.*s", found,
                 GT_PATH_MAX, cfg->model);
        return key_error(c, config_schema_index("model"), msg);
    }
    if (!dir && cfg->init == INIT_PRETRAINED) {
        snprintf(msg, sizeof msg, "expected weights to load (init_from, or model as a model directory holding them), "
                 "found model %.*s, a file, and no init_from", GT_PATH_MAX, cfg->model);
        return key_error(c, config_schema_index("init"), msg);
    }
    return 0;
}

/* A path that cannot serve its key whatever happens later: it runs through an existing file
 * (output_dir: some_file.txt/out), or a directory key names an existing non-directory. Checked at
 * load, so that `gtrain plan` reports it and a run creates nothing first; paths that do not exist
 * are the readers' to report (output_dir is created). */
static int check_path(const Ctx *c, int i, const char *path) {
    const KeySpec *k = &SCHEMA[i];
    char msg[GT_PATH_MAX + 128];
    struct stat st;
    if (keyspec_literal(k, path)) return 0;
    if (stat(path, &st) == 0) {
        if (!k->dir || S_ISDIR(st.st_mode)) return 0;
        snprintf(msg, sizeof msg, "expected a directory, found the %s %s",
                 S_ISREG(st.st_mode) ? "regular file" : "special file", path);
        return key_error(c, i, msg);
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
            return key_error(c, i, msg);
        }
    }
    return 0;
}

/* Rules between keys. */
static int validate(Ctx *c) {
    RunConfig *cfg = c->cfg;
    char msg[256];
    for (int i = 0; i < N_KEYS; i++) /* any lora.* key, in the file or by --set, is a lora: section */
        if (strncmp(SCHEMA[i].key, "lora.", 5) == 0 && cfg->source[i] != CFG_SRC_DEFAULT) cfg->lora.enabled = true;
    for (int i = 0; i < N_KEYS; i++) /* required paths first: they are the first thing to fix */
        if (SCHEMA[i].required && !((const char *)cfg + SCHEMA[i].offset)[0]) {
            snprintf(msg, sizeof msg, "expected %s (required), found nothing", SCHEMA[i].required);
            return key_error(c, i, msg);
        }
    for (int i = 0; i < N_KEYS; i++)
        if (SCHEMA[i].type == KT_PATH && ((const char *)cfg + SCHEMA[i].offset)[0] &&
            check_path(c, i, (const char *)cfg + SCHEMA[i].offset))
            return -1;
    if (check_init(c)) return -1;
    if (cfg->offload && !cfg->gradient_checkpointing) {
        int i = config_schema_index("offload");
        if (c->file_seen[config_schema_index("gradient_checkpointing_kwargs.offload")] &&
            cfg->source[i] == CFG_SRC_FILE && !c->file_seen[i])
            i = config_schema_index("gradient_checkpointing_kwargs.offload");
        return key_error(c, i, "expected gradient_checkpointing: true (offload moves the inputs kept by gradient "
                               "checkpointing to host memory), found gradient_checkpointing: false");
    }
    if (cfg->lora.init_from[0] && lora_pissa_niter_of(cfg->lora.init_lora_weights) != -2) {
        snprintf(msg, sizeof msg, "expected no PiSSA initialisation with lora.init_from (the adapter is the "
                 "initialisation), found %.40s", cfg->lora.init_lora_weights);
        return key_error(c, config_schema_index("lora.init_lora_weights"), msg);
    }
    if (cfg->per_device_train_batch_size == 0 && cfg->train_batch_size == 0)
        return key_error(c, config_schema_index("per_device_train_batch_size"),
                         "expected train_batch_size (the effective batch) to be set with \"auto\", found none");
    /* no validation data: another format without data.val, or text with val_fraction 0 */
    if (!cfg->data.val[0] && (cfg->data.format != DATA_TEXT || cfg->data.val_fraction == 0)) {
        char why[96];
        if (cfg->data.format != DATA_TEXT)
            snprintf(why, sizeof why, "format %s has no built-in validation split", config_data_format_name(cfg->data.format));
        else
            snprintf(why, sizeof why, "data.val_fraction 0 is no validation split");
        if (cfg->eval_steps > 0) {
            snprintf(msg, sizeof msg, "expected data.val to be set (%s), found eval_steps %ld without data.val", why,
                     cfg->eval_steps);
            return key_error(c, config_schema_index("eval_steps"), msg);
        }
        int ie = config_schema_index("per_device_eval_batch_size");
        if (cfg->source[ie] != CFG_SRC_DEFAULT) {
            snprintf(msg, sizeof msg, "expected data.val to be set (%s), found an eval batch size without data.val", why);
            return key_error(c, ie, msg);
        }
    }
    /* the floor of cosine_with_min_lr reaches AdamW as a float, like learning_rate itself */
    const double floor_lr = cfg->learning_rate * cfg->min_lr_rate;
    if (cfg->lr_scheduler_type == LR_COSINE_MIN_LR && floor_lr > 0 && floor_lr < FLT_MIN) {
        char a[32], b[32];
        cfg_fmt_double(cfg->learning_rate, a, sizeof a);
        cfg_fmt_double(cfg->min_lr_rate, b, sizeof b);
        snprintf(msg, sizeof msg, "expected learning_rate x min_lr_rate to be 0 or a normal 32-bit float (>= %g), found %s x %s = %g",
                 (double)FLT_MIN, a, b, floor_lr);
        return key_error(c, config_schema_index("lr_scheduler_kwargs.min_lr_rate"), msg);
    }
    return 0;
}

int config_load(RunConfig *cfg, const char *path, const char *const *sets, int n_sets, GtError *err) {
    config_defaults(cfg);
    Ctx *c = gt_xcalloc(1, sizeof *c);
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
        if (read_config_file(path, &buf, &len, err)) {
            free(c);
            return -1;
        }
        c->buf = buf;
        c->len = len;
        rc = prescan(c);
        if (rc == 0) {
            if (!yaml_parser_initialize(&c->parser)) {
                rc = gt_error(err, GT_EXIT_FAILURE, "%s: out of memory", path);
            } else {
                yaml_parser_set_input_string(&c->parser, (const unsigned char *)buf, len);
                rc = parse_document(c);
                yaml_parser_delete(&c->parser);
            }
        }
    }
    for (int i = 0; rc == 0 && i < n_sets; i++) rc = apply_set(c, sets[i]);
    if (rc == 0) rc = validate(c);
    free(buf);
    free(c);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* checks against the model */

int config_key_error(const RunConfig *cfg, const char *key, GtError *err, const char *msg) {
    int i = config_schema_index(key);
    const char *file = cfg->config_path[0] ? cfg->config_path : "config";
    if (cfg->source[i] == CFG_SRC_FILE)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d: %s: %s", file, cfg->source_line[i], key, msg);
    if (cfg->source[i] == CFG_SRC_SET) return gt_error(err, GT_EXIT_BAD_INPUT, "--set %s: %s", key, msg);
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: %s (the default)", file, key, msg);
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
        if ((k->type == KT_PATH || k->type == KT_STRING) && !val[0]) snprintf(val, sizeof val, "\"\"");
        if (k->type == KT_STRING && strpbrk(val, "\n\t\r\"\\")) { /* a template: one line, as YAML would quote it */
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
