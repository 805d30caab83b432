/* rundir.h - an output_dir as gtrain owns it: one run at a time, and only gtrain's own files ever
 * replaced or deleted.
 *
 *   lock      output_dir/.gtrain.lock, held with flock(LOCK_EX) for the whole run (the kernel
 *             releases it when the process dies); a second run is refused naming the holder's pid.
 *   identity  output_dir/gtrain_run.json: {"run": {model, data, seed, effective batch},
 *             "checkpoints": [steps written by this run], "events": [TensorBoard file names]}.
 *             Only what it lists (and gtrain's fixed file names beside it) is gtrain's: rotation,
 *             cleanup, overwrite and resume's `latest` look at nothing else.
 *   removal   never follows a symbolic link: a link is unlinked, a directory is emptied of the
 *             file names gtrain writes (through its own descriptor) and removed only if nothing
 *             else is left in it.
 *
 * Two phases keep a refused run from changing anything: rundir_open inspects (and locks an
 * existing directory) without writing, the caller validates, and only rundir_commit writes. */
#ifndef GT_RUNDIR_H
#define GT_RUNDIR_H

#include "common.h"

typedef struct RunDir RunDir;

#define RUNDIR_IDENTITY "gtrain_run.json"
#define RUNDIR_LOCK ".gtrain.lock"

/* Inspect output_dir (it may not exist yet) and, when it exists and lock is set, take its lock.
 * Changes nothing (a lock file it had to create is removed again by rundir_close unless the run
 * commits). Ranks other than 0 open without the lock, to find `latest`. config_path names the
 * config in messages. */
int rundir_open(RunDir **out, const char *config_path, const char *output_dir, bool lock, GtError *err);

/* Is the run described by identity_json (an object, as text) allowed here? Refuses (code 2) a
 * directory holding files that are not gtrain's, another run, or (without resuming) an earlier
 * run of this one, unless overwrite. */
int rundir_check(const RunDir *rd, const char *identity_json, bool resuming, bool overwrite, GtError *err);

/* Does the directory hold a run (a gtrain_run.json), and its final weights (model.safetensors,
 * its shards' index, or adapter_model.safetensors at the top)? */
bool rundir_has_run(const RunDir *rd);
bool rundir_has_weights(const RunDir *rd);
/* The settings in which the directory's run differs from identity_json, "key: old -> new" joined
 * by "; " into out ("(absent)" for a missing one); returns how many. */
int rundir_diff(const RunDir *rd, const char *identity_json, char *out, size_t cap);

/* The complete checkpoint of this directory's run with the highest step; -1 (code 2) when none. */
int rundir_latest(const RunDir *rd, char *out, size_t cap, long *step, GtError *err);
/* How many of the run's checkpoints have a step above `step` (resuming from an earlier one). */
int rundir_count_after(const RunDir *rd, long step);
/* Does the directory hold this run (the identity recorded equals identity_json)? */
bool rundir_holds(const RunDir *rd, const char *identity_json);
/* The lowest step s in (lo, hi] with s == hi or s % every == 0 (the steps a run saves) whose
 * checkpoint-s is in the directory but not this run's (a save would replace it); -1 when none. */
long rundir_foreign_checkpoint(const RunDir *rd, long lo, long hi, long every);

/* Write: create the directory if needed (and lock it), then
 *   wipe:        remove the earlier run's files (its checkpoints, metrics, events, weights, report);
 *   keep_upto:   >= 0: remove the run's checkpoints above this step (resume from an earlier one);
 * remove partial .checkpoint-*.tmp directories, and record identity_json as the directory's run. */
int rundir_commit(RunDir *rd, const char *identity_json, bool wipe, long keep_upto, GtError *err);

/* Checkpoint bookkeeping after commit: record step (before its directory is renamed into place,
 * so a kill in between never leaves an unrecorded checkpoint); drop the oldest recorded ones
 * beyond keep (0 = keep all); record a TensorBoard event file name. */
int rundir_record_checkpoint(RunDir *rd, long step, GtError *err);
int rundir_rotate(RunDir *rd, int keep, GtError *err);
int rundir_record_events(RunDir *rd, const char *file_name, GtError *err);

/* Release the lock; a lock file created by a run that never committed is removed. NULL is fine. */
void rundir_close(RunDir *rd);

/* Remove path without following symbolic links: a link or a file is unlinked; a directory loses
 * the entries named in names[] (NULL-terminated; "*.tmp" variants too) and is removed when empty.
 * Returns 0, or -1 when something was left in place (foreign files). */
int rundir_remove_owned(const char *path, const char *const *names);

/* The file names inside a checkpoint directory (for rundir_remove_owned). */
extern const char *const RUNDIR_CHECKPOINT_FILES[];
/* a PiSSA run's initial adapter, under output_dir */
#define RUNDIR_PISSA_INIT "pissa_init"

#endif
