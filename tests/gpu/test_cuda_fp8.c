/* The CUDA backend's fp8 ops against the CPU emulation: casts bitwise (codes, inverse scales,
 * the scaling state; per tensor and delayed, E4M3 and E5M2, plain and transposed), the NaN
 * flag, delayed scaling's update bitwise, and cuBLASLt's fp8 GEMMs (bf16 out with a residual,
 * fp32 out accumulating, an E5M2 operand) within fp32 summation-order error. */
#include "gpu_fixture.h"

#define R 64
#define C 48

static gt_fp8_cast_spec spec(gt_fp8_scaling sc, gt_fp8_format f) {
    return (gt_fp8_cast_spec){sc, f, 1, 1};
}

static gt_fp8_meta meta_of(float scale, gt_fp8_format f) {
    return (gt_fp8_meta){scale, 1.0f / scale, 0.0f, (int32_t)f};
}

/* one cast on both backends; the GPU's codes decoded and compared bitwise */
static void cast_case(gpu_env *e, gt_fp8_scaling sc, gt_fp8_format f, int transpose) {
    size_t n = (size_t)R * C;
    float *x = rand_vec(e, n, 5.0f), *cq = c_f32(e, NULL, n), *got = malloc(n * sizeof *got);
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    gt_fp8_meta m0 = meta_of(sc == GT_FP8_DELAYED ? 24.0f : 1.0f, f), hm;
    gt_fp8_meta *cm = c_alloc(e, sizeof *cm), *gm = g_alloc(e, sizeof *gm);
    *cm = m0;
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gm, &m0, sizeof m0);
    float *csi = c_f32(e, NULL, 1), *gsi = g_f32(e, NULL, 1), hsi;
    void *gx = g_act(e, x, n);
    uint8_t *gq = g_alloc(e, n), *hq = malloc(n);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, cq, csi, x, R, C, transpose, spec(sc, f), cm, cst);
    GPU_PLAN(e, e->gpu->ops->fp8_cast(e->gpu, e->gs, gq, gsi, gx, R, C, transpose, spec(sc, f), gm,
                                      gst));
    e->gpu->ops->fp8_cast(e->gpu, e->gs, gq, gsi, gx, R, C, transpose, spec(sc, f), gm, gst);
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, hq, gq, n);
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, &hm, gm, sizeof hm);
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, &hsi, gsi, sizeof hsi);
    read_state(e, &hst, gst);
    for (size_t i = 0; i < n; i++)
        got[i] = gt_fp8_to_float(hq[i], f);
    printf("    fp8_cast scaling %d format %d transpose %d\n", (int)sc, (int)f, transpose);
    assert_memory_equal(got, cq, n * sizeof *got);
    assert_memory_equal(&hsi, csi, sizeof hsi);
    assert_memory_equal(&hm, cm, sizeof hm);
    assert_int_equal(hst.nan_flags, cst->nan_flags);
    free(x), free(got), free(hq);
}

static void test_fp8_casts_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    gt_fp8_scaling kinds[] = {GT_FP8_TENSORWISE, GT_FP8_DELAYED};
    gt_fp8_format fmts[] = {GT_FP8_E4M3, GT_FP8_E5M2};
    for (int k = 0; k < 2; k++)
        for (int f = 0; f < 2; f++)
            for (int t = 0; t < 2; t++)
                cast_case(e, kinds[k], fmts[f], t);
}

static void test_fp8_cast_of_a_nan_sets_the_flag(void **state) {
    gpu_env *e = *state;
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    x[5] = NAN;
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    gt_fp8_meta m0 = meta_of(1, GT_FP8_E4M3);
    gt_fp8_meta *gm = g_alloc(e, sizeof *gm);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gm, &m0, sizeof m0);
    void *gx = g_act(e, x, 16);
    uint8_t *gq = g_alloc(e, 16);
    float *gsi = g_f32(e, NULL, 1);
    gt_fp8_cast_spec sp = spec(GT_FP8_TENSORWISE, GT_FP8_E4M3);
    GPU_PLAN(e, e->gpu->ops->fp8_cast(e->gpu, e->gs, gq, gsi, gx, 1, 16, 0, sp, gm, gst));
    e->gpu->ops->fp8_cast(e->gpu, e->gs, gq, gsi, gx, 1, 16, 0, sp, gm, gst);
    read_state(e, &hst, gst);
    assert_int_equal(hst.nan_flags, GT_NAN_FP8);
}

static void test_fp8_amax_update_matches_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    enum { T = 3, LEN = 4 };
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    gt_fp8_meta *cm = c_alloc(e, T * sizeof *cm), *gm = g_alloc(e, T * sizeof *gm), hm[T];
    float *ch = c_f32(e, NULL, T * LEN), *gh = g_f32(e, NULL, T * LEN), hh[T * LEN];
    for (int i = 0; i < T; i++)
        cm[i] = meta_of(1, i == 2 ? GT_FP8_E5M2 : GT_FP8_E4M3);
    const float amaxes[] = {3.0f, 0.5f, 0.0f, 7.0f, 0.125f, 2.0f};
    for (int s = 0; s < 6; s++) {
        for (int i = 0; i < T; i++)
            cm[i].amax = amaxes[s] * (float)(i + 1);
        e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gm, cm, T * sizeof *cm);
        e->cpu->ops->fp8_amax_update(e->cpu, e->cs, cm, ch, T, LEN, s % 2, 1, cst);
        e->gpu->ops->fp8_amax_update(e->gpu, e->gs, gm, gh, T, LEN, s % 2, 1, gst);
        e->gpu->ops->memcpy_d2h(e->gpu, e->gs, hm, gm, T * sizeof *gm);
        g_read_f32(e, hh, gh, T * LEN);
        assert_memory_equal(hm, cm, T * sizeof *cm);
        assert_memory_equal(hh, ch, T * LEN * sizeof *ch);
    }
}

/* Hopper's fp8 tensor cores add their products in an accumulator narrower than fp32 (cuBLASLt
 * promotes it to fp32 every few K steps), so an fp32 result from the same fp8 codes differs
 * from the CPU's fp32 sums by about 2^-13 relative; a wrong scale or layout is off by O(1). */
#define TOL_FP8_F32 5e-4

/* fp8 operands cast on the CPU, their codes uploaded; both backends multiply them */
static void gemm_case(gpu_env *e, int M, int N, int K, int out_fp32, gt_fp8_format af) {
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    float *a = rand_vec(e, (size_t)M * K, 3.0f), *w = rand_vec(e, (size_t)N * K, 0.1f);
    float *qa = c_f32(e, NULL, (size_t)M * K), *qw = c_f32(e, NULL, (size_t)N * K);
    float *sa = c_f32(e, NULL, 1), *sw = c_f32(e, NULL, 1);
    gt_fp8_meta *m = c_alloc(e, 2 * sizeof *m);
    m[0] = meta_of(1, af), m[1] = meta_of(1, GT_FP8_E4M3);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, qa, sa, a, M, K, 0, spec(GT_FP8_TENSORWISE, af), &m[0],
                          cst);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, qw, sw, w, N, K, 0, spec(GT_FP8_TENSORWISE, GT_FP8_E4M3),
                          &m[1], cst);
    uint8_t *ha = malloc((size_t)M * K), *hw = malloc((size_t)N * K);
    for (size_t i = 0; i < (size_t)M * K; i++)
        ha[i] = gt_fp8_from_float(qa[i], af);
    for (size_t i = 0; i < (size_t)N * K; i++)
        hw[i] = gt_fp8_from_float(qw[i], GT_FP8_E4M3);
    uint8_t *ga = g_alloc(e, (size_t)M * K), *gw = g_alloc(e, (size_t)N * K);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, ga, ha, (size_t)M * K);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gw, hw, (size_t)N * K);
    float *gsa = g_f32(e, sa, 1), *gsw = g_f32(e, sw, 1);
    size_t no = (size_t)M * N;
    float *res = rand_vec(e, no, 1.0f), *got = malloc(no * sizeof *got);
    float *c_out = c_f32(e, res, no); /* fp32: the value accumulated into */
    void *g_out = out_fp32 ? (void *)g_f32(e, res, no) : g_act(e, NULL, no);
    void *g_res = out_fp32 ? NULL : g_act(e, res, no);
    gt_fp8_operand ca = {qa, sa, 1, af}, cw = {qw, sw, 1, GT_FP8_E4M3};
    gt_fp8_operand gao = {ga, gsa, 1, af}, gwo = {gw, gsw, 1, GT_FP8_E4M3};
    e->cpu->ops->fp8_gemm(e->cpu, e->cs, c_out, out_fp32, out_fp32, ca, cw, GT_FP8_TENSORWISE, NULL,
                          out_fp32 ? NULL : res, M, N, K);
    GPU_PLAN(e, e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, out_fp32, out_fp32, gao, gwo,
                                      GT_FP8_TENSORWISE, NULL, g_res, M, N, K));
    e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, out_fp32, out_fp32, gao, gwo, GT_FP8_TENSORWISE,
                          NULL, g_res, M, N, K);
    if (out_fp32)
        g_read_f32(e, got, g_out, no);
    else
        g_read_act(e, got, g_out, no);
    char what[96];
    snprintf(what, sizeof what, "fp8_gemm %dx%dx%d %s%s", M, N, K, out_fp32 ? "fp32 (+=)" : "bf16",
             af == GT_FP8_E5M2 ? " e5m2" : "");
    EXPECT_CLOSE(what, got, c_out, no, out_fp32 ? TOL_FP8_F32 : TOL_BF16);
    free(a), free(w), free(ha), free(hw), free(res), free(got);
}

static void test_fp8_gemms_match_cpu(void **state) {
    gpu_env *e = *state;
    gemm_case(e, 64, 48, 96, 0, GT_FP8_E4M3);
    gemm_case(e, 64, 48, 96, 0, GT_FP8_E5M2);
    gemm_case(e, 128, 256, 512, 1, GT_FP8_E4M3);
    gemm_case(e, 96, 160, 64, 1, GT_FP8_E5M2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fp8_casts_match_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_cast_of_a_nan_sets_the_flag, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_amax_update_matches_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_gemms_match_cpu, gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
