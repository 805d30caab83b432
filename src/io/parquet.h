/* parquet.h - a reader of Apache Parquet files as Hugging Face Hub datasets write them: flat string
 * (BYTE_ARRAY), integer (INT32/INT64, BOOLEAN as 0/1) columns, nullable or not, and
 * list<struct<role: string, content: string>> message columns; PLAIN and dictionary encodings
 * (RLE/bit-packed hybrid), data pages v1 and v2, UNCOMPRESSED/SNAPPY/GZIP/ZSTD, several row groups,
 * several files by glob(3).
 *
 * Files are untrusted: every offset, length and count is checked against the file and page sizes
 * before use; bad input is one line (file, row group, column, byte offset, expected, found), code 2.
 * Columns are read lazily by name: only the requested columns' chunks are read, one row group at a
 * time (memory bounded by a row group's requested columns, not by the file). */
#ifndef GT_PARQUET_H
#define GT_PARQUET_H

#include "common.h"

typedef struct ParquetReader ParquetReader;
typedef enum { PQ_NULL, PQ_STRING, PQ_INT, PQ_MESSAGES } PqKind;
typedef struct {
    const char *role, *content;
    size_t role_len, content_len;
} PqMessage; /* a null role/content: NULL, 0 (a null message in the list: both) */
typedef struct {
    PqKind kind;
    const char *s;
    size_t len;
    int64_t i;
    const PqMessage *msgs;
    size_t n_msgs;
} PqValue;

/* Open a file or a glob(3) pattern of files (sorted); reads the footers only. columns[n_columns]: the
 * top-level columns the caller will read; each must exist in every file and be a string, an integer
 * or a list<struct<role,content>> column, else one line naming the file, the column and its type. */
int parquet_open(ParquetReader **out, const char *path, const char *const *columns, int n_columns, GtError *err);
/* The same over one file held in memory (buf must outlive the reader); name names it in messages. */
int parquet_open_memory(ParquetReader **out, const char *name, const void *buf, size_t len,
                        const char *const *columns, int n_columns, GtError *err);
uint64_t parquet_num_rows(const ParquetReader *r); /* over all files */
/* The requested columns' kinds (PQ_STRING / PQ_INT / PQ_MESSAGES), in the order asked. */
PqKind parquet_column_kind(const ParquetReader *r, int column);
/* The next row: 1 with v[n_columns] (valid until the next call; a null value has kind PQ_NULL),
 * 0 after the last row, -1 on bad input (code 2: file, row group, column and byte offset, what was
 * expected, what was found) or I/O / memory failure (code 1). */
int parquet_next_row(ParquetReader *r, PqValue *v, GtError *err);
const char *parquet_current_file(const ParquetReader *r); /* the file of the row last returned */
uint64_t parquet_current_row(const ParquetReader *r);     /* its row number within that file, from 0 */
void parquet_close(ParquetReader *r);                     /* NULL is fine */

#endif
