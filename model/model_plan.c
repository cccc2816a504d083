/* Model planning: checks the model keys, derives the shapes, lays out the parameter table
 * (decayed matrices first, then norm weights and biases) and plans the four arenas. Used by
 * gt_model_create (then allocated) and gt_model_plan (sizes only, no backend). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

static size_t align_elems(size_t n) {
    return (n + GT_MODEL_TENSOR_ALIGN - 1) / GT_MODEL_TENSOR_ALIGN * GT_MODEL_TENSOR_ALIGN;
}

/* Adds one tensor at the end of the flat array; returns its index, or -1 without memory. */
static int add_tensor(gt_model *m, size_t *cursor, int decay, int ndim, int s0, int s1, int s2,
                      const char *fmt, int layer) {
    if (m->n_tensors == m->cap_tensors) {
        int cap = m->cap_tensors ? m->cap_tensors * 2 : 64;
        gt_model_tensor_desc *t = realloc(m->tensors, (size_t)cap * sizeof *t);
        if (!t) return -1;
        m->tensors = t;
        m->cap_tensors = cap;
    }
    gt_model_tensor_desc *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    // cppcheck-suppress wrongPrintfScanfArgNum ; plain names take no %d: C ignores the extra arg
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->ndim = ndim;
    t->shape[0] = s0;
    t->shape[1] = ndim > 1 ? s1 : 0;
    t->shape[2] = ndim > 2 ? s2 : 0;
    t->numel = (size_t)s0 * (ndim > 1 ? (size_t)s1 : 1) * (ndim > 2 ? (size_t)s2 : 1);
    t->decay = decay;
    t->offset = *cursor;
    *cursor = align_elems(*cursor + t->numel);
    m->n_real += t->numel;
    return m->n_tensors++;
}

/* Reads the unit list of every layer from model.layer_pattern (one unit kind per character)
 * or, when it is empty, the classic layer: attention + MLP, or attention + MoE on the layers
 * model.moe_layer_freq selects. */
static int build_layers(gt_model *m, gt_error *err) {
    const gt_model_config *mc = &m->cfg.model;
    size_t plen = strnlen(mc->layer_pattern, GT_PATTERN_MAX);
    if (plen > 0 && (size_t)mc->num_layers != plen)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.layer_pattern '%s' describes %zu layers but model.num_layers "
                            "is %d; make them agree (one character per layer)",
                            mc->layer_pattern, plen, mc->num_layers);
    if (mc->num_layers < 1)
        return gt_error_set(err, GT_ERR_INVALID, "model.num_layers is %d; it must be >= 1",
                            mc->num_layers);
    if (plen == 0 && mc->num_moe_experts > 0 && mc->moe_layer_freq < 1)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.moe_layer_freq is %d; it must be >= 1 (1 = every layer MoE)",
                            mc->moe_layer_freq);
    m->num_layers = mc->num_layers;
    m->layers = calloc((size_t)m->num_layers, sizeof *m->layers);
    if (!m->layers) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning layers");
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        if (plen == 0) {
            L->has_attn = 1;
            if (mc->num_moe_experts > 0 && l % mc->moe_layer_freq == 0)
                L->has_moe = 1;
            else
                L->has_mlp = 1;
            continue;
        }
        char c = mc->layer_pattern[l];
        if (c == '*')
            L->has_attn = 1;
        else if (c == '-')
            L->has_mlp = 1;
        else if (c == 'E') {
            if (mc->num_moe_experts <= 0)
                return gt_error_set(err, GT_ERR_INVALID,
                                    "model.layer_pattern has an MoE layer ('E' at layer %d) but "
                                    "model.num_moe_experts is %d; set it > 0 or use '-' for a "
                                    "dense MLP",
                                    l, mc->num_moe_experts);
            L->has_moe = 1;
        } else if (c == 'M')
            L->has_mamba = 1;
        else
            return gt_error_set(err, GT_ERR_INVALID,
                                "model.layer_pattern has '%c' at layer %d; allowed are '*' "
                                "(attention), '-' (MLP), 'E' (MoE) and 'M' (Mamba)",
                                c, l);
    }
    /* units and residual buffers, in execution order */
    int res = 0;
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        if (L->has_attn) {
            L->kinds[L->n_units++] = GT_UNIT_ATTN;
            L->attn.res_in = res++;
            L->attn.res_out = res;
        }
        if (L->has_mlp) {
            L->kinds[L->n_units++] = GT_UNIT_MLP;
            L->mlp.res_in = res++;
            L->mlp.res_out = res;
        }
        if (L->has_moe) {
            L->kinds[L->n_units++] = GT_UNIT_MOE_ROUTER;
            L->kinds[L->n_units++] = GT_UNIT_MOE_PREPROCESS;
            L->kinds[L->n_units++] = GT_UNIT_MOE;
            L->moe.res_in = res++;
            L->moe.res_out = res;
        }
        if (L->has_mamba) {
            L->kinds[L->n_units++] = GT_UNIT_MAMBA;
            L->mamba.res_in = res++;
            L->mamba.res_out = res;
        }
    }
    m->n_res = res + 1;
    m->res = calloc((size_t)m->n_res, sizeof *m->res);
    if (!m->res) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning layers");
    return GT_OK;
}

static int check_dims(gt_model *m, gt_error *err) {
    const gt_config *c = &m->cfg;
    const gt_model_config *mc = &c->model;
    gt_model_dims *dm = &m->dm;
    int any_mlp = 0, any_moe = 0;
    for (int l = 0; l < m->num_layers; l++) {
        any_mlp |= m->layers[l].has_mlp;
        any_moe |= m->layers[l].has_moe;
    }
#define NEED(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) return gt_error_set(err, GT_ERR_INVALID, __VA_ARGS__);                        \
    } while (0)
    NEED(mc->hidden_size > 0, "model.hidden_size is %d; it must be > 0", mc->hidden_size);
    NEED(mc->num_attention_heads > 0, "model.num_attention_heads is %d; it must be > 0",
         mc->num_attention_heads);
    NEED(mc->kv_channels > 0 || mc->hidden_size % mc->num_attention_heads == 0,
         "model.hidden_size %d is not divisible by model.num_attention_heads %d (or set "
         "model.kv_channels, the head size)",
         mc->hidden_size, mc->num_attention_heads);
    int kv = mc->num_query_groups > 0 ? mc->num_query_groups : mc->num_attention_heads;
    NEED(mc->num_query_groups >= 0 && mc->num_attention_heads % kv == 0,
         "model.num_attention_heads %d is not divisible by model.num_query_groups %d",
         mc->num_attention_heads, mc->num_query_groups);
    NEED(gt_model_head_size(mc) % 2 == 0,
         "head size %d (model.kv_channels, or model.hidden_size / model.num_attention_heads) "
         "must be even for rotary embeddings",
         gt_model_head_size(mc));
    NEED(mc->vocab_size > 0, "model.vocab_size is %d; it must be > 0", mc->vocab_size);
    NEED(mc->seq_length > 0, "model.seq_length is %d; it must be > 0", mc->seq_length);
    NEED(c->train.micro_batch_size > 0, "train.micro_batch_size is %d; it must be > 0",
         c->train.micro_batch_size);
    NEED(!any_mlp || mc->ffn_hidden_size > 0, "model.ffn_hidden_size is %d; it must be > 0",
         mc->ffn_hidden_size);
    NEED(mc->norm_epsilon > 0, "model.norm_epsilon is %g; it must be > 0", mc->norm_epsilon);
    NEED(mc->rotary_base > 0, "model.rotary_base is %g; it must be > 0", mc->rotary_base);
    NEED(mc->attention_dropout >= 0 && mc->attention_dropout < 1,
         "model.attention_dropout is %g; it must be in [0, 1)", mc->attention_dropout);
    NEED(mc->hidden_dropout >= 0 && mc->hidden_dropout < 1,
         "model.hidden_dropout is %g; it must be in [0, 1)", mc->hidden_dropout);
    double tokens = (double)c->train.micro_batch_size * mc->seq_length;
    NEED(tokens * mc->vocab_size < 2147483647.0,
         "train.micro_batch_size x model.seq_length = %.0f tokens is too many for one "
         "micro-batch (tokens x vocab must stay below 2^31); lower train.micro_batch_size",
         tokens);
    dm->B = c->train.micro_batch_size;
    dm->T = mc->seq_length;
    dm->N = dm->B * dm->T;
    dm->d = mc->hidden_size;
    dm->H = mc->num_attention_heads;
    dm->KV = kv;
    dm->hd = gt_model_head_size(mc);
    dm->qkv = (dm->H + 2 * dm->KV) * dm->hd;
    dm->f = mc->ffn_hidden_size;
    dm->V = mc->vocab_size;
    dm->eps = (float)mc->norm_epsilon;
    dm->theta = (float)mc->rotary_base;
    dm->rope_factor = mc->rope_scaling ? (float)mc->rope_scaling_factor : 0.0f;
    dm->p_attn = (float)mc->attention_dropout;
    dm->p_hidden = (float)mc->hidden_dropout;
    dm->qkv_bias = mc->add_qkv_bias || mc->add_bias_linear;
    dm->lin_bias = mc->add_bias_linear;
    dm->tied = mc->share_embeddings_and_output_weights;
    dm->qk_norm = mc->qk_layernorm;
    if (any_moe) {
        int E = mc->num_moe_experts;
        NEED(mc->moe_router_topk >= 1 && mc->moe_router_topk <= E,
             "model.moe_router_topk is %d; it must be between 1 and model.num_moe_experts (%d)",
             mc->moe_router_topk, E);
        int fe = mc->moe_ffn_hidden_size > 0 ? mc->moe_ffn_hidden_size : mc->ffn_hidden_size;
        NEED(fe > 0,
             "model.moe_ffn_hidden_size is %d (and model.ffn_hidden_size is %d); set "
             "model.moe_ffn_hidden_size > 0",
             mc->moe_ffn_hidden_size, mc->ffn_hidden_size);
        NEED(mc->moe_aux_loss_coeff >= 0, "model.moe_aux_loss_coeff is %g; it must be >= 0",
             mc->moe_aux_loss_coeff);
        dm->E = E;
        dm->k = mc->moe_router_topk;
        dm->fe = fe;
        dm->aux_coeff = (float)mc->moe_aux_loss_coeff;
        dm->router.pre_softmax = mc->moe_router_pre_softmax;
        dm->router.scale = mc->moe_router_topk_scaling_factor > 0
                               ? (float)mc->moe_router_topk_scaling_factor
                               : 1.0f;
        if (mc->moe_expert_capacity_factor > 0) {
            double cap = ceil(mc->moe_expert_capacity_factor * dm->N * dm->k / E);
            NEED(cap * E < 2147483647.0, "model.moe_expert_capacity_factor %g is too large",
                 mc->moe_expert_capacity_factor);
            dm->capacity = (int)cap;
            dm->R = dm->capacity * E;
        } else {
            dm->capacity = 0;
            dm->R = dm->N * dm->k;
        }
    }
#undef NEED
    return gt_mamba_check_dims(m, err);
}

/* Which weight gradients wait for the batched flush at the end of the backward
 * (gt_attn_block.defer_*): those whose two operands stay untouched until then. */
static void plan_deferred_wgrads(gt_model *m) {
    const gt_model_dims *dm = &m->dm;
    int dropout = dm->p_hidden > 0;
    if (gt_model_fp8_configured(&m->cfg)) return; /* fp8 weight gradients run per layer */
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        int next_attn = l + 1 < m->num_layers && m->layers[l + 1].has_attn;
        /* a recomputed operand lives in a shared buffer that the next recompute overwrites
         * before the flush, so its weight gradient cannot wait */
        unsigned rc = L->rc, next_rc = next_attn ? m->layers[l + 1].rc : 0;
        L->attn.defer_qkv = L->has_attn && !dm->qkv_bias && next_attn && !(rc & GT_RC_ATTN_NORM) &&
                            !(next_rc & GT_RC_QKV);
        L->attn.defer_o = L->has_attn && !dm->lin_bias && !dropout && !(rc & GT_RC_CORE_ATTN);
        L->mlp.defer_gu = L->has_mlp && !dm->lin_bias && !(rc & (GT_RC_MLP_NORM | GT_RC_MLP));
        L->mlp.defer_down = L->has_mlp && !dm->lin_bias && !dropout && !(rc & GT_RC_MLP);
    }
}

/* The parameter table: pass 0 adds the weight-decayed matrices, pass 1 the rest. */
static int build_tensors(gt_model *m, gt_error *err) {
    const gt_model_dims *dm = &m->dm;
    size_t cur = 0;
    int ok = 1;
#define T(idx, decay, nd, a, b2, c2, fmt, l)                                                       \
    do {                                                                                           \
        (idx) = add_tensor(m, &cur, decay, nd, a, b2, c2, fmt, l);                                 \
        ok &= ((idx) >= 0);                                                                        \
    } while (0)
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        L->attn.norm_w = L->attn.qkv_w = L->attn.qkv_b = L->attn.o_w = L->attn.o_b = -1;
        L->attn.q_norm_w = L->attn.k_norm_w = -1;
        L->mlp.norm_w = L->mlp.gu_w = L->mlp.gu_b = L->mlp.down_w = L->mlp.down_b = -1;
        L->moe.norm_w = L->moe.router_w = L->moe.gu_w = L->moe.down_w = -1;
        gt_mamba_block *mb = &L->mamba;
        mb->norm_w = mb->in_w = mb->conv_w = mb->conv_b = mb->dt_bias = mb->A_log = mb->D = -1;
        mb->gnorm_w = mb->out_w = -1;
    }
    const gt_mamba_shape ms = dm->ms;
    int m_di = gt_mamba_inner(ms), m_conv = gt_mamba_conv(ms), m_in = gt_mamba_in(ms);
    T(m->wte, 1, 2, dm->V, dm->d, 0, "embedding.wte", 0);
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        if (L->has_attn) {
            T(L->attn.qkv_w, 1, 2, dm->qkv, dm->d, 0, "layers.%d.attn.qkv_w", l);
            T(L->attn.o_w, 1, 2, dm->d, dm->H * dm->hd, 0, "layers.%d.attn.o_w", l);
        }
        if (L->has_mlp) {
            T(L->mlp.gu_w, 1, 2, 2 * dm->f, dm->d, 0, "layers.%d.mlp.gu_w", l);
            T(L->mlp.down_w, 1, 2, dm->d, dm->f, 0, "layers.%d.mlp.down_w", l);
        }
        if (L->has_moe) {
            T(L->moe.router_w, 1, 2, dm->E, dm->d, 0, "layers.%d.moe.router_w", l);
            T(L->moe.gu_w, 1, 3, dm->E, 2 * dm->fe, dm->d, "layers.%d.moe.gu_w", l);
            T(L->moe.down_w, 1, 3, dm->E, dm->d, dm->fe, "layers.%d.moe.down_w", l);
        }
        if (L->has_mamba) {
            gt_mamba_block *mb = &L->mamba;
            T(mb->in_w, 1, 2, m_in, dm->d, 0, "layers.%d.mamba.in_proj_w", l);
            T(mb->conv_w, 1, 2, m_conv, ms.K, 0, "layers.%d.mamba.conv1d_w", l);
            T(mb->out_w, 1, 2, dm->d, m_di, 0, "layers.%d.mamba.out_proj_w", l);
        }
    }
    if (dm->tied)
        m->lm_w = m->wte; /* the head reads the embedding table and adds to its gradient */
    else
        T(m->lm_w, 1, 2, dm->V, dm->d, 0, "lm_head.w", 0);
    m->info.n_decay = cur;
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        if (L->has_attn) {
            T(L->attn.norm_w, 0, 1, dm->d, 0, 0, "layers.%d.attn.norm_w", l);
            if (dm->qkv_bias) T(L->attn.qkv_b, 0, 1, dm->qkv, 0, 0, "layers.%d.attn.qkv_b", l);
            if (dm->lin_bias) T(L->attn.o_b, 0, 1, dm->d, 0, 0, "layers.%d.attn.o_b", l);
            if (dm->qk_norm) {
                T(L->attn.q_norm_w, 0, 1, dm->hd, 0, 0, "layers.%d.attn.q_layernorm_w", l);
                T(L->attn.k_norm_w, 0, 1, dm->hd, 0, 0, "layers.%d.attn.k_layernorm_w", l);
            }
        }
        if (L->has_mlp) {
            T(L->mlp.norm_w, 0, 1, dm->d, 0, 0, "layers.%d.mlp.norm_w", l);
            if (dm->lin_bias) {
                T(L->mlp.gu_b, 0, 1, 2 * dm->f, 0, 0, "layers.%d.mlp.gu_b", l);
                T(L->mlp.down_b, 0, 1, dm->d, 0, 0, "layers.%d.mlp.down_b", l);
            }
        }
        if (L->has_moe) T(L->moe.norm_w, 0, 1, dm->d, 0, 0, "layers.%d.moe.norm_w", l);
        if (L->has_mamba) {
            gt_mamba_block *mb = &L->mamba;
            T(mb->norm_w, 0, 1, dm->d, 0, 0, "layers.%d.mamba.norm_w", l);
            T(mb->conv_b, 0, 1, m_conv, 0, 0, "layers.%d.mamba.conv1d_b", l);
            T(mb->dt_bias, 0, 1, ms.H, 0, 0, "layers.%d.mamba.dt_bias", l);
            T(mb->A_log, 0, 1, ms.H, 0, 0, "layers.%d.mamba.A_log", l);
            T(mb->D, 0, 1, ms.H, 0, 0, "layers.%d.mamba.D", l);
            T(mb->gnorm_w, 0, 1, m_di, 0, 0, "layers.%d.mamba.gate_norm_w", l);
        }
    }
    T(m->final_w, 0, 1, dm->d, 0, 0, "final_norm.w", 0);
#undef T
    if (!ok) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning parameters");
    m->info.n_params = cur;
    return GT_OK;
}

/* FLOPs per token, WORKLOADS.md: 6 x (parameters a token passes through, without the
 * embedding lookup) + 6 x attention layers x seq x d_model for the score and value products
 * + the Mamba layers' scans (3 x the forward's 4 x di x state size). */
static double flops_per_token(const gt_model *m) {
    const gt_model_dims *dm = &m->dm;
    double n_active = (double)dm->V * dm->d; /* output head */
    int attn_layers = 0;
    double scan_flops = 0; /* Mamba layers: the SSD scan, forward and backward */
    for (int l = 0; l < m->num_layers; l++) {
        const gt_layer *L = &m->layers[l];
        if (L->has_attn) {
            attn_layers++;
            n_active += (double)dm->qkv * dm->d + (double)dm->d * dm->H * dm->hd;
        }
        if (L->has_mlp) n_active += 3.0 * dm->f * dm->d;
        if (L->has_moe) n_active += (double)dm->E * dm->d + dm->k * 3.0 * dm->fe * dm->d;
        if (L->has_mamba) {
            gt_mamba_shape ms = dm->ms;
            n_active += (double)gt_mamba_in(ms) * dm->d + (double)gt_mamba_conv(ms) * ms.K +
                        (double)dm->d * gt_mamba_inner(ms);
            /* the scan: a state update and a readout, 2 x di x S multiply-adds forward */
            scan_flops += 3.0 * 4.0 * gt_mamba_inner(ms) * ms.S;
        }
    }
    return 6.0 * n_active + 6.0 * attn_layers * (double)dm->T * dm->d + scan_flops;
}

static int plan_arenas(gt_model *m, gt_error *err) {
    const gt_model_dims *dm = &m->dm;
    size_t N = (size_t)dm->N, d = (size_t)dm->d, ae = m->act_elem, R = (size_t)dm->R;
    size_t P = (size_t)gt_rmsnorm_parts_bound(dm->N); /* weight-gradient partial rows a norm */
    int rc;
    PLAN(&m->params, "params", m->info.n_params * ae, &m->params_base);
    PLAN(&m->grads, "grads", m->info.n_params * sizeof(float), &m->grads_base);
    PLAN(&m->grads, "embedding.row_marks", (size_t)dm->V, &m->emb_dirty);
    PLAN(&m->grads, "embedding.row_lag", (size_t)dm->V * sizeof(int32_t), &m->emb_lag);
    for (int i = 0; i < m->n_res; i++) {
        int mid = 0; /* the residual inside a layer that full recompute rebuilds */
        for (int l = 0; l < m->num_layers && !mid; l++)
            mid = (m->layers[l].rc & GT_RC_MID_RESIDUAL) && m->layers[l].attn.res_out == i;
        if ((rc = gt_model_plan_act(m, i, mid, mid ? "layers.%d.residual_mid" : "residual.%d",
                                    N * d * ae, &m->res[i], err)))
            return rc;
    }
#define ACT(shared, fmt, bytes, ptr)                                                               \
    do {                                                                                           \
        if ((rc = gt_model_plan_act(m, l, shared, fmt, bytes, (void **)(ptr), err))) return rc;    \
    } while (0)
    size_t sc_a = 0, sc_b = 0;
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        /* recomputed activations (GT_RC_*) go to buffers shared by the layers */
        unsigned r = L->rc;
        if (L->has_attn) {
            gt_attn_block *a = &L->attn;
            /* shared also where only fp8's saved x^T outlives the forward (model_fp8.h) */
            int ln_shared = (r & GT_RC_ATTN_NORM) || gt_model_fp8_saves_input(m, l, GT_LIN_QKV);
            ACT(ln_shared, "layers.%d.attn.ln", N * d * ae, &a->ln);
            ACT(r & GT_RC_ATTN_NORM, "layers.%d.attn.rstd", N * sizeof(float), &a->rstd);
            ACT(0, "layers.%d.attn.dw_part", P * d * sizeof(float), &a->dw_part);
            ACT(r & GT_RC_QKV, "layers.%d.attn.qkv", N * dm->qkv * ae, &a->qkv);
            ACT(r & GT_RC_CORE_ATTN, "layers.%d.attn.att", N * dm->H * dm->hd * ae, &a->att);
            ACT(r & GT_RC_CORE_ATTN, "layers.%d.attn.lse", N * dm->H * sizeof(float), &a->lse);
            if (dm->qk_norm) {
                size_t heads = (size_t)dm->H + (size_t)dm->KV;
                ACT(r & GT_RC_QKV, "layers.%d.attn.qk_raw", N * heads * dm->hd * ae, &a->qk_raw);
                ACT(r & GT_RC_QKV, "layers.%d.attn.qk_rstd", N * heads * sizeof(float),
                    &a->qk_rstd);
                ACT(0, "layers.%d.attn.qk_dw_part", 2 * P * dm->hd * sizeof(float), &a->qk_part);
            }
            if (N * dm->H * dm->hd > sc_a) sc_a = N * dm->H * dm->hd;
            if (N * dm->qkv > sc_b) sc_b = N * dm->qkv;
        }
        if (L->has_mlp) {
            gt_mlp_block *p = &L->mlp;
            int ln_shared = (r & GT_RC_MLP_NORM) || gt_model_fp8_saves_input(m, l, GT_LIN_GU);
            ACT(ln_shared, "layers.%d.mlp.ln", N * d * ae, &p->ln);
            ACT(r & GT_RC_MLP_NORM, "layers.%d.mlp.rstd", N * sizeof(float), &p->rstd);
            ACT(0, "layers.%d.mlp.dw_part", P * d * sizeof(float), &p->dw_part);
            ACT(r & GT_RC_MLP, "layers.%d.mlp.gu", N * 2 * dm->f * ae, &p->gu);
            int h_shared = (r & GT_RC_MLP) || gt_model_fp8_saves_input(m, l, GT_LIN_DOWN);
            ACT(h_shared, "layers.%d.mlp.h", N * dm->f * ae, &p->h);
            if (N * dm->f > sc_a) sc_a = N * dm->f;
            if (N * 2 * dm->f > sc_b) sc_b = N * 2 * dm->f;
        }
        if (L->has_moe) {
            gt_moe_block *e = &L->moe;
            size_t E = (size_t)dm->E, k = (size_t)dm->k;
            unsigned all = r & GT_RC_MOE, act = r & (GT_RC_MOE | GT_RC_MOE_ACT);
            ACT(r & GT_RC_MOE_NORM, "layers.%d.moe.ln", N * d * ae, &e->ln);
            ACT(r & GT_RC_MOE_NORM, "layers.%d.moe.rstd", N * sizeof(float), &e->rstd);
            ACT(0, "layers.%d.moe.dw_part", P * d * sizeof(float), &e->dw_part);
            ACT(all, "layers.%d.moe.probs", N * E * sizeof(float), &e->probs);
            ACT(all, "layers.%d.moe.topk_idx", N * k * sizeof(int32_t), &e->topk_idx);
            ACT(all, "layers.%d.moe.topk_w", N * k * sizeof(float), &e->topk_w);
            ACT(all, "layers.%d.moe.counts", E * sizeof(int32_t), &e->counts);
            ACT(all, "layers.%d.moe.slot_token", R * sizeof(int32_t), &e->slot_token);
            ACT(all, "layers.%d.moe.token_slot", N * k * sizeof(int32_t), &e->token_slot);
            ACT(all, "layers.%d.moe.offsets", (E + 1) * sizeof(int32_t), &e->offsets);
            ACT(all, "layers.%d.moe.xe", R * d * ae, &e->xe);
            ACT(all, "layers.%d.moe.gue", R * 2 * dm->fe * ae, &e->gue);
            ACT(act, "layers.%d.moe.he", R * dm->fe * ae, &e->he);
            ACT(all, "layers.%d.moe.ye", R * d * ae, &e->ye);
            if (R * dm->fe > sc_a) sc_a = R * dm->fe;
            if (R * 2 * dm->fe > sc_b) sc_b = R * 2 * dm->fe;
        }
        if (L->has_mamba) {
            gt_mamba_block *mb = &L->mamba;
            gt_mamba_shape ms = dm->ms;
            size_t di = (size_t)gt_mamba_inner(ms), in = (size_t)gt_mamba_in(ms);
            ACT(0, "layers.%d.mamba.ln", N * d * ae, &mb->ln);
            ACT(0, "layers.%d.mamba.rstd", N * sizeof(float), &mb->rstd);
            ACT(0, "layers.%d.mamba.dw_part", P * d * sizeof(float), &mb->dw_part);
            ACT(0, "layers.%d.mamba.zxbcdt", N * in * ae, &mb->zxbcdt);
            ACT(0, "layers.%d.mamba.xbc", N * (size_t)gt_mamba_conv(ms) * ae, &mb->xbc);
            ACT(0, "layers.%d.mamba.y", N * di * ae, &mb->y);
            ACT(0, "layers.%d.mamba.g", N * di * ae, &mb->g);
            ACT(0, "layers.%d.mamba.gate_rstd", N * (size_t)ms.G * sizeof(float), &mb->grstd);
            /* planned without a backend (a memory estimate): the device the config names */
            gt_backend_kind kind = m->b                                     ? m->b->kind
                                   : m->cfg.runtime.device == GT_DEVICE_CPU ? GT_BACKEND_CPU
                                                                            : GT_BACKEND_CUDA;
            size_t ssd = gt_mamba_ssd_state_floats(ms, kind) * sizeof(float);
            if (ssd) ACT(0, "layers.%d.mamba.ssd_state", ssd, &mb->ssd);
            if (N * di > sc_a) sc_a = N * di; /* out_proj's input gradient */
            if (N * in > sc_b) sc_b = N * in; /* in_proj's output gradient */
        }
    }
#undef ACT
    PLAN(&m->acts, "final_norm.ln", N * d * ae, &m->lnf);
    PLAN(&m->acts, "final_norm.rstd", N * sizeof(float), &m->rstdf);
    PLAN(&m->acts, "final_norm.dw_part", P * d * sizeof(float), &m->dw_partf);
    gt_model_scratch *sc = &m->sc;
    PLAN(&m->scratch, "branch", N * d * ae, &sc->y);
    PLAN(&m->scratch, "dln", N * d * ae, &sc->dln);
    if (sc_a) PLAN(&m->scratch, "wide_a", sc_a * ae, &sc->a);
    if (sc_b) PLAN(&m->scratch, "wide_b", sc_b * ae, &sc->bb);
    if (dm->E > 0) {
        PLAN(&m->scratch, "moe.rows", R * d * ae, &sc->r);
        PLAN(&m->scratch, "moe.logits", N * dm->E * ae, &sc->e);
        PLAN(&m->scratch, "moe.dtopk_w", N * dm->k * sizeof(float), &sc->dtopk_w);
    }
    if (dm->ms.H > 0) {
        gt_mamba_shape ms = dm->ms;
        PLAN(&m->scratch, "mamba.dy", N * (size_t)gt_mamba_inner(ms) * ae, &sc->mdy);
        PLAN(&m->scratch, "mamba.dxbc", N * (size_t)gt_mamba_conv(ms) * ae, &sc->mdxbc);
        PLAN(&m->scratch, "mamba.ssd_ws", gt_mamba_ws_floats(ms) * sizeof(float), &sc->mws);
    }
    PLAN(&m->scratch, "logits", N * dm->V * ae, &sc->logits);
    PLAN(&m->scratch, "losses", N * sizeof(float), &sc->losses);
    return gt_model_fp8_plan(m, err);
}

int gt_model_build(gt_model *m, const gt_config *cfg, size_t act_elem, gt_error *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->act_elem = act_elem;
    gt_arena_init(&m->params, "params");
    gt_arena_init(&m->grads, "grads");
    gt_arena_init(&m->acts, "activations");
    gt_arena_init(&m->scratch, "scratch");
    if (act_elem != 2 && act_elem != 4)
        return gt_error_set(err, GT_ERR_INVALID,
                            "activation element size %zu is not supported (2 = bf16, 4 = fp32)",
                            act_elem);
    int rc = build_layers(m, err);
    if (!rc) rc = check_dims(m, err);
    if (!rc) rc = gt_model_plan_recompute(m, err);
    if (!rc) plan_deferred_wgrads(m);
    if (!rc) rc = build_tensors(m, err);
    if (!rc) rc = plan_arenas(m, err);
    if (rc) return gt_error_wrap(err, "planning the model: ");
    gt_model_info *in = &m->info;
    in->num_layers = m->num_layers;
    in->tokens = m->dm.N;
    in->flops_per_token = flops_per_token(m);
    in->param_bytes = gt_arena_size(&m->params);
    in->grad_bytes = gt_arena_size(&m->grads);
    in->act_bytes = gt_arena_size(&m->acts);
    in->scratch_bytes = gt_arena_size(&m->scratch);
    return GT_OK;
}

void gt_model_release(gt_model *m) {
    gt_arena_release(&m->params);
    gt_arena_release(&m->grads);
    gt_arena_release(&m->acts);
    gt_arena_release(&m->scratch);
    gt_model_fp8_release(m);
    free(m->layers);
    free(m->res);
    free(m->tensors);
    free(m->rc_alias);
    m->rc_alias = NULL;
    m->n_rc_alias = 0;
    m->layers = NULL;
    m->res = NULL;
    m->tensors = NULL;
}

int gt_model_plan(const gt_config *cfg, size_t act_elem_bytes, gt_model_info *info, gt_error *err) {
    gt_model *m = malloc(sizeof *m);
    if (!m) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning the model");
    int rc = gt_model_build(m, cfg, act_elem_bytes, err);
    if (!rc) *info = m->info;
    gt_model_release(m);
    free(m);
    return rc;
}
