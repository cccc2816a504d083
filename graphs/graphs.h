/* The graph engine: runs the work it is handed (a body that enqueues device work, under a
 * key) eagerly or through captured graphs as the capture policy says: cuda_graph_warmup_steps
 * eager steps, the capture where Bridge captures, replays afterwards; destroys every graph at
 * the end and on every early exit, and reports what it did. It knows nothing of the trainer,
 * which owns it and passes its training step and its evaluation forward as bodies. Works
 * over any backend: real stream capture on cuda, recorded op sequences on cpu. */
#ifndef GT_GRAPHS_GRAPHS_H
#define GT_GRAPHS_GRAPHS_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "config/config.h"
#include "graphs/policy.h"
#include "graphtrain.h"
#include "model/model.h"

typedef struct gt_graph_runner gt_graph_runner;

/* gt_step_mode (eager, captured, replayed), what every run reports, is the runner's: its one
 * definition sits in include/graphtrain.h because the public step stats carry it. */

/* The few settings beyond the policy that the runner reads. */
typedef struct gt_graph_runner_opts {
    gt_capture_failure capture_failure; /* graphs.capture_failure */
    int capture_check;     /* debug.capture_check: capture the first step in global mode */
    int max_shape_buckets; /* graphs.max_shape_buckets: full-iteration graphs kept */
} gt_graph_runner_opts;

/* The runner's settings in cfg. */
gt_graph_runner_opts gt_graph_runner_opts_of(const gt_config *cfg);

typedef struct gt_graph_stats {
    const char *mode; /* "eager", "full_iteration", "scoped(attn,mlp)" */
    int graphs;       /* alive executable graphs */
    int nodes;        /* total nodes over them */
    double capture_ms, instantiate_ms;
    size_t mem_before_capture, mem_after_capture; /* device bytes in use (peak on cpu) */
    int fallbacks;          /* scopes that fell back to eager after a failed capture */
    int buckets, evictions; /* shape buckets alive and evicted (full_iteration) */
    /* evaluation forwards by how they ran (GT_GRAPH_EVAL keys; not training steps) */
    int64_t eval_eager, eval_captured, eval_replayed;
} gt_graph_stats;

/* Creates the runner of policy pol over model m, whose work runs on stream s of backend b
 * (all owned by the caller and alive until gt_graph_runner_destroy). */
int gt_graph_runner_create(gt_graph_runner **r, const gt_graph_policy *pol, gt_backend *b,
                           gt_stream *s, gt_model *m, const gt_graph_runner_opts *opts,
                           gt_error *err);
/* Destroys every graph it holds; accepts NULL. */
void gt_graph_runner_destroy(gt_graph_runner *r);

/* Enqueues the work of one run on stream s; exec, when not NULL, routes the model's units
 * through per-unit graphs (pass it to gt_model_forward_backward). It must enqueue device
 * work only and take everything by value or by pointer that is the same on every call. */
typedef void (*gt_graph_enqueue_fn)(void *ctx, gt_stream *s, const gt_unit_exec *exec);

typedef enum {
    /* A training step: counts toward cuda_graph_warmup_steps and the step counters; runs
     * debug.capture_check first; a failed capture (graphs.capture_failure=eager) sends every
     * full-iteration key eager from then on. */
    GT_GRAPH_STEP,
    /* An evaluation forward: no training step (the counters above are untouched, eval_*
     * count it); captured only once the training step has been (after the warmup and the
     * capture step); never through unit graphs, which hold the training step; a failed
     * capture sends only evaluation eager and leaves the training graphs alone. */
    GT_GRAPH_EVAL,
} gt_graph_work;

/* What a run is: the kind of work and its shape (e.g. tokens per micro-batch, > 0). With
 * local + full_iteration one graph is kept per key (label "full_iteration", "full_iteration
 * shape <n>" for a step shape other than the model's, "full_iteration eval"), at most
 * graphs.max_shape_buckets, least recently used evicted; per-unit graphs serve only steps of
 * the model's shape (other keys run eagerly there). */
typedef struct gt_graph_key {
    gt_graph_work work;
    int64_t shape;
} gt_graph_key;

/* Runs body(ctx, ...) under key through the policy (eager, capture, or replay) on the
 * runner's stream, and says which it was. Does not synchronize. */
int gt_graph_runner_run(gt_graph_runner *r, gt_graph_key key, gt_graph_enqueue_fn body, void *ctx,
                        gt_step_mode *mode, gt_error *err);

/* Test hook: every capture whose label starts with `label` fails as if the captured code
 * synchronized the stream. Labels: "full_iteration", "full_iteration eval", "capture_check",
 * "layer <l> <scope> forward|backward" (so "layer 1 attn" fails both graphs of layer 1's
 * attention, and "full_iteration" the eval graph too). NULL or "" clears it. The environment
 * variable GT_GRAPHS_FORCE_CAPTURE_FAILURE, read at create, sets it too. */
void gt_graph_runner_force_capture_failure(gt_graph_runner *r, const char *label);

void gt_graph_runner_stats(const gt_graph_runner *r, gt_graph_stats *stats);
void gt_graph_runner_report(const gt_graph_runner *r, FILE *f);

#endif
