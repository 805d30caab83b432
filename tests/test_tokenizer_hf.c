/* test_tokenizer_hf.c - `gtrain tokenize` against Hugging Face's own tokenizers library, on real
 * tokenizer.json files: Llama-3 (byte-level BPE, a Split regex, ignore_merges), Llama-3.1 (the same
 * with a Sequence post-processor: ByteLevel then a TemplateProcessing that adds <|begin_of_text|>),
 * Qwen3 (byte-level BPE after NFC, added tokens that are not special) and a Llama-2/Mistral-style one
 * (SentencePiece BPE with byte fallback, Prepend and Replace normalizers, a TemplateProcessing that
 * adds <s>).
 *
 * The reference is tests/tools/hf_tokenize.py: PyPI's `tokenizers` (HF's Rust library through its
 * Python binding, pinned in tests/requirements-refs.txt) run by the references' Python
 * ($GTRAIN_REFS_PY), nothing of gtrain's. The tokenizer files are the project's shared ones,
 * $GTRAIN_ROOT/../shared/data/tokenizers/{llama3,llama3_1,qwen3,llama2}/tokenizer.json (never
 * copied into the repository). A missing Python or file fails the test, naming it; nothing skips.
 * The running and comparing is tok_hf_util.c's.
 *
 *   identity: tests/tools/make_tok_corpus.py's corpus (Shakespeare, multilingual, code,
 *             whitespace, numbers, contractions, special tokens in text, long words, random
 *             strings by Unicode category) through both, with and without --add-special-tokens;
 *             every line of ids must be identical. A mismatch prints the first differing inputs
 *             with both id lists and keeps the scratch directory with all the files.
 *   decode:   HF's ids of the corpus and random id arrays through both decoders, with and without
 *             --skip-special-tokens: gtrain's text must equal HF's; for Llama-3 and 3.1 (lossless)
 *             decode(encode(x)) must also be x itself.
 *   hostile:  tokenizer.json files written here (merges naming tokens not in the vocabulary, a
 *             1 GB vocabulary claim, nesting 100000 deep, an unknown normalizer, a truncated file,
 *             BPE dropout, a Unigram model, a file that is not UTF-8, ...): exit 2, one line on
 *             stderr naming the file, nothing on stdout. HF refuses most of them too (each is
 *             given to hf_tokenize.py as well, and what HF does is checked); the vocab id of
 *             2^30, dropout and Unigram it accepts, and gtrain refuses them on purpose (a
 *             vocabulary that size, randomness, a model it does not implement). The small valid
 *             file they are made from, and variants HF accepts, must give HF's ids.
 * Under ASan and on the CUDA simulator the corpus is smaller (the same sections, fewer lines): the
 * tokenizer runs no backend, so the simulator's pass only repeats make test's, quickly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_backend_select.h"
#include "test_util.h"
#include "run_util.h"
#include "tok_hf_util.h"

#define DEEP_NESTING 100000

/* ---------------------------------------------------------------- identity */

static void identity(const RefTokenizer *t, bool add_special) {
    HfWs w;
    ws_open(&w, "gt_tok_hf");
    char tok[512], ref[512], got[512], what[128];
    ref_tokenizer_path(t, tok, sizeof tok);
    const char *in = corpus(&w);
    const char *flags = add_special ? "--add-special-tokens" : "";
    snprintf(ref, sizeof ref, "%s/hf.ids", w.dir);
    snprintf(got, sizeof got, "%s/gtrain.ids", w.dir);
    snprintf(what, sizeof what, "%s%s", t->name, add_special ? " --add-special-tokens" : "");
    double t0 = now_seconds();
    run_hf(&w, tok, flags, in, ref);
    double t1 = now_seconds();
    run_gtrain(&w, tok, flags, in, got);
    double t2 = now_seconds();
    expect_same_lines(&w, what, in, ref, got);
    cr_log_info("%s: HF %.2f s, gtrain %.2f s", what, t1 - t0, t2 - t1);
    ws_close(&w);
}

Test(tokenizer_hf, llama3_ids_identical, .timeout = 300) { identity(&REF_LLAMA3, false); }
Test(tokenizer_hf, llama3_ids_identical_add_special_tokens, .timeout = 300) { identity(&REF_LLAMA3, true); }
Test(tokenizer_hf, llama3_1_ids_identical, .timeout = 300) { identity(&REF_LLAMA3_1, false); }
Test(tokenizer_hf, llama3_1_ids_identical_add_special_tokens, .timeout = 300) { identity(&REF_LLAMA3_1, true); }
Test(tokenizer_hf, qwen3_ids_identical, .timeout = 300) { identity(&REF_QWEN3, false); }
Test(tokenizer_hf, qwen3_ids_identical_add_special_tokens, .timeout = 300) { identity(&REF_QWEN3, true); }
Test(tokenizer_hf, llama2_ids_identical, .timeout = 300) { identity(&REF_LLAMA2, false); }
Test(tokenizer_hf, llama2_ids_identical_add_special_tokens, .timeout = 300) { identity(&REF_LLAMA2, true); }

/* ---------------------------------------------------------------- decode */

/* HF's ids of the corpus and random arrays, decoded by both, with and without --skip-special-tokens */
static void decode_check(const RefTokenizer *t) {
    HfWs w;
    ws_open(&w, "gt_tok_hf_dec");
    char tok[512], hf_ids[512], arrays[512], ref[512], got[512], what[128];
    ref_tokenizer_path(t, tok, sizeof tok);
    tok_check_ref_counts(&w, t, tok); /* the random id arrays are drawn from these counts */
    const char *in = corpus(&w);
    snprintf(hf_ids, sizeof hf_ids, "%s/hf.ids", w.dir);
    snprintf(arrays, sizeof arrays, "%s/ids.jsonl", w.dir);
    snprintf(ref, sizeof ref, "%s/hf.decoded", w.dir);
    snprintf(got, sizeof got, "%s/gtrain.decoded", w.dir);
    run_hf(&w, tok, "", in, hf_ids);
    size_t n_corpus = write_id_arrays(t, hf_ids, arrays);
    run_decodes(&w, tok, "", arrays, ref, got);
    expect_same_decodes(&w, t->name, arrays, ref, got, t->lossless ? in : NULL, n_corpus);
    snprintf(ref, sizeof ref, "%s/hf.decoded.skip", w.dir);
    snprintf(got, sizeof got, "%s/gtrain.decoded.skip", w.dir);
    snprintf(what, sizeof what, "%s --skip-special-tokens", t->name);
    run_decodes(&w, tok, "--skip-special-tokens", arrays, ref, got);
    expect_same_decodes(&w, what, arrays, ref, got, NULL, 0);
    ws_close(&w);
}

Test(tokenizer_hf, llama3_decode_matches_and_round_trips, .timeout = 300) { decode_check(&REF_LLAMA3); }
Test(tokenizer_hf, llama3_1_decode_matches_and_round_trips, .timeout = 300) { decode_check(&REF_LLAMA3_1); }
Test(tokenizer_hf, qwen3_decode_matches, .timeout = 300) { decode_check(&REF_QWEN3); }
Test(tokenizer_hf, llama2_decode_matches, .timeout = 300) { decode_check(&REF_LLAMA2); }

/* ---------------------------------------------------------------- hostile tokenizer.json files */

/* A growable text buffer. */
typedef struct {
    char *s;
    size_t n, cap;
} Buf;

static void buf_add(Buf *b, const char *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        cr_assert_not_null(b->s);
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void buf_str(Buf *b, const char *p) { buf_add(b, p, strlen(p)); }

static void buf_repeat(Buf *b, const char *p, int times) {
    for (int i = 0; i < times; i++) buf_str(b, p);
}

/* a JSON string literal of a UTF-8 token (only " and \ need escaping in the byte-level alphabet) */
static void buf_json_string(Buf *b, const char *p) {
    buf_str(b, "\"");
    for (; *p; p++) {
        if (*p == '"' || *p == '\\') buf_str(b, "\\");
        buf_add(b, p, 1);
    }
    buf_str(b, "\"");
}

/* GPT-2's bytes_to_unicode: the byte-level alphabet's character for byte v, as UTF-8 */
static void byte_level_char(int v, char out[4]) {
    int cp;
    if ((v >= '!' && v <= '~') || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE && v <= 0xFF)) {
        cp = v;
    } else {
        int k = 0; /* the rank of v among the bytes that are not printable */
        for (int u = 0; u < v; u++)
            if (!((u >= '!' && u <= '~') || (u >= 0xA1 && u <= 0xAC) || (u >= 0xAE && u <= 0xFF))) k++;
        cp = 256 + k;
    }
    size_t n = 0;
    put_utf8(out, &n, (uint32_t)cp);
    out[n] = 0;
}

/* What a variant replaces in the small valid file (NULL: the valid part). */
typedef struct {
    const char *normalizer, *pre_tokenizer; /* JSON values */
    const char *model_type, *dropout;
    const char *vocab_extra, *merges_extra, *added_id;
    const char *model; /* the whole "model" value */
    bool merges_as_pairs; /* [["a", "b"], ...] (tokenizers >= 0.20) instead of ["a b", ...] */
    int deep_normalizer; /* a Sequence normalizer nested this deep */
} TokVariant;

/* A small byte-level BPE tokenizer.json: the 256 byte tokens, merges up to "Ġworld"-like pieces
 * and "hello", one added special token; a variant changes one part. */
static char *tokenizer_json(const TokVariant *v) {
    static const char *const merges[][2] = {{"Ġ", "t"},  {"h", "e"},   {"Ġt", "he"},   {"l", "l"},
                                            {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"},    {"o", "r"},
                                            {"Ġw", "or"}, {"l", "d"},    {"Ġwor", "ld"}};
    int n_merges = (int)(sizeof merges / sizeof merges[0]);
    Buf b = {0};
    buf_str(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n \"added_tokens\": [{\"id\": ");
    char num[32];
    snprintf(num, sizeof num, "%d", 256 + n_merges);
    buf_str(&b, v->added_id ? v->added_id : num);
    buf_str(&b, ", \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                "\"normalized\": false, \"special\": true}],\n \"normalizer\": ");
    if (v->deep_normalizer) {
        buf_repeat(&b, "{\"type\": \"Sequence\", \"normalizers\": [", v->deep_normalizer);
        buf_str(&b, "{\"type\": \"NFC\"}");
        buf_repeat(&b, "]}", v->deep_normalizer);
    } else {
        buf_str(&b, v->normalizer ? v->normalizer : "null");
    }
    buf_str(&b, ",\n \"pre_tokenizer\": ");
    buf_str(&b, v->pre_tokenizer ? v->pre_tokenizer
                                 : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}");
    buf_str(&b, ",\n \"post_processor\": null,\n \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                "\"trim_offsets\": true, \"use_regex\": true},\n \"model\": ");
    if (v->model) {
        buf_str(&b, v->model);
    } else {
        buf_str(&b, "{\"type\": \"");
        buf_str(&b, v->model_type ? v->model_type : "BPE");
        buf_str(&b, "\", \"dropout\": ");
        buf_str(&b, v->dropout ? v->dropout : "null");
        buf_str(&b, ", \"unk_token\": null, \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                    "\"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n  \"vocab\": {");
        for (int c = 0; c < 256; c++) {
            char ch[5];
            byte_level_char(c, ch);
            buf_json_string(&b, ch);
            snprintf(num, sizeof num, ": %d, ", c);
            buf_str(&b, num);
        }
        for (int m = 0; m < n_merges; m++) {
            char joined[32];
            snprintf(joined, sizeof joined, "%s%s", merges[m][0], merges[m][1]);
            buf_json_string(&b, joined);
            snprintf(num, sizeof num, ": %d%s", 256 + m, m + 1 < n_merges ? ", " : "");
            buf_str(&b, num);
        }
        if (v->vocab_extra) buf_str(&b, v->vocab_extra);
        buf_str(&b, "},\n  \"merges\": [");
        for (int m = 0; m < n_merges; m++) {
            if (m) buf_str(&b, ", ");
            if (v->merges_as_pairs) {
                buf_str(&b, "[");
                buf_json_string(&b, merges[m][0]);
                buf_str(&b, ", ");
                buf_json_string(&b, merges[m][1]);
                buf_str(&b, "]");
            } else {
                char pair[32];
                snprintf(pair, sizeof pair, "%s %s", merges[m][0], merges[m][1]);
                buf_json_string(&b, pair);
            }
        }
        if (v->merges_extra) buf_str(&b, v->merges_extra);
        buf_str(&b, "]}");
    }
    buf_str(&b, "\n}\n");
    return b.s;
}

/* The small file and variants Hugging Face accepts are real tokenizers: HF and gtrain give the same
 * ids on a few texts. HF gives an added token the next free id whatever the file says (and gtrain
 * follows, with a warning). */
Test(tokenizer_hf, small_tokenizer_json_files_match, .timeout = 120) {
    static const struct {
        const char *name;
        TokVariant variant;
    } accepted[] = {
        {"valid", {0}},
        {"merges_as_pairs", {.merges_as_pairs = true}},
        {"added_token_id_1gb", {.added_id = "1073741824"}},
    };
    static const char texts[] = "\"hello world\"\n\" the world\"\n\"hello<|endoftext|> world\"\n\"\"\n"
                                "\"\\\"quoted\\\\\"\n\"h\\u00e9llo \\u65e5\\u672c \\ud83d\\udc4d\"\n"
                                "\"  hellohello\\n\\tworld  \"\n";
    HfWs w;
    ws_open(&w, "gt_tok_hf_small");
    char in[512], tok[512], ref[512], got[512];
    snprintf(in, sizeof in, "%s/in.jsonl", w.dir);
    test_write_file(in, texts, sizeof texts - 1);
    for (size_t k = 0; k < sizeof accepted / sizeof accepted[0]; k++) {
        char *json = tokenizer_json(&accepted[k].variant);
        snprintf(tok, sizeof tok, "%s/%s.json", w.dir, accepted[k].name);
        snprintf(ref, sizeof ref, "%s/%s.hf.ids", w.dir, accepted[k].name);
        snprintf(got, sizeof got, "%s/%s.gtrain.ids", w.dir, accepted[k].name);
        test_write_file(tok, json, strlen(json));
        free(json);
        run_hf(&w, tok, "", in, ref);
        run_gtrain(&w, tok, "", in, got);
        expect_same_lines(&w, accepted[k].name, in, ref, got);
    }
    ws_close(&w);
}

typedef struct {
    const char *name;
    TokVariant variant; /* the small valid file with one part changed, unless raw or raw_kind */
    const char *raw;    /* the whole file */
    int raw_kind;       /* 1: the valid file cut in half; 2: [[[...]]] DEEP_NESTING deep; 3: a directory */
    bool hf_loads;      /* Hugging Face loads it (gtrain refuses it on purpose); checked, so the list stays true */
} Hostile;

static const Hostile HOSTILE[] = {
    {"merge_of_a_token_not_in_vocab", {.merges_extra = ", \"zz yy\""}, NULL, 0, false},
    {"merge_result_not_in_vocab", {.merges_extra = ", \"l o\""}, NULL, 0, false},
    {"vocab_id_1gb", {.vocab_extra = ", \"big\": 1073741824"}, NULL, 0, true},
    {"vocab_id_negative", {.vocab_extra = ", \"neg\": -1"}, NULL, 0, false},
    {"vocab_id_fraction", {.vocab_extra = ", \"half\": 300.5"}, NULL, 0, false},
    {"normalizer_nested_100000_deep", {.deep_normalizer = DEEP_NESTING}, NULL, 0, false},
    {"unknown_normalizer_type", {.normalizer = "{\"type\": \"Frobnicate\"}"}, NULL, 0, false},
    {"invalid_split_regex", {.pre_tokenizer = "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"((\"}, "
                                              "\"behavior\": \"Isolated\", \"invert\": false}"}, NULL, 0, false},
    {"bpe_dropout", {.dropout = "0.1"}, NULL, 0, true},
    {"unigram_model", {.model = "{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0.0], [\"a\", -1.5], "
                                "[\"b\", -2.0]], \"byte_fallback\": false}"}, NULL, 0, true},
    {"unknown_model_type", {.model_type = "WordPiece"}, NULL, 0, false},
    {"vocab_is_an_array", {.model = "{\"type\": \"BPE\", \"vocab\": [1, 2], \"merges\": []}"}, NULL, 0, false},
    {"invalid_utf8_in_vocab", {.vocab_extra = ", \"\xff\xfe\": 300"}, NULL, 0, false},
    {"truncated", {0}, NULL, 1, false},
    {"arrays_nested_100000_deep", {0}, NULL, 2, false},
    {"directory_without_tokenizer_json", {0}, NULL, 3, false},
    {"empty_file", {0}, "", 0, false},
    {"not_json", {0}, "this is not JSON\n", 0, false},
    {"top_level_array", {0}, "[{\"model\": {\"type\": \"BPE\"}}]\n", 0, false},
};

Test(tokenizer_hf, hostile_tokenizer_json_is_one_line_and_exit_2, .timeout = 120) {
    need_refs();
    const char *bin = test_gtrain_bin(), *root = getenv("GTRAIN_ROOT");
    char dir[128];
    test_scratch_make(dir, sizeof dir, "gt_tok_hostile");
    char in[256];
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    test_write_file(in, "\"hello world\"\n", 14);
    Report *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    for (size_t c = 0; c < sizeof HOSTILE / sizeof HOSTILE[0]; c++) {
        const Hostile *h = &HOSTILE[c];
        char path[300], out[320], err[320], cmd[2048];
        snprintf(path, sizeof path, "%s/%s.json", dir, h->name);
        snprintf(out, sizeof out, "%s/%s.out", dir, h->name);
        snprintf(err, sizeof err, "%s/%s.err", dir, h->name);
        if (h->raw) {
            test_write_file(path, h->raw, strlen(h->raw));
        } else if (h->raw_kind == 1) {
            TokVariant valid = {0};
            char *json = tokenizer_json(&valid);
            test_write_file(path, json, strlen(json) / 2);
            free(json);
        } else if (h->raw_kind == 2) {
            Buf b = {0};
            buf_repeat(&b, "[", DEEP_NESTING);
            buf_repeat(&b, "]", DEEP_NESTING);
            test_write_file(path, b.s, b.n);
            free(b.s);
        } else if (h->raw_kind == 3) {
            snprintf(path, sizeof path, "%s/%s", dir, h->name);
            cr_assert_eq(mkdir(path, 0755), 0);
        } else {
            char *json = tokenizer_json(&h->variant);
            test_write_file(path, json, strlen(json));
            free(json);
        }
        snprintf(cmd, sizeof cmd, "timeout -k 5 60 '%s' tokenize --tokenizer '%s' --jsonl '%s' >'%s' 2>'%s'", bin, path,
                 in, out, err);
        int rc = sh_status(cmd);
        size_t n_out = 0, n_err = 0;
        char *o = slurp(out, &n_out), *e = slurp(err, &n_err);
        cr_assert(o && e);
        int lines = 0;
        for (size_t i = 0; i < n_err; i++) lines += e[i] == '\n';
        bool one_line = lines == 1 && n_err > 0 && e[n_err - 1] == '\n';
        if (rc != 2 || !one_line || !strstr(e, path) || n_out != 0) {
            r->count++;
            report_add(r, "%s: exit %d (expected 2), %d lines on stderr (expected 1 naming the file), %zu bytes on stdout "
                          "(expected 0)\n", h->name, rc, lines, n_out);
            report_line(r, "stderr:", e, n_err, 400);
            if (n_out) report_line(r, "stdout:", o, n_out, 200);
        }
        free(o);
        free(e);
        /* Hugging Face on the same file: it loads it (exit 0) or refuses it (exit 2), as the table says */
        snprintf(cmd, sizeof cmd, CMD_TIMEOUT PY " '%s/tests/tools/hf_tokenize.py' '%s' <'%s' >'%s.hf' 2>'%s.hf'", root, path,
                 in, out, err);
        int hf_rc = sh_status(cmd);
        if ((hf_rc != 0 && hf_rc != 2) || (hf_rc == 0) != h->hf_loads) {
            r->count++;
            snprintf(err, sizeof err, "%s/%s.err.hf", dir, h->name);
            e = slurp(err, &n_err);
            report_add(r, "%s: Hugging Face's tokenizers exited %d (the table says it %s this file)\n", h->name, hf_rc,
                       h->hf_loads ? "loads" : "refuses");
            report_line(r, "HF's stderr:", e ? e : "", e ? n_err : 0, 400);
            free(e);
        }
    }
    if (r->count) {
        char msg[sizeof r->text + 256];
        snprintf(msg, sizeof msg, "%ld of %zu hostile tokenizer.json files not handled as expected (files in %s):\n%s",
                 r->count, sizeof HOSTILE / sizeof HOSTILE[0], dir, r->text);
        free(r);
        cr_assert_fail("%s", msg);
    }
    free(r);
    test_scratch_remove(dir);
}

/* ---------------------------------------------------------------- bad input lines */

/* The reference's contract (tests/tools/hf_tokenize.py) and gtrain's on the same bad lines: both exit
 * 2 with one line on stderr naming the first bad line (hf: "stdin:N:", gtrain: "FILE:N:"). */
Test(tokenizer_hf, bad_lines_are_refused_by_both_naming_the_line, .timeout = 120) {
    static const struct {
        const char *name, *flags, *text;
        int line;
    } cases[] = {
        {"number", "", "\"ok\"\n3\n", 2},
        {"object", "", "\"ok\"\n{\n", 2},
        {"lone_surrogate", "", "\"\\ud800\"\n", 1},
        {"not_utf8", "", "\"ok\"\n\"a\xff\"\n", 2},
        {"decode_negative_id", "--decode", "[1, 2]\n[1, -1]\n", 2},
        {"decode_boolean", "--decode", "[true]\n", 1},
        {"decode_fraction", "--decode", "[1]\n[]\n[1.5]\n", 3},
        {"decode_string", "--decode", "\"1 2\"\n", 1},
    };
    HfWs w;
    ws_open(&w, "gt_tok_hf_bad");
    char tok[512];
    ref_tokenizer_path(&REF_LLAMA2, tok, sizeof tok);
    Report *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char in[400], out[400], err[420], cmd[2048], want[600];
        snprintf(in, sizeof in, "%s/%s.in", w.dir, cases[k].name);
        test_write_file(in, cases[k].text, strlen(cases[k].text));
        for (int hf = 0; hf < 2; hf++) {
            snprintf(out, sizeof out, "%s/%s.%s", w.dir, cases[k].name, hf ? "hf" : "gtrain");
            snprintf(err, sizeof err, "%s.err", out);
            if (hf)
                snprintf(cmd, sizeof cmd, CMD_TIMEOUT PY " '%s/tests/tools/hf_tokenize.py' '%s' %s <'%s' >'%s' 2>'%s'", w.root,
                         tok, cases[k].flags, in, out, err);
            else
                snprintf(cmd, sizeof cmd, CMD_TIMEOUT "'%s' tokenize --tokenizer '%s' --jsonl %s '%s' >'%s' 2>'%s'", w.bin, tok,
                         cases[k].flags, in, out, err);
            int rc = sh_status(cmd);
            size_t n_err = 0;
            char *e = slurp(err, &n_err);
            cr_assert_not_null(e, "cannot read %s", err);
            int lines = 0;
            for (size_t i = 0; i < n_err; i++) lines += e[i] == '\n';
            if (hf) snprintf(want, sizeof want, "hf_tokenize: stdin:%d: ", cases[k].line);
            else snprintf(want, sizeof want, "%s:%d:", in, cases[k].line);
            if (rc != 2 || lines != 1 || !strstr(e, want)) {
                r->count++;
                report_add(r, "%s (%s): exit %d (expected 2), %d lines on stderr (expected 1 with \"%s\")\n", cases[k].name,
                           hf ? "hf_tokenize.py" : "gtrain", rc, lines, want);
                report_line(r, "stderr:", e, n_err, 400);
            }
            free(e);
        }
    }
    if (r->count) {
        char msg[sizeof r->text + 256];
        snprintf(msg, sizeof msg, "%ld bad-input cases not refused as expected (files in %s):\n%s", r->count, w.dir, r->text);
        free(r);
        cr_assert_fail("%s", msg);
    }
    free(r);
    ws_close(&w);
}
