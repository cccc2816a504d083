/* The embedding gradient's row marks on the GPU (gt_grad_rows): embedding_bwd with marks
 * zeroes only the marked rows, clears and sets marks, and gives the bits of a full zeroing;
 * grad_norm and adamw skip unmarked rows (NaN there changes nothing) with the bits of the same
 * gradients holding zeros there; the inject hook marks the row of grads[0]. Also the unit test
 * of the prep kernel's warp ballot over rows past V and the scalar path (d % 4 != 0). */
#include "gpu_testutil.h"

static void g_read_u8(gpu_env *e, uint8_t *h, const uint8_t *d, size_t n) {
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, h, d, n);
    g_sync(e);
}

static uint8_t *g_u8(gpu_env *e, const uint8_t *h, size_t n) {
    uint8_t *d = g_alloc(e, n);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, d, h, n);
    g_sync(e);
    return d;
}

/* V rows of d: the old gradient holds values in the marked rows only (as the invariant says);
 * overwrite with marks against overwrite without, then an accumulating call on both. */
static void marks_case(gpu_env *e, int N, int V, int d) {
    int32_t *tok = malloc((size_t)N * sizeof *tok);
    uint8_t *mark = malloc((size_t)V), *want = calloc((size_t)V, 1), *got_mark = malloc((size_t)V);
    float *old = rand_vec(e, (size_t)V * d, 1.0f), *dout = rand_vec(e, (size_t)N * d, 1.0f);
    float *a = malloc((size_t)V * d * sizeof *a), *b = malloc((size_t)V * d * sizeof *b);
    for (int n = 0; n < N; n++) /* half the rows, repeated, and the last row */
        tok[n] = n == N - 1 ? V - 1 : (int32_t)((n * 7919u + 13u) % (unsigned)(V / 2));
    for (int n = 0; n < N; n++)
        want[tok[n]] = 1;
    for (int r = 0; r < V; r++) {
        mark[r] = (uint8_t)(r % 3 == 0);
        if (!mark[r])
            for (int c = 0; c < d; c++)
                old[(size_t)r * d + c] = 0.0f;
    }
    int32_t *g_tok = g_i32(e, tok, N);
    void *g_dout = g_act(e, dout, (size_t)N * d);
    float *g_plain = g_f32(e, old, (size_t)V * d), *g_marked = g_f32(e, old, (size_t)V * d);
    uint8_t *g_mark = g_u8(e, mark, (size_t)V);
    const gt_backend_ops *o = e->gpu->ops;
    GPU_PLAN(e, o->embedding_bwd(e->gpu, e->gs, g_plain, NULL, g_dout, g_tok, N, V, d, 1));
    o->embedding_bwd(e->gpu, e->gs, g_plain, NULL, g_dout, g_tok, N, V, d, 1);
    o->embedding_bwd(e->gpu, e->gs, g_marked, g_mark, g_dout, g_tok, N, V, d, 1);
    g_read_f32(e, a, g_plain, (size_t)V * d);
    g_read_f32(e, b, g_marked, (size_t)V * d);
    assert_memory_equal(a, b, (size_t)V * d * sizeof(float));
    g_read_u8(e, got_mark, g_mark, (size_t)V);
    assert_memory_equal(got_mark, want, (size_t)V);
    o->embedding_bwd(e->gpu, e->gs, g_plain, NULL, g_dout, g_tok, N, V, d, 0);
    o->embedding_bwd(e->gpu, e->gs, g_marked, g_mark, g_dout, g_tok, N, V, d, 0);
    g_read_f32(e, a, g_plain, (size_t)V * d);
    g_read_f32(e, b, g_marked, (size_t)V * d);
    assert_memory_equal(a, b, (size_t)V * d * sizeof(float));
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK);
    free(tok), free(mark), free(want), free(got_mark), free(old), free(dout), free(a), free(b);
}

static void test_embedding_marks_give_the_bits_of_a_full_zeroing(void **state) {
    gpu_env *e = *state;
    marks_case(e, 300, 1000, 96); /* 16-byte stores, V not a multiple of 32 */
    marks_case(e, 64, 77, 18);    /* scalar stores */
    marks_case(e, 2048, 50, 256); /* more positions than rows */
}

/* 8 plain elements, V rows of d, 100 trailing ones: unmarked rows hold zeros in one copy and
 * NaN in the other; the norm, flags and every AdamW output match bit for bit. */
static void test_grad_norm_and_adamw_skip_unmarked_rows(void **state) {
    gpu_env *e = *state;
    const size_t V = 1000, d = 96, off = 8, n = off + V * d + 100;
    float *zeros = rand_vec(e, n, 0.1f), *junk = malloc(n * sizeof *junk);
    float *master = rand_vec(e, n, 1.0f), *a = malloc(n * 4), *b = malloc(n * 4);
    uint8_t *mark = malloc(V);
    memcpy(junk, zeros, n * sizeof *junk);
    for (size_t r = 0; r < V; r++) {
        mark[r] = (uint8_t)(r % 5 == 1);
        if (!mark[r])
            for (size_t c = 0; c < d; c++)
                zeros[off + r * d + c] = 0.0f, junk[off + r * d + c] = NAN;
    }
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_step_state init = default_state(), *cst, *st_plain, *st_rows, h_plain, h_rows;
    make_states(e, &init, &cst, &st_plain);
    make_states(e, &init, &cst, &st_rows);
    float *g_zeros = g_f32(e, zeros, n), *g_junk = g_f32(e, junk, n);
    float *w_plain = g_f32(e, master, n), *w_rows = g_f32(e, master, n);
    float *m_plain = g_f32(e, NULL, n), *m_rows = g_f32(e, NULL, n);
    float *v_plain = g_f32(e, NULL, n), *v_rows = g_f32(e, NULL, n);
    void *p_plain = g_act(e, NULL, n), *p_rows = g_act(e, NULL, n);
    gt_grad_rows rows = {g_u8(e, mark, V), off, V, (int)d};
    const gt_backend_ops *o = e->gpu->ops;
    GPU_PLAN(e, o->grad_norm(e->gpu, e->gs, st_plain, g_zeros, n, GT_NO_GRAD_ROWS, 1, 1, 1.0f));
    for (int step = 0; step < 2; step++) {
        o->grad_norm(e->gpu, e->gs, st_plain, g_zeros, n, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
        o->adamw(e->gpu, e->gs, p_plain, w_plain, g_zeros, GT_NO_GRAD_ROWS, m_plain, v_plain, n,
                 n / 2, hp, st_plain);
        o->grad_norm(e->gpu, e->gs, st_rows, g_junk, n, rows, 1, 1, 1.0f);
        o->adamw(e->gpu, e->gs, p_rows, w_rows, g_junk, rows, m_rows, v_rows, n, n / 2, hp,
                 st_rows);
    }
    read_state(e, &h_plain, st_plain);
    read_state(e, &h_rows, st_rows);
    printf("    grad_norm %.9g with marks, %.9g without\n", (double)h_rows.grad_norm,
           (double)h_plain.grad_norm);
    assert_int_equal(h_rows.nan_flags, 0);
    assert_memory_equal(&h_rows.grad_norm, &h_plain.grad_norm, sizeof(float));
    assert_true(h_rows.clip_coef < 1.0f);
    float *pairs[3][2] = {{w_plain, w_rows}, {m_plain, m_rows}, {v_plain, v_rows}};
    for (int k = 0; k < 3; k++) {
        g_read_f32(e, a, pairs[k][0], n);
        g_read_f32(e, b, pairs[k][1], n);
        assert_memory_equal(a, b, n * sizeof(float));
    }
    /* rows that start at element 0 of the gradient: the hook's NaN gets its row marked */
    uint8_t none = 0, got = 0;
    gt_grad_rows at0 = {g_u8(e, &none, 1), 0, 1, 4};
    init.inject_nan = init.step;
    make_states(e, &init, &cst, &st_rows);
    o->inject_nan(e->gpu, e->gs, st_rows, g_zeros, at0);
    o->grad_norm(e->gpu, e->gs, st_rows, g_zeros, n, at0, 1, 1, 1.0f);
    read_state(e, &h_rows, st_rows);
    g_read_u8(e, &got, at0.dirty, 1);
    assert_int_equal(got, 1);
    assert_int_equal(h_rows.nan_flags, GT_NAN_LOSS | GT_NAN_GRAD);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK);
    free(zeros), free(junk), free(master), free(a), free(b), free(mark);
}

static void test_rows_past_the_gradients_are_refused(void **state) {
    gpu_env *e = *state;
    float *g = g_f32(e, NULL, 16);
    uint8_t none[8] = {0};
    gt_grad_rows rows = {g_u8(e, none, 8), 4, 8, 2}; /* elements 4..20 of 16 */
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g, 16, rows, 1, 1, 1.0f);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "reach past the 16 gradients"));
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_embedding_marks_give_the_bits_of_a_full_zeroing),
        T(test_grad_norm_and_adamw_skip_unmarked_rows),
        T(test_rows_past_the_gradients_are_refused),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
