/* fuzz_report.c - libFuzzer target: metrics.jsonl -> report.svg (report_svg on the input). The
 * metrics file of a shared run directory is untrusted: whatever it holds, the result is an SVG
 * whose numbers are all finite and bounded (no "nan"/"inf", no runaway digit strings), or a
 * one-line refusal with code 2. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "report.h"

/* report.c names the memory categories through backend.c, which links the CPU backend; the fuzz
 * library leaves backend_cpu.c out (see mk/fuzz.mk) and no report path creates a backend. */
int cpu_backend_create(Backend **out, int num_threads, GtError *err) {
    (void)out, (void)num_threads;
    return gt_error(err, GT_EXIT_FAILURE, "fuzz_report: no backend");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *svg = NULL;
    size_t len = 0;
    GtError err = {0};
    if (report_svg("fuzz", (const char *)data, size, "fuzz/metrics.jsonl", &svg, &len, &err) != 0) {
        if (svg || err.code != GT_EXIT_BAD_INPUT || !err.msg[0] || strchr(err.msg, '\n')) abort();
        return 0;
    }
    if (!svg || strlen(svg) != len || len < 14 || strncmp(svg, "<svg", 4) != 0 || strcmp(svg + len - 7, "</svg>\n") != 0)
        abort();
    if (strstr(svg, "nan") || strstr(svg, "inf") || strstr(svg, "NaN") || strstr(svg, "Inf")) abort();
    /* values are bounded by REPORT_MAX_ABS (19 digits), coordinates by the page: a longer run of
     * digits is a number that escaped the bounds */
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        run = (svg[i] >= '0' && svg[i] <= '9') ? run + 1 : 0;
        if (run > 24) abort();
    }
    free(svg);
    return 0;
}
