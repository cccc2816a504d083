/* The forward pass to the logits, for checks against other implementations (the Hugging Face
 * fixture) and sampling: no dropout, no loss, the logits left in the scratch buffer. */
#include "model/model_internal.h"

static void unit_fwd(gt_model *m, gt_stream *s, int layer, int unit, gt_step_state *st) {
    switch (m->layers[layer].kinds[unit]) {
    case GT_UNIT_ATTN:
        gt_attn_fwd(m, s, layer, 0, st);
        break;
    case GT_UNIT_MLP:
        gt_mlp_fwd(m, s, layer, 0, st);
        break;
    case GT_UNIT_MOE_ROUTER:
        gt_moe_router_fwd(m, s, layer, 0, st);
        break;
    case GT_UNIT_MOE_PREPROCESS:
        gt_moe_preprocess_fwd(m, s, layer, st);
        break;
    case GT_UNIT_MOE:
        gt_moe_experts_fwd(m, s, layer, 0, st);
        break;
    default:
        gt_backend_fail(m->b, GT_ERR_INVALID, "layer %d unit %d has an unknown kind", layer, unit);
    }
}

const void *gt_model_forward_logits(gt_model *m, gt_stream *s, const int32_t *tokens,
                                    gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    b->ops->embedding_fwd(b, s, m->res[0], tokens, gt_model_param(m, m->wte), dm->N, dm->d);
    for (int l = 0; l < m->num_layers; l++)
        for (int u = 0; u < m->layers[l].n_units; u++)
            unit_fwd(m, s, l, u, st);
    b->ops->rmsnorm_fwd(b, s, m->lnf, m->rstdf, m->res[m->n_res - 1], gt_model_param(m, m->final_w),
                        dm->N, dm->d, dm->eps);
    b->ops->matmul_fwd(b, s, m->sc.logits, m->lnf, gt_model_param(m, m->lm_w), NULL, NULL, dm->N,
                       dm->V, dm->d);
    return m->sc.logits;
}
