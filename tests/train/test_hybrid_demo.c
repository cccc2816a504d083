/* The hybrid_demo recipe (2 Mamba-2 layers, attention, MLP; full-iteration graph on the CPU
 * backend), at a quarter of its micro-batch to keep the test short, trains: on a learnable
 * shard its training and evaluation losses fall well below the uniform guess. */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "config/keys.h"
#include "shard_fixture.h"
#include "train/train_loop.h"

#define PERIOD 7  /* the repeating pattern of the learnable shard */
#define VOCAB 512 /* the recipe's model.vocab_size */
#define STEPS 30

static void test_hybrid_demo_recipe_trains_with_the_loss_falling(void **state) {
    (void)state;
    char dir[256], prefix[300], data[400], recipes[1024];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/pattern", dir);
    gt_test_write_pattern_set(prefix, VOCAB, 8192, PERIOD, 1024);
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", recipes, sizeof recipes), 1);
    snprintf(data, sizeof data, "dataset.data_path=%s", prefix);
    char *argv[] = {"train",
                    "--recipe",
                    "hybrid_demo",
                    data,
                    "train.train_iters=30",
                    "train.eval_interval=30",
                    "train.eval_iters=2",
                    "train.micro_batch_size=2",
                    "train.global_batch_size=2",
                    "logger.log_interval=1000"};
    gt_config c;
    gt_error err = {0};
    if (gt_cli_load_config(10, argv, &c, NULL, NULL, NULL, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_int_equal(c.runtime.device, GT_DEVICE_CPU);
    assert_true(strchr(c.model.layer_pattern, 'M') != NULL);
    FILE *sink = tmpfile();
    gt_train_run_opts o = {.out = sink, .quiet = 1};
    gt_train_result res;
    int rc = gt_train_run(&c, &o, &res, &err);
    fclose(sink);
    if (rc != GT_OK) fail_msg("training hybrid_demo: %s", err.msg);
    assert_int_equal(res.last_step, STEPS);
    /* uniform guessing over 512 tokens gives ln 512 = 6.2; the pattern is learnable */
    assert_true(res.first_loss > 5.5f);
    assert_true(isfinite(res.last_loss));
    assert_true(res.last_loss < 0.5f * res.first_loss);
    assert_true(isfinite(res.last_eval_loss));
    assert_true(res.last_eval_loss < 0.5f * res.first_loss);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hybrid_demo_recipe_trains_with_the_loss_falling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
