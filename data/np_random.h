/* NumPy's legacy numpy.random.RandomState (MT19937 seeded by init_genrand) and its
 * shuffle(), bit for bit, so index orders built here equal those Megatron-LM builds in
 * Python with numpy.random.RandomState(seed).shuffle(array). */
#ifndef GT_DATA_NP_RANDOM_H
#define GT_DATA_NP_RANDOM_H

#include <stdint.h>

#define GT_MT_N 624

typedef struct gt_np_random {
    uint32_t key[GT_MT_N];
    int pos;
} gt_np_random;

/* RandomState(seed) for an integer seed in [0, 2^32). */
void gt_np_random_seed(gt_np_random *r, uint32_t seed);
uint32_t gt_np_random_u32(gt_np_random *r);
/* random_interval(max): uniform in [0, max] by masked rejection, as numpy draws it. */
uint64_t gt_np_random_interval(gt_np_random *r, uint64_t max);
/* RandomState.shuffle of a 1-D array (Fisher-Yates from the end). */
void gt_np_shuffle_i32(gt_np_random *r, int32_t *x, int64_t n);
void gt_np_shuffle_i64(gt_np_random *r, int64_t *x, int64_t n);

#endif
