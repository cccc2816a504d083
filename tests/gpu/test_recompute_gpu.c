/* Activation recompute on a real GPU (run on the GPU machine): bf16 training with dropout on
 * gives the losses and master weights of training without recompute, bit for bit, in eager
 * steps, per-unit graphs and the full-iteration graph, and the activation arena shrinks. Two
 * shapes: one whose weight gradients run one layer at a time (as llama1b's), where every
 * setting must match, and a small one whose deferred weight gradients run as one batched GEMM
 * without recompute, which recompute of their operands turns into one GEMM a layer. Skips
 * when no GPU can be used. */
#include "graphs_fixture.h"

#define STEPS 10
#define WARMUP 3

static int g_have_gpu;

static int setup(void **state) {
    (void)state;
    g_have_gpu = gtf_cuda_available();
    return 0;
}

/* Wide enough (llama1b's d 2048) that no weight gradient's batch pays on an H200 (at least
 * 198 output tiles: cuda_matmul.c's batch_pays), so the GEMMs are the same with recompute
 * and without. */
static void gpu_wide(gt_config *c) {
    gtf_gpu_dense(c, 3, 2048, 32, 8, 4096, WARMUP);
}

/* test_graphs_gpu.c's small model: its weight gradients are batched over the layers */
static void gpu_small(gt_config *c) {
    gpu_wide(c);
    c->model.hidden_size = 256;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 512;
}

static void selective(gt_config *c, uint32_t modules) {
    c->model.recompute_granularity = GT_RECOMPUTE_SELECTIVE;
    c->model.recompute_modules = modules;
}

static void full(gt_config *c) {
    c->model.recompute_granularity = GT_RECOMPUTE_FULL;
    c->model.recompute_method = GT_RECOMPUTE_METHOD_UNIFORM;
    c->model.recompute_num_layers = 1;
}

static size_t act_bytes(const gt_config *c) {
    gt_model_info info;
    gt_error err = {0};
    assert_int_equal(gt_model_plan(c, 2, &info, &err), GT_OK);
    return info.act_bytes;
}

/* rc (recompute set, graphs as given) against the eager run of base without recompute */
static void compare(const gt_config *base, const gt_config *rc) {
    gtf_run eager, run;
    gtf_train(base, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_train(rc, STEPS, &run);
    assert_int_equal(run.rc, GT_OK);
    gtf_assert_same(&eager, &run);
    if (rc->model.cuda_graph_impl != GT_GRAPH_IMPL_NONE) {
        gtf_assert_progress(&run, WARMUP);
        /* the recompute buffers are arena tensors too: capture allocates nothing (the
         * driver's executable-graph bookkeeping aside) */
        assert_true(run.gs.mem_after_capture <= run.gs.mem_before_capture + (64u << 20));
    }
    assert_true(act_bytes(rc) < act_bytes(base));
    gtf_free(&eager);
    gtf_free(&run);
}

static void test_gpu_selective_recompute_in_attn_mlp_graphs_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config base, c;
    gpu_wide(&base);
    c = base;
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    selective(&c, GT_RECOMPUTE_CORE_ATTN | GT_RECOMPUTE_MLP | GT_RECOMPUTE_LAYERNORM);
    compare(&base, &c);
}

static void test_gpu_full_recompute_in_full_iteration_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config base, c;
    gpu_wide(&base);
    c = base;
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    full(&c);
    compare(&base, &c);
}

static void test_gpu_full_recompute_of_moe_layers_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config base, c;
    gpu_wide(&base);
    base.model.num_moe_experts = 4;
    base.model.moe_router_topk = 2;
    base.model.moe_ffn_hidden_size = 512;
    base.model.moe_aux_loss_coeff = 0.01;
    base.model.moe_layer_freq = 2;
    c = base;
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    full(&c);
    compare(&base, &c);
}

/* With hidden dropout the o and down weight gradients are not deferred in any case, so
 * core_attn recompute changes no GEMM even where batching pays. */
static void test_gpu_core_attn_recompute_of_a_small_model_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config base, c;
    gpu_small(&base);
    c = base;
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    selective(&c, GT_RECOMPUTE_CORE_ATTN);
    compare(&base, &c);
}

/* The small model's gate/up weight gradients: one batched GEMM over the layers without
 * recompute, one GEMM a layer with mlp recompute. */
static void test_gpu_mlp_recompute_of_a_small_model_matches_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config base, c;
    gpu_small(&base);
    c = base;
    selective(&c, GT_RECOMPUTE_MLP);
    compare(&base, &c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_selective_recompute_in_attn_mlp_graphs_matches_bitwise),
        cmocka_unit_test(test_gpu_full_recompute_in_full_iteration_matches_bitwise),
        cmocka_unit_test(test_gpu_full_recompute_of_moe_layers_matches_bitwise),
        cmocka_unit_test(test_gpu_core_attn_recompute_of_a_small_model_matches_bitwise),
        cmocka_unit_test(test_gpu_mlp_recompute_of_a_small_model_matches_bitwise),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
