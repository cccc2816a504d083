/* model.kv_channels (Hugging Face's head_dim) other than hidden_size / num_attention_heads, as
 * Qwen3-0.6B has (hidden 1024, 16 heads of 128), on the CPU reference: qkv, the output
 * projection and the q/k norms take the head size, the model's gradients match finite
 * differences (with and without qk_layernorm, on MoE with the pre-softmax router too), and
 * the head size changes the loss. */
#include "model_fixture.h"

/* hidden 16 over 4 heads would give 4; the heads are 6 wide instead */
static void kv_config(gt_config *c) {
    tm_tiny_config(c);
    c->model.kv_channels = 6;
}

static void test_kv_channels_sets_the_attention_tensor_shapes(void **state) {
    (void)state;
    gt_config c;
    kv_config(&c);
    c.model.qk_layernorm = true;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    int H = c.model.num_attention_heads, KV = c.model.num_query_groups, hd = 6, found = 0;
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &nd, shape);
        if (strstr(name, "attn.qkv_w")) {
            assert_int_equal(shape[0], (H + 2 * KV) * hd);
            assert_int_equal(shape[1], c.model.hidden_size);
            found++;
        } else if (strstr(name, "attn.o_w")) {
            assert_int_equal(shape[0], c.model.hidden_size);
            assert_int_equal(shape[1], H * hd);
            found++;
        } else if (strstr(name, "layernorm_w") && strstr(name, "attn.")) {
            assert_int_equal(shape[0], hd);
            found++;
        }
    }
    assert_int_equal(found, 4 * c.model.num_layers);
    tm_fixture_destroy(&fx);
}

static void test_kv_channels_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    kv_config(&c);
    for (int qk = 0; qk < 2; qk++) {
        c.model.qk_layernorm = qk;
        tm_fixture fx;
        tm_fixture_create(&fx, &c);
        tm_check_gradients(&fx, 0);
        tm_fixture_destroy(&fx);
    }
}

/* Qwen3-MoE's shape of options: kv_channels, qk_layernorm and the pre-softmax router */
static void test_moe_pre_softmax_with_kv_channels_matches_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    c.model.kv_channels = 6;
    c.model.qk_layernorm = true;
    c.model.moe_router_pre_softmax = true;
    c.rng.seed = 42; /* few routing ties near the finite-difference steps */
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
    c.model.moe_router_topk_scaling_factor = 1.5;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

static void test_kv_channels_and_router_order_change_the_loss(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    double loss[3];
    for (int i = 0; i < 3; i++) {
        c.model.kv_channels = i == 1 ? 6 : 0;
        c.model.moe_router_pre_softmax = i == 2;
        tm_fixture fx;
        tm_fixture_create(&fx, &c);
        loss[i] = tm_train_loss(&fx, 0, NULL);
        tm_fixture_destroy(&fx);
    }
    assert_true(loss[0] > 1.0 && loss[1] > 1.0 && loss[2] > 1.0);
    assert_true(loss[0] != loss[1]);
    assert_true(loss[0] != loss[2]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_channels_sets_the_attention_tensor_shapes),
        cmocka_unit_test(test_kv_channels_gradients_match_finite_differences),
        cmocka_unit_test(test_moe_pre_softmax_with_kv_channels_matches_finite_differences),
        cmocka_unit_test(test_kv_channels_and_router_order_change_the_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
