/* Gradient buckets and their reduction (grad_sync.h). The accumulators are one block of the
 * backend's memory (host memory on the CPU backend, device memory under NCCL). */
#include "dist/grad_sync.h"

#include <stdlib.h>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "dist/comm_impl.h"

struct gt_grad_sync {
    gt_comm *c;
    gt_backend *b;
    size_t n;
    gt_grad_sync_opts opts;
    int n_buckets;
    gt_grad_bucket *buckets; /* [n_buckets], the last parameters first */
    gt_arena mem;            /* acc, on the backend */
    float *acc;              /* every bucket's shard, one block */
    size_t per;              /* elements per bucket (the last one may hold fewer) */
    /* overlap: per bucket, the elements the backward has ended this micro-batch and whether a
     * detached collective of this step has not been waited for; the micro-batch's place */
    size_t *done;
    unsigned char *pending;
    int last_mark; /* the latest mark made (-1: none since the last wait_all) */
    float *grads;  /* [n] of the running micro-batch */
    int reduce_now, first_round, failed;
};

int gt_grad_sync_create(gt_grad_sync **out, gt_comm *c, gt_backend *b, size_t n,
                        const gt_grad_sync_opts *o, gt_error *err) {
    *out = NULL;
    if (b->kind != GT_BACKEND_CPU && !gt_comm_uses_nccl(c))
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "data-parallel gradient reduction on the %s backend needs an NCCL "
                            "communicator bound to it (gt_comm_bind)",
                            b->name);
    gt_grad_sync *g = calloc(1, sizeof *g);
    if (!g) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for gradient buckets");
    g->c = c;
    g->b = b;
    g->n = n;
    g->opts = *o;
    size_t per = o->bucket_elems && o->bucket_elems < n ? o->bucket_elems : (n ? n : 1);
    g->per = per;
    g->last_mark = -1;
    g->n_buckets = (int)((n + per - 1) / per);
    if (g->n_buckets == 0) g->n_buckets = 1;
    g->buckets = calloc((size_t)g->n_buckets, sizeof *g->buckets);
    g->done = calloc((size_t)g->n_buckets, sizeof *g->done);
    g->pending = calloc((size_t)g->n_buckets, 1);
    int size = gt_comm_size(c), rank = gt_comm_rank(c);
    size_t shard_total = 0;
    for (int i = 0; g->buckets && i < g->n_buckets; i++) {
        gt_grad_bucket *k = &g->buckets[i];
        /* bucket 0 holds the last parameters: the backward produces them first */
        size_t end = n - (size_t)i * per;
        k->n = end < per ? end : per;
        k->first = end - k->n;
        size_t f = 0, cnt = 0;
        gt_comm_shard(k->n, size, rank, &f, &cnt);
        k->shard_first = k->first + f;
        k->shard_n = cnt;
        shard_total += cnt;
    }
    gt_arena_init(&g->mem, "grad_shards");
    if (!g->buckets || !g->done || !g->pending) {
        gt_grad_sync_destroy(g);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the gradient buckets");
    }
    int rc = gt_arena_add(&g->mem, "acc", (shard_total ? shard_total : 1) * sizeof *g->acc,
                          (void **)&g->acc, err);
    if (!rc) rc = gt_backend_alloc_arena(b, &g->mem, err);
    if (rc) {
        gt_grad_sync_destroy(g);
        return gt_error_wrap(err, "the gradient shards (%zu floats): ", shard_total);
    }
    float *p = g->acc;
    for (int i = 0; i < g->n_buckets; i++) {
        g->buckets[i].acc = p;
        p += g->buckets[i].shard_n;
    }
    rc = gt_comm_reserve(c, per < n ? per : n, err);
    if (!rc) rc = gt_comm_reserve_marks(c, g->n_buckets, err);
    if (rc) {
        gt_grad_sync_destroy(g);
        return rc;
    }
    *out = g;
    return GT_OK;
}

void gt_grad_sync_destroy(gt_grad_sync *g) {
    if (!g) return;
    gt_arena_release(&g->mem);
    free(g->done);
    free(g->pending);
    free(g->buckets);
    free(g);
}

int gt_grad_sync_bucket_count(const gt_grad_sync *g) {
    return g->n_buckets;
}

const gt_grad_bucket *gt_grad_sync_bucket(const gt_grad_sync *g, int i) {
    return &g->buckets[i];
}

gt_reduce_order gt_grad_sync_order(const gt_grad_sync *g) {
    return g->opts.order;
}

void gt_grad_sync_round(gt_grad_sync *g, gt_stream *s, const float *grads, int first) {
    for (int i = 0; i < g->n_buckets; i++) {
        const gt_grad_bucket *k = &g->buckets[i];
        gt_comm_reduce_scatter_acc(g->c, s, k->acc, grads + k->first, k->n, first);
    }
}

void gt_grad_sync_finish(gt_grad_sync *g, gt_stream *s, float *grads) {
    const gt_backend_ops *o = g->b->ops;
    for (int i = 0; i < g->n_buckets; i++) {
        const gt_grad_bucket *k = &g->buckets[i];
        if (k->shard_n)
            o->memcpy_d2d(g->b, s, grads + k->shard_first, k->acc, k->shard_n * sizeof(float));
        gt_comm_all_gather(g->c, s, grads + k->first, k->n, sizeof(float));
    }
}

void gt_grad_sync_all_reduce(gt_grad_sync *g, gt_stream *s, float *grads) {
    for (int i = 0; i < g->n_buckets; i++) {
        const gt_grad_bucket *k = &g->buckets[i];
        gt_comm_all_reduce_sum(g->c, s, grads + k->first, k->n, GT_REDUCE_LIBRARY);
    }
}

void gt_grad_sync_gather(gt_grad_sync *g, gt_stream *s, void *buf, size_t elem_bytes) {
    for (int i = 0; i < g->n_buckets; i++)
        gt_grad_sync_gather_bucket(g, s, i, buf, elem_bytes, 0);
}

void gt_grad_sync_gather_bucket(gt_grad_sync *g, gt_stream *s, int i, void *buf, size_t elem_bytes,
                                int detached) {
    const gt_grad_bucket *k = &g->buckets[i];
    gt_comm_set_detached(g->c, detached);
    gt_comm_all_gather(g->c, s, (char *)buf + k->first * elem_bytes, k->n, elem_bytes);
    gt_comm_set_detached(g->c, 0);
    if (detached) {
        gt_comm_mark(g->c, i);
        g->last_mark = i;
    }
}

int gt_grad_sync_overlaps(const gt_grad_sync *g) {
    return g->opts.overlap;
}

void gt_grad_sync_micro_begin(gt_grad_sync *g, float *grads, int j, int n_micro) {
    g->grads = grads;
    g->reduce_now = g->opts.order == GT_REDUCE_RANK_ORDER || j == n_micro - 1;
    g->first_round = j == 0;
    for (int i = 0; i < g->n_buckets; i++)
        g->done[i] = 0;
}

/* the buckets that [first, first + n) touches: bucket 0 holds the last parameters */
static void bucket_span(const gt_grad_sync *g, size_t first, size_t n, int *lo, int *hi) {
    *lo = (int)((g->n - (first + n)) / g->per);
    *hi = (int)((g->n - 1 - first) / g->per);
}

static size_t overlap_of(const gt_grad_bucket *k, size_t first, size_t n) {
    size_t a = first > k->first ? first : k->first;
    size_t e = first + n < k->first + k->n ? first + n : k->first + k->n;
    return e > a ? e - a : 0;
}

void gt_grad_sync_written(gt_grad_sync *g, gt_stream *s, size_t first, size_t n) {
    int lo = 0, hi = 0;
    if (!n || first + n > g->n) return;
    bucket_span(g, first, n, &lo, &hi);
    for (int i = lo; i <= hi; i++)
        if (g->pending[i]) {
            gt_comm_wait_mark(g->c, s, i);
            g->pending[i] = 0;
        }
}

static void reduce_bucket(gt_grad_sync *g, gt_stream *s, int i, float *grads) {
    const gt_grad_bucket *k = &g->buckets[i];
    gt_comm_set_detached(g->c, 1);
    if (g->opts.order == GT_REDUCE_RANK_ORDER)
        gt_comm_reduce_scatter_acc(g->c, s, k->acc, grads + k->first, k->n, g->first_round);
    else
        gt_comm_all_reduce_sum(g->c, s, grads + k->first, k->n, GT_REDUCE_LIBRARY);
    gt_comm_set_detached(g->c, 0);
    gt_comm_mark(g->c, i);
    g->pending[i] = 1;
    g->last_mark = i;
}

void gt_grad_sync_final(gt_grad_sync *g, gt_stream *s, size_t first, size_t n) {
    int lo = 0, hi = 0;
    if (!n) return;
    if (first + n > g->n) {
        gt_backend_fail(g->b, GT_ERR_INVALID,
                        "gradient overlap: the backward ended elements [%zu, %zu) of %zu", first,
                        first + n, g->n);
        return;
    }
    bucket_span(g, first, n, &lo, &hi);
    for (int i = lo; i <= hi; i++) {
        gt_grad_bucket *k = &g->buckets[i];
        g->done[i] += overlap_of(k, first, n);
        if (g->done[i] > k->n && !g->failed) {
            g->failed = 1;
            gt_backend_fail(g->b, GT_ERR_INVALID,
                            "gradient overlap: the backward ended gradients [%zu, %zu) of "
                            "bucket %d twice (a hook point reports a tensor twice)",
                            k->first, k->first + k->n, i);
        }
        if (g->done[i] == k->n && g->reduce_now) reduce_bucket(g, s, i, g->grads);
    }
}

void gt_grad_sync_micro_end(gt_grad_sync *g) {
    for (int i = 0; i < g->n_buckets && !g->failed; i++)
        if (g->done[i] != g->buckets[i].n) {
            g->failed = 1;
            gt_backend_fail(g->b, GT_ERR_INVALID,
                            "gradient overlap: the backward ended %zu of the %zu gradients of "
                            "bucket %d (parameters [%zu, %zu)) and its reduction never started; "
                            "set ddp.overlap_grad_reduce=false and report this",
                            g->done[i], g->buckets[i].n, i, g->buckets[i].first,
                            g->buckets[i].first + g->buckets[i].n);
        }
}

void gt_grad_sync_wait_all(gt_grad_sync *g, gt_stream *s) {
    /* one communication stream: its latest mark follows every earlier collective */
    if (g->last_mark >= 0) gt_comm_wait_mark(g->c, s, g->last_mark);
    g->last_mark = -1;
    for (int i = 0; i < g->n_buckets; i++)
        g->pending[i] = 0;
}

typedef struct loss_args {
    gt_step_state *st;
    const float *slots;
    int n_micro;
} loss_args;

/* one addition per micro-batch, in order: the float sums a single process forms */
static void k_losses(const void *p) {
    const loss_args *a = p;
    float loss = 0, aux = 0;
    for (int i = 0; i < a->n_micro; i++) {
        loss += a->slots[2 * i];
        aux += a->slots[2 * i + 1];
    }
    a->st->loss = loss;
    a->st->aux_loss = aux;
}

void gt_grad_sync_losses(gt_grad_sync *g, gt_stream *s, gt_step_state *st, float *slots,
                         int n_micro) {
    /* each slot is nonzero on one rank at most, so the rank-order sum moves it exactly */
    gt_comm_all_reduce_sum(g->c, s, slots, 2 * (size_t)n_micro, GT_REDUCE_RANK_ORDER);
    if (gt_comm_uses_nccl(g->c)) {
        gt_comm_nccl_losses(g->c, s, &st->loss, &st->aux_loss, slots, n_micro);
        return;
    }
    loss_args a = {st, slots, n_micro};
    gt_cpu_submit(g->b, s, k_losses, &a, sizeof a);
}
