/* data_parquet.c - parquet rows as data: each row of the requested columns (parquet.h reads them
 * lazily, a row group at a time) written as a JSON object and handed to the one record converter
 * (data_build_object), so a parquet row, a jsonl line and a JSON array element read alike. Which
 * columns: data.columns' mapping, else the first kind whose columns the files have, tried in TRL's
 * order (prompt/completion, then messages, then text). */
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "json_string.h"
#include "parquet.h"

static const char *col_or(const char *c, const char *dflt) { return c && c[0] ? c : dflt; }

/* one value as JSON */
static void put_value(GtBytes *o, const PqValue *v) {
    char num[32];
    switch (v->kind) {
    case PQ_STRING: json_string_encode(o, v->s ? v->s : "", v->len); break;
    case PQ_INT: gt_bytes_put(o, num, (size_t)snprintf(num, sizeof num, "%lld", (long long)v->i)); break;
    case PQ_MESSAGES:
        gt_bytes_put(o, "[", 1);
        for (size_t k = 0; k < v->n_msgs; k++) {
            const PqMessage *m = &v->msgs[k];
            if (k) gt_bytes_put(o, ", ", 2);
            if (!m->role && !m->content) {
                gt_bytes_put(o, "null", 4);
                continue;
            }
            gt_bytes_put(o, "{\"role\": ", 9);
            if (m->role) json_string_encode(o, m->role, m->role_len);
            else gt_bytes_put(o, "null", 4);
            gt_bytes_put(o, ", \"content\": ", 13);
            if (m->content) json_string_encode(o, m->content, m->content_len);
            else gt_bytes_put(o, "null", 4);
            gt_bytes_put(o, "}", 1);
        }
        gt_bytes_put(o, "]", 1);
        break;
    default: gt_bytes_put(o, "null", 4); break;
    }
}

#define PQ_GEN_COLS 9 /* generation prompts: the answer and at most 8 template fields */

/* a template's {field}: recorded as a column to read (at most PQ_GEN_COLS - 1, each once) */
typedef struct {
    char names[PQ_GEN_COLS - 1][CONFIG_COLUMN_MAX];
    int n;
} GenFields;
static int gen_field(void *ctx, const char *field, const char **val, size_t *len, GtError *err) {
    GenFields *g = ctx;
    *val = "", *len = 0;
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->names[i], field) == 0) return 0;
    if (g->n == PQ_GEN_COLS - 1 || strlen(field) >= CONFIG_COLUMN_MAX)
        return gt_error(err, GT_EXIT_BAD_INPUT, "generation.prompt_template: expected at most %d fields of at most %d "
                        "bytes for parquet data, found more", PQ_GEN_COLS - 1, CONFIG_COLUMN_MAX - 1);
    snprintf(g->names[g->n++], CONFIG_COLUMN_MAX, "%s", field);
    return 0;
}

int data_parquet_build(DataSource *d, const char *path, int split, double val_fraction,
                       const DataText *text, GtError *err) {
    GenFields gf = {.n = 0};
    const char *gen[PQ_GEN_COLS];
    int n_gen = 0;
    if (text && text->gen_prompts) { /* the answer, then the prompt's columns */
        gen[n_gen++] = col_or(text->col_answer, "answer");
        GtBytes scratch = {0};
        if (text->prompt_template && text->prompt_template[0]) {
            int frc = data_template_fill(text->prompt_template, gen_field, &gf, &scratch, err);
            gt_bytes_free(&scratch);
            if (frc) return -1;
            for (int i = 0; i < gf.n; i++) gen[n_gen++] = gf.names[i];
        } else {
            gen[n_gen++] = text->col_messages && text->col_messages[0] ? text->col_messages : col_or(text->col_prompt, "prompt");
        }
    }
    const char *pc[2] = {col_or(text ? text->col_prompt : NULL, "prompt"),
                         col_or(text ? text->col_completion : NULL, "completion")};
    const char *msgs[1] = {col_or(text ? text->col_messages : NULL, "messages")};
    const char *txt[1] = {col_or(text ? text->col_text : NULL, "text")};
    const char *const *sets[4] = {pc, msgs, txt, gen};
    const int counts[4] = {2, 1, 1, n_gen};
    int order[3] = {0, 1, 2}, n_try = 3;
    if (n_gen) order[0] = 3, n_try = 1;
    else if (text && text->col_messages && text->col_messages[0]) order[0] = 1, n_try = 1;
    else if (text && ((text->col_prompt && text->col_prompt[0]) || (text->col_completion && text->col_completion[0])))
        n_try = 1;
    else if (text && text->col_text && text->col_text[0]) order[0] = 2, n_try = 1;
    ParquetReader *r = NULL;
    GtError first = {0};
    int set = -1;
    for (int t = 0; t < n_try && !r; t++) {
        GtError e = {0};
        if (parquet_open(&r, path, sets[order[t]], counts[order[t]], &e) == 0) {
            set = order[t];
        } else {
            r = NULL;
            if (t == 0) first = e;
            if (e.code != GT_EXIT_BAD_INPUT) { /* an I/O failure: no use trying other columns */
                first = e;
                break;
            }
        }
    }
    if (!r) {
        if (err) *err = first;
        return -1;
    }
    JsonlBuild *b = NULL;
    int rc = -1;
    GtBytes obj = {0};
    PqValue v[PQ_GEN_COLS];
    if (data_build_begin(&b, d, path, "row", text, err) != 0) goto out;
    for (;;) {
        int got = parquet_next_row(r, v, err);
        if (got < 0) goto out;
        if (got == 0) break;
        obj.n = 0;
        gt_bytes_put(&obj, "{", 1);
        for (int c = 0; c < counts[set]; c++) {
            if (c) gt_bytes_put(&obj, ", ", 2);
            json_string_encode(&obj, sets[set][c], strlen(sets[set][c]));
            gt_bytes_put(&obj, ": ", 2);
            put_value(&obj, &v[c]);
        }
        gt_bytes_put(&obj, "}", 1);
        if (data_build_object(b, obj.p, obj.n, (size_t)parquet_current_row(r), err) != 0) goto out;
    }
    rc = data_build_finish(b, d, split, val_fraction, false, err);
    b = NULL;
out:
    data_build_free(b);
    gt_bytes_free(&obj);
    parquet_close(r);
    return rc;
}
