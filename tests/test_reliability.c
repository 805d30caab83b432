/* test_reliability.c - gtrain as a process under faults: kill -9 at random moments then resume
 * (bit-exact against an unbroken run), SIGTERM/SIGINT, NaN weights, output_dir safety, a full
 * disk (RLIMIT_FSIZE), memory (memory_limit and RLIMIT_AS) and hostile files given on the
 * command line. Each test works in its own temp dir holding tests/fixtures/reliability/ (a
 * 2-layer, 32-wide byte-level model; a run of 30 steps that saves every step) and a generated
 * train.txt. $GTRAIN_BIN is the binary, $GTRAIN_ROOT the repo root.
 * GTRAIN_KILL_SEED=N replays the kill test with other random moments (default 20240917).
 * GTRAIN_TEST_CUDASIM=1 (set by make test-cudasim: $GTRAIN_BIN runs on the CUDA simulator, where a
 * step is ~10x slower) runs the two long process tests shorter (5 kills instead of 20, a 40-step
 * run for the signals instead of 120) and runs the device out of memory through the simulated
 * device's size instead of RLIMIT_AS. */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "run_util.h"
#include "safetensors.h"
#include "test_backend_select.h"

#if defined(__SANITIZE_ADDRESS__)
#define REL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REL_ASAN 1
#endif
#endif
#ifndef REL_ASAN
#define REL_ASAN 0
#endif

#define MAX_STEPS 30 /* the fixture's max_steps */


/* ---------------------------------------------------------------- kill -9 and resume */

Test(reliability, kill9_at_random_moments_then_resume_is_bit_exact, .timeout = 600) {
    Ws w;
    ws_init(&w);
    char ref[300];
    double t_full = reference_run(&w, ref, sizeof ref, NULL);
    uint64_t seed = 20240917;
    const char *env = getenv("GTRAIN_KILL_SEED");
    if (env && *env) seed = strtoull(env, NULL, 10);
    uint64_t rng = seed;
    int landed = 0, resumed = 0, found_none = 0, trials = 0, kills_in_resume = 0, at_end = 0;
    const int kills = test_on_cudasim() ? 5 : 20;
    while (landed < kills && trials < 6 * kills) {
        trials++;
        rm_tree(w.out);
        /* a fresh run, killed at a random moment of its whole duration (startup, steps, and the
         * checkpoint writes that take most of it); moments in the first 80 % of an unbroken run's
         * time, so that most land even when parallel tests slow the reference run down less than
         * this one */
        double delay = 0.8 * t_full * (double)(rng_next(&rng) % 1000) / 1000.0;
        if (trials == 1) delay = 0; /* at once: before any checkpoint, so "found none" is always exercised */
        Proc p;
        start(&p, &w, NULL, "kill", "overwrite_output_dir=true", NULL);
        if (trials % 3 != 1) {
            /* two kills in three once training has begun (step 5 logged): where startup (the CUDA
             * libraries alone load for ~0.3 s) takes most of a run, uniform moments would nearly
             * all land before the first checkpoint */
            wait_for_step(&p, &w, "kill");
            double left = t_full - (now_s() - p.t0);
            delay = left > 0 ? 0.5 * left * (double)(rng_next(&rng) % 1000) / 1000.0 : 0.0;
        }
        sleep_s(delay);
        kill(p.pid, SIGKILL);
        int st = wait_proc(&p);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
            expect_exit(&w, "kill", st, 0); /* finished before the kill: not counted */
            continue;
        }
        landed++;
        long latest;
        check_checkpoints(w.out, &latest);
        /* every third trial: the resumed run is killed too, then resumed again */
        bool kill_resume = latest >= 0 && latest < MAX_STEPS && trials % 3 == 0;
        if (kill_resume) {
            start(&p, &w, NULL, "resume1", "resume_from_checkpoint=latest", NULL);
            sleep_s(t_full * (double)(rng_next(&rng) % 1000) / 1000.0);
            kill(p.pid, SIGKILL);
            st = wait_proc(&p);
            if (WIFSIGNALED(st)) {
                cr_assert_eq(WTERMSIG(st), SIGKILL);
                kills_in_resume++;
                long l2;
                check_checkpoints(w.out, &l2);
                cr_assert_geq(l2, latest, "a kill during resume lost checkpoint-%ld (latest now %ld)", latest, l2);
            } else {
                expect_exit(&w, "resume1", st, 0);
            }
        }
        if (kill_resume) check_checkpoints(w.out, &latest); /* the first resume may have got further, or to the end */
        st = run(&w, NULL, "resume", "resume_from_checkpoint=latest", NULL);
        if (latest < 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2) {
            /* killed before the first checkpoint: a clear "found none", then a fresh start */
            expect_one_line(&w, "resume", st, 2, w.out, "found none");
            found_none++;
            st = run(&w, NULL, "fresh", "overwrite_output_dir=true", NULL);
            expect_exit(&w, "fresh", st, 0);
        } else if (latest == MAX_STEPS) {
            /* killed after the last checkpoint: nothing is left to train, a clear error naming
             * max_steps; the last checkpoint holds the unbroken run's weights */
            char ck[64];
            snprintf(ck, sizeof ck, "checkpoint-%d", MAX_STEPS);
            expect_one_line(&w, "resume", st, 2, "max_steps", ck);
            char a[512], b[512];
            snprintf(a, sizeof a, "%s/model.safetensors", ref);
            snprintf(b, sizeof b, "%s/%s/model.safetensors", w.out, ck);
            cr_assert(files_equal(a, b), "%s differs from the unbroken run's %s", b, a);
            at_end++;
            continue;
        } else {
            expect_exit(&w, "resume", st, 0);
            cr_assert_geq(latest, 0, "resume succeeded although no checkpoint was complete after the kill");
            char *o = read_log(&w, "resume", "out");
            cr_assert_not_null(strstr(o, "resumed from"), "resume did not say where it resumed from: %s", o);
            free(o);
            resumed++;
        }
        long last;
        check_checkpoints(w.out, &last);
        cr_assert_eq(last, MAX_STEPS);
        expect_same_run(ref, w.out, MAX_STEPS);
    }
    cr_log_info("kill -9: seed %llu, %d kills in %d trials (+%d during a resume), %d real resumes, %d before the "
                "first checkpoint, %d after the last; an unbroken run takes %.3f s",
                (unsigned long long)seed, landed, trials, kills_in_resume, resumed, found_none, at_end, t_full);
    cr_assert_geq(landed, kills, "only %d of %d kills landed before the run ended", landed, trials);
    cr_assert_gt(resumed, landed / 2, "only %d of %d kills were followed by a real resume", resumed, landed);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- signals */

Test(reliability, sigterm_checkpoints_exits_0_and_resume_is_bit_exact, .timeout = 300) {
    Ws w;
    ws_init(&w);
    char ref[300];
    const int steps = test_on_cudasim() ? 40 : 120;
    char ms[32];
    snprintf(ms, sizeof ms, "max_steps=%d", steps);
    reference_run(&w, ref, sizeof ref, ms, "save_steps=0", "logging_steps=1", NULL);
    const int sigs[] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; k++) {
        rm_tree(w.out);
        Proc p;
        start(&p, &w, NULL, "term", ms, "save_steps=0", "logging_steps=1", "overwrite_output_dir=true",
              NULL);
        wait_for_step(&p, &w, "term");
        sleep_s(0.02);
        kill(p.pid, sigs[k]);
        int st = wait_proc(&p);
        expect_exit(&w, "term", st, 0);
        char *o = read_log(&w, "term", "out");
        const char *prefix = k ? "received SIGINT: finishing at step " : "received SIGTERM: finishing at step ";
        const char *msg = strstr(o, prefix);
        cr_assert_not_null(msg, "no message about the signal: %s", o);
        long at = strtol(msg + strlen(prefix), NULL, 10);
        free(o);
        cr_assert(at >= 1 && at < steps, "stopped at step %ld of %d", at, steps);
        long latest;
        cr_assert_eq(check_checkpoints(w.out, &latest), 1, "expected exactly the signal's checkpoint (save_steps 0)");
        cr_assert_eq(latest, at, "checkpoint-%ld, the signal's step is %ld", latest, at);
        char mf[400];
        snprintf(mf, sizeof mf, "%s/model.safetensors", w.out);
        cr_assert(!exists(mf), "a stopped run must not write the final weights");
        st = run(&w, NULL, "resume", ms, "save_steps=0", "logging_steps=1", "resume_from_checkpoint=latest",
                 NULL);
        expect_exit(&w, "resume", st, 0);
        char a[400], b[400];
        snprintf(a, sizeof a, "%s/model.safetensors", ref);
        snprintf(b, sizeof b, "%s/model.safetensors", w.out);
        cr_assert(files_equal(a, b), "signal at step %ld then resume: weights differ from the unbroken run", at);
        cr_log_info("%s at step %ld: checkpoint, exit 0, resume bit-exact", k ? "SIGINT" : "SIGTERM", at);
    }
    ws_fini(&w);
}

/* bf16: a run resumed from a mid-run checkpoint ends with the unbroken run's weights, bit for bit
 * (the checkpoint holds the fp32 master weights; the bf16 compute copy is rebuilt from them). */
Test(reliability, bf16_resume_is_bit_exact, .timeout = 180) {
    Ws w;
    ws_init(&w);
    char ref[300];
    reference_run(&w, ref, sizeof ref, "precision=bf16", "max_steps=40", "save_steps=0", NULL);
    int st = run(&w, NULL, "full", "precision=bf16", "max_steps=40", "save_steps=20", "save_total_limit=0",
                 "overwrite_output_dir=true", NULL);
    expect_exit(&w, "full", st, 0);
    char c40[400], mf[400];
    snprintf(c40, sizeof c40, "%s/checkpoint-40", w.out);
    snprintf(mf, sizeof mf, "%s/model.safetensors", w.out);
    rm_tree(c40);
    cr_assert_eq(unlink(mf), 0, "%s: %s", mf, strerror(errno));
    st = run(&w, NULL, "resume", "precision=bf16", "max_steps=40", "save_steps=20", "save_total_limit=0",
             "resume_from_checkpoint=latest", NULL);
    expect_exit(&w, "resume", st, 0);
    char a[400];
    snprintf(a, sizeof a, "%s/model.safetensors", ref);
    cr_assert(files_equal(a, mf), "bf16: resumed from checkpoint-20, the weights differ from the unbroken run");
    ws_fini(&w);
}

/* A Mistral-style model (GQA, a sliding window of 16 in sequences of 32) saved in shards of 100 KB:
 * a run resumed from a mid-run sharded checkpoint ends with the unbroken run's weights, bit for
 * bit, shard by shard. */
Test(reliability, llama_sharded_resume_is_bit_exact, .timeout = 180) {
    Ws w;
    ws_init(&w);
    char model[400], ref[300];
    snprintf(model, sizeof model, "model=%s/tests/fixtures/hf_configs/tiny-mistral.json", getenv("GTRAIN_ROOT"));
    reference_run(&w, ref, sizeof ref, model, "max_steps=12", "save_steps=0", "save_max_shard_size=100KB", NULL);
    int st = run(&w, NULL, "full", model, "max_steps=12", "save_steps=6", "save_total_limit=0",
                 "save_max_shard_size=100KB", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "full", st, 0);
    char c12[400], cmd[1200];
    snprintf(c12, sizeof c12, "%s/checkpoint-12", w.out);
    rm_tree(c12);
    snprintf(cmd, sizeof cmd, "rm -f '%s'/model*.safetensors*", w.out);
    cr_assert_eq(system(cmd), 0);
    st = run(&w, NULL, "resume", model, "max_steps=12", "save_steps=6", "save_total_limit=0", "save_max_shard_size=100KB",
             "resume_from_checkpoint=latest", NULL);
    expect_exit(&w, "resume", st, 0);
    char a[400], b[400];
    int shards = 0;
    /* the unbroken run's files, shard by shard (and the index) */
    snprintf(a, sizeof a, "%s/model.safetensors.index.json", ref);
    snprintf(b, sizeof b, "%s/model.safetensors.index.json", w.out);
    cr_assert(files_equal(a, b), "the resumed run's index differs from the unbroken run's");
    for (int n = 2; n <= 99 && !shards; n++) {
        snprintf(a, sizeof a, "%s/model-%05d-of-%05d.safetensors", ref, 1, n);
        if (access(a, F_OK) == 0) shards = n;
    }
    cr_assert_gt(shards, 1, "the run did not shard its weights (save_max_shard_size=100KB)");
    for (int k = 1; k <= shards; k++) {
        snprintf(a, sizeof a, "%s/model-%05d-of-%05d.safetensors", ref, k, shards);
        snprintf(b, sizeof b, "%s/model-%05d-of-%05d.safetensors", w.out, k, shards);
        cr_assert(files_equal(a, b), "shard %d of %d: resumed from checkpoint-6, the weights differ from the unbroken run",
                  k, shards);
    }
    /* rotation removes sharded checkpoints whole, and overwrite_output_dir the sharded weights */
    st = run(&w, NULL, "rotate", model, "max_steps=12", "save_steps=3", "save_total_limit=1", "save_max_shard_size=100KB",
             "overwrite_output_dir=true", NULL);
    expect_exit(&w, "rotate", st, 0);
    char *e = read_log(&w, "rotate", "err");
    cr_assert_null(strstr(e, "left in place"), "rotation left sharded checkpoints behind: %s", e);
    free(e);
    long latest = -1;
    cr_assert_eq(check_checkpoints(w.out, &latest), 1, "save_total_limit=1 kept more than one checkpoint");
    ws_fini(&w);
}

/* A second signal once the first has been taken (the run printed "received ...") ends the
 * process at once, i.e. during the final checkpoint write. When the write finished before the
 * second signal arrived the attempt proves nothing and is repeated. Whatever is named
 * checkpoint-N afterwards is whole, and the run resumes from it. */
Test(reliability, second_signal_exits_at_once, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int conclusive = 0, attempts = 0;
    while (conclusive < 2 && attempts < 12) {
        attempts++;
        rm_tree(w.out);
        Proc p;
        start(&p, &w, NULL, "twice", "max_steps=100", "save_steps=0", "logging_steps=1", "overwrite_output_dir=true",
              NULL);
        wait_for_step(&p, &w, "twice");
        kill(p.pid, SIGINT);
        for (int i = 0; i < 3000; i++) {
            char *o = read_log(&w, "twice", "out");
            bool taken = strstr(o, "received SIGINT") != NULL;
            free(o);
            if (taken) break;
            sleep_s(0.0005);
        }
        kill(p.pid, SIGTERM);
        int st = wait_proc(&p);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue; /* the checkpoint was done first */
        char e[2048];
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "second signal: expected death by SIGTERM; status %d, stderr %s",
                  st, log_text(&w, "twice", "err", e, sizeof e));
        conclusive++;
        long latest;
        check_checkpoints(w.out, &latest); /* whatever is named checkpoint-N is whole */
        if (latest >= 0) {
            st = run(&w, NULL, "resume", "max_steps=100", "save_steps=0", "resume_from_checkpoint=latest", NULL);
            expect_exit(&w, "resume", st, 0);
        }
    }
    cr_log_info("second signal: %d of %d attempts caught the final checkpoint write", conclusive, attempts);
    cr_assert_geq(conclusive, 1, "no attempt sent the second signal before the checkpoint was written");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- NaN */

/* The fixture's weights after one step, with transformer.ln_f.weight scaled past float's range (3e38
 * each: finite, so loaded, but the forward overflows and every loss is NaN), into dir/nan.safetensors
 * (a NaN itself is refused at load: test_silent.c) */
static void write_nan_weights(const Ws *w, char *path, size_t cap) {
    char od[400], src[400];
    snprintf(od, sizeof od, "output_dir=%s/w1", w->dir);
    int st = run(w, NULL, "w1", "max_steps=1", "save_steps=0", od, NULL);
    expect_exit(w, "w1", st, 0);
    snprintf(src, sizeof src, "%s/w1/model.safetensors", w->dir);
    SafeTensors *in = NULL;
    GtError err = {0};
    cr_assert_eq(safetensors_open(&in, src, &err), 0, "%s", err.msg);
    int n = safetensors_count(in);
    StTensorOut *ts = calloc((size_t)n, sizeof *ts);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    cr_assert(ts && bufs);
    bool poisoned = false;
    for (int i = 0; i < n; i++) {
        int64_t numel = safetensors_numel(in, i);
        bufs[i] = malloc((size_t)(numel ? numel : 1) * sizeof(float));
        cr_assert_not_null(bufs[i]);
        cr_assert_eq(safetensors_read_f32(in, i, bufs[i], (size_t)numel, &err), 0, "%s", err.msg);
        ts[i].name = safetensors_name(in, i);
        ts[i].dtype = ST_F32;
        safetensors_shape(in, i, ts[i].shape, &ts[i].ndim);
        ts[i].data = bufs[i];
        if (strcmp(ts[i].name, "transformer.ln_f.weight") == 0) {
            for (int64_t k = 0; k < numel; k++) bufs[i][k] = 3e38f;
            poisoned = true;
        }
    }
    cr_assert(poisoned, "no transformer.ln_f.weight in %s", src);
    snprintf(path, cap, "%s/nan.safetensors", w->dir);
    cr_assert_eq(safetensors_write(path, ts, n, NULL, 0, &err), 0, "%s", err.msg);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    safetensors_close(in);
}

Test(reliability, nan_weights_skip_then_stop, .timeout = 120) {
    Ws w;
    ws_init(&w);
    char nanw[400], init[450];
    write_nan_weights(&w, nanw, sizeof nanw);
    snprintf(init, sizeof init, "init_from=%s", nanw);

    /* skip: every step skipped and warned, stop after max_skipped_steps in a row, exit 1 */
    int st = run(&w, NULL, "skip", init, "nan_policy=skip", "max_skipped_steps=3", NULL);
    expect_exit(&w, "skip", st, 1);
    char *e = read_log(&w, "skip", "err");
    cr_assert_eq(count_substr(e, "step skipped"), 3, "expected 3 skipped-step warnings: %s", e);
    cr_assert_not_null(strstr(e, "max_skipped_steps"), "the final message must name max_skipped_steps: %s", e);
    cr_assert_not_null(strstr(e, "gtrain: "), "no final error line: %s", e);
    free(e);
    char mpath[400];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", w.out);
    char *m = slurp(mpath, NULL);
    cr_assert_not_null(m, "no metrics.jsonl");
    cr_assert_eq(count_substr(m, "\"skipped\":true") + count_substr(m, "\"skipped\": true"), 3,
                 "metrics.jsonl must record the 3 skipped steps: %s", m);
    free(m);
    long latest;
    /* checkpoints of skipped steps hold the unchanged weights, which is allowed; all must be whole */
    check_checkpoints(w.out, &latest);

    /* stop: exit 1 at the first */
    st = run(&w, NULL, "stop", init, "nan_policy=stop", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "stop", st, 1);
    e = read_log(&w, "stop", "err");
    cr_assert_eq(count_substr(e, "step skipped"), 1, "nan_policy stop: expected one skipped step: %s", e);
    cr_assert_not_null(strstr(e, "nan_policy"), "the message must name nan_policy: %s", e);
    free(e);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- output_dir safety */

Test(reliability, output_dir_holding_another_run_is_refused, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "first", "max_steps=2", NULL);
    expect_exit(&w, "first", st, 0);
    char mf[400];
    snprintf(mf, sizeof mf, "%s/model.safetensors", w.out);
    char *before = slurp(mf, NULL);
    cr_assert_not_null(before);

    st = run(&w, NULL, "again", "max_steps=2", NULL);
    expect_one_line(&w, "again", st, 2, w.out, "nothing to train"); /* auto: this run, finished */
    st = run(&w, NULL, "seed", "max_steps=2", "seed=12", NULL);
    expect_one_line(&w, "seed", st, 2, w.out, "different");
    st = run(&w, NULL, "seedres", "max_steps=4", "seed=12", "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "seedres", st, 2, w.out, "different");

    char m2[400], ms[450];
    snprintf(m2, sizeof m2, "%s/model2.json", w.dir);
    const char *wide = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 48, \"vocab_size\": 256,"
                       " \"n_positions\": 32}\n";
    put_file(m2, wide, strlen(wide));
    snprintf(ms, sizeof ms, "model=%s", m2);
    st = run(&w, NULL, "model", "max_steps=2", ms, NULL);
    expect_one_line(&w, "model", st, 2, w.out, "different");
    st = run(&w, NULL, "modelres", "max_steps=4", ms, "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "modelres", st, 2, w.out, "different");

    char *after = slurp(mf, NULL);
    cr_assert_not_null(after);
    cr_assert_str_eq(after, before, "a refused run changed %s", mf); /* binary, but the header is text */
    long latest;
    cr_assert_eq(check_checkpoints(w.out, &latest), 2);
    cr_assert_eq(latest, 2);
    free(before);
    free(after);

    st = run(&w, NULL, "over", "max_steps=2", "seed=12", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "over", st, 0);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- disk full */

Test(reliability, disk_full_keeps_the_previous_checkpoint, .timeout = 120) {
    Ws w;
    ws_init(&w);
    char ref[300];
    reference_run(&w, ref, sizeof ref, "max_steps=8", "save_steps=2", "save_total_limit=0", NULL);
    int st = run(&w, NULL, "a", "max_steps=4", "save_steps=2", "save_total_limit=0", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "a", st, 0);
    /* model.safetensors (~140 KB) fits, optimizer.safetensors (~280 KB) does not */
    Limits lim = {.fsize = 200 * 1024};
    st = run(&w, &lim, "full", "max_steps=8", "save_steps=2", "save_total_limit=0", "resume_from_checkpoint=latest",
             NULL);
    expect_exit(&w, "full", st, 1);
    char *e = read_log(&w, "full", "err");
    cr_assert_not_null(strstr(e, "optimizer.safetensors"), "the error must name the file being written: %s", e);
    cr_assert(strstr(e, "too large") || strstr(e, "File too large") || strstr(e, "No space"),
              "the error must say why (EFBIG): %s", e);
    cr_assert_eq(count_lines(e), 1, "one line expected: %s", e);
    free(e);
    long latest;
    cr_assert_eq(check_checkpoints(w.out, &latest), 2);
    cr_assert_eq(latest, 4, "the last complete checkpoint must survive (found checkpoint-%ld)", latest);
    DIR *d = opendir(w.out);
    struct dirent *de;
    while ((de = readdir(d))) cr_assert(strstr(de->d_name, ".tmp") == NULL, "left behind: %s/%s", w.out, de->d_name);
    closedir(d);
    /* and it resumes to the same end as an unbroken run */
    st = run(&w, NULL, "after", "max_steps=8", "save_steps=2", "save_total_limit=0", "resume_from_checkpoint=latest",
             NULL);
    expect_exit(&w, "after", st, 0);
    expect_same_run(ref, w.out, 8);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- memory */

Test(reliability, memory_limit_below_the_parameters, .timeout = 60) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "tiny", "memory_limit=64KiB", NULL);
    expect_one_line(&w, "tiny", st, 2, "memory_limit", "run.yaml");
    char mf[400];
    snprintf(mf, sizeof mf, "%s/checkpoint-1", w.out);
    cr_assert(!exists(mf), "a refused run must not train");
    ws_fini(&w);
}

Test(reliability, allocation_failure_at_runtime, .timeout = 60) {
    bool sim = test_on_cudasim();
    if (!sim && strcmp(test_device_name(), "cuda") == 0) {
        cr_log_info("GTRAIN_TEST_DEVICE=cuda on a GPU: RLIMIT_AS bounds host memory and the weights live on the "
                    "device; the device running out is tested on the CUDA simulator (GTRAIN_TEST_CUDASIM)");
        return;
    }
    if (REL_ASAN) {
        cr_log_info("RLIMIT_AS and AddressSanitizer's shadow memory do not mix: skipped under ASan");
        return;
    }
    Ws w;
    ws_init(&w);
    /* ~50M parameters: ~800 MB of params, grads and AdamW state. The plan (told 64 GiB) passes
     * but the allocation cannot: on the CPU the address space is capped at 400 MB above what the
     * libraries take; on the CUDA simulator the simulated device has 400 MiB. */
    char m2[400], ms[450];
    snprintf(m2, sizeof m2, "%s/big.json", w.dir);
    const char *big = "{\"model_type\": \"gpt2\", \"n_layer\": 4, \"n_head\": 8, \"n_embd\": 1024, \"vocab_size\": 256,"
                      " \"n_positions\": 32}\n";
    put_file(m2, big, strlen(big));
    snprintf(ms, sizeof ms, "model=%s", m2);
    Limits lim = {0};
    if (sim) {
        cr_assert_eq(setenv("GTCSIM_DEVICE_MIB", "400", 1), 0);
    } else {
        /* the cap is relative to this process's own address space, which maps the same
         * libraries as gtrain */
        unsigned long long vm_kb = 0;
        FILE *status = fopen("/proc/self/status", "r");
        char sline[256];
        while (status && fgets(sline, sizeof sline, status))
            if (sscanf(sline, "VmSize: %llu kB", &vm_kb) == 1) break;
        if (status) fclose(status);
        cr_assert_gt(vm_kb, 0, "no VmSize in /proc/self/status");
        lim.as = (vm_kb << 10) + (400ull << 20);
    }
    int st = run(&w, &lim, "oom", ms, "memory_limit=64GiB", "max_steps=2", sim ? "device=cuda" : "device=cpu", NULL);
    expect_exit(&w, "oom", st, 1);
    char *e = read_log(&w, "oom", "err");
    cr_assert_eq(count_lines(e), 1, "one line expected: %s", e);
    cr_assert(strstr(e, "memory") != NULL, "the message must say memory ran out: %s", e);
    free(e);
    long latest;
    cr_assert_eq(check_checkpoints(w.out, &latest), 0);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- hostile files on the command line */

typedef struct {
    const char *name;
    const void *data;
    size_t len;
} Blob;

static void expect_hostile(const Ws *w, const char *tag, const char *file, const char *first, ...) {
    COLLECT_SETS(first, sets, n);
    Proc p;
    start_v(&p, w, w->cfg, NULL, tag, sets, n);
    int st = wait_proc(&p);
    expect_one_line(w, tag, st, 2, file, NULL);
}

Test(reliability, hostile_files_through_the_cli, .timeout = 180) {
    Ws w;
    ws_init(&w);
    /* a good run to take a model.safetensors and a checkpoint from */
    int st = run(&w, NULL, "good", "max_steps=2", "save_total_limit=0", NULL);
    expect_exit(&w, "good", st, 0);
    char good[400];
    snprintf(good, sizeof good, "%s/model.safetensors", w.out);
    size_t glen;
    char *g = slurp(good, &glen);
    cr_assert_not_null(g);

    /* init_from: broken safetensors */
    char garbage[4096];
    uint32_t x = 7;
    for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (char)((x = x * 1103515245u + 12345u) >> 16);
    unsigned char oversized[64] = {0};
    oversized[7] = 0x40; /* header length 2^62 */
    memcpy(oversized + 8, "{\"a\":1}", 7);
    unsigned char beyond[64] = {0};
    beyond[0] = 0xe8, beyond[1] = 0x03; /* 1000 bytes of header in a 64-byte file */
    memcpy(beyond + 8, "{}", 2);
    char *badoff = malloc(glen);
    memcpy(badoff, g, glen);
    char *dof = strstr(badoff + 8, "\"data_offsets\":[");
    cr_assert_not_null(dof, "no data_offsets in %s", good);
    dof[16] = '9'; /* first offset of the first tensor made huge-ish or out of order */
    Blob blobs[] = {
        {"truncated.safetensors", g, glen / 2},
        {"garbage.safetensors", garbage, sizeof garbage},
        {"oversized.safetensors", oversized, sizeof oversized},
        {"beyond.safetensors", beyond, sizeof beyond},
        {"empty.safetensors", "", 0},
        {"header_only.safetensors", g, 8},
        {"bad_offsets.safetensors", badoff, glen},
    };
    for (size_t i = 0; i < sizeof blobs / sizeof blobs[0]; i++) {
        char p[400], set[450];
        snprintf(p, sizeof p, "%s/%s", w.dir, blobs[i].name);
        put_file(p, blobs[i].data, blobs[i].len);
        snprintf(set, sizeof set, "init_from=%s", p);
        expect_hostile(&w, blobs[i].name, p, set, "overwrite_output_dir=true", "max_steps=1", NULL);
    }
    free(badoff);
    /* a model.safetensors of a different model: shape mismatch */
    {
        char od[400], set[450], other[400];
        snprintf(other, sizeof other, "%s/model3.json", w.dir);
        const char *m3 = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256,"
                         " \"n_positions\": 32}\n";
        put_file(other, m3, strlen(m3));
        char ms[450];
        snprintf(ms, sizeof ms, "model=%s", other);
        snprintf(od, sizeof od, "output_dir=%s/o3", w.dir);
        st = run(&w, NULL, "o3", ms, od, "max_steps=1", "save_steps=0", NULL);
        expect_exit(&w, "o3", st, 0);
        snprintf(other, sizeof other, "%s/o3/model.safetensors", w.dir);
        snprintf(set, sizeof set, "init_from=%s", other);
        expect_hostile(&w, "shape", other, set, "overwrite_output_dir=true", "max_steps=1", NULL);
    }
    free(g);

    /* resume_from_checkpoint: a checkpoint dir whose trainer_state.json is hostile */
    char ck[400];
    snprintf(ck, sizeof ck, "%s/checkpoint-2", w.out);
    const char *states[] = {
        "{\"global_step\": \"2\", \"max_steps\": 2, \"epoch\": 0.1, \"seed\": \"11\", \"effective_batch\": 4, "
        "\"world_size\": 1, \"per_device_train_batch_size\": 4, \"gradient_accumulation_steps\": 1, "
        "\"skipped_steps\": 0, \"adam_step\": 2}",
        "{\"global_step\": 1e300, \"max_steps\": 1e300, \"epoch\": 0.1, \"seed\": \"11\", \"effective_batch\": 4, "
        "\"world_size\": 1, \"per_device_train_batch_size\": 4, \"gradient_accumulation_steps\": 1, "
        "\"skipped_steps\": 0, \"adam_step\": 2}",
        "{\"global_step\": 2, \"max_steps\": 2, \"epoch\": 0.1, \"seed\": \"99999999999999999999999\", "
        "\"effective_batch\": 4, \"world_size\": 1, \"per_device_train_batch_size\": 4, "
        "\"gradient_accumulation_steps\": 1, \"skipped_steps\": 0, \"adam_step\": 2}",
        "{\"global_step\": 2, \"max_steps\": 2, \"epoch\": 0.1, \"seed\": \"11\", \"effective_batch\": -4, "
        "\"world_size\": 1, \"per_device_train_batch_size\": 4, \"gradient_accumulation_steps\": 1, "
        "\"skipped_steps\": 0, \"adam_step\": 2}",
        "{\"global_step\": 2}",
        "[2, 2, 0.1]",
        "{\"global_step\": 2, \"max_steps\": 2,",
        "",
        "\x01\x02\x03\xff\xfe",
    };
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        char dir[400], f[450], set[450], tag[32];
        snprintf(dir, sizeof dir, "%s/state%zu", w.dir, i);
        mkdir(dir, 0755);
        const char *keep[] = {"model.safetensors", "optimizer.safetensors", "config.json"};
        for (int k = 0; k < 3; k++) {
            char a[500], b[500];
            snprintf(a, sizeof a, "%s/%s", ck, keep[k]);
            snprintf(b, sizeof b, "%s/%s", dir, keep[k]);
            copy_file(a, b);
        }
        snprintf(f, sizeof f, "%s/trainer_state.json", dir);
        put_file(f, states[i], strlen(states[i]));
        snprintf(set, sizeof set, "resume_from_checkpoint=%s", dir);
        snprintf(tag, sizeof tag, "state%zu", i);
        expect_hostile(&w, tag, f, set, "max_steps=4", NULL);
    }
    /* a checkpoint dir with a truncated optimizer.safetensors */
    {
        char dir[400], a[450], set[450];
        snprintf(dir, sizeof dir, "%s/state0", w.dir);
        snprintf(a, sizeof a, "%s/trainer_state.json", dir);
        char src[450];
        snprintf(src, sizeof src, "%s/trainer_state.json", ck);
        copy_file(src, a);
        snprintf(a, sizeof a, "%s/optimizer.safetensors", dir);
        size_t n;
        char *o = slurp(a, &n);
        put_file(a, o, n - 100);
        free(o);
        snprintf(set, sizeof set, "resume_from_checkpoint=%s", dir);
        expect_hostile(&w, "optim", a, set, "max_steps=4", NULL);
    }

    /* data.train: token shards with bad headers */
    int32_t hdr[256 + 64];
    memset(hdr, 0, sizeof hdr);
    struct {
        const char *name;
        int32_t magic, version, count;
        size_t bytes;
    } shards[] = {
        {"magic.bin", 12345, 1, 128, 1024 + 256},
        {"version.bin", 20240520, 9, 128, 1024 + 256},
        {"count.bin", 20240520, 1, 1 << 30, 1024 + 256},
        {"negative.bin", 20240520, 1, -128, 1024 + 256},
        {"short.bin", 20240520, 1, 128, 1000},
    };
    for (size_t i = 0; i < sizeof shards / sizeof shards[0]; i++) {
        hdr[0] = shards[i].magic, hdr[1] = shards[i].version, hdr[2] = shards[i].count;
        char p[400], set[450];
        snprintf(p, sizeof p, "%s/%s", w.dir, shards[i].name);
        put_file(p, hdr, shards[i].bytes);
        snprintf(set, sizeof set, "data.train=%s", p);
        expect_hostile(&w, shards[i].name, p, set, "data.format=tokens", "overwrite_output_dir=true", NULL);
    }
    ws_fini(&w);
}
