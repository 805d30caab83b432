/* test_backend_module.c - the CUDA backend as a module loaded on demand (src/backend/cuda_module.h),
 * seen from outside: gtrain processes with $GTRAIN_BACKEND_DIR pointing at no module, or at a file
 * that is not one, must say why in one line and exit 2 for device: cuda, and run on the CPU for
 * device: auto; --version lists what it found. Then the light start the module buys: a small CPU
 * run's peak resident set (wait4's ru_maxrss, which gtrain cannot influence) within the memory plan
 * it prints (device total + host total) + 5 % + 50 MB: the process itself (libraries, OpenMP and
 * BLAS threads, the tokenizer and data) costs under 50 MB. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_util.h"
#include "test_backend_select.h"
#include "test_util.h"

/* the child sees this folder as $GTRAIN_BACKEND_DIR (inherited through start_v's fork) */
static void backend_dir(const char *dir) { cr_assert_eq(setenv("GTRAIN_BACKEND_DIR", dir, 1), 0); }

Test(backend_module, cuda_without_the_module_is_one_line_exit_2, .timeout = 60) {
    Ws w;
    ws_init(&w);
    backend_dir("/nonexistent-gtrain-backends");
    int st = run(&w, NULL, "nomod", "device=cuda", NULL);
    expect_one_line(&w, "nomod", st, 2, "/nonexistent-gtrain-backends/libgtrain-cuda.so", "missing");
    ws_fini(&w);
}

Test(backend_module, cuda_with_a_module_that_does_not_load_says_dlerror, .timeout = 60) {
    Ws w;
    ws_init(&w);
    char mod[400];
    snprintf(mod, sizeof mod, "%s/libgtrain-cuda.so", w.dir);
    put_file(mod, "not a shared object\n", 20);
    backend_dir(w.dir);
    int st = run(&w, NULL, "badmod", "device=cuda", NULL);
    /* dlerror's text names the file and what is wrong with it */
    expect_one_line(&w, "badmod", st, 2, "does not load", mod);
    ws_fini(&w);
}

Test(backend_module, auto_without_the_module_runs_on_the_cpu, .timeout = 120) {
    Ws w;
    ws_init(&w);
    backend_dir("/nonexistent-gtrain-backends");
    int st = run(&w, NULL, "auto", "device=auto", "max_steps=3", "save_steps=0", NULL);
    expect_exit(&w, "auto", st, 0);
    char *out = read_log(&w, "auto", "out"), *err = read_log(&w, "auto", "err");
    cr_expect(strstr(out, "step") || strstr(err, "step"), "no step logged: %s%s", out, err);
    free(out);
    free(err);
    ws_fini(&w);
}

/* a GPU the probe sees, but a module that does not load (its CUDA libraries absent): device: auto
 * warns and runs on the CPU. Where the probe sees none (no GPU here), auto runs on the CPU all the
 * same and the warning is not asked for. */
Test(backend_module, auto_with_a_gpu_but_no_loadable_module_runs_on_the_cpu, .timeout = 120) {
    Ws w;
    ws_init(&w);
    char from[600], to[400];
    const char *bin = test_gtrain_bin(), *slash = strrchr(bin, '/');
    snprintf(from, sizeof from, "%.*s/libgtrain-cuda-probe.so", slash ? (int)(slash - bin) : 1, slash ? bin : ".");
    if (access(from, R_OK) != 0) cr_skip_test("no device probe beside gtrain (%s): built without CUDA", from);
    snprintf(to, sizeof to, "%s/libgtrain-cuda-probe.so", w.dir);
    copy_file(from, to);
    snprintf(to, sizeof to, "%s/libgtrain-cuda.so", w.dir);
    put_file(to, "not a shared object\n", 20);
    backend_dir(w.dir);
    const int gpus = backend_gpu_count(); /* the copied probe, as the child will see it */
    int st = run(&w, NULL, "autobad", "device=auto", "max_steps=2", "save_steps=0", NULL);
    expect_exit(&w, "autobad", st, 0);
    if (gpus > 0) {
        char e[4096];
        log_text(&w, "autobad", "err", e, sizeof e);
        cr_expect(strstr(e, "a GPU is visible, but the CUDA backend module") && strstr(e, "running on the CPU"),
                  "%d GPU(s), module unloadable: no warning: %s", gpus, e);
    }
    ws_fini(&w);
}

/* gtrain --version with $GTRAIN_BACKEND_DIR as given (NULL: unset); its stdout, exit 0 asserted */
static char *version_of(const char *dir, char *buf, size_t cap) {
    char path[64] = "/tmp/gt_version_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (dir)
            setenv("GTRAIN_BACKEND_DIR", dir, 1);
        else
            unsetenv("GTRAIN_BACKEND_DIR");
        dup2(fd, 1);
        execl(test_gtrain_bin(), test_gtrain_bin(), "--version", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    ssize_t n = pread(fd, buf, cap - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gtrain --version: status %d: %s", st, buf);
    return buf;
}

Test(backend_module, version_lists_the_backends_found, .timeout = 60) {
    cr_assert_not_null(test_gtrain_bin(), "GTRAIN_BIN is not set");
    char v[2048];
    version_of("/nonexistent-gtrain-backends", v, sizeof v);
    cr_expect(strstr(v, "backends: cpu (cuda: ") && strstr(v, "/nonexistent-gtrain-backends/libgtrain-cuda.so") &&
                  strstr(v, "missing"),
              "without the module: %s", v);
    cr_expect(strstr(v, "$GTRAIN_BACKEND_DIR"), "does not say where it looked: %s", v);
#ifdef GT_HAVE_CUDA
    /* this build made the module beside gtrain: found and loaded (a device or the reason for none) */
    version_of(NULL, v, sizeof v);
    cr_expect(strstr(v, "backends: cpu, cuda (") && strstr(v, "/libgtrain-cuda.so;"), "with the module: %s", v);
    cr_expect(strstr(v, "GPU") || strstr(v, "no device: "), "neither GPUs nor why none: %s", v);
#endif
}

/* the figure on the plan's line "  LABEL   12.34 MiB" (plan_print), in bytes; 0 when absent */
static double plan_figure(const char *log, const char *label) {
    const char *p = strstr(log, label);
    if (!p) return 0;
    double v = 0;
    char unit[8] = "";
    if (sscanf(p + strlen(label), " %lf %7s", &v, unit) != 2) return 0;
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double k = 1;
    for (int i = 0; i < 5; i++, k *= 1024.0)
        if (!strcmp(unit, units[i])) return v * k;
    return 0;
}

Test(backend_module, cpu_run_peak_rss_is_within_the_plan_plus_5_percent_and_50_mb, .timeout = 300) {
    if (UNDER_SANITIZER) cr_skip_test("under a sanitizer the RSS holds shadow memory");
    if (test_on_cudasim()) cr_skip_test("on the CUDA simulator device memory is host memory outside the plan");
    Ws w;
    ws_init(&w);
    backend_dir("/nonexistent-gtrain-backends");
    Proc p;
    const char *sets[] = {"device=auto", "max_steps=5", "save_steps=0"};
    start_v(&p, &w, w.cfg, NULL, "rss", sets, 3);
    int st = 0;
    struct rusage ru;
    cr_assert_eq(wait4(p.pid, &st, 0, &ru), p.pid);
    expect_exit(&w, "rss", st, 0);
    char *out = read_log(&w, "rss", "out"), *err = read_log(&w, "rss", "err");
    const double dev = plan_figure(out, "device total"), host = plan_figure(out, "host total"), plan = dev + host;
    cr_assert_gt(dev, 0, "no plan (device total) in the log: %s%s", out, err);
    const double peak = (double)ru.ru_maxrss * 1024, allowed = plan * 1.05 + 50e6;
    cr_log_info("peak RSS %.1f MB, plan %.1f MB, allowed %.1f MB", peak / 1e6, plan / 1e6, allowed / 1e6);
    cr_expect_leq(peak, allowed, "peak RSS %.1f MB > plan %.1f MB + 5 %% + 50 MB", peak / 1e6, plan / 1e6);
    free(out);
    free(err);
    ws_fini(&w);
}
