/* CPU backend: the Mamba-2 mixer's ops of the op table (backend.h), over the fp32 reference
 * of cpu_mamba.c: each op reads its slice of the in_proj output in place through row strides,
 * and the scan's dt softplus and A = -exp(A_log) are computed into the workspace. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_mamba.h"
#include "backend/cpu/cpu_ops.h"

typedef struct mamba_args {
    float *out, *out2;           /* the op's outputs (see each kernel) */
    float *g1, *g2, *g3;         /* fp32 parameter gradients */
    const float *in, *zx, *dout; /* main input, zxbcdt, upstream gradient */
    const float *p1, *p2, *p3;   /* parameters */
    const float *stat;           /* rstd of the gated norm */
    float *ws;
    float eps;
    int accumulate;
    gt_mamba_shape sh;
} mamba_args;

static int shape_ok(gt_mamba_shape m) {
    return m.B > 0 && m.T > 0 && m.H > 0 && m.P > 0 && m.G > 0 && m.S > 0 && m.K > 0 &&
           m.chunk > 0 && m.H % m.G == 0;
}

#define REQUIRE_SHAPE(b, op, m)                                                                    \
    CPU_REQUIRE(b, shape_ok(m),                                                                    \
                op ": bad shape B=%d T=%d H=%d P=%d G=%d S=%d K=%d chunk=%d (all > 0, H a "        \
                   "multiple of G)",                                                               \
                (m).B, (m).T, (m).H, (m).P, (m).G, (m).S, (m).K, (m).chunk)

/* ---- convolution: in = zxbcdt from its xBC column, out = xbc / the xBC slice of dzxbcdt ---- */

static void k_conv_fwd(const void *p) {
    const mamba_args *a = p;
    gt_mamba_shape m = a->sh;
    int C = gt_mamba_conv(m);
    gt_cpu_conv1d_silu_fwd_ld(a->out, C, NULL, a->zx + gt_mamba_inner(m), gt_mamba_in(m), a->p1,
                              a->p2, m.B, m.T, C, m.K);
}

static void cpu_mamba_conv_fwd(gt_backend *b, gt_stream *s, void *xbc, const void *zxbcdt,
                               const void *w, const void *bias, gt_mamba_shape sh) {
    REQUIRE_SHAPE(b, "mamba_conv_fwd", sh);
    mamba_args a = {.out = xbc, .zx = zxbcdt, .p1 = w, .p2 = bias, .sh = sh};
    gt_cpu_submit(b, s, k_conv_fwd, &a, sizeof a);
}

static void k_conv_bwd(const void *p) {
    const mamba_args *a = p;
    gt_mamba_shape m = a->sh;
    int C = gt_mamba_conv(m), di = gt_mamba_inner(m), in = gt_mamba_in(m);
    gt_cpu_conv1d_silu_bwd_ld(a->out + di, in, a->g1, a->g2, a->dout, C, NULL, a->zx + di, in,
                              a->p1, a->p2, m.B, m.T, C, m.K, a->accumulate);
}

static void cpu_mamba_conv_bwd(gt_backend *b, gt_stream *s, void *dzxbcdt, float *dw, float *dbias,
                               const void *dxbc, const void *zxbcdt, const void *w,
                               const void *bias, gt_mamba_shape sh, int accumulate) {
    REQUIRE_SHAPE(b, "mamba_conv_bwd", sh);
    mamba_args a = {.out = dzxbcdt,
                    .g1 = dw,
                    .g2 = dbias,
                    .zx = zxbcdt,
                    .dout = dxbc,
                    .p1 = w,
                    .p2 = bias,
                    .accumulate = accumulate != 0,
                    .sh = sh};
    gt_cpu_submit(b, s, k_conv_bwd, &a, sizeof a);
}

/* ---- SSD scan ---- */

static gt_ssd_shape ssd_shape(gt_mamba_shape m) {
    return (gt_ssd_shape){m.B, m.T, m.H, m.P, m.G, m.S};
}

/* ws: dt [N][H], then A [H]; returns what follows them */
static float *scan_prologue(const mamba_args *a, float **dt, float **A) {
    gt_mamba_shape m = a->sh;
    int N = m.B * m.T, H = m.H, in = gt_mamba_in(m);
    const float *raw = a->zx + (in - H);
    *dt = a->ws;
    *A = a->ws + (size_t)N * H;
    for (int n = 0; n < N; n++)
        gt_cpu_dt_softplus_fwd(*dt + (size_t)n * H, raw + (size_t)n * in, a->p1, 1, H);
    for (int h = 0; h < H; h++)
        (*A)[h] = -expf(a->p2[h]);
    return *A + H;
}

static void k_ssd_fwd(const void *p) {
    const mamba_args *a = p;
    gt_mamba_shape m = a->sh;
    int C = gt_mamba_conv(m), di = gt_mamba_inner(m), gs = m.G * m.S;
    float *dt, *A;
    float *state = scan_prologue(a, &dt, &A);
    gt_ssd_ld ld = {C, di, C};
    gt_cpu_ssd_scan_fwd_ld(a->out, a->in, dt, A, a->in + di, a->in + di + gs, a->p3, ssd_shape(m),
                           ld, state);
}

static void cpu_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                              const void *zxbcdt, const void *dt_bias, const void *A_log,
                              const void *D, float *ws, float *state, gt_mamba_shape sh) {
    (void)state; /* the sequential scan keeps none: gt_mamba_ssd_state_floats is 0 here */
    REQUIRE_SHAPE(b, "mamba_ssd_fwd", sh);
    mamba_args a = {
        .out = y, .in = xbc, .zx = zxbcdt, .p1 = dt_bias, .p2 = A_log, .p3 = D, .ws = ws, .sh = sh};
    gt_cpu_submit(b, s, k_ssd_fwd, &a, sizeof a);
}

static void k_ssd_bwd(const void *p) {
    const mamba_args *a = p;
    gt_mamba_shape m = a->sh;
    int N = m.B * m.T, H = m.H, C = gt_mamba_conv(m), di = gt_mamba_inner(m), gs = m.G * m.S;
    int in = gt_mamba_in(m);
    float *dt, *A;
    float *ddt = scan_prologue(a, &dt, &A); /* [N][H], then dA and dD [H], then the states */
    float *dA = ddt + (size_t)N * H, *dD = dA + H;
    gt_ssd_ld ld = {C, di, C};
    gt_cpu_ssd_scan_bwd_ld(a->out, ddt, dA, a->out + di, a->out + di + gs, dD, a->dout, a->in, dt,
                           A, a->in + di, a->in + di + gs, a->p3, ssd_shape(m), ld, dD + H, 0);
    /* through dt = softplus(raw + dt_bias) into the dt slice (dt's workspace, free now, sums
     * dt_bias's gradient in token order), and through A = -exp(A_log): dA/dA_log = A */
    const float *raw = a->zx + (in - H);
    float *draw = a->out2 + (in - H), *db = dt;
    for (int n = 0; n < N; n++)
        gt_cpu_dt_softplus_bwd(draw + (size_t)n * in, db, ddt + (size_t)n * H, raw + (size_t)n * in,
                               a->p1, 1, H, n > 0);
    for (int h = 0; h < H; h++) {
        a->g1[h] = a->accumulate ? a->g1[h] + db[h] : db[h];
        a->g2[h] = a->accumulate ? a->g2[h] + dA[h] * A[h] : dA[h] * A[h];
        a->g3[h] = a->accumulate ? a->g3[h] + dD[h] : dD[h];
    }
}

static void cpu_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt,
                              float *ddt_bias, float *dA_log, float *dD, const void *dy,
                              const void *xbc, const void *zxbcdt, const void *dt_bias,
                              const void *A_log, const void *D, float *ws, const float *state,
                              gt_mamba_shape sh, int accumulate) {
    (void)state; /* its backward runs the scan again */
    REQUIRE_SHAPE(b, "mamba_ssd_bwd", sh);
    mamba_args a = {.out = dxbc,
                    .out2 = dzxbcdt,
                    .g1 = ddt_bias,
                    .g2 = dA_log,
                    .g3 = dD,
                    .in = xbc,
                    .zx = zxbcdt,
                    .dout = dy,
                    .p1 = dt_bias,
                    .p2 = A_log,
                    .p3 = D,
                    .ws = ws,
                    .accumulate = accumulate != 0,
                    .sh = sh};
    gt_cpu_submit(b, s, k_ssd_bwd, &a, sizeof a);
}

/* ---- gated RMSNorm: z is zxbcdt's first slice ---- */

static void k_gnorm_fwd(const void *p) {
    const mamba_args *a = p;
    gt_mamba_shape m = a->sh;
    gt_cpu_gated_rmsnorm_fwd_ld(a->out, a->out2, a->in, a->zx, gt_mamba_in(m), a->p1, m.B * m.T,
                                gt_mamba_inner(m), m.G, a->eps);
}

static void cpu_mamba_gated_norm_fwd(gt_backend *b, gt_stream *s, void *out, float *rstd,
                                     const void *y, const void *zxbcdt, const void *w, float eps,
                                     gt_mamba_shape sh) {
    REQUIRE_SHAPE(b, "mamba_gated_norm_fwd", sh);
    CPU_REQUIRE(b, eps > 0, "mamba_gated_norm_fwd: eps is %g; it must be > 0", eps);
    mamba_args a = {.out = out, .out2 = rstd, .in = y, .zx = zxbcdt, .p1 = w, .eps = eps, .sh = sh};
    gt_cpu_submit(b, s, k_gnorm_fwd, &a, sizeof a);
}

static void k_gnorm_bwd(const void *p) {
    const mamba_args *a = p;
    gt_mamba_shape m = a->sh;
    int in = gt_mamba_in(m);
    gt_cpu_gated_rmsnorm_bwd_ld(a->out, a->out2, in, a->g1, a->dout, a->in, a->zx, in, a->p1,
                                a->stat, m.B * m.T, gt_mamba_inner(m), m.G, a->accumulate);
}

static void cpu_mamba_gated_norm_bwd(gt_backend *b, gt_stream *s, void *dy, void *dzxbcdt,
                                     float *dw, const void *dout, const void *y, const void *zxbcdt,
                                     const void *w, const float *rstd, float *ws, gt_mamba_shape sh,
                                     int accumulate) {
    (void)ws; /* one pass makes both gradients here */
    REQUIRE_SHAPE(b, "mamba_gated_norm_bwd", sh);
    mamba_args a = {.out = dy,
                    .out2 = dzxbcdt,
                    .g1 = dw,
                    .in = y,
                    .zx = zxbcdt,
                    .dout = dout,
                    .p1 = w,
                    .stat = rstd,
                    .accumulate = accumulate != 0,
                    .sh = sh};
    gt_cpu_submit(b, s, k_gnorm_bwd, &a, sizeof a);
}

void gt_cpu_register_mamba_ops(gt_backend_ops *ops) {
    ops->mamba_conv_fwd = cpu_mamba_conv_fwd;
    ops->mamba_conv_bwd = cpu_mamba_conv_bwd;
    ops->mamba_ssd_fwd = cpu_mamba_ssd_fwd;
    ops->mamba_ssd_bwd = cpu_mamba_ssd_bwd;
    ops->mamba_gated_norm_fwd = cpu_mamba_gated_norm_fwd;
    ops->mamba_gated_norm_bwd = cpu_mamba_gated_norm_bwd;
}
