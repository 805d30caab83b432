/* test_tboard.c - CRC-32C vectors; the event file read back by an independent parser
 * (bitwise CRC, TFRecord framing, protobuf decoding). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tboard.h"

static char tb_dir[64];

static void tb_setup(void) {
    snprintf(tb_dir, sizeof tb_dir, "/tmp/gt_tboard_XXXXXX");
    cr_assert_not_null(mkdtemp(tb_dir));
}

static void tb_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tb_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(tboard, .init = tb_setup, .fini = tb_teardown);

/* independent CRC-32C: bit by bit, no table */
static uint32_t ref_crc32c(const unsigned char *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint32_t ref_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

Test(tboard, crc32c_vectors) {
    cr_assert_eq(tboard_crc32c("123456789", 9), 0xE3069283u);
    unsigned char z[32] = {0}, ff[32], inc[32];
    for (int i = 0; i < 32; i++) {
        ff[i] = 0xFF;
        inc[i] = (unsigned char)i;
    }
    cr_assert_eq(tboard_crc32c(z, 32), 0x8A9136AAu);
    cr_assert_eq(tboard_crc32c(ff, 32), 0x62A8AB43u);  /* RFC 3720 B.4 */
    cr_assert_eq(tboard_crc32c(inc, 32), 0x46DD794Eu); /* RFC 3720 B.4 */
    cr_assert_eq(tboard_crc32c("", 0), 0u);
    cr_assert_eq(ref_crc32c((const unsigned char *)"123456789", 9), 0xE3069283u);
    for (int n = 0; n < 32; n++) cr_assert_eq(tboard_crc32c(inc, (size_t)n), ref_crc32c(inc, (size_t)n));
    cr_assert_eq(tboard_masked_crc(0x12345678u), ref_mask(0x12345678u));
    cr_assert_eq(tboard_masked_crc(0u), 0xa282ead8u);
}

/* ---- a small protobuf reader ---- */
typedef struct {
    const unsigned char *p, *end;
} Rd;

static uint64_t rd_varint(Rd *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        cr_assert_lt(r->p, r->end, "varint runs off the end");
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    cr_assert_fail("varint too long");
    return 0;
}

static uint64_t rd_le(Rd *r, int n) {
    cr_assert_leq(n, r->end - r->p);
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

typedef struct {
    bool has_wall, has_step, has_version, has_summary;
    double wall;
    int64_t step;
    char version[64];
    int n_values;
    char tag[4][64];
    float value[4];
} Ev;

static void parse_value(Rd r, Ev *e) {
    int k = e->n_values++;
    cr_assert_lt(k, 4);
    bool has_tag = false, has_val = false;
    while (r.p < r.end) {
        uint64_t key = rd_varint(&r);
        if (key == ((1 << 3) | 2)) {
            uint64_t n = rd_varint(&r);
            cr_assert_leq(n, (uint64_t)(r.end - r.p));
            cr_assert_lt(n, sizeof e->tag[k]);
            memcpy(e->tag[k], r.p, n);
            e->tag[k][n] = '\0';
            r.p += n;
            has_tag = true;
        } else if (key == ((2 << 3) | 5)) {
            uint32_t u = (uint32_t)rd_le(&r, 4);
            memcpy(&e->value[k], &u, 4);
            has_val = true;
        } else {
            cr_assert_fail("unexpected Value field key %llu", (unsigned long long)key);
        }
    }
    cr_assert(has_tag && has_val);
}

static void parse_summary(Rd r, Ev *e) {
    while (r.p < r.end) {
        uint64_t key = rd_varint(&r);
        cr_assert_eq(key, (1 << 3) | 2, "Summary: unexpected key %llu", (unsigned long long)key);
        uint64_t n = rd_varint(&r);
        cr_assert_leq(n, (uint64_t)(r.end - r.p));
        parse_value((Rd){r.p, r.p + n}, e);
        r.p += n;
    }
}

static void parse_event(const unsigned char *p, size_t n, Ev *e) {
    memset(e, 0, sizeof *e);
    Rd r = {p, p + n};
    while (r.p < r.end) {
        uint64_t key = rd_varint(&r);
        switch (key) {
        case (1 << 3) | 1: {
            uint64_t u = rd_le(&r, 8);
            memcpy(&e->wall, &u, 8);
            e->has_wall = true;
            break;
        }
        case (2 << 3) | 0:
            e->step = (int64_t)rd_varint(&r);
            e->has_step = true;
            break;
        case (3 << 3) | 2: {
            uint64_t len = rd_varint(&r);
            cr_assert_leq(len, (uint64_t)(r.end - r.p));
            cr_assert_lt(len, sizeof e->version);
            memcpy(e->version, r.p, len);
            r.p += len;
            e->has_version = true;
            break;
        }
        case (5 << 3) | 2: {
            uint64_t len = rd_varint(&r);
            cr_assert_leq(len, (uint64_t)(r.end - r.p));
            parse_summary((Rd){r.p, r.p + len}, e);
            r.p += len;
            e->has_summary = true;
            break;
        }
        default:
            cr_assert_fail("unexpected Event field key %llu", (unsigned long long)key);
        }
    }
}

/* read all records of the file, checking framing and both CRCs */
static int read_events(const char *path, Ev *ev, int max) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    int n = 0;
    unsigned char head[12];
    size_t got;
    while ((got = fread(head, 1, 12, f)) == 12) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = (len << 8) | head[i];
        uint32_t hcrc = (uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 |
                        (uint32_t)head[11] << 24;
        cr_assert_eq(hcrc, ref_mask(ref_crc32c(head, 8)), "length CRC of record %d", n);
        cr_assert_lt(len, 1u << 20);
        unsigned char *data = malloc(len + 4);
        cr_assert_not_null(data);
        cr_assert_eq(fread(data, 1, len + 4, f), len + 4, "record %d truncated", n);
        uint32_t dcrc = (uint32_t)data[len] | (uint32_t)data[len + 1] << 8 |
                        (uint32_t)data[len + 2] << 16 | (uint32_t)data[len + 3] << 24;
        cr_assert_eq(dcrc, ref_mask(ref_crc32c(data, len)), "data CRC of record %d", n);
        cr_assert_lt(n, max);
        parse_event(data, len, &ev[n++]);
        free(data);
    }
    cr_assert_eq(got, 0u, "trailing bytes after the last record");
    fclose(f);
    return n;
}

static void find_event_file(char *out, size_t cap) {
    DIR *d = opendir(tb_dir);
    cr_assert_not_null(d);
    struct dirent *de;
    int found = 0;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(out, cap, "%s/%s", tb_dir, de->d_name);
            found++;
        }
    closedir(d);
    cr_assert_eq(found, 1);
}

Test(tboard, event_file_reads_back) {
    TBoard *tb = NULL;
    GtError err = {0};
    cr_assert_eq(tboard_open(&tb, tb_dir, &err), 0, "%s", err.msg);
    double t0 = tboard_wall_time();
    cr_assert_eq(tboard_scalar(tb, "train/loss", 1, t0, 2.5f), 0);
    cr_assert_eq(tboard_scalar(tb, "train/lr", 300, t0 + 1.5, 3e-4f), 0);
    cr_assert_eq(tboard_scalar(tb, "eval/loss", 1234567890123L, t0 + 2, -1.0e-20f), 0);
    cr_assert_eq(tboard_scalar(tb, "odd tag/ü", -3, t0 + 3, NAN), 0);
    char path[512];
    snprintf(path, sizeof path, "%s", tboard_path(tb));
    tboard_close(tb);

    char found[512];
    find_event_file(found, sizeof found);
    cr_assert_str_eq(found, path);
    cr_assert(strstr(path, "events.out.tfevents.") != NULL);

    Ev ev[8];
    int n = read_events(path, ev, 8);
    cr_assert_eq(n, 5);
    cr_assert(ev[0].has_version && ev[0].has_wall && !ev[0].has_summary);
    cr_assert_str_eq(ev[0].version, "brain.Event:2");
    cr_assert(fabs(ev[0].wall - t0) < 60);

    cr_assert(ev[1].has_summary && ev[1].has_step && !ev[1].has_version);
    cr_assert_eq(ev[1].wall, t0);
    cr_assert_eq(ev[1].step, 1);
    cr_assert_eq(ev[1].n_values, 1);
    cr_assert_str_eq(ev[1].tag[0], "train/loss");
    cr_assert_eq(ev[1].value[0], 2.5f);

    cr_assert_eq(ev[2].wall, t0 + 1.5);
    cr_assert_eq(ev[2].step, 300);
    cr_assert_str_eq(ev[2].tag[0], "train/lr");
    cr_assert_eq(ev[2].value[0], 3e-4f);

    cr_assert_eq(ev[3].step, 1234567890123LL);
    cr_assert_str_eq(ev[3].tag[0], "eval/loss");
    cr_assert_eq(ev[3].value[0], -1.0e-20f);

    cr_assert_eq(ev[4].step, -3);
    cr_assert_str_eq(ev[4].tag[0], "odd tag/ü");
    cr_assert(isnan(ev[4].value[0]));
}

Test(tboard, two_writers_get_two_files_and_bad_dir_fails) {
    TBoard *a = NULL, *b = NULL;
    GtError err = {0};
    cr_assert_eq(tboard_open(&a, tb_dir, &err), 0, "%s", err.msg);
    cr_assert_eq(tboard_open(&b, tb_dir, &err), 0, "%s", err.msg);
    cr_assert_str_neq(tboard_path(a), tboard_path(b));
    cr_assert_eq(tboard_scalar(a, "x", 1, 1.0, 1.0f), 0);
    cr_assert_eq(tboard_scalar(b, "x", 1, 1.0, 2.0f), 0);
    Ev ev[4];
    char pa[512];
    snprintf(pa, sizeof pa, "%s", tboard_path(a));
    tboard_close(a);
    tboard_close(b);
    cr_assert_eq(read_events(pa, ev, 4), 2);
    cr_assert_eq(ev[1].value[0], 1.0f);
    TBoard *c = (TBoard *)0x1;
    cr_assert_eq(tboard_open(&c, "/nonexistent-dir/tb", &err), -1);
    cr_assert_null(c);
    cr_assert(strstr(err.msg, "/nonexistent-dir/tb") != NULL, "%s", err.msg);
    tboard_close(NULL);
}
