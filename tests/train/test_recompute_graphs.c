/* Recompute through the trainer: with attention and hidden dropout on, training with any
 * recompute setting gives the losses and final master weights of training without it, bit
 * for bit, in eager steps, with per-unit (transformer_engine) graphs and with one
 * full-iteration graph: the recomputed forward runs inside the unit's backward, so a replay
 * recomputes it too, and its dropout masks come from the forward's Philox counters. */
#include "graphs_fixture.h"

#define STEPS 8

static void selective(gt_config *c, uint32_t modules) {
    c->model.recompute_granularity = GT_RECOMPUTE_SELECTIVE;
    c->model.recompute_modules = modules;
}

static void full(gt_config *c, gt_recompute_method method, int layers) {
    c->model.recompute_granularity = GT_RECOMPUTE_FULL;
    c->model.recompute_method = method;
    c->model.recompute_num_layers = layers;
}

/* Trains base and base + set under the same graph setting and the eager reference without
 * recompute; all three agree bitwise, and the graphed one really replayed. */
static void check(const gt_config *base, gt_graph_impl impl, uint32_t scope,
                  void (*set)(gt_config *)) {
    gt_config ref = *base, c = *base;
    gtf_run eager, rc;
    gtf_train(&ref, STEPS, &eager);
    assert_int_equal(eager.steps, STEPS);
    assert_true(eager.loss[0] != eager.loss[STEPS - 1]);
    if (impl != GT_GRAPH_IMPL_NONE) gtf_graphs(&c, impl, scope);
    set(&c);
    gtf_train(&c, STEPS, &rc);
    assert_int_equal(rc.rc, GT_OK);
    gtf_assert_same(&eager, &rc);
    if (impl != GT_GRAPH_IMPL_NONE) {
        gtf_assert_progress(&rc, c.model.cuda_graph_warmup_steps);
        assert_true(rc.gs.graphs > 0);
        assert_int_equal(rc.gs.fallbacks, 0);
    }
    gtf_free(&eager);
    gtf_free(&rc);
}

static void set_attn_mlp_norm(gt_config *c) {
    selective(c, GT_RECOMPUTE_CORE_ATTN | GT_RECOMPUTE_MLP | GT_RECOMPUTE_LAYERNORM);
}
static void set_core_attn(gt_config *c) {
    selective(c, GT_RECOMPUTE_CORE_ATTN);
}
static void set_full_uniform(gt_config *c) {
    full(c, GT_RECOMPUTE_METHOD_UNIFORM, 1);
}
static void set_full_block(gt_config *c) {
    full(c, GT_RECOMPUTE_METHOD_BLOCK, 1);
}
static void set_moe_act_norm_attn(gt_config *c) {
    selective(c, GT_RECOMPUTE_MOE_ACT | GT_RECOMPUTE_LAYERNORM | GT_RECOMPUTE_CORE_ATTN);
}
static void set_moe(gt_config *c) {
    selective(c, GT_RECOMPUTE_MOE);
}

static void test_selective_recompute_in_eager_steps_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    check(&c, GT_GRAPH_IMPL_NONE, 0, set_attn_mlp_norm);
}

static void test_full_block_recompute_in_eager_steps_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    check(&c, GT_GRAPH_IMPL_NONE, 0, set_full_block);
}

/* the recomputed modules lie wholly inside the attn and mlp graphs, dropout included */
static void test_selective_recompute_in_attn_mlp_graphs_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    check(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP, set_attn_mlp_norm);
}

static void test_core_attn_recompute_in_the_full_iteration_graph_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    check(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, set_core_attn);
}

static void test_full_recompute_in_the_full_iteration_graph_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    check(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, set_full_uniform);
}

static void test_full_recompute_of_moe_layers_in_the_full_iteration_graph(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    check(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, set_full_uniform);
}

/* dropless MoE: the router and preprocess graphed, the experts (and their recomputed
 * activation) eager */
static void test_moe_act_recompute_with_router_graphs_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    check(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS,
          set_moe_act_norm_attn);
}

/* drop-and-pad MoE with the experts graphed: the whole MoE block recomputed in its graph */
static void test_moe_recompute_in_the_moe_graph_gives_the_same_bits(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    c.model.moe_expert_capacity_factor = 1.0;
    c.model.moe_pad_expert_input_to_capacity = true;
    check(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MOE, set_moe);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selective_recompute_in_eager_steps_gives_the_same_bits),
        cmocka_unit_test(test_full_block_recompute_in_eager_steps_gives_the_same_bits),
        cmocka_unit_test(test_selective_recompute_in_attn_mlp_graphs_gives_the_same_bits),
        cmocka_unit_test(test_core_attn_recompute_in_the_full_iteration_graph_gives_the_same_bits),
        cmocka_unit_test(test_full_recompute_in_the_full_iteration_graph_gives_the_same_bits),
        cmocka_unit_test(test_full_recompute_of_moe_layers_in_the_full_iteration_graph),
        cmocka_unit_test(test_moe_act_recompute_with_router_graphs_gives_the_same_bits),
        cmocka_unit_test(test_moe_recompute_in_the_moe_graph_gives_the_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
