/* TensorBoard event files (logger.tensorboard_dir), written by hand: TFRecord framing (length,
 * masked CRC32C of the length, data, masked CRC32C of the data) around Event protobufs
 * (wall_time, step, Summary{Value{tag, simple_value}}), so TensorBoard's own reader reads them
 * with no new dependency here. */
#ifndef GT_TRAIN_TB_EVENTS_H
#define GT_TRAIN_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct gt_tb_writer gt_tb_writer;

/* Creates dir (mkdir -p) and a new file events.out.tfevents.<time>.<host> in it (".<n>" added
 * when a run of the same second already took that name), and writes the file_version event
 * TensorBoard expects first. */
int gt_tb_open(gt_tb_writer **w, const char *dir, double wall_time, gt_error *err);
/* A SessionLog START at step: TensorBoard then drops the events of earlier files at this step
 * and later (a resumed run's repeated steps). */
int gt_tb_session_start(gt_tb_writer *w, long long step, double wall_time, gt_error *err);
/* One Event holding n scalars tags[i] = values[i] at step; flushed at once. */
int gt_tb_scalars(gt_tb_writer *w, long long step, double wall_time, const char *const *tags,
                  const float *values, int n, gt_error *err);
/* Closes the file; GT_ERR_IO when the close fails. Frees w in every case; accepts NULL. */
int gt_tb_close(gt_tb_writer *w, gt_error *err);
/* The file's path. */
const char *gt_tb_path(const gt_tb_writer *w);

/* CRC-32C (Castagnoli), as TFRecord uses, and its mask: ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t gt_crc32c(const void *data, size_t n);
uint32_t gt_tb_masked_crc(uint32_t crc);

#endif
