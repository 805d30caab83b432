/* data_json.c - a JSON array of objects (e.g. MetaMathQA-395K.json) as data, streamed: the file is
 * read in bounded chunks, each element's text is found by a scan and handed to the record
 * converter (data_build_object in data_jsonl.c), then dropped. Memory holds the element being read
 * and the examples' tokens, never the whole file text. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_internal.h"

#define JSON_CHUNK ((size_t)1 << 20) /* bytes read at a time; the window grows only for a larger element */

typedef struct {
    int fd;           /* -1: the whole text is buf[0 .. end) already */
    const char *name;
    char *buf;        /* the window: file bytes [base, base + end); owned when fd >= 0 */
    size_t cap, end;
    uint64_t base;
    bool eof;
} JReader;

/* Drop the window's bytes before keep, then read until the window is full or the file ends.
 * 0, or -1 on a read error. */
static int jr_more(JReader *r, size_t *keep, GtError *err) {
    if (r->fd < 0 || r->eof) {
        r->eof = true;
        return 0;
    }
    if (*keep > 0) {
        memmove(r->buf, r->buf + *keep, r->end - *keep);
        r->end -= *keep;
        r->base += *keep;
        *keep = 0;
    }
    if (r->end == r->cap) { /* an element larger than the window: grow it */
        size_t cap = r->cap ? r->cap * 2 : JSON_CHUNK;
        char *nb = realloc(r->buf, cap);
        if (!nb) return gt_error(err, GT_EXIT_FAILURE, "%s: out of host memory reading a JSON element", r->name);
        r->buf = nb;
        r->cap = cap;
    }
    while (r->end < r->cap) {
        ssize_t got = read(r->fd, r->buf + r->end, r->cap - r->end);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return gt_error(err, GT_EXIT_FAILURE, "%s: read error at byte offset %llu: %s", r->name,
                            (unsigned long long)(r->base + r->end), strerror(errno));
        if (got == 0) {
            r->eof = true;
            break;
        }
        r->end += (size_t)got;
    }
    return 0;
}

/* Skip whitespace from *at (reading on as needed); 0 with *at on the next byte, 1 at the end of the
 * file, -1 on a read error. */
static int jr_skip_ws(JReader *r, size_t *at, size_t *keep, GtError *err) {
    *keep = *at; /* nothing before here is needed again */
    for (;;) {
        while (*at < r->end && (unsigned char)r->buf[*at] <= 0x20) (*at)++;
        if (*at < r->end) return 0;
        if (r->eof) return 1;
        size_t k = *keep;
        if (jr_more(r, keep, err) != 0) return -1;
        *at -= k - *keep;
    }
}

static int jr_expected(const JReader *r, size_t at, const char *what, GtError *err) {
    char found[32];
    if (at >= r->end)
        snprintf(found, sizeof found, "the end of the file");
    else if ((unsigned char)r->buf[at] >= 0x21 && (unsigned char)r->buf[at] < 0x7F)
        snprintf(found, sizeof found, "'%c'", r->buf[at]);
    else
        snprintf(found, sizeof found, "byte 0x%02x", (unsigned char)r->buf[at]);
    return gt_error(err, GT_EXIT_BAD_INPUT, "%s: byte offset %llu: expected %s, found %s", r->name,
                    (unsigned long long)(r->base + at), what, found);
}

int data_json_build(DataSource *d, const char *name, int fd, const char *buf, size_t len, int split,
                    double val_fraction, const DataText *text, GtError *err) {
    JReader r = {.fd = fd, .name = name, .buf = fd < 0 ? (char *)buf : NULL, .end = fd < 0 ? len : 0, .eof = fd < 0};
    JsonlBuild *b = NULL;
    int rc = -1;
    size_t at = 0, keep = 0, row = 0;
    if (data_build_begin(&b, d, name, "element", text, err) != 0) goto out;
    if (jr_more(&r, &keep, err) != 0) goto out;
    if (r.end >= 3 && memcmp(r.buf, "\xEF\xBB\xBF", 3) == 0) at = 3; /* a UTF-8 BOM */
    int ws = jr_skip_ws(&r, &at, &keep, err);
    if (ws < 0) goto out;
    if (ws == 1) { /* nothing but whitespace */
        rc = data_build_finish(b, d, split, val_fraction, true, err);
        b = NULL;
        goto out;
    }
    if (r.buf[at] != '[') {
        jr_expected(&r, at, "'[' (a JSON array of objects)", err);
        goto out;
    }
    at++;
    for (bool first = true;; first = false) {
        if ((ws = jr_skip_ws(&r, &at, &keep, err)) < 0) goto out;
        if (ws == 0 && first && r.buf[at] == ']') {
            at++;
            break;
        }
        if (ws == 1) {
            jr_expected(&r, at, first ? "an object or ']'" : "an object", err);
            goto out;
        }
        /* one element: its end, reading on while it may be cut by the window's end */
        keep = at;
        const char *p;
        for (;;) {
            p = r.buf + at;
            int bad = data_json_skip(&p, r.buf + r.end);
            if ((bad == 0 && p < r.buf + r.end) || r.eof) {
                if (bad != 0) p = r.buf + r.end; /* malformed: cJSON names the place */
                break;
            }
            size_t k = keep;
            if (jr_more(&r, &keep, err) != 0) goto out;
            at -= k - keep;
        }
        size_t n = (size_t)(p - (r.buf + at));
        row++;
        if (data_build_object(b, r.buf + at, n, row, err) != 0) goto out;
        at += n;
        if ((ws = jr_skip_ws(&r, &at, &keep, err)) < 0) goto out;
        if (ws == 0 && r.buf[at] == ',') {
            at++;
            continue;
        }
        if (ws == 0 && r.buf[at] == ']') {
            at++;
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "',' or ']' after element %zu", row);
        jr_expected(&r, at, what, err);
        goto out;
    }
    if ((ws = jr_skip_ws(&r, &at, &keep, err)) < 0) goto out;
    if (ws == 0) {
        jr_expected(&r, at, "the end of the file after the array's ']'", err);
        goto out;
    }
    rc = data_build_finish(b, d, split, val_fraction, false, err);
    b = NULL;
out:
    data_build_free(b);
    if (fd >= 0) free(r.buf);
    return rc;
}
