/* fuzz_model_json.c - libFuzzer target: the model JSON reader (model_desc_parse). The input is
 * copied into an exact-size buffer without a terminating NUL, so any read past len is caught. */
#include <stdlib.h>
#include <string.h>

#include "model_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ModelDesc desc;
    GtError err = {0};
    if (model_desc_parse(&desc, buf, size, "fuzz.json", &err) == 0) {
        if (desc.n_layer < 1 || desc.n_head < 1 || desc.n_embd < 1 || desc.vocab_size < 1 || desc.n_positions < 1)
            abort(); /* accepted a description that cannot be a model */
        (void)model_desc_num_params(&desc);
    } else if (err.code == 0 || !err.msg[0]) {
        abort();
    }
    free(buf);
    return 0;
}
