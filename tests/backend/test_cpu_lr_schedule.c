/* The learning-rate schedules Megatron users use, as the CPU reference's step_begin computes
 * them: lr_warmup_init, inverse-square-root and WSD with each annealing style, against closed
 * forms of Megatron's OptimizerParamScheduler.get_lr evaluated here in double, at the
 * boundaries (end of warmup, start and end of the annealing, past the decay). */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/config.h"

#define PI 3.14159265358979323846

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
    gt_error err = {0};
    if (gt_backend_check(f->b, &err) != GT_OK) fail_msg("step_begin: %s", err.msg);
    return f->st.lr;
}

/* The rate is the double value rounded once to float: within half a float ulp of it */
static void assert_lr(float got, double want, int64_t step) {
    double tol = fabs(want) * 6e-8 + 1e-30;
    if (fabs((double)got - want) > tol)
        fail_msg("step %lld: lr %.9g, closed form %.9g", (long long)step, (double)got, want);
}

static gt_lr_schedule schedule(int style, int warmup, int decay) {
    gt_lr_schedule sc = {1e-3f, 1e-4f, warmup, decay, style, 0.0f, 0, 0};
    return sc;
}

static void test_warmup_starts_from_lr_warmup_init(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = schedule(GT_LR_COSINE, 10, 110);
    sc.warmup_init = 2e-4f;
    double init = sc.warmup_init, hi = sc.lr_max;
    /* Megatron: init + (max - init) * num_steps / warmup, num_steps = step + 1 here */
    for (int64_t s = 0; s < 10; s++)
        assert_lr(lr_at_step(f, sc, s), init + (hi - init) * (double)(s + 1) / 10.0, s);
    assert_true(lr_at_step(f, sc, 9) == sc.lr_max); /* the warmup ends at the peak */
    assert_true(lr_at_step(f, sc, 0) > sc.warmup_init);
}

static void test_warmup_init_zero_keeps_the_old_rates_bitwise(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = schedule(GT_LR_LINEAR, 7, 50);
    for (int64_t s = 0; s < 7; s++) {
        float old = (float)((double)sc.lr_max * (double)(s + 1) / 7.0);
        assert_true(lr_at_step(f, sc, s) == old);
    }
}

static void test_inverse_square_root_after_warmup(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = schedule(GT_LR_INVERSE_SQRT, 16, 1000);
    sc.lr_min = 1e-5f;
    double hi = sc.lr_max, lo = sc.lr_min;
    assert_lr(lr_at_step(f, sc, 15), hi, 15); /* warmup's last step */
    const int64_t steps[] = {16, 17, 64, 100, 999, 1000};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int64_t s = steps[i];
        double want = hi * sqrt(16.0) / sqrt((double)s);
        assert_lr(lr_at_step(f, sc, s), want > lo ? want : lo, s);
    }
    assert_lr(lr_at_step(f, sc, 64), hi / 2, 64);
    /* past the decay steps: min_lr (Megatron returns it only after lr_decay_steps) */
    assert_true(lr_at_step(f, sc, 1001) == sc.lr_min);
    /* the floor: the rate never goes below min_lr before the decay ends */
    gt_lr_schedule floor = sc;
    floor.lr_min = 2e-4f;
    assert_true(lr_at_step(f, floor, 900) == floor.lr_min);
    /* no warmup: max(warmup, 1) and max(step, 1) */
    gt_lr_schedule nowarm = schedule(GT_LR_INVERSE_SQRT, 0, 1000);
    nowarm.lr_min = 0.0f;
    assert_true(lr_at_step(f, nowarm, 0) == nowarm.lr_max);
    assert_lr(lr_at_step(f, nowarm, 4), (double)nowarm.lr_max / 2, 4);
}

/* Megatron's WSD coefficient of annealing progress r */
static double wsd_coeff(int style, double r) {
    switch (style) {
    case GT_WSD_LINEAR:
        return 1.0 - r;
    case GT_WSD_COSINE:
        return 0.5 * (cos(PI * r) + 1.0);
    case GT_WSD_EXPONENTIAL:
        return 2.0 * pow(0.5, r) - 1.0;
    default:
        return 1.0 - sqrt(r);
    }
}

static void test_wsd_each_annealing_style(void **state) {
    fixture *f = *state;
    const int styles[] = {GT_WSD_EXPONENTIAL, GT_WSD_LINEAR, GT_WSD_COSINE, GT_WSD_MINUS_SQRT};
    for (size_t k = 0; k < 4; k++) {
        gt_lr_schedule sc = schedule(GT_LR_WSD, 10, 100);
        sc.wsd_decay_iters = 20; /* annealing from step 80 to step 100 */
        sc.wsd_style = styles[k];
        double hi = sc.lr_max, lo = sc.lr_min;
        assert_lr(lr_at_step(f, sc, 9), hi, 9);          /* end of warmup */
        assert_true(lr_at_step(f, sc, 10) == sc.lr_max); /* stable */
        assert_true(lr_at_step(f, sc, 50) == sc.lr_max); /* stable */
        assert_true(lr_at_step(f, sc, 80) == sc.lr_max); /* the annealing's start */
        const int64_t steps[] = {81, 85, 90, 95, 99, 100};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            int64_t s = steps[i];
            double r = (double)(s - 80) / 20.0;
            assert_lr(lr_at_step(f, sc, s), lo + wsd_coeff(styles[k], r) * (hi - lo), s);
        }
        assert_lr(lr_at_step(f, sc, 100), lo, 100); /* the annealing's end: min_lr */
        assert_true(lr_at_step(f, sc, 101) == sc.lr_min);
        assert_true(lr_at_step(f, sc, 100000) == sc.lr_min);
    }
}

static void test_wsd_without_annealing_steps_is_refused(void **state) {
    fixture *f = *state;
    gt_lr_schedule sc = schedule(GT_LR_WSD, 10, 100);
    f->st.lr = 7;
    f->b->ops->step_begin(f->b, f->s, &f->st, sc);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "WSD"));
    assert_true(f->st.lr == 7);
    sc.wsd_decay_iters = 10;
    sc.wsd_style = 9;
    f->b->ops->step_begin(f->b, f->s, &f->st, sc);
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_warmup_starts_from_lr_warmup_init),
        T(test_warmup_init_zero_keeps_the_old_rates_bitwise),
        T(test_inverse_square_root_after_warmup),
        T(test_wsd_each_annealing_style),
        T(test_wsd_without_annealing_steps_is_refused),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
