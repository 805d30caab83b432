/* test_bounded.c - inputs that are small or legal but once made the work behind them unbounded
 * (issue 24, class 3), and the errors that named no file or key: added tokens matched against a
 * naive leftmost-longest scan written here, 300k / 20k added tokens loaded and used within a
 * time bound, a stop signal answered within about a second while loading and encoding, regex
 * patterns that backtrack refused naming the tokenizer's pattern, a tokenizer with only
 * end_of_word_suffix (UBSan: memcpy from NULL), an index naming one shard through many links,
 * a jsonl line nested too deep, a template field name too long, an adapter whose base moved. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hf_weights.h"
#include "run_util.h"
#include "test_backend_select.h"
#include "test_util.h"
#include "tokenizer.h"

static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_bounded"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(bounded, .init = scratch_init, .fini = scratch_fini, .timeout = 240);

/* ---------------------------------------------------------------------------------------------
 * tokenizers, written here */

/* tests/fixtures/tokenizer/tiny-bpe (byte-level GPT-2 alphabet, 3 merges, BOS/EOS specials) */
static cJSON *tiny_bpe(void) {
    const char *root = getenv("GTRAIN_ROOT");
    char path[600];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/tiny-bpe/tokenizer.json", root ? root : ".");
    char *text = slurp(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j);
    return j;
}

/* n added tokens "<tok_I>", each given id (the next free id + shift): HF's id when shift is 0 */
static void add_tokens(cJSON *tok, int n, int shift) {
    cJSON *list = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    int next = 0;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tok, "model"), "vocab");
    for (const cJSON *v = vocab->child; v; v = v->next) next++;
    for (const cJSON *a = list->child; a; a = a->next) next++; /* the fixture's specials follow the vocab */
    for (int i = 0; i < n; i++) {
        char content[32];
        snprintf(content, sizeof content, "<tok_%d>", i);
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", next + i + shift);
        cJSON_AddStringToObject(a, "content", content);
        cJSON_AddBoolToObject(a, "single_word", false);
        cJSON_AddBoolToObject(a, "lstrip", false);
        cJSON_AddBoolToObject(a, "rstrip", false);
        cJSON_AddBoolToObject(a, "normalized", false);
        cJSON_AddBoolToObject(a, "special", false);
        cJSON_AddItemToArray(list, a);
    }
}

static void write_json(const char *name, cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    cr_assert_not_null(text);
    test_write_file(test_join(g_dir, name), text, strlen(text));
    free(text);
    cJSON_Delete(j);
}

/* the fixture with a Split on pattern (a Regex) before its ByteLevel */
static void write_split_tokenizer(const char *name, const char *pattern) {
    cJSON *t = tiny_bpe();
    cJSON *byte_level = cJSON_DetachItemFromObjectCaseSensitive(t, "pre_tokenizer");
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray(), *split = cJSON_CreateObject(),
          *pat = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(pat, "Regex", pattern);
    cJSON_AddItemToObject(split, "pattern", pat);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", false);
    cJSON_AddItemToArray(list, split);
    cJSON_AddItemToArray(list, byte_level);
    cJSON_AddItemToObject(seq, "pretokenizers", list);
    cJSON_AddItemToObject(t, "pre_tokenizer", seq);
    write_json(name, t);
}

/* ---------------------------------------------------------------------------------------------
 * gtrain as a child, with a time limit */

typedef struct {
    int status;
    double seconds, cpu; /* wall clock; the child's CPU (user + system), which a busy machine does not inflate */
    char *err;           /* stderr */
} Outcome;

static pid_t spawn(const char *const *args, const char *stdout_to) {
    const char *argv[16];
    int a = 0;
    argv[a++] = test_gtrain_bin();
    cr_assert_not_null(argv[0], "GTRAIN_BIN is not set (run through make test)");
    for (; args[a - 1] && a < 15; a++) argv[a] = args[a - 1];
    argv[a] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
        int fo = open(stdout_to ? stdout_to : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(test_join(g_dir, ".stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || chdir(g_dir) != 0) _exit(126);
        dup2(fo, 1), dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* waits at most limit seconds of wall clock (then kills it and fails) */
static Outcome finish(pid_t pid, double t0, double limit, const char *what) {
    Outcome o = {0};
    struct rusage ru;
    for (;;) {
        pid_t r = wait4(pid, &o.status, WNOHANG, &ru);
        cr_assert_geq(r, 0);
        if (r == pid) {
            o.cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
                    1e-6 * (double)ru.ru_stime.tv_usec;
            break;
        }
        if (now_s() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &o.status, 0);
            cr_assert_fail("%s: still running after %.1f s", what, limit);
        }
        sleep_s(0.01);
    }
    o.seconds = now_s() - t0;
    o.err = slurp(test_join(g_dir, ".stderr"), NULL);
    cr_assert_not_null(o.err);
    return o;
}

/* at most limit seconds of CPU, and 4 times that of wall clock (a busy machine) */
static Outcome run_limited(double limit, const char *what, const char *const *args) {
    double t0 = now_s();
    Outcome o = finish(spawn(args, NULL), t0, 4 * limit, what);
    cr_assert(o.cpu < limit, "%s: %.1f s of CPU, expected under %.0f", what, o.cpu, limit);
    return o;
}

static void expect_refusal(const Outcome *o, const char *what, const char *starts, const char *also) {
    cr_assert(WIFEXITED(o->status) && WEXITSTATUS(o->status) == 2, "%s: status %d, expected exit 2; stderr: %s", what,
              o->status, o->err);
    cr_assert_eq(count_lines(o->err), 1, "%s: not one line: %s", what, o->err);
    char head[700];
    snprintf(head, sizeof head, "gtrain: %s", starts);
    cr_assert(strncmp(o->err, head, strlen(head)) == 0, "%s: the line does not start with \"%s\": %s", what, head, o->err);
    if (also) cr_assert_not_null(strstr(o->err, also), "%s: the line lacks \"%s\": %s", what, also, o->err);
}

/* ---------------------------------------------------------------------------------------------
 * added tokens: leftmost-longest, as a naive scan finds them */

/* A BPE over {a, b, c, ' '} without merges or pre-tokenizer: text outside added tokens is one id
 * per character. Added tokens: k random strings over {a, b, c} (1..6 long, distinct), ids 4..,
 * the odd ones normalized (matched in the gaps the others leave, HF's second pass). */
typedef struct {
    char s[8];
    int len;
    bool normalized;
} Added;

/* the leftmost-longest of the tokens of one kind in text[a, b), from position at; -1 if none */
static int naive_find(const Added *t, int k, bool normalized, const char *text, size_t at, size_t b, size_t *start) {
    for (size_t i = at; i < b; i++) {
        int best = -1;
        for (int j = 0; j < k; j++)
            if (t[j].normalized == normalized && i + (size_t)t[j].len <= b && memcmp(text + i, t[j].s, (size_t)t[j].len) == 0 &&
                (best < 0 || t[j].len > t[best].len))
                best = j;
        if (best >= 0) {
            *start = i;
            return best;
        }
    }
    return -1;
}

static void naive_gap(const Added *t, int k, const char *text, size_t a, size_t b, TokIds *out) {
    size_t at = a, start;
    int j;
    while ((j = naive_find(t, k, true, text, at, b, &start)) >= 0) {
        for (size_t i = at; i < start; i++) tok_ids_push(out, text[i] == ' ' ? 3 : text[i] - 'a');
        tok_ids_push(out, 4 + j);
        at = start + (size_t)t[j].len;
    }
    for (size_t i = at; i < b; i++) tok_ids_push(out, text[i] == ' ' ? 3 : text[i] - 'a');
}

static void naive_encode(const Added *t, int k, const char *text, size_t n, TokIds *out) {
    size_t at = 0, start;
    int j;
    while ((j = naive_find(t, k, false, text, at, n, &start)) >= 0) {
        naive_gap(t, k, text, at, start, out);
        tok_ids_push(out, 4 + j);
        at = start + (size_t)t[j].len;
    }
    naive_gap(t, k, text, at, n, out);
}

Test(bounded, added_tokens_match_leftmost_longest_as_a_naive_scan) {
    uint64_t rng = 2024;
    for (int trial = 0; trial < 6; trial++) {
        int k = trial < 3 ? 12 : 300;
        Added *t = calloc((size_t)k, sizeof *t);
        cr_assert_not_null(t);
        cJSON *tok = cJSON_Parse("{\"version\": \"1.0\", \"added_tokens\": [], \"model\": {\"type\": \"BPE\", "
                                 "\"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \" \": 3}, \"merges\": []}}");
        cJSON *list = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
        for (int j = 0; j < k;) {
            Added a = {.len = 1 + (int)(rng_next(&rng) % 6), .normalized = j % 2 == 1};
            for (int i = 0; i < a.len; i++) a.s[i] = (char)('a' + rng_next(&rng) % 3);
            bool dup = a.len == 1; /* single letters would leave nothing for the model */
            for (int i = 0; i < j && !dup; i++) dup = t[i].len == a.len && memcmp(t[i].s, a.s, (size_t)a.len) == 0;
            if (dup) continue;
            t[j] = a;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "id", 4 + j);
            cJSON_AddStringToObject(o, "content", a.s);
            cJSON_AddBoolToObject(o, "normalized", a.normalized);
            cJSON_AddItemToArray(list, o);
            j++;
        }
        char *json = cJSON_PrintUnformatted(tok);
        cJSON_Delete(tok);
        Tokenizer *tk = NULL;
        GtError err = {0};
        cr_assert_eq(tokenizer_load_memory(&tk, "added.json", json, strlen(json), &err), 0, "%s", err.msg);
        free(json);
        size_t n = 4000;
        char *text = malloc(n);
        cr_assert_not_null(text);
        for (size_t i = 0; i < n; i++) text[i] = "abc "[rng_next(&rng) % 4];
        TokIds got = {0}, want = {0};
        TokEncoder *e = tok_encoder_new(tk);
        cr_assert_eq(tok_encode(e, "text", text, n, false, &got, &err), 0, "%s", err.msg);
        naive_encode(t, k, text, n, &want);
        cr_assert_eq(got.n, want.n, "trial %d: %zu ids, the naive scan gives %zu", trial, got.n, want.n);
        for (size_t i = 0; i < got.n; i++)
            cr_assert_eq(got.ids[i], want.ids[i], "trial %d: id %zu is %d, the naive scan gives %d", trial, i, got.ids[i],
                         want.ids[i]);
        tok_ids_free(&got);
        tok_ids_free(&want);
        tok_encoder_free(e);
        tokenizer_free(tk);
        free(text);
        free(t);
    }
}

/* ---------------------------------------------------------------------------------------------
 * many added tokens: loading and encoding bounded, the warnings counted */

static void write_text_with_tokens(const char *name, size_t bytes, int n_tokens) {
    char *s = malloc(bytes + 64);
    cr_assert_not_null(s);
    size_t o = 0;
    uint64_t rng = 7;
    static const char *const words[] = {"hello ", "world ", "the ", "x "};
    while (o < bytes) {
        uint64_t r = rng_next(&rng);
        if (r % 5 == 0) o += (size_t)snprintf(s + o, 64, "<tok_%d> ", (int)(r >> 8) % n_tokens);
        else o += (size_t)snprintf(s + o, 64, "%s", words[(r >> 8) % 4]);
    }
    test_write_file(test_join(g_dir, name), s, o);
    free(s);
}

Test(bounded, three_hundred_thousand_added_tokens_load_in_bounded_time) {
    cJSON *t = tiny_bpe();
    add_tokens(t, 300000, 0);
    write_json("big.json", t);
    write_text_with_tokens("small.txt", 20000, 300000);
    const char *args[] = {"tokenize", "--tokenizer", "big.json", "small.txt", NULL};
    Outcome o = run_limited(20, "300k added tokens", args);
    cr_assert(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0, "status %d: %s", o.status, o.err);
    cr_log_info("300k added tokens: loaded and 20 KB encoded in %.2f s of CPU", o.cpu);
    free(o.err);
}

Test(bounded, twenty_thousand_added_tokens_encode_a_megabyte_in_bounded_time) {
    cJSON *t = tiny_bpe();
    add_tokens(t, 20000, 0);
    write_json("mid.json", t);
    write_text_with_tokens("mb.txt", 1000000, 20000);
    const char *args[] = {"tokenize", "--tokenizer", "mid.json", "mb.txt", NULL};
    Outcome o = run_limited(20, "20k added tokens, 1 MB", args);
    cr_assert(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0, "status %d: %s", o.status, o.err);
    cr_assert_eq(o.err[0], 0, "unexpected stderr: %s", o.err);
    cr_log_info("20k added tokens: 1 MB encoded in %.2f s of CPU", o.cpu);
    free(o.err);
}

Test(bounded, added_tokens_with_unexpected_ids_warn_a_few_lines_and_a_count) {
    const int n = 20000, shown = 3;
    cJSON *t = tiny_bpe();
    add_tokens(t, n, 5); /* each given an id 5 past HF's */
    write_json("moved.json", t);
    test_write_file(test_join(g_dir, "one.txt"), "hello", 5);
    const char *args[] = {"tokenize", "--tokenizer", "moved.json", "one.txt", NULL};
    Outcome o = run_limited(20, "20k moved ids", args);
    cr_assert(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0, "status %d: %s", o.status, o.err);
    cr_assert_eq(count_lines(o.err), shown + 1, "expected %d warnings and a count, found: %.2000s", shown, o.err);
    char count[64];
    snprintf(count, sizeof count, "and %d more", n - shown);
    cr_assert_not_null(strstr(o.err, count), "no \"%s\" in: %s", count, o.err);
    cr_assert_not_null(strstr(o.err, "<tok_0>"), "the first token is not named: %s", o.err);
    free(o.err);
}

/* SIGTERM 0.5 s into loading a large tokenizer and encoding a large text: out within ~1 s */
Test(bounded, a_stop_signal_is_answered_while_loading_and_encoding) {
    cJSON *t = tiny_bpe();
    add_tokens(t, 100000, 0);
    write_json("sig.json", t);
    write_text_with_tokens("big.txt", 30000000, 100000);
    for (int pass = 0; pass < 2; pass++) {
        const char *args[] = {"tokenize", "--tokenizer", "sig.json", "big.txt", NULL};
        double t0 = now_s();
        pid_t pid = spawn(args, NULL);
        sleep_s(pass == 0 ? 0.5 : 2.0); /* loading, then (on an idle machine) encoding */
        int st;
        cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "it ended before the signal (%.1f s): make the input larger",
                     now_s() - t0);
        double ts = now_s();
        kill(pid, SIGTERM);
        Outcome o = finish(pid, ts, 10, "after SIGTERM");
        cr_assert(o.seconds < 1.5, "pass %d: %.2f s from SIGTERM to exit (stderr: %s)", pass, o.seconds, o.err);
        cr_assert(!(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0), "pass %d: exit 0 after SIGTERM", pass);
        cr_log_info("pass %d: out %.2f s after SIGTERM: %s", pass, o.seconds, o.err);
        free(o.err);
    }
}

/* ---------------------------------------------------------------------------------------------
 * regular expressions that backtrack */

Test(bounded, backtracking_patterns_are_refused_naming_the_pattern) {
    char *a = malloc(14001);
    cr_assert_not_null(a);
    memset(a, 'a', 14000);
    test_write_file(test_join(g_dir, "a14k.txt"), a, 14000);
    free(a);
    /* polynomial (no retry limit is reached: time is), and exponential (the retry limit) */
    const char *patterns[] = {"a*a*[^a]", "(a*)*[^a]", "a*a*a*[^a]"};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "re%d.json", i);
        write_split_tokenizer(name, patterns[i]);
        const char *args[] = {"tokenize", "--tokenizer", name, "a14k.txt", NULL};
        Outcome o = run_limited(15, patterns[i], args);
        expect_refusal(&o, patterns[i], name, "pre_tokenizer.pretokenizers[0].pattern.Regex");
        cr_assert_not_null(strstr(o.err, "a14k.txt"), "%s: the text is not named: %s", patterns[i], o.err);
        cr_log_info("%s: refused after %.2f s of CPU", patterns[i], o.cpu);
        free(o.err);
    }
    /* and an ordinary pattern still splits as before: a Split on "\n" changes nothing here */
    write_split_tokenizer("nl.json", "\\n");
    test_write_file(test_join(g_dir, "two.txt"), "the king\nthe war\n", 17);
    char split_out[600], plain_out[600];
    snprintf(split_out, sizeof split_out, "%s", test_join(g_dir, "split.out"));
    snprintf(plain_out, sizeof plain_out, "%s", test_join(g_dir, "plain.out"));
    const char *args[] = {"tokenize", "--tokenizer", "nl.json", "two.txt", NULL};
    double t0 = now_s();
    Outcome o = finish(spawn(args, split_out), t0, 20, "split on newline");
    cr_assert(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0, "%s", o.err);
    free(o.err);
    char fixture[600];
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/tokenizer/tiny-bpe", getenv("GTRAIN_ROOT"));
    const char *args2[] = {"tokenize", "--tokenizer", fixture, "two.txt", NULL};
    t0 = now_s();
    o = finish(spawn(args2, plain_out), t0, 20, "plain");
    free(o.err);
    /* ByteLevel's own regex already splits before "\n", so the ids agree */
    cr_assert(files_equal(split_out, plain_out), "a Split on \\n changed the ids");
}

/* ---------------------------------------------------------------------------------------------
 * a BPE with end_of_word_suffix and no continuing_subword_prefix (memcpy from NULL, UBSan) */

Test(bounded, a_suffix_only_bpe_encodes_as_its_merges_say) {
    const char *json = "{\"model\": {\"type\": \"BPE\", \"end_of_word_suffix\": \"</w>\", \"vocab\": "
                       "{\"a</w>\": 0, \"b</w>\": 1, \"a\": 2, \"b\": 3, \"ab</w>\": 4}, \"merges\": [\"a b</w>\"]}}";
    Tokenizer *t = NULL;
    GtError err = {0};
    cr_assert_eq(tokenizer_load_memory(&t, "suffix.json", json, strlen(json), &err), 0, "%s", err.msg);
    TokEncoder *e = tok_encoder_new(t);
    TokIds ids = {0};
    /* "ab": a (not last) + b</w> (last), merged; "ba": b + a</w>, no merge */
    cr_assert_eq(tok_encode(e, "x", "ab", 2, false, &ids, &err), 0, "%s", err.msg);
    cr_assert(ids.n == 1 && ids.ids[0] == 4, "\"ab\": %zu ids", ids.n);
    ids.n = 0;
    cr_assert_eq(tok_encode(e, "x", "ba", 2, false, &ids, &err), 0, "%s", err.msg);
    cr_assert(ids.n == 2 && ids.ids[0] == 3 && ids.ids[1] == 0, "\"ba\": %zu ids", ids.n);
    tok_ids_free(&ids);
    tok_encoder_free(e);
    tokenizer_free(t);
}

/* ---------------------------------------------------------------------------------------------
 * an index naming one shard by many names */

static void write_shard(const char *path) {
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t h = strlen(hdr);
    unsigned char buf[256] = {0};
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(h >> (8 * i));
    memcpy(buf + 8, hdr, h);
    test_write_file(path, buf, 8 + h + 8);
}

Test(bounded, an_index_naming_one_shard_through_links_is_refused_before_reading) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s", test_join(g_dir, "links"));
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/real.safetensors", dir);
    write_shard(path);
    for (int variant = 0; variant < 2; variant++) { /* symlinks, then a hard link */
        cJSON *idx = cJSON_CreateObject(), *wm = cJSON_CreateObject();
        int n = variant == 0 ? 60 : 2;
        for (int i = 0; i < n; i++) {
            char name[64], lpath[800], tensor[32];
            snprintf(name, sizeof name, "v%d-%02d.safetensors", variant, i);
            snprintf(lpath, sizeof lpath, "%s/%s", dir, name);
            if (variant == 0) cr_assert_eq(symlink("real.safetensors", lpath), 0);
            else if (i == 0) cr_assert_eq(link(path, lpath), 0);
            else snprintf(name, sizeof name, "real.safetensors");
            snprintf(tensor, sizeof tensor, "t%d", i);
            cJSON_AddStringToObject(wm, tensor, name);
        }
        cJSON_AddItemToObject(idx, "weight_map", wm);
        char *text = cJSON_PrintUnformatted(idx);
        cJSON_Delete(idx);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        test_write_file(path, text, strlen(text));
        free(text);
        HfWeights *w = NULL;
        GtError err = {0};
        cr_assert_neq(hf_weights_open(&w, dir, &err), 0, "variant %d: opened", variant);
        cr_assert_eq(err.code, 2, "variant %d: %s", variant, err.msg);
        cr_assert_not_null(strstr(err.msg, "the same file"), "variant %d: %s", variant, err.msg);
        cr_assert_not_null(strstr(err.msg, "model.safetensors.index.json"), "variant %d: %s", variant, err.msg);
        snprintf(path, sizeof path, "%s/real.safetensors", dir);
    }
}

/* ---------------------------------------------------------------------------------------------
 * errors that must name their file and key */

static int run_config(const Ws *w, const char *yaml, const char *tag) {
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/%s.yaml", w->dir, tag);
    put_file(cfg, yaml, strlen(yaml));
    Proc p;
    start_v(&p, w, cfg, NULL, tag, NULL, 0);
    return wait_proc(&p);
}

Test(bounded, a_jsonl_line_nested_too_deep_says_so) {
    Ws w;
    ws_init(&w);
    GtBytes line = {0};
    gt_bytes_put(&line, "{\"prompt\": \"q\", \"completion\": \"a\"}\n{\"prompt\": \"q\", \"completion\": ", 66);
    for (int i = 0; i < 2000; i++) gt_bytes_put(&line, "[", 1);
    for (int i = 0; i < 2000; i++) gt_bytes_put(&line, "]", 1);
    gt_bytes_put(&line, "}\n", 2);
    char path[400];
    snprintf(path, sizeof path, "%s/deep.jsonl", w.dir);
    put_file(path, line.p, line.n);
    gt_bytes_free(&line);
    int st = run_config(&w,
                        "model: model.json\ndata:\n  train: deep.jsonl\n  format: jsonl\n  seq_len: 32\n"
                        "per_device_train_batch_size: 1\nmax_steps: 1\noutput_dir: out-deep\nsample_max_new_tokens: 0\n",
                        "deep");
    expect_one_line(&w, "deep", st, 2, "deep.jsonl:2:", "nested too deep");
    ws_fini(&w);
}

Test(bounded, a_template_field_name_too_long_names_the_key) {
    Ws w;
    ws_init(&w);
    char yaml[2000], name[301];
    memset(name, 'f', 300);
    name[300] = 0;
    snprintf(yaml, sizeof yaml,
             "model: model.json\ndata:\n  train: x.jsonl\n  format: jsonl\n  seq_len: 32\n  prompt_template: \"{%s}\"\n"
             "per_device_train_batch_size: 1\nmax_steps: 1\noutput_dir: out-long\nsample_max_new_tokens: 0\n",
             name);
    char path[400];
    snprintf(path, sizeof path, "%s/x.jsonl", w.dir);
    put_file(path, "{\"prompt\": \"q\", \"completion\": \"a\"}\n", 36);
    int st = run_config(&w, yaml, "long");
    expect_one_line(&w, "long", st, 2, "data.prompt_template", "255 bytes");
    expect_one_line(&w, "long", st, 2, "long.yaml", NULL);
    ws_fini(&w);
}

Test(bounded, an_adapter_whose_base_moved_names_adapter_config_and_the_key) {
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s", test_join(g_dir, "adapter"));
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    const char *cfg = "{\"peft_type\": \"LORA\", \"task_type\": \"CAUSAL_LM\", \"r\": 2, \"lora_alpha\": 4, "
                      "\"target_modules\": [\"c_attn\"], \"base_model_name_or_path\": \"/nonexistent/moved-base\"}";
    test_write_file(path, cfg, strlen(cfg));
    const char *args[] = {"sample", "--checkpoint", "adapter", "--prompt", "hi", NULL};
    Outcome o = run_limited(30, "moved base", args);
    expect_refusal(&o, "moved base", "adapter/adapter_config.json: base_model_name_or_path", "/nonexistent/moved-base");
    free(o.err);
}
