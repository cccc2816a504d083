/* The training loop; see train_loop.h. */
#include "train/train_loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "graphs/graphs.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/metrics.h"
#include "train/trainer.h"

static const char *mode_name(gt_step_mode m) {
    switch (m) {
    case GT_STEP_EAGER:
        return "eager";
    case GT_STEP_CAPTURED:
        return "captured";
    case GT_STEP_REPLAYED:
        return "replayed";
    }
    return "?";
}

/* H:MM:SS for the progress line */
static void hms(double seconds, char *buf, size_t n) {
    long long t = isfinite(seconds) && seconds > 0 ? (long long)(seconds + 0.5) : 0;
    snprintf(buf, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

static double mono_s(void) {
    return gt_now_ms() * 1e-3;
}

/* What the progress line and the metrics need beyond the trainer's step numbers. */
typedef struct loop_clock {
    double t0;              /* mono_s() when the loop began */
    long long run;          /* steps this run */
    long long total;        /* train.train_iters */
    double flops_per_token; /* the model's (WORKLOADS.md formula) */
    gt_backend *b;
} loop_clock;

/* avg: mean loss over the steps since the previous progress line (Megatron prints that
 * average; single-step losses of small batches are noisy). The ETA assumes this run's pace
 * so far (evaluations and checkpoints included) holds to train.train_iters. */
static int log_step(FILE *out, gt_metrics *m, const gt_step_stats *s, double avg,
                    const loop_clock *c, gt_error *err) {
    gt_metrics_record r = {.s = s, .loss_avg = avg, .mode = mode_name(s->mode)};
    r.tflops = c->flops_per_token * s->tokens_per_s / 1e12;
    r.elapsed_s = mono_s() - c->t0;
    long long runs = c->run > 0 ? c->run : 1, left = c->total - (long long)s->step;
    r.eta_s = left > 0 ? r.elapsed_s / (double)runs * (double)left : 0;
    size_t free_b = 0, total_b = 0;
    c->b->ops->mem_info(c->b, &free_b, &total_b, &r.peak_bytes);
    char elapsed[32], eta[32];
    hms(r.elapsed_s, elapsed, sizeof elapsed);
    hms(r.eta_s, eta, sizeof eta);
    fprintf(out,
            "step %6lld/%lld | loss %8.4f (avg %8.4f) | lr %.3e | grad norm %8.4f | "
            "%9.0f tok/s | %8.3g TFLOP/s | %8.2f ms/step | elapsed %s | ETA %s | %s\n",
            (long long)s->step, c->total, (double)s->loss, avg, (double)s->lr, (double)s->grad_norm,
            s->tokens_per_s, r.tflops, s->ms, elapsed, eta, r.mode);
    fflush(out);
    return gt_metrics_write_step(m, &r, err);
}

/* One checkpoint: save/iter_NNNNNNN/checkpoint.bin, then its configuration, the latest
 * file and the retention of checkpoint.most_recent_k (ckpt_dir.h). */
static int save(gt_trainer *t, gt_ckpt_dir *d, const gt_config *cfg, FILE *out, int lead,
                gt_train_result *res, gt_error *err) {
    long long iter = (long long)gt_trainer_step_count(t);
    /* every rank takes part in gathering the distributed optimizer's shards; rank 0 writes */
    int grc = gt_trainer_dp_gather_state(t, err);
    if (grc || !lead) return grc;
    char dir[GT_PATH_MAX + 32], path[GT_PATH_MAX + 64];
    gt_ckpt_iter_path(d->save, iter, dir, sizeof dir);
    int rc = gt_trainer_save(t, dir, err);
    if (!rc) rc = gt_ckpt_dir_commit(d, iter, cfg, err);
    if (rc) return rc;
    fprintf(out, "saved checkpoint %s (step %lld)\n", gt_ckpt_file(dir, path, sizeof path), iter);
    fflush(out);
    res->saved++;
    return GT_OK;
}

static int eval(gt_trainer *t, FILE *out, gt_metrics *m, gt_train_result *res, gt_error *err) {
    float loss;
    int rc = gt_trainer_eval(t, &loss, err);
    if (rc) return rc;
    long long step = (long long)gt_trainer_step_count(t);
    fprintf(out, "eval   step %6lld | eval loss %8.4f | ppl %10.3f\n", step, (double)loss,
            exp((double)loss));
    fflush(out);
    res->last_eval_loss = loss;
    return gt_metrics_write_eval(m, step, loss, err);
}

static int stop_requested(const gt_train_run_opts *o) {
    return o && o->stop && *o->stop;
}

/* The signal that asks to stop, agreed over the ranks: each rank may get it at another step
 * (or alone, from kill), and all must stop after the same one. 0: go on. */
static int agreed_stop(const gt_train_run_opts *o, int *sig, gt_error *err) {
    *sig = 0;
    if (!o) return GT_OK;
    int mine = stop_requested(o) ? (int)*o->stop : 0;
    *sig = mine;
    if (!o->comm) return GT_OK;
    return gt_comm_agree_max(o->comm, mine, sig, err);
}

/* rank 0 prepares checkpoint.save (the lock is one writer's) and tells the others what to
 * resume from, or that it failed */
static int open_ckpt_dir(gt_ckpt_dir *d, const gt_config *cfg, char *resume, size_t n, FILE *out,
                         gt_comm *comm, gt_error *err) {
    int lead = !comm || gt_comm_rank(comm) == 0;
    int rc = GT_OK;
    if (lead) {
        rc = gt_ckpt_dir_open(d, cfg, resume, n, out, err);
    } else {
        memset(d, 0, sizeof *d);
        d->lock_fd = -1;
    }
    if (!comm || gt_comm_size(comm) == 1) return rc;
    int status = rc;
    gt_error berr = {0};
    if (gt_comm_broadcast(comm, &status, sizeof status, 0, &berr) ||
        gt_comm_broadcast(comm, resume, n, 0, &berr)) {
        if (!rc) *err = berr;
        return rc ? rc : berr.code;
    }
    if (!lead && status)
        return gt_error_set(err, status,
                            "rank 0 could not prepare checkpoint.save=%s (its message says why)",
                            cfg->checkpoint.save);
    return rc;
}

static double monotonic_ms(void *ctx) {
    (void)ctx;
    return gt_now_ms();
}

/* Megatron's exit rules, checked after each step (a checkpoint follows when checkpoint.save
 * is set): exit_interval stops at the first step whose number is divisible by it (a step of
 * the whole run, so a resumed run stops at the same steps), exit_duration_in_mins once the
 * wall time since gt_train_run began exceeds it. Prints why and returns 1 to stop. */
static int exit_rule_met(const gt_config *cfg, long long step, double elapsed_ms, FILE *out) {
    if (cfg->train.exit_interval > 0 && step % cfg->train.exit_interval == 0) {
        fprintf(out, "stopping at step %lld: it is divisible by train.exit_interval=%d\n", step,
                cfg->train.exit_interval);
        return 1;
    }
    double minutes = elapsed_ms / 60e3;
    if (cfg->train.exit_duration_in_mins > 0 && minutes > cfg->train.exit_duration_in_mins) {
        fprintf(out, "stopping at step %lld: %.2f minutes passed, train.exit_duration_in_mins=%g\n",
                step, minutes, cfg->train.exit_duration_in_mins);
        return 1;
    }
    return 0;
}

int gt_train_run(const gt_config *cfg, const gt_train_run_opts *opts, gt_train_result *res_out,
                 gt_error *err) {
    gt_train_result res_local = {0};
    gt_train_result *res = res_out ? res_out : &res_local;
    memset(res, 0, sizeof *res);
    res->last_eval_loss = NAN;
    FILE *out = opts && opts->out ? opts->out : stdout;
    int quiet = opts && opts->quiet;
    double (*clock_ms)(void *) = opts && opts->clock_ms ? opts->clock_ms : monotonic_ms;
    void *clock_ctx = opts ? opts->clock_ctx : NULL;
    const double started_ms = clock_ms(clock_ctx);
    /* the save folder is made, locked and checked before anything is built, and decides
     * what the run resumes from (run_cfg's checkpoint.load: a file, or empty) */
    gt_ckpt_dir ckd;
    gt_config *run_cfg = malloc(sizeof *run_cfg);
    if (!run_cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    *run_cfg = *cfg;
    gt_comm *comm = opts ? opts->comm : NULL;
    int lead = !comm || gt_comm_rank(comm) == 0;
    if (!lead) { /* one writer of the run's files */
        run_cfg->logger.metrics_file[0] = '\0';
        run_cfg->logger.tensorboard_dir[0] = '\0';
    }
    int rc = open_ckpt_dir(&ckd, cfg, run_cfg->checkpoint.load, sizeof run_cfg->checkpoint.load,
                           out, comm, err);
    gt_trainer *t = NULL;
    if (!rc) rc = gt_trainer_create_dp(&t, run_cfg, comm, err);
    if (rc) {
        gt_ckpt_dir_close(&ckd);
        free(run_cfg);
        return rc;
    }
    cfg = run_cfg;
    const char *save_dir = cfg->checkpoint.save;
    int saving = cfg->checkpoint.save[0] != '\0';
    long long total = cfg->train.train_iters;
    gt_trainer_print_summary(t, out);
    if (!quiet) gt_trainer_print_memory(t, out);
    long long start = (long long)gt_trainer_step_count(t);
    if (gt_trainer_resumed(t))
        fprintf(out, "resumed from %s at step %lld\n", cfg->checkpoint.load, start);
    gt_backend *b = gt_trainer_backend(t);
    char device[512];
    b->ops->describe(b, device, sizeof device);
    loop_clock clk = {.t0 = mono_s(), .total = total, .b = b};
    clk.flops_per_token = gt_model_get_info(gt_trainer_model(t))->flops_per_token;
    gt_metrics_run mrun = {cfg, b->name, device, start, gt_trainer_resumed(t), clk.flops_per_token};
    gt_metrics *metrics = NULL;
    rc = gt_metrics_open(&metrics, &mrun, out, err);
    if (rc) {
        gt_trainer_destroy(t);
        gt_ckpt_dir_close(&ckd);
        free(run_cfg);
        return rc;
    }
    if (start >= total)
        fprintf(out, "nothing to do: step %lld already reached train.train_iters=%lld\n", start,
                total);
    long long run = 0, last_saved = -1, loss_n = 0;
    double loss_sum = 0, tokens = 0, step_ms = 0;
    int log_every = cfg->logger.log_interval > 0 ? cfg->logger.log_interval : 1;
    int stop_sig = 0;
    while (!rc && gt_trainer_step_count(t) < total) {
        rc = agreed_stop(opts, &stop_sig, err);
        if (rc || stop_sig) break;
        gt_step_stats s;
        rc = gt_trainer_step(t, &s, err);
        if (rc) {
            /* the failed step's record, for the user to see where it went wrong; the step's
             * error is the one to report even when that record cannot be written */
            gt_error werr = {0};
            clk.run = run + 1;
            if (rc == GT_ERR_NUMERIC && log_step(out, metrics, &s, (double)s.loss, &clk, &werr))
                fprintf(out, "%s\n", werr.msg);
            break;
        }
        run++;
        clk.run = run;
        if (run == 1) {
            res->first_step = s.step;
            res->first_loss = s.loss;
        }
        res->last_step = s.step;
        res->last_loss = s.loss;
        loss_sum += s.loss;
        loss_n++;
        tokens += s.tokens_per_s * s.ms / 1e3;
        step_ms += s.ms;
        if (s.step % log_every == 0 || run == 1 || s.step == total) {
            rc = log_step(out, metrics, &s, loss_sum / loss_n, &clk, err);
            loss_sum = 0;
            loss_n = 0;
        }
        if (!rc && cfg->train.eval_interval > 0 && s.step % cfg->train.eval_interval == 0)
            rc = eval(t, out, metrics, res, err);
        if (!rc && save_dir[0] && cfg->checkpoint.save_interval > 0 &&
            s.step % cfg->checkpoint.save_interval == 0) {
            rc = save(t, &ckd, cfg, out, lead, res, err);
            last_saved = s.step;
        }
        /* the final save below writes the checkpoint these exits leave */
        int exit_now = !rc && s.step < total &&
                       exit_rule_met(cfg, s.step, clock_ms(clock_ctx) - started_ms, out);
        if (!rc && comm) rc = gt_comm_agree_max(comm, exit_now, &exit_now, err);
        if (exit_now) break;
    }
    int interrupted = rc == GT_OK && stop_sig;
    /* a final checkpoint on normal completion, the exit rules and Ctrl-C (not after errors:
     * the state that failed is not worth resuming) */
    if (rc == GT_OK && save_dir[0] && last_saved != gt_trainer_step_count(t) && run > 0)
        rc = save(t, &ckd, cfg, out, lead, res, err);
    if (run > 0) {
        fprintf(out, "trained steps %lld-%lld in %.1f s (%.0f tokens/s): loss %.4f -> %.4f",
                res->first_step, res->last_step, step_ms / 1e3,
                step_ms > 0 ? tokens / (step_ms / 1e3) : 0.0, (double)res->first_loss,
                (double)res->last_loss);
        if (!isnan(res->last_eval_loss))
            fprintf(out, ", last eval loss %.4f", (double)res->last_eval_loss);
        fputc('\n', out);
    }
    if (!quiet) {
        gt_graph_runner *gr = gt_trainer_graph_runner(t);
        if (gr) gt_graph_runner_report(gr, out);
    }
    gt_error cerr = {0};
    int crc = gt_metrics_close(metrics, &cerr);
    if (crc && rc == GT_OK) {
        rc = crc;
        *err = cerr;
    }
    gt_trainer_destroy(t);
    gt_ckpt_dir_close(&ckd);
    free(run_cfg);
    if (rc == GT_OK && interrupted) {
        int sig = stop_sig;
        const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT (Ctrl-C)";
        fprintf(out, "interrupted by %s: stopped after step %lld%s\n", name,
                res->last_step ? res->last_step : start,
                !saving   ? " (set checkpoint.save to keep the state)"
                : run > 0 ? ", checkpoint saved"
                          : " before any step; no checkpoint written");
        return gt_error_set(err, GT_ERR_INTERRUPTED, "interrupted by %s", name);
    }
    return rc;
}
