/* test_config_source.c - where a setting's value came from, and who checks what it means: the run
 * config reads the lora: section as text and values (it knows no adapter), config_key_source says
 * where each value was given (file:line:col, --set, default), and the adapter's checks
 * (lora_check_config) refuse what PEFT would not take, named at the value's place. The expected
 * places are found in the YAML text itself here; the message forms are gt_key_error's contract. */
#include <criterion/criterion.h>

#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lora.h"

static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_config_source"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(config_source, .init = scratch_init, .fini = scratch_fini);

/* 1-based line and column of the first byte of needle's value (after "needle: ") in text */
static void place_of(const char *text, const char *needle, int *line, int *col) {
    const char *p = strstr(text, needle);
    cr_assert_not_null(p, "%s not in the text", needle);
    p += strlen(needle) + 2; /* ": " */
    *line = 1;
    const char *bol = text;
    for (const char *q = text; q < p; q++)
        if (*q == '\n') ++*line, bol = q + 1;
    *col = (int)(p - bol) + 1;
}

static RunConfig *load(const char *text, const char *const *sets, int n_sets, const char **path_out) {
    const char *path = test_join(g_dir, "run.yaml");
    test_write_file(path, text, strlen(text));
    RunConfig *cfg = calloc(1, sizeof *cfg);
    cr_assert_not_null(cfg);
    GtError err = {0};
    cr_assert_eq(config_load(cfg, path, sets, n_sets, &err), 0, "refused: %s", err.msg);
    *path_out = path;
    return cfg;
}

Test(config_source, lora_values_are_text_to_the_config_and_refused_by_the_adapter_at_their_place) {
    const char *text = "model: m.json\ndata:\n  train: t.txt\nlora:\n  r: 4\n"
                       "  target_modules: [c_attn, foo_proj]\n  init_lora_weights: pissa_niter_x\n";
    const char *path;
    RunConfig *cfg = load(text, NULL, 0, &path); /* the config takes both: their meaning is the adapter's */
    cr_expect(cfg->lora.enabled);
    cr_expect_str_eq(cfg->lora.init_lora_weights, "pissa_niter_x");
    int line, col, l2, c2;
    const char *file;
    place_of(text, "init_lora_weights", &line, &col);
    cr_expect_eq(config_key_source(cfg, "lora.init_lora_weights", &file, &l2, &c2), CFG_SRC_FILE);
    cr_expect_str_eq(file, path);
    cr_expect_eq(l2, line);
    cr_expect_eq(c2, col);
    GtError err = {0};
    cr_assert_eq(lora_check_config(cfg, &err), -1);
    char want[1200];
    snprintf(want, sizeof want, "%s:%d:%d: lora.init_lora_weights: expected true, false, gaussian, pissa or pissa_niter_N",
             path, line, col);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_expect(strncmp(err.msg, want, strlen(want)) == 0, "expected %s..., found %s", want, err.msg);
    free(cfg);

    /* init fixed by --set: the unknown module is next, at the list's place in the file */
    const char *sets[] = {"lora.init_lora_weights=gaussian"};
    cfg = load(text, sets, 1, &path);
    cr_expect_eq(config_key_source(cfg, "lora.init_lora_weights", &file, &l2, &c2), CFG_SRC_SET);
    cr_expect_null(file);
    place_of(text, "target_modules", &line, &col);
    memset(&err, 0, sizeof err);
    cr_assert_eq(lora_check_config(cfg, &err), -1);
    snprintf(want, sizeof want, "%s:%d:%d: lora.target_modules: expected module names of ", path, line, col);
    cr_expect(strncmp(err.msg, want, strlen(want)) == 0, "expected %s..., found %s", want, err.msg);
    cr_expect(strstr(err.msg, "found \"foo_proj\" in \"c_attn,foo_proj\""), "%s", err.msg);
    free(cfg);

    /* a default value has no place in the file */
    const char *ok[] = {"lora.target_modules=c_attn", "lora.init_lora_weights=true"};
    cfg = load(text, ok, 2, &path);
    memset(&err, 0, sizeof err);
    cr_expect_eq(lora_check_config(cfg, &err), 0, "%s", err.msg);
    cr_expect_eq(config_key_source(cfg, "lora.lora_dropout", &file, &l2, &c2), CFG_SRC_DEFAULT);
    cr_expect_str_eq(file, path);
    cr_expect_eq(l2, 0);
    cr_expect_eq(c2, 0);
    free(cfg);
}

Test(config_source, key_error_forms) {
    GtError err = {0};
    cr_expect_eq(gt_key_error(&err, "run.yaml", 3, 7, "lora.r", "expected x, found y"), -1);
    cr_expect_str_eq(err.msg, "run.yaml:3:7: lora.r: expected x, found y");
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    gt_key_error(&err, "run.yaml", 3, 0, "lora.r", "m");
    cr_expect_str_eq(err.msg, "run.yaml:3: lora.r: m");
    gt_key_error(&err, "run.yaml", 0, 0, "lora.r", "m");
    cr_expect_str_eq(err.msg, "run.yaml: lora.r: m (the default)");
    gt_key_error(&err, NULL, 0, 0, "lora.r", "m");
    cr_expect_str_eq(err.msg, "--set lora.r: m");
}
