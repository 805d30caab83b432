/* report.c - see report.h. */
#include "report.h"

#include "backend.h"
#include "cli.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ data */

typedef struct {
    double *v;
    size_t n, cap;
} Vec;

static void vec_push(Vec *a, double x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->v = gt_xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = x;
}

typedef struct {
    Vec step, loss, tps;      /* train records */
    Vec mem[MEM_COUNT];       /* mem_peak per category, bytes (train records) */
    Vec estep, eloss;         /* eval records */
} Series;

static void series_free(Series *s) {
    free(s->step.v);
    free(s->loss.v);
    free(s->tps.v);
    for (int c = 0; c < MEM_COUNT; c++) free(s->mem[c].v);
    free(s->estep.v);
    free(s->eloss.v);
}

/* A number of a record, or NaN when absent, not a number, not finite or beyond REPORT_MAX_ABS:
 * such values are left out of the picture, so every coordinate computed from them stays finite. */
static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= REPORT_MAX_ABS)) return NAN;
    return v->valuedouble;
}

static size_t series_records(const Series *s) { return s->step.n + s->estep.n; }

/* The records of a metrics.jsonl held in memory (buf[len]; name for messages). Lines that are not
 * a JSON object with a usable "step" are skipped with a warning (a run killed mid-write leaves a
 * cut last line); more than REPORT_MAX_RECORDS records is an error (code 2). */
static int parse_metrics(const char *name, const char *buf, size_t len, Series *s, GtError *err) {
    long lineno = 0, bad = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        const char *line = buf + pos;
        pos += n + 1;
        lineno++;
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++)
            blank = line[i] == ' ' || line[i] == '\r' || line[i] == '\t';
        if (blank) continue;
        if (series_records(s) >= REPORT_MAX_RECORDS)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%ld: expected at most %d records, found more", name, lineno,
                            REPORT_MAX_RECORDS);
        cJSON *j = cJSON_ParseWithLength(line, n);
        double step = cJSON_IsObject(j) ? jnum(j, "step") : NAN;
        if (!isfinite(step)) {
            if (bad++ < 5)
                gt_warn("%s:%ld: skipped a line that is not a JSON object with a \"step\" (a number of magnitude at "
                        "most %g)\n",
                        name, lineno, REPORT_MAX_ABS);
            cJSON_Delete(j);
            continue;
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "step") == 0) { /* a step not logged: the curves keep to the logged ones */
            cJSON_Delete(j);
            continue;
        }
        bool is_eval = cJSON_IsString(type) ? strcmp(type->valuestring, "eval") == 0
                                            : cJSON_GetObjectItemCaseSensitive(j, "eval_loss") != NULL;
        if (is_eval) {
            vec_push(&s->estep, step);
            vec_push(&s->eloss, jnum(j, "eval_loss"));
        } else {
            vec_push(&s->step, step);
            vec_push(&s->loss, jnum(j, "loss"));
            vec_push(&s->tps, jnum(j, "tokens_per_sec"));
            const cJSON *mp = cJSON_GetObjectItemCaseSensitive(j, "mem_peak");
            for (int c = 0; c < MEM_COUNT; c++) {
                double v = cJSON_IsObject(mp) ? jnum(mp, mem_category_name((MemCategory)c)) : NAN;
                vec_push(&s->mem[c], isfinite(v) && v >= 0 ? v : 0.0);
            }
        }
        cJSON_Delete(j);
    }
    if (bad > 5) gt_warn("%s: %ld bad lines skipped in all\n", name, bad);
    return 0;
}

/* ------------------------------------------------------------------ SVG text */

typedef struct {
    char *p;
    size_t len, cap;
} Out;

static void out_printf(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(Out *o, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p ? o->p + o->len : NULL, o->p ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (o->p && (size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + (size_t)n + 1) cap *= 2;
        o->p = gt_xrealloc(o->p, cap);
        o->cap = cap;
    }
}

/* length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one */
static int utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n <= 1) return n;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    unsigned cp = c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) cp = cp << 6 | (s[i] & 0x3Fu);
    static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0; /* overlong, surrogate */
    return n;
}

/* XML text: markup characters escaped, control bytes dropped, invalid UTF-8 bytes as '?' (the
 * run's name comes from a path, and an SVG must be valid XML to open at all) */
static void out_escaped(Out *o, const char *str) {
    for (const unsigned char *s = (const unsigned char *)str; *s;) {
        int n = utf8_len(s);
        switch (n ? *s : 0) {
        case '&': out_printf(o, "&amp;"); break;
        case '<': out_printf(o, "&lt;"); break;
        case '>': out_printf(o, "&gt;"); break;
        case '"': out_printf(o, "&quot;"); break;
        case 0: out_printf(o, "?"); break;
        default:
            if (*s >= 0x20 && *s != 0x7F) out_printf(o, "%.*s", n, (const char *)s);
        }
        s += n ? n : 1;
    }
}

/* tick label: 4 significant digits, k/M/G suffixes for big numbers */
static const char *fmt_tick(char *buf, size_t cap, double v) {
    double a = fabs(v);
    if (a >= 1e9) snprintf(buf, cap, "%.4gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, cap, "%.4gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, cap, "%.4gk", v / 1e3);
    else if (a < 1e-12) snprintf(buf, cap, "0");
    else snprintf(buf, cap, "%.4g", v);
    return buf;
}

static double nice_step(double range, int target) {
    double raw = range / target;
    double e = pow(10.0, floor(log10(raw)));
    double f = raw / e;
    double nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return nf * e;
}

/* ------------------------------------------------------------------ panels */

#define SVG_W 1040
#define PLOT_X 80
#define PLOT_W 700
#define PLOT_H 220
#define PANEL_H 300
#define MAX_TICKS 40

typedef struct {
    double x0, x1, y0, y1; /* data range */
    double top;            /* pixel y of the plot's top edge */
} Axes;

static double px(const Axes *a, double x) { return PLOT_X + (x - a->x0) / (a->x1 - a->x0) * PLOT_W; }
static double py(const Axes *a, double y) { return a->top + PLOT_H - (y - a->y0) / (a->y1 - a->y0) * PLOT_H; }

static void range_of(const Vec *v, double *lo, double *hi) {
    for (size_t i = 0; i < v->n; i++)
        if (isfinite(v->v[i])) {
            if (v->v[i] < *lo) *lo = v->v[i];
            if (v->v[i] > *hi) *hi = v->v[i];
        }
}

static void fix_range(double *lo, double *hi, bool pad) {
    if (!(*lo <= *hi)) { /* nothing finite */
        *lo = 0;
        *hi = 1;
        return;
    }
    if (*hi - *lo < 1e-12 * fmax(1.0, fabs(*hi))) {
        double d = 0.1 * fabs(*hi);
        if (!(d >= 1e-200)) d = 1.0; /* 0 or a subnormal: a width that divides without overflow */
        *lo -= d;
        *hi += d;
    } else if (pad) {
        double d = 0.05 * (*hi - *lo);
        *lo -= d;
        *hi += d;
    }
}

static void panel_frame(Out *o, const char *title, const char *ylabel, double top) {
    out_printf(o, "<text x=\"%d\" y=\"%.1f\" class=\"ptitle\">%s</text>\n", PLOT_X, top - 12, title);
    out_printf(o, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", PLOT_X,
               top, PLOT_W, PLOT_H);
    out_printf(o,
               "<text transform=\"translate(%d,%.1f) rotate(-90)\" class=\"axis\" "
               "text-anchor=\"middle\">%s</text>\n",
               18, top + PLOT_H / 2.0, ylabel);
}

static void panel_no_data(Out *o, double top) {
    out_printf(o, "<text x=\"%.1f\" y=\"%.1f\" class=\"nodata\" text-anchor=\"middle\">no data</text>\n",
               PLOT_X + PLOT_W / 2.0, top + PLOT_H / 2.0);
}

static void panel_axes(Out *o, const Axes *a) {
    char lab[32];
    /* y ticks */
    double ys = nice_step(a->y1 - a->y0, 5);
    int k = 0; /* at most MAX_TICKS: a step below the values' resolution must not loop forever */
    for (double y = ceil(a->y0 / ys) * ys; y <= a->y1 + 1e-9 * ys && k < MAX_TICKS; y += ys, k++) {
        double yy = py(a, y);
        out_printf(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>\n", PLOT_X, yy,
                   PLOT_X + PLOT_W, yy);
        out_printf(o, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n",
                   PLOT_X - 6, yy + 4, fmt_tick(lab, sizeof lab, y));
    }
    /* x ticks: integer steps */
    double xs = nice_step(a->x1 - a->x0, 8);
    if (xs < 1) xs = 1;
    k = 0;
    for (double x = ceil(a->x0 / xs) * xs; x <= a->x1 + 1e-9 * xs && k < MAX_TICKS; x += xs, k++) {
        double xx = px(a, x);
        out_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", xx,
                   a->top, xx, a->top + PLOT_H);
        out_printf(o, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n",
                   xx, a->top + PLOT_H + 16, fmt_tick(lab, sizeof lab, x));
    }
    out_printf(o, "<text x=\"%.1f\" y=\"%.1f\" class=\"axis\" text-anchor=\"middle\">step</text>\n",
               PLOT_X + PLOT_W / 2.0, a->top + PLOT_H + 34);
}

static size_t stride_for(size_t n) { return n > REPORT_MAX_POINTS ? (n + REPORT_MAX_POINTS - 1) / REPORT_MAX_POINTS : 1; }

/* a polyline of the finite (x, y) points; one point also gets a marker */
static void polyline(Out *o, const Axes *a, const char *id, const char *color, const Vec *x, const Vec *y,
                     bool markers) {
    size_t st = stride_for(x->n), count = 0;
    out_printf(o, "<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", id, color);
    for (size_t i = 0; i < x->n; i++) {
        if (i % st != 0 && i != x->n - 1) continue;
        double X = px(a, x->v[i]), Y = py(a, y->v[i]);
        if (!isfinite(X) || !isfinite(Y)) continue; /* NaN values; never "nan" in the SVG */
        out_printf(o, "%s%.2f,%.2f", count ? " " : "", X, Y);
        count++;
    }
    out_printf(o, "\"/>\n");
    if (markers || count == 1)
        for (size_t i = 0; i < x->n; i++) {
            if (i % st != 0 && i != x->n - 1) continue;
            double X = px(a, x->v[i]), Y = py(a, y->v[i]);
            if (!isfinite(X) || !isfinite(Y)) continue;
            out_printf(o, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", X, Y, color);
        }
}

static void legend_item(Out *o, int i, double top, const char *color, const char *label) {
    double y = top + 14 + 18 * i;
    out_printf(o, "<rect x=\"%d\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", PLOT_X + PLOT_W + 14,
               y - 9, color);
    out_printf(o, "<text x=\"%d\" y=\"%.1f\" class=\"legend\">", PLOT_X + PLOT_W + 34, y);
    out_escaped(o, label);
    out_printf(o, "</text>\n");
}

static size_t count_finite_xy(const Vec *x, const Vec *y) {
    size_t n = 0;
    for (size_t i = 0; i < x->n; i++)
        if (isfinite(x->v[i]) && isfinite(y->v[i])) n++;
    return n;
}

static void loss_panel(Out *o, const Series *s, double top) {
    panel_frame(o, "Loss", "loss", top);
    size_t nt = count_finite_xy(&s->step, &s->loss), ne = count_finite_xy(&s->estep, &s->eloss);
    if (nt + ne == 0) {
        panel_no_data(o, top);
        return;
    }
    Axes a = {INFINITY, -INFINITY, INFINITY, -INFINITY, top};
    /* x range over points that will be drawn */
    for (size_t i = 0; i < s->step.n; i++)
        if (isfinite(s->loss.v[i])) {
            a.x0 = fmin(a.x0, s->step.v[i]);
            a.x1 = fmax(a.x1, s->step.v[i]);
        }
    for (size_t i = 0; i < s->estep.n; i++)
        if (isfinite(s->eloss.v[i])) {
            a.x0 = fmin(a.x0, s->estep.v[i]);
            a.x1 = fmax(a.x1, s->estep.v[i]);
        }
    range_of(&s->loss, &a.y0, &a.y1);
    range_of(&s->eloss, &a.y0, &a.y1);
    fix_range(&a.x0, &a.x1, false);
    fix_range(&a.y0, &a.y1, true);
    panel_axes(o, &a);
    polyline(o, &a, "train_loss", "#1f77b4", &s->step, &s->loss, false);
    polyline(o, &a, "eval_loss", "#ff7f0e", &s->estep, &s->eloss, true);
    char lab[96];
    int k = 0;
    if (nt) {
        size_t last = s->loss.n;
        while (last > 0 && !isfinite(s->loss.v[last - 1])) last--;
        snprintf(lab, sizeof lab, "train loss (last %.4f)", s->loss.v[last - 1]);
        legend_item(o, k++, top, "#1f77b4", lab);
    }
    if (ne) {
        double best = INFINITY;
        for (size_t i = 0; i < s->eloss.n; i++)
            if (isfinite(s->eloss.v[i])) best = fmin(best, s->eloss.v[i]);
        snprintf(lab, sizeof lab, "eval loss (best %.4f)", best);
        legend_item(o, k++, top, "#ff7f0e", lab);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void tps_panel(Out *o, const Series *s, double top) {
    panel_frame(o, "Throughput", "tokens/s", top);
    if (count_finite_xy(&s->step, &s->tps) == 0) {
        panel_no_data(o, top);
        return;
    }
    Axes a = {INFINITY, -INFINITY, 0, -INFINITY, top};
    for (size_t i = 0; i < s->step.n; i++)
        if (isfinite(s->tps.v[i])) {
            a.x0 = fmin(a.x0, s->step.v[i]);
            a.x1 = fmax(a.x1, s->step.v[i]);
        }
    range_of(&s->tps, &a.y0, &a.y1);
    fix_range(&a.x0, &a.x1, false);
    fix_range(&a.y0, &a.y1, true);
    if (a.y0 < 0) a.y0 = 0;
    panel_axes(o, &a);
    polyline(o, &a, "tokens_per_sec", "#2ca02c", &s->step, &s->tps, false);
    /* median of the finite values for the legend */
    size_t n = 0;
    double *tmp = gt_xmalloc((s->tps.n + 1) * sizeof *tmp);
    for (size_t i = 0; i < s->tps.n; i++)
        if (isfinite(s->tps.v[i])) tmp[n++] = s->tps.v[i];
    qsort(tmp, n, sizeof *tmp, cmp_double);
    char lab[96], num[32];
    snprintf(lab, sizeof lab, "tokens/s (median %s)", fmt_tick(num, sizeof num, tmp[n / 2]));
    free(tmp);
    legend_item(o, 0, top, "#2ca02c", lab);
}

static const char *const k_palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void mem_panel(Out *o, const Series *s, double top) {
    panel_frame(o, "Peak memory by category (stacked)", "MiB", top);
    size_t n = s->step.n;
    double maxc[MEM_COUNT] = {0}, total_max = 0;
    for (size_t i = 0; i < n; i++) {
        double tot = 0;
        for (int c = 0; c < MEM_COUNT; c++) {
            maxc[c] = fmax(maxc[c], s->mem[c].v[i]);
            tot += s->mem[c].v[i];
        }
        total_max = fmax(total_max, tot);
    }
    bool finite_steps = true;
    for (size_t i = 0; i < n; i++) finite_steps = finite_steps && isfinite(s->step.v[i]);
    if (n == 0 || total_max <= 0 || !finite_steps) {
        panel_no_data(o, top);
        return;
    }
    const double MiB = 1024.0 * 1024.0;
    Axes a = {INFINITY, -INFINITY, 0, total_max / MiB, top};
    range_of(&s->step, &a.x0, &a.x1);
    fix_range(&a.x0, &a.x1, false);
    fix_range(&a.y0, &a.y1, false);
    a.y1 *= 1.05;
    panel_axes(o, &a);
    size_t st = stride_for(n);
    double *base = gt_xcalloc(n, sizeof *base);
    int k = 0;
    char lab[96];
    for (int c = 0; c < MEM_COUNT; c++) {
        if (maxc[c] <= 0) continue;
        const char *color = k_palette[c % 10];
        if (n == 1) { /* one record: a single stacked bar */
            double x = px(&a, s->step.v[0]);
            double y_lo = py(&a, base[0] / MiB), y_hi = py(&a, (base[0] + s->mem[c].v[0]) / MiB);
            out_printf(o,
                       "<rect class=\"mem\" x=\"%.2f\" y=\"%.2f\" width=\"40\" height=\"%.2f\" "
                       "fill=\"%s\"/>\n",
                       x - 20, y_hi, y_lo - y_hi, color);
        } else {
            out_printf(o, "<polygon class=\"mem\" fill=\"%s\" fill-opacity=\"0.75\" stroke=\"%s\" points=\"",
                       color, color);
            for (size_t i = 0; i < n; i++)
                if (i % st == 0 || i == n - 1)
                    out_printf(o, "%.2f,%.2f ", px(&a, s->step.v[i]), py(&a, (base[i] + s->mem[c].v[i]) / MiB));
            for (size_t i = n; i-- > 0;)
                if (i % st == 0 || i == n - 1)
                    out_printf(o, "%.2f,%.2f%s", px(&a, s->step.v[i]), py(&a, base[i] / MiB), i ? " " : "");
            out_printf(o, "\"/>\n");
        }
        for (size_t i = 0; i < n; i++) base[i] += s->mem[c].v[i];
        snprintf(lab, sizeof lab, "%s %.1f MiB", mem_category_name((MemCategory)c), maxc[c] / MiB);
        legend_item(o, k++, top, color, lab);
    }
    snprintf(lab, sizeof lab, "total %.1f MiB", total_max / MiB);
    out_printf(o, "<text x=\"%d\" y=\"%.1f\" class=\"legend\">", PLOT_X + PLOT_W + 14, top + 14 + 18 * k + 4);
    out_escaped(o, lab);
    out_printf(o, "</text>\n");
    free(base);
}

/* ------------------------------------------------------------------ write */

int report_svg(const char *title, const char *metrics, size_t len, const char *name, char **svg, size_t *svg_len,
               GtError *err) {
    *svg = NULL;
    *svg_len = 0;
    Series s = {0};
    if (parse_metrics(name, metrics ? metrics : "", metrics ? len : 0, &s, err) != 0) {
        series_free(&s);
        return -1;
    }
    const int H = 90 + 3 * PANEL_H;
    Out o = {0};
    out_printf(&o,
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"Helvetica, Arial, sans-serif\">\n",
               SVG_W, H, SVG_W, H);
    out_printf(&o,
               "<style>.frame{fill:#fff;stroke:#333;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}"
               ".tick{font-size:11px;fill:#333}.axis{font-size:12px;fill:#333}"
               ".ptitle{font-size:15px;font-weight:bold;fill:#222}.legend{font-size:12px;fill:#222}"
               ".nodata{font-size:18px;fill:#999}.title{font-size:20px;font-weight:bold}"
               ".sub{font-size:12px;fill:#555}</style>\n");
    out_printf(&o, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n");
    out_printf(&o, "<text x=\"%d\" y=\"32\" class=\"title\">gtrain run: ", PLOT_X);
    out_escaped(&o, title ? title : "");
    out_printf(&o, "</text>\n");
    out_printf(&o, "<text x=\"%d\" y=\"54\" class=\"sub\">%zu train records", PLOT_X, s.step.n);
    if (s.step.n) out_printf(&o, " (steps %.0f to %.0f)", s.step.v[0], s.step.v[s.step.n - 1]);
    out_printf(&o, ", %zu eval records</text>\n", s.estep.n);

    loss_panel(&o, &s, 90 + 0 * PANEL_H + 10);
    tps_panel(&o, &s, 90 + 1 * PANEL_H + 10);
    mem_panel(&o, &s, 90 + 2 * PANEL_H + 10);
    out_printf(&o, "</svg>\n");
    series_free(&s);
    *svg = o.p;
    *svg_len = o.len;
    return 0;
}

int report_write(const char *run_dir, GtError *err) {
    if (!run_dir || !*run_dir)
        return gt_error(err, GT_EXIT_BAD_INPUT, "report: no run directory given, expected a directory holding metrics.jsonl");
    char in[GT_PATH_MAX], outp[GT_PATH_MAX];
    int n1 = snprintf(in, sizeof in, "%s/metrics.jsonl", run_dir);
    int n2 = snprintf(outp, sizeof outp, "%s/report.svg", run_dir);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof in || (size_t)n2 >= sizeof outp)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%.200s...: path too long, expected at most %d bytes", run_dir,
                        GT_PATH_MAX - 16);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (gt_read_input(in, "metrics file", REPORT_MAX_METRICS_BYTES, &buf, &len, err) != 0) return -1;
    /* the run's name: the last component of run_dir */
    char name[GT_PATH_MAX];
    snprintf(name, sizeof name, "%s", run_dir);
    size_t L = strlen(name);
    while (L > 1 && name[L - 1] == '/') name[--L] = '\0';
    const char *base = strrchr(name, '/');
    base = base && base[1] ? base + 1 : name;
    char *svg = NULL;
    size_t svg_len = 0;
    int rc = report_svg(base, (const char *)buf, len, in, &svg, &svg_len, err);
    free(buf);
    if (rc == 0) rc = gt_write_file_atomic(outp, svg, svg_len, err);
    free(svg);
    return rc;
}

/* `gtrain report DIR` */
int report_command(CliArgs *a) {
    GtError err = {0};
    if (report_write(a->operands[0], &err)) return cli_fail(&err);
    printf("%s/report.svg\n", a->operands[0]);
    return GT_EXIT_OK;
}
