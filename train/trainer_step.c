/* One training step and one evaluation. gt_trainer_enqueue_step is what a full-iteration
 * graph captures: it only enqueues device work (one batch copy from pinned memory, every
 * micro-batch (the first overwrites the gradients, so they are not zeroed first), the
 * gradient-reduction hook, NaN checks, clipping, AdamW, step advance) and never reads a value back.
 * gt_trainer_step wraps it with the host side: batch loading before, one read-back of the step
 * state and one sync after. gt_trainer_eval sends each eval batch's forward through the graph
 * runner too, as a shape bucket of its own. */
#include <string.h>

#include "core/clock.h"
#include "graphs/graphs.h"
#include "model/model_fp8.h"
#include "train/trainer_impl.h"

gt_adamw_state gt_trainer_adamw_state(const gt_trainer *t) {
    return (gt_adamw_state){t->mi->params, t->master,  t->adam_m, t->adam_v,
                            t->n_params,   t->n_decay, t->hp,     t->sched};
}

gt_adamw_state gt_trainer_opt_state(gt_trainer *t) {
    gt_adamw_state os = gt_trainer_adamw_state(t);
    gt_lazy_rows_flush(&t->lazy, os, 1);
    return os;
}

void gt_trainer_enqueue_step(gt_trainer *t, gt_stream *s, const gt_unit_exec *exec) {
    gt_backend *b = t->b;
    const gt_backend_ops *o = b->ops;
    o->memcpy_h2d(b, s, t->d_batch, t->h_batch, t->batch_bytes);
    /* The first micro-batch overwrites every gradient (no zeroing pass, no read of the old
     * values in its weight-gradient GEMMs), except when per-unit graphs serve several
     * micro-batches: a unit graph replays the overwrite or the accumulate it was captured
     * with, so there every micro-batch accumulates into zeroed gradients. The padding
     * between tensors is zero from allocation and nothing writes it. */
    int overwrite = t->n_micro == 1 || t->cfg.model.cuda_graph_impl != GT_GRAPH_IMPL_TE;
    if (!overwrite && !t->sync) o->memset0(b, s, t->mi->grads, t->n_params * sizeof(float));
    o->step_begin(b, s, t->st, t->sched);
    /* the embedding rows the step reads get the updates they missed (lazy rows) */
    gt_grad_rows rows = gt_lazy_rows_marks(&t->lazy);
    gt_lazy_rows_catchup(&t->lazy, s, gt_trainer_adamw_state(t), t->d_batch, t->n_micro, t->N);
    /* the fp8 weight copies, once for the step's micro-batches (a no-op under bf16) */
    gt_model_fp8_cast_weights(t->m, s, 1, t->st);
    float dscale = 1.0f / (float)t->n_micro;
    for (int i = 0; !t->sync && i < t->n_micro; i++) {
        const int32_t *tok = t->d_batch + (size_t)i * 2 * (size_t)t->N;
        gt_model_forward_backward(t->m, s, tok, tok + t->N, dscale, !(overwrite && i == 0), t->st,
                                  exec);
        if (i + 1 < t->n_micro) o->micro_next(b, s, t->st); /* step_begin resets it */
    }
    /* data parallelism: this rank's micro-batches and the reductions (trainer_dp.c) */
    if (t->sync) gt_trainer_enqueue_dp_micro_batches(t, s, exec);
    if (t->grad_reduce) t->grad_reduce(t->grad_reduce_ctx, b, s, t->mi->grads, t->n_params);
    if (t->inject_nan >= 0) o->inject_nan(b, s, t->st, t->mi->grads, rows);
    o->grad_norm(b, s, t->st, t->mi->grads, t->n_params, rows, t->check_loss, t->check_grad,
                 t->hp.clip_grad);
    if (t->sync && t->cfg.optimizer.use_distributed_optimizer)
        gt_trainer_enqueue_dp_adamw(t, s); /* each rank its shards, then the gather */
    else
        o->adamw(b, s, t->mi->params, t->master, t->mi->grads, rows, t->adam_m, t->adam_v,
                 t->n_params, t->n_decay, t->hp, t->st);
    gt_model_fp8_step_end(t->m, s, t->st); /* delayed scaling: amax history, next scales */
    o->step_end(b, s, t->st);
}

/* The training step as the runner's body. */
static void step_body(void *ctx, gt_stream *s, const gt_unit_exec *exec) {
    gt_trainer_enqueue_step(ctx, s, exec);
}

gt_graph_key gt_trainer_step_key(const gt_trainer *t) {
    return (gt_graph_key){GT_GRAPH_STEP, t->N};
}

int gt_trainer_set_grad_reduce(gt_trainer *t, gt_grad_reduce_fn fn, void *ctx, gt_error *err) {
    if (t->stepped)
        return gt_error_set(err, GT_ERR_INVALID,
                            "the gradient-reduction hook was set after step %lld ran; a "
                            "captured step would keep the old one: set it right after "
                            "gt_trainer_create, before the first step",
                            (long long)t->steps);
    t->grad_reduce = fn;
    t->grad_reduce_ctx = ctx;
    return GT_OK;
}

/* The batch of (1-based) step `step` into `into`. */
static int load_batch(gt_trainer *t, int32_t *into, int64_t step, gt_error *err) {
    /* every rank reads the whole global batch and keeps its micro-batches, so the sample
     * sequence and the data position are the same whatever the world size */
    for (int i = 0; i < t->n_micro_global; i++) {
        int mine = i % t->dp_size == t->dp_rank;
        int32_t *tok = mine ? into + (size_t)(i / t->dp_size) * 2 * (size_t)t->N : t->h_skip;
        int rc = gt_data_next(t->train, tok, tok + t->N, t->B, err);
        if (rc) return gt_error_wrap(err, "loading the batch of step %lld: ", (long long)step);
    }
    return GT_OK;
}

static int numeric_error(const gt_trainer *t, const gt_step_state *h, gt_error *err) {
    if ((h->nan_flags & (GT_NAN_LOSS | GT_NAN_GRAD)) == 0 && (h->nan_flags & GT_NAN_FP8))
        return gt_error_set(err, GT_ERR_NUMERIC,
                            "step %lld: an fp8 amax was NaN or Inf, or its scale overflowed "
                            "(model.compute_dtype=fp8_*: checked in every fp8 cast); the update "
                            "of this step was skipped, so the weights are those of step %lld. "
                            "Lower optimizer.lr, set optimizer.clip_grad, or resume from an "
                            "earlier checkpoint",
                            (long long)h->step, (long long)h->step - 1);
    int both = (h->nan_flags & GT_NAN_LOSS) && (h->nan_flags & GT_NAN_GRAD);
    const char *which = both                           ? "the loss and the gradient norm are"
                        : (h->nan_flags & GT_NAN_LOSS) ? "the loss is"
                                                       : "the gradient norm is";
    const char *check = both ? "rerun_state_machine.check_for_nan_in_loss and "
                               "ddp.check_for_nan_in_grad"
                        : (h->nan_flags & GT_NAN_LOSS) ? "rerun_state_machine.check_for_nan_in_loss"
                                                       : "ddp.check_for_nan_in_grad";
    /* h->step was advanced by step_end: the failed step's 0-based index is h->step - 1 */
    int injected = t->inject_nan >= 0 && h->step - 1 == t->inject_nan;
    return gt_error_set(err, GT_ERR_NUMERIC,
                        "step %lld: %s NaN or Inf (check %s); the update of this step was "
                        "skipped, so the weights are those of step %lld. %s",
                        (long long)h->step, which, check, (long long)h->step - 1,
                        injected ? "The NaN was forced by debug.inject_nan_at_step; set it to -1 "
                                   "for a normal run"
                                 : "Lower optimizer.lr, set optimizer.clip_grad, or resume from "
                                   "an earlier checkpoint");
}

int gt_trainer_step(gt_trainer *t, gt_step_stats *stats, gt_error *err) {
    memset(stats, 0, sizeof *stats);
    /* the first step fixes the hook, and with it whether the rows can be lazy */
    if (!t->stepped)
        gt_lazy_rows_start(&t->lazy, t->grad_reduce != NULL || t->sync != NULL,
                           gt_trainer_adamw_state(t));
    t->stepped = 1;
    if (t->opt_sharded) gt_trainer_shards_drop(t); /* the gathered copy is of this step's past */
    double t0 = gt_now_ms();
    int rc = GT_OK;
    if (t->prefetch_rc) { /* the load of this step's batch, done during the last step, failed */
        *err = t->prefetch_err;
        rc = t->prefetch_rc;
        t->prefetch_rc = 0;
        return rc;
    }
    if (t->prefetched)
        memcpy(t->h_batch, t->h_next, t->batch_bytes);
    else
        rc = load_batch(t, t->h_batch, t->steps + 1, err);
    t->prefetched = 0;
    if (rc) return rc;
    gt_step_mode mode = GT_STEP_EAGER;
    gt_lazy_rows_launched(&t->lazy); /* even a step that fails after launching */
    rc = gt_graph_runner_run(t->runner, gt_trainer_step_key(t), step_body, t, &mode, err);
    if (rc) return gt_error_wrap(err, "step %lld: ", (long long)t->steps + 1);
    /* the next batch, while the device runs this step (h_batch stays untouched until the
     * sync below: the step's copy reads it) */
    t->next_pos = gt_data_get_pos(t->train);
    t->prefetch_rc = load_batch(t, t->h_next, t->steps + 2, &t->prefetch_err);
    t->prefetched = t->prefetch_rc == GT_OK;
    if (t->prefetch_rc) { /* back to the batch's start: a checkpoint or a retry reads it whole */
        gt_error ignored = {0};
        (void)gt_data_set_pos(t->train, t->next_pos, &ignored);
    }
    t->b->ops->memcpy_d2h(t->b, t->s, &t->h_st[0], t->st, sizeof(gt_step_state));
    rc = t->b->ops->stream_sync(t->b, t->s, err);
    if (!rc) rc = gt_backend_check(t->b, err);
    if (rc) return gt_error_wrap(err, "step %lld: ", (long long)t->steps + 1);
    double ms = gt_now_ms() - t0;
    const gt_step_state *h = &t->h_st[0];
    t->steps = h->step;
    stats->step = h->step;
    stats->loss = h->loss;
    stats->lr = h->lr;
    stats->grad_norm = h->grad_norm;
    stats->aux_loss = h->aux_loss;
    stats->skipped = (int)h->skipped;
    stats->nan_flags = h->nan_flags;
    stats->ms = ms;
    stats->tokens_per_s = ms > 0 ? (double)t->n_micro_global * t->N / (ms / 1e3) : 0;
    stats->mode = mode;
    /* a skipped step changed no row: the lazy rows must not replay it later */
    if (h->skipped) (void)gt_trainer_opt_state(t);
    if (h->nan_flags) return numeric_error(t, h, err);
    return GT_OK;
}

/* What one eval batch enqueues; the runner may capture it into the eval graph, so it takes
 * only what is the same on every call (the pinned and device batch, the scale, eval_st). */
typedef struct eval_ctx {
    gt_trainer *t;
    float scale; /* 1 / train.eval_iters */
} eval_ctx;

static void eval_enqueue(void *ctx, gt_stream *s, const gt_unit_exec *exec) {
    (void)exec; /* unit graphs hold the training step only */
    const eval_ctx *e = ctx;
    gt_trainer *t = e->t;
    t->b->ops->memcpy_h2d(t->b, s, t->d_batch, t->h_batch, 2 * (size_t)t->N * sizeof(int32_t));
    gt_model_forward_loss(t->m, s, t->d_batch, t->d_batch + t->N, e->scale, t->eval_st);
}

int gt_trainer_eval(gt_trainer *t, float *loss, gt_error *err) {
    *loss = 0;
    if (!t->valid)
        return gt_error_set(err, GT_ERR_INVALID,
                            "evaluation is off: set train.eval_interval > 0 and "
                            "train.eval_iters > 0 to build the held-out split");
    gt_backend *b = t->b;
    const gt_backend_ops *o = b->ops;
    /* every evaluation reads the same held-out batches, so losses compare across steps */
    gt_data_pos start = {0, 0};
    int rc = gt_data_set_pos(t->valid, start, err);
    (void)gt_trainer_opt_state(t); /* the forward reads any row's parameters */
    if (!rc && t->sync) {          /* data parallelism: each rank its slice (trainer_dp.c) */
        rc = gt_trainer_dp_eval(t, loss, err);
        return rc ? gt_error_wrap(err, "evaluation after step %lld: ", (long long)t->steps) : rc;
    }
    o->memset0(b, t->s, t->eval_st, sizeof(gt_step_state));
    eval_ctx ctx = {t, 1.0f / (float)t->cfg.train.eval_iters};
    for (int i = 0; !rc && i < t->cfg.train.eval_iters; i++) {
        rc = gt_data_next(t->valid, t->h_batch, t->h_batch + t->N, t->B, err);
        if (rc) break;
        /* its own shape bucket: captured once after the training warmup, replayed after */
        rc = gt_graph_runner_run(t->runner, (gt_graph_key){GT_GRAPH_EVAL, t->N}, eval_enqueue, &ctx,
                                 NULL, err);
        /* the pinned batch is refilled next iteration: wait for the copy to finish */
        if (!rc) rc = o->stream_sync(b, t->s, err);
    }
    if (!rc) {
        o->memcpy_d2h(b, t->s, &t->h_st[1], t->eval_st, sizeof(gt_step_state));
        rc = o->stream_sync(b, t->s, err);
    }
    if (!rc) rc = gt_backend_check(b, err);
    if (rc) return gt_error_wrap(err, "evaluation after step %lld: ", (long long)t->steps);
    *loss = t->h_st[1].loss;
    return GT_OK;
}
