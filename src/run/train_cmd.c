/* train_cmd.c - `gtrain train` (the default: gtrain --config RUN.yaml) and `gtrain eval`, and the
 * run-config loading they share with `gtrain plan` (run_cmd.h). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "cuda_module.h"
#include "dist.h"
#include "eval.h"
#include "lora.h"
#include "outguard.h"
#include "run_cmd.h"
#include "trainer.h"

int run_inputs_load(RunInputs *r, const CliArgs *a, bool guard_output) {
    memset(r, 0, sizeof *r);
    r->config_path = cli_value(a, "config");
    if (!r->config_path) return cli_error(a->cmd, "--config FILE is required");
    r->sets = gt_xcalloc((size_t)a->n_values + 1, sizeof *r->sets);
    r->n_sets = cli_values(a, "set", r->sets);
    r->cfg = gt_xcalloc(1, sizeof *r->cfg);
    GtError err = {0};
    const RunConfig *cfg = r->cfg;
    if (config_load(r->cfg, r->config_path, r->sets, r->n_sets, &err) || (guard_output && out_guard_run(cfg, &err)) ||
        model_desc_load_source(&r->desc, cfg->model, &r->model_json, &err) || config_check_model(r->cfg, &r->desc, &err) ||
        lora_configure(&r->desc, &r->peft, cfg, &err) ||
        checkpoint_base_quant(&r->desc, cfg->init_from[0] ? cfg->init_from : cfg->model, &err)) {
        run_inputs_free(r);
        return cli_fail(&err);
    }
    return 0;
}

void run_inputs_free(RunInputs *r) {
    free(r->model_json);
    free(r->cfg);
    free(r->sets);
    memset(r, 0, sizeof *r);
}

/* s as one shell word: as it is when plain, else in single quotes */
static void put_word(GtBytes *b, const char *s) {
    bool plain = *s != '\0';
    for (const char *p = s; *p && plain; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_/.=,:@%+-", *p);
    gt_bytes_put(b, " ", 1);
    if (plain) {
        gt_bytes_put(b, s, strlen(s));
        return;
    }
    gt_bytes_put(b, "'", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '\'') gt_bytes_put(b, "'\\''", 4);
        else gt_bytes_put(b, p, 1);
    }
    gt_bytes_put(b, "'", 1);
}

/* After a stop signal: the command that resumes, as invoked (the binary and the config by their
 * absolute paths, the --set overrides as given; resume_from_checkpoint=auto added when the config
 * does not resume by itself). */
static void print_resume_command(const char *argv0, const RunInputs *r, int sig) {
    char abs_bin[GT_PATH_MAX], abs_cfg[GT_PATH_MAX];
    const char *bin = strchr(argv0, '/') && realpath(argv0, abs_bin) ? abs_bin : argv0;
    GtBytes b = {0};
    put_word(&b, bin);
    put_word(&b, "--config");
    put_word(&b, realpath(r->config_path, abs_cfg) ? abs_cfg : r->config_path);
    for (int i = 0; i < r->n_sets; i++) {
        put_word(&b, "--set");
        put_word(&b, r->sets[i]);
    }
    const ResumeMode rm = config_resume_mode(r->cfg);
    if (rm != RESUME_AUTO && rm != RESUME_LATEST) {
        put_word(&b, "--set");
        put_word(&b, "resume_from_checkpoint=auto");
    }
    gt_bytes_put(&b, "", 1);
    gt_log("stopped by %s; to resume from the checkpoint just saved, run:%s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
           b.p);
    gt_bytes_free(&b);
}

int train_command(CliArgs *a) {
    if (cli_given(a, "version")) {
        char found[1024];
        printf("gtrain %s (backends: %s; dist: %s)\nCUDA module looked for in %s\n", GTRAIN_VERSION,
               backend_describe(found, sizeof found), dist_built(),
               getenv(GT_BACKEND_DIR_ENV) ? "$" GT_BACKEND_DIR_ENV
                                          : "the executable's folder (or $" GT_BACKEND_DIR_ENV ")");
        return GT_EXIT_OK;
    }
    const bool markdown = cli_given(a, "markdown");
    if (markdown && !cli_given(a, "help-config")) return cli_error(a->cmd, "--markdown: only with --help-config");
    if (cli_given(a, "help-config")) {
        config_print_help(stdout, markdown);
        return GT_EXIT_OK;
    }
    RunInputs r;
    int rc = run_inputs_load(&r, a, true);
    if (rc) return rc;
    /* several ranks: a failure on one ends every rank with a line naming it (dist_fail) */
    Dist *dist = NULL;
    TrainSummary summary;
    GtError err = {0};
    if (dist_init(&dist, &a->argc, &a->argv, r.cfg->dist_timeout, &err)) {
        rc = cli_fail(&err);
    } else if (trainer_run(r.cfg, &r.desc, &r.peft, dist, &summary, &err)) {
        if (dist_world(dist) > 1) dist_fail(dist, &err);
        rc = cli_fail(&err);
    } else if (summary.stopped_by_signal) {
        print_resume_command(a->argv[0], &r, gt_stop_signal());
    }
    dist_finalize(dist);
    run_inputs_free(&r);
    return rc;
}

int eval_command(CliArgs *a) {
    RunInputs r;
    int rc = run_inputs_load(&r, a, false);
    if (rc) return rc;
    const EvalOptions eo = {.checkpoint = cli_value(a, "checkpoint"), .output = cli_value(a, "output")};
    GtError err = {0};
    if (eval_run(r.cfg, &r.desc, &eo, &err)) rc = cli_fail(&err);
    run_inputs_free(&r);
    return rc;
}
