/* config_fixture.h - what the run-config tests share (test_config.c, test_config_input.c; suite
 * config): the suite's scratch directory, a config written there and loaded with --set values, and
 * the checks on config_load's answer (an error is one line, code 2, and names what it must). */
#ifndef GT_TEST_CONFIG_FIXTURE_H
#define GT_TEST_CONFIG_FIXTURE_H

#include "config.h"

/* the least a config needs */
#define CFG_BASE "model: m.json\ndata:\n  train: t.txt\n"

/* the suite's scratch directory, made by cfg_scratch_init (suite config's .init) and removed with
 * everything in it by cfg_scratch_fini (.fini) */
extern char cfg_dir[256];
void cfg_scratch_init(void);
void cfg_scratch_fini(void);

/* text written to cfg_dir/name; the path (one static buffer) */
const char *cfg_write(const char *name, const char *text);
/* name as config_load stores a path relative to the working directory: absolute (config_clean_path) */
const char *cfg_in_cwd(const char *name);
/* Load text as run.yaml with sets; returns config_load's result. cfg is heap (big struct). */
int cfg_load(RunConfig *cfg, GtError *err, const char *text, const char *const *sets, int n_sets);
/* a zeroed RunConfig on the heap (the caller frees it) */
RunConfig *cfg_new(void);
/* The error is one line, code 2, and contains each needle (NULL: none). */
void cfg_assert_err(const GtError *err, const char *n1, const char *n2);
/* text as run.yaml is refused with such an error */
void cfg_expect_fail(const char *text, const char *n1, const char *n2);
/* text as run.yaml loads into cfg */
void cfg_expect_ok(const char *text, RunConfig *cfg);
/* the schema index of key (the test fails when there is none) */
int cfg_idx(const char *key);

#endif
