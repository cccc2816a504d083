/* FP8 on the host: the two OCP 8-bit formats Hopper's tensor cores read, E4M3 (bias 7, no
 * infinity, largest 448, NaN = S.1111.111) and E5M2 (bias 15, IEEE-like: infinities, largest
 * 57344), converted from fp32 with round-to-nearest-even and saturation to the largest finite
 * value, as the device's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) does, so the CPU
 * backend's FP8 emulation rounds exactly as the GPU does. Also the scale a tensor is
 * multiplied by before the cast, from its absolute maximum, with Transformer Engine's rules. */
#ifndef GT_CORE_FP8_H
#define GT_CORE_FP8_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef enum { GT_FP8_E4M3, GT_FP8_E5M2 } gt_fp8_format;

#define GT_FP8_E4M3_MAX 448.0f
#define GT_FP8_E5M2_MAX 57344.0f

typedef struct gt_fp8_layout {
    int mant_bits; /* 3 or 2 */
    int bias;      /* 7 or 15 */
    float max;     /* largest finite magnitude */
    uint8_t max_code, nan_code;
} gt_fp8_layout;

static inline gt_fp8_layout gt_fp8_layout_of(gt_fp8_format f) {
    gt_fp8_layout e4m3 = {3, 7, GT_FP8_E4M3_MAX, 0x7e, 0x7f};
    gt_fp8_layout e5m2 = {2, 15, GT_FP8_E5M2_MAX, 0x7b, 0x7f};
    return f == GT_FP8_E4M3 ? e4m3 : e5m2;
}

static inline float gt_fp8_max(gt_fp8_format f) {
    return gt_fp8_layout_of(f).max;
}

/* The value of an FP8 code. */
static inline float gt_fp8_to_float(uint8_t code, gt_fp8_format f) {
    gt_fp8_layout l = gt_fp8_layout_of(f);
    int exp_bits = 7 - l.mant_bits;
    int sign = code >> 7;
    int e = (code >> l.mant_bits) & ((1 << exp_bits) - 1);
    int m = code & ((1 << l.mant_bits) - 1);
    float v;
    if (f == GT_FP8_E4M3 && (code & 0x7f) == 0x7f) return NAN;
    if (f == GT_FP8_E5M2 && e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpf((float)m, 1 - l.bias - l.mant_bits); /* subnormal */
    else
        v = ldexpf((float)((1 << l.mant_bits) | m), e - l.bias - l.mant_bits);
    return sign ? -v : v;
}

/* fp32 -> FP8, round to nearest even, magnitudes past the largest finite value (infinities
 * included) saturate to it, NaN stays NaN. */
static inline uint8_t gt_fp8_from_float(float x, gt_fp8_format f) {
    gt_fp8_layout l = gt_fp8_layout_of(f);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return (uint8_t)(sign | l.nan_code);
    float a = fabsf(x);
    if (a >= l.max) return (uint8_t)(sign | l.max_code);
    if (a == 0.0f) return sign;
    /* the quantum at a's binade (or the subnormal one), then an exact power-of-two scaling,
     * so nearbyintf's round-half-to-even is the only rounding */
    int e2;
    (void)frexpf(a, &e2); /* a = frac * 2^e2, frac in [0.5, 1) */
    int exp = e2 - 1;     /* a in [2^exp, 2^(exp+1)) */
    int min_exp = 1 - l.bias;
    if (exp < min_exp) exp = min_exp;
    int q = exp - l.mant_bits;
    float r = nearbyintf(ldexpf(a, -q)); /* integer significand, up to 2^(mant+1) */
    int sig = (int)r;
    if (sig == 0) return sign;
    if (sig >= (2 << l.mant_bits)) { /* rounded up into the next binade */
        sig >>= 1;
        exp++;
    }
    int biased = sig >= (1 << l.mant_bits) ? exp + l.bias : 0; /* subnormal: exponent field 0 */
    int code = (biased << l.mant_bits) | (sig & ((1 << l.mant_bits) - 1));
    if (code > l.max_code) code = l.max_code; /* only reachable just under max */
    return (uint8_t)(sign | code);
}

/* The scale that maps a tensor of absolute maximum amax onto the format's range, leaving
 * 2^margin of headroom: (fp8_max / amax) / 2^margin. Transformer Engine keeps the previous
 * scale where amax is zero or not finite (nothing to learn from), and the largest float where
 * the quotient overflows. */
static inline float gt_fp8_scale_from_amax(float amax, float prev_scale, gt_fp8_format f,
                                           int margin) {
    if (!(amax > 0.0f) || !isfinite(amax)) return prev_scale;
    float s = (gt_fp8_max(f) / amax) / ldexpf(1.0f, margin);
    if (isinf(s)) return FLT_MAX;
    return s;
}

/* An amax as bits: max over a tensor x of gt_fp8_amax_bits(x[i]) is the bits of max |x|. For
 * non-negative floats the integer order is the float order and a NaN's bits lie above Inf's, so
 * that max is order-free (atomics may fold it in any order, and the result is deterministic)
 * and keeps a NaN, as a max over the floats that lets NaN win does. */
static inline uint32_t gt_fp8_amax_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7fffffffu;
}

#endif
