/* fuzz_json_array.c - libFuzzer target: the JSON-array data reader (data_open_memory_text, json:
 * one array of objects, each element through the record converter), then training and eval rows
 * drawn from whatever it accepted. The first input byte picks seq_len, vocab, split, packing and
 * a column mapping (none, or prompt/completion = q/r, or text = t); the rest is the file. A
 * refusal must be one line with a code. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int seq_len = 1 + (data[0] & 7);
    const int vocab = (data[0] & 8) ? 50304 : 256;
    const int split = (data[0] >> 4) % 3;
    const bool packing = (data[0] >> 6) & 1;
    const int mapping = (data[0] >> 7) ? 1 + ((data[0] >> 4) & 1) : 0;
    DataText text = {.eos_id = -1};
    if (mapping == 1) text.col_prompt = "q", text.col_completion = "r";
    if (mapping == 2) text.col_text = "t";
    DataSource *d = NULL;
    GtError err = {0};
    if (data_open_memory_text(&d, "fuzz.json", data + 1, size - 1, DATA_JSON, packing, seq_len, vocab, split, 0.5,
                              &text, &err) == 0) {
        fuzz_check_rows(d, seq_len, vocab, 0);
    } else if (d != NULL || (err.code != GT_EXIT_BAD_INPUT && err.code != GT_EXIT_FAILURE) || !err.msg[0] ||
               strchr(err.msg, '\n')) {
        abort();
    }
    return 0;
}
