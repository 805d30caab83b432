/* data_internal.h - what data.c and data_jsonl.c share: the DataSource itself and a few helpers.
 * Not for other modules (they use data.h). */
#ifndef GT_DATA_INTERNAL_H
#define GT_DATA_INTERNAL_H

#include <cjson/cJSON.h>

#include "data.h"

struct DataSource {
    DataFormat format;
    int seq_len;
    int vocab_size;
    uint64_t n; /* tokens (text/tokens), examples (jsonl) or stream tokens (packed jsonl) of the split */

    /* text: bytes; tokens: uint16 (GPT-2's shard layout) or uint32 (Llama-3's); exactly one of
     * u8/u16/u32 is set. base_* own the memory, the views start at the split. */
    uint8_t *base8;
    const uint8_t *u8;
    uint16_t *base16;
    const uint16_t *u16;
    /* text through a tokenizer, or a uint32 shard (checked < vocab_size, so it fits an int32): ids */
    int32_t *base32;
    const int32_t *i32;

    /* jsonl: all examples' tokens (truncated unless packed), flat, and a parallel train mask (1: the
     * token is a target where it is predicted, its label the token itself; 0: label -100, e.g. a
     * prompt or a non-assistant turn); per example offset and length */
    int32_t *ex_tok;
    uint8_t *ex_mask;
    uint64_t *ex_off;
    int32_t *ex_len;
    uint64_t ex_first; /* first example of the split */
    /* DataText.keep_text: example k's text is ex_text[ex_text_off[k] ..] of ex_text_len[k] bytes
     * (-1: none kept) */
    char *ex_text;
    uint64_t *ex_text_off;
    int64_t *ex_text_len;


    /* packed jsonl (data_pack.c): rows of whole examples; row r holds the split's examples
     * pk_ex[pk_row_off[r] .. pk_row_off[r+1]) in that order; pk_used: the input positions they
     * fill (the rest is padding). pk_row_off is non-NULL exactly when the source is packed. */
    uint64_t pk_rows, pk_used;
    uint64_t *pk_row_off;
    uint32_t *pk_ex;

    /* jsonl: the split's examples, their tokens as kept and before truncation, how many were
     * truncated and how many train nothing (data_stats) */
    uint64_t st_examples, st_tokens, st_tokens_full, st_truncated, st_no_target;
};

/* data_example() and data_num_examples() (data.h) read ex_tok/ex_mask/ex_off/ex_len. */
/* Example e of the split (0 <= e < n, jsonl): its tokens as kept, how many, and the label of its
 * token t (1 <= t < len): the token itself when it trains, DATA_IGNORE_INDEX on the prompt. */
static inline const int32_t *data_ex_tokens(const DataSource *d, uint64_t e) { return d->ex_tok + d->ex_off[d->ex_first + e]; }
static inline int32_t data_ex_len(const DataSource *d, uint64_t e) { return d->ex_len[d->ex_first + e]; }
static inline int data_ex_label(const DataSource *d, uint64_t e, int t) {
    return d->ex_mask[d->ex_off[d->ex_first + e] + (uint64_t)t] ? data_ex_tokens(d, e)[t] : DATA_IGNORE_INDEX;
}

/* Pack the split's (unpacked, truncated) examples into rows (data_pack.c). */
int data_pack_build(DataSource *d, const char *name, GtError *err);
/* Packed row r: tokens, targets and positions (NULL: not written) [seq_len]. */
void data_pack_fill_row(const DataSource *d, uint64_t r, int *tokens, int *targets, int *positions);

/* malloc that reports failure in err (code 1) instead of exiting: data buffers can be huge */
void *data_malloc(size_t bytes, const char *name, GtError *err);
/* grow *p (elements of elem bytes, capacity *cap) to hold at least need elements */
int data_grow(void **p, size_t *cap, size_t need, size_t elem, const char *name, GtError *err);
/* "train split", "val split" or "data" */
const char *data_split_name(int split);
/* [first, first+count) of n items for the split */
void data_split_range(uint64_t n, int split, double val_fraction, uint64_t *first, uint64_t *count);

/* Parse SFT jsonl buf[len] into d (examples, each truncated to seq_len+1). name for messages. */
int data_jsonl_build(DataSource *d, const char *name, const char *buf, size_t len, int split,
                     double val_fraction, const DataText *text, GtError *err);

/* Records into examples, one at a time (data_jsonl.c): begin, each record as a JSON object's text
 * (row: its line; with a row_word, "FILE: ROW_WORD N" names it: a JSON array's "element" from 1,
 * parquet's "row" from 0), then finish, which sets d's
 * examples for the split and frees b (also on failure); empty: the
 * file had no bytes (for the message). After a failed data_build_object only data_build_free. */
typedef struct JsonlBuild JsonlBuild;
int data_build_begin(JsonlBuild **out, DataSource *d, const char *name, const char *row_word,
                     const DataText *text, GtError *err);
int data_build_object(JsonlBuild *b, const char *obj, size_t n, size_t row, GtError *err);
int data_build_finish(JsonlBuild *b, DataSource *d, int split, double val_fraction, bool empty, GtError *err);
void data_build_free(JsonlBuild *b);

/* Skip the JSON value at *pp (no leading whitespace): a string, a nested object or array
 * (iteratively: any depth), or a scalar (which ends at end, so a cut one passes). -1 on malformed
 * or cut text. Syntax is not fully checked: cJSON does that on what is found. */
int data_json_skip(const char **pp, const char *end);

/* Stream a JSON array of objects (data_json.c) from the file at path (fd >= 0, read in bounded
 * chunks) or from buf[len] (fd < 0) into d through data_build_*. */
int data_json_build(DataSource *d, const char *name, int fd, const char *buf, size_t len, int split,
                    double val_fraction, const DataText *text, GtError *err);

/* messages rows (data_messages.c): the chat template (data.chat_template, else the tokenizer's
 * directory), and one row's messages (a cJSON array of {role, content}) as ids (no special tokens
 * added) and a per-token mask (1: trains); errors name pre+row and the column col. */
typedef struct DataChat DataChat;
int data_chat_open(DataChat **out, const DataText *text, const char *name, GtError *err);
void data_chat_free(DataChat *c); /* NULL is fine */
int data_chat_example(DataChat *c, const cJSON *messages, const char *pre, size_t row, const char *col, TokIds *ids,
                      GtBytes *mask, GtError *err);
/* the text the last data_chat_example rendered (valid until the next call) */
const char *data_chat_text(const DataChat *c, size_t *len);

/* Parquet rows (a file or a glob) into d through data_build_* (data_parquet.c): the columns of the
 * mapping, or of the first kind whose columns the files have (prompt/completion, messages, text),
 * each row as a record. */
int data_parquet_build(DataSource *d, const char *path, int split, double val_fraction,
                       const DataText *text, GtError *err);

/* SFT examples through the tokenizer, a batch at a time, in parallel (data_jsonl_tok.c). */
typedef struct JsonlTokBatch JsonlTokBatch;
JsonlTokBatch *jsonl_tok_new(const DataText *text, const char *name, const char *pre, int vocab_size);
void jsonl_tok_free(JsonlTokBatch *q);
size_t jsonl_tok_count(const JsonlTokBatch *q);
/* Queue one example's text (copied), from line lineno; prompt NULL (pn 0): a text row, every token trains. */
void jsonl_tok_add(JsonlTokBatch *q, const char *prompt, size_t pn, const char *completion, size_t cn, size_t lineno);
/* Encode the queued examples; -1 with the first failing example's error (in line order). */
int jsonl_tok_encode(JsonlTokBatch *q, GtError *err);
/* Example i's ids (EOS included), how many of them are the prompt, and its line. */
const int32_t *jsonl_tok_ids(const JsonlTokBatch *q, size_t i, size_t *n, size_t *plen, size_t *lineno);
void jsonl_tok_clear(JsonlTokBatch *q);

/* Fill tmpl's {field}s through lookup (returns 0 and the value, or -1 with err naming the field
 * the line lacks). The result replaces out's bytes. */
typedef int (*DataFieldLookup)(void *ctx, const char *field, const char **val, size_t *len, GtError *err);
int data_template_fill(const char *tmpl, DataFieldLookup lookup, void *ctx, GtBytes *out, GtError *err);

#endif
