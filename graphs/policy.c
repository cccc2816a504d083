/* Capture policy: maps Bridge's graph keys onto eager / full-iteration / per-unit capture.
 * The scope table below is the one place that says which model units a scope covers. */
#include "graphs/policy.h"

#include <string.h>

typedef struct scope_entry {
    const char *name;
    uint32_t bit;
    unsigned units; /* bit (1u << gt_unit_kind) per unit the scope covers */
} scope_entry;

#define UNIT(k) (1u << (k))

static const scope_entry k_scopes[] = {
    {"attn", GT_SCOPE_ATTN, UNIT(GT_UNIT_ATTN)},
    {"mlp", GT_SCOPE_MLP, UNIT(GT_UNIT_MLP)},
    {"moe", GT_SCOPE_MOE,
     UNIT(GT_UNIT_MOE_ROUTER) | UNIT(GT_UNIT_MOE_PREPROCESS) | UNIT(GT_UNIT_MOE)},
    {"moe_router", GT_SCOPE_MOE_ROUTER, UNIT(GT_UNIT_MOE_ROUTER)},
    {"moe_preprocess", GT_SCOPE_MOE_PREPROCESS, UNIT(GT_UNIT_MOE_PREPROCESS)},
    {"mamba", GT_SCOPE_MAMBA, UNIT(GT_UNIT_MAMBA)},
};
#define N_SCOPES (sizeof k_scopes / sizeof k_scopes[0])

/* Every scoped mode name, indexed by the k_scopes entries selected (bit i = k_scopes[i]):
 * static strings, so a gt_graph_stats copied out stays valid after the runner is gone.
 * Index 0 (no scope) is rejected before it is used. */
static const char *const k_mode_names[1u << N_SCOPES] = {
    "scoped()",
    "scoped(attn)",
    "scoped(mlp)",
    "scoped(attn,mlp)",
    "scoped(moe)",
    "scoped(attn,moe)",
    "scoped(mlp,moe)",
    "scoped(attn,mlp,moe)",
    "scoped(moe_router)",
    "scoped(attn,moe_router)",
    "scoped(mlp,moe_router)",
    "scoped(attn,mlp,moe_router)",
    "scoped(moe,moe_router)",
    "scoped(attn,moe,moe_router)",
    "scoped(mlp,moe,moe_router)",
    "scoped(attn,mlp,moe,moe_router)",
    "scoped(moe_preprocess)",
    "scoped(attn,moe_preprocess)",
    "scoped(mlp,moe_preprocess)",
    "scoped(attn,mlp,moe_preprocess)",
    "scoped(moe,moe_preprocess)",
    "scoped(attn,moe,moe_preprocess)",
    "scoped(mlp,moe,moe_preprocess)",
    "scoped(attn,mlp,moe,moe_preprocess)",
    "scoped(moe_router,moe_preprocess)",
    "scoped(attn,moe_router,moe_preprocess)",
    "scoped(mlp,moe_router,moe_preprocess)",
    "scoped(attn,mlp,moe_router,moe_preprocess)",
    "scoped(moe,moe_router,moe_preprocess)",
    "scoped(attn,moe,moe_router,moe_preprocess)",
    "scoped(mlp,moe,moe_router,moe_preprocess)",
    "scoped(attn,mlp,moe,moe_router,moe_preprocess)",
    "scoped(mamba)",
    "scoped(attn,mamba)",
    "scoped(mlp,mamba)",
    "scoped(attn,mlp,mamba)",
    "scoped(moe,mamba)",
    "scoped(attn,moe,mamba)",
    "scoped(mlp,moe,mamba)",
    "scoped(attn,mlp,moe,mamba)",
    "scoped(moe_router,mamba)",
    "scoped(attn,moe_router,mamba)",
    "scoped(mlp,moe_router,mamba)",
    "scoped(attn,mlp,moe_router,mamba)",
    "scoped(moe,moe_router,mamba)",
    "scoped(attn,moe,moe_router,mamba)",
    "scoped(mlp,moe,moe_router,mamba)",
    "scoped(attn,mlp,moe,moe_router,mamba)",
    "scoped(moe_preprocess,mamba)",
    "scoped(attn,moe_preprocess,mamba)",
    "scoped(mlp,moe_preprocess,mamba)",
    "scoped(attn,mlp,moe_preprocess,mamba)",
    "scoped(moe,moe_preprocess,mamba)",
    "scoped(attn,moe,moe_preprocess,mamba)",
    "scoped(mlp,moe,moe_preprocess,mamba)",
    "scoped(attn,mlp,moe,moe_preprocess,mamba)",
    "scoped(moe_router,moe_preprocess,mamba)",
    "scoped(attn,moe_router,moe_preprocess,mamba)",
    "scoped(mlp,moe_router,moe_preprocess,mamba)",
    "scoped(attn,mlp,moe_router,moe_preprocess,mamba)",
    "scoped(moe,moe_router,moe_preprocess,mamba)",
    "scoped(attn,moe,moe_router,moe_preprocess,mamba)",
    "scoped(mlp,moe,moe_router,moe_preprocess,mamba)",
    "scoped(attn,mlp,moe,moe_router,moe_preprocess,mamba)",
};

unsigned gt_graph_scope_units(uint32_t scope_bit) {
    for (size_t i = 0; i < N_SCOPES; i++)
        if (k_scopes[i].bit == scope_bit) return k_scopes[i].units;
    return 0;
}

const char *gt_graph_scope_name(uint32_t scope_bit) {
    for (size_t i = 0; i < N_SCOPES; i++)
        if (k_scopes[i].bit == scope_bit) return k_scopes[i].name;
    return "unknown";
}

const char *gt_graph_unit_scope_name(int kind) {
    /* a unit kind and its scope share Bridge's name */
    return gt_unit_kind_name((gt_unit_kind)kind);
}

static int policy_scoped(const gt_config *cfg, gt_graph_policy *p, gt_error *err) {
    uint32_t scope = cfg->model.cuda_graph_scope;
    if (scope & GT_SCOPE_FULL_ITERATION)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.cuda_graph_scope=full_iteration needs "
                            "model.cuda_graph_impl=local (transformer_engine captures per-layer "
                            "scopes: attn, mlp, moe, moe_router, moe_preprocess, mamba)");
    if ((scope & GT_SCOPE_MOE) && (scope & GT_SCOPE_MOE_ROUTER))
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.cuda_graph_scope: moe and moe_router cannot be combined "
                            "(moe already covers the router); keep one of them");
    if ((scope & GT_SCOPE_MOE_PREPROCESS) && !(scope & GT_SCOPE_MOE_ROUTER))
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.cuda_graph_scope: moe_preprocess needs moe_router in the "
                            "scope too (the permutation consumes the router's top-k); add "
                            "moe_router");
    if (scope == 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.cuda_graph_impl=transformer_engine needs a "
                            "model.cuda_graph_scope: attn, mlp, moe, moe_router, "
                            "moe_preprocess and/or mamba (e.g. attn,mlp for a dense model)");
    unsigned name_index = 0;
    for (size_t i = 0; i < N_SCOPES; i++) {
        if (!(scope & k_scopes[i].bit)) continue;
        p->units |= k_scopes[i].units;
        for (int k = 0; k < GT_UNIT_KINDS; k++)
            if (k_scopes[i].units & UNIT(k)) p->unit_scope[k] = k_scopes[i].bit;
        name_index |= 1u << i;
    }
    p->mode = k_mode_names[name_index];
    p->scopes = scope;
    return GT_OK;
}

int gt_graph_policy_from_config(const gt_config *cfg, gt_graph_policy *p, gt_error *err) {
    memset(p, 0, sizeof *p);
    p->warmup = cfg->model.cuda_graph_warmup_steps;
    if (p->warmup < 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.cuda_graph_warmup_steps=%d must be >= 0 (Bridge uses 3)",
                            p->warmup);
    switch (cfg->model.cuda_graph_impl) {
    case GT_GRAPH_IMPL_NONE:
        p->kind = GT_POLICY_EAGER;
        p->mode = "eager";
        return GT_OK;
    case GT_GRAPH_IMPL_LOCAL:
        if (cfg->model.cuda_graph_scope != GT_SCOPE_FULL_ITERATION)
            return gt_error_set(err, GT_ERR_INVALID,
                                "model.cuda_graph_impl=local captures the full iteration only; "
                                "set model.cuda_graph_scope=full_iteration, or use "
                                "model.cuda_graph_impl=transformer_engine for per-layer scopes");
        p->kind = GT_POLICY_FULL;
        p->mode = "full_iteration";
        return GT_OK;
    case GT_GRAPH_IMPL_TE:
        p->kind = GT_POLICY_SCOPED;
        return policy_scoped(cfg, p, err);
    default:
        return gt_error_set(err, GT_ERR_INVALID,
                            "model.cuda_graph_impl has an unknown value (%d); use none, local "
                            "or transformer_engine",
                            (int)cfg->model.cuda_graph_impl);
    }
}
