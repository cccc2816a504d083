/* The benchmark's peak rates (step-time limit, MFU) come from the GPU runtime.gpu names
 * (config/gpus.c), not always the H200's; the H200 keeps its measured 790 TFLOP/s. */
#include "testlib.h"

#include <math.h>
#include <string.h>

#include "bench/bench.h"
#include "config/gpus.h"
#include "config/keys.h"

static void workload_on(const char *gpu, gt_bench_workload *w) {
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    if (gt_config_set(&c, "runtime.gpu", gpu, &err) != GT_OK) fail_msg("%s", err.msg);
    memset(w, 0, sizeof *w);
    gt_bench_workload_compute(w, &c, 61e6, 0);
}

static void test_peak_rates_follow_the_gpu_named(void **state) {
    (void)state;
    gt_bench_workload h200, b200, h100, unset;
    workload_on("h200", &h200);
    workload_on("b200", &b200);
    workload_on("h100", &h100);
    workload_on("", &unset);
    assert_true(fabs(h200.peak_flops - 790e12) < 1.0);
    assert_true(fabs(h200.peak_bytes_s - 4.3e12) < 1.0);
    assert_string_equal(b200.gpu, "b200");
    assert_true(fabs(b200.peak_flops - gt_gpu_find("b200")->bf16_flops) < 1.0);
    assert_true(b200.peak_flops > 2 * h200.peak_flops);
    assert_true(b200.limit_ms < h200.limit_ms);
    assert_true(fabs(h100.peak_bytes_s - 3.35e12) < 1.0);
    /* unset: the measured H200, and the workload says it defaulted */
    assert_string_equal(unset.gpu, GT_GPU_DEFAULT);
    assert_true(unset.gpu_defaulted);
    assert_false(h200.gpu_defaulted);
    assert_true(fabs(unset.limit_ms - h200.limit_ms) < 1e-12);
}

/* An fp8 recipe counts the same FLOPs (bf16's count) against the GPU's fp8 rate */
static void test_fp8_recipes_measure_against_the_fp8_peak(void **state) {
    (void)state;
    gt_bench_workload bf, f8;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    memset(&bf, 0, sizeof bf);
    gt_bench_workload_compute(&bf, &c, 61e6, 0);
    if (gt_config_set(&c, "model.compute_dtype", "fp8_cs", &err) != GT_OK) fail_msg("%s", err.msg);
    memset(&f8, 0, sizeof f8);
    gt_bench_workload_compute(&f8, &c, 61e6, 0);
    assert_false(bf.peak_fp8);
    assert_true(f8.peak_fp8);
    assert_true(fabs(f8.peak_flops - gt_gpu_find(GT_GPU_DEFAULT)->fp8_flops) < 1.0);
    assert_true(fabs(f8.flops_per_step - bf.flops_per_step) < 1.0);
    assert_true(f8.limit_ms < bf.limit_ms);
}

static void test_every_gpu_name_has_rates(void **state) {
    (void)state;
    int n = 0;
    for (int i = 0; gt_gpu_names[i]; i++, n++) {
        const gt_gpu_spec *g = gt_gpu_find(gt_gpu_names[i]);
        if (!g) fail_msg("%s has no table entry", gt_gpu_names[i]);
        assert_true(g->bf16_flops > 0 && g->fp8_flops >= g->bf16_flops && g->bytes_per_s > 0);
    }
    assert_int_equal(n, 5);
    assert_null(gt_gpu_find("a100"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_rates_follow_the_gpu_named),
        cmocka_unit_test(test_fp8_recipes_measure_against_the_fp8_peak),
        cmocka_unit_test(test_every_gpu_name_has_rates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
