/* The graph engine: decides from model.cuda_graph_impl / cuda_graph_scope which parts of a
 * step run eagerly and which through captured graphs; runs cuda_graph_warmup_steps eager
 * steps, captures where Bridge captures, replays afterwards, destroys every graph at the end
 * and on every early exit, and reports what it did. Works over any backend: real stream
 * capture on cuda, recorded op sequences on cpu. */
#ifndef GT_GRAPHS_GRAPHS_H
#define GT_GRAPHS_GRAPHS_H

#include <stdio.h>

#include "train/trainer.h"

typedef struct gt_graph_stats {
    const char *mode; /* "eager", "full_iteration", "scoped(attn,mlp)" */
    int graphs;       /* alive executable graphs */
    int nodes;        /* total nodes over them */
    double capture_ms, instantiate_ms;
    size_t mem_before_capture, mem_after_capture; /* device bytes in use (peak on cpu) */
    int fallbacks;          /* scopes that fell back to eager after a failed capture */
    int buckets, evictions; /* shape buckets alive and evicted (full_iteration) */
    /* evaluation forwards by how they ran (gt_graph_runner_eval; not training steps) */
    int64_t eval_eager, eval_captured, eval_replayed;
} gt_graph_stats;

/* Created by the trainer once it is built. */
int gt_graph_runner_create(gt_graph_runner **r, gt_trainer *t, gt_error *err);
/* Destroys every graph it holds; accepts NULL. */
void gt_graph_runner_destroy(gt_graph_runner *r);

/* Enqueues one training step through the policy (eager, capture, or replay) on the trainer's
 * stream, and says which it was. Does not synchronize. */
int gt_graph_runner_step(gt_graph_runner *r, gt_step_mode *mode, gt_error *err);

/* Shape buckets (beyond Bridge): enqueues a step whose shape is named by shape_key (e.g. the
 * valid tokens of a last partial batch, or an eval shape) through fn(ctx, s, exec); with
 * local + full_iteration one graph is kept per key, at most graphs.max_shape_buckets, least
 * recently used evicted. Per-unit graphs only serve the ordinary shape: other keys run
 * eagerly there. fn == NULL enqueues the ordinary step (gt_trainer_enqueue_step), whose key
 * gt_graph_runner_step uses: tokens per micro-batch. */
typedef void (*gt_graph_enqueue_fn)(void *ctx, gt_stream *s, const gt_unit_exec *exec);
int gt_graph_runner_step_shape(gt_graph_runner *r, int64_t shape_key, gt_graph_enqueue_fn fn,
                               void *ctx, gt_step_mode *mode, gt_error *err);

/* Evaluation as its own shape bucket: enqueues one eval forward fn(ctx, s, NULL) on the
 * trainer's stream. With full_iteration, once the training step has been captured (after the
 * warmup and the capture step) it is captured into the bucket cache under an eval key of its own
 * (label "full_iteration eval") and replayed afterwards; before that, and with the scoped or
 * eager policies, it runs eagerly. It is not a training step: the step count and the
 * eager/captured/replayed step counters are untouched. fn must enqueue device work only and
 * take everything by value or by pointer that is the same on every call. A failed capture
 * follows graphs.capture_failure (stop: the error; eager: a warning, then every evaluation
 * eager) and leaves the training graph alone. Does not synchronize. */
int gt_graph_runner_eval(gt_graph_runner *r, gt_graph_enqueue_fn fn, void *ctx, gt_step_mode *mode,
                         gt_error *err);

/* Test hook: every capture whose label starts with `label` fails as if the captured code
 * synchronized the stream. Labels: "full_iteration", "full_iteration eval", "capture_check",
 * "layer <l> <scope> forward|backward" (so "layer 1 attn" fails both graphs of layer 1's
 * attention, and "full_iteration" the eval graph too). NULL or "" clears it. The environment
 * variable GT_GRAPHS_FORCE_CAPTURE_FAILURE, read at create, sets it too. */
void gt_graph_runner_force_capture_failure(gt_graph_runner *r, const char *label);

void gt_graph_runner_stats(const gt_graph_runner *r, gt_graph_stats *stats);
void gt_graph_runner_report(const gt_graph_runner *r, FILE *f);

#endif
