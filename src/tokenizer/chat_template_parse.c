/* chat_template_parse.c - a chat template's source to its syntax tree: the lexer (text, {{ }}, {% %},
 * {# #}, whitespace control with trim_blocks and lstrip_blocks as transformers sets them) and a
 * recursive-descent parser for the Jinja subset chat templates use. What the subset leaves out is
 * refused here with "name:line:col: ..." naming the construct. */
#include <stdlib.h>

#include "chat_template_internal.h"

/* ---- parser ---- */

static Tok *cur(CtParser *p) { return &p->t[p->pos]; }
static bool is_op(const Tok *t, const char *op) { return t->kind == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n); }
static bool is_name(const Tok *t, const char *nm) {
    return t->kind == T_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}
static const char *tok_desc(const Tok *t, char *buf, size_t cap) {
    switch (t->kind) {
    case T_EOF: return "end of template";
    case T_TEXT: return "template text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}
static int expect_op(CtParser *p, const char *op) {
    if (!is_op(cur(p), op)) {
        char b[64];
        return ct_perr(p, cur(p)->off, "expected '%s', found %s", op, tok_desc(cur(p), b, sizeof b));
    }
    p->pos++;
    return 0;
}

static CtNode *node(CtParser *p, uint8_t kind, size_t off) {
    CtNode *n = ct_alloc(p->arena, sizeof *n);
    n->kind = kind;
    ct_line_col(p, off, &n->line, &n->col);
    return n;
}
static void add_kid(CtParser *p, CtNode *n, CtNode *k, const char *kw) {
    CtNode **kids = ct_alloc(p->arena, (n->n_kids + 1) * sizeof *kids);
    const char **kws = ct_alloc(p->arena, (n->n_kids + 1) * sizeof *kws);
    if (n->n_kids) {
        memcpy(kids, n->kids, n->n_kids * sizeof *kids);
        memcpy(kws, n->kw, n->n_kids * sizeof *kws);
    }
    kids[n->n_kids] = k;
    kws[n->n_kids] = kw;
    n->kids = kids;
    n->kw = kws;
    n->n_kids++;
}

static CtNode *parse_expr(CtParser *p, bool condexpr);

static int enter(CtParser *p) {
    if (++p->depth > CT_MAX_DEPTH) return ct_perr(p, cur(p)->off, "template nested deeper than %d", CT_MAX_DEPTH);
    return 0;
}

/* (args) of a call, filter or test: positional then keyword arguments */
static int parse_args(CtParser *p, CtNode *n) {
    if (expect_op(p, "(")) return -1;
    while (!is_op(cur(p), ")")) {
        if (is_op(cur(p), "*") || is_op(cur(p), "**"))
            return ct_perr(p, cur(p)->off, "*args and **kwargs are outside the supported template subset");
        const char *kw = NULL;
        if (cur(p)->kind == T_NAME && is_op(&p->t[p->pos + 1], "=")) {
            kw = ct_strndup(p->arena, cur(p)->p, cur(p)->n);
            p->pos += 2;
        }
        CtNode *a = parse_expr(p, true);
        if (!a) return -1;
        add_kid(p, n, a, kw);
        if (!is_op(cur(p), ",")) break;
        p->pos++;
    }
    return expect_op(p, ")");
}

static CtNode *parse_primary(CtParser *p) {
    Tok *t = cur(p);
    CtNode *n;
    char b[64];
    if (t->kind == T_NAME) {
        p->pos++;
        n = node(p, N_LIT, t->off);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = (CtVal){.k = V_BOOL, .u.b = true};
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = (CtVal){.k = V_BOOL, .u.b = false};
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = (CtVal){.k = V_NONE};
        else {
            n->kind = N_NAME;
            n->name = ct_strndup(p->arena, t->p, t->n);
            n->name_len = t->n;
        }
        return n;
    }
    if (t->kind == T_STRING) {
        GtBytes s = {0};
        while (cur(p)->kind == T_STRING) { /* adjacent literals join */
            gt_bytes_put(&s, cur(p)->p, cur(p)->n);
            p->pos++;
        }
        n = node(p, N_LIT, t->off);
        n->lit = ct_strv(ct_strndup(p->arena, s.p ? s.p : "", s.n), s.n);
        gt_bytes_free(&s);
        return n;
    }
    if (t->kind == T_INT || t->kind == T_FLOAT) {
        p->pos++;
        n = node(p, N_LIT, t->off);
        n->lit = t->kind == T_INT ? (CtVal){.k = V_INT, .u.i = t->i} : (CtVal){.k = V_FLOAT, .u.f = t->f};
        return n;
    }
    if (is_op(t, "(")) {
        p->pos++;
        if (is_op(cur(p), ")")) {
            p->pos++;
            return node(p, N_TUPLE, t->off);
        }
        CtNode *e = parse_expr(p, true);
        if (!e) return NULL;
        if (is_op(cur(p), ",")) {
            CtNode *tu = node(p, N_TUPLE, t->off);
            add_kid(p, tu, e, NULL);
            while (is_op(cur(p), ",")) {
                p->pos++;
                if (is_op(cur(p), ")")) break;
                CtNode *x = parse_expr(p, true);
                if (!x) return NULL;
                add_kid(p, tu, x, NULL);
            }
            e = tu;
        }
        return expect_op(p, ")") ? NULL : e;
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        bool dict = is_op(t, "{");
        p->pos++;
        n = node(p, dict ? N_DICTLIT : N_LISTLIT, t->off);
        CtNode *keys = dict ? node(p, N_TUPLE, t->off) : NULL;
        while (!is_op(cur(p), dict ? "}" : "]")) {
            CtNode *e = parse_expr(p, true);
            if (!e) return NULL;
            if (dict) {
                if (expect_op(p, ":")) return NULL;
                CtNode *v = parse_expr(p, true);
                if (!v) return NULL;
                add_kid(p, keys, e, NULL);
                add_kid(p, n, v, NULL);
            } else {
                add_kid(p, n, e, NULL);
            }
            if (!is_op(cur(p), ",")) break;
            p->pos++;
        }
        if (expect_op(p, dict ? "}" : "]")) return NULL;
        n->a = keys;
        return n;
    }
    ct_perr(p, t->off, "expected an expression, found %s", tok_desc(t, b, sizeof b));
    return NULL;
}

static CtNode *parse_subscript(CtParser *p, CtNode *obj, size_t off) {
    /* obj[ ... ]: an index or a slice a:b:c */
    CtNode *parts[3] = {NULL, NULL, NULL};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(cur(p), ":") && !is_op(cur(p), "]")) {
            parts[np] = parse_expr(p, true);
            if (!parts[np]) return NULL;
        }
        if (is_op(cur(p), ":") && np < 2) {
            slice = true;
            np++;
            p->pos++;
            continue;
        }
        break;
    }
    if (expect_op(p, "]")) return NULL;
    CtNode *n = node(p, slice ? N_SLICE : N_ITEM, off);
    n->a = obj;
    if (slice) {
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0]) {
            ct_perr(p, off, "expected an index inside [ ]");
            return NULL;
        }
        n->b = parts[0];
    }
    return n;
}

static CtNode *parse_postfix_filters(CtParser *p, CtNode *n, bool with_filter) {
    for (;;) {
        Tok *t = cur(p);
        if (is_op(t, ".")) {
            p->pos++;
            Tok *a = cur(p);
            if (a->kind == T_NAME) {
                CtNode *m = node(p, N_ATTR, a->off);
                m->a = n;
                m->name = ct_strndup(p->arena, a->p, a->n);
                m->name_len = a->n;
                p->pos++;
                n = m;
            } else if (a->kind == T_INT) {
                CtNode *m = node(p, N_ITEM, a->off), *ix = node(p, N_LIT, a->off);
                ix->lit = (CtVal){.k = V_INT, .u.i = a->i};
                m->a = n;
                m->b = ix;
                p->pos++;
                n = m;
            } else {
                char b[64];
                ct_perr(p, a->off, "expected an attribute name after '.', found %s", tok_desc(a, b, sizeof b));
                return NULL;
            }
        } else if (is_op(t, "[")) {
            p->pos++;
            n = parse_subscript(p, n, t->off);
            if (!n) return NULL;
        } else if (is_op(t, "(")) {
            CtNode *c = node(p, N_CALL, t->off);
            c->a = n;
            if (parse_args(p, c)) return NULL;
            n = c;
        } else if (with_filter && is_op(t, "|")) {
            p->pos++;
            Tok *f = cur(p);
            if (f->kind != T_NAME) {
                char b[64];
                ct_perr(p, f->off, "expected a filter name after '|', found %s", tok_desc(f, b, sizeof b));
                return NULL;
            }
            CtNode *m = node(p, N_FILTER, f->off);
            m->a = n;
            m->name = ct_strndup(p->arena, f->p, f->n);
            m->name_len = f->n;
            p->pos++;
            if (is_op(cur(p), "(") && parse_args(p, m)) return NULL;
            n = m;
        } else if (with_filter && is_name(t, "is")) {
            p->pos++;
            bool neg = false;
            if (is_name(cur(p), "not")) {
                neg = true;
                p->pos++;
            }
            Tok *f = cur(p);
            if (f->kind != T_NAME) {
                char b[64];
                ct_perr(p, f->off, "expected a test name after 'is', found %s", tok_desc(f, b, sizeof b));
                return NULL;
            }
            CtNode *m = node(p, N_TEST, f->off);
            m->a = n;
            m->neg = neg;
            m->name = ct_strndup(p->arena, f->p, f->n);
            m->name_len = f->n;
            p->pos++;
            Tok *x = cur(p);
            if (is_op(x, "(")) {
                if (parse_args(p, m)) return NULL;
            } else if ((x->kind == T_NAME || x->kind == T_STRING || x->kind == T_INT || x->kind == T_FLOAT ||
                        is_op(x, "[") || is_op(x, "{")) &&
                       !is_name(x, "else") && !is_name(x, "or") && !is_name(x, "and")) { /* as Jinja decides */
                CtNode *arg = parse_primary(p);
                if (!arg) return NULL;
                arg = parse_postfix_filters(p, arg, false);
                if (!arg) return NULL;
                add_kid(p, m, arg, NULL);
            }
            n = m;
        } else {
            return n;
        }
    }
}

static CtNode *parse_unary(CtParser *p, bool with_filter) {
    Tok *t = cur(p);
    CtNode *n;
    if (enter(p)) return NULL;
    if (is_op(t, "-") || is_op(t, "+")) {
        p->pos++;
        n = node(p, is_op(t, "-") ? N_NEG : N_POS, t->off);
        n->a = parse_unary(p, false);
        if (!n->a) return NULL;
    } else {
        n = parse_primary(p);
        if (!n) return NULL;
    }
    p->depth--;
    return parse_postfix_filters(p, n, with_filter);
}

static CtNode *binary(CtParser *p, uint8_t kind, uint8_t op, size_t off, CtNode *a, CtNode *b) {
    if (!a || !b) return NULL;
    CtNode *n = node(p, kind, off);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* The left-associative binary operators, loosest first; each level's operands are the next level's
 * (the comparisons, a chain, and `not` sit between `and` and `+`). */
typedef struct {
    const char *tok;
    bool name; /* a keyword (`or`), not an operator token */
    uint8_t kind, op;
} BinOp;
enum { LV_OR, LV_AND, LV_ADD, LV_CAT, LV_MUL, LV_POW, LV_N };
static const BinOp LEVEL_OPS[LV_N][5] = {
    [LV_OR] = {{"or", true, N_OR, 0}},
    [LV_AND] = {{"and", true, N_AND, 0}},
    [LV_ADD] = {{"+", false, N_BIN, OP_ADD}, {"-", false, N_BIN, OP_SUB}},
    [LV_CAT] = {{"~", false, N_BIN, OP_CAT}},
    [LV_MUL] = {{"*", false, N_BIN, OP_MUL}, {"/", false, N_BIN, OP_DIV}, {"//", false, N_BIN, OP_FLOORDIV},
                {"%", false, N_BIN, OP_MOD}},
    [LV_POW] = {{"**", false, N_BIN, OP_POW}},
};
static CtNode *parse_not(CtParser *p);
static CtNode *parse_binary(CtParser *p, int level);
static CtNode *parse_operand(CtParser *p, int level) {
    return level == LV_POW ? parse_unary(p, true) : level == LV_AND ? parse_not(p) : parse_binary(p, level + 1);
}
static CtNode *parse_binary(CtParser *p, int level) {
    CtNode *n = parse_operand(p, level);
    for (;;) {
        Tok *t = cur(p);
        const BinOp *o = LEVEL_OPS[level];
        while (o->tok && !(o->name ? is_name(t, o->tok) : is_op(t, o->tok))) o++;
        if (!n || !o->tok) return n;
        p->pos++;
        n = binary(p, o->kind, o->op, t->off, n, parse_operand(p, level));
    }
}
static CtNode *parse_compare(CtParser *p) {
    CtNode *n = parse_binary(p, LV_ADD), *left = n, *chain = NULL;
    for (;;) {
        Tok *t = cur(p);
        uint8_t op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
                   : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 255;
        if (op == 255 && is_name(t, "not") && is_name(&p->t[p->pos + 1], "in")) {
            op = OP_NOTIN;
            p->pos++;
        }
        if (!left || op == 255) return chain ? chain : left;
        p->pos++;
        CtNode *right = parse_binary(p, LV_ADD);
        CtNode *cmp = binary(p, N_BIN, op, t->off, left, right);
        if (!cmp) return NULL;
        chain = chain ? binary(p, N_AND, 0, t->off, chain, cmp) : cmp; /* a < b < c: (a < b) and (b < c) */
        left = right;
    }
}
static CtNode *parse_not(CtParser *p) {
    Tok *t = cur(p);
    if (is_name(t, "not")) {
        p->pos++;
        if (enter(p)) return NULL;
        CtNode *n = node(p, N_NOT, t->off);
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}
static CtNode *parse_expr(CtParser *p, bool condexpr) {
    if (enter(p)) return NULL;
    CtNode *n = parse_binary(p, LV_OR);
    while (n && condexpr && is_name(cur(p), "if")) {
        CtNode *c = node(p, N_COND, cur(p)->off);
        p->pos++;
        c->b = n;
        c->a = parse_binary(p, LV_OR);
        if (!c->a) return NULL;
        if (is_name(cur(p), "else")) {
            p->pos++;
            c->c = parse_expr(p, true);
            if (!c->c) return NULL;
        }
        n = c;
    }
    p->depth--;
    return n;
}


/* ---- statements ---- */

static int expect_block_end(CtParser *p) {
    if (cur(p)->kind != T_BLOCK_END) {
        char b[64];
        return ct_perr(p, cur(p)->off, "expected '%%}', found %s", tok_desc(cur(p), b, sizeof b));
    }
    p->pos++;
    return 0;
}

/* Statements up to a {% NAME %} with NAME one of ends (NULL-terminated); p->pos is left on that name. */
static CtNode *parse_body(CtParser *p, const char *const *ends, const char *opener, size_t open_off);

static CtNode *parse_if(CtParser *p, size_t off) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (enter(p)) return NULL; /* an elif is an if inside the else */
    CtNode *n = node(p, N_IF, off);
    n->a = parse_expr(p, true);
    if (!n->a || expect_block_end(p)) return NULL;
    n->b = parse_body(p, ends, "if", off);
    if (!n->b) return NULL;
    Tok *t = cur(p);
    p->pos++;
    if (is_name(t, "elif")) {
        n->c = parse_if(p, t->off);
        p->depth--;
        return n->c ? n : NULL;
    }
    if (is_name(t, "else")) {
        static const char *const endif[] = {"endif", NULL};
        if (expect_block_end(p)) return NULL;
        n->c = parse_body(p, endif, "if", off);
        if (!n->c) return NULL;
        p->pos++;
    }
    p->depth--;
    return expect_block_end(p) ? NULL : n;
}

static CtNode *parse_target(CtParser *p) {
    /* a name, or names separated by commas (optionally in parentheses) */
    bool paren = is_op(cur(p), "(");
    if (paren) p->pos++;
    CtNode *tu = node(p, N_TUPLE, cur(p)->off);
    for (;;) {
        Tok *t = cur(p);
        if (t->kind != T_NAME) {
            char b[64];
            ct_perr(p, t->off, "expected a loop variable name, found %s", tok_desc(t, b, sizeof b));
            return NULL;
        }
        CtNode *nm = node(p, N_NAME, t->off);
        nm->name = ct_strndup(p->arena, t->p, t->n);
        nm->name_len = t->n;
        add_kid(p, tu, nm, NULL);
        p->pos++;
        if (!is_op(cur(p), ",")) break;
        p->pos++;
    }
    if (paren && expect_op(p, ")")) return NULL;
    return tu->n_kids == 1 && !paren ? tu->kids[0] : tu;
}

static CtNode *parse_for(CtParser *p, size_t off) {
    static const char *const ends[] = {"else", "endfor", NULL};
    CtNode *n = node(p, N_FOR, off);
    n->a = parse_target(p);
    if (!n->a) return NULL;
    if (!is_name(cur(p), "in")) {
        char b[64];
        ct_perr(p, cur(p)->off, "expected 'in' in the for tag, found %s", tok_desc(cur(p), b, sizeof b));
        return NULL;
    }
    p->pos++;
    n->b = parse_expr(p, false);
    if (!n->b) return NULL;
    if (is_name(cur(p), "if")) {
        p->pos++;
        CtNode *f = parse_expr(p, false);
        if (!f) return NULL;
        add_kid(p, n, f, NULL);
    }
    if (is_name(cur(p), "recursive")) {
        ct_perr(p, cur(p)->off, "recursive for loops are outside the supported template subset");
        return NULL;
    }
    if (expect_block_end(p)) return NULL;
    n->c = parse_body(p, ends, "for", off);
    if (!n->c) return NULL;
    if (is_name(cur(p), "else")) {
        static const char *const endfor[] = {"endfor", NULL};
        p->pos++;
        if (expect_block_end(p)) return NULL;
        n->d = parse_body(p, endfor, "for", off);
        if (!n->d) return NULL;
    }
    p->pos++;
    return expect_block_end(p) ? NULL : n;
}

static CtNode *parse_set(CtParser *p, size_t off) {
    Tok *t = cur(p);
    char b[64];
    if (t->kind != T_NAME) {
        ct_perr(p, t->off, "expected a variable name after 'set', found %s", tok_desc(t, b, sizeof b));
        return NULL;
    }
    CtNode *n = node(p, N_SET, off);
    CtNode *target = node(p, N_NAME, t->off);
    target->name = ct_strndup(p->arena, t->p, t->n);
    target->name_len = t->n;
    p->pos++;
    if (is_op(cur(p), ".")) { /* ns.attr */
        p->pos++;
        Tok *a = cur(p);
        if (a->kind != T_NAME) {
            ct_perr(p, a->off, "expected an attribute name after '.', found %s", tok_desc(a, b, sizeof b));
            return NULL;
        }
        n->name = ct_strndup(p->arena, a->p, a->n);
        n->name_len = a->n;
        p->pos++;
    } else if (is_op(cur(p), ",")) {
        ct_perr(p, cur(p)->off, "setting several variables at once is outside the supported template subset");
        return NULL;
    }
    n->a = target;
    if (cur(p)->kind == T_BLOCK_END && !n->name) { /* {% set x %}...{% endset %} */
        static const char *const ends[] = {"endset", NULL};
        p->pos++;
        n->kind = N_SETBLOCK;
        n->b = parse_body(p, ends, "set", off);
        if (!n->b) return NULL;
        p->pos++;
        return expect_block_end(p) ? NULL : n;
    }
    if (expect_op(p, "=")) return NULL;
    n->b = parse_expr(p, true);
    if (n->b && is_op(cur(p), ",")) {
        ct_perr(p, cur(p)->off, "a tuple on the right of set is outside the supported template subset");
        return NULL;
    }
    return !n->b || expect_block_end(p) ? NULL : n;
}

static CtNode *parse_macro(CtParser *p, size_t off) {
    static const char *const ends[] = {"endmacro", NULL};
    Tok *t = cur(p);
    char b[64];
    if (t->kind != T_NAME) {
        ct_perr(p, t->off, "expected a macro name, found %s", tok_desc(t, b, sizeof b));
        return NULL;
    }
    CtNode *n = node(p, N_MACRO, off);
    n->name = ct_strndup(p->arena, t->p, t->n);
    n->name_len = t->n;
    p->pos++;
    if (expect_op(p, "(")) return NULL;
    while (!is_op(cur(p), ")")) {
        Tok *a = cur(p);
        if (a->kind != T_NAME) {
            ct_perr(p, a->off, "expected a macro parameter name, found %s", tok_desc(a, b, sizeof b));
            return NULL;
        }
        CtNode *param = node(p, N_NAME, a->off);
        param->name = ct_strndup(p->arena, a->p, a->n);
        param->name_len = a->n;
        p->pos++;
        if (is_op(cur(p), "=")) {
            p->pos++;
            param->a = parse_expr(p, true);
            if (!param->a) return NULL;
        }
        add_kid(p, n, param, NULL);
        if (!is_op(cur(p), ",")) break;
        p->pos++;
    }
    if (expect_op(p, ")") || expect_block_end(p)) return NULL;
    n->b = parse_body(p, ends, "macro", off);
    if (!n->b) return NULL;
    p->pos++;
    return expect_block_end(p) ? NULL : n;
}

static CtNode *parse_statement(CtParser *p) {
    Tok *t = cur(p);
    size_t off = t->off;
    char b[64];
    if (t->kind != T_NAME) {
        ct_perr(p, t->off, "expected a statement name after '{%%', found %s", tok_desc(t, b, sizeof b));
        return NULL;
    }
    p->pos++;
    if (is_name(t, "if")) return parse_if(p, off);
    if (is_name(t, "for")) return parse_for(p, off);
    if (is_name(t, "set")) return parse_set(p, off);
    if (is_name(t, "macro")) return parse_macro(p, off);
    if (is_name(t, "break") || is_name(t, "continue")) {
        CtNode *n = node(p, is_name(t, "break") ? N_BREAK : N_CONTINUE, off);
        return expect_block_end(p) ? NULL : n;
    }
    if (is_name(t, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        CtNode *n = node(p, N_GENERATION, off);
        if (expect_block_end(p)) return NULL;
        p->has_generation = true;
        n->a = parse_body(p, ends, "generation", off);
        if (!n->a) return NULL;
        p->pos++;
        return expect_block_end(p) ? NULL : n;
    }
    static const char *const known[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration",
                                        NULL};
    for (int k = 0; known[k]; k++)
        if (is_name(t, known[k])) {
            ct_perr(p, off, "unexpected '%s' with no block open for it", known[k]);
            return NULL;
        }
    ct_perr(p, off, "the '%.*s' tag is outside the supported template subset", (int)(t->n > 40 ? 40 : t->n), t->p);
    return NULL;
}

static CtNode *parse_body(CtParser *p, const char *const *ends, const char *opener, size_t open_off) {
    if (enter(p)) return NULL;
    CtNode *body = node(p, N_BODY, cur(p)->off);
    for (;;) {
        Tok *t = cur(p);
        if (t->kind == T_EOF) {
            if (!ends) break;
            const char *closer = ends[0];
            for (int k = 0; ends[k]; k++)
                if (!strncmp(ends[k], "end", 3)) closer = ends[k];
            ct_perr(p, open_off, "the '%s' block is never closed (expected '%s')", opener, closer);
            return NULL;
        }
        if (t->kind == T_TEXT) {
            CtNode *n = node(p, N_TEXT, t->off);
            n->name = t->p;
            n->name_len = t->n;
            add_kid(p, body, n, NULL);
            p->pos++;
        } else if (t->kind == T_VAR_BEGIN) {
            p->pos++;
            CtNode *n = node(p, N_OUT, t->off);
            n->a = parse_expr(p, true);
            if (!n->a) return NULL;
            if (cur(p)->kind != T_VAR_END) {
                char b[64];
                ct_perr(p, cur(p)->off, "expected '}}', found %s", tok_desc(cur(p), b, sizeof b));
                return NULL;
            }
            p->pos++;
            add_kid(p, body, n, NULL);
        } else if (t->kind == T_BLOCK_BEGIN) {
            Tok *nm = &p->t[p->pos + 1];
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(nm, ends[k])) {
                    p->pos++;
                    p->depth--;
                    return body;
                }
            p->pos++;
            CtNode *n = parse_statement(p);
            if (!n) return NULL;
            add_kid(p, body, n, NULL);
        } else {
            char b[64];
            ct_perr(p, t->off, "unexpected %s", tok_desc(t, b, sizeof b));
            return NULL;
        }
    }
    p->depth--;
    return body;
}

int chat_template_parse(ChatTemplate **out, const char *source, size_t len, const char *name, GtError *err) {
    *out = NULL;
    ChatTemplate *t = gt_xcalloc(1, sizeof *t);
    t->name = gt_xstrdup(name ? name : "chat template");
    /* as Jinja reads a source: \r\n and \r become \n, and one trailing newline goes (keep_trailing_newline
     * is off); the tree's text points into this copy */
    char *src = ct_alloc(&t->arena, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else {
            src[n++] = source[i];
        }
    }
    if (n && src[n - 1] == '\n') n--;
    CtParser p = {.src = src, .len = n, .name = t->name, .arena = &t->arena, .err = err};
    int rc = 0;
    if (memchr(src, 0, n)) {
        rc = ct_perr(&p, (size_t)((const char *)memchr(src, 0, n) - src), "a NUL byte in the template");
    } else if (ct_lex(&p)) {
        rc = -1;
    } else {
        t->root = parse_body(&p, NULL, NULL, 0);
        if (!t->root) rc = -1;
    }
    free(p.t);
    if (rc) {
        chat_template_free(t);
        return -1;
    }
    t->has_generation = p.has_generation;
    if (chat_template_check(t, err)) {
        chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void chat_template_free(ChatTemplate *t) {
    if (!t) return;
    ct_arena_free(&t->arena);
    free(t->name);
    free(t);
}
