/* The Mamba-2 mixer's fp32 reference operations (backend/cpu/cpu_mamba.h): each backward against
 * central finite differences of L = sum(upstream * output), and each forward against an
 * independent form: the convolution's causality, the scan against SSD's quadratic (attention-like)
 * form computed in double, the gated norm against its formula. */
#define FD_EPS 1e-2f
#define FD_FLOOR 1e-2
#define FD_REL_TOL 2e-2
#include "cpu_op_fixture.h"

#include <string.h>

#include "backend/cpu/cpu_mamba.h"
#include "mamba_terms.h"

static int setup(void **state) {
    return fixture_setup(state, 0x4d414d42u);
}
static int teardown(void **state) {
    return fixture_teardown(state, 1);
}

/* ---- conv1d + SiLU ---- */
enum { CB = 2, CT = 7, CC = 3, CK = 4 };
typedef struct conv_case {
    float *x, *w, *bias, *up, *y, *pre;
} conv_case;

static double conv_loss(void *ctx) {
    conv_case *c = ctx;
    gt_cpu_conv1d_silu_fwd(c->y, c->pre, c->x, c->w, c->bias, CB, CT, CC, CK);
    return dotd(c->up, c->y, (size_t)CB * CT * CC);
}

static void test_conv1d_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    size_t n = (size_t)CB * CT * CC;
    conv_case c = {rand_buf(f, n, 1.0f),
                   rand_buf(f, CC * CK, 0.7f),
                   rand_buf(f, CC, 0.3f),
                   rand_buf(f, n, 1.0f),
                   zeros(n),
                   zeros(n)};
    float *dx = zeros(n), *dw = zeros(CC * CK), *db = zeros(CC);
    conv_loss(&c);
    gt_cpu_conv1d_silu_bwd(dx, dw, db, c.up, c.pre, c.x, c.w, CB, CT, CC, CK, 0);
    assert_true(fd_max_err(conv_loss, &c, c.x, n, dx, "conv1d dx") < FD_REL_TOL);
    assert_true(fd_max_err(conv_loss, &c, c.w, CC * CK, dw, "conv1d dw") < FD_REL_TOL);
    assert_true(fd_max_err(conv_loss, &c, c.bias, CC, db, "conv1d dbias") < FD_REL_TOL);
    /* accumulate adds the same gradient again */
    float dw0 = dw[5];
    gt_cpu_conv1d_silu_bwd(dx, dw, db, c.up, c.pre, c.x, c.w, CB, CT, CC, CK, 1);
    assert_float_equal(dw[5], 2 * dw0, 1e-5f * fabsf(dw0) + 1e-7f);
    free(c.x), free(c.w), free(c.bias), free(c.up), free(c.y), free(c.pre);
    free(dx), free(dw), free(db);
}

static void test_conv1d_is_causal_and_aligned_like_pytorch(void **state) {
    fixture *f = *state;
    size_t n = (size_t)CB * CT * CC;
    float *x = rand_buf(f, n, 1.0f), *y = zeros(n), *pre = zeros(n);
    float w[CC * CK] = {0};
    for (int c = 0; c < CC; c++)
        w[c * CK + CK - 2] = 1.0f; /* the tap one step back */
    gt_cpu_conv1d_silu_fwd(y, pre, x, w, NULL, CB, CT, CC, CK);
    for (int b = 0; b < CB; b++)
        for (int c = 0; c < CC; c++) {
            assert_float_equal(pre[((size_t)b * CT) * CC + c], 0.0f, 0.0f);
            for (int t = 1; t < CT; t++)
                assert_float_equal(pre[((size_t)b * CT + t) * CC + c],
                                   x[((size_t)b * CT + t - 1) * CC + c], 0.0f);
        }
    free(x), free(y), free(pre);
}

/* ---- dt softplus ---- */
static void test_dt_softplus_follows_pytorch_and_its_backward_matches(void **state) {
    (void)state;
    float raw[4] = {-3.0f, 0.0f, 19.0f, 25.0f}, bias[2] = {0.5f, 1.5f}, dt[4];
    gt_cpu_dt_softplus_fwd(dt, raw, bias, 2, 2);
    assert_float_equal(dt[0], log1pf(expf(-2.5f)), 1e-6f);
    assert_float_equal(dt[1], log1pf(expf(1.5f)), 1e-6f);
    assert_float_equal(dt[3], 26.5f, 0.0f); /* past the threshold: the identity */
    float ddt[4] = {1, 1, 1, 1}, draw[4], db[2];
    gt_cpu_dt_softplus_bwd(draw, db, ddt, raw, bias, 2, 2, 0);
    assert_float_equal(draw[0], 1.0f / (1.0f + expf(2.5f)), 1e-6f);
    assert_float_equal(draw[3], 1.0f, 0.0f);
    assert_float_equal(db[1], draw[1] + draw[3], 1e-6f);
}

/* ---- SSD scan ---- */
static const gt_ssd_shape SH = {2, 6, 4, 3, 2, 5}; /* B T H P G S: two heads per group */
#define SH_H_MAX 4                                 /* SH's H, for arrays per head */
typedef struct scan_case {
    float *x, *dt, *A, *Bm, *Cm, *D, *up, *y, *state;
} scan_case;

static size_t n_x(void) {
    return (size_t)SH.B * SH.T * SH.H * SH.P;
}
static size_t n_dt(void) {
    return (size_t)SH.B * SH.T * SH.H;
}
static size_t n_bc(void) {
    return (size_t)SH.B * SH.T * SH.G * SH.S;
}

static double scan_loss(void *ctx) {
    scan_case *c = ctx;
    gt_cpu_ssd_scan_fwd(c->y, c->x, c->dt, c->A, c->Bm, c->Cm, c->D, SH, c->state);
    return dotd(c->up, c->y, n_x());
}

static scan_case scan_case_make(fixture *f) {
    scan_case c = {rand_buf(f, n_x(), 1.0f),  rand_buf(f, n_dt(), 0.2f),
                   rand_buf(f, SH.H, 0.5f),   rand_buf(f, n_bc(), 1.0f),
                   rand_buf(f, n_bc(), 1.0f), rand_buf(f, SH.H, 1.0f),
                   rand_buf(f, n_x(), 1.0f),  zeros(n_x()),
                   zeros((size_t)SH.P * SH.S)};
    for (size_t i = 0; i < n_dt(); i++)
        c.dt[i] = 0.3f + c.dt[i]; /* positive, as after softplus */
    for (int h = 0; h < SH.H; h++)
        c.A[h] = -0.4f - fabsf(c.A[h]); /* negative, as -exp(A_log) */
    return c;
}

static void scan_case_free(scan_case *c) {
    free(c->x), free(c->dt), free(c->A), free(c->Bm), free(c->Cm), free(c->D), free(c->up);
    free(c->y), free(c->state);
}

static void test_ssd_scan_equals_the_quadratic_form(void **state) {
    fixture *f = *state;
    scan_case c = scan_case_make(f);
    scan_loss(&c);
    /* y_t = sum_{s<=t} (C_t . B_s) exp(A sum_{r=s+1..t} dt_r) dt_s x_s + D x_t */
    double worst = 0;
    for (int b = 0; b < SH.B; b++)
        for (int h = 0; h < SH.H; h++) {
            int g = h / (SH.H / SH.G);
            for (int t = 0; t < SH.T; t++)
                for (int p = 0; p < SH.P; p++) {
                    size_t xi = (((size_t)b * SH.T + t) * SH.H + h) * SH.P + p;
                    double want = (double)c.D[h] * c.x[xi];
                    for (int s = 0; s <= t; s++) {
                        double cb = 0, decay = 0;
                        for (int k = 0; k < SH.S; k++)
                            cb += (double)c.Cm[(((size_t)b * SH.T + t) * SH.G + g) * SH.S + k] *
                                  c.Bm[(((size_t)b * SH.T + s) * SH.G + g) * SH.S + k];
                        for (int r = s + 1; r <= t; r++)
                            decay += c.dt[((size_t)b * SH.T + r) * SH.H + h];
                        size_t si = (((size_t)b * SH.T + s) * SH.H + h) * SH.P + p;
                        want += cb * exp(c.A[h] * decay) * c.dt[((size_t)b * SH.T + s) * SH.H + h] *
                                c.x[si];
                    }
                    worst = fmax(worst, fabs(want - c.y[xi]) / fmax(fabs(want), 1.0));
                }
        }
    print_message("  ssd scan vs quadratic form: max rel err %.2e\n", worst);
    assert_true(worst < 1e-5);
    scan_case_free(&c);
}

/* The scan's backward of L = sum(up * y), every gradient */
typedef struct scan_grads {
    float *dx, *ddt, *dA, *dB, *dC, *dD;
} scan_grads;

static scan_grads scan_grads_of(const scan_case *c) {
    scan_grads g = {zeros(n_x()),  zeros(n_dt()), zeros(SH.H),
                    zeros(n_bc()), zeros(n_bc()), zeros(SH.H)};
    float *scratch = zeros(gt_cpu_ssd_scan_bwd_scratch(SH));
    gt_cpu_ssd_scan_bwd(g.dx, g.ddt, g.dA, g.dB, g.dC, g.dD, c->up, c->x, c->dt, c->A, c->Bm, c->Cm,
                        c->D, SH, scratch, 0);
    free(scratch);
    return g;
}

static void scan_grads_free(scan_grads *g) {
    free(g->dx), free(g->ddt), free(g->dA), free(g->dB), free(g->dC), free(g->dD);
}

static void test_ssd_scan_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    scan_case c = scan_case_make(f);
    scan_grads g = scan_grads_of(&c);
    float *dx = g.dx, *ddt = g.ddt, *dA = g.dA, *dB = g.dB, *dC = g.dC, *dD = g.dD;
    assert_true(fd_max_err(scan_loss, &c, c.x, n_x(), dx, "ssd dx") < FD_REL_TOL);
    assert_true(fd_max_err(scan_loss, &c, c.dt, n_dt(), ddt, "ssd ddt") < FD_REL_TOL);
    assert_true(fd_max_err(scan_loss, &c, c.A, SH.H, dA, "ssd dA") < FD_REL_TOL);
    assert_true(fd_max_err(scan_loss, &c, c.Bm, n_bc(), dB, "ssd dB") < FD_REL_TOL);
    assert_true(fd_max_err(scan_loss, &c, c.Cm, n_bc(), dC, "ssd dC") < FD_REL_TOL);
    assert_true(fd_max_err(scan_loss, &c, c.D, SH.H, dD, "ssd dD") < FD_REL_TOL);
    scan_grads_free(&g);
    scan_case_free(&c);
}

/* A dL/dA is the sum over tokens of terms made of what the backward returns (mamba_terms.h),
 * the decomposition the GPU test bounds dA_log's error by */
static void test_ssd_dA_is_the_sum_of_its_token_terms(void **state) {
    fixture *f = *state;
    scan_case c = scan_case_make(f);
    scan_grads g = scan_grads_of(&c);
    float *dx = g.dx, *ddt = g.ddt, *dA = g.dA;
    double sum[SH_H_MAX], mag[SH_H_MAX];
    size_t ld = (size_t)SH.H * SH.P;
    mamba_dA_terms(sum, mag, c.dt, ddt, c.x, dx, ld, c.up, ld, c.D, (size_t)SH.B * SH.T, SH.H,
                   SH.P);
    for (int h = 0; h < SH.H; h++) {
        double want = (double)c.A[h] * dA[h];
        printf("    head %d: A dL/dA %.6e, sum of the terms %.6e (its terms' parts %.3e)\n", h,
               want, sum[h], mag[h]);
        assert_true(fabs(sum[h] - want) <= 1e-5 * mag[h]);
    }
    /* a wrong decomposition (the D skip left in dx) does not sum to it */
    for (size_t i = 0; i < n_x(); i++)
        dx[i] += c.D[(i / SH.P) % SH.H] * c.up[i];
    mamba_dA_terms(sum, mag, c.dt, ddt, c.x, dx, ld, c.up, ld, c.D, (size_t)SH.B * SH.T, SH.H,
                   SH.P);
    int off = 0;
    for (int h = 0; h < SH.H; h++)
        off += fabs(sum[h] - (double)c.A[h] * dA[h]) > 1e-3 * mag[h];
    assert_true(off > 0);
    scan_grads_free(&g);
    scan_case_free(&c);
}

/* ---- gated RMSNorm ---- */
enum { GN = 3, GC = 8, GG = 2 };
typedef struct gnorm_case {
    float *y, *z, *w, *up, *out, *rstd;
} gnorm_case;

static double gnorm_loss(void *ctx) {
    gnorm_case *c = ctx;
    gt_cpu_gated_rmsnorm_fwd(c->out, c->rstd, c->y, c->z, c->w, GN, GC, GG, 1e-5f);
    return dotd(c->up, c->out, (size_t)GN * GC);
}

static void test_gated_rmsnorm_normalizes_each_group_of_the_gated_input(void **state) {
    fixture *f = *state;
    size_t n = (size_t)GN * GC;
    gnorm_case c = {rand_buf(f, n, 1.0f),
                    rand_buf(f, n, 2.0f),
                    rand_buf(f, GC, 1.0f),
                    rand_buf(f, n, 1.0f),
                    zeros(n),
                    zeros(GN * GG)};
    gnorm_loss(&c);
    int gs = GC / GG;
    for (int i = 0; i < GN; i++)
        for (int g = 0; g < GG; g++) {
            double ss = 0, u[GC];
            for (int k = 0; k < gs; k++) {
                size_t j = (size_t)i * GC + g * gs + k;
                u[k] = c.y[j] * (c.z[j] / (1.0 + exp(-c.z[j])));
                ss += u[k] * u[k];
            }
            double r = 1.0 / sqrt(ss / gs + 1e-5);
            for (int k = 0; k < gs; k++)
                assert_float_equal(c.out[(size_t)i * GC + g * gs + k], u[k] * r * c.w[g * gs + k],
                                   1e-5);
        }
    free(c.y), free(c.z), free(c.w), free(c.up), free(c.out), free(c.rstd);
}

static void test_gated_rmsnorm_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    size_t n = (size_t)GN * GC;
    gnorm_case c = {rand_buf(f, n, 1.0f),
                    rand_buf(f, n, 2.0f),
                    rand_buf(f, GC, 1.0f),
                    rand_buf(f, n, 1.0f),
                    zeros(n),
                    zeros(GN * GG)};
    float *dy = zeros(n), *dz = zeros(n), *dw = zeros(GC);
    gnorm_loss(&c);
    gt_cpu_gated_rmsnorm_bwd(dy, dz, dw, c.up, c.y, c.z, c.w, c.rstd, GN, GC, GG, 0);
    assert_true(fd_max_err(gnorm_loss, &c, c.y, n, dy, "gated norm dy") < FD_REL_TOL);
    assert_true(fd_max_err(gnorm_loss, &c, c.z, n, dz, "gated norm dz") < FD_REL_TOL);
    assert_true(fd_max_err(gnorm_loss, &c, c.w, GC, dw, "gated norm dw") < FD_REL_TOL);
    free(c.y), free(c.z), free(c.w), free(c.up), free(c.out), free(c.rstd);
    free(dy), free(dz), free(dw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conv1d_backward_matches_finite_differences, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_conv1d_is_causal_and_aligned_like_pytorch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_dt_softplus_follows_pytorch_and_its_backward_matches,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ssd_scan_equals_the_quadratic_form, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ssd_dA_is_the_sum_of_its_token_terms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ssd_scan_backward_matches_finite_differences, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gated_rmsnorm_normalizes_each_group_of_the_gated_input,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_gated_rmsnorm_backward_matches_finite_differences,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
