/* fp8 linear layers with biases (model.add_bias_linear, model.add_qkv_bias) on the CPU
 * emulation: the bias is added to the fp8 GEMM's fp32 sum (its epilogue) and its gradient
 * comes from the unquantized output gradient, so every recipe replays bitwise like eager,
 * and the biases learn as fp32's do (after one AdamW step each bias element moves by the
 * sign of its gradient: the same signs as fp32's, nearly everywhere). */
#include "graphs_fixture.h"
#include "model/model_internal.h"

#define STEPS 6
#define WARMUP 2

static void with_recipe(gt_config *c, gt_compute_dtype d) {
    gtf_tiny_dense(c);
    c->model.add_bias_linear = true;
    c->model.add_qkv_bias = true;
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 3;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void check_modes_bitwise(gt_compute_dtype d) {
    gt_config c;
    with_recipe(&c, d);
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, GT_SCOPE_ATTN | GT_SCOPE_MLP, NULL);
}

static void test_current_scaling_with_biases_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_CS);
}

static void test_delayed_scaling_with_biases_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_DS);
}

static void test_blockwise_scaling_with_biases_replays_bitwise(void **state) {
    (void)state;
    check_modes_bitwise(GT_DTYPE_FP8_SC);
}

/* The master weights after one step, and the model's bias tensors (qkv, o, gate/up, down of
 * every layer) as indices into them. */
typedef struct bias_run {
    size_t n;
    float *master;
    int n_bias;
    int idx[64][2]; /* [offset, count] */
} bias_run;

static void one_step(const gt_config *c, bias_run *r) {
    memset(r, 0, sizeof *r);
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_step_stats st;
    if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_model *m = gt_trainer_model(t);
    r->n = gt_model_get_info(m)->n_params;
    r->master = calloc(r->n, sizeof(float));
    assert_int_equal(gt_trainer_read_master(t, r->master, &err), GT_OK);
    r->n_bias = 0;
    for (int l = 0; l < m->num_layers; l++) {
        const gt_layer *L = &m->layers[l];
        int b[4] = {L->attn.qkv_b, L->attn.o_b, L->mlp.gu_b, L->mlp.down_b};
        for (int i = 0; i < 4; i++) {
            assert_true(b[i] >= 0);
            const gt_model_tensor_desc *d = &m->tensors[b[i]];
            r->idx[r->n_bias][0] = (int)d->offset;
            r->idx[r->n_bias][1] = (int)d->shape[0];
            r->n_bias++;
        }
    }
    gt_trainer_destroy(t);
}

static void test_biases_learn_as_fp32s_do_under_every_recipe(void **state) {
    (void)state;
    gt_config c;
    with_recipe(&c, GT_DTYPE_BF16); /* the CPU backend computes bf16 as fp32 */
    bias_run ref, fp8;
    one_step(&c, &ref);
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS, GT_DTYPE_FP8_SC};
    for (int r = 0; r < 3; r++) {
        with_recipe(&c, recipes[r]);
        one_step(&c, &fp8);
        long moved = 0, agree = 0, total = 0;
        for (int k = 0; k < fp8.n_bias; k++)
            for (int j = 0; j < fp8.idx[k][1]; j++) {
                float a = fp8.master[fp8.idx[k][0] + j], w = ref.master[ref.idx[k][0] + j];
                total++;
                moved += a != 0.0f;
                agree += (a > 0) == (w > 0) && a != 0.0f;
            }
        printf("recipe %d: %ld of %ld bias elements moved, %ld with fp32's sign\n", r, moved, total,
               agree);
        assert_true(moved == total);          /* every bias got a gradient (they start at 0) */
        assert_true(agree >= total * 9 / 10); /* and fp32's direction */
        free(fp8.master);
    }
    free(ref.master);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_with_biases_replays_bitwise),
        cmocka_unit_test(test_delayed_scaling_with_biases_replays_bitwise),
        cmocka_unit_test(test_blockwise_scaling_with_biases_replays_bitwise),
        cmocka_unit_test(test_biases_learn_as_fp32s_do_under_every_recipe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
