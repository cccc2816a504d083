/* Per-unit graphs (cuda_graph_impl=transformer_engine): the model calls
 * gt_runner_unit_run for every unit of every layer; units outside the selected scopes run
 * eagerly, selected ones are captured at the capture step (in the middle of an otherwise
 * eager step, on the same stream) and replayed from then on, once per micro-batch. */
#include <stdio.h>
#include <stdlib.h>

#include "graphs/runner_impl.h"

static int slot_of(int layer, int unit, int backward) {
    return (layer * GT_MAX_UNITS_PER_LAYER + unit) * 2 + backward;
}

int gt_runner_units_init(gt_graph_runner *r, gt_error *err) {
    const gt_model_info *info = gt_model_get_info(r->m);
    r->layers = info->num_layers;
    size_t n = (size_t)r->layers * GT_MAX_UNITS_PER_LAYER * 2;
    /* an array of gt_graph pointers: sizeof a pointer is meant (clang-tidy takes it for a
     * sizeof(struct *) slip) */
    // NOLINTNEXTLINE(bugprone-sizeof-expression)
    r->unit_graphs = calloc(n ? n : 1, sizeof *r->unit_graphs);
    r->unit_nodes = calloc(n ? n : 1, sizeof *r->unit_nodes);
    if (!r->unit_graphs || !r->unit_nodes)
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the unit graph table");
    /* every selected scope must match some unit of this model: a scope that captures nothing
     * is a configuration mistake, not something to skip silently */
    unsigned present = 0;
    for (int l = 0; l < r->layers; l++)
        for (int u = 0; u < gt_model_num_units(r->m, l); u++)
            present |= 1u << gt_model_unit_kind(r->m, l, u);
    uint32_t scope = r->pol.scopes;
    for (uint32_t bit = 1; bit && bit <= GT_SCOPE_MAMBA; bit <<= 1) {
        if (!(scope & bit)) continue;
        unsigned want = gt_graph_scope_units(bit);
        if (want && !(want & present))
            return gt_error_set(err, GT_ERR_INVALID,
                                "model.cuda_graph_scope includes %s but this model has no "
                                "such layers (check model.num_moe_experts / "
                                "model.hybrid_override_pattern); remove it from the scope",
                                gt_graph_scope_name(bit));
    }
    r->active_units = r->pol.units;
    r->exec.ctx = r;
    r->exec.run = gt_runner_unit_run;
    return GT_OK;
}

void gt_runner_units_release(gt_graph_runner *r) {
    if (r->unit_graphs) {
        size_t n = (size_t)r->layers * GT_MAX_UNITS_PER_LAYER * 2;
        for (size_t i = 0; i < n; i++)
            if (r->unit_graphs[i]) r->b->ops->graph_destroy(r->b, r->unit_graphs[i]);
    }
    free(r->unit_graphs);
    free(r->unit_nodes);
    r->unit_graphs = NULL;
    r->unit_nodes = NULL;
}

int gt_runner_units_alive(const gt_graph_runner *r, int *nodes) {
    int alive = 0, total = 0;
    if (r->unit_graphs) {
        size_t n = (size_t)r->layers * GT_MAX_UNITS_PER_LAYER * 2;
        for (size_t i = 0; i < n; i++)
            if (r->unit_graphs[i]) {
                alive++;
                total += r->unit_nodes[i];
            }
    }
    if (nodes) *nodes = total;
    return alive;
}

int gt_runner_units_alive_kind(const gt_graph_runner *r, int kind) {
    int alive = 0;
    if (!r->unit_graphs) return 0;
    for (int l = 0; l < r->layers; l++)
        for (int u = 0; u < gt_model_num_units(r->m, l); u++)
            if ((int)gt_model_unit_kind(r->m, l, u) == kind)
                alive += (r->unit_graphs[slot_of(l, u, 0)] != NULL) +
                         (r->unit_graphs[slot_of(l, u, 1)] != NULL);
    return alive;
}

void gt_runner_units_after_step(gt_graph_runner *r) {
    if (!r->fallen_units || !r->unit_graphs) return;
    for (int l = 0; l < r->layers; l++)
        for (int u = 0; u < gt_model_num_units(r->m, l); u++) {
            if (!(r->fallen_units & (1u << gt_model_unit_kind(r->m, l, u)))) continue;
            for (int bwd = 0; bwd < 2; bwd++) {
                int i = slot_of(l, u, bwd);
                if (r->unit_graphs[i]) r->b->ops->graph_destroy(r->b, r->unit_graphs[i]);
                r->unit_graphs[i] = NULL;
                r->unit_nodes[i] = 0;
            }
        }
    r->fallen_units = 0;
}

typedef struct unit_body {
    gt_model *m;
    int layer, unit, backward;
    gt_step_state *st;
} unit_body;

static void run_unit_body(void *ctx, gt_stream *s) {
    unit_body *u = ctx;
    gt_model_unit_run(u->m, s, u->layer, u->unit, u->backward, u->st);
}

static void keep_pending(gt_graph_runner *r, const gt_error *e) {
    if (r->pending.code == GT_OK) r->pending = *e;
}

/* Turns every kind of the scope that selected `kind` off (the whole configured scope falls
 * back, e.g. all three MoE units for `moe`). */
static void fall_back_scope(gt_graph_runner *r, int kind) {
    unsigned kinds = gt_graph_scope_units(r->pol.unit_scope[kind]);
    r->active_units &= ~kinds;
    r->fallen_units |= kinds;
}

void gt_runner_unit_run(void *ctx, gt_model *m, gt_stream *s, int layer, int unit, int backward,
                        gt_step_state *st) {
    gt_graph_runner *r = ctx;
    int kind = (int)gt_model_unit_kind(m, layer, unit);
    int i = slot_of(layer, unit, backward);
    if (layer < 0 || layer >= r->layers || unit < 0 || unit >= GT_MAX_UNITS_PER_LAYER || kind < 0 ||
        kind >= GT_UNIT_KINDS || !(r->active_units & (1u << kind))) {
        /* not a captured scope (or not a unit this table knows: the model reports it) */
        gt_model_unit_run(m, s, layer, unit, backward, st);
        return;
    }
    gt_error e;
    gt_error_clear(&e);
    if (r->unit_graphs[i]) {
        if (r->b->ops->graph_launch(r->b, r->unit_graphs[i], s, &e) != GT_OK) keep_pending(r, &e);
        r->step_replayed = 1;
        return;
    }
    /* not captured: before the capture step, after a failure that stops the run, or when an
     * op already failed in this step (the trainer reports that one) */
    if (!r->capture_now || r->pending.code != GT_OK || r->b->sticky.code != GT_OK) {
        gt_model_unit_run(m, s, layer, unit, backward, st);
        return;
    }
    char label[96];
    snprintf(label, sizeof label, "layer %d %s %s", layer, gt_graph_unit_scope_name(kind),
             backward ? "backward" : "forward");
    unit_body body = {m, layer, unit, backward, st};
    gt_capture_result res;
    int rc = gt_graph_capture(r->b, s, GT_CAPTURE_THREAD_LOCAL, label,
                              gt_runner_force_matches(r, label), run_unit_body, &body, &res, &e);
    if (rc == GT_OK) {
        r->unit_graphs[i] = res.graph;
        r->unit_nodes[i] = res.nodes;
        gt_runner_note_capture(r, &res);
        r->step_captured = 1;
        if (r->b->ops->graph_launch(r->b, res.graph, s, &e) != GT_OK) keep_pending(r, &e);
        return;
    }
    char what[128];
    snprintf(what, sizeof what, "the %s scope", gt_graph_scope_name(r->pol.unit_scope[kind]));
    if (gt_runner_capture_failed(r, what, &e) != GT_OK)
        keep_pending(r, &e);
    else
        fall_back_scope(r, kind);
    /* the failed capture ran nothing: run the unit for real so the step stays correct */
    gt_model_unit_run(m, s, layer, unit, backward, st);
}
