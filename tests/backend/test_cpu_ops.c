/* CPU reference dense ops: forward results against hand/naive computations, every backward
 * against central finite differences of L = sum(upstream * output), dropout masks, and shape
 * errors reported through the sticky error. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/philox.h"

#define FD_EPS 1e-3f
#define FD_REL_TOL 1e-2
/* gradients smaller than this are compared absolutely (FD noise of fp32 outputs ~1e-4) */
#define FD_FLOOR 0.1

#include "cpu_op_fixture.h"

static int setup(void **state) {
    return fixture_setup(state, 12345u);
}

static int teardown(void **state) {
    return fixture_teardown(state, 0);
}

/* ---------------- embedding ---------------- */

static void test_embedding_gathers_rows_and_backward_sums_repeated_tokens(void **state) {
    fixture *f = *state;
    const int V = 5, d = 3, N = 4;
    int32_t tok[4] = {2, 0, 2, 4};
    float *wte = rand_buf(f, (size_t)V * d, 1), *out = zeros((size_t)N * d);
    float *dout = rand_buf(f, (size_t)N * d, 1), *dwte = zeros((size_t)V * d);
    dwte[3] = 1.5f; /* row 1 must keep its old value: += */
    f->b->ops->embedding_fwd(f->b, f->s, out, tok, wte, N, d);
    f->b->ops->embedding_bwd(f->b, f->s, dwte, NULL, dout, tok, N, V, d, 0);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < d; i++)
            assert_true(out[n * d + i] == wte[tok[n] * d + i]);
    for (int i = 0; i < d; i++) {
        assert_true(dwte[0 * d + i] == dout[1 * d + i]);
        assert_float_equal(dwte[2 * d + i], dout[0 * d + i] + dout[2 * d + i], 1e-6);
        assert_true(dwte[4 * d + i] == dout[3 * d + i]);
        assert_true(dwte[3 * d + i] == 0.0f);
    }
    assert_true(dwte[1 * d + 0] == 1.5f);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_OK);
    free(wte), free(out), free(dout), free(dwte);
}

static void test_embedding_rejects_token_outside_vocabulary(void **state) {
    fixture *f = *state;
    int32_t tok[2] = {1, 7};
    float wte[6] = {0}, dwte[6] = {0}, dout[4] = {1, 1, 1, 1};
    f->b->ops->embedding_bwd(f->b, f->s, dwte, NULL, dout, tok, 2, 3, 2, 0);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "vocab"));
    (void)wte;
}

/* Overwriting with row marks zeroes only the marked rows and clears their marks, marks every
 * row summed into, and gives the bits of overwriting without marks when the unmarked rows are
 * zero; an accumulating call leaves the marked rows' old values and adds. */
static void test_embedding_backward_keeps_row_marks(void **state) {
    fixture *f = *state;
    const int V = 6, d = 3, N = 4;
    int32_t tok[4] = {4, 1, 4, 2};
    float *dout = rand_buf(f, (size_t)N * d, 1), *plain = zeros((size_t)V * d);
    float *marked = zeros((size_t)V * d);
    uint8_t dirty[6] = {0, 0, 0, 1, 0, 1}; /* rows 3 and 5 hold old values */
    for (int i = 0; i < d; i++)
        marked[3 * d + i] = 2.0f, marked[5 * d + i] = -1.0f, plain[3 * d + i] = 9.0f;
    f->b->ops->embedding_bwd(f->b, f->s, plain, NULL, dout, tok, N, V, d, 1);
    f->b->ops->embedding_bwd(f->b, f->s, marked, dirty, dout, tok, N, V, d, 1);
    assert_memory_equal(marked, plain, (size_t)V * d * sizeof(float));
    const uint8_t want[6] = {0, 1, 1, 0, 1, 0};
    assert_memory_equal(dirty, want, sizeof want);
    f->b->ops->embedding_bwd(f->b, f->s, marked, dirty, dout, tok, N, V, d, 0);
    for (int i = 0; i < d; i++) {
        assert_true(marked[1 * d + i] == dout[1 * d + i] + dout[1 * d + i]);
        assert_true(marked[0 * d + i] == 0.0f);
    }
    assert_memory_equal(dirty, want, sizeof want);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_OK);
    free(dout), free(plain), free(marked);
}

typedef struct emb_ctx {
    fixture *f;
    float *wte, *out, *g;
    const int32_t *tok;
    int N, V, d;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    c->f->b->ops->embedding_fwd(c->f->b, c->f->s, c->out, c->tok, c->wte, c->N, c->d);
    return dotd(c->g, c->out, (size_t)c->N * c->d);
}

static void test_embedding_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    static const int32_t tok[6] = {3, 1, 3, 0, 3, 1}; /* token 2 unused: zero gradient */
    emb_ctx c = {f, rand_buf(f, 4 * 5, 1), zeros(6 * 5), rand_buf(f, 6 * 5, 1), tok, 6, 4, 5};
    float *dwte = zeros(4 * 5);
    f->b->ops->embedding_bwd(f->b, f->s, dwte, NULL, c.g, tok, c.N, c.V, c.d, 0);
    assert_true(fd_max_err(emb_loss, &c, c.wte, 4 * 5, dwte, "embedding dwte") < FD_REL_TOL);
    free(c.wte), free(c.out), free(c.g), free(dwte);
}

/* ---------------- rmsnorm ---------------- */

typedef struct rms_ctx {
    fixture *f;
    float *x, *w, *out, *rstd, *g;
    int N, d;
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    c->f->b->ops->rmsnorm_fwd(c->f->b, c->f->s, c->out, c->rstd, c->x, c->w, c->N, c->d, 1e-5f);
    return dotd(c->g, c->out, (size_t)c->N * c->d);
}

static void
test_rmsnorm_forward_matches_formula_and_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    const int N = 3, d = 8;
    rms_ctx c = {f,
                 rand_buf(f, N * d, 1.5f),
                 rand_buf(f, d, 1),
                 zeros(N * d),
                 zeros(N),
                 rand_buf(f, N * d, 1),
                 N,
                 d};
    rms_loss(&c);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < d; i++)
            ss += (double)c.x[n * d + i] * c.x[n * d + i];
        double r = 1.0 / sqrt(ss / d + 1e-5);
        assert_float_equal(c.rstd[n], r, 1e-5 * r);
        for (int i = 0; i < d; i++)
            assert_float_equal(c.out[n * d + i], c.x[n * d + i] * r * c.w[i], 1e-5);
    }
    float *dx = zeros(N * d), *dw = zeros(d);
    f->b->ops->rmsnorm_bwd(f->b, f->s, dx, dw, c.g, c.x, c.w, c.rstd, N, d, 1);
    assert_true(fd_max_err(rms_loss, &c, c.x, N * d, dx, "rmsnorm dinp") < FD_REL_TOL);
    assert_true(fd_max_err(rms_loss, &c, c.w, d, dw, "rmsnorm dw") < FD_REL_TOL);
    /* both outputs accumulate */
    float dx0 = dx[0], dw0 = dw[0];
    f->b->ops->rmsnorm_bwd(f->b, f->s, dx, dw, c.g, c.x, c.w, c.rstd, N, d, 1);
    assert_float_equal(dx[0], 2 * dx0, 1e-5);
    assert_float_equal(dw[0], 2 * dw0, 1e-5);
    /* accumulate 0 overwrites dw (whatever it held) and still adds into dinp */
    for (int i = 0; i < d; i++)
        dw[i] = NAN;
    f->b->ops->rmsnorm_bwd(f->b, f->s, dx, dw, c.g, c.x, c.w, c.rstd, N, d, 0);
    assert_true(dw[0] == dw0);
    assert_float_equal(dx[0], 3 * dx0, 1e-5);
    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.g), free(dx), free(dw);
}

/* The weight gradient in two steps: gt_rmsnorm_parts(N) partial rows, then colsum_many over
 * an overwriting and an accumulating job, gives rmsnorm_bwd's dinp and dw bit for bit; too
 * many jobs in one call are refused by name. */
static void test_rmsnorm_partial_rows_and_colsum_many_give_rmsnorm_bwd(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    const int N = 37, d = 24;
    int parts = gt_rmsnorm_parts(N);
    assert_int_equal(parts, 10); /* rows of 4 below N = 2048 */
    assert_int_equal(gt_rmsnorm_parts(8192), GT_RMSNORM_PARTS_MAX);
    assert_int_equal(gt_rmsnorm_parts(2049), 257);
    for (int n = 1; n <= 9000; n += 7) /* the bound holds for every smaller shape */
        assert_true(gt_rmsnorm_parts(n) <= gt_rmsnorm_parts_bound(9000));
    float *x = rand_buf(f, N * d, 1.5f), *w = rand_buf(f, d, 1), *g = rand_buf(f, N * d, 1);
    float *rstd = zeros(N), *y = zeros(N * d);
    b->ops->rmsnorm_fwd(b, f->s, y, rstd, x, w, N, d, 1e-5f);
    float *dx1 = rand_buf(f, N * d, 1), *dx2 = malloc((size_t)N * d * 4);
    memcpy(dx2, dx1, (size_t)N * d * 4);
    float *dw_acc = rand_buf(f, d, 1), *dw_acc2 = malloc((size_t)d * 4), *dw_set = zeros(d);
    float *dw_ref = zeros(d), *part = rand_buf(f, parts * d, 1);
    memcpy(dw_acc2, dw_acc, (size_t)d * 4);
    for (int i = 0; i < d; i++)
        dw_set[i] = NAN;
    b->ops->rmsnorm_bwd(b, f->s, dx1, dw_acc, g, x, w, rstd, N, d, 1);
    b->ops->rmsnorm_bwd(b, f->s, dx1, dw_ref, g, x, w, rstd, N, d, 0); /* dinp twice */
    b->ops->rmsnorm_bwd_part(b, f->s, dx2, dx2, part, g, x, w, rstd, N, d);
    b->ops->rmsnorm_bwd_part(b, f->s, dx2, dx2, part, g, x, w, rstd, N, d);
    gt_colsum_job jobs[2] = {{dw_set, part, parts, d, 0}, {dw_acc2, part, parts, d, 1}};
    b->ops->colsum_many(b, f->s, jobs, 2);
    assert_memory_equal(dx1, dx2, (size_t)N * d * 4);
    assert_memory_equal(dw_ref, dw_set, (size_t)d * 4);
    assert_memory_equal(dw_acc, dw_acc2, (size_t)d * 4);
    gt_colsum_job many[GT_COLSUM_MAX_JOBS + 1];
    for (int j = 0; j <= GT_COLSUM_MAX_JOBS; j++)
        many[j] = jobs[0];
    b->ops->colsum_many(b, f->s, many, GT_COLSUM_MAX_JOBS + 1);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "colsum_many"));
    free(x), free(w), free(g), free(rstd), free(y), free(dx1), free(dx2), free(dw_acc);
    free(dw_acc2), free(dw_set), free(dw_ref), free(part);
}

/* The residual stream's gradient is written over the activation the norm reads: out = din +
 * dx with out aliasing inp (or din) gives what separate buffers give, bit for bit; din NULL
 * counts as zeros. */
static void test_rmsnorm_bwd_part_may_write_over_its_input(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    const int N = 6, d = 40, parts = gt_rmsnorm_parts(N);
    float *x = rand_buf(f, N * d, 1.5f), *w = rand_buf(f, d, 1), *g = rand_buf(f, N * d, 1);
    float *din = rand_buf(f, N * d, 1), *rstd = zeros(N), *y = zeros(N * d);
    b->ops->rmsnorm_fwd(b, f->s, y, rstd, x, w, N, d, 1e-5f);
    float *sep = zeros(N * d), *part_sep = zeros(parts * d), *part_al = zeros(parts * d);
    float *alias = malloc((size_t)N * d * 4), *zero_in = zeros(N * d), *from0 = zeros(N * d);
    float *part0 = zeros(parts * d), *nul = rand_buf(f, N * d, 1);
    memcpy(alias, x, (size_t)N * d * 4);
    b->ops->rmsnorm_bwd_part(b, f->s, sep, din, part_sep, g, x, w, rstd, N, d);
    b->ops->rmsnorm_bwd_part(b, f->s, alias, din, part_al, g, alias, w, rstd, N, d);
    assert_memory_equal(sep, alias, (size_t)N * d * 4);
    assert_memory_equal(part_sep, part_al, (size_t)parts * d * 4);
    assert_memory_not_equal(sep, x, (size_t)N * d * 4);
    b->ops->rmsnorm_bwd_part(b, f->s, from0, zero_in, part0, g, x, w, rstd, N, d);
    b->ops->rmsnorm_bwd_part(b, f->s, nul, NULL, part0, g, x, w, rstd, N, d);
    assert_memory_equal(from0, nul, (size_t)N * d * 4);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(b, &err), GT_OK);
    free(x), free(w), free(g), free(din), free(rstd), free(y), free(sep), free(part_sep);
    free(part_al), free(alias), free(zero_in), free(from0), free(part0), free(nul);
}

/* ---------------- matmul ---------------- */

typedef struct mm_ctx {
    fixture *f;
    float *a, *w, *bias, *out, *g;
    int M, N, K;
} mm_ctx;

static double mm_loss(void *p) {
    mm_ctx *c = p;
    c->f->b->ops->matmul_fwd(c->f->b, c->f->s, c->out, c->a, c->w, c->bias, NULL, c->M, c->N, c->K);
    return dotd(c->g, c->out, (size_t)c->M * c->N);
}

static void test_matmul_with_bias_forward_and_backward_match_reference(void **state) {
    fixture *f = *state;
    const int M = 4, N = 5, K = 6;
    mm_ctx c = {f,
                rand_buf(f, M * K, 1),
                rand_buf(f, N * K, 1),
                rand_buf(f, N, 1),
                zeros(M * N),
                rand_buf(f, M * N, 1),
                M,
                N,
                K};
    mm_loss(&c);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = c.bias[n];
            for (int k = 0; k < K; k++)
                ref += (double)c.a[m * K + k] * c.w[n * K + k];
            assert_float_equal(c.out[m * N + n], ref, 1e-5);
        }
    float *da = rand_buf(f, M * K, 1), *dw = zeros(N * K), *db = zeros(N);
    f->b->ops->matmul_bwd_data(f->b, f->s, da, c.g, c.w, M, N, K, 0); /* overwrites */
    f->b->ops->matmul_bwd_weight(f->b, f->s, dw, db, c.g, c.a, M, N, K, 1);
    assert_true(fd_max_err(mm_loss, &c, c.a, M * K, da, "matmul da") < FD_REL_TOL);
    assert_true(fd_max_err(mm_loss, &c, c.w, N * K, dw, "matmul dw") < FD_REL_TOL);
    assert_true(fd_max_err(mm_loss, &c, c.bias, N, db, "matmul dbias") < FD_REL_TOL);
    /* accumulate flag for da; weight gradients always accumulate */
    float da0 = da[0], dw0 = dw[0], db0 = db[0];
    f->b->ops->matmul_bwd_data(f->b, f->s, da, c.g, c.w, M, N, K, 1);
    f->b->ops->matmul_bwd_weight(f->b, f->s, dw, db, c.g, c.a, M, N, K, 1);
    assert_float_equal(da[0], 2 * da0, 1e-5);
    assert_float_equal(dw[0], 2 * dw0, 1e-5);
    assert_float_equal(db[0], 2 * db0, 1e-5);
    /* accumulate 0 overwrites both weight gradients, whatever they held */
    for (int i = 0; i < N * K; i++)
        dw[i] = NAN;
    for (int i = 0; i < N; i++)
        db[i] = NAN;
    f->b->ops->matmul_bwd_weight(f->b, f->s, dw, db, c.g, c.a, M, N, K, 0);
    assert_true(dw[0] == dw0 && db[0] == db0);
    /* a residual given to the forward is added to its output: out + res exactly */
    float *res = rand_buf(f, M * N, 1), *with = zeros(M * N);
    mm_loss(&c); /* c.out of the unperturbed inputs */
    f->b->ops->matmul_fwd(f->b, f->s, with, c.a, c.w, c.bias, res, M, N, K);
    for (int i = 0; i < M * N; i++)
        assert_true(with[i] == c.out[i] + res[i]);
    free(res), free(with);
    free(c.a), free(c.w), free(c.bias), free(c.out), free(c.g), free(da), free(dw), free(db);
}

/* A batch of weight gradients at equal strides is the same as one call per member, bit for
 * bit, overwriting or accumulating; a bad count or stride is an error that names the op. */
static void test_batched_weight_gradients_equal_one_call_each(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    enum { M = 5, N = 4, K = 3, CNT = 3, SW = N * K + 2, SD = M * N + 1, SA = M * K + 3 };
    float *dout = rand_buf(f, CNT * SD, 1), *a = rand_buf(f, CNT * SA, 1);
    float *one = rand_buf(f, CNT * SW, 1), *all = malloc(CNT * SW * sizeof(float));
    for (int acc = 1; acc >= 0; acc--) {
        memcpy(all, one, CNT * SW * sizeof(float));
        for (int i = 0; i < CNT; i++)
            b->ops->matmul_bwd_weight(b, f->s, one + i * SW, NULL, dout + i * SD, a + i * SA, M, N,
                                      K, acc);
        b->ops->matmul_bwd_weight_batched(b, f->s, all, SW, dout, SD, a, SA, M, N, K, CNT, acc);
        assert_memory_equal(one, all, CNT * SW * sizeof(float));
    }
    gt_error err = {0};
    assert_int_equal(gt_backend_check(b, &err), GT_OK);
    b->ops->matmul_bwd_weight_batched(b, f->s, all, 0, dout, SD, a, SA, M, N, K, CNT, 0);
    assert_int_equal(gt_backend_check(b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "matmul_bwd_weight_batched"));
    assert_non_null(strstr(err.msg, "strides"));
    free(dout), free(a), free(one), free(all);
}

/* ---------------- rope ---------------- */

typedef struct rope_ctx {
    fixture *f;
    float *qkv, *tmp, *g;
    int B, T, H, KV, hd;
} rope_ctx;

static size_t rope_n(const rope_ctx *c) {
    return (size_t)c->B * c->T * (c->H + 2 * c->KV) * c->hd;
}

static double rope_loss(void *p) {
    rope_ctx *c = p;
    memcpy(c->tmp, c->qkv, rope_n(c) * sizeof(float));
    c->f->b->ops->rope_fwd(c->f->b, c->f->s, c->tmp, c->B, c->T, c->H, c->KV, c->hd, 10000.0f);
    return dotd(c->g, c->tmp, rope_n(c));
}

static void test_rope_rotates_q_and_k_only_and_backward_is_the_adjoint(void **state) {
    fixture *f = *state;
    rope_ctx c = {f, NULL, NULL, NULL, 2, 4, 2, 1, 8};
    size_t n = rope_n(&c);
    int C = (c.H + 2 * c.KV) * c.hd, half = c.hd / 2;
    c.qkv = rand_buf(f, n, 1), c.tmp = zeros(n), c.g = rand_buf(f, n, 1);
    rope_loss(&c);
    for (int t = 0; t < c.T; t++) {
        const float *x = c.qkv + (size_t)t * C, *y = c.tmp + (size_t)t * C;
        /* pair (1, 1+half) of head 0 rotated by t * theta^(-2/hd) */
        double ang = t * pow(10000.0, -2.0 / c.hd), c0 = cos(ang), s0 = sin(ang);
        assert_float_equal(y[1], x[1] * c0 - x[1 + half] * s0, 1e-5);
        assert_float_equal(y[1 + half], x[1] * s0 + x[1 + half] * c0, 1e-5);
        for (int i = (c.H + c.KV) * c.hd; i < C; i++)
            assert_true(y[i] == x[i]); /* v intact */
        if (t == 0)
            for (int i = 0; i < C; i++)
                assert_float_equal(y[i], x[i], 1e-7);
    }
    float *dq = zeros(n);
    memcpy(dq, c.g, n * sizeof(float));
    f->b->ops->rope_bwd(f->b, f->s, dq, c.B, c.T, c.H, c.KV, c.hd, 10000.0f);
    assert_true(fd_max_err(rope_loss, &c, c.qkv, n, dq, "rope dqkv") < FD_REL_TOL);
    free(c.qkv), free(c.tmp), free(c.g), free(dq);
}

/* ---------------- swiglu ---------------- */

typedef struct swiglu_ctx {
    fixture *f;
    float *gu, *out, *g;
    int N, F;
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    c->f->b->ops->swiglu_fwd(c->f->b, c->f->s, c->out, c->gu, c->N, c->F);
    return dotd(c->g, c->out, (size_t)c->N * c->F);
}

static void test_swiglu_gate_first_and_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    swiglu_ctx c = {f, rand_buf(f, 3 * 2 * 5, 2), zeros(3 * 5), rand_buf(f, 3 * 5, 1), 3, 5};
    swiglu_loss(&c);
    for (int n = 0; n < c.N; n++)
        for (int i = 0; i < c.F; i++) {
            double g = c.gu[n * 2 * c.F + i], u = c.gu[n * 2 * c.F + c.F + i];
            assert_float_equal(c.out[n * c.F + i], g / (1 + exp(-g)) * u, 1e-5);
        }
    float *dgu = zeros(3 * 2 * 5);
    f->b->ops->swiglu_bwd(f->b, f->s, dgu, c.g, c.gu, c.N, c.F);
    assert_true(fd_max_err(swiglu_loss, &c, c.gu, 30, dgu, "swiglu dgu") < FD_REL_TOL);
    free(c.gu), free(c.out), free(c.g), free(dgu);
}

/* ---------------- cross entropy ---------------- */

typedef struct ce_ctx {
    fixture *f;
    float *logits, *losses;
    int32_t *targets;
    int N, V;
} ce_ctx;

static double ce_loss(void *p) {
    ce_ctx *c = p;
    c->f->b->ops->cross_entropy(c->f->b, c->f->s, c->losses, NULL, c->logits, c->targets, c->N,
                                c->V, 1.0f);
    double s = 0;
    for (int n = 0; n < c->N; n++)
        s += c->losses[n];
    return s;
}

static void test_cross_entropy_loss_gradient_and_ignored_targets(void **state) {
    fixture *f = *state;
    const int N = 4, V = 7;
    int32_t tgt[4] = {3, -1, 0, 6};
    ce_ctx c = {f, rand_buf(f, N * V, 3), zeros(N), tgt, N, V};
    c.logits[2 * V + 5] = 80.0f; /* large logit: the softmax must stay finite */
    ce_loss(&c);
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) {
            assert_true(c.losses[n] == 0.0f);
            continue;
        }
        double mx = -1e30, s = 0;
        for (int v = 0; v < V; v++)
            mx = fmax(mx, c.logits[n * V + v]);
        for (int v = 0; v < V; v++)
            s += exp(c.logits[n * V + v] - mx);
        assert_float_equal(c.losses[n], mx + log(s) - c.logits[n * V + tgt[n]], 1e-4);
    }
    assert_true(isfinite(c.losses[2]) && c.losses[2] > 70.0f);
    /* dlogits aliasing logits, scaled by dscale */
    const float dscale = 0.25f;
    float *dl = malloc(N * V * sizeof(float)), *dummy = zeros(N);
    memcpy(dl, c.logits, N * V * sizeof(float));
    f->b->ops->cross_entropy(f->b, f->s, dummy, dl, dl, tgt, N, V, dscale);
    for (int v = 0; v < V; v++)
        assert_true(dl[1 * V + v] == 0.0f); /* ignored row */
    for (int i = 0; i < N; i++)
        assert_true(dummy[i] == c.losses[i]);
    for (int i = 0; i < N * V; i++)
        dl[i] /= dscale;
    assert_true(fd_max_err(ce_loss, &c, c.logits, N * V, dl, "cross_entropy dlogits") < FD_REL_TOL);
    free(c.logits), free(c.losses), free(dl), free(dummy);
}

static void test_loss_accumulate_adds_scaled_sum_to_step_state(void **state) {
    fixture *f = *state;
    float losses[3] = {1.0f, 2.0f, 4.5f};
    f->st.loss = 0.5f;
    f->b->ops->loss_accumulate(f->b, f->s, &f->st, losses, 3, 0.5f);
    assert_float_equal(f->st.loss, 0.5f + 0.5f * 7.5f, 1e-6);
}

static void test_add_allows_aliasing_output(void **state) {
    fixture *f = *state;
    float a[3] = {1, 2, 3}, x[3] = {10, 20, 30};
    f->b->ops->add(f->b, f->s, a, a, x, 3);
    assert_true(a[0] == 11 && a[1] == 22 && a[2] == 33);
}

/* ---------------- dropout ---------------- */

static void test_dropout_backward_uses_forward_mask_and_mask_depends_on_step(void **state) {
    fixture *f = *state;
    const size_t n = 4000;
    const float p = 0.25f;
    gt_rng_site site = {777, 3, 0};
    float *x = rand_buf(f, n, 1), *y = zeros(n), *dy = zeros(n), *ones = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        ones[i] = 1.0f, x[i] += 2.0f; /* x never 0 */
    f->st.step = 5;
    f->st.micro = 1;
    f->b->ops->dropout_fwd(f->b, f->s, y, x, n, p, site, &f->st);
    f->b->ops->dropout_bwd(f->b, f->s, dy, ones, n, p, site, &f->st);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = gt_dropout_keep(site.seed, site.site, 1, 5, i, p);
        assert_int_equal(keep, y[i] != 0.0f);
        assert_int_equal(keep, dy[i] != 0.0f);
        if (keep) {
            kept++;
            assert_float_equal(y[i], x[i] / (1 - p), 1e-6);
            assert_float_equal(dy[i], 1 / (1 - p), 1e-6);
        }
    }
    assert_true(kept > n * 0.70 && kept < n * 0.80);
    /* a new step, a new micro-batch or another site draws another mask */
    float *y2 = zeros(n);
    f->st.step = 6;
    f->b->ops->dropout_fwd(f->b, f->s, y2, x, n, p, site, &f->st);
    assert_memory_not_equal(y, y2, n * sizeof(float));
    f->st.step = 5;
    f->st.micro = 2;
    f->b->ops->dropout_fwd(f->b, f->s, y2, x, n, p, site, &f->st);
    assert_memory_not_equal(y, y2, n * sizeof(float));
    f->st.micro = 1;
    f->b->ops->dropout_fwd(f->b, f->s, y2, x, n, p, site, &f->st);
    assert_memory_equal(y, y2, n * sizeof(float));
    /* in place */
    f->b->ops->dropout_fwd(f->b, f->s, x, x, n, p, site, &f->st);
    assert_memory_equal(y, x, n * sizeof(float));
    free(x), free(y), free(dy), free(ones), free(y2);
}

static void test_dropout_rejects_probability_one(void **state) {
    fixture *f = *state;
    float x[4] = {1, 2, 3, 4};
    gt_rng_site site = {1, 1, 0};
    f->b->ops->dropout_fwd(f->b, f->s, x, x, 4, 1.0f, site, &f->st);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "dropout"));
    assert_true(x[0] == 1.0f);
}

/* ---------------- attention ---------------- */

typedef struct attn_ctx {
    fixture *f;
    float *qkv, *out, *lse, *g;
    int B, T, H, KV, hd;
    float p;
    gt_rng_site site;
} attn_ctx;

static size_t attn_nqkv(const attn_ctx *c) {
    return (size_t)c->B * c->T * (c->H + 2 * c->KV) * c->hd;
}
static size_t attn_nout(const attn_ctx *c) {
    return (size_t)c->B * c->T * c->H * c->hd;
}

static double attn_loss(void *p) {
    attn_ctx *c = p;
    c->f->b->ops->attention_fwd(c->f->b, c->f->s, c->out, c->lse, c->qkv, c->B, c->T, c->H, c->KV,
                                c->hd, c->p, c->site, &c->f->st);
    return dotd(c->g, c->out, attn_nout(c));
}

static attn_ctx attn_make(fixture *f, int B, int T, int H, int KV, int hd, float p) {
    attn_ctx c = {f, NULL, NULL, NULL, NULL, B, T, H, KV, hd, p, {99, 7, 0}};
    c.qkv = rand_buf(f, attn_nqkv(&c), 1.5f);
    c.out = zeros(attn_nout(&c));
    c.lse = zeros((size_t)B * H * T);
    c.g = rand_buf(f, attn_nout(&c), 1);
    return c;
}

static void attn_free(attn_ctx *c) {
    free(c->qkv), free(c->out), free(c->lse), free(c->g);
}

/* Independent naive reference: explicit score matrix, softmax, kept mask, weighted sum. */
static void attn_reference(const attn_ctx *c, const gt_step_state *st, double *out, double *lse) {
    int C = (c->H + 2 * c->KV) * c->hd, grp = c->H / c->KV;
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->T; i++) {
                double sc[64], mx = -1e300, sum = 0;
                const float *q = c->qkv + (size_t)(b * c->T + i) * C + h * c->hd;
                for (int j = 0; j <= i; j++) {
                    const float *k = c->qkv + (size_t)(b * c->T + j) * C + (c->H + h / grp) * c->hd;
                    sc[j] = 0;
                    for (int d = 0; d < c->hd; d++)
                        sc[j] += (double)q[d] * k[d];
                    sc[j] /= sqrt((double)c->hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(sc[j] - mx);
                // cppcheck-suppress invalidFunctionArg ; j = 0..i runs at least once: sum >= 1
                lse[(b * c->H + h) * c->T + i] = mx + log(sum);
                double *o = out + (size_t)(b * c->T + i) * c->H * c->hd + h * c->hd;
                for (int d = 0; d < c->hd; d++)
                    o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    // cppcheck-suppress uninitvar ; sc[0..i] were set by the first loop
                    double pr = exp(sc[j] - mx) / sum;
                    if (c->p > 0) {
                        uint64_t idx = (((uint64_t)b * c->H + h) * c->T + i) * c->T + j;
                        pr = gt_dropout_keep(c->site.seed, c->site.site, (uint32_t)st->micro,
                                             (uint32_t)st->step, idx, c->p)
                                 ? pr / (1 - c->p)
                                 : 0;
                    }
                    const float *v =
                        c->qkv + (size_t)(b * c->T + j) * C + (c->H + c->KV + h / grp) * c->hd;
                    for (int d = 0; d < c->hd; d++)
                        o[d] += pr * v[d];
                }
            }
}

static void attn_check_forward(attn_ctx *c) {
    attn_loss(c);
    double *ro = calloc(attn_nout(c), sizeof(double));
    double *rl = calloc((size_t)c->B * c->H * c->T, sizeof(double));
    attn_reference(c, &c->f->st, ro, rl);
    for (size_t i = 0; i < attn_nout(c); i++)
        assert_float_equal(c->out[i], ro[i], 1e-5);
    for (int i = 0; i < c->B * c->H * c->T; i++)
        assert_float_equal(c->lse[i], rl[i], 1e-5);
    free(ro), free(rl);
}

static void attn_check_backward(attn_ctx *c, const char *what) {
    attn_loss(c);
    float *dqkv = rand_buf(c->f, attn_nqkv(c), 1); /* overwritten */
    c->f->b->ops->attention_bwd(c->f->b, c->f->s, dqkv, c->g, c->qkv, c->out, c->lse, c->B, c->T,
                                c->H, c->KV, c->hd, c->p, c->site, &c->f->st);
    assert_true(fd_max_err(attn_loss, c, c->qkv, attn_nqkv(c), dqkv, what) < FD_REL_TOL);
    free(dqkv);
}

static void test_attention_gqa_forward_matches_naive_reference(void **state) {
    fixture *f = *state;
    attn_ctx c = attn_make(f, 2, 5, 4, 2, 4, 0.0f);
    attn_check_forward(&c);
    attn_free(&c);
}

static void test_attention_is_causal(void **state) {
    fixture *f = *state;
    attn_ctx c = attn_make(f, 1, 4, 2, 1, 4, 0.0f);
    attn_loss(&c);
    float *before = malloc(attn_nout(&c) * sizeof(float));
    memcpy(before, c.out, attn_nout(&c) * sizeof(float));
    int C = (c.H + 2 * c.KV) * c.hd;
    for (int i = 0; i < C; i++)
        c.qkv[3 * C + i] += 1.0f; /* change the last token only */
    attn_loss(&c);
    size_t first3 = (size_t)3 * c.H * c.hd;
    assert_memory_equal(before, c.out, first3 * sizeof(float));
    assert_memory_not_equal(before + first3, c.out + first3, (size_t)c.H * c.hd * sizeof(float));
    free(before);
    attn_free(&c);
}

static void test_attention_gqa_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    attn_ctx c = attn_make(f, 2, 5, 4, 2, 4, 0.0f);
    attn_check_backward(&c, "attention gqa dqkv");
    attn_free(&c);
}

static void test_attention_with_dropout_uses_same_mask_forward_and_backward(void **state) {
    fixture *f = *state;
    f->st.step = 3;
    f->st.micro = 1;
    attn_ctx c = attn_make(f, 2, 6, 4, 2, 4, 0.3f);
    attn_check_forward(&c);
    attn_check_backward(&c, "attention dropout dqkv");
    /* the mask actually dropped something: output differs from the p = 0 output */
    float *with = malloc(attn_nout(&c) * sizeof(float));
    memcpy(with, c.out, attn_nout(&c) * sizeof(float));
    c.p = 0;
    attn_loss(&c);
    assert_memory_not_equal(with, c.out, attn_nout(&c) * sizeof(float));
    free(with);
    attn_free(&c);
}

static void test_attention_rejects_heads_not_multiple_of_kv_heads(void **state) {
    fixture *f = *state;
    float buf[64] = {0}, lse[8] = {0};
    gt_rng_site site = {0, 0, 0};
    f->b->ops->attention_fwd(f->b, f->s, buf, lse, buf, 1, 2, 3, 2, 2, 0, site, &f->st);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "num_query_groups"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_embedding_gathers_rows_and_backward_sums_repeated_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedding_backward_keeps_row_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedding_backward_matches_finite_differences, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_embedding_rejects_token_outside_vocabulary, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_rmsnorm_forward_matches_formula_and_backward_matches_finite_differences, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_rmsnorm_partial_rows_and_colsum_many_give_rmsnorm_bwd,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_rmsnorm_bwd_part_may_write_over_its_input, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_batched_weight_gradients_equal_one_call_each, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_matmul_with_bias_forward_and_backward_match_reference,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_rope_rotates_q_and_k_only_and_backward_is_the_adjoint,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_swiglu_gate_first_and_backward_matches_finite_differences, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_entropy_loss_gradient_and_ignored_targets, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_loss_accumulate_adds_scaled_sum_to_step_state, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_add_allows_aliasing_output, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_dropout_backward_uses_forward_mask_and_mask_depends_on_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropout_rejects_probability_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_gqa_forward_matches_naive_reference, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_attention_is_causal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_gqa_backward_matches_finite_differences,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_attention_with_dropout_uses_same_mask_forward_and_backward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_rejects_heads_not_multiple_of_kv_heads,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
