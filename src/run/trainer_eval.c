/* trainer_eval.c - the trainer's eval (the mean loss over the fixed eval windows, its log lines
 * and records) and what a finished run adds beside its weights: tokenizer.json and a sample. */
#include "trainer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

/* ---------------------------------------------------------------- eval */

/* Mean loss over the fixed eval windows: the first eval_max_batches * per_device_eval_batch_size
 * windows (all when eval_max_batches is 0), in order, in chunks of at most the model's micro-batch. */
static int evaluate(Trainer *t, double *mean_loss, long *n_tokens, GtError *err) {
    Model *m = t->model;
    long n_windows = data_num_eval_windows(t->val);
    long cap = t->cfg->eval_max_batches * (long)t->cfg->per_device_eval_batch_size;
    if (t->cfg->eval_max_batches > 0 && cap < n_windows) n_windows = cap;
    double sum = 0.0;
    long items = 0;
    const int B = model_batch_rows(m);
    for (long w = 0; w < n_windows; w += B) {
        int rows = (int)(n_windows - w < B ? n_windows - w : B);
        data_fill_eval_pos(t->val, w, rows, t->tok, t->tgt, t->pos);
        double s = 0.0;
        if (model_step_pos(m, t->tok, t->tgt, t->pos, rows, 0.0f, false, &s, err)) return -1;
        sum += s;
        items += count_items(t->tgt, (size_t)rows * model_seq_len(m));
    }
    *mean_loss = items > 0 ? sum / (double)items : NAN;
    *n_tokens = items;
    return 0;
}

int trainer_eval(Trainer *t, long step, TrainSummary *summary, GtError *err) {
    double vl;
    long vt;
    char line[256];
    long windows = data_num_eval_windows(t->val), cap = t->cfg->eval_max_batches * (long)t->cfg->per_device_eval_batch_size;
    if (t->cfg->eval_max_batches > 0 && cap < windows) windows = cap; /* as evaluate counts them */
    if (t->tty) metrics_progress_clear(stdout);
    gt_log("%s\n", metrics_format_eval_start(line, sizeof line, step, windows, t->cfg->data.seq_len,
                                             t->cfg->data.val[0] ? t->cfg->data.val : "data.val_fraction of data.train"));
    if (evaluate(t, &vl, &vt, err)) return -1;
    EvalRecord r = {.step = step, .epoch = t->state.epoch, .eval_loss = vl, .eval_perplexity = exp(vl), .eval_tokens = vt};
    gt_log("%s\n", metrics_format_eval(line, sizeof line, &r));
    if (!summary->first_val_step) summary->first_val_loss = vl, summary->first_val_step = step;
    summary->last_val_loss = vl;
    summary->last_val_step = step;
    if (isfinite(vl) && !(vl >= summary->best_val_loss)) summary->best_val_loss = vl, summary->best_val_step = step;
    if (t->metrics && metrics_write_eval(t->metrics, &r, err)) return -1;
    if (t->tb) tboard_scalar(t->tb, "eval/loss", step, tboard_wall_time(), (float)vl);
    return 0;
}

/* ---------------------------------------------------------------- the run */

/* output_dir/tokenizer.json: the run's tokenizer beside its weights, as HF's Trainer saves it, so
 * the directory (and gtrain sample on it) reads text again. */
int trainer_save_tokenizer(Trainer *t, GtError *err) {
    size_t len;
    const uint8_t *buf = tokenizer_raw(t->tokenizer, &len); /* as read at start, never read again */
    char dst[GT_PATH_MAX + 32];
    snprintf(dst, sizeof dst, "%s/tokenizer.json", t->cfg->output_dir);
    return gt_write_file_atomic(dst, buf, len, err);
}

void trainer_sample_at_end(Trainer *t) {
    const int n = t->cfg->sample_max_new_tokens;
    if (n <= 0 || t->rank != 0 || (!t->tokenizer && t->desc->vocab_size > 256)) return; /* ids alone say nothing */
    int start = '\n';
    if (t->tokenizer) { /* from BOS, or a newline's first token */
        const int *before, *after;
        int nb, na;
        tokenizer_template_ids(t->tokenizer, &before, &nb, &after, &na);
        TokEncoder *e = tok_encoder_new(t->tokenizer);
        TokIds ids = {0};
        GtError ignored = {0};
        if (nb > 0) start = before[0];
        else if (tok_encode(e, "sample", "\n", 1, false, &ids, &ignored) == 0 && ids.n > 0) start = ids.ids[0];
        tok_ids_free(&ids);
        tok_encoder_free(e);
        if (start >= t->desc->vocab_size) return;
    }
    uint64_t rng = t->cfg->seed;
    GtError err = {0};
    gt_log("sample (%d tokens, temperature 0.8, top-k 40):\n", n);
    if (sample_continue(t->model, &start, 1, n, 0.8, 40, &rng, t->tokenizer, true, stdout, &err))
        gt_warn("sample: %s\n", err.msg);
}

