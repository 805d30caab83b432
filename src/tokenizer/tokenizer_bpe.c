/* tokenizer_bpe.c - the BPE model of a tokenizer.json, as HF's tokenizers runs it
 * (models/bpe/model.rs merge_word, word.rs merge_all): a word is cut into characters (with
 * continuing_subword_prefix / end_of_word_suffix), each looked up in the vocabulary or, failing
 * that, spelled as <0xXX> byte tokens (byte_fallback) or the unk token (fused with fuse_unk);
 * then merges are applied lowest rank first, leftmost first, through a priority queue whose
 * stale entries are recognised the way HF recognises them (the pair's merge result differs).
 * Also the byte -> int maps the reader fills, and the byte-level alphabet. */
#include <stdlib.h>

#include "tokenizer_internal.h"

uint32_t tok_hash_bytes(const char *s, size_t len) {
    /* 8 bytes at a time, multiply-xorshift mixed (the table only needs a good spread) */
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (len * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t tail = 0;
    if (len > i) memcpy(&tail, s + i, len - i); /* s may be NULL for an empty key */
    h = (h ^ tail) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

static void strmap_grow(TokStrMap *m) {
    uint32_t cap = m->cap ? m->cap * 2 : 64;
    TokStrMap g = {.keys = gt_xcalloc(cap, sizeof(char *)), .lens = gt_xcalloc(cap, sizeof(uint32_t)),
                   .vals = gt_xcalloc(cap, sizeof(int32_t)), .hashes = gt_xcalloc(cap, sizeof(uint32_t)),
                   .cap = cap, .n = m->n};
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        uint32_t j = m->hashes[i] & (cap - 1);
        while (g.keys[j]) j = (j + 1) & (cap - 1);
        g.keys[j] = m->keys[i];
        g.lens[j] = m->lens[i];
        g.vals[j] = m->vals[i];
        g.hashes[j] = m->hashes[i];
    }
    free(m->keys);
    free(m->lens);
    free(m->vals);
    free(m->hashes);
    *m = g;
}

static uint32_t strmap_slot(const TokStrMap *m, const char *key, size_t len, uint32_t h) {
    uint32_t j = h & (m->cap - 1);
    while (m->keys[j] && !(m->hashes[j] == h && m->lens[j] == len && memcmp(m->keys[j], key, len) == 0))
        j = (j + 1) & (m->cap - 1);
    return j;
}

int32_t *tok_strmap_put(TokStrMap *m, const char *key, size_t len, int32_t val, bool *inserted) {
    if ((uint64_t)(m->n + 1) * 4 >= (uint64_t)m->cap * 3) strmap_grow(m);
    uint32_t h = tok_hash_bytes(key, len), j = strmap_slot(m, key, len, h);
    *inserted = m->keys[j] == NULL;
    if (*inserted) {
        char *k = gt_xmalloc(len + 1);
        if (len) memcpy(k, key, len);
        k[len] = 0;
        m->keys[j] = k;
        m->lens[j] = (uint32_t)len;
        m->hashes[j] = h;
        m->vals[j] = val;
        m->n++;
    }
    return &m->vals[j];
}

const int32_t *tok_strmap_get(const TokStrMap *m, const char *key, size_t len) {
    if (m->cap == 0) return NULL;
    uint32_t j = strmap_slot(m, key, len, tok_hash_bytes(key, len));
    return m->keys[j] ? &m->vals[j] : NULL;
}

void tok_strmap_free(TokStrMap *m) {
    for (uint32_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->lens);
    free(m->vals);
    free(m->hashes);
    memset(m, 0, sizeof *m);
}

static uint32_t merge_slot(const TokBpe *m, uint64_t key) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    uint32_t j = (uint32_t)(h >> 32) & (m->merge_cap - 1);
    while (m->merge_keys[j] != UINT64_MAX && m->merge_keys[j] != key) j = (j + 1) & (m->merge_cap - 1);
    return j;
}

bool tok_bpe_merge_get(const TokBpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    if (m->merge_cap == 0) return false;
    uint32_t j = merge_slot(m, (uint64_t)(uint32_t)a << 32 | (uint32_t)b);
    if (m->merge_keys[j] == UINT64_MAX) return false;
    *rank = m->merge_rank[j];
    *new_id = m->merge_new[j];
    return true;
}

/* HF collects the merges into a map: a pair given twice keeps its last rank and result. The
 * reader sizes the table (merge_cap >= 2 * merges) before the first put. */
void tok_bpe_merge_put(TokBpe *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t j = merge_slot(m, key);
    m->merge_keys[j] = key;
    m->merge_rank[j] = rank;
    m->merge_new[j] = new_id;
}

void tok_bpe_free(TokBpe *m) {
    tok_strmap_free(&m->vocab);
    free(m->id_to_token); /* its strings are the vocabulary's keys */
    free(m->id_len);
    free(m->merge_keys);
    free(m->merge_rank);
    free(m->merge_new);
    free(m->in_merge);
    free(m->prefix);
    free(m->suffix);
    memset(m, 0, sizeof *m);
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * for U+0100.. in byte order. */
void tok_make_byte_alphabet(TokByteAlphabet *a) {
    int n = 0;
    for (int c = 0; c < 256 + 68; c++) a->byte_of[c] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int c = printable ? b : 256 + n++;
        a->byte_of[c] = (int16_t)b;
        if (c < 0x80) {
            a->utf8[b][0] = (char)c;
            a->len[b] = 1;
        } else {
            a->utf8[b][0] = (char)(0xC0 | (c >> 6));
            a->utf8[b][1] = (char)(0x80 | (c & 0x3F));
            a->len[b] = 2;
        }
    }
}

/* ---- one encoder thread's cache and scratch ---- */

#define BPE_CACHE_MAX_WORD 256      /* HF caches words shorter than this (MAX_LENGTH) */
#define BPE_CACHE_MAX_ENTRIES (1u << 18)
#define BPE_RUN_SPLIT_MIN 1024          /* symbols: below, one queue for the word */
#define BPE_RUN_PARALLEL_MIN (1u << 16) /* symbols: above, the runs are merged in parallel */

typedef struct {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
} Symbol;

typedef struct {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
} Merge;

typedef struct {
    Merge *v;
    size_t n, cap;
} Heap;

struct TokBpeScratch {
    TokStrMap cache;      /* word -> index into cache_at */
    uint32_t *cache_at;   /* [2 * entries]: offset, count into cache_ids */
    uint32_t cache_n, cache_cap;
    int32_t *cache_ids;
    uint32_t *cache_lens; /* each cached token's bytes in its word (for offsets) */
    size_t cache_ids_n, cache_ids_cap;
    Symbol *sym;
    size_t sym_cap;
    Heap heap;
    char *buf;            /* a character with prefix/suffix */
    size_t buf_cap;
};

TokBpeScratch *tok_bpe_scratch_new(void) { return gt_xcalloc(1, sizeof(TokBpeScratch)); }

void tok_bpe_scratch_free(TokBpeScratch *s) {
    if (!s) return;
    tok_strmap_free(&s->cache);
    free(s->cache_at);
    free(s->cache_ids);
    free(s->cache_lens);
    free(s->sym);
    free(s->heap.v);
    free(s->buf);
    free(s);
}

static bool merge_less(const Merge *a, const Merge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(Heap *h, Merge m) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = gt_xrealloc(h->v, h->cap * sizeof(Merge));
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = m;
}

static Merge heap_pop(Heap *h) {
    Merge top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(&h->v[c + 1], &h->v[c])) c++;
        if (!merge_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n > 0) h->v[i] = last;
    return top;
}

/* merge_all on the symbols [r0, r1) of sym[0..n). */
static void bpe_merge_span(const TokBpe *m, Symbol *sym, size_t n, size_t r0, size_t r1, Heap *h) {
    h->n = 0;
    for (size_t i = r0; i + 1 < r1; i++) {
        uint32_t rank;
        int32_t new_id;
        if (tok_bpe_merge_get(m, sym[i].id, sym[i + 1].id, &rank, &new_id))
            heap_push(h, (Merge){.rank = rank, .pos = (uint32_t)i, .new_id = new_id});
    }
    while (h->n > 0) {
        Merge top = heap_pop(h);
        Symbol *cur = &sym[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        int32_t next_pos = cur->next;
        Symbol right = sym[next_pos];
        uint32_t rank;
        int32_t new_id;
        if (!tok_bpe_merge_get(m, cur->id, right.id, &rank, &new_id) || new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        sym[next_pos].len = 0;
        if (right.next > -1 && (size_t)right.next < n) sym[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            Symbol *p = &sym[cur->prev];
            if (tok_bpe_merge_get(m, p->id, cur->id, &rank, &new_id))
                heap_push(h, (Merge){.rank = rank, .pos = (uint32_t)cur->prev, .new_id = new_id});
        }
        if (cur->next >= 0 && (size_t)cur->next < n) {
            if (tok_bpe_merge_get(m, cur->id, sym[cur->next].id, &rank, &new_id))
                heap_push(h, (Merge){.rank = rank, .pos = top.pos, .new_id = new_id});
        }
    }
}

static void sym_add(TokBpeScratch *s, size_t *n, int32_t id, uint32_t len) {
    if (*n == s->sym_cap) {
        s->sym_cap = s->sym_cap ? s->sym_cap * 2 : 256;
        s->sym = gt_xrealloc(s->sym, s->sym_cap * sizeof(Symbol));
    }
    s->sym[*n] = (Symbol){.id = id, .prev = (int32_t)*n - 1, .next = (int32_t)*n + 1, .len = len};
    (*n)++;
}

/* The vocabulary id of word[i..end) with the prefix (not first) / suffix (last), or -1. */
static int32_t char_id(const TokBpe *m, TokBpeScratch *s, const char *c, size_t n, bool first, bool last,
                       const char **spelled, size_t *spelled_len) {
    size_t pre = (!first && m->prefix) ? m->prefix_len : 0, suf = (last && m->suffix) ? m->suffix_len : 0;
    const char *key = c;
    size_t key_len = n;
    if (pre || suf) {
        if (s->buf_cap < pre + n + suf) {
            s->buf_cap = (pre + n + suf) * 2;
            s->buf = gt_xrealloc(s->buf, s->buf_cap);
        }
        if (pre) memcpy(s->buf, m->prefix, pre); /* prefix is NULL when only the suffix is set */
        memcpy(s->buf + pre, c, n);
        if (suf) memcpy(s->buf + pre + n, m->suffix, suf);
        key = s->buf;
        key_len = pre + n + suf;
    }
    *spelled = key;
    *spelled_len = key_len;
    const int32_t *id = tok_strmap_get(&m->vocab, key, key_len);
    return id ? *id : -1;
}

/* merge_word: the symbols of the word, then merge_all. Leaves the symbols in s->sym[0..*n). */
static void merge_word(const TokBpe *m, TokBpeScratch *s, const char *w, size_t len, size_t *n_out) {
    size_t n = 0;
    int32_t unk = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = tok_utf8_len((unsigned char)w[i]);
        bool first = i == 0, last = i + cl >= len;
        const char *spelled;
        size_t spelled_len;
        int32_t id = char_id(m, s, w + i, cl, first, last, &spelled, &spelled_len);
        if (id >= 0) {
            if (unk >= 0) {
                sym_add(s, &n, unk, unk_len);
                unk = -1;
            }
            sym_add(s, &n, id, (uint32_t)cl);
        } else {
            bool bytes_ok = m->byte_fallback;
            for (size_t k = 0; bytes_ok && k < spelled_len; k++)
                bytes_ok = m->byte_ids[(unsigned char)spelled[k]] >= 0;
            if (bytes_ok) {
                /* as HF: the byte tokens go in before a pending unk is flushed */
                for (size_t k = 0; k < spelled_len; k++) sym_add(s, &n, m->byte_ids[(unsigned char)spelled[k]], 1);
                i += cl;
                continue;
            }
            if (m->unk_id >= 0) {
                if (unk >= 0 && m->fuse_unk) {
                    unk_len += (uint32_t)cl;
                } else {
                    if (unk >= 0) sym_add(s, &n, unk, unk_len);
                    unk = m->unk_id;
                    unk_len = (uint32_t)cl;
                }
            }
        }
        i += cl;
    }
    if (unk >= 0) sym_add(s, &n, unk, unk_len);
    if (n > 0) s->sym[n - 1].next = -1;

    /* A symbol no merge names never changes, and nothing merges across it: the runs between such
     * symbols are independent (HF's single queue would interleave their merges, to the same
     * effect). A long word (a whole document, for a tokenizer without pre-tokenizer) is merged
     * run by run, in parallel when it is long, with a queue that stays small. */
    if (n < BPE_RUN_SPLIT_MIN) {
        bpe_merge_span(m, s->sym, n, 0, n, &s->heap);
    } else {
        size_t n_runs = 0, cap = 0;
        size_t *runs = NULL;
        for (size_t i = 0; i < n;) {
            while (i < n && !m->in_merge[s->sym[i].id]) i++;
            size_t r0 = i;
            while (i < n && m->in_merge[s->sym[i].id]) i++;
            if (i > r0 + 1) {
                if (n_runs == cap) {
                    cap = cap ? cap * 2 : 256;
                    runs = gt_xrealloc(runs, 2 * cap * sizeof(size_t));
                }
                runs[2 * n_runs] = r0;
                runs[2 * n_runs + 1] = i;
                n_runs++;
            }
        }
        Symbol *sym = s->sym;
#pragma omp parallel if (n >= BPE_RUN_PARALLEL_MIN)
        {
            Heap h = {0};
#pragma omp for schedule(dynamic, 64)
            for (size_t r = 0; r < n_runs; r++) bpe_merge_span(m, sym, n, runs[2 * r], runs[2 * r + 1], &h);
            free(h.v);
        }
        free(runs);
    }
    *n_out = n;
}

int tok_bpe_word(TokEncoder *e, const char *word, size_t len, TokIds *out, uint32_t *lens, GtError *err) {
    (void)err;
    const TokBpe *m = &tok_encoder_tokenizer(e)->bpe;
    TokBpeScratch *s = tok_encoder_bpe(e);
    if (len == 0) return 0;
    if (m->ignore_merges) {
        const int32_t *id = tok_strmap_get(&m->vocab, word, len);
        if (id) {
            tok_ids_push(out, *id);
            if (lens) lens[0] = (uint32_t)len;
            return 0;
        }
    }
    bool cacheable = len < BPE_CACHE_MAX_WORD;
    if (cacheable) {
        const int32_t *at = tok_strmap_get(&s->cache, word, len);
        if (at) {
            uint32_t off = s->cache_at[2 * (uint32_t)*at], cnt = s->cache_at[2 * (uint32_t)*at + 1];
            for (uint32_t i = 0; i < cnt; i++) tok_ids_push(out, s->cache_ids[off + i]);
            if (lens) memcpy(lens, s->cache_lens + off, cnt * sizeof(uint32_t));
            return 0;
        }
    }
    size_t n;
    merge_word(m, s, word, len, &n);
    size_t first = out->n;
    for (size_t i = 0; i < n; i++)
        if (s->sym[i].len != 0) {
            if (lens) lens[out->n - first] = s->sym[i].len;
            tok_ids_push(out, s->sym[i].id);
        }
    if (cacheable && s->cache_n < BPE_CACHE_MAX_ENTRIES) {
        size_t cnt = out->n - first;
        if (s->cache_n == s->cache_cap) {
            s->cache_cap = s->cache_cap ? s->cache_cap * 2 : 1024;
            s->cache_at = gt_xrealloc(s->cache_at, 2 * s->cache_cap * sizeof(uint32_t));
        }
        if (s->cache_ids_n + cnt > s->cache_ids_cap) {
            s->cache_ids_cap = (s->cache_ids_n + cnt) * 2;
            s->cache_ids = gt_xrealloc(s->cache_ids, s->cache_ids_cap * sizeof(int32_t));
            s->cache_lens = gt_xrealloc(s->cache_lens, s->cache_ids_cap * sizeof(uint32_t));
        }
        if (cnt) memcpy(s->cache_ids + s->cache_ids_n, out->ids + first, cnt * sizeof(int32_t));
        for (size_t i = 0, k = 0; i < n; i++)
            if (s->sym[i].len != 0) s->cache_lens[s->cache_ids_n + k++] = s->sym[i].len;
        bool inserted;
        tok_strmap_put(&s->cache, word, len, (int32_t)s->cache_n, &inserted);
        s->cache_at[2 * s->cache_n] = (uint32_t)s->cache_ids_n;
        s->cache_at[2 * s->cache_n + 1] = (uint32_t)cnt;
        s->cache_n++;
        s->cache_ids_n += cnt;
    }
    return 0;
}
