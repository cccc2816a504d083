/* CPU capture and replay: a recorded op sequence reads per-step values from the step state at
 * replay time (fresh dropout masks, LR, Adam bias correction), so replays equal eager steps
 * bitwise; graphs are counted; synchronizing inside a capture is rejected; planning computes
 * nothing. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/config.h"

typedef struct fixture {
    gt_backend *b;
    gt_stream *s;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    gt_error err = {0};
    if (!f || gt_backend_create_cpu(&f->b, &err) != GT_OK) return -1;
    if (f->b->ops->stream_create(f->b, &f->s, &err) != GT_OK) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    int live = f->b->ops->live_graphs(f->b);
    f->b->ops->stream_destroy(f->b, f->s);
    gt_backend_destroy(f->b);
    free(f);
    return live == 0 ? 0 : -1; /* every test destroys its graphs */
}

static void init_state(gt_step_state *st) {
    memset(st, 0, sizeof *st);
    st->nan_step = -1;
    st->inject_nan = -1;
}

static void fill(float *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 9) / 4194304.0f - 1.0f;
    }
}

static void test_replay_draws_the_dropout_mask_of_the_current_step(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    enum { N = 512 };
    float x[N], y[N], y0[N], y1[N];
    fill(x, N, 1);
    gt_step_state st;
    init_state(&st);
    gt_rng_site site = {42, 5, 0};
    b->ops->dropout_fwd(b, f->s, y0, x, N, 0.5f, site, &st); /* eager, step 0 */
    gt_error err = {0};
    gt_graph *g = NULL;
    memset(y, 0, sizeof y);
    assert_int_equal(b->ops->begin_capture(b, f->s, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    b->ops->dropout_fwd(b, f->s, y, x, N, 0.5f, site, &st);
    gt_graph_info info = {0};
    assert_int_equal(b->ops->end_capture(b, f->s, &g, &info, &err), GT_OK);
    assert_int_equal(info.nodes, 1);
    for (int i = 0; i < N; i++)
        assert_true(y[i] == 0.0f); /* capturing computes nothing */
    st.step = 1;
    assert_int_equal(b->ops->graph_launch(b, g, f->s, &err), GT_OK);
    b->ops->dropout_fwd(b, f->s, y1, x, N, 0.5f, site, &st); /* eager, step 1 */
    assert_memory_equal(y, y1, sizeof y);
    assert_memory_not_equal(y, y0, sizeof y);
    st.step = 0;
    assert_int_equal(b->ops->graph_launch(b, g, f->s, &err), GT_OK);
    assert_memory_equal(y, y0, sizeof y);
    b->ops->graph_destroy(b, g);
}

/* One tiny training step: linear logits, dropout, cross entropy, weight gradient, clipping,
 * AdamW. Everything per-step comes from st. */
enum { TM = 6, TK = 5, TV = 7 };

typedef struct tiny {
    float x[TM * TK], w[TV * TK], logits[TM * TV], losses[TM], dw[TV * TK];
    float m[TV * TK], v[TV * TK];
    int32_t targets[TM];
    gt_step_state st;
} tiny;

static void tiny_init(tiny *t) {
    memset(t, 0, sizeof *t);
    fill(t->x, TM * TK, 7);
    fill(t->w, TV * TK, 8);
    for (int i = 0; i < TM; i++)
        t->targets[i] = (i * 3) % TV;
    t->targets[2] = -1;
    init_state(&t->st);
}

static void tiny_step(gt_backend *b, gt_stream *s, tiny *t) {
    gt_lr_schedule sched = {1e-2f, 1e-3f, 2, 10, GT_LR_COSINE, 0.0f, 0, 0};
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_rng_site site = {1234, 17, 0};
    b->ops->step_begin(b, s, &t->st, sched);
    b->ops->memset0(b, s, t->dw, sizeof t->dw);
    b->ops->matmul_fwd(b, s, t->logits, t->x, t->w, NULL, NULL, TM, TV, TK);
    b->ops->dropout_fwd(b, s, t->logits, t->logits, TM * TV, 0.2f, site, &t->st);
    b->ops->cross_entropy(b, s, t->losses, t->logits, t->logits, t->targets, TM, TV, 1.0f / TM);
    b->ops->loss_accumulate(b, s, &t->st, t->losses, TM, 1.0f / TM);
    b->ops->dropout_bwd(b, s, t->logits, t->logits, TM * TV, 0.2f, site, &t->st);
    b->ops->matmul_bwd_weight(b, s, t->dw, NULL, t->logits, t->x, TM, TV, TK, 1);
    b->ops->grad_norm(b, s, &t->st, t->dw, TV * TK, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad);
    b->ops->adamw(b, s, t->w, t->w, t->dw, GT_NO_GRAD_ROWS, t->m, t->v, TV * TK, TV * TK, hp,
                  &t->st);
    b->ops->step_end(b, s, &t->st);
}

static void test_replayed_training_steps_equal_eager_steps_bitwise(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    tiny *eager = malloc(sizeof *eager), *graph = malloc(sizeof *graph);
    tiny_init(eager);
    tiny_init(graph);
    float eager_loss[4], graph_loss[4], eager_lr[4];
    for (int i = 0; i < 4; i++) {
        tiny_step(b, f->s, eager);
        eager_loss[i] = eager->st.loss;
        eager_lr[i] = eager->st.lr;
    }
    gt_error err = {0};
    gt_graph *g = NULL;
    assert_int_equal(b->ops->begin_capture(b, f->s, GT_CAPTURE_GLOBAL, &err), GT_OK);
    tiny_step(b, f->s, graph);
    assert_int_equal(b->ops->end_capture(b, f->s, &g, NULL, &err), GT_OK);
    assert_int_equal(graph->st.step, 0); /* nothing ran while capturing */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(b->ops->graph_launch(b, g, f->s, &err), GT_OK);
        graph_loss[i] = graph->st.loss;
    }
    b->ops->graph_destroy(b, g);
    assert_memory_equal(eager_loss, graph_loss, sizeof eager_loss);
    assert_memory_equal(eager->w, graph->w, sizeof eager->w);
    assert_memory_equal(&eager->st, &graph->st, sizeof eager->st);
    assert_int_equal(graph->st.step, 4);
    assert_true(eager_lr[0] != eager_lr[3]); /* the LR really moved between replays */
    assert_true(eager_loss[0] != eager_loss[1]);
    free(eager), free(graph);
}

static void test_live_graphs_counts_created_minus_destroyed(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    gt_error err = {0};
    gt_graph *g1 = NULL, *g2 = NULL;
    float buf[4] = {0};
    assert_int_equal(b->ops->live_graphs(b), 0);
    assert_int_equal(b->ops->begin_capture(b, f->s, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    b->ops->memset0(b, f->s, buf, sizeof buf);
    assert_int_equal(b->ops->end_capture(b, f->s, &g1, NULL, &err), GT_OK);
    assert_int_equal(b->ops->begin_capture(b, f->s, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    assert_int_equal(b->ops->end_capture(b, f->s, &g2, NULL, &err), GT_OK);
    assert_int_equal(b->ops->live_graphs(b), 2);
    b->ops->graph_destroy(b, g1);
    assert_int_equal(b->ops->live_graphs(b), 1);
    b->ops->graph_destroy(b, g2);
    b->ops->graph_destroy(b, NULL);
    assert_int_equal(b->ops->live_graphs(b), 0);
}

static void test_stream_sync_while_capturing_is_rejected_and_invalidates_capture(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    gt_error err = {0};
    gt_graph *g = NULL;
    float buf[4] = {1, 2, 3, 4};
    assert_int_equal(b->ops->begin_capture(b, f->s, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    b->ops->memset0(b, f->s, buf, sizeof buf);
    assert_int_equal(b->ops->stream_sync(b, f->s, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "capturing"));
    assert_non_null(strstr(err.msg, "end_capture"));
    gt_error err2 = {0};
    assert_int_not_equal(b->ops->end_capture(b, f->s, &g, NULL, &err2), GT_OK);
    assert_null(g);
    assert_int_equal(b->ops->live_graphs(b), 0);
    assert_true(buf[0] == 1.0f);
    /* the stream works normally afterwards */
    gt_error err3 = {0};
    assert_int_equal(b->ops->stream_sync(b, f->s, &err3), GT_OK);
}

static void test_planning_pass_computes_nothing(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    float a[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 1, 1, 1, 1, 1}, out[4] = {0};
    b->planning = 1;
    b->ops->matmul_fwd(b, f->s, out, a, w, NULL, NULL, 2, 2, 3);
    for (int i = 0; i < 4; i++)
        assert_true(out[i] == 0.0f);
    gt_error err = {0};
    assert_int_equal(b->ops->plan_finish(b, &err), GT_OK);
    assert_int_equal(b->planning, 0);
    b->ops->matmul_fwd(b, f->s, out, a, w, NULL, NULL, 2, 2, 3);
    assert_true(out[0] == 6.0f && out[3] == 15.0f);
}

static void test_planning_reports_bad_shapes(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    float buf[8] = {0};
    b->planning = 1;
    b->ops->matmul_fwd(b, f->s, buf, buf, buf, NULL, NULL, 2, 0, 3);
    gt_error err = {0};
    assert_int_equal(b->ops->plan_finish(b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "matmul_fwd"));
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_replay_draws_the_dropout_mask_of_the_current_step),
        T(test_replayed_training_steps_equal_eager_steps_bitwise),
        T(test_live_graphs_counts_created_minus_destroyed),
        T(test_stream_sync_while_capturing_is_rejected_and_invalidates_capture),
        T(test_planning_pass_computes_nothing),
        T(test_planning_reports_bad_shapes),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
