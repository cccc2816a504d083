/* Names and numbers mean exactly what they say, as in Megatron: a miscased name is refused
 * with the right spelling, a scope is named once, a number with a leading zero is not guessed
 * at, and an allocator setting PyTorch would reject is reported rather than read as off. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "config/rules.h"

static void test_miscased_names_are_refused_with_the_right_spelling(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_set(&c, "model.cuda_graph_scope", "ATTN", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "write 'attn'"));
    assert_int_equal(gt_config_set(&c, "model.cuda_graph_impl", "TRANSFORMER_ENGINE", &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.cuda_graph_impl"));
    assert_non_null(strstr(err.msg, "write 'transformer_engine'"));
    assert_int_equal(c.model.cuda_graph_impl, GT_GRAPH_IMPL_NONE);
    assert_int_equal(gt_config_set(&c, "model.cuda_graph_impl", "transformer_engine", &err), GT_OK);
    /* booleans keep YAML's spellings */
    assert_int_equal(gt_config_set(&c, "dataset.shuffle", "False", &err), GT_OK);
    assert_false(c.dataset.shuffle);
}

static void test_a_scope_given_twice_is_refused(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_set(&c, "model.cuda_graph_scope", "attn,mlp,attn", &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "'attn' is given twice"));
    assert_int_equal(c.model.cuda_graph_scope, 0);
}

static void test_leading_zero_numbers_are_refused_not_read_as_octal(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_set(&c, "rng.seed", "010", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "leading zero"));
    assert_int_equal(c.rng.seed, 1234);
    assert_int_equal(gt_config_set(&c, "model.num_layers", "010", &err), GT_ERR_INVALID);
    assert_int_equal(gt_config_set(&c, "rng.seed", "0x10", &err), GT_ERR_INVALID);
    assert_int_equal(gt_config_set(&c, "rng.seed", "10", &err), GT_OK);
    assert_int_equal(c.rng.seed, 10);
    assert_int_equal(gt_config_set(&c, "rng.seed", "0", &err), GT_OK);
    assert_int_equal(gt_config_set(&c, "optimizer.lr", "0.001", &err), GT_OK);
}

static void test_expandable_segments_typo_is_reported_not_read_as_off(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:Tru", 1);
    gt_config_read_env(&c);
    gt_report r;
    assert_true(gt_config_validate(&c, &r) > 0);
    assert_true(gt_report_has(&r, "expandable_segments_not_true_or_false"));
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:true", 1); /* PyTorch wants True */
    gt_config_read_env(&c);
    gt_config_validate(&c, &r);
    assert_true(gt_report_has(&r, "expandable_segments_not_true_or_false"));
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False,max_split_size_mb:64", 1);
    gt_config_read_env(&c);
    gt_config_validate(&c, &r);
    assert_false(gt_report_has(&r, "expandable_segments_not_true_or_false"));
    assert_false(c.env.expandable_segments);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:64", 1);
    gt_config_read_env(&c);
    assert_true(c.env.expandable_segments);
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_miscased_names_are_refused_with_the_right_spelling),
        cmocka_unit_test(test_a_scope_given_twice_is_refused),
        cmocka_unit_test(test_leading_zero_numbers_are_refused_not_read_as_octal),
        cmocka_unit_test(test_expandable_segments_typo_is_reported_not_read_as_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
