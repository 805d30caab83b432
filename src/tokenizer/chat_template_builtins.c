/* chat_template_builtins.c - the filters a chat template calls by name (trim, length, tojson with
 * transformers' options, default, join, selectattr, dictsort, ...) and the str and dict methods
 * templates use (strip, split, startswith, items, get, ...), each as Python and Jinja define it; the
 * names of everything the subset knows (the tests and globals are in chat_template_tests.c). */
#include <math.h>
#include <stdlib.h>

#include "chat_template_internal.h"

static const char *const FILTERS[] = {"trim", "length", "count", "tojson", "upper", "lower", "title", "capitalize",
                                      "default", "d", "join", "first", "last", "list", "items", "selectattr",
                                      "rejectattr", "map", "string", "int", "float", "abs", "reverse", "replace",
                                      "safe", "unique", "sum", "min", "max", "select", "reject", "dictsort", NULL};
static const char *const TESTS[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                    "mapping", "iterable", "sequence", "boolean", "true", "false", "eq", "equalto",
                                    "ne", "lt", "gt", "le", "ge", "odd", "even", "divisibleby", "in", "lower",
                                    "upper", "callable", NULL};
static const char *const METHODS[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper",
                                      "lower", "title", "capitalize", "replace", "items", "keys", "values", "get",
                                      "find", "count", NULL};
static const char *const FUNCS[] = {"", "raise_exception", "strftime_now", "namespace", "dict", "range", NULL};

static bool in_list(const char *const *l, const char *name) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return true;
    return false;
}
bool ct_known_filter(const char *name) { return in_list(FILTERS, name); }
bool ct_known_test(const char *name) { return in_list(TESTS, name); }
bool ct_known_method(const char *name) { return in_list(METHODS, name); }
bool ct_known_func(const char *name, uint8_t *func) {
    for (int i = 1; FUNCS[i]; i++)
        if (!strcmp(FUNCS[i], name)) {
            *func = (uint8_t)i;
            return true;
        }
    return false;
}

static CtVal str_v(CtRender *r, const GtBytes *b) { return ct_strv(ct_strndup(r->a, b->p ? b->p : "", b->n), b->n); }
static CtVal int_v(int64_t i) { return (CtVal){.k = V_INT, .u.i = i}; }
static CtVal list_v(CtList *l) { return (CtVal){.k = V_LIST, .u.l = l}; }

size_t ct_utf8_len(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; c++) {
        long len = gt_utf8_sequence((const unsigned char *)p + i, n - i);
        i += (size_t)(len < 0 ? -len : len);
    }
    return c;
}

/* the code point at p[i..n) and its length; invalid bytes are one unit of their own */
static uint32_t cp_at(const char *p, size_t n, size_t i, size_t *len) {
    long l = gt_utf8_sequence((const unsigned char *)p + i, n - i);
    const unsigned char *s = (const unsigned char *)p + i;
    if (l <= 0) {
        *len = (size_t)(l < 0 ? -l : 1);
        return 0xFFFFFFFFu;
    }
    *len = (size_t)l;
    if (l == 1) return s[0];
    if (l == 2) return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    if (l == 3) return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* Python's str.isspace() */
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool in_chars(uint32_t c, const CtVal *chars) {
    if (!chars) return py_space(c);
    for (size_t i = 0; i < chars->u.s.n;) {
        size_t l;
        if (cp_at(chars->u.s.p, chars->u.s.n, i, &l) == c) return true;
        i += l;
    }
    return false;
}

/* str.strip/lstrip/rstrip(chars): which 1 left, 2 right, 3 both */
static CtVal strip(CtVal s, const CtVal *chars, int which) {
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n;
    if (which & 1)
        while (a < b) {
            size_t l;
            if (!in_chars(cp_at(p, b, a, &l), chars)) break;
            a += l;
        }
    if (which & 2)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)p[k] & 0xC0) == 0x80 && b - k < 4) k--;
            size_t l;
            uint32_t c = cp_at(p, b, k, &l);
            if (k + l != b) { k = b - 1; c = 0xFFFFFFFFu; }
            if (!in_chars(c, chars)) break;
            b = k;
        }
    return ct_strv(p + a, b - a);
}

static int case_map(CtRender *r, const CtNode *n, CtVal s, int mode, CtVal *out) {
    /* mode 0 upper, 1 lower, 2 title, 3 capitalize; non-ASCII text is refused, not mapped wrongly */
    for (size_t i = 0; i < s.u.s.n; i++)
        if ((unsigned char)s.u.s.p[i] >= 0x80)
            return ct_rerr(r, n, "upper/lower/title/capitalize of non-ASCII text is outside the supported subset");
    char *p = ct_strndup(r->a, s.u.s.p, s.u.s.n);
    bool prev_alpha = false;
    for (size_t i = 0; i < s.u.s.n; i++) {
        char c = p[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool up = mode == 0 || (mode == 2 && !prev_alpha) || (mode == 3 && i == 0);
        if (up && c >= 'a' && c <= 'z') p[i] = (char)(c - 32);
        if (!up && c >= 'A' && c <= 'Z') p[i] = (char)(c + 32);
        prev_alpha = alpha;
    }
    *out = ct_strv(p, s.u.s.n);
    return 0;
}

static int need_str(CtRender *r, const CtNode *n, CtVal v, const char *what) {
    if (v.k != V_STR) return ct_rerr(r, n, "%s needs a string, found %s", what, ct_kind_name(v));
    return 0;
}

static bool find_sub(CtVal s, CtVal sub, size_t from, size_t *at) {
    if (sub.u.s.n > s.u.s.n) return false;
    for (size_t i = from; i + sub.u.s.n <= s.u.s.n; i++)
        if (!memcmp(s.u.s.p + i, sub.u.s.p, sub.u.s.n)) {
            *at = i;
            return true;
        }
    return false;
}

static int split(CtRender *r, const CtNode *n, CtVal s, const CtVal *sep, int64_t maxsplit, CtVal *out) {
    CtList *l = ct_list_new(r->a, 4);
    if (!sep || sep->k == V_NONE) { /* runs of whitespace, no empty strings */
        size_t i = 0;
        int64_t splits = 0;
        while (i < s.u.s.n) {
            size_t len;
            while (i < s.u.s.n && py_space(cp_at(s.u.s.p, s.u.s.n, i, &len))) i += len;
            if (i >= s.u.s.n) break;
            size_t st = i;
            if (maxsplit >= 0 && splits >= maxsplit) {
                ct_list_push(r->a, l, ct_strv(s.u.s.p + st, s.u.s.n - st));
                break;
            }
            while (i < s.u.s.n && !py_space(cp_at(s.u.s.p, s.u.s.n, i, &len))) i += len;
            ct_list_push(r->a, l, ct_strv(s.u.s.p + st, i - st));
            splits++;
        }
    } else {
        if (need_str(r, n, *sep, "split's separator")) return -1;
        if (!sep->u.s.n) return ct_rerr(r, n, "split: empty separator");
        size_t i = 0, at;
        int64_t splits = 0;
        while ((maxsplit < 0 || splits < maxsplit) && find_sub(s, *sep, i, &at)) {
            ct_list_push(r->a, l, ct_strv(s.u.s.p + i, at - i));
            i = at + sep->u.s.n;
            splits++;
        }
        ct_list_push(r->a, l, ct_strv(s.u.s.p + i, s.u.s.n - i));
    }
    *out = list_v(l);
    return 0;
}

static int replace(CtRender *r, const CtNode *n, CtVal s, CtVal old, CtVal new, int64_t count, CtVal *out) {
    if (need_str(r, n, old, "replace") || need_str(r, n, new, "replace")) return -1;
    GtBytes b = {0};
    size_t i = 0, at;
    int64_t done = 0;
    if (!old.u.s.n) { /* Python inserts new between every character */
        size_t len;
        while (count < 0 || done < count) {
            gt_bytes_put(&b, new.u.s.p, new.u.s.n);
            done++;
            if (i >= s.u.s.n) break;
            cp_at(s.u.s.p, s.u.s.n, i, &len);
            gt_bytes_put(&b, s.u.s.p + i, len);
            i += len;
        }
    } else {
        while ((count < 0 || done < count) && find_sub(s, old, i, &at)) {
            gt_bytes_put(&b, s.u.s.p + i, at - i);
            gt_bytes_put(&b, new.u.s.p, new.u.s.n);
            i = at + old.u.s.n;
            done++;
            if (b.n > CT_MAX_OUTPUT) break;
        }
    }
    if (i < s.u.s.n) gt_bytes_put(&b, s.u.s.p + i, s.u.s.n - i);
    if (b.n > CT_MAX_OUTPUT) {
        gt_bytes_free(&b);
        return ct_rerr(r, n, "replace: the result passed %u MiB", CT_MAX_OUTPUT >> 20);
    }
    *out = str_v(r, &b);
    gt_bytes_free(&b);
    return 0;
}

/* positional argument i, or keyword name, or NULL */
static const CtVal *arg(const CtVal *args, const char *const *kw, size_t nargs, size_t i, const char *name) {
    size_t pos = 0;
    for (size_t k = 0; k < nargs; k++) {
        if (kw && kw[k]) {
            if (name && !strcmp(kw[k], name)) return &args[k];
        } else if (pos++ == i) {
            return &args[k];
        }
    }
    return NULL;
}

static int check_args(CtRender *r, const CtNode *n, const char *what, const char *const *kw, size_t nargs,
                      size_t max_pos, const char *const *names) {
    size_t pos = 0;
    for (size_t k = 0; k < nargs; k++) {
        if (kw && kw[k]) {
            if (!names || !in_list(names, kw[k])) return ct_rerr(r, n, "%s has no argument '%s'", what, kw[k]);
        } else {
            pos++;
        }
    }
    if (pos > max_pos) return ct_rerr(r, n, "%s takes at most %zu arguments, given %zu", what, max_pos, pos);
    return 0;
}

int ct_method(CtRender *r, const CtNode *n, CtVal obj, const CtVal *args, const char *const *kw, size_t nargs,
              CtVal *out, bool *handled) {
    const char *m = n->name;
    *handled = false;
    if (obj.k == V_STR) {
        const CtVal *a0 = arg(args, kw, nargs, 0, NULL), *a1 = arg(args, kw, nargs, 1, NULL);
        *handled = true;
        if (check_args(r, n, m, kw, nargs, 3, NULL)) return -1;
        if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
            if (a0 && a0->k != V_NONE && need_str(r, n, *a0, m)) return -1;
            *out = strip(obj, a0 && a0->k == V_STR ? a0 : NULL, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
            return 0;
        }
        if (!strcmp(m, "split")) return split(r, n, obj, a0, a1 && a1->k == V_INT ? a1->u.i : -1, out);
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            if (!a0) return ct_rerr(r, n, "%s needs an argument", m);
            const CtVal *cands = a0;
            size_t nc = 1;
            if (a0->k == V_LIST) {
                cands = a0->u.l->v;
                nc = a0->u.l->n;
            }
            bool hit = false;
            for (size_t i = 0; i < nc; i++) {
                if (need_str(r, n, cands[i], m)) return -1;
                size_t k = cands[i].u.s.n;
                if (k <= obj.u.s.n && !memcmp(m[0] == 's' ? obj.u.s.p : obj.u.s.p + obj.u.s.n - k, cands[i].u.s.p, k))
                    hit = true;
            }
            *out = (CtVal){.k = V_BOOL, .u.b = hit};
            return 0;
        }
        if (!strcmp(m, "upper")) return case_map(r, n, obj, 0, out);
        if (!strcmp(m, "lower")) return case_map(r, n, obj, 1, out);
        if (!strcmp(m, "title")) return case_map(r, n, obj, 2, out);
        if (!strcmp(m, "capitalize")) return case_map(r, n, obj, 3, out);
        if (!strcmp(m, "replace")) {
            const CtVal *a2 = arg(args, kw, nargs, 2, NULL);
            if (!a0 || !a1) return ct_rerr(r, n, "replace needs two arguments");
            return replace(r, n, obj, *a0, *a1, a2 && a2->k == V_INT ? a2->u.i : -1, out);
        }
        if (!strcmp(m, "find") || !strcmp(m, "count")) {
            if (!a0 || need_str(r, n, *a0, m)) return a0 ? -1 : ct_rerr(r, n, "%s needs an argument", m);
            size_t at, from = 0;
            int64_t c = 0;
            if (m[0] == 'f') {
                *out = int_v(find_sub(obj, *a0, 0, &at) ? (int64_t)ct_utf8_len(obj.u.s.p, at) : -1);
                return 0;
            }
            if (!a0->u.s.n) {
                *out = int_v((int64_t)ct_utf8_len(obj.u.s.p, obj.u.s.n) + 1);
                return 0;
            }
            while (find_sub(obj, *a0, from, &at)) {
                c++;
                from = at + a0->u.s.n;
            }
            *out = int_v(c);
            return 0;
        }
        *handled = false;
        return 0;
    }
    if (obj.k == V_DICT) {
        *handled = true;
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            if (nargs) return ct_rerr(r, n, "%s takes no arguments", m);
            CtList *l = ct_list_new(r->a, obj.u.d->n);
            for (size_t i = 0; i < obj.u.d->n; i++) {
                CtVal k = ct_strv(obj.u.d->key[i], obj.u.d->klen[i]);
                if (m[0] == 'i') {
                    CtList *pair = ct_list_new(r->a, 2);
                    pair->tuple = true;
                    ct_list_push(r->a, pair, k);
                    ct_list_push(r->a, pair, obj.u.d->v[i]);
                    ct_list_push(r->a, l, list_v(pair));
                } else {
                    ct_list_push(r->a, l, m[0] == 'k' ? k : obj.u.d->v[i]);
                }
            }
            *out = list_v(l);
            return 0;
        }
        if (!strcmp(m, "get")) {
            const CtVal *a0 = arg(args, kw, nargs, 0, NULL), *a1 = arg(args, kw, nargs, 1, NULL);
            if (!a0 || check_args(r, n, m, kw, nargs, 2, NULL)) return a0 ? -1 : ct_rerr(r, n, "get needs a key");
            *out = a1 ? *a1 : (CtVal){.k = V_NONE};
            if (a0->k == V_STR) ct_dict_get(obj.u.d, a0->u.s.p, a0->u.s.n, out);
            return 0;
        }
        *handled = false;
    }
    return 0;
}

static int attr_path(CtRender *r, const CtNode *n, CtVal v, CtVal path, CtVal *out) {
    /* "a.b" as Jinja's attribute filters read it; a missing one is undefined */
    if (need_str(r, n, path, "the attribute argument")) return -1;
    const char *p = path.u.s.p, *end = p + path.u.s.n;
    *out = v;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        CtVal next = {.k = V_UNDEF};
        if (out->k == V_DICT || out->k == V_NS) ct_dict_get(out->u.d, p, len, &next);
        else if (out->k == V_LIST && len && p[0] >= '0' && p[0] <= '9') {
            size_t i = (size_t)strtoull(p, NULL, 10);
            if (i < out->u.l->n) next = out->u.l->v[i];
        }
        *out = next;
        if (!dot) break;
        p = dot + 1;
    }
    return 0;
}

static int to_list(CtRender *r, const CtNode *n, CtVal v, CtList **l, const char *what) {
    if (v.k == V_LIST) {
        *l = v.u.l;
        return 0;
    }
    *l = ct_list_new(r->a, 4);
    if (v.k == V_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) ct_list_push(r->a, *l, ct_strv(v.u.d->key[i], v.u.d->klen[i]));
        return 0;
    }
    if (v.k == V_STR) {
        for (size_t i = 0; i < v.u.s.n;) {
            size_t len;
            cp_at(v.u.s.p, v.u.s.n, i, &len);
            ct_list_push(r->a, *l, ct_strv(v.u.s.p + i, len));
            i += len;
        }
        return 0;
    }
    if (v.k == V_UNDEF) return 0;
    return ct_rerr(r, n, "%s needs a sequence, found %s", what, ct_kind_name(v));
}


static int tojson(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, const char *const *kw, size_t nargs,
                  CtVal *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (check_args(r, n, "tojson", kw, nargs, 4, names)) return -1;
    const CtVal *ea = arg(args, kw, nargs, 0, "ensure_ascii"), *ind = arg(args, kw, nargs, 1, "indent"),
                *seps = arg(args, kw, nargs, 2, "separators"), *sk = arg(args, kw, nargs, 3, "sort_keys");
    if (ea && ct_truthy(*ea)) return ct_rerr(r, n, "tojson(ensure_ascii=true) is outside the supported subset");
    int indent = -1;
    if (ind && ind->k != V_NONE) {
        if (ind->k != V_INT || ind->u.i < 0 || ind->u.i > 64) return ct_rerr(r, n, "tojson: indent must be an integer in [0, 64]");
        indent = (int)ind->u.i;
    }
    char isep[64] = {0}, ksep[64] = {0};
    bool have_seps = seps && seps->k != V_NONE;
    if (have_seps) {
        if (seps->k != V_LIST || seps->u.l->n != 2 || seps->u.l->v[0].k != V_STR || seps->u.l->v[1].k != V_STR ||
            seps->u.l->v[0].u.s.n >= sizeof isep || seps->u.l->v[1].u.s.n >= sizeof ksep ||
            memchr(seps->u.l->v[0].u.s.p, 0, seps->u.l->v[0].u.s.n) || memchr(seps->u.l->v[1].u.s.p, 0, seps->u.l->v[1].u.s.n))
            return ct_rerr(r, n, "tojson: separators must be two short strings");
        memcpy(isep, seps->u.l->v[0].u.s.p, seps->u.l->v[0].u.s.n);
        memcpy(ksep, seps->u.l->v[1].u.s.p, seps->u.l->v[1].u.s.n);
    }
    GtBytes b = {0};
    bool ok = ct_json(&b, v, indent, have_seps ? isep : NULL, have_seps ? ksep : NULL, sk && ct_truthy(*sk), 0);
    if (ok) *out = str_v(r, &b);
    gt_bytes_free(&b);
    if (!ok) return ct_rerr(r, n, "tojson: a %s is not JSON serializable", ct_kind_name(v));
    return 0;
}

static int select_reject(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, size_t nargs, bool reject,
                         CtVal *out) {
    CtList *in, *l = ct_list_new(r->a, 4);
    if (to_list(r, n, v, &in, n->name)) return -1;
    if (nargs < 1) return ct_rerr(r, n, "%s needs an attribute name", n->name);
    if (nargs >= 2 && (args[1].k != V_STR || !ct_known_test(ct_strndup(r->a, args[1].u.s.p, args[1].u.s.n))))
        return ct_rerr(r, n, "%s: the test must name a supported test", n->name);
    for (size_t i = 0; i < in->n; i++) {
        CtVal a;
        bool keep;
        if (attr_path(r, n, in->v[i], args[0], &a)) return -1;
        if (nargs >= 2) {
            CtNode tn = *n;
            tn.name = ct_strndup(r->a, args[1].u.s.p, args[1].u.s.n);
            if (ct_test(r, &tn, a, args + 2, nargs - 2, &keep)) return -1;
        } else {
            keep = ct_truthy(a);
        }
        if (keep != reject) ct_list_push(r->a, l, in->v[i]);
    }
    *out = list_v(l);
    return 0;
}

/* select/reject(test, args...): the items passing the test (or truthy, with no test) */
static int select_items(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, size_t nargs, bool reject, CtVal *out) {
    CtList *in, *l = ct_list_new(r->a, 4);
    if (to_list(r, n, v, &in, n->name)) return -1;
    CtNode tn = *n;
    if (nargs >= 1) {
        if (args[0].k != V_STR) return ct_rerr(r, n, "%s: the test must be a name", n->name);
        tn.name = ct_strndup(r->a, args[0].u.s.p, args[0].u.s.n);
        if (!ct_known_test(tn.name)) return ct_rerr(r, n, "%s: '%s' is not a supported test", n->name, tn.name);
    }
    for (size_t i = 0; i < in->n; i++) {
        bool keep = ct_truthy(in->v[i]);
        if (nargs >= 1 && ct_test(r, &tn, in->v[i], args + 1, nargs - 1, &keep)) return -1;
        if (keep != reject) ct_list_push(r->a, l, in->v[i]);
    }
    *out = list_v(l);
    return 0;
}

/* dictsort with Jinja's defaults: (key, value) pairs by key, case-insensitively, stable */
static int dictsort(CtRender *r, const CtNode *n, CtVal v, size_t nargs, CtVal *out) {
    if (nargs) return ct_rerr(r, n, "dictsort with arguments is outside the supported subset");
    if (v.k != V_DICT) return ct_rerr(r, n, "dictsort needs a mapping, found %s", ct_kind_name(v));
    const CtDict *d = v.u.d;
    for (size_t i = 0; i < d->n; i++)
        for (size_t k = 0; k < d->klen[i]; k++)
            if ((unsigned char)d->key[i][k] >= 0x80)
                return ct_rerr(r, n, "dictsort of non-ASCII keys is outside the supported subset");
    size_t *ord = ct_alloc(r->a, (d->n + 1) * sizeof *ord);
    for (size_t i = 0; i < d->n; i++) ord[i] = i;
    for (size_t i = 1; i < d->n; i++)
        for (size_t j = i; j > 0; j--) {
            size_t a = ord[j - 1], b = ord[j], m = d->klen[a] < d->klen[b] ? d->klen[a] : d->klen[b];
            int c = 0;
            for (size_t k = 0; k < m && !c; k++) {
                int x = d->key[a][k], y = d->key[b][k];
                x = x >= 'A' && x <= 'Z' ? x + 32 : x;
                y = y >= 'A' && y <= 'Z' ? y + 32 : y;
                c = x - y;
            }
            if (!c) c = d->klen[a] < d->klen[b] ? -1 : d->klen[a] > d->klen[b];
            if (c <= 0) break;
            ord[j - 1] = b;
            ord[j] = a;
        }
    CtList *l = ct_list_new(r->a, d->n);
    for (size_t i = 0; i < d->n; i++) {
        CtList *pair = ct_list_new(r->a, 2);
        pair->tuple = true;
        ct_list_push(r->a, pair, ct_strv(d->key[ord[i]], d->klen[ord[i]]));
        ct_list_push(r->a, pair, d->v[ord[i]]);
        ct_list_push(r->a, l, list_v(pair));
    }
    *out = list_v(l);
    return 0;
}

int ct_filter(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, const char *const *kw, size_t nargs,
              CtVal *out) {
    const char *f = n->name;
    const CtVal *a0 = arg(args, kw, nargs, 0, NULL);
    if (!strcmp(f, "tojson")) return tojson(r, n, v, args, kw, nargs, out);
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        const CtVal *bo = arg(args, kw, nargs, 1, "boolean");
        const CtVal *dv = arg(args, kw, nargs, 0, "default_value");
        bool use = v.k == V_UNDEF || (bo && ct_truthy(*bo) && !ct_truthy(v));
        *out = use ? (dv ? *dv : ct_strv("", 0)) : v;
        return 0;
    }
    if (!strcmp(f, "safe")) {
        *out = v;
        return 0;
    }
    if (!strcmp(f, "string")) {
        GtBytes b = {0};
        ct_str(&b, v);
        *out = str_v(r, &b);
        gt_bytes_free(&b);
        return 0;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (v.k == V_STR) *out = int_v((int64_t)ct_utf8_len(v.u.s.p, v.u.s.n));
        else if (v.k == V_LIST) *out = int_v((int64_t)v.u.l->n);
        else if (v.k == V_DICT) *out = int_v((int64_t)v.u.d->n);
        else if (v.k == V_UNDEF) *out = int_v(0);
        else return ct_rerr(r, n, "length of a %s", ct_kind_name(v));
        return 0;
    }
    if (!strcmp(f, "trim") || !strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "title") ||
        !strcmp(f, "capitalize") || !strcmp(f, "replace")) {
        if (v.k != V_STR) { /* Jinja's string filters take str(value) */
            GtBytes b = {0};
            ct_str(&b, v);
            v = str_v(r, &b);
            gt_bytes_free(&b);
        }
        if (!strcmp(f, "trim")) {
            if (a0 && a0->k != V_NONE && need_str(r, n, *a0, "trim")) return -1;
            *out = strip(v, a0 && a0->k == V_STR ? a0 : NULL, 3);
            return 0;
        }
        if (!strcmp(f, "replace")) {
            const CtVal *a1 = arg(args, kw, nargs, 1, NULL), *a2 = arg(args, kw, nargs, 2, "count");
            if (!a0 || !a1) return ct_rerr(r, n, "replace needs two arguments");
            return replace(r, n, v, *a0, *a1, a2 && a2->k == V_INT ? a2->u.i : -1, out);
        }
        return case_map(r, n, v, f[0] == 'u' ? 0 : f[0] == 'l' ? 1 : f[0] == 't' ? 2 : 3, out);
    }
    if (!strcmp(f, "join")) {
        CtList *l;
        const CtVal *at = arg(args, kw, nargs, 1, "attribute");
        if (to_list(r, n, v, &l, "join")) return -1;
        if (a0 && need_str(r, n, *a0, "join's separator")) return -1;
        GtBytes b = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (i && a0) gt_bytes_put(&b, a0->u.s.p, a0->u.s.n);
            CtVal item = l->v[i];
            if (at && attr_path(r, n, item, *at, &item)) {
                gt_bytes_free(&b);
                return -1;
            }
            ct_str(&b, item);
        }
        *out = str_v(r, &b);
        gt_bytes_free(&b);
        return 0;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        CtList *l;
        if (to_list(r, n, v, &l, f)) return -1;
        *out = l->n ? l->v[f[0] == 'f' ? 0 : l->n - 1] : (CtVal){.k = V_UNDEF};
        return 0;
    }
    if (!strcmp(f, "list") || !strcmp(f, "reverse") || !strcmp(f, "unique")) {
        CtList *l, *c;
        if (v.k == V_STR && f[0] == 'r') {
            GtBytes b = {0};
            size_t i = v.u.s.n;
            while (i > 0) {
                size_t k = i - 1;
                while (k > 0 && ((unsigned char)v.u.s.p[k] & 0xC0) == 0x80 && i - k < 4) k--;
                size_t len;
                cp_at(v.u.s.p, i, k, &len);
                if (k + len != i) k = i - 1;
                gt_bytes_put(&b, v.u.s.p + k, i - k);
                i = k;
            }
            *out = str_v(r, &b);
            gt_bytes_free(&b);
            return 0;
        }
        if (to_list(r, n, v, &l, f)) return -1;
        c = ct_list_new(r->a, l->n);
        for (size_t i = 0; i < l->n; i++) {
            CtVal x = l->v[f[0] == 'r' ? l->n - 1 - i : i];
            bool dup = false;
            for (size_t j = 0; f[0] == 'u' && j < c->n && !dup; j++) dup = ct_equal(c->v[j], x);
            if (!dup) ct_list_push(r->a, c, x);
        }
        *out = list_v(c);
        return 0;
    }
    if (!strcmp(f, "items")) {
        if (v.k == V_UNDEF) {
            *out = list_v(ct_list_new(r->a, 1));
            return 0;
        }
        if (v.k != V_DICT) return ct_rerr(r, n, "items needs a mapping, found %s", ct_kind_name(v));
        bool handled;
        CtNode m = *n;
        m.name = "items";
        return ct_method(r, &m, v, NULL, NULL, 0, out, &handled);
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject")) return select_items(r, n, v, args, nargs, f[0] == 'r', out);
    if (!strcmp(f, "dictsort")) return dictsort(r, n, v, nargs, out);
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        return select_reject(r, n, v, args, nargs, f[0] == 'r', out);
    if (!strcmp(f, "map")) {
        CtList *l, *res;
        const CtVal *at = arg(args, kw, nargs, 99, "attribute"), *dflt = arg(args, kw, nargs, 99, "default");
        if (to_list(r, n, v, &l, "map")) return -1;
        res = ct_list_new(r->a, l->n);
        for (size_t i = 0; i < l->n; i++) {
            CtVal x;
            if (at) {
                if (attr_path(r, n, l->v[i], *at, &x)) return -1;
                if (x.k == V_UNDEF && dflt) x = *dflt;
            } else if (a0 && a0->k == V_STR) {
                CtNode fn = *n;
                fn.name = ct_strndup(r->a, a0->u.s.p, a0->u.s.n);
                if (!ct_known_filter(fn.name) || !strcmp(fn.name, "map"))
                    return ct_rerr(r, n, "map: '%s' is not a supported filter", fn.name);
                if (ct_filter(r, &fn, l->v[i], args + 1, kw ? kw + 1 : NULL, nargs - 1, &x)) return -1;
            } else {
                return ct_rerr(r, n, "map needs a filter name or attribute=");
            }
            ct_list_push(r->a, res, x);
        }
        *out = list_v(res);
        return 0;
    }
    if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs")) {
        double d = 0;
        bool isf = v.k == V_FLOAT, ok = true;
        if (v.k == V_INT || v.k == V_BOOL) d = (double)(v.k == V_INT ? v.u.i : v.u.b);
        else if (v.k == V_FLOAT) d = v.u.f;
        else if (v.k == V_STR && f[0] != 'a') {
            char buf[64];
            size_t k = v.u.s.n < sizeof buf - 1 ? v.u.s.n : sizeof buf - 1;
            memcpy(buf, v.u.s.p, k);
            buf[k] = 0;
            char *end;
            d = strtod(buf, &end);
            ok = end != buf && *end == 0 && k == v.u.s.n;
            isf = true;
        } else if (f[0] == 'a') return ct_rerr(r, n, "abs of a %s", ct_kind_name(v));
        else ok = false;
        if (f[0] == 'a') {
            *out = v.k == V_FLOAT ? (CtVal){.k = V_FLOAT, .u.f = fabs(d)} : int_v(d < 0 ? -(int64_t)d : (int64_t)d);
            if (v.k == V_INT) *out = int_v(v.u.i < 0 ? -v.u.i : v.u.i);
            return 0;
        }
        if (f[0] == 'f') {
            *out = (CtVal){.k = V_FLOAT, .u.f = ok ? d : (a0 && a0->k == V_FLOAT ? a0->u.f : 0.0)};
            return 0;
        }
        if (!ok || d != d || d >= 9.2e18 || d <= -9.2e18) *out = a0 ? *a0 : int_v(0);
        else *out = v.k == V_INT ? v : int_v((int64_t)d);
        (void)isf;
        return 0;
    }
    if (!strcmp(f, "sum") || !strcmp(f, "min") || !strcmp(f, "max")) {
        CtList *l;
        if (to_list(r, n, v, &l, f)) return -1;
        if (f[1] == 'u') {
            CtVal acc = int_v(0);
            for (size_t i = 0; i < l->n; i++) {
                bool num = l->v[i].k == V_INT || l->v[i].k == V_FLOAT || l->v[i].k == V_BOOL;
                if (!num) return ct_rerr(r, n, "sum of a %s", ct_kind_name(l->v[i]));
                if (acc.k == V_INT && l->v[i].k != V_FLOAT) acc.u.i += l->v[i].k == V_INT ? l->v[i].u.i : l->v[i].u.b;
                else acc = (CtVal){.k = V_FLOAT, .u.f = (acc.k == V_INT ? (double)acc.u.i : acc.u.f) +
                                                       (l->v[i].k == V_FLOAT ? l->v[i].u.f : (double)(l->v[i].k == V_INT ? l->v[i].u.i : l->v[i].u.b))};
            }
            *out = acc;
            return 0;
        }
        *out = (CtVal){.k = V_UNDEF};
        for (size_t i = 0; i < l->n; i++) {
            bool bad = false;
            if (i == 0) {
                *out = l->v[0];
                continue;
            }
            int c = ct_compare(l->v[i], *out, &bad);
            if (bad) return ct_rerr(r, n, "%s: values that do not compare", f);
            if (f[1] == 'i' ? c < 0 : c > 0) *out = l->v[i];
        }
        return 0;
    }
    return ct_rerr(r, n, "the filter '%s' is outside the supported subset", f);
}
