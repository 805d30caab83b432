/* tokenizer_unicode.c - the Unicode normalizers of a tokenizer.json (NFC, NFD, NFKC, NFKD) as
 * Hugging Face's tokenizers applies them, and the offsets' alignments through them. HF
 * normalizes with the tables of Unicode 9.0 (unicode-normalization-alignments 0.1.12): a
 * character assigned later has, for it, no decomposition, no composition and combining class 0 —
 * a starter that is left alone. utf8proc (Unicode 15) would reorder or map such characters; so
 * the text is cut at them, each run of Unicode 9.0 characters is normalized by utf8proc (whose
 * data for those characters is Unicode 9.0's: decompositions and combining classes never change
 * once assigned), and the later characters are copied as they are. A character's age comes from
 * ICU (u_charAge). */
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

static int normalize_run(int kind, const char *s, size_t len, GtBytes *out, GtError *err) {
    if (len == 0) return 0;
    int opt = UTF8PROC_STABLE | (kind == NORM_NFC || kind == NORM_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
              (kind == NORM_NFKC || kind == NORM_NFKD ? UTF8PROC_COMPAT : 0);
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, (utf8proc_option_t)opt);
    if (r < 0) {
        free(dst);
        return gt_error(err, GT_EXIT_FAILURE, "unicode normalization failed: %s", utf8proc_errmsg(r));
    }
    gt_bytes_put(out, (const char *)dst, (size_t)r);
    free(dst);
    return 0;
}

int tok_unicode_normalize(int kind, const char *s, size_t len, char **out, size_t *n, size_t *cap, GtError *err) {
    GtBytes b = {.p = *out, .n = 0, .cap = *cap}; /* the caller's buffer, grown as needed */
    size_t run = 0;                               /* start of the current run of Unicode 9.0 characters */
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        size_t cl;
        int32_t c = tok_utf8_decode(s + i, &cl);
        if (c >= 0x80 && !in_unicode_9(c)) {
            rc = normalize_run(kind, s + run, i - run, &b, err);
            gt_bytes_put(&b, s + i, cl);
            run = i + cl;
        }
        i += cl;
    }
    if (rc == 0) rc = normalize_run(kind, s + run, len - run, &b, err);
    gt_bytes_put(&b, "", 1); /* NUL-terminated, the NUL not counted */
    *out = b.p;
    *cap = b.cap;
    *n = b.n - 1;
    return rc;
}

/* The alignments of a normalized text, for offsets (the rule: tokenizer_internal.h). */
int tok_unicode_realign(int kind, const char *in, size_t n_in, const size_t *al_in, const char *out, size_t n,
                        size_t *o, GtError *err) {
    size_t w = 0, cap = 0, m;
    char *tmp = NULL;
    bool ok = true;
    for (size_t a = 0; a < n_in && ok;) {
        size_t b = a + tok_utf8_len((unsigned char)in[a]);
        while (b < n_in && (unsigned char)in[b] >= 0x80) b += tok_utf8_len((unsigned char)in[b]);
        if (tok_unicode_normalize(kind, in + a, b - a, &tmp, &m, &cap, err) != 0) {
            free(tmp);
            return -1;
        }
        ok = w + m <= n && memcmp(tmp, out + w, m) == 0;
        bool same = m == b - a && memcmp(tmp, in + a, m) == 0;
        for (size_t k = 0; ok && k < m; k++, w++) {
            o[2 * w] = same ? al_in[2 * (a + k)] : al_in[2 * a];
            o[2 * w + 1] = same ? al_in[2 * (a + k) + 1] : al_in[2 * (b - 1) + 1];
        }
        a = b;
    }
    free(tmp);
    if (!ok || w != n)
        for (size_t k = 0; k < n; k++) {
            o[2 * k] = al_in[0];
            o[2 * k + 1] = al_in[2 * (n_in - 1) + 1];
        }
    return 0;
}
