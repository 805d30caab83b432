/* data_shard_writer.c - writing llm.c token shards (GPT-2's uint16 layout and Llama-3's uint32
 * one, see data.h), streamed through a temporary file that is renamed into place when complete. */
#define _POSIX_C_SOURCE 200809L
#include "data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WRITER_BUFFER_BYTES (1u << 16)

struct DataShardWriter {
    char path[GT_PATH_MAX];
    char tmp[GT_PATH_MAX + 32]; /* path.tmp.<pid>-XXXXXX: a killed writer's is recognised by its pid */
    int fd;
    int tmp_slot; /* gt_tmp_register's: removed on an exit that skips abort (out of memory, a second signal) */
    int width; /* bytes a token: 2 or 4 */
    uint64_t count;
    bool failed;
    size_t buffered;
    uint8_t buf[WRITER_BUFFER_BYTES];
};

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_error(DataShardWriter *w, GtError *err) {
    w->failed = true;
    return gt_error(err, GT_EXIT_FAILURE, "%s: cannot write the shard: %s", w->path, strerror(errno));
}

static int flush_buffer(DataShardWriter *w, GtError *err) {
    if (w->buffered && write_all(w->fd, w->buf, w->buffered) != 0) return write_error(w, err);
    w->buffered = 0;
    return 0;
}

int data_shard_writer_open(DataShardWriter **out, const char *path, DataShardLayout layout, GtError *err) {
    *out = NULL;
    if (!path || !*path) return gt_error(err, GT_EXIT_BAD_INPUT, "no shard path given, expected a path");
    if (layout != DATA_SHARD_U16 && layout != DATA_SHARD_U32)
        return gt_error(err, GT_EXIT_FAILURE, "%s: shard layout %d, expected uint16 or uint32", path, (int)layout);
    DataShardWriter *w = gt_xmalloc(sizeof *w);
    memset(w, 0, offsetof(DataShardWriter, buf));
    w->tmp_slot = -1;
    if ((size_t)snprintf(w->path, sizeof w->path, "%s", path) >= sizeof w->path ||
        (size_t)snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld-XXXXXX", path, (long)getpid()) >= sizeof w->tmp) {
        free(w);
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: path too long (at most %d bytes)", path, GT_PATH_MAX - 1);
    }
    w->fd = mkstemp(w->tmp);
    if (w->fd < 0) {
        gt_error(err, GT_EXIT_FAILURE, "%s: cannot create a temporary file: %s", path, strerror(errno));
        free(w);
        return -1;
    }
    w->tmp_slot = gt_tmp_register(w->tmp, false);
    w->width = layout == DATA_SHARD_U32 ? 4 : 2;
    /* mkstemp's 0600 would keep a shard from the other users who train on it */
    uint8_t hdr[DATA_SHARD_HEADER_BYTES] = {0}; /* the real header comes at commit, with the count */
    if (fchmod(w->fd, 0644) != 0 || write_all(w->fd, hdr, sizeof hdr) != 0) {
        write_error(w, err);
        data_shard_writer_abort(w);
        return -1;
    }
    *out = w;
    return 0;
}

int data_shard_writer_append(DataShardWriter *w, const uint32_t *tokens, size_t n, GtError *err) {
    if (w->failed) return gt_error(err, GT_EXIT_FAILURE, "%s: the shard writer failed earlier", w->path);
    if (n > DATA_SHARD_MAX_TOKENS - w->count) {
        w->failed = true;
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: more than %d tokens, too many for one llm.c shard", w->path,
                        DATA_SHARD_MAX_TOKENS);
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t t = tokens[i];
        if (w->width == 2 && t > UINT16_MAX) {
            w->failed = true;
            return gt_error(err, GT_EXIT_BAD_INPUT,
                            "%s: token %u at position %llu does not fit the uint16 layout (GPT-2's; ids < 65536)",
                            w->path, (unsigned)t, (unsigned long long)(w->count + i));
        }
        if (w->buffered + 4 > sizeof w->buf && flush_buffer(w, err) != 0) return -1;
        uint8_t *p = w->buf + w->buffered;
        p[0] = (uint8_t)t;
        p[1] = (uint8_t)(t >> 8);
        if (w->width == 4) {
            p[2] = (uint8_t)(t >> 16);
            p[3] = (uint8_t)(t >> 24);
        }
        w->buffered += (size_t)w->width;
    }
    w->count += n;
    return 0;
}

uint64_t data_shard_writer_count(const DataShardWriter *w) { return w->count; }

int data_shard_writer_commit(DataShardWriter *w, GtError *err) {
    if (w->failed) {
        gt_error(err, GT_EXIT_FAILURE, "%s: the shard writer failed earlier", w->path);
        data_shard_writer_abort(w);
        return -1;
    }
    uint8_t hdr[12];
    put_le32(hdr, w->width == 4 ? DATA_SHARD_MAGIC_U32 : DATA_SHARD_MAGIC);
    put_le32(hdr + 4, w->width == 4 ? DATA_SHARD_VERSION_U32 : DATA_SHARD_VERSION);
    put_le32(hdr + 8, (uint32_t)w->count);
    int bad = flush_buffer(w, err);
    if (!bad) {
        ssize_t put;
        do put = pwrite(w->fd, hdr, sizeof hdr, 0);
        while (put < 0 && errno == EINTR);
        bad = put == (ssize_t)sizeof hdr && fsync(w->fd) == 0 ? 0 : write_error(w, err);
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0 && !bad) bad = write_error(w, err);
    if (!bad && rename(w->tmp, w->path) != 0) bad = write_error(w, err);
    if (bad) {
        data_shard_writer_abort(w);
        return -1;
    }
    gt_tmp_forget(w->tmp_slot);
    free(w);
    return 0;
}

void data_shard_writer_abort(DataShardWriter *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    gt_tmp_forget(w->tmp_slot);
    free(w);
}

int data_write_token_shard(const char *path, const uint32_t *tokens, size_t n, DataShardLayout layout,
                           GtError *err) {
    if (n > DATA_SHARD_MAX_TOKENS)
        return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %zu tokens do not fit an llm.c shard (at most %d)", path, n,
                        DATA_SHARD_MAX_TOKENS);
    if (layout == DATA_SHARD_AUTO) {
        layout = DATA_SHARD_U16;
        for (size_t i = 0; i < n && layout == DATA_SHARD_U16; i++)
            if (tokens[i] > UINT16_MAX) layout = DATA_SHARD_U32;
    }
    DataShardWriter *w;
    if (data_shard_writer_open(&w, path, layout, err) != 0) return -1;
    if (data_shard_writer_append(w, tokens, n, err) != 0) {
        data_shard_writer_abort(w);
        return -1;
    }
    return data_shard_writer_commit(w, err);
}
