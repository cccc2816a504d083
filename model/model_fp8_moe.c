/* The MoE experts' grouped GEMMs in bf16 or fp8 (model_fp8.h), as Transformer Engine's
 * GroupedLinear runs them under per-tensor recipes (fp8_cs, fp8_ds): E4M3 forward operands,
 * the gradient's format for the output gradient, fp32 accumulation. Scales, all graph-safe
 * (none depends on how many rows an expert got, so nothing reads the offsets on the host):
 * one per expert's weight, each cast on its own once per step after the optimizer (all of a
 * layer's experts in one fp8_cast_experts), and one for all routed tokens' activations
 * [R, in] and one for all rows of the output gradient [R, out], each cast in one pass over
 * the rows whatever the routing. The layers
 * model.first_last_layers_bf16 keeps in bf16 keep bf16 experts too. Blockwise (fp8_sc) is
 * refused for MoE models by config/unsupported.c (engine_no_fp8_blockwise_moe). */
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

static const gt_fp8_experts *experts_on(const gt_model *m, int layer, int lin) {
    const gt_fp8_experts *x = m->fp8.moe ? &m->fp8.moe[(size_t)layer * GT_MOE_LINEARS + lin] : NULL;
    return x && x->on ? x : NULL;
}

int gt_model_fp8_plan_experts(gt_model *m, size_t *qa, size_t *qb, size_t *wt, gt_error *err) {
    gt_model_fp8 *f = &m->fp8;
    const gt_model_dims *dm = &m->dm;
    if (f->scaling == GT_FP8_BLOCKWISE) return GT_OK; /* refused by the config's rules */
    int any = 0, rc;
    for (int l = 0; l < m->num_layers; l++)
        any |= m->layers[l].has_moe && !gt_model_fp8_layer_in_bf16(&m->cfg, l);
    if (!any) return GT_OK;
    f->moe = calloc((size_t)m->num_layers * GT_MOE_LINEARS, sizeof *f->moe);
    if (!f->moe) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning fp8 experts");
    size_t R = (size_t)dm->R, E = (size_t)dm->E;
    char nm[GT_ARENA_NAME_MAX];
    static const char *const names[GT_MOE_LINEARS] = {"gate_up", "down"};
    for (int l = 0; l < m->num_layers; l++) {
        const gt_layer *L = &m->layers[l];
        if (!L->has_moe || gt_model_fp8_layer_in_bf16(&m->cfg, l)) continue;
        int dims[GT_MOE_LINEARS][3] = {{L->moe.gu_w, dm->d, 2 * dm->fe},
                                       {L->moe.down_w, dm->fe, dm->d}};
        for (int i = 0; i < GT_MOE_LINEARS; i++) {
            gt_fp8_experts *x = &f->moe[(size_t)l * GT_MOE_LINEARS + i];
            int in = dims[i][1], out = dims[i][2];
            *x = (gt_fp8_experts){1, dims[i][0], in, out, f->n_meta, NULL, NULL, NULL, NULL};
            f->n_meta += GT_FP8_MOE_SLOT_W + dm->E;
            f->moe_on++;
            size_t wbytes = E * (size_t)in * out * f->elem;
            snprintf(nm, sizeof nm, "fp8.layers.%d.moe.%s.w", l, names[i]);
            PLAN(&m->params, nm, wbytes, &x->qw);
            if (f->wt_in_backward) {
                *wt = gt_max_size(*wt, wbytes);
            } else {
                snprintf(nm, sizeof nm, "fp8.layers.%d.moe.%s.w_t", l, names[i]);
                PLAN(&m->params, nm, wbytes, &x->qwt);
            }
            snprintf(nm, sizeof nm, "fp8.layers.%d.moe.%s.w_scales", l, names[i]);
            PLAN(&m->params, nm, E * sizeof(float), &x->sw);
            snprintf(nm, sizeof nm, "fp8.layers.%d.moe.%s.w_t_scales", l, names[i]);
            PLAN(&m->params, nm, E * sizeof(float), &x->swt);
            /* the routed rows of x, dout and their transposes pass through both buffers */
            *qa = gt_max_size(*qa, R * (size_t)(in > out ? in : out));
            *qb = gt_max_size(*qb, R * (size_t)(in > out ? in : out));
        }
    }
    return GT_OK;
}

/* Each expert's weight cast on its own (its amax, scale and meta), all of a layer's experts in
 * one fp8_cast_experts: a layer's launches do not grow with its experts. */
void gt_model_fp8_cast_experts(gt_model *m, gt_stream *s, int record, gt_step_state *st) {
    gt_model_fp8 *f = &m->fp8;
    gt_backend *b = m->b;
    if (!f->moe) return;
    for (int l = 0; l < m->num_layers; l++)
        for (int i = 0; i < GT_MOE_LINEARS; i++) {
            const gt_fp8_experts *x = experts_on(m, l, i);
            if (!x) continue;
            gt_fp8_cast_spec sp = gt_model_fp8_spec(f, f->fwd_format, 1, record);
            int wt = !f->wt_in_backward; /* the transposed copies now, or in the backward */
            b->ops->fp8_cast_experts(b, s, x->qw, x->sw, wt ? x->qwt : NULL, wt ? x->swt : NULL,
                                     gt_model_param(m, x->weight), m->dm.E, x->out, x->in, sp,
                                     &f->meta[x->slot + GT_FP8_MOE_SLOT_W], st);
        }
}

/* Expert linear lin's weight tensor and its input and output widths */
static void expert_linear(const gt_model *m, const gt_moe_block *mb, int lin, int *w, int *in,
                          int *nout) {
    const gt_model_dims *dm = &m->dm;
    *w = lin == GT_MOE_LIN_GU ? mb->gu_w : mb->down_w;
    *in = lin == GT_MOE_LIN_GU ? dm->d : dm->fe;
    *nout = lin == GT_MOE_LIN_GU ? 2 * dm->fe : dm->d;
}

void gt_moe_linear_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out, const void *x,
                       int record, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    const gt_moe_block *mb = &m->layers[layer].moe;
    const gt_fp8_experts *xe = experts_on(m, layer, lin);
    int w, in, nout;
    expert_linear(m, mb, lin, &w, &in, &nout);
    if (!xe) {
        b->ops->moe_matmul_fwd(b, s, out, x, gt_model_param(m, w), mb->offsets, dm->R, dm->E, nout,
                               in);
        return;
    }
    gt_model_fp8 *f = &m->fp8;
    b->ops->fp8_cast(b, s, f->qa, f->sa, x, dm->R, in, 0,
                     gt_model_fp8_spec(f, f->fwd_format, 1, record),
                     &f->meta[xe->slot + GT_FP8_MOE_SLOT_X], st);
    b->ops->moe_fp8_matmul(
        b, s, out, GT_FP8_FAST_ACCUM, (gt_fp8_operand){f->qa, f->sa, 1, f->fwd_format},
        (gt_fp8_operand){xe->qw, xe->sw, 1, f->fwd_format}, mb->offsets, dm->R, dm->E, nout, in);
}

void gt_moe_linear_bwd(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                       const void *x, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    const gt_moe_block *mb = &m->layers[layer].moe;
    const gt_fp8_experts *xe = experts_on(m, layer, lin);
    int w, in, nout;
    expert_linear(m, mb, lin, &w, &in, &nout);
    int R = dm->R, E = dm->E;
    if (!xe) {
        b->ops->moe_matmul_bwd_weight(b, s, gt_model_grad(m, w), dout, x, mb->offsets, R, E, nout,
                                      in, m->grad_acc);
        b->ops->moe_matmul_bwd_data(b, s, dx, dout, gt_model_param(m, w), mb->offsets, R, E, nout,
                                    in);
        return;
    }
    gt_model_fp8 *f = &m->fp8;
    if (f->wt_in_backward) /* each expert's w^T with the scale the step's weight cast recorded */
        b->ops->fp8_cast_experts(b, s, NULL, NULL, xe->qwt, xe->swt, gt_model_param(m, w), E, nout,
                                 in, gt_model_fp8_spec_recorded(f->fwd_format),
                                 &f->meta[xe->slot + GT_FP8_MOE_SLOT_W], st);
    /* dout [R, out] for the data gradient and dout^T [out, R] for the weight gradient */
    gt_model_fp8_cast_both(m, s, f->qa, f->sa, f->qb, f->sb, dout, R, nout,
                           gt_model_fp8_spec(f, f->grad_format, 1, 1),
                           &f->meta[xe->slot + GT_FP8_MOE_SLOT_G], st);
    b->ops->moe_fp8_matmul(b, s, dx, 0, (gt_fp8_operand){f->qa, f->sa, 1, f->grad_format},
                           (gt_fp8_operand){xe->qwt, xe->swt, 1, f->fwd_format}, mb->offsets, R, E,
                           in, nout);
    /* qa is free again: x^T [in, R] with the scale the forward recorded for x */
    b->ops->fp8_cast(b, s, f->qa, f->sa, x, R, in, 1, gt_model_fp8_spec_recorded(f->fwd_format),
                     &f->meta[xe->slot + GT_FP8_MOE_SLOT_X], st);
    b->ops->moe_fp8_matmul_wgrad(
        b, s, gt_model_grad(m, w), (gt_fp8_operand){f->qb, f->sb, 1, f->grad_format},
        (gt_fp8_operand){f->qa, f->sa, 1, f->fwd_format}, mb->offsets, R, E, nout, in, m->grad_acc);
}
