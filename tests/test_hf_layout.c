/* test_hf_layout.c - a gtrain run's output directory, loaded by transformers' own
 * GPT2LMHeadModel.from_pretrained (tests/tools/hf_gpt2_loss.py: names, Conv1D [in, out] layout,
 * config.json, the tied head), gives the same eval loss as gtrain on the same tokens. Fails where the
 * test references are not installed. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "test_backend_select.h"

Test(hf_layout, saved_weights_give_the_same_loss_in_transformers_gpt2lmheadmodel, .timeout = 120) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!bin || !root) cr_skip_test("GTRAIN_BIN/GTRAIN_ROOT not set (run through make test)");
    test_require_refs();
    char dir[] = "/tmp/gt_hf_XXXXXX", cmd[4096];
    cr_assert_not_null(mkdtemp(dir));
    /* 20 steps of the demo model, eval on 2 batches of 12 windows of the validation split */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' --config configs/shakespeare-char.yaml --set max_steps=20 --set output_dir=%s/run "
             "--set eval_max_batches=2 --set save_steps=0 --set sample_max_new_tokens=0 >/dev/null 2>&1",
             root, bin, dir);
    cr_assert_eq(system(cmd), 0, "gtrain run failed: %s", cmd);
    Losses l;
    read_train_metrics(strcat(strcpy(cmd, dir), "/run"), &l);
    cr_assert_eq(l.n_eval, 1, "expected one eval record");
    double ours = l.eval_loss[0];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/hf_gpt2_loss.py' %s/run '%s/data/tinyshakespeare.txt' 64 24 0.1",
             root, dir, root);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    double theirs = NAN;
    cr_assert_eq(fscanf(p, "%lf", &theirs), 1, "no loss from %s", cmd);
    cr_assert_eq(pclose(p), 0);
    /* both float32 forwards of the same weights: agree to float32 rounding of a sum of 1536 terms */
    cr_assert(fabs(ours - theirs) <= 1e-5 * fabs(theirs), "gtrain eval_loss %.9f vs transformers %.9f", ours, theirs);
    cr_log_info("gtrain eval_loss %.9f, transformers' GPT2LMHeadModel %.9f (relative %.1e)", ours, theirs,
                fabs(ours - theirs) / fabs(theirs));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
