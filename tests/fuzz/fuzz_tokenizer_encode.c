/* fuzz_tokenizer_encode.c - libFuzzer target: the encoder and decoder (tok_encode,
 * tokenizer_decode) on arbitrary text through a small byte-level tokenizer (tok_fixture.h).
 * Invalid UTF-8 must be refused with its byte offset; valid text must encode to ids inside the
 * vocabulary and decode back to exactly itself (the tokenizer is lossless), and
 * tok_encode_offsets give the same ids with offsets inside the text (tok_offsets_check.h). */
#include <stdlib.h>
#include <string.h>

#include "tok_fixture.h"
#include "tok_offsets_check.h"
#include "tokenizer.h"

static Tokenizer *fixture(void) {
    static Tokenizer *t; /* built once: libFuzzer calls this target many times in one process */
    if (!t) {
        char *json = tok_fixture_json();
        GtError err = {0};
        if (!json || tokenizer_load_memory(&t, "fixture", json, strlen(json), &err) != 0) {
            fprintf(stderr, "fixture: %s\n", err.msg);
            abort();
        }
        free(json);
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tokenizer *t = fixture();
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    TokEncoder *e = tok_encoder_new(t);
    TokIds ids = {0};
    GtError err = {0};
    long bad = tok_utf8_invalid_at(text, size);
    int rc = tok_encode(e, "text", text, size, size % 2 == 0, &ids, &err);
    if (bad >= 0) {
        if (rc == 0 || err.code != GT_EXIT_BAD_INPUT || ids.n != 0) abort(); /* invalid UTF-8 must be refused */
    } else {
        if (rc != 0) abort();
        tok_offsets_check(e, text, size, size % 2 == 0, &ids);
        for (size_t k = 0; k < ids.n; k++)
            if (ids.ids[k] < 0 || ids.ids[k] >= tokenizer_vocab_size(t)) abort();
        char *out = NULL;
        size_t n = 0;
        if (tokenizer_decode(t, ids.ids, ids.n, true, &out, &n, &err) != 0) abort();
        /* special tokens skipped: the BOS the template adds, and <eot> with the spaces it strips */
        if (!memmem(text, size, "<eot>", 5) && !memmem(text, size, "<|bos|>", 7) && (n != size || memcmp(out, text, size) != 0))
            abort(); /* not lossless */
        free(out);
    }
    tok_ids_free(&ids);
    tok_encoder_free(e);
    free(text);
    return 0;
}
