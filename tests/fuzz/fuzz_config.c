/* fuzz_config.c - libFuzzer target: the YAML run config reader (config_load), file and --set.
 * An input with a NUL byte is "--set text\0file text" (the --set value is fuzzed too: documents,
 * markers, UTF-8); without one it is the file alone, with a fixed --set. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_util.h"

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
        if (config_load(cfg, path, sets, 1, &err) != 0 && (err.code == 0 || !err.msg[0] || strchr(err.msg, '\n')))
            abort();
        free(cfg);
    }
    close(fd);
    free(set);
    return 0;
}
