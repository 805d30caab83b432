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

/* Read run_dir/metrics.jsonl (bad lines are skipped with a warning) and write run_dir/report.svg
 * atomically. 0 or 1 records give panels that say "no data". Returns 0, or -1 with err filled
 * (missing metrics.jsonl: GT_EXIT_BAD_INPUT; a write failure: GT_EXIT_FAILURE). */
int report_write(const char *run_dir, GtError *err);

#endif
