/* test_config_input.c - what the run config reads (suite config, with test_config.c): the YAML
 * file's structure and files that are not configs, required keys and contradictions, path
 * resolution, --set (nested, order, bad values) and clean paths. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_fixture.h"

/* ---------------------------------------------------------------- structure */

Test(config, unknown_keys_suggest) {
    cfg_expect_fail(CFG_BASE "gradient_acumulation_steps: 2\n", "run.yaml:4:1: gradient_acumulation_steps",
                "did you mean gradient_accumulation_steps?");
    cfg_expect_fail(CFG_BASE "seq_len: 128\n", "run.yaml:4:1: seq_len", "did you mean data.seq_len?");
    cfg_expect_fail(CFG_BASE "lerning_rate: 0.1\n", "lerning_rate", "did you mean learning_rate?");
    cfg_expect_fail("model: m.json\ndata:\n  train: t.txt\n  seqlen: 5\n", "run.yaml:4:3: data.seqlen",
                "did you mean data.seq_len?");
    cfg_expect_fail(CFG_BASE "gradient_checkpointing_kwargs:\n  use_reentrant: false\n", "gradient_checkpointing_kwargs.use_reentrant",
                "did you mean");
}

Test(config, duplicates) {
    cfg_expect_fail(CFG_BASE "seed: 1\nseed: 2\n", "run.yaml:5:1: seed", "duplicate");
    cfg_expect_fail("model: m.json\ndata:\n  train: t.txt\n  train: u.txt\n", "run.yaml:4:3: data.train", "duplicate");
    cfg_expect_fail(CFG_BASE "data:\n  val: v.txt\n", "run.yaml:4:1: data", "duplicate");
    /* the dotted spelling of a nested key is the same key */
    cfg_expect_fail(CFG_BASE "data.train: u.txt\n", "data.train", "duplicate");
}

Test(config, dotted_key_in_file) {
    RunConfig *c = cfg_new();
    cfg_expect_ok("model: m.json\ndata.train: t.txt\ndata.seq_len: 77\n", c);
    cr_expect_eq(c->data.seq_len, 77);
    free(c);
}

Test(config, sections_must_be_mappings) {
    cfg_expect_fail("model: m.json\ndata: t.txt\n", "run.yaml:2:7: data", "expected a mapping");
    cfg_expect_fail("model: m.json\ndata: [t.txt]\n", "data", "expected a mapping");
    cfg_expect_fail(CFG_BASE "seed: [1, 2]\n", "run.yaml:4:7: seed", "found a list");
    cfg_expect_fail(CFG_BASE "seed: {a: 1}\n", "seed", "found a mapping");
    cfg_expect_fail("model: m.json\ndata: {train: {x: 1}}\n", "data.train", "found a mapping");
}

Test(config, empty_section_is_allowed) {
    RunConfig *c = cfg_new();
    cfg_expect_ok(CFG_BASE "gradient_checkpointing_kwargs:\n", c);
    cr_expect_eq(c->every_n_layers, 1);
    free(c);
}

Test(config, yaml_shapes_refused) {
    cfg_expect_fail("", "run.yaml", "empty");
    cfg_expect_fail("# nothing\n\n", "run.yaml", "empty");
    cfg_expect_fail("---\n", "run.yaml", "empty");
    cfg_expect_fail("[1, 2]\n", "run.yaml:1:1", "top level");
    cfg_expect_fail("just a string\n", "run.yaml:1:1", "top level");
    cfg_expect_fail(CFG_BASE "---\nseed: 1\n", "run.yaml:4:1", "second");
    /* a second document however it is spelled; one document with explicit markers is fine */
    cfg_expect_fail(CFG_BASE "...\n---\nseed: 1\n", "run.yaml:5:1", "second");
    cfg_expect_fail(CFG_BASE "...\n%YAML 1.1\n---\nseed: 1\n", "run.yaml:5:1", "second");
    cfg_expect_fail("---\n" CFG_BASE "---\n", "run.yaml:5:1", "second");
    cfg_expect_fail(CFG_BASE "...\nseed: 1\n", "run.yaml:5:1", "YAML"); /* no --- after ... */
    RunConfig *c = cfg_new();
    cfg_expect_ok("---\n" CFG_BASE "...\n", c);
    free(c);
    cfg_expect_fail(CFG_BASE "? [a, b]\n: 1\n", "run.yaml:", "key name");
    cfg_expect_fail(CFG_BASE "seed: &s 1\n", "run.yaml:4:7", "anchor");
    cfg_expect_fail(CFG_BASE "seed: *s\n", "run.yaml:4:7", "alias");
    cfg_expect_fail(CFG_BASE "seed: !!int 1\n", "run.yaml:4:7", "tag");
    cfg_expect_fail("model: m.json\ndata:\n\ttrain: t.txt\n", "run.yaml:3:1", "tab");
    cfg_expect_fail(CFG_BASE "seed: \"unterminated\n", "run.yaml:", "YAML");
    cfg_expect_fail("model: m.json\n  data: x\n y\n", "run.yaml:2:", "YAML");
    cfg_expect_fail("{model: m.json\n", "run.yaml:", "YAML");
    cfg_expect_fail("model: \xff\xfe\n", "run.yaml:1:", "YAML");
    cfg_expect_fail("{}\n", "run.yaml", "model");
}

Test(config, nul_byte) {
    const char text[] = "model: m.json\ndata: {train: t.txt}\nseed: 1\0\n";
    char path[512];
    snprintf(path, sizeof path, "%s/run.yaml", cfg_dir);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, sizeof text - 1, f);
    fclose(f);
    RunConfig *c = cfg_new();
    GtError err = {0};
    cr_assert_eq(config_load(c, path, NULL, 0, &err), -1);
    cfg_assert_err(&err, "run.yaml:3:8", "NUL");
    free(c);
}

Test(config, files_that_are_not_configs) {
    RunConfig *c = cfg_new();
    GtError err = {0};
    char p[600];
    snprintf(p, sizeof p, "%s/missing.yaml", cfg_dir);
    cr_expect_eq(config_load(c, p, NULL, 0, &err), -1);
    cfg_assert_err(&err, "missing.yaml", "No such file");
    snprintf(p, sizeof p, "%s/adir.yaml", cfg_dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_expect_eq(config_load(c, p, NULL, 0, &err), -1);
    cfg_assert_err(&err, "adir.yaml", "directory");
    cr_expect_eq(config_load(c, "/dev/null", NULL, 0, &err), -1);
    cfg_assert_err(&err, "/dev/null", "character device");
    if (geteuid() != 0) { /* root reads anything */
        const char *q = cfg_write("locked.yaml", CFG_BASE);
        chmod(q, 0);
        cr_expect_eq(config_load(c, q, NULL, 0, &err), -1);
        cfg_assert_err(&err, "locked.yaml", "Permission");
    }
    free(c);
}

Test(config, too_big) {
    char path[512];
    snprintf(path, sizeof path, "%s/big.yaml", cfg_dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 50000; i++) fputs("# padding padding padding\n", f);
    fclose(f);
    RunConfig *c = cfg_new();
    GtError err = {0};
    cr_expect_eq(config_load(c, path, NULL, 0, &err), -1);
    cfg_assert_err(&err, "big.yaml", "1 MiB");
    free(c);
}

Test(config, deep_nesting) {
    size_t n = 100000;
    char *text = malloc(4 * n + 64);
    cr_assert_not_null(text);
    /* under a known key, and at the top level */
    strcpy(text, "model: m.json\ndata: {train: t.txt, val: ");
    size_t o = strlen(text);
    for (size_t i = 0; i < n; i++) text[o++] = '[';
    for (size_t i = 0; i < n; i++) text[o++] = ']';
    strcpy(text + o, "}\n");
    cfg_expect_fail(text, "run.yaml:2:", "data.val");
    o = 0;
    for (size_t i = 0; i < n; i++) memcpy(text + o, "{a: ", 4), o += 4;
    text[o] = '\0';
    cfg_expect_fail(text, "run.yaml:", NULL);
    free(text);
}

/* ---------------------------------------------------------------- required keys, contradictions */

Test(config, required_keys) {
    cfg_expect_fail("data: {train: t.txt}\n", "run.yaml: model", "required");
    cfg_expect_fail("model: m.json\n", "run.yaml: data.train", "required");
    cfg_expect_fail("model: ~\ndata: {train: t.txt}\n", "run.yaml:1:8: model", "required");
    cfg_expect_fail("model: m.json\ndata: {train: \"\"}\n", "data.train", "required");
}

Test(config, contradictions) {
    cfg_expect_fail(CFG_BASE "offload: true\n", "run.yaml:4:10: offload", "gradient_checkpointing");
    cfg_expect_fail(CFG_BASE "gradient_checkpointing_kwargs: {offload: true}\n", "offload", "gradient_checkpointing");
    cfg_expect_fail("model: m.json\ndata: {train: t.bin, format: tokens}\neval_steps: 10\n", "run.yaml:3:13: eval_steps",
                "data.val");
    cfg_expect_fail("model: m.json\ndata: {train: t.bin, format: jsonl}\nper_device_eval_batch_size: 4\n",
                "run.yaml:3:29: per_device_eval_batch_size", "data.val");
    RunConfig *c = cfg_new();
    /* fine: every_n_layers without recompute; text splits its own val; tokens with val; bf16 */
    cfg_expect_ok(CFG_BASE "every_n_layers: 3\n", c);
    cfg_expect_ok(CFG_BASE "eval_steps: 10\nper_device_eval_batch_size: 4\n", c);
    cfg_expect_ok("model: m.json\ndata: {train: t.bin, val: v.bin, format: tokens}\neval_steps: 10\n", c);
    cfg_expect_ok("model: m.json\ndata: {train: t.bin, format: tokens}\n", c);
    cfg_expect_ok(CFG_BASE "precision: bf16\ngradient_checkpointing: true\noffload: true\n", c);
    cr_expect(c->offload);
    free(c);
}

/* ---------------------------------------------------------------- paths */

Test(config, path_resolution) {
    char sub[512], text[1024], want[1024];
    snprintf(sub, sizeof sub, "%s/sub", cfg_dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/run.yaml", sub);
    snprintf(text, sizeof text,
             "model: ../models/m.json\ninit_from: /abs/w.safetensors\ndata:\n  train: t.txt\n  val: ./v.txt\n"
             "output_dir: out\nresume_from_checkpoint: ckpt/checkpoint-5\n");
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    RunConfig *c = cfg_new();
    GtError err = {0};
    cr_assert_eq(config_load(c, path, NULL, 0, &err), 0, "%s", err.msg);
    cr_expect_str_eq(c->config_dir, sub);
    snprintf(want, sizeof want, "%s/models/m.json", cfg_dir); /* absolute and clean: sub/../models */
    cr_expect_str_eq(c->model, want);
    cr_expect_str_eq(c->init_from, "/abs/w.safetensors");
    snprintf(want, sizeof want, "%s/t.txt", sub);
    cr_expect_str_eq(c->data.train, want);
    snprintf(want, sizeof want, "%s/v.txt", sub);
    cr_expect_str_eq(c->data.val, want);
    snprintf(want, sizeof want, "%s/out", sub);
    cr_expect_str_eq(c->output_dir, want);
    snprintf(want, sizeof want, "%s/ckpt/checkpoint-5", sub);
    cr_expect_str_eq(c->resume_from_checkpoint, want);

    /* "latest" is a word, not a path; --set paths are relative to the working directory */
    const char *sets[] = {"resume_from_checkpoint=latest", "data.train=d/t.txt", "output_dir=o"};
    cr_assert_eq(config_load(c, path, sets, 3, &err), 0, "%s", err.msg);
    cr_expect_str_eq(c->resume_from_checkpoint, "latest");
    cr_expect_str_eq(c->data.train, cfg_in_cwd("d/t.txt"));
    cr_expect_str_eq(c->output_dir, cfg_in_cwd("o"));
    free(c);
}

Test(config, path_in_cwd_config) {
    char old[1024];
    cr_assert_not_null(getcwd(old, sizeof old));
    cfg_write("run.yaml", CFG_BASE);
    cr_assert_eq(chdir(cfg_dir), 0);
    RunConfig *c = cfg_new();
    GtError err = {0};
    int rc = config_load(c, "run.yaml", NULL, 0, &err);
    cr_assert_eq(chdir(old), 0);
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_expect_str_eq(c->config_dir, ".");
    char want[1200];
    snprintf(want, sizeof want, "%s/m.json", cfg_dir); /* the working directory was cfg_dir */
    cr_expect_str_eq(c->model, want);
    snprintf(want, sizeof want, "%s/t.txt", cfg_dir);
    cr_expect_str_eq(c->data.train, want);
    free(c);
}

Test(config, path_too_long) {
    char text[3000];
    char longp[2000];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    snprintf(text, sizeof text, "model: %s\ndata: {train: t.txt}\n", longp);
    cfg_expect_fail(text, "run.yaml:1:8: model", "too long");
}

/* Paths that cannot serve their key are refused at cfg_load (so `gtrain plan` reports them and a run
 * creates nothing first): a directory key naming a file, any path running through a file. */
Test(config, paths_through_files) {
    cfg_write("afile", "I am a regular file\n");
    cfg_write("ctl\x01" "file", "so am I\n");
    char sub[512];
    snprintf(sub, sizeof sub, "%s/adir", cfg_dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cfg_write("adir/afile", "a file in a directory\n");
    cfg_expect_fail(CFG_BASE "output_dir: \"\"\n", "run.yaml:4:13: output_dir", "(required), found nothing");
    cfg_expect_fail(CFG_BASE "output_dir: ~\n", "run.yaml:4:13: output_dir", "(required), found nothing");
    cfg_expect_fail(CFG_BASE "output_dir: afile\n", "run.yaml:4:13: output_dir: expected a directory", "regular file");
    cfg_expect_fail(CFG_BASE "output_dir: afile/out\n", "run.yaml:4:13: output_dir", "afile/out, under the regular file");
    cfg_expect_fail(CFG_BASE "output_dir: adir/afile/x\n", "output_dir", "afile/x"); /* the file under an existing dir */
    cfg_expect_fail(CFG_BASE "output_dir: afile/\n", "output_dir", "under the regular file");
    cfg_expect_fail(CFG_BASE "output_dir: /dev/null\n", "output_dir: expected a directory", "special file /dev/null");
    cfg_expect_fail(CFG_BASE "resume_from_checkpoint: afile\n", "resume_from_checkpoint: expected a directory", "regular file");
    cfg_expect_fail("model: afile/m.json\ndata: {train: t.txt}\n", "run.yaml:1:8: model", "under the regular file");
    cfg_expect_fail("model: m.json\ndata: {train: afile/*.bin, format: tokens}\n", "data.train", "under the regular file");
    cfg_expect_fail(CFG_BASE "init_from: afile/model.safetensors\n", "init_from", "under the regular file");
    cfg_expect_fail("model: m.json\ndata: {train: t.txt, val: afile/v.txt}\n", "data.val", "under the regular file");
    cfg_expect_fail(CFG_BASE "dist_init_file: afile/id\n", "dist_init_file", "under the regular file");
    /* control bytes in a path do not break the one-line message */
    cfg_expect_fail(CFG_BASE "output_dir: \"ctl\\x01file/out\"\n", "output_dir", "ctl\\x01file/out");
    /* --set names the key too */
    RunConfig *c = cfg_new();
    GtError err;
    char set[600];
    snprintf(set, sizeof set, "output_dir=%s/afile/out", cfg_dir);
    const char *sets[] = {set};
    cr_expect_eq(cfg_load(c, &err, CFG_BASE, sets, 1), -1);
    cfg_assert_err(&err, "--set output_dir", "under the regular file");
    const char *empty[] = {"output_dir="};
    cr_expect_eq(cfg_load(c, &err, CFG_BASE, empty, 1), -1);
    cfg_assert_err(&err, "--set output_dir", "found nothing");
    /* fine: missing paths (created or reported later), directories, a file where a file is meant,
     * "latest", globs under a directory */
    cfg_expect_ok(CFG_BASE "output_dir: adir\n", c);
    cfg_expect_ok(CFG_BASE "output_dir: adir/new/deeper\n", c);
    cfg_expect_ok(CFG_BASE "output_dir: missing/out\nresume_from_checkpoint: latest\n", c);
    cfg_expect_ok(CFG_BASE "resume_from_checkpoint: adir\ninit_from: afile\n", c);
    cfg_expect_ok("model: afile\ndata: {train: adir/*.bin, format: tokens}\n", c);
    free(c);
}

/* data.val_fraction 0: no validation split (text without data.val); asking to evaluate is then a
 * contradiction, like eval_steps for tokens without data.val */
Test(config, val_fraction_zero_is_no_validation) {
    RunConfig *c = cfg_new();
    cfg_expect_ok("model: m.json\ndata: {train: t.txt, val_fraction: 0}\n", c);
    cr_expect_eq(c->data.val_fraction, 0.0);
    cfg_expect_ok("model: m.json\ndata: {train: t.txt, val: v.txt, val_fraction: 0}\neval_steps: 10\n", c);
    free(c);
    cfg_expect_fail("model: m.json\ndata: {train: t.txt, val_fraction: 0}\neval_steps: 10\n", "run.yaml:3:13: eval_steps",
                "data.val_fraction 0");
    cfg_expect_fail("model: m.json\ndata: {train: t.txt, val_fraction: 0}\nper_device_eval_batch_size: 2\n",
                "per_device_eval_batch_size", "data.val");
}

/* ---------------------------------------------------------------- --set */

Test(config, set_overrides_in_order) {
    RunConfig *c = cfg_new();
    GtError err;
    const char *sets[] = {"data.seq_len=128", "learning_rate=1e-3", "data.seq_len=256", "lr_scheduler_type=cosine",
                          "data.format=\"tokens\"", "data.val=v.bin", "memory_limit=512MiB"};
    cr_assert_eq(cfg_load(c, &err, "model: m.json\ndata:\n  train: t.txt\n  seq_len: 64\n", sets, 7), 0, "%s", err.msg);
    cr_expect_eq(c->data.seq_len, 256);
    cr_expect_eq(c->learning_rate, 1e-3);
    cr_expect_eq(c->lr_scheduler_type, LR_COSINE);
    cr_expect_eq(c->data.format, DATA_TOKENS);
    cr_expect_str_eq(c->data.val, cfg_in_cwd("v.bin"));
    cr_expect_eq(c->memory_limit, 512ull << 20);
    int i = cfg_idx("data.seq_len");
    cr_expect_eq(c->source[i], CFG_SRC_SET);
    cr_expect_eq(c->source_line[i], 0);
    cr_expect_eq(c->source[cfg_idx("model")], CFG_SRC_FILE);
    free(c);
}

Test(config, set_without_file) {
    RunConfig *c = cfg_new();
    GtError err = {0};
    const char *sets[] = {"model=m.json", "data.train=t.txt", "seed=7"};
    cr_assert_eq(config_load(c, NULL, sets, 3, &err), 0, "%s", err.msg);
    cr_expect_str_eq(c->model, cfg_in_cwd("m.json"));
    cr_expect_eq(c->seed, 7);
    cr_expect_str_eq(c->config_dir, ".");
    cr_expect_eq(config_load(c, NULL, NULL, 0, &err), -1);
    cfg_assert_err(&err, "model", "required");
    free(c);
}

Test(config, set_values_that_are_fine) {
    RunConfig *c = cfg_new();
    GtError err;
    const char *sets[] = {"output_dir=r\xc3\xa9sultats/\xe2\x82\xac", "learning_rate=1e-3 # a comment",
                          "seed=\n7\n", "data.val=a---b", "init_from='--- x'"};
    cr_assert_eq(cfg_load(c, &err, CFG_BASE, sets, 5), 0, "%s", err.msg);
    cr_expect_str_eq(c->output_dir, cfg_in_cwd("r\xc3\xa9sultats/\xe2\x82\xac"));
    cr_expect_eq(c->learning_rate, 1e-3);
    cr_expect_eq(c->seed, 7);
    cr_expect_str_eq(c->data.val, cfg_in_cwd("a---b"));
    cr_expect_str_eq(c->init_from, cfg_in_cwd("--- x"));
    free(c);
}

Test(config, set_errors) {
    RunConfig *c = cfg_new();
    GtError err;
    struct {
        const char *set, *n1, *n2;
    } cases[] = {
        {"data.seq_len=abc", "--set data.seq_len: expected an integer", "found abc"},
        {"data.seq_len", "--set data.seq_len", "key=value"},
        {"=5", "--set", "key=value"},
        {"seq_len=5", "--set seq_len: unknown key", "did you mean data.seq_len?"},
        {"gradient_acumulation_steps=2", "--set gradient_acumulation_steps", "did you mean gradient_accumulation_steps?"},
        {"data=5", "--set data", "section"},
        {"seed=[1, 2]", "--set seed", "found a list"},
        {"seed={a: 1}", "--set seed", "found a mapping"},
        {"seed=\"unterminated", "--set seed", "YAML"},
        {"seed=&a 1", "--set seed", "anchor"},
        {"seed=", "--set seed", "found nothing"},
        {"learning_rate=.inf", "--set learning_rate", "finite"},
        {"offload=true", "--set offload", "gradient_checkpointing"},
        {"gradient_checkpointing=yes", "--set gradient_checkpointing", "true or false"},
        /* one value in one implicit document: nothing after it, no markers, valid UTF-8 */
        {"learning_rate=1e-3\n---\nfoo", "--set learning_rate", "several YAML documents"},
        {"learning_rate=1e-3\n---\n1e-4", "--set learning_rate", "several YAML documents"},
        {"output_dir=out\n--- x", "--set output_dir", "several YAML documents"},
        {"learning_rate=--- 1e-3", "--set learning_rate", "document marker"},
        {"seed=---\n1", "--set seed", "document marker"},
        {"seed=%YAML 1.1\n--- 1", "--set seed", "directive"},
        {"seed=1\n...", "--set seed", "document end marker"},
        {"seed=1\n...\n", "--set seed", "document end marker"},
        {"output_dir=\xff\xfe", "--set output_dir", "UTF-8"}, /* libyaml alone reads this as UTF-16 */
        {"output_dir=out\xc3", "--set output_dir", "UTF-8"},  /* truncated sequence */
        {"data.train=\xc0\xaf", "--set data.train", "UTF-8"}, /* overlong "/" */
        {"data.train=\xed\xa0\x80", "--set data.train", "UTF-8"}, /* a surrogate */
        {"data.train=\xf4\x90\x80\x80", "--set data.train", "UTF-8"}, /* above U+10FFFF */
        {"se\xff" "ed=1", "--set se\\xffed", "UTF-8"}, /* the key, shown escaped */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *sets[] = {cases[k].set};
        int rc = cfg_load(c, &err, CFG_BASE, sets, 1);
        cr_expect_eq(rc, -1, "%s accepted", cases[k].set);
        if (rc) cfg_assert_err(&err, cases[k].n1, cases[k].n2);
    }
    free(c);
}

/* Paths are stored absolute and clean; a ".." after a symbolic link keeps the kernel's meaning. */
Test(config, paths_are_absolute_and_clean_and_dotdot_respects_links) {
    char p[1200], want[1200], d[1100];
    snprintf(d, sizeof d, "%s/real/deep", cfg_dir);
    snprintf(p, sizeof p, "%s/real", cfg_dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_assert_eq(mkdir(d, 0700), 0);
    snprintf(p, sizeof p, "%s/link", cfg_dir);
    cr_assert_eq(symlink(d, p), 0); /* link -> real/deep, so link/.. is real, not cfg_dir */
    snprintf(p, sizeof p, "%s//./a/../b/", cfg_dir);
    cr_assert_eq(config_clean_path(p, sizeof p), 0);
    snprintf(want, sizeof want, "%s/b/", cfg_dir);
    cr_expect_str_eq(p, want);
    snprintf(p, sizeof p, "%s/link/../x", cfg_dir); /* x missing: lexical */
    cr_assert_eq(config_clean_path(p, sizeof p), 0);
    snprintf(want, sizeof want, "%s/x", cfg_dir);
    cr_expect_str_eq(p, want);
    snprintf(p, sizeof p, "%s/link/..", cfg_dir); /* exists, and names real/: kept as written */
    cr_assert_eq(config_clean_path(p, sizeof p), 0);
    snprintf(want, sizeof want, "%s/link/..", cfg_dir);
    cr_expect_str_eq(p, want);
    char old[1024];
    cr_assert_not_null(getcwd(old, sizeof old));
    cr_assert_eq(chdir(cfg_dir), 0);
    snprintf(p, sizeof p, "./q/./r/..//s");
    int rc = config_clean_path(p, sizeof p);
    cr_assert_eq(chdir(old), 0);
    cr_assert_eq(rc, 0);
    snprintf(want, sizeof want, "%s/q/s", cfg_dir);
    cr_expect_str_eq(p, want);
}
