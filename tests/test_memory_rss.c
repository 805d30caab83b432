/* test_memory_rss.c - the memory plan against the operating system's count: a gtrain process on
 * the CPU, training a 100M-parameter Llama (initialising, saving its weights; then loading them and
 * writing a run checkpoint with the AdamW state), peaks at a resident set size within 5 % + 50 MB
 * of the plan's total (device + host). The plan's staging buffer is the only host memory that
 * initialisation, loading and saving use, so a full-model host copy (400 MB here) would break it.
 * Measured by wait4's ru_maxrss, which the code under test cannot influence. Skipped under
 * sanitizers (shadow memory) and on the CUDA simulator (device memory is not the plan's host). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plan.h"
#include "test_backend_select.h"
#include "test_util.h"


static const char MODEL_JSON[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 768, \"intermediate_size\": 2048, \"num_hidden_layers\": 8,\n"
    " \"num_attention_heads\": 12, \"num_key_value_heads\": 4, \"vocab_size\": 32000,\n"
    " \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": false}\n";

/* run gtrain with the config and sets; returns its peak RSS in bytes (the test fails on exit != 0) */
static uint64_t peak_rss_of(const char *cfg, const char *log, const char *const *sets, int n_sets) {
    const char *argv[32];
    int k = 0;
    argv[k++] = test_gtrain_bin();
    argv[k++] = "--config";
    argv[k++] = cfg;
    for (int i = 0; i < n_sets; i++) argv[k++] = "--set", argv[k++] = sets[i];
    argv[k] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &st, 0, &ru), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gtrain exited %d: see %s", WEXITSTATUS(st), log);
    return (uint64_t)ru.ru_maxrss * 1024;
}

Test(memory, peak_rss_is_within_5_percent_and_50_mb_of_the_plan, .timeout = 300) {
    if (UNDER_SANITIZER) cr_skip_test("under a sanitizer the RSS holds shadow memory");
    if (test_on_cudasim()) cr_skip_test("on the CUDA simulator device memory is not the plan's host memory");
    const char *root = getenv("GTRAIN_ROOT");
    if (!root) cr_skip_test("GTRAIN_ROOT is not set");
    char dir[] = "/tmp/gt_rss_XXXXXX", model[64], cfg[64], log[64], out1[64], cmd[256];
    cr_assert(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/model.json", dir);
    snprintf(cfg, sizeof cfg, "%s/run.yaml", dir);
    snprintf(out1, sizeof out1, "%s/first", dir);
    FILE *f = fopen(model, "w");
    cr_assert(f);
    fputs(MODEL_JSON, f);
    fclose(f);
    f = fopen(cfg, "w");
    cr_assert(f);
    fprintf(f, "model: model.json\ndata: {train: %s/data/tinyshakespeare.txt, format: text, seq_len: 64}\n"
               "per_device_train_batch_size: 1\nmax_steps: 1\neval_steps: 0\neval_max_batches: 1\n"
               "sample_max_new_tokens: 0\ndevice: cpu\nnum_threads: 2\n", root);
    fclose(f);

    ModelDesc d;
    GtError err = {0};
    cr_assert_eq(model_desc_load(&d, model, &err), 0, "%s", err.msg);
    MemPlan p;
    cr_assert_eq(plan_memory(&p, &d, 1, 1, 1, 64, recompute_policy(false, 1, false, d.n_layer), false, GT_F32), 0);
    const uint64_t planned = p.device_total + p.host_total, slack = planned / 20 + 50000000ull;
    cr_assert_gt(model_desc_num_params(&d), 90000000ull, "the model is too small for the test to mean anything");

    /* 1: initialise, one step, save the weights (no run checkpoint) */
    snprintf(log, sizeof log, "%s/first.log", dir);
    char o1[96];
    snprintf(o1, sizeof o1, "output_dir=%s", out1);
    const char *s1[] = {o1, "save_steps=0"};
    uint64_t rss1 = peak_rss_of(cfg, log, s1, 2);
    /* 2: load those weights, one step, a run checkpoint (weights + AdamW state) and the weights */
    snprintf(log, sizeof log, "%s/second.log", dir);
    char o2[96], init[96];
    snprintf(o2, sizeof o2, "output_dir=%s/second", dir);
    snprintf(init, sizeof init, "init_from=%s", out1);
    const char *s2[] = {o2, init, "save_steps=1"};
    uint64_t rss2 = peak_rss_of(cfg, log, s2, 3);
    cr_log_info("plan %.1f MB (device %.1f + host %.1f); peak RSS: init+save %.1f MB, load+checkpoint %.1f MB",
                planned / 1e6, p.device_total / 1e6, p.host_total / 1e6, rss1 / 1e6, rss2 / 1e6);
    cr_expect_leq(rss1, planned + slack, "initialise + save: peak RSS %.1f MB, plan %.1f MB (+ %.1f MB allowed)",
                  rss1 / 1e6, planned / 1e6, slack / 1e6);
    cr_expect_leq(rss2, planned + slack, "load + checkpoint: peak RSS %.1f MB, plan %.1f MB (+ %.1f MB allowed)",
                  rss2 / 1e6, planned / 1e6, slack / 1e6);
    /* and the plan is not padded: most of it is really touched */
    cr_expect_geq(rss1 + 50000000ull, planned, "peak RSS %.1f MB is far below the plan's %.1f MB", rss1 / 1e6,
                  planned / 1e6);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
