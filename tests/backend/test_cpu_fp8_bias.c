/* The CPU backend's bias gradient for fp8 linear layers (backend/cpu/cpu_fp8_bias.c): the very
 * bits matmul_bwd_weight gives a bf16 bias from the same gradient, overwriting and
 * accumulating, across several column blocks; and a wrong shape is refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD_EPS 1e-3f
#define FD_FLOOR 0.1
#include "cpu_op_fixture.h"

static int setup(void **state) {
    return fixture_setup(state, 4242u);
}

static int teardown(void **state) {
    return fixture_teardown(state, 0);
}

/* M rows, N columns (past one 256-column block), K for the weight gradient beside it */
enum { M = 37, N = 300, K = 8 };

static void check(fixture *f, int accumulate) {
    gt_backend *b = f->b;
    float *dout = rand_buf(f, (size_t)M * N, 1.0f), *x = rand_buf(f, (size_t)M * K, 1.0f);
    float *start = rand_buf(f, N, 0.5f);
    float *dw = zeros((size_t)N * K), *want = malloc(N * sizeof *want),
          *got = malloc(N * sizeof *got);
    memcpy(want, start, N * sizeof *want);
    memcpy(got, start, N * sizeof *got);
    b->ops->matmul_bwd_weight(b, f->s, dw, want, dout, x, M, N, K, accumulate);
    b->ops->bias_grad(b, f->s, got, dout, M, N, accumulate);
    gt_error err = {0};
    assert_int_equal(b->ops->stream_sync(b, f->s, &err), GT_OK);
    assert_memory_equal(got, want, N * sizeof *got);
    /* and it is the column sum, not a copy of its start */
    double col0 = 0;
    for (int m = 0; m < M; m++)
        col0 += dout[(size_t)m * N];
    assert_float_equal(got[0], (accumulate ? start[0] : 0.0f) + (float)col0, 1e-5);
    free(dout), free(x), free(start), free(dw), free(want), free(got);
}

static void test_bias_grad_overwrites_with_the_bits_of_matmul_dbias(void **state) {
    check(*state, 0);
}

static void test_bias_grad_accumulates_with_the_bits_of_matmul_dbias(void **state) {
    check(*state, 1);
}

static void test_bias_grad_refuses_a_bad_shape(void **state) {
    fixture *f = *state;
    gt_backend *b = f->b;
    float d[4] = {0}, dout[4] = {0};
    b->ops->bias_grad(b, f->s, d, dout, 2, 0, 0);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "bias_grad: bad shape"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias_grad_overwrites_with_the_bits_of_matmul_dbias),
        cmocka_unit_test(test_bias_grad_accumulates_with_the_bits_of_matmul_dbias),
        cmocka_unit_test(test_bias_grad_refuses_a_bad_shape),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
