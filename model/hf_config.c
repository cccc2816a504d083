/* config.json and generation_config.json as transformers reads them (LlamaForCausalLM,
 * MixtralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM), and the way back: the model keys from
 * a config.json, refusing by name every architecture and option whose computation graphtrain does
 * not have. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/json.h"
#include "model/hf_names.h"

static int head_dim(const gt_model_config *mc) {
    return gt_model_head_size(mc);
}

/* "rope_scaling": null, or Llama 3.1's with Megatron's fixed numbers */
static int add_rope_scaling(cJSON *c, const gt_model_config *mc) {
    if (!mc->rope_scaling) return cJSON_AddNullToObject(c, "rope_scaling") != NULL;
    cJSON *o = cJSON_AddObjectToObject(c, "rope_scaling");
    return o && cJSON_AddStringToObject(o, "rope_type", "llama3") &&
           cJSON_AddNumberToObject(o, "factor", mc->rope_scaling_factor) &&
           cJSON_AddNumberToObject(o, "low_freq_factor", GT_ROPE_LOW_FREQ_FACTOR) &&
           cJSON_AddNumberToObject(o, "high_freq_factor", GT_ROPE_HIGH_FREQ_FACTOR) &&
           cJSON_AddNumberToObject(o, "original_max_position_embeddings", GT_ROPE_ORIGINAL_MAX);
}

cJSON *gt_hf_config_json(const gt_config *cfg, const gt_hf_map *map) {
    const gt_model_config *mc = &cfg->model;
    int moe = gt_hf_arch_moe(map->arch),
        qwen = map->arch == GT_HF_QWEN3 || map->arch == GT_HF_QWEN3_MOE;
    static const char *const types[] = {"llama", "mixtral", "qwen3", "qwen3_moe"};
    int kv = mc->num_query_groups > 0 ? mc->num_query_groups : mc->num_attention_heads;
    cJSON *c = cJSON_CreateObject(), *arch = cJSON_CreateArray();
    if (!c || !arch || !cJSON_AddItemToObject(c, "architectures", arch)) {
        cJSON_Delete(c);
        cJSON_Delete(arch);
        return NULL;
    }
    int ok = cJSON_AddItemToArray(arch, cJSON_CreateString(gt_hf_arch_name(map->arch)));
    ok &= cJSON_AddStringToObject(c, "model_type", types[map->arch]) != NULL;
    ok &= cJSON_AddNumberToObject(c, "vocab_size", mc->vocab_size) != NULL;
    ok &= cJSON_AddNumberToObject(c, "hidden_size", mc->hidden_size) != NULL;
    int fe = mc->moe_ffn_hidden_size > 0 ? mc->moe_ffn_hidden_size : mc->ffn_hidden_size;
    /* Mixtral's experts are intermediate_size wide; Qwen3-MoE's moe_intermediate_size */
    int f = map->arch == GT_HF_MIXTRAL ? fe : mc->ffn_hidden_size;
    ok &= cJSON_AddNumberToObject(c, "intermediate_size", f) != NULL;
    ok &= cJSON_AddNumberToObject(c, "num_hidden_layers", mc->num_layers) != NULL;
    ok &= cJSON_AddNumberToObject(c, "num_attention_heads", mc->num_attention_heads) != NULL;
    ok &= cJSON_AddNumberToObject(c, "num_key_value_heads", kv) != NULL;
    ok &= cJSON_AddNumberToObject(c, "head_dim", head_dim(mc)) != NULL;
    ok &= cJSON_AddStringToObject(c, "hidden_act", "silu") != NULL;
    /* with scaling, the context the scaled frequencies were made for (Llama 3.1: 8192 x 16) */
    double max_pos = mc->seq_length;
    if (mc->rope_scaling && GT_ROPE_ORIGINAL_MAX * mc->rope_scaling_factor > max_pos)
        max_pos = GT_ROPE_ORIGINAL_MAX * mc->rope_scaling_factor;
    ok &= cJSON_AddNumberToObject(c, "max_position_embeddings", max_pos) != NULL;
    ok &= cJSON_AddNumberToObject(c, "rms_norm_eps", mc->norm_epsilon) != NULL;
    ok &= cJSON_AddNumberToObject(c, "rope_theta", mc->rotary_base) != NULL;
    ok &= add_rope_scaling(c, mc);
    ok &= cJSON_AddNumberToObject(c, "initializer_range", mc->init_method_std) != NULL;
    ok &= cJSON_AddNumberToObject(c, "attention_dropout", 0.0) != NULL;
    ok &= cJSON_AddBoolToObject(c, "tie_word_embeddings",
                                mc->share_embeddings_and_output_weights) != NULL;
    ok &= cJSON_AddBoolToObject(c, "use_cache", 1) != NULL;
    if (qwen) {
        /* graphtrain's attention is full causal on every layer, without biases here */
        ok &= cJSON_AddBoolToObject(c, "attention_bias", 0) != NULL;
        ok &= cJSON_AddBoolToObject(c, "use_sliding_window", 0) != NULL;
        ok &= cJSON_AddNullToObject(c, "sliding_window") != NULL;
        ok &= cJSON_AddNumberToObject(c, "max_window_layers", mc->num_layers) != NULL;
    }
    if (map->arch == GT_HF_QWEN3_MOE) {
        ok &= cJSON_AddNumberToObject(c, "num_experts", mc->num_moe_experts) != NULL;
        ok &= cJSON_AddNumberToObject(c, "num_experts_per_tok", mc->moe_router_topk) != NULL;
        ok &= cJSON_AddNumberToObject(c, "moe_intermediate_size", fe) != NULL;
        /* renormalized top k (softmax, top-k, renormalize) unless Megatron's pre-softmax
         * order, which is Qwen3-MoE's norm_topk_prob=false */
        ok &= cJSON_AddBoolToObject(c, "norm_topk_prob", !mc->moe_router_pre_softmax) != NULL;
        ok &= cJSON_AddNumberToObject(c, "decoder_sparse_step", 1) != NULL;
        ok &= cJSON_AddItemToObject(c, "mlp_only_layers", cJSON_CreateArray());
        ok &= cJSON_AddNumberToObject(c, "router_aux_loss_coef", mc->moe_aux_loss_coeff) != NULL;
        ok &= cJSON_AddBoolToObject(c, "output_router_logits", 0) != NULL;
    } else if (moe) {
        ok &= cJSON_AddNumberToObject(c, "num_local_experts", mc->num_moe_experts) != NULL;
        ok &= cJSON_AddNumberToObject(c, "num_experts_per_tok", mc->moe_router_topk) != NULL;
        ok &= cJSON_AddNumberToObject(c, "router_aux_loss_coef", mc->moe_aux_loss_coeff) != NULL;
        ok &= cJSON_AddBoolToObject(c, "output_router_logits", 0) != NULL;
        ok &= cJSON_AddNullToObject(c, "sliding_window") != NULL;
    } else if (!qwen) {
        ok &= cJSON_AddBoolToObject(c, "attention_bias", mc->add_bias_linear) != NULL;
        ok &= cJSON_AddBoolToObject(c, "mlp_bias", mc->add_bias_linear) != NULL;
        ok &= cJSON_AddNumberToObject(c, "pretraining_tp", 1) != NULL;
    }
    ok &= cJSON_AddStringToObject(c, "torch_dtype", "float32") != NULL;
    if (!ok) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

cJSON *gt_hf_generation_config_json(const gt_config *cfg) {
    (void)cfg;
    cJSON *c = cJSON_CreateObject();
    if (c && (!cJSON_AddBoolToObject(c, "do_sample", 0) ||
              !cJSON_AddStringToObject(c, "transformers_version", "4.46.0"))) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

/* ---- reading ---- */

typedef struct reader {
    const cJSON *hf;
    const char *dir;
    gt_config *cfg;
    gt_error *err;
} reader;

static const cJSON *get(const reader *r, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(r->hf, key);
}

/* An integer field into model key `key` (required: every architecture we read has it). */
static int set_int(const reader *r, const char *hf_key, const char *key, int *out) {
    const cJSON *v = get(r, hf_key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 2147483647.0)
        return gt_error_set(r->err, GT_ERR_INVALID,
                            "%s/config.json: \"%s\" is missing or not a non-negative integer",
                            r->dir, hf_key);
    if (out) *out = v->valueint;
    if (!key) return GT_OK;
    char kv[160];
    snprintf(kv, sizeof kv, "%s=%d", key, v->valueint);
    return gt_config_apply_override(r->cfg, kv, r->err);
}

static int set_double(const reader *r, const char *hf_key, const char *key, double value) {
    (void)hf_key;
    char kv[160];
    snprintf(kv, sizeof kv, "%s=%.17g", key, value);
    return gt_config_apply_override(r->cfg, kv, r->err);
}

static int refuse(const reader *r, const char *what, const char *why) {
    return gt_error_set(r->err, GT_ERR_INVALID, "%s/config.json: %s: %s", r->dir, what, why);
}

static int is_true(const cJSON *v) {
    return cJSON_IsTrue(v);
}

/* Llama 3.1's scaling as Megatron computes it: any factor, its three other numbers fixed. */
static int read_llama3(const reader *r, const cJSON *o, const char *what, double *factor) {
    static const struct {
        const char *key;
        double value;
    } fixed[] = {{"low_freq_factor", GT_ROPE_LOW_FREQ_FACTOR},
                 {"high_freq_factor", GT_ROPE_HIGH_FREQ_FACTOR},
                 {"original_max_position_embeddings", GT_ROPE_ORIGINAL_MAX}};
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "factor");
    if (!cJSON_IsNumber(f) || f->valuedouble < 1)
        return refuse(r, what, "rope_type \"llama3\" needs a \"factor\" >= 1");
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, fixed[i].key);
        if (!cJSON_IsNumber(v) || v->valuedouble != fixed[i].value) {
            char why[256];
            snprintf(why, sizeof why,
                     "%s must be %g: model.rope_scaling takes Megatron's apply_rope_scaling, which "
                     "fixes it (only the factor is a key, model.rope_scaling_factor)",
                     fixed[i].key, fixed[i].value);
            return refuse(r, what, why);
        }
    }
    *factor = f->valuedouble;
    return GT_OK;
}

/* The rotary settings: a base (rope_theta, or transformers 5's rope_parameters) and either no
 * scaling or Llama 3.1's (rope_type "llama3"); any other scaling is refused by its type. */
static int read_rope(const reader *r, double *theta, double *factor) {
    const cJSON *sc = get(r, "rope_scaling"), *rp = get(r, "rope_parameters");
    const cJSON *t = get(r, "rope_theta");
    *factor = 0;
    for (int i = 0; i < 2; i++) {
        const cJSON *o = i ? rp : sc;
        if (!o || cJSON_IsNull(o)) continue;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive(o, "type");
        const char *name = cJSON_IsString(type) ? type->valuestring : "?";
        char what[128];
        snprintf(what, sizeof what, "%s with rope_type \"%s\"",
                 i ? "rope_parameters" : "rope_scaling", name);
        if (!strcmp(name, "llama3")) {
            int rc = read_llama3(r, o, what, factor);
            if (rc) return rc;
        } else if (strcmp(name, "default")) {
            return refuse(r, what,
                          "graphtrain's rotary embedding has no such scaling; rope_type "
                          "\"default\" and \"llama3\" (model.rope_scaling) import");
        }
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(o, "rope_theta");
        if (cJSON_IsNumber(th)) t = th;
    }
    *theta = cJSON_IsNumber(t) ? t->valuedouble : 10000.0;
    return GT_OK;
}

static int read_arch(const reader *r, gt_hf_arch *arch) {
    const cJSON *a = get(r, "architectures");
    const cJSON *name =
        cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1 ? cJSON_GetArrayItem(a, 0) : NULL;
    if (!name || !cJSON_IsString(name) || !name->valuestring)
        return refuse(r, "\"architectures\"", "it must list exactly one architecture");
    const char *n = name->valuestring;
    if (!strcmp(n, "LlamaForCausalLM"))
        *arch = GT_HF_LLAMA;
    else if (!strcmp(n, "MixtralForCausalLM"))
        *arch = GT_HF_MIXTRAL;
    else if (!strcmp(n, "Qwen3ForCausalLM"))
        *arch = GT_HF_QWEN3;
    else if (!strcmp(n, "Qwen3MoeForCausalLM"))
        *arch = GT_HF_QWEN3_MOE;
    else {
        char what[200];
        snprintf(what, sizeof what, "architecture %s", n);
        return refuse(r, what,
                      "graphtrain imports LlamaForCausalLM, MixtralForCausalLM, "
                      "Qwen3ForCausalLM and Qwen3MoeForCausalLM");
    }
    return GT_OK;
}

/* A list of layer types in which every entry is "full_attention" (or no list). */
static int all_full_attention(const cJSON *types) {
    if (!types || cJSON_IsNull(types)) return 1;
    if (!cJSON_IsArray(types)) return 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, types) {
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention")) return 0;
    }
    return 1;
}

/* Qwen3's and Qwen3-MoE's own options: biases, sliding windows and MoE on some layers only
 * are refused by name. */
static int read_qwen3_options(const reader *r, gt_hf_arch arch) {
    if (is_true(get(r, "attention_bias")))
        return refuse(r, "attention_bias=true",
                      "Qwen3's attention biases (q, k, v and o without MLP biases) have no "
                      "graphtrain key: model.add_bias_linear also puts biases on the MLP");
    if (is_true(get(r, "use_sliding_window")) || !all_full_attention(get(r, "layer_types")))
        return refuse(r, "use_sliding_window / layer_types",
                      "graphtrain's attention is full causal on every layer; sliding-window "
                      "layers do not import");
    if (arch != GT_HF_QWEN3_MOE) return GT_OK;
    const cJSON *step = get(r, "decoder_sparse_step"), *only = get(r, "mlp_only_layers");
    if (step && !(cJSON_IsNumber(step) && step->valuedouble == 1))
        return refuse(r, "decoder_sparse_step",
                      "only 1 imports: graphtrain exports and imports models whose every layer "
                      "is MoE (model.moe_layer_freq=1)");
    if (only && !cJSON_IsNull(only) && !(cJSON_IsArray(only) && cJSON_GetArraySize(only) == 0))
        return refuse(r, "mlp_only_layers",
                      "it must be empty: graphtrain exports and imports models whose every "
                      "layer is MoE (model.moe_layer_freq=1)");
    const cJSON *shared = get(r, "shared_expert_intermediate_size");
    if (cJSON_IsNumber(shared) && shared->valuedouble > 0)
        return refuse(r, "shared_expert_intermediate_size", "shared experts are not implemented");
    return GT_OK;
}

static int read_options(const reader *r, gt_hf_arch arch) {
    const cJSON *act = get(r, "hidden_act");
    if (act && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return refuse(r, "hidden_act", "graphtrain's MLP is SwiGLU; only \"silu\" imports");
    const cJSON *tp = get(r, "pretraining_tp");
    if (tp && !(cJSON_IsNumber(tp) && tp->valuedouble == 1))
        return refuse(r, "pretraining_tp", "only 1 imports (it splits the linear layers' math)");
    const cJSON *sw = get(r, "sliding_window");
    if (sw && !cJSON_IsNull(sw))
        return refuse(r, "sliding_window", "graphtrain's attention is full causal; set it to null");
    /* Qwen3-MoE reads norm_topk_prob (gt_hf_config_apply); Mixtral's router always
     * renormalizes, so there the key can only say what Mixtral does */
    const cJSON *norm = get(r, "norm_topk_prob");
    if (arch != GT_HF_QWEN3_MOE && norm && !is_true(norm))
        return refuse(r, "norm_topk_prob=false",
                      "only Qwen3MoeForCausalLM has unnormalized top-k weights (Megatron's "
                      "model.moe_router_pre_softmax=true); this architecture renormalizes");
    const cJSON *jit = get(r, "router_jitter_noise");
    if (jit && !(cJSON_IsNumber(jit) && jit->valuedouble == 0))
        return refuse(r, "router_jitter_noise", "graphtrain's router has no jitter; set it to 0");
    if (arch == GT_HF_LLAMA && is_true(get(r, "attention_bias")) != is_true(get(r, "mlp_bias")))
        return refuse(r, "attention_bias and mlp_bias differ",
                      "graphtrain's model.add_bias_linear puts biases on both or neither");
    if (arch == GT_HF_QWEN3 || arch == GT_HF_QWEN3_MOE) return read_qwen3_options(r, arch);
    return GT_OK;
}

int gt_hf_config_apply(gt_config *cfg, const cJSON *hf, const char *dir, gt_error *err) {
    reader r = {hf, dir, cfg, err};
    if (!cJSON_IsObject(hf)) return refuse(&r, "the file", "it is not a JSON object");
    gt_hf_arch arch = GT_HF_LLAMA;
    int rc = read_arch(&r, &arch);
    if (!rc) rc = read_options(&r, arch);
    double theta = 0, factor = 0;
    if (!rc) rc = read_rope(&r, &theta, &factor);
    int heads = 0, hidden = 0, hd = 0;
    if (!rc) rc = set_int(&r, "hidden_size", "model.hidden_size", &hidden);
    if (!rc) rc = set_int(&r, "num_attention_heads", "model.num_attention_heads", &heads);
    if (!rc && heads == 0) rc = refuse(&r, "num_attention_heads", "it must be > 0");
    if (!rc && get(&r, "head_dim") && !cJSON_IsNull(get(&r, "head_dim"))) {
        rc = set_int(&r, "head_dim", NULL, &hd);
        if (!rc && hd == 0) rc = refuse(&r, "head_dim", "it must be > 0");
    }
    /* model.kv_channels only where head_dim is not the derived size, so a config that never
     * had the key comes back without it */
    if (!rc) {
        char kv[64];
        snprintf(kv, sizeof kv, "model.kv_channels=%d", hd > 0 && hd * heads != hidden ? hd : 0);
        rc = gt_config_apply_override(cfg, kv, err);
    }
    if (!rc) rc = set_int(&r, "num_hidden_layers", "model.num_layers", NULL);
    if (!rc) rc = set_int(&r, "vocab_size", "model.vocab_size", NULL);
    if (!rc && get(&r, "num_key_value_heads"))
        rc = set_int(&r, "num_key_value_heads", "model.num_query_groups", NULL);
    if (!rc) {
        const cJSON *eps = get(&r, "rms_norm_eps");
        rc = set_double(&r, "rms_norm_eps", "model.layernorm_epsilon",
                        cJSON_IsNumber(eps) ? eps->valuedouble : 1e-6);
    }
    if (!rc) rc = set_double(&r, "rope_theta", "model.rotary_base", theta);
    if (!rc)
        rc = gt_config_apply_override(
            cfg, factor > 0 ? "model.rope_scaling=true" : "model.rope_scaling=false", err);
    if (!rc && factor > 0) rc = set_double(&r, "factor", "model.rope_scaling_factor", factor);
    if (!rc)
        rc = gt_config_apply_override(cfg,
                                      is_true(get(&r, "attention_bias"))
                                          ? "model.add_bias_linear=true"
                                          : "model.add_bias_linear=false",
                                      err);
    if (!rc) rc = gt_config_apply_override(cfg, "model.add_qkv_bias=false", err);
    /* absent, LlamaConfig's and MixtralConfig's default: untied */
    const cJSON *tie = get(&r, "tie_word_embeddings");
    if (!rc)
        rc = gt_config_apply_override(cfg,
                                      is_true(tie)
                                          ? "model.share_embeddings_and_output_weights=true"
                                          : "model.share_embeddings_and_output_weights=false",
                                      err);
    if (!rc) rc = gt_config_apply_override(cfg, "model.layer_pattern=", err);
    int qwen = arch == GT_HF_QWEN3 || arch == GT_HF_QWEN3_MOE;
    if (!rc)
        rc = gt_config_apply_override(
            cfg, qwen ? "model.qk_layernorm=true" : "model.qk_layernorm=false", err);
    if (arch == GT_HF_LLAMA || arch == GT_HF_QWEN3) {
        if (!rc) rc = set_int(&r, "intermediate_size", "model.ffn_hidden_size", NULL);
        if (!rc) rc = gt_config_apply_override(cfg, "model.num_moe_experts=0", err);
    } else {
        /* Mixtral: intermediate_size and num_local_experts; Qwen3-MoE: moe_intermediate_size
         * and num_experts (transformers 5 also writes num_local_experts) */
        int q = arch == GT_HF_QWEN3_MOE;
        const char *ne = q && get(&r, "num_experts") ? "num_experts" : "num_local_experts";
        if (!rc) rc = set_int(&r, "intermediate_size", "model.ffn_hidden_size", NULL);
        if (!rc)
            rc = set_int(&r, q ? "moe_intermediate_size" : "intermediate_size",
                         "model.moe_ffn_hidden_size", NULL);
        if (!rc) rc = set_int(&r, ne, "model.num_moe_experts", NULL);
        if (!rc) rc = set_int(&r, "num_experts_per_tok", "model.moe_router_topk", NULL);
        if (!rc) rc = gt_config_apply_override(cfg, "model.moe_layer_freq=1", err);
        /* Qwen3MoeConfig's norm_topk_prob defaults to false: softmax over all experts, top-k,
         * the probabilities kept as they are (Megatron's pre-softmax order) */
        if (!rc)
            rc = gt_config_apply_override(cfg,
                                          q && !is_true(get(&r, "norm_topk_prob"))
                                              ? "model.moe_router_pre_softmax=true"
                                              : "model.moe_router_pre_softmax=false",
                                          err);
        if (!rc) rc = gt_config_apply_override(cfg, "model.moe_router_topk_scaling_factor=0", err);
        const cJSON *aux = get(&r, "router_aux_loss_coef");
        if (!rc && cJSON_IsNumber(aux))
            rc = set_double(&r, "router_aux_loss_coef", "model.moe_aux_loss_coeff",
                            aux->valuedouble);
    }
    return rc;
}
