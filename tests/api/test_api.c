/* The public API alone: this test sees include/graphtrain.h and nothing of the tree (its
 * target gets no internal include folder), and with it configures, checks, trains a few CPU
 * steps, evaluates and saves, the way an embedding program would. */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graphtrain.h"

#define STEPS 4

static const char *const k_tiny[] = {
    "runtime.device=cpu",          "model.num_layers=2",       "model.hidden_size=16",
    "model.num_attention_heads=2", "model.num_query_groups=1", "model.ffn_hidden_size=32",
    "model.vocab_size=64",         "model.seq_length=8",       "train.micro_batch_size=2",
    "train.global_batch_size=4",   "train.train_iters=4",      "train.eval_interval=2",
    "train.eval_iters=1",          "dataset.source=mock",      "optimizer.lr=0.003",
};

static gt_config *tiny_config(void) {
    gt_error err = {0};
    gt_config *cfg = NULL;
    if (gt_config_create(&cfg, &err) != GT_OK) fail_msg("gt_config_create: %s", err.msg);
    for (size_t i = 0; i < sizeof k_tiny / sizeof k_tiny[0]; i++)
        if (gt_config_apply_override(cfg, k_tiny[i], &err) != GT_OK)
            fail_msg("%s: %s", k_tiny[i], err.msg);
    return cfg;
}

static void test_public_api_trains_evaluates_and_saves_on_the_cpu(void **state) {
    (void)state;
    gt_config *cfg = tiny_config();
    gt_error err = {0};
    assert_int_equal(gt_config_check(cfg, NULL, &err), GT_OK);
    gt_trainer *t = NULL;
    if (gt_trainer_create(&t, cfg, &err) != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    for (int i = 0; i < STEPS; i++) {
        gt_step_stats st;
        if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("step %d: %s", i + 1, err.msg);
        assert_int_equal(st.step, i + 1);
        assert_true(isfinite(st.loss) && st.loss > 0);
        assert_int_equal(st.mode, GT_STEP_EAGER);
    }
    assert_int_equal(gt_trainer_step_count(t), STEPS);
    float loss = 0;
    assert_int_equal(gt_trainer_eval(t, &loss, &err), GT_OK);
    assert_true(isfinite(loss) && loss > 0);
    char dir[512];
    gt_test_tmpdir(dir, sizeof dir);
    strncat(dir, "/ckpt", sizeof dir - strlen(dir) - 1);
    if (gt_trainer_save(t, dir, &err) != GT_OK) fail_msg("gt_trainer_save: %s", err.msg);
    gt_trainer_destroy(t);
    gt_config_destroy(cfg);
}

static void test_public_api_reports_bad_settings_with_the_fix(void **state) {
    (void)state;
    gt_config *cfg = tiny_config();
    gt_error err = {0};
    assert_int_equal(gt_config_apply_override(cfg, "model.no_such_key=1", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.no_such_key"));
    /* a full-iteration graph needs the local implementation: a rule the check reports */
    assert_int_equal(
        gt_config_apply_override(cfg, "model.cuda_graph_impl=transformer_engine", &err), GT_OK);
    assert_int_equal(gt_config_apply_override(cfg, "model.cuda_graph_scope=full_iteration", &err),
                     GT_OK);
    char report[8192] = {0};
    FILE *f = fmemopen(report, sizeof report - 1, "w");
    assert_non_null(f);
    assert_int_equal(gt_config_check(cfg, f, &err), GT_ERR_INVALID);
    fclose(f);
    assert_non_null(strstr(err.msg, "model.cuda_graph_impl"));
    assert_non_null(strstr(err.msg, "fix:"));
    assert_non_null(strstr(report, "model.cuda_graph_scope"));
    gt_config_destroy(cfg);
    gt_config_destroy(NULL);
    gt_trainer_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_public_api_trains_evaluates_and_saves_on_the_cpu),
        cmocka_unit_test(test_public_api_reports_bad_settings_with_the_fix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
