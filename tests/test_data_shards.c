/* test_data_shards.c - llm.c's Llama-3 shard layout (magic 20240801, version 7, uint32 tokens)
 * beside GPT-2's uint16 one: the reader on shards written independently here (raw bytes, little
 * endian), the writer's bytes read back by hand, its layout choice, its refusals and its temporary
 * file. (test_data.c holds the uint16 layout's tests; this file keeps it under 800 lines.) */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "test_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"

static char g_dir[256];

static void scratch_init(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_test_shards"); }
static void scratch_fini(void) { test_scratch_remove(g_dir); }

TestSuite(data_shards, .init = scratch_init, .fini = scratch_fini);

static void le32_put(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}
static uint32_t le32_get(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A shard as llm.c's write_datafile lays it out, byte by byte: header[256] int32 (magic, version,
 * count), then n_tok tokens of `width` bytes, then `extra` junk bytes. */
static void raw_shard(const char *path, int32_t magic, int32_t version, int32_t count, int width, const uint32_t *tok,
                      size_t n_tok, size_t extra) {
    size_t len = 1024 + (size_t)width * n_tok + extra;
    uint8_t *b = calloc(1, len);
    cr_assert_not_null(b);
    le32_put(b, (uint32_t)magic);
    le32_put(b + 4, (uint32_t)version);
    le32_put(b + 8, (uint32_t)count);
    for (size_t i = 0; i < n_tok; i++)
        for (int k = 0; k < width; k++) b[1024 + (size_t)width * i + (size_t)k] = (uint8_t)(tok[i] >> (8 * k));
    memset(b + 1024 + (size_t)width * n_tok, 0x5a, extra);
    test_write_file(test_join(g_dir, path), b, len);
    free(b);
}

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The files in g_dir (no temporary file may be left) */
static int count_files(void) {
    int n = 0;
    DIR *d = opendir(g_dir);
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* data_open over all tokens (one eval window of n-1 targets); every token compared */
static void expect_tokens(const char *pattern, const uint32_t *want, int n, int vocab) {
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open(&d, pattern, DATA_TOKENS, false, n - 1, vocab, DATA_SPLIT_ALL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(data_num_tokens(d), (uint64_t)n);
    int *tk = malloc(sizeof(int) * (size_t)n), *tg = malloc(sizeof(int) * (size_t)n);
    cr_assert(tk && tg);
    data_fill_eval(d, 0, 1, tk, tg);
    for (int t = 0; t < n - 1; t++) {
        cr_assert_eq((uint32_t)tk[t], want[t], "token %d: %d, expected %u", t, tk[t], want[t]);
        cr_assert_eq((uint32_t)tg[t], want[t + 1]);
    }
    free(tk);
    free(tg);
    data_close(d);
}

static void expect_refused(const char *name, int vocab, const char *what) {
    DataSource *d = (DataSource *)0x1;
    GtError err = {0};
    const char *path = test_join(g_dir, name);
    cr_assert_eq(data_open(&d, path, DATA_TOKENS, false, 4, vocab, DATA_SPLIT_ALL, 0, &err), -1, "%s accepted", name);
    cr_assert_null(d);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "code %d: %s", err.code, err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "more than one line: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, name), "does not name %s: %s", name, err.msg);
    cr_assert_not_null(strstr(err.msg, what), "lacks \"%s\": %s", what, err.msg);
}

enum { N = 1001, LLAMA3_VOCAB = 128256 };

static void llama3_tokens(uint32_t *tok) {
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(((uint64_t)i * 2654435761u) % LLAMA3_VOCAB);
    tok[7] = LLAMA3_VOCAB - 1;
    tok[8] = 65536; /* the first id uint16 cannot hold */
}

Test(data_shards, u32_reader_on_independent_bytes) {
    static uint32_t tok[N];
    llama3_tokens(tok);
    raw_shard("l3.bin", 20240801, 7, N, 4, tok, N, 0);
    expect_tokens(test_join(g_dir, "l3.bin"), tok, N, LLAMA3_VOCAB);
    /* in memory too: the same tokens */
    size_t len;
    uint8_t *b = read_all(test_join(g_dir, "l3.bin"), &len);
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open_memory(&d, "l3.bin", b, len, DATA_TOKENS, false, 8, LLAMA3_VOCAB, DATA_SPLIT_VAL, 0.5, &err),
                 0, "%s", err.msg);
    cr_assert_eq(data_num_tokens(d), N - N / 2);
    int tk[8], tg[8];
    data_fill_eval(d, 1, 1, tk, tg);
    for (int t = 0; t < 8; t++) cr_assert_eq((uint32_t)tk[t], tok[N / 2 + 8 + t]);
    data_close(d);
    free(b);
}

Test(data_shards, u32_writer_bytes_read_by_hand) {
    static uint32_t tok[N];
    llama3_tokens(tok);
    const char *path = test_join(g_dir, "w.bin");
    GtError err = {0};
    cr_assert_eq(data_write_token_shard(path, tok, N, DATA_SHARD_AUTO, &err), 0, "%s", err.msg);
    size_t len;
    uint8_t *b = read_all(path, &len);
    cr_assert_eq(len, 1024 + 4 * (size_t)N);
    cr_assert_eq(le32_get(b), 20240801u);
    cr_assert_eq(le32_get(b + 4), 7u);
    cr_assert_eq(le32_get(b + 8), (uint32_t)N);
    for (int k = 12; k < 1024; k++) cr_assert_eq(b[k], 0, "header byte %d is %u, expected 0", k, b[k]);
    for (int i = 0; i < N; i++) cr_assert_eq(le32_get(b + 1024 + 4 * i), tok[i], "token %d", i);
    free(b);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644, "mode %o", (unsigned)(st.st_mode & 0777));
    cr_assert_eq(count_files(), 1, "a temporary file was left behind");
    expect_tokens(path, tok, N, LLAMA3_VOCAB); /* and the reader agrees */
}

Test(data_shards, writer_layout_choice) {
    uint32_t small[5] = {0, 1, 255, 50256, 65535};
    GtError err = {0};
    const char *a = test_join(g_dir, "auto.bin"), *u = test_join(g_dir, "u32.bin");
    cr_assert_eq(data_write_token_shard(a, small, 5, DATA_SHARD_AUTO, &err), 0, "%s", err.msg);
    size_t len;
    uint8_t *b = read_all(a, &len);
    cr_assert_eq(len, 1024 + 2 * 5);
    cr_assert_eq(le32_get(b), 20240520u);
    cr_assert_eq(le32_get(b + 4), 1u);
    for (int i = 0; i < 5; i++) cr_assert_eq((uint32_t)(b[1024 + 2 * i] | b[1025 + 2 * i] << 8), small[i]);
    free(b);
    /* an explicit choice: uint32 even though every id fits 16 bits */
    cr_assert_eq(data_write_token_shard(u, small, 5, DATA_SHARD_U32, &err), 0, "%s", err.msg);
    b = read_all(u, &len);
    cr_assert_eq(len, 1024 + 4 * 5);
    cr_assert_eq(le32_get(b), 20240801u);
    for (int i = 0; i < 5; i++) cr_assert_eq(le32_get(b + 1024 + 4 * i), small[i]);
    free(b);
    expect_tokens(u, small, 5, 65536);
    /* uint16 asked for, an id that does not fit: refused, nothing written */
    uint32_t big[3] = {1, 65536, 2};
    const char *r = test_join(g_dir, "r.bin");
    cr_assert_eq(data_write_token_shard(r, big, 3, DATA_SHARD_U16, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert_not_null(strstr(err.msg, "65536"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "position 1"), "%s", err.msg);
    cr_assert_eq(count_files(), 2, "a refused shard left a file behind");
}

Test(data_shards, streaming_writer_appends_and_aborts) {
    const char *path = test_join(g_dir, "s.bin");
    GtError err = {0};
    DataShardWriter *w = NULL;
    /* a shard already there keeps its content when the new one is abandoned */
    uint32_t old[4] = {9, 8, 7, 6};
    cr_assert_eq(data_write_token_shard(path, old, 4, DATA_SHARD_U16, &err), 0, "%s", err.msg);
    cr_assert_eq(data_shard_writer_open(&w, path, DATA_SHARD_U32, &err), 0, "%s", err.msg);
    uint32_t part[3] = {100000, 1, 2};
    cr_assert_eq(data_shard_writer_append(w, part, 3, &err), 0, "%s", err.msg);
    cr_assert_eq(count_files(), 2); /* the shard and the temporary file */
    data_shard_writer_abort(w);
    cr_assert_eq(count_files(), 1);
    expect_tokens(path, old, 4, 256);
    /* appends in pieces (more than the writer's buffer) equal one write */
    static uint32_t tok[40000];
    for (int i = 0; i < 40000; i++) tok[i] = (uint32_t)(i * 37) % 200000;
    cr_assert_eq(data_shard_writer_open(&w, path, DATA_SHARD_U32, &err), 0, "%s", err.msg);
    for (int at = 0; at < 40000; at += 7919) {
        size_t m = 40000 - at < 7919 ? (size_t)(40000 - at) : 7919;
        cr_assert_eq(data_shard_writer_append(w, tok + at, m, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(data_shard_writer_count(w), 40000);
    cr_assert_eq(data_shard_writer_commit(w, &err), 0, "%s", err.msg);
    expect_tokens(path, tok, 40000, 200000);
    cr_assert_eq(count_files(), 1);
    /* a rename that cannot happen (the path is a directory): the error, and no temporary file */
    const char *dir = test_join(g_dir, "adir");
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(data_write_token_shard(dir, tok, 10, DATA_SHARD_AUTO, &err), -1);
    cr_assert_not_null(strstr(err.msg, "adir"), "%s", err.msg);
    cr_assert_eq(count_files(), 2, "the temporary file of a failed shard was left behind");
}

Test(data_shards, u32_hostile_shards_refused) {
    static uint32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)(70000 + i);
    raw_shard("trunc.bin", 20240801, 7, 100, 4, tok, 99, 0);
    expect_refused("trunc.bin", LLAMA3_VOCAB, "truncated");
    raw_shard("trunc3.bin", 20240801, 7, 100, 4, tok, 99, 3); /* 3 bytes short of the last token */
    expect_refused("trunc3.bin", LLAMA3_VOCAB, "truncated");
    raw_shard("over.bin", 20240801, 7, 100, 4, tok, 100, 1);
    expect_refused("over.bin", LLAMA3_VOCAB, "oversized");
    /* a uint16-sized body under a uint32 header: 2 bytes a token are too few */
    raw_shard("half.bin", 20240801, 7, 100, 2, tok, 100, 0);
    expect_refused("half.bin", LLAMA3_VOCAB, "uint32");
    /* each magic with the other's version */
    raw_shard("v1.bin", 20240801, 1, 100, 4, tok, 100, 0);
    expect_refused("v1.bin", LLAMA3_VOCAB, "version 1, expected 7");
    raw_shard("v7.bin", 20240520, 7, 100, 2, tok, 100, 0);
    expect_refused("v7.bin", LLAMA3_VOCAB, "version 7, expected 1");
    raw_shard("magic.bin", 20240802, 7, 100, 4, tok, 100, 0);
    expect_refused("magic.bin", LLAMA3_VOCAB, "20240801");
    raw_shard("neg.bin", 20240801, 7, -1, 4, tok, 100, 0);
    expect_refused("neg.bin", LLAMA3_VOCAB, "negative");
    raw_shard("zero.bin", 20240801, 7, 0, 4, tok, 0, 0);
    expect_refused("zero.bin", LLAMA3_VOCAB, "no tokens");
    /* ids >= vocab_size: the position and byte offset named, also above 65535 */
    raw_shard("ok.bin", 20240801, 7, 100, 4, tok, 100, 0);
    expect_refused("ok.bin", 70050, "token 70050 at position 50 (byte offset 1224)");
    tok[99] = 0xFFFFFFFFu;
    raw_shard("max.bin", 20240801, 7, 100, 4, tok, 100, 0);
    expect_refused("max.bin", LLAMA3_VOCAB, "token 4294967295 at position 99");
}

Test(data_shards, glob_of_one_layout_concatenates_mixed_is_refused) {
    uint32_t a[300], b[200];
    for (int i = 0; i < 300; i++) a[i] = (uint32_t)(100000 + i);
    for (int i = 0; i < 200; i++) b[i] = (uint32_t)i;
    raw_shard("l3_001.bin", 20240801, 7, 200, 4, b, 200, 0);
    raw_shard("l3_000.bin", 20240801, 7, 300, 4, a, 300, 0);
    uint32_t both[500];
    memcpy(both, a, sizeof a);
    memcpy(both + 300, b, sizeof b);
    char pattern[512];
    snprintf(pattern, sizeof pattern, "%s/l3_*.bin", g_dir);
    expect_tokens(pattern, both, 500, LLAMA3_VOCAB);
    /* a GPT-2 shard among them: one line naming it and the layouts */
    raw_shard("l3_002.bin", 20240520, 1, 200, 2, b, 200, 0);
    DataSource *d = NULL;
    GtError err = {0};
    cr_assert_eq(data_open(&d, pattern, DATA_TOKENS, false, 8, LLAMA3_VOCAB, DATA_SPLIT_ALL, 0, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert_null(strchr(err.msg, '\n'));
    cr_assert_not_null(strstr(err.msg, "l3_002.bin: a GPT-2 uint16 shard among Llama-3 uint32 shards"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "l3_000.bin"), "%s", err.msg);
}
