/* Megatron-LM's indexed datasets (MMapIndexedDataset: PREFIX.idx + PREFIX.bin, as written by
 * tools/preprocess_data.py) read in place through mmap. Every header field and index entry is
 * range-checked when the files are opened, so a corrupt or truncated index is refused by name.
 * The .idx layout (all little-endian, no padding):
 *   "MMIDIDX\0\0" | u64 version (1) | u8 dtype code | u64 sequence count S | u64 document count D
 *   | i32 sequence lengths[S] | i64 byte offsets into .bin[S] | i64 document indices[D]
 *   (| i8 sequence modes[S], multimodal datasets only)
 * dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16.
 * document indices are sequence numbers: document k holds sequences [doc[k], doc[k+1]); the
 * first is 0 and the last is S, so D = documents + 1. */
#ifndef GT_DATA_INDEXED_DATASET_H
#define GT_DATA_INDEXED_DATASET_H

#include <stdint.h>

#include "core/error.h"

#define GT_IDX_MAGIC "MMIDIDX\x00\x00"
#define GT_IDX_MAGIC_BYTES 9
#define GT_IDX_VERSION 1
#define GT_IDX_HEADER_BYTES 34 /* magic 9 + version 8 + dtype 1 + counts 8 + 8 */

typedef enum {
    GT_IDX_UINT8 = 1,
    GT_IDX_INT8 = 2,
    GT_IDX_INT16 = 3,
    GT_IDX_INT32 = 4,
    GT_IDX_INT64 = 5,
    GT_IDX_FLOAT64 = 6,
    GT_IDX_FLOAT32 = 7,
    GT_IDX_UINT16 = 8,
} gt_idx_dtype;

typedef struct gt_indexed_dataset gt_indexed_dataset;

/* True when both PREFIX.idx and PREFIX.bin exist. */
int gt_indexed_exists(const char *prefix);

/* Opens PREFIX.idx and PREFIX.bin; float dtypes are refused (they cannot hold token ids). */
int gt_indexed_open(gt_indexed_dataset **ds, const char *prefix, gt_error *err);
void gt_indexed_close(gt_indexed_dataset *ds);

int64_t gt_indexed_num_sequences(const gt_indexed_dataset *ds);
int64_t gt_indexed_num_documents(const gt_indexed_dataset *ds);
int gt_indexed_dtype(const gt_indexed_dataset *ds);
const char *gt_indexed_prefix(const gt_indexed_dataset *ds);
/* Tokens in sequence i (0 <= i < S; checked at open). */
int32_t gt_indexed_sequence_length(const gt_indexed_dataset *ds, int64_t i);

/* Copies tokens [offset, offset + len) of sequence seq into out; a range outside the
 * sequence, or a token outside [0, vocab), is refused naming the file. */
int gt_indexed_read(const gt_indexed_dataset *ds, int64_t seq, int64_t offset, int64_t len,
                    int vocab, int32_t *out, gt_error *err);

#endif
