/* Capture policy: turns model.cuda_graph_impl / cuda_graph_scope / cuda_graph_warmup_steps
 * into what the runner does (eager, one full-iteration graph, or per-unit graphs) and names
 * it for reports. The trainer reads it from the config and hands it to the runner. */
#ifndef GT_GRAPHS_POLICY_H
#define GT_GRAPHS_POLICY_H

#include <stdint.h>

#include "config/config.h"
#include "core/error.h"
#include "model/model.h"

typedef enum {
    GT_POLICY_EAGER,  /* cuda_graph_impl=none */
    GT_POLICY_FULL,   /* local + full_iteration: the whole step as one graph */
    GT_POLICY_SCOPED, /* transformer_engine + scopes: a forward and a backward graph per unit */
} gt_policy_kind;

typedef struct gt_graph_policy {
    gt_policy_kind kind;
    uint32_t scopes;                    /* scoped: the GT_SCOPE_* bits of model.cuda_graph_scope */
    unsigned units;                     /* scoped: bit (1u << gt_unit_kind) per captured unit */
    uint32_t unit_scope[GT_UNIT_KINDS]; /* the GT_SCOPE_* bit that selected each unit kind */
    int warmup;                         /* eager steps before the capture step */
    const char *mode;                   /* static: "eager", "full_iteration", "scoped(attn,mlp)" */
} gt_graph_policy;

/* Reads the graph keys of cfg; rejects combinations the engine cannot run, naming the keys
 * and the fix (config validation reports them earlier; this guards direct API use). */
int gt_graph_policy_from_config(const gt_config *cfg, gt_graph_policy *p, gt_error *err);

/* Unit kinds a scope bit selects. Bridge's `moe` scope is the whole MoE block (router,
 * preprocess, experts), as in Megatron's CudaGraphScope.moe. */
unsigned gt_graph_scope_units(uint32_t scope_bit);

/* Name of a scope bit as the config spells it ("moe_router"). */
const char *gt_graph_scope_name(uint32_t scope_bit);

/* Scope name of a unit kind ("attn", "mlp", "moe_router", "moe_preprocess", "moe"). */
const char *gt_graph_unit_scope_name(int kind);

#endif
