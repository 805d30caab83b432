/* run_util.c - see run_util.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "run_util.h"
#include "hf_weights.h"
#include "safetensors.h"
#include "test_backend_select.h"

/* ---------------------------------------------------------------- workspace */


char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    cr_assert_not_null(b);
    size_t r;
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            b = realloc(b, (cap *= 2) + 1);
            cr_assert_not_null(b);
        }
    }
    fclose(f);
    b[n] = 0;
    if (len) *len = n;
    return b;
}

void put_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
    if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

void copy_file(const char *from, const char *to) {
    size_t n;
    char *b = slurp(from, &n);
    cr_assert_not_null(b, "cannot read %s", from);
    put_file(to, b, n);
    free(b);
}

void put_words_text(const char *path, size_t bytes, uint32_t seed) {
    static const char *const words[] = {"the ", "king ", "shall ", "speak ", "of ", "love, ", "and ", "war; ",
                                        "good ", "night\n", "sweet ", "prince. "};
    char *txt = malloc(bytes + 16); /* the last word may run past bytes by its length, 8 at most */
    cr_assert_not_null(txt);
    size_t n = 0;
    uint32_t x = seed;
    while (n < bytes) {
        x = x * 1664525u + 1013904223u;
        const char *wd = words[(x >> 16) % 12];
        size_t k = strlen(wd);
        memcpy(txt + n, wd, k);
        n += k;
    }
    put_file(path, txt, n);
    free(txt);
}

void ws_init(Ws *w) {
    snprintf(w->dir, sizeof w->dir, "/tmp/gtrain-rel-XXXXXX");
    cr_assert_not_null(mkdtemp(w->dir));
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert_not_null(root, "GTRAIN_ROOT is not set (run through make test)");
    cr_assert_not_null(test_gtrain_bin(), "GTRAIN_BIN is not set (run through make test)");
    char from[512], to[512];
    const char *files[] = {"run.yaml", "model.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/tests/fixtures/reliability/%s", root, files[i]);
        snprintf(to, sizeof to, "%s/%s", w->dir, files[i]);
        copy_file(from, to);
    }
    snprintf(to, sizeof to, "%s/train.txt", w->dir);
    put_words_text(to, 12000, 12345);
    snprintf(w->cfg, sizeof w->cfg, "%s/run.yaml", w->dir);
    snprintf(w->out, sizeof w->out, "%s/out", w->dir);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

void ws_fini(Ws *w) { rm_tree(w->dir); }

/* ---------------------------------------------------------------- running gtrain */



double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Start `gtrain --config cfg --set S...` (NULL-terminated sets); stdout and stderr go to
 * dir/<tag>.out and dir/<tag>.err. */
void start_v(Proc *p, const Ws *w, const char *cfg, const Limits *lim, const char *tag, const char *const *sets,
             int n_sets) {
    snprintf(p->out, sizeof p->out, "%s/%s.out", w->dir, tag);
    snprintf(p->err, sizeof p->err, "%s/%s.err", w->dir, tag);
    const char *argv[64];
    int a = 0;
    argv[a++] = test_gtrain_bin();
    argv[a++] = "--config";
    argv[a++] = cfg;
    for (int i = 0; i < n_sets && a < 60; i++) {
        argv[a++] = "--set";
        argv[a++] = sets[i];
    }
    argv[a] = NULL;
    unlink(p->out); /* no stale log of an earlier run with this tag may be read as this run's */
    unlink(p->err);
    fflush(stdout);
    fflush(stderr);
    p->t0 = now_s();
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        /* dies with the test: a test Criterion kills for its timeout must not leave a gtrain
         * running (and loading the machine for every later test) */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
        int fo = open(p->out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(p->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        close(fo);
        close(fe);
        if (lim && lim->fsize) {
            if (!lim->xfsz_default) signal(SIGXFSZ, SIG_IGN); /* kept across exec: writes past the limit fail with EFBIG */
            struct rlimit r = {lim->fsize, lim->fsize};
            if (setrlimit(RLIMIT_FSIZE, &r) != 0) _exit(126);
        }
        if (lim && lim->as) {
            struct rlimit r = {lim->as, lim->as};
            if (setrlimit(RLIMIT_AS, &r) != 0) _exit(126);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    p->pid = pid;
}


void start(Proc *p, const Ws *w, const Limits *lim, const char *tag, const char *first, ...) {
    COLLECT_SETS(first, sets, n);
    start_v(p, w, w->cfg, lim, tag, sets, n);
}

int wait_proc(const Proc *p) {
    int st;
    while (waitpid(p->pid, &st, 0) < 0) cr_assert_eq(errno, EINTR, "waitpid: %s", strerror(errno));
    return st;
}

/* Run to completion; returns the wait status. */
int run(const Ws *w, const Limits *lim, const char *tag, const char *first, ...) {
    COLLECT_SETS(first, sets, n);
    Proc p;
    start_v(&p, w, w->cfg, lim, tag, sets, n);
    return wait_proc(&p);
}

char *read_log(const Ws *w, const char *tag, const char *ext) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s.%s", w->dir, tag, ext);
    char *s = slurp(p, NULL);
    return s ? s : strdup("");
}

/* the log into buf (truncated), for assertion messages: nothing to free when an assertion fails */
const char *log_text(const Ws *w, const char *tag, const char *ext, char *buf, size_t cap) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s.%s", w->dir, tag, ext);
    buf[0] = 0;
    FILE *f = fopen(p, "rb");
    if (f) {
        size_t n = fread(buf, 1, cap - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* exited normally with this code (never a signal), with a readable failure report */
void expect_exit(const Ws *w, const char *tag, int st, int code) {
    char e[4096];
    log_text(w, tag, "err", e, sizeof e);
    cr_assert(WIFEXITED(st), "%s: killed by signal %d (expected exit %d); stderr: %s", tag,
              WIFSIGNALED(st) ? WTERMSIG(st) : -1, code, e);
    cr_assert_eq(WEXITSTATUS(st), code, "%s: exit %d, expected %d; stderr: %s", tag, WEXITSTATUS(st), code, e);
}

/* exit code, exactly one line on stderr, and the line contains each needle */
void expect_one_line(const Ws *w, const char *tag, int st, int code, const char *n1, const char *n2) {
    expect_exit(w, tag, st, code);
    char e[4096];
    log_text(w, tag, "err", e, sizeof e);
    cr_assert_eq(count_lines(e), 1, "%s: expected exactly one line on stderr, found: %s", tag, e);
    if (n1) cr_assert_not_null(strstr(e, n1), "%s: stderr does not name \"%s\": %s", tag, n1, e);
    if (n2) cr_assert_not_null(strstr(e, n2), "%s: stderr does not mention \"%s\": %s", tag, n2, e);
}

bool files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Every directory named checkpoint-N in out is whole: trainer_state.json valid and naming step N,
 * its weights (model.safetensors, or shards and their index) and optimizer.safetensors open. Returns the number of checkpoints; *latest
 * gets the highest N (-1 when none). */
int check_checkpoints(const char *out, long *latest) {
    *latest = -1;
    DIR *d = opendir(out);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "checkpoint-", 11) != 0) continue;
        char *end;
        long step = strtol(e->d_name + 11, &end, 10);
        cr_assert(*end == 0 && step >= 0, "odd name %s/%s", out, e->d_name);
        char dir[512], f[600];
        snprintf(dir, sizeof dir, "%s/%s", out, e->d_name);
        TrainerState ts;
        GtError err = {0};
        cr_assert_eq(checkpoint_read_state(dir, &ts, &err), 0, "incomplete checkpoint %s: %s", dir, err.msg);
        cr_assert_eq(ts.global_step, step, "%s: trainer_state.json names step %ld", dir, ts.global_step);
        HfWeights *hw = NULL; /* model.safetensors, or its shards and index */
        cr_assert_eq(hf_weights_open(&hw, dir, &err), 0, "incomplete checkpoint %s: %s", dir, err.msg);
        cr_assert_gt(hf_weights_count(hw), 0);
        hf_weights_close(hw);
        snprintf(f, sizeof f, "%s/optimizer.safetensors", dir);
        SafeTensors *st = NULL;
        cr_assert_eq(safetensors_open(&st, f, &err), 0, "incomplete checkpoint %s: %s", dir, err.msg);
        cr_assert_gt(safetensors_count(st), 0);
        safetensors_close(st);
        if (step > *latest) *latest = step;
        n++;
    }
    closedir(d);
    return n;
}

void expect_same_run(const char *ref_out, const char *out, long last) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/model.safetensors", ref_out);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    cr_assert(files_equal(a, b), "%s differs from the unbroken run's %s", b, a);
    snprintf(a, sizeof a, "%s/checkpoint-%ld/optimizer.safetensors", ref_out, last);
    snprintf(b, sizeof b, "%s/checkpoint-%ld/optimizer.safetensors", out, last);
    cr_assert(files_equal(a, b), "%s differs from the unbroken run's %s", b, a);
}

/* reference: the fixture run unbroken, into dir/ref; returns its wall time */
double reference_run(const Ws *w, char *ref_out, size_t cap, const char *first, ...) {
    COLLECT_SETS(first, sets, n);
    snprintf(ref_out, cap, "%s/ref", w->dir);
    char od[400];
    snprintf(od, sizeof od, "output_dir=%s", ref_out);
    sets[n < MAX_SETS ? n++ : MAX_SETS - 1] = od;
    Proc p;
    start_v(&p, w, w->cfg, NULL, "ref", sets, n);
    int st = wait_proc(&p);
    double dt = now_s() - p.t0;
    expect_exit(w, "ref", st, 0);
    return dt;
}

uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* wait until the run's stdout shows a training step (signals are polled from there on) */
void wait_for_step(const Proc *p, const Ws *w, const char *tag) {
    for (int i = 0; i < 3000; i++) {
        char *o = read_log(w, tag, "out");
        bool seen = strstr(o, "step ") != NULL && strstr(o, "| loss") != NULL;
        free(o);
        if (seen) return;
        int st;
        cr_assert_eq(waitpid(p->pid, &st, WNOHANG), 0, "%s ended before its first step", tag);
        sleep_s(0.002);
    }
    cr_assert_fail("%s: no step logged within 6 s", tag);
}

int count_substr(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}


/* ---------------------------------------------------------------- directory snapshots */

typedef struct {
    char **lines;
    int n, cap;
    size_t root_len;
} Snap;

static void snap_walk(Snap *sn, const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024], line[1400];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        const char *rel = p + sn->root_len;
        if (S_ISLNK(sb.st_mode)) {
            char target[512] = {0};
            ssize_t n = readlink(p, target, sizeof target - 1);
            snprintf(line, sizeof line, "%s link -> %s", rel, n > 0 ? target : "?");
        } else if (S_ISDIR(sb.st_mode)) {
            snprintf(line, sizeof line, "%s dir", rel);
            snap_walk(sn, p);
        } else if (S_ISREG(sb.st_mode)) {
            size_t n = 0;
            char *b = slurp(p, &n);
            uint64_t h = 1469598103934665603ull; /* FNV-1a */
            for (size_t i = 0; b && i < n; i++) h = (h ^ (unsigned char)b[i]) * 1099511628211ull;
            free(b);
            snprintf(line, sizeof line, "%s file %zu %016llx", rel, n, (unsigned long long)h);
        } else {
            snprintf(line, sizeof line, "%s special", rel);
        }
        if (sn->n == sn->cap) {
            sn->cap = sn->cap ? 2 * sn->cap : 64;
            sn->lines = realloc(sn->lines, (size_t)sn->cap * sizeof *sn->lines);
            cr_assert_not_null(sn->lines);
        }
        sn->lines[sn->n++] = strdup(line);
    }
    closedir(d);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char *tree_snapshot(const char *dir) {
    Snap sn = {.root_len = strlen(dir)};
    snap_walk(&sn, dir);
    qsort(sn.lines, (size_t)sn.n, sizeof *sn.lines, cmp_str);
    size_t total = 1;
    for (int i = 0; i < sn.n; i++) total += strlen(sn.lines[i]) + 1;
    char *out = malloc(total);
    cr_assert_not_null(out);
    out[0] = 0;
    for (int i = 0; i < sn.n; i++) {
        strcat(out, sn.lines[i]);
        strcat(out, "\n");
        free(sn.lines[i]);
    }
    free(sn.lines);
    return out;
}
