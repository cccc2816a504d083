/* The fp8 state in the trainer's checkpoints: delayed scaling's scales and amax history are
 * saved with the weights and restored on resume, so a resumed fp8_ds run quantizes with the
 * scales the uninterrupted run would have used. */
#ifndef GT_TRAIN_TRAINER_CKPT_FP8_H
#define GT_TRAIN_TRAINER_CKPT_FP8_H

#include "train/checkpoint.h"
#include "train/trainer.h"

/* The state to save: out->meta and out->history malloc'ed host copies (NULL unless fp8_ds);
 * free them with gt_trainer_fp8_state_free. */
int gt_trainer_fp8_state_read(gt_trainer *t, gt_ckpt_fp8 *out, gt_error *err);
void gt_trainer_fp8_state_free(gt_ckpt_fp8 *s);
/* On resume (checkpoint at step `step` > 0): restores delayed scaling's state, or refuses a
 * checkpoint that cannot continue this run's recipe, naming the keys. */
int gt_trainer_fp8_state_write(gt_trainer *t, const gt_ckpt_fp8 *in, const char *path,
                               gt_error *err);

#endif
