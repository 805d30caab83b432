/* summary.c - what a training run says about its data at the start (trainer_log_data) and its
 * end-of-run summary (trainer_summary_print); see trainer.h. */
#include <math.h>
#include <stdio.h>

#include "data.h"
#include "trainer.h"

void trainer_log_data(const char *which, const char *path, const DataSource *d) {
    DataStats st;
    data_stats(d, &st);
    const int T = data_seq_len(d);
    if (data_format(d) != DATA_JSONL) {
        gt_log("data: %s %s: %llu tokens, %.0f windows of %d per epoch, nothing truncated or dropped\n", which, path,
               (unsigned long long)st.tokens, data_rows_per_epoch(d), T);
        return;
    }
    if (data_packed(d)) {
        const double cells = (double)st.packed_rows * T;
        gt_log("data: %s %s: %llu examples, %llu tokens (%llu before truncation), %llu truncated to seq_len+1 = %d, "
               "%llu train nothing; packed into %llu rows of %d (first-fit decreasing, no cross-talk), %.1f%% padding "
               "left\n",
               which, path, (unsigned long long)st.examples, (unsigned long long)st.tokens,
               (unsigned long long)st.tokens_full, (unsigned long long)st.truncated, T + 1,
               (unsigned long long)st.no_target, (unsigned long long)st.packed_rows, T,
               cells > 0 ? 100.0 * (1.0 - (double)st.packed_tokens / cells) : 0.0);
        return;
    }
    gt_log("data: %s %s: %llu examples, %llu tokens (%llu before truncation), %llu truncated to seq_len+1 = %d, %llu "
           "dropped (no completion token within seq_len+1: they train nothing)\n",
           which, path, (unsigned long long)st.examples, (unsigned long long)st.tokens,
           (unsigned long long)st.tokens_full, (unsigned long long)st.truncated, T + 1, (unsigned long long)st.no_target);
}

static const char *loss_text(char *buf, size_t cap, const char *what, double v, long step) {
    if (isfinite(v)) snprintf(buf, cap, "%s %.4f (step %ld)", what, v, step);
    else snprintf(buf, cap, "%s -", what);
    return buf;
}

void trainer_summary_print(const TrainSummary *s) {
    char a[64], b[64], c[64], m1[32], m2[32];
    const long done = s->steps - s->start_step;
    gt_log("run summary:\n");
    gt_log("  steps        %ld (steps %ld..%ld of %ld%s)\n", done, s->start_step + (done > 0), s->steps, s->max_steps,
           s->stopped_by_signal ? "; stopped by a signal" : s->start_step > 0 ? "; resumed" : "");
    gt_log("  tokens       %.0f\n", s->tokens);
    gt_log("  time         %.2f s (the training loop: steps, evaluations, checkpoints)\n", s->seconds);
    gt_log("  mean tok/s   %.0f\n", s->seconds > 0 ? s->tokens / s->seconds : 0.0);
    gt_log("  loss         %s, %s, %s\n", loss_text(a, sizeof a, "first", s->first_loss, s->first_step),
           loss_text(b, sizeof b, "last", s->last_loss, s->steps), loss_text(c, sizeof c, "best", s->best_loss, s->best_step));
    if (s->first_val_step > 0)
        gt_log("  eval_loss    %s, %s, %s\n", loss_text(a, sizeof a, "first", s->first_val_loss, s->first_val_step),
               loss_text(b, sizeof b, "last", s->last_val_loss, s->last_val_step),
               loss_text(c, sizeof c, "best", s->best_val_loss, s->best_val_step));
    gt_log("  peak memory  planned %s, measured %s (device)\n", gt_format_bytes(m1, sizeof m1, s->mem_planned),
           gt_format_bytes(m2, sizeof m2, s->mem_measured));
    if (done > 0)
        gt_log("  host waits   %llu in %ld optimizer steps, %llu of them device-wide syncs (a micro-step waits for "
               "nothing)\n", (unsigned long long)s->host_waits, done, (unsigned long long)s->syncs);
    gt_log("  weights      %s\n", s->weights[0] ? s->weights : "none written");
}
