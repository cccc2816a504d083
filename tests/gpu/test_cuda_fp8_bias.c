/* fp8 linear layers with biases on the CUDA backend against the CPU emulation: the fp8 GEMM's
 * bias epilogue (bf16 out, with and without a residual) and the bias gradient from the
 * unquantized output gradient; then a whole fp8_cs / fp8_ds model with add_bias_linear and
 * add_qkv_bias trains on the GPU like the CPU emulation (first loss within bf16 tolerance) and
 * replays its full-iteration graph bitwise like eager. */
#include "gpu_fixture.h"
#include "graphs_fixture.h"

static gt_fp8_cast_spec spec(gt_fp8_format f) {
    return (gt_fp8_cast_spec){GT_FP8_TENSORWISE, f, 1, 1, NULL};
}

static gt_fp8_meta meta_of(gt_fp8_format f) {
    return (gt_fp8_meta){1.0f, 1.0f, 0.0f, (int32_t)f};
}

/* a and w cast on the CPU, their codes uploaded; out = a w^T + bias (+ res) on both */
static void bias_gemm_case(gpu_env *e, int M, int N, int K, int with_res) {
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    float *a = rand_vec(e, (size_t)M * K, 3.0f), *w = rand_vec(e, (size_t)N * K, 0.1f);
    float *qa = c_f32(e, NULL, (size_t)M * K), *qw = c_f32(e, NULL, (size_t)N * K);
    float *sa = c_f32(e, NULL, 1), *sw = c_f32(e, NULL, 1);
    gt_fp8_meta *m = c_alloc(e, 2 * sizeof *m);
    m[0] = meta_of(GT_FP8_E4M3), m[1] = meta_of(GT_FP8_E4M3);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, qa, sa, a, M, K, 0, spec(GT_FP8_E4M3), &m[0], cst);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, qw, sw, w, N, K, 0, spec(GT_FP8_E4M3), &m[1], cst);
    uint8_t *ha = malloc((size_t)M * K), *hw = malloc((size_t)N * K);
    for (size_t i = 0; i < (size_t)M * K; i++)
        ha[i] = gt_fp8_from_float(qa[i], GT_FP8_E4M3);
    for (size_t i = 0; i < (size_t)N * K; i++)
        hw[i] = gt_fp8_from_float(qw[i], GT_FP8_E4M3);
    uint8_t *ga = g_alloc(e, (size_t)M * K), *gw = g_alloc(e, (size_t)N * K);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, ga, ha, (size_t)M * K);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gw, hw, (size_t)N * K);
    float *gsa = g_f32(e, sa, 1), *gsw = g_f32(e, sw, 1);
    size_t no = (size_t)M * N;
    float *bias = rand_vec(e, (size_t)N, 2.0f), *res = with_res ? rand_vec(e, no, 1.0f) : NULL;
    float *c_out = c_f32(e, NULL, no), *got = malloc(no * sizeof *got);
    void *g_out = g_act(e, NULL, no), *g_bias = g_act(e, bias, (size_t)N);
    void *g_res = with_res ? g_act(e, res, no) : NULL;
    gt_fp8_operand ca = {qa, sa, 1, GT_FP8_E4M3}, cw = {qw, sw, 1, GT_FP8_E4M3};
    gt_fp8_operand gao = {ga, gsa, 1, GT_FP8_E4M3}, gwo = {gw, gsw, 1, GT_FP8_E4M3};
    e->cpu->ops->fp8_gemm(e->cpu, e->cs, c_out, 0, 0, ca, cw, GT_FP8_TENSORWISE, bias, res, M, N,
                          K);
    GPU_PLAN(e, e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, 0, 0, gao, gwo, GT_FP8_TENSORWISE,
                                      g_bias, g_res, M, N, K));
    e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, 0, 0, gao, gwo, GT_FP8_TENSORWISE, g_bias, g_res, M,
                          N, K);
    g_read_act(e, got, g_out, no);
    char what[96];
    snprintf(what, sizeof what, "fp8_gemm(bias) %dx%dx%d%s", M, N, K, with_res ? " + res" : "");
    EXPECT_CLOSE(what, got, c_out, no, TOL_BF16);
    free(a), free(w), free(ha), free(hw), free(bias), free(res), free(got);
}

static void test_fp8_gemm_bias_epilogue_matches_cpu(void **state) {
    gpu_env *e = *state;
    bias_gemm_case(e, 64, 48, 96, 0);
    bias_gemm_case(e, 64, 48, 96, 1);
    bias_gemm_case(e, 256, 384, 128, 1);
}

static void test_bias_grad_matches_cpu(void **state) {
    gpu_env *e = *state;
    enum { M = 300, N = 160 };
    float *dout = rand_vec(e, (size_t)M * N, 1.0f), *start = rand_vec(e, N, 0.5f);
    for (int acc = 0; acc < 2; acc++) {
        float *c_db = c_f32(e, start, N), *g_db = g_f32(e, start, N), got[N];
        void *g_dout = g_act(e, dout, (size_t)M * N);
        e->cpu->ops->bias_grad(e->cpu, e->cs, c_db, dout, M, N, acc);
        GPU_PLAN(e, e->gpu->ops->bias_grad(e->gpu, e->gs, g_db, g_dout, M, N, acc));
        e->gpu->ops->bias_grad(e->gpu, e->gs, g_db, g_dout, M, N, acc);
        g_read_f32(e, got, g_db, N);
        EXPECT_CLOSE(acc ? "bias_grad (+=)" : "bias_grad", got, c_db, N, TOL_F32);
    }
    free(dout), free(start);
}

/* the model: the GPU's first loss against the CPU emulation's, and eager == full iteration */
static void model_case(gt_compute_dtype d) {
    gt_config c;
    gtf_gpu_dense(&c, 2, 256, 4, 2, 512, 2);
    c.model.add_bias_linear = true;
    c.model.add_qkv_bias = true;
    c.model.compute_dtype = d;
    c.model.hidden_dropout = 0;
    c.model.attention_dropout = 0;
    gtf_run gpu, full, cpu;
    gtf_train(&c, 6, &gpu);
    assert_int_equal(gpu.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gtf_train(&c, 6, &full);
    assert_int_equal(full.rc, GT_OK);
    gtf_assert_same(&gpu, &full);
    c.runtime.device = GT_DEVICE_CPU;
    gtf_graphs(&c, GT_GRAPH_IMPL_NONE, 0);
    gtf_train(&c, 1, &cpu);
    assert_int_equal(cpu.rc, GT_OK);
    printf("    fp8 model with biases: loss gpu %.6f cpu %.6f\n", (double)gpu.loss[0],
           (double)cpu.loss[0]);
    assert_true(fabs((double)gpu.loss[0] - cpu.loss[0]) <= 1e-2 * fabs((double)cpu.loss[0]));
    gtf_free(&gpu), gtf_free(&full), gtf_free(&cpu);
}

static void test_fp8_models_with_biases_train_like_the_cpu_emulation(void **state) {
    (void)state;
    model_case(GT_DTYPE_FP8_CS);
    model_case(GT_DTYPE_FP8_DS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fp8_gemm_bias_epilogue_matches_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_bias_grad_matches_cpu, gpu_free_bufs),
        cmocka_unit_test(test_fp8_models_with_biases_train_like_the_cpu_emulation),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
