/* fuzz_util.h - helpers shared by the libFuzzer targets: the input as a file the readers can open
 * by path (an anonymous memfd reached through /proc/self/fd, so nothing touches the disk). */
#ifndef GT_FUZZ_UTIL_H
#define GT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Write data into a fresh memfd; path[cap] gets "/proc/self/fd/N". Returns the fd or -1. */
static inline int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t cap) {
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
