/* The learning-rate schedule across a resume (trainer_sched.c): the record a checkpoint keeps
 * and the check that a resumed run trains on with the schedule it was trained with. */
#ifndef GT_TRAIN_TRAINER_SCHED_H
#define GT_TRAIN_TRAINER_SCHED_H

#include <stddef.h>

#include "config/config.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

/* What a checkpoint records of this configuration's schedule. */
gt_ckpt_sched gt_trainer_ckpt_sched(const gt_config *cfg);

/* What this trainer's checkpoints record: the schedule it trains with. */
gt_ckpt_sched gt_trainer_sched_record(const gt_trainer *t);

/* 0 when every step's rate is the same under both schedules; else the length of the text put
 * in buf (one line per changed key: its name, the checkpoint's value and the new one). */
size_t gt_ckpt_sched_diff(const gt_ckpt_sched *old, const gt_ckpt_sched *now, char *buf, size_t n);

/* At resume: GT_OK when the configured schedule is the checkpoint's; with a different one,
 * GT_ERR_INVALID naming each change, unless scheduler.override_opt_param_scheduler (train on
 * with the configured one) or scheduler.use_checkpoint_opt_param_scheduler (train on with the
 * checkpoint's) says which to take; either prints a note of the changes. */
int gt_trainer_resume_schedule(gt_trainer *t, const gt_ckpt_sched *saved, const char *path,
                               gt_error *err);

#endif
