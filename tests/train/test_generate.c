/* Sampling from a checkpoint (train/generate.h): the greedy continuation of the Hugging Face
 * fixtures equals transformers' own greedy generate; the KV-cache decoder gives the logits and
 * tokens of the full-recompute oracle (generate_testing.h) on the dense, GQA, tied, rope-scaled
 * and MoE fixtures, and a replayed decode graph the bits of the eager steps; sampling repeats
 * per seed, top-k 1 and a tiny top-p are greedy, and bad input is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "core/json.h"
#include "core/read_file.h"
#include "model/model.h"
#include "testlib.h"
#include "train/generate.h"
#include "train/generate_testing.h"
#include "train/hf_convert.h"

static void imported(const char *name, char *ck, size_t n, char *dir, size_t dn) {
    char rel[256], tmp[256];
    snprintf(rel, sizeof rel, "tests/train/fixtures/%s", name);
    gt_test_source_path(rel, dir, dn);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, n, "%s/ck", tmp);
    gt_error err = {0};
    if (gt_hf_import(dir, ck, NULL, &err)) fail_msg("import %s: %s", name, err.msg);
}

/* expected.json's tokens and greedy continuation */
static void read_expected(const char *dir, int32_t *tok, int *nt, int32_t *greedy, int *ng) {
    char path[1100], *text;
    size_t n;
    gt_error err = {0};
    snprintf(path, sizeof path, "%s/expected.json", dir);
    assert_int_equal(gt_read_file(path, 1 << 24, &text, &n, &err), GT_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *t = cJSON_GetObjectItem(j, "tokens"), *g = cJSON_GetObjectItem(j, "greedy");
    *nt = cJSON_GetArraySize(t);
    *ng = cJSON_GetArraySize(g);
    assert_true(*nt > 0 && *nt <= 64 && *ng > 0 && *ng <= 64);
    for (int i = 0; i < *nt; i++)
        tok[i] = cJSON_GetArrayItem(t, i)->valueint;
    for (int i = 0; i < *ng; i++)
        greedy[i] = cJSON_GetArrayItem(g, i)->valueint;
    cJSON_Delete(j);
}

static const gt_generate_opts k_greedy = {8, 0.0f, 0, 1.0f, 1, -1, "cpu", 0};

static void expect_transformers_greedy(const char *name) {
    char ck[512], dir[1024];
    imported(name, ck, sizeof ck, dir, sizeof dir);
    int32_t tok[64], want[64];
    int nt, ng;
    read_expected(dir, tok, &nt, want, &ng);
    gt_generate_opts o = k_greedy;
    o.max_new_tokens = ng;
    gt_error err = {0};
    gt_generate_result r;
    if (gt_generate(ck, tok, nt, &o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r.n, ng);
    assert_memory_equal(r.ids, want, (size_t)ng * sizeof *r.ids);
    assert_string_equal(r.stats.backend, "cpu");
    assert_int_equal(r.stats.graph, 1);
    assert_int_equal(r.stats.decode_steps, ng - 1);
    gt_generate_result_free(&r);
}

static void test_greedy_llama_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("llama");
}

static void test_greedy_mixtral_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("mixtral");
}

static void test_greedy_tied_scaled_llama_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("llama32");
}

/* qk_layernorm in the decode step (Qwen3: tied embeddings; Qwen3-MoE) */
static void test_greedy_qwen3_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("qwen3");
}

static void test_greedy_qwen3_moe_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("qwen3_moe");
}

static void run(const char *ck, const gt_generate_opts *o, int32_t *out) {
    static const int32_t prompt[] = {3, 17, 42};
    gt_generate_result r;
    gt_error err = {0};
    if (gt_generate(ck, prompt, 3, o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r.n, o->max_new_tokens);
    memcpy(out, r.ids, (size_t)r.n * sizeof *r.ids);
    gt_generate_result_free(&r);
}

/* The decoder (graph replay, then eager) against the full recompute: logits within 1e-5 of
 * the largest, the same ids; the graph's logits bitwise the eager ones. */
static void expect_cached_equals_recompute(const char *name, const gt_generate_opts *o) {
    char ck[512], dir[1024];
    imported(name, ck, sizeof ck, dir, sizeof dir);
    int32_t tok[64], want[64];
    int nt, ng;
    read_expected(dir, tok, &nt, want, &ng);
    gt_config *cfg;
    float *master;
    size_t np;
    gt_error err = {0};
    if (gt_generate_load(ck, &cfg, &master, &np, &err)) fail_msg("%s", err.msg);
    int V = cfg->model.vocab_size;
    gt_generate_result ref, graph, eager;
    if (gt_generate_recompute(cfg, master, np, tok, nt, o, &ref, &err)) fail_msg("%s", err.msg);
    if (gt_generate_model(cfg, master, np, tok, nt, o, 1, &graph, &err)) fail_msg("%s", err.msg);
    gt_generate_opts oe = *o;
    oe.no_graph = 1;
    if (gt_generate_model(cfg, master, np, tok, nt, &oe, 1, &eager, &err)) fail_msg("%s", err.msg);
    assert_int_equal(graph.stats.graph, 1);
    assert_int_equal(eager.stats.graph, 0);
    assert_int_equal(graph.n, ref.n);
    assert_int_equal(eager.n, ref.n);
    assert_memory_equal(graph.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids);
    assert_memory_equal(eager.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids);
    assert_memory_equal(graph.logits, eager.logits, (size_t)ref.n * V * sizeof *ref.logits);
    double worst = 0;
    for (int t = 0; t < ref.n; t++) {
        double scale = 0;
        for (int v = 0; v < V; v++) {
            double a = fabs(ref.logits[(size_t)t * V + v]);
            if (a > scale) scale = a;
        }
        for (int v = 0; v < V; v++) {
            double e = fabs(graph.logits[(size_t)t * V + v] - ref.logits[(size_t)t * V + v]);
            if (e / (scale > 1 ? scale : 1) > worst) worst = e / (scale > 1 ? scale : 1);
        }
    }
    printf("%s: %d tokens, cached vs recomputed logits differ by %.3g at most\n", name, ref.n,
           worst);
    assert_true(worst <= 1e-5);
    gt_generate_result_free(&ref);
    gt_generate_result_free(&graph);
    gt_generate_result_free(&eager);
    free(master);
    free(cfg);
}

static const gt_generate_opts k_long_greedy = {24, 0.0f, 0, 1.0f, 1, -1, "cpu", 0};

static void test_cached_decode_equals_recompute_dense_gqa(void **state) {
    (void)state;
    expect_cached_equals_recompute("llama", &k_long_greedy);
}

static void test_cached_decode_equals_recompute_moe(void **state) {
    (void)state;
    expect_cached_equals_recompute("mixtral", &k_long_greedy);
}

static void test_cached_decode_equals_recompute_tied_rope_scaled(void **state) {
    (void)state;
    expect_cached_equals_recompute("llama32", &k_long_greedy);
}

static void test_cached_decode_equals_recompute_rope_scaled_one_kv_head(void **state) {
    (void)state;
    expect_cached_equals_recompute("llama31", &k_long_greedy);
}

/* A configuration built by hand with weights from the model's initializer, moved */
static void hand_model(gt_config *c, float **w, size_t *n) {
    gt_backend *b = NULL;
    gt_model *m = NULL;
    gt_error err = {0};
    if (gt_backend_create_cpu(&b, &err) || gt_model_create(&m, c, b, &err))
        fail_msg("model: %s", err.msg);
    *n = gt_model_get_info(m)->n_params;
    *w = malloc(*n * sizeof **w);
    if (gt_model_init_params(m, 7, *w, &err)) fail_msg("init: %s", err.msg);
    /* biases start at zero: move every value, so that a missed bias shows */
    for (size_t i = 0; i < *n; i++)
        (*w)[i] += 0.05f * (float)sin(0.7 * (double)i);
    gt_model_destroy(m);
    gt_backend_destroy(b);
}

static void tiny(gt_config *c) {
    gt_config_defaults(c);
    c->model.num_layers = 4;
    c->model.hidden_size = 16;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 24;
    c->model.vocab_size = 32;
    c->model.seq_length = 8;
    c->model.init_method_std = 0.2;
    c->model.moe_layer_freq = 1;
    c->model.add_bias_linear = true; /* the biases of qkv, o, gate/up and down too */
}

/* Layers of one kind each (attention only, MLP only, MoE only) with biases: the decode step
 * takes each layer's blocks in the order of its units */
static void test_cached_decode_equals_recompute_hybrid_pattern_with_biases(void **state) {
    (void)state;
    gt_config c;
    tiny(&c);
    c.model.num_moe_experts = 4;
    c.model.moe_router_topk = 2;
    c.model.moe_ffn_hidden_size = 12;
    c.model.add_bias_linear = false; /* the grouped expert GEMMs have no biases */
    snprintf(c.model.layer_pattern, sizeof c.model.layer_pattern, "*-*E");
    float *w;
    size_t n;
    hand_model(&c, &w, &n);
    static const int32_t prompt[] = {1, 5, 9, 30, 2};
    gt_generate_result ref, got;
    gt_error err = {0};
    if (gt_generate_recompute(&c, w, n, prompt, 5, &k_long_greedy, &ref, &err))
        fail_msg("%s", err.msg);
    if (gt_generate_model(&c, w, n, prompt, 5, &k_long_greedy, 1, &got, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(got.n, ref.n);
    assert_memory_equal(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids);
    for (size_t i = 0; i < (size_t)ref.n * 32; i++)
        assert_true(fabs(got.logits[i] - ref.logits[i]) <= 1e-5 * (1 + fabs(ref.logits[i])));
    gt_generate_result_free(&ref);
    gt_generate_result_free(&got);
    free(w);
    /* and with biases on a dense model */
    tiny(&c);
    hand_model(&c, &w, &n);
    if (gt_generate_recompute(&c, w, n, prompt, 5, &k_long_greedy, &ref, &err))
        fail_msg("%s", err.msg);
    if (gt_generate_model(&c, w, n, prompt, 5, &k_long_greedy, 1, &got, &err))
        fail_msg("%s", err.msg);
    assert_memory_equal(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids);
    for (size_t i = 0; i < (size_t)ref.n * 32; i++)
        assert_true(fabs(got.logits[i] - ref.logits[i]) <= 1e-5 * (1 + fabs(ref.logits[i])));
    gt_generate_result_free(&ref);
    gt_generate_result_free(&got);
    free(w);
}

static void test_mamba_layers_are_refused_by_name(void **state) {
    (void)state;
    gt_config c;
    tiny(&c);
    snprintf(c.model.layer_pattern, sizeof c.model.layer_pattern, "M*-M");
    c.model.mamba_state_dim = 4;
    c.model.mamba_head_dim = 4;
    c.model.mamba_num_groups = 2;
    c.model.mamba_expand = 2;
    c.model.mamba_d_conv = 4;
    c.model.mamba_chunk_size = 4;
    float *w;
    size_t n;
    hand_model(&c, &w, &n);
    static const int32_t prompt[] = {1, 2};
    gt_generate_result r;
    gt_error err = {0};
    assert_int_equal(gt_generate_model(&c, w, n, prompt, 2, &k_greedy, 0, &r, &err),
                     GT_ERR_UNSUPPORTED);
    if (!strstr(err.msg, "layer 0 is a Mamba layer")) fail_msg("%s", err.msg);
    assert_null(r.ids);
    free(w);
}

static void test_cached_sampling_equals_recompute_sampling(void **state) {
    (void)state;
    gt_generate_opts o = {24, 0.9f, 20, 0.9f, 77, -1, "cpu", 0};
    expect_cached_equals_recompute("llama", &o);
    expect_cached_equals_recompute("mixtral", &o);
}

static void test_sampling_repeats_per_seed_and_changes_with_it(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    gt_generate_opts o = {16, 1.0f, 0, 1.0f, 5, -1, "cpu", 0};
    int32_t a[16], b[16], c[16];
    run(ck, &o, a);
    run(ck, &o, b);
    o.seed = 6;
    run(ck, &o, c);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

static void test_top_k_of_one_is_greedy(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    gt_generate_opts o = {8, 1.5f, 1, 1.0f, 9, -1, "cpu", 0};
    int32_t a[8], b[8];
    run(ck, &o, a);
    run(ck, &k_greedy, b);
    assert_memory_equal(a, b, sizeof a);
}

static void test_tiny_top_p_is_greedy(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    gt_generate_opts o = {8, 2.0f, 0, 1e-6f, 9, -1, "cpu", 0};
    int32_t a[8], b[8];
    run(ck, &o, a);
    run(ck, &k_greedy, b);
    assert_memory_equal(a, b, sizeof a);
}

static void test_generation_stops_at_the_stop_token(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    int32_t full[8];
    run(ck, &k_greedy, full);
    gt_generate_opts o = k_greedy;
    o.stop_id = full[2];
    gt_generate_result r;
    gt_error err = {0};
    static const int32_t prompt[] = {3, 17, 42};
    assert_int_equal(gt_generate(ck, prompt, 3, &o, &r, &err), GT_OK);
    int first = 0;
    while (full[first] != o.stop_id)
        first++;
    assert_int_equal(r.n, first + 1);
    assert_int_equal(r.ids[first], o.stop_id);
    gt_generate_result_free(&r);
}

static void expect_refused(const gt_generate_opts *o, const int32_t *prompt, int n,
                           const char *what) {
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    gt_generate_result r;
    gt_error err = {0};
    assert_int_equal(gt_generate(ck, prompt, n, o, &r, &err), GT_ERR_INVALID);
    if (!strstr(err.msg, what)) fail_msg("expected \"%s\" in: %s", what, err.msg);
    assert_null(r.ids);
}

static void test_prompt_outside_the_vocabulary_is_refused(void **state) {
    (void)state;
    static const int32_t prompt[] = {3, 64};
    expect_refused(&k_greedy, prompt, 2, "prompt token 1 is 64");
}

static void test_bad_options_are_refused_by_name(void **state) {
    (void)state;
    static const int32_t prompt[] = {3, 5};
    gt_generate_opts o = k_greedy;
    o.device = "tpu";
    expect_refused(&o, prompt, 2, "--device tpu");
    o = k_greedy;
    o.top_p = 0;
    expect_refused(&o, prompt, 2, "top-p in (0, 1]");
    o = k_greedy;
    o.temperature = -1;
    expect_refused(&o, prompt, 2, "temperature must be >= 0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_llama_continuation_equals_transformers),
        cmocka_unit_test(test_greedy_mixtral_continuation_equals_transformers),
        cmocka_unit_test(test_greedy_tied_scaled_llama_continuation_equals_transformers),
        cmocka_unit_test(test_greedy_qwen3_continuation_equals_transformers),
        cmocka_unit_test(test_greedy_qwen3_moe_continuation_equals_transformers),
        cmocka_unit_test(test_cached_decode_equals_recompute_dense_gqa),
        cmocka_unit_test(test_cached_decode_equals_recompute_moe),
        cmocka_unit_test(test_cached_decode_equals_recompute_tied_rope_scaled),
        cmocka_unit_test(test_cached_decode_equals_recompute_rope_scaled_one_kv_head),
        cmocka_unit_test(test_cached_decode_equals_recompute_hybrid_pattern_with_biases),
        cmocka_unit_test(test_mamba_layers_are_refused_by_name),
        cmocka_unit_test(test_cached_sampling_equals_recompute_sampling),
        cmocka_unit_test(test_sampling_repeats_per_seed_and_changes_with_it),
        cmocka_unit_test(test_top_k_of_one_is_greedy),
        cmocka_unit_test(test_tiny_top_p_is_greedy),
        cmocka_unit_test(test_generation_stops_at_the_stop_token),
        cmocka_unit_test(test_prompt_outside_the_vocabulary_is_refused),
        cmocka_unit_test(test_bad_options_are_refused_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
