/* model.qk_layernorm on the CPU reference: every layer gets q_layernorm and k_layernorm
 * weights of the head size (initialized to ones), the model's gradients, those two included,
 * match finite differences, the norm changes the loss, the memory plan counts its activations
 * (raw q/k, 1/rms, weight-gradient partials), and recompute (core_attn; full, which recomputes
 * the norm with qkv) gives the bits of the run without it. */
#include "model_fixture.h"

static void qk_config(gt_config *c) {
    tm_tiny_config(c);
    c->model.qk_layernorm = true;
    c->model.num_layers = 3;
}

static void test_qk_norm_adds_head_sized_weights_initialized_to_ones(void **state) {
    (void)state;
    gt_config c;
    qk_config(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    int hd = c.model.hidden_size / c.model.num_attention_heads, found = 0;
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &nd, shape);
        if (!strstr(name, "q_layernorm") && !strstr(name, "k_layernorm")) continue;
        found++;
        assert_int_equal(nd, 1);
        assert_int_equal(shape[0], hd);
        for (int i = 0; i < hd; i++)
            assert_true(((const float *)fx.info->params)[off + i] == 1.0f);
    }
    assert_int_equal(found, 2 * c.model.num_layers);
    tm_fixture_destroy(&fx);
}

static void test_qk_norm_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    qk_config(&c);
    c.model.num_layers = 2; /* the fixture's depth, for which its tolerances are made */
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

static void test_qk_norm_changes_the_loss(void **state) {
    (void)state;
    gt_config c;
    qk_config(&c);
    double loss[2];
    for (int on = 0; on < 2; on++) {
        c.model.qk_layernorm = on;
        tm_fixture fx;
        tm_fixture_create(&fx, &c);
        loss[on] = tm_train_loss(&fx, 0, NULL);
        tm_fixture_destroy(&fx);
    }
    assert_true(loss[0] > 1.0 && loss[1] > 1.0);
    assert_true(loss[0] != loss[1]);
}

static void test_memory_plan_counts_the_qk_norm_activations(void **state) {
    (void)state;
    gt_config c;
    qk_config(&c);
    gt_model_info off, on;
    gt_error err = {0};
    c.model.qk_layernorm = false;
    assert_int_equal(gt_model_plan(&c, 4, &off, &err), GT_OK);
    c.model.qk_layernorm = true;
    assert_int_equal(gt_model_plan(&c, 4, &on, &err), GT_OK);
    size_t N = (size_t)c.train.micro_batch_size * c.model.seq_length;
    size_t H = (size_t)c.model.num_attention_heads, KV = (size_t)c.model.num_query_groups;
    size_t hd = (size_t)c.model.hidden_size / H, P = (size_t)gt_rmsnorm_parts_bound((int)N);
    size_t per_layer = N * (H + KV) * hd * 4 + N * (H + KV) * 4 + 2 * P * hd * 4;
    /* each arena entry is padded to the arena's alignment: at least the raw bytes, at most
     * one alignment unit more per entry */
    size_t grew = on.act_bytes - off.act_bytes, layers = (size_t)c.model.num_layers;
    assert_true(grew >= per_layer * layers);
    assert_true(grew <= (per_layer + 3 * 256) * layers);
}

typedef struct qk_run {
    float loss;
    float *grads;
    size_t n, act_bytes;
} qk_run;

static void run(const gt_config *c, qk_run *r) {
    tm_fixture fx;
    tm_fixture_create(&fx, c);
    for (int64_t step = 0; step < 2; step++) {
        tm_begin_step(&fx, step);
        for (int micro = 0; micro < 2; micro++) {
            fx.st->micro = micro;
            gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 0.5f, micro, fx.st, NULL);
        }
        tm_check(&fx);
    }
    r->loss = fx.st->loss;
    r->n = fx.info->n_params;
    r->act_bytes = fx.info->act_bytes;
    r->grads = malloc(r->n * sizeof(float));
    assert_non_null(r->grads);
    memcpy(r->grads, fx.info->grads, r->n * sizeof(float));
    tm_fixture_destroy(&fx);
}

static void assert_recompute_bitwise(gt_recompute_granularity g, uint32_t modules,
                                     const char *pattern) {
    gt_config base, c;
    qk_config(&base);
    if (pattern) {
        snprintf(base.model.layer_pattern, sizeof base.model.layer_pattern, "%s", pattern);
        base.model.num_layers = (int)strlen(pattern);
    }
    base.model.attention_dropout = 0.2;
    base.model.hidden_dropout = 0.2;
    c = base;
    c.model.recompute_granularity = g;
    c.model.recompute_modules = modules;
    if (g == GT_RECOMPUTE_FULL) {
        c.model.recompute_method = GT_RECOMPUTE_METHOD_UNIFORM;
        c.model.recompute_num_layers = 1;
    }
    qk_run a, b;
    run(&base, &a);
    run(&c, &b);
    assert_true(a.loss > 1.0f);
    assert_memory_equal(&a.loss, &b.loss, sizeof a.loss);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.grads, b.grads, a.n * sizeof(float));
    assert_true(b.act_bytes < a.act_bytes);
    free(a.grads);
    free(b.grads);
}

static void test_qk_norm_with_selective_core_attn_recompute_gives_the_same_bits(void **state) {
    (void)state;
    assert_recompute_bitwise(GT_RECOMPUTE_SELECTIVE, GT_RECOMPUTE_CORE_ATTN, NULL);
}

static void test_qk_norm_with_full_recompute_gives_the_same_bits(void **state) {
    (void)state;
    assert_recompute_bitwise(GT_RECOMPUTE_FULL, 0, NULL);
}

/* Attention-only layers (a hybrid pattern): their backward recomputes qkv, the q/k norm with
 * it, alone rather than rerunning the whole layer's forward. */
static void test_qk_norm_recomputed_with_qkv_gives_the_same_bits(void **state) {
    (void)state;
    assert_recompute_bitwise(GT_RECOMPUTE_FULL, 0, "*-*-");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qk_norm_adds_head_sized_weights_initialized_to_ones),
        cmocka_unit_test(test_qk_norm_gradients_match_finite_differences),
        cmocka_unit_test(test_qk_norm_changes_the_loss),
        cmocka_unit_test(test_memory_plan_counts_the_qk_norm_activations),
        cmocka_unit_test(test_qk_norm_with_selective_core_attn_recompute_gives_the_same_bits),
        cmocka_unit_test(test_qk_norm_with_full_recompute_gives_the_same_bits),
        cmocka_unit_test(test_qk_norm_recomputed_with_qkv_gives_the_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
