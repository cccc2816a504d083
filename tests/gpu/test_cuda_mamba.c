/* GPU tests of the Mamba-2 ops (k_mamba_conv.cu, k_mamba.cu, the chunked SSD scan of
 * k_mamba_ssd.cu): conv1d, SSD scan and gated RMSNorm, forward and backward, against the CPU ops
 * (the sequential scan) on the same bf16-rounded inputs (relative L2 error; the scan's tolerance
 * derived from its bf16 tensor-core operands, and shown to catch a wrong decay), with overwritten
 * and accumulated gradients, the conv and norm kernels also on shapes that reach each of their
 * paths (vector and scalar, unrolled and generic widths); two runs bitwise equal; a captured graph
 * of all six replays bitwise like eager; a shape past the kernels' limits is an error. */
#include "gpu_fixture.h"
#include "mamba_terms.h"

#define TOL_GRAD 1e-3 /* fp32 parameter gradients summed in another order */
/* The SSD scan's products run on tensor cores with bf16 operands and fp32 sums, as mamba_ssm's
 * (k_mamba_ssd.cu), against the CPU's fp32 sequential scan. Rounding an operand to bf16 (8
 * significant bits, round to nearest) leaves a relative error of RMS about 2^-9; a product of
 * two rounded operands about sqrt(2) 2^-9, whatever its length (N = 128 states or a chunk of
 * 128 tokens: the terms' errors are independent and grow as the sums do, as sqrt of the count).
 * The longest chain rounds four times in series (the chunk's state, the state passed on, the
 * output, its gradient: sqrt(8) 2^-9), and the bf16 output once more: sqrt(9) 2^-9 = 5.9e-3.
 * The dt gradient and the parameters' come from differences of such sums (dy . y - dt x .
 * dx) that partly cancel: a factor 3 over that for all of them (measured on the H200: y 2.8e-3,
 * dx, dB, dC 2.3e-3 to 2.5e-3, d(dt) 5.2e-3). ddt_bias is a sum over every token of terms
 * that cancel further: expect_token_sum bounds it. */
#define TOL_SSD 2e-2
#define TOL_SSD_SUM (5 * TOL_SSD)
/* A_log shift of the wrong-decay check: A 42% off, a decay error a kernel bug (a wrong cumsum
 * term, a mask shifted by one) is of the size of */
#define WRONG_A_LOG_SHIFT 0.35f
/* odd heads decay slowly (A = -exp(A_log) and dt small), so the states passed between chunks
 * carry weight in the outputs and gradients instead of vanishing */
#define SLOW_A_LOG_SHIFT (-4.0f)
#define SLOW_DT_BIAS_SHIFT (-3.0f)

/* chunk lengths 4 .. 256; sequences that a chunk does not divide (and one it does); groups of
 * one to four heads; S not a multiple of 32; the hybrid workload's P = 64, S = 128; P, S and a
 * chunk length that are no multiples of 8, whose chunk products form every operand value
 * alone instead of 8 from one load (k_mamba_ssd_gemm.cu's cf_vec); a chunk of 16 that splits
 * a product's k slab between its two parts; P = 128, whose dx product stores dx in fp32 for
 * the token-sum pass (P > GT_MAMBA_SSD_TOK_MAX_P) */
static const gt_mamba_shape k_shapes[] = {
    {.B = 2, .T = 37, .H = 4, .P = 8, .G = 2, .S = 16, .K = 4, .chunk = 16},
    {.B = 1, .T = 50, .H = 3, .P = 6, .G = 3, .S = 40, .K = 3, .chunk = 8},
    {.B = 1, .T = 9, .H = 2, .P = 128, .G = 1, .S = 128, .K = 4, .chunk = 4},
    {.B = 2, .T = 200, .H = 4, .P = 16, .G = 2, .S = 32, .K = 4, .chunk = 64},
    {.B = 1, .T = 300, .H = 4, .P = 64, .G = 2, .S = 128, .K = 4, .chunk = 128},
    {.B = 1, .T = 256, .H = 8, .P = 64, .G = 2, .S = 128, .K = 4, .chunk = 128},
    {.B = 1, .T = 520, .H = 2, .P = 32, .G = 1, .S = 64, .K = 4, .chunk = 256},
    {.B = 2, .T = 50, .H = 3, .P = 6, .G = 1, .S = 18, .K = 3, .chunk = 7},
};
#define N_SHAPES (int)(sizeof k_shapes / sizeof k_shapes[0])

/* Shapes for the conv and gated-norm kernels alone (k_mamba_conv.cu and k_mamba.cu pick their paths
 * by shape): H = 8 or 32 make every row stride a multiple of 8 (the 16-byte path), H = 3 not (the
 * scalar path); conv widths 2 and 3 on vectors across several sequences, a sequence shorter than
 * the width, the generic widths 6 and 8; norm rows longer than a warp holds in registers
 * (2560 channels on vectors, 300 scalar); the hybrid workload's layout (d_inner 2048, one
 * group of 128 states, width 4) over a 2048-token sequence; and its 8 norm groups of 256
 * channels, the widest the one-pass norm backward takes, over tokens that leave its last
 * block part-filled. */
static const gt_mamba_shape k_kernel_shapes[] = {
    {.B = 3, .T = 45, .H = 8, .P = 8, .G = 2, .S = 16, .K = 2, .chunk = 16},
    {.B = 2, .T = 130, .H = 8, .P = 8, .G = 2, .S = 16, .K = 3, .chunk = 16},
    {.B = 4, .T = 3, .H = 8, .P = 8, .G = 2, .S = 16, .K = 4, .chunk = 3},
    {.B = 2, .T = 70, .H = 8, .P = 8, .G = 2, .S = 16, .K = 6, .chunk = 16},
    {.B = 2, .T = 33, .H = 3, .P = 6, .G = 3, .S = 8, .K = 8, .chunk = 16},
    {.B = 2, .T = 1000, .H = 8, .P = 8, .G = 2, .S = 16, .K = 4, .chunk = 64},
    {.B = 2, .T = 20, .H = 8, .P = 320, .G = 1, .S = 16, .K = 4, .chunk = 16},
    {.B = 2, .T = 20, .H = 3, .P = 100, .G = 1, .S = 16, .K = 3, .chunk = 16},
    {.B = 1, .T = 2048, .H = 32, .P = 64, .G = 1, .S = 128, .K = 4, .chunk = 256},
    {.B = 2, .T = 150, .H = 32, .P = 64, .G = 8, .S = 16, .K = 4, .chunk = 64},
};
#define N_KERNEL_SHAPES (int)(sizeof k_kernel_shapes / sizeof k_kernel_shapes[0])

/* Host inputs of one shape (bf16-rounded) and their sizes. */
typedef struct mamba_in {
    gt_mamba_shape sh;
    size_t N, in, C, di;
    float *zx, *conv_w, *conv_b, *dt_bias, *A_log, *D, *gw, *xbc, *y, *dxbc, *dy, *dout, *dz0;
} mamba_in;

static mamba_in make_inputs(gpu_env *e, gt_mamba_shape sh) {
    mamba_in m = {.sh = sh};
    m.N = (size_t)sh.B * sh.T;
    m.in = (size_t)gt_mamba_in(sh);
    m.C = (size_t)gt_mamba_conv(sh);
    m.di = (size_t)gt_mamba_inner(sh);
    m.zx = rand_vec(e, m.N * m.in, 1.0f);
    m.conv_w = rand_vec(e, m.C * sh.K, 0.5f);
    m.conv_b = rand_vec(e, m.C, 0.5f);
    m.dt_bias = rand_vec(e, sh.H, 1.0f);
    m.A_log = rand_vec(e, sh.H, 1.0f);
    m.D = rand_vec(e, sh.H, 1.0f);
    for (int h = 1; h < sh.H; h += 2) {
        m.A_log[h] = bf16_round(m.A_log[h] + SLOW_A_LOG_SHIFT);
        m.dt_bias[h] = bf16_round(m.dt_bias[h] + SLOW_DT_BIAS_SHIFT);
    }
    m.gw = rand_vec(e, m.di, 0.2f);
    for (size_t i = 0; i < m.di; i++)
        m.gw[i] = bf16_round(1.0f + m.gw[i]);
    m.xbc = rand_vec(e, m.N * m.C, 1.0f);
    m.y = rand_vec(e, m.N * m.di, 1.0f);
    m.dxbc = rand_vec(e, m.N * m.C, 1.0f);
    m.dy = rand_vec(e, m.N * m.di, 1.0f);
    m.dout = rand_vec(e, m.N * m.di, 1.0f);
    m.dz0 = rand_vec(e, m.N * m.in, 1.0f);
    return m;
}

static void free_inputs(mamba_in *m) {
    free(m->zx), free(m->conv_w), free(m->conv_b), free(m->dt_bias), free(m->A_log), free(m->D);
    free(m->gw), free(m->xbc), free(m->y), free(m->dxbc), free(m->dy), free(m->dout);
    free(m->dz0);
}

/* The columns [lo, hi) of an [N][ld] matrix, packed. */
static float *columns(const float *a, size_t N, size_t ld, size_t lo, size_t hi) {
    float *o = malloc(N * (hi - lo) * sizeof *o);
    for (size_t n = 0; n < N; n++)
        memcpy(o + n * (hi - lo), a + n * ld + lo, (hi - lo) * sizeof *o);
    return o;
}

static void expect_columns(const char *what, const float *got, const float *want, size_t N,
                           size_t ld, size_t lo, size_t hi, double tol) {
    float *g = columns(got, N, ld, lo, hi), *w = columns(want, N, ld, lo, hi);
    EXPECT_CLOSE(what, g, w, N * (hi - lo), tol);
    free(g), free(w);
}

/* Initial parameter gradients: g0 for accumulate = 1, NaN for accumulate = 0 (overwritten). */
static float *grad_init(gpu_env *e, size_t n, int accumulate) {
    float *g = rand_vec(e, n, 0.5f);
    if (!accumulate)
        for (size_t i = 0; i < n; i++)
            g[i] = NAN;
    return g;
}

static void conv_case(gpu_env *e, gt_mamba_shape sh, int accumulate) {
    mamba_in m = make_inputs(e, sh);
    size_t N = m.N, in = m.in, C = m.C, di = m.di, K = (size_t)sh.K;
    float *dw0 = grad_init(e, C * K, accumulate), *db0 = grad_init(e, C, accumulate);
    float *c_xbc = c_f32(e, NULL, N * C), *c_dz = c_f32(e, m.dz0, N * in);
    float *c_dw = c_f32(e, dw0, C * K), *c_db = c_f32(e, db0, C);
    float *c_zx = c_f32(e, m.zx, N * in), *c_w = c_f32(e, m.conv_w, C * K);
    float *c_b = c_f32(e, m.conv_b, C);
    e->cpu->ops->mamba_conv_fwd(e->cpu, e->cs, c_xbc, c_zx, c_w, c_b, sh);
    e->cpu->ops->mamba_conv_bwd(e->cpu, e->cs, c_dz, c_dw, c_db, c_f32(e, m.dxbc, N * C), c_zx, c_w,
                                c_b, sh, accumulate);
    void *g_zx = g_act(e, m.zx, N * in), *g_w = g_act(e, m.conv_w, C * K);
    void *g_b = g_act(e, m.conv_b, C), *g_xbc = g_act(e, NULL, N * C);
    void *g_dz = g_act(e, m.dz0, N * in);
    float *g_dw = g_f32(e, dw0, C * K), *g_db = g_f32(e, db0, C);
    e->gpu->ops->mamba_conv_fwd(e->gpu, e->gs, g_xbc, g_zx, g_w, g_b, sh);
    e->gpu->ops->mamba_conv_bwd(e->gpu, e->gs, g_dz, g_dw, g_db, g_act(e, m.dxbc, N * C), g_zx, g_w,
                                g_b, sh, accumulate);
    float *got = malloc(N * in * sizeof *got);
    g_read_act(e, got, g_xbc, N * C);
    EXPECT_CLOSE("mamba_conv_fwd xbc", got, c_xbc, N * C, TOL_BF16);
    g_read_act(e, got, g_dz, N * in);
    expect_columns("mamba_conv_bwd dxBC", got, c_dz, N, in, di, di + C, TOL_BF16);
    /* the z and dt columns are not the convolution's: untouched */
    float *before = columns(m.dz0, N, in, 0, di), *after = columns(got, N, in, 0, di);
    assert_memory_equal(before, after, N * di * sizeof(float));
    free(before), free(after);
    before = columns(m.dz0, N, in, di + C, in), after = columns(got, N, in, di + C, in);
    assert_memory_equal(before, after, N * (in - di - C) * sizeof(float));
    free(before), free(after);
    g_read_f32(e, got, g_dw, C * K);
    EXPECT_CLOSE(accumulate ? "mamba_conv_bwd dw (+=)" : "mamba_conv_bwd dw (=)", got, c_dw, C * K,
                 TOL_GRAD);
    g_read_f32(e, got, g_db, C);
    EXPECT_CLOSE(accumulate ? "mamba_conv_bwd dbias (+=)" : "mamba_conv_bwd dbias (=)", got, c_db,
                 C, TOL_GRAD);
    free(got), free(dw0), free(db0);
    free_inputs(&m);
}

static void test_conv_matches_cpu(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_SHAPES; i++)
        for (int acc = 0; acc <= 1; acc++)
            conv_case(e, k_shapes[i], acc);
}

static void test_conv_paths_match_cpu(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_KERNEL_SHAPES; i++)
        for (int acc = 0; acc <= 1; acc++) {
            conv_case(e, k_kernel_shapes[i], acc);
            env_free_all(e);
        }
}

/* ddt_bias[h] is the sum of d(dt) over every token, whose terms cancel (random dy), so its
 * relative error can be far above theirs. Its bound is theirs carried through the sum by the
 * triangle inequality: |got_h - want_h| <= TOL_SSD_SUM sum_n |d(dt)_{n,h}| (the CPU's d(dt),
 * columns [lo, lo + H) of the [N][ld] want_terms), TOL_SSD_SUM being the terms' own tolerance
 * (d(dt) is itself a cancelling sum; at TOL_SSD the bound was below what the terms may err). */
static void expect_token_sum(const char *what, const float *got, const float *want,
                             const float *want_terms, size_t N, size_t ld, size_t lo, size_t H) {
    double worst = 0.0;
    for (size_t h = 0; h < H; h++) {
        double mag = 0.0;
        for (size_t n = 0; n < N; n++)
            mag += fabs((double)want_terms[n * ld + lo + h]);
        double ratio = fabs((double)got[h] - want[h]) / (TOL_SSD_SUM * mag);
        if (!(ratio <= worst)) worst = ratio;
    }
    printf("    %-40s error / (tol x sum |terms|) %.3e (at most 1)\n", what, worst);
    if (!(worst <= 1.0)) fail_msg("%s: error %.3e times its bound", what, worst);
}

/* dA_log[h] is a sum over every token too, of terms q_{n,h} made of what the op returns
 * (tests/support/mamba_terms.h; the CPU test checks that they sum to it), each the small
 * difference of two parts: bounded by the parts, |got_h - want_h| <= TOL_SSD sum_n (the
 * magnitudes of q_{n,h}'s parts) from the CPU's outputs (where the parts cancel, a bound by the
 * terms' own magnitudes is below what the bf16 operands' rounding gives). That the CPU's
 * terms sum to its dA_log (less g0 when accumulating) is checked first. */
static void expect_dA_log(const char *what, const float *got, const float *want, const float *g0,
                          const mamba_in *m, const float *c_dxbc, const float *c_dz) {
    size_t N = m->N, in = m->in, C = m->C, di = m->di;
    int H = m->sh.H, P = m->sh.P;
    float *dt = malloc(N * (size_t)H * sizeof *dt), *ddt = malloc(N * (size_t)H * sizeof *ddt);
    double *sum = malloc((size_t)H * sizeof *sum), *mag = malloc((size_t)H * sizeof *mag);
    for (size_t n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            float v = m->zx[n * in + (in - (size_t)H) + h] + m->dt_bias[h];
            int id = v > 20.0f; /* PyTorch's softplus threshold, as cpu_mamba.c */
            dt[n * H + h] = id ? v : log1pf(expf(v));
            ddt[n * H + h] =
                c_dz[n * in + (in - (size_t)H) + h] / (id ? 1.0f : 1.0f / (1.0f + expf(-v)));
        }
    mamba_dA_terms(sum, mag, dt, ddt, m->xbc, c_dxbc, C, m->dy, di, m->D, N, H, P);
    double worst = 0.0;
    for (int h = 0; h < H; h++) {
        double cpu = (double)want[h] - (g0 ? g0[h] : 0.0);
        /* the CPU's own fp32 sums (P x S states over the sequence) differ from the terms'
         * double sum by a few 1e-4 of their magnitude (the H200 run saw 1.7e-4 at P = S =
         * 128); a wrong decomposition is off by the magnitude itself */
        if (!(fabs(sum[h] - cpu) <= 2e-3 * mag[h] + 1e-30))
            fail_msg("%s: the CPU's terms sum to %.6e, its dA_log is %.6e (the test's "
                     "decomposition is wrong)",
                     what, sum[h], cpu);
        /* each part carries the ops' relative error (TOL_SSD); a wrong term (lt left out, a
         * sign) is off by the value itself, which the parts exceed some 20-fold */
        double ratio = fabs((double)got[h] - want[h]) / (TOL_SSD * mag[h] + 1e-30);
        if (!(ratio <= worst)) worst = ratio;
    }
    printf("    %-40s error / (tol x its terms' parts) %.3e (at most 1)\n", what, worst);
    if (!(worst <= 1.0)) fail_msg("%s: error %.3e times its bound", what, worst);
    free(dt), free(ddt), free(sum), free(mag);
}

static void ssd_case(gpu_env *e, gt_mamba_shape sh, int accumulate) {
    /* the inputs depend on the shape alone, not on what other tests drew before */
    e->rng = 0x9E3779B97F4A7C15ull ^
             ((uint64_t)sh.B * 131 + (uint64_t)sh.T * 7919 + (uint64_t)sh.S * 104729 +
              (uint64_t)sh.chunk * 15485863 + (uint64_t)accumulate) *
                 0x2545F4914F6CDD1Dull;
    mamba_in m = make_inputs(e, sh);
    size_t N = m.N, in = m.in, C = m.C, di = m.di, H = (size_t)sh.H;
    size_t ws = gt_mamba_ws_floats(sh);
    float *gb0 = grad_init(e, H, accumulate), *ga0 = grad_init(e, H, accumulate);
    float *gd0 = grad_init(e, H, accumulate);
    float *c_y = c_f32(e, NULL, N * di), *c_dxbc = c_f32(e, NULL, N * C);
    float *c_dz = c_f32(e, m.dz0, N * in), *c_ws = c_f32(e, NULL, ws);
    float *c_gb = c_f32(e, gb0, H), *c_ga = c_f32(e, ga0, H), *c_gd = c_f32(e, gd0, H);
    float *c_xbc = c_f32(e, m.xbc, N * C), *c_zx = c_f32(e, m.zx, N * in);
    float *c_bias = c_f32(e, m.dt_bias, H), *c_A = c_f32(e, m.A_log, H), *c_D = c_f32(e, m.D, H);
    e->cpu->ops->mamba_ssd_fwd(e->cpu, e->cs, c_y, c_xbc, c_zx, c_bias, c_A, c_D, c_ws, NULL, sh);
    e->cpu->ops->mamba_ssd_bwd(e->cpu, e->cs, c_dxbc, c_dz, c_gb, c_ga, c_gd,
                               c_f32(e, m.dy, N * di), c_xbc, c_zx, c_bias, c_A, c_D, c_ws, NULL,
                               sh, accumulate);
    void *g_xbc = g_act(e, m.xbc, N * C), *g_zx = g_act(e, m.zx, N * in);
    void *g_bias = g_act(e, m.dt_bias, H), *g_A = g_act(e, m.A_log, H), *g_D = g_act(e, m.D, H);
    void *g_y = g_act(e, NULL, N * di), *g_dxbc = g_act(e, NULL, N * C);
    void *g_dz = g_act(e, m.dz0, N * in);
    float *g_ws = g_f32(e, NULL, ws),
          *g_st = g_f32(e, NULL, gt_mamba_ssd_state_floats(sh, GT_BACKEND_CUDA));
    float *g_gb = g_f32(e, gb0, H), *g_ga = g_f32(e, ga0, H), *g_gd = g_f32(e, gd0, H);
    e->gpu->ops->mamba_ssd_fwd(e->gpu, e->gs, g_y, g_xbc, g_zx, g_bias, g_A, g_D, g_ws, g_st, sh);
    e->gpu->ops->mamba_ssd_bwd(e->gpu, e->gs, g_dxbc, g_dz, g_gb, g_ga, g_gd,
                               g_act(e, m.dy, N * di), g_xbc, g_zx, g_bias, g_A, g_D, g_ws, g_st,
                               sh, accumulate);
    float *got = malloc(N * in * sizeof *got);
    g_read_act(e, got, g_y, N * di);
    EXPECT_CLOSE("mamba_ssd_fwd y", got, c_y, N * di, TOL_SSD);
    g_read_act(e, got, g_dxbc, N * C);
    expect_columns("mamba_ssd_bwd dx", got, c_dxbc, N, C, 0, di, TOL_SSD);
    expect_columns("mamba_ssd_bwd dB", got, c_dxbc, N, C, di, di + (C - di) / 2, TOL_SSD);
    expect_columns("mamba_ssd_bwd dC", got, c_dxbc, N, C, di + (C - di) / 2, C, TOL_SSD);
    g_read_act(e, got, g_dz, N * in);
    /* d(dt) of a token sums P x chunk products of random-signed terms: TOL_SSD_SUM as dA_log
     * (the H200 measured 2.9e-3 to 3.4e-2 over these shapes) */
    expect_columns("mamba_ssd_bwd d(dt)", got, c_dz, N, in, in - H, in, TOL_SSD_SUM);
    float *before = columns(m.dz0, N, in, 0, in - H), *after = columns(got, N, in, 0, in - H);
    assert_memory_equal(before, after, N * (in - H) * sizeof(float)); /* only dt's columns */
    free(before), free(after);
    g_read_f32(e, got, g_gb, H);
    expect_token_sum(accumulate ? "mamba_ssd_bwd ddt_bias (+=)" : "mamba_ssd_bwd ddt_bias (=)", got,
                     c_gb, c_dz, N, in, in - H, H);
    g_read_f32(e, got, g_ga, H);
    expect_dA_log(accumulate ? "mamba_ssd_bwd dA_log (+=)" : "mamba_ssd_bwd dA_log (=)", got, c_ga,
                  accumulate ? ga0 : NULL, &m, c_dxbc, c_dz);
    g_read_f32(e, got, g_gd, H);
    EXPECT_CLOSE(accumulate ? "mamba_ssd_bwd dD (+=)" : "mamba_ssd_bwd dD (=)", got, c_gd, H,
                 TOL_GRAD);
    free(got), free(gb0), free(ga0), free(gd0);
    free_inputs(&m);
}

static void test_ssd_scan_matches_cpu(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_SHAPES; i++)
        for (int acc = 0; acc <= 1; acc++)
            ssd_case(e, k_shapes[i], acc);
}

/* The tolerance is tight enough to see a wrong product: the GPU's y against the CPU's y of
 * a decay WRONG_A_LOG_SHIFT off is outside TOL_SSD (and the CPU's two results differ by more
 * than twice it, so the check measures the decay, not noise). */
static void test_ssd_tolerance_sees_a_wrong_decay(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_SHAPES; i++) {
        gt_mamba_shape sh = k_shapes[i];
        mamba_in m = make_inputs(e, sh);
        size_t N = m.N, in = m.in, C = m.C, di = m.di, H = (size_t)sh.H;
        size_t ws = gt_mamba_ws_floats(sh);
        float *wrong_A = malloc(H * sizeof *wrong_A);
        for (size_t h = 0; h < H; h++)
            wrong_A[h] = bf16_round(m.A_log[h] + WRONG_A_LOG_SHIFT);
        float *c_xbc = c_f32(e, m.xbc, N * C), *c_zx = c_f32(e, m.zx, N * in);
        float *c_bias = c_f32(e, m.dt_bias, H), *c_D = c_f32(e, m.D, H);
        float *c_ws = c_f32(e, NULL, ws), *c_y = c_f32(e, NULL, N * di);
        float *c_y_wrong = c_f32(e, NULL, N * di);
        e->cpu->ops->mamba_ssd_fwd(e->cpu, e->cs, c_y, c_xbc, c_zx, c_bias, c_f32(e, m.A_log, H),
                                   c_D, c_ws, NULL, sh);
        e->cpu->ops->mamba_ssd_fwd(e->cpu, e->cs, c_y_wrong, c_xbc, c_zx, c_bias,
                                   c_f32(e, wrong_A, H), c_D, c_ws, NULL, sh);
        void *g_y = g_act(e, NULL, N * di);
        e->gpu->ops->mamba_ssd_fwd(
            e->gpu, e->gs, g_y, g_act(e, m.xbc, N * C), g_act(e, m.zx, N * in),
            g_act(e, m.dt_bias, H), g_act(e, m.A_log, H), g_act(e, m.D, H), g_f32(e, NULL, ws),
            g_f32(e, NULL, gt_mamba_ssd_state_floats(sh, GT_BACKEND_CUDA)), sh);
        float *got = malloc(N * di * sizeof *got);
        g_read_act(e, got, g_y, N * di);
        double cpu_gap = rel_l2(c_y_wrong, c_y, N * di), gpu_gap = rel_l2(got, c_y_wrong, N * di);
        printf("    shape %d: y of the wrong decay: CPU %.3e, GPU %.3e off (tol %.0e)\n", i,
               cpu_gap, gpu_gap, TOL_SSD);
        if (!(cpu_gap > 2 * TOL_SSD))
            fail_msg("shape %d: the wrong decay moves the CPU's y by only %.3e: not a check", i,
                     cpu_gap);
        if (!(gpu_gap > TOL_SSD))
            fail_msg("shape %d: the GPU's y is within %.3e of a wrong decay's", i, gpu_gap);
        free(got), free(wrong_A);
        free_inputs(&m);
        env_free_all(e);
    }
}

/* ws: whether the GPU gets a workspace (its one-pass path, where the group fits a warp) */
static void gnorm_case(gpu_env *e, gt_mamba_shape sh, int accumulate, int ws_given) {
    mamba_in m = make_inputs(e, sh);
    float *ws = ws_given ? g_f32(e, NULL, gt_mamba_ws_floats(sh)) : NULL;
    size_t N = m.N, in = m.in, di = m.di, G = (size_t)sh.G;
    float eps = 1e-5f;
    float *dw0 = grad_init(e, di, accumulate);
    float *c_out = c_f32(e, NULL, N * di), *c_rstd = c_f32(e, NULL, N * G);
    float *c_dy = c_f32(e, NULL, N * di), *c_dz = c_f32(e, m.dz0, N * in);
    float *c_dw = c_f32(e, dw0, di), *c_y = c_f32(e, m.y, N * di);
    float *c_zx = c_f32(e, m.zx, N * in), *c_w = c_f32(e, m.gw, di);
    e->cpu->ops->mamba_gated_norm_fwd(e->cpu, e->cs, c_out, c_rstd, c_y, c_zx, c_w, eps, sh);
    e->cpu->ops->mamba_gated_norm_bwd(e->cpu, e->cs, c_dy, c_dz, c_dw, c_f32(e, m.dout, N * di),
                                      c_y, c_zx, c_w, c_rstd, NULL, sh, accumulate);
    void *g_y = g_act(e, m.y, N * di), *g_zx = g_act(e, m.zx, N * in), *g_w = g_act(e, m.gw, di);
    void *g_out = g_act(e, NULL, N * di), *g_dy = g_act(e, NULL, N * di);
    void *g_dz = g_act(e, m.dz0, N * in);
    float *g_rstd = g_f32(e, NULL, N * G), *g_dw = g_f32(e, dw0, di);
    e->gpu->ops->mamba_gated_norm_fwd(e->gpu, e->gs, g_out, g_rstd, g_y, g_zx, g_w, eps, sh);
    e->gpu->ops->mamba_gated_norm_bwd(e->gpu, e->gs, g_dy, g_dz, g_dw, g_act(e, m.dout, N * di),
                                      g_y, g_zx, g_w, g_rstd, ws, sh, accumulate);
    float *got = malloc(N * in * sizeof *got);
    g_read_act(e, got, g_out, N * di);
    EXPECT_CLOSE("mamba_gated_norm_fwd out", got, c_out, N * di, TOL_BF16);
    g_read_f32(e, got, g_rstd, N * G);
    EXPECT_CLOSE("mamba_gated_norm_fwd rstd", got, c_rstd, N * G, TOL_F32);
    g_read_act(e, got, g_dy, N * di);
    EXPECT_CLOSE("mamba_gated_norm_bwd dy", got, c_dy, N * di, TOL_BF16);
    g_read_act(e, got, g_dz, N * in);
    expect_columns("mamba_gated_norm_bwd dz", got, c_dz, N, in, 0, di, TOL_BF16);
    float *before = columns(m.dz0, N, in, di, in), *after = columns(got, N, in, di, in);
    assert_memory_equal(before, after, N * (in - di) * sizeof(float)); /* only z's columns */
    free(before), free(after);
    g_read_f32(e, got, g_dw, di);
    EXPECT_CLOSE(accumulate ? "mamba_gated_norm_bwd dw (+=)" : "mamba_gated_norm_bwd dw (=)", got,
                 c_dw, di, TOL_GRAD);
    free(got), free(dw0);
    free_inputs(&m);
}

static void test_gated_norm_matches_cpu(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_SHAPES; i++)
        for (int acc = 0; acc <= 1; acc++)
            gnorm_case(e, k_shapes[i], acc, 1);
}

static void test_gated_norm_paths_match_cpu(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_KERNEL_SHAPES; i++)
        for (int acc = 0; acc <= 1; acc++)
            for (int ws = 0; ws <= 1; ws++) {
                gnorm_case(e, k_kernel_shapes[i], acc, ws);
                env_free_all(e);
            }
}

/* Device buffers of all six ops on one shape: the forward chain conv -> scan -> norm, then
 * the backward chain norm -> scan -> conv, as model_mamba.c runs them. */
typedef struct mamba_dev {
    gt_mamba_shape sh;
    void *zx, *conv_w, *conv_b, *dt_bias, *A_log, *D, *gw, *xbc, *y, *out, *dout, *dy, *dxbc, *dz;
    float *rstd, *ws, *st, *g_cw, *g_cb, *g_db, *g_da, *g_dd, *g_gw;
} mamba_dev;

static mamba_dev upload(gpu_env *e, const mamba_in *m) {
    mamba_dev d = {.sh = m->sh};
    size_t N = m->N, H = (size_t)m->sh.H;
    d.zx = g_act(e, m->zx, N * m->in);
    d.conv_w = g_act(e, m->conv_w, m->C * m->sh.K);
    d.conv_b = g_act(e, m->conv_b, m->C);
    d.dt_bias = g_act(e, m->dt_bias, H);
    d.A_log = g_act(e, m->A_log, H);
    d.D = g_act(e, m->D, H);
    d.gw = g_act(e, m->gw, m->di);
    d.xbc = g_act(e, NULL, N * m->C);
    d.y = g_act(e, NULL, N * m->di);
    d.out = g_act(e, NULL, N * m->di);
    d.dout = g_act(e, m->dout, N * m->di);
    d.dy = g_act(e, NULL, N * m->di);
    d.dxbc = g_act(e, NULL, N * m->C);
    d.dz = g_act(e, NULL, N * m->in);
    d.rstd = g_f32(e, NULL, N * m->sh.G);
    d.ws = g_f32(e, NULL, gt_mamba_ws_floats(m->sh));
    d.st = g_f32(e, NULL, gt_mamba_ssd_state_floats(m->sh, GT_BACKEND_CUDA));
    d.g_cw = g_f32(e, NULL, m->C * m->sh.K);
    d.g_cb = g_f32(e, NULL, m->C);
    d.g_db = g_f32(e, NULL, H);
    d.g_da = g_f32(e, NULL, H);
    d.g_dd = g_f32(e, NULL, H);
    d.g_gw = g_f32(e, NULL, m->di);
    return d;
}

static void run_all(gpu_env *e, const mamba_dev *d) {
    gt_backend *b = e->gpu;
    gt_stream *s = e->gs;
    b->ops->mamba_conv_fwd(b, s, d->xbc, d->zx, d->conv_w, d->conv_b, d->sh);
    b->ops->mamba_ssd_fwd(b, s, d->y, d->xbc, d->zx, d->dt_bias, d->A_log, d->D, d->ws, d->st,
                          d->sh);
    b->ops->mamba_gated_norm_fwd(b, s, d->out, d->rstd, d->y, d->zx, d->gw, 1e-5f, d->sh);
    b->ops->mamba_gated_norm_bwd(b, s, d->dy, d->dz, d->g_gw, d->dout, d->y, d->zx, d->gw, d->rstd,
                                 d->ws, d->sh, 0);
    b->ops->mamba_ssd_bwd(b, s, d->dxbc, d->dz, d->g_db, d->g_da, d->g_dd, d->dy, d->xbc, d->zx,
                          d->dt_bias, d->A_log, d->D, d->ws, d->st, d->sh, 0);
    b->ops->mamba_conv_bwd(b, s, d->dz, d->g_cw, d->g_cb, d->dxbc, d->zx, d->conv_w, d->conv_b,
                           d->sh, 0);
}

/* Every output of run_all, downloaded and concatenated (bf16 outputs as fp32). */
static float *outputs(gpu_env *e, const mamba_in *m, const mamba_dev *d, size_t *n) {
    size_t N = m->N, H = (size_t)m->sh.H;
    size_t sizes[] = {N * m->C, N * m->di,      N * m->di, N * m->sh.G, N * m->di,
                      N * m->C, N * m->in,      m->di,     H,           H,
                      H,        m->C * m->sh.K, m->C};
    const void *ptr[] = {d->xbc,  d->y,    d->out,  d->rstd, d->dy,   d->dxbc, d->dz,
                         d->g_gw, d->g_db, d->g_da, d->g_dd, d->g_cw, d->g_cb};
    int is_act[] = {1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    float *o = malloc(total * sizeof *o), *p = o;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (is_act[i])
            g_read_act(e, p, ptr[i], sizes[i]);
        else
            g_read_f32(e, p, ptr[i], sizes[i]);
        p += sizes[i];
    }
    *n = total;
    return o;
}

static void test_two_runs_are_bitwise_equal(void **state) {
    gpu_env *e = *state;
    for (int i = 0; i < N_SHAPES; i++) {
        mamba_in m = make_inputs(e, k_shapes[i]);
        mamba_dev d = upload(e, &m);
        size_t n1, n2;
        run_all(e, &d);
        float *first = outputs(e, &m, &d, &n1);
        run_all(e, &d);
        float *second = outputs(e, &m, &d, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(first, second, n1 * sizeof(float));
        free(first), free(second);
        free_inputs(&m);
        env_free_all(e);
    }
}

static void test_captured_graph_replays_like_eager_bitwise(void **state) {
    gpu_env *e = *state;
    gt_backend *b = e->gpu;
    gt_error err = {0};
    for (int i = 0; i < N_SHAPES; i++) {
        mamba_in m = make_inputs(e, k_shapes[i]);
        mamba_dev d = upload(e, &m);
        size_t n1, n2;
        run_all(e, &d);
        float *eager = outputs(e, &m, &d, &n1);
        /* clear every output, so the replay has to write them all again */
        mamba_dev fresh = upload(e, &m);
        assert_int_equal(b->ops->begin_capture(b, e->gs, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
        run_all(e, &fresh);
        gt_graph *g = NULL;
        if (b->ops->end_capture(b, e->gs, &g, NULL, &err)) fail_msg("%s", err.msg);
        assert_non_null(g);
        if (b->ops->graph_launch(b, g, e->gs, &err)) fail_msg("%s", err.msg);
        float *replay = outputs(e, &m, &fresh, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(eager, replay, n1 * sizeof(float));
        b->ops->graph_destroy(b, g);
        free(eager), free(replay);
        free_inputs(&m);
        env_free_all(e);
    }
}

static void test_conv_wider_than_the_kernels_is_an_error(void **state) {
    gpu_env *e = *state;
    gt_mamba_shape sh = k_shapes[0];
    sh.K = 9;
    mamba_in m = make_inputs(e, sh);
    mamba_dev d = upload(e, &m);
    e->gpu->ops->mamba_conv_fwd(e->gpu, e->gs, d.xbc, d.zx, d.conv_w, d.conv_b, sh);
    gt_error err = {0};
    assert_int_not_equal(gt_backend_check(e->gpu, &err), GT_OK);
    printf("    %s\n", err.msg);
    assert_non_null(strstr(err.msg, "mamba_conv_fwd"));
    assert_non_null(strstr(err.msg, "K=9"));
    free_inputs(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_conv_matches_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_ssd_scan_matches_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_ssd_tolerance_sees_a_wrong_decay, gpu_free_bufs),
        cmocka_unit_test_teardown(test_gated_norm_matches_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_conv_paths_match_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_gated_norm_paths_match_cpu, gpu_free_bufs),
        cmocka_unit_test_teardown(test_two_runs_are_bitwise_equal, gpu_free_bufs),
        cmocka_unit_test_teardown(test_captured_graph_replays_like_eager_bitwise, gpu_free_bufs),
        cmocka_unit_test_teardown(test_conv_wider_than_the_kernels_is_an_error, gpu_free_bufs),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
