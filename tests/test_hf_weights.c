/* test_hf_weights.c - the Hugging Face model directory reader (src/io/hf_weights.c): a directory with
 * model.safetensors, an index given directly, the Hugging Face cache's links, and every hostile
 * index: each refused in one line, code 2, naming the file and the tensor or shard. Round trips
 * through the writer are in test_hf_writer.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hf_weights.h"
#include "hf_writer.h"
#include "test_util.h"

static char g_dir[256];

static void write_st(const char *name, const StTensorOut *ts, int n) {
    GtError err = {0};
    cr_assert_eq(safetensors_write(test_join(g_dir, name), ts, n, NULL, 0, &err), 0, "%s", err.msg);
}

/* a.safetensors {x F32 [2,3], y BF16 [4]}, b.safetensors {z F32 [3]}, b2.safetensors {z, x}: 44
 * bytes of tensors in a and b; garbage.safetensors, a directory and a FIFO named like shards */
static void idx_setup(void) {
    test_scratch_make(g_dir, sizeof g_dir, "gt_hfi");
    static const float x[6] = {0, 1, 2, 3, 4, 5}, z[3] = {-1, -2, -3};
    static const uint16_t y[4] = {0x3F80, 0x4000, 0x4040, 0x4080}; /* 1, 2, 3, 4 */
    const StTensorOut a[] = {{.name = "x", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = x},
                             {.name = "y", .dtype = ST_BF16, .ndim = 1, .shape = {4}, .data = y}};
    const StTensorOut b[] = {{.name = "z", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = z}};
    const StTensorOut b2[] = {b[0], a[0]};
    write_st("a.safetensors", a, 2);
    write_st("b.safetensors", b, 1);
    write_st("b2.safetensors", b2, 2);
    test_write_file(test_join(g_dir, "garbage.safetensors"), "this is no safetensors file", 27);
    cr_assert_eq(mkdir(test_join(g_dir, "subdir.safetensors"), 0755), 0);
    cr_assert_eq(mkfifo(test_join(g_dir, "fifo.safetensors"), 0644), 0);
}

static void idx_teardown(void) { test_scratch_remove(g_dir); }

TestSuite(hf_index, .init = idx_setup, .fini = idx_teardown, .timeout = 60);

static void write_index(const char *text) {
    test_write_file(test_join(g_dir, HF_INDEX_FILE), text, strlen(text));
}

#define VALID_MAP "\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b.safetensors\"}"

/* open g_dir: refused with code 2, one line holding every one of want[] */
static void expect_refused(const char *what, const char *const *want) {
    HfWeights *w = (HfWeights *)1;
    GtError err = {0};
    cr_expect_eq(hf_weights_open(&w, g_dir, &err), -1, "%s: accepted", what);
    cr_expect_null(w, "%s", what);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT, "%s: code %d: %s", what, err.code, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "%s: more than one line: %s", what, err.msg);
    for (int k = 0; want[k]; k++) cr_expect(strstr(err.msg, want[k]), "%s: lacks \"%s\": %s", what, want[k], err.msg);
}

Test(hf_index, hostile_indexes_are_refused_in_one_line) {
    const struct {
        const char *what, *text, *want[5];
    } cases[] = {
        {"empty file", "", {HF_INDEX_FILE, "empty file"}},
        {"not JSON", "{", {HF_INDEX_FILE, "valid JSON"}},
        {"not an object", "[1, 2]", {HF_INDEX_FILE, "JSON object", "an array"}},
        {"trailing text", "{" VALID_MAP "} and more", {HF_INDEX_FILE, "end of the JSON"}},
        {"deep", "{\"metadata\": {\"a\": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}, " VALID_MAP "}",
         {HF_INDEX_FILE, "nested at most 16"}},
        {"NUL in a name", "{\"weight_map\": {\"x\\u0000evil\": \"a.safetensors\"}}", {HF_INDEX_FILE, "NUL"}},
        {"no weight_map", "{\"metadata\": {\"total_size\": 44}}", {HF_INDEX_FILE, "weight_map", "no such key"}},
        {"weight_map an array", "{\"weight_map\": [\"a.safetensors\"]}", {HF_INDEX_FILE, "weight_map", "an array"}},
        {"weight_map empty", "{\"weight_map\": {}}", {HF_INDEX_FILE, "at least one tensor"}},
        {"weight_map twice", "{" VALID_MAP ", \"weight_map\": {\"x\": \"a.safetensors\"}}",
         {HF_INDEX_FILE, "weight_map", "twice"}},
        {"shard not a string", "{\"weight_map\": {\"x\": 3}}", {HF_INDEX_FILE, "tensor x", "a number"}},
        {"absolute shard", "{\"weight_map\": {\"x\": \"/etc/passwd\"}}", {"tensor x", "/etc/passwd", "absolute path"}},
        {"shard through ..", "{\"weight_map\": {\"x\": \"../a.safetensors\"}}", {"tensor x", "../a.safetensors", "'/'"}},
        {"shard in a subdirectory", "{\"weight_map\": {\"x\": \"sub/a.safetensors\"}}", {"sub/a.safetensors", "'/'"}},
        {"empty shard name", "{\"weight_map\": {\"x\": \"\"}}", {"tensor x", "an empty name"}},
        {"shard named ..", "{\"weight_map\": {\"x\": \"..\"}}", {"tensor x", "a directory name"}},
        {"control character", "{\"weight_map\": {\"x\": \"a\\n.safetensors\"}}", {"tensor x", "a control character"}},
        {"missing shard", "{\"weight_map\": {\"x\": \"a.safetensors\", \"q\": \"c.safetensors\"}}",
         {HF_INDEX_FILE, "c.safetensors", "tensor q", "found none"}},
        {"a tensor twice, same shard",
         "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"x\": \"a.safetensors\"}}",
         {HF_INDEX_FILE, "tensor x", "twice"}},
        {"a tensor twice, two shards", "{\"weight_map\": {\"x\": \"a.safetensors\", \"x\": \"b.safetensors\"}}",
         {HF_INDEX_FILE, "tensor x", "twice", "b.safetensors"}},
        {"listed, not in its shard",
         "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"a.safetensors\"}}",
         {"a.safetensors: tensor z", "not found in its header", HF_INDEX_FILE}},
        {"in two shards", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\", \"z\": \"b2.safetensors\"}}",
         {"b2.safetensors: tensor x", "only in a.safetensors", HF_INDEX_FILE}},
        {"total_size a string", "{\"metadata\": {\"total_size\": \"44\"}, " VALID_MAP "}", {"total_size", "a string"}},
        {"total_size negative", "{\"metadata\": {\"total_size\": -1}, " VALID_MAP "}", {"total_size", "-1"}},
        {"total_size fractional", "{\"metadata\": {\"total_size\": 44.5}, " VALID_MAP "}", {"total_size", "44.5"}},
        {"total_size huge", "{\"metadata\": {\"total_size\": 1e300}, " VALID_MAP "}", {"total_size", "non-negative integer"}},
        {"total_size above the files", "{\"metadata\": {\"total_size\": 9007199254740992}, " VALID_MAP "}",
         {HF_INDEX_FILE, "total_size", "at most", "9007199254740992"}},
        {"total_size twice", "{\"metadata\": {\"total_size\": 44, \"total_size\": 45}, " VALID_MAP "}",
         {"metadata.total_size", "twice"}},
        {"metadata an array", "{\"metadata\": [], " VALID_MAP "}", {HF_INDEX_FILE, "metadata", "an array"}},
        {"shard not safetensors", "{\"weight_map\": {\"x\": \"garbage.safetensors\"}}", {"garbage.safetensors"}},
        {"shard a directory", "{\"weight_map\": {\"x\": \"subdir.safetensors\"}}", {"subdir.safetensors", "a directory"}},
        {"shard a FIFO", "{\"weight_map\": {\"x\": \"fifo.safetensors\"}}", {"fifo.safetensors", "FIFO"}},
        {"shard is the index", "{\"weight_map\": {\"x\": \"" HF_INDEX_FILE "\"}}", {HF_INDEX_FILE}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_index(cases[c].text);
        expect_refused(cases[c].what, cases[c].want);
    }
}

Test(hf_index, too_many_shards_and_too_big) {
    /* HF_MAX_SHARDS + 1 distinct shard names: refused before any is opened */
    size_t cap = (size_t)(HF_MAX_SHARDS + 1) * 48 + 64, o = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    o += (size_t)snprintf(text, cap, "{\"weight_map\": {");
    for (int i = 0; i <= HF_MAX_SHARDS; i++)
        o += (size_t)snprintf(text + o, cap - o, "%s\"t%d\": \"s%d.safetensors\"", i ? ", " : "", i, i);
    snprintf(text + o, cap - o, "}}");
    write_index(text);
    free(text);
    expect_refused("too many shards", (const char *const[]){HF_INDEX_FILE, "at most 10000 shard files", NULL});
    /* a 64 MiB + 1 index (sparse): refused by its size, nothing read */
    int fd = open(test_join(g_dir, HF_INDEX_FILE), O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)HF_INDEX_MAX_BYTES + 1), 0);
    close(fd);
    expect_refused("too big", (const char *const[]){HF_INDEX_FILE, "at most 64 MiB", NULL});
}

Test(hf_index, valid_index_warnings_and_extras) {
    HfWeights *w = NULL;
    GtError err = {0};
    /* consistent total_size, metadata keys transformers adds: no warning */
    write_index("{\"metadata\": {\"total_size\": 44, \"total_parameters\": 13, \"format\": \"pt\"}, " VALID_MAP "}\n");
    cr_assert_eq(hf_weights_open(&w, g_dir, &err), 0, "%s", err.msg);
    cr_expect(hf_weights_is_sharded(w));
    cr_expect_str_eq(hf_weights_path(w), test_join(g_dir, HF_INDEX_FILE));
    cr_expect_eq(hf_weights_count(w), 3);
    cr_expect_eq(hf_weights_shard_count(w), 2);
    cr_expect_eq(hf_weights_warning_count(w), 0, "%s", hf_weights_warning(w, 0));
    cr_expect_eq(hf_weights_data_bytes(w), 44u);
    const char *order[] = {"x", "y", "z"};
    for (int i = 0; i < 3; i++) {
        HfTensorInfo t;
        cr_assert_eq(hf_weights_info(w, i, &t), 0);
        cr_expect_str_eq(t.name, order[i]);
        cr_expect_eq(hf_weights_find(w, order[i]), i);
        cr_expect(strstr(safetensors_path(t.shard), i < 2 ? "/a.safetensors" : "/b.safetensors"));
    }
    cr_expect_eq(hf_weights_find(w, "nope"), -1);
    cr_expect_eq(hf_weights_info(w, 3, &(HfTensorInfo){0}), -1);
    float v[6];
    cr_assert_eq(hf_weights_read_f32(w, hf_weights_find(w, "y"), v, 4, &err), 0, "%s", err.msg);
    cr_expect(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4);
    cr_assert_eq(hf_weights_read_rows_f32(w, 0, 1, 1, v, 3, &err), 0, "%s", err.msg);
    cr_expect(v[0] == 3 && v[1] == 4 && v[2] == 5);
    cr_assert_eq(hf_weights_read_range_f32(w, 0, 2, 3, v, &err), 0, "%s", err.msg);
    cr_expect(v[0] == 2 && v[1] == 3 && v[2] == 4);
    /* reads the caller gets wrong */
    cr_expect_eq(hf_weights_read_rows_f32(w, 0, 1, 2, v, 6, &err), -1);
    cr_expect(strstr(err.msg, "a.safetensors: tensor x: expected rows within [0, 2)"), "%s", err.msg);
    cr_expect_eq(err.code, GT_EXIT_FAILURE);
    cr_expect_eq(hf_weights_read_rows_f32(w, 0, 0, 2, v, 5, &err), -1);
    cr_expect(strstr(err.msg, "do not fit"), "%s", err.msg);
    cr_expect_eq(hf_weights_read_range_f32(w, 0, 4, 3, v, &err), -1);
    cr_expect_eq(hf_weights_read_f32(w, 0, v, 5, &err), -1);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_expect_eq(hf_weights_read_f32(w, 7, v, 5, &err), -1);
    cr_expect_eq(hf_weights_check_shape(w, 0, 2, (const int64_t[]){3, 2}, &err), -1);
    cr_expect(strstr(err.msg, "a.safetensors: tensor x: expected shape [3, 2], found [2, 3]"), "%s", err.msg);
    cr_expect_eq(err.code, GT_EXIT_BAD_INPUT);
    hf_weights_close(w);

    /* y is in a.safetensors but not listed: ignored, with a warning; total_size 1: a warning */
    write_index("{\"metadata\": {\"total_size\": 1}, \"weight_map\": {\"x\": \"a.safetensors\", \"z\": \"b.safetensors\"}}");
    cr_assert_eq(hf_weights_open(&w, test_join(g_dir, HF_INDEX_FILE), &err), 0, "%s", err.msg);
    cr_expect_eq(hf_weights_count(w), 2);
    cr_expect_eq(hf_weights_find(w, "y"), -1);
    cr_assert_eq(hf_weights_warning_count(w), 2);
    cr_expect(strstr(hf_weights_warning(w, 0), "total_size is 1, the listed tensors hold 36 bytes"), "%s",
              hf_weights_warning(w, 0));
    cr_expect(strstr(hf_weights_warning(w, 1), "1 tensor in the shards is not in weight_map") &&
                  strstr(hf_weights_warning(w, 1), "y in ") && strstr(hf_weights_warning(w, 1), "a.safetensors"),
              "%s", hf_weights_warning(w, 1));
    cr_expect_null(hf_weights_warning(w, 2));
    hf_weights_close(w);
}

Test(hf_index, directories_and_single_files) {
    HfWeights *w = NULL;
    GtError err = {0};
    /* neither file */
    expect_refused("empty directory", (const char *const[]){g_dir, HF_SINGLE_FILE, HF_INDEX_FILE, "neither", NULL});
    /* a missing path */
    cr_expect_eq(hf_weights_open(&w, test_join(g_dir, "nothing-here"), &err), -1);
    cr_expect(strstr(err.msg, "nothing-here") && err.code == GT_EXIT_BAD_INPUT, "%s", err.msg);
    /* a single file given directly */
    cr_assert_eq(hf_weights_open(&w, test_join(g_dir, "a.safetensors"), &err), 0, "%s", err.msg);
    cr_expect(!hf_weights_is_sharded(w));
    cr_expect_eq(hf_weights_count(w), 2);
    cr_expect_eq(hf_weights_data_bytes(w), 32u);
    hf_weights_close(w);
    /* model.safetensors only */
    write_index(VALID_MAP); /* broken, but model.safetensors wins, as in transformers */
    cr_assert_eq(link(test_join(g_dir, "b.safetensors"), test_join(g_dir, HF_SINGLE_FILE)), 0);
    cr_assert_eq(hf_weights_open(&w, g_dir, &err), 0, "%s", err.msg);
    cr_expect_str_eq(hf_weights_path(w), test_join(g_dir, HF_SINGLE_FILE));
    cr_expect_eq(hf_weights_count(w), 1);
    cr_expect_eq(hf_weights_find(w, "z"), 0);
    hf_weights_close(w);
    /* a dangling link at model.safetensors: named, not skipped */
    unlink(test_join(g_dir, HF_SINGLE_FILE));
    cr_assert_eq(symlink("gone.safetensors", test_join(g_dir, HF_SINGLE_FILE)), 0);
    cr_expect_eq(hf_weights_open(&w, g_dir, &err), -1);
    cr_expect(strstr(err.msg, HF_SINGLE_FILE) && strstr(err.msg, "No such file"), "%s", err.msg);
}

/* the Hugging Face cache: snapshots/REV/ holds links into ../../blobs/ */
Test(hf_index, hugging_face_cache_links) {
    char p[512], q[512];
    snprintf(p, sizeof p, "%s/blobs", g_dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/snapshots", g_dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/snapshots/0123abc", g_dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    const char *files[][2] = {{"a.safetensors", "aaaa1111"}, {"b.safetensors", "bbbb2222"}};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i][0]);
        snprintf(q, sizeof q, "%s/blobs/%s", g_dir, files[i][1]);
        cr_assert_eq(rename(p, q), 0);
        snprintf(p, sizeof p, "../../blobs/%s", files[i][1]);
        snprintf(q, sizeof q, "%s/snapshots/0123abc/%s", g_dir, files[i][0]);
        cr_assert_eq(symlink(p, q), 0);
    }
    const char *idx = "{\"metadata\": {\"total_size\": 44}, " VALID_MAP "}";
    snprintf(p, sizeof p, "%s/blobs/cccc3333", g_dir);
    test_write_file(p, idx, strlen(idx));
    snprintf(q, sizeof q, "%s/snapshots/0123abc/" HF_INDEX_FILE, g_dir);
    cr_assert_eq(symlink("../../blobs/cccc3333", q), 0);
    snprintf(p, sizeof p, "%s/snapshots/0123abc", g_dir);
    HfWeights *w = NULL;
    GtError err = {0};
    cr_assert_eq(hf_weights_open(&w, p, &err), 0, "%s", err.msg);
    cr_expect_eq(hf_weights_count(w), 3);
    float z[3];
    cr_assert_eq(hf_weights_read_f32(w, hf_weights_find(w, "z"), z, 3, &err), 0, "%s", err.msg);
    cr_expect(z[0] == -1 && z[2] == -3);
    hf_weights_close(w);
}

/* 100k tensors over two shards: written by hf_save, opened, every one found and read */
static int fill_index_value(void *ctx, int t, uint64_t off, size_t n, float *dst, GtError *err) {
    for (size_t j = 0; j < n; j++) dst[j] = (float)t;
    return 0;
}

Test(hf_index, a_hundred_thousand_tensors, .timeout = 120) {
    enum { N = 100000 };
    StTensorOut *ts = calloc(N, sizeof *ts);
    char(*names)[24] = calloc(N, sizeof *names);
    cr_assert(ts && names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.w", i);
        ts[i] = (StTensorOut){.name = names[i], .dtype = ST_F32, .ndim = 1, .shape = {1}};
    }
    HfSaveOptions o = {.max_shard_bytes = 4 * N / 2};
    GtError err = {0};
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    cr_assert_eq(hf_save(g_dir, ts, N, &o, fill_index_value, NULL, &err), 0, "%s", err.msg);
    double t1 = (double)clock() / CLOCKS_PER_SEC;
    HfWeights *w = NULL;
    cr_assert_eq(hf_weights_open(&w, g_dir, &err), 0, "%s", err.msg);
    double t2 = (double)clock() / CLOCKS_PER_SEC;
    cr_expect_eq(hf_weights_count(w), N);
    cr_expect_eq(hf_weights_shard_count(w), 2);
    for (int i = 0; i < N; i += 7) {
        int k = hf_weights_find(w, names[i]); /* the index's order: sorted names */
        HfTensorInfo info;
        cr_assert_eq(hf_weights_info(w, k, &info), 0, "%s at %d", names[i], k);
        cr_assert_str_eq(info.name, names[i]);
        float v;
        cr_assert_eq(hf_weights_read_f32(w, k, &v, 1, &err), 0, "%s", err.msg);
        cr_assert_eq(v, (float)i);
    }
    cr_log_info("100k tensors: save %.2f s, open %.2f s (CPU)", t1 - t0, t2 - t1);
    cr_expect_lt(t2 - t1, 10.0, "open took %.2f s", t2 - t1);
    hf_weights_close(w);
    free(ts);
    free(names);
}
