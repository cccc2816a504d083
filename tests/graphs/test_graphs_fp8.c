/* fp8 training on the CPU backend's emulation: each recipe (fp8_cs, fp8_ds with a max-of-history
 * window, fp8_sc) gives bitwise the same losses and weights eagerly, with per-unit graphs and
 * with one full-iteration graph (dropout on, two micro-batches); each trains like fp32 within a
 * stated tolerance; a non-finite amax skips the step and names fp8; first_last_layers_bf16
 * keeps those layers' linears out of fp8. */
#include "graphs_fixture.h"
#include "model/model_internal.h"
#include "shard_fixture.h"

#define STEPS 8
#define WARMUP 2

static void with_recipe(gt_config *c, gt_compute_dtype d) {
    gtf_tiny_dense(c);
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 4;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void check_modes_bitwise(gt_compute_dtype d) {
    gt_config c;
    with_recipe(&c, d);
    float first;
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, GT_SCOPE_ATTN | GT_SCOPE_MLP, &first);
    /* and fp8 did run: the same model without it computes other losses */
    gtf_run bf16;
    with_recipe(&c, GT_DTYPE_BF16);
    gtf_train(&c, 1, &bf16);
    assert_true(bf16.loss[0] != first);
    gtf_free(&bf16);
}

static void test_current_scaling_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_CS);
}

static void test_delayed_scaling_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_DS);
}

static void test_blockwise_scaling_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_SC);
}

/* The tolerance: every step's loss within 2% of fp32's over 40 steps on a learnable sequence
 * (a repeating run of 13 tokens), in which fp32's loss falls by far more than that, so the
 * comparison tells training apart from not training. */
#define LOSS_STEPS 40
#define LOSS_REL_TOL 0.02
#define PERIOD 13

static void test_every_recipe_trains_like_fp32(void **state) {
    (void)state;
    char dir[256], prefix[300], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/fp8_pattern", dir);
    gt_test_write_pattern_set(prefix, 64, 8192, PERIOD, 0);
    gt_config c;
    gt_error err = {0};
    with_recipe(&c, GT_DTYPE_BF16); /* the CPU backend computes bf16 as fp32 */
    c.model.attention_dropout = c.model.hidden_dropout = 0;
    c.optimizer.lr = 1e-2;
    c.dataset.source = GT_DATA_SHARDS;
    snprintf(kv, sizeof kv, "dataset.data_path=%s", prefix);
    if (gt_config_override(&c, kv, &err) != GT_OK) fail_msg("%s", err.msg);
    gtf_run ref, fp8;
    gtf_train(&c, LOSS_STEPS, &ref);
    assert_int_equal(ref.steps, LOSS_STEPS);
    assert_true(ref.loss[LOSS_STEPS - 1] < 0.5f * ref.loss[0]);
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS, GT_DTYPE_FP8_SC};
    const char *names[] = {"fp8_cs", "fp8_ds", "fp8_sc"};
    for (int r = 0; r < 3; r++) {
        c.model.compute_dtype = recipes[r];
        gtf_train(&c, LOSS_STEPS, &fp8);
        assert_int_equal(fp8.steps, LOSS_STEPS);
        double worst = 0;
        for (int i = 0; i < LOSS_STEPS; i++) {
            double rel = fabs((double)fp8.loss[i] - ref.loss[i]) / ref.loss[i];
            worst = rel > worst ? rel : worst;
            if (rel > LOSS_REL_TOL)
                fail_msg("%s step %d: loss %.6f, fp32 %.6f (%.2f%% apart)", names[r], i + 1,
                         (double)fp8.loss[i], (double)ref.loss[i], 100 * rel);
        }
        printf("%s: final loss %.5f, fp32 %.5f (from %.5f), at most %.3f%% apart\n", names[r],
               (double)fp8.loss[LOSS_STEPS - 1], (double)ref.loss[LOSS_STEPS - 1],
               (double)ref.loss[0], 100 * worst);
        gtf_free(&fp8);
    }
    gtf_free(&ref);
}

/* A weight of Inf gives its fp8 copy an Inf amax: the cast flags the step, AdamW skips it and
 * the trainer stops naming fp8 (the NaN checks of loss and gradients off, so only fp8's fires) */
static void test_nonfinite_amax_skips_the_step_and_names_fp8(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_FP8_CS);
    c.rerun_state_machine.check_for_nan_in_loss = false;
    c.ddp.check_for_nan_in_grad = false;
    gtf_assert_valid(&c);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_model *m = gt_trainer_model(t);
    size_t n = gt_model_get_info(m)->n_params;
    float *w = calloc(n, sizeof *w), *after = calloc(n, sizeof *after);
    assert_int_equal(gt_trainer_read_master(t, w, &err), GT_OK);
    const gt_model_tensor_desc *qkv = &m->tensors[m->layers[0].attn.qkv_w];
    w[qkv->offset] = INFINITY;
    assert_int_equal(gt_trainer_write_master(t, w, &err), GT_OK);
    gt_step_stats st;
    assert_int_equal(gt_trainer_step(t, &st, &err), GT_ERR_NUMERIC);
    assert_true(st.nan_flags & GT_NAN_FP8);
    assert_non_null(strstr(err.msg, "fp8 amax"));
    assert_non_null(strstr(err.msg, "step 1"));
    assert_int_equal(gt_trainer_read_master(t, after, &err), GT_OK);
    assert_memory_equal(w, after, n * sizeof *w); /* the update was skipped */
    free(w), free(after);
    gt_trainer_destroy(t);
}

static void test_first_and_last_layers_stay_in_bf16(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_FP8_CS);
    c.model.num_layers = 4;
    c.model.first_last_layers_bf16 = true;
    c.model.num_layers_at_start_in_bf16 = 1;
    c.model.num_layers_at_end_in_bf16 = 2;
    gtf_assert_valid(&c);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("%s", err.msg);
    const gt_model *m = gt_trainer_model(t);
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < GT_LINEARS; i++)
            assert_int_equal(m->fp8.lin[l * GT_LINEARS + i].on, l == 1);
    assert_int_equal(m->fp8.n_meta, GT_LINEARS * GT_FP8_SLOTS);
    gt_trainer_destroy(t);
}

/* Evaluation casts with the scales but records nothing: a delayed-scaling run that evaluates
 * after every step trains bitwise like one that never evaluates (and reports eval losses). */
static void train_evaluating(const gt_config *c, int evaluate, gtf_run *out) {
    memset(out, 0, sizeof *out);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    for (int i = 0; i < STEPS; i++) {
        gt_step_stats st;
        if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("step %d: %s", i + 1, err.msg);
        out->loss[i] = st.loss;
        out->steps++;
        float eval_loss = 0;
        if (evaluate && gt_trainer_eval(t, &eval_loss, &err) != GT_OK) fail_msg("%s", err.msg);
        if (evaluate) assert_true(isfinite(eval_loss) && eval_loss > 0);
    }
    out->n_master = gt_model_get_info(gt_trainer_model(t))->n_params;
    out->master = calloc(out->n_master, sizeof(float));
    assert_int_equal(gt_trainer_read_master(t, out->master, &err), GT_OK);
    gt_trainer_destroy(t);
}

static void test_evaluation_leaves_delayed_scaling_alone(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_FP8_DS);
    c.train.eval_interval = 1000;
    c.train.eval_iters = 2;
    gtf_assert_valid(&c);
    gtf_run plain, evaluated;
    train_evaluating(&c, 0, &plain);
    train_evaluating(&c, 1, &evaluated);
    gtf_assert_same(&plain, &evaluated);
    gtf_free(&plain), gtf_free(&evaluated);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_replays_bitwise_like_eager),
        cmocka_unit_test(test_delayed_scaling_replays_bitwise_like_eager),
        cmocka_unit_test(test_blockwise_scaling_replays_bitwise_like_eager),
        cmocka_unit_test(test_every_recipe_trains_like_fp32),
        cmocka_unit_test(test_nonfinite_amax_skips_the_step_and_names_fp8),
        cmocka_unit_test(test_first_and_last_layers_stay_in_bf16),
        cmocka_unit_test(test_evaluation_leaves_delayed_scaling_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
