/* `graphtrain bench` under several ranks (bench.h, gt_bench_dp_*): the communication of a step
 * measured, not estimated. T is the step as it runs (the mode's median); T0 the same step with
 * its collectives left out (a trainer over a communicator with gt_comm_set_skip, its results
 * unused); C the step's collectives alone (gt_trainer_time_collectives). Communication that
 * overlaps compute makes T shorter than T0 + C: hidden = (T0 + C - T) / C, clamped to [0, 1]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/clock.h"
#include "core/median.h"
#include "train/trainer.h"

int gt_bench_dp_measure_comm(gt_trainer *t, const gt_bench_options *o, gt_bench_result *r) {
    double *ms = calloc((size_t)o->steps, sizeof *ms);
    if (!ms) return gt_error_set(&r->error, GT_ERR_NOMEM, "out of host memory timing collectives");
    int rc = GT_OK;
    for (int i = 0; !rc && i < o->steps; i++)
        rc = gt_trainer_time_collectives(t, &ms[i], &r->error);
    if (!rc) r->comm_ms = gt_median(ms, o->steps);
    free(ms);
    if (rc) return gt_error_wrap(&r->error, "mode %s, the collectives alone: ", r->mode.name);
    return GT_OK;
}

int gt_bench_dp_measure_compute(const gt_config *c, const gt_bench_options *o, int total,
                                gt_bench_result *r) {
    double *ms = calloc((size_t)total, sizeof *ms);
    if (!ms) return gt_error_set(&r->error, GT_ERR_NOMEM, "out of host memory timing compute");
    gt_comm_set_skip(o->comm, 1); /* before the trainer: a captured graph keeps its collectives */
    gt_trainer *t = NULL;
    int rc = gt_trainer_create_dp(&t, c, o->comm, &r->error);
    int timed = 0;
    for (int i = 0; !rc && i < total; i++) {
        gt_step_stats st;
        double t0 = gt_now_ms(); /* as the mode's own steps are timed (bench_run.c) */
        rc = gt_trainer_step(t, &st, &r->error);
        if (!rc && i >= total - o->steps) ms[timed++] = gt_now_ms() - t0;
    }
    gt_trainer_destroy(t);
    gt_comm_set_skip(o->comm, 0);
    if (!rc) r->compute_ms = gt_median(ms, timed);
    free(ms);
    if (rc)
        return gt_error_wrap(&r->error, "mode %s, the step without collectives: ", r->mode.name);
    r->comm_measured = 1;
    return GT_OK;
}

void gt_bench_dp_finish(gt_bench_result *r, int ranks) {
    r->ranks = ranks > 0 ? ranks : 1;
    r->tokens_per_s_per_gpu = r->tokens_per_s / r->ranks;
    r->mfu /= r->ranks; /* every GPU's share of the step's FLOPs against its own peak */
    r->limit_fraction /= r->ranks;
    r->hidden_fraction = 0;
    if (!r->comm_measured || !(r->comm_ms > 0)) return;
    double hidden = (r->compute_ms + r->comm_ms - r->median_ms) / r->comm_ms;
    r->hidden_fraction = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
}
