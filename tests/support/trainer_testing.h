/* Test-only reach into the trainer beyond train/trainer.h: the Adam moments' host copies
 * (resumed state compared bit for bit) and the lazy rows' sweep period, from train/'s internal
 * headers. Library code uses train/trainer.h (or, inside train/, trainer_impl.h). */
#ifndef GT_TESTS_TRAINER_TESTING_H
#define GT_TESTS_TRAINER_TESTING_H

#include "train/trainer.h"
#include "train/trainer_impl.h"

#endif
