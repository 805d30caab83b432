/* chat_template_render.c - a parsed chat template rendered over messages as transformers'
 * apply_chat_template renders it (Jinja's scoping: a for loop's iteration is a scope, if is not,
 * namespace() objects carry values out of loops), with the assistant spans: the {% generation %}
 * blocks where the template has them, else each assistant message's turn after its header. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "chat_template_internal.h"

int ct_rerr(CtRender *r, const CtNode *n, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gt_error(r->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s", r->t->name, n ? n->line : 0, n ? n->col : 0, msg);
}

static int eval(CtRender *r, const CtNode *n, CtVal *out);
static int exec(CtRender *r, const CtNode *n);

/* the depth a value built from parts gets; refused past CT_MAX_VALUE_DEPTH */
static int nest(CtRender *r, const CtNode *n, int *depth, CtVal part) {
    if (ct_val_depth(part) + 1 > *depth) *depth = ct_val_depth(part) + 1;
    if (*depth > CT_MAX_VALUE_DEPTH) return ct_rerr(r, n, "lists and dicts nested deeper than %d", CT_MAX_VALUE_DEPTH);
    return 0;
}

static bool lookup(const CtRender *r, const char *name, size_t len, CtVal *out) {
    for (const CtFrame *f = r->frame; f; f = f->parent)
        if (ct_dict_get(f->vars, name, len, out)) return true;
    return false;
}

static void set_var(CtRender *r, const char *name, size_t len, CtVal v) { ct_dict_set(r->a, r->frame->vars, name, len, v); }

static void push_frame(CtRender *r) {
    CtFrame *f = ct_alloc(r->a, sizeof *f);
    f->parent = r->frame;
    f->vars = ct_dict_new(r->a, 8);
    r->frame = f;
}

static int check_limits(CtRender *r, const CtNode *n) {
    if (r->main->n > CT_MAX_OUTPUT || r->out->n > CT_MAX_OUTPUT)
        return ct_rerr(r, n, "the rendered text passed %u MiB", CT_MAX_OUTPUT >> 20);
    if (r->a->over) return ct_rerr(r, n, "rendering took more than %u MiB of values", CT_MAX_ARENA >> 20);
    return 0;
}

/* Python's sequence index of a str (code points) or list; false when out of range. */
static size_t *char_starts(CtRender *r, const char *p, size_t n, size_t *count) {
    size_t *st = ct_alloc(r->a, (n + 1) * sizeof *st), c = 0;
    for (size_t i = 0; i < n;) {
        st[c++] = i;
        long len = gt_utf8_sequence((const unsigned char *)p + i, n - i);
        i += (size_t)(len < 0 ? -len : len);
    }
    st[c] = n;
    *count = c;
    return st;
}

static int subscript(CtRender *r, const CtNode *n, CtVal obj, CtVal idx, CtVal *out) {
    *out = (CtVal){.k = V_UNDEF};
    if (obj.k == V_UNDEF) return ct_rerr(r, n, "an undefined value has no item");
    if (obj.k == V_DICT || obj.k == V_NS) {
        if (idx.k == V_STR) ct_dict_get(obj.u.d, idx.u.s.p, idx.u.s.n, out);
        return 0;
    }
    if ((obj.k == V_LIST || obj.k == V_STR) && (idx.k == V_INT || idx.k == V_BOOL)) {
        int64_t i = idx.k == V_INT ? idx.u.i : idx.u.b;
        if (obj.k == V_LIST) {
            int64_t len = (int64_t)obj.u.l->n;
            if (i < 0) i += len;
            if (i >= 0 && i < len) *out = obj.u.l->v[i];
            return 0;
        }
        size_t count, *st = char_starts(r, obj.u.s.p, obj.u.s.n, &count);
        if (i < 0) i += (int64_t)count;
        if (i >= 0 && i < (int64_t)count) *out = ct_strv(obj.u.s.p + st[i], st[i + 1] - st[i]);
        return 0;
    }
    if (obj.k == V_STR && idx.k == V_STR) return 0; /* an attribute of a str that is not a method */
    return 0;
}

/* Python's slice.indices() and the slice of a list or str */
static int slice(CtRender *r, const CtNode *n, CtVal obj, const CtVal *abc, const bool *given, CtVal *out) {
    int64_t len, step = 1, start, stop;
    size_t count = 0, *st = NULL;
    if (obj.k == V_LIST) {
        len = (int64_t)obj.u.l->n;
    } else if (obj.k == V_STR) {
        st = char_starts(r, obj.u.s.p, obj.u.s.n, &count);
        len = (int64_t)count;
    } else {
        return ct_rerr(r, n, "cannot slice a %s", ct_kind_name(obj));
    }
    for (int k = 0; k < 3; k++)
        if (given[k] && abc[k].k != V_INT && abc[k].k != V_NONE)
            return ct_rerr(r, n, "slice indices must be integers or none, found %s", ct_kind_name(abc[k]));
    if (given[2] && abc[2].k == V_INT) step = abc[2].u.i;
    if (step == 0) return ct_rerr(r, n, "slice step cannot be zero");
    if (step > 0) {
        start = 0;
        stop = len;
    } else {
        start = len - 1;
        stop = -1;
    }
    for (int k = 0; k < 2; k++) {
        if (!given[k] || abc[k].k != V_INT) continue;
        int64_t v = abc[k].u.i;
        if (v < 0) {
            v += len;
            if (v < 0) v = step < 0 ? -1 : 0;
        } else if (v >= len) {
            v = step < 0 ? len - 1 : len;
        }
        if (k == 0) start = v;
        else stop = v;
    }
    CtList *l = obj.k == V_LIST ? ct_list_new(r->a, 4) : NULL;
    GtBytes s = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (obj.k == V_LIST) ct_list_push(r->a, l, obj.u.l->v[i]);
        else gt_bytes_put(&s, obj.u.s.p + st[i], st[i + 1] - st[i]);
    }
    if (l) {
        *out = (CtVal){.k = V_LIST, .u.l = l};
    } else {
        *out = ct_strv(ct_strndup(r->a, s.p ? s.p : "", s.n), s.n);
        gt_bytes_free(&s);
    }
    return 0;
}

static bool is_num(CtVal v) { return v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL; }
static double num(CtVal v) { return v.k == V_FLOAT ? v.u.f : v.k == V_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t ival(CtVal v) { return v.k == V_INT ? v.u.i : (int64_t)v.u.b; }

static int contains(CtRender *r, const CtNode *n, CtVal item, CtVal seq, bool *out) {
    *out = false;
    if (seq.k == V_STR) {
        if (item.k != V_STR) return ct_rerr(r, n, "'in <string>' needs a string on the left, found %s", ct_kind_name(item));
        if (!item.u.s.n) {
            *out = true;
            return 0;
        }
        for (size_t i = 0; i + item.u.s.n <= seq.u.s.n; i++)
            if (!memcmp(seq.u.s.p + i, item.u.s.p, item.u.s.n)) {
                *out = true;
                break;
            }
        return 0;
    }
    if (seq.k == V_LIST) {
        for (size_t i = 0; i < seq.u.l->n && !*out; i++) *out = ct_equal(item, seq.u.l->v[i]);
        return 0;
    }
    if (seq.k == V_DICT) {
        CtVal v;
        *out = item.k == V_STR && ct_dict_get(seq.u.d, item.u.s.p, item.u.s.n, &v);
        return 0;
    }
    return ct_rerr(r, n, "'in' needs a string, list or mapping on the right, found %s", ct_kind_name(seq));
}

static int binop(CtRender *r, const CtNode *n, CtVal a, CtVal b, CtVal *out) {
    uint8_t op = n->op;
    bool bad = false, in;
    if ((a.k == V_UNDEF || b.k == V_UNDEF) && op != OP_EQ && op != OP_NE && op != OP_CAT)
        return ct_rerr(r, n, "an undefined value in an expression");
    switch (op) {
    case OP_EQ: *out = (CtVal){.k = V_BOOL, .u.b = ct_equal(a, b)}; return 0;
    case OP_NE: *out = (CtVal){.k = V_BOOL, .u.b = !ct_equal(a, b)}; return 0;
    case OP_LT: case OP_LE: case OP_GT: case OP_GE: {
        int c = ct_compare(a, b, &bad);
        if (bad) return ct_rerr(r, n, "cannot order %s and %s", ct_kind_name(a), ct_kind_name(b));
        bool v = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
        *out = (CtVal){.k = V_BOOL, .u.b = v};
        return 0;
    }
    case OP_IN: case OP_NOTIN:
        if (contains(r, n, a, b, &in)) return -1;
        *out = (CtVal){.k = V_BOOL, .u.b = op == OP_IN ? in : !in};
        return 0;
    case OP_CAT: {
        GtBytes s = {0};
        ct_str(&s, a);
        ct_str(&s, b);
        *out = ct_strv(ct_strndup(r->a, s.p ? s.p : "", s.n), s.n);
        gt_bytes_free(&s);
        return 0;
    }
    default: break;
    }
    if (op == OP_ADD && a.k == V_STR && b.k == V_STR) {
        char *p = ct_alloc(r->a, a.u.s.n + b.u.s.n + 1);
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        *out = ct_strv(p, a.u.s.n + b.u.s.n);
        return 0;
    }
    if (op == OP_ADD && a.k == V_LIST && b.k == V_LIST) {
        CtList *l = ct_list_new(r->a, a.u.l->n + b.u.l->n);
        l->depth = a.u.l->depth > b.u.l->depth ? a.u.l->depth : b.u.l->depth;
        for (size_t i = 0; i < a.u.l->n; i++) ct_list_push(r->a, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) ct_list_push(r->a, l, b.u.l->v[i]);
        *out = (CtVal){.k = V_LIST, .u.l = l};
        return 0;
    }
    if (op == OP_MUL && ((a.k == V_STR && (b.k == V_INT || b.k == V_BOOL)) || (b.k == V_STR && (a.k == V_INT || a.k == V_BOOL)))) {
        CtVal s = a.k == V_STR ? a : b;
        int64_t k = ival(a.k == V_STR ? b : a);
        if (k < 0) k = 0;
        if (s.u.s.n && (uint64_t)k > CT_MAX_OUTPUT / s.u.s.n) return ct_rerr(r, n, "string repetition too large");
        size_t total = s.u.s.n * (size_t)k;
        char *p = ct_alloc(r->a, total + 1);
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * s.u.s.n, s.u.s.p, s.u.s.n);
        *out = ct_strv(p, total);
        return 0;
    }
    if (!is_num(a) || !is_num(b))
        return ct_rerr(r, n, "unsupported operand types %s and %s", ct_kind_name(a), ct_kind_name(b));
    bool fl = a.k == V_FLOAT || b.k == V_FLOAT;
    if (op == OP_DIV) {
        if (num(b) == 0) return ct_rerr(r, n, "division by zero");
        *out = (CtVal){.k = V_FLOAT, .u.f = num(a) / num(b)};
        return 0;
    }
    if (fl) {
        double x = num(a), y = num(b), z;
        switch (op) {
        case OP_ADD: z = x + y; break;
        case OP_SUB: z = x - y; break;
        case OP_MUL: z = x * y; break;
        case OP_POW: z = pow(x, y); break;
        case OP_FLOORDIV: case OP_MOD:
            if (y == 0) return ct_rerr(r, n, "division by zero");
            z = op == OP_FLOORDIV ? floor(x / y) : x - floor(x / y) * y;
            break;
        default: return ct_rerr(r, n, "unsupported operator");
        }
        *out = (CtVal){.k = V_FLOAT, .u.f = z};
        return 0;
    }
    int64_t x = ival(a), y = ival(b), z;
    switch (op) {
    case OP_ADD: if (__builtin_add_overflow(x, y, &z)) goto ovf; break;
    case OP_SUB: if (__builtin_sub_overflow(x, y, &z)) goto ovf; break;
    case OP_MUL: if (__builtin_mul_overflow(x, y, &z)) goto ovf; break;
    case OP_FLOORDIV: case OP_MOD:
        if (y == 0) return ct_rerr(r, n, "division by zero");
        if (x == INT64_MIN && y == -1) goto ovf;
        z = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
        if (op == OP_MOD) z = x - z * y;
        break;
    case OP_POW:
        if (y < 0) {
            *out = (CtVal){.k = V_FLOAT, .u.f = pow((double)x, (double)y)};
            return 0;
        }
        z = 1;
        for (int64_t i = 0; i < y; i++)
            if (__builtin_mul_overflow(z, x, &z)) goto ovf;
            else if (z == 0 || z == 1) break;
        break;
    default: return ct_rerr(r, n, "unsupported operator");
    }
    *out = (CtVal){.k = V_INT, .u.i = z};
    return 0;
ovf:
    return ct_rerr(r, n, "integer arithmetic outside the 64-bit range");
}

/* evaluate a node's arguments (kids) */
static int eval_args(CtRender *r, const CtNode *n, CtVal **args) {
    *args = ct_alloc(r->a, (n->n_kids + 1) * sizeof **args);
    for (size_t i = 0; i < n->n_kids; i++)
        if (eval(r, n->kids[i], &(*args)[i])) return -1;
    return 0;
}

static int call_macro(CtRender *r, const CtNode *n, const CtNode *m, const CtVal *args, const char *const *kw,
                      size_t nargs, CtVal *out) {
    if (r->call_depth >= CT_MAX_CALL_DEPTH) return ct_rerr(r, n, "macro calls nested deeper than %d", CT_MAX_CALL_DEPTH);
    CtFrame *saved = r->frame;
    push_frame(r);
    size_t npos = 0;
    for (size_t i = 0; i < nargs; i++)
        if (!kw[i]) npos++;
    if (npos > m->n_kids) return ct_rerr(r, n, "macro '%s' takes %zu arguments, given %zu", m->name, m->n_kids, npos);
    for (size_t p = 0; p < m->n_kids; p++) {
        const CtNode *param = m->kids[p];
        CtVal v = {.k = V_UNDEF};
        bool have = false;
        if (p < npos) {
            size_t seen = 0;
            for (size_t i = 0; i < nargs; i++)
                if (!kw[i] && seen++ == p) {
                    v = args[i];
                    have = true;
                    break;
                }
        }
        for (size_t i = 0; i < nargs && !have; i++)
            if (kw[i] && !strcmp(kw[i], param->name)) {
                v = args[i];
                have = true;
            }
        if (!have && param->a && eval(r, param->a, &v)) return -1;
        set_var(r, param->name, param->name_len, v);
    }
    for (size_t i = 0; i < nargs; i++) {
        if (!kw[i]) continue;
        bool ok = false;
        for (size_t p = 0; p < m->n_kids; p++) ok |= !strcmp(kw[i], m->kids[p]->name);
        if (!ok) return ct_rerr(r, n, "macro '%s' has no parameter '%s'", m->name, kw[i]);
    }
    GtBytes buf = {0}, *saved_out = r->out;
    r->out = &buf;
    r->call_depth++;
    int rc = exec(r, m->b);
    r->call_depth--;
    r->out = saved_out;
    r->frame = saved;
    r->ctl = 0;
    if (!rc) *out = ct_strv(ct_strndup(r->a, buf.p ? buf.p : "", buf.n), buf.n);
    gt_bytes_free(&buf);
    return rc;
}

static int eval_call(CtRender *r, const CtNode *n, CtVal *out) {
    CtVal *args;
    if (eval_args(r, n, &args)) return -1;
    const CtNode *callee = n->a;
    if (callee->kind == N_ATTR) {
        CtVal obj;
        if (eval(r, callee->a, &obj)) return -1;
        bool handled = false;
        if (obj.k == V_UNDEF) return ct_rerr(r, n, "cannot call '%s' on an undefined value", callee->name);
        if (ct_method(r, callee, obj, args, n->kw, n->n_kids, out, &handled)) return -1;
        if (handled) return 0;
    }
    CtVal f;
    if (eval(r, callee, &f)) return -1;
    if (f.k == V_MACRO) return call_macro(r, n, f.u.macro, args, n->kw, n->n_kids, out);
    if (f.k == V_FUNC) return ct_call_func(r, n, f.func, args, n->kw, n->n_kids, out);
    return ct_rerr(r, n, "a %s is not callable", ct_kind_name(f));
}

static int eval_node(CtRender *r, const CtNode *n, CtVal *out) {
    CtVal a, b;
    switch (n->kind) {
    case N_LIT: *out = n->lit; return 0;
    case N_NAME:
        if (!lookup(r, n->name, n->name_len, out)) *out = (CtVal){.k = V_UNDEF};
        return 0;
    case N_ATTR:
        if (eval(r, n->a, &a)) return -1;
        if (a.k == V_UNDEF) return ct_rerr(r, n, "an undefined value has no attribute '%s'", n->name);
        *out = (CtVal){.k = V_UNDEF};
        if (a.k == V_DICT || a.k == V_NS) ct_dict_get(a.u.d, n->name, n->name_len, out);
        return 0;
    case N_ITEM:
        if (eval(r, n->a, &a) || eval(r, n->b, &b)) return -1;
        return subscript(r, n, a, b, out);
    case N_SLICE: {
        CtVal abc[3] = {{0}};
        bool given[3] = {n->b != NULL, n->c != NULL, n->d != NULL};
        if (eval(r, n->a, &a)) return -1;
        if ((n->b && eval(r, n->b, &abc[0])) || (n->c && eval(r, n->c, &abc[1])) || (n->d && eval(r, n->d, &abc[2])))
            return -1;
        return slice(r, n, a, abc, given, out);
    }
    case N_CALL: return eval_call(r, n, out);
    case N_FILTER: {
        CtVal *args;
        if (eval(r, n->a, &a) || eval_args(r, n, &args)) return -1;
        return ct_filter(r, n, a, args, n->kw, n->n_kids, out);
    }
    case N_TEST: {
        CtVal *args;
        bool t;
        if (eval(r, n->a, &a) || eval_args(r, n, &args) || ct_test(r, n, a, args, n->n_kids, &t)) return -1;
        *out = (CtVal){.k = V_BOOL, .u.b = n->neg ? !t : t};
        return 0;
    }
    case N_NOT:
        if (eval(r, n->a, &a)) return -1;
        *out = (CtVal){.k = V_BOOL, .u.b = !ct_truthy(a)};
        return 0;
    case N_NEG: case N_POS:
        if (eval(r, n->a, &a)) return -1;
        if (a.k == V_FLOAT) *out = (CtVal){.k = V_FLOAT, .u.f = n->kind == N_NEG ? -a.u.f : a.u.f};
        else if (a.k == V_INT || a.k == V_BOOL) {
            int64_t v = ival(a);
            if (n->kind == N_NEG && v == INT64_MIN) return ct_rerr(r, n, "integer outside the 64-bit range");
            *out = (CtVal){.k = V_INT, .u.i = n->kind == N_NEG ? -v : v};
        } else return ct_rerr(r, n, "bad operand type for unary %c: %s", n->kind == N_NEG ? '-' : '+', ct_kind_name(a));
        return 0;
    case N_BIN:
        if (eval(r, n->a, &a) || eval(r, n->b, &b)) return -1;
        return binop(r, n, a, b, out);
    case N_AND: case N_OR:
        if (eval(r, n->a, &a)) return -1;
        if (ct_truthy(a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        return eval(r, n->b, out);
    case N_LISTLIT: case N_TUPLE: {
        CtList *l = ct_list_new(r->a, n->n_kids);
        l->tuple = n->kind == N_TUPLE;
        for (size_t i = 0; i < n->n_kids; i++) {
            if (eval(r, n->kids[i], &a) || nest(r, n, &l->depth, a)) return -1;
            ct_list_push(r->a, l, a);
        }
        *out = (CtVal){.k = V_LIST, .u.l = l};
        return 0;
    }
    case N_DICTLIT: {
        CtDict *d = ct_dict_new(r->a, n->n_kids);
        for (size_t i = 0; i < n->n_kids; i++) {
            if (eval(r, n->a->kids[i], &a) || eval(r, n->kids[i], &b)) return -1;
            if (a.k != V_STR) return ct_rerr(r, n->a->kids[i], "dictionary keys must be strings here, found %s", ct_kind_name(a));
            if (nest(r, n, &d->depth, b)) return -1;
            ct_dict_set(r->a, d, a.u.s.p, a.u.s.n, b);
        }
        *out = (CtVal){.k = V_DICT, .u.d = d};
        return 0;
    }
    case N_COND:
        if (eval(r, n->a, &a)) return -1;
        if (ct_truthy(a)) return eval(r, n->b, out);
        if (n->c) return eval(r, n->c, out);
        *out = (CtVal){.k = V_UNDEF};
        return 0;
    default: return ct_rerr(r, n, "not an expression");
    }
}

static int for_items(CtRender *r, const CtNode *n, CtVal it, CtList **items) {
    if (it.k == V_LIST) {
        *items = it.u.l;
    } else if (it.k == V_DICT) {
        *items = ct_list_new(r->a, it.u.d->n);
        for (size_t i = 0; i < it.u.d->n; i++) ct_list_push(r->a, *items, ct_strv(it.u.d->key[i], it.u.d->klen[i]));
    } else if (it.k == V_STR) {
        size_t count, *st = char_starts(r, it.u.s.p, it.u.s.n, &count);
        *items = ct_list_new(r->a, count);
        for (size_t i = 0; i < count; i++) ct_list_push(r->a, *items, ct_strv(it.u.s.p + st[i], st[i + 1] - st[i]));
    } else if (it.k == V_UNDEF) {
        *items = ct_list_new(r->a, 1);
    } else {
        return ct_rerr(r, n, "a %s is not iterable", ct_kind_name(it));
    }
    return 0;
}

static int bind_target(CtRender *r, const CtNode *target, CtVal v) {
    if (target->kind == N_NAME) {
        set_var(r, target->name, target->name_len, v);
        return 0;
    }
    if (v.k != V_LIST || v.u.l->n != target->n_kids)
        return ct_rerr(r, target, "cannot unpack a %s into %zu loop variables", ct_kind_name(v), target->n_kids);
    for (size_t i = 0; i < target->n_kids; i++) set_var(r, target->kids[i]->name, target->kids[i]->name_len, v.u.l->v[i]);
    return 0;
}

static CtVal ival_v(int64_t i) { return (CtVal){.k = V_INT, .u.i = i}; }
static CtVal bool_v(bool b) { return (CtVal){.k = V_BOOL, .u.b = b}; }

static int exec_for(CtRender *r, const CtNode *n) {
    CtVal it;
    CtList *items = NULL;
    if (eval(r, n->b, &it) || for_items(r, n, it, &items)) return -1;
    CtFrame *saved = r->frame;
    if (n->n_kids) { /* for x in y if cond: filter first, loop.length counts what is kept */
        CtList *kept = ct_list_new(r->a, items->n);
        for (size_t i = 0; i < items->n; i++) {
            push_frame(r);
            CtVal c;
            int rc = bind_target(r, n->a, items->v[i]) || eval(r, n->kids[0], &c);
            r->frame = saved;
            if (rc) return -1;
            if (ct_truthy(c)) ct_list_push(r->a, kept, items->v[i]);
        }
        items = kept;
    }
    int64_t len = (int64_t)items->n;
    for (int64_t i = 0; i < len; i++) {
        if (++r->iterations > CT_MAX_ITERATIONS) return ct_rerr(r, n, "more than %d loop iterations", CT_MAX_ITERATIONS);
        if (check_limits(r, n)) return -1;
        push_frame(r);
        CtDict *loop = ct_dict_new(r->a, 12);
        ct_dict_set(r->a, loop, "index", 5, ival_v(i + 1));
        ct_dict_set(r->a, loop, "index0", 6, ival_v(i));
        ct_dict_set(r->a, loop, "revindex", 8, ival_v(len - i));
        ct_dict_set(r->a, loop, "revindex0", 9, ival_v(len - i - 1));
        ct_dict_set(r->a, loop, "first", 5, bool_v(i == 0));
        ct_dict_set(r->a, loop, "last", 4, bool_v(i == len - 1));
        ct_dict_set(r->a, loop, "length", 6, ival_v(len));
        ct_dict_set(r->a, loop, "depth", 5, ival_v(1));
        ct_dict_set(r->a, loop, "depth0", 6, ival_v(0));
        if (i > 0) ct_dict_set(r->a, loop, "previtem", 8, items->v[i - 1]);
        if (i + 1 < len) ct_dict_set(r->a, loop, "nextitem", 8, items->v[i + 1]);
        set_var(r, "loop", 4, (CtVal){.k = V_DICT, .u.d = loop});
        if (bind_target(r, n->a, items->v[i])) return -1;
        size_t start = r->main->n;
        int rc = exec(r, n->c);
        r->frame = saved;
        if (rc) return -1;
        /* which message this iteration wrote, for the assistant spans */
        if (r->out == r->main && r->main->n > start && items->v[i].k == V_DICT && r->messages) {
            for (size_t m = 0; m < r->messages->n; m++)
                if (r->messages->v[m].k == V_DICT && r->messages->v[m].u.d == items->v[i].u.d) {
                    r->msg_start[m] = start;
                    r->msg_end[m] = r->main->n;
                    break;
                }
        }
        int ctl = r->ctl;
        r->ctl = 0;
        if (ctl == 1) break;
    }
    if (len == 0 && n->d) return exec(r, n->d);
    return 0;
}

static int exec_node(CtRender *r, const CtNode *n) {
    CtVal v;
    switch (n->kind) {
    case N_BODY:
        for (size_t i = 0; i < n->n_kids && !r->ctl; i++)
            if (exec(r, n->kids[i])) return -1;
        return 0;
    case N_TEXT: gt_bytes_put(r->out, n->name, n->name_len); return check_limits(r, n);
    case N_OUT:
        if (eval(r, n->a, &v)) return -1;
        ct_str(r->out, v);
        return check_limits(r, n);
    case N_IF:
        for (const CtNode *c = n; c; c = c->c) {
            if (c->kind != N_IF) return exec(r, c); /* the else body */
            if (eval(r, c->a, &v)) return -1;
            if (ct_truthy(v)) return exec(r, c->b);
        }
        return 0;
    case N_FOR: return exec_for(r, n);
    case N_SET:
        if (eval(r, n->b, &v)) return -1;
        if (n->name) {
            CtVal ns;
            if (!lookup(r, n->a->name, n->a->name_len, &ns) || ns.k != V_NS)
                return ct_rerr(r, n, "'%s' is not a namespace: cannot set its attribute '%s'", n->a->name, n->name);
            ct_dict_set(r->a, ns.u.d, n->name, n->name_len, v);
        } else {
            set_var(r, n->a->name, n->a->name_len, v);
        }
        return 0;
    case N_SETBLOCK: {
        GtBytes buf = {0}, *saved = r->out;
        r->out = &buf;
        int rc = exec(r, n->b);
        r->out = saved;
        if (!rc) set_var(r, n->a->name, n->a->name_len, ct_strv(ct_strndup(r->a, buf.p ? buf.p : "", buf.n), buf.n));
        gt_bytes_free(&buf);
        return rc;
    }
    case N_MACRO: set_var(r, n->name, n->name_len, (CtVal){.k = V_MACRO, .u.macro = n}); return 0;
    case N_BREAK: r->ctl = 1; return 0;
    case N_CONTINUE: r->ctl = 2; return 0;
    case N_GENERATION: {
        size_t start = r->out->n;
        if (exec(r, n->a)) return -1;
        if (r->out == r->main) {
            if (r->n_gen == r->cap_gen) {
                r->cap_gen = r->cap_gen ? 2 * r->cap_gen : 8;
                r->gen = gt_xrealloc(r->gen, r->cap_gen * sizeof *r->gen);
            }
            r->gen[r->n_gen++] = (ChatSpan){start, r->main->n};
        }
        return 0;
    }
    default: return ct_rerr(r, n, "not a statement");
    }
}

static int eval(CtRender *r, const CtNode *n, CtVal *out) {
    if (r->depth >= CT_MAX_EVAL_DEPTH) return ct_rerr(r, n, "the template nests deeper than %d", CT_MAX_EVAL_DEPTH);
    r->depth++;
    int rc = eval_node(r, n, out);
    r->depth--;
    return rc;
}

static int exec(CtRender *r, const CtNode *n) {
    if (r->depth >= CT_MAX_EVAL_DEPTH) return ct_rerr(r, n, "the template nests deeper than %d", CT_MAX_EVAL_DEPTH);
    r->depth++;
    int rc = exec_node(r, n);
    r->depth--;
    return rc;
}

int ct_run(CtRender *r, const CtNode *root) {
    r->ctl = 0;
    return exec(r, root);
}
