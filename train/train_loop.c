/* The training loop; see train_loop.h. */
#include "train/train_loop.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "graphs/graphs.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/trainer_extra.h"

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
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

static int save(gt_trainer *t, const char *dir, FILE *out, gt_train_result *res, gt_error *err) {
    int rc = gt_trainer_save(t, dir, err);
    if (rc) return rc;
    char path[1024];
    fprintf(out, "saved checkpoint %s (step %lld)\n", gt_ckpt_file(dir, path, sizeof path),
            (long long)gt_trainer_step_count(t));
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

int gt_train_run(const gt_config *cfg, const gt_train_run_opts *opts, gt_train_result *res_out,
                 gt_error *err) {
    gt_train_result res_local = {0};
    gt_train_result *res = res_out ? res_out : &res_local;
    memset(res, 0, sizeof *res);
    res->last_eval_loss = NAN;
    FILE *out = opts && opts->out ? opts->out : stdout;
    int quiet = opts && opts->quiet;
    gt_trainer *t = NULL;
    int rc = gt_trainer_create(&t, cfg, err);
    if (rc) return rc;
    const char *save_dir = cfg->checkpoint.save;
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
        return rc;
    }
    if (start >= total)
        fprintf(out, "nothing to do: step %lld already reached train.train_iters=%lld\n", start,
                total);
    long long run = 0, last_saved = -1, loss_n = 0;
    double loss_sum = 0, tokens = 0, step_ms = 0;
    int log_every = cfg->logger.log_interval > 0 ? cfg->logger.log_interval : 1;
    while (!rc && gt_trainer_step_count(t) < total) {
        if (stop_requested(opts)) break;
        if (cfg->train.exit_interval > 0 && run >= cfg->train.exit_interval) {
            fprintf(out, "stopping after %lld steps (train.exit_interval)\n", run);
            break;
        }
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
            rc = save(t, save_dir, out, res, err);
            last_saved = s.step;
        }
    }
    int interrupted = rc == GT_OK && stop_requested(opts);
    /* a final checkpoint on normal completion, exit_interval and Ctrl-C (not after errors:
     * the state that failed is not worth resuming) */
    if (rc == GT_OK && save_dir[0] && last_saved != gt_trainer_step_count(t) && run > 0)
        rc = save(t, save_dir, out, res, err);
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
    if (rc == GT_OK && interrupted) {
        fprintf(out, "interrupted: stopped after step %lld%s\n",
                res->last_step ? res->last_step : start,
                !save_dir[0] ? " (set checkpoint.save to keep the state)"
                : run > 0    ? ", checkpoint saved"
                             : " before any step; no checkpoint written");
        return gt_error_set(err, GT_ERR_INTERRUPTED, "interrupted by the user (Ctrl-C)");
    }
    return rc;
}
