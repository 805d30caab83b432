/* fuzz_config.c - libFuzzer target: the YAML run config reader (config_load), file and --set.
 * An input with a NUL byte is "--set text\0file text" (the --set value is fuzzed too: documents,
 * markers, UTF-8); without one it is the file alone, with a fixed --set. A config that loads is
 * written back as resolved_config.yaml text, which must load again to the same values; its lora:
 * section's values then go through the adapter's checks (lora_check_config), whose refusals are
 * one line too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_util.h"
#include "lora.h"

/* text with each line's trailing "  # source" comment cut (the sources differ on a reload) */
static void strip_sources(char *t) {
    char *o = t;
    for (char *line = t; *line;) {
        char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        size_t keep = n;
        for (size_t i = 0; i + 4 <= n; i++)
            if (!memcmp(line + i, "  # ", 4)) keep = i; /* the last one: values are quoted, sources never hold it */
        memmove(o, line, keep);
        o += keep;
        if (eol) *o++ = '\n';
        line += n + (eol ? 1 : 0);
    }
    *o = '\0';
}

/* resolved_config.yaml of cfg loads back (no --set) to the same values */
static void round_trip(const RunConfig *cfg) {
    size_t len1, len2;
    char *t1 = config_resolved_text(cfg, &len1);
    char path[64];
    int fd = fuzz_memfd((const uint8_t *)t1, len1, path, sizeof path);
    if (fd < 0) {
        free(t1);
        return;
    }
    RunConfig *again = calloc(1, sizeof *again);
    if (again) {
        GtError err = {0};
        if (config_load(again, path, NULL, 0, &err) != 0) { /* a resolved config that does not load */
            fprintf(stderr, "resolved config refused: %s\n%s\n", err.msg, t1);
            abort();
        }
        char *t2 = config_resolved_text(again, &len2);
        strip_sources(t1);
        strip_sources(t2);
        if (strcmp(t1, t2) != 0) { /* a value that reads back differently */
            fprintf(stderr, "resolved config reads back differently:\n%s\n---\n%s\n", t1, t2);
            abort();
        }
        free(t2);
        free(again);
    }
    close(fd);
    free(t1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    char *set = NULL;
    if (nul) {
        set = strndup((const char *)data, (size_t)(nul - data));
        if (!set) return 0;
        size -= (size_t)(nul + 1 - data);
        data = nul + 1;
    }
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) {
        free(set);
        return 0;
    }
    RunConfig *cfg = calloc(1, sizeof *cfg);
    if (cfg) {
        GtError err = {0};
        const char *sets[] = {set ? set : "seed=3"};
        /* every refusal has a code and a one-line message */
        int rc = config_load(cfg, path, sets, 1, &err);
        if (rc != 0 && (err.code == 0 || !err.msg[0] || strchr(err.msg, '\n'))) abort();
        if (rc == 0) round_trip(cfg);
        if (rc == 0 && lora_check_config(cfg, &err) != 0 && (err.code != GT_EXIT_BAD_INPUT || strchr(err.msg, '\n')))
            abort();
        free(cfg);
    }
    close(fd);
    free(set);
    return 0;
}
