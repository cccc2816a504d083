/* GPU tests of the dense and optimizer ops: every CUDA op against the CPU reference on the
 * same random inputs (rounded to bf16 so both see identical values), relative L2 error per
 * precision, plus determinism (two runs bitwise equal) of the ops that reduce. */
#include "gpu_fixture.h"

#include "backend/cuda/cuda_backend.h" /* gt_cuda_impl: the settings and the device */

static void test_from_float_rounds_to_nearest_bf16(void **state) {
    gpu_env *e = *state;
    size_t n = 4096;
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    for (size_t i = 0; i < n; i++)
        h[i] = env_uniform(e) * 100.0f;
    void *d = g_act(e, h, n);
    g_read_act(e, back, d, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += back[i] != bf16_round(h[i]);
    assert_int_equal(bad, 0);
    free(h);
    free(back);
}

/* d 96 and 64 take the 16-byte backward, d 20 the scalar one; N 8192 over V 50304 is
 * gpt124m's batch (16-bit tokens, runs of repeats across the whole batch) */
static void embedding_case(gpu_env *e, int N, int V, int d) {
    int32_t *tok = malloc((size_t)N * sizeof *tok);
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)(env_next(e) % (uint64_t)V);
    tok[5] = tok[6] = tok[7] = tok[200] = 3;  /* repeated rows */
    tok[N - 1] = tok[N / 2] = tok[1] = V - 1; /* the largest id, repeated far apart */
    float *wte = rand_vec(e, (size_t)V * d, 1.0f), *dout = rand_vec(e, (size_t)N * d, 1.0f);
    float *dw0 = rand_vec(e, (size_t)V * d, 0.5f);
    size_t rows = (size_t)(N > V ? N : V); /* downloads of both [N,d] and [V,d] */
    float *got = malloc(rows * d * sizeof *got), *got2 = malloc(rows * d * 4);
    float *c_out = c_f32(e, NULL, (size_t)N * d), *c_dw = c_f32(e, dw0, (size_t)V * d);
    e->cpu->ops->embedding_fwd(e->cpu, e->cs, c_out, c_i32(e, tok, N), c_f32(e, wte, V * d), N, d);
    e->cpu->ops->embedding_bwd(e->cpu, e->cs, c_dw, NULL, c_f32(e, dout, (size_t)N * d),
                               c_i32(e, tok, N), N, V, d, 0);
    int32_t *g_tok = g_i32(e, tok, N);
    void *g_wte = g_act(e, wte, (size_t)V * d), *g_out = g_act(e, NULL, (size_t)N * d);
    void *g_dout = g_act(e, dout, (size_t)N * d);
    e->gpu->ops->embedding_fwd(e->gpu, e->gs, g_out, g_tok, g_wte, N, d);
    g_read_act(e, got, g_out, (size_t)N * d);
    EXPECT_CLOSE("embedding_fwd out", got, c_out, (size_t)N * d, 1e-6);
    float *g_dw = g_f32(e, dw0, (size_t)V * d), *g_dw2 = g_f32(e, dw0, (size_t)V * d);
    GPU_PLAN(e, e->gpu->ops->embedding_bwd(e->gpu, e->gs, g_dw, NULL, g_dout, g_tok, N, V, d, 0));
    e->gpu->ops->embedding_bwd(e->gpu, e->gs, g_dw, NULL, g_dout, g_tok, N, V, d, 0);
    e->gpu->ops->embedding_bwd(e->gpu, e->gs, g_dw2, NULL, g_dout, g_tok, N, V, d, 0);
    g_read_f32(e, got, g_dw, (size_t)V * d);
    g_read_f32(e, got2, g_dw2, (size_t)V * d);
    EXPECT_CLOSE("embedding_bwd dwte", got, c_dw, (size_t)V * d, TOL_F32);
    assert_memory_equal(got, got2, (size_t)V * d * sizeof(float));
    free(tok), free(wte), free(dout), free(dw0), free(got), free(got2);
}

static void test_embedding_matches_cpu_and_backward_is_deterministic(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, embedding_fwd);
    NEED_CPU(e, embedding_bwd);
    embedding_case(e, 300, 97, 96);
    embedding_case(e, 300, 97, 20);
    embedding_case(e, 8192, 50304, 64);
}

static void rmsnorm_case(gpu_env *e, int N, int d) {
    char what[64];
    size_t nd = (size_t)N * d;
    float *x = rand_vec(e, nd, 2.0f), *w = rand_vec(e, d, 0.2f), *dy = rand_vec(e, nd, 1.0f);
    for (int i = 0; i < d; i++)
        w[i] = bf16_round(1.0f + w[i]);
    float *dx0 = rand_vec(e, nd, 0.5f), *dw0 = rand_vec(e, d, 0.5f);
    float *got = malloc(nd * 4), *got2 = malloc(nd * 4);
    float *c_out = c_f32(e, NULL, nd), *c_rstd = c_f32(e, NULL, N), *c_x = c_f32(e, x, nd);
    float *c_w = c_f32(e, w, d), *c_dx = c_f32(e, dx0, nd), *c_dw = c_f32(e, dw0, d);
    e->cpu->ops->rmsnorm_fwd(e->cpu, e->cs, c_out, c_rstd, c_x, c_w, N, d, 1e-5f);
    e->cpu->ops->rmsnorm_bwd(e->cpu, e->cs, c_dx, c_dw, c_f32(e, dy, nd), c_x, c_w, c_rstd, N, d,
                             1);
    void *g_x = g_act(e, x, nd), *g_w = g_act(e, w, d), *g_out = g_act(e, NULL, nd);
    void *g_dy = g_act(e, dy, nd), *g_dx = g_act(e, dx0, nd), *g_dx2 = g_act(e, dx0, nd);
    float *g_rstd = g_f32(e, NULL, N), *g_dw = g_f32(e, dw0, d), *g_dw2 = g_f32(e, dw0, d);
    e->gpu->ops->rmsnorm_fwd(e->gpu, e->gs, g_out, g_rstd, g_x, g_w, N, d, 1e-5f);
    g_read_act(e, got, g_out, nd);
    snprintf(what, sizeof what, "rmsnorm_fwd out N%d d%d", N, d);
    EXPECT_CLOSE(what, got, c_out, nd, TOL_BF16);
    g_read_f32(e, got, g_rstd, N);
    EXPECT_CLOSE("rmsnorm_fwd rstd", got, c_rstd, N, TOL_F32);
    GPU_PLAN(e,
             e->gpu->ops->rmsnorm_bwd(e->gpu, e->gs, g_dx, g_dw, g_dy, g_x, g_w, g_rstd, N, d, 1));
    e->gpu->ops->rmsnorm_bwd(e->gpu, e->gs, g_dx, g_dw, g_dy, g_x, g_w, g_rstd, N, d, 1);
    e->gpu->ops->rmsnorm_bwd(e->gpu, e->gs, g_dx2, g_dw2, g_dy, g_x, g_w, g_rstd, N, d, 1);
    g_read_act(e, got, g_dx, nd);
    snprintf(what, sizeof what, "rmsnorm_bwd dinp (+=) N%d d%d", N, d);
    EXPECT_CLOSE(what, got, c_dx, nd, TOL_BF16);
    g_read_f32(e, got, g_dw, d);
    g_read_f32(e, got2, g_dw2, d);
    EXPECT_CLOSE("rmsnorm_bwd dw (+=)", got, c_dw, d, TOL_F32);
    assert_memory_equal(got, got2, (size_t)d * 4);
    float *dw_init = malloc((size_t)d * 4);
    memcpy(dw_init, dw0, (size_t)d * 4);
    /* accumulate 0 overwrites NaN-filled dw */
    for (int i = 0; i < d; i++)
        dw0[i] = NAN;
    float *c_dwo = c_f32(e, dw0, d), *g_dwo = g_f32(e, dw0, d);
    e->cpu->ops->rmsnorm_bwd(e->cpu, e->cs, c_dx, c_dwo, c_f32(e, dy, nd), c_x, c_w, c_rstd, N, d,
                             0);
    e->gpu->ops->rmsnorm_bwd(e->gpu, e->gs, g_dx2, g_dwo, g_dy, g_x, g_w, g_rstd, N, d, 0);
    g_read_f32(e, got, g_dwo, d);
    EXPECT_CLOSE("rmsnorm_bwd dw (=)", got, c_dwo, d, TOL_F32);
    /* the same in two steps, on both backends: the partial rows, then one colsum_many over an
     * overwriting and an accumulating job, give rmsnorm_bwd's dinp and dw bit for bit */
    int parts = gt_rmsnorm_parts(N);
    assert_true(parts >= 1 && parts <= gt_rmsnorm_parts_bound(N));
    float *g_part = g_f32(e, NULL, (size_t)parts * d), *c_part = c_f32(e, NULL, (size_t)parts * d);
    void *g_dx3 = g_act(e, dx0, nd);
    float *g_dw3 = g_f32(e, dw0, d), *g_dw4 = g_f32(e, dw_init, d);
    float *c_dx3 = c_f32(e, dx0, nd), *c_dx4 = c_f32(e, dx0, nd);
    float *c_dw3 = c_f32(e, dw0, d), *c_dw4 = c_f32(e, dw_init, d), *c_dw5 = c_f32(e, dw_init, d);
    e->gpu->ops->rmsnorm_bwd_part(e->gpu, e->gs, g_dx3, g_dx3, g_part, g_dy, g_x, g_w, g_rstd, N,
                                  d);
    gt_colsum_job gj[2] = {{g_dw3, g_part, parts, d, 0}, {g_dw4, g_part, parts, d, 1}};
    e->gpu->ops->colsum_many(e->gpu, e->gs, gj, 2);
    g_read_act(e, got, g_dx3, nd);
    g_read_act(e, got2, g_dx, nd);
    assert_memory_equal(got, got2, nd * 4);
    g_read_f32(e, got, g_dw3, d);
    g_read_f32(e, got2, g_dwo, d);
    assert_memory_equal(got, got2, (size_t)d * 4);
    g_read_f32(e, got, g_dw4, d);
    g_read_f32(e, got2, g_dw, d);
    assert_memory_equal(got, got2, (size_t)d * 4);
    e->cpu->ops->rmsnorm_bwd_part(e->cpu, e->cs, c_dx3, c_dx3, c_part, c_f32(e, dy, nd), c_x, c_w,
                                  c_rstd, N, d);
    gt_colsum_job cj[2] = {{c_dw3, c_part, parts, d, 0}, {c_dw4, c_part, parts, d, 1}};
    e->cpu->ops->colsum_many(e->cpu, e->cs, cj, 2);
    e->cpu->ops->rmsnorm_bwd(e->cpu, e->cs, c_dx4, c_dw5, c_f32(e, dy, nd), c_x, c_w, c_rstd, N, d,
                             1);
    assert_memory_equal(c_dx3, c_dx4, nd * 4);
    assert_memory_equal(c_dw3, c_dwo, (size_t)d * 4);
    assert_memory_equal(c_dw4, c_dw5, (size_t)d * 4);
    /* the model's use: the residual's gradient written over the norm's input, from another
     * buffer's gradient or from zeros (NULL), is what separate buffers give, bit for bit */
    void *g_sep = g_act(e, NULL, nd), *g_din = g_act(e, dx0, nd);
    float *g_part2 = g_f32(e, NULL, (size_t)parts * d);
    for (int from_zero = 0; from_zero < 2; from_zero++) {
        const void *din = from_zero ? NULL : g_din;
        void *g_xa = g_act(e, x, nd);
        e->gpu->ops->rmsnorm_bwd_part(e->gpu, e->gs, g_sep, din, g_part, g_dy, g_x, g_w, g_rstd, N,
                                      d);
        e->gpu->ops->rmsnorm_bwd_part(e->gpu, e->gs, g_xa, din, g_part2, g_dy, g_xa, g_w, g_rstd, N,
                                      d);
        g_read_act(e, got, g_xa, nd);
        g_read_act(e, got2, g_sep, nd);
        assert_memory_equal(got, got2, nd * 4);
        g_read_f32(e, got, g_part2, (size_t)parts * d);
        g_read_f32(e, got2, g_part, (size_t)parts * d);
        assert_memory_equal(got, got2, (size_t)parts * d * 4);
    }
    free(x), free(w), free(dy), free(dx0), free(dw0), free(dw_init), free(got), free(got2);
}

static void test_rmsnorm_matches_cpu_and_dw_is_deterministic(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, rmsnorm_fwd);
    NEED_CPU(e, rmsnorm_bwd);
    rmsnorm_case(e, 77, 320); /* generic kernels */
    rmsnorm_case(e, 77, 512); /* 16-byte vector kernels (d % 256 == 0) */
    rmsnorm_case(e, 300, 768);
    rmsnorm_case(e, 2500, 2048); /* two rows a warp */
    rmsnorm_case(e, 9000, 768);  /* four rows a warp, a partial last block */
}

static void test_add_and_dropout_match_cpu_masks(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, add);
    NEED_CPU(e, dropout_fwd);
    NEED_CPU(e, dropout_bwd);
    size_t n = 5000;
    float *a = rand_vec(e, n, 1.0f), *x = rand_vec(e, n, 1.0f), *got = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        a[i] = bf16_round(0.5f + fabsf(a[i])); /* no zeros */
    float *c_out = c_f32(e, NULL, n);
    e->cpu->ops->add(e->cpu, e->cs, c_out, c_f32(e, a, n), c_f32(e, x, n), n);
    void *g_a = g_act(e, a, n), *g_out = g_act(e, NULL, n);
    e->gpu->ops->add(e->gpu, e->gs, g_out, g_a, g_act(e, x, n), n);
    g_read_act(e, got, g_out, n);
    EXPECT_CLOSE("add", got, c_out, n, TOL_BF16);
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    gt_rng_site site = {1234, 17, 0};
    for (int bwd = 0; bwd < 2; bwd++) {
        float *c_d = c_f32(e, NULL, n);
        void *g_d = g_act(e, NULL, n);
        if (bwd) {
            e->cpu->ops->dropout_bwd(e->cpu, e->cs, c_d, c_f32(e, a, n), n, 0.3f, site, cst);
            e->gpu->ops->dropout_bwd(e->gpu, e->gs, g_d, g_a, n, 0.3f, site, gst);
        } else {
            e->cpu->ops->dropout_fwd(e->cpu, e->cs, c_d, c_f32(e, a, n), n, 0.3f, site, cst);
            e->gpu->ops->dropout_fwd(e->gpu, e->gs, g_d, g_a, n, 0.3f, site, gst);
        }
        g_read_act(e, got, g_d, n);
        size_t mism = 0, dropped = 0;
        for (size_t i = 0; i < n; i++) {
            mism += (got[i] == 0.0f) != (c_d[i] == 0.0f);
            dropped += got[i] == 0.0f;
        }
        printf("    dropout %s: %zu of %zu dropped, %zu mask mismatches\n", bwd ? "bwd" : "fwd",
               dropped, n, mism);
        assert_int_equal(mism, 0);
        assert_true(dropped > n / 5 && dropped < n * 2 / 5);
        EXPECT_CLOSE(bwd ? "dropout_bwd" : "dropout_fwd", got, c_d, n, TOL_BF16);
    }
    free(a), free(x), free(got);
}

static void matmul_case(gpu_env *e, int M, int N, int K) {
    char what[96];
    float *a = rand_vec(e, (size_t)M * K, 1.0f), *w = rand_vec(e, (size_t)N * K, 1.0f);
    float *bias = rand_vec(e, N, 1.0f), *dout = rand_vec(e, (size_t)M * N, 1.0f);
    float *da0 = rand_vec(e, (size_t)M * K, 1.0f), *dw0 = rand_vec(e, (size_t)N * K, 1.0f);
    size_t big = (size_t)(M > N ? M : N) * (K > N ? K : N);
    float *got = malloc(big * 4);
    float *c_a = c_f32(e, a, (size_t)M * K), *c_w = c_f32(e, w, (size_t)N * K);
    float *c_dout = c_f32(e, dout, (size_t)M * N);
    void *g_a = g_act(e, a, (size_t)M * K), *g_w = g_act(e, w, (size_t)N * K);
    void *g_bias = g_act(e, bias, N), *g_dout = g_act(e, dout, (size_t)M * N);
    /* bias and a residual added in the epilogue, each on and off */
    for (int v = 0; v < 4; v++) {
        int with_bias = v & 1, with_res = v >> 1;
        float *c_out = c_f32(e, NULL, (size_t)M * N);
        void *g_out = g_act(e, NULL, (size_t)M * N);
        e->cpu->ops->matmul_fwd(e->cpu, e->cs, c_out, c_a, c_w,
                                with_bias ? c_f32(e, bias, N) : NULL,
                                with_res ? c_f32(e, dout, (size_t)M * N) : NULL, M, N, K);
        const void *gb = with_bias ? g_bias : NULL, *gr = with_res ? g_dout : NULL;
        GPU_PLAN(e, e->gpu->ops->matmul_fwd(e->gpu, e->gs, g_out, g_a, g_w, gb, gr, M, N, K));
        e->gpu->ops->matmul_fwd(e->gpu, e->gs, g_out, g_a, g_w, gb, gr, M, N, K);
        g_read_act(e, got, g_out, (size_t)M * N);
        snprintf(what, sizeof what, "matmul_fwd %dx%dx%d%s%s", M, N, K, with_bias ? " +bias" : "",
                 with_res ? " +res" : "");
        EXPECT_CLOSE(what, got, c_out, (size_t)M * N, TOL_BF16);
    }
    for (int acc = 0; acc < 2; acc++) {
        float *c_da = c_f32(e, da0, (size_t)M * K);
        void *g_da = g_act(e, da0, (size_t)M * K);
        e->cpu->ops->matmul_bwd_data(e->cpu, e->cs, c_da, c_dout, c_w, M, N, K, acc);
        GPU_PLAN(e, e->gpu->ops->matmul_bwd_data(e->gpu, e->gs, g_da, g_dout, g_w, M, N, K, acc));
        e->gpu->ops->matmul_bwd_data(e->gpu, e->gs, g_da, g_dout, g_w, M, N, K, acc);
        g_read_act(e, got, g_da, (size_t)M * K);
        snprintf(what, sizeof what, "matmul_bwd_data %dx%dx%d%s", M, N, K, acc ? " (+=)" : "");
        EXPECT_CLOSE(what, got, c_da, (size_t)M * K, TOL_BF16);
    }
    /* accumulate 1 adds into the old values; 0 overwrites NaN-filled gradients */
    for (int acc = 1; acc >= 0; acc--) {
        if (!acc)
            for (size_t q = 0; q < (size_t)N * K; q++)
                dw0[q] = NAN, bias[q % N] = NAN;
        float *c_dw = c_f32(e, dw0, (size_t)N * K), *c_db = c_f32(e, bias, N);
        float *g_dw = g_f32(e, dw0, (size_t)N * K), *g_db = g_f32(e, bias, N);
        e->cpu->ops->matmul_bwd_weight(e->cpu, e->cs, c_dw, c_db, c_dout, c_a, M, N, K, acc);
        GPU_PLAN(e, e->gpu->ops->matmul_bwd_weight(e->gpu, e->gs, g_dw, g_db, g_dout, g_a, M, N, K,
                                                   acc));
        e->gpu->ops->matmul_bwd_weight(e->gpu, e->gs, g_dw, g_db, g_dout, g_a, M, N, K, acc);
        g_read_f32(e, got, g_dw, (size_t)N * K);
        snprintf(what, sizeof what, "matmul_bwd_weight dw %dx%dx%d%s", M, N, K,
                 acc ? " (+=)" : " (=)");
        EXPECT_CLOSE(what, got, c_dw, (size_t)N * K, TOL_F32);
        g_read_f32(e, got, g_db, N);
        EXPECT_CLOSE("matmul_bwd_weight dbias", got, c_db, N, TOL_F32);
    }
    free(a), free(w), free(bias), free(dout), free(da0), free(dw0), free(got);
}

/* count weight gradients at strides (in elements; 256-byte multiples or not) against one CPU
 * call each, overwriting and accumulating: a shape small enough to run batched, and one
 * large enough to run one GEMM at a time. */
static void wgrad_batch_case(gpu_env *e, int M, int N, int K, int count, int pad) {
    char what[96];
    int64_t sd = (int64_t)M * N + pad, sa = (int64_t)M * K + pad, sw = (int64_t)N * K + pad;
    float *dout = rand_vec(e, (size_t)(count * sd), 1.0f),
          *a = rand_vec(e, (size_t)(count * sa), 1.0f);
    float *dw0 = rand_vec(e, (size_t)(count * sw), 1.0f), *got = malloc((size_t)(count * sw) * 4);
    float *c_dout = c_f32(e, dout, (size_t)(count * sd)), *c_a = c_f32(e, a, (size_t)(count * sa));
    void *g_dout = g_act(e, dout, (size_t)(count * sd)), *g_a = g_act(e, a, (size_t)(count * sa));
    for (int acc = 1; acc >= 0; acc--) {
        float *c_dw = c_f32(e, dw0, (size_t)(count * sw)),
              *g_dw = g_f32(e, dw0, (size_t)(count * sw));
        for (int i = 0; i < count; i++)
            e->cpu->ops->matmul_bwd_weight(e->cpu, e->cs, c_dw + i * sw, NULL, c_dout + i * sd,
                                           c_a + i * sa, M, N, K, acc);
        GPU_PLAN(e, e->gpu->ops->matmul_bwd_weight_batched(e->gpu, e->gs, g_dw, sw, g_dout, sd, g_a,
                                                           sa, M, N, K, count, acc));
        e->gpu->ops->matmul_bwd_weight_batched(e->gpu, e->gs, g_dw, sw, g_dout, sd, g_a, sa, M, N,
                                               K, count, acc);
        g_read_f32(e, got, g_dw, (size_t)(count * sw));
        for (int i = 0; i < count; i++) { /* the padding between members is left alone */
            snprintf(what, sizeof what, "matmul_bwd_weight_batched %dx%dx%d [%d of %d]%s", M, N, K,
                     i, count, acc ? " (+=)" : " (=)");
            EXPECT_CLOSE(what, got + i * sw, c_dw + i * sw, (size_t)N * K, TOL_F32);
            assert_memory_equal(got + i * sw + (int64_t)N * K, dw0 + i * sw + (int64_t)N * K,
                                (size_t)pad * 4);
        }
    }
    free(dout), free(a), free(dw0), free(got);
}

static void test_batched_weight_gradients_match_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, matmul_bwd_weight_batched);
    wgrad_batch_case(e, 256, 192, 64, 3, 128);  /* batched, 256-byte strides */
    wgrad_batch_case(e, 96, 80, 72, 4, 3);      /* batched, odd strides */
    wgrad_batch_case(e, 64, 2048, 2048, 2, 64); /* 256 tiles: one GEMM at a time */
    e->gpu->ops->matmul_bwd_weight_batched(e->gpu, e->gs, NULL, 0, NULL, 0, NULL, 0, 8, 8, 8, 2, 0);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "matmul_bwd_weight_batched"));
}

static void test_matmul_matches_cpu_aligned_and_odd_shapes(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, matmul_fwd);
    matmul_case(e, 96, 80, 72);
    matmul_case(e, 256, 384, 128);
    matmul_case(e, 33, 17, 24);
}

/* hd 64 and 128 take the 8-pair kernel, hd 20 the one-pair-per-thread one; both read the
 * cos/sin table plan_finish builds. A shape that was not planned is a sticky error; planning
 * it afterwards (a second plan_finish) adds its table. */
static void test_rope_matches_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, rope_fwd);
    static const int hds[] = {64, 128, 20};
    for (int h = 0; h < 3; h++) {
        int B = 2, T = 50, H = 4, KV = 2, hd = hds[h];
        size_t n = (size_t)B * T * (H + 2 * KV) * hd;
        float *x = rand_vec(e, n, 1.0f), *got = malloc(n * 4);
        for (int inv = 0; inv < 2; inv++) {
            char what[64];
            float *c = c_f32(e, x, n);
            void *g = g_act(e, x, n);
            if (inv) {
                e->cpu->ops->rope_bwd(e->cpu, e->cs, c, B, T, H, KV, hd, 10000.0f);
                GPU_PLAN(e, e->gpu->ops->rope_bwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f));
                e->gpu->ops->rope_bwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f);
            } else {
                e->cpu->ops->rope_fwd(e->cpu, e->cs, c, B, T, H, KV, hd, 10000.0f);
                GPU_PLAN(e, e->gpu->ops->rope_fwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f));
                e->gpu->ops->rope_fwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f);
            }
            g_read_act(e, got, g, n);
            snprintf(what, sizeof what, "%s hd %d", inv ? "rope_bwd" : "rope_fwd", hd);
            EXPECT_CLOSE(what, got, c, n, TOL_BF16);
        }
        free(x), free(got);
    }
    /* T 37, hd 32: a (T, hd) no planning pass of this test binary has seen */
    int B = 1, T = 37, H = 2, KV = 1, hd = 32;
    size_t n = (size_t)B * T * (H + 2 * KV) * hd;
    float *x = rand_vec(e, n, 1.0f), *got = malloc(n * 4);
    float *c = c_f32(e, x, n);
    void *g = g_act(e, x, n);
    e->gpu->ops->rope_fwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    printf("    %s\n", err.msg);
    assert_non_null(strstr(err.msg, "not planned"));
    assert_non_null(strstr(err.msg, "T=37 hd=32"));
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK); /* reported once */
    g_read_act(e, got, g, n);
    assert_memory_equal(got, x, n * 4); /* nothing ran */
    e->cpu->ops->rope_fwd(e->cpu, e->cs, c, B, T, H, KV, hd, 10000.0f);
    GPU_PLAN(e, e->gpu->ops->rope_fwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f));
    e->gpu->ops->rope_fwd(e->gpu, e->gs, g, B, T, H, KV, hd, 10000.0f);
    g_read_act(e, got, g, n);
    EXPECT_CLOSE("rope_fwd hd 32, planned afterwards", got, c, n, TOL_BF16);
    free(x), free(got);
}

/* When the kernel choice (runtime.cuda.attention / attention_bwd of this run) refuses the
 * shape, the planning pass must refuse it too, naming the key: 1 then (nothing to compare). */
static int attention_refused(gpu_env *e, int B, int T, int H, int KV, int hd, float p) {
    const gt_cuda_impl *im = e->gpu->impl;
    gt_attn_shape sh = {T, hd, p, 0};
    gt_kernel kf, kb;
    gt_error why = {0};
    if (gt_choose_attention_fwd(&im->caps, im->opts.attention, &sh, &kf, &why) == GT_OK &&
        gt_choose_attention_bwd(&im->caps, im->opts.attention_bwd, kf, &sh, &kb, &why) == GT_OK)
        return 0;
    size_t nq = (size_t)B * T * (H + 2 * KV) * hd, no = (size_t)B * T * H * hd;
    void *qkv = g_act(e, NULL, nq), *out = g_act(e, NULL, no);
    float *lse = g_f32(e, NULL, (size_t)B * H * T);
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    gt_rng_site site = {42, 3, 0};
    gt_error err = {0};
    e->gpu->planning = 1;
    e->gpu->ops->attention_fwd(e->gpu, e->gs, out, lse, qkv, B, T, H, KV, hd, p, site, gst);
    int rc = e->gpu->ops->plan_finish(e->gpu, &err);
    e->gpu->planning = 0;
    printf("    attention T%d hd%d p%.1f refused: %s\n", T, hd, (double)p, err.msg);
    assert_int_equal(rc, GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "runtime.cuda.attention"));
    return 1;
}

static void attention_case(gpu_env *e, int B, int T, int H, int KV, int hd, float p) {
    if (attention_refused(e, B, T, H, KV, hd, p)) return;
    char what[128];
    int C = (H + 2 * KV) * hd;
    size_t nq = (size_t)B * T * C, no = (size_t)B * T * H * hd, nl = (size_t)B * H * T;
    float *qkv = rand_vec(e, nq, 1.0f), *dout = rand_vec(e, no, 1.0f);
    float *got = malloc(nq * 4), *got2 = malloc(nq * 4);
    gt_step_state init = default_state(), *cst, *gst;
    make_states(e, &init, &cst, &gst);
    gt_rng_site site = {42, 3, 0};
    float *c_qkv = c_f32(e, qkv, nq), *c_out = c_f32(e, NULL, no), *c_lse = c_f32(e, NULL, nl);
    float *c_dqkv = c_f32(e, NULL, nq);
    e->cpu->ops->attention_fwd(e->cpu, e->cs, c_out, c_lse, c_qkv, B, T, H, KV, hd, p, site, cst);
    e->cpu->ops->attention_bwd(e->cpu, e->cs, c_dqkv, c_f32(e, dout, no), c_qkv, c_out, c_lse, B, T,
                               H, KV, hd, p, site, cst);
    void *g_qkv = g_act(e, qkv, nq), *g_out = g_act(e, NULL, no), *g_dout = g_act(e, dout, no);
    void *g_dqkv = g_act(e, NULL, nq), *g_dqkv2 = g_act(e, NULL, nq);
    float *g_lse = g_f32(e, NULL, nl);
    /* one planning pass of both directions, as the trainer's: the kernels are chosen there */
    GPU_PLAN(e, (e->gpu->ops->attention_fwd(e->gpu, e->gs, g_out, g_lse, g_qkv, B, T, H, KV, hd, p,
                                            site, gst),
                 e->gpu->ops->attention_bwd(e->gpu, e->gs, g_dqkv, g_dout, g_qkv, g_out, g_lse, B,
                                            T, H, KV, hd, p, site, gst)));
    e->gpu->ops->attention_fwd(e->gpu, e->gs, g_out, g_lse, g_qkv, B, T, H, KV, hd, p, site, gst);
    g_read_act(e, got, g_out, no);
    snprintf(what, sizeof what, "attention_fwd out B%d T%d H%d KV%d hd%d p%.1f", B, T, H, KV, hd,
             (double)p);
    EXPECT_CLOSE(what, got, c_out, no, TOL_BF16);
    g_read_f32(e, got, g_lse, nl);
    EXPECT_CLOSE("attention_fwd lse", got, c_lse, nl, TOL_F32);
    e->gpu->ops->attention_bwd(e->gpu, e->gs, g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, H, KV, hd,
                               p, site, gst);
    e->gpu->ops->attention_bwd(e->gpu, e->gs, g_dqkv2, g_dout, g_qkv, g_out, g_lse, B, T, H, KV, hd,
                               p, site, gst);
    g_read_act(e, got, g_dqkv, nq);
    g_read_act(e, got2, g_dqkv2, nq);
    snprintf(what, sizeof what, "attention_bwd dqkv hd%d p%.1f", hd, (double)p);
    /* dropout doubles the dynamic range of the gradients: the same bf16 budget, twice */
    EXPECT_CLOSE(what, got, c_dqkv, nq, p > 0 ? 2 * TOL_BF16 : TOL_BF16);
    assert_memory_equal(got, got2, nq * 4);
    free(qkv), free(dout), free(got), free(got2);
}

static void test_attention_hd64_gqa_matches_cpu_deterministically(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, attention_fwd);
    attention_case(e, 2, 100, 4, 2, 64, 0.0f);
    attention_case(e, 1, 64, 2, 1, 64, 0.0f);
    attention_case(e, 2, 130, 4, 2, 64, 0.2f);
    attention_case(e, 2, 256, 4, 2, 64, 0.0f); /* T % 128 == 0: cuDNN's shape when present */
    /* cuDNN's forward with the own warpgroup-MMA backward on sm_90: one 128-row block, and
     * three with a group of three query heads */
    attention_case(e, 1, 128, 2, 2, 64, 0.0f);
    attention_case(e, 1, 384, 6, 2, 64, 0.0f);
    /* over 4 tiles of 64: the mma kernels' one-half blocks (two halves up to 4 tiles) */
    attention_case(e, 1, 320, 4, 2, 64, 0.0f);
    attention_case(e, 1, 300, 2, 2, 64, 0.1f);
}

/* With auto, the first two (T % 128 != 0, dropout) are refused naming reference: only the
 * removed WMMA kernels ran them; runtime.cuda.attention=reference (GT_CUDA_ATTN) runs them. */
static void test_attention_hd128_gqa_matches_cpu_deterministically(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, attention_fwd);
    attention_case(e, 2, 100, 4, 1, 128, 0.0f);
    attention_case(e, 1, 150, 2, 2, 128, 0.1f);
    attention_case(e, 1, 256, 4, 2, 128, 0.0f);
}

static void test_swiglu_matches_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, swiglu_fwd);
    const int fs[2] = {70, 64}; /* scalar and 8-wide vector kernels */
    for (int fi = 0; fi < 2; fi++) {
        int N = 50, f = fs[fi];
        size_t n2 = (size_t)N * 2 * f, n1 = (size_t)N * f;
        float *gu = rand_vec(e, n2, 3.0f), *dy = rand_vec(e, n1, 1.0f), *got = malloc(n2 * 4);
        float *c_gu = c_f32(e, gu, n2), *c_out = c_f32(e, NULL, n1), *c_dgu = c_f32(e, NULL, n2);
        e->cpu->ops->swiglu_fwd(e->cpu, e->cs, c_out, c_gu, N, f);
        e->cpu->ops->swiglu_bwd(e->cpu, e->cs, c_dgu, c_f32(e, dy, n1), c_gu, N, f);
        void *g_gu = g_act(e, gu, n2), *g_out = g_act(e, NULL, n1), *g_dgu = g_act(e, NULL, n2);
        e->gpu->ops->swiglu_fwd(e->gpu, e->gs, g_out, g_gu, N, f);
        e->gpu->ops->swiglu_bwd(e->gpu, e->gs, g_dgu, g_act(e, dy, n1), g_gu, N, f);
        g_read_act(e, got, g_out, n1);
        EXPECT_CLOSE("swiglu_fwd", got, c_out, n1, TOL_BF16);
        g_read_act(e, got, g_dgu, n2);
        EXPECT_CLOSE("swiglu_bwd", got, c_dgu, n2, TOL_BF16);
        free(gu), free(dy), free(got);
    }
}

/* V 1000, 32768 and 50304 (the row in shared memory), 70000 (two passes with 16-byte loads),
 * 1001 (scalar); in place, two ignored targets, one target in the last column. */
static void test_cross_entropy_in_place_and_loss_sum_match_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, cross_entropy);
    NEED_CPU(e, loss_accumulate);
    enum { N = 37 };
    static const int vs[] = {1000, 32768, 50304, 70000, 1001};
    float *c_loss = c_f32(e, NULL, N), *g_loss = g_f32(e, NULL, N), *got = malloc(N * 4);
    for (int vi = 0; vi < 5; vi++) {
        int V = vs[vi];
        char what[64];
        size_t nv = (size_t)N * V;
        float *logits = rand_vec(e, nv, 4.0f), *gotv = malloc(nv * 4);
        int32_t tg[N];
        for (int i = 0; i < N; i++)
            tg[i] = (int32_t)(env_next(e) % (uint64_t)V);
        tg[3] = tg[20] = -1; /* ignored */
        tg[7] = V - 1;       /* the last column */
        float dscale = 1.0f / (float)N;
        float *c_dl = c_f32(e, NULL, nv);
        e->cpu->ops->cross_entropy(e->cpu, e->cs, c_loss, c_dl, c_f32(e, logits, nv),
                                   c_i32(e, tg, N), N, V, dscale);
        void *g_logits = g_act(e, logits, nv);
        e->gpu->ops->cross_entropy(e->gpu, e->gs, g_loss, g_logits, g_logits, g_i32(e, tg, N), N, V,
                                   dscale);
        g_read_f32(e, got, g_loss, N);
        snprintf(what, sizeof what, "cross_entropy losses V=%d", V);
        EXPECT_CLOSE(what, got, c_loss, N, TOL_F32);
        assert_true(got[3] == 0.0f && got[20] == 0.0f);
        g_read_act(e, gotv, g_logits, nv);
        snprintf(what, sizeof what, "cross_entropy dlogits (in place) V=%d", V);
        EXPECT_CLOSE(what, gotv, c_dl, nv, TOL_BF16);
        free(logits), free(gotv);
    }
    /* in place over many rows, twice: the losses must not depend on the order in which the
     * block's threads overwrite the logits with the gradient (the target's logit once raced
     * with those stores) */
    {
        enum { NB = 1024, VB = 32768 };
        size_t nv = (size_t)NB * VB;
        float *logits = rand_vec(e, nv, 4.0f), *l1 = calloc(NB, 4), *l2 = calloc(NB, 4);
        int32_t *tg = malloc(NB * 4);
        for (int i = 0; i < NB; i++)
            tg[i] = (int32_t)(env_next(e) % (uint64_t)VB);
        int32_t *g_tg = g_i32(e, tg, NB);
        float *g_l = g_f32(e, NULL, NB);
        for (int rep = 0; rep < 2; rep++) {
            void *g_logits = g_act(e, logits, nv);
            e->gpu->ops->cross_entropy(e->gpu, e->gs, g_l, g_logits, g_logits, g_tg, NB, VB, 1.0f);
            g_read_f32(e, rep ? l2 : l1, g_l, NB);
        }
        assert_memory_equal(l1, l2, NB * 4);
        float *c_l = c_f32(e, NULL, NB), *c_dl = c_f32(e, NULL, nv);
        e->cpu->ops->cross_entropy(e->cpu, e->cs, c_l, c_dl, c_f32(e, logits, nv), c_i32(e, tg, NB),
                                   NB, VB, 1.0f);
        EXPECT_CLOSE("cross_entropy losses in place, 1024 x 32768", l1, c_l, NB, TOL_F32);
        free(logits), free(l1), free(l2), free(tg);
    }
    gt_step_state init = default_state(), *cst, *gst, hs;
    init.loss = 1.25f;
    make_states(e, &init, &cst, &gst);
    e->cpu->ops->loss_accumulate(e->cpu, e->cs, cst, c_loss, N, 0.5f);
    e->gpu->ops->loss_accumulate(e->gpu, e->gs, gst, g_loss, N, 0.5f);
    read_state(e, &hs, gst);
    printf("    loss_accumulate: gpu %.7g cpu %.7g\n", (double)hs.loss, (double)cst->loss);
    assert_true(fabsf(hs.loss - cst->loss) <= 1e-5f * fabsf(cst->loss));
    free(got);
}

static void test_lr_schedule_matches_cpu_for_every_style(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, step_begin);
    const int steps[] = {0, 4, 9, 10, 50, 150, 199, 200, 500};
    for (int style = 0; style < 3; style++) {
        gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 200, style, 0.0f, 0, 0};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            gt_step_state init = default_state(), *cst, *gst, hs;
            init.step = steps[i];
            init.loss = 7.0f;
            init.nan_flags = 3;
            make_states(e, &init, &cst, &gst);
            e->cpu->ops->step_begin(e->cpu, e->cs, cst, sc);
            e->gpu->ops->step_begin(e->gpu, e->gs, gst, sc);
            read_state(e, &hs, gst);
            if (!(fabsf(hs.lr - cst->lr) <= 1e-6f * cst->lr + 1e-12f))
                fail_msg("style %d step %d: gpu lr %g cpu lr %g", style, steps[i], (double)hs.lr,
                         (double)cst->lr);
            assert_true(hs.loss == 0.0f && hs.nan_flags == 0 && hs.micro == 0);
        }
    }
    gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 200, 2, 0.0f, 0, 0};
    gt_step_state init = default_state(), *cst, *gst, hs;
    init.step = 4;
    make_states(e, &init, &cst, &gst);
    e->gpu->ops->step_begin(e->gpu, e->gs, gst, sc);
    read_state(e, &hs, gst);
    assert_true(fabsf(hs.lr - 5e-4f) < 1e-9f); /* warmup: lr_max * (step + 1) / warmup */
}

/* inverse-square-root, WSD in each annealing style and a warmup from lr_warmup_init: the
 * kernel computes them in the CPU reference's double operations, so the rates are equal */
static void test_lr_schedule_megatron_styles_equal_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, step_begin);
    const int steps[] = {0, 4, 9, 10, 50, 150, 159, 160, 161, 175, 199, 200, 201, 500};
    for (int k = 0; k < 5; k++) {
        gt_lr_schedule sc = {1e-3f, 1e-4f, 10, 200, k == 0 ? 3 : 4, 2e-4f, 40, k - 1};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            gt_step_state init = default_state(), *cst, *gst, hs;
            init.step = steps[i];
            make_states(e, &init, &cst, &gst);
            e->cpu->ops->step_begin(e->cpu, e->cs, cst, sc);
            e->gpu->ops->step_begin(e->gpu, e->gs, gst, sc);
            read_state(e, &hs, gst);
            if (i >= 3 && hs.lr != cst->lr) /* the warmup's float formula may round apart */
                fail_msg("style %d/%d step %d: gpu lr %.9g cpu lr %.9g", sc.style, sc.wsd_style,
                         steps[i], (double)hs.lr, (double)cst->lr);
            if (!(fabsf(hs.lr - cst->lr) <= 1e-6f * cst->lr))
                fail_msg("warmup step %d: gpu lr %g cpu lr %g", steps[i], (double)hs.lr,
                         (double)cst->lr);
        }
    }
}

static void test_optimizer_step_matches_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, adamw);
    NEED_CPU(e, grad_norm);
    size_t n = 5000, n_decay = 3000;
    float *master = rand_vec(e, n, 1.0f), *grads = rand_vec(e, n, 0.1f);
    float *m = rand_vec(e, n, 0.01f), *v = rand_vec(e, n, 0.01f), *got = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_lr_schedule sc = {1e-3f, 1e-4f, 2, 100, 2, 0.0f, 0, 0};
    gt_step_state init = default_state(), *cst, *gst, hs;
    make_states(e, &init, &cst, &gst);
    float *c_master = c_f32(e, master, n), *c_params = c_f32(e, master, n);
    float *c_g = c_f32(e, grads, n), *c_m = c_f32(e, m, n), *c_v = c_f32(e, v, n);
    float *g_master = g_f32(e, master, n), *g_g = g_f32(e, grads, n);
    float *g_m = g_f32(e, m, n), *g_v = g_f32(e, v, n);
    void *g_params = g_act(e, master, n);
    for (int be = 0; be < 2; be++) {
        gt_backend *b = be ? e->gpu : e->cpu;
        gt_stream *s = be ? e->gs : e->cs;
        gt_step_state *st = be ? gst : cst;
        if (be)
            GPU_PLAN(e, b->ops->grad_norm(b, s, st, g_g, n, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad));
        b->ops->step_begin(b, s, st, sc);
        b->ops->grad_norm(b, s, st, be ? g_g : c_g, n, GT_NO_GRAD_ROWS, 1, 1, hp.clip_grad);
        b->ops->adamw(b, s, be ? g_params : (void *)c_params, be ? g_master : c_master,
                      be ? g_g : c_g, GT_NO_GRAD_ROWS, be ? g_m : c_m, be ? g_v : c_v, n, n_decay,
                      hp, st);
        b->ops->step_end(b, s, st);
    }
    read_state(e, &hs, gst);
    printf("    grad_norm gpu %.7g cpu %.7g, clip %.6g / %.6g, lr %.6g / %.6g\n",
           (double)hs.grad_norm, (double)cst->grad_norm, (double)hs.clip_coef,
           (double)cst->clip_coef, (double)hs.lr, (double)cst->lr);
    assert_true(fabsf(hs.grad_norm - cst->grad_norm) <= 1e-5f * cst->grad_norm);
    assert_true(hs.clip_coef < 1.0f);
    assert_int_equal(hs.step, cst->step);
    assert_int_equal(hs.skipped, 0);
    g_read_f32(e, got, g_master, n);
    EXPECT_CLOSE("adamw master", got, c_master, n, 1e-5);
    g_read_f32(e, got, g_m, n);
    EXPECT_CLOSE("adamw m", got, c_m, n, 1e-5);
    g_read_f32(e, got, g_v, n);
    EXPECT_CLOSE("adamw v", got, c_v, n, 1e-5);
    g_read_act(e, got, g_params, n);
    EXPECT_CLOSE("adamw params (bf16)", got, c_master, n, TOL_BF16);
    free(master), free(grads), free(m), free(v), free(got);
}

/* One step of two AdamW runs side by side on the same gradients and step state: the norm,
 * run a (params, master, m, v, hp), run b, then the step's end. */
typedef struct adamw_run {
    void *params, *master, *m, *v;
    gt_adamw_params hp;
} adamw_run;

static void adamw_pair_step(gpu_env *e, gt_step_state *gst, const float *g_g, size_t n,
                            const adamw_run *a, const adamw_run *b) {
    e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g_g, n, GT_NO_GRAD_ROWS, 1, 1, a->hp.clip_grad);
    e->gpu->ops->adamw(e->gpu, e->gs, a->params, a->master, g_g, GT_NO_GRAD_ROWS, a->m, a->v, n,
                       n / 2, a->hp, gst);
    e->gpu->ops->adamw(e->gpu, e->gs, b->params, b->master, g_g, GT_NO_GRAD_ROWS, b->m, b->v, n,
                       n / 2, b->hp, gst);
    e->gpu->ops->step_end(e->gpu, e->gs, gst);
}

/* Moments stored in bf16 on the device: over two steps from the same state the master
 * weights are bitwise those of fp32 moments, and the stored moments are the fp32 ones rounded
 * to nearest-even; n = 4099 runs the scalar kernel, n = 4096 the 4-wide one. */
static void test_adamw_bf16_moments_are_the_fp32_ones_rounded(void **state) {
    gpu_env *e = *state;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = pass ? 4099 : 4096;
        float *master = rand_vec(e, n, 1.0f), *grads = rand_vec(e, n, 0.01f);
        float *w32 = malloc(n * 4), *w16 = malloc(n * 4), *m32 = malloc(n * 4);
        float *v32 = malloc(n * 4), *m16 = malloc(n * 4), *v16 = malloc(n * 4);
        gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0}, hp16 = hp;
        hp16.m_bf16 = hp16.v_bf16 = 1;
        gt_step_state init = default_state(), *cst, *gst;
        make_states(e, &init, &cst, &gst);
        float *g_w32 = g_f32(e, master, n), *g_w16 = g_f32(e, master, n), *g_g = g_f32(e, grads, n);
        float *g_m32 = g_f32(e, NULL, n), *g_v32 = g_f32(e, NULL, n);
        void *g_m16 = g_act(e, NULL, n), *g_v16 = g_act(e, NULL, n), *g_p = g_act(e, NULL, n);
        GPU_PLAN(e, e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g_g, n, GT_NO_GRAD_ROWS, 1, 1,
                                           hp.clip_grad));
        e->gpu->ops->memset0(e->gpu, e->gs, g_m16, n * 2);
        e->gpu->ops->memset0(e->gpu, e->gs, g_v16, n * 2);
        for (int step = 0; step < 2; step++) {
            /* the fp32 run starts from the stored bf16 moments */
            g_read_act(e, m16, g_m16, n);
            g_read_act(e, v16, g_v16, n);
            e->gpu->ops->memcpy_h2d(e->gpu, e->gs, g_m32, m16, n * 4);
            e->gpu->ops->memcpy_h2d(e->gpu, e->gs, g_v32, v16, n * 4);
            g_sync(e);
            adamw_run a = {g_p, g_w32, g_m32, g_v32, hp}, b = {g_p, g_w16, g_m16, g_v16, hp16};
            adamw_pair_step(e, gst, g_g, n, &a, &b);
            g_read_f32(e, w32, g_w32, n);
            g_read_f32(e, w16, g_w16, n);
            g_read_f32(e, m32, g_m32, n);
            g_read_f32(e, v32, g_v32, n);
            g_read_act(e, m16, g_m16, n);
            g_read_act(e, v16, g_v16, n);
            assert_memory_equal(w32, w16, n * 4);
            size_t rounded = 0;
            for (size_t i = 0; i < n; i++) {
                if (m16[i] != bf16_round(m32[i]) || v16[i] != bf16_round(v32[i]))
                    fail_msg("n %zu step %d element %zu: bf16 moments %g %g, fp32 %g %g", n, step,
                             i, (double)m16[i], (double)v16[i], (double)m32[i], (double)v32[i]);
                rounded += m16[i] != m32[i];
            }
            assert_true(rounded > n / 2);
        }
        free(master), free(grads), free(w32), free(w16), free(m32), free(v32), free(m16), free(v16);
    }
}

/* The split master (hp.master_lo: int16 low halves, the bf16 parameters the high halves):
 * over three steps from the same state its joined master weights and its moments are bitwise
 * those of the fp32 master, and its parameters are core/bf16.h's gt_master_split of them;
 * fp32 and bf16 moments, n = 4096 (4-wide kernel) and 4099 (scalar). Some weights start
 * exactly between two bf16, where the halves round away from zero. */
static void test_adamw_split_master_is_the_fp32_master_bit_for_bit(void **state) {
    gpu_env *e = *state;
    for (int pass = 0; pass < 4; pass++) {
        size_t n = pass & 1 ? 4099 : 4096;
        float *master = rand_vec(e, n, 1.0f), *grads = rand_vec(e, n, 0.01f);
        for (size_t i = 0; i < n; i += 97) { /* ties: low half 0x8000 */
            uint32_t u;
            memcpy(&u, &master[i], 4);
            u = (u & 0xffff0000u) | 0x8000u;
            memcpy(&master[i], &u, 4);
        }
        uint16_t *hi = malloc(n * 2);
        int16_t *lo = malloc(n * 2);
        float *w32 = malloc(n * 4), *joined = malloc(n * 4);
        float *ma = malloc(n * 4), *mb = malloc(n * 4), *va = malloc(n * 4), *vb = malloc(n * 4);
        for (size_t i = 0; i < n; i++)
            gt_master_split(master[i], &hi[i], &lo[i]);
        gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0}, hps;
        hp.m_bf16 = hp.v_bf16 = pass >= 2;
        hps = hp;
        hps.master_lo = 1;
        size_t me = pass >= 2 ? 2 : 4;
        gt_step_state init = default_state(), *cst, *gst;
        make_states(e, &init, &cst, &gst);
        float *g_w = g_f32(e, master, n), *g_g = g_f32(e, grads, n);
        void *g_p32 = g_act(e, NULL, n), *g_hi = g_alloc(e, n * 2), *g_lo = g_alloc(e, n * 2);
        void *g_ma = g_alloc(e, n * me), *g_va = g_alloc(e, n * me);
        void *g_mb = g_alloc(e, n * me), *g_vb = g_alloc(e, n * me);
        e->gpu->ops->memcpy_h2d(e->gpu, e->gs, g_hi, hi, n * 2);
        e->gpu->ops->memcpy_h2d(e->gpu, e->gs, g_lo, lo, n * 2);
        GPU_PLAN(e, e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g_g, n, GT_NO_GRAD_ROWS, 1, 1,
                                           hp.clip_grad));
        for (int step = 0; step < 3; step++) {
            adamw_run a = {g_p32, g_w, g_ma, g_va, hp}, b = {g_hi, g_lo, g_mb, g_vb, hps};
            adamw_pair_step(e, gst, g_g, n, &a, &b);
            g_read_f32(e, w32, g_w, n);
            e->gpu->ops->memcpy_d2h(e->gpu, e->gs, hi, g_hi, n * 2);
            e->gpu->ops->memcpy_d2h(e->gpu, e->gs, lo, g_lo, n * 2);
            e->gpu->ops->memcpy_d2h(e->gpu, e->gs, ma, g_ma, n * me);
            e->gpu->ops->memcpy_d2h(e->gpu, e->gs, mb, g_mb, n * me);
            e->gpu->ops->memcpy_d2h(e->gpu, e->gs, va, g_va, n * me);
            e->gpu->ops->memcpy_d2h(e->gpu, e->gs, vb, g_vb, n * me);
            g_sync(e);
            for (size_t i = 0; i < n; i++) {
                joined[i] = gt_master_join(hi[i], lo[i]);
                uint16_t h;
                int16_t l;
                gt_master_split(w32[i], &h, &l);
                if (h != hi[i] || l != lo[i])
                    fail_msg("pass %d step %d element %zu: halves %04x %d, host split %04x %d",
                             pass, step, i, hi[i], lo[i], h, l);
            }
            assert_memory_equal(joined, w32, n * 4);
            assert_memory_equal(ma, mb, n * me);
            assert_memory_equal(va, vb, n * me);
        }
        free(master), free(grads), free(hi), free(lo), free(w32), free(joined);
        free(ma), free(mb), free(va), free(vb);
    }
}

static void test_injected_nan_skips_the_update_and_is_recorded(void **state) {
    gpu_env *e = *state;
    size_t n = 3000;
    float *master = rand_vec(e, n, 1.0f), *grads = rand_vec(e, n, 0.1f), *got = malloc(n * 4);
    float *losses = rand_vec(e, 10, 1.0f);
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_lr_schedule sc = {1e-3f, 1e-4f, 0, 100, 0, 0.0f, 0, 0};
    gt_step_state init = default_state(), *cst, *gst, hs;
    init.inject_nan = 3; /* == init.step */
    make_states(e, &init, &cst, &gst);
    float *g_master = g_f32(e, master, n), *g_g = g_f32(e, grads, n), *g_m = g_f32(e, NULL, n);
    float *g_v = g_f32(e, NULL, n), *g_l = g_f32(e, losses, 10);
    void *g_params = g_act(e, master, n);
    GPU_PLAN(e, e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g_g, n, GT_NO_GRAD_ROWS, 1, 1, 1.0f));
    e->gpu->ops->step_begin(e->gpu, e->gs, gst, sc);
    e->gpu->ops->loss_accumulate(e->gpu, e->gs, gst, g_l, 10, 1.0f);
    e->gpu->ops->inject_nan(e->gpu, e->gs, gst, g_g, GT_NO_GRAD_ROWS);
    e->gpu->ops->grad_norm(e->gpu, e->gs, gst, g_g, n, GT_NO_GRAD_ROWS, 1, 1, 1.0f);
    e->gpu->ops->adamw(e->gpu, e->gs, g_params, g_master, g_g, GT_NO_GRAD_ROWS, g_m, g_v, n, n, hp,
                       gst);
    e->gpu->ops->step_end(e->gpu, e->gs, gst);
    read_state(e, &hs, gst);
    assert_int_equal(hs.nan_flags, GT_NAN_LOSS | GT_NAN_GRAD);
    assert_int_equal(hs.skipped, 1);
    assert_int_equal(hs.nan_step, 3);
    assert_int_equal(hs.nan_first, GT_NAN_LOSS | GT_NAN_GRAD);
    assert_int_equal(hs.step, 4);
    g_read_f32(e, got, g_master, n);
    assert_memory_equal(got, master, n * 4);
    free(master), free(grads), free(got), free(losses);
}

/* AdamW over no parameters still launches cleanly and records a NaN-skipped step. */
static void test_adamw_of_no_parameters_records_a_skip(void **state) {
    gpu_env *e = *state;
    gt_adamw_params hp = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0, 0};
    gt_step_state init = default_state(), *cst, *gst, hs;
    init.nan_flags = GT_NAN_LOSS;
    make_states(e, &init, &cst, &gst);
    float *g = g_f32(e, NULL, 4);
    e->gpu->ops->adamw(e->gpu, e->gs, g_act(e, NULL, 4), g, g, GT_NO_GRAD_ROWS, g, g, 0, 0, hp,
                       gst);
    read_state(e, &hs, gst);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK);
    assert_int_equal(hs.skipped, 1);
}

static void test_grad_norm_is_deterministic_and_exact(void **state) {
    gpu_env *e = *state;
    size_t n = 3000001;
    float *g = rand_vec(e, n, 1.0f);
    double ref = 0;
    for (size_t i = 0; i < n; i++)
        ref += (double)g[i] * g[i];
    ref = sqrt(ref);
    gt_step_state init = default_state(), *cst, *gst, h1, h2;
    make_states(e, &init, &cst, &gst);
    float *dg = g_f32(e, g, n);
    GPU_PLAN(e, e->gpu->ops->grad_norm(e->gpu, e->gs, gst, dg, n, GT_NO_GRAD_ROWS, 0, 1, 0.0f));
    e->gpu->ops->grad_norm(e->gpu, e->gs, gst, dg, n, GT_NO_GRAD_ROWS, 0, 1, 0.0f);
    read_state(e, &h1, gst);
    e->gpu->ops->grad_norm(e->gpu, e->gs, gst, dg, n, GT_NO_GRAD_ROWS, 0, 1, 0.0f);
    read_state(e, &h2, gst);
    printf("    grad_norm %.9g, host double %.9g\n", (double)h1.grad_norm, ref);
    assert_memory_equal(&h1.grad_norm, &h2.grad_norm, sizeof(float));
    assert_true(fabs(h1.grad_norm - ref) <= 1e-6 * ref);
    assert_true(h1.clip_coef == 1.0f && h1.nan_flags == 0);
    free(g);
}

static void test_unplanned_matmul_shape_is_a_sticky_error_naming_it(void **state) {
    gpu_env *e = *state;
    void *a = g_act(e, NULL, 40 * 16), *w = g_act(e, NULL, 24 * 16), *o = g_act(e, NULL, 40 * 24);
    e->gpu->ops->matmul_fwd(e->gpu, e->gs, o, a, w, NULL, NULL, 40, 24, 16);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_ERR_INVALID);
    printf("    %s\n", err.msg);
    assert_non_null(strstr(err.msg, "matmul_fwd"));
    assert_non_null(strstr(err.msg, "M=40 N=24 K=16"));
    assert_int_equal(gt_backend_check(e->gpu, &err), GT_OK); /* reported once */
}

static void test_memory_is_tracked_with_a_peak(void **state) {
    gpu_env *e = *state;
    size_t fr = 0, tot = 0, peak0 = 0, peak1 = 0;
    e->gpu->ops->mem_info(e->gpu, &fr, &tot, &peak0);
    g_alloc(e, peak0 + ((size_t)64 << 20));
    e->gpu->ops->mem_info(e->gpu, &fr, &tot, &peak1);
    assert_true(tot > 0 && fr > 0 && fr <= tot);
    assert_true(peak1 >= peak0 + ((size_t)64 << 20));
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_from_float_rounds_to_nearest_bf16),
        T(test_embedding_matches_cpu_and_backward_is_deterministic),
        T(test_rmsnorm_matches_cpu_and_dw_is_deterministic),
        T(test_add_and_dropout_match_cpu_masks),
        T(test_matmul_matches_cpu_aligned_and_odd_shapes),
        T(test_batched_weight_gradients_match_cpu),
        T(test_rope_matches_cpu),
        T(test_attention_hd64_gqa_matches_cpu_deterministically),
        T(test_attention_hd128_gqa_matches_cpu_deterministically),
        T(test_swiglu_matches_cpu),
        T(test_cross_entropy_in_place_and_loss_sum_match_cpu),
        T(test_lr_schedule_matches_cpu_for_every_style),
        T(test_lr_schedule_megatron_styles_equal_cpu),
        T(test_optimizer_step_matches_cpu),
        T(test_injected_nan_skips_the_update_and_is_recorded),
        T(test_grad_norm_is_deterministic_and_exact),
        T(test_adamw_of_no_parameters_records_a_skip),
        T(test_adamw_bf16_moments_are_the_fp32_ones_rounded),
        T(test_adamw_split_master_is_the_fp32_master_bit_for_bit),
        T(test_unplanned_matmul_shape_is_a_sticky_error_naming_it),
        T(test_memory_is_tracked_with_a_peak),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
