/* fp8 expert GEMMs on the CPU backend's emulation (model/model_fp8_moe.c): a tiny MoE model in
 * fp8_cs and in fp8_ds gives bitwise the same losses and weights eagerly, with per-unit graphs
 * and in one full-iteration graph (dropless and drop-and-pad, one and two micro-batches, dropout
 * on); each trains like fp32 within a stated tolerance; every expert's weight copy is the cast
 * of its own weights with its own scale; the experts' GEMMs do change the loss (against the
 * same model with them switched back to bf16); first_last_layers_bf16 keeps those layers' experts
 * in bf16. */
#include "graphs_fixture.h"
#include "model/model_internal.h"
#include "shard_fixture.h"

#define STEPS 8
#define WARMUP 2

static void with_recipe(gt_config *c, gt_compute_dtype d) {
    gtf_tiny_moe(c);
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 4;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void check_modes_bitwise(gt_compute_dtype d, double capacity, int micro_batches) {
    gt_config c;
    with_recipe(&c, d);
    c.model.moe_expert_capacity_factor = capacity;
    c.model.moe_pad_expert_input_to_capacity = capacity > 0;
    c.train.global_batch_size = micro_batches * c.train.micro_batch_size;
    /* drop-and-pad may graph the whole MoE block (Bridge's rule); dropless its routing */
    uint32_t scopes = capacity > 0 ? GT_SCOPE_ATTN | GT_SCOPE_MOE
                                   : GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS;
    float first;
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, scopes, &first);
    gtf_run bf16;
    c.model.compute_dtype = GT_DTYPE_BF16;
    gtf_train(&c, 1, &bf16);
    assert_true(bf16.loss[0] != first); /* fp8 did run */
    gtf_free(&bf16);
}

static void test_current_scaling_moe_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_CS, 0.0, 2);
}

static void test_delayed_scaling_moe_replays_bitwise_like_eager(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_DS, 0.0, 2);
}

static void test_fp8_moe_with_capacity_in_the_moe_scope_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_CS, 1.0, 2);
    check_modes_bitwise(GT_DTYPE_FP8_DS, 1.0, 2);
}

/* one micro-batch a step: each expert's w^T is cast in the backward into the shared buffer */
static void test_fp8_moe_with_one_micro_batch_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_CS, 0.0, 1);
    check_modes_bitwise(GT_DTYPE_FP8_DS, 0.0, 1);
}

/* Every step's loss within 2% of fp32's over 40 steps on a learnable sequence (a repeating run
 * of 13 tokens), in which fp32's loss falls by far more than that. */
#define LOSS_STEPS 40
#define LOSS_REL_TOL 0.02
#define PERIOD 13

static void test_fp8_moe_trains_like_fp32(void **state) {
    (void)state;
    char dir[256], prefix[300], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/fp8_moe_pattern", dir);
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
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS};
    const char *names[] = {"fp8_cs", "fp8_ds"};
    for (int r = 0; r < 2; r++) {
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
        printf("MoE %s: final loss %.5f, fp32 %.5f (from %.5f), at most %.3f%% apart\n", names[r],
               (double)fp8.loss[LOSS_STEPS - 1], (double)ref.loss[LOSS_STEPS - 1],
               (double)ref.loss[0], 100 * worst);
        gtf_free(&fp8);
    }
    gtf_free(&ref);
}

/* After a step, each expert's fp8 copy is its weights (as they were before the step's update)
 * cast with its own scale, fp8_max / that expert's amax */
static void test_each_expert_weight_is_cast_with_its_own_scale(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_FP8_CS);
    gtf_assert_valid(&c);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_model *m = gt_trainer_model(t);
    size_t n = gt_model_get_info(m)->n_params;
    float *w = calloc(n, sizeof *w);
    assert_int_equal(gt_trainer_read_master(t, w, &err), GT_OK);
    /* expert 1's gate/up weights at 8 times the others', so its scale is another */
    const gt_model_tensor_desc *gu = &m->tensors[m->layers[1].moe.gu_w];
    int E = m->dm.E, rows = 2 * m->dm.fe, cols = m->dm.d;
    for (int i = 0; i < rows * cols; i++)
        w[gu->offset + (size_t)rows * cols + i] *= 8.0f;
    assert_int_equal(gt_trainer_write_master(t, w, &err), GT_OK);
    gt_step_stats st;
    assert_int_equal(gt_trainer_step(t, &st, &err), GT_OK);
    const gt_fp8_experts *x = &m->fp8.moe[1 * GT_MOE_LINEARS + GT_MOE_LIN_GU];
    assert_true(x->on);
    const float *q = x->qw;
    for (int e = 0; e < E; e++) {
        const float *we = w + gu->offset + (size_t)e * rows * cols;
        float amax = 0;
        for (int i = 0; i < rows * cols; i++)
            amax = fabsf(we[i]) > amax ? fabsf(we[i]) : amax;
        float scale = GT_FP8_E4M3_MAX / amax;
        assert_float_equal(x->sw[e], 1.0f / scale, 0);
        for (int i = 0; i < rows * cols; i++) {
            float want =
                gt_fp8_to_float(gt_fp8_from_float(we[i] * scale, GT_FP8_E4M3), GT_FP8_E4M3);
            if (q[(size_t)e * rows * cols + i] != want)
                fail_msg("expert %d element %d: %g, want %g", e, i,
                         (double)q[(size_t)e * rows * cols + i], (double)want);
        }
    }
    assert_true(x->sw[1] != x->sw[0]);
    free(w);
    gt_trainer_destroy(t);
}

/* The first step's loss with the expert GEMMs in fp8, or (experts_off) with them switched back
 * to bf16 after the trainer is built, the dense linears in fp8 either way */
static float first_loss(const gt_config *c, int experts_off) {
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_model *m = gt_trainer_model(t);
    for (int i = 0; experts_off && i < m->num_layers * GT_MOE_LINEARS; i++)
        m->fp8.moe[i].on = 0;
    gt_step_stats st;
    if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_trainer_destroy(t);
    return st.loss;
}

static void test_the_expert_gemms_run_in_fp8(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_FP8_CS);
    gtf_assert_valid(&c);
    float fp8 = first_loss(&c, 0), bf16 = first_loss(&c, 1);
    assert_true(fp8 != bf16);
    assert_true(fabsf(fp8 - bf16) < 0.01f * bf16); /* and close */
}

static void test_first_and_last_layers_keep_their_experts_in_bf16(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_FP8_DS);
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
        for (int i = 0; i < GT_MOE_LINEARS; i++)
            assert_int_equal(m->fp8.moe[l * GT_MOE_LINEARS + i].on, l == 1);
    assert_int_equal(m->fp8.moe_on, GT_MOE_LINEARS);
    /* layer 1's dense linears (qkv, o) and both expert linears: x, g and one per expert */
    int dense = 0;
    for (int i = 0; i < GT_LINEARS; i++)
        dense += m->fp8.lin[1 * GT_LINEARS + i].on;
    assert_int_equal(m->fp8.n_meta,
                     dense * GT_FP8_SLOTS + GT_MOE_LINEARS * (GT_FP8_MOE_SLOT_W + m->dm.E));
    gt_trainer_destroy(t);
    gtf_run run;
    gtf_train(&c, 3, &run); /* and it trains */
    assert_int_equal(run.steps, 3);
    gtf_free(&run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_moe_replays_bitwise_like_eager),
        cmocka_unit_test(test_delayed_scaling_moe_replays_bitwise_like_eager),
        cmocka_unit_test(test_fp8_moe_with_capacity_in_the_moe_scope_replays_bitwise),
        cmocka_unit_test(test_fp8_moe_with_one_micro_batch_replays_bitwise),
        cmocka_unit_test(test_fp8_moe_trains_like_fp32),
        cmocka_unit_test(test_each_expert_weight_is_cast_with_its_own_scale),
        cmocka_unit_test(test_the_expert_gemms_run_in_fp8),
        cmocka_unit_test(test_first_and_last_layers_keep_their_experts_in_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
