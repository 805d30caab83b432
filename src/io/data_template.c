/* data_template.c - SFT prompt/completion templates for jsonl data: literal text with {field}
 * references filled from a line's string members, as Python's str.format with named fields
 * ({{ and }} are literal braces). */
#include <stdlib.h>

#include "data_internal.h"

/* Walk tmpl: literal runs and fields, calling lit/fld; stops at the first syntax error
 * (returns its offset) or returns -1 when the template is well formed. */
typedef int (*LitFn)(void *ctx, const char *s, size_t n);
typedef int (*FieldFn)(void *ctx, const char *name, size_t n);

#define FIELD_NAME_MAX 255 /* bytes: longer names are refused when the config is read */

static long walk(const char *t, LitFn lit, FieldFn fld, void *ctx, int *cb_rc, const char **why) {
    size_t i = 0, n = strlen(t);
    *cb_rc = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && t[j] != '{' && t[j] != '}') j++;
        if (j > i && lit && (*cb_rc = lit(ctx, t + i, j - i)) != 0) return -1;
        if (j == n) break;
        if (t[j] == '}') {
            if (j + 1 < n && t[j + 1] == '}') {
                if (lit && (*cb_rc = lit(ctx, "}", 1)) != 0) return -1;
                i = j + 2;
                continue;
            }
            *why = "a single '}' (write }} for a literal brace)";
            return (long)j;
        }
        if (j + 1 < n && t[j + 1] == '{') {
            if (lit && (*cb_rc = lit(ctx, "{", 1)) != 0) return -1;
            i = j + 2;
            continue;
        }
        size_t k = j + 1;
        while (k < n && t[k] != '}' && t[k] != '{') k++;
        if (k == n || t[k] == '{') {
            *why = "a '{' without its '}' (write {{ for a literal brace)";
            return (long)j;
        }
        if (k == j + 1) {
            *why = "an empty field {} (name the JSON member, e.g. {query})";
            return (long)j;
        }
        if (k - j - 1 > FIELD_NAME_MAX) {
            *why = "a field name longer than 255 bytes";
            return (long)j;
        }
        if (fld && (*cb_rc = fld(ctx, t + j + 1, k - j - 1)) != 0) return -1;
        i = k + 1;
    }
    return -1;
}

int data_template_why(const char *tmpl, char *why, size_t cap) {
    int rc;
    const char *what = "";
    long at = walk(tmpl, NULL, NULL, NULL, &rc, &what);
    if (at < 0) return 0;
    snprintf(why, cap, "expected text with {field} references, found %s at offset %ld", what, at);
    return -1;
}

typedef struct {
    DataFieldLookup lookup;
    void *ctx;
    GtBytes *out;
    GtError *err;
} Fill;

static int fill_lit(void *ctx, const char *s, size_t n) {
    gt_bytes_put(((Fill *)ctx)->out, s, n);
    return 0;
}

static int fill_field(void *ctx, const char *name, size_t n) {
    Fill *f = ctx;
    char field[FIELD_NAME_MAX + 1]; /* walk refused longer names */
    memcpy(field, name, n);
    field[n] = 0;
    const char *val;
    size_t len;
    if (f->lookup(f->ctx, field, &val, &len, f->err) != 0) return -1;
    gt_bytes_put(f->out, val, len);
    return 0;
}

int data_template_fill(const char *tmpl, DataFieldLookup lookup, void *ctx, GtBytes *out, GtError *err) {
    Fill f = {.lookup = lookup, .ctx = ctx, .out = out, .err = err};
    out->n = 0;
    int rc;
    const char *why = "";
    long at = walk(tmpl, fill_lit, fill_field, &f, &rc, &why);
    if (rc != 0) return -1;
    if (at >= 0) return gt_error(err, GT_EXIT_BAD_INPUT, "template: offset %ld: %s", at, why);
    return 0;
}
