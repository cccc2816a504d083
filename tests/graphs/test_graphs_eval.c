/* Evaluation through the graph engine as a shape bucket of its own: with local +
 * full_iteration the eval forward is captured once after the training warmup and replayed
 * afterwards, giving bitwise the eval losses, training losses and weights of an eager run; it
 * sits next to the training graph in the bucket cache (or evicts it and is evicted by it with
 * graphs.max_shape_buckets=1), never counts as a training step, follows
 * graphs.capture_failure when its capture fails, and leaves no graph alive once destroyed. */
#include "graphs_fixture.h"

#define STEPS 10
#define WARMUP 2     /* gtf_tiny_dense's cuda_graph_warmup_steps */
#define EVAL_EVERY 3 /* also evaluated before the first step */
#define EVAL_ITERS 2
#define MAX_EVALS (STEPS / EVAL_EVERY + 1)

typedef struct eval_run {
    gtf_run run; /* training side: losses, modes, master weights, stats, report, live graphs */
    int evals;   /* evaluations completed */
    float eval_loss[MAX_EVALS];
    int eval_after[MAX_EVALS]; /* training steps done before each evaluation */
} eval_run;

static eval_run g_eager; /* the eager reference with the same evaluation schedule */

static void eval_config(gt_config *c, gt_graph_impl impl, uint32_t scope, int buckets,
                        gt_capture_failure on_fail) {
    gtf_tiny_dense(c);
    gtf_graphs(c, impl, scope);
    c->train.eval_interval = EVAL_EVERY;
    c->train.eval_iters = EVAL_ITERS;
    c->runtime.max_shape_buckets = buckets;
    c->graphs.capture_failure = on_fail;
}

static int evaluate(gt_trainer *t, eval_run *out, int after, gt_error *err) {
    float loss = 0;
    int rc = gt_trainer_eval(t, &loss, err);
    if (rc != GT_OK) return rc;
    out->eval_loss[out->evals] = loss;
    out->eval_after[out->evals] = after;
    out->evals++;
    return GT_OK;
}

/* Evaluates, then trains STEPS steps evaluating every EVAL_EVERY (stopping at the first
 * error, kept in out->run.rc / err), keeps what the tests compare and tears down. */
static void train_with_eval(const gt_config *cfg, const char *force, eval_run *out) {
    gtf_assert_valid(cfg);
    memset(out, 0, sizeof *out);
    gtf_run *r = &out->run;
    r->stop_step = -1;
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, cfg, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    if (force) gt_graph_runner_force_capture_failure(gt_trainer_graph_runner(t), force);
    int rc = evaluate(t, out, 0, &err);
    for (int i = 0; rc == GT_OK && i < STEPS; i++) {
        gt_step_stats st;
        memset(&st, 0, sizeof st);
        rc = gt_trainer_step(t, &st, &err);
        if (rc != GT_OK) break;
        r->loss[i] = st.loss;
        r->mode[i] = st.mode;
        r->step_no[i] = st.step;
        r->steps++;
        if ((i + 1) % EVAL_EVERY == 0) rc = evaluate(t, out, i + 1, &err);
    }
    r->rc = rc;
    r->err = err;
    r->n_master = gt_model_get_info(gt_trainer_model(t))->n_params;
    r->master = calloc(r->n_master, sizeof(float));
    assert_non_null(r->master);
    gt_error rerr = {0};
    if (gt_trainer_read_master(t, r->master, &rerr) != GT_OK)
        fail_msg("gt_trainer_read_master: %s", rerr.msg);
    gt_graph_runner *gr = gt_trainer_graph_runner(t);
    gt_graph_runner_stats(gr, &r->gs);
    FILE *f = fmemopen(r->report, sizeof r->report - 1, "w");
    if (f) {
        gt_graph_runner_report(gr, f);
        fclose(f);
    }
    gt_backend *b = gt_trainer_backend(t);
    r->live = b->ops->live_graphs(b);
    gt_trainer_destroy(t);
}

/* Training losses, master weights and every eval loss bitwise equal to the eager run's. */
static void assert_same_as_eager(const eval_run *r) {
    gtf_assert_same(&g_eager.run, &r->run);
    assert_int_equal(r->evals, g_eager.evals);
    for (int i = 0; i < r->evals; i++)
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
        if (memcmp(&r->eval_loss[i], &g_eager.eval_loss[i], sizeof(float)) != 0)
            fail_msg("evaluation after step %d: loss %.9g != %.9g (eager)", r->eval_after[i],
                     (double)r->eval_loss[i], (double)g_eager.eval_loss[i]);
}

static int setup(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_NONE, 0, 4, GT_CAPTURE_FAIL_STOP);
    train_with_eval(&c, NULL, &g_eager);
    return g_eager.run.steps == STEPS && g_eager.run.rc == GT_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    gtf_free(&g_eager.run);
    return 0;
}

/* Evaluations that come after the warmup (those that go through the eval graph). */
static int graphed_evals(const eval_run *r) {
    int n = 0;
    for (int i = 0; i < r->evals; i++)
        n += r->eval_after[i] >= WARMUP;
    return n;
}

static void test_eval_losses_through_graphs_equal_eager(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_STOP);
    eval_run r;
    train_with_eval(&c, NULL, &r);
    assert_int_equal(r.run.rc, GT_OK);
    assert_same_as_eager(&r);
    /* the eval losses are not all the same value (training moved the weights) */
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    assert_true(memcmp(&r.eval_loss[0], &r.eval_loss[r.evals - 1], sizeof(float)) != 0);
    gtf_free(&r.run);
}

static void test_eval_is_its_own_bucket_and_no_training_step(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_STOP);
    eval_run r;
    gtf_run plain;
    train_with_eval(&c, NULL, &r);
    assert_int_equal(r.run.rc, GT_OK);
    c.train.eval_interval = 0; /* the same run without evaluation */
    c.train.eval_iters = 0;
    gtf_train(&c, STEPS, &plain);

    /* training step modes and counters are what they are without evaluation */
    gtf_assert_progress(&r.run, WARMUP);
    for (int i = 0; i < STEPS; i++)
        assert_int_equal(r.run.mode[i], plain.mode[i]);
    char steps_line[128];
    snprintf(steps_line, sizeof steps_line, "steps: %d eager, 1 captured, %d replayed", WARMUP,
             STEPS - WARMUP - 1);
    assert_non_null(strstr(r.run.report, steps_line));
    assert_non_null(strstr(plain.report, steps_line));

    /* two buckets: training and eval, both alive and owned by the runner */
    assert_int_equal(plain.gs.buckets, 1);
    assert_int_equal(r.run.gs.buckets, 2);
    assert_int_equal(r.run.gs.graphs, 2);
    assert_int_equal(r.run.gs.evictions, 0);
    assert_int_equal(r.run.live, 2);
    assert_true(r.run.gs.nodes > plain.gs.nodes);
    assert_non_null(strstr(r.run.report, "shape buckets 2 of 4"));

    /* eval batches before the warmup ends run eagerly; the first after it captures */
    int graphed = graphed_evals(&r);
    assert_true(graphed >= 2 && graphed < r.evals);
    assert_int_equal(r.run.gs.eval_eager, (int64_t)(r.evals - graphed) * EVAL_ITERS);
    assert_int_equal(r.run.gs.eval_captured, 1);
    assert_int_equal(r.run.gs.eval_replayed, (int64_t)graphed * EVAL_ITERS - 1);
    char eval_line[128];
    snprintf(eval_line, sizeof eval_line, "eval: %lld eager, 1 captured, %lld replayed",
             (long long)r.run.gs.eval_eager, (long long)r.run.gs.eval_replayed);
    assert_non_null(strstr(r.run.report, eval_line));
    assert_null(strstr(plain.report, "eval:"));
    assert_int_equal(plain.gs.eval_eager + plain.gs.eval_replayed, 0);
    gtf_free(&r.run);
    gtf_free(&plain);
}

static void test_one_bucket_evicts_back_and_forth_and_stays_exact(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 1, GT_CAPTURE_FAIL_STOP);
    eval_run r;
    train_with_eval(&c, NULL, &r);
    assert_int_equal(r.run.rc, GT_OK);
    assert_same_as_eager(&r);
    /* each graphed evaluation evicts the training graph: the next step captures it again */
    int train_captures = 0;
    for (int i = 0; i < STEPS; i++) {
        int after_eval = i > WARMUP && i % EVAL_EVERY == 0;
        gt_step_mode want = i < WARMUP                    ? GT_STEP_EAGER
                            : (i == WARMUP || after_eval) ? GT_STEP_CAPTURED
                                                          : GT_STEP_REPLAYED;
        if (r.run.mode[i] != want)
            fail_msg("step %d: mode %d, expected %d", i + 1, (int)r.run.mode[i], (int)want);
        train_captures += want == GT_STEP_CAPTURED;
    }
    /* ... and each evaluation captures its graph again, replaying it for its other batches */
    int graphed = graphed_evals(&r);
    assert_int_equal(r.run.gs.eval_captured, graphed);
    assert_int_equal(r.run.gs.eval_replayed, (int64_t)graphed * (EVAL_ITERS - 1));
    assert_int_equal(r.run.gs.buckets, 1);
    assert_int_equal(r.run.gs.graphs, 1);
    assert_int_equal(r.run.live, 1);
    /* every capture after the first evicted the one graph there was */
    assert_int_equal(r.run.gs.evictions, train_captures + graphed - 1);
    assert_true(r.run.gs.evictions >= 2);
    gtf_free(&r.run);
}

static void test_failed_eval_capture_runs_eval_eagerly(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_EAGER);
    eval_run r;
    train_with_eval(&c, "full_iteration eval", &r);
    assert_int_equal(r.run.rc, GT_OK);
    assert_same_as_eager(&r);
    /* the training graph is untouched: captured after warmup, replayed, still alive */
    gtf_assert_progress(&r.run, WARMUP);
    assert_int_equal(r.run.gs.fallbacks, 1);
    assert_int_equal(r.run.gs.eval_captured + r.run.gs.eval_replayed, 0);
    assert_int_equal(r.run.gs.eval_eager, (int64_t)r.evals * EVAL_ITERS);
    assert_int_equal(r.run.gs.buckets, 1);
    assert_int_equal(r.run.live, 1);
    assert_non_null(strstr(r.run.report, "fell back to eager"));
    assert_non_null(strstr(r.run.report, "full_iteration eval"));
    gtf_free(&r.run);
}

static void test_failed_eval_capture_stops_naming_it(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_STOP);
    eval_run r;
    train_with_eval(&c, "full_iteration eval", &r);
    assert_int_not_equal(r.run.rc, GT_OK);
    assert_non_null(strstr(r.run.err.msg, "full_iteration eval"));
    assert_non_null(strstr(r.run.err.msg, "graphs.capture_failure=eager"));
    assert_non_null(strstr(r.run.err.msg, "evaluation after step"));
    /* it stopped at the first graphed evaluation, with the training graph intact */
    int first = -1;
    for (int i = 0; i < g_eager.evals && first < 0; i++)
        if (g_eager.eval_after[i] >= WARMUP) first = g_eager.eval_after[i];
    assert_int_equal(r.run.steps, first);
    assert_int_equal(r.run.gs.buckets, 1);
    assert_int_equal(r.run.live, 1);
    assert_int_equal(r.run.gs.eval_captured, 0);
    gtf_free(&r.run);
}

/* ---- a runner driven directly, so live graphs can be read after it is destroyed ---- */

typedef struct fwd_ctx {
    gt_model *m;
    int32_t *tokens;   /* device [2 * N]: tokens then targets */
    gt_step_state *st; /* device [1] */
    int n;             /* tokens per micro-batch */
} fwd_ctx;

static gt_graph_key eval_key(int64_t tokens) {
    return (gt_graph_key){GT_GRAPH_EVAL, tokens};
}

static void enqueue_forward(void *ctx, gt_stream *s, const gt_unit_exec *exec) {
    (void)exec;
    const fwd_ctx *f = ctx;
    gt_model_forward_loss(f->m, s, f->tokens, f->tokens + f->n, 1.0f, f->st);
}

static void check_destroy_leaves_nothing(const char *force, int want_alive) {
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_EAGER);
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    gt_backend *b = gt_trainer_backend(t);
    gt_stream *s = gt_trainer_stream(t);
    fwd_ctx f = {gt_trainer_model(t), NULL, NULL, gt_model_get_info(gt_trainer_model(t))->tokens};
    size_t tok_bytes = 2 * (size_t)f.n * sizeof(int32_t);
    assert_int_equal(b->ops->alloc(b, tok_bytes, (void **)&f.tokens, &err), GT_OK);
    assert_int_equal(b->ops->alloc(b, sizeof(gt_step_state), (void **)&f.st, &err), GT_OK);
    b->ops->memset0(b, s, f.tokens, tok_bytes);
    b->ops->memset0(b, s, f.st, sizeof(gt_step_state));
    gt_graph_runner *r = NULL;
    assert_int_equal(gtf_runner_create(&r, t, &err), GT_OK);
    if (force) gt_graph_runner_force_capture_failure(r, force);
    for (int i = 0; i < WARMUP + 2; i++) {
        gt_step_mode mode;
        assert_int_equal(gtf_runner_step(r, t, &mode, &err), GT_OK);
        assert_int_equal(gt_graph_runner_run(r, eval_key(f.n), enqueue_forward, &f, &mode, &err),
                         GT_OK);
        assert_int_equal(b->ops->stream_sync(b, s, &err), GT_OK);
    }
    gt_graph_stats gs;
    gt_graph_runner_stats(r, &gs);
    assert_int_equal(gs.graphs, want_alive);
    assert_int_equal(b->ops->live_graphs(b), want_alive);
    gt_graph_runner_destroy(r);
    assert_int_equal(b->ops->live_graphs(b), 0);
    b->ops->free(b, f.tokens);
    b->ops->free(b, f.st);
    gt_trainer_destroy(t);
}

static void test_destroy_leaves_no_eval_graph(void **state) {
    (void)state;
    check_destroy_leaves_nothing(NULL, 2);                  /* training + eval */
    check_destroy_leaves_nothing("full_iteration eval", 1); /* training only */
}

static void test_eval_without_a_runner_or_forward_is_an_error(void **state) {
    (void)state;
    gt_error err = {0};
    assert_int_equal(gt_graph_runner_run(NULL, eval_key(8), enqueue_forward, NULL, NULL, &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "no runner"));
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_STOP);
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    assert_int_equal(
        gt_graph_runner_run(gt_trainer_graph_runner(t), eval_key(8), NULL, NULL, NULL, &err),
        GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "fn is NULL"));
    gt_trainer_destroy(t);
}

/* An evaluation right after the warmup steps, before the training step has been captured,
 * runs eagerly: the training graph is always the first one captured. */
static void test_eval_at_the_warmup_boundary_waits_for_the_training_capture(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 4, GT_CAPTURE_FAIL_STOP);
    gtf_assert_valid(&c);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    gt_step_stats st;
    for (int i = 0; i < WARMUP; i++) {
        assert_int_equal(gt_trainer_step(t, &st, &err), GT_OK);
        assert_int_equal(st.mode, GT_STEP_EAGER);
    }
    float loss = 0;
    assert_int_equal(gt_trainer_eval(t, &loss, &err), GT_OK);
    gt_graph_stats gs;
    gt_graph_runner_stats(gt_trainer_graph_runner(t), &gs);
    assert_int_equal(gs.eval_captured, 0);
    assert_int_equal(gs.eval_eager, EVAL_ITERS);
    assert_int_equal(gs.graphs, 0);
    assert_int_equal(gt_trainer_step(t, &st, &err), GT_OK);
    assert_int_equal(st.mode, GT_STEP_CAPTURED);
    assert_int_equal(gt_trainer_eval(t, &loss, &err), GT_OK);
    gt_graph_runner_stats(gt_trainer_graph_runner(t), &gs);
    assert_int_equal(gs.eval_captured, 1);
    assert_int_equal(gs.graphs, 2);
    gt_trainer_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_losses_through_graphs_equal_eager),
        cmocka_unit_test(test_eval_is_its_own_bucket_and_no_training_step),
        cmocka_unit_test(test_one_bucket_evicts_back_and_forth_and_stays_exact),
        cmocka_unit_test(test_failed_eval_capture_runs_eval_eagerly),
        cmocka_unit_test(test_failed_eval_capture_stops_naming_it),
        cmocka_unit_test(test_destroy_leaves_no_eval_graph),
        cmocka_unit_test(test_eval_without_a_runner_or_forward_is_an_error),
        cmocka_unit_test(test_eval_at_the_warmup_boundary_waits_for_the_training_capture),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
