/* test_tokenize_cmd.c - `gtrain tokenize` as a process, on a tiny hand-written byte-level BPE
 * tokenizer.json (tests/fixtures/tokenizer/tiny-bpe: GPT-2's 256 byte characters in GPT-2's id
 * order, the merges "t h", "th e", "Ġ the", a TemplateProcessing BOS <|bos|> = 259 and a special
 * <|eos|> = 260). The expected ids are computed here: with no merge applicable every byte is its
 * byte-level character's id, the character found by GPT-2's bytes_to_unicode rule (written again
 * here) and its id read from the fixture's vocabulary. Also: --out's shard read back by hand (both
 * layouts), byte-identical output for 1 and 2 threads across a batch boundary, the one-line exit-2
 * refusals with no file left behind, and json_string.c's encoder and decoder in process. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "json_string.h"
#include "run_util.h"
#include "test_backend_select.h"
#include "test_util.h"

static char g_dir[256];
static char g_tok[512]; /* the fixture's directory */

static void scratch_init(void) {
    test_scratch_make(g_dir, sizeof g_dir, "gt_test_tokenize");
    const char *root = getenv("GTRAIN_ROOT");
    snprintf(g_tok, sizeof g_tok, "%s/tests/fixtures/tokenizer/tiny-bpe", root ? root : ".");
}
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(tokenize_cmd, .init = scratch_init, .fini = scratch_fini, .timeout = 120);

enum { BOS = 259, EOS = 260, ID_TH = 256, ID_THE = 257, ID_SPACE_THE = 258 };

/* ---------------------------------------------------------------------------------------------
 * the expected ids, independently */

/* GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for
 * themselves, the other 68 bytes, in order, for U+0100 onwards. */
static int byte_char(int b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) return b;
    int n = 0;
    for (int k = 0; k < b; k++) n += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF));
    return 256 + n;
}

/* the id of byte b: its character's entry in the fixture's vocabulary */
static int byte_id(int b) {
    static int ids[256];
    static bool ready;
    if (!ready) {
        char path[600];
        snprintf(path, sizeof path, "%s/tokenizer.json", g_tok);
        char *json = slurp(path, NULL);
        cr_assert_not_null(json, "cannot read %s", path);
        cJSON *root = cJSON_Parse(json);
        cr_assert_not_null(root);
        const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "vocab");
        for (int k = 0; k < 256; k++) {
            int cp = byte_char(k);
            char u[3] = {0};
            if (cp < 0x80) u[0] = (char)cp;
            else u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(vocab, u); /* "h" is not "H" */
            cr_assert(cJSON_IsNumber(id), "the fixture lacks byte %d's character U+%04X", k, cp);
            ids[k] = id->valueint;
        }
        cJSON_Delete(root);
        free(json);
        ready = true;
    }
    return ids[b];
}

/* "id id id\n" of each byte of s[n] (a text no merge applies to) */
static void bytes_line(char *out, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(out + o, cap - o, i ? " %d" : "%d", byte_id((unsigned char)s[i]));
    snprintf(out + o, cap - o, "\n");
}

/* ---------------------------------------------------------------------------------------------
 * running gtrain tokenize */

typedef struct {
    int status;
    char *out, *err; /* stdout and stderr (freed by done()) */
    size_t out_len;
} Result;

static void done(Result *r) {
    free(r->out);
    free(r->err);
}

/* gtrain tokenize ARGS... with stdin from stdin_path (NULL: /dev/null), cwd g_dir, 60 s at most */
static Result tokenize(const char *stdin_path, const char *first, ...) {
    const char *argv[40];
    int a = 0;
    argv[a++] = test_gtrain_bin();
    cr_assert_not_null(argv[0], "GTRAIN_BIN is not set (run through make test)");
    argv[a++] = "tokenize";
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s && a < 39; s = va_arg(ap, const char *)) argv[a++] = s;
    va_end(ap);
    argv[a] = NULL;
    char op[400], ep[400];
    snprintf(op, sizeof op, "%s/.stdout", g_dir);
    snprintf(ep, sizeof ep, "%s/.stderr", g_dir);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
        int in = open(stdin_path ? stdin_path : "/dev/null", O_RDONLY);
        int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || fo < 0 || fe < 0 || chdir(g_dir) != 0) _exit(126);
        dup2(in, 0), dup2(fo, 1), dup2(fe, 2);
        alarm(60); /* a hang ends with SIGALRM */
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    Result r = {0};
    cr_assert_eq(waitpid(pid, &r.status, 0), pid);
    r.out = slurp(op, &r.out_len);
    r.err = slurp(ep, NULL);
    cr_assert(r.out && r.err);
    unlink(op);
    unlink(ep);
    return r;
}

static void expect_ok(const Result *r, const char *what) {
    cr_assert(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "%s: status %d, stderr: %s", what, r->status, r->err);
}

/* exit 2, exactly one line on stderr naming `named` (and `also`) */
static void expect_refusal(const Result *r, const char *what, const char *named, const char *also) {
    cr_assert(WIFEXITED(r->status), "%s: killed by signal %d; stderr: %s", what, WTERMSIG(r->status), r->err);
    cr_assert_eq(WEXITSTATUS(r->status), 2, "%s: exit %d, expected 2; stderr: %s", what, WEXITSTATUS(r->status), r->err);
    cr_assert_eq(count_lines(r->err), 1, "%s: not one line on stderr: %s", what, r->err);
    cr_assert_not_null(strstr(r->err, named), "%s: stderr does not name %s: %s", what, named, r->err);
    if (also) cr_assert_not_null(strstr(r->err, also), "%s: stderr lacks \"%s\": %s", what, also, r->err);
}

static void put(const char *name, const char *s, size_t n) { test_write_file(test_join(g_dir, name), s, n); }
static void put_str(const char *name, const char *s) { put(name, s, strlen(s)); }

/* the names in g_dir other than the test's own inputs: none may start with `prefix` */
static void expect_no_file_named(const char *prefix) {
    DIR *d = opendir(g_dir);
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));)
        cr_assert(strncmp(e->d_name, prefix, strlen(prefix)) != 0, "%s was left behind", e->d_name);
    closedir(d);
}

/* An llm.c shard read by hand: its magic, version and tokens (as decimal lines-free "a b c" text) */
typedef struct {
    uint32_t magic, version, count;
    uint32_t *tok;
} Shard;

static Shard read_shard(const char *name) {
    size_t len;
    uint8_t *b = (uint8_t *)slurp(test_join(g_dir, name), &len);
    cr_assert_not_null(b, "no shard %s", name);
    cr_assert_geq(len, 1024);
    Shard s;
    uint32_t *h[3] = {&s.magic, &s.version, &s.count};
    for (int k = 0; k < 3; k++)
        *h[k] = (uint32_t)b[4 * k] | (uint32_t)b[4 * k + 1] << 8 | (uint32_t)b[4 * k + 2] << 16 | (uint32_t)b[4 * k + 3] << 24;
    size_t width = s.magic == 20240801 ? 4 : 2;
    cr_assert_eq(len, 1024 + width * s.count, "%s: %zu bytes for %u tokens", name, len, s.count);
    s.tok = malloc(sizeof *s.tok * (s.count + 1));
    cr_assert_not_null(s.tok);
    for (uint32_t i = 0; i < s.count; i++) {
        const uint8_t *p = b + 1024 + width * i;
        s.tok[i] = width == 2 ? (uint32_t)(p[0] | p[1] << 8)
                              : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    free(b);
    return s;
}

/* every id of the printed lines, in order, against the shard's tokens */
static void expect_shard_is_printed(const Shard *s, const char *printed) {
    uint32_t n = 0;
    for (const char *p = printed; *p;) {
        if (*p == ' ' || *p == '\n') {
            p++;
            continue;
        }
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        cr_assert(end != p);
        cr_assert_lt(n, s->count, "the shard holds fewer tokens than were printed");
        cr_assert_eq(s->tok[n], v, "token %u: %u in the shard, %lu printed", n, s->tok[n], v);
        n++;
        p = end;
    }
    cr_assert_eq(n, s->count, "%u tokens printed, %u in the shard", n, s->count);
}

/* ---------------------------------------------------------------------------------------------
 * encoding and decoding */

Test(tokenize_cmd, documents_encode_to_hand_computed_ids) {
    const char hello[] = "hello world", odd[] = "\xC3\xA9\x00~\n\t{}"; /* é, NUL, and bytes that stand for U+0100.. */
    put("a.txt", hello, sizeof hello - 1);
    put("b.txt", odd, sizeof odd - 1);
    put("empty.txt", "", 0);
    put_str("the.txt", "the the then");
    char want[4096], line[1024];
    bytes_line(want, sizeof want, hello, sizeof hello - 1);
    bytes_line(line, sizeof line, odd, sizeof odd - 1);
    strcat(want, line);
    strcat(want, "\n"); /* the empty document */
    /* "the" is merged whole; " the" and the " the" of " then" become Ġthe */
    snprintf(line, sizeof line, "%d %d %d %d\n", ID_THE, ID_SPACE_THE, ID_SPACE_THE, byte_id('n'));
    strcat(want, line);
    Result r = tokenize(NULL, "--tokenizer", g_tok, "a.txt", "b.txt", "empty.txt", "the.txt", NULL);
    expect_ok(&r, "encode");
    cr_assert_str_eq(r.out, want);
    cr_assert_str_eq(r.err, "");
    done(&r);
    /* the tokenizer.json itself, --add-special-tokens (the template's BOS), a document on stdin */
    char tj[600];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", g_tok);
    r = tokenize(test_join(g_dir, "a.txt"), "--tokenizer", tj, "--add-special-tokens", "-", "the.txt", NULL);
    expect_ok(&r, "encode with BOS");
    bytes_line(line, sizeof line, hello, sizeof hello - 1);
    snprintf(want, sizeof want, "%d %s%d %d %d %d %d\n", BOS, line, BOS, ID_THE, ID_SPACE_THE, ID_SPACE_THE, byte_id('n'));
    cr_assert_str_eq(r.out, want);
    done(&r);
}

Test(tokenize_cmd, jsonl_lines_encode_in_order) {
    /* \u0000 is a 0 byte inside the string, not its end; whitespace around a string is allowed */
    put_str("in.jsonl", "\"hello world\"\n\"\"\n\"\\u0000a\\u00e9\"\n  \"the\"\t\r\n\"\\ud83d\\ude00\"");
    char want[4096], line[1024];
    bytes_line(want, sizeof want, "hello world", 11);
    strcat(want, "\n");
    bytes_line(line, sizeof line, "\0a\xC3\xA9", 4);
    strcat(want, line);
    snprintf(line, sizeof line, "%d\n", ID_THE);
    strcat(want, line);
    bytes_line(line, sizeof line, "\xF0\x9F\x98\x80", 4);
    strcat(want, line);
    Result r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "in.jsonl", NULL);
    expect_ok(&r, "jsonl");
    cr_assert_str_eq(r.out, want);
    done(&r);
}

Test(tokenize_cmd, decode_jsonl_and_raw) {
    char ids[512];
    snprintf(ids, sizeof ids, "[%d, %d, %d]\n[]\n[%d,%d,%d]\n[%d]\n[%d, %d]\n", BOS, ID_THE, ID_SPACE_THE, byte_id('a'),
             byte_id('\n'), byte_id('"'), byte_id(0xFF), EOS, ID_TH);
    put_str("ids.jsonl", ids);
    Result r = tokenize(NULL, "--tokenizer", g_tok, "--decode", "--jsonl", "ids.jsonl", NULL);
    expect_ok(&r, "decode --jsonl");
    /* escaped as JSON; a lone 0xFF byte is not UTF-8: U+FFFD, as HF's decode gives */
    cr_assert_str_eq(r.out, "\"<|bos|>the the\"\n\"\"\n\"a\\n\\\"\"\n\"\xEF\xBF\xBD\"\n\"<|eos|>th\"\n");
    done(&r);
    r = tokenize(NULL, "--tokenizer", g_tok, "--decode", "--jsonl", "--skip-special-tokens", "ids.jsonl", NULL);
    expect_ok(&r, "decode --skip-special-tokens");
    cr_assert_str_eq(r.out, "\"the the\"\n\"\"\n\"a\\n\\\"\"\n\"\xEF\xBF\xBD\"\n\"th\"\n");
    done(&r);
    /* raw: each line's text, one after the other; encode | decode gives the documents back */
    const char doc1[] = "the king's men\n\tsaid: \"\xC3\xA9t\xC3\xA9\" 123\n", doc2[] = "  then  ";
    put("d1.txt", doc1, sizeof doc1 - 1);
    put("d2.txt", doc2, sizeof doc2 - 1);
    r = tokenize(NULL, "--tokenizer", g_tok, "d1.txt", "d2.txt", NULL);
    expect_ok(&r, "encode");
    put("ids.txt", r.out, r.out_len);
    done(&r);
    r = tokenize(test_join(g_dir, "ids.txt"), "--tokenizer", g_tok, "--decode", NULL);
    expect_ok(&r, "decode");
    cr_assert_eq(r.out_len, sizeof doc1 - 1 + sizeof doc2 - 1);
    cr_assert_str_eq(r.out, "the king's men\n\tsaid: \"\xC3\xA9t\xC3\xA9\" 123\n  then  ");
    done(&r);
}

Test(tokenize_cmd, out_shard_equals_printed_ids) {
    put_str("a.jsonl", "\"the cat\"\n\"\"\n\"then the\"\n\"\\u0000\"\n");
    Result p = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--add-special-tokens", "a.jsonl", NULL);
    expect_ok(&p, "print");
    Result r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--add-special-tokens", "--out", "a.bin", "a.jsonl", NULL);
    expect_ok(&r, "--out");
    cr_assert_str_eq(r.out, "", "--out printed ids too: %s", r.out);
    /* one summary line, not a terminal: no progress bar */
    cr_assert_eq(count_lines(r.err), 1, "%s", r.err);
    cr_assert_null(strchr(r.err, '\r'), "a progress bar without a terminal: %s", r.err);
    cr_assert_not_null(strstr(r.err, "4 documents"), "%s", r.err);
    Shard s = read_shard("a.bin");
    cr_assert_eq(s.magic, 20240520u, "a 261-id vocabulary fits uint16");
    cr_assert_eq(s.version, 1u);
    expect_shard_is_printed(&s, p.out);
    cr_assert_eq(s.tok[0], BOS);
    char want[64];
    snprintf(want, sizeof want, "%u tokens", s.count);
    cr_assert_not_null(strstr(r.err, want), "%s", r.err);
    free(s.tok);
    done(&p);
    done(&r);
    expect_no_file_named("a.bin.tmp");
}

/* A tokenizer.json with more than 65536 ids: the shard is llm.c's Llama-3 uint32 layout. The
 * merges' results sit above 65535, after 65344 filler tokens no merge produces. */
Test(tokenize_cmd, out_uint32_for_a_large_vocabulary) {
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_tok);
    char *json = slurp(path, NULL);
    cr_assert_not_null(json);
    cJSON *root = cJSON_Parse(json);
    free(json);
    cr_assert_not_null(root);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model"), *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const int base = 65600;
    cJSON_DeleteItemFromObject(vocab, "th");
    cJSON_DeleteItemFromObject(vocab, "the");
    cJSON_DeleteItemFromObject(vocab, "\xC4\xA0the");
    for (int i = 256; i < base; i++) {
        char name[32];
        snprintf(name, sizeof name, "<filler_%d>", i);
        cJSON_AddNumberToObject(vocab, name, i);
    }
    cJSON_AddNumberToObject(vocab, "th", base);
    cJSON_AddNumberToObject(vocab, "the", base + 1);
    cJSON_AddNumberToObject(vocab, "\xC4\xA0the", base + 2);
    cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    cJSON_SetNumberHelper(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(added, 0), "id"), base + 3);
    cJSON_SetNumberHelper(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(added, 1), "id"), base + 4);
    cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "special_tokens"),
                                    "<|bos|>");
    cJSON_SetNumberHelper(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(st, "ids"), 0), base + 3);
    char *big = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    cr_assert_not_null(big);
    cr_assert_eq(mkdir(test_join(g_dir, "big"), 0755), 0);
    put("big/tokenizer.json", big, strlen(big));
    free(big);
    put_str("t.txt", "the the a");
    Result r = tokenize(NULL, "--tokenizer", "big", "--add-special-tokens", "--out", "t.bin", "t.txt", NULL);
    expect_ok(&r, "--out, uint32");
    Shard s = read_shard("t.bin");
    cr_assert_eq(s.magic, 20240801u);
    cr_assert_eq(s.version, 7u);
    uint32_t want[] = {(uint32_t)base + 3, (uint32_t)base + 1, (uint32_t)base + 2, (uint32_t)byte_id(' '),
                       (uint32_t)byte_id('a')};
    cr_assert_eq(s.count, 5);
    for (int i = 0; i < 5; i++) cr_assert_eq(s.tok[i], want[i], "token %d: %u, expected %u", i, s.tok[i], want[i]);
    cr_assert_not_null(strstr(r.err, "uint32"), "%s", r.err);
    free(s.tok);
    done(&r);
}

/* ---------------------------------------------------------------------------------------------
 * determinism */

Test(tokenize_cmd, output_identical_for_one_and_two_threads, .timeout = 240) {
    /* more lines than one batch (65536), of varied words, escapes and non-ASCII text */
    enum { LINES = 70000 };
    static const char *const words[] = {"the", "then", "cat", "\\u00e9t\\u00e9", "\\\"q\\\"", "\\u0000", "42",
                                        "\\n", "\xE2\x82\xAC", "they're", "  ", "\\ud83d\\ude00", "a", ","};
    const size_t n_words = sizeof words / sizeof *words;
    FILE *f = fopen(test_join(g_dir, "many.jsonl"), "w");
    cr_assert_not_null(f);
    uint64_t st = 12345;
    for (int i = 0; i < LINES; i++) {
        int n = (int)(rng_next(&st) % 12);
        fputc('"', f);
        for (int k = 0; k < n; k++) fprintf(f, "%s%s", k ? " " : "", words[rng_next(&st) % n_words]);
        fputs("\"\n", f);
    }
    cr_assert_eq(fclose(f), 0);
    Result one = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--threads", "1", "many.jsonl", NULL);
    Result two = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--threads", "2", "many.jsonl", NULL);
    expect_ok(&one, "--threads 1");
    expect_ok(&two, "--threads 2");
    cr_assert_eq(count_lines(one.out), LINES);
    cr_assert_eq(one.out_len, two.out_len);
    cr_assert_eq(memcmp(one.out, two.out, one.out_len), 0, "the output depends on the thread count");
    /* the shard of the same lines is the printed ids, for either thread count */
    Result s1 = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--threads", "1", "--out", "m1.bin", "many.jsonl", NULL);
    Result s2 = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--threads", "2", "--out", "m2.bin", "many.jsonl", NULL);
    expect_ok(&s1, "--out --threads 1");
    expect_ok(&s2, "--out --threads 2");
    cr_assert(files_equal(test_join(g_dir, "m1.bin"), test_join(g_dir, "m2.bin")));
    Shard s = read_shard("m2.bin");
    expect_shard_is_printed(&s, one.out);
    free(s.tok);
    /* documents too: 300 files, each its own line */
    for (int i = 0; i < 300; i++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "d%03d.txt", i);
        int n = snprintf(text, sizeof text, "doc %d: the %s then %d\n", i, i % 3 ? "cat" : "\xC3\xA9t\xC3\xA9", i * i);
        put(name, text, (size_t)n);
    }
    const char *argv[2][320];
    Result docs[2];
    for (int t = 0; t < 2; t++) {
        int a = 0;
        argv[t][a++] = test_gtrain_bin();
        argv[t][a++] = "tokenize";
        argv[t][a++] = "--tokenizer";
        argv[t][a++] = g_tok;
        argv[t][a++] = "--threads";
        argv[t][a++] = t ? "2" : "1";
        DIR *d = opendir(g_dir);
        char *names[300];
        int k = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] == 'd' && strstr(e->d_name, ".txt")) names[k++] = strdup(e->d_name);
        closedir(d);
        cr_assert_eq(k, 300);
        for (int i = 0; i < k; i++) argv[t][a++] = names[i]; /* directory order: the same both times */
        argv[t][a] = NULL;
        char sh[400];
        snprintf(sh, sizeof sh, "%s/.docs%d", g_dir, t);
        pid_t pid = fork();
        if (pid == 0) {
            int fo = open(sh, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fo < 0 || chdir(g_dir) != 0) _exit(126);
            dup2(fo, 1);
            alarm(60);
            execv(argv[t][0], (char *const *)argv[t]);
            _exit(127);
        }
        cr_assert_eq(waitpid(pid, &docs[t].status, 0), pid);
        cr_assert(WIFEXITED(docs[t].status) && WEXITSTATUS(docs[t].status) == 0);
        docs[t].out = slurp(sh, &docs[t].out_len);
        docs[t].err = NULL;
        for (int i = 0; i < k; i++) free(names[i]);
    }
    cr_assert_eq(count_lines(docs[0].out), 300);
    cr_assert_str_eq(docs[0].out, docs[1].out);
    done(&docs[0]), done(&docs[1]);
    done(&one), done(&two), done(&s1), done(&s2);
}

/* ---------------------------------------------------------------------------------------------
 * refusals: one line, exit 2, nothing left behind */

Test(tokenize_cmd, bad_input_is_one_line_and_exit_2) {
    put_str("bad.jsonl", "\"fine\"\n\"also fine\"\n{\"text\": \"an object\"}\n\"never read\"\n");
    Result r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--out", "bad.bin", "bad.jsonl", NULL);
    expect_refusal(&r, "not a JSON string", "bad.jsonl:3", "expected one JSON string");
    done(&r);
    expect_no_file_named("bad.bin");
    /* printed: the lines before the bad one come out, then the error */
    r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "bad.jsonl", NULL);
    expect_refusal(&r, "not a JSON string (printing)", "bad.jsonl:3", NULL);
    cr_assert_eq(count_lines(r.out), 2);
    done(&r);
    const char *not_strings[] = {"\n", "42\n", "\"open\n", "\"a\" \"b\"\n", "\"\\x\"\n", "[\"a\"]\n", "\"\\ud800\"\n"};
    for (size_t i = 0; i < sizeof not_strings / sizeof *not_strings; i++) {
        put_str("ns.jsonl", not_strings[i]);
        r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "ns.jsonl", NULL);
        expect_refusal(&r, not_strings[i], "ns.jsonl:1", NULL);
        done(&r);
    }
    /* invalid UTF-8: tok_encode's error, the file and the byte offset (the line with --jsonl) */
    put("inv.txt", "hello\xC3(world", 12);
    r = tokenize(NULL, "--tokenizer", g_tok, "--out", "inv.bin", "inv.txt", NULL);
    expect_refusal(&r, "invalid UTF-8", "inv.txt", "5");
    done(&r);
    expect_no_file_named("inv.bin");
    put_str("inv.jsonl", "\"ok\"\n\"bad \xFF byte\"\n");
    r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--out", "inv2.bin", "inv.jsonl", NULL);
    expect_refusal(&r, "invalid UTF-8 in a line", "inv.jsonl:2", "4");
    done(&r);
    expect_no_file_named("inv2.bin");
    /* decode: ids that are not ids */
    put_str("ids.txt", "1 2 3\n4 five 6\n");
    r = tokenize(NULL, "--tokenizer", g_tok, "--decode", "ids.txt", NULL);
    expect_refusal(&r, "not an id", "ids.txt:2:3", "five");
    done(&r);
    const char *bad_arrays[] = {"[1, -2]\n", "[1.5]\n", "[01]\n", "[1 2]\n", "\"text\"\n", "[1] x\n", "[2147483648]\n"};
    for (size_t i = 0; i < sizeof bad_arrays / sizeof *bad_arrays; i++) {
        put_str("ba.jsonl", bad_arrays[i]);
        r = tokenize(NULL, "--tokenizer", g_tok, "--decode", "--jsonl", "ba.jsonl", NULL);
        expect_refusal(&r, bad_arrays[i], "ba.jsonl:1", NULL);
        done(&r);
    }
    /* missing or unreadable inputs and tokenizers */
    r = tokenize(NULL, "--tokenizer", "no-such-tokenizer.json", "--out", "x.bin", "inv.txt", NULL);
    expect_refusal(&r, "missing tokenizer", "no-such-tokenizer.json", NULL);
    done(&r);
    put_str("fine.txt", "fine");
    r = tokenize(NULL, "--tokenizer", g_tok, "--out", "y.bin", "fine.txt", "absent.txt", NULL);
    expect_refusal(&r, "missing input", "absent.txt", NULL);
    done(&r);
    cr_assert_eq(mkfifo(test_join(g_dir, "fifo"), 0600), 0);
    r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "fifo", NULL);
    expect_refusal(&r, "a FIFO", "fifo", "FIFO");
    done(&r);
    expect_no_file_named("x.bin");
    expect_no_file_named("y.bin");
    /* an input without any token refuses to make an empty shard */
    put("empty.txt", "", 0);
    r = tokenize(NULL, "--tokenizer", g_tok, "--out", "e.bin", "empty.txt", NULL);
    expect_refusal(&r, "no tokens", "e.bin", "no tokens");
    done(&r);
    expect_no_file_named("e.bin");
}

Test(tokenize_cmd, usage_errors_are_one_line) {
    struct {
        const char *a, *b, *c, *named;
    } cases[] = {
        {"--bogus", NULL, NULL, "--bogus"},
        {"--jsonl", NULL, NULL, "--tokenizer"},
        {"--tokenizer", NULL, NULL, "--tokenizer"},
        {"--tokenizer", g_tok, "--threads=0", "--threads"},
        {"--tokenizer", g_tok, "--threads=x", "--threads"},
        {"--tokenizer", g_tok, "--skip-special-tokens", "--skip-special-tokens"},
        {"--decode", "--tokenizer", g_tok, NULL},
        {"--tokenizer", g_tok, "--jsonl=1", "--jsonl"},
        {"--tokenizer", g_tok, "-x", "-x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Result r = tokenize(NULL, cases[i].a, cases[i].b, cases[i].c, NULL);
        if (!cases[i].named) { /* --decode with stdin /dev/null: nothing to decode, fine */
            expect_ok(&r, "--decode of nothing");
            cr_assert_eq(r.out_len, 0);
        } else {
            expect_refusal(&r, cases[i].a, cases[i].named, NULL);
        }
        done(&r);
    }
    Result r = tokenize(NULL, "--tokenizer", g_tok, "--decode", "--add-special-tokens", NULL);
    expect_refusal(&r, "--add-special-tokens with --decode", "--add-special-tokens", NULL);
    done(&r);
    r = tokenize(NULL, "--tokenizer", g_tok, "--decode", "--out", "d.bin", NULL);
    expect_refusal(&r, "--out with --decode", "--out", NULL);
    done(&r);
    r = tokenize(NULL, "--tokenizer", g_tok, "--jsonl", "--jsonl", NULL);
    expect_refusal(&r, "twice", "--jsonl", "more than once");
    done(&r);
    expect_no_file_named("d.bin");
    r = tokenize(NULL, "--help", NULL);
    expect_ok(&r, "--help");
    cr_assert(strncmp(r.out, "usage: gtrain tokenize", 22) == 0, "%s", r.out);
    done(&r);
}

/* ---------------------------------------------------------------------------------------------
 * json_string.c in process */

static void expect_encoded(const char *in, size_t n, const char *want) {
    GtBytes b = {0};
    json_string_encode(&b, in, n);
    gt_bytes_put(&b, "", 1);
    cr_assert_str_eq(b.p, want);
    gt_bytes_free(&b);
}

Test(tokenize_cmd, json_strings_encode_as_valid_utf8_and_decode_exactly) {
    expect_encoded("a\"b\\c/\b\f\n\r\t\x01\x1f\x7f", 14, "\"a\\\"b\\\\c/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\"");
    expect_encoded("\0x", 2, "\"\\u0000x\"");
    expect_encoded("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9, "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"");
    /* one U+FFFD per maximal invalid subpart, as Python's and Rust's lossy decoding */
    const char *R = "\xEF\xBF\xBD";
    char want[64];
    snprintf(want, sizeof want, "\"%sa\"", R);
    expect_encoded("\xF0\x9F\x98" "a", 4, want); /* a cut 4-byte sequence: one */
    snprintf(want, sizeof want, "\"%s%s\"", R, R);
    expect_encoded("\xC0\x80", 2, want); /* an overlong lead: two */
    snprintf(want, sizeof want, "\"%s%s%s\"", R, R, R);
    expect_encoded("\xED\xA0\x80", 3, want); /* a surrogate: three */
    snprintf(want, sizeof want, "\"%s\"", R);
    expect_encoded("\xF4", 1, want); /* a lead byte at the end: one */
    snprintf(want, sizeof want, "\"%s%s%s%s\"", R, R, R, R);
    expect_encoded("\xF4\x90\x80\x80", 4, want); /* above U+10FFFF */
    /* decoding keeps every byte */
    const char *j = "\"a\\u0000b\\ud83d\\ude00\\/\"tail";
    const char *p = j;
    GtBytes b = {0};
    cr_assert_eq(json_string_decode(&p, j + strlen(j), &b), 0);
    cr_assert_eq(b.n, 8);
    cr_assert_eq(memcmp(b.p, "a\0b\xF0\x9F\x98\x80/", 8), 0);
    cr_assert_str_eq(p, "tail");
    const char *bad[] = {"\"\\ud800\"", "\"\\udc00\"", "\"abc", "\"\\u12\"", "\"\\q\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p = bad[i];
        b.n = 0;
        cr_assert_eq(json_string_decode(&p, bad[i] + strlen(bad[i]), &b), -1, "accepted %s", bad[i]);
    }
    gt_bytes_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * --out is never an input, a special file or a directory: refused (one line, exit 2) before the
 * tokenizer is read, and whatever was there is unchanged */

static void expect_unchanged(const char *name, const char *want) {
    char *got = slurp(test_join(g_dir, name), NULL);
    cr_assert(got && !strcmp(got, want), "%s changed: \"%s\"", name, got ? got : "(gone)");
    free(got);
}

Test(tokenize_cmd, out_is_never_an_input_nor_special) {
    put_str("text.txt", "the text\n");
    char tj[600];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", g_tok);
    char *tok_json = slurp(tj, NULL);
    cr_assert_not_null(tok_json);
    put_str("tokenizer.json", tok_json);
    cr_assert_eq(symlink("text.txt", test_join(g_dir, "link")), 0);
    cr_assert_eq(link(test_join(g_dir, "text.txt"), test_join(g_dir, "hard")), 0);
    cr_assert_eq(mkfifo(test_join(g_dir, "fifo.bin"), 0600), 0);
    cr_assert_eq(mkdir(test_join(g_dir, "adir"), 0755), 0);
    struct {
        const char *out, *named, *also;
    } cases[] = {
        {"text.txt", "text.txt", "input"},         {"tokenizer.json", "tokenizer.json", "tokenizer"},
        {"link", "link", "symbolic link"},         {"hard", "hard", "text.txt"},
        {"fifo.bin", "fifo.bin", "FIFO"},          {"adir", "adir", "directory"},
        {"adir/", "adir/", "directory"},           {"missing/x.bin", "missing/x.bin", "missing"},
        {"text.txt/x.bin", "text.txt/x.bin", "file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Result r = tokenize(NULL, "--tokenizer", "tokenizer.json", "--out", cases[i].out, "text.txt", NULL);
        expect_refusal(&r, cases[i].out, cases[i].named, cases[i].also);
        cr_assert_not_null(strstr(r.err, "--out"), "%s: the message does not name --out: %s", cases[i].out, r.err);
        done(&r);
        expect_unchanged("text.txt", "the text\n");
        expect_unchanged("tokenizer.json", tok_json);
    }
    struct stat sb;
    cr_assert(lstat(test_join(g_dir, "fifo.bin"), &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    cr_assert(lstat(test_join(g_dir, "link"), &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced");
    /* the input given as standard input */
    Result r = tokenize(test_join(g_dir, "text.txt"), "--tokenizer", "tokenizer.json", "--out", "hard", NULL);
    expect_refusal(&r, "stdin", "hard", "stdin");
    done(&r);
    expect_unchanged("text.txt", "the text\n");
    /* a character device (root only: mknod) is refused, never unlinked */
    if (geteuid() == 0 && mknod(test_join(g_dir, "null"), S_IFCHR | 0666, makedev(1, 3)) == 0) {
        r = tokenize(NULL, "--tokenizer", "tokenizer.json", "--out", "null", "text.txt", NULL);
        expect_refusal(&r, "a character device", "null", "character device");
        done(&r);
        cr_assert(lstat(test_join(g_dir, "null"), &sb) == 0 && S_ISCHR(sb.st_mode), "the device was replaced");
    }
    expect_no_file_named("text.txt.tmp");
    expect_no_file_named("fifo.bin.tmp");
    /* and a new name or a regular file of its own is written */
    r = tokenize(NULL, "--tokenizer", "tokenizer.json", "--out", "adir/new.bin", "text.txt", NULL);
    expect_ok(&r, "a new file in a directory");
    done(&r);
    free(tok_json);
}

/* a pid that is no process: a child's, reaped */
static pid_t dead_pid(void) {
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) _exit(0);
    cr_assert_eq(waitpid(p, NULL, 0), p);
    return p;
}

Test(tokenize_cmd, stale_temporaries_of_a_killed_run_are_removed) {
    put_str("t.txt", "the text\n");
    char stale[64], live[64], other[64];
    snprintf(stale, sizeof stale, "s.bin.tmp.%ld-Ab12Cd", (long)dead_pid());
    snprintf(live, sizeof live, "s.bin.tmp.%ld-Xy34Zw", (long)getpid()); /* a running writer's: kept */
    snprintf(other, sizeof other, "other.bin.tmp.%ld-Ab12Cd", (long)dead_pid()); /* another output's: kept */
    put_str(stale, "partial");
    put_str(live, "in flight");
    put_str(other, "partial");
    Result r = tokenize(NULL, "--tokenizer", g_tok, "--out", "s.bin", "t.txt", NULL);
    expect_ok(&r, "stale temporaries");
    cr_assert_not_null(strstr(r.err, stale), "the removal is not reported: %s", r.err);
    done(&r);
    cr_assert(!exists(test_join(g_dir, stale)), "%s was left", stale);
    cr_assert(exists(test_join(g_dir, live)), "a live writer's %s was removed", live);
    cr_assert(exists(test_join(g_dir, other)), "another output's %s was removed", other);
    Shard s = read_shard("s.bin");
    cr_assert_gt(s.count, 0);
    free(s.tok);
}

/* the exits that skip a writer's own cleanup: the allocator's exit(1), and a second stop signal */
Test(tokenize_cmd, registered_temporaries_go_on_every_exit) {
    for (int how = 0; how < 2; how++) {
        char path[600];
        snprintf(path, sizeof path, "%s/inflight.%d.tmp", g_dir, how);
        fflush(stdout);
        fflush(stderr);
        pid_t p = fork();
        cr_assert_geq(p, 0);
        if (p == 0) {
            gt_signals_install();
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || gt_tmp_register(path, false) < 0) _exit(99);
            close(fd);
            if (how == 0) { /* more than malloc ever gives (ASan's allocator aborts instead: its exit is its own) */
#ifdef __SANITIZE_ADDRESS__
                gt_tmp_cleanup();
                _exit(1);
#else
                volatile char *x = gt_xmalloc(SIZE_MAX / 2);
                x[0] = 1;
                _exit(98);
#endif
            }
            raise(SIGINT); /* the first: a flag */
            if (!gt_stop_signal()) _exit(97);
            raise(SIGINT); /* the second: the end */
            _exit(96);
        }
        int st;
        cr_assert_eq(waitpid(p, &st, 0), p);
        if (how == 0) cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "out of memory: status %d", st);
        else cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "second SIGINT: status %d", st);
        cr_assert(!exists(path), "%s was left (%s)", path, how ? "second signal" : "out of memory");
    }
}
