/* Shared by the tests/graphs/test_graphs_*.c binaries: tiny dense and MoE configs (dropout on, CPU
 * backend, a few micro-batches per step) and a helper that trains N steps and keeps what the
 * graph tests compare: per-step losses and modes, final master weights, graph stats, and the
 * backend's live graph count before teardown. Header-only so each test stays one file. */
#ifndef GT_TESTS_TEST_GRAPHS_FIXTURE_H
#define GT_TESTS_TEST_GRAPHS_FIXTURE_H

#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "config/rules.h"
#include "graphs/graphs.h"
#include "train/trainer.h"

#define GTF_MAX_STEPS 64

typedef struct gtf_run {
    int steps; /* steps completed without error */
    float loss[GTF_MAX_STEPS];
    gt_step_mode mode[GTF_MAX_STEPS];
    int64_t step_no[GTF_MAX_STEPS];
    double ms[GTF_MAX_STEPS]; /* host wall time of each step */
    float *master;            /* [n_master], final fp32 master weights */
    size_t n_master;
    gt_graph_stats gs; /* of the trainer's runner before teardown */
    char report[2048]; /* gt_graph_runner_report output */
    int live;          /* backend live graphs before teardown */
    int rc;            /* status of the step that ended the run early, GT_OK otherwise */
    gt_error err;
    int64_t stop_step;      /* stats.step of the failing step (NaN), -1 otherwise */
    gt_step_mode stop_mode; /* stats.mode of the failing step */
} gtf_run;

/* A second runner over the trainer's backend, stream and model, made the way the trainer
 * makes its own (the config's policy and settings), for tests that drive a runner by hand. */
static inline int gtf_runner_create(gt_graph_runner **r, gt_trainer *t, gt_error *err) {
    gt_graph_policy pol;
    const gt_config *c = gt_trainer_config(t);
    int rc = gt_graph_policy_from_config(c, &pol, err);
    if (rc != GT_OK) return rc;
    gt_graph_runner_opts opts = gt_graph_runner_opts_of(c);
    return gt_graph_runner_create(r, &pol, gt_trainer_backend(t), gt_trainer_stream(t),
                                  gt_trainer_model(t), &opts, err);
}

/* The trainer's step as a runner body (ctx: the trainer). */
static inline void gtf_enqueue_step(void *ctx, gt_stream *s, const gt_unit_exec *exec) {
    gt_trainer_enqueue_step(ctx, s, exec);
}

/* One training step of t through runner r (the batch the trainer holds). */
static inline int gtf_runner_step(gt_graph_runner *r, gt_trainer *t, gt_step_mode *mode,
                                  gt_error *err) {
    return gt_graph_runner_run(r, gt_trainer_step_key(t), gtf_enqueue_step, t, mode, err);
}

/* 2 layers, d=16, 2 heads, seq 8, micro-batch 2, 2 micro-batches per step, dropout 0.1. */
static inline void gtf_tiny_dense(gt_config *c) {
    gt_config_defaults(c);
    c->runtime.device = GT_DEVICE_CPU;
    c->model.num_layers = 2;
    c->model.hidden_size = 16;
    c->model.num_attention_heads = 2;
    c->model.num_query_groups = 1;
    c->model.ffn_hidden_size = 32;
    c->model.vocab_size = 64;
    c->model.seq_length = 8;
    c->model.attention_dropout = 0.1;
    c->model.hidden_dropout = 0.1;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 4;
    c->train.train_iters = 30;
    c->dataset.source = GT_DATA_MOCK;
    c->rng.seed = 1234;
    c->optimizer.lr = 3e-3;
    c->optimizer.clip_grad = 1.0;
    c->model.use_te_rng_tracker = true;
    c->rng.te_rng_tracker = true;
    c->model.cuda_graph_warmup_steps = 2;
    c->logger.log_interval = 1000;
}

/* The dense model with every layer MoE: 4 experts, top-2, aux loss on. */
/* For the GPU tests (tests/gpu/): 1 when a CUDA backend can be made; otherwise says why the
 * tests skip. */
static inline int gtf_cuda_available(void) {
    gt_backend *b = NULL;
    gt_error err = {0};
    int ok = gt_backend_create_cuda(&b, 0, NULL, &err) == GT_OK;
    if (!ok) fprintf(stderr, "skipping: %s\n", err.msg);
    gt_backend_destroy(b);
    return ok;
}

/* A bf16 model on the CUDA backend with shapes its kernels like (head dim 64, multiples of
 * 64), deterministic, captured after `warmup` eager steps. */
static inline void gtf_gpu_dense(gt_config *c, int layers, int d, int heads, int kv_heads, int ffn,
                                 int warmup) {
    gtf_tiny_dense(c);
    c->runtime.device = GT_DEVICE_CUDA;
    c->model.compute_dtype = GT_DTYPE_BF16;
    c->model.num_layers = layers;
    c->model.hidden_size = d;
    c->model.num_attention_heads = heads;
    c->model.num_query_groups = kv_heads;
    c->model.ffn_hidden_size = ffn;
    c->model.vocab_size = 1024;
    c->model.seq_length = 128;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 4;
    c->model.cuda_graph_warmup_steps = warmup;
    c->runtime.deterministic = true;
}

static inline void gtf_tiny_moe(gt_config *c) {
    gtf_tiny_dense(c);
    c->model.num_moe_experts = 4;
    c->model.moe_router_topk = 2;
    c->model.moe_ffn_hidden_size = 16;
    c->model.moe_aux_loss_coeff = 0.01;
}

static inline void gtf_graphs(gt_config *c, gt_graph_impl impl, uint32_t scope) {
    c->model.cuda_graph_impl = impl;
    c->model.cuda_graph_scope = scope;
}

/* The precision-aware optimizer with both Adam moments in bf16. */
static inline void gtf_bf16_moments(gt_config *c) {
    c->optimizer.use_precision_aware_optimizer = true;
    c->optimizer.exp_avg_dtype = GT_STATE_BF16;
    c->optimizer.exp_avg_sq_dtype = GT_STATE_BF16;
}

static inline void gtf_free(gtf_run *r) {
    free(r->master);
    r->master = NULL;
}

/* Fails the test when cfg breaks a validation rule: the tests run what a user can run. */
static inline void gtf_assert_valid(const gt_config *cfg) {
    static gt_report rep; /* large; one test thread */
    if (gt_config_validate(cfg, &rep) == 0) return;
    gt_report_print(&rep, stderr);
    fail_msg("the test's configuration does not pass gt_config_validate");
}

/* Trains `steps` steps (stopping at the first error) and tears the trainer down. force, when
 * not NULL, is set as the runner's capture-failure test hook. validate = 0 lets a test run a
 * configuration the rules reject (to show what the engine itself can do). */
static inline void gtf_train_unchecked(const gt_config *cfg, int steps, const char *force,
                                       int validate, gtf_run *out) {
    if (validate) gtf_assert_valid(cfg);
    memset(out, 0, sizeof *out);
    out->stop_step = -1;
    gt_error err = {0};
    gt_trainer *t = NULL;
    int rc = gt_trainer_create(&t, cfg, &err);
    if (rc != GT_OK) fail_msg("gt_trainer_create: %s", err.msg);
    if (force) gt_graph_runner_force_capture_failure(gt_trainer_graph_runner(t), force);
    for (int i = 0; i < steps && i < GTF_MAX_STEPS; i++) {
        gt_step_stats st;
        memset(&st, 0, sizeof st);
        rc = gt_trainer_step(t, &st, &err);
        if (rc != GT_OK) {
            out->rc = rc;
            out->err = err;
            out->stop_step = st.step;
            out->stop_mode = st.mode;
            break;
        }
        out->loss[i] = st.loss;
        out->mode[i] = st.mode;
        out->step_no[i] = st.step;
        out->ms[i] = st.ms;
        out->steps++;
    }
    gt_backend *b = gt_trainer_backend(t);
    out->n_master = gt_model_get_info(gt_trainer_model(t))->n_params;
    out->master = calloc(out->n_master, sizeof(float));
    assert_non_null(out->master);
    gt_error rerr = {0};
    if (gt_trainer_read_master(t, out->master, &rerr) != GT_OK)
        fail_msg("gt_trainer_read_master: %s", rerr.msg);
    gt_graph_runner *gr = gt_trainer_graph_runner(t);
    gt_graph_runner_stats(gr, &out->gs);
    FILE *f = fmemopen(out->report, sizeof out->report - 1, "w");
    if (f) {
        gt_graph_runner_report(gr, f);
        fclose(f);
    }
    out->live = b->ops->live_graphs(b);
    gt_trainer_destroy(t);
}

static inline void gtf_train_ex(const gt_config *cfg, int steps, const char *force, gtf_run *out) {
    gtf_train_unchecked(cfg, steps, force, 1, out);
}

static inline void gtf_train(const gt_config *cfg, int steps, gtf_run *out) {
    gtf_train_ex(cfg, steps, NULL, out);
}

/* Bitwise equality of the losses of every step and of the final master weights (memcmp, not
 * ==, on purpose: clang-tidy's float memcmp check is silenced for that below). */
static inline void gtf_assert_same(const gtf_run *a, const gtf_run *b) {
    assert_int_equal(a->steps, b->steps);
    for (int i = 0; i < a->steps; i++)
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
        if (memcmp(&a->loss[i], &b->loss[i], sizeof(float)) != 0)
            fail_msg("step %d: loss %.9g != %.9g", i + 1, (double)a->loss[i], (double)b->loss[i]);
    assert_int_equal(a->n_master, b->n_master);
    for (size_t i = 0; i < a->n_master; i++)
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
        if (memcmp(&a->master[i], &b->master[i], sizeof(float)) != 0)
            fail_msg("master weight %zu: %.9g != %.9g", i, (double)a->master[i],
                     (double)b->master[i]);
}

/* A run stopped by the NaN check at step k of a replayed graph: the error names the step and
 * the k - 1 steps before it completed. */
static inline void gtf_assert_nan_stop_replayed(const gtf_run *r, int k) {
    assert_int_equal(r->rc, GT_ERR_NUMERIC);
    assert_int_equal(r->stop_step, k);
    assert_int_equal(r->steps, k - 1);
    assert_int_equal(r->stop_mode, GT_STEP_REPLAYED);
    char want[32];
    snprintf(want, sizeof want, "step %d", k);
    assert_non_null(strstr(r->err.msg, want));
}

/* Eager for the first `warmup` steps, captured at the next, replayed after. */
static inline void gtf_assert_progress(const gtf_run *r, int warmup) {
    for (int i = 0; i < r->steps; i++) {
        gt_step_mode want =
            i < warmup ? GT_STEP_EAGER : (i == warmup ? GT_STEP_CAPTURED : GT_STEP_REPLAYED);
        if (r->mode[i] != want)
            fail_msg("step %d: mode %d, expected %d", i + 1, (int)r->mode[i], (int)want);
    }
}

/* A resumed run r (its first step is first + 1) matches the uninterrupted run's losses of those
 * steps and its final master weights bit for bit; graphed: r also ran eager for `warmup` steps,
 * then captured and replayed. */
static inline void gtf_assert_resumed(const gtf_run *r, int first, const float *loss,
                                      const float *master, size_t n_master, int graphed,
                                      int warmup) {
    assert_int_equal(r->rc, GT_OK);
    assert_int_equal(r->step_no[0], first + 1);
    for (int i = 0; i < r->steps; i++)
        /* bitwise on purpose: NaN payloads and -0 count */
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
        if (memcmp(&r->loss[i], &loss[i], sizeof(float)) != 0)
            fail_msg("resumed step %d: loss %.9g != %.9g", first + 1 + i, (double)r->loss[i],
                     (double)loss[i]);
    assert_int_equal(r->n_master, n_master);
    assert_memory_equal(r->master, master, n_master * sizeof(float));
    if (graphed) gtf_assert_progress(r, warmup);
}

/* cfg trained `steps` steps eagerly, with transformer_engine graphs of `scopes` and in one
 * full-iteration graph (both captured after `warmup` eager steps): the same losses and master
 * weights, bit for bit. first_loss (may be NULL) gets the eager run's first loss. */
static inline void gtf_assert_scoped_and_full_like_eager(const gt_config *cfg, int steps,
                                                         int warmup, uint32_t scopes,
                                                         float *first_loss) {
    gt_config c = *cfg;
    gtf_run eager, scoped, full;
    gtf_train(&c, steps, &eager);
    assert_int_equal(eager.rc, GT_OK);
    gtf_graphs(&c, GT_GRAPH_IMPL_TE, scopes);
    gtf_train(&c, steps, &scoped);
    assert_int_equal(scoped.rc, GT_OK);
    gtf_assert_progress(&scoped, warmup);
    gtf_assert_same(&eager, &scoped);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gtf_train(&c, steps, &full);
    assert_int_equal(full.rc, GT_OK);
    gtf_assert_progress(&full, warmup);
    gtf_assert_same(&eager, &full);
    if (first_loss) *first_loss = eager.loss[0];
    gtf_free(&eager), gtf_free(&scoped), gtf_free(&full);
}

/* cfg trained `steps` steps eagerly and in one full-iteration graph (captured after `warmup`
 * eager steps): the same losses and master weights, bit for bit. */
static inline void gtf_assert_full_iteration_like_eager(const gt_config *cfg, int steps,
                                                        int warmup) {
    gt_config c = *cfg;
    gtf_run eager, graphed;
    gtf_train(&c, steps, &eager);
    gtf_graphs(&c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
    gtf_train(&c, steps, &graphed);
    assert_int_equal(graphed.rc, GT_OK);
    gtf_assert_same(&eager, &graphed);
    gtf_assert_progress(&graphed, warmup);
    assert_int_equal(graphed.gs.graphs, 1);
    gtf_free(&eager);
    gtf_free(&graphed);
}

/* Defines g_eager, an eager reference run of n_steps steps of gtf_tiny_dense trained once by
 * the group setup, and that setup / teardown pair (gtf_eager_setup, gtf_eager_teardown) for
 * cmocka_run_group_tests. */
#define GTF_EAGER_REFERENCE(n_steps)                                                               \
    static gtf_run g_eager;                                                                        \
    static int gtf_eager_setup(void **state) {                                                     \
        (void)state;                                                                               \
        gt_config c;                                                                               \
        gtf_tiny_dense(&c);                                                                        \
        gtf_train(&c, (n_steps), &g_eager);                                                        \
        return g_eager.steps == (n_steps) ? 0 : -1;                                                \
    }                                                                                              \
    static int gtf_eager_teardown(void **state) {                                                  \
        (void)state;                                                                               \
        gtf_free(&g_eager);                                                                        \
        return 0;                                                                                  \
    }

#endif
