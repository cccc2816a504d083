/* The run's metrics: JSONL records (logger.metrics_file) and TensorBoard scalars
 * (logger.tensorboard_dir). Every record is valid JSON (core/json.h) with a timestamp; the
 * first record of each run holds the resolved configuration and versions; a failed write or
 * close is an error; a resumed run first drops the records past its step (README, "Metrics"). */
#ifndef GT_TRAIN_METRICS_H
#define GT_TRAIN_METRICS_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "train/trainer.h"

typedef struct gt_metrics gt_metrics;

/* What the first record says about the run. */
typedef struct gt_metrics_run {
    const gt_config *cfg;
    const char *backend;    /* "cpu" or "cuda" */
    const char *device;     /* the backend's describe() line */
    long long start_step;   /* steps done before this run (the checkpoint's) */
    int resumed;            /* started from checkpoint.load */
    double flops_per_token; /* the model's (WORKLOADS.md formula) */
} gt_metrics_run;

/* One logged training step: the trainer's numbers plus what the loop derives. */
typedef struct gt_metrics_record {
    const gt_step_stats *s;
    double loss_avg;   /* mean loss since the previous logged step */
    double tflops;     /* flops_per_token * tokens_per_s / 1e12 */
    double elapsed_s;  /* since this run started */
    double eta_s;      /* to train.train_iters at this run's pace */
    size_t peak_bytes; /* the backend's peak allocation */
    const char *mode;  /* eager, captured, replayed */
} gt_metrics_record;

/* Opens the sinks the configuration names (none: a writer that writes nothing). A resumed run
 * keeps the metrics file's records up to run->start_step and drops later ones (they are the
 * steps it repeats), saying so on out. Writes the run record. */
int gt_metrics_open(gt_metrics **m, const gt_metrics_run *run, FILE *out, gt_error *err);
int gt_metrics_write_step(gt_metrics *m, const gt_metrics_record *r, gt_error *err);
int gt_metrics_write_eval(gt_metrics *m, long long step, float loss, gt_error *err);
/* Closes everything and frees m (accepts NULL); GT_ERR_IO when a close fails. */
int gt_metrics_close(gt_metrics *m, gt_error *err);

/* Seconds since the Unix epoch (the records' timestamp). */
double gt_metrics_wall_time(void);

#endif
