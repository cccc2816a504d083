/* The gradient-reduction hook: enqueued in every step between the backward and the gradient
 * norm, captured into a full-iteration graph and so run again on every replay, run eagerly
 * between per-unit graphs, and fixed once the first step has run. Without one, the model keeps
 * the embedding gradient's row marks, with the same bits. */
#include "graphs_fixture.h"
#include "trainer_testing.h"

#define STEPS 8
#define WARMUP 2

/* A hook that copies the gradients it is given into a snapshot buffer and counts its calls. */
typedef struct snap_hook {
    float *snap; /* device (backend) buffer [n] */
    size_t n;
    int calls; /* host calls: eager steps and the capture, not replays */
} snap_hook;

static void snapshot_grads(void *ctx, gt_backend *b, gt_stream *s, float *grads, size_t n) {
    snap_hook *h = ctx;
    h->calls++;
    b->ops->memcpy_d2d(b, s, h->snap, grads, n * sizeof(float));
}

/* A hook that stands for a reduction that zeroes everything: the gradient norm of each step
 * must then be 0, which shows where in the step the hook runs. */
static void zero_grads(void *ctx, gt_backend *b, gt_stream *s, float *grads, size_t n) {
    (void)ctx;
    b->ops->memset0(b, s, grads, n * sizeof(float));
}

typedef struct hook_run {
    float loss[STEPS], grad_norm[STEPS];
    gt_step_mode mode[STEPS];
    float *snap_host; /* [n] the snapshot after the last step */
    float *master;    /* [n] master weights after the last step */
    float *m, *v;     /* [n] Adam moments after the last step */
    int lagging;      /* embedding rows owing updates before the read (lazy rows) */
    int unswept;      /* rows of a slice the sweep had reached that owe a step before it */
    size_t n;
    int calls;
    int marked; /* the model kept the embedding gradient's row marks */
} hook_run;

static void free_run(hook_run *r) {
    free(r->snap_host), free(r->master), free(r->m), free(r->v);
}

static void run_with_hook(const gt_config *c, gt_grad_reduce_fn fn, hook_run *out) {
    gtf_assert_valid(c);
    memset(out, 0, sizeof *out);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    gt_backend *b = gt_trainer_backend(t);
    snap_hook h = {0};
    h.n = gt_model_get_info(gt_trainer_model(t))->n_params;
    void *mem = NULL;
    if (b->ops->alloc(b, h.n * sizeof(float), &mem, &err) != GT_OK) fail_msg("%s", err.msg);
    h.snap = mem;
    if (gt_trainer_set_grad_reduce(t, fn, &h, &err) != GT_OK) fail_msg("%s", err.msg);
    for (int i = 0; i < STEPS; i++) {
        gt_step_stats st;
        if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("step %d: %s", i + 1, err.msg);
        out->loss[i] = st.loss;
        out->grad_norm[i] = st.grad_norm;
        out->mode[i] = st.mode;
    }
    /* fixed once a step has run */
    gt_error late = {0};
    assert_int_equal(gt_trainer_set_grad_reduce(t, NULL, NULL, &late), GT_ERR_INVALID);
    assert_non_null(strstr(late.msg, "before the first step"));
    out->n = h.n;
    out->calls = h.calls;
    out->marked = gt_model_grad_rows(gt_trainer_model(t)).dirty != NULL;
    gt_grad_rows rows = gt_model_grad_rows(gt_trainer_model(t));
    if (rows.lag) { /* how many rows the reads below must bring up to date */
        int32_t *lag = calloc(rows.rows, sizeof *lag);
        assert_non_null(lag);
        b->ops->memcpy_d2h(b, gt_trainer_stream(t), lag, rows.lag, rows.rows * sizeof *lag);
        if (b->ops->stream_sync(b, gt_trainer_stream(t), &err) != GT_OK) fail_msg("%s", err.msg);
        /* the sweep caught row r up at step r / per (steps count from 0 here), so its lag is
         * at least that step + 1 */
        size_t per = (rows.rows + GT_LAZY_ROWS_SWEEP - 1) / GT_LAZY_ROWS_SWEEP;
        for (size_t r = 0; r < rows.rows; r++) {
            out->lagging += lag[r] < STEPS;
            out->unswept += r < per * STEPS && lag[r] < (int32_t)(r / per + 1);
        }
        free(lag);
    }
    out->master = calloc(h.n, sizeof(float));
    out->m = calloc(h.n, sizeof(float));
    out->v = calloc(h.n, sizeof(float));
    assert_true(out->master && out->m && out->v);
    if (gt_trainer_read_master(t, out->master, &err) != GT_OK) fail_msg("%s", err.msg);
    if (gt_trainer_read_moments(t, out->m, out->v, &err) != GT_OK) fail_msg("%s", err.msg);
    out->snap_host = calloc(h.n, sizeof(float));
    assert_non_null(out->snap_host);
    b->ops->memcpy_d2h(b, gt_trainer_stream(t), out->snap_host, h.snap, h.n * sizeof(float));
    if (b->ops->stream_sync(b, gt_trainer_stream(t), &err) != GT_OK) fail_msg("%s", err.msg);
    b->ops->free(b, h.snap);
    gt_trainer_destroy(t);
}

/* Eager, per-unit graphs and a full-iteration graph: the hook sees the same gradients at the
 * last step (bitwise), so it ran inside the replayed graph, not only at its capture. */
static void test_hook_runs_in_every_mode_and_inside_replays(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    c.model.cuda_graph_warmup_steps = WARMUP;
    hook_run eager, units, full;
    run_with_hook(&c, snapshot_grads, &eager);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    run_with_hook(&c, snapshot_grads, &units);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    run_with_hook(&c, snapshot_grads, &full);
    assert_int_equal(eager.calls, STEPS);
    assert_int_equal(units.calls, STEPS); /* eager between the unit graphs */
    /* the warmup steps eagerly, then once while capturing; replays do not call the host */
    assert_int_equal(full.calls, WARMUP + 1);
    assert_int_equal(full.mode[STEPS - 1], GT_STEP_REPLAYED);
    assert_memory_equal(eager.loss, full.loss, sizeof eager.loss);
    assert_memory_equal(eager.loss, units.loss, sizeof eager.loss);
    assert_memory_equal(eager.snap_host, full.snap_host, eager.n * sizeof(float));
    assert_memory_equal(eager.snap_host, units.snap_host, eager.n * sizeof(float));
    /* and the snapshot is the last step's, not the capture step's: gradients change */
    int nonzero = 0;
    for (size_t i = 0; i < eager.n; i++)
        nonzero += eager.snap_host[i] != 0.0f;
    assert_true(nonzero > 0);
    free_run(&eager), free_run(&units), free_run(&full);
}

/* The hook runs before the gradient norm (and so before clipping and AdamW) in every step of
 * a full-iteration run, replayed ones included. */
static void test_hook_runs_before_the_gradient_norm(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    c.model.cuda_graph_warmup_steps = WARMUP;
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    hook_run r;
    run_with_hook(&c, zero_grads, &r);
    for (int i = 0; i < STEPS; i++) {
        if (r.grad_norm[i] != 0.0f)
            fail_msg("step %d (mode %d): grad norm %g after a zeroing hook", i + 1, (int)r.mode[i],
                     (double)r.grad_norm[i]);
        assert_true(r.loss[i] > 0.0f);
    }
    free_run(&r);
}

/* A hook that changes nothing: the gradients stay the model's. */
static void keep_grads(void *ctx, gt_backend *b, gt_stream *s, float *grads, size_t n) {
    (void)ctx, (void)b, (void)s, (void)grads, (void)n;
}

/* Without a hook the model keeps the marks of the embedding gradient's rows (the tiny model's
 * steps touch at most 32 of its 64 rows), zeroes only the marked rows, the gradient norm skips
 * the others and AdamW leaves them lazy (replayed when read, and swept a slice a step); a hook
 * turns both off. Both give the same bits (losses, gradient norms, master weights, moments):
 * eager, with per-unit graphs, in a full-iteration graph, with two micro-batches a step and
 * with one. */
static void test_row_marks_give_the_bits_of_a_full_zeroing(void **state) {
    (void)state;
    for (int variant = 0; variant < 4; variant++) {
        gt_config c;
        gtf_tiny_dense(&c);
        c.model.cuda_graph_warmup_steps = WARMUP;
        if (variant == 1) gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
        if (variant >= 2) gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
        if (variant == 3) c.train.global_batch_size = c.train.micro_batch_size;
        hook_run marked, plain;
        run_with_hook(&c, NULL, &marked);
        run_with_hook(&c, keep_grads, &plain);
        assert_true(marked.marked);
        assert_false(plain.marked);
        assert_memory_equal(marked.loss, plain.loss, sizeof marked.loss);
        assert_memory_equal(marked.grad_norm, plain.grad_norm, sizeof marked.grad_norm);
        assert_int_equal(marked.n, plain.n);
        assert_memory_equal(marked.master, plain.master, marked.n * sizeof(float));
        assert_memory_equal(marked.m, plain.m, marked.n * sizeof(float));
        assert_memory_equal(marked.v, plain.v, marked.n * sizeof(float));
        assert_true(marked.lagging > 0); /* lazy rows were behind before the reads */
        assert_int_equal(marked.unswept, 0);
        assert_int_equal(plain.lagging, 0);
        free_run(&marked), free_run(&plain);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_runs_in_every_mode_and_inside_replays),
        cmocka_unit_test(test_hook_runs_before_the_gradient_norm),
        cmocka_unit_test(test_row_marks_give_the_bits_of_a_full_zeroing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
