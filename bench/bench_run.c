/* Runs the bench modes: one trainer per mode on a copy of the config, the same number of steps
 * in every mode (so the learning-rate schedule and the losses line up), timing only the
 * steady-state steps after the eager warmup, the capture step and the bench warmup. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "config/rules.h"
#include "core/clock.h"
#include "core/median.h"
#include "graphs/graphs.h"
#include "train/trainer.h"

/* Steps before the bench warmup: the runner's eager warmup steps plus the capture step. */
static int pre_steps(const gt_config *cfg) {
    int w = cfg->model.cuda_graph_warmup_steps;
    return (w > 0 ? w : 0) + 1;
}

/* The config one mode runs with. */
static void mode_config(gt_config *c, const gt_config *base, const gt_bench_mode *m,
                        int train_iters) {
    *c = *base;
    c->model.cuda_graph_impl = m->impl;
    c->model.cuda_graph_scope = m->scope;
    if (m->impl != GT_GRAPH_IMPL_NONE) {
        /* Bridge's harness turns the RNG tracker on with any graph impl. */
        c->model.use_te_rng_tracker = true;
        c->rng.te_rng_tracker = true;
    }
    c->dataset.source = GT_DATA_MOCK;
    c->train.train_iters = train_iters;
    c->train.exit_interval = 0;
    c->train.eval_interval = 0;
    c->checkpoint.save[0] = '\0';
    c->checkpoint.save_interval = 0;
    c->logger.metrics_file[0] = '\0';
}

static void finish_timing(gt_bench_result *r, double *ms, const gt_bench_workload *w) {
    if (r->timed <= 0) return;
    double sum = 0;
    r->min_ms = INFINITY;
    r->max_ms = 0;
    for (int i = 0; i < r->timed; i++) {
        sum += ms[i];
        if (ms[i] < r->min_ms) r->min_ms = ms[i];
        if (ms[i] > r->max_ms) r->max_ms = ms[i];
    }
    r->mean_ms = sum / r->timed;
    r->median_ms = gt_median(ms, r->timed);
    if (r->median_ms > 0) {
        r->tokens_per_s = w->tokens_per_step / (r->median_ms * 1e-3);
        r->tflops = w->flops_per_step / (r->median_ms * 1e-3) / 1e12;
        r->mfu = r->tflops * 1e12 / w->peak_flops;
        r->limit_fraction = w->limit_ms / r->median_ms;
    }
}

/* Checks a mode's config with every rule; the errors become the mode's error. */
static int validate_mode(const gt_config *c, const char *mode, gt_error *err) {
    gt_report *rep = calloc(1, sizeof *rep);
    if (!rep) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory validating the config");
    int errors = gt_config_validate(c, rep);
    if (errors > 0) {
        size_t used = 0;
        char msg[GT_ERROR_MSG_MAX] = "";
        for (int i = 0; i < rep->count && used + 1 < sizeof msg; i++) {
            const gt_finding *f = &rep->findings[i];
            if (f->severity != GT_SEVERITY_ERROR) continue;
            int w = snprintf(msg + used, sizeof msg - used, "%s[%s] %s fix: %s", used ? "; " : "",
                             f->rule, f->message, f->fix);
            if (w > 0) used += (size_t)w;
        }
        gt_error_set(err, GT_ERR_INVALID, "mode %s: the config breaks %d rule(s): %s", mode, errors,
                     msg);
    }
    free(rep);
    return errors > 0 ? GT_ERR_INVALID : GT_OK;
}

/* One mode, start to finish. Fills r (ok = 0 and r->error on failure). */
static void run_mode(const gt_config *base, const gt_bench_options *o, int train_iters,
                     gt_bench_report *rep, gt_bench_result *r, int first) {
    gt_config c;
    mode_config(&c, base, &r->mode, train_iters);
    int pre = pre_steps(&c), total = pre + o->warmup + o->steps;
    if (total < GT_BENCH_LOSS_STEPS) total = GT_BENCH_LOSS_STEPS;
    gt_trainer *t = NULL;
    double *ms = calloc((size_t)total, sizeof *ms);
    r->losses = calloc((size_t)total, sizeof *r->losses);
    if (!ms || !r->losses) {
        gt_error_set(&r->error, GT_ERR_NOMEM, "out of host memory for %d bench steps", total);
        goto done;
    }
    if (validate_mode(&c, r->mode.name, &r->error)) goto done;
    if (gt_trainer_create_dp(&t, &c, o->comm, &r->error)) goto done;
    if (first) {
        const gt_model_info *mi = gt_model_get_info(gt_trainer_model(t));
        gt_bench_workload_compute(&rep->w, &c, (double)mi->n_params, mi->flops_per_token);
        gt_backend *b = gt_trainer_backend(t);
        snprintf(rep->w.backend, sizeof rep->w.backend, "%s",
                 b->kind == GT_BACKEND_CUDA ? "cuda" : "cpu");
        if (b->ops->describe)
            b->ops->describe(b, rep->w.backend_detail, sizeof rep->w.backend_detail);
    }
    int timed_from = total - o->steps; /* 0-based index of the first timed step */
    for (int i = 0; i < total; i++) {
        gt_step_stats st;
        memset(&st, 0, sizeof st);
        double t0 = gt_now_ms();
        int rc = gt_trainer_step(t, &st, &r->error);
        double dt = gt_now_ms() - t0;
        if (rc) {
            gt_error_wrap(&r->error, "mode %s, step %d: ", r->mode.name, i + 1);
            goto done;
        }
        r->losses[r->n_losses++] = st.loss;
        r->steps_total = i + 1;
        if (st.mode == GT_STEP_CAPTURED && !r->capture_step) r->capture_step = i + 1;
        if (i >= timed_from) {
            ms[r->timed++] = dt;
            if (r->mode.impl != GT_GRAPH_IMPL_NONE && st.mode != GT_STEP_REPLAYED)
                r->timed_unreplayed++;
        }
        if (!o->quiet && (i + 1 == total || (i + 1) % 10 == 0))
            fprintf(stderr, "bench: %s step %d/%d loss %.6f %.3f ms\n", r->mode.name, i + 1, total,
                    st.loss, dt);
    }
    gt_graph_stats gs;
    memset(&gs, 0, sizeof gs);
    gt_graph_runner *gr = gt_trainer_graph_runner(t);
    if (gr) gt_graph_runner_stats(gr, &gs);
    snprintf(r->graph_mode, sizeof r->graph_mode, "%s", gs.mode ? gs.mode : "unknown");
    r->capture_ms = gs.capture_ms;
    r->instantiate_ms = gs.instantiate_ms;
    r->graphs = gs.graphs;
    r->nodes = gs.nodes;
    r->fallbacks = gs.fallbacks;
    gt_backend *b = gt_trainer_backend(t);
    size_t free_b = 0, total_b = 0, peak = 0;
    b->ops->mem_info(b, &free_b, &total_b, &peak);
    r->peak_bytes = peak;
    if (o->comm && gt_bench_dp_measure_comm(t, o, r)) goto done; /* C, on this trainer */
    finish_timing(r, ms, &rep->w);
    r->ok = 1;
done:
    gt_trainer_destroy(t);
    free(ms);
    /* T0: a trainer of its own, after this one is gone (the memory of one at a time) */
    if (r->ok && o->comm && gt_bench_dp_measure_compute(&c, o, total, r)) r->ok = 0;
    gt_bench_dp_finish(r, o->comm ? gt_comm_size(o->comm) : 1);
}

/* ---- one mode in a child process ----
 * The child runs run_mode and writes to the pipe: a header, the workload figures (when it
 * computed them), the result with its losses pointer cleared, then the losses. */
#define CHILD_MAGIC 0x43484247u /* "GBHC" read as a little-endian u32 */

typedef struct child_header {
    uint32_t magic;
    int has_workload;
    int n_losses;
} child_header;

/* all n bytes through stdio (which retries short and interrupted transfers): 0, else -1 */
static int put(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}
static int get(FILE *f, void *p, size_t n) {
    return fread(p, 1, n, f) == n ? 0 : -1;
}

static int send_result(FILE *f, const gt_bench_report *rep, const gt_bench_result *r,
                       int has_workload) {
    child_header h = {CHILD_MAGIC, has_workload, r->losses ? r->n_losses : 0};
    gt_bench_result copy = *r;
    copy.losses = NULL;
    if (put(f, &h, sizeof h)) return -1;
    if (has_workload && put(f, &rep->w, sizeof rep->w)) return -1;
    if (put(f, &copy, sizeof copy)) return -1;
    return h.n_losses ? put(f, r->losses, (size_t)h.n_losses * sizeof(float)) : 0;
}

/* Fills r (and rep->w when the child sent it); on failure r keeps only its mode. */
static int recv_result(FILE *f, gt_bench_report *rep, gt_bench_result *r) {
    child_header h;
    gt_bench_mode mode = r->mode;
    if (get(f, &h, sizeof h) || h.magic != CHILD_MAGIC || h.n_losses < 0 || h.n_losses > 100000000)
        return -1;
    if (h.has_workload && get(f, &rep->w, sizeof rep->w)) return -1;
    if (get(f, r, sizeof *r)) {
        memset(r, 0, sizeof *r);
        r->mode = mode;
        return -1;
    }
    r->losses = NULL;
    r->mode = mode;
    if (!h.n_losses) return 0;
    r->losses = malloc((size_t)h.n_losses * sizeof(float));
    if (!r->losses || get(f, r->losses, (size_t)h.n_losses * sizeof(float))) {
        free(r->losses);
        r->losses = NULL;
        r->ok = 0;
        return -1;
    }
    r->n_losses = h.n_losses;
    return 0;
}

/* A test hook: the child of this mode kills itself before it sends its result, as a crash
 * would (tests/test_bench.c). */
static int forced_crash(const gt_bench_mode *m) {
    const char *v = getenv("GT_BENCH_FORCE_CHILD_CRASH");
    return v && !strcmp(v, m->name);
}

static void run_mode_in_child(const gt_config *base, const gt_bench_options *o, int train_iters,
                              gt_bench_report *rep, gt_bench_result *r, int first) {
    int fd[2];
    if (pipe(fd))
        return (void)gt_error_set(&r->error, GT_ERR_IO,
                                  "mode %s: could not create a pipe to its process (%s); run "
                                  "with --same-process",
                                  r->mode.name, strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fd[0]);
        close(fd[1]);
        return (void)gt_error_set(&r->error, GT_ERR_IO,
                                  "mode %s: could not start its process (fork: %s); run with "
                                  "--same-process",
                                  r->mode.name, strerror(e));
    }
    if (pid == 0) {
        close(fd[0]);
        run_mode(base, o, train_iters, rep, r, first);
        if (forced_crash(&r->mode)) raise(SIGKILL);
        FILE *out = fdopen(fd[1], "wb");
        int rc = !out || send_result(out, rep, r, first && rep->w.tokens_per_step > 0) ||
                 fclose(out) != 0;
        free(r->losses);
        _exit(rc ? 3 : 0);
    }
    close(fd[1]);
    FILE *in = fdopen(fd[0], "rb");
    int got = in ? recv_result(in, rep, r) : -1;
    if (in)
        fclose(in);
    else
        close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    r->ok = 0;
    if (WIFSIGNALED(status))
        gt_error_set(&r->error, GT_ERR_DEVICE,
                     "mode %s: its process died with signal %d (%s) before it sent its result; "
                     "run the mode alone, or with --same-process, to see where",
                     r->mode.name, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (got != 0)
        gt_error_set(&r->error, GT_ERR_IO,
                     "mode %s: its process exited (status %d) without sending a whole result; "
                     "run with --same-process to see why",
                     r->mode.name, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

void gt_bench_compare_losses(gt_bench_report *rep) {
    int n = INT_MAX, modes = 0;
    const gt_bench_result *ref = NULL;
    for (int i = 0; i < rep->n; i++) {
        const gt_bench_result *r = &rep->results[i];
        if (!r->ok) continue;
        modes++;
        if (r->n_losses < n) n = r->n_losses;
        if (!ref) ref = r;
    }
    rep->loss_steps_compared = ref ? n : 0;
    rep->first_mismatch_step = 0;
    if (modes < 2) {
        rep->losses_identical = -1;
        return;
    }
    rep->losses_identical = 1;
    for (int s = 0; s < n; s++)
        for (int i = 0; i < rep->n; i++) {
            const gt_bench_result *r = &rep->results[i];
            if (!r->ok || r == ref) continue;
            /* bitwise on purpose: NaN payloads and -0 count */
            // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
            if (memcmp(&r->losses[s], &ref->losses[s], sizeof(float)) != 0) {
                rep->losses_identical = 0;
                if (!rep->first_mismatch_step) rep->first_mismatch_step = s + 1;
            }
        }
}

int gt_bench_run(const gt_config *cfg, const gt_bench_options *o, gt_bench_report *rep,
                 gt_error *err) {
    memset(rep, 0, sizeof *rep);
    if (o->n_modes <= 0 || o->n_modes > GT_BENCH_MAX_MODES)
        return gt_error_set(err, GT_ERR_INVALID, "bench: no modes to run (1 to %d needed)",
                            GT_BENCH_MAX_MODES);
    if (o->steps < 1 || o->warmup < 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "bench: --steps must be >= 1 and --warmup >= 0 (got %d, %d)", o->steps,
                            o->warmup);
    snprintf(rep->w.label, sizeof rep->w.label, "%s", o->label ? o->label : "custom");
    /* Every mode runs the same steps with the same train_iters: the LR schedule depends on it,
     * and bitwise-equal losses need the same schedule. */
    int total = pre_steps(cfg) + o->warmup + o->steps;
    if (total < GT_BENCH_LOSS_STEPS) total = GT_BENCH_LOSS_STEPS;
    int train_iters = cfg->train.train_iters > total ? cfg->train.train_iters : total;
    int ran = 0, first = 1;
    for (int i = 0; i < o->n_modes; i++) {
        gt_bench_result *r = &rep->results[rep->n++];
        r->mode = o->modes[i];
        if (!o->quiet) fprintf(stderr, "bench: mode %s\n", r->mode.name);
        /* the ranks' collectives run in this process (MPI and NCCL do not cross a fork) */
        if (o->same_process || o->comm)
            run_mode(cfg, o, train_iters, rep, r, first);
        else
            run_mode_in_child(cfg, o, train_iters, rep, r, first);
        if (r->ok || rep->w.tokens_per_step) first = 0;
        if (r->ok)
            ran++;
        else if (!o->quiet)
            fprintf(stderr, "bench: mode %s failed: %s\n", r->mode.name, r->error.msg);
    }
    /* Memory ratios against the eager mode, when it ran. */
    size_t eager_peak = 0;
    for (int i = 0; i < rep->n; i++)
        if (rep->results[i].ok && rep->results[i].mode.impl == GT_GRAPH_IMPL_NONE)
            eager_peak = rep->results[i].peak_bytes;
    for (int i = 0; i < rep->n; i++)
        if (rep->results[i].ok && eager_peak)
            rep->results[i].peak_ratio = (double)rep->results[i].peak_bytes / (double)eager_peak;
    gt_bench_compare_losses(rep);
    if (!ran) {
        if (err) *err = rep->results[0].error;
        return gt_error_wrap(err, "bench: no mode ran: ");
    }
    return GT_OK;
}

void gt_bench_report_free(gt_bench_report *rep) {
    if (!rep) return;
    for (int i = 0; i < rep->n; i++) {
        free(rep->results[i].losses);
        rep->results[i].losses = NULL;
    }
    rep->n = 0;
}
