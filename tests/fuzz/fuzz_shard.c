/* fuzz_shard.c - libFuzzer target: the llm.c token shard reader (data_open_memory, tokens), then
 * training and eval rows drawn from whatever it accepted. The first input byte picks seq_len,
 * vocab and split; the rest is the shard. */
#include <stdlib.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int seq_len = 1 + (data[0] & 15);
    const int vocab = (data[0] & 16) ? 50304 : 256;
    const int split = (data[0] >> 5) % 3;
    DataSource *d = NULL;
    GtError err = {0};
    if (data_open_memory(&d, "fuzz.bin", data + 1, size - 1, DATA_TOKENS, false, seq_len, vocab, split, 0.25, &err) == 0) {
        int rows = 3;
        int *tok = malloc((size_t)rows * seq_len * sizeof(int)), *tgt = malloc((size_t)rows * seq_len * sizeof(int));
        if (tok && tgt) {
            data_fill_train(d, 1234, 5, 4, 1, rows, tok, tgt);
            long nw = data_num_eval_windows(d);
            data_fill_eval(d, nw > 1 ? nw - 2 : 0, rows, tok, tgt);
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
