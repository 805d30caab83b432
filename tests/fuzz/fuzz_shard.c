/* fuzz_shard.c - libFuzzer target: the llm.c token shard reader (data_open_memory, tokens: GPT-2's
 * uint16 layout and Llama-3's uint32 one, seeds u32_* for the latter), then training and eval rows
 * drawn from whatever it accepted. The first input byte picks seq_len, vocab and split; the rest
 * is the shard. */
#include <stdlib.h>

#include "data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int seq_len = 1 + (data[0] & 15);
    const int vocab = (data[0] & 16) ? 50304 : 256;
    const int split = (data[0] >> 5) % 3;
    DataSource *d = NULL;
    GtError err = {0};
    if (data_open_memory(&d, "fuzz.bin", data + 1, size - 1, DATA_TOKENS, false, seq_len, vocab, split, 0.25, &err) == 0) {
        long nw = data_num_eval_windows(d);
        fuzz_check_rows(d, seq_len, vocab, nw > 1 ? nw - 2 : 0);
    } else if (d != NULL || err.code == 0 || !err.msg[0]) {
        abort();
    }
    return 0;
}
