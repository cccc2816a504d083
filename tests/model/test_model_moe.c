/* The MoE transformer on the CPU reference: every parameter's gradient (router, experts,
 * aux loss included) against finite differences, dropless and drop-and-pad. */
#include "model_fixture.h"

#include "model/model_internal.h"

static void test_moe_dropless_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

/* Capacity factor 1.0: 16 tokens x top-2 over 4 experts gives each expert 8 rows; the check
 * is only meaningful if some expert really overflows, so that is asserted too. */
static void test_moe_drop_and_pad_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 1.0);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_train_loss(&fx, 0, NULL);
    int overflow = 0, dropped = 0;
    for (int l = 0; l < fx.info->num_layers; l++) {
        const gt_moe_block *e = &fx.m->layers[l].moe;
        assert_int_equal(fx.m->dm.capacity, 8);
        for (int x = 0; x < 4; x++)
            overflow |= e->counts[x] > 8;
        for (int i = 0; i < fx.info->tokens * 2; i++)
            dropped += e->token_slot[i] < 0;
    }
    assert_true(overflow);
    assert_true(dropped > 0);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

/* Every layer MoE and every other layer MoE (model.moe_layer_freq = 2) with dropout. */
static void test_moe_every_other_layer_with_dropout_matches_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    c.model.moe_layer_freq = 2;
    c.model.hidden_dropout = 0.2;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    assert_int_equal(gt_model_num_units(fx.m, 0), 4);
    assert_int_equal(gt_model_num_units(fx.m, 1), 2);
    tm_check_gradients(&fx, 2);
    tm_fixture_destroy(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_dropless_gradients_match_finite_differences),
        cmocka_unit_test(test_moe_drop_and_pad_gradients_match_finite_differences),
        cmocka_unit_test(test_moe_every_other_layer_with_dropout_matches_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
