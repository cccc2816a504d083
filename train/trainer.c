/* Building the trainer: backend, model, optimizer and step-state arenas, pinned batch
 * buffers, data sources, the planning pass, initial weights (or a checkpoint), the graph
 * runner; plus teardown and accessors. The step itself is in trainer_step.c. */
#include <stdlib.h>
#include <string.h>

#include "config/cuda_keys.h"
#include "core/bf16.h"
#include "graphs/graphs.h"
#include "model/memory_plan.h"
#include "train/trainer_impl.h"

/* The GPU of this process: its rank on its node under a launcher (gt_comm_device), else 0. */
static int make_backend(gt_trainer *t, const gt_comm *comm, gt_error *err) {
    int dev = comm ? gt_comm_device(comm) : 0;
    gt_cuda_config cuda; /* runtime.cuda.*, the GT_CUDA_* aliases applied */
    if (t->cfg.runtime.device != GT_DEVICE_CPU &&
        gt_config_cuda_settings(&t->cfg, &cuda, err) != GT_OK)
        return gt_error_wrap(
            err, "runtime.device=%s: ", t->cfg.runtime.device == GT_DEVICE_AUTO ? "auto" : "cuda");
    switch (t->cfg.runtime.device) {
    case GT_DEVICE_CPU:
        return gt_backend_create_cpu(&t->b, err);
    case GT_DEVICE_CUDA: {
        int rc = gt_backend_create_cuda(&t->b, dev, &cuda, err);
        if (rc) return gt_error_wrap(err, "runtime.device=cuda: ");
        return GT_OK;
    }
    case GT_DEVICE_AUTO: {
        gt_error cuda_err = {0};
        int rc = gt_backend_create_cuda(&t->b, dev, &cuda, &cuda_err);
        if (rc == GT_OK) return GT_OK;
        /* a GPU that is there but set up wrongly (a runtime.cuda.* choice) is the user's to fix;
         * only a build without CUDA or no usable GPU falls back to the CPU */
        if (rc == GT_ERR_INVALID) {
            *err = cuda_err;
            return gt_error_wrap(err, "runtime.device=auto: ");
        }
        fprintf(stderr, "graphtrain: note: using the CPU backend (fp32 reference): %s\n",
                cuda_err.msg);
        return gt_backend_create_cpu(&t->b, err);
    }
    }
    return gt_error_set(err, GT_ERR_INVALID,
                        "runtime.device: unknown value %d; use auto, cpu "
                        "or cuda",
                        (int)t->cfg.runtime.device);
}

/* runtime.gemm_table: read (on every backend, so a bad file is reported anywhere) and handed
 * to a backend that picks GEMM algorithms, before the planning pass. */
static int set_gemm_table(gt_trainer *t, gt_error *err) {
    const char *path = t->cfg.runtime.gemm_table;
    if (!path[0]) return GT_OK;
    gt_gemm_table tab;
    int rc = gt_gemm_table_load(&tab, path, err);
    if (rc) return rc;
    if (t->b->ops->gemm_table_set)
        rc = t->b->ops->gemm_table_set(t->b, &tab, err);
    else
        fprintf(stderr,
                "graphtrain: note: runtime.gemm_table=%s lists cuBLASLt algorithms; the %s "
                "backend has no GEMM algorithms to pick, so it is not used\n",
                path, t->b->name);
    gt_gemm_table_free(&tab);
    return rc;
}

/* Stops a run that cannot fit before anything large is allocated: against the device's free
 * memory, or, on the CPU backend (whose arenas are host memory and which reports no device
 * memory), against the host's available memory. */
static int check_fit(gt_trainer *t, gt_error *err) {
    gt_memory_plan p; /* the optimizer state of this rank: its shards over the world it is in */
    int rc = gt_memory_plan_compute_dp(&t->cfg, t->b->act_bytes, t->comm ? t->dp_size : 1, &p, err);
    if (rc) return rc;
    if (t->b->kind == GT_BACKEND_CPU)
        return gt_memory_plan_check_host_fit(&p, gt_memory_host_available(), err);
    size_t free_bytes = 0;
    t->b->ops->mem_info(t->b, &free_bytes, NULL, NULL);
    return gt_memory_plan_check_fit(&p, free_bytes, err);
}

/* Batch shape rules the trainer itself depends on (the config rules check the rest). */
static int check_shapes(gt_trainer *t, gt_error *err) {
    const gt_train_config *tr = &t->cfg.train;
    if (tr->micro_batch_size <= 0 || tr->global_batch_size <= 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "train.micro_batch_size (%d) and train.global_batch_size (%d) must "
                            "be > 0",
                            tr->micro_batch_size, tr->global_batch_size);
    if (tr->global_batch_size % tr->micro_batch_size != 0) {
        int lo = tr->global_batch_size / tr->micro_batch_size * tr->micro_batch_size;
        if (lo == 0) lo = tr->micro_batch_size;
        return gt_error_set(err, GT_ERR_INVALID,
                            "train.global_batch_size=%d is not a multiple of "
                            "train.micro_batch_size=%d (each step runs whole micro-batches); "
                            "set train.global_batch_size=%d or %d",
                            tr->global_batch_size, tr->micro_batch_size, lo,
                            lo + tr->micro_batch_size);
    }
    if (t->cfg.runtime.inject_nan_at_step == 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "debug.inject_nan_at_step=0: steps are numbered from 1; use a step "
                            ">= 1, or -1 to turn the hook off");
    if (tr->eval_interval > 0 && tr->eval_iters <= 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "train.eval_interval=%d needs train.eval_iters > 0 (batches per "
                            "evaluation); set train.eval_iters=10, or train.eval_interval=0",
                            tr->eval_interval);
    t->n_micro = tr->global_batch_size / tr->micro_batch_size;
    t->n_micro_global = t->n_micro;
    t->dp_size = 1;
    t->B = tr->micro_batch_size;
    t->T = t->cfg.model.seq_length;
    t->N = t->B * t->T;
    return GT_OK;
}

gt_lr_schedule gt_trainer_lr_schedule(const gt_config *c) {
    const gt_scheduler_config *s = &c->scheduler;
    gt_lr_schedule sc = {0};
    sc.lr_max = (float)c->optimizer.lr;
    sc.lr_min = (float)c->optimizer.min_lr;
    sc.decay_iters = s->lr_decay_iters > 0 ? s->lr_decay_iters : c->train.train_iters;
    /* Megatron's warmup of fraction x decay steps, in whole steps (rounded down) */
    sc.warmup_iters = s->lr_warmup_fraction >= 0
                          ? (int32_t)(s->lr_warmup_fraction * (double)sc.decay_iters)
                          : s->lr_warmup_iters;
    sc.style = (int32_t)s->lr_decay_style;
    sc.warmup_init = (float)s->lr_warmup_init;
    sc.wsd_decay_iters = s->lr_wsd_decay_iters;
    sc.wsd_style = (int32_t)s->lr_wsd_decay_style;
    return sc;
}

static void set_hyper(gt_trainer *t) {
    const gt_config *c = &t->cfg;
    t->sched = gt_trainer_lr_schedule(c);
    t->hp.beta1 = (float)c->optimizer.adam_beta1;
    t->hp.beta2 = (float)c->optimizer.adam_beta2;
    t->hp.eps = (float)c->optimizer.adam_eps;
    t->hp.weight_decay = (float)c->optimizer.weight_decay;
    t->hp.clip_grad = (float)c->optimizer.clip_grad;
    t->hp.m_bf16 = c->optimizer.exp_avg_dtype == GT_STATE_BF16;
    t->hp.v_bf16 = c->optimizer.exp_avg_sq_dtype == GT_STATE_BF16;
    t->m_elem = gt_state_dtype_bytes(c->optimizer.exp_avg_dtype);
    t->v_elem = gt_state_dtype_bytes(c->optimizer.exp_avg_sq_dtype);
    t->check_loss = c->rerun_state_machine.check_for_nan_in_loss;
    t->check_grad = c->ddp.check_for_nan_in_grad;
    t->inject_nan = c->runtime.inject_nan_at_step > 0 ? c->runtime.inject_nan_at_step - 1 : -1;
}

static int alloc_state(gt_trainer *t, gt_error *err) {
    size_t master_elem = gt_master_elem_bytes(t->b->act_bytes);
    /* the distributed optimizer: this rank's shards alone (trainer_shards.c) */
    t->opt_sharded = t->sync && t->cfg.optimizer.use_distributed_optimizer;
    t->opt_elems = t->opt_sharded ? gt_trainer_shard_elems(t, t->dp_rank) : t->n_params;
    size_t n = (t->opt_elems ? t->opt_elems : 1) * master_elem;
    size_t moments = t->opt_elems ? t->opt_elems : 1;
    t->hp.master_lo = master_elem == 2;
    gt_arena_init(&t->opt, "optimizer");
    gt_arena_init(&t->state, "step_state");
    gt_arena_init(&t->batch, "batch");
    int rc = gt_arena_add(&t->opt, "master", n, &t->master, err);
    if (!rc) rc = gt_arena_add(&t->opt, "adam_m", moments * t->m_elem, &t->adam_m, err);
    if (!rc) rc = gt_arena_add(&t->opt, "adam_v", moments * t->v_elem, &t->adam_v, err);
    if (!rc) rc = gt_arena_add(&t->state, "train", sizeof(gt_step_state), (void **)&t->st, err);
    if (!rc) rc = gt_arena_add(&t->state, "eval", sizeof(gt_step_state), (void **)&t->eval_st, err);
    t->batch_bytes = (size_t)t->n_micro * 2 * (size_t)t->N * sizeof(int32_t);
    if (!rc)
        rc = gt_arena_add(&t->batch, "tokens+targets", t->batch_bytes, (void **)&t->d_batch, err);
    if (!rc) rc = gt_backend_alloc_arena(t->b, &t->opt, err);
    if (!rc) rc = gt_backend_alloc_arena(t->b, &t->state, err);
    if (!rc) rc = gt_backend_alloc_arena(t->b, &t->batch, err);
    if (!rc) rc = t->b->ops->host_alloc(t->b, t->batch_bytes, (void **)&t->h_batch, err);
    if (!rc && !(t->h_next = malloc(t->batch_bytes)))
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the prefetched batch");
    if (!rc) rc = t->b->ops->host_alloc(t->b, 2 * sizeof(gt_step_state), (void **)&t->h_st, err);
    return rc;
}

/* The planning pass: ops record every shape of a step and of an eval forward (the cuda
 * backend builds its GEMM algorithms and attention plans) and compute nothing. */
static int plan(gt_trainer *t, gt_error *err) {
    t->b->planning = 1;
    gt_trainer_enqueue_step(t, t->s, NULL);
    gt_model_forward_loss(t->m, t->s, t->d_batch, t->d_batch + t->N, 1.0f, t->eval_st);
    int rc = t->b->ops->plan_finish(t->b, err);
    t->b->planning = 0;
    if (rc) return gt_error_wrap(err, "planning the training step: ");
    return GT_OK;
}

/* Fresh step state in device memory: step 0, no NaN seen, the injection hook. */
static int init_step_state(gt_trainer *t, const gt_step_state *from, gt_error *err) {
    gt_step_state h[2];
    memset(h, 0, sizeof h);
    if (from)
        h[0] = *from;
    else
        h[0].nan_step = -1;
    h[1].nan_step = -1;
    h[0].inject_nan = h[1].inject_nan = t->inject_nan;
    h[1].inject_nan = -1;
    memcpy(t->h_st, h, sizeof h);
    t->b->ops->memcpy_h2d(t->b, t->s, t->st, &t->h_st[0], sizeof(gt_step_state));
    t->b->ops->memcpy_h2d(t->b, t->s, t->eval_st, &t->h_st[1], sizeof(gt_step_state));
    t->steps = h[0].step;
    return t->b->ops->stream_sync(t->b, t->s, err);
}

/* Seeded initial weights: master = init, params = master in the compute dtype. */
static int init_weights(gt_trainer *t, gt_error *err) {
    float *host = malloc(t->n_params * sizeof *host);
    if (!host) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory initializing weights");
    int rc = gt_model_init_params(t->m, t->cfg.rng.seed, host, err);
    if (!rc) rc = gt_trainer_write_master(t, host, err);
    if (!rc) {
        const gt_backend_ops *o = t->b->ops;
        o->memset0(t->b, t->s, t->adam_m, t->opt_elems * t->m_elem);
        o->memset0(t->b, t->s, t->adam_v, t->opt_elems * t->v_elem);
        rc = o->stream_sync(t->b, t->s, err);
    }
    free(host);
    if (!rc) rc = init_step_state(t, NULL, err);
    return rc;
}

/* The graph runner the trainer owns: the policy and settings of the config, over the
 * trainer's backend, stream and model; the step and the evaluation are the bodies it runs. */
static int make_runner(gt_trainer *t, gt_error *err) {
    gt_graph_policy pol;
    int rc = gt_graph_policy_from_config(&t->cfg, &pol, err);
    if (rc) return gt_error_wrap(err, "setting up CUDA graphs: ");
    gt_graph_runner_opts opts = gt_graph_runner_opts_of(&t->cfg);
    return gt_graph_runner_create(&t->runner, &pol, t->b, t->s, t->m, &opts, err);
}

int gt_trainer_create(gt_trainer **out, const gt_config *cfg, gt_error *err) {
    return gt_trainer_create_dp(out, cfg, NULL, err);
}

int gt_trainer_create_dp(gt_trainer **out, const gt_config *cfg, gt_comm *comm, gt_error *err) {
    *out = NULL;
    gt_trainer *t = calloc(1, sizeof *t);
    if (!t) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the trainer");
    t->cfg = *cfg;
    int rc = gt_trainer_dp_check_world(cfg, comm, err);
    if (!rc) rc = check_shapes(t, err);
    if (!rc) rc = make_backend(t, comm, err);
    if (!rc) rc = set_gemm_table(t, err);
    if (!rc) rc = t->b->ops->stream_create(t->b, &t->s, err);
    if (!rc && comm) rc = gt_trainer_dp_init(t, comm, err);
    if (!rc) rc = check_fit(t, err);
    if (!rc) rc = gt_model_create(&t->m, &t->cfg, t->b, err);
    if (!rc) {
        t->mi = gt_model_get_info(t->m);
        t->n_params = t->mi->n_params;
        t->n_decay = t->mi->n_decay;
        if (t->mi->tokens != t->N)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "model plans %d tokens per micro-batch, the "
                              "trainer %d (micro_batch_size %d x seq_length %d)",
                              t->mi->tokens, t->N, t->B, t->T);
    }
    set_hyper(t);
    if (!rc) rc = gt_trainer_dp_buckets(t, err);
    if (!rc) rc = alloc_state(t, err);
    if (!rc)
        gt_lazy_rows_init(&t->lazy, t->cfg.optimizer.lazy_embedding_rows, t->b, t->s, t->m, t->st);
    if (!rc) rc = gt_data_create(&t->train, &t->cfg, GT_SPLIT_TRAIN, err);
    if (!rc && t->cfg.train.eval_interval > 0 && t->cfg.train.eval_iters > 0)
        rc = gt_data_create(&t->valid, &t->cfg, GT_SPLIT_VALID, err);
    if (!rc) rc = plan(t, err);
    if (!rc) rc = init_weights(t, err);
    if (!rc && t->cfg.checkpoint.load[0]) {
        rc = gt_trainer_load(t, t->cfg.checkpoint.load, err);
        t->resumed = rc == GT_OK;
    }
    if (!rc) rc = make_runner(t, err);
    if (rc) {
        gt_trainer_destroy(t);
        return rc;
    }
    *out = t;
    return GT_OK;
}

void gt_trainer_destroy(gt_trainer *t) {
    if (!t) return;
    gt_graph_runner_destroy(t->runner); /* graphs first: they point into the arenas */
    gt_data_destroy(t->train);
    gt_data_destroy(t->valid);
    if (t->b) {
        if (t->h_batch) t->b->ops->host_free(t->b, t->h_batch);
        free(t->h_next);
        if (t->h_st) t->b->ops->host_free(t->b, t->h_st);
    }
    gt_arena_release(&t->opt);
    free(t->h_full);
    gt_arena_release(&t->state);
    gt_arena_release(&t->batch);
    gt_trainer_dp_release(t);
    gt_model_destroy(t->m);
    if (t->b && t->s) t->b->ops->stream_destroy(t->b, t->s);
    gt_backend_destroy(t->b);
    free(t);
}

gt_backend *gt_trainer_backend(gt_trainer *t) {
    return t->b;
}

gt_model *gt_trainer_model(gt_trainer *t) {
    return t->m;
}

gt_stream *gt_trainer_stream(gt_trainer *t) {
    return t->s;
}

const gt_config *gt_trainer_config(const gt_trainer *t) {
    return &t->cfg;
}

int64_t gt_trainer_step_count(const gt_trainer *t) {
    return t->steps;
}

gt_graph_runner *gt_trainer_graph_runner(gt_trainer *t) {
    return t->runner;
}

int gt_trainer_resumed(const gt_trainer *t) {
    return t->resumed;
}

gt_data_pos gt_trainer_data_pos(const gt_trainer *t) {
    /* a prefetched batch has not been trained on: the position is the one before it */
    return t->prefetched ? t->next_pos : gt_data_get_pos(t->train);
}

int gt_trainer_read_master(gt_trainer *t, float *host, gt_error *err) {
    if (t->opt_sharded) return gt_trainer_shards_read(t, host, NULL, NULL, err);
    gt_backend *b = t->b;
    size_t n = t->n_params;
    gt_adamw_state os = gt_trainer_opt_state(t);
    if (!t->hp.master_lo) {
        b->ops->memcpy_d2h(b, t->s, host, os.master, n * sizeof(float));
        return b->ops->stream_sync(b, t->s, err);
    }
    uint16_t *hi = malloc(n * sizeof *hi);
    int16_t *lo = malloc(n * sizeof *lo);
    int rc = GT_OK;
    if (!hi || !lo) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading the master");
    if (!rc) {
        b->ops->memcpy_d2h(b, t->s, hi, os.params, n * sizeof *hi);
        b->ops->memcpy_d2h(b, t->s, lo, os.master, n * sizeof *lo);
        rc = b->ops->stream_sync(b, t->s, err);
    }
    for (size_t i = 0; !rc && i < n; i++)
        host[i] = gt_master_join(hi[i], lo[i]);
    free(hi);
    free(lo);
    return rc;
}

int gt_trainer_write_master(gt_trainer *t, const float *host, gt_error *err) {
    if (t->opt_sharded) return gt_trainer_shards_write_master(t, host, err);
    gt_backend *b = t->b;
    size_t n = t->n_params;
    /* the moments of every row current before the weights change */
    gt_adamw_state os = gt_trainer_opt_state(t);
    if (!t->hp.master_lo) {
        b->ops->memcpy_h2d(b, t->s, os.master, host, n * sizeof(float));
        b->ops->from_float(b, t->s, os.params, os.master, n);
        return b->ops->stream_sync(b, t->s, err);
    }
    uint16_t *hi = malloc(n * sizeof *hi);
    int16_t *lo = malloc(n * sizeof *lo);
    int rc = GT_OK;
    if (!hi || !lo) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory writing the master");
    for (size_t i = 0; !rc && i < n; i++)
        gt_master_split(host[i], &hi[i], &lo[i]);
    if (!rc) {
        b->ops->memcpy_h2d(b, t->s, os.params, hi, n * sizeof *hi);
        b->ops->memcpy_h2d(b, t->s, os.master, lo, n * sizeof *lo);
        /* the copies read host memory that is freed below */
        rc = b->ops->stream_sync(b, t->s, err);
    }
    free(hi);
    free(lo);
    return rc;
}

/* One moment into fp32 host memory, widened from bf16 where the run stores it so. */
static int read_moment(gt_trainer *t, float *out, const void *dev, int is_bf16, gt_error *err) {
    size_t n = t->n_params;
    if (!is_bf16) {
        t->b->ops->memcpy_d2h(t->b, t->s, out, dev, n * sizeof(float));
        return t->b->ops->stream_sync(t->b, t->s, err);
    }
    uint16_t *half = malloc(n * sizeof *half);
    if (!half) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading Adam moments");
    t->b->ops->memcpy_d2h(t->b, t->s, half, dev, n * sizeof *half);
    int rc = t->b->ops->stream_sync(t->b, t->s, err);
    for (size_t i = 0; !rc && i < n; i++)
        out[i] = gt_bf16_to_float(half[i]);
    free(half);
    return rc;
}

int gt_trainer_read_moments(gt_trainer *t, float *m, float *v, gt_error *err) {
    if (t->opt_sharded) return gt_trainer_shards_read(t, NULL, m, v, err);
    gt_adamw_state os = gt_trainer_opt_state(t);
    int rc = read_moment(t, m, os.m, t->hp.m_bf16, err);
    if (!rc) rc = read_moment(t, v, os.v, t->hp.v_bf16, err);
    return rc;
}

/* One moment from fp32 host memory, rounded to bf16 where the run stores it so. */
static int write_moment(gt_trainer *t, void *dev, const float *in, int is_bf16, gt_error *err) {
    size_t n = t->n_params;
    if (!is_bf16) {
        t->b->ops->memcpy_h2d(t->b, t->s, dev, in, n * sizeof(float));
        return t->b->ops->stream_sync(t->b, t->s, err);
    }
    uint16_t *half = malloc(n * sizeof *half);
    if (!half) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory writing Adam moments");
    for (size_t i = 0; i < n; i++)
        half[i] = gt_bf16_from_float(in[i]);
    t->b->ops->memcpy_h2d(t->b, t->s, dev, half, n * sizeof *half);
    int rc = t->b->ops->stream_sync(t->b, t->s, err); /* before half is freed */
    free(half);
    return rc;
}

int gt_trainer_write_moments(gt_trainer *t, const float *m, const float *v, gt_error *err) {
    if (t->opt_sharded) return gt_trainer_shards_write_moments(t, m, v, err);
    /* the weights of every row current before the moments change */
    gt_adamw_state os = gt_trainer_opt_state(t);
    int rc = write_moment(t, os.m, m, t->hp.m_bf16, err);
    if (!rc) rc = write_moment(t, os.v, v, t->hp.v_bf16, err);
    return rc;
}

void gt_trainer_print_memory(const gt_trainer *t, FILE *f) {
    fprintf(f, "memory plan (%s backend, allocated once):\n", t->b->name);
    gt_model_print_plan(t->m, f, 0);
    gt_arena_print(&t->opt, f, 0);
    gt_arena_print(&t->state, f, 0);
    gt_arena_print(&t->batch, f, 0);
    fprintf(f, "  %-14s %10.2f MiB  (pinned host: batch + step state)\n", "host",
            (double)(t->batch_bytes + 2 * sizeof(gt_step_state)) / (1024.0 * 1024.0));
}

void gt_trainer_print_summary(const gt_trainer *t, FILE *f) {
    fprintf(f, "model: %d layers, d=%d, %d heads, vocab %d, seq %d: %.3f M parameters\n",
            t->cfg.model.num_layers, t->cfg.model.hidden_size, t->cfg.model.num_attention_heads,
            t->cfg.model.vocab_size, t->T, (double)t->n_params / 1e6);
    fprintf(f, "batch: %d micro-batch%s of %d x %d tokens per step (global batch %d)\n", t->n_micro,
            t->n_micro == 1 ? "" : "es", t->B, t->T, t->cfg.train.global_batch_size);
    fprintf(f, "data: %s\n", gt_data_describe(t->train));
    if (t->b->ops->describe) { /* the device and the kernels planned per op family */
        char kernels[512];
        t->b->ops->describe(t->b, kernels, sizeof kernels);
        fprintf(f, "backend: %s\n", kernels);
    }
    if (t->valid) fprintf(f, "eval: %s\n", gt_data_describe(t->valid));
}
