/* data_jsonl.c - the SFT jsonl reader of data.c (see data.h for the format): one JSON object per
 * line, each an example of prompt and completion tokens, or the packed stream of them. */
#define _POSIX_C_SOURCE 200809L
#include "data_internal.h"
#include "json_string.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * A line's top-level members, read exactly.
 *
 * cJSON's strings are NUL-terminated (a "\u0000" would cut a prompt short, and a key
 * "prompt\u0000x" would pass for "prompt") and it keeps duplicate keys. So once cJSON has
 * accepted a line (it validates the syntax and parses the id arrays), the top level is read again
 * here: each key decoded with its length, each value's raw text, strings decoded keeping every
 * byte (json_string.c). The text is valid JSON by then; the scan still checks every bound.
 * Whitespace and the BOM follow cJSON (any byte <= 0x20 is whitespace). */

typedef struct {
    size_t key_off, key_len; /* into the keys buffer */
    const char *val, *val_end;
} JMember;

typedef struct {
    const char *k;
    size_t n, idx;
} JKeyRef;

typedef struct {
    GtBytes keys, text;
    JMember *mem;
    size_t mem_cap;
    JKeyRef *refs;
    size_t refs_cap;
} JlScratch;

static void jl_free(JlScratch *j) {
    free(j->keys.p);
    free(j->text.p);
    free(j->mem);
    free(j->refs);
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (unsigned char)*p <= 0x20) p++;
    return p;
}

int data_json_skip(const char **pp, const char *end) {
    const char *p = *pp;
    if (p >= end) return -1;
    if (*p == '"') return json_string_decode(pp, end, NULL);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        do {
            if (p >= end) return -1;
            if (*p == '"') {
                if (json_string_decode(&p, end, NULL) != 0) return -1;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            else if (*p == '}' || *p == ']') depth--;
            p++;
        } while (depth > 0);
        *pp = p;
        return 0;
    }
    while (p < end && (unsigned char)*p > 0x20 && *p != ',' && *p != '}' && *p != ']') p++;
    if (p == *pp) return -1;
    *pp = p;
    return 0;
}

/* The top-level members of the object on line[n] into b->mem (keys decoded into b->keys);
 * *count of them. -1 on malformed text. */
static int jl_members(JlScratch *b, const char *line, size_t n, size_t *count) {
    const char *p = line, *end = line + n;
    b->keys.n = 0;
    *count = 0;
    if (n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 BOM, as cJSON allows */
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return -1;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return 0;
    for (;;) {
        if (p >= end || *p != '"') return -1;
        if (*count == b->mem_cap) {
            b->mem_cap = b->mem_cap ? 2 * b->mem_cap : 16;
            b->mem = gt_xrealloc(b->mem, b->mem_cap * sizeof *b->mem);
        }
        JMember *m = &b->mem[*count];
        m->key_off = b->keys.n;
        if (json_string_decode(&p, end, &b->keys) != 0) return -1;
        m->key_len = b->keys.n - m->key_off;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return -1;
        p = skip_ws(p + 1, end);
        m->val = p;
        if (data_json_skip(&p, end) != 0) return -1;
        m->val_end = p;
        (*count)++;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        return p < end && *p == '}' ? 0 : -1;
    }
}

/* a key for a message: printable ASCII as it is, other bytes as \xHH, at most ~60 bytes */
static const char *key_for_message(const char *k, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)k[i];
        if (o >= 60) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

static int cmp_keyref(const void *x, const void *y) {
    const JKeyRef *a = x, *c = y;
    int r = memcmp(a->k, c->k, a->n < c->n ? a->n : c->n);
    if (r == 0 && a->n != c->n) r = a->n < c->n ? -1 : 1;
    if (r == 0) r = a->idx < c->idx ? -1 : 1;
    return r;
}

/* member m's decoded key (never NULL: an object of empty keys allocates no key bytes) */
static const char *key_of(const JlScratch *b, const JMember *m) { return b->keys.p ? b->keys.p + m->key_off : ""; }

/* A key twice (after decoding) is an error naming the first key, in line order, seen again. */
static int jl_check_duplicates(JlScratch *b, size_t count, const char *pre, size_t lineno, GtError *err) {
    if (count < 2) return 0;
    if (count > b->refs_cap) {
        b->refs_cap = count;
        b->refs = gt_xrealloc(b->refs, count * sizeof *b->refs);
    }
    for (size_t i = 0; i < count; i++) b->refs[i] = (JKeyRef){key_of(b, &b->mem[i]), b->mem[i].key_len, i};
    qsort(b->refs, count, sizeof *b->refs, cmp_keyref); /* equal keys end up adjacent, in line order */
    size_t dup = SIZE_MAX;
    for (size_t i = 1; i < count; i++) {
        const JKeyRef *a = &b->refs[i - 1], *c = &b->refs[i];
        if (a->n == c->n && memcmp(a->k, c->k, a->n) == 0 && c->idx < dup) dup = c->idx;
    }
    if (dup == SIZE_MAX) return 0;
    char k[80];
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: \"%s\": expected each key once, found it twice", pre, lineno,
                    key_for_message(key_of(b, &b->mem[dup]), b->mem[dup].key_len, k, sizeof k));
}

/* index of the member whose key is exactly `key`, or -1 */
static long jl_find(const JlScratch *b, size_t count, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < count; i++)
        if (b->mem[i].key_len == n && memcmp(key_of(b, &b->mem[i]), key, n) == 0) return (long)i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * examples */

typedef enum { REC_UNKNOWN = 0, REC_PROMPT_COMPLETION, REC_TEXT, REC_MESSAGES } RecordKind;
enum { DCOL_TEXT, DCOL_PROMPT, DCOL_COMPLETION, DCOL_MESSAGES, DCOL_PROMPT_IDS, DCOL_COMPLETION_IDS, DCOL_N };
static const char *const DCOL_NAME[DCOL_N] = {"text", "prompt", "completion", "messages", "prompt_ids", "completion_ids"};

struct JsonlBuild {
    const char *name;
    int vocab_size;
    int row_len;  /* seq_len + 1 */
    int32_t *tok;
    size_t tok_n, tok_cap;
    uint64_t *off;
    uint8_t *mask; /* per token, parallel to tok: 1 = it trains (its label is the token), 0 = -100 */
    size_t mask_cap;
    int32_t *len;
    size_t ex_n, ex_cap, len_cap;
    int32_t cur_len; /* the example being built */
    uint8_t cur_train; /* the mask of the tokens being pushed */
    int64_t cur_full;          /* its tokens before truncation */
    int64_t *full;             /* per example: tokens before truncation (for data_stats) */
    size_t full_cap;
    JlScratch jl;              /* the line's members and a decoded string, reused line to line */
    const DataText *text;      /* tokenizer and templates, or NULL */
    JsonlTokBatch *queue;      /* with a tokenizer: the lines waiting to be encoded */
    GtBytes ptext, ctext;      /* the line's prompt and completion text */
    size_t lineno, count; /* the line being read, and its member count */
    char pre[GT_PATH_MAX + 16]; /* how a row is named: "FILE:" (then the line) or "FILE: element " */
    bool array;                 /* rows are a JSON array's elements, not lines */
    RecordKind kind;            /* decided by the mapping or the first record (see data.h) */
    const char *col[DCOL_N];    /* the file's column for each of gtrain's names */
    DataChat *chat;             /* messages rows: the chat template, opened at the first */
    TokIds chat_ids;
    GtBytes chat_mask;
    /* text->keep_text: each record's text (record k is example k), as DataSource's ex_text* */
    GtBytes kept;
    uint64_t *kept_off;
    int64_t *kept_len;
    size_t records, kept_cap, kept_len_cap;
};

static const char *json_type_name(const cJSON *j) {
    if (!j) return "nothing";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    return "an invalid value";
}

/* Append a token to the current example: the first row_len are kept (the buffer grows as they
 * come, so a huge row_len reserves nothing), the rest counted (cur_full) and dropped. */
static int jb_push(JsonlBuild *b, int32_t t, GtError *err) {
    b->cur_full++;
    if (b->cur_len >= b->row_len) return 0;
    const size_t at = b->tok_n + (size_t)b->cur_len;
    if (data_grow((void **)&b->tok, &b->tok_cap, at + 1, sizeof *b->tok, b->name, err) ||
        data_grow((void **)&b->mask, &b->mask_cap, at + 1, sizeof *b->mask, b->name, err))
        return -1;
    b->mask[at] = b->cur_train;
    b->tok[at] = t;
    b->cur_len++;
    return 0;
}

/* Append a string's bytes to the current example (tokens beyond row_len are checked, not kept). */
static int jb_add_text(JsonlBuild *b, const char *s, size_t n, size_t line, const char *field, GtError *err) {
    for (size_t i = 0; i < n; i++) {
        unsigned v = (unsigned char)s[i];
        if ((int)v >= b->vocab_size)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s%zu: \"%s\" byte %zu has value %u, >= vocab_size %d (byte-level text needs vocab_size >= 256)",
                            b->pre, line, field, i, v, b->vocab_size);
        if (jb_push(b, (int32_t)v, err)) return -1;
    }
    return 0;
}

/* Append an array's token ids to the current example (the same truncation). */
static int jb_add_ids(JsonlBuild *b, const cJSON *arr, size_t line, const char *field, GtError *err) {
    size_t i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || !isfinite(v) || v != floor(v) || v < 0 || v >= (double)b->vocab_size) {
            if (cJSON_IsNumber(e))
                return gt_error(err, GT_EXIT_BAD_INPUT,
                                "%s%zu: \"%s\"[%zu] is %g, expected an integer token id in [0, %d] (vocab_size %d)",
                                b->pre, line, field, i, v, b->vocab_size - 1, b->vocab_size);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: \"%s\"[%zu] is %s, expected an integer token id",
                            b->pre, line, field, i, json_type_name(e));
        }
        if (jb_push(b, (int32_t)v, err)) return -1;
    }
    return 0;
}

/* A template field: the line's string member of that name, decoded (valid until the next call). */
static int jb_field(void *ctx, const char *field, const char **val, size_t *len, GtError *err) {
    JsonlBuild *b = ctx;
    long i = jl_find(&b->jl, b->count, field);
    if (i < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the template's field {%s} is missing, expected a string member \"%s\"",
                        b->pre, b->lineno, field, field);
    const JMember *m = &b->jl.mem[i];
    const char *v = m->val;
    b->jl.text.n = 0;
    if (*v != '"' || json_string_decode(&v, m->val_end, &b->jl.text) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the template's field {%s} is not a string, expected a string member \"%s\"",
                        b->pre, b->lineno, field, field);
    *val = b->jl.text.p ? b->jl.text.p : "";
    *len = b->jl.text.n;
    return 0;
}

/* text->keep_text: the current record's text, a then c end to end (data_example_text) */
static int jb_keep_text(JsonlBuild *b, const char *a, size_t an, const char *c, size_t cn, GtError *err) {
    if (!b->kept_len) return 0;
    b->kept_off[b->records] = b->kept.n;
    b->kept_len[b->records] = (int64_t)(an + cn);
    if (data_grow((void **)&b->kept.p, &b->kept.cap, b->kept.n + an + cn, 1, b->name, err)) return -1;
    gt_bytes_put(&b->kept, a, an);
    gt_bytes_put(&b->kept, c, cn);
    return 0;
}

#define JSONL_TOK_BATCH 4096 /* lines encoded together, in parallel */

/* Room for one more example (its tokens grow in jb_push; one is reserved so that the token and
 * mask arrays exist even when every example is empty). */
static int jb_begin(JsonlBuild *b, GtError *err) {
    b->cur_len = 0;
    b->cur_full = 0;
    b->cur_train = 0;
    return data_grow((void **)&b->full, &b->full_cap, b->ex_n + 1, sizeof *b->full, b->name, err) ||
           data_grow((void **)&b->tok, &b->tok_cap, b->tok_n + 1, sizeof *b->tok, b->name, err) ||
           data_grow((void **)&b->mask, &b->mask_cap, b->tok_n + 1, sizeof *b->mask, b->name, err) ||
           data_grow((void **)&b->off, &b->ex_cap, b->ex_n + 1, sizeof *b->off, b->name, err) ||
           data_grow((void **)&b->len, &b->len_cap, b->ex_n + 1, sizeof *b->len, b->name, err);
}

static void jb_finish(JsonlBuild *b) {
    b->off[b->ex_n] = b->tok_n;
    b->len[b->ex_n] = b->cur_len;
    b->full[b->ex_n] = b->cur_full;
    b->ex_n++;
    b->tok_n += (size_t)b->cur_len;
}

/* Generation prompts: the example just built is a prompt of 1 .. seq_len tokens (row line). */
static int jb_gen_check(const JsonlBuild *b, size_t line, GtError *err) {
    if (!b->text || !b->text->gen_prompts) return 0;
    if (b->cur_full == 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the prompt has no tokens, expected at least one", b->pre, line);
    if (b->cur_full > b->row_len - 1)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s%zu: the prompt has %lld tokens, expected at most %d (the model's context %d, less one for "
                        "the first new token)",
                        b->pre, line, (long long)b->cur_full, b->row_len - 1, b->row_len);
    return 0;
}

/* The queued lines through the tokenizer, then into examples in line order. */
static int jb_flush(JsonlBuild *b, GtError *err) {
    if (!b->queue || jsonl_tok_count(b->queue) == 0) return 0;
    if (jsonl_tok_encode(b->queue, err) != 0) return -1;
    for (size_t i = 0; i < jsonl_tok_count(b->queue); i++) {
        size_t n, plen, line;
        const int32_t *ids = jsonl_tok_ids(b->queue, i, &n, &plen, &line);
        if (jb_begin(b, err)) return -1;
        for (size_t k = 0; k < n; k++) {
            b->cur_train = k >= plen;
            if (jb_push(b, ids[k], err)) return -1;
        }
        if (jb_gen_check(b, line, err)) return -1;
        jb_finish(b);
    }
    jsonl_tok_clear(b->queue);
    return 0;
}

/* The line's prompt and completion text (b->ptext, b->ctext) as an example: bytes, or queued
 * for the tokenizer (encode(prompt + completion), the first len(encode(prompt)) the prompt). */
static int jb_text_example(JsonlBuild *b, GtError *err) {
    if (jb_keep_text(b, b->ptext.p, b->ptext.n, b->ctext.p, b->ctext.n, err)) return -1;
    if (b->queue) {
        /* a text row (TRL's language modeling): every token trains, the post-processor's BOS too */
        jsonl_tok_add(b->queue, b->kind == REC_TEXT ? NULL : b->ptext.p, b->ptext.n, b->ctext.p, b->ctext.n, b->lineno);
        return jsonl_tok_count(b->queue) >= JSONL_TOK_BATCH ? jb_flush(b, err) : 0;
    }
    if (jb_begin(b, err) || jb_add_text(b, b->ptext.p, b->ptext.n, b->lineno, b->col[DCOL_PROMPT], err)) return -1;
    b->cur_train = 1;
    if (jb_add_text(b, b->ctext.p, b->ctext.n, b->lineno, b->col[b->kind == REC_TEXT ? DCOL_TEXT : DCOL_COMPLETION], err))
        return -1;
    jb_finish(b);
    return 0;
}

/* The line's prompt and completion text from the templates ("" or NULL: the "prompt" and
 * "completion" members themselves). */
static int jb_column_text(JsonlBuild *b, const char *col, GtBytes *out, GtError *err) {
    const char *v = NULL;
    size_t n = 0;
    if (jb_field(b, col, &v, &n, err) != 0) return -1;
    out->n = 0;
    gt_bytes_put(out, v, n);
    return 0;
}

static int jb_fill_text(JsonlBuild *b, const char *pt, const char *ct, GtError *err) {
    return (pt && pt[0] ? data_template_fill(pt, jb_field, b, &b->ptext, err)
                        : jb_column_text(b, b->col[DCOL_PROMPT], &b->ptext, err)) ||
           (ct && ct[0] ? data_template_fill(ct, jb_field, b, &b->ctext, err)
                        : jb_column_text(b, b->col[DCOL_COMPLETION], &b->ctext, err));
}

/* record member `key` of root (the line's object): its cJSON item, or NULL */
static const cJSON *jb_item(const JsonlBuild *b, const cJSON *root, const char *key) {
    long i = jl_find(&b->jl, b->count, key);
    if (i < 0) return NULL;
    const cJSON *it = root->child;
    for (long j = 0; j < i; j++) it = it->next;
    return it;
}

/* The dataset's kind, as TRL decides it from the first record (see data.h): a column named in
 * data.columns first, else the record's members. */
static RecordKind jb_kind(const JsonlBuild *b) {
    const DataText *t = b->text;
    if (t && t->col_messages && t->col_messages[0]) return REC_MESSAGES;
    if (t && ((t->col_prompt && t->col_prompt[0]) || (t->col_completion && t->col_completion[0])))
        return REC_PROMPT_COMPLETION;
    if (t && t->col_text && t->col_text[0]) return REC_TEXT;
    for (int k = DCOL_PROMPT; k < DCOL_N; k++)
        if (k != DCOL_MESSAGES && jl_find(&b->jl, b->count, b->col[k]) >= 0) return REC_PROMPT_COMPLETION;
    if (jl_find(&b->jl, b->count, b->col[DCOL_MESSAGES]) >= 0) return REC_MESSAGES;
    if (jl_find(&b->jl, b->count, b->col[DCOL_TEXT]) >= 0) return REC_TEXT;
    return REC_PROMPT_COMPLETION; /* its error names what is expected */
}

/* A mapped column the row lacks, or of another type. */
static int jb_column_error(const JsonlBuild *b, int which, const char *found, const char *expected, GtError *err) {
    const char *c = b->col[which];
    bool mapped = strcmp(c, DCOL_NAME[which]) != 0;
    char via[64] = "";
    if (mapped) snprintf(via, sizeof via, " (data.columns.%s)", DCOL_NAME[which]);
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the column \"%s\"%s is %s, expected %s", b->pre, b->lineno, c, via,
                    found, expected);
}

/* text: one string, every token trains (TRL's language modeling rows: encode(text) with the
 * tokenizer's special tokens, then EOS) */
static int jb_text_record(JsonlBuild *b, GtError *err) {
    long i = jl_find(&b->jl, b->count, b->col[DCOL_TEXT]);
    if (i < 0) return jb_column_error(b, DCOL_TEXT, "missing", "a string", err);
    const JMember *m = &b->jl.mem[i];
    const char *v = m->val;
    b->ctext.n = 0;
    if (*v != '"' || json_string_decode(&v, m->val_end, &b->ctext) != 0)
        return jb_column_error(b, DCOL_TEXT, *m->val == '[' ? "an array" : *m->val == '{' ? "an object" : "not a string",
                               "a string", err);
    b->ptext.n = 0;
    return jb_text_example(b, err);
}

/* messages: rendered through the chat template, tokenized, masked by the assistant spans (data_messages.c) */
static int jb_messages_record(JsonlBuild *b, const cJSON *root, GtError *err) {
    const cJSON *msgs = jb_item(b, root, b->col[DCOL_MESSAGES]);
    if (!msgs) return jb_column_error(b, DCOL_MESSAGES, "missing", "a list of {role, content}", err);
    if (!b->chat && data_chat_open(&b->chat, b->text, b->name, err) != 0) return -1;
    if (jb_flush(b, err) != 0) return -1; /* the queued rows come first (file order) */
    if (data_chat_example(b->chat, msgs, b->pre, b->lineno, b->col[DCOL_MESSAGES], &b->chat_ids, &b->chat_mask, err))
        return -1;
    size_t tn;
    const char *t = data_chat_text(b->chat, &tn);
    if ((!b->text->gen_prompts && jb_keep_text(b, t, tn, NULL, 0, err)) || jb_begin(b, err)) return -1;
    for (size_t k = 0; k < b->chat_ids.n; k++) {
        if (b->chat_ids.ids[k] >= b->vocab_size)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the tokenizer gives id %d, >= the model's vocab_size %d",
                            b->pre, b->lineno, b->chat_ids.ids[k], b->vocab_size);
        b->cur_train = (uint8_t)b->chat_mask.p[k] && !b->text->gen_prompts;
        if (jb_push(b, b->chat_ids.ids[k], err)) return -1;
    }
    if (jb_gen_check(b, b->lineno, err)) return -1;
    jb_finish(b);
    return 0;
}

/* A generation prompt (DataText.gen_prompts): the answer kept, the prompt alone as the example. */
static int jb_gen_record(JsonlBuild *b, const cJSON *root, GtError *err) {
    const DataText *t = b->text;
    const char *acol = t->col_answer && t->col_answer[0] ? t->col_answer : "answer";
    const char *via = t->col_answer && t->col_answer[0] ? " (generation.columns.answer)" : "";
    long i = jl_find(&b->jl, b->count, acol);
    const char *v = i >= 0 ? b->jl.mem[i].val : NULL, *end = i >= 0 ? b->jl.mem[i].val_end : NULL;
    b->ctext.n = 0;
    if (v && (*v == '-' || (*v >= '0' && *v <= '9'))) { /* a number as written (GSM8K's answers as int64) */
        while (end > v && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n')) end--;
        gt_bytes_put(&b->ctext, v, (size_t)(end - v));
    } else if (!v || *v != '"' || json_string_decode(&v, end, &b->ctext) != 0) {
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the answer column \"%s\"%s is %s, expected a string or a number",
                        b->pre, b->lineno, acol, via, !v ? "missing" : *v == '[' ? "an array" : *v == '{' ? "an object" : "not a string");
    }
    if (jb_keep_text(b, b->ctext.p, b->ctext.n, NULL, 0, err)) return -1;
    if (b->kind == REC_UNKNOWN) /* messages when mapped, or when the first record has them and no prompt */
        b->kind = (t->col_messages && t->col_messages[0]) ||
                          (!(t->col_prompt && t->col_prompt[0]) && jl_find(&b->jl, b->count, b->col[DCOL_PROMPT]) < 0 &&
                           jl_find(&b->jl, b->count, b->col[DCOL_MESSAGES]) >= 0)
                      ? REC_MESSAGES
                      : REC_PROMPT_COMPLETION;
    if (t->prompt_template && t->prompt_template[0]) {
        if (data_template_fill(t->prompt_template, jb_field, b, &b->ptext, err)) return -1;
    } else if (b->kind == REC_MESSAGES) {
        return jb_messages_record(b, root, err);
    } else {
        const char *pcol = b->col[DCOL_PROMPT];
        long k = jl_find(&b->jl, b->count, pcol);
        const char *pv = k >= 0 ? b->jl.mem[k].val : NULL;
        b->ptext.n = 0;
        if (!pv || *pv != '"' || json_string_decode(&pv, b->jl.mem[k].val_end, &b->ptext) != 0)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s%zu: the prompt column \"%s\"%s is %s, expected a string (or set "
                            "generation.prompt_template)",
                            b->pre, b->lineno, pcol, t->col_prompt && t->col_prompt[0] ? " (generation.columns.prompt)" : "",
                            pv ? "not a string" : "missing");
    }
    if (b->queue) { /* encode(prompt) with special tokens, no EOS */
        jsonl_tok_add(b->queue, b->ptext.p, b->ptext.n, NULL, 0, b->lineno);
        return jsonl_tok_count(b->queue) >= JSONL_TOK_BATCH ? jb_flush(b, err) : 0;
    }
    if (jb_begin(b, err) || jb_add_text(b, b->ptext.p, b->ptext.n, b->lineno, b->col[DCOL_PROMPT], err) ||
        jb_gen_check(b, b->lineno, err))
        return -1;
    jb_finish(b);
    return 0;
}

static int jb_record_example(JsonlBuild *b, const cJSON *root, GtError *err) {
    if (b->text && b->text->gen_prompts) return jb_gen_record(b, root, err);
    bool templated = b->text && ((b->text->prompt_template && b->text->prompt_template[0]) ||
                                 (b->text->completion_template && b->text->completion_template[0]));
    if (templated) {
        if (jb_fill_text(b, b->text->prompt_template, b->text->completion_template, err)) return -1;
        return jb_text_example(b, err);
    }
    if (b->kind == REC_UNKNOWN) b->kind = jb_kind(b);
    if (b->kind == REC_TEXT) return jb_text_record(b, err);
    if (b->kind == REC_MESSAGES) return jb_messages_record(b, root, err);
    const char *const keys[4] = {b->col[DCOL_PROMPT], b->col[DCOL_COMPLETION], b->col[DCOL_PROMPT_IDS],
                                 b->col[DCOL_COMPLETION_IDS]};
    const cJSON *item[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++) item[k] = jb_item(b, root, keys[k]);
    const cJSON *p = item[0], *c = item[1], *pi = item[2], *ci = item[3];
    bool text = p || c, ids = pi || ci;
    if (text && ids) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s%zu: mixes \"prompt\"/\"completion\" with \"prompt_ids\"/\"completion_ids\", expected one form",
                 b->pre, b->lineno);
        return -1;
    }
    if (!text && !ids) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s%zu: expected {\"prompt\": str, \"completion\": str} or {\"prompt_ids\": [int...], \"completion_ids\": [int...]}",
                 b->pre, b->lineno);
        return -1;
    }
    const char *fp = text ? keys[0] : keys[2], *fc = text ? keys[1] : keys[3];
    const cJSON *jp = text ? p : pi, *jc = text ? c : ci;
    const char *want = text ? "a string" : "an array of token ids";
    if (!(text ? cJSON_IsString(jp) : cJSON_IsArray(jp))) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: \"%s\" is %s, expected %s", b->pre, b->lineno, fp,
                 jp ? json_type_name(jp) : "missing", want);
        return -1;
    }
    if (!(text ? cJSON_IsString(jc) : cJSON_IsArray(jc))) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: \"%s\" is %s, expected %s", b->pre, b->lineno, fc,
                 jc ? json_type_name(jc) : "missing", want);
        return -1;
    }
    if (text) { /* both strings: bytes, or through the tokenizer */
        if (jb_fill_text(b, NULL, NULL, err)) return -1;
        return jb_text_example(b, err);
    }
    /* the queued lines come first (file order), then this example */
    if (jb_flush(b, err) || jb_begin(b, err) || jb_add_ids(b, jp, b->lineno, fp, err)) return -1;
    b->cur_train = 1;
    if (jb_add_ids(b, jc, b->lineno, fc, err)) return -1;
    jb_finish(b);
    return 0;
}

/* One record, one example; with keep_text its text (none for a row of ids) at the record's index. */
static int jb_record(JsonlBuild *b, const cJSON *root, GtError *err) {
    if (b->text && b->text->keep_text) {
        if (data_grow((void **)&b->kept_off, &b->kept_cap, b->records + 1, sizeof *b->kept_off, b->name, err) ||
            data_grow((void **)&b->kept_len, &b->kept_len_cap, b->records + 1, sizeof *b->kept_len, b->name, err))
            return -1;
        b->kept_len[b->records] = -1;
    }
    if (jb_record_example(b, root, err) != 0) return -1;
    b->records++;
    return 0;
}

static int jb_line(JsonlBuild *b, const char *line, size_t n, size_t lineno, GtError *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(line, n, &end, 0);
    if (!root) {
        long deep = gt_json_too_deep(line, n, CJSON_NESTING_LIMIT); /* cJSON's own limit, said as such */
        if (deep >= 0)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu:%ld: JSON nested too deep: expected at most %d levels, found more",
                            b->pre, lineno, deep + 1, CJSON_NESTING_LIMIT);
        size_t col = end && end >= line && end <= line + n ? (size_t)(end - line) + 1 : 1;
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu:%zu: bad JSON, expected %s", b->pre, lineno, col,
                        b->array ? "an object" : "one object per line");
    }
    int rc = -1;
    for (const char *p = end; p < line + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '\v' && *p != '\f') {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu:%zu: unexpected text after the JSON object, expected %s",
                     b->pre, lineno, (size_t)(p - line) + 1, b->array ? "one object" : "one object per line");
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: found %s, expected an object {\"prompt\": ..., \"completion\": ...}",
                 b->pre, lineno, json_type_name(root));
        goto out;
    }
    /* the members again, exactly (see above): keys with their length, duplicates refused */
    size_t count = 0, n_children = 0;
    for (const cJSON *ch = root->child; ch; ch = ch->next) n_children++;
    if (jl_members(&b->jl, line, n, &count) != 0 || count != n_children) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: bad JSON, expected %s", b->pre, lineno,
                 b->array ? "an object" : "one object per line");
        goto out;
    }
    if (jl_check_duplicates(&b->jl, count, b->pre, lineno, err) != 0) goto out;
    b->lineno = lineno;
    b->count = count;
    rc = jb_record(b, root, err);
out:
    cJSON_Delete(root);
    return rc;
}

/* number of tokens of example k from token `from` on that train (from 1: the targets of its row) */
static int32_t example_targets(const JsonlBuild *b, uint64_t k, int32_t from) {
    const uint8_t *m = b->mask + b->off[k];
    int32_t n = 0;
    for (int32_t j = from; j < b->len[k]; j++) n += m[j];
    return n;
}

/* Records into examples (data_internal.h). */
int data_build_begin(JsonlBuild **out, DataSource *d, const char *name, const char *row_word,
                     const DataText *text, GtError *err) {
    const bool array = row_word != NULL;
    *out = NULL;
    if (text && text->tok && text->add_eos && text->eos_id < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: data.add_eos: the tokenizer %s has no end-of-sequence token, expected one (or set data.add_eos: false)",
                        name, tokenizer_path(text->tok));
    if (text) {
        int kinds = (text->col_messages && text->col_messages[0]) +
                    ((text->col_prompt && text->col_prompt[0]) || (text->col_completion && text->col_completion[0])) +
                    (text->col_text && text->col_text[0]);
        if (kinds > 1)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: data.columns names columns for more than one kind of row, expected text, "
                            "prompt/completion or messages alone", name);
    }
    JsonlBuild *b = gt_xcalloc(1, sizeof *b);
    *b = (JsonlBuild){.name = name, .vocab_size = d->vocab_size, .row_len = d->seq_len + 1,
                      .text = text, .array = array};
    if (array)
        snprintf(b->pre, sizeof b->pre, "%s: %s ", name, row_word);
    else
        snprintf(b->pre, sizeof b->pre, "%s:", name);
    const char *mapped[DCOL_N] = {text ? text->col_text : NULL, text ? text->col_prompt : NULL,
                                  text ? text->col_completion : NULL, text ? text->col_messages : NULL, NULL, NULL};
    for (int k = 0; k < DCOL_N; k++) b->col[k] = mapped[k] && mapped[k][0] ? mapped[k] : DCOL_NAME[k];
    if (text && text->tok) b->queue = jsonl_tok_new(text, name, b->pre, d->vocab_size);
    *out = b;
    return 0;
}

int data_build_object(JsonlBuild *b, const char *obj, size_t n, size_t row, GtError *err) {
    if (jb_line(b, obj, n, row, err) == 0) return 0;
    GtError earlier = {0}; /* an error of a queued row before this one comes first */
    if (jb_flush(b, &earlier) != 0 && err) *err = earlier;
    return -1;
}

void data_build_free(JsonlBuild *b) {
    if (!b) return;
    free(b->full);
    free(b->tok);
    free(b->mask);
    free(b->off);
    free(b->len);
    gt_bytes_free(&b->kept);
    free(b->kept_off);
    free(b->kept_len);
    jl_free(&b->jl);
    jsonl_tok_free(b->queue);
    gt_bytes_free(&b->ptext);
    gt_bytes_free(&b->ctext);
    data_chat_free(b->chat);
    tok_ids_free(&b->chat_ids);
    gt_bytes_free(&b->chat_mask);
    free(b);
}

int data_jsonl_build(DataSource *d, const char *name, const char *buf, size_t len, int split,
                     double val_fraction, const DataText *text, GtError *err) {
    JsonlBuild *b;
    if (data_build_begin(&b, d, name, NULL, text, err) != 0) return -1;
    size_t lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        lineno++;
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++) {
            char ch = buf[pos + i];
            blank = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
        }
        if (!blank && data_build_object(b, buf + pos, n, lineno, err) != 0) {
            data_build_free(b);
            return -1;
        }
        pos += n + 1;
    }
    return data_build_finish(b, d, split, val_fraction, len == 0, err);
}

int data_build_finish(JsonlBuild *bp, DataSource *d, int split, double val_fraction, bool empty, GtError *err) {
    JsonlBuild b = *bp; /* bp itself stays until the end: the tokenizer queue names rows through bp->pre */
    const char *name = b.name;
    int rc = -1;
    uint64_t first = 0, count = 0;
    if (jb_flush(&b, err) != 0) goto out;
    if (b.ex_n == 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s, expected %s", name, empty ? "is empty" : "holds no examples",
                 b.array ? "records (a JSON array of objects, or parquet rows)"
                 : b.text && b.text->gen_prompts ? "one record (a prompt and its answer) per line"
                                                 : "one {\"prompt\": ..., \"completion\": ...} object per line");
        goto out;
    }
    data_split_range(b.ex_n, split, val_fraction, &first, &count);
    if (count == 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: the %s (val_fraction %g) of %zu examples holds none, expected at least 1",
                 name, data_split_name(split), val_fraction, b.ex_n);
        goto out;
    }
    /* A split whose every label is -100 trains (or scores) nothing: an error, checked on the split
     * that is loaded (a train split of empty completions is no better for a good val split). */
    char which[160] = "";
    if (split != DATA_SPLIT_ALL)
        snprintf(which, sizeof which, " of the %s (val_fraction %g: %llu of %zu examples)", data_split_name(split),
                 val_fraction, (unsigned long long)count, b.ex_n);
    size_t useless = 0;
    for (uint64_t k = first; k < first + count; k++)
        useless += example_targets(&b, k, 1) == 0;
    if (b.text && b.text->gen_prompts) useless = 0; /* prompts: nothing trains, none is meant to */
    if (useless == count) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: no example%s has a completion token within seq_len+1 = %d tokens (prompts too long or "
                 "completions empty)",
                 name, which, b.row_len);
        goto out;
    }
    if (useless && split != DATA_SPLIT_VAL)
        gt_warn("%s: %zu of %llu examples%s have no completion token within seq_len+1 = %d tokens; they train "
                "nothing\n",
                name, useless, (unsigned long long)count, split == DATA_SPLIT_ALL ? "" : " of the train split",
                b.row_len);
    /* the split's statistics (data_stats) */
    d->st_examples = count;
    for (uint64_t k = first; k < first + count; k++) {
        d->st_tokens += (uint64_t)b.len[k];
        d->st_tokens_full += (uint64_t)b.full[k];
        d->st_truncated += b.full[k] > b.len[k];
    }
    d->st_no_target = useless;
    rc = 0;
out:
    free(b.full);
    jl_free(&b.jl);
    jsonl_tok_free(b.queue);
    gt_bytes_free(&b.ptext);
    gt_bytes_free(&b.ctext);
    data_chat_free(b.chat);
    tok_ids_free(&b.chat_ids);
    gt_bytes_free(&b.chat_mask);
    d->ex_tok = b.tok;
    d->ex_off = b.off;
    d->ex_mask = b.mask;
    d->ex_len = b.len;
    d->ex_text = b.kept.p;
    d->ex_text_off = b.kept_off;
    d->ex_text_len = b.kept_len;
    if (rc == 0) {
        d->ex_first = first;
        d->n = count;
    }
    free(bp);
    return rc;
}


const char *data_example_text(const DataSource *d, uint64_t e, size_t *len) {
    uint64_t k = d->ex_first + e;
    *len = 0;
    if (!d->ex_text_len || d->ex_text_len[k] < 0) return NULL;
    *len = (size_t)d->ex_text_len[k];
    return d->ex_text ? d->ex_text + d->ex_text_off[k] : "";
}

uint64_t data_num_examples(const DataSource *d) { return d->ex_tok ? d->st_examples : 0; }

int32_t data_example(const DataSource *d, uint64_t e, const int32_t **tok, const uint8_t **mask) {
    uint64_t k = d->ex_first + e;
    *tok = d->ex_tok + d->ex_off[k];
    *mask = d->ex_mask + d->ex_off[k];
    return d->ex_len[k];
}
