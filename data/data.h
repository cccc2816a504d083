/* Data sources for training and evaluation: mock (seeded random tokens, like Bridge's mock
 * data) and token shards (memory-mapped, see shard.h) read sequentially or in a seeded
 * shuffled order that wraps at the end of each epoch. The read position is a small value
 * that checkpoints save, so a resumed run sees exactly the batches it would have seen. */
#ifndef GT_DATA_DATA_H
#define GT_DATA_DATA_H

#include <stdint.h>

#include "config/config.h"
#include "core/error.h"

typedef struct gt_data gt_data;

typedef enum { GT_SPLIT_TRAIN = 0, GT_SPLIT_VALID = 1 } gt_data_split;

typedef struct gt_data_pos {
    uint64_t epoch;  /* completed passes over the data */
    uint64_t cursor; /* next sample inside the current epoch */
} gt_data_pos;

/* Opens dataset.source for one split. Shards: dataset.data_path is a prefix (PREFIX.manifest,
 * written by prepare-data) or a folder (every manifest in it, of one vocabulary); only the
 * shards a manifest lists are read, each checked against it (shard_list.h). The manifests'
 * validation shards are the held-out split, otherwise the last 5% of the shards (at least
 * one) are. Megatron indexed
 * datasets: when data_path is a blend or PREFIX.idx + PREFIX.bin exist, samples come in
 * Megatron's GPTDataset order for dataset.split (blend.h, gpt_dataset.h); reading past the last
 * one starts it over. Mock: validation uses another seed. */
int gt_data_create(gt_data **d, const gt_config *cfg, gt_data_split split, gt_error *err);
void gt_data_destroy(gt_data *d);

/* Fills B sequences of model.seq_length tokens [B*T] and their next-token targets [B*T]. */
int gt_data_next(gt_data *d, int32_t *tokens, int32_t *targets, int B, gt_error *err);

gt_data_pos gt_data_get_pos(const gt_data *d);
int gt_data_set_pos(gt_data *d, gt_data_pos pos, gt_error *err);

/* Samples (sequences) per epoch; 0 for mock (endless). */
int64_t gt_data_num_samples(const gt_data *d);
/* One line describing the source ("shards data/fortunes_*: 3 files, ..."). */
const char *gt_data_describe(const gt_data *d);

#endif
