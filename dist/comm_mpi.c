/* MPI between CPU-backend processes (comm_impl.h): each collective is a CPU-backend kernel, run
 * at once in eager steps and recorded while capturing, so every rank replays the same sequence
 * of collectives. The rank-order sums use an all-to-all of the shards and add the ranks' copies
 * in rank order; MPI's own reductions choose their order by message size and world. */
#include "dist/comm_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"

#ifdef GT_HAVE_MPI
#include <mpi.h>

int gt_comm_mpi_init(gt_comm *c, gt_error *err) {
    size_t ranks = (size_t)c->world.size;
    c->counts = calloc(4 * ranks, sizeof *c->counts);
    if (!c->counts) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for MPI's tables");
    c->displs = c->counts + ranks;
    c->rcounts = c->displs + ranks;
    c->rdispls = c->rcounts + ranks;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
            free(c->counts);
            c->counts = NULL;
            return gt_error_set(err, GT_ERR_DEVICE, "MPI_Init failed; start the job with mpirun");
        }
        c->mpi_initialized_here = 1;
    }
    int rank = -1, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != c->world.rank || size != c->world.size) {
        gt_error_set(err, GT_ERR_INVALID,
                     "MPI says rank %d of %d but the launcher's variables say rank %d of %d (%s); "
                     "start graphtrain with mpirun directly, one process per rank",
                     rank, size, c->world.rank, c->world.size, gt_launcher_name(c->world.launcher));
        gt_comm_mpi_finish(c);
        return err->code;
    }
    return GT_OK;
}

void gt_comm_mpi_finish(gt_comm *c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (c->mpi_initialized_here && !finalized) MPI_Finalize();
    c->mpi_initialized_here = 0;
    free(c->counts);
    c->counts = NULL;
}

int gt_comm_mpi_barrier(gt_comm *c, gt_error *err) {
    (void)c;
    if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS)
        return gt_error_set(err, GT_ERR_DEVICE, "MPI_Barrier failed");
    return GT_OK;
}

int gt_comm_mpi_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err) {
    (void)c;
    if (n > INT_MAX)
        return gt_error_set(err, GT_ERR_INVALID, "broadcast of %zu bytes: too large", n);
    if (MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
        return gt_error_set(err, GT_ERR_DEVICE, "MPI_Bcast failed");
    return GT_OK;
}

int gt_comm_mpi_agree_max(gt_comm *c, int value, int *max, gt_error *err) {
    (void)c;
    int out = 0;
    if (MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return gt_error_set(err, GT_ERR_DEVICE, "MPI_Allreduce (agreeing on a stop) failed");
    *max = out;
    return GT_OK;
}

void gt_comm_mpi_abort(gt_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
}

typedef struct coll_args {
    gt_comm *c;
    void *buf;       /* all-reduce: in and out; all-gather: in and out */
    float *out;      /* reduce-scatter's shard */
    const float *in; /* reduce-scatter's input */
    size_t n, elem_bytes;
    gt_reduce_order order;
} coll_args;

/* counts and displacements (in elements) of every rank's shard of n */
static void shard_table(size_t n, int size, int *counts, int *displs) {
    for (int r = 0; r < size; r++) {
        size_t first = 0, count = 0;
        gt_comm_shard(n, size, r, &first, &count);
        counts[r] = (int)count;
        displs[r] = (int)first;
    }
}

/* scratch[q][0..count) = rank q's in[first..first+count); out = their sum in rank order */
static void rank_order_reduce_scatter(gt_comm *c, float *out, const float *in, size_t n) {
    int size = c->world.size, me = c->world.rank;
    int *counts = c->counts, *displs = c->displs, *rcounts = c->rcounts, *rdispls = c->rdispls;
    shard_table(n, size, counts, displs);
    for (int q = 0; q < size; q++) {
        rcounts[q] = counts[me];
        rdispls[q] = q * counts[me];
    }
    MPI_Alltoallv(in, counts, displs, MPI_FLOAT, c->scratch, rcounts, rdispls, MPI_FLOAT,
                  MPI_COMM_WORLD);
    size_t cnt = (size_t)counts[me];
    memcpy(out, c->scratch, cnt * sizeof *out);
    for (int q = 1; q < size; q++) {
        const float *part = c->scratch + (size_t)q * cnt;
        for (size_t i = 0; i < cnt; i++)
            out[i] += part[i];
    }
}

/* refuses what MPI's int counts or the reserved scratch cannot take, through the backend's
 * sticky error (collectives run inside steps, where nothing returns) */
static int fits(const coll_args *a, const char *what) {
    size_t first = 0, count = 0;
    gt_comm_shard(a->n, a->c->world.size, 0, &first, &count);
    if (a->n > INT_MAX) {
        gt_backend_fail(a->c->b, GT_ERR_UNSUPPORTED,
                        "%s of %zu elements: MPI counts stop at %d; split the buffer", what, a->n,
                        INT_MAX);
        return 0;
    }
    if (a->order == GT_REDUCE_RANK_ORDER && a->out != NULL &&
        count * (size_t)a->c->world.size > a->c->scratch_elems) {
        gt_backend_fail(a->c->b, GT_ERR_INVALID,
                        "%s of %zu elements in rank order: gt_comm_reserve set aside room for "
                        "%zu; reserve the largest buffer before the first step",
                        what, a->n, a->c->scratch_elems);
        return 0;
    }
    return 1;
}

static void k_all_reduce(const void *p) {
    const coll_args *a = p;
    if (!fits(a, "all-reduce")) return;
    if (a->order == GT_REDUCE_LIBRARY) {
        MPI_Allreduce(MPI_IN_PLACE, a->buf, (int)a->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return;
    }
    int size = a->c->world.size;
    size_t first = 0, count = 0;
    gt_comm_shard(a->n, size, a->c->world.rank, &first, &count);
    float *buf = a->buf;
    rank_order_reduce_scatter(a->c, buf + first, buf, a->n);
    int *counts = a->c->counts, *displs = a->c->displs;
    shard_table(a->n, size, counts, displs);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
}

static void k_reduce_scatter(const void *p) {
    const coll_args *a = p;
    if (!fits(a, "reduce-scatter")) return;
    if (a->order == GT_REDUCE_RANK_ORDER) {
        rank_order_reduce_scatter(a->c, a->out, a->in, a->n);
        return;
    }
    int size = a->c->world.size;
    int *counts = a->c->counts, *displs = a->c->displs;
    shard_table(a->n, size, counts, displs);
    MPI_Reduce_scatter(a->in, a->out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void k_all_gather(const void *p) {
    const coll_args *a = p;
    if (!fits(a, "all-gather")) return;
    int size = a->c->world.size;
    int *counts = a->c->counts, *displs = a->c->displs;
    shard_table(a->n, size, counts, displs);
    MPI_Datatype t;
    MPI_Type_contiguous((int)a->elem_bytes, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    MPI_Allgatherv(MPI_IN_PLACE, 0, t, a->buf, counts, displs, t, MPI_COMM_WORLD);
    MPI_Type_free(&t);
}

typedef struct acc_args {
    coll_args a;
    int first;
} acc_args;

/* acc = (acc +) the ranks' shards in rank order, one addition after another */
static void k_reduce_scatter_acc(const void *p) {
    const acc_args *x = p;
    const coll_args *a = &x->a;
    if (!fits(a, "reduce-scatter-accumulate")) return;
    gt_comm *c = a->c;
    int size = c->world.size, me = c->world.rank;
    int *counts = c->counts, *displs = c->displs, *rcounts = c->rcounts, *rdispls = c->rdispls;
    shard_table(a->n, size, counts, displs);
    for (int q = 0; q < size; q++) {
        rcounts[q] = counts[me];
        rdispls[q] = q * counts[me];
    }
    MPI_Alltoallv(a->in, counts, displs, MPI_FLOAT, c->scratch, rcounts, rdispls, MPI_FLOAT,
                  MPI_COMM_WORLD);
    size_t cnt = (size_t)counts[me];
    if (x->first) memcpy(a->out, c->scratch, cnt * sizeof *a->out);
    for (int q = x->first ? 1 : 0; q < size; q++) {
        const float *part = c->scratch + (size_t)q * cnt;
        for (size_t i = 0; i < cnt; i++)
            a->out[i] += part[i];
    }
}

void gt_comm_mpi_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                                    int first) {
    acc_args x = {{c, NULL, acc, in, n, sizeof(float), GT_REDUCE_RANK_ORDER}, first};
    gt_cpu_submit(c->b, s, k_reduce_scatter_acc, &x, sizeof x);
}

void gt_comm_mpi_all_reduce(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o) {
    coll_args a = {c, buf, NULL, NULL, n, sizeof(float), o};
    if (o == GT_REDUCE_RANK_ORDER) a.out = buf; /* marks the scratch check */
    gt_cpu_submit(c->b, s, k_all_reduce, &a, sizeof a);
}

void gt_comm_mpi_reduce_scatter(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                gt_reduce_order o) {
    coll_args a = {c, NULL, out, in, n, sizeof(float), o};
    gt_cpu_submit(c->b, s, k_reduce_scatter, &a, sizeof a);
}

void gt_comm_mpi_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes) {
    coll_args a = {c, buf, NULL, NULL, n, elem_bytes, GT_REDUCE_LIBRARY};
    gt_cpu_submit(c->b, s, k_all_gather, &a, sizeof a);
}

#else /* built without MPI */

int gt_comm_mpi_init(gt_comm *c, gt_error *err) {
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "a world of %d ranks (%s) needs MPI, and this build has none; install "
                        "Open MPI (apt-get install libopenmpi-dev openmpi-bin; scripts/setup.sh "
                        "does this) and build again",
                        c->world.size, gt_launcher_name(c->world.launcher));
}
void gt_comm_mpi_finish(gt_comm *c) {
    (void)c;
}
int gt_comm_mpi_barrier(gt_comm *c, gt_error *err) {
    (void)c;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, "no MPI in this build");
}
int gt_comm_mpi_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err) {
    (void)c, (void)buf, (void)n, (void)root;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, "no MPI in this build");
}
int gt_comm_mpi_agree_max(gt_comm *c, int value, int *max, gt_error *err) {
    (void)c, (void)value, (void)max;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, "no MPI in this build");
}
void gt_comm_mpi_abort(gt_comm *c, int code) {
    (void)c, (void)code;
}
void gt_comm_mpi_all_reduce(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o) {
    (void)s, (void)buf, (void)n, (void)o;
    gt_backend_fail(c->b, GT_ERR_UNSUPPORTED, "no MPI in this build");
}
void gt_comm_mpi_reduce_scatter(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                gt_reduce_order o) {
    (void)s, (void)out, (void)in, (void)n, (void)o;
    gt_backend_fail(c->b, GT_ERR_UNSUPPORTED, "no MPI in this build");
}
void gt_comm_mpi_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in, size_t n,
                                    int first) {
    (void)s, (void)acc, (void)in, (void)n, (void)first;
    gt_backend_fail(c->b, GT_ERR_UNSUPPORTED, "no MPI in this build");
}
void gt_comm_mpi_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes) {
    (void)s, (void)buf, (void)n, (void)elem_bytes;
    gt_backend_fail(c->b, GT_ERR_UNSUPPORTED, "no MPI in this build");
}

#endif
