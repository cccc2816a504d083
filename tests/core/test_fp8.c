/* FP8 conversion (core/fp8.h) against an independent reference: the nearest of all finite codes
 * found by search, ties to the even code, and TE's scale rules. */
#include "testlib.h"

#include <math.h>
#include <string.h>

#include "core/fp8.h"

static const gt_fp8_format formats[] = {GT_FP8_E4M3, GT_FP8_E5M2};

/* The reference: the nearest finite non-negative code by exhaustive search (ties: the even
 * code, whose mantissa's last bit is 0), saturating past the largest. */
static uint8_t reference_encode(float x, gt_fp8_format f) {
    gt_fp8_layout l = gt_fp8_layout_of(f);
    if (isnan(x)) return (uint8_t)((signbit(x) ? 0x80 : 0) | l.nan_code);
    double a = fabs((double)x);
    if (a >= l.max) return (uint8_t)((signbit(x) ? 0x80 : 0) | l.max_code);
    int best = 0;
    double best_d = INFINITY;
    for (int c = 0; c <= l.max_code; c++) {
        double d = fabs((double)gt_fp8_to_float((uint8_t)c, f) - a);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best = c;
            best_d = d;
        }
    }
    return (uint8_t)((signbit(x) ? 0x80 : 0) | best);
}

static void test_every_finite_code_round_trips(void **state) {
    (void)state;
    for (int fi = 0; fi < 2; fi++) {
        gt_fp8_layout l = gt_fp8_layout_of(formats[fi]);
        for (int c = 0; c < 256; c++) {
            if ((c & 0x7f) > l.max_code) continue;
            float v = gt_fp8_to_float((uint8_t)c, formats[fi]);
            assert_int_equal(gt_fp8_from_float(v, formats[fi]), c);
        }
    }
}

static void test_decoded_extremes_match_the_formats(void **state) {
    (void)state;
    assert_true(gt_fp8_to_float(0x7e, GT_FP8_E4M3) == 448.0f);
    assert_true(gt_fp8_to_float(0x01, GT_FP8_E4M3) == ldexpf(1.0f, -9));
    assert_true(isnan(gt_fp8_to_float(0x7f, GT_FP8_E4M3)));
    assert_true(gt_fp8_to_float(0x7b, GT_FP8_E5M2) == 57344.0f);
    assert_true(gt_fp8_to_float(0x01, GT_FP8_E5M2) == ldexpf(1.0f, -16));
    assert_true(isinf(gt_fp8_to_float(0x7c, GT_FP8_E5M2)));
    assert_true(isnan(gt_fp8_to_float(0x7d, GT_FP8_E5M2)));
}

static void test_midpoints_round_to_the_even_code(void **state) {
    (void)state;
    for (int fi = 0; fi < 2; fi++) {
        gt_fp8_layout l = gt_fp8_layout_of(formats[fi]);
        for (int c = 0; c < l.max_code; c++) {
            float lo = gt_fp8_to_float((uint8_t)c, formats[fi]);
            float hi = gt_fp8_to_float((uint8_t)(c + 1), formats[fi]);
            float mid = (lo + hi) / 2; /* exact: fp8 values have few bits */
            uint8_t even = (uint8_t)((c & 1) ? c + 1 : c);
            assert_int_equal(gt_fp8_from_float(mid, formats[fi]), even);
            assert_int_equal(gt_fp8_from_float(-mid, formats[fi]), 0x80 | even);
            assert_int_equal(gt_fp8_from_float(nextafterf(mid, 0), formats[fi]), c);
            assert_int_equal(gt_fp8_from_float(nextafterf(mid, INFINITY), formats[fi]), c + 1);
        }
    }
}

static void test_large_magnitudes_and_infinities_saturate(void **state) {
    (void)state;
    assert_int_equal(gt_fp8_from_float(464.0f, GT_FP8_E4M3), 0x7e);
    assert_int_equal(gt_fp8_from_float(1e30f, GT_FP8_E4M3), 0x7e);
    assert_int_equal(gt_fp8_from_float(-INFINITY, GT_FP8_E4M3), 0xfe);
    assert_int_equal(gt_fp8_from_float(INFINITY, GT_FP8_E5M2), 0x7b);
    assert_int_equal(gt_fp8_from_float(-70000.0f, GT_FP8_E5M2), 0xfb);
    assert_true(isnan(gt_fp8_to_float(gt_fp8_from_float(NAN, GT_FP8_E4M3), GT_FP8_E4M3)));
    assert_true(isnan(gt_fp8_to_float(gt_fp8_from_float(NAN, GT_FP8_E5M2), GT_FP8_E5M2)));
}

static void test_conversion_matches_the_search_over_a_spread_of_floats(void **state) {
    (void)state;
    /* every 65537th bit pattern: all binades, both signs, subnormals and NaNs */
    for (int fi = 0; fi < 2; fi++)
        for (uint64_t u = 0; u <= 0xffffffffu; u += 65537) {
            uint32_t bits = (uint32_t)u;
            float x;
            memcpy(&x, &bits, sizeof x);
            uint8_t got = gt_fp8_from_float(x, formats[fi]);
            uint8_t want = reference_encode(x, formats[fi]);
            if (got != want)
                fail_msg("format %d: %a (0x%08x) -> 0x%02x, the nearest code is 0x%02x", fi,
                         (double)x, bits, got, want);
        }
}

static void test_scale_follows_transformer_engine_rules(void **state) {
    (void)state;
    assert_true(gt_fp8_scale_from_amax(2.0f, 1.0f, GT_FP8_E4M3, 0) == 224.0f);
    assert_true(gt_fp8_scale_from_amax(2.0f, 1.0f, GT_FP8_E4M3, 1) == 112.0f);
    assert_true(gt_fp8_scale_from_amax(1.0f, 1.0f, GT_FP8_E5M2, 0) == 57344.0f);
    /* nothing to learn from: the previous scale stays */
    assert_true(gt_fp8_scale_from_amax(0.0f, 3.0f, GT_FP8_E4M3, 0) == 3.0f);
    assert_true(gt_fp8_scale_from_amax(INFINITY, 3.0f, GT_FP8_E4M3, 0) == 3.0f);
    assert_true(gt_fp8_scale_from_amax(NAN, 3.0f, GT_FP8_E4M3, 0) == 3.0f);
    /* a quotient past the float range: the largest float */
    assert_true(gt_fp8_scale_from_amax(1e-44f, 1.0f, GT_FP8_E4M3, 0) == FLT_MAX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_finite_code_round_trips),
        cmocka_unit_test(test_decoded_extremes_match_the_formats),
        cmocka_unit_test(test_midpoints_round_to_the_even_code),
        cmocka_unit_test(test_large_magnitudes_and_infinities_saturate),
        cmocka_unit_test(test_conversion_matches_the_search_over_a_spread_of_floats),
        cmocka_unit_test(test_scale_follows_transformer_engine_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
