/* config_fixture.c - see config_fixture.h. */
#include "config_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

char cfg_dir[256];

void cfg_scratch_init(void) { test_scratch_make(cfg_dir, sizeof cfg_dir, "gt_test_config"); }
void cfg_scratch_fini(void) { test_scratch_remove(cfg_dir); }

const char *cfg_write(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", cfg_dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return path;
}

const char *cfg_in_cwd(const char *name) {
    static char buf[4][1200];
    static int k;
    char cwd[1024];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", cwd, name);
    return buf[k];
}

int cfg_load(RunConfig *cfg, GtError *err, const char *text, const char *const *sets, int n_sets) {
    const char *path = cfg_write("run.yaml", text);
    memset(err, 0, sizeof *err);
    return config_load(cfg, path, sets, n_sets, err);
}

RunConfig *cfg_new(void) {
    RunConfig *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    return c;
}

void cfg_assert_err(const GtError *err, const char *n1, const char *n2) {
    cr_assert_eq(err->code, GT_EXIT_BAD_INPUT, "code %d for: %s", err->code, err->msg);
    cr_assert_null(strchr(err->msg, '\n'), "multi-line: %s", err->msg);
    if (n1) cr_assert(strstr(err->msg, n1), "'%s' not in: %s", n1, err->msg);
    if (n2) cr_assert(strstr(err->msg, n2), "'%s' not in: %s", n2, err->msg);
}

void cfg_expect_fail(const char *text, const char *n1, const char *n2) {
    RunConfig *cfg = cfg_new();
    GtError err;
    int rc = cfg_load(cfg, &err, text, NULL, 0);
    cr_assert_eq(rc, -1, "accepted: %s", text);
    cfg_assert_err(&err, n1, n2);
    free(cfg);
}

void cfg_expect_ok(const char *text, RunConfig *cfg) {
    GtError err;
    int rc = cfg_load(cfg, &err, text, NULL, 0);
    cr_assert_eq(rc, 0, "rejected (%s): %s", err.msg, text);
}

int cfg_idx(const char *key) {
    int i = config_schema_index(key);
    cr_assert_geq(i, 0, "no key %s", key);
    return i;
}
