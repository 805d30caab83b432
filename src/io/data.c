/* data.c - token sources (text bytes, llm.c shards; SFT jsonl is parsed in data_jsonl.c) and
 * deterministic sampling. See data.h for the formats, the split and the sampling rules. */
#define _POSIX_C_SOURCE 200809L
#include "data.h"
#include "data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---------------------------------------------------------------------------------------------
 * small helpers */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser (a bijection) */
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void swap16_if_big_endian(uint16_t *t, uint64_t n) {
    if (host_is_little_endian()) return;
    for (uint64_t i = 0; i < n; i++) t[i] = (uint16_t)((t[i] >> 8) | (t[i] << 8));
}

static void swap32_if_big_endian(int32_t *t, uint64_t n) {
    if (host_is_little_endian()) return;
    for (uint64_t i = 0; i < n; i++) t[i] = (int32_t)__builtin_bswap32((uint32_t)t[i]);
}

void *data_malloc(size_t bytes, const char *name, GtError *err) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        char b[32];
        gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory allocating %s", name,
                 gt_format_bytes(b, sizeof b, bytes));
    }
    return p;
}

/* grow *p (elements of elem bytes, capacity *cap) to hold at least need elements */
int data_grow(void **p, size_t *cap, size_t need, size_t elem, const char *name, GtError *err) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return gt_error(err, GT_EXIT_FAILURE, "%s: too large to hold in memory", name);
        ncap *= 2;
    }
    size_t bytes;
    if (!gt_mul_size(ncap, elem, &bytes)) return gt_error(err, GT_EXIT_FAILURE, "%s: too large to hold in memory", name);
    void *q = realloc(*p, bytes);
    if (!q) {
        char b[32];
        return gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory allocating %s", name,
                        gt_format_bytes(b, sizeof b, bytes));
    }
    *p = q;
    *cap = ncap;
    return 0;
}

/* Open a regular file for reading (never blocks on a FIFO, see infile.h); *size = its size. */
static FILE *open_regular(const char *path, uint64_t *size, GtError *err) {
    int fd = gt_open_input(path, "data file", size, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot open data file: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

static int read_exact(FILE *f, void *dst, size_t bytes, const char *path, uint64_t offset, GtError *err) {
    size_t got = fread(dst, 1, bytes, f);
    if (got != bytes) {
        if (ferror(f))
            return gt_error(err, GT_EXIT_FAILURE, "%s: read error at byte offset %llu: %s", path,
                            (unsigned long long)(offset + got), strerror(errno));
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: file ended at byte offset %llu, expected %zu more bytes (file changed while reading?)",
                        path, (unsigned long long)(offset + got), bytes - got);
    }
    return 0;
}

const char *data_split_name(int split) {
    return split == DATA_SPLIT_TRAIN ? "train split" : split == DATA_SPLIT_VAL ? "val split" : "data";
}

/* [first, first+count) of n items for the split */
void data_split_range(uint64_t n, int split, double val_fraction, uint64_t *first, uint64_t *count) {
    if (split == DATA_SPLIT_ALL) {
        *first = 0;
        *count = n;
        return;
    }
    double t = floor((double)n * (1.0 - val_fraction));
    uint64_t n_train = t <= 0 ? 0 : t >= (double)n ? n : (uint64_t)t;
    if (split == DATA_SPLIT_TRAIN) {
        *first = 0;
        *count = n_train;
    } else {
        *first = n_train;
        *count = n - n_train;
    }
}

static int check_window_count(const char *name, uint64_t n, int seq_len, int split, double val_fraction,
                              GtError *err) {
    if (n >= (uint64_t)seq_len + 1) return 0;
    if (split == DATA_SPLIT_ALL)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: holds %llu tokens, expected at least seq_len+1 = %d for one window", name,
                        (unsigned long long)n, seq_len + 1);
    return gt_error(err, GT_EXIT_BAD_INPUT,
                    "%s: the %s (val_fraction %g) holds %llu tokens, expected at least seq_len+1 = %d for one window",
                    name, data_split_name(split), val_fraction, (unsigned long long)n, seq_len + 1);
}

/* ---------------------------------------------------------------------------------------------
 * text */

/* text through a tokenizer: the whole file is one document (BOS as the post-processor adds it).
 * Does not take buf. */
static int text_tokenize(DataSource *d, const char *name, const uint8_t *buf, size_t len, const Tokenizer *tok,
                         GtError *err) {
    TokEncoder *e = tok_encoder_new(tok);
    TokIds ids = {0};
    int rc = tok_encode(e, name, (const char *)buf, len, true, &ids, err);
    tok_encoder_free(e);
    for (size_t i = 0; rc == 0 && i < ids.n; i++)
        if (ids.ids[i] >= d->vocab_size)
            rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: token %zu: the tokenizer gives id %d, >= the model's vocab_size %d",
                          name, i, ids.ids[i], d->vocab_size);
    if (rc != 0) {
        tok_ids_free(&ids);
        return -1;
    }
    d->base32 = ids.ids;
    d->n = ids.n;
    if (ids.n == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: holds no tokens, expected text", name);
    return 0;
}

/* takes ownership of buf */
static int text_build(DataSource *d, const char *name, uint8_t *buf, size_t len, int split, double val_fraction,
                      const DataText *text, GtError *err) {
    d->base8 = buf;
    if (len == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: is empty, expected text", name);
    uint64_t first, count;
    if (text && text->tok) {
        if (text_tokenize(d, name, buf, len, text->tok, err) != 0) return -1;
        free(d->base8);
        d->base8 = NULL;
        data_split_range(d->n, split, val_fraction, &first, &count);
        if (check_window_count(name, count, d->seq_len, split, val_fraction, err) != 0) return -1;
        d->i32 = d->base32 + first;
        d->n = count;
        return 0;
    }
    if (d->vocab_size < 256) {
        for (size_t i = 0; i < len; i++)
            if (buf[i] >= d->vocab_size)
                return gt_error(err, GT_EXIT_BAD_INPUT,
                                "%s: byte offset %zu: byte value %u is >= vocab_size %d (format text needs vocab_size >= 256)",
                                name, i, (unsigned)buf[i], d->vocab_size);
    }
    data_split_range(len, split, val_fraction, &first, &count);
    if (check_window_count(name, count, d->seq_len, split, val_fraction, err) != 0) return -1;
    d->u8 = buf + first;
    d->n = count;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * token shards */

/* What a shard's header says: its layout's token width and its token count. */
typedef struct {
    int width; /* 2: GPT-2's uint16 layout, 4: Llama-3's uint32 layout */
    uint32_t count;
} ShardInfo;

static const char *layout_name(int width) { return width == 4 ? "Llama-3 uint32" : "GPT-2 uint16"; }

/* Validate a shard header against the real size of its file. */
static int shard_check_header(const char *name, const uint8_t *hdr, uint64_t file_size, ShardInfo *info,
                              GtError *err) {
    if (file_size < DATA_SHARD_HEADER_BYTES)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: truncated shard: %llu bytes, expected at least the %d-byte llm.c header", name,
                        (unsigned long long)file_size, DATA_SHARD_HEADER_BYTES);
    int32_t magic = (int32_t)le32(hdr), version = (int32_t)le32(hdr + 4), c = (int32_t)le32(hdr + 8);
    int width;
    if (magic == DATA_SHARD_MAGIC) {
        width = 2;
        if (version != DATA_SHARD_VERSION)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: shard version %d, expected %d (magic %d: llm.c's GPT-2 layout, uint16 tokens)", name,
                            version, DATA_SHARD_VERSION, DATA_SHARD_MAGIC);
    } else if (magic == DATA_SHARD_MAGIC_U32) {
        width = 4;
        if (version != DATA_SHARD_VERSION_U32)
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: shard version %d, expected %d (magic %d: llm.c's Llama-3 layout, uint32 tokens)", name,
                            version, DATA_SHARD_VERSION_U32, DATA_SHARD_MAGIC_U32);
    } else {
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: wrong magic %d in the shard header, expected %d (an llm.c token shard, uint16) or %d "
                        "(llm.c's Llama-3 layout, uint32)", name, magic, DATA_SHARD_MAGIC, DATA_SHARD_MAGIC_U32);
    }
    if (c < 0)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: token count %d in the shard header is negative, expected 1..%d", name, c, INT32_MAX);
    uint64_t expect = DATA_SHARD_HEADER_BYTES + (uint64_t)width * (uint64_t)c;
    if (expect > file_size)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: truncated shard: header says %d tokens (%llu bytes as %s), the file has %llu bytes", name,
                        c, (unsigned long long)expect, layout_name(width), (unsigned long long)file_size);
    if (expect < file_size)
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "%s: oversized shard: header says %d tokens (%llu bytes as %s), the file has %llu bytes", name,
                        c, (unsigned long long)expect, layout_name(width), (unsigned long long)file_size);
    if (c == 0) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: shard holds no tokens (header count 0)", name);
    info->width = width;
    info->count = (uint32_t)c;
    return 0;
}

static int token_beyond_vocab(const char *name, uint32_t token, uint32_t i, int width, int vocab_size, GtError *err) {
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: token %u at position %u (byte offset %llu) is >= vocab_size %d", name,
                    (unsigned)token, i, (unsigned long long)(DATA_SHARD_HEADER_BYTES + (uint64_t)width * i),
                    vocab_size);
}

static int shard_check_vocab16(const char *name, const uint16_t *t, uint32_t count, int vocab_size, GtError *err) {
    if (vocab_size > UINT16_MAX) return 0;
    for (uint32_t i = 0; i < count; i++)
        if (t[i] >= vocab_size) return token_beyond_vocab(name, t[i], i, 2, vocab_size, err);
    return 0;
}

/* t holds the shard's uint32 tokens as int32 bits: one >= 2^31 reads as negative, hence the casts */
static int shard_check_vocab32(const char *name, const int32_t *t, uint32_t count, int vocab_size, GtError *err) {
    for (uint32_t i = 0; i < count; i++)
        if ((uint32_t)t[i] >= (uint32_t)vocab_size) return token_beyond_vocab(name, (uint32_t)t[i], i, 4, vocab_size, err);
    return 0;
}

/* A shard's tokens (little-endian, already read into dst, count of them): host order, checked
 * against the vocabulary. */
static int shard_tokens_ready(DataSource *d, const char *name, uint64_t at, uint32_t count, GtError *err) {
    if (d->base32) {
        swap32_if_big_endian(d->base32 + at, count);
        return shard_check_vocab32(name, d->base32 + at, count, d->vocab_size, err);
    }
    swap16_if_big_endian(d->base16 + at, count);
    return shard_check_vocab16(name, d->base16 + at, count, d->vocab_size, err);
}

/* Room for total tokens of the given width (base16 or base32), or an error naming name. */
static int shard_alloc(DataSource *d, const char *name, uint64_t total, int width, GtError *err) {
    size_t bytes;
    if (total > SIZE_MAX / 4 || !gt_mul_size((size_t)total, (size_t)width, &bytes))
        return gt_error(err, GT_EXIT_FAILURE, "%s: %llu tokens are too many to hold in memory", name,
                        (unsigned long long)total);
    void *p = data_malloc(bytes, name, err);
    if (!p) return -1;
    if (width == 4)
        d->base32 = p;
    else
        d->base16 = p;
    return 0;
}

/* The split's view of the loaded tokens. */
static int shard_set_split(DataSource *d, const char *name, uint64_t total, int split, double val_fraction,
                           GtError *err) {
    uint64_t first, count;
    data_split_range(total, split, val_fraction, &first, &count);
    if (check_window_count(name, count, d->seq_len, split, val_fraction, err) != 0) return -1;
    if (d->base32)
        d->i32 = d->base32 + first;
    else
        d->u16 = d->base16 + first;
    d->n = count;
    return 0;
}

static bool has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

static int tokens_open_files(DataSource *d, const char *path, int split, double val_fraction, GtError *err) {
    glob_t g;
    memset(&g, 0, sizeof g);
    const char *single[1] = {path};
    const char *const *paths = single;
    size_t n_paths = 1;
    bool globbed = false;
    if (has_glob_chars(path)) {
        int rc = glob(path, 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            globfree(&g);
            /* maybe a literal name with glob characters */
            struct stat st;
            if (stat(path, &st) != 0)
                return gt_error(err, GT_EXIT_BAD_INPUT, "%s: no token shard matches this path or glob", path);
        } else if (rc != 0) {
            globfree(&g);
            return gt_error(err, GT_EXIT_FAILURE, "%s: cannot expand the glob (%s)", path,
                            rc == GLOB_NOSPACE ? "out of memory" : "read error");
        } else {
            globbed = true;
            paths = (const char *const *)g.gl_pathv;
            n_paths = g.gl_pathc;
        }
    }

    int rc = -1;
    ShardInfo *info = calloc(n_paths, sizeof *info);
    if (!info) {
        gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory", path);
        goto done;
    }
    /* pass 1: every header against its file's real size; one layout for all of them */
    uint64_t total = 0;
    for (size_t i = 0; i < n_paths; i++) {
        uint64_t size;
        FILE *f = open_regular(paths[i], &size, err);
        if (!f) goto done;
        uint8_t hdr[DATA_SHARD_HEADER_BYTES] = {0};
        int r = 0;
        if (size >= DATA_SHARD_HEADER_BYTES) r = read_exact(f, hdr, sizeof hdr, paths[i], 0, err);
        fclose(f);
        if (r != 0 || shard_check_header(paths[i], hdr, size, &info[i], err) != 0) goto done;
        if (info[i].width != info[0].width) {
            gt_error(err, GT_EXIT_BAD_INPUT,
                     "%s: a %s shard among %s shards (%s is one), expected one layout for all the shards of %s",
                     paths[i], layout_name(info[i].width), layout_name(info[0].width), paths[0], path);
            goto done;
        }
        total += info[i].count;
    }
    const int width = info[0].width;
    if (shard_alloc(d, path, total, width, err) != 0) goto done;
    uint8_t *dst = width == 4 ? (uint8_t *)d->base32 : (uint8_t *)d->base16;
    /* pass 2: the tokens */
    uint64_t at = 0;
    for (size_t i = 0; i < n_paths; i++) {
        uint64_t size, bytes = (uint64_t)width * info[i].count;
        FILE *f = open_regular(paths[i], &size, err);
        if (!f) goto done;
        if (size != DATA_SHARD_HEADER_BYTES + bytes) {
            fclose(f);
            gt_error(err, GT_EXIT_BAD_INPUT, "%s: shard changed size while being read (%llu bytes now)", paths[i],
                     (unsigned long long)size);
            goto done;
        }
        int r = fseek(f, DATA_SHARD_HEADER_BYTES, SEEK_SET) != 0
                    ? gt_error(err, GT_EXIT_FAILURE, "%s: cannot seek: %s", paths[i], strerror(errno))
                    : read_exact(f, dst + at * (uint64_t)width, (size_t)bytes, paths[i], DATA_SHARD_HEADER_BYTES, err);
        fclose(f);
        if (r != 0 || shard_tokens_ready(d, paths[i], at, info[i].count, err) != 0) goto done;
        at += info[i].count;
    }
    rc = shard_set_split(d, path, total, split, val_fraction, err);
done:
    free(info);
    if (globbed) globfree(&g);
    return rc;
}

static int tokens_open_memory(DataSource *d, const char *name, const uint8_t *buf, size_t len, int split,
                              double val_fraction, GtError *err) {
    ShardInfo info;
    if (shard_check_header(name, buf, len, &info, err) != 0 || shard_alloc(d, name, info.count, info.width, err) != 0)
        return -1;
    memcpy(info.width == 4 ? (void *)d->base32 : (void *)d->base16, buf + DATA_SHARD_HEADER_BYTES,
           (size_t)info.count * (size_t)info.width);
    if (shard_tokens_ready(d, name, 0, info.count, err) != 0) return -1;
    return shard_set_split(d, name, info.count, split, val_fraction, err);
}

/* ---------------------------------------------------------------------------------------------
 * open / close */

DataFormat data_format_for_path(const char *path) {
    static const struct {
        const char *ext;
        DataFormat f;
    } by_ext[] = {{".jsonl", DATA_JSONL}, {".json", DATA_JSON}, {".parquet", DATA_PARQUET}, {".bin", DATA_TOKENS}};
    size_t n = path ? strlen(path) : 0;
    for (size_t i = 0; i < sizeof by_ext / sizeof by_ext[0]; i++) {
        size_t e = strlen(by_ext[i].ext);
        if (n > e && strcmp(path + n - e, by_ext[i].ext) == 0) return by_ext[i].f;
    }
    return DATA_TEXT;
}

static int check_args(const char *name, DataFormat format, int seq_len, int vocab_size, int split,
                      double val_fraction, GtError *err) {
    if (format != DATA_TEXT && format != DATA_TOKENS && format != DATA_JSONL && format != DATA_JSON &&
        format != DATA_PARQUET)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: unknown data format %d, expected text, tokens, jsonl, json or parquet",
                        name, (int)format);
    if (seq_len < 1 || seq_len >= INT32_MAX)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: seq_len %d, expected at least 1", name, seq_len);
    if (vocab_size < 1) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: vocab_size %d, expected at least 1", name, vocab_size);
    if (split != DATA_SPLIT_ALL && split != DATA_SPLIT_TRAIN && split != DATA_SPLIT_VAL)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: unknown split %d", name, split);
    if (split != DATA_SPLIT_ALL && !(val_fraction >= 0.0 && val_fraction <= 1.0))
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: val_fraction %g, expected a number in [0, 1]", name, val_fraction);
    return 0;
}

static DataSource *new_source(DataFormat format, int seq_len, int vocab_size) {
    DataSource *d = gt_xcalloc(1, sizeof *d);
    d->format = format == DATA_JSON || format == DATA_PARQUET ? DATA_JSONL : format; /* examples read as jsonl's */
    d->seq_len = seq_len;
    d->vocab_size = vocab_size;
    return d;
}

/* the examples of any source (jsonl, json, parquet: d->format DATA_JSONL) packed into rows when
 * packing (data_pack.c); the builders themselves keep every example as an unpacked row keeps it */
static int pack_if(DataSource *d, const char *name, bool packing, int rc, GtError *err) {
    return rc == 0 && packing && d->format == DATA_JSONL ? data_pack_build(d, name, err) : rc;
}

int data_open(DataSource **out, const char *path, DataFormat format, bool packing, int seq_len, int vocab_size,
              int split, double val_fraction, GtError *err) {
    return data_open_text(out, path, format, packing, seq_len, vocab_size, split, val_fraction, NULL, err);
}

int data_open_memory(DataSource **out, const char *name, const void *buf, size_t len, DataFormat format,
                     bool packing, int seq_len, int vocab_size, int split, double val_fraction, GtError *err) {
    return data_open_memory_text(out, name, buf, len, format, packing, seq_len, vocab_size, split, val_fraction, NULL,
                                 err);
}

int data_open_text(DataSource **out, const char *path, DataFormat format, bool packing, int seq_len, int vocab_size,
                   int split, double val_fraction, const DataText *text, GtError *err) {
    *out = NULL;
    if (!path || !*path) return gt_error(err, GT_EXIT_BAD_INPUT, "data: no data file given, expected a path");
    if (format == DATA_AUTO) format = data_format_for_path(path);
    if (check_args(path, format, seq_len, vocab_size, split, val_fraction, err) != 0) return -1;
    DataSource *d = new_source(format, seq_len, vocab_size);
    int rc;
    if (format == DATA_TOKENS) {
        rc = tokens_open_files(d, path, split, val_fraction, err);
    } else if (format == DATA_PARQUET) { /* a file or a glob, a row group at a time */
        rc = data_parquet_build(d, path, split, val_fraction, text, err);
    } else if (format == DATA_JSON) { /* streamed, a chunk at a time */
        uint64_t size;
        int fd = gt_open_input(path, "data file", &size, err);
        rc = fd < 0 ? -1 : data_json_build(d, path, fd, NULL, 0, split, val_fraction, text, err);
        if (fd >= 0) close(fd);
    } else {
        uint8_t *buf = NULL;
        size_t len = 0;
        rc = gt_read_input(path, "data file", UINT64_MAX, &buf, &len, err);
        if (rc == 0) {
            if (format == DATA_TEXT) {
                rc = text_build(d, path, buf, len, split, val_fraction, text, err); /* owns buf */
            } else {
                rc = data_jsonl_build(d, path, (const char *)buf, len, split, val_fraction, text, err);
                free(buf);
            }
        }
    }
    rc = pack_if(d, path, packing, rc, err);
    if (rc != 0) {
        data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

int data_open_memory_text(DataSource **out, const char *name, const void *buf, size_t len, DataFormat format,
                          bool packing, int seq_len, int vocab_size, int split, double val_fraction,
                          const DataText *text, GtError *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && len) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: no buffer", name);
    if (format == DATA_AUTO) format = data_format_for_path(name);
    if (check_args(name, format, seq_len, vocab_size, split, val_fraction, err) != 0) return -1;
    DataSource *d = new_source(format, seq_len, vocab_size);
    int rc;
    if (format == DATA_TOKENS) {
        rc = tokens_open_memory(d, name, buf, len, split, val_fraction, err);
    } else if (format == DATA_PARQUET) {
        rc = gt_error(err, GT_EXIT_BAD_INPUT, "%s: parquet is read from files only", name);
    } else if (format == DATA_JSON) {
        rc = data_json_build(d, name, -1, buf, len, split, val_fraction, text, err);
    } else if (format == DATA_TEXT) {
        uint8_t *copy = data_malloc(len, name, err);
        rc = -1;
        if (copy) {
            if (len) memcpy(copy, buf, len);
            rc = text_build(d, name, copy, len, split, val_fraction, text, err);
        }
    } else {
        rc = data_jsonl_build(d, name, buf ? buf : "", len, split, val_fraction, text, err);
    }
    rc = pack_if(d, name, packing, rc, err);
    if (rc != 0) {
        data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

void data_close(DataSource *d) {
    if (!d) return;
    free(d->base8);
    free(d->base16);
    free(d->base32);
    free(d->ex_tok);
    free(d->ex_off);
    free(d->ex_mask);
    free(d->ex_len);
    free(d->ex_text);
    free(d->ex_text_off);
    free(d->ex_text_len);
    free(d->pk_row_off);
    free(d->pk_ex);
    free(d);
}

uint64_t data_num_tokens(const DataSource *d) { return d->n; }

bool data_packed(const DataSource *d) { return d->pk_row_off != NULL; }

double data_rows_per_epoch(const DataSource *d) {
    if (d->pk_row_off) return (double)d->pk_rows;                     /* packed rows */
    if (d->format == DATA_JSONL) return (double)d->n; /* one example a row */
    return (double)d->n / (double)d->seq_len;                       /* a stream cut into windows */
}
DataFormat data_format(const DataSource *d) { return d->format; }
void data_stats(const DataSource *d, DataStats *s) {
    if (d->format == DATA_JSONL)
        *s = (DataStats){d->st_examples, d->st_tokens, d->st_tokens_full, d->st_truncated, d->st_no_target,
                         d->pk_rows, d->pk_used};
    else
        *s = (DataStats){0, d->n, d->n, 0, 0, 0, 0};
}
int data_seq_len(const DataSource *d) { return d->seq_len; }

/* ---------------------------------------------------------------------------------------------
 * rows */

static inline int tok_at(const DataSource *d, uint64_t i) {
    return d->u8 ? (int)d->u8[i] : d->u16 ? (int)d->u16[i] : (int)d->i32[i];
}

static void fill_window(const DataSource *d, uint64_t start, int *tokens, int *targets) {
    int T = d->seq_len;
    for (int t = 0; t < T; t++) {
        tokens[t] = tok_at(d, start + (uint64_t)t);
        targets[t] = tok_at(d, start + (uint64_t)t + 1);
    }
}

static void fill_example(const DataSource *d, uint64_t e, int *tokens, int *targets) {
    int T = d->seq_len;
    uint64_t k = d->ex_first + e;
    const int32_t *row = d->ex_tok + d->ex_off[k];
    const uint8_t *mask = d->ex_mask + d->ex_off[k];
    int32_t len = d->ex_len[k];
    for (int t = 0; t < T; t++) {
        tokens[t] = t < len ? row[t] : DATA_PAD_TOKEN;
        targets[t] = (t + 1 < len && mask[t + 1]) ? row[t + 1] : DATA_IGNORE_INDEX;
    }
}

static void fill_empty(int T, int *tokens, int *targets) {
    for (int t = 0; t < T; t++) {
        tokens[t] = DATA_PAD_TOKEN;
        targets[t] = DATA_IGNORE_INDEX;
    }
}

/* uniform in [0, range), range >= 1, from a hash (rejection: exactly uniform) */
static uint64_t uniform_below(uint64_t h, uint64_t range) {
    uint64_t thresh = (0 - range) % range; /* 2^64 mod range */
    while (h < thresh) h = mix64(h);
    return h % range;
}

/* A seeded bijection of [0, n): 4-round Feistel network on the smallest even bit width that
 * covers n, with cycle walking back into [0, n). */
static uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    if (bits & 1) bits++;
    int half = bits / 2;
    uint64_t mask = half >= 64 ? ~0ull : (1ull << half) - 1;
    uint64_t x = i;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (uint64_t r = 0; r < 4; r++) {
            uint64_t F = mix64(key ^ mix64(R ^ (r * 0xD6E8FEB86659FD93ull))) & mask;
            uint64_t nl = R;
            R = L ^ F;
            L = nl;
        }
        x = (L << half) | R;
    } while (x >= n);
    return x;
}

#define DOMAIN_WINDOWS 0x77696E646F777331ull /* "windows1" */
#define DOMAIN_EPOCHS 0x65706F6368733031ull  /* "epochs01" */

/* an unpacked row's (or window's) positions: 0 .. T-1 (a packed row's restart per example: data_pack.c) */
static void row_positions(int *positions, int T) {
    for (int t = 0; t < T; t++) positions[t] = t;
}

/* packed: rows as examples are (a seeded permutation per epoch, or file order) */
static void fill_packed_train(const DataSource *d, uint64_t seed, bool shuffle, long step, long effective_batch,
                              long first_row, int n_rows, int *tokens, int *targets, int *positions) {
    const int T = d->seq_len;
    const uint64_t ke = mix64(seed ^ DOMAIN_EPOCHS), n = d->pk_rows;
    for (int r = 0; r < n_rows; r++) {
        uint64_t g = (uint64_t)first_row + (uint64_t)r;
        uint64_t i = (uint64_t)step * (uint64_t)(effective_batch > 0 ? effective_batch : 1) + g; /* global row */
        size_t o = (size_t)r * (size_t)T;
        uint64_t row = shuffle ? permute_index(i % n, n, mix64(ke ^ mix64(i / n))) : i % n;
        data_pack_fill_row(d, row, tokens + o, targets + o, positions ? positions + o : NULL);
    }
}

void data_fill_train(const DataSource *d, uint64_t seed, bool shuffle, long step, long effective_batch,
                     long first_row, int n_rows, int *tokens, int *targets) {
    data_fill_train_pos(d, seed, shuffle, step, effective_batch, first_row, n_rows, tokens, targets, NULL);
}

void data_fill_train_pos(const DataSource *d, uint64_t seed, bool shuffle, long step, long effective_batch,
                         long first_row, int n_rows, int *tokens, int *targets, int *positions) {
    if (d->pk_row_off) {
        fill_packed_train(d, seed, shuffle, step, effective_batch, first_row, n_rows, tokens, targets, positions);
        return;
    }
    int T = d->seq_len;
    uint64_t ks = mix64(seed ^ DOMAIN_WINDOWS);
    uint64_t ke = mix64(seed ^ DOMAIN_EPOCHS);
    bool examples = d->format == DATA_JSONL;
    uint64_t per_epoch = examples ? d->n : (d->n - 1) / (uint64_t)T; /* rows in file order; >= 1 */
    for (int r = 0; r < n_rows; r++) {
        uint64_t g = (uint64_t)first_row + (uint64_t)r;
        uint64_t i = (uint64_t)step * (uint64_t)(effective_batch > 0 ? effective_batch : 1) + g; /* global row */
        int *tk = tokens + (size_t)r * (size_t)T, *tg = targets + (size_t)r * (size_t)T;
        if (!shuffle) {
            if (examples)
                fill_example(d, i % per_epoch, tk, tg);
            else
                fill_window(d, (i % per_epoch) * (uint64_t)T, tk, tg);
        } else if (examples) {
            uint64_t epoch = i / d->n;
            uint64_t key = mix64(ke ^ mix64(epoch));
            fill_example(d, permute_index(i % d->n, d->n, key), tk, tg);
        } else {
            uint64_t h = mix64(mix64(ks ^ (uint64_t)step) ^ g);
            fill_window(d, uniform_below(h, d->n - (uint64_t)T), tk, tg);
        }
        if (positions) row_positions(positions + (size_t)r * (size_t)T, T);
    }
}

long data_num_eval_windows(const DataSource *d) {
    if (d->pk_row_off) return (long)d->pk_rows;
    if (d->format == DATA_JSONL) return (long)d->n;
    return (long)((d->n - 1) / (uint64_t)d->seq_len);
}

void data_fill_eval(const DataSource *d, long first_window, int n_rows, int *tokens, int *targets) {
    data_fill_eval_pos(d, first_window, n_rows, tokens, targets, NULL);
}

void data_fill_eval_pos(const DataSource *d, long first_window, int n_rows, int *tokens, int *targets,
                        int *positions) {
    int T = d->seq_len;
    long nw = data_num_eval_windows(d);
    for (int r = 0; r < n_rows; r++) {
        long w = first_window + r;
        int *tk = tokens + (size_t)r * (size_t)T, *tg = targets + (size_t)r * (size_t)T;
        if (positions) row_positions(positions + (size_t)r * (size_t)T, T);
        if (w < 0 || w >= nw)
            fill_empty(T, tk, tg);
        else if (d->pk_row_off)
            data_pack_fill_row(d, (uint64_t)w, tk, tg, positions ? positions + (size_t)r * (size_t)T : NULL);
        else if (d->format == DATA_JSONL)
            fill_example(d, (uint64_t)w, tk, tg);
        else
            fill_window(d, (uint64_t)w * (uint64_t)T, tk, tg);
    }
}
