/* The distributed optimizer's memory saving: each rank allocates only its shards of the master
 * weights and both Adam moments (Megatron shards exactly those; the parameters and the
 * gradients stay whole), laid out compactly, bucket after bucket in the buckets' order, so
 * AdamW steps each bucket's shard on contiguous arrays. The whole state exists only in host
 * memory, gathered from every rank for a checkpoint or a read (gt_trainer_dp_gather_state),
 * and dropped at the next step. Writes (initial weights, a resume) need no other rank: each
 * rank takes its shards of the whole arrays it is given. */
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "model/memory_plan.h"
#include "train/trainer_impl.h"

/* broadcasts go in pieces: MPI counts bytes in an int */
#define SHARD_BCAST_CHUNK ((size_t)256 << 20)

size_t gt_trainer_shard_elems(const gt_trainer *t, int rank) {
    size_t total = 0;
    for (int i = 0; i < gt_grad_sync_bucket_count(t->sync); i++) {
        size_t first = 0, count = 0;
        gt_comm_shard(gt_grad_sync_bucket(t->sync, i)->n, t->dp_size, rank, &first, &count);
        total += count;
    }
    return total;
}

size_t gt_trainer_opt_state_bytes(const gt_trainer *t) {
    size_t bytes = 0; /* the arena's tensors as planned and allocated, without the alignment */
    for (int i = 0; i < t->opt.count; i++)
        bytes += t->opt.entries[i].bytes;
    return bytes;
}

void gt_trainer_shards_drop(gt_trainer *t) {
    free(t->h_full);
    t->h_full = NULL;
    t->dp_stale = t->opt_sharded;
}

/* dev (this rank's compact shards) = its shards of host_full [n_params] */
static void put_shards(gt_trainer *t, void *dev, const void *host_full, size_t elem) {
    gt_backend *b = t->b;
    size_t at = 0;
    for (int i = 0; i < gt_grad_sync_bucket_count(t->sync); i++) {
        const gt_grad_bucket *k = gt_grad_sync_bucket(t->sync, i);
        if (k->shard_n)
            b->ops->memcpy_h2d(b, t->s, (char *)dev + at * elem,
                               (const char *)host_full + k->shard_first * elem, k->shard_n * elem);
        at += k->shard_n;
    }
}

int gt_trainer_shards_write_master(gt_trainer *t, const float *host, gt_error *err) {
    gt_backend *b = t->b;
    size_t n = t->n_params;
    gt_trainer_shards_drop(t);
    if (!t->hp.master_lo) {
        /* the parameters are cast from a whole fp32 copy on the device; the gradient buffer
         * holds it, as every step rewrites the gradients before it reads them */
        b->ops->memcpy_h2d(b, t->s, t->mi->grads, host, n * sizeof(float));
        b->ops->from_float(b, t->s, t->mi->params, t->mi->grads, n);
        put_shards(t, t->master, host, sizeof(float));
        return b->ops->stream_sync(b, t->s, err);
    }
    uint16_t *hi = malloc(n * sizeof *hi);
    int16_t *lo = malloc(n * sizeof *lo);
    int rc = GT_OK;
    if (!hi || !lo) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory writing the master");
    for (size_t i = 0; !rc && i < n; i++)
        gt_master_split(host[i], &hi[i], &lo[i]);
    if (!rc) {
        b->ops->memcpy_h2d(b, t->s, t->mi->params, hi, n * sizeof *hi);
        put_shards(t, t->master, lo, sizeof *lo);
        rc = b->ops->stream_sync(b, t->s, err); /* before hi and lo are freed */
    }
    free(hi);
    free(lo);
    return rc;
}

/* one moment's shards from fp32 host memory [n_params], rounded where it is kept in bf16 */
static int write_moment(gt_trainer *t, void *dev, const float *in, int is_bf16, gt_error *err) {
    size_t n = t->n_params;
    if (!is_bf16) {
        put_shards(t, dev, in, sizeof(float));
        return t->b->ops->stream_sync(t->b, t->s, err);
    }
    uint16_t *half = malloc(n * sizeof *half);
    if (!half) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory writing Adam moments");
    for (size_t i = 0; i < n; i++)
        half[i] = gt_bf16_from_float(in[i]);
    put_shards(t, dev, half, sizeof *half);
    int rc = t->b->ops->stream_sync(t->b, t->s, err);
    free(half);
    return rc;
}

int gt_trainer_shards_write_moments(gt_trainer *t, const float *m, const float *v, gt_error *err) {
    gt_trainer_shards_drop(t);
    int rc = write_moment(t, t->adam_m, m, t->hp.m_bf16, err);
    if (!rc) rc = write_moment(t, t->adam_v, v, t->hp.v_bf16, err);
    return rc;
}

/* full [n_params] of elem bytes: every rank's compact shards, broadcast by their owner in
 * turn and put in their places; mine holds this rank's, tmp room for rank 0's (the largest) */
static int gather_raw(gt_trainer *t, void *full, void *mine, void *tmp, size_t elem,
                      gt_error *err) {
    for (int q = 0; q < t->dp_size; q++) {
        size_t bytes = gt_trainer_shard_elems(t, q) * elem;
        char *buf = q == t->dp_rank ? mine : tmp;
        for (size_t off = 0; off < bytes; off += SHARD_BCAST_CHUNK) {
            size_t len = bytes - off < SHARD_BCAST_CHUNK ? bytes - off : SHARD_BCAST_CHUNK;
            int rc = gt_comm_broadcast(t->comm, buf + off, len, q, err);
            if (rc) return gt_error_wrap(err, "gathering rank %d's optimizer shards: ", q);
        }
        size_t at = 0;
        for (int i = 0; i < gt_grad_sync_bucket_count(t->sync); i++) {
            const gt_grad_bucket *k = gt_grad_sync_bucket(t->sync, i);
            size_t first = 0, count = 0;
            gt_comm_shard(k->n, t->dp_size, q, &first, &count);
            memcpy((char *)full + (k->first + first) * elem, buf + at * elem, count * elem);
            at += count;
        }
    }
    return GT_OK;
}

/* out [n_params] fp32 = the whole of one array (master low halves joined with hi, the bf16
 * parameters, when hi is given; a bf16 moment widened when is_bf16) */
static int gather_one(gt_trainer *t, float *out, const void *dev, size_t elem, const uint16_t *hi,
                      int is_bf16, gt_error *err) {
    size_t n = t->n_params, own = t->opt_elems;
    char *full = calloc(n ? n : 1, elem); /* every element is written; zeroed for the analyzer */
    char *mine = malloc((own ? own : 1) * elem);
    char *tmp = malloc((gt_trainer_shard_elems(t, 0) + 1) * elem);
    int rc = GT_OK;
    if (!full || !mine || !tmp)
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory gathering the optimizer state");
    if (!rc) {
        t->b->ops->memcpy_d2h(t->b, t->s, mine, dev, own * elem);
        rc = t->b->ops->stream_sync(t->b, t->s, err);
    }
    if (!rc) rc = gather_raw(t, full, mine, tmp, elem, err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (hi)
            out[i] = gt_master_join(hi[i], ((const int16_t *)(const void *)full)[i]);
        else if (is_bf16)
            out[i] = gt_bf16_to_float(((const uint16_t *)(const void *)full)[i]);
        else
            memcpy(&out[i], full + i * sizeof(float), sizeof(float));
    }
    free(full);
    free(mine);
    free(tmp);
    return rc;
}

int gt_trainer_dp_gather_state(gt_trainer *t, gt_error *err) {
    if (!t->opt_sharded || t->h_full) return GT_OK;
    size_t n = t->n_params;
    float *h = malloc(3 * n * sizeof *h + 1);
    uint16_t *hi = t->hp.master_lo ? malloc(n * sizeof *hi) : NULL;
    if (!h || (t->hp.master_lo && !hi)) {
        free(h);
        free(hi);
        return gt_error_set(err, GT_ERR_NOMEM,
                            "out of host memory for the whole optimizer state (%.1f MiB)",
                            (double)(3 * n * sizeof *h) / (1024.0 * 1024.0));
    }
    int rc = GT_OK;
    if (hi) { /* the parameters are whole on every rank: the master's high halves */
        t->b->ops->memcpy_d2h(t->b, t->s, hi, t->mi->params, n * sizeof *hi);
        rc = t->b->ops->stream_sync(t->b, t->s, err);
    }
    size_t master = gt_master_elem_bytes(t->b->act_bytes);
    if (!rc) rc = gather_one(t, h, t->master, master, hi, 0, err);
    if (!rc) rc = gather_one(t, h + n, t->adam_m, t->m_elem, NULL, t->hp.m_bf16, err);
    if (!rc) rc = gather_one(t, h + 2 * n, t->adam_v, t->v_elem, NULL, t->hp.v_bf16, err);
    free(hi);
    if (rc) {
        free(h);
        return rc;
    }
    t->h_full = h;
    t->dp_stale = 0;
    return GT_OK;
}

int gt_trainer_shards_read(gt_trainer *t, float *master, float *m, float *v, gt_error *err) {
    int rc = gt_trainer_dp_gather_state(t, err); /* collective unless gathered since the step */
    if (rc) return rc;
    size_t n = t->n_params;
    if (master) memcpy(master, t->h_full, n * sizeof *master);
    if (m) memcpy(m, t->h_full + n, n * sizeof *m);
    if (v) memcpy(v, t->h_full + 2 * n, n * sizeof *v);
    return GT_OK;
}
