/* config.h - the run config (YAML) and its one schema table.
 *
 * Every key lives in the schema table in config_table.c: its name (dotted for nested keys), type,
 * default, bounds and one-line doc. The same table parses the YAML, applies --set overrides,
 * validates, prints `gtrain --help-config` and generates the README's config reference. */
#ifndef GT_CONFIG_H
#define GT_CONFIG_H

#include <string.h>

#include "common.h"

typedef enum { CFG_SRC_DEFAULT = 0, CFG_SRC_FILE, CFG_SRC_SET, CFG_SRC_AUTOFIT } ConfigSource;
typedef enum { LR_CONSTANT = 0, LR_LINEAR, LR_COSINE, LR_COSINE_MIN_LR } LrSchedule;
typedef enum { PREC_FP32 = 0, PREC_BF16 } Precision;
typedef enum { DEVICE_AUTO = 0, DEVICE_CPU, DEVICE_CUDA } DeviceKind;
typedef enum { LOSS_NORM_TOKENS = 0, LOSS_NORM_STEPS } LossNormalization;
/* auto is resolved from data.train's extension when the config is read (data_format_for_path) */
typedef enum { DATA_TEXT = 0, DATA_TOKENS, DATA_JSONL, DATA_JSON, DATA_PARQUET, DATA_AUTO } DataFormat;
#define CONFIG_COLUMN_MAX 128 /* a data.columns.* name's bytes, with its NUL */
/* A list of exact strings (generation.stop) is stored joined by this byte (which its items may not hold). */
#define CONFIG_LIST_SEP '\x1f'
#define CONFIG_MAX_STOP 16 /* generation.stop's strings (generate.h's GEN_MAX_STOP) */
typedef enum { GEN_FORMAT_AUTO = 0, GEN_FORMAT_JSONL, GEN_FORMAT_JSON, GEN_FORMAT_PARQUET } GenDataFormat;
typedef enum { NAN_SKIP = 0, NAN_STOP } NanPolicy;
typedef enum { SAVE_DTYPE_AUTO = 0, SAVE_DTYPE_BF16, SAVE_DTYPE_FP32 } SaveDtype;
/* init: where the first weights come from (auto: pretrained when there are weights to name) */
typedef enum { INIT_AUTO = 0, INIT_PRETRAINED, INIT_RANDOM } InitKind;

#define GT_CONFIG_MAX_KEYS 96

/* Bounds of the lora: section's values as text (PEFT's, which peft.h keeps; lora.c asserts they agree). */
#define CONFIG_LORA_MAX_R 65536     /* lora.r */
#define CONFIG_LORA_MAX_TARGETS 16  /* names in lora.target_modules */
#define CONFIG_LORA_NAME_MAX 32     /* a name's bytes, with its NUL */

/* Bounds of the batch layout keys, shared with the plan's auto-fit (every layout it considers or
 * suggests is one a config could spell). */
#define GT_MAX_MICRO_BATCH 65536      /* per_device_train_batch_size */
#define GT_MAX_ACCUM_STEPS (1 << 20)  /* gradient_accumulation_steps */

typedef struct {
    /* where the config came from; relative paths below are resolved against config_dir */
    char config_path[GT_PATH_MAX];
    char config_dir[GT_PATH_MAX];

    char model[GT_PATH_MAX];     /* model JSON, resolved path */
    char init_from[GT_PATH_MAX]; /* "" = random init; else a model.safetensors or a run dir */
    InitKind init;               /* random: no weights loaded; else model dir's or init_from's, required */
    char tokenizer[GT_PATH_MAX]; /* "" = model's tokenizer.json if any; "none" = byte-level; else a path */

    struct {
        char train[GT_PATH_MAX]; /* resolved path (or glob for tokens) */
        char val[GT_PATH_MAX];   /* "" = split from train (text) / none */
        DataFormat format;
        int seq_len;
        double val_fraction; /* text without val file: last fraction of the bytes */
        bool packing;        /* jsonl: examples end to end in full rows instead of one padded row each */
        bool shuffle;        /* training rows in seeded random order; false = file order (data_fill_train) */
        char prompt_template[GT_PATH_MAX];     /* jsonl: "" = the "prompt" member */
        char completion_template[GT_PATH_MAX]; /* jsonl: "" = the "completion" member */
        bool add_eos;                          /* jsonl with a tokenizer: EOS after the completion */
        struct { /* the file's column for each of gtrain's names; "" = the name itself */
            char text[CONFIG_COLUMN_MAX], prompt[CONFIG_COLUMN_MAX], completion[CONFIG_COLUMN_MAX],
                messages[CONFIG_COLUMN_MAX];
        } columns;
        char chat_template[GT_PATH_MAX]; /* messages: "" = the tokenizer's tokenizer_config.json */
        bool assistant_only_loss;        /* messages: only the assistant turns train */
    } data;

    int per_device_train_batch_size; /* 0 means "auto" (needs train_batch_size) */
    int train_batch_size;            /* effective batch asked for with auto; 0 = unset */
    int per_device_eval_batch_size;
    int gradient_accumulation_steps;
    bool gradient_checkpointing;
    int every_n_layers;
    bool offload;

    long max_steps;          /* -1: derived from num_train_epochs */
    double num_train_epochs;
    double learning_rate;
    LrSchedule lr_scheduler_type;
    double min_lr_rate; /* cosine_with_min_lr: the floor, as a fraction of learning_rate */
    long warmup_steps;
    double warmup_ratio; /* HF's: warmup_steps = ceil(warmup_ratio * max_steps) when warmup_steps is 0 */
    double weight_decay;
    double adam_beta1, adam_beta2, adam_epsilon;
    double max_grad_norm; /* 0 disables clipping */
    Precision precision;
    uint64_t seed;
    DeviceKind device;
    LossNormalization loss_normalization;

    long logging_steps;
    long eval_steps;       /* 0 = only at the end */
    long eval_max_batches; /* 0 = whole val set */
    long save_steps;       /* 0 = no checkpoints */
    int save_total_limit;  /* 0 = keep all */
    char save_max_shard_size[GT_PATH_MAX]; /* as save_pretrained's max_shard_size ("5GB"); checked at load,
                                            * bytes through hf_parse_size (hf_writer.h) */
    SaveDtype save_dtype;  /* auto: the master weights' precision (fp32) */
    char output_dir[GT_PATH_MAX];
    char resume_from_checkpoint[GT_PATH_MAX]; /* "auto", "latest", a directory; "", "never", "false": fresh */
    uint64_t memory_limit; /* bytes; 0 = auto (device free memory / available RAM) */
    int num_threads;       /* CPU threads; 0 = all cores */
    bool overwrite_output_dir;   /* allow output_dir to hold a different run */
    NanPolicy nan_policy;        /* what a non-finite loss or grad norm does */
    long max_skipped_steps;      /* stop after this many skipped steps in a row */
    int sample_max_new_tokens;   /* print a sample of this many tokens at the end (0: none) */
    int zero_stage;              /* 0: plain data parallel; 1: optimizer state sharded */
    Precision ddp_grad_dtype;    /* the gradients' dtype in the all-reduce / reduce-scatter: fp32 or bf16 */
    char dist_init_file[GT_PATH_MAX]; /* NCCL id exchange file for srun-only launches */
    double dist_timeout;         /* seconds a collective may wait for the other ranks */

    /* LoRA / PiSSA (PEFT LoraConfig's names). enabled: the config has a lora: section (or a
     * lora.* --set); otherwise full fine-tuning. Read here as text and values only (r's range,
     * target_modules' list form): lora.c checks what they mean and applies them to the model. */
    struct {
        bool enabled;
        int r; /* [1, CONFIG_LORA_MAX_R] */
        double lora_alpha, lora_dropout;
        /* names (at most CONFIG_LORA_MAX_TARGETS, each shorter than CONFIG_LORA_NAME_MAX) separated by
         * commas, "all-linear", or "" (PEFT's default) */
        char target_modules[GT_PATH_MAX];
        bool use_rslora;
        bool use_dora;                       /* DoRA: PEFT's use_dora */
        char init_lora_weights[GT_PATH_MAX]; /* true, false, gaussian, pissa, pissa_niter_N */
        char init_from[GT_PATH_MAX];         /* a PEFT adapter directory to continue from, or "" */
        int base_dtype;                      /* BaseDtype (model_desc.h): the frozen base's storage */
        /* QLoRA: the base's linear weights quantized 4-bit (BitsAndBytesConfig's names) */
        int quantize_base;                   /* QuantizeBase (adapter_desc.h): none or nf4 */
        int bnb_4bit_quant_type;             /* 0: nf4 (the only one) */
        bool bnb_4bit_use_double_quant;      /* the absmax values quantized to 8 bits too */
        int bnb_4bit_compute_dtype;          /* ComputeDtype (adapter_desc.h): auto, float32, bfloat16 */
    } lora;

    /* generation (gtrain eval, and accuracy at each eval of a training run): prompts from a dataset,
     * decoded, the answers scored (scorers.h). task: GenTask (none, gsm8k, math). */
    struct {
        int task;
        char data[GT_PATH_MAX];
        int format; /* GenDataFormat: auto (by data's extension), jsonl, json, parquet */
        char prompt_template[GT_PATH_MAX];
        struct {
            char prompt[CONFIG_COLUMN_MAX], messages[CONFIG_COLUMN_MAX], answer[CONFIG_COLUMN_MAX];
        } columns;
        int max_new_tokens;
        bool do_sample;
        double temperature, top_p;
        int top_k;              /* 0: off */
        char stop[GT_PATH_MAX]; /* stop strings, each exact, joined by CONFIG_LIST_SEP */
        char output[GT_PATH_MAX];
        long max_examples; /* 0: all */
        int batch_size;    /* cache slots; 0: auto */
    } generation;

    /* where each schema key's value came from, indexed like the schema table */
    ConfigSource source[GT_CONFIG_MAX_KEYS];
    int source_line[GT_CONFIG_MAX_KEYS]; /* 1-based line in the file (0 if not from the file) */
    int source_col[GT_CONFIG_MAX_KEYS];  /* 1-based column of the value in the file (0 if not from the file) */
} RunConfig;

/* How resume_from_checkpoint reads: the one place its literals are told apart. */
typedef enum { RESUME_NEVER = 0, RESUME_AUTO, RESUME_LATEST, RESUME_PATH } ResumeMode;
static inline ResumeMode config_resume_mode(const RunConfig *c) {
    const char *r = c->resume_from_checkpoint;
    if (!r[0] || strcmp(r, "never") == 0 || strcmp(r, "false") == 0) return RESUME_NEVER;
    if (strcmp(r, "auto") == 0) return RESUME_AUTO;
    return strcmp(r, "latest") == 0 ? RESUME_LATEST : RESUME_PATH;
}

/* Fill every key with its schema default. */
void config_defaults(RunConfig *cfg);

/* Read the YAML file at path (NULL: defaults only, config_dir = "."), then apply each
 * "key=value" of sets in order (dotted keys for nested values), then validate.
 * On error: one line in err ("file:line:col: key: expected ..., found ..."), code 2. */
int config_load(RunConfig *cfg, const char *path, const char *const *sets, int n_sets, GtError *err);

/* Checks that need the model too (every_n_layers <= n_layer, seq_len <= n_positions, ...).
 * ModelDesc is declared in model_desc.h. */
struct ModelDesc;
int config_check_model(const RunConfig *cfg, const struct ModelDesc *desc, GtError *err);

/* A check of key's value made after loading (against the model or an adapter): one line
 * "file:line: key: msg", "--set key: msg" or "file: key: msg (the default)" by where the value
 * came from, code 2. Returns -1. */
int config_key_error(const RunConfig *cfg, const char *key, GtError *err, const char *msg);
/* Where key's value came from: *file (the config's path, "config" without one; NULL for --set),
 * *line and *col (0 when not from the file), as gt_key_error takes them; its ConfigSource. */
ConfigSource config_key_source(const RunConfig *cfg, const char *key, const char **file, int *line, int *col);

/* Print every key with its resolved value and where it came from (default / file:line / --set). */
void config_print_resolved(const RunConfig *cfg, FILE *out);

/* output_dir/resolved_config.yaml, as config_write_resolved writes it */
#define CONFIG_RESOLVED_FILE "resolved_config.yaml"
/* Write every key with its final value (paths absolute, strings quoted; a comment names where each
 * came from; a key left at its default is itself a comment, since some keys may only be given
 * with others) to path, atomically, as YAML config_load reads back into the same run. */
int config_write_resolved(const RunConfig *cfg, const char *path, GtError *err);
/* The same text (malloc'd, NUL-terminated; *len without the NUL). */
char *config_resolved_text(const RunConfig *cfg, size_t *len);
/* per_device_train_batch_size auto: record auto-fit's choice in cfg (source "auto-fit"), so the
 * resolved config shows and saves it; a fixed layout is left as it is. */
void config_set_fitted(RunConfig *cfg, int B, int A, bool recompute, int every_n_layers, bool offload);
/* Make p absolute (against the working directory) and clean: no "." or empty components, ".."
 * folded lexically unless that names another existing file (a ".." after a symbolic link), a
 * trailing "/" kept. Every path key is stored so. 0, or -1 (p unchanged) when it would not fit cap or getcwd fails. */
int config_clean_path(char *p, size_t cap);

/* `gtrain --help-config`: one block per key (type, default, bounds, doc). markdown=1 prints the
 * README's config reference table instead. */
void config_print_help(FILE *out, int markdown);

/* The schema table, for callers that read cfg->source[] / source_line[]: number of keys, the
 * dotted name of key i, and the index of a dotted name (-1 if unknown). */
int config_schema_count(void);
const char *config_schema_key(int i);
int config_schema_index(const char *key);

/* Names for enum values ("cosine", "bf16", ...). */
const char *config_lr_schedule_name(LrSchedule s);
const char *config_precision_name(Precision p);
const char *config_device_name(DeviceKind d);
const char *config_loss_norm_name(LossNormalization n);
const char *config_data_format_name(DataFormat f);
const char *config_save_dtype_name(SaveDtype d);

#endif
