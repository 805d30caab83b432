/* test_lora_runs.c - LoRA and PiSSA runs of the gtrain binary as a process (suite lora_runs; its
 * hostile adapters, gtrain plan and PiSSA r checks are in test_lora_runs_refuse.c, the workspace and
 * the checks of adapters and checkpoints both use in lora_runs_fixture.c):
 *
 * 1. resume: a run of N steps with save_steps and lora_dropout 0.1, and a second run resumed from
 *    its checkpoint-k into ANOTHER output_dir, end with byte-identical adapters (and the same
 *    losses, checkpoints and optimizer state); the same for PiSSA (pissa_niter_2: the resumed run
 *    rebuilds output_dir/pissa_init byte for byte), for gradient_accumulation_steps 2 with
 *    gradient checkpointing, and for exact PiSSA resumed from the checkpoint-0 a SIGTERM during
 *    loading saves. Checkpoints and output_dir hold the adapter alone: optimizer.safetensors holds
 *    exp_avg. / exp_avg_sq. of every PEFT adapter key (shapes from config.json's dimensions) and
 *    nothing of the base; there is no model.safetensors anywhere.
 * 2. data parallel: 2 MPI ranks x B against 1 rank x 2B (plain and ZeRO-1), without dropout and
 *    with lora_dropout 0.1 (the mask follows each row's place in the step's batch, so the ranks
 *    drop what the one rank drops; also 2 ranks x B/2 x 2 accumulation steps): the same losses and
 *    gradient norms (test_dist.c's bound) and the same adapter; a 2-rank ZeRO-1 run with dropout
 *    resumed from a checkpoint is bit-exact. Skipped without mpirun or an MPI build.
 *
 * The base is a tiny Llama (tests/fixtures/hf_configs/tiny-llama.json: 2 layers, 64 wide, 4 heads
 * of which 2 kv, SwiGLU 128) written by a 1-step full fine-tuning run of gtrain itself, so nothing
 * here needs Python. $GTRAIN_BIN is the binary, $GTRAIN_ROOT the repo root. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cJSON.h>
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "safetensors.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "lora_runs_fixture.h"

#define STEPS 8
#define SAVE 3 /* checkpoints 3, 6, 8; the resumed runs start from checkpoint-3 */

/* ---------------------------------------------------------------- 1. resume */

static void expect_same_file(const char *a, const char *b) {
    cr_assert(exists(a), "no %s", a);
    cr_assert(files_equal(a, b), "%s differs from the unbroken run's %s", b, a);
}

/* the unbroken run into ref/, the resumed one from ref/checkpoint-SAVE into res/: the same files */
static void resume_case(Ws *w, const char *const *extra, int n_extra, bool pissa) {
    char ref[300], res[300], ck[320];
    snprintf(ref, sizeof ref, "%s/ref", w->dir);
    snprintf(res, sizeof res, "%s/res", w->dir);
    snprintf(ck, sizeof ck, "%s/checkpoint-%d", ref, SAVE);
    const char *sets[MAX_SETS];
    int n = 0;
    for (int i = 0; i < n_extra; i++) sets[n++] = extra[i];
    sets[n++] = kv("output_dir", ref);
    expect_exit(w, "ref", run_cfg(w, w->cfg, "ref", sets, n), 0);
    sets[n - 1] = kv("output_dir", res);
    sets[n++] = kv("resume_from_checkpoint", ck);
    expect_exit(w, "res", run_cfg(w, w->cfg, "res", sets, n), 0);
    char *o = read_log(w, "res", "out");
    cr_assert_not_null(strstr(o, "resumed from"), "the second run did not resume: %s", o);
    if (pissa)
        cr_assert_not_null(strstr(o, "initial PiSSA adapter rebuilt"), "the resumed PiSSA run did not rebuild pissa_init: %s", o);
    free(o);
    char res_path[320];
    snprintf(res_path, sizeof res_path, "%s/checkpoint-%d", res, SAVE);
    cr_assert(!exists(res_path), "%s: the resumed run saved its starting checkpoint again", res_path);

    /* the adapter, its config and every later checkpoint byte for byte */
    expect_adapter_dir(ref);
    expect_adapter_dir(res);
    expect_same_file(J(ref, "adapter_model.safetensors"), J(res, "adapter_model.safetensors"));
    expect_same_file(J(ref, "adapter_config.json"), J(res, "adapter_config.json"));
    static const int later[] = {2 * SAVE, STEPS};
    for (int i = 0; i < 2; i++) {
        const int s = later[i];
        char a[320], b[320];
        snprintf(a, sizeof a, "%s/checkpoint-%d", ref, s);
        snprintf(b, sizeof b, "%s/checkpoint-%d", res, s);
        static const char *const files[] = {"adapter_model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++) expect_same_file(J(a, files[f]), J(b, files[f]));
    }
    if (pissa) {
        const char *pa = J(ref, "pissa_init"), *pb = J(res, "pissa_init");
        expect_same_file(J(pa, "adapter_model.safetensors"), J(pb, "adapter_model.safetensors"));
        expect_same_file(J(pa, "adapter_config.json"), J(pb, "adapter_config.json"));
        cr_assert_eq(adapter_r(pb), R, "pissa_init: the initial adapter has rank r");
    }
    /* the losses after the checkpoint, to the bit */
    Losses a, b;
    read_train_metrics(ref, &a);
    read_train_metrics(res, &b);
    cr_assert_eq(a.n, STEPS);
    cr_assert_eq(b.n, STEPS);
    for (int s = SAVE; s < STEPS; s++)
        cr_assert(a.loss[s] == b.loss[s] && a.grad_norm[s] == b.grad_norm[s],
                  "step %d: loss %.17g / grad %.17g unbroken, %.17g / %.17g resumed", s + 1, a.loss[s], a.grad_norm[s],
                  b.loss[s], b.grad_norm[s]);

    /* only the adapters are trained and saved: PEFT keys of every module of every layer */
    Dims d = llama_dims(wpath(w, "model.json"));
    const int r_saved = pissa ? 2 * R : R;
    cr_assert_eq(adapter_r(ref), r_saved);
    expect_lora_checkpoint(ck, &d, R, r_saved, wpath(w, "base"));
    snprintf(ck, sizeof ck, "%s/checkpoint-%d", res, STEPS);
    expect_lora_checkpoint(ck, &d, R, r_saved, wpath(w, "base"));
}

Test(lora_runs, resume_with_dropout_into_another_output_dir_is_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    resume_case(&w, NULL, 0, false);
    /* the dropout is live (so the resumed run's masks were the unbroken run's): without it the adapter differs */
    const char *sets[] = {kv("output_dir", wpath(&w, "nodrop")), "lora.lora_dropout=0", "save_steps=0"};
    expect_exit(&w, "nodrop", run_cfg(&w, w.cfg, "nodrop", sets, 3), 0);
    cr_assert(!files_equal(J(wpath(&w, "ref"), "adapter_model.safetensors"),
                           J(wpath(&w, "nodrop"), "adapter_model.safetensors")),
              "lora_dropout 0.1 and 0 trained the same adapter: dropout is not applied");
    /* and the adapters moved: B starts at zero */
    StFile f;
    st_load(J(wpath(&w, "ref"), "adapter_model.safetensors"), &f);
    int ib = st_find(&f, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
    cr_assert_geq(ib, 0);
    double sum = 0;
    for (int64_t e = 0; e < st_numel(&f, ib); e++) sum += fabs(f.data[ib][e]);
    cr_assert_gt(sum, 0, "lora_B of down_proj is still zero after %d steps", STEPS);
    st_free(&f);
    ws_fini(&w);
}

Test(lora_runs, pissa_resume_into_another_output_dir_rebuilds_pissa_init_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const char *extra[] = {"lora.init_lora_weights=pissa_niter_2"};
    resume_case(&w, extra, 1, true);
    ws_fini(&w);
}

/* QPiSSA (PiSSA with lora.quantize_base nf4): the unbroken run takes the SVD of the full-precision W as
 * the base loads and quantizes the residual; the resumed one rebuilds that 4-bit residual from W and
 * the checkpoint's B0 A0: the same losses, adapters and initial adapter, bit for bit */
Test(lora_runs, qpissa_nf4_resume_into_another_output_dir_is_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const char *extra[] = {"lora.init_lora_weights=pissa_niter_2", "lora.quantize_base=nf4"};
    resume_case(&w, extra, 2, true);
    char *o = read_log(&w, "ref", "out"), *r = read_log(&w, "res", "out");
    cr_assert_not_null(strstr(o, "residual quantized (QPiSSA)"), "the unbroken run did not take QPiSSA's path: %s", o);
    cr_assert_not_null(strstr(r, "4-bit residual base rebuilt"), "the resumed run did not rebuild its 4-bit base: %s", r);
    free(o), free(r);
    ws_fini(&w);
}

Test(lora_runs, resume_with_accumulation_and_gradient_checkpointing_is_bit_exact, .timeout = 120) {
    Ws w;
    lws_init(&w);
    const char *extra[] = {"per_device_train_batch_size=2", "gradient_accumulation_steps=2", "gradient_checkpointing=true"};
    resume_case(&w, extra, 3, false);
    char *o = read_log(&w, "res", "out");
    cr_assert_not_null(strstr(o, "= 2 x 1 x 2 = 4"), "not 2 micro-batches of 2: %s", o);
    cr_assert_not_null(strstr(o, "recompute every 1 layer"), "no gradient checkpointing: %s", o);
    free(o);
    ws_fini(&w);
}

/* exact PiSSA, stopped by SIGTERM while the SVD runs: checkpoint-0 holds the initial adapter, and a
 * run resumed from it into another output_dir is the unbroken run (the residual base is rebuilt
 * from the checkpoint, never the SVD taken again of the residual) */
Test(lora_runs, pissa_resumed_from_checkpoint_0_is_the_unbroken_run, .timeout = 120) {
    Ws w;
    lws_init(&w);
    write_llama_json(&w, "mid.json", 256, 512, 0); /* an exact SVD of ~0.3 s: a wide window for the signal */
    make_base(&w, "mid.json", "midbase");
    const char *common[] = {kv("model", wpath(&w, "midbase")), "lora.init_lora_weights=pissa", "lora.lora_dropout=0",
                            "max_steps=3", "save_steps=0"};
    const char *sets[8];
    int n = 0;
    for (int i = 0; i < 5; i++) sets[n++] = common[i];
    sets[n] = kv("output_dir", wpath(&w, "ref"));
    expect_exit(&w, "ref", run_cfg(&w, w.cfg, "ref", sets, n + 1), 0);
    bool got = false;
    char killed[300];
    for (int attempt = 0; attempt < 5 && !got; attempt++) {
        snprintf(killed, sizeof killed, "%s/killed%d", w.dir, attempt);
        sets[n] = kv("output_dir", killed);
        Proc p;
        start_v(&p, &w, w.cfg, NULL, "killed", sets, n + 1);
        /* the base is loaded just before the SVD: signal then */
        for (int i = 0; i < 20000; i++) {
            char *o = read_log(&w, "killed", "out");
            bool seen = strstr(o, "initialised from") != NULL;
            free(o);
            if (seen) break;
            int st;
            if (waitpid(p.pid, &st, WNOHANG) != 0) cr_assert_fail("the run ended before loading its base");
            sleep_s(0.0005);
        }
        kill(p.pid, SIGTERM);
        expect_exit(&w, "killed", wait_proc(&p), 0);
        got = exists(J(killed, "checkpoint-0"));
    }
    cr_assert(got, "5 SIGTERMs during loading left no checkpoint-0");
    char ck[320];
    snprintf(ck, sizeof ck, "%s/checkpoint-0", killed);
    sets[n] = kv("output_dir", wpath(&w, "res"));
    sets[n + 1] = kv("resume_from_checkpoint", ck);
    expect_exit(&w, "res", run_cfg(&w, w.cfg, "res", sets, n + 2), 0);
    char ref[300], res[300];
    snprintf(ref, sizeof ref, "%s/ref", w.dir);
    snprintf(res, sizeof res, "%s/res", w.dir);
    Losses a, b;
    read_train_metrics(ref, &a);
    read_train_metrics(res, &b);
    cr_assert_eq(b.n, 3);
    for (int s = 0; s < 3; s++)
        cr_assert(a.loss[s] == b.loss[s], "step %d: loss %.17g unbroken, %.17g resumed from checkpoint-0", s + 1, a.loss[s],
                  b.loss[s]);
    expect_same_file(J(ref, "adapter_model.safetensors"), J(res, "adapter_model.safetensors"));
    expect_same_file(J(J(ref, "pissa_init"), "adapter_model.safetensors"),
                     J(J(res, "pissa_init"), "adapter_model.safetensors"));
    ws_fini(&w);
}

/* pissa_niter_0 (PEFT: any nonnegative number of iterations) runs, and the initial adapter it
 * writes says so and reads back (a run config and adapter_config.json accept the same values) */
Test(lora_runs, pissa_niter_0_writes_an_initial_adapter_that_reads_back, .timeout = 60) {
    Ws w;
    lws_init(&w);
    const char *sets[] = {kv("output_dir", wpath(&w, "ref")), "lora.init_lora_weights=pissa_niter_0", "max_steps=2",
                          "save_steps=0"};
    expect_exit(&w, "ref", run_cfg(&w, w.cfg, "ref", sets, 4), 0);
    char init[300];
    snprintf(init, sizeof init, "%s/ref/pissa_init", w.dir);
    cJSON *j = read_json(J(init, "adapter_config.json"));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "init_lora_weights");
    cr_assert(cJSON_IsString(v) && strcmp(v->valuestring, "pissa_niter_0") == 0, "%s: init_lora_weights", init);
    cJSON_Delete(j);
    cr_assert_eq(adapter_r(J(w.dir, "ref")), 2 * R);
    /* and it continues as an adapter (init_from reads it back through adapter_config.json) */
    write_init_configs(&w);
    const char *cont[] = {kv("lora.init_from", init), kv("output_dir", wpath(&w, "cont")), "max_steps=1"};
    expect_exit(&w, "cont", run_cfg(&w, wpath(&w, "init.yaml"), "cont", cont, 3), 0);
    ws_fini(&w);
}

/* gtrain sample on a LoRA run's output directory (its base_model_name_or_path with the adapter on)
 * continues a prompt greedily as gtrain merge's merged model does (merge is checked against a
 * float64 PyTorch merge in test_merge.c): a plain LoRA run, and a PiSSA run's rank-2r conversion
 * on the original base */
Test(lora_runs, sample_on_the_adapter_equals_sample_on_the_merged_model, .timeout = 120) {
    Ws w;
    lws_init(&w);
    for (int pissa = 0; pissa <= 1; pissa++) {
        char out[64], merged[64], tag[32];
        snprintf(out, sizeof out, "run%d", pissa);
        snprintf(merged, sizeof merged, "merged%d", pissa);
        snprintf(tag, sizeof tag, "run%d", pissa);
        const char *sets[] = {kv("output_dir", wpath(&w, out)), "max_steps=4", "save_steps=0",
                              pissa ? "lora.init_lora_weights=pissa_niter_2" : "lora.init_lora_weights=true"};
        expect_exit(&w, tag, run_cfg(&w, w.cfg, tag, sets, 4), 0);
        char cmd[2048], a[400], b[400];
        snprintf(cmd, sizeof cmd, "'%s' merge --base '%s' --adapter '%s' --out '%s' >/dev/null 2>&1", test_gtrain_bin(),
                 wpath(&w, "base"), wpath(&w, out), wpath(&w, merged));
        cr_assert_eq(system(cmd), 0, "gtrain merge of %s failed", out);
        snprintf(a, sizeof a, "%s/sample-%s.txt", w.dir, out);
        snprintf(b, sizeof b, "%s/sample-%s.txt", w.dir, merged);
        const char *dirs[2] = {out, merged}, *files[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            snprintf(cmd, sizeof cmd, "'%s' sample --checkpoint '%s' --prompt 'the king ' --max-new-tokens 24 "
                     "--temperature 0 > '%s' 2>/dev/null", test_gtrain_bin(), wpath(&w, dirs[k]), files[k]);
            cr_assert_eq(system(cmd), 0, "gtrain sample --checkpoint %s failed", dirs[k]);
        }
        size_t na = 0, nb = 0;
        char *ta = slurp(a, &na), *tb = slurp(b, &nb);
        cr_assert(na > strlen("the king "), "%s: no sample", a);
        cr_assert(na == nb && memcmp(ta, tb, na) == 0, "%s: the adapter's sample\n%.*s\nthe merged model's\n%.*s", out,
                  (int)na, ta, (int)nb, tb);
        /* and the adapter matters: the base alone continues otherwise (else this test could not fail) */
        char c[400];
        snprintf(c, sizeof c, "%s/sample-base.txt", w.dir);
        snprintf(cmd, sizeof cmd, "'%s' sample --checkpoint '%s' --prompt 'the king ' --max-new-tokens 24 "
                 "--temperature 0 > '%s' 2>/dev/null", test_gtrain_bin(), wpath(&w, "base"), c);
        cr_assert_eq(system(cmd), 0, "gtrain sample --checkpoint base failed");
        size_t nc = 0;
        char *tc = slurp(c, &nc);
        cr_assert(nc != na || memcmp(tc, ta, na) != 0, "%s: the adapter's sample is the base's:\n%.*s", out, (int)na, ta);
        free(ta), free(tb), free(tc);
    }
    ws_fini(&w);
}

/* ---------------------------------------------------------------- 2. data parallel */

typedef struct {
    char mpirun[512];
} Mpi;

static void need_mpi(Mpi *m) {
    const char *path = getenv("PATH");
    bool found = false;
    char *copy = strdup(path ? path : ""), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        snprintf(m->mpirun, sizeof m->mpirun, "%s/mpirun", *d ? d : ".");
        found = access(m->mpirun, X_OK) == 0;
    }
    free(copy);
    if (!found) cr_skip_test("mpirun not found on PATH (install openmpi-bin)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null | grep -q 'dist:.*mpi'", test_gtrain_bin());
    if (system(cmd) != 0) cr_skip_test("gtrain --version does not list mpi (built with MPI=0)");
}

/* 2 ranks under mpirun (as test_dist.c launches them), stdout/stderr to dir/tag.{out,err}; the
 * whole process group is killed after limit_s */
static int run_mpi(const Ws *w, const Mpi *m, const char *tag, const char *const *sets, int n, double limit_s) {
    char out[320], err[320];
    snprintf(out, sizeof out, "%s/%s.out", w->dir, tag);
    snprintf(err, sizeof err, "%s/%s.err", w->dir, tag);
    const char *argv[64];
    int a = 0;
    const char *pre[] = {m->mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS=1",
                         "-x", "ASAN_OPTIONS=detect_leaks=0", test_gtrain_bin(), "--config", w->cfg};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) argv[a++] = pre[i];
    for (int i = 0; i < n && a < 60; i++) argv[a++] = "--set", argv[a++] = sets[i];
    argv[a] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid);
    const double t0 = now_s();
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) break;
        cr_assert(r == 0 || errno == EINTR, "waitpid: %s", strerror(errno));
        if (now_s() - t0 > limit_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            cr_assert_fail("%s: mpirun still running after %.0f s", tag, limit_s);
        }
        sleep_s(0.01);
    }
    return st;
}

/* test_dist.c's bound: float32 rounding of sums taken in another order, grown over the steps */
#define LOSS_RTOL 1e-5

static void expect_same_losses(const char *what, const Losses *a, const Losses *b) {
    cr_assert_eq(a->n, b->n, "%s: %d and %d steps", what, a->n, b->n);
    for (int s = 0; s < a->n; s++) {
        cr_assert_leq(fabs(a->loss[s] - b->loss[s]), LOSS_RTOL * fmax(1.0, fabs(a->loss[s])),
                      "%s: step %d: loss %.9g vs %.9g", what, s + 1, a->loss[s], b->loss[s]);
        cr_assert_leq(fabs(a->grad_norm[s] - b->grad_norm[s]), LOSS_RTOL * a->grad_norm[s],
                      "%s: step %d: grad norm %.9g vs %.9g", what, s + 1, a->grad_norm[s], b->grad_norm[s]);
        cr_assert_eq(a->num_items[s], b->num_items[s], "%s: step %d: num_items", what, s + 1);
        cr_assert_eq(a->effective_batch[s], b->effective_batch[s], "%s: step %d: effective batch", what, s + 1);
    }
}

/* The same adapter, element by element, to 1e-4 of its largest element: AdamW divides each
 * gradient by its own running RMS, so an element whose gradient is near zero can move by a few
 * times the float rounding of the other order of summation (measured: 5.4e-7 of 0.147, 1 rank
 * against 2, plain and ZeRO-1 alike); what the adapter does is checked by the final eval loss. */
#define ADAPTER_RTOL 1e-4

static void expect_same_adapter(const char *what, const char *da, const char *db) {
    double scale, d = adapter_diff(J(da, "adapter_model.safetensors"), J(db, "adapter_model.safetensors"),
                                   &scale);
    cr_assert_gt(scale, 0);
    cr_assert_leq(d, ADAPTER_RTOL * scale, "%s: adapters differ by %.3g (largest element %.3g)", what, d, scale);
    cr_log_info("%s: adapters differ by at most %.3g (largest element %.3g)", what, d, scale);
}

/* 1 rank x 4 against 2 ranks x 2 (plain) and a second 2-rank layout (ZeRO-1: 2 x 2, or with
 * accumulate 2 x 1 x 2 accumulation steps), drop the --set of lora.lora_dropout:
 * the same losses, gradient norms, final eval loss and adapter (the one rank's in w/one) */
static void two_ranks_match_one(Ws *w, const Mpi *m, const char *drop, bool accumulate) {
    const char *one[] = {kv("output_dir", wpath(w, "one")), drop, "per_device_train_batch_size=4", "save_steps=0"};
    expect_exit(w, "one", run_cfg(w, w->cfg, "one", one, 4), 0);
    const char *two[] = {kv("output_dir", wpath(w, "two")), drop, "per_device_train_batch_size=2", "save_steps=0",
                         "zero_stage=0", "gradient_accumulation_steps=1"};
    expect_exit(w, "two", run_mpi(w, m, "two", two, 6, 120), 0);
    two[0] = kv("output_dir", wpath(w, "zero1"));
    two[4] = "zero_stage=1";
    if (accumulate) two[2] = "per_device_train_batch_size=1", two[5] = "gradient_accumulation_steps=2";
    expect_exit(w, "zero1", run_mpi(w, m, "zero1", two, 6, 120), 0);
    char *o = read_log(w, "zero1", "out");
    const char *layout = accumulate ? "= 1 x 2 x 2 = 4" : "= 2 x 2 x 1 = 4";
    cr_assert_not_null(strstr(o, layout), "not %s: %s", layout, o);
    cr_assert_not_null(strstr(o, "ZeRO-1"), "no ZeRO-1 optimizer shards: %s", o);
    free(o);
    char what[2][160];
    snprintf(what[0], sizeof what[0], "1 rank x 4 vs 2 ranks x 2, %s", drop);
    snprintf(what[1], sizeof what[1], "1 rank x 4 vs 2 ranks x %s, ZeRO-1, %s", accumulate ? "1 x 2 steps" : "2", drop);
    Losses l1, l2, lz;
    read_train_metrics(wpath(w, "one"), &l1);
    read_train_metrics(wpath(w, "two"), &l2);
    read_train_metrics(wpath(w, "zero1"), &lz);
    cr_assert_eq(l1.n, STEPS);
    expect_same_losses(what[0], &l1, &l2);
    expect_same_losses(what[1], &l1, &lz);
    double worst = 0;
    for (int s = 0; s < l1.n; s++)
        worst = fmax(worst, fmax(fabs(l1.loss[s] - l2.loss[s]), fabs(l1.loss[s] - lz.loss[s])) / fabs(l1.loss[s]));
    cr_log_info("%s: losses within %.3g (relative) over %d steps", what[1], worst, l1.n);
    /* the final eval: what the saved adapter does, over the same validation windows */
    cr_assert(l1.n_eval == 1 && l2.n_eval == 1 && lz.n_eval == 1, "one eval at the end of each run");
    cr_assert_leq(fabs(l1.eval_loss[0] - l2.eval_loss[0]), LOSS_RTOL * l1.eval_loss[0], "%s: eval loss %.9g vs %.9g",
                  what[0], l1.eval_loss[0], l2.eval_loss[0]);
    cr_assert_leq(fabs(l1.eval_loss[0] - lz.eval_loss[0]), LOSS_RTOL * l1.eval_loss[0], "%s: eval loss %.9g vs %.9g",
                  what[1], l1.eval_loss[0], lz.eval_loss[0]);
    expect_adapter_dir(wpath(w, "two"));
    expect_adapter_dir(wpath(w, "zero1"));
    expect_same_adapter(what[0], wpath(w, "one"), wpath(w, "two"));
    expect_same_adapter(what[1], wpath(w, "one"), wpath(w, "zero1"));
}

Test(lora_runs, two_ranks_equal_one_rank_with_the_same_effective_batch, .timeout = 180) {
    Mpi m;
    need_mpi(&m);
    Ws w;
    lws_init(&w);
    two_ranks_match_one(&w, &m, "lora.lora_dropout=0", false);
    ws_fini(&w);
}

/* with dropout: rank r's micro-batch a drops its rows as rows (a * world + r) * B .. of the step's
 * batch, which the one rank's micro-batch holds at the same place, so the masks are the one
 * rank's; and the dropout is live (the adapter differs from the dropout-0 run's, far beyond the
 * bound) */
Test(lora_runs, two_ranks_equal_one_rank_with_dropout, .timeout = 240) {
    Mpi m;
    need_mpi(&m);
    Ws w;
    lws_init(&w);
    two_ranks_match_one(&w, &m, "lora.lora_dropout=0.1", true);
    const char *nodrop[] = {kv("output_dir", wpath(&w, "nodrop")), "lora.lora_dropout=0",
                            "per_device_train_batch_size=4", "save_steps=0"};
    expect_exit(&w, "nodrop", run_cfg(&w, w.cfg, "nodrop", nodrop, 4), 0);
    double scale, d = adapter_diff(J(wpath(&w, "one"), "adapter_model.safetensors"),
                                   J(wpath(&w, "nodrop"), "adapter_model.safetensors"), &scale);
    cr_assert_gt(d, 100 * ADAPTER_RTOL * scale, "lora_dropout 0.1 and 0 trained adapters within %.3g (largest %.3g): "
                 "dropout is not applied", d, scale);
    ws_fini(&w);
}

/* ZeRO-1 gathers the adapters' AdamW shards into the checkpoint and scatters them on resume */
Test(lora_runs, two_rank_zero1_resume_with_dropout_is_bit_exact, .timeout = 180) {
    Mpi m;
    need_mpi(&m);
    Ws w;
    lws_init(&w);
    char ck[320];
    snprintf(ck, sizeof ck, "%s/ref/checkpoint-%d", w.dir, SAVE);
    const char *sets[] = {kv("output_dir", wpath(&w, "ref")), "per_device_train_batch_size=2", "zero_stage=1",
                          "resume_from_checkpoint="};
    expect_exit(&w, "ref", run_mpi(&w, &m, "ref", sets, 3, 120), 0);
    sets[0] = kv("output_dir", wpath(&w, "res"));
    sets[3] = kv("resume_from_checkpoint", ck);
    expect_exit(&w, "res", run_mpi(&w, &m, "res", sets, 4, 120), 0);
    char ref[300], res[300];
    snprintf(ref, sizeof ref, "%s/ref", w.dir);
    snprintf(res, sizeof res, "%s/res", w.dir);
    expect_same_file(J(ref, "adapter_model.safetensors"), J(res, "adapter_model.safetensors"));
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/checkpoint-%d/optimizer.safetensors", ref, STEPS);
    snprintf(b, sizeof b, "%s/checkpoint-%d/optimizer.safetensors", res, STEPS);
    expect_same_file(a, b);
    Dims d = llama_dims(wpath(&w, "model.json"));
    expect_lora_checkpoint(ck, &d, R, R, wpath(&w, "base"));
    ws_fini(&w);
}
