/* fuzz_jsonl.c - libFuzzer target: the SFT jsonl reader (data_open_memory, jsonl), then training
 * and eval rows drawn from whatever it accepted. The first input byte picks seq_len, vocab, split
 * and packing; the rest is the file. The seeds hold what the reader must read exactly: \u0000 and
 * every escape, raw and invalid UTF-8, duplicate keys (also spelled with escapes, or inside a
 * NUL-holding key), nested objects, a BOM, splits or packed streams without a completion token.
 * A refusal must be one line with a code. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int seq_len = 1 + (data[0] & 15);
    const int vocab = (data[0] & 16) ? 50304 : 256;
    const int split = (data[0] >> 5) % 3;
    const bool packing = (data[0] >> 5) / 3 == 1; /* top bits 0..7: every (split, packing) pair */
    DataSource *d = NULL;
    GtError err = {0};
    if (data_open_memory(&d, "fuzz.jsonl", data + 1, size - 1, DATA_JSONL, packing, seq_len, vocab, split, 0.5, &err) == 0) {
        fuzz_check_rows(d, seq_len, vocab, 0);
    } else if (d != NULL || (err.code != GT_EXIT_BAD_INPUT && err.code != GT_EXIT_FAILURE) || !err.msg[0] ||
               strchr(err.msg, '\n')) {
        abort();
    }
    return 0;
}
