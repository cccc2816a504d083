/* The graph runner's state, shared by runner.c (policy, full-iteration graphs, shape buckets,
 * stats) and units.c (per-unit graphs through the model's gt_unit_exec hook). Internal. */
#ifndef GT_GRAPHS_RUNNER_IMPL_H
#define GT_GRAPHS_RUNNER_IMPL_H

#include "graphs/buckets.h"
#include "graphs/capture.h"
#include "graphs/graphs.h"
#include "graphs/policy.h"

#define GT_FORCE_FAIL_MAX 64
/* Environment variable read at create: captures whose label starts with its value fail. */
#define GT_FORCE_FAIL_ENV "GT_GRAPHS_FORCE_CAPTURE_FAILURE"
/* Label (and capture-failure hook name) of the eval forward's graph. */
#define GT_EVAL_LABEL "full_iteration eval"

struct gt_graph_runner {
    gt_backend *b;
    gt_model *m;
    gt_stream *s;
    gt_graph_policy pol;
    gt_capture_failure on_fail; /* graphs.capture_failure */
    int capture_check;          /* debug.capture_check still to run */
    int64_t calls;              /* training steps enqueued so far */
    int64_t default_key;        /* shape of an ordinary step (the model's tokens per micro-batch) */

    /* full iteration */
    gt_graph_cache cache;
    int full_fallback; /* a training capture failed: every full-iteration key runs eagerly */
    int eval_fallback; /* an eval capture failed: evaluation runs eagerly */
    int64_t eval_eager, eval_captured, eval_replayed; /* evaluations by gt_step_mode */

    /* scoped: [layer][unit][fwd/bwd] */
    int layers;
    gt_graph **unit_graphs;
    int *unit_nodes;
    unsigned active_units; /* unit kinds still captured (policy minus fallbacks) */
    unsigned fallen_units; /* kinds fallen back this step, destroyed after the step */
    int scoped_captured;   /* the capture step has happened */
    int capture_now;       /* inside the capture step */
    int step_captured, step_replayed;
    gt_unit_exec exec;
    gt_error pending; /* first error inside the unit hook, returned after the step */

    /* stats */
    double capture_ms, instantiate_ms;
    size_t mem_before, mem_after;
    int captures;         /* successful captures */
    int64_t capture_call; /* 1-based runner step of the first capture, 0 = none yet */
    int64_t eager_steps, captured_steps, replayed_steps; /* steps by gt_step_mode */
    int fallbacks;
    int check_nodes; /* nodes of the debug.capture_check graph, -1 = not run */
    char force_fail[GT_FORCE_FAIL_MAX];
    char last_failure[GT_ERROR_MSG_MAX];
};

/* Does the test hook fail the capture called label? */
int gt_runner_force_matches(const gt_graph_runner *r, const char *label);
/* Books a successful capture into the stats. */
void gt_runner_note_capture(gt_graph_runner *r, const gt_capture_result *res);
/* A failed capture of label: STOP -> returns the error; EAGER -> warns once, counts a
 * fallback and returns GT_OK so the caller runs the work eagerly. */
int gt_runner_capture_failed(gt_graph_runner *r, const char *what, gt_error *err);

/* units.c */
int gt_runner_units_init(gt_graph_runner *r, gt_error *err);
void gt_runner_units_release(gt_graph_runner *r);
int gt_runner_units_alive(const gt_graph_runner *r, int *nodes);
/* Alive unit graphs of one unit kind. */
int gt_runner_units_alive_kind(const gt_graph_runner *r, int kind);
/* After a step: destroys the graphs of kinds that fell back during it. */
void gt_runner_units_after_step(gt_graph_runner *r);
void gt_runner_unit_run(void *ctx, gt_model *m, gt_stream *s, int layer, int unit, int backward,
                        gt_step_state *st);

#endif
