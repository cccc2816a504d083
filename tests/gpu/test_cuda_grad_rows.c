/* The embedding gradient's row marks on the GPU (gt_grad_rows): embedding_bwd with marks
 * zeroes only the marked rows, clears and sets marks, and gives the bits of a full zeroing;
 * grad_norm and adamw skip unmarked rows (NaN there changes nothing) with the bits of the same
 * gradients holding zeros there; the inject hook marks the row of grads[0]. Also the unit test
 * of the prep kernel's warp ballot over rows past V and the scalar path (d % 4 != 0). */
#include "gpu_fixture.h"

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
    gt_grad_rows rows = {g_u8(e, mark, V), off, V, (int)d, NULL};
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
    gt_grad_rows at0 = {g_u8(e, &none, 1), 0, 1, 4, NULL};
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

/* A beta of 1 to AdamW, a sweep period of -1 to the catch-up: each an error naming the op and
 * the fix, and nothing run (the weights and the rows' steps as they were) */
static void test_bad_optimizer_arguments_are_refused(void **state) {
    gpu_env *e = *state;
    const gt_backend_ops *o = e->gpu->ops;
    float w0[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[8], g0[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float *master = g_f32(e, w0, 8), *g = g_f32(e, g0, 8), *m = g_f32(e, NULL, 8),
          *v = g_f32(e, NULL, 8);
    void *p = g_alloc(e, 8 * 2);
    int32_t lag0[4] = {5, 5, 5, 5}, lag[4], tok[2] = {0, 3};
    int32_t *d_lag = g_i32(e, lag0, 4), *d_tok = g_i32(e, tok, 2);
    gt_step_state init = default_state(), *cst, *gst;
    init.step = 9;
    make_states(e, &init, &cst, &gst);
    gt_adamw_params hp = {0.9f, 1.0f, 1e-8f, 0.1f, 1.0f, 0, 0, 0}; /* beta2 = 1: no moment */
    gt_error err = {0};
    o->adamw(e->gpu, e->gs, p, master, g, GT_NO_GRAD_ROWS, m, v, 8, 8, hp, gst);
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "adamw: bad arguments"));
    assert_non_null(strstr(err.msg, "betas must be in [0,1)"));
    hp.beta2 = 0.95f;
    gt_lr_schedule sc = {1e-3f, 1e-4f, 0, 10, 0 /* constant */, 0.0f, 0, 0};
    gt_adamw_state os = {p, master, m, v, 8, 8, hp, sc};
    gt_grad_rows rows = {NULL, 0, 4, 2, d_lag};
    o->lazy_catchup(e->gpu, e->gs, gst, os, rows, d_tok, 2, -1);
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "lazy_catchup: sweep period -1"));
    g_read_f32(e, w, master, 8);
    g_read_i32(e, lag, d_lag, 4);
    assert_memory_equal(w, w0, sizeof w0);
    assert_memory_equal(lag, lag0, sizeof lag0);
}

static void test_rows_past_the_gradients_are_refused(void **state) {
    gpu_env *e = *state;
    float *g = g_f32(e, NULL, 16);
    uint8_t none[8] = {0};
    gt_grad_rows rows = {g_u8(e, none, 8), 4, 8, 2, NULL}; /* elements 4..20 of 16 */
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g, 16, rows, 1, 1, 1.0f);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "reach past the 16 gradients"));
}

/* Lazy rows (gt_grad_rows.lag) against AdamW over every element, on the device: 12 steps of a
 * warmup and cosine schedule, each touching some rows through 64 token ids (repeats, and ids
 * outside the rows); step 5 skipped by a NaN and flushed after, as the trainer does; a final
 * flush. Parameters, master and moments equal bit for bit. master_lo: the split master (bf16
 * parameters hold the high halves), else an fp32 master; d % 4 != 0 takes the scalar AdamW.
 * period > 0: each catch-up also sweeps a slice, and no row owes more than period - 1 updates
 * after any step. */
static void lazy_case(gpu_env *e, size_t V, size_t d, size_t off, size_t tail, int master_lo,
                      int bf16_moments, int period) {
    size_t n = off + V * d + tail;
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, bf16_moments, bf16_moments, master_lo};
    gt_lr_schedule sc = {3e-2f, 3e-3f, 3, 10, 2 /* cosine */, 0.0f, 0, 0};
    float *w0 = rand_vec(e, n, 1.0f), *g = malloc(n * sizeof *g);
    uint16_t *hi = malloc(n * sizeof *hi);
    int16_t *lo = malloc(n * sizeof *lo);
    for (size_t i = 0; i < n; i++)
        gt_master_split(w0[i], &hi[i], &lo[i]);
    void *p[2], *master[2], *m[2], *v[2];
    const gt_backend_ops *o = e->gpu->ops;
    for (int k = 0; k < 2; k++) { /* 0: every element every step, 1: lazy rows */
        p[k] = g_alloc(e, n * 2);
        master[k] = g_alloc(e, n * 4);
        m[k] = g_f32(e, NULL, n); /* zeros, also as bf16 */
        v[k] = g_f32(e, NULL, n);
        if (master_lo) {
            o->memcpy_h2d(e->gpu, e->gs, p[k], hi, n * 2);
            o->memcpy_h2d(e->gpu, e->gs, master[k], lo, n * 2);
        } else {
            o->memcpy_h2d(e->gpu, e->gs, master[k], w0, n * 4);
            o->from_float(e->gpu, e->gs, p[k], master[k], n);
        }
    }
    int32_t *lag = g_i32(e, NULL, V);
    gt_step_state init = default_state(), *cst, *st[2], h;
    make_states(e, &init, &cst, &st[0]);
    make_states(e, &init, &cst, &st[1]);
    gt_adamw_state os = {p[1], master[1], m[1], v[1], n, n / 2, hp, sc};
    gt_grad_rows lag_only = {NULL, off, V, (int)d, lag};
    o->lazy_flush(e->gpu, e->gs, st[1], os, lag_only, 0); /* all current at init.step */
    const int32_t end = (int32_t)init.step + 12;
    uint8_t *mark = malloc(V);
    int32_t tok[64], *hl = malloc(V * sizeof *hl);
    uint32_t rng = 777u;
    for (int step = 0; step < 12; step++) {
        memset(g, 0, n * sizeof *g);
        memset(mark, 0, V);
        for (int k = 0; k < 64; k++) {
            rng = rng * 1664525u + 1013904223u;
            tok[k] = (int32_t)((rng >> 8) % (V / 4)); /* a quarter of the rows, repeated */
        }
        tok[7] = -1, tok[9] = (int32_t)V, tok[11] = (int32_t)(V - 1);
        for (int k = 0; k < 64; k++) {
            if (tok[k] < 0 || (size_t)tok[k] >= V) continue;
            mark[tok[k]] = 1;
            for (size_t j = 0; j < d; j++)
                g[off + (size_t)tok[k] * d + j] +=
                    0.01f * (float)((k + j + (size_t)step) % 9) - 0.04f;
        }
        for (size_t i = 0; i < off; i++)
            g[i] = 0.02f * (float)i - 0.05f;
        g[n - 1] = step == 5 ? NAN : 0.125f;
        float *gg = g_f32(e, g, n);
        int32_t *gtok = g_i32(e, tok, 64);
        gt_grad_rows rows = {g_u8(e, mark, V), off, V, (int)d, lag};
        for (int k = 0; k < 2; k++) {
            gt_grad_rows r = k ? rows : GT_NO_GRAD_ROWS;
            o->step_begin(e->gpu, e->gs, st[k], sc);
            if (k) o->lazy_catchup(e->gpu, e->gs, st[k], os, r, gtok, 64, period);
            o->grad_norm(e->gpu, e->gs, st[k], gg, n, r, 1, 1, hp.clip_grad);
            o->adamw(e->gpu, e->gs, p[k], master[k], gg, r, m[k], v[k], n, n / 2, hp, st[k]);
            o->step_end(e->gpu, e->gs, st[k]);
        }
        read_state(e, &h, st[1]);
        assert_int_equal(h.skipped, step == 5);
        if (h.skipped) o->lazy_flush(e->gpu, e->gs, st[1], os, rows, 1);
        if (!period) continue;
        o->memcpy_d2h(e->gpu, e->gs, hl, lag, V * sizeof *hl);
        read_state(e, &h, st[1]);
        for (size_t r = 0; r < V; r++)
            assert_true(h.step - hl[r] <= period - 1);
    }
    int behind = 0;
    o->memcpy_d2h(e->gpu, e->gs, hl, lag, V * sizeof *hl);
    g_sync(e);
    for (size_t r = 0; r < V; r++)
        behind += hl[r] < end;
    assert_true(behind > 0); /* rows still owe updates before the flush */
    o->lazy_flush(e->gpu, e->gs, st[1], os, lag_only, 1);
    o->memcpy_d2h(e->gpu, e->gs, hl, lag, V * sizeof *hl);
    g_sync(e);
    for (size_t r = 0; r < V; r++)
        assert_int_equal(hl[r], end);
    size_t bytes[4] = {n * 2, n * (master_lo ? 2 : 4), n * (bf16_moments ? 2 : 4),
                       n * (bf16_moments ? 2 : 4)};
    void **arrs[4] = {p, master, m, v};
    unsigned char *a = malloc(n * 4), *b = malloc(n * 4);
    for (int k = 0; k < 4; k++) {
        o->memcpy_d2h(e->gpu, e->gs, a, arrs[k][0], bytes[k]);
        o->memcpy_d2h(e->gpu, e->gs, b, arrs[k][1], bytes[k]);
        g_sync(e);
        assert_memory_equal(a, b, bytes[k]);
    }
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK);
    free(w0), free(g), free(hi), free(lo), free(mark), free(hl), free(a), free(b);
}

static void test_lazy_rows_equal_every_row_adamw_bit_for_bit(void **state) {
    gpu_env *e = *state;
    lazy_case(e, 300, 96, 8, 100, 1, 0, 0); /* the trainer's layout: split master, 4-wide AdamW */
    lazy_case(e, 300, 96, 8, 100, 1, 1, 0); /* bf16 moments */
    lazy_case(e, 50, 18, 6, 10, 0, 0, 0);   /* fp32 master, scalar AdamW (d % 4 != 0) */
    lazy_case(e, 300, 96, 8, 100, 1, 0, 7); /* with the sweep: slices of 43 rows, the last 42 */
    lazy_case(e, 50, 18, 6, 10, 0, 1, 4);   /* the sweep on the scalar path */
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_embedding_marks_give_the_bits_of_a_full_zeroing),
        T(test_grad_norm_and_adamw_skip_unmarked_rows),
        T(test_rows_past_the_gradients_are_refused),
        T(test_bad_optimizer_arguments_are_refused),
        T(test_lazy_rows_equal_every_row_adamw_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
