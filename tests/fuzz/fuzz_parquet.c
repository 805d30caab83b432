/* fuzz_parquet.c - libFuzzer target: the parquet reader (parquet_open_memory) over the input, then
 * every row. The first input byte picks which of the seeds' columns to ask for (all of them, the
 * strings, the integers, the messages alone); the rest is the file. Seeds: small files pyarrow wrote
 * with every codec and page version (tests/tools/pq_write.py seeds). A refusal must be one line with
 * a code; an accepted value must have its column's kind or be null, and its bytes must be readable. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "parquet.h"

static volatile unsigned g_sink;

static void touch(const char *s, size_t n) {
    if (!s && n) abort();
    for (size_t i = 0; i < n; i++) g_sink += (unsigned char)s[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *const all[] = {"text", "n32", "n64", "flag", "category", "messages"};
    static const char *const strs[] = {"text", "category"}, *const ints[] = {"n32", "n64", "flag"},
                             *const msgs[] = {"messages"};
    const char *const *cols[4] = {all, strs, ints, msgs};
    const int ns[4] = {6, 2, 3, 1};
    int pick = data[0] & 3;
    ParquetReader *r = NULL;
    GtError err = {0};
    if (parquet_open_memory(&r, "fuzz.parquet", data + 1, size - 1, cols[pick], ns[pick], &err) != 0) {
        if (r || (err.code != GT_EXIT_BAD_INPUT && err.code != GT_EXIT_FAILURE) || !err.msg[0] || strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    PqKind kinds[6];
    for (int c = 0; c < ns[pick]; c++) {
        kinds[c] = parquet_column_kind(r, c);
        if (kinds[c] != PQ_STRING && kinds[c] != PQ_INT && kinds[c] != PQ_MESSAGES) abort();
    }
    PqValue v[6];
    int rc;
    uint64_t rows = 0;
    while ((rc = parquet_next_row(r, v, &err)) == 1) {
        rows++;
        for (int c = 0; c < ns[pick]; c++) {
            if (v[c].kind == PQ_NULL) continue;
            if (v[c].kind != kinds[c]) abort();
            if (v[c].kind == PQ_STRING) touch(v[c].s, v[c].len);
            if (v[c].kind == PQ_MESSAGES)
                for (size_t m = 0; m < v[c].n_msgs; m++) {
                    touch(v[c].msgs[m].role, v[c].msgs[m].role_len);
                    touch(v[c].msgs[m].content, v[c].msgs[m].content_len);
                }
        }
        (void)parquet_current_file(r);
        (void)parquet_current_row(r);
    }
    if (rc == 0 && rows != parquet_num_rows(r)) abort();
    if (rc < 0 && ((err.code != GT_EXIT_BAD_INPUT && err.code != GT_EXIT_FAILURE) || !err.msg[0] || strchr(err.msg, '\n')))
        abort();
    parquet_close(r);
    return 0;
}
