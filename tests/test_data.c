/* test_data.c - token sources: text split, windows, determinism, split independence, shards
 * (written independently here with raw fwrite), globs, hostile shards, SFT jsonl, eval windows. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "test_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"

/* Each Criterion test runs in its own process: one scratch directory per test. */
static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_data"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(data, .init = scratch_init, .fini = scratch_fini);

static void write_str(const char *path, const char *s) { test_write_file(path, s, strlen(s)); }

/* An llm.c shard written independently of data.c: int32 header[256] + uint16 tokens, raw fwrite
 * (this test assumes a little-endian host, as llm.c does), plus `extra` junk bytes. */
static void raw_shard(const char *path, int32_t magic, int32_t version, int32_t count, const uint16_t *tok,
                      size_t n_tok, size_t extra) {
    int32_t hdr[256] = {0};
    hdr[0] = magic;
    hdr[1] = version;
    hdr[2] = count;
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(hdr, sizeof hdr, 1, f), 1);
    if (n_tok) cr_assert_eq(fwrite(tok, 2, n_tok, f), n_tok);
    for (size_t i = 0; i < extra; i++) fputc(0x5a, f);
    cr_assert_eq(fclose(f), 0);
}

static uint8_t *random_bytes(size_t n, uint32_t seed) {
    uint8_t *b = malloc(n);
    cr_assert_not_null(b);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)(x >> 7);
    }
    return b;
}

static DataSource *open_ok_packing(const char *path, DataFormat fmt, bool packing, int T, int vocab, int split,
                                   double vf) {
    DataSource *d = NULL;
    GtError err = {0};
    int rc = data_open(&d, path, fmt, packing, T, vocab, split, vf, &err);
    cr_assert_eq(rc, 0, "data_open(%s) failed: %s", path, err.msg);
    cr_assert_not_null(d);
    return d;
}

static DataSource *open_ok(const char *path, DataFormat fmt, int T, int vocab, int split, double vf) {
    return open_ok_packing(path, fmt, false, T, vocab, split, vf);
}

/* data_open must fail with one line naming the file and containing `what` */
static void expect_error(const char *path, DataFormat fmt, int T, int vocab, const char *name_in_msg,
                         const char *what) {
    DataSource *d = (DataSource *)0x1;
    GtError err = {0};
    int rc = data_open(&d, path, fmt, false, T, vocab, DATA_SPLIT_ALL, 0.0, &err);
    cr_assert_eq(rc, -1, "expected an error for %s", path);
    cr_assert_null(d);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "code %d for: %s", err.code, err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "more than one line: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, name_in_msg), "message does not name %s: %s", name_in_msg, err.msg);
    cr_assert_not_null(strstr(err.msg, what), "message lacks \"%s\": %s", what, err.msg);
}

/* ---------------------------------------------------------------------------------------------
 * text */

Test(data, text_split_sizes) {
    uint8_t *raw = random_bytes(1000, 1);
    test_write_file(test_join(g_dir, "t.txt"), raw, 1000);
    DataSource *all = open_ok(test_join(g_dir, "t.txt"), DATA_TEXT, 16, 256, DATA_SPLIT_ALL, 0.1);
    DataSource *tr = open_ok(test_join(g_dir, "t.txt"), DATA_TEXT, 16, 256, DATA_SPLIT_TRAIN, 0.1);
    DataSource *va = open_ok(test_join(g_dir, "t.txt"), DATA_TEXT, 16, 256, DATA_SPLIT_VAL, 0.1);
    cr_assert_eq(data_num_tokens(all), 1000);
    cr_assert_eq(data_num_tokens(tr), 900);
    cr_assert_eq(data_num_tokens(va), 100);
    /* the val split is the last 100 bytes: its eval window 0 starts at byte 900 */
    int tok[16], tgt[16];
    cr_assert_eq(data_num_eval_windows(va), (100 - 1) / 16);
    data_fill_eval(va, 0, 1, tok, tgt);
    for (int t = 0; t < 16; t++) {
        cr_assert_eq(tok[t], raw[900 + t]);
        cr_assert_eq(tgt[t], raw[901 + t]);
    }
    data_fill_eval(tr, 0, 1, tok, tgt);
    for (int t = 0; t < 16; t++) cr_assert_eq(tok[t], raw[t]);
    data_close(all);
    data_close(tr);
    data_close(va);
    free(raw);
}

Test(data, text_split_too_small_is_an_error) {
    uint8_t *raw = random_bytes(100, 2);
    test_write_file(test_join(g_dir, "small.txt"), raw, 100);
    DataSource *d = NULL;
    GtError err = {0};
    /* 5% of 100 bytes = 5 < seq_len + 1 */
    cr_assert_eq(data_open(&d, test_join(g_dir, "small.txt"), DATA_TEXT, false, 16, 256, DATA_SPLIT_VAL, 0.05, &err), -1);
    cr_assert_not_null(strstr(err.msg, "small.txt"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "val split"), "%s", err.msg);
    free(raw);
}

/* Every row is a window of the raw train bytes (found by search, independently of data.c). */
Test(data, train_windows_in_range_and_shifted) {
    const int T = 12, n = 2000;
    uint8_t *raw = random_bytes(n, 3);
    test_write_file(test_join(g_dir, "w.txt"), raw, n);
    DataSource *d = open_ok(test_join(g_dir, "w.txt"), DATA_TEXT, T, 256, DATA_SPLIT_TRAIN, 0.25);
    const int n_train = 1500, rows = 32;
    int tok[32 * 12], tgt[32 * 12];
    for (long step = 0; step < 20; step++) {
        data_fill_train(d, 1234, true, step, rows, 0, rows, tok, tgt);
        for (int r = 0; r < rows; r++) {
            const int *a = tok + r * T, *b = tgt + r * T;
            for (int t = 0; t + 1 < T; t++) cr_assert_eq(b[t], a[t + 1]);
            int found = -1;
            for (int s = 0; s <= n_train - T - 1 && found < 0; s++) {
                int ok = 1;
                for (int t = 0; t < T && ok; t++) ok = raw[s + t] == a[t] && raw[s + t + 1] == b[t];
                if (ok) found = s;
            }
            cr_assert_geq(found, 0, "row %d of step %ld is not a window of the train split", r, step);
        }
    }
    data_close(d);
    free(raw);
}

Test(data, train_rows_deterministic) {
    uint8_t *raw = random_bytes(5000, 4);
    test_write_file(test_join(g_dir, "d.txt"), raw, 5000);
    DataSource *a = open_ok(test_join(g_dir, "d.txt"), DATA_TEXT, 32, 256, DATA_SPLIT_ALL, 0);
    DataSource *b = open_ok(test_join(g_dir, "d.txt"), DATA_TEXT, 32, 256, DATA_SPLIT_ALL, 0);
    int t1[8 * 32], g1[8 * 32], t2[8 * 32], g2[8 * 32];
    data_fill_train(a, 99, true, 7, 8, 0, 8, t1, g1);
    data_fill_train(b, 99, true, 7, 8, 0, 8, t2, g2);
    cr_assert_eq(memcmp(t1, t2, sizeof t1), 0);
    cr_assert_eq(memcmp(g1, g2, sizeof g1), 0);
    data_fill_train(a, 99, true, 7, 8, 0, 8, t2, g2); /* same source again: no hidden state */
    cr_assert_eq(memcmp(t1, t2, sizeof t1), 0);
    data_close(a);
    data_close(b);
    free(raw);
}

static void check_split_independence(const DataSource *d, int T, long eb) {
    size_t n = (size_t)eb * (size_t)T;
    int *t1 = calloc(n, sizeof(int)), *g1 = calloc(n, sizeof(int));
    int *t2 = calloc(n, sizeof(int)), *g2 = calloc(n, sizeof(int));
    cr_assert(t1 && g1 && t2 && g2);
    for (long step = 0; step < 5; step++) {
        data_fill_train(d, 42, true, step, eb, 0, (int)eb, t1, g1);
        for (int micro = 1; micro <= eb; micro *= 2) {
            memset(t2, 0x7f, n * sizeof(int));
            memset(g2, 0x7f, n * sizeof(int));
            for (long first = 0; first < eb; first += micro)
                data_fill_train(d, 42, true, step, eb, first, micro, t2 + first * T, g2 + first * T);
            cr_assert_eq(memcmp(t1, t2, n * sizeof(int)), 0, "tokens differ, micro-batch %d step %ld", micro, step);
            cr_assert_eq(memcmp(g1, g2, n * sizeof(int)), 0, "targets differ, micro-batch %d step %ld", micro, step);
        }
    }
    free(t1);
    free(g1);
    free(t2);
    free(g2);
}

Test(data, rows_independent_of_micro_batch_split) {
    uint8_t *raw = random_bytes(3000, 5);
    test_write_file(test_join(g_dir, "s.txt"), raw, 3000);
    DataSource *d = open_ok(test_join(g_dir, "s.txt"), DATA_TEXT, 16, 256, DATA_SPLIT_ALL, 0);
    check_split_independence(d, 16, 8); /* 1 x 8, 2 x 4, 4 x 2, 8 x 1 */
    data_close(d);
    free(raw);

    /* jsonl: 5 examples, so steps of 8 rows cross epochs */
    write_str(test_join(g_dir, "s.jsonl"), "{\"prompt\":\"a\",\"completion\":\"bc\"}\n"
                                "{\"prompt\":\"dd\",\"completion\":\"e\"}\n"
                                "{\"prompt_ids\":[1,2],\"completion_ids\":[3]}\n"
                                "{\"prompt\":\"\",\"completion\":\"xyz\"}\n"
                                "{\"prompt\":\"q\",\"completion\":\"rstuvwxyz0123\"}\n");
    DataSource *j = open_ok(test_join(g_dir, "s.jsonl"), DATA_JSONL, 6, 256, DATA_SPLIT_ALL, 0);
    check_split_independence(j, 6, 8);
    data_close(j);
}

Test(data, different_steps_and_seeds_differ) {
    uint8_t *raw = random_bytes(10000, 6);
    test_write_file(test_join(g_dir, "x.txt"), raw, 10000);
    DataSource *d = open_ok(test_join(g_dir, "x.txt"), DATA_TEXT, 16, 256, DATA_SPLIT_ALL, 0);
    int a[8 * 16], b[8 * 16], c[8 * 16], tg[8 * 16];
    data_fill_train(d, 1, true, 0, 8, 0, 8, a, tg);
    data_fill_train(d, 1, true, 1, 8, 0, 8, b, tg);
    data_fill_train(d, 2, true, 0, 8, 0, 8, c, tg);
    cr_assert_neq(memcmp(a, b, sizeof a), 0, "steps 0 and 1 drew the same rows");
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "seeds 1 and 2 drew the same rows");
    /* rows within a step differ too */
    cr_assert_neq(memcmp(a, a + 16, 16 * sizeof(int)), 0);
    data_close(d);
    free(raw);
}

/* Window starts are uniform over [0, n - T - 1]: a shard whose token i is i names each start. */
Test(data, window_starts_uniform) {
    enum { T = 8, STARTS = 100, N = T + STARTS };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)i;
    raw_shard(test_join(g_dir, "u.bin"), 20240520, 1, N, tok, N, 0);
    DataSource *d = open_ok(test_join(g_dir, "u.bin"), DATA_TOKENS, T, 50257, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), N);
    static int count[STARTS];
    memset(count, 0, sizeof count);
    int rows[100 * T], tg[100 * T];
    const int steps = 1000;
    for (int s = 0; s < steps; s++) {
        data_fill_train(d, 7, true, s, 100, 0, 100, rows, tg);
        for (int r = 0; r < 100; r++) {
            int st = rows[r * T];
            cr_assert(st >= 0 && st < STARTS, "start %d out of [0, %d]", st, STARTS - 1);
            cr_assert_eq(tg[r * T + T - 1], st + T);
            count[st]++;
        }
    }
    double expect = steps * 100.0 / STARTS, chi2 = 0;
    for (int i = 0; i < STARTS; i++) {
        cr_assert_gt(count[i], 0, "start %d never drawn", i);
        chi2 += (count[i] - expect) * (count[i] - expect) / expect;
    }
    /* 99 degrees of freedom: mean 99, sd 14; 200 is ~7 sd out */
    cr_assert_lt(chi2, 200.0, "chi2 %.1f: window starts are not uniform", chi2);
    data_close(d);
}

/* ---------------------------------------------------------------------------------------------
 * shards */

Test(data, shard_round_trip) {
    enum { N = 777 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)((i * 7919u) % 50257u);
    /* reader on an independently written shard */
    raw_shard(test_join(g_dir, "raw.bin"), 20240520, 1, N, tok, N, 0);
    DataSource *d = open_ok(test_join(g_dir, "raw.bin"), DATA_TOKENS, 10, 50257, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), N);
    long nw = data_num_eval_windows(d);
    cr_assert_eq(nw, (N - 1) / 10);
    int a[10], b[10];
    for (long w = 0; w < nw; w++) {
        data_fill_eval(d, w, 1, a, b);
        for (int t = 0; t < 10; t++) {
            cr_assert_eq(a[t], tok[w * 10 + t]);
            cr_assert_eq(b[t], tok[w * 10 + t + 1]);
        }
    }
    data_close(d);

    /* writer: byte-identical to the independent one, and no temp file left behind */
    GtError err = {0};
    static uint32_t tok32[N];
    for (int i = 0; i < N; i++) tok32[i] = tok[i];
    cr_assert_eq(data_write_token_shard(test_join(g_dir, "w.bin"), tok32, N, DATA_SHARD_AUTO, &err), 0, "%s", err.msg);
    FILE *f1 = fopen(test_join(g_dir, "raw.bin"), "rb"), *f2 = fopen(test_join(g_dir, "w.bin"), "rb");
    cr_assert(f1 && f2);
    static uint8_t b1[1024 + 2 * N + 1], b2[1024 + 2 * N + 1];
    size_t n1 = fread(b1, 1, sizeof b1, f1), n2 = fread(b2, 1, sizeof b2, f2);
    fclose(f1);
    fclose(f2);
    cr_assert_eq(n1, 1024 + 2 * N);
    cr_assert_eq(n2, n1);
    cr_assert_eq(memcmp(b1, b2, n1), 0);
    int files = 0;
    DIR *dir = opendir(g_dir);
    for (struct dirent *e; (e = readdir(dir));) files += e->d_name[0] != '.';
    closedir(dir);
    cr_assert_eq(files, 2, "temp file left behind");
}

Test(data, shard_glob_concatenates_sorted) {
    uint16_t a[300], b[200];
    for (int i = 0; i < 300; i++) a[i] = (uint16_t)i;
    for (int i = 0; i < 200; i++) b[i] = (uint16_t)(1000 + i);
    /* written in reverse order: the glob must sort */
    raw_shard(test_join(g_dir, "train_001.bin"), 20240520, 1, 200, b, 200, 0);
    raw_shard(test_join(g_dir, "train_000.bin"), 20240520, 1, 300, a, 300, 0);
    raw_shard(test_join(g_dir, "val_000.bin"), 20240520, 1, 300, a, 300, 0);
    char pattern[512];
    snprintf(pattern, sizeof pattern, "%s/train_*.bin", g_dir);
    DataSource *d = open_ok(pattern, DATA_TOKENS, 16, 50257, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), 500);
    /* the window across the boundary: starts at 18*16 = 288 */
    int tk[16], tg[16];
    data_fill_eval(d, 18, 1, tk, tg);
    for (int t = 0; t < 16; t++) {
        int i = 288 + t;
        cr_assert_eq(tk[t], i < 300 ? i : 1000 + i - 300);
        cr_assert_eq(tg[t], i + 1 < 300 ? i + 1 : 1000 + i + 1 - 300);
    }
    data_close(d);

    snprintf(pattern, sizeof pattern, "%s/nothing_*.bin", g_dir);
    expect_error(pattern, DATA_TOKENS, 16, 50257, "nothing_*.bin", "no token shard matches");
}

Test(data, hostile_shards_rejected) {
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)i;
    raw_shard(test_join(g_dir, "trunc.bin"), 20240520, 1, 100, tok, 50, 0);
    expect_error(test_join(g_dir, "trunc.bin"), DATA_TOKENS, 8, 50257, "trunc.bin", "truncated");
    raw_shard(test_join(g_dir, "over.bin"), 20240520, 1, 100, tok, 100, 3);
    expect_error(test_join(g_dir, "over.bin"), DATA_TOKENS, 8, 50257, "over.bin", "oversized");
    raw_shard(test_join(g_dir, "magic.bin"), 20240521, 1, 100, tok, 100, 0);
    expect_error(test_join(g_dir, "magic.bin"), DATA_TOKENS, 8, 50257, "magic.bin", "magic");
    raw_shard(test_join(g_dir, "ver.bin"), 20240520, 2, 100, tok, 100, 0);
    expect_error(test_join(g_dir, "ver.bin"), DATA_TOKENS, 8, 50257, "ver.bin", "version");
    raw_shard(test_join(g_dir, "huge.bin"), 20240520, 1, 0x7fffffff, tok, 100, 0);
    expect_error(test_join(g_dir, "huge.bin"), DATA_TOKENS, 8, 50257, "huge.bin", "2147483647");
    raw_shard(test_join(g_dir, "neg.bin"), 20240520, 1, -2, tok, 100, 0);
    expect_error(test_join(g_dir, "neg.bin"), DATA_TOKENS, 8, 50257, "neg.bin", "negative");
    raw_shard(test_join(g_dir, "zero.bin"), 20240520, 1, 0, tok, 0, 0);
    expect_error(test_join(g_dir, "zero.bin"), DATA_TOKENS, 8, 50257, "zero.bin", "no tokens");
    test_write_file(test_join(g_dir, "tiny.bin"), "abc", 3);
    expect_error(test_join(g_dir, "tiny.bin"), DATA_TOKENS, 8, 50257, "tiny.bin", "truncated");
    raw_shard(test_join(g_dir, "short.bin"), 20240520, 1, 5, tok, 5, 0);
    expect_error(test_join(g_dir, "short.bin"), DATA_TOKENS, 8, 50257, "short.bin", "seq_len+1 = 9");
    /* a token out of the model's vocabulary: the position is named */
    tok[37] = 50257;
    raw_shard(test_join(g_dir, "vocab.bin"), 20240520, 1, 100, tok, 100, 0);
    expect_error(test_join(g_dir, "vocab.bin"), DATA_TOKENS, 8, 50257, "vocab.bin", "position 37");
    expect_error(test_join(g_dir, "vocab.bin"), DATA_TOKENS, 8, 50257, "vocab.bin", "vocab_size 50257");
    /* one bad shard in a glob is named */
    tok[37] = 1;
    raw_shard(test_join(g_dir, "g_000.bin"), 20240520, 1, 100, tok, 100, 0);
    raw_shard(test_join(g_dir, "g_001.bin"), 20240520, 1, 100, tok, 99, 0);
    char pattern[512];
    snprintf(pattern, sizeof pattern, "%s/g_*.bin", g_dir);
    expect_error(pattern, DATA_TOKENS, 8, 50257, "g_001.bin", "truncated");
}

Test(data, missing_directory_empty_files_rejected) {
    expect_error(test_join(g_dir, "absent.txt"), DATA_TEXT, 8, 256, "absent.txt", "cannot open");
    expect_error(test_join(g_dir, "absent.bin"), DATA_TOKENS, 8, 256, "absent.bin", "cannot open");
    expect_error(test_join(g_dir, "absent.jsonl"), DATA_JSONL, 8, 256, "absent.jsonl", "cannot open");
    cr_assert_eq(mkdir(test_join(g_dir, "adir"), 0755), 0);
    expect_error(test_join(g_dir, "adir"), DATA_TEXT, 8, 256, "adir", "directory");
    expect_error(test_join(g_dir, "adir"), DATA_TOKENS, 8, 256, "adir", "directory");
    test_write_file(test_join(g_dir, "empty.txt"), "", 0);
    expect_error(test_join(g_dir, "empty.txt"), DATA_TEXT, 8, 256, "empty.txt", "empty");
    test_write_file(test_join(g_dir, "empty.jsonl"), "", 0);
    expect_error(test_join(g_dir, "empty.jsonl"), DATA_JSONL, 8, 256, "empty.jsonl", "empty");
    write_str(test_join(g_dir, "short.txt"), "hello");
    expect_error(test_join(g_dir, "short.txt"), DATA_TEXT, 8, 256, "short.txt", "seq_len+1 = 9");
    write_str(test_join(g_dir, "hi.txt"), "hello world, hello world");
    expect_error(test_join(g_dir, "hi.txt"), DATA_TEXT, 8, 100, "hi.txt", "byte offset 0");
}

/* Only regular files are read: a FIFO without a writer must not block the open (the timeout
 * catches a hang), /dev/zero never ends; a glob that matches a FIFO among shards is refused too. */
Test(data, special_files_refused_without_blocking, .timeout = 10) {
    cr_assert_eq(mkfifo(test_join(g_dir, "fifo.txt"), 0600), 0);
    expect_error(test_join(g_dir, "fifo.txt"), DATA_TEXT, 8, 256, "fifo.txt", "FIFO");
    expect_error(test_join(g_dir, "fifo.txt"), DATA_JSONL, 8, 256, "fifo.txt", "FIFO");
    expect_error(test_join(g_dir, "fifo.txt"), DATA_TOKENS, 8, 256, "fifo.txt", "FIFO");
    cr_assert_eq(symlink("/dev/zero", test_join(g_dir, "zero.txt")), 0);
    expect_error(test_join(g_dir, "zero.txt"), DATA_TEXT, 8, 256, "zero.txt", "character device");
    expect_error(test_join(g_dir, "zero.txt"), DATA_TOKENS, 8, 256, "zero.txt", "character device");
    expect_error("/dev/null", DATA_JSONL, 8, 256, "/dev/null", "character device");
    uint16_t tok[64] = {0};
    raw_shard(test_join(g_dir, "v_000.bin"), 20240520, 1, 64, tok, 64, 0);
    cr_assert_eq(mkfifo(test_join(g_dir, "v_001.bin"), 0600), 0);
    char pat[600];
    snprintf(pat, sizeof pat, "%s/v_*.bin", g_dir);
    expect_error(pat, DATA_TOKENS, 8, 256, "v_001.bin", "FIFO");
}

Test(data, memory_open_matches_file_open) {
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(i * 3);
    raw_shard(test_join(g_dir, "m.bin"), 20240520, 1, 64, tok, 64, 0);
    FILE *f = fopen(test_join(g_dir, "m.bin"), "rb");
    static uint8_t buf[1024 + 128];
    cr_assert_eq(fread(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    DataSource *a = open_ok(test_join(g_dir, "m.bin"), DATA_TOKENS, 8, 256, DATA_SPLIT_TRAIN, 0.25);
    DataSource *b = NULL;
    GtError err = {0};
    cr_assert_eq(data_open_memory(&b, "m.bin", buf, sizeof buf, DATA_TOKENS, false, 8, 256, DATA_SPLIT_TRAIN, 0.25, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(data_num_tokens(a), 48);
    cr_assert_eq(data_num_tokens(b), 48);
    int t1[4 * 8], g1[4 * 8], t2[4 * 8], g2[4 * 8];
    data_fill_train(a, 5, true, 3, 4, 0, 4, t1, g1);
    data_fill_train(b, 5, true, 3, 4, 0, 4, t2, g2);
    cr_assert_eq(memcmp(t1, t2, sizeof t1), 0);
    cr_assert_eq(memcmp(g1, g2, sizeof g1), 0);
    data_close(a);
    data_close(b);
    /* a cut header in memory: never read past the end */
    cr_assert_eq(data_open_memory(&b, "cut.bin", buf, 1000, DATA_TOKENS, false, 8, 256, DATA_SPLIT_ALL, 0, &err), -1);
    cr_assert_not_null(strstr(err.msg, "cut.bin"));
}

/* ---------------------------------------------------------------------------------------------
 * jsonl */

Test(data, jsonl_text_form_masks_prompt_and_padding) {
    write_str(test_join(g_dir, "a.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"cde\"}\n");
    DataSource *d = open_ok(test_join(g_dir, "a.jsonl"), DATA_JSONL, 8, 256, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), 1);
    cr_assert_eq(data_num_eval_windows(d), 1);
    int tk[8], tg[8];
    data_fill_eval(d, 0, 1, tk, tg);
    /* row: a b c d e 0 0 0 0; labels: -100 -100 c d e -100 ... */
    const int et[8] = {'a', 'b', 'c', 'd', 'e', 0, 0, 0};
    const int eg[8] = {-100, 'c', 'd', 'e', -100, -100, -100, -100};
    for (int t = 0; t < 8; t++) {
        cr_assert_eq(tk[t], et[t], "token %d: %d", t, tk[t]);
        cr_assert_eq(tg[t], eg[t], "target %d: %d", t, tg[t]);
    }
    /* the same row from the train sampler */
    int tk2[8], tg2[8];
    data_fill_train(d, 3, true, 11, 4, 2, 1, tk2, tg2);
    cr_assert_eq(memcmp(tk, tk2, sizeof tk), 0);
    cr_assert_eq(memcmp(tg, tg2, sizeof tg), 0);
    data_close(d);
}

Test(data, jsonl_ids_form_and_truncation) {
    write_str(test_join(g_dir, "b.jsonl"), "\n{\"prompt_ids\": [10, 11, 12, 13, 14], \"completion_ids\": [20, 21, 22, 23, 24, 25]}\n"
                                "   \n{\"prompt_ids\": [], \"completion_ids\": [7, 8]}\r\n");
    DataSource *d = open_ok(test_join(g_dir, "b.jsonl"), DATA_JSONL, 8, 100, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), 2);
    int tk[16], tg[16];
    data_fill_eval(d, 0, 2, tk, tg);
    /* example 0: 11 tokens truncated to 9: 10..14 20..23 */
    const int et0[8] = {10, 11, 12, 13, 14, 20, 21, 22};
    const int eg0[8] = {-100, -100, -100, -100, 20, 21, 22, 23};
    /* example 1: empty prompt: 7 is never a target, 8 is */
    const int et1[8] = {7, 8, 0, 0, 0, 0, 0, 0};
    const int eg1[8] = {8, -100, -100, -100, -100, -100, -100, -100};
    for (int t = 0; t < 8; t++) {
        cr_assert_eq(tk[t], et0[t]);
        cr_assert_eq(tg[t], eg0[t]);
        cr_assert_eq(tk[8 + t], et1[t]);
        cr_assert_eq(tg[8 + t], eg1[t]);
    }
    /* past the end: padding, no targets */
    data_fill_eval(d, 2, 1, tk, tg);
    for (int t = 0; t < 8; t++) {
        cr_assert_eq(tk[t], 0);
        cr_assert_eq(tg[t], -100);
    }
    data_close(d);
}

static void jsonl_error(const char *content, int vocab, const char *where, const char *what) {
    write_str(test_join(g_dir, "bad.jsonl"), content);
    expect_error(test_join(g_dir, "bad.jsonl"), DATA_JSONL, 8, vocab, where, what);
}

Test(data, jsonl_bad_lines_named) {
    const char *ok = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s{\"prompt\": \"a\", \"completion\": }\n", ok, ok);
    jsonl_error(buf, 256, "bad.jsonl:3:", "bad JSON");
    snprintf(buf, sizeof buf, "%s{\"prompt\": 5, \"completion\": \"b\"}\n", ok);
    jsonl_error(buf, 256, "bad.jsonl:2:", "\"prompt\" is a number, expected a string");
    snprintf(buf, sizeof buf, "%s{\"prompt\": \"a\"}\n", ok);
    jsonl_error(buf, 256, "bad.jsonl:2:", "\"completion\" is missing");
    jsonl_error("[1, 2]\n", 256, "bad.jsonl:1:", "expected an object");
    jsonl_error("{\"prompt\": \"a\", \"completion\": \"b\"} x\n", 256, "bad.jsonl:1:", "unexpected text");
    jsonl_error("{\"txt\": \"a\"}\n", 256, "bad.jsonl:1:", "expected {");
    jsonl_error("{\"prompt\": \"a\", \"completion_ids\": [1]}\n", 256, "bad.jsonl:1:", "mixes");
    jsonl_error("{\"prompt_ids\": [1, 2], \"completion_ids\": [3, 100]}\n", 100, "bad.jsonl:1:",
                "\"completion_ids\"[1] is 100");
    jsonl_error("{\"prompt_ids\": [1, -1], \"completion_ids\": [3]}\n", 100, "bad.jsonl:1:", "\"prompt_ids\"[1]");
    jsonl_error("{\"prompt_ids\": [1.5], \"completion_ids\": [3]}\n", 100, "bad.jsonl:1:", "integer");
    jsonl_error("{\"prompt_ids\": [\"1\"], \"completion_ids\": [3]}\n", 100, "bad.jsonl:1:", "is a string");
    jsonl_error("{\"prompt_ids\": 1, \"completion_ids\": [3]}\n", 100, "bad.jsonl:1:", "expected an array");
    jsonl_error("{\"prompt\": \"a\", \"completion\": \"\\u00ff\"}\n", 128, "bad.jsonl:1:", "vocab_size 128");
    jsonl_error("\n\n  \n", 256, "bad.jsonl", "no examples");
    /* every prompt fills the row: nothing to train on */
    jsonl_error("{\"prompt\": \"0123456789\", \"completion\": \"b\"}\n", 256, "bad.jsonl", "no example has a completion");
}

/* One epoch visits every example exactly once, whatever the effective batch. */
Test(data, jsonl_epoch_is_a_permutation) {
    char buf[4096] = "";
    enum { N = 37 };
    for (int i = 0; i < N; i++) {
        char line[64];
        snprintf(line, sizeof line, "{\"prompt_ids\": [%d], \"completion_ids\": [%d]}\n", i, 100 + i);
        strcat(buf, line);
    }
    write_str(test_join(g_dir, "p.jsonl"), buf);
    DataSource *d = open_ok(test_join(g_dir, "p.jsonl"), DATA_JSONL, 4, 200, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), N);
    int tk[4], tg[4], seen[2][N], order[2][N];
    memset(seen, 0, sizeof seen);
    const long eb = 5;
    for (long i = 0; i < 2 * N; i++) {
        data_fill_train(d, 77, true, i / eb, eb, i % eb, 1, tk, tg);
        cr_assert(tk[0] >= 0 && tk[0] < N);
        cr_assert_eq(tg[0], 100 + tk[0]);
        cr_assert_eq(tg[1], -100);
        seen[i / N][tk[0]]++;
        order[i / N][i % N] = tk[0];
    }
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < N; i++) cr_assert_eq(seen[e][i], 1, "epoch %d: example %d seen %d times", e, i, seen[e][i]);
    cr_assert_neq(memcmp(order[0], order[1], sizeof order[0]), 0, "epochs 0 and 1 in the same order");
    data_close(d);
}

Test(data, jsonl_split_by_examples) {
    char buf[2048] = "";
    for (int i = 0; i < 10; i++) {
        char line[64];
        snprintf(line, sizeof line, "{\"prompt_ids\": [%d], \"completion_ids\": [1]}\n", i + 2);
        strcat(buf, line);
    }
    write_str(test_join(g_dir, "sp.jsonl"), buf);
    DataSource *tr = open_ok(test_join(g_dir, "sp.jsonl"), DATA_JSONL, 4, 50, DATA_SPLIT_TRAIN, 0.2);
    DataSource *va = open_ok(test_join(g_dir, "sp.jsonl"), DATA_JSONL, 4, 50, DATA_SPLIT_VAL, 0.2);
    cr_assert_eq(data_num_tokens(tr), 8);
    cr_assert_eq(data_num_tokens(va), 2);
    int tk[8], tg[8];
    data_fill_eval(va, 0, 2, tk, tg);
    cr_assert_eq(tk[0], 10);
    cr_assert_eq(tk[4], 11);
    data_close(tr);
    data_close(va);
}

/* ---------------------------------------------------------------------------------------------
 * eval windows */

Test(data, eval_windows_fixed_and_consecutive) {
    const int T = 10, n = 95;
    uint8_t *raw = random_bytes(n, 8);
    test_write_file(test_join(g_dir, "e.txt"), raw, n);
    DataSource *d = open_ok(test_join(g_dir, "e.txt"), DATA_TEXT, T, 256, DATA_SPLIT_ALL, 0);
    long nw = data_num_eval_windows(d);
    cr_assert_eq(nw, 9); /* windows 0..8 start at 0..80; 9 would need bytes 90..100 */
    int tk[12 * 10], tg[12 * 10], tk2[12 * 10], tg2[12 * 10];
    data_fill_eval(d, 0, 12, tk, tg);
    for (long w = 0; w < nw; w++) {
        for (int t = 0; t < T; t++) {
            cr_assert_eq(tk[w * T + t], raw[w * T + t]);
            cr_assert_eq(tg[w * T + t], raw[w * T + t + 1]);
        }
        if (w > 0) cr_assert_eq(tk[w * T], tg[(w - 1) * T + T - 1]); /* consecutive */
    }
    for (long w = nw; w < 12; w++)
        for (int t = 0; t < T; t++) {
            cr_assert_eq(tk[w * T + t], 0);
            cr_assert_eq(tg[w * T + t], -100);
        }
    /* the same windows in pieces, and again (fixed) */
    for (int w = 0; w < 12; w += 3) data_fill_eval(d, w, 3, tk2 + w * T, tg2 + w * T);
    cr_assert_eq(memcmp(tk, tk2, sizeof tk), 0);
    cr_assert_eq(memcmp(tg, tg2, sizeof tg), 0);
    data_close(d);
    free(raw);
}

/* ---------------------------------------------------------------------------------------------
 * packed jsonl */

/* Written by hand from the file below (seq_len 4: examples kept to 5 tokens): sizes (input
 * positions) abcde 4, fg 1, hij 2, klmno 4; first-fit decreasing: row 0 abcd, row 1 klmn, row 2
 * hi then f, one padding. Targets under each example's labels (-100 on its prompt), positions
 * from 0 per example; no target crosses into the next example. */
Test(data, packed_rows_by_hand) {
    write_str(test_join(g_dir, "k.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"cde\"}\n"
                                "\n"
                                "{\"prompt\": \"\", \"completion\": \"fg\"}\r\n"
                                "{\"prompt\": \"hij\", \"completion\": \"\"}\n"
                                "{\"prompt\": \"k\", \"completion\": \"lmnopqrstuvw\"}\n");
    const int T = 4;
    DataSource *d = open_ok_packing(test_join(g_dir, "k.jsonl"), DATA_JSONL, true, T, 256, DATA_SPLIT_ALL, 0);
    cr_assert(data_packed(d));
    cr_assert_eq(data_num_tokens(d), 4, "examples");
    cr_assert_eq(data_num_eval_windows(d), 3);
    cr_assert_eq(data_rows_per_epoch(d), 3.0);
    const int X = -100;
    const int want_tk[4 * 4] = {'a', 'b', 'c', 'd', 'k', 'l', 'm', 'n', 'h', 'i', 'f', 0, 0, 0, 0, 0};
    const int want_tg[4 * 4] = {X, 'c', 'd', 'e', 'l', 'm', 'n', 'o', X, X, 'g', X, X, X, X, X};
    const int want_ps[4 * 4] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 0, 0, 0, 1, 2, 3};
    int tk[16], tg[16], ps[16];
    data_fill_eval_pos(d, 0, 4, tk, tg, ps); /* window 3 is beyond the rows: empty */
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(tk[i], want_tk[i], "row %d token %d: %d, want %d", i / 4, i % 4, tk[i], want_tk[i]);
        cr_assert_eq(tg[i], want_tg[i], "row %d target %d: %d, want %d", i / 4, i % 4, tg[i], want_tg[i]);
        cr_assert_eq(ps[i], want_ps[i], "row %d position %d: %d, want %d", i / 4, i % 4, ps[i], want_ps[i]);
    }
    DataStats st;
    data_stats(d, &st);
    cr_assert_eq(st.packed_rows, 3);
    cr_assert_eq(st.packed_tokens, 11);
    data_close(d);
}

/* A generated file: example k has prompt length k % 5 and completion length (3k) % 7, with token
 * ids 1, 2, 3, ... in file order. */
enum { PK_N = 40, PK_MAX = 16 * PK_N, PK_VOCAB = 5000 };

static int packed_file(const char *name) {
    char *buf = malloc(64 * 1024);
    cr_assert_not_null(buf);
    size_t at = 0;
    int n = 0;
    for (int k = 0; k < PK_N; k++) {
        int pl = k % 5, cl = (3 * k) % 7;
        at += (size_t)sprintf(buf + at, "{\"prompt_ids\": [");
        for (int j = 0; j < pl; j++, n++) at += (size_t)sprintf(buf + at, "%s%d", j ? ", " : "", n + 1);
        at += (size_t)sprintf(buf + at, "], \"completion_ids\": [");
        for (int j = 0; j < cl; j++, n++) at += (size_t)sprintf(buf + at, "%s%d", j ? ", " : "", n + 1);
        at += (size_t)sprintf(buf + at, "]}\n");
    }
    cr_assert(n <= PK_MAX && at < 64 * 1024);
    test_write_file(test_join(g_dir, name), buf, at);
    free(buf);
    return n;
}

/* Row g of a step depends on (seed, step, g) only: 8 rows in one call == 2 x 4 == 8 x 1. */
Test(data, packed_rows_split_independent) {
    packed_file("r.jsonl");
    const int T = 6;
    DataSource *d = open_ok_packing(test_join(g_dir, "r.jsonl"), DATA_JSONL, true, T, PK_VOCAB, DATA_SPLIT_ALL, 0);
    for (long step = 0; step < 5; step++) {
        int a[8 * 6], ag[8 * 6], ap[8 * 6], b[8 * 6], bg[8 * 6], bp[8 * 6], c[8 * 6], cg[8 * 6], cp[8 * 6];
        data_fill_train_pos(d, 1234, true, step, 8, 0, 8, a, ag, ap);
        for (int h = 0; h < 2; h++)
            data_fill_train_pos(d, 1234, true, step, 8, 4 * h, 4, b + 4 * h * T, bg + 4 * h * T, bp + 4 * h * T);
        for (int r = 0; r < 8; r++) data_fill_train_pos(d, 1234, true, step, 8, r, 1, c + r * T, cg + r * T, cp + r * T);
        cr_assert_eq(memcmp(a, b, sizeof a), 0, "step %ld: 8 rows != 2 x 4", step);
        cr_assert_eq(memcmp(ag, bg, sizeof ag), 0);
        cr_assert_eq(memcmp(ap, bp, sizeof ap), 0);
        cr_assert_eq(memcmp(a, c, sizeof a), 0, "step %ld: 8 rows != 8 x 1", step);
        cr_assert_eq(memcmp(ag, cg, sizeof ag), 0);
        cr_assert_eq(memcmp(ap, cp, sizeof ap), 0);
        bool differ = false;
        for (int r = 1; r < 8; r++) differ |= a[r * T] != a[0];
        cr_assert(differ, "step %ld: every row starts with the same token", step);
    }
    data_close(d);
}

/* Eval windows are the packed rows in order; asked in chunks they are the same; beyond: empty. */
Test(data, packed_eval_windows_are_the_rows) {
    packed_file("e.jsonl");
    const int T = 7;
    DataSource *d = open_ok_packing(test_join(g_dir, "e.jsonl"), DATA_JSONL, true, T, PK_VOCAB, DATA_SPLIT_ALL, 0);
    const long nw = data_num_eval_windows(d);
    cr_assert_eq((double)nw, data_rows_per_epoch(d));
    const int rows = (int)nw + 2;
    int *tk = malloc(sizeof(int) * (size_t)rows * T), *tg = malloc(sizeof(int) * (size_t)rows * T);
    int *tk2 = malloc(sizeof(int) * (size_t)rows * T), *tg2 = malloc(sizeof(int) * (size_t)rows * T);
    cr_assert(tk && tg && tk2 && tg2);
    data_fill_eval(d, 0, rows, tk, tg);
    for (long p = nw * T; p < (long)rows * T; p++) {
        cr_assert_eq(tk[p], 0);
        cr_assert_eq(tg[p], -100);
    }
    for (int w = 0; w < rows; w += 3) {
        int m = rows - w < 3 ? rows - w : 3;
        data_fill_eval(d, w, m, tk2 + (size_t)w * T, tg2 + (size_t)w * T);
    }
    cr_assert_eq(memcmp(tk, tk2, sizeof(int) * (size_t)rows * T), 0);
    cr_assert_eq(memcmp(tg, tg2, sizeof(int) * (size_t)rows * T), 0);
    free(tk);
    free(tg);
    free(tk2);
    free(tg2);
    data_close(d);
}

/* The split is by examples; each split's examples are packed on their own. */
Test(data, packed_split_by_examples) {
    const int n = packed_file("s.jsonl"), T = 8;
    DataSource *tr = open_ok_packing(test_join(g_dir, "s.jsonl"), DATA_JSONL, true, T, PK_VOCAB, DATA_SPLIT_TRAIN, 0.25);
    DataSource *va = open_ok_packing(test_join(g_dir, "s.jsonl"), DATA_JSONL, true, T, PK_VOCAB, DATA_SPLIT_VAL, 0.25);
    int n_train = 0; /* tokens of the first 30 examples */
    for (int k = 0; k < 30; k++) n_train += k % 5 + (3 * k) % 7;
    cr_assert_eq(data_num_tokens(tr), 30);
    cr_assert_eq(data_num_tokens(va), 10);
    DataSource *sp[2] = {tr, va};
    for (int k = 0; k < 2; k++) {
        const long nw = data_num_eval_windows(sp[k]);
        int *tk = malloc(sizeof(int) * (size_t)nw * T), *tg = malloc(sizeof(int) * (size_t)nw * T);
        cr_assert(tk && tg);
        data_fill_eval(sp[k], 0, (int)nw, tk, tg);
        for (long i = 0; i < nw * T; i++)
            if (tk[i] != 0)
                cr_assert(k == 0 ? tk[i] <= n_train : tk[i] > n_train && tk[i] <= n, "%s: token %d",
                          k ? "val" : "train", tk[i]);
        free(tk);
        free(tg);
    }
    data_close(tr);
    data_close(va);
}

static void expect_packed_error(const char *path, int T, int split, double vf, const char *what) {
    DataSource *d = (DataSource *)0x1;
    GtError err = {0};
    cr_assert_eq(data_open(&d, path, DATA_JSONL, true, T, 256, split, vf, &err), -1, "expected an error for %s", path);
    cr_assert_null(d);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "code %d for: %s", err.code, err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "more than one line: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, path), "message does not name %s: %s", path, err.msg);
    cr_assert_not_null(strstr(err.msg, what), "message lacks \"%s\": %s", what, err.msg);
}

Test(data, packed_short_file_and_no_targets) {
    /* 2 examples, 7 tokens in all: packed into one row of 8 (two examples, one padding) */
    write_str(test_join(g_dir, "short.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"c\"}\n{\"prompt\": \"d\", \"completion\": \"efg\"}\n");
    DataSource *d = open_ok_packing(test_join(g_dir, "short.jsonl"), DATA_JSONL, true, 8, 256, DATA_SPLIT_ALL, 0);
    cr_assert_eq(data_num_tokens(d), 2);
    cr_assert_eq(data_num_eval_windows(d), 1);
    data_close(d);
    /* nothing to train on at all: as unpacked */
    write_str(test_join(g_dir, "none.jsonl"), "{\"prompt\": \"abcdefgh\", \"completion\": \"\"}\n{\"prompt\": \"ijklmnop\", \"completion\": \"\"}\n");
    expect_packed_error(test_join(g_dir, "none.jsonl"), 4, DATA_SPLIT_ALL, 0, "no example has a completion");
}

/* packing is a jsonl option: text and token shards read the same with it */
Test(data, packing_ignored_by_text) {
    uint8_t *raw = random_bytes(300, 9);
    test_write_file(test_join(g_dir, "pt.txt"), raw, 300);
    DataSource *a = open_ok(test_join(g_dir, "pt.txt"), DATA_TEXT, 16, 256, DATA_SPLIT_TRAIN, 0.1);
    DataSource *b = open_ok_packing(test_join(g_dir, "pt.txt"), DATA_TEXT, true, 16, 256, DATA_SPLIT_TRAIN, 0.1);
    cr_assert_eq(data_num_tokens(a), data_num_tokens(b));
    int t1[4 * 16], g1[4 * 16], t2[4 * 16], g2[4 * 16];
    data_fill_train(a, 5, true, 2, 4, 0, 4, t1, g1);
    data_fill_train(b, 5, true, 2, 4, 0, 4, t2, g2);
    cr_assert_eq(memcmp(t1, t2, sizeof t1), 0);
    cr_assert_eq(memcmp(g1, g2, sizeof g1), 0);
    data_close(a);
    data_close(b);
    free(raw);
}
