/* The CUDA backend's blockwise fp8 ops (fp8_sc) against the CPU emulation: the casts bitwise
 * (codes, every inverse scale in cuBLASLt's layout, the NaN flag; 1 x 128 tiles and 128 x 128
 * blocks, plain, transposed and both at once, E4M3 and E5M2, ragged shapes, all-zero and
 * overflowing tiles), and cuBLASLt's block-scaled GEMMs (forward with a residual and with a bias,
 * data gradient with an E5M2 operand, weight gradient into fp32 accumulating) within fp32
 * summation-order error. The operands' magnitudes change by powers of two from tile to tile,
 * so a scale read from the wrong place is off by O(1). Skips without a GPU. */
#include "gpu_fixture.h"

static gt_fp8_cast_spec block_spec(gt_fp8_format f, int tile_rows) {
    return (gt_fp8_cast_spec){GT_FP8_BLOCKWISE, f, tile_rows, 1, NULL};
}

/* x [rows, cols] in [-1, 1] times 2^(k) with k changing every 128 rows and columns and from
 * row to row, so every 1 x 128 tile and 128 x 128 block has a scale of its own (bf16-exact) */
static float *tiled_vec(gpu_env *e, int rows, int cols) {
    float *x = rand_vec(e, (size_t)rows * cols, 1.0f);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            x[(size_t)i * cols + j] *= ldexpf(1.0f, (i % 5) - 2 + 3 * (j / 128) - 2 * (i / 128));
    return x;
}

/* the two floats' bits are equal (NaN codes included) */
static int same_bits(float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    return ua == ub;
}

static void read_codes(gpu_env *e, float *got, const uint8_t *gq, size_t n, gt_fp8_format f) {
    uint8_t *hq = malloc(n);
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, hq, gq, n);
    for (size_t i = 0; i < n; i++)
        got[i] = gt_fp8_to_float(hq[i], f);
    free(hq);
}

/* One blockwise cast of x on both backends; codes, the scales (padding excluded: never
 * written, never read) and the flags compared bitwise */
static void cast_case(gpu_env *e, const float *x, int rows, int cols, int transpose, int tile_rows,
                      gt_fp8_format f) {
    size_t n = (size_t)rows * cols;
    int qr = transpose ? cols : rows, qc = transpose ? rows : cols;
    size_t ns = gt_fp8_scale_count(qr, qc, tile_rows);
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    float *cq = c_f32(e, NULL, n), *csi = c_f32(e, NULL, ns), *got = malloc(n * sizeof *got);
    float *hsi = malloc(ns * sizeof *hsi);
    void *gx = g_act(e, x, n);
    uint8_t *gq = g_alloc(e, n);
    float *gsi = g_f32(e, NULL, ns);
    gt_fp8_cast_spec sp = block_spec(f, tile_rows);
    gt_backend *g = e->gpu;
    e->cpu->ops->fp8_cast(e->cpu, e->cs, cq, csi, x, rows, cols, transpose, sp, NULL, cst);
    GPU_PLAN(e, g->ops->fp8_cast(g, e->gs, gq, gsi, gx, rows, cols, transpose, sp, NULL, gst));
    g->ops->fp8_cast(g, e->gs, gq, gsi, gx, rows, cols, transpose, sp, NULL, gst);
    g_read_f32(e, hsi, gsi, ns);
    read_state(e, &hst, gst);
    printf("    blockwise fp8_cast %d x %d transpose %d tile rows %d format %d\n", rows, cols,
           transpose, tile_rows, (int)f);
    read_codes(e, got, gq, n, f);
    assert_memory_equal(got, cq, n * sizeof *got);
    int ntc = (qc + GT_FP8_TILE - 1) / GT_FP8_TILE;
    for (int r = 0; r < qr; r += tile_rows)
        for (int t = 0; t < ntc; t++) {
            size_t i = gt_fp8_scale_index(qr, qc, tile_rows, r, t);
            if (!same_bits(hsi[i], csi[i]))
                fail_msg("scale of tile (row %d, tile %d) at %zu: gpu %.9g cpu %.9g", r, t, i,
                         (double)hsi[i], (double)csi[i]);
        }
    assert_int_equal(hst.nan_flags, cst->nan_flags);
    free(got), free(hsi);
}

/* The pair (both layouts from one reading of x) on both backends, compared bitwise */
static void pair_case(gpu_env *e, const float *x, int rows, int cols, int tile_rows,
                      gt_fp8_format f) {
    size_t n = (size_t)rows * cols;
    size_t ns = gt_fp8_scale_count(rows, cols, tile_rows);
    size_t nst = gt_fp8_scale_count(cols, rows, tile_rows);
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    float *cq = c_f32(e, NULL, n), *cqt = c_f32(e, NULL, n);
    float *csi = c_f32(e, NULL, ns), *csit = c_f32(e, NULL, nst);
    float *got = malloc(n * sizeof *got), *hsi = malloc(ns * sizeof *hsi);
    float *hsit = malloc(nst * sizeof *hsit);
    void *gx = g_act(e, x, n);
    uint8_t *gq = g_alloc(e, n), *gqt = g_alloc(e, n);
    float *gsi = g_f32(e, NULL, ns), *gsit = g_f32(e, NULL, nst);
    gt_fp8_cast_spec sp = block_spec(f, tile_rows);
    gt_backend *g = e->gpu;
    e->cpu->ops->fp8_cast_pair(e->cpu, e->cs, cq, csi, cqt, csit, x, rows, cols, sp, NULL, cst);
    GPU_PLAN(e, g->ops->fp8_cast_pair(g, e->gs, gq, gsi, gqt, gsit, gx, rows, cols, sp, NULL, gst));
    g->ops->fp8_cast_pair(g, e->gs, gq, gsi, gqt, gsit, gx, rows, cols, sp, NULL, gst);
    g_read_f32(e, hsi, gsi, ns);
    g_read_f32(e, hsit, gsit, nst);
    read_state(e, &hst, gst);
    printf("    blockwise fp8_cast_pair %d x %d tile rows %d format %d\n", rows, cols, tile_rows,
           (int)f);
    read_codes(e, got, gq, n, f);
    assert_memory_equal(got, cq, n * sizeof *got);
    read_codes(e, got, gqt, n, f);
    assert_memory_equal(got, cqt, n * sizeof *got);
    for (int form = 0; form < 2; form++) {
        int qr = form ? cols : rows, qc = form ? rows : cols;
        const float *h = form ? hsit : hsi, *c = form ? csit : csi;
        for (int r = 0; r < qr; r += tile_rows)
            for (int t = 0; t < (qc + GT_FP8_TILE - 1) / GT_FP8_TILE; t++) {
                size_t i = gt_fp8_scale_index(qr, qc, tile_rows, r, t);
                if (!same_bits(h[i], c[i]))
                    fail_msg("pair form %d scale (row %d, tile %d): gpu %.9g cpu %.9g", form, r, t,
                             (double)h[i], (double)c[i]);
            }
    }
    assert_int_equal(hst.nan_flags, cst->nan_flags);
    free(got), free(hsi), free(hsit);
}

static void test_blockwise_casts_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    /* whole tiles, ragged edges (partial 128-tiles, columns not multiples of 8), one row */
    const int shapes[][2] = {{256, 384}, {300, 200}, {130, 37}, {1, 300}, {64, 129}};
    gt_fp8_format fmts[] = {GT_FP8_E4M3, GT_FP8_E5M2};
    for (int s = 0; s < 5; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        float *x = tiled_vec(e, rows, cols);
        for (int f = 0; f < 2; f++)
            for (int t = 0; t < 2; t++) {
                cast_case(e, x, rows, cols, t, 1, fmts[f]);
                cast_case(e, x, rows, cols, t, GT_FP8_TILE, fmts[f]);
                pair_case(e, x, rows, cols, t ? GT_FP8_TILE : 1, fmts[f]);
            }
        free(x);
    }
}

/* An all-zero tile keeps scale 1; one of tiny values (fp8_max / amax past FLT_MAX) keeps 1 and
 * sets the flag; a NaN sets it too, on both backends alike */
static void test_blockwise_cast_edge_tiles_match_cpu(void **state) {
    gpu_env *e = *state;
    int rows = 4, cols = 256;
    float *x = tiled_vec(e, rows, cols);
    for (int j = 0; j < 128; j++)
        x[j] = 0.0f; /* row 0, tile 0 */
    for (int t = 0; t < 2; t++)
        for (int tr = 1; tr < 3; tr++)
            cast_case(e, x, rows, cols, t, tr == 1 ? 1 : GT_FP8_TILE, GT_FP8_E4M3);
    for (int j = 128; j < 256; j++)
        x[j] = j % 2 ? ldexpf(1.0f, -133) : 0.0f; /* bf16's smallest subnormal */
    cast_case(e, x, rows, cols, 0, 1, GT_FP8_E4M3);
    cast_case(e, x, rows, cols, 1, GT_FP8_TILE, GT_FP8_E4M3);
    x[3 * cols + 7] = NAN;
    cast_case(e, x, rows, cols, 0, 1, GT_FP8_E5M2);
    cast_case(e, x, rows, cols, 1, 1, GT_FP8_E4M3);
    free(x);
}

/* Hopper's fp8 tensor cores add a K tile's products in an accumulator narrower than fp32 (about
 * 14 bits, DeepSeek-V3 report); the block-scaled kernels promote each 128-wide tile to fp32,
 * scale it and add it, the CPU sums each tile in fp32 in a fixed order: the difference is
 * around 2^-13 of a tile's sum of |products|, a few 1e-5 relative L2 on these sums of random
 * signs. A scale from the wrong tile is off by a power of two. bf16 outputs round to 2^-9. */
#define TOL_BLOCK_F32 5e-4

/* which GEMM of a linear layer: the forward (a tiles x w blocks, bf16 out, optional residual
 * or bias), the data gradient (the same with an E5M2 a), the weight gradient (tiles x tiles,
 * fp32 out accumulating) */
enum { FWD, FWD_BIAS, DGRAD_E5M2, WGRAD, WGRAD_E5M2 };

/* a and w cast blockwise on the CPU (their scales in the shared layout), the codes and scales
 * uploaded; both backends multiply them */
static void gemm_case(gpu_env *e, int which, int M, int N, int K) {
    int f32 = which == WGRAD || which == WGRAD_E5M2;
    gt_fp8_format af = which == DGRAD_E5M2 || which == WGRAD_E5M2 ? GT_FP8_E5M2 : GT_FP8_E4M3;
    int wtile = f32 ? 1 : GT_FP8_TILE;
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    float *a = tiled_vec(e, M, K), *w = tiled_vec(e, N, K);
    size_t nsa = gt_fp8_scale_count(M, K, 1), nsw = gt_fp8_scale_count(N, K, wtile);
    float *qa = c_f32(e, NULL, (size_t)M * K), *qw = c_f32(e, NULL, (size_t)N * K);
    float *sa = c_f32(e, NULL, nsa), *sw = c_f32(e, NULL, nsw);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, qa, sa, a, M, K, 0, block_spec(af, 1), NULL, cst);
    e->cpu->ops->fp8_cast(e->cpu, e->cs, qw, sw, w, N, K, 0, block_spec(GT_FP8_E4M3, wtile), NULL,
                          cst);
    uint8_t *ha = malloc((size_t)M * K), *hw = malloc((size_t)N * K);
    for (size_t i = 0; i < (size_t)M * K; i++)
        ha[i] = gt_fp8_from_float(qa[i], af);
    for (size_t i = 0; i < (size_t)N * K; i++)
        hw[i] = gt_fp8_from_float(qw[i], GT_FP8_E4M3);
    uint8_t *ga = g_alloc(e, (size_t)M * K), *gw = g_alloc(e, (size_t)N * K);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, ga, ha, (size_t)M * K);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gw, hw, (size_t)N * K);
    float *gsa = g_f32(e, sa, nsa), *gsw = g_f32(e, sw, nsw);
    size_t no = (size_t)M * N;
    float *res = rand_vec(e, no, 64.0f), *got = malloc(no * sizeof *got);
    float *bias = rand_vec(e, (size_t)N, 64.0f);
    float *c_out = c_f32(e, f32 ? res : NULL, no); /* fp32: the value accumulated into */
    void *g_out = f32 ? (void *)g_f32(e, res, no) : g_act(e, NULL, no);
    const void *c_res = which == FWD ? res : NULL, *c_bias = which == FWD_BIAS ? bias : NULL;
    const void *g_res = which == FWD ? g_act(e, res, no) : NULL;
    const void *g_bias = which == FWD_BIAS ? g_act(e, bias, (size_t)N) : NULL;
    int flags = f32 ? GT_FP8_OUT_FP32 : which == DGRAD_E5M2 ? 0 : GT_FP8_FAST_ACCUM;
    gt_fp8_operand ca = {qa, sa, 1, af}, cw = {qw, sw, wtile, GT_FP8_E4M3};
    gt_fp8_operand gao = {ga, gsa, 1, af}, gwo = {gw, gsw, wtile, GT_FP8_E4M3};
    e->cpu->ops->fp8_gemm(e->cpu, e->cs, c_out, flags, f32, ca, cw, GT_FP8_BLOCKWISE, c_bias, c_res,
                          M, N, K);
    GPU_PLAN(e, e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, flags, f32, gao, gwo, GT_FP8_BLOCKWISE,
                                      g_bias, g_res, M, N, K));
    e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, flags, f32, gao, gwo, GT_FP8_BLOCKWISE, g_bias,
                          g_res, M, N, K);
    if (f32)
        g_read_f32(e, got, g_out, no);
    else
        g_read_act(e, got, g_out, no);
    static const char *const names[] = {"forward + residual", "forward + bias",
                                        "data gradient e5m2", "weight gradient fp32 (+=)",
                                        "weight gradient fp32 (+=) e5m2"};
    char what[128];
    snprintf(what, sizeof what, "blockwise %s %dx%dx%d", names[which], M, N, K);
    EXPECT_CLOSE(what, got, c_out, no, f32 ? TOL_BLOCK_F32 : TOL_BF16);
    free(a), free(w), free(ha), free(hw), free(res), free(bias), free(got);
}

static void test_blockwise_gemms_match_cpu(void **state) {
    gpu_env *e = *state;
    gemm_case(e, FWD, 256, 384, 512);
    gemm_case(e, FWD, 64, 192, 768); /* N off the 128-blocks, K tiles not a multiple of 4 */
    gemm_case(e, FWD_BIAS, 128, 256, 256);
    gemm_case(e, DGRAD_E5M2, 256, 512, 384);
    gemm_case(e, WGRAD, 384, 256, 512);
    gemm_case(e, WGRAD_E5M2, 192, 100, 256); /* rows of the tiled w a multiple of 4 only */
}

/* Shapes cuBLASLt's block-scaled GEMMs cannot take are refused by name, not run */
static void test_blockwise_gemm_off_the_tiles_is_refused(void **state) {
    gpu_env *e = *state;
    uint8_t *ga = g_alloc(e, 64 * 200), *gw = g_alloc(e, 64 * 200);
    float *gs = g_f32(e, NULL, 1024);
    void *out = g_act(e, NULL, 64 * 64);
    gt_fp8_operand a = {ga, gs, 1, GT_FP8_E4M3}, w = {gw, gs, GT_FP8_TILE, GT_FP8_E4M3};
    gt_error err = {0};
    e->gpu->planning = 1;
    e->gpu->ops->fp8_gemm(e->gpu, e->gs, out, 0, 0, a, w, GT_FP8_BLOCKWISE, NULL, NULL, 64, 64,
                          200);
    int rc = e->gpu->ops->plan_finish(e->gpu, &err);
    e->gpu->planning = 0;
    printf("    refused: %s\n", err.msg);
    assert_int_equal(rc, GT_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "multiple of 128"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_blockwise_casts_match_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_blockwise_cast_edge_tiles_match_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_blockwise_gemms_match_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_blockwise_gemm_off_the_tiles_is_refused, gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
