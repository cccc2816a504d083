/* GPU tests of the per-head q/k RMSNorm (model.qk_layernorm) against the CPU reference on the
 * same bf16-rounded inputs: the forward's normalized q/k (v untouched), kept raw values and
 * 1/rms; the backward's dqkv and the weight gradients summed from the partial rows by
 * colsum_many, which must also be bitwise equal over two runs (no atomics); head sizes 64 and
 * 128 (the attention kernels') and 20 (lanes without columns), token counts with one and with
 * many partial rows; and a head size past the kernel refused by name. */
#include "gpu_fixture.h"

static void qk_case(gpu_env *e, int N, int H, int KV, int hd) {
    char what[96];
    int heads = H + KV, row = (H + 2 * KV) * hd, parts = gt_rmsnorm_parts(N);
    size_t nq = (size_t)N * row, nr = (size_t)N * heads * hd, nh = (size_t)N * heads;
    float *x = rand_vec(e, nq, 2.0f), *dy = rand_vec(e, nq, 1.0f);
    float *qw = rand_vec(e, hd, 0.3f), *kw = rand_vec(e, hd, 0.3f);
    for (int i = 0; i < hd; i++) {
        qw[i] = bf16_round(1.0f + qw[i]);
        kw[i] = bf16_round(1.0f + kw[i]);
    }
    float *got = calloc(nq, 4), *got2 = calloc(nq, 4);
    /* CPU reference */
    float *c_x = c_f32(e, x, nq), *c_raw = c_f32(e, NULL, nr), *c_rstd = c_f32(e, NULL, nh);
    float *c_qw = c_f32(e, qw, hd), *c_kw = c_f32(e, kw, hd), *c_dy = c_f32(e, dy, nq);
    float *c_part = c_f32(e, NULL, 2 * (size_t)parts * hd), *c_dw = c_f32(e, NULL, 2 * hd);
    e->cpu->ops->qk_norm_fwd(e->cpu, e->cs, c_x, c_raw, c_rstd, c_qw, c_kw, N, H, KV, hd, 1e-6f);
    e->cpu->ops->qk_norm_bwd_part(e->cpu, e->cs, c_dy, c_part, c_part + (size_t)parts * hd, c_raw,
                                  c_rstd, c_qw, c_kw, N, H, KV, hd);
    gt_colsum_job cj[2] = {{c_dw, c_part, parts, hd, 0},
                           {c_dw + hd, c_part + (size_t)parts * hd, parts, hd, 0}};
    e->cpu->ops->colsum_many(e->cpu, e->cs, cj, 2);
    /* GPU */
    void *g_x = g_act(e, x, nq), *g_raw = g_act(e, NULL, nr), *g_qw = g_act(e, qw, hd);
    void *g_kw = g_act(e, kw, hd);
    float *g_rstd = g_f32(e, NULL, nh), *g_part = g_f32(e, NULL, 2 * (size_t)parts * hd);
    float *g_dw = g_f32(e, NULL, 2 * hd), *g_dw2 = g_f32(e, NULL, 2 * hd);
    GPU_PLAN(e, e->gpu->ops->qk_norm_fwd(e->gpu, e->gs, g_x, g_raw, g_rstd, g_qw, g_kw, N, H, KV,
                                         hd, 1e-6f));
    e->gpu->ops->qk_norm_fwd(e->gpu, e->gs, g_x, g_raw, g_rstd, g_qw, g_kw, N, H, KV, hd, 1e-6f);
    g_read_act(e, got, g_x, nq);
    snprintf(what, sizeof what, "qk_norm_fwd qkv N %d hd %d", N, hd);
    EXPECT_CLOSE(what, got, c_x, nq, TOL_BF16);
    for (size_t n = 0; n < (size_t)N; n++) /* v heads pass through bit for bit */
        for (size_t i = (size_t)heads * hd; i < (size_t)row; i++)
            assert_true(got[n * row + i] == x[n * row + i]);
    g_read_act(e, got, g_raw, nr);
    snprintf(what, sizeof what, "qk_norm_fwd raw N %d hd %d", N, hd);
    EXPECT_CLOSE(what, got, c_raw, nr, 1e-7);
    g_read_f32(e, got, g_rstd, nh);
    snprintf(what, sizeof what, "qk_norm_fwd rstd N %d hd %d", N, hd);
    EXPECT_CLOSE(what, got, c_rstd, nh, TOL_F32);
    for (int rep = 0; rep < 2; rep++) {
        void *g_dy = g_act(e, dy, nq);
        e->gpu->ops->qk_norm_bwd_part(e->gpu, e->gs, g_dy, g_part, g_part + (size_t)parts * hd,
                                      g_raw, g_rstd, g_qw, g_kw, N, H, KV, hd);
        float *dw = rep ? g_dw2 : g_dw;
        gt_colsum_job gj[2] = {{dw, g_part, parts, hd, 0},
                               {dw + hd, g_part + (size_t)parts * hd, parts, hd, 0}};
        e->gpu->ops->colsum_many(e->gpu, e->gs, gj, 2);
        g_read_act(e, rep ? got2 : got, g_dy, nq);
    }
    snprintf(what, sizeof what, "qk_norm_bwd dqkv N %d hd %d", N, hd);
    EXPECT_CLOSE(what, got, c_dy, nq, TOL_BF16);
    assert_memory_equal(got, got2, nq * sizeof(float));
    float dw[512], dw2[512];
    g_read_f32(e, dw, g_dw, 2 * (size_t)hd);
    g_read_f32(e, dw2, g_dw2, 2 * (size_t)hd);
    snprintf(what, sizeof what, "qk_norm_bwd dqw,dkw N %d hd %d", N, hd);
    EXPECT_CLOSE(what, dw, c_dw, 2 * (size_t)hd, TOL_BF16);
    assert_memory_equal(dw, dw2, 2 * (size_t)hd * sizeof(float));
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK);
    free(x), free(dy), free(qw), free(kw), free(got), free(got2);
}

static void test_qk_norm_matches_cpu_and_weight_gradients_are_deterministic(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, qk_norm_fwd);
    qk_case(e, 300, 4, 2, 64);
    qk_case(e, 300, 8, 2, 128);
    qk_case(e, 37, 2, 1, 20);
    qk_case(e, 4096, 4, 4, 64); /* many partial rows */
}

static void test_qk_norm_head_size_past_the_kernel_is_refused(void **state) {
    gpu_env *e = *state;
    int hd = 512;
    void *g = g_act(e, NULL, (size_t)4 * hd), *w = g_act(e, NULL, hd);
    e->gpu->ops->qk_norm_fwd(e->gpu, e->gs, g, NULL, NULL, w, w, 1, 1, 1, hd, 1e-6f);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_UNSUPPORTED);
    printf("    %s\n", err.msg);
    assert_non_null(strstr(err.msg, "qk_norm_fwd"));
    assert_non_null(strstr(err.msg, "head size 512"));
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_qk_norm_matches_cpu_and_weight_gradients_are_deterministic),
        T(test_qk_norm_head_size_past_the_kernel_is_refused),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
