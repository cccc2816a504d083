/* Bridge's performance-harness flags: the parallelism and batch flags map onto their keys (or
 * are refused by name), -d/--dryrun is refused with what to run instead, -mr is
 * case-insensitive and -g takes only the GPUs graphtrain knows. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

static int load(int argc, char **argv, gt_config *c, gt_error *err) {
    return gt_cli_load_config(argc, argv, c, NULL, NULL, NULL, err);
}

static void test_parallel_and_batch_flags_map_onto_their_keys(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    char *a[] = {"validate", "-tp", "2",  "-pp", "4", "-cp", "2",  "-ep",
                 "8",        "-gb", "64", "-mb", "2", "-sl", "512"};
    assert_int_equal(load(15, a, &c, &err), GT_OK);
    assert_int_equal(c.model.tensor_model_parallel_size, 2);
    assert_int_equal(c.model.pipeline_model_parallel_size, 4);
    assert_int_equal(c.model.context_parallel_size, 2);
    assert_int_equal(c.model.expert_model_parallel_size, 8);
    assert_int_equal(c.train.global_batch_size, 64);
    assert_int_equal(c.train.micro_batch_size, 2);
    assert_int_equal(c.model.seq_length, 512);
    char *longs[] = {"validate", "--tensor_model_parallel_size=2", "--micro_batch_size", "3"};
    assert_int_equal(load(4, longs, &c, &err), GT_OK);
    assert_int_equal(c.model.tensor_model_parallel_size, 2);
    assert_int_equal(c.train.micro_batch_size, 3);
}

static void test_flags_graphtrain_cannot_run_are_refused_by_name(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    char *vp[] = {"validate", "-vp", "2"};
    assert_int_equal(load(3, vp, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--virtual_pipeline_model_parallel_size"));
    assert_non_null(strstr(err.msg, "does not support yet"));
    char *et[] = {"validate", "-et", "2"};
    assert_int_equal(load(3, et, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--expert_tensor_parallel_size"));
    char *d[] = {"validate", "-d"};
    assert_int_equal(load(2, d, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "-d/--dryrun"));
    assert_non_null(strstr(err.msg, "graphtrain validate"));
    char *dry[] = {"train", "--dryrun", "-tp", "1"};
    assert_int_equal(load(4, dry, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "-d/--dryrun"));
    /* every -c value of the harness is understood: the key takes it, the rules refuse fp8 */
    const char *dtypes[] = {"bf16", "fp8_cs", "fp8_mx", "fp8_ds", "nvfp4"};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        char *cf[] = {"validate", "-c", (char *)dtypes[i]};
        if (load(3, cf, &c, &err) != GT_OK) fail_msg("-c %s: %s", dtypes[i], err.msg);
    }
}

static void test_recipe_name_is_case_insensitive(void **state) {
    (void)state;
    char recipes[1024];
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", recipes, sizeof recipes), 1);
    gt_config c;
    gt_error err = {0};
    char *a[] = {"validate", "-mr", "Qwen3_30B_A3B_1GPU"};
    if (load(3, a, &c, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_int_equal(c.model.num_moe_experts, 128);
}

static void test_gpu_flag_takes_only_known_gpus(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    const char *known[] = {"h100", "H200", "b200", "gb200", "GB300"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        char *a[] = {"validate", "-g", (char *)known[i]};
        if (load(3, a, &c, &err) != GT_OK) fail_msg("-g %s: %s", known[i], err.msg);
    }
    char *bad[] = {"validate", "-g", "a100"};
    assert_int_equal(load(3, bad, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--gpu: runtime.gpu: 'a100' is not a known GPU; use one of "
                                    "h100 | h200 | b200 | gb200 | gb300"));
    char *over[] = {"validate", "runtime.gpu=b300"};
    assert_int_equal(load(2, over, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "not a known GPU"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_and_batch_flags_map_onto_their_keys),
        cmocka_unit_test(test_flags_graphtrain_cannot_run_are_refused_by_name),
        cmocka_unit_test(test_recipe_name_is_case_insensitive),
        cmocka_unit_test(test_gpu_flag_takes_only_known_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
