#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The process-wide logger's state: which rank this process is. */
static int g_log_rank = 0;

int gt_error(GtError *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* one line, always */
        for (char *p = err->msg; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        err->code = code;
    }
    return -1;
}

void gt_log_set_rank(int rank) { g_log_rank = rank; }

void gt_log(const char *fmt, ...) {
    if (g_log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void gt_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (g_log_rank != 0) fprintf(stderr, "[rank %d] ", g_log_rank);
    fputs("warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static void out_of_memory(size_t bytes) {
    fprintf(stderr, "gtrain: out of host memory allocating %zu bytes\n", bytes);
    exit(GT_EXIT_FAILURE);
}

void *gt_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory(bytes);
    return p;
}

void *gt_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) out_of_memory(n * size);
    return p;
}

void *gt_xrealloc(void *old, size_t bytes) {
    void *p = realloc(old, bytes ? bytes : 1);
    if (!p) out_of_memory(bytes);
    return p;
}

char *gt_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = gt_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

bool gt_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

bool gt_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return false;
    *out = a + b;
    return true;
}

const char *gt_format_bytes(char *buf, size_t cap, uint64_t bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.2f %s", v, units[u]);
    return buf;
}

double gt_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
