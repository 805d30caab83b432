/* metrics.h - output_dir/metrics.jsonl, the console log line and the TTY progress bar.
 *
 * metrics.jsonl holds one JSON object per line, flushed after each record:
 *   {"type":"train","step":10,"epoch":0.25,"loss":2.5,"lr":0.0003,"grad_norm":1.2,
 *    "tokens_per_sec":12345.6,"step_time_ms":81.2,"device_time_ms":80.9,"effective_batch":32,
 *    "num_items":8128,
 *    "skipped":false,"time":1712345678.123,
 *    "mem_current":{"params":..,"grads":..,...},"mem_peak":{"params":..,...}}   (bytes)
 *   {"type":"eval","step":10,"epoch":0.25,"eval_loss":2.6,"eval_perplexity":13.5,
 *    "eval_tokens":65536,"time":...}
 *     (with generation.task also "eval_accuracy":0.41,"eval_correct":541,"eval_examples":1319; a run
 *     without validation data has those alone)
 *   {"type":"step","step":11,"loss":2.49,"step_time_ms":80.7,"tokens_per_sec":12400.2,"time":...}
 *     (a step that was not logged: every step has one record, "train" or "step", so the logging
 *     window's means can be checked against the steps' own times)
 * A "train" record also holds its logging window: "window_steps" (the steps since the previous
 * "train" record of this process, this one included), "window_step_time_ms" (their mean wall time),
 * "window_tokens_per_sec" (their tokens / their time) and "eta_s" (time left at the pace so far).
 * Category names are mem_category_name(). Non-finite numbers are written as null. "time" is the
 * wall clock (unix seconds) when the record was written. */
#ifndef GT_METRICS_H
#define GT_METRICS_H

#include "backend.h"
#include "common.h"

typedef struct {
    long step;              /* optimizer steps done, 1-based */
    double epoch;           /* fractional epochs of the train data seen */
    double loss;            /* the step's loss as HF's Trainer logs it: token mean (loss_normalization tokens) or
                               mean of the micro-batch means (steps); NaN when the step was skipped for NaN */
    double lr;
    double grad_norm;       /* before clipping */
    double tokens_per_sec;
    double step_time_ms;    /* wall clock, the whole step (data, sync, logging excluded) */
    double device_time_ms;  /* the step's compute on the device timeline (CUDA events; CPU: wall) */
    long effective_batch;   /* sequences per optimizer step, all ranks */
    long num_items;         /* predicted (non -100) tokens in the step, all ranks */
    bool skipped;           /* step skipped (NaN/Inf loss or grad norm) */
    bool empty;             /* no target token in the step's batch: no update */
    uint64_t mem_current[MEM_COUNT];
    uint64_t mem_peak[MEM_COUNT];
    /* the logging window: the steps since the previous logged step of this process (this one
     * included); 0 leaves them out and the console line shows the step's own figures */
    long window_steps;
    double window_step_time_ms;    /* mean wall time of the window's steps */
    double window_tokens_per_sec;  /* the window's tokens / the window's step time */
    double eta_s;                  /* wall time left at the run's pace so far (eval and saves included); NaN: unknown */
} TrainRecord;

typedef struct {
    long step;
    double epoch;
    double eval_loss;
    double eval_perplexity;
    long eval_tokens;
    bool no_loss;              /* a run without validation data: the generation task's accuracy alone */
    bool accuracy;             /* generation.task: eval_accuracy = eval_correct / eval_examples */
    double eval_accuracy;
    long eval_correct, eval_examples;
} EvalRecord;

typedef struct MetricsWriter MetricsWriter;

/* Open dir/metrics.jsonl (dir must exist). append=0 truncates; append=1 keeps what is there
 * (a torn last line left by a killed run is cut off first). NULL with err filled on failure. */
MetricsWriter *metrics_open(const char *dir, int append, GtError *err);
/* One record per call, flushed. Returns 0, or -1 with err filled (e.g. disk full). */
int metrics_write_train(MetricsWriter *m, const TrainRecord *r, GtError *err);
int metrics_write_eval(MetricsWriter *m, const EvalRecord *r, GtError *err);
/* A step that is not logged: its "step" record (step, loss, step_time_ms, tokens_per_sec, time). */
int metrics_write_step(MetricsWriter *m, const TrainRecord *r, GtError *err);
/* Close (NULL is fine); returns 0 or -1 with err filled if the final flush failed. */
int metrics_close(MetricsWriter *m, GtError *err);

/* For resume: rewrite dir/metrics.jsonl (atomically) keeping only the complete records with
 * step <= last_step, so a run resumed from checkpoint-N does not repeat steps N+1... that the
 * killed run had logged. A missing file is fine. Returns 0 or -1 with err filled. */
int metrics_prune(const char *dir, long last_step, GtError *err);

/* The human log line, e.g.
 * "step   10/1000 | epoch 0.25 | loss 2.5012 | lr 3.00e-04 | grad 1.234 | 12.3k tok/s | 81 ms | mem 1.25 GiB | eta 01:02:03"
 * (tok/s and ms: the logging window's means when r->window_steps > 0, else the step's own; eta:
 * when r->eta_s is finite; mem: the sum of the device categories' peaks; " | SKIPPED (non-finite)" when skipped, " | EMPTY"
 * when the step held no target token;
 * max_steps <= 0 leaves out the "/max"). Returns buf. */
const char *metrics_format_console(char *buf, size_t cap, const TrainRecord *r, long max_steps);
/* The line before an evaluation: "eval step 10 | evaluating 16 windows of 64 tokens (data.val)". */
const char *metrics_format_eval_start(char *buf, size_t cap, long step, long windows, int seq_len, const char *what);
/* The eval log line: "eval step 10 | eval_loss 2.6000 | ppl 13.46 | 65536 tokens". Returns buf. */
const char *metrics_format_eval(char *buf, size_t cap, const EvalRecord *r);

/* A \r-updated progress bar for TTYs: "[#########.........]  45/100  45% 00:12<00:15 3.75 it/s".
 * Prints a newline when step >= max_steps. The caller decides TTY or not (isatty). */
void metrics_progress(FILE *f, long step, long max_steps, double elapsed_s);
/* The same for a resumed run: the rate and ETA count only the steps done since start_step
 * (the step the run resumed from; elapsed_s is the time since then). */
void metrics_progress_from(FILE *f, long step, long start_step, long max_steps, double elapsed_s);
/* Seconds left to max_steps at the mean rate of the steps since start_step (NaN before the first
 * one): the progress bar's ETA and the log line's. */
double metrics_eta_seconds(long step, long start_step, long max_steps, double elapsed_s);
/* Erase the bar's line ("\r" + clear to end of line) before printing a log line over it. */
void metrics_progress_clear(FILE *f);

#endif
