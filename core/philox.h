/* Philox-4x32-10 counter-based random numbers (Salmon et al., SC'11). Usable from host C and
 * CUDA device code: the same (key, counter) gives the same bits everywhere, which makes
 * dropout identical on the CPU reference, in eager GPU runs and in replayed graphs
 * (docs/design.md principle 4). Counter layout used by the engine:
 *   key     = rng.seed (64 bits)
 *   counter = { element index / 4, call site, micro-batch, step } */
#ifndef GT_CORE_PHILOX_H
#define GT_CORE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD static inline
#endif

typedef struct gt_philox4 {
    uint32_t v[4];
} gt_philox4;

#define GT_PHILOX_M0 0xD2511F53u
#define GT_PHILOX_M1 0xCD9E8D57u
#define GT_PHILOX_W0 0x9E3779B9u
#define GT_PHILOX_W1 0xBB67AE85u

GT_HD uint32_t gt_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

GT_HD gt_philox4 gt_philox4x32_10(gt_philox4 ctr, uint64_t seed) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = gt_mulhilo32(GT_PHILOX_M0, ctr.v[0], &hi0);
        uint32_t lo1 = gt_mulhilo32(GT_PHILOX_M1, ctr.v[2], &hi1);
        gt_philox4 n;
        n.v[0] = hi1 ^ ctr.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ ctr.v[3] ^ k1;
        n.v[3] = lo0;
        ctr = n;
        k0 += GT_PHILOX_W0;
        k1 += GT_PHILOX_W1;
    }
    return ctr;
}

/* Uniform float in [0, 1) from 24 random bits. */
GT_HD float gt_u32_to_unit(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Keep-decision for dropout of element `idx` at a call site: identical on every backend. */
GT_HD int gt_dropout_keep(uint64_t seed, uint32_t site, uint32_t micro, uint32_t step, uint64_t idx,
                          float p) {
    gt_philox4 c;
    c.v[0] = (uint32_t)(idx >> 2);
    c.v[1] = site ^ (uint32_t)(idx >> 34) << 16;
    c.v[2] = micro;
    c.v[3] = step;
    gt_philox4 r = gt_philox4x32_10(c, seed);
    return gt_u32_to_unit(r.v[idx & 3]) >= p;
}

#endif
