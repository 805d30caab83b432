/* fuzz_config.c - libFuzzer target: the YAML run config reader (config_load). */
#include <stdlib.h>

#include "config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) return 0;
    RunConfig *cfg = calloc(1, sizeof *cfg);
    if (cfg) {
        GtError err = {0};
        const char *sets[] = {"seed=3"};
        if (config_load(cfg, path, sets, 1, &err) != 0 && (err.code == 0 || !err.msg[0])) abort();
        free(cfg);
    }
    close(fd);
    return 0;
}
