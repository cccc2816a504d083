/* The weights exchange file between graphtrain and bench/torch_reference.py: named fp32
 * tensors in gt_model_tensor order (parameters, or gradients in the same layout).
 *
 * Layout, little-endian:
 *   header  (32 bytes): u32 magic "GTWT", u32 version (1), u32 n_tensors, u32 reserved (0),
 *                       u64 n_values (sum of numel), u64 reserved (0)
 *   table   (n_tensors records of 96 bytes): char name[64] (NUL-padded), u32 ndim,
 *                       u32 shape[3] (0 past ndim), u64 numel, u64 offset (elements into
 *                       graphtrain's flat parameter array; informative)
 *   data    every tensor's numel fp32 values, in table order, row-major. */
#ifndef GT_BENCH_WEIGHTS_IO_H
#define GT_BENCH_WEIGHTS_IO_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"
#include "train/trainer.h"

#define GT_WEIGHTS_MAGIC 0x54575447u /* "GTWT" read as a little-endian u32 */
#define GT_WEIGHTS_VERSION 1
#define GT_WEIGHTS_HEADER_BYTES 32
#define GT_WEIGHTS_RECORD_BYTES 96
#define GT_WEIGHTS_NAME_MAX 64

typedef struct gt_weights_tensor {
    char name[GT_WEIGHTS_NAME_MAX];
    int ndim;
    int shape[3];
    size_t numel;
    size_t offset; /* into the flat array the tensor was taken from */
    float *data;   /* [numel], points into gt_weights.values after a read */
} gt_weights_tensor;

typedef struct gt_weights {
    int n;
    gt_weights_tensor *tensors; /* [n] */
    size_t n_values;
    float *values; /* [n_values], every tensor's data back to back */
} gt_weights;

/* Writes the model's named tensors taken from flat [n_params] (fp32, gt_model layout) to path
 * (atomically: temp file + rename). */
int gt_weights_write_model(const char *path, const gt_model *m, const float *flat, gt_error *err);
/* The trainer's fp32 master weights (gt_trainer_read_master) as a weights file. */
int gt_weights_export(gt_trainer *t, const char *path, gt_error *err);
/* The trainer's current fp32 gradients (those of its last step) in the same format. */
int gt_weights_export_grads(gt_trainer *t, const char *path, gt_error *err);

/* Reads a weights file, checking magic, version, sizes and names. Free with gt_weights_free. */
int gt_weights_read(const char *path, gt_weights *w, gt_error *err);
void gt_weights_free(gt_weights *w);
/* Index of the tensor named name, or -1. */
int gt_weights_find(const gt_weights *w, const char *name);

#endif
