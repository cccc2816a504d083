/* Activation recomputation (model.recompute_granularity, Megatron's semantics): which blocks of
 * which layers keep only their inputs, the shared buffers their activations then live in, and
 * the recomputed forwards that each block's backward runs before it reads them. A recomputed
 * linear layer goes through the fp8 helper as its forward did, with record 0: under fp8 it
 * casts with the step's scales (delayed scaling's are fixed until the step's end; current and
 * blockwise scales come from the same input bits again), so it rebuilds the forward's output
 * exactly, and it adds nothing to the step's amaxes, which the forward already recorded. */
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

#define RC_ATTN (GT_RC_ATTN_NORM | GT_RC_QKV | GT_RC_CORE_ATTN)
#define RC_FULL (RC_ATTN | GT_RC_MLP_NORM | GT_RC_MLP | GT_RC_MOE_NORM | GT_RC_MOE | GT_RC_MOE_ACT)

/* A module of model.recompute_modules the model must have, by the layers it acts on. */
static int refuse_missing(const gt_model *m, uint32_t bit, const char *module, const char *what,
                          int have, gt_error *err) {
    if (!(m->cfg.model.recompute_modules & bit) || have) return GT_OK;
    return gt_error_set(err, GT_ERR_INVALID,
                        "model.recompute_modules has %s, but this model has no %s; drop %s from "
                        "model.recompute_modules",
                        module, what, module);
}

static int selective_bits(gt_model *m, gt_error *err) {
    uint32_t mods = m->cfg.model.recompute_modules;
    int attn = 0, mlp = 0, moe = 0;
    for (int l = 0; l < m->num_layers; l++) {
        attn |= m->layers[l].has_attn;
        mlp |= m->layers[l].has_mlp;
        moe |= m->layers[l].has_moe;
    }
    int rc = refuse_missing(m, GT_RECOMPUTE_CORE_ATTN, "core_attn", "attention layers", attn, err);
    if (!rc) rc = refuse_missing(m, GT_RECOMPUTE_MLP, "mlp", "dense MLP layers", mlp, err);
    if (!rc) rc = refuse_missing(m, GT_RECOMPUTE_MOE, "moe", "MoE layers", moe, err);
    if (!rc) rc = refuse_missing(m, GT_RECOMPUTE_MOE_ACT, "moe_act", "MoE layers", moe, err);
    if (!rc)
        rc = refuse_missing(m, GT_RECOMPUTE_SHARED_EXPERTS, "shared_experts",
                            "shared experts (graphtrain's MoE has none)", 0, err);
    if (rc) return rc;
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        unsigned b = 0;
        if (mods & GT_RECOMPUTE_LAYERNORM) b |= GT_RC_ATTN_NORM | GT_RC_MLP_NORM | GT_RC_MOE_NORM;
        if (mods & GT_RECOMPUTE_CORE_ATTN) b |= GT_RC_CORE_ATTN;
        if (mods & GT_RECOMPUTE_MLP) b |= GT_RC_MLP;
        if (mods & GT_RECOMPUTE_MOE) b |= GT_RC_MOE;
        if (mods & GT_RECOMPUTE_MOE_ACT) b |= GT_RC_MOE_ACT;
        if (!L->has_attn) b &= ~(unsigned)RC_ATTN;
        if (!L->has_mlp) b &= ~(unsigned)(GT_RC_MLP_NORM | GT_RC_MLP);
        if (!L->has_moe) b &= ~(unsigned)(GT_RC_MOE_NORM | GT_RC_MOE | GT_RC_MOE_ACT);
        L->rc = b;
    }
    return GT_OK;
}

/* Full: uniform recomputes every layer (Megatron's groups of recompute_num_layers keep only
 * the group's input; here every residual buffer stays anyway, as it carries the residual
 * gradient in backward, so each layer is recomputed alone, just before its backward);
 * block recomputes the first recompute_num_layers layers and saves the rest. */
static int full_bits(gt_model *m, gt_error *err) {
    const gt_model_config *mc = &m->cfg.model;
    if (mc->recompute_method == GT_RECOMPUTE_METHOD_NONE)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.recompute_granularity=full needs model.recompute_method "
                            "uniform or block; set one");
    if (mc->recompute_num_layers < 1 || mc->recompute_num_layers > m->num_layers)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.recompute_num_layers is %d; with recompute_granularity=full "
                            "set it between 1 and model.num_layers (%d)",
                            mc->recompute_num_layers, m->num_layers);
    int n = mc->recompute_method == GT_RECOMPUTE_METHOD_BLOCK ? mc->recompute_num_layers
                                                              : m->num_layers;
    for (int l = 0; l < n; l++) {
        gt_layer *L = &m->layers[l];
        L->rc = RC_FULL;
        if (L->has_attn && (L->has_mlp || L->has_moe)) L->rc |= GT_RC_MID_RESIDUAL;
    }
    return GT_OK;
}

int gt_model_plan_recompute(gt_model *m, gt_error *err) {
    switch (m->cfg.model.recompute_granularity) {
    case GT_RECOMPUTE_SELECTIVE:
        return selective_bits(m, err);
    case GT_RECOMPUTE_FULL:
        return full_bits(m, err);
    default:
        return GT_OK;
    }
}

int gt_model_plan_act(gt_model *m, int layer, int shared, const char *name, size_t bytes,
                      void **ptr, gt_error *err) {
    char nm[GT_ARENA_NAME_MAX];
    if (!shared) {
        // cppcheck-suppress wrongPrintfScanfArgNum ; the names are "layers.%d.<block>.<tensor>"
        snprintf(nm, sizeof nm, name, layer);
        return gt_arena_add(&m->acts, nm, bytes, ptr, err);
    }
    /* "layers.%d.attn.qkv" -> "recompute.attn.qkv" */
    const char *tail = strstr(name, "%d");
    snprintf(nm, sizeof nm, "recompute%s", tail ? tail + 2 : name);
    for (int i = 0; i < m->acts.count; i++) {
        const gt_arena_entry *e = &m->acts.entries[i];
        if (strcmp(e->name, nm)) continue;
        gt_rc_alias *a = realloc(m->rc_alias, (size_t)(m->n_rc_alias + 1) * sizeof *a);
        if (!a) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning recompute");
        m->rc_alias = a;
        a[m->n_rc_alias++] = (gt_rc_alias){ptr, e->bind};
        return GT_OK;
    }
    return gt_arena_add(&m->acts, nm, bytes, ptr, err);
}

void gt_model_bind_recompute(gt_model *m) {
    for (int i = 0; i < m->n_rc_alias; i++)
        *m->rc_alias[i].dst = *m->rc_alias[i].src;
}

void gt_attn_recompute(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    unsigned rc = m->layers[layer].rc;
    gt_attn_block *a = &m->layers[layer].attn;
    if (rc & GT_RC_MID_RESIDUAL) return; /* the layer's backward began with this forward */
    const uint32_t *ln_amax = NULL;      /* the norm takes it for a qkv cast that follows */
    if ((rc & GT_RC_ATTN_NORM) && (rc & GT_RC_QKV))
        ln_amax = gt_linear_norm_fwd(m, s, layer, GT_LIN_QKV, a->ln, a->rstd, m->res[a->res_in],
                                     a->norm_w);
    else if (rc & GT_RC_ATTN_NORM)
        b->ops->rmsnorm_fwd(b, s, a->ln, a->rstd, m->res[a->res_in], gt_model_param(m, a->norm_w),
                            dm->N, dm->d, dm->eps);
    if (rc & GT_RC_QKV) {
        gt_linear_fwd_amax(m, s, layer, GT_LIN_QKV, a->qkv, a->ln, ln_amax, a->qkv_w, a->qkv_b,
                           NULL, 0, st);
        gt_model_qk_norm_fwd(m, s, layer);
        gt_model_rope_fwd(m, s, a->qkv);
    }
    /* the forward's dropout site and the step state's counters: the same keep mask */
    if (rc & GT_RC_CORE_ATTN)
        b->ops->attention_fwd(b, s, a->att, a->lse, a->qkv, dm->B, dm->T, dm->H, dm->KV, dm->hd,
                              dm->p_attn, gt_model_site(m, layer, GT_SITE_ATTN_PROBS), st);
}

/* The attention's whole forward (residual output included) where the layer saved no residual
 * between its blocks: the input of the block after it. It runs as a training forward (train 1:
 * the same dropout masks), so its fp8 casts record their amaxes a second time; the step's amax
 * is a max, which the same values leave unchanged, and the history rolls once, at the step's
 * end. */
static void mid_residual(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    if (m->layers[layer].rc & GT_RC_MID_RESIDUAL) gt_attn_fwd(m, s, layer, 1, st);
}

void gt_mlp_recompute(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    unsigned rc = m->layers[layer].rc;
    gt_mlp_block *p = &m->layers[layer].mlp;
    mid_residual(m, s, layer, st);
    const uint32_t *ln_amax = NULL; /* the norm takes it for a gate/up cast that follows */
    if ((rc & GT_RC_MLP_NORM) && (rc & GT_RC_MLP))
        ln_amax = gt_linear_norm_fwd(m, s, layer, GT_LIN_GU, p->ln, p->rstd, m->res[p->res_in],
                                     p->norm_w);
    else if (rc & GT_RC_MLP_NORM)
        b->ops->rmsnorm_fwd(b, s, p->ln, p->rstd, m->res[p->res_in], gt_model_param(m, p->norm_w),
                            dm->N, dm->d, dm->eps);
    if (rc & GT_RC_MLP) {
        gt_linear_fwd_amax(m, s, layer, GT_LIN_GU, p->gu, p->ln, ln_amax, p->gu_w, p->gu_b, NULL, 0,
                           st);
        b->ops->swiglu_fwd(b, s, p->h, p->gu, dm->N, dm->f);
    }
}

/* The whole MoE block (norm when it is recomputed too, router without the aux loss, which
 * the forward already added, permutation, experts up to their outputs), or only the experts'
 * activation. Runs first in the experts' backward, the first MoE unit that backward reaches;
 * the preprocess and router backwards after it read what it left. */
void gt_moe_experts_recompute(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    unsigned rc = m->layers[layer].rc;
    gt_moe_block *e = &m->layers[layer].moe;
    mid_residual(m, s, layer, st);
    if (rc & GT_RC_MOE) {
        if (rc & GT_RC_MOE_NORM)
            b->ops->rmsnorm_fwd(b, s, e->ln, e->rstd, m->res[e->res_in],
                                gt_model_param(m, e->norm_w), dm->N, dm->d, dm->eps);
        b->ops->matmul_fwd(b, s, m->sc.e, e->ln, gt_model_param(m, e->router_w), NULL, NULL, dm->N,
                           dm->E, dm->d);
        b->ops->moe_router_fwd(b, s, e->probs, e->topk_idx, e->topk_w, e->counts, m->sc.e, dm->N,
                               dm->E, dm->k, dm->router);
        b->ops->moe_permute(b, s, e->slot_token, e->token_slot, e->offsets, e->topk_idx, dm->N,
                            dm->E, dm->k, dm->capacity);
        b->ops->moe_gather(b, s, e->xe, e->ln, e->slot_token, dm->R, dm->k, dm->d);
        gt_moe_linear_fwd(m, s, layer, GT_MOE_LIN_GU, e->gue, e->xe, 0, st);
    }
    if (rc & (GT_RC_MOE | GT_RC_MOE_ACT)) b->ops->swiglu_fwd(b, s, e->he, e->gue, dm->R, dm->fe);
    if (rc & GT_RC_MOE) gt_moe_linear_fwd(m, s, layer, GT_MOE_LIN_DOWN, e->ye, e->he, 0, st);
}

/* The router's norm alone (layernorm without moe); with moe the experts' backward did it. */
void gt_moe_router_recompute(gt_model *m, gt_stream *s, int layer) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    unsigned rc = m->layers[layer].rc;
    gt_moe_block *e = &m->layers[layer].moe;
    if ((rc & GT_RC_MOE_NORM) && !(rc & GT_RC_MOE))
        b->ops->rmsnorm_fwd(b, s, e->ln, e->rstd, m->res[e->res_in], gt_model_param(m, e->norm_w),
                            dm->N, dm->d, dm->eps);
}
