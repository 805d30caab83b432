/* test_dist.c - data parallel (src/run/dist.c), on the CPU.
 *
 * 1. In process: rank discovery from the environment (world 1 needs no launcher; bad values and
 *    world > 1 without a usable launcher are refused with one line).
 * 2. build/dist_probe under `mpirun --allow-run-as-root --oversubscribe -np 2`: every collective
 *    against closed-form sums; the bf16 sums (ddp_grad_dtype bf16) bit for bit against rounding in
 *    double; a collective timeout; a killed rank; a failing rank. Each must end
 *    within a bounded time with a message naming the rank. Skipped when built with MPI=0, or when
 *    mpirun or the probe is missing.
 * 3. End to end through gtrain (skipped until `gtrain --version` lists "mpi"): the losses of
 *    1 rank x (B, 2A), 2 ranks x (B, A) and 1 rank x (2B, A) agree to float32 rounding; ZeRO-1
 *    equals plain data parallel; ddp_grad_dtype bf16 stays within a stated tolerance of fp32 (and
 *    its ZeRO-1 equals its plain run); a bad ddp_grad_dtype is refused with one line, exit 2; a
 *    killed rank or a rank with a bad file ends the job non-zero,
 *    in bounded time, naming the rank. */
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <criterion/criterion.h>

#include "test_util.h"
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"
#include "test_backend_select.h"

/* ------------------------------------------------------------------------------ helpers */

static void clear_launcher_env(void) {
    static const char *const names[] = {
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD",
        "PMIX_RANK", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "RANK", "WORLD_SIZE",
        "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unsetenv(names[i]);
}

/* A path to an executable named name on PATH, into out; false if none. */
static bool which(const char *name, char *out, size_t cap) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char *copy = gt_xstrdup(path), *save = NULL;
    bool found = false;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        snprintf(out, cap, "%s/%s", *dir ? dir : ".", name);
        found = access(out, X_OK) == 0;
    }
    free(copy);
    return found;
}

typedef struct {
    int status;      /* waitpid status */
    double elapsed;  /* seconds */
    bool hung;       /* killed by us after the hard limit */
    char out[1 << 16], err[1 << 16];
} Run;

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    unlink(path);
}

/* Run argv in its own process group with stdout/stderr captured; kill the group after limit_s. */
static void run_cmd(char *const argv[], double limit_s, Run *r) {
    char out_path[64], err_path[64];
    snprintf(out_path, sizeof out_path, "/tmp/gtrain-dist-out-%d", (int)getpid());
    snprintf(err_path, sizeof err_path, "/tmp/gtrain-dist-err-%d", (int)getpid());
    double t0 = gt_now_seconds();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        setpgid(0, 0);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid);
    r->hung = false;
    for (;;) {
        pid_t w = waitpid(pid, &r->status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (gt_now_seconds() - t0 > limit_s && !r->hung) {
            r->hung = true;
            kill(-pid, SIGKILL);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    r->elapsed = gt_now_seconds() - t0;
    slurp(out_path, r->out, sizeof r->out);
    slurp(err_path, r->err, sizeof r->err);
}

static int exit_code(const Run *r) { return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status); }

typedef struct {
    char mpirun[GT_PATH_MAX];
    char probe[GT_PATH_MAX];
} MpiTools;

/* Skip unless built with MPI and both mpirun and build/dist_probe exist. */
static void need_mpi(MpiTools *t, bool need_probe) {
#ifndef GT_HAVE_MPI
    cr_skip_test("built without MPI (make MPI=1)");
#endif
    if (!which("mpirun", t->mpirun, sizeof t->mpirun)) cr_skip_test("mpirun not found on PATH (install openmpi-bin)");
    const char *bin = test_gtrain_bin();
    if (!bin || !*bin) cr_skip_test("GTRAIN_BIN is not set (run through make test)");
    char *copy = gt_xstrdup(bin);
    snprintf(t->probe, sizeof t->probe, "%s/dist_probe", dirname(copy));
    free(copy);
    if (need_probe && access(t->probe, X_OK) != 0) cr_skip_test("%s not built (make %s)", t->probe, "dist_probe");
}

/* LSan off in the ranks only: Open MPI's MPI_Init keeps allocations to the end (make test-asan) */
#define MPIRUN_ARGS(t)                                                                                      \
    (t)->mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS=1", "-x", \
        "ASAN_OPTIONS=detect_leaks=0"

/* ------------------------------------------------------------------------------ 1. environment */

Test(dist, world1_without_launcher) {
    clear_launcher_env();
    Dist *d = NULL;
    GtError e = {0};
    cr_assert_eq(dist_init(&d, NULL, NULL, 5, &e), 0, "%s", e.msg);
    cr_expect_eq(dist_world(d), 1);
    cr_expect_eq(dist_rank(d), 0);
    cr_expect_eq(dist_local_rank(d), 0);
    cr_expect_str_eq(dist_transport(d), "none");
    float f[3] = {1, 2, 3};
    int64_t n = 9;
    cr_expect_eq(dist_allreduce_f32(d, f, 3, &e), 0);
    cr_expect_eq(dist_allreduce_f32_start(d, f, 3, &e), 0);
    cr_expect_eq(dist_wait_all(d, &e), 0);
    cr_expect_eq(dist_allreduce_i64(d, &n, 1, &e), 0);
    cr_expect(f[0] == 1 && f[1] == 2 && f[2] == 3 && n == 9, "world 1 collectives must not change the data");
    dist_finalize(d);
    dist_finalize(NULL);
}

Test(dist, world1_from_torchrun_and_slurm_env) {
    clear_launcher_env();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    Dist *d = NULL;
    GtError e = {0};
    cr_assert_eq(dist_init(&d, NULL, NULL, 5, &e), 0, "%s", e.msg);
    cr_expect_eq(dist_world(d), 1);
    dist_finalize(d);
    clear_launcher_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_LOCALID", "0", 1);
    cr_assert_eq(dist_init(&d, NULL, NULL, 5, &e), 0, "%s", e.msg);
    cr_expect_eq(dist_world(d), 1);
    cr_expect_str_eq(dist_transport(d), "none");
    dist_finalize(d);
}

Test(dist, world2_without_mpi_launcher_is_refused) {
    clear_launcher_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    Dist *d = NULL;
    GtError e = {0};
    cr_assert_eq(dist_init(&d, NULL, NULL, 5, &e), -1);
    cr_expect_null(d);
    cr_expect_null(strchr(e.msg, '\n'));
    cr_expect(strstr(e.msg, "rank 1") != NULL, "message does not name the rank: %s", e.msg);
    cr_expect(strstr(e.msg, "world size 2") != NULL, "%s", e.msg);
#if defined(GT_HAVE_MPI) || defined(GT_HAVE_NCCL)
    cr_expect(strstr(e.msg, "mpirun") != NULL, "message does not say how to launch: %s", e.msg);
#else
    cr_expect(strstr(e.msg, "built without MPI (make MPI=1)") != NULL, "%s", e.msg);
#endif
}

#ifdef GT_HAVE_NCCL
/* srun alone: world 2 from the environment with a local rank is accepted for NCCL ("env"), and
 * every host collective of dist.c refuses (it would otherwise silently do nothing) */
Test(dist, world2_without_mpi_is_env_for_nccl) {
    clear_launcher_env();
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", "1", 1);
    Dist *d = NULL;
    GtError e = {0};
    cr_assert_eq(dist_init(&d, NULL, NULL, 5, &e), 0, "%s", e.msg);
    cr_expect_str_eq(dist_transport(d), "env");
    cr_expect_eq(dist_world(d), 2);
    cr_expect_eq(dist_local_rank(d), 1);
    double v = 1.0;
    cr_expect_eq(dist_allreduce_f64(d, &v, 1, &e), -1);
    cr_expect(strstr(e.msg, "needs MPI") != NULL, "%s", e.msg);
    dist_finalize(d);
}
#endif

Test(dist, bad_environment_values) {
    static const struct {
        const char *k1, *v1, *k2, *v2, *want;
    } cases[] = {
        {"WORLD_SIZE", "abc", "RANK", "0", "WORLD_SIZE"},
        {"WORLD_SIZE", "0", "RANK", "0", "WORLD_SIZE"},
        {"WORLD_SIZE", "2", "RANK", "2", "not below"},
        {"WORLD_SIZE", "2", "RANK", "-1", "RANK"},
        {"SLURM_PROCID", "0", NULL, NULL, "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_RANK"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_launcher_env();
        setenv(cases[i].k1, cases[i].v1, 1);
        if (cases[i].k2) setenv(cases[i].k2, cases[i].v2, 1);
        Dist *d = NULL;
        GtError e = {0};
        cr_expect_eq(dist_init(&d, NULL, NULL, 5, &e), -1, "case %zu accepted", i);
        cr_expect_eq(e.code, GT_EXIT_BAD_INPUT, "case %zu: %s", i, e.msg);
        cr_expect(strstr(e.msg, cases[i].want) != NULL, "case %zu: expected '%s' in: %s", i, cases[i].want, e.msg);
        dist_finalize(d);
    }
}

Test(dist, built_list) {
#if defined(GT_HAVE_MPI) && defined(GT_HAVE_NCCL)
    cr_expect_str_eq(dist_built(), "mpi nccl");
#elif defined(GT_HAVE_MPI)
    cr_expect_str_eq(dist_built(), "mpi");
#elif defined(GT_HAVE_NCCL)
    cr_expect_str_eq(dist_built(), "nccl");
#else
    cr_expect_str_eq(dist_built(), "none");
#endif
}

/* ------------------------------------------------------------------------------ 2. the probe */

Test(dist_mpi, probe_world1_needs_no_launcher) {
    MpiTools t;
    need_mpi(&t, true);
    clear_launcher_env();
    char *argv[] = {t.probe, "world1", NULL};
    static Run r;
    run_cmd(argv, 30, &r);
    cr_assert_eq(exit_code(&r), 0, "exit %d\nstdout: %s\nstderr: %s", exit_code(&r), r.out, r.err);
    cr_expect(strstr(r.out, "world 1: all") != NULL, "%s", r.out);
}

Test(dist_mpi, probe_collectives_two_ranks) {
    MpiTools t;
    need_mpi(&t, true);
    char *argv[] = {MPIRUN_ARGS(&t), t.probe, "collectives", NULL};
    static Run r;
    run_cmd(argv, 120, &r);
    cr_assert_not(r.hung, "mpirun hung; stderr: %s", r.err);
    cr_assert_eq(exit_code(&r), 0, "exit %d\nstdout: %s\nstderr: %s", exit_code(&r), r.out, r.err);
    cr_expect(strstr(r.out, "rank 0 of 2: all") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "rank 1 of 2: all") != NULL, "%s", r.out);
}

/* ddp_grad_dtype bf16: each of 2^20 + ~2.3M values summed over 2 ranks (started buckets, and ZeRO-1's
 * reduce-scatter) equals, bit for bit, bf16(bf16(g0) + bf16(g1)) computed in double by the probe */
Test(dist_mpi, probe_bf16_sums_two_ranks) {
    MpiTools t;
    need_mpi(&t, true);
    char *argv[] = {MPIRUN_ARGS(&t), t.probe, "bf16", NULL};
    static Run r;
    run_cmd(argv, 120, &r);
    cr_assert_not(r.hung, "mpirun hung; stderr: %s", r.err);
    cr_assert_eq(exit_code(&r), 0, "exit %d\nstdout: %s\nstderr: %s", exit_code(&r), r.out, r.err);
    cr_expect(strstr(r.out, "rank 0 of 2: bf16: all") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "rank 1 of 2: bf16: all") != NULL, "%s", r.out);
}

Test(dist_mpi, probe_timeout_aborts_naming_the_rank) {
    MpiTools t;
    need_mpi(&t, true);
    const double timeout = 2, grace = 10;
    char *argv[] = {MPIRUN_ARGS(&t), t.probe, "timeout", "2", "60", NULL};
    static Run r;
    run_cmd(argv, 90, &r);
    cr_assert_not(r.hung, "mpirun hung; stderr: %s", r.err);
    cr_expect_neq(exit_code(&r), 0, "a timed-out job must exit non-zero");
    cr_expect(strstr(r.err, "gtrain: rank 0: all-reduce of 16 floats timed out after 2 s waiting for the other ranks") != NULL,
              "stderr: %s", r.err);
    cr_expect(strstr(r.out, "completed") == NULL, "stdout: %s", r.out);
    cr_expect_lt(r.elapsed, timeout + grace, "the job took %.1f s (timeout %.0f s)", r.elapsed, timeout);
    cr_expect_geq(r.elapsed, timeout, "the job ended after %.1f s, before the timeout", r.elapsed);
}

Test(dist_mpi, probe_killed_rank_ends_the_job) {
    MpiTools t;
    need_mpi(&t, true);
    char *argv[] = {MPIRUN_ARGS(&t), t.probe, "kill", NULL};
    static Run r;
    run_cmd(argv, 90, &r);
    cr_assert_not(r.hung, "mpirun hung; stderr: %s", r.err);
    cr_expect_neq(exit_code(&r), 0);
    /* Open MPI: "mpirun noticed that process rank 1 with PID ... exited on signal 9 (Killed)." */
    cr_expect(strstr(r.err, "rank 1") != NULL, "stderr does not name rank 1: %s", r.err);
    cr_expect(strstr(r.out, "completed") == NULL, "stdout: %s", r.out);
    /* rank 0 waits with a 120 s timeout: the launcher, not the timeout, must end it */
    cr_expect_lt(r.elapsed, 30.0, "the job took %.1f s to end after a rank was killed", r.elapsed);
}

Test(dist_mpi, probe_failing_rank_ends_the_job) {
    MpiTools t;
    need_mpi(&t, true);
    char *argv[] = {MPIRUN_ARGS(&t), t.probe, "fail", NULL};
    static Run r;
    run_cmd(argv, 90, &r);
    cr_assert_not(r.hung, "mpirun hung; stderr: %s", r.err);
    cr_expect_eq(exit_code(&r), GT_EXIT_BAD_INPUT, "exit %d; stderr: %s", exit_code(&r), r.err);
    cr_expect(strstr(r.err, "gtrain: rank 1: probe.bin: cannot open") != NULL, "stderr: %s", r.err);
    cr_expect_lt(r.elapsed, 30.0, "the job took %.1f s to end after a rank failed", r.elapsed);
}

/* ------------------------------------------------------------------------------ 3. end to end */

typedef struct {
    char bin[GT_PATH_MAX], root[GT_PATH_MAX], config[GT_PATH_MAX], tmp[64];
    MpiTools mpi;
} E2E;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* Skip until the trainer is built with MPI and integrated (gtrain --version lists "mpi"). */
static void need_e2e(E2E *x) {
    need_mpi(&x->mpi, false);
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!root || !*root) cr_skip_test("GTRAIN_ROOT is not set (run through make test)");
    snprintf(x->bin, sizeof x->bin, "%s", bin);
    snprintf(x->root, sizeof x->root, "%s", root);
    snprintf(x->config, sizeof x->config, "%s/tests/fixtures/dist/run.yaml", root);
    char *argv[] = {x->bin, "--version", NULL};
    static Run r;
    run_cmd(argv, 30, &r);
    if (exit_code(&r) != 0 || !strstr(r.out, "mpi"))
        cr_skip_test("gtrain --version does not list mpi yet (trainer not integrated, or built with MPI=0): %s", r.out);
    snprintf(x->tmp, sizeof x->tmp, "/tmp/gtrain-dist-XXXXXX");
    cr_assert_not_null(mkdtemp(x->tmp));
}

static void e2e_cleanup(E2E *x) { nftw(x->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* One training run: ranks 1 (plain process) or 2 (mpirun); extra: one or two --set pairs (a space
 * between two). Returns its output. */
static const Run *train(E2E *x, const char *name, int ranks, int B, int A, const char *extra, Losses *l) {
    char out_dir[GT_PATH_MAX], s_out[GT_PATH_MAX + 16], s_b[64], s_a[64], s_x[128];
    snprintf(out_dir, sizeof out_dir, "%s/%s", x->tmp, name);
    snprintf(s_out, sizeof s_out, "output_dir=%s", out_dir);
    snprintf(s_b, sizeof s_b, "per_device_train_batch_size=%d", B);
    snprintf(s_a, sizeof s_a, "gradient_accumulation_steps=%d", A);
    snprintf(s_x, sizeof s_x, "%s", extra ? extra : "zero_stage=0");
    char *s_y = strchr(s_x, ' '); /* the second pair, if any */
    if (s_y) *s_y++ = '\0';
    setenv("OMP_NUM_THREADS", "1", 1);
    static Run r;
    char *launch[] = {MPIRUN_ARGS(&x->mpi)}, *argv[32];
    int n = 0;
    if (ranks == 1)
        clear_launcher_env();
    else
        for (size_t i = 0; i < sizeof launch / sizeof launch[0]; i++) argv[n++] = launch[i];
    char *run[] = {x->bin, "--config", x->config, "--set", s_out, "--set", s_b, "--set", s_a, "--set", s_x};
    for (size_t i = 0; i < sizeof run / sizeof run[0]; i++) argv[n++] = run[i];
    if (s_y) {
        argv[n++] = "--set";
        argv[n++] = s_y;
    }
    argv[n] = NULL;
    run_cmd(argv, 300, &r);
    cr_assert_not(r.hung, "[%s] hung; stderr: %s", name, r.err);
    cr_assert_eq(exit_code(&r), 0, "[%s] exit %d\nstdout: %s\nstderr: %s", name, exit_code(&r), r.out, r.err);
    read_train_metrics(out_dir, l);
    cr_assert_eq(l->n, 5, "[%s] %d train records, expected 5", name, l->n);
    return &r;
}

/* float32 rounding of sums taken in another order, grown over 5 AdamW steps */
#define LOSS_RTOL 1e-5

static void expect_same_losses(const char *what, const Losses *a, const Losses *b) {
    for (int s = 0; s < a->n; s++) {
        double tol = LOSS_RTOL * fmax(1.0, fabs(a->loss[s]));
        cr_expect_leq(fabs(a->loss[s] - b->loss[s]), tol, "%s: step %d: loss %.9g vs %.9g", what, s + 1, a->loss[s],
                      b->loss[s]);
        cr_expect_eq(a->num_items[s], b->num_items[s], "%s: step %d: num_items %ld vs %ld", what, s + 1, a->num_items[s],
                     b->num_items[s]);
        cr_expect_eq(a->effective_batch[s], b->effective_batch[s], "%s: step %d: effective_batch", what, s + 1);
        /* AdamW and clipping hide a gradient off by a constant factor: its norm (before clipping) does not */
        cr_expect_leq(fabs(a->grad_norm[s] - b->grad_norm[s]), LOSS_RTOL * a->grad_norm[s],
                      "%s: step %d: grad norm %.9g vs %.9g", what, s + 1, a->grad_norm[s], b->grad_norm[s]);
    }
}

Test(dist_e2e, splits_of_the_global_batch_agree, .timeout = 900) {
    E2E x;
    need_e2e(&x);
    Losses acc, dp, big;
    train(&x, "1rank-B2-A2", 1, 2, 2, NULL, &acc);
    train(&x, "2rank-B2-A1", 2, 2, 1, NULL, &dp);
    train(&x, "1rank-B4-A1", 1, 4, 1, NULL, &big);
    expect_same_losses("1 rank x (B, 2A) vs 2 ranks x (B, A)", &acc, &dp);
    expect_same_losses("1 rank x (2B, A) vs 2 ranks x (B, A)", &big, &dp);
    cr_expect_eq(dp.effective_batch[0], 4, "effective batch = 2 x 2 x 1");
    e2e_cleanup(&x);
}

/* HF's "steps" normalisation averages over ranks as DDP does: 2 ranks x (B, A) is 1 rank x (B, 2A) */
Test(dist_e2e, steps_normalisation_averages_over_ranks, .timeout = 900) {
    E2E x;
    need_e2e(&x);
    Losses one, two;
    train(&x, "1rank-steps", 1, 2, 2, "loss_normalization=steps", &one);
    train(&x, "2rank-steps", 2, 2, 1, "loss_normalization=steps", &two);
    expect_same_losses("steps: 1 rank x (B, 2A) vs 2 ranks x (B, A)", &one, &two);
    e2e_cleanup(&x);
}

Test(dist_e2e, zero1_equals_plain_data_parallel, .timeout = 900) {
    E2E x;
    need_e2e(&x);
    Losses z0, z1;
    train(&x, "2rank-zero0", 2, 2, 2, "zero_stage=0", &z0);
    train(&x, "2rank-zero1", 2, 2, 2, "zero_stage=1", &z1);
    expect_same_losses("zero_stage 1 vs 0", &z0, &z1);
    e2e_cleanup(&x);
}

/* ddp_grad_dtype bf16 against fp32 on 2 ranks. Each summed gradient value carries at most the
 * rounding of its two inputs and of their sum to bf16 (2^-9 relative each); the gradient norm, a sum
 * over all of them, stays within 2^-8 relative at step 1 (measured: 5e-4 relative). AdamW normalises
 * each update by the gradient's own scale, so 5 steps at learning rate 1e-3 move the losses by far
 * less (measured: 2e-6 relative); 1e-4 is the tolerance. The two runs must differ somewhere, or the
 * key changed nothing. */
#define BF16_LOSS_RTOL 1e-4
#define BF16_NORM_RTOL (1.0 / 256)

Test(dist_e2e, bf16_gradients_stay_near_fp32, .timeout = 900) {
    E2E x;
    need_e2e(&x);
    Losses fp, bf;
    train(&x, "2rank-fp32", 2, 2, 2, "ddp_grad_dtype=fp32", &fp);
    const Run *r = train(&x, "2rank-bf16", 2, 2, 2, "ddp_grad_dtype=bf16", &bf);
    cr_expect(strstr(r->out, "ddp_grad_dtype bf16: 67.75 KiB of gradients per step between ranks instead of 135.50 KiB") !=
                  NULL,
              "the plan names the traffic saved: %s", r->out);
    bool differs = false;
    for (int s = 0; s < fp.n; s++) {
        cr_expect_leq(fabs(fp.loss[s] - bf.loss[s]), BF16_LOSS_RTOL * fabs(fp.loss[s]), "step %d: loss %.9g (bf16) vs %.9g",
                      s + 1, bf.loss[s], fp.loss[s]);
        cr_expect_leq(fabs(fp.grad_norm[s] - bf.grad_norm[s]), BF16_NORM_RTOL * fp.grad_norm[s],
                      "step %d: grad norm %.9g (bf16) vs %.9g", s + 1, bf.grad_norm[s], fp.grad_norm[s]);
        differs = differs || fp.grad_norm[s] != bf.grad_norm[s];
    }
    cr_expect(differs, "ddp_grad_dtype bf16 gave the fp32 run's gradient norms bit for bit: the key changed nothing");
    e2e_cleanup(&x);
}

/* a bad value: one line naming the file, the key, what is expected and what was found; exit 2 */
Test(dist, bad_ddp_grad_dtype_is_refused) {
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    if (!bin || !*bin || !root || !*root) cr_skip_test("GTRAIN_BIN or GTRAIN_ROOT is not set (run through make test)");
    char config[GT_PATH_MAX], bin_copy[GT_PATH_MAX];
    snprintf(config, sizeof config, "%s/tests/fixtures/dist/run.yaml", root);
    snprintf(bin_copy, sizeof bin_copy, "%s", bin);
    clear_launcher_env();
    char *argv[] = {bin_copy, "--config", config, "--set", "output_dir=/tmp/gtrain-dist-never", "--set",
                    "ddp_grad_dtype=fp16", NULL};
    static Run r;
    run_cmd(argv, 60, &r);
    cr_expect_eq(exit_code(&r), GT_EXIT_BAD_INPUT, "exit %d; stderr: %s", exit_code(&r), r.err);
    cr_expect(strstr(r.err, "ddp_grad_dtype") && strstr(r.err, "expected") && strstr(r.err, "fp32, bf16") &&
                  strstr(r.err, "found") && strstr(r.err, "fp16"),
              "stderr: %s", r.err);
    const char *nl = strchr(r.err, '\n');
    cr_expect(nl && nl[1] == '\0', "one line, found: %s", r.err);
    cr_expect_eq(access("/tmp/gtrain-dist-never", F_OK), -1, "a refused run made its output_dir");
}

/* On 2 ranks the bf16 all-reduce and ZeRO-1's bf16 reduce-scatter both give bf16(a + b) */
Test(dist_e2e, zero1_bf16_equals_plain_bf16, .timeout = 900) {
    E2E x;
    need_e2e(&x);
    Losses z0, z1;
    train(&x, "2rank-bf16-zero0", 2, 2, 2, "ddp_grad_dtype=bf16", &z0);
    train(&x, "2rank-bf16-zero1", 2, 2, 2, "ddp_grad_dtype=bf16 zero_stage=1", &z1);
    expect_same_losses("bf16: zero_stage 1 vs 0", &z0, &z1);
    e2e_cleanup(&x);
}

/* The bf16 sums' order is fixed for a world size, so a bf16 run resumed from its step-2 checkpoint
 * continues with the uninterrupted run's losses and gradient norms, bit for bit */
Test(dist_e2e, bf16_resume_is_bit_exact, .timeout = 900) {
    E2E x;
    need_e2e(&x);
    Losses whole, resumed;
    train(&x, "bf16-whole", 2, 2, 1, "ddp_grad_dtype=bf16 save_steps=2", &whole);
    char out_dir[GT_PATH_MAX], s_out[GT_PATH_MAX + 16];
    snprintf(out_dir, sizeof out_dir, "%s/bf16-resumed", x.tmp);
    snprintf(s_out, sizeof s_out, "output_dir=%s", out_dir);
    char *argv[] = {MPIRUN_ARGS(&x.mpi), x.bin,     "--config",           x.config, "--set", s_out,
                    "--set",            "ddp_grad_dtype=bf16", "--set", "save_steps=2", "--set", "max_steps=2", NULL};
    static Run r;
    run_cmd(argv, 300, &r); /* stops after step 2, its checkpoint saved */
    cr_assert_eq(exit_code(&r), 0, "first part: exit %d\nstderr: %s", exit_code(&r), r.err);
    const Run *rest = train(&x, "bf16-resumed", 2, 2, 1, "ddp_grad_dtype=bf16 save_steps=2", &resumed);
    cr_expect(strstr(rest->out, "resumed from") != NULL, "the second part did not resume: %s", rest->out);
    for (int s = 2; s < 5; s++) {
        cr_expect(whole.loss[s] == resumed.loss[s], "step %d: loss %.9g resumed vs %.9g", s + 1, resumed.loss[s],
                  whole.loss[s]);
        cr_expect(whole.grad_norm[s] == resumed.grad_norm[s], "step %d: grad norm %.9g resumed vs %.9g", s + 1,
                  resumed.grad_norm[s], whole.grad_norm[s]);
    }
    e2e_cleanup(&x);
}

/* Rank 1 runs through `sh -c` so that it alone can be killed or given a bad file. */
static void run_failing_rank(E2E *x, const char *name, const char *rank1_script, Run *r) {
    char out_dir[GT_PATH_MAX], s_out[GT_PATH_MAX + 16];
    snprintf(out_dir, sizeof out_dir, "%s/%s", x->tmp, name);
    snprintf(s_out, sizeof s_out, "output_dir=%s", out_dir);
    char script[512];
    snprintf(script, sizeof script, "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n%s\nfi\nexec \"$0\" \"$@\"", rank1_script);
    char *argv[] = {MPIRUN_ARGS(&x->mpi), "/bin/sh", "-c", script, x->bin, "--config", x->config, "--set", s_out,
                    "--set", "max_steps=100000", "--set", "dist_timeout=10", NULL};
    run_cmd(argv, 120, r);
}

Test(dist_e2e, killed_rank_ends_the_job, .timeout = 300) {
    E2E x;
    need_e2e(&x);
    static Run r;
    /* rank 1's shell becomes gtrain (exec keeps the pid); a background job kills it after 4 s */
    run_failing_rank(&x, "killed", "(sleep 4; kill -9 $$) &", &r);
    cr_assert_not(r.hung, "hung; stderr: %s", r.err);
    cr_expect_neq(exit_code(&r), 0);
    cr_expect(strstr(r.err, "rank 1") != NULL, "stderr does not name rank 1: %s", r.err);
    cr_expect_lt(r.elapsed, 4 + 10 + 15.0, "the job took %.1f s after rank 1 was killed at 4 s (timeout 10 s)", r.elapsed);
    e2e_cleanup(&x);
}

Test(dist_e2e, rank_with_a_bad_file_ends_the_job, .timeout = 300) {
    E2E x;
    need_e2e(&x);
    static Run r;
    run_failing_rank(&x, "badfile", "exec \"$0\" \"$@\" --set data.train=/nonexistent/gtrain-dist.txt", &r);
    cr_assert_not(r.hung, "hung; stderr: %s", r.err);
    cr_expect_neq(exit_code(&r), 0);
    cr_expect(strstr(r.err, "/nonexistent/gtrain-dist.txt") != NULL, "stderr: %s", r.err);
    cr_expect(strstr(r.err, "rank 1") != NULL, "stderr does not name rank 1: %s", r.err);
    cr_expect_lt(r.elapsed, 10 + 15.0, "the job took %.1f s after rank 1 failed (timeout 10 s)", r.elapsed);
    e2e_cleanup(&x);
}
