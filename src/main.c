/* main.c - the gtrain command line. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas_setup.h"
#include "config.h"
#include "dist.h"
#include "model_desc.h"
#include "plan.h"
#include "report.h"
#include "sample.h"
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
            "  sample            generate text: --checkpoint DIR [--prompt TEXT | --prompt-ids 1,2,3]\n"
            "                    [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]\n"
            "  report DIR        write DIR/report.svg from DIR/metrics.jsonl\n"
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
    cpu_runtime_setup(argc, argv);
    gt_signals_install(); /* from the start: a SIGTERM while loading still ends cleanly */
    const char *config_path = NULL;
    const char **sets = gt_xcalloc((size_t)argc, sizeof *sets);
    int n_sets = 0, help_config = 0, markdown = 0;
    SampleOptions so = {.max_new_tokens = 200, .temperature = 0.8, .top_k = 40, .seed = 1};
    enum { OPT_HELP_CONFIG = 1000, OPT_MARKDOWN, OPT_CHECKPOINT, OPT_PROMPT, OPT_PROMPT_IDS, OPT_NEW, OPT_TEMP, OPT_TOPK, OPT_SEED };
    static const struct option long_opts[] = {
        {"config", required_argument, NULL, 'c'},       {"set", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},               {"version", no_argument, NULL, 'V'},
        {"help-config", no_argument, NULL, OPT_HELP_CONFIG}, {"markdown", no_argument, NULL, OPT_MARKDOWN},
        {"checkpoint", required_argument, NULL, OPT_CHECKPOINT}, {"prompt", required_argument, NULL, OPT_PROMPT},
        {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS}, {"max-new-tokens", required_argument, NULL, OPT_NEW},
        {"temperature", required_argument, NULL, OPT_TEMP},   {"top-k", required_argument, NULL, OPT_TOPK},
        {"seed", required_argument, NULL, OPT_SEED},         {NULL, 0, NULL, 0}};
    int c, rc = GT_EXIT_OK;
    while ((c = getopt_long(argc, argv, "c:s:hV", long_opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 's': sets[n_sets++] = optarg; break;
        case 'h': print_usage(stdout); goto out;
        case 'V': printf("gtrain %s (backends: %s; dist: %s)\n", GTRAIN_VERSION, backend_built_list(), dist_built()); goto out;
        case OPT_HELP_CONFIG: help_config = 1; break;
        case OPT_MARKDOWN: markdown = 1; break;
        case OPT_CHECKPOINT: so.checkpoint = optarg; break;
        case OPT_PROMPT: so.prompt = optarg; break;
        case OPT_PROMPT_IDS: so.prompt_ids = optarg; break;
        case OPT_NEW:
        case OPT_TEMP:
        case OPT_TOPK:
        case OPT_SEED: {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            bool integral = c != OPT_TEMP;
            if (errno || *end || !*optarg || !isfinite(v) || v < 0 || (integral && (v != floor(v) || v > 1e9))) {
                fprintf(stderr, "gtrain: --%s: expected a non-negative %s, found \"%s\"\n", long_opts[c - OPT_HELP_CONFIG + 4].name,
                        integral ? "integer" : "number", optarg);
                rc = GT_EXIT_BAD_INPUT;
                goto out;
            }
            if (c == OPT_NEW) so.max_new_tokens = (int)v;
            if (c == OPT_TEMP) so.temperature = v;
            if (c == OPT_TOPK) so.top_k = (int)v;
            if (c == OPT_SEED) so.seed = (uint64_t)v;
            break;
        }
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
    GtError err = {0};
    if (strcmp(command, "report") == 0) {
        if (optind != argc - 1) {
            fprintf(stderr, "gtrain: report: expected one run directory (gtrain report DIR)\n");
            rc = GT_EXIT_BAD_INPUT;
        } else if (report_write(argv[optind], &err)) {
            rc = fail(&err);
        } else {
            printf("%s/report.svg\n", argv[optind]);
        }
        goto out;
    }
    if (strcmp(command, "sample") == 0) {
        if (!so.checkpoint) {
            fprintf(stderr, "gtrain: sample: --checkpoint DIR is required\n");
            rc = GT_EXIT_BAD_INPUT;
        } else if (sample_run(&so, stdout, &err)) {
            rc = fail(&err);
        }
        goto out;
    }
    if (optind < argc) {
        fprintf(stderr, "gtrain: unexpected argument '%s' (see gtrain --help)\n", argv[optind]);
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }
    if (strcmp(command, "train") != 0 && strcmp(command, "plan") != 0) {
        fprintf(stderr, "gtrain: unknown command '%s' (expected train, plan, sample or report; see gtrain --help)\n", command);
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }
    if (!config_path) {
        fprintf(stderr, "gtrain: --config FILE is required (see gtrain --help)\n");
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }

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
        /* memory_limit auto: on the CPU, the RAM available now (what a run would check); a GPU's free
         * memory is read only by a run (asking the driver costs a context), so no limit here */
        uint64_t limit = cfg->memory_limit;
        bool on_cpu = cfg->device == DEVICE_CPU;
#ifdef GT_HAVE_CUDA
        on_cpu = on_cpu || (cfg->device == DEVICE_AUTO && cuda_device_count() == 0);
#else
        on_cpu = on_cpu || cfg->device == DEVICE_AUTO;
#endif
        char lim[32];
        if (!limit && on_cpu) {
            Backend *cpu = NULL;
            if (cpu_backend_create(&cpu, 1, &err) == 0) {
                limit = cpu->device_free_bytes;
                backend_close(cpu);
            }
        }
        if (limit)
            printf("memory limit: %s (%s)\n", gt_format_bytes(lim, sizeof lim, limit),
                   cfg->memory_limit ? "memory_limit" : "available RAM");
        else
            printf("memory limit: none here (memory_limit auto: a run on the GPU checks its free memory at start)\n");
        if (plan_resolve(&plan, &desc, cfg, 1, limit, &err)) {
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
        /* several ranks: a failure on one ends every rank with a line naming it (dist_fail) */
        Dist *dist = NULL;
        TrainSummary summary;
        if (dist_init(&dist, &argc, &argv, cfg->dist_timeout, &err)) {
            rc = fail(&err);
        } else if (trainer_run(cfg, &desc, dist, &summary, &err)) {
            if (dist_world(dist) > 1) dist_fail(dist, &err);
            rc = fail(&err);
        }
        dist_finalize(dist);
    }
    free(cfg);
out:
    free(sets);
    return rc;
}
