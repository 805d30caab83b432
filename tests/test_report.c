/* test_report.c - report.svg from a hand-written metrics.jsonl (and one from the writer). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"
#include "report.h"

static char r_top[64], r_dir[96];

static void r_setup(void) {
    snprintf(r_top, sizeof r_top, "/tmp/gt_report_XXXXXX");
    cr_assert_not_null(mkdtemp(r_top));
    snprintf(r_dir, sizeof r_dir, "%s/run", r_top);
    cr_assert_eq(mkdir(r_dir, 0755), 0);
}

static void r_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r_top);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(report, .init = r_setup, .fini = r_teardown);

static FILE *open_metrics(void) {
    char p[160];
    snprintf(p, sizeof p, "%s/metrics.jsonl", r_dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    return f;
}

static char *read_svg(void) {
    char p[160];
    snprintf(p, sizeof p, "%s/report.svg", r_dir);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f, "no report.svg");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    snprintf(p, sizeof p, "%s/report.svg.tmp", r_dir);
    cr_assert_neq(access(p, F_OK), 0, "temporary file left behind");
    return s;
}

/* number of "x,y" pairs in the points of the polyline with this id; -1 if absent */
static int polyline_points(const char *svg, const char *id) {
    char key[64];
    snprintf(key, sizeof key, "<polyline id=\"%s\"", id);
    const char *p = strstr(svg, key);
    if (!p) return -1;
    p = strstr(p, "points=\"");
    cr_assert_not_null(p);
    p += 8;
    const char *end = strchr(p, '"');
    cr_assert_not_null(end);
    int n = 0;
    for (const char *c = p; c < end; c++) {
        if (*c == ',') n++;
        else cr_assert(strchr("0123456789.- ", *c) != NULL, "odd char '%c' in points of %s", *c, id);
    }
    return n;
}

static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* a minimal well-formedness check: tags balance, no scripts or external references */
static void check_svg(const char *svg) {
    cr_assert(strncmp(svg, "<svg", 4) == 0, "does not start with <svg");
    size_t L = strlen(svg);
    cr_assert(L > 7 && strcmp(svg + L - 7, "</svg>\n") == 0, "does not end with </svg>");
    cr_assert_null(strstr(svg, "nan"));
    cr_assert_null(strstr(svg, "NaN"));
    cr_assert_null(strstr(svg, "inf"));
    cr_assert_null(strstr(svg, "<script"));
    cr_assert_null(strstr(svg, "href"));
    cr_assert_null(strstr(svg, "url("));
    char stack[64][32];
    int depth = 0;
    for (const char *p = svg; (p = strchr(p, '<'));) {
        const char *gt = strchr(p, '>');
        cr_assert_not_null(gt);
        cr_assert_null(memchr(p + 1, '<', (size_t)(gt - p - 1)), "'<' inside a tag");
        if (p[1] == '/') {
            cr_assert_gt(depth, 0);
            size_t n = strlen(stack[depth - 1]);
            cr_assert(strncmp(p + 2, stack[depth - 1], n) == 0 && p[2 + n] == '>', "mismatched </...>");
            depth--;
        } else if (gt[-1] != '/') {
            size_t n = strcspn(p + 1, " >");
            cr_assert_lt(n, sizeof stack[0]);
            cr_assert_lt(depth, 64);
            memcpy(stack[depth], p + 1, n);
            stack[depth][n] = '\0';
            depth++;
        }
        p = gt + 1;
    }
    cr_assert_eq(depth, 0, "unclosed tags");
    for (const char *p = svg; (p = strchr(p, '&')); p++)
        cr_assert(strncmp(p, "&amp;", 5) == 0 || strncmp(p, "&lt;", 4) == 0 ||
                  strncmp(p, "&gt;", 4) == 0 || strncmp(p, "&quot;", 6) == 0);
}

Test(report, hand_written_metrics) {
    FILE *f = open_metrics();
    for (int s = 1; s <= 12; s++) {
        fprintf(f,
                "{\"type\":\"train\",\"step\":%d,\"epoch\":%.3f,\"loss\":%.4f,\"lr\":0.0003,"
                "\"grad_norm\":1.0,\"tokens_per_sec\":%d,\"step_time_ms\":80,\"effective_batch\":8,"
                "\"num_items\":1000,\"skipped\":false,\"mem_peak\":{\"params\":%d,\"grads\":%d,"
                "\"optimizer\":%d,\"activations\":%d,\"host_offload\":0}}\n",
                s * 10, s * 0.1, 4.0 / s + 1.0, 10000 + 100 * s, 50 << 20, 50 << 20, 100 << 20,
                (30 + s) << 20);
        if (s % 4 == 0)
            fprintf(f, "{\"type\":\"eval\",\"step\":%d,\"eval_loss\":%.4f,\"eval_perplexity\":%.3f}\n",
                    s * 10, 4.0 / s + 1.2, exp(4.0 / s + 1.2));
        if (s == 6) fprintf(f, "this is not json\n\n{\"no_step\": 1}\n[1,2]\n");
    }
    fclose(f);
    GtError err = {0};
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
    char *svg = read_svg();
    check_svg(svg);
    cr_assert_eq(polyline_points(svg, "train_loss"), 12);
    cr_assert_eq(polyline_points(svg, "eval_loss"), 3);
    cr_assert_eq(polyline_points(svg, "tokens_per_sec"), 12);
    cr_assert_eq(count_of(svg, "no data"), 0);
    cr_assert(strstr(svg, "gtrain run: run<") != NULL);
    cr_assert(strstr(svg, "params 50.0 MiB") != NULL, "legend with MiB");
    cr_assert(strstr(svg, "optimizer 100.0 MiB") != NULL);
    cr_assert(strstr(svg, "activations 42.0 MiB") != NULL);
    cr_assert_null(strstr(svg, "host_offload")); /* zero categories are left out */
    cr_assert_eq(count_of(svg, "<polygon class=\"mem\""), 4);
    free(svg);

    /* where a renderer is installed, the SVG must render (the test does not depend on one) */
    if (access("/usr/bin/rsvg-convert", X_OK) == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "/usr/bin/rsvg-convert '%s/report.svg' -o '%s/report.png' 2>&1", r_dir, r_dir);
        cr_assert_eq(system(cmd), 0, "rsvg-convert failed on report.svg");
    }

    /* rewriting replaces the old report */
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
}

Test(report, zero_and_one_record) {
    FILE *f = open_metrics();
    fclose(f);
    GtError err = {0};
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
    char *svg = read_svg();
    check_svg(svg);
    cr_assert_eq(count_of(svg, "no data"), 3);
    cr_assert_eq(polyline_points(svg, "train_loss"), -1);
    free(svg);

    f = open_metrics();
    fprintf(f, "{\"type\":\"train\",\"step\":1,\"loss\":2.5,\"tokens_per_sec\":1000,"
               "\"mem_peak\":{\"params\":1048576}}\n");
    fclose(f);
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
    svg = read_svg();
    check_svg(svg);
    cr_assert_eq(polyline_points(svg, "train_loss"), 1);
    cr_assert_eq(polyline_points(svg, "eval_loss"), 0);
    cr_assert_eq(polyline_points(svg, "tokens_per_sec"), 1);
    cr_assert_eq(count_of(svg, "no data"), 0);
    cr_assert(strstr(svg, "<circle") != NULL); /* a lone point is drawn as a marker */
    cr_assert(strstr(svg, "params 1.0 MiB") != NULL);
    free(svg);
}

Test(report, nulls_and_missing_file) {
    FILE *f = open_metrics();
    fprintf(f, "{\"type\":\"train\",\"step\":1,\"loss\":null,\"tokens_per_sec\":null}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":2,\"loss\":null,\"tokens_per_sec\":null}\n");
    fclose(f);
    GtError err = {0};
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
    char *svg = read_svg();
    check_svg(svg);
    cr_assert_eq(count_of(svg, "no data"), 3);
    free(svg);

    char p[160];
    snprintf(p, sizeof p, "%s/metrics.jsonl", r_dir);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(report_write(r_dir, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, p) != NULL, "%s", err.msg);
}

/* the writer's records and the reader agree */
Test(report, from_metrics_writer) {
    GtError err = {0};
    MetricsWriter *m = metrics_open(r_dir, 0, &err);
    cr_assert_not_null(m, "%s", err.msg);
    for (long s = 1; s <= 5000; s++) { /* more than REPORT_MAX_POINTS: thinned */
        TrainRecord t = {.step = s, .loss = 3.0 / (1.0 + s * 0.01), .tokens_per_sec = 5e5 + s,
                         .lr = 1e-3, .grad_norm = 1};
        if (s == 100) {
            t.loss = NAN;
            t.skipped = true;
        }
        t.mem_peak[MEM_PARAMS] = 3ull << 30; /* 3 GiB */
        t.mem_peak[MEM_HOST_OFFLOAD] = (uint64_t)s << 10;
        cr_assert_eq(metrics_write_train(m, &t, &err), 0);
        if (s % 1000 == 0) {
            EvalRecord e = {.step = s, .eval_loss = 2.0, .eval_perplexity = exp(2.0), .eval_tokens = 10};
            cr_assert_eq(metrics_write_eval(m, &e, &err), 0);
        }
    }
    cr_assert_eq(metrics_close(m, &err), 0);
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
    char *svg = read_svg();
    check_svg(svg);
    int np = polyline_points(svg, "train_loss");
    cr_assert(np >= REPORT_MAX_POINTS / 2 && np <= REPORT_MAX_POINTS + 1, "%d points", np);
    cr_assert_eq(polyline_points(svg, "eval_loss"), 5);
    cr_assert(strstr(svg, "params 3072.0 MiB") != NULL);
    cr_assert(strstr(svg, "host_offload") != NULL);
    free(svg);
}

/* Every number in a coordinate attribute is finite and on the page (the SVG is 1040 x 990). */
static void check_numbers(const char *svg) {
    static const char *const names[] = {"x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height", "points"};
    int checked = 0;
    for (const char *p = svg; (p = strchr(p, '=')); p++) {
        if (p[1] != '"') continue;
        const char *nb = p;
        while (nb > svg && nb[-1] != ' ') nb--;
        bool numeric = false;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            numeric = numeric || ((size_t)(p - nb) == strlen(names[k]) && strncmp(nb, names[k], (size_t)(p - nb)) == 0);
        const char *v = p + 2, *end = strchr(v, '"');
        cr_assert_not_null(end);
        if (!numeric || end[-1] == '%') continue;
        for (const char *q = v; q < end;) {
            while (q < end && (*q == ' ' || *q == ',')) q++;
            if (q >= end) break;
            char *after;
            double d = strtod(q, &after);
            cr_assert(after > q && after <= end, "not a number in %.*s=\"%.40s\"", (int)(p - nb), nb, v);
            cr_assert(isfinite(d) && fabs(d) <= 1e5, "coordinate %g in %.*s", d, (int)(p - nb), nb);
            checked++;
            q = after;
        }
    }
    cr_assert_gt(checked, 0);
}

/* where xmllint is installed (Debian: libxml2-utils), the SVG must be well-formed XML */
static void xmllint_ok(const char *path) {
    if (access("/usr/bin/xmllint", X_OK) != 0) return; /* optional tool: the other checks stand */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/xmllint --noout '%s' 2>&1", path);
    cr_assert_eq(system(cmd), 0, "xmllint rejects %s", path);
}

Test(report, empty_path_refused) {
    GtError err = {0};
    cr_assert_eq(report_write("", &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, "no run directory") != NULL, "%s", err.msg);
}

/* metrics.jsonl as a FIFO (no writer: the open must not block), /dev/zero, a directory or a file
 * over the size cap: one line naming it, code 2, and no report.svg written */
Test(report, special_or_huge_metrics_refused, .timeout = 20) {
    char p[160], svgp[160];
    snprintf(p, sizeof p, "%s/metrics.jsonl", r_dir);
    snprintf(svgp, sizeof svgp, "%s/report.svg", r_dir);
    const char *kinds[] = {"fifo", "zero", "dir", "huge"};
    for (int k = 0; k < 4; k++) {
        if (k == 0) cr_assert_eq(mkfifo(p, 0600), 0);
        if (k == 1) cr_assert_eq(symlink("/dev/zero", p), 0);
        if (k == 2) cr_assert_eq(mkdir(p, 0755), 0);
        if (k == 3) { /* sparse: 300 MiB of holes cost no disk */
            FILE *f = fopen(p, "w");
            cr_assert_not_null(f);
            cr_assert_eq(ftruncate(fileno(f), 300l << 20), 0);
            fclose(f);
        }
        GtError err = {0};
        cr_assert_eq(report_write(r_dir, &err), -1, "%s: accepted", kinds[k]);
        cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "%s: code %d: %s", kinds[k], err.code, err.msg);
        cr_assert(strstr(err.msg, p) == err.msg, "%s: does not name the file: %s", kinds[k], err.msg);
        cr_assert_null(strchr(err.msg, '\n'));
        cr_assert_neq(access(svgp, F_OK), 0, "%s: report.svg written", kinds[k]);
        cr_assert_eq(k == 2 ? rmdir(p) : unlink(p), 0);
    }
}

/* NaN-producing and extreme numbers never reach the SVG: the records that hold them are left out
 * (or the value is), the others are drawn */
Test(report, extreme_values_never_reach_the_svg) {
    FILE *f = open_metrics();
    for (int s = 1; s <= 3; s++)
        fprintf(f, "{\"type\":\"train\",\"step\":%d,\"loss\":%g,\"tokens_per_sec\":1000,\"mem_peak\":{\"params\":1048576}}\n",
                s, 2.0 / s);
    fprintf(f, "{\"type\":\"train\",\"step\":4,\"loss\":1e308,\"tokens_per_sec\":-1e308,\"mem_peak\":{\"params\":1e308}}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":5,\"loss\":-1e308,\"tokens_per_sec\":1e999,\"mem_peak\":{\"grads\":-1e999}}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":6,\"loss\":5e-324,\"tokens_per_sec\":5e-324}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":1e300,\"loss\":1.0}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":-1e308,\"loss\":1.0}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":9e18,\"loss\":1.0}\n");
    fprintf(f, "{\"type\":\"train\",\"step\":1e999,\"loss\":1.0}\n");
    fprintf(f, "{\"type\":\"eval\",\"step\":2,\"eval_loss\":1e308}\n");
    fprintf(f, "{\"type\":\"eval\",\"step\":3,\"eval_loss\":1.3}\n");
    fclose(f);
    GtError err = {0};
    cr_assert_eq(report_write(r_dir, &err), 0, "%s", err.msg);
    char *svg = read_svg();
    check_svg(svg);
    check_numbers(svg);
    cr_assert_eq(polyline_points(svg, "train_loss"), 4); /* steps 1, 2, 3, 6 */
    cr_assert_eq(polyline_points(svg, "eval_loss"), 1);  /* step 3 */
    cr_assert_eq(polyline_points(svg, "tokens_per_sec"), 4);
    cr_assert(strstr(svg, ">6 train records (steps 1 to 6), 2 eval records<") != NULL);
    free(svg);
    char p[160];
    snprintf(p, sizeof p, "%s/report.svg", r_dir);
    xmllint_ok(p);
}

/* the run's name comes from a path: invalid UTF-8 and markup in it still give valid XML */
Test(report, hostile_run_name_stays_valid_xml) {
    char dir[160];
    snprintf(dir, sizeof dir, "%s/a<&\xff\xfe\xc3\xa9", r_top);
    cr_assert_eq(mkdir(dir, 0755), 0);
    char p[200];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"type\":\"train\",\"step\":1,\"loss\":2.5}\n{\"type\":\"train\",\"step\":2,\"loss\":2.0}\n");
    fclose(f);
    GtError err = {0};
    cr_assert_eq(report_write(dir, &err), 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s/report.svg", dir);
    f = fopen(p, "r");
    cr_assert_not_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cr_assert(strstr(buf, "gtrain run: a&lt;&amp;??\xc3\xa9<") != NULL, "title not escaped as expected");
    xmllint_ok(p);
}
