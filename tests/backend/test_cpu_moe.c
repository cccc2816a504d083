/* CPU reference MoE ops: router top-k and ties on hand-computed cases, the Switch aux loss,
 * permutation tables for dropless and drop-and-pad routing, gather/scatter adjointness, and
 * the router, grouped matmul and combine backwards against central finite differences. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

#define FD_EPS 1e-3f
#define FD_REL_TOL 1e-2
#define FD_FLOOR 0.1

#include "cpu_op_fixture.h"

static int setup(void **state) {
    return fixture_setup(state, 2024u);
}

/* no op may have failed silently */
static int teardown(void **state) {
    return fixture_teardown(state, 1);
}

/* ---------------- router ---------------- */

static const gt_router_mode RENORM = {0, 1.0f};

static void test_router_topk_ties_go_to_lower_expert_and_weights_renormalize(void **state) {
    fixture *f = *state;
    enum { N = 3, E = 4, K = 2 };
    float logits[N * E] = {
        0.0f,       1.0f,       1.0f,       -1.0f,      /* tie between 1 and 2 */
        logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f), /* probs 0.1 .. 0.4 */
        2.0f,       2.0f,       2.0f,       0.0f,       /* three-way tie */
    };
    float probs[N * E], w[N * K];
    int32_t idx[N * K], counts[E];
    f->b->ops->moe_router_fwd(f->b, f->s, probs, idx, w, counts, logits, N, E, K, RENORM);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 2);
    assert_float_equal(w[0], 0.5f, 1e-6);
    assert_float_equal(w[1], 0.5f, 1e-6);
    assert_int_equal(idx[2], 3);
    assert_int_equal(idx[3], 2);
    assert_float_equal(w[2], 0.4f / 0.7f, 1e-6);
    assert_float_equal(w[3], 0.3f / 0.7f, 1e-6);
    for (int e = 0; e < E; e++)
        assert_float_equal(probs[E + e], 0.1f * (e + 1), 1e-6);
    assert_int_equal(idx[4], 0);
    assert_int_equal(idx[5], 1);
    int32_t want[E] = {1, 2, 2, 1};
    assert_memory_equal(counts, want, sizeof want);
}

/* Megatron's moe_router_pre_softmax: the softmax over all experts at the top k, not
 * renormalized; the scaling factor multiplies the weights in either order. */
static void test_router_pre_softmax_keeps_probabilities_and_scale_multiplies(void **state) {
    fixture *f = *state;
    enum { N = 1, E = 4, K = 2 };
    float logits[N * E] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
    float probs[N * E], w[N * K];
    int32_t idx[N * K], counts[E];
    gt_router_mode pre = {1, 1.0f}, pre_scaled = {1, 2.5f}, renorm_scaled = {0, 2.5f};
    f->b->ops->moe_router_fwd(f->b, f->s, probs, idx, w, counts, logits, N, E, K, pre);
    assert_int_equal(idx[0], 3);
    assert_int_equal(idx[1], 2);
    assert_float_equal(w[0], 0.4f, 1e-6);
    assert_float_equal(w[1], 0.3f, 1e-6);
    f->b->ops->moe_router_fwd(f->b, f->s, probs, idx, w, counts, logits, N, E, K, pre_scaled);
    assert_float_equal(w[0], 2.5f * 0.4f, 1e-6);
    assert_float_equal(w[1], 2.5f * 0.3f, 1e-6);
    f->b->ops->moe_router_fwd(f->b, f->s, probs, idx, w, counts, logits, N, E, K, renorm_scaled);
    assert_float_equal(w[0], 2.5f * 0.4f / 0.7f, 1e-6);
    assert_float_equal(w[1], 2.5f * 0.3f / 0.7f, 1e-6);
}

static void test_aux_loss_is_switch_style_and_accumulates(void **state) {
    fixture *f = *state;
    /* N = 2, k = 1: f = counts / 2 = [1, 0, 0, 0]; mean probs of expert 0 = 0.375 */
    float probs[8] = {0.5f, 0.5f, 0, 0, 0.25f, 0.25f, 0.25f, 0.25f};
    int32_t counts[4] = {2, 0, 0, 0};
    f->st.aux_loss = 0.5f;
    f->b->ops->moe_aux_loss(f->b, f->s, &f->st, probs, counts, 2, 4, 1, 0.01f);
    assert_float_equal(f->st.aux_loss, 0.5f + 0.01f * 4 * 0.375f, 1e-7);
}

typedef struct router_ctx {
    fixture *f;
    float *logits, *probs, *w, *dw;
    int32_t *idx, *counts, *idx0;
    int N, E, k;
    float coeff;
    gt_router_mode mode;
} router_ctx;

static double router_loss(void *p) {
    router_ctx *c = p;
    gt_backend *b = c->f->b;
    b->ops->moe_router_fwd(b, c->f->s, c->probs, c->idx, c->w, c->counts, c->logits, c->N, c->E,
                           c->k, c->mode);
    /* the selection must not change under the perturbation, or FD is meaningless */
    assert_memory_equal(c->idx, c->idx0, (size_t)c->N * c->k * sizeof(int32_t));
    c->f->st.aux_loss = 0;
    b->ops->moe_aux_loss(b, c->f->s, &c->f->st, c->probs, c->counts, c->N, c->E, c->k, c->coeff);
    return dotd(c->dw, c->w, (size_t)c->N * c->k) + c->f->st.aux_loss;
}

static void check_router_backward(fixture *f, gt_router_mode mode) {
    enum { N = 6, E = 5, K = 2 };
    router_ctx c = {f,
                    rand_buf(f, N * E, 2),
                    calloc(N * E, 4),
                    calloc(N * K, 4),
                    rand_buf(f, N * K, 1),
                    calloc(N * K, 4),
                    calloc(E, 4),
                    calloc(N * K, 4),
                    N,
                    E,
                    K,
                    0.3f,
                    mode};
    f->b->ops->moe_router_fwd(f->b, f->s, c.probs, c.idx0, c.w, c.counts, c.logits, N, E, K, mode);
    router_loss(&c);
    float *dl = calloc(N * E, 4);
    f->b->ops->moe_router_bwd(f->b, f->s, dl, c.dw, c.probs, c.idx, c.w, c.counts, N, E, K, c.coeff,
                              mode);
    assert_true(fd_max_err(router_loss, &c, c.logits, N * E, dl, "router dlogits") < FD_REL_TOL);
    /* without the aux term the gradient differs */
    float *dl0 = calloc(N * E, 4);
    f->b->ops->moe_router_bwd(f->b, f->s, dl0, c.dw, c.probs, c.idx, c.w, c.counts, N, E, K, 0,
                              mode);
    assert_memory_not_equal(dl, dl0, N * E * sizeof(float));
    free(c.logits), free(c.probs), free(c.w), free(c.dw), free(c.idx), free(c.counts);
    free(c.idx0), free(dl), free(dl0);
}

static void test_router_backward_through_renormalization_softmax_and_aux_loss(void **state) {
    check_router_backward(*state, RENORM);
}

/* pre-softmax (no renormalization) and a scaling factor, each order */
static void test_router_backward_pre_softmax_and_scaled(void **state) {
    gt_router_mode pre = {1, 1.0f}, pre_scaled = {1, 1.7f}, renorm_scaled = {0, 1.7f};
    check_router_backward(*state, pre);
    check_router_backward(*state, pre_scaled);
    check_router_backward(*state, renorm_scaled);
}

/* ---------------- permutation ---------------- */

/* N = 4 tokens, k = 2, E = 3; assignment a = n*k + j routes to: */
static const int32_t perm_idx[8] = {0, 2, 2, 1, 0, 2, 1, 0};
/* expert 0: a = 0, 4, 7; expert 1: a = 3, 6; expert 2: a = 1, 2, 5 */

static void test_permute_dropless_is_stable_counting_sort(void **state) {
    fixture *f = *state;
    int32_t slot_token[8], token_slot[8], off[4];
    f->b->ops->moe_permute(f->b, f->s, slot_token, token_slot, off, perm_idx, 4, 3, 2, 0);
    int32_t want_off[4] = {0, 3, 5, 8};
    int32_t want_st[8] = {0, 4, 7, 3, 6, 1, 2, 5};
    int32_t want_ts[8] = {0, 5, 6, 3, 1, 7, 4, 2};
    assert_memory_equal(off, want_off, sizeof want_off);
    assert_memory_equal(slot_token, want_st, sizeof want_st);
    assert_memory_equal(token_slot, want_ts, sizeof want_ts);
}

static void test_permute_with_capacity_drops_late_tokens(void **state) {
    fixture *f = *state;
    int32_t slot_token[6], token_slot[8], off[4];
    f->b->ops->moe_permute(f->b, f->s, slot_token, token_slot, off, perm_idx, 4, 3, 2, 2);
    int32_t want_off[4] = {0, 2, 4, 6};
    int32_t want_st[6] = {0, 4, 3, 6, 1, 2};
    int32_t want_ts[8] = {0, 4, 5, 2, 1, -1, 3, -1}; /* a = 5 and 7 are dropped */
    assert_memory_equal(off, want_off, sizeof want_off);
    assert_memory_equal(slot_token, want_st, sizeof want_st);
    assert_memory_equal(token_slot, want_ts, sizeof want_ts);
}

static void test_permute_with_capacity_pads_unused_rows(void **state) {
    fixture *f = *state;
    int32_t slot_token[9], token_slot[8], off[4];
    f->b->ops->moe_permute(f->b, f->s, slot_token, token_slot, off, perm_idx, 4, 3, 2, 3);
    int32_t want_off[4] = {0, 3, 6, 9};
    int32_t want_st[9] = {0, 4, 7, 3, 6, -1, 1, 2, 5};
    int32_t want_ts[8] = {0, 6, 7, 3, 1, 8, 4, 2};
    assert_memory_equal(off, want_off, sizeof want_off);
    assert_memory_equal(slot_token, want_st, sizeof want_st);
    assert_memory_equal(token_slot, want_ts, sizeof want_ts);
}

static void test_permute_rejects_expert_index_out_of_range(void **state) {
    fixture *f = *state;
    int32_t idx[2] = {0, 5}, st[2], ts[2], off[4];
    f->b->ops->moe_permute(f->b, f->s, st, ts, off, idx, 1, 3, 2, 0);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expert index 5"));
}

static void test_gather_backward_is_adjoint_of_gather(void **state) {
    fixture *f = *state;
    enum { N = 4, K = 2, D = 3, R = 6 };
    int32_t slot_token[R], token_slot[N * K], off[4];
    f->b->ops->moe_permute(f->b, f->s, slot_token, token_slot, off, perm_idx, N, 3, K, 2);
    float *x = rand_buf(f, N * D, 1), *xe = rand_buf(f, R * D, 1);
    float *dxe = rand_buf(f, R * D, 1), *dx = calloc(N * D, 4);
    f->b->ops->moe_gather(f->b, f->s, xe, x, slot_token, R, K, D);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < D; i++)
            assert_true(xe[r * D + i] == x[slot_token[r] / K * D + i]);
    f->b->ops->moe_gather_bwd(f->b, f->s, dx, dxe, token_slot, N, K, D);
    /* <dxe, gather(x)> == <gather_bwd(dxe), x> */
    assert_float_equal(dotd(dxe, xe, R * D), dotd(dx, x, N * D), 1e-5);
    /* padding rows gather zeros */
    int32_t pad_st[9], pad_ts[8];
    float xe9[9 * D];
    f->b->ops->moe_permute(f->b, f->s, pad_st, pad_ts, off, perm_idx, N, 3, K, 3);
    f->b->ops->moe_gather(f->b, f->s, xe9, x, pad_st, 9, K, D);
    for (int i = 0; i < D; i++)
        assert_true(xe9[5 * D + i] == 0.0f);
    free(x), free(xe), free(dxe), free(dx);
}

/* ---------------- grouped matmul ---------------- */

typedef struct gmm_ctx {
    fixture *f;
    float *a, *w, *out, *g;
    const int32_t *off;
    int R, E, Nf, K;
} gmm_ctx;

static double gmm_loss(void *p) {
    gmm_ctx *c = p;
    c->f->b->ops->moe_matmul_fwd(c->f->b, c->f->s, c->out, c->a, c->w, c->off, c->R, c->E, c->Nf,
                                 c->K);
    return dotd(c->g, c->out, (size_t)c->R * c->Nf);
}

static void test_grouped_matmul_forward_backward_over_offsets(void **state) {
    fixture *f = *state;
    enum { R = 7, E = 3, NF = 4, KK = 5 };
    static const int32_t off[E + 1] = {0, 2, 2, 6}; /* expert 1 empty, row 6 in no group */
    gmm_ctx c = {f,
                 rand_buf(f, R * KK, 1),
                 rand_buf(f, E * NF * KK, 1),
                 rand_buf(f, R * NF, 1),
                 rand_buf(f, R * NF, 1),
                 off,
                 R,
                 E,
                 NF,
                 KK};
    float sentinel = c.out[6 * NF];
    gmm_loss(&c);
    assert_true(c.out[6 * NF] == sentinel); /* rows outside every group untouched */
    for (int r = 0; r < 6; r++) {
        int e = r < 2 ? 0 : 2;
        for (int n = 0; n < NF; n++) {
            double ref = 0;
            for (int k = 0; k < KK; k++)
                ref += (double)c.a[r * KK + k] * c.w[(e * NF + n) * KK + k];
            assert_float_equal(c.out[r * NF + n], ref, 1e-5);
        }
    }
    float *da = calloc(R * KK, 4), *dw = calloc(E * NF * KK, 4);
    f->b->ops->moe_matmul_bwd_data(f->b, f->s, da, c.g, c.w, off, R, E, NF, KK);
    f->b->ops->moe_matmul_bwd_weight(f->b, f->s, dw, c.g, c.a, off, R, E, NF, KK, 1);
    assert_true(fd_max_err(gmm_loss, &c, c.a, R * KK, da, "grouped matmul da") < FD_REL_TOL);
    assert_true(fd_max_err(gmm_loss, &c, c.w, E * NF * KK, dw, "grouped matmul dw") < FD_REL_TOL);
    for (int i = 0; i < NF * KK; i++)
        assert_true(dw[NF * KK + i] == 0.0f); /* empty expert */
    float dw0 = dw[0];
    f->b->ops->moe_matmul_bwd_weight(f->b, f->s, dw, c.g, c.a, off, R, E, NF, KK, 1);
    assert_float_equal(dw[0], 2 * dw0, 1e-5); /* accumulates */
    /* accumulate 0 overwrites every expert, the empty one with zeros */
    for (int i = 0; i < E * NF * KK; i++)
        dw[i] = NAN;
    f->b->ops->moe_matmul_bwd_weight(f->b, f->s, dw, c.g, c.a, off, R, E, NF, KK, 0);
    assert_true(dw[0] == dw0);
    for (int i = 0; i < NF * KK; i++)
        assert_true(dw[NF * KK + i] == 0.0f);
    free(c.a), free(c.w), free(c.out), free(c.g), free(da), free(dw);
}

static void test_grouped_matmul_rejects_decreasing_offsets(void **state) {
    fixture *f = *state;
    static const int32_t off[3] = {0, 3, 2};
    float a[8] = {0}, w[8] = {0}, out[8] = {0};
    f->b->ops->moe_matmul_fwd(f->b, f->s, out, a, w, off, 4, 2, 1, 2);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(f->b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "offsets"));
}

/* ---------------- combine ---------------- */

typedef struct combine_ctx {
    fixture *f;
    float *ye, *w, *y, *g;
    const int32_t *ts;
    int N, k, d;
} combine_ctx;

static double combine_loss(void *p) {
    combine_ctx *c = p;
    c->f->b->ops->moe_combine_fwd(c->f->b, c->f->s, c->y, c->ye, c->w, c->ts, c->N, c->k, c->d);
    return dotd(c->g, c->y, (size_t)c->N * c->d);
}

static void test_combine_backward_with_dropped_assignments(void **state) {
    fixture *f = *state;
    enum { N = 4, K = 2, D = 3, R = 6 };
    int32_t slot_token[R], token_slot[N * K], off[4];
    f->b->ops->moe_permute(f->b, f->s, slot_token, token_slot, off, perm_idx, N, 3, K, 2);
    combine_ctx c = {f,
                     rand_buf(f, R * D, 1),
                     rand_buf(f, N * K, 1),
                     calloc(N * D, 4),
                     rand_buf(f, N * D, 1),
                     token_slot,
                     N,
                     K,
                     D};
    combine_loss(&c);
    /* token 2 (a = 4, 5): a = 5 dropped, so y[2] = w[4] * ye[row of a = 4] */
    for (int i = 0; i < D; i++)
        assert_float_equal(c.y[2 * D + i], c.w[4] * c.ye[token_slot[4] * D + i], 1e-6);
    float *dye = rand_buf(f, R * D, 1), *dw = rand_buf(f, N * K, 1);
    f->b->ops->moe_combine_bwd(f->b, f->s, dye, dw, c.g, c.ye, c.w, token_slot, slot_token, N, R, K,
                               D);
    assert_true(dw[5] == 0.0f && dw[7] == 0.0f); /* dropped assignments */
    assert_true(fd_max_err(combine_loss, &c, c.ye, R * D, dye, "combine dye") < FD_REL_TOL);
    assert_true(fd_max_err(combine_loss, &c, c.w, N * K, dw, "combine dtopk_w") < FD_REL_TOL);
    /* padding rows get zero gradient */
    int32_t pst[9], pts[8];
    float dye9[9 * D];
    memset(dye9, 0x7f, sizeof dye9);
    f->b->ops->moe_permute(f->b, f->s, pst, pts, off, perm_idx, N, 3, K, 3);
    float ye9[9 * D] = {0};
    f->b->ops->moe_combine_bwd(f->b, f->s, dye9, dw, c.g, ye9, c.w, pts, pst, N, 9, K, D);
    for (int i = 0; i < D; i++)
        assert_true(dye9[5 * D + i] == 0.0f);
    free(c.ye), free(c.w), free(c.y), free(c.g), free(dye), free(dw);
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_router_topk_ties_go_to_lower_expert_and_weights_renormalize),
        T(test_router_pre_softmax_keeps_probabilities_and_scale_multiplies),
        T(test_aux_loss_is_switch_style_and_accumulates),
        T(test_router_backward_through_renormalization_softmax_and_aux_loss),
        T(test_router_backward_pre_softmax_and_scaled),
        T(test_permute_dropless_is_stable_counting_sort),
        T(test_permute_with_capacity_drops_late_tokens),
        T(test_permute_with_capacity_pads_unused_rows),
        T(test_permute_rejects_expert_index_out_of_range),
        T(test_gather_backward_is_adjoint_of_gather),
        T(test_grouped_matmul_forward_backward_over_offsets),
        T(test_grouped_matmul_rejects_decreasing_offsets),
        T(test_combine_backward_with_dropped_assignments),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
