/* GPU test of Llama 3.1's rotary scaling (rope_scaled_fwd / rope_scaled_bwd): the CUDA kernels
 * against the CPU reference on the same bf16 inputs, both kernel paths (hd 128: eight pairs a
 * thread; hd 20: one), and a scaled and an unscaled table of the same shape side by side. */
#include "gpu_fixture.h"

static void test_scaled_rope_matches_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, rope_scaled_fwd);
    static const int hds[] = {128, 20};
    for (int h = 0; h < 2; h++) {
        int B = 2, T = 300, H = 4, KV = 2, hd = hds[h];
        size_t n = (size_t)B * T * (H + 2 * KV) * hd;
        float *x = rand_vec(e, n, 1.0f), *got = malloc(n * 4);
        for (int inv = 0; inv < 2; inv++) {
            char what[64];
            float *c = c_f32(e, x, n);
            void *g = g_act(e, x, n);
            if (inv) {
                e->cpu->ops->rope_scaled_bwd(e->cpu, e->cs, c, B, T, H, KV, hd, 500000.0f, 8.0f);
                GPU_PLAN(e, e->gpu->ops->rope_scaled_bwd(e->gpu, e->gs, g, B, T, H, KV, hd,
                                                         500000.0f, 8.0f));
                e->gpu->ops->rope_scaled_bwd(e->gpu, e->gs, g, B, T, H, KV, hd, 500000.0f, 8.0f);
            } else {
                e->cpu->ops->rope_scaled_fwd(e->cpu, e->cs, c, B, T, H, KV, hd, 500000.0f, 8.0f);
                GPU_PLAN(e, e->gpu->ops->rope_scaled_fwd(e->gpu, e->gs, g, B, T, H, KV, hd,
                                                         500000.0f, 8.0f));
                e->gpu->ops->rope_scaled_fwd(e->gpu, e->gs, g, B, T, H, KV, hd, 500000.0f, 8.0f);
            }
            g_read_act(e, got, g, n);
            snprintf(what, sizeof what, "%s hd %d", inv ? "rope_scaled_bwd" : "rope_scaled_fwd",
                     hd);
            EXPECT_CLOSE(what, got, c, n, TOL_BF16);
        }
        free(x), free(got);
    }
}

/* The scaled table is its own: the unscaled op of the same (T, hd, theta) still rotates by
 * the unscaled angles, so the two outputs differ where the low frequencies turn. */
static void test_scaled_and_unscaled_tables_coexist(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, rope_scaled_fwd);
    int B = 1, T = 2000, H = 1, KV = 1, hd = 128;
    size_t n = (size_t)B * T * (H + 2 * KV) * hd;
    float *x = rand_vec(e, n, 1.0f), *a = malloc(n * 4), *s = malloc(n * 4);
    void *ga = g_act(e, x, n), *gs = g_act(e, x, n);
    float *ca = c_f32(e, x, n);
    GPU_PLAN(e, e->gpu->ops->rope_scaled_fwd(e->gpu, e->gs, gs, B, T, H, KV, hd, 500000.0f, 8.0f));
    GPU_PLAN(e, e->gpu->ops->rope_fwd(e->gpu, e->gs, ga, B, T, H, KV, hd, 500000.0f));
    e->gpu->ops->rope_fwd(e->gpu, e->gs, ga, B, T, H, KV, hd, 500000.0f);
    e->gpu->ops->rope_scaled_fwd(e->gpu, e->gs, gs, B, T, H, KV, hd, 500000.0f, 8.0f);
    e->cpu->ops->rope_fwd(e->cpu, e->cs, ca, B, T, H, KV, hd, 500000.0f);
    g_read_act(e, a, ga, n);
    g_read_act(e, s, gs, n);
    EXPECT_CLOSE("rope_fwd beside a scaled table", a, ca, n, TOL_BF16);
    assert_true(rel_l2(s, a, n) > 10 * TOL_BF16);
    free(x), free(a), free(s);
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_scaled_rope_matches_cpu),
        T(test_scaled_and_unscaled_tables_coexist),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
