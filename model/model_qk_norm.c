/* model.qk_layernorm in the attention block: Qwen3's per-head RMSNorm of q and k (weights
 * q_layernorm, k_layernorm of [hd] a layer, the model's epsilon), between the QKV GEMM and
 * rope. The forward keeps the raw q and k and each head's 1/rms (recomputed with qkv under full
 * recompute); the backward leaves the weight gradients as partial rows, summed with the other
 * norms' in norm_grads (model_run.c). A no-op without the key. */
#include "model/model_internal.h"

void gt_model_qk_norm_fwd(gt_model *m, gt_stream *s, int layer) {
    const gt_model_dims *dm = &m->dm;
    if (!dm->qk_norm) return;
    gt_backend *b = m->b;
    gt_attn_block *a = &m->layers[layer].attn;
    b->ops->qk_norm_fwd(b, s, a->qkv, a->qk_raw, a->qk_rstd, gt_model_param(m, a->q_norm_w),
                        gt_model_param(m, a->k_norm_w), dm->N, dm->H, dm->KV, dm->hd, dm->eps);
}

void gt_model_qk_norm_bwd(gt_model *m, gt_stream *s, int layer, void *dqkv) {
    const gt_model_dims *dm = &m->dm;
    if (!dm->qk_norm) return;
    gt_backend *b = m->b;
    gt_attn_block *a = &m->layers[layer].attn;
    size_t half = (size_t)gt_rmsnorm_parts_bound(dm->N) * (size_t)dm->hd;
    b->ops->qk_norm_bwd_part(b, s, dqkv, a->qk_part, a->qk_part + half, a->qk_raw, a->qk_rstd,
                             gt_model_param(m, a->q_norm_w), gt_model_param(m, a->k_norm_w), dm->N,
                             dm->H, dm->KV, dm->hd);
}
