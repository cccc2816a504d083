/* The max all-reduce (comm.h, gt_comm_all_reduce_max): fp8 amaxes over the ranks, as Transformer
 * Engine reduces them over its amax reduction group. A max picks one of its inputs, so any
 * order gives the same bits; NaN wins, so a non-finite amax on one rank reaches every rank
 * (MPI's own MPI_MAX leaves NaN to the comparison order). */
#include <math.h>

#include "backend/cpu/cpu_backend.h"
#include "dist/comm_impl.h"

#ifdef GT_HAVE_MPI
#include <limits.h>
#include <mpi.h>

static void nan_max(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const float *a = in;
    float *b = inout;
    for (int i = 0; i < *len; i++)
        if (isnan(a[i]) || (!isnan(b[i]) && a[i] > b[i])) b[i] = a[i];
}

typedef struct max_args {
    gt_comm *c;
    float *buf;
    size_t n;
} max_args;

static void k_all_reduce_max(const void *p) {
    const max_args *a = p;
    if (a->n > INT_MAX) {
        gt_backend_fail(a->c->b, GT_ERR_UNSUPPORTED,
                        "max all-reduce of %zu elements: MPI counts stop at %d", a->n, INT_MAX);
        return;
    }
    MPI_Op op;
    if (MPI_Op_create(nan_max, 1, &op) != MPI_SUCCESS) {
        gt_backend_fail(a->c->b, GT_ERR_DEVICE, "MPI_Op_create (the amax reduction) failed");
        return;
    }
    if (MPI_Allreduce(MPI_IN_PLACE, a->buf, (int)a->n, MPI_FLOAT, op, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        gt_backend_fail(a->c->b, GT_ERR_DEVICE, "MPI_Allreduce (the amax reduction) failed");
    MPI_Op_free(&op);
}

void gt_comm_mpi_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n) {
    max_args a = {c, buf, n};
    gt_cpu_submit(c->b, s, k_all_reduce_max, &a, sizeof a);
}

#else /* built without MPI: gt_comm_mpi_init refused every world of more than one */

void gt_comm_mpi_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n) {
    (void)s, (void)buf, (void)n;
    gt_backend_fail(c->b, GT_ERR_UNSUPPORTED, "no MPI in this build");
}

#endif
