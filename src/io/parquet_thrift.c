/* parquet_thrift.c - the thrift compact protocol as parquet's footer (FileMetaData) and page headers
 * use it: varints, zigzag integers, field headers, lists, and the skipping of every field the reader
 * does not use. Every length and count is checked against the bytes left before it is used; nesting
 * is limited; the first error sticks (one line: file, byte offset, expected, found). */
#include "parquet_internal.h"

#include <stdlib.h>

enum { TC_STOP = 0, TC_TRUE = 1, TC_FALSE = 2, TC_BYTE = 3, TC_I16 = 4, TC_I32 = 5, TC_I64 = 6, TC_DOUBLE = 7,
       TC_BINARY = 8, TC_LIST = 9, TC_SET = 10, TC_MAP = 11, TC_STRUCT = 12 };
#define TC_MAX_DEPTH 32

typedef struct {
    const uint8_t *base, *p, *end;
    uint64_t file_off; /* the file offset of base */
    const char *file, *what;
    GtError *err;
    int bad;
} Tc;

static void tc_fail(Tc *t, const char *expected, const char *found) {
    if (t->bad) return;
    t->bad = 1;
    gt_error(t->err, GT_EXIT_BAD_INPUT, "%s: %s, byte %llu: expected %s, found %s", t->file, t->what,
             (unsigned long long)(t->file_off + (uint64_t)(t->p - t->base)), expected, found);
}

static size_t tc_left(const Tc *t) { return (size_t)(t->end - t->p); }

static uint64_t tc_varint(Tc *t) {
    uint64_t v = 0;
    for (int shift = 0; !t->bad; shift += 7) {
        if (t->p >= t->end) {
            tc_fail(t, "a varint", "the end of the data");
            break;
        }
        if (shift > 63) {
            tc_fail(t, "a varint of at most 10 bytes", "a longer one");
            break;
        }
        uint8_t b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    return 0;
}

static int64_t tc_zigzag(Tc *t) {
    uint64_t u = tc_varint(t);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

/* An integer field of any integer wire type, in [lo, hi] */
static int64_t tc_int(Tc *t, int type, int64_t lo, int64_t hi, const char *name) {
    int64_t v = 0;
    if (type == TC_BYTE) {
        if (t->p >= t->end) {
            tc_fail(t, "a byte", "the end of the data");
            return 0;
        }
        v = (int8_t)*t->p++;
    } else if (type == TC_I16 || type == TC_I32 || type == TC_I64) {
        v = tc_zigzag(t);
    } else {
        char found[48];
        snprintf(found, sizeof found, "thrift type %d", type);
        char exp[96];
        snprintf(exp, sizeof exp, "an integer for %s", name);
        tc_fail(t, exp, found);
        return 0;
    }
    if (!t->bad && (v < lo || v > hi)) {
        char exp[128], found[48];
        snprintf(exp, sizeof exp, "%s in [%lld, %lld]", name, (long long)lo, (long long)hi);
        snprintf(found, sizeof found, "%lld", (long long)v);
        tc_fail(t, exp, found);
        return 0;
    }
    return v;
}

static void tc_binary(Tc *t, const uint8_t **s, size_t *n) {
    uint64_t len = tc_varint(t);
    *s = NULL;
    *n = 0;
    if (t->bad) return;
    if (len > tc_left(t)) {
        char found[96];
        snprintf(found, sizeof found, "a length of %llu with %zu bytes left", (unsigned long long)len, tc_left(t));
        tc_fail(t, "a string within the data", found);
        return;
    }
    *s = t->p;
    *n = (size_t)len;
    t->p += len;
}

/* The next field of a struct: 1 with *id and *type, 0 at its STOP or on error */
static int tc_field(Tc *t, int *last, int *id, int *type) {
    if (t->bad) return 0;
    if (t->p >= t->end) {
        tc_fail(t, "a field header", "the end of the data");
        return 0;
    }
    uint8_t b = *t->p++;
    if (b == TC_STOP) return 0;
    *type = b & 0x0f;
    int delta = b >> 4;
    if (delta) {
        *id = *last + delta;
    } else {
        int64_t v = tc_zigzag(t);
        if (!t->bad && (v < INT16_MIN || v > INT16_MAX)) tc_fail(t, "a field id in i16 range", "a larger one");
        *id = (int)v;
    }
    *last = *id;
    return !t->bad;
}

/* A list or set header: its element count (checked against the bytes left: every element takes one
 * byte at least) and element type */
static size_t tc_list(Tc *t, int type, int *elem) {
    if (type != TC_LIST && type != TC_SET) {
        char found[32];
        snprintf(found, sizeof found, "thrift type %d", type);
        tc_fail(t, "a list", found);
        return 0;
    }
    if (t->p >= t->end) {
        tc_fail(t, "a list header", "the end of the data");
        return 0;
    }
    uint8_t b = *t->p++;
    uint64_t n = b >> 4;
    *elem = b & 0x0f;
    if (n == 15) n = tc_varint(t);
    if (t->bad) return 0;
    if (n > tc_left(t)) {
        char found[96];
        snprintf(found, sizeof found, "%llu elements with %zu bytes left", (unsigned long long)n, tc_left(t));
        tc_fail(t, "a list within the data", found);
        return 0;
    }
    return (size_t)n;
}

static void tc_skip(Tc *t, int type, int depth, int in_list) {
    if (t->bad) return;
    if (depth > TC_MAX_DEPTH) {
        tc_fail(t, "structures nested at most 32 deep", "deeper ones");
        return;
    }
    switch (type) {
    case TC_TRUE: case TC_FALSE:
        if (in_list) { /* a bool element is one byte */
            if (t->p >= t->end) tc_fail(t, "a bool", "the end of the data");
            else t->p++;
        }
        return;
    case TC_BYTE:
        if (t->p >= t->end) tc_fail(t, "a byte", "the end of the data");
        else t->p++;
        return;
    case TC_I16: case TC_I32: case TC_I64:
        (void)tc_varint(t);
        return;
    case TC_DOUBLE:
        if (tc_left(t) < 8) tc_fail(t, "a double (8 bytes)", "the end of the data");
        else t->p += 8;
        return;
    case TC_BINARY: {
        const uint8_t *s;
        size_t n;
        tc_binary(t, &s, &n);
        return;
    }
    case TC_LIST: case TC_SET: {
        int elem = 0;
        size_t n = tc_list(t, type, &elem);
        for (size_t i = 0; i < n && !t->bad; i++) tc_skip(t, elem, depth + 1, 1);
        return;
    }
    case TC_MAP: {
        uint64_t n = tc_varint(t);
        if (t->bad || n == 0) return;
        if (t->p >= t->end || n > tc_left(t)) {
            tc_fail(t, "a map within the data", "a larger count");
            return;
        }
        uint8_t kv = *t->p++;
        for (uint64_t i = 0; i < n && !t->bad; i++) {
            tc_skip(t, kv >> 4, depth + 1, 1);
            tc_skip(t, kv & 0x0f, depth + 1, 1);
        }
        return;
    }
    case TC_STRUCT: {
        int last = 0, id, ft;
        while (tc_field(t, &last, &id, &ft)) tc_skip(t, ft, depth + 1, 0);
        return;
    }
    default: {
        char found[32];
        snprintf(found, sizeof found, "thrift type %d", type);
        tc_fail(t, "a thrift compact type", found);
    }
    }
}

static int tc_bool(Tc *t, int type, const char *name) {
    if (type == TC_TRUE) return 1;
    if (type == TC_FALSE) return 0;
    char exp[64], found[32];
    snprintf(exp, sizeof exp, "a bool for %s", name);
    snprintf(found, sizeof found, "thrift type %d", type);
    tc_fail(t, exp, found);
    return 0;
}

static void tc_expect_struct(Tc *t, int type, const char *name) {
    if (type == TC_STRUCT || t->bad) return;
    char exp[64], found[32];
    snprintf(exp, sizeof exp, "a struct for %s", name);
    snprintf(found, sizeof found, "thrift type %d", type);
    tc_fail(t, exp, found);
}

/* ---- FileMetaData ---- */

static int logical_type_id(Tc *t) { /* a union: the id of its one member */
    int last = 0, id, ft, which = -1;
    while (tc_field(t, &last, &id, &ft)) {
        if (which < 0) which = id;
        tc_skip(t, ft, 2, 0);
    }
    return which;
}

static void parse_schema_elem(Tc *t, PqSchemaElem *e) {
    int last = 0, id, ft, have_name = 0;
    e->type = -1;
    e->repetition = -1;
    e->converted_type = -1;
    e->logical_type = -1;
    while (tc_field(t, &last, &id, &ft)) {
        switch (id) {
        case 1: e->type = (int)tc_int(t, ft, 0, 7, "a schema element's type"); break;
        case 3: e->repetition = (int)tc_int(t, ft, 0, 2, "a repetition type"); break;
        case 4: {
            const uint8_t *s;
            size_t n;
            if (ft != TC_BINARY) { tc_fail(t, "a string for a schema element's name", "another type"); break; }
            tc_binary(t, &s, &n);
            if (t->bad) break;
            if (memchr(s, 0, n)) { tc_fail(t, "a column name without NUL bytes", "one with a NUL byte"); break; }
            free(e->name);
            e->name = gt_xmalloc(n + 1);
            memcpy(e->name, s, n);
            e->name[n] = 0;
            have_name = 1;
            break;
        }
        case 5: e->num_children = (int)tc_int(t, ft, 0, INT32_MAX, "num_children"); break;
        case 6: e->converted_type = (int)tc_int(t, ft, 0, INT32_MAX, "a converted type"); break;
        case 10:
            tc_expect_struct(t, ft, "a logical type");
            if (!t->bad) e->logical_type = logical_type_id(t);
            break;
        default: tc_skip(t, ft, 1, 0);
        }
    }
    if (!t->bad && !have_name) tc_fail(t, "a schema element with a name", "none");
}

static void parse_column_meta(Tc *t, PqChunkMeta *c) {
    int last = 0, id, ft;
    uint32_t seen = 0;
    while (tc_field(t, &last, &id, &ft)) {
        switch (id) {
        case 1: c->type = (int)tc_int(t, ft, 0, 7, "a column's type"); break;
        case 4: c->codec = (int)tc_int(t, ft, 0, INT32_MAX, "a codec"); break;
        case 5: c->num_values = tc_int(t, ft, 0, INT64_MAX, "num_values"); break;
        case 7: c->total_compressed_size = tc_int(t, ft, 0, INT64_MAX, "total_compressed_size"); break;
        case 9: c->data_page_offset = tc_int(t, ft, 0, INT64_MAX, "data_page_offset"); break;
        case 11: c->dictionary_page_offset = tc_int(t, ft, 0, INT64_MAX, "dictionary_page_offset"); break;
        default: tc_skip(t, ft, 3, 0);
        }
        if (id > 0 && id < 32) seen |= 1u << id;
    }
    const uint32_t need = (1u << 1) | (1u << 4) | (1u << 5) | (1u << 7) | (1u << 9);
    if (!t->bad && (seen & need) != need)
        tc_fail(t, "column metadata with type, codec, num_values, total_compressed_size and data_page_offset",
                "some missing");
}

static void parse_column_chunk(Tc *t, PqChunkMeta *c) {
    int last = 0, id, ft;
    c->dictionary_page_offset = -1;
    while (tc_field(t, &last, &id, &ft)) {
        if (id == 1) {
            c->external = 1;
            tc_skip(t, ft, 2, 0);
        } else if (id == 3) {
            tc_expect_struct(t, ft, "column metadata");
            if (t->bad) break;
            c->has_meta = 1;
            parse_column_meta(t, c);
        } else {
            tc_skip(t, ft, 2, 0);
        }
    }
}

static void parse_row_group(Tc *t, PqRowGroupMeta *g) {
    int last = 0, id, ft, have_rows = 0, have_cols = 0;
    while (tc_field(t, &last, &id, &ft)) {
        if (id == 1 && !have_cols) {
            int elem = 0;
            size_t n = tc_list(t, ft, &elem);
            if (t->bad) break;
            if (n > 0 && elem != TC_STRUCT) { tc_fail(t, "a list of column chunks", "another element type"); break; }
            if (n > INT32_MAX) { tc_fail(t, "fewer column chunks", "more"); break; }
            g->columns = gt_xcalloc(n ? n : 1, sizeof *g->columns);
            g->n_columns = (int)n;
            for (size_t i = 0; i < n && !t->bad; i++) parse_column_chunk(t, &g->columns[i]);
            have_cols = 1;
        } else if (id == 3) {
            g->num_rows = tc_int(t, ft, 0, INT64_MAX, "a row group's num_rows");
            have_rows = 1;
        } else {
            tc_skip(t, ft, 1, 0);
        }
    }
    if (!t->bad && (!have_rows || !have_cols)) tc_fail(t, "a row group with columns and num_rows", "some missing");
}

int pq_parse_footer(PqFileMeta *m, const uint8_t *buf, size_t len, uint64_t file_off, const char *file,
                    GtError *err) {
    Tc t = {.base = buf, .p = buf, .end = buf + len, .file_off = file_off, .file = file, .what = "footer", .err = err};
    memset(m, 0, sizeof *m);
    int last = 0, id, ft, have_schema = 0, have_rgs = 0, have_rows = 0;
    while (tc_field(&t, &last, &id, &ft)) {
        if (id == 2 && !have_schema) {
            int elem = 0;
            size_t n = tc_list(&t, ft, &elem);
            if (t.bad) break;
            if (n > 0 && elem != TC_STRUCT) { tc_fail(&t, "a list of schema elements", "another element type"); break; }
            if (n > INT32_MAX) { tc_fail(&t, "fewer schema elements", "more"); break; }
            m->schema = gt_xcalloc(n ? n : 1, sizeof *m->schema);
            m->n_schema = (int)n;
            for (size_t i = 0; i < n && !t.bad; i++) parse_schema_elem(&t, &m->schema[i]);
            have_schema = 1;
        } else if (id == 3) {
            m->num_rows = tc_int(&t, ft, 0, INT64_MAX, "num_rows");
            have_rows = 1;
        } else if (id == 4 && !have_rgs) {
            int elem = 0;
            size_t n = tc_list(&t, ft, &elem);
            if (t.bad) break;
            if (n > 0 && elem != TC_STRUCT) { tc_fail(&t, "a list of row groups", "another element type"); break; }
            if (n > INT32_MAX) { tc_fail(&t, "fewer row groups", "more"); break; }
            m->row_groups = gt_xcalloc(n ? n : 1, sizeof *m->row_groups);
            m->n_row_groups = (int)n;
            for (size_t i = 0; i < n && !t.bad; i++) parse_row_group(&t, &m->row_groups[i]);
            have_rgs = 1;
        } else {
            tc_skip(&t, ft, 1, 0);
        }
    }
    if (!t.bad && (!have_schema || !have_rgs || !have_rows))
        tc_fail(&t, "a footer with schema, num_rows and row_groups", "some missing");
    if (t.bad) {
        pq_meta_free(m);
        return -1;
    }
    return 0;
}

void pq_meta_free(PqFileMeta *m) {
    if (!m) return;
    for (int i = 0; i < m->n_schema; i++) free(m->schema[i].name);
    free(m->schema);
    for (int i = 0; i < m->n_row_groups; i++) free(m->row_groups[i].columns);
    free(m->row_groups);
    memset(m, 0, sizeof *m);
}

/* ---- PageHeader ---- */

static void parse_data_page_header(Tc *t, PqPageHeader *h, int v2) {
    int last = 0, id, ft;
    uint32_t seen = 0;
    while (tc_field(t, &last, &id, &ft)) {
        if (id > 0 && id < 32) seen |= 1u << id;
        if (id == 1) h->num_values = (int32_t)tc_int(t, ft, 0, INT32_MAX, "a page's num_values");
        else if (!v2 && id == 2) h->encoding = (int)tc_int(t, ft, 0, INT32_MAX, "an encoding");
        else if (!v2 && id == 3) h->def_encoding = (int)tc_int(t, ft, 0, INT32_MAX, "an encoding");
        else if (!v2 && id == 4) h->rep_encoding = (int)tc_int(t, ft, 0, INT32_MAX, "an encoding");
        else if (v2 && id == 4) h->encoding = (int)tc_int(t, ft, 0, INT32_MAX, "an encoding");
        else if (v2 && id == 5) h->v2_def_len = (int32_t)tc_int(t, ft, 0, INT32_MAX, "definition_levels_byte_length");
        else if (v2 && id == 6) h->v2_rep_len = (int32_t)tc_int(t, ft, 0, INT32_MAX, "repetition_levels_byte_length");
        else if (v2 && id == 7) h->v2_is_compressed = tc_bool(t, ft, "is_compressed");
        else tc_skip(t, ft, 2, 0);
    }
    uint32_t need = v2 ? (1u << 1) | (1u << 4) | (1u << 5) | (1u << 6) : (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4);
    if (!t->bad && (seen & need) != need) tc_fail(t, "a data page header with its required fields", "some missing");
}

static void parse_dict_page_header(Tc *t, PqPageHeader *h) {
    int last = 0, id, ft;
    uint32_t seen = 0;
    while (tc_field(t, &last, &id, &ft)) {
        if (id > 0 && id < 32) seen |= 1u << id;
        if (id == 1) h->num_values = (int32_t)tc_int(t, ft, 0, INT32_MAX, "a dictionary's num_values");
        else if (id == 2) h->encoding = (int)tc_int(t, ft, 0, INT32_MAX, "an encoding");
        else tc_skip(t, ft, 2, 0);
    }
    if (!t->bad && (seen & 6u) != 6u) tc_fail(t, "a dictionary page header with num_values and encoding", "some missing");
}

int pq_parse_page_header(PqPageHeader *h, const uint8_t *buf, size_t len, uint64_t file_off, size_t *used,
                         const char *file, const char *where, GtError *err) {
    Tc t = {.base = buf, .p = buf, .end = buf + len, .file_off = file_off, .file = file, .what = where, .err = err};
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->v2_is_compressed = 1;
    int last = 0, id, ft, have_sub = 0;
    uint32_t seen = 0;
    while (tc_field(&t, &last, &id, &ft)) {
        if (id > 0 && id < 32) seen |= 1u << id;
        if (id == 1) h->type = (int)tc_int(&t, ft, 0, INT32_MAX, "a page type");
        else if (id == 2) h->uncompressed_size = (int32_t)tc_int(&t, ft, 0, INT32_MAX, "uncompressed_page_size");
        else if (id == 3) h->compressed_size = (int32_t)tc_int(&t, ft, 0, INT32_MAX, "compressed_page_size");
        else if ((id == 5 || id == 7 || id == 8) && !have_sub) {
            tc_expect_struct(&t, ft, "a page's header");
            if (t.bad) break;
            if (id == 7) parse_dict_page_header(&t, h);
            else parse_data_page_header(&t, h, id == 8);
            have_sub = id;
        } else tc_skip(&t, ft, 1, 0);
    }
    if (!t.bad && (seen & 0xeu) != 0xeu) tc_fail(&t, "a page header with type and sizes", "some missing");
    if (!t.bad) {
        int want = h->type == PQP_DATA_PAGE ? 5 : h->type == PQP_DICTIONARY_PAGE ? 7 : h->type == PQP_DATA_PAGE_V2 ? 8 : 0;
        if (want && have_sub != want) tc_fail(&t, "the page type's own header", "none");
    }
    if (t.bad) return -1;
    *used = (size_t)(t.p - t.base);
    return 0;
}
