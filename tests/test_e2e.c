/* test_e2e.c - whole runs of the gtrain binary: the loss falls, and (8,1) and (2,4) from the same
 * seed log the same losses (the windows of a step do not depend on the split). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_backend_select.h"
#include "test_util.h"

static void run(const char *dir, const char *name, int B, int A, int steps, Losses *l) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN/GTRAIN_ROOT not set (run through make test)");
    char cmd[8192], out[1024];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' --config configs/shakespeare-char.yaml --set output_dir=%s --set max_steps=%d "
             "--set per_device_train_batch_size=%d --set gradient_accumulation_steps=%d --set logging_steps=1 "
             "--set eval_steps=0 --set eval_max_batches=4 --set save_steps=0 --set sample_max_new_tokens=0 "
             "--set warmup_steps=5 --set num_threads=1 >/dev/null 2>%s.err",
             root, bin, out, steps, B, A, out);
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "gtrain failed (%d): %s", rc, cmd);
    read_train_metrics(out, l);
    cr_assert_eq(l->n, steps);
}

Test(e2e, the_loss_falls_on_the_demo_model, .timeout = 120) {
    char dir[] = "/tmp/gt_e2e_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    Losses l;
    /* on the CUDA simulator 20 steps of 4 rows (they fall by ~1.8 too) */
    const int B = test_on_cudasim() ? 4 : 12, steps = test_on_cudasim() ? 20 : 40;
    run(dir, "falls", B, 1, steps, &l);
    cr_assert(l.loss[0] > 5.0, "a byte-level model starts near ln 256 = 5.55, found %g", l.loss[0]);
    cr_assert(l.loss[steps - 1] < l.loss[0] - 1.0, "loss did not fall: %g -> %g", l.loss[0], l.loss[steps - 1]);
    cr_assert_eq(l.n_eval, 1);
    cr_assert(l.eval_loss[0] < l.loss[0] - 1.0, "eval loss %g", l.eval_loss[0]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(e2e, micro_batch_8x1_and_2x4_log_the_same_losses, .timeout = 120) {
    char dir[] = "/tmp/gt_e2e_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    Losses a, b;
    /* on the CUDA simulator (4,1) and (1,4) for 4 steps */
    const bool sim = test_on_cudasim();
    const int steps = sim ? 4 : 8, total = sim ? 4 : 8;
    run(dir, sim ? "b4a1" : "b8a1", total, 1, steps, &a);
    run(dir, sim ? "b1a4" : "b2a4", sim ? 1 : 2, sim ? 4 : 4, steps, &b);
    for (int s = 0; s < steps; s++) {
        /* the same tokens and the same sums in another order: float32 rounding, grown over 8 steps */
        cr_assert(fabs(a.loss[s] - b.loss[s]) <= 1e-5 * fabs(a.loss[s]), "step %d: %.9g vs %.9g", s + 1, a.loss[s],
                  b.loss[s]);
        cr_assert_eq(a.num_items[s], b.num_items[s]);
        cr_assert(fabs(a.grad_norm[s] - b.grad_norm[s]) <= 1e-5 * a.grad_norm[s], "step %d: grad norm %.9g vs %.9g",
                  s + 1, a.grad_norm[s], b.grad_norm[s]);
        cr_assert_eq(a.effective_batch[s], total);
        cr_assert_eq(b.effective_batch[s], total);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* SFT (jsonl): completion-only labels make micro-batches hold different numbers of targets. Under
 * loss_normalization tokens, (4, 1) and (1, 4) are the same update; under steps (HF's fallback,
 * mean per micro-batch / accumulation) they differ. */
static void run_sft(const char *dir, const char *name, int B, int A, const char *norm, Losses *l) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN/GTRAIN_ROOT not set (run through make test)");
    char cmd[8192], out[1024];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd,
             "'%s' --config '%s/tests/fixtures/sft/run.yaml' --set output_dir=%s --set per_device_train_batch_size=%d "
             "--set gradient_accumulation_steps=%d --set loss_normalization=%s >/dev/null 2>%s.err",
             bin, root, out, B, A, norm, out);
    cr_assert_eq(system(cmd), 0, "gtrain failed: %s", cmd);
    read_train_metrics(out, l);
    cr_assert_eq(l->n, 4);
}

Test(e2e, sft_splits_agree_under_tokens_and_differ_under_steps, .timeout = 120) {
    char dir[] = "/tmp/gt_e2e_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    Losses t41, t14, s41, s14;
    run_sft(dir, "tok41", 4, 1, "tokens", &t41);
    run_sft(dir, "tok14", 1, 4, "tokens", &t14);
    run_sft(dir, "stp41", 4, 1, "steps", &s41);
    run_sft(dir, "stp14", 1, 4, "steps", &s14);
    for (int s = 0; s < 4; s++) {
        cr_assert(fabs(t41.loss[s] - t14.loss[s]) <= 1e-5 * fabs(t41.loss[s]), "tokens, step %d: %.9g vs %.9g", s + 1,
                  t41.loss[s], t14.loss[s]);
        cr_assert_eq(t41.num_items[s], t14.num_items[s]);
    }
    /* step 1 starts from the same weights, so only later steps can show the different updates;
     * with lr 1e-2 they differ far beyond rounding */
    double worst = 0;
    for (int s = 1; s < 4; s++) worst = fmax(worst, fabs(s41.loss[s] - s14.loss[s]) / fabs(s41.loss[s]));
    cr_assert(worst > 1e-4, "steps normalisation should change the update when counts differ (max rel diff %g)", worst);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* num_train_epochs counts examples for (unpacked) SFT data: 24 examples, 4 a step -> 6 steps an epoch */
Test(e2e, sft_epochs_count_examples, .timeout = 120) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN/GTRAIN_ROOT not set (run through make test)");
    char dir[] = "/tmp/gt_e2e_XXXXXX", cmd[8192];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "'%s' --config '%s/tests/fixtures/sft/run.yaml' --set output_dir=%s/run --set max_steps=-1 "
             "--set num_train_epochs=1 >/dev/null 2>&1",
             bin, root, dir);
    cr_assert_eq(system(cmd), 0, "gtrain failed: %s", cmd);
    snprintf(cmd, sizeof cmd, "%s/run", dir);
    Losses l;
    read_train_metrics(cmd, &l);
    cr_assert_eq(l.n, 6, "24 examples / effective batch 4 = 6 steps, found %d", l.n);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
