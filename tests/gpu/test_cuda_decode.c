/* The KV-cache decoder on the CUDA backend (model/model_decode.h, backend/cuda/k_decode.cu)
 * against the CPU backend: at every generated position the CUDA logits match the CPU logits of
 * the same sequence (bf16 tolerance), the replayed decode graph gives the ids and logits of the
 * eager steps bitwise, replays allocate nothing, and sampling repeats per seed. Dense GQA,
 * rope-scaled with tied embeddings, and MoE models; the tokens/s of prefill and decode are
 * printed for a larger model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "graphs_fixture.h"
#include "model/model.h"
#include "testlib.h"
#include "train/generate.h"

#define DEC_TOL 3e-2 /* relative L2 error of the logits after a few bf16 layers */
#define PROMPT 13    /* not a multiple of anything the kernels like */

typedef struct weights {
    float *w;
    size_t n;
} weights;

/* Deterministic weights of cfg's model (init_method_std made larger so the logits spread),
 * rounded to bf16 */
static weights make_weights(gt_config *cfg) {
    weights w = {0};
    gt_backend *b = NULL;
    gt_model *m = NULL;
    gt_error err = {0};
    cfg->model.init_method_std = 0.08;
    if (gt_backend_create_cpu(&b, &err) || gt_model_create(&m, cfg, b, &err))
        fail_msg("model: %s", err.msg);
    w.n = gt_model_get_info(m)->n_params;
    w.w = malloc(w.n * sizeof *w.w);
    if (gt_model_init_params(m, 42, w.w, &err)) fail_msg("init: %s", err.msg);
    for (size_t i = 0; i < w.n; i++) /* the weights both backends hold */
        w.w[i] = gt_bf16_to_float(gt_bf16_from_float(w.w[i]));
    gt_model_destroy(m);
    gt_backend_destroy(b);
    return w;
}

static void prompt_of(int32_t *p, int n, int V) {
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)((i * 7919 + 11) % V);
}

static void gen(const gt_config *cfg, const weights *w, const int32_t *prompt, int n,
                const gt_generate_opts *o, gt_generate_result *r) {
    gt_error err = {0};
    if (gt_generate_model(cfg, w->w, w->n, prompt, n, o, 1, r, &err))
        fail_msg("generate (%s): %s", o->device, err.msg);
}

static double rel_l2(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* CUDA greedy, graph and eager; the CPU's logits of each prefix the CUDA run chose */
static void check_model(const char *name, gt_config *cfg) {
    weights w = make_weights(cfg);
    int V = cfg->model.vocab_size, steps = 12;
    int32_t prompt[PROMPT + 64];
    prompt_of(prompt, PROMPT, V);
    gt_generate_opts o = {steps, 0.0f, 0, 1.0f, 1, -1, "cuda", 0};
    gt_generate_result g, e;
    gen(cfg, &w, prompt, PROMPT, &o, &g);
    o.no_graph = 1;
    gen(cfg, &w, prompt, PROMPT, &o, &e);
    assert_string_equal(g.stats.backend, "cuda");
    assert_int_equal(g.stats.graph, 1);
    assert_int_equal(e.stats.graph, 0);
    assert_int_equal(g.n, steps);
    assert_int_equal(e.n, steps);
    assert_memory_equal(g.ids, e.ids, (size_t)steps * sizeof *g.ids);
    assert_memory_equal(g.logits, e.logits, (size_t)steps * V * sizeof *g.logits);
    /* nothing allocated (or freed) on the device while the graph replayed (after its first
     * launch) */
    assert_true(g.stats.free_before == g.stats.free_after);
    assert_true(g.stats.peak_before == g.stats.peak_after);
    double worst = 0;
    for (int t = 0; t < steps; t++) {
        /* the CPU decoder over the prompt and the CUDA run's first t ids: its one draw's logits
         * are those of the position CUDA drew id t from */
        memcpy(prompt + PROMPT, g.ids, (size_t)t * sizeof *g.ids);
        gt_generate_opts oc = {1, 0.0f, 0, 1.0f, 1, -1, "cpu", 0};
        gt_generate_result c;
        gen(cfg, &w, prompt, PROMPT + t, &oc, &c);
        double d = rel_l2(g.logits + (size_t)t * V, c.logits, V);
        if (d > worst) worst = d;
        gt_generate_result_free(&c);
    }
    printf("%s: %d greedy tokens, CUDA vs CPU logits: worst relative L2 %.3g\n", name, steps,
           worst);
    assert_true(worst < DEC_TOL);
    /* sampling: the same seed, the same ids, graph or eager; another seed differs */
    gt_generate_opts os = {32, 1.0f, 40, 0.95f, 7, -1, "cuda", 0};
    gt_generate_result s1, s2, s3;
    gen(cfg, &w, prompt, PROMPT, &os, &s1);
    os.no_graph = 1;
    gen(cfg, &w, prompt, PROMPT, &os, &s2);
    os.seed = 8;
    gen(cfg, &w, prompt, PROMPT, &os, &s3);
    assert_memory_equal(s1.ids, s2.ids, (size_t)s1.n * sizeof *s1.ids);
    assert_memory_not_equal(s1.ids, s3.ids, (size_t)s1.n * sizeof *s1.ids);
    gt_generate_result_free(&s1);
    gt_generate_result_free(&s2);
    gt_generate_result_free(&s3);
    gt_generate_result_free(&g);
    gt_generate_result_free(&e);
    free(w.w);
}

static void test_dense_gqa_decode_matches_cpu(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    gt_config cfg;
    gtf_gpu_dense(&cfg, 2, 256, 4, 2, 512, 0);
    check_model("dense gqa", &cfg);
}

static void test_tied_rope_scaled_decode_matches_cpu(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    gt_config cfg;
    gtf_gpu_dense(&cfg, 2, 256, 4, 1, 512, 0);
    cfg.model.share_embeddings_and_output_weights = true;
    cfg.model.rope_scaling = true;
    cfg.model.rope_scaling_factor = 8.0;
    cfg.model.rotary_base = 500000.0;
    check_model("tied rope-scaled", &cfg);
}

static void test_moe_decode_matches_cpu(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    gt_config cfg;
    gtf_gpu_dense(&cfg, 2, 256, 4, 2, 512, 0);
    cfg.model.num_moe_experts = 4;
    cfg.model.moe_router_topk = 2;
    cfg.model.moe_ffn_hidden_size = 256;
    check_model("moe", &cfg);
}

/* Qwen3-0.6B's kind of shape: heads of 128 over hidden 256 / 4 heads (64), q/k norms; and the
 * Qwen3-MoE router (pre-softmax, not renormalized) on top */
static void test_kv_channels_qwen3_decode_matches_cpu(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    gt_config cfg;
    gtf_gpu_dense(&cfg, 2, 256, 4, 2, 512, 0);
    cfg.model.kv_channels = 128;
    cfg.model.qk_layernorm = true;
    check_model("kv_channels 128 qk_layernorm", &cfg);
    cfg.model.num_moe_experts = 4;
    cfg.model.moe_router_topk = 2;
    cfg.model.moe_ffn_hidden_size = 256;
    cfg.model.moe_router_pre_softmax = true;
    check_model("kv_channels 128 pre-softmax moe", &cfg);
}

/* tokens/s of a larger model: prefill of 512 tokens, 256 decode steps, graph and eager */
static void test_decode_throughput_is_reported(void **state) {
    (void)state;
    if (!gtf_cuda_available()) skip();
    gt_config cfg;
    gtf_gpu_dense(&cfg, 8, 1024, 16, 4, 2816, 0);
    cfg.model.vocab_size = 32768;
    weights w = make_weights(&cfg);
    int32_t *prompt = malloc(512 * sizeof *prompt);
    prompt_of(prompt, 512, cfg.model.vocab_size);
    gt_generate_result r[2];
    for (int k = 0; k < 2; k++) {
        gt_generate_opts o = {257, 0.0f, 0, 1.0f, 1, -1, "cuda", k};
        gt_error err = {0};
        if (gt_generate_model(&cfg, w.w, w.n, prompt, 512, &o, 0, &r[k], &err))
            fail_msg("%s", err.msg);
        const gt_generate_stats *st = &r[k].stats;
        printf("8 layers d=1024 V=32768 (%s): prefill %d tokens %.1f ms (%.0f tokens/s), "
               "decode %d tokens %.1f ms (%.0f tokens/s)\n",
               k ? "eager" : "graph", st->prefill_tokens, st->prefill_ms,
               1e3 * st->prefill_tokens / st->prefill_ms, st->decode_steps, st->decode_ms,
               1e3 * st->decode_steps / st->decode_ms);
        assert_int_equal(st->decode_steps, 256);
    }
    assert_memory_equal(r[0].ids, r[1].ids, 257 * sizeof *r[0].ids);
    gt_generate_result_free(&r[0]);
    gt_generate_result_free(&r[1]);
    free(prompt);
    free(w.w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_gqa_decode_matches_cpu),
        cmocka_unit_test(test_tied_rope_scaled_decode_matches_cpu),
        cmocka_unit_test(test_moe_decode_matches_cpu),
        cmocka_unit_test(test_kv_channels_qwen3_decode_matches_cpu),
        cmocka_unit_test(test_decode_throughput_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
