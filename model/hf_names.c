/* graphtrain's parameter table in Hugging Face's names and layouts, and config.json in both
 * directions; see hf_names.h. The map is made from the model's own parameter table, so a
 * change of layout there shows up here as an uncovered or doubly covered element. */
#include "model/hf_names.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

const char *gt_hf_arch_name(gt_hf_arch a) {
    switch (a) {
    case GT_HF_MIXTRAL:
        return "MixtralForCausalLM";
    case GT_HF_QWEN3:
        return "Qwen3ForCausalLM";
    case GT_HF_QWEN3_MOE:
        return "Qwen3MoeForCausalLM";
    default:
        return "LlamaForCausalLM";
    }
}

int64_t gt_hf_numel(const gt_hf_tensor *t) {
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

typedef struct map_builder {
    gt_hf_map *map;
    int cap;
    int ok;
} map_builder;

/* rows [row0, row0 + rows) of gt tensor desc (cols = its last dimension; 1 for vectors) */
__attribute__((format(printf, 6, 7))) static void add(map_builder *mb,
                                                      const gt_model_tensor_desc *desc, size_t row0,
                                                      int64_t rows, int64_t cols, const char *fmt,
                                                      ...) {
    if (!mb->ok) return;
    gt_hf_map *map = mb->map;
    if (map->n == mb->cap) {
        int cap = mb->cap ? 2 * mb->cap : 64;
        gt_hf_tensor *t = realloc(map->t, (size_t)cap * sizeof *t);
        if (!t) {
            mb->ok = 0;
            return;
        }
        map->t = t;
        mb->cap = cap;
    }
    gt_hf_tensor *t = &map->t[map->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->offset = desc->offset + row0 * (size_t)cols;
    t->ndim = desc->ndim == 1 ? 1 : 2;
    t->shape[0] = rows;
    t->shape[1] = desc->ndim == 1 ? 1 : cols;
}

static int expressible(const gt_model *m, gt_hf_arch *arch, gt_error *err) {
    const gt_model_config *mc = &m->cfg.model;
    if (mc->layer_pattern[0])
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.layer_pattern='%s': no Hugging Face architecture has layers "
                            "without attention or without an MLP; leave the key empty to export",
                            mc->layer_pattern);
    if (mc->add_qkv_bias && !mc->add_bias_linear)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.add_qkv_bias=true without model.add_bias_linear: biases on q, k "
                            "and v alone are Qwen2's architecture, which export does not write "
                            "(LlamaForCausalLM's attention_bias covers q, k, v and o)");
    int moe = 0;
    for (int l = 0; l < m->num_layers; l++)
        moe += m->layers[l].has_moe;
    if (moe && moe != m->num_layers)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.moe_layer_freq=%d: MoE on some layers only has no Hugging Face "
                            "architecture export writes (MixtralForCausalLM has MoE on every "
                            "layer); set model.moe_layer_freq=1",
                            mc->moe_layer_freq);
    if (moe && mc->add_bias_linear)
        return gt_error_set(
            err, GT_ERR_INVALID,
            "model.add_bias_linear=true with MoE: MixtralForCausalLM has no biases");
    if (mc->qk_layernorm && mc->add_bias_linear)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.add_bias_linear=true with model.qk_layernorm: "
                            "Qwen3ForCausalLM has no MLP biases (its attention_bias covers q, k, "
                            "v and o only); set model.add_bias_linear=false to export");
    double scale = mc->moe_router_topk_scaling_factor;
    if (moe && scale > 0 && scale != 1)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.moe_router_topk_scaling_factor=%g: neither MixtralForCausalLM "
                            "nor Qwen3MoeForCausalLM scales the routing weights; leave it null to "
                            "export",
                            scale);
    if (moe && mc->moe_router_pre_softmax && !mc->qk_layernorm)
        return gt_error_set(
            err, GT_ERR_INVALID,
            "model.moe_router_pre_softmax=true without model.qk_layernorm: "
            "MixtralForCausalLM always renormalizes the top-k weights; only "
            "Qwen3MoeForCausalLM (model.qk_layernorm=true) has norm_topk_prob=false");
    if (mc->qk_layernorm)
        *arch = moe ? GT_HF_QWEN3_MOE : GT_HF_QWEN3;
    else
        *arch = moe ? GT_HF_MIXTRAL : GT_HF_LLAMA;
    return GT_OK;
}

static void add_layer(map_builder *mb, const gt_model *m, int l, gt_hf_arch arch) {
    const gt_model_dims *dm = &m->dm;
    const gt_layer *L = &m->layers[l];
    const gt_model_tensor_desc *T = m->tensors;
    const char *p = "model.layers";
    int q = dm->H * dm->hd, kv = dm->KV * dm->hd;
    add(mb, &T[L->attn.qkv_w], 0, q, dm->d, "%s.%d.self_attn.q_proj.weight", p, l);
    add(mb, &T[L->attn.qkv_w], q, kv, dm->d, "%s.%d.self_attn.k_proj.weight", p, l);
    add(mb, &T[L->attn.qkv_w], q + kv, kv, dm->d, "%s.%d.self_attn.v_proj.weight", p, l);
    add(mb, &T[L->attn.o_w], 0, dm->d, q, "%s.%d.self_attn.o_proj.weight", p, l);
    if (L->attn.qkv_b >= 0) {
        add(mb, &T[L->attn.qkv_b], 0, q, 1, "%s.%d.self_attn.q_proj.bias", p, l);
        add(mb, &T[L->attn.qkv_b], q, kv, 1, "%s.%d.self_attn.k_proj.bias", p, l);
        add(mb, &T[L->attn.qkv_b], q + kv, kv, 1, "%s.%d.self_attn.v_proj.bias", p, l);
    }
    if (L->attn.o_b >= 0)
        add(mb, &T[L->attn.o_b], 0, dm->d, 1, "%s.%d.self_attn.o_proj.bias", p, l);
    if (L->attn.q_norm_w >= 0) { /* Qwen3's per-head norms */
        add(mb, &T[L->attn.q_norm_w], 0, dm->hd, 1, "%s.%d.self_attn.q_norm.weight", p, l);
        add(mb, &T[L->attn.k_norm_w], 0, dm->hd, 1, "%s.%d.self_attn.k_norm.weight", p, l);
    }
    add(mb, &T[L->attn.norm_w], 0, dm->d, 1, "%s.%d.input_layernorm.weight", p, l);
    if (L->has_mlp) {
        const gt_mlp_block *b = &L->mlp;
        add(mb, &T[b->gu_w], 0, dm->f, dm->d, "%s.%d.mlp.gate_proj.weight", p, l);
        add(mb, &T[b->gu_w], dm->f, dm->f, dm->d, "%s.%d.mlp.up_proj.weight", p, l);
        add(mb, &T[b->down_w], 0, dm->d, dm->f, "%s.%d.mlp.down_proj.weight", p, l);
        if (b->gu_b >= 0) {
            add(mb, &T[b->gu_b], 0, dm->f, 1, "%s.%d.mlp.gate_proj.bias", p, l);
            add(mb, &T[b->gu_b], dm->f, dm->f, 1, "%s.%d.mlp.up_proj.bias", p, l);
            add(mb, &T[b->down_b], 0, dm->d, 1, "%s.%d.mlp.down_proj.bias", p, l);
        }
        add(mb, &T[b->norm_w], 0, dm->d, 1, "%s.%d.post_attention_layernorm.weight", p, l);
        return;
    }
    const gt_moe_block *b = &L->moe;
    int qwen = arch == GT_HF_QWEN3_MOE;
    /* Mixtral: block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down); Qwen3-MoE:
     * mlp.experts.E.gate_proj, up_proj, down_proj; both routers are the block's gate */
    const char *s = qwen ? "mlp" : "block_sparse_moe";
    const char *wg = qwen ? "gate_proj" : "w1", *wu = qwen ? "up_proj" : "w3";
    const char *wd = qwen ? "down_proj" : "w2";
    add(mb, &T[b->router_w], 0, dm->E, dm->d, "%s.%d.%s.gate.weight", p, l, s);
    /* gu_w [E][2fe][d] and down_w [E][d][fe]: one expert's rows are contiguous */
    for (int e = 0; e < dm->E; e++) {
        size_t g = (size_t)e * 2 * dm->fe;
        add(mb, &T[b->gu_w], g, dm->fe, dm->d, "%s.%d.%s.experts.%d.%s.weight", p, l, s, e, wg);
        add(mb, &T[b->gu_w], g + dm->fe, dm->fe, dm->d, "%s.%d.%s.experts.%d.%s.weight", p, l, s, e,
            wu);
        add(mb, &T[b->down_w], (size_t)e * dm->d, dm->d, dm->fe, "%s.%d.%s.experts.%d.%s.weight", p,
            l, s, e, wd);
    }
    add(mb, &T[b->norm_w], 0, dm->d, 1, "%s.%d.post_attention_layernorm.weight", p, l);
}

/* Every parameter element in exactly one HF tensor (padding between tensors in none). */
static int check_cover(const gt_model *m, const gt_hf_map *map, gt_error *err) {
    unsigned char *hit = calloc(map->n_params, 1);
    if (!hit) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory mapping parameters");
    int bad = 0;
    size_t covered = 0;
    for (int i = 0; i < map->n && !bad; i++) {
        int64_t n = gt_hf_numel(&map->t[i]);
        for (int64_t j = 0; j < n && !bad; j++)
            bad = map->t[i].offset + (size_t)j >= map->n_params || hit[map->t[i].offset + j]++;
        covered += (size_t)n;
    }
    free(hit);
    if (bad || covered != m->n_real)
        return gt_error_set(err, GT_ERR_INVALID,
                            "the Hugging Face map covers %zu of the model's %zu parameters%s; "
                            "model/hf_names.c does not match the parameter table",
                            covered, m->n_real, bad ? " (some twice)" : "");
    return GT_OK;
}

int gt_hf_map_create(gt_hf_map *map, const gt_config *cfg, gt_error *err) {
    memset(map, 0, sizeof *map);
    gt_model *m = calloc(1, sizeof *m);
    if (!m) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory mapping parameters");
    int rc = gt_model_build(m, cfg, 4, err);
    if (!rc) rc = expressible(m, &map->arch, err);
    map_builder mb = {map, 0, 1};
    if (!rc) {
        const gt_model_tensor_desc *T = m->tensors;
        map->n_params = m->info.n_params;
        add(&mb, &T[m->wte], 0, m->dm.V, m->dm.d, "model.embed_tokens.weight");
        for (int l = 0; l < m->num_layers; l++)
            add_layer(&mb, m, l, map->arch);
        add(&mb, &T[m->final_w], 0, m->dm.d, 1, "model.norm.weight");
        if (!m->dm.tied) /* tied: transformers keeps the one table, embed_tokens */
            add(&mb, &T[m->lm_w], 0, m->dm.V, m->dm.d, "lm_head.weight");
        if (!mb.ok) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory mapping parameters");
    }
    if (!rc) rc = check_cover(m, map, err);
    gt_model_release(m);
    free(m);
    if (rc) gt_hf_map_destroy(map);
    return rc;
}

void gt_hf_map_destroy(gt_hf_map *map) {
    if (!map) return;
    free(map->t);
    map->t = NULL;
    map->n = 0;
}
