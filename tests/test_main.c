/* test_main.c - the test binary's main: Criterion's own, plus GTRAIN_TEST_LEAVE_OUT=FILE, the tests
 * a flavour of the suite leaves out (scripts/test-flavours.sh writes the file: one entry a line, a
 * SUITE or a SUITE/TEST glob; # starts a comment). A --filter pattern would do the same, but
 * Criterion's extended globs fail past about 3000 characters (an assertion, or a crash), and the
 * flavours' lists are longer. Left-out tests are disabled: Criterion lists them as skipped without a
 * reason, which scripts/tap-summary.sh does not count (as for --filter). An entry that matches no
 * test is an error (exit 2): a renamed test must not silently come back into a flavour. */
#include <criterion/criterion.h>
#include <criterion/internal/ordered-set.h>

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* disables the tests an entry matches; returns how many it matched */
static int leave_out(struct criterion_test_set *set, const char *entry) {
    char pat[512];
    if (strchr(entry, '/')) snprintf(pat, sizeof pat, "%s", entry);
    else snprintf(pat, sizeof pat, "%s/*", entry);
    int hits = 0;
    FOREACH_SET(struct criterion_suite_set *s, set->suites) {
        FOREACH_SET(struct criterion_test *t, s->tests) { /* the set holds copies; data is the test's own */
            char name[512];
            snprintf(name, sizeof name, "%s/%s", t->category, t->name);
            if (fnmatch(pat, name, 0) == 0 && t->data) {
                t->data->disabled = true;
                hits++;
            }
        }
    }
    return hits;
}

/* 0, or 2 after one line on stderr */
static int apply_leave_out(struct criterion_test_set *set, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "GTRAIN_TEST_LEAVE_OUT: %s: cannot read it\n", path);
        return 2;
    }
    char line[512];
    int no = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        no++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *e = line + strspn(line, " \t'\"");
        e[strcspn(e, " \t\r\n'\"")] = '\0';
        if (!*e) continue;
        if (leave_out(set, e) == 0) {
            fprintf(stderr, "GTRAIN_TEST_LEAVE_OUT: %s:%d: expected a suite or suite/test glob of this binary, found %s "
                            "(matches no test: renamed or removed?)\n", path, no, e);
            rc = 2;
        }
    }
    fclose(f);
    return rc;
}

int main(int argc, char *argv[]) {
    struct criterion_test_set *tests = criterion_initialize();
    const char *leave = getenv("GTRAIN_TEST_LEAVE_OUT");
    int result = 0;
    if (leave && *leave) result = apply_leave_out(tests, leave);
    if (result == 0 && criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
