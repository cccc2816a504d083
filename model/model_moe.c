/* The MoE units, forward and backward. router: rmsnorm -> router logits -> softmax top-k
 * (+ load-balancing loss); preprocess: permutation by expert (dropless, or drop-and-pad at
 * a fixed capacity) and gather; experts: grouped gate_up / SwiGLU / down GEMMs over device
 * offsets, weighted combine, dropout and the residual add. Backward runs them in reverse;
 * sc.dln carries the gradient of the normalized input from preprocess to router. */
#include "model/model_internal.h"

/* The aux-loss coefficient seen by one micro-batch: scaled like its loss (1 / micro-batches)
 * so the accumulated gradient is that of the step's mean. */
static float aux_coeff(const gt_model *m) {
    return m->dm.aux_coeff * m->dscale;
}

void gt_moe_router_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_moe_block *e = &m->layers[layer].moe;
    b->ops->rmsnorm_fwd(b, s, e->ln, e->rstd, m->res[e->res_in], gt_model_param(m, e->norm_w),
                        dm->N, dm->d, dm->eps);
    b->ops->matmul_fwd(b, s, m->sc.e, e->ln, gt_model_param(m, e->router_w), NULL, NULL, dm->N,
                       dm->E, dm->d);
    b->ops->moe_router_fwd(b, s, e->probs, e->topk_idx, e->topk_w, e->counts, m->sc.e, dm->N, dm->E,
                           dm->k, dm->router);
    if (train && dm->aux_coeff > 0)
        b->ops->moe_aux_loss(b, s, st, e->probs, e->counts, dm->N, dm->E, dm->k, aux_coeff(m));
}

void gt_moe_router_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    (void)st;
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_moe_block *e = &m->layers[layer].moe;
    gt_moe_router_recompute(m, s, layer);
    b->ops->moe_router_bwd(b, s, m->sc.e, m->sc.dtopk_w, e->probs, e->topk_idx, e->topk_w,
                           e->counts, dm->N, dm->E, dm->k, aux_coeff(m), dm->router);
    b->ops->matmul_bwd_weight(b, s, gt_model_grad(m, e->router_w), NULL, m->sc.e, e->ln, dm->N,
                              dm->E, dm->d, m->grad_acc);
    /* sc.dln already holds the gradient through the experts (preprocess backward) */
    b->ops->matmul_bwd_data(b, s, m->sc.dln, m->sc.e, gt_model_param(m, e->router_w), dm->N, dm->E,
                            dm->d, 1);
    gt_model_norm_bwd(m, s, e->res_in, e->res_out, e->norm_w, e->dw_part, e->rstd);
}

void gt_moe_preprocess_fwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    (void)st;
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_moe_block *e = &m->layers[layer].moe;
    b->ops->moe_permute(b, s, e->slot_token, e->token_slot, e->offsets, e->topk_idx, dm->N, dm->E,
                        dm->k, dm->capacity);
    b->ops->moe_gather(b, s, e->xe, e->ln, e->slot_token, dm->R, dm->k, dm->d);
}

void gt_moe_preprocess_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    (void)st;
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_moe_block *e = &m->layers[layer].moe;
    b->ops->memset0(b, s, m->sc.dln, (size_t)dm->N * dm->d * m->act_elem);
    b->ops->moe_gather_bwd(b, s, m->sc.dln, m->sc.r, e->token_slot, dm->N, dm->k, dm->d);
}

void gt_moe_experts_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_moe_block *e = &m->layers[layer].moe;
    gt_moe_linear_fwd(m, s, layer, GT_MOE_LIN_GU, e->gue, e->xe, train, st);
    b->ops->swiglu_fwd(b, s, e->he, e->gue, dm->R, dm->fe);
    gt_moe_linear_fwd(m, s, layer, GT_MOE_LIN_DOWN, e->ye, e->he, train, st);
    b->ops->moe_combine_fwd(b, s, m->sc.y, e->ye, e->topk_w, e->token_slot, dm->N, dm->k, dm->d);
    gt_model_residual_out(m, s, m->res[e->res_out], m->res[e->res_in], m->sc.y, layer,
                          GT_SITE_MOE_OUT, train, st);
}

void gt_moe_experts_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_moe_block *e = &m->layers[layer].moe;
    gt_moe_experts_recompute(m, s, layer, st);
    const void *dy = gt_model_branch_grad(m, s, e->res_out, layer, GT_SITE_MOE_OUT, st);
    /* sc.r: gradient of the expert outputs, later of the expert inputs */
    b->ops->moe_combine_bwd(b, s, m->sc.r, m->sc.dtopk_w, dy, e->ye, e->topk_w, e->token_slot,
                            e->slot_token, dm->N, dm->R, dm->k, dm->d);
    gt_moe_linear_bwd(m, s, layer, GT_MOE_LIN_DOWN, m->sc.a, m->sc.r, e->he, st);
    b->ops->swiglu_bwd(b, s, m->sc.bb, m->sc.a, e->gue, dm->R, dm->fe);
    gt_moe_linear_bwd(m, s, layer, GT_MOE_LIN_GU, m->sc.r, m->sc.bb, e->xe, st);
}
