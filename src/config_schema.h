/* config_schema.h - private to config.c, config_value.c and config_write.c: a key's entry in the schema table
 * (KeySpec), a YAML scalar, and what config_value.c does with one value by its entry: parse it
 * (strict YAML core schema, bounds, the precision it is used in), print it, describe its bounds. */
#ifndef GT_CONFIG_SCHEMA_H
#define GT_CONFIG_SCHEMA_H

#include <string.h>

#include "config.h"

typedef enum { KT_INT, KT_INT_AUTO, KT_FLOAT, KT_BOOL, KT_STRING, KT_PATH, KT_ENUM, KT_BYTES } KeyType;

typedef struct {
    const char *key; /* dotted for nested keys */
    KeyType type;
    size_t offset, size; /* where in RunConfig */
    const char *def;     /* default, as YAML text (plain scalar) */
    long long imin, imax;                /* KT_INT, KT_INT_AUTO, KT_BYTES */
    double fmin, fmax;                   /* KT_FLOAT */
    bool fmin_open, fmax_open;           /* KT_FLOAT: exclusive bounds */
    const char *const *names;            /* KT_ENUM, NULL-terminated */
    const char *literal;                 /* KT_PATH: values kept as written, '|'-separated ("auto|latest") */
    const char *alias_of;                /* another spelling of this key (same field) */
    bool f32;              /* KT_FLOAT: used as a 32-bit float downstream (the optimizer computes in
                            * float): the bounds must also hold after rounding to float, and a value
                            * other than 0 must stay a normal float (no underflow to 0 or a denormal) */
    bool list;             /* KT_STRING: a YAML list of plain names is also accepted, joined by commas */
    bool strings;          /* KT_STRING: a YAML list of strings, each kept exactly (commas, newlines), joined by
                            * CONFIG_LIST_SEP; a scalar is one string */
    bool dir;              /* KT_PATH: names a directory; if the path exists it must be one */
    const char *required;  /* KT_PATH: what must be given ("a path to the model JSON"); NULL: optional */
    /* KT_STRING: checks the value (0 or -1 with "expected ..., found ..." in why) */
    int (*check)(const char *value, char *why, size_t cap);
    const char *doc;
} KeySpec;

/* Is s one of k's literal values (KT_PATH: "latest", "none")? */
static inline bool keyspec_literal(const KeySpec *k, const char *s) {
    size_t n = strlen(s);
    for (const char *p = k->literal; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (n && len == n && strncmp(p, s, n) == 0) return true;
        p = bar ? bar + 1 : p + len;
    }
    return false;
}

typedef struct {
    const char *s; /* NUL-terminated */
    size_t n;
    bool quoted; /* quoted or block scalar: always a string */
} Scalar;

/* The schema table (config_table.c) and its length. */
extern const KeySpec CONFIG_SCHEMA[];
extern const int CONFIG_N_KEYS;

/* "int", "float32", ... as --help-config shows a key's type */
const char *cfg_type_name(const KeySpec *k);
/* the name of enum value v, "?" if out of range */
const char *cfg_enum_name(const char *const *names, int v);
/* length of the valid UTF-8 sequence at s (n bytes left), 0 if there is none */
size_t cfg_utf8_len(const unsigned char *s, size_t n);
/* a value as it appears in a message: printable, one line, valid UTF-8, at most ~60 bytes */
const char *cfg_show(const char *s, size_t n, bool quote, char *out, size_t cap);
/* shortest text that reads back as the same double */
void cfg_fmt_double(double v, char *buf, size_t cap);
/* "[1, 1048576]", "(0, 1]", "fp32, bf16", ... */
void cfg_bounds_text(const KeySpec *k, char *buf, size_t cap);
/* "an integer in [1, 1048576]", ... */
void cfg_expected_text(const KeySpec *k, char *buf, size_t cap);
/* the value of key k in cfg as text (strings raw) */
void cfg_value_text(const KeySpec *k, const RunConfig *cfg, char *buf, size_t cap);
/* null, ~, empty (unquoted) */
bool cfg_is_null(const Scalar *v);
/* Parse v for key k into dst (k->size bytes; for strings GT_PATH_MAX). Paths are resolved
 * against base_dir (NULL: kept as written). On failure -1 and "expected ..., found ..." in why. */
int cfg_parse_value(const KeySpec *k, const Scalar *v, const char *base_dir, void *dst, char *why, size_t cap);
/* do a and b (values of key k) hold the same value? */
bool cfg_same_value(const KeySpec *k, const void *a, const void *b);

#endif
