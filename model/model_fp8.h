/* The linear layers' GEMMs in bf16 or fp8 (model.compute_dtype fp8_cs / fp8_ds / fp8_sc): one
 * helper per GEMM of a linear layer, the fp8 state of every linear (scaling slots, the fp8
 * weight copies made once per step) and its place in the arenas. Embedding, norms, attention,
 * router and the output head keep the backend's plain matmuls. */
#ifndef GT_MODEL_MODEL_FP8_H
#define GT_MODEL_MODEL_FP8_H

#include "backend/backend.h"

typedef struct gt_model gt_model;

/* The linear layers of a layer, in the order of their fp8 state */
enum { GT_LIN_QKV, GT_LIN_O, GT_LIN_GU, GT_LIN_DOWN, GT_LINEARS };
/* A Mamba layer has neither attention nor MLP: its in_proj and out_proj take those slots */
enum { GT_LIN_MAMBA_IN = GT_LIN_QKV, GT_LIN_MAMBA_OUT = GT_LIN_DOWN };
/* Scaling slots of one linear: its input, its weight, the gradient of its output */
enum { GT_FP8_SLOT_X, GT_FP8_SLOT_W, GT_FP8_SLOT_G, GT_FP8_SLOTS };

typedef struct gt_fp8_linear {
    int on;          /* this linear's GEMMs run in fp8 */
    int weight;      /* parameter tensor index */
    int in, out;     /* weight [out, in] */
    int slot;        /* meta[slot + GT_FP8_SLOT_*] */
    void *qw, *qwt;  /* [out, in] and [in, out] fp8 copies of the weight; qwt is the shared
                      * fp8.w_t scratch, filled in the backward, when wt_in_backward */
    float *sw, *swt; /* their inverse scales */
    void *xt;        /* [in, N] fp8 input saved by the forward for the weight gradient, or NULL */
    float *sxt;      /* its inverse scale */
} gt_fp8_linear;

/* The experts' grouped GEMMs of a MoE layer, in the order of their fp8 state */
enum { GT_MOE_LIN_GU, GT_MOE_LIN_DOWN, GT_MOE_LINEARS };
/* Scaling slots of one expert linear: all routed tokens' input (one scale: the rows of every
 * expert are one tensor, cast once, whatever the routing), the gradient of its output (the
 * same), then one per expert's weight (Transformer Engine's GroupedLinear quantizes each
 * expert's weight on its own); GT_FP8_MOE_SLOT_W + E slots in all */
enum { GT_FP8_MOE_SLOT_X, GT_FP8_MOE_SLOT_G, GT_FP8_MOE_SLOT_W };

typedef struct gt_fp8_experts {
    int on;          /* this layer's expert GEMMs run in fp8 */
    int weight;      /* parameter tensor index: [E][out][in] */
    int in, out;     /* each expert's weight [out, in] */
    int slot;        /* meta[slot + GT_FP8_MOE_SLOT_*], weights from GT_FP8_MOE_SLOT_W */
    void *qw, *qwt;  /* [E][out][in] and [E][in][out] fp8 copies; qwt the shared fp8.w_t
                      * scratch when wt_in_backward */
    float *sw, *swt; /* [E] inverse scales of each */
} gt_fp8_experts;

typedef struct gt_model_fp8 {
    int enabled;
    gt_fp8_scaling scaling;
    gt_fp8_format fwd_format, grad_format;
    int history_len, use_max, margin;
    size_t elem;         /* bytes per fp8 element */
    gt_fp8_linear *lin;  /* [num_layers * GT_LINEARS] */
    int n_meta;          /* GT_FP8_SLOTS per linear that is on */
    gt_fp8_meta *meta;   /* [n_meta] device */
    float *history;      /* [n_meta * history_len] device (delayed scaling) */
    void *qa, *qb;       /* scratch: a GEMM's two casts of activations or gradients */
    int wt_in_backward;  /* one micro-batch a step: w^T cast before each data gradient into one
                          * buffer the layers share, not kept per layer from the step's start */
    void *wt;            /* that buffer (the largest weight's bytes), or NULL */
    float *sa, *sb;      /* their inverse scales */
    gt_fp8_experts *moe; /* [num_layers * GT_MOE_LINEARS] */
    int moe_on;          /* expert linears that are on */
    uint32_t *x_amax;    /* [num_layers * GT_LINEARS] scratch (current scaling): the bits of a
                          * linear's input amax, which the input's producer folds in for the
                          * cast (gt_linear_norm_fwd, gt_linear_swiglu_fwd); else NULL */
    uint32_t *g_amax;    /* the same for the output gradients: the bits of a linear's output
                          * gradient amax, which the backward's producer of that gradient folds
                          * in (gt_linear_swiglu_bwd, gt_model_norm_bwd); else NULL */
} gt_model_fp8;

/* 1 when the configuration runs its linear layers in fp8 */
int gt_model_fp8_configured(const gt_config *cfg);
/* 1 when layer l stays in bf16 under an fp8 recipe (model.first_last_layers_bf16 and the
 * counts of layers it keeps at the start and the end) */
int gt_model_fp8_layer_in_bf16(const gt_config *cfg, int l);
/* 1 when linear `lin` of `layer` keeps its input for the backward only as the fp8 x^T its
 * forward saves (per-tensor recipes; qkv, gate/up, down, whose bf16 inputs nothing else
 * reads backward), so the bf16 input's buffer may be one shared by the layers. */
int gt_model_fp8_saves_input(const gt_model *m, int layer, int lin);
/* Fills m->fp8 and plans its tensors (model_plan.c calls it last); releases with the model. */
int gt_model_fp8_plan(gt_model *m, gt_error *err);
void gt_model_fp8_release(gt_model *m);
/* After allocation: the initial scaling state (scale 1), written to the device. */
int gt_model_fp8_init(gt_model *m, gt_error *err);

/* Once per step before the first micro-batch (and before an evaluation, record 0): the fp8
 * copies of every fp8 weight from the bf16 parameters the last optimizer step wrote. */
void gt_model_fp8_cast_weights(gt_model *m, gt_stream *s, int record, gt_step_state *st);
/* Once per step after the optimizer: delayed scaling's amax history and next scales. */
void gt_model_fp8_step_end(gt_model *m, gt_stream *s, gt_step_state *st);

/* Delayed scaling's state on the device, which a checkpoint carries (model_fp8_state.c): 1 and
 * the slots and history when the model runs fp8_ds with fp8 linears, else 0. */
int gt_model_fp8_delayed_state(const gt_model *m, gt_fp8_meta **meta, float **history, int *n_meta,
                               int *history_len);

/* out[N, out] = x[N, in] @ w^T (+ bias) (+ res), linear `lin` of `layer`; record 0 (eval)
 * leaves the scaling state alone */
void gt_linear_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out, const void *x, int w,
                   int bias, const void *res, int record, gt_step_state *st);
/* Under current scaling the cast of a linear's input needs the input's amax before it can cast
 * anything: a pass of its own over the input, unless the kernel that made the input took the
 * amax as it wrote it (backend.h, rmsnorm_fwd_amax and swiglu_fwd_amax), which saves reading
 * the input once more. These run that producer for linear `lin` of `layer`: the layer's
 * RMSNorm into out[N, d] (rstd[N]; norm_w its weight) and SwiGLU of gu[N, 2f] into out[N, f].
 * Where the linear casts its input under current scaling and the backend has the op, the
 * producer folds the amax into the linear's slot, zeroed on s just before (inside the step,
 * so that graph replays start from zero too), and the slot is returned for
 * gt_linear_fwd_amax; else the plain op runs and NULL is returned. */
const uint32_t *gt_linear_norm_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out,
                                   float *rstd, const void *inp, int norm_w);
const uint32_t *gt_linear_swiglu_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out,
                                     const void *gu);
/* gt_linear_fwd whose input x's amax its producer took (x_amax from the two above: the same
 * codes, scales and state as the cast's own pass gives; NULL: gt_linear_fwd) */
void gt_linear_fwd_amax(gt_model *m, gt_stream *s, int layer, int lin, void *out, const void *x,
                        const uint32_t *x_amax, int w, int bias, const void *res, int record,
                        gt_step_state *st);
/* The backward's side of the same: SwiGLU's backward dgu[N, 2f] of gu (in place allowed), the
 * output gradient of linear `lin` (gate/up) of `layer`, with its amax folded into that
 * linear's slot where its cast needs one; the slot (for gt_linear_bwd_amax) or NULL. */
const uint32_t *gt_linear_swiglu_bwd(gt_model *m, gt_stream *s, int layer, int lin, void *dgu,
                                     const void *dout, const void *gu);
/* The residual gradient's: residual buffer r's gradient is the output gradient of the
 * projection that added into r in the forward (attention's o, the MLP's down), read as it is
 * when the branch has no dropout. The slot its amax goes to, zeroed on s when zero is set (by
 * the norm backward that writes the gradient, right before), or NULL where that projection's
 * cast takes no amax from its producer. The writer and the reader ask the same question. */
uint32_t *gt_res_grad_amax_slot(gt_model *m, gt_stream *s, int r, int zero);
/* The rotary embedding's backward over dqkv (gt_attn_dqkv), qkv's output gradient, with its
 * amax folded in where qkv's cast needs one and nothing changes dqkv after the rotation (no
 * qk norm); the slot or NULL */
const uint32_t *gt_linear_rope_bwd(gt_model *m, gt_stream *s, int layer, void *dqkv);
/* dx[N, in] = dout[N, out] @ w */
void gt_linear_bwd_data(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                        int w, int accumulate, gt_step_state *st);
/* grad(w) (+)= dout^T @ x, grad(bias) (+)= column sums of dout (under fp8 from the unquantized
 * dout) */
void gt_linear_bwd_weight(gt_model *m, gt_stream *s, int layer, int lin, int w, int bias,
                          const void *dout, const void *x, gt_step_state *st);
/* A linear layer's backward: dx[N, in] = dout @ w and, when wgrad, its weight (and bias)
 * gradient as gt_linear_bwd_weight. Under per-tensor fp8 dout is cast once to both layouts and
 * x^T takes the scale the forward recorded for x, so this is one pass over dout and one over x
 * (it must run before the linear's next forward). */
void gt_linear_bwd(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                   const void *x, int w, int bias, int wgrad, gt_step_state *st);
/* gt_linear_bwd whose dout's amax its producer took (dout_amax from the two above; NULL:
 * gt_linear_bwd) */
void gt_linear_bwd_amax(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                        const uint32_t *dout_amax, const void *x, int w, int bias, int wgrad,
                        gt_step_state *st);

/* The experts' grouped GEMMs (model_fp8_moe.c), bf16 or fp8 as the layer's dense linears:
 * out[R, out] = x[R, in] @ w[e]^T over the layer's offsets; record as gt_linear_fwd's */
void gt_moe_linear_fwd(gt_model *m, gt_stream *s, int layer, int lin, void *out, const void *x,
                       int record, gt_step_state *st);
/* dx[R, in] = dout @ w[e] and the weight gradient dw[e] (+)= dout^T @ x per group; under fp8
 * dout is cast once to both layouts and x^T takes the scale the forward recorded for x */
void gt_moe_linear_bwd(gt_model *m, gt_stream *s, int layer, int lin, void *dx, const void *dout,
                       const void *x, gt_step_state *st);

/* Shared with model_fp8_moe.c: the cast specs and the two-layout cast of model_fp8.c */
gt_fp8_cast_spec gt_model_fp8_spec(const gt_model_fp8 *f, gt_fp8_format fmt, int tile_rows,
                                   int record);
gt_fp8_cast_spec gt_model_fp8_spec_recorded(gt_fp8_format fmt);
void gt_model_fp8_cast_both(gt_model *m, gt_stream *s, void *q, float *sq, void *qt, float *sqt,
                            const void *x, int rows, int cols, gt_fp8_cast_spec sp,
                            gt_fp8_meta *meta, gt_step_state *st);
/* model_fp8_moe.c's parts of planning (after the dense linears: grows *qa, *qb, *wt, the
 * shared scratch's elements and bytes), of the weight casts and of init's checks */
int gt_model_fp8_plan_experts(gt_model *m, size_t *qa, size_t *qb, size_t *wt, gt_error *err);
void gt_model_fp8_cast_experts(gt_model *m, gt_stream *s, int record, gt_step_state *st);

#endif
