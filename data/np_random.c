/* NumPy's legacy MT19937 stream and shuffle; see np_random.h. */
#include "data/np_random.h"

#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu

void gt_np_random_seed(gt_np_random *r, uint32_t seed) {
    for (int i = 0; i < GT_MT_N; i++) {
        r->key[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1u;
    }
    r->pos = GT_MT_N;
}

static void mt_refill(gt_np_random *r) {
    uint32_t *k = r->key;
    int i;
    for (i = 0; i < GT_MT_N - MT_M; i++) {
        uint32_t y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
        k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1u) & MT_MATRIX_A);
    }
    for (; i < GT_MT_N - 1; i++) {
        uint32_t y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
        k[i] = k[i + (MT_M - GT_MT_N)] ^ (y >> 1) ^ (-(y & 1u) & MT_MATRIX_A);
    }
    uint32_t y = (k[GT_MT_N - 1] & MT_UPPER) | (k[0] & MT_LOWER);
    k[GT_MT_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1u) & MT_MATRIX_A);
    r->pos = 0;
}

uint32_t gt_np_random_u32(gt_np_random *r) {
    if (r->pos == GT_MT_N) mt_refill(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t gt_np_random_interval(gt_np_random *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffull) {
        while ((v = (gt_np_random_u32(r) & mask)) > max) {
        }
    } else {
        for (;;) { /* next_uint64: the high word is drawn first */
            uint64_t hi = gt_np_random_u32(r);
            v = ((hi << 32) | gt_np_random_u32(r)) & mask;
            if (v <= max) break;
        }
    }
    return v;
}

void gt_np_shuffle_i32(gt_np_random *r, int32_t *x, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)gt_np_random_interval(r, (uint64_t)i);
        int32_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

void gt_np_shuffle_i64(gt_np_random *r, int64_t *x, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)gt_np_random_interval(r, (uint64_t)i);
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}
