/* optimizer.lazy_embedding_rows: `off` (AdamW over every row every step) trains the very bits
 * of `auto` (rows a step leaves untouched updated when next read), eager and in a full-iteration
 * graph, so a user can bisect with it; a gradient-reduction hook turns the lazy rows off, and
 * says so, rather than quietly. */
#include <unistd.h>

#include "graphs_fixture.h"
#include "trainer_testing.h"

#define STEPS 12

typedef struct lazy_run {
    float loss[STEPS], grad_norm[STEPS];
    float *master, *m, *v; /* [n] after the last step */
    size_t n;
    char state[96];   /* gt_lazy_rows_describe after the run */
    int lag_passed;   /* the step's ops got row lags (lazy rows) */
    int marks_passed; /* the step's ops got row marks */
} lazy_run;

static void noop_hook(void *ctx, gt_backend *b, gt_stream *s, float *grads, size_t n) {
    (void)ctx, (void)b, (void)s, (void)grads, (void)n;
}

static void run(const gt_config *c, gt_grad_reduce_fn hook, lazy_run *out) {
    gtf_assert_valid(c);
    memset(out, 0, sizeof *out);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    if (hook && gt_trainer_set_grad_reduce(t, hook, NULL, &err) != GT_OK) fail_msg("%s", err.msg);
    for (int i = 0; i < STEPS; i++) {
        gt_step_stats st;
        if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("step %d: %s", i + 1, err.msg);
        out->loss[i] = st.loss;
        out->grad_norm[i] = st.grad_norm;
    }
    gt_grad_rows rows = gt_lazy_rows_marks(&t->lazy);
    out->lag_passed = rows.lag != NULL;
    out->marks_passed = rows.dirty != NULL;
    snprintf(out->state, sizeof out->state, "%s", gt_lazy_rows_describe(&t->lazy));
    out->n = t->n_params;
    out->master = calloc(out->n, sizeof(float));
    out->m = calloc(out->n, sizeof(float));
    out->v = calloc(out->n, sizeof(float));
    assert_true(out->master && out->m && out->v);
    if (gt_trainer_read_master(t, out->master, &err) != GT_OK) fail_msg("%s", err.msg);
    if (gt_trainer_read_moments(t, out->m, out->v, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_trainer_destroy(t);
}

static void free_run(lazy_run *r) {
    free(r->master), free(r->m), free(r->v);
}

static void test_off_trains_the_bits_of_auto(void **state) {
    (void)state;
    for (int full = 0; full < 2; full++) {
        gt_config c;
        gtf_tiny_dense(&c);
        if (full) gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
        lazy_run lazy, every;
        c.optimizer.lazy_embedding_rows = GT_LAZY_ROWS_AUTO;
        run(&c, NULL, &lazy);
        c.optimizer.lazy_embedding_rows = GT_LAZY_ROWS_OFF;
        run(&c, NULL, &every);
        assert_string_equal(lazy.state, "on");
        assert_true(lazy.lag_passed);
        assert_non_null(strstr(every.state, "optimizer.lazy_embedding_rows=off"));
        assert_false(every.lag_passed);  /* adamw updates every row */
        assert_true(every.marks_passed); /* the row marks are not what `off` turns off */
        assert_memory_equal(lazy.loss, every.loss, sizeof lazy.loss);
        assert_memory_equal(lazy.grad_norm, every.grad_norm, sizeof lazy.grad_norm);
        assert_memory_equal(lazy.master, every.master, lazy.n * sizeof(float));
        assert_memory_equal(lazy.m, every.m, lazy.n * sizeof(float));
        assert_memory_equal(lazy.v, every.v, lazy.n * sizeof(float));
        free_run(&lazy), free_run(&every);
    }
}

/* Runs c with a hook, stderr captured into buf. */
static void run_capturing_stderr(const gt_config *c, lazy_run *out, char *buf, size_t n) {
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), 2) >= 0);
    run(c, noop_hook, out);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t got = fread(buf, 1, n - 1, tmp);
    buf[got] = '\0';
    fclose(tmp);
}

static void test_a_grad_reduce_hook_turns_lazy_rows_off_and_says_so(void **state) {
    (void)state;
    gt_config c;
    gtf_tiny_dense(&c);
    lazy_run r;
    char note[4096];
    run_capturing_stderr(&c, &r, note, sizeof note);
    assert_non_null(strstr(r.state, "gradient-reduction hook"));
    assert_false(r.lag_passed);
    assert_false(r.marks_passed); /* other ranks' rows are unknown here */
    assert_non_null(strstr(note, "lazy embedding rows are off"));
    assert_non_null(strstr(note, "optimizer.lazy_embedding_rows=auto"));
    free_run(&r);
    /* asked for off: nothing to note */
    c.optimizer.lazy_embedding_rows = GT_LAZY_ROWS_OFF;
    run_capturing_stderr(&c, &r, note, sizeof note);
    assert_null(strstr(note, "lazy embedding rows"));
    free_run(&r);
}

static void test_lazy_embedding_rows_key_takes_auto_or_off(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    assert_int_equal(c.optimizer.lazy_embedding_rows, GT_LAZY_ROWS_AUTO);
    gt_error err = {0};
    assert_int_equal(gt_config_override(&c, "optimizer.lazy_embedding_rows=off", &err), GT_OK);
    assert_int_equal(c.optimizer.lazy_embedding_rows, GT_LAZY_ROWS_OFF);
    assert_int_equal(gt_config_override(&c, "optimizer.lazy_embedding_rows=on", &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "auto"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_trains_the_bits_of_auto),
        cmocka_unit_test(test_a_grad_reduce_hook_turns_lazy_rows_off_and_says_so),
        cmocka_unit_test(test_lazy_embedding_rows_key_takes_auto_or_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
