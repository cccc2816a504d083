/* The communicator (comm.h): a world of one copies where a shard moves, on any backend; a larger
 * world runs MPI's collectives as CPU-backend kernels (comm_mpi.c), so the CPU backend's capture
 * records them and its replays run them again with the same arguments, as a CUDA graph replays
 * NCCL's kernels. */
#include "dist/comm_impl.h"

#include <stdlib.h>
#include <string.h>

void gt_comm_shard(size_t n, int size, int r, size_t *first, size_t *count) {
    size_t base = n / (size_t)size, extra = n % (size_t)size, ur = (size_t)r;
    *count = base + (ur < extra ? 1 : 0);
    *first = ur * base + (ur < extra ? ur : extra);
}

/* collectives of a world of more than one run on the CPU backend only (comm_mpi.c) */
static int check_backend(const gt_world *w, const gt_backend *b, gt_error *err) {
    if (!b || w->size == 1 || b->kind == GT_BACKEND_CPU) return GT_OK;
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "data parallelism over %d GPUs needs NCCL communicators, which this "
                        "build does not have yet; run on one GPU (launch without mpirun, "
                        "srun or torchrun), or use runtime.device=cpu with mpirun",
                        w->size);
}

int gt_comm_create(gt_comm **out, const gt_world *w, gt_backend *b, gt_error *err) {
    *out = NULL;
    int brc = check_backend(w, b, err);
    if (brc) return brc;
    gt_comm *c = calloc(1, sizeof *c);
    if (!c) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating a communicator");
    c->world = *w;
    c->b = b;
    if (w->size > 1) {
        int rc = gt_comm_mpi_init(c, err);
        if (rc) {
            free(c);
            return rc;
        }
    }
    *out = c;
    return GT_OK;
}

int gt_comm_bind(gt_comm *c, gt_backend *b, gt_error *err) {
    int rc = check_backend(&c->world, b, err);
    if (!rc) c->b = b;
    return rc;
}

void gt_comm_destroy(gt_comm *c) {
    if (!c) return;
    if (c->world.size > 1) gt_comm_mpi_finish(c);
    free(c->scratch);
    free(c);
}

int gt_comm_reserve(gt_comm *c, size_t max_n, gt_error *err) {
    if (c->world.size == 1) return GT_OK;
    size_t first = 0, count = 0;
    gt_comm_shard(max_n, c->world.size, 0, &first, &count); /* rank 0's shard is the largest */
    size_t need = count * (size_t)c->world.size;
    if (need <= c->scratch_elems) return GT_OK;
    float *p = realloc(c->scratch, need * sizeof *p);
    if (!p)
        return gt_error_set(err, GT_ERR_NOMEM,
                            "out of host memory for the %.1f MiB of a rank-order reduction",
                            (double)need * sizeof *p / (1024.0 * 1024.0));
    c->scratch = p;
    c->scratch_elems = need;
    return GT_OK;
}

int gt_comm_rank(const gt_comm *c) {
    return c->world.rank;
}

int gt_comm_size(const gt_comm *c) {
    return c->world.size;
}

void gt_comm_all_reduce_sum(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o) {
    if (c->world.size > 1) gt_comm_mpi_all_reduce(c, s, buf, n, o);
}

void gt_comm_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n) {
    if (c->world.size > 1) gt_comm_mpi_all_reduce_max(c, s, buf, n);
}

void gt_comm_reduce_scatter_sum(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                gt_reduce_order o) {
    if (c->world.size > 1) {
        gt_comm_mpi_reduce_scatter(c, s, out, in, n, o);
        return;
    }
    if (out != in && n) c->b->ops->memcpy_d2d(c->b, s, out, in, n * sizeof *in);
}

void gt_comm_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes) {
    if (c->world.size > 1) gt_comm_mpi_all_gather(c, s, buf, n, elem_bytes);
}

void gt_comm_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                                int first) {
    gt_comm_acc_submit(c, s, acc, in, n, first);
}

int gt_comm_barrier(gt_comm *c, gt_error *err) {
    return c->world.size > 1 ? gt_comm_mpi_barrier(c, err) : GT_OK;
}

int gt_comm_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err) {
    return c->world.size > 1 ? gt_comm_mpi_broadcast(c, buf, n, root, err) : GT_OK;
}

int gt_comm_agree_max(gt_comm *c, int value, int *max, gt_error *err) {
    *max = value;
    return c->world.size > 1 ? gt_comm_mpi_agree_max(c, value, max, err) : GT_OK;
}

void gt_comm_abort(gt_comm *c, int code) {
    if (c && c->world.size > 1) gt_comm_mpi_abort(c, code);
}
