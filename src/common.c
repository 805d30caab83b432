#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The process-wide logger's state: which rank this process is. */
static int g_log_rank = 0;
static bool g_log_stderr = false; /* part of the logger: where gt_log writes */

/* The signal flag (the other piece of global mutable state: a handler has no other way to speak). */
static volatile sig_atomic_t g_stop_signal;

/* The temporaries in flight, for the exits that skip the normal returns (out of memory, a second
 * stop signal): part of the signal machinery, the only other state a handler may read. */
#define GT_TMP_SLOTS 8
static struct {
    volatile sig_atomic_t used; /* 1: path is a file, 2: a directory of files */
    char path[GT_PATH_MAX];
} g_tmp[GT_TMP_SLOTS];

/* Copy src into dst[cap] with control bytes escaped (\n, \r, \t, \xHH), so a message stays one
 * line and a hostile path or value cannot move the terminal's cursor. */
static void escape_controls(char *dst, size_t cap, const char *src) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 1 < cap; p++) {
        char esc[8];
        if (*p >= 0x20 && *p != 0x7f) {
            dst[o++] = (char)*p;
            continue;
        }
        if (*p == '\n' || *p == '\r' || *p == '\t')
            snprintf(esc, sizeof esc, "\\%c", *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't');
        else
            snprintf(esc, sizeof esc, "\\x%02x", *p);
        size_t n = strlen(esc);
        if (o + n + 1 > cap) break;
        memcpy(dst + o, esc, n);
        o += n;
    }
    dst[o] = '\0';
}

int gt_error(GtError *err, int code, const char *fmt, ...) {
    if (err) {
        char raw[GT_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        escape_controls(err->msg, sizeof err->msg, raw); /* one line, always */
        err->code = code;
    }
    return -1;
}

int gt_key_error(GtError *err, const char *file, int line, int col, const char *key, const char *msg) {
    if (!file) return gt_error(err, GT_EXIT_BAD_INPUT, "--set %s: %s", key, msg);
    if (line <= 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: %s (the default)", file, key, msg);
    if (col <= 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d: %s: %s", file, line, key, msg);
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s:%d:%d: %s: %s", file, line, col, key, msg);
}

/* async-signal-safe: unlink(2) only; a directory's files are the caller's (gt_tmp_cleanup) */
static void unlink_tmp_files(void) {
    for (int i = 0; i < GT_TMP_SLOTS; i++)
        if (g_tmp[i].used == 1) unlink(g_tmp[i].path);
}

/* The first signal sets the flag; a second one ends the process at once, its temporary files
 * removed first. */
static void on_stop_signal(int sig) {
    if (!g_stop_signal) {
        g_stop_signal = sig;
        return;
    }
    unlink_tmp_files();
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    raise(sig);
}

int gt_tmp_register(const char *path, bool dir) {
    for (int i = 0; i < GT_TMP_SLOTS; i++)
        if (!g_tmp[i].used) {
            snprintf(g_tmp[i].path, sizeof g_tmp[i].path, "%s", path);
            g_tmp[i].used = dir ? 2 : 1;
            return i;
        }
    return -1;
}

void gt_tmp_forget(int slot) {
    if (slot >= 0 && slot < GT_TMP_SLOTS) g_tmp[slot].used = 0;
}

void gt_tmp_cleanup(void) {
    for (int i = 0; i < GT_TMP_SLOTS; i++) {
        if (g_tmp[i].used == 2) {
            gt_remove_dir_of_files(AT_FDCWD, g_tmp[i].path);
        } else if (g_tmp[i].used == 1) {
            (void)unlink(g_tmp[i].path);
        }
        g_tmp[i].used = 0;
    }
}

/* A handler, not a blocked mask: OpenBLAS and OpenMP start worker threads before main, whose masks
 * we do not control, and the kernel may deliver the signal to any of them. */
void gt_signals_install(void) {
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGXFSZ, &ign, NULL);
}

int gt_stop_signal(void) { return (int)g_stop_signal; }

void gt_log_set_rank(int rank) { g_log_rank = rank; }

void gt_log_to_stderr(bool on) { g_log_stderr = on; }

void gt_log(const char *fmt, ...) {
    if (g_log_rank != 0) return;
    FILE *f = g_log_stderr ? stderr : stdout;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fflush(f);
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
    gt_tmp_cleanup();
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

int gt_read_small_file(const char *path, const char *what, size_t max_bytes, char **out, size_t *len, GtError *err) {
    uint8_t *b = NULL;
    int rc = gt_read_input(path, what, max_bytes, &b, len, err);
    *out = (char *)b;
    return rc;
}

/* ---------------------------------------------------------------- JSON text */

long gt_json_nul_at(const char *buf, size_t len) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (buf[i] == '\0') return (long)i;
        if (!in_str) {
            in_str = buf[i] == '"';
        } else if (buf[i] == '"') {
            in_str = false;
        } else if (buf[i] == '\\' && i + 1 < len) {
            if (buf[i + 1] == 'u' && len - i >= 6 && memcmp(buf + i + 2, "0000", 4) == 0) return (long)i;
            i++; /* the escaped character */
        }
    }
    return -1;
}

long gt_json_too_deep(const char *buf, size_t len, int max_depth) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = buf[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > max_depth) return (long)i;
        } else if (ch == ']' || ch == '}') {
            if (depth > 0) depth--;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------- input files: regular files only
 * Any path may come from a hostile config or a shared directory: a FIFO would block open(2) and
 * read(2) forever, /dev/zero never ends, a directory or socket is no file at all. */

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "a special file";
}

int gt_open_input(const char *path, const char *what, uint64_t *size, GtError *err) {
    if (!path || !*path) return gt_error(err, GT_EXIT_BAD_INPUT, "no %s given, expected a path", what);
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot open the %s: %s", path, what, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: cannot stat the %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected the %s to be a regular file, found %s", path, what,
                        kind_of(st.st_mode));
    }
    /* back to blocking reads (O_NONBLOCK means nothing for a regular file, but say what we mean) */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    return fd;
}

int gt_read_input(const char *path, const char *what, uint64_t max_bytes, uint8_t **buf, size_t *len,
                  GtError *err) {
    *buf = NULL;
    *len = 0;
    uint64_t size;
    int fd = gt_open_input(path, what, &size, err);
    if (fd < 0) return -1;
    if (size > max_bytes) {
        close(fd);
        char lim[32];
        if (max_bytes % (1u << 20) == 0) /* "1 MiB", not "1.00 MiB" */
            snprintf(lim, sizeof lim, "%llu MiB", (unsigned long long)(max_bytes >> 20));
        else
            gt_format_bytes(lim, sizeof lim, max_bytes);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a %s of at most %s, found %llu bytes", path, what, lim,
                        (unsigned long long)size);
    }
    if (size >= SIZE_MAX) {
        close(fd);
        return gt_error(err, GT_EXIT_FAILURE, "%s: the %s is too large to hold in memory", path, what);
    }
    uint8_t *b = malloc((size_t)size + 1);
    if (!b) {
        close(fd);
        char n[32];
        return gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory allocating %s for the %s", path,
                        gt_format_bytes(n, sizeof n, size + 1), what);
    }
    size_t got = 0;
    while (got < (size_t)size) {
        ssize_t r = read(fd, b + got, (size_t)size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(b);
            return gt_error(err, GT_EXIT_FAILURE, "%s: read error at byte offset %zu of the %s: %s", path, got, what,
                            strerror(e));
        }
        if (r == 0) {
            close(fd);
            free(b);
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: the %s ended at byte offset %zu, expected %llu bytes (it changed while being read?)",
                            path, what, got, (unsigned long long)size);
        }
        got += (size_t)r;
    }
    close(fd);
    b[got] = 0;
    *buf = b;
    *len = got;
    return 0;
}

int gt_open_for_write(const char *path, int flags) {
    struct stat sb;
    /* a link, FIFO, socket or device at one of gtrain's own names holds no data of anyone's: the
     * name is unlinked (a FIFO would block the open forever, a link would write elsewhere) */
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode) && unlink(path) != 0) return -1;
    /* O_NONBLOCK: one planted between the lstat and the open fails (ENXIO) instead of blocking */
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) return -1;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int gt_write_file_atomic(const char *path, const void *data, size_t len, GtError *err) {
    size_t plen = strlen(path);
    char *tmp = gt_xmalloc(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int rc = 0;
    int fd = gt_open_for_write(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        rc = gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        goto done;
    }
    bool ok = fwrite(data, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        rc = gt_error(err, GT_EXIT_FAILURE, "%s: write failed: %s", tmp, strerror(saved));
    } else if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        rc = gt_error(err, GT_EXIT_FAILURE, "%s: cannot rename to %s: %s", tmp, path, strerror(saved));
    }
done:
    free(tmp);
    return rc;
}

void gt_bytes_put(GtBytes *b, const char *s, size_t n) {
    if (n == 0) return; /* b->p may still be NULL */
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = gt_xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n); /* p and s may be NULL when n is 0 */
    b->n += n;
}

void gt_bytes_free(GtBytes *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

long gt_utf8_sequence(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    if (b < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0) lo = 0xA0;      /* no overlong forms */
        else if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0) lo = 0x90;
        else if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return -k;
        unsigned char c = s[k];
        bool ok = k == 1 ? c >= lo && c <= hi : c >= 0x80 && c <= 0xBF;
        if (!ok) return -k;
    }
    return need + 1;
}

void gt_parent_dir(char *dst, size_t cap, const char *path) {
    if (cap == 0) return;
    snprintf(dst, cap, "%s", path);
    size_t n = strlen(dst);
    while (n > 1 && dst[n - 1] == '/') dst[--n] = '\0';
    char *slash = strrchr(dst, '/');
    if (!slash) snprintf(dst, cap, ".");
    else if (slash == dst) dst[1] = '\0';
    else *slash = '\0';
}

void gt_remove_dir_of_files(int dfd, const char *name) {
    const int saved = errno;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        errno = saved;
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        struct stat es;
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            fstatat(fd, e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(es.st_mode))
            (void)unlinkat(fd, e->d_name, 0);
    }
    closedir(d);
    (void)unlinkat(dfd, name, AT_REMOVEDIR);
    errno = saved;
}
