/* fp8 with activation recompute on a real GPU (run on the GPU machine): fp8_cs, fp8_ds and
 * blockwise fp8_sc training with a recomputed linear layer (selective mlp in per-unit graphs, full
 * uniform in the full-iteration graph) gives the losses and master weights of the same recipe
 * without recompute, bit for bit: the recomputed GEMM is the forward's fp8 GEMM on the same casts.
 * The CPU emulation of the same property is tests/train/test_recompute_fp8.c. Skips when no
 * GPU can be used. */
#include "graphs_fixture.h"

#define STEPS 8
#define WARMUP 3

static int g_have_gpu;

static int setup(void **state) {
    (void)state;
    g_have_gpu = gtf_cuda_available();
    return 0;
}

/* test_recompute_gpu.c's wide shape (no weight gradient batched over layers), in fp8 */
static void gpu_fp8(gt_config *c, gt_compute_dtype d) {
    gtf_gpu_dense(c, 3, 2048, 32, 8, 4096, WARMUP);
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 4;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void compare(const gt_config *base, const gt_config *rc) {
    gtf_run eager, run;
    gtf_train(base, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_train(rc, STEPS, &run);
    assert_int_equal(run.rc, GT_OK);
    gtf_assert_same(&eager, &run);
    if (rc->model.cuda_graph_impl != GT_GRAPH_IMPL_NONE) gtf_assert_progress(&run, WARMUP);
    gtf_free(&eager);
    gtf_free(&run);
}

static void selective_mlp(gt_compute_dtype d) {
    gt_config base, c;
    gpu_fp8(&base, d);
    c = base;
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    c.model.recompute_granularity = GT_RECOMPUTE_SELECTIVE;
    c.model.recompute_modules = GT_RECOMPUTE_CORE_ATTN | GT_RECOMPUTE_MLP | GT_RECOMPUTE_LAYERNORM;
    compare(&base, &c);
}

static void full_uniform(gt_compute_dtype d) {
    gt_config base, c;
    gpu_fp8(&base, d);
    c = base;
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.model.recompute_granularity = GT_RECOMPUTE_FULL;
    c.model.recompute_method = GT_RECOMPUTE_METHOD_UNIFORM;
    c.model.recompute_num_layers = 1;
    compare(&base, &c);
}

static void test_gpu_fp8_cs_selective_mlp_recompute_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    selective_mlp(GT_DTYPE_FP8_CS);
}

static void test_gpu_fp8_ds_selective_mlp_recompute_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    selective_mlp(GT_DTYPE_FP8_DS);
}

static void test_gpu_fp8_cs_full_recompute_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    full_uniform(GT_DTYPE_FP8_CS);
}

static void test_gpu_fp8_ds_full_recompute_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    full_uniform(GT_DTYPE_FP8_DS);
}

static void test_gpu_fp8_sc_selective_mlp_recompute_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    selective_mlp(GT_DTYPE_FP8_SC);
}

static void test_gpu_fp8_sc_full_recompute_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    full_uniform(GT_DTYPE_FP8_SC);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_fp8_cs_selective_mlp_recompute_matches_bitwise),
        cmocka_unit_test(test_gpu_fp8_ds_selective_mlp_recompute_matches_bitwise),
        cmocka_unit_test(test_gpu_fp8_cs_full_recompute_matches_bitwise),
        cmocka_unit_test(test_gpu_fp8_ds_full_recompute_matches_bitwise),
        cmocka_unit_test(test_gpu_fp8_sc_selective_mlp_recompute_matches_bitwise),
        cmocka_unit_test(test_gpu_fp8_sc_full_recompute_matches_bitwise),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
