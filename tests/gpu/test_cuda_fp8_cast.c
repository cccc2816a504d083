/* The CUDA backend's per-tensor fp8 casts (backend/cuda/k_fp8.cu) against the CPU emulation,
 * bitwise, on the paths of their vectorized kernels: shapes off the 128 x 128 tiles and the
 * 16-byte chunks, pointers off the 16- and 8-byte alignments the fast loads and stores need
 * (with the bytes around each output left as they were), and inputs with NaN, infinities,
 * saturating and underflowing values; and the experts' batched weight casts
 * (fp8_cast_experts). test_cuda_fp8.c covers the casts' scaling modes. */
#include "core/fp8.h"
#include "gpu_fixture.h"

#define GUARD 32 /* bytes after each fp8 output that a cast must leave alone */

typedef struct cast_shape {
    int rows, cols;
    int x_off;  /* x starts this many bf16 elements into its allocation */
    int q_off;  /* q starts this many bytes into its allocation */
    int qt_off; /* q^T likewise */
} cast_shape;

/* The GPU's n fp8 codes at gq decoded as the CPU stores them, and the guard bytes around them
 * (off before, GUARD after) checked untouched */
static void expect_codes(gpu_env *e, const uint8_t *gq, int off, const float *want, size_t n,
                         gt_fp8_format f) {
    size_t total = (size_t)off + n + GUARD;
    uint8_t *h = malloc(total);
    float *got = malloc(n * sizeof *got);
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, h, gq, total);
    g_sync(e);
    for (size_t i = 0; i < n; i++) {
        got[i] = gt_fp8_to_float(h[off + i], f);
        /* a NaN's sign aside: the GPU's satfinite conversion makes every NaN 0x7f, the CPU's
         * keeps the sign (E5M2's -NaN decodes as -NaN) */
        if (isnan(want[i]) && isnan(got[i])) got[i] = want[i];
    }
    assert_memory_equal(got, want, n * sizeof *got);
    for (int i = 0; i < off; i++)
        assert_int_equal(h[i], 0);
    for (int i = 0; i < GUARD; i++)
        assert_int_equal(h[(size_t)off + n + i], 0);
    free(h);
    free(got);
}

/* The GPU's meta as the CPU's, bitwise, except a NaN amax's payload: the GPU's amax is the bits
 * of its bf16 input's NaN (its float -> bf16 conversion makes 0x7fff of any NaN), the CPU's the
 * float NaN of its fp32 input */
static void expect_meta(const gt_fp8_meta *got, const gt_fp8_meta *want) {
    if (isnan(want->amax)) {
        assert_true(isnan(got->amax));
        gt_fp8_meta g = *got;
        g.amax = want->amax;
        assert_memory_equal(&g, want, sizeof g);
        return;
    }
    assert_memory_equal(got, want, sizeof *got);
}

/* One cast of x [rows, cols] on both backends, compared bitwise (codes, inverse scales, meta,
 * flags): mode 0 plain, 1 transposed, 2 the pair (both layouts in one pass) */
static void cast_case(gpu_env *e, const float *x, cast_shape sh, gt_fp8_scaling sc, gt_fp8_format f,
                      int mode) {
    int rows = sh.rows, cols = sh.cols;
    size_t n = (size_t)rows * cols;
    printf("    scaling %d format %d mode %d %d x %d offsets x %d q %d qt %d\n", (int)sc, (int)f,
           mode, rows, cols, sh.x_off, sh.q_off, sh.qt_off);
    float *cq = c_f32(e, NULL, n), *cqt = c_f32(e, NULL, n);
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    float scale = sc == GT_FP8_DELAYED ? 24.0f : 1.0f;
    gt_fp8_meta m0 = {scale, 1.0f / scale, sc == GT_FP8_DELAYED ? 0.75f : 0.0f, (int32_t)f}, hm;
    gt_fp8_meta *cm = c_alloc(e, sizeof *cm), *gm = g_alloc(e, sizeof *gm);
    *cm = m0;
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gm, &m0, sizeof m0);
    float *csi = c_f32(e, NULL, 2), *gsi = g_f32(e, NULL, 2), hsi[2];
    /* x behind x_off leading elements: the upload stays aligned, the cast's input does not */
    float *padded = calloc(n + (size_t)sh.x_off, sizeof *padded);
    memcpy(padded + sh.x_off, x, n * sizeof *x);
    uint8_t *gx_base = g_act(e, padded, n + (size_t)sh.x_off);
    free(padded);
    const void *gx = gx_base + (size_t)sh.x_off * e->gpu->act_bytes;
    uint8_t *gq_base = g_alloc(e, (size_t)sh.q_off + n + GUARD);
    uint8_t *gqt_base = g_alloc(e, (size_t)sh.qt_off + n + GUARD);
    uint8_t *gq = gq_base + sh.q_off, *gqt = gqt_base + sh.qt_off;
    gt_fp8_cast_spec sp = {sc, f, 1, 1, NULL};
    gt_backend *g = e->gpu;
    if (mode == 2) {
        e->cpu->ops->fp8_cast_pair(e->cpu, e->cs, cq, csi, cqt, csi + 1, x, rows, cols, sp, cm,
                                   cst);
        GPU_PLAN(
            e, g->ops->fp8_cast_pair(g, e->gs, gq, gsi, gqt, gsi + 1, gx, rows, cols, sp, gm, gst));
        g->ops->fp8_cast_pair(g, e->gs, gq, gsi, gqt, gsi + 1, gx, rows, cols, sp, gm, gst);
    } else {
        uint8_t *out = mode == 1 ? gqt : gq;
        float *cout = mode == 1 ? cqt : cq;
        e->cpu->ops->fp8_cast(e->cpu, e->cs, cout, csi, x, rows, cols, mode, sp, cm, cst);
        GPU_PLAN(e, g->ops->fp8_cast(g, e->gs, out, gsi, gx, rows, cols, mode, sp, gm, gst));
        g->ops->fp8_cast(g, e->gs, out, gsi, gx, rows, cols, mode, sp, gm, gst);
    }
    g_sync(e);
    g->ops->memcpy_d2h(g, e->gs, &hm, gm, sizeof hm);
    g->ops->memcpy_d2h(g, e->gs, hsi, gsi, sizeof hsi);
    read_state(e, &hst, gst);
    if (mode != 1) expect_codes(e, gq_base, sh.q_off, cq, n, f);
    if (mode != 0) expect_codes(e, gqt_base, sh.qt_off, cqt, n, f);
    assert_memory_equal(hsi, csi, (mode == 2 ? 2 : 1) * sizeof *hsi);
    expect_meta(&hm, cm);
    assert_int_equal(hst.nan_flags, cst->nan_flags);
    env_free_all(e); /* each case's buffers, so that long case lists stay within the fixture */
}

/* Every mode of a shape under current scaling in E4M3 and delayed scaling in E5M2 */
static void cast_all_modes(gpu_env *e, const float *x, cast_shape sh) {
    for (int mode = 0; mode < 3; mode++) {
        cast_case(e, x, sh, GT_FP8_TENSORWISE, GT_FP8_E4M3, mode);
        cast_case(e, x, sh, GT_FP8_DELAYED, GT_FP8_E5M2, mode);
    }
}

/* Partial 128 x 128 tiles on either edge, several tiles each way, rows that are multiples of 8
 * but not 16 (q^T in 8-byte halves), a tensor of one row or one column, and a tile row whose
 * transposed 16-byte stretches end past the last row */
static void test_fp8_casts_of_shapes_off_the_tiles_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    const int shapes[][2] = {{257, 390}, {128, 128}, {136, 264}, {200, 96}, {129, 1},
                             {1, 129},   {24, 520},  {300, 7},   {37, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        cast_shape sh = {shapes[i][0], shapes[i][1], 0, 0, 0};
        float *x = rand_vec(e, (size_t)sh.rows * sh.cols, 5.0f);
        cast_all_modes(e, x, sh);
        free(x);
    }
}

/* x off 16 bytes (scalar loads), q off 8 (byte stores), q^T off 16 but on 8 (8-byte halves)
 * or on nothing (bytes), alone and together */
static void test_fp8_casts_through_unaligned_pointers_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    const int offs[][3] = {{1, 0, 0}, {0, 1, 3}, {0, 0, 8}, {4, 8, 8}, {3, 5, 7}};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        cast_shape sh = {144, 200, offs[i][0], offs[i][1], offs[i][2]};
        float *x = rand_vec(e, (size_t)sh.rows * sh.cols, 5.0f);
        cast_all_modes(e, x, sh);
        free(x);
    }
}

/* NaN, both infinities, values past either format's largest (saturating), values that round
 * to fp8's subnormals or to zero, negative zero and values on rounding ties, spread over a
 * tensor of several tiles; under both scalings (current scaling keeps the scale 1 at a
 * non-finite amax and raises the flag) */
static void test_fp8_casts_of_special_values_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    cast_shape sh = {136, 264, 0, 0, 0};
    size_t n = (size_t)sh.rows * sh.cols;
    const float specials[] = {NAN,     -NAN,      INFINITY, -INFINITY, 1e30f,       -60000.0f,
                              464.0f,  -480.0f,   2.0e-3f,  -1.0e-4f,  1e-30f,      -0.0f,
                              0.0f,    1.0625f,   -1.1875f, 3.0e-6f,   5.5e4f,      -6.0e4f,
                              1.5e-5f, -2.25e-2f, 448.0f,   57344.0f,  1.953125e-3f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        float *x = rand_vec(e, n, 5.0f);
        /* every 97th element, so that the specials land in every tile and lane position */
        for (size_t i = 0, k = 0; i < n; i += 97, k++) {
            int j = (int)(k % (size_t)ns);
            if (!with_nan && isnan(specials[j])) continue;
            x[i] = bf16_round(specials[j]);
        }
        for (int mode = 0; mode < 3; mode++)
            for (int f = 0; f < 2; f++) {
                gt_fp8_format fmt = f ? GT_FP8_E5M2 : GT_FP8_E4M3;
                cast_case(e, x, sh, GT_FP8_TENSORWISE, fmt, mode);
                cast_case(e, x, sh, GT_FP8_DELAYED, fmt, mode);
            }
        free(x);
    }
}

/* Large enough for several blocks of the flat passes and their scalar tails (n % 8 != 0) */
static void test_fp8_flat_casts_of_large_tensors_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    const int shapes[][2] = {{512, 1024}, {333, 1001}};
    for (int i = 0; i < 2; i++) {
        cast_shape sh = {shapes[i][0], shapes[i][1], 0, 0, 0};
        float *x = rand_vec(e, (size_t)sh.rows * sh.cols, 3.0f);
        cast_case(e, x, sh, GT_FP8_TENSORWISE, GT_FP8_E4M3, 0);
        cast_case(e, x, sh, GT_FP8_DELAYED, GT_FP8_E4M3, 0);
        cast_case(e, x, sh, GT_FP8_TENSORWISE, GT_FP8_E5M2, 2);
        free(x);
    }
}

/* fp8_cast_experts (every expert of a layer's weights in one pass) on both backends, bitwise:
 * count tensors [rows, cols] at their own magnitudes, each with its own starting meta (delayed
 * scaling: its own scale and amax so far); which: 1 q, 2 qt, 3 both; nan_expert >= 0 puts a NaN
 * in that expert (the flag, that expert's meta, the others' untouched by it).
 * tests/backend/test_cpu_moe_fp8.c checks the CPU's against each expert's own fp8_cast. */
static void experts_case(gpu_env *e, int count, int rows, int cols, gt_fp8_scaling sc,
                         gt_fp8_format f, int record, int which, int nan_expert) {
    size_t n = (size_t)rows * cols, all = (size_t)count * n;
    printf("    experts %d x %d x %d scaling %d format %d record %d which %d nan %d\n", count, rows,
           cols, (int)sc, (int)f, record, which, nan_expert);
    float *x = rand_vec(e, all, 1.0f);
    for (int k = 0; k < count; k++)
        for (size_t i = 0; i < n; i++)
            x[(size_t)k * n + i] = bf16_round(x[(size_t)k * n + i] * ldexpf(1.0f, k % 9 - 4));
    if (nan_expert >= 0) x[(size_t)nan_expert * n + n / 2] = NAN;
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    gt_fp8_meta *m0 = malloc((size_t)count * sizeof *m0), *hm = malloc((size_t)count * sizeof *hm);
    for (int k = 0; k < count; k++) {
        float scale = sc == GT_FP8_DELAYED ? 3.0f + (float)k : 1.0f;
        m0[k] = (gt_fp8_meta){scale, 1.0f / scale, sc == GT_FP8_DELAYED ? 0.125f * (float)k : 0.0f,
                              (int32_t)f};
    }
    gt_fp8_meta *cm = c_alloc(e, (size_t)count * sizeof *cm);
    gt_fp8_meta *gm = g_alloc(e, (size_t)count * sizeof *gm);
    memcpy(cm, m0, (size_t)count * sizeof *cm);
    gt_backend *g = e->gpu;
    g->ops->memcpy_h2d(g, e->gs, gm, m0, (size_t)count * sizeof *gm);
    float *cq = c_f32(e, NULL, all), *cqt = c_f32(e, NULL, all);
    float *csi = c_f32(e, NULL, 2 * (size_t)count), *gsi = g_f32(e, NULL, 2 * (size_t)count);
    float *hsi = calloc(2 * (size_t)count, sizeof *hsi);
    const void *gx = g_act(e, x, all);
    uint8_t *gq = g_alloc(e, all + GUARD), *gqt = g_alloc(e, all + GUARD);
    gt_fp8_cast_spec sp = {sc, f, 1, record, NULL};
    int wq = which & 1, wt = (which & 2) != 0;
    e->cpu->ops->fp8_cast_experts(e->cpu, e->cs, wq ? cq : NULL, wq ? csi : NULL, wt ? cqt : NULL,
                                  wt ? csi + count : NULL, x, count, rows, cols, sp, cm, cst);
    GPU_PLAN(e,
             g->ops->fp8_cast_experts(g, e->gs, wq ? gq : NULL, wq ? gsi : NULL, wt ? gqt : NULL,
                                      wt ? gsi + count : NULL, gx, count, rows, cols, sp, gm, gst));
    g->ops->fp8_cast_experts(g, e->gs, wq ? gq : NULL, wq ? gsi : NULL, wt ? gqt : NULL,
                             wt ? gsi + count : NULL, gx, count, rows, cols, sp, gm, gst);
    g_sync(e);
    g->ops->memcpy_d2h(g, e->gs, hm, gm, (size_t)count * sizeof *hm);
    g->ops->memcpy_d2h(g, e->gs, hsi, gsi, 2 * (size_t)count * sizeof *hsi);
    read_state(e, &hst, gst);
    if (wq) expect_codes(e, gq, 0, cq, all, f);
    if (wt) expect_codes(e, gqt, 0, cqt, all, f);
    if (wq) assert_memory_equal(hsi, csi, (size_t)count * sizeof *hsi);
    if (wt) assert_memory_equal(hsi + count, csi + count, (size_t)count * sizeof *hsi);
    for (int k = 0; k < count; k++)
        expect_meta(&hm[k], &cm[k]);
    assert_int_equal(hst.nan_flags, cst->nan_flags);
    if (nan_expert >= 0 && (record || sc == GT_FP8_TENSORWISE))
        assert_true(hst.nan_flags & GT_NAN_FP8);
    free(x), free(m0), free(hm), free(hsi);
    env_free_all(e);
}

/* The moe recipe's layouts (the forward's q only, or both, and the backward's qt only with the
 * scale the forward recorded), shapes off the tiles and off the 8-element chunks (every
 * expert's slice then unaligned: the scalar paths), one expert, and 64 experts (the amax pass's
 * blocks split among them) */
static void test_fp8_expert_weight_casts_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    const int shapes[][3] = {
        {5, 136, 264}, {3, 37, 129}, {1, 200, 96}, {64, 128, 256}, {4, 24, 520}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int c = shapes[i][0], r = shapes[i][1], k = shapes[i][2];
        for (int which = 1; which <= 3; which++) {
            experts_case(e, c, r, k, GT_FP8_TENSORWISE, GT_FP8_E4M3, 1, which, -1);
            experts_case(e, c, r, k, GT_FP8_DELAYED, GT_FP8_E4M3, 1, which, -1);
            experts_case(e, c, r, k, GT_FP8_DELAYED, GT_FP8_E5M2, 0, which, -1);
        }
    }
    experts_case(e, 5, 136, 264, GT_FP8_TENSORWISE, GT_FP8_E4M3, 1, 3, 2);
    experts_case(e, 5, 136, 264, GT_FP8_DELAYED, GT_FP8_E4M3, 1, 1, 4);
    experts_case(e, 3, 37, 129, GT_FP8_TENSORWISE, GT_FP8_E4M3, 0, 2, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fp8_casts_of_shapes_off_the_tiles_match_cpu_bitwise,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_casts_through_unaligned_pointers_match_cpu_bitwise,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_casts_of_special_values_match_cpu_bitwise,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_flat_casts_of_large_tensors_match_cpu_bitwise,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_expert_weight_casts_match_cpu_bitwise, gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
