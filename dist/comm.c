/* The communicator (comm.h): bound to a CUDA backend, NCCL runs every collective (comm_nccl.c),
 * a world of one too; on the CPU backend a world of one copies where a shard moves and a larger
 * world runs MPI's collectives as CPU-backend kernels (comm_mpi.c), so the CPU backend's capture
 * records them and its replays run them again with the same arguments, as a CUDA graph replays
 * NCCL's kernels. */
#include "dist/comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gt_comm_shard(size_t n, int size, int r, size_t *first, size_t *count) {
    size_t base = n / (size_t)size, extra = n % (size_t)size, ur = (size_t)r;
    *count = base + (ur < extra ? 1 : 0);
    *first = ur * base + (ur < extra ? ur : extra);
}

/* MPI is started at creation for the launchers that run under it (mpirun, srun); torchrun's
 * ranks get it only if a CPU backend needs it, at bind: a GPU world there meets over TCP */
static int needs_mpi_now(const gt_world *w, const gt_backend *b) {
    if (w->size == 1) return 0;
    if (b && b->kind == GT_BACKEND_CPU) return 1;
    return w->launcher != GT_LAUNCH_TORCHRUN;
}

static int start_mpi(gt_comm *c, gt_error *err) {
    if (c->mpi_active) return GT_OK;
    int rc = gt_comm_mpi_init(c, err);
    if (!rc) c->mpi_active = 1;
    return rc;
}

int gt_comm_create(gt_comm **out, const gt_world *w, gt_backend *b, gt_error *err) {
    *out = NULL;
    gt_comm *c = calloc(1, sizeof *c);
    if (!c) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating a communicator");
    c->world = *w;
    c->timeout_ms = GT_COMM_TIMEOUT_MS_DEFAULT;
    int rc = needs_mpi_now(w, b) ? start_mpi(c, err) : GT_OK;
    if (!rc && b) rc = gt_comm_bind(c, b, err);
    if (rc) {
        gt_comm_destroy(c);
        return rc;
    }
    *out = c;
    return GT_OK;
}

void gt_comm_set_rendezvous(gt_comm *c, const gt_comm_rendezvous *r) {
    snprintf(c->id_file, sizeof c->id_file, "%s", r->id_file ? r->id_file : "");
    snprintf(c->tag, sizeof c->tag, "%s", r->tag ? r->tag : "");
    if (r->timeout_ms > 0) c->timeout_ms = r->timeout_ms;
    c->port_offset = r->port_offset;
}

int gt_comm_bind(gt_comm *c, gt_backend *b, gt_error *err) {
    if (!b) {
        gt_comm_unbind(c);
        return GT_OK;
    }
    if (b->kind == GT_BACKEND_CUDA) {
        int rc = gt_comm_nccl_bind(c, b, err);
        if (!rc) c->b = b;
        return rc;
    }
    if (c->nccl)
        return gt_error_set(err, GT_ERR_INVALID,
                            "rank %d: this communicator runs NCCL on a GPU; the %s backend's "
                            "collectives need MPI (runtime.device=cpu under mpirun)",
                            c->world.rank, b->name);
    int rc = needs_mpi_now(&c->world, b) ? start_mpi(c, err) : GT_OK;
    if (!rc) c->b = b;
    return rc;
}

void gt_comm_unbind(gt_comm *c) {
    if (c) c->b = NULL;
}

int gt_comm_uses_nccl(const gt_comm *c) {
    return c && c->nccl != NULL;
}

int gt_comm_local_rank(const gt_comm *c) {
    return c->world.local_rank;
}

void gt_comm_destroy(gt_comm *c) {
    if (!c) return;
    gt_comm_nccl_finish(c);
    if (c->mpi_active) gt_comm_mpi_finish(c);
    free(c->scratch);
    free(c);
}

int gt_comm_reserve(gt_comm *c, size_t max_n, gt_error *err) {
    if (c->nccl) return gt_comm_nccl_reserve(c, max_n, err);
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

void gt_comm_set_skip(gt_comm *c, int skip) {
    c->skip = skip;
}

/* skip: this rank's shard of in copied to out, the local part a reduce-scatter would add */
static void skip_shard(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n) {
    size_t first = 0, count = 0;
    gt_comm_shard(n, c->world.size, c->world.rank, &first, &count);
    if (count && c->b) c->b->ops->memcpy_d2d(c->b, s, out, in + first, count * sizeof *in);
}

void gt_comm_all_reduce_sum(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o) {
    if (c->skip) return;
    if (c->nccl)
        gt_comm_nccl_all_reduce(c, s, buf, n, o);
    else if (c->world.size > 1)
        gt_comm_mpi_all_reduce(c, s, buf, n, o);
}

void gt_comm_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n) {
    if (c->skip) return;
    if (c->nccl)
        gt_comm_nccl_all_reduce_max(c, s, buf, n);
    else if (c->world.size > 1)
        gt_comm_mpi_all_reduce_max(c, s, buf, n);
}

void gt_comm_reduce_scatter_sum(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                gt_reduce_order o) {
    if (c->skip) {
        skip_shard(c, s, out, in, n);
        return;
    }
    if (c->nccl) {
        gt_comm_nccl_reduce_scatter(c, s, out, in, n, o);
        return;
    }
    if (c->world.size > 1) {
        gt_comm_mpi_reduce_scatter(c, s, out, in, n, o);
        return;
    }
    if (out != in && n) c->b->ops->memcpy_d2d(c->b, s, out, in, n * sizeof *in);
}

void gt_comm_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes) {
    if (c->skip) return;
    if (c->nccl)
        gt_comm_nccl_all_gather(c, s, buf, n, elem_bytes);
    else if (c->world.size > 1)
        gt_comm_mpi_all_gather(c, s, buf, n, elem_bytes);
}

void gt_comm_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                                int first) {
    if (c->skip) { /* the later rounds' adds are left out too: the values are not used */
        if (first) skip_shard(c, s, acc, in, n);
        return;
    }
    if (c->nccl)
        gt_comm_nccl_reduce_scatter_acc(c, s, acc, in, n, first);
    else
        gt_comm_acc_submit(c, s, acc, in, n, first);
}

int gt_comm_reserve_marks(gt_comm *c, int n, gt_error *err) {
    return c->nccl ? gt_comm_nccl_reserve_marks(c, n, err) : GT_OK;
}

void gt_comm_set_detached(gt_comm *c, int on) {
    c->detached = on != 0;
}

void gt_comm_mark(gt_comm *c, int m) {
    if (c->nccl) gt_comm_nccl_mark(c, m);
}

void gt_comm_wait_mark(gt_comm *c, gt_stream *s, int m) {
    if (c->nccl) gt_comm_nccl_wait_mark(c, s, m);
}

/* The host-side calls: MPI where it is up; NCCL otherwise (torchrun's GPU ranks: started on
 * this rank's GPU by the first such call, before any trainer exists); a world of one has
 * nobody to wait for. NCCL's watchdog verdict comes first either way. */
static int host_nccl(gt_comm *c, gt_error *err) {
    return gt_comm_nccl_start(c, gt_comm_device(c), err);
}

int gt_comm_barrier(gt_comm *c, gt_error *err) {
    int rc = gt_comm_nccl_check(c, err);
    if (rc || c->world.size == 1) return rc;
    if (c->mpi_active) return gt_comm_mpi_barrier(c, err);
    int ignored = 0;
    rc = host_nccl(c, err);
    return rc ? rc : gt_comm_nccl_agree_max(c, 0, &ignored, err);
}

int gt_comm_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err) {
    int rc = gt_comm_nccl_check(c, err);
    if (rc || c->world.size == 1) return rc;
    if (c->mpi_active) return gt_comm_mpi_broadcast(c, buf, n, root, err);
    rc = host_nccl(c, err);
    return rc ? rc : gt_comm_nccl_broadcast(c, buf, n, root, err);
}

int gt_comm_agree_max(gt_comm *c, int value, int *max, gt_error *err) {
    *max = value;
    int rc = gt_comm_nccl_check(c, err);
    if (rc) return rc;
    /* through NCCL even alone: the agreement is the watchdog's heartbeat */
    if (c->nccl && !c->mpi_active) return gt_comm_nccl_agree_max(c, value, max, err);
    if (c->world.size == 1) return GT_OK;
    if (c->mpi_active) return gt_comm_mpi_agree_max(c, value, max, err);
    rc = host_nccl(c, err);
    return rc ? rc : gt_comm_nccl_agree_max(c, value, max, err);
}

void gt_comm_abort(gt_comm *c, int code) {
    if (!c) return;
    gt_comm_nccl_abort(c);
    if (c->mpi_active && c->world.size > 1) gt_comm_mpi_abort(c, code);
}
