/* Data-parallel gradient reduction for the trainer's step: the parameters split into buckets
 * (ddp.bucket_size elements, in the reverse order the backward produces them, as Megatron's
 * DDP does), every bucket sharded over the ranks (gt_comm_shard). Two ways, chosen by
 * runtime.deterministic: rank order, where every micro-batch's gradient is reduce-scattered
 * into the shards as it is produced, so the step's gradient is g0 + g1 + g2 + ... in the
 * global micro-batch order whatever the world size; or the library's order, one all-reduce of
 * each bucket of the locally accumulated gradient (fewer collectives, not bitwise repeatable
 * across world sizes). Everything is enqueued on a stream, so a full-iteration graph holds it. */
#ifndef GT_DIST_GRAD_SYNC_H
#define GT_DIST_GRAD_SYNC_H

#include <stddef.h>

#include "core/step_state.h"
#include "dist/comm.h"

typedef struct gt_grad_sync_opts {
    size_t bucket_elems;   /* parameters per bucket; 0: one bucket */
    gt_reduce_order order; /* GT_REDUCE_RANK_ORDER: per micro-batch; LIBRARY: once a step */
    int overlap; /* ddp.overlap_grad_reduce: each bucket reduced as the backward ends it */
} gt_grad_sync_opts;

typedef struct gt_grad_bucket {
    size_t first, n;             /* parameters [first, first + n) */
    size_t shard_first, shard_n; /* this rank's shard of them, in parameter indices */
    float *acc;                  /* [shard_n] the reduced shard (rank order) */
} gt_grad_bucket;

typedef struct gt_grad_sync gt_grad_sync;

/* Buckets over n parameters, the accumulators allocated once (host memory of the CPU backend)
 * and the communicator's scratch reserved for the largest bucket. */
int gt_grad_sync_create(gt_grad_sync **out, gt_comm *c, gt_backend *b, size_t n,
                        const gt_grad_sync_opts *o, gt_error *err);
void gt_grad_sync_destroy(gt_grad_sync *g); /* accepts NULL */
int gt_grad_sync_bucket_count(const gt_grad_sync *g);
const gt_grad_bucket *gt_grad_sync_bucket(const gt_grad_sync *g, int i);
gt_reduce_order gt_grad_sync_order(const gt_grad_sync *g);

/* Rank order: after one micro-batch round's backward has overwritten grads, adds every
 * rank's gradient into the shards in rank order (first: the step's first round). */
void gt_grad_sync_round(gt_grad_sync *g, gt_stream *s, const float *grads, int first);
/* Rank order: grads[0..n) = the reduced sum on every rank (shards copied in, then gathered). */
void gt_grad_sync_finish(gt_grad_sync *g, gt_stream *s, float *grads);
/* Library order: grads = the sum over ranks of every rank's grads, bucket by bucket. */
void gt_grad_sync_all_reduce(gt_grad_sync *g, gt_stream *s, float *grads);

/* Overlap (opts.overlap): the model's gt_grad_hook calls these during a micro-batch's backward.
 * micro_begin before micro-batch j of n_micro (rank order: every one is reduced; library
 * order: the last, into which the others accumulated). final: when a bucket's last gradient
 * is final, its reduction is enqueued detached on the communication stream (gt_comm_mark) and
 * the backward goes on; written: before gradients are overwritten, the compute stream waits
 * for the reductions of their buckets still reading them. micro_end checks that the backward
 * ended every bucket (a hook that missed a tensor fails the step by name). wait_all: every
 * reduction done, before the gradients are read (finish, NaN checks, the optimizer). The sums
 * are those of gt_grad_sync_round / gt_grad_sync_all_reduce, bucket for bucket. */
void gt_grad_sync_micro_begin(gt_grad_sync *g, float *grads, int j, int n_micro);
void gt_grad_sync_written(gt_grad_sync *g, gt_stream *s, size_t first, size_t n);
void gt_grad_sync_final(gt_grad_sync *g, gt_stream *s, size_t first, size_t n);
void gt_grad_sync_micro_end(gt_grad_sync *g);
void gt_grad_sync_wait_all(gt_grad_sync *g, gt_stream *s);
int gt_grad_sync_overlaps(const gt_grad_sync *g);

/* The distributed optimizer: buf[0..n) of elem_bytes elements, each rank's shards of every
 * bucket copied to every rank (the parameters after each rank stepped its shards; the master
 * weights and moments before a checkpoint reads them). */
void gt_grad_sync_gather(gt_grad_sync *g, gt_stream *s, void *buf, size_t elem_bytes);
/* Bucket i's part of gt_grad_sync_gather; detached (ddp.overlap_param_gather): s goes on to the
 * next bucket's optimizer step while it runs, until gt_grad_sync_wait_all. */
void gt_grad_sync_gather_bucket(gt_grad_sync *g, gt_stream *s, int i, void *buf, size_t elem_bytes,
                                int detached);

/* The step's loss and auxiliary loss from every micro-batch's pair in slots[n_micro][2]
 * (zero where another rank computed it): summed over ranks, then st->loss and st->aux_loss
 * set to the pairs added one after another in micro-batch order, as one process accumulates
 * them. */
void gt_grad_sync_losses(gt_grad_sync *g, gt_stream *s, gt_step_state *st, float *slots,
                         int n_micro);

#endif
