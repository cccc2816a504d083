/* The graph engine on the unhappy paths: a NaN injected at step k in a full-iteration graph
 * is reported at step k with the weights of step k-1; a capture that fails is reported naming
 * what was captured and then stops the run (graphs.capture_failure=stop) or continues eagerly
 * with results identical to eager (=eager); debug.capture_check reports a step that cannot be
 * captured; and every path leaves no graph alive once the runner is destroyed. */
#include "graphs_fixture.h"

#define STEPS 12
#define WARMUP 2

GTF_EAGER_REFERENCE(STEPS)

/* Master weights of an eager run of `steps` steps. */
static void eager_master(int steps, gtf_run *out) {
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_train(&c, steps, out);
    assert_int_equal(out->steps, steps);
}

static void test_nan_in_full_iteration_graph_is_reported_at_its_step(void **state) {
    (void)state;
    const int k = 6; /* a replayed step */
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.runtime.inject_nan_at_step = k;
    gtf_run r, before;
    gtf_train(&c, STEPS, &r);
    gtf_assert_nan_stop_replayed(&r, k);
    /* the update of step k was skipped: weights are exactly those after step k-1 */
    eager_master(k - 1, &before);
    gtf_assert_same(&before, &r);
    assert_int_equal(r.live, 1);
    gtf_free(&r);
    gtf_free(&before);
}

static void test_nan_at_the_capture_step_is_caught_too(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    c.runtime.inject_nan_at_step = WARMUP + 1;
    gtf_run r;
    gtf_train(&c, STEPS, &r);
    assert_int_equal(r.rc, GT_ERR_NUMERIC);
    assert_int_equal(r.stop_step, WARMUP + 1);
    assert_int_equal(r.stop_mode, GT_STEP_CAPTURED);
    gtf_free(&r);
}

static void test_failed_full_iteration_capture_stops_the_run(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_STOP;
    gtf_run r, before;
    gtf_train_ex(&c, STEPS, "full_iteration", &r);
    assert_int_not_equal(r.rc, GT_OK);
    assert_int_equal(r.steps, WARMUP);
    assert_non_null(strstr(r.err.msg, "full_iteration"));
    assert_non_null(strstr(r.err.msg, "stream_sync"));
    assert_non_null(strstr(r.err.msg, "graphs.capture_failure=eager"));
    assert_int_equal(r.live, 0); /* no half graph */
    assert_int_equal(r.gs.graphs, 0);
    /* nothing of the failed step ran */
    eager_master(WARMUP, &before);
    gtf_assert_same(&before, &r);
    gtf_free(&r);
    gtf_free(&before);
}

static void test_failed_full_iteration_capture_falls_back_to_eager(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_EAGER;
    gtf_run r;
    gtf_train_ex(&c, STEPS, "full_iteration", &r);
    assert_int_equal(r.rc, GT_OK);
    gtf_assert_same(&g_eager, &r);
    for (int i = 0; i < STEPS; i++)
        assert_int_equal(r.mode[i], GT_STEP_EAGER);
    assert_int_equal(r.gs.fallbacks, 1);
    assert_int_equal(r.gs.graphs, 0);
    assert_int_equal(r.live, 0);
    assert_non_null(strstr(r.report, "fell back to eager"));
    gtf_free(&r);
}

static void test_failed_unit_capture_stops_naming_layer_and_scope(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_STOP;
    gtf_run r;
    gtf_train_ex(&c, STEPS, "layer 1 mlp", &r);
    assert_int_not_equal(r.rc, GT_OK);
    assert_int_equal(r.steps, WARMUP);
    assert_non_null(strstr(r.err.msg, "layer 1 mlp forward"));
    assert_non_null(strstr(r.err.msg, "graphs.capture_failure"));
    /* graphs captured before the failure are the runner's, and only those are alive */
    assert_int_equal(r.live, r.gs.graphs);
    assert_true(r.gs.graphs > 0);
    gtf_free(&r);
}

static void test_failed_unit_capture_runs_that_scope_eagerly(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_EAGER;
    gtf_run r;
    gtf_train_ex(&c, STEPS, "layer 1 mlp backward", &r);
    assert_int_equal(r.rc, GT_OK);
    gtf_assert_same(&g_eager, &r);
    gtf_assert_progress(&r, WARMUP); /* attn graphs still capture and replay */
    assert_int_equal(r.gs.fallbacks, 1);
    assert_int_equal(r.gs.graphs, 2 * c.model.num_layers); /* attn only: mlp graphs dropped */
    assert_int_equal(r.live, r.gs.graphs);
    gtf_free(&r);
}

static void test_force_failure_env_var_reaches_the_trainers_runner(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_EAGER;
    setenv("GT_GRAPHS_FORCE_CAPTURE_FAILURE", "layer 0 attn", 1);
    gtf_run r;
    gtf_train(&c, 4, &r);
    unsetenv("GT_GRAPHS_FORCE_CAPTURE_FAILURE");
    assert_int_equal(r.rc, GT_OK);
    assert_int_equal(r.gs.fallbacks, 1);
    assert_int_equal(r.gs.graphs, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(r.mode[i], GT_STEP_EAGER);
    gtf_free(&r);
}

static void test_capture_check_reports_a_step_that_cannot_be_captured(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    c.runtime.debug_capture_check = true;
    gtf_run r;
    gtf_train_ex(&c, 3, "capture_check", &r);
    assert_int_not_equal(r.rc, GT_OK);
    assert_int_equal(r.steps, 0);
    assert_non_null(strstr(r.err.msg, "debug.capture_check"));
    assert_non_null(strstr(r.err.msg, "stream_sync"));
    assert_int_equal(r.live, 0);
    gtf_free(&r);
}

/* ---- cleanup of a runner driven directly, so live_graphs can be read after destroy ---- */

static gt_trainer *make_trainer(gt_graph_impl impl, uint32_t scope, int inject_nan) {
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, impl, scope);
    c.runtime.inject_nan_at_step = inject_nan;
    c.graphs.capture_failure = GT_CAPTURE_FAIL_EAGER;
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    return t;
}

/* Runs `steps` steps through runner r and syncs; returns the last status. */
static int drive(gt_trainer *t, gt_graph_runner *r, int steps, gt_error *err) {
    gt_backend *b = gt_trainer_backend(t);
    for (int i = 0; i < steps; i++) {
        gt_step_mode mode;
        int rc = gtf_runner_step(r, t, &mode, err);
        if (rc == GT_OK) rc = b->ops->stream_sync(b, gt_trainer_stream(t), err);
        if (rc != GT_OK) return rc;
    }
    return GT_OK;
}

static void check_destroy_leaves_nothing(gt_graph_impl impl, uint32_t scope, int inject_nan,
                                         const char *force, int steps, int want_alive) {
    gt_trainer *t = make_trainer(impl, scope, inject_nan);
    gt_backend *b = gt_trainer_backend(t);
    gt_graph_runner *r = NULL;
    gt_error err = {0};
    assert_int_equal(gtf_runner_create(&r, t, &err), GT_OK);
    if (force) gt_graph_runner_force_capture_failure(r, force);
    drive(t, r, steps, &err);
    gt_graph_stats gs;
    gt_graph_runner_stats(r, &gs);
    assert_int_equal(gs.graphs, want_alive);
    assert_int_equal(b->ops->live_graphs(b), want_alive);
    gt_graph_runner_destroy(r);
    assert_int_equal(b->ops->live_graphs(b), 0);
    gt_trainer_destroy(t);
}

static void test_destroy_mid_run_leaves_no_graph(void **state) {
    (void)state;
    check_destroy_leaves_nothing(GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, -1, NULL, WARMUP + 2,
                                 1);
    check_destroy_leaves_nothing(GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP, -1, NULL,
                                 WARMUP + 2, 8);
}

static void test_destroy_after_nan_stop_leaves_no_graph(void **state) {
    (void)state;
    /* the NaN step ran inside the replayed graph (the update skipped on the device) */
    check_destroy_leaves_nothing(GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, WARMUP + 2, NULL,
                                 WARMUP + 2, 1);
}

static void test_destroy_after_failed_capture_leaves_no_graph(void **state) {
    (void)state;
    check_destroy_leaves_nothing(GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, -1, "full_iteration",
                                 WARMUP + 2, 0);
    /* layer 1's mlp forward fails after three graphs exist; the mlp ones are dropped */
    check_destroy_leaves_nothing(GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP, -1, "layer 1 mlp",
                                 WARMUP + 2, 4);
}

static void test_destroy_accepts_null(void **state) {
    (void)state;
    gt_graph_runner_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_in_full_iteration_graph_is_reported_at_its_step),
        cmocka_unit_test(test_nan_at_the_capture_step_is_caught_too),
        cmocka_unit_test(test_failed_full_iteration_capture_stops_the_run),
        cmocka_unit_test(test_failed_full_iteration_capture_falls_back_to_eager),
        cmocka_unit_test(test_failed_unit_capture_stops_naming_layer_and_scope),
        cmocka_unit_test(test_failed_unit_capture_runs_that_scope_eagerly),
        cmocka_unit_test(test_force_failure_env_var_reaches_the_trainers_runner),
        cmocka_unit_test(test_capture_check_reports_a_step_that_cannot_be_captured),
        cmocka_unit_test(test_destroy_mid_run_leaves_no_graph),
        cmocka_unit_test(test_destroy_after_nan_stop_leaves_no_graph),
        cmocka_unit_test(test_destroy_after_failed_capture_leaves_no_graph),
        cmocka_unit_test(test_destroy_accepts_null),
    };
    return cmocka_run_group_tests(tests, gtf_eager_setup, gtf_eager_teardown);
}
