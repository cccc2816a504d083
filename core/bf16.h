/* bfloat16 on the host: the top 16 bits of an fp32. From fp32 with round-to-nearest-even
 * (what the device's __float2bfloat16 does); NaN stays a quiet NaN. Used where the host
 * keeps or converts bf16 state: the CPU backend's bf16 Adam moments and the checkpoint's
 * fp32 copy of them. */
#ifndef GT_CORE_BF16_H
#define GT_CORE_BF16_H

#include <stdint.h>
#include <string.h>

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

#endif
