/* parquet_internal.h - what the parquet reader's files share: the footer's metadata as C structs
 * (only the fields the reader uses), the thrift compact decoding of the footer and page headers
 * (parquet_thrift.c) and the decoding of one column chunk's pages into levels and values
 * (parquet_page.c). parquet.c holds the file/glob/row API of parquet.h. */
#ifndef GT_PARQUET_INTERNAL_H
#define GT_PARQUET_INTERNAL_H

#include "parquet.h"

/* parquet.thrift's enums, as far as the reader uses them */
enum { PQT_BOOLEAN = 0, PQT_INT32 = 1, PQT_INT64 = 2, PQT_INT96 = 3, PQT_FLOAT = 4, PQT_DOUBLE = 5,
       PQT_BYTE_ARRAY = 6, PQT_FIXED_LEN_BYTE_ARRAY = 7 };
enum { PQR_REQUIRED = 0, PQR_OPTIONAL = 1, PQR_REPEATED = 2 };
enum { PQC_UNCOMPRESSED = 0, PQC_SNAPPY = 1, PQC_GZIP = 2, PQC_LZO = 3, PQC_BROTLI = 4, PQC_LZ4 = 5,
       PQC_ZSTD = 6, PQC_LZ4_RAW = 7 };
enum { PQE_PLAIN = 0, PQE_PLAIN_DICTIONARY = 2, PQE_RLE = 3, PQE_BIT_PACKED = 4, PQE_DELTA_BINARY_PACKED = 5,
       PQE_DELTA_LENGTH_BYTE_ARRAY = 6, PQE_DELTA_BYTE_ARRAY = 7, PQE_RLE_DICTIONARY = 8,
       PQE_BYTE_STREAM_SPLIT = 9 };
enum { PQP_DATA_PAGE = 0, PQP_INDEX_PAGE = 1, PQP_DICTIONARY_PAGE = 2, PQP_DATA_PAGE_V2 = 3 };
#define PQ_CONVERTED_DECIMAL 5
#define PQ_CONVERTED_UINT_32 13
#define PQ_CONVERTED_UINT_64 14
#define PQ_LOGICAL_DECIMAL 5 /* LogicalType union member 5 */

typedef struct {
    char *name;         /* NUL-terminated copy (a name with a NUL byte in it is refused) */
    int type;           /* PQT_*, -1 for a group */
    int repetition;     /* PQR_*, -1 absent (the root) */
    int num_children;   /* 0 for a leaf */
    int converted_type; /* -1 absent */
    int logical_type;   /* the LogicalType union's member id, -1 absent */
} PqSchemaElem;

typedef struct {
    int has_meta, external;  /* meta_data present; file_path set (data in another file: refused) */
    int type, codec;
    int64_t num_values, total_compressed_size, data_page_offset, dictionary_page_offset; /* -1 absent */
} PqChunkMeta;

typedef struct {
    int64_t num_rows;
    int n_columns;
    PqChunkMeta *columns;
} PqRowGroupMeta;

typedef struct {
    int64_t num_rows;
    int n_schema;
    PqSchemaElem *schema;
    int n_row_groups;
    PqRowGroupMeta *row_groups;
} PqFileMeta;

typedef struct {
    int type;
    int32_t uncompressed_size, compressed_size;
    int32_t num_values;               /* data pages v1/v2 and dictionary pages */
    int encoding, def_encoding, rep_encoding; /* v1: the three encodings; v2/dictionary: encoding */
    int32_t v2_def_len, v2_rep_len;   /* v2: the levels' byte lengths (uncompressed, before the data) */
    int v2_is_compressed;             /* v2: default 1 */
} PqPageHeader;

/* The footer buf[len] (at file offset file_off) into *m; bad input: one line in err naming the
 * file and byte offset (code 2). parquet_meta_free releases what it holds. */
int pq_parse_footer(PqFileMeta *m, const uint8_t *buf, size_t len, uint64_t file_off, const char *file,
                    GtError *err);
void pq_meta_free(PqFileMeta *m);
/* One page header at buf[0..len) (file offset file_off): *used gets its length. where names the
 * chunk in messages ("row group 0, column text, page header"). */
int pq_parse_page_header(PqPageHeader *h, const uint8_t *buf, size_t len, uint64_t file_off, size_t *used,
                         const char *file, const char *where, GtError *err);

/* Where a column chunk's pages start: the dictionary page's offset when there is one before the
 * data pages (writers put a 0 data_page_offset in a chunk without data pages) */
static inline int64_t pq_chunk_start(const PqChunkMeta *cm) {
    int64_t d = cm->dictionary_page_offset, p = cm->data_page_offset;
    if (d >= 4 && (d < p || p < 4)) return d;
    return p;
}

/* A string value: bytes in a buffer the decoded chunk keeps alive */
typedef struct {
    const char *s;
    uint32_t len;
} PqStr;

/* One leaf column chunk of one row group, decoded: its levels (one per value slot, nulls and empty
 * lists included) and its non-null values in order. */
typedef struct {
    int type;            /* PQT_BYTE_ARRAY, PQT_INT32, PQT_INT64 or PQT_BOOLEAN */
    int max_def, max_rep;
    size_t n_levels, cap_levels;
    uint8_t *def, *rep;  /* NULL when the max level is 0 */
    size_t n_vals, cap_vals;
    PqStr *strs;         /* BYTE_ARRAY */
    int64_t *ints;       /* the integer types */
    size_t n_dict;       /* the dictionary page's values, when there is one */
    PqStr *dict_s;
    int64_t *dict_i;
    uint8_t **bufs;      /* decompressed pages and the chunk's bytes, freed with the chunk */
    size_t n_bufs, cap_bufs;
} PqLeafData;

/* Where a chunk is, for messages: "FILE: row group G, column NAME" */
typedef struct {
    const char *file, *column;
    int row_group;
} PqWhere;

/* Decode the column chunk chunk[0..len) (its pages, which start at file offset file_off; the bytes
 * must stay alive as long as d: pass own=1 to hand a malloc'd chunk to d) into d, whose type, max_def
 * and max_rep the caller set. num_values: the chunk's value count from the footer. */
int pq_decode_chunk(PqLeafData *d, const PqChunkMeta *cm, uint8_t *chunk, size_t len, int own,
                    uint64_t file_off, const PqWhere *w, GtError *err);
void pq_leaf_clear(PqLeafData *d); /* frees the data, keeps type and levels */

/* The DELTA encodings (parquet_delta.c): n values from p[0..len); *used: the bytes taken. On bad
 * input -1 with msg[cap] saying what was expected and found. DELTA_LENGTH_BYTE_ARRAY's strings point
 * into p; DELTA_BYTE_ARRAY's into *buf (malloc'd, at most max_bytes; the caller frees it). */
int pq_delta_binary(const uint8_t *p, size_t len, size_t n, int64_t *out, size_t *used, char *msg, size_t cap);
int pq_delta_length(const uint8_t *p, size_t len, size_t n, PqStr *out, size_t *used, char *msg, size_t cap);
int pq_delta_byte_array(const uint8_t *p, size_t len, size_t n, PqStr *out, uint8_t **buf, size_t max_bytes, char *msg,
                        size_t cap);

#endif
