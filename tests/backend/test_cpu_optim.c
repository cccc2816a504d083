/* CPU reference step-state and optimizer ops: LR schedule values, AdamW on hand-computed
 * numbers (bias correction, weight decay, clipping), gradient norm, NaN flags and skipped
 * updates, the inject_nan hook and step_end's first-NaN record. */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/config.h"
#include "core/bf16.h"

typedef struct fixture {
    gt_backend *b;
    gt_stream *s;
    gt_step_state st;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    gt_error err = {0};
    if (!f || gt_backend_create_cpu(&f->b, &err) != GT_OK) return -1;
    if (f->b->ops->stream_create(f->b, &f->s, &err) != GT_OK) return -1;
    f->st.nan_step = -1;
    f->st.inject_nan = -1;
    f->st.clip_coef = 1.0f;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    f->b->ops->stream_destroy(f->b, f->s);
    gt_backend_destroy(f->b);
    free(f);
    return 0;
}

static float lr_at_step(fixture *f, gt_lr_schedule sc, int64_t step) {
    f->st.step = step;
    f->b->ops->step_begin(f->b, f->s, &f->st, sc);
    return f->st.lr;
}

static void test_lr_warmup_is_linear_from_first_step(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 110, GT_LR_COSINE, 0.0f, 0, 0};
    assert_float_equal(lr_at_step(f, sc, 0), 1e-4f, 1e-9);
    assert_float_equal(lr_at_step(f, sc, 4), 5e-4f, 1e-9);
    assert_float_equal(lr_at_step(f, sc, 9), 1e-3f, 1e-9);
}

static void test_lr_cosine_decays_to_min_at_decay_iters(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 110, GT_LR_COSINE, 0.0f, 0, 0};
    assert_float_equal(lr_at_step(f, sc, 10), 1e-3f, 1e-9);
    assert_float_equal(lr_at_step(f, sc, 60), 5.5e-4f, 1e-9); /* half way: mean */
    assert_float_equal(lr_at_step(f, sc, 35), 1e-4f + 9e-4f * 0.5 * (1 + sqrt(0.5)), 1e-9);
    assert_float_equal(lr_at_step(f, sc, 110), 1e-4f, 1e-9);
    assert_float_equal(lr_at_step(f, sc, 5000), 1e-4f, 1e-9);
}

static void test_lr_linear_and_constant_styles(void **state) {
    fixture *f = *state;
    gt_lr_schedule lin = {1e-3f, 1e-4f, 10, 110, GT_LR_LINEAR, 0.0f, 0, 0};
    assert_float_equal(lr_at_step(f, lin, 35), 7.75e-4f, 1e-9);
    assert_float_equal(lr_at_step(f, lin, 110), 1e-4f, 1e-9);
    gt_lr_schedule cst = {1e-3f, 1e-4f, 10, 110, GT_LR_CONSTANT, 0.0f, 0, 0};
    assert_float_equal(lr_at_step(f, cst, 3), 4e-4f, 1e-9);
    assert_float_equal(lr_at_step(f, cst, 500), 1e-3f, 1e-9);
    gt_lr_schedule nowarm = {2e-3f, 0.0f, 0, 100, GT_LR_LINEAR, 0.0f, 0, 0};
    assert_float_equal(lr_at_step(f, nowarm, 0), 2e-3f, 1e-9);
    assert_float_equal(lr_at_step(f, nowarm, 50), 1e-3f, 1e-9);
}

static void test_step_begin_resets_per_step_values(void **state) {
    fixture *f = *state;
    f->st.loss = 3, f->st.aux_loss = 1, f->st.nan_flags = GT_NAN_LOSS, f->st.skipped = 1;
    f->st.micro = 4;
    gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 110, GT_LR_COSINE, 0.0f, 0, 0};
    f->b->ops->step_begin(f->b, f->s, &f->st, sc);
    assert_true(f->st.loss == 0 && f->st.aux_loss == 0);
    assert_int_equal(f->st.nan_flags, 0);
    assert_int_equal(f->st.skipped, 0);
    assert_int_equal(f->st.micro, 0);
    f->b->ops->micro_next(f->b, f->s, &f->st);
    f->b->ops->micro_next(f->b, f->s, &f->st);
    assert_int_equal(f->st.micro, 2);
}

static void test_lr_schedule_rejects_unknown_style(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 110, 9, 0.0f, 0, 0};
    f->st.lr = 7;
    f->b->ops->step_begin(f->b, f->s, &f->st, sc);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_true(f->st.lr == 7);
}

static void test_grad_norm_and_clip_coefficient(void **state) {
    fixture *f = *state;
    float g[3] = {3, 4, 12};
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 3, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
    assert_float_equal(f->st.grad_norm, 13.0f, 1e-6);
    assert_float_equal(f->st.clip_coef, 1.0 / (13.0 + 1e-6), 1e-7);
    assert_int_equal(f->st.nan_flags, 0);
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 3, GT_NO_GRAD_ROWS, 1, 1, 100.0f);
    assert_true(f->st.clip_coef == 1.0f);
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 3, GT_NO_GRAD_ROWS, 1, 1, 0.0f);
    assert_true(f->st.clip_coef == 1.0f);
}

static void test_adamw_first_step_matches_hand_computation_with_weight_decay(void **state) {
    fixture *f = *state;
    /* t = 1: mhat = g, vhat = g^2, so the Adam direction is sign(g) (eps negligible) */
    float master[3] = {1.0f, -2.0f, 0.5f}, params[3] = {0}, g[3] = {0.1f, -0.2f, 0.3f};
    float m[3] = {0}, v[3] = {0};
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.1f, 0.0f, 0, 0, 0};
    f->st.lr = 0.01f;
    f->st.step = 0;
    f->b->ops->adamw(f->b, f->s, params, master, g, GT_NO_GRAD_ROWS, m, v, 3, 2, hp, &f->st);
    assert_float_equal(master[0], 0.989f, 1e-6);  /* 1 - 0.01 * (1 + 0.1 * 1) */
    assert_float_equal(master[1], -1.988f, 1e-6); /* -2 - 0.01 * (-1 + 0.1 * -2) */
    assert_float_equal(master[2], 0.49f, 1e-6);   /* not decayed: 0.5 - 0.01 */
    assert_memory_equal(params, master, sizeof master);
    assert_float_equal(m[0], 0.01f, 1e-8);
    assert_float_equal(m[2], 0.03f, 1e-8);
    assert_float_equal(v[1], 4e-5f, 1e-8); /* beta2 is a float: 1 - 0.999f = 0.99999e-3 */
    assert_int_equal(f->st.skipped, 0);
}

static void test_adamw_bias_correction_uses_step_plus_one(void **state) {
    fixture *f = *state;
    /* second step with the same gradient: m = 0.019, mhat = 0.019/0.19 = 0.1;
     * vhat = 1.999e-5 / 0.001999 = 0.01 -> direction 1 again (t = 1 would give 1.34) */
    float master[1] = {1.0f}, g[1] = {0.1f}, m[1] = {0.01f}, v[1] = {1e-5f};
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.0f, 0.0f, 0, 0, 0};
    f->st.lr = 0.01f;
    f->st.step = 1;
    f->b->ops->adamw(f->b, f->s, master, master, g, GT_NO_GRAD_ROWS, m, v, 1, 1, hp, &f->st);
    assert_float_equal(m[0], 0.019f, 1e-8);
    assert_float_equal(master[0], 0.99f, 1e-5);
}

static void test_adamw_applies_clip_coefficient_to_gradients(void **state) {
    fixture *f = *state;
    float master[2] = {0, 0}, g[2] = {3, 4}, m[2] = {0}, v[2] = {0};
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 0, 0, 0};
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 2, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad);
    assert_float_equal(f->st.clip_coef, 0.2f, 1e-6);
    f->st.lr = 0.1f;
    f->b->ops->adamw(f->b, f->s, master, master, g, GT_NO_GRAD_ROWS, m, v, 2, 2, hp, &f->st);
    assert_float_equal(m[0], 0.06f, 1e-6); /* 0.1 * 3 * 0.2 */
    assert_float_equal(m[1], 0.08f, 1e-6);
    assert_float_equal(v[1], 0.001f * 0.64f, 1e-7);
    assert_float_equal(master[0], -0.1f, 1e-6);
}

/* Moments stored in bf16 (the precision-aware optimizer): over two steps from the same state,
 * the master weights are bitwise those of fp32 moments (the update uses the new fp32 values)
 * and the stored moments are those fp32 values rounded to nearest-even. */
static void test_adamw_bf16_moments_are_the_fp32_ones_rounded(void **state) {
    fixture *f = *state;
    enum { N = 1000 };
    static float w32[N], w16[N], g[N], m32[N], v32[N];
    static uint16_t m16[N], v16[N];
    uint32_t x = 7;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        g[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.02f;
        w32[i] = w16[i] = (float)(i % 17) * 0.01f - 0.08f;
        m16[i] = v16[i] = 0;
    }
    gt_adamw_params hp32 = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_adamw_params hp16 = hp32;
    hp16.m_bf16 = hp16.v_bf16 = 1;
    f->st.lr = 0.01f;
    f->st.clip_coef = 1.0f;
    for (int step = 0; step < 2; step++) {
        f->st.step = step;
        for (int i = 0; i < N; i++) { /* the fp32 run starts from the stored bf16 moments */
            m32[i] = gt_bf16_to_float(m16[i]);
            v32[i] = gt_bf16_to_float(v16[i]);
        }
        f->b->ops->adamw(f->b, f->s, w32, w32, g, GT_NO_GRAD_ROWS, m32, v32, N, N / 2, hp32,
                         &f->st);
        f->b->ops->adamw(f->b, f->s, w16, w16, g, GT_NO_GRAD_ROWS, m16, v16, N, N / 2, hp16,
                         &f->st);
        assert_memory_equal(w32, w16, sizeof w32);
        int rounded = 0;
        for (int i = 0; i < N; i++) {
            assert_int_equal(m16[i], gt_bf16_from_float(m32[i]));
            assert_int_equal(v16[i], gt_bf16_from_float(v32[i]));
            rounded += gt_bf16_to_float(m16[i]) != m32[i];
        }
        assert_true(rounded > N / 2); /* bf16 keeps 8 bits: most values did round */
    }
}

/* The host bf16 conversion rounds to nearest-even and keeps NaN a NaN. */
static void test_bf16_rounds_to_nearest_even(void **state) {
    (void)state;
    assert_int_equal(gt_bf16_from_float(1.0f), 0x3f80);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1) */
    assert_int_equal(gt_bf16_from_float(1.00390625f), 0x3f80);
    /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even (1 + 2^-6) */
    assert_int_equal(gt_bf16_from_float(1.01171875f), 0x3f82);
    assert_int_equal(gt_bf16_from_float(-2.0f), 0xc000);
    assert_true(isnan(gt_bf16_to_float(gt_bf16_from_float(NAN))));
    assert_true(isinf(gt_bf16_to_float(gt_bf16_from_float(INFINITY))));
    assert_true(gt_bf16_to_float(gt_bf16_from_float(3.0e38f)) > 3.0e38f); /* no overflow to inf */
}

static void test_nan_loss_sets_flag_and_skips_update(void **state) {
    fixture *f = *state;
    float master[2] = {1, 2}, g[2] = {0.5f, 0.5f}, m[2] = {0}, v[2] = {0};
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    f->st.step = 7;
    f->st.lr = 0.1f;
    f->st.loss = NAN;
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 2, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
    assert_int_equal(f->st.nan_flags, GT_NAN_LOSS);
    f->b->ops->adamw(f->b, f->s, master, master, g, GT_NO_GRAD_ROWS, m, v, 2, 2, hp, &f->st);
    assert_true(master[0] == 1 && master[1] == 2 && m[0] == 0 && v[0] == 0);
    assert_int_equal(f->st.skipped, 1);
    f->b->ops->step_end(f->b, f->s, &f->st);
    assert_int_equal(f->st.step, 8);
    assert_int_equal(f->st.nan_step, 7);
    assert_int_equal(f->st.nan_first, GT_NAN_LOSS);
    /* a later NaN of another kind keeps the first record */
    g[1] = INFINITY;
    f->st.loss = 1;
    f->st.nan_flags = 0;
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 2, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
    assert_int_equal(f->st.nan_flags, GT_NAN_GRAD);
    f->b->ops->step_end(f->b, f->s, &f->st);
    assert_int_equal(f->st.nan_step, 7);
    assert_int_equal(f->st.nan_first, GT_NAN_LOSS);
}

static void test_nan_checks_off_leave_flags_clear(void **state) {
    fixture *f = *state;
    float g[2] = {NAN, 1};
    f->st.loss = INFINITY;
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 2, GT_NO_GRAD_ROWS, 0, 0, 1.0f);
    assert_int_equal(f->st.nan_flags, 0);
    assert_true(isnan(f->st.grad_norm));
    f->b->ops->step_end(f->b, f->s, &f->st);
    assert_int_equal(f->st.nan_step, -1);
}

static void test_inject_nan_fires_only_at_its_step(void **state) {
    fixture *f = *state;
    float g[2] = {1, 2};
    f->st.inject_nan = 3;
    f->st.step = 2;
    f->st.loss = 1.5f;
    f->b->ops->inject_nan(f->b, f->s, &f->st, g, GT_NO_GRAD_ROWS);
    assert_true(f->st.loss == 1.5f && g[0] == 1.0f);
    f->st.step = 3;
    f->b->ops->inject_nan(f->b, f->s, &f->st, g, GT_NO_GRAD_ROWS);
    assert_true(isnan(f->st.loss) && isnan(g[0]) && g[1] == 2.0f);
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 2, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
    assert_int_equal(f->st.nan_flags, GT_NAN_LOSS | GT_NAN_GRAD);
}

/* The row marks (gt_grad_rows) skip unmarked rows: garbage there (NaN) changes neither the
 * norm nor the update, which equal those of the same gradients with zeros there, bit for bit;
 * the inject hook marks the row of grads[0]. Gradients: 2 plain elements, then 3 rows of 2. */
static void test_grad_rows_skip_unmarked_rows_bit_for_bit(void **state) {
    fixture *f = *state;
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    float zeros_g[8] = {0.5f, -1.0f, 0, 0, 0.25f, -0.75f, 0, 0};
    float junk_g[8] = {0.5f, -1.0f, NAN, NAN, 0.25f, -0.75f, 1e30f, NAN};
    uint8_t dirty[3] = {0, 1, 0};
    gt_grad_rows rows = {dirty, 2, 3, 2, NULL};
    float w_ref[8], w_got[8], m_ref[8] = {0}, m_got[8] = {0}, v_ref[8] = {0}, v_got[8] = {0};
    for (int i = 0; i < 8; i++)
        w_ref[i] = w_got[i] = 0.1f * (float)(i + 1);
    f->st.lr = 0.01f;
    f->st.step = 4;
    f->b->ops->grad_norm(f->b, f->s, &f->st, zeros_g, 8, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad);
    float norm_ref = f->st.grad_norm, clip_ref = f->st.clip_coef;
    f->b->ops->adamw(f->b, f->s, w_ref, w_ref, zeros_g, GT_NO_GRAD_ROWS, m_ref, v_ref, 8, 8, hp,
                     &f->st);
    f->b->ops->grad_norm(f->b, f->s, &f->st, junk_g, 8, rows, 1, 1, hp.clip_grad);
    assert_int_equal(f->st.nan_flags, 0);
    assert_true(f->st.grad_norm == norm_ref && f->st.clip_coef == clip_ref);
    f->b->ops->adamw(f->b, f->s, w_got, w_got, junk_g, rows, m_got, v_got, 8, 8, hp, &f->st);
    assert_memory_equal(w_got, w_ref, sizeof w_ref);
    assert_memory_equal(m_got, m_ref, sizeof m_ref);
    assert_memory_equal(v_got, v_ref, sizeof v_ref);
    /* rows that start at element 0: the hook's NaN in grads[0] gets its row marked */
    gt_grad_rows at0 = {dirty, 0, 3, 2, NULL};
    dirty[0] = 0;
    f->st.inject_nan = 4;
    f->b->ops->inject_nan(f->b, f->s, &f->st, junk_g, at0);
    assert_int_equal(dirty[0], 1);
    f->b->ops->grad_norm(f->b, f->s, &f->st, junk_g, 8, at0, 1, 1, hp.clip_grad);
    assert_true((f->st.nan_flags & GT_NAN_GRAD) != 0);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_OK);
}

static void test_grad_rows_past_the_gradients_are_refused(void **state) {
    fixture *f = *state;
    float g[8] = {0};
    uint8_t dirty[4] = {0};
    gt_grad_rows rows = {dirty, 2, 4, 2, NULL}; /* elements 2..10 of 8 */
    f->b->ops->grad_norm(f->b, f->s, &f->st, g, 8, rows, 1, 1, 1.0f);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "reach past the 8 gradients"));
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    f->b->ops->adamw(f->b, f->s, g, g, g, rows, g, g, 8, 8, hp, &f->st);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "adamw"));
}

/* Lazy rows: 2 plain elements, then 5 rows of 3 (weight decay ends inside row 2). Each step
 * touches a few rows; the lazy run catches the touched rows up before its adamw, which updates
 * only them, and flushes after a skipped step as the trainer does. After 14 steps of a warmup
 * and cosine schedule, one of them skipped by a NaN, and a final flush, weights and moments
 * equal an adamw of every element every step, bit for bit, with fp32 and with bf16 moments.
 * With a sweep (period > 0, slices of 2, 2 and 1 rows at period 3) no row owes more than
 * period - 1 updates after any step, and the bits are the same. */
#define LZ_N 17
#define LZ_ROWS 5
static void lazy_rows_case(fixture *f, int bf16_moments, int period) {
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, bf16_moments, bf16_moments, 0};
    gt_lr_schedule sc = {3e-2f, 3e-3f, 3, 12, GT_LR_COSINE, 0.0f, 0, 0};
    float w_d[LZ_N], w_l[LZ_N], g[LZ_N];
    uint32_t m_d[LZ_N] = {0}, v_d[LZ_N] = {0}, m_l[LZ_N] = {0}, v_l[LZ_N] = {0}; /* either dtype */
    int32_t lag[LZ_ROWS] = {0};
    uint8_t dirty[LZ_ROWS] = {0};
    gt_grad_rows rows = {dirty, 2, LZ_ROWS, 3, lag};
    gt_adamw_state os = {w_l, w_l, m_l, v_l, LZ_N, 10, hp, sc};
    gt_step_state st_d = {0}, st_l = {0};
    st_d.nan_step = st_l.nan_step = st_d.inject_nan = st_l.inject_nan = -1;
    for (int i = 0; i < LZ_N; i++)
        w_d[i] = w_l[i] = 0.05f * (float)(i - 8);
    const gt_backend_ops *o = f->b->ops;
    uint32_t rng = 12345u;
    for (int step = 0; step < 14; step++) {
        int32_t tokens[3];
        for (int k = 0; k < 3; k++) {
            rng = rng * 1664525u + 1013904223u;
            tokens[k] = (int32_t)((rng >> 8) % LZ_ROWS);
        }
        tokens[2] = step == 5 ? -1 : tokens[2]; /* an id outside the rows is ignored */
        memset(g, 0, sizeof g);
        memset(dirty, 0, sizeof dirty);
        for (int k = 0; k < 3; k++) {
            if (tokens[k] < 0) continue;
            dirty[tokens[k]] = 1;
            for (int j = 0; j < 3; j++)
                g[2 + 3 * tokens[k] + j] += 0.1f * (float)((k + j + step) % 5) - 0.2f;
        }
        g[0] = 0.3f, g[1] = step == 7 ? NAN : -0.4f; /* step 7's update is skipped */
        o->step_begin(f->b, f->s, &st_d, sc);
        o->grad_norm(f->b, f->s, &st_d, g, LZ_N, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad);
        o->adamw(f->b, f->s, w_d, w_d, g, GT_NO_GRAD_ROWS, m_d, v_d, LZ_N, 10, hp, &st_d);
        o->step_end(f->b, f->s, &st_d);
        o->step_begin(f->b, f->s, &st_l, sc);
        o->lazy_catchup(f->b, f->s, &st_l, os, rows, tokens, 3, period);
        o->grad_norm(f->b, f->s, &st_l, g, LZ_N, rows, 1, 1, hp.clip_grad);
        o->adamw(f->b, f->s, w_l, w_l, g, rows, m_l, v_l, LZ_N, 10, hp, &st_l);
        o->step_end(f->b, f->s, &st_l);
        assert_int_equal(st_l.skipped, step == 7);
        if (st_l.skipped) o->lazy_flush(f->b, f->s, &st_l, os, rows, 1);
        for (int r = 0; period && r < LZ_ROWS; r++)
            assert_true(st_l.step - lag[r] <= period - 1);
    }
    int behind = 0; /* some row must still owe updates, or the test shows nothing */
    for (int r = 0; r < LZ_ROWS; r++)
        behind += lag[r] < 14;
    assert_true(behind > 0);
    o->lazy_flush(f->b, f->s, &st_l, os, rows, 1);
    for (int r = 0; r < LZ_ROWS; r++)
        assert_int_equal(lag[r], 14);
    assert_memory_equal(w_l, w_d, sizeof w_d);
    assert_memory_equal(m_l, m_d, sizeof m_d);
    assert_memory_equal(v_l, v_d, sizeof v_d);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_OK);
}

static void test_lazy_rows_equal_every_row_adamw_bit_for_bit(void **state) {
    lazy_rows_case(*state, 0, 0);
    lazy_rows_case(*state, 1, 0);
    lazy_rows_case(*state, 0, 3);
    lazy_rows_case(*state, 1, 3);
}

/* Tokens missing, rows past the parameters, a sweep of period -1: each an error naming the
 * op, nothing run */
static void test_lazy_rows_bad_arguments_are_refused(void **state) {
    fixture *f = *state;
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_lr_schedule sc = {1e-3f, 1e-4f, 0, 10, GT_LR_CONSTANT, 0.0f, 0, 0};
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8}, m[8] = {0}, v[8] = {0};
    int32_t lag[4] = {0};
    gt_adamw_state os = {w, w, m, v, 8, 8, hp, sc};
    gt_grad_rows rows = {NULL, 0, 4, 2, lag};
    gt_error err = {0};
    f->st.step = 3;
    f->b->ops->lazy_catchup(f->b, f->s, &f->st, os, rows, NULL, 3, 0);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "lazy_catchup"));
    gt_grad_rows past = {NULL, 2, 4, 2, lag}; /* elements 2..10 of 8 */
    f->b->ops->lazy_flush(f->b, f->s, &f->st, os, past, 1);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "lazy_flush"));
    int32_t tok[2] = {0, 1};
    f->b->ops->lazy_catchup(f->b, f->s, &f->st, os, rows, tok, 2, -1);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "lazy_catchup: sweep period -1"));
    for (int i = 0; i < 4; i++)
        assert_int_equal(lag[i], 0);
    assert_true(w[0] == 1 && m[0] == 0 && v[0] == 0);
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* core/bf16.h's split master: joining the halves gives the fp32 back bit for bit, the high
 * half is the weight rounded to nearest with ties away from zero, over every sign, exponent
 * and low-half pattern that matters (ties, the values beside them, subnormals, zeros, a
 * carry into the next binade), and the documented edge past the largest bf16. */
static void test_split_master_joins_back_exactly_and_rounds_ties_away(void **state) {
    (void)state;
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc000};
    static const uint32_t tops[] = {0x0000, 0x0001, 0x0080, 0x3f80, 0x3fff,
                                    0x4049, 0x7f00, 0x7f7e, 0x007f, 0x3c23};
    for (int sign = 0; sign < 2; sign++)
        for (size_t t = 0; t < sizeof tops / sizeof tops[0]; t++)
            for (size_t l = 0; l < sizeof lows / sizeof lows[0]; l++) {
                uint32_t u = ((uint32_t)sign << 31) | (tops[t] << 16) | lows[l];
                float w = float_of(u);
                uint16_t hi;
                int16_t lo;
                gt_master_split(w, &hi, &lo);
                assert_int_equal(bits_of(gt_master_join(hi, lo)), u);
                /* ties away from zero: the high half rounds up in magnitude from 0x8000 on */
                uint32_t want = ((u & 0x7fffffffu) + 0x8000u) >> 16 | (u >> 31) << 15;
                assert_int_equal(hi, want);
                /* nearest: hi is within half a bf16 step of w */
                double step = ldexp(1.0, (int)((u >> 23) & 0xff) - 127 - 7);
                if (((u >> 23) & 0xff) == 0) step = ldexp(1.0, -126 - 7);
                assert_true(fabs((double)gt_bf16_to_float(hi) - (double)w) <= 0.5 * step);
            }
    /* 1 + 2^-8 exactly between two bf16: away from zero, where nearest-even goes down */
    uint16_t hi;
    int16_t lo;
    gt_master_split(1.00390625f, &hi, &lo);
    assert_int_equal(hi, 0x3f81);
    assert_int_equal(gt_bf16_from_float(1.00390625f), 0x3f80);
    assert_int_equal(lo, -32768);
    /* past the largest bf16, infinities and NaN: truncated, lo 0, NaN stays NaN */
    gt_master_split(float_of(0x7f7fffffu), &hi, &lo);
    assert_int_equal(hi, 0x7f7f);
    assert_int_equal(lo, 0);
    gt_master_split(-INFINITY, &hi, &lo);
    assert_int_equal(hi, 0xff80);
    assert_true(isinf(gt_master_join(hi, lo)) && gt_master_join(hi, lo) < 0);
    gt_master_split(float_of(0x7f800001u), &hi, &lo);
    assert_true(isnan(gt_master_join(hi, lo)));
    assert_int_equal(lo, 0);
}

/* The cpu backend keeps fp32 parameters: a split master is refused by name, nothing moves. */
static void test_adamw_refuses_a_split_master_on_fp32_params(void **state) {
    fixture *f = *state;
    float w[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
    gt_adamw_params hp = {0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 0, 0, 1};
    f->b->ops->adamw(f->b, f->s, w, w, g, GT_NO_GRAD_ROWS, m, v, 4, 4, hp, &f->st);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "split master"));
    assert_true(w[0] == 1 && w[3] == 4 && m[0] == 0 && v[0] == 0);
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_lr_warmup_is_linear_from_first_step),
        T(test_lr_cosine_decays_to_min_at_decay_iters),
        T(test_lr_linear_and_constant_styles),
        T(test_step_begin_resets_per_step_values),
        T(test_lr_schedule_rejects_unknown_style),
        T(test_grad_norm_and_clip_coefficient),
        T(test_adamw_first_step_matches_hand_computation_with_weight_decay),
        T(test_adamw_bias_correction_uses_step_plus_one),
        T(test_adamw_applies_clip_coefficient_to_gradients),
        T(test_adamw_bf16_moments_are_the_fp32_ones_rounded),
        T(test_bf16_rounds_to_nearest_even),
        T(test_nan_loss_sets_flag_and_skips_update),
        T(test_nan_checks_off_leave_flags_clear),
        T(test_inject_nan_fires_only_at_its_step),
        T(test_grad_rows_skip_unmarked_rows_bit_for_bit),
        T(test_grad_rows_past_the_gradients_are_refused),
        T(test_lazy_rows_equal_every_row_adamw_bit_for_bit),
        T(test_lazy_rows_bad_arguments_are_refused),
        T(test_split_master_joins_back_exactly_and_rounds_ties_away),
        T(test_adamw_refuses_a_split_master_on_fp32_params),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
