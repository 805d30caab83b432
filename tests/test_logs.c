/* test_logs.c - what a run tells a newcomer, checked against what it recorded: the log line's tok/s
 * and ms are the logging window's means of the per-step times in metrics.jsonl, every log line has
 * an ETA, an evaluation is announced before its result, the end-of-run summary agrees with
 * metrics.jsonl, the data statistics at the start, resolved_config.yaml loads back as the same run;
 * and auto-fit's printed rule, applied by this test to its printed candidates, picks what auto-fit
 * picked, which is also what the refusal of a fixed layout recommends (and that layout fits). */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "run_util.h"
#include "test_util.h"

#define MAX_REC 64

typedef struct {
    int n_steps;             /* steps with a record (train or step) */
    double time_ms[MAX_REC]; /* per step (1-based) */
    double loss[MAX_REC];
    bool logged[MAX_REC];
    long win[MAX_REC];       /* train records: window_steps */
    double win_ms[MAX_REC], win_tps[MAX_REC];
    uint64_t mem_peak_dev;   /* the last train record's device categories' peaks, summed */
    int n_eval;
    long eval_step[8];
    double eval_loss[8];
} Metrics;

static const char *const DEVICE_CATS[] = {"params", "frozen", "grads", "optimizer", "activations", "recompute_stash",
                                          "recompute_scratch", "workspace", "logits"};

static void read_metrics(const char *out, Metrics *m) {
    char p[600];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *s = slurp(p, NULL);
    cr_assert_not_null(s, "no %s", p);
    memset(m, 0, sizeof *m);
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "not JSON: %s", line);
        const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
        long step = (long)cJSON_GetObjectItem(j, "step")->valuedouble;
        cr_assert(step >= 1 && step < MAX_REC, "step %ld", step);
        if (!strcmp(type, "eval")) {
            cr_assert_lt(m->n_eval, 8);
            m->eval_step[m->n_eval] = step;
            m->eval_loss[m->n_eval++] = cJSON_GetObjectItem(j, "eval_loss")->valuedouble;
        } else {
            cr_assert(!strcmp(type, "train") || !strcmp(type, "step"), "record type %s", type);
            cr_assert_eq(step, m->n_steps + 1, "records out of order or missing at step %ld", step);
            m->n_steps = (int)step;
            m->time_ms[step] = cJSON_GetObjectItem(j, "step_time_ms")->valuedouble;
            m->loss[step] = cJSON_GetObjectItem(j, "loss")->valuedouble;
            if (!strcmp(type, "train")) {
                m->logged[step] = true;
                m->win[step] = (long)cJSON_GetObjectItem(j, "window_steps")->valuedouble;
                m->win_ms[step] = cJSON_GetObjectItem(j, "window_step_time_ms")->valuedouble;
                m->win_tps[step] = cJSON_GetObjectItem(j, "window_tokens_per_sec")->valuedouble;
                const cJSON *mp = cJSON_GetObjectItem(j, "mem_peak");
                m->mem_peak_dev = 0;
                for (size_t c = 0; c < sizeof DEVICE_CATS / sizeof *DEVICE_CATS; c++)
                    m->mem_peak_dev += (uint64_t)cJSON_GetObjectItem(mp, DEVICE_CATS[c])->valuedouble;
            }
        }
        cJSON_Delete(j);
    }
    free(s);
}

/* "114.1k" / "950" / "1.20M" as the console prints a rate */
static double parse_rate(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'k') v *= 1e3;
    if (*end == 'M') v *= 1e6;
    if (*end == 'G') v *= 1e9;
    return v;
}

/* the line of text that starts with prefix, copied into buf; NULL when none */
static const char *line_starting(const char *text, const char *prefix, char *buf, size_t cap) {
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            size_t n = strcspn(p, "\n");
            snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
            return buf;
        }
    }
    return NULL;
}

Test(logs, window_means_eta_eval_line_and_summary_agree_with_metrics, .timeout = 120) {
    Ws w;
    ws_init(&w);
    /* 14 steps, logged at 1 (the first), 4, 8, 12 and 14 (the last); windows of 1, 3, 4, 4, 2 steps */
    int st = run(&w, NULL, "a", "max_steps=14", "logging_steps=4", "eval_steps=6", "save_steps=5", NULL);
    expect_exit(&w, "a", st, 0);
    char *out = read_log(&w, "a", "out");
    Metrics m;
    read_metrics(w.out, &m);
    cr_assert_eq(m.n_steps, 14, "every step has a record");
    const double tokens_per_step = 4 * 32; /* the fixture: per_device_train_batch_size 4, seq_len 32 */
    int n_lines = 0;
    long prev = 0;
    for (const char *p = strncmp(out, "step ", 5) ? strstr(out, "\nstep ") : out; p; p = strstr(p + 1, "\nstep ")) {
        if (*p == '\n') p++;
        long step, max;
        cr_assert_eq(sscanf(p, "step %ld/%ld", &step, &max), 2, "%.200s", p);
        cr_assert(m.logged[step], "step %ld logged on the console but not in metrics.jsonl", step);
        /* the window: the steps after the previous logged one, their own times from metrics.jsonl */
        double sum_ms = 0;
        for (long k = prev + 1; k <= step; k++) sum_ms += m.time_ms[k];
        const long n = step - prev;
        cr_expect_eq(m.win[step], n, "step %ld: window of %ld steps recorded, %ld expected", step, m.win[step], n);
        cr_expect(fabs(m.win_ms[step] - sum_ms / n) <= 1e-6 * sum_ms + 1e-6, "step %ld: window mean %g ms, steps say %g",
                  step, m.win_ms[step], sum_ms / n);
        const double tps = tokens_per_step * n / (sum_ms / 1e3);
        cr_expect(fabs(m.win_tps[step] - tps) <= 1e-6 * tps, "step %ld: window %g tok/s, steps say %g", step,
                  m.win_tps[step], tps);
        /* the console shows the window's means (3 significant digits for the rate, whole ms) */
        const char *tk = strstr(p, " tok/s");
        const char *bar = tk;
        while (bar > p && bar[-1] != ' ') bar--;
        double shown = parse_rate(bar);
        cr_expect(fabs(shown - tps) <= 0.006 * tps + 1, "step %ld: console %g tok/s, window %g", step, shown, tps);
        double ms;
        cr_assert_eq(sscanf(tk, " tok/s | %lf ms", &ms), 1, "%.200s", p);
        cr_expect(fabs(ms - sum_ms / n) <= 0.5 + 1e-9, "step %ld: console %g ms, window mean %g", step, ms, sum_ms / n);
        const char *eol = strchr(p, '\n');
        const char *eta = strstr(p, " | eta ");
        cr_expect(eta && (!eol || eta < eol), "step %ld: no ETA on the log line: %.200s", step, p);
        prev = step;
        n_lines++;
    }
    cr_assert_eq(n_lines, 5, "log lines at steps 1, 4, 8, 12, 14: %s", out);
    /* each evaluation is announced before its result */
    for (int e = 0; e < m.n_eval; e++) {
        char want[64], res[64];
        snprintf(want, sizeof want, "eval step %ld | evaluating ", m.eval_step[e]);
        snprintf(res, sizeof res, "eval step %ld | eval_loss", m.eval_step[e]);
        const char *a = strstr(out, want), *b = strstr(out, res);
        cr_expect(a && b && a < b, "no announcement before the eval of step %ld: %s", m.eval_step[e], out);
    }
    cr_assert_eq(m.n_eval, 3, "evaluations at 6, 12 and 14");
    /* the summary, against metrics.jsonl */
    char l[512];
    long steps, a0, a1, of;
    cr_assert_not_null(line_starting(out, "  steps ", l, sizeof l), "no summary: %s", out);
    cr_assert_eq(sscanf(l, "  steps %ld (steps %ld..%ld of %ld", &steps, &a0, &a1, &of), 4, "%s", l);
    cr_expect(steps == 14 && a0 == 1 && a1 == 14 && of == 14, "%s", l);
    double tokens;
    cr_assert_not_null(line_starting(out, "  tokens ", l, sizeof l));
    cr_assert_eq(sscanf(l, "  tokens %lf", &tokens), 1);
    cr_expect_eq(tokens, 14 * tokens_per_step);
    double first, last, best;
    long fs, ls, bs;
    cr_assert_not_null(line_starting(out, "  loss ", l, sizeof l));
    cr_assert_eq(sscanf(l, "  loss first %lf (step %ld), last %lf (step %ld), best %lf (step %ld)", &first, &fs, &last,
                        &ls, &best, &bs), 6, "%s", l);
    long want_best = 1;
    for (long k = 1; k <= 14; k++)
        if (m.loss[k] < m.loss[want_best]) want_best = k;
    cr_expect(fs == 1 && fabs(first - m.loss[1]) < 6e-5, "%s", l);
    cr_expect(ls == 14 && fabs(last - m.loss[14]) < 6e-5, "%s", l);
    cr_expect(bs == want_best && fabs(best - m.loss[want_best]) < 6e-5, "%s (metrics: best %g at %ld)", l,
              m.loss[want_best], want_best);
    cr_assert_not_null(line_starting(out, "  eval_loss ", l, sizeof l));
    cr_assert_eq(sscanf(l, "  eval_loss first %lf (step %ld), last %lf (step %ld), best %lf (step %ld)", &first, &fs,
                        &last, &ls, &best, &bs), 6, "%s", l);
    int be = 0;
    for (int e = 1; e < m.n_eval; e++)
        if (m.eval_loss[e] < m.eval_loss[be]) be = e;
    cr_expect(fs == m.eval_step[0] && fabs(first - m.eval_loss[0]) < 6e-5, "%s", l);
    cr_expect(ls == m.eval_step[m.n_eval - 1] && fabs(last - m.eval_loss[m.n_eval - 1]) < 6e-5, "%s", l);
    cr_expect(bs == m.eval_step[be] && fabs(best - m.eval_loss[be]) < 6e-5, "%s", l);
    /* memory: measured is the metrics' device peak (planned equals it on the CPU) */
    char mem[32], want[900];
    gt_format_bytes(mem, sizeof mem, m.mem_peak_dev);
    snprintf(want, sizeof want, "  peak memory  planned %s, measured %s (device)", mem, mem);
    cr_assert_not_null(line_starting(out, "  peak memory ", l, sizeof l));
    cr_expect_str_eq(l, want);
    snprintf(want, sizeof want, "  weights      %s", w.out);
    cr_assert_not_null(line_starting(out, "  weights ", l, sizeof l));
    cr_expect_str_eq(l, want);
    /* the data statistics at the start: the fixture's train.txt, its last 10 % the val split */
    size_t bytes;
    char txt[400];
    snprintf(txt, sizeof txt, "%s/train.txt", w.dir);
    free(slurp(txt, &bytes));
    const long n_train = (long)floor((double)bytes * 0.9);
    cr_assert_not_null(line_starting(out, "data: train split of ", l, sizeof l), "%s", out);
    snprintf(want, sizeof want, "%s: %ld tokens,", txt, n_train);
    cr_expect(strstr(l, want) != NULL, "expected \"%s\" in: %s", want, l);
    cr_assert_not_null(line_starting(out, "data: val split of ", l, sizeof l), "%s", out);
    snprintf(want, sizeof want, "%s: %ld tokens,", txt, (long)bytes - n_train);
    cr_expect(strstr(l, want) != NULL, "expected \"%s\" in: %s", want, l);
    free(out);
    ws_fini(&w);
}

/* SFT jsonl: examples, tokens as kept and before truncation, truncated and dropped, counted here
 * from the file itself (byte-level tokens: prompt + completion bytes) */
Test(logs, sft_data_statistics_count_the_examples, .timeout = 60) {
    Ws w;
    ws_init(&w);
    char path[400];
    snprintf(path, sizeof path, "%s/sft.jsonl", w.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    const int T = 32;
    long examples = 0, kept = 0, full = 0, truncated = 0, dropped = 0;
    uint64_t rng = 5;
    for (int i = 0; i < 40; i++) {
        int pl = 1 + (int)(rng_next(&rng) % 40), cl = (int)(rng_next(&rng) % 12);
        char pr[64], co[16];
        memset(pr, 'p', (size_t)pl), pr[pl] = 0;
        memset(co, 'c', (size_t)cl), co[cl] = 0;
        fprintf(f, "{\"prompt\": \"%s\", \"completion\": \"%s\"}\n", pr, co);
        examples++;
        full += pl + cl;
        kept += pl + cl < T + 1 ? pl + cl : T + 1;
        truncated += pl + cl > T + 1;
        /* a target is a completion token at position >= 1 within the row's T+1 tokens */
        dropped += !(cl > 0 && pl < T + 1);
    }
    fclose(f);
    char train[450];
    snprintf(train, sizeof train, "data.train=%s", path);
    int st = run(&w, NULL, "sft", train, "data.format=jsonl", "data.val_fraction=0", "max_steps=1", "save_steps=0", NULL);
    expect_exit(&w, "sft", st, 0);
    char *out = read_log(&w, "sft", "out");
    char l[512], want[600];
    cr_assert_not_null(line_starting(out, "data: train ", l, sizeof l), "%s", out);
    snprintf(want, sizeof want, ": %ld examples, %ld tokens (%ld before truncation), %ld truncated to seq_len+1 = %d, %ld dropped",
             examples, kept, full, truncated, T + 1, dropped);
    cr_expect(strstr(l, want) != NULL, "expected \"%s\" in: %s", want, l);
    free(out);
    ws_fini(&w);
}

/* the value of key in a resolved_config.yaml (a top-level key: "key: value  # source") */
static bool yaml_value(const char *text, const char *key, char *val, size_t cap, char *src, size_t scap) {
    char pre[80];
    snprintf(pre, sizeof pre, "%s: ", key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, pre, strlen(pre)) == 0) {
            p += strlen(pre);
            size_t n = strcspn(p, "\n");
            const char *hash = strstr(p, "  # ");
            if (!hash || hash > p + n) return false;
            snprintf(val, cap, "%.*s", (int)(hash - p), p);
            snprintf(src, scap, "%.*s", (int)(p + n - hash - 4), hash + 4);
            return true;
        }
    return false;
}

Test(logs, resolved_config_holds_auto_fit_and_loads_back_as_the_same_run, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "a", "max_steps=4", "save_steps=2", "per_device_train_batch_size=auto", "train_batch_size=8",
                 "memory_limit=1500000", NULL);
    expect_exit(&w, "a", st, 0);
    char *out = read_log(&w, "a", "out");
    int B, A;
    const char *fit = strstr(out, "auto-fit: per_device_train_batch_size ");
    cr_assert_not_null(fit, "%s", out);
    cr_assert_eq(sscanf(fit, "auto-fit: per_device_train_batch_size %d x gradient_accumulation_steps %d", &B, &A), 2);
    char p[500];
    snprintf(p, sizeof p, "%s/resolved_config.yaml", w.out);
    char *y = slurp(p, NULL);
    cr_assert_not_null(y, "no %s", p);
    char v[600], src[64], want[16];
    cr_assert(yaml_value(y, "per_device_train_batch_size", v, sizeof v, src, sizeof src), "%s", y);
    snprintf(want, sizeof want, "%d", B);
    cr_expect_str_eq(v, want);
    cr_expect_str_eq(src, "auto-fit");
    cr_assert(yaml_value(y, "gradient_accumulation_steps", v, sizeof v, src, sizeof src), "%s", y);
    snprintf(want, sizeof want, "%d", A);
    cr_expect_str_eq(v, want);
    cr_expect_str_eq(src, "auto-fit");
    cr_assert(yaml_value(y, "output_dir", v, sizeof v, src, sizeof src), "%s", y);
    snprintf(p, sizeof p, "\"%s\"", w.out);
    cr_expect_str_eq(v, p, "the path absolute and clean");
    cr_expect_null(strstr(y, "lora:"), "a full fine-tune's resolved config has no lora: section (it would make a LoRA run)");
    free(y);
    /* the saved config is the same run: a resume from it is accepted and continues at step 4 */
    snprintf(p, sizeof p, "%s/gtrain_run.json", w.out);
    char *id0 = slurp(p, NULL);
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/resolved_config.yaml", w.out);
    const char *sets[] = {"max_steps=6", "resume_from_checkpoint=latest"};
    Proc pr;
    start_v(&pr, &w, cfg, NULL, "b", sets, 2);
    st = wait_proc(&pr);
    expect_exit(&w, "b", st, 0);
    char *out2 = read_log(&w, "b", "out");
    cr_expect_not_null(strstr(out2, "resumed from"), "%s", out2);
    cr_expect_not_null(strstr(out2, "at step 4"), "%s", out2);
    char *id1 = slurp(p, NULL);
    cr_assert(id0 && id1);
    cJSON *j0 = cJSON_Parse(id0), *j1 = cJSON_Parse(id1);
    cr_assert(j0 && j1);
    char *r0 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j0, "run")), *r1 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j1, "run"));
    cr_assert(r0 && r1, "%s", id0);
    cr_expect_str_eq(r1, r0, "the run's identity changed");
    free(r0), free(r1);
    cJSON_Delete(j0), cJSON_Delete(j1);
    /* and a changed seed is a different run: refused */
    const char *sets2[] = {"max_steps=6", "resume_from_checkpoint=latest", "seed=12"};
    start_v(&pr, &w, cfg, NULL, "c", sets2, 3);
    st = wait_proc(&pr);
    cr_expect_neq(st, 0, "a different seed must not resume this run");
    free(id0), free(id1), free(out), free(out2);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- auto-fit */

typedef struct {
    int B, A, recomputed, every;
    bool offload, fits, chosen;
    double bytes;
} Row;

static double parse_bytes(const char *s) {
    char unit[8] = "";
    double v = 0;
    cr_assert(sscanf(s, "%lf %7s", &v, unit) >= 1, "%s", s);
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    for (int i = 0; i < 5; i++)
        if (!strncmp(unit, u[i], strlen(u[i])) && strlen(unit) >= strlen(u[i]) && (unit[strlen(u[i])] == 0 || unit[strlen(u[i])] == ' '))
            return v * pow(1024, i);
    cr_assert_fail("unit %s", unit);
    return 0;
}

/* The printed table; returns the rows. */
static int parse_rows(const char *out, Row *r, int cap) {
    int n = 0;
    for (const char *p = strstr(out, "\n  B "); p && n < cap; p = strstr(p + 1, "\n  B ")) {
        Row x = {0};
        int k = 0;
        cr_assert_eq(sscanf(p, "\n  B %d x A %d | %n", &x.B, &x.A, &k), 2, "%.100s", p);
        const char *q = p + k;
        if (!strncmp(q, "does not fit", 12)) {
            x.fits = false;
        } else {
            x.fits = true;
            int n_layer;
            if (!strncmp(q, "recompute none", 14)) {
                cr_assert_eq(sscanf(q, "recompute none (%d of %d layers)", &x.recomputed, &n_layer), 2, "%.100s", q);
            } else {
                cr_assert_eq(sscanf(q, "recompute every_n_layers %d (%d of %d layers)", &x.every, &x.recomputed, &n_layer), 3,
                             "%.100s", q);
            }
            const char *off = strstr(q, "| offload ");
            x.offload = !strncmp(off, "| offload yes", 13);
            x.bytes = parse_bytes(strchr(off + 2, '|') + 2);
            const char *eol = strchr(q, '\n');
            const char *ch = strstr(q, "| chosen");
            x.chosen = ch && (!eol || ch < eol);
        }
        r[n++] = x;
    }
    return n;
}

/* the rule as the log states it, applied here: a micro-batch of 4 or more when one fits, then the
 * fewest recomputed layers, then no offload, then the largest micro-batch */
static int rule_pick(const Row *r, int n, long per_rank) {
    int best = -1;
    const int pref = per_rank >= 4 ? 4 : 1;
    for (int i = 0; i < n; i++) {
        if (!r[i].fits) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const Row *a = &r[i], *b = &r[best];
        bool better;
        if ((a->B >= pref) != (b->B >= pref)) better = a->B >= pref;
        else if (a->recomputed != b->recomputed) better = a->recomputed < b->recomputed;
        else if (a->offload != b->offload) better = !a->offload;
        else better = a->B > b->B;
        if (better) best = i;
    }
    return best;
}

static void check_budget(const char *config, const char *budget) {
    const char *root = getenv("GTRAIN_ROOT"), *bin = getenv("GTRAIN_BIN");
    cr_assert(root && bin);
    char *out = test_sh_output(true, "'%s' plan --config '%s/configs/%s' --set memory_limit=%s; echo EXIT=$?", bin, root,
                               config, budget);
    Row r[64];
    int n = parse_rows(out, r, 64);
    cr_assert_gt(n, 0, "%s: no candidates printed: %s", budget, out);
    cr_expect_not_null(strstr(out, "auto-fit rule: a micro-batch of 4 or more when one fits"), "%s", out);
    const long per_rank = (long)r[0].B * r[0].A;
    int pick = rule_pick(r, n, per_rank);
    double limit = parse_bytes(budget[0] ? budget : "0 B");
    for (int i = 0; i < n; i++)
        if (r[i].fits) cr_expect(r[i].bytes <= limit * 1.0001, "%s: a row over the limit: B %d", budget, r[i].B);
    if (pick < 0) { /* nothing fits: refused */
        cr_expect_not_null(strstr(out, "EXIT=2"), "%s: nothing fits, expected a refusal: %s", budget, out);
        free(out);
        return;
    }
    cr_expect(r[pick].chosen, "%s: the rule picks B %d x A %d, the table marks another: %s", budget, r[pick].B, r[pick].A, out);
    char want[200];
    snprintf(want, sizeof want, "auto-fit: per_device_train_batch_size %d x gradient_accumulation_steps %d, %s", r[pick].B,
             r[pick].A, r[pick].recomputed ? "gradient_checkpointing" : "no recompute");
    cr_expect_not_null(strstr(out, want), "%s: expected \"%s\": %s", budget, want, out);
    cr_expect_not_null(strstr(out, "EXIT=0"), "%s", out);
    /* a fixed layout over the budget (the whole batch in one micro-batch, no recompute) is refused,
     * recommending the same layout; that layout, set by hand, fits */
    char *ref = test_sh_output(true,
                               "'%s' plan --config '%s/configs/%s' --set memory_limit=%s --set per_device_train_batch_size=%ld "
                               "--set gradient_accumulation_steps=1; echo EXIT=$?",
                               bin, root, config, budget, per_rank);
    if (strstr(ref, "EXIT=2")) {
        const char *rec = strstr(ref, "for the same effective batch");
        cr_assert_not_null(rec, "%s: the refusal recommends nothing: %s", budget, ref);
        snprintf(want, sizeof want, "per_device_train_batch_size %d x gradient_accumulation_steps %d, ", r[pick].B, r[pick].A);
        cr_expect_not_null(strstr(rec, want), "%s: the refusal recommends another layout than auto-fit's %s: %s", budget,
                           want, rec);
        char extra[200] = "";
        if (r[pick].recomputed)
            snprintf(extra, sizeof extra, "--set gradient_checkpointing=true --set every_n_layers=%d --set offload=%s",
                     r[pick].every, r[pick].offload ? "true" : "false");
        char *fixed = test_sh_output(true,
                                     "'%s' plan --config '%s/configs/%s' --set memory_limit=%s --set "
                                     "per_device_train_batch_size=%d --set gradient_accumulation_steps=%d %s; echo EXIT=$?",
                                     bin, root, config, budget, r[pick].B, r[pick].A, extra);
        cr_expect_not_null(strstr(fixed, "EXIT=0"), "%s: the recommended layout does not fit: %s", budget, fixed);
        free(fixed);
    }
    free(ref);
    free(out);
}

Test(autofit, the_printed_rule_picks_the_chosen_candidate_and_the_refusal_agrees, .timeout = 120) {
    const char *budgets[] = {"16GiB", "20GiB", "22GiB", "24GiB", "30GiB", "48GiB", "80GiB"};
    for (size_t i = 0; i < sizeof budgets / sizeof *budgets; i++) {
        check_budget("mistral-7b-pissa.yaml", budgets[i]);
        check_budget("mistral-7b-lora-r16.yaml", budgets[i]);
    }
}
