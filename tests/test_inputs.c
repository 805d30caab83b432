/* test_inputs.c - hostile inputs to the data readers:
 *   jsonl strings keep every byte (\u0000, escapes, raw and invalid UTF-8), keys are exact and
 *   appear once; data in which the loaded split has no completion token is refused;
 *   and through the CLI: a FIFO, /dev/zero or a FIFO inside a directory given as data.train,
 *   data.val (a glob), init_from or the metrics.jsonl of `gtrain report` ends with one line on
 *   stderr naming it and exit 2, never a hang. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data.h"
#include "test_backend_select.h"

static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_inputs"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(inputs, .init = scratch_init, .fini = scratch_fini);

/* one jsonl example (split ALL, unpacked, seq_len T): its row of T tokens and T targets */
static void one_example(const char *content, size_t len, int T, int *tk, int *tg) {
    test_write_file(test_join(g_dir, "x.jsonl"), content, len);
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open(&d, test_join(g_dir, "x.jsonl"), DATA_JSONL, false, T, 256, DATA_SPLIT_ALL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(data_num_eval_windows(d), 1);
    data_fill_eval(d, 0, 1, tk, tg);
    data_close(d);
}

static void expect_jsonl_error(const char *content, int split, bool packing, const char *where, const char *what) {
    test_write_file(test_join(g_dir, "bad.jsonl"), content, strlen(content));
    DataSource *d = (DataSource *)0x1;
    GtError err = {0};
    int rc = data_open(&d, test_join(g_dir, "bad.jsonl"), DATA_JSONL, packing, 4, 256, split, 0.5, &err);
    cr_assert_eq(rc, -1, "accepted: %s", content);
    cr_assert_null(d);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "code %d: %s", err.code, err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    cr_assert_not_null(strstr(err.msg, where), "no \"%s\" in: %s", where, err.msg);
    cr_assert_not_null(strstr(err.msg, what), "no \"%s\" in: %s", what, err.msg);
}

/* ---------------------------------------------------------------------------------------------
 * jsonl strings and keys */

Test(inputs, jsonl_nul_escape_keeps_every_byte) {
    static const char line[] = "{\"prompt\": \"a\\u0000b\", \"completion\": \"c\\u0000\"}\n";
    int tk[8], tg[8];
    one_example(line, sizeof line - 1, 8, tk, tg);
    /* row a 0 b | c 0, then padding; targets: the completion tokens c and 0 (a real 0, not -100) */
    const int et[8] = {'a', 0, 'b', 'c', 0, 0, 0, 0};
    const int eg[8] = {-100, -100, 'c', 0, -100, -100, -100, -100};
    for (int t = 0; t < 8; t++) {
        cr_assert_eq(tk[t], et[t], "token %d: %d", t, tk[t]);
        cr_assert_eq(tg[t], eg[t], "target %d: %d", t, tg[t]);
    }
}

Test(inputs, jsonl_escapes_raw_and_invalid_utf8_bytes) {
    /* every JSON escape, a 2-byte and a 4-byte (surrogate pair) character, raw invalid UTF-8 and a
     * raw NUL byte inside the string: the bytes are the tokens */
    static const char line[] = "{\"prompt\": \"\", \"completion\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00"
                               "\xff\xfe\x00z\"}\n";
    const int bytes[] = {'"', '\\', '/', 8, 12, 10, 13, 9, 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0xFE, 0, 'z'};
    const int nb = (int)(sizeof bytes / sizeof bytes[0]);
    int tk[32], tg[32];
    one_example(line, sizeof line - 1, 32, tk, tg);
    for (int t = 0; t < nb; t++) cr_assert_eq(tk[t], bytes[t], "token %d: %d, expected %d", t, tk[t], bytes[t]);
    for (int t = nb; t < 32; t++) cr_assert_eq(tk[t], 0);
    for (int t = 0; t + 1 < nb; t++) cr_assert_eq(tg[t], bytes[t + 1], "target %d", t);
    cr_assert_eq(tg[nb - 1], -100);
}

Test(inputs, jsonl_duplicate_keys_refused) {
    const char *ok = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%s{\"prompt\": \"a\", \"completion\": \"b\", \"completion\": \"c\"}\n", ok);
    expect_jsonl_error(buf, DATA_SPLIT_ALL, false, "bad.jsonl:2:", "\"completion\": expected each key once");
    /* the same key spelled with an escape is the same key */
    expect_jsonl_error("{\"prompt\": \"a\", \"pro\\u006dpt\": \"x\", \"completion\": \"b\"}\n", DATA_SPLIT_ALL, false,
                       "bad.jsonl:1:", "\"prompt\": expected each key once");
    /* any key, not only the four that are read; ids form; packed */
    expect_jsonl_error("{\"id\": 1, \"prompt_ids\": [1], \"completion_ids\": [2], \"id\": 2}\n", DATA_SPLIT_ALL, true,
                       "bad.jsonl:1:", "\"id\": expected each key once");
    expect_jsonl_error("{\"prompt_ids\": [1], \"completion_ids\": [2], \"prompt_ids\": [3]}\n", DATA_SPLIT_ALL, false,
                       "bad.jsonl:1:", "\"prompt_ids\"");
    /* a NUL inside a key is part of it: shown escaped, and "prompt\u0000x" is not "prompt" */
    expect_jsonl_error("{\"k\\u0000\": 1, \"k\\u0000\": 2, \"prompt\": \"a\", \"completion\": \"b\"}\n", DATA_SPLIT_ALL,
                       false, "bad.jsonl:1:", "\"k\\x00\": expected each key once");
    expect_jsonl_error("{\"prompt\\u0000x\": \"zz\", \"completion\": \"b\"}\n", DATA_SPLIT_ALL, false, "bad.jsonl:1:",
                       "\"prompt\" is missing");
    /* the empty key twice (no key bytes at all) */
    expect_jsonl_error("{\"\": \"\", \"\": \"a\"}\n", DATA_SPLIT_ALL, false, "bad.jsonl:1:",
                       "\"\": expected each key once");
    /* nested objects are not read: their keys are not checked */
    static const char nested[] = "\xEF\xBB\xBF{\"meta\": {\"a\": [1, {\"b\": \"}\"}], \"a\": 2}, \"prompt\": \"p\", "
                                 "\"completion\": \"q\"}\n";
    int tk[4], tg[4];
    one_example(nested, sizeof nested - 1, 4, tk, tg);
    cr_assert_eq(tk[0], 'p');
    cr_assert_eq(tk[1], 'q');
    cr_assert_eq(tg[0], 'q');
}

/* ---------------------------------------------------------------------------------------------
 * no completion token in the split that is loaded */

Test(inputs, split_without_completion_tokens_refused) {
    /* val_fraction 0.5 of 4 examples: the train split is the first 2, both with empty completions */
    const char *half = "{\"prompt\": \"a\", \"completion\": \"\"}\n{\"prompt\": \"b\", \"completion\": \"\"}\n"
                       "{\"prompt\": \"c\", \"completion\": \"de\"}\n{\"prompt\": \"f\", \"completion\": \"gh\"}\n";
    expect_jsonl_error(half, DATA_SPLIT_TRAIN, false, "bad.jsonl", "train split");
    expect_jsonl_error(half, DATA_SPLIT_TRAIN, false, "bad.jsonl", "has a completion token");
    expect_jsonl_error(half, DATA_SPLIT_TRAIN, true, "bad.jsonl", "train split");
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open(&d, test_join(g_dir, "bad.jsonl"), DATA_JSONL, false, 4, 256, DATA_SPLIT_VAL, 0.5, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(data_num_tokens(d), 2);
    data_close(d);
    /* the other way round: the val split has nothing to score */
    const char *tail = "{\"prompt\": \"c\", \"completion\": \"de\"}\n{\"prompt\": \"f\", \"completion\": \"gh\"}\n"
                       "{\"prompt\": \"a\", \"completion\": \"\"}\n{\"prompt\": \"0123456789\", \"completion\": \"x\"}\n";
    expect_jsonl_error(tail, DATA_SPLIT_VAL, false, "bad.jsonl", "val split");
    /* packed: the only completion token is the stream's first token, which is never a target */
    expect_jsonl_error("{\"prompt\": \"\", \"completion\": \"a\"}\n{\"prompt\": \"bcdefgh\", \"completion\": \"\"}\n",
                       DATA_SPLIT_ALL, true, "bad.jsonl", "has a completion token");
}

/* token and text data too short for one window of seq_len+1 tokens (in the split that is loaded) */
Test(inputs, too_short_for_one_window_refused) {
    int32_t hdr[256] = {20240520, 1, 8};
    uint16_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    FILE *f = fopen(test_join(g_dir, "s.bin"), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(hdr, sizeof hdr, 1, f), 1);
    cr_assert_eq(fwrite(tok, 2, 8, f), 8);
    cr_assert_eq(fclose(f), 0);
    DataSource *d = (DataSource *)0x1;
    GtError err = {0};
    cr_assert_eq(data_open(&d, test_join(g_dir, "s.bin"), DATA_TOKENS, false, 8, 256, DATA_SPLIT_ALL, 0, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, "s.bin") && strstr(err.msg, "seq_len+1 = 9"), "%s", err.msg);
    /* 20 bytes of text: the val split (10 %) holds 2, fewer than 9 */
    test_write_file(test_join(g_dir, "s.txt"), "abcdefghijklmnopqrst", 20);
    cr_assert_eq(data_open(&d, test_join(g_dir, "s.txt"), DATA_TEXT, false, 8, 256, DATA_SPLIT_VAL, 0.1, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, "s.txt") && strstr(err.msg, "val split") && strstr(err.msg, "2 tokens"), "%s", err.msg);
}

/* ---------------------------------------------------------------------------------------------
 * special files through the CLI */

#define GOOD_MODEL                                                                                               \
    "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256,"            \
    " \"n_positions\": 32}\n"

/* llm.c shard of n tokens, written independently of data.c */
static void shard(const char *path, int n) {
    int32_t hdr[256] = {0};
    hdr[0] = 20240520;
    hdr[1] = 1;
    hdr[2] = n;
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(hdr, sizeof hdr, 1, f), 1);
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)(i * 7 % 256);
        cr_assert_eq(fwrite(&t, 2, 1, f), 1);
    }
    cr_assert_eq(fclose(f), 0);
}

/* Run gtrain with argv (NULL-terminated after argv[0] = the binary) from g_dir, killed after 60 s;
 * returns its wait status, stderr in err_buf. */
static int run_gtrain(char *const argv[], char *err_buf, size_t cap) {
    const char *ep = test_join(g_dir, "stderr.txt");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644), nul = open("/dev/null", O_WRONLY);
        if (fd < 0 || nul < 0 || chdir(g_dir) != 0) _exit(127);
        dup2(fd, 2);
        dup2(nul, 1);
        alarm(60); /* survives exec: a hang ends with SIGALRM */
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    FILE *f = fopen(ep, "r");
    size_t n = f ? fread(err_buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    err_buf[n] = '\0';
    return status;
}

static void expect_cli_refusal(const char *tag, char *const argv[], const char *named) {
    static char err[1 << 16];
    int status = run_gtrain(argv, err, sizeof err);
    cr_assert_not(WIFSIGNALED(status), "[%s] killed by signal %d (a hang?); stderr: %s", tag, WTERMSIG(status), err);
    cr_assert(WIFEXITED(status));
    cr_expect_eq(WEXITSTATUS(status), GT_EXIT_BAD_INPUT, "[%s] exit %d, expected 2; stderr: %s", tag,
                 WEXITSTATUS(status), err);
    size_t len = strlen(err);
    int lines = 0;
    for (size_t k = 0; k < len; k++) lines += err[k] == '\n';
    cr_expect(len > 0 && err[len - 1] == '\n' && lines == 1, "[%s] stderr is not exactly one line: %s", tag, err);
    cr_expect(strstr(err, named) != NULL, "[%s] stderr does not name %s: %s", tag, named, err);
}

Test(inputs, special_files_through_the_cli, .timeout = 240) {
    const char *bin = test_gtrain_bin();
    if (!bin || !*bin) cr_skip_test("GTRAIN_BIN is not set (run through make test)");
    test_write_file(test_join(g_dir, "m.json"), GOOD_MODEL, strlen(GOOD_MODEL));
    shard(test_join(g_dir, "tr_000.bin"), 300);
    shard(test_join(g_dir, "v_000.bin"), 100);
    cr_assert_eq(mkfifo(test_join(g_dir, "v_001.bin"), 0600), 0);
    cr_assert_eq(mkfifo(test_join(g_dir, "fifo.txt"), 0600), 0);
    cr_assert_eq(symlink("/dev/zero", test_join(g_dir, "zero.bin")), 0);
    cr_assert_eq(mkdir(test_join(g_dir, "ck"), 0755), 0);
    cr_assert_eq(mkfifo(test_join(g_dir, "ck/model.safetensors"), 0600), 0);
    cr_assert_eq(mkdir(test_join(g_dir, "rep"), 0755), 0);
    cr_assert_eq(mkfifo(test_join(g_dir, "rep/metrics.jsonl"), 0600), 0);
    const char *cfg = "model: m.json\ndata:\n  train: tr_*.bin\n  format: tokens\n  seq_len: 16\n"
                      "per_device_train_batch_size: 2\nmax_steps: 1\nsave_steps: 0\noutput_dir: out\n";
    test_write_file(test_join(g_dir, "run.yaml"), cfg, strlen(cfg));
    char *c = (char *)test_join(g_dir, "run.yaml"), *b = (char *)bin;
    {
        char *argv[] = {b, "--config", c, "--set", "data.train=fifo.txt", "--set", "data.format=text", NULL};
        expect_cli_refusal("train fifo", argv, "fifo.txt");
    }
    {
        char *argv[] = {b, "--config", c, "--set", "data.train=zero.bin", NULL};
        expect_cli_refusal("train /dev/zero", argv, "zero.bin");
    }
    {
        char *argv[] = {b, "--config", c, "--set", "data.val=v_*.bin", NULL};
        expect_cli_refusal("val glob with a fifo", argv, "v_001.bin");
    }
    {
        char *argv[] = {b, "--config", c, "--set", "init_from=ck", NULL};
        expect_cli_refusal("init_from dir with a fifo", argv, "model.safetensors");
    }
    {
        char *argv[] = {b, "--config", c, "--set", "init_from=zero.bin", NULL};
        expect_cli_refusal("init_from /dev/zero", argv, "zero.bin");
    }
    {
        char *argv[] = {b, "report", (char *)test_join(g_dir, "rep"), NULL};
        expect_cli_refusal("report fifo", argv, "metrics.jsonl");
    }
    {
        char *argv[] = {b, "report", "", NULL};
        expect_cli_refusal("report \"\"", argv, "no run directory");
    }
}
