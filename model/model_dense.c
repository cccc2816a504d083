/* The dense units, forward and backward: attention (rmsnorm, qkv, rope, causal GQA attention,
 * output projection, dropout, residual) and the SwiGLU MLP. Each reads its input residual,
 * writes the next one and saves what its backward needs in the activations arena. Backward
 * reads the gradient of the output residual from res[res_out] and writes that of the input
 * residual over res[res_in]; the weight gradients marked deferred wait for the backward's
 * end, where flush_wgrads (model_run.c) batches them across layers. */
#include "model/model_internal.h"

/* y = dropout(branch); out = x + y. Dropout only in training and when p > 0. */
void gt_model_residual_out(gt_model *m, gt_stream *s, void *out, const void *x, void *y, int layer,
                           int site, int train, gt_step_state *st) {
    gt_backend *b = m->b;
    size_t n = (size_t)m->dm.N * m->dm.d;
    if (train && m->dm.p_hidden > 0)
        b->ops->dropout_fwd(b, s, y, y, n, m->dm.p_hidden, gt_model_site(m, layer, site), st);
    b->ops->add(b, s, out, x, y, n);
}

/* gt_model_proj_residual with inp's amax taken by its producer (gt_linear_fwd_amax; or NULL) */
static void proj_residual(gt_model *m, gt_stream *s, void *out, const void *x, const void *inp,
                          const uint32_t *inp_amax, int w, int bias, int layer, int site, int train,
                          gt_step_state *st) {
    const gt_model_dims *dm = &m->dm;
    int lin = site == GT_SITE_ATTN_OUT ? GT_LIN_O : GT_LIN_DOWN;
    if (!(train && dm->p_hidden > 0)) {
        gt_linear_fwd_amax(m, s, layer, lin, out, inp, inp_amax, w, bias, x, train, st);
        return;
    }
    gt_linear_fwd_amax(m, s, layer, lin, m->sc.y, inp, inp_amax, w, bias, NULL, train, st);
    gt_model_residual_out(m, s, out, x, m->sc.y, layer, site, train, st);
}

void gt_model_proj_residual(gt_model *m, gt_stream *s, void *out, const void *x, const void *inp,
                            int w, int bias, int K, int layer, int site, int train,
                            gt_step_state *st) {
    (void)K; /* the weight's own shape: [d, K] */
    proj_residual(m, s, out, x, inp, NULL, w, bias, layer, site, train, st);
}

const void *gt_model_branch_grad(gt_model *m, gt_stream *s, int res_out, int layer, int site,
                                 gt_step_state *st) {
    gt_backend *b = m->b;
    if (m->dm.p_hidden <= 0) return m->res[res_out];
    b->ops->dropout_bwd(b, s, m->sc.y, m->res[res_out], (size_t)m->dm.N * m->dm.d, m->dm.p_hidden,
                        gt_model_site(m, layer, site), st);
    return m->sc.y;
}

void gt_model_norm_bwd(gt_model *m, gt_stream *s, int res_in, int res_out, int norm_w,
                       float *dw_part, const float *rstd) {
    gt_backend *b = m->b;
    const void *din = res_out >= 0 ? m->res[res_out] : NULL;
    /* res_in's gradient is the output gradient of the projection that added into it: its
     * amax for that projection's cast, where the cast needs one */
    uint32_t *slot = gt_res_grad_amax_slot(m, s, res_in, 1);
    if (slot)
        b->ops->rmsnorm_bwd_part_amax(b, s, m->res[res_in], din, dw_part, m->sc.dln, m->res[res_in],
                                      gt_model_param(m, norm_w), rstd, m->dm.N, m->dm.d, slot);
    else
        b->ops->rmsnorm_bwd_part(b, s, m->res[res_in], din, dw_part, m->sc.dln, m->res[res_in],
                                 gt_model_param(m, norm_w), rstd, m->dm.N, m->dm.d);
}

void gt_model_rope_fwd(gt_model *m, gt_stream *s, void *qkv) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    if (dm->rope_factor > 0)
        b->ops->rope_scaled_fwd(b, s, qkv, dm->B, dm->T, dm->H, dm->KV, dm->hd, dm->theta,
                                dm->rope_factor);
    else
        b->ops->rope_fwd(b, s, qkv, dm->B, dm->T, dm->H, dm->KV, dm->hd, dm->theta);
}

void gt_attn_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_attn_block *a = &m->layers[layer].attn;
    const void *x = m->res[a->res_in];
    float p = train ? dm->p_attn : 0.0f;
    /* the norm takes ln's amax for the qkv cast where that cast needs one */
    const uint32_t *ln_amax =
        gt_linear_norm_fwd(m, s, layer, GT_LIN_QKV, a->ln, a->rstd, x, a->norm_w);
    gt_linear_fwd_amax(m, s, layer, GT_LIN_QKV, a->qkv, a->ln, ln_amax, a->qkv_w, a->qkv_b, NULL,
                       train, st);
    gt_model_qk_norm_fwd(m, s, layer);
    gt_model_rope_fwd(m, s, a->qkv);
    b->ops->attention_fwd(b, s, a->att, a->lse, a->qkv, dm->B, dm->T, dm->H, dm->KV, dm->hd, p,
                          gt_model_site(m, layer, GT_SITE_ATTN_PROBS), st);
    gt_model_proj_residual(m, s, m->res[a->res_out], x, a->att, a->o_w, a->o_b, dm->H * dm->hd,
                           layer, GT_SITE_ATTN_OUT, train, st);
}

void gt_attn_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_attn_block *a = &m->layers[layer].attn;
    gt_attn_recompute(m, s, layer, st);
    const void *dy = gt_model_branch_grad(m, s, a->res_out, layer, GT_SITE_ATTN_OUT, st);
    const uint32_t *dy_amax = gt_res_grad_amax_slot(m, s, a->res_out, 0);
    gt_linear_bwd_amax(m, s, layer, GT_LIN_O, m->sc.a, dy, dy_amax, a->att, a->o_w, a->o_b,
                       !a->defer_o, st);
    void *dqkv = gt_attn_dqkv(m, layer);
    b->ops->attention_bwd(b, s, dqkv, m->sc.a, a->qkv, a->att, a->lse, dm->B, dm->T, dm->H, dm->KV,
                          dm->hd, dm->p_attn, gt_model_site(m, layer, GT_SITE_ATTN_PROBS), st);
    /* with dqkv's amax for the qkv cast where that cast needs one (no qk norm after) */
    const uint32_t *dqkv_amax = gt_linear_rope_bwd(m, s, layer, dqkv);
    gt_model_qk_norm_bwd(m, s, layer, dqkv);
    gt_linear_bwd_amax(m, s, layer, GT_LIN_QKV, m->sc.dln, dqkv, dqkv_amax, a->ln, a->qkv_w,
                       a->qkv_b, !a->defer_qkv, st);
    /* the norm weight's gradient is summed from a->dw_part at the end of the backward */
    gt_model_norm_bwd(m, s, a->res_in, a->res_out, a->norm_w, a->dw_part, a->rstd);
}

void gt_mlp_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st) {
    gt_mlp_block *p = &m->layers[layer].mlp;
    const void *x = m->res[p->res_in];
    /* the norm and SwiGLU take the amaxes of the gate/up and down casts' inputs where those
     * casts need them */
    const uint32_t *ln_amax =
        gt_linear_norm_fwd(m, s, layer, GT_LIN_GU, p->ln, p->rstd, x, p->norm_w);
    gt_linear_fwd_amax(m, s, layer, GT_LIN_GU, p->gu, p->ln, ln_amax, p->gu_w, p->gu_b, NULL, train,
                       st);
    const uint32_t *h_amax = gt_linear_swiglu_fwd(m, s, layer, GT_LIN_DOWN, p->h, p->gu);
    proj_residual(m, s, m->res[p->res_out], x, p->h, h_amax, p->down_w, p->down_b, layer,
                  GT_SITE_MLP_OUT, train, st);
}

void gt_mlp_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st) {
    gt_mlp_block *p = &m->layers[layer].mlp;
    gt_mlp_recompute(m, s, layer, st);
    const void *dy = gt_model_branch_grad(m, s, p->res_out, layer, GT_SITE_MLP_OUT, st);
    const uint32_t *dy_amax = gt_res_grad_amax_slot(m, s, p->res_out, 0);
    gt_linear_bwd_amax(m, s, layer, GT_LIN_DOWN, m->sc.a, dy, dy_amax, p->h, p->down_w, p->down_b,
                       !p->defer_down, st);
    /* the gate/up gradient over the gate/up activations, which only this reads (with its amax
     * where gate/up's cast needs one) */
    const uint32_t *dgu_amax = gt_linear_swiglu_bwd(m, s, layer, GT_LIN_GU, p->gu, m->sc.a, p->gu);
    gt_linear_bwd_amax(m, s, layer, GT_LIN_GU, m->sc.dln, p->gu, dgu_amax, p->ln, p->gu_w, p->gu_b,
                       !p->defer_gu, st);
    gt_model_norm_bwd(m, s, p->res_in, p->res_out, p->norm_w, p->dw_part, p->rstd);
}
