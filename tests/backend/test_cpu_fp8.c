/* The CPU backend's fp8 ops (backend/cpu/cpu_fp8.c) against a plain scalar emulation written
 * here: casts bitwise (scale from amax, round to nearest even with saturation, per tensor, per
 * 1x128 tile, per 128x128 block, transposed), GEMMs against double sums of the same fp8 values,
 * delayed scaling's amax history step by step as Transformer Engine rolls it, the NaN flag, and
 * the producers that take their output's amax for the cast (the cast then gives exactly what
 * its own amax pass gives). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD_EPS 1e-3f
#define FD_FLOOR 0.1
#include "cpu_op_fixture.h"

static int setup(void **state) {
    return fixture_setup(state, 777u);
}

static int teardown(void **state) {
    return fixture_teardown(state, 1);
}

/* ---- the scalar emulation ---- */

static float ref_q(float v, float scale, gt_fp8_format f) {
    return gt_fp8_to_float(gt_fp8_from_float(v * scale, f), f);
}

static float ref_amax(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* 2^floor(log2(fp8_max / amax)), found by doubling and halving */
static float ref_pow2_scale(float amax, gt_fp8_format f) {
    if (amax == 0) return 1;
    double target = gt_fp8_max(f) / (double)amax, s = 1;
    while (s * 2 <= target)
        s *= 2;
    while (s > target)
        s /= 2;
    return (float)s;
}

/* bitwise on purpose: the emulation must give the very same codes (memcmp, not ==, so that
 * -0 against +0 and NaN payloads count) */
static int same_bits(float a, float b) {
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    return memcmp(&a, &b, sizeof a) == 0;
}

static void assert_bits(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!same_bits(got[i], want[i]))
            fail_msg("%s[%zu]: %.9g != %.9g", what, i, (double)got[i], (double)want[i]);
}

static gt_fp8_cast_spec spec(gt_fp8_scaling sc, gt_fp8_format f, int tile_rows) {
    return (gt_fp8_cast_spec){sc, f, tile_rows, 1, NULL};
}

static gt_fp8_meta meta_of(float scale, gt_fp8_format f) {
    return (gt_fp8_meta){scale, 1.0f / scale, 0.0f, (int32_t)f};
}

/* ---- casts ---- */

static void test_tensorwise_cast_scales_by_fp8_max_over_amax(void **state) {
    fixture *f = *state;
    for (int fi = 0; fi < 2; fi++) {
        gt_fp8_format fmt = fi ? GT_FP8_E5M2 : GT_FP8_E4M3;
        int R = 5, C = 37;
        float *x = rand_buf(f, (size_t)R * C, 3.0f), *q = zeros((size_t)R * C), sinv = 0;
        gt_fp8_meta m = meta_of(1, fmt);
        f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, R, C, 0, spec(GT_FP8_TENSORWISE, fmt, 1), &m,
                            &f->st);
        float amax = ref_amax(x, (size_t)R * C), scale = gt_fp8_max(fmt) / amax;
        float *want = zeros((size_t)R * C);
        for (int i = 0; i < R * C; i++)
            want[i] = ref_q(x[i], scale, fmt);
        assert_bits(q, want, (size_t)R * C, "q");
        assert_true(m.amax == amax && m.scale == scale && m.scale_inv == 1.0f / scale);
        assert_true(sinv == 1.0f / scale);
        assert_int_equal(f->st.nan_flags, 0);
        free(x), free(q), free(want);
    }
}

static void test_transposed_cast_is_the_cast_of_the_transpose(void **state) {
    fixture *f = *state;
    int R = 7, C = 150;
    float *x = rand_buf(f, (size_t)R * C, 1.0f), *xt = zeros((size_t)R * C);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            xt[(size_t)j * R + i] = x[(size_t)i * C + j];
    gt_fp8_scaling kinds[] = {GT_FP8_TENSORWISE, GT_FP8_BLOCKWISE};
    for (int k = 0; k < 2; k++) {
        float *q1 = zeros((size_t)R * C), *q2 = zeros((size_t)R * C);
        float s1[256] = {0}, s2[256] = {0}; /* blockwise: one per row of q, 150 */
        gt_fp8_meta m1 = meta_of(1, GT_FP8_E4M3), m2 = m1;
        gt_fp8_cast_spec sp = spec(kinds[k], GT_FP8_E4M3, 1);
        f->b->ops->fp8_cast(f->b, f->s, q1, s1, x, R, C, 1, sp, &m1, &f->st);
        f->b->ops->fp8_cast(f->b, f->s, q2, s2, xt, C, R, 0, sp, &m2, &f->st);
        assert_bits(q1, q2, (size_t)R * C, "q");
        assert_bits(s1, s2, gt_fp8_scale_count(C, R, 1), "scale_inv");
        free(q1), free(q2);
    }
    free(x), free(xt);
}

/* 3 rows of 300: tiles of 128, 128 and 44 columns, each of its own magnitude */
static void test_blockwise_cast_gives_each_1x128_tile_a_power_of_two_scale(void **state) {
    fixture *f = *state;
    int R = 3, C = 300, ntc = 3;
    float *x = rand_buf(f, (size_t)R * C, 1.0f), *q = zeros((size_t)R * C);
    for (int i = 0; i < R * C; i++)
        x[i] *= ldexpf(1.0f, (i % C) / 128 * 5 - (i / C) * 3); /* tile (r, t): 2^(5t - 3r) */
    float sinv[12] = {0}; /* cuBLASLt's layout: rows contiguous (padded to 4), tile t at 4t */
    f->b->ops->fp8_cast(f->b, f->s, q, sinv, x, R, C, 0, spec(GT_FP8_BLOCKWISE, GT_FP8_E4M3, 1),
                        NULL, &f->st);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < ntc; t++) {
            int c0 = t * 128, c1 = c0 + 128 < C ? c0 + 128 : C;
            float scale =
                ref_pow2_scale(ref_amax(x + (size_t)r * C + c0, (size_t)(c1 - c0)), GT_FP8_E4M3);
            assert_true(sinv[t * 4 + r] == 1.0f / scale);
            for (int c = c0; c < c1; c++) {
                float want = ref_q(x[(size_t)r * C + c], scale, GT_FP8_E4M3);
                if (!same_bits(q[(size_t)r * C + c], want))
                    fail_msg("tile (%d, %d) element %d: %.9g != %.9g", r, t, c,
                             (double)q[(size_t)r * C + c], (double)want);
            }
        }
    free(x), free(q);
}

/* 200 x 130: blocks of 128 x 128, 128 x 2, 72 x 128, 72 x 2 */
static void test_blockwise_weight_cast_scales_128x128_blocks(void **state) {
    fixture *f = *state;
    int R = 200, C = 130;
    float *x = rand_buf(f, (size_t)R * C, 1.0f), *q = zeros((size_t)R * C);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            x[(size_t)i * C + j] *= ldexpf(1.0f, 4 * (i / 128) - 7 * (j / 128));
    float sinv[8] = {0}; /* cuBLASLt's layout: block rows of ceil(C / 128) padded to 4 */
    f->b->ops->fp8_cast(f->b, f->s, q, sinv, x, R, C, 0,
                        spec(GT_FP8_BLOCKWISE, GT_FP8_E4M3, GT_FP8_TILE), NULL, &f->st);
    for (int bi = 0; bi < 2; bi++)
        for (int bj = 0; bj < 2; bj++) {
            float amax = 0;
            for (int i = bi * 128; i < R && i < bi * 128 + 128; i++)
                for (int j = bj * 128; j < C && j < bj * 128 + 128; j++)
                    amax = fmaxf(amax, fabsf(x[(size_t)i * C + j]));
            float scale = ref_pow2_scale(amax, GT_FP8_E4M3);
            assert_true(sinv[bi * 4 + bj] == 1.0f / scale);
            for (int i = bi * 128; i < R && i < bi * 128 + 128; i++)
                for (int j = bj * 128; j < C && j < bj * 128 + 128; j++) {
                    float want = ref_q(x[(size_t)i * C + j], scale, GT_FP8_E4M3);
                    assert_true(same_bits(q[(size_t)i * C + j], want));
                }
        }
    free(x), free(q);
}

static void test_delayed_cast_uses_the_stored_scale_and_keeps_the_step_amax(void **state) {
    fixture *f = *state;
    int n = 64;
    float *x = rand_buf(f, (size_t)n, 2.0f), *q = zeros((size_t)n), sinv = 0;
    gt_fp8_meta m = meta_of(96.0f, GT_FP8_E5M2);
    gt_fp8_cast_spec sp = spec(GT_FP8_DELAYED, GT_FP8_E5M2, 1);
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, 1, n, 0, sp, &m, &f->st);
    for (int i = 0; i < n; i++) {
        float want = ref_q(x[i], 96.0f, GT_FP8_E5M2);
        assert_true(same_bits(q[i], want));
    }
    float amax = ref_amax(x, (size_t)n);
    assert_true(m.amax == amax && m.scale == 96.0f && sinv == 1.0f / 96.0f);
    /* a later micro-batch with a smaller amax leaves the step's max */
    for (int i = 0; i < n; i++)
        x[i] *= 0.5f;
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, 1, n, 0, sp, &m, &f->st);
    assert_true(m.amax == amax);
    /* an evaluation's cast (record 0) records nothing */
    for (int i = 0; i < n; i++)
        x[i] *= 8.0f;
    sp.record = 0;
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, 1, n, 0, sp, &m, &f->st);
    assert_true(m.amax == amax);
    free(x), free(q);
}

static void test_all_zero_tensor_keeps_scale_one(void **state) {
    fixture *f = *state;
    float x[8] = {0}, q[8], sinv = 0, bs[1] = {0};
    gt_fp8_meta m = meta_of(5.0f, GT_FP8_E4M3);
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, 1, 8, 0, spec(GT_FP8_TENSORWISE, GT_FP8_E4M3, 1),
                        &m, &f->st);
    assert_true(m.scale == 1.0f && sinv == 1.0f);
    f->b->ops->fp8_cast(f->b, f->s, q, bs, x, 1, 8, 0, spec(GT_FP8_BLOCKWISE, GT_FP8_E4M3, 1), NULL,
                        &f->st);
    assert_true(bs[0] == 1.0f);
    assert_int_equal(f->st.nan_flags, 0);
}

static void cast_flags(fixture *f, float bad, gt_fp8_scaling sc) {
    float x[4] = {1, -2, bad, 3}, q[4], sinv[1];
    gt_fp8_meta m = meta_of(1, GT_FP8_E4M3);
    f->st.nan_flags = 0;
    f->b->ops->fp8_cast(f->b, f->s, q, sinv, x, 1, 4, 0, spec(sc, GT_FP8_E4M3, 1), &m, &f->st);
}

static void test_nan_or_inf_amax_sets_the_fp8_nan_flag(void **state) {
    fixture *f = *state;
    gt_fp8_scaling kinds[] = {GT_FP8_TENSORWISE, GT_FP8_DELAYED, GT_FP8_BLOCKWISE};
    for (int k = 0; k < 3; k++) {
        cast_flags(f, NAN, kinds[k]);
        assert_int_equal(f->st.nan_flags, GT_NAN_FP8);
        cast_flags(f, INFINITY, kinds[k]);
        assert_int_equal(f->st.nan_flags, GT_NAN_FP8);
        cast_flags(f, 4.0f, kinds[k]); /* and a finite tensor does not */
        assert_int_equal(f->st.nan_flags, 0);
    }
}

static void test_scale_overflow_sets_the_fp8_nan_flag(void **state) {
    fixture *f = *state;
    float x[2] = {1e-39f, 0}, q[2], sinv = 0; /* 448 / 1e-39 is past FLT_MAX */
    gt_fp8_meta m = meta_of(1, GT_FP8_E4M3);
    f->st.nan_flags = 0;
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, 1, 2, 0, spec(GT_FP8_TENSORWISE, GT_FP8_E4M3, 1),
                        &m, &f->st);
    assert_int_equal(f->st.nan_flags, GT_NAN_FP8);
    f->st.nan_flags = 0;
}

/* ---- the amax a producer takes for the cast of its output ---- */

static uint32_t ref_amax_bits(const float *x, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++)
        m = gt_fp8_amax_bits(x[i]) > m ? gt_fp8_amax_bits(x[i]) : m;
    return m;
}

/* out [N, d] of rmsnorm_fwd_amax and its amax; the same through rmsnorm_fwd, bitwise */
static float *norm_with_amax(fixture *f, const float *x, int N, int d, uint32_t *amax) {
    float *w = rand_buf(f, (size_t)d, 2.0f), *out = zeros((size_t)N * d),
          *ref = zeros((size_t)N * d);
    float *rstd = zeros((size_t)N), *rstd_ref = zeros((size_t)N);
    f->b->ops->rmsnorm_fwd_amax(f->b, f->s, out, rstd, x, w, N, d, 1e-5f, amax);
    f->b->ops->rmsnorm_fwd(f->b, f->s, ref, rstd_ref, x, w, N, d, 1e-5f);
    assert_bits(out, ref, (size_t)N * d, "rmsnorm_fwd_amax out");
    assert_bits(rstd, rstd_ref, (size_t)N, "rmsnorm_fwd_amax rstd");
    free(w), free(ref), free(rstd), free(rstd_ref);
    return out;
}

static void test_producers_fold_the_amax_of_what_they_store(void **state) {
    fixture *f = *state;
    int N = 6, d = 40, F = 24;
    float *x = rand_buf(f, (size_t)N * d, 3.0f);
    uint32_t amax = 0;
    float *out = norm_with_amax(f, x, N, d, &amax);
    assert_int_equal(amax, ref_amax_bits(out, (size_t)N * d));
    /* a max: a larger value already there stays */
    uint32_t big = gt_fp8_amax_bits(1e6f), held = big;
    free(norm_with_amax(f, x, N, d, &held));
    assert_int_equal(held, big);
    float *gu = rand_buf(f, (size_t)N * 2 * F, 4.0f), *h = zeros((size_t)N * F);
    float *href = zeros((size_t)N * F);
    amax = 0;
    f->b->ops->swiglu_fwd_amax(f->b, f->s, h, gu, N, F, &amax);
    f->b->ops->swiglu_fwd(f->b, f->s, href, gu, N, F);
    assert_bits(h, href, (size_t)N * F, "swiglu_fwd_amax out");
    assert_int_equal(amax, ref_amax_bits(h, (size_t)N * F));
    /* a NaN in the output wins, as in the cast's own pass */
    gu[7] = NAN;
    amax = 0;
    f->b->ops->swiglu_fwd_amax(f->b, f->s, h, gu, N, F, &amax);
    assert_true(amax > 0x7f800000u);
    free(x), free(out), free(gu), free(h), free(href);
}

/* The backward's producers: rmsnorm_bwd_part_amax's residual gradient and swiglu_bwd_amax's
 * gate/up gradient are those of the plain ops, bitwise, and the amax is theirs */
static void test_backward_producers_fold_the_amax_of_what_they_store(void **state) {
    fixture *f = *state;
    int N = 6, d = 40, F = 24, parts = gt_rmsnorm_parts(N);
    float *x = rand_buf(f, (size_t)N * d, 3.0f), *w = rand_buf(f, (size_t)d, 2.0f);
    float *dy = rand_buf(f, (size_t)N * d, 1.5f), *din = rand_buf(f, (size_t)N * d, 0.5f);
    float *rstd = zeros((size_t)N), *tmp = zeros((size_t)N * d);
    f->b->ops->rmsnorm_fwd(f->b, f->s, tmp, rstd, x, w, N, d, 1e-5f);
    float *dres = zeros((size_t)N * d), *ref = zeros((size_t)N * d);
    float *part = zeros((size_t)parts * d), *part_ref = zeros((size_t)parts * d);
    uint32_t amax = 0;
    f->b->ops->rmsnorm_bwd_part_amax(f->b, f->s, dres, din, part, dy, x, w, rstd, N, d, &amax);
    f->b->ops->rmsnorm_bwd_part(f->b, f->s, ref, din, part_ref, dy, x, w, rstd, N, d);
    assert_bits(dres, ref, (size_t)N * d, "rmsnorm_bwd_part_amax dout_res");
    assert_bits(part, part_ref, (size_t)parts * d, "rmsnorm_bwd_part_amax part");
    assert_int_equal(amax, ref_amax_bits(ref, (size_t)N * d));
    assert_true(amax > 0);
    float *gu = rand_buf(f, (size_t)N * 2 * F, 4.0f), *dh = rand_buf(f, (size_t)N * F, 2.0f);
    float *dgu = zeros((size_t)N * 2 * F), *dgu_ref = zeros((size_t)N * 2 * F);
    amax = 0;
    f->b->ops->swiglu_bwd_amax(f->b, f->s, dgu, dh, gu, N, F, &amax);
    f->b->ops->swiglu_bwd(f->b, f->s, dgu_ref, dh, gu, N, F);
    assert_bits(dgu, dgu_ref, (size_t)N * 2 * F, "swiglu_bwd_amax dgu");
    /* both halves count: the largest |value| of the up half alone is not enough */
    assert_int_equal(amax, ref_amax_bits(dgu_ref, (size_t)N * 2 * F));
    /* rope's backward: the amax of all of dqkv, the v heads it does not turn included (made
     * the largest values here, so a fold over q and k alone would miss them) */
    int B = 2, T = 3, H = 2, KV = 1, hd = 8, C = (H + 2 * KV) * hd;
    size_t nq = (size_t)B * T * C;
    float *dq = rand_buf(f, nq, 1.0f), *dq_ref = zeros(nq);
    for (int r = 0; r < B * T; r++)
        dq[(size_t)r * C + (H + KV) * hd + 1] = 50.0f + (float)r;
    memcpy(dq_ref, dq, nq * sizeof *dq);
    for (int scaled = 0; scaled < 2; scaled++) {
        float *d = zeros(nq);
        memcpy(d, dq, nq * sizeof *d);
        float *e = zeros(nq);
        memcpy(e, dq_ref, nq * sizeof *e);
        amax = 0;
        f->b->ops->rope_bwd_amax(f->b, f->s, d, B, T, H, KV, hd, 10000.0f, scaled ? 8.0f : 0.0f,
                                 &amax);
        if (scaled)
            f->b->ops->rope_scaled_bwd(f->b, f->s, e, B, T, H, KV, hd, 10000.0f, 8.0f);
        else
            f->b->ops->rope_bwd(f->b, f->s, e, B, T, H, KV, hd, 10000.0f);
        assert_bits(d, e, nq, "rope_bwd_amax dqkv");
        assert_int_equal(amax, ref_amax_bits(e, nq));
        assert_int_equal(amax, gt_fp8_amax_bits(50.0f + (float)(B * T - 1)));
        free(d), free(e);
    }
    free(dq), free(dq_ref);
    free(x), free(w), free(dy), free(din), free(rstd), free(tmp), free(dres), free(ref);
    free(part), free(part_ref), free(gu), free(dh), free(dgu), free(dgu_ref);
}

/* A cast of x [R, C] with and without x's amax given, every layout and scaling state equal */
static void cast_given_vs_own(fixture *f, const float *x, int R, int C, gt_fp8_format fmt,
                              int record) {
    size_t n = (size_t)R * C;
    uint32_t amax = ref_amax_bits(x, n);
    for (int mode = 0; mode < 3; mode++) {
        float *q[2] = {zeros(n), zeros(n)}, *qt[2] = {zeros(n), zeros(n)}, si[2][2] = {{0}};
        gt_fp8_meta m[2] = {meta_of(3.0f, fmt), meta_of(3.0f, fmt)};
        uint32_t flags[2];
        for (int given = 0; given < 2; given++) {
            gt_fp8_cast_spec sp = {GT_FP8_TENSORWISE, fmt, 1, record, given ? &amax : NULL};
            f->st.nan_flags = 0;
            if (mode == 2)
                f->b->ops->fp8_cast_pair(f->b, f->s, q[given], &si[given][0], qt[given],
                                         &si[given][1], x, R, C, sp, &m[given], &f->st);
            else
                f->b->ops->fp8_cast(f->b, f->s, q[given], &si[given][0], x, R, C, mode, sp,
                                    &m[given], &f->st);
            flags[given] = f->st.nan_flags;
        }
        assert_bits(q[1], q[0], n, "q");
        assert_bits(qt[1], qt[0], n, "q^T");
        assert_memory_equal(si[1], si[0], sizeof si[0]);
        assert_memory_equal(&m[1], &m[0], sizeof m[0]);
        assert_int_equal(flags[1], flags[0]);
        free(q[0]), free(q[1]), free(qt[0]), free(qt[1]);
    }
    f->st.nan_flags = 0;
}

static void test_cast_with_the_producer_amax_equals_its_own_pass(void **state) {
    fixture *f = *state;
    int R = 9, C = 70;
    float *x = rand_buf(f, (size_t)R * C, 5.0f);
    for (int record = 0; record < 2; record++) {
        cast_given_vs_own(f, x, R, C, GT_FP8_E4M3, record);
        cast_given_vs_own(f, x, R, C, GT_FP8_E5M2, record);
    }
    /* an all-zero tensor (scale 1), an infinity and a NaN (the flag, the recorded NaN) */
    float *z = zeros((size_t)R * C);
    cast_given_vs_own(f, z, R, C, GT_FP8_E4M3, 1);
    x[5] = INFINITY;
    cast_given_vs_own(f, x, R, C, GT_FP8_E4M3, 1);
    x[17] = -NAN;
    cast_given_vs_own(f, x, R, C, GT_FP8_E4M3, 1);
    free(x), free(z);
}

/* The cast reads the amax it is given, not its input: twice the amax, half the scale */
static void test_cast_scales_by_the_amax_it_is_given(void **state) {
    fixture *f = *state;
    int R = 4, C = 33;
    float *x = rand_buf(f, (size_t)R * C, 2.0f), *q = zeros((size_t)R * C), sinv = 0;
    float twice = 2.0f * ref_amax(x, (size_t)R * C);
    uint32_t bits = gt_fp8_amax_bits(twice);
    gt_fp8_meta m = meta_of(1, GT_FP8_E4M3);
    gt_fp8_cast_spec sp = {GT_FP8_TENSORWISE, GT_FP8_E4M3, 1, 1, &bits};
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, R, C, 0, sp, &m, &f->st);
    float scale = GT_FP8_E4M3_MAX / twice;
    assert_true(m.amax == twice && m.scale == scale && sinv == 1.0f / scale);
    for (int i = 0; i < R * C; i++)
        assert_true(same_bits(q[i], ref_q(x[i], scale, GT_FP8_E4M3)));
    free(x), free(q);
}

/* ---- GEMMs ---- */

/* fp8 values (codes of E4M3 times a scale of 2^-2) */
static float *fp8_values(fixture *f, size_t n) {
    float *v = rand_buf(f, n, 200.0f);
    for (size_t i = 0; i < n; i++)
        v[i] = ref_q(v[i], 1.0f, GT_FP8_E4M3);
    return v;
}

static void check_gemm(const float *out, const double *want, const double *mag, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabs(out[i] - want[i]) > 1e-6 * mag[i] + 1e-30)
            fail_msg("out[%zu] = %.9g, scalar emulation %.9g", i, (double)out[i], want[i]);
}

static void test_tensorwise_gemm_scales_the_fp32_sum_back(void **state) {
    fixture *f = *state;
    int M = 5, N = 6, K = 300;
    float *a = fp8_values(f, (size_t)M * K), *w = fp8_values(f, (size_t)N * K);
    float *bias = rand_buf(f, (size_t)N, 1.0f), *res = rand_buf(f, (size_t)M * N, 1.0f);
    float *out = zeros((size_t)M * N), sa = 0.01f, sw = 0.003f;
    f->b->ops->fp8_gemm(f->b, f->s, out, 0, 0, (gt_fp8_operand){a, &sa, 1, GT_FP8_E4M3},
                        (gt_fp8_operand){w, &sw, 1, GT_FP8_E4M3}, GT_FP8_TENSORWISE, bias, res, M,
                        N, K);
    double want[30], mag[30];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0, ab = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)a[m * K + k] * w[n * K + k];
                acc += p, ab += fabs(p);
            }
            want[m * N + n] = acc * sa * sw + bias[n] + res[m * N + n];
            mag[m * N + n] = ab * sa * sw + fabs(bias[n]) + fabs(res[m * N + n]);
        }
    check_gemm(out, want, mag, (size_t)M * N);
    free(a), free(w), free(bias), free(res), free(out);
}

/* K = 300: three K tiles, each with its own scales on both sides; weight rows in 128-row
 * blocks; the fp32 result accumulates into what out held */
static void test_blockwise_gemm_scales_each_k_tile_and_accumulates(void **state) {
    fixture *f = *state;
    int M = 4, N = 130, K = 300;
    float *a = fp8_values(f, (size_t)M * K), *w = fp8_values(f, (size_t)N * K);
    /* cuBLASLt's layouts: sa tile (m, t) at t * 4 + m; sw block (n / 128, t) at (n / 128) * 4 +
     * t (3 K tiles padded to 4) */
    float sa[3 * 4], sw[2 * 4];
    for (int i = 0; i < 3 * 4; i++)
        sa[i] = ldexpf(1.0f, -(i % 5));
    for (int i = 0; i < 2 * 4; i++)
        sw[i] = ldexpf(1.0f, -3 - (i % 4));
    float *out = rand_buf(f, (size_t)M * N, 1.0f), *before = malloc((size_t)M * N * sizeof *out);
    memcpy(before, out, (size_t)M * N * sizeof *out);
    f->b->ops->fp8_gemm(f->b, f->s, out, 1, 1, (gt_fp8_operand){a, sa, 1, GT_FP8_E4M3},
                        (gt_fp8_operand){w, sw, GT_FP8_TILE, GT_FP8_E4M3}, GT_FP8_BLOCKWISE, NULL,
                        NULL, M, N, K);
    double *want = calloc((size_t)M * N, sizeof *want), *mag = calloc((size_t)M * N, sizeof *mag);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = before[m * N + n], ab = fabs(before[m * N + n]);
            for (int k = 0; k < K; k++) {
                double s = (double)sa[(k / 128) * 4 + m] * sw[(n / 128) * 4 + k / 128];
                double p = (double)a[m * K + k] * w[n * K + k] * s;
                acc += p, ab += fabs(p);
            }
            want[m * N + n] = acc, mag[m * N + n] = ab;
        }
    check_gemm(out, want, mag, (size_t)M * N);
    free(a), free(w), free(out), free(before), free(want), free(mag);
}

/* ---- delayed scaling ---- */

/* TE's amax_and_scale_update, written out: history[0] holds the step's amax; the scale comes
 * from the history's max (or its most recent entry); then the history rolls by one. */
static void ref_update(float *h, int len, float step_amax, float *scale, int use_max, int margin,
                       gt_fp8_format f) {
    h[0] = step_amax;
    float amax = h[0];
    for (int j = 1; use_max && j < len; j++)
        amax = fmaxf(amax, h[j]);
    if (amax > 0 && isfinite(amax)) *scale = (float)((gt_fp8_max(f) / amax) / ldexp(1.0, margin));
    float *roll = malloc((size_t)len * sizeof *roll);
    for (int j = 0; j < len; j++)
        roll[j] = h[(j + 1) % len];
    memcpy(h, roll, (size_t)len * sizeof *h);
    h[0] = 0;
    free(roll);
}

static void check_history(fixture *f, int len, int use_max, int margin) {
    const float amaxes[] = {2.0f, 8.0f, 0.5f, 0.25f, 1.0f, 0.0f, 3.0f};
    gt_fp8_meta m[2] = {meta_of(1, GT_FP8_E4M3), meta_of(1, GT_FP8_E5M2)};
    float *hist = zeros((size_t)2 * len), *ref = zeros((size_t)2 * len);
    float ref_scale[2] = {1, 1};
    for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; i++) {
        m[0].amax = amaxes[i];
        m[1].amax = 2 * amaxes[i];
        f->b->ops->fp8_amax_update(f->b, f->s, m, hist, 2, len, use_max, margin, &f->st);
        ref_update(ref, len, amaxes[i], &ref_scale[0], use_max, margin, GT_FP8_E4M3);
        ref_update(ref + len, len, 2 * amaxes[i], &ref_scale[1], use_max, margin, GT_FP8_E5M2);
        for (int t = 0; t < 2; t++) {
            if (m[t].scale != ref_scale[t] || m[t].scale_inv != 1.0f / ref_scale[t])
                fail_msg("len %d max %d margin %d step %zu tensor %d: scale %.9g, want %.9g", len,
                         use_max, margin, i, t, (double)m[t].scale, (double)ref_scale[t]);
            assert_true(m[t].amax == 0.0f);
        }
        assert_bits(hist, ref, (size_t)2 * len, "history");
    }
    assert_int_equal(f->st.nan_flags, 0);
    free(hist), free(ref);
}

static void test_delayed_scale_from_most_recent_amax(void **state) {
    check_history(*state, 1, 0, 0);
    check_history(*state, 4, 0, 0);
}

static void test_delayed_scale_from_max_of_the_history_window(void **state) {
    check_history(*state, 3, 1, 0);
    check_history(*state, 16, 1, 0);
}

static void test_delayed_scale_leaves_2_to_the_margin_of_headroom(void **state) {
    check_history(*state, 2, 1, 2);
}

/* ---- argument checks ---- */

static void test_bad_fp8_arguments_are_reported_not_run(void **state) {
    fixture *f = *state;
    float x[4] = {1, 2, 3, 4}, q[4], s[1];
    gt_error err = {0};
    f->b->ops->fp8_cast(f->b, f->s, q, s, x, 2, 2, 0, spec(GT_FP8_TENSORWISE, GT_FP8_E4M3, 1), NULL,
                        &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "gt_fp8_meta"));
    f->b->ops->fp8_cast(f->b, f->s, q, s, x, 2, 2, 0, spec(GT_FP8_BLOCKWISE, GT_FP8_E4M3, 7), NULL,
                        &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tiles"));
    f->b->ops->fp8_amax_update(f->b, f->s, NULL, NULL, 1, 0, 0, 0, &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "history_len"));
    /* a given amax is current scaling's; delayed scaling and the experts take their own */
    uint32_t amax = gt_fp8_amax_bits(4.0f);
    gt_fp8_meta m = meta_of(1, GT_FP8_E4M3);
    gt_fp8_cast_spec sp = {GT_FP8_DELAYED, GT_FP8_E4M3, 1, 1, &amax};
    f->b->ops->fp8_cast(f->b, f->s, q, s, x, 2, 2, 0, sp, &m, &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tensorwise"));
    sp.scaling = GT_FP8_TENSORWISE;
    f->b->ops->fp8_cast_experts(f->b, f->s, q, s, NULL, NULL, x, 1, 2, 2, sp, &m, &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "amax"));
    f->b->ops->rmsnorm_fwd_amax(f->b, f->s, q, s, x, x, 1, 4, 1e-5f, NULL);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "amax"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensorwise_cast_scales_by_fp8_max_over_amax),
        cmocka_unit_test(test_transposed_cast_is_the_cast_of_the_transpose),
        cmocka_unit_test(test_blockwise_cast_gives_each_1x128_tile_a_power_of_two_scale),
        cmocka_unit_test(test_blockwise_weight_cast_scales_128x128_blocks),
        cmocka_unit_test(test_delayed_cast_uses_the_stored_scale_and_keeps_the_step_amax),
        cmocka_unit_test(test_all_zero_tensor_keeps_scale_one),
        cmocka_unit_test(test_nan_or_inf_amax_sets_the_fp8_nan_flag),
        cmocka_unit_test(test_scale_overflow_sets_the_fp8_nan_flag),
        cmocka_unit_test(test_producers_fold_the_amax_of_what_they_store),
        cmocka_unit_test(test_backward_producers_fold_the_amax_of_what_they_store),
        cmocka_unit_test(test_cast_with_the_producer_amax_equals_its_own_pass),
        cmocka_unit_test(test_cast_scales_by_the_amax_it_is_given),
        cmocka_unit_test(test_tensorwise_gemm_scales_the_fp32_sum_back),
        cmocka_unit_test(test_blockwise_gemm_scales_each_k_tile_and_accumulates),
        cmocka_unit_test(test_delayed_scale_from_most_recent_amax),
        cmocka_unit_test(test_delayed_scale_from_max_of_the_history_window),
        cmocka_unit_test(test_delayed_scale_leaves_2_to_the_margin_of_headroom),
        cmocka_unit_test(test_bad_fp8_arguments_are_reported_not_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
