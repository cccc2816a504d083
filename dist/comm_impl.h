/* The communicator's insides, shared by comm.c (dispatch, a world of one), comm_mpi.c (MPI
 * between CPU-backend processes) and comm_nccl.c (NCCL between GPUs). Internal to dist/. */
#ifndef GT_DIST_COMM_IMPL_H
#define GT_DIST_COMM_IMPL_H

#include "dist/comm.h"

#define GT_COMM_PATH_MAX 1024
#define GT_COMM_TAG_MAX 128
/* Bridge's dist.distributed_timeout_minutes default */
#define GT_COMM_TIMEOUT_MS_DEFAULT (10.0 * 60.0 * 1000.0)

typedef struct gt_comm_nccl gt_comm_nccl; /* comm_nccl.c */

struct gt_comm {
    gt_world world;
    gt_backend *b;
    int mpi_active;           /* MPI is up for this world (gt_comm_mpi_init succeeded) */
    int mpi_initialized_here; /* this communicator called MPI_Init, so it finalizes */
    gt_comm_nccl *nccl;       /* bound to a CUDA backend: the NCCL communicator, else NULL */
    /* gt_comm_set_rendezvous: how NCCL's unique id reaches the ranks, and the deadlines */
    char id_file[GT_COMM_PATH_MAX];
    char tag[GT_COMM_TAG_MAX];
    double timeout_ms;
    int port_offset;
    float *scratch; /* rank-order sums: every rank's copy of this rank's shard */
    size_t scratch_elems;
    int *counts, *displs, *rcounts, *rdispls; /* [size] each, one block: MPI's shard tables */
    int skip;     /* gt_comm_set_skip: collectives left out (bench's compute-alone timing) */
    int detached; /* gt_comm_set_detached: s does not wait for the collectives */
};

/* comm_mpi.c; without MPI in the build, init refuses a world of more than one by name */
int gt_comm_mpi_init(gt_comm *c, gt_error *err);
void gt_comm_mpi_finish(gt_comm *c);
void gt_comm_mpi_all_reduce(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o);
void gt_comm_mpi_reduce_scatter(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                gt_reduce_order o);
void gt_comm_mpi_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes);
int gt_comm_mpi_barrier(gt_comm *c, gt_error *err);
int gt_comm_mpi_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err);
int gt_comm_mpi_agree_max(gt_comm *c, int value, int *max, gt_error *err);
void gt_comm_mpi_abort(gt_comm *c, int code);
void gt_comm_mpi_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                                    int first);
/* comm_nccl.c; without NCCL in the build, bind refuses a CUDA backend by name. Collectives
 * are enqueued on the comm's own stream, ordered after and before s by events. */
/* start: the communicator on GPU device (the rendezvous, ncclCommInitRank, the watchdog), at
 * the first bind or the first host-side call of a world without MPI; it lives until finish
 * (gt_comm_destroy), across trainers. bind: started on b's device, or refused. */
int gt_comm_nccl_start(gt_comm *c, int device, gt_error *err);
int gt_comm_nccl_bind(gt_comm *c, gt_backend *b, gt_error *err);
void gt_comm_nccl_finish(gt_comm *c);
int gt_comm_nccl_reserve(gt_comm *c, size_t elems, gt_error *err);
void gt_comm_nccl_all_reduce(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o);
void gt_comm_nccl_reduce_scatter(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                 gt_reduce_order o);
void gt_comm_nccl_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes);
void gt_comm_nccl_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in,
                                     size_t n, int first);
/* the max all-reduce of comm.h over the floats' bits (ncclUint32, ncclMax) */
void gt_comm_nccl_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n);
/* gt_comm_reserve_marks / gt_comm_mark / gt_comm_wait_mark on the communication stream */
int gt_comm_nccl_reserve_marks(gt_comm *c, int n, gt_error *err);
void gt_comm_nccl_mark(gt_comm *c, int m);
void gt_comm_nccl_wait_mark(gt_comm *c, gt_stream *s, int m);
/* host-side, outside steps, when MPI is not up: through a small device buffer */
int gt_comm_nccl_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err);
int gt_comm_nccl_agree_max(gt_comm *c, int value, int *max, gt_error *err);
/* the watchdog's verdict: GT_OK, or the NCCL error / timeout that aborted the communicator */
int gt_comm_nccl_check(gt_comm *c, gt_error *err);
void gt_comm_nccl_abort(gt_comm *c);
/* st->loss, st->aux_loss = the micro-batches' pairs in slots[n_micro][2] added in order */
void gt_comm_nccl_losses(gt_comm *c, gt_stream *s, float *loss, float *aux, const float *slots,
                         int n_micro);

/* comm_max.c: the max all-reduce between processes */
void gt_comm_mpi_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n);
/* comm_acc.c: the rank-order accumulation; a world of one adds on the CPU backend itself */
void gt_comm_acc_submit(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n, int first);

#endif
