/* The graph runner: the warmup -> capture -> replay state machine over the bodies it is
 * handed (full-iteration graphs with shape buckets here, per-unit graphs in units.c), capture
 * failure policy, debug.capture_check, cleanup and the stats/report of what it did. */
#include <stdlib.h>
#include <string.h>

#include "graphs/runner_impl.h"

int gt_runner_force_matches(const gt_graph_runner *r, const char *label) {
    size_t n = strlen(r->force_fail);
    return n > 0 && strncmp(label, r->force_fail, n) == 0;
}

void gt_graph_runner_force_capture_failure(gt_graph_runner *r, const char *label) {
    if (!r) return;
    snprintf(r->force_fail, sizeof r->force_fail, "%s", label ? label : "");
}

void gt_runner_note_capture(gt_graph_runner *r, const gt_capture_result *res) {
    if (r->captures == 0) {
        r->mem_before = res->mem_before;
        r->capture_call = r->calls + 1;
    }
    r->mem_after = res->mem_after;
    r->capture_ms += res->capture_ms;
    r->instantiate_ms += res->instantiate_ms;
    r->captures++;
}

int gt_runner_capture_failed(gt_graph_runner *r, const char *what, gt_error *err) {
    snprintf(r->last_failure, sizeof r->last_failure, "%s", err->msg);
    if (r->on_fail == GT_CAPTURE_FAIL_STOP) {
        gt_error e = *err;
        return gt_error_set(err, e.code,
                            "%s; the run stops because graphs.capture_failure=stop (set "
                            "graphs.capture_failure=eager to run %s eagerly instead)",
                            e.msg, what);
    }
    fprintf(stderr,
            "graphtrain: warning: %s; running %s eagerly from now on "
            "(graphs.capture_failure=eager)\n",
            err->msg, what);
    r->fallbacks++;
    gt_error_clear(err);
    return GT_OK;
}

gt_graph_runner_opts gt_graph_runner_opts_of(const gt_config *cfg) {
    return (gt_graph_runner_opts){cfg->graphs.capture_failure, cfg->runtime.debug_capture_check,
                                  cfg->runtime.max_shape_buckets};
}

int gt_graph_runner_create(gt_graph_runner **out, const gt_graph_policy *pol, gt_backend *b,
                           gt_stream *s, gt_model *m, const gt_graph_runner_opts *opts,
                           gt_error *err) {
    *out = NULL;
    if (!pol || !b || !s || !m || !opts)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gt_graph_runner_create: the policy, backend, stream, model and "
                            "options are all needed (one is NULL)");
    gt_graph_runner *r = calloc(1, sizeof *r);
    if (!r) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the graph runner");
    r->b = b;
    r->m = m;
    r->s = s;
    r->pol = *pol;
    r->check_nodes = -1;
    int rc = GT_OK;
    if (opts->capture_failure != GT_CAPTURE_FAIL_STOP &&
        opts->capture_failure != GT_CAPTURE_FAIL_EAGER)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "graphs.capture_failure has an unknown value (%d); use stop or eager",
                          (int)opts->capture_failure);
    r->on_fail = opts->capture_failure;
    r->capture_check = opts->capture_check;
    r->default_key = gt_model_get_info(r->m)->tokens;
    if (rc == GT_OK && r->pol.kind == GT_POLICY_FULL)
        rc = gt_graph_cache_init(&r->cache, r->b, opts->max_shape_buckets, err);
    if (rc == GT_OK && r->pol.kind == GT_POLICY_SCOPED) rc = gt_runner_units_init(r, err);
    if (rc != GT_OK) {
        gt_graph_runner_destroy(r);
        return gt_error_wrap(err, "setting up CUDA graphs: ");
    }
    const char *force = getenv(GT_FORCE_FAIL_ENV);
    if (force) gt_graph_runner_force_capture_failure(r, force);
    *out = r;
    return GT_OK;
}

void gt_graph_runner_destroy(gt_graph_runner *r) {
    if (!r) return;
    gt_graph_cache_release(&r->cache);
    gt_runner_units_release(r);
    free(r);
}

typedef struct step_body {
    gt_graph_enqueue_fn fn;
    void *ctx;
    const gt_unit_exec *exec;
} step_body;

static void enqueue(void *ctx, gt_stream *s) {
    step_body *sb = ctx;
    sb->fn(sb->ctx, s, sb->exec);
}

/* debug.capture_check: capture one whole step in global mode, where any sync, allocation or
 * read-back anywhere in the process breaks the capture, then throw the graph away unlaunched
 * (capturing runs nothing, so the step itself still runs as the policy says). */
static int capture_check(gt_graph_runner *r, step_body *sb, gt_error *err) {
    gt_capture_result res;
    int rc = gt_graph_capture(r->b, r->s, GT_CAPTURE_GLOBAL, "capture_check",
                              gt_runner_force_matches(r, "capture_check"), enqueue, sb, &res, err);
    if (rc != GT_OK)
        return gt_error_wrap(err, "debug.capture_check: the training step cannot be captured "
                                  "(an op inside it synchronizes, allocates or reads back); ");
    r->check_nodes = res.nodes;
    r->b->ops->graph_destroy(r->b, res.graph);
    return GT_OK;
}

/* Every key of local + full_iteration: one graph per key in the bucket cache, captured the
 * first time the key runs once its kind of work may be captured, replayed after. */
static int full_run(gt_graph_runner *r, gt_graph_key key, step_body *sb, gt_step_mode *mode,
                    gt_error *err) {
    *mode = GT_STEP_EAGER;
    int eval = key.work == GT_GRAPH_EVAL;
    /* an evaluation waits for the training step's capture call (not only the warmup): the
     * training graph is always captured first, even when an evaluation falls on the boundary */
    int64_t first = eval ? (int64_t)r->pol.warmup + 1 : r->pol.warmup;
    if (r->calls < first || r->full_fallback || (eval && r->eval_fallback)) {
        enqueue(sb, r->s);
        return GT_OK;
    }
    int64_t bucket = eval ? -key.shape : key.shape; /* shapes are > 0: the kinds never meet */
    gt_graph *g = gt_graph_cache_get(&r->cache, bucket);
    if (g) {
        *mode = GT_STEP_REPLAYED;
        return r->b->ops->graph_launch(r->b, g, r->s, err);
    }
    char label[64];
    if (eval)
        snprintf(label, sizeof label, "%s", GT_EVAL_LABEL);
    else if (key.shape == r->default_key)
        snprintf(label, sizeof label, "full_iteration");
    else
        snprintf(label, sizeof label, "full_iteration shape %lld", (long long)key.shape);
    gt_capture_result res;
    int rc = gt_graph_capture(r->b, r->s, GT_CAPTURE_THREAD_LOCAL, label,
                              gt_runner_force_matches(r, label), enqueue, sb, &res, err);
    if (rc != GT_OK) {
        rc = gt_runner_capture_failed(r, eval ? GT_EVAL_LABEL : "full_iteration", err);
        if (rc != GT_OK) return rc; /* nothing of this run ran */
        if (eval) {
            r->eval_fallback = 1; /* the training graphs and their buckets stay */
        } else {
            r->full_fallback = 1;
            gt_graph_cache_clear(&r->cache);
        }
        enqueue(sb, r->s); /* the failed capture ran nothing: run the work for real */
        return GT_OK;
    }
    gt_runner_note_capture(r, &res);
    /* a full cache evicts its least recently used graph (re-captured on demand) */
    gt_graph_cache_put(&r->cache, bucket, res.graph, res.nodes);
    *mode = GT_STEP_CAPTURED; /* Megatron's wrapper also runs the step it captures */
    return r->b->ops->graph_launch(r->b, res.graph, r->s, err);
}

static int scoped_step(gt_graph_runner *r, int64_t shape, step_body *sb, gt_step_mode *mode,
                       gt_error *err) {
    /* unit graphs hold the ordinary shape; any other shape runs every unit eagerly */
    sb->exec = shape == r->default_key ? &r->exec : NULL;
    r->capture_now = sb->exec && !r->scoped_captured && r->calls >= r->pol.warmup;
    r->step_captured = r->step_replayed = 0;
    gt_error_clear(&r->pending);
    enqueue(sb, r->s);
    if (r->capture_now) r->scoped_captured = 1;
    r->capture_now = 0;
    gt_runner_units_after_step(r);
    *mode =
        r->step_captured ? GT_STEP_CAPTURED : (r->step_replayed ? GT_STEP_REPLAYED : GT_STEP_EAGER);
    if (r->pending.code != GT_OK) {
        if (err) *err = r->pending;
        return r->pending.code;
    }
    return GT_OK;
}

static void count_run(gt_graph_runner *r, gt_graph_work work, gt_step_mode m) {
    int64_t *eager = work == GT_GRAPH_EVAL ? &r->eval_eager : &r->eager_steps;
    int64_t *captured = work == GT_GRAPH_EVAL ? &r->eval_captured : &r->captured_steps;
    int64_t *replayed = work == GT_GRAPH_EVAL ? &r->eval_replayed : &r->replayed_steps;
    if (m == GT_STEP_REPLAYED)
        (*replayed)++;
    else if (m == GT_STEP_CAPTURED)
        (*captured)++;
    else
        (*eager)++;
}

int gt_graph_runner_run(gt_graph_runner *r, gt_graph_key key, gt_graph_enqueue_fn body, void *ctx,
                        gt_step_mode *mode, gt_error *err) {
    gt_error local; /* failures are reported into *err; callers may pass none */
    if (!err) err = &local;
    gt_error_clear(err);
    if (mode) *mode = GT_STEP_EAGER;
    if (!r)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gt_graph_runner_run: no runner (gt_graph_runner_create failed or "
                            "was not called)");
    if (!body)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gt_graph_runner_run: no body given (fn is NULL; pass the function "
                            "that enqueues the work: the training step or one eval batch)");
    if ((key.work != GT_GRAPH_STEP && key.work != GT_GRAPH_EVAL) || key.shape <= 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gt_graph_runner_run: bad key (work %d, shape %lld); use "
                            "GT_GRAPH_STEP or GT_GRAPH_EVAL and a shape > 0 (e.g. tokens per "
                            "micro-batch)",
                            (int)key.work, (long long)key.shape);
    int step = key.work == GT_GRAPH_STEP;
    gt_step_mode m = GT_STEP_EAGER;
    step_body sb = {body, ctx, NULL}; /* no unit graphs unless a scoped step routes them */
    int rc = GT_OK;
    if (step && r->capture_check) {
        r->capture_check = 0;
        rc = capture_check(r, &sb, err);
        if (rc != GT_OK) return rc;
    }
    if (r->pol.kind == GT_POLICY_FULL)
        rc = full_run(r, key, &sb, &m, err);
    else if (r->pol.kind == GT_POLICY_SCOPED && step)
        rc = scoped_step(r, key.shape, &sb, &m, err);
    else
        enqueue(&sb, r->s);
    if (step) r->calls++;
    if (rc == GT_OK) count_run(r, key.work, m);
    if (mode) *mode = m;
    return rc;
}

void gt_graph_runner_stats(const gt_graph_runner *r, gt_graph_stats *st) {
    memset(st, 0, sizeof *st);
    if (!r) {
        st->mode = "eager";
        return;
    }
    st->mode = r->pol.mode;
    int unit_nodes = 0;
    st->graphs = r->cache.count + gt_runner_units_alive(r, &unit_nodes);
    st->nodes = gt_graph_cache_nodes(&r->cache) + unit_nodes;
    st->capture_ms = r->capture_ms;
    st->instantiate_ms = r->instantiate_ms;
    st->mem_before_capture = r->mem_before;
    st->mem_after_capture = r->mem_after;
    st->fallbacks = r->fallbacks;
    st->buckets = r->cache.count;
    st->evictions = r->cache.evictions;
    st->eval_eager = r->eval_eager;
    st->eval_captured = r->eval_captured;
    st->eval_replayed = r->eval_replayed;
}

static void print_bytes(FILE *f, size_t bytes) {
    if (bytes >= ((size_t)1 << 30))
        fprintf(f, "%.2f GiB", (double)bytes / (1 << 30));
    else if (bytes >= ((size_t)1 << 20))
        fprintf(f, "%.1f MiB", (double)bytes / (1 << 20));
    else if (bytes >= 1024)
        fprintf(f, "%.1f KiB", (double)bytes / 1024);
    else
        fprintf(f, "%zu B", bytes);
}

static void report_memory(const gt_graph_runner *r, const gt_graph_stats *s, FILE *f) {
    size_t free_b = 0, total = 0, peak = 0;
    r->b->ops->mem_info(r->b, &free_b, &total, &peak);
    long long delta = (long long)s->mem_after_capture - (long long)s->mem_before_capture;
    fprintf(f, "graphs: %s before capture ", total ? "device memory in use" : "peak memory");
    print_bytes(f, s->mem_before_capture);
    fprintf(f, ", after ");
    print_bytes(f, s->mem_after_capture);
    fprintf(f, " (%s", delta < 0 ? "-" : "+");
    print_bytes(f, (size_t)(delta < 0 ? -delta : delta));
    fprintf(f, "): graphs replay into the static arenas, so they need no memory pool of "
               "their own\n");
}

void gt_graph_runner_report(const gt_graph_runner *r, FILE *f) {
    gt_graph_stats s;
    gt_graph_runner_stats(r, &s);
    fprintf(f, "graphs: mode %s, %d alive (%d nodes)", s.mode, s.graphs, s.nodes);
    if (!r) {
        fprintf(f, "\n");
        return;
    }
    if (r->pol.kind == GT_POLICY_SCOPED && s.graphs > 0) {
        const char *sep = ": ";
        for (int k = 0; k < GT_UNIT_KINDS; k++) {
            int n = gt_runner_units_alive_kind(r, k);
            if (n == 0) continue;
            fprintf(f, "%s%d %s", sep, n, gt_graph_unit_scope_name(k));
            sep = ", ";
        }
    }
    if (r->capture_call > 0)
        fprintf(f,
                "; first capture at step %lld of this run after %d eager warmup step%s; "
                "%d capture%s: %.2f ms capturing, %.2f ms instantiating\n",
                (long long)r->capture_call, r->pol.warmup, r->pol.warmup == 1 ? "" : "s",
                r->captures, r->captures == 1 ? "" : "s", s.capture_ms, s.instantiate_ms);
    else if (r->pol.kind != GT_POLICY_EAGER)
        fprintf(f, "; nothing captured (warmup %d step%s)\n", r->pol.warmup,
                r->pol.warmup == 1 ? "" : "s");
    else
        fprintf(f, "\n");
    fprintf(f, "graphs: steps: %lld eager, %lld captured, %lld replayed\n",
            (long long)r->eager_steps, (long long)r->captured_steps, (long long)r->replayed_steps);
    if (s.eval_eager + s.eval_captured + s.eval_replayed > 0)
        fprintf(f, "graphs: eval: %lld eager, %lld captured, %lld replayed\n",
                (long long)s.eval_eager, (long long)s.eval_captured, (long long)s.eval_replayed);
    if (r->captures > 0) report_memory(r, &s, f);
    if (r->pol.kind == GT_POLICY_FULL)
        fprintf(f, "graphs: shape buckets %d of %d, %d evictions, %d hits\n", s.buckets,
                r->cache.cap, s.evictions, r->cache.hits);
    if (s.fallbacks > 0)
        fprintf(f, "graphs: %d scope(s) fell back to eager after a failed capture; last: %s\n",
                s.fallbacks, r->last_failure);
    if (r->check_nodes >= 0)
        fprintf(f, "graphs: debug.capture_check passed (%d nodes captured in global mode)\n",
                r->check_nodes);
}
