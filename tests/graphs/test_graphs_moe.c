/* Per-unit graphs of a tiny MoE model replay bitwise like eager steps (dropout on, aux loss
 * on): Bridge's dropless-MoE scope attn + moe_router + moe_preprocess, and the moe scope
 * (the whole MoE block) on a drop-and-pad model with a capacity factor. Two graphs (forward,
 * backward) per selected unit per layer. */
#include "graphs_fixture.h"

#define STEPS 30
#define WARMUP 2

static void check_moe(double capacity, uint32_t scope, const char *mode, int units_per_layer,
                      int validate) {
    gt_config c;
    gtf_tiny_moe(&c);
    c.model.moe_expert_capacity_factor = capacity;
    c.model.moe_pad_expert_input_to_capacity = capacity > 0;
    gtf_run eager, graphed;
    gtf_train(&c, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, scope);
    gtf_train_unchecked(&c, STEPS, NULL, validate, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    gtf_assert_progress(&graphed, WARMUP);
    assert_string_equal(graphed.gs.mode, mode);
    assert_int_equal(graphed.gs.graphs, 2 * units_per_layer * c.model.num_layers);
    assert_int_equal(graphed.live, graphed.gs.graphs);
    assert_true(eager.loss[0] != eager.loss[STEPS - 1]);
    gtf_free(&eager);
    gtf_free(&graphed);
}

static void test_dropless_attn_router_preprocess_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_moe(0.0, GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS,
              "scoped(attn,moe_router,moe_preprocess)", 3, 1);
}

static void test_moe_scope_with_capacity_replays_bitwise_like_eager(void **state) {
    (void)state;
    /* moe covers router, preprocess and experts: three units per layer */
    check_moe(1.0, GT_SCOPE_MOE, "scoped(moe)", 3, 1);
}

static void test_moe_scope_replays_dropless_moe_bitwise_too(void **state) {
    (void)state;
    /* The rules keep Bridge's "moe scope needs drop-and-pad" (moe_scope_needs_drop_and_pad);
     * this shows the engine itself would not need it: expert offsets live in device memory,
     * so dropless experts capture and replay exactly. */
    check_moe(0.0, GT_SCOPE_ATTN | GT_SCOPE_MOE, "scoped(attn,moe)", 4, 0);
}

static void test_full_iteration_moe_with_capacity_replays_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    c.model.moe_expert_capacity_factor = 1.0;
    c.model.moe_pad_expert_input_to_capacity = true;
    gtf_assert_full_iteration_like_eager(&c, STEPS, WARMUP);
}

/* Megatron's pre-softmax router with a scaling factor (Qwen3-MoE's norm_topk_prob=false) and
 * kv_channels: unit graphs and the full-iteration graph give eager's bits */
static void test_pre_softmax_router_replays_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    c.model.moe_router_pre_softmax = true;
    c.model.moe_router_topk_scaling_factor = 1.5;
    c.model.kv_channels = 2 * c.model.hidden_size / c.model.num_attention_heads;
    gtf_run eager, graphed;
    gtf_train(&c, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS);
    gtf_train(&c, STEPS, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    gtf_free(&graphed);
    c.model.moe_expert_capacity_factor = 1.0;
    c.model.moe_pad_expert_input_to_capacity = true;
    gtf_graphs(&c, GT_GRAPH_IMPL_NONE, 0);
    gtf_assert_full_iteration_like_eager(&c, STEPS, WARMUP);
    gtf_free(&eager);
}

static void test_mlp_scope_on_an_all_moe_model_is_rejected(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "mlp"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropless_attn_router_preprocess_replays_bitwise_like_eager),
        cmocka_unit_test(test_moe_scope_with_capacity_replays_bitwise_like_eager),
        cmocka_unit_test(test_moe_scope_replays_dropless_moe_bitwise_too),
        cmocka_unit_test(test_full_iteration_moe_with_capacity_replays_bitwise_like_eager),
        cmocka_unit_test(test_pre_softmax_router_replays_bitwise_like_eager),
        cmocka_unit_test(test_mlp_scope_on_an_all_moe_model_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
