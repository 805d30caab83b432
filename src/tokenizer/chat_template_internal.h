/* chat_template_internal.h - what the chat template's parser, values and renderer share: the arena,
 * the values (Python's as Jinja sees them), the syntax tree and the limits that keep a hostile template
 * from running away (nesting, loop iterations, output size, memory). */
#ifndef GT_CHAT_TEMPLATE_INTERNAL_H
#define GT_CHAT_TEMPLATE_INTERNAL_H

#include <stdint.h>

#include "chat_template.h"

#define CT_MAX_DEPTH 200              /* nesting of blocks and expressions in the source */
#define CT_MAX_CALL_DEPTH 64          /* macro calls inside macro calls */
#define CT_MAX_ITERATIONS 200000      /* loop iterations over one render */
#define CT_MAX_OUTPUT (64u << 20)     /* rendered bytes */
#define CT_MAX_ARENA (256u << 20)     /* values made while rendering */
#define CT_MAX_EVAL_DEPTH 1000        /* the syntax tree's depth as the renderer recurses into it */
#define CT_MAX_VALUE_DEPTH 1000       /* lists and dicts inside lists and dicts */

/* Bump allocation; everything a parse or a render makes is freed at once. */
typedef struct CtChunk {
    struct CtChunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} CtChunk;
typedef struct {
    CtChunk *head;
    size_t total;
    bool over; /* total passed CT_MAX_ARENA: allocation still succeeds (from the heap), the render then fails */
} CtArena;
void *ct_alloc(CtArena *a, size_t n); /* zeroed */
char *ct_strndup(CtArena *a, const char *s, size_t n);
void ct_arena_free(CtArena *a);

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_FUNC } CtKind;

typedef struct CtList CtList;
typedef struct CtDict CtDict;
typedef struct CtNode CtNode;

typedef struct {
    uint8_t k;    /* CtKind */
    uint8_t func; /* V_FUNC: which global (CtFunc) */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        CtList *l;
        CtDict *d; /* V_DICT and V_NS */
        const CtNode *macro;
    } u;
} CtVal;

struct CtList {
    CtVal *v;
    size_t n, cap;
    bool tuple; /* a Python tuple: repr writes (a, b) */
    int depth;  /* nesting of lists/dicts in it, set where values can nest without bound (literals, JSON) */
};
struct CtDict {
    const char **key;
    size_t *klen;
    CtVal *v;
    size_t n, cap;
    int depth;
};

enum { F_RAISE = 1, F_STRFTIME, F_NAMESPACE, F_DICT, F_RANGE };

/* Syntax tree. */
typedef enum {
    /* expressions */
    N_LIT, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG, N_POS, N_BIN, N_AND, N_OR,
    N_LISTLIT, N_DICTLIT, N_COND, N_TUPLE,
    /* statements */
    N_BODY, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE, N_GENERATION
} CtNodeKind;

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CAT, OP_EQ, OP_NE, OP_LT, OP_LE,
               OP_GT, OP_GE, OP_IN, OP_NOTIN } CtOp;

struct CtNode {
    uint8_t kind, op;
    bool neg;              /* N_TEST: "is not" */
    int line, col;
    const char *name;      /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_SET's attribute, N_MACRO's name; N_TEXT: text */
    size_t name_len;
    CtVal lit;             /* N_LIT */
    CtNode *a, *b, *c, *d; /* operands; N_IF: cond a, body b, else c (an N_IF for elif); N_FOR: target a, iter
                              b, body c, else d, filter in kids[0] */
    CtNode **kids;         /* N_BODY, N_LISTLIT, N_TUPLE, call/filter/test arguments, N_DICTLIT keys then values */
    const char **kw;       /* keyword argument names (NULL for positional ones), parallel to kids */
    size_t n_kids;
};

struct ChatTemplate {
    CtArena arena;
    CtNode *root;
    char *name;
    bool has_generation; /* a {% generation %} block is in the source */
};

/* The lexer's tokens and the parser's state (chat_template_lex.c, chat_template_parse.c). */
typedef enum { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT,
               T_OP, T_EOF } TokKind;

typedef struct {
    uint8_t kind;
    size_t off;      /* where it starts in the source (for line:col) */
    const char *p;   /* T_TEXT, T_NAME, T_OP: the bytes; T_STRING: the decoded string (arena) */
    size_t n;
    int64_t i;
    double f;
} Tok;

typedef struct {
    const char *src;
    size_t len;
    const char *name;
    CtArena *arena;
    Tok *t;
    size_t nt, cap, pos;
    int depth;
    bool has_generation;
    GtError *err;
    size_t lc_off; /* ct_line_col's last answer, so walking forward costs only the bytes in between */
    int lc_line, lc_col;
} CtParser;

void ct_line_col(CtParser *p, size_t off, int *line, int *col);
int ct_perr(CtParser *p, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ct_lex(CtParser *p); /* the whole source into p->t, ending with T_EOF */

/* chat_template_value.c */
bool ct_truthy(CtVal v);
bool ct_equal(CtVal a, CtVal b);
/* <0, 0, >0; -2 with *bad set when the two do not compare (Python's TypeError) */
int ct_compare(CtVal a, CtVal b, bool *bad);
/* str(v) as Python writes it (repr for the items of lists and dicts) appended to out */
void ct_str(GtBytes *out, CtVal v);
void ct_repr(GtBytes *out, CtVal v);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys); false on a value JSON cannot hold */
bool ct_json(GtBytes *out, CtVal v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth);
CtVal ct_from_cjson(CtArena *a, const cJSON *j);
CtVal ct_strv(const char *p, size_t n);
const char *ct_kind_name(CtVal v);
int ct_val_depth(CtVal v); /* 0 for scalars */
CtList *ct_list_new(CtArena *a, size_t cap);
void ct_list_push(CtArena *a, CtList *l, CtVal v);
CtDict *ct_dict_new(CtArena *a, size_t cap);
void ct_dict_set(CtArena *a, CtDict *d, const char *k, size_t kn, CtVal v);
bool ct_dict_get(const CtDict *d, const char *k, size_t kn, CtVal *out);

/* The renderer's state (chat_template_render.c, with the builtins of chat_template_builtins.c). */
typedef struct CtFrame {
    struct CtFrame *parent;
    CtDict *vars;
} CtFrame;

typedef struct {
    const ChatTemplate *t;
    CtArena *a;
    GtBytes *out;          /* where text goes now (a macro call or {% set %} block captures into its own) */
    GtBytes *main;         /* the rendered text */
    GtError *err;
    const ChatRenderOptions *o;
    CtFrame *frame;
    long iterations;
    int call_depth, ctl;   /* ctl: 1 break, 2 continue */
    int depth;             /* eval/exec recursion */
    ChatSpan *gen;         /* {% generation %} blocks */
    size_t n_gen, cap_gen;
    const CtList *messages;
    size_t *msg_start, *msg_end; /* per message: the main text its loop iteration wrote (SIZE_MAX: none) */
} CtRender;

/* chat_template.c: filters, tests, functions and methods the subset lacks are refused (code 2) */
int chat_template_check(ChatTemplate *t, GtError *err);
int ct_run(CtRender *r, const CtNode *root); /* render root into r->main */
int ct_rerr(CtRender *r, const CtNode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* chat_template_builtins.c: filters, tests, str/dict methods and global functions, by name */
bool ct_known_filter(const char *name);
bool ct_known_test(const char *name);
bool ct_known_method(const char *name);
bool ct_known_func(const char *name, uint8_t *func);
int ct_filter(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, const char *const *kw, size_t nargs,
              CtVal *out);
int ct_test(CtRender *r, const CtNode *n, CtVal v, const CtVal *args, size_t nargs, bool *out);
/* obj.name(args): *handled false when obj has no such method */
int ct_method(CtRender *r, const CtNode *n, CtVal obj, const CtVal *args, const char *const *kw, size_t nargs,
              CtVal *out, bool *handled);
int ct_call_func(CtRender *r, const CtNode *n, uint8_t func, const CtVal *args, const char *const *kw, size_t nargs,
                 CtVal *out);
/* Python's str.strip family and len() on UTF-8 text */
size_t ct_utf8_len(const char *p, size_t n);

#endif
