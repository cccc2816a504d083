/* Internals of the transformer shared by the model sources: the parameter table, the per-layer
 * blocks with the activations they save for backward, and the scratch buffers the units share.
 * Every pointer here is bound to an arena once at gt_model_create and never changes. */
#ifndef GT_MODEL_MODEL_INTERNAL_H
#define GT_MODEL_MODEL_INTERNAL_H

#include "core/arena.h"
#include "model/model.h"
#include "model/model_fp8.h"

#define GT_MODEL_NAME_MAX 48
/* Every tensor starts at a multiple of this many elements of the flat parameter array, so
 * each one is aligned for vectorized loads and cuBLASLt (128 bytes in bf16). */
#define GT_MODEL_TENSOR_ALIGN 64

/* Dropout call sites inside a layer: gt_rng_site.site = layer * GT_SITES_PER_LAYER + k. */
enum {
    GT_SITE_ATTN_PROBS = 0, /* attention probabilities (model.attention_dropout) */
    GT_SITE_ATTN_OUT = 1,   /* attention block output (model.hidden_dropout) */
    GT_SITE_MLP_OUT = 2,    /* MLP block output */
    GT_SITE_MOE_OUT = 3,    /* MoE block output */
    GT_SITE_MAMBA_OUT = 4,  /* Mamba block output */
    GT_SITES_PER_LAYER = 16,
};

typedef struct gt_model_tensor_desc {
    char name[GT_MODEL_NAME_MAX];
    size_t offset; /* elements into the flat parameter / gradient arrays */
    size_t numel;
    int ndim;
    int shape[3];
    int decay;
} gt_model_tensor_desc;

/* Attention block: rmsnorm -> qkv (+bias) -> rope -> causal GQA attention -> o (+bias) ->
 * dropout -> residual add. Tensor fields are indices into the parameter table (-1: absent). */
typedef struct gt_attn_block {
    int res_in, res_out; /* residual stream buffers read and written */
    int norm_w, qkv_w, qkv_b, o_w, o_b;
    void *ln;       /* [N, d] normalized input */
    float *rstd;    /* [N] */
    float *dw_part; /* [gt_rmsnorm_parts_bound(N), d] the norm's weight-gradient partials */
    void *qkv;      /* [N, (H + 2*KV) * hd] after rope */
    void *att;      /* [N, H * hd] attention output */
    float *lse;     /* [B, H, T] */
    /* model.qk_layernorm: per-head RMSNorm of q and k between the QKV GEMM and rope */
    int q_norm_w, k_norm_w; /* [hd] each; -1 without */
    void *qk_raw;           /* [N, (H + KV) * hd] q and k before the norm */
    float *qk_rstd;         /* [N, H + KV] */
    float *qk_part;         /* [2][gt_rmsnorm_parts_bound(N), hd] dqw then dkw partial rows */
    /* weight gradients left to flush_wgrads (model_run.c), batched over the layers:
     * qkv's when the next layer has attention too (dqkv then goes to that layer's qkv, dead
     * by then); o's when its output gradient stays in the residual buffers (no hidden
     * dropout). Never with biases. */
    int defer_qkv, defer_o;
} gt_attn_block;

/* MLP block: rmsnorm -> gate_up (+bias) -> swiglu -> down (+bias) -> dropout -> add. */
typedef struct gt_mlp_block {
    int res_in, res_out;
    int norm_w, gu_w, gu_b, down_w, down_b;
    void *ln;       /* [N, d] */
    float *rstd;    /* [N] */
    float *dw_part; /* [gt_rmsnorm_parts_bound(N), d] */
    void *gu;       /* [N, 2f] gate then up; in backward their gradient, written over them */
    void *h;        /* [N, f] swiglu output */
    int defer_gu, defer_down; /* as gt_attn_block's: no biases; down also no hidden dropout */
} gt_mlp_block;

/* MoE block, split over three units: router (norm, logits, top-k, aux loss), preprocess
 * (permutation and gather), experts (grouped GEMMs, combine, dropout, residual add). */
typedef struct gt_moe_block {
    int res_in, res_out;
    int norm_w, router_w, gu_w, down_w;
    void *ln;            /* [N, d] */
    float *rstd;         /* [N] */
    float *dw_part;      /* [gt_rmsnorm_parts_bound(N), d] */
    float *probs;        /* [N, E] */
    int32_t *topk_idx;   /* [N, k] */
    float *topk_w;       /* [N, k] */
    int32_t *counts;     /* [E] */
    int32_t *slot_token; /* [R] */
    int32_t *token_slot; /* [N * k] */
    int32_t *offsets;    /* [E + 1] */
    void *xe;            /* [R, d] permuted tokens */
    void *gue;           /* [R, 2 * fe] */
    void *he;            /* [R, fe] */
    void *ye;            /* [R, d] expert outputs */
} gt_moe_block;

/* What a layer recomputes in its backward instead of saving (model/recompute.c): the
 * config's modules mapped onto the blocks. Full recompute sets every bit of the layer. */
enum {
    GT_RC_ATTN_NORM = 1u << 0, /* attn.ln, attn.rstd (layernorm) */
    GT_RC_QKV = 1u << 1,       /* attn.qkv (full only) */
    GT_RC_CORE_ATTN = 1u << 2, /* attn.att, attn.lse (core_attn) */
    GT_RC_MLP_NORM = 1u << 3,  /* mlp.ln, mlp.rstd (layernorm) */
    GT_RC_MLP = 1u << 4,       /* mlp.gu, mlp.h (mlp) */
    GT_RC_MOE_NORM = 1u << 5,  /* moe.ln, moe.rstd (layernorm) */
    GT_RC_MOE = 1u << 6,       /* routing, permutation and expert activations (moe) */
    GT_RC_MOE_ACT = 1u << 7,   /* moe.he (moe_act) */
    /* full only, layers of attention + MLP/MoE: the residual between the two blocks, whose
     * backward then starts with the attention's whole forward (Megatron keeps only the
     * layer's input); the attention's backward finds its activations already there */
    GT_RC_MID_RESIDUAL = 1u << 8,
};

/* A recomputed activation has one buffer shared by every layer that recomputes it: the
 * backward of a block recomputes it just before reading it, so no two layers need it at once.
 * The first layer's field is bound by the arena; the others copy it (gt_model_bind_recompute). */
typedef struct gt_rc_alias {
    void **dst;
    void **src;
} gt_rc_alias;
/* Mamba block (model_mamba.c): rmsnorm -> in_proj -> conv1d + SiLU over xBC -> SSD scan ->
 * RMSNorm gated by z -> out_proj -> dropout -> residual add. Shapes: gt_mamba_shape. */
typedef struct gt_mamba_block {
    int res_in, res_out;
    int norm_w, in_w, conv_w, conv_b, dt_bias, A_log, D, gnorm_w, out_w;
    void *ln;       /* [N, d] */
    float *rstd;    /* [N] */
    float *dw_part; /* [gt_rmsnorm_parts_bound(N), d] */
    void *zxbcdt;   /* [N, in] the input projection: z | x | B | C | dt */
    void *xbc;      /* [N, conv] x | B | C after the convolution and SiLU */
    void *y;        /* [N, di] the scan's output */
    void *g;        /* [N, di] the gated norm's output, out_proj's input */
    float *grstd;   /* [N, G] the gated norm's statistics */
    float *ssd;     /* [gt_mamba_ssd_state_floats] what the scan's forward keeps for its
                       backward (NULL where the backend keeps none) */
} gt_mamba_block;

typedef struct gt_layer {
    unsigned rc; /* GT_RC_* bits */
    int n_units;
    gt_unit_kind kinds[GT_MAX_UNITS_PER_LAYER];
    int has_attn, has_mlp, has_moe, has_mamba;
    gt_attn_block attn;
    gt_mlp_block mlp;
    gt_moe_block moe;
    gt_mamba_block mamba;
} gt_layer;

/* Buffers shared by every unit; none of them carries a value from forward to backward. The
 * gradient of the residual stream has none: backward writes the gradient of residual buffer i
 * over res[i] itself, once the norm that reads res[i] is done with it, so each unit's output
 * gradient stays put until the weight gradients left for later have used it. */
typedef struct gt_model_scratch {
    void *y;        /* [N, d] branch output (forward) / its gradient (backward) */
    void *dln;      /* [N, d] gradient of a normalized input */
    void *a;        /* [max(N*H*hd, N*f, R*fe)] datt / dh / dhe */
    void *bb;       /* [max(N*qkv, N*2f, R*2fe)] dqkv / dgu / dgue */
    void *r;        /* [R, d] dye, then dxe */
    void *e;        /* [N, E] router logits / their gradient */
    float *dtopk_w; /* [N, k] */
    void *mdy;      /* [N, di] Mamba: the scan output's gradient */
    void *mdxbc;    /* [N, conv] Mamba: the convolution output's gradient */
    float *mws;     /* [gt_mamba_ws_floats] the Mamba ops' workspace */
    void *logits;   /* [N, V] logits, then their gradient */
    float *losses;  /* [N] */
} gt_model_scratch;

/* Shapes derived from the config, fixed for the model's lifetime. */
typedef struct gt_model_dims {
    int B, T, N, d, H, KV, hd, qkv, f, V;
    int E, k, fe, capacity, R; /* MoE: R rows of the permuted tokens */
    float eps, theta, p_attn, p_hidden, aux_coeff;
    float rope_factor; /* Llama 3.1 rotary scaling factor (model.rope_scaling); 0 = none */
    int qkv_bias, lin_bias;
    gt_mamba_shape ms;     /* Mamba layers (all zero without) */
    int tied;              /* model.share_embeddings_and_output_weights: lm_w is wte */
    int qk_norm;           /* model.qk_layernorm */
    gt_router_mode router; /* model.moe_router_pre_softmax, moe_router_topk_scaling_factor */
} gt_model_dims;

struct gt_model {
    gt_config cfg;
    gt_backend *b; /* NULL for a plan without allocation */
    gt_model_dims dm;
    int num_layers;
    gt_layer *layers; /* [num_layers] */
    int n_res;        /* residual buffers */
    void **res;       /* [n_res] each [N, d] */
    gt_model_tensor_desc *tensors;
    int n_tensors, cap_tensors;
    int wte, lm_w, final_w; /* tensor indices */
    void *lnf;              /* [N, d] final norm output */
    float *rstdf;           /* [N] */
    float *dw_partf;        /* [gt_rmsnorm_parts_bound(N), d] */
    gt_model_scratch sc;
    gt_arena params, grads, acts, scratch;
    void *params_base;  /* [n_params] act dtype */
    float *grads_base;  /* [n_params] */
    uint8_t *emb_dirty; /* [V] marks of the embedding gradient's rows (grads arena) */
    int32_t *emb_lag;   /* [V] the rows' lazy optimizer steps (gt_grad_rows.lag; grads arena) */
    int emb_track;      /* the marks are kept (gt_model_track_embedding_rows) */
    size_t act_elem;    /* bytes per act element */
    gt_model_info info;
    float dscale;      /* of the running forward_backward (constant over a run) */
    int grad_acc;      /* of the running forward_backward: weight gradients += (1) or = (0) */
    gt_grad_hook hook; /* gt_model_set_grad_hook; final is NULL when none */
    size_t n_real;     /* parameters without alignment padding */
    gt_model_fp8 fp8;  /* the linear layers' fp8 state (model_fp8.c); enabled 0 under bf16 */
    /* [n_rc_alias] the layer fields that take a shared recompute buffer */
    gt_rc_alias *rc_alias;
    int n_rc_alias;
};

/* Planning (model_plan.c): fills everything but the arena allocations. */
int gt_model_build(gt_model *m, const gt_config *cfg, size_t act_elem, gt_error *err);
void gt_model_release(gt_model *m);

/* Recompute (recompute.c). plan: each layer's GT_RC_* bits from the model.recompute_* keys,
 * refusing modules the model does not have. plan_act: plans activation `name` (a "%d"
 * format of the layer) of `bytes` per layer, or once in a shared buffer when `shared`.
 * bind: gives the layers their shared buffers once the activation arena is bound. */
int gt_model_plan_recompute(gt_model *m, gt_error *err);
int gt_model_plan_act(gt_model *m, int layer, int shared, const char *name, size_t bytes,
                      void **ptr, gt_error *err);
void gt_model_bind_recompute(gt_model *m);
/* The recomputed forward of a block, run first in its backward (a no-op without GT_RC_*
 * bits for it): the same ops on the same inputs and Philox sites as the forward, so the
 * activations come back bit for bit; nothing is added to the loss or the residual stream. */
void gt_attn_recompute(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_mlp_recompute(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_moe_experts_recompute(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_moe_router_recompute(gt_model *m, gt_stream *s, int layer);

/* Parameter / gradient pointers of tensor i (NULL for i < 0). */
void *gt_model_param(const gt_model *m, int i);
float *gt_model_grad(const gt_model *m, int i);

/* Unit bodies (model_dense.c, model_moe.c); train = 0 disables dropout and the aux loss. */
void gt_attn_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st);
void gt_attn_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_mlp_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st);
void gt_mlp_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_moe_router_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st);
void gt_moe_router_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_moe_preprocess_fwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_moe_preprocess_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);
void gt_moe_experts_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st);
void gt_moe_experts_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);

void gt_mamba_fwd(gt_model *m, gt_stream *s, int layer, int train, gt_step_state *st);
void gt_mamba_bwd(gt_model *m, gt_stream *s, int layer, gt_step_state *st);

/* Mamba planning and initialization (model_mamba.c): dm->ms from the mamba_* keys (checked);
 * the initial values of tensor i's elements [lo, hi) when it is a Mamba tensor (returns 1,
 * else 0), as Megatron's MambaMixer initializes them. */
int gt_mamba_check_dims(gt_model *m, gt_error *err);
int gt_mamba_init_tensor(const gt_model *m, int i, uint64_t seed, float *p, size_t lo, size_t hi);

/* Rotary embedding of the attention's q and k in qkv [N, qkv], with Llama 3.1's scaling when
 * model.rope_scaling is set (model_dense.c); the forward and its recompute share it. */
void gt_model_rope_fwd(gt_model *m, gt_stream *s, void *qkv);
/* With model.qk_layernorm, the q/k norm of layer l's qkv (a->qkv) before rope, keeping what
 * its backward reads; the forward and its recompute share it (model_qk_norm.c). */
void gt_model_qk_norm_fwd(gt_model *m, gt_stream *s, int layer);
/* Its backward, in place on dqkv (after rope's backward), leaving the weight-gradient partials
 * in a->qk_part for norm_grads (model_run.c). */
void gt_model_qk_norm_bwd(gt_model *m, gt_stream *s, int layer, void *dqkv);

/* Block output (model_dense.c): y = dropout(y) in training; out = x + y. */
void gt_model_residual_out(gt_model *m, gt_stream *s, void *out, const void *x, void *y, int layer,
                           int site, int train, gt_step_state *st);
/* A block's output projection and residual: out = x + dropout(inp @ w^T + bias). Without
 * dropout the add rides in the GEMM's epilogue (one pass over out, no sc.y round trip). */
void gt_model_proj_residual(gt_model *m, gt_stream *s, void *out, const void *x, const void *inp,
                            int w, int bias, int K, int layer, int site, int train,
                            gt_step_state *st);
/* Gradient of a block's output branch: that of residual buffer res_out (in res[res_out]),
 * through the dropout mask into sc.y when there is hidden dropout. */
const void *gt_model_branch_grad(gt_model *m, gt_stream *s, int res_out, int layer, int site,
                                 gt_step_state *st);
/* The backward of a block's input norm: res[res_in] = res[res_out] (zeros for res_out < 0,
 * the final norm) + the gradient through the norm from sc.dln, written over the block's
 * input, which the norm reads first. */
void gt_model_norm_bwd(gt_model *m, gt_stream *s, int res_in, int res_out, int norm_w,
                       float *dw_part, const float *rstd);

/* Where layer l's attention backward leaves dqkv: the next layer's qkv activation, dead by
 * then, when its weight gradient is deferred (it must stay until the flush), else scratch. */
static inline void *gt_attn_dqkv(const gt_model *m, int l) {
    return m->layers[l].attn.defer_qkv ? m->layers[l + 1].attn.qkv : m->sc.bb;
}

static inline gt_rng_site gt_model_site(const gt_model *m, int layer, int k) {
    gt_rng_site site = {m->cfg.rng.seed, (uint32_t)(layer * GT_SITES_PER_LAYER + k), 0};
    return site;
}

/* grad_hook.c: the overlap hook's calls (no-ops without a hook). final 0: written. */
#define GT_HOOK_LAYER_MAX 32
void gt_model_hook_range(gt_model *m, gt_stream *s, int final, size_t first, size_t n);
void gt_model_hook_tensor(gt_model *m, gt_stream *s, int final, int idx);
void gt_model_hook_layer_written(gt_model *m, gt_stream *s, int l);
/* layer l's matrices that are final after its units (deferred_ones 0) or after the flush (1) */
void gt_model_hook_layer_final(gt_model *m, gt_stream *s, int l, int deferred_ones);

/* Adds a named buffer to an arena inside a planning function (its int rc and gt_error *err),
 * returning the error from it */
#define PLAN(arena, name, bytes, ptr)                                                              \
    do {                                                                                           \
        if ((rc = gt_arena_add(arena, name, bytes, (void **)(ptr), err))) return rc;               \
    } while (0)

static inline size_t gt_max_size(size_t a, size_t b) {
    return a > b ? a : b;
}

#endif
