/* test_safety.c - gtrain never loses a user's data: symbolic-link traps around a victim directory
 * (its contents compared after), output_dirs holding another trainer's files, two runs started on
 * one directory at once, refused runs compared byte for byte with the directory before them,
 * overwrite and resume-from-an-earlier-checkpoint transitions, SIGTERM while loading and while
 * sampling, a file-size limit with SIGXFSZ at its default, steps without a target token, corrupt
 * AdamW state and a metrics file that hits a size limit. Each test runs the binary on the
 * reliability fixture (tests/run_util.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "test_backend_select.h"
#include "safetensors.h"

#define FIXTURE_STEPS 30 /* the fixture's max_steps */

static void path_in(char *buf, size_t cap, const char *dir, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

/* a victim directory beside the run: files that must survive every trap */
static void make_victim(const Ws *w, char *victim, size_t cap) {
    path_in(victim, cap, w->dir, "victim");
    cr_assert_eq(mkdir(victim, 0755), 0);
    const char *names[] = {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json",
                           "notes.txt", "metrics.jsonl"};
    for (int i = 0; i < 6; i++) {
        char p[600];
        path_in(p, sizeof p, victim, names[i]);
        put_file(p, names[i], strlen(names[i]));
    }
}

static void plant_link(const char *target, const char *out, const char *name) {
    char p[600];
    path_in(p, sizeof p, out, name);
    struct stat sb;
    if (lstat(p, &sb) == 0) rm_tree(p);
    cr_assert_eq(symlink(target, p), 0, "symlink %s: %s", p, strerror(errno));
}

static int count_train_records(const char *out, long *max_step) {
    char p[600];
    path_in(p, sizeof p, out, "metrics.jsonl");
    char *m = slurp(p, NULL);
    int n = 0;
    *max_step = -1;
    for (char *line = m ? strtok(m, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "a metrics line that is not JSON: %s", line);
        const cJSON *t = cJSON_GetObjectItem(j, "type"), *s = cJSON_GetObjectItem(j, "step");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "train")) {
            n++;
            if ((long)s->valuedouble > *max_step) *max_step = (long)s->valuedouble;
        }
        cJSON_Delete(j);
    }
    free(m);
    return n;
}

/* ---------------------------------------------------------------- 1. links are never followed */

Test(safety, symlink_traps_never_delete_through_a_link, .timeout = 180) {
    Ws w;
    ws_init(&w);
    char victim[300];
    make_victim(&w, victim, sizeof victim);
    char *before = tree_snapshot(victim);
    int st = run(&w, NULL, "first", "max_steps=4", "save_total_limit=2", NULL);
    expect_exit(&w, "first", st, 0);
    char vf[400];
    path_in(vf, sizeof vf, victim, "notes.txt");
    /* leftovers a killed run could have had, each a link into the victim, one dangling */
    plant_link(victim, w.out, ".checkpoint-7.tmp");
    plant_link(victim, w.out, ".checkpoint-6.old.tmp");
    plant_link("/nonexistent/gtrain-dangling", w.out, ".checkpoint-5.tmp");
    plant_link(victim, w.out, "checkpoint-3"); /* one of the run's: rotated away below */
    plant_link(vf, w.out, "metrics.jsonl.tmp");
    plant_link(vf, w.out, "gtrain_run.json.tmp");
    plant_link(vf, w.out, "config.json.tmp");
    plant_link(vf, w.out, "model.safetensors.tmp");
    plant_link(vf, w.out, "report.svg.tmp");
    /* and FIFOs at names the run writes: a write must never block on one */
    const char *fifos[] = {"metrics.jsonl", "model.safetensors.tmp", "report.svg"};
    for (int i = 0; i < 3; i++) {
        char f[600];
        path_in(f, sizeof f, w.out, fifos[i]);
        unlink(f);
        cr_assert_eq(mkfifo(f, 0644), 0, "mkfifo %s: %s", f, strerror(errno));
    }
    st = run(&w, NULL, "resume", "max_steps=8", "save_total_limit=2", "resume_from_checkpoint=latest", NULL);
    expect_exit(&w, "resume", st, 0);
    char *after = tree_snapshot(victim);
    cr_assert_str_eq(after, before, "the victim directory changed through a link");
    free(after);
    /* overwrite with checkpoints replaced by links: the links go, the victim stays */
    plant_link(victim, w.out, "checkpoint-8");
    plant_link(vf, w.out, "metrics.jsonl");
    st = run(&w, NULL, "over", "max_steps=3", "seed=5", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "over", st, 0);
    after = tree_snapshot(victim);
    cr_assert_str_eq(after, before, "overwrite_output_dir changed the victim directory through a link");
    long latest;
    cr_assert_eq(check_checkpoints(w.out, &latest), 3, "save_total_limit 3 of the fixture");
    free(after);
    free(before);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 2. only gtrain's files */

Test(safety, foreign_files_refused_and_left_alone, .timeout = 180) {
    Ws w;
    ws_init(&w);
    char p[600];
    cr_assert_eq(mkdir(w.out, 0755), 0);
    path_in(p, sizeof p, w.out, "checkpoint-100");
    cr_assert_eq(mkdir(p, 0755), 0);
    path_in(p, sizeof p, w.out, "checkpoint-100/pytorch_model.bin");
    put_file(p, "another trainer", 15);
    path_in(p, sizeof p, w.out, "checkpoint-100/trainer_state.json");
    put_file(p, "{}", 2);
    char *before = tree_snapshot(w.out);
    int st = run(&w, NULL, "plain", "max_steps=3", NULL);
    expect_one_line(&w, "plain", st, 2, w.out, "did not write");
    st = run(&w, NULL, "latest", "max_steps=3", "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "latest", st, 2, w.out, "did not write");
    char *after = tree_snapshot(w.out);
    cr_assert_str_eq(after, before, "a refused run changed the directory");
    free(after);
    /* overwrite: trains there, the other trainer's checkpoint untouched and never resumed from */
    st = run(&w, NULL, "over", "max_steps=3", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "over", st, 0);
    path_in(p, sizeof p, w.out, "checkpoint-100/pytorch_model.bin");
    char *b = slurp(p, NULL);
    cr_assert(b && !strcmp(b, "another trainer"), "overwrite_output_dir touched another trainer's file");
    free(b);
    st = run(&w, NULL, "res", "max_steps=5", "overwrite_output_dir=true", "resume_from_checkpoint=latest", NULL);
    expect_exit(&w, "res", st, 0);
    char *o = read_log(&w, "res", "out");
    cr_assert_not_null(strstr(o, "checkpoint-3 at step 3"), "latest must be the run's own checkpoint-3: %s", o);
    free(o);
    /* a foreign checkpoint at a step this run would save: refused before anything changes */
    rm_tree(w.out);
    cr_assert_eq(mkdir(w.out, 0755), 0);
    path_in(p, sizeof p, w.out, "checkpoint-2");
    cr_assert_eq(mkdir(p, 0755), 0);
    path_in(p, sizeof p, w.out, "checkpoint-2/weights.pt");
    put_file(p, "x", 1);
    free(before);
    before = tree_snapshot(w.out);
    st = run(&w, NULL, "clash", "max_steps=3", "overwrite_output_dir=true", NULL);
    expect_one_line(&w, "clash", st, 2, "checkpoint-2", "not this run's");
    after = tree_snapshot(w.out);
    cr_assert_str_eq(after, before, "a refused run changed the directory");
    free(after);
    free(before);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 3. one run per directory */

Test(safety, a_held_lock_refuses_a_second_run_naming_the_pid, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "first", "max_steps=2", NULL);
    expect_exit(&w, "first", st, 0);
    char lock[600];
    path_in(lock, sizeof lock, w.out, ".gtrain.lock");
    int fd = open(lock, O_RDWR);
    cr_assert_geq(fd, 0, "no lock file %s", lock);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    char *before = tree_snapshot(w.out);
    st = run(&w, NULL, "second", "max_steps=4", "resume_from_checkpoint=latest", NULL);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    expect_one_line(&w, "second", st, 2, w.out, pid);
    char *after = tree_snapshot(w.out);
    cr_assert_str_eq(after, before, "a run refused by the lock changed the directory");
    close(fd);
    st = run(&w, NULL, "third", "max_steps=4", "resume_from_checkpoint=latest", NULL);
    expect_exit(&w, "third", st, 0);
    free(before), free(after);
    ws_fini(&w);
}

Test(safety, two_runs_started_at_once_one_wins, .timeout = 300) {
    Ws w;
    ws_init(&w);
    int in_use = 0;
    const int rounds = test_on_cudasim() ? 3 : 8; /* a run takes ~4x longer on the CUDA simulator */
    for (int round = 0; round < rounds; round++) {
        rm_tree(w.out);
        Proc a, b;
        start(&a, &w, NULL, "a", "max_steps=20", NULL);
        start(&b, &w, NULL, "b", "max_steps=20", NULL);
        int sa = wait_proc(&a), sb = wait_proc(&b);
        cr_assert(WIFEXITED(sa) && WIFEXITED(sb), "round %d: a run was killed by a signal", round);
        int ea = WEXITSTATUS(sa), eb = WEXITSTATUS(sb);
        cr_assert((ea == 0 && eb == 2) || (ea == 2 && eb == 0), "round %d: exits %d and %d, expected one 0 and one 2",
                  round, ea, eb);
        const char *loser = ea == 2 ? "a" : "b";
        expect_one_line(&w, loser, ea == 2 ? sa : sb, 2, w.out, NULL);
        char *e = read_log(&w, loser, "err");
        char pid[32];
        snprintf(pid, sizeof pid, "pid %ld", (long)(ea == 2 ? b.pid : a.pid));
        if (strstr(e, "in use by another gtrain run")) {
            cr_assert_not_null(strstr(e, pid), "round %d: the holder's pid (%s) is not named: %s", round, pid, e);
            in_use++;
        }
        free(e);
        long latest;
        check_checkpoints(w.out, &latest);
        cr_assert_eq(latest, 20, "round %d: the winner's run is not whole", round);
        long max_step;
        cr_assert_eq(count_train_records(w.out, &max_step), 5, "round %d: metrics of one run expected", round);
    }
    cr_assert_gt(in_use, 0, "no round saw the lock refuse the second run");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 3, 4. refusals, transitions */

Test(safety, refused_runs_leave_the_directory_byte_for_byte, .timeout = 240) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "first", "max_steps=6", "save_total_limit=0", NULL);
    expect_exit(&w, "first", st, 0);
    char *before = tree_snapshot(w.out);
    char m2[400], ms[450], k3[450];
    path_in(m2, sizeof m2, w.dir, "wide.json");
    const char *wide = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 48, \"vocab_size\": 256,"
                       " \"n_positions\": 32}\n";
    put_file(m2, wide, strlen(wide));
    snprintf(ms, sizeof ms, "model=%s", m2);
    snprintf(k3, sizeof k3, "resume_from_checkpoint=%s/checkpoint-3", w.out);
    struct {
        const char *tag, *a, *b, *c, *needle;
    } cases[] = {
        {"again", "max_steps=6", NULL, NULL, "nothing to train"}, /* auto: found complete */
        {"never", "max_steps=6", "resume_from_checkpoint=never", NULL, "resume_from_checkpoint: auto"},
        {"false", "max_steps=9", "resume_from_checkpoint=false", NULL, "DELETE"},
        {"model", ms, "max_steps=9", "resume_from_checkpoint=latest", "different"},
        {"seed", "seed=99", "resume_from_checkpoint=latest", "max_steps=9", "different"},
        {"done", "max_steps=6", "resume_from_checkpoint=latest", NULL, "max_steps"},
        {"below", "max_steps=4", "resume_from_checkpoint=latest", NULL, "max_steps"},
        {"earlier", k3, "max_steps=9", NULL, "later checkpoint"},
        {"nockpt", "resume_from_checkpoint=/nonexistent/checkpoint-1", "max_steps=9", NULL, "nonexistent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = run(&w, NULL, cases[i].tag, cases[i].a, cases[i].b, cases[i].c, NULL);
        expect_one_line(&w, cases[i].tag, st, 2, cases[i].needle, NULL);
        char *after = tree_snapshot(w.out);
        cr_assert_str_eq(after, before, "refused run %s changed the directory", cases[i].tag);
        free(after);
    }
    /* a directory with the run's identity but no checkpoint: latest is refused, nothing changes */
    char od[450];
    snprintf(od, sizeof od, "output_dir=%s/nock", w.dir);
    st = run(&w, NULL, "nosave", od, "max_steps=2", "save_steps=0", NULL);
    expect_exit(&w, "nosave", st, 0);
    char nock[400];
    path_in(nock, sizeof nock, w.dir, "nock");
    char *b2 = tree_snapshot(nock);
    st = run(&w, NULL, "nolatest", od, "max_steps=4", "save_steps=0", "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "nolatest", st, 2, "found none", NULL);
    char *a2 = tree_snapshot(nock);
    cr_assert_str_eq(a2, b2, "a refused resume changed the directory");
    free(a2), free(b2), free(before);
    ws_fini(&w);
}

Test(safety, overwrite_and_resume_from_an_earlier_checkpoint_stay_coherent, .timeout = 240) {
    Ws w;
    ws_init(&w);
    char ref[300];
    reference_run(&w, ref, sizeof ref, "max_steps=6", "save_total_limit=0", NULL);
    int st = run(&w, NULL, "first", "max_steps=6", "save_total_limit=0", NULL);
    expect_exit(&w, "first", st, 0);
    /* back to checkpoint-3 with overwrite: 4..6 are dropped, metrics cut to 3, then retrained */
    char k3[450];
    snprintf(k3, sizeof k3, "resume_from_checkpoint=%s/checkpoint-3", w.out);
    st = run(&w, NULL, "back", k3, "max_steps=6", "save_total_limit=0", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "back", st, 0);
    long latest, max_step;
    cr_assert_eq(check_checkpoints(w.out, &latest), 6);
    /* steps 1 (kept: at or before 3), 4 (the resumed run's first), 5 (logging_steps 5) and 6 (the last) */
    cr_assert_eq(count_train_records(w.out, &max_step), 4);
    expect_same_run(ref, w.out, 6);
    /* overwrite with another run: nothing of the old one survives beside it */
    st = run(&w, NULL, "other", "max_steps=2", "seed=7", "save_total_limit=0", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "other", st, 0);
    cr_assert_eq(check_checkpoints(w.out, &latest), 2, "the old run's checkpoints 3..6 must be gone");
    cr_assert_eq(latest, 2);
    cr_assert_eq(count_train_records(w.out, &max_step), 2, "only the new run's records");
    cr_assert_eq(max_step, 2);
    char *snap = tree_snapshot(w.out);
    cr_assert_eq(count_substr(snap, "events.out.tfevents"), 1, "one event file expected: %s", snap);
    free(snap);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 6. signals and SIGXFSZ */

Test(safety, file_size_limit_with_default_sigxfsz_is_a_write_error, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "a", "max_steps=2", "save_total_limit=0", NULL);
    expect_exit(&w, "a", st, 0);
    /* model.safetensors (~140 KB) fits, optimizer.safetensors (~280 KB) does not */
    Limits lim = {.fsize = 200 * 1024, .xfsz_default = true};
    st = run(&w, &lim, "b", "max_steps=4", "save_total_limit=0", "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "b", st, 1, NULL, NULL);
    long latest;
    check_checkpoints(w.out, &latest);
    cr_assert_eq(latest, 2, "the previous checkpoint must stay the latest whole one");
    char *snap = tree_snapshot(w.out);
    cr_assert_null(strstr(snap, ".tmp "), "a .tmp was left: %s", snap);
    free(snap);
    ws_fini(&w);
}

Test(safety, sigterm_while_loading_exits_0_and_resumes_exactly, .timeout = 300) {
    Ws w;
    ws_init(&w);
    /* a model big enough that creating it takes a while (~0.4 s here): the signal is sent once the
     * run has printed its batch line, which comes before the data and the model are made */
    char mj[400], ms[450];
    path_in(mj, sizeof mj, w.dir, "wide.json");
    const char *wide = "{\"model_type\": \"gpt2\", \"n_layer\": 6, \"n_head\": 8, \"n_embd\": 512, \"vocab_size\": 256,"
                       " \"n_positions\": 32}\n";
    put_file(mj, wide, strlen(wide));
    snprintf(ms, sizeof ms, "model=%s", mj);
    /* on the CUDA simulator the steps of this model are slow: 1 row of 8 tokens (loading, the
     * subject here, is the same) */
    const char *rows = test_on_cudasim() ? "per_device_train_batch_size=1" : "per_device_train_batch_size=4";
    const char *len = test_on_cudasim() ? "data.seq_len=8" : "data.seq_len=32";
    const char *ev = test_on_cudasim() ? "eval_max_batches=1" : "eval_max_batches=0"; /* 0: all */
    char ref[300];
    reference_run(&w, ref, sizeof ref, ms, "max_steps=2", "save_total_limit=0", rows, len, ev, NULL);
    for (int trial = 0; trial < 2; trial++) {
        rm_tree(w.out);
        Proc p;
        start(&p, &w, NULL, "term", ms, "max_steps=2", "save_total_limit=0", rows, len, ev, NULL);
        bool loading = false;
        for (int i = 0; i < 5000 && !loading; i++) {
            char *o = read_log(&w, "term", "out");
            loading = strstr(o, "effective batch size") != NULL && strstr(o, "memory plan") == NULL;
            bool past = strstr(o, "memory plan") != NULL;
            free(o);
            cr_assert(!past, "trial %d: the run got past loading before the test saw it", trial);
            if (!loading) sleep_s(0.001);
        }
        cr_assert(loading, "trial %d: the run never started loading", trial);
        kill(p.pid, SIGTERM);
        int st = wait_proc(&p);
        expect_exit(&w, "term", st, 0);
        char *o = read_log(&w, "term", "out");
        cr_assert_not_null(strstr(o, "before step 1"), "trial %d: the stop was not before step 1: %s", trial, o);
        free(o);
        long latest;
        check_checkpoints(w.out, &latest);
        cr_assert_eq(latest, 0, "a stop before step 1 saves checkpoint-0 (latest %ld)", latest);
        st = run(&w, NULL, "resume", ms, "max_steps=2", "save_total_limit=0", "resume_from_checkpoint=latest", rows,
                 len, ev, NULL);
        expect_exit(&w, "resume", st, 0);
        expect_same_run(ref, w.out, 2);
    }
    ws_fini(&w);
}

Test(safety, sigterm_during_the_final_sample_exits_0, .timeout = 120) {
    Ws w;
    ws_init(&w);
    Proc p;
    start(&p, &w, NULL, "s", "max_steps=2", "sample_max_new_tokens=1000000", NULL);
    for (int i = 0; i < 3000; i++) {
        char *o = read_log(&w, "s", "out");
        bool sampling = strstr(o, "sample (") != NULL;
        free(o);
        if (sampling) break;
        sleep_s(0.005);
    }
    sleep_s(0.05);
    double t0 = now_s();
    kill(p.pid, SIGTERM);
    int st = wait_proc(&p);
    expect_exit(&w, "s", st, 0);
    /* a million tokens take minutes: the sample must stop at the signal, not run to its end */
    cr_assert_lt(now_s() - t0, 10.0, "the sample went on %.1f s after SIGTERM", now_s() - t0);
    char mf[400];
    path_in(mf, sizeof mf, w.out, "model.safetensors");
    cr_assert(exists(mf), "the final weights must be saved before the sample");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 7. steps without a target */

Test(safety, steps_without_a_target_token_make_no_update, .timeout = 120) {
    Ws w;
    ws_init(&w);
    /* one example in four has a completion: with one row a step, many steps hold no target */
    char jl[400];
    path_in(jl, sizeof jl, w.dir, "sft.jsonl");
    FILE *f = fopen(jl, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 40; i++)
        fprintf(f, "{\"prompt\": \"Q: the king %d?\\nA:\", \"completion\": \"%s\"}\n", i, i % 4 == 0 ? " yes." : "");
    fclose(f);
    char tr[450];
    snprintf(tr, sizeof tr, "data.train=%s", jl);
    int st = run(&w, NULL, "e", tr, "data.format=jsonl", "per_device_train_batch_size=1", "max_steps=12",
                 "logging_steps=1", "save_total_limit=0", "max_skipped_steps=1", NULL);
    expect_exit(&w, "e", st, 0);
    char p[600];
    path_in(p, sizeof p, w.out, "metrics.jsonl");
    char *m = slurp(p, NULL);
    cr_assert_not_null(m);
    int empty = 0, checked = 0;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *ni = cJSON_GetObjectItem(j, "num_items"), *s = cJSON_GetObjectItem(j, "step");
        if (cJSON_IsNumber(ni) && ni->valuedouble == 0) {
            empty++;
            cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "empty")), "a step with no target not marked empty: %s", line);
            cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "skipped")), "an empty step counted as skipped: %s", line);
            long k = (long)s->valuedouble;
            if (k > 1) { /* no update: its checkpoint holds the previous step's weights */
                char a[600], b[600];
                snprintf(a, sizeof a, "%s/checkpoint-%ld/model.safetensors", w.out, k - 1);
                snprintf(b, sizeof b, "%s/checkpoint-%ld/model.safetensors", w.out, k);
                cr_assert(files_equal(a, b), "empty step %ld changed the weights", k);
                checked++;
            }
        }
        cJSON_Delete(j);
    }
    free(m);
    cr_assert_gt(empty, 0, "the data gave no empty step");
    cr_assert_gt(checked, 0);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 8. weights stay finite */

Test(safety, non_finite_weights_never_exit_0, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "a", "max_steps=1", NULL);
    expect_exit(&w, "a", st, 0);
    /* the run's weights with one NaN, given as init_from: refused at load (issue 24), naming the file
     * and the element, before any step (skipping forever would not end in exit 0 either) */
    char src[400], dst[400], init[450];
    path_in(src, sizeof src, w.out, "model.safetensors");
    path_in(dst, sizeof dst, w.dir, "nan.safetensors");
    size_t n;
    char *b = slurp(src, &n);
    cr_assert_not_null(b);
    uint64_t hlen;
    memcpy(&hlen, b, 8);
    float nanv = NAN;
    memcpy(b + 8 + hlen + 4 * 7, &nanv, 4); /* an element of the first tensor's data */
    put_file(dst, b, n);
    free(b);
    snprintf(init, sizeof init, "init_from=%s", dst);
    st = run(&w, NULL, "nan", init, "max_steps=3", "max_skipped_steps=0", "overwrite_output_dir=true", NULL);
    expect_one_line(&w, "nan", st, 2, dst, "element 7: expected a finite weight, found nan, which is not finite");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 9. loaded AdamW state */

/* rewrite one element of tensor `name` of a checkpoint's optimizer.safetensors */
static void poison_moment(const char *ckpt, const char *name, float value) {
    char path[600];
    path_in(path, sizeof path, ckpt, "optimizer.safetensors");
    size_t n;
    char *b = slurp(path, &n);
    cr_assert_not_null(b);
    uint64_t hlen;
    memcpy(&hlen, b, 8);
    char *hdr = strndup(b + 8, hlen);
    cJSON *j = cJSON_Parse(hdr);
    const cJSON *t = cJSON_GetObjectItem(j, name);
    cr_assert_not_null(t, "no %s in %s", name, path);
    size_t off = (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(t, "data_offsets"), 0)->valuedouble;
    memcpy(b + 8 + hlen + off + 4, &value, 4);
    put_file(path, b, n);
    cJSON_Delete(j);
    free(hdr), free(b);
}

Test(safety, corrupt_optimizer_state_is_refused_naming_it, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "a", "max_steps=2", "save_total_limit=0", NULL);
    expect_exit(&w, "a", st, 0);
    char ck[400];
    path_in(ck, sizeof ck, w.out, "checkpoint-2");
    poison_moment(ck, "exp_avg_sq.h.0.ln_1.weight", -1.0f);
    st = run(&w, NULL, "neg", "max_steps=4", "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "neg", st, 2, "exp_avg_sq.h.0.ln_1.weight", "second moment");
    poison_moment(ck, "exp_avg_sq.h.0.ln_1.weight", 0.0f);
    poison_moment(ck, "exp_avg.wte.weight", INFINITY);
    st = run(&w, NULL, "inf", "max_steps=4", "resume_from_checkpoint=latest", NULL);
    expect_one_line(&w, "inf", st, 2, "exp_avg.wte.weight", "finite");
    /* adam_step beyond what two steps can reach */
    char sp[500];
    path_in(sp, sizeof sp, ck, "trainer_state.json");
    char *s = slurp(sp, NULL);
    cr_assert_not_null(s);
    cJSON *j = cJSON_Parse(s);
    cJSON_ReplaceItemInObject(j, "adam_step", cJSON_CreateNumber(1e9));
    char *t = cJSON_Print(j);
    put_file(sp, t, strlen(t));
    free(t), free(s);
    cJSON_Delete(j);
    char k[450];
    snprintf(k, sizeof k, "resume_from_checkpoint=%s/checkpoint-2", w.out);
    st = run(&w, NULL, "step", "max_steps=4", k, NULL);
    expect_one_line(&w, "step", st, 2, "adam_step", "trainer_state.json");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 12. metrics records whole */

Test(safety, metrics_never_hold_a_torn_record, .timeout = 120) {
    Ws w;
    ws_init(&w);
    for (int lim_b = 3000; lim_b <= 6000; lim_b += 700) {
        rm_tree(w.out);
        Limits lim = {.fsize = (rlim_t)lim_b};
        int st = run(&w, &lim, "m", "max_steps=30", "logging_steps=1", "save_steps=0", NULL);
        expect_one_line(&w, "m", st, 1, "metrics.jsonl", NULL);
        char p[600];
        path_in(p, sizeof p, w.out, "metrics.jsonl");
        size_t n;
        char *m = slurp(p, &n);
        cr_assert_not_null(m);
        cr_assert(n > 0 && m[n - 1] == '\n', "limit %d: the last record is torn (%zu bytes)", lim_b, n);
        long max_step;
        int recs = count_train_records(w.out, &max_step);
        cr_assert_gt(recs, 0);
        free(m);
    }
    ws_fini(&w);
}

/* ---------------------------------------------------------------- an older gtrain's directory */

Test(safety, a_run_directory_of_gtrain_0_1_resumes, .timeout = 120) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "a", "max_steps=2", NULL);
    expect_exit(&w, "a", st, 0);
    /* gtrain 0.1 wrote the bare run object and no list of files */
    char p[600];
    path_in(p, sizeof p, w.out, "gtrain_run.json");
    char *s = slurp(p, NULL);
    cr_assert_not_null(s);
    cJSON *j = cJSON_Parse(s);
    char *legacy = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "run"));
    put_file(p, legacy, strlen(legacy));
    free(legacy), free(s);
    cJSON_Delete(j);
    st = run(&w, NULL, "b", "max_steps=4", "resume_from_checkpoint=latest", NULL);
    expect_exit(&w, "b", st, 0);
    char *o = read_log(&w, "b", "out");
    cr_assert_not_null(strstr(o, "checkpoint-2 at step 2"), "not resumed from the 0.1 run's checkpoint-2: %s", o);
    free(o);
    s = slurp(p, NULL);
    j = cJSON_Parse(s);
    /* save_total_limit 3: the adopted checkpoint-2, then 3 and 4 (checkpoint-1, adopted too, rotated away) */
    const cJSON *ck = cJSON_GetObjectItem(j, "checkpoints");
    cr_assert(cJSON_GetArraySize(ck) == 3 && cJSON_GetArrayItem(ck, 0)->valuedouble == 2,
              "the adopted and new checkpoints: %s", s);
    cJSON_Delete(j);
    free(s);
    ws_fini(&w);
}
