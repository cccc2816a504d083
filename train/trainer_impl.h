/* The trainer's insides, shared by trainer.c (build, plan, accessors), trainer_step.c (the
 * step, evaluation) and trainer_ckpt.c (save and resume). Everything device-side sits in
 * arenas allocated once, so the addresses a captured graph holds never change. */
#ifndef GT_TRAIN_TRAINER_IMPL_H
#define GT_TRAIN_TRAINER_IMPL_H

#include <stdio.h>

#include "core/arena.h"
#include "data/data.h"
#include "dist/fp8_sync.h"
#include "dist/grad_sync.h"
#include "train/checkpoint.h"
#include "train/lazy_rows.h"
#include "train/trainer.h"

struct gt_trainer {
    gt_config cfg;
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    const gt_model_info *mi;
    size_t n_params, n_decay;
    int n_micro; /* this rank's micro-batches per step = global_batch_size / (micro x dp) */
    int B, T, N; /* micro_batch_size, seq_length, tokens per micro-batch */

    gt_arena opt; /* optimizer state */
    /* opt_elems of each array: n_params, or with the distributed optimizer (opt_sharded) this
     * rank's shards of every bucket, one after another in the buckets' order
     * (trainer_shards.c) */
    size_t opt_elems;
    int opt_sharded;
    void *master;          /* [opt_elems] master weights: fp32, or with hp.master_lo their int16 low
                            * halves, the bf16 parameters being the high halves (core/bf16.h) */
    void *adam_m;          /* [opt_elems] first moment, fp32 or bf16 (hp.m_bf16) */
    void *adam_v;          /* [opt_elems] second moment, fp32 or bf16 (hp.v_bf16) */
    size_t m_elem, v_elem; /* their bytes per element */

    gt_arena state;         /* the small device step-state arena */
    gt_step_state *st;      /* [1] training step state */
    gt_step_state *eval_st; /* [1] evaluation step state (loss only) */

    gt_arena batch;   /* device batch */
    int32_t *d_batch; /* [n_micro][2][N]: tokens then targets of each micro-batch */
    int32_t *h_batch; /* pinned host copy, same layout: one copy per step */
    size_t batch_bytes;
    /* The next step's batch, loaded while the device runs the current step (the load is host
     * work that would otherwise sit between two steps); copied into h_batch before the next
     * launch, once the current step no longer reads h_batch. */
    int32_t *h_next;
    int prefetched;       /* h_next holds the next batch */
    gt_data_pos next_pos; /* data position of the batch in h_next (what a checkpoint keeps) */
    int prefetch_rc;      /* a failed prefetch, reported by the next step */
    gt_error prefetch_err;
    gt_step_state *h_st; /* pinned [2]: training, evaluation state read back */

    gt_data *train;
    gt_data *valid; /* NULL when evaluation is off */
    gt_graph_runner *runner;

    gt_lr_schedule sched;
    gt_adamw_params hp;
    int check_loss, check_grad;
    int inject_nan;                /* device value: 0-based step to poison, -1 = off */
    gt_grad_reduce_fn grad_reduce; /* NULL: one GPU, nothing to reduce */
    void *grad_reduce_ctx;
    int stepped;   /* gt_trainer_step has run in this process (the hook is fixed from then on) */
    int64_t steps; /* optimizer steps completed (host copy after each step) */
    gt_lazy_rows lazy; /* the embedding's lazy rows (lazy_rows.h) */
    /* data parallelism (trainer_dp.c): rank dp_rank of dp_size trains the micro-batches
     * i = j * dp_size + dp_rank (j < n_micro) of the n_micro_global of each global batch */
    gt_comm *comm;         /* NULL: one process, nothing reduced (not owned) */
    gt_grad_sync *sync;    /* the gradient buckets, when comm is set */
    gt_fp8_sync *fp8_sync; /* fp8 runs with comm set: the amaxes and fp8 flag over the ranks */
    int dp_rank, dp_size, n_micro_global;
    gt_arena dp;       /* the step's per-micro-batch losses */
    float *loss_slots; /* [n_micro_global][2]: loss and aux_loss of each micro-batch */
    float *eval_slots; /* [eval_iters][2]: the same of each evaluation batch */
    int32_t *h_skip;   /* [2][N] host: another rank's micro-batch, read and dropped */
    int dp_stale;      /* opt_sharded and no whole copy in h_full: a save must gather first */
    float *h_full;     /* [3][n_params] host, opt_sharded: master, m, v gathered; NULL: not */
    int resumed;       /* started from checkpoint.load */
    /* the schedule record saved checkpoints carry: the configuration's, or the checkpoint's
     * when use_checkpoint_opt_param_scheduler took it (sched_adopted) */
    int sched_adopted;
    gt_ckpt_sched sched_rec;
};

/* The optimizer arrays and constants as they stand, rows possibly behind: for the ops inside a
 * step (the lazy-row ops, backend.h, gt_grad_rows.lag). trainer_step.c. */
gt_adamw_state gt_trainer_adamw_state(const gt_trainer *t);
/* The one way to read (or to write) the optimizer state: brings every embedding row current
 * first (the lazy rows' flush, enqueued on the trainer's stream), then returns the arrays.
 * Checkpoints, evaluation and the master and moment accessors all go through it. */
gt_adamw_state gt_trainer_opt_state(gt_trainer *t);

/* Host copies of the Adam moments [n_params] (checkpoints; tests compare resumed state). */
int gt_trainer_read_moments(gt_trainer *t, float *m, float *v, gt_error *err);
/* Sets the Adam moments from fp32 host arrays [n_params] (rounded to nearest-even where the
 * run stores a moment in bf16). */
int gt_trainer_write_moments(gt_trainer *t, const float *m, const float *v, gt_error *err);

/* The schedule step_begin computes the rate from, resolved from the configuration (decay
 * steps default to train_iters, a warmup fraction becomes whole steps); trainer.c. */
gt_lr_schedule gt_trainer_lr_schedule(const gt_config *cfg);

/* trainer_dp.c: runtime.num_gpus and ddp.data_parallel_size against the ranks of comm (NULL:
 * one process), so no run trains with another world than its configuration names. */
int gt_trainer_dp_check_world(const gt_config *cfg, const gt_comm *comm, gt_error *err);
/* trainer_dp.c: binds the communicator, divides the global batch over the ranks (refusing
 * what does not divide, by key), builds the gradient buckets and the loss slots. */
int gt_trainer_dp_init(gt_trainer *t, gt_comm *comm, gt_error *err);
/* After the model is built: the gradient buckets over its parameters (nothing without comm). */
int gt_trainer_dp_buckets(gt_trainer *t, gt_error *err);
void gt_trainer_dp_release(gt_trainer *t);
/* Evaluation under data parallelism: rank r runs the batches i = r, r + dp, ... (eagerly),
 * every rank reads all of them, and the losses are summed over ranks in batch order, the
 * one-process bits. */
int gt_trainer_dp_eval(gt_trainer *t, float *loss, gt_error *err);
/* The distributed optimizer's AdamW: this rank's shard of every bucket, then the parameters
 * gathered from every rank. */
void gt_trainer_enqueue_dp_adamw(gt_trainer *t, gt_stream *s);
/* The micro-batches of a data-parallel step with their reductions (inside enqueue_step). */
void gt_trainer_enqueue_dp_micro_batches(gt_trainer *t, gt_stream *s, const gt_unit_exec *exec);

/* trainer_shards.c, the distributed optimizer's compact state (opt_sharded): the elements of
 * rank's shards of every bucket; this rank's shards of whole fp32 host arrays [n_params]
 * written (the master with the parameters); the whole state read from h_full, gathered first
 * when it is not there (a collective: every rank calls it); h_full dropped (a step ran). */
size_t gt_trainer_shard_elems(const gt_trainer *t, int rank);
int gt_trainer_shards_write_master(gt_trainer *t, const float *host, gt_error *err);
int gt_trainer_shards_write_moments(gt_trainer *t, const float *m, const float *v, gt_error *err);
int gt_trainer_shards_read(gt_trainer *t, float *master, float *m, float *v, gt_error *err);
void gt_trainer_shards_drop(gt_trainer *t);

/* Resume from checkpoint.load (trainer_ckpt.c): weights, moments, step state, data position. */
int gt_trainer_load(gt_trainer *t, const char *path, gt_error *err);

#endif
