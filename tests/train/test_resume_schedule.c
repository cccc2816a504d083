/* lr_warmup_fraction resolved into warmup steps, and resuming with another learning-rate
 * schedule: a changed train_iters or schedule key is
 * refused, naming each change with the checkpoint's and the new value, unless
 * scheduler.override_opt_param_scheduler (train on with the new schedule) or
 * scheduler.use_checkpoint_opt_param_scheduler (keep the checkpoint's) says which to take. */
#include "testlib.h"

#include <stdio.h>
#include <string.h>

#include "config/keys.h"
#include "train/trainer.h"
#include "trainer_testing.h"

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    static const char *kv[] = {"runtime.device=cpu",       "model.num_layers=1",
                               "model.hidden_size=32",     "model.num_attention_heads=2",
                               "model.num_query_groups=2", "model.ffn_hidden_size=64",
                               "model.vocab_size=64",      "model.seq_length=16",
                               "train.micro_batch_size=2", "train.global_batch_size=2",
                               "train.train_iters=10",     "scheduler.lr_warmup_iters=1",
                               "optimizer.lr=0.003",       NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    gt_config_finalize(c);
}

static gt_trainer *create(const gt_config *c) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("create: %s", err.msg);
    return t;
}

/* the lr of each of n steps */
static void steps(gt_trainer *t, int n, float *lr) {
    gt_error err = {0};
    for (int i = 0; i < n; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err) != GT_OK) fail_msg("step: %s", err.msg);
        if (lr) lr[i] = s.lr;
    }
}

/* Trains 3 steps of c and saves them into dir/ckpt; c then loads that checkpoint. */
static void checkpoint_of(gt_config *c, const char *dir) {
    char ckpt[300], kv[400];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    gt_trainer *t = create(c);
    steps(t, 3, NULL);
    gt_error err = {0};
    assert_int_equal(gt_trainer_save(t, ckpt, &err), GT_OK);
    gt_trainer_destroy(t);
    snprintf(kv, sizeof kv, "checkpoint.load=%s", ckpt);
    set(c, kv);
}

/* The lr of step 4 (index 3) of an uninterrupted run of c. */
static float lr_of_step_4(const gt_config *c) {
    gt_config fresh = *c;
    fresh.checkpoint.load[0] = '\0';
    fresh.scheduler.override_opt_param_scheduler = false;
    fresh.scheduler.use_checkpoint_opt_param_scheduler = false;
    gt_trainer *t = create(&fresh);
    float lr[4];
    steps(t, 4, lr);
    gt_trainer_destroy(t);
    return lr[3];
}

static void expect_refused_naming(const gt_config *c, const char *const *parts) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, c, &err), GT_ERR_INVALID);
    assert_null(t);
    for (int i = 0; parts[i]; i++)
        if (!strstr(err.msg, parts[i])) fail_msg("expected '%s' in: %s", parts[i], err.msg);
}

static void test_resume_with_changed_train_iters_is_refused_naming_it(void **state) {
    (void)state;
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c);
    checkpoint_of(&c, dir);
    set(&c, "train.train_iters=20"); /* cosine over 20 steps, not 10: every rate changes */
    static const char *const parts[] = {"train.train_iters: 10 in the checkpoint, 20 now",
                                        "use_checkpoint_opt_param_scheduler=true",
                                        "override_opt_param_scheduler=true", NULL};
    expect_refused_naming(&c, parts);
}

static void test_resume_with_changed_schedule_keys_names_each(void **state) {
    (void)state;
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c);
    checkpoint_of(&c, dir);
    set(&c, "optimizer.lr=0.002");
    set(&c, "scheduler.lr_decay_style=WSD");
    set(&c, "scheduler.lr_wsd_decay_iters=4");
    static const char *const parts[] = {"optimizer.lr: 0.003 in the checkpoint, 0.002 now",
                                        "scheduler.lr_decay_style: cosine in the checkpoint, "
                                        "WSD now",
                                        "scheduler.lr_wsd_decay_iters: 0 in the checkpoint, 4 now",
                                        NULL};
    expect_refused_naming(&c, parts);
}

static void test_resume_with_the_same_rates_is_accepted(void **state) {
    (void)state;
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c);
    set(&c, "scheduler.lr_decay_iters=10");
    checkpoint_of(&c, dir);
    set(&c, "train.train_iters=20"); /* the decay is fixed at 10 steps: no rate changes */
    gt_trainer *t = create(&c);
    assert_true(gt_trainer_resumed(t));
    gt_trainer_destroy(t);
}

static void test_override_opt_param_scheduler_trains_on_with_the_new_schedule(void **state) {
    (void)state;
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c);
    float old_lr = lr_of_step_4(&c);
    checkpoint_of(&c, dir);
    set(&c, "train.train_iters=20");
    set(&c, "scheduler.override_opt_param_scheduler=true");
    float new_lr = lr_of_step_4(&c);
    assert_true(new_lr != old_lr);
    gt_trainer *t = create(&c);
    float lr;
    steps(t, 1, &lr);
    gt_trainer_destroy(t);
    assert_true(lr == new_lr);
}

static void test_use_checkpoint_opt_param_scheduler_keeps_the_old_schedule(void **state) {
    (void)state;
    char dir[256], dir2[256], ckpt2[300], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_test_tmpdir(dir2, sizeof dir2);
    gt_config c;
    tiny_config(&c);
    float old_lr = lr_of_step_4(&c);
    checkpoint_of(&c, dir);
    gt_config resumed = c;
    set(&resumed, "train.train_iters=20");
    set(&resumed, "scheduler.use_checkpoint_opt_param_scheduler=true");
    assert_true(lr_of_step_4(&resumed) != old_lr);
    gt_trainer *t = create(&resumed);
    float lr;
    steps(t, 1, &lr);
    assert_true(lr == old_lr);
    /* and its checkpoints record the schedule it trains with: the first run's */
    snprintf(ckpt2, sizeof ckpt2, "%s/ckpt", dir2);
    gt_error err = {0};
    assert_int_equal(gt_trainer_save(t, ckpt2, &err), GT_OK);
    gt_trainer_destroy(t);
    gt_config again = c; /* train_iters 10, no flag */
    snprintf(kv, sizeof kv, "checkpoint.load=%s", ckpt2);
    set(&again, kv);
    t = create(&again);
    assert_int_equal(gt_trainer_step_count(t), 4);
    gt_trainer_destroy(t);
}

/* a quarter of 10 decay steps is 2.5: the warmup of 2 whole steps lr_warmup_iters=2 gives */
static void test_lr_warmup_fraction_warms_up_over_that_share_of_the_decay(void **state) {
    (void)state;
    gt_config frac, iters;
    tiny_config(&frac);
    set(&frac, "scheduler.lr_warmup_iters=0");
    set(&frac, "scheduler.lr_warmup_fraction=0.25");
    tiny_config(&iters);
    set(&iters, "scheduler.lr_warmup_iters=2");
    float a[4], b[4];
    gt_trainer *t = create(&frac);
    steps(t, 4, a);
    gt_trainer_destroy(t);
    t = create(&iters);
    steps(t, 4, b);
    gt_trainer_destroy(t);
    assert_memory_equal(a, b, sizeof a);
    assert_true(a[0] == 0.003f / 2 && a[1] == 0.003f); /* warmup over steps 1 and 2 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_warmup_fraction_warms_up_over_that_share_of_the_decay),
        cmocka_unit_test(test_resume_with_changed_train_iters_is_refused_naming_it),
        cmocka_unit_test(test_resume_with_changed_schedule_keys_names_each),
        cmocka_unit_test(test_resume_with_the_same_rates_is_accepted),
        cmocka_unit_test(test_override_opt_param_scheduler_trains_on_with_the_new_schedule),
        cmocka_unit_test(test_use_checkpoint_opt_param_scheduler_keeps_the_old_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
