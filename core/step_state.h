/* The per-step scalars that live in device memory (docs/design.md principle 2): step counter,
 * learning rate, loss, gradient norm, NaN flags. Kernels read and write them, so a captured
 * graph sees fresh values on every replay; the host only reads them asynchronously after a
 * step. On the CPU backend it is ordinary memory with the same layout. */
#ifndef GT_CORE_STEP_STATE_H
#define GT_CORE_STEP_STATE_H

#include <stdint.h>

enum {
    GT_NAN_LOSS = 1u << 0, /* loss was NaN/Inf (rerun_state_machine.check_for_nan_in_loss) */
    GT_NAN_GRAD = 1u << 1, /* gradient norm was NaN/Inf (ddp.check_for_nan_in_grad) */
    GT_NAN_FP8 = 1u << 2,  /* an fp8 amax was NaN/Inf or its scale overflowed (always on) */
};

typedef struct gt_step_state {
    int64_t step;       /* optimizer steps completed so far; advanced at the end of a step */
    float lr;           /* learning rate of the current step (computed on device) */
    float loss;         /* mean training loss of the current step, over all micro-batches */
    float aux_loss;     /* MoE load-balancing loss of the current step (already scaled) */
    float grad_norm;    /* global L2 norm of the gradients, before clipping */
    float clip_coef;    /* multiplier applied to gradients by the optimizer (<= 1) */
    uint32_t nan_flags; /* GT_NAN_* bits of the current step; nonzero => update skipped */
    uint32_t skipped;   /* 1 if the current step's update was skipped */
    int32_t nan_step;   /* step at which a NaN was first seen, -1 if never */
    uint32_t nan_first; /* GT_NAN_* bits at that first step */
    int32_t inject_nan; /* test hook: step at which the loss is forced to NaN, -1 = off */
    int32_t micro;      /* micro-batch index inside the step (dropout counters read it) */
    uint32_t pad_;
} gt_step_state;

/* Hyper-parameters of the learning-rate schedule: constants for the whole run, so passing
 * them by value into a captured kernel is graph-safe. */
typedef struct gt_lr_schedule {
    float lr_max;
    float lr_min;
    int32_t warmup_iters;
    int32_t decay_iters;
    int32_t style;           /* gt_lr_style */
    float warmup_init;       /* scheduler.lr_warmup_init: the warmup's line starts here */
    int32_t wsd_decay_iters; /* WSD: the annealing phase, the last of the decay iterations */
    int32_t wsd_style;       /* WSD: gt_wsd_style of the annealing phase */
} gt_lr_schedule;

typedef struct gt_adamw_params {
    float beta1;
    float beta2;
    float eps;
    float weight_decay;
    float clip_grad; /* <= 0: no clipping */
    int32_t m_bf16;  /* the first moment is stored in bf16 (else fp32) */
    int32_t v_bf16;  /* the second moment is stored in bf16 (else fp32) */
    /* master holds the int16 low halves of the fp32 master weights and params (bf16) their
     * high halves (core/bf16.h's gt_master_split); else master is fp32 */
    int32_t master_lo;
} gt_adamw_params;

#endif
