/* report.h - report.svg: a self-contained picture of a run, from its metrics.jsonl.
 *
 * Three panels: train and eval loss vs step, tokens/s vs step, and peak memory by category
 * (stacked areas, legend with each category's peak in MiB). No scripts, no external references:
 * it opens in any browser. Series longer than REPORT_MAX_POINTS are thinned evenly (the last
 * point is always kept). */
#ifndef GT_REPORT_H
#define GT_REPORT_H

#include "common.h"

#define REPORT_MAX_POINTS 2000

/* What is read: metrics.jsonl must be a regular file (a FIFO, device or directory is refused
 * without blocking) of at most REPORT_MAX_METRICS_BYTES, with at most REPORT_MAX_RECORDS records.
 * A value that is not a finite number of magnitude at most REPORT_MAX_ABS is left out (a record
 * whose step is such is skipped), so the SVG holds finite coordinates only. */
#define REPORT_MAX_METRICS_BYTES (256ull << 20) /* 256 MiB: ~500k records of a real run */
#define REPORT_MAX_RECORDS (1 << 21)
#define REPORT_MAX_ABS 1e18

/* Read run_dir/metrics.jsonl (bad lines are skipped with a warning) and write run_dir/report.svg
 * atomically. 0 or 1 records give panels that say "no data". Returns 0, or -1 with err filled
 * (an empty run_dir, a missing, special or oversized metrics.jsonl: GT_EXIT_BAD_INPUT; a write
 * failure: GT_EXIT_FAILURE). */
int report_write(const char *run_dir, GtError *err);

/* The SVG text of a metrics.jsonl held in memory (metrics[len]; title: the run's name shown on
 * top, name: the file in messages) into *svg (NUL-terminated, *svg_len bytes, the caller frees
 * it). Returns 0, or -1 with err filled (too many records). For report_write, tests and fuzzing. */
int report_svg(const char *title, const char *metrics, size_t len, const char *name, char **svg, size_t *svg_len,
               GtError *err);

#endif
