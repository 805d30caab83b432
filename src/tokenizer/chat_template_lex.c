/* chat_template_lex.c - a chat template's source to tokens: text, {{ }}, {% %} and {# #} with Jinja's
 * whitespace control ({%- -%} {%+ +%}) and transformers' trim_blocks and lstrip_blocks; inside tags,
 * names, numbers, string literals (Python's escapes) and operators, with brackets balanced. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>

#include "chat_template_internal.h"

/* ---- errors ---- */

void ct_line_col(CtParser *p, size_t off, int *line, int *col) {
    if (off < p->lc_off || !p->lc_line) {
        p->lc_off = 0;
        p->lc_line = p->lc_col = 1;
    }
    int l = p->lc_line, c = p->lc_col;
    for (size_t i = p->lc_off; i < off && i < p->len; i++) {
        if (p->src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)p->src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    p->lc_off = off < p->len ? off : p->len;
    p->lc_line = l;
    p->lc_col = c;
    *line = l;
    *col = c;
}

int ct_perr(CtParser *p, size_t off, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    ct_line_col(p, off, &line, &col);
    return gt_error(p->err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s", p->name, line, col, msg);
}

/* ---- lexer ---- */

static Tok *push_tok(CtParser *p, uint8_t kind, size_t off) {
    if (p->nt == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        p->t = gt_xrealloc(p->t, p->cap * sizeof *p->t);
    }
    Tok *t = &p->t[p->nt++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->off = off;
    return t;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1f);
}
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void put_utf8(GtBytes *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    gt_bytes_put(b, u, n);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal at src[*i] (the quote); Python's escapes as Jinja decodes them. */
static int lex_string(CtParser *p, size_t *i) {
    size_t start = *i;
    char q = p->src[*i];
    GtBytes b = {0};
    size_t j = *i + 1;
    for (;;) {
        if (j >= p->len) {
            gt_bytes_free(&b);
            return ct_perr(p, start, "unterminated string literal");
        }
        char c = p->src[j];
        if (c == q) break;
        if (c == '\r') { /* Jinja normalises newlines in literals */
            gt_bytes_put(&b, "\n", 1);
            j += (j + 1 < p->len && p->src[j + 1] == '\n') ? 2 : 1;
            continue;
        }
        if (c != '\\') {
            gt_bytes_put(&b, &c, 1);
            j++;
            continue;
        }
        if (j + 1 >= p->len) continue; /* reported as unterminated */
        char e = p->src[j + 1];
        const char *simple = NULL;
        switch (e) {
        case 'n': simple = "\n"; break;
        case 't': simple = "\t"; break;
        case 'r': simple = "\r"; break;
        case '\\': simple = "\\"; break;
        case '\'': simple = "'"; break;
        case '"': simple = "\""; break;
        case 'a': simple = "\a"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'v': simple = "\v"; break;
        case '\n': simple = ""; break;
        default: break;
        }
        if (simple) {
            gt_bytes_put(&b, simple, strlen(simple));
            j += 2;
            continue;
        }
        if (e == 'x' || e == 'u' || e == 'U') {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = j + 2 + (size_t)k < p->len ? hexval(p->src[j + 2 + k]) : -1;
                if (h < 0) {
                    gt_bytes_free(&b);
                    return ct_perr(p, j, "truncated \\%c escape in a string literal", e);
                }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                gt_bytes_free(&b);
                return ct_perr(p, j, "escape \\%c gives no Unicode scalar value", e);
            }
            put_utf8(&b, cp);
            j += 2 + (size_t)nd;
            continue;
        }
        if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            size_t k = j + 1;
            for (int m = 0; m < 3 && k < p->len && p->src[k] >= '0' && p->src[k] <= '7'; m++, k++)
                cp = cp * 8 + (uint32_t)(p->src[k] - '0');
            put_utf8(&b, cp);
            j = k;
            continue;
        }
        if (e == 'N') {
            gt_bytes_free(&b);
            return ct_perr(p, j, "the \\N{...} escape is outside the supported template subset");
        }
        gt_bytes_put(&b, "\\", 1); /* an unknown escape stays as written */
        j++;
    }
    Tok *t = push_tok(p, T_STRING, start);
    t->p = ct_strndup(p->arena, b.p ? b.p : "", b.n);
    t->n = b.n;
    gt_bytes_free(&b);
    *i = j + 1;
    return 0;
}

static const char *const OPS3[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char OPS1[] = "+-*/%~()[]{},.:|=<>!";

/* Tokens inside {{ }} or {% %} up to the matching end; *i is just past the opening tag. */
static int lex_tag(CtParser *p, size_t *i, size_t open_off, bool block, bool *strip_after, bool *ends_line) {
    char stack[CT_MAX_DEPTH];
    int sp = 0;
    size_t j = *i;
    const char endc = block ? '%' : '}';
    for (;;) {
        while (j < p->len && is_space(p->src[j])) j++;
        if (j >= p->len) return ct_perr(p, open_off, "unclosed %s tag", block ? "{%" : "{{");
        char c = p->src[j];
        if (sp == 0) {
            size_t k = j;
            bool minus = false, plus = false;
            if ((c == '-' || c == '+') && k + 2 < p->len + 0 && p->src[k + 1] == endc && p->src[k + 2] == '}') {
                minus = c == '-';
                plus = c == '+';
                k++;
            }
            if (k + 1 < p->len && p->src[k] == endc && p->src[k + 1] == '}') {
                push_tok(p, block ? T_BLOCK_END : T_VAR_END, j);
                k += 2;
                *ends_line = false;
                if (minus) {
                    while (k < p->len && is_space(p->src[k])) {
                        *ends_line = p->src[k] == '\n';
                        k++;
                    }
                    *strip_after = false;
                } else if (block && !plus && k < p->len && p->src[k] == '\n') {
                    k++;
                    *ends_line = true;
                }
                (void)plus;
                *i = k;
                return 0;
            }
        }
        if (is_name_start(c)) {
            size_t k = j;
            while (k < p->len && (is_name_start(p->src[k]) || is_digit(p->src[k]))) k++;
            Tok *t = push_tok(p, T_NAME, j);
            t->p = p->src + j;
            t->n = k - j;
            j = k;
        } else if (is_digit(c)) {
            size_t k = j;
            bool flt = false;
            while (k < p->len && (is_digit(p->src[k]) || p->src[k] == '_')) k++;
            if (k + 1 < p->len && p->src[k] == '.' && is_digit(p->src[k + 1])) {
                flt = true;
                k++;
                while (k < p->len && (is_digit(p->src[k]) || p->src[k] == '_')) k++;
            }
            if (k < p->len && (p->src[k] == 'e' || p->src[k] == 'E')) {
                size_t m = k + 1;
                if (m < p->len && (p->src[m] == '+' || p->src[m] == '-')) m++;
                if (m < p->len && is_digit(p->src[m])) {
                    flt = true;
                    k = m;
                    while (k < p->len && is_digit(p->src[k])) k++;
                }
            }
            char buf[128];
            size_t bn = 0;
            for (size_t m = j; m < k && bn + 1 < sizeof buf; m++)
                if (p->src[m] != '_') buf[bn++] = p->src[m];
            buf[bn] = 0;
            if (k - j >= sizeof buf) return ct_perr(p, j, "number literal too long");
            Tok *t = push_tok(p, flt ? T_FLOAT : T_INT, j);
            errno = 0;
            if (flt) {
                t->f = strtod(buf, NULL);
            } else {
                t->i = strtoll(buf, NULL, 10);
                if (errno == ERANGE) return ct_perr(p, j, "integer literal out of the 64-bit range");
            }
            j = k;
        } else if (c == '\'' || c == '"') {
            if (lex_string(p, &j)) return -1;
        } else {
            size_t n = 0;
            for (int k = 0; OPS3[k]; k++)
                if (j + 1 < p->len && p->src[j] == OPS3[k][0] && p->src[j + 1] == OPS3[k][1]) n = 2;
            if (!n && strchr(OPS1, c) && c) n = 1;
            if (!n) return ct_perr(p, j, "unexpected character '%c' in a tag", c);
            if (n == 1 && (c == '(' || c == '[' || c == '{')) {
                if (sp == CT_MAX_DEPTH) return ct_perr(p, j, "brackets nested too deep");
                stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
                if (sp == 0 || stack[sp - 1] != c) return ct_perr(p, j, "unbalanced '%c'", c);
                sp--;
            }
            Tok *t = push_tok(p, T_OP, j);
            t->p = p->src + j;
            t->n = n;
            j += n;
        }
    }
}

int ct_lex(CtParser *p) {
    size_t i = 0;
    bool strip_next = false, line_starting = true;
    while (i <= p->len) {
        /* the next tag opening */
        size_t k = i;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        while (k + 1 < p->len) {
            if (p->src[k] == '{' && (p->src[k + 1] == '{' || p->src[k + 1] == '%' || p->src[k + 1] == '#')) {
                kind = p->src[k + 1] == '{' ? 1 : p->src[k + 1] == '%' ? 2 : 3;
                break;
            }
            k++;
        }
        if (!kind) k = p->len;
        const char *text = p->src + i;
        size_t tn = k - i;
        if (strip_next) {
            while (tn && is_space(*text)) {
                text++;
                tn--;
            }
        }
        char sign = kind && k + 2 < p->len ? p->src[k + 2] : 0;
        if (kind && sign == '-') {
            while (tn && is_space(text[tn - 1])) tn--;
        } else if (kind >= 2 && sign != '+') { /* lstrip_blocks */
            size_t l = tn;
            while (l && text[l - 1] != '\n') l--;
            if (l > 0 || line_starting) {
                bool ws = l < tn;
                for (size_t m = l; m < tn; m++)
                    if (!is_space(text[m])) ws = false;
                if (ws) tn = l;
            }
        }
        if (tn) {
            Tok *t = push_tok(p, T_TEXT, (size_t)(text - p->src));
            t->p = text;
            t->n = tn;
        }
        if (!kind) break;
        size_t j = k + 2 + (sign == '-' || sign == '+' ? 1 : 0);
        strip_next = false;
        bool ends_line = false;
        if (kind == 3) {
            size_t e = j;
            while (e + 1 < p->len && !(p->src[e] == '#' && p->src[e + 1] == '}')) e++;
            if (e + 1 >= p->len) return ct_perr(p, k, "unclosed comment");
            bool minus = e > j && p->src[e - 1] == '-', plus = e > j && p->src[e - 1] == '+';
            e += 2;
            if (minus) {
                while (e < p->len && is_space(p->src[e])) {
                    ends_line = p->src[e] == '\n';
                    e++;
                }
            } else if (!plus && e < p->len && p->src[e] == '\n') {
                e++;
                ends_line = true;
            }
            i = e;
        } else {
            push_tok(p, kind == 1 ? T_VAR_BEGIN : T_BLOCK_BEGIN, k);
            i = j;
            if (lex_tag(p, &i, k, kind == 2, &strip_next, &ends_line)) return -1;
            /* "-%}" consumed the whitespace already; nothing left to strip */
        }
        line_starting = ends_line;
    }
    push_tok(p, T_EOF, p->len);
    return 0;
}

