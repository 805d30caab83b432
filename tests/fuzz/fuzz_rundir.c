/* fuzz_rundir.c - libFuzzer target: an output_dir's gtrain_run.json (rundir.c's identity reader and
 * everything that trusts it). The input is written as the identity of a scratch output_dir that
 * holds a complete checkpoint-3, an incomplete checkpoint-5, a link checkpoint-7 and a link
 * .checkpoint-9.tmp into a victim directory beside it. The directory is opened, checked, asked
 * for `latest` and its differences from a run (rundir_diff, into a small buffer), then committed with a wipe (which removes what the identity lists). Must hold:
 * `latest` is only ever the complete checkpoint-3; every refusal has a code and a message; the
 * victim's file survives everything. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir.h"

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

static void rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char root[64], out[128], victim[128], p[256], q[256];
    snprintf(root, sizeof root, "/tmp/gtrain-fuzz-rundir-XXXXXX");
    if (!mkdtemp(root)) return 0;
    snprintf(out, sizeof out, "%s/out", root);
    snprintf(victim, sizeof victim, "%s/victim", root);
    mkdir(out, 0755);
    mkdir(victim, 0755);
    snprintf(p, sizeof p, "%s/trainer_state.json", victim);
    put(p, "victim", 6);
    snprintf(p, sizeof p, "%s/gtrain_run.json", out);
    put(p, data, size);
    snprintf(p, sizeof p, "%s/checkpoint-3", out);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/checkpoint-3/trainer_state.json", out);
    put(p, "{}", 2);
    snprintf(p, sizeof p, "%s/checkpoint-5", out);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/checkpoint-7", out);
    if (symlink(victim, p) != 0) abort();
    snprintf(p, sizeof p, "%s/.checkpoint-9.tmp", out);
    if (symlink(victim, p) != 0) abort();

    RunDir *rd = NULL;
    GtError err = {0};
    const char *identity = "{\"seed\":\"1\",\"train\":\"t.txt\"}";
    if (rundir_open(&rd, "run.yaml", out, true, &err) == 0) {
        if (rundir_check(rd, identity, true, false, &err) != 0 && (err.code == 0 || !err.msg[0])) abort();
        char latest[512];
        long step = -1;
        memset(&err, 0, sizeof err);
        if (rundir_latest(rd, latest, sizeof latest, &step, &err) == 0) {
            snprintf(q, sizeof q, "%s/checkpoint-3", out);
            if (step != 3 || strcmp(latest, q) != 0) abort();
        } else if (err.code == 0 || !err.msg[0]) {
            abort();
        }
        char diff[64]; /* small: a cut list stays NUL-terminated inside it */
        memset(diff, 'x', sizeof diff);
        int nd = rundir_diff(rd, identity, diff, sizeof diff);
        if (nd < 0 || memchr(diff, '\0', sizeof diff) == NULL) abort();
        (void)rundir_has_weights(rd);
        (void)rundir_has_run(rd);
        (void)rundir_count_after(rd, 1);
        (void)rundir_foreign_checkpoint(rd, 0, 10, 1);
        memset(&err, 0, sizeof err);
        if (rundir_commit(rd, identity, true, -1, &err) != 0 && (err.code == 0 || !err.msg[0])) abort();
    } else if (err.code == 0 || !err.msg[0]) {
        abort();
    }
    rundir_close(rd);
    snprintf(p, sizeof p, "%s/trainer_state.json", victim);
    struct stat sb;
    if (stat(p, &sb) != 0 || sb.st_size != 6) abort(); /* deleted or changed through a link */
    rm_rf(root);
    return 0;
}
