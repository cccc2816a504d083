/* safetensors files (Hugging Face's weight format): an 8-byte little-endian header length, a
 * JSON header naming each tensor's dtype, shape and byte range, then the raw data. The writer
 * takes fp32 host arrays and stores F32 or BF16; the reader gives any F32, BF16 or F16 tensor
 * back as fp32. Sharded folders (model.safetensors.index.json) are handled by the callers. */
#ifndef GT_CORE_SAFETENSORS_H
#define GT_CORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define GT_ST_NAME_MAX 160
#define GT_ST_MAX_DIMS 4
/* a header beyond this is not a weight file (the format's own readers cap it at 100 MB) */
#define GT_ST_MAX_HEADER (100u << 20)

typedef enum { GT_ST_F32, GT_ST_BF16, GT_ST_F16 } gt_st_dtype;

typedef struct gt_st_tensor {
    char name[GT_ST_NAME_MAX];
    gt_st_dtype dtype;
    int ndim;
    int64_t shape[GT_ST_MAX_DIMS];
    const float *data;   /* writer: [numel] fp32 host values, converted to dtype on write */
    uint64_t begin, end; /* reader: byte range inside the data section */
} gt_st_tensor;

int64_t gt_st_numel(const gt_st_tensor *t);
size_t gt_st_dtype_bytes(gt_st_dtype d);
const char *gt_st_dtype_name(gt_st_dtype d);

/* Writes n tensors (in that order) to path atomically, with {"format": "pt"} as metadata. */
int gt_st_write(const char *path, const gt_st_tensor *t, int n, gt_error *err);

/* An open file: its header parsed, the data section read on demand. */
typedef struct gt_st_file {
    char path[1024];
    void *fp;             /* FILE * */
    uint64_t data_offset; /* 8 + header length */
    uint64_t data_bytes;
    gt_st_tensor *tensors;
    int n;
} gt_st_file;

/* Opens and checks path: header JSON, dtypes, shapes against byte ranges, ranges inside the
 * file. A dtype other than F32, BF16 and F16 is refused naming the tensor. */
int gt_st_open(gt_st_file *f, const char *path, gt_error *err);
void gt_st_close(gt_st_file *f);
/* The tensor named name, or NULL. */
const gt_st_tensor *gt_st_find(const gt_st_file *f, const char *name);
/* Reads tensor t into out[numel] as fp32 (bf16 and f16 widen exactly). */
int gt_st_read(const gt_st_file *f, const gt_st_tensor *t, float *out, gt_error *err);

#endif
