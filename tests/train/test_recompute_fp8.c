/* Recompute under fp8: the recomputed forward of a linear layer (selective mlp, full uniform or
 * block) casts with the step's scales and records no amax again, so every fp8 recipe trains
 * with recompute bitwise as without it (losses and final master weights), eagerly, with
 * per-unit graphs (selective only, as Megatron allows) and with one full-iteration graph,
 * dropout on. */
#include "graphs_fixture.h"

#define STEPS 6

static void with_recipe(gt_config *c, gt_compute_dtype d) {
    gtf_tiny_dense(c);
    c->model.num_layers = 3; /* block recompute of 1 leaves layers recomputed and saved */
    c->model.compute_dtype = d;
    if (d == GT_DTYPE_FP8_DS) {
        c->model.fp8_amax_history_len = 3;
        c->model.fp8_amax_compute_algo = GT_AMAX_MAX;
    }
}

static void set_selective(gt_config *c) {
    c->model.recompute_granularity = GT_RECOMPUTE_SELECTIVE;
    c->model.recompute_modules = GT_RECOMPUTE_CORE_ATTN | GT_RECOMPUTE_MLP | GT_RECOMPUTE_LAYERNORM;
}
static void set_full_uniform(gt_config *c) {
    c->model.recompute_granularity = GT_RECOMPUTE_FULL;
    c->model.recompute_method = GT_RECOMPUTE_METHOD_UNIFORM;
    c->model.recompute_num_layers = 1;
}
static void set_full_block(gt_config *c) {
    c->model.recompute_granularity = GT_RECOMPUTE_FULL;
    c->model.recompute_method = GT_RECOMPUTE_METHOD_BLOCK;
    c->model.recompute_num_layers = 1;
}

/* recipe d under each graph setting, with each recompute setting, against no recompute */
static void check_recipe(gt_compute_dtype d) {
    void (*sets[])(gt_config *) = {set_selective, set_full_uniform, set_full_block};
    const char *set_names[] = {"selective core_attn,mlp,layernorm", "full uniform", "full block"};
    struct {
        gt_graph_impl impl;
        uint32_t scope;
    } modes[] = {{GT_GRAPH_IMPL_NONE, 0},
                 {GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP},
                 {GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION}};
    gt_config base;
    with_recipe(&base, d);
    gtf_run ref;
    gtf_train(&base, STEPS, &ref);
    assert_int_equal(ref.rc, GT_OK);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 3; i++) {
            /* full recompute takes no per-unit graphs (full_recompute_needs_full_iteration) */
            if (modes[k].impl == GT_GRAPH_IMPL_TE && i > 0) continue;
            gt_config c = base;
            if (modes[k].impl != GT_GRAPH_IMPL_NONE) gtf_graphs(&c, modes[k].impl, modes[k].scope);
            sets[i](&c);
            gtf_run r;
            gtf_train(&c, STEPS, &r);
            if (r.rc != GT_OK) fail_msg("%s, mode %d: %s", set_names[i], k, r.err.msg);
            printf("recompute %s, graph mode %d\n", set_names[i], k);
            gtf_assert_same(&ref, &r);
            if (modes[k].impl != GT_GRAPH_IMPL_NONE)
                gtf_assert_progress(&r, c.model.cuda_graph_warmup_steps);
            gtf_free(&r);
        }
    gtf_free(&ref);
}

static void test_current_scaling_recomputes_bitwise(void **state) {
    (void)state;
    check_recipe(GT_DTYPE_FP8_CS);
}

static void test_delayed_scaling_recomputes_bitwise(void **state) {
    (void)state;
    check_recipe(GT_DTYPE_FP8_DS);
}

static void test_blockwise_scaling_recomputes_bitwise(void **state) {
    (void)state;
    check_recipe(GT_DTYPE_FP8_SC);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_scaling_recomputes_bitwise),
        cmocka_unit_test(test_delayed_scaling_recomputes_bitwise),
        cmocka_unit_test(test_blockwise_scaling_recomputes_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
