/* test_output_dir.c - a training run's output_dir against its inputs, and resume_from_checkpoint:
 * auto (the default), through the binary on the reliability fixture (tests/run_util.h):
 *
 * 1. output_dir equal to the model's directory (a finished run's HF directory trained on again),
 *    with and without overwrite_output_dir, or inside / around it with overwrite: refused by plan
 *    and by a run with one line naming output_dir, the directory byte for byte as it was.
 * 2. auto: the same command run again after more max_steps resumes from the latest checkpoint
 *    (saying so) and ends with the unbroken run's weights and optimizer state; a different run is
 *    refused naming every setting that differs with its old and new value, and without
 *    suggesting the flag that deletes as the fix; overwrite_output_dir ignores the checkpoints.
 * 3. the newcomer's case: the shipped demo config (configs/shakespeare-char.yaml, fewer steps)
 *    interrupted by SIGINT after a checkpoint prints the command that resumes; that command, run
 *    as printed, resumes and ends with the unbroken run's weights, bit for bit. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "test_backend_select.h"

static void path_in(char *buf, size_t cap, const char *dir, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

/* gtrain plan --config w->cfg --set ...: the wait status, logs as run()'s under tag */
static int plan(const Ws *w, const char *tag, const char *a, const char *b, const char *c) {
    char cmd[4096], out[400], err[400];
    snprintf(out, sizeof out, "%s/%s.out", w->dir, tag);
    snprintf(err, sizeof err, "%s/%s.err", w->dir, tag);
    snprintf(cmd, sizeof cmd, "'%s' plan --config '%s' %s%s%s %s%s%s %s%s%s >'%s' 2>'%s'", test_gtrain_bin(), w->cfg,
             a ? "--set '" : "", a ? a : "", a ? "'" : "", b ? "--set '" : "", b ? b : "", b ? "'" : "",
             c ? "--set '" : "", c ? c : "", c ? "'" : "", out, err);
    return system(cmd);
}

/* ---------------------------------------------------------------- 1. never the model's directory */

Test(output_dir, never_the_model_directory_nor_around_or_inside_it_with_overwrite, .timeout = 180) {
    Ws w;
    ws_init(&w);
    int st = run(&w, NULL, "first", "max_steps=2", NULL);
    expect_exit(&w, "first", st, 0);
    char cfgjson[400];
    path_in(cfgjson, sizeof cfgjson, w.out, "config.json");
    cr_assert(exists(cfgjson), "the first run wrote no HF model directory");
    char model[450], same[450], inside[450], around[450];
    snprintf(model, sizeof model, "model=%s", w.out);
    snprintf(same, sizeof same, "output_dir=%s", w.out);
    snprintf(inside, sizeof inside, "output_dir=%s/again", w.out);
    snprintf(around, sizeof around, "output_dir=%s", w.dir);
    char *before = tree_snapshot(w.out);
    struct {
        const char *tag, *out, *over, *needle;
    } cases[] = {
        {"same-over", same, "overwrite_output_dir=true", "model directory"},
        {"same", same, "overwrite_output_dir=false", "model directory"},
        {"inside-over", inside, "overwrite_output_dir=true", "inside"},
        {"around-over", around, "overwrite_output_dir=true", "around"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "plan-%s", cases[i].tag);
        st = plan(&w, tag, model, cases[i].out, cases[i].over);
        expect_one_line(&w, tag, st, 2, "output_dir", cases[i].needle);
        st = run(&w, NULL, cases[i].tag, model, cases[i].out, cases[i].over, "max_steps=4", NULL);
        expect_one_line(&w, cases[i].tag, st, 2, "output_dir", cases[i].needle);
        char *after = tree_snapshot(w.out);
        cr_assert_str_eq(after, before, "%s: the model directory changed", cases[i].tag);
        free(after);
    }
    /* weights given as init_from among the files overwrite_output_dir deletes */
    char init[450];
    snprintf(init, sizeof init, "init_from=%s/model.safetensors", w.out);
    st = run(&w, NULL, "init-over", init, "overwrite_output_dir=true", "seed=5", "max_steps=4", NULL);
    expect_one_line(&w, "init-over", st, 2, "output_dir", "init_from");
    char *after = tree_snapshot(w.out);
    cr_assert_str_eq(after, before, "init-over: the directory changed");
    free(after);
    /* beside it, with overwrite, the same model trains */
    char beside[450];
    snprintf(beside, sizeof beside, "output_dir=%s/beside", w.dir);
    st = run(&w, NULL, "beside", model, beside, "overwrite_output_dir=true", "max_steps=4", NULL);
    expect_exit(&w, "beside", st, 0);
    free(before);
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 2. resume_from_checkpoint: auto */

Test(output_dir, auto_resumes_the_same_run_and_names_what_differs_otherwise, .timeout = 240) {
    Ws w;
    ws_init(&w);
    char ref[400];
    reference_run(&w, ref, sizeof ref, "max_steps=8", "save_total_limit=0", NULL);
    int st = run(&w, NULL, "a", "max_steps=4", "save_total_limit=0", NULL);
    expect_exit(&w, "a", st, 0);
    /* the same command with more steps: resumes, says so, ends as the unbroken run */
    st = run(&w, NULL, "b", "max_steps=8", "save_total_limit=0", NULL);
    expect_exit(&w, "b", st, 0);
    char *o = read_log(&w, "b", "out");
    cr_assert_not_null(strstr(o, "resume_from_checkpoint: auto"), "the resume is not announced: %s", o);
    cr_assert_not_null(strstr(o, "checkpoint-4"), "not resumed from checkpoint-4: %s", o);
    free(o);
    expect_same_run(ref, w.out, 8);
    /* a different run: every difference named, old -> new; the fix offered is a new output_dir */
    char *before = tree_snapshot(w.out);
    char m2[400], ms[450];
    path_in(m2, sizeof m2, w.dir, "wide.json");
    const char *wide = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 48, \"vocab_size\": 256,"
                       " \"n_positions\": 32}\n";
    put_file(m2, wide, strlen(wide));
    snprintf(ms, sizeof ms, "model=%s", m2);
    st = run(&w, NULL, "diff", "max_steps=12", "seed=99", ms, NULL);
    expect_one_line(&w, "diff", st, 2, "a different run", "new output_dir");
    char e[4096];
    log_text(&w, "diff", "err", e, sizeof e);
    /* the old values, read from the fixture's files here */
    char *yaml = slurp(w.cfg, NULL), *mj = NULL;
    char mpath[400];
    path_in(mpath, sizeof mpath, w.dir, "model.json");
    mj = slurp(mpath, NULL);
    cr_assert(yaml && mj);
    long seed = -1, embd = -1;
    const char *sp = strstr(yaml, "\nseed: "), *ep = strstr(mj, "\"n_embd\":");
    cr_assert(sp && sscanf(sp, "\nseed: %ld", &seed) == 1 && ep && sscanf(ep, "\"n_embd\": %ld", &embd) == 1);
    char want[64];
    snprintf(want, sizeof want, "seed: %ld -> 99", seed);
    cr_assert_not_null(strstr(e, want), "\"%s\" not named: %s", want, e);
    snprintf(want, sizeof want, "n_embd: %ld -> 48", embd);
    cr_assert_not_null(strstr(e, want), "\"%s\" not named: %s", want, e);
    cr_assert_null(strstr(e, "n_layer:"), "a setting that does not differ is named: %s", e);
    cr_assert_null(strstr(e, "set overwrite_output_dir: true"), "the destructive flag offered as the fix: %s", e);
    free(yaml), free(mj);
    char *after = tree_snapshot(w.out);
    cr_assert_str_eq(after, before, "a refused run changed the directory");
    free(after);
    free(before);
    /* overwrite_output_dir: the checkpoints there are ignored, the run starts at step 1 */
    st = run(&w, NULL, "over", "max_steps=3", "overwrite_output_dir=true", NULL);
    expect_exit(&w, "over", st, 0);
    o = read_log(&w, "over", "out");
    cr_assert_null(strstr(o, "resuming from"), "overwrite_output_dir resumed: %s", o);
    cr_assert_not_null(strstr(o, "step 1/3"), "overwrite_output_dir did not start at step 1: %s", o);
    free(o);
    /* never: an earlier run of this one is refused, the message pointing at auto */
    st = run(&w, NULL, "never", "max_steps=6", "resume_from_checkpoint=never", NULL);
    expect_one_line(&w, "never", st, 2, "output_dir", "resume_from_checkpoint: auto");
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 3. the shipped demo, interrupted */

/* the demo's command with a test's overrides (fewer steps, a scratch output_dir, one thread); the
 * count of overrides is returned. On the CUDA simulator, where a step of the demo model takes
 * seconds and its closing evaluation (145 batches) minutes (the whole test took 355 s there, the
 * longest test of that flavour), 12 steps of batch 4 checkpointed every 3 and 2 evaluation
 * batches: the same interrupt after a checkpoint and the same bit-for-bit resume. */
#define DEMO_SETS 8
static long demo_steps(void) { return test_on_cudasim() ? 12 : 40; }
static long demo_save_steps(void) { return test_on_cudasim() ? 3 : 5; }
static int demo_sets(const char *out, char *od, size_t cap, const char **sets) {
    const bool sim = test_on_cudasim();
    snprintf(od, cap, "output_dir=%s", out);
    sets[0] = sim ? "max_steps=12" : "max_steps=40";
    sets[1] = sim ? "save_steps=3" : "save_steps=5";
    sets[2] = "logging_steps=1";
    sets[3] = "num_threads=1";
    sets[4] = "sample_max_new_tokens=0";
    sets[5] = od;
    sets[6] = sim ? "per_device_train_batch_size=4" : "per_device_train_batch_size=12";
    sets[7] = "eval_max_batches=2";
    return sim ? 8 : 7;
}

Test(output_dir, the_demo_interrupted_by_sigint_resumes_to_the_unbroken_weights, .timeout = 600) {
    Ws w;
    ws_init(&w);
    char demo[512];
    snprintf(demo, sizeof demo, "%s/configs/shakespeare-char.yaml", getenv("GTRAIN_ROOT"));
    char *y = slurp(demo, NULL);
    cr_assert_not_null(y, "no %s", demo);
    cr_assert_null(strstr(y, "overwrite_output_dir: true"), "the shipped demo overwrites its output_dir");
    free(y);
    char ref[400], out[400], od[450];
    path_in(ref, sizeof ref, w.dir, "ref");
    path_in(out, sizeof out, w.dir, "demo");
    const char *sets[DEMO_SETS];
    int nsets = demo_sets(ref, od, sizeof od, sets);
    Proc p;
    start_v(&p, &w, demo, NULL, "ref", sets, nsets);
    expect_exit(&w, "ref", wait_proc(&p), 0);
    /* interrupted after its first checkpoint */
    char od2[450];
    nsets = demo_sets(out, od2, sizeof od2, sets);
    start_v(&p, &w, demo, NULL, "int", sets, nsets);
    char ck[520], first[64];
    snprintf(first, sizeof first, "checkpoint-%ld/trainer_state.json", demo_save_steps());
    path_in(ck, sizeof ck, out, first);
    for (int i = 0; i < 60000 && !exists(ck); i++) {
        int st;
        cr_assert_eq(waitpid(p.pid, &st, WNOHANG), 0, "the demo ended before its first checkpoint");
        sleep_s(0.002);
    }
    cr_assert(exists(ck), "no %s within 120 s", first);
    kill(p.pid, SIGINT);
    expect_exit(&w, "int", wait_proc(&p), 0);
    char *o = read_log(&w, "int", "out");
    const char *cmd = strstr(o, "run: ");
    cr_assert_not_null(cmd, "no resume command printed: %s", o);
    cmd += 5;
    const char *eol = strchr(cmd, '\n');
    cr_assert_not_null(eol);
    long last = -1;
    check_checkpoints(out, &last);
    cr_assert(last >= demo_save_steps() && last < demo_steps(), "the interrupted run's latest checkpoint is %ld", last);
    /* the printed command, run as printed */
    char sh[8192];
    snprintf(sh, sizeof sh, "cd / && %.*s >'%s/again.out' 2>'%s/again.err'", (int)(eol - cmd), cmd, w.dir, w.dir);
    free(o);
    int st = system(sh);
    expect_exit(&w, "again", st, 0);
    o = read_log(&w, "again", "out");
    char want[64];
    snprintf(want, sizeof want, "checkpoint-%ld", last);
    cr_assert(strstr(o, "resume_from_checkpoint: auto") && strstr(o, want), "not resumed from %s: %s", want, o);
    free(o);
    char a[512], b[512];
    path_in(a, sizeof a, ref, "model.safetensors");
    path_in(b, sizeof b, out, "model.safetensors");
    cr_assert(files_equal(a, b), "the resumed demo's weights differ from the unbroken run's");
    ws_fini(&w);
}
