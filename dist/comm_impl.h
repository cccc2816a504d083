/* The communicator's insides, shared by comm.c (dispatch, a world of one) and comm_mpi.c (MPI
 * between CPU-backend processes). Internal to dist/. */
#ifndef GT_DIST_COMM_IMPL_H
#define GT_DIST_COMM_IMPL_H

#include "dist/comm.h"

struct gt_comm {
    gt_world world;
    gt_backend *b;
    int mpi_initialized_here; /* this communicator called MPI_Init, so it finalizes */
    float *scratch;           /* rank-order sums: every rank's copy of this rank's shard */
    size_t scratch_elems;
    int *counts, *displs, *rcounts, *rdispls; /* [size] each, one block: MPI's shard tables */
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
/* comm_max.c: the max all-reduce between processes */
void gt_comm_mpi_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n);
/* comm_acc.c: the rank-order accumulation; a world of one adds on the CPU backend itself */
void gt_comm_acc_submit(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n, int first);

#endif
