/* rundir.c - see rundir.h. */
#include "rundir.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

const char *const RUNDIR_CHECKPOINT_FILES[] = {"model.safetensors", "config.json", "optimizer.safetensors",
                                               "trainer_state.json", "adapter_model.safetensors",
                                               "adapter_config.json", "tokenizer.json", NULL};
/* the files a run writes at the top of output_dir (besides checkpoints and event files); a LoRA
 * run's adapter, and a PiSSA run's initial adapter in RUNDIR_PISSA_INIT/ */
static const char *const RUN_FILES[] = {"metrics.jsonl", "model.safetensors", "config.json", "report.svg",
                                        "adapter_model.safetensors", "adapter_config.json", "tokenizer.json",
                                        "resolved_config.yaml", NULL};
static const char *const ADAPTER_FILES[] = {"adapter_model.safetensors", "adapter_config.json", NULL};

struct RunDir {
    char dir[GT_PATH_MAX];
    char config_path[GT_PATH_MAX];
    bool exists, committed, lock_created;
    int lock_fd;
    bool has_identity;  /* gtrain_run.json is there (readable or not) */
    char *run_json;     /* its "run" object, unformatted; NULL when unreadable */
    long *ckpts;        /* steps the identity records */
    int n_ckpts;
    char **events;      /* event file names the identity records */
    int n_events;
    long *dir_ckpts;    /* checkpoint-N entries found in the directory */
    int n_dir_ckpts;
    int n_foreign;      /* entries that are not gtrain's */
    char foreign[256];  /* the first of them */
};

/* ---------------------------------------------------------------- names */

static long step_of(const char *name, const char *prefix, const char *suffix) {
    size_t lp = strlen(prefix), ls = strlen(suffix), n = strlen(name);
    if (n <= lp + ls || strncmp(name, prefix, lp) != 0 || strcmp(name + n - ls, suffix) != 0) return -1;
    long v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9' || v > 100000000000L) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

/* The files that stand for model.safetensors when the weights are sharded (hf_writer.h):
 * model.safetensors.index.json and model-NNNNN-of-MMMMM.safetensors, or their .tmp names. */
static bool shard_file(const char *name) {
    static const char INDEX[] = "model.safetensors.index.json";
    if (strncmp(name, INDEX, sizeof INDEX - 1) == 0 && (!name[sizeof INDEX - 1] || !strcmp(name + sizeof INDEX - 1, ".tmp")))
        return true;
    unsigned k, n;
    int end = 0;
    if (strlen(name) < 32 || sscanf(name, "model-%5u-of-%5u.safetensors%n", &k, &n, &end) != 2 || end != 32) return false;
    for (int i = 6; i < 11; i++) /* five digits each, as the writer spells them */
        if (name[i] < '0' || name[i] > '9' || name[i + 9] < '0' || name[i + 9] > '9') return false;
    return !name[32] || !strcmp(name + 32, ".tmp");
}

static bool listed(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if (strcmp(name, names[i]) == 0) return true;
        if (strncmp(name, names[i], n) == 0 && strcmp(name + n, ".tmp") == 0) return true;
        if (strcmp(names[i], "model.safetensors") == 0 && shard_file(name)) return true;
    }
    return false;
}

static bool recorded(const RunDir *rd, long step) {
    for (int i = 0; i < rd->n_ckpts; i++)
        if (rd->ckpts[i] == step) return true;
    return false;
}

/* Is this entry of the directory gtrain's? */
static bool owned_entry(const RunDir *rd, const char *name) {
    /* the lock, and the identity's temporary name (a run killed while writing its first one) */
    if (strcmp(name, RUNDIR_LOCK) == 0 || strcmp(name, RUNDIR_IDENTITY ".tmp") == 0) return true;
    if (!rd->has_identity) return false;
    if (strcmp(name, RUNDIR_IDENTITY) == 0 || listed(RUN_FILES, name) || strcmp(name, RUNDIR_PISSA_INIT) == 0) return true;
    if (step_of(name, ".checkpoint-", ".tmp") >= 0 || strncmp(name, ".checkpoint-", 12) == 0) return true;
    /* a generation task's results at each eval (trainer_eval.c) */
    if (step_of(name, "eval_results-", ".jsonl") >= 0 || step_of(name, "eval_results-", ".jsonl.tmp") >= 0) return true;
    long s = step_of(name, "checkpoint-", "");
    if (s >= 0) return recorded(rd, s);
    for (int i = 0; i < rd->n_events; i++)
        if (strcmp(name, rd->events[i]) == 0) return true;
    return false;
}

/* ---------------------------------------------------------------- removal, never through a link */

int rundir_remove_owned(const char *path, const char *const *names) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat es;
        /* only gtrain's names, and never a directory inside: unlinkat removes a link, not its target */
        if (listed(names, e->d_name) && fstatat(fd, e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(es.st_mode))
            unlinkat(fd, e->d_name, 0);
    }
    closedir(d);
    if (rmdir(path) != 0) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            gt_warn("%s: left in place: it holds files gtrain did not write\n", path);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the lock */

/* pid holding a flock on the file open as fd, from /proc/locks; else the pid the file records */
static long lock_holder(int fd) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) return -1;
    FILE *f = fopen("/proc/locks", "r");
    long pid = -1;
    if (f) {
        char line[256];
        while (pid < 0 && fgets(line, sizeof line, f)) {
            char kind[16];
            long p;
            unsigned maj, min;
            unsigned long ino;
            if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &p, &maj, &min, &ino) == 5 &&
                strcmp(kind, "FLOCK") == 0 && ino == (unsigned long)sb.st_ino && maj == major(sb.st_dev) &&
                min == minor(sb.st_dev))
                pid = p;
        }
        fclose(f);
    }
    if (pid < 0) {
        char buf[32] = {0};
        if (pread(fd, buf, sizeof buf - 1, 0) > 0) sscanf(buf, "pid %ld", &pid);
    }
    return pid;
}

static int take_lock(RunDir *rd, GtError *err) {
    char path[GT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", rd->dir, RUNDIR_LOCK);
    for (int attempt = 0; attempt < 100; attempt++) {
        bool created = true;
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) {
            created = false;
            fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (fd < 0 && errno == ENOENT) continue; /* removed in between: again */
        }
        if (fd < 0) { /* a link or a directory at the lock's name is planted, not a failure of ours */
            const bool planted = errno == ELOOP || errno == EISDIR;
            return gt_error(err, planted ? GT_EXIT_BAD_INPUT : GT_EXIT_FAILURE,
                            "%s: output_dir: cannot open the lock file %s: %s", rd->config_path, path,
                            errno == ELOOP    ? "expected gtrain's lock file, found a symbolic link"
                            : errno == EISDIR ? "expected gtrain's lock file, found a directory"
                                              : strerror(errno));
        }
        struct stat fs, ps;
        if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode)) {
            close(fd);
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: output_dir: %s: expected gtrain's lock file, found a special file",
                            rd->config_path, path);
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            long pid = lock_holder(fd);
            close(fd);
            if (e != EWOULDBLOCK)
                return gt_error(err, GT_EXIT_FAILURE, "%s: cannot lock: %s", path, strerror(e));
            char who[48] = "another process";
            if (pid > 0) snprintf(who, sizeof who, "pid %ld", pid);
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: output_dir: %s is in use by another gtrain run (%s holds %s); expected one run per "
                            "output_dir",
                            rd->config_path, rd->dir, who, RUNDIR_LOCK);
        }
        /* the file we locked must still be the one at the path (a refused run may unlink its own) */
        if (lstat(path, &ps) == 0 && ps.st_ino == fs.st_ino && ps.st_dev == fs.st_dev) {
            rd->lock_fd = fd;
            rd->lock_created = created;
            return 0;
        }
        close(fd);
    }
    return gt_error(err, GT_EXIT_FAILURE, "%s: cannot lock: the lock file keeps changing", path);
}

/* ---------------------------------------------------------------- identity */

/* Does directory p hold nothing but the files of a gtrain checkpoint (another trainer's always has
 * others: optimizer.pt, rng_state.pth, training_args.bin)? */
static bool only_gtrain_files(const char *p) {
    DIR *d = opendir(p);
    if (!d) return false;
    bool only = true;
    struct dirent *e;
    while (only && (e = readdir(d)))
        only = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || listed(RUNDIR_CHECKPOINT_FILES, e->d_name);
    closedir(d);
    return only;
}

/* A gtrain_run.json of gtrain before 0.2 is the bare run object and lists no files; that gtrain took
 * every checkpoint-N directory and event file beside it for its own, so they are adopted as this
 * run's (the next write records them) -- checkpoint directories only when they hold nothing else. */
static void adopt_legacy(RunDir *rd) {
    DIR *d = opendir(rd->dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[GT_PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", rd->dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        long s = step_of(e->d_name, "checkpoint-", "");
        if (s >= 0 && S_ISDIR(sb.st_mode) && only_gtrain_files(p)) {
            rd->ckpts = gt_xrealloc(rd->ckpts, (size_t)(rd->n_ckpts + 1) * sizeof *rd->ckpts);
            rd->ckpts[rd->n_ckpts++] = s;
        } else if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0 && S_ISREG(sb.st_mode)) {
            rd->events = gt_xrealloc(rd->events, (size_t)(rd->n_events + 1) * sizeof *rd->events);
            rd->events[rd->n_events++] = gt_xstrdup(e->d_name);
        }
    }
    closedir(d);
}

static void read_identity(RunDir *rd) {
    char path[GT_PATH_MAX + 32], *text = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/%s", rd->dir, RUNDIR_IDENTITY);
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    rd->has_identity = true;
    if (!S_ISREG(sb.st_mode) || gt_read_small_file(path, "run identity", 1u << 20, &text, &n, NULL) != 0) return;
    cJSON *j = gt_json_nul_at(text, n) < 0 ? cJSON_ParseWithLength(text, n) : NULL; /* unreadable: another run's */
    free(text);
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(j, "checkpoints");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "events");
    if (cJSON_IsObject(run) && cJSON_IsArray(ck) && cJSON_IsArray(ev)) {
        rd->run_json = cJSON_PrintUnformatted(run);
        const cJSON *x;
        cJSON_ArrayForEach(x, ck) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1e11) continue;
            rd->ckpts = gt_xrealloc(rd->ckpts, (size_t)(rd->n_ckpts + 1) * sizeof *rd->ckpts);
            rd->ckpts[rd->n_ckpts++] = (long)x->valuedouble;
        }
        cJSON_ArrayForEach(x, ev) {
            /* a bare file name of the directory, nothing else */
            if (!cJSON_IsString(x) || strncmp(x->valuestring, "events.out.tfevents.", 20) != 0 ||
                strchr(x->valuestring, '/'))
                continue;
            rd->events = gt_xrealloc(rd->events, (size_t)(rd->n_events + 1) * sizeof *rd->events);
            rd->events[rd->n_events++] = gt_xstrdup(x->valuestring);
        }
    } else if (cJSON_IsObject(j) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "seed")) &&
               cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "n_layer"))) {
        rd->run_json = cJSON_PrintUnformatted(j);
        adopt_legacy(rd);
    }
    cJSON_Delete(j);
}

static int write_identity(RunDir *rd, GtError *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON *run = cJSON_Parse(rd->run_json);
    if (!run) run = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "run", run);
    cJSON *ck = cJSON_AddArrayToObject(j, "checkpoints");
    for (int i = 0; i < rd->n_ckpts; i++) cJSON_AddItemToArray(ck, cJSON_CreateNumber((double)rd->ckpts[i]));
    cJSON *ev = cJSON_AddArrayToObject(j, "events");
    for (int i = 0; i < rd->n_events; i++) cJSON_AddItemToArray(ev, cJSON_CreateString(rd->events[i]));
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return gt_error(err, GT_EXIT_FAILURE, "out of memory writing %s", RUNDIR_IDENTITY);
    char path[GT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", rd->dir, RUNDIR_IDENTITY);
    int rc = gt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

static char *normalized(const char *json) {
    cJSON *j = cJSON_Parse(json);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s ? s : gt_xstrdup(json);
}

/* ---------------------------------------------------------------- open / check */

static void scan(RunDir *rd) {
    DIR *d = opendir(rd->dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        long s = step_of(e->d_name, "checkpoint-", "");
        if (s >= 0) {
            rd->dir_ckpts = gt_xrealloc(rd->dir_ckpts, (size_t)(rd->n_dir_ckpts + 1) * sizeof *rd->dir_ckpts);
            rd->dir_ckpts[rd->n_dir_ckpts++] = s;
        }
        if (owned_entry(rd, e->d_name)) continue;
        if (!rd->n_foreign++) snprintf(rd->foreign, sizeof rd->foreign, "%s", e->d_name);
    }
    closedir(d);
}

int rundir_open(RunDir **out, const char *config_path, const char *output_dir, bool lock, GtError *err) {
    RunDir *rd = gt_xcalloc(1, sizeof *rd);
    rd->lock_fd = -1;
    *out = rd;
    snprintf(rd->dir, sizeof rd->dir, "%s", output_dir);
    snprintf(rd->config_path, sizeof rd->config_path, "%s", config_path);
    struct stat sb;
    if (stat(output_dir, &sb) != 0) {
        if (errno == ENOENT) return 0; /* created at commit */
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: output_dir: cannot use %s: %s", config_path, output_dir,
                        strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: output_dir: expected a directory, found a file: %s", config_path,
                        output_dir);
    rd->exists = true;
    if (lock && take_lock(rd, err)) return -1;
    read_identity(rd);
    scan(rd);
    return 0;
}

int rundir_check(const RunDir *rd, const char *identity_json, bool resuming, bool overwrite, GtError *err) {
    if (!rd->exists || overwrite) return 0;
    bool same = rundir_holds(rd, identity_json);
    if (rd->n_foreign)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: output_dir: %s holds %d file%s gtrain did not write (%s%s); expected an empty directory or "
                        "one of gtrain's runs (set overwrite_output_dir: true to train there anyway; those files are "
                        "left alone)",
                        rd->config_path, rd->dir, rd->n_foreign, rd->n_foreign == 1 ? "" : "s", rd->foreign,
                        rd->has_identity ? "" : ", and no " RUNDIR_IDENTITY);
    if (!rd->has_identity || (same && resuming)) return 0;
    if (same)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: output_dir: %s already holds an earlier run of this one; expected an empty directory "
                        "when not resuming (resume_from_checkpoint: auto continues it; or choose a new output_dir; "
                        "overwrite_output_dir: true would DELETE its checkpoints and weights)",
                        rd->config_path, rd->dir);
    char diff[640];
    int n = rundir_diff(rd, identity_json, diff, sizeof diff);
    return gt_error(err, GT_EXIT_BAD_INPUT,
                    "%s: output_dir: %s holds a different run (%s); expected this run or an empty directory: choose a "
                    "new output_dir (overwrite_output_dir: true would DELETE that run's checkpoints and weights)",
                    rd->config_path, rd->dir, n ? diff : "its identity is unreadable");
}

bool rundir_has_run(const RunDir *rd) { return rd->has_identity; }

bool rundir_has_weights(const RunDir *rd) {
    static const char *const names[] = {"model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors"};
    for (int i = 0; i < 3; i++) {
        char p[GT_PATH_MAX + 64];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", rd->dir, names[i]);
        if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode)) return true;
    }
    return false;
}

/* a member's value as short text: strings as they are, other values as JSON */
static void value_text(const cJSON *v, char *out, size_t cap) {
    if (!v) {
        snprintf(out, cap, "(absent)");
        return;
    }
    if (cJSON_IsString(v)) {
        snprintf(out, cap, "%.200s", v->valuestring);
        return;
    }
    char *t = cJSON_PrintUnformatted(v);
    snprintf(out, cap, "%.200s", t ? t : "?");
    free(t);
}

int rundir_diff(const RunDir *rd, const char *identity_json, char *out, size_t cap) {
    out[0] = '\0';
    cJSON *old = rd->run_json ? cJSON_Parse(rd->run_json) : NULL, *now = cJSON_Parse(identity_json);
    int n = 0;
    size_t len = 0;
    for (int pass = 0; pass < 2 && old && now; pass++) { /* the new run's keys, then those only the old one has */
        const cJSON *x, *obj = pass ? old : now;
        cJSON_ArrayForEach(x, obj) {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(old, x->string), *b = cJSON_GetObjectItemCaseSensitive(now, x->string);
            if (pass && b) continue;
            if (a && b && cJSON_Compare(a, b, true)) continue;
            char va[256], vb[256];
            value_text(a, va, sizeof va);
            value_text(b, vb, sizeof vb);
            int w = snprintf(out + len, cap - len, "%s%s: %s -> %s", n ? "; " : "", x->string, va, vb);
            n++;
            if (w < 0 || (size_t)w >= cap - len) { /* cut: what fits, the count still right */
                len = strlen(out);
                continue;
            }
            len += (size_t)w;
        }
    }
    cJSON_Delete(old);
    cJSON_Delete(now);
    return n;
}

static bool complete(const RunDir *rd, long step, char *out, size_t cap) {
    char p[GT_PATH_MAX + 64], st[GT_PATH_MAX + 96];
    snprintf(p, sizeof p, "%s/checkpoint-%ld", rd->dir, step);
    snprintf(st, sizeof st, "%s/trainer_state.json", p);
    struct stat a, b;
    if (lstat(p, &a) != 0 || !S_ISDIR(a.st_mode) || lstat(st, &b) != 0 || !S_ISREG(b.st_mode)) return false;
    if (out) snprintf(out, cap, "%s", p);
    return true;
}

int rundir_latest(const RunDir *rd, char *out, size_t cap, long *step, GtError *err) {
    long best = -1;
    if (rd->run_json)
        for (int i = 0; i < rd->n_ckpts; i++)
            if (rd->ckpts[i] > best && complete(rd, rd->ckpts[i], NULL, 0)) best = rd->ckpts[i];
    if (best < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "resume_from_checkpoint: latest: expected a complete checkpoint-N directory of this run in %s, "
                        "found none",
                        rd->dir);
    complete(rd, best, out, cap);
    if (step) *step = best;
    return 0;
}

int rundir_count_after(const RunDir *rd, long step) {
    int n = 0;
    for (int i = 0; i < rd->n_ckpts; i++) n += rd->ckpts[i] > step && complete(rd, rd->ckpts[i], NULL, 0);
    return n;
}

bool rundir_holds(const RunDir *rd, const char *identity_json) {
    char *mine = normalized(identity_json);
    bool same = rd->run_json && strcmp(rd->run_json, mine) == 0;
    free(mine);
    return same;
}

long rundir_foreign_checkpoint(const RunDir *rd, long lo, long hi, long every) {
    long first = -1;
    for (int i = 0; i < rd->n_dir_ckpts; i++) {
        long s = rd->dir_ckpts[i];
        if (s > lo && s <= hi && (s == hi || (every > 0 && s % every == 0)) && !recorded(rd, s) &&
            (first < 0 || s < first))
            first = s;
    }
    return first;
}

/* ---------------------------------------------------------------- commit */

static int mkdir_p(const RunDir *rd, GtError *err) {
    char buf[GT_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", rd->dir);
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return gt_error(err, errno == ENOTDIR ? GT_EXIT_BAD_INPUT : GT_EXIT_FAILURE,
                            "%s: output_dir: cannot create %s: %s", rd->config_path, buf, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: output_dir: expected a directory, found a file: %s",
                        rd->config_path, buf);
    return 0;
}

static void remove_checkpoint(RunDir *rd, long step) {
    char p[GT_PATH_MAX + 64], aside[GT_PATH_MAX + 80];
    snprintf(p, sizeof p, "%s/checkpoint-%ld", rd->dir, step);
    /* renamed first, so a kill mid-removal never leaves a half-deleted "complete" checkpoint */
    snprintf(aside, sizeof aside, "%s/.checkpoint-%ld.del.tmp", rd->dir, step);
    if (rename(p, aside) == 0) rundir_remove_owned(aside, RUNDIR_CHECKPOINT_FILES);
    for (int i = 0; i < rd->n_dir_ckpts; i++)
        if (rd->dir_ckpts[i] == step) rd->dir_ckpts[i] = -1;
}

static void drop_record(RunDir *rd, int i) {
    memmove(rd->ckpts + i, rd->ckpts + i + 1, (size_t)(rd->n_ckpts - i - 1) * sizeof *rd->ckpts);
    rd->n_ckpts--;
}

static void remove_top(const RunDir *rd, const char *name) {
    char p[GT_PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/%s", rd->dir, name);
    struct stat sb;
    if (lstat(p, &sb) == 0 && !S_ISDIR(sb.st_mode)) unlink(p);
}

static void clean_partial(const RunDir *rd) {
    DIR *d = opendir(rd->dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, ".checkpoint-", 12) == 0 && n > 16 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            char p[GT_PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s", rd->dir, e->d_name);
            rundir_remove_owned(p, RUNDIR_CHECKPOINT_FILES);
        }
    }
    closedir(d);
}

int rundir_commit(RunDir *rd, const char *identity_json, bool wipe, long keep_upto, GtError *err) {
    const bool created = !rd->exists;
    if (created) {
        if (mkdir_p(rd, err)) return -1;
        rd->exists = true;
    }
    if (rd->lock_fd < 0 && take_lock(rd, err)) return -1;
    if (created) { /* it did not exist when this run looked: another run may have taken it since */
        read_identity(rd);
        scan(rd);
        if (rd->has_identity || rd->n_foreign)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: output_dir: %s was taken by another run while this one was loading; expected it "
                            "empty (run again to see what it holds)",
                            rd->config_path, rd->dir);
    }
    bool gtrain_before = rd->has_identity; /* a .checkpoint-*.tmp of a directory without one is not ours */
    if (wipe && rd->run_json) {
        for (int i = rd->n_ckpts - 1; i >= 0; i--) remove_checkpoint(rd, rd->ckpts[i]);
        rd->n_ckpts = 0;
        for (int i = 0; i < rd->n_events; i++) remove_top(rd, rd->events[i]);
        for (int i = 0; RUN_FILES[i]; i++) remove_top(rd, RUN_FILES[i]);
        char pissa[GT_PATH_MAX + 300];
        snprintf(pissa, sizeof pissa, "%s/%s", rd->dir, RUNDIR_PISSA_INIT);
        rundir_remove_owned(pissa, ADAPTER_FILES);
        for (int i = 0; i < rd->n_events; i++) free(rd->events[i]);
        rd->n_events = 0;
    } else if (wipe) {
        rd->n_ckpts = rd->n_events = 0; /* an identity we cannot read lists nothing we may delete */
    }
    if (keep_upto >= 0)
        for (int i = rd->n_ckpts - 1; i >= 0; i--)
            if (rd->ckpts[i] > keep_upto) {
                remove_checkpoint(rd, rd->ckpts[i]);
                drop_record(rd, i);
            }
    if (gtrain_before) clean_partial(rd);
    free(rd->run_json);
    rd->run_json = normalized(identity_json);
    rd->has_identity = true;
    if (write_identity(rd, err)) return -1;
    rd->committed = true;
    char pid[32];
    int n = snprintf(pid, sizeof pid, "pid %ld\n", (long)getpid());
    if (ftruncate(rd->lock_fd, 0) != 0 || pwrite(rd->lock_fd, pid, (size_t)n, 0) != n)
        gt_warn("%s/%s: cannot record the pid: %s\n", rd->dir, RUNDIR_LOCK, strerror(errno));
    return 0;
}

int rundir_record_checkpoint(RunDir *rd, long step, GtError *err) {
    if (recorded(rd, step)) return 0;
    rd->ckpts = gt_xrealloc(rd->ckpts, (size_t)(rd->n_ckpts + 1) * sizeof *rd->ckpts);
    rd->ckpts[rd->n_ckpts++] = step;
    return write_identity(rd, err);
}

int rundir_rotate(RunDir *rd, int keep, GtError *err) {
    if (keep <= 0) return 0;
    bool changed = false;
    for (;;) {
        int n = 0, oldest = -1;
        for (int i = 0; i < rd->n_ckpts; i++)
            if (complete(rd, rd->ckpts[i], NULL, 0)) {
                n++;
                if (oldest < 0 || rd->ckpts[i] < rd->ckpts[oldest]) oldest = i;
            }
        if (n <= keep) break;
        remove_checkpoint(rd, rd->ckpts[oldest]); /* removed, then dropped: a kill between leaves a stale record */
        drop_record(rd, oldest);
        changed = true;
    }
    return changed ? write_identity(rd, err) : 0;
}

int rundir_record_events(RunDir *rd, const char *file_name, GtError *err) {
    const char *base = strrchr(file_name, '/');
    base = base ? base + 1 : file_name;
    rd->events = gt_xrealloc(rd->events, (size_t)(rd->n_events + 1) * sizeof *rd->events);
    rd->events[rd->n_events++] = gt_xstrdup(base);
    return write_identity(rd, err);
}

void rundir_close(RunDir *rd) {
    if (!rd) return;
    if (rd->lock_fd >= 0) {
        if (!rd->committed && rd->lock_created) { /* a refused run leaves the directory as it was */
            char path[GT_PATH_MAX + 32];
            snprintf(path, sizeof path, "%s/%s", rd->dir, RUNDIR_LOCK);
            unlink(path);
        }
        close(rd->lock_fd);
    }
    free(rd->run_json);
    free(rd->ckpts);
    for (int i = 0; i < rd->n_events; i++) free(rd->events[i]);
    free(rd->events);
    free(rd->dir_ckpts);
    free(rd);
}
