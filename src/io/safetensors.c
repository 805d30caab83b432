/* safetensors.c - see safetensors.h. */
#include "safetensors.h"


#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define MAX_SAFE_INT 9007199254740992.0 /* 2^53: JSON numbers above are not exact integers */

typedef struct {
    const char *name; /* owned by the cJSON tree */
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* relative to the data buffer */
} StEntry;

struct SafeTensors {
    char *path;
    int fd;
    cJSON *root;
    const cJSON *meta; /* "__metadata__" object or NULL */
    uint64_t data_start; /* 8 + header length */
    uint64_t data_size;
    int n;
    StEntry *t;
};

/* ------------------------------------------------------------------ dtype + conversions */

const char *st_dtype_name(StDtype d) {
    switch (d) {
    case ST_F32: return "F32";
    case ST_BF16: return "BF16";
    case ST_F16: return "F16";
    case ST_U8: return "U8";
    }
    return "?";
}

size_t st_dtype_size(StDtype d) { return d == ST_F32 ? 4 : d == ST_U8 ? 1 : 2; }

static int dtype_from_name(const char *s, StDtype *out) {
    if (strcmp(s, "F32") == 0) *out = ST_F32;
    else if (strcmp(s, "BF16") == 0) *out = ST_BF16;
    else if (strcmp(s, "F16") == 0) *out = ST_F16;
    else if (strcmp(s, "U8") == 0) *out = ST_U8;
    else return -1;
    return 0;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u;     /* NaN */
    if (ax >= 0x47800000u) return sign | 0x7C00u;    /* >= 2^16 (and infinity): infinity */
    if (ax < 0x38800000u)                            /* below 2^-14: a multiple of 2^-24, exact scaling */
        return sign | (uint16_t)nearbyintf(bits_f32(ax) * 16777216.0f); /* 1024: the smallest normal */
    uint32_t h = ((ax >> 23) - 112u) << 10 | (ax & 0x7FFFFFu) >> 13, rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right, up to infinity */
    return sign | (uint16_t)h;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t u;
    if (exp == 0x1F) {
        u = sign | 0x7F800000u | (man << 13); /* inf / nan */
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
    } else if (man == 0) {
        u = sign; /* +-0 */
    } else {
        /* subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(u);
}

/* ------------------------------------------------------------------ small helpers */

static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* a short description of a JSON value for error messages */
static const char *describe(const cJSON *v, char *buf, size_t cap) {
    if (!v) snprintf(buf, cap, "nothing");
    else if (cJSON_IsString(v)) snprintf(buf, cap, "\"%.60s\"", v->valuestring);
    else if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, cap, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, cap, "an array of %d", cJSON_GetArraySize(v));
    else if (cJSON_IsObject(v)) snprintf(buf, cap, "an object");
    else snprintf(buf, cap, "an invalid value");
    return buf;
}

/* a non-negative integer JSON number, exactly representable */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > MAX_SAFE_INT || floor(d) != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ------------------------------------------------------------------ open */

typedef struct {
    uint64_t begin, end;
    int idx;
} Span;

static int cmp_span(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* validate one tensor entry into e; returns 0 or -1 with err filled */
static int parse_entry(const char *path, const cJSON *item, uint64_t data_size, StEntry *e,
                       GtError *err) {
    const char *name = item->string;
    char d1[96];
    e->name = name;
    if (!cJSON_IsObject(item))
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: expected an object {dtype, shape, data_offsets}, found %s",
                        path, name, describe(item, d1, sizeof d1));
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype) || dtype_from_name(dtype->valuestring, &e->dtype) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: dtype: expected \"F32\", \"BF16\", \"F16\" or \"U8\", found %s",
                        path, name, describe(dtype, d1, sizeof d1));
    if (!cJSON_IsArray(shape))
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: shape: expected an array of non-negative integers, found %s",
                        path, name, describe(shape, d1, sizeof d1));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: shape: expected at most %d dimensions, found %d", path,
                        name, ST_MAX_DIMS, ndim);
    e->ndim = ndim;
    uint64_t numel = 1;
    bool overflow = false;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        uint64_t v;
        if (json_u64(d, &v) != 0)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: tensor %.200s: shape[%d]: expected a non-negative integer, found %s",
                            path, name, k, describe(d, d1, sizeof d1));
        e->shape[k] = (int64_t)v;
        if (v != 0 && numel > UINT64_MAX / v) overflow = true;
        else numel *= v;
    }
    for (; k < ST_MAX_DIMS; k++) e->shape[k] = 0;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: data_offsets: expected [begin, end], found %s", path,
                        name, describe(offs, d1, sizeof d1));
    uint64_t b, en;
    if (json_u64(offs->child, &b) != 0 || json_u64(offs->child->next, &en) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: data_offsets: expected two non-negative integers, found %s and %s",
                        path, name, describe(offs->child, d1, sizeof d1),
                        describe(offs->child->next, (char[96]){0}, 96));
    if (b > en || en > data_size)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: data_offsets: expected begin <= end <= %llu (the data "
                        "size), found [%llu, %llu]",
                        path, name, (unsigned long long)data_size, (unsigned long long)b,
                        (unsigned long long)en);
    size_t es = st_dtype_size(e->dtype);
    if (overflow || numel > UINT64_MAX / es)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: shape: expected an element count that fits, found an "
                        "overflowing product",
                        path, name);
    if (numel * es != en - b)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: expected %llu bytes (%llu elements of %s), found "
                        "data_offsets [%llu, %llu] holding %llu bytes",
                        path, name, (unsigned long long)(numel * es), (unsigned long long)numel,
                        st_dtype_name(e->dtype), (unsigned long long)b, (unsigned long long)en,
                        (unsigned long long)(en - b));
    e->numel = (int64_t)numel;
    e->begin = b;
    e->end = en;
    return 0;
}

static int validate_metadata(const char *path, const cJSON *meta, GtError *err) {
    char d1[96];
    if (!cJSON_IsObject(meta))
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: __metadata__: expected an object of strings, found %s", path,
                        describe(meta, d1, sizeof d1));
    for (const cJSON *kv = meta->child; kv; kv = kv->next)
        if (!cJSON_IsString(kv))
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: __metadata__: key %.200s: expected a string, found %s", path,
                            kv->string, describe(kv, d1, sizeof d1));
    return 0;
}

static int parse_header(SafeTensors *st, const char *buf, size_t hlen, GtError *err) {
    const char *path = st->path;
    long nul = gt_json_nul_at(buf, hlen);
    if (nul >= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: header: expected names and strings without NUL characters, found one (\\u0000 or a 0 "
                        "byte) at byte %ld of %zu",
                        path, nul, hlen);
    const char *end = NULL;
    st->root = cJSON_ParseWithLengthOpts(buf, hlen, &end, 0);
    if (!st->root) {
        size_t at = (end && end >= buf && end <= buf + hlen) ? (size_t)(end - buf) : 0;
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: header: expected valid JSON, found an error at byte %zu of %zu", path,
                        at, hlen);
    }
    for (const char *p = end; p < buf + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: header: expected only spaces after the JSON object, found other "
                            "bytes at byte %zu of %zu",
                            path, (size_t)(p - buf), hlen);
    char d1[96];
    if (!cJSON_IsObject(st->root))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: header: expected a JSON object, found %s",
                        path, describe(st->root, d1, sizeof d1));

    int count = 0, n_keys = 0;
    for (const cJSON *c = st->root->child; c; c = c->next) {
        n_keys++;
        if (strcmp(c->string, "__metadata__") != 0) count++;
    }
    /* duplicate keys (cJSON keeps them): sort the names, compare neighbours */
    const char **names = gt_xcalloc((size_t)n_keys, sizeof *names);
    int k = 0;
    for (const cJSON *c = st->root->child; c; c = c->next) names[k++] = c->string;
    qsort(names, (size_t)n_keys, sizeof *names, cmp_name_ptr);
    for (int i = 1; i < n_keys; i++)
        if (strcmp(names[i], names[i - 1]) == 0) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: tensor %.200s: expected each name once, found it twice", path, names[i]);
            free(names);
            return -1;
        }
    free(names);

    st->t = gt_xcalloc((size_t)count, sizeof *st->t);
    st->n = 0;
    for (const cJSON *c = st->root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (validate_metadata(path, c, err) != 0) return -1;
            st->meta = c;
            continue;
        }
        if (parse_entry(path, c, st->data_size, &st->t[st->n], err) != 0) return -1;
        st->n++;
    }

    /* overlapping tensors: sort non-empty spans by begin */
    Span *sp = gt_xcalloc((size_t)st->n, sizeof *sp);
    int ns = 0;
    for (int i = 0; i < st->n; i++)
        if (st->t[i].end > st->t[i].begin) sp[ns++] = (Span){st->t[i].begin, st->t[i].end, i};
    qsort(sp, (size_t)ns, sizeof *sp, cmp_span);
    for (int i = 1; i < ns; i++)
        if (sp[i].begin < sp[i - 1].end) {
            const StEntry *a = &st->t[sp[i - 1].idx], *b = &st->t[sp[i].idx];
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: tensor %.200s: expected data not overlapping other tensors, found "
                     "[%llu, %llu] overlapping tensor %.200s [%llu, %llu]",
                     path, b->name, (unsigned long long)b->begin, (unsigned long long)b->end,
                     a->name, (unsigned long long)a->begin, (unsigned long long)a->end);
            free(sp);
            return -1;
        }
    free(sp);
    return 0;
}

int safetensors_open(SafeTensors **out, const char *path, GtError *err) {
    *out = NULL;
    SafeTensors *st = gt_xcalloc(1, sizeof *st);
    st->path = gt_xstrdup(path);
    char *buf = NULL;
    uint64_t fsize = 0;
    st->fd = gt_open_input(path, "safetensors file", &fsize, err); /* regular files only, never blocks */
    if (st->fd < 0) goto fail;
    if (fsize < 8) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: expected a safetensors file (at least 8 bytes), found %llu bytes", path,
                 (unsigned long long)fsize);
        goto fail;
    }
    unsigned char lenb[8];
    if (pread_full(st->fd, lenb, 8, 0) != 8) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot read the header length: %s", path,
                 errno ? strerror(errno) : "short read");
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenb[i];
    if (hlen > ST_MAX_HEADER_BYTES) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: header length: expected at most %u bytes, found %llu (corrupt, or not a "
                 "safetensors file)",
                 path, ST_MAX_HEADER_BYTES, (unsigned long long)hlen);
        goto fail;
    }
    if (hlen > fsize - 8) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: header length: expected at most %llu (the rest of the file), found %llu "
                 "(truncated or corrupt file)",
                 path, (unsigned long long)(fsize - 8), (unsigned long long)hlen);
        goto fail;
    }
    if (hlen < 2) {
        gt_error(err, GT_EXIT_BAD_INPUT,
                 "%s: header length: expected at least 2 bytes (a JSON object), found %llu", path,
                 (unsigned long long)hlen);
        goto fail;
    }
    buf = gt_xmalloc((size_t)hlen + 1);
    ssize_t got = pread_full(st->fd, buf, (size_t)hlen, 8);
    if (got != (ssize_t)hlen) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot read the %llu-byte header: %s", path,
                 (unsigned long long)hlen, got < 0 ? strerror(errno) : "short read");
        goto fail;
    }
    buf[hlen] = '\0';
    st->data_start = 8 + hlen;
    st->data_size = fsize - st->data_start;
    if (parse_header(st, buf, (size_t)hlen, err) != 0) goto fail;
    free(buf);
    *out = st;
    return 0;
fail:
    free(buf);
    safetensors_close(st);
    return -1;
}

void safetensors_close(SafeTensors *st) {
    if (!st) return;
    if (st->fd >= 0) close(st->fd);
    cJSON_Delete(st->root);
    free(st->t);
    free(st->path);
    free(st);
}

const char *safetensors_path(const SafeTensors *st) { return st->path; }
uint64_t safetensors_file_size(const SafeTensors *st) { return st->data_start + st->data_size; }
int safetensors_count(const SafeTensors *st) { return st->n; }

const char *safetensors_name(const SafeTensors *st, int i) {
    return (i >= 0 && i < st->n) ? st->t[i].name : NULL;
}

int safetensors_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->t[i].name, name) == 0) return i;
    return -1;
}

int safetensors_shape(const SafeTensors *st, int i, int64_t *shape, int *ndim) {
    if (i < 0 || i >= st->n) return -1;
    for (int k = 0; k < ST_MAX_DIMS; k++) shape[k] = st->t[i].shape[k];
    *ndim = st->t[i].ndim;
    return 0;
}

int64_t safetensors_numel(const SafeTensors *st, int i) {
    return (i >= 0 && i < st->n) ? st->t[i].numel : 0;
}

StDtype safetensors_dtype(const SafeTensors *st, int i) {
    return (i >= 0 && i < st->n) ? st->t[i].dtype : ST_F32;
}

const char *safetensors_metadata(const SafeTensors *st, const char *key) {
    if (!st->meta) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st->meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int safetensors_read_f32_range(const SafeTensors *st, int i, uint64_t elem_offset, size_t n, float *dst,
                                GtError *err) {
    if (i < 0 || i >= st->n)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)",
                        st->path, i, st->n);
    const StEntry *e = &st->t[i];
    const uint64_t numel = (uint64_t)e->numel;
    if (elem_offset > numel || (uint64_t)n > numel - elem_offset)
        return gt_error(err, GT_EXIT_FAILURE,
                        "%s: tensor %.200s: expected elements within [0, %llu), asked for [%llu, %llu + %zu)",
                        st->path, e->name, (unsigned long long)numel, (unsigned long long)elem_offset,
                        (unsigned long long)elem_offset, n);
    if (e->dtype == ST_U8)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %.200s: dtype: expected \"F32\", \"BF16\" or \"F16\" (a weight "
                        "read as numbers), found \"U8\"", st->path, e->name);
    /* in bounds of the tensor, so in bounds of the validated data buffer */
    const size_t es = st_dtype_size(e->dtype);
    const uint64_t off = st->data_start + e->begin + elem_offset * es;
    if (e->dtype == ST_F32) {
        ssize_t r = pread_full(st->fd, dst, n * 4, off);
        if (r != (ssize_t)(n * 4))
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: tensor %.200s: expected %zu bytes at offset %llu, found %s",
                            st->path, e->name, n * 4, (unsigned long long)off,
                            r < 0 ? strerror(errno) : "the file ended early (it changed?)");
        return 0;
    }
    enum { CHUNK = 8192 };
    uint16_t tmp[CHUNK];
    for (size_t done = 0; done < n;) {
        size_t m = n - done < CHUNK ? n - done : CHUNK;
        ssize_t r = pread_full(st->fd, tmp, m * 2, off + done * 2);
        if (r != (ssize_t)(m * 2))
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: tensor %.200s: expected %zu bytes at offset %llu, found %s",
                            st->path, e->name, m * 2, (unsigned long long)(off + done * 2),
                            r < 0 ? strerror(errno) : "the file ended early (it changed?)");
        if (e->dtype == ST_BF16)
            for (size_t j = 0; j < m; j++) dst[done + j] = gt_bf16_to_f32(tmp[j]);
        else
            for (size_t j = 0; j < m; j++) dst[done + j] = st_f16_to_f32(tmp[j]);
        done += m;
    }
    return 0;
}

int safetensors_read_bytes(const SafeTensors *st, int i, uint64_t byte_offset, size_t len, void *dst, GtError *err) {
    if (i < 0 || i >= st->n)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)", st->path, i, st->n);
    const StEntry *e = &st->t[i];
    const uint64_t size = e->end - e->begin;
    if (byte_offset > size || (uint64_t)len > size - byte_offset)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: expected bytes within [0, %llu), asked for [%llu, %llu + %zu)",
                        st->path, e->name, (unsigned long long)size, (unsigned long long)byte_offset,
                        (unsigned long long)byte_offset, len);
    const uint64_t off = st->data_start + e->begin + byte_offset;
    ssize_t r = pread_full(st->fd, dst, len, off);
    if (r != (ssize_t)len)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: tensor %.200s: expected %zu bytes at offset %llu, found %s", st->path,
                        e->name, len, (unsigned long long)off, r < 0 ? strerror(errno) : "the file ended early (it changed?)");
    return 0;
}

int safetensors_read_f32(const SafeTensors *st, int i, float *dst, size_t n, GtError *err) {
    if (i < 0 || i >= st->n)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d out of range [0, %d)",
                        st->path, i, st->n);
    const StEntry *e = &st->t[i];
    if ((uint64_t)e->numel != (uint64_t)n)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: tensor %.200s: expected %zu elements, found %lld", st->path, e->name,
                        n, (long long)e->numel);
    return safetensors_read_f32_range(st, i, 0, n, dst, err);
}

/* ------------------------------------------------------------------ write */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = gt_xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_puts(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_json_string(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            buf_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            buf_put(b, esc, 6);
        } else {
            buf_put(b, (const char *)p, 1);
        }
    }
    buf_put(b, "\"", 1);
}

static void fsync_parent_dir(const char *path) {
    char dir[GT_PATH_MAX];
    gt_parent_dir(dir, sizeof dir, path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some filesystems refuse directory fsync */
        close(fd);
    }
}

struct StWriter {
    char *path, *tmp;
    FILE *f;
    uint64_t total, done; /* data bytes the header declares, and put so far */
    bool failed, closed, committed;
};

/* Validate the tensors (names, dtypes, shapes, duplicates) and the metadata; sizes[i] = bytes of
 * tensor i, *total their sum. */
static int check_tensors(const char *path, const StTensorOut *tensors, int n, const char *const *meta_kv,
                         int n_meta, uint64_t *sizes, uint64_t *total, GtError *err) {
    if (n < 0 || n_meta < 0 || (n > 0 && !tensors) || (n_meta > 0 && !meta_kv))
        return gt_error(err, GT_EXIT_FAILURE, "%s: safetensors_write: bad arguments", path);
    *total = 0;
    for (int i = 0; i < n; i++) {
        const StTensorOut *t = &tensors[i];
        if (!t->name || strcmp(t->name, "__metadata__") == 0 || t->ndim < 0 ||
            t->ndim > ST_MAX_DIMS || (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16))
            return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: bad name, dtype or ndim %d",
                            path, t->name ? t->name : "(null)", t->ndim);
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            uint64_t d = (uint64_t)t->shape[k];
            if (t->shape[k] < 0 || (d != 0 && numel > (UINT64_MAX / 8) / d))
                return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: bad shape", path, t->name);
            numel *= d;
        }
        sizes[i] = numel * st_dtype_size(t->dtype);
        if (*total > UINT64_MAX - sizes[i]) return gt_error(err, GT_EXIT_FAILURE, "%s: tensors too large", path);
        *total += sizes[i];
    }
    const char **names = gt_xcalloc((size_t)n + 1, sizeof *names);
    for (int i = 0; i < n; i++) names[i] = tensors[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_name_ptr);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i], names[i - 1]) == 0) {
            gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: name given twice", path, names[i]);
            free(names);
            return -1;
        }
    free(names);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i]) return gt_error(err, GT_EXIT_FAILURE, "%s: metadata entry %d is NULL", path, i);
    return 0;
}

/* The header: __metadata__ first, then the tensors in the given order, contiguous; padded with
 * spaces to a multiple of 8 bytes. */
static void build_header(Buf *h, const StTensorOut *tensors, int n, const uint64_t *sizes,
                         const char *const *meta_kv, int n_meta) {
    char num[128];
    buf_puts(h, "{");
    bool first = true;
    if (n_meta > 0) {
        buf_puts(h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) buf_puts(h, ",");
            buf_json_string(h, meta_kv[2 * i]);
            buf_puts(h, ":");
            buf_json_string(h, meta_kv[2 * i + 1]);
        }
        buf_puts(h, "}");
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const StTensorOut *t = &tensors[i];
        if (!first) buf_puts(h, ",");
        first = false;
        buf_json_string(h, t->name);
        buf_puts(h, ":{\"dtype\":\"");
        buf_puts(h, st_dtype_name(t->dtype));
        buf_puts(h, "\",\"shape\":[");
        for (int k = 0; k < t->ndim; k++) {
            snprintf(num, sizeof num, "%s%lld", k ? "," : "", (long long)t->shape[k]);
            buf_puts(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + sizes[i]));
        buf_puts(h, num);
        off += sizes[i];
    }
    buf_puts(h, "}");
    while (h->len % 8 != 0) buf_puts(h, " ");
}

static int writer_fail(StWriter *w, GtError *err, int e) {
    w->failed = true;
    return gt_error(err, GT_EXIT_FAILURE, "%s: write failed: %s", w->tmp, strerror(e));
}

int st_writer_open(StWriter **out, const char *path, const StTensorOut *tensors, int n,
                   const char *const *meta_kv, int n_meta, GtError *err) {
    *out = NULL;
    uint64_t total = 0;
    uint64_t *sizes = gt_xcalloc((size_t)(n > 0 ? n : 0) + 1, sizeof *sizes);
    if (check_tensors(path, tensors, n, meta_kv, n_meta, sizes, &total, err) != 0) {
        free(sizes);
        return -1;
    }
    Buf h = {0};
    build_header(&h, tensors, n, sizes, meta_kv, n_meta);
    free(sizes);

    StWriter *w = gt_xcalloc(1, sizeof *w);
    size_t plen = strlen(path);
    w->path = gt_xstrdup(path);
    w->tmp = gt_xmalloc(plen + 5);
    memcpy(w->tmp, path, plen);
    memcpy(w->tmp + plen, ".tmp", 5);
    w->total = total;
    int fd = gt_open_for_write(w->tmp, O_WRONLY | O_CREAT | O_TRUNC); /* never through a link */
    w->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!w->f) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot create: %s", w->tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp);
        }
        free(h.p);
        free(w->path), free(w->tmp), free(w);
        return -1;
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(((uint64_t)h.len >> (8 * i)) & 0xFF);
    bool ok = fwrite(lenb, 1, 8, w->f) == 8 && fwrite(h.p, 1, h.len, w->f) == h.len;
    int e = errno;
    free(h.p);
    *out = w;
    if (!ok) {
        writer_fail(w, err, e);
        st_writer_free(w);
        *out = NULL;
        return -1;
    }
    return 0;
}

int st_writer_put(StWriter *w, const void *data, size_t len, GtError *err) {
    if (w->failed || w->closed)
        return gt_error(err, GT_EXIT_FAILURE, "%s: write after an error or after close", w->tmp);
    if (len > w->total - w->done) {
        w->failed = true;
        return gt_error(err, GT_EXIT_FAILURE, "%s: %llu more data bytes put than the header declares (%llu)",
                        w->tmp, (unsigned long long)(w->done + len - w->total), (unsigned long long)w->total);
    }
    if (len > 0 && fwrite(data, 1, len, w->f) != len) return writer_fail(w, err, errno);
    w->done += len;
    return 0;
}

int st_writer_close(StWriter *w, GtError *err) {
    if (w->failed || w->closed)
        return gt_error(err, GT_EXIT_FAILURE, "%s: close after an error or a second time", w->tmp);
    if (w->done != w->total) {
        w->failed = true;
        return gt_error(err, GT_EXIT_FAILURE, "%s: %llu data bytes put, the header declares %llu", w->tmp,
                        (unsigned long long)w->done, (unsigned long long)w->total);
    }
    bool ok = fflush(w->f) == 0 && fsync(fileno(w->f)) == 0;
    int e = errno;
    if (fclose(w->f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    w->f = NULL;
    if (!ok) return writer_fail(w, err, e);
    w->closed = true;
    return 0;
}

int st_writer_commit(StWriter *w, GtError *err) {
    if (w->failed || !w->closed || w->committed)
        return gt_error(err, GT_EXIT_FAILURE, "%s: commit before a successful close", w->tmp);
    if (rename(w->tmp, w->path) != 0) {
        w->failed = true;
        return gt_error(err, GT_EXIT_FAILURE, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
    }
    w->committed = true;
    fsync_parent_dir(w->path);
    return 0;
}

const char *st_writer_path(const StWriter *w) { return w->path; }

void st_writer_free(StWriter *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (!w->committed) unlink(w->tmp);
    free(w->path), free(w->tmp), free(w);
}

int safetensors_write(const char *path, const StTensorOut *tensors, int n,
                      const char *const *meta_kv, int n_meta, GtError *err) {
    if (n < 0 || n_meta < 0 || (n > 0 && !tensors) || (n_meta > 0 && !meta_kv))
        return gt_error(err, GT_EXIT_FAILURE, "%s: safetensors_write: bad arguments", path);
    for (int i = 0; i < n; i++) {
        const StTensorOut *t = &tensors[i];
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim && k < ST_MAX_DIMS; k++) numel *= t->shape[k] > 0 ? (uint64_t)t->shape[k] : 0;
        if (t->name && t->ndim >= 0 && t->ndim <= ST_MAX_DIMS && numel > 0 && !t->data)
            return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: no data", path, t->name);
    }
    StWriter *w = NULL;
    if (st_writer_open(&w, path, tensors, n, meta_kv, n_meta, err) != 0) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const StTensorOut *t = &tensors[i];
        uint64_t bytes = st_dtype_size(t->dtype);
        for (int k = 0; k < t->ndim; k++) bytes *= (uint64_t)t->shape[k]; /* checked by st_writer_open */
        if (bytes > SIZE_MAX) rc = gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: too large", path, t->name);
        else if (bytes > 0) rc = st_writer_put(w, t->data, (size_t)bytes, err);
    }
    if (rc == 0) rc = st_writer_close(w, err);
    if (rc == 0) rc = st_writer_commit(w, err);
    st_writer_free(w);
    return rc;
}
