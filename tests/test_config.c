/* test_config.c - the run config's schema (suite config; test_config_input.c has the rest of it):
 * defaults, the key table and enum names, every key from a file, every key's type and bounds,
 * bytes, float keys checked as floats, the HF alias spelling, the checks against the model, the
 * printed forms and the shipped config. Expected values are written out here, never read back
 * from the schema table under test. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_fixture.h"
#include "model_desc.h"

TestSuite(config, .init = cfg_scratch_init, .fini = cfg_scratch_fini);

/* ---------------------------------------------------------------- defaults */

Test(config, defaults_are_hf_like) {
    RunConfig *c = cfg_new();
    config_defaults(c);
    cr_expect_eq(c->data.format, DATA_TEXT);
    cr_expect_eq(c->data.seq_len, 1024);
    cr_expect_float_eq(c->data.val_fraction, 0.1, 1e-15);
    cr_expect_eq(c->per_device_train_batch_size, 8);
    cr_expect_eq(c->train_batch_size, 0);
    cr_expect_eq(c->per_device_eval_batch_size, 8);
    cr_expect_eq(c->gradient_accumulation_steps, 1);
    cr_expect_eq(c->gradient_checkpointing, false);
    cr_expect_eq(c->every_n_layers, 1);
    cr_expect_eq(c->offload, false);
    cr_expect_eq(c->max_steps, -1);
    cr_expect_float_eq(c->num_train_epochs, 3.0, 1e-15);
    cr_expect_float_eq(c->learning_rate, 5e-5, 1e-20);
    cr_expect_eq(c->lr_scheduler_type, LR_LINEAR);
    cr_expect_eq(c->warmup_steps, 0);
    cr_expect_float_eq(c->weight_decay, 0.0, 1e-20);
    cr_expect_float_eq(c->adam_beta1, 0.9, 1e-15);
    cr_expect_float_eq(c->adam_beta2, 0.999, 1e-15);
    cr_expect_float_eq(c->adam_epsilon, 1e-8, 1e-22);
    cr_expect_float_eq(c->max_grad_norm, 1.0, 1e-15);
    cr_expect_eq(c->precision, PREC_FP32);
    cr_expect_eq(c->ddp_grad_dtype, PREC_FP32, "ddp_grad_dtype defaults to fp32 (today's all-reduce)");
    cr_expect_eq(c->seed, 42);
    cr_expect_eq(c->device, DEVICE_AUTO);
    cr_expect_eq(c->loss_normalization, LOSS_NORM_TOKENS);
    cr_expect_eq(c->logging_steps, 10);
    cr_expect_eq(c->eval_steps, 0);
    cr_expect_eq(c->eval_max_batches, 0);
    cr_expect_eq(c->save_total_limit, 0);
    cr_expect_str_eq(c->output_dir, cfg_in_cwd("runs/gtrain"));
    cr_expect_str_eq(c->resume_from_checkpoint, "auto");
    cr_expect_str_eq(c->model, "");
    cr_expect_str_eq(c->init_from, "");
    cr_expect_str_eq(c->data.train, "");
    cr_expect_str_eq(c->data.val, "");
    cr_expect(c->data.shuffle, "data.shuffle defaults to true (a seeded random order)");
    cr_expect_eq(c->memory_limit, 0);
    cr_expect_eq(c->num_threads, 0);
    for (int i = 0; i < config_schema_count(); i++) {
        cr_expect_eq(c->source[i], CFG_SRC_DEFAULT);
        cr_expect_eq(c->source_line[i], 0);
    }
    free(c);
}

Test(config, schema_lookup) {
    cr_assert_geq(config_schema_count(), 39);
    cr_assert_leq(config_schema_count(), GT_CONFIG_MAX_KEYS);
    const char *keys[] = {"model", "init_from", "data.train", "data.val", "data.format", "data.seq_len",
                          "data.val_fraction", "per_device_train_batch_size", "train_batch_size",
                          "per_device_eval_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
                          "every_n_layers", "offload", "gradient_checkpointing_kwargs.every_n_layers",
                          "gradient_checkpointing_kwargs.offload", "max_steps", "num_train_epochs", "learning_rate",
                          "lr_scheduler_type", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2",
                          "adam_epsilon", "max_grad_norm", "precision", "seed", "device", "loss_normalization",
                          "logging_steps", "eval_steps", "eval_max_batches", "save_steps", "save_total_limit",
                          "output_dir", "resume_from_checkpoint", "memory_limit", "num_threads"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        int i = config_schema_index(keys[k]);
        cr_expect_geq(i, 0, "missing key %s", keys[k]);
        if (i >= 0) cr_expect_str_eq(config_schema_key(i), keys[k]);
    }
    cr_expect_eq(config_schema_index("seq_len"), -1);
    cr_expect_eq(config_schema_index("data"), -1);
    cr_expect_null(config_schema_key(-1));
    cr_expect_null(config_schema_key(config_schema_count()));
}

Test(config, enum_names) {
    cr_expect_str_eq(config_lr_schedule_name(LR_CONSTANT), "constant");
    cr_expect_str_eq(config_lr_schedule_name(LR_LINEAR), "linear");
    cr_expect_str_eq(config_lr_schedule_name(LR_COSINE), "cosine");
    cr_expect_str_eq(config_precision_name(PREC_FP32), "fp32");
    cr_expect_str_eq(config_precision_name(PREC_BF16), "bf16");
    cr_expect_str_eq(config_device_name(DEVICE_AUTO), "auto");
    cr_expect_str_eq(config_device_name(DEVICE_CPU), "cpu");
    cr_expect_str_eq(config_device_name(DEVICE_CUDA), "cuda");
    cr_expect_str_eq(config_loss_norm_name(LOSS_NORM_TOKENS), "tokens");
    cr_expect_str_eq(config_loss_norm_name(LOSS_NORM_STEPS), "steps");
    cr_expect_str_eq(config_data_format_name(DATA_TEXT), "text");
    cr_expect_str_eq(config_data_format_name(DATA_TOKENS), "tokens");
    cr_expect_str_eq(config_data_format_name(DATA_JSONL), "jsonl");
}

/* ---------------------------------------------------------------- every key from the file */

Test(config, every_key_from_file) {
    RunConfig *c = cfg_new();
    cfg_expect_ok("model: m.json\n"                        /* 1 */
              "init_from: w.safetensors\n"             /* 2 */
              "data:\n"                                /* 3 */
              "  train: t.bin\n"                       /* 4 */
              "  val: v.bin\n"                         /* 5 */
              "  format: tokens\n"                     /* 6 */
              "  seq_len: 256\n"                       /* 7 */
              "  val_fraction: 0.25\n"                 /* 8 */
              "per_device_train_batch_size: 3\n"       /* 9 */
              "train_batch_size: 96\n"                 /* 10 */
              "per_device_eval_batch_size: 5\n"        /* 11 */
              "gradient_accumulation_steps: 7\n"       /* 12 */
              "gradient_checkpointing: true\n"         /* 13 */
              "every_n_layers: 2\n"                    /* 14 */
              "offload: true\n"                        /* 15 */
              "max_steps: 123\n"                       /* 16 */
              "num_train_epochs: 2.5\n"                /* 17 */
              "learning_rate: 3e-4\n"                  /* 18 */
              "lr_scheduler_type: cosine\n"            /* 19 */
              "warmup_steps: 11\n"                     /* 20 */
              "weight_decay: 0.1\n"                    /* 21 */
              "adam_beta1: 0.8\n"                      /* 22 */
              "adam_beta2: 0.95\n"                     /* 23 */
              "adam_epsilon: 1.0e-6\n"                 /* 24 */
              "max_grad_norm: 0.5\n"                   /* 25 */
              "precision: bf16\n"                      /* 26 */
              "seed: 1337\n"                           /* 27 */
              "device: cpu\n"                          /* 28 */
              "loss_normalization: steps\n"            /* 29 */
              "logging_steps: 4\n"                     /* 30 */
              "eval_steps: 50\n"                       /* 31 */
              "eval_max_batches: 6\n"                  /* 32 */
              "save_steps: 100\n"                      /* 33 */
              "save_total_limit: 3\n"                  /* 34 */
              "output_dir: out\n"                      /* 35 */
              "resume_from_checkpoint: latest\n"       /* 36 */
              "memory_limit: 24GiB\n"                  /* 37 */
              "num_threads: 2\n",                      /* 38 */
              c);
    char p[600];
    snprintf(p, sizeof p, "%s/m.json", cfg_dir);
    cr_expect_str_eq(c->model, p);
    snprintf(p, sizeof p, "%s/w.safetensors", cfg_dir);
    cr_expect_str_eq(c->init_from, p);
    snprintf(p, sizeof p, "%s/t.bin", cfg_dir);
    cr_expect_str_eq(c->data.train, p);
    snprintf(p, sizeof p, "%s/v.bin", cfg_dir);
    cr_expect_str_eq(c->data.val, p);
    cr_expect_eq(c->data.format, DATA_TOKENS);
    cr_expect_eq(c->data.seq_len, 256);
    cr_expect_float_eq(c->data.val_fraction, 0.25, 1e-15);
    cr_expect_eq(c->per_device_train_batch_size, 3);
    cr_expect_eq(c->train_batch_size, 96);
    cr_expect_eq(c->per_device_eval_batch_size, 5);
    cr_expect_eq(c->gradient_accumulation_steps, 7);
    cr_expect(c->gradient_checkpointing);
    cr_expect_eq(c->every_n_layers, 2);
    cr_expect(c->offload);
    cr_expect_eq(c->max_steps, 123);
    cr_expect_float_eq(c->num_train_epochs, 2.5, 1e-15);
    cr_expect_float_eq(c->learning_rate, 3e-4, 1e-18);
    cr_expect_eq(c->lr_scheduler_type, LR_COSINE);
    cr_expect_eq(c->warmup_steps, 11);
    cr_expect_float_eq(c->weight_decay, 0.1, 1e-15);
    cr_expect_float_eq(c->adam_beta1, 0.8, 1e-15);
    cr_expect_float_eq(c->adam_beta2, 0.95, 1e-15);
    cr_expect_float_eq(c->adam_epsilon, 1e-6, 1e-20);
    cr_expect_float_eq(c->max_grad_norm, 0.5, 1e-15);
    cr_expect_eq(c->precision, PREC_BF16);
    cr_expect_eq(c->seed, 1337);
    cr_expect_eq(c->device, DEVICE_CPU);
    cr_expect_eq(c->loss_normalization, LOSS_NORM_STEPS);
    cr_expect_eq(c->logging_steps, 4);
    cr_expect_eq(c->eval_steps, 50);
    cr_expect_eq(c->eval_max_batches, 6);
    cr_expect_eq(c->save_steps, 100);
    cr_expect_eq(c->save_total_limit, 3);
    snprintf(p, sizeof p, "%s/out", cfg_dir);
    cr_expect_str_eq(c->output_dir, p);
    cr_expect_str_eq(c->resume_from_checkpoint, "latest");
    cr_expect_eq(c->memory_limit, 24ull << 30);
    cr_expect_eq(c->num_threads, 2);

    /* where each value came from: the file, at the line written above */
    struct {
        const char *key;
        int line;
    } lines[] = {{"model", 1}, {"init_from", 2}, {"data.train", 4}, {"data.val", 5}, {"data.format", 6},
                 {"data.seq_len", 7}, {"data.val_fraction", 8}, {"per_device_train_batch_size", 9},
                 {"gradient_checkpointing", 13}, {"every_n_layers", 14}, {"offload", 15}, {"seed", 27},
                 {"memory_limit", 37}, {"num_threads", 38}};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
        int i = cfg_idx(lines[k].key);
        cr_expect_eq(c->source[i], CFG_SRC_FILE, "%s", lines[k].key);
        cr_expect_eq(c->source_line[i], lines[k].line, "%s: line %d", lines[k].key, c->source_line[i]);
    }
    cr_expect_eq(c->source[cfg_idx("seed")], CFG_SRC_FILE);
    free(c);
}

Test(config, config_path_and_dir) {
    RunConfig *c = cfg_new();
    cfg_expect_ok(CFG_BASE, c);
    char p[600];
    snprintf(p, sizeof p, "%s/run.yaml", cfg_dir);
    cr_expect_str_eq(c->config_path, p);
    cr_expect_str_eq(c->config_dir, cfg_dir);
    /* untouched keys stay default */
    cr_expect_eq(c->source[cfg_idx("learning_rate")], CFG_SRC_DEFAULT);
    cr_expect_eq(c->source_line[cfg_idx("learning_rate")], 0);
    free(c);
}

/* ---------------------------------------------------------------- types and bounds, per key */

typedef struct {
    const char *key;     /* dotted */
    const char *good[4]; /* accepted values (YAML text) */
    const char *bad[8];  /* refused values */
} Rule;

/* Written out from the spec, independently of the table in config.c. */
static const Rule RULES[] = {
    {"data.seq_len", {"1", "1048576", "64"}, {"0", "-1", "1048577", "1.5", "abc", "true", "\"64\"", "~"}},
    {"data.val_fraction", {"0", "0.5", "0.9"}, {"-0.1", "0.95", "abc", ".nan", ".inf", "true"}},
    {"per_device_train_batch_size", {"1", "65536", "auto"}, {"0", "-3", "65537", "2.0", "autox", "~"}},
    {"train_batch_size", {"0", "512"}, {"-1", "16777217", "x"}},
    {"per_device_eval_batch_size", {"1", "65536"}, {"0", "65537", "a"}},
    {"gradient_accumulation_steps", {"1", "1048576"}, {"0", "-1", "1048577", "1e3", "\"4\""}},
    {"every_n_layers", {"1", "1024"}, {"0", "1025", "-1"}},
    {"gradient_checkpointing", {"true", "false", "True", "FALSE"}, {"yes", "1", "on", "\"true\"", "~", "tru"}},
    {"data.shuffle", {"true", "false"}, {"no", "0", "off", "\"false\""}},
    /* at most 2^31-1: AdamW's step count is an int in the backends */
    {"max_steps", {"-1", "1", "2147483647"}, {"-2", "2147483648", "1000000000000", "9223372036854775808", "1.0"}},
    {"num_train_epochs", {"0.5", "3", "1000000"}, {"0", "-1", "1000001", ".inf", "1e999"}},
    {"learning_rate", {"0", "5e-5", "1.0e-3", "10"}, {"-1e-5", "11", ".nan", ".NaN", "-.inf", "lr", "\"1e-3\""}},
    {"warmup_steps", {"0", "100"}, {"-1", "99999999999999999999999"}},
    {"weight_decay", {"0", "0.1", "10"}, {"-0.1", "10.5"}},
    {"adam_beta1", {"0", "0.9", "0.999999"}, {"1", "1.0", "-0.1", "2"}},
    {"adam_beta2", {"0", "0.999"}, {"1", "1.5"}},
    {"adam_epsilon", {"1e-8", "1"}, {"0", "-1e-8", "1.5"}},
    {"max_grad_norm", {"0", "1.0", "1000000"}, {"-1", "1e7"}},
    {"seed", {"0", "42", "9223372036854775807"}, {"-1", "9223372036854775808", "0.5"}},
    {"logging_steps", {"1", "500"}, {"0", "-1"}},
    {"eval_steps", {"0", "10"}, {"-1"}},
    {"eval_max_batches", {"0", "10"}, {"-1"}},
    {"save_steps", {"0", "500"}, {"-1", "x"}},
    {"save_total_limit", {"0", "3", "1000000"}, {"-1", "1000001"}},
    {"num_threads", {"0", "16", "4096"}, {"-1", "4097"}},
    {"lr_scheduler_type", {"constant", "linear", "cosine", "\"cosine\""}, {"cosin", "Cosine", "1", "~", "true"}},
    {"precision", {"fp32", "bf16"}, {"fp16", "bfloat16", "32"}},
    {"ddp_grad_dtype", {"fp32", "bf16"}, {"fp16", "bfloat16", "float32", "16"}},
    {"device", {"auto", "cpu", "cuda"}, {"gpu", "CUDA", "0"}},
    {"loss_normalization", {"tokens", "steps"}, {"token", "mean"}},
    {"data.format", {"text", "tokens", "jsonl", "json"}, {"csv", "bin", ""}},
    {"memory_limit", {"1", "auto", "24GiB", "1.5GB"}, {"0", "0.5B", "0GiB", "-5GiB", "24 parsecs", "1e30", "GiB", ".inf"}},
};

/* "a.b" with value v -> "a:\n  b: v\n" (or "a: v\n") added to CFG_BASE-without-the-key. */
static void yaml_for(const char *key, const char *value, char *out, size_t cap) {
    const char *dot = strchr(key, '.');
    if (!dot) {
        snprintf(out, cap, "model: m.json\ndata:\n  train: t.txt\n  val: v.txt\n%s: %s\n", key, value);
    } else if (strncmp(key, "data.", 5) == 0) {
        snprintf(out, cap, "model: m.json\ndata:\n  train: t.txt\n%s  %s: %s\n",
                 strcmp(dot + 1, "val") == 0 ? "" : "  val: v.txt\n", dot + 1, value);
    } else {
        snprintf(out, cap, "model: m.json\ndata:\n  train: t.txt\n  val: v.txt\n%.*s:\n  %s: %s\n", (int)(dot - key),
                 key, dot + 1, value);
    }
}

Test(config, every_rule_good_and_bad_values) {
    char text[1024], set[256];
    for (size_t r = 0; r < sizeof RULES / sizeof RULES[0]; r++) {
        const Rule *rule = &RULES[r];
        for (int g = 0; g < 4 && rule->good[g]; g++) {
            RunConfig *c = cfg_new();
            GtError err;
            yaml_for(rule->key, rule->good[g], text, sizeof text);
            /* auto needs its effective batch */
            if (strcmp(rule->good[g], "auto") == 0 && strcmp(rule->key, "per_device_train_batch_size") == 0)
                strcat(text, "train_batch_size: 64\n");
            int rc = cfg_load(c, &err, text, NULL, 0);
            cr_expect_eq(rc, 0, "%s: %s refused: %s", rule->key, rule->good[g], err.msg);
            if (rc == 0) cr_expect_eq(c->source[cfg_idx(rule->key)], CFG_SRC_FILE, "%s", rule->key);
            /* the same value through --set */
            snprintf(set, sizeof set, "%s=%s", rule->key, rule->good[g]);
            const char *sets[] = {set, "train_batch_size=64"};
            rc = cfg_load(c, &err, "model: m.json\ndata: {train: t.txt, val: v.txt}\n", sets, 2);
            cr_expect_eq(rc, 0, "--set %s refused: %s", set, err.msg);
            if (rc == 0) cr_expect_eq(c->source[cfg_idx(rule->key)], CFG_SRC_SET, "%s", rule->key);
            free(c);
        }
        for (int b = 0; b < 8 && rule->bad[b]; b++) {
            RunConfig *c = cfg_new();
            GtError err;
            yaml_for(rule->key, rule->bad[b], text, sizeof text);
            int rc = cfg_load(c, &err, text, NULL, 0);
            cr_expect_eq(rc, -1, "%s: %s accepted", rule->key, rule->bad[b]);
            if (rc) {
                cfg_assert_err(&err, "run.yaml:", rule->key);
                cr_expect(strstr(err.msg, "expected"), "%s", err.msg);
                cr_expect(strstr(err.msg, "found"), "%s", err.msg);
            }
            snprintf(set, sizeof set, "%s=%s", rule->key, rule->bad[b]);
            const char *sets[] = {set};
            rc = cfg_load(c, &err, "model: m.json\ndata: {train: t.txt, val: v.txt}\n", sets, 1);
            cr_expect_eq(rc, -1, "--set %s accepted", set);
            if (rc) {
                char want[128];
                snprintf(want, sizeof want, "--set %s", rule->key);
                cfg_assert_err(&err, want, "expected");
            }
            free(c);
        }
    }
}

Test(config, position_of_a_bad_value) {
    /* line 4, column 12: the value, not the key */
    cfg_expect_fail("model: m.json\ndata:\n  train: t.txt\n  seq_len: abc\n", "run.yaml:4:12: data.seq_len: expected an integer",
                "found abc");
    cfg_expect_fail(CFG_BASE "learning_rate: \"1e-3\"\n", "run.yaml:4:16: learning_rate", "\"1e-3\"");
}

Test(config, numbers_exact) {
    RunConfig *c = cfg_new();
    cfg_expect_ok(CFG_BASE "learning_rate: 1.0e-3\nseed: 9223372036854775807\nmax_steps: +12\nwarmup_steps: 007\n", c);
    cr_expect_eq(c->learning_rate, 1e-3);
    cr_expect_eq(c->seed, 9223372036854775807ull);
    cr_expect_eq(c->max_steps, 12);
    cr_expect_eq(c->warmup_steps, 7);
    free(c);
}

Test(config, bytes_units) {
    struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {{"auto", 0},
                 {"\"auto\"", 0},
                 {"1024", 1024},
                 {"24GiB", 24ull << 30},
                 {"\"24GiB\"", 24ull << 30},
                 {"512MiB", 512ull << 20},
                 {"1.5GB", 1500000000ull},
                 {"1 KiB", 1024},
                 {"2kb", 2000},
                 {"3TiB", 3ull << 40},
                 {"7B", 7},
                 {"1125899906842624", 1ull << 50}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        RunConfig *c = cfg_new();
        char text[256];
        snprintf(text, sizeof text, CFG_BASE "memory_limit: %s\n", cases[k].text);
        cfg_expect_ok(text, c);
        cr_expect_eq(c->memory_limit, cases[k].bytes, "%s -> %llu", cases[k].text, (unsigned long long)c->memory_limit);
        free(c);
    }
    cfg_expect_fail(CFG_BASE "memory_limit: 1125899906842625\n", "memory_limit", "found");
    cfg_expect_fail(CFG_BASE "memory_limit: 99999999999999999999999\n", "memory_limit", "found");
    cfg_expect_fail(CFG_BASE "memory_limit: 2PiB\n", "memory_limit", "found");
    /* below one byte is no limit at all (and 0 would silently mean auto) */
    cfg_expect_fail(CFG_BASE "memory_limit: 0\n", "run.yaml:4:15: memory_limit", "found 0 (less than one byte)");
    cfg_expect_fail(CFG_BASE "memory_limit: 0.5B\n", "run.yaml:4:15: memory_limit", "found 0.5B (less than one byte)");
    cfg_expect_fail(CFG_BASE "memory_limit: 0GiB\n", "memory_limit", "found 0GiB (less than one byte)");
    cfg_expect_fail(CFG_BASE "memory_limit: 0.0\n", "memory_limit", "less than one byte");
}

/* Keys that reach the optimizer as 32-bit floats are checked as the float they become: FLT_MIN
 * is 1.17549435e-38, the largest float below 1 is 1 - 2^-24 = 0.99999994. */
Test(config, float_keys_checked_as_float) {
    struct {
        const char *key, *value, *note; /* note: NULL = accepted */
    } cases[] = {
        {"adam_beta1", "0.99999999", "(1 as a 32-bit float)"},
        {"adam_beta2", "0.99999999", "(1 as a 32-bit float)"},
        {"adam_beta2", "0.999999999999", "(1 as a 32-bit float)"},
        {"adam_beta2", "0.9999999", NULL}, /* 0.99999988 as float */
        {"adam_beta2", "0.99999997", NULL}, /* rounds down to 0.99999994 */
        {"adam_epsilon", "1e-50", "(0 as a 32-bit float)"},
        {"adam_epsilon", "1e-40", "(a denormal as a 32-bit float)"},
        {"adam_epsilon", "1e-38", "(a denormal as a 32-bit float)"},
        {"adam_epsilon", "1.2e-38", NULL},
        {"adam_epsilon", "1e-30", NULL},
        {"learning_rate", "1e-50", "(0 as a 32-bit float)"},
        {"learning_rate", "1e-45", "(a denormal as a 32-bit float)"},
        {"learning_rate", "1e-30", NULL},
        {"learning_rate", "0", NULL}, /* 0 is 0 in any precision */
        {"weight_decay", "1e-300", "(0 as a 32-bit float)"},
        {"weight_decay", "1e-40", "(a denormal as a 32-bit float)"},
        {"weight_decay", "0", NULL},
        {"max_grad_norm", "1e-40", "(a denormal as a 32-bit float)"},
        {"max_grad_norm", "0", NULL},
        {"max_grad_norm", "0.001", NULL},
        /* kept in double: not refused for float underflow */
        {"dist_timeout", "1e-40", NULL},
        {"num_train_epochs", "1e-40", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[256], where[64], set[128];
        snprintf(text, sizeof text, CFG_BASE "%s: %s\n", cases[k].key, cases[k].value);
        snprintf(set, sizeof set, "%s=%s", cases[k].key, cases[k].value);
        const char *sets[] = {set};
        RunConfig *c = cfg_new();
        GtError err;
        if (!cases[k].note) {
            cr_expect_eq(cfg_load(c, &err, text, NULL, 0), 0, "%s refused: %s", text, err.msg);
            cr_expect_eq(cfg_load(c, &err, CFG_BASE, sets, 1), 0, "--set %s refused: %s", set, err.msg);
            free(c);
            continue;
        }
        snprintf(where, sizeof where, "run.yaml:4:%zu: %s", strlen(cases[k].key) + 3, cases[k].key);
        int rc = cfg_load(c, &err, text, NULL, 0);
        cr_expect_eq(rc, -1, "accepted: %s", text);
        if (rc) {
            cfg_assert_err(&err, where, cases[k].note);
            cr_expect(strstr(err.msg, cases[k].value), "value not named: %s", err.msg);
        }
        rc = cfg_load(c, &err, CFG_BASE, sets, 1);
        cr_expect_eq(rc, -1, "--set %s accepted", set);
        snprintf(where, sizeof where, "--set %s", cases[k].key);
        if (rc) cfg_assert_err(&err, where, cases[k].note);
        free(c);
    }
}

/* cosine_with_min_lr's floor, learning_rate x min_lr_rate, reaches AdamW as a float too */
Test(config, min_lr_floor_checked_as_float) {
    cfg_expect_fail(CFG_BASE "learning_rate: 1e-3\nlr_scheduler_type: cosine_with_min_lr\nlr_scheduler_kwargs:\n  min_lr_rate: 1e-37\n",
                "run.yaml:7:16: lr_scheduler_kwargs.min_lr_rate", "1e-40");
    RunConfig *c = cfg_new();
    cfg_expect_ok(CFG_BASE "learning_rate: 1e-3\nlr_scheduler_type: cosine_with_min_lr\nlr_scheduler_kwargs:\n  min_lr_rate: 1e-30\n", c);
    /* the floor of another schedule is never used */
    cfg_expect_ok(CFG_BASE "learning_rate: 1e-3\nlr_scheduler_type: cosine\nlr_scheduler_kwargs:\n  min_lr_rate: 1e-37\n", c);
    free(c);
}

Test(config, auto_batch) {
    RunConfig *c = cfg_new();
    cfg_expect_ok(CFG_BASE "per_device_train_batch_size: auto\ntrain_batch_size: 256\n", c);
    cr_expect_eq(c->per_device_train_batch_size, 0);
    cr_expect_eq(c->train_batch_size, 256);
    free(c);
    cfg_expect_fail(CFG_BASE "per_device_train_batch_size: auto\n", "run.yaml:4:", "train_batch_size");
}

/* ---------------------------------------------------------------- the HF spelling */

Test(config, hf_alias_spelling) {
    RunConfig *c = cfg_new();
    cfg_expect_ok(CFG_BASE "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  every_n_layers: 3\n  offload: true\n", c);
    cr_expect_eq(c->every_n_layers, 3);
    cr_expect(c->offload);
    cr_expect_eq(c->source[cfg_idx("every_n_layers")], CFG_SRC_FILE);
    cr_expect_eq(c->source_line[cfg_idx("every_n_layers")], 6);
    cr_expect_eq(c->source_line[cfg_idx("offload")], 7);
    /* flow style */
    cfg_expect_ok(CFG_BASE "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {every_n_layers: 2}\n", c);
    cr_expect_eq(c->every_n_layers, 2);
    /* both spellings, same value: fine */
    cfg_expect_ok(CFG_BASE "every_n_layers: 2\ngradient_checkpointing_kwargs: {every_n_layers: 2}\n", c);
    cr_expect_eq(c->every_n_layers, 2);
    free(c);
    /* both spellings, different values: an error naming both */
    cfg_expect_fail(CFG_BASE "every_n_layers: 2\ngradient_checkpointing_kwargs: {every_n_layers: 4}\n",
                "gradient_checkpointing_kwargs.every_n_layers", "every_n_layers (line 4)");
    cfg_expect_fail(CFG_BASE "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {offload: true}\noffload: false\n",
                "run.yaml:6:10: offload", "gradient_checkpointing_kwargs.offload");
    /* the alias has the same bounds */
    cfg_expect_fail(CFG_BASE "gradient_checkpointing_kwargs: {every_n_layers: 0}\n", "gradient_checkpointing_kwargs.every_n_layers",
                "[1, 1024]");
}

Test(config, hf_alias_via_set) {
    RunConfig *c = cfg_new();
    GtError err;
    const char *sets[] = {"gradient_checkpointing=true", "gradient_checkpointing_kwargs.every_n_layers=4",
                          "gradient_checkpointing_kwargs.offload=true"};
    cr_assert_eq(cfg_load(c, &err, CFG_BASE "every_n_layers: 2\n", sets, 3), 0, "%s", err.msg);
    cr_expect_eq(c->every_n_layers, 4); /* --set overrides the file, whichever spelling */
    cr_expect(c->offload);
    cr_expect_eq(c->source[cfg_idx("every_n_layers")], CFG_SRC_SET);
    free(c);
}

/* ---------------------------------------------------------------- checks with the model */

static ModelDesc small_model(void) {
    ModelDesc d;
    memset(&d, 0, sizeof d);
    snprintf(d.path, sizeof d.path, "tiny.json");
    d.n_layer = 4;
    d.n_head = 2;
    d.n_embd = 32;
    d.n_inner = 128;
    d.vocab_size = 256;
    d.n_positions = 64;
    d.layer_norm_epsilon = 1e-5;
    d.tie_word_embeddings = true;
    model_desc_defaults(&d);
    return d;
}

Test(config, check_model) {
    RunConfig *c = cfg_new();
    GtError err = {0};
    ModelDesc d = small_model();
    cfg_expect_ok("model: m.json\ndata:\n  train: t.txt\n  seq_len: 64\ngradient_checkpointing: true\nevery_n_layers: 4\n", c);
    cr_expect_eq(config_check_model(c, &d, &err), 0, "%s", err.msg);

    cfg_expect_ok("model: m.json\ndata:\n  train: t.txt\n  seq_len: 65\n", c);
    cr_expect_eq(config_check_model(c, &d, &err), -1);
    cfg_assert_err(&err, "run.yaml:4: data.seq_len", "n_positions");
    cr_expect(strstr(err.msg, "tiny.json"), "%s", err.msg);

    /* the default seq_len (1024) is too long for this model too: the message says it is the default */
    cfg_expect_ok(CFG_BASE, c);
    cr_expect_eq(config_check_model(c, &d, &err), -1);
    cfg_assert_err(&err, "run.yaml: data.seq_len", "default");

    cfg_expect_ok("model: m.json\ndata:\n  train: t.txt\n  seq_len: 8\nevery_n_layers: 5\n", c);
    cr_expect_eq(config_check_model(c, &d, &err), -1);
    cfg_assert_err(&err, "run.yaml:5: every_n_layers", "n_layer");

    const char *sets[] = {"gradient_checkpointing_kwargs.every_n_layers=9"};
    cr_assert_eq(cfg_load(c, &err, "model: m.json\ndata:\n  train: t.txt\n  seq_len: 8\n", sets, 1), 0);
    cr_expect_eq(config_check_model(c, &d, &err), -1);
    cfg_assert_err(&err, "--set every_n_layers", "n_layer");

    d.vocab_size = 100;
    cfg_expect_ok("model: m.json\ndata:\n  train: t.txt\n  seq_len: 8\n", c);
    cr_expect_eq(config_check_model(c, &d, &err), -1);
    cfg_assert_err(&err, "data.format", "vocab_size");
    cfg_expect_ok("model: m.json\ndata:\n  train: t.bin\n  format: tokens\n  seq_len: 8\n", c);
    cr_expect_eq(config_check_model(c, &d, &err), 0, "%s", err.msg);
    free(c);
}

/* ---------------------------------------------------------------- printing */

Test(config, print_resolved) {
    RunConfig *c = cfg_new();
    GtError err;
    const char *sets[] = {"seed=5"};
    cr_assert_eq(cfg_load(c, &err, CFG_BASE "learning_rate: 0.001\nmemory_limit: 2GiB\n", sets, 1), 0, "%s", err.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print_resolved(c, f);
    fclose(f);
    const char *must[] = {"data.seq_len", "learning_rate", "0.001", "file:4", "seed", "--set", "default",
                          "memory_limit", "2147483648", "lr_scheduler_type", "linear", "output_dir", "runs/gtrain",
                          "file:1", "file:3"};
    for (size_t k = 0; k < sizeof must / sizeof must[0]; k++) cr_expect(strstr(buf, must[k]), "missing %s in:\n%s", must[k], buf);
    /* one line per canonical key (+ a header); the two HF aliases print as their fields */
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    cr_expect_eq(lines, 1 + config_schema_count() - 2, "%d lines", lines);
    /* the seed line says --set, the learning_rate line says file:4 */
    char *s = strstr(buf, "  seed ");
    cr_assert_not_null(s);
    char *eol = strchr(s, '\n');
    *eol = '\0';
    cr_expect(strstr(s, "--set"), "%s", s);
    *eol = '\n';
    s = strstr(buf, "  learning_rate ");
    cr_assert_not_null(s);
    eol = strchr(s, '\n');
    *eol = '\0';
    cr_expect(strstr(s, "file:4"), "%s", s);
    free(buf);
    free(c);
}

Test(config, print_help) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print_help(f, 0);
    fclose(f);
    for (int i = 0; i < config_schema_count(); i++)
        cr_expect(strstr(buf, config_schema_key(i)), "help lacks %s", config_schema_key(i));
    cr_expect(strstr(buf, "constant, linear, cosine"), "enum names");
    cr_expect(strstr(buf, "[1, 1048576]"), "seq_len bounds");
    free(buf);

    buf = NULL;
    f = open_memstream(&buf, &len);
    config_print_help(f, 1);
    fclose(f);
    cr_expect_eq(strncmp(buf, "| key | type | default | bounds | description |\n|---|---|---|---|---|\n", 68), 0, "%s", buf);
    int rows = 0;
    for (char *p = buf; *p; p++)
        if (*p == '\n') rows++;
    cr_expect_eq(rows, 2 + config_schema_count());
    for (int i = 0; i < config_schema_count(); i++) {
        char cell[128];
        snprintf(cell, sizeof cell, "| `%s` |", config_schema_key(i));
        cr_expect(strstr(buf, cell), "markdown lacks %s", cell);
    }
    /* every row has 6 pipes outside escapes (5 cells) */
    for (char *line = buf; *line;) {
        char *eol = strchr(line, '\n');
        int pipes = 0;
        for (char *p = line; p < eol; p++)
            if (*p == '|' && (p == line || p[-1] != '\\')) pipes++;
        cr_expect_eq(pipes, 6, "%.*s", (int)(eol - line), line);
        line = eol + 1;
    }
    free(buf);
}

/* ---------------------------------------------------------------- the shipped configs */

Test(config, shipped_gpt2_config) {
    const char *root = getenv("GTRAIN_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/gpt2-124m.yaml", root ? root : ".");
    RunConfig *c = cfg_new();
    GtError err = {0};
    cr_assert_eq(config_load(c, path, NULL, 0, &err), 0, "%s", err.msg);
    cr_expect_eq(c->data.format, DATA_TOKENS);
    cr_expect_eq(c->data.seq_len, 1024);
    cr_expect_eq(c->per_device_train_batch_size, 4);
    cr_expect_eq(c->gradient_accumulation_steps, 8);
    ModelDesc d;
    cr_assert_eq(model_desc_load(&d, c->model, &err), 0, "%s", err.msg);
    cr_expect_eq(config_check_model(c, &d, &err), 0, "%s", err.msg);
    cr_expect_eq(model_desc_num_params(&d), 124439808ull);
    free(c);
}
