/* The data-parallel overlap's hook points in the backward (gt_grad_hook, model.h): which
 * gradients each part of gt_model_forward_backward writes and when each is final. A layer's
 * matrices are final after its units unless their weight gradient waits for the batched flush
 * (defer_*); the vectors (norm weights, biases, Mamba's small tensors: the parameters from
 * n_decay on) only after the norm-gradient sums; the embedding after its scatter-add. */
#include "model/model_internal.h"

void gt_model_set_grad_hook(gt_model *m, const gt_grad_hook *h) {
    if (h)
        m->hook = *h;
    else
        m->hook = (gt_grad_hook){0};
}

void gt_model_hook_range(gt_model *m, gt_stream *s, int final, size_t first, size_t n) {
    if (!m->hook.final || !n) return;
    if (final)
        m->hook.final(m->hook.ctx, s, first, n);
    else
        m->hook.written(m->hook.ctx, s, first, n);
}

void gt_model_hook_tensor(gt_model *m, gt_stream *s, int final, int idx) {
    if (idx < 0) return;
    const gt_model_tensor_desc *t = &m->tensors[idx];
    gt_model_hook_range(m, s, final, t->offset, t->numel);
}

/* Every tensor of layer l, or (matrices) its decayed ones */
static int layer_tensors(const gt_model *m, int l, int matrices, int out[GT_HOOK_LAYER_MAX]) {
    const gt_layer *L = &m->layers[l];
    const gt_mamba_block *mb = &L->mamba;
    int all[] = {L->attn.qkv_w,   L->attn.o_w,      L->mlp.gu_w,      L->mlp.down_w,
                 L->moe.router_w, L->moe.gu_w,      L->moe.down_w,    mb->in_w,
                 mb->conv_w,      mb->out_w,        L->attn.norm_w,   L->attn.qkv_b,
                 L->attn.o_b,     L->attn.q_norm_w, L->attn.k_norm_w, L->mlp.norm_w,
                 L->mlp.gu_b,     L->mlp.down_b,    L->moe.norm_w,    mb->norm_w,
                 mb->conv_b,      mb->dt_bias,      mb->A_log,        mb->D,
                 mb->gnorm_w};
    enum { N_MATRICES = 10 };
    _Static_assert(sizeof all / sizeof all[0] <= GT_HOOK_LAYER_MAX, "room for a layer's tensors");
    int n = 0, count = matrices ? N_MATRICES : (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < count; i++)
        if (all[i] >= 0) out[n++] = all[i];
    return n;
}

static int deferred(const gt_layer *L, int idx) {
    return (idx == L->attn.qkv_w && L->attn.defer_qkv) || (idx == L->attn.o_w && L->attn.defer_o) ||
           (idx == L->mlp.gu_w && L->mlp.defer_gu) || (idx == L->mlp.down_w && L->mlp.defer_down);
}

void gt_model_hook_layer_written(gt_model *m, gt_stream *s, int l) {
    if (!m->hook.final) return;
    int t[GT_HOOK_LAYER_MAX], n = layer_tensors(m, l, 0, t);
    for (int i = 0; i < n; i++)
        gt_model_hook_tensor(m, s, 0, t[i]);
}

void gt_model_hook_layer_final(gt_model *m, gt_stream *s, int l, int deferred_ones) {
    if (!m->hook.final) return;
    int t[GT_HOOK_LAYER_MAX], n = layer_tensors(m, l, 1, t);
    for (int i = 0; i < n; i++)
        if (deferred(&m->layers[l], t[i]) == deferred_ones) gt_model_hook_tensor(m, s, 1, t[i]);
}
