/* parquet_page.c - one column chunk's pages into levels and values: page headers, decompression
 * (snappy, gzip, zstd), the RLE/bit-packed hybrid of levels and dictionary indices, PLAIN values and
 * dictionaries; data pages v1 (levels inside the compressed data, each with a 4-byte length) and v2
 * (levels first, uncompressed, the data after them compressed when is_compressed). Every count and
 * length is checked against the page's bytes before it is used. */
#include "parquet_internal.h"

#include <snappy-c.h>
#include <stdarg.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

#define PQ_MAX_PAGE_BYTES (1u << 28)   /* a page's uncompressed size at most 256 MiB */
#define PQ_MAX_PAGE_VALUES (1 << 24)   /* a page's value slots at most 16 Mi */

typedef struct {
    const PqWhere *w;
    uint64_t off; /* the file offset of the page being read */
    GtError *err;
} Ctx;

static int pfail(const Ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pfail(const Ctx *c, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gt_error(c->err, GT_EXIT_BAD_INPUT, "%s: row group %d, column %s, page at byte %llu: %s", c->w->file,
                    c->w->row_group, c->w->column, (unsigned long long)c->off, msg);
}

static const char *codec_name(int codec) {
    static const char *const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
    return codec >= 0 && codec < 8 ? names[codec] : "an unknown codec";
}

static const char *encoding_name(int e) {
    static const char *const names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                        "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                        "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < 10 ? names[e] : "an unknown encoding";
}

static void keep_buf(PqLeafData *d, uint8_t *b) {
    if (d->n_bufs == d->cap_bufs) {
        d->cap_bufs = d->cap_bufs ? 2 * d->cap_bufs : 8;
        d->bufs = gt_xrealloc(d->bufs, d->cap_bufs * sizeof *d->bufs);
    }
    d->bufs[d->n_bufs++] = b;
}

/* src[0..n) decompressed with codec into exactly out_n bytes: *out points at them (src itself when
 * uncompressed; a buffer d keeps otherwise). */
static int decompress(PqLeafData *d, const Ctx *c, int codec, const uint8_t *src, size_t n, size_t out_n,
                      const uint8_t **out) {
    if (codec == PQC_UNCOMPRESSED) {
        if (n != out_n)
            return pfail(c, "expected an uncompressed page of %zu bytes as its header says, found %zu", out_n, n);
        *out = src;
        return 0;
    }
    if (codec != PQC_SNAPPY && codec != PQC_GZIP && codec != PQC_ZSTD)
        return pfail(c, "expected the codec UNCOMPRESSED, SNAPPY, GZIP or ZSTD, found %s (%d)", codec_name(codec), codec);
    if (out_n > PQ_MAX_PAGE_BYTES)
        return pfail(c, "expected an uncompressed page of at most %u bytes, found %zu", PQ_MAX_PAGE_BYTES, out_n);
    uint8_t *dst = malloc(out_n ? out_n : 1);
    if (!dst) return gt_error(c->err, GT_EXIT_FAILURE, "%s: out of memory for a page of %zu bytes", c->w->file, out_n);
    keep_buf(d, dst);
    size_t got = 0;
    if (codec == PQC_SNAPPY) {
        size_t ulen = 0;
        if (snappy_uncompressed_length((const char *)src, n, &ulen) != SNAPPY_OK)
            return pfail(c, "expected snappy data, found a bad snappy header");
        if (ulen != out_n) return pfail(c, "expected snappy data of %zu bytes as the page header says, found %zu", out_n, ulen);
        got = out_n;
        if (snappy_uncompress((const char *)src, n, (char *)dst, &got) != SNAPPY_OK)
            return pfail(c, "expected valid snappy data, found corrupt data");
    } else if (codec == PQC_GZIP) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 15 + 32) != Z_OK) return gt_error(c->err, GT_EXIT_FAILURE, "%s: zlib init failed", c->w->file);
        int rc = Z_OK;
        size_t in_left = n, out_left = out_n;
        zs.next_in = (Bytef *)src;
        zs.next_out = dst;
        while (rc == Z_OK) {
            uInt ain = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
            uInt aout = out_left > UINT_MAX ? UINT_MAX : (uInt)out_left;
            zs.avail_in = ain;
            zs.avail_out = aout;
            rc = inflate(&zs, Z_FINISH);
            in_left -= ain - zs.avail_in;
            out_left -= aout - zs.avail_out;
            if (rc == Z_BUF_ERROR && (in_left == 0 || out_left == 0)) break;
            if (rc == Z_BUF_ERROR) rc = Z_OK;
        }
        got = out_n - out_left;
        inflateEnd(&zs);
        if (rc != Z_STREAM_END)
            return pfail(c, "expected gzip data of %zu bytes as the page header says, found %s", out_n,
                         out_left == 0 ? "more" : "corrupt or truncated data");
    } else {
        size_t rc = ZSTD_decompress(dst, out_n, src, n);
        if (ZSTD_isError(rc)) return pfail(c, "expected valid zstd data, found %s", ZSTD_getErrorName(rc));
        got = rc;
    }
    if (got != out_n) return pfail(c, "expected %zu decompressed bytes as the page header says, found %zu", out_n, got);
    *out = dst;
    return 0;
}

/* ---- the RLE/bit-packed hybrid ---- */

typedef struct {
    const uint8_t *p, *end;
    int w;
    uint64_t left;     /* values left in the current run */
    int rle;           /* the current run is an RLE run */
    uint32_t val;      /* its value */
    const uint8_t *bp; /* a bit-packed run's bytes */
    uint64_t bp_i;     /* the next value's index in it */
} Rle;

static uint64_t rle_varint(Rle *r, int *ok) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) break;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    *ok = 0;
    return 0;
}

/* n values into out; 0, or -1 when the data ends first or a value exceeds max */
static int rle_read(Rle *r, uint32_t *out, size_t n, uint32_t max, const Ctx *c, const char *what) {
    for (size_t i = 0; i < n;) {
        if (r->left == 0) {
            if (r->p >= r->end)
                return pfail(c, "expected %zu more %s (RLE/bit-packed), found the end of their data", n - i, what);
            int ok = 1;
            uint64_t h = rle_varint(r, &ok);
            if (!ok) return pfail(c, "expected a run header in the %s, found a bad varint", what);
            if (h & 1) {
                uint64_t groups = h >> 1;
                size_t avail = (size_t)(r->end - r->p);
                uint64_t bytes = groups * (uint64_t)r->w;
                if (groups > (1ull << 40)) return pfail(c, "expected a bit-packed run within the data, found %llu groups", (unsigned long long)groups);
                r->rle = 0;
                r->bp = r->p;
                r->bp_i = 0;
                if (r->w == 0) {
                    r->left = groups * 8;
                } else if (bytes <= avail) {
                    r->left = groups * 8;
                    r->p += bytes;
                } else { /* a short last run: the values its bytes hold */
                    r->left = (uint64_t)avail * 8 / (uint64_t)r->w;
                    r->p = r->end;
                }
            } else {
                int nb = (r->w + 7) / 8;
                if ((size_t)(r->end - r->p) < (size_t)nb)
                    return pfail(c, "expected an RLE run's value in the %s, found the end of the data", what);
                uint32_t v = 0;
                for (int k = 0; k < nb; k++) v |= (uint32_t)r->p[k] << (8 * k);
                r->p += nb;
                r->rle = 1;
                r->val = v;
                r->left = h >> 1;
            }
            continue;
        }
        size_t take = n - i < r->left ? n - i : (size_t)r->left;
        if (r->rle) {
            if (r->val > max) return pfail(c, "expected %s of at most %u, found %u", what, max, r->val);
            for (size_t k = 0; k < take; k++) out[i + k] = r->val;
        } else {
            for (size_t k = 0; k < take; k++) {
                uint32_t v = 0;
                if (r->w) {
                    uint64_t bit = (r->bp_i + k) * (uint64_t)r->w;
                    size_t b0 = (size_t)(bit >> 3), b1 = (size_t)((bit + (uint64_t)r->w - 1) >> 3);
                    uint64_t acc = 0;
                    for (size_t b = b0; b <= b1; b++) acc |= (uint64_t)r->bp[b] << (8 * (b - b0));
                    v = (uint32_t)((acc >> (bit & 7)) & ((r->w == 32) ? 0xffffffffull : ((1ull << r->w) - 1)));
                }
                if (v > max) return pfail(c, "expected %s of at most %u, found %u", what, max, v);
                out[i + k] = v;
            }
            r->bp_i += take;
        }
        r->left -= take;
        i += take;
    }
    return 0;
}

static int bit_width(uint32_t max) {
    int w = 0;
    while (w < 32 && (max >> w)) w++;
    return w;
}

/* n levels (at most max) appended to *lv from an RLE hybrid of p[0..len) */
static int read_levels(uint8_t *lv, size_t n, uint32_t max, const uint8_t *p, size_t len, const Ctx *c,
                       const char *what) {
    Rle r = {.p = p, .end = p + len, .w = bit_width(max)};
    uint32_t tmp[512];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < 512 ? n - i : 512;
        if (rle_read(&r, tmp, k, max, c, what)) return -1;
        for (size_t j = 0; j < k; j++) lv[i + j] = (uint8_t)tmp[j];
        i += k;
    }
    return 0;
}

/* ---- values ---- */

static int grow_vals(PqLeafData *d, size_t more, const Ctx *c) {
    if (d->cap_vals && more <= d->cap_vals - d->n_vals) return 0;
    size_t cap = d->cap_vals ? d->cap_vals : 64;
    while (cap - d->n_vals < more) {
        if (cap > SIZE_MAX / 4 / sizeof(PqStr)) return gt_error(c->err, GT_EXIT_FAILURE, "%s: too many values", c->w->file);
        cap *= 2;
    }
    if (d->type == PQT_BYTE_ARRAY) d->strs = gt_xrealloc(d->strs, cap * sizeof *d->strs);
    else d->ints = gt_xrealloc(d->ints, cap * sizeof *d->ints);
    d->cap_vals = cap;
    return 0;
}

/* n PLAIN values of d->type from p[0..len) into s or i */
static int plain(const PqLeafData *d, const uint8_t *p, size_t len, size_t n, PqStr *s, int64_t *iv, const Ctx *c) {
    size_t pos = 0;
    switch (d->type) {
    case PQT_BYTE_ARRAY:
        for (size_t k = 0; k < n; k++) {
            if (len - pos < 4) return pfail(c, "expected %zu more PLAIN strings, found the end of the page", n - k);
            uint32_t l = (uint32_t)p[pos] | (uint32_t)p[pos + 1] << 8 | (uint32_t)p[pos + 2] << 16 | (uint32_t)p[pos + 3] << 24;
            pos += 4;
            if (l > len - pos)
                return pfail(c, "expected a string of %u bytes within the page, found %zu bytes left", l, len - pos);
            s[k].s = (const char *)p + pos;
            s[k].len = l;
            pos += l;
        }
        return 0;
    case PQT_INT32: case PQT_INT64: {
        size_t sz = d->type == PQT_INT32 ? 4 : 8;
        if (n > len / sz) return pfail(c, "expected %zu PLAIN values of %zu bytes, found %zu bytes", n, sz, len);
        for (size_t k = 0; k < n; k++) {
            uint64_t v = 0;
            for (size_t b = 0; b < sz; b++) v |= (uint64_t)p[k * sz + b] << (8 * b);
            iv[k] = sz == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        }
        return 0;
    }
    case PQT_BOOLEAN:
        if (n > (uint64_t)len * 8) return pfail(c, "expected %zu PLAIN booleans, found %zu bytes", n, len);
        for (size_t k = 0; k < n; k++) iv[k] = (p[k >> 3] >> (k & 7)) & 1;
        return 0;
    default:
        return pfail(c, "expected a string, integer or boolean column, found type %d", d->type);
    }
}

static int dict_values(PqLeafData *d, const uint8_t *p, size_t len, size_t n, PqStr *s, int64_t *iv, const Ctx *c) {
    if (!d->dict_s && !d->dict_i) return pfail(c, "expected a dictionary page before the dictionary-encoded page, found none");
    if (n == 0) return 0;
    if (len < 1) return pfail(c, "expected the dictionary indices' bit width, found the end of the page");
    int w = p[0];
    if (w > 32) return pfail(c, "expected a bit width of at most 32 for the dictionary indices, found %d", w);
    if (d->n_dict == 0) return pfail(c, "expected a non-empty dictionary for %zu values, found an empty one", n);
    Rle r = {.p = p + 1, .end = p + len, .w = w};
    uint32_t tmp[512];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < 512 ? n - i : 512;
        if (rle_read(&r, tmp, k, (uint32_t)(d->n_dict - 1), c, "dictionary indices")) return -1;
        for (size_t j = 0; j < k; j++) {
            if (s) s[i + j] = d->dict_s[tmp[j]];
            else iv[i + j] = d->dict_i[tmp[j]];
        }
        i += k;
    }
    return 0;
}

/* n non-null values of one data page, encoded with enc, appended to d */
static int page_values(PqLeafData *d, int enc, const uint8_t *p, size_t len, size_t n, const Ctx *c) {
    size_t per = d->type == PQT_INT64 ? 8 : 4;
    if (enc == PQE_PLAIN && d->type != PQT_BOOLEAN && n > len / per) /* checked before the allocation */
        return pfail(c, "expected %zu PLAIN values of at least %zu bytes each, found a page of %zu bytes", n, per, len);
    if (grow_vals(d, n, c)) return -1;
    PqStr *s = d->type == PQT_BYTE_ARRAY ? d->strs + d->n_vals : NULL;
    int64_t *iv = s ? NULL : d->ints + d->n_vals;
    int rc;
    if (enc == PQE_PLAIN) {
        rc = plain(d, p, len, n, s, iv, c);
    } else if (enc == PQE_PLAIN_DICTIONARY || enc == PQE_RLE_DICTIONARY) {
        rc = dict_values(d, p, len, n, s, iv, c);
    } else if (enc == PQE_RLE && d->type == PQT_BOOLEAN) {
        if (len < 4) return pfail(c, "expected the RLE booleans' 4-byte length, found the end of the page");
        uint32_t l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (l > len - 4) return pfail(c, "expected RLE booleans of %u bytes within the page, found %zu", l, len - 4);
        Rle r = {.p = p + 4, .end = p + 4 + l, .w = 1};
        uint32_t tmp[512];
        rc = 0;
        for (size_t i = 0; i < n && !rc;) {
            size_t k = n - i < 512 ? n - i : 512;
            rc = rle_read(&r, tmp, k, 1, c, "booleans");
            for (size_t j = 0; j < k && !rc; j++) iv[i + j] = tmp[j];
            i += k;
        }
    } else if ((enc == PQE_DELTA_BINARY_PACKED && (d->type == PQT_INT32 || d->type == PQT_INT64)) ||
               ((enc == PQE_DELTA_LENGTH_BYTE_ARRAY || enc == PQE_DELTA_BYTE_ARRAY) && d->type == PQT_BYTE_ARRAY)) {
        char msg[300];
        size_t used;
        uint8_t *buf = NULL;
        rc = enc == PQE_DELTA_BINARY_PACKED ? pq_delta_binary(p, len, n, iv, &used, msg, sizeof msg)
             : enc == PQE_DELTA_LENGTH_BYTE_ARRAY ? pq_delta_length(p, len, n, s, &used, msg, sizeof msg)
             : pq_delta_byte_array(p, len, n, s, &buf, PQ_MAX_PAGE_BYTES, msg, sizeof msg);
        if (buf) keep_buf(d, buf);
        if (rc) return pfail(c, "%s: %s", encoding_name(enc), msg);
        if (d->type == PQT_INT32)
            for (size_t k = 0; k < n; k++) iv[k] = (int32_t)(uint32_t)(uint64_t)iv[k];
    } else {
        return pfail(c, "expected the encoding PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY or DELTA_* for a %s column, found %s (%d)",
                     d->type == PQT_BYTE_ARRAY ? "string" : "integer", encoding_name(enc), enc);
    }
    if (rc) return -1;
    d->n_vals += n;
    return 0;
}

static int grow_levels(PqLeafData *d, size_t more) {
    if (d->cap_levels && more <= d->cap_levels - d->n_levels) return 0;
    size_t cap = d->cap_levels ? d->cap_levels : 256;
    while (cap - d->n_levels < more) cap *= 2;
    if (d->max_def) d->def = gt_xrealloc(d->def, cap);
    if (d->max_rep) d->rep = gt_xrealloc(d->rep, cap);
    d->cap_levels = cap;
    return 0;
}

static size_t count_present(const PqLeafData *d, size_t from, size_t n) {
    if (!d->max_def) return n;
    size_t k = 0;
    for (size_t i = from; i < from + n; i++) k += d->def[i] == d->max_def;
    return k;
}

static int v1_levels(PqLeafData *d, const uint8_t **p, size_t *len, size_t n, int max, int enc, uint8_t *out,
                     const Ctx *c, const char *what) {
    if (!max) return 0;
    if (enc != PQE_RLE)
        return pfail(c, "expected RLE %s, found %s (%d)", what, encoding_name(enc), enc);
    if (*len < 4) return pfail(c, "expected the %s' 4-byte length, found the end of the page", what);
    uint32_t l = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 | (uint32_t)(*p)[3] << 24;
    if (l > *len - 4) return pfail(c, "expected %s of %u bytes within the page, found %zu bytes", what, l, *len - 4);
    if (read_levels(out, n, (uint32_t)max, *p + 4, l, c, what)) return -1;
    *p += 4 + (size_t)l;
    *len -= 4 + (size_t)l;
    return 0;
}

int pq_decode_chunk(PqLeafData *d, const PqChunkMeta *cm, uint8_t *chunk, size_t len, int own, uint64_t file_off,
                    const PqWhere *w, GtError *err) {
    if (own) keep_buf(d, chunk);
    Ctx c = {.w = w, .off = file_off, .err = err};
    int64_t seen = 0;
    size_t pos = 0;
    while (seen < cm->num_values) {
        c.off = file_off + pos;
        if (pos >= len)
            return pfail(&c, "expected pages for %lld more values (the column chunk holds %lld), found the end of the chunk",
                         (long long)(cm->num_values - seen), (long long)cm->num_values);
        PqPageHeader h;
        size_t used = 0;
        char where[400];
        snprintf(where, sizeof where, "row group %d, column %s, page header", w->row_group, w->column);
        if (pq_parse_page_header(&h, chunk + pos, len - pos, file_off + pos, &used, w->file, where, err)) return -1;
        pos += used;
        if ((size_t)h.compressed_size > len - pos)
            return pfail(&c, "expected a page of %d bytes within the column chunk, found %zu bytes left",
                         h.compressed_size, len - pos);
        const uint8_t *pg = chunk + pos;
        size_t pn = (size_t)h.compressed_size;
        pos += pn;
        if (h.type == PQP_INDEX_PAGE) continue;
        if (h.type != PQP_DICTIONARY_PAGE && h.type != PQP_DATA_PAGE && h.type != PQP_DATA_PAGE_V2)
            return pfail(&c, "expected a data or dictionary page, found page type %d", h.type);
        if (h.num_values > PQ_MAX_PAGE_VALUES)
            return pfail(&c, "expected at most %d values in a page, found %d", PQ_MAX_PAGE_VALUES, h.num_values);
        const uint8_t *data;
        size_t dn;
        if (h.type == PQP_DICTIONARY_PAGE) {
            if (d->dict_s || d->dict_i || seen)
                return pfail(&c, "expected one dictionary page before the data pages, found another");
            if (h.encoding != PQE_PLAIN && h.encoding != PQE_PLAIN_DICTIONARY)
                return pfail(&c, "expected a PLAIN dictionary, found %s (%d)", encoding_name(h.encoding), h.encoding);
            if (decompress(d, &c, cm->codec, pg, pn, (size_t)h.uncompressed_size, &data)) return -1;
            size_t n = (size_t)h.num_values, per = d->type == PQT_INT64 ? 8 : 4;
            if (d->type != PQT_BOOLEAN && n > (size_t)h.uncompressed_size / per) /* checked before the allocation */
                return pfail(&c, "expected a dictionary of at most %zu values in its %d bytes, found %zu", (size_t)h.uncompressed_size / per,
                             h.uncompressed_size, n);
            if (d->type == PQT_BYTE_ARRAY) d->dict_s = gt_xmalloc((n ? n : 1) * sizeof *d->dict_s);
            else d->dict_i = gt_xmalloc((n ? n : 1) * sizeof *d->dict_i);
            if (plain(d, data, (size_t)h.uncompressed_size, n, d->dict_s, d->dict_i, &c)) return -1;
            d->n_dict = n;
            continue;
        }
        size_t n = (size_t)h.num_values;
        if ((int64_t)n > cm->num_values - seen)
            return pfail(&c, "expected at most %lld more values in the column chunk, found a page of %zu",
                         (long long)(cm->num_values - seen), n);
        grow_levels(d, n);
        uint8_t *rep = d->max_rep ? d->rep + d->n_levels : NULL, *def = d->max_def ? d->def + d->n_levels : NULL;
        if (h.type == PQP_DATA_PAGE) {
            if (decompress(d, &c, cm->codec, pg, pn, (size_t)h.uncompressed_size, &data)) return -1;
            dn = (size_t)h.uncompressed_size;
            if (v1_levels(d, &data, &dn, n, d->max_rep, h.rep_encoding, rep, &c, "repetition levels")) return -1;
            if (v1_levels(d, &data, &dn, n, d->max_def, h.def_encoding, def, &c, "definition levels")) return -1;
        } else {
            size_t ln = (size_t)h.v2_rep_len + (size_t)h.v2_def_len;
            if (ln > pn || ln > (size_t)h.uncompressed_size)
                return pfail(&c, "expected levels of %zu bytes within the page of %zu, found a smaller page", ln, pn);
            if (d->max_rep && read_levels(rep, n, (uint32_t)d->max_rep, pg, (size_t)h.v2_rep_len, &c, "repetition levels"))
                return -1;
            if (d->max_def && read_levels(def, n, (uint32_t)d->max_def, pg + h.v2_rep_len, (size_t)h.v2_def_len, &c,
                                          "definition levels"))
                return -1;
            dn = (size_t)h.uncompressed_size - ln;
            if (h.v2_is_compressed) {
                if (decompress(d, &c, cm->codec, pg + ln, pn - ln, dn, &data)) return -1;
            } else {
                if (pn - ln != dn)
                    return pfail(&c, "expected %zu bytes of uncompressed values as the header says, found %zu", dn, pn - ln);
                data = pg + ln;
            }
        }
        size_t present = count_present(d, d->n_levels, n);
        if (page_values(d, h.encoding, data, dn, present, &c)) return -1;
        d->n_levels += n;
        seen += (int64_t)n;
    }
    return 0;
}

void pq_leaf_clear(PqLeafData *d) {
    for (size_t i = 0; i < d->n_bufs; i++) free(d->bufs[i]);
    free(d->bufs);
    free(d->def);
    free(d->rep);
    free(d->strs);
    free(d->ints);
    free(d->dict_s);
    free(d->dict_i);
    int type = d->type, md = d->max_def, mr = d->max_rep;
    memset(d, 0, sizeof *d);
    d->type = type;
    d->max_def = md;
    d->max_rep = mr;
}
