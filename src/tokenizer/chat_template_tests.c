/* chat_template_tests.c - the tests a chat template applies with `is` (defined, none, string, eq, ...)
 * and the global functions it calls (raise_exception, strftime_now with the render options' date,
 * namespace, dict, range), as Jinja and transformers define them. */
#include <stdlib.h>
#include <time.h>

#include "chat_template_internal.h"

static CtVal int_v(int64_t i) { return (CtVal){.k = V_INT, .u.i = i}; }
static CtVal list_v(CtList *l) { return (CtVal){.k = V_LIST, .u.l = l}; }

int ct_test(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, size_t nargs, bool *out) {
    const char *t = n->name;
    bool bad = false;
    if (!strcmp(t, "defined")) *out = v.k != V_UNDEF;
    else if (!strcmp(t, "undefined")) *out = v.k == V_UNDEF;
    else if (!strcmp(t, "none")) *out = v.k == V_NONE;
    else if (!strcmp(t, "string")) *out = v.k == V_STR;
    else if (!strcmp(t, "number")) *out = v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL;
    else if (!strcmp(t, "integer")) *out = v.k == V_INT;
    else if (!strcmp(t, "float")) *out = v.k == V_FLOAT;
    else if (!strcmp(t, "boolean")) *out = v.k == V_BOOL;
    else if (!strcmp(t, "true")) *out = v.k == V_BOOL && v.u.b;
    else if (!strcmp(t, "false")) *out = v.k == V_BOOL && !v.u.b;
    else if (!strcmp(t, "mapping")) *out = v.k == V_DICT;
    else if (!strcmp(t, "iterable")) *out = v.k == V_STR || v.k == V_LIST || v.k == V_DICT;
    else if (!strcmp(t, "sequence")) *out = v.k == V_STR || v.k == V_LIST || v.k == V_DICT;
    else if (!strcmp(t, "callable")) *out = v.k == V_MACRO || v.k == V_FUNC;
    else if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        bool cased = false, ok = v.k == V_STR;
        for (size_t i = 0; ok && i < v.u.s.n; i++) {
            char c = v.u.s.p[i];
            if ((unsigned char)c >= 0x80) return ct_rerr(r, n, "the %s test on non-ASCII text is outside the supported subset", t);
            if (c >= 'a' && c <= 'z') {
                cased = true;
                if (t[0] == 'u') ok = false;
            }
            if (c >= 'A' && c <= 'Z') {
                cased = true;
                if (t[0] == 'l') ok = false;
            }
        }
        *out = ok && cased;
    } else if (!strcmp(t, "odd") || !strcmp(t, "even")) {
        if (v.k != V_INT) return ct_rerr(r, n, "the %s test needs an integer, found %s", t, ct_kind_name(v));
        *out = (v.u.i % 2 != 0) == (t[0] == 'o');
    } else {
        if (nargs < 1) return ct_rerr(r, n, "the %s test needs an argument", t);
        CtVal a = args[0];
        if (!strcmp(t, "eq") || !strcmp(t, "equalto")) *out = ct_equal(v, a);
        else if (!strcmp(t, "ne")) *out = !ct_equal(v, a);
        else if (!strcmp(t, "divisibleby")) {
            if (v.k != V_INT || a.k != V_INT || a.u.i == 0) return ct_rerr(r, n, "divisibleby needs non-zero integers");
            *out = a.u.i == -1 || v.u.i % a.u.i == 0;
        } else if (!strcmp(t, "in")) {
            if (a.k == V_STR && v.k == V_STR) {
                *out = false;
                for (size_t i = 0; i + v.u.s.n <= a.u.s.n && !*out; i++) *out = !memcmp(a.u.s.p + i, v.u.s.p, v.u.s.n);
            } else if (a.k == V_LIST) {
                *out = false;
                for (size_t i = 0; i < a.u.l->n && !*out; i++) *out = ct_equal(v, a.u.l->v[i]);
            } else if (a.k == V_DICT) {
                CtVal x;
                *out = v.k == V_STR && ct_dict_get(a.u.d, v.u.s.p, v.u.s.n, &x);
            } else return ct_rerr(r, n, "the in test needs a container");
        } else {
            int c = ct_compare(v, a, &bad);
            if (bad) return ct_rerr(r, n, "cannot order %s and %s", ct_kind_name(v), ct_kind_name(a));
            if (!strcmp(t, "lt")) *out = c < 0;
            else if (!strcmp(t, "gt")) *out = c > 0;
            else if (!strcmp(t, "le")) *out = c <= 0;
            else if (!strcmp(t, "ge")) *out = c >= 0;
            else return ct_rerr(r, n, "the test '%s' is outside the supported subset", t);
        }
    }
    return 0;
}

static int strftime_now(CtRender *r, const CtNode *n, CtVal fmt, CtVal *out) {
    if (fmt.k != V_STR) return ct_rerr(r, n, "strftime_now needs a format string");
    const char *date = r->o && r->o->date_string ? r->o->date_string : "1 Jan 2026";
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(date, "%d %b %Y", &tm);
    if (!end || *end) return ct_rerr(r, n, "strftime_now: the date \"%s\" is not like \"26 Jul 2024\"", date);
    tm.tm_hour = 12;
    time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    char f[256], buf[512];
    if (fmt.u.s.n >= sizeof f || memchr(fmt.u.s.p, 0, fmt.u.s.n)) return ct_rerr(r, n, "strftime_now: format too long");
    memcpy(f, fmt.u.s.p, fmt.u.s.n);
    f[fmt.u.s.n] = 0;
    size_t k = fmt.u.s.n ? strftime(buf, sizeof buf, f, &tm) : 0;
    if (fmt.u.s.n && !k) return ct_rerr(r, n, "strftime_now: the format gives no text or too much");
    *out = ct_strv(ct_strndup(r->a, buf, k), k);
    return 0;
}

int ct_call_func(CtRender *r, const CtNode *n, uint8_t func, const CtVal *args, const char *const *kw, size_t nargs,
                 CtVal *out) {
    size_t npos = 0;
    for (size_t i = 0; i < nargs; i++)
        if (!kw[i]) npos++;
    switch (func) {
    case F_RAISE: {
        GtBytes b = {0};
        if (nargs) ct_str(&b, args[0]);
        gt_bytes_put(&b, "", 1);
        int rc = ct_rerr(r, n, "the template raised an exception: %s", b.p);
        gt_bytes_free(&b);
        return rc;
    }
    case F_STRFTIME:
        if (npos != 1 || nargs != 1) return ct_rerr(r, n, "strftime_now takes one format argument");
        return strftime_now(r, n, args[0], out);
    case F_NAMESPACE: case F_DICT: {
        CtDict *d = ct_dict_new(r->a, nargs + 1);
        for (size_t i = 0; i < nargs; i++) {
            if (!kw[i]) {
                if (args[i].k != V_DICT) return ct_rerr(r, n, "%s() takes keyword arguments or a mapping", func == F_DICT ? "dict" : "namespace");
                for (size_t k = 0; k < args[i].u.d->n; k++) ct_dict_set(r->a, d, args[i].u.d->key[k], args[i].u.d->klen[k], args[i].u.d->v[k]);
                continue;
            }
            if (func == F_NAMESPACE && kw[i][0] == '_') return ct_rerr(r, n, "namespace attributes cannot start with '_'");
            if (ct_val_depth(args[i]) + 1 > d->depth) d->depth = ct_val_depth(args[i]) + 1;
            if (d->depth > CT_MAX_VALUE_DEPTH) return ct_rerr(r, n, "lists and dicts nested deeper than %d", CT_MAX_VALUE_DEPTH);
            ct_dict_set(r->a, d, kw[i], strlen(kw[i]), args[i]);
        }
        *out = (CtVal){.k = func == F_DICT ? V_DICT : V_NS, .u.d = d};
        return 0;
    }
    case F_RANGE: {
        int64_t a = 0, b, s = 1;
        if (npos != nargs || npos < 1 || npos > 3) return ct_rerr(r, n, "range takes one to three integers");
        for (size_t i = 0; i < npos; i++)
            if (args[i].k != V_INT) return ct_rerr(r, n, "range takes integers, found %s", ct_kind_name(args[i]));
        if (npos == 1) b = args[0].u.i;
        else {
            a = args[0].u.i;
            b = args[1].u.i;
            if (npos == 3) s = args[2].u.i;
        }
        if (s == 0) return ct_rerr(r, n, "range: step cannot be zero");
        CtList *l = ct_list_new(r->a, 8);
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s) {
            if (l->n >= CT_MAX_ITERATIONS) return ct_rerr(r, n, "range longer than %d", CT_MAX_ITERATIONS);
            ct_list_push(r->a, l, int_v(i));
        }
        *out = list_v(l);
        return 0;
    }
    default: return ct_rerr(r, n, "unknown function");
    }
}
