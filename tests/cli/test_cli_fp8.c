/* fp8 from the command line: Bridge's -c fp8_cs / fp8_ds / fp8_sc validate and train on the CPU
 * backend's emulation; the Blackwell formats and fp8 on the GPU (kernels not built yet) are
 * refused by name in validate, train and bench alike. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_MAX (256 * 1024)

static int setup(void **state) {
    *state = malloc(OUT_MAX);
    if (!*state) return -1;
    char dir[1024];
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", dir, sizeof dir), 1);
    return 0;
}

static int teardown(void **state) {
    free(*state);
    return 0;
}

#define TINY_CPU "--recipe tiny runtime.device=cpu runtime.gemm_table= "

static void test_validate_accepts_the_hopper_recipes_on_the_cpu(void **state) {
    char *out = *state;
    const char *dtypes[] = {"fp8_cs", "fp8_ds", "fp8_sc"};
    for (int i = 0; i < 3; i++) {
        char args[256];
        snprintf(args, sizeof args, "validate --quiet " TINY_CPU "-c %s", dtypes[i]);
        int rc = gt_test_run(args, out, OUT_MAX);
        if (rc != 0) fail_msg("`%s` exited %d:\n%s", args, rc, out);
    }
}

static void test_train_runs_fp8_steps_on_the_cpu(void **state) {
    char *out = *state;
    /* a small tiny: the full-iteration graph captured at step 2 and replayed at step 3 */
    int rc = gt_test_run("train " TINY_CPU "-c fp8_sc model.num_layers=2 model.hidden_size=128 "
                         "model.ffn_hidden_size=256 model.vocab_size=512 model.seq_length=64 "
                         "train.micro_batch_size=2 train.global_batch_size=2 "
                         "model.cuda_graph_warmup_steps=1 train.train_iters=3 "
                         "logger.log_interval=1 dataset.source=mock",
                         out, OUT_MAX);
    if (rc != 0) fail_msg("train -c fp8_sc exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "step      3/3"));
    assert_non_null(strstr(out, "replayed"));
}

static void
test_blackwell_formats_and_gpu_blockwise_fp8_off_its_tiles_are_refused_by_name(void **state) {
    char *out = *state;
    const char *cases[][2] = {
        {"-c fp8_mx", "engine_fp8_blackwell_format"},
        {"-c nvfp4", "engine_fp8_blackwell_format"},
        {"-c fp8_sc runtime.device=cuda model.ffn_hidden_size=1000",
         "engine_no_fp8_blockwise_shape"},
        {"-c fp8_sc runtime.device=auto model.hidden_size=576", "engine_no_fp8_blockwise_shape"}};
    const char *cmds[] = {"validate --quiet", "train", "bench --same-process --steps 1"};
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++) {
            char args[256];
            snprintf(args, sizeof args, "%s " TINY_CPU "%s", cmds[c], cases[i][0]);
            int rc = gt_test_run(args, out, OUT_MAX);
            if (rc != 2 || !strstr(out, cases[i][1]) || !strstr(out, "cannot run it yet"))
                fail_msg("`%s` exited %d without refusing by %s:\n%s", args, rc, cases[i][1], out);
        }
}

/* tune-gemm --peak times GEMMs on a GPU; here, without one, it says so; a bad size is named */
static void test_tune_gemm_peak_needs_a_gpu_and_a_valid_size(void **state) {
    char *out = *state;
    int rc = gt_test_run("tune-gemm --peak --size 100", out, OUT_MAX);
    if (rc != 2 || !strstr(out, "'100'") || !strstr(out, "multiple of 256"))
        fail_msg("a size of 100 exited %d:\n%s", rc, out);
    rc = gt_test_run("tune-gemm --peak --size 512", out, OUT_MAX);
    if (rc == 0) {
        if (!strstr(out, "fp8") || !strstr(out, "TFLOP/s")) fail_msg("no rates:\n%s", out);
    } else if (rc != 1 || !strstr(out, "needs a GPU")) {
        fail_msg("tune-gemm --peak without a GPU exited %d:\n%s", rc, out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_accepts_the_hopper_recipes_on_the_cpu),
        cmocka_unit_test(test_train_runs_fp8_steps_on_the_cpu),
        cmocka_unit_test(
            test_blackwell_formats_and_gpu_blockwise_fp8_off_its_tiles_are_refused_by_name),
        cmocka_unit_test(test_tune_gemm_peak_needs_a_gpu_and_a_valid_size),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
