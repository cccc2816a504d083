/* One micro-batch through the model: embedding, the units (eagerly or through graphs/ via
 * gt_unit_exec), final norm, output head and cross-entropy, then the same backwards. The
 * parts outside the units belong to the full-iteration scope only. */
#include "model/model_internal.h"

static void unit_fwd_bwd(gt_model *m, gt_stream *s, int layer, int unit, int backward, int train,
                         gt_step_state *st) {
    switch (m->layers[layer].kinds[unit]) {
    case GT_UNIT_ATTN:
        if (backward)
            gt_attn_bwd(m, s, layer, st);
        else
            gt_attn_fwd(m, s, layer, train, st);
        break;
    case GT_UNIT_MLP:
        if (backward)
            gt_mlp_bwd(m, s, layer, st);
        else
            gt_mlp_fwd(m, s, layer, train, st);
        break;
    case GT_UNIT_MOE_ROUTER:
        if (backward)
            gt_moe_router_bwd(m, s, layer, st);
        else
            gt_moe_router_fwd(m, s, layer, train, st);
        break;
    case GT_UNIT_MOE_PREPROCESS:
        if (backward)
            gt_moe_preprocess_bwd(m, s, layer, st);
        else
            gt_moe_preprocess_fwd(m, s, layer, st);
        break;
    case GT_UNIT_MOE:
        if (backward)
            gt_moe_experts_bwd(m, s, layer, st);
        else
            gt_moe_experts_fwd(m, s, layer, train, st);
        break;
    case GT_UNIT_MAMBA:
        if (backward)
            gt_mamba_bwd(m, s, layer, st);
        else
            gt_mamba_fwd(m, s, layer, train, st);
        break;
    default:
        gt_backend_fail(m->b, GT_ERR_INVALID, "layer %d unit %d has an unknown kind", layer, unit);
    }
}

void gt_model_unit_run(gt_model *m, gt_stream *s, int layer, int unit, int backward,
                       gt_step_state *st) {
    if (layer < 0 || layer >= m->num_layers || unit < 0 || unit >= m->layers[layer].n_units) {
        gt_backend_fail(m->b, GT_ERR_INVALID,
                        "gt_model_unit_run: layer %d unit %d does not exist (%d layers)", layer,
                        unit, m->num_layers);
        return;
    }
    unit_fwd_bwd(m, s, layer, unit, backward, 1, st);
}

static void run_unit(gt_model *m, gt_stream *s, int layer, int unit, int backward,
                     gt_step_state *st, const gt_unit_exec *exec) {
    if (exec && exec->run)
        exec->run(exec->ctx, m, s, layer, unit, backward, st);
    else
        unit_fwd_bwd(m, s, layer, unit, backward, 1, st);
}

/* Final norm, logits, per-token losses; the logits buffer then holds the gradient of the
 * loss scaled by `scale` (the weight of this micro-batch's mean). */
static void head_fwd(gt_model *m, gt_stream *s, const int32_t *targets, float scale,
                     gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    float per_token = scale / (float)dm->N;
    b->ops->rmsnorm_fwd(b, s, m->lnf, m->rstdf, m->res[m->n_res - 1], gt_model_param(m, m->final_w),
                        dm->N, dm->d, dm->eps);
    b->ops->matmul_fwd(b, s, m->sc.logits, m->lnf, gt_model_param(m, m->lm_w), NULL, NULL, dm->N,
                       dm->V, dm->d);
    b->ops->cross_entropy(b, s, m->sc.losses, m->sc.logits, m->sc.logits, targets, dm->N, dm->V,
                          per_token);
    b->ops->loss_accumulate(b, s, st, m->sc.losses, dm->N, per_token);
}

/* Starts the residual gradient: that of the last residual buffer, through the final norm and
 * the head, written over the buffer. */
static void head_bwd(gt_model *m, gt_stream *s) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    b->ops->matmul_bwd_weight(b, s, gt_model_grad(m, m->lm_w), NULL, m->sc.logits, m->lnf, dm->N,
                              dm->V, dm->d, m->grad_acc);
    b->ops->matmul_bwd_data(b, s, m->sc.dln, m->sc.logits, gt_model_param(m, m->lm_w), dm->N, dm->V,
                            dm->d, 0);
    gt_model_norm_bwd(m, s, m->n_res - 1, -1, m->final_w, m->dw_partf, m->rstdf);
}

/* The operands of a weight gradient a unit left for later (gt_attn_block.defer_*). */
enum { WGRAD_QKV, WGRAD_O, WGRAD_GU, WGRAD_DOWN, WGRAD_KINDS };
typedef struct wgrad_job {
    float *dw;
    const char *dout, *a;
    int N, K; /* dw[N,K] (+)= dout[M,N]^T @ a[M,K] */
} wgrad_job;

static int deferred_wgrad(const gt_model *m, int l, int kind, wgrad_job *j) {
    const gt_layer *L = &m->layers[l];
    const gt_model_dims *dm = &m->dm;
    const gt_attn_block *a = &L->attn;
    const gt_mlp_block *p = &L->mlp;
    switch (kind) {
    case WGRAD_QKV:
        if (!L->has_attn || !a->defer_qkv) return 0;
        *j = (wgrad_job){gt_model_grad(m, a->qkv_w), gt_attn_dqkv(m, l), a->ln, dm->qkv, dm->d};
        return 1;
    case WGRAD_O:
        if (!L->has_attn || !a->defer_o) return 0;
        *j = (wgrad_job){gt_model_grad(m, a->o_w), m->res[a->res_out], a->att, dm->d,
                         dm->H * dm->hd};
        return 1;
    case WGRAD_GU:
        if (!L->has_mlp || !p->defer_gu) return 0;
        *j = (wgrad_job){gt_model_grad(m, p->gu_w), p->gu, p->ln, 2 * dm->f, dm->d};
        return 1;
    default:
        if (!L->has_mlp || !p->defer_down) return 0;
        *j = (wgrad_job){gt_model_grad(m, p->down_w), m->res[p->res_out], p->h, dm->d, dm->f};
        return 1;
    }
}

/* Whether job j is job 0 moved on by n strides (strides > 0, in elements, set by n == 1). */
static int continues(const wgrad_job *j0, const wgrad_job *j, int n, size_t ae, int64_t st[3]) {
    int64_t dw = j->dw - j0->dw, dd = j->dout - j0->dout, da = j->a - j0->a;
    if (dd % (int64_t)ae || da % (int64_t)ae) return 0;
    dd /= (int64_t)ae, da /= (int64_t)ae;
    if (n == 1) {
        st[0] = dw, st[1] = dd, st[2] = da;
        return dw > 0 && dd > 0 && da > 0;
    }
    return dw == n * st[0] && dd == n * st[1] && da == n * st[2];
}

/* The deferred weight gradients, per weight one batched GEMM over each run of consecutive
 * layers whose operands lie equally far apart (all of them in a model of equal layers). */
static void flush_wgrads(gt_model *m, gt_stream *s) {
    gt_backend *b = m->b;
    for (int kind = 0; kind < WGRAD_KINDS; kind++)
        for (int l = 0; l < m->num_layers;) {
            wgrad_job j0, j;
            if (!deferred_wgrad(m, l, kind, &j0)) {
                l++;
                continue;
            }
            int64_t st[3] = {0, 0, 0};
            int n = 1;
            while (l + n < m->num_layers && deferred_wgrad(m, l + n, kind, &j) &&
                   continues(&j0, &j, n, m->act_elem, st))
                n++;
            b->ops->matmul_bwd_weight_batched(b, s, j0.dw, st[0], j0.dout, st[1], j0.a, st[2],
                                              m->dm.N, j0.N, j0.K, n, m->grad_acc);
            l += n;
        }
}

/* Every norm weight's gradient from the partial rows its backward left: one colsum_many
 * launch for all norms (as many as GT_COLSUM_MAX_JOBS a launch) instead of one column-sum
 * kernel after each norm. Runs after the units, so it also sums what unit graphs left. */
static void norm_grads(gt_model *m, gt_stream *s) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_colsum_job jobs[GT_COLSUM_MAX_JOBS];
    int n = 0, parts = gt_rmsnorm_parts(dm->N);
    for (int l = 0; l <= m->num_layers; l++) {
        const gt_layer *L = l < m->num_layers ? &m->layers[l] : NULL;
        int w[5], nw = 0, cols[5] = {dm->d, dm->d, dm->d, dm->d, dm->d};
        const float *part[5];
        if (!L) {
            w[nw] = m->final_w, part[nw++] = m->dw_partf;
        } else {
            if (L->has_attn) w[nw] = L->attn.norm_w, part[nw++] = L->attn.dw_part;
            if (L->has_mlp) w[nw] = L->mlp.norm_w, part[nw++] = L->mlp.dw_part;
            if (L->has_moe) w[nw] = L->moe.norm_w, part[nw++] = L->moe.dw_part;
            if (L->has_mamba) w[nw] = L->mamba.norm_w, part[nw++] = L->mamba.dw_part;
            if (L->has_attn && dm->qk_norm) { /* q then k partials, hd wide */
                size_t half = (size_t)gt_rmsnorm_parts_bound(dm->N) * (size_t)dm->hd;
                cols[nw] = dm->hd, w[nw] = L->attn.q_norm_w, part[nw++] = L->attn.qk_part;
                cols[nw] = dm->hd, w[nw] = L->attn.k_norm_w, part[nw++] = L->attn.qk_part + half;
            }
        }
        for (int i = 0; i < nw; i++) {
            if (n == GT_COLSUM_MAX_JOBS) {
                b->ops->colsum_many(b, s, jobs, n);
                n = 0;
            }
            jobs[n++] =
                (gt_colsum_job){gt_model_grad(m, w[i]), part[i], parts, cols[i], m->grad_acc};
        }
    }
    b->ops->colsum_many(b, s, jobs, n);
}

void gt_model_forward_backward(gt_model *m, gt_stream *s, const int32_t *tokens,
                               const int32_t *targets, float dscale, int accumulate,
                               gt_step_state *st, const gt_unit_exec *exec) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    /* units read them (aux-loss weight, gradient overwrite); a unit graph keeps the values of
     * its capture, so the trainer keeps them fixed per micro-batch index over a run */
    m->dscale = dscale;
    m->grad_acc = accumulate != 0;
    b->ops->embedding_fwd(b, s, m->res[0], tokens, gt_model_param(m, m->wte), dm->N, dm->d);
    for (int l = 0; l < m->num_layers; l++)
        for (int u = 0; u < m->layers[l].n_units; u++)
            run_unit(m, s, l, u, 0, st, exec);
    head_fwd(m, s, targets, dscale, st);
    gt_model_hook_tensor(m, s, 0, m->lm_w); /* the embedding's when tied */
    head_bwd(m, s);
    if (!dm->tied) gt_model_hook_tensor(m, s, 1, m->lm_w);
    for (int l = m->num_layers - 1; l >= 0; l--) {
        gt_model_hook_layer_written(m, s, l);
        for (int u = m->layers[l].n_units - 1; u >= 0; u--)
            run_unit(m, s, l, u, 1, st, exec);
        gt_model_hook_layer_final(m, s, l, 0);
    }
    flush_wgrads(m, s);
    for (int l = m->num_layers - 1; l >= 0; l--)
        gt_model_hook_layer_final(m, s, l, 1);
    gt_model_hook_tensor(m, s, 0, m->final_w);
    norm_grads(m, s);
    /* the vectors: norm weights, biases and Mamba's, written by the units or the sums above */
    gt_model_hook_range(m, s, 1, m->info.n_decay, m->info.n_params - m->info.n_decay);
    gt_model_hook_tensor(m, s, 0, m->wte);
    /* the embedding gradient is a scatter-add: overwriting it zeroes it first, all of it or
     * only the rows the marks say may be nonzero; tied, the head has already written it */
    b->ops->embedding_bwd(b, s, gt_model_grad(m, m->wte), m->emb_track ? m->emb_dirty : NULL,
                          m->res[0], tokens, dm->N, dm->V, dm->d, !accumulate && !dm->tied);
    gt_model_hook_tensor(m, s, 1, m->wte);
}

void gt_model_track_embedding_rows(gt_model *m) {
    /* tied, the head's gradient reaches every row: no row is known to be zero */
    m->emb_track = m->emb_dirty != NULL && !m->dm.tied;
}

gt_grad_rows gt_model_grad_rows(const gt_model *m) {
    if (!m->emb_track) return GT_NO_GRAD_ROWS;
    const gt_model_tensor_desc *t = &m->tensors[m->wte];
    return (gt_grad_rows){m->emb_dirty, t->offset, (size_t)m->dm.V, m->dm.d, m->emb_lag};
}

void gt_model_forward_loss(gt_model *m, gt_stream *s, const int32_t *tokens, const int32_t *targets,
                           float scale, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    gt_model_fp8_cast_weights(m, s, 0, st); /* the weights as the last optimizer step left them */
    b->ops->embedding_fwd(b, s, m->res[0], tokens, gt_model_param(m, m->wte), dm->N, dm->d);
    for (int l = 0; l < m->num_layers; l++)
        for (int u = 0; u < m->layers[l].n_units; u++)
            unit_fwd_bwd(m, s, l, u, 0, 0, st);
    head_fwd(m, s, targets, scale, st);
}
