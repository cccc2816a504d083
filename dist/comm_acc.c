/* The rank-order accumulation of comm.h (gt_comm_reduce_scatter_acc): a world of one adds its
 * own buffer as a CPU-backend kernel (first copies, later rounds add); a larger world goes
 * through MPI's all-to-all (comm_mpi.c). Either way one addition per rank, in rank order. */
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "dist/comm_impl.h"

typedef struct self_acc_args {
    float *acc;
    const float *in;
    size_t n;
    int first;
} self_acc_args;

static void k_self_acc(const void *p) {
    const self_acc_args *a = p;
    if (a->first) {
        memcpy(a->acc, a->in, a->n * sizeof *a->acc);
        return;
    }
    for (size_t i = 0; i < a->n; i++)
        a->acc[i] += a->in[i];
}

void gt_comm_acc_submit(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                        int first) {
    if (!c->b || c->b->kind != GT_BACKEND_CPU) {
        if (c->b)
            gt_backend_fail(c->b, GT_ERR_UNSUPPORTED,
                            "the rank-order gradient accumulation runs on the CPU backend only; "
                            "use runtime.device=cpu");
        return;
    }
    if (c->world.size > 1) {
        gt_comm_mpi_reduce_scatter_acc(c, s, acc, in, n, first);
        return;
    }
    self_acc_args a = {acc, in, n, first};
    gt_cpu_submit(c->b, s, k_self_acc, &a, sizeof a);
}
