/* tok_hf_util.h - what the tokenizer tests against Hugging Face's tokenizers share
 * (test_tokenizer_hf.c, test_tokenizer_hf_variants.c, test_sft_templates.c): the real tokenizer.json
 * files of the project's shared folder ($GTRAIN_ROOT/../shared/data/tokenizers/NAME/), a scratch
 * workspace, the corpus (tests/tools/make_tok_corpus.py), running the reference
 * (tests/tools/hf_tokenize.py: PyPI `tokenizers` in the references' venv, $GTRAIN_REFS_PY) and
 * `gtrain tokenize`, and comparing their outputs line by line with a readable report of the first
 * lines that differ. A missing reference (the Python, a tokenizer file) fails the test, saying
 * what is missing: it never skips. */
#ifndef GT_TOK_HF_UTIL_H
#define GT_TOK_HF_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_util.h" /* slurp */

#include "test_util.h" /* PY */
#define SHOW_MISMATCHES 5
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
    const char *dir;          /* under $GTRAIN_ROOT/../shared/data/tokenizers: DIR/tokenizer.json */
    int vocab_size;           /* the model's vocabulary and the added tokens */
    int first_added, n_added; /* the added tokens' ids (specials, all of them) */
    bool lossless;            /* decode(encode(x)) == x for every valid text */
} RefTokenizer;

extern const RefTokenizer REF_LLAMA3, REF_LLAMA3_1, REF_QWEN3, REF_LLAMA2;

typedef struct {
    char dir[128];
    const char *root, *bin;
    char corpus[192];
} HfWs;

/* A file split into lines on '\n' (a final '\n' ends the last line; it does not start another). */
typedef struct {
    char *buf;
    size_t n;
    char **at;
    size_t *len;
} Lines;

/* A report of the first differences, for an assertion's message. */
typedef struct {
    char text[12288];
    size_t used;
    long count;
} Report;

void lines_read(Lines *l, const char *path);     /* asserts */
void lines_free(Lines *l);
bool line_eq(const Lines *a, size_t i, const Lines *b, size_t j);
double now_seconds(void);

/* A shell command's exit status, or 128 + the signal that killed it. */
int sh_status(const char *cmd);
/* The test fails (showing err_path) unless cmd exits 0. */
void sh_ok(const char *cmd, const char *err_path, const char *what);

/* Under ASan and on the CUDA simulator (GTRAIN_TEST_CUDASIM) the corpora are smaller: the same
 * sections, fewer lines (gtrain tokenize runs no backend; the pass is there for the sanitizers and
 * so that no test skips). */
bool tok_small_corpus(void);
/* Fails the test unless the reference Python ($GTRAIN_REFS_PY), GTRAIN_ROOT and GTRAIN_BIN are set. */
void need_refs(void);
/* The real tokenizer.json of the shared folder: $GTRAIN_ROOT/../shared/data/tokenizers/<dir>/tokenizer.json
 * into out; fails the test with one line naming the file when it is not there. */
void ref_tokenizer_file(const char *dir, char *out, size_t cap);
/* A scratch directory /tmp/<prefix>_XXXXXX (the references checked first: need_refs). */
void ws_open(HfWs *w, const char *prefix);
void ws_close(HfWs *w);
/* t's vocabulary size and added-token ids are what Hugging Face reads from tok (asserts;
 * hf_tokenize.py --info). */
void tok_check_ref_counts(const HfWs *w, const RefTokenizer *t, const char *tok);
/* The reference tokenizer.json of t (fails when missing). */
void ref_tokenizer_path(const RefTokenizer *t, char *out, size_t cap);
/* The corpus (written once per workspace): make_tok_corpus.py --seed 1 with `args`, or with
 * smaller sizes under ASan and on the CUDA simulator (tok_small_corpus) when args is NULL. */
const char *corpus_with(HfWs *w, const char *args);
const char *corpus(HfWs *w);

/* PY hf_tokenize.py TOK FLAGS < in > out (asserts exit 0) */
void run_hf(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out);
/* gtrain tokenize --tokenizer TOK --jsonl FLAGS IN > out: its exit status (stderr in out.err) */
int run_gtrain_status(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out);
void run_gtrain(const HfWs *w, const char *tok, const char *flags, const char *in, const char *out); /* exit 0 */
/* HF's and gtrain's decode (--decode --jsonl FLAGS) of the id arrays of ids_path into ref and got */
void run_decodes(const HfWs *w, const char *tok, const char *flags, const char *ids_path, const char *ref,
                 const char *got);

void report_add(Report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a line, cut to `cap` bytes (at a UTF-8 boundary) with its full length when cut */
void report_line(Report *r, const char *label, const char *s, size_t n, size_t cap);

void put_utf8(char *out, size_t *n, uint32_t c);
/* A line that is exactly one JSON string (strict: no raw control characters, surrogates paired)
 * into its bytes: *out (malloc'd, NUL-terminated), *out_len. False when it is not. */
bool json_string_bytes(const char *s, size_t n, char **out, size_t *out_len);

/* The number of lines of got_path that differ from ref_path's (gtrain's and HF's ids for the inputs of
 * in_path; a missing or extra line counts); the first `show` of them go into r with their inputs. */
long compare_id_lines(const char *in_path, const char *ref_path, const char *got_path, Report *r, int show);
/* Every line of got_path must equal ref_path's; the inputs (in_path) of the first few that differ
 * are shown with both. On failure the workspace stays, for a look. */
void expect_same_lines(const HfWs *w, const char *what, const char *in_path, const char *ref_path,
                       const char *got_path);
/* The number of gtrain's decoded texts (got_path, a JSON string a line) that differ from HF's (ref_path)
 * for the id arrays of ids_path, the first few of them into r; with corpus_path, each of its first
 * n_corpus lines that is not what its array decodes to counts in lossy (a round trip). */
long compare_decodes(const char *ids_path, const char *ref_path, const char *got_path, const char *corpus_path,
                     size_t n_corpus, Report *r, Report *lossy);
/* gtrain's decoded texts (got_path, a JSON string a line) equal HF's (ref_path) for the id arrays
 * of ids_path; with corpus_path, its first n_corpus lines are what the first n_corpus arrays
 * decode to (a lossless tokenizer's round trip). */
void expect_same_decodes(const HfWs *w, const char *what, const char *ids_path, const char *ref_path,
                         const char *got_path, const char *corpus_path, size_t n_corpus);

/* ids_path: HF's ids of each line of hf_ids as a JSON array, then 2000 random arrays (uniform ids, low
 * ids where the byte tokens are, t's added tokens, repeats). Returns the number of lines of hf_ids. */
size_t write_id_arrays(const RefTokenizer *t, const char *hf_ids, const char *ids_path);

#endif
