/* Mamba layers of hybrid models on the CPU reference (model/model_mamba.c): every gradient of
 * a small hybrid against finite differences (with and without dropout), micro-batches that
 * overwrite then accumulate the gradients, the parameter table
 * in Megatron's shapes, MambaMixer's initial values, the shape checks naming their keys and
 * the refusal of a backend without Mamba ops. */
#include "model_fixture.h"

/* The tiny model with layers Mamba, attention, MLP, Mamba: d=16, expand 2 -> inner 32, head
 * dim 4 -> 8 heads in 2 groups, state 4, conv width 4. */
static void tiny_hybrid(gt_config *c) {
    tm_tiny_config(c);
    c->model.num_layers = 4;
    snprintf(c->model.layer_pattern, sizeof c->model.layer_pattern, "M*-M");
    c->model.mamba_state_dim = 4;
    c->model.mamba_head_dim = 4;
    c->model.mamba_num_groups = 2;
    c->model.mamba_num_heads = 0;
    c->model.mamba_expand = 2;
    c->model.mamba_d_conv = 4;
    c->model.mamba_chunk_size = 4;
}

/* MambaMixer's dt_bias starts with dt in [0.001, 0.1], where the loss hardly depends on A_log
 * (its gradient carries a factor dt): the checks raise dt to about 1 so that every tensor's
 * finite differences stand above fp32 rounding. */
static void raise_dt(tm_fixture *fx) {
    for (int t = 0; t < gt_model_num_tensors(fx->m); t++) {
        const char *name;
        size_t off;
        int ndim, shape[3];
        gt_model_tensor(fx->m, t, &name, &off, &ndim, shape);
        if (strstr(name, "mamba.dt_bias"))
            for (int i = 0; i < shape[0]; i++)
                ((float *)fx->info->params)[off + (size_t)i] = 0.5f + 0.1f * (float)(i % 3);
    }
}

static void test_hybrid_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    raise_dt(&fx);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

static void test_hybrid_gradients_with_dropout_use_the_forward_masks(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    c.model.hidden_dropout = 0.2;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    raise_dt(&fx);
    tm_check_gradients(&fx, 3);
    tm_fixture_destroy(&fx);
}

/* Two half-weighted micro-batches, the first overwriting NaN-filled gradients (accumulate 0),
 * the second adding (accumulate 1), give the one-micro-batch gradient of every tensor. */
static void test_hybrid_micro_batches_overwrite_then_accumulate(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    size_t n = fx.info->n_params;
    float *one = malloc(n * sizeof(float));
    assert_non_null(one);
    double l1 = tm_train_loss(&fx, 0, NULL);
    memcpy(one, fx.info->grads, n * sizeof(float));
    tm_begin_step(&fx, 0);
    for (size_t i = 0; i < n; i++)
        fx.info->grads[i] = NAN;
    for (int micro = 0; micro < 2; micro++) {
        gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 0.5f, micro, fx.st, NULL);
        fx.b->ops->micro_next(fx.b, fx.s, fx.st);
    }
    tm_check(&fx);
    assert_true(fabs(l1 - fx.st->loss) < 1e-6 * fabs(l1));
    for (int t = 0; t < fx.m->n_tensors; t++) {
        const gt_model_tensor_desc *d = &fx.m->tensors[t];
        double worst = 0, gmax = 0;
        for (size_t i = d->offset; i < d->offset + d->numel; i++) {
            worst = fmax(worst, fabs((double)one[i] - fx.info->grads[i]));
            gmax = fmax(gmax, fabs(one[i]));
        }
        if (!(worst <= 1e-5 * gmax + 1e-12))
            fail_msg("%s: two micro-batches differ from one by %g (max %g)", d->name, worst, gmax);
    }
    free(one);
    tm_fixture_destroy(&fx);
}

static int find_tensor(const gt_model *m, const char *want, int *ndim, int shape[3]) {
    for (int t = 0; t < gt_model_num_tensors(m); t++) {
        const char *name;
        gt_model_tensor(m, t, &name, NULL, ndim, shape);
        if (!strcmp(name, want)) return t;
    }
    fail_msg("no tensor %s", want);
    return -1;
}

static void test_mamba_layer_has_the_mixer_tensors_in_megatron_shapes(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    assert_int_equal(gt_model_num_units(fx.m, 0), 1);
    assert_int_equal(gt_model_unit_kind(fx.m, 0, 0), GT_UNIT_MAMBA);
    assert_string_equal(gt_unit_kind_name(GT_UNIT_MAMBA), "mamba");
    assert_int_equal(gt_model_unit_kind(fx.m, 1, 0), GT_UNIT_ATTN);
    /* in_proj: z, x (32 each), B, C (2 groups x 4 each), dt (8 heads) */
    const struct {
        const char *name;
        int ndim, s0, s1;
    } want[] = {
        {"layers.0.mamba.in_proj_w", 2, 2 * 32 + 2 * 8 + 8, 16},
        {"layers.0.mamba.conv1d_w", 2, 32 + 2 * 8, 4},
        {"layers.0.mamba.conv1d_b", 1, 32 + 2 * 8, 0},
        {"layers.3.mamba.dt_bias", 1, 8, 0},
        {"layers.3.mamba.A_log", 1, 8, 0},
        {"layers.3.mamba.D", 1, 8, 0},
        {"layers.3.mamba.gate_norm_w", 1, 32, 0},
        {"layers.3.mamba.out_proj_w", 2, 16, 32},
        {"layers.3.mamba.norm_w", 1, 16, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int ndim, shape[3];
        find_tensor(fx.m, want[i].name, &ndim, shape);
        assert_int_equal(ndim, want[i].ndim);
        assert_int_equal(shape[0], want[i].s0);
        if (ndim > 1) assert_int_equal(shape[1], want[i].s1);
    }
    tm_fixture_destroy(&fx);
}

static void test_mamba_init_follows_mamba_mixer(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    const float *p = fx.info->params;
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int ndim, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &ndim, shape);
        size_t n = (size_t)shape[0] * (ndim > 1 ? (size_t)shape[1] : 1);
        for (size_t i = 0; i < n; i++) {
            float v = p[off + i];
            if (strstr(name, "mamba.A_log")) { /* A = -exp(A_log), |A| uniform in [1, 16] */
                assert_true(v >= 0.0f && v <= logf(16.0f) + 1e-6f);
            } else if (strstr(name, "mamba.dt_bias")) { /* softplus(dt_bias) in [1e-3, 0.1] */
                float dt = log1pf(expf(v));
                assert_true(dt >= 0.999e-3f && dt <= 0.1001f);
            } else if (strstr(name, "mamba.D") || strstr(name, "mamba.gate_norm_w")) {
                assert_true(v == 1.0f);
            } else if (strstr(name, "mamba.conv1d")) { /* PyTorch's Conv1d: 1/sqrt(width) */
                assert_true(fabsf(v) <= 0.5f);
            }
        }
    }
    /* the draws differ between elements: A_log is not one constant */
    int ndim, shape[3];
    size_t off;
    int t = find_tensor(fx.m, "layers.0.mamba.A_log", &ndim, shape);
    gt_model_tensor(fx.m, t, NULL, &off, NULL, NULL);
    assert_true(p[off] != p[off + 1]);
    tm_fixture_destroy(&fx);
}

static void expect_plan_error(const gt_config *c, const char *key) {
    gt_error err = {0};
    gt_model_info info;
    assert_int_equal(gt_model_plan(c, 4, &info, &err), GT_ERR_INVALID);
    if (!strstr(err.msg, key)) fail_msg("error does not name %s: %s", key, err.msg);
}

static void test_mamba_shape_errors_name_their_keys(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    c.model.mamba_num_groups = 3; /* 8 heads */
    expect_plan_error(&c, "model.mamba_num_groups");
    tiny_hybrid(&c);
    c.model.mamba_head_dim = 5; /* 2 x 16 = 32 */
    expect_plan_error(&c, "model.mamba_head_dim");
    tiny_hybrid(&c);
    c.model.mamba_state_dim = 0;
    expect_plan_error(&c, "model.mamba_state_dim");
    /* explicit heads override the derived count */
    tiny_hybrid(&c);
    c.model.mamba_num_heads = 4;
    gt_error err = {0};
    gt_model_info info;
    assert_int_equal(gt_model_plan(&c, 4, &info, &err), GT_OK);
}

static void test_a_backend_without_mamba_ops_is_refused_naming_the_fix(void **state) {
    (void)state;
    gt_config c;
    tiny_hybrid(&c);
    gt_error err = {0};
    gt_backend *b = NULL;
    assert_int_equal(gt_backend_create_cpu(&b, &err), GT_OK);
    const gt_backend_ops *full = b->ops;
    gt_backend_ops without = *full;
    without.mamba_ssd_fwd = NULL;
    b->ops = &without;
    gt_model *m = (gt_model *)(uintptr_t)1; /* must come back NULL */
    assert_int_equal(gt_model_create(&m, &c, b, &err), GT_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err.msg, "runtime.device=cpu"));
    b->ops = full;
    gt_backend_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hybrid_gradients_match_finite_differences),
        cmocka_unit_test(test_hybrid_gradients_with_dropout_use_the_forward_masks),
        cmocka_unit_test(test_hybrid_micro_batches_overwrite_then_accumulate),
        cmocka_unit_test(test_mamba_layer_has_the_mixer_tensors_in_megatron_shapes),
        cmocka_unit_test(test_mamba_init_follows_mamba_mixer),
        cmocka_unit_test(test_mamba_shape_errors_name_their_keys),
        cmocka_unit_test(test_a_backend_without_mamba_ops_is_refused_naming_the_fix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
