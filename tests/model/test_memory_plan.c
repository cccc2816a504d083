/* The memory plan: what a configuration needs on the device, computed without allocating, and
 * the refusal of a run that cannot fit, naming the estimate and the knobs to turn. */
#include "testlib.h"

#include <string.h>

#include "config/keys.h"
#include "model/memory_plan.h"
#include "model/model.h"

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 64;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 128;
    c->model.vocab_size = 256;
    c->model.seq_length = 32;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 2;
}

/* the plan of tiny_config (c keeps that config) */
static void tiny_plan(gt_config *c, gt_memory_plan *p) {
    gt_error err = {0};
    tiny_config(c);
    assert_int_equal(gt_memory_plan_compute(c, 2, p, &err), GT_OK);
}

static void test_plan_adds_up_its_parts(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    assert_int_equal(p.total,
                     p.params + p.grads + p.activations + p.scratch + p.optimizer + p.workspace);
    gt_model_info mi;
    assert_int_equal(gt_model_plan(&c, 2, &mi, &err), GT_OK);
    /* bf16 parameters (act_bytes 2): the master is their int16 low halves, 2 bytes */
    assert_int_equal(p.optimizer, mi.n_params * (2 + 4 + 4));
    assert_int_equal(p.params, mi.param_bytes);
    /* fp32 parameters (the cpu backend): an fp32 master */
    gt_memory_plan p4;
    assert_int_equal(gt_memory_plan_compute(&c, 4, &p4, &err), GT_OK);
    gt_model_info mi4;
    assert_int_equal(gt_model_plan(&c, 4, &mi4, &err), GT_OK);
    assert_int_equal(p4.optimizer, 3 * mi4.n_params * sizeof(float));
}

/* bf16 Adam moments (the precision-aware optimizer) hold 2 bytes a parameter each in the plan
 */
static void test_bf16_moments_shrink_the_optimizer_state(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    c.optimizer.use_precision_aware_optimizer = true;
    c.optimizer.exp_avg_sq_dtype = GT_STATE_BF16;
    gt_memory_plan one;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &one, &err), GT_OK);
    c.optimizer.exp_avg_dtype = GT_STATE_BF16;
    gt_memory_plan both;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &both, &err), GT_OK);
    gt_model_info mi;
    assert_int_equal(gt_model_plan(&c, 2, &mi, &err), GT_OK);
    assert_int_equal(one.optimizer, mi.n_params * (2 + 4 + 2));
    assert_int_equal(both.optimizer, mi.n_params * (2 + 2 + 2));
    assert_int_equal(p.total - both.total, mi.n_params * 4);
}

static void test_activations_grow_with_the_micro_batch(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan small, big;
    gt_error err = {0};
    tiny_plan(&c, &small);
    c.train.micro_batch_size = 8;
    c.train.global_batch_size = 8;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &big, &err), GT_OK);
    assert_true(big.activations > 3 * small.activations);
    assert_int_equal(big.params, small.params);
}

static void test_run_that_cannot_fit_is_refused_with_the_knobs(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    assert_int_equal(gt_memory_plan_check_fit(&p, p.total - 1, &err), GT_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "nothing was allocated"));
    assert_non_null(strstr(err.msg, "train.micro_batch_size"));
    assert_non_null(strstr(err.msg, "model.seq_length"));
}

static void test_run_that_fits_or_unknown_free_memory_passes(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    assert_int_equal(gt_memory_plan_check_fit(&p, p.total, &err), GT_OK);
    assert_int_equal(gt_memory_plan_check_fit(&p, 0, &err), GT_OK); /* cpu: not known */
}

static void test_validate_prints_the_memory_plan(void **state) {
    (void)state;
    char out[16384];
    int rc = gt_test_run("validate --recipe tiny", out, sizeof out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "memory plan on the cuda backend"));
    assert_non_null(strstr(out, "total"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_adds_up_its_parts),
        cmocka_unit_test(test_bf16_moments_shrink_the_optimizer_state),
        cmocka_unit_test(test_activations_grow_with_the_micro_batch),
        cmocka_unit_test(test_run_that_cannot_fit_is_refused_with_the_knobs),
        cmocka_unit_test(test_run_that_fits_or_unknown_free_memory_passes),
        cmocka_unit_test(test_validate_prints_the_memory_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
