/* test_nccl.c - the NCCL path of data parallel (cuda/dist_nccl.cu, src/run/dist_nccl.h).
 *
 * Built without NCCL (no GT_HAVE_NCCL: CUDA=0, NCCL=0, or no nccl.h) the one test here is skipped.
 * With NCCL:
 *   - the id-file protocol of srun-only launches, no GPU needed: a round trip; a stale file (an
 *     earlier job's key) is ignored until rank 0's file replaces it; a missing file ends in a
 *     bounded time with one line;
 *   - one GPU: a 1-rank communicator: collectives are ordered after the compute stream's work and
 *     the compute stream after them; ZeRO-1 collectives and host scalars are identities;
 *   - two GPUs (skipped with fewer): two forked ranks sum exactly, reduce-scatter / all-gather in
 *     place, host scalars; a rank that dies makes the other fail within its timeout, not hang.
 * The GPU tests fork their ranks before touching CUDA (a process that initialised CUDA cannot
 * fork a child that uses it). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "dist_nccl.h"
#include "test_backend_select.h"

#ifndef GT_HAVE_NCCL

Test(nccl, not_built) { cr_skip_test("built without NCCL (make CUDA=1 NCCL=1; needs nccl.h)"); }

#else

/* ------------------------------------------------------------------------------ helpers */

#define SKIP_CODE 77

static void tmp_dir(char *out, size_t cap) {
    const char *base = getenv("TMPDIR");
    snprintf(out, cap, "%s/gtrain-nccl-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(out), "mkdtemp: %s", strerror(errno));
}

static void set_job(const char *job, const char *step) {
    unsetenv("GTRAIN_RUN_ID");
    unsetenv("SLURM_RESTART_COUNT");
    if (job) setenv("SLURM_JOB_ID", job, 1); else unsetenv("SLURM_JOB_ID");
    if (step) setenv("SLURM_STEP_ID", step, 1); else unsetenv("SLURM_STEP_ID");
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Run fn(rank) in `world` forked processes; their exit codes into codes. Kills them past limit_s. */
typedef int (*RankFn)(int rank, int world, const char *dir);
static void run_ranks(RankFn fn, int world, const char *dir, double limit_s, int *codes) {
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        fflush(NULL);
        pids[r] = fork();
        cr_assert_neq(pids[r], -1, "fork: %s", strerror(errno));
        if (pids[r] == 0) _exit(fn(r, world, dir));
    }
    double deadline = gt_now_seconds() + limit_s;
    for (int r = 0; r < world; r++) {
        int st = 0;
        for (;;) {
            pid_t w = waitpid(pids[r], &st, WNOHANG);
            if (w == pids[r]) break;
            if (gt_now_seconds() > deadline) {
                for (int k = 0; k < world; k++) kill(pids[k], SIGKILL);
                waitpid(pids[r], &st, 0);
                codes[r] = -1; /* hung */
                goto next;
            }
            sleep_s(0.05);
        }
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    next:;
    }
}

/* ------------------------------------------------------------------------------ id file (no GPU) */

Test(nccl, id_file_round_trip) {
    char dir[256], path[320];
    tmp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nccl.id", dir);
    set_job("4242", "0");
    unsigned char id[128], back[128];
    for (int i = 0; i < 128; i++) id[i] = (unsigned char)(i * 37 + 11);
    GtError err = {0};
    cr_assert_eq(nccl_id_file_write(path, id, sizeof id, 4, &err), 0, "%s", err.msg);
    cr_assert_eq(nccl_id_file_read(path, back, sizeof back, 4, gt_now_seconds(), &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(id, back, sizeof id), 0);
    /* no temporary file is left beside it */
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    cr_assert_neq(access(tmp, F_OK), 0);
    /* a different world size is another launch */
    double t0 = gt_now_seconds();
    cr_assert_neq(nccl_id_file_read(path, back, sizeof back, 2, t0 + 0.2, &err), 0);
    cr_assert(strstr(err.msg, "stale"), "%s", err.msg);
    unlink(path);
    rmdir(dir);
}

Test(nccl, id_file_stale_is_ignored_until_replaced) {
    char dir[256], path[320];
    tmp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nccl.id", dir);
    unsigned char old_id[128], new_id[128], back[128];
    memset(old_id, 0xaa, sizeof old_id);
    memset(new_id, 0x5c, sizeof new_id);
    GtError err = {0};
    /* an earlier job step left its file */
    set_job("4242", "0");
    cr_assert_eq(nccl_id_file_write(path, old_id, sizeof old_id, 2, &err), 0, "%s", err.msg);
    set_job("4242", "1");
    double t0 = gt_now_seconds();
    cr_assert_neq(nccl_id_file_read(path, back, sizeof back, 2, t0 + 0.3, &err), 0);
    double dt = gt_now_seconds() - t0;
    cr_assert(dt >= 0.25 && dt < 5.0, "waited %g s", dt);
    cr_assert(strstr(err.msg, "stale") && strstr(err.msg, "slurm:4242.0.0"), "%s", err.msg);
    /* "rank 0" of this step replaces it a little later: the reader takes the new id */
    fflush(NULL);
    pid_t p = fork();
    cr_assert_neq(p, -1);
    if (p == 0) {
        sleep_s(0.3);
        GtError e = {0};
        _exit(nccl_id_file_write(path, new_id, sizeof new_id, 2, &e) ? 1 : 0);
    }
    cr_assert_eq(nccl_id_file_read(path, back, sizeof back, 2, gt_now_seconds() + 10.0, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(back, new_id, sizeof back), 0, "read the stale id");
    int st = 0;
    waitpid(p, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    unlink(path);
    rmdir(dir);
}

Test(nccl, id_file_missing_times_out) {
    char dir[256], path[320];
    tmp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/never.id", dir);
    set_job(NULL, NULL);
    unsigned char back[128];
    GtError err = {0};
    double t0 = gt_now_seconds();
    cr_assert_neq(nccl_id_file_read(path, back, sizeof back, 2, t0 + 0.2, &err), 0);
    cr_assert(gt_now_seconds() - t0 < 5.0);
    cr_assert(strstr(err.msg, "did not appear") && strstr(err.msg, path), "%s", err.msg);
    /* garbage is not an id */
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("hello\n", f);
    fclose(f);
    cr_assert_neq(nccl_id_file_read(path, back, sizeof back, 2, gt_now_seconds() + 0.1, &err), 0);
    cr_assert(strstr(err.msg, "not a gtrain NCCL id file"), "%s", err.msg);
    unlink(path);
    rmdir(dir);
}

Test(nccl, needs_the_cuda_backend) {
    Backend *cpu = NULL;
    GtError err = {0};
    cr_assert_eq(cpu_backend_create(&cpu, 1, &err), 0, "%s", err.msg);
    NcclComm *c = NULL;
    cr_assert_neq(nccl_open_ranks(&c, 0, 1, NULL, cpu, NULL, 5.0, &err), 0);
    cr_assert_null(c);
    cr_assert(strstr(err.msg, "cuda backend"), "%s", err.msg);
    backend_close(cpu);
}

/* ------------------------------------------------------------------------------ one GPU */

Test(nccl, one_rank_orders_with_the_compute_stream, .timeout = 120) {
    if (backend_gpu_count() <= 0) cr_skip_test("no GPU visible");
    GtError err = {0};
    Backend *be = NULL;
    cr_assert_eq(backend_open_cuda(&be, 0, &err), 0, "%s", err.msg);
    NcclComm *c = NULL;
    cr_assert_eq(nccl_open_ranks(&c, 0, 1, NULL, be, NULL, 60.0, &err), 0, "%s", err.msg);
    char ver[64];
    cr_log_info("%s", nccl_version_string(ver, sizeof ver));

    const size_t n = (size_t)1 << 22; /* big enough that a missing wait would show */
    float *h = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 1000) * 0.25f;
    float *d = be->ops->dev_alloc(be, n * sizeof(float));
    cr_assert_not_null(d);
    cr_assert_eq(be->ops->to_device(be, d, h, n * sizeof(float), &err), 0, "%s", err.msg);
    /* compute: x *= 3, then the all-reduce (identity on one rank) must see 3x; then compute x *= 0.5
     * after nccl_wait_all must see the all-reduced values */
    for (int k = 0; k < 8; k++) be->ops->scale(be, d, k == 0 ? 3.0f : 1.0f, n);
    cr_assert_eq(nccl_allreduce_start(c, d, n / 2, &err), 0, "%s", err.msg);
    cr_assert_eq(nccl_allreduce_start(c, d + n / 2, n - n / 2, &err), 0, "%s", err.msg);
    cr_assert_eq(nccl_poll(c, &err), 0, "%s", err.msg);
    cr_assert_eq(nccl_wait_all(c, &err), 0, "%s", err.msg);
    be->ops->scale(be, d, 0.5f, n);
    cr_assert_eq(nccl_sync(c, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(be->ops->to_host(be, back, d, n * sizeof(float), &err), 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(back[i], h[i] * 3.0f * 0.5f, "element %zu: %g, expected %g", i, back[i], h[i] * 1.5f);

    /* ZeRO-1 on one rank: identities */
    cr_assert_eq(nccl_reduce_scatter(c, d, n, &err), 0, "%s", err.msg);
    cr_assert_eq(nccl_allgather(c, d, n, &err), 0, "%s", err.msg);
    cr_assert_eq(be->ops->to_host(be, back, d, n * sizeof(float), &err), 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) cr_assert_eq(back[i], h[i] * 1.5f, "element %zu after reduce-scatter + all-gather", i);
    memcpy(back, h, 1000 * sizeof(float));
    cr_assert_eq(nccl_allgather_host(c, back, 1000, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(back, h, 1000 * sizeof(float)), 0);

    double v[3] = {1.5, -2.0, 1e300};
    int64_t items[2] = {7, (int64_t)1 << 40};
    int mx = 5;
    cr_assert_eq(nccl_allreduce_f64_host(c, v, 3, &err), 0, "%s", err.msg);
    cr_assert(v[0] == 1.5 && v[1] == -2.0 && v[2] == 1e300);
    cr_assert_eq(nccl_allreduce_i64_host(c, items, 2, &err), 0, "%s", err.msg);
    cr_assert(items[0] == 7 && items[1] == (int64_t)1 << 40);
    cr_assert_eq(nccl_allreduce_max_i32_host(c, &mx, &err), 0, "%s", err.msg);
    cr_assert_eq(mx, 5);
    cr_assert_neq(nccl_allreduce_f64_host(c, v, NCCL_HOST_MAX + 1, &err), 0);

    be->ops->dev_free(be, d);
    free(h);
    free(back);
    nccl_close(c);
    backend_close(be);
}

/* ------------------------------------------------------------------------------ two GPUs */

#define SAY(...) (fprintf(stderr, "rank %d: ", rank), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), 1)

/* open the backend on GPU `rank` and the communicator through the id file in dir */
static int open_rank(int rank, int world, const char *dir, double timeout, Backend **be, NcclComm **c) {
    if (backend_gpu_count() < world) return SKIP_CODE;
    char path[320];
    snprintf(path, sizeof path, "%s/nccl.id", dir);
    set_job("777", "3");
    GtError err = {0};
    if (backend_open_cuda(be, rank, &err)) return SAY("backend: %s", err.msg);
    if (nccl_open_ranks(c, rank, world, NULL, *be, path, timeout, &err)) return SAY("nccl_open: %s", err.msg);
    return 0;
}

static int two_rank_sums(int rank, int world, const char *dir) {
    Backend *be = NULL;
    NcclComm *c = NULL;
    int rc = open_rank(rank, world, dir, 60.0, &be, &c);
    if (rc) return rc;
    GtError err = {0};
    const size_t shard = 100003, n = shard * (size_t)world;
    float *h = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1) * (float)(i % 4096);
    float *d = be->ops->dev_alloc(be, n * sizeof(float));
    if (!d || be->ops->to_device(be, d, h, n * sizeof(float), &err)) return SAY("device buffer: %s", err.msg);
    /* in two buckets, as backward would */
    if (nccl_allreduce_start(c, d, n / 3, &err) || nccl_allreduce_start(c, d + n / 3, n - n / 3, &err) ||
        nccl_wait_all(c, &err) || nccl_sync(c, NULL, &err) || be->ops->to_host(be, back, d, n * sizeof(float), &err))
        return SAY("all-reduce: %s", err.msg);
    for (size_t i = 0; i < n; i++) /* 1x + 2x: exact in float for these values */
        if (back[i] != 3.0f * (float)(i % 4096)) return SAY("all-reduce: element %zu is %g", i, back[i]);
    /* reduce-scatter of the original values: this rank's shard holds the sum */
    if (be->ops->to_device(be, d, h, n * sizeof(float), &err) || nccl_reduce_scatter(c, d, shard, &err) ||
        be->ops->to_host(be, back, d, n * sizeof(float), &err))
        return SAY("reduce-scatter: %s", err.msg);
    for (size_t i = rank * shard; i < (rank + 1) * shard; i++)
        if (back[i] != 3.0f * (float)(i % 4096)) return SAY("reduce-scatter: element %zu is %g", i, back[i]);
    /* all-gather: every rank's shard everywhere */
    if (nccl_allgather(c, d, shard, &err) || be->ops->to_host(be, back, d, n * sizeof(float), &err))
        return SAY("all-gather: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        if (back[i] != 3.0f * (float)(i % 4096)) return SAY("all-gather: element %zu is %g", i, back[i]);
    /* host all-gather: shard r of rank r */
    for (size_t i = 0; i < n; i++) back[i] = (i / shard == (size_t)rank) ? (float)i : -1.0f;
    if (nccl_allgather_host(c, back, shard, &err)) return SAY("host all-gather: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        if (back[i] != (float)i) return SAY("host all-gather: element %zu is %g", i, back[i]);
    double v[2] = {0.5 * (rank + 1), 1.0};
    int64_t items = 1000 + rank;
    int mx = rank == 1 ? 15 : 2;
    if (nccl_allreduce_f64_host(c, v, 2, &err) || nccl_allreduce_i64_host(c, &items, 1, &err) ||
        nccl_allreduce_max_i32_host(c, &mx, &err))
        return SAY("host scalars: %s", err.msg);
    if (v[0] != 1.5 || v[1] != 2.0 || items != 2001 || mx != 15)
        return SAY("host scalars: %g %g %lld %d", v[0], v[1], (long long)items, mx);
    be->ops->dev_free(be, d);
    free(h);
    free(back);
    nccl_close(c);
    backend_close(be);
    return 0;
}

/* the CUDA simulator's NCCL (cuda/sim/nccl.cpp) runs ranks as MPI processes only: ranks forked
 * here, meeting through the id file, are not modelled; dist_e2e covers its collectives */
static void skip_on_cudasim(void) {
    if (test_on_cudasim())
        cr_skip_test("on the CUDA simulator: its NCCL runs ranks under mpirun, not forked ranks (dist_e2e runs "
                     "dist_nccl.cu's collectives through it)");
}

Test(nccl, two_ranks_sum_exactly, .timeout = 240) {
    skip_on_cudasim();
    char dir[256];
    tmp_dir(dir, sizeof dir);
    int codes[2];
    run_ranks(two_rank_sums, 2, dir, 180.0, codes);
    if (codes[0] == SKIP_CODE || codes[1] == SKIP_CODE) cr_skip_test("fewer than 2 GPUs visible");
    cr_assert(codes[0] == 0 && codes[1] == 0, "rank exit codes %d %d (-1: hung)", codes[0], codes[1]);
    /* the id file is gone once the communicator is up */
    char path[320];
    snprintf(path, sizeof path, "%s/nccl.id", dir);
    cr_assert_neq(access(path, F_OK), 0, "%s was left behind", path);
    rmdir(dir);
}

/* rank 1 dies right after the communicator is up; rank 0's all-reduce must fail within its
 * timeout (5 s) with one line, not hang. Exit 0: the failure came, bounded; 2: it hung or passed. */
static int dead_peer(int rank, int world, const char *dir) {
    Backend *be = NULL;
    NcclComm *c = NULL;
    int rc = open_rank(rank, world, dir, 5.0, &be, &c);
    if (rc) return rc;
    if (rank == 1) _exit(9); /* no close, no abort: as if killed */
    GtError err = {0};
    const size_t n = (size_t)1 << 24;
    float *d = be->ops->dev_alloc(be, n * sizeof(float));
    if (!d) return SAY("dev_alloc");
    be->ops->zero(be, d, n * sizeof(float));
    sleep_s(0.5);
    double t0 = gt_now_seconds();
    int failed = 0;
    for (int k = 0; k < 20 && !failed; k++) /* NCCL may need a few ops to notice */
        failed = nccl_allreduce_start(c, d, n, &err) || nccl_wait_all(c, &err) || nccl_sync(c, NULL, &err);
    double dt = gt_now_seconds() - t0;
    if (!failed) return SAY("20 all-reduces with a dead peer succeeded");
    fprintf(stderr, "rank 0: failed after %.1f s as expected: %s\n", dt, err.msg);
    if (dt > 30.0) return SAY("took %g s, timeout 5 s", dt);
    /* sticky: the next call fails at once with the same line */
    GtError again = {0};
    if (nccl_allreduce_start(c, d, n, &again) == 0 || strcmp(again.msg, err.msg) != 0)
        return SAY("the second call after the failure: \"%s\"", again.msg);
    nccl_abort(c);
    _exit(0); /* the device may be in a bad state: do not tear the backend down */
}

Test(nccl, dead_peer_fails_within_the_timeout, .timeout = 240) {
    skip_on_cudasim();
    char dir[256];
    tmp_dir(dir, sizeof dir);
    int codes[2];
    run_ranks(dead_peer, 2, dir, 120.0, codes);
    if (codes[0] == SKIP_CODE || codes[1] == SKIP_CODE) cr_skip_test("fewer than 2 GPUs visible");
    cr_assert_eq(codes[1], 9);
    cr_assert_eq(codes[0], 0, "rank 0 exit code %d (-1: hung past 120 s)", codes[0]);
    rmdir(dir);
}

#endif /* GT_HAVE_NCCL */
