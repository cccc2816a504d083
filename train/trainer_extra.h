/* Trainer functions beyond train/trainer.h that the loop, the CLI and tests use: the memory
 * plan, the data position, and whether the trainer resumed from a checkpoint. */
#ifndef GT_TRAIN_TRAINER_EXTRA_H
#define GT_TRAIN_TRAINER_EXTRA_H

#include <stdio.h>

#include "data/data.h"
#include "train/trainer.h"

/* Lazy embedding rows: each step's catch-up (lazy_catchup, in the same launch) also takes the
 * rows of slice step mod GT_LAZY_ROWS_SWEEP (ceil(rows / GT_LAZY_ROWS_SWEEP) rows a slice), so
 * no row waits longer than that many steps: a step's replays stay short and of like lengths.
 * Without it a row could wait until a periodic flush (256 steps, stop 21): the longest replays
 * then set the catch-up's time, and tiny's step grew from 1.48 ms at step 10 to 1.59 at step
 * 210 (H200, 300 steps). The replays' total is the same either way: each row's missed steps,
 * once. */
#define GT_LAZY_ROWS_SWEEP 32

/* Prints every arena (model, optimizer, step state, batch) and the pinned host buffers. */
void gt_trainer_print_memory(const gt_trainer *t, FILE *f);
/* One line: backend, parameters, micro-batches, data. */
void gt_trainer_print_summary(const gt_trainer *t, FILE *f);
int gt_trainer_resumed(const gt_trainer *t);
gt_data_pos gt_trainer_data_pos(const gt_trainer *t);
/* Host copies of the Adam moments [n_params] (tests compare resumed state). */
int gt_trainer_read_moments(gt_trainer *t, float *m, float *v, gt_error *err);
/* Sets the Adam moments from fp32 host arrays [n_params] (rounded to nearest-even where the
 * run stores a moment in bf16). */
int gt_trainer_write_moments(gt_trainer *t, const float *m, const float *v, gt_error *err);

#endif
