/* test_parquet.c - the parquet reader (src/io/parquet*.c) against pyarrow: files pyarrow writes
 * (tests/tools/pq_write.py) with every codec, data page v1/v2, dictionary on/off and its fallback to
 * PLAIN, the DELTA encodings, small row groups and pages, nulls, empty strings and lists, unicode,
 * long strings, int32, int64, booleans and a list<struct<role, content>> column, several files by
 * glob; every value the reader gives is compared with what pyarrow reads back from the same file.
 * Then bad input: every truncation of a small file, edited magic/codec/encoding/footer length, codecs
 * and encodings outside the reader's set, columns of other types, a missing column, and a column the
 * caller did not ask for spoiled without effect (columns are read lazily). */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "parquet.h"
#include "test_util.h"

static char g_dir[256];

static void pq_setup(void) { test_scratch_make(g_dir, sizeof g_dir, "gt_pq"); }
static void pq_teardown(void) { test_scratch_remove(g_dir); }
TestSuite(parquet, .init = pq_setup, .fini = pq_teardown, .timeout = 120);

static const char *const COLS[] = {"text", "n32", "n64", "flag", "category", "messages"};
enum { NCOLS = 6 };

/* pq_write.py MODE into g_dir/MODE */
static const char *write_files(const char *mode) {
    test_require_refs();
    const char *root = getenv("GTRAIN_ROOT");
    cr_assert(root, "GTRAIN_ROOT is not set");
    const char *dir = test_join(g_dir, mode);
    free(test_sh_output(true, PY " '%s/tests/tools/pq_write.py' %s '%s'", root, mode, dir));
    static char keep[4][512];
    static int k;
    char *out = keep[k++ % 4];
    snprintf(out, 512, "%s", dir);
    return out;
}

static cJSON *read_json(const char *path) {
    uint8_t *buf;
    size_t len;
    GtError err = {0};
    cr_assert_eq(gt_read_input(path, "json", 1u << 30, &buf, &len, &err), 0, "%s", err.msg);
    cJSON *j = cJSON_ParseWithLength((const char *)buf, len);
    free(buf);
    cr_assert(cJSON_IsArray(j), "%s: not a JSON array", path);
    return j;
}

static void same_str(const char *what, const cJSON *want, const char *s, size_t n, int is_null) {
    if (cJSON_IsNull(want)) {
        cr_assert(is_null, "%s: expected null, found \"%.*s\"", what, (int)(n > 80 ? 80 : n), s ? s : "");
        return;
    }
    cr_assert(cJSON_IsString(want), "%s: the reference is not a string", what);
    cr_assert(!is_null, "%s: expected \"%.40s\", found null", what, want->valuestring);
    size_t wn = strlen(want->valuestring);
    cr_assert(n == wn && (n == 0 || memcmp(s, want->valuestring, n) == 0), "%s: expected \"%.60s\" (%zu bytes), found \"%.*s\" (%zu bytes)",
              what, want->valuestring, wn, (int)(n > 60 ? 60 : n), s ? s : "", n);
}

/* Every row of r against the reference rows (pyarrow's read back), columns COLS[0..n) */
static void compare_rows(ParquetReader *r, const cJSON *rows, const char *name) {
    PqValue v[NCOLS];
    GtError err = {0};
    int n = cJSON_GetArraySize(rows);
    cr_assert_eq(parquet_num_rows(r), (uint64_t)n, "%s: num_rows %llu, pyarrow %d", name,
                 (unsigned long long)parquet_num_rows(r), n);
    cr_assert_eq(parquet_column_kind(r, 0), PQ_STRING);
    cr_assert_eq(parquet_column_kind(r, 1), PQ_INT);
    cr_assert_eq(parquet_column_kind(r, 2), PQ_INT);
    cr_assert_eq(parquet_column_kind(r, 3), PQ_INT);
    cr_assert_eq(parquet_column_kind(r, 4), PQ_STRING);
    cr_assert_eq(parquet_column_kind(r, 5), PQ_MESSAGES);
    int i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        int rc = parquet_next_row(r, v, &err);
        cr_assert_eq(rc, 1, "%s: row %d: next_row %d: %s", name, i, rc, err.msg);
        char what[128];
        for (int c = 0; c < NCOLS; c++) {
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(row, COLS[c]);
            snprintf(what, sizeof what, "%s row %d column %s", name, i, COLS[c]);
            cr_assert(want, "%s: no reference", what);
            if (c == 0 || c == 4) {
                same_str(what, want, v[c].s, v[c].len, v[c].kind == PQ_NULL);
            } else if (c < 5) {
                if (cJSON_IsNull(want)) {
                    cr_assert_eq(v[c].kind, PQ_NULL, "%s: expected null", what);
                } else {
                    cr_assert_eq(v[c].kind, PQ_INT, "%s: expected an integer", what);
                    long long w = strtoll(want->valuestring, NULL, 10);
                    cr_assert_eq(v[c].i, w, "%s: expected %lld, found %lld", what, w, (long long)v[c].i);
                }
            } else if (cJSON_IsNull(want)) {
                cr_assert_eq(v[c].kind, PQ_NULL, "%s: expected null messages, found kind %d", what, v[c].kind);
            } else {
                cr_assert_eq(v[c].kind, PQ_MESSAGES, "%s: expected messages, found kind %d", what, v[c].kind);
                cr_assert_eq(v[c].n_msgs, (size_t)cJSON_GetArraySize(want), "%s: expected %d messages, found %zu", what,
                             cJSON_GetArraySize(want), v[c].n_msgs);
                for (size_t m = 0; m < v[c].n_msgs; m++) {
                    const cJSON *wm = cJSON_GetArrayItem(want, (int)m);
                    char w2[300];
                    if (cJSON_IsNull(wm)) { /* a null struct: role and content null */
                        cr_assert(!v[c].msgs[m].role && !v[c].msgs[m].content, "%s message %zu: expected a null message", what, m);
                        continue;
                    }
                    snprintf(w2, sizeof w2, "%s message %zu role", what, m);
                    const PqMessage *pm = &v[c].msgs[m];
                    same_str(w2, cJSON_GetObjectItemCaseSensitive(wm, "role"), pm->role, pm->role_len, pm->role == NULL);
                    snprintf(w2, sizeof w2, "%s message %zu content", what, m);
                    same_str(w2, cJSON_GetObjectItemCaseSensitive(wm, "content"), pm->content, pm->content_len,
                             pm->content == NULL);
                }
            }
        }
        i++;
    }
    cr_assert_eq(parquet_next_row(r, v, &err), 0, "%s: a row after the last: %s", name, err.msg);
    cr_assert_eq(parquet_next_row(r, v, &err), 0, "%s: a row after the end", name);
}

static int for_each_name(const char *dir, char names[][64], int cap) {
    FILE *f = fopen(test_join(dir, "manifest.txt"), "r");
    cr_assert(f);
    int n = 0;
    while (n < cap && fgets(names[n], 64, f)) {
        names[n][strcspn(names[n], "\n")] = 0;
        n++;
    }
    fclose(f);
    return n;
}

static void check_file(const char *dir, const char *name, int from_memory) {
    char pq_path[4200], js_path[4200];
    snprintf(pq_path, sizeof pq_path, "%s/%s.parquet", dir, name);
    snprintf(js_path, sizeof js_path, "%s/%s.json", dir, name);
    cJSON *rows = read_json(js_path);
    ParquetReader *r = NULL;
    GtError err = {0};
    uint8_t *buf = NULL;
    if (from_memory) {
        size_t len;
        cr_assert_eq(gt_read_input(pq_path, "parquet", 1u << 30, &buf, &len, &err), 0, "%s", err.msg);
        cr_assert_eq(parquet_open_memory(&r, name, buf, len, COLS, NCOLS, &err), 0, "%s: %s", name, err.msg);
    } else {
        cr_assert_eq(parquet_open(&r, pq_path, COLS, NCOLS, &err), 0, "%s: %s", name, err.msg);
    }
    compare_rows(r, rows, name);
    parquet_close(r);
    free(buf);
    cJSON_Delete(rows);
}

/* every file pq_write.py MODE lists in its manifest (at least lo of them, at most hi) against its
 * reference rows, every other one read from memory */
static void check_every_file(const char *mode, int lo, int hi) {
    const char *dir = write_files(mode);
    char names[32][64];
    int n = for_each_name(dir, names, 32);
    cr_assert(n >= lo && n <= hi, "%s: %d files, expected %d to %d", mode, n, lo, hi);
    for (int i = 0; i < n; i++) check_file(dir, names[i], i % 2);
}

Test(parquet, every_codec_page_version_and_encoding) { check_every_file("matrix", 22, 32); }

/* A second writer: DuckDB (every codec, PARQUET_VERSION V1 and V2: its DELTA encodings, data pages v2
 * and RLE dictionaries), against DuckDB's own read back (which equals pyarrow's where pyarrow reads) */
Test(parquet, duckdb_writes) { check_every_file("duckdb", 8, 8); }

Test(parquet, several_files_by_glob) {
    const char *dir = write_files("glob");
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/part-*.parquet", dir);
    cJSON *rows = read_json(test_join(dir, "glob_expected.json"));
    ParquetReader *r = NULL;
    GtError err = {0};
    cr_assert_eq(parquet_open(&r, pattern, COLS, NCOLS, &err), 0, "%s", err.msg);
    compare_rows(r, rows, "glob");
    parquet_close(r);
    /* which file and row each row came from: part-000 holds 50 rows, part-001 none, part-002 73 */
    cr_assert_eq(parquet_open(&r, pattern, COLS, NCOLS, &err), 0, "%s", err.msg);
    PqValue v[NCOLS];
    for (int i = 0; i < 50 + 73 + 31; i++) {
        cr_assert_eq(parquet_next_row(r, v, &err), 1, "%s", err.msg);
        const char *want = i < 50 ? "part-000" : i < 123 ? "part-002" : "part-003";
        uint64_t row = (uint64_t)(i < 50 ? i : i < 123 ? i - 50 : i - 123);
        cr_assert(strstr(parquet_current_file(r), want), "row %d: file %s, expected %s", i, parquet_current_file(r), want);
        cr_assert_eq(parquet_current_row(r), row, "row %d: row in file %llu, expected %llu", i,
                     (unsigned long long)parquet_current_row(r), (unsigned long long)row);
    }
    parquet_close(r);
    cJSON_Delete(rows);
    /* a pattern that matches nothing */
    snprintf(pattern, sizeof pattern, "%s/nothing-*.parquet", dir);
    cr_assert_eq(parquet_open(&r, pattern, COLS, NCOLS, &err), -1);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT);
    cr_assert(strstr(err.msg, "nothing-*.parquet"), "%s", err.msg);
}

/* open (and read every row of) dir/name with the given columns: the error, or "" */
static const char *try_read(const char *path, const char *const *cols, int n, GtError *err) {
    memset(err, 0, sizeof *err);
    ParquetReader *r = NULL;
    if (parquet_open(&r, path, cols, n, err)) return err->msg;
    PqValue v[NCOLS];
    int rc;
    while ((rc = parquet_next_row(r, v, err)) == 1) {}
    parquet_close(r);
    return rc < 0 ? err->msg : "";
}

static void expect_bad(const char *dir, const char *file, const char *const *cols, int n, const char *a, const char *b) {
    GtError err;
    const char *path = test_join(dir, file);
    const char *msg = try_read(path, cols, n, &err);
    cr_assert(*msg, "%s: read without an error", file);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "%s: code %d: %s", file, err.code, msg);
    cr_assert(strstr(msg, file), "%s: the message does not name the file: %s", file, msg);
    cr_assert(strstr(msg, a) && (!b || strstr(msg, b)), "%s: expected \"%s\"%s%s in: %s", file, a, b ? " and " : "",
              b ? b : "", msg);
    cr_assert(!strchr(msg, '\n'), "%s: not one line: %s", file, msg);
}

Test(parquet, bad_files) {
    const char *dir = write_files("bad");
    expect_bad(dir, "bad_magic.parquet", COLS, NCOLS, "PAR1", "byte 0");
    expect_bad(dir, "bad_footer_len.parquet", COLS, NCOLS, "footer length", NULL);
    expect_bad(dir, "bad_codec.parquet", COLS, NCOLS, "codec", "(9)");
    expect_bad(dir, "bad_encoding.parquet", COLS, NCOLS, "encoding", "(63)");
    expect_bad(dir, "brotli.parquet", COLS, NCOLS, "BROTLI", "row group 0");
    expect_bad(dir, "lz4.parquet", COLS, NCOLS, "LZ4", NULL);
    const char *n64[] = {"n64"};
    expect_bad(dir, "bss.parquet", n64, 1, "BYTE_STREAM_SPLIT", "column n64");
    const char *missing[] = {"text", "prompt"};
    expect_bad(dir, "small.parquet", missing, 2, "\"prompt\"", "found none");
    const char *d[] = {"d"}, *tags[] = {"tags"}, *s[] = {"s"}, *chat[] = {"chat"}, *dec[] = {"dec"};
    expect_bad(dir, "types.parquet", d, 1, "\"d\"", "double");
    expect_bad(dir, "types.parquet", tags, 1, "\"tags\"", "list");
    expect_bad(dir, "types.parquet", s, 1, "\"s\"", "struct");
    expect_bad(dir, "types.parquet", chat, 1, "\"chat\"", "content");
    expect_bad(dir, "types.parquet", dec, 1, "\"dec\"", "decimal");
    /* a binary column reads as a string */
    const char *blob[] = {"blob"};
    GtError err;
    cr_assert_str_eq(try_read(test_join(dir, "types.parquet"), blob, 1, &err), "");
    /* unsigned integers as pyarrow reads them; a UINT_64 of 2^63 does not fit */
    const char *u[] = {"u8", "u16", "u32", "u64"};
    ParquetReader *r = NULL;
    cr_assert_eq(parquet_open(&r, test_join(dir, "uints.parquet"), u, 4, &err), 0, "%s", err.msg);
    cJSON *urows = read_json(test_join(dir, "uints.json"));
    const cJSON *row;
    PqValue v[4];
    cJSON_ArrayForEach(row, urows) {
        cr_assert_eq(parquet_next_row(r, v, &err), 1, "%s", err.msg);
        for (int c = 0; c < 4; c++) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(row, u[c]);
            if (cJSON_IsNull(w)) {
                cr_assert_eq(v[c].kind, PQ_NULL, "%s", u[c]);
            } else {
                cr_assert_eq(v[c].kind, PQ_INT, "%s", u[c]);
                cr_assert_eq(v[c].i, strtoll(w->valuestring, NULL, 10), "%s: %lld, pyarrow %s", u[c], (long long)v[c].i,
                             w->valuestring);
            }
        }
    }
    cr_assert_eq(parquet_next_row(r, v, &err), 0, "%s", err.msg);
    parquet_close(r);
    cJSON_Delete(urows);
    expect_bad(dir, "u64_big.parquet", u, 4, "2^63", "column u64, row 0");
    /* not a regular file */
    expect_bad(g_dir, "bad", COLS, NCOLS, "bad", NULL);
}

Test(parquet, every_truncation_fails_cleanly) {
    const char *dir = write_files("bad");
    uint8_t *buf;
    size_t len;
    GtError err = {0};
    cr_assert_eq(gt_read_input(test_join(dir, "small.parquet"), "parquet", 1u << 20, &buf, &len, &err), 0, "%s", err.msg);
    cJSON *rows = read_json(test_join(dir, "small.json"));
    ParquetReader *r = NULL;
    cr_assert_eq(parquet_open_memory(&r, "small.parquet", buf, len, COLS, NCOLS, &err), 0, "%s", err.msg);
    compare_rows(r, rows, "small");
    parquet_close(r);
    cJSON_Delete(rows);
    /* every prefix, and the file with its tail cut but its last 8 bytes kept (footer length and magic) */
    for (size_t n = 0; n < len; n++) {
        for (int keep_tail = 0; keep_tail < 2; keep_tail++) {
            if (keep_tail && n < 8) continue;
            uint8_t *t = malloc(n ? n : 1);
            cr_assert(t);
            memcpy(t, buf, n);
            if (keep_tail) memcpy(t + n - 8, buf + len - 8, 8);
            memset(&err, 0, sizeof err);
            int rc = parquet_open_memory(&r, "cut.parquet", t, n, COLS, NCOLS, &err);
            if (rc == 0) {
                PqValue v[NCOLS];
                while ((rc = parquet_next_row(r, v, &err)) == 1) {}
                parquet_close(r);
            }
            cr_assert_eq(rc, -1, "%zu of %zu bytes (tail %d): read without an error", n, len, keep_tail);
            cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "%zu bytes: code %d: %s", n, err.code, err.msg);
            cr_assert(strncmp(err.msg, "cut.parquet", 11) == 0, "%zu bytes: %s", n, err.msg);
            free(t);
        }
    }
    /* a few truncations through the file path too */
    for (size_t n = 0; n < len; n += len / 7) {
        const char *p = test_join(g_dir, "cut.parquet");
        test_write_file(p, buf, n);
        const char *msg = try_read(p, COLS, NCOLS, &err);
        cr_assert(*msg && err.code == GT_EXIT_BAD_INPUT, "%zu bytes: %s", n, msg);
        cr_assert(strstr(msg, "cut.parquet"), "%s", msg);
    }
    free(buf);
}

/* The columns not asked for are never read: with every chunk of "text" and "messages" zeroed, the
 * other columns read as pyarrow reads them, and asking for "text" fails. */
Test(parquet, columns_read_lazily) {
    const char *dir = write_files("bad");
    uint8_t *buf, *sp;
    size_t len, sn;
    GtError err = {0};
    cr_assert_eq(gt_read_input(test_join(dir, "lazy.parquet"), "parquet", 1u << 24, &buf, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(gt_read_input(test_join(dir, "lazy_spans.json"), "json", 1u << 20, &sp, &sn, &err), 0, "%s", err.msg);
    cJSON *spans = cJSON_Parse((const char *)sp);
    free(sp);
    cr_assert(cJSON_IsObject(spans));
    const char *spoil[] = {"text", "messages"};
    for (int k = 0; k < 2; k++) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(spans, spoil[k]), *span;
        cr_assert(cJSON_GetArraySize(list) >= 3);
        cJSON_ArrayForEach(span, list) {
            size_t start = (size_t)cJSON_GetArrayItem(span, 0)->valuedouble, n = (size_t)cJSON_GetArrayItem(span, 1)->valuedouble;
            cr_assert(start + n <= len);
            memset(buf + start, 0xff, n);
        }
    }
    cJSON_Delete(spans);
    cJSON *rows = read_json(test_join(dir, "lazy.json"));
    const char *cols[] = {"n64", "category", "flag"};
    ParquetReader *r = NULL;
    cr_assert_eq(parquet_open_memory(&r, "lazy.parquet", buf, len, cols, 3, &err), 0, "%s", err.msg);
    PqValue v[3];
    const cJSON *row;
    int i = 0;
    cJSON_ArrayForEach(row, rows) {
        cr_assert_eq(parquet_next_row(r, v, &err), 1, "row %d: %s", i, err.msg);
        const cJSON *n64 = cJSON_GetObjectItemCaseSensitive(row, "n64"), *cat = cJSON_GetObjectItemCaseSensitive(row, "category"),
                    *flag = cJSON_GetObjectItemCaseSensitive(row, "flag");
        cr_assert_eq(v[0].i, strtoll(n64->valuestring, NULL, 10), "row %d", i);
        same_str("category", cat, v[1].s, v[1].len, v[1].kind == PQ_NULL);
        if (cJSON_IsNull(flag)) cr_assert_eq(v[2].kind, PQ_NULL, "row %d", i);
        else cr_assert_eq(v[2].i, strtoll(flag->valuestring, NULL, 10), "row %d", i);
        i++;
    }
    cr_assert_eq(parquet_next_row(r, v, &err), 0, "%s", err.msg);
    parquet_close(r);
    cJSON_Delete(rows);
    for (int k = 0; k < 2; k++) {
        const char *col[] = {spoil[k]};
        cr_assert_eq(parquet_open_memory(&r, "lazy.parquet", buf, len, col, 1, &err), 0, "%s", err.msg);
        int rc = parquet_next_row(r, v, &err);
        cr_assert_eq(rc, -1, "%s: the spoiled column read", spoil[k]);
        cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "%s", err.msg);
        cr_assert(strstr(err.msg, "lazy.parquet: row group 0, column ") && strstr(err.msg, spoil[k]), "%s", err.msg);
        parquet_close(r);
    }
    free(buf);
}
