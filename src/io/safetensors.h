/* safetensors.h - reading and writing the safetensors format (Hugging Face).
 *
 * Layout: 8-byte little-endian u64 header length N, then N bytes of JSON header
 *   {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
 * then the data buffer; offsets are relative to the start of the data buffer.
 *
 * The reader treats the file as untrusted (downloaded from anywhere): everything in the header is
 * validated on open, every error is one line "FILE: tensor NAME: expected ..., found ...", data is
 * read with pread at validated offsets (never out of bounds), and no allocation is sized by an
 * unchecked field. NaN/Inf values are not an open error: the caller checks and warns.
 * The host is assumed little-endian (as the format is). */
#ifndef GT_SAFETENSORS_H
#define GT_SAFETENSORS_H

#include "common.h"

/* ST_U8: raw bytes (bitsandbytes' packed 4-bit weights and their state, see hf_weights.h); only
 * safetensors_read_bytes reads it, the float reads refuse it */
typedef enum { ST_F32 = 0, ST_BF16, ST_F16, ST_U8 } StDtype;

#define ST_MAX_DIMS 4
#define ST_MAX_HEADER_BYTES (100u * 1000u * 1000u) /* 100 MB, as in the HF reference reader */

/* One tensor to write; data holds numel elements in dtype (little-endian). */
typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;                   /* 0..4 (0: a scalar, one element) */
    int64_t shape[ST_MAX_DIMS];
    const void *data;           /* may be NULL only when numel == 0 */
} StTensorOut;

/* Write atomically (path.tmp, fsync, rename, fsync of the directory). Tensors are laid out in
 * the given order, contiguously; the header is padded with spaces to a multiple of 8 bytes.
 * meta_kv: 2*n_meta strings k0, v0, k1, v1, ... (may be NULL when n_meta == 0).
 * Returns 0, or -1 with err filled (bad argument: code 1; I/O failure, e.g. disk full: code 1);
 * on failure no file is left at path's temporary name and an existing path is untouched. */
int safetensors_write(const char *path, const StTensorOut *tensors, int n,
                      const char *const *meta_kv, int n_meta, GtError *err);

/* The same file, streamed: the header is written first (every offset follows from the shapes),
 * then the data arrives through st_writer_put in chunks of any size, tensor after tensor in the
 * given order (the tensors' data pointers are not used). safetensors_write is this writer fed
 * from memory, so there is one home for the format.
 *
 *   st_writer_open   validate (as safetensors_write: code 1 for a bad argument), create path.tmp
 *                    (never through a link), write the length and the header
 *   st_writer_put    append len bytes of data; more than the header declares is an error
 *   st_writer_close  all declared bytes put? flush, fsync, close: path.tmp is complete
 *   st_writer_commit rename path.tmp to path, fsync the directory
 *   st_writer_free   free; path.tmp is unlinked unless committed (so freeing after any error,
 *                    or without committing, leaves nothing behind and path untouched)
 * Every call returns 0, or -1 with err filled (code 1: a write error such as ENOSPC or EFBIG,
 * one line naming path.tmp); after an error only st_writer_free is useful. Splitting close from
 * commit lets a caller complete several files before renaming any (hf_writer.c's shards). */
typedef struct StWriter StWriter;
int st_writer_open(StWriter **out, const char *path, const StTensorOut *tensors, int n,
                   const char *const *meta_kv, int n_meta, GtError *err);
int st_writer_put(StWriter *w, const void *data, size_t len, GtError *err);
int st_writer_close(StWriter *w, GtError *err);
int st_writer_commit(StWriter *w, GtError *err);
const char *st_writer_path(const StWriter *w); /* the final path */
void st_writer_free(StWriter *w);                /* NULL is fine */

typedef struct SafeTensors SafeTensors; /* an opened, fully validated file */

/* Open and validate. Returns 0, or -1 with err filled (code GT_EXIT_BAD_INPUT for a bad file,
 * GT_EXIT_FAILURE when it cannot be read); *out is NULL on failure. */
int safetensors_open(SafeTensors **out, const char *path, GtError *err);
void safetensors_close(SafeTensors *st); /* NULL is fine */

const char *safetensors_path(const SafeTensors *st);
uint64_t safetensors_file_size(const SafeTensors *st); /* bytes, as validated at open */
int safetensors_count(const SafeTensors *st);
/* name of tensor i (file order), NULL if i is out of range */
const char *safetensors_name(const SafeTensors *st, int i);
/* find by name; returns index or -1 */
int safetensors_find(const SafeTensors *st, const char *name);
/* shape[4] and ndim of tensor i; returns 0, or -1 if i is out of range */
int safetensors_shape(const SafeTensors *st, int i, int64_t *shape, int *ndim);
/* number of elements of tensor i (0 if out of range) */
int64_t safetensors_numel(const SafeTensors *st, int i);
StDtype safetensors_dtype(const SafeTensors *st, int i);
const char *st_dtype_name(StDtype d); /* "F32", "BF16", "F16", "U8" */
size_t st_dtype_size(StDtype d);      /* 4, 2, 2, 1 */

/* Copy tensor i converted to fp32 into dst[n]; error if its element count != n, or if the file
 * changed under us (short read), or if it is U8 (not a float: code 2). Returns 0 or -1 with err
 * filled. */
int safetensors_read_f32(const SafeTensors *st, int i, float *dst, size_t n, GtError *err);

/* Elements [elem_offset, elem_offset + n) of tensor i (row-major order) converted to fp32 into
 * dst[n], with pread at the validated offset: a big tensor streams through a bounded buffer.
 * A range outside the tensor is the caller's error (code 1); a short read, code 2. */
int safetensors_read_f32_range(const SafeTensors *st, int i, uint64_t elem_offset, size_t n, float *dst,
                               GtError *err);

/* Bytes [byte_offset, byte_offset + len) of tensor i's data as they are in the file (any dtype),
 * with pread at the validated offset. A range outside the tensor: code 1; a short read: code 2. */
int safetensors_read_bytes(const SafeTensors *st, int i, uint64_t byte_offset, size_t len, void *dst, GtError *err);

/* value of a "__metadata__" key, NULL if absent */
const char *safetensors_metadata(const SafeTensors *st, const char *key);

/* f16 -> fp32 (exact); fp32 -> f16 rounded to nearest even (overflow: infinity, NaN stays NaN);
 * bf16 is gt_f32_to_bf16 / gt_bf16_to_f32 in common.h */
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);

#endif
