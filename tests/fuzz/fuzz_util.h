/* fuzz_util.h - helpers shared by the libFuzzer targets: the input as a file the readers can open
 * by path (an anonymous memfd reached through /proc/self/fd, so nothing touches the disk). */
#ifndef GT_FUZZ_UTIL_H
#define GT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <ftw.h>
#include <sys/stat.h>

#include "data.h"

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

/* rows' tokens and targets in range, positions as backend.h wants them (0 first, then 0 or +1) */
static inline void fuzz_check_filled(const int *tok, const int *tgt, const int *pos, int rows, int seq_len, int vocab) {
    for (int i = 0; i < rows * seq_len; i++) {
        if (tok[i] < 0 || tok[i] >= vocab || (tgt[i] != -100 && (tgt[i] < 0 || tgt[i] >= vocab))) abort();
        if (pos[i] != (i % seq_len == 0 ? 0 : pos[i]) || (pos[i] != 0 && pos[i] != pos[i - 1] + 1)) abort();
    }
}

/* Draw 3 training rows (first_row 2 of step 7, or as given) and 3 eval windows from an accepted
 * source, with their positions; abort if any token or target is out of range or a position is not
 * what the ops take. Closes d. */
static inline void fuzz_check_rows(DataSource *d, int seq_len, int vocab, long eval_from) {
    const int rows = 3;
    const size_t n = (size_t)rows * seq_len;
    int *tok = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int)), *pos = malloc(n * sizeof(int));
    if (tok && tgt && pos) {
        data_fill_train_pos(d, 99, true, 7, 6, 2, rows, tok, tgt, pos);
        fuzz_check_filled(tok, tgt, pos, rows, seq_len, vocab);
        data_fill_eval_pos(d, eval_from, rows, tok, tgt, pos);
        fuzz_check_filled(tok, tgt, pos, rows, seq_len, vocab);
    }
    free(tok);
    free(tgt);
    free(pos);
    data_close(d);
}

static inline int fuzz_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

/* Remove a scratch directory and everything in it (never following links). */
static inline void fuzz_rm_tree(const char *dir) {
    if (dir[0]) nftw(dir, fuzz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Write dir/name with n bytes of data (aborts on failure: the harness, not the input, is wrong). */
static inline void fuzz_put(const char *dir, const char *name, const void *data, size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

#endif
