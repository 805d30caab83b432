/* test_hostile.c - a table of hostile inputs (configs and model JSONs). Each case writes its files
 * into a fresh temp dir and is checked twice:
 *   in process: config_load + model_desc_load + config_check_model + plan_resolve (no memory
 *               limit) fail with code 2, one line, naming the offending file (and key where
 *               there is one);
 *   as a process: `$GTRAIN_BIN plan --config FILE` is not killed by a signal, exits 2, and writes
 *               exactly one line to stderr naming the file (and key).
 * One case is a real Hugging Face config.json with all its extra fields: it must succeed. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "test_util.h"
#include <criterion/parameterized.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "lora.h"
#include "model_desc.h"
#include "plan.h"
#include "test_backend_select.h"

#define DEEP 100000

/* A small valid model and a valid config using it. */
#define GOOD_MODEL                                                                                               \
    "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256,"            \
    " \"n_positions\": 32}\n"
#define GOOD_CFG "model: m.json\ndata:\n  train: t.txt\n  seq_len: 16\noutput_dir: out\n"


typedef void (*GenFn)(const char *dir);

typedef struct {
    const char *name;
    const char *config;  /* run.yaml text; NULL: not written (gen may write it) */
    const char *model;   /* m.json text; NULL: GOOD_MODEL */
    GenFn gen;           /* writes anything else (binary, huge, directories) */
    const char *arg;     /* file given to --config, relative to the dir (default run.yaml) */
    const char *blame;   /* the file the message must name */
    const char *key;     /* a key the message must name, or NULL */
    int ok;              /* 1: must succeed */
} Hostile;

/* ---------------------------------------------------------------- generators */

static void put(const char *dir, const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f, "%s", p);
    if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void garbage(char *buf, size_t n, unsigned seed) {
    unsigned x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (char)(x >> 16);
    }
}

static void gen_binary_config(const char *dir) {
    char buf[4096];
    garbage(buf, sizeof buf, 1);
    put(dir, "run.yaml", buf, sizeof buf);
}

static void gen_high_bytes_config(const char *dir) {
    char buf[2048];
    garbage(buf, sizeof buf, 7);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(buf[i] | 0x80); /* no NUL, no tab: invalid UTF-8 */
    put(dir, "run.yaml", buf, sizeof buf);
}

static void gen_nul_config(const char *dir) {
    const char t[] = "model: m.json\ndata:\n  train: t.txt\0\n";
    put(dir, "run.yaml", t, sizeof t - 1);
}

static void gen_binary_model(const char *dir) {
    char buf[4096];
    garbage(buf, sizeof buf, 3);
    put(dir, "m.json", buf, sizeof buf);
}

static void gen_nul_model(const char *dir) {
    const char t[] = "{\"model_type\": \"gpt2\", \"n_layer\": 2\0}";
    put(dir, "m.json", t, sizeof t - 1);
}

static void gen_deep_json_model(const char *dir) {
    char *b = malloc(2 * DEEP);
    cr_assert_not_null(b);
    memset(b, '[', DEEP);
    memset(b + DEEP, ']', DEEP);
    put(dir, "m.json", b, 2 * DEEP);
    free(b);
}

static void gen_deep_json_object_model(const char *dir) {
    size_t n = 5 * DEEP;
    char *b = malloc(n);
    cr_assert_not_null(b);
    for (size_t i = 0; i < DEEP; i++) memcpy(b + 5 * i, "{\"a\":", 5);
    put(dir, "m.json", b, n);
    free(b);
}

static void gen_deep_yaml_flow(const char *dir) {
    const char *head = "model: m.json\ndata:\n  train: t.txt\n  val: ";
    size_t h = strlen(head), n = h + 2 * DEEP + 1;
    char *b = malloc(n);
    cr_assert_not_null(b);
    memcpy(b, head, h);
    memset(b + h, '[', DEEP);
    memset(b + h + DEEP, ']', DEEP);
    b[n - 1] = '\n';
    put(dir, "run.yaml", b, n);
    free(b);
}

static void gen_deep_yaml_top(const char *dir) {
    size_t n = 4 * DEEP;
    char *b = malloc(n);
    cr_assert_not_null(b);
    for (size_t i = 0; i < DEEP; i++) memcpy(b + 4 * i, "{a: ", 4);
    put(dir, "run.yaml", b, n);
    free(b);
}

static void gen_huge_config(const char *dir) {
    size_t n = (1u << 20) + 100;
    char *b = malloc(n);
    cr_assert_not_null(b);
    memset(b, '#', n);
    for (size_t i = 80; i < n; i += 80) b[i] = '\n';
    put(dir, "run.yaml", b, n);
    free(b);
}

static void gen_huge_model(const char *dir) {
    size_t n = (1u << 20) + 100;
    char *b = malloc(n);
    cr_assert_not_null(b);
    memset(b, ' ', n);
    b[0] = '{';
    b[n - 1] = '}';
    put(dir, "m.json", b, n);
    free(b);
}

static void gen_dir_config(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/cfgdir.yaml", dir);
    cr_assert_eq(mkdir(p, 0700), 0);
}

static void gen_dir_model(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/modeldir.json", dir);
    cr_assert_eq(mkdir(p, 0700), 0);
}

static void gen_hf_model(const char *dir) { put(dir, "hf.json", TEST_HF_GPT2_CONFIG, strlen(TEST_HF_GPT2_CONFIG)); }

/* ---------------------------------------------------------------- the table */

#define BASE "model: m.json\ndata:\n  train: t.txt\n  seq_len: 16\n"

static const Hostile CASES[] = {
    /* files that are not YAML configs */
    {"empty config", "", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"only comments", "# nothing here\n# at all\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"only a document marker", "---\n...\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"binary garbage config", NULL, NULL, gen_binary_config, NULL, "run.yaml", NULL, 0},
    {"invalid UTF-8 config", NULL, NULL, gen_high_bytes_config, NULL, "run.yaml", NULL, 0},
    {"NUL byte in config", NULL, NULL, gen_nul_config, NULL, "run.yaml", NULL, 0},
    {"config over 1 MiB", NULL, NULL, gen_huge_config, NULL, "run.yaml", NULL, 0},
    {"missing config", NULL, NULL, NULL, "nope.yaml", "nope.yaml", NULL, 0},
    {"directory as config", NULL, NULL, gen_dir_config, "cfgdir.yaml", "cfgdir.yaml", NULL, 0},
    /* YAML syntax */
    {"unterminated quote", BASE "seed: \"42\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"bad indentation", "model: m.json\n  data: x\n y: 1\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"unclosed flow mapping", "{model: m.json, data: {train: t.txt}\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"unclosed flow list", BASE "seed: [1, 2\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"tab indentation", "model: m.json\ndata:\n\ttrain: t.txt\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"tab after colon", BASE "seed:\t42\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"two documents", BASE "---\nseed: 1\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"top-level list", "- model: m.json\n- data: x\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"top-level scalar", "hello\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"complex key", BASE "? [a, b]\n: 1\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    /* anchors, aliases, tags */
    {"billion laughs",
     "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
     "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n" BASE,
     NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"anchor on a value", BASE "seed: &s 42\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"alias to undefined anchor", BASE "seed: *s\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"merge key", BASE "base: &b {seed: 1}\n<<: *b\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    {"explicit tag", BASE "seed: !!str 42\n", NULL, NULL, NULL, "run.yaml", NULL, 0},
    /* nesting */
    {"100000-deep YAML under a key", NULL, NULL, gen_deep_yaml_flow, NULL, "run.yaml", "data.val", 0},
    {"100000-deep YAML at the top", NULL, NULL, gen_deep_yaml_top, NULL, "run.yaml", NULL, 0},
    {"value nested in a leaf", "model: m.json\ndata:\n  train: {x: {y: 1}}\n", NULL, NULL, NULL, "run.yaml",
     "data.train", 0},
    /* keys */
    {"duplicate key", BASE "seed: 1\nseed: 2\n", NULL, NULL, NULL, "run.yaml", "seed", 0},
    {"duplicate nested key", "model: m.json\ndata:\n  train: a\n  train: b\n", NULL, NULL, NULL, "run.yaml",
     "data.train", 0},
    {"duplicate section", BASE "data:\n  val: v\n", NULL, NULL, NULL, "run.yaml", "data", 0},
    {"unknown key with suggestion", BASE "gradient_acumulation_steps: 4\n", NULL, NULL, NULL, "run.yaml",
     "gradient_accumulation_steps", 0},
    {"unknown nested key", BASE "data.seqlen: 4\n", NULL, NULL, NULL, "run.yaml", "data.seq_len", 0},
    {"HF alias conflict", BASE "every_n_layers: 1\ngradient_checkpointing_kwargs: {every_n_layers: 2}\n", NULL, NULL,
     NULL, "run.yaml", "every_n_layers", 0},
    {"missing model key", "data: {train: t.txt}\n", NULL, NULL, NULL, "run.yaml", "model", 0},
    {"null model", "model: ~\ndata: {train: t.txt}\n", NULL, NULL, NULL, "run.yaml", "model", 0},
    {"missing data.train", "model: m.json\n", NULL, NULL, NULL, "run.yaml", "data.train", 0},
    /* types and numbers */
    {"string for int", "model: m.json\ndata:\n  train: t.txt\n  seq_len: long\n", NULL, NULL, NULL, "run.yaml",
     "data.seq_len", 0},
    {"float for int", BASE "gradient_accumulation_steps: 2.5\n", NULL, NULL, NULL, "run.yaml",
     "gradient_accumulation_steps", 0},
    {"quoted number", BASE "seed: \"42\"\n", NULL, NULL, NULL, "run.yaml", "seed", 0},
    {"yes for bool", BASE "gradient_checkpointing: yes\n", NULL, NULL, NULL, "run.yaml", "gradient_checkpointing", 0},
    {"list for scalar", BASE "learning_rate: [1, 2]\n", NULL, NULL, NULL, "run.yaml", "learning_rate", 0},
    {"bad enum", BASE "lr_scheduler_type: cosin\n", NULL, NULL, NULL, "run.yaml", "lr_scheduler_type", 0},
    {"NaN", BASE "learning_rate: .nan\n", NULL, NULL, NULL, "run.yaml", "learning_rate", 0},
    {"inf", BASE "max_grad_norm: .inf\n", NULL, NULL, NULL, "run.yaml", "max_grad_norm", 0},
    {"huge float", BASE "weight_decay: 1e999\n", NULL, NULL, NULL, "run.yaml", "weight_decay", 0},
    {"huge int", BASE "max_steps: 99999999999999999999999999\n", NULL, NULL, NULL, "run.yaml", "max_steps", 0},
    {"int64 overflow by one", BASE "seed: 9223372036854775808\n", NULL, NULL, NULL, "run.yaml", "seed", 0},
    {"negative steps", BASE "warmup_steps: -5\n", NULL, NULL, NULL, "run.yaml", "warmup_steps", 0},
    {"zero accumulation", BASE "gradient_accumulation_steps: 0\n", NULL, NULL, NULL, "run.yaml",
     "gradient_accumulation_steps", 0},
    {"negative memory", BASE "memory_limit: -1GiB\n", NULL, NULL, NULL, "run.yaml", "memory_limit", 0},
    {"memory overflow", BASE "memory_limit: 99999999999999999999TiB\n", NULL, NULL, NULL, "run.yaml", "memory_limit",
     0},
    {"beta of 1", BASE "adam_beta2: 1\n", NULL, NULL, NULL, "run.yaml", "adam_beta2", 0},
    /* values as the optimizer sees them (32-bit floats), and byte counts below one byte */
    {"beta that is 1 as a float", BASE "adam_beta1: 0.99999999\n", NULL, NULL, NULL, "run.yaml", "adam_beta1", 0},
    {"epsilon that is 0 as a float", BASE "adam_epsilon: 1e-50\n", NULL, NULL, NULL, "run.yaml", "adam_epsilon", 0},
    {"epsilon that is a float denormal", BASE "adam_epsilon: 1e-40\n", NULL, NULL, NULL, "run.yaml", "adam_epsilon", 0},
    {"learning rate that is 0 as a float", BASE "learning_rate: 1e-60\n", NULL, NULL, NULL, "run.yaml", "learning_rate",
     0},
    {"memory_limit 0", BASE "memory_limit: 0\n", NULL, NULL, NULL, "run.yaml", "memory_limit", 0},
    {"memory_limit half a byte", BASE "memory_limit: 0.5B\n", NULL, NULL, NULL, "run.yaml", "memory_limit", 0},
    {"memory_limit 0GiB", BASE "memory_limit: 0GiB\n", NULL, NULL, NULL, "run.yaml", "memory_limit", 0},
    {"max_steps past the optimizer's int", BASE "max_steps: 2147483648\n", NULL, NULL, NULL, "run.yaml", "max_steps", 0},
    /* paths that cannot serve their key (t.txt is a regular file in every case's dir) */
    {"empty output_dir", BASE "output_dir: \"\"\n", NULL, NULL, NULL, "run.yaml", "output_dir", 0},
    {"output_dir under a file", BASE "output_dir: t.txt/out\n", NULL, NULL, NULL, "run.yaml", "output_dir", 0},
    {"output_dir is a file", BASE "output_dir: t.txt\n", NULL, NULL, NULL, "run.yaml", "output_dir", 0},
    {"output_dir with control bytes under a file", BASE "output_dir: \"t.txt/o\\x1b[2Jut\\nx\"\n", NULL, NULL, NULL,
     "run.yaml", "output_dir", 0},
    {"resume_from_checkpoint is a file", BASE "resume_from_checkpoint: t.txt\n", NULL, NULL, NULL, "run.yaml",
     "resume_from_checkpoint", 0},
    {"data.val under a file", "model: m.json\ndata: {train: t.txt, val: t.txt/v.txt, seq_len: 16}\n", NULL, NULL, NULL, "run.yaml",
     "data.val", 0},
    {"eval with val_fraction 0", "model: m.json\ndata: {train: t.txt, seq_len: 16, val_fraction: 0}\neval_steps: 5\n",
     NULL, NULL, NULL, "run.yaml", "eval_steps", 0},
    /* contradictions */
    {"offload without recompute", BASE "offload: true\n", NULL, NULL, NULL, "run.yaml", "offload", 0},
    {"eval without val data", "model: m.json\ndata: {train: t.bin, format: tokens, seq_len: 16}\neval_steps: 10\n",
     NULL, NULL, NULL, "run.yaml", "eval_steps", 0},
    {"auto batch without target", BASE "per_device_train_batch_size: auto\n", NULL, NULL, NULL, "run.yaml",
     "per_device_train_batch_size", 0},
    {"seq_len over n_positions", "model: m.json\ndata:\n  train: t.txt\n  seq_len: 64\n", NULL, NULL, NULL,
     "run.yaml", "data.seq_len", 0},
    {"every_n_layers over n_layer", BASE "gradient_checkpointing: true\nevery_n_layers: 3\n", NULL, NULL, NULL,
     "run.yaml", "every_n_layers", 0},
    {"text with a small vocab", BASE,
     "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 100, \"n_positions\": 32}", NULL, NULL,
     "run.yaml", "data.format", 0},
    /* model files */
    {"missing model", "model: gone.json\ndata: {train: t.txt}\n", NULL, NULL, NULL, "gone.json", NULL, 0},
    {"directory as model", "model: modeldir.json\ndata: {train: t.txt}\n", NULL, gen_dir_model, NULL,
     "modeldir.json", NULL, 0},
    {"empty model", BASE, "", NULL, NULL, "m.json", NULL, 0},
    {"truncated JSON", BASE, "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_he", NULL, NULL, "m.json", NULL, 0},
    {"truncated JSON at a value", BASE, "{\"model_type\": \"gpt2\", \"n_layer\": ", NULL, NULL, "m.json", NULL, 0},
    {"binary garbage model", BASE, NULL, gen_binary_model, NULL, "m.json", NULL, 0},
    {"NUL byte in model", BASE, NULL, gen_nul_model, NULL, "m.json", NULL, 0},
    {"100000-deep JSON arrays", BASE, NULL, gen_deep_json_model, NULL, "m.json", NULL, 0},
    {"100000-deep JSON objects", BASE, NULL, gen_deep_json_object_model, NULL, "m.json", NULL, 0},
    {"model over 1 MiB", BASE, NULL, gen_huge_model, NULL, "m.json", NULL, 0},
    {"model JSON is a list", BASE, "[1, 2, 3]", NULL, NULL, "m.json", NULL, 0},
    {"JSON trailing garbage", BASE, GOOD_MODEL "garbage", NULL, NULL, "m.json", NULL, 0},
    {"unknown model_type", BASE,
     "{\"model_type\": \"gpt_neox\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32}",
     NULL, NULL, "m.json", "model_type", 0},
    {"n_embd not divisible by n_head", BASE,
     "{\"n_layer\": 2, \"n_head\": 3, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32}", NULL, NULL, "m.json",
     "n_head", 0},
    {"n_layer as a string", BASE,
     "{\"n_layer\": \"2\", \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32}", NULL, NULL,
     "m.json", "n_layer", 0},
    {"negative n_embd", BASE,
     "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": -16, \"vocab_size\": 256, \"n_positions\": 32}", NULL, NULL, "m.json",
     "n_embd", 0},
    {"absurd vocab", BASE,
     "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 1e15, \"n_positions\": 32}", NULL, NULL, "m.json",
     "vocab_size", 0},
    {"huge n_layer", BASE,
     "{\"n_layer\": 1e999, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32}", NULL, NULL,
     "m.json", "n_layer", 0},
    {"erf GELU", BASE,
     "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32, \"activation_function\": "
     "\"gelu\"}",
     NULL, NULL, "m.json", "activation_function", 0},
    {"tie_word_embeddings as string", BASE,
     "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32, "
     "\"tie_word_embeddings\": \"yes\"}",
     NULL, NULL, "m.json", "tie_word_embeddings", 0},
    {"duplicate JSON field", BASE,
     "{\"n_layer\": 2, \"n_layer\": 3, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 32}", NULL,
     NULL, "m.json", "n_layer", 0},
    {"no n_positions", BASE, "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256}", NULL, NULL,
     "m.json", "n_positions", 0},
    /* memory plans past 64 bits: refused, never a wrapped-around total that fits */
    {"plan over 64 bits", "model: m.json\ndata: {train: t.txt, seq_len: 1048576}\nper_device_train_batch_size: 65536\n",
     "{\"n_layer\": 1024, \"n_head\": 1024, \"n_embd\": 65536, \"vocab_size\": 256, \"n_positions\": 1048576}", NULL,
     NULL, "run.yaml", "activations", 0},
    {"plan over 64 bits, 64 layers", "model: m.json\ndata: {train: t.txt, seq_len: 1048576}\n"
                                     "per_device_train_batch_size: 65536\nmemory_limit: 1024TiB\n",
     "{\"n_layer\": 64, \"n_head\": 64, \"n_embd\": 65536, \"vocab_size\": 50257, \"n_positions\": 1048576}", NULL,
     NULL, "run.yaml", "overflow", 0},
    /* the true total is 2^64 + 140.7 TiB (test_autofit.c): wrapped, it would pass a 1024 TiB limit */
    {"plan that wraps to fit memory_limit", "model: m.json\ndata: {train: t.txt, seq_len: 1048576}\n"
                                            "per_device_train_batch_size: 64777\nmemory_limit: 1024TiB\n",
     "{\"n_layer\": 64, \"n_head\": 1024, \"n_embd\": 65536, \"vocab_size\": 256, \"n_positions\": 1048576}", NULL,
     NULL, "run.yaml", "overflow", 0},
    /* the lora: section (m.json is GPT-2): file:line:col where the value is read, file:line where it
     * is checked against the model */
    {"lora init_lora_weights pissa_niter_x", BASE "lora:\n  init_lora_weights: pissa_niter_x\n", NULL, NULL, NULL,
     "run.yaml:6:22", "lora.init_lora_weights", 0},
    {"lora init_lora_weights with a leading zero", BASE "lora:\n  init_lora_weights: pissa_niter_01\n", NULL, NULL, NULL,
     "run.yaml:6:22", "lora.init_lora_weights", 0},
    {"lora target_modules with a number", BASE "lora:\n  target_modules: [c_attn, 3]\n", NULL, NULL, NULL,
     "run.yaml:6:19", "lora.target_modules", 0},
    {"lora target_modules with a mapping in it", BASE "lora:\n  target_modules: [c_attn, {a: 1}]\n", NULL, NULL, NULL,
     "run.yaml:6:28", "lora.target_modules", 0},
    {"lora target_modules with a list in it", BASE "lora:\n  target_modules: [c_attn, [c_fc]]\n", NULL, NULL, NULL,
     "run.yaml:6:28", "lora.target_modules", 0},
    {"lora target_modules a nested mapping", BASE "lora:\n  target_modules: {c_attn: {x: 1}}\n", NULL, NULL, NULL,
     "run.yaml:6:19", "lora.target_modules", 0},
    {"lora target_modules an empty list", BASE "lora:\n  target_modules: []\n", NULL, NULL, NULL, "run.yaml:6:19",
     "lora.target_modules", 0},
    {"lora target_modules unknown", BASE "lora:\n  target_modules: [c_attn, foo_proj]\n", NULL, NULL, NULL,
     "run.yaml:6:19", "foo_proj", 0},
    {"lora target_modules of another architecture", BASE "lora:\n  target_modules: [q_proj, v_proj]\n", NULL, NULL, NULL,
     "run.yaml:6: lora.target_modules", "q_proj", 0},
    {"lora_dropout 1.0", BASE "lora:\n  lora_dropout: 1.0\n", NULL, NULL, NULL, "run.yaml:6:17", "lora.lora_dropout", 0},
    {"lora r 0", BASE "lora:\n  r: 0\n", NULL, NULL, NULL, "run.yaml:6:6", "lora.r", 0},
    {"lora r over PEFT's bound", BASE "lora:\n  r: 65537\n", NULL, NULL, NULL, "run.yaml:6:6", "lora.r", 0},
    {"lora_alpha 0", BASE "lora:\n  lora_alpha: 0\n", NULL, NULL, NULL, "run.yaml:6:15", "lora.lora_alpha", 0},
    {"lora use_rslora yes", BASE "lora:\n  use_rslora: yes\n", NULL, NULL, NULL, "run.yaml:6:15", "lora.use_rslora", 0},
    {"lora init_from with PiSSA", BASE "lora:\n  init_from: adapter\n  init_lora_weights: pissa\n", NULL, NULL, NULL,
     "run.yaml:7:22", "lora.init_from", 0},
    {"lora init_from a file", BASE "lora:\n  init_from: t.txt\n", NULL, NULL, NULL, "run.yaml:6:14", "lora.init_from", 0},
    {"lora init_from missing", BASE "lora:\n  init_from: nothere\n", NULL, NULL, NULL, "nothere", NULL, 0},
    {"lora section a list", BASE "lora: [1, 2]\n", NULL, NULL, NULL, "run.yaml:5:7", "lora", 0},
    {"lora: {} is PEFT's defaults", BASE "lora: {}\n", NULL, NULL, NULL, NULL, NULL, 1},
    {"lora pissa_niter_0 on every module", BASE "lora:\n  target_modules: all-linear\n  init_lora_weights: pissa_niter_0\n",
     NULL, NULL, NULL, NULL, NULL, 1},
    /* must succeed: HF's GPT-2 small config.json with every extra field it writes */
    {"real HF config.json", "model: hf.json\ndata:\n  train: t.txt\n  seq_len: 1024\noutput_dir: out\n"
                            "per_device_train_batch_size: 1\n",
     NULL, gen_hf_model, NULL, "hf.json", NULL, 1},
};

#define N_CASES (sizeof CASES / sizeof CASES[0])

/* ---------------------------------------------------------------- running a case */

static void make_case(const Hostile *h, char *dir, size_t cap, char *cfg_path, size_t pcap) {
    snprintf(dir, cap, "/tmp/gt_hostile_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    if (h->config) put(dir, "run.yaml", h->config, strlen(h->config));
    const char *model = h->model ? h->model : GOOD_MODEL;
    put(dir, "m.json", model, strlen(model));
    put(dir, "t.txt", "To be, or not to be, that is the question.\n", 44);
    if (h->gen) h->gen(dir);
    snprintf(cfg_path, pcap, "%s/%s", dir, h->arg ? h->arg : "run.yaml");
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void check_message(const Hostile *h, const char *msg) {
    cr_expect(strstr(msg, h->blame), "[%s] message does not name %s: %s", h->name, h->blame, msg);
    if (h->key) cr_expect(strstr(msg, h->key), "[%s] message does not name %s: %s", h->name, h->key, msg);
}

ParameterizedTestParameters(hostile, in_process) {
    static int idx[N_CASES];
    for (size_t i = 0; i < N_CASES; i++) idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_CASES);
}

ParameterizedTest(int *i, hostile, in_process) {
    const Hostile *h = &CASES[*i];
    char dir[64], cfg_path[256];
    make_case(h, dir, sizeof dir, cfg_path, sizeof cfg_path);
    RunConfig *cfg = calloc(1, sizeof *cfg);
    cr_assert_not_null(cfg);
    ModelDesc desc;
    GtError err = {0};
    int rc = config_load(cfg, cfg_path, NULL, 0, &err);
    if (rc == 0) rc = model_desc_load(&desc, cfg->model, &err);
    if (rc == 0) rc = config_check_model(cfg, &desc, &err);
    PeftConfig peft; /* main.c's order: the lora: section is applied to the model before the plan */
    if (rc == 0) rc = lora_configure(&desc, &peft, cfg, &err);
    MemPlan plan;
    if (rc == 0) rc = plan_resolve(&plan, &desc, cfg, 1, cfg->memory_limit, &err);
    free(cfg);
    rm_tree(dir);
    if (h->ok) {
        cr_expect_eq(rc, 0, "[%s] refused: %s", h->name, err.msg);
        return;
    }
    cr_assert_eq(rc, -1, "[%s] accepted", h->name);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT, "[%s] code %d: %s", h->name, err.code, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "[%s] multi-line message", h->name);
    check_message(h, err.msg);
}

/* Run argv with stdout to /dev/null, stderr captured; returns the wait status. */
static int run_capture(char *const argv[], const char *cwd, char *err_buf, size_t cap) {
    char err_path[300];
    snprintf(err_path, sizeof err_path, "%s/.stderr", cwd);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int o = open("/dev/null", O_WRONLY);
        if (e < 0 || o < 0 || chdir(cwd) != 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    FILE *f = fopen(err_path, "rb");
    size_t n = f ? fread(err_buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    err_buf[n] = '\0';
    unlink(err_path);
    return status;
}

ParameterizedTestParameters(hostile, gtrain_plan) {
    static int idx[N_CASES];
    for (size_t i = 0; i < N_CASES; i++) idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_CASES);
}

ParameterizedTest(int *i, hostile, gtrain_plan) {
    const Hostile *h = &CASES[*i];
    const char *bin = test_gtrain_bin();
    if (!bin || !*bin) cr_skip_test("GTRAIN_BIN is not set (run through make test)");
    char dir[64], cfg_path[256];
    make_case(h, dir, sizeof dir, cfg_path, sizeof cfg_path);
    char *argv[] = {(char *)bin, "plan", "--config", cfg_path, NULL};
    static char err[1 << 16];
    int status = run_capture(argv, dir, err, sizeof err);
    rm_tree(dir);
    cr_assert_not(WIFSIGNALED(status), "[%s] killed by signal %d; stderr: %s", h->name, WTERMSIG(status), err);
    cr_assert(WIFEXITED(status));
    int code = WEXITSTATUS(status);
    if (h->ok) {
        cr_expect_eq(code, 0, "[%s] exit %d; stderr: %s", h->name, code, err);
        return;
    }
    cr_expect_eq(code, GT_EXIT_BAD_INPUT, "[%s] exit %d, expected 2; stderr: %s", h->name, code, err);
    size_t len = strlen(err);
    int lines = 0;
    for (size_t k = 0; k < len; k++) lines += err[k] == '\n';
    cr_expect(len > 0 && err[len - 1] == '\n' && lines == 1, "[%s] stderr is not exactly one line: %s", h->name, err);
    check_message(h, err);
}

/* --set values through the binary: a good config, one hostile --set each; exit 2 and one line
 * naming the --set key, never a value cut off after its first YAML document. */
Test(hostile, set_values) {
    const char *bin = test_gtrain_bin();
    if (!bin || !*bin) cr_skip_test("GTRAIN_BIN is not set (run through make test)");
    static const struct {
        const char *set, *key;
    } sets[] = {
        {"learning_rate=1e-3\n---\nfoo", "--set learning_rate"},
        {"learning_rate=1e-3\n---\n1e-4", "--set learning_rate"},
        {"learning_rate=--- 1e-3", "--set learning_rate"},
        {"seed=1\n...\n", "--set seed"},
        {"seed=%YAML 1.1\n--- 1", "--set seed"},
        {"output_dir=\xff\xfe", "--set output_dir"},
        {"output_dir=out\xc3", "--set output_dir"},
        {"data.train=\xc0\xaf", "--set data.train"},
        {"adam_beta2=0.99999999", "--set adam_beta2"},
        {"memory_limit=0", "--set memory_limit"},
        {"lora.r=0", "--set lora.r"},
        {"lora.target_modules=c_attn,foo_proj", "--set lora.target_modules"},
        {"lora.target_modules=q_proj", "--set lora.target_modules"}, /* GPT-2 has none: checked against the model */
        {"lora.init_lora_weights=pissa_niter_01", "--set lora.init_lora_weights"},
    };
    /* the same config with a harmless --set passes, so each exit 2 below is the --set's */
    Hostile good = {"good config", GOOD_CFG, NULL, NULL, NULL, NULL, NULL, 1};
    char gdir[64], gcfg[256];
    make_case(&good, gdir, sizeof gdir, gcfg, sizeof gcfg);
    char *gargv[] = {(char *)bin, "plan", "--config", gcfg, "--set", "learning_rate=1e-3", NULL};
    static char gerr[1 << 16];
    int gstatus = run_capture(gargv, gdir, gerr, sizeof gerr);
    rm_tree(gdir);
    cr_assert(WIFEXITED(gstatus) && WEXITSTATUS(gstatus) == 0, "good config refused: %s", gerr);
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        Hostile h = {"good config", GOOD_CFG, NULL, NULL, NULL, "--set", sets[k].key, 0};
        char dir[64], cfg_path[256];
        make_case(&h, dir, sizeof dir, cfg_path, sizeof cfg_path);
        char *argv[] = {(char *)bin, "plan", "--config", cfg_path, "--set", (char *)sets[k].set, NULL};
        static char err[1 << 16];
        int status = run_capture(argv, dir, err, sizeof err);
        rm_tree(dir);
        cr_assert(WIFEXITED(status), "[%s] killed by signal %d", sets[k].key, WTERMSIG(status));
        cr_expect_eq(WEXITSTATUS(status), GT_EXIT_BAD_INPUT, "[%s] exit %d; stderr: %s", sets[k].key, WEXITSTATUS(status), err);
        size_t len = strlen(err);
        int lines = 0;
        for (size_t i = 0; i < len; i++) lines += err[i] == '\n';
        cr_expect(len > 0 && err[len - 1] == '\n' && lines == 1, "[%s] stderr is not exactly one line: %s", sets[k].key, err);
        cr_expect(strstr(err, sets[k].key), "[%s] not named: %s", sets[k].key, err);
    }
}

Test(hostile, table_is_big_enough) { cr_expect_geq(N_CASES, 40); }
