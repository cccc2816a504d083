/* Graph replays compute exactly what eager steps compute: 30 steps of a tiny dense model with
 * attention and hidden dropout on give bitwise identical losses and final master weights in
 * eager mode, with per-unit graphs (attn; attn+mlp) and with one full-iteration graph; each
 * mode warms up eagerly, captures at the step Bridge captures and replays after, holding the
 * number of graphs the policy says. CPU backend: capture records op calls and replays them. */
#include "graphs_fixture.h"

#define STEPS 30
#define WARMUP 2

GTF_EAGER_REFERENCE(STEPS)

static void test_eager_run_captures_nothing(void **state) {
    (void)state;
    assert_string_equal(g_eager.gs.mode, "eager");
    assert_int_equal(g_eager.gs.graphs, 0);
    assert_int_equal(g_eager.live, 0);
    for (int i = 0; i < STEPS; i++)
        assert_int_equal(g_eager.mode[i], GT_STEP_EAGER);
    /* the losses move: dropout and updates are doing something, so equality below means
     * something */
    assert_true(g_eager.loss[0] != g_eager.loss[STEPS - 1]);
}

static void test_dropout_changes_the_losses(void **state) {
    (void)state;
    /* without this, equal losses could mean dropout never ran */
    gt_config c;
    gtf_tiny_dense(&c);
    c.model.attention_dropout = 0;
    c.model.hidden_dropout = 0;
    gtf_run r;
    gtf_train(&c, 3, &r);
    assert_true(r.loss[0] != g_eager.loss[0]);
    gtf_free(&r);
}

static void check_scoped(uint32_t scope, const char *mode, int graphs_per_layer) {
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, scope);
    gtf_run r;
    gtf_train(&c, STEPS, &r);
    assert_int_equal(r.rc, GT_OK);
    gtf_assert_same(&g_eager, &r);
    gtf_assert_progress(&r, WARMUP);
    assert_string_equal(r.gs.mode, mode);
    assert_int_equal(r.gs.graphs, graphs_per_layer * c.model.num_layers);
    assert_int_equal(r.live, r.gs.graphs); /* every live graph is the runner's */
    assert_true(r.gs.nodes > r.gs.graphs);
    assert_int_equal(r.gs.fallbacks, 0);
    gtf_free(&r);
}

static void test_attn_scope_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_scoped(GT_SCOPE_ATTN, "scoped(attn)", 2);
}

static void test_attn_mlp_scope_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_scoped(GT_SCOPE_ATTN | GT_SCOPE_MLP, "scoped(attn,mlp)", 4);
}

/* Per-layer mix (moe_layer_freq=2): mlp graphs only on dense layers, router graphs only on
 * MoE layers. */
static void test_mixed_dense_and_moe_layers_capture_their_own_units(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_moe(&c);
    c.model.moe_layer_freq = 2;
    gtf_run eager, graphed;
    gtf_train(&c, 10, &eager);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE,
               GT_SCOPE_ATTN | GT_SCOPE_MLP | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS);
    gtf_train(&c, 10, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    /* one dense layer (attn, mlp) + one MoE layer (attn, router, preprocess): 5 units */
    assert_int_equal(graphed.gs.graphs, 2 * 5);
    assert_non_null(strstr(graphed.report, "2 mlp"));
    assert_non_null(strstr(graphed.report, "2 moe_router"));
    gtf_free(&eager);
    gtf_free(&graphed);
}

/* Evaluation between steps overwrites activations and the device batch; replays after it
 * must not notice (a known failure of other systems: bad replays after validation). */
static void test_evaluation_between_replays_changes_nothing(void **state) {
    (void)state;
    float loss[2][12], ev[2][4];
    for (int run = 0; run < 2; run++) {
        gt_config c;
        gtf_tiny_dense(&c);
        c.train.eval_interval = 3;
        c.train.eval_iters = 2;
        if (run == 1) gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
        gt_trainer *t = NULL;
        gt_error err = {0};
        if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("%s", err.msg);
        for (int i = 0; i < 12; i++) {
            gt_step_stats st;
            if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
            loss[run][i] = st.loss;
            if ((i + 1) % 3 == 0 && gt_trainer_eval(t, &ev[run][i / 3], &err) != GT_OK)
                fail_msg("%s", err.msg);
        }
        gt_trainer_destroy(t);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    assert_memory_equal(ev[0], ev[1], sizeof ev[0]);
    assert_true(ev[0][0] != ev[0][3]); /* evaluation sees the training progress */
}

static void test_full_iteration_replays_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gtf_run r;
    gtf_train(&c, STEPS, &r);
    assert_int_equal(r.rc, GT_OK);
    gtf_assert_same(&g_eager, &r);
    gtf_assert_progress(&r, WARMUP);
    assert_string_equal(r.gs.mode, "full_iteration");
    assert_int_equal(r.gs.graphs, 1);
    assert_int_equal(r.gs.buckets, 1);
    assert_int_equal(r.gs.evictions, 0);
    assert_int_equal(r.live, 1);
    assert_true(r.gs.nodes > 10);
    assert_true(r.gs.mem_before_capture > 0);
    assert_int_equal(r.gs.mem_after_capture, r.gs.mem_before_capture);
    assert_non_null(strstr(r.report, "full_iteration"));
    assert_non_null(strstr(r.report, "before capture"));
    assert_non_null(strstr(r.report, "steps: 2 eager, 1 captured, 27 replayed"));
    gtf_free(&r);
}

/* With the Adam moments in bf16 (the precision-aware optimizer) the full-iteration graph and
 * per-unit graphs still replay eager's steps bitwise; and the losses are not those of fp32
 * moments (the setting took effect). */
static void test_bf16_moments_replay_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_bf16_moments(&c);
    gtf_run eager, units, full;
    gtf_train(&c, STEPS, &eager);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    gtf_train(&c, STEPS, &units);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gtf_train(&c, STEPS, &full);
    assert_int_equal(eager.rc, GT_OK);
    gtf_assert_same(&eager, &units);
    gtf_assert_same(&eager, &full);
    gtf_assert_progress(&full, WARMUP);
    int differ = 0;
    for (int i = 0; i < STEPS; i++)
        differ += eager.loss[i] != g_eager.loss[i];
    assert_true(differ > STEPS / 2);
    gtf_free(&eager);
    gtf_free(&units);
    gtf_free(&full);
}

/* model.qk_layernorm (Qwen3's per-head q/k norm) inside the attention unit's graphs and the
 * full-iteration graph: the same bits as eager, and not the losses without it. */
static void test_qk_layernorm_replays_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    c.model.qk_layernorm = true;
    float first;
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, GT_SCOPE_ATTN, &first);
    assert_true(first != g_eager.loss[0]); /* the norms did change the model */
}

/* model.kv_channels (heads wider than hidden / heads, as Qwen3-0.6B's) with qk_layernorm: the
 * same bits in the attention unit's graphs and the full-iteration graph as eager */
static void test_kv_channels_replays_bitwise_like_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    c.model.qk_layernorm = true;
    c.model.kv_channels = 2 * c.model.hidden_size / c.model.num_attention_heads;
    float first;
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, GT_SCOPE_ATTN, &first);
    assert_true(first != g_eager.loss[0]); /* the head size did change the model */
}

static void test_zero_warmup_captures_the_first_step(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.model.cuda_graph_warmup_steps = 0;
    gtf_run r;
    gtf_train(&c, 5, &r);
    assert_int_equal(r.rc, GT_OK);
    gtf_assert_progress(&r, 0);
    for (int i = 0; i < 5; i++)
        assert_memory_equal(&r.loss[i], &g_eager.loss[i], sizeof(float));
    gtf_free(&r);
}

static void test_debug_capture_check_passes_and_changes_nothing(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN);
    c.runtime.debug_capture_check = true;
    gtf_run r;
    gtf_train(&c, 4, &r);
    assert_int_equal(r.rc, GT_OK);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(&r.loss[i], &g_eager.loss[i], sizeof(float));
    assert_non_null(strstr(r.report, "capture_check passed"));
    assert_int_equal(r.live, r.gs.graphs); /* the check's graph was thrown away */
    gtf_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager_run_captures_nothing),
        cmocka_unit_test(test_dropout_changes_the_losses),
        cmocka_unit_test(test_attn_scope_replays_bitwise_like_eager),
        cmocka_unit_test(test_attn_mlp_scope_replays_bitwise_like_eager),
        cmocka_unit_test(test_mixed_dense_and_moe_layers_capture_their_own_units),
        cmocka_unit_test(test_evaluation_between_replays_changes_nothing),
        cmocka_unit_test(test_full_iteration_replays_bitwise_like_eager),
        cmocka_unit_test(test_bf16_moments_replay_bitwise_like_eager),
        cmocka_unit_test(test_qk_layernorm_replays_bitwise_like_eager),
        cmocka_unit_test(test_kv_channels_replays_bitwise_like_eager),
        cmocka_unit_test(test_zero_warmup_captures_the_first_step),
        cmocka_unit_test(test_debug_capture_check_passes_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, gtf_eager_setup, gtf_eager_teardown);
}
