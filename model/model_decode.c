/* The KV-cache decoder; see model_decode.h. The per-token plan mirrors the training forward's
 * units (model_dense.c, model_moe.c) at one token, with the same backend ops where they exist
 * and the decode ops (backend/decode_ops.h) for the position-dependent parts. */
#include "model/model_decode.h"

#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

#define DEC_ALIGN 256 /* bytes: every buffer starts aligned for vector loads and cuBLASLt */

struct gt_decoder {
    gt_model *m;
    gt_backend *b;
    const gt_decode_ops *ops;
    int L;           /* cache rows */
    void **kc, **vc; /* [num_layers] caches [L, KV * hd] (NULL: a layer without attention) */
    void *x[2];      /* [d] the residual stream, two buffers in turn */
    void *ln, *qkv, *att, *gu, *h, *y, *lnf, *logits;
    float *rstd, *ws_attn, *ws_sample;
    void *e, *xe, *gue, *he, *ye; /* MoE */
    float *probs, *topk_w;
    int32_t *topk_idx, *counts, *slot_token, *token_slot, *offsets;
    gt_decode_state *st;
    void *base; /* the one allocation */
    size_t bytes;
};

typedef struct buf_list {
    void **ptr[64];
    size_t bytes[64];
    int n;
} buf_list;

static void want(buf_list *l, void **p, size_t bytes) {
    l->ptr[l->n] = p;
    l->bytes[l->n++] = (bytes + DEC_ALIGN - 1) / DEC_ALIGN * DEC_ALIGN;
}

static int refuse(const gt_model *m, gt_error *err) {
    const gt_model_dims *dm = &m->dm;
    for (int l = 0; l < m->num_layers; l++)
        if (m->layers[l].has_mamba)
            return gt_error_set(err, GT_ERR_UNSUPPORTED,
                                "layer %d is a Mamba layer (model.hybrid_override_pattern 'M'): "
                                "generate's KV-cache decoder has no recurrent Mamba state; "
                                "sample from a model without Mamba layers",
                                l);
    if (dm->hd > 512 || dm->hd % 2)
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "the head size is %d: the decode attention takes even head sizes up "
                            "to 512",
                            dm->hd);
    if (dm->H % dm->KV)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%d attention heads are not a multiple of %d key-value heads", dm->H,
                            dm->KV);
    return GT_OK;
}

int gt_decoder_create(gt_decoder **out, gt_model *m, int max_len, gt_error *err) {
    *out = NULL;
    int rc = refuse(m, err);
    if (rc) return rc;
    if (max_len < 1)
        return gt_error_set(err, GT_ERR_INVALID, "a KV cache of %d positions holds nothing",
                            max_len);
    gt_decoder *d = calloc(1, sizeof *d);
    if (!d) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the decoder");
    d->m = m;
    d->b = m->b;
    d->L = max_len;
    d->ops = gt_decode_ops_of(m->b, err);
    d->kc = calloc((size_t)m->num_layers, sizeof *d->kc);
    d->vc = calloc((size_t)m->num_layers, sizeof *d->vc);
    if (!d->ops || !d->kc || !d->vc) {
        rc = d->ops ? gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the decoder")
                    : GT_ERR_UNSUPPORTED;
        gt_decoder_destroy(d);
        return rc;
    }
    const gt_model_dims *dm = &m->dm;
    size_t a = m->act_elem, kvw = (size_t)dm->KV * dm->hd, k = dm->k > 0 ? (size_t)dm->k : 1;
    size_t E = dm->E > 0 ? (size_t)dm->E : 1, fe = dm->fe > 0 ? (size_t)dm->fe : 1;
    buf_list bl = {0};
    want(&bl, &d->x[0], dm->d * a);
    want(&bl, &d->x[1], dm->d * a);
    want(&bl, &d->ln, dm->d * a);
    want(&bl, &d->qkv, dm->qkv * a);
    want(&bl, &d->att, (size_t)dm->H * dm->hd * a);
    want(&bl, &d->gu, 2 * (size_t)(dm->f > 0 ? dm->f : 1) * a);
    want(&bl, &d->h, (size_t)(dm->f > 0 ? dm->f : 1) * a);
    want(&bl, &d->y, dm->d * a);
    want(&bl, &d->lnf, dm->d * a);
    want(&bl, &d->logits, dm->V * a);
    want(&bl, (void **)&d->rstd, sizeof(float));
    want(&bl, (void **)&d->ws_attn, (size_t)dm->H * max_len * sizeof(float));
    want(&bl, (void **)&d->ws_sample, dm->V * sizeof(float));
    want(&bl, &d->e, E * a);
    want(&bl, &d->xe, k * dm->d * a);
    want(&bl, &d->gue, k * 2 * fe * a);
    want(&bl, &d->he, k * fe * a);
    want(&bl, &d->ye, k * dm->d * a);
    want(&bl, (void **)&d->probs, E * sizeof(float));
    want(&bl, (void **)&d->topk_w, k * sizeof(float));
    want(&bl, (void **)&d->topk_idx, k * sizeof(int32_t));
    want(&bl, (void **)&d->counts, E * sizeof(int32_t));
    want(&bl, (void **)&d->slot_token, k * sizeof(int32_t));
    want(&bl, (void **)&d->token_slot, k * sizeof(int32_t));
    want(&bl, (void **)&d->offsets, (E + 1) * sizeof(int32_t));
    want(&bl, (void **)&d->st, sizeof(gt_decode_state));
    size_t total = 0, cache = ((size_t)max_len * kvw * a + DEC_ALIGN - 1) / DEC_ALIGN * DEC_ALIGN;
    for (int i = 0; i < bl.n; i++)
        total += bl.bytes[i];
    for (int l = 0; l < m->num_layers; l++)
        if (m->layers[l].has_attn) total += 2 * cache;
    rc = d->b->ops->alloc(d->b, total, &d->base, err);
    if (rc) {
        gt_decoder_destroy(d);
        return gt_error_wrap(err, "allocating the KV cache of %d positions: ", max_len);
    }
    d->bytes = total;
    char *p = d->base;
    for (int i = 0; i < bl.n; i++) {
        *bl.ptr[i] = p;
        p += bl.bytes[i];
    }
    for (int l = 0; l < m->num_layers; l++)
        if (m->layers[l].has_attn) {
            d->kc[l] = p;
            d->vc[l] = p + cache;
            p += 2 * cache;
        }
    *out = d;
    return GT_OK;
}

void gt_decoder_destroy(gt_decoder *d) {
    if (!d) return;
    if (d->base) d->b->ops->free(d->b, d->base);
    free(d->kc);
    free(d->vc);
    free(d);
}

gt_decode_state *gt_decoder_state(gt_decoder *d) {
    return d->st;
}

const void *gt_decoder_logits(const gt_decoder *d) {
    return d->logits;
}

size_t gt_decoder_bytes(const gt_decoder *d) {
    return d->bytes;
}

/* final norm and head of one row */
static void head(gt_decoder *d, gt_stream *s, const void *x) {
    gt_model *m = d->m;
    gt_backend *b = d->b;
    b->ops->rmsnorm_fwd(b, s, d->lnf, d->rstd, x, gt_model_param(m, m->final_w), 1, m->dm.d,
                        m->dm.eps);
    b->ops->matmul_fwd(b, s, d->logits, d->lnf, gt_model_param(m, m->lm_w), NULL, NULL, 1, m->dm.V,
                       m->dm.d);
}

void gt_decoder_prefill(gt_decoder *d, gt_stream *s, const int32_t *tokens, int n,
                        gt_step_state *st) {
    gt_model *m = d->m;
    gt_backend *b = d->b;
    const gt_model_dims *dm = &m->dm;
    if (n < 1 || n > dm->N || n > d->L) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "prefill of %d tokens: the model runs %d and the cache holds %d", n, dm->N,
                        d->L);
        return;
    }
    b->ops->embedding_fwd(b, s, m->res[0], tokens, gt_model_param(m, m->wte), dm->N, dm->d);
    for (int l = 0; l < m->num_layers; l++) {
        gt_layer *L = &m->layers[l];
        for (int u = 0; u < L->n_units; u++) {
            switch (L->kinds[u]) {
            case GT_UNIT_ATTN:
                gt_attn_fwd(m, s, l, 0, st);
                /* the keys and values after RoPE, as the decode steps store theirs */
                d->ops->kv_store(b, s, d->kc[l], d->vc[l], L->attn.qkv, n, NULL, dm->H, dm->KV,
                                 dm->hd);
                break;
            case GT_UNIT_MLP:
                gt_mlp_fwd(m, s, l, 0, st);
                break;
            case GT_UNIT_MOE_ROUTER:
                gt_moe_router_fwd(m, s, l, 0, st);
                break;
            case GT_UNIT_MOE_PREPROCESS:
                gt_moe_preprocess_fwd(m, s, l, st);
                break;
            case GT_UNIT_MOE:
                gt_moe_experts_fwd(m, s, l, 0, st);
                break;
            default:
                gt_backend_fail(b, GT_ERR_UNSUPPORTED,
                                "prefill: layer %d unit %d (%s) has no decode path", l, u,
                                gt_unit_kind_name(L->kinds[u]));
                return;
            }
        }
    }
    const char *last = (const char *)m->res[m->n_res - 1] + (size_t)(n - 1) * dm->d * m->act_elem;
    head(d, s, last);
}

/* norm -> qkv -> q/k transform -> RoPE -> cache -> attention -> o + residual: x[cur] to
 * x[cur ^ 1] */
static void attn_step(gt_decoder *d, gt_stream *s, int l, int cur) {
    gt_model *m = d->m;
    gt_backend *b = d->b;
    const gt_model_dims *dm = &m->dm;
    const gt_attn_block *a = &m->layers[l].attn;
    b->ops->rmsnorm_fwd(b, s, d->ln, d->rstd, d->x[cur], gt_model_param(m, a->norm_w), 1, dm->d,
                        dm->eps);
    b->ops->matmul_fwd(b, s, d->qkv, d->ln, gt_model_param(m, a->qkv_w),
                       gt_model_param(m, a->qkv_b), NULL, 1, dm->qkv, dm->d);
    /* The q/k transform before RoPE is this one place, as in gt_attn_fwd: model.qk_layernorm's
     * per-head RMSNorm of q and k (nothing kept: decoding has no backward) */
    if (dm->qk_norm)
        b->ops->qk_norm_fwd(b, s, d->qkv, NULL, NULL, gt_model_param(m, a->q_norm_w),
                            gt_model_param(m, a->k_norm_w), 1, dm->H, dm->KV, dm->hd, dm->eps);
    d->ops->rope_at(b, s, d->qkv, d->st, dm->H, dm->KV, dm->hd, dm->theta, dm->rope_factor);
    d->ops->kv_store(b, s, d->kc[l], d->vc[l], d->qkv, 1, d->st, dm->H, dm->KV, dm->hd);
    d->ops->attention(b, s, d->att, d->qkv, d->kc[l], d->vc[l], d->st, d->L, dm->H, dm->KV, dm->hd,
                      d->ws_attn);
    b->ops->matmul_fwd(b, s, d->x[cur ^ 1], d->att, gt_model_param(m, a->o_w),
                       gt_model_param(m, a->o_b), d->x[cur], 1, dm->d, dm->H * dm->hd);
}

static void mlp_step(gt_decoder *d, gt_stream *s, int l, int cur) {
    gt_model *m = d->m;
    gt_backend *b = d->b;
    const gt_model_dims *dm = &m->dm;
    const gt_mlp_block *p = &m->layers[l].mlp;
    b->ops->rmsnorm_fwd(b, s, d->ln, d->rstd, d->x[cur], gt_model_param(m, p->norm_w), 1, dm->d,
                        dm->eps);
    b->ops->matmul_fwd(b, s, d->gu, d->ln, gt_model_param(m, p->gu_w), gt_model_param(m, p->gu_b),
                       NULL, 1, 2 * dm->f, dm->d);
    b->ops->swiglu_fwd(b, s, d->h, d->gu, 1, dm->f);
    b->ops->matmul_fwd(b, s, d->x[cur ^ 1], d->h, gt_model_param(m, p->down_w),
                       gt_model_param(m, p->down_b), d->x[cur], 1, dm->d, dm->f);
}

/* The router as training computes it (softmax top-k, renormalized), then the k experts of
 * the token through the same permutation and grouped GEMMs, dropless */
static void moe_step(gt_decoder *d, gt_stream *s, int l, int cur) {
    gt_model *m = d->m;
    gt_backend *b = d->b;
    const gt_model_dims *dm = &m->dm;
    const gt_moe_block *e = &m->layers[l].moe;
    b->ops->rmsnorm_fwd(b, s, d->ln, d->rstd, d->x[cur], gt_model_param(m, e->norm_w), 1, dm->d,
                        dm->eps);
    b->ops->matmul_fwd(b, s, d->e, d->ln, gt_model_param(m, e->router_w), NULL, NULL, 1, dm->E,
                       dm->d);
    b->ops->moe_router_fwd(b, s, d->probs, d->topk_idx, d->topk_w, d->counts, d->e, 1, dm->E, dm->k,
                           dm->router);
    b->ops->moe_permute(b, s, d->slot_token, d->token_slot, d->offsets, d->topk_idx, 1, dm->E,
                        dm->k, 0);
    b->ops->moe_gather(b, s, d->xe, d->ln, d->slot_token, dm->k, dm->k, dm->d);
    b->ops->moe_matmul_fwd(b, s, d->gue, d->xe, gt_model_param(m, e->gu_w), d->offsets, dm->k,
                           dm->E, 2 * dm->fe, dm->d);
    b->ops->swiglu_fwd(b, s, d->he, d->gue, dm->k, dm->fe);
    b->ops->moe_matmul_fwd(b, s, d->ye, d->he, gt_model_param(m, e->down_w), d->offsets, dm->k,
                           dm->E, dm->d, dm->fe);
    b->ops->moe_combine_fwd(b, s, d->y, d->ye, d->topk_w, d->token_slot, 1, dm->k, dm->d);
    b->ops->add(b, s, d->x[cur ^ 1], d->x[cur], d->y, (size_t)dm->d);
}

void gt_decoder_step(gt_decoder *d, gt_stream *s) {
    gt_model *m = d->m;
    gt_backend *b = d->b;
    b->ops->embedding_fwd(b, s, d->x[0], &d->st->token, gt_model_param(m, m->wte), 1, m->dm.d);
    int cur = 0;
    for (int l = 0; l < m->num_layers; l++) {
        const gt_layer *L = &m->layers[l];
        if (L->has_attn) attn_step(d, s, l, cur), cur ^= 1;
        if (L->has_mlp) mlp_step(d, s, l, cur), cur ^= 1;
        if (L->has_moe) moe_step(d, s, l, cur), cur ^= 1;
    }
    head(d, s, d->x[cur]);
}

void gt_decoder_sample(gt_decoder *d, gt_stream *s, gt_sample_params p) {
    d->ops->sample(d->b, s, d->st, d->logits, d->m->dm.V, p, d->ws_sample);
}
