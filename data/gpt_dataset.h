/* Megatron-LM's GPTDataset sample construction over one split of an indexed dataset
 * (megatron/core/datasets/gpt_dataset.py and helpers.cpp build_sample_idx), reproduced so the
 * same data, seed, seq_length, split and sample count give the same samples in the same order:
 *  - the split's sequences [begin, end) are the "documents" (GPT splits by sequence);
 *  - num_epochs is the least number of passes whose tokens reach num_samples * T + 1 (one
 *    pass when num_samples < 0, Megatron's None);
 *  - document index: the split's ids repeated num_epochs times, shuffled by
 *    numpy.random.RandomState(seed); when the last pass would give fewer than 80% of a pass's
 *    samples it is shuffled on its own after the others ("separate final epoch");
 *  - sample index: documents laid end to end in that order, cut every T tokens, each sample
 *    taking T + 1 tokens (the extra one is the next sample's first: inputs and labels), the
 *    last partial sample dropped;
 *  - shuffle index: a permutation of the samples from the same generator (the final epoch's
 *    samples permuted separately when it was separated).
 * Sample i is therefore a pure function of (data, seed, T, split, num_samples, i): any number
 * of readers taking any slices of the global sample sequence see the same tokens. */
#ifndef GT_DATA_GPT_DATASET_H
#define GT_DATA_GPT_DATASET_H

#include <stdint.h>

#include "core/error.h"
#include "data/indexed_dataset.h"

typedef struct gt_gpt_dataset gt_gpt_dataset;

/* Builds the three indices for sequences [begin, end) of ds. num_samples < 0: one epoch. */
int gt_gpt_dataset_build(gt_gpt_dataset **g, const gt_indexed_dataset *ds, int64_t begin,
                         int64_t end, int64_t num_samples, uint32_t seed, int seq_length,
                         gt_error *err);
void gt_gpt_dataset_destroy(gt_gpt_dataset *g);

/* Samples available (Megatron's len(): at least num_samples when that was given). */
int64_t gt_gpt_dataset_len(const gt_gpt_dataset *g);
int gt_gpt_dataset_epochs(const gt_gpt_dataset *g);

/* The seq_length + 1 tokens of sample idx (0 <= idx < len). */
int gt_gpt_dataset_sample(const gt_gpt_dataset *g, int64_t idx, int vocab, int32_t *tokens,
                          gt_error *err);

#endif
