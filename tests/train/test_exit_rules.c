/* Megatron's exit rules on the CPU backend: train.exit_interval stops at the first step whose
 * number is divisible by it (also after a resume) and train.exit_duration_in_mins once that
 * much wall time has passed, each saving a checkpoint when checkpoint.save is set. */
#include "testlib.h"

#include <stdio.h>
#include <string.h>

#include "config/keys.h"
#include "train/train_loop.h"

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    static const char *kv[] = {"runtime.device=cpu",         "model.num_layers=1",
                               "model.hidden_size=32",       "model.num_attention_heads=2",
                               "model.num_query_groups=2",   "model.ffn_hidden_size=64",
                               "model.vocab_size=64",        "model.seq_length=16",
                               "train.micro_batch_size=2",   "train.global_batch_size=2",
                               "model.cuda_graph_impl=none", "logger.log_interval=1000",
                               "train.train_iters=10",       NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    gt_config_finalize(c);
}

static int run(const gt_config *c, gt_train_run_opts *o, gt_train_result *res) {
    FILE *sink = tmpfile();
    assert_non_null(sink);
    o->out = sink;
    o->quiet = 1;
    gt_error err = {0};
    int rc = gt_train_run(c, o, res, &err);
    fclose(sink);
    if (rc) fail_msg("%s", err.msg);
    return rc;
}

static void test_exit_interval_stops_at_divisible_steps_and_saves(void **state) {
    (void)state;
    char dir[256], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c);
    snprintf(kv, sizeof kv, "checkpoint.save=%s/ckpt", dir);
    set(&c, kv);
    set(&c, "train.exit_interval=3");
    gt_train_run_opts o = {0};
    gt_train_result res;
    run(&c, &o, &res);
    assert_int_equal(res.last_step, 3);
    assert_int_equal(res.saved, 1);
    /* resumed at step 3 with exit_interval 4: Megatron stops at step 4 (divisible), not
     * after 4 more steps */
    snprintf(kv, sizeof kv, "checkpoint.load=%s/ckpt", dir);
    set(&c, kv);
    set(&c, "train.exit_interval=4");
    run(&c, &o, &res);
    assert_int_equal(res.first_step, 4);
    assert_int_equal(res.last_step, 4);
    assert_int_equal(res.saved, 1);
}

/* a clock that moves 30 s each time it is read */
static double fake_clock(void *ctx) {
    double *t = ctx;
    *t += 30e3;
    return *t;
}

static void test_exit_duration_stops_after_that_wall_time_and_saves(void **state) {
    (void)state;
    char dir[256], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    gt_config c;
    tiny_config(&c);
    snprintf(kv, sizeof kv, "checkpoint.save=%s/ckpt", dir);
    set(&c, kv);
    set(&c, "train.exit_duration_in_mins=1");
    double now = 0;
    gt_train_run_opts o = {.clock_ms = fake_clock, .clock_ctx = &now};
    gt_train_result res;
    run(&c, &o, &res);
    /* read at the start and after each step: 30 s, 60 s (not more than a minute), then 90 s
     * after step 3 */
    assert_int_equal(res.last_step, 3);
    assert_int_equal(res.saved, 1);
    /* unset (the default), the run goes to train_iters */
    gt_config d;
    tiny_config(&d);
    now = 0;
    run(&d, &o, &res);
    assert_int_equal(res.last_step, 10);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_interval_stops_at_divisible_steps_and_saves),
        cmocka_unit_test(test_exit_duration_stops_after_that_wall_time_and_saves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
