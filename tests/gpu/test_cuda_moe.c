/* GPU tests of the mixture-of-experts ops against the CPU reference: router top-k and its
 * backward, the load-balancing loss, the stable permutation (dropless and with capacity),
 * gather/combine and the grouped GEMMs over device offsets (including empty experts). */
#include "gpu_fixture.h"

#include "backend/cuda/cuda_backend.h" /* gt_cuda_impl: the settings */

enum { N_TOK = 200, E_EXP = 16, TOPK = 4, D_MODEL = 96, NF = 80 };

/* Routing of N_TOK tokens on both backends; experts 5 and 9 get no tokens. */
typedef struct routing {
    float *logits;
    float *c_probs, *c_w;
    int32_t *c_idx, *c_counts;
    float *g_probs, *g_w;
    int32_t *g_idx, *g_counts;
    void *g_logits;
} routing;

static const gt_router_mode RENORM = {0, 1.0f};

static void route_mode(gpu_env *e, routing *r, gt_router_mode mode) {
    size_t ne = (size_t)N_TOK * E_EXP, nk = (size_t)N_TOK * TOPK;
    r->logits = rand_vec(e, ne, 3.0f);
    for (int n = 0; n < N_TOK; n++) {
        r->logits[(size_t)n * E_EXP + 5] = -30.0f;
        r->logits[(size_t)n * E_EXP + 9] = -30.0f;
    }
    r->c_probs = c_f32(e, NULL, ne), r->c_w = c_f32(e, NULL, nk);
    r->c_idx = c_i32(e, NULL, nk), r->c_counts = c_i32(e, NULL, E_EXP);
    e->cpu->ops->moe_router_fwd(e->cpu, e->cs, r->c_probs, r->c_idx, r->c_w, r->c_counts,
                                c_f32(e, r->logits, ne), N_TOK, E_EXP, TOPK, mode);
    r->g_probs = g_f32(e, NULL, ne), r->g_w = g_f32(e, NULL, nk);
    r->g_idx = g_i32(e, NULL, nk), r->g_counts = g_i32(e, NULL, E_EXP);
    r->g_logits = g_act(e, r->logits, ne);
    e->gpu->ops->moe_router_fwd(e->gpu, e->gs, r->g_probs, r->g_idx, r->g_w, r->g_counts,
                                r->g_logits, N_TOK, E_EXP, TOPK, mode);
    g_sync(e);
}

static void route(gpu_env *e, routing *r) {
    route_mode(e, r, RENORM);
}

static void check_router(gpu_env *e, gt_router_mode mode) {
    NEED_CPU(e, moe_router_fwd);
    NEED_CPU(e, moe_aux_loss);
    NEED_CPU(e, moe_router_bwd);
    routing r;
    route_mode(e, &r, mode);
    size_t ne = (size_t)N_TOK * E_EXP, nk = (size_t)N_TOK * TOPK;
    float *got = malloc(ne * 4);
    int32_t *gi = malloc(ne * 4);
    g_read_f32(e, got, r.g_probs, ne);
    EXPECT_CLOSE("router probs", got, r.c_probs, ne, TOL_F32);
    g_read_i32(e, gi, r.g_idx, nk);
    assert_memory_equal(gi, r.c_idx, nk * 4);
    g_read_f32(e, got, r.g_w, nk);
    EXPECT_CLOSE("router topk_w", got, r.c_w, nk, TOL_F32);
    g_read_i32(e, gi, r.g_counts, E_EXP);
    assert_memory_equal(gi, r.c_counts, E_EXP * 4);
    assert_int_equal(gi[5], 0);
    gt_step_state init = default_state(), *cst, *gst, hs;
    init.aux_loss = 0.5f;
    make_states(e, &init, &cst, &gst);
    e->cpu->ops->moe_aux_loss(e->cpu, e->cs, cst, r.c_probs, r.c_counts, N_TOK, E_EXP, TOPK, 0.01f);
    GPU_PLAN(e, e->gpu->ops->moe_aux_loss(e->gpu, e->gs, gst, r.g_probs, r.g_counts, N_TOK, E_EXP,
                                          TOPK, 0.01f));
    e->gpu->ops->moe_aux_loss(e->gpu, e->gs, gst, r.g_probs, r.g_counts, N_TOK, E_EXP, TOPK, 0.01f);
    read_state(e, &hs, gst);
    printf("    aux_loss gpu %.7g cpu %.7g\n", (double)hs.aux_loss, (double)cst->aux_loss);
    assert_true(fabsf(hs.aux_loss - cst->aux_loss) <= 1e-5f * fabsf(cst->aux_loss));
    float *dtw = rand_vec(e, nk, 1.0f);
    float *c_dl = c_f32(e, NULL, ne);
    void *g_dl = g_act(e, NULL, ne);
    e->cpu->ops->moe_router_bwd(e->cpu, e->cs, c_dl, c_f32(e, dtw, nk), r.c_probs, r.c_idx, r.c_w,
                                r.c_counts, N_TOK, E_EXP, TOPK, 0.01f, mode);
    e->gpu->ops->moe_router_bwd(e->gpu, e->gs, g_dl, g_f32(e, dtw, nk), r.g_probs, r.g_idx, r.g_w,
                                r.g_counts, N_TOK, E_EXP, TOPK, 0.01f, mode);
    g_read_act(e, got, g_dl, ne);
    EXPECT_CLOSE("router_bwd dlogits", got, c_dl, ne, TOL_BF16);
    free(r.logits), free(got), free(gi), free(dtw);
}

static void test_router_topk_aux_loss_and_backward_match_cpu(void **state) {
    check_router(*state, RENORM);
}

/* Megatron's moe_router_pre_softmax (Qwen3-MoE's norm_topk_prob=false) and a scaling factor */
static void test_router_pre_softmax_and_scaling_match_cpu(void **state) {
    gt_router_mode pre_scaled = {1, 2.5f}, renorm_scaled = {0, 0.75f};
    check_router(*state, pre_scaled);
    gpu_free_bufs(state);
    check_router(*state, renorm_scaled);
}

/* Permutes on both backends and checks the index arrays are identical. */
static void permute_both(gpu_env *e, routing *r, int capacity, int R, int32_t **c_st,
                         int32_t **c_ts, int32_t **c_off, int32_t **g_st, int32_t **g_ts,
                         int32_t **g_off) {
    size_t nk = (size_t)N_TOK * TOPK;
    *c_st = c_i32(e, NULL, R), *c_ts = c_i32(e, NULL, nk), *c_off = c_i32(e, NULL, E_EXP + 1);
    *g_st = g_i32(e, NULL, R), *g_ts = g_i32(e, NULL, nk), *g_off = g_i32(e, NULL, E_EXP + 1);
    e->cpu->ops->moe_permute(e->cpu, e->cs, *c_st, *c_ts, *c_off, r->c_idx, N_TOK, E_EXP, TOPK,
                             capacity);
    /* the permutation's per-expert counts live in planned scratch */
    GPU_PLAN(e, e->gpu->ops->moe_permute(e->gpu, e->gs, *g_st, *g_ts, *g_off, r->g_idx, N_TOK,
                                         E_EXP, TOPK, capacity));
    e->gpu->ops->moe_permute(e->gpu, e->gs, *g_st, *g_ts, *g_off, r->g_idx, N_TOK, E_EXP, TOPK,
                             capacity);
    int32_t *h = malloc(((size_t)R + nk) * 4);
    g_read_i32(e, h, *g_st, R);
    assert_memory_equal(h, *c_st, (size_t)R * 4);
    g_read_i32(e, h, *g_ts, nk);
    assert_memory_equal(h, *c_ts, nk * 4);
    g_read_i32(e, h, *g_off, E_EXP + 1);
    assert_memory_equal(h, *c_off, (E_EXP + 1) * 4);
    /* stable: inside each expert's rows, assignments increase */
    g_read_i32(e, h, *g_st, R);
    for (int x = 0; x < E_EXP; x++)
        for (int row = (*c_off)[x] + 1; row < (*c_off)[x + 1]; row++)
            if (h[row] >= 0 && h[row - 1] >= 0) assert_true(h[row] > h[row - 1]);
    free(h);
}

static void test_permute_is_stable_and_matches_cpu_dropless_and_capacity(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, moe_permute);
    NEED_CPU(e, moe_router_fwd);
    routing r;
    route(e, &r);
    int32_t *cs, *ct, *co, *gs, *gt, *go;
    permute_both(e, &r, 0, N_TOK * TOPK, &cs, &ct, &co, &gs, &gt, &go);
    assert_int_equal(co[E_EXP], N_TOK * TOPK);
    int C = 40; /* some experts overflow (about 57 tokens each on average) */
    permute_both(e, &r, C, E_EXP * C, &cs, &ct, &co, &gs, &gt, &go);
    int dropped = 0;
    for (int a = 0; a < N_TOK * TOPK; a++)
        dropped += ct[a] < 0;
    printf("    capacity %d: %d of %d assignments dropped\n", C, dropped, N_TOK * TOPK);
    assert_true(dropped > 0);
    free(r.logits);
}

static void test_gather_combine_and_grouped_matmuls_match_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, moe_gather);
    NEED_CPU(e, moe_matmul_fwd);
    NEED_CPU(e, moe_combine_fwd);
    routing r;
    route(e, &r);
    for (int capacity = 0; capacity <= 40; capacity += 40) {
        int R = capacity ? E_EXP * capacity : N_TOK * TOPK;
        int32_t *cs, *ct, *co, *gs, *gt, *go;
        permute_both(e, &r, capacity, R, &cs, &ct, &co, &gs, &gt, &go);
        size_t nx = (size_t)N_TOK * D_MODEL, nxe = (size_t)R * D_MODEL, nh = (size_t)R * NF;
        size_t nw = (size_t)E_EXP * NF * D_MODEL;
        float *x = rand_vec(e, nx, 1.0f), *w = rand_vec(e, nw, 0.2f), *dh = rand_vec(e, nh, 1.0f);
        float *dx0 = rand_vec(e, nx, 1.0f), *dw0 = rand_vec(e, nw, 0.1f);
        float *got = malloc((nw > nxe ? nw : nxe) * 4 + nx * 4);
        /* gather */
        float *c_xe = c_f32(e, NULL, nxe);
        void *g_x = g_act(e, x, nx), *g_xe = g_act(e, NULL, nxe);
        e->cpu->ops->moe_gather(e->cpu, e->cs, c_xe, c_f32(e, x, nx), cs, R, TOPK, D_MODEL);
        e->gpu->ops->moe_gather(e->gpu, e->gs, g_xe, g_x, gs, R, TOPK, D_MODEL);
        g_read_act(e, got, g_xe, nxe);
        EXPECT_CLOSE("moe_gather", got, c_xe, nxe, 1e-6);
        /* grouped matmuls: h[R,NF] = xe @ w[e]^T; dxe = dh @ w[e]; dw[e] += dh^T xe */
        float *c_w = c_f32(e, w, nw), *c_h = c_f32(e, NULL, nh), *c_dh = c_f32(e, dh, nh);
        void *g_w = g_act(e, w, nw), *g_h = g_act(e, NULL, nh), *g_dh = g_act(e, dh, nh);
        e->cpu->ops->moe_matmul_fwd(e->cpu, e->cs, c_h, c_xe, c_w, co, R, E_EXP, NF, D_MODEL);
        e->gpu->ops->moe_matmul_fwd(e->gpu, e->gs, g_h, g_xe, g_w, go, R, E_EXP, NF, D_MODEL);
        g_read_act(e, got, g_h, nh);
        EXPECT_CLOSE("moe_matmul_fwd", got, c_h, nh, TOL_BF16);
        float *c_dxe = c_f32(e, NULL, nxe);
        void *g_dxe = g_act(e, NULL, nxe);
        e->cpu->ops->moe_matmul_bwd_data(e->cpu, e->cs, c_dxe, c_dh, c_w, co, R, E_EXP, NF,
                                         D_MODEL);
        e->gpu->ops->moe_matmul_bwd_data(e->gpu, e->gs, g_dxe, g_dh, g_w, go, R, E_EXP, NF,
                                         D_MODEL);
        g_read_act(e, got, g_dxe, nxe);
        EXPECT_CLOSE("moe_matmul_bwd_data", got, c_dxe, nxe, TOL_BF16);
        float *c_dw = c_f32(e, dw0, nw), *g_dw = g_f32(e, dw0, nw);
        e->cpu->ops->moe_matmul_bwd_weight(e->cpu, e->cs, c_dw, c_dh, c_xe, co, R, E_EXP, NF,
                                           D_MODEL, 1);
        e->gpu->ops->moe_matmul_bwd_weight(e->gpu, e->gs, g_dw, g_dh, g_xe, go, R, E_EXP, NF,
                                           D_MODEL, 1);
        g_read_f32(e, got, g_dw, nw);
        EXPECT_CLOSE("moe_matmul_bwd_weight (+=)", got, c_dw, nw, TOL_F32);
        /* gather backward: dx += sum of its rows of dxe */
        float *c_dx = c_f32(e, dx0, nx);
        void *g_dx = g_act(e, dx0, nx);
        e->cpu->ops->moe_gather_bwd(e->cpu, e->cs, c_dx, c_dxe, ct, N_TOK, TOPK, D_MODEL);
        e->gpu->ops->moe_gather_bwd(e->gpu, e->gs, g_dx, g_dxe, gt, N_TOK, TOPK, D_MODEL);
        g_read_act(e, got, g_dx, nx);
        EXPECT_CLOSE("moe_gather_bwd (+=)", got, c_dx, nx, TOL_BF16);
        /* combine: ye = xe (any [R,d] tensor), y = sum_j w * ye */
        float *c_y = c_f32(e, NULL, nx);
        void *g_y = g_act(e, NULL, nx);
        e->cpu->ops->moe_combine_fwd(e->cpu, e->cs, c_y, c_xe, r.c_w, ct, N_TOK, TOPK, D_MODEL);
        e->gpu->ops->moe_combine_fwd(e->gpu, e->gs, g_y, g_xe, r.g_w, gt, N_TOK, TOPK, D_MODEL);
        g_read_act(e, got, g_y, nx);
        EXPECT_CLOSE("moe_combine_fwd", got, c_y, nx, TOL_BF16);
        float *c_dye = c_f32(e, NULL, nxe), *c_dtw = c_f32(e, NULL, (size_t)N_TOK * TOPK);
        void *g_dye = g_act(e, NULL, nxe);
        float *g_dtw = g_f32(e, NULL, (size_t)N_TOK * TOPK);
        float *c_dy = c_f32(e, dx0, nx);
        void *g_dy = g_act(e, dx0, nx);
        e->cpu->ops->moe_combine_bwd(e->cpu, e->cs, c_dye, c_dtw, c_dy, c_xe, r.c_w, ct, cs, N_TOK,
                                     R, TOPK, D_MODEL);
        e->gpu->ops->moe_combine_bwd(e->gpu, e->gs, g_dye, g_dtw, g_dy, g_xe, r.g_w, gt, gs, N_TOK,
                                     R, TOPK, D_MODEL);
        g_read_act(e, got, g_dye, nxe);
        EXPECT_CLOSE("moe_combine_bwd dye", got, c_dye, nxe, TOL_BF16);
        g_read_f32(e, got, g_dtw, (size_t)N_TOK * TOPK);
        EXPECT_CLOSE("moe_combine_bwd dtopk_w", got, c_dtw, (size_t)N_TOK * TOPK, TOL_F32);
        free(x), free(w), free(dh), free(dx0), free(dw0), free(got);
    }
    free(r.logits);
}

/* One grouped-GEMM case: fwd, data gradient and weight gradient (+=) against the CPU. */
static void grouped_case(gpu_env *e, const int32_t *off, int E, int NFW, int KW) {
    char what[96];
    int R = off[E];
    size_t na = (size_t)R * KW, nh = (size_t)R * NFW, nw = (size_t)E * NFW * KW;
    float *x = rand_vec(e, na, 1.0f), *w = rand_vec(e, nw, 0.2f), *dh = rand_vec(e, nh, 1.0f);
    float *dw0 = rand_vec(e, nw, 0.1f);
    size_t most = nw > na ? nw : na; /* got receives [E,NFW,KW], [R,KW] and [R,NFW] */
    float *got = malloc((most > nh ? most : nh) * 4);
    int32_t *co = c_i32(e, off, (size_t)E + 1), *go = g_i32(e, off, (size_t)E + 1);
    float *c_x = c_f32(e, x, na), *c_w = c_f32(e, w, nw), *c_h = c_f32(e, NULL, nh);
    void *g_x = g_act(e, x, na), *g_w = g_act(e, w, nw), *g_h = g_act(e, NULL, nh);
    e->cpu->ops->moe_matmul_fwd(e->cpu, e->cs, c_h, c_x, c_w, co, R, E, NFW, KW);
    e->gpu->ops->moe_matmul_fwd(e->gpu, e->gs, g_h, g_x, g_w, go, R, E, NFW, KW);
    g_read_act(e, got, g_h, nh);
    snprintf(what, sizeof what, "moe_matmul_fwd %dx%dx%d E=%d", R, NFW, KW, E);
    EXPECT_CLOSE(what, got, c_h, nh, TOL_BF16);
    float *c_dh = c_f32(e, dh, nh), *c_dx = c_f32(e, NULL, na);
    void *g_dh = g_act(e, dh, nh), *g_dx = g_act(e, NULL, na);
    e->cpu->ops->moe_matmul_bwd_data(e->cpu, e->cs, c_dx, c_dh, c_w, co, R, E, NFW, KW);
    e->gpu->ops->moe_matmul_bwd_data(e->gpu, e->gs, g_dx, g_dh, g_w, go, R, E, NFW, KW);
    g_read_act(e, got, g_dx, na);
    snprintf(what, sizeof what, "moe_matmul_bwd_data %dx%dx%d", R, KW, NFW);
    EXPECT_CLOSE(what, got, c_dx, na, TOL_BF16);
    float *c_dw = c_f32(e, dw0, nw), *g_dw = g_f32(e, dw0, nw);
    e->cpu->ops->moe_matmul_bwd_weight(e->cpu, e->cs, c_dw, c_dh, c_x, co, R, E, NFW, KW, 1);
    e->gpu->ops->moe_matmul_bwd_weight(e->gpu, e->gs, g_dw, g_dh, g_x, go, R, E, NFW, KW, 1);
    g_read_f32(e, got, g_dw, nw);
    snprintf(what, sizeof what, "moe_matmul_bwd_weight %dx%dx%d (+=)", E, NFW, KW);
    EXPECT_CLOSE(what, got, c_dw, nw, TOL_F32);
    /* the empty experts' gradients are untouched */
    for (int ex = 0; ex < E; ex++)
        if (off[ex + 1] == off[ex])
            for (size_t q = 0; q < (size_t)NFW * KW; q += 97)
                assert_true(got[(size_t)ex * NFW * KW + q] == dw0[(size_t)ex * NFW * KW + q]);
    /* overwrite (a step's first micro-batch): NaN-filled gradients get the product, the empty
     * experts zeros */
    for (size_t q = 0; q < nw; q++)
        dw0[q] = NAN;
    float *c_dwo = c_f32(e, dw0, nw), *g_dwo = g_f32(e, dw0, nw);
    e->cpu->ops->moe_matmul_bwd_weight(e->cpu, e->cs, c_dwo, c_dh, c_x, co, R, E, NFW, KW, 0);
    e->gpu->ops->moe_matmul_bwd_weight(e->gpu, e->gs, g_dwo, g_dh, g_x, go, R, E, NFW, KW, 0);
    g_read_f32(e, got, g_dwo, nw);
    snprintf(what, sizeof what, "moe_matmul_bwd_weight %dx%dx%d (=)", E, NFW, KW);
    EXPECT_CLOSE(what, got, c_dwo, nw, TOL_F32);
    for (int ex = 0; ex < E; ex++)
        if (off[ex + 1] == off[ex])
            for (size_t q = 0; q < (size_t)NFW * KW; q++)
                assert_true(got[(size_t)ex * NFW * KW + q] == 0.0f);
    free(x), free(w), free(dh), free(dw0), free(got);
}

/* The grouped GEMMs at widths past one tile and one 32-deep k step: uneven groups (empty, one
 * row, exactly one tile, one past a tile), a reduction length that is not a multiple of 32,
 * column counts that leave partial tiles; small groups and groups of several tiles. Widths
 * of 136, 520, 264 and 200 leave partial 128-wide tiles and 64-deep k steps; 256 and 512 do
 * not. */
static void test_grouped_matmuls_match_cpu_across_tiles(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, moe_matmul_fwd);
    static const int32_t small[9] = {0, 300, 300, 429, 430, 685, 813, 813, 1000};
    grouped_case(e, small, 8, 136, 520);
    grouped_case(e, small, 8, 264, 200);
    static const int32_t big[5] = {0, 700, 700, 1213, 1600};
    grouped_case(e, big, 4, 256, 520);
    grouped_case(e, big, 4, 256, 512);
}

/* Many rounds of the placement kernel (12000 assignments, 4096 a round): random experts, one
 * of them never chosen; dropless and with a capacity that drops; index arrays equal the CPU's. */
static void test_permute_over_several_rounds_matches_cpu(void **state) {
    gpu_env *e = *state;
    NEED_CPU(e, moe_permute);
    enum { PN = 3000, PK = 4, PE = 16 };
    size_t nk = (size_t)PN * PK;
    int32_t *idx = malloc(nk * 4), *h = malloc(nk * 4);
    for (size_t a = 0; a < nk; a++) {
        idx[a] = (int32_t)(env_next(e) % (PE - 1));
        if (idx[a] >= 7) idx[a]++; /* expert 7 gets nothing */
    }
    int32_t *c_idx = c_i32(e, idx, nk), *g_idx = g_i32(e, idx, nk);
    for (int capacity = 0; capacity <= 700; capacity += 700) {
        int R = capacity ? PE * capacity : (int)nk;
        int32_t *c_st = c_i32(e, NULL, R), *c_ts = c_i32(e, NULL, nk);
        int32_t *c_off = c_i32(e, NULL, PE + 1), *g_st = g_i32(e, NULL, R);
        int32_t *g_ts = g_i32(e, NULL, nk), *g_off = g_i32(e, NULL, PE + 1);
        e->cpu->ops->moe_permute(e->cpu, e->cs, c_st, c_ts, c_off, c_idx, PN, PE, PK, capacity);
        GPU_PLAN(e, e->gpu->ops->moe_permute(e->gpu, e->gs, g_st, g_ts, g_off, g_idx, PN, PE, PK,
                                             capacity));
        e->gpu->ops->moe_permute(e->gpu, e->gs, g_st, g_ts, g_off, g_idx, PN, PE, PK, capacity);
        g_read_i32(e, h, g_ts, nk);
        assert_memory_equal(h, c_ts, nk * 4);
        g_read_i32(e, h, g_off, PE + 1);
        assert_memory_equal(h, c_off, (PE + 1) * 4);
        g_read_i32(e, h, g_st, (size_t)R);
        assert_memory_equal(h, c_st, (size_t)R * 4);
        int dropped = 0;
        for (size_t a = 0; a < nk; a++)
            dropped += c_ts[a] < 0;
        printf("    %zu assignments, capacity %d: %d dropped\n", nk, capacity, dropped);
        if (capacity) assert_true(dropped > 0);
    }
    free(idx), free(h);
}

/* Only the removed WMMA kernels took sizes that are not multiples of 8: the tensor-core
 * choices refuse them while planning, naming the key and reference (which runs them). */
static void test_grouped_matmul_width_not_a_multiple_of_8_is_refused_naming_the_key(void **state) {
    gpu_env *e = *state;
    const gt_cuda_impl *im = e->gpu->impl;
    if (im->opts.moe_gemm == GT_CUDA_MOE_REFERENCE) skip();
    enum { R = 64, E = 2, NFW = 100, KW = 64 };
    int32_t off[E + 1] = {0, 32, R};
    void *x = g_act(e, NULL, (size_t)R * KW), *w = g_act(e, NULL, (size_t)E * NFW * KW);
    void *h = g_act(e, NULL, (size_t)R * NFW);
    int32_t *go = g_i32(e, off, E + 1);
    gt_error err = {0};
    e->gpu->planning = 1;
    e->gpu->ops->moe_matmul_fwd(e->gpu, e->gs, h, x, w, go, R, E, NFW, KW);
    int rc = e->gpu->ops->plan_finish(e->gpu, &err);
    e->gpu->planning = 0;
    printf("    refused: %s\n", err.msg);
    assert_int_equal(rc, GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "runtime.cuda.moe_gemm"));
    assert_non_null(strstr(err.msg, "reference"));
}

int main(void) {
#define T(f) cmocka_unit_test_teardown(f, gpu_free_bufs)
    const struct CMUnitTest tests[] = {
        T(test_router_topk_aux_loss_and_backward_match_cpu),
        T(test_router_pre_softmax_and_scaling_match_cpu),
        T(test_permute_is_stable_and_matches_cpu_dropless_and_capacity),
        T(test_permute_over_several_rounds_matches_cpu),
        T(test_gather_combine_and_grouped_matmuls_match_cpu),
        T(test_grouped_matmuls_match_cpu_across_tiles),
        T(test_grouped_matmul_width_not_a_multiple_of_8_is_refused_naming_the_key),
    };
    return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
