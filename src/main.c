/* main.c - the gtrain command line. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "backend.h"
#include "blas_setup.h"
#include "checkpoint.h"
#include "config.h"
#include "dist.h"
#include "eval.h"
#include "hf_writer.h"
#include "lora.h"
#include "merge.h"
#include "model_desc.h"
#include "outguard.h"
#include "plan.h"
#include "report.h"
#include "sample.h"
#include "tokenize_cmd.h"
#include "trainer.h"

#define GTRAIN_VERSION "0.2.0"

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: gtrain [COMMAND] --config RUN.yaml [--set KEY=VALUE]...\n"
            "\n"
            "Train a transformer a Hugging Face config.json describes (GPT-2, Llama, Mistral, Qwen2, Qwen3,\n"
            "Phi-3): every weight, or LoRA / PiSSA adapters on a frozen base (a lora: section in the run config).\n"
            "\n"
            "commands:\n"
            "  train (default)   run the training job of the config\n"
            "  plan              print the resolved config, effective batch and memory plan; allocate nothing\n"
            "  sample            generate text: --checkpoint DIR (a run, a checkpoint, or a LoRA run's adapter\n"
            "                    directory: its base with the adapter) [--prompt TEXT | --prompt-ids 1,2,3]\n"
            "                    [--tokenizer FILE|DIR] [--max-new-tokens N] [--temperature T] [--top-k K]\n"
            "                    [--seed S] (the tokenizer: default the checkpoint's own tokenizer.json, or a\n"
            "                    PEFT adapter's base model's; without one, text is bytes)\n"
            "                    (N <= 1048576, default 200; T >= 0, 0 greedy, default 0.8; K <= vocab, 0 all,\n"
            "                    default 40; S default 1)\n"
            "  eval              measure a model without training (nothing written into a run directory): the\n"
            "                    config's model and weights, or --checkpoint DIR (as sample takes it); without\n"
            "                    generation.task the validation loss and perplexity, with one (gsm8k, math) the\n"
            "                    accuracy of its generations, one JSON line per example to --output FILE\n"
            "                    (or generation.output)\n"
            "  report DIR        write DIR/report.svg from DIR/metrics.jsonl\n"
            "  merge             merge a PEFT LoRA adapter into its base (PEFT's merge_and_unload) and write\n"
            "                    a Hugging Face model directory: --base DIR --adapter DIR --out DIR\n"
            "                    [--max-shard-size 5GB] [--dtype fp32|bf16] (default: the base's dtype when\n"
            "                    all its tensors are F32 or all BF16, else fp32; --out new or empty)\n"
            "  tokenize          text to token ids (or back, --decode) with a Hugging Face tokenizer.json,\n"
            "                    printed or written as an llm.c shard: the first argument, with options of\n"
            "                    its own (gtrain tokenize --help)\n"
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

/* the long_opts entry whose value is val (every short option has one), or -1 */
static int option_index(const struct option *opts, int val) {
    for (int i = 0; opts[i].name; i++)
        if (opts[i].val == val) return i;
    return -1;
}

/* a decimal integer in [0, max], digits only (no sign, space or exponent) */
static bool parse_count(const char *s, long long max, long long *out) {
    long long v = 0;
    if (!*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (max - (*s - '0')) / 10) return false;
        v = 10 * v + (*s - '0');
    }
    *out = v;
    return true;
}

/* one line "gtrain: ..." on stderr; returns the bad-input exit status */
/* n with thousands separators: 41,943,040 */
static const char *group_digits(char *buf, size_t cap, uint64_t n) {
    char d[32];
    int len = snprintf(d, sizeof d, "%llu", (unsigned long long)n), o = 0;
    for (int i = 0; i < len && o + 2 < (int)cap; i++) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = d[i];
    }
    buf[o] = '\0';
    return buf;
}

static int bad_input(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_input(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gtrain: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return GT_EXIT_BAD_INPUT;
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
static void print_resume_command(const char *argv0, const char *config_path, const char *const *sets, int n_sets,
                                 const RunConfig *cfg, int sig) {
    char abs_bin[GT_PATH_MAX], abs_cfg[GT_PATH_MAX];
    const char *bin = strchr(argv0, '/') && realpath(argv0, abs_bin) ? abs_bin : argv0;
    GtBytes b = {0};
    put_word(&b, bin);
    put_word(&b, "--config");
    put_word(&b, realpath(config_path, abs_cfg) ? abs_cfg : config_path);
    for (int i = 0; i < n_sets; i++) {
        put_word(&b, "--set");
        put_word(&b, sets[i]);
    }
    const ResumeMode rm = config_resume_mode(cfg);
    if (rm != RESUME_AUTO && rm != RESUME_LATEST) {
        put_word(&b, "--set");
        put_word(&b, "resume_from_checkpoint=auto");
    }
    gt_bytes_put(&b, "", 1);
    gt_log("stopped by %s; to resume from the checkpoint just saved, run:%s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
           b.p);
    gt_bytes_free(&b);
}

static int fail(const GtError *err) {
    fflush(stdout); /* what was printed comes before the error, in a shared terminal too */
    fprintf(stderr, "gtrain: %s\n", err->msg);
    return err->code ? err->code : GT_EXIT_FAILURE;
}

int main(int argc, char **argv) {
    cpu_runtime_setup(argc, argv);
    gt_signals_install(); /* from the start: a SIGTERM while loading still ends cleanly */
    if (argc >= 2 && strcmp(argv[1], "tokenize") == 0) return tokenize_command(argc - 1, argv + 1);
    const char *config_path = NULL;
    const char **sets = gt_xcalloc((size_t)argc, sizeof *sets);
    int n_sets = 0, help_config = 0, markdown = 0;
    SampleOptions so = {.max_new_tokens = 200, .temperature = 0.8, .top_k = -1, .seed = 1};
    MergeOptions mo = {0};
    EvalOptions eo = {0};
    enum { OPT_HELP_CONFIG = 1000, OPT_MARKDOWN, OPT_CHECKPOINT, OPT_PROMPT, OPT_PROMPT_IDS, OPT_NEW, OPT_TEMP, OPT_TOPK, OPT_TOKENIZER, OPT_SEED,
           OPT_BASE, OPT_ADAPTER, OPT_OUT, OPT_MAX_SHARD, OPT_DTYPE, OPT_OUTPUT };
    static const struct option long_opts[] = {
        {"config", required_argument, NULL, 'c'},       {"set", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},               {"version", no_argument, NULL, 'V'},
        {"help-config", no_argument, NULL, OPT_HELP_CONFIG}, {"markdown", no_argument, NULL, OPT_MARKDOWN},
        {"checkpoint", required_argument, NULL, OPT_CHECKPOINT}, {"prompt", required_argument, NULL, OPT_PROMPT},
        {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS}, {"max-new-tokens", required_argument, NULL, OPT_NEW},
        {"temperature", required_argument, NULL, OPT_TEMP},   {"top-k", required_argument, NULL, OPT_TOPK},
        {"seed", required_argument, NULL, OPT_SEED},         {"base", required_argument, NULL, OPT_BASE},
        {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
        {"adapter", required_argument, NULL, OPT_ADAPTER},   {"out", required_argument, NULL, OPT_OUT},
        {"max-shard-size", required_argument, NULL, OPT_MAX_SHARD}, {"dtype", required_argument, NULL, OPT_DTYPE},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {NULL, 0, NULL, 0}};
    int c, rc = GT_EXIT_OK;
    int given[sizeof long_opts / sizeof *long_opts] = {0}; /* times each option was given */
    opterr = 0; /* one line of our own for a bad option, not getopt's */
    while ((c = getopt_long(argc, argv, ":c:s:hV", long_opts, NULL)) != -1) {
        int k = option_index(long_opts, c);
        if (k >= 0 && given[k]++ && c != 's') {
            rc = bad_input("--%s: given more than once", long_opts[k].name);
            goto out;
        }
        switch (c) {
        case 'c': config_path = optarg; break;
        case 's': sets[n_sets++] = optarg; break;
        case 'h': print_usage(stdout); goto out;
        case 'V': printf("gtrain %s (backends: %s; dist: %s)\n", GTRAIN_VERSION, backend_built_list(), dist_built()); goto out;
        case OPT_HELP_CONFIG: help_config = 1; break;
        case OPT_MARKDOWN: markdown = 1; break;
        case OPT_CHECKPOINT: so.checkpoint = eo.checkpoint = optarg; break;
        case OPT_OUTPUT: eo.output = optarg; break;
        case OPT_PROMPT: so.prompt = optarg; break;
        case OPT_PROMPT_IDS: so.prompt_ids = optarg; break;
        case OPT_TOKENIZER: so.tokenizer = optarg; break;
        case OPT_BASE: mo.base = optarg; break;
        case OPT_ADAPTER: mo.adapter = optarg; break;
        case OPT_OUT: mo.out = optarg; break;
        case OPT_MAX_SHARD: {
            char why[256];
            if (hf_parse_size(optarg, &mo.max_shard_bytes, why, sizeof why)) {
                rc = bad_input("--max-shard-size: %s", why);
                goto out;
            }
            break;
        }
        case OPT_DTYPE:
            if (strcmp(optarg, "fp32") == 0 || strcmp(optarg, "float32") == 0) mo.dtype = MERGE_DTYPE_FP32;
            else if (strcmp(optarg, "bf16") == 0 || strcmp(optarg, "bfloat16") == 0) mo.dtype = MERGE_DTYPE_BF16;
            else {
                rc = bad_input("--dtype: expected fp32 or bf16, found \"%s\"", optarg);
                goto out;
            }
            break;
        case OPT_TEMP: {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || *end || !*optarg || *optarg == ' ' || !isfinite(v) || v < 0) {
                rc = bad_input("--temperature: expected a non-negative number (0: greedy), found \"%s\"", optarg);
                goto out;
            }
            so.temperature = v;
            break;
        }
        case OPT_NEW:
        case OPT_TOPK:
        case OPT_SEED: {
            /* --top-k is checked against the vocabulary once the model is read (sample_run) */
            long long max = c == OPT_NEW ? SAMPLE_MAX_NEW_TOKENS : c == OPT_TOPK ? INT_MAX : LLONG_MAX, v;
            if (!parse_count(optarg, max, &v)) {
                rc = bad_input("--%s: expected an integer in [0, %lld], found \"%s\"", long_opts[k].name, max, optarg);
                goto out;
            }
            if (c == OPT_NEW) so.max_new_tokens = (int)v;
            if (c == OPT_TOPK) so.top_k = (int)v;
            if (c == OPT_SEED) so.seed = (uint64_t)v;
            break;
        }
        case ':': /* a missing value: optopt is the option */
            k = option_index(long_opts, optopt);
            rc = bad_input("--%s: expected a value (see gtrain --help)", k >= 0 ? long_opts[k].name : "?");
            goto out;
        default: /* '?': optopt is the option given a value it takes none of, an unknown short
                  * option, or 0 for an unknown long one (then argv[optind - 1]) */
            k = option_index(long_opts, optopt);
            if (optopt && k >= 0)
                rc = bad_input("--%s: takes no value", long_opts[k].name);
            else if (optopt)
                rc = bad_input("-%c: unknown option (see gtrain --help)", optopt);
            else
                rc = bad_input("%s: unknown or ambiguous option (see gtrain --help)", argv[optind - 1]);
            goto out;
        }
    }
    if (markdown && !help_config) {
        rc = bad_input("--markdown: only with --help-config");
        goto out;
    }
    if (help_config) {
        config_print_help(stdout, markdown);
        goto out;
    }
    const char *command = "train";
    if (optind < argc) command = argv[optind++];
    GtError err = {0};
    /* options that belong to another command are errors, not silently ignored (an unknown
     * command is named below) */
    bool sampling = strcmp(command, "sample") == 0, reporting = strcmp(command, "report") == 0;
    bool merging = strcmp(command, "merge") == 0, evaluating = strcmp(command, "eval") == 0;
    bool known = sampling || reporting || merging || evaluating || strcmp(command, "train") == 0 || strcmp(command, "plan") == 0;
    for (int k = 0; known && long_opts[k].name; k++) {
        int v = long_opts[k].val; /* sample's own options are OPT_CHECKPOINT..OPT_SEED, merge's OPT_BASE..OPT_DTYPE */
        bool sample_only = v >= OPT_CHECKPOINT && v <= OPT_SEED && !(v == OPT_CHECKPOINT && evaluating);
        bool config_only = v == 'c' || v == 's';
        if (given[k] && v == OPT_OUTPUT && !evaluating) {
            rc = bad_input("--output: only for gtrain eval");
            goto out;
        }
        bool merge_only = v >= OPT_BASE && v <= OPT_DTYPE;
        if (given[k] && sample_only && !sampling) {
            rc = bad_input("--%s: only for gtrain sample%s", long_opts[k].name, v == OPT_CHECKPOINT ? " and eval" : "");
            goto out;
        }
        if (given[k] && merge_only && !merging) {
            rc = bad_input("--%s: only for gtrain merge", long_opts[k].name);
            goto out;
        }
        if (given[k] && config_only && (sampling || reporting || merging)) {
            rc = bad_input("--%s: not for gtrain %s (only train, plan and eval read a run config)", long_opts[k].name, command);
            goto out;
        }
    }
    if (reporting) {
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
    if (merging) {
        if (optind < argc)
            rc = bad_input("merge: unexpected argument '%s' (see gtrain --help)", argv[optind]);
        else if (!mo.base || !*mo.base)
            rc = bad_input("merge: --base DIR is required (the model directory the adapter was trained on)%s",
                           mo.base ? "; found \"\"" : "");
        else if (!mo.adapter || !*mo.adapter)
            rc = bad_input("merge: --adapter DIR is required (a PEFT LoRA adapter directory)%s", mo.adapter ? "; found \"\"" : "");
        else if (!mo.out || !*mo.out)
            rc = bad_input("merge: --out DIR is required (a new or empty directory for the merged model)%s",
                           mo.out ? "; found \"\"" : "");
        else {
            MergeSummary ms;
            if (merge_run(&mo, &ms, &err))
                rc = fail(&err);
            else
                printf("%s: %d tensors (%d merged with the adapter: r %d, scale %g), %s, %d weight file%s\n", mo.out,
                       ms.n_tensors, ms.n_adapted, ms.r, ms.scale, ms.bf16 ? "bf16" : "fp32", ms.n_shards,
                       ms.n_shards == 1 ? "" : "s");
        }
        goto out;
    }
    if (sampling) {
        if (optind < argc)
            rc = bad_input("sample: unexpected argument '%s' (see gtrain --help)", argv[optind]);
        else if (!so.checkpoint || !*so.checkpoint)
            rc = bad_input("sample: --checkpoint DIR is required%s", so.checkpoint ? " (found \"\")" : "");
        else if (so.prompt && so.prompt_ids)
            rc = bad_input("sample: --prompt and --prompt-ids exclude each other");
        else if (so.prompt && !*so.prompt)
            rc = bad_input("sample: --prompt: expected text, found \"\" (without --prompt a sample starts from a newline)");
        else {
            gt_log_to_stderr(true); /* stdout is the sample: the backend's notes must not end up in it */
            if (sample_run(&so, stdout, &err)) rc = fail(&err);
        }
        goto out;
    }
    if (optind < argc) {
        fprintf(stderr, "gtrain: unexpected argument '%s' (see gtrain --help)\n", argv[optind]);
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }
    if (strcmp(command, "tokenize") == 0) {
        fprintf(stderr, "gtrain: tokenize: the command comes first, with options of its own (gtrain tokenize --help)\n");
        rc = GT_EXIT_BAD_INPUT;
        goto out;
    }
    if (strcmp(command, "train") != 0 && strcmp(command, "plan") != 0 && !evaluating) {
        fprintf(stderr, "gtrain: unknown command '%s' (expected train, plan, eval, sample, report, merge or tokenize; see gtrain --help)\n", command);
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
    PeftConfig peft;
    char *model_json = NULL; /* config.json as read now: a checkpoint's is written from it, never read again */
    if (config_load(cfg, config_path, sets, n_sets, &err) || (!evaluating && out_guard_run(cfg, &err)) ||
        model_desc_load_source(&desc, cfg->model, &model_json, &err) ||
        config_check_model(cfg, &desc, &err) || lora_configure(&desc, &peft, cfg, &err) ||
        checkpoint_base_quant(&desc, cfg->init_from[0] ? cfg->init_from : cfg->model, &err)) {
        rc = fail(&err);
        free(model_json);
        free(cfg);
        goto out;
    }
    if (evaluating) {
        if (eval_run(cfg, &desc, &eo, &err)) rc = fail(&err);
    } else if (strcmp(command, "plan") == 0) {
        MemPlan plan;
        memset(&plan, 0, sizeof plan);
        printf("model: %s (%s), %d layers, hidden %d, %d heads (%d kv), vocab %d\n", desc.model_type,
               arch_hf_class(&desc), desc.n_layer, desc.n_embd, desc.n_head, desc.n_kv_head, desc.vocab_size);
        printf("parameters: %llu\n", (unsigned long long)model_desc_num_params(&desc));
        if (desc.adapter.r > 0) {
            uint64_t n = lora_num_params(&desc);
            char grouped[40];
            printf("trainable parameters: %llu (%s; %s r %d, lora_alpha %g, scale %g, init %s), %.4f%% of %llu; the "
                   "base is frozen\n", (unsigned long long)n, group_digits(grouped, sizeof grouped, n),
                   desc.adapter.dora ? "DoRA" : "LoRA", peft.r,
                   peft.lora_alpha, desc.adapter.scale,
                   cfg->lora.init_from[0] ? cfg->lora.init_from : peft.init,
                   100.0 * (double)n / (double)model_desc_num_params(&desc), (unsigned long long)model_desc_num_params(&desc));
            printf("target modules:");
            for (int i = 0; i < peft.n_targets; i++) printf(" %s", peft.target_modules[i]);
            printf("\n");
            const int niter = cfg->lora.init_from[0] ? -2 : lora_pissa_niter_of(cfg->lora.init_lora_weights);
            if (niter != -2) {
                char b[32];
                printf("PiSSA initialisation (%s): on the host before step 1, a block at a time, about %s at its "
                       "peak, freed before training\n", niter < 0 ? "exact SVD" : "randomised SVD",
                       gt_format_bytes(b, sizeof b, lora_pissa_host_bytes(&desc, niter)));
            }
        }
        /* memory_limit auto: on the CPU, the RAM available now (what a run would check); a GPU's free
         * memory is read only by a run (asking the driver costs a context), so no limit here */
        uint64_t limit = cfg->memory_limit;
        bool on_cpu = cfg->device == DEVICE_CPU;
        on_cpu = on_cpu || (cfg->device == DEVICE_AUTO && backend_gpu_count() == 0);
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
            printf("memory limit: none here (memory_limit auto: a run on the GPU checks its free memory at start, less "
                   "the runtime_reserve it prints)\n");
        int refused = plan_resolve(&plan, &desc, cfg, 1, limit, &err);
        if (!refused) /* the resolved table shows auto-fit's choices */
            config_set_fitted(cfg, plan.B, plan.A, plan.policy.every_n > 0,
                              plan.policy.every_n > 0 ? plan.policy.every_n : 1, plan.policy.offload);
        config_print_resolved(cfg, stdout);
        if (refused) {
            if (plan.B > 0 && !plan.overflow) { /* the plan that was refused: where the bytes would go */
                printf("the plan that does not fit:\n");
                plan_print(&plan, NULL, stdout);
            }
            rc = fail(&err);
        } else {
            printf("effective batch size = %d x %d x %d = %ld (per_device_train_batch_size x world x "
                   "gradient_accumulation_steps)\n",
                   plan.B, plan.world, plan.A, plan.effective_batch);
            printf("tokens per optimizer step: %ld\n", plan.tokens_per_step);
            char layout[96];
            printf("layout: micro-batch %d x accumulation %d, recompute %s\n", plan.B, plan.A,
                   recompute_describe(&plan.policy, layout, sizeof layout));
            plan_print(&plan, NULL, stdout);
            /* packed data: how many rows the examples pack into and the padding left (reads the data) */
            if (cfg->data.packing && cfg->data.format == DATA_JSONL && trainer_plan_data(cfg, &desc, &err))
                rc = fail(&err);
        }
    } else {
        /* several ranks: a failure on one ends every rank with a line naming it (dist_fail) */
        Dist *dist = NULL;
        TrainSummary summary;
        if (dist_init(&dist, &argc, &argv, cfg->dist_timeout, &err)) {
            rc = fail(&err);
        } else if (trainer_run(cfg, &desc, &peft, dist, &summary, &err)) {
            if (dist_world(dist) > 1) dist_fail(dist, &err);
            rc = fail(&err);
        } else if (summary.stopped_by_signal) {
            print_resume_command(argv[0], config_path, sets, n_sets, cfg, gt_stop_signal());
        }
        dist_finalize(dist);
    }
    free(model_json);
    free(cfg);
out:
    free(sets);
    return rc;
}
