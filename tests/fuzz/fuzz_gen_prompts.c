/* fuzz_gen_prompts.c - libFuzzer target: the data readers' generation-prompt mode (gtrain eval's
 * prompts and gold answers: DataText.gen_prompts), byte-level, on jsonl or a JSON array. The first
 * input byte picks the format, seq_len (the longest prompt allowed), a template or the prompt column,
 * and a mapped answer column or "answer"; the rest is the file. Whatever is accepted must be prompts of
 * 1..seq_len tokens below the vocabulary, each with its answer text; a refusal one line with a code. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const DataFormat fmt = (data[0] & 1) ? DATA_JSON : DATA_JSONL;
    const int seq_len = 1 + ((data[0] >> 1) & 31);
    DataText text = {.keep_text = true, .gen_prompts = true,
                     .prompt_template = (data[0] & 64) ? "Q: {q}\nA:" : "",
                     .col_answer = (data[0] & 128) ? "response" : ""};
    DataSource *d = NULL;
    GtError err = {0};
    if (data_open_memory_text(&d, "fuzz.jsonl", data + 1, size - 1, fmt, false, seq_len, 256, DATA_SPLIT_ALL, 0.0,
                              &text, &err) == 0) {
        const uint64_t n = data_num_examples(d);
        if (n == 0) abort();
        for (uint64_t e = 0; e < n; e++) {
            const int32_t *tok;
            const uint8_t *mask;
            int32_t len = data_example(d, e, &tok, &mask);
            size_t alen;
            if (len < 1 || len > seq_len || !data_example_text(d, e, &alen)) abort();
            for (int32_t k = 0; k < len; k++)
                if (tok[k] < 0 || tok[k] >= 256) abort();
        }
        data_close(d);
    } else if (d != NULL || (err.code != GT_EXIT_BAD_INPUT && err.code != GT_EXIT_FAILURE) || !err.msg[0] ||
               strchr(err.msg, '\n')) {
        abort();
    }
    return 0;
}
