/* The transformer (Llama-style decoder, optionally MoE) as graphable units over arena
 * buffers. A layer is a list of units matching Bridge's scopes:
 *   dense layer: ATTN, MLP                MoE layer: ATTN, MOE_ROUTER, MOE_PREPROCESS, MOE
 *   hybrid layers (model.hybrid_override_pattern): one of ATTN, MLP, MAMBA, or the MoE units
 * Each unit has a forward and a backward that only touch arena buffers and the step state,
 * so graphs/ can run it eagerly or capture it. The parts outside every unit (embedding,
 * final norm + output head + loss) always belong to the full-iteration scope only.
 *
 * Memory: the model owns four arenas: params (act dtype, one flat array), grads (fp32, the
 * same order), activations (per layer, saved for backward), scratch. Parameters are laid out
 * with every weight-decayed tensor (2-D matrices) first, then the no-decay ones (norm
 * weights, biases), so the optimizer runs over flat arrays: decay on [0, n_decay). */
#ifndef GT_MODEL_MODEL_H
#define GT_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "config/config.h"

typedef enum {
    GT_UNIT_ATTN,
    GT_UNIT_MLP,
    GT_UNIT_MOE_ROUTER,
    GT_UNIT_MOE_PREPROCESS,
    GT_UNIT_MOE,   /* expert GEMMs + combine + residual */
    GT_UNIT_MAMBA, /* norm + Mamba-2 mixer + residual (an 'M' layer) */
    GT_UNIT_KINDS
} gt_unit_kind;

#define GT_MAX_UNITS_PER_LAYER 4

typedef struct gt_model gt_model;

/* How graphs/ takes over units: when non-NULL, gt_model_forward_backward calls run() for
 * every unit instead of gt_model_unit_run(); run() either runs the unit eagerly (by calling
 * gt_model_unit_run itself), captures it, or replays its graph. */
typedef struct gt_unit_exec {
    void *ctx;
    void (*run)(void *ctx, gt_model *m, gt_stream *s, int layer, int unit, int backward,
                gt_step_state *st);
} gt_unit_exec;

/* The data-parallel overlap's hook (ddp.overlap_grad_reduce): during gt_model_forward_backward
 * the model says which gradients, as ranges of the flat gradient array, it is about to write
 * (written: a reduction still reading them must finish first) and which are final for this
 * micro-batch (final: their reduction may start while the backward goes on). Every gradient
 * element is reported final exactly once per call, after its last write, and reported written
 * before its first. Calls come between units, never inside one, so unit graphs stay whole. */
typedef struct gt_grad_hook {
    void *ctx;
    void (*written)(void *ctx, gt_stream *s, size_t first, size_t n);
    void (*final)(void *ctx, gt_stream *s, size_t first, size_t n);
} gt_grad_hook;

typedef struct gt_model_info {
    int num_layers;
    size_t n_params;        /* elements in the flat parameter / gradient arrays */
    size_t n_decay;         /* the first n_decay elements get weight decay */
    void *params;           /* [n_params] act dtype */
    float *grads;           /* [n_params] fp32 */
    int tokens;             /* N = micro_batch_size * seq_length */
    double flops_per_token; /* 6*N_active + attention term / tokens (WORKLOADS.md formula) */
    size_t act_bytes, scratch_bytes, param_bytes, grad_bytes;
} gt_model_info;

/* Plans and allocates every arena; parameters are left zero (see gt_model_init_params). */
int gt_model_create(gt_model **m, const gt_config *cfg, gt_backend *b, gt_error *err);
void gt_model_destroy(gt_model *m);
const gt_model_info *gt_model_get_info(const gt_model *m);

/* Arena sizes for a config without allocating anything (memory plan / dry run). */
int gt_model_plan(const gt_config *cfg, size_t act_elem_bytes, gt_model_info *info, gt_error *err);
void gt_model_print_plan(const gt_model *m, FILE *f, int verbose);

/* Deterministic initial values (normal(0, init_method_std) for matrices from a seeded
 * generator, ones for norm weights, zeros for biases), written as fp32 into host_master
 * [n_params]; the caller uploads them (and keeps them as master weights). */
int gt_model_init_params(const gt_model *m, uint64_t seed, float *host_master, gt_error *err);

/* Named views of the flat parameter array, for checkpoints, tests and the PyTorch exchange. */
int gt_model_num_tensors(const gt_model *m);
/* name (e.g. "layers.3.attn.qkv_w"), offset into the flat array, shape (up to 3 dims) */
void gt_model_tensor(const gt_model *m, int i, const char **name, size_t *offset, int *ndim,
                     int shape[3]);

/* Units of a layer */
int gt_model_num_units(const gt_model *m, int layer);
gt_unit_kind gt_model_unit_kind(const gt_model *m, int layer, int unit);
const char *gt_unit_kind_name(gt_unit_kind k);

/* One unit, eagerly: forward (backward = 0) or backward (backward = 1). */
void gt_model_unit_run(gt_model *m, gt_stream *s, int layer, int unit, int backward,
                       gt_step_state *st);

/* One micro-batch: embedding, every unit forward, head + loss (adds dscale-weighted mean loss
 * into st->loss, where dscale = 1 / micro-batches), head backward, every unit backward in
 * reverse, embedding backward. Weight gradients accumulate into grads (accumulate 1) or
 * overwrite them (accumulate 0: the step's first micro-batch, which then needs no zeroed
 * gradients; every gradient is written). tokens / targets are device arrays [N]. exec may be
 * NULL (all eager); unit graphs replay the accumulate of the call that captured them. */
void gt_model_forward_backward(gt_model *m, gt_stream *s, const int32_t *tokens,
                               const int32_t *targets, float dscale, int accumulate,
                               gt_step_state *st, const gt_unit_exec *exec);

/* The hook for the next gt_model_forward_backward calls; NULL removes it. */
void gt_model_set_grad_hook(gt_model *m, const gt_grad_hook *h);

/* The marks of the embedding gradient's rows that may be nonzero (V bytes in the grads arena,
 * gt_grad_rows over the flat gradient array). The tokens of a step touch few of the
 * vocabulary's rows, so while the marks are kept, the step's first micro-batch zeroes only the
 * rows marked (those the last step touched) instead of the whole embedding gradient, and
 * grad_norm and adamw skip the loads of the other rows, which are zero: the same bits as
 * without them. Off until gt_model_track_embedding_rows, and then for good. Turn it on only
 * while every gradient is still zero, and only when nothing but the model writes the
 * gradients: a gradient-reduction hook adds rows other ranks touched, which the marks here
 * do not know. While off, the first micro-batch zeroes the whole embedding gradient. */
void gt_model_track_embedding_rows(gt_model *m);
/* The marks for grad_norm and adamw, with the embedding's lazy rows (gt_grad_rows.lag: the
 * rows' optimizer steps, which the trainer keeps); GT_NO_GRAD_ROWS while off */
gt_grad_rows gt_model_grad_rows(const gt_model *m);

/* Forward only (evaluation, no dropout): adds scale * mean loss into st->loss, where st is
 * a separate step state kept for evaluation. */
void gt_model_forward_loss(gt_model *m, gt_stream *s, const int32_t *tokens, const int32_t *targets,
                           float scale, gt_step_state *st);

/* Forward only (no dropout, no loss) to the logits [N, V] (act dtype, in the model's scratch,
 * valid until the next call that runs the model): for checks against other implementations
 * and for sampling. tokens is a device array [N]. */
const void *gt_model_forward_logits(gt_model *m, gt_stream *s, const int32_t *tokens,
                                    gt_step_state *st);

#endif
