/* NCCL between GPUs (comm_impl.h). Every collective runs on the communicator's own stream:
 * an event recorded on the caller's stream orders it after the work that produced its input,
 * a second event orders the caller's later work after it, so in a full-iteration capture the
 * collectives become graph nodes on a side branch, and eager steps queue them without a host
 * wait. The rank-order sums (runtime.deterministic) use NCCL's point-to-point all-to-all and
 * add the ranks' copies in rank order in a kernel (k_comm.cu), the CPU backend's bits; the
 * library order is NCCL's own reductions. Shards are uneven (gt_comm_shard), so reduce-scatter
 * and all-gather are groups of reduces and broadcasts, one per owning rank.
 *
 * A watchdog thread polls NCCL's asynchronous error and the heartbeat the host-side calls
 * give (one agreement a training step): a peer that died or a step that never ends makes it
 * abort the communicator (ncclCommAbort), which releases the kernels a stream sync waits on,
 * and the next host-side call reports why. */
#include "dist/comm_impl.h"

#ifdef GT_HAVE_NCCL

#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "core/clock.h"
#include "dist/comm_cuda.h"
#include "dist/rendezvous.h"

#define WATCH_POLL_MS 100
#define HOST_POLL_NS 200000L

struct gt_comm_nccl {
    ncclComm_t comm;
    cudaStream_t cs;        /* the communication stream */
    cudaEvent_t fork, join; /* caller -> cs, cs -> caller */
    cudaEvent_t *marks;     /* [n_marks] gt_comm_mark: cs's work so far, for a later wait */
    int n_marks;
    float *scratch; /* device [size][largest shard]: the all-to-all's parts */
    size_t scratch_elems;
    int *dev_int; /* device [1]: the host-side agreement */
    pthread_t watch;
    int watching;
    atomic_int stop;      /* unbind asks the watchdog to end */
    atomic_int aborted;   /* the watchdog aborted the communicator: msg says why */
    atomic_llong beat_ms; /* the last heartbeat (gt_now_ms) */
    double timeout_ms;
    int device; /* the GPU it was created on */
    char msg[GT_ERROR_MSG_MAX];
};

static int fail_nccl(gt_error *err, ncclComm_t comm, ncclResult_t r, const char *call) {
    const char *last = comm ? ncclGetLastError(comm) : "";
    return gt_error_set(err, GT_ERR_DEVICE, "%s failed: %s%s%s", call, ncclGetErrorString(r),
                        last && *last ? ": " : "", last ? last : "");
}
#define NCCL_RET(err, comm, call)                                                                  \
    do {                                                                                           \
        ncclResult_t gt_r_ = (call);                                                               \
        if (gt_r_ != ncclSuccess) return fail_nccl((err), (comm), gt_r_, #call);                   \
    } while (0)
#define CUDA_RET(err, call)                                                                        \
    do {                                                                                           \
        cudaError_t gt_e_ = (call);                                                                \
        if (gt_e_ != cudaSuccess)                                                                  \
            return gt_error_set((err), GT_ERR_DEVICE, "%s failed: %s", #call,                      \
                                cudaGetErrorString(gt_e_));                                        \
    } while (0)

/* inside steps: into the backend's sticky error, naming the call and the line */
static void op_nccl(gt_comm *c, ncclResult_t r, const char *call, int line) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const char *last = ncclGetLastError(c->nccl->comm);
    gt_backend_fail(c->b, GT_ERR_DEVICE, "%s failed (%s:%d): %s%s%s", call, __FILE__, line,
                    ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}
#define NCCL_OP(c, call) op_nccl((c), (call), #call, __LINE__)

static void beat(gt_comm_nccl *n) {
    atomic_store(&n->beat_ms, (long long)gt_now_ms());
}

static void *watch_main(void *p) {
    gt_comm_nccl *n = p;
    struct timespec ts = {0, WATCH_POLL_MS * 1000000L};
    while (!atomic_load(&n->stop) && !atomic_load(&n->aborted)) {
        nanosleep(&ts, NULL);
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(n->comm, &ar);
        double idle = gt_now_ms() - (double)atomic_load(&n->beat_ms);
        if (ar != ncclSuccess && ar != ncclInProgress)
            snprintf(n->msg, sizeof n->msg,
                     "NCCL reported '%s' (%s): another rank failed or the network between them "
                     "broke; the communicator was aborted",
                     ncclGetErrorString(ar), ncclGetLastError(n->comm));
        else if (n->timeout_ms > 0 && idle > n->timeout_ms)
            snprintf(n->msg, sizeof n->msg,
                     "timeout: no training step finished on every rank within %.1f minutes "
                     "(dist.distributed_timeout_minutes); a rank died or hangs, so the "
                     "communicator was aborted",
                     n->timeout_ms / 60000.0);
        else
            continue;
        /* abort from this thread is NCCL's way out of a collective that never completes:
         * the kernels the main thread's stream sync waits on return */
        ncclCommAbort(n->comm);
        atomic_store(&n->aborted, 1);
    }
    return NULL;
}

int gt_comm_nccl_check(gt_comm *c, gt_error *err) {
    gt_comm_nccl *n = c->nccl;
    if (!n || !atomic_load(&n->aborted)) return GT_OK;
    return gt_error_set(err, GT_ERR_DEVICE, "rank %d of %d: %s", c->world.rank, c->world.size,
                        n->msg);
}

/* NCCL's unique id from rank 0 to the others: a file when one is named, MPI when it is up,
 * torchrun's rendezvous address, in that order */
static int exchange_id(gt_comm *c, ncclUniqueId *id, gt_error *err) {
    if (c->world.size == 1) return GT_OK;
    gt_rdv_opts o = {c->world.rank, c->world.size, c->timeout_ms, c->tag};
    if (c->id_file[0]) return gt_rdv_file(c->id_file, &o, id, sizeof *id, err);
    if (c->mpi_active) return gt_comm_broadcast(c, id, sizeof *id, 0, err);
    if (c->world.master_addr[0])
        return gt_rdv_tcp(c->world.master_addr, c->world.master_port + c->port_offset, &o, id,
                          sizeof *id, err);
    return gt_error_set(err, GT_ERR_INVALID,
                        "rank %d of %d (%s): NCCL's unique id has no way to the other ranks; "
                        "launch with mpirun (an MPI build), with torchrun (MASTER_ADDR and "
                        "MASTER_PORT), or set dist.nccl_id_file to a path every rank sees",
                        c->world.rank, c->world.size, gt_launcher_name(c->world.launcher));
}

static int setup(gt_comm *c, gt_comm_nccl *n, int device, gt_error *err) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->world.rank == 0) NCCL_RET(err, NULL, ncclGetUniqueId(&id));
    int rc = exchange_id(c, &id, err);
    if (rc) return gt_error_wrap(err, "handing NCCL's unique id to the ranks: ");
    CUDA_RET(err, cudaSetDevice(device));
    int lo = 0, hi = 0;
    CUDA_RET(err, cudaDeviceGetStreamPriorityRange(&lo, &hi));
    /* the highest priority, as Megatron gives its communication streams: a reduction that
     * waits behind the rest of the backward would not overlap it */
    CUDA_RET(err, cudaStreamCreateWithPriority(&n->cs, cudaStreamNonBlocking, hi));
    CUDA_RET(err, cudaEventCreateWithFlags(&n->fork, cudaEventDisableTiming));
    CUDA_RET(err, cudaEventCreateWithFlags(&n->join, cudaEventDisableTiming));
    CUDA_RET(err, cudaMalloc((void **)&n->dev_int, sizeof(int)));
    NCCL_RET(err, NULL, ncclCommInitRank(&n->comm, c->world.size, id, c->world.rank));
    beat(n);
    if (pthread_create(&n->watch, NULL, watch_main, n) != 0)
        return gt_error_set(err, GT_ERR_NOMEM, "cannot start the NCCL watchdog thread");
    n->watching = 1;
    return GT_OK;
}

int gt_comm_nccl_start(gt_comm *c, int device, gt_error *err) {
    if (c->nccl) return GT_OK;
    gt_comm_nccl *n = calloc(1, sizeof *n);
    if (!n) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for an NCCL communicator");
    n->timeout_ms = c->timeout_ms;
    n->device = device;
    c->nccl = n;
    int rc = setup(c, n, device, err);
    if (rc) {
        gt_comm_nccl_finish(c);
        return gt_error_wrap(err, "rank %d of %d: ", c->world.rank, c->world.size);
    }
    return GT_OK;
}

int gt_comm_nccl_bind(gt_comm *c, gt_backend *b, gt_error *err) {
    int device = ((const gt_cuda_impl *)b->impl)->device;
    int rc = gt_comm_nccl_start(c, device, err);
    if (rc) return rc;
    if (c->nccl->device != device)
        return gt_error_set(err, GT_ERR_INVALID,
                            "rank %d: its NCCL communicator is on GPU %d, the backend on GPU %d; "
                            "one process drives one GPU",
                            c->world.rank, c->nccl->device, device);
    return GT_OK;
}

void gt_comm_nccl_finish(gt_comm *c) {
    gt_comm_nccl *n = c->nccl;
    if (!n) return;
    if (n->watching) {
        atomic_store(&n->stop, 1);
        pthread_join(n->watch, NULL);
    }
    if (n->comm && !atomic_load(&n->aborted)) {
        /* an idle communicator is destroyed; one with work still queued (a step that failed
         * mid-way, a peer gone) is aborted, which never waits on the other ranks */
        if (n->cs && cudaStreamQuery(n->cs) == cudaSuccess)
            ncclCommDestroy(n->comm);
        else
            ncclCommAbort(n->comm);
    }
    if (n->scratch) cudaFree(n->scratch);
    if (n->dev_int) cudaFree(n->dev_int);
    if (n->fork) cudaEventDestroy(n->fork);
    if (n->join) cudaEventDestroy(n->join);
    for (int i = 0; i < n->n_marks; i++)
        cudaEventDestroy(n->marks[i]);
    free(n->marks);
    if (n->cs) cudaStreamDestroy(n->cs);
    free(n);
    c->nccl = NULL;
}

void gt_comm_nccl_abort(gt_comm *c) {
    gt_comm_nccl *n = c->nccl;
    if (!n || !n->comm || atomic_load(&n->aborted)) return;
    if (n->watching) {
        atomic_store(&n->stop, 1);
        pthread_join(n->watch, NULL);
        n->watching = 0;
    }
    ncclCommAbort(n->comm);
    atomic_store(&n->aborted, 1);
    snprintf(n->msg, sizeof n->msg, "the communicator was aborted after a rank failed");
}

int gt_comm_nccl_reserve(gt_comm *c, size_t elems, gt_error *err) {
    gt_comm_nccl *n = c->nccl;
    size_t first = 0, count = 0;
    gt_comm_shard(elems, c->world.size, 0, &first, &count); /* rank 0's shard is the largest */
    size_t need = count * (size_t)c->world.size;
    if (need <= n->scratch_elems) return GT_OK;
    float *p = NULL;
    cudaError_t e = cudaMalloc((void **)&p, (need ? need : 1) * sizeof *p);
    if (e != cudaSuccess)
        return gt_error_set(err, GT_ERR_NOMEM,
                            "out of device memory for the %.1f MiB of a rank-order reduction "
                            "(%s)",
                            (double)need * sizeof *p / (1024.0 * 1024.0), cudaGetErrorString(e));
    if (n->scratch) cudaFree(n->scratch);
    n->scratch = p;
    n->scratch_elems = need;
    return GT_OK;
}

/* 1: go on and enqueue on n->cs, ordered after s's work so far; 0: nothing to do (planning,
 * an aborted communicator, whose reason goes to the sticky error) */
static int begin(gt_comm *c, gt_stream *s) {
    gt_comm_nccl *n = c->nccl;
    if (c->b->planning) return 0;
    if (atomic_load(&n->aborted)) {
        gt_backend_fail(c->b, GT_ERR_DEVICE, "rank %d: %s", c->world.rank, n->msg);
        return 0;
    }
    GT_CUDA_OP(c->b, cudaEventRecord(n->fork, gt_cuda_stream(s)));
    GT_CUDA_OP(c->b, cudaStreamWaitEvent(n->cs, n->fork, 0));
    return 1;
}

/* s's later work waits for what was enqueued on n->cs, unless detached (gt_comm_mark) */
static void end(gt_comm *c, gt_stream *s) {
    gt_comm_nccl *n = c->nccl;
    if (c->detached) return;
    GT_CUDA_OP(c->b, cudaEventRecord(n->join, n->cs));
    GT_CUDA_OP(c->b, cudaStreamWaitEvent(gt_cuda_stream(s), n->join, 0));
}

int gt_comm_nccl_reserve_marks(gt_comm *c, int count, gt_error *err) {
    gt_comm_nccl *n = c->nccl;
    if (count <= n->n_marks) return GT_OK;
    cudaEvent_t *p = realloc(n->marks, (size_t)count * sizeof *p);
    if (!p) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for %d NCCL events", count);
    n->marks = p;
    for (; n->n_marks < count; n->n_marks++)
        CUDA_RET(err, cudaEventCreateWithFlags(&n->marks[n->n_marks], cudaEventDisableTiming));
    return GT_OK;
}

static int mark_exists(gt_comm *c, int m) {
    if (m >= 0 && m < c->nccl->n_marks) return 1;
    gt_backend_fail(c->b, GT_ERR_INVALID,
                    "communication mark %d: gt_comm_reserve_marks set aside %d; reserve them "
                    "before the first step",
                    m, c->nccl->n_marks);
    return 0;
}

void gt_comm_nccl_mark(gt_comm *c, int m) {
    if (c->b->planning || atomic_load(&c->nccl->aborted) || !mark_exists(c, m)) return;
    GT_CUDA_OP(c->b, cudaEventRecord(c->nccl->marks[m], c->nccl->cs));
}

void gt_comm_nccl_wait_mark(gt_comm *c, gt_stream *s, int m) {
    if (c->b->planning || atomic_load(&c->nccl->aborted) || !mark_exists(c, m)) return;
    GT_CUDA_OP(c->b, cudaStreamWaitEvent(gt_cuda_stream(s), c->nccl->marks[m], 0));
}

static int scratch_fits(gt_comm *c, size_t n, const char *what) {
    size_t first = 0, count = 0;
    gt_comm_shard(n, c->world.size, 0, &first, &count);
    if (count * (size_t)c->world.size <= c->nccl->scratch_elems) return 1;
    gt_backend_fail(c->b, GT_ERR_INVALID,
                    "%s of %zu elements in rank order: gt_comm_reserve set aside room for %zu; "
                    "reserve the largest buffer before the first step",
                    what, n, c->nccl->scratch_elems);
    return 0;
}

/* scratch[q][0..cnt) = rank q's in[first..first+count) of this rank's shard */
static void all_to_all_shards(gt_comm *c, const float *in, size_t n) {
    gt_comm_nccl *n_ = c->nccl;
    int size = c->world.size, me = c->world.rank;
    size_t mf = 0, mc = 0;
    gt_comm_shard(n, size, me, &mf, &mc);
    NCCL_OP(c, ncclGroupStart());
    for (int q = 0; q < size; q++) {
        size_t f = 0, cnt = 0;
        gt_comm_shard(n, size, q, &f, &cnt);
        if (cnt) NCCL_OP(c, ncclSend(in + f, cnt, ncclFloat, q, n_->comm, n_->cs));
        if (mc)
            NCCL_OP(c, ncclRecv(n_->scratch + (size_t)q * mc, mc, ncclFloat, q, n_->comm, n_->cs));
    }
    NCCL_OP(c, ncclGroupEnd());
}

static void rank_sum(gt_comm *c, float *acc, size_t n, int first) {
    size_t f = 0, cnt = 0;
    gt_comm_shard(n, c->world.size, c->world.rank, &f, &cnt);
    cudaError_t e =
        gt_dist_cuda_rank_sum(c->nccl->cs, acc, c->nccl->scratch, cnt, c->world.size, first);
    if (e != cudaSuccess) gt_cuda_fail_call(c->b, e, "k_rank_sum", __FILE__, __LINE__);
}

/* every rank's shard of buf (elements of eb bytes) broadcast from its owner, in place */
static void gather_shards(gt_comm *c, void *buf, size_t n, size_t eb) {
    gt_comm_nccl *n_ = c->nccl;
    NCCL_OP(c, ncclGroupStart());
    for (int q = 0; q < c->world.size; q++) {
        size_t f = 0, cnt = 0;
        gt_comm_shard(n, c->world.size, q, &f, &cnt);
        char *p = (char *)buf + f * eb;
        if (cnt) NCCL_OP(c, ncclBroadcast(p, p, cnt * eb, ncclChar, q, n_->comm, n_->cs));
    }
    NCCL_OP(c, ncclGroupEnd());
}

void gt_comm_nccl_all_reduce(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o) {
    if (!n || !begin(c, s)) return;
    if (o == GT_REDUCE_LIBRARY) {
        NCCL_OP(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->nccl->comm, c->nccl->cs));
    } else if (scratch_fits(c, n, "all-reduce")) {
        size_t f = 0, cnt = 0;
        gt_comm_shard(n, c->world.size, c->world.rank, &f, &cnt);
        all_to_all_shards(c, buf, n);
        rank_sum(c, buf + f, n, 1);
        gather_shards(c, buf, n, sizeof *buf);
    }
    end(c, s);
}

void gt_comm_nccl_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n) {
    if (!n || !begin(c, s)) return;
    /* non-negative floats and NaN order as their bits read unsigned: a max in any order, NaN
     * winning, so every rank skips a step one rank's amax overflowed */
    NCCL_OP(c, ncclAllReduce(buf, buf, n, ncclUint32, ncclMax, c->nccl->comm, c->nccl->cs));
    end(c, s);
}

void gt_comm_nccl_reduce_scatter(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                 gt_reduce_order o) {
    if (!n || !begin(c, s)) return;
    if (o == GT_REDUCE_LIBRARY) {
        NCCL_OP(c, ncclGroupStart());
        for (int q = 0; q < c->world.size; q++) {
            size_t f = 0, cnt = 0;
            gt_comm_shard(n, c->world.size, q, &f, &cnt);
            if (cnt)
                NCCL_OP(c, ncclReduce(in + f, out, cnt, ncclFloat, ncclSum, q, c->nccl->comm,
                                      c->nccl->cs));
        }
        NCCL_OP(c, ncclGroupEnd());
    } else if (scratch_fits(c, n, "reduce-scatter")) {
        all_to_all_shards(c, in, n);
        rank_sum(c, out, n, 1);
    }
    end(c, s);
}

void gt_comm_nccl_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes) {
    if (!n || !begin(c, s)) return;
    gather_shards(c, buf, n, elem_bytes);
    end(c, s);
}

void gt_comm_nccl_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in,
                                     size_t n, int first) {
    if (!n || !begin(c, s)) return;
    if (scratch_fits(c, n, "reduce-scatter-accumulate")) {
        all_to_all_shards(c, in, n);
        rank_sum(c, acc, n, first);
    }
    end(c, s);
}

void gt_comm_nccl_losses(gt_comm *c, gt_stream *s, float *loss, float *aux, const float *slots,
                         int n_micro) {
    if (c->b->planning) return;
    cudaError_t e = gt_dist_cuda_losses(gt_cuda_stream(s), loss, aux, slots, n_micro);
    if (e != cudaSuccess) gt_cuda_fail_call(c->b, e, "k_losses", __FILE__, __LINE__);
}

/* the host waits for n->cs with the watchdog's deadline, never in cudaStreamSynchronize
 * alone: a rank that never joins must not keep this one forever */
static int wait_cs(gt_comm *c, const char *what, gt_error *err) {
    gt_comm_nccl *n = c->nccl;
    double deadline = gt_now_ms() + (n->timeout_ms > 0 ? n->timeout_ms : 1e300);
    struct timespec ts = {0, HOST_POLL_NS};
    for (;;) {
        cudaError_t e = cudaStreamQuery(n->cs);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady)
            return gt_error_set(err, GT_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
        int rc = gt_comm_nccl_check(c, err);
        if (rc) return rc;
        if (gt_now_ms() > deadline) {
            gt_comm_nccl_abort(c);
            return gt_error_set(err, GT_ERR_DEVICE,
                                "timeout: rank %d waited %.1f minutes in %s for the other ranks "
                                "(dist.distributed_timeout_minutes); a rank died or hangs",
                                c->world.rank, n->timeout_ms / 60000.0, what);
        }
        nanosleep(&ts, NULL);
    }
    beat(n);
    return gt_comm_nccl_check(c, err);
}

int gt_comm_nccl_agree_max(gt_comm *c, int value, int *max, gt_error *err) {
    gt_comm_nccl *n = c->nccl;
    int rc = gt_comm_nccl_check(c, err);
    if (rc) return rc;
    beat(n);
    int h = value;
    CUDA_RET(err, cudaMemcpyAsync(n->dev_int, &h, sizeof h, cudaMemcpyHostToDevice, n->cs));
    NCCL_RET(err, n->comm,
             ncclAllReduce(n->dev_int, n->dev_int, 1, ncclInt32, ncclMax, n->comm, n->cs));
    CUDA_RET(err, cudaMemcpyAsync(&h, n->dev_int, sizeof h, cudaMemcpyDeviceToHost, n->cs));
    rc = wait_cs(c, "agreeing on a stop over NCCL", err);
    if (!rc) *max = h;
    return rc;
}

int gt_comm_nccl_broadcast(gt_comm *c, void *buf, size_t bytes, int root, gt_error *err) {
    gt_comm_nccl *n = c->nccl;
    int rc = gt_comm_nccl_check(c, err);
    if (rc || !bytes) return rc;
    beat(n);
    void *d = NULL;
    CUDA_RET(err, cudaMalloc(&d, bytes));
    cudaError_t e = cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, n->cs);
    ncclResult_t r =
        e == cudaSuccess ? ncclBroadcast(d, d, bytes, ncclChar, root, n->comm, n->cs) : ncclSuccess;
    if (e == cudaSuccess && r == ncclSuccess)
        e = cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, n->cs);
    if (e != cudaSuccess)
        rc = gt_error_set(err, GT_ERR_DEVICE, "broadcast over NCCL: %s", cudaGetErrorString(e));
    else if (r != ncclSuccess)
        rc = fail_nccl(err, n->comm, r, "ncclBroadcast");
    else
        rc = wait_cs(c, "a broadcast over NCCL", err);
    cudaFree(d);
    return rc;
}

int gt_comm_device(const gt_comm *c) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
    /* a launcher that shows each rank only its own GPU (srun --gpus-per-task,
     * CUDA_VISIBLE_DEVICES per rank) leaves one visible whatever the local rank */
    if (count == 1) return 0;
    return c->world.local_rank; /* past the visible GPUs, the backend says so by number */
}

#else /* built without NCCL */

void gt_comm_nccl_all_reduce_max(gt_comm *c, gt_stream *s, float *buf, size_t n) {
    (void)c, (void)s, (void)buf, (void)n;
}

int gt_comm_device(const gt_comm *c) {
    return c->world.local_rank;
}

static int no_nccl(const gt_comm *c, gt_error *err) {
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "data parallelism on GPUs (%d rank%s, %s) needs NCCL, and this build has "
                        "none; build with CUDA where nccl.h is found (the CUDA toolkit's, or "
                        "NCCL_HOME=<folder with include/ and lib/>), or use runtime.device=cpu "
                        "with mpirun",
                        c->world.size, c->world.size == 1 ? "" : "s",
                        gt_launcher_name(c->world.launcher));
}
int gt_comm_nccl_bind(gt_comm *c, gt_backend *b, gt_error *err) {
    (void)b;
    return no_nccl(c, err);
}
int gt_comm_nccl_start(gt_comm *c, int device, gt_error *err) {
    (void)device;
    return no_nccl(c, err);
}
void gt_comm_nccl_finish(gt_comm *c) {
    (void)c;
}
int gt_comm_nccl_reserve(gt_comm *c, size_t elems, gt_error *err) {
    (void)c, (void)elems, (void)err;
    return GT_OK;
}
void gt_comm_nccl_all_reduce(gt_comm *c, gt_stream *s, float *buf, size_t n, gt_reduce_order o) {
    (void)c, (void)s, (void)buf, (void)n, (void)o;
}
void gt_comm_nccl_reduce_scatter(gt_comm *c, gt_stream *s, float *out, const float *in, size_t n,
                                 gt_reduce_order o) {
    (void)c, (void)s, (void)out, (void)in, (void)n, (void)o;
}
void gt_comm_nccl_all_gather(gt_comm *c, gt_stream *s, void *buf, size_t n, size_t elem_bytes) {
    (void)c, (void)s, (void)buf, (void)n, (void)elem_bytes;
}
void gt_comm_nccl_reduce_scatter_acc(gt_comm *c, gt_stream *s, float *acc, const float *in,
                                     size_t n, int first) {
    (void)c, (void)s, (void)acc, (void)in, (void)n, (void)first;
}
int gt_comm_nccl_reserve_marks(gt_comm *c, int n, gt_error *err) {
    (void)c, (void)n, (void)err;
    return GT_OK;
}
void gt_comm_nccl_mark(gt_comm *c, int m) {
    (void)c, (void)m;
}
void gt_comm_nccl_wait_mark(gt_comm *c, gt_stream *s, int m) {
    (void)c, (void)s, (void)m;
}
int gt_comm_nccl_broadcast(gt_comm *c, void *buf, size_t n, int root, gt_error *err) {
    (void)c, (void)buf, (void)n, (void)root;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, "no NCCL in this build");
}
int gt_comm_nccl_agree_max(gt_comm *c, int value, int *max, gt_error *err) {
    (void)c, (void)value, (void)max;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, "no NCCL in this build");
}
int gt_comm_nccl_check(gt_comm *c, gt_error *err) {
    (void)c, (void)err;
    return GT_OK;
}
void gt_comm_nccl_abort(gt_comm *c) {
    (void)c;
}
void gt_comm_nccl_losses(gt_comm *c, gt_stream *s, float *loss, float *aux, const float *slots,
                         int n_micro) {
    (void)c, (void)s, (void)loss, (void)aux, (void)slots, (void)n_micro;
}

#endif
