/* test_host_waits.c - the host out of the device's way: gtrain runs as a process (the reliability
 * fixture: a 2-layer, 32-wide byte-level model) and its end-of-run summary says how often the host
 * waited for the device in the optimizer steps (backend.h's host_waits and syncs, counted at the
 * ops that synchronise). A micro-step waits for nothing, so the count per optimizer step is the
 * same with 1 or 4 micro-batches per step (with and without recompute + offload), there is exactly
 * one device-wide sync per step, and the waits per step stay few (the step's sync, the gradient
 * norm clipping needs, the weight check after the update, the step's device time). The same test
 * runs on the CUDA simulator (make test-cudasim), where the counts are the CUDA backend's. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "run_util.h"
#include "test_backend_select.h"

typedef struct {
    unsigned long long waits, syncs;
    long steps;
} Waits;

/* the summary's "host waits   W in S optimizer steps, Y of them device-wide syncs" */
static Waits run_waits(const Ws *w, const char *tag, const char *a1, const char *a2, const char *x1, const char *x2,
                       const char *x3) {
    int st = run(w, NULL, tag, "max_steps=6", "save_steps=0", "eval_steps=0", "overwrite_output_dir=true", a1, a2, x1,
                 x2, x3, NULL);
    expect_exit(w, tag, st, 0);
    char *log = read_log(w, tag, "out");
    cr_assert(log, "%s: no log", tag);
    /* the step buffers are in the plan's host_staging: planned = measured in every category */
    cr_expect(strstr(log, "(differs)") == NULL, "%s: a category's measured bytes differ from the plan:\n%s", tag, log);
    const char *at = strstr(log, "host waits   ");
    cr_assert(at, "%s: no host waits line in the summary:\n%s", tag, log);
    Waits r = {0};
    cr_assert_eq(sscanf(at, "host waits   %llu in %ld optimizer steps, %llu of them", &r.waits, &r.steps, &r.syncs), 3,
                 "%s: %.120s", tag, at);
    free(log);
    return r;
}

static void expect_same_waits_per_step(const char *what, const char *x1, const char *x2, const char *x3) {
    Ws w;
    ws_init(&w);
    /* the same 8 rows per step: one micro-batch of 8, or four of 2 */
    Waits one = run_waits(&w, "a1", "per_device_train_batch_size=8", "gradient_accumulation_steps=1", x1, x2, x3);
    Waits four = run_waits(&w, "a4", "per_device_train_batch_size=2", "gradient_accumulation_steps=4", x1, x2, x3);
    cr_assert_eq(one.steps, 6);
    cr_assert_eq(four.steps, 6);
    cr_expect_eq(one.syncs, 6, "%s: %llu device-wide syncs in 6 steps of 1 micro-batch, expected one per step", what,
                 one.syncs);
    cr_expect_eq(four.syncs, 6, "%s: %llu device-wide syncs in 6 steps of 4 micro-batches, expected one per step", what,
                 four.syncs);
    cr_expect_eq(four.waits, one.waits,
                 "%s: the host waited %llu times in 6 steps of 4 micro-batches, %llu in 6 of 1: a micro-step waits", what,
                 four.waits, one.waits);
    cr_expect_leq(one.waits, 6 * 4, "%s: %llu host waits in 6 steps, expected at most 4 per step", what, one.waits);
    ws_fini(&w);
}

Test(host_waits, a_micro_step_waits_for_nothing, .timeout = 180) {
    expect_same_waits_per_step("plain", NULL, NULL, NULL);
}

Test(host_waits, nor_with_recompute_offload_and_bf16, .timeout = 180) {
    expect_same_waits_per_step("recompute + offload, bf16", "gradient_checkpointing=true", "offload=true",
                               "precision=bf16");
}

/* ---------------------------------------------------------------- the runtime's reserve (issue 29 item 5) */

/* "12.50 MiB" -> bytes (gt_format_bytes's units), and the half unit of its last printed digit */
static double parse_bytes(const char *s, double *half_ulp) {
    double v = 0;
    char unit[8] = "";
    cr_assert_eq(sscanf(s, "%lf %7s", &v, unit), 2, "not a size: %.40s", s);
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double mul = 1;
    for (int i = 0; i < 5; i++, mul *= 1024)
        if (strcmp(unit, units[i]) == 0) {
            const char *dot = strchr(s, '.');
            int digits = 0;
            for (const char *p = dot ? dot + 1 : NULL; p && *p >= '0' && *p <= '9'; p++) digits++;
            double ulp = 1;
            for (int k = 0; k < digits; k++) ulp /= 10;
            *half_ulp = ulp / 2 * mul;
            return v * mul;
        }
    cr_assert_fail("unknown unit in %.40s", s);
    return 0;
}

/* the value after the label of a plan line ("  runtime_reserve   288.00 MiB  (...)") */
static double plan_value(const char *log, const char *label, double *half_ulp) {
    char want[64];
    snprintf(want, sizeof want, "\n  %s ", label);
    const char *at = strstr(log, want);
    cr_assert(at, "no \"%s\" line in the plan:\n%s", label, log);
    at += strlen(want);
    while (*at == ' ') at++;
    return parse_bytes(at, half_ulp);
}

/* On the CUDA simulator with a 1 GiB device: memory_limit auto is the free memory at start less the
 * runtime_reserve, the plan prints the reserve as its own line and the device's need (the device total
 * plus the reserve) and they add up, auto-fit's choice plus the reserve fits what was free, and the run
 * trains. On the CPU there is no reserve and no such line. */
Test(host_waits, auto_fit_leaves_the_runtime_reserve_free, .timeout = 300) {
    const bool sim = test_on_cudasim();
    Ws w;
    ws_init(&w);
    if (sim) cr_assert_eq(setenv("GTCSIM_DEVICE_MIB", "1024", 1), 0);
    int st = run(&w, NULL, "fit", "max_steps=2", "save_steps=0", "eval_steps=0", "per_device_train_batch_size=auto",
                 "train_batch_size=64", NULL);
    if (sim) unsetenv("GTCSIM_DEVICE_MIB");
    expect_exit(&w, "fit", st, 0);
    char *log = read_log(&w, "fit", "out");
    cr_assert(log);
    if (!sim) {
        cr_expect(strstr(log, "runtime_reserve") == NULL, "the CPU has no runtime reserve:\n%s", log);
    } else {
        const char *auto_line = strstr(log, "memory_limit auto: ");
        cr_assert(auto_line, "no memory_limit auto line:\n%s", log);
        double h1, h2, h3, h4, h5, h6;
        const double free_b = parse_bytes(auto_line + strlen("memory_limit auto: "), &h1);
        const char *minus = strstr(auto_line, " - ");
        const char *eq = strstr(auto_line, " = ");
        cr_assert(minus && eq, "%.200s", auto_line);
        const double reserve_l = parse_bytes(minus + 3, &h2), limit = parse_bytes(eq + 3, &h3);
        cr_expect_leq(fabs(free_b - reserve_l - limit), h1 + h2 + h3, "%.200s does not add up", auto_line);
        cr_expect_geq(reserve_l, 32.0 * (1 << 20), "the reserve holds at least cuBLAS's workspace: %.200s", auto_line);
        const double total = plan_value(log, "device total", &h4), reserve = plan_value(log, "runtime_reserve", &h5),
                     need_b = plan_value(log, "device need", &h6);
        cr_expect_leq(fabs(reserve - reserve_l), h2 + h5);
        cr_expect_leq(fabs(total + reserve - need_b), h4 + h5 + h6, "device total + runtime_reserve != device need");
        cr_expect_leq(need_b, free_b + h1 + h6, "auto-fit's plan and the reserve need %.0f bytes, %.0f were free", need_b,
                      free_b);
    }
    free(log);
    ws_fini(&w);
}

/* The plan's lines on their own (any backend): with a runtime reserve, its line and the device's need,
 * which is the device total plus the reserve as printed. */
Test(host_waits, the_reserve_line_adds_up) {
    ModelDesc d = {.n_layer = 6, .n_head = 4, .n_embd = 64, .n_inner = 256, .vocab_size = 512, .n_positions = 128,
                   .layer_norm_epsilon = 1e-5, .tie_word_embeddings = true};
    model_desc_defaults(&d);
    MemPlan p;
    cr_assert_eq(plan_memory(&p, &d, 4, 2, 1, 128, recompute_policy(false, 1, false, d.n_layer), false, GT_BF16), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    plan_print(&p, NULL, f);
    fclose(f);
    cr_expect(strstr(text, "runtime_reserve") == NULL, "no reserve, no line:\n%s", text);
    free(text);
    p.runtime_reserve = (36ull << 20) + 12345;
    snprintf(p.runtime_reserve_what, sizeof p.runtime_reserve_what, "cuBLAS workspace 32.00 MiB, other 4.01 MiB");
    f = open_memstream(&text, &len);
    plan_print(&p, NULL, f);
    fclose(f);
    double h1, h2, h3;
    const double total = plan_value(text, "device total", &h1), reserve = plan_value(text, "runtime_reserve", &h2),
                 need_b = plan_value(text, "device need", &h3);
    cr_expect_leq(fabs(reserve - (double)p.runtime_reserve), h2, "%s", text);
    cr_expect_leq(fabs(total - (double)p.device_total), h1, "%s", text);
    cr_expect_leq(fabs(total + reserve - need_b), h1 + h2 + h3, "device total + runtime_reserve != device need:\n%s", text);
    cr_expect(strstr(text, "cuBLAS workspace 32.00 MiB") != NULL, "the line names what the reserve holds:\n%s", text);
    free(text);
}

static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* GTRAIN_PROFILE_STEP=N (CUDA backend): the N-th step runs between cudaProfilerStart and
 * cudaProfilerStop, so `ncu --profile-from-start off` profiles exactly one step (scripts/device-check
 * stage s6). On the simulator, whose profiler calls print a line with GTCSIM_PROFILER_LOG: one range in
 * a run of 3 steps, none when the run stops before step N; a value that is not a step number is one
 * line and exit 2. */
Test(host_waits, profile_step_opens_one_profiler_range, .timeout = 180) {
    if (!test_on_cudasim()) cr_skip_test("GTRAIN_PROFILE_STEP is the CUDA backend's (seen on the simulator)");
    Ws w;
    ws_init(&w);
    cr_assert_eq(setenv("GTCSIM_PROFILER_LOG", "1", 1), 0);
    cr_assert_eq(setenv("GTRAIN_PROFILE_STEP", "2", 1), 0);
    int st3 = run(&w, NULL, "p3", "max_steps=3", "save_steps=0", "eval_steps=0", "overwrite_output_dir=true", NULL);
    int st1 = run(&w, NULL, "p1", "max_steps=1", "save_steps=0", "eval_steps=0", "overwrite_output_dir=true", NULL);
    cr_assert_eq(setenv("GTRAIN_PROFILE_STEP", "two", 1), 0);
    int bad = run(&w, NULL, "bad", "max_steps=1", "save_steps=0", "eval_steps=0", "overwrite_output_dir=true", NULL);
    unsetenv("GTRAIN_PROFILE_STEP");
    unsetenv("GTCSIM_PROFILER_LOG");
    expect_exit(&w, "p3", st3, 0);
    expect_exit(&w, "p1", st1, 0);
    char *e3 = read_log(&w, "p3", "err"), *e1 = read_log(&w, "p1", "err");
    const char *start = strstr(e3, "gtcsim: cudaProfilerStart"), *stop = strstr(e3, "gtcsim: cudaProfilerStop");
    cr_expect(count_of(e3, "cudaProfilerStart") == 1 && count_of(e3, "cudaProfilerStop") == 1 && start && stop &&
                  start < stop,
              "3 steps with GTRAIN_PROFILE_STEP=2: expected one Start then one Stop on stderr, found:\n%s", e3);
    cr_expect(strstr(e1, "cudaProfiler") == NULL, "1 step with GTRAIN_PROFILE_STEP=2: expected no range:\n%s", e1);
    expect_one_line(&w, "bad", bad, 2, "GTRAIN_PROFILE_STEP", "two");
    free(e3);
    free(e1);
    ws_fini(&w);
}
