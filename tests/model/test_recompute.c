/* Activation recomputation on the CPU reference: every recompute setting gives the loss and
 * every gradient of the run without it, bit for bit, with dropout on (dense and MoE); the
 * activation arena shrinks by exactly the buffers the layers then share; modules the model
 * does not have, and full recompute without its method or layer count, are refused by name. */
#include "model_fixture.h"

#define RC_LAYERS 3

/* The tiny dense model with three layers (so block recompute leaves some layers saved and
 * deferred weight gradients have runs to batch) and both dropouts on. */
static void dense_config(gt_config *c) {
    tm_tiny_config(c);
    c->model.num_layers = RC_LAYERS;
    c->model.attention_dropout = 0.2;
    c->model.hidden_dropout = 0.2;
}

static void moe_config(gt_config *c, double capacity_factor) {
    tm_tiny_moe_config(c, capacity_factor);
    c->model.num_layers = RC_LAYERS;
    c->model.moe_layer_freq = 2; /* layers 0 and 2 MoE, layer 1 dense */
    c->model.attention_dropout = 0.2;
    c->model.hidden_dropout = 0.2;
}

static void selective(gt_config *c, uint32_t modules) {
    c->model.recompute_granularity = GT_RECOMPUTE_SELECTIVE;
    c->model.recompute_modules = modules;
}

static void full(gt_config *c, gt_recompute_method method, int layers) {
    c->model.recompute_granularity = GT_RECOMPUTE_FULL;
    c->model.recompute_method = method;
    c->model.recompute_num_layers = layers;
}

typedef struct run_result {
    float loss, aux;
    float *grads;
    size_t n;
    size_t act_bytes;
} run_result;

/* Two steps of two micro-batches each (overwrite, then accumulate), so the dropout masks of
 * several (step, micro-batch) counters and both gradient modes are exercised. */
static void run(const gt_config *c, run_result *r) {
    tm_fixture fx;
    tm_fixture_create(&fx, c);
    for (int64_t step = 0; step < 2; step++) {
        tm_begin_step(&fx, step);
        for (int micro = 0; micro < 2; micro++) {
            fx.st->micro = micro;
            gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 0.5f, micro, fx.st, NULL);
        }
        tm_check(&fx);
    }
    r->loss = fx.st->loss;
    r->aux = fx.st->aux_loss;
    r->n = fx.info->n_params;
    r->act_bytes = fx.info->act_bytes;
    r->grads = malloc(r->n * sizeof(float));
    assert_non_null(r->grads);
    memcpy(r->grads, fx.info->grads, r->n * sizeof(float));
    tm_fixture_destroy(&fx);
}

static void assert_bitwise_like_base(const gt_config *base, const gt_config *rc) {
    run_result a, b;
    run(base, &a);
    run(rc, &b);
    assert_true(a.loss > 1.0f); /* a real loss, so equality means something */
    assert_memory_equal(&a.loss, &b.loss, sizeof a.loss);
    assert_memory_equal(&a.aux, &b.aux, sizeof a.aux);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.grads, b.grads, a.n * sizeof(float));
    assert_true(b.act_bytes < a.act_bytes); /* and it really saved memory */
    free(a.grads);
    free(b.grads);
}

static void check_dense_selective(uint32_t modules) {
    gt_config base, c;
    dense_config(&base);
    c = base;
    selective(&c, modules);
    assert_bitwise_like_base(&base, &c);
}

static void test_selective_core_attn_gives_the_same_bits(void **state) {
    (void)state;
    check_dense_selective(GT_RECOMPUTE_CORE_ATTN);
}

static void test_selective_mlp_gives_the_same_bits(void **state) {
    (void)state;
    check_dense_selective(GT_RECOMPUTE_MLP);
}

static void test_selective_layernorm_gives_the_same_bits(void **state) {
    (void)state;
    check_dense_selective(GT_RECOMPUTE_LAYERNORM);
}

static void test_selective_core_attn_mlp_layernorm_gives_the_same_bits(void **state) {
    (void)state;
    check_dense_selective(GT_RECOMPUTE_CORE_ATTN | GT_RECOMPUTE_MLP | GT_RECOMPUTE_LAYERNORM);
}

static void test_full_uniform_gives_the_same_bits(void **state) {
    (void)state;
    gt_config base, c;
    dense_config(&base);
    c = base;
    full(&c, GT_RECOMPUTE_METHOD_UNIFORM, 1);
    assert_bitwise_like_base(&base, &c);
}

static void test_full_block_gives_the_same_bits(void **state) {
    (void)state;
    gt_config base, c;
    dense_config(&base);
    c = base;
    full(&c, GT_RECOMPUTE_METHOD_BLOCK, 2);
    assert_bitwise_like_base(&base, &c);
}

/* The recomputed rotary embedding is the forward's, Llama 3.1's scaling included. */
static void test_full_uniform_with_rope_scaling_gives_the_same_bits(void **state) {
    (void)state;
    gt_config base, c;
    dense_config(&base);
    base.model.rope_scaling = true;
    base.model.rope_scaling_factor = 8.0f;
    c = base;
    full(&c, GT_RECOMPUTE_METHOD_UNIFORM, 1);
    assert_bitwise_like_base(&base, &c);
}

/* Biases turn the deferred weight gradients off: the other path through the backward. */
static void test_full_uniform_with_biases_gives_the_same_bits(void **state) {
    (void)state;
    gt_config base, c;
    dense_config(&base);
    base.model.add_bias_linear = true;
    c = base;
    full(&c, GT_RECOMPUTE_METHOD_UNIFORM, 1);
    assert_bitwise_like_base(&base, &c);
}

static void check_moe(double capacity_factor, void (*set)(gt_config *)) {
    gt_config base, c;
    moe_config(&base, capacity_factor);
    c = base;
    set(&c);
    assert_bitwise_like_base(&base, &c);
}

static void set_moe(gt_config *c) {
    selective(c, GT_RECOMPUTE_MOE);
}
static void set_moe_act(gt_config *c) {
    selective(c, GT_RECOMPUTE_MOE_ACT);
}
static void set_moe_all(gt_config *c) {
    selective(c, GT_RECOMPUTE_MOE | GT_RECOMPUTE_LAYERNORM | GT_RECOMPUTE_CORE_ATTN |
                     GT_RECOMPUTE_MLP);
}
static void set_full(gt_config *c) {
    full(c, GT_RECOMPUTE_METHOD_UNIFORM, 2);
}

static void test_selective_moe_gives_the_same_bits_dropless_and_padded(void **state) {
    (void)state;
    check_moe(0, set_moe);
    check_moe(1.0, set_moe);
}

static void test_selective_moe_act_gives_the_same_bits(void **state) {
    (void)state;
    check_moe(0, set_moe_act);
}

static void test_selective_moe_layernorm_attention_mlp_gives_the_same_bits(void **state) {
    (void)state;
    check_moe(0, set_moe_all);
}

static void test_full_recompute_of_moe_layers_gives_the_same_bits(void **state) {
    (void)state;
    check_moe(0, set_full);
    check_moe(1.0, set_full);
}

/* ---- memory ---- */

static size_t aligned(size_t bytes) {
    return (bytes + GT_ARENA_ALIGN - 1) / GT_ARENA_ALIGN * GT_ARENA_ALIGN;
}

static size_t act_bytes(const gt_config *c) {
    gt_model_info info;
    gt_error err = {0};
    int rc = gt_model_plan(c, sizeof(float), &info, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, GT_OK);
    return info.act_bytes;
}

/* Each recomputed activation is planned once instead of once a layer. */
static void test_core_attn_recompute_shares_one_attention_output_and_lse(void **state) {
    (void)state;
    gt_config base, c;
    dense_config(&base);
    c = base;
    selective(&c, GT_RECOMPUTE_CORE_ATTN);
    size_t N = (size_t)c.train.micro_batch_size * (size_t)c.model.seq_length;
    size_t att = aligned(N * (size_t)c.model.hidden_size * sizeof(float));
    size_t lse = aligned(N * (size_t)c.model.num_attention_heads * sizeof(float));
    assert_int_equal(act_bytes(&base) - act_bytes(&c), (RC_LAYERS - 1) * (att + lse));
}

static void test_full_block_saves_the_layers_it_recomputes_only(void **state) {
    (void)state;
    gt_config base, one, two, all;
    dense_config(&base);
    one = two = all = base;
    full(&one, GT_RECOMPUTE_METHOD_BLOCK, 1);
    full(&two, GT_RECOMPUTE_METHOD_BLOCK, 2);
    full(&all, GT_RECOMPUTE_METHOD_UNIFORM, 1);
    size_t b = act_bytes(&base), s1 = act_bytes(&one), s2 = act_bytes(&two), u = act_bytes(&all);
    /* one recomputed layer shares its buffers with nobody: nothing saved yet */
    assert_int_equal(s1, b);
    /* every further recomputed layer saves one layer's activations (all but dw_part) */
    assert_true(s2 < s1);
    assert_int_equal(s2 - u, s1 - s2);
    /* uniform recomputes all layers whatever its group size */
    gt_config all3 = all;
    all3.model.recompute_num_layers = RC_LAYERS;
    assert_int_equal(act_bytes(&all3), u);
}

/* The layer activations a full recompute of every layer keeps: the residual stream (it carries
 * the residual gradient in backward), the norms' weight-gradient partials and one shared set. */
static void test_full_uniform_keeps_one_layer_of_activations(void **state) {
    (void)state;
    gt_config base, c, one;
    dense_config(&base);
    c = base;
    full(&c, GT_RECOMPUTE_METHOD_UNIFORM, 1);
    one = base;
    one.model.num_layers = 1;
    /* a layer's activations without recompute, and what full recompute keeps of them */
    size_t per_layer = (act_bytes(&base) - act_bytes(&one)) / (RC_LAYERS - 1);
    size_t N = (size_t)c.train.micro_batch_size * (size_t)c.model.seq_length;
    size_t res = aligned(N * (size_t)c.model.hidden_size * sizeof(float));
    size_t parts = aligned((size_t)gt_rmsnorm_parts_bound((int)N) * (size_t)c.model.hidden_size *
                           sizeof(float));
    size_t kept = res + 2 * parts; /* the layer output residual, two norms' partials */
    assert_int_equal(act_bytes(&c), act_bytes(&base) - (RC_LAYERS - 1) * (per_layer - kept));
}

/* ---- refusals ---- */

static void assert_refused(const gt_config *c, const char *needle) {
    gt_model_info info;
    gt_error err = {0};
    assert_int_not_equal(gt_model_plan(c, sizeof(float), &info, &err), GT_OK);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_non_null(strstr(err.msg, "model.recompute"));
}

static void test_modules_the_model_lacks_are_refused_by_name(void **state) {
    (void)state;
    gt_config c;
    dense_config(&c);
    selective(&c, GT_RECOMPUTE_MOE);
    assert_refused(&c, "has moe, but this model has no MoE layers");
    selective(&c, GT_RECOMPUTE_MOE_ACT);
    assert_refused(&c, "has moe_act");
    selective(&c, GT_RECOMPUTE_SHARED_EXPERTS);
    assert_refused(&c, "has shared_experts");
    moe_config(&c, 0);
    c.model.moe_layer_freq = 1; /* every layer MoE: no dense MLP */
    selective(&c, GT_RECOMPUTE_MLP);
    assert_refused(&c, "has mlp, but this model has no dense MLP layers");
}

static void test_full_recompute_needs_method_and_layer_count(void **state) {
    (void)state;
    gt_config c;
    dense_config(&c);
    full(&c, GT_RECOMPUTE_METHOD_NONE, 1);
    assert_refused(&c, "recompute_method");
    full(&c, GT_RECOMPUTE_METHOD_BLOCK, 0);
    assert_refused(&c, "recompute_num_layers is 0");
    full(&c, GT_RECOMPUTE_METHOD_UNIFORM, RC_LAYERS + 1);
    assert_refused(&c, "recompute_num_layers is 4");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selective_core_attn_gives_the_same_bits),
        cmocka_unit_test(test_selective_mlp_gives_the_same_bits),
        cmocka_unit_test(test_selective_layernorm_gives_the_same_bits),
        cmocka_unit_test(test_selective_core_attn_mlp_layernorm_gives_the_same_bits),
        cmocka_unit_test(test_full_uniform_gives_the_same_bits),
        cmocka_unit_test(test_full_block_gives_the_same_bits),
        cmocka_unit_test(test_full_uniform_with_biases_gives_the_same_bits),
        cmocka_unit_test(test_full_uniform_with_rope_scaling_gives_the_same_bits),
        cmocka_unit_test(test_selective_moe_gives_the_same_bits_dropless_and_padded),
        cmocka_unit_test(test_selective_moe_act_gives_the_same_bits),
        cmocka_unit_test(test_selective_moe_layernorm_attention_mlp_gives_the_same_bits),
        cmocka_unit_test(test_full_recompute_of_moe_layers_gives_the_same_bits),
        cmocka_unit_test(test_core_attn_recompute_shares_one_attention_output_and_lse),
        cmocka_unit_test(test_full_block_saves_the_layers_it_recomputes_only),
        cmocka_unit_test(test_full_uniform_keeps_one_layer_of_activations),
        cmocka_unit_test(test_modules_the_model_lacks_are_refused_by_name),
        cmocka_unit_test(test_full_recompute_needs_method_and_layer_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
