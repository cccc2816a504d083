/* fp8 MoE training on a real GPU (run by developers on the GPU machine): a small MoE model in
 * fp8_cs and fp8_ds (the dense linears and the expert GEMMs in fp8; one and two micro-batches,
 * so both ways of making the experts' transposed weight copies) replays one full-iteration
 * graph bitwise like eager steps, and its losses follow the CPU emulation of the same recipe
 * within bf16 rounding. Skips when no GPU can be used. */
#include "graphs_fixture.h"

#include <math.h>

static int g_have_gpu;

static int setup(void **state) {
    (void)state;
    g_have_gpu = gtf_cuda_available();
    return 0;
}

#define STEPS 8
#define WARMUP 2
#define CPU_STEPS 4
#define LOSS_REL_TOL 3e-2 /* as test_cuda_fp8_train.c: bf16 against fp32 activations */

static void gpu_moe_fp8(gt_config *c, gt_compute_dtype dtype) {
    gtf_gpu_dense(c, 2, 256, 4, 2, 512, WARMUP);
    c->model.num_moe_experts = 4;
    c->model.moe_router_topk = 2;
    c->model.moe_ffn_hidden_size = 256;
    c->model.moe_aux_loss_coeff = 0.01;
    c->model.compute_dtype = dtype;
}

static void test_fp8_moe_full_iteration_replays_bitwise_like_eager(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS};
    for (int r = 0; r < 2; r++)
        for (int micro = 1; micro <= 2; micro++) {
            gt_config c;
            gpu_moe_fp8(&c, recipes[r]);
            c.train.global_batch_size = micro * c.train.micro_batch_size;
            printf("    recipe %d, %d micro-batches\n", r, micro);
            gtf_assert_full_iteration_like_eager(&c, STEPS, WARMUP);
        }
}

static void test_fp8_moe_gpu_losses_follow_the_cpu_emulation(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS};
    for (int r = 0; r < 2; r++) {
        gt_config c;
        gpu_moe_fp8(&c, recipes[r]);
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
        cmocka_unit_test(test_fp8_moe_full_iteration_replays_bitwise_like_eager),
        cmocka_unit_test(test_fp8_moe_gpu_losses_follow_the_cpu_emulation),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
