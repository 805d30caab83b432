/* data_jsonl_tok.c - SFT examples through the tokenizer, a batch at a time in parallel: the jsonl
 * reader (data_jsonl.c) queues each line's prompt and completion text; a batch is encoded by every
 * OpenMP thread (one TokEncoder each) as encode(prompt + completion) and encode(prompt), with
 * special tokens, then EOS; the reader takes the results in line order, so they are the same for
 * any thread count, and so is the first error reported. */
#include <omp.h>
#include <stdlib.h>

#include "data_internal.h"

struct JsonlTokBatch {
    const DataText *text;
    const char *name, *pre; /* the file, and how a row is named ("FILE:" then the line) */
    int vocab_size;
    TokEncoder **enc; /* one a thread */
    int n_enc;
    char *buf; /* the batch's texts: each example's prompt, then its completion */
    size_t buf_n, buf_cap;
    size_t *off, *plen_bytes, *clen_bytes, *lineno;
    TokIds *ids;    /* each example's ids (EOS included) */
    size_t *plen;   /* each example's prompt tokens */
    GtError *errs;  /* each example's error, when failed */
    bool *failed;
    bool *whole; /* a text row: every token trains (no prompt) */
    size_t n, cap;
};

JsonlTokBatch *jsonl_tok_new(const DataText *text, const char *name, const char *pre, int vocab_size) {
    JsonlTokBatch *q = gt_xcalloc(1, sizeof *q);
    q->text = text;
    q->name = name;
    q->pre = pre;
    q->vocab_size = vocab_size;
    q->n_enc = omp_get_max_threads();
    q->enc = gt_xcalloc((size_t)q->n_enc, sizeof *q->enc);
    for (int i = 0; i < q->n_enc; i++) q->enc[i] = tok_encoder_new(text->tok);
    return q;
}

void jsonl_tok_free(JsonlTokBatch *q) {
    if (!q) return;
    for (int i = 0; i < q->n_enc; i++) tok_encoder_free(q->enc[i]);
    for (size_t i = 0; i < q->cap; i++) tok_ids_free(&q->ids[i]);
    free(q->enc);
    free(q->buf);
    free(q->off);
    free(q->plen_bytes);
    free(q->clen_bytes);
    free(q->lineno);
    free(q->ids);
    free(q->plen);
    free(q->errs);
    free(q->failed);
    free(q->whole);
    free(q);
}

size_t jsonl_tok_count(const JsonlTokBatch *q) { return q->n; }

void jsonl_tok_add(JsonlTokBatch *q, const char *prompt, size_t pn, const char *completion, size_t cn, size_t lineno) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 256;
        q->off = gt_xrealloc(q->off, cap * sizeof *q->off);
        q->plen_bytes = gt_xrealloc(q->plen_bytes, cap * sizeof *q->plen_bytes);
        q->clen_bytes = gt_xrealloc(q->clen_bytes, cap * sizeof *q->clen_bytes);
        q->lineno = gt_xrealloc(q->lineno, cap * sizeof *q->lineno);
        q->ids = gt_xrealloc(q->ids, cap * sizeof *q->ids);
        q->plen = gt_xrealloc(q->plen, cap * sizeof *q->plen);
        q->errs = gt_xrealloc(q->errs, cap * sizeof *q->errs);
        q->failed = gt_xrealloc(q->failed, cap * sizeof *q->failed);
        q->whole = gt_xrealloc(q->whole, cap * sizeof *q->whole);
        memset(q->ids + q->cap, 0, (cap - q->cap) * sizeof *q->ids);
        q->cap = cap;
    }
    if (q->buf_n + pn + cn + 1 > q->buf_cap) {
        q->buf_cap = (q->buf_n + pn + cn + 1) * 2;
        q->buf = gt_xrealloc(q->buf, q->buf_cap);
    }
    q->off[q->n] = q->buf_n;
    if (pn) memcpy(q->buf + q->buf_n, prompt, pn);
    if (cn) memcpy(q->buf + q->buf_n + pn, completion, cn);
    q->buf_n += pn + cn;
    q->plen_bytes[q->n] = pn;
    q->clen_bytes[q->n] = cn;
    q->lineno[q->n] = lineno;
    q->whole[q->n] = prompt == NULL;
    q->n++;
}

/* One example: its ids, EOS, the vocabulary check, and the prompt's token count. */
static int encode_one(JsonlTokBatch *q, TokEncoder *e, size_t i, TokIds *prompt_ids, GtError *err) {
    char where[GT_PATH_MAX + 64];
    snprintf(where, sizeof where, "%s%zu: prompt + completion", q->pre, q->lineno[i]);
    TokIds *ids = &q->ids[i];
    ids->n = prompt_ids->n = 0;
    const char *s = q->buf + q->off[i];
    if (tok_encode(e, where, s, q->plen_bytes[i] + q->clen_bytes[i], true, ids, err) != 0 ||
        tok_encode(e, where, s, q->plen_bytes[i], true, prompt_ids, err) != 0)
        return -1;
    /* the prompt: as TRL 1.16 (sft_trainer's common_prefix_length), the tokens encode(prompt) and
     * encode(prompt + completion) share, so a token merging across the boundary trains and the
     * post-processor's trailing tokens after the prompt are not counted */
    size_t common = 0;
    while (common < prompt_ids->n && common < ids->n && prompt_ids->ids[common] == ids->ids[common]) common++;
    q->plen[i] = q->whole[i] ? 0 : common;
    if (q->text->add_eos && (ids->n == 0 || ids->ids[ids->n - 1] != q->text->eos_id)) tok_ids_push(ids, q->text->eos_id);
    for (size_t k = 0; k < ids->n; k++)
        if (ids->ids[k] >= q->vocab_size)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s%zu: the tokenizer gives id %d, >= the model's vocab_size %d",
                            q->pre, q->lineno[i], ids->ids[k], q->vocab_size);
    return 0;
}

int jsonl_tok_encode(JsonlTokBatch *q, GtError *err) {
    const long n = (long)q->n;
    if (gt_stop_signal()) /* a batch of lines at a time: a large file is not read to its end first */
        return gt_error(err, GT_EXIT_FAILURE, "%s: reading stopped by signal %d", q->name, gt_stop_signal());
#pragma omp parallel
    {
        TokIds prompt_ids = {0};
        TokEncoder *e = q->enc[omp_get_thread_num() % q->n_enc];
#pragma omp for schedule(dynamic, 16)
        for (long i = 0; i < n; i++) {
            q->errs[i].code = 0;
            q->failed[i] = encode_one(q, e, (size_t)i, &prompt_ids, &q->errs[i]) != 0;
        }
        tok_ids_free(&prompt_ids);
    }
    for (long i = 0; i < n; i++)
        if (q->failed[i]) {
            if (err) *err = q->errs[i];
            return -1;
        }
    return 0;
}

const int32_t *jsonl_tok_ids(const JsonlTokBatch *q, size_t i, size_t *n, size_t *plen, size_t *lineno) {
    *n = q->ids[i].n;
    *plen = q->plen[i];
    *lineno = q->lineno[i];
    return q->ids[i].ids;
}

void jsonl_tok_clear(JsonlTokBatch *q) {
    q->n = 0;
    q->buf_n = 0;
}
