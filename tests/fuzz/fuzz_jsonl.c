/* fuzz_jsonl.c - libFuzzer target: the SFT jsonl reader (data_open_memory, jsonl), then training
 * and eval rows drawn from whatever it accepted. The first input byte picks seq_len, vocab, split
 * and packing; the rest is the file. */
#include <stdlib.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int seq_len = 1 + (data[0] & 15);
    const int vocab = (data[0] & 16) ? 50304 : 256;
    const int split = (data[0] >> 5) % 3;
    const bool packing = (data[0] >> 5) / 3 == 1; /* top bits 0..7: every (split, packing) pair */
    DataSource *d = NULL;
    GtError err = {0};
    if (data_open_memory(&d, "fuzz.jsonl", data + 1, size - 1, DATA_JSONL, packing, seq_len, vocab, split, 0.5, &err) == 0) {
        int rows = 3;
        int *tok = malloc((size_t)rows * seq_len * sizeof(int)), *tgt = malloc((size_t)rows * seq_len * sizeof(int));
        if (tok && tgt) {
            data_fill_train(d, 99, 7, 6, 2, rows, tok, tgt);
            data_fill_eval(d, 0, rows, tok, tgt);
            for (int i = 0; i < rows * seq_len; i++)
                if (tok[i] < 0 || tok[i] >= vocab || (tgt[i] != -100 && (tgt[i] < 0 || tgt[i] >= vocab))) abort();
        }
        free(tok);
        free(tgt);
        data_close(d);
    } else if (d != NULL || err.code == 0 || !err.msg[0]) {
        abort();
    }
    return 0;
}
