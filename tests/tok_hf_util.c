/* tok_hf_util.c - see tok_hf_util.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run_util.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "tok_hf_util.h"

/* name, directory, vocabulary with the added tokens, the added tokens' first id and count, lossless
 * (checked against the file by the decode tests: tok_check_ref_counts) */
const RefTokenizer REF_LLAMA3 = {"llama3", "llama3", 128256, 128000, 256, true};
const RefTokenizer REF_LLAMA3_1 = {"llama3_1", "llama3_1", 128256, 128000, 256, true};
const RefTokenizer REF_QWEN3 = {"qwen3", "qwen3", 151669, 151643, 26, false};
const RefTokenizer REF_LLAMA2 = {"llama2", "llama2", 32000, 0, 3, false};

/* ---------------------------------------------------------------- files and processes */


void lines_read(Lines *l, const char *path) {
    size_t size;
    l->buf = slurp(path, &size);
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

void lines_free(Lines *l) {
    free(l->buf);
    free(l->at);
    free(l->len);
}

bool line_eq(const Lines *a, size_t i, const Lines *b, size_t j) {
    return a->len[i] == b->len[j] && memcmp(a->at[i], b->at[j], a->len[i]) == 0;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run a shell command; the exit status, or 128 + the signal that killed it. */
int sh_status(const char *cmd) {
    fflush(stdout);
    fflush(stderr);
    int st = system(cmd);
    cr_assert_neq(st, -1, "system(%s): %s", cmd, strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Run a command whose stderr goes to err_path; the test fails (showing that stderr) unless it
 * exits 0. */
void sh_ok(const char *cmd, const char *err_path, const char *what) {
    int rc = sh_status(cmd);
    if (rc != 0) {
        char *e = slurp(err_path, NULL);
        cr_assert_fail("%s exited %d: %s\n%.2000s", what, rc, cmd, e ? e : "(no stderr)");
    }
}

bool tok_small_corpus(void) { return TOK_UNDER_ASAN || test_on_cudasim(); }

void need_refs(void) {
    test_require_refs();
    cr_assert(getenv("GTRAIN_ROOT") && test_gtrain_bin(), "GTRAIN_ROOT/GTRAIN_BIN not set (run through make test)");
}

void ref_tokenizer_file(const char *dir, char *out, size_t cap) {
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert(root && *root, "GTRAIN_ROOT is not set (run through make test)");
    int k = snprintf(out, cap, "%s/../shared/data/tokenizers/%s/tokenizer.json", root, dir);
    cr_assert(k > 0 && (size_t)k < cap);
    if (access(out, R_OK) != 0)
        cr_assert_fail("the reference tokenizer file %s is missing (%s): the project's shared folder must be beside the "
                       "checkout (../shared/data/tokenizers/)",
                       out, strerror(errno));
}

void ws_open(HfWs *w, const char *prefix) {
    need_refs();
    w->root = getenv("GTRAIN_ROOT");
    w->bin = test_gtrain_bin();
    test_scratch_make(w->dir, sizeof w->dir, prefix);
    w->corpus[0] = 0;
}

void ws_close(HfWs *w) { test_scratch_remove(w->dir); }

void ref_tokenizer_path(const RefTokenizer *t, char *out, size_t cap) { ref_tokenizer_file(t->dir, out, cap); }

const char *corpus_with(HfWs *w, const char *args) {
    if (w->corpus[0]) return w->corpus;
    snprintf(w->corpus, sizeof w->corpus, "%s/corpus.jsonl", w->dir);
    if (!args) args = tok_small_corpus() ? "--shakespeare-lines 3000 --random 1500" : "";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, PY " '%s/tests/tools/make_tok_corpus.py' --seed 1 %s --out '%s' 2>'%s/corpus.err'",
             w->root, args, w->corpus, w->dir);
    sh_ok(cmd, test_join(w->dir, "corpus.err"), "make_tok_corpus.py");
    return w->corpus;
}

const char *corpus(HfWs *w) { return corpus_with(w, NULL); }

/* HF: PY hf_tokenize.py TOK [flags] < in > out */
void run_hf(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out) {
    char cmd[4096], err[600];
    snprintf(err, sizeof err, "%s.err", out);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT PY " '%s/tests/tools/hf_tokenize.py' '%s' %s <'%s' >'%s' 2>'%s'", w->root, tok, flags,
             in, out, err);
    sh_ok(cmd, err, "the reference (hf_tokenize.py)");
}

int run_gtrain_status(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT "'%s' tokenize --tokenizer '%s' --jsonl %s '%s' >'%s' 2>'%s.err'", w->bin, tok,
             flags, in, out, out);
    return sh_status(cmd);
}

void run_gtrain(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out) {
    char cmd[4096], err[600];
    snprintf(err, sizeof err, "%s.err", out);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT "'%s' tokenize --tokenizer '%s' --jsonl %s '%s' >'%s' 2>'%s'", w->bin, tok,
             flags, in, out, err);
    sh_ok(cmd, err, "gtrain tokenize");
}

void tok_check_ref_counts(const HfWs *w, const RefTokenizer *t, const char *tok) {
    char out[600], cmd[2048];
    snprintf(out, sizeof out, "%s/%s.info", w->dir, t->name);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT PY " '%s/tests/tools/hf_tokenize.py' '%s' --info >'%s' 2>'%s.err'", w->root, tok,
             out, out);
    char err[620];
    snprintf(err, sizeof err, "%s.err", out);
    sh_ok(cmd, err, "the reference (hf_tokenize.py --info)");
    char *s = slurp(out, NULL);
    cr_assert_not_null(s, "cannot read %s", out);
    long vocab = -1, first = -1, count = -1, contiguous = -1;
    int k = sscanf(s, "vocab_size %ld added_first %ld added_count %ld added_contiguous %ld", &vocab, &first, &count,
                   &contiguous);
    cr_assert_eq(k, 4, "hf_tokenize.py --info printed \"%s\"", s);
    cr_assert(vocab == t->vocab_size && first == t->first_added && count == t->n_added && contiguous == 1,
              "%s: Hugging Face reads vocab_size %ld, added tokens %ld..%ld (%ld, contiguous %ld); the test expects %d, "
              "%d..%d",
              tok, vocab, first, first + count - 1, count, contiguous, t->vocab_size, t->first_added,
              t->first_added + t->n_added - 1);
    free(s);
}

/* ---------------------------------------------------------------- reporting */

void report_add(Report *r, const char *fmt, ...) {
    if (r->used >= sizeof r->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(r->text + r->used, sizeof r->text - r->used, fmt, ap);
    va_end(ap);
    if (k > 0) r->used += (size_t)k < sizeof r->text - r->used ? (size_t)k : sizeof r->text - r->used - 1;
}

/* a line, cut to `cap` bytes (at a UTF-8 boundary) with its full length when cut */
void report_line(Report *r, const char *label, const char *s, size_t n, size_t cap) {
    size_t k = n <= cap ? n : cap;
    while (k < n && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    if (k < n) report_add(r, "  %s %.*s ... (%zu bytes)\n", label, (int)k, s, n);
    else report_add(r, "  %s %.*s\n", label, (int)k, s);
}

/* ---------------------------------------------------------------- JSON strings */

void put_utf8(char *out, size_t *n, uint32_t c) {
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
bool json_string_bytes(const char *s, size_t n, char **out, size_t *out_len) {
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
long compare_id_lines(const char *in_path, const char *ref_path, const char *got_path, Report *r, int show) {
    Lines in, ref, got;
    lines_read(&in, in_path);
    lines_read(&ref, ref_path);
    lines_read(&got, got_path);
    cr_assert_eq(ref.n, in.n, "%s: the reference printed %zu lines for %zu inputs", ref_path, ref.n, in.n);
    long differ = 0;
    for (size_t i = 0; i < in.n; i++) {
        if (i < got.n && line_eq(&ref, i, &got, i)) continue;
        if (differ++ >= show) continue;
        report_add(r, "line %zu:\n", i + 1);
        report_line(r, "input: ", in.at[i], in.len[i], 600);
        report_line(r, "hf:    ", ref.at[i], ref.len[i], 800);
        if (i < got.n) report_line(r, "gtrain:", got.at[i], got.len[i], 800);
        else report_add(r, "  gtrain: (no line)\n");
    }
    if (got.n != in.n) {
        report_add(r, "gtrain printed %zu lines for %zu inputs\n", got.n, in.n);
        if (!differ) differ = 1;
    }
    r->count += differ;
    lines_free(&in);
    lines_free(&ref);
    lines_free(&got);
    return differ;
}

void expect_same_lines(const HfWs *w, const char *what, const char *in_path, const char *ref_path,
                       const char *got_path) {
    Report *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    long differ = compare_id_lines(in_path, ref_path, got_path, r, SHOW_MISMATCHES);
    if (differ) {
        char msg[sizeof r->text + 512];
        snprintf(msg, sizeof msg, "%s: %ld lines differ from Hugging Face's (inputs %s, HF %s, gtrain %s; workspace %s):\n%s",
                 what, differ, in_path, ref_path, got_path, w->dir, r->text);
        free(r);
        cr_assert_fail("%s", msg); /* the scratch directory stays, for a look */
    }
    free(r);
}

/* HF's and gtrain's decode of the id arrays of ids_path (one JSON array a line) into ref and got */
void run_decodes(const HfWs *w, const char *tok, const char *flags, const char *ids_path, const char *ref,
                 const char *got) {
    char hf_flags[256];
    snprintf(hf_flags, sizeof hf_flags, "--decode %s", flags);
    run_hf(w, tok, hf_flags, ids_path, ref);
    char cmd[4096], err[600];
    snprintf(err, sizeof err, "%s.err", got);
    snprintf(cmd, sizeof cmd, CMD_TIMEOUT "'%s' tokenize --tokenizer '%s' --decode --jsonl %s '%s' >'%s' 2>'%s'", w->bin,
             tok, flags, ids_path, got, err);
    sh_ok(cmd, err, "gtrain tokenize --decode");
}

long compare_decodes(const char *ids_path, const char *ref_path, const char *got_path, const char *corpus_path,
                     size_t n_corpus, Report *r, Report *lossy) {
    Lines src, ids, hf, gt;
    if (corpus_path) lines_read(&src, corpus_path);
    lines_read(&ids, ids_path);
    lines_read(&hf, ref_path);
    lines_read(&gt, got_path);
    cr_assert_eq(hf.n, ids.n, "the reference decoded %zu lines for %zu id arrays", hf.n, ids.n);
    long differ = 0;
    for (size_t i = 0; i < ids.n; i++) {
        char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        cr_assert(json_string_bytes(hf.at[i], hf.len[i], &a, &na), "the reference's line %zu is not a JSON string", i + 1);
        bool ok = i < gt.n && json_string_bytes(gt.at[i], gt.len[i], &b, &nb);
        if (!ok || na != nb || memcmp(a, b, na) != 0) {
            if (differ++ < SHOW_MISMATCHES) {
                report_add(r, "line %zu%s:\n", i + 1, ok ? "" : " (gtrain's line is not one JSON string)");
                report_line(r, "ids:   ", ids.at[i], ids.len[i], 600);
                report_line(r, "hf:    ", hf.at[i], hf.len[i], 600);
                if (i < gt.n) report_line(r, "gtrain:", gt.at[i], gt.len[i], 600);
            }
        }
        if (corpus_path && i < n_corpus && i < src.n && ok) { /* decode(encode(x)) == x */
            char *x = NULL;
            size_t nx = 0;
            cr_assert(json_string_bytes(src.at[i], src.len[i], &x, &nx), "corpus line %zu is not a JSON string", i + 1);
            if ((nx != nb || memcmp(x, b, nx) != 0) && lossy->count++ < SHOW_MISMATCHES) {
                report_add(lossy, "line %zu:\n", i + 1);
                report_line(lossy, "input: ", src.at[i], src.len[i], 600);
                report_line(lossy, "gtrain:", gt.at[i], gt.len[i], 600);
            }
            free(x);
        }
        free(a);
        free(b);
    }
    if (gt.n != ids.n) {
        report_add(r, "gtrain printed %zu lines for %zu id arrays\n", gt.n, ids.n);
        if (!differ) differ = 1;
    }
    r->count += differ;
    if (corpus_path) lines_free(&src);
    lines_free(&ids);
    lines_free(&hf);
    lines_free(&gt);
    return differ;
}

void expect_same_decodes(const HfWs *w, const char *what, const char *ids_path, const char *ref_path,
                         const char *got_path, const char *corpus_path, size_t n_corpus) {
    Report *r = calloc(1, sizeof *r), *lossy = calloc(1, sizeof *lossy);
    cr_assert(r && lossy);
    long differ = compare_decodes(ids_path, ref_path, got_path, corpus_path, n_corpus, r, lossy);
    if (differ || lossy->count) {
        char msg[2 * sizeof r->text + 512];
        int k = snprintf(msg, 512, "%s decode: %ld texts differ from Hugging Face's decode of the same ids", what, differ);
        if (corpus_path)
            k += snprintf(msg + k, (size_t)(512 - k), "; %ld of %zu corpus lines do not decode back to themselves",
                          lossy->count, n_corpus);
        snprintf(msg + k, sizeof msg - (size_t)k, " (files in %s):\n%s%s", w->dir, r->text, lossy->text);
        free(r);
        free(lossy);
        cr_assert_fail("%s", msg);
    }
    free(r);
    free(lossy);
}

static uint64_t xorshift64(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ids.jsonl: HF's ids of each corpus line as a JSON array, then random arrays (uniform ids, low ids
 * where the byte tokens are, added tokens, repeats) */
size_t write_id_arrays(const RefTokenizer *t, const char *hf_ids, const char *path) {
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
