/* tboard.h - a TensorBoard event file writer with no protobuf library.
 *
 * dir/events.out.tfevents.<unix time>.<hostname>.<pid> holds TFRecords:
 *   uint64 length (LE), uint32 masked_crc32c(length bytes), data, uint32 masked_crc32c(data)
 * with masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8 and CRC-32C (Castagnoli). Each record's
 * data is a hand-encoded tensorflow.Event protobuf: the first holds file_version
 * "brain.Event:2"; each scalar is Event{wall_time, step, summary{value{tag, simple_value}}}.
 * Every record is flushed when written, so `tensorboard --logdir` follows a live run. */
#ifndef GT_TBOARD_H
#define GT_TBOARD_H

#include "common.h"

typedef struct TBoard TBoard;

/* Create a new event file in dir (which must exist). Returns 0 or -1 with err filled. */
int tboard_open(TBoard **out, const char *dir, GtError *err);
/* The same, calling record(ctx, file name) before the file is created (so that a kill between the
 * two never leaves a file its owner did not record); a failing record fails the open. */
typedef int (*TBoardNameHook)(void *ctx, const char *file_name, GtError *err);
int tboard_open_recorded(TBoard **out, const char *dir, TBoardNameHook record, void *ctx, GtError *err);
/* Append one scalar. wall_time: unix seconds. Returns 0, or -1 on a write failure (warned about
 * once; later calls keep returning -1). */
int tboard_scalar(TBoard *tb, const char *tag, long step, double wall_time, float value);
void tboard_close(TBoard *tb); /* NULL is fine */
const char *tboard_path(const TBoard *tb);

/* exposed for tests */
uint32_t tboard_crc32c(const void *data, size_t n);
uint32_t tboard_masked_crc(uint32_t crc);
/* current wall clock in unix seconds (for wall_time) */
double tboard_wall_time(void);

#endif
