/* The CUDA backend's fp8 grouped expert GEMMs (backend/cuda/k_moe_fp8.cu) against the CPU
 * emulation on the same fp8 codes: the forward and data gradient (E4M3 x E4M3, E5M2 x E4M3;
 * one inverse scale for the rows, one per expert) and the weight gradient (overwriting and
 * accumulating), on the mma.sync kernels' shapes with uneven, empty and partial groups and
 * rows outside every group, and on shapes that take the SIMT kernels. The model's training in
 * fp8 is test_cuda_fp8_moe_train.c. */
#include "gpu_fixture.h"

/* Hopper's fp8 tensor cores sum in an accumulator narrower than fp32 (see test_cuda_fp8.c) */
#define TOL_FP8_F32 5e-4

static gt_fp8_cast_spec current(gt_fp8_format f) {
    return (gt_fp8_cast_spec){GT_FP8_TENSORWISE, f, 1, 1, NULL};
}

/* x [rows, cols] (or its transpose) cast on the CPU: the codes' values into q (host), their
 * bytes uploaded (returned), the inverse scale into *sinv */
static uint8_t *cast_up(gpu_env *e, float *q, float *sinv, const float *x, int rows, int cols,
                        int transpose, gt_fp8_format f, gt_step_state *cst) {
    gt_fp8_meta m = {1.0f, 1.0f, 0.0f, (int32_t)f};
    e->cpu->ops->fp8_cast(e->cpu, e->cs, q, sinv, x, rows, cols, transpose, current(f), &m, cst);
    size_t n = (size_t)rows * cols;
    uint8_t *h = malloc(n), *g = g_alloc(e, n);
    for (size_t i = 0; i < n; i++)
        h[i] = gt_fp8_from_float(q[i], f);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, g, h, n);
    g_sync(e);
    free(h);
    return g;
}

/* out[R, Nf] = a [R, K] times each expert's w [Nf, K] on both backends; af the rows' format */
static void matmul_case(gpu_env *e, int R, int E, int Nf, int K, const int32_t *offsets,
                        gt_fp8_format af) {
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    float *a = rand_vec(e, (size_t)R * K, 3.0f), *w = rand_vec(e, (size_t)E * Nf * K, 0.1f);
    for (int x = 0; x < E; x++) /* experts of other magnitudes: other scales */
        for (size_t i = 0; i < (size_t)Nf * K; i++)
            w[(size_t)x * Nf * K + i] *= (float)(1 + 3 * x);
    float *qa = c_f32(e, NULL, (size_t)R * K), *qw = c_f32(e, NULL, (size_t)E * Nf * K);
    float *sa = c_f32(e, NULL, 1), *sw = c_f32(e, NULL, (size_t)E);
    uint8_t *ga = cast_up(e, qa, sa, a, R, K, 0, af, cst);
    uint8_t *gw = g_alloc(e, (size_t)E * Nf * K);
    for (int x = 0; x < E; x++) {
        size_t o = (size_t)x * Nf * K;
        uint8_t *gx = cast_up(e, qw + o, sw + x, w + o, Nf, K, 0, GT_FP8_E4M3, cst);
        e->gpu->ops->memcpy_d2d(e->gpu, e->gs, gw + o, gx, (size_t)Nf * K);
    }
    float *gsa = g_f32(e, sa, 1), *gsw = g_f32(e, sw, (size_t)E);
    int32_t *goff = g_i32(e, offsets, (size_t)E + 1);
    size_t no = (size_t)R * Nf;
    float *before = rand_vec(e, no, 1.0f), *got = malloc(no * sizeof *got);
    float *c_out = c_f32(e, before, no); /* rows outside every group keep these */
    void *g_out = g_act(e, before, no);
    e->cpu->ops->moe_fp8_matmul(e->cpu, e->cs, c_out, GT_FP8_FAST_ACCUM,
                                (gt_fp8_operand){qa, sa, 1, af},
                                (gt_fp8_operand){qw, sw, 1, GT_FP8_E4M3}, offsets, R, E, Nf, K);
    e->gpu->ops->moe_fp8_matmul(e->gpu, e->gs, g_out, GT_FP8_FAST_ACCUM,
                                (gt_fp8_operand){ga, gsa, 1, af},
                                (gt_fp8_operand){gw, gsw, 1, GT_FP8_E4M3}, goff, R, E, Nf, K);
    g_read_act(e, got, g_out, no);
    char what[96];
    snprintf(what, sizeof what, "moe_fp8_matmul R=%d E=%d %dx%d%s", R, E, Nf, K,
             af == GT_FP8_E5M2 ? " e5m2" : "");
    EXPECT_CLOSE(what, got, c_out, no, TOL_BF16);
    free(a), free(w), free(before), free(got);
}

/* dw[e] (+)= g[group]^T x[group] from the transposed casts, on both backends */
static void wgrad_case(gpu_env *e, int R, int E, int Nf, int K, const int32_t *offsets,
                       int accumulate) {
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    float *g = rand_vec(e, (size_t)R * Nf, 0.01f), *x = rand_vec(e, (size_t)R * K, 2.0f);
    float *qg = c_f32(e, NULL, (size_t)Nf * R), *qx = c_f32(e, NULL, (size_t)K * R);
    float *sg = c_f32(e, NULL, 1), *sx = c_f32(e, NULL, 1);
    uint8_t *gg = cast_up(e, qg, sg, g, R, Nf, 1, GT_FP8_E5M2, cst);
    uint8_t *gx = cast_up(e, qx, sx, x, R, K, 1, GT_FP8_E4M3, cst);
    float *gsg = g_f32(e, sg, 1), *gsx = g_f32(e, sx, 1);
    int32_t *goff = g_i32(e, offsets, (size_t)E + 1);
    size_t n = (size_t)E * Nf * K;
    float *before = rand_vec(e, n, 1e-3f), *got = malloc(n * sizeof *got);
    float *c_dw = c_f32(e, before, n), *g_dw = g_f32(e, before, n);
    e->cpu->ops->moe_fp8_matmul_wgrad(e->cpu, e->cs, c_dw, (gt_fp8_operand){qg, sg, 1, GT_FP8_E5M2},
                                      (gt_fp8_operand){qx, sx, 1, GT_FP8_E4M3}, offsets, R, E, Nf,
                                      K, accumulate);
    e->gpu->ops->moe_fp8_matmul_wgrad(
        e->gpu, e->gs, g_dw, (gt_fp8_operand){gg, gsg, 1, GT_FP8_E5M2},
        (gt_fp8_operand){gx, gsx, 1, GT_FP8_E4M3}, goff, R, E, Nf, K, accumulate);
    g_read_f32(e, got, g_dw, n);
    char what[96];
    snprintf(what, sizeof what, "moe_fp8_matmul_wgrad R=%d E=%d %dx%d%s", R, E, Nf, K,
             accumulate ? " (+=)" : "");
    EXPECT_CLOSE(what, got, c_dw, n, TOL_FP8_F32);
    free(g), free(x), free(before), free(got);
}

/* groups of 37 and 263 rows, an empty one, one of 200; rows 0..4 and 500..511 in none */
static const int32_t k_uneven[5] = {5, 42, 42, 305, 500};
/* the first and last group cut mid 16-byte chunk of the transposed operands' columns */
static const int32_t k_cut[4] = {3, 131, 259, 509};
static const int32_t k_small[4] = {0, 11, 11, 50};

static void test_fp8_expert_gemms_on_the_tensor_cores_match_cpu(void **state) {
    gpu_env *e = *state;
    matmul_case(e, 512, 4, 256, 384, k_uneven, GT_FP8_E4M3);
    matmul_case(e, 512, 4, 200, 96, k_uneven, GT_FP8_E5M2); /* a partial column tile */
    matmul_case(e, 512, 3, 384, 1024, k_cut, GT_FP8_E5M2);
}

static void test_fp8_expert_weight_gradients_on_the_tensor_cores_match_cpu(void **state) {
    gpu_env *e = *state;
    for (int acc = 0; acc < 2; acc++) {
        wgrad_case(e, 512, 4, 256, 384, k_uneven, acc);
        wgrad_case(e, 512, 3, 200, 136, k_cut, acc);
    }
}

static void test_fp8_expert_gemms_off_the_tensor_cores_shapes_match_cpu(void **state) {
    gpu_env *e = *state;
    matmul_case(e, 50, 3, 20, 24, k_small, GT_FP8_E4M3); /* K % 16 != 0 */
    wgrad_case(e, 50, 3, 20, 24, k_small, 0);            /* R % 16 != 0 */
    wgrad_case(e, 50, 3, 20, 24, k_small, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fp8_expert_gemms_on_the_tensor_cores_match_cpu,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_expert_weight_gradients_on_the_tensor_cores_match_cpu,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_expert_gemms_off_the_tensor_cores_shapes_match_cpu,
                                  gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
