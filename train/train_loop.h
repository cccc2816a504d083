/* The training loop behind `graphtrain train`: builds the trainer, prints the memory plan,
 * runs steps with a progress line every logger.log_interval, JSONL metrics, periodic
 * evaluation and checkpoints, stops cleanly on request (Ctrl-C), and ends with the graph
 * runner's report. */
#ifndef GT_TRAIN_TRAIN_LOOP_H
#define GT_TRAIN_TRAIN_LOOP_H

#include <signal.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "dist/comm.h"

typedef struct gt_train_run_opts {
    /* Set (by a signal handler) to ask the loop to finish the current step, save a
     * checkpoint when checkpoint.save is set, and return GT_ERR_INTERRUPTED. May be NULL. */
    volatile sig_atomic_t *stop;
    FILE *out; /* progress lines and reports (stdout when NULL) */
    int quiet; /* no memory plan / graph report (tests) */
    /* wall clock in ms for train.exit_duration_in_mins; NULL = the monotonic clock (tests
     * pass their own) */
    double (*clock_ms)(void *ctx);
    void *clock_ctx;
    /* data parallelism: this process is rank gt_comm_rank(comm) of a world (not owned; NULL:
     * one process). Rank 0 alone writes checkpoints, metrics and TensorBoard files (the
     * caller gives the other ranks an out that discards); stops and exits are agreed by all. */
    gt_comm *comm;
} gt_train_run_opts;

/* Summary of a run, for callers and tests. */
typedef struct gt_train_result {
    long long first_step, last_step; /* steps run by this call (1-based, inclusive) */
    float first_loss, last_loss;
    float last_eval_loss; /* NaN when no evaluation ran */
    int saved;            /* checkpoints written */
} gt_train_result;

int gt_train_run(const gt_config *cfg, const gt_train_run_opts *opts, gt_train_result *res,
                 gt_error *err);

#endif
