/* A tiny hybrid (Mamba, attention, Mamba, MLP layers; dropout on) trains bitwise alike eager,
 * with per-unit graphs of Bridge's attn,mamba,mlp scopes (two graphs per layer) and with the
 * full-iteration graph, over 30 steps: losses of every step and the final weights. */
#include "graphs_fixture.h"

#define STEPS 30
#define WARMUP 2

static void tiny_hybrid(gt_config *c) {
    gtf_tiny_dense(c);
    c->model.num_layers = 4;
    snprintf(c->model.layer_pattern, sizeof c->model.layer_pattern, "M*M-");
    c->model.mamba_state_dim = 4;
    c->model.mamba_head_dim = 4;
    c->model.mamba_num_groups = 2;
    c->model.mamba_expand = 2;
    c->model.mamba_d_conv = 4;
    c->model.mamba_chunk_size = 4;
}

static void test_attn_mamba_mlp_scopes_replay_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    gtf_run eager, graphed;
    gtf_train(&c, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MAMBA | GT_SCOPE_MLP);
    gtf_train(&c, STEPS, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    gtf_assert_progress(&graphed, WARMUP);
    assert_string_equal(graphed.gs.mode, "scoped(attn,mlp,mamba)");
    assert_int_equal(graphed.gs.graphs, 2 * c.model.num_layers);
    assert_int_equal(graphed.live, graphed.gs.graphs);
    assert_true(eager.loss[0] != eager.loss[STEPS - 1]); /* the weights move */
    gtf_free(&eager);
    gtf_free(&graphed);
}

static void test_mamba_scope_alone_graphs_only_the_mamba_layers(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    gtf_run eager, graphed;
    gtf_train(&c, STEPS, &eager);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_MAMBA);
    gtf_train(&c, STEPS, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    assert_string_equal(graphed.gs.mode, "scoped(mamba)");
    assert_int_equal(graphed.gs.graphs, 2 * 2); /* two M layers, forward and backward */
    gtf_free(&eager);
    gtf_free(&graphed);
}

static void test_full_iteration_hybrid_replays_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    gtf_assert_full_iteration_like_eager(&c, STEPS, WARMUP);
}

static void test_mamba_scope_without_mamba_layers_is_rejected(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MAMBA);
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "mamba"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_mamba_mlp_scopes_replay_bitwise_like_eager),
        cmocka_unit_test(test_mamba_scope_alone_graphs_only_the_mamba_layers),
        cmocka_unit_test(test_full_iteration_hybrid_replays_bitwise_like_eager),
        cmocka_unit_test(test_mamba_scope_without_mamba_layers_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
