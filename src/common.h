/* common.h - error reporting, the process-wide logger, checked host allocation. */
#ifndef GT_COMMON_H
#define GT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define GT_EXIT_OK 0
#define GT_EXIT_FAILURE 1   /* something failed while running */
#define GT_EXIT_BAD_INPUT 2 /* config, model JSON, data file, checkpoint was wrong */

#define GT_PATH_MAX 1024
#define GT_ERR_MAX 1024

/* An error travels up as a value: a complete one-line message and the exit code it deserves. */
typedef struct {
    int code;              /* 0: none; GT_EXIT_BAD_INPUT or GT_EXIT_FAILURE */
    char msg[GT_ERR_MAX];  /* e.g. "run.yaml:3:5: seq_len: expected an integer in [1, 1048576], found \"abc\"" */
} GtError;

/* Fill err (if not NULL) and return -1, so callers can `return gt_error(err, ...)`. */
int gt_error(GtError *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A setting's value refused, named where it was given, code 2: "FILE:LINE:COL: KEY: MSG" (col 0:
 * "FILE:LINE: KEY: MSG"), "FILE: KEY: MSG (the default)" (line 0), or "--set KEY: MSG" (file NULL).
 * Returns -1. */
int gt_key_error(GtError *err, const char *file, int line, int col, const char *key, const char *msg);

/* Process-wide logger (the only global mutable state): rank 0 prints, other ranks stay quiet
 * unless verbose. gt_log goes to stdout, gt_warn to stderr with a "warning: " prefix. */
void gt_log_set_rank(int rank);
/* on: gt_log goes to stderr, for commands whose stdout is their output (gtrain sample) */
void gt_log_to_stderr(bool on);
void gt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Host allocation that never returns NULL: on failure prints one line and exits 1.
 * For small bookkeeping allocations only; big buffers go through the backend's tracker. */
void *gt_xmalloc(size_t bytes);
void *gt_xcalloc(size_t n, size_t size);
void *gt_xrealloc(void *p, size_t bytes);
char *gt_xstrdup(const char *s);

/* A growable byte buffer (p may be NULL while n == 0); gt_xrealloc'd. */
typedef struct {
    char *p;
    size_t n, cap;
} GtBytes;
void gt_bytes_put(GtBytes *b, const char *s, size_t n);
void gt_bytes_free(GtBytes *b);

/* UTF-8 as Rust's str takes it (no overlong forms, surrogates or code points above U+10FFFF):
 * the length of the valid character at s[0..n) (n >= 1), or, negated, the length of its maximal
 * invalid subpart (at least 1: the longest prefix that could start a valid character), the unit
 * String::from_utf8_lossy replaces with one U+FFFD. */
long gt_utf8_sequence(const unsigned char *s, size_t n);

/* Overflow-checked size multiplication: returns false on overflow. */
bool gt_mul_size(size_t a, size_t b, size_t *out);

/* "1.5 GiB", "12.0 MiB", "512 B" into buf. Returns buf. */
const char *gt_format_bytes(char *buf, size_t cap, uint64_t bytes);

/* Input files are regular files only: the open is O_NONBLOCK (a FIFO without a writer returns at
 * once), then fstat(2) on the descriptor (no race with the path) refuses anything else with one
 * line naming the path and what it is (code 2). */
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

/* The same for a small text file (config, model JSON, trainer state): at most max_bytes into a
 * NUL-terminated *out (freed by the caller); `what` names the file in messages. */
int gt_read_small_file(const char *path, const char *what, size_t max_bytes, char **out, size_t *len, GtError *err);

/* Offset of a NUL inside JSON text (a raw 0 byte, or a \u0000 escape in a string), or -1. cJSON's
 * strings end at a NUL, so "n_embd\u0000x" would be read as "n_embd": such a text is refused. */
long gt_json_nul_at(const char *buf, size_t len);

/* Offset of the first '[' or '{' (outside strings) that opens a level deeper than max_depth, or
 * -1. cJSON parses nesting by recursion: checked before parsing, a hostile "[[[[..." is one line
 * instead of a deep stack. */
long gt_json_too_deep(const char *buf, size_t len, int max_depth);

/* open(2) for writing that never writes through a symbolic link and never blocks: a link, FIFO,
 * socket or device at path is unlinked first (never followed or opened), then path is opened with
 * flags | O_NOFOLLOW | O_CLOEXEC, mode 0644, and must be a regular file. Returns the descriptor,
 * or -1 with errno set. */
int gt_open_for_write(const char *path, int flags);
/* The directory that holds path, into dst ("/" for "/x", "." for "x"; trailing slashes are not a
 * level: "a/b/" gives "a"); truncated to cap. */
void gt_parent_dir(char *dst, size_t cap, const char *path);
/* Remove directory `name` (relative to dfd, or AT_FDCWD) holding a writer's temporary files: its
 * entries unlinked (links themselves, never followed; subdirectories left, so the rmdir then
 * fails), then the directory. Not followed when name is a link. Best effort, errno untouched. */
void gt_remove_dir_of_files(int dfd, const char *name);

/* Write len bytes to path atomically: path.tmp, fsync, rename. A full disk or any write error is
 * reported (code 1) and path keeps its old content. */
int gt_write_file_atomic(const char *path, const void *data, size_t len, GtError *err);

/* fp32 <-> bf16 bit patterns: round to nearest even (as CUDA's __float2bfloat16), NaN stays a
 * (quiet) NaN; widening is exact. Inline: the CPU backend's bf16 path converts every activation. */
static inline uint16_t gt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float gt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}


/* SIGTERM/SIGINT (Slurm preemption, Ctrl-C) from process start: the first one sets a flag that
 * long loops poll (the training step in flight finishes, a checkpoint is written, exit 0); a
 * second one ends the process at once (the registered temporary files unlinked first). SIGXFSZ is ignored, so
 * a file-size limit or quota is a write error (EFBIG) handled like a full disk. */
void gt_signals_install(void);
/* 0, or the signal number of the first SIGTERM/SIGINT received. */
int gt_stop_signal(void);

/* Temporaries in flight (at most 8 at once): registered, they are removed on the exits that skip
 * their writer's own cleanup -- out of memory in gt_x*alloc (files and directories of files) and a
 * second stop signal (files). Register before writing, forget once renamed or removed; -1 when no
 * slot is free (the writer's own cleanup still runs on every normal return). */
int gt_tmp_register(const char *path, bool dir);
void gt_tmp_forget(int slot);
/* remove every registered temporary now (called before exit(3) on out of memory) */
void gt_tmp_cleanup(void);

/* Monotonic seconds. */
double gt_now_seconds(void);

#endif
