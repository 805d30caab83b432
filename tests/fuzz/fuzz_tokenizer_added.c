/* fuzz_tokenizer_added.c - libFuzzer target: added tokens (tokenizer_added.c's automaton) against
 * a naive leftmost-longest scan written here, HF's two passes included (tokens matched in the raw
 * text first, then normalized ones in the gaps). The input: up to 64 tokens, each a length byte
 * (2..6, a bit of it choosing raw or normalized) and that many letters of {a, b, c}, then the
 * text (each byte one of a, b, c, space). The model: a BPE over those 4 characters without merges,
 * so text outside tokens is one id per character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

typedef struct {
    char s[8];
    int len;
    bool normalized;
} Added;

static int naive_find(const Added *t, int k, bool norm, const char *x, size_t at, size_t b, size_t *start) {
    for (size_t i = at; i < b; i++) {
        int best = -1;
        for (int j = 0; j < k; j++)
            if (t[j].normalized == norm && i + (size_t)t[j].len <= b && memcmp(x + i, t[j].s, (size_t)t[j].len) == 0 &&
                (best < 0 || t[j].len > t[best].len))
                best = j;
        if (best >= 0) {
            *start = i;
            return best;
        }
    }
    return -1;
}

static void chars(const char *x, size_t a, size_t b, TokIds *out) {
    for (size_t i = a; i < b; i++) tok_ids_push(out, x[i] == ' ' ? 3 : x[i] - 'a');
}

static void naive_gap(const Added *t, int k, const char *x, size_t a, size_t b, TokIds *out) {
    size_t at = a, start;
    int j;
    while ((j = naive_find(t, k, true, x, at, b, &start)) >= 0) {
        chars(x, at, start, out);
        tok_ids_push(out, 4 + j);
        at = start + (size_t)t[j].len;
    }
    chars(x, at, b, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Added t[64];
    int k = 0;
    size_t p = 0;
    if (size == 0) return 0;
    int want_k = data[p++] % 64;
    while (k < want_k && p < size) {
        Added a = {.len = 2 + data[p] % 5, .normalized = (data[p] >> 3) & 1}; /* one letter is the model's */
        p++;
        if (p + (size_t)a.len > size) break;
        for (int i = 0; i < a.len; i++) a.s[i] = (char)('a' + data[p + (size_t)i] % 3);
        p += (size_t)a.len;
        bool dup = false;
        for (int i = 0; i < k && !dup; i++) dup = t[i].len == a.len && memcmp(t[i].s, a.s, (size_t)a.len) == 0;
        if (!dup) t[k++] = a;
    }
    size_t n = size - p;
    char *x = malloc(n + 1);
    if (!x) return 0;
    for (size_t i = 0; i < n; i++) x[i] = "abc "[data[p + i] % 4];
    char json[8192];
    int o = snprintf(json, sizeof json, "{\"added_tokens\": [");
    for (int j = 0; j < k; j++)
        o += snprintf(json + o, sizeof json - (size_t)o, "%s{\"id\": %d, \"content\": \"%s\", \"normalized\": %s}",
                      j ? ", " : "", 4 + j, t[j].s, t[j].normalized ? "true" : "false");
    snprintf(json + o, sizeof json - (size_t)o,
             "], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \" \": 3}, \"merges\": []}}");
    Tokenizer *tk = NULL;
    GtError err = {0};
    if (tokenizer_load_memory(&tk, "added", json, strlen(json), &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
    TokEncoder *e = tok_encoder_new(tk);
    TokIds got = {0}, want = {0};
    if (tok_encode(e, "text", x, n, false, &got, &err) != 0) abort();
    size_t at = 0, start;
    int j;
    while ((j = naive_find(t, k, false, x, at, n, &start)) >= 0) {
        naive_gap(t, k, x, at, start, &want);
        tok_ids_push(&want, 4 + j);
        at = start + (size_t)t[j].len;
    }
    naive_gap(t, k, x, at, n, &want);
    if (got.n != want.n || (got.n && memcmp(got.ids, want.ids, got.n * sizeof(int32_t)) != 0)) abort();
    tok_ids_free(&got);
    tok_ids_free(&want);
    tok_encoder_free(e);
    tokenizer_free(tk);
    free(x);
    return 0;
}
