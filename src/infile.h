/* infile.h - opening the files gtrain reads (data, safetensors, metrics.jsonl): regular files only.
 *
 * Any path may come from a hostile config or a shared directory: a FIFO would block open(2) and
 * read(2) forever, /dev/zero never ends, a directory or socket is no file at all. The open is
 * O_NONBLOCK (a FIFO without a writer returns at once), then fstat(2) on the descriptor (no race
 * with the path) refuses anything but a regular file, with one line naming the path (code 2).
 * (gt_read_small_file in common.c does the same for small text files.) */
#ifndef GT_INFILE_H
#define GT_INFILE_H

#include "common.h"

/* Open path read-only; what names the file in messages ("data file", "safetensors file").
 * Returns a descriptor (the caller closes it) and *size, or -1 with err filled: missing or
 * unreadable file, directory, FIFO, socket, device -> GT_EXIT_BAD_INPUT. */
int gt_open_input(const char *path, const char *what, uint64_t *size, GtError *err);

/* The whole regular file into a fresh buffer (*buf, NUL-terminated, not counted in *len; the
 * caller frees it). A file larger than max_bytes is refused before anything is read (code 2);
 * a file that shrinks while being read is an error (code 2), one that grows is read up to its
 * size at open time; out of memory is code 1. */
int gt_read_input(const char *path, const char *what, uint64_t max_bytes, uint8_t **buf, size_t *len,
                  GtError *err);

#endif
