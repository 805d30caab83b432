/* config_value.c - one value of the run config, by its key's entry in the schema table: parsed
 * from a YAML scalar (the core schema, strictly: no yes/no booleans, no quoted numbers; bounds;
 * the 32-bit float a float32 key becomes; byte counts with units), printed, and its bounds and
 * expected form described for messages and --help-config. The table itself is in config.c. */
#include "config_schema.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const TYPE_NAMES[] = {"int", "int or auto", "float", "bool", "string", "path", "enum", "bytes"};

const char *cfg_type_name(const KeySpec *k) { return k->f32 ? "float32" : TYPE_NAMES[k->type]; }

const char *cfg_enum_name(const char *const *names, int v) {
    for (int i = 0; names[i]; i++)
        if (i == v) return names[i];
    return "?";
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if there is none there: overlong
 * forms, surrogates and code points above U+10FFFF are invalid. */
size_t cfg_utf8_len(const unsigned char *s, size_t n) {
    long k = gt_utf8_sequence(s, n);
    return k > 0 ? (size_t)k : 0;
}

/* A value as it appears in a message: printable, one line, valid UTF-8, at most ~60 bytes. */
const char *cfg_show(const char *s, size_t n, bool quote, char *out, size_t cap) {
    size_t o = 0;
    const size_t limit = 60;
    if (quote && o + 1 < cap) out[o++] = '"';
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        if (i >= limit) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        size_t u = ch >= 0x80 ? cfg_utf8_len((const unsigned char *)s + i, n - i) : 1;
        if (ch < 0x20 || ch == 0x7f || u == 0) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
        } else if (u > 1) {
            memcpy(out + o, s + i, u);
            o += u;
            i += u - 1;
        } else if (quote && (ch == '"' || ch == '\\')) {
            out[o++] = '\\';
            out[o++] = (char)ch;
        } else {
            out[o++] = (char)ch;
        }
    }
    if (quote && o + 1 < cap) out[o++] = '"';
    out[o < cap ? o : cap - 1] = '\0';
    return out;
}

static long long get_int(const void *p, size_t size) {
    if (size == 4) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void put_int(void *p, size_t size, long long v) {
    if (size == 4) {
        int32_t x = (int32_t)v;
        memcpy(p, &x, 4);
    } else {
        int64_t x = (int64_t)v;
        memcpy(p, &x, 8);
    }
}

/* Shortest text that reads back as the same double. */
void cfg_fmt_double(double v, char *buf, size_t cap) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) {
            /* 10 rather than 1e+01: enough digits for the integer part of moderate numbers */
            if (isfinite(v) && fabs(v) >= 1 && fabs(v) < 1e15) {
                int digits = (int)floor(log10(fabs(v))) + 1;
                if (digits > prec) snprintf(buf, cap, "%.*g", digits, v);
            }
            return;
        }
    }
}

/* "[1, 1048576]", "(0, 1]", "one of a, b, c", ... */
void cfg_bounds_text(const KeySpec *k, char *buf, size_t cap) {
    buf[0] = '\0';
    switch (k->type) {
    case KT_INT:
    case KT_INT_AUTO:
    case KT_BYTES:
        snprintf(buf, cap, "[%lld, %lld]", k->imin, k->imax);
        break;
    case KT_FLOAT: {
        char a[32], b[32];
        cfg_fmt_double(k->fmin, a, sizeof a);
        cfg_fmt_double(k->fmax, b, sizeof b);
        snprintf(buf, cap, "%c%s, %s%c", k->fmin_open ? '(' : '[', a, b, k->fmax_open ? ')' : ']');
        break;
    }
    case KT_ENUM: {
        size_t o = 0;
        for (int i = 0; k->names[i] && o < cap; i++)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", k->names[i]);
        break;
    }
    case KT_BOOL:
        snprintf(buf, cap, "true, false");
        break;
    default:
        break;
    }
}

/* "an integer in [1, 1048576]" etc. */
void cfg_expected_text(const KeySpec *k, char *buf, size_t cap) {
    char b[160];
    cfg_bounds_text(k, b, sizeof b);
    switch (k->type) {
    case KT_INT: snprintf(buf, cap, "an integer in %s", b); break;
    case KT_INT_AUTO: snprintf(buf, cap, "an integer in %s or \"auto\"", b); break;
    case KT_FLOAT: snprintf(buf, cap, "a finite number in %s%s", b, k->f32 ? " as a 32-bit float" : ""); break;
    case KT_BOOL: snprintf(buf, cap, "true or false"); break;
    case KT_STRING: snprintf(buf, cap, "a string"); break;
    case KT_PATH: snprintf(buf, cap, "a path"); break;
    case KT_ENUM: snprintf(buf, cap, "one of %s", b); break;
    case KT_BYTES:
        snprintf(buf, cap, "a byte count (an integer, or e.g. \"24GiB\", \"512MiB\", \"1.5GB\") or \"auto\"");
        break;
    }
}

/* The value of key i in cfg as text (strings raw). */
void cfg_value_text(const KeySpec *k, const RunConfig *cfg, char *buf, size_t cap) {
    const char *p = (const char *)cfg + k->offset;
    switch (k->type) {
    case KT_INT: snprintf(buf, cap, "%lld", get_int(p, k->size)); break;
    case KT_INT_AUTO: {
        long long v = get_int(p, k->size);
        if (v == 0)
            snprintf(buf, cap, "auto");
        else
            snprintf(buf, cap, "%lld", v);
        break;
    }
    case KT_FLOAT: {
        double v;
        memcpy(&v, p, sizeof v);
        cfg_fmt_double(v, buf, cap);
        break;
    }
    case KT_BOOL: {
        bool v;
        memcpy(&v, p, sizeof v);
        snprintf(buf, cap, "%s", v ? "true" : "false");
        break;
    }
    case KT_STRING:
    case KT_PATH: snprintf(buf, cap, "%s", p); break;
    case KT_ENUM: snprintf(buf, cap, "%s", cfg_enum_name(k->names, (int)get_int(p, k->size))); break;
    case KT_BYTES: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        if (v == 0)
            snprintf(buf, cap, "auto");
        else
            snprintf(buf, cap, "%llu", (unsigned long long)v);
        break;
    }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* scalars: the YAML core schema, strictly */

bool cfg_is_null(const Scalar *v) {
    return !v->quoted && (v->n == 0 || strcmp(v->s, "~") == 0 || strcmp(v->s, "null") == 0 ||
                          strcmp(v->s, "Null") == 0 || strcmp(v->s, "NULL") == 0);
}

static bool match_int(const char *s) {
    if (*s == '+' || *s == '-') s++;
    if (!isdigit((unsigned char)*s)) return false;
    while (isdigit((unsigned char)*s)) s++;
    return *s == '\0';
}

/* decimal float: [-+]?( .d+ | d+(.d*)? )([eE][-+]?d+)? */
static const char *scan_float(const char *s) {
    if (*s == '+' || *s == '-') s++;
    bool digits = false;
    while (isdigit((unsigned char)*s)) s++, digits = true;
    if (*s == '.') {
        s++;
        while (isdigit((unsigned char)*s)) s++, digits = true;
    }
    if (!digits) return NULL;
    if (*s == 'e' || *s == 'E') {
        const char *e = s + 1;
        if (*e == '+' || *e == '-') e++;
        if (!isdigit((unsigned char)*e)) return NULL;
        while (isdigit((unsigned char)*e)) e++;
        s = e;
    }
    return s;
}

static bool match_float(const char *s) {
    const char *e = scan_float(s);
    return e && *e == '\0';
}

static bool is_special_float(const char *s) {
    if (*s == '+' || *s == '-') s++;
    static const char *const sp[] = {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN", NULL};
    for (int i = 0; sp[i]; i++)
        if (strcmp(s, sp[i]) == 0) return true;
    return false;
}

/* Parse a byte count with an optional unit; false with a reason on failure. */
static bool parse_bytes(const char *s, uint64_t *out, const char **why) {
    const char *e = scan_float(s);
    if (!e || *s == '-' || *s == '+') {
        *why = e && *s == '-' ? "negative" : NULL;
        return false;
    }
    char num[64];
    size_t nl = (size_t)(e - s);
    if (nl >= sizeof num) {
        *why = "too large";
        return false;
    }
    memcpy(num, s, nl);
    num[nl] = '\0';
    while (*e == ' ') e++;
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},         {"b", 1},          {"kb", 1e3},         {"mb", 1e6},
                 {"gb", 1e9},     {"tb", 1e12},      {"kib", 1024.0},     {"mib", 1048576.0},
                 {"gib", 1073741824.0}, {"tib", 1099511627776.0}, {NULL, 0}};
    double mult = 0;
    for (int i = 0; units[i].unit; i++)
        if (strcasecmp(e, units[i].unit) == 0) mult = units[i].mult;
    if (mult == 0) {
        *why = NULL;
        return false;
    }
    if (mult == 1 && match_int(num)) {
        errno = 0;
        unsigned long long v = strtoull(num, NULL, 10);
        if (errno == ERANGE) {
            *why = "too large";
            return false;
        }
        *out = v;
        return true;
    }
    double v = strtod(num, NULL) * mult;
    if (!isfinite(v) || v >= 18446744073709551616.0) {
        *why = "too large";
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

/* A value of a float key used as a 32-bit float (k->f32) that rounding to float would change in
 * meaning: out of range, 0 or a denormal (adam_epsilon 1e-50), or onto an open bound (adam_beta2
 * 0.99999999 is 1.0f). Writes " (... as a 32-bit float)" into note. */
static bool float_changes(const KeySpec *k, double x, char *note, size_t cap) {
    if (!(fabs(x) <= FLT_MAX)) { /* converting it would be undefined */
        snprintf(note, cap, " (out of range as a 32-bit float)");
        return true;
    }
    const float xf = (float)x;
    const double back = (double)xf;
    if (x != 0 && !(fabsf(xf) >= FLT_MIN)) {
        snprintf(note, cap, " (%s as a 32-bit float)", xf == 0 ? "0" : "a denormal");
        return true;
    }
    if (back < k->fmin || back > k->fmax || (k->fmin_open && back == k->fmin) || (k->fmax_open && back == k->fmax)) {
        char t[32];
        cfg_fmt_double(back, t, sizeof t);
        snprintf(note, cap, " (%s as a 32-bit float)", t);
        return true;
    }
    return false;
}

/* Parse v for key k into dst (k->size bytes; for strings GT_PATH_MAX). Paths are resolved
 * against base_dir (NULL: kept as written). On failure: "expected ..., found ..." in why. */
int cfg_parse_value(const KeySpec *k, const Scalar *v, const char *base_dir, void *dst, char *why,
                       size_t cap) {
    char exp[256], found[128], f32note[64];
    cfg_expected_text(k, exp, sizeof exp);
    if (cfg_is_null(v))
        snprintf(found, sizeof found, "nothing (null)");
    else
        cfg_show(v->s, v->n, v->quoted, found, sizeof found);
    const char *note = "";

    switch (k->type) {
    case KT_INT:
    case KT_INT_AUTO: {
        if (k->type == KT_INT_AUTO && strcmp(v->s, "auto") == 0) {
            put_int(dst, k->size, 0);
            return 0;
        }
        if (v->quoted || !match_int(v->s)) {
            if (v->quoted) note = " (a quoted string)";
            goto bad;
        }
        errno = 0;
        long long x = strtoll(v->s, NULL, 10);
        if (errno == ERANGE) {
            note = " (out of range)";
            goto bad;
        }
        if (x < k->imin || x > k->imax) goto bad;
        put_int(dst, k->size, x);
        return 0;
    }
    case KT_FLOAT: {
        if (v->quoted || !(match_float(v->s) || is_special_float(v->s))) {
            if (v->quoted) note = " (a quoted string)";
            goto bad;
        }
        if (is_special_float(v->s)) goto bad;
        double x = strtod(v->s, NULL);
        if (!isfinite(x)) {
            note = " (too large)";
            goto bad;
        }
        if (x < k->fmin || x > k->fmax || (k->fmin_open && x == k->fmin) || (k->fmax_open && x == k->fmax))
            goto bad;
        if (k->f32 && float_changes(k, x, f32note, sizeof f32note)) {
            note = f32note;
            goto bad;
        }
        memcpy(dst, &x, sizeof x);
        return 0;
    }
    case KT_BOOL: {
        bool x;
        if (v->quoted) {
            note = " (a quoted string)";
            goto bad;
        }
        if (!strcmp(v->s, "true") || !strcmp(v->s, "True") || !strcmp(v->s, "TRUE"))
            x = true;
        else if (!strcmp(v->s, "false") || !strcmp(v->s, "False") || !strcmp(v->s, "FALSE"))
            x = false;
        else
            goto bad;
        memcpy(dst, &x, sizeof x);
        return 0;
    }
    case KT_STRING:
    case KT_PATH: {
        const char *s = cfg_is_null(v) ? "" : v->s;
        size_t n = cfg_is_null(v) ? 0 : v->n;
        if (memchr(s, '\0', n)) {
            note = " (contains a NUL byte)";
            goto bad;
        }
        char *out = dst;
        memset(out, 0, GT_PATH_MAX);
        bool keep = k->type != KT_PATH || n == 0 || s[0] == '/' || !base_dir || !base_dir[0] ||
                    strcmp(base_dir, ".") == 0 || keyspec_literal(k, s);
        int w = keep ? snprintf(out, GT_PATH_MAX, "%s", s) : snprintf(out, GT_PATH_MAX, "%s/%s", base_dir, s);
        /* absolute and clean, so that every message, the run's identity and resolved_config.yaml
         * name it one way (literals such as "none" and "latest" stay as written) */
        if (w >= 0 && w < GT_PATH_MAX && k->type == KT_PATH && n > 0 && !keyspec_literal(k, s) &&
            config_clean_path(out, GT_PATH_MAX) != 0)
            w = GT_PATH_MAX;
        if (w < 0 || w >= GT_PATH_MAX) {
            snprintf(exp, sizeof exp, "a path shorter than %d bytes", GT_PATH_MAX);
            note = " (too long)";
            memset(out, 0, GT_PATH_MAX);
            goto bad;
        }
        if (k->check && k->check(out, why, cap) != 0) {
            memset(out, 0, GT_PATH_MAX);
            return -1;
        }
        return 0;
    }
    case KT_ENUM: {
        if (!cfg_is_null(v))
            for (int i = 0; k->names[i]; i++)
                if (strcmp(v->s, k->names[i]) == 0) {
                    put_int(dst, k->size, i);
                    return 0;
                }
        goto bad;
    }
    case KT_BYTES: {
        uint64_t x = 0;
        const char *reason = NULL;
        if (strcmp(v->s, "auto") == 0) {
            memcpy(dst, &x, sizeof x);
            return 0;
        }
        if (cfg_is_null(v) || !parse_bytes(v->s, &x, &reason)) {
            if (reason) note = strcmp(reason, "negative") == 0 ? " (negative)" : " (too large)";
            goto bad;
        }
        if (x > (uint64_t)k->imax) {
            note = " (too large)";
            goto bad;
        }
        if (x < (uint64_t)k->imin) { /* "0", "0.5B": not a limit, and 0 would silently mean auto */
            note = x == 0 ? " (less than one byte)" : " (too small)";
            goto bad;
        }
        memcpy(dst, &x, sizeof x);
        return 0;
    }
    }
bad:
    snprintf(why, cap, "expected %s, found %s%s", exp, found, note);
    return -1;
}

bool cfg_same_value(const KeySpec *k, const void *a, const void *b) {
    if (k->type == KT_STRING || k->type == KT_PATH) return strcmp(a, b) == 0;
    return memcmp(a, b, k->size) == 0;
}
