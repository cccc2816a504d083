/* Shape buckets through the runner: with local + full_iteration, gt_graph_runner_run
 * keeps one graph per shape key (captured the first time a key is seen after warmup, replayed
 * after), at most graphs.max_shape_buckets of them, evicting the least recently used; every
 * replay computes what the eager step computes; per-unit graphs only serve the ordinary shape;
 * destroy frees every bucket. The enqueued work is the trainer's real step under every key
 * (the trainer has one shape today); only the cache behaviour depends on the key. */
#include "graphs_fixture.h"

#define WARMUP 1

static gt_trainer *make_trainer(gt_graph_impl impl, uint32_t scope, int buckets) {
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, impl, scope);
    c.model.cuda_graph_warmup_steps = WARMUP;
    c.runtime.max_shape_buckets = buckets;
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    return t;
}

static gt_step_mode step_key(gt_trainer *t, gt_graph_runner *r, int64_t key) {
    gt_error err = {0};
    gt_step_mode mode = GT_STEP_EAGER;
    gt_graph_key k = {GT_GRAPH_STEP, key};
    if (gt_graph_runner_run(r, k, gtf_enqueue_step, t, &mode, &err) != GT_OK)
        fail_msg("run(%lld): %s", (long long)key, err.msg);
    gt_backend *b = gt_trainer_backend(t);
    if (b->ops->stream_sync(b, gt_trainer_stream(t), &err) != GT_OK) fail_msg("%s", err.msg);
    return mode;
}

static float *master_of(gt_trainer *t) {
    size_t n = gt_model_get_info(gt_trainer_model(t))->n_params;
    float *m = calloc(n, sizeof(float));
    gt_error err = {0};
    assert_non_null(m);
    assert_int_equal(gt_trainer_read_master(t, m, &err), GT_OK);
    return m;
}

static void test_buckets_capture_once_per_key_and_evict_lru(void **state) {
    (void)state;
    static const int64_t keys[] = {5, 5, 5, 7, 5, 7, 9, 5, 7, 7};
    static const gt_step_mode want[] = {
        GT_STEP_EAGER,    /* warmup */
        GT_STEP_CAPTURED, /* 5 */
        GT_STEP_REPLAYED, /* 5 */
        GT_STEP_CAPTURED, /* 7 */
        GT_STEP_REPLAYED, /* 5 */
        GT_STEP_REPLAYED, /* 7: now 5 is the least recently used */
        GT_STEP_CAPTURED, /* 9 evicts 5 */
        GT_STEP_CAPTURED, /* 5 again: evicts 7 */
        GT_STEP_CAPTURED, /* 7 again: evicts 9 */
        GT_STEP_REPLAYED, /* 7 */
    };
    const int n = (int)(sizeof keys / sizeof keys[0]);
    gt_trainer *t = make_trainer(GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 2);
    gt_trainer *ref = make_trainer(GT_GRAPH_IMPL_NONE, 0, 2);
    gt_backend *b = gt_trainer_backend(t);
    gt_graph_runner *r = NULL;
    gt_error err = {0};
    assert_int_equal(gtf_runner_create(&r, t, &err), GT_OK);
    for (int i = 0; i < n; i++) {
        gt_step_mode m = step_key(t, r, keys[i]);
        if (m != want[i])
            fail_msg("call %d (key %lld): mode %d, expected %d", i, (long long)keys[i], (int)m,
                     (int)want[i]);
        gt_trainer_enqueue_step(ref, gt_trainer_stream(ref), NULL);
    }
    gt_graph_stats gs;
    gt_graph_runner_stats(r, &gs);
    assert_int_equal(gs.buckets, 2);
    assert_int_equal(gs.graphs, 2);
    assert_int_equal(gs.evictions, 3);
    assert_int_equal(b->ops->live_graphs(b), 2);
    /* every replay and capture ran the real step: same weights as eager */
    float *mg = master_of(t), *me = master_of(ref);
    size_t np = gt_model_get_info(gt_trainer_model(t))->n_params;
    assert_memory_equal(mg, me, np * sizeof(float));
    free(mg);
    free(me);
    char report[1024] = {0};
    FILE *f = fmemopen(report, sizeof report - 1, "w");
    gt_graph_runner_report(r, f);
    fclose(f);
    assert_non_null(strstr(report, "shape buckets 2 of 2, 3 evictions"));
    gt_graph_runner_destroy(r);
    assert_int_equal(b->ops->live_graphs(b), 0);
    gt_trainer_destroy(t);
    gt_trainer_destroy(ref);
}

static void test_unit_graphs_serve_only_the_ordinary_shape(void **state) {
    (void)state;
    gt_trainer *t = make_trainer(GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN, 2);
    gt_graph_runner *r = NULL;
    gt_error err = {0};
    assert_int_equal(gtf_runner_create(&r, t, &err), GT_OK);
    const int64_t ordinary = gt_model_get_info(gt_trainer_model(t))->tokens;
    assert_int_equal(step_key(t, r, ordinary), GT_STEP_EAGER);    /* warmup */
    assert_int_equal(step_key(t, r, 3), GT_STEP_EAGER);           /* other shape: eager */
    assert_int_equal(step_key(t, r, ordinary), GT_STEP_CAPTURED); /* first ordinary step */
    assert_int_equal(step_key(t, r, 3), GT_STEP_EAGER);
    assert_int_equal(step_key(t, r, ordinary), GT_STEP_REPLAYED);
    gt_graph_stats gs;
    gt_graph_runner_stats(r, &gs);
    assert_int_equal(gs.graphs, 4);
    assert_int_equal(gs.buckets, 0);
    gt_graph_runner_destroy(r);
    gt_trainer_destroy(t);
}

static void test_zero_shape_buckets_is_rejected_with_the_key_name(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.runtime.max_shape_buckets = 0;
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "graphs.max_shape_buckets"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_capture_once_per_key_and_evict_lru),
        cmocka_unit_test(test_unit_graphs_serve_only_the_ordinary_shape),
        cmocka_unit_test(test_zero_shape_buckets_is_rejected_with_the_key_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
