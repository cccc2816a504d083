/* bfloat16 on the host: the top 16 bits of an fp32. From fp32 with round-to-nearest-even
 * (what the device's __float2bfloat16 does); NaN stays a quiet NaN. Used where the host
 * keeps or converts bf16 state: the CPU backend's bf16 Adam moments and the checkpoint's
 * fp32 copy of them. Also the split master weights (gt_master_split below). */
#ifndef GT_CORE_BF16_H
#define GT_CORE_BF16_H

#include <stdint.h>
#include <string.h>

/* the split master's two functions also compile for the device (backend/cuda/k_optim.cu) */
#ifdef __CUDACC__
#define GT_HOST_DEVICE __host__ __device__
#else
#define GT_HOST_DEVICE
#endif

static inline uint16_t gt_bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float gt_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* An fp32 master weight kept in two halves, where the compute copy is bf16 (the cuda
 * backend): hi is the bf16 the GEMMs read, w rounded to nearest with ties away from zero, and
 * lo the int16 difference of w's bit pattern from hi's, so bits(w) = (hi << 16) + lo exactly
 * (lo is in [-32768, 32767] because ties go away from zero; with ties to even one tie would
 * need 32768). The master costs 2 bytes beside the compute copy instead of 4, and AdamW
 * writes 2 bytes a parameter less. Beyond the largest bf16 (|w| >= 3.3961e38, where rounding
 * would reach the infinity exponent), infinities and NaN: hi is w truncated (NaN stays a
 * quiet NaN) and lo is 0, which drops w's low bits; such a weight has diverged anyway.
 * backend/cuda/k_optim.cu's AdamW calls these same two functions on the device. */
#define GT_MASTER_SPLIT_LIMIT 0x7f7f8000u /* |w| bits from which hi is truncated */
static inline GT_HOST_DEVICE void gt_master_split(float w, uint16_t *hi, int16_t *lo) {
    uint32_t u;
    memcpy(&u, &w, sizeof u);
    if ((u & 0x7fffffffu) >= GT_MASTER_SPLIT_LIMIT) {
        int nan = (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
        *hi = (uint16_t)((u >> 16) | (nan ? 0x40u : 0u));
        *lo = 0;
        return;
    }
    uint32_t h = (u + 0x8000u) >> 16;
    *hi = (uint16_t)h;
    *lo = (int16_t)(int32_t)(u - (h << 16));
}

static inline GT_HOST_DEVICE float gt_master_join(uint16_t hi, int16_t lo) {
    uint32_t u = ((uint32_t)hi << 16) + (uint32_t)(int32_t)lo;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
