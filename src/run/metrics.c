/* metrics.c - see metrics.h. */
#include "metrics.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct MetricsWriter {
    int fd; /* O_APPEND: each record is one write(2), cut back if it fails part way */
    char path[GT_PATH_MAX];
};

/* ------------------------------------------------------------------ line building */

typedef struct {
    char *p;
    size_t len, cap;
    bool overflow;
} Line;

static void lputf(Line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lputf(Line *l, const char *fmt, ...) {
    if (l->overflow) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->p + l->len, l->cap - l->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= l->cap - l->len) {
        l->overflow = true;
        return;
    }
    l->len += (size_t)n;
}

/* a JSON number, or null when not finite */
static void lnum(Line *l, const char *key, double v) {
    if (isfinite(v)) lputf(l, ",\"%s\":%.9g", key, v);
    else lputf(l, ",\"%s\":null", key);
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void lmem(Line *l, const char *key, const uint64_t *v) {
    lputf(l, ",\"%s\":{", key);
    for (int c = 0; c < MEM_COUNT; c++)
        lputf(l, "%s\"%s\":%llu", c ? "," : "", mem_category_name((MemCategory)c),
              (unsigned long long)v[c]);
    lputf(l, "}");
}

static int write_line(MetricsWriter *m, Line *l, GtError *err) {
    if (l->overflow) return gt_error(err, GT_EXIT_FAILURE, "%s: metrics record too long", m->path);
    lputf(l, "}\n");
    if (l->overflow) return gt_error(err, GT_EXIT_FAILURE, "%s: metrics record too long", m->path);
    off_t before = lseek(m->fd, 0, SEEK_END);
    size_t done = 0;
    while (done < l->len) {
        ssize_t w = write(m->fd, l->p + done, l->len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            /* never leave a torn record: cut the file back to the last whole one */
            if (done && before >= 0 && ftruncate(m->fd, before) != 0)
                gt_warn("%s: cannot cut back a partial record: %s\n", m->path, strerror(errno));
            return gt_error(err, GT_EXIT_FAILURE, "%s: write failed: %s", m->path, strerror(e));
        }
        done += (size_t)w;
    }
    return 0;
}

/* ------------------------------------------------------------------ open / close */

/* cut a torn last line (no final '\n') left by a killed writer */
static int cut_torn_tail(const char *path, GtError *err) {
    int fd = gt_open_for_write(path, O_RDWR);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot stat: %s", path, strerror(errno));
    }
    off_t end = sb.st_size, keep = 0;
    char buf[4096];
    while (end > 0) {
        off_t start = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t r = pread(fd, buf, (size_t)(end - start), start);
        if (r != end - start) {
            close(fd);
            return gt_error(err, GT_EXIT_FAILURE, "%s: cannot read: %s", path, strerror(errno));
        }
        ssize_t i = r - 1;
        while (i >= 0 && buf[i] != '\n') i--;
        if (i >= 0) {
            keep = start + i + 1;
            break;
        }
        end = start;
    }
    int rc = 0;
    if (keep != sb.st_size && ftruncate(fd, keep) != 0)
        rc = gt_error(err, GT_EXIT_FAILURE, "%s: cannot truncate: %s", path, strerror(errno));
    close(fd);
    return rc;
}

MetricsWriter *metrics_open(const char *dir, int append, GtError *err) {
    MetricsWriter *m = gt_xcalloc(1, sizeof *m);
    int n = snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", dir);
    if (n < 0 || (size_t)n >= sizeof m->path) {
        gt_error(err, GT_EXIT_FAILURE, "%s: path too long", dir);
        free(m);
        return NULL;
    }
    if (append && cut_torn_tail(m->path, err) != 0) {
        free(m);
        return NULL;
    }
    m->fd = gt_open_for_write(m->path, O_WRONLY | O_CREAT | O_APPEND | (append ? 0 : O_TRUNC));
    if (m->fd < 0) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot open for writing: %s", m->path, strerror(errno));
        free(m);
        return NULL;
    }
    return m;
}

int metrics_close(MetricsWriter *m, GtError *err) {
    if (!m) return 0;
    int rc = 0;
    if (fsync(m->fd) != 0 && errno != EINVAL)
        rc = gt_error(err, GT_EXIT_FAILURE, "%s: sync failed: %s", m->path, strerror(errno));
    if (close(m->fd) != 0 && rc == 0)
        rc = gt_error(err, GT_EXIT_FAILURE, "%s: close failed: %s", m->path, strerror(errno));
    free(m);
    return rc;
}

/* ------------------------------------------------------------------ records */

int metrics_write_train(MetricsWriter *m, const TrainRecord *r, GtError *err) {
    char buf[4096];
    Line l = {buf, 0, sizeof buf, false};
    lputf(&l, "{\"type\":\"train\",\"step\":%ld", r->step);
    lnum(&l, "epoch", r->epoch);
    lnum(&l, "loss", r->loss);
    lnum(&l, "lr", r->lr);
    lnum(&l, "grad_norm", r->grad_norm);
    lnum(&l, "tokens_per_sec", r->tokens_per_sec);
    lnum(&l, "step_time_ms", r->step_time_ms);
    lnum(&l, "device_time_ms", r->device_time_ms);
    lputf(&l, ",\"effective_batch\":%ld,\"num_items\":%ld,\"skipped\":%s,\"empty\":%s", r->effective_batch,
          r->num_items, r->skipped ? "true" : "false", r->empty ? "true" : "false");
    lputf(&l, ",\"time\":%.3f", wall_time());
    lmem(&l, "mem_current", r->mem_current);
    lmem(&l, "mem_peak", r->mem_peak);
    if (r->window_steps > 0) {
        lputf(&l, ",\"window_steps\":%ld", r->window_steps);
        lnum(&l, "window_step_time_ms", r->window_step_time_ms);
        lnum(&l, "window_tokens_per_sec", r->window_tokens_per_sec);
        lnum(&l, "eta_s", r->eta_s);
    }
    return write_line(m, &l, err);
}

int metrics_write_step(MetricsWriter *m, const TrainRecord *r, GtError *err) {
    char buf[512];
    Line l = {buf, 0, sizeof buf, false};
    lputf(&l, "{\"type\":\"step\",\"step\":%ld", r->step);
    lnum(&l, "loss", r->loss);
    lnum(&l, "step_time_ms", r->step_time_ms);
    lnum(&l, "tokens_per_sec", r->tokens_per_sec);
    lputf(&l, ",\"time\":%.3f", wall_time());
    return write_line(m, &l, err);
}

int metrics_write_eval(MetricsWriter *m, const EvalRecord *r, GtError *err) {
    char buf[1024];
    Line l = {buf, 0, sizeof buf, false};
    lputf(&l, "{\"type\":\"eval\",\"step\":%ld", r->step);
    lnum(&l, "epoch", r->epoch);
    if (!r->no_loss) {
        lnum(&l, "eval_loss", r->eval_loss);
        lnum(&l, "eval_perplexity", r->eval_perplexity);
        lputf(&l, ",\"eval_tokens\":%ld", r->eval_tokens);
    }
    if (r->accuracy) {
        lnum(&l, "eval_accuracy", r->eval_accuracy);
        lputf(&l, ",\"eval_correct\":%ld,\"eval_examples\":%ld", r->eval_correct, r->eval_examples);
    }
    lputf(&l, ",\"time\":%.3f", wall_time());
    return write_line(m, &l, err);
}

/* ------------------------------------------------------------------ prune (resume) */

int metrics_prune(const char *dir, long last_step, GtError *err) {
    char path[GT_PATH_MAX], tmp[GT_PATH_MAX + 8];
    int n = snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (n < 0 || (size_t)n >= sizeof path) return gt_error(err, GT_EXIT_FAILURE, "%s: path too long", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int ifd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (ifd < 0 || fstat(ifd, &sb) != 0 || !S_ISREG(sb.st_mode)) { /* a link or a special file is not ours */
        int e = errno;
        if (ifd >= 0) close(ifd);
        if (ifd < 0 && e == ENOENT) return 0;
        if (ifd < 0 && e != ELOOP) return gt_error(err, GT_EXIT_FAILURE, "%s: cannot open: %s", path, strerror(e));
        gt_warn("%s: not a regular file: not read back (a new one is started)\n", path);
        return unlink(path) == 0 ? 0 : gt_error(err, GT_EXIT_FAILURE, "%s: cannot remove: %s", path, strerror(errno));
    }
    FILE *in = fdopen(ifd, "r");
    int ofd = gt_open_for_write(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    FILE *out = ofd >= 0 ? fdopen(ofd, "w") : NULL;
    if (!in || !out) {
        int e = errno;
        if (in) fclose(in); else close(ifd);
        if (ofd >= 0 && !out) close(ofd);
        if (out) fclose(out);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", tmp, strerror(e));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool ok = true;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (line[len - 1] != '\n') break; /* torn last line */
        cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON *step = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
        bool keep = cJSON_IsObject(j) && cJSON_IsNumber(step) && step->valuedouble <= (double)last_step;
        cJSON_Delete(j);
        if (keep && fwrite(line, 1, (size_t)len, out) != (size_t)len) {
            ok = false;
            break;
        }
    }
    int saved = errno;
    free(line);
    fclose(in);
    if (ok) ok = fflush(out) == 0 && fsync(fileno(out)) == 0;
    if (!ok) saved = errno;
    if (fclose(out) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        return gt_error(err, GT_EXIT_FAILURE, "%s: write failed: %s", tmp, strerror(saved));
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot rename to %s: %s", tmp, path,
                        strerror(saved));
    }
    return 0;
}

/* ------------------------------------------------------------------ console */

static const char *fmt_hms(char *buf, size_t cap, double s);

static const char *fmt_rate(char *buf, size_t cap, double v) {
    if (!isfinite(v)) snprintf(buf, cap, "-");
    else if (v >= 1e9) snprintf(buf, cap, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, cap, "%.1fk", v / 1e3);
    else snprintf(buf, cap, "%.0f", v);
    return buf;
}

const char *metrics_format_console(char *buf, size_t cap, const TrainRecord *r, long max_steps) {
    char steps[64], rate[32], mem[32];
    if (max_steps > 0) {
        int w = snprintf(NULL, 0, "%ld", max_steps);
        snprintf(steps, sizeof steps, "%*ld/%ld", w, r->step, max_steps);
    } else {
        snprintf(steps, sizeof steps, "%ld", r->step);
    }
    uint64_t dev = 0;
    for (int c = 0; c < MEM_COUNT; c++)
        if (mem_category_on_device((MemCategory)c)) dev += r->mem_peak[c];
    const bool win = r->window_steps > 0;
    char eta[48] = "";
    if (win && isfinite(r->eta_s)) {
        char hms[32];
        snprintf(eta, sizeof eta, " | eta %s", fmt_hms(hms, sizeof hms, r->eta_s));
    }
    snprintf(buf, cap,
             "step %s | epoch %.2f | loss %.4f | lr %.2e | grad %.3f | %s tok/s | %.0f ms | mem %s%s%s",
             steps, r->epoch, r->loss, r->lr, r->grad_norm,
             fmt_rate(rate, sizeof rate, win ? r->window_tokens_per_sec : r->tokens_per_sec),
             win ? r->window_step_time_ms : r->step_time_ms, gt_format_bytes(mem, sizeof mem, dev), eta,
             r->skipped ? " | SKIPPED (non-finite loss or gradient)" : r->empty ? " | EMPTY (no target token, no update)" : "");
    return buf;
}

const char *metrics_format_eval_start(char *buf, size_t cap, long step, long windows, int seq_len, const char *what) {
    snprintf(buf, cap, "eval step %ld | evaluating %ld window%s of %d tokens (%s)", step, windows,
             windows == 1 ? "" : "s", seq_len, what);
    return buf;
}

const char *metrics_format_eval(char *buf, size_t cap, const EvalRecord *r) {
    snprintf(buf, cap, "eval step %ld | eval_loss %.4f | ppl %.2f | %ld tokens", r->step,
             r->eval_loss, r->eval_perplexity, r->eval_tokens);
    return buf;
}

static const char *fmt_hms(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "--:--");
        return buf;
    }
    if (s > 359999.0) s = 359999.0; /* 99:59:59 */
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
    return buf;
}

double metrics_eta_seconds(long step, long start_step, long max_steps, double elapsed_s) {
    const long done = step - start_step;
    if (done <= 0 || !(elapsed_s > 0)) return NAN;
    return elapsed_s / (double)done * (double)(max_steps - step);
}

void metrics_progress_from(FILE *f, long step, long start_step, long max_steps, double elapsed_s) {
    enum { WIDTH = 30 };
    char bar[WIDTH + 1], el[32], eta[32];
    double frac = max_steps > 0 ? (double)step / (double)max_steps : 0.0;
    if (frac < 0) frac = 0;
    if (frac > 1) frac = 1;
    int filled = (int)(frac * WIDTH);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = '\0';
    long done = step - start_step;
    double rate = (done > 0 && elapsed_s > 0) ? (double)done / elapsed_s : NAN;
    double left = metrics_eta_seconds(step, start_step, max_steps, elapsed_s);
    char rs[32];
    if (!isfinite(rate)) snprintf(rs, sizeof rs, "- it/s");
    else if (rate >= 1.0) snprintf(rs, sizeof rs, "%.2f it/s", rate);
    else snprintf(rs, sizeof rs, "%.2f s/it", 1.0 / rate);
    int w = snprintf(NULL, 0, "%ld", max_steps);
    fprintf(f, "\r[%s] %*ld/%ld %3.0f%% %s<%s %s\033[K", bar, w, step, max_steps, frac * 100.0,
            fmt_hms(el, sizeof el, elapsed_s), fmt_hms(eta, sizeof eta, left), rs);
    if (max_steps > 0 && step >= max_steps) fputc('\n', f);
    fflush(f);
}

void metrics_progress(FILE *f, long step, long max_steps, double elapsed_s) {
    metrics_progress_from(f, step, 0, max_steps, elapsed_s);
}

void metrics_progress_clear(FILE *f) {
    fputs("\r\033[K", f);
    fflush(f);
}
