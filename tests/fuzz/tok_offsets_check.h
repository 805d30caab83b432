/* tok_offsets_check.h - what the tokenizer fuzz targets check of tok_encode_offsets on a text
 * tok_encode accepted: the same ids, one offset pair per id, each inside the text, start <= end,
 * on character boundaries; aborts (a finding) otherwise. */
#ifndef GT_TOK_OFFSETS_CHECK_H
#define GT_TOK_OFFSETS_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static inline void tok_offsets_check(TokEncoder *e, const char *text, size_t len, bool add_special, const TokIds *ids) {
    TokIds got = {0};
    TokOffsets offs = {0};
    GtError err = {0};
    if (tok_encode_offsets(e, "text", text, len, add_special, &got, &offs, &err) != 0) abort();
    if (got.n != ids->n || offs.n != got.n || (got.n && memcmp(got.ids, ids->ids, got.n * sizeof *got.ids) != 0)) abort();
    for (size_t k = 0; k < offs.n; k++) {
        size_t a = offs.v[2 * k], b = offs.v[2 * k + 1];
        if (a > b || b > len) abort();
        if ((a < len && ((unsigned char)text[a] & 0xC0) == 0x80) || (b < len && ((unsigned char)text[b] & 0xC0) == 0x80))
            abort(); /* not on a character boundary */
    }
    tok_ids_free(&got);
    tok_offsets_free(&offs);
}

#endif
