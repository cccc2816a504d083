/* The graph engine on a real GPU (run by developers on the GPU machine): real CUDA stream
 * capture gives bitwise the losses and master weights of eager bf16 steps with dropout on,
 * for per-unit graphs captured in the middle of an eager step (attn; attn+mlp; MoE attn +
 * moe_router + moe_preprocess; moe with drop-and-pad; hybrid_demo's Mamba model with
 * attn,mamba,mlp) and for the full-iteration graph (dense and hybrid); a
 * forced capture failure leaves no graph alive and the run continues eagerly; capture costs
 * (almost) no device memory because everything lives in the static arenas; with
 * runtime.device=auto a mistyped GT_CUDA_* switch is an error, not a CPU run. Skips when no GPU
 * can be used. Prints eager vs replayed step times (information, not a pass criterion). */
#include "graphs_fixture.h"

#include <unistd.h>

#define STEPS 30
#define WARMUP 3

static int g_have_gpu;

static int setup(void **state) {
    (void)state;
    g_have_gpu = gtf_cuda_available();
    return 0;
}

/* A small bf16 model with shapes the CUDA kernels like (hd 64, multiples of 64). */
static void gpu_dense(gt_config *c) {
    gtf_gpu_dense(c, 2, 256, 4, 2, 512, WARMUP);
}

static void gpu_moe(gt_config *c) {
    gpu_dense(c);
    c->model.num_moe_experts = 4;
    c->model.moe_router_topk = 2;
    c->model.moe_ffn_hidden_size = 256;
    c->model.moe_aux_loss_coeff = 0.01;
}

/* hybrid_demo's model (M*M-: Mamba, attention, Mamba, MLP; 8 Mamba heads of 32 in 2 groups,
 * state 32) at a test's batch */
static void gpu_hybrid(gt_config *c) {
    gpu_dense(c);
    c->model.num_layers = 4;
    snprintf(c->model.layer_pattern, sizeof c->model.layer_pattern, "M*M-");
    c->model.hidden_size = 128;
    c->model.num_attention_heads = 2;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 384;
    c->model.vocab_size = 512;
    c->model.seq_length = 64;
    c->model.mamba_state_dim = 32;
    c->model.mamba_head_dim = 32;
    c->model.mamba_num_groups = 2;
    c->model.mamba_expand = 2;
    c->model.mamba_d_conv = 4;
    c->model.mamba_chunk_size = 64;
}

static double median_ms(const gtf_run *r, int from) {
    double v[GTF_MAX_STEPS];
    int n = 0;
    for (int i = from; i < r->steps; i++)
        v[n++] = r->ms[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n ? v[n / 2] : 0;
}

static void compare(const gt_config *base, gt_graph_impl impl, uint32_t scope, int graphs) {
    gt_config c = *base;
    gtf_run eager, graphed;
    gtf_train(&c, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_graphs(&c, impl, scope);
    gtf_train(&c, STEPS, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    gtf_assert_progress(&graphed, WARMUP);
    assert_int_equal(graphed.gs.graphs, graphs);
    assert_int_equal(graphed.live, graphs);
    fprintf(stderr, "%s: eager %.3f ms/step, replayed %.3f ms/step\n%s", graphed.gs.mode,
            median_ms(&eager, WARMUP + 1), median_ms(&graphed, WARMUP + 1), graphed.report);
    /* the static arenas: capture allocates no activation memory (allow the driver's own
     * executable-graph bookkeeping) */
    assert_true(graphed.gs.mem_after_capture <= graphed.gs.mem_before_capture + (64u << 20));
    gtf_free(&eager);
    gtf_free(&graphed);
}

static void test_gpu_attn_graphs_match_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN, 2 * 2);
}

static void test_gpu_attn_mlp_graphs_match_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP, 2 * 2 * 2);
}

static void test_gpu_full_iteration_graph_matches_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    compare(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 1);
}

/* model.qk_layernorm's kernels inside the attention graphs and the full-iteration graph */
static void test_gpu_qk_layernorm_graphs_match_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    c.model.qk_layernorm = true;
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN, 2 * 2);
    compare(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 1);
}

/* model.kv_channels 128 over hidden / heads 64 (Qwen3-0.6B's kind of heads), with q/k norms */
static void test_gpu_kv_channels_graphs_match_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    c.model.qk_layernorm = true;
    c.model.kv_channels = 2 * c.model.hidden_size / c.model.num_attention_heads;
    /* head size 128 with attention dropout has no fast kernel (cuda_attention_choice): cuDNN
     * takes it without dropout; hidden dropout still draws its masks from Philox */
    c.model.attention_dropout = 0.0;
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN, 2 * 2);
    compare(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 1);
}

static void test_gpu_hybrid_attn_mamba_mlp_graphs_match_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_hybrid(&c);
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MAMBA | GT_SCOPE_MLP, 4 * 2);
}

static void test_gpu_hybrid_full_iteration_graph_matches_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_hybrid(&c);
    compare(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 1);
}

/* The precision-aware optimizer (bf16 Adam moments) in a full-iteration graph: bitwise eager. */
static void test_gpu_bf16_moments_full_iteration_matches_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    gtf_bf16_moments(&c);
    compare(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION, 1);
}

static void test_gpu_dropless_moe_scopes_match_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_moe(&c);
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS,
            2 * 3 * 2);
}

static void test_gpu_moe_scope_with_capacity_matches_eager_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_moe(&c);
    c.model.moe_expert_capacity_factor = 1.0;
    c.model.moe_pad_expert_input_to_capacity = true;
    compare(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_MOE, 2 * 3 * 2);
}

static void test_gpu_failed_capture_falls_back_and_leaves_no_graph(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    gtf_run eager, r;
    gtf_train(&c, 8, &eager);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_EAGER;
    gtf_train_ex(&c, 8, "full_iteration", &r);
    assert_int_equal(r.rc, GT_OK);
    gtf_assert_same(&eager, &r); /* the stream stayed usable: eager steps after the failure */
    assert_int_equal(r.gs.fallbacks, 1);
    assert_int_equal(r.live, 0);
    c.graphs.capture_failure = GT_CAPTURE_FAIL_STOP;
    gtf_free(&r);
    gtf_train_ex(&c, 8, "full_iteration", &r);
    assert_int_not_equal(r.rc, GT_OK);
    assert_non_null(strstr(r.err.msg, "full_iteration"));
    assert_int_equal(r.live, 0);
    gtf_free(&r);
    gtf_free(&eager);
}

static void test_gpu_capture_check_passes_in_global_mode(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN);
    c.runtime.debug_capture_check = true;
    gtf_run r;
    gtf_train(&c, 2, &r);
    if (r.rc != GT_OK) fail_msg("%s", r.err.msg);
    assert_non_null(strstr(r.report, "capture_check passed"));
    gtf_free(&r);
}

/* A NaN injected at a replayed step of a full-iteration graph is reported at that step, and
 * the skipped update leaves exactly the weights of the step before. */
static void test_gpu_nan_in_full_iteration_graph_is_reported_at_its_step(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int k = WARMUP + 3; /* after the capture step: a replayed step */
    gt_config c;
    gpu_dense(&c);
    gtf_run before, r;
    gtf_train(&c, k - 1, &before);
    assert_int_equal(before.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    c.runtime.inject_nan_at_step = k;
    gtf_train(&c, k + 4, &r);
    gtf_assert_nan_stop_replayed(&r, k);
    gtf_assert_same(&before, &r);
    gtf_free(&r);
    gtf_free(&before);
}

/* A checkpoint written while a full-iteration graph replays resumes bitwise on the GPU. */
static void test_gpu_graph_checkpoint_resumes_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    enum { FIRST = WARMUP + 3, SECOND = 6 };
    gt_config c;
    gpu_dense(&c);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, &c, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_step_stats st;
    float loss[SECOND];
    for (int i = 0; i < FIRST; i++)
        if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.mode, GT_STEP_REPLAYED);
    if (gt_trainer_save(t, dir, &err) != GT_OK) fail_msg("%s", err.msg);
    for (int i = 0; i < SECOND; i++) {
        if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
        loss[i] = st.loss;
    }
    size_t n = gt_model_get_info(gt_trainer_model(t))->n_params;
    float *master = calloc(n, sizeof(float));
    assert_non_null(master);
    assert_int_equal(gt_trainer_read_master(t, master, &err), GT_OK);
    gt_trainer_destroy(t);

    snprintf(c.checkpoint.load, sizeof c.checkpoint.load, "%s", dir);
    gtf_run r;
    gtf_train(&c, SECOND, &r);
    assert_int_equal(r.rc, GT_OK);
    assert_int_equal(r.step_no[0], FIRST + 1);
    /* bitwise on purpose */
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    assert_memory_equal(r.loss, loss, sizeof loss);
    assert_int_equal(r.n_master, n);
    assert_memory_equal(r.master, master, n * sizeof(float));
    free(master);
    gtf_free(&r);
    char path[512];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    unlink(path);
    rmdir(dir);
}

/* runtime.device=auto falls back to the CPU only when no GPU can be used: a GPU that is there
 * with a mistyped GT_CUDA_* alias is an error naming the variable, not a run on the CPU. */
static void test_gpu_auto_device_with_a_bad_switch_is_an_error_not_a_cpu_run(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_dense(&c);
    c.runtime.device = GT_DEVICE_AUTO;
    setenv("GT_CUDA_MOE", "fastest", 1);
    gt_config_read_env(&c);
    unsetenv("GT_CUDA_MOE");
    gt_trainer *t = NULL;
    gt_error err = {0};
    int rc = gt_trainer_create(&t, &c, &err);
    if (rc == GT_OK) {
        gt_trainer_destroy(t);
        fail_msg("GT_CUDA_MOE=fastest with runtime.device=auto was accepted");
    }
    printf("    refused: %s\n", err.msg);
    assert_int_equal(rc, GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "runtime.device=auto"));
    assert_non_null(strstr(err.msg, "GT_CUDA_MOE=fastest is not one of"));
    assert_non_null(strstr(err.msg, "runtime.cuda.moe_gemm"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_attn_graphs_match_eager_bitwise),
        cmocka_unit_test(test_gpu_attn_mlp_graphs_match_eager_bitwise),
        cmocka_unit_test(test_gpu_full_iteration_graph_matches_eager_bitwise),
        cmocka_unit_test(test_gpu_qk_layernorm_graphs_match_eager_bitwise),
        cmocka_unit_test(test_gpu_kv_channels_graphs_match_eager_bitwise),
        cmocka_unit_test(test_gpu_bf16_moments_full_iteration_matches_eager_bitwise),
        cmocka_unit_test(test_gpu_hybrid_attn_mamba_mlp_graphs_match_eager_bitwise),
        cmocka_unit_test(test_gpu_hybrid_full_iteration_graph_matches_eager_bitwise),
        cmocka_unit_test(test_gpu_dropless_moe_scopes_match_eager_bitwise),
        cmocka_unit_test(test_gpu_moe_scope_with_capacity_matches_eager_bitwise),
        cmocka_unit_test(test_gpu_failed_capture_falls_back_and_leaves_no_graph),
        cmocka_unit_test(test_gpu_capture_check_passes_in_global_mode),
        cmocka_unit_test(test_gpu_nan_in_full_iteration_graph_is_reported_at_its_step),
        cmocka_unit_test(test_gpu_graph_checkpoint_resumes_bitwise),
        cmocka_unit_test(test_gpu_auto_device_with_a_bad_switch_is_an_error_not_a_cpu_run),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
