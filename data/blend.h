/* Megatron's dataset.data_path and dataset.split over indexed datasets: one prefix, or a blend
 * "W1 PREFIX1 W2 PREFIX2 ..." (spaces or commas; a YAML list arrives comma-joined), or several
 * prefixes without weights; split "969,30,1" gives train / validation / test shares of each
 * prefix's sequences. As BlendedMegatronDatasetBuilder builds them:
 *  - split weights are normalized; split i takes sequences [round(lo*n), round(hi*n)) where
 *    lo, hi are the cumulative shares (round half to even, as Python's round);
 *  - one unweighted prefix: its GPTDataset is built for the split's target sample count;
 *  - weighted blend: weights normalized, prefix k's GPTDataset is built for
 *    ceil(ceil(target * w_k) * 1.005) samples, and blended sample i comes from the prefix with
 *    the largest error w_k * max(i, 1) - taken_k (first on ties), its next unused sample;
 *  - unweighted prefixes: each built for one epoch, blended exhaustively in proportion to
 *    their lengths until every sample is used.
 * Every sample is a function of the global sample index alone (see gpt_dataset.h). */
#ifndef GT_DATA_BLEND_H
#define GT_DATA_BLEND_H

#include <stdint.h>

#include "core/error.h"

#define GT_BLEND_MAX 64
#define GT_BLEND_SURPLUS 0.005 /* Megatron's mid_level_dataset_surplus */

enum { GT_MSPLIT_TRAIN = 0, GT_MSPLIT_VALID = 1, GT_MSPLIT_TEST = 2, GT_MSPLIT_N = 3 };

typedef struct gt_blend_spec {
    int n;
    int weighted;
    double weight[GT_BLEND_MAX]; /* normalized when weighted */
    char *prefix[GT_BLEND_MAX];  /* malloc'ed */
} gt_blend_spec;

/* True when data_path holds several items or names PREFIX.idx + PREFIX.bin. */
int gt_blend_is_megatron(const char *data_path);
int gt_blend_parse(const char *data_path, gt_blend_spec *spec, gt_error *err);
void gt_blend_spec_free(gt_blend_spec *spec);

/* Normalized split shares ("969,30,1" -> 0.969, 0.03, 0.001; missing ones are 0). */
int gt_split_parse(const char *split, double share[GT_MSPLIT_N], gt_error *err);
/* Sequence range [*begin, *end) of split `which` among n; 0 when the split is empty. */
int gt_split_range(const double share[GT_MSPLIT_N], int which, int64_t n, int64_t *begin,
                   int64_t *end);
/* Megatron's build_blending_indices: source and per-source sample of blended samples. */
void gt_blend_indices(const double *weight, int n, int64_t size, int16_t *source, int64_t *sample);

typedef struct gt_blend_data gt_blend_data;

typedef struct gt_blend_params {
    const char *data_path;
    const char *split;
    int which;           /* GT_MSPLIT_* */
    int64_t num_samples; /* the split's target (train_iters * global batch for training) */
    uint32_t seed;
    int seq_length;
} gt_blend_params;

int gt_blend_data_open(gt_blend_data **b, const gt_blend_params *p, gt_error *err);
void gt_blend_data_close(gt_blend_data *b);
int64_t gt_blend_data_len(const gt_blend_data *b);
/* The seq_length + 1 tokens of global sample idx. */
int gt_blend_data_sample(const gt_blend_data *b, int64_t idx, int vocab, int32_t *tokens,
                         gt_error *err);
const char *gt_blend_data_describe(const gt_blend_data *b);

#endif
