/* run_util.h - gtrain as a child process in tests: a workspace holding the reliability fixture (a
 * 2-layer, 32-wide byte-level model, a run of 30 steps that saves every step, a generated
 * train.txt), starting and waiting for runs with --set overrides and resource limits, reading
 * their logs, and checking exit codes, one-line errors and checkpoints. $GTRAIN_BIN is the
 * binary, $GTRAIN_ROOT the repo root. Used by test_reliability.c, test_safety.c and the LoRA runs'
 * fixture (lora_runs_fixture.c). */
#ifndef GT_RUN_UTIL_H
#define GT_RUN_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct {
    char dir[256];
    char cfg[300]; /* dir/run.yaml */
    char out[300]; /* dir/out (the fixture's output_dir) */
} Ws;
typedef struct {
    rlim_t fsize; /* RLIMIT_FSIZE in bytes (SIGXFSZ ignored, so writes fail with EFBIG); 0: none */
    rlim_t as;    /* RLIMIT_AS in bytes; 0: none */
    bool xfsz_default; /* leave SIGXFSZ at its default (gtrain must ignore it itself) */
} Limits;
typedef struct {
    pid_t pid;
    char out[320], err[320]; /* stdout / stderr files */
    double t0;
} Proc;

#define MAX_SETS 16
#define COLLECT_SETS(first, arr, n)                                                                                   \
    const char *arr[MAX_SETS];                                                                                        \
    int n = 0;                                                                                                        \
    do {                                                                                                              \
        va_list ap_;                                                                                                  \
        va_start(ap_, first);                                                                                         \
        for (const char *s_ = first; s_ && n < MAX_SETS; s_ = va_arg(ap_, const char *)) arr[n++] = s_;               \
        va_end(ap_);                                                                                                  \
    } while (0)

char *slurp(const char *path, size_t *len);
void put_file(const char *path, const void *data, size_t n);
void copy_file(const char *from, const char *to);
/* path: at least `bytes` bytes of deterministic, text-like bytes (words from a fixed list picked by
 * an LCG from seed; the last word is whole) */
void put_words_text(const char *path, size_t bytes, uint32_t seed);
void ws_init(Ws *w);
void rm_tree(const char *path);
void ws_fini(Ws *w);
double now_s(void);
void start_v(Proc *p, const Ws *w, const char *cfg, const Limits *lim, const char *tag, const char *const *sets,
             int n_sets);
void start(Proc *p, const Ws *w, const Limits *lim, const char *tag, const char *first, ...);
int wait_proc(const Proc *p);
int run(const Ws *w, const Limits *lim, const char *tag, const char *first, ...);
char *read_log(const Ws *w, const char *tag, const char *ext);
const char *log_text(const Ws *w, const char *tag, const char *ext, char *buf, size_t cap);
int count_lines(const char *s);
void expect_exit(const Ws *w, const char *tag, int st, int code);
void expect_one_line(const Ws *w, const char *tag, int st, int code, const char *n1, const char *n2);
bool files_equal(const char *a, const char *b);
bool exists(const char *p);
int check_checkpoints(const char *out, long *latest);
void expect_same_run(const char *ref_out, const char *out, long last);
double reference_run(const Ws *w, char *ref_out, size_t cap, const char *first, ...);
uint64_t rng_next(uint64_t *s);
void sleep_s(double s);
void wait_for_step(const Proc *p, const Ws *w, const char *tag);
int count_substr(const char *s, const char *needle);

/* A canonical text of a directory tree, never following links: every entry's relative path, type,
 * size and content hash (regular files) or target (links), sorted. Freed by the caller. */
char *tree_snapshot(const char *dir);

#endif
