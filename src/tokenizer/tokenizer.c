/* tokenizer.c - encoding text with a loaded tokenizer.json, step for step as HF's tokenizers
 * (tokenizer/mod.rs encode_single_sequence): added tokens in the raw text, the normalizers on
 * the pieces between them, added tokens in the normalized pieces, the pre-tokenizers, the BPE
 * model per pre-token, the post-processor's special tokens. tok_encode_offsets also carries each
 * byte's span in the text (HF's NormalizedString alignments) through every step.
 * Also HF's onig find_iter (the one regex loop every step uses) and UTF-8 checking. */
#include <stdlib.h>
#include <time.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

/* ---- UTF-8 ---- */

size_t tok_utf8_len(unsigned char lead) {
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

int32_t tok_utf8_decode(const char *s, size_t *n) {
    const unsigned char *u = (const unsigned char *)s;
    *n = tok_utf8_len(u[0]);
    switch (*n) {
    case 1: return u[0];
    case 2: return (u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    case 3: return (u[0] & 0x0F) << 12 | (u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    default: return (u[0] & 0x07) << 18 | (u[1] & 0x3F) << 12 | (u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    }
}

long tok_utf8_invalid_at(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        long n = gt_utf8_sequence(s + i, len - i);
        if (n < 0) return (long)i;
        i += (size_t)n;
    }
    return -1;
}

void tok_utf8_lossy_append(const char *text, size_t len, GtBytes *out) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        long k = gt_utf8_sequence(s + i, len - i);
        if (k > 0) gt_bytes_put(out, text + i, (size_t)k);
        else gt_bytes_put(out, "\xEF\xBF\xBD", 3); /* U+FFFD */
        i += (size_t)(k > 0 ? k : -k);
    }
}

/* ---- regular expressions (Oniguruma, as HF's SysRegex) ---- */

int tok_regex_compile(TokRegex *r, const char *pattern, size_t len, bool escaped, const char *file,
                      const char *path, GtError *err) {
    OnigEncoding encs[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
    char *pat = (char *)pattern;
    size_t plen = len;
    if (escaped) { /* regex::escape: a backslash before each of \.+*?()|[]{}^$#&-~ */
        pat = gt_xmalloc(2 * len + 1);
        plen = 0;
        for (size_t i = 0; i < len; i++) {
            if (strchr("\\.+*?()|[]{}^$#&-~", pattern[i]) && pattern[i] != 0) pat[plen++] = '\\';
            pat[plen++] = pattern[i];
        }
    }
    OnigErrorInfo einfo;
    int rc = onig_new(&r->re, (const OnigUChar *)pat, (const OnigUChar *)pat + plen, ONIG_OPTION_NONE,
                      ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    if (escaped) free(pat);
    if (rc != ONIG_NORMAL) {
        r->re = NULL;
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, rc, &einfo);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %s: expected a regular expression Oniguruma compiles, found one it refuses: %s",
                        file, path, (const char *)msg);
    }
    size_t wn = strlen(file) + strlen(path) + 3;
    r->where = gt_xmalloc(wn);
    snprintf(r->where, wn, "%s: %s", file, path);
    if (escaped && len > 0) { /* a literal: found by memmem, exactly where the escaped regex matches */
        r->literal = gt_xmalloc(len);
        memcpy(r->literal, pattern, len);
        r->literal_len = len;
    }
    return 0;
}

void tok_regex_free(TokRegex *r) {
    if (r->re) onig_free(r->re);
    free(r->where);
    free(r->literal);
    memset(r, 0, sizeof *r);
}

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The first match starting at or after from, as onig_search from there would find it. The
 * positions are tried one by one with onig_match (each bounded by the retry limit), so that
 * time and the stop signal are looked at between them: onig_search itself can run for minutes
 * on a backtracking pattern without counting retries, and it cannot be interrupted. Returns 1
 * (a match in *ms, *me), 0 (none) or -1 (err filled). */
static int next_match(const TokRegex *r, OnigMatchParam *mp, OnigRegion *region, const char *text, size_t len,
                      size_t from, double deadline, size_t *ms, size_t *me, GtError *err) {
    if (r->literal) {
        const char *hit = from + r->literal_len <= len ? memmem(text + from, len - from, r->literal, r->literal_len) : NULL;
        if (!hit) return 0;
        *ms = (size_t)(hit - text);
        *me = *ms + r->literal_len;
        return 1;
    }
    const OnigUChar *s = (const OnigUChar *)text, *end = s + len;
    for (size_t p = from; p <= len; p += p < len ? tok_utf8_len(s[p]) : 1) {
        int n = onig_match_with_param(r->re, s, end, s + p, region, ONIG_OPTION_NONE, mp);
        if (n >= 0) {
            *ms = p;
            *me = p + (size_t)n;
            return 1;
        }
        if (n != ONIG_MISMATCH) {
            OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
            onig_error_code_to_str(msg, n);
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: expected a pattern Oniguruma can search within its limits, found one that failed at "
                            "byte %zu of a %zu-byte piece: %s",
                            r->where, p, len, (const char *)msg);
        }
        { /* after each position that did not match: one such can take a second on a bad pattern */
            if (gt_stop_signal())
                return gt_error(err, GT_EXIT_FAILURE, "encoding stopped by signal %d", gt_stop_signal());
            if (thread_cpu_seconds() > deadline)
                return gt_error(err, GT_EXIT_BAD_INPUT,
                                "%s: expected a pattern that searches text in linear time, found one still searching a "
                                "%zu-byte piece after %.1f s of CPU (catastrophic backtracking)",
                                r->where, len, TOK_REGEX_BASE_SECONDS + TOK_REGEX_SECONDS_PER_MB * (double)len / 1e6);
        }
    }
    return 0;
}

/* rust-onig's FindMatches: search from last_end; an empty match right at the end of the previous
 * match is not taken: the search moves one character on instead. */
int tok_regex_find_iter(const TokRegex *r, const char *text, size_t len, TokMatchFn emit, void *ctx, GtError *err) {
    OnigRegion *region = onig_region_new();
    OnigMatchParam *mp = onig_new_match_param();
    if (!region || !mp) {
        if (region) onig_region_free(region, 1);
        return gt_error(err, GT_EXIT_FAILURE, "out of memory (regex region)");
    }
    onig_initialize_match_param(mp);
    onig_set_retry_limit_in_match_of_match_param(mp, TOK_REGEX_RETRY_LIMIT_IN_MATCH);
    const double deadline = thread_cpu_seconds() + TOK_REGEX_BASE_SECONDS + TOK_REGEX_SECONDS_PER_MB * (double)len / 1e6;
    const OnigUChar *s = (const OnigUChar *)text;
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    int rc = 0;
    while (last_end <= len) {
        size_t ms = 0, me = 0;
        int found = next_match(r, mp, region, text, len, last_end, deadline, &ms, &me, err);
        if (found < 0) rc = -1;
        if (found <= 0) break;
        if (ms == me && have_last && last_match_end == me) {
            last_end += last_end < len ? tok_utf8_len(s[last_end]) : 1;
            continue;
        }
        last_end = me;
        last_match_end = me;
        have_last = true;
        emit(ctx, ms, me);
    }
    onig_region_free(region, 1);
    onig_free_match_param(mp);
    return rc;
}

/* ---- ids ---- */

void tok_ids_push(TokIds *v, int32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->ids = gt_xrealloc(v->ids, v->cap * sizeof(int32_t));
    }
    v->ids[v->n++] = id;
}

void tok_ids_free(TokIds *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

/* ---- spans: (start, end, flag) lists, as HF's Pattern::find_matches and split behaviours ---- */

typedef struct {
    size_t start, end;
    int flag; /* is_match, then should_remove; or an added token's index (-1: none) */
    bool origin;
} Span;

typedef struct {
    Span *v;
    size_t n, cap;
} Spans;

static void spans_push(Spans *s, size_t start, size_t end, int flag) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = gt_xrealloc(s->v, s->cap * sizeof(Span));
    }
    s->v[s->n++] = (Span){.start = start, .end = end, .flag = flag};
}

typedef struct {
    Spans *out;
    size_t prev;
} MatchCollect;

static void collect_match(void *ctx, size_t start, size_t end) {
    MatchCollect *c = ctx;
    if (c->prev != start) spans_push(c->out, c->prev, start, 0);
    spans_push(c->out, start, end, 1);
    c->prev = end;
}

/* Pattern::find_matches for a regex: gaps and matches covering text (empty text: one empty gap). */
static int regex_spans(const TokRegex *re, const char *text, size_t len, Spans *out, GtError *err) {
    out->n = 0;
    if (len == 0) {
        spans_push(out, 0, 0, 0);
        return 0;
    }
    MatchCollect c = {.out = out, .prev = 0};
    if (tok_regex_find_iter(re, text, len, collect_match, &c, err) != 0) return -1;
    if (c.prev != len) spans_push(out, c.prev, len, 0);
    return 0;
}

/* Pattern::find_matches for a character predicate: each matching character is its own match. */
static void char_spans(const char *text, size_t len, bool (*pred)(int32_t c, const void *arg), const void *arg,
                       Spans *out) {
    out->n = 0;
    if (len == 0) {
        spans_push(out, 0, 0, 0);
        return;
    }
    size_t last = 0;
    for (size_t i = 0; i < len;) {
        size_t n;
        int32_t c = tok_utf8_decode(text + i, &n);
        if (pred(c, arg)) {
            if (last < i) spans_push(out, last, i, 0);
            spans_push(out, i, i + n, 1);
            last = i + n;
        }
        i += n;
    }
    if (len > last) spans_push(out, last, len, 0);
}

/* NormalizedString::split's folds: turns (offsets, is_match) into (offsets, should_remove). */
static void apply_behavior(Spans *s, int behavior, bool invert) {
    if (invert)
        for (size_t i = 0; i < s->n; i++) s->v[i].flag = !s->v[i].flag;
    if (behavior == SPLIT_REMOVED) return;
    if (behavior == SPLIT_ISOLATED) {
        for (size_t i = 0; i < s->n; i++) s->v[i].flag = 0;
        return;
    }
    size_t n = 0;
    bool prev_match = false;
    if (behavior == SPLIT_MERGED_WITH_NEXT) {
        /* folded from the right, then reversed: built in place from the end */
        size_t w = s->n;
        for (size_t r = s->n; r-- > 0;) {
            Span cur = s->v[r];
            bool is_match = cur.flag;
            if (is_match && !prev_match && w < s->n) s->v[w].start = cur.start;
            else s->v[--w] = (Span){.start = cur.start, .end = cur.end, .flag = 0};
            prev_match = is_match;
        }
        memmove(s->v, s->v + w, (s->n - w) * sizeof(Span));
        s->n -= w;
        return;
    }
    for (size_t r = 0; r < s->n; r++) {
        Span cur = s->v[r];
        bool is_match = cur.flag;
        bool merge = behavior == SPLIT_CONTIGUOUS ? is_match == prev_match : (is_match && !prev_match);
        if (merge && n > 0) s->v[n - 1].end = cur.end;
        else s->v[n++] = (Span){.start = cur.start, .end = cur.end, .flag = 0};
        prev_match = is_match;
    }
    s->n = n;
}

/* ---- the encoder ---- */

/* Offsets (tok_encode_offsets only): an alignment array holds 2 entries per byte of a buffer,
 * the [start, end) in the text of the character the byte came from (HF's alignments). */
typedef struct {
    char *buf, *tmp;
    size_t buf_n, buf_cap, tmp_cap;
    Spans spans;
    size_t *al;           /* buf's alignments when the step rewrote the bytes */
    size_t al_cap;        /* entries */
    const size_t *al_out; /* buf's alignments: al, or the input's (a step that copies) */
} Level;

struct TokEncoder {
    const Tokenizer *t;
    TokBpeScratch *bpe;
    Level *levels; /* one per pre-tokenizer step */
    Spans raw, norm;
    char *norm_buf, *norm_tmp;
    size_t norm_cap, norm_tmp_cap;
    TokOffsets *offs;            /* where offsets go (tok_encode_offsets), else NULL */
    size_t *norm_al, *norm_al_tmp; /* norm_buf's / norm_tmp's alignments */
    size_t norm_al_cap, norm_al_tmp_cap;
    uint32_t *lens;              /* the BPE tokens' bytes in their word */
    size_t lens_cap;
};

void tok_offsets_free(TokOffsets *o) {
    free(o->v);
    memset(o, 0, sizeof *o);
}

static void offs_push(TokOffsets *o, size_t start, size_t end) {
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 64;
        o->v = gt_xrealloc(o->v, 2 * o->cap * sizeof(size_t));
    }
    o->v[2 * o->n] = start;
    o->v[2 * o->n + 1] = end;
    o->n++;
}

/* Room for the alignments of `bytes` bytes. */
static size_t *al_reserve(size_t **p, size_t *cap, size_t bytes) {
    if (2 * bytes > *cap) {
        *cap = 4 * bytes + 32;
        *p = gt_xrealloc(*p, *cap * sizeof(size_t));
    }
    return *p;
}

const Tokenizer *tok_encoder_tokenizer(const TokEncoder *e) { return e->t; }
TokBpeScratch *tok_encoder_bpe(TokEncoder *e) { return e->bpe; }

TokEncoder *tok_encoder_new(const Tokenizer *t) {
    TokEncoder *e = gt_xcalloc(1, sizeof *e);
    e->t = t;
    e->bpe = tok_bpe_scratch_new();
    e->levels = gt_xcalloc((size_t)t->n_pres + 1, sizeof(Level));
    return e;
}

void tok_encoder_free(TokEncoder *e) {
    if (!e) return;
    tok_bpe_scratch_free(e->bpe);
    for (int i = 0; i <= e->t->n_pres; i++) {
        free(e->levels[i].buf);
        free(e->levels[i].tmp);
        free(e->levels[i].spans.v);
        free(e->levels[i].al);
    }
    free(e->levels);
    free(e->raw.v);
    free(e->norm.v);
    free(e->norm_buf);
    free(e->norm_tmp);
    free(e->norm_al);
    free(e->norm_al_tmp);
    free(e->lens);
    free(e);
}

static void reserve(char **p, size_t *cap, size_t need) {
    if (need > *cap) {
        *cap = need * 2 + 16;
        *p = gt_xrealloc(*p, *cap);
    }
}

static void level_append(Level *L, const char *s, size_t n) {
    reserve(&L->buf, &L->buf_cap, L->buf_n + n);
    memcpy(L->buf + L->buf_n, s, n);
    L->buf_n += n;
}

/* Is c (a code point) the character arg (UTF-8, NUL-terminated)? / Rust's char::is_numeric */
static bool is_char(int32_t c, const void *arg) {
    size_t n;
    return tok_utf8_decode(arg, &n) == c;
}
static bool is_numeric(int32_t c, const void *arg) {
    (void)arg;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* The pieces' copy in L->buf and their spans, after the step's transformation and split. */
static int pretok_step(TokEncoder *e, const TokPreTokenizer *p, Level *L, const char *s, size_t len, const size_t *al,
                       bool origin, GtError *err) {
    const Tokenizer *t = e->t;
    L->buf_n = 0;
    L->al_out = al; /* a step that rewrites the bytes rewrites this */
    Spans *sp = &L->spans;
    switch (p->kind) {
    case PRE_BYTE_LEVEL: {
        const char *src = s;
        size_t n = len;
        if (p->add_prefix_space && s[0] != ' ') {
            reserve(&L->tmp, &L->tmp_cap, len + 1);
            L->tmp[0] = ' ';
            memcpy(L->tmp + 1, s, len);
            src = L->tmp;
            n = len + 1;
        }
        if (p->use_regex) {
            if (regex_spans(&p->re, src, n, sp, err) != 0) return -1;
            apply_behavior(sp, SPLIT_ISOLATED, false);
        } else {
            sp->n = 0;
            spans_push(sp, 0, n, 0);
        }
        reserve(&L->buf, &L->buf_cap, 2 * n + 1);
        if (al) { /* each output byte: the alignment of the byte it stands for (a prefix: the first's) */
            size_t *o = al_reserve(&L->al, &L->al_cap, 2 * n + 1), w = 0;
            for (size_t k = 0; k < n; k++) {
                const size_t *from = src == s ? al + 2 * k : al + 2 * (k ? k - 1 : 0);
                for (int r = 0; r < t->alphabet.len[(unsigned char)src[k]]; r++, w++) {
                    o[2 * w] = from[0];
                    o[2 * w + 1] = from[1];
                }
            }
            L->al_out = o;
        }
        char *w = L->buf;
        for (size_t i = 0; i < sp->n; i++) { /* map each piece's bytes to the alphabet */
            size_t a = (size_t)(w - L->buf);
            for (size_t k = sp->v[i].start; k < sp->v[i].end; k++) {
                unsigned char b = (unsigned char)src[k];
                w[0] = t->alphabet.utf8[b][0];
                w[1] = t->alphabet.utf8[b][1];
                w += t->alphabet.len[b];
            }
            sp->v[i].start = a;
            sp->v[i].end = (size_t)(w - L->buf);
        }
        L->buf_n = (size_t)(w - L->buf);
        break;
    }
    case PRE_SPLIT:
        level_append(L, s, len);
        if (regex_spans(&p->re, L->buf, len, sp, err) != 0) return -1;
        apply_behavior(sp, p->behavior, p->invert);
        break;
    case PRE_METASPACE: {
        bool starts = len >= p->replacement_len && memcmp(s, p->replacement, p->replacement_len) == 0;
        bool prepend = p->prepend_scheme == PREPEND_ALWAYS || (p->prepend_scheme == PREPEND_FIRST && origin);
        /* replace ' ' first: a leading space becomes the replacement, so nothing is prepended */
        if (prepend && !starts && s[0] != ' ') level_append(L, p->replacement, p->replacement_len);
        if (al) { /* the prefix: the first character's alignment; a replaced space: the space's */
            size_t *o = al_reserve(&L->al, &L->al_cap, L->buf_n + len * p->replacement_len + 1), w = 0;
            for (; w < L->buf_n; w++) memcpy(o + 2 * w, al, 2 * sizeof(size_t));
            for (size_t i = 0; i < len; i++)
                for (size_t r = 0; r < (s[i] == ' ' ? p->replacement_len : 1); r++, w++) memcpy(o + 2 * w, al + 2 * i, 2 * sizeof(size_t));
            L->al_out = o;
        }
        reserve(&L->buf, &L->buf_cap, L->buf_n + len * p->replacement_len + 1);
        for (size_t i = 0; i < len; i++) {
            if (s[i] == ' ') {
                memcpy(L->buf + L->buf_n, p->replacement, p->replacement_len);
                L->buf_n += p->replacement_len;
            } else {
                L->buf[L->buf_n++] = s[i];
            }
        }
        if (p->split) {
            char_spans(L->buf, L->buf_n, is_char, p->replacement, sp);
            apply_behavior(sp, SPLIT_MERGED_WITH_NEXT, false);
        } else {
            sp->n = 0;
            spans_push(sp, 0, L->buf_n, 0);
        }
        break;
    }
    case PRE_DIGITS:
        level_append(L, s, len);
        char_spans(L->buf, len, is_numeric, NULL, sp);
        apply_behavior(sp, p->individual_digits ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, false);
        break;
    }
    for (size_t i = 0; i < sp->n; i++) sp->v[i].origin = origin && sp->v[i].start == 0;
    return 0;
}

/* The BPE model on a word whose bytes' alignments are al: its tokens and their offsets. */
static int bpe_word_offsets(TokEncoder *e, const char *s, size_t len, const size_t *al, TokIds *out, GtError *err) {
    if (len > e->lens_cap) {
        e->lens_cap = 2 * len + 16;
        e->lens = gt_xrealloc(e->lens, e->lens_cap * sizeof(uint32_t));
    }
    size_t first = out->n, pos = 0;
    if (tok_bpe_word(e, s, len, out, e->lens, err) != 0) return -1;
    for (size_t i = first; i < out->n; i++) {
        size_t l = e->lens[i - first], last = pos + l - 1 < len ? pos + l - 1 : len - 1;
        offs_push(e->offs, al[2 * (pos < len ? pos : len - 1)], al[2 * last + 1]);
        pos += l;
    }
    return 0;
}

static int pretokenize(TokEncoder *e, int k, const char *s, size_t len, const size_t *al, bool origin, TokIds *out,
                       GtError *err) {
    if (len == 0) return 0;
    if (k == e->t->n_pres) return al ? bpe_word_offsets(e, s, len, al, out, err) : tok_bpe_word(e, s, len, out, NULL, err);
    Level *L = &e->levels[k];
    if (pretok_step(e, &e->t->pres[k], L, s, len, al, origin, err) != 0) return -1;
    for (size_t i = 0; i < L->spans.n; i++) {
        Span sp = L->spans.v[i];
        if (sp.flag || sp.end == sp.start) continue; /* removed, or empty (HF drops empty splits) */
        if ((i & 4095) == 4095 && gt_stop_signal())
            return gt_error(err, GT_EXIT_FAILURE, "encoding stopped by signal %d", gt_stop_signal());
        if (pretokenize(e, k + 1, L->buf + sp.start, sp.end - sp.start, L->al_out ? L->al_out + 2 * sp.start : NULL,
                        sp.origin, out, err) != 0)
            return -1;
    }
    return 0;
}

/* The normalized text just written to norm_tmp becomes norm_buf (and the old buffer the scratch). */
static void swap_norm_buffers(TokEncoder *e) {
    char *b = e->norm_buf;
    size_t cap = e->norm_cap;
    e->norm_buf = e->norm_tmp;
    e->norm_cap = e->norm_tmp_cap;
    e->norm_tmp = b;
    e->norm_tmp_cap = cap;
}

static void swap_norm_al(TokEncoder *e) {
    size_t *a = e->norm_al, cap = e->norm_al_cap;
    e->norm_al = e->norm_al_tmp;
    e->norm_al_cap = e->norm_al_tmp_cap;
    e->norm_al_tmp = a;
    e->norm_al_tmp_cap = cap;
}

/* The normalizers on one piece (text[base..base+len)); the result in e->norm_buf (*n bytes), and
 * with offsets wanted its alignments in e->norm_al. */
static int normalize(TokEncoder *e, const char *s, size_t len, size_t base, size_t *n_out, GtError *err) {
    if (len == 0) {
        *n_out = 0;
        return 0;
    }
    const Tokenizer *t = e->t;
    reserve(&e->norm_buf, &e->norm_cap, len + 1);
    memcpy(e->norm_buf, s, len);
    size_t n = len;
    bool al = e->offs != NULL;
    if (al) { /* each byte: its character's span */
        size_t *o = al_reserve(&e->norm_al, &e->norm_al_cap, len + 1);
        for (size_t i = 0; i < len;) {
            size_t cl = tok_utf8_len((unsigned char)s[i]);
            for (size_t k = i; k < i + cl && k < len; k++) {
                o[2 * k] = base + i;
                o[2 * k + 1] = base + i + cl;
            }
            i += cl;
        }
    }
    for (int i = 0; i < t->n_norms && n > 0; i++) {
        const TokNormalizer *z = &t->norms[i];
        if (z->kind == NORM_PREPEND) {
            if (al) { /* HF's prepend: the new characters take the first character's alignment */
                size_t *o = al_reserve(&e->norm_al, &e->norm_al_cap, n + z->str_len + 1);
                memmove(o + 2 * z->str_len, o, 2 * n * sizeof(size_t));
                for (size_t k = 0; k < z->str_len; k++) memcpy(o + 2 * k, o + 2 * z->str_len, 2 * sizeof(size_t));
            }
            reserve(&e->norm_buf, &e->norm_cap, n + z->str_len + 1);
            memmove(e->norm_buf + z->str_len, e->norm_buf, n);
            memcpy(e->norm_buf, z->str, z->str_len);
            n += z->str_len;
        } else if (z->kind == NORM_REPLACE) {
            Spans sp = {0};
            if (regex_spans(&z->re, e->norm_buf, n, &sp, err) != 0) {
                free(sp.v);
                return -1;
            }
            size_t m = 0;
            for (size_t k = 0; k < sp.n; k++) {
                size_t piece = sp.v[k].flag ? z->str_len : sp.v[k].end - sp.v[k].start;
                reserve(&e->norm_tmp, &e->norm_tmp_cap, m + piece + 1);
                memcpy(e->norm_tmp + m, sp.v[k].flag ? z->str : e->norm_buf + sp.v[k].start, piece);
                if (al) { /* HF's replace: the content takes the alignment of the match's last byte */
                    size_t *o = al_reserve(&e->norm_al_tmp, &e->norm_al_tmp_cap, m + piece + 1);
                    size_t at = sp.v[k].end > 0 ? sp.v[k].end - 1 : 0;
                    for (size_t r = 0; r < piece; r++) {
                        const size_t *from = sp.v[k].flag ? e->norm_al + 2 * at : e->norm_al + 2 * (sp.v[k].start + r);
                        bool none = sp.v[k].flag && sp.v[k].end == 0;
                        o[2 * (m + r)] = none ? base : from[0];
                        o[2 * (m + r) + 1] = none ? base : from[1];
                    }
                }
                m += piece;
            }
            free(sp.v);
            swap_norm_buffers(e);
            if (al) swap_norm_al(e);
            n = m;
        } else {
            bool ascii = true;
            for (size_t k = 0; k < n && ascii; k++) ascii = (unsigned char)e->norm_buf[k] < 0x80;
            if (ascii) continue; /* ASCII text is in every normal form */
            size_t n_in = n;
            if (tok_unicode_normalize(z->kind, e->norm_buf, n, &e->norm_tmp, &n, &e->norm_tmp_cap, err) != 0) return -1;
            swap_norm_buffers(e);
            if (al && (n != n_in || memcmp(e->norm_buf, e->norm_tmp, n) != 0)) {
                swap_norm_al(e); /* the input's alignments are norm_al_tmp now */
                al_reserve(&e->norm_al, &e->norm_al_cap, n + 1);
                if (tok_unicode_realign(z->kind, e->norm_tmp, n_in, e->norm_al_tmp, e->norm_buf, n, e->norm_al, err) != 0)
                    return -1;
            }
        }
    }
    *n_out = n;
    return 0;
}

int tok_normalize(TokEncoder *e, const char *s, size_t len, const char **out, size_t *n, GtError *err) {
    if (normalize(e, s, len, 0, n, err) != 0) return -1;
    *out = e->norm_buf ? e->norm_buf : "";
    return 0;
}

/* The char before s[at] / at s[at] is \w, as Rust's regex; the whitespace run around a point. */
static bool onig_char_at(const TokRegex *re, const char *s, size_t len, size_t at) {
    return onig_match(re->re, (const OnigUChar *)s, (const OnigUChar *)s + len, (const OnigUChar *)s + at, NULL,
                      ONIG_OPTION_NONE) > 0;
}
static size_t char_before(const char *s, size_t at) {
    size_t i = at - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

/* AddedVocabulary::find_matches: leftmost-longest matches of the set's tokens, with
 * single_word, lstrip and rstrip applied as HF applies them. Spans carry the token index. */
static void find_added(const Tokenizer *t, const TokAddedSet *set, const char *s, size_t len, Spans *out) {
    out->n = 0;
    if (len == 0) {
        spans_push(out, 0, 0, -1);
        return;
    }
    if (set->n == 0) {
        spans_push(out, 0, len, -1);
        return;
    }
    size_t start_offset = 0, start, stop, ws_from = 1, ws_end = 0; /* the last whitespace run rstrip walked */
    int best;
    for (size_t i = 0; i < len && tok_added_find(set, t->added, s, len, i, &start, &stop, &best);) {
        const TokAddedToken *a = &t->added[best];
        i = stop; /* the next search starts after this match, whatever is done with it */
        if (a->single_word) {
            bool start_space = start == 0 || !onig_char_at(&t->word_char, s, len, char_before(s, start));
            bool stop_space = stop == len || !onig_char_at(&t->word_char, s, len, stop);
            if (!stop_space || !start_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            /* not below start_offset (the result is clamped to it): each space is walked once */
            while (ns > start_offset && onig_char_at(&t->space_char, s, len, char_before(s, ns))) ns = char_before(s, ns);
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) { /* a run walked before (tokens that hold whitespace) is not walked again */
            if (stop >= ws_from && stop <= ws_end) {
                stop = ws_end;
            } else {
                ws_from = stop;
                while (stop < len && onig_char_at(&t->space_char, s, len, stop)) stop += tok_utf8_len((unsigned char)s[stop]);
                ws_end = stop;
            }
        }
        if (start_offset < start) spans_push(out, start_offset, start, -1);
        spans_push(out, start, stop, best);
        start_offset = stop;
    }
    if (start_offset != len) spans_push(out, start_offset, len, -1);
}

static int encode_normalized_piece(TokEncoder *e, size_t n, bool origin, TokIds *out, GtError *err) {
    const Tokenizer *t = e->t;
    find_added(t, &t->norm_set, e->norm_buf, n, &e->norm);
    for (size_t k = 0; k < e->norm.n; k++) {
        Span sp = e->norm.v[k];
        if (sp.end <= sp.start) continue;
        const size_t *al = e->offs ? e->norm_al + 2 * sp.start : NULL;
        if (sp.flag >= 0) {
            tok_ids_push(out, t->added[sp.flag].id);
            if (al) offs_push(e->offs, al[0], al[2 * (sp.end - sp.start - 1) + 1]);
        } else if (pretokenize(e, 0, e->norm_buf + sp.start, sp.end - sp.start, al, origin && sp.start == 0, out, err) != 0)
            return -1;
    }
    return 0;
}

static int encode(TokEncoder *e, const char *name, const char *text, size_t len, bool add_special_tokens, TokIds *out,
                  GtError *err) {
    const Tokenizer *t = e->t;
    TokOffsets *offs = e->offs;
    size_t offs_first = offs ? offs->n : 0;
    long bad = tok_utf8_invalid_at(text, len);
    if (bad >= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte offset %ld: expected UTF-8 text, found the byte 0x%02x",
                        name, bad, (unsigned char)text[bad]);
    size_t first = out->n;
    if (add_special_tokens)
        for (int i = 0; i < t->n_before; i++) {
            tok_ids_push(out, t->tmpl_before[i]);
            if (offs) offs_push(offs, 0, 0); /* the post-processor's tokens: HF's (0, 0) */
        }
    find_added(t, &t->raw_set, text, len, &e->raw);
    for (size_t k = 0; k < e->raw.n; k++) {
        Span sp = e->raw.v[k];
        if (sp.end <= sp.start) continue;
        if (sp.flag >= 0) {
            tok_ids_push(out, t->added[sp.flag].id);
            if (offs) offs_push(offs, sp.start, sp.end);
            continue;
        }
        size_t n;
        if (normalize(e, text + sp.start, sp.end - sp.start, sp.start, &n, err) != 0 ||
            encode_normalized_piece(e, n, sp.start == 0, out, err) != 0) {
            out->n = first;
            if (offs) offs->n = offs_first;
            if (err && err->msg[0] && strncmp(err->msg, name, strlen(name)) != 0) {
                char msg[GT_ERR_MAX];
                snprintf(msg, sizeof msg, "%s", err->msg);
                /* a fault of the tokenizer's (its pattern) is reported against the tokenizer file */
                if (strncmp(msg, t->path, strlen(t->path)) == 0) gt_error(err, err->code, "%s (encoding %s)", msg, name);
                else gt_error(err, err->code, "%s: %s", name, msg);
            }
            return -1;
        }
    }
    if (add_special_tokens)
        for (int i = 0; i < t->n_after; i++) {
            tok_ids_push(out, t->tmpl_after[i]);
            if (offs) offs_push(offs, 0, 0);
        }
    return 0;
}

int tok_encode(TokEncoder *e, const char *name, const char *text, size_t len, bool add_special_tokens, TokIds *out,
               GtError *err) {
    e->offs = NULL;
    return encode(e, name, text, len, add_special_tokens, out, err);
}

int tok_encode_offsets(TokEncoder *e, const char *name, const char *text, size_t len, bool add_special_tokens,
                       TokIds *out, TokOffsets *offs, GtError *err) {
    e->offs = offs;
    int rc = encode(e, name, text, len, add_special_tokens, out, err);
    e->offs = NULL;
    return rc;
}
