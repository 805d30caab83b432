/* tokenizer_decode.c - ids back to text as HF's Tokenizer::decode: each id's token string (an
 * added token's content, else the model's), special ones left out when asked, then the decoder
 * chain (HF's decoders, decode_chain) over the list of strings, joined. Without a decoder the
 * tokens are joined with spaces, as HF does. */
#include <stdlib.h>

#include "tokenizer_internal.h"

typedef struct {
    char **s;
    size_t *len;
    size_t n, cap;
} StrList;

static void list_push(StrList *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->s = gt_xrealloc(l->s, l->cap * sizeof(char *));
        l->len = gt_xrealloc(l->len, l->cap * sizeof(size_t));
    }
    char *c = gt_xmalloc(len + 1);
    if (len) memcpy(c, s, len);
    c[len] = 0;
    l->s[l->n] = c;
    l->len[l->n++] = len;
}

static void list_free(StrList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}

/* b's bytes as a NUL-terminated string (never NULL; the NUL is not counted in b->n). */
static char *cstr(GtBytes *b) {
    gt_bytes_put(b, "", 1);
    b->n--;
    return b->p;
}

/* ByteLevel: every token's characters back to bytes (a token with a character outside the
 * alphabet is taken as its own bytes), all joined, then read as UTF-8 lossily: one string. */
static void dec_byte_level(const Tokenizer *t, StrList *l) {
    GtBytes raw = {0};
    for (size_t i = 0; i < l->n; i++) {
        size_t start = raw.n;
        bool all = true;
        for (size_t k = 0; k < l->len[i] && all;) {
            size_t cl;
            int32_t c = tok_utf8_decode(l->s[i] + k, &cl);
            int b = c >= 0 && c < 256 + 68 ? t->alphabet.byte_of[c] : -1;
            if (b < 0) all = false;
            else {
                char byte = (char)b;
                gt_bytes_put(&raw, &byte, 1);
            }
            k += cl;
        }
        if (!all) {
            raw.n = start;
            gt_bytes_put(&raw, l->s[i], l->len[i]);
        }
    }
    GtBytes text = {0};
    tok_utf8_lossy_append(raw.p, raw.n, &text);
    list_free(l);
    list_push(l, cstr(&text), text.n);
    gt_bytes_free(&text);
    gt_bytes_free(&raw);
}

static bool is_byte_token(const char *s, size_t n, unsigned char *byte) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    *byte = (unsigned char)v;
    return true;
}

static void flush_bytes(StrList *out, GtBytes *bytes) {
    if (bytes->n == 0) return;
    if (tok_utf8_invalid_at(bytes->p, bytes->n) < 0) list_push(out, bytes->p, bytes->n);
    else
        for (size_t k = 0; k < bytes->n; k++) list_push(out, "\xEF\xBF\xBD", 3); /* one U+FFFD per byte */
    bytes->n = 0;
}

static void dec_byte_fallback(StrList *l) {
    StrList out = {0};
    GtBytes bytes = {0};
    for (size_t i = 0; i < l->n; i++) {
        unsigned char b;
        if (is_byte_token(l->s[i], l->len[i], &b)) {
            gt_bytes_put(&bytes, (const char *)&b, 1);
            continue;
        }
        flush_bytes(&out, &bytes);
        list_push(&out, l->s[i], l->len[i]);
    }
    flush_bytes(&out, &bytes);
    gt_bytes_free(&bytes);
    list_free(l);
    *l = out;
}

static void dec_metaspace(const TokDecoder *d, StrList *l) {
    for (size_t i = 0; i < l->n; i++) {
        GtBytes b = {0};
        for (size_t k = 0; k < l->len[i];) {
            size_t cl = tok_utf8_len((unsigned char)l->s[i][k]);
            if (cl == d->replacement_len && memcmp(l->s[i] + k, d->replacement, cl) == 0) {
                if (!(i == 0 && d->prepend_scheme != PREPEND_NEVER)) gt_bytes_put(&b, " ", 1);
            } else {
                gt_bytes_put(&b, l->s[i] + k, cl);
            }
            k += cl;
        }
        free(l->s[i]);
        l->s[i] = cstr(&b);
        l->len[i] = b.n;
    }
}

typedef struct {
    const TokDecoder *d;
    const char *tok;
    GtBytes *out;
    size_t prev;
} ReplaceCtx;

static void replace_match(void *ctx, size_t start, size_t end) {
    ReplaceCtx *c = ctx;
    gt_bytes_put(c->out, c->tok + c->prev, start - c->prev);
    gt_bytes_put(c->out, c->d->content, c->d->content_len);
    c->prev = end;
}

static int dec_replace(const TokDecoder *d, StrList *l, GtError *err) {
    for (size_t i = 0; i < l->n; i++) {
        GtBytes b = {0};
        ReplaceCtx c = {.d = d, .tok = l->s[i], .out = &b, .prev = 0};
        if (l->len[i] > 0 && tok_regex_find_iter(&d->re, l->s[i], l->len[i], replace_match, &c, err) != 0) {
            gt_bytes_free(&b);
            return -1;
        }
        gt_bytes_put(&b, l->s[i] + c.prev, l->len[i] - c.prev);
        free(l->s[i]);
        l->s[i] = cstr(&b);
        l->len[i] = b.n;
    }
    return 0;
}

static void dec_fuse(StrList *l) {
    GtBytes b = {0};
    for (size_t i = 0; i < l->n; i++) gt_bytes_put(&b, l->s[i], l->len[i]);
    list_free(l);
    list_push(l, cstr(&b), b.n);
    gt_bytes_free(&b);
}

/* Strip: up to `start` leading and `stop` trailing characters equal to content. */
static void dec_strip(const TokDecoder *d, StrList *l) {
    for (size_t i = 0; i < l->n; i++) {
        const char *s = l->s[i];
        size_t n = l->len[i], a = 0, z = n;
        for (int k = 0; k < d->start && a < n && n - a >= d->content_len && memcmp(s + a, d->content, d->content_len) == 0; k++)
            a += d->content_len;
        for (int k = 0; k < d->stop && z > a && z - a >= d->content_len &&
                        memcmp(s + z - d->content_len, d->content, d->content_len) == 0;
             k++)
            z -= d->content_len;
        memmove(l->s[i], s + a, z - a);
        l->s[i][z - a] = 0;
        l->len[i] = z - a;
    }
}

int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special_tokens, char **out,
                     size_t *out_len, GtError *err) {
    StrList l = {0};
    for (size_t i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= t->vocab_size || !t->token_str[id]) continue;
        if (skip_special_tokens && t->special_of_id[id]) continue;
        list_push(&l, t->token_str[id], t->token_len[id]);
    }
    GtBytes b = {0};
    if (!t->has_decoder) {
        for (size_t i = 0; i < l.n; i++) {
            if (i) gt_bytes_put(&b, " ", 1);
            gt_bytes_put(&b, l.s[i], l.len[i]);
        }
    } else {
        for (int k = 0; k < t->n_decs; k++) {
            const TokDecoder *d = &t->decs[k];
            switch (d->kind) {
            case DEC_BYTE_LEVEL: dec_byte_level(t, &l); break;
            case DEC_BYTE_FALLBACK: dec_byte_fallback(&l); break;
            case DEC_METASPACE: dec_metaspace(d, &l); break;
            case DEC_FUSE: dec_fuse(&l); break;
            case DEC_STRIP: dec_strip(d, &l); break;
            case DEC_REPLACE:
                if (dec_replace(d, &l, err) != 0) {
                    list_free(&l);
                    gt_bytes_free(&b);
                    return -1;
                }
                break;
            }
        }
        for (size_t i = 0; i < l.n; i++) gt_bytes_put(&b, l.s[i], l.len[i]);
    }
    list_free(&l);
    *out = cstr(&b);
    *out_len = b.n;
    return 0;
}
