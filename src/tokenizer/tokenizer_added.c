/* tokenizer_added.c - matching a tokenizer's added tokens in text, as HF's AddedVocabulary does
 * (aho_corasick with MatchKind::LeftmostLongest): of the matches that start leftmost, the
 * longest; the next search starts where it ended. An Aho-Corasick automaton finds it in one
 * pass: the candidate is kept until the automaton's state can no longer extend a match that
 * starts at or before the candidate's start. Building is linear in the tokens' bytes (times the
 * alphabet, at worst); a search costs the bytes it reads, and a match's search reads at most the
 * longest token past the match. */
#include <stdlib.h>

#include "tokenizer_internal.h"

static int32_t go(const TokAddedSet *s, int32_t node, uint8_t c) {
    if (node == 0) return s->root_next[c];
    for (int32_t k = s->child[node]; k >= 0; k = s->sibling[k])
        if (s->byte[k] == c) return k;
    return -1;
}

static int32_t new_node(TokAddedSet *s, int32_t parent, uint8_t c) {
    if (s->n_nodes == s->cap_nodes) {
        uint32_t cap = s->cap_nodes ? s->cap_nodes * 2 : 256;
        s->child = gt_xrealloc(s->child, cap * sizeof(int32_t));
        s->sibling = gt_xrealloc(s->sibling, cap * sizeof(int32_t));
        s->fail = gt_xrealloc(s->fail, cap * sizeof(int32_t));
        s->out = gt_xrealloc(s->out, cap * sizeof(int32_t));
        s->depth = gt_xrealloc(s->depth, cap * sizeof(uint32_t));
        s->byte = gt_xrealloc(s->byte, cap);
        s->cap_nodes = cap;
    }
    int32_t n = (int32_t)s->n_nodes++;
    s->child[n] = -1;
    s->sibling[n] = -1;
    s->fail[n] = 0;
    s->out[n] = -1;
    s->byte[n] = c;
    s->depth[n] = parent >= 0 ? s->depth[parent] + 1 : 0;
    if (parent == 0) {
        s->root_next[c] = n;
    } else if (parent > 0) {
        s->sibling[n] = s->child[parent];
        s->child[parent] = n;
    }
    return n;
}

int tok_added_insert(TokAddedSet *set, const TokAddedToken *added, int tok) {
    if (set->n_nodes == 0) {
        for (int c = 0; c < 256; c++) set->root_next[c] = -1;
        new_node(set, -1, 0);
    }
    const TokAddedToken *a = &added[tok];
    int32_t node = 0;
    for (size_t i = 0; i < a->match_len; i++) {
        uint8_t c = (uint8_t)a->match[i];
        int32_t next = go(set, node, c);
        node = next >= 0 ? next : new_node(set, node, c);
    }
    if (set->out[node] >= 0) return set->out[node];
    set->out[node] = tok; /* for now: the token that ends here exactly */
    return -1;
}

int tok_added_finish(TokAddedSet *set, const TokAddedToken *added, const char *file, GtError *err) {
    (void)added;
    if (set->n_nodes == 0) return 0;
    int32_t *queue = gt_xmalloc(set->n_nodes * sizeof(int32_t));
    uint32_t head = 0, tail = 0;
    for (int c = 0; c < 256; c++)
        if (set->root_next[c] >= 0) queue[tail++] = set->root_next[c]; /* their fail: the root */
    while (head < tail) {
        int32_t u = queue[head++];
        if ((head & 0xFFFF) == 0 && gt_stop_signal()) {
            free(queue);
            return gt_error(err, GT_EXIT_FAILURE, "%s: loading the added tokens stopped by signal %d", file, gt_stop_signal());
        }
        for (int32_t v = set->child[u]; v >= 0; v = set->sibling[v]) {
            uint8_t c = set->byte[v];
            int32_t f = set->fail[u], g;
            while ((g = go(set, f, c)) < 0 && f != 0) f = set->fail[f];
            set->fail[v] = g >= 0 && g != v ? g : 0;
            if (set->out[v] < 0) set->out[v] = set->out[set->fail[v]]; /* the longest token it ends with */
            queue[tail++] = v;
        }
    }
    free(queue);
    return 0;
}

bool tok_added_find(const TokAddedSet *set, const TokAddedToken *added, const char *text, size_t len, size_t from,
                    size_t *start, size_t *end, int *tok) {
    if (set->n_nodes == 0) return false;
    const uint8_t *s = (const uint8_t *)text;
    int32_t st = 0;
    bool have = false;
    size_t cs = 0, ce = 0;
    int ct = -1;
    for (size_t j = from; j < len; j++) {
        if (st == 0) { /* nothing pending (a candidate ends at the root): skip to a token's first byte */
            while (j < len && set->root_next[s[j]] < 0) j++;
            if (j == len) break;
        }
        int32_t g;
        while ((g = go(set, st, s[j])) < 0 && st != 0) st = set->fail[st];
        st = g >= 0 ? g : 0;
        size_t e = j + 1;
        /* no match starting at or before the candidate's start can still grow: it is the one */
        if (have && e - set->depth[st] > cs) break;
        int o = set->out[st];
        if (o >= 0) {
            size_t ms = e - added[o].match_len;
            if (!have || ms < cs || (ms == cs && e > ce)) {
                have = true;
                cs = ms;
                ce = e;
                ct = o;
            }
        }
    }
    if (!have) return false;
    *start = cs;
    *end = ce;
    *tok = ct;
    return true;
}

void tok_added_free(TokAddedSet *set) {
    free(set->tokens);
    free(set->child);
    free(set->sibling);
    free(set->fail);
    free(set->out);
    free(set->depth);
    free(set->byte);
    memset(set, 0, sizeof *set);
}
