/* fuzz_peft_config.c - libFuzzer target: the PEFT adapter_config.json reader (peft_config_parse).
 * The input is copied into an exact-size buffer without a terminating NUL, so any read past len is
 * caught; an accepted config must be usable (r, alpha, dropout in range, targets resolvable or
 * refused with a message) and must write text that reads back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "peft.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    PeftConfig cfg, back;
    GtError err = {0};
    if (peft_config_parse(&cfg, buf, size, "fuzz.json", &err) == 0) {
        if (cfg.r < 1 || cfg.r > PEFT_MAX_R || !(cfg.lora_alpha > 0) || !(cfg.lora_dropout >= 0 && cfg.lora_dropout < 1) ||
            cfg.n_targets < 1 || cfg.n_targets > PEFT_MAX_TARGETS || !isfinite(peft_scaling(&cfg)))
            abort();
        for (int a = 0; a < ARCH_COUNT; a++) {
            bool mask[PEFT_MODULE_COUNT];
            GtError e2 = {0};
            if (peft_config_targets(&cfg, (ModelArch)a, mask, "fuzz.json", &e2) != 0 && (e2.code == 0 || !e2.msg[0]))
                abort();
        }
        char *text = peft_config_to_json(&cfg);
        if (peft_config_parse(&back, text, strlen(text), "back.json", &err) != 0 || back.r != cfg.r ||
            back.lora_alpha != cfg.lora_alpha || back.n_targets != cfg.n_targets)
            abort(); /* what we write must read back */
        free(text);
    } else if (err.code != GT_EXIT_BAD_INPUT || !err.msg[0] || strchr(err.msg, '\n')) {
        abort();
    }
    free(buf);
    return 0;
}
