/* The dense transformer on the CPU reference: gradients against finite differences, the
 * evaluation loss against the training loss, unit-by-unit execution against the plain
 * path, dropout reproducibility and parameter layout (Mamba layers: test_model_mamba.c). */
#include "model_fixture.h"

static void test_dense_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

/* With dropout on, the masks are fixed by (seed, step, micro-batch, site), so the loss is a
 * smooth function of the weights and backward must apply the very masks of forward. */
static void test_dense_gradients_with_dropout_use_the_forward_masks(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.hidden_dropout = 0.2;
    c.model.attention_dropout = 0.2;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 5);
    tm_fixture_destroy(&fx);
}

static void test_dense_gradients_with_biases_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.add_bias_linear = true;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    /* zero-initialized biases still get gradients; shift them so the check is not at zero */
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int ndim, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &ndim, shape);
        if (strstr(name, "_b"))
            for (int i = 0; i < shape[0]; i++)
                ((float *)fx.info->params)[off + (size_t)i] = 0.05f * (float)((i % 5) - 2);
    }
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

static void forward_loss_equals_training_loss(gt_config *c) {
    tm_fixture fx;
    tm_fixture_create(&fx, c);
    double train = tm_train_loss(&fx, 0, NULL);
    gt_step_state *ev = NULL;
    gt_error err = {0};
    assert_int_equal(fx.b->ops->alloc(fx.b, sizeof *ev, (void **)&ev, &err), GT_OK);
    gt_model_forward_loss(fx.m, fx.s, fx.tokens, fx.targets, 1.0f, ev);
    tm_check(&fx);
    assert_true(ev->loss > 1.0f); /* near ln(32) for a fresh model */
    assert_true(ev->loss == fx.st->loss);
    assert_true(train >= (double)fx.st->loss); /* training adds the aux loss, if any */
    fx.b->ops->free(fx.b, ev);
    tm_fixture_destroy(&fx);
}

static void test_forward_loss_equals_training_loss(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    forward_loss_equals_training_loss(&c);
    tm_tiny_moe_config(&c, 0);
    forward_loss_equals_training_loss(&c);
}

/* ---- unit-by-unit execution through gt_unit_exec ---- */

#define MAX_LAYERS 8

typedef struct call_counter {
    int calls[MAX_LAYERS][GT_MAX_UNITS_PER_LAYER][2];
    int out_of_order;
    int last_layer, last_unit, last_backward;
} call_counter;

static void count_and_run(void *ctx, gt_model *m, gt_stream *s, int layer, int unit, int backward,
                          gt_step_state *st) {
    call_counter *cc = ctx;
    cc->calls[layer][unit][backward]++;
    /* forward goes up the layers, backward down them */
    if (cc->last_layer >= 0 && cc->last_backward == backward) {
        int before = cc->last_layer * GT_MAX_UNITS_PER_LAYER + cc->last_unit;
        int now = layer * GT_MAX_UNITS_PER_LAYER + unit;
        if (backward ? now >= before : now <= before) cc->out_of_order++;
    }
    cc->last_layer = layer;
    cc->last_unit = unit;
    cc->last_backward = backward;
    gt_model_unit_run(m, s, layer, unit, backward, st);
}

/* Two micro-batches with dropout: the losses and every gradient of the unit-by-unit path
 * equal the plain path bit for bit, and each unit runs once each way per micro-batch. */
static void units_match_plain_path(gt_config *c) {
    c->model.hidden_dropout = 0.1;
    c->model.attention_dropout = 0.1;
    tm_fixture fx;
    tm_fixture_create(&fx, c);
    size_t n = fx.info->n_params;
    float *plain = malloc(n * sizeof(float));
    assert_non_null(plain);
    float loss[2], aux[2];
    call_counter cc;
    memset(&cc, 0, sizeof cc);
    cc.last_layer = -1;
    gt_unit_exec exec = {&cc, count_and_run};
    for (int pass = 0; pass < 2; pass++) {
        tm_begin_step(&fx, 7);
        for (int micro = 0; micro < 2; micro++) {
            gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 0.5f, 1, fx.st,
                                      pass ? &exec : NULL);
            fx.b->ops->micro_next(fx.b, fx.s, fx.st);
        }
        tm_check(&fx);
        loss[pass] = fx.st->loss;
        aux[pass] = fx.st->aux_loss;
        if (pass == 0) memcpy(plain, fx.info->grads, n * sizeof(float));
    }
    assert_true(loss[0] == loss[1]);
    assert_true(aux[0] == aux[1]);
    assert_memory_equal(plain, fx.info->grads, n * sizeof(float));
    assert_int_equal(cc.out_of_order, 0);
    int units = 0;
    for (int l = 0; l < fx.info->num_layers; l++)
        for (int u = 0; u < gt_model_num_units(fx.m, l); u++) {
            assert_int_equal(cc.calls[l][u][0], 2);
            assert_int_equal(cc.calls[l][u][1], 2);
            units++;
        }
    assert_int_equal(units, c->model.num_moe_experts ? 2 * 4 : 2 * 2);
    free(plain);
    tm_fixture_destroy(&fx);
}

static void test_unit_by_unit_runs_equal_plain_path_bitwise(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    units_match_plain_path(&c);
    tm_tiny_moe_config(&c, 0);
    units_match_plain_path(&c);
    tm_tiny_moe_config(&c, 1.0);
    units_match_plain_path(&c);
}

/* ---- units captured once as graphs, replayed on later steps ---- */

typedef struct graph_cache {
    gt_backend *b;
    gt_graph *g[MAX_LAYERS][GT_MAX_UNITS_PER_LAYER][2];
    int failures;
} graph_cache;

static void capture_or_replay(void *ctx, gt_model *m, gt_stream *s, int layer, int unit,
                              int backward, gt_step_state *st) {
    graph_cache *gc = ctx;
    gt_error err = {0};
    gt_graph **g = &gc->g[layer][unit][backward];
    if (!*g) {
        gc->failures += gc->b->ops->begin_capture(gc->b, s, GT_CAPTURE_THREAD_LOCAL, &err) != 0;
        gt_model_unit_run(m, s, layer, unit, backward, st);
        gc->failures += gc->b->ops->end_capture(gc->b, s, g, NULL, &err) != 0;
    }
    if (*g) gc->failures += gc->b->ops->graph_launch(gc->b, *g, s, &err) != 0;
}

/* A unit's graph, captured at the first step, gives on every later step (new dropout masks
 * from the step counter and micro-batch index in the step state) exactly the eager result:
 * the units read nothing per-step from the host. */
static void captured_units_replay_like_eager(gt_config *c) {
    c->model.hidden_dropout = 0.1;
    c->model.attention_dropout = 0.1;
    tm_fixture fx;
    tm_fixture_create(&fx, c);
    size_t n = fx.info->n_params;
    float *eager = malloc(n * sizeof(float));
    assert_non_null(eager);
    graph_cache gc;
    memset(&gc, 0, sizeof gc);
    gc.b = fx.b;
    gt_unit_exec exec = {&gc, capture_or_replay};
    float prev = 0;
    for (int64_t step = 0; step < 3; step++) {
        float loss[2];
        for (int pass = 0; pass < 2; pass++) {
            tm_begin_step(&fx, step);
            for (int micro = 0; micro < 2; micro++) {
                gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 0.5f, 1, fx.st,
                                          pass ? &exec : NULL);
                fx.b->ops->micro_next(fx.b, fx.s, fx.st);
            }
            tm_check(&fx);
            loss[pass] = fx.st->loss + fx.st->aux_loss;
            if (pass == 0) memcpy(eager, fx.info->grads, n * sizeof(float));
        }
        assert_true(loss[0] == loss[1]);
        assert_memory_equal(eager, fx.info->grads, n * sizeof(float));
        assert_true(loss[0] != prev); /* new masks each step */
        prev = loss[0];
    }
    assert_int_equal(gc.failures, 0);
    int units = 0;
    for (int l = 0; l < fx.info->num_layers; l++)
        units += gt_model_num_units(fx.m, l);
    assert_int_equal(fx.b->ops->live_graphs(fx.b), 2 * units);
    for (int l = 0; l < MAX_LAYERS; l++)
        for (int u = 0; u < GT_MAX_UNITS_PER_LAYER; u++)
            for (int k = 0; k < 2; k++)
                fx.b->ops->graph_destroy(fx.b, gc.g[l][u][k]);
    assert_int_equal(fx.b->ops->live_graphs(fx.b), 0);
    free(eager);
    tm_fixture_destroy(&fx);
}

static void test_units_captured_once_replay_like_eager(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    captured_units_replay_like_eager(&c);
    tm_tiny_moe_config(&c, 0);
    captured_units_replay_like_eager(&c);
    tm_tiny_moe_config(&c, 1.0);
    captured_units_replay_like_eager(&c);
}

static void test_dropout_is_reproducible_per_step_and_changes_with_step(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.hidden_dropout = 0.1;
    c.model.attention_dropout = 0.1;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    double a = tm_train_loss(&fx, 3, NULL);
    double b = tm_train_loss(&fx, 3, NULL);
    double other = tm_train_loss(&fx, 4, NULL);
    assert_true(a == b);
    assert_true(a != other);
    tm_fixture_destroy(&fx);
    /* without dropout the step number does not matter */
    tm_tiny_config(&c);
    tm_fixture_create(&fx, &c);
    assert_true(tm_train_loss(&fx, 3, NULL) == tm_train_loss(&fx, 4, NULL));
    tm_fixture_destroy(&fx);
}

static void test_layer_pattern_gives_one_unit_kind_per_character(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    c.model.num_layers = 4;
    snprintf(c.model.layer_pattern, sizeof c.model.layer_pattern, "*-*E");
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    assert_int_equal(gt_model_num_units(fx.m, 0), 1);
    assert_int_equal(gt_model_unit_kind(fx.m, 0, 0), GT_UNIT_ATTN);
    assert_int_equal(gt_model_unit_kind(fx.m, 1, 0), GT_UNIT_MLP);
    assert_int_equal(gt_model_num_units(fx.m, 3), 3);
    assert_int_equal(gt_model_unit_kind(fx.m, 3, 0), GT_UNIT_MOE_ROUTER);
    assert_int_equal(gt_model_unit_kind(fx.m, 3, 1), GT_UNIT_MOE_PREPROCESS);
    assert_int_equal(gt_model_unit_kind(fx.m, 3, 2), GT_UNIT_MOE);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
    /* a pattern whose length disagrees with num_layers is refused, naming both keys */
    c.model.num_layers = 3;
    gt_error err = {0};
    gt_model_info info;
    assert_int_equal(gt_model_plan(&c, 4, &info, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.num_layers"));
}

/* Weight gradients left for the end of the backward go as batched GEMMs over runs of layers
 * whose operands lie equally far apart. Runs that break still give the gradients of finite
 * differences:
 * - "**-**": layers 0-1 and 3-4 for the attention weights, layer 2 alone for the MLP's, and
 *   qkv deferred only where the next layer has attention;
 * - MoE every other layer: every layer has attention, but the layers differ in size, so no
 *   two attention layers lie equally far apart and every run is one layer long. */
static void test_deferred_weight_gradients_of_broken_runs_match_finite_differences(void **state) {
    (void)state;
    for (int moe = 0; moe < 2; moe++) {
        gt_config c;
        if (moe) {
            tm_tiny_moe_config(&c, 0);
            c.model.moe_layer_freq = 2;
            c.model.num_layers = 4;
        } else {
            tm_tiny_config(&c);
            c.model.num_layers = 5;
            snprintf(c.model.layer_pattern, sizeof c.model.layer_pattern, "**-**");
        }
        tm_fixture fx;
        tm_fixture_create(&fx, &c);
        tm_check_gradients(&fx, 0);
        tm_fixture_destroy(&fx);
    }
}

static void test_parameters_put_decayed_matrices_first(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    c.model.moe_layer_freq = 2; /* layer 0 MoE, layer 1 dense */
    c.model.add_bias_linear = true;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    int seen_no_decay = 0, found = 0;
    size_t prev_end = 0;
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int ndim, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &ndim, shape);
        size_t numel = (size_t)shape[0];
        for (int j = 1; j < ndim; j++)
            numel *= (size_t)shape[j];
        assert_true(off >= prev_end); /* in order, no overlap */
        prev_end = off + numel;
        assert_true(prev_end <= fx.info->n_params);
        if (ndim == 1) {
            seen_no_decay = 1;
            assert_true(off >= fx.info->n_decay);
        } else {
            assert_false(seen_no_decay);
            assert_true(off + numel <= fx.info->n_decay);
        }
        if (!strcmp(name, "layers.0.moe.gu_w")) {
            found++;
            assert_int_equal(ndim, 3);
            assert_int_equal(shape[0], 4);
            assert_int_equal(shape[1], 24);
            assert_int_equal(shape[2], 16);
        }
        if (!strcmp(name, "layers.1.attn.qkv_w")) {
            found++;
            assert_int_equal(shape[0], (4 + 2 * 2) * 4);
            assert_int_equal(shape[1], 16);
        }
        if (!strcmp(name, "layers.1.mlp.down_w") || !strcmp(name, "lm_head.w") ||
            !strcmp(name, "embedding.wte") || !strcmp(name, "final_norm.w") ||
            !strcmp(name, "layers.0.moe.router_w") || !strcmp(name, "layers.1.attn.o_b"))
            found++;
    }
    assert_int_equal(found, 8);
    /* the plan without a backend agrees with the allocated model */
    gt_model_info plan;
    gt_error err = {0};
    assert_int_equal(gt_model_plan(&c, 4, &plan, &err), GT_OK);
    assert_int_equal(plan.n_params, fx.info->n_params);
    assert_int_equal(plan.n_decay, fx.info->n_decay);
    assert_int_equal(plan.act_bytes, fx.info->act_bytes);
    assert_int_equal(plan.scratch_bytes, fx.info->scratch_bytes);
    assert_true(plan.flops_per_token == fx.info->flops_per_token);
    tm_fixture_destroy(&fx);
}

static void test_init_is_deterministic_with_the_configured_spread(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.hidden_size = 64;
    c.model.vocab_size = 512;
    c.model.init_method_std = 0.02;
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    size_t n = fx.info->n_params;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    gt_error err = {0};
    assert_int_equal(gt_model_init_params(fx.m, 7, a, &err), GT_OK);
    assert_int_equal(gt_model_init_params(fx.m, 7, b, &err), GT_OK);
    assert_memory_equal(a, b, n * sizeof(float));
    assert_int_equal(gt_model_init_params(fx.m, 8, b, &err), GT_OK);
    assert_memory_not_equal(a, b, n * sizeof(float));
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int ndim, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &ndim, shape);
        if (!strcmp(name, "embedding.wte")) {
            double sum = 0, sq = 0;
            size_t cnt = (size_t)shape[0] * shape[1];
            for (size_t i = 0; i < cnt; i++) {
                sum += a[off + i];
                sq += (double)a[off + i] * a[off + i];
            }
            double mean = sum / cnt, sd = sqrt(sq / cnt - mean * mean);
            assert_true(fabs(mean) < 0.002);
            assert_true(fabs(sd - 0.02) < 0.001);
        }
        if (!strcmp(name, "final_norm.w")) assert_true(a[off] == 1.0f && a[off + 63] == 1.0f);
    }
    free(a);
    free(b);
    tm_fixture_destroy(&fx);
}

/* The planning pass only records shapes: nothing is computed, nothing fails, and training
 * works afterwards. */
static void test_planning_pass_computes_nothing(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 1.0);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    fx.b->planning = 1;
    tm_begin_step(&fx, 0);
    gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 1.0f, 1, fx.st, NULL);
    gt_model_forward_loss(fx.m, fx.s, fx.tokens, fx.targets, 1.0f, fx.st);
    gt_error err = {0};
    assert_int_equal(fx.b->ops->plan_finish(fx.b, &err), GT_OK);
    assert_true(fx.st->loss == 0.0f);
    assert_true(tm_train_loss(&fx, 0, NULL) > 1.0);
    tm_fixture_destroy(&fx);
}

/* Two micro-batches weighted 1/2 each accumulate the gradient of the mean: the same as one
 * micro-batch of weight 1, the MoE aux loss included (it is scaled like the loss). */
static void test_micro_batches_accumulate_the_mean_gradient(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    size_t n = fx.info->n_params;
    float *one = malloc(n * sizeof(float));
    assert_non_null(one);
    double l1 = tm_train_loss(&fx, 0, NULL);
    memcpy(one, fx.info->grads, n * sizeof(float));
    tm_begin_step(&fx, 0);
    for (int micro = 0; micro < 2; micro++) {
        gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 0.5f, 1, fx.st, NULL);
        fx.b->ops->micro_next(fx.b, fx.s, fx.st);
    }
    tm_check(&fx);
    double l2 = (double)fx.st->loss + fx.st->aux_loss;
    assert_true(fabs(l1 - l2) < 1e-6 * fabs(l1));
    assert_true(fx.st->aux_loss > 0);
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)one[i] - fx.info->grads[i]));
        gmax = fmax(gmax, fabs(one[i]));
    }
    assert_true(gmax > 0.01);
    assert_true(worst <= 1e-6 * gmax);
    free(one);
    tm_fixture_destroy(&fx);
}

/* A micro-batch with accumulate 0 writes every gradient: over NaN-filled gradients it gives,
 * bitwise, what zeroed gradients plus accumulate 1 give. Dense with biases (dbias), with and
 * without hidden dropout (fused and separate residual adds), and MoE dropless and with
 * capacity. */
static void overwrite_matches_zero_then_accumulate(const gt_config *c) {
    tm_fixture fx;
    tm_fixture_create(&fx, c);
    size_t n = fx.info->n_params;
    float *ref = malloc(n * sizeof(float));
    assert_non_null(ref);
    double l_acc = tm_train_loss(&fx, 3, NULL);
    memcpy(ref, fx.info->grads, n * sizeof(float));
    tm_begin_step(&fx, 3);
    for (size_t i = 0; i < n; i++)
        fx.info->grads[i] = NAN;
    gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 1.0f, 0, fx.st, NULL);
    tm_check(&fx);
    assert_true((double)fx.st->loss + (double)fx.st->aux_loss == l_acc);
    for (int t = 0; t < fx.m->n_tensors; t++) {
        const gt_model_tensor_desc *d = &fx.m->tensors[t];
        if (memcmp(ref + d->offset, fx.info->grads + d->offset, d->numel * sizeof(float)) != 0)
            fail_msg("gradient of %s differs between overwrite and zero + accumulate", d->name);
    }
    free(ref);
    tm_fixture_destroy(&fx);
}

static void test_first_micro_batch_overwrites_every_gradient(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    c.model.add_bias_linear = true;
    overwrite_matches_zero_then_accumulate(&c);
    c.model.hidden_dropout = 0.1;
    overwrite_matches_zero_then_accumulate(&c);
    tm_tiny_moe_config(&c, 0);
    overwrite_matches_zero_then_accumulate(&c);
    tm_tiny_moe_config(&c, 1.0);
    overwrite_matches_zero_then_accumulate(&c);
}

/* WORKLOADS.md: 6 x (attention + MLP weights of every layer + head) + 6 x layers x seq x d. */
static void test_flops_per_token_follow_the_workloads_formula(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    gt_model_info info;
    gt_error err = {0};
    assert_int_equal(gt_model_plan(&c, 2, &info, &err), GT_OK);
    double d = 16, hd = 4, V = 32, f = 24, T = 8, L = 2;
    double active = V * d + L * ((4 + 2 * 2) * hd * d + d * d + 3 * f * d);
    assert_true(fabs(info.flops_per_token - (6 * active + 6 * L * T * d)) < 1e-6);
    /* MoE: the router and top-k experts count, not every expert */
    tm_tiny_moe_config(&c, 0);
    assert_int_equal(gt_model_plan(&c, 2, &info, &err), GT_OK);
    active = V * d + L * ((4 + 2 * 2) * hd * d + d * d + 4 * d + 2 * 3 * 12 * d);
    assert_true(fabs(info.flops_per_token - (6 * active + 6 * L * T * d)) < 1e-6);
}

static void test_memory_plan_lists_every_arena(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_moe_config(&c, 0);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    gt_model_print_plan(fx.m, f, 1);
    fclose(f);
    const char *want[] = {
        "params", "grads", "activations", "scratch", "layers.1.moe.gu_w", "layers.0.attn.qkv"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_non_null(strstr(text, want[i]));
    free(text);
    tm_fixture_destroy(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_gradients_match_finite_differences),
        cmocka_unit_test(test_dense_gradients_with_dropout_use_the_forward_masks),
        cmocka_unit_test(test_dense_gradients_with_biases_match_finite_differences),
        cmocka_unit_test(test_forward_loss_equals_training_loss),
        cmocka_unit_test(test_unit_by_unit_runs_equal_plain_path_bitwise),
        cmocka_unit_test(test_units_captured_once_replay_like_eager),
        cmocka_unit_test(test_dropout_is_reproducible_per_step_and_changes_with_step),
        cmocka_unit_test(test_layer_pattern_gives_one_unit_kind_per_character),
        cmocka_unit_test(test_deferred_weight_gradients_of_broken_runs_match_finite_differences),
        cmocka_unit_test(test_parameters_put_decayed_matrices_first),
        cmocka_unit_test(test_init_is_deterministic_with_the_configured_spread),
        cmocka_unit_test(test_planning_pass_computes_nothing),
        cmocka_unit_test(test_micro_batches_accumulate_the_mean_gradient),
        cmocka_unit_test(test_first_micro_batch_overwrites_every_gradient),
        cmocka_unit_test(test_flops_per_token_follow_the_workloads_formula),
        cmocka_unit_test(test_memory_plan_lists_every_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
