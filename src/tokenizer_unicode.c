/* tokenizer_unicode.c - the Unicode normalizers of a tokenizer.json (NFC, NFD, NFKC, NFKD) as
 * Hugging Face's tokenizers applies them. HF normalizes with the tables of Unicode 9.0
 * (unicode-normalization-alignments 0.1.12): a character assigned later has, for it, no
 * decomposition, no composition and combining class 0 — a starter that is left alone. utf8proc
 * (Unicode 15) would reorder or map such characters; so the text is cut at them, each run of
 * Unicode 9.0 characters is normalized by utf8proc (whose data for those characters is Unicode
 * 9.0's: decompositions and combining classes never change once assigned), and the later
 * characters are copied as they are. A character's age comes from ICU (u_charAge). */
#include <stdlib.h>
#include <unicode/uchar.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

/* Was c assigned by Unicode 9.0? (Unassigned ones count as later: both sides leave them alone.) */
static bool in_unicode_9(int32_t c) {
    UVersionInfo v;
    u_charAge((UChar32)c, v);
    return v[0] != 0 && (v[0] < 9 || (v[0] == 9 && v[1] == 0 && v[2] == 0));
}

static void put(char **out, size_t *n, size_t *cap, const void *s, size_t k) {
    if (*n + k + 1 > *cap) {
        *cap = (*n + k + 1) * 2;
        *out = gt_xrealloc(*out, *cap);
    }
    memcpy(*out + *n, s, k);
    *n += k;
}

static int normalize_run(int kind, const char *s, size_t len, char **out, size_t *n, size_t *cap, GtError *err) {
    if (len == 0) return 0;
    int opt = UTF8PROC_STABLE | (kind == NORM_NFC || kind == NORM_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
              (kind == NORM_NFKC || kind == NORM_NFKD ? UTF8PROC_COMPAT : 0);
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, (utf8proc_option_t)opt);
    if (r < 0) {
        free(dst);
        return gt_error(err, GT_EXIT_FAILURE, "unicode normalization failed: %s", utf8proc_errmsg(r));
    }
    put(out, n, cap, dst, (size_t)r);
    free(dst);
    return 0;
}

int tok_unicode_normalize(int kind, const char *s, size_t len, char **out, size_t *n, size_t *cap, GtError *err) {
    *n = 0;
    size_t run = 0; /* start of the current run of Unicode 9.0 characters */
    for (size_t i = 0; i < len;) {
        size_t cl;
        int32_t c = tok_utf8_decode(s + i, &cl);
        if (c >= 0x80 && !in_unicode_9(c)) {
            if (normalize_run(kind, s + run, i - run, out, n, cap, err) != 0) return -1;
            put(out, n, cap, s + i, cl);
            run = i + cl;
        }
        i += cl;
    }
    if (normalize_run(kind, s + run, len - run, out, n, cap, err) != 0) return -1;
    put(out, n, cap, "", 0); /* room for a NUL */
    (*out)[*n] = 0;
    return 0;
}
