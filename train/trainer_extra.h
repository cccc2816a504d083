/* Trainer functions beyond train/trainer.h that the loop, the CLI and tests use: the memory
 * plan, the data position, and whether the trainer resumed from a checkpoint. */
#ifndef GT_TRAIN_TRAINER_EXTRA_H
#define GT_TRAIN_TRAINER_EXTRA_H

#include <stdio.h>

#include "train/data.h"
#include "train/trainer.h"

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
