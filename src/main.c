/* main.c - the gtrain command line. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas_setup.h"
#include "config.h"
#include "model_desc.h"
#include "plan.h"
#include "trainer.h"

#define GTRAIN_VERSION "0.1.0"

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: gtrain [COMMAND] --config RUN.yaml [--set KEY=VALUE]...\n"
            "\n"
            "Train a GPT-2 style transformer described by a Hugging Face config.json.\n"
            "\n"
            "commands:\n"
            "  train (default)   run the training job of the config\n"
            "  plan              print the resolved config, effective batch and memory plan; allocate nothing\n"
            "\n"
            "options:\n"
            "  -c, --config FILE     run config (YAML); see --help-config for every key\n"
            "  -s, --set KEY=VALUE   override a config key (dotted for nested: data.seq_len=128); repeatable\n"
            "      --help-config     every config key with its type, default, bounds and meaning\n"
            "      --markdown        with --help-config: the README's reference table\n"
            "  -h, --help            this text\n"
            "  -V, --version         version and the backends built in\n"
            "\n"
            "exit status: 0 success, 1 failure while running, 2 bad input (config, model, data)\n");
}

static int fail(const GtError *err) {
    fprintf(stderr, "gtrain: %s\n", err->msg);
    return err->code ? err->code : GT_EXIT_FAILURE;
}

int main(int argc, char **argv) {
    blas_select_fast_kernel(argc, argv);
    const char *config_path = NULL;
    const char **sets = gt_xcalloc((size_t)argc, sizeof *sets);
    int n_sets = 0, help_config = 0, markdown = 0;
    enum { OPT_HELP_CONFIG = 1000, OPT_MARKDOWN };
    static const struct option long_opts[] = {
        {"config", required_argument, NULL, 'c'},       {"set", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},               {"version", no_argument, NULL, 'V'},
        {"help-config", no_argument, NULL, OPT_HELP_CONFIG}, {"markdown", no_argument, NULL, OPT_MARKDOWN},
        {NULL, 0, NULL, 0}};
    int c, rc = GT_EXIT_OK;
    while ((c = getopt_long(argc, argv, "c:s:hV", long_opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 's': sets[n_sets++] = optarg; break;
        case 'h': print_usage(stdout); goto out;
        case 'V': printf("gtrain %s (backends: %s)\n", GTRAIN_VERSION, backend_built_list()); goto out;
        case OPT_HELP_CONFIG: help_config = 1; break;
        case OPT_MARKDOWN: markdown = 1; break;
        default:
            fprintf(stderr, "gtrain: unknown option (see gtrain --help)\n");
            rc = GT_EXIT_BAD_INPUT;
            goto out;
        }
    }
    if (help_config) {
        config_print_help(stdout, markdown);
        goto out;
    }
    const char *command = "train";
    if (optind < argc) command = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "gtrain: unexpected argument '%s' (see gtrain --help)\n", argv[optind]);
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }
    if (strcmp(command, "train") != 0 && strcmp(command, "plan") != 0) {
        fprintf(stderr, "gtrain: unknown command '%s' (expected train or plan; see gtrain --help)\n", command);
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }
    if (!config_path) {
        fprintf(stderr, "gtrain: --config FILE is required (see gtrain --help)\n");
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }

    GtError err = {0};
    RunConfig *cfg = gt_xcalloc(1, sizeof *cfg);
    ModelDesc desc;
    if (config_load(cfg, config_path, sets, n_sets, &err) || model_desc_load(&desc, cfg->model, &err) ||
        config_check_model(cfg, &desc, &err)) {
        rc = fail(&err);
        free(cfg);
        goto out;
    }
    if (strcmp(command, "plan") == 0) {
        MemPlan plan;
        config_print_resolved(cfg, stdout);
        if (plan_resolve(&plan, &desc, cfg, 1, cfg->memory_limit, &err)) {
            rc = fail(&err);
        } else {
            printf("parameters: %llu\n", (unsigned long long)plan.n_params);
            printf("effective batch size = %d x %d x %d = %ld (per_device_train_batch_size x world x "
                   "gradient_accumulation_steps)\n",
                   plan.B, plan.world, plan.A, plan.effective_batch);
            printf("tokens per optimizer step: %ld\n", plan.tokens_per_step);
            plan_print(&plan, NULL, stdout);
        }
    } else {
        TrainSummary summary;
        if (trainer_run(cfg, &desc, &summary, &err)) rc = fail(&err);
    }
    free(cfg);
out:
    free(sets);
    return rc;
}
