/* trainer_eval.c - the trainer's eval (the mean loss over the fixed eval windows, its log lines
 * and records) and what a finished run adds beside its weights: tokenizer.json and a sample. */
#include "trainer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "sample.h"

/* ---------------------------------------------------------------- eval */

long trainer_eval_windows(const RunConfig *cfg, const DataSource *val) {
    long n_windows = data_num_eval_windows(val);
    long cap = cfg->eval_max_batches * (long)cfg->per_device_eval_batch_size;
    return cfg->eval_max_batches > 0 && cap < n_windows ? cap : n_windows;
}

/* Mean loss over the fixed eval windows: the first n_windows (trainer_eval_windows), in order, in
 * chunks of at most the model's micro-batch. */
int trainer_eval_loss(Model *m, const DataSource *val, long n_windows, int *tok, int *tgt, int *pos,
                      EvalProgressFn progress, void *ctx, double *mean_loss, long *n_tokens, GtError *err) {
    double sum = 0.0;
    long items = 0;
    const int B = model_batch_rows(m);
    for (long w = 0; w < n_windows; w += B) {
        int rows = (int)(n_windows - w < B ? n_windows - w : B);
        data_fill_eval_pos(val, w, rows, tok, tgt, pos);
        double s = 0.0;
        if (model_step_pos(m, tok, tgt, pos, rows, 0.0f, false, &s, err)) return -1;
        sum += s;
        items += count_items(tgt, (size_t)rows * model_seq_len(m));
        if (progress) progress(ctx, w + rows, n_windows);
    }
    *mean_loss = items > 0 ? sum / (double)items : NAN;
    *n_tokens = items;
    return 0;
}

static int evaluate(Trainer *t, double *mean_loss, long *n_tokens, GtError *err) {
    return trainer_eval_loss(t->model, t->val, trainer_eval_windows(t->cfg, t->val), t->tok, t->tgt, t->pos, NULL, NULL,
                             mean_loss, n_tokens, err);
}

static int trainer_eval_loss_step(Trainer *t, long step, TrainSummary *summary, EvalRecord *out, GtError *err);

/* generation.task at an eval: the task on the training model, its accuracy into r, its results
 * into output_dir/eval_results-STEP.jsonl */
static int eval_generate(Trainer *t, long step, EvalRecord *r, GtError *err) {
    GtBytes jsonl = {0};
    EvalGenSummary s;
    char line[256], path[GT_PATH_MAX + 64];
    if (t->tty) metrics_progress_clear(stdout);
    gt_log("eval step %ld | generating for %ld prompts (%s)\n", step, eval_gen_count(t->gen), t->cfg->generation.data);
    int rc = eval_gen_run(t->gen, t->model, t->kv, false, &jsonl, &s, err);
    if (rc == 0 && s.stopped) {
        gt_log("eval step %ld | accuracy not measured: stopped by a signal\n", step);
    } else if (rc == 0) {
        snprintf(path, sizeof path, "%s/eval_results-%ld.jsonl", t->cfg->output_dir, step);
        rc = gt_write_file_atomic(path, jsonl.p ? jsonl.p : "", jsonl.n, err);
        if (rc == 0) {
            r->accuracy = true;
            r->eval_accuracy = s.accuracy;
            r->eval_correct = s.correct;
            r->eval_examples = s.n;
            gt_log("eval step %ld | eval %s | %ld tokens in %.1f s | %s\n", step, eval_gen_format(line, sizeof line, &s, t->cfg),
                   s.tokens, s.seconds, path);
        }
    }
    gt_bytes_free(&jsonl);
    return rc;
}

int trainer_eval(Trainer *t, long step, TrainSummary *summary, GtError *err) {
    EvalRecord r = {.step = step, .epoch = t->state.epoch, .no_loss = t->val == NULL};
    if (t->val && trainer_eval_loss_step(t, step, summary, &r, err)) return -1;
    if (t->gen && eval_generate(t, step, &r, err)) return -1;
    if (t->metrics && metrics_write_eval(t->metrics, &r, err)) return -1;
    if (t->tb && t->val) tboard_scalar(t->tb, "eval/loss", step, tboard_wall_time(), (float)r.eval_loss);
    if (t->tb && r.accuracy) tboard_scalar(t->tb, "eval/accuracy", step, tboard_wall_time(), (float)r.eval_accuracy);
    return 0;
}

/* the loss half of an eval: its log lines and the summary's eval losses, into r */
static int trainer_eval_loss_step(Trainer *t, long step, TrainSummary *summary, EvalRecord *out, GtError *err) {
    double vl;
    long vt;
    char line[256];
    long windows = trainer_eval_windows(t->cfg, t->val);
    if (t->tty) metrics_progress_clear(stdout);
    gt_log("%s\n", metrics_format_eval_start(line, sizeof line, step, windows, t->cfg->data.seq_len,
                                             t->cfg->data.val[0] ? t->cfg->data.val : "data.val_fraction of data.train"));
    if (evaluate(t, &vl, &vt, err)) return -1;
    EvalRecord r = *out;
    r.eval_loss = vl, r.eval_perplexity = exp(vl), r.eval_tokens = vt;
    *out = r;
    gt_log("%s\n", metrics_format_eval(line, sizeof line, &r));
    if (!summary->first_val_step) summary->first_val_loss = vl, summary->first_val_step = step;
    summary->last_val_loss = vl;
    summary->last_val_step = step;
    if (isfinite(vl) && !(vl >= summary->best_val_loss)) summary->best_val_loss = vl, summary->best_val_step = step;
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

