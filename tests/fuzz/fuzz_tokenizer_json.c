/* fuzz_tokenizer_json.c - libFuzzer target: the tokenizer.json reader (tokenizer_load_memory).
 * The input is copied into an exact-size buffer, so any read past its end is caught. A refused
 * file must say why; an accepted one must encode and decode a few strings with ids inside its
 * vocabulary, and give the same ids with offsets inside the text (tok_offsets_check.h). */
#include <stdlib.h>
#include <string.h>

#include "tok_offsets_check.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    Tokenizer *t = NULL;
    GtError err = {0};
    if (tokenizer_load_memory(&t, "fuzz.json", buf, size, &err) == 0) {
        static const char *const texts[] = {"Hello world, it's 2026!\n\n  x", "<s>a</s> <|eot_id|>", "\xc3\xa9\xe2\x96\x81 \xf0\x9f\x98\x80 12345", ""};
        TokEncoder *e = tok_encoder_new(t);
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            TokIds ids = {0};
            GtError e2 = {0};
            if (tok_encode(e, "text", texts[i], strlen(texts[i]), i % 2 == 0, &ids, &e2) != 0) {
                if (!e2.msg[0]) abort(); /* a failure must say why */
            } else {
                tok_offsets_check(e, texts[i], strlen(texts[i]), i % 2 == 0, &ids);
                for (size_t k = 0; k < ids.n; k++)
                    if (ids.ids[k] < 0 || ids.ids[k] >= tokenizer_vocab_size(t)) abort();
                char *out = NULL;
                size_t n = 0;
                if (tokenizer_decode(t, ids.ids, ids.n, i % 2 == 1, &out, &n, &e2) == 0 && (!out || strlen(out) > n)) abort();
                free(out);
            }
            tok_ids_free(&ids);
        }
        tok_encoder_free(e);
        tokenizer_free(t);
    } else if (err.code != GT_EXIT_BAD_INPUT || !err.msg[0] || strchr(err.msg, '\n')) {
        abort(); /* refused without one line of why */
    }
    free(buf);
    return 0;
}
