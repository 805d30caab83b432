/* test_metrics.c - metrics.jsonl records parse back; console line; progress bar; resume prune. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"

static char m_dir[64];

static void m_setup(void) {
    snprintf(m_dir, sizeof m_dir, "/tmp/gt_metrics_XXXXXX");
    cr_assert_not_null(mkdtemp(m_dir));
}

static void m_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", m_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(metrics, .init = m_setup, .fini = m_teardown);

static TrainRecord make_train(long step, double loss) {
    TrainRecord r = {0};
    r.step = step;
    r.epoch = step * 0.125;
    r.loss = loss;
    r.lr = 3e-4;
    r.grad_norm = 1.25;
    r.tokens_per_sec = 12345.5;
    r.step_time_ms = 81.5;
    r.device_time_ms = 80.25;
    r.effective_batch = 32;
    r.num_items = 8128;
    for (int c = 0; c < MEM_COUNT; c++) {
        r.mem_current[c] = (uint64_t)(c + 1) << 20;
        r.mem_peak[c] = ((uint64_t)(c + 1) << 20) + 7;
    }
    r.mem_peak[MEM_PARAMS] = 5000000000ull; /* > 2^32 */
    return r;
}

/* read all lines of dir/metrics.jsonl, each parsed; returns the count */
static int read_records(cJSON **out, int max) {
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", m_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        cr_assert_eq(line[len - 1], '\n', "line not terminated");
        cr_assert_lt(n, max);
        out[n] = cJSON_Parse(line);
        cr_assert_not_null(out[n], "not JSON: %s", line);
        cr_assert(cJSON_IsObject(out[n]));
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", k);
    return v->valuedouble;
}

Test(metrics, records_parse_back) {
    GtError err = {0};
    MetricsWriter *m = metrics_open(m_dir, 0, &err);
    cr_assert_not_null(m, "%s", err.msg);
    TrainRecord a = make_train(10, 2.5);
    cr_assert_eq(metrics_write_train(m, &a, &err), 0, "%s", err.msg);
    TrainRecord b = make_train(20, NAN);
    b.skipped = true;
    b.grad_norm = INFINITY;
    cr_assert_eq(metrics_write_train(m, &b, &err), 0, "%s", err.msg);
    EvalRecord e = {.step = 20, .epoch = 2.5, .eval_loss = 2.75, .eval_perplexity = exp(2.75), .eval_tokens = 65536};
    cr_assert_eq(metrics_write_eval(m, &e, &err), 0, "%s", err.msg);
    cr_assert_eq(metrics_close(m, &err), 0);

    cJSON *r[8];
    int n = read_records(r, 8);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(cJSON_GetObjectItem(r[0], "type")->valuestring, "train");
    cr_assert_eq(num(r[0], "step"), 10);
    cr_assert_eq(num(r[0], "epoch"), 1.25);
    cr_assert_eq(num(r[0], "loss"), 2.5);
    cr_assert_float_eq(num(r[0], "lr"), 3e-4, 1e-12);
    cr_assert_eq(num(r[0], "grad_norm"), 1.25);
    cr_assert_eq(num(r[0], "tokens_per_sec"), 12345.5);
    cr_assert_eq(num(r[0], "step_time_ms"), 81.5);
    cr_assert_eq(num(r[0], "device_time_ms"), 80.25);
    cr_assert_eq(num(r[0], "effective_batch"), 32);
    cr_assert_eq(num(r[0], "num_items"), 8128);
    cr_assert(num(r[0], "time") > 1.6e9);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r[0], "skipped")));
    const cJSON *cur = cJSON_GetObjectItem(r[0], "mem_current");
    const cJSON *peak = cJSON_GetObjectItem(r[0], "mem_peak");
    cr_assert(cJSON_IsObject(cur) && cJSON_IsObject(peak));
    cr_assert_eq(cJSON_GetArraySize(cur), MEM_COUNT);
    for (int c = 0; c < MEM_COUNT; c++) {
        const char *name = mem_category_name((MemCategory)c);
        cr_assert_eq(num(cur, name), (double)a.mem_current[c]);
        cr_assert_eq(num(peak, name), (double)a.mem_peak[c]);
    }
    /* NaN / Inf written as null, skipped flag */
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r[1], "loss")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r[1], "grad_norm")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r[1], "skipped")));
    cr_assert_str_eq(cJSON_GetObjectItem(r[2], "type")->valuestring, "eval");
    cr_assert_eq(num(r[2], "step"), 20);
    cr_assert_eq(num(r[2], "eval_loss"), 2.75);
    cr_assert_float_eq(num(r[2], "eval_perplexity"), exp(2.75), 1e-6);
    cr_assert_eq(num(r[2], "eval_tokens"), 65536);
    for (int i = 0; i < n; i++) cJSON_Delete(r[i]);
}

Test(metrics, append_cuts_torn_line_and_prune) {
    GtError err = {0};
    MetricsWriter *m = metrics_open(m_dir, 0, &err);
    cr_assert_not_null(m);
    for (long s = 1; s <= 6; s++) {
        TrainRecord t = make_train(s, 3.0 - 0.1 * s);
        cr_assert_eq(metrics_write_train(m, &t, &err), 0);
    }
    cr_assert_eq(metrics_close(m, &err), 0);
    /* a killed writer leaves half a line */
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", m_dir);
    FILE *f = fopen(path, "a");
    fputs("{\"type\":\"train\",\"step\":7,\"lo", f);
    fclose(f);

    /* resume from checkpoint-4: steps 5, 6 and the torn line go */
    cr_assert_eq(metrics_prune(m_dir, 4, &err), 0, "%s", err.msg);
    cJSON *r[16];
    int n = read_records(r, 16);
    cr_assert_eq(n, 4);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(num(r[i], "step"), i + 1);
        cJSON_Delete(r[i]);
    }

    /* torn tail cut by an append open */
    f = fopen(path, "a");
    fputs("{\"type\":\"train\",\"step\":5,\"lo", f);
    fclose(f);
    m = metrics_open(m_dir, 1, &err);
    cr_assert_not_null(m, "%s", err.msg);
    TrainRecord t = make_train(5, 1.0);
    cr_assert_eq(metrics_write_train(m, &t, &err), 0);
    cr_assert_eq(metrics_close(m, &err), 0);
    n = read_records(r, 16);
    cr_assert_eq(n, 5);
    cr_assert_eq(num(r[4], "loss"), 1.0);
    for (int i = 0; i < n; i++) cJSON_Delete(r[i]);

    /* a file that is all torn */
    f = fopen(path, "w");
    fputs("{\"ty", f);
    fclose(f);
    m = metrics_open(m_dir, 1, &err);
    cr_assert_not_null(m);
    cr_assert_eq(metrics_close(m, &err), 0);
    f = fopen(path, "r");
    cr_assert_eq(fgetc(f), EOF);
    fclose(f);

    /* prune of a missing file is fine; open in a missing dir is an error */
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(metrics_prune(m_dir, 3, &err), 0);
    cr_assert_null(metrics_open("/nonexistent-dir/x", 0, &err));
    cr_assert(strstr(err.msg, "/nonexistent-dir/x/metrics.jsonl") != NULL, "%s", err.msg);
}

Test(metrics, console_line) {
    TrainRecord r = make_train(10, 2.50123);
    char buf[512];
    metrics_format_console(buf, sizeof buf, &r, 1000);
    cr_assert(strstr(buf, "step   10/1000") == buf, "%s", buf);
    cr_assert(strstr(buf, "loss 2.5012") != NULL, "%s", buf);
    cr_assert(strstr(buf, "lr 3.00e-04") != NULL, "%s", buf);
    cr_assert(strstr(buf, "12.3k tok/s") != NULL, "%s", buf);
    cr_assert(strstr(buf, "mem ") != NULL, "%s", buf);
    cr_assert_null(strstr(buf, "SKIPPED"));
    cr_assert_null(strchr(buf, '\n'));
    r.skipped = true;
    r.loss = NAN;
    metrics_format_console(buf, sizeof buf, &r, 0);
    cr_assert(strstr(buf, "step 10 |") == buf, "%s", buf);
    cr_assert(strstr(buf, "SKIPPED") != NULL, "%s", buf);
    EvalRecord e = {.step = 10, .eval_loss = 2.6, .eval_perplexity = 13.4637, .eval_tokens = 4096};
    metrics_format_eval(buf, sizeof buf, &e);
    cr_assert_str_eq(buf, "eval step 10 | eval_loss 2.6000 | ppl 13.46 | 4096 tokens");
    /* small buffers truncate, never overflow */
    char tiny[8];
    metrics_format_console(tiny, sizeof tiny, &r, 1000);
    cr_assert_eq(strlen(tiny), 7u);
}

Test(metrics, progress_bar) {
    char *s = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&s, &sz);
    cr_assert_not_null(f);
    metrics_progress(f, 45, 100, 12.0);
    fclose(f);
    cr_assert(s[0] == '\r');
    cr_assert(strstr(s, "45/100") != NULL, "%s", s);
    cr_assert(strstr(s, " 45%") != NULL, "%s", s);
    cr_assert(strstr(s, "00:12<00:15") != NULL, "%s", s); /* 55 steps at 3.75 it/s = 14.7 s */
    cr_assert(strstr(s, "3.75 it/s") != NULL, "%s", s);
    cr_assert_null(strchr(s, '\n'));
    free(s);

    f = open_memstream(&s, &sz);
    metrics_progress(f, 100, 100, 7300.0);
    metrics_progress(f, 0, 100, 0.0);
    metrics_progress_from(f, 60, 50, 100, 20.0); /* resumed at 50: 10 steps in 20 s */
    metrics_progress_clear(f);
    fclose(f);
    cr_assert(strstr(s, "100/100 100% 2:01:40<00:00") != NULL, "%s", s);
    cr_assert(strchr(s, '\n') != NULL);
    cr_assert(strstr(s, "--:--") != NULL, "%s", s);
    cr_assert(strstr(s, "00:20<01:20 2.00 s/it") != NULL, "%s", s);
    free(s);
}
