/* fp8 Mamba projections on the CUDA backend: a hybrid (attention, Mamba) whose in_proj and
 * out_proj widths are multiples of 16 (engine_no_fp8_mamba refuses the others) trains under
 * fp8_cs and fp8_ds with its full-iteration graph bitwise like eager, and its first loss agrees
 * with the CPU emulation's within bf16 tolerance. The CPU side is
 * tests/graphs/test_graphs_fp8_mamba.c. Skips when no GPU can be used. */
#include "graphs_fixture.h"

static void gpu_hybrid(gt_config *c, gt_compute_dtype d) {
    gtf_gpu_dense(c, 2, 512, 8, 4, 1024, 2);
    snprintf(c->model.layer_pattern, sizeof c->model.layer_pattern, "*M");
    c->model.mamba_head_dim = 64; /* 16 heads, d_inner 1024, in_proj 2320 */
    c->model.mamba_expand = 2;
    c->model.mamba_num_groups = 2;
    c->model.mamba_state_dim = 64;
    c->model.mamba_d_conv = 4;
    c->model.mamba_chunk_size = 64;
    c->model.hidden_dropout = 0;
    c->model.attention_dropout = 0;
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 4;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void check(gt_compute_dtype d) {
    gt_config c;
    gpu_hybrid(&c, d);
    gtf_run eager, full, cpu;
    gtf_train(&c, 6, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gtf_train(&c, 6, &full);
    assert_int_equal(full.rc, GT_OK);
    gtf_assert_same(&eager, &full);
    gtf_assert_progress(&full, 2);
    c.runtime.device = GT_DEVICE_CPU;
    gtf_graphs(&c, GT_GRAPH_IMPL_NONE, 0);
    gtf_train(&c, 1, &cpu);
    assert_int_equal(cpu.rc, GT_OK);
    printf("    fp8 hybrid (recipe %d): first loss gpu %.6f cpu %.6f\n", (int)d,
           (double)eager.loss[0], (double)cpu.loss[0]);
    assert_true(fabs((double)eager.loss[0] - cpu.loss[0]) <= 1e-2 * fabs((double)cpu.loss[0]));
    gtf_free(&eager), gtf_free(&full), gtf_free(&cpu);
}

static void test_gpu_fp8_cs_hybrid_replays_bitwise_and_matches_cpu(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    check(GT_DTYPE_FP8_CS);
}

static void test_gpu_fp8_ds_hybrid_replays_bitwise_and_matches_cpu(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    check(GT_DTYPE_FP8_DS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_fp8_cs_hybrid_replays_bitwise_and_matches_cpu),
        cmocka_unit_test(test_gpu_fp8_ds_hybrid_replays_bitwise_and_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
