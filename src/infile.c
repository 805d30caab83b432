/* infile.c - see infile.h. */
#define _POSIX_C_SOURCE 200809L
#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a %s of at most %s, found %llu bytes", path, what,
                        gt_format_bytes(lim, sizeof lim, max_bytes), (unsigned long long)size);
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
