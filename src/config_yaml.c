/* config_yaml.c - the run config's reader: YAML text (libyaml's event API) and --set values ->
 * RunConfig fields, key by key through the schema table; unknown keys get their nearest known one.
 * config.c drives it (config_load) and checks the rules between keys. */
#include "config_parse.h"

#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (1u << 20) /* a run config is a few hundred bytes; refuse > 1 MiB */
#define CONFIG_MAX_DEPTH 4          /* sections are one level deep; anything deeper is refused */
#define KEY_MAX 256

#define SCHEMA CONFIG_SCHEMA
#define N_KEYS CONFIG_N_KEYS

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


/* "run.yaml:3:5", "--set" or "run.yaml" for where key i got its value. */
static const char *where(const CfgCtx *c, int i, char *buf, size_t cap) {
    const RunConfig *cfg = c->cfg;
    if (cfg->source[i] == CFG_SRC_FILE)
        snprintf(buf, cap, "%s:%d:%d", c->file, c->line[i], c->col[i]);
    else
        snprintf(buf, cap, "%s", c->file[0] ? c->file : "config");
    return buf;
}

/* "run.yaml:3:5: key: msg" or "--set key: msg" */
int cfg_key_error(const CfgCtx *c, int i, const char *msg) {
    char w[GT_PATH_MAX + 32];
    if (c->cfg->source[i] == CFG_SRC_SET)
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "--set %s: %s", SCHEMA[i].key, msg);
    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: %s: %s", where(c, i, w, sizeof w), SCHEMA[i].key, msg);
}

static void mark_source(CfgCtx *c, int i, ConfigSource src, int line, int col) {
    /* every spelling of the same field shares its source */
    for (int j = 0; j < N_KEYS; j++)
        if (SCHEMA[j].offset == SCHEMA[i].offset) {
            c->cfg->source[j] = src;
            c->cfg->source_line[j] = line;
            c->cfg->source_col[j] = col;
            c->line[j] = line;
            c->col[j] = col;
        }
}

/* Set key i from a scalar. line > 0: from the file at line:col; else from --set. */
static int apply(CfgCtx *c, int i, const Scalar *v, int line, int col) {
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
                memcpy((char *)c->cfg + k->offset, val, k->size);
                cfg_value_text(k, c->cfg, now, sizeof now);
                return gt_error(c->err, GT_EXIT_BAD_INPUT,
                                "%s %s: expected the same value as %s (line %d), found %s against %s", w, k->key,
                                SCHEMA[j].key, c->line[j], cfg_show(now, strlen(now), false, b, sizeof b),
                                cfg_show(old, strlen(old), false, a, sizeof a));
            }
        }
        c->file_seen[i] = true;
    }
    /* the field's own size: a column name's field is shorter than GT_PATH_MAX (its check bounds the
     * value), and copying more would overwrite the keys after it */
    memcpy(dst, val, k->size);
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

static int yaml_syntax_error(CfgCtx *c, const yaml_parser_t *p, const char *file) {
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
static int next_event(CfgCtx *c, yaml_event_t *e) {
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
static int read_list(CfgCtx *c, int idx, const char *shown, int vl, int vc) {
    char joined[GT_PATH_MAX];
    size_t o = 0;
    int n_items = 0;
    joined[0] = '\0';
    for (;;) {
        yaml_event_t ie;
        if (next_event(c, &ie)) return -1;
        if (ie.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ie);
            break;
        }
        Scalar v = ie.type == YAML_SCALAR_EVENT ? scalar_of(&ie) : (Scalar){"", 0, true};
        const bool strings = SCHEMA[idx].strings; /* exact strings: commas and newlines kept, none empty */
        bool ok = ie.type == YAML_SCALAR_EVENT && v.n > 0 && (strings || !memchr(v.s, ',', v.n)) &&
                  !memchr(v.s, '\0', v.n) && !memchr(v.s, CONFIG_LIST_SEP, v.n) && o + v.n + 2 < sizeof joined;
        if (!ok) {
            char found[128];
            if (ie.type == YAML_SCALAR_EVENT)
                cfg_show(v.s, v.n, v.quoted, found, sizeof found);
            else
                snprintf(found, sizeof found, "%s", event_what(&ie));
            int il = (int)ie.start_mark.line + 1, ic = (int)ie.start_mark.column + 1;
            yaml_event_delete(&ie);
            return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected a list of %s, found %s in it", c->file,
                            il, ic, shown, strings ? "non-empty strings (no NUL or \\x1f byte)" : "names", found);
        }
        if (strings) { /* joined by the separator; the first item's may be empty, so count by items */
            if (n_items++) joined[o++] = CONFIG_LIST_SEP;
            memcpy(joined + o, v.s, v.n);
            joined[o += v.n] = '\0';
        } else {
            o += (size_t)snprintf(joined + o, sizeof joined - o, "%s%.*s", o ? "," : "", (int)v.n, v.s);
        }
        yaml_event_delete(&ie);
    }
    if (o == 0 && SCHEMA[idx].strings) { /* [] : no strings, the default's value */
        Scalar none = {"", 0, true};
        return apply(c, idx, &none, vl, vc);
    }
    if (o == 0) /* not the default: PEFT's target_modules=[] adapts nothing */
        return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: expected a non-empty list of names (or no value for "
                        "the default), found an empty list", c->file, vl, vc, shown);
    Scalar v = {joined, o, true};
    return apply(c, idx, &v, vl, vc);
}

/* After MAPPING_START: read key/value pairs into cfg. prefix: "" or the section name. */
static int parse_mapping(CfgCtx *c, const char *prefix, int depth) {
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
            if (ve.type == YAML_SEQUENCE_START_EVENT && (SCHEMA[idx].list || SCHEMA[idx].strings)) {
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

int cfg_parse_document(CfgCtx *c) {
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

int cfg_read_file(const char *path, char **out, size_t *out_len, GtError *err) {
    return gt_read_small_file(path, "run config", CONFIG_MAX_BYTES, out, out_len, err);
}

/* NUL bytes (binary files) and tabs (YAML forbids them in indentation; we refuse them anywhere so
 * that a config never means something other than it looks). */
int cfg_prescan(const CfgCtx *c) {
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
static int set_value(CfgCtx *c, int idx, const char *shown, const char *value) {
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
int cfg_apply_set(CfgCtx *c, const char *set) {
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

