/* Tied embeddings (model.share_embeddings_and_output_weights) on the CPU reference: the head
 * is the embedding table, so the model has no head matrix, the table's gradient is the sum of
 * both uses (finite differences), the step's first micro-batch still writes every gradient,
 * and eager and full-iteration training stay bitwise equal with the rows not lazy. */
#include "model_fixture.h"

static void tied_config(gt_config *c) {
    tm_tiny_config(c);
    c->model.share_embeddings_and_output_weights = true;
}

static void test_tied_gradients_match_finite_differences(void **state) {
    (void)state;
    gt_config c;
    tied_config(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    tm_check_gradients(&fx, 0);
    tm_fixture_destroy(&fx);
}

static void test_tied_model_has_no_head_matrix(void **state) {
    (void)state;
    gt_config c;
    tm_tiny_config(&c);
    gt_model_info untied, tied;
    gt_error err = {0};
    assert_int_equal(gt_model_plan(&c, 4, &untied, &err), GT_OK);
    tied_config(&c);
    assert_int_equal(gt_model_plan(&c, 4, &tied, &err), GT_OK);
    /* V x d = 32 x 16 is a multiple of the tensor alignment: exactly the head's elements */
    assert_int_equal(untied.n_params - tied.n_params,
                     (size_t)c.model.vocab_size * c.model.hidden_size);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    for (int t = 0; t < gt_model_num_tensors(fx.m); t++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(fx.m, t, &name, &off, &nd, shape);
        assert_null(strstr(name, "lm_head"));
    }
    tm_fixture_destroy(&fx);
}

/* accumulate 0 over NaN gradients gives bitwise what zeroed gradients and accumulate 1 give:
 * the head writes the table's gradient first and the embedding's scatter adds to it */
static void test_tied_first_micro_batch_overwrites_every_gradient(void **state) {
    (void)state;
    gt_config c;
    tied_config(&c);
    tm_fixture fx;
    tm_fixture_create(&fx, &c);
    size_t n = fx.info->n_params;
    float *ref = malloc(n * sizeof(float));
    assert_non_null(ref);
    tm_train_loss(&fx, 3, NULL);
    memcpy(ref, fx.info->grads, n * sizeof(float));
    tm_begin_step(&fx, 3);
    for (size_t i = 0; i < n; i++)
        fx.info->grads[i] = NAN;
    gt_model_forward_backward(fx.m, fx.s, fx.tokens, fx.targets, 1.0f, 0, fx.st, NULL);
    tm_check(&fx);
    for (int t = 0; t < fx.m->n_tensors; t++) {
        const gt_model_tensor_desc *d = &fx.m->tensors[t];
        if (memcmp(ref + d->offset, fx.info->grads + d->offset, d->numel * sizeof(float)) != 0)
            fail_msg("gradient of %s differs between overwrite and zero + accumulate", d->name);
    }
    free(ref);
    tm_fixture_destroy(&fx);
}

/* the losses of a run, from its metrics file: "loss": 4.12345678 per step */
static void run_losses(const char *name, const char *mode, const char *dir, char *out, size_t n) {
    char args[2048], log[16384], path[600];
    snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
    snprintf(args, sizeof args,
             "train --recipe tiny model.share_embeddings_and_output_weights=true "
             "model.num_layers=2 model.hidden_size=64 model.num_attention_heads=2 "
             "model.num_query_groups=2 model.ffn_hidden_size=96 model.vocab_size=96 "
             "model.seq_length=16 train.micro_batch_size=2 train.global_batch_size=4 "
             "train.train_iters=6 model.compute_dtype=fp32 runtime.gemm_table= %s "
             "logger.log_interval=1 logger.metrics_file=%s",
             mode, path);
    int rc = gt_test_run(args, log, sizeof log);
    if (rc) fail_msg("train (%s) failed:\n%s", mode, log);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192];
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        const char *l = strstr(line, "\"loss\": ");
        if (!l || strncmp(line, "{\"step\"", 7)) continue;
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%.*s|", (int)strcspn(l + 8, ","), l + 8);
    }
    fclose(f);
}

static void test_tied_eager_and_full_iteration_losses_are_bitwise_equal(void **state) {
    (void)state;
    char dir[256], eager[2048], full[2048];
    gt_test_tmpdir(dir, sizeof dir);
    run_losses("eager", "model.cuda_graph_impl=none", dir, eager, sizeof eager);
    run_losses("full", "model.cuda_graph_impl=local model.cuda_graph_scope=full_iteration", dir,
               full, sizeof full);
    printf("eager: %s\nfull:  %s\n", eager, full);
    assert_true(strlen(eager) > 6 * 5);
    assert_string_equal(eager, full);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tied_gradients_match_finite_differences),
        cmocka_unit_test(test_tied_model_has_no_head_matrix),
        cmocka_unit_test(test_tied_first_micro_batch_overwrites_every_gradient),
        cmocka_unit_test(test_tied_eager_and_full_iteration_losses_are_bitwise_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
