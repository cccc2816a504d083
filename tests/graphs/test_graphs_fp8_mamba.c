/* fp8 Mamba layers on the CPU emulation: a tiny hybrid (Mamba, attention, Mamba, MLP; dropout
 * on) runs the Mamba in_proj and out_proj as fp8 linear layers (the scan stays in fp32), so
 * every recipe replays bitwise like eager with per-unit (attn, mamba, mlp) graphs and with the
 * full-iteration graph; the Mamba projections really are fp8 (slots planned, other losses
 * than with them in bf16), and the hybrid still trains like fp32 within a stated tolerance. */
#include "graphs_fixture.h"
#include "model/model_internal.h"

#define STEPS 6
#define WARMUP 2

static void tiny_hybrid(gt_config *c, gt_compute_dtype d) {
    gtf_tiny_dense(c);
    c->model.num_layers = 4;
    snprintf(c->model.layer_pattern, sizeof c->model.layer_pattern, "M*M-");
    c->model.mamba_state_dim = 4;
    c->model.mamba_head_dim = 4;
    c->model.mamba_num_groups = 2;
    c->model.mamba_expand = 2;
    c->model.mamba_d_conv = 4;
    c->model.mamba_chunk_size = 4;
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 3;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void check_modes_bitwise(gt_compute_dtype d) {
    gt_config c;
    tiny_hybrid(&c, d);
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP,
                                          GT_SCOPE_ATTN | GT_SCOPE_MAMBA | GT_SCOPE_MLP, NULL);
}

static void test_current_scaling_mamba_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_CS);
}

static void test_delayed_scaling_mamba_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_DS);
}

static void test_blockwise_scaling_mamba_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_SC);
}

/* the Mamba layers' two projections have fp8 state, sized as the layer's weights */
static void test_mamba_projections_are_fp8_linears(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c, GT_DTYPE_FP8_CS);
    gtf_assert_valid(&c);
    gt_error err = {0};
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("%s", err.msg);
    const gt_model *m = gt_trainer_model(t);
    for (int l = 0; l < 4; l += 2) {
        const gt_fp8_linear *in = &m->fp8.lin[l * GT_LINEARS + GT_LIN_MAMBA_IN];
        const gt_fp8_linear *out = &m->fp8.lin[l * GT_LINEARS + GT_LIN_MAMBA_OUT];
        assert_int_equal(in->on, 1);
        assert_int_equal(out->on, 1);
        assert_int_equal(in->weight, m->layers[l].mamba.in_w);
        assert_int_equal(out->weight, m->layers[l].mamba.out_w);
        assert_int_equal(in->out, gt_mamba_in(m->dm.ms));
        assert_int_equal(out->in, gt_mamba_inner(m->dm.ms));
        assert_int_equal(m->fp8.lin[l * GT_LINEARS + GT_LIN_O].on, 0);
        assert_int_equal(m->fp8.lin[l * GT_LINEARS + GT_LIN_GU].on, 0);
    }
    /* 2 Mamba layers x 2, the attention layer's 2, the MLP layer's 2 */
    assert_int_equal(m->fp8.n_meta, 8 * GT_FP8_SLOTS);
    /* and the unit casts through them: after a step current scaling has recorded an amax for
     * each projection's input, weight and output gradient (CPU: the state is host memory) */
    gt_step_stats st;
    if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
    for (int l = 0; l < 4; l += 2)
        for (int k = 0; k < 2; k++) {
            int lin = k ? GT_LIN_MAMBA_OUT : GT_LIN_MAMBA_IN;
            const gt_fp8_linear *li = &m->fp8.lin[l * GT_LINEARS + lin];
            for (int slot = 0; slot < GT_FP8_SLOTS; slot++)
                if (!(m->fp8.meta[li->slot + slot].amax > 0))
                    fail_msg("layer %d %s slot %d: no amax recorded", l, k ? "out_proj" : "in_proj",
                             slot);
        }
    gt_trainer_destroy(t);
}

/* Only the middle layer (Mamba) in fp8, the first and last kept in bf16: the first step's loss
 * (a forward of the initial weights) differs from bf16's only because in_proj and out_proj
 * computed in fp8. */
static void test_mamba_forward_in_fp8_changes_the_first_loss(void **state) {
    (void)state;
    gt_config c;
    gtf_run bf16, fp8;
    tiny_hybrid(&c, GT_DTYPE_BF16);
    c.model.num_layers = 3;
    snprintf(c.model.layer_pattern, sizeof c.model.layer_pattern, "*M-");
    gtf_train(&c, 1, &bf16);
    c.model.compute_dtype = GT_DTYPE_FP8_CS;
    c.model.first_last_layers_bf16 = true;
    c.model.num_layers_at_start_in_bf16 = 1;
    c.model.num_layers_at_end_in_bf16 = 1;
    gtf_train(&c, 1, &fp8);
    assert_int_equal(bf16.rc, GT_OK);
    assert_int_equal(fp8.rc, GT_OK);
    printf("first loss: bf16 %.9g, fp8 Mamba %.9g\n", (double)bf16.loss[0], (double)fp8.loss[0]);
    assert_true(fp8.loss[0] != bf16.loss[0]);
    assert_true(fabs((double)fp8.loss[0] - bf16.loss[0]) < 0.01 * bf16.loss[0]);
    gtf_free(&bf16), gtf_free(&fp8);
}

/* every step's loss within 2% of fp32's, as test_graphs_fp8.c allows the dense recipes; and
 * not fp32's own bits (fp8 did run) */
#define LOSS_REL_TOL 0.02

static void test_fp8_hybrid_trains_like_fp32(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c, GT_DTYPE_BF16);
    gtf_run ref, fp8;
    gtf_train(&c, STEPS, &ref);
    assert_int_equal(ref.rc, GT_OK);
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS, GT_DTYPE_FP8_SC};
    for (int r = 0; r < 3; r++) {
        tiny_hybrid(&c, recipes[r]);
        gtf_train(&c, STEPS, &fp8);
        assert_int_equal(fp8.rc, GT_OK);
        assert_true(fp8.loss[0] != ref.loss[0]);
        for (int i = 0; i < STEPS; i++) {
            double rel = fabs((double)fp8.loss[i] - ref.loss[i]) / ref.loss[i];
            if (rel > LOSS_REL_TOL)
                fail_msg("recipe %d step %d: loss %.6f, fp32 %.6f", r, i + 1, (double)fp8.loss[i],
                         (double)ref.loss[i]);
        }
        gtf_free(&fp8);
    }
    gtf_free(&ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_mamba_replays_bitwise),
        cmocka_unit_test(test_delayed_scaling_mamba_replays_bitwise),
        cmocka_unit_test(test_blockwise_scaling_mamba_replays_bitwise),
        cmocka_unit_test(test_mamba_projections_are_fp8_linears),
        cmocka_unit_test(test_mamba_forward_in_fp8_changes_the_first_loss),
        cmocka_unit_test(test_fp8_hybrid_trains_like_fp32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
