/* The CPU backend's fp8 grouped expert GEMMs (backend/cpu/cpu_moe_fp8.c) against double sums of
 * the same fp8 values written here: the forward (E4M3 x E4M3, one scale for the routed rows,
 * one per expert's weight), the data gradient (the E5M2 gradient times the transposed weight
 * copies) and the weight gradient (the transposed gradient and input over each expert's
 * columns), rows outside every group left alone, empty experts, accumulation, bad shapes;
 * and the experts' weight casts (fp8_cast_experts), bitwise each expert's own fp8_cast. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FD_EPS 1e-3f
#define FD_FLOOR 0.1
#include "cpu_op_fixture.h"

#define REL_TOL 1e-5 /* fp32 sums of at most a few dozen exact products against double's */
#define SENTINEL 12345.0f

enum { R = 10, E = 3, NF = 12, K = 40 };
/* expert 0: rows 1..3, expert 1: none, expert 2: rows 4..8; rows 0 and 9 in no group */
static const int32_t k_offsets[E + 1] = {1, 4, 4, 9};

static int setup(void **state) {
    return fixture_setup(state, 4242u);
}

static int teardown(void **state) {
    return fixture_teardown(state, 1);
}

static gt_fp8_cast_spec current(gt_fp8_format f) {
    return (gt_fp8_cast_spec){GT_FP8_TENSORWISE, f, 1, 1, NULL};
}

static gt_fp8_meta fresh(gt_fp8_format f) {
    return (gt_fp8_meta){1.0f, 1.0f, 0.0f, (int32_t)f};
}

/* q [rows, cols] (or its transpose) of x by current scaling; returns the inverse scale */
static float cast(fixture *f, float *q, const float *x, int rows, int cols, int transpose,
                  gt_fp8_format fmt) {
    gt_fp8_meta m = fresh(fmt);
    float sinv = 0;
    f->b->ops->fp8_cast(f->b, f->s, q, &sinv, x, rows, cols, transpose, current(fmt), &m, &f->st);
    return sinv;
}

static void assert_close(double got, double want, const char *what, int i) {
    double tol = REL_TOL * (fabs(want) > 1e-3 ? fabs(want) : 1e-3);
    if (fabs(got - want) > tol) fail_msg("%s[%d]: %.9g, want %.9g", what, i, got, want);
}

/* Each expert's weights at their own magnitude, so their scales differ */
static float *expert_weights(fixture *f, int rows, int cols) {
    float *w = rand_buf(f, (size_t)E * rows * cols, 1.0f);
    for (int e = 0; e < E; e++)
        for (int i = 0; i < rows * cols; i++)
            w[(size_t)e * rows * cols + i] *= 0.05f * (float)(1 << (2 * e));
    return w;
}

static void test_fp8_expert_forward_is_each_groups_fp8_product_times_its_scales(void **state) {
    fixture *f = *state;
    float *x = rand_buf(f, (size_t)R * K, 2.0f), *w = expert_weights(f, NF, K);
    float *qx = zeros((size_t)R * K), *qw = zeros((size_t)E * NF * K), sw[E];
    float sx = cast(f, qx, x, R, K, 0, GT_FP8_E4M3);
    for (int e = 0; e < E; e++)
        sw[e] = cast(f, qw + (size_t)e * NF * K, w + (size_t)e * NF * K, NF, K, 0, GT_FP8_E4M3);
    assert_true(sw[0] != sw[2]); /* one scale per expert */
    float *out = zeros((size_t)R * NF);
    for (int i = 0; i < R * NF; i++)
        out[i] = SENTINEL;
    f->b->ops->moe_fp8_matmul(f->b, f->s, out, GT_FP8_FAST_ACCUM,
                              (gt_fp8_operand){qx, &sx, 1, GT_FP8_E4M3},
                              (gt_fp8_operand){qw, sw, 1, GT_FP8_E4M3}, k_offsets, R, E, NF, K);
    for (int r = 0; r < R; r++) {
        int e = -1;
        for (int g = 0; g < E; g++)
            if (r >= k_offsets[g] && r < k_offsets[g + 1]) e = g;
        for (int n = 0; n < NF; n++) {
            float got = out[(size_t)r * NF + n];
            if (e < 0) {
                assert_true(got == SENTINEL);
                continue;
            }
            double want =
                dotd(qx + (size_t)r * K, qw + ((size_t)e * NF + n) * K, K) * ((double)sx * sw[e]);
            assert_close(got, want, "out", r * NF + n);
        }
    }
    free(x), free(w), free(qx), free(qw), free(out);
}

/* da = dout @ w[e]: the E5M2 gradient [R, NF] against each expert's w^T [K, NF] copy */
static void test_fp8_expert_data_gradient_takes_the_transposed_weight_copies(void **state) {
    fixture *f = *state;
    float *dout = rand_buf(f, (size_t)R * NF, 0.01f), *w = expert_weights(f, NF, K);
    float *qd = zeros((size_t)R * NF), *qwt = zeros((size_t)E * K * NF), swt[E];
    float *qw = zeros((size_t)E * NF * K);
    float sd = cast(f, qd, dout, R, NF, 0, GT_FP8_E5M2);
    for (int e = 0; e < E; e++) {
        swt[e] = cast(f, qwt + (size_t)e * K * NF, w + (size_t)e * NF * K, NF, K, 1, GT_FP8_E4M3);
        float s = cast(f, qw + (size_t)e * NF * K, w + (size_t)e * NF * K, NF, K, 0, GT_FP8_E4M3);
        assert_true(s == swt[e]); /* both layouts of a weight share its scale */
    }
    float *da = zeros((size_t)R * K);
    f->b->ops->moe_fp8_matmul(f->b, f->s, da, 0, (gt_fp8_operand){qd, &sd, 1, GT_FP8_E5M2},
                              (gt_fp8_operand){qwt, swt, 1, GT_FP8_E4M3}, k_offsets, R, E, K, NF);
    for (int e = 0; e < E; e++)
        for (int r = k_offsets[e]; r < k_offsets[e + 1]; r++)
            for (int k = 0; k < K; k++) {
                double want = 0;
                for (int n = 0; n < NF; n++)
                    want += (double)qd[(size_t)r * NF + n] * qw[((size_t)e * NF + n) * K + k];
                assert_close(da[(size_t)r * K + k], want * ((double)sd * swt[e]), "da", r * K + k);
            }
    free(dout), free(w), free(qd), free(qwt), free(qw), free(da);
}

/* dw[e] = dout[group]^T @ x[group] from the transposed casts dout^T [NF, R] and x^T [K, R] */
static void test_fp8_expert_weight_gradient_sums_each_experts_rows(void **state) {
    fixture *f = *state;
    float *dout = rand_buf(f, (size_t)R * NF, 0.01f), *x = rand_buf(f, (size_t)R * K, 2.0f);
    float *qdt = zeros((size_t)NF * R), *qxt = zeros((size_t)K * R);
    float sd = cast(f, qdt, dout, R, NF, 1, GT_FP8_E5M2);
    float sx = cast(f, qxt, x, R, K, 1, GT_FP8_E4M3);
    size_t n_dw = (size_t)E * NF * K;
    float *dw = zeros(n_dw), *want = zeros(n_dw);
    for (size_t i = 0; i < n_dw; i++)
        dw[i] = SENTINEL;
    for (int e = 0; e < E; e++)
        for (int n = 0; n < NF; n++)
            for (int k = 0; k < K; k++) {
                double acc = 0;
                for (int r = k_offsets[e]; r < k_offsets[e + 1]; r++)
                    acc += (double)qdt[(size_t)n * R + r] * qxt[(size_t)k * R + r];
                want[((size_t)e * NF + n) * K + k] = (float)(acc * ((double)sd * sx));
            }
    for (int acc = 0; acc < 2; acc++) {
        f->b->ops->moe_fp8_matmul_wgrad(f->b, f->s, dw, (gt_fp8_operand){qdt, &sd, 1, GT_FP8_E5M2},
                                        (gt_fp8_operand){qxt, &sx, 1, GT_FP8_E4M3}, k_offsets, R, E,
                                        NF, K, acc);
        for (size_t i = 0; i < n_dw; i++) /* the expert without rows: zeros, then still zeros */
            assert_close(dw[i], (acc ? 2.0 : 1.0) * want[i], "dw", (int)i);
    }
    for (int i = 0; i < NF * K; i++)
        assert_true(dw[(size_t)NF * K + i] == 0.0f);
    free(dout), free(x), free(qdt), free(qxt), free(dw), free(want);
}

/* fp8_cast_experts against each expert's own fp8_cast (q) then fp8_cast transposed (qt) with
 * the same metas, bitwise: codes, inverse scales, scaling state and flags. which: 1 q, 2 qt,
 * 3 both. Delayed scaling starts from metas with their own scales and amaxes. */
static void experts_cast_case(fixture *f, gt_fp8_cast_spec sp, int which, int nan_expert) {
    enum { ROWS = 5, COLS = 7 };
    size_t n = (size_t)ROWS * COLS;
    float *w = expert_weights(f, ROWS, COLS);
    if (nan_expert >= 0) w[(size_t)nan_expert * n + 3] = NAN;
    float *q1 = zeros(E * n), *qt1 = zeros(E * n), *q2 = zeros(E * n), *qt2 = zeros(E * n);
    float s1[E] = {0}, st1[E] = {0}, s2[E] = {0}, st2[E] = {0};
    gt_fp8_meta m1[E], m2[E];
    for (int e = 0; e < E; e++)
        m1[e] = m2[e] = (gt_fp8_meta){2.0f + (float)e, 1.0f / (2.0f + (float)e), 0.01f * (float)e,
                                      (int32_t)sp.format};
    gt_step_state st0 = f->st;
    for (int e = 0; e < E; e++) {
        if (which & 1)
            f->b->ops->fp8_cast(f->b, f->s, q1 + e * n, s1 + e, w + e * n, ROWS, COLS, 0, sp,
                                m1 + e, &f->st);
        if (which & 2)
            f->b->ops->fp8_cast(f->b, f->s, qt1 + e * n, st1 + e, w + e * n, ROWS, COLS, 1, sp,
                                m1 + e, &f->st);
    }
    uint32_t flags1 = f->st.nan_flags;
    if (nan_expert >= 0) assert_true(flags1 & GT_NAN_FP8);
    f->st = st0;
    f->b->ops->fp8_cast_experts(f->b, f->s, which & 1 ? q2 : NULL, which & 1 ? s2 : NULL,
                                which & 2 ? qt2 : NULL, which & 2 ? st2 : NULL, w, E, ROWS, COLS,
                                sp, m2, &f->st);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_OK);
    assert_int_equal(f->st.nan_flags, flags1);
    f->st = st0;
    assert_memory_equal(q1, q2, E * n * sizeof *q1);
    assert_memory_equal(qt1, qt2, E * n * sizeof *qt1);
    assert_memory_equal(s1, s2, sizeof s1);
    assert_memory_equal(st1, st2, sizeof st1);
    assert_memory_equal(m1, m2, sizeof m1);
    free(w), free(q1), free(qt1), free(q2), free(qt2);
}

static void test_fp8_expert_weight_casts_equal_each_experts_own_casts_bitwise(void **state) {
    fixture *f = *state;
    for (int which = 1; which <= 3; which++) {
        experts_cast_case(f, current(GT_FP8_E4M3), which, -1);
        experts_cast_case(f, (gt_fp8_cast_spec){GT_FP8_DELAYED, GT_FP8_E4M3, 1, 1, NULL}, which,
                          -1);
        experts_cast_case(f, (gt_fp8_cast_spec){GT_FP8_DELAYED, GT_FP8_E5M2, 1, 0, NULL}, which,
                          -1);
        experts_cast_case(f, (gt_fp8_cast_spec){GT_FP8_TENSORWISE, GT_FP8_E4M3, 1, 0, NULL}, which,
                          -1);
    }
    /* one expert's NaN flags the step and leaves the others' scales their own */
    experts_cast_case(f, current(GT_FP8_E4M3), 3, 1);
    experts_cast_case(f, (gt_fp8_cast_spec){GT_FP8_DELAYED, GT_FP8_E4M3, 1, 1, NULL}, 3, 2);
    assert_true(f->st.nan_flags == 0);
}

static void test_bad_fp8_expert_arguments_are_reported_not_run(void **state) {
    fixture *f = *state;
    float q[4] = {0}, s[1] = {1}, out[4];
    gt_error err = {0};
    gt_fp8_operand op = {q, s, 1, GT_FP8_E4M3};
    f->b->ops->moe_fp8_matmul(f->b, f->s, out, 0, op, op, k_offsets, 2, 0, 2, 2);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "moe_fp8_matmul: bad shape"));
    f->b->ops->moe_fp8_matmul_wgrad(f->b, f->s, out, op, op, NULL, 2, 1, 2, 2, 0);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "NULL operand"));
    gt_fp8_meta m = fresh(GT_FP8_E4M3);
    f->b->ops->fp8_cast_experts(f->b, f->s, NULL, NULL, NULL, NULL, q, 1, 2, 2,
                                current(GT_FP8_E4M3), &m, &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "fp8_cast_experts: NULL tensor"));
    f->b->ops->fp8_cast_experts(f->b, f->s, q, s, NULL, NULL, q, 1, 2, 2,
                                (gt_fp8_cast_spec){GT_FP8_BLOCKWISE, GT_FP8_E4M3, 1, 1, NULL}, &m,
                                &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "per-tensor scaling only"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_expert_forward_is_each_groups_fp8_product_times_its_scales),
        cmocka_unit_test(test_fp8_expert_data_gradient_takes_the_transposed_weight_copies),
        cmocka_unit_test(test_fp8_expert_weight_gradient_sums_each_experts_rows),
        cmocka_unit_test(test_fp8_expert_weight_casts_equal_each_experts_own_casts_bitwise),
        cmocka_unit_test(test_bad_fp8_expert_arguments_are_reported_not_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
