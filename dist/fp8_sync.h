/* fp8 under data parallelism: the ranks' fp8 state agreed once a step, after the micro-batches
 * and before the optimizer. Each delayed-scaling slot's amax becomes the max over the ranks
 * (Transformer Engine's amax reduction over the data-parallel group), so every rank rolls the
 * same history into the same scales, and the step's amax is that of all its micro-batches, as
 * one process training the whole global batch finds it; and a NaN/Inf amax or an overflowed
 * scale on one rank (GT_NAN_FP8) flags the step on every rank, so all skip its update. Current
 * and blockwise scales come from each micro-batch's own tensors and need no reduction. CPU
 * backend through MPI, GPUs through NCCL (as grad_sync.h); enqueued on a stream, so a
 * full-iteration graph holds it. */
#ifndef GT_DIST_FP8_SYNC_H
#define GT_DIST_FP8_SYNC_H

#include "backend/backend.h"
#include "dist/comm.h"

typedef struct gt_fp8_sync gt_fp8_sync;

/* Over the n_meta delayed-scaling slots at meta (device memory; n_meta 0 and meta NULL for the
 * other recipes: the flag alone). */
int gt_fp8_sync_create(gt_fp8_sync **out, gt_comm *c, gt_backend *b, gt_fp8_meta *meta, int n_meta,
                       gt_error *err);
/* Accepts NULL. */
void gt_fp8_sync_destroy(gt_fp8_sync *f);
/* The step's amaxes and fp8 flag, reduced over the ranks into meta and st. */
void gt_fp8_sync_step(gt_fp8_sync *f, gt_stream *s, gt_step_state *st);

#endif
