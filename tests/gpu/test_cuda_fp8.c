/* The CUDA backend's fp8 ops against the CPU emulation: casts bitwise (codes, inverse scales,
 * the scaling state; per tensor and delayed, E4M3 and E5M2, plain, transposed through the
 * tiles and both layouts at once, on ragged shapes, with a recorded scale), the NaN flag,
 * delayed scaling's update bitwise, and cuBLASLt's fp8 GEMMs (bf16 out with a residual, fp32
 * out accumulating, an E5M2 operand, the forward's fast accumulation) within fp32
 * summation-order error; and the producers that take their output's amax for the cast (the
 * forward's norm and SwiGLU, the backward's norm, SwiGLU and rope: the amax the bits of the
 * stored output's max, the casts that take it bitwise those of their own amax pass and of the
 * CPU's cast of the same values). */
#include "gpu_fixture.h"

#define R 64
#define C 48

static gt_fp8_cast_spec spec(gt_fp8_scaling sc, gt_fp8_format f) {
    return (gt_fp8_cast_spec){sc, f, 1, 1, NULL};
}

static gt_fp8_meta meta_of(float scale, gt_fp8_format f) {
    return (gt_fp8_meta){scale, 1.0f / scale, 0.0f, (int32_t)f};
}

/* The GPU's codes of an [n] fp8 tensor decoded */
static void read_codes(gpu_env *e, float *got, const uint8_t *gq, size_t n, gt_fp8_format f) {
    uint8_t *hq = malloc(n);
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, hq, gq, n);
    for (size_t i = 0; i < n; i++)
        got[i] = gt_fp8_to_float(hq[i], f);
    free(hq);
}

/* A cast of x [rows, cols] on both backends, compared bitwise (codes, inverse scales, meta,
 * flags): mode 0 plain, 1 transposed, 2 the pair (both layouts in one pass). record 0 under
 * delayed scaling is the cast with a recorded scale (the backward's x^T). */
static void cast_case(gpu_env *e, gt_fp8_scaling sc, gt_fp8_format f, int mode, int rows, int cols,
                      int record) {
    size_t n = (size_t)rows * cols;
    float *x = rand_vec(e, n, 5.0f), *got = malloc(n * sizeof *got);
    float *cq = c_f32(e, NULL, n), *cqt = c_f32(e, NULL, n);
    gt_step_state init = default_state(), *cst, *gst, hst;
    make_states(e, &init, &cst, &gst);
    gt_fp8_meta m0 = meta_of(sc == GT_FP8_DELAYED ? 24.0f : 1.0f, f), hm;
    m0.amax = sc == GT_FP8_DELAYED ? 0.75f : 0.0f; /* a delayed amax only grows */
    gt_fp8_meta *cm = c_alloc(e, sizeof *cm), *gm = g_alloc(e, sizeof *gm);
    *cm = m0;
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, gm, &m0, sizeof m0);
    float *csi = c_f32(e, NULL, 2), *gsi = g_f32(e, NULL, 2), hsi[2];
    void *gx = g_act(e, x, n);
    uint8_t *gq = g_alloc(e, n), *gqt = g_alloc(e, n);
    gt_fp8_cast_spec sp = {sc, f, 1, record, NULL};
    gt_backend *g = e->gpu;
    if (mode == 2) {
        e->cpu->ops->fp8_cast_pair(e->cpu, e->cs, cq, csi, cqt, csi + 1, x, rows, cols, sp, cm,
                                   cst);
        GPU_PLAN(
            e, g->ops->fp8_cast_pair(g, e->gs, gq, gsi, gqt, gsi + 1, gx, rows, cols, sp, gm, gst));
        g->ops->fp8_cast_pair(g, e->gs, gq, gsi, gqt, gsi + 1, gx, rows, cols, sp, gm, gst);
    } else {
        e->cpu->ops->fp8_cast(e->cpu, e->cs, cq, csi, x, rows, cols, mode, sp, cm, cst);
        GPU_PLAN(e, g->ops->fp8_cast(g, e->gs, gq, gsi, gx, rows, cols, mode, sp, gm, gst));
        g->ops->fp8_cast(g, e->gs, gq, gsi, gx, rows, cols, mode, sp, gm, gst);
    }
    g->ops->memcpy_d2h(g, e->gs, &hm, gm, sizeof hm);
    g->ops->memcpy_d2h(g, e->gs, hsi, gsi, sizeof hsi);
    read_state(e, &hst, gst);
    printf("    fp8_cast scaling %d format %d mode %d %d x %d record %d\n", (int)sc, (int)f, mode,
           rows, cols, record);
    read_codes(e, got, gq, n, f);
    assert_memory_equal(got, cq, n * sizeof *got);
    if (mode == 2) {
        read_codes(e, got, gqt, n, f);
        assert_memory_equal(got, cqt, n * sizeof *got);
    }
    assert_memory_equal(hsi, csi, (mode == 2 ? 2 : 1) * sizeof *hsi);
    assert_memory_equal(&hm, cm, sizeof hm);
    assert_int_equal(hst.nan_flags, cst->nan_flags);
    free(x), free(got);
}

static void test_fp8_casts_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    gt_fp8_scaling kinds[] = {GT_FP8_TENSORWISE, GT_FP8_DELAYED};
    gt_fp8_format fmts[] = {GT_FP8_E4M3, GT_FP8_E5M2};
    for (int k = 0; k < 2; k++)
        for (int f = 0; f < 2; f++)
            for (int t = 0; t < 2; t++)
                cast_case(e, kinds[k], fmts[f], t, R, C, 1);
}

/* Shapes off the kernels' tiles and vectors: several 64 x 64 tiles with partial edges, rows
 * and columns not multiples of 8 (the scalar paths), a single row */
static void test_fp8_casts_of_ragged_shapes_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    const int shapes[][2] = {{300, 200}, {67, 45}, {1, 37}, {130, 8}, {8, 129}};
    for (int i = 0; i < 5; i++)
        for (int t = 0; t < 3; t++) {
            cast_case(e, GT_FP8_TENSORWISE, GT_FP8_E4M3, t, shapes[i][0], shapes[i][1], 1);
            cast_case(e, GT_FP8_DELAYED, GT_FP8_E5M2, t, shapes[i][0], shapes[i][1], 1);
        }
}

/* The weight copies and the output gradient in both layouts at once; the backward's x^T with
 * the recorded scale (delayed, record 0) */
static void test_fp8_cast_pairs_and_recorded_scale_casts_match_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    gt_fp8_format fmts[] = {GT_FP8_E4M3, GT_FP8_E5M2};
    for (int f = 0; f < 2; f++)
        for (int record = 0; record < 2; record++) {
            cast_case(e, GT_FP8_TENSORWISE, fmts[f], 2, 192, 320, record);
            cast_case(e, GT_FP8_DELAYED, fmts[f], 2, 192, 320, record);
            cast_case(e, GT_FP8_DELAYED, fmts[f], 1, 320, 192, record);
            cast_case(e, GT_FP8_DELAYED, fmts[f], 0, 320, 192, record);
        }
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
static void gemm_case(gpu_env *e, int M, int N, int K, int flags, gt_fp8_format af) {
    int out_fp32 = flags & GT_FP8_OUT_FP32;
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
    e->cpu->ops->fp8_gemm(e->cpu, e->cs, c_out, flags, out_fp32, ca, cw, GT_FP8_TENSORWISE, NULL,
                          out_fp32 ? NULL : res, M, N, K);
    GPU_PLAN(e, e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, flags, out_fp32, gao, gwo,
                                      GT_FP8_TENSORWISE, NULL, g_res, M, N, K));
    e->gpu->ops->fp8_gemm(e->gpu, e->gs, g_out, flags, out_fp32, gao, gwo, GT_FP8_TENSORWISE, NULL,
                          g_res, M, N, K);
    if (out_fp32)
        g_read_f32(e, got, g_out, no);
    else
        g_read_act(e, got, g_out, no);
    char what[96];
    snprintf(what, sizeof what, "fp8_gemm %dx%dx%d %s%s%s", M, N, K,
             out_fp32 ? "fp32 (+=)" : "bf16", af == GT_FP8_E5M2 ? " e5m2" : "",
             flags & GT_FP8_FAST_ACCUM ? " fast accumulation" : "");
    EXPECT_CLOSE(what, got, c_out, no, out_fp32 ? TOL_FP8_F32 : TOL_BF16);
    free(a), free(w), free(ha), free(hw), free(res), free(got);
}

static void test_fp8_gemms_match_cpu(void **state) {
    gpu_env *e = *state;
    gemm_case(e, 64, 48, 96, 0, GT_FP8_E4M3);
    gemm_case(e, 64, 48, 96, 0, GT_FP8_E5M2);
    gemm_case(e, 128, 256, 512, 1, GT_FP8_E4M3);
    gemm_case(e, 96, 160, 64, 1, GT_FP8_E5M2);
    /* the forward's fast accumulation: a bf16 result within bf16's tolerance still */
    gemm_case(e, 64, 48, 96, GT_FP8_FAST_ACCUM, GT_FP8_E4M3);
    gemm_case(e, 256, 128, 1024, GT_FP8_FAST_ACCUM, GT_FP8_E4M3);
}

/* ---- the amax the producers take for the cast of their output (rmsnorm_fwd_amax,
 * swiglu_fwd_amax; gt_fp8_cast_spec.amax_bits) ---- */

static uint32_t host_amax_bits(const float *x, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++)
        m = gt_fp8_amax_bits(x[i]) > m ? gt_fp8_amax_bits(x[i]) : m;
    return m;
}

static float float_of_bits(uint32_t u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* The GPU's codes at gq decoded against the CPU's values, NaN's sign aside (the GPU's satfinite
 * conversion makes every NaN 0x7f, the CPU keeps the sign) */
static void expect_codes_like_cpu(gpu_env *e, const uint8_t *gq, const float *want, size_t n,
                                  gt_fp8_format f) {
    float *got = malloc(n * sizeof *got);
    read_codes(e, got, gq, n, f);
    for (size_t i = 0; i < n; i++)
        if (isnan(want[i]) && isnan(got[i])) got[i] = want[i];
    assert_memory_equal(got, want, n * sizeof *got);
    free(got);
}

/* The GPU's meta as the CPU's, bitwise, but for a NaN amax's payload (the GPU's is its bf16
 * NaN's, the CPU's the canonical NaN its amax returns) */
static void expect_meta_like_cpu(const gt_fp8_meta *got, const gt_fp8_meta *want) {
    gt_fp8_meta g = *got;
    if (isnan(want->amax) && isnan(g.amax)) g.amax = want->amax;
    assert_memory_equal(&g, want, sizeof g);
}

/* The GPU's cast of gout [rows, cols] (its producer's output; hout the same values downloaded)
 * with the amax its producer took (gamax) against the cast's own amax pass over gout, bitwise
 * (codes, inverse scales, meta, flags), and both against the CPU's cast of hout: mode 0 plain,
 * 1 transposed, 2 the pair */
static void given_amax_cast_case(gpu_env *e, const void *gout, const float *hout,
                                 const uint32_t *gamax, int rows, int cols, gt_fp8_format f,
                                 int mode) {
    size_t n = (size_t)rows * cols;
    gt_backend *g = e->gpu;
    gt_step_state init = default_state(), *cst, *gst[2], hst[2];
    make_states(e, &init, &cst, &gst[0]);
    make_states(e, &init, &cst, &gst[1]);
    gt_fp8_meta m0 = meta_of(2.0f, f), hm[2];
    gt_fp8_meta *cm = c_alloc(e, sizeof *cm);
    *cm = m0;
    float *cq = c_f32(e, NULL, n), *cqt = c_f32(e, NULL, n), *csi = c_f32(e, NULL, 2);
    gt_fp8_cast_spec csp = {GT_FP8_TENSORWISE, f, 1, 1, NULL};
    if (mode == 2)
        e->cpu->ops->fp8_cast_pair(e->cpu, e->cs, cq, csi, cqt, csi + 1, hout, rows, cols, csp, cm,
                                   cst);
    else
        e->cpu->ops->fp8_cast(e->cpu, e->cs, mode ? cqt : cq, csi, hout, rows, cols, mode, csp, cm,
                              cst);
    uint8_t *gq[2], *gqt[2];
    float hsi[2][2];
    for (int given = 0; given < 2; given++) {
        gt_fp8_meta *gm = g_alloc(e, sizeof *gm);
        g->ops->memcpy_h2d(g, e->gs, gm, &m0, sizeof m0);
        float *gsi = g_f32(e, NULL, 2);
        gq[given] = g_alloc(e, n), gqt[given] = g_alloc(e, n);
        gt_fp8_cast_spec sp = {GT_FP8_TENSORWISE, f, 1, 1, given ? gamax : NULL};
        gt_step_state *st = gst[given];
        if (mode == 2) {
            GPU_PLAN(e, g->ops->fp8_cast_pair(g, e->gs, gq[given], gsi, gqt[given], gsi + 1, gout,
                                              rows, cols, sp, gm, st));
            g->ops->fp8_cast_pair(g, e->gs, gq[given], gsi, gqt[given], gsi + 1, gout, rows, cols,
                                  sp, gm, st);
        } else {
            uint8_t *out = mode ? gqt[given] : gq[given];
            GPU_PLAN(e, g->ops->fp8_cast(g, e->gs, out, gsi, gout, rows, cols, mode, sp, gm, st));
            g->ops->fp8_cast(g, e->gs, out, gsi, gout, rows, cols, mode, sp, gm, st);
        }
        g->ops->memcpy_d2h(g, e->gs, &hm[given], gm, sizeof *gm);
        g->ops->memcpy_d2h(g, e->gs, hsi[given], gsi, sizeof hsi[given]);
        read_state(e, &hst[given], st);
    }
    printf("    cast of the producer's output: format %d mode %d %d x %d, amax 0x%08x\n", (int)f,
           mode, rows, cols, (unsigned)host_amax_bits(hout, n));
    /* the producer's amax against the cast's own pass: the very same bytes and state */
    uint8_t *h0 = malloc(n), *h1 = malloc(n);
    for (int t = 0; t < 2; t++) {
        if ((t == 0 && mode == 1) || (t == 1 && mode == 0)) continue;
        g->ops->memcpy_d2h(g, e->gs, h0, t ? gqt[0] : gq[0], n);
        g->ops->memcpy_d2h(g, e->gs, h1, t ? gqt[1] : gq[1], n);
        g_sync(e);
        assert_memory_equal(h1, h0, n);
        expect_codes_like_cpu(e, t ? gqt[1] : gq[1], t ? cqt : cq, n, f);
    }
    free(h0), free(h1);
    assert_memory_equal(hsi[1], hsi[0], (mode == 2 ? 2 : 1) * sizeof(float));
    assert_memory_equal(&hm[1], &hm[0], sizeof hm[0]);
    assert_int_equal(hst[1].nan_flags, hst[0].nan_flags);
    /* and the CPU's cast of the same values */
    assert_memory_equal(hsi[1], csi, (mode == 2 ? 2 : 1) * sizeof(float));
    expect_meta_like_cpu(&hm[1], cm);
    assert_int_equal(hst[1].nan_flags, cst->nan_flags);
}

/* The producer's amax on the GPU: its output is the plain op's, bitwise; its amax is the bits
 * of that output's max |x| (what the cast's own pass reads) and the CPU producer's amax within
 * bf16 rounding; the casts that take it give what their own pass gives */
static void expect_producer_amax(gpu_env *e, const void *gout, const void *gref,
                                 const uint32_t *gamax, const float *cout, uint32_t camax, int rows,
                                 int cols, const char *what) {
    size_t n = (size_t)rows * cols;
    float *hout = malloc(n * sizeof *hout), *href = malloc(n * sizeof *href);
    g_read_act(e, hout, gout, n);
    g_read_act(e, href, gref, n);
    assert_memory_equal(hout, href, n * sizeof *hout);
    uint32_t got;
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, &got, gamax, sizeof got);
    g_sync(e);
    assert_int_equal(got, host_amax_bits(hout, n));
    float ga = float_of_bits(got), ca = float_of_bits(camax);
    printf("    %s %d x %d: amax gpu %.9g cpu %.9g\n", what, rows, cols, (double)ga, (double)ca);
    if (isnan(ca)) {
        assert_true(isnan(ga));
    } else {
        assert_true(fabsf(ga - ca) <= ca / 128.0f); /* bf16 keeps 8 significant bits */
        EXPECT_CLOSE(what, hout, cout, n, TOL_BF16);
    }
    for (int mode = 0; mode < 3; mode++) {
        given_amax_cast_case(e, gout, hout, gamax, rows, cols, GT_FP8_E4M3, mode);
        given_amax_cast_case(e, gout, hout, gamax, rows, cols, GT_FP8_E5M2, mode);
    }
    free(hout), free(href);
}

/* nan_row >= 0: a NaN in that row of the input (the row's output is NaN, the flag goes up) */
static void norm_amax_case(gpu_env *e, int N, int d, int nan_row) {
    size_t n = (size_t)N * d;
    float *x = rand_vec(e, n, 3.0f), *w = rand_vec(e, (size_t)d, 1.5f);
    if (nan_row >= 0) x[(size_t)nan_row * d + 3] = NAN;
    void *gx = g_act(e, x, n), *gw = g_act(e, w, (size_t)d);
    void *gout = g_act(e, NULL, n), *gref = g_act(e, NULL, n);
    float *grstd = g_f32(e, NULL, (size_t)N), *grstd_ref = g_f32(e, NULL, (size_t)N);
    uint32_t *gamax = g_alloc(e, sizeof *gamax); /* zeroed */
    e->gpu->ops->rmsnorm_fwd_amax(e->gpu, e->gs, gout, grstd, gx, gw, N, d, 1e-5f, gamax);
    e->gpu->ops->rmsnorm_fwd(e->gpu, e->gs, gref, grstd_ref, gx, gw, N, d, 1e-5f);
    float *cout = c_f32(e, NULL, n), *crstd = c_f32(e, NULL, (size_t)N);
    uint32_t *camax = c_alloc(e, sizeof *camax);
    *camax = 0;
    e->cpu->ops->rmsnorm_fwd_amax(e->cpu, e->cs, cout, crstd, x, w, N, d, 1e-5f, camax);
    expect_producer_amax(e, gout, gref, gamax, cout, *camax, N, d, "rmsnorm_fwd_amax");
    free(x), free(w);
    env_free_all(e);
}

static void swiglu_amax_case(gpu_env *e, int N, int f, int nan_at) {
    size_t n = (size_t)N * f;
    float *gu = rand_vec(e, 2 * n, 4.0f);
    if (nan_at >= 0) gu[nan_at] = NAN;
    void *ggu = g_act(e, gu, 2 * n), *gout = g_act(e, NULL, n), *gref = g_act(e, NULL, n);
    uint32_t *gamax = g_alloc(e, sizeof *gamax);
    e->gpu->ops->swiglu_fwd_amax(e->gpu, e->gs, gout, ggu, N, f, gamax);
    e->gpu->ops->swiglu_fwd(e->gpu, e->gs, gref, ggu, N, f);
    float *cout = c_f32(e, NULL, n);
    uint32_t *camax = c_alloc(e, sizeof *camax);
    *camax = 0;
    e->cpu->ops->swiglu_fwd_amax(e->cpu, e->cs, cout, gu, N, f, camax);
    expect_producer_amax(e, gout, gref, gamax, cout, *camax, N, f, "swiglu_fwd_amax");
    free(gu);
    env_free_all(e);
}

/* The backward's producers (rmsnorm_bwd_part_amax: the residual gradient over din, the o and
 * down projections' output gradient; swiglu_bwd_amax: gate/up's), as the forward's */
static void norm_bwd_amax_case(gpu_env *e, int N, int d, int nan_row) {
    size_t n = (size_t)N * d, np = (size_t)gt_rmsnorm_parts(N) * d;
    float *x = rand_vec(e, n, 3.0f), *w = rand_vec(e, (size_t)d, 1.5f);
    float *dy = rand_vec(e, n, 1.0f), *din = rand_vec(e, n, 0.5f);
    if (nan_row >= 0) dy[(size_t)nan_row * d + 3] = NAN;
    void *gx = g_act(e, x, n), *gw = g_act(e, w, (size_t)d), *gdy = g_act(e, dy, n);
    void *gdin = g_act(e, din, n), *gout = g_act(e, NULL, n), *gref = g_act(e, NULL, n);
    void *gln = g_act(e, NULL, n);
    float *grstd = g_f32(e, NULL, (size_t)N), *gpart = g_f32(e, NULL, np);
    float *gpart_ref = g_f32(e, NULL, np);
    uint32_t *gamax = g_alloc(e, sizeof *gamax); /* zeroed */
    gt_backend *g = e->gpu;
    g->ops->rmsnorm_fwd(g, e->gs, gln, grstd, gx, gw, N, d, 1e-5f);
    g->ops->rmsnorm_bwd_part_amax(g, e->gs, gout, gdin, gpart, gdy, gx, gw, grstd, N, d, gamax);
    g->ops->rmsnorm_bwd_part(g, e->gs, gref, gdin, gpart_ref, gdy, gx, gw, grstd, N, d);
    float *hp = malloc(np * sizeof *hp), *hp_ref = malloc(np * sizeof *hp_ref);
    g->ops->memcpy_d2h(g, e->gs, hp, gpart, np * sizeof *hp);
    g->ops->memcpy_d2h(g, e->gs, hp_ref, gpart_ref, np * sizeof *hp);
    g_sync(e);
    assert_memory_equal(hp, hp_ref, np * sizeof *hp); /* the weight gradient's parts too */
    float *cln = c_f32(e, NULL, n), *crstd = c_f32(e, NULL, (size_t)N);
    float *cout = c_f32(e, NULL, n), *cpart = c_f32(e, NULL, np);
    uint32_t *camax = c_alloc(e, sizeof *camax);
    *camax = 0;
    e->cpu->ops->rmsnorm_fwd(e->cpu, e->cs, cln, crstd, x, w, N, d, 1e-5f);
    e->cpu->ops->rmsnorm_bwd_part_amax(e->cpu, e->cs, cout, din, cpart, dy, x, w, crstd, N, d,
                                       camax);
    expect_producer_amax(e, gout, gref, gamax, cout, *camax, N, d, "rmsnorm_bwd_part_amax");
    free(x), free(w), free(dy), free(din), free(hp), free(hp_ref);
    env_free_all(e);
}

static void swiglu_bwd_amax_case(gpu_env *e, int N, int f, int nan_at) {
    size_t n = (size_t)N * f;
    float *gu = rand_vec(e, 2 * n, 4.0f), *dh = rand_vec(e, n, 2.0f);
    if (nan_at >= 0) dh[nan_at] = NAN;
    void *ggu = g_act(e, gu, 2 * n), *gdh = g_act(e, dh, n);
    void *gout = g_act(e, NULL, 2 * n), *gref = g_act(e, NULL, 2 * n);
    uint32_t *gamax = g_alloc(e, sizeof *gamax);
    e->gpu->ops->swiglu_bwd_amax(e->gpu, e->gs, gout, gdh, ggu, N, f, gamax);
    e->gpu->ops->swiglu_bwd(e->gpu, e->gs, gref, gdh, ggu, N, f);
    float *cout = c_f32(e, NULL, 2 * n);
    uint32_t *camax = c_alloc(e, sizeof *camax);
    *camax = 0;
    e->cpu->ops->swiglu_bwd_amax(e->cpu, e->cs, cout, dh, gu, N, f, camax);
    expect_producer_amax(e, gout, gref, gamax, cout, *camax, N, 2 * f, "swiglu_bwd_amax");
    free(gu), free(dh);
    env_free_all(e);
}

/* rope's backward with the amax of all of dqkv (the v heads it leaves alone included) */
static void rope_bwd_amax_case(gpu_env *e, int B, int T, int H, int KV, int hd, float factor) {
    int width = (H + 2 * KV) * hd;
    size_t n = (size_t)B * T * width;
    float *x = rand_vec(e, n, 2.0f);
    x[(size_t)(B * T - 1) * width + (H + KV) * hd + 3] = 30.0f; /* a v value the largest */
    void *gx = g_act(e, x, n), *gref = g_act(e, x, n);
    uint32_t *gamax = g_alloc(e, sizeof *gamax);
    gt_backend *g = e->gpu;
    GPU_PLAN(e, (g->ops->rope_bwd_amax(g, e->gs, gx, B, T, H, KV, hd, 10000.0f, factor, gamax),
                 factor > 0
                     ? g->ops->rope_scaled_bwd(g, e->gs, gref, B, T, H, KV, hd, 10000.0f, factor)
                     : g->ops->rope_bwd(g, e->gs, gref, B, T, H, KV, hd, 10000.0f)));
    g->ops->rope_bwd_amax(g, e->gs, gx, B, T, H, KV, hd, 10000.0f, factor, gamax);
    if (factor > 0)
        g->ops->rope_scaled_bwd(g, e->gs, gref, B, T, H, KV, hd, 10000.0f, factor);
    else
        g->ops->rope_bwd(g, e->gs, gref, B, T, H, KV, hd, 10000.0f);
    float *cx = c_f32(e, x, n);
    uint32_t *camax = c_alloc(e, sizeof *camax);
    *camax = 0;
    e->cpu->ops->rope_bwd_amax(e->cpu, e->cs, cx, B, T, H, KV, hd, 10000.0f, factor, camax);
    expect_producer_amax(e, gx, gref, gamax, cx, *camax, B * T, width, "rope_bwd_amax");
    free(x);
    env_free_all(e);
}

static void test_backward_producer_amax_casts_match_their_own_amax_pass_and_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, rmsnorm_bwd_part_amax);
    norm_bwd_amax_case(e, 300, 256, -1);
    norm_bwd_amax_case(e, 37, 2048, -1);
    norm_bwd_amax_case(e, 64, 768, 5);
    norm_bwd_amax_case(e, 45, 100, -1);
    norm_bwd_amax_case(e, 9, 40, 2);
    swiglu_bwd_amax_case(e, 64, 512, -1);
    swiglu_bwd_amax_case(e, 37, 333, -1);
    swiglu_bwd_amax_case(e, 16, 128, 700);
    rope_bwd_amax_case(e, 2, 64, 4, 2, 64, 0.0f);  /* the 8-pair kernel */
    rope_bwd_amax_case(e, 1, 48, 4, 4, 128, 8.0f); /* scaled, llama's head size */
    rope_bwd_amax_case(e, 2, 16, 3, 1, 24, 0.0f);  /* the one-pair kernel (hd / 2 = 12) */
}

/* The vector norm (d a multiple of 256 up to 2048: llama1b's 2048 among them) and the scalar one,
 * row counts off the 8 rows of a block, a NaN; SwiGLU's 8-wide and scalar kernels over many
 * blocks, a NaN */
static void test_producer_amax_casts_match_their_own_amax_pass_and_cpu_bitwise(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, rmsnorm_fwd_amax);
    norm_amax_case(e, 300, 256, -1);
    norm_amax_case(e, 37, 2048, -1);
    norm_amax_case(e, 64, 768, 5);
    norm_amax_case(e, 45, 100, -1);
    norm_amax_case(e, 9, 40, 2);
    swiglu_amax_case(e, 64, 512, -1);
    swiglu_amax_case(e, 37, 333, -1);
    swiglu_amax_case(e, 16, 128, 700);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fp8_casts_match_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_casts_of_ragged_shapes_match_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_cast_pairs_and_recorded_scale_casts_match_cpu_bitwise,
                                  gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_cast_of_a_nan_sets_the_flag, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_amax_update_matches_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_fp8_gemms_match_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(
            test_producer_amax_casts_match_their_own_amax_pass_and_cpu_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(
            test_backward_producer_amax_casts_match_their_own_amax_pass_and_cpu, gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
