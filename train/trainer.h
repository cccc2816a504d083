/* The trainer: owns the backend, model, optimizer state, step state, data source and graph
 * runner, and runs one training step at a time. Everything a step does on the device is
 * enqueued by gt_trainer_enqueue_step(), the function a full-iteration graph captures. */
#ifndef GT_TRAIN_TRAINER_H
#define GT_TRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "config/config.h"
#include "data/data.h"
#include "dist/comm.h"
#include "graphs/graphs.h"
#include "graphtrain.h"
#include "model/model.h"

/* The public half (gt_trainer, gt_step_stats, create / destroy / step / eval / save /
 * step_count) is declared in include/graphtrain.h; what follows is for the rest of the engine
 * (train loop, bench/, cli/) and tests. */

/* gt_trainer_create for rank gt_comm_rank(comm) of a data-parallel world (CPU backend): it
 * trains its slice of every global batch and reduces gradients over comm (not owned: destroy
 * it after the trainer). comm NULL: gt_trainer_create. */
int gt_trainer_create_dp(gt_trainer **out, const gt_config *cfg, gt_comm *comm, gt_error *err);

/* Collective over the data-parallel ranks: the distributed optimizer's master weights and
 * moments, of which each rank allocates only its shards, gathered into a whole host copy on
 * every rank until the next step (a checkpoint reads it; gt_trainer_save refuses the
 * distributed optimizer without it). Nothing for one process or the replicated optimizer.
 * gt_trainer_read_master and gt_trainer_read_moments gather first when the copy is not there,
 * so under the distributed optimizer every rank must call them. */
int gt_trainer_dp_gather_state(gt_trainer *t, gt_error *err);
/* Bench: the collectives of one data-parallel step alone (the gradient buckets' reductions,
 * the losses, the fp8 state, the distributed optimizer's parameter gather), eagerly, after a
 * barrier; *ms the wall time to their end on this rank. They leave values no one reads (the
 * next step rewrites them). 0 ms and nothing run without a communicator. */
int gt_trainer_time_collectives(gt_trainer *t, double *ms, gt_error *err);
/* Bytes of optimizer state (master weights, Adam m and v) this rank allocated: every
 * parameter's, or with the distributed optimizer its shards' alone. */
size_t gt_trainer_opt_state_bytes(const gt_trainer *t);

/* Prints every arena (model, optimizer, step state, batch) and the pinned host buffers. */
void gt_trainer_print_memory(const gt_trainer *t, FILE *f);
/* One line: backend, parameters, micro-batches, data. */
void gt_trainer_print_summary(const gt_trainer *t, FILE *f);
/* Started from checkpoint.load. */
int gt_trainer_resumed(const gt_trainer *t);
/* The data position of the next batch to train on (what a checkpoint keeps). */
gt_data_pos gt_trainer_data_pos(const gt_trainer *t);

/* Enqueues one whole step on stream s (batch copy-in from pinned memory, all micro-batches,
 * clipping, NaN checks, optimizer, step advance); exec may route units through graphs. The
 * body gt_trainer_step hands the graph runner. */
void gt_trainer_enqueue_step(gt_trainer *t, gt_stream *s, const gt_unit_exec *exec);
/* The key the training step runs under (GT_GRAPH_STEP, tokens per micro-batch). */
gt_graph_key gt_trainer_step_key(const gt_trainer *t);

/* The gradient-reduction hook of data parallelism. It is enqueued inside every training step,
 * after the last micro-batch's backward and before the NaN checks, clipping and AdamW, so a
 * full-iteration graph captures it with the rest of the step (per-unit graph modes run it
 * eagerly between the graphs). fn gets the fp32 gradients of all n parameters and may only
 * enqueue device work on s (a collective such as NCCL's all-reduce; the capture forbids
 * anything else). Without a hook (one GPU) nothing is enqueued. */
typedef void (*gt_grad_reduce_fn)(void *ctx, gt_backend *b, gt_stream *s, float *grads, size_t n);
/* Sets the hook (fn NULL: none). Only before the first step: a captured graph would keep
 * running the old one, so a later call is refused with GT_ERR_INVALID. */
int gt_trainer_set_grad_reduce(gt_trainer *t, gt_grad_reduce_fn fn, void *ctx, gt_error *err);

/* Accessors for bench/, cli/ and tests (and to build a second runner over the trainer). */
gt_backend *gt_trainer_backend(gt_trainer *t);
gt_model *gt_trainer_model(gt_trainer *t);
gt_stream *gt_trainer_stream(gt_trainer *t);
const gt_config *gt_trainer_config(const gt_trainer *t);
/* Copies the fp32 master weights to host memory [n_params] (joined from their halves where
 * the backend keeps them split, core/bf16.h). Like every read or write of the optimizer
 * state, it first brings the embedding's lazy rows up to date (README, "Optimizer"). */
int gt_trainer_read_master(gt_trainer *t, float *host, gt_error *err);
/* Sets the master weights, and the parameters from them, from fp32 host memory [n_params]. */
int gt_trainer_write_master(gt_trainer *t, const float *host, gt_error *err);
/* The trainer's graph runner (graphs/graphs.h), for bench/ to read gt_graph_runner_stats. */
gt_graph_runner *gt_trainer_graph_runner(gt_trainer *t);

#endif
