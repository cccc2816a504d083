/* The device memory a configuration needs, computed from the plan without allocating: the
 * model's arenas, the optimizer's, and an allowance for backend workspaces. The trainer
 * refuses a run that cannot fit before it allocates anything; `graphtrain validate` prints
 * the same plan. */
#ifndef GT_MODEL_MEMORY_PLAN_H
#define GT_MODEL_MEMORY_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

typedef struct gt_memory_plan {
    size_t params, grads, activations, scratch; /* model arenas */
    size_t optimizer;                           /* master + Adam m and v */
    size_t workspace;                           /* allowance: cuBLASLt, attention, reductions */
    size_t total;
} gt_memory_plan;

/* Bytes of a parameter's master weight beside its compute copy: 2 where the compute copy is
 * bf16 (the master's int16 low halves, core/bf16.h's gt_master_split), else 4 (fp32). */
static inline size_t gt_master_elem_bytes(size_t act_bytes) {
    return act_bytes == 2 ? 2 : 4;
}

/* act_bytes: bytes per compute element (2 for the cuda backend's bf16, 4 for cpu). */
int gt_memory_plan_compute(const gt_config *cfg, size_t act_bytes, gt_memory_plan *p,
                           gt_error *err);
void gt_memory_plan_print(const gt_memory_plan *p, const char *backend, FILE *f);
/* GT_ERR_NOMEM with the estimate and the knobs to turn when total > free_bytes. */
int gt_memory_plan_check_fit(const gt_memory_plan *p, size_t free_bytes, gt_error *err);

#endif
