/* outguard.c - see outguard.h. */
#include "outguard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

#define GUARD_MAX_DIR_ENTRIES 4096 /* a directory input's entries recorded (a model's shards) */

static void push(OutGuard *g, const struct stat *sb, const char *path, const char *what) {
    for (int i = 0; i < g->n; i++)
        if (g->in[i].dev == sb->st_dev && g->in[i].ino == sb->st_ino) return;
    g->in = gt_xrealloc(g->in, (size_t)(g->n + 1) * sizeof *g->in);
    GuardInput *x = &g->in[g->n++];
    x->dev = sb->st_dev;
    x->ino = sb->st_ino;
    x->dir = S_ISDIR(sb->st_mode);
    snprintf(x->path, sizeof x->path, "%s", path);
    snprintf(x->what, sizeof x->what, "%s", what);
}

void out_guard_add(OutGuard *g, const char *path, const char *what) {
    struct stat sb;
    if (!path || !*path || stat(path, &sb) != 0) return;
    push(g, &sb, path, what);
    if (!S_ISDIR(sb.st_mode)) return;
    DIR *d = opendir(path);
    if (!d) return;
    int n = 0;
    for (struct dirent *e; n < GUARD_MAX_DIR_ENTRIES && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[GT_PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        struct stat es;
        if (stat(p, &es) == 0 && S_ISREG(es.st_mode)) {
            char w[48];
            snprintf(w, sizeof w, "file of the %s", what);
            push(g, &es, p, w);
            n++;
        }
    }
    closedir(d);
}

void out_guard_free(OutGuard *g) {
    free(g->in);
    g->in = NULL;
    g->n = 0;
}

const GuardInput *out_guard_find(const OutGuard *g, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL;
    for (int i = 0; i < g->n; i++)
        if (g->in[i].dev == sb.st_dev && g->in[i].ino == sb.st_ino) return &g->in[i];
    return NULL;
}

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
                         : "a special file";
}

static int check_parent(const char *path, const char *key, GtError *err) {
    char parent[GT_PATH_MAX];
    gt_parent_dir(parent, sizeof parent, path);
    struct stat ps;
    if (stat(parent, &ps) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected an existing directory to hold it, found no directory %s (%s)",
                        key, path, parent, strerror(errno));
    if (!S_ISDIR(ps.st_mode))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a directory to hold it, found %s: %s", key, path,
                        kind_of(ps.st_mode), parent);
    return 0;
}

int out_guard_file(const OutGuard *g, const char *path, const char *key, GtError *err) {
    size_t n = strlen(path);
    if (n == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a file name, found \"\"", key);
    if (n >= GT_PATH_MAX - 32)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a path shorter than %d bytes, found %zu", key,
                        GT_PATH_MAX - 32, n);
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a new file name or a regular file, found %s", key,
                            path, errno == ENOTDIR ? "a path through a file" : strerror(errno));
        if (path[n - 1] == '/')
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a file name, found a directory path", key, path);
        return check_parent(path, key, err);
    }
    const GuardInput *in = out_guard_find(g, path);
    if (in)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a file apart from the inputs, found %sthe %s %s (an output "
                        "never replaces an input)", key, path, S_ISLNK(sb.st_mode) ? "a symbolic link to " : "", in->what, in->path);
    if (!S_ISREG(sb.st_mode))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a new file name or a regular file, found %s%s", key,
                        path, kind_of(sb.st_mode), S_ISLNK(sb.st_mode) ? " (never written through)" : "");
    return check_parent(path, key, err);
}

/* Is the directory a inside b (or b itself)? by walking a's parents (dev, ino), links resolved */
static bool inside(const char *a, const struct stat *b) {
    char *r = realpath(a, NULL);
    if (!r) return false;
    bool found = false;
    for (;;) {
        struct stat sb;
        if (stat(r, &sb) == 0 && sb.st_dev == b->st_dev && sb.st_ino == b->st_ino) {
            found = true;
            break;
        }
        char *slash = strrchr(r, '/');
        if (!slash || slash == r) {
            if (r[1] == '\0') break; /* "/" was checked */
            r[1] = '\0';
            continue;
        }
        *slash = '\0';
    }
    free(r);
    return found;
}

int out_guard_dir(const OutGuard *g, const char *path, const char *key, bool follow, bool strict, GtError *err) {
    size_t n = strlen(path);
    if (n == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: expected a directory, found \"\"", key);
    char p[GT_PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0'; /* "out/" is "out": its link is not followed by a slash */
    struct stat sb;
    if (lstat(p, &sb) != 0) {
        if (errno == ENOENT) { /* created later: the nearest existing ancestor must not be inside an input directory */
            if (!strict) return 0;
            char a[GT_PATH_MAX];
            snprintf(a, sizeof a, "%s", p);
            struct stat as;
            do {
                char up[GT_PATH_MAX];
                gt_parent_dir(up, sizeof up, a);
                snprintf(a, sizeof a, "%s", up);
            } while (stat(a, &as) != 0 && strcmp(a, ".") != 0 && strcmp(a, "/") != 0);
            for (int i = 0; i < g->n; i++) {
                struct stat is = {.st_dev = g->in[i].dev, .st_ino = g->in[i].ino};
                if (g->in[i].dir && inside(a, &is))
                    return gt_error(err, GT_EXIT_BAD_INPUT,
                                    "%s: %s: expected a directory apart from the inputs, found one inside the %s %s", key,
                                    path, g->in[i].what, g->in[i].path);
            }
            return 0;
        }
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a directory, found %s", key, path,
                        errno == ENOTDIR ? "a path through a file" : strerror(errno));
    }
    const GuardInput *in = out_guard_find(g, p);
    if (in)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: %s: expected a directory apart from the inputs, found %sthe %s %s (an output never "
                        "replaces an input)",
                        key, path, S_ISLNK(sb.st_mode) ? "a symbolic link to " : "", in->what, in->path);
    if (S_ISLNK(sb.st_mode)) {
        struct stat ts;
        if (!follow || stat(p, &ts) != 0 || !S_ISDIR(ts.st_mode))
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a directory, found a symbolic link (not followed)",
                            key, path);
        sb = ts;
    }
    if (!S_ISDIR(sb.st_mode))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a directory, found %s", key, path, kind_of(sb.st_mode));
    if (!strict) return 0;
    for (int i = 0; i < g->n; i++) {
        if (!g->in[i].dir) { /* a file: never among the files of a directory that may be wiped */
            char parent[GT_PATH_MAX];
            struct stat ps;
            gt_parent_dir(parent, sizeof parent, g->in[i].path);
            if (stat(parent, &ps) == 0 && ps.st_dev == sb.st_dev && ps.st_ino == sb.st_ino)
                return gt_error(err, GT_EXIT_BAD_INPUT,
                                "%s: %s: expected a directory apart from the inputs, found one holding the %s %s", key,
                                path, g->in[i].what, g->in[i].path);
            continue;
        }
        struct stat is = {.st_dev = g->in[i].dev, .st_ino = g->in[i].ino};
        if (inside(p, &is) || inside(g->in[i].path, &sb))
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: %s: expected a directory apart from the inputs, found one %s the %s %s", key, path,
                            inside(p, &is) ? "inside" : "around", g->in[i].what, g->in[i].path);
    }
    return 0;
}

/* ---------------------------------------------------------------- stale temporaries */

static bool pid_alive(long pid) {
    if (pid <= 0 || pid > INT_MAX) return false;
    if (pid == (long)getpid()) return true;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static void remove_tree_owned(int dfd, const char *name) {
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        unlinkat(dfd, name, 0);
        return;
    }
    gt_remove_dir_of_files(dfd, name); /* a writer's temporary holds files only */
}

int out_guard_clean_stale(const char *dir, const char *prefix) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0) close(dfd);
        return 0;
    }
    const size_t lp = strlen(prefix);
    int removed = 0;
    char **names = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, lp) != 0) continue;
        const char *s = e->d_name + lp;
        long pid = 0;
        int digits = 0;
        for (; *s >= '0' && *s <= '9' && digits < 10; s++, digits++) pid = pid * 10 + (*s - '0');
        if (!digits || *s != '-' || pid_alive(pid)) continue;
        names = gt_xrealloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = gt_xstrdup(e->d_name);
    }
    for (int i = 0; i < n; i++) {
        remove_tree_owned(dfd, names[i]);
        struct stat sb;
        if (fstatat(dfd, names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            gt_warn("%s/%s: removed, a temporary left by an earlier gtrain that was killed\n", dir, names[i]);
            removed++;
        }
        free(names[i]);
    }
    free(names);
    closedir(d);
    return removed;
}

/* ---------------------------------------------------------------- a training run */

static void add_maybe_glob(OutGuard *g, const char *path, const char *what) {
    if (!path[0]) return;
    glob_t gl;
    if (strpbrk(path, "*?[") && glob(path, 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc && i < GUARD_MAX_DIR_ENTRIES; i++) out_guard_add(g, gl.gl_pathv[i], what);
        globfree(&gl);
        return;
    }
    out_guard_add(g, path, what);
}

int out_guard_run(const RunConfig *cfg, GtError *err) {
    OutGuard g = {0};
    struct stat sb;
    const bool model_dir = stat(cfg->model, &sb) == 0 && S_ISDIR(sb.st_mode);
    out_guard_add(&g, cfg->model, model_dir ? "model directory" : "model file");
    if (cfg->init_from[0]) out_guard_add(&g, cfg->init_from, "init_from");
    if (cfg->tokenizer[0] && strcmp(cfg->tokenizer, "none") != 0) out_guard_add(&g, cfg->tokenizer, "tokenizer");
    if (cfg->lora.init_from[0]) out_guard_add(&g, cfg->lora.init_from, "lora.init_from adapter directory");
    add_maybe_glob(&g, cfg->data.train, "data.train file");
    add_maybe_glob(&g, cfg->data.val, "data.val file");
    GtError e = {0};
    /* overwrite_output_dir removes an earlier run's files: then not even around or inside an input */
    int rc = out_guard_dir(&g, cfg->output_dir, "output_dir", true, cfg->overwrite_output_dir, &e);
    out_guard_free(&g);
    if (rc == 0) return 0;
    const char *msg = strncmp(e.msg, "output_dir: ", 12) == 0 ? e.msg + 12 : e.msg;
    char full[GT_ERR_MAX];
    snprintf(full, sizeof full, "%.900s%s", msg,
             cfg->overwrite_output_dir ? " (overwrite_output_dir: true would delete files there)" : "");
    return config_key_error(cfg, "output_dir", err, full);
}
