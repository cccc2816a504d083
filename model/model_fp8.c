/* The linear layers' GEMMs in bf16 or fp8 (model_fp8.h). Under fp8: forward x @ w^T (E4M3 x
 * E4M3, fast accumulation), data gradient dout @ w (the gradient's format x the transposed
 * weight copy), weight gradient dout^T @ x (both operands transposed, so every fp8 GEMM is
 * K-contiguous on both sides, as Hopper needs). Per-tensor recipes read each tensor once per
 * use: the weight and the output gradient are cast to both layouts in one pass; the forward
 * saves x^T in fp8 for the weight gradient where nothing else needs x (gt_model_fp8_saves_input)
 * and elsewhere the backward casts x^T with the scale the forward recorded for x. */
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

int gt_model_fp8_configured(const gt_config *cfg) {
    gt_fp8_recipe r = gt_compute_dtype_fp8_recipe(cfg->model.compute_dtype);
    return r == GT_FP8_RECIPE_TENSORWISE || r == GT_FP8_RECIPE_DELAYED ||
           r == GT_FP8_RECIPE_BLOCKWISE;
}

int gt_model_fp8_layer_in_bf16(const gt_config *cfg, int l) {
    const gt_model_config *mc = &cfg->model;
    return mc->first_last_layers_bf16 && (l < mc->num_layers_at_start_in_bf16 ||
                                          l >= mc->num_layers - mc->num_layers_at_end_in_bf16);
}

int gt_model_fp8_saves_input(const gt_model *m, int layer, int lin) {
    const gt_config *cfg = &m->cfg;
    gt_fp8_recipe r = gt_compute_dtype_fp8_recipe(cfg->model.compute_dtype);
    if (r != GT_FP8_RECIPE_TENSORWISE && r != GT_FP8_RECIPE_DELAYED && r != GT_FP8_RECIPE_BLOCKWISE)
        return 0;
    if (gt_model_fp8_layer_in_bf16(cfg, layer)) return 0;
    const gt_layer *L = &m->layers[layer];
    /* the o projection's input is the attention output, which the attention backward reads */
    return lin == GT_LIN_QKV ? L->has_attn : (lin == GT_LIN_GU || lin == GT_LIN_DOWN) && L->has_mlp;
}

static gt_fp8_linear *lin_of(const gt_model *m, int layer, int lin) {
    return m->fp8.lin ? &m->fp8.lin[(size_t)layer * GT_LINEARS + lin] : NULL;
}

int gt_model_fp8_plan(gt_model *m, gt_error *err) {
    gt_model_fp8 *f = &m->fp8;
    const gt_model_config *mc = &m->cfg.model;
    const gt_model_dims *dm = &m->dm;
    memset(f, 0, sizeof *f);
    if (!gt_model_fp8_configured(&m->cfg)) return GT_OK;
    gt_fp8_recipe r = gt_compute_dtype_fp8_recipe(mc->compute_dtype);
    f->enabled = 1;
    f->scaling = r == GT_FP8_RECIPE_TENSORWISE ? GT_FP8_TENSORWISE
                 : r == GT_FP8_RECIPE_DELAYED  ? GT_FP8_DELAYED
                                               : GT_FP8_BLOCKWISE;
    f->fwd_format = GT_FP8_E4M3;
    f->grad_format = mc->fp8 == GT_FP8_FORMAT_E4M3 ? GT_FP8_E4M3 : GT_FP8_E5M2;
    f->history_len = mc->fp8_amax_history_len > 0 ? mc->fp8_amax_history_len : 1;
    f->use_max = mc->fp8_amax_compute_algo == GT_AMAX_MAX;
    f->margin = mc->fp8_margin;
    /* the CPU backend (fp32 activations) keeps each fp8 element as its value in a float */
    f->elem = m->act_elem == sizeof(float) ? sizeof(float) : 1;
    f->lin = calloc((size_t)m->num_layers * GT_LINEARS, sizeof *f->lin);
    if (!f->lin) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning fp8");
    int blockwise = f->scaling == GT_FP8_BLOCKWISE, rc;
    size_t N = (size_t)dm->N, qa = 0, qb = 0, sa = 1, sb = 1, wt = 0;
    /* With one micro-batch a step each transposed copy is read once, by its layer's data
     * gradient: made there from the bf16 weight (the scale the step's weight cast recorded),
     * it costs one more read of the weights a step and saves keeping every layer's copy. */
    const gt_train_config *tc = &m->cfg.train;
    f->wt_in_backward = tc->global_batch_size <= tc->micro_batch_size;
    char nm[GT_ARENA_NAME_MAX];
    static const char *const names[GT_LINEARS] = {"qkv", "o", "gate_up", "down"};
    static const char *const mamba_names[GT_LINEARS] = {"in_proj", "", "", "out_proj"};
    for (int l = 0; l < m->num_layers; l++) {
        const gt_layer *L = &m->layers[l];
        int mb = L->has_mamba;
        int min = mb ? gt_mamba_in(dm->ms) : 0, minner = mb ? gt_mamba_inner(dm->ms) : 0;
        int dims[GT_LINEARS][3] = {{L->has_attn || mb, dm->d, mb ? min : dm->qkv},
                                   {L->has_attn, dm->H * dm->hd, dm->d},
                                   {L->has_mlp, dm->d, 2 * dm->f},
                                   {L->has_mlp || mb, mb ? minner : dm->f, dm->d}};
        int weights[GT_LINEARS] = {mb ? L->mamba.in_w : L->attn.qkv_w, L->attn.o_w, L->mlp.gu_w,
                                   mb ? L->mamba.out_w : L->mlp.down_w};
        for (int i = 0; i < GT_LINEARS; i++) {
            gt_fp8_linear *li = lin_of(m, l, i);
            if (!dims[i][0] || gt_model_fp8_layer_in_bf16(&m->cfg, l)) continue;
            int in = dims[i][1], out = dims[i][2];
            *li = (gt_fp8_linear){1,    weights[i], in,   out,  f->n_meta, NULL,
                                  NULL, NULL,       NULL, NULL, NULL};
            f->n_meta += GT_FP8_SLOTS;
            size_t wbytes = (size_t)in * out * f->elem;
            size_t ws = blockwise ? gt_fp8_scale_count(out, in, GT_FP8_TILE) : 1;
            size_t wts = blockwise ? gt_fp8_scale_count(in, out, GT_FP8_TILE) : 1;
            const char *name = mb ? mamba_names[i] : names[i];
            snprintf(nm, sizeof nm, "fp8.layers.%d.%s.w", l, name);
            PLAN(&m->params, nm, wbytes, &li->qw);
            if (f->wt_in_backward) {
                wt = gt_max_size(wt, wbytes);
            } else {
                snprintf(nm, sizeof nm, "fp8.layers.%d.%s.w_t", l, name);
                PLAN(&m->params, nm, wbytes, &li->qwt);
            }
            snprintf(nm, sizeof nm, "fp8.layers.%d.%s.w_scales", l, name);
            PLAN(&m->params, nm, ws * sizeof(float), &li->sw);
            snprintf(nm, sizeof nm, "fp8.layers.%d.%s.w_t_scales", l, name);
            PLAN(&m->params, nm, wts * sizeof(float), &li->swt);
            if (gt_model_fp8_saves_input(m, l, i)) {
                /* half the bytes of the bf16 input it replaces (model_plan.c shares that) */
                snprintf(nm, sizeof nm, "fp8.layers.%d.%s.x_t", l, name);
                PLAN(&m->acts, nm, N * (size_t)in * f->elem, &li->xt);
                /* blockwise: x^T's own 1 x 128 tiles, which run along the tokens */
                size_t xs = blockwise ? gt_fp8_scale_count(in, dm->N, 1) : 1;
                snprintf(nm, sizeof nm, "fp8.layers.%d.%s.x_t_scale", l, name);
                PLAN(&m->acts, nm, xs * sizeof(float), &li->sxt);
            }
            qa = gt_max_size(qa, N * (size_t)(in > out ? in : out));
            qb = gt_max_size(qb, N * (size_t)(in > out ? in : out));
            if (blockwise) { /* x, dout, dout^T and x^T pass through both buffers */
                size_t c = gt_max_size(gt_max_size(gt_fp8_scale_count(dm->N, in, 1),
                                                   gt_fp8_scale_count(dm->N, out, 1)),
                                       gt_max_size(gt_fp8_scale_count(out, dm->N, 1),
                                                   gt_fp8_scale_count(in, dm->N, 1)));
                sa = gt_max_size(sa, c);
                sb = gt_max_size(sb, c);
            }
        }
    }
    if ((rc = gt_model_fp8_plan_experts(m, &qa, &qb, &wt, err))) return rc;
    if (f->n_meta == 0) return GT_OK;
    PLAN(&m->params, "fp8.scaling", (size_t)f->n_meta * sizeof(gt_fp8_meta), &f->meta);
    if (f->scaling == GT_FP8_DELAYED)
        PLAN(&m->params, "fp8.amax_history",
             (size_t)f->n_meta * (size_t)f->history_len * sizeof(float), &f->history);
    if (wt) PLAN(&m->scratch, "fp8.w_t", wt, &f->wt);
    if (f->scaling == GT_FP8_TENSORWISE) {
        PLAN(&m->scratch, "fp8.x_amax", (size_t)m->num_layers * GT_LINEARS * sizeof(uint32_t),
             &f->x_amax);
        PLAN(&m->scratch, "fp8.g_amax", (size_t)m->num_layers * GT_LINEARS * sizeof(uint32_t),
             &f->g_amax);
    }
    PLAN(&m->scratch, "fp8.cast_a", qa * f->elem, &f->qa);
    PLAN(&m->scratch, "fp8.cast_b", qb * f->elem, &f->qb);
    PLAN(&m->scratch, "fp8.cast_a_scales", sa * sizeof(float), &f->sa);
    PLAN(&m->scratch, "fp8.cast_b_scales", sb * sizeof(float), &f->sb);
    return GT_OK;
}

void gt_model_fp8_release(gt_model *m) {
    free(m->fp8.lin);
    m->fp8.lin = NULL;
    free(m->fp8.moe);
    m->fp8.moe = NULL;
}

int gt_model_fp8_init(gt_model *m, gt_error *err) {
    gt_model_fp8 *f = &m->fp8;
    gt_backend *b = m->b;
    if (!f->enabled || f->n_meta == 0) return GT_OK;
    if (!b->ops->fp8_cast || !b->ops->fp8_gemm || !b->ops->fp8_amax_update || !b->fp8_bytes ||
        !b->ops->bias_grad)
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "model.compute_dtype: the %s backend has no fp8 ops yet; set "
                            "runtime.device=cpu (the fp8 emulation) or model.compute_dtype=bf16",
                            b->name);
    if (f->moe_on &&
        (!b->ops->moe_fp8_matmul || !b->ops->moe_fp8_matmul_wgrad || !b->ops->fp8_cast_experts))
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "model.compute_dtype: the %s backend has no fp8 expert GEMMs yet; set "
                            "runtime.device=cpu (the fp8 emulation) or model.compute_dtype=bf16",
                            b->name);
    if (b->fp8_bytes != f->elem)
        return gt_error_set(err, GT_ERR_INVALID,
                            "the %s backend stores fp8 elements in %zu bytes, the plan in %zu",
                            b->name, b->fp8_bytes, f->elem);
    for (int i = 0; f->wt_in_backward && i < m->num_layers * GT_LINEARS; i++)
        if (f->lin[i].on) f->lin[i].qwt = f->wt; /* the arena bound the shared buffer */
    for (int i = 0; f->wt_in_backward && f->moe && i < m->num_layers * GT_MOE_LINEARS; i++)
        if (f->moe[i].on) f->moe[i].qwt = f->wt;
    gt_fp8_meta *h = malloc((size_t)f->n_meta * sizeof *h);
    if (!h) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory initializing fp8");
    /* every slot in the forward's format but the output gradients' */
    for (int i = 0; i < f->n_meta; i++)
        h[i] = (gt_fp8_meta){1.0f, 1.0f, 0.0f, (int32_t)f->fwd_format};
    for (int i = 0; i < m->num_layers * GT_LINEARS; i++)
        if (f->lin[i].on) h[f->lin[i].slot + GT_FP8_SLOT_G].format = (int32_t)f->grad_format;
    for (int i = 0; f->moe && i < m->num_layers * GT_MOE_LINEARS; i++)
        if (f->moe[i].on) h[f->moe[i].slot + GT_FP8_MOE_SLOT_G].format = (int32_t)f->grad_format;
    b->ops->memcpy_h2d(b, NULL, f->meta, h, (size_t)f->n_meta * sizeof *h);
    if (f->history)
        b->ops->memset0(b, NULL, f->history,
                        (size_t)f->n_meta * (size_t)f->history_len * sizeof(float));
    int rc = b->ops->stream_sync(b, NULL, err);
    free(h);
    return rc;
}

/* Casts of an evaluation (record 0) leave the scaling state alone, so evaluating changes no
 * later training step: delayed scaling reads its scales but adds nothing to the step's amax. */
gt_fp8_cast_spec gt_model_fp8_spec(const gt_model_fp8 *f, gt_fp8_format fmt, int tile_rows,
                                   int record) {
    return (gt_fp8_cast_spec){f->scaling, fmt, tile_rows, record, NULL};
}

static gt_fp8_cast_spec spec_rec(const gt_model_fp8 *f, gt_fp8_format fmt, int tile_rows,
                                 int record) {
    return gt_model_fp8_spec(f, fmt, tile_rows, record);
}

static gt_fp8_cast_spec spec_of(const gt_model_fp8 *f, gt_fp8_format fmt, int tile_rows) {
    return spec_rec(f, fmt, tile_rows, 1);
}

/* A cast with the scale the tensor's meta holds, recording nothing: under current scaling the
 * forward's cast of the same x (saved unchanged for the backward) recorded exactly the scale
 * a fresh amax would give, and under delayed scaling that cast already added x's amax. */
gt_fp8_cast_spec gt_model_fp8_spec_recorded(gt_fp8_format fmt) {
    return (gt_fp8_cast_spec){GT_FP8_DELAYED, fmt, 1, 0, NULL};
}

static gt_fp8_cast_spec spec_recorded(gt_fp8_format fmt) {
    return gt_model_fp8_spec_recorded(fmt);
}

/* x to q [rows, cols] and qt [cols, rows]: one pass where the backend has it (one scale per
 * tensor, or blockwise each form's own tiles), else two casts */
void gt_model_fp8_cast_both(gt_model *m, gt_stream *s, void *q, float *sq, void *qt, float *sqt,
                            const void *x, int rows, int cols, gt_fp8_cast_spec sp,
                            gt_fp8_meta *meta, gt_step_state *st) {
    gt_backend *b = m->b;
    if (b->ops->fp8_cast_pair) {
        b->ops->fp8_cast_pair(b, s, q, sq, qt, sqt, x, rows, cols, sp, meta, st);
        return;
    }
    b->ops->fp8_cast(b, s, q, sq, x, rows, cols, 0, sp, meta, st);
    b->ops->fp8_cast(b, s, qt, sqt, x, rows, cols, 1, sp, meta, st);
}

static void cast_both(gt_model *m, gt_stream *s, void *q, float *sq, void *qt, float *sqt,
                      const void *x, int rows, int cols, gt_fp8_cast_spec sp, gt_fp8_meta *meta,
                      gt_step_state *st) {
    gt_model_fp8_cast_both(m, s, q, sq, qt, sqt, x, rows, cols, sp, meta, st);
}

void gt_model_fp8_cast_weights(gt_model *m, gt_stream *s, int record, gt_step_state *st) {
    gt_model_fp8 *f = &m->fp8;
    gt_backend *b = m->b;
    if (!f->enabled || f->n_meta == 0) return;
    int tile = f->scaling == GT_FP8_BLOCKWISE ? GT_FP8_TILE : 1;
    for (int l = 0; l < m->num_layers; l++)
        for (int i = 0; i < GT_LINEARS; i++) {
            const gt_fp8_linear *li = lin_of(m, l, i);
            if (!li->on) continue;
            gt_fp8_meta *meta = &f->meta[li->slot + GT_FP8_SLOT_W];
            const void *w = gt_model_param(m, li->weight);
            gt_fp8_cast_spec sp = spec_rec(f, f->fwd_format, tile, record);
            if (f->wt_in_backward)
                b->ops->fp8_cast(b, s, li->qw, li->sw, w, li->out, li->in, 0, sp, meta, st);
            else
                cast_both(m, s, li->qw, li->sw, li->qwt, li->swt, w, li->out, li->in, sp, meta, st);
        }
    gt_model_fp8_cast_experts(m, s, record, st);
}

void gt_model_fp8_step_end(gt_model *m, gt_stream *s, gt_step_state *st) {
    gt_model_fp8 *f = &m->fp8;
    if (!f->enabled || f->n_meta == 0 || f->scaling != GT_FP8_DELAYED) return;
    m->b->ops->fp8_amax_update(m->b, s, f->meta, f->history, f->n_meta, f->history_len, f->use_max,
                               f->margin, st);
}

static const gt_fp8_linear *fp8_on(const gt_model *m, int layer, int lin) {
    const gt_fp8_linear *li = lin_of(m, layer, lin);
    return li && li->on ? li : NULL;
}

/* The slot a producer folds linear `lin`'s input amax into, zeroed on s, when that input is
 * cast under current scaling and the backend has the producer's op (have_op); else NULL */
static uint32_t *input_amax_slot(gt_model *m, gt_stream *s, int layer, int lin, int have_op) {
    gt_model_fp8 *f = &m->fp8;
    if (!have_op || !fp8_on(m, layer, lin) || f->scaling != GT_FP8_TENSORWISE || !f->x_amax)
        return NULL;
    uint32_t *slot = &f->x_amax[(size_t)layer * GT_LINEARS + lin];
    m->b->ops->memset0(m->b, s, slot, sizeof *slot);
    return slot;
}

/* The same for the output gradient of linear `lin` (have_op: the backend has the producer's
 * op) */
static uint32_t *grad_amax_slot(gt_model *m, gt_stream *s, int layer, int lin, int have_op,
                                int zero) {
    gt_model_fp8 *f = &m->fp8;
    if (!have_op || !fp8_on(m, layer, lin) || f->scaling != GT_FP8_TENSORWISE || !f->g_amax)
        return NULL;
    uint32_t *slot = &f->g_amax[(size_t)layer * GT_LINEARS + lin];
    if (zero) m->b->ops->memset0(m->b, s, slot, sizeof *slot);
    return slot;
}

const uint32_t *gt_linear_swiglu_bwd(gt_model *m, gt_stream *s, int layer, int lin, void *dgu,
                                     const void *dout, const void *gu) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    uint32_t *slot = grad_amax_slot(m, s, layer, lin, b->ops->swiglu_bwd_amax != NULL, 1);
    if (slot)
        b->ops->swiglu_bwd_amax(b, s, dgu, dout, gu, dm->N, dm->f, slot);
    else
        b->ops->swiglu_bwd(b, s, dgu, dout, gu, dm->N, dm->f);
    return slot;
}

const uint32_t *gt_linear_rope_bwd(gt_model *m, gt_stream *s, int layer, void *dqkv) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    int have = b->ops->rope_bwd_amax != NULL && !dm->qk_norm;
    uint32_t *slot = grad_amax_slot(m, s, layer, GT_LIN_QKV, have, 1);
    if (slot)
        b->ops->rope_bwd_amax(b, s, dqkv, dm->B, dm->T, dm->H, dm->KV, dm->hd, dm->theta,
                              dm->rope_factor > 0 ? dm->rope_factor : 0.0f, slot);
    else if (dm->rope_factor > 0)
        b->ops->rope_scaled_bwd(b, s, dqkv, dm->B, dm->T, dm->H, dm->KV, dm->hd, dm->theta,
                                dm->rope_factor);
    else
        b->ops->rope_bwd(b, s, dqkv, dm->B, dm->T, dm->H, dm->KV, dm->hd, dm->theta);
    return slot;
}

uint32_t *gt_res_grad_amax_slot(gt_model *m, gt_stream *s, int r, int zero) {
    if (!m->fp8.g_amax || m->dm.p_hidden > 0 || !m->b->ops->rmsnorm_bwd_part_amax) return NULL;
    for (int l = 0; l < m->num_layers; l++) {
        const gt_layer *L = &m->layers[l];
        if (L->has_attn && L->attn.res_out == r) return grad_amax_slot(m, s, l, GT_LIN_O, 1, zero);
        if (L->has_mlp && L->mlp.res_out == r) return grad_amax_slot(m, s, l, GT_LIN_DOWN, 1, zero);
    }
    return NULL;
}

const uint32_t *gt_linear_norm_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out,
                                   float *rstd, const void *inp, int norm_w) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    const void *w = gt_model_param(m, norm_w);
    uint32_t *slot = input_amax_slot(m, s, layer, lin, b->ops->rmsnorm_fwd_amax != NULL);
    if (slot)
        b->ops->rmsnorm_fwd_amax(b, s, out, rstd, inp, w, dm->N, dm->d, dm->eps, slot);
    else
        b->ops->rmsnorm_fwd(b, s, out, rstd, inp, w, dm->N, dm->d, dm->eps);
    return slot;
}

const uint32_t *gt_linear_swiglu_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out,
                                     const void *gu) {
    gt_backend *b = m->b;
    const gt_model_dims *dm = &m->dm;
    uint32_t *slot = input_amax_slot(m, s, layer, lin, b->ops->swiglu_fwd_amax != NULL);
    if (slot)
        b->ops->swiglu_fwd_amax(b, s, out, gu, dm->N, dm->f, slot);
    else
        b->ops->swiglu_fwd(b, s, out, gu, dm->N, dm->f);
    return slot;
}

void gt_linear_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out, const void *x, int w,
                   int bias, const void *res, int record, gt_step_state *st) {
    gt_linear_fwd_amax(m, s, layer, lin, out, x, NULL, w, bias, res, record, st);
}

void gt_linear_fwd_amax(gt_model *m, gt_stream *s, int layer, int lin, void *out, const void *x,
                        const uint32_t *x_amax, int w, int bias, const void *res, int record,
                        gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_fp8_linear *li = fp8_on(m, layer, lin);
    if (!li) {
        const gt_model_tensor_desc *t = &m->tensors[w];
        b->ops->matmul_fwd(b, s, out, x, gt_model_param(m, w), gt_model_param(m, bias), res,
                           m->dm.N, t->shape[0], t->shape[1]);
        return;
    }
    gt_model_fp8 *f = &m->fp8;
    int wtile = f->scaling == GT_FP8_BLOCKWISE ? GT_FP8_TILE : 1;
    gt_fp8_meta *mx = &f->meta[li->slot + GT_FP8_SLOT_X];
    gt_fp8_cast_spec sx = spec_rec(f, f->fwd_format, 1, record);
    sx.amax_bits = x_amax; /* NULL, or set only under current scaling (input_amax_slot) */
    if (li->xt && record)  /* training: x^T for the weight gradient from the same pass */
        cast_both(m, s, f->qa, f->sa, li->xt, li->sxt, x, m->dm.N, li->in, sx, mx, st);
    else
        b->ops->fp8_cast(b, s, f->qa, f->sa, x, m->dm.N, li->in, 0, sx, mx, st);
    b->ops->fp8_gemm(b, s, out, GT_FP8_FAST_ACCUM, 0,
                     (gt_fp8_operand){f->qa, f->sa, 1, f->fwd_format},
                     (gt_fp8_operand){li->qw, li->sw, wtile, f->fwd_format}, f->scaling,
                     gt_model_param(m, bias), res, m->dm.N, li->out, li->in);
}

/* The shared w^T of a one-micro-batch step (wt_in_backward), right before its data gradient,
 * with the scale the step's weight cast recorded; blockwise, from its 128 x 128 blocks again
 * (the blocks of w^T are those of w transposed, so their scales come out the same, and the
 * codes are the ones the step's pair cast would have written) */
static void weight_t(gt_model *m, gt_stream *s, const gt_fp8_linear *li, gt_step_state *st) {
    gt_model_fp8 *f = &m->fp8;
    if (!f->wt_in_backward) return;
    gt_fp8_cast_spec sp = f->scaling == GT_FP8_BLOCKWISE
                              ? spec_rec(f, f->fwd_format, GT_FP8_TILE, 0)
                              : spec_recorded(f->fwd_format);
    m->b->ops->fp8_cast(m->b, s, li->qwt, li->swt, gt_model_param(m, li->weight), li->out, li->in,
                        1, sp, &f->meta[li->slot + GT_FP8_SLOT_W], st);
}

void gt_linear_bwd_data(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                        int w, int accumulate, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_fp8_linear *li = fp8_on(m, layer, lin);
    if (!li) {
        const gt_model_tensor_desc *t = &m->tensors[w];
        b->ops->matmul_bwd_data(b, s, dx, dout, gt_model_param(m, w), m->dm.N, t->shape[0],
                                t->shape[1], accumulate);
        return;
    }
    gt_model_fp8 *f = &m->fp8;
    int wtile = f->scaling == GT_FP8_BLOCKWISE ? GT_FP8_TILE : 1;
    weight_t(m, s, li, st);
    b->ops->fp8_cast(b, s, f->qa, f->sa, dout, m->dm.N, li->out, 0, spec_of(f, f->grad_format, 1),
                     &f->meta[li->slot + GT_FP8_SLOT_G], st);
    b->ops->fp8_gemm(b, s, dx, 0, accumulate, (gt_fp8_operand){f->qa, f->sa, 1, f->grad_format},
                     (gt_fp8_operand){li->qwt, li->swt, wtile, f->fwd_format}, f->scaling, NULL,
                     NULL, m->dm.N, li->in, li->out);
}

void gt_linear_bwd_weight(gt_model *m, gt_stream *s, int layer, int lin, int w, int bias,
                          const void *dout, const void *x, gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_fp8_linear *li = fp8_on(m, layer, lin);
    if (!li) {
        const gt_model_tensor_desc *t = &m->tensors[w];
        b->ops->matmul_bwd_weight(b, s, gt_model_grad(m, w), gt_model_grad(m, bias), dout, x,
                                  m->dm.N, t->shape[0], t->shape[1], m->grad_acc);
        return;
    }
    gt_model_fp8 *f = &m->fp8;
    b->ops->fp8_cast(b, s, f->qa, f->sa, dout, m->dm.N, li->out, 1, spec_of(f, f->grad_format, 1),
                     &f->meta[li->slot + GT_FP8_SLOT_G], st);
    b->ops->fp8_cast(b, s, f->qb, f->sb, x, m->dm.N, li->in, 1, spec_of(f, f->fwd_format, 1),
                     &f->meta[li->slot + GT_FP8_SLOT_X], st);
    b->ops->fp8_gemm(b, s, gt_model_grad(m, w), 1, m->grad_acc,
                     (gt_fp8_operand){f->qa, f->sa, 1, f->grad_format},
                     (gt_fp8_operand){f->qb, f->sb, 1, f->fwd_format}, f->scaling, NULL, NULL,
                     li->out, li->in, m->dm.N);
    /* the bias gradient from the unquantized gradient (bias_grad, backend.h) */
    float *dbias = gt_model_grad(m, bias);
    if (dbias) b->ops->bias_grad(b, s, dbias, dout, m->dm.N, li->out, m->grad_acc);
}

void gt_linear_bwd(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                   const void *x, int w, int bias, int wgrad, gt_step_state *st) {
    gt_linear_bwd_amax(m, s, layer, lin, dx, dout, NULL, x, w, bias, wgrad, st);
}

void gt_linear_bwd_amax(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                        const uint32_t *dout_amax, const void *x, int w, int bias, int wgrad,
                        gt_step_state *st) {
    gt_backend *b = m->b;
    const gt_fp8_linear *li = fp8_on(m, layer, lin);
    gt_model_fp8 *f = &m->fp8;
    if (!li) {
        if (wgrad) gt_linear_bwd_weight(m, s, layer, lin, w, bias, dout, x, st);
        gt_linear_bwd_data(m, s, layer, lin, dx, dout, w, 0, st);
        return;
    }
    int N = m->dm.N, blockwise = f->scaling == GT_FP8_BLOCKWISE;
    int wtile = blockwise ? GT_FP8_TILE : 1;
    weight_t(m, s, li, st);
    /* dout [N, out] for the data gradient and dout^T [out, N] for the weight gradient */
    gt_fp8_cast_spec sg = spec_of(f, f->grad_format, 1);
    sg.amax_bits = dout_amax; /* NULL, or set only under current scaling (grad_amax_slot) */
    cast_both(m, s, f->qa, f->sa, f->qb, f->sb, dout, N, li->out, sg,
              &f->meta[li->slot + GT_FP8_SLOT_G], st);
    b->ops->fp8_gemm(b, s, dx, 0, 0, (gt_fp8_operand){f->qa, f->sa, 1, f->grad_format},
                     (gt_fp8_operand){li->qwt, li->swt, wtile, f->fwd_format}, f->scaling, NULL,
                     NULL, N, li->in, li->out);
    if (!wgrad) return;
    gt_fp8_operand xt = {li->xt, li->sxt, 1, f->fwd_format};
    if (!li->xt) { /* qa is free again: x^T [in, N] (blockwise: its tiles run along N) */
        gt_fp8_cast_spec sx =
            blockwise ? spec_of(f, f->fwd_format, 1) : spec_recorded(f->fwd_format);
        b->ops->fp8_cast(b, s, f->qa, f->sa, x, N, li->in, 1, sx,
                         &f->meta[li->slot + GT_FP8_SLOT_X], st);
        xt = (gt_fp8_operand){f->qa, f->sa, 1, f->fwd_format};
    }
    b->ops->fp8_gemm(b, s, gt_model_grad(m, w), GT_FP8_OUT_FP32, m->grad_acc,
                     (gt_fp8_operand){f->qb, f->sb, 1, f->grad_format}, xt, f->scaling, NULL, NULL,
                     li->out, li->in, N);
    /* the bias gradient from the unquantized gradient, as in gt_linear_bwd_weight */
    float *dbias = gt_model_grad(m, bias);
    if (dbias) b->ops->bias_grad(b, s, dbias, dout, N, li->out, m->grad_acc);
}
