/* outguard.h - the one check every writer makes before it creates anything: an output is never an
 * input (compared by device and inode, after resolving symbolic links) and never a FIFO, device,
 * socket or directory where a file is written; plus the stale temporaries of a killed writer,
 * recognised by name and owner pid and removed.
 *
 * Used by tokenize --out (a file), merge --out (a new directory), and a training run's output_dir
 * (a directory gtrain owns: rundir.h), each before any work is done. */
#ifndef GT_OUTGUARD_H
#define GT_OUTGUARD_H

#include <sys/types.h>

#include "common.h"
#include "config.h"

typedef struct {
    dev_t dev;
    ino_t ino;
    bool dir;
    char path[GT_PATH_MAX]; /* as given, for messages */
    char what[48];          /* "input file", "tokenizer file", "model directory" */
} GuardInput;

typedef struct {
    GuardInput *in;
    int n;
} OutGuard;

/* Record an input (a file or a directory; links followed). A directory's own entries are recorded
 * too (a model directory's shards). A path that does not exist is skipped (its reader says so). */
void out_guard_add(OutGuard *g, const char *path, const char *what);
void out_guard_free(OutGuard *g);

/* The input a path is (links followed), or NULL. */
const GuardInput *out_guard_find(const OutGuard *g, const char *path);

/* An output file: absent (in an existing directory) or a regular file that is no input. key names
 * the option or config key in the message ("--out"). 0, or -1 with one line (code 2). */
int out_guard_file(const OutGuard *g, const char *path, const char *key, GtError *err);

/* An output directory: absent or a directory, not an input directory; with strict, neither inside
 * nor around an input directory (a directory whose files may be replaced: overwrite_output_dir).
 * follow: a symbolic link to a directory is taken as that directory (else refused). */
int out_guard_dir(const OutGuard *g, const char *path, const char *key, bool follow, bool strict, GtError *err);

/* A training run's output_dir (rundir.h), checked at load (plan and train): not the model's, the
 * init_from's, the tokenizer's or the adapter's directory, nor a data file; with
 * overwrite_output_dir, neither inside nor around such a directory. One line naming output_dir. */
int out_guard_run(const RunConfig *cfg, GtError *err);

/* Temporaries: "<prefix><pid>-<anything>" in dir. Those whose pid is not a live process are removed
 * (a directory: its files, then itself; never through a link), each with a line saying so.
 * Returns how many were removed. */
int out_guard_clean_stale(const char *dir, const char *prefix);

#endif
