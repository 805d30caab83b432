/* parquet_delta.c - parquet's DELTA encodings: DELTA_BINARY_PACKED (integers as a first value and
 * blocks of bit-packed deltas above a minimum), DELTA_LENGTH_BYTE_ARRAY (the strings' lengths delta
 * encoded, then their bytes end to end) and DELTA_BYTE_ARRAY (each string as a prefix shared with the
 * one before it plus a suffix). Every count, width and length is checked against the bytes left. */
#include "parquet_internal.h"

#include <stdarg.h>
#include <stdlib.h>

#define DELTA_MAX_BLOCK (1u << 20)

static int dfail(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int dfail(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int uvarint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

static uint64_t get_bits(const uint8_t *p, uint64_t bit, int w) {
    uint64_t v = 0;
    for (int got = 0; got < w;) {
        uint64_t b = bit + (uint64_t)got;
        int off = (int)(b & 7), take = 8 - off;
        if (take > w - got) take = w - got;
        v |= (uint64_t)((p[b >> 3] >> off) & ((1u << take) - 1)) << got;
        got += take;
    }
    return v;
}

int pq_delta_binary(const uint8_t *p, size_t len, size_t n, int64_t *out, size_t *used, char *msg, size_t cap) {
    const uint8_t *q = p, *end = p + len;
    uint64_t block, minis, total, first;
    if (uvarint(&q, end, &block) || uvarint(&q, end, &minis) || uvarint(&q, end, &total) || uvarint(&q, end, &first))
        return dfail(msg, cap, "expected a DELTA_BINARY_PACKED header, found the end of the page or a bad varint");
    if (block == 0 || block > DELTA_MAX_BLOCK || minis == 0 || block % minis || (block / minis) % 8)
        return dfail(msg, cap, "expected a DELTA_BINARY_PACKED block of at most %u values in miniblocks of a multiple of 8, found %llu values in %llu miniblocks",
                     DELTA_MAX_BLOCK, (unsigned long long)block, (unsigned long long)minis);
    if (total != n)
        return dfail(msg, cap, "expected %zu DELTA_BINARY_PACKED values, found a header of %llu", n, (unsigned long long)total);
    uint64_t vpm = block / minis, cur = (first >> 1) ^ -(first & 1);
    size_t i = 0;
    if (n) out[i++] = (int64_t)cur;
    while (i < n) {
        uint64_t zmin;
        if (uvarint(&q, end, &zmin)) return dfail(msg, cap, "expected a block's minimum delta, found the end of the page");
        uint64_t min_delta = (zmin >> 1) ^ -(zmin & 1);
        if ((uint64_t)(end - q) < minis) return dfail(msg, cap, "expected %llu miniblock bit widths, found the end of the page", (unsigned long long)minis);
        const uint8_t *widths = q;
        q += minis;
        for (uint64_t m = 0; m < minis && i < n; m++) {
            int w = widths[m];
            if (w > 64) return dfail(msg, cap, "expected a miniblock bit width of at most 64, found %d", w);
            uint64_t k = n - i < vpm ? n - i : vpm, need = (k * (uint64_t)w + 7) / 8, full = vpm * (uint64_t)w / 8;
            if ((uint64_t)(end - q) < need)
                return dfail(msg, cap, "expected a miniblock of %llu bytes, found %zu", (unsigned long long)need, (size_t)(end - q));
            for (uint64_t j = 0; j < k; j++) {
                cur += min_delta + get_bits(q, j * (uint64_t)w, w);
                out[i++] = (int64_t)cur;
            }
            q += full < (uint64_t)(end - q) ? full : (uint64_t)(end - q);
        }
    }
    *used = (size_t)(q - p);
    return 0;
}

int pq_delta_length(const uint8_t *p, size_t len, size_t n, PqStr *out, size_t *used, char *msg, size_t cap) {
    int64_t *lens = malloc((n ? n : 1) * sizeof *lens);
    if (!lens) return dfail(msg, cap, "memory for %zu string lengths", n);
    size_t hdr = 0;
    if (pq_delta_binary(p, len, n, lens, &hdr, msg, cap)) {
        free(lens);
        return -1;
    }
    size_t pos = hdr;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] < 0 || (uint64_t)lens[i] > len - pos || lens[i] > (int64_t)UINT32_MAX) {
            int rc = dfail(msg, cap, "expected string %zu's %lld bytes within the page, found %zu", i, (long long)lens[i], len - pos);
            free(lens);
            return rc;
        }
        out[i].s = (const char *)p + pos;
        out[i].len = (uint32_t)lens[i];
        pos += (size_t)lens[i];
    }
    free(lens);
    *used = pos;
    return 0;
}

int pq_delta_byte_array(const uint8_t *p, size_t len, size_t n, PqStr *out, uint8_t **buf, size_t max_bytes, char *msg,
                        size_t cap) {
    *buf = NULL;
    int64_t *pre = malloc((n ? n : 1) * sizeof *pre);
    if (!pre) return dfail(msg, cap, "memory for %zu prefix lengths", n);
    size_t hdr = 0, used = 0;
    if (pq_delta_binary(p, len, n, pre, &hdr, msg, cap) || pq_delta_length(p + hdr, len - hdr, n, out, &used, msg, cap)) {
        free(pre);
        return -1;
    }
    /* the strings' total size first, then each built from the one before */
    uint64_t total = 0, prev = 0;
    for (size_t i = 0; i < n; i++) {
        if (pre[i] < 0 || (uint64_t)pre[i] > prev) {
            int rc = dfail(msg, cap, "expected string %zu's prefix length within the %llu bytes before it, found %lld", i,
                           (unsigned long long)prev, (long long)pre[i]);
            free(pre);
            return rc;
        }
        prev = (uint64_t)pre[i] + out[i].len;
        total += prev;
        if (prev > UINT32_MAX || total > max_bytes) {
            int rc = dfail(msg, cap, "expected DELTA_BYTE_ARRAY strings of at most %zu bytes in all, found more", max_bytes);
            free(pre);
            return rc;
        }
    }
    uint8_t *b = malloc(total ? total : 1);
    if (!b) {
        free(pre);
        return dfail(msg, cap, "memory for %llu bytes of strings", (unsigned long long)total);
    }
    size_t at = 0;
    const uint8_t *last = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t pl = (size_t)pre[i];
        if (pl) memcpy(b + at, last, pl);
        if (out[i].len) memcpy(b + at + pl, out[i].s, out[i].len);
        out[i].s = (const char *)b + at;
        out[i].len += (uint32_t)pl;
        last = b + at;
        at += out[i].len;
    }
    free(pre);
    *buf = b;
    return 0;
}
