/* config_table.c - the run config's one schema table (config_schema.h's KeySpec): every key's
 * dotted name, type, field, default, bounds, enum names, checks and doc. config.c parses, validates
 * and prints through it; config_value.c handles one value by its entry. */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "config_schema.h"
#include "data.h"
#include "hf_writer.h"
#include "sample.h"

static const char *const LR_NAMES[] = {"constant", "linear", "cosine", "cosine_with_min_lr", NULL};
static const char *const PREC_NAMES[] = {"fp32", "bf16", NULL};
static const char *const DEVICE_NAMES[] = {"auto", "cpu", "cuda", NULL};
static const char *const LOSS_NAMES[] = {"tokens", "steps", NULL};
static const char *const FORMAT_NAMES[] = {"text", "tokens", "jsonl", "json", "parquet", "auto", NULL};
static const char *const NAN_NAMES[] = {"skip", "stop", NULL};
static const char *const SAVE_DTYPE_NAMES[] = {"auto", "bf16", "fp32", NULL};
static const char *const BASE_DTYPE_NAMES[] = {"auto", "fp32", "bf16", NULL}; /* BaseDtype's order */
static const char *const QUANTIZE_NAMES[] = {"none", "nf4", NULL};                   /* QuantizeBase's order */
static const char *const QUANT_TYPE_NAMES[] = {"nf4", NULL};                         /* fp4: not read */
static const char *const COMPUTE_DTYPE_NAMES[] = {"auto", "float32", "bfloat16", NULL}; /* ComputeDtype's order */
static const char *const INIT_NAMES[] = {"auto", "pretrained", "random", NULL};
static const char *const TASK_NAMES[] = {"none", "gsm8k", "math", NULL};                 /* GenTask's order */
static const char *const GEN_FORMAT_NAMES[] = {"auto", "jsonl", "json", "parquet", NULL}; /* GenDataFormat's order */

/* lora.target_modules: names joined by commas (a YAML list is read so), or all-linear alone; which
 * names an adapter knows, and which of them the model has, is lora.c's to check */
static int check_target_modules(const char *value, char *why, size_t cap) {
    if (strcmp(value, "all-linear") == 0 || value[0] == '\0') return 0;
    int n = 0;
    for (const char *p = value; *p; n++) {
        size_t len = strcspn(p, ",");
        bool ok = len > 0 && len < CONFIG_LORA_NAME_MAX;
        for (size_t i = 0; i < len && ok; i++)
            ok = (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '.';
        if (!ok || n == CONFIG_LORA_MAX_TARGETS) {
            snprintf(why, cap, "expected at most %d module names (letters, digits, _ and .) or all-linear, found \"%.60s\"",
                     CONFIG_LORA_MAX_TARGETS, value);
            return -1;
        }
        p += len;
        if (*p == ',' && p[1] == '\0') {
            snprintf(why, cap, "expected a module name after the last comma, found \"%.60s\"", value);
            return -1;
        }
        if (*p == ',') p++;
    }
    return 0;
}

/* data.prompt_template, data.completion_template: the {field} syntax (data_template.c) */
static int check_template(const char *value, char *why, size_t cap) { return data_template_why(value, why, cap); }
static int check_column(const char *value, char *why, size_t cap) {
    if (strlen(value) < CONFIG_COLUMN_MAX) return 0;
    snprintf(why, cap, "expected a column name of at most %d bytes, found %zu", CONFIG_COLUMN_MAX - 1, strlen(value));
    return -1;
}

/* generation.stop: at most CONFIG_MAX_STOP strings, none empty (an empty one would stop at once) */
static int check_stop(const char *value, char *why, size_t cap) {
    int n = 0;
    for (const char *p = value; *p; n++) {
        const char *sep = strchr(p, CONFIG_LIST_SEP);
        size_t len = sep ? (size_t)(sep - p) : strlen(p);
        if (len == 0 || (sep && sep[1] == '\0')) {
            snprintf(why, cap, "expected non-empty stop strings, found an empty one (string %d)", len == 0 ? n + 1 : n + 2);
            return -1;
        }
        p += len + (sep != NULL);
    }
    if (n > CONFIG_MAX_STOP) {
        snprintf(why, cap, "expected at most %d stop strings, found %d", CONFIG_MAX_STOP, n);
        return -1;
    }
    return 0;
}

static int check_shard_size(const char *value, char *why, size_t cap) {
    uint64_t bytes;
    return hf_parse_size(value, &bytes, why, cap);
}

#define FIELD(m) .offset = offsetof(RunConfig, m), .size = sizeof(((RunConfig *)0)->m)
#define BIG 1000000000000LL /* 1e12: bound for step counts */

_Static_assert(sizeof(LrSchedule) == sizeof(int32_t), "enums are stored as 32-bit ints");
_Static_assert(sizeof(long) == sizeof(int64_t), "long fields are stored as 64-bit ints");

const KeySpec CONFIG_SCHEMA[] = {
    {.key = "model", .type = KT_PATH, FIELD(model), .def = "", .required = "a path to the model JSON",
     .doc = "The model: a Hugging Face config.json (gpt2, llama, mistral, qwen2, qwen3, phi3), or a model directory holding one "
            "(and its weights, loaded unless init_from names others); required."},
    {.key = "init_from", .type = KT_PATH, FIELD(init_from), .def = "",
     .doc = "Initial weights: a Hugging Face model directory, a model.safetensors.index.json, a .safetensors file or a run "
            "directory; empty = the weights of model when it is a directory (see init)."},
    {.key = "init", .type = KT_ENUM, FIELD(init), .def = "auto", .names = INIT_NAMES,
     .doc = "The first weights: pretrained = init_from's, else model's (a directory that must hold model.safetensors "
            "or an index; none is refused); random = random init of model's architecture, no weights read; auto = "
            "pretrained when init_from is set or model is a directory, random when model is a config.json file."},
    {.key = "tokenizer", .type = KT_PATH, FIELD(tokenizer), .def = "", .literal = "none",
     .doc = "A Hugging Face tokenizer.json (or a directory holding one) for text and jsonl data and for gtrain sample; "
            "empty = model's tokenizer.json when model is a directory holding one, else byte-level; none = byte-level."},
    {.key = "data.train", .type = KT_PATH, FIELD(data.train), .def = "", .required = "a path to the training data",
     .doc = "Training data: a text file, token shard(s) (glob allowed) or jsonl; required."},
    {.key = "data.val", .type = KT_PATH, FIELD(data.val), .def = "",
     .doc = "Validation data; empty = for text, the last data.val_fraction of data.train; else none."},
    {.key = "data.format", .type = KT_ENUM, FIELD(data.format), .def = "text", .names = FORMAT_NAMES,
     .doc = "How the data files are read: text, llm.c token shards, jsonl (one JSON object a line), json (one "
            "array of objects, streamed), parquet; auto = by data.train's extension (.jsonl, .json, .parquet, .bin = "
            "tokens, else text)."},
    {.key = "data.seq_len", .type = KT_INT, FIELD(data.seq_len), .def = "1024", .imin = 1, .imax = 1 << 20,
     .doc = "Tokens per training sequence; at most the model's n_positions."},
    {.key = "data.val_fraction", .type = KT_FLOAT, FIELD(data.val_fraction), .def = "0.1", .fmin = 0,
     .fmax = 0.9,
     .doc = "Text data without data.val: fraction of the bytes (at the end) kept for validation; 0 = no validation split."},
    {.key = "data.packing", .type = KT_BOOL, FIELD(data.packing), .def = "false",
     .doc = "jsonl: pack whole examples (truncated to seq_len+1 as unpacked) into rows of seq_len by first-fit "
            "decreasing, each attending only to itself with positions from 0 (HF's DataCollatorWithFlattening, TRL's "
            "padding_free): the same loss and gradients as one padded row each, without the padding's compute."},
    {.key = "data.shuffle", .type = KT_BOOL, FIELD(data.shuffle), .def = "true",
     .doc = "Training rows in a seeded random order (jsonl: a permutation per epoch; text/tokens: random windows); "
            "false = file order, epoch after epoch (jsonl: example, or packed row, i mod n; text/tokens: consecutive "
            "windows)."},
    {.key = "data.prompt_template", .type = KT_STRING, FIELD(data.prompt_template), .def = "", .check = check_template,
     .doc = "jsonl: the prompt, from each line's string members: {name} is member name, {{ and }} are braces "
            "(e.g. \"### Instruction:\\n{query}\\n\\n### Response:\"); empty = the \"prompt\" member."},
    {.key = "data.completion_template", .type = KT_STRING, FIELD(data.completion_template), .def = "",
     .check = check_template, .doc = "jsonl: the completion (e.g. \"{response}\"); empty = the \"completion\" member."},
    {.key = "data.add_eos", .type = KT_BOOL, FIELD(data.add_eos), .def = "true",
     .doc = "jsonl with a tokenizer: append the tokenizer's end-of-sequence token after each completion."},
    {.key = "data.columns.text", .type = KT_STRING, FIELD(data.columns.text), .def = "", .check = check_column,
     .doc = "jsonl/json/parquet: the column holding plain text (continued pre-training: every token trains); "
            "empty = \"text\"."},
    {.key = "data.columns.prompt", .type = KT_STRING, FIELD(data.columns.prompt), .def = "", .check = check_column,
     .doc = "jsonl/json/parquet: the prompt column (e.g. query, question, instruction); empty = \"prompt\"."},
    {.key = "data.columns.completion", .type = KT_STRING, FIELD(data.columns.completion), .def = "",
     .check = check_column,
     .doc = "jsonl/json/parquet: the completion column (e.g. response, answer, output); empty = \"completion\"."},
    {.key = "data.columns.messages", .type = KT_STRING, FIELD(data.columns.messages), .def = "",
     .check = check_column,
     .doc = "jsonl/json/parquet: the column of chat messages ([{role, content}...]); empty = \"messages\"."},
    {.key = "data.chat_template", .type = KT_PATH, FIELD(data.chat_template), .def = "",
     .doc = "messages: a chat template (.jinja, a tokenizer_config.json or a directory holding one); empty = the "
            "tokenizer's own tokenizer_config.json."},
    {.key = "data.assistant_only_loss", .type = KT_BOOL, FIELD(data.assistant_only_loss), .def = "true",
     .doc = "messages: only the assistant turns' tokens train (TRL's assistant_only_loss); false = every token."},
    {.key = "per_device_train_batch_size", .type = KT_INT_AUTO, FIELD(per_device_train_batch_size),
     .def = "8", .imin = 1, .imax = GT_MAX_MICRO_BATCH,
     .doc = "Sequences per micro-batch on each device; auto = largest that fits (needs train_batch_size)."},
    {.key = "train_batch_size", .type = KT_INT, FIELD(train_batch_size), .def = "0", .imin = 0,
     .imax = 1 << 24, .doc = "Effective batch (sequences per optimizer step) to reach with auto micro-batch; 0 = unset."},
    {.key = "per_device_eval_batch_size", .type = KT_INT, FIELD(per_device_eval_batch_size), .def = "8",
     .imin = 1, .imax = 65536, .doc = "Sequences per evaluation batch on each device."},
    {.key = "gradient_accumulation_steps", .type = KT_INT, FIELD(gradient_accumulation_steps), .def = "1",
     .imin = 1, .imax = GT_MAX_ACCUM_STEPS, .doc = "Micro-batches accumulated into one optimizer step."},
    {.key = "gradient_checkpointing", .type = KT_BOOL, FIELD(gradient_checkpointing), .def = "false",
     .doc = "Recompute checkpointed layers in backward instead of keeping their activations."},
    {.key = "every_n_layers", .type = KT_INT, FIELD(every_n_layers), .def = "1", .imin = 1, .imax = 1024,
     .doc = "With gradient_checkpointing: checkpoint layer 0 and every n-th layer after it."},
    {.key = "offload", .type = KT_BOOL, FIELD(offload), .def = "false",
     .doc = "Keep the inputs of checkpointed layers in pinned host memory (needs gradient_checkpointing)."},
    {.key = "gradient_checkpointing_kwargs.every_n_layers", .type = KT_INT, FIELD(every_n_layers), .def = "1",
     .imin = 1, .imax = 1024, .alias_of = "every_n_layers", .doc = "Hugging Face spelling of every_n_layers."},
    {.key = "gradient_checkpointing_kwargs.offload", .type = KT_BOOL, FIELD(offload), .def = "false",
     .alias_of = "offload", .doc = "Hugging Face spelling of offload."},
    /* at most INT_MAX: AdamW's step count (its bias correction) reaches the backends as an int */
    {.key = "max_steps", .type = KT_INT, FIELD(max_steps), .def = "-1", .imin = -1, .imax = INT_MAX,
     .doc = "Optimizer steps to run; -1 = derived from num_train_epochs."},
    {.key = "num_train_epochs", .type = KT_FLOAT, FIELD(num_train_epochs), .def = "3", .fmin = 0,
     .fmax = 1e6, .fmin_open = true, .doc = "Passes over the training data (used when max_steps is -1)."},
    {.key = "learning_rate", .type = KT_FLOAT, FIELD(learning_rate), .def = "5e-5", .fmin = 0, .fmax = 10,
     .f32 = true, .doc = "Peak learning rate of AdamW."},
    {.key = "lr_scheduler_type", .type = KT_ENUM, FIELD(lr_scheduler_type), .def = "linear",
     .names = LR_NAMES,
     .doc = "Learning-rate decay after warmup: constant, linear to 0, cosine to 0, or cosine to min_lr_rate."},
    {.key = "lr_scheduler_kwargs.min_lr_rate", .type = KT_FLOAT, FIELD(min_lr_rate), .def = "0", .fmin = 0, .fmax = 1,
     .doc = "cosine_with_min_lr: the final learning rate as a fraction of learning_rate (HF's min_lr_rate)."},
    {.key = "warmup_steps", .type = KT_INT, FIELD(warmup_steps), .def = "0", .imin = 0, .imax = BIG,
     .doc = "Steps of linear warmup from 0 to learning_rate (when > 0 it overrides warmup_ratio, as HF's)."},
    {.key = "warmup_ratio", .type = KT_FLOAT, FIELD(warmup_ratio), .def = "0", .fmin = 0, .fmax = 1,
     .doc = "Warmup as a fraction of the optimizer steps: ceil(warmup_ratio * max_steps) steps, when warmup_steps is 0."},
    {.key = "weight_decay", .type = KT_FLOAT, FIELD(weight_decay), .def = "0", .fmin = 0, .fmax = 10,
     .f32 = true, .doc = "AdamW decoupled weight decay."},
    {.key = "adam_beta1", .type = KT_FLOAT, FIELD(adam_beta1), .def = "0.9", .fmin = 0, .fmax = 1,
     .fmax_open = true, .f32 = true, .doc = "AdamW first-moment decay."},
    {.key = "adam_beta2", .type = KT_FLOAT, FIELD(adam_beta2), .def = "0.999", .fmin = 0, .fmax = 1,
     .fmax_open = true, .f32 = true, .doc = "AdamW second-moment decay."},
    {.key = "adam_epsilon", .type = KT_FLOAT, FIELD(adam_epsilon), .def = "1e-8", .fmin = 0, .fmax = 1,
     .fmin_open = true, .f32 = true, .doc = "AdamW denominator epsilon."},
    /* compared in double, but the clip coefficient max_grad_norm / norm is applied as a float */
    {.key = "max_grad_norm", .type = KT_FLOAT, FIELD(max_grad_norm), .def = "1.0", .fmin = 0, .fmax = 1e6, .f32 = true,
     .doc = "Clip the global gradient norm to this; 0 disables clipping."},
    {.key = "precision", .type = KT_ENUM, FIELD(precision), .def = "fp32", .names = PREC_NAMES,
     .doc = "fp32 (TF32 off), or bf16 activations and weight copy with fp32 master weights, gradients and AdamW state."},
    {.key = "seed", .type = KT_INT, FIELD(seed), .def = "42", .imin = 0, .imax = LLONG_MAX,
     .doc = "Seed for initialization and data sampling."},
    {.key = "device", .type = KT_ENUM, FIELD(device), .def = "auto", .names = DEVICE_NAMES,
     .doc = "Where to train: cuda if a GPU is present (auto), or cpu / cuda explicitly."},
    {.key = "loss_normalization", .type = KT_ENUM, FIELD(loss_normalization), .def = "tokens",
     .names = LOSS_NAMES,
     .doc = "tokens: the step's summed loss / its predicted tokens (HF's num_items_in_batch); steps: each micro-batch's "
            "mean loss / the accumulation count (HF before 4.46), logged as the mean of the micro-batch means."},
    {.key = "logging_steps", .type = KT_INT, FIELD(logging_steps), .def = "10", .imin = 1, .imax = BIG,
     .doc = "Print a log line and a metrics record every this many optimizer steps."},
    {.key = "eval_steps", .type = KT_INT, FIELD(eval_steps), .def = "0", .imin = 0, .imax = BIG,
     .doc = "Evaluate every this many steps; 0 = only at the end (when there is validation data)."},
    {.key = "eval_max_batches", .type = KT_INT, FIELD(eval_max_batches), .def = "0", .imin = 0, .imax = BIG,
     .doc = "Evaluation batches per evaluation; 0 = the whole validation set."},
    {.key = "save_steps", .type = KT_INT, FIELD(save_steps), .def = "500", .imin = 0, .imax = BIG,
     .doc = "Save a checkpoint every this many steps; 0 = none (the final model is always saved)."},
    {.key = "save_total_limit", .type = KT_INT, FIELD(save_total_limit), .def = "0", .imin = 0,
     .imax = 1000000, .doc = "Keep at most this many checkpoints (oldest deleted first); 0 = keep all."},
    {.key = "save_max_shard_size", .type = KT_STRING, FIELD(save_max_shard_size), .def = "5GB", .check = check_shard_size,
     .doc = "Largest weights file, as save_pretrained's max_shard_size (\"5GB\" = 5e9, \"10GiB\", \"500MB\", bytes); "
            "larger weights are split into model-0000k-of-0000N.safetensors and model.safetensors.index.json."},
    {.key = "save_dtype", .type = KT_ENUM, FIELD(save_dtype), .def = "auto", .names = SAVE_DTYPE_NAMES,
     .doc = "dtype of the final output_dir/model.safetensors: auto = the master weights' (fp32), bf16 or fp32; "
            "checkpoint-N/ keeps fp32, so a resume stays exact."},
    {.key = "output_dir", .type = KT_PATH, FIELD(output_dir), .def = "runs/gtrain", .dir = true,
     .required = "a directory for the run's files",
     .doc = "Directory for checkpoints, metrics.jsonl and the final model."},
    {.key = "resume_from_checkpoint", .type = KT_PATH, FIELD(resume_from_checkpoint), .def = "auto", .dir = true,
     .literal = "auto|latest|never|false",
     .doc = "auto: when output_dir holds this run (same model, data, seed, batch), resume from its latest complete "
            "checkpoint, and refuse a different run naming what differs; \"latest\": that checkpoint, required; a "
            "checkpoint directory; never (or false, or empty): start fresh."},
    {.key = "memory_limit", .type = KT_BYTES, FIELD(memory_limit), .def = "auto", .imin = 1,
     .imax = 1LL << 50, .doc = "Memory the run may plan for: bytes, or \"24GiB\", \"512MiB\", \"1.5GB\"; auto = what is free, on a GPU less the runtime_reserve (cuBLAS workspace, kernel modules, NCCL buffers) that the plan prints."},
    {.key = "num_threads", .type = KT_INT, FIELD(num_threads), .def = "0", .imin = 0, .imax = 4096,
     .doc = "CPU threads; 0 = all cores."},
    {.key = "overwrite_output_dir", .type = KT_BOOL, FIELD(overwrite_output_dir), .def = "false",
     .doc = "Allow output_dir to hold an earlier or different run: DELETES that run's checkpoints, metrics and "
            "weights (files gtrain did not write are left alone); never the model's or an adapter's directory."},
    {.key = "nan_policy", .type = KT_ENUM, FIELD(nan_policy), .def = "skip", .names = NAN_NAMES,
     .doc = "A non-finite loss or gradient norm: skip the step (no update) or stop the run."},
    {.key = "max_skipped_steps", .type = KT_INT, FIELD(max_skipped_steps), .def = "10", .imin = 0, .imax = BIG,
     .doc = "Stop after this many skipped (non-finite) steps in a row; 0 = never."},
    {.key = "sample_max_new_tokens", .type = KT_INT, FIELD(sample_max_new_tokens), .def = "0", .imin = 0,
     .imax = SAMPLE_MAX_NEW_TOKENS, .doc = "At the end, print a sample of this many tokens (byte-level models); 0 = none."},
    {.key = "zero_stage", .type = KT_INT, FIELD(zero_stage), .def = "0", .imin = 0, .imax = 1,
     .doc = "0: plain data parallel; 1: AdamW state sharded across ranks (ZeRO-1)."},
    {.key = "ddp_grad_dtype", .type = KT_ENUM, FIELD(ddp_grad_dtype), .def = "fp32", .names = PREC_NAMES,
     .doc = "The gradients' dtype between ranks (as PyTorch DDP's bf16_compress_hook, DeepSpeed's "
            "communication_data_type): fp32, or bf16 = each rank's gradients rounded to bf16 (to nearest even), "
            "summed as bf16 (each pairwise sum in fp32, rounded to bf16), then widened back to fp32: half the "
            "gradient traffic, ZeRO-1's reduce-scatter included; the weights' all-gather stays fp32. Costs a bf16 "
            "copy of the gradients (half their memory, planned in grads). One rank: nothing is sent or rounded."},
    {.key = "dist_init_file", .type = KT_PATH, FIELD(dist_init_file), .def = "",
     .doc = "File on a shared filesystem for the NCCL id exchange when launched by srun without MPI."},
    {.key = "dist_timeout", .type = KT_FLOAT, FIELD(dist_timeout), .def = "300", .fmin = 0, .fmax = 1e6,
     .fmin_open = true, .doc = "Seconds a collective waits for the other ranks before the job is aborted."},
    /* LoRA / PiSSA: PEFT LoraConfig's names; a lora: section turns it on */
    {.key = "lora.r", .type = KT_INT, FIELD(lora.r), .def = "8", .imin = 1, .imax = CONFIG_LORA_MAX_R,
     .doc = "LoRA rank (a lora: section trains adapters on a frozen base instead of every weight)."},
    {.key = "lora.lora_alpha", .type = KT_FLOAT, FIELD(lora.lora_alpha), .def = "8", .fmin = 0, .fmin_open = true,
     .fmax = 1e9, .doc = "LoRA alpha: the adapters' output is scaled by lora_alpha / r (lora_alpha / sqrt(r) with use_rslora)."},
    {.key = "lora.lora_dropout", .type = KT_FLOAT, FIELD(lora.lora_dropout), .def = "0", .fmin = 0, .fmax = 1,
     .fmax_open = true, .doc = "Dropout on each adapter's input while training; the mask is a function of (seed, step, "
                               "the row's place in the step's batch, layer, module, element): the accumulation "
                               "split and the number of ranks change nothing."},
    {.key = "lora.target_modules", .type = KT_STRING, FIELD(lora.target_modules), .def = "", .list = true,
     .check = check_target_modules,
     .doc = "Modules to adapt: a list of q_proj k_proj v_proj o_proj gate_proj up_proj down_proj (GPT-2: c_attn c_proj "
            "c_fc), or all-linear; empty = PEFT's default (q_proj, v_proj; GPT-2 c_attn)."},
    {.key = "lora.use_rslora", .type = KT_BOOL, FIELD(lora.use_rslora), .def = "false",
     .doc = "Rank-stabilised LoRA: scale by lora_alpha / sqrt(r)."},
    {.key = "lora.use_dora", .type = KT_BOOL, FIELD(lora.use_dora), .def = "false",
     .doc = "DoRA (PEFT's use_dora): a trained magnitude per output row of each adapted weight, the direction "
            "W + scale B A normalised per row (the norm detached, as PEFT does); not with PiSSA."},
    {.key = "lora.init_lora_weights", .type = KT_STRING, FIELD(lora.init_lora_weights), .def = "true",
     .doc = "true (A Kaiming-uniform, B zero), gaussian, false, pissa (exact SVD of each base weight) or pissa_niter_N "
            "(randomised SVD, N subspace iterations)."},
    {.key = "lora.init_from", .type = KT_PATH, FIELD(lora.init_from), .def = "", .dir = true,
     .doc = "A PEFT adapter directory to continue training (its adapter_config.json gives r, alpha and the modules)."},
    {.key = "lora.base_dtype", .type = KT_ENUM, FIELD(lora.base_dtype), .def = "auto", .names = BASE_DTYPE_NAMES,
     .doc = "Storage of the frozen base's linear weights (the layers' projections): auto = the activation dtype "
            "(precision), or bf16 / fp32; each is converted to the activation dtype for its matrix multiply (as "
            "transformers' torch_dtype=bfloat16 base under fp32 compute). Embeddings, norms, biases and the LM head "
            "stay in the activation dtype."},
    {.key = "lora.quantize_base", .type = KT_ENUM, FIELD(lora.quantize_base), .def = "none", .names = QUANTIZE_NAMES,
     .doc = "QLoRA: nf4 stores the frozen base's linear weights (the layers' projections) as bitsandbytes' 4-bit "
            "NormalFloat, quantized one tensor at a time as they load (blocks of 64, one absmax each), and "
            "dequantizes each to the activation dtype for its matrix multiply; embeddings, norms, biases and the LM "
            "head stay as they are. A base that is already 4-bit (config.json's quantization_config, a *-bnb-4bit "
            "directory) loads as it is, with none."},
    {.key = "lora.bnb_4bit_quant_type", .type = KT_ENUM, FIELD(lora.bnb_4bit_quant_type), .def = "nf4",
     .names = QUANT_TYPE_NAMES, .doc = "The 4-bit type (BitsAndBytesConfig's name): nf4 (gtrain has no fp4)."},
    {.key = "lora.bnb_4bit_use_double_quant", .type = KT_BOOL, FIELD(lora.bnb_4bit_use_double_quant), .def = "false",
     .doc = "Double quantization (BitsAndBytesConfig's name): the absmax values themselves quantized to 8 bits in "
            "blocks of 256 (about 0.37 bits per weight saved)."},
    {.key = "lora.bnb_4bit_compute_dtype", .type = KT_ENUM, FIELD(lora.bnb_4bit_compute_dtype), .def = "auto",
     .names = COMPUTE_DTYPE_NAMES, .doc = "The dtype a 4-bit weight is dequantized to for its matrix multiply "
            "(BitsAndBytesConfig's name): auto = the activation dtype (precision); float32 or bfloat16 must be it."},
    /* generation: gtrain eval's prompts and decoding, and accuracy at each eval of a training run */
    {.key = "generation.task", .type = KT_ENUM, FIELD(generation.task), .def = "none", .names = TASK_NAMES,
     .doc = "Generation task: gsm8k or math (answers scored as the PiSSA / MetaMath evaluation scripts do); none = "
            "gtrain eval measures the validation loss, and training evaluates the loss alone."},
    {.key = "generation.data", .type = KT_PATH, FIELD(generation.data), .def = "",
     .doc = "The task's prompts and gold answers: jsonl, a JSON array or parquet records (required with a task)."},
    {.key = "generation.format", .type = KT_ENUM, FIELD(generation.format), .def = "auto", .names = GEN_FORMAT_NAMES,
     .doc = "generation.data's format; auto = by its extension (.jsonl, .json, .parquet)."},
    {.key = "generation.prompt_template", .type = KT_STRING, FIELD(generation.prompt_template), .def = "",
     .check = check_template,
     .doc = "The prompt with {field} placeholders filled from each record's string members; empty = the prompt "
            "column as it is, or the messages column through the chat template with the generation prompt."},
    {.key = "generation.columns.prompt", .type = KT_STRING, FIELD(generation.columns.prompt), .def = "",
     .check = check_column, .doc = "The records' prompt column (without a template); empty = \"prompt\"."},
    {.key = "generation.columns.messages", .type = KT_STRING, FIELD(generation.columns.messages), .def = "",
     .check = check_column,
     .doc = "A column of chat messages rendered with the chat template (data.chat_template or the tokenizer's) and "
            "add_generation_prompt, instead of a prompt."},
    {.key = "generation.columns.answer", .type = KT_STRING, FIELD(generation.columns.answer), .def = "",
     .check = check_column, .doc = "The records' gold answer column (a string or a number); empty = \"answer\"."},
    {.key = "generation.max_new_tokens", .type = KT_INT, FIELD(generation.max_new_tokens), .def = "512", .imin = 1,
     .imax = SAMPLE_MAX_NEW_TOKENS, .doc = "Tokens generated at most per prompt (fewer when the context ends first)."},
    {.key = "generation.do_sample", .type = KT_BOOL, FIELD(generation.do_sample), .def = "false",
     .doc = "Sample (temperature, top_k, top_p, seeded by seed and the example's index); false = greedy."},
    {.key = "generation.temperature", .type = KT_FLOAT, FIELD(generation.temperature), .def = "1.0", .fmin = 0,
     .fmin_open = true, .fmax = 1e6, .doc = "With do_sample: the logits are divided by it (HF's temperature)."},
    {.key = "generation.top_k", .type = KT_INT, FIELD(generation.top_k), .def = "50", .imin = 0, .imax = INT_MAX,
     .doc = "With do_sample: keep the k most likely tokens (HF's default 50); 0 = all."},
    {.key = "generation.top_p", .type = KT_FLOAT, FIELD(generation.top_p), .def = "1.0", .fmin = 0, .fmin_open = true,
     .fmax = 1, .doc = "With do_sample: keep the smallest set of tokens whose probability reaches top_p; 1 = all."},
    {.key = "generation.stop", .type = KT_STRING, FIELD(generation.stop), .def = "", .strings = true,
     .check = check_stop,
     .doc = "Stop strings: a YAML list (each string exact: commas, newlines) or one string; a generation ends at "
            "the first, cut before it. EOS (the tokenizer's and generation_config.json's) always stops."},
    {.key = "generation.output", .type = KT_PATH, FIELD(generation.output), .def = "",
     .doc = "gtrain eval's results: one JSON line per example (id, prompt, generated, extracted, gold, correct, "
            "finish), written whole at the end; empty = none (--output FILE sets it)."},
    {.key = "generation.max_examples", .type = KT_INT, FIELD(generation.max_examples), .def = "0", .imin = 0,
     .imax = BIG, .doc = "Evaluate the first this many examples; 0 = all."},
    {.key = "generation.batch_size", .type = KT_INT_AUTO, FIELD(generation.batch_size), .def = "auto", .imin = 1,
     .imax = 65536,
     .doc = "Sequences decoded at once (the KV cache's rows); auto = as many as memory_limit holds, at most the "
            "number of prompts and 256."},
};

const int CONFIG_N_KEYS = (int)(sizeof CONFIG_SCHEMA / sizeof CONFIG_SCHEMA[0]);
_Static_assert(sizeof CONFIG_SCHEMA / sizeof CONFIG_SCHEMA[0] <= GT_CONFIG_MAX_KEYS, "raise GT_CONFIG_MAX_KEYS");

const char *config_lr_schedule_name(LrSchedule s) { return cfg_enum_name(LR_NAMES, (int)s); }
const char *config_precision_name(Precision p) { return cfg_enum_name(PREC_NAMES, (int)p); }
const char *config_device_name(DeviceKind d) { return cfg_enum_name(DEVICE_NAMES, (int)d); }
const char *config_loss_norm_name(LossNormalization n) { return cfg_enum_name(LOSS_NAMES, (int)n); }
const char *config_data_format_name(DataFormat f) { return cfg_enum_name(FORMAT_NAMES, (int)f); }
const char *config_save_dtype_name(SaveDtype d) { return cfg_enum_name(SAVE_DTYPE_NAMES, (int)d); }
