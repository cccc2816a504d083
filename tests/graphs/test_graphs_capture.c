/* The graph engine's building blocks on the CPU backend, without a trainer: a guarded
 * capture records without running and replays on launch; a failed capture (forced sync, or
 * an op failing while recorded) names what was captured, leaves no graph alive and the
 * stream usable; the shape-bucket cache hits, evicts the least recently used graph and
 * destroys everything it holds; the policy reads Bridge's keys. */
#include "testlib.h"

#include <string.h>

#include "config/keys.h"
#include "graphs/buckets.h"
#include "graphs/capture.h"
#include "graphs/policy.h"

typedef struct fixture {
    gt_backend *b;
    gt_stream *s;
    float *x, *one; /* [4] each, device */
} fixture;

static void fixture_make(fixture *f) {
    gt_error err = {0};
    memset(f, 0, sizeof *f);
    assert_int_equal(gt_backend_create_cpu(&f->b, &err), GT_OK);
    assert_int_equal(f->b->ops->stream_create(f->b, &f->s, &err), GT_OK);
    assert_int_equal(f->b->ops->alloc(f->b, 4 * sizeof(float), (void **)&f->x, &err), GT_OK);
    assert_int_equal(f->b->ops->alloc(f->b, 4 * sizeof(float), (void **)&f->one, &err), GT_OK);
    for (int i = 0; i < 4; i++)
        f->one[i] = 1.0f;
}

static void fixture_free(fixture *f) {
    f->b->ops->free(f->b, f->x);
    f->b->ops->free(f->b, f->one);
    f->b->ops->stream_destroy(f->b, f->s);
    gt_backend_destroy(f->b);
}

/* x += 1, as one op */
static void body_increment(void *ctx, gt_stream *s) {
    fixture *f = ctx;
    f->b->ops->add(f->b, s, f->x, f->x, f->one, 4);
}

/* an op that fails while being recorded, the way an unplanned shape does */
static void body_failing_op(void *ctx, gt_stream *s) {
    fixture *f = ctx;
    f->b->ops->add(f->b, s, f->x, f->x, f->one, 4);
    gt_backend_fail(f->b, GT_ERR_INVALID, "matmul_fwd: shape 3x5x7 was not planned");
}

static gt_graph *capture_ok(fixture *f, int *nodes) {
    gt_error err = {0};
    gt_capture_result res;
    assert_int_equal(gt_graph_capture(f->b, f->s, GT_CAPTURE_THREAD_LOCAL, "test", 0,
                                      body_increment, f, &res, &err),
                     GT_OK);
    assert_non_null(res.graph);
    if (nodes) *nodes = res.nodes;
    return res.graph;
}

static void test_capture_records_without_running_and_each_launch_runs(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    int nodes = 0;
    gt_graph *g = capture_ok(&f, &nodes);
    assert_true(f.x[0] == 0.0f); /* capturing ran nothing */
    assert_int_equal(nodes, 1);
    assert_int_equal(f.b->ops->live_graphs(f.b), 1);
    assert_int_equal(f.b->ops->graph_launch(f.b, g, f.s, &err), GT_OK);
    assert_int_equal(f.b->ops->graph_launch(f.b, g, f.s, &err), GT_OK);
    assert_true(f.x[0] == 2.0f && f.x[3] == 2.0f);
    f.b->ops->graph_destroy(f.b, g);
    assert_int_equal(f.b->ops->live_graphs(f.b), 0);
    fixture_free(&f);
}

static void test_forced_capture_failure_names_label_and_leaves_stream_usable(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_capture_result res;
    int rc = gt_graph_capture(f.b, f.s, GT_CAPTURE_THREAD_LOCAL, "layer 1 attn forward", 1,
                              body_increment, &f, &res, &err);
    assert_int_not_equal(rc, GT_OK);
    assert_null(res.graph);
    assert_non_null(strstr(err.msg, "layer 1 attn forward"));
    assert_non_null(strstr(err.msg, "stream_sync"));
    assert_int_equal(f.b->ops->live_graphs(f.b), 0);
    assert_int_equal(f.b->sticky.code, GT_OK);
    /* the stream is no longer capturing: an op runs at once, and a new capture works */
    f.b->ops->add(f.b, f.s, f.x, f.x, f.one, 4);
    assert_true(f.x[0] == 1.0f);
    gt_graph *g = capture_ok(&f, NULL);
    assert_int_equal(f.b->ops->graph_launch(f.b, g, f.s, &err), GT_OK);
    assert_true(f.x[0] == 2.0f);
    f.b->ops->graph_destroy(f.b, g);
    fixture_free(&f);
}

static void test_op_failing_during_capture_is_reported_with_the_op_name(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_capture_result res;
    int rc = gt_graph_capture(f.b, f.s, GT_CAPTURE_GLOBAL, "capture_check", 0, body_failing_op, &f,
                              &res, &err);
    assert_int_equal(rc, GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "matmul_fwd"));
    assert_non_null(strstr(err.msg, "capture_check"));
    assert_null(res.graph);
    assert_int_equal(f.b->ops->live_graphs(f.b), 0);
    assert_true(f.x[0] == 0.0f); /* the recorded add never ran */
    fixture_free(&f);
}

static void test_capture_reports_memory_before_and_after(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_capture_result res;
    assert_int_equal(
        gt_graph_capture(f.b, f.s, GT_CAPTURE_THREAD_LOCAL, "m", 0, body_increment, &f, &res, &err),
        GT_OK);
    /* cpu: peak bytes of backend allocations; both buffers are in it, capture adds none */
    assert_true(res.mem_before >= 8 * sizeof(float));
    assert_int_equal(res.mem_after, res.mem_before);
    f.b->ops->graph_destroy(f.b, res.graph);
    fixture_free(&f);
}

typedef struct dropout_body {
    fixture *f;
    float *out;        /* [64] */
    const float *in;   /* [64] */
    gt_step_state *st; /* device step state */
} dropout_body;

static void body_dropout(void *ctx, gt_stream *s) {
    dropout_body *d = ctx;
    gt_rng_site site = {42, 7, 0};
    d->f->b->ops->dropout_fwd(d->f->b, s, d->out, d->in, 64, 0.5f, site, d->st);
}

/* A replayed dropout draws the mask of the current step (read from device memory), not the
 * mask of the step it was captured at, and matches an eager dropout of that step. */
static void test_replayed_dropout_draws_a_fresh_mask_each_step(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_backend *b = f.b;
    float *in, *out, *eager;
    gt_step_state *st;
    assert_int_equal(b->ops->alloc(b, 64 * sizeof(float), (void **)&in, &err), GT_OK);
    assert_int_equal(b->ops->alloc(b, 64 * sizeof(float), (void **)&out, &err), GT_OK);
    assert_int_equal(b->ops->alloc(b, 64 * sizeof(float), (void **)&eager, &err), GT_OK);
    assert_int_equal(b->ops->alloc(b, sizeof *st, (void **)&st, &err), GT_OK);
    for (int i = 0; i < 64; i++)
        in[i] = 1.0f;
    dropout_body body = {&f, out, in, st};
    gt_capture_result res;
    st->step = 0;
    assert_int_equal(gt_graph_capture(b, f.s, GT_CAPTURE_THREAD_LOCAL, "dropout", 0, body_dropout,
                                      &body, &res, &err),
                     GT_OK);
    float first[64];
    for (int step = 0; step < 3; step++) {
        st->step = step;
        assert_int_equal(b->ops->graph_launch(b, res.graph, f.s, &err), GT_OK);
        body.out = eager;
        body_dropout(&body, f.s); /* eager, same step */
        body.out = out;
        assert_memory_equal(out, eager, 64 * sizeof(float));
        if (step == 0)
            memcpy(first, out, sizeof first);
        else
            assert_memory_not_equal(out, first, sizeof first);
    }
    b->ops->graph_destroy(b, res.graph);
    b->ops->free(b, in);
    b->ops->free(b, out);
    b->ops->free(b, eager);
    b->ops->free(b, st);
    fixture_free(&f);
}

static void test_cache_hit_returns_the_graph_for_its_key(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_graph_cache c;
    assert_int_equal(gt_graph_cache_init(&c, f.b, 2, &err), GT_OK);
    gt_graph *a = capture_ok(&f, NULL), *b = capture_ok(&f, NULL);
    gt_graph_cache_put(&c, 512, a, 1);
    gt_graph_cache_put(&c, 384, b, 1);
    assert_ptr_equal(gt_graph_cache_get(&c, 512), a);
    assert_ptr_equal(gt_graph_cache_get(&c, 384), b);
    assert_null(gt_graph_cache_get(&c, 128));
    assert_int_equal(c.hits, 2);
    assert_int_equal(c.misses, 1);
    assert_int_equal(gt_graph_cache_nodes(&c), 2);
    gt_graph_cache_release(&c);
    fixture_free(&f);
}

static void test_cache_evicts_the_least_recently_used_graph(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_graph_cache c;
    assert_int_equal(gt_graph_cache_init(&c, f.b, 2, &err), GT_OK);
    gt_graph *a = capture_ok(&f, NULL), *b = capture_ok(&f, NULL), *g3 = capture_ok(&f, NULL);
    gt_graph_cache_put(&c, 1, a, 1);
    gt_graph_cache_put(&c, 2, b, 1);
    assert_ptr_equal(gt_graph_cache_get(&c, 1), a); /* 1 is now the most recent */
    gt_graph_cache_put(&c, 3, g3, 1);               /* evicts 2, not 1 */
    assert_int_equal(c.evictions, 1);
    assert_int_equal(c.count, 2);
    assert_null(gt_graph_cache_get(&c, 2));
    assert_ptr_equal(gt_graph_cache_get(&c, 1), a);
    assert_ptr_equal(gt_graph_cache_get(&c, 3), g3);
    assert_int_equal(f.b->ops->live_graphs(f.b), 2); /* the evicted graph was destroyed */
    gt_graph_cache_release(&c);
    fixture_free(&f);
}

static void test_cache_release_destroys_every_graph(void **state) {
    (void)state;
    fixture f;
    fixture_make(&f);
    gt_error err = {0};
    gt_graph_cache c;
    assert_int_equal(gt_graph_cache_init(&c, f.b, 4, &err), GT_OK);
    for (int k = 0; k < 3; k++)
        gt_graph_cache_put(&c, k, capture_ok(&f, NULL), 1);
    assert_int_equal(f.b->ops->live_graphs(f.b), 3);
    gt_graph_cache_clear(&c);
    assert_int_equal(f.b->ops->live_graphs(f.b), 0);
    assert_int_equal(c.count, 0);
    gt_graph_cache_put(&c, 7, capture_ok(&f, NULL), 1); /* usable after clear */
    gt_graph_cache_release(&c);
    assert_int_equal(f.b->ops->live_graphs(f.b), 0);
    gt_graph_cache_release(&c); /* twice is harmless */
    fixture_free(&f);
}

static void test_cache_rejects_zero_buckets_naming_the_key(void **state) {
    (void)state;
    gt_error err = {0};
    gt_graph_cache c;
    assert_int_equal(gt_graph_cache_init(&c, NULL, 0, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "graphs.max_shape_buckets"));
    gt_graph_cache_release(&c);
}

static void test_policy_reads_bridge_keys(void **state) {
    (void)state;
    gt_config cfg;
    gt_graph_policy p;
    gt_error err = {0};
    gt_config_defaults(&cfg);
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_OK);
    assert_int_equal(p.kind, GT_POLICY_EAGER);
    assert_string_equal(p.mode, "eager");

    cfg.model.cuda_graph_impl = GT_GRAPH_IMPL_LOCAL;
    cfg.model.cuda_graph_scope = GT_SCOPE_FULL_ITERATION;
    cfg.model.cuda_graph_warmup_steps = 2;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_OK);
    assert_int_equal(p.kind, GT_POLICY_FULL);
    assert_int_equal(p.warmup, 2);
    assert_string_equal(p.mode, "full_iteration");

    cfg.model.cuda_graph_impl = GT_GRAPH_IMPL_TE;
    cfg.model.cuda_graph_scope = GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_OK);
    assert_int_equal(p.kind, GT_POLICY_SCOPED);
    assert_string_equal(p.mode, "scoped(attn,moe_router,moe_preprocess)");
    assert_int_equal(p.units, (1u << GT_UNIT_ATTN) | (1u << GT_UNIT_MOE_ROUTER) |
                                  (1u << GT_UNIT_MOE_PREPROCESS));

    cfg.model.cuda_graph_scope = GT_SCOPE_MOE; /* the whole MoE block */
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_OK);
    assert_int_equal(p.units, (1u << GT_UNIT_MOE_ROUTER) | (1u << GT_UNIT_MOE_PREPROCESS) |
                                  (1u << GT_UNIT_MOE));
}

static void test_policy_rejects_scopes_the_impl_cannot_capture(void **state) {
    (void)state;
    gt_config cfg;
    gt_graph_policy p;
    gt_error err = {0};
    gt_config_defaults(&cfg);
    cfg.model.cuda_graph_impl = GT_GRAPH_IMPL_LOCAL;
    cfg.model.cuda_graph_scope = GT_SCOPE_ATTN;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.cuda_graph_impl=local"));
    cfg.model.cuda_graph_impl = GT_GRAPH_IMPL_TE;
    cfg.model.cuda_graph_scope = GT_SCOPE_FULL_ITERATION;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "full_iteration"));
    cfg.model.cuda_graph_scope = GT_SCOPE_MOE | GT_SCOPE_MOE_ROUTER;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "moe_router"));
    cfg.model.cuda_graph_scope = 0;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needs a model.cuda_graph_scope"));
    cfg.model.cuda_graph_scope = GT_SCOPE_MOE_PREPROCESS;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "moe_preprocess needs moe_router"));
    cfg.model.cuda_graph_scope = GT_SCOPE_ATTN;
    cfg.model.cuda_graph_warmup_steps = -1;
    assert_int_equal(gt_graph_policy_from_config(&cfg, &p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.cuda_graph_warmup_steps"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_records_without_running_and_each_launch_runs),
        cmocka_unit_test(test_forced_capture_failure_names_label_and_leaves_stream_usable),
        cmocka_unit_test(test_op_failing_during_capture_is_reported_with_the_op_name),
        cmocka_unit_test(test_capture_reports_memory_before_and_after),
        cmocka_unit_test(test_replayed_dropout_draws_a_fresh_mask_each_step),
        cmocka_unit_test(test_cache_hit_returns_the_graph_for_its_key),
        cmocka_unit_test(test_cache_evicts_the_least_recently_used_graph),
        cmocka_unit_test(test_cache_release_destroys_every_graph),
        cmocka_unit_test(test_cache_rejects_zero_buckets_naming_the_key),
        cmocka_unit_test(test_policy_reads_bridge_keys),
        cmocka_unit_test(test_policy_rejects_scopes_the_impl_cannot_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
