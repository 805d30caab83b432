/* chat_template_value.c - the values a chat template computes with, as Python holds them (none, bool,
 * int, float, str, list, dict) in a bump arena: truthiness, equality and ordering, str()/repr() and
 * json.dumps as Python writes them, and messages from cJSON. */
#include <math.h>
#include <stdlib.h>

#include "chat_template_internal.h"

void *ct_alloc(CtArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        CtChunk *c = gt_xmalloc(sizeof *c + cap);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
        if (a->total > CT_MAX_ARENA) a->over = true;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *ct_strndup(CtArena *a, const char *s, size_t n) {
    char *d = ct_alloc(a, n + 1);
    if (n) memcpy(d, s, n);
    return d;
}

void ct_arena_free(CtArena *a) {
    CtChunk *c = a->head;
    while (c) {
        CtChunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

CtVal ct_strv(const char *p, size_t n) { return (CtVal){.k = V_STR, .u.s = {p, n}}; }

CtList *ct_list_new(CtArena *a, size_t cap) {
    CtList *l = ct_alloc(a, sizeof *l);
    l->cap = cap ? cap : 4;
    l->v = ct_alloc(a, l->cap * sizeof *l->v);
    return l;
}

void ct_list_push(CtArena *a, CtList *l, CtVal v) {
    if (l->n == l->cap) {
        CtVal *nv = ct_alloc(a, 2 * l->cap * sizeof *nv);
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = v;
}

CtDict *ct_dict_new(CtArena *a, size_t cap) {
    CtDict *d = ct_alloc(a, sizeof *d);
    d->cap = cap ? cap : 4;
    d->key = ct_alloc(a, d->cap * sizeof *d->key);
    d->klen = ct_alloc(a, d->cap * sizeof *d->klen);
    d->v = ct_alloc(a, d->cap * sizeof *d->v);
    return d;
}

void ct_dict_set(CtArena *a, CtDict *d, const char *k, size_t kn, CtVal v) {
    for (size_t i = 0; i < d->n; i++)
        if (d->klen[i] == kn && !memcmp(d->key[i], k, kn)) {
            d->v[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = 2 * d->cap;
        const char **key = ct_alloc(a, cap * sizeof *key);
        size_t *klen = ct_alloc(a, cap * sizeof *klen);
        CtVal *nv = ct_alloc(a, cap * sizeof *nv);
        memcpy(key, d->key, d->n * sizeof *key);
        memcpy(klen, d->klen, d->n * sizeof *klen);
        memcpy(nv, d->v, d->n * sizeof *nv);
        d->key = key;
        d->klen = klen;
        d->v = nv;
        d->cap = cap;
    }
    d->key[d->n] = k;
    d->klen[d->n] = kn;
    d->v[d->n++] = v;
}

bool ct_dict_get(const CtDict *d, const char *k, size_t kn, CtVal *out) {
    for (size_t i = 0; i < d->n; i++)
        if (d->klen[i] == kn && !memcmp(d->key[i], k, kn)) {
            *out = d->v[i];
            return true;
        }
    return false;
}

int ct_val_depth(CtVal v) { return v.k == V_LIST ? v.u.l->depth : (v.k == V_DICT || v.k == V_NS) ? v.u.d->depth : 0; }

CtVal ct_from_cjson(CtArena *a, const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return (CtVal){.k = V_NONE};
    if (cJSON_IsBool(j)) return (CtVal){.k = V_BOOL, .u.b = cJSON_IsTrue(j)};
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: an integral value in the exact range is Python's int */
        if (d == floor(d) && fabs(d) < 9007199254740992.0) return (CtVal){.k = V_INT, .u.i = (int64_t)d};
        return (CtVal){.k = V_FLOAT, .u.f = d};
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        return ct_strv(s, strlen(s));
    }
    if (cJSON_IsArray(j)) {
        CtList *l = ct_list_new(a, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next) {
            CtVal v = ct_from_cjson(a, e);
            if (ct_val_depth(v) + 1 > l->depth) l->depth = ct_val_depth(v) + 1;
            ct_list_push(a, l, v);
        }
        return (CtVal){.k = V_LIST, .u.l = l};
    }
    if (cJSON_IsObject(j)) {
        CtDict *d = ct_dict_new(a, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next) {
            if (!e->string) continue;
            CtVal v = ct_from_cjson(a, e);
            if (ct_val_depth(v) + 1 > d->depth) d->depth = ct_val_depth(v) + 1;
            ct_dict_set(a, d, e->string, strlen(e->string), v);
        }
        return (CtVal){.k = V_DICT, .u.d = d};
    }
    return (CtVal){.k = V_NONE};
}

const char *ct_kind_name(CtVal v) {
    static const char *const names[] = {"undefined", "NoneType", "bool", "int",       "float",   "str",
                                        "list",      "dict",     "Namespace", "macro", "function"};
    return v.k < sizeof names / sizeof *names ? names[v.k] : "?";
}

bool ct_truthy(CtVal v) {
    switch (v.k) {
    case V_BOOL: return v.u.b;
    case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0;
    case V_STR: return v.u.s.n != 0;
    case V_LIST: return v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    case V_NS: case V_MACRO: case V_FUNC: return true;
    default: return false;
    }
}

static bool is_num(CtVal v) { return v.k == V_BOOL || v.k == V_INT || v.k == V_FLOAT; }
static double num(CtVal v) { return v.k == V_FLOAT ? v.u.f : v.k == V_INT ? (double)v.u.i : (double)v.u.b; }

bool ct_equal(CtVal a, CtVal b) {
    if (is_num(a) && is_num(b)) {
        if (a.k != V_FLOAT && b.k != V_FLOAT) return (a.k == V_INT ? a.u.i : a.u.b) == (b.k == V_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case V_LIST:
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!ct_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case V_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            CtVal o;
            if (!ct_dict_get(b.u.d, a.u.d->key[i], a.u.d->klen[i], &o) || !ct_equal(a.u.d->v[i], o)) return false;
        }
        return true;
    case V_NS: return a.u.d == b.u.d;
    case V_MACRO: return a.u.macro == b.u.macro;
    case V_FUNC: return a.func == b.func;
    default: return false;
    }
}

int ct_compare(CtVal a, CtVal b, bool *bad) {
    if (is_num(a) && is_num(b)) {
        if (a.k == V_FLOAT || b.k == V_FLOAT) return num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
        int64_t x = a.k == V_INT ? a.u.i : a.u.b, y = b.k == V_INT ? b.u.i : b.u.b;
        return x < y ? -1 : x > y;
    }
    if (a.k == V_STR && b.k == V_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0; /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.k == V_LIST && b.k == V_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (ct_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return ct_compare(a.u.l->v[i], b.u.l->v[i], bad);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    *bad = true;
    return -2;
}

/* Python's repr(float): the shortest digits that read back to the same double */
static void put_float(GtBytes *out, double f, bool json) {
    char buf[64];
    if (isnan(f)) {
        gt_bytes_put(out, json ? "NaN" : "nan", 3);
        return;
    }
    if (isinf(f)) {
        const char *s = f > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
        gt_bytes_put(out, s, strlen(s));
        return;
    }
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
    /* buf: [-]d.ddde[+-]XX; rebuild as repr does */
    char digits[32];
    int nd = 0;
    bool neg = buf[0] == '-';
    const char *s = buf + (neg ? 1 : 0);
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char res[64];
    int rn = 0;
    if (neg) res[rn++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            res[rn++] = '0';
            res[rn++] = '.';
            for (int k = 0; k < -exp - 1; k++) res[rn++] = '0';
            for (int k = 0; k < nd; k++) res[rn++] = digits[k];
        } else {
            for (int k = 0; k <= exp; k++) res[rn++] = k < nd ? digits[k] : '0';
            res[rn++] = '.';
            if (nd > exp + 1)
                for (int k = exp + 1; k < nd; k++) res[rn++] = digits[k];
            else
                res[rn++] = '0';
        }
        gt_bytes_put(out, res, (size_t)rn);
        return;
    }
    res[rn++] = digits[0];
    if (nd > 1) {
        res[rn++] = '.';
        for (int k = 1; k < nd; k++) res[rn++] = digits[k];
    }
    rn += snprintf(res + rn, sizeof res - (size_t)rn, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    gt_bytes_put(out, res, (size_t)rn);
}

static void put_int(GtBytes *out, int64_t i) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", (long long)i);
    gt_bytes_put(out, buf, (size_t)n);
}

/* Python's repr(str): single quotes unless the text holds ' and no " */
static void repr_str(GtBytes *out, const char *p, size_t n) {
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    gt_bytes_put(out, &q, 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        char buf[16];
        if (c == (unsigned char)q || c == '\\') {
            buf[0] = '\\';
            buf[1] = (char)c;
            gt_bytes_put(out, buf, 2);
        } else if (c == '\n') gt_bytes_put(out, "\\n", 2);
        else if (c == '\r') gt_bytes_put(out, "\\r", 2);
        else if (c == '\t') gt_bytes_put(out, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) {
            snprintf(buf, sizeof buf, "\\x%02x", c);
            gt_bytes_put(out, buf, 4);
        } else {
            long len = gt_utf8_sequence((const unsigned char *)p + i, n - i);
            size_t k = (size_t)(len < 0 ? -len : len);
            if (len == 2 && c == 0xC2 && (unsigned char)p[i + 1] < 0xA0) { /* C1 controls U+0080..U+009F */
                snprintf(buf, sizeof buf, "\\x%02x", (unsigned char)p[i + 1]);
                gt_bytes_put(out, buf, 4);
            } else {
                gt_bytes_put(out, p + i, k);
            }
            i += k;
            continue;
        }
        i++;
    }
    gt_bytes_put(out, &q, 1);
}

void ct_repr(GtBytes *out, CtVal v) {
    switch (v.k) {
    case V_STR: repr_str(out, v.u.s.p, v.u.s.n); return;
    case V_LIST:
        gt_bytes_put(out, v.u.l->tuple ? "(" : "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) gt_bytes_put(out, ", ", 2);
            ct_repr(out, v.u.l->v[i]);
        }
        if (v.u.l->tuple && v.u.l->n == 1) gt_bytes_put(out, ",", 1);
        gt_bytes_put(out, v.u.l->tuple ? ")" : "]", 1);
        return;
    case V_DICT:
        gt_bytes_put(out, "{", 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) gt_bytes_put(out, ", ", 2);
            repr_str(out, v.u.d->key[i], v.u.d->klen[i]);
            gt_bytes_put(out, ": ", 2);
            ct_repr(out, v.u.d->v[i]);
        }
        gt_bytes_put(out, "}", 1);
        return;
    default: ct_str(out, v); return;
    }
}

void ct_str(GtBytes *out, CtVal v) {
    switch (v.k) {
    case V_UNDEF: return;
    case V_NONE: gt_bytes_put(out, "None", 4); return;
    case V_BOOL: gt_bytes_put(out, v.u.b ? "True" : "False", v.u.b ? 4 : 5); return;
    case V_INT: put_int(out, v.u.i); return;
    case V_FLOAT: put_float(out, v.u.f, false); return;
    case V_STR: gt_bytes_put(out, v.u.s.p, v.u.s.n); return;
    case V_LIST: case V_DICT: ct_repr(out, v); return;
    case V_NS: gt_bytes_put(out, "<Namespace>", 11); return;
    case V_MACRO: gt_bytes_put(out, "<Macro>", 7); return;
    default: gt_bytes_put(out, "<function>", 10); return;
    }
}

static void json_str(GtBytes *out, const char *p, size_t n) {
    gt_bytes_put(out, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char buf[8];
        if (c == '"') gt_bytes_put(out, "\\\"", 2);
        else if (c == '\\') gt_bytes_put(out, "\\\\", 2);
        else if (c == '\n') gt_bytes_put(out, "\\n", 2);
        else if (c == '\r') gt_bytes_put(out, "\\r", 2);
        else if (c == '\t') gt_bytes_put(out, "\\t", 2);
        else if (c == '\b') gt_bytes_put(out, "\\b", 2);
        else if (c == '\f') gt_bytes_put(out, "\\f", 2);
        else if (c < 0x20) {
            snprintf(buf, sizeof buf, "\\u%04x", c);
            gt_bytes_put(out, buf, 6);
        } else gt_bytes_put(out, (const char *)&c, 1);
    }
    gt_bytes_put(out, "\"", 1);
}

static void newline_indent(GtBytes *out, int indent, int level) {
    gt_bytes_put(out, "\n", 1);
    for (int i = 0; i < indent * level; i++) gt_bytes_put(out, " ", 1);
}

static int cmp_keys(const void *a, const void *b, void *dv) {
    const CtDict *d = dv;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    size_t n = d->klen[i] < d->klen[j] ? d->klen[i] : d->klen[j];
    int c = n ? memcmp(d->key[i], d->key[j], n) : 0;
    if (c) return c;
    return d->klen[i] < d->klen[j] ? -1 : d->klen[i] > d->klen[j];
}

static bool json_rec(GtBytes *out, CtVal v, int indent, const char *isep, const char *ksep, bool sort, int level,
                     int depth) {
    if (depth > CT_MAX_VALUE_DEPTH + 1) return false;
    switch (v.k) {
    case V_NONE: gt_bytes_put(out, "null", 4); return true;
    case V_BOOL: gt_bytes_put(out, v.u.b ? "true" : "false", v.u.b ? 4 : 5); return true;
    case V_INT: put_int(out, v.u.i); return true;
    case V_FLOAT: put_float(out, v.u.f, true); return true;
    case V_STR: json_str(out, v.u.s.p, v.u.s.n); return true;
    case V_LIST:
        if (!v.u.l->n) {
            gt_bytes_put(out, "[]", 2);
            return true;
        }
        gt_bytes_put(out, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) gt_bytes_put(out, isep, strlen(isep));
            if (indent >= 0) newline_indent(out, indent, level + 1);
            if (!json_rec(out, v.u.l->v[i], indent, isep, ksep, sort, level + 1, depth + 1)) return false;
        }
        if (indent >= 0) newline_indent(out, indent, level);
        gt_bytes_put(out, "]", 1);
        return true;
    case V_DICT: {
        const CtDict *d = v.u.d;
        if (!d->n) {
            gt_bytes_put(out, "{}", 2);
            return true;
        }
        size_t *order = gt_xmalloc(d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort) {
            /* insertion sort (stable, no qsort_r portability question); dicts here are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && cmp_keys(&order[j - 1], &order[j], (void *)d) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        }
        gt_bytes_put(out, "{", 1);
        bool ok = true;
        for (size_t k = 0; k < d->n && ok; k++) {
            size_t i = order[k];
            if (k) gt_bytes_put(out, isep, strlen(isep));
            if (indent >= 0) newline_indent(out, indent, level + 1);
            json_str(out, d->key[i], d->klen[i]);
            gt_bytes_put(out, ksep, strlen(ksep));
            ok = json_rec(out, d->v[i], indent, isep, ksep, sort, level + 1, depth + 1);
        }
        free(order);
        if (!ok) return false;
        if (indent >= 0) newline_indent(out, indent, level);
        gt_bytes_put(out, "}", 1);
        return true;
    }
    default: return false;
    }
}

bool ct_json(GtBytes *out, CtVal v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth) {
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    return json_rec(out, v, indent, item_sep, key_sep, sort_keys, 0, depth);
}
