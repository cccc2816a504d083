/* fp8 training on a real GPU (run by developers on the GPU machine): fp8_cs and fp8_ds models
 * replay one full-iteration graph bitwise like eager steps (the pair casts, the saved fp8
 * inputs and the recorded scales are all device state), blockwise (fp8_sc: its tile scales are
 * computed inside each cast) and current-scaling (fp8_cs: the amaxes its norms and SwiGLU take
 * for the casts, their slots zeroed inside each unit) ones replay scoped and full-iteration
 * graphs bitwise like eager steps, and the losses of all three follow the CPU emulation of the
 * same recipe within bf16 rounding (the CPU keeps fp32 activations). Skips when no GPU can be
 * used. */
#include "graphs_fixture.h"

#include <math.h>

#define STEPS 8
#define WARMUP 2
#define CPU_STEPS 4
/* bf16 activations against fp32 ones, then fp8 rounding of both: a wrong scale or layout is
 * off by far more */
#define LOSS_REL_TOL 3e-2

static int g_have_gpu;

static int setup(void **state) {
    (void)state;
    g_have_gpu = gtf_cuda_available();
    return 0;
}

static void gpu_fp8(gt_config *c, gt_compute_dtype dtype) {
    gtf_gpu_dense(c, 2, 256, 4, 2, 512, WARMUP);
    c->model.compute_dtype = dtype;
}

static void test_fp8_full_iteration_replays_bitwise_like_eager(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS};
    for (int r = 0; r < 2; r++) {
        gt_config c;
        gpu_fp8(&c, recipes[r]);
        printf("    recipe %d\n", r);
        gtf_assert_full_iteration_like_eager(&c, STEPS, WARMUP);
    }
}

static void test_blockwise_fp8_scoped_and_full_iteration_replay_bitwise_like_eager(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_fp8(&c, GT_DTYPE_FP8_SC);
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, GT_SCOPE_ATTN | GT_SCOPE_MLP, NULL);
}

/* Current scaling's norms and SwiGLU take their outputs' amaxes for the casts, their slots
 * zeroed inside each unit: the per-unit graphs replay that as the eager steps run it */
static void
test_current_scaling_fp8_scoped_and_full_iteration_replay_bitwise_like_eager(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_fp8(&c, GT_DTYPE_FP8_CS);
    gtf_assert_scoped_and_full_like_eager(&c, STEPS, WARMUP, GT_SCOPE_ATTN | GT_SCOPE_MLP, NULL);
}

static void test_fp8_gpu_losses_follow_the_cpu_emulation(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS, GT_DTYPE_FP8_SC};
    for (int r = 0; r < 3; r++) {
        gt_config c;
        gpu_fp8(&c, recipes[r]);
        c.model.attention_dropout = c.model.hidden_dropout = 0;
        gtf_run gpu, cpu;
        gtf_train(&c, CPU_STEPS, &gpu);
        c.runtime.device = GT_DEVICE_CPU;
        gtf_train(&c, CPU_STEPS, &cpu);
        assert_int_equal(gpu.steps, CPU_STEPS);
        assert_int_equal(cpu.steps, CPU_STEPS);
        for (int i = 0; i < CPU_STEPS; i++) {
            double rel = fabs((double)gpu.loss[i] - cpu.loss[i]) / cpu.loss[i];
            printf("    recipe %d step %d: gpu %.6f cpu %.6f (%.3f%%)\n", r, i + 1,
                   (double)gpu.loss[i], (double)cpu.loss[i], 100 * rel);
            if (rel > LOSS_REL_TOL)
                fail_msg("recipe %d step %d: the GPU's loss %.6f is %.2f%% from the CPU's %.6f", r,
                         i + 1, (double)gpu.loss[i], 100 * rel, (double)cpu.loss[i]);
        }
        gtf_free(&gpu);
        gtf_free(&cpu);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_full_iteration_replays_bitwise_like_eager),
        cmocka_unit_test(test_blockwise_fp8_scoped_and_full_iteration_replay_bitwise_like_eager),
        cmocka_unit_test(
            test_current_scaling_fp8_scoped_and_full_iteration_replay_bitwise_like_eager),
        cmocka_unit_test(test_fp8_gpu_losses_follow_the_cpu_emulation),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
