/* The trainer's data parallelism: the slice of every global batch a rank trains (micro-batches
 * i = j * dp + rank, read from the one sample sequence every world size sees), the gradient
 * buckets (dist/grad_sync.h) and each micro-batch's loss, reduced so that the step's gradient
 * and loss are the same sums whatever the number of ranks (runtime.deterministic), or reduced
 * once a step in the library's order. */
#include <stddef.h>
#include <stdlib.h>

#include "core/clock.h"
#include "model/memory_plan.h"
#include "model/model_fp8.h"
#include "train/trainer_impl.h"

_Static_assert(offsetof(gt_step_state, aux_loss) == offsetof(gt_step_state, loss) + sizeof(float),
               "a micro-batch's loss pair is copied as two adjacent floats");

int gt_trainer_dp_check_world(const gt_config *cfg, const gt_comm *comm, gt_error *err) {
    int ranks = comm ? gt_comm_size(comm) : 1;
    int gpus = cfg->runtime.num_gpus, dp = cfg->ddp.data_parallel_size;
    if ((gpus == 1 || gpus == ranks) && (dp == 0 || dp == ranks)) return GT_OK;
    return gt_error_set(err, GT_ERR_INVALID,
                        "runtime.num_gpus=%d / ddp.data_parallel_size=%d, but the trainer has %d "
                        "data-parallel rank%s; launch one process per rank (mpirun -np N "
                        "graphtrain train ..., torchrun or srun), or set runtime.num_gpus=1",
                        gpus, dp, ranks, ranks == 1 ? "" : "s");
}

int gt_trainer_dp_init(gt_trainer *t, gt_comm *comm, gt_error *err) {
    int rc = gt_comm_bind(comm, t->b, err);
    if (rc) return rc;
    int size = gt_comm_size(comm);
    const gt_train_config *tr = &t->cfg.train;
    if (t->n_micro_global % size) {
        int per = tr->micro_batch_size * size;
        int lo = tr->global_batch_size / per * per;
        return gt_error_set(err, GT_ERR_INVALID,
                            "train.global_batch_size=%d does not divide over %d data-parallel "
                            "ranks of train.micro_batch_size=%d (each rank trains whole "
                            "micro-batches, global / (micro x ranks) of them); set "
                            "train.global_batch_size=%d, or change the number of ranks",
                            tr->global_batch_size, size, tr->micro_batch_size, lo > 0 ? lo : per);
    }
    t->comm = comm;
    t->dp_size = size;
    t->dp_rank = gt_comm_rank(comm);
    t->n_micro = t->n_micro_global / size;
    if (!(t->h_skip = malloc(2 * (size_t)t->N * sizeof(int32_t))))
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the data-parallel batch");
    gt_arena_init(&t->dp, "data_parallel");
    rc = gt_arena_add(&t->dp, "micro_losses", 2 * (size_t)t->n_micro_global * sizeof(float),
                      (void **)&t->loss_slots, err);
    size_t evals = tr->eval_interval > 0 && tr->eval_iters > 0 ? (size_t)tr->eval_iters : 0;
    if (!rc && evals)
        rc = gt_arena_add(&t->dp, "eval_losses", 2 * evals * sizeof(float), (void **)&t->eval_slots,
                          err);
    if (!rc) rc = gt_backend_alloc_arena(t->b, &t->dp, err);
    size_t most =
        2 * (size_t)t->n_micro_global > 2 * evals ? 2 * (size_t)t->n_micro_global : 2 * evals;
    if (!rc) rc = gt_comm_reserve(comm, most, err);
    return rc;
}

/* After the model: the buckets cover its parameters. */
static int make_sync(gt_trainer *t, gt_error *err) {
    size_t bucket = gt_memory_dp_bucket_elems(&t->cfg, t->dp_size);
    gt_grad_sync_opts o = {bucket,
                           t->cfg.runtime.deterministic ? GT_REDUCE_RANK_ORDER : GT_REDUCE_LIBRARY,
                           t->cfg.ddp.overlap_grad_reduce};
    return gt_grad_sync_create(&t->sync, t->comm, t->b, t->n_params, &o, err);
}

/* fp8: every recipe's flag, and delayed scaling's amaxes (fp8_sync.h) */
static int make_fp8_sync(gt_trainer *t, gt_error *err) {
    gt_fp8_meta *meta;
    float *history;
    int n, len;
    (void)gt_model_fp8_delayed_state(t->m, &meta, &history, &n, &len);
    return gt_fp8_sync_create(&t->fp8_sync, t->comm, t->b, meta, n, err);
}

int gt_trainer_dp_buckets(gt_trainer *t, gt_error *err) {
    int rc = t->comm && !t->sync ? make_sync(t, err) : GT_OK;
    if (!rc && t->comm && !t->fp8_sync && gt_model_fp8_configured(&t->cfg))
        rc = make_fp8_sync(t, err);
    return rc;
}

void gt_trainer_dp_release(gt_trainer *t) {
    gt_grad_sync_destroy(t->sync);
    t->sync = NULL;
    gt_fp8_sync_destroy(t->fp8_sync);
    t->fp8_sync = NULL;
    if (t->comm) gt_arena_release(&t->dp);
    gt_comm_unbind(t->comm); /* the backend goes next; the communicator outlives the trainer */
    free(t->h_skip);
    t->h_skip = NULL;
}

/* ddp.overlap_grad_reduce: the model's backward tells the buckets what it writes and ends */
static void hook_written(void *ctx, gt_stream *s, size_t first, size_t n) {
    gt_grad_sync_written(ctx, s, first, n);
}

static void hook_final(void *ctx, gt_stream *s, size_t first, size_t n) {
    gt_grad_sync_final(ctx, s, first, n);
}

void gt_trainer_enqueue_dp_micro_batches(gt_trainer *t, gt_stream *s, const gt_unit_exec *exec) {
    gt_backend *b = t->b;
    const gt_backend_ops *o = b->ops;
    const int P = t->dp_size, r = t->dp_rank, k = t->n_micro;
    const int rank_order = gt_grad_sync_order(t->sync) == GT_REDUCE_RANK_ORDER;
    const int overlap = gt_grad_sync_overlaps(t->sync);
    const gt_grad_hook hook = {t->sync, hook_written, hook_final};
    gt_model_set_grad_hook(t->m, overlap ? &hook : NULL);
    /* rank order: every micro-batch overwrites the gradients and is reduced at once; the
     * library's order: accumulated here as on one process, reduced after the last */
    int overwrite = k == 1 || t->cfg.model.cuda_graph_impl != GT_GRAPH_IMPL_TE;
    if (!rank_order && !overwrite) o->memset0(b, s, t->mi->grads, t->n_params * sizeof(float));
    o->memset0(b, s, t->loss_slots, 2 * (size_t)t->n_micro_global * sizeof(float));
    /* st->micro is the global micro-batch index (dropout's counters read it) */
    for (int q = 0; q < r; q++)
        o->micro_next(b, s, t->st);
    float dscale = 1.0f / (float)t->n_micro_global;
    for (int j = 0; j < k; j++) {
        const int32_t *tok = t->d_batch + (size_t)j * 2 * (size_t)t->N;
        o->memset0(b, s, &t->st->loss, 2 * sizeof(float)); /* this micro-batch's pair alone */
        int accumulate = rank_order ? 0 : !(overwrite && j == 0);
        if (overlap) gt_grad_sync_micro_begin(t->sync, t->mi->grads, j, k);
        gt_model_forward_backward(t->m, s, tok, tok + t->N, dscale, accumulate, t->st, exec);
        o->memcpy_d2d(b, s, t->loss_slots + 2 * ((size_t)j * (size_t)P + (size_t)r), &t->st->loss,
                      2 * sizeof(float));
        if (overlap)
            gt_grad_sync_micro_end(t->sync); /* its buckets' reductions are under way */
        else if (rank_order)
            gt_grad_sync_round(t->sync, s, t->mi->grads, j == 0);
        for (int q = 0; j + 1 < k && q < P; q++)
            o->micro_next(b, s, t->st);
    }
    if (overlap) {
        gt_model_set_grad_hook(t->m, NULL);
        gt_grad_sync_wait_all(t->sync, s);
    }
    if (rank_order)
        gt_grad_sync_finish(t->sync, s, t->mi->grads);
    else if (!overlap)
        gt_grad_sync_all_reduce(t->sync, s, t->mi->grads);
    gt_grad_sync_losses(t->sync, s, t->st, t->loss_slots, t->n_micro_global);
    /* before the NaN checks and AdamW read the fp8 flag, and delayed scaling its amaxes */
    gt_fp8_sync_step(t->fp8_sync, s, t->st);
}

void gt_trainer_enqueue_dp_adamw(gt_trainer *t, gt_stream *s) {
    gt_backend *b = t->b;
    size_t act = b->act_bytes, master = gt_master_elem_bytes(act);
    gt_grad_rows none = GT_NO_GRAD_ROWS; /* the rows are never lazy with data parallelism */
    size_t at = 0; /* the bucket's shard in the compact optimizer state (trainer_shards.c) */
    /* ddp.overlap_param_gather: bucket i's all-gather runs while the following buckets step;
     * it writes only bucket i's parameters, which no later step of this loop touches. (Not
     * into the next step's forward: a full-iteration graph must join its streams before its
     * capture ends, and the next forward is the next replay.) */
    const int overlap = t->cfg.ddp.overlap_param_gather;
    for (int i = 0; i < gt_grad_sync_bucket_count(t->sync); i++) {
        const gt_grad_bucket *k = gt_grad_sync_bucket(t->sync, i);
        size_t f = k->shard_first, n = k->shard_n;
        if (!n) {
            gt_grad_sync_gather_bucket(t->sync, s, i, t->mi->params, act, overlap);
            continue;
        }
        /* the decayed parameters are the first n_decay: how many of them this shard holds */
        size_t decay = t->n_decay > f ? t->n_decay - f : 0;
        b->ops->adamw(b, s, (char *)t->mi->params + f * act, (char *)t->master + at * master,
                      t->mi->grads + f, none, (char *)t->adam_m + at * t->m_elem,
                      (char *)t->adam_v + at * t->v_elem, n, decay < n ? decay : n, t->hp, t->st);
        gt_grad_sync_gather_bucket(t->sync, s, i, t->mi->params, act, overlap);
        at += n;
    }
    if (overlap) gt_grad_sync_wait_all(t->sync, s); /* evaluation and checkpoints see them */
}

/* What a step's collectives are, enqueued without the compute between them (bench's C): the
 * values they leave are not used, and the next step rewrites every one of them. */
static void enqueue_collectives(gt_trainer *t, gt_stream *s) {
    int rank_order = gt_grad_sync_order(t->sync) == GT_REDUCE_RANK_ORDER;
    for (int j = 0; rank_order && j < t->n_micro; j++)
        gt_grad_sync_round(t->sync, s, t->mi->grads, j == 0);
    if (rank_order)
        gt_grad_sync_finish(t->sync, s, t->mi->grads);
    else
        gt_grad_sync_all_reduce(t->sync, s, t->mi->grads);
    gt_grad_sync_losses(t->sync, s, t->st, t->loss_slots, t->n_micro_global);
    gt_fp8_sync_step(t->fp8_sync, s, t->st);
    if (t->opt_sharded) gt_grad_sync_gather(t->sync, s, t->mi->params, t->b->act_bytes);
}

int gt_trainer_time_collectives(gt_trainer *t, double *ms, gt_error *err) {
    *ms = 0;
    if (!t->sync) return GT_OK;
    int rc = gt_comm_barrier(t->comm, err); /* every rank starts together: no skew timed */
    if (rc) return rc;
    double t0 = gt_now_ms();
    enqueue_collectives(t, t->s);
    rc = t->b->ops->stream_sync(t->b, t->s, err);
    if (!rc) rc = gt_backend_check(t->b, err);
    *ms = gt_now_ms() - t0;
    return rc;
}

int gt_trainer_dp_eval(gt_trainer *t, float *loss, gt_error *err) {
    gt_backend *b = t->b;
    const gt_backend_ops *o = b->ops;
    const int n = t->cfg.train.eval_iters;
    const float scale = 1.0f / (float)n;
    o->memset0(b, t->s, t->eval_st, sizeof(gt_step_state));
    o->memset0(b, t->s, t->eval_slots, 2 * (size_t)n * sizeof(float));
    int rc = GT_OK;
    for (int i = 0; !rc && i < n; i++) {
        int mine = i % t->dp_size == t->dp_rank;
        int32_t *tok = mine ? t->h_batch : t->h_skip;
        rc = gt_data_next(t->valid, tok, tok + t->N, t->B, err);
        if (rc || !mine) continue;
        o->memset0(b, t->s, &t->eval_st->loss, 2 * sizeof(float)); /* this batch's pair alone */
        o->memcpy_h2d(b, t->s, t->d_batch, t->h_batch, 2 * (size_t)t->N * sizeof(int32_t));
        gt_model_forward_loss(t->m, t->s, t->d_batch, t->d_batch + t->N, scale, t->eval_st);
        o->memcpy_d2d(b, t->s, t->eval_slots + 2 * (size_t)i, &t->eval_st->loss, 2 * sizeof(float));
        rc = o->stream_sync(b, t->s, err); /* the pinned batch is refilled next */
    }
    if (rc) return rc;
    gt_grad_sync_losses(t->sync, t->s, t->eval_st, t->eval_slots, n);
    o->memcpy_d2h(b, t->s, &t->h_st[1], t->eval_st, sizeof(gt_step_state));
    rc = o->stream_sync(b, t->s, err);
    if (!rc) rc = gt_backend_check(b, err);
    if (!rc) *loss = t->h_st[1].loss;
    return rc;
}
