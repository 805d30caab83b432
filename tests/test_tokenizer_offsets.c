/* test_tokenizer_offsets.c - tok_encode_offsets (each token's [start, end) in the text) against
 * Hugging Face's own Encoding.offsets on the shared folder's real tokenizers: Llama-3 and 3.1
 * (byte-level, a Split regex), Qwen3 (NFC, byte-level) and Llama-2 (Prepend and Replace
 * normalizers, SentencePiece BPE with byte fallback). The reference is tests/tools/hf_tokenize.py
 * --offsets (PyPI `tokenizers`, its character offsets turned into UTF-8 byte offsets there); the
 * inputs are tests/tools/make_tok_corpus.py's corpus (multilingual text, code, whitespace runs,
 * special tokens in text, random strings by Unicode category) and a handful of lines written here
 * for the cases offsets turn on: leading, trailing and double spaces, newlines, characters the
 * Llama-2 vocabulary spells as <0xXX> byte tokens, a byte-level token that is part of a
 * character, special tokens glued to text. Each line is "ID:START:END ..." on both sides; ids and
 * offsets must be identical. For Qwen3 that holds on the lines NFC leaves as they are; where NFC
 * changes the text gtrain gives a changed run's tokens the run's whole span, HF the first source
 * character's (documented in tokenizer.h), so there the ids must be HF's and each span must
 * hold HF's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_backend_select.h"
#include "test_util.h"
#include "tok_hf_util.h"
#include "tokenizer.h"

/* JSON strings, one a line: the targeted cases (added to the corpus) */
static const char *const EXTRA[] = {
    "\"Hello world\"",
    "\" Hello  world \"",
    "\"  two leading, three trailing   \"",
    "\"line one\\nline two\\n\\n\\tindented\\r\\nend\\n\"",
    "\"na\\u00efve caf\\u00e9 \\u65e5\\u672c\\u8a9e \\ud83d\\ude42 \\u2014 \\u20ac3.50\"",
    "\"\\ud800\\udc00\\u0f3a\\u1a2b \\ud83e\\udd8b\\ud83e\\udd8b rare: \\u2e80\\u31c0\\ua000\"",
    "\"<s>[INST] hi [/INST] there </s><s>[INST] again\"",
    "\"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nhi<|eot_id|>\"",
    "\"<|im_start|>user\\nhello<|im_end|>\\n<|im_start|>assistant\\n\"",
    "\"</s>\"",
    "\" </s> \"",
    "\"x\"",
    "\" \"",
    "\"\"",
    "\"\\u2581already a metaspace \\u2581\\u2581 twice\"",
    "\"tabs\\tand\\u00a0no-break\\u3000ideographic space\"",
};

/* text NFC changes: a combining accent, a singleton (Angstrom sign), Hangul jamo, a mark reordering */
static const char *const NOT_NFC[] = {
    "\"cafe\u0301 au lait\"",
    "\"\u212b and \u2126 \u00c5\"",
    "\"\u1100\u1161\u11a8 x \u1100\u1161\"",
    "\"a\u0323\u0302 q\u0307\u0323 <|im_end|>e\u0301\"",
};

/* The corpus with the lines written here; which of them: every line (mode 0), those NFC leaves as
 * they are (1), those NFC changes (2, with NOT_NFC). */
static const char *offsets_corpus(HfWs *w, int mode) {
    static char path[256];
    snprintf(path, sizeof path, "%s/offsets_in%d.jsonl", w->dir, mode);
    const char *in = corpus(w);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (size_t i = 0; mode != 2 && i < sizeof EXTRA / sizeof *EXTRA; i++) fprintf(f, "%s\n", EXTRA[i]);
    for (size_t i = 0; mode == 2 && i < sizeof NOT_NFC / sizeof *NOT_NFC; i++) fprintf(f, "%s\n", NOT_NFC[i]);
    fclose(f);
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             CMD_TIMEOUT PY " -c 'import json, sys, unicodedata\n"
                            "for l in open(sys.argv[1], encoding=\"utf-8\"):\n"
                            "    s = json.loads(l)\n"
                            "    m, same = sys.argv[2], unicodedata.normalize(\"NFC\", s) == s\n"
                            "    if m == \"0\" or (m == \"1\") == same: sys.stdout.write(l)\n"
                            "' '%s' %d >>'%s' 2>'%s.err'",
             in, mode, path, path);
    sh_ok(cmd, path, "filtering the corpus");
    return path;
}

/* gtrain's ids and offsets of each line of in (JSON strings) into out */
static void gtrain_offsets(const char *tok_path, const char *in, const char *out) {
    Tokenizer *t = NULL;
    GtError err = {0};
    cr_assert_eq(tokenizer_load(&t, tok_path, &err), 0, "%s", err.msg);
    TokEncoder *e = tok_encoder_new(t);
    Lines l;
    lines_read(&l, in);
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    TokIds ids = {0}, plain = {0};
    TokOffsets offs = {0};
    for (size_t i = 0; i < l.n; i++) {
        char *s;
        size_t n;
        cr_assert(json_string_bytes(l.at[i], l.len[i], &s, &n), "%s:%zu: not a JSON string", in, i + 1);
        ids.n = plain.n = offs.n = 0;
        cr_assert_eq(tok_encode_offsets(e, "line", s, n, false, &ids, &offs, &err), 0, "%s", err.msg);
        cr_assert_eq(offs.n, ids.n, "%s:%zu: %zu offsets for %zu ids", in, i + 1, offs.n, ids.n);
        /* the offsets path gives the ids the plain path gives */
        cr_assert_eq(tok_encode(e, "line", s, n, false, &plain, &err), 0, "%s", err.msg);
        cr_assert(plain.n == ids.n && memcmp(plain.ids, ids.ids, ids.n * sizeof *ids.ids) == 0,
                  "%s:%zu: tok_encode_offsets's ids differ from tok_encode's", in, i + 1);
        for (size_t k = 0; k < ids.n; k++)
            fprintf(f, "%s%d:%zu:%zu", k ? " " : "", ids.ids[k], offs.v[2 * k], offs.v[2 * k + 1]);
        fputc('\n', f);
        free(s);
    }
    fclose(f);
    lines_free(&l);
    tok_ids_free(&ids);
    tok_ids_free(&plain);
    tok_offsets_free(&offs);
    tok_encoder_free(e);
    tokenizer_free(t);
}

static void offsets_match(const RefTokenizer *t, int mode) {
    HfWs w;
    ws_open(&w, "gt_tok_offsets");
    char tok[512], ref[512], got[512];
    ref_tokenizer_path(t, tok, sizeof tok);
    const char *in = offsets_corpus(&w, mode);
    snprintf(ref, sizeof ref, "%s/hf.offsets", w.dir);
    snprintf(got, sizeof got, "%s/gtrain.offsets", w.dir);
    run_hf(&w, tok, "--offsets", in, ref);
    gtrain_offsets(tok, in, got);
    char what[128];
    snprintf(what, sizeof what, "%s offsets", t->name);
    expect_same_lines(&w, what, in, ref, got);
    ws_close(&w);
}

Test(tokenizer_offsets, llama3_offsets_equal_hf, .timeout = 300) { offsets_match(&REF_LLAMA3, 0); }
Test(tokenizer_offsets, llama3_1_offsets_equal_hf, .timeout = 300) { offsets_match(&REF_LLAMA3_1, 0); }
Test(tokenizer_offsets, qwen3_offsets_equal_hf, .timeout = 300) { offsets_match(&REF_QWEN3, 1); }
Test(tokenizer_offsets, llama2_offsets_equal_hf, .timeout = 300) { offsets_match(&REF_LLAMA2, 0); }

/* Qwen3 on text NFC changes: the same ids as HF's, and each token's span holds HF's (gtrain's are
 * never narrower: a changed run's whole span); the spans outside changed runs are HF's exactly
 * (checked above on the rest). */
Test(tokenizer_offsets, qwen3_offsets_through_nfc_hold_hf, .timeout = 300) {
    HfWs w;
    ws_open(&w, "gt_tok_offsets");
    char tok[512], ref[512], got[512];
    ref_tokenizer_path(&REF_QWEN3, tok, sizeof tok);
    const char *in = offsets_corpus(&w, 2);
    snprintf(ref, sizeof ref, "%s/hf.offsets", w.dir);
    snprintf(got, sizeof got, "%s/gtrain.offsets", w.dir);
    run_hf(&w, tok, "--offsets", in, ref);
    gtrain_offsets(tok, in, got);
    Lines a, b;
    lines_read(&a, ref);
    lines_read(&b, got);
    cr_assert_eq(a.n, b.n, "%zu lines from HF, %zu from gtrain", a.n, b.n);
    cr_assert_geq(a.n, sizeof NOT_NFC / sizeof *NOT_NFC);
    size_t tokens = 0;
    for (size_t i = 0; i < a.n; i++) {
        char *pa = strndup(a.at[i], a.len[i]), *pb = strndup(b.at[i], b.len[i]), *sa, *sb;
        cr_assert(pa && pb);
        char *ta = strtok_r(pa, " ", &sa), *tb = strtok_r(pb, " ", &sb);
        for (; ta && tb; ta = strtok_r(NULL, " ", &sa), tb = strtok_r(NULL, " ", &sb), tokens++) {
            long ia, ib;
            size_t s0, e0, s1, e1;
            cr_assert_eq(sscanf(ta, "%ld:%zu:%zu", &ia, &s0, &e0), 3, "HF line %zu: %s", i + 1, ta);
            cr_assert_eq(sscanf(tb, "%ld:%zu:%zu", &ib, &s1, &e1), 3, "gtrain line %zu: %s", i + 1, tb);
            cr_expect(ia == ib && s1 <= s0 && e1 >= e0, "line %zu: HF %s, gtrain %s", i + 1, ta, tb);
        }
        cr_expect(!ta && !tb, "line %zu: HF and gtrain give different numbers of tokens", i + 1);
        free(pa);
        free(pb);
    }
    cr_log_info("qwen3 through NFC: %zu lines, %zu tokens", a.n, tokens);
    lines_free(&a);
    lines_free(&b);
    ws_close(&w);
}

/* With add_special_tokens the post-processor's tokens come first with (0, 0), as HF's. */
Test(tokenizer_offsets, llama2_add_special_tokens_offsets_equal_hf, .timeout = 300) {
    HfWs w;
    ws_open(&w, "gt_tok_offsets");
    char tok[512], in[512], ref[512];
    ref_tokenizer_path(&REF_LLAMA2, tok, sizeof tok);
    snprintf(in, sizeof in, "%s/in.jsonl", w.dir);
    snprintf(ref, sizeof ref, "%s/hf.offsets", w.dir);
    FILE *f = fopen(in, "w");
    cr_assert_not_null(f);
    fprintf(f, "\"Hello world\"\n\" caf\\u00e9\\n\"\n");
    fclose(f);
    run_hf(&w, tok, "--offsets --add-special-tokens", in, ref);
    Tokenizer *t = NULL;
    GtError err = {0};
    cr_assert_eq(tokenizer_load(&t, tok, &err), 0, "%s", err.msg);
    TokEncoder *e = tok_encoder_new(t);
    Lines want;
    lines_read(&want, ref);
    const char *texts[] = {"Hello world", " caf\xc3\xa9\n"};
    cr_assert_eq(want.n, 2);
    for (int i = 0; i < 2; i++) {
        TokIds ids = {0};
        TokOffsets offs = {0};
        cr_assert_eq(tok_encode_offsets(e, "x", texts[i], strlen(texts[i]), true, &ids, &offs, &err), 0, "%s", err.msg);
        char line[4096];
        size_t o = 0;
        for (size_t k = 0; k < ids.n; k++)
            o += (size_t)snprintf(line + o, sizeof line - o, "%s%d:%zu:%zu", k ? " " : "", ids.ids[k], offs.v[2 * k],
                                  offs.v[2 * k + 1]);
        cr_expect(strlen(line) == want.len[i] && memcmp(line, want.at[i], want.len[i]) == 0,
                  "line %d: gtrain %s, HF %.*s", i + 1, line, (int)want.len[i], want.at[i]);
        tok_ids_free(&ids);
        tok_offsets_free(&offs);
    }
    lines_free(&want);
    tok_encoder_free(e);
    tokenizer_free(t);
    ws_close(&w);
}
