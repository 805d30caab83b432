/* run_cmd.h - what the commands that read a run config (train, eval, plan) share: --config and
 * --set read, the config loaded, its model described and checked, LoRA configured. */
#ifndef GT_RUN_CMD_H
#define GT_RUN_CMD_H

#include "cli.h"
#include "config.h"
#include "model_desc.h"
#include "peft.h"

typedef struct {
    const char *config_path;
    const char **sets; /* the --set overrides as given */
    int n_sets;
    RunConfig *cfg;
    ModelDesc desc;
    PeftConfig peft;
    char *model_json; /* config.json as read now (desc borrows it): a checkpoint's is written from it */
} RunInputs;

/* Loads what a's --config and --set name; guard_output: the run's output_dir checked as a run
 * would write it (out_guard_run). Returns 0, or the exit status of the error already printed
 * (r freed then). */
int run_inputs_load(RunInputs *r, const CliArgs *a, bool guard_output);
void run_inputs_free(RunInputs *r);

#endif
