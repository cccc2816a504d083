/* Collectives between the ranks of a data-parallel job, enqueued on a backend stream like any
 * op, so a full-iteration graph captures them with the rest of the step. On the CUDA backend
 * they are NCCL's, on a communication stream ordered with the caller's by events; on the CPU
 * backend they run through MPI between processes (mpirun), recorded and replayed like the CPU
 * backend's kernels, and a world of one there needs no library and copies. The sums come in two
 * orders: GT_REDUCE_RANK_ORDER adds the ranks' values in rank order, ((x0 + x1) + x2) + ..., the
 * same bits on every run and every rank; GT_REDUCE_LIBRARY leaves the order to the library (MPI's
 * or NCCL's algorithms, faster, and not bitwise repeatable across world sizes). */
#ifndef GT_DIST_COMM_H
#define GT_DIST_COMM_H

#include <stddef.h>

#include "backend/backend.h"
#include "dist/world.h"

typedef enum { GT_REDUCE_RANK_ORDER, GT_REDUCE_LIBRARY } gt_reduce_order;

typedef struct gt_comm gt_comm;

/* A communicator over w for buffers of backend b. On the CPU backend a world of more than one
 * rank needs a build with MPI (the error says how to get one); on the CUDA backend, a build
 * with NCCL. mpirun's and srun's ranks start MPI here; torchrun's only when a CPU backend is
 * bound. */
int gt_comm_create(gt_comm **c, const gt_world *w, gt_backend *b, gt_error *err);

/* How NCCL's unique id reaches the ranks (set before binding a CUDA backend) and the deadline
 * of every wait. id_file non-empty: through that file (dist/rendezvous.h); else MPI when it is
 * up; else TCP at the world's MASTER_ADDR:MASTER_PORT + port_offset. tag: the launcher's job
 * id ("" when none), so a file of another job is not read. timeout_ms: the rendezvous, the
 * host-side waits and the watchdog (no step finished on every rank within it: the NCCL
 * communicator is aborted); 0 keeps the default, Bridge's 10 minutes. */
typedef struct gt_comm_rendezvous {
    const char *id_file, *tag;
    double timeout_ms;
    int port_offset;
} gt_comm_rendezvous;
void gt_comm_set_rendezvous(gt_comm *c, const gt_comm_rendezvous *r);

/* b may be NULL: the communicator then only serves the host-side calls (barrier, broadcast,
 * agree, abort) until gt_comm_bind gives it the backend its collectives run on. Binding a CUDA
 * backend starts the NCCL communicator on b's device unless a host-side call of a world
 * without MPI started it there already (every rank of the world must bind); it lives until
 * gt_comm_destroy, across trainers. */
int gt_comm_bind(gt_comm *c, gt_backend *b, gt_error *err);
/* Forgets the backend (before it is destroyed); the NCCL communicator stays for the host-side
 * calls and the next bind. Accepts NULL. */
void gt_comm_unbind(gt_comm *c);
/* 1 when the collectives run through NCCL (an NCCL communicator was started). */
int gt_comm_uses_nccl(const gt_comm *c);
/* This process's rank on its node. */
int gt_comm_local_rank(const gt_comm *c);
/* The CUDA device this rank takes: its local rank, or 0 when the launcher shows it one GPU. */
int gt_comm_device(const gt_comm *c);
/* Accepts NULL. After every graph that captured its collectives: destroys the NCCL
 * communicator (idle: ncclCommDestroy; work still queued, e.g. after a failed step:
 * ncclCommAbort, which never waits on the other ranks), then finalizes MPI when this
 * communicator initialized it. */
void gt_comm_destroy(gt_comm *c);
int gt_comm_rank(const gt_comm *c);
int gt_comm_size(const gt_comm *c);

/* Sets aside the scratch the rank-order sums of up to max_n elements need (about max_n floats),
 * before the first step: collectives allocate nothing, and a larger one fails the step by name. */
int gt_comm_reserve(gt_comm *c, size_t max_n, gt_error *err);

/* The share of n elements rank r owns after a reduce-scatter: [first, first + count). The
 * first n % size ranks own one more element. */
void gt_comm_shard(size_t n, int size, int r, size_t *first, size_t *count);

/* buf[0..n) = the sum over ranks of every rank's buf, on every rank. */
void gt_comm_all_reduce_sum(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o);
/* buf[0..n) = the largest of every rank's buf, elementwise, on every rank; NaN where any rank
 * has NaN. The same bits in any order (fp8 amaxes). The values must be >= +0 or NaN (amaxes
 * and flags are): NCCL compares their bits as unsigned integers, which order such floats as
 * floats do with every NaN above +Inf (its float max would drop a NaN). */
void gt_comm_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n);
/* out[0..count) = the sum over ranks of in[first..first+count), this rank's shard
 * (gt_comm_shard); in holds all n elements. */
void gt_comm_reduce_scatter_sum(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                gt_reduce_order o);
/* buf[0..n): every rank's shard (gt_comm_shard, elements of elem_bytes) copied to every rank;
 * this rank's own shard must already be in place. */
void gt_comm_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes);

/* acc[0..count) (this rank's shard of n, gt_comm_shard) = acc + in_0 + in_1 + ... added one
 * rank at a time in rank order (first: in_0 + in_1 + ..., acc's old values unread), where in_q
 * is rank q's in[first..first+count). Called once per micro-batch round, it sums every
 * micro-batch's gradient in one global order whatever the world size. Needs the reserve of
 * gt_comm_reserve. */
void gt_comm_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                                int first);

/* Bench only (`graphtrain bench` under several ranks times a step without its collectives):
 * while skip is set, every collective enqueued is left out (where one writes a shard, this
 * rank's own part is copied there instead, so values stay finite); set it before the trainer
 * whose steps are timed is created (a captured graph keeps what was enqueued), and use nothing
 * such a trainer computes. Host-side calls are unaffected. */
void gt_comm_set_skip(gt_comm *c, int skip);
/* Overlap (ddp.overlap_grad_reduce / overlap_param_gather): while detached, a collective still
 * runs after the work enqueued on s before it, but s's later work is no longer ordered after
 * it, so the compute stream goes on. gt_comm_mark(c, m) remembers every collective enqueued
 * so far as mark m (0 <= m < the count of gt_comm_reserve_marks); gt_comm_wait_mark orders s's
 * later work after them. Every detached collective must be waited for (a mark made after it)
 * before the work that reads or overwrites its buffers, and before a capture ends. On the CPU
 * backend the collectives run in the stream's order anyway: marks and waits do nothing. */
int gt_comm_reserve_marks(gt_comm *c, int n, gt_error *err);
void gt_comm_set_detached(gt_comm *c, int on);
void gt_comm_mark(gt_comm *c, int m);
void gt_comm_wait_mark(gt_comm *c, gt_stream *s, int m);

/* Waits for every rank (outside a step: set-up and teardown). */
int gt_comm_barrier(gt_comm *c, gt_error *err);

/* Host-side, outside steps: root's bytes [0..n) copied to every rank's buf. */
int gt_comm_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err);
/* Host-side: *max = the largest value any rank passes (a stop request's signal, an exit). */
int gt_comm_agree_max(gt_comm *c, int value, int *max, gt_error *err);
/* After a rank failed (the others may wait in a collective that never comes): aborts the NCCL
 * communicator, then ends every rank of the job with exit status code when MPI is up
 * (MPI_Abort); otherwise returns, and the launcher (torchrun, srun) ends the others when this
 * process exits non-zero. For the CLI. */
void gt_comm_abort(gt_comm *c, int code);

#endif
