/* data_jsonl.c - the SFT jsonl reader of data.c (see data.h for the format): one JSON object per
 * line, each an example of prompt and completion tokens, or the packed stream of them. */
#define _POSIX_C_SOURCE 200809L
#include "data_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * SFT jsonl */

typedef struct {
    const char *name;
    int vocab_size;
    int row_len;  /* seq_len + 1 */
    bool packing; /* keep every token (no truncation to row_len) */
    int32_t *tok;
    size_t tok_n, tok_cap;
    uint64_t *off;
    int32_t *plen, *len;
    size_t ex_n, ex_cap, plen_cap, len_cap;
    int32_t cur_len, cur_plen; /* the example being built */
} JsonlBuild;

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

/* Append a token to the current example. Unpacked: tokens beyond row_len are dropped (room for
 * row_len tokens past tok_n was reserved); packed: every token is kept, growing the buffer. */
static int jb_push(JsonlBuild *b, int32_t t, size_t line, GtError *err) {
    if (!b->packing) {
        if (b->cur_len < b->row_len) b->tok[b->tok_n + (size_t)b->cur_len++] = t;
        return 0;
    }
    if (b->cur_len == INT32_MAX)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu: example has more than %d tokens, expected fewer", b->name,
                        line, INT32_MAX);
    if (data_grow((void **)&b->tok, &b->tok_cap, b->tok_n + (size_t)b->cur_len + 1, sizeof *b->tok, b->name, err))
        return -1;
    b->tok[b->tok_n + (size_t)b->cur_len++] = t;
    return 0;
}

/* Append a string's bytes to the current example (unpacked: tokens beyond row_len are checked, not kept). */
static int jb_add_text(JsonlBuild *b, const char *s, size_t line, const char *field, GtError *err) {
    for (size_t i = 0; s[i]; i++) {
        unsigned v = (unsigned char)s[i];
        if ((int)v >= b->vocab_size)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s:%zu: \"%s\" byte %zu has value %u, >= vocab_size %d (byte-level text needs vocab_size >= 256)",
                            b->name, line, field, i, v, b->vocab_size);
        if (jb_push(b, (int32_t)v, line, err)) return -1;
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
                                "%s:%zu: \"%s\"[%zu] is %g, expected an integer token id in [0, %d] (vocab_size %d)",
                                b->name, line, field, i, v, b->vocab_size - 1, b->vocab_size);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu: \"%s\"[%zu] is %s, expected an integer token id",
                            b->name, line, field, i, json_type_name(e));
        }
        if (jb_push(b, (int32_t)v, line, err)) return -1;
    }
    return 0;
}

static int jb_line(JsonlBuild *b, const char *line, size_t n, size_t lineno, GtError *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(line, n, &end, 0);
    if (!root) {
        size_t col = end && end >= line && end <= line + n ? (size_t)(end - line) + 1 : 1;
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: bad JSON, expected one object per line", b->name,
                        lineno, col);
    }
    int rc = -1;
    for (const char *p = end; p < line + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '\v' && *p != '\f') {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu:%zu: unexpected text after the JSON object, expected one object per line",
                     b->name, lineno, (size_t)(p - line) + 1);
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu: found %s, expected an object {\"prompt\": ..., \"completion\": ...}",
                 b->name, lineno, json_type_name(root));
        goto out;
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "completion");
    const cJSON *pi = cJSON_GetObjectItemCaseSensitive(root, "prompt_ids");
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(root, "completion_ids");
    bool text = p || c, ids = pi || ci;
    if (text && ids) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s:%zu: mixes \"prompt\"/\"completion\" with \"prompt_ids\"/\"completion_ids\", expected one form",
                 b->name, lineno);
        goto out;
    }
    if (!text && !ids) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s:%zu: expected {\"prompt\": str, \"completion\": str} or {\"prompt_ids\": [int...], \"completion_ids\": [int...]}",
                 b->name, lineno);
        goto out;
    }
    const char *fp = text ? "prompt" : "prompt_ids", *fc = text ? "completion" : "completion_ids";
    const cJSON *jp = text ? p : pi, *jc = text ? c : ci;
    const char *want = text ? "a string" : "an array of token ids";
    if (!(text ? cJSON_IsString(jp) : cJSON_IsArray(jp))) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu: \"%s\" is %s, expected %s", b->name, lineno, fp,
                 jp ? json_type_name(jp) : "missing", want);
        goto out;
    }
    if (!(text ? cJSON_IsString(jc) : cJSON_IsArray(jc))) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s:%zu: \"%s\" is %s, expected %s", b->name, lineno, fc,
                 jc ? json_type_name(jc) : "missing", want);
        goto out;
    }
    /* room for one more example and row_len more tokens */
    if (data_grow((void **)&b->tok, &b->tok_cap, b->tok_n + (size_t)b->row_len, sizeof *b->tok, b->name, err) ||
        data_grow((void **)&b->off, &b->ex_cap, b->ex_n + 1, sizeof *b->off, b->name, err) ||
        data_grow((void **)&b->plen, &b->plen_cap, b->ex_n + 1, sizeof *b->plen, b->name, err) ||
        data_grow((void **)&b->len, &b->len_cap, b->ex_n + 1, sizeof *b->len, b->name, err))
        goto out;
    b->cur_len = 0;
    if (text ? jb_add_text(b, jp->valuestring, lineno, fp, err) : jb_add_ids(b, jp, lineno, fp, err)) goto out;
    b->cur_plen = b->cur_len;
    if (text ? jb_add_text(b, jc->valuestring, lineno, fc, err) : jb_add_ids(b, jc, lineno, fc, err)) goto out;
    b->off[b->ex_n] = b->tok_n;
    b->plen[b->ex_n] = b->cur_plen;
    b->len[b->ex_n] = b->cur_len;
    b->ex_n++;
    b->tok_n += (size_t)b->cur_len;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* number of positions t in [0, T) whose target row[t+1] is a completion token */
static int32_t example_targets(int32_t plen, int32_t len) {
    int32_t lo = plen > 1 ? plen : 1;
    return len > lo ? len - lo : 0;
}

/* Packed: the split's examples [first, first+count) end to end (contiguous in b->tok, file order)
 * as d->pk_tok, with labels d->pk_lab; d->n = the stream length. */
static int jsonl_pack(DataSource *d, const JsonlBuild *b, const char *name, uint64_t first, uint64_t count,
                      int split, double val_fraction, GtError *err) {
    const uint64_t last = first + count - 1;
    const uint64_t s0 = b->off[first], n = b->off[last] + (uint64_t)b->len[last] - s0;
    if (n < (uint64_t)d->seq_len + 1) {
        if (split == DATA_SPLIT_ALL)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: the packed examples hold %llu tokens, expected at least seq_len+1 = %d for one window",
                            name, (unsigned long long)n, d->seq_len + 1);
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: the packed %s (val_fraction %g, %llu examples) holds %llu tokens, expected at least "
                        "seq_len+1 = %d for one window",
                        name, data_split_name(split), val_fraction, (unsigned long long)count, (unsigned long long)n,
                        d->seq_len + 1);
    }
    size_t bytes;
    if (!gt_mul_size((size_t)n, sizeof *d->pk_lab, &bytes))
        return gt_error(err, GT_EXIT_FAILURE, "%s: too large to hold in memory", name);
    d->pk_lab = data_malloc(bytes, name, err);
    if (!d->pk_lab) return -1;
    for (uint64_t k = first; k <= last; k++) {
        const int32_t *tok = b->tok + b->off[k];
        int32_t *lab = d->pk_lab + (b->off[k] - s0);
        for (int32_t j = 0; j < b->len[k]; j++) lab[j] = j < b->plen[k] ? DATA_IGNORE_INDEX : tok[j];
    }
    d->pk_tok = b->tok + s0;
    d->n = n;
    return 0;
}

int data_jsonl_build(DataSource *d, const char *name, const char *buf, size_t len, bool packing, int split,
                double val_fraction, GtError *err) {
    JsonlBuild b = {.name = name, .vocab_size = d->vocab_size, .row_len = d->seq_len + 1, .packing = packing};
    int rc = -1;
    uint64_t first = 0, count = 0;
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
        if (!blank && jb_line(&b, buf + pos, n, lineno, err) != 0) goto out;
        pos += n + 1;
    }
    if (b.ex_n == 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s, expected one {\"prompt\": ..., \"completion\": ...} object per line",
                 name, len == 0 ? "is empty" : "holds no examples");
        goto out;
    }
    size_t useless = 0;
    if (packing) {
        for (size_t i = 0; i < b.ex_n; i++) useless += b.len[i] == b.plen[i];
        if (useless == b.ex_n) {
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: no example has a completion token (every completion is empty)", name);
            goto out;
        }
        if (useless && split != DATA_SPLIT_VAL)
            gt_warn("%s: %zu of %zu examples have an empty completion; packed, they are context only\n", name,
                    useless, b.ex_n);
    } else {
        for (size_t i = 0; i < b.ex_n; i++) useless += example_targets(b.plen[i], b.len[i]) == 0;
    }
    if (!packing && useless == b.ex_n) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: no example has a completion token within seq_len+1 = %d tokens (prompts too long or completions empty)",
                 name, b.row_len);
        goto out;
    }
    if (!packing && useless && split != DATA_SPLIT_VAL)
        gt_warn("%s: %zu of %zu examples have no completion token within seq_len+1 = %d tokens; they train nothing\n",
                name, useless, b.ex_n, b.row_len);
    data_split_range(b.ex_n, split, val_fraction, &first, &count);
    if (count == 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: the %s (val_fraction %g) of %zu examples holds none, expected at least 1",
                 name, data_split_name(split), val_fraction, b.ex_n);
        goto out;
    }
    if (packing && jsonl_pack(d, &b, name, first, count, split, val_fraction, err) != 0) goto out;
    rc = 0;
out:
    d->ex_tok = b.tok;
    d->ex_off = b.off;
    d->ex_plen = b.plen;
    d->ex_len = b.len;
    if (rc == 0) {
        d->ex_first = first;
        if (!packing) d->n = count;
    }
    return rc;
}

