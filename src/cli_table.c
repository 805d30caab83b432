/* cli_table.c - the table of gtrain's commands: each one's name, summary, usage, options and the
 * function that runs it (cli.h). The parser, the errors, `gtrain help` and docs/commands.md are all
 * made from these entries; nothing about an option is written anywhere else. */
#include "cli.h"

#include <stddef.h>

#define RUN_CONFIG_OPTIONS                                                                                            \
    {"config", 'c', "FILE", false, "the run config (YAML); gtrain --help-config lists every key"},                    \
    {"set", 's', "KEY=VALUE", true, "override a config key (dotted for nested: data.seq_len=128)"}

static const CliOption TRAIN_OPTIONS[] = {
    RUN_CONFIG_OPTIONS,
    {"help-config", 0, NULL, false, "every config key with its type, default, bounds and meaning"},
    {"markdown", 0, NULL, false, "with --help-config: the same as a markdown table (docs' config reference)"},
    {"version", 'V', NULL, false, "the version, the backends found (the CUDA module is loaded from $GTRAIN_BACKEND_DIR, else beside the executable) and the distributed layer"},
    {0}};

static const CliOption PLAN_OPTIONS[] = {RUN_CONFIG_OPTIONS, {0}};

static const CliOption EVAL_OPTIONS[] = {
    RUN_CONFIG_OPTIONS,
    {"checkpoint", 0, "DIR", false,
     "measure this model instead of the config's: a run directory, a checkpoint-N, or a PEFT adapter directory "
     "(its base with the adapter)"},
    {"output", 0, "FILE", false, "with generation.task: one JSON line per example (default generation.output)"},
    {0}};

static const CliOption SAMPLE_OPTIONS[] = {
    {"checkpoint", 0, "DIR", false,
     "the model (required): a run directory, a checkpoint-N, or a LoRA run's adapter directory (its base with the "
     "adapter)"},
    {"prompt", 0, "TEXT", false, "the text to continue (default: a newline)"},
    {"prompt-ids", 0, "1,2,3", false, "the token ids to continue instead of a text"},
    {"tokenizer", 0, "FILE|DIR", false,
     "a tokenizer.json or a directory holding one (default: the checkpoint's own, or a PEFT adapter's base "
     "model's; without one, text is bytes)"},
    {"max-new-tokens", 0, "N", false, "tokens to generate, at most 1048576 (default 200)"},
    {"temperature", 0, "T", false, "sampling temperature, >= 0, 0 greedy (default 0.8)"},
    {"top-k", 0, "K", false, "sample among the K most likely tokens, at most the vocabulary, 0 all (default 40)"},
    {"seed", 0, "S", false, "the sampling seed (default 1)"},
    {0}};

static const CliOption MERGE_OPTIONS[] = {
    {"base", 0, "DIR", false, "the Hugging Face model directory the adapter was trained on (required)"},
    {"adapter", 0, "DIR", false, "a PEFT LoRA adapter directory (required)"},
    {"out", 0, "DIR", false, "a new or empty directory for the merged model (required)"},
    {"max-shard-size", 0, "SIZE", false, "the largest weight file, as transformers writes it: 5GB, 500MB (default 5GB)"},
    {"dtype", 0, "fp32|bf16", false,
     "the merged weights' dtype (default: the base's when all its tensors are F32 or all BF16, else fp32)"},
    {0}};

static const CliOption REPORT_OPTIONS[] = {{0}};

static const CliOption TOKENIZE_OPTIONS[] = {
    {"tokenizer", 0, "FILE|DIR", false,
     "tokenizer.json, or a model directory holding one (required; with --data, none: byte-level)"},
    {"jsonl", 0, NULL, false,
     "each input line is a JSON string (encode) or a JSON array of ids (decode); without it each FILE is one "
     "document (encode), or each line holds space-separated ids (decode)"},
    {"add-special-tokens", 0, NULL, false, "apply the post-processor (BOS, EOS ...) to each document"},
    {"decode", 0, NULL, false, "ids to text: one JSON string a line with --jsonl, else the raw text of every line, "
                               "one after the other"},
    {"skip-special-tokens", 0, NULL, false, "leave special tokens out of the decoded text (with --decode)"},
    {"out", 0, "FILE", false,
     "write every document's ids, in order, into one llm.c token shard (uint16 when the vocabulary fits 16 bits, "
     "else llm.c's Llama-3 uint32 layout) instead of printing one line of ids per document"},
    {"threads", 0, "N", false, "OpenMP threads (default: OMP_NUM_THREADS, or every core); the output does not "
                               "depend on it"},
    {"data", 0, "FILE", false,
     "a training data file read as the trainer reads it: one line of ids per example (the options below go with "
     "it)"},
    {"format", 0, "auto|text|jsonl|json|parquet", false, "with --data: data.format (default auto)"},
    {"column", 0, "ROLE=COLUMN", true, "with --data: data.columns.ROLE, ROLE one of text, prompt, completion, messages"},
    {"prompt-template", 0, "T", false, "with --data: data.prompt_template"},
    {"completion-template", 0, "T", false, "with --data: data.completion_template"},
    {"no-eos", 0, NULL, false, "with --data: data.add_eos: false"},
    {"chat-template", 0, "FILE|DIR", false, "with --data: data.chat_template"},
    {"mask", 0, NULL, false, "with --data: each example's labels (the id where it trains, -100 where not)"},
    {"render", 0, NULL, false,
     "with --data: the text that was tokenized (the rendered chat, the filled templates) as one JSON string"},
    {0}};

static const CliOption HELP_OPTIONS[] = {
    {"markdown", 0, NULL, false, "as markdown: without COMMAND, the whole reference (docs/commands.md)"},
    {0}};

const CliCommand CLI_COMMANDS[] = {
    {"train", "run the training job of the config (the default command)",
     "[train] --config RUN.yaml [--set KEY=VALUE]...",
     "Checkpoints, metrics.jsonl and the logs go to the config's output_dir. Stopped by SIGINT or SIGTERM, it saves "
     "a checkpoint and prints the command that resumes.",
     TRAIN_OPTIONS, 0, 0, train_command},
    {"plan", "print the resolved config, effective batch and memory plan; allocate nothing",
     "plan --config RUN.yaml [--set KEY=VALUE]...",
     "Exit status 2 when the plan does not fit the memory limit (memory_limit, or on the CPU the RAM available "
     "now); the plan that does not fit is printed first.",
     PLAN_OPTIONS, 0, 0, plan_command},
    {"eval", "measure a model without training (nothing written into a run directory)",
     "eval --config RUN.yaml [--set KEY=VALUE]... [--checkpoint DIR] [--output FILE]",
     "The config's model and weights, or --checkpoint DIR. Without generation.task: the validation loss and "
     "perplexity; with one (gsm8k, math): the accuracy of its generations, one JSON line per example to --output "
     "FILE (or generation.output).",
     EVAL_OPTIONS, 0, 0, eval_command},
    {"sample", "generate text from a trained model",
     "sample --checkpoint DIR [--prompt TEXT | --prompt-ids 1,2,3] [--tokenizer FILE|DIR] [--max-new-tokens N] "
     "[--temperature T] [--top-k K] [--seed S]",
     "The sample goes to standard output, the notes to standard error.", SAMPLE_OPTIONS, 0, 0, sample_command},
    {"merge", "merge a PEFT LoRA adapter into its base (PEFT's merge_and_unload): a Hugging Face model directory",
     "merge --base DIR --adapter DIR --out DIR [--max-shard-size 5GB] [--dtype fp32|bf16]", NULL, MERGE_OPTIONS, 0, 0,
     merge_command},
    {"tokenize", "text to token ids (or back) with a Hugging Face tokenizer.json, printed or written as an llm.c shard",
     "tokenize --tokenizer FILE|DIR [--jsonl] [--add-special-tokens] [--decode] [--skip-special-tokens] "
     "[--out shard.bin] [--threads N] [FILE...]\n"
     "tokenize --data FILE --tokenizer FILE|DIR|none [--format F] [--column ROLE=COLUMN]... [--prompt-template T] "
     "[--completion-template T] [--no-eos] [--chat-template FILE|DIR] [--mask | --render]",
     "Input: the FILEs in order, or standard input when none is given ('-' names it). With --data, a training data "
     "file through the trainer's own reader, one line per example.",
     TOKENIZE_OPTIONS, 0, -1, tokenize_command},
    {"report", "write DIR/report.svg (loss, learning rate, throughput) from DIR/metrics.jsonl", "report DIR", NULL,
     REPORT_OPTIONS, 1, 1, report_command},
    {"help", "the commands, or one command's usage and options", "help [COMMAND] [--markdown]", NULL, HELP_OPTIONS, 0,
     1, help_command},
    {0}};
