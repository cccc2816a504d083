/* Graph replays compute exactly what eager steps compute: 30 steps of a tiny dense model with
 * attention and hidden dropout on give bitwise identical losses and final master weights in
 * eager mode, with per-unit graphs (attn; attn+mlp) and with one full-iteration graph; each
 * mode warms up eagerly, captures at the step Bridge captures and replays after, holding the
 * number of graphs the policy says. CPU backend: capture records op calls and replays them. */
#include "test_graphs_fixture.h"

#define STEPS 30
#define WARMUP 2

static gtf_run g_eager; /* the reference, trained once */

static int setup(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_train(&c, STEPS, &g_eager);
    return g_eager.steps == STEPS ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    gtf_free(&g_eager);
    return 0;
}

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
    gtf_free(&r);
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
        cmocka_unit_test(test_attn_scope_replays_bitwise_like_eager),
        cmocka_unit_test(test_attn_mlp_scope_replays_bitwise_like_eager),
        cmocka_unit_test(test_full_iteration_replays_bitwise_like_eager),
        cmocka_unit_test(test_zero_warmup_captures_the_first_step),
        cmocka_unit_test(test_debug_capture_check_passes_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
