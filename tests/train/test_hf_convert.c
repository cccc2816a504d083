/* Hugging Face interchange: import of folders transformers itself wrote
 * (tests/train/fixtures, made by hf_fixture.py: Llama, Mixtral, Qwen3, Qwen3-MoE) gives
 * transformers' logits and greedy continuation on the CPU backend;
 * export writes the tensors transformers wrote, byte for byte; export then import is bitwise;
 * what graphtrain cannot compute is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/keys.h"
#include "core/json.h"
#include "core/read_file.h"
#include "core/safetensors.h"
#include "model/hf_names.h"
#include "model/model.h"
#include "testlib.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/hf_convert.h"

/* transformers' fp32 and the CPU reference differ in summation order only */
#define LOGIT_TOL 5e-5

static const char *fixture(const char *name, char *buf, size_t n) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/train/fixtures/%s", name);
    return gt_test_source_path(rel, buf, n);
}

static void import_ok(const char *dir, const char *out) {
    gt_error err = {0};
    int rc = gt_hf_import(dir, out, NULL, &err);
    if (rc) fail_msg("import %s: %s", dir, err.msg);
}

static void export_ok(const char *ckpt, const char *out, gt_st_dtype dt, uint64_t shard) {
    gt_error err = {0};
    gt_hf_export_opts o = {dt, shard};
    int rc = gt_hf_export(ckpt, out, &o, NULL, &err);
    if (rc) fail_msg("export %s: %s", ckpt, err.msg);
}

/* master weights and config of a checkpoint folder */
static float *read_master(const char *ckpt, gt_config *cfg, size_t *n) {
    gt_error err = {0};
    char file[1100];
    assert_int_equal(gt_hf_checkpoint_config(ckpt, cfg, file, sizeof file, &err), GT_OK);
    gt_ckpt_meta meta;
    float *master, *m, *v;
    int rc = gt_ckpt_read(file, &meta, &master, &m, &v, &err);
    if (rc) fail_msg("%s", err.msg);
    free(m);
    free(v);
    *n = meta.n_params;
    return master;
}

typedef struct expected {
    int T, V;
    int32_t tokens[64];
    float *logits; /* [T, V] */
    int n_greedy;
    int32_t greedy[16]; /* transformers' greedy continuation of tokens */
} expected;

static void read_expected(const char *dir, expected *e) {
    char path[1100], *text;
    size_t n;
    gt_error err = {0};
    snprintf(path, sizeof path, "%s/expected.json", dir);
    assert_int_equal(gt_read_file(path, 1 << 24, &text, &n, &err), GT_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    const cJSON *tok = cJSON_GetObjectItem(j, "tokens"), *lg = cJSON_GetObjectItem(j, "logits");
    const cJSON *gr = cJSON_GetObjectItem(j, "greedy");
    e->n_greedy = cJSON_GetArraySize(gr);
    assert_true(e->n_greedy <= 16);
    for (int i = 0; i < e->n_greedy; i++)
        e->greedy[i] = cJSON_GetArrayItem(gr, i)->valueint;
    e->T = cJSON_GetArraySize(tok);
    e->V = cJSON_GetArraySize(cJSON_GetArrayItem(lg, 0));
    assert_true(e->T > 0 && e->T <= 64 && e->V > 0);
    e->logits = malloc((size_t)e->T * e->V * sizeof(float));
    for (int t = 0; t < e->T; t++) {
        e->tokens[t] = cJSON_GetArrayItem(tok, t)->valueint;
        const cJSON *row = cJSON_GetArrayItem(lg, t);
        for (int v = 0; v < e->V; v++)
            e->logits[t * e->V + v] = (float)cJSON_GetArrayItem(row, v)->valuedouble;
    }
    cJSON_Delete(j);
}

/* graphtrain's logits for tokens[T] with the given master weights (CPU backend, fp32) */
static float *model_logits(gt_config *cfg, const float *master, const int32_t *tokens, int T) {
    gt_error err = {0};
    cfg->train.micro_batch_size = 1;
    cfg->model.seq_length = T;
    cfg->model.attention_dropout = cfg->model.hidden_dropout = 0;
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    assert_int_equal(gt_backend_create_cpu(&b, &err), GT_OK);
    assert_int_equal(b->ops->stream_create(b, &s, &err), GT_OK);
    int rc = gt_model_create(&m, cfg, b, &err);
    if (rc) fail_msg("gt_model_create: %s", err.msg);
    const gt_model_info *in = gt_model_get_info(m);
    gt_step_state *st;
    int32_t *tok;
    assert_int_equal(b->ops->alloc(b, sizeof *st, (void **)&st, &err), GT_OK);
    assert_int_equal(b->ops->alloc(b, (size_t)T * sizeof *tok, (void **)&tok, &err), GT_OK);
    memset(st, 0, sizeof *st);
    st->nan_step = st->inject_nan = -1;
    memcpy(tok, tokens, (size_t)T * sizeof *tok);
    b->ops->from_float(b, s, in->params, master, in->n_params);
    const void *lg = gt_model_forward_logits(m, s, tok, st);
    int V = cfg->model.vocab_size;
    float *out = malloc((size_t)T * V * sizeof *out);
    b->ops->to_float(b, s, out, lg, (size_t)T * V);
    assert_int_equal(b->ops->stream_sync(b, s, &err), GT_OK);
    b->ops->free(b, st);
    b->ops->free(b, tok);
    gt_model_destroy(m);
    b->ops->stream_destroy(b, s);
    gt_backend_destroy(b);
    return out;
}

/* Greedy decoding by whole forward passes (the first largest logit, as torch's argmax): n new
 * tokens after tokens[T] into out. */
static void greedy(gt_config *cfg, const float *master, const int32_t *tokens, int T, int n,
                   int32_t *out) {
    int32_t seq[96];
    assert_true(T + n <= 96);
    memcpy(seq, tokens, (size_t)T * sizeof *seq);
    int V = cfg->model.vocab_size;
    for (int i = 0; i < n; i++) {
        float *lg = model_logits(cfg, master, seq, T + i);
        const float *last = lg + (size_t)(T + i - 1) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
        seq[T + i] = out[i] = best;
        free(lg);
    }
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

static double imported_logits_diff(const char *name, void (*tamper)(const gt_config *, float *)) {
    char dir[1024], tmp[256], ck[512];
    fixture(name, dir, sizeof dir);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, sizeof ck, "%s/ck", tmp);
    import_ok(dir, ck);
    gt_config *cfg = malloc(sizeof *cfg);
    size_t n;
    float *master = read_master(ck, cfg, &n);
    if (tamper) tamper(cfg, master);
    expected e;
    read_expected(dir, &e);
    assert_int_equal(e.V, cfg->model.vocab_size);
    float *got = model_logits(cfg, master, e.tokens, e.T);
    double d = max_rel_diff(got, e.logits, (size_t)e.T * e.V);
    free(got);
    if (!tamper && e.n_greedy > 0) { /* and the same greedy continuation */
        int32_t mine[16];
        greedy(cfg, master, e.tokens, e.T, e.n_greedy, mine);
        for (int i = 0; i < e.n_greedy; i++)
            if (mine[i] != e.greedy[i])
                fail_msg("%s: greedy token %d is %d, transformers' %d", name, i, mine[i],
                         e.greedy[i]);
    }
    free(e.logits);
    free(master);
    free(cfg);
    return d;
}

static void test_llama_bf16_import_gives_transformers_logits(void **state) {
    (void)state;
    double d = imported_logits_diff("llama", NULL);
    printf("llama: max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
}

static void test_mixtral_sharded_import_gives_transformers_logits(void **state) {
    (void)state;
    double d = imported_logits_diff("mixtral", NULL);
    printf("mixtral: max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
}

static void test_llama31_rope_scaling_import_gives_transformers_logits(void **state) {
    (void)state;
    double d = imported_logits_diff("llama31", NULL);
    printf("llama31: max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
}

static void test_llama32_tied_import_gives_transformers_logits(void **state) {
    (void)state;
    double d = imported_logits_diff("llama32", NULL);
    printf("llama32 (tied): max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
}

static void drop_rope_scaling(const gt_config *cfg, float *master) {
    (void)master;
    ((gt_config *)cfg)->model.rope_scaling = false;
}

/* the fixture's scaling moves the logits far beyond the tolerance: the check above sees it */
static void test_llama31_logits_without_the_scaling_differ(void **state) {
    (void)state;
    double d = imported_logits_diff("llama31", drop_rope_scaling);
    printf("llama31 without rope scaling: max relative logit difference %.3g\n", d);
    assert_true(d > 20 * LOGIT_TOL);
}

/* The other rotary convention (Megatron's interleaved pairs (2i, 2i+1)) reached by reordering
 * the rows of every q and k head as a converter that got the pairing wrong would. */
static void interleave_qk_rows(const gt_config *cfg, float *master) {
    gt_hf_map map;
    gt_error err = {0};
    assert_int_equal(gt_hf_map_create(&map, cfg, &err), GT_OK);
    int hd = gt_model_head_size(&cfg->model), d = cfg->model.hidden_size;
    if (hd <= 0 || d <= 0) fail_msg("head size %d, hidden size %d: no rows to reorder", hd, d);
    float *tmp = malloc((size_t)hd * d * sizeof *tmp);
    for (int i = 0; i < map.n; i++) {
        if (!strstr(map.t[i].name, "q_proj.weight") && !strstr(map.t[i].name, "k_proj.weight"))
            continue;
        for (int64_t h = 0; h < map.t[i].shape[0] / hd; h++) {
            float *w = master + map.t[i].offset + (size_t)h * hd * d;
            for (int r = 0; r < hd; r++) /* row r of the pair layout from row r/2 (+ hd/2) */
                memcpy(tmp + (size_t)r * d, w + (size_t)((r % 2) * (hd / 2) + r / 2) * d,
                       (size_t)d * sizeof *w);
            memcpy(w, tmp, (size_t)hd * d * sizeof *w);
        }
    }
    free(tmp);
    gt_hf_map_destroy(&map);
}

static void test_wrong_rotary_pairing_fails_the_logits_check(void **state) {
    (void)state;
    double d = imported_logits_diff("llama", interleave_qk_rows);
    printf("llama with interleaved q/k rows: max relative logit difference %.3g\n", d);
    assert_true(d > 100 * LOGIT_TOL);
}

/* Export writes the very bytes transformers wrote (bf16 in, bf16 out), under its names. */
static void test_export_writes_transformers_tensors_bytewise(void **state) {
    (void)state;
    char dir[1024], tmp[256], ck[512], out[512], a[1200], b[1200];
    fixture("llama", dir, sizeof dir);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, sizeof ck, "%s/ck", tmp);
    snprintf(out, sizeof out, "%s/hf", tmp);
    import_ok(dir, ck);
    export_ok(ck, out, GT_ST_BF16, GT_HF_DEFAULT_SHARD_BYTES);
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    gt_st_file fa, fb;
    gt_error err = {0};
    assert_int_equal(gt_st_open(&fa, a, &err), GT_OK);
    assert_int_equal(gt_st_open(&fb, b, &err), GT_OK);
    assert_int_equal(fa.n, fb.n);
    for (int i = 0; i < fa.n; i++) {
        const gt_st_tensor *ta = &fa.tensors[i], *tb = gt_st_find(&fb, ta->name);
        if (!tb) fail_msg("export lacks %s", ta->name);
        assert_int_equal(tb->dtype, GT_ST_BF16);
        assert_int_equal(ta->ndim, tb->ndim);
        for (int k = 0; k < ta->ndim; k++)
            assert_int_equal(ta->shape[k], tb->shape[k]);
        size_t bytes = (size_t)(ta->end - ta->begin);
        unsigned char *x = malloc(bytes), *y = malloc(bytes);
        FILE *pa = fa.fp, *pb = fb.fp;
        assert_int_equal(fseek(pa, (long)(fa.data_offset + ta->begin), SEEK_SET), 0);
        assert_int_equal(fseek(pb, (long)(fb.data_offset + tb->begin), SEEK_SET), 0);
        assert_int_equal(fread(x, 1, bytes, pa), bytes);
        assert_int_equal(fread(y, 1, bytes, pb), bytes);
        if (memcmp(x, y, bytes)) fail_msg("tensor %s differs from transformers' bytes", ta->name);
        free(x);
        free(y);
    }
    gt_st_close(&fa);
    gt_st_close(&fb);
}

/* A checkpoint of arbitrary fp32 values (not bf16-representable) through fp32 safetensors. */
static void write_random_checkpoint(const char *ck, gt_config *cfg, size_t *n_out, float **out) {
    gt_error err = {0};
    gt_hf_map map;
    assert_int_equal(gt_hf_map_create(&map, cfg, &err), GT_OK);
    size_t n = map.n_params;
    float *w = calloc(n, sizeof *w), *z = calloc(n, sizeof *z);
    uint32_t x = 987654321u;
    for (int i = 0; i < map.n; i++)
        for (int64_t j = 0; j < gt_hf_numel(&map.t[i]); j++) {
            x = x * 1664525u + 1013904223u;
            w[map.t[i].offset + (size_t)j] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.731f;
        }
    gt_hf_map_destroy(&map);
    gt_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.fingerprint = gt_ckpt_fingerprint(cfg, n, meta.shape, sizeof meta.shape);
    meta.n_params = n;
    meta.state.step = 7;
    meta.state.nan_step = -1;
    char dir[1024];
    gt_ckpt_dir d = {.lock_fd = -1, .most_recent_k = -1};
    snprintf(d.save, sizeof d.save, "%s", ck);
    assert_int_equal(gt_ckpt_write(gt_ckpt_iter_path(ck, 7, dir, sizeof dir), &meta, w, z, z, &err),
                     GT_OK);
    assert_int_equal(gt_ckpt_dir_commit(&d, 7, cfg, &err), GT_OK);
    free(z);
    *n_out = n;
    *out = w;
}

static void round_trip(gt_config *cfg, uint64_t shard_bytes, int want_shards) {
    char tmp[256], ck[512], hf[512], back[512], idx[600];
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, sizeof ck, "%s/ck", tmp);
    snprintf(hf, sizeof hf, "%s/hf", tmp);
    snprintf(back, sizeof back, "%s/back", tmp);
    size_t n;
    float *w;
    write_random_checkpoint(ck, cfg, &n, &w);
    export_ok(ck, hf, GT_ST_F32, shard_bytes);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", hf);
    struct stat st;
    assert_int_equal(stat(idx, &st) == 0, want_shards > 1);
    import_ok(hf, back);
    gt_config *c2 = malloc(sizeof *c2);
    size_t n2;
    float *w2 = read_master(back, c2, &n2);
    assert_int_equal(n, n2);
    char s1[GT_CKPT_SHAPE_MAX], s2[GT_CKPT_SHAPE_MAX];
    assert_int_equal(gt_ckpt_fingerprint(cfg, n, s1, sizeof s1),
                     gt_ckpt_fingerprint(c2, n2, s2, sizeof s2));
    assert_memory_equal(w, w2, n * sizeof *w);
    assert_int_equal(cfg->model.rope_scaling, c2->model.rope_scaling);
    assert_true(cfg->model.rope_scaling_factor == c2->model.rope_scaling_factor);
    assert_true(cfg->model.rotary_base == c2->model.rotary_base);
    assert_int_equal(cfg->model.share_embeddings_and_output_weights,
                     c2->model.share_embeddings_and_output_weights);
    assert_int_equal(cfg->model.qk_layernorm, c2->model.qk_layernorm); /* Qwen3 both ways */
    assert_int_equal(cfg->model.moe_router_pre_softmax, c2->model.moe_router_pre_softmax);
    assert_int_equal(gt_model_head_size(&cfg->model), gt_model_head_size(&c2->model));
    assert_int_equal(cfg->model.kv_channels, c2->model.kv_channels);
    free(w);
    free(w2);
    free(c2);
}

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    c->model.num_layers = 3;
    c->model.hidden_size = 24;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 40;
    c->model.vocab_size = 50;
    c->model.seq_length = 8;
    c->train.micro_batch_size = 1;
}

static void test_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    round_trip(&cfg, GT_HF_DEFAULT_SHARD_BYTES, 1);
}

static void test_sharded_biased_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.add_bias_linear = true;
    round_trip(&cfg, 4096, 2);
}

static void test_moe_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.num_moe_experts = 4;
    cfg.model.moe_router_topk = 2;
    cfg.model.moe_ffn_hidden_size = 12;
    cfg.model.ffn_hidden_size = 12; /* Mixtral's intermediate_size: import sets both */
    round_trip(&cfg, 8192, 2);
}

static void expect_import_refused(const char *dir, const char *needle) {
    char tmp[256], ck[512];
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, sizeof ck, "%s/ck", tmp);
    gt_error err = {0};
    assert_int_equal(gt_hf_import(dir, ck, NULL, &err), GT_ERR_INVALID);
    if (!strstr(err.msg, needle)) fail_msg("message lacks '%s': %s", needle, err.msg);
    struct stat st;
    assert_int_not_equal(stat(ck, &st), 0); /* nothing written */
}

/* A copy of fixture `name` with config.json's text edited: from -> to. */
static void edited_fixture(const char *name, char *out, size_t n, const char *from, const char *to);

/* Qwen3-MoE's norm_topk_prob=false (Qwen3MoeConfig's default, also when absent) is Megatron's
 * pre-softmax router; the logits then differ from those of the renormalized fixture */
static void test_qwen3_moe_unnormalized_top_k_imports_as_pre_softmax(void **state) {
    (void)state;
    char d[256], tmp[256], ck[512];
    const char *edits[][2] = {{"\"norm_topk_prob\": true", "\"norm_topk_prob\": false"},
                              {"\"norm_topk_prob\": true,", ""}};
    for (int i = 0; i < 2; i++) {
        edited_fixture("qwen3_moe", d, sizeof d, edits[i][0], edits[i][1]);
        gt_test_tmpdir(tmp, sizeof tmp);
        snprintf(ck, sizeof ck, "%s/ck", tmp);
        import_ok(d, ck);
        gt_config *cfg = malloc(sizeof *cfg);
        size_t n;
        free(read_master(ck, cfg, &n));
        assert_true(cfg->model.moe_router_pre_softmax);
        free(cfg);
    }
    char dir[1024];
    fixture("qwen3_moe", dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck_norm", tmp);
    import_ok(dir, ck);
    gt_config *cfg = malloc(sizeof *cfg);
    size_t n;
    free(read_master(ck, cfg, &n));
    assert_false(cfg->model.moe_router_pre_softmax);
    free(cfg);
}

static void
test_moe_router_options_without_a_hugging_face_form_are_refused_by_export(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.num_moe_experts = 4;
    cfg.model.moe_router_topk = 2;
    cfg.model.moe_ffn_hidden_size = 12;
    cfg.model.moe_router_pre_softmax = true; /* Mixtral renormalizes */
    gt_hf_map map;
    gt_error err = {0};
    assert_int_equal(gt_hf_map_create(&map, &cfg, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "MixtralForCausalLM always renormalizes"));
    cfg.model.moe_router_pre_softmax = false;
    cfg.model.qk_layernorm = true;
    cfg.model.moe_router_topk_scaling_factor = 2.5;
    err = (gt_error){0};
    assert_int_equal(gt_hf_map_create(&map, &cfg, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.moe_router_topk_scaling_factor=2.5"));
}

static void test_qwen3_moe_with_dense_layers_is_refused(void **state) {
    (void)state;
    char d[256];
    edited_fixture("qwen3_moe", d, sizeof d, "\"decoder_sparse_step\": 1",
                   "\"decoder_sparse_step\": 2");
    expect_import_refused(d, "decoder_sparse_step");
    edited_fixture("qwen3_moe", d, sizeof d, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1]");
    expect_import_refused(d, "mlp_only_layers");
}

/* Qwen3's head_dim is free (128 in most checkpoints): model.kv_channels. transformers made
 * qwen3_hd with head_dim 12 over hidden 32 / 4 heads; the logits and greedy tokens follow. */
static void test_qwen3_head_dim_imports_as_kv_channels_with_transformers_logits(void **state) {
    (void)state;
    double d = imported_logits_diff("qwen3_hd", NULL);
    printf("qwen3_hd (head_dim 12): max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
    /* the same weights with head_dim dropped do not fit the derived head size 8 */
    char e[256];
    edited_fixture("qwen3_hd", e, sizeof e, "\"head_dim\": 12,", "");
    expect_import_refused(e, "q_proj.weight has shape [48, 32]");
}

/* Qwen3-MoE as Qwen3MoeConfig has it by default: norm_topk_prob false (pre-softmax router),
 * with head_dim 12 too; against transformers' logits, and not those of a renormalizing router */
static void renormalizing_router(const gt_config *cfg, float *master) {
    (void)master;
    ((gt_config *)cfg)->model.moe_router_pre_softmax = false;
}

static void test_qwen3_moe_unnormalized_import_gives_transformers_logits(void **state) {
    (void)state;
    double d = imported_logits_diff("qwen3_moe_raw", NULL);
    printf("qwen3_moe_raw (norm_topk_prob false): max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
    d = imported_logits_diff("qwen3_moe_raw", renormalizing_router);
    printf("qwen3_moe_raw with a renormalizing router: max relative logit difference %.3g\n", d);
    assert_true(d > 20 * LOGIT_TOL);
}

static void test_kv_channels_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.kv_channels = 10; /* 24 / 4 would be 6 */
    round_trip(&cfg, GT_HF_DEFAULT_SHARD_BYTES, 1);
    cfg.model.qk_layernorm = true;
    round_trip(&cfg, 4096, 2);
    cfg.model.num_moe_experts = 4;
    cfg.model.moe_router_topk = 2;
    cfg.model.moe_ffn_hidden_size = 12;
    cfg.model.moe_router_pre_softmax = true;
    round_trip(&cfg, 8192, 2);
}

static void test_qwen3_attention_bias_is_refused(void **state) {
    (void)state;
    char d[256];
    edited_fixture("qwen3", d, sizeof d, "\"attention_bias\": false", "\"attention_bias\": true");
    expect_import_refused(d, "attention_bias=true");
}

static void test_qwen3_import_gives_transformers_logits_and_greedy_tokens(void **state) {
    (void)state;
    double d = imported_logits_diff("qwen3", NULL);
    printf("qwen3 (tied): max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
}

static void test_qwen3_moe_import_gives_transformers_logits_and_greedy_tokens(void **state) {
    (void)state;
    double d = imported_logits_diff("qwen3_moe", NULL);
    printf("qwen3_moe: max relative logit difference %.3g\n", d);
    assert_true(d < LOGIT_TOL);
}

/* q_norm / k_norm at ones instead of the fixture's weights: the logits check sees it */
static void unit_qk_norms(const gt_config *cfg, float *master) {
    gt_hf_map map;
    gt_error err = {0};
    assert_int_equal(gt_hf_map_create(&map, cfg, &err), GT_OK);
    int hit = 0;
    for (int i = 0; i < map.n; i++) {
        if (!strstr(map.t[i].name, "q_norm") && !strstr(map.t[i].name, "k_norm")) continue;
        for (int64_t j = 0; j < map.t[i].shape[0]; j++)
            master[map.t[i].offset + (size_t)j] = 1.0f;
        hit++;
    }
    assert_int_equal(hit, 2 * cfg->model.num_layers);
    gt_hf_map_destroy(&map);
}

static void test_qwen3_logits_without_its_qk_norm_weights_differ(void **state) {
    (void)state;
    double d = imported_logits_diff("qwen3", unit_qk_norms);
    printf("qwen3 with unit q/k norms: max relative logit difference %.3g\n", d);
    assert_true(d > 20 * LOGIT_TOL);
}

static void test_qwen3_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.qk_layernorm = true;
    round_trip(&cfg, GT_HF_DEFAULT_SHARD_BYTES, 1);
    cfg.model.share_embeddings_and_output_weights = true;
    round_trip(&cfg, 4096, 2);
}

static void test_qwen3_moe_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.qk_layernorm = true;
    cfg.model.num_moe_experts = 4;
    cfg.model.moe_router_topk = 2;
    cfg.model.moe_ffn_hidden_size = 12; /* Qwen3-MoE keeps both widths */
    round_trip(&cfg, 8192, 2);
    cfg.model.moe_router_pre_softmax = true; /* norm_topk_prob=false and back */
    round_trip(&cfg, 8192, 2);
}

static void test_qwen3_export_refuses_mlp_biases(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.qk_layernorm = true;
    cfg.model.add_bias_linear = true;
    gt_hf_map map;
    gt_error err = {0};
    assert_int_equal(gt_hf_map_create(&map, &cfg, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.add_bias_linear=true with model.qk_layernorm"));
}

static void edited_fixture(const char *name, char *out, size_t n, const char *from,
                           const char *to) {
    char dir[1024], p[1200], *text;
    size_t len;
    gt_error err = {0};
    fixture(name, dir, sizeof dir);
    gt_test_tmpdir(out, n);
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_int_equal(gt_read_file(p, 1 << 20, &text, &len, &err), GT_OK);
    char *at = strstr(text, from);
    if (!at) fail_msg("fixture config.json lacks '%s'", from);
    char *edited = malloc(len + strlen(to) + 1);
    memcpy(edited, text, (size_t)(at - text));
    strcpy(edited + (at - text), to);
    strcat(edited, at + strlen(from));
    snprintf(p, sizeof p, "%s/config.json", out);
    gt_test_write_text(p, edited);
    free(text);
    free(edited);
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/", dir, out);
    assert_int_equal(system(cmd), 0);
}

/* A copy of the llama fixture with config.json's text edited: from -> to. */
static void edited_llama(char *out, size_t n, const char *from, const char *to) {
    edited_fixture("llama", out, n, from, to);
}

static void test_llama3_scaling_with_other_fixed_numbers_is_refused(void **state) {
    (void)state;
    char d[256];
    edited_llama(d, sizeof d, "\"rope_type\": \"default\"",
                 "\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
                 "\"high_freq_factor\": 2.0, \"original_max_position_embeddings\": 8192");
    expect_import_refused(d, "high_freq_factor must be 4");
}

static void test_yarn_rope_scaling_is_refused(void **state) {
    (void)state;
    char d[256];
    edited_llama(d, sizeof d, "\"rope_type\": \"default\"",
                 "\"rope_type\": \"yarn\", \"factor\": 4.0");
    expect_import_refused(d, "rope_type \"yarn\"");
}

/* exported with scaling, the folder says so in transformers' words, and comes back equal */
static void test_rope_scaling_exports_and_imports(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.rope_scaling = true;
    cfg.model.rope_scaling_factor = 16;
    round_trip(&cfg, GT_HF_DEFAULT_SHARD_BYTES, 1);
}

static void test_tied_export_then_import_is_bitwise(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.share_embeddings_and_output_weights = true;
    round_trip(&cfg, GT_HF_DEFAULT_SHARD_BYTES, 1);
}

static void test_unnormalized_top_k_routing_is_refused(void **state) {
    (void)state;
    char d[256];
    edited_llama(d, sizeof d, "\"attention_bias\": false",
                 "\"attention_bias\": false, \"norm_topk_prob\": false");
    expect_import_refused(d, "norm_topk_prob=false");
}

static void test_weights_of_another_shape_are_refused(void **state) {
    (void)state;
    char d[256];
    edited_llama(d, sizeof d, "\"intermediate_size\": 48", "\"intermediate_size\": 40");
    expect_import_refused(d, "mlp.gate_proj.weight has shape [48, 32]");
}

static void test_export_refuses_qkv_only_biases(void **state) {
    (void)state;
    gt_config cfg;
    tiny_config(&cfg);
    cfg.model.add_qkv_bias = true;
    gt_hf_map map;
    gt_error err = {0};
    assert_int_equal(gt_hf_map_create(&map, &cfg, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.add_qkv_bias"));
}

/* graphtrain logits (what bench/hf_parity.py reads) writes the fixture's logits and the mean
 * next-token cross entropy of them. */
static void test_logits_command_writes_transformers_logits_and_the_loss(void **state) {
    (void)state;
    char dir[1024], tmp[256], args[4096], out[16384], path[600];
    fixture("qwen3_moe", dir, sizeof dir);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(args, sizeof args, "import --from hf %s --out %s/ck", dir, tmp);
    assert_int_equal(gt_test_run(args, out, sizeof out), 0);
    expected e;
    read_expected(dir, &e);
    int n = snprintf(args, sizeof args, "logits --checkpoint %s/ck --out %s/lg.json --tokens ", tmp,
                     tmp);
    for (int t = 0; t < e.T; t++)
        n += snprintf(args + n, sizeof args - (size_t)n, t ? ",%d" : "%d", e.tokens[t]);
    if (gt_test_run(args, out, sizeof out)) fail_msg("graphtrain %s:\n%s", args, out);
    snprintf(path, sizeof path, "%s/lg.json", tmp);
    char *text;
    size_t len;
    gt_error err = {0};
    assert_int_equal(gt_read_file(path, 1 << 24, &text, &len, &err), GT_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    const cJSON *lg = cJSON_GetObjectItem(j, "logits");
    assert_int_equal(cJSON_GetArraySize(lg), e.T);
    double worst = 0, want = 0;
    for (int t = 0; t < e.T; t++) {
        const cJSON *row = cJSON_GetArrayItem(lg, t);
        assert_int_equal(cJSON_GetArraySize(row), e.V);
        double mx = -1e30, z = 0;
        for (int v = 0; v < e.V; v++) {
            double g = cJSON_GetArrayItem(row, v)->valuedouble, x = e.logits[t * e.V + v];
            worst = fmax(worst, fabs(g - x) / fmax(1.0, fabs(x)));
            mx = fmax(mx, x);
        }
        for (int v = 0; v < e.V; v++)
            z += exp(e.logits[t * e.V + v] - mx);
        if (t + 1 < e.T) want += (log(z) + mx - e.logits[t * e.V + e.tokens[t + 1]]) / (e.T - 1);
    }
    double loss = cJSON_GetObjectItem(j, "loss")->valuedouble;
    printf("logits command: max relative logit difference %.3g, loss %.6f (transformers' "
           "logits give %.6f)\n",
           worst, loss, want);
    assert_true(worst < LOGIT_TOL);
    assert_true(fabs(loss - want) < 1e-4);
    cJSON_Delete(j);
    free(e.logits);
}

/* The imported checkpoint is what `train checkpoint.load=` starts from, whatever the seed. */
static void test_train_starts_from_an_imported_checkpoint(void **state) {
    (void)state;
    char dir[1024], tmp[256], args[4096], out[16384];
    fixture("llama", dir, sizeof dir);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(args, sizeof args, "import --from hf %s --out %s/ck", dir, tmp);
    assert_int_equal(gt_test_run(args, out, sizeof out), 0);
    snprintf(args, sizeof args,
             "train --recipe tiny --config %s/ck/model.yaml checkpoint.load=%s/ck rng.seed=99 "
             "model.seq_length=8 train.micro_batch_size=2 train.global_batch_size=2 "
             "train.train_iters=2 model.cuda_graph_impl=none runtime.gemm_table= "
             "model.compute_dtype=fp32",
             tmp, tmp);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc) fail_msg("train from the import failed:\n%s", out);
    assert_non_null(strstr(out, "step      2/2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_bf16_import_gives_transformers_logits),
        cmocka_unit_test(test_mixtral_sharded_import_gives_transformers_logits),
        cmocka_unit_test(test_llama31_rope_scaling_import_gives_transformers_logits),
        cmocka_unit_test(test_llama31_logits_without_the_scaling_differ),
        cmocka_unit_test(test_llama32_tied_import_gives_transformers_logits),
        cmocka_unit_test(test_wrong_rotary_pairing_fails_the_logits_check),
        cmocka_unit_test(test_export_writes_transformers_tensors_bytewise),
        cmocka_unit_test(test_export_then_import_is_bitwise),
        cmocka_unit_test(test_sharded_biased_export_then_import_is_bitwise),
        cmocka_unit_test(test_moe_export_then_import_is_bitwise),
        cmocka_unit_test(test_qwen3_import_gives_transformers_logits_and_greedy_tokens),
        cmocka_unit_test(test_qwen3_moe_import_gives_transformers_logits_and_greedy_tokens),
        cmocka_unit_test(test_qwen3_logits_without_its_qk_norm_weights_differ),
        cmocka_unit_test(test_qwen3_export_then_import_is_bitwise),
        cmocka_unit_test(test_qwen3_moe_export_then_import_is_bitwise),
        cmocka_unit_test(test_qwen3_export_refuses_mlp_biases),
        cmocka_unit_test(test_qwen3_moe_unnormalized_top_k_imports_as_pre_softmax),
        cmocka_unit_test(test_moe_router_options_without_a_hugging_face_form_are_refused_by_export),
        cmocka_unit_test(test_qwen3_moe_with_dense_layers_is_refused),
        cmocka_unit_test(test_qwen3_head_dim_imports_as_kv_channels_with_transformers_logits),
        cmocka_unit_test(test_qwen3_moe_unnormalized_import_gives_transformers_logits),
        cmocka_unit_test(test_kv_channels_export_then_import_is_bitwise),
        cmocka_unit_test(test_qwen3_attention_bias_is_refused),
        cmocka_unit_test(test_llama3_scaling_with_other_fixed_numbers_is_refused),
        cmocka_unit_test(test_yarn_rope_scaling_is_refused),
        cmocka_unit_test(test_rope_scaling_exports_and_imports),
        cmocka_unit_test(test_tied_export_then_import_is_bitwise),
        cmocka_unit_test(test_unnormalized_top_k_routing_is_refused),
        cmocka_unit_test(test_weights_of_another_shape_are_refused),
        cmocka_unit_test(test_export_refuses_qkv_only_biases),
        cmocka_unit_test(test_train_starts_from_an_imported_checkpoint),
        cmocka_unit_test(test_logits_command_writes_transformers_logits_and_the_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
