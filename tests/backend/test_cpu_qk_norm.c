/* The CPU reference of the per-head q/k RMSNorm (model.qk_layernorm): the forward normalizes
 * each q head with the q weights and each k head with the k weights, leaves v alone and keeps
 * the raw values and 1/rms; the backward matches central finite differences of
 * L = sum(upstream * output) for the input and both weights; a backward without the kept
 * values is refused by name. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

#define FD_EPS 1e-3f
#define FD_REL_TOL 1e-2
#define FD_FLOOR 0.1

#include "cpu_op_fixture.h"

enum { N = 3, H = 4, KV = 2, HD = 8, ROW = (H + 2 * KV) * HD, HEADS = H + KV };

static int setup(void **state) {
    return fixture_setup(state, 4242u);
}

static int teardown(void **state) {
    return fixture_teardown(state, 0);
}

typedef struct qk_ctx {
    fixture *f;
    float *x, *qw, *kw, *out, *raw, *rstd, *g;
} qk_ctx;

static double qk_loss(void *p) {
    qk_ctx *c = p;
    memcpy(c->out, c->x, sizeof(float) * N * ROW);
    c->f->b->ops->qk_norm_fwd(c->f->b, c->f->s, c->out, c->raw, c->rstd, c->qw, c->kw, N, H, KV, HD,
                              1e-6f);
    return dotd(c->g, c->out, (size_t)N * ROW);
}

static qk_ctx make_ctx(fixture *f) {
    qk_ctx c = {f,
                rand_buf(f, N * ROW, 2.0f),
                rand_buf(f, HD, 1.5f),
                rand_buf(f, HD, 1.5f),
                zeros(N * ROW),
                zeros(N * HEADS * HD),
                zeros(N * HEADS),
                rand_buf(f, N * ROW, 1)};
    return c;
}

static void free_ctx(qk_ctx *c) {
    free(c->x), free(c->qw), free(c->kw), free(c->out), free(c->raw), free(c->rstd), free(c->g);
}

static void test_qk_norm_normalizes_each_q_and_k_head_with_its_weights_and_keeps_v(void **state) {
    fixture *f = *state;
    qk_ctx c = make_ctx(f);
    qk_loss(&c);
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H + 2 * KV; h++) {
            const float *x = c.x + n * ROW + h * HD, *y = c.out + n * ROW + h * HD;
            if (h >= HEADS) { /* v heads */
                for (int i = 0; i < HD; i++)
                    assert_true(y[i] == x[i]);
                continue;
            }
            double ss = 0;
            for (int i = 0; i < HD; i++)
                ss += (double)x[i] * x[i];
            double r = 1.0 / sqrt(ss / HD + 1e-6);
            const float *w = h < H ? c.qw : c.kw;
            assert_float_equal(c.rstd[n * HEADS + h], r, 1e-5 * r);
            for (int i = 0; i < HD; i++) {
                assert_float_equal(y[i], x[i] * r * w[i], 1e-5);
                assert_true(c.raw[(n * HEADS + h) * HD + i] == x[i]);
            }
        }
    free_ctx(&c);
}

static void test_qk_norm_backward_matches_finite_differences(void **state) {
    fixture *f = *state;
    qk_ctx c = make_ctx(f);
    qk_loss(&c);
    int parts = gt_rmsnorm_parts(N);
    float *dx = malloc(sizeof(float) * N * ROW), *qpart = zeros((size_t)parts * HD);
    float *kpart = zeros((size_t)parts * HD), *dqw = zeros(HD), *dkw = zeros(HD);
    memcpy(dx, c.g, sizeof(float) * N * ROW);
    f->b->ops->qk_norm_bwd_part(f->b, f->s, dx, qpart, kpart, c.raw, c.rstd, c.qw, c.kw, N, H, KV,
                                HD);
    gt_colsum_job jobs[2] = {{dqw, qpart, parts, HD, 0}, {dkw, kpart, parts, HD, 0}};
    f->b->ops->colsum_many(f->b, f->s, jobs, 2);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_OK);
    /* v's gradient passes through unchanged */
    for (int n = 0; n < N; n++)
        for (int i = HEADS * HD; i < ROW; i++)
            assert_true(dx[n * ROW + i] == c.g[n * ROW + i]);
    assert_true(fd_max_err(qk_loss, &c, c.x, N * ROW, dx, "qk_norm dqkv") < FD_REL_TOL);
    assert_true(fd_max_err(qk_loss, &c, c.qw, HD, dqw, "qk_norm dqw") < FD_REL_TOL);
    assert_true(fd_max_err(qk_loss, &c, c.kw, HD, dkw, "qk_norm dkw") < FD_REL_TOL);
    free(dx), free(qpart), free(kpart), free(dqw), free(dkw);
    free_ctx(&c);
}

static void test_qk_norm_backward_without_kept_values_is_refused(void **state) {
    fixture *f = *state;
    float dqkv[ROW] = {0}, part[2 * HD] = {0}, w[HD] = {0}, rstd[HEADS] = {0};
    f->b->ops->qk_norm_bwd_part(f->b, f->s, dqkv, part, part + HD, NULL, rstd, w, w, 1, H, KV, HD);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "qk_norm_bwd_part"));
    assert_non_null(strstr(err.msg, "raw and rstd"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_qk_norm_normalizes_each_q_and_k_head_with_its_weights_and_keeps_v, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_qk_norm_backward_matches_finite_differences, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_qk_norm_backward_without_kept_values_is_refused, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
