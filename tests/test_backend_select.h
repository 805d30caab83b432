/* test_backend_select.h - the backend the op tests run against.
 *
 * GTRAIN_TEST_DEVICE=cpu (default) or cuda. When cuda is asked for but this build has no CUDA
 * backend, or no GPU is visible, the calling test is skipped (cr_skip_test), never failed.
 * Threads: GTRAIN_TEST_THREADS (default 0 = the OpenMP default). */
#ifndef GT_TEST_BACKEND_SELECT_H
#define GT_TEST_BACKEND_SELECT_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* "cpu" or "cuda": the device the tests were asked to use */
static inline const char *test_device_name(void) {
    const char *d = getenv("GTRAIN_TEST_DEVICE");
    return (d && *d) ? d : "cpu";
}

/* GTRAIN_TEST_CUDASIM=1 (set by make test-cudasim): the CUDA backend is the CPU simulator, where a
 * step is ~10x slower and some things (forked NCCL ranks, host memory limits bounding the device)
 * are not modelled; long tests run shorter and those few skip, each saying why */
static inline bool test_on_cudasim(void) {
    const char *e = getenv("GTRAIN_TEST_CUDASIM");
    return e && *e && strcmp(e, "0") != 0;
}

/* $GTRAIN_BIN, the gtrain under test (NULL when unset). Also exports GTRAIN_TEST_NAME=suite::test
 * for the processes the test starts, so that the CUDA simulator can log which tests ran through
 * it (GTCSIM_USAGE_LOG, scripts/test-cudasim.sh). */
static inline const char *test_gtrain_bin(void) {
    if (criterion_current_test) {
        char name[256];
        snprintf(name, sizeof name, "%s::%s", criterion_current_test->category, criterion_current_test->name);
        setenv("GTRAIN_TEST_NAME", name, 1);
    }
    return getenv("GTRAIN_BIN");
}

static inline Backend *test_backend_open(void) {
    const char *dev = test_device_name();
    GtError err = {0};
    Backend *b = NULL;
    if (strcmp(dev, "cpu") == 0) {
        const char *th = getenv("GTRAIN_TEST_THREADS");
        int nt = th && *th ? atoi(th) : 0;
        if (cpu_backend_create(&b, nt, &err) != 0)
            cr_assert_fail("cpu backend failed to open: %s", err.msg);
    } else if (strcmp(dev, "cuda") == 0) {
#ifdef GT_HAVE_CUDA
        if (backend_gpu_count() <= 0) cr_skip_test("GTRAIN_TEST_DEVICE=cuda but no GPU is visible");
        if (backend_open_cuda(&b, 0, &err) != 0)
            cr_assert_fail("cuda backend failed to open: %s", err.msg);
#else
        cr_skip_test("GTRAIN_TEST_DEVICE=cuda but this build has no CUDA backend (built: %s)",
                     backend_built_list());
#endif
    } else {
        cr_assert_fail("GTRAIN_TEST_DEVICE: expected cpu or cuda, found \"%s\"", dev);
    }
    cr_assert_not_null(b);
    return b;
}

#endif
