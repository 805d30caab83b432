/* test_safetensors.c - round trips, an independent writer, and hostile files. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "safetensors.h"

static char g_dir[64];

static void st_setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/gt_st_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void st_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    cr_assert_eq(system(cmd), 0);
}

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

/* the independent writer: a header string as given (not padded unless the caller pads), a
 * declared length (or -1 for the header's real length), then raw data bytes */
static void write_raw(const char *path, const char *header, long long declared_len,
                      const void *data, size_t data_len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t len = declared_len < 0 ? (uint64_t)strlen(header) : (uint64_t)declared_len;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(len >> (8 * i));
    cr_assert_eq(fwrite(lb, 1, 8, f), 8u);
    cr_assert_eq(fwrite(header, 1, strlen(header), f), strlen(header));
    if (data_len) cr_assert_eq(fwrite(data, 1, data_len, f), data_len);
    cr_assert_eq(fclose(f), 0);
}

TestSuite(safetensors, .init = st_setup, .fini = st_teardown);

Test(safetensors, bf16_f16_conversions) {
    cr_assert_eq(gt_f32_to_bf16(1.0f), 0x3F80);
    cr_assert_eq(gt_f32_to_bf16(-2.0f), 0xC000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (down) */
    cr_assert_eq(gt_f32_to_bf16(1.0f + 0.00390625f), 0x3F80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even (up) */
    cr_assert_eq(gt_f32_to_bf16(1.0f + 3 * 0.00390625f), 0x3F82);
    /* just above half rounds up */
    cr_assert_eq(gt_f32_to_bf16(1.0f + 0.00390625f + 1e-6f), 0x3F81);
    cr_assert_eq(gt_f32_to_bf16(INFINITY), 0x7F80);
    cr_assert(isnan(gt_bf16_to_f32(gt_f32_to_bf16(NAN))));
    /* a NaN whose payload is only in the low bits must not become inf */
    uint32_t nanbits = 0x7F800001u;
    float lownan;
    memcpy(&lownan, &nanbits, 4);
    cr_assert(isnan(gt_bf16_to_f32(gt_f32_to_bf16(lownan))));
    cr_assert_eq(gt_bf16_to_f32(0x3F80), 1.0f);
    cr_assert_eq(st_f16_to_f32(0x3C00), 1.0f);
    cr_assert_eq(st_f16_to_f32(0xC000), -2.0f);
    cr_assert_eq(st_f16_to_f32(0x3800), 0.5f);
    cr_assert_eq(st_f16_to_f32(0x7BFF), 65504.0f);
    cr_assert_eq(st_f16_to_f32(0x0001), ldexpf(1.0f, -24));
    cr_assert_eq(st_f16_to_f32(0x83FF), -1023.0f * ldexpf(1.0f, -24));
    cr_assert_eq(st_f16_to_f32(0x0400), ldexpf(1.0f, -14));
    cr_assert(isinf(st_f16_to_f32(0x7C00)) && st_f16_to_f32(0xFC00) < 0);
    cr_assert(isnan(st_f16_to_f32(0x7E00)));
    cr_assert(signbit(st_f16_to_f32(0x8000)));
}

Test(safetensors, roundtrip_f32_bf16) {
    char path[128];
    path_in(path, sizeof path, "model.safetensors");
    float a[6] = {1.5f, -2.25f, 3.0f, 1e-30f, 65536.0f, -0.0f};
    float s = 42.0f;
    float bsrc[5] = {0.1f, -0.2f, 3.14159f, 1e10f, -7.0f};
    uint16_t b[5];
    for (int i = 0; i < 5; i++) b[i] = gt_f32_to_bf16(bsrc[i]);
    StTensorOut ts[4] = {
        {.name = "h.0.attn.c_attn.weight", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "scalar", .dtype = ST_F32, .ndim = 0, .data = &s},
        {.name = "empty", .dtype = ST_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "we\"ird\\name\n", .dtype = ST_BF16, .ndim = 1, .shape = {5}, .data = b},
    };
    const char *meta[] = {"format", "pt", "gtrain", "1 \"quoted\""};
    GtError err = {0};
    cr_assert_eq(safetensors_write(path, ts, 4, meta, 2, &err), 0, "%s", err.msg);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_neq(access(tmp, F_OK), 0, "temporary file left behind");

    /* header length is a multiple of 8 */
    FILE *f = fopen(path, "rb");
    unsigned char lb[8];
    cr_assert_eq(fread(lb, 1, 8, f), 8u);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | lb[i];
    cr_assert_eq(hl % 8, 0u);

    SafeTensors *st = NULL;
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    cr_assert_eq(safetensors_count(st), 4);
    cr_assert_str_eq(safetensors_metadata(st, "format"), "pt");
    cr_assert_str_eq(safetensors_metadata(st, "gtrain"), "1 \"quoted\"");
    cr_assert_null(safetensors_metadata(st, "nope"));
    cr_assert_eq(safetensors_find(st, "missing"), -1);
    cr_assert_null(safetensors_name(st, 4));

    int i = safetensors_find(st, "h.0.attn.c_attn.weight");
    cr_assert_geq(i, 0);
    int64_t shape[4];
    int nd;
    cr_assert_eq(safetensors_shape(st, i, shape, &nd), 0);
    cr_assert_eq(nd, 2);
    cr_assert_eq(shape[0], 2);
    cr_assert_eq(shape[1], 3);
    cr_assert_eq(safetensors_dtype(st, i), ST_F32);
    float got[6];
    cr_assert_eq(safetensors_read_f32(st, i, got, 6, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(got, a, sizeof a), 0);
    /* wrong element count */
    cr_assert_eq(safetensors_read_f32(st, i, got, 5, &err), -1);
    cr_assert(strstr(err.msg, "h.0.attn.c_attn.weight") != NULL, "%s", err.msg);

    i = safetensors_find(st, "scalar");
    cr_assert_eq(safetensors_shape(st, i, shape, &nd), 0);
    cr_assert_eq(nd, 0);
    cr_assert_eq(safetensors_numel(st, i), 1);
    float gs = 0;
    cr_assert_eq(safetensors_read_f32(st, i, &gs, 1, &err), 0);
    cr_assert_eq(gs, 42.0f);

    i = safetensors_find(st, "empty");
    cr_assert_eq(safetensors_numel(st, i), 0);
    cr_assert_eq(safetensors_read_f32(st, i, got, 0, &err), 0);

    i = safetensors_find(st, "we\"ird\\name\n");
    cr_assert_geq(i, 0);
    cr_assert_eq(safetensors_dtype(st, i), ST_BF16);
    float gb[5];
    cr_assert_eq(safetensors_read_f32(st, i, gb, 5, &err), 0);
    for (int k = 0; k < 5; k++) {
        cr_assert_eq(gb[k], gt_bf16_to_f32(b[k]));
        cr_assert(fabsf(gb[k] - bsrc[k]) <= fabsf(bsrc[k]) * (1.0f / 256));
    }
    safetensors_close(st);

    /* overwrite in place works */
    cr_assert_eq(safetensors_write(path, ts, 1, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    cr_assert_eq(safetensors_count(st), 1);
    cr_assert_null(safetensors_metadata(st, "format"));
    safetensors_close(st);
}

Test(safetensors, big_tensor_chunked_bf16) {
    char path[128];
    path_in(path, sizeof path, "big.safetensors");
    size_t n = 100003; /* more than one conversion chunk */
    uint16_t *b = malloc(n * 2);
    cr_assert_not_null(b);
    for (size_t k = 0; k < n; k++) b[k] = gt_f32_to_bf16((float)k);
    StTensorOut t = {.name = "w", .dtype = ST_BF16, .ndim = 1, .shape = {(int64_t)n}, .data = b};
    GtError err = {0};
    cr_assert_eq(safetensors_write(path, &t, 1, NULL, 0, &err), 0, "%s", err.msg);
    SafeTensors *st;
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    float *d = malloc(n * 4);
    cr_assert_not_null(d);
    cr_assert_eq(safetensors_read_f32(st, 0, d, n, &err), 0, "%s", err.msg);
    for (size_t k = 0; k < n; k++) cr_assert_eq(d[k], gt_bf16_to_f32(b[k]));
    safetensors_close(st);
    free(d);
    free(b);
}

/* a file assembled by hand: HF-like header with spaces, unordered offsets, three dtypes */
Test(safetensors, independent_writer) {
    char path[128];
    path_in(path, sizeof path, "hand.safetensors");
    unsigned char data[4 * 3 + 2 * 2 + 2 * 2];
    float f[3] = {1.0f, 2.5f, NAN};
    uint16_t h16[2] = {0x3C00, 0xC000};  /* 1, -2 */
    uint16_t bf[2] = {0x3F80, 0x4049};   /* 1, 3.140625 */
    /* layout: bf at 0..4, f32 at 4..16, f16 at 16..20 */
    memcpy(data, bf, 4);
    memcpy(data + 4, f, 12);
    memcpy(data + 16, h16, 4);
    const char *hdr =
        "{\"__metadata__\": {\"format\": \"pt\"}, "
        "\"wte\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [4, 16]}, "
        "\"b\": {\"dtype\": \"F16\", \"shape\": [1, 2], \"data_offsets\": [16, 20]}, "
        "\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 1], \"data_offsets\": [0, 4]}}       ";
    write_raw(path, hdr, -1, data, sizeof data);
    SafeTensors *st;
    GtError err = {0};
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    cr_assert_eq(safetensors_count(st), 3);
    cr_assert_str_eq(safetensors_name(st, 0), "wte");
    cr_assert_str_eq(safetensors_metadata(st, "format"), "pt");
    float out[3];
    cr_assert_eq(safetensors_read_f32(st, safetensors_find(st, "wte"), out, 3, &err), 0);
    cr_assert_eq(out[0], 1.0f);
    cr_assert_eq(out[1], 2.5f);
    cr_assert(isnan(out[2])); /* NaN is not an open/read error: the caller warns */
    cr_assert_eq(safetensors_read_f32(st, safetensors_find(st, "b"), out, 2, &err), 0);
    cr_assert_eq(out[0], 1.0f);
    cr_assert_eq(out[1], -2.0f);
    cr_assert_eq(safetensors_dtype(st, safetensors_find(st, "b")), ST_F16);
    cr_assert_eq(safetensors_read_f32(st, safetensors_find(st, "a"), out, 2, &err), 0);
    cr_assert_eq(out[0], 1.0f);
    cr_assert_eq(out[1], 3.140625f);
    safetensors_close(st);
}

/* open must fail with a one-line error naming the file (and the tensor, when given) */
static void expect_reject(const char *path, const char *tensor, const char *what) {
    SafeTensors *st = (SafeTensors *)0x1;
    GtError err = {0};
    int rc = safetensors_open(&st, path, &err);
    cr_assert_eq(rc, -1, "accepted a bad file (%s)", what);
    cr_assert_null(st);
    cr_assert_eq(err.code, GT_EXIT_BAD_INPUT, "%s: code %d: %s", what, err.code, err.msg);
    cr_assert(strstr(err.msg, path) == err.msg, "%s: no file name: %s", what, err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    if (tensor) cr_assert(strstr(err.msg, tensor) != NULL, "%s: no tensor name: %s", what, err.msg);
    if (what) cr_assert(strstr(err.msg, what) != NULL, "expected '%s' in: %s", what, err.msg);
}

static void hostile(const char *hdr, long long declared, size_t data_len, const char *tensor,
                    const char *what) {
    char path[128];
    path_in(path, sizeof path, "bad.safetensors");
    unsigned char data[64] = {0};
    cr_assert_leq(data_len, sizeof data);
    write_raw(path, hdr, declared, data, data_len);
    expect_reject(path, tensor, what);
}

#define T1(dt, shape, offs) "{\"w\": {\"dtype\": " dt ", \"shape\": " shape ", \"data_offsets\": " offs "}}"

Test(safetensors, hostile_headers) {
    /* sanity: the template is fine as it is */
    char path[128];
    path_in(path, sizeof path, "good.safetensors");
    unsigned char d16[16] = {0};
    write_raw(path, T1("\"F32\"", "[2, 2]", "[0, 16]"), -1, d16, 16);
    SafeTensors *st;
    GtError err;
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    safetensors_close(st);

    hostile(T1("\"F32\"", "[2, 2]", "[0, 16]"), 1000, 16, NULL, "header length");   /* beyond file */
    hostile(T1("\"F32\"", "[2, 2]", "[0, 16]"), 1LL << 62, 16, NULL, "header length"); /* huge */
    hostile(T1("\"F32\"", "[2, 2]", "[0, 16]"), 0, 16, NULL, "header length");
    hostile(T1("\"F32\"", "[2, 2]", "[0, 32]"), -1, 16, "w", "data_offsets"); /* out of range */
    hostile(T1("\"F32\"", "[2, 2]", "[16, 0]"), -1, 16, "w", "data_offsets"); /* begin > end */
    hostile(T1("\"F32\"", "[2, 2]", "[0]"), -1, 16, "w", "data_offsets");
    hostile(T1("\"F32\"", "[2, 2]", "[0, -16]"), -1, 16, "w", "data_offsets");
    hostile(T1("\"F32\"", "[2, 2]", "[0, 16.5]"), -1, 16, "w", "data_offsets");
    hostile(T1("\"F32\"", "[2, 2]", "\"0,16\""), -1, 16, "w", "data_offsets");
    hostile(T1("\"F32\"", "[2, 3]", "[0, 16]"), -1, 16, "w", "bytes");       /* shape/bytes */
    hostile(T1("\"BF16\"", "[2, 2]", "[0, 16]"), -1, 16, "w", "bytes");      /* dtype/bytes */
    hostile(T1("\"I64\"", "[2]", "[0, 16]"), -1, 16, "w", "dtype");          /* unknown dtype */
    hostile(T1("32", "[4]", "[0, 16]"), -1, 16, "w", "dtype");
    hostile("{\"w\": {\"shape\": [4], \"data_offsets\": [0, 16]}}", -1, 16, "w", "dtype");
    hostile(T1("\"F32\"", "[-4]", "[0, 16]"), -1, 16, "w", "shape");         /* negative dim */
    hostile(T1("\"F32\"", "[2.5]", "[0, 16]"), -1, 16, "w", "shape");
    hostile(T1("\"F32\"", "4", "[0, 16]"), -1, 16, "w", "shape");
    hostile(T1("\"F32\"", "[1, 1, 1, 1, 4]", "[0, 16]"), -1, 16, "w", "dimensions");
    hostile(T1("\"F32\"", "[4294967296, 4294967296, 4294967296]", "[0, 16]"), -1, 16, "w",
            "overflow");
    hostile(T1("\"F32\"", "[0, 4294967296, 4294967296, 4294967296]", "[0, 16]"), -1, 16, "w",
            "bytes");
    hostile(T1("\"F32\"", "[1e300]", "[0, 16]"), -1, 16, "w", "shape");
    hostile("{\"w\": [1, 2, 3]}", -1, 16, "w", "expected an object");       /* entry not object */
    hostile("{\"w\": 5}", -1, 16, "w", "expected an object");
    hostile("[1, 2, 3]", -1, 16, NULL, "expected a JSON object");           /* not an object */
    hostile("\"just a string\"", -1, 16, NULL, "expected a JSON object");
    hostile("{\"w\": {\"dtype\": \"F32\", ", -1, 16, NULL, "JSON");         /* broken JSON */
    hostile("{} garbage", -1, 16, NULL, "after the JSON");
    hostile("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
            "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
            -1, 16, "b", "overlapping");
    hostile("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
            "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
            -1, 16, "a", "overlapping");
    hostile("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
            "\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
            -1, 16, "a", "twice");                                          /* duplicate */
    /* a NUL in a name or string would cut it short ("w\u0000x" passing for "w"): refused */
    hostile("{\"w\\u0000x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", -1, 16, NULL,
            "NUL");
    hostile(T1("\"F32\\u0000x\"", "[4]", "[0, 16]"), -1, 16, NULL, "NUL");
    hostile("{\"__metadata__\": {\"format\": \"pt\\u0000\"}}", -1, 0, NULL, "NUL");
    hostile("{\"__metadata__\": {\"k\": 1}}", -1, 0, NULL, "__metadata__");
    hostile("{\"__metadata__\": [\"k\"]}", -1, 0, NULL, "__metadata__");

    {   /* an escaped backslash followed by "u0000" is a name with a backslash, not a NUL */
        path_in(path, sizeof path, "bs.safetensors");
        float z[4] = {0};
        write_raw(path, "{\"w\\\\u0000\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", -1, z, 16);
        SafeTensors *bs = NULL;
        GtError e2 = {0};
        cr_assert_eq(safetensors_open(&bs, path, &e2), 0, "%s", e2.msg);
        cr_assert_str_eq(safetensors_name(bs, 0), "w\\u0000");
        safetensors_close(bs);
    }
    /* empty tensors may share an offset; a header with spaces only after the object is fine */
    path_in(path, sizeof path, "ok2.safetensors");
    write_raw(path,
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 8]}, "
              "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}   ",
              -1, d16, 16);
    cr_assert_eq(safetensors_open(&st, path, &err), 0, "%s", err.msg);
    safetensors_close(st);
}

Test(safetensors, truncated_and_tiny_files) {
    char path[128];
    path_in(path, sizeof path, "trunc.safetensors");
    float a[16];
    for (int i = 0; i < 16; i++) a[i] = (float)i;
    StTensorOut t = {.name = "h.1.mlp.c_fc.weight", .dtype = ST_F32, .ndim = 2, .shape = {4, 4}, .data = a};
    GtError err;
    cr_assert_eq(safetensors_write(path, &t, 1, NULL, 0, &err), 0, "%s", err.msg);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    /* cut into the data: the tensor's offsets now go past the end */
    cr_assert_eq(truncate(path, sb.st_size - 4), 0);
    expect_reject(path, "h.1.mlp.c_fc.weight", "data_offsets");
    /* cut into the header */
    cr_assert_eq(truncate(path, 20), 0);
    expect_reject(path, NULL, "header length");
    /* shorter than the length field */
    cr_assert_eq(truncate(path, 5), 0);
    expect_reject(path, NULL, "8 bytes");
    cr_assert_eq(truncate(path, 0), 0);
    expect_reject(path, NULL, "8 bytes");
    /* missing file */
    path_in(path, sizeof path, "nope.safetensors");
    expect_reject(path, NULL, "cannot open");
    /* a directory */
    expect_reject(g_dir, NULL, "regular file");
}

/* Only regular files are read: a FIFO without a writer must not block the open (the timeout
 * catches a hang), a device never ends, a socket or directory is no file. */
Test(safetensors, special_files_refused_without_blocking, .timeout = 10) {
    char path[128];
    path_in(path, sizeof path, "fifo.safetensors");
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_reject(path, NULL, "FIFO");
    path_in(path, sizeof path, "zero.safetensors");
    cr_assert_eq(symlink("/dev/zero", path), 0);
    expect_reject(path, NULL, "character device");
    expect_reject("/dev/null", NULL, "character device");
    path_in(path, sizeof path, "sock.safetensors");
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    expect_reject(path, NULL, NULL); /* open(2) itself fails on a socket (ENXIO): named, code 2 */
    close(fd);
    /* a checkpoint-style directory whose model.safetensors is a FIFO */
    path_in(path, sizeof path, "ck");
    cr_assert_eq(mkdir(path, 0755), 0);
    path_in(path, sizeof path, "ck/model.safetensors");
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_reject(path, NULL, "regular file");
}

Test(safetensors, write_rejects_bad_arguments) {
    char path[128];
    path_in(path, sizeof path, "w.safetensors");
    float a[2] = {1, 2};
    StTensorOut ts[2] = {
        {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = a},
        {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = a},
    };
    GtError err;
    cr_assert_eq(safetensors_write(path, ts, 2, NULL, 0, &err), -1);
    cr_assert(strstr(err.msg, "twice") != NULL);
    ts[1].name = "y";
    ts[1].shape[0] = -1;
    cr_assert_eq(safetensors_write(path, ts, 2, NULL, 0, &err), -1);
    ts[1].shape[0] = 2;
    ts[1].data = NULL;
    cr_assert_eq(safetensors_write(path, ts, 2, NULL, 0, &err), -1);
    cr_assert_neq(access(path, F_OK), 0);
    /* unwritable directory */
    cr_assert_eq(safetensors_write("/nonexistent-dir/x.safetensors", ts, 1, NULL, 0, &err), -1);
    cr_assert(strstr(err.msg, "/nonexistent-dir/x.safetensors") != NULL);
}
