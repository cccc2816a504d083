/* The fp8 linear layer's fused passes (model_fp8.c) against the plain definition, bitwise on
 * the CPU emulation: the weight cast to both layouts in one pass equals two fresh casts; the
 * backward (the output gradient cast once to both layouts, x^T with the scale the forward
 * recorded) gives the data and weight gradients that fresh current-scaling casts of every
 * operand give; delayed scaling records each tensor's amax; the amaxes the norms and SwiGLU
 * take for the casts of their outputs give the step the casts' own amax passes give; the
 * memory plan keeps the saved inputs in fp8. */
#include "model/memory_plan.h"
#include "model_fixture.h"

#define LAYER 1 /* not the first layer: its fp8 state does not start at slot 0 */

typedef struct lin_case {
    tm_fixture fx;
    const gt_fp8_linear *li;
    int w, N;
    float *x, *dout, *out, *dx; /* [N, in], [N, out], [N, out], [N, in] */
} lin_case;

static float *host_buf(gt_backend *b, size_t n) {
    float *p = NULL;
    gt_error err = {0};
    assert_int_equal(b->ops->alloc(b, n * sizeof *p, (void **)&p, &err), GT_OK);
    memset(p, 0, n * sizeof *p);
    return p;
}

static void fill(float *p, size_t n, uint32_t seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
}

/* micro: micro-batches a step (1: the transposed weight copies are made in the backward) */
static void case_create(lin_case *c, gt_compute_dtype dtype, int lin, int micro) {
    gt_config cfg;
    tm_tiny_config(&cfg);
    cfg.model.compute_dtype = dtype;
    cfg.train.global_batch_size = micro * cfg.train.micro_batch_size;
    cfg.model.attention_dropout = cfg.model.hidden_dropout = 0;
    tm_fixture_create(&c->fx, &cfg);
    gt_model *m = c->fx.m;
    assert_true(m->fp8.enabled);
    assert_int_equal(m->fp8.wt_in_backward, micro == 1);
    c->li = &m->fp8.lin[(size_t)LAYER * GT_LINEARS + lin];
    assert_true(c->li->on);
    c->w = c->li->weight;
    c->N = m->dm.N;
    size_t N = (size_t)c->N;
    c->x = host_buf(c->fx.b, N * (size_t)c->li->in);
    c->dx = host_buf(c->fx.b, N * (size_t)c->li->in);
    c->dout = host_buf(c->fx.b, N * (size_t)c->li->out);
    c->out = host_buf(c->fx.b, N * (size_t)c->li->out);
    fill(c->x, N * (size_t)c->li->in, 7u + (uint32_t)lin, 6.0f);
    fill(c->dout, N * (size_t)c->li->out, 99u + (uint32_t)lin, 0.01f);
}

static void case_destroy(lin_case *c) {
    gt_backend *b = c->fx.b;
    b->ops->free(b, c->x), b->ops->free(b, c->dx), b->ops->free(b, c->dout);
    b->ops->free(b, c->out);
    tm_fixture_destroy(&c->fx);
}

static gt_fp8_meta *meta_of(const lin_case *c, int slot) {
    return &c->fx.m->fp8.meta[c->li->slot + slot];
}

/* q = a fresh current-scaling cast of x (or x^T) on a scratch meta; returns the meta */
static gt_fp8_meta fresh_cast(lin_case *c, float *q, float *si, const float *x, int rows, int cols,
                              int transpose, gt_fp8_format fmt) {
    gt_backend *b = c->fx.b;
    gt_fp8_meta meta = {1.0f, 1.0f, 0.0f, (int32_t)fmt};
    b->ops->fp8_cast(b, c->fx.s, q, si, x, rows, cols, transpose,
                     (gt_fp8_cast_spec){GT_FP8_TENSORWISE, fmt, 1, 1, NULL}, &meta, c->fx.st);
    tm_check(&c->fx);
    return meta;
}

static int same_bits(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x == y;
}

static void expect_same(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (!same_bits(got[i], want[i]))
            fail_msg("%s: element %zu is %.9g, the plain casts give %.9g", what, i, (double)got[i],
                     (double)want[i]);
}

static void backward_matches_fresh_casts(gt_compute_dtype dtype, int lin, int micro) {
    lin_case c;
    case_create(&c, dtype, lin, micro);
    gt_model *m = c.fx.m;
    gt_backend *b = c.fx.b;
    const gt_fp8_linear *li = c.li;
    gt_model_fp8 *f = &m->fp8;
    int in = li->in, out = li->out, N = c.N;
    tm_begin_step(&c.fx, 0);
    gt_model_fp8_cast_weights(m, c.fx.s, 1, c.fx.st);
    gt_linear_fwd(m, c.fx.s, LAYER, lin, c.out, c.x, c.w, -1, NULL, 1, c.fx.st);
    gt_linear_bwd(m, c.fx.s, LAYER, lin, c.dx, c.dout, c.x, c.w, -1, 1, c.fx.st);
    tm_check(&c.fx);
    assert_int_equal(c.fx.st->nan_flags, 0);

    /* the plain definition: every operand cast afresh from its bf16 (here fp32) tensor */
    size_t nx = (size_t)N * in, nd = (size_t)N * out, nw = (size_t)in * out;
    float *qd = host_buf(b, nd), *qdt = host_buf(b, nd), *qxt = host_buf(b, nx);
    float *qw = host_buf(b, nw), *qwt = host_buf(b, nw), si[4];
    float *dx = host_buf(b, nx), *dw = host_buf(b, nw);
    const float *w = gt_model_param(m, c.w);
    if (f->scaling == GT_FP8_TENSORWISE) {
        gt_fp8_meta mw = fresh_cast(&c, qw, &si[0], w, out, in, 0, f->fwd_format);
        fresh_cast(&c, qwt, &si[1], w, out, in, 1, f->fwd_format);
        expect_same(li->qw, qw, nw, "the fp8 weight");
        expect_same(li->qwt, qwt, nw, "the transposed fp8 weight");
        assert_memory_equal(meta_of(&c, GT_FP8_SLOT_W), &mw, sizeof mw);
        gt_fp8_meta mg = fresh_cast(&c, qd, &si[2], c.dout, N, out, 0, f->grad_format);
        fresh_cast(&c, qdt, &si[2], c.dout, N, out, 1, f->grad_format);
        fresh_cast(&c, qxt, &si[3], c.x, N, in, 1, f->fwd_format);
        assert_memory_equal(meta_of(&c, GT_FP8_SLOT_G), &mg, sizeof mg);
        b->ops->fp8_gemm(b, c.fx.s, dx, 0, 0, (gt_fp8_operand){qd, &si[2], 1, f->grad_format},
                         (gt_fp8_operand){qwt, &si[1], 1, f->fwd_format}, f->scaling, NULL, NULL, N,
                         in, out);
        b->ops->fp8_gemm(b, c.fx.s, dw, GT_FP8_OUT_FP32, m->grad_acc,
                         (gt_fp8_operand){qdt, &si[2], 1, f->grad_format},
                         (gt_fp8_operand){qxt, &si[3], 1, f->fwd_format}, f->scaling, NULL, NULL,
                         out, in, N);
        tm_check(&c.fx);
        expect_same(c.dx, dx, nx, "the data gradient");
        expect_same(gt_model_grad(m, c.w), dw, nw, "the weight gradient");
    } else {
        /* delayed: each tensor's amax recorded once, the max of |x| over it */
        float ax = 0, ad = 0, aw = 0;
        for (size_t i = 0; i < nw; i++)
            aw = fabsf(w[i]) > aw ? fabsf(w[i]) : aw;
        for (size_t i = 0; i < nx; i++)
            ax = fabsf(c.x[i]) > ax ? fabsf(c.x[i]) : ax;
        for (size_t i = 0; i < nd; i++)
            ad = fabsf(c.dout[i]) > ad ? fabsf(c.dout[i]) : ad;
        assert_memory_equal(&meta_of(&c, GT_FP8_SLOT_W)->amax, &aw, sizeof aw);
        assert_memory_equal(&meta_of(&c, GT_FP8_SLOT_X)->amax, &ax, sizeof ax);
        assert_memory_equal(&meta_of(&c, GT_FP8_SLOT_G)->amax, &ad, sizeof ad);
    }
    b->ops->free(b, qd), b->ops->free(b, qdt), b->ops->free(b, qxt), b->ops->free(b, qw);
    b->ops->free(b, qwt), b->ops->free(b, dx), b->ops->free(b, dw);
    case_destroy(&c);
}

static void test_current_scaling_backward_equals_fresh_casts_of_every_operand(void **state) {
    (void)state;
    for (int micro = 1; micro <= 2; micro++)
        for (int lin = 0; lin < GT_LINEARS; lin++)
            backward_matches_fresh_casts(GT_DTYPE_FP8_CS, lin, micro);
}

static void test_delayed_scaling_backward_records_the_amax_of_each_tensor(void **state) {
    (void)state;
    for (int micro = 1; micro <= 2; micro++)
        for (int lin = 0; lin < GT_LINEARS; lin++)
            backward_matches_fresh_casts(GT_DTYPE_FP8_DS, lin, micro);
}

/* Without the backend's one-pass pair the model casts twice; the results do not change */
static void test_weight_casts_without_the_pair_op_are_the_same(void **state) {
    (void)state;
    lin_case c;
    case_create(&c, GT_DTYPE_FP8_CS, GT_LIN_GU, 2); /* copies kept from the step's start */
    gt_model *m = c.fx.m;
    gt_backend *b = c.fx.b;
    size_t nw = (size_t)c.li->in * c.li->out;
    tm_begin_step(&c.fx, 0);
    gt_model_fp8_cast_weights(m, c.fx.s, 1, c.fx.st);
    tm_check(&c.fx);
    float *qw = host_buf(b, nw), *qwt = host_buf(b, nw);
    memcpy(qw, c.li->qw, nw * sizeof *qw);
    memcpy(qwt, c.li->qwt, nw * sizeof *qwt);
    gt_fp8_meta before = *meta_of(&c, GT_FP8_SLOT_W);
    memset(c.li->qw, 0, nw * sizeof *qw);
    memset(c.li->qwt, 0, nw * sizeof *qwt);
    const gt_backend_ops *ops = b->ops;
    gt_backend_ops without = *ops;
    assert_non_null(without.fp8_cast_pair);
    without.fp8_cast_pair = NULL;
    b->ops = &without;
    gt_model_fp8_cast_weights(m, c.fx.s, 1, c.fx.st);
    tm_check(&c.fx);
    b->ops = ops;
    expect_same(c.li->qw, qw, nw, "the fp8 weight");
    expect_same(c.li->qwt, qwt, nw, "the transposed fp8 weight");
    assert_memory_equal(meta_of(&c, GT_FP8_SLOT_W), &before, sizeof before);
    b->ops->free(b, qw), b->ops->free(b, qwt);
    case_destroy(&c);
}

/* What a step left that the fp8 casts decide: the losses, the gradients, every scaling slot
 * and each linear's saved fp8 input with its inverse scale */
typedef struct step_result {
    double loss, eval_loss;
    float *grads;
    gt_fp8_meta *meta;
    float *xt; /* every saved x^T, one after the other, then their inverse scales */
    size_t n_grads, n_meta, n_xt;
} step_result;

/* Two micro-batches of training (the weights cast first), then an evaluation forward (record
 * 0), on a fresh model; fused 0: the backend without the producers that take their output's
 * amax, so each cast takes its own pass. With fused 1, checks that the producers did take
 * the amaxes of the qkv, gate/up and down inputs: each slot holds the amax the cast
 * recorded. */
static void run_fp8_step(const gt_config *cfg, int fused, step_result *r) {
    tm_fixture fx;
    tm_fixture_create(&fx, cfg);
    gt_model *m = fx.m;
    gt_model_fp8 *f = &m->fp8;
    const gt_backend_ops *ops = fx.b->ops;
    gt_backend_ops without = *ops;
    assert_non_null(without.rmsnorm_fwd_amax);
    assert_non_null(without.swiglu_fwd_amax);
    assert_non_null(without.rmsnorm_bwd_part_amax);
    assert_non_null(without.swiglu_bwd_amax);
    assert_non_null(without.rope_bwd_amax);
    without.rmsnorm_fwd_amax = NULL;
    without.swiglu_fwd_amax = NULL;
    without.rmsnorm_bwd_part_amax = NULL;
    without.swiglu_bwd_amax = NULL;
    without.rope_bwd_amax = NULL;
    if (!fused) fx.b->ops = &without;
    tm_begin_step(&fx, 0);
    gt_model_fp8_cast_weights(m, fx.s, 1, fx.st);
    gt_model_forward_backward(m, fx.s, fx.tokens, fx.targets, 0.5f, 0, fx.st, NULL);
    fx.st->micro = 1;
    gt_model_forward_backward(m, fx.s, fx.tokens, fx.targets, 0.5f, 1, fx.st, NULL);
    tm_check(&fx);
    assert_int_equal(fx.st->nan_flags, 0);
    r->loss = fx.st->loss;
    r->n_grads = fx.info->n_params;
    r->grads = malloc(r->n_grads * sizeof *r->grads);
    memcpy(r->grads, fx.info->grads, r->n_grads * sizeof *r->grads);
    r->n_meta = (size_t)f->n_meta;
    r->meta = malloc(r->n_meta * sizeof *r->meta);
    memcpy(r->meta, f->meta, r->n_meta * sizeof *r->meta);
    r->n_xt = 0;
    for (int i = 0; i < m->num_layers * GT_LINEARS; i++)
        if (f->lin[i].xt) r->n_xt += (size_t)m->dm.N * (size_t)f->lin[i].in + 1;
    r->xt = malloc((r->n_xt ? r->n_xt : 1) * sizeof *r->xt);
    size_t o = 0;
    for (int i = 0; i < m->num_layers * GT_LINEARS; i++) {
        const gt_fp8_linear *li = &f->lin[i];
        if (!li->xt) continue;
        size_t n = (size_t)m->dm.N * (size_t)li->in;
        memcpy(r->xt + o, li->xt, n * sizeof *r->xt);
        r->xt[o + n] = li->sxt[0];
        o += n + 1;
    }
    int taken = 0;
    for (int l = 0; fused && l < m->num_layers; l++)
        for (int lin = 0; lin < GT_LINEARS; lin++) {
            const gt_fp8_linear *li = &f->lin[(size_t)l * GT_LINEARS + lin];
            if (!li->on || lin == GT_LIN_O) continue; /* o's input is the attention's */
            float amax = f->meta[li->slot + GT_FP8_SLOT_X].amax;
            assert_int_equal(f->x_amax[(size_t)l * GT_LINEARS + lin], gt_fp8_amax_bits(amax));
            assert_true(amax > 0);
            taken++;
        }
    if (fused) assert_true(taken > 0);
    /* the backward's producers: SwiGLU's for gate/up and rope's for qkv always (no qk norm
     * here), the norms' for o and down (the residual gradients) where their branch has no
     * dropout */
    int g_taken = 0;
    for (int l = 0; fused && l < m->num_layers; l++)
        for (int lin = 0; lin < GT_LINEARS; lin++) {
            const gt_fp8_linear *li = &f->lin[(size_t)l * GT_LINEARS + lin];
            if (!li->on) continue;
            if ((lin == GT_LIN_O || lin == GT_LIN_DOWN) && m->dm.p_hidden > 0) continue;
            if (lin == GT_LIN_QKV && m->dm.qk_norm) continue;
            float amax = f->meta[li->slot + GT_FP8_SLOT_G].amax;
            assert_int_equal(f->g_amax[(size_t)l * GT_LINEARS + lin], gt_fp8_amax_bits(amax));
            assert_true(amax > 0);
            g_taken++;
        }
    if (fused) assert_true(g_taken >= (m->dm.qk_norm ? 1 : 2) * m->num_layers);
    gt_step_state *est = fx.st;
    est->loss = 0;
    gt_model_forward_loss(m, fx.s, fx.tokens, fx.targets, 1.0f, est);
    tm_check(&fx);
    r->eval_loss = est->loss;
    fx.b->ops = ops;
    tm_fixture_destroy(&fx);
}

static void step_result_free(step_result *r) {
    free(r->grads), free(r->meta), free(r->xt);
}

static void expect_same_step(const gt_config *cfg, const char *what) {
    step_result a, b;
    printf("    %s\n", what);
    run_fp8_step(cfg, 1, &a);
    run_fp8_step(cfg, 0, &b);
    assert_memory_equal(&a.loss, &b.loss, sizeof a.loss);
    assert_memory_equal(&a.eval_loss, &b.eval_loss, sizeof a.eval_loss);
    expect_same(a.grads, b.grads, a.n_grads, "the gradients");
    assert_int_equal(a.n_meta, b.n_meta);
    assert_memory_equal(a.meta, b.meta, a.n_meta * sizeof *a.meta);
    assert_int_equal(a.n_xt, b.n_xt);
    expect_same(a.xt, b.xt, a.n_xt, "the saved fp8 inputs and their scales");
    step_result_free(&a);
    step_result_free(&b);
}

static void test_producer_amax_gives_the_step_of_the_casts_own_amax_pass(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.compute_dtype = GT_DTYPE_FP8_CS;
    c.model.hidden_dropout = 0.1; /* the down projection's output through dropout */
    c.train.global_batch_size = c.train.micro_batch_size;
    expect_same_step(&c, "fp8_cs");
    c.model.hidden_dropout = 0;
    c.train.global_batch_size = 2 * c.train.micro_batch_size; /* weight copies kept */
    expect_same_step(&c, "fp8_cs, two micro-batches a step");
    /* the recomputed norms take the amax again for the recomputed qkv and gate/up casts */
    c.model.recompute_granularity = GT_RECOMPUTE_SELECTIVE;
    c.model.recompute_modules = GT_RECOMPUTE_CORE_ATTN | GT_RECOMPUTE_MLP | GT_RECOMPUTE_LAYERNORM;
    expect_same_step(&c, "fp8_cs, selective recompute of core_attn, mlp and layernorm");
    c.model.recompute_granularity = GT_RECOMPUTE_FULL;
    c.model.recompute_method = GT_RECOMPUTE_METHOD_UNIFORM;
    c.model.recompute_num_layers = 1;
    expect_same_step(&c, "fp8_cs, full uniform recompute");
    /* a qk norm after the rotation: qkv's cast takes its own amax pass */
    c.model.recompute_granularity = GT_RECOMPUTE_NONE;
    c.model.qk_layernorm = true;
    expect_same_step(&c, "fp8_cs, qk norm");
}

/* Delayed and blockwise scaling cast without any amax pass of their own to save: their
 * producers run as plain ops and the slots are not planned */
static void test_only_current_scaling_takes_the_producer_amax(void **state) {
    (void)state;
    const gt_compute_dtype dtypes[] = {GT_DTYPE_FP8_DS, GT_DTYPE_FP8_SC, GT_DTYPE_FP8_CS};
    for (int i = 0; i < 3; i++) {
        gt_config c;
        tm_tiny_config(&c);
        c.model.compute_dtype = dtypes[i];
        tm_fixture fx;
        tm_fixture_create(&fx, &c);
        assert_int_equal(fx.m->fp8.x_amax != NULL, dtypes[i] == GT_DTYPE_FP8_CS);
        assert_int_equal(fx.m->fp8.g_amax != NULL, dtypes[i] == GT_DTYPE_FP8_CS);
        gt_layer *L = &fx.m->layers[0];
        const uint32_t *got = gt_linear_norm_fwd(fx.m, fx.s, 0, GT_LIN_QKV, L->attn.ln,
                                                 L->attn.rstd, fx.m->res[0], L->attn.norm_w);
        assert_int_equal(got != NULL, dtypes[i] == GT_DTYPE_FP8_CS);
        tm_check(&fx);
        tm_fixture_destroy(&fx);
    }
}

/* On the GPU (2-byte activations, 1-byte fp8): each layer keeps its qkv, gate/up and down
 * inputs as fp8 x^T (half the bytes) and their bf16 copies share one buffer per tensor */
static void test_fp8_activations_keep_the_linear_inputs_in_half_the_bytes(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.num_layers = 4;
    c.model.hidden_size = 64;
    c.model.ffn_hidden_size = 128;
    c.model.seq_length = 64;
    gt_memory_plan bf, f8;
    gt_error err = {0};
    c.model.compute_dtype = GT_DTYPE_BF16;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &bf, &err), GT_OK);
    c.model.compute_dtype = GT_DTYPE_FP8_CS;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &f8, &err), GT_OK);
    size_t L = 4, N = 2 * 64, d = 64, f = 128;
    size_t per_layer = 2 * N * d + N * f; /* elements of the two norm outputs and SwiGLU's */
    size_t saved = (L - 1) * per_layer * 2 - L * per_layer; /* bf16 copies gone - fp8 added */
    size_t slack = L * 6 * GT_ARENA_ALIGN;                  /* padding and the scale slots */
    printf("activations: bf16 %zu bytes, fp8_cs %zu\n", bf.activations, f8.activations);
    assert_true(f8.activations + saved <= bf.activations + slack);
    assert_true(f8.activations + saved + slack >= bf.activations);
}

/* One micro-batch a step: one shared transposed weight buffer (the largest weight) instead of
 * a transposed copy per linear layer */
static void test_one_micro_batch_keeps_no_transposed_weight_copies(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.num_layers = 4;
    c.model.hidden_size = 64;
    c.model.ffn_hidden_size = 128;
    c.model.compute_dtype = GT_DTYPE_FP8_CS;
    gt_memory_plan one, two;
    gt_error err = {0};
    c.train.global_batch_size = c.train.micro_batch_size;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &one, &err), GT_OK);
    c.train.global_batch_size = 2 * c.train.micro_batch_size;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &two, &err), GT_OK);
    size_t d = 64, f = 128, qkv = d + 2 * (d / 4) * 2;      /* 4 heads of 16, 2 kv groups */
    size_t per_layer = d * qkv + d * d + d * 2 * f + f * d; /* fp8 bytes of its weights */
    size_t largest = d * 2 * f;
    printf("params + scratch: one micro-batch %zu bytes, two %zu\n", one.params + one.scratch,
           two.params + two.scratch);
    size_t slack = 4 * 4 * GT_ARENA_ALIGN;
    size_t want = 4 * per_layer - largest;
    size_t saved = (two.params + two.scratch) - (one.params + one.scratch);
    assert_true(saved + slack >= want && saved <= want + slack);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_backward_equals_fresh_casts_of_every_operand),
        cmocka_unit_test(test_delayed_scaling_backward_records_the_amax_of_each_tensor),
        cmocka_unit_test(test_weight_casts_without_the_pair_op_are_the_same),
        cmocka_unit_test(test_producer_amax_gives_the_step_of_the_casts_own_amax_pass),
        cmocka_unit_test(test_only_current_scaling_takes_the_producer_amax),
        cmocka_unit_test(test_fp8_activations_keep_the_linear_inputs_in_half_the_bytes),
        cmocka_unit_test(test_one_micro_batch_keeps_no_transposed_weight_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
