/* A checkpoint written during a graph run resumes bitwise: the resumed run (full-iteration
 * graphs again, or per-unit graphs) warms up from its own start step as Bridge counts
 * (step - start_iteration), captures, replays, and matches the uninterrupted run's losses and
 * final master weights exactly. */
#include "graphs_fixture.h"

#include <unistd.h>

#define FIRST 8  /* steps before the checkpoint */
#define SECOND 8 /* steps after it */
#define WARMUP 2

static char g_dir[256];
static float g_loss[SECOND]; /* uninterrupted run, steps FIRST+1 .. FIRST+SECOND */
static float *g_master;      /* its final master weights */
static size_t g_n;

static int setup(void **state) {
    (void)state;
    gt_test_tmpdir(g_dir, sizeof g_dir);
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, &c, &err) != GT_OK) return -1;
    gt_step_stats st;
    for (int i = 0; i < FIRST; i++)
        if (gt_trainer_step(t, &st, &err) != GT_OK) return -1;
    if (st.mode != GT_STEP_REPLAYED) return -1; /* saved from a replaying run */
    if (gt_trainer_save(t, g_dir, &err) != GT_OK) return -1;
    for (int i = 0; i < SECOND; i++) {
        if (gt_trainer_step(t, &st, &err) != GT_OK) return -1;
        g_loss[i] = st.loss;
    }
    g_n = gt_model_get_info(gt_trainer_model(t))->n_params;
    g_master = calloc(g_n, sizeof(float));
    int rc = g_master ? gt_trainer_read_master(t, g_master, &err) : GT_ERR_NOMEM;
    gt_trainer_destroy(t);
    return rc == GT_OK ? 0 : -1;
}

/* Removes the checkpoint directory (flat: the checkpoint writes files only). */
static int teardown(void **state) {
    (void)state;
    free(g_master);
    gt_test_remove_flat_dir(g_dir);
    return 0;
}

static void check_resume(gt_graph_impl impl, uint32_t scope) {
    gt_config c;
    gtf_tiny_dense(&c);
    gtf_graphs(&c, impl, scope);
    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", g_dir);
    gtf_run r;
    gtf_train(&c, SECOND, &r);
    gtf_assert_resumed(&r, FIRST, g_loss, g_master, g_n, impl != GT_GRAPH_IMPL_NONE, WARMUP);
    assert_int_equal(r.steps, SECOND);
    gtf_free(&r);
}

static void test_graph_checkpoint_resumes_bitwise_in_full_iteration(void **state) {
    (void)state;
    check_resume(GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
}

static void test_graph_checkpoint_resumes_bitwise_with_unit_graphs(void **state) {
    (void)state;
    check_resume(GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
}

static void test_graph_checkpoint_resumes_bitwise_eagerly(void **state) {
    (void)state;
    check_resume(GT_GRAPH_IMPL_NONE, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_checkpoint_resumes_bitwise_in_full_iteration),
        cmocka_unit_test(test_graph_checkpoint_resumes_bitwise_with_unit_graphs),
        cmocka_unit_test(test_graph_checkpoint_resumes_bitwise_eagerly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
