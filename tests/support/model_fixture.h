/* Shared fixture of the model tests: a tiny config filled by hand, a CPU backend with the
 * model, step state and a batch, one-call training loss, and the finite-difference check of
 * every parameter tensor's gradient. Included by tests/model/test_model*.c only. */
#ifndef GT_TESTS_TEST_MODEL_COMMON_H
#define GT_TESTS_TEST_MODEL_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "testlib.h"

/* The tiny dense model of the brief over the key-table defaults: 2 layers, d=16, H=4, KV=2,
 * ffn=24, V=32, T=8, B=2. */
static inline void tm_tiny_config(gt_config *c) {
    gt_config_defaults(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 16;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 24;
    c->model.vocab_size = 32;
    c->model.seq_length = 8;
    c->model.rotary_base = 10000.0;
    c->model.norm_epsilon = 1e-5;
    c->model.init_method_std = 0.2; /* large enough that deep gradients are well above noise */
    c->model.moe_layer_freq = 1;
    c->train.micro_batch_size = 2;
    c->rng.seed = 1234;
}

/* The tiny MoE model: the dense one with E=4 experts, top-2, expert ffn 12, aux loss on;
 * capacity_factor <= 0 is dropless, > 0 drop-and-pad. */
static inline void tm_tiny_moe_config(gt_config *c, double capacity_factor) {
    tm_tiny_config(c);
    c->model.num_moe_experts = 4;
    c->model.moe_router_topk = 2;
    c->model.moe_ffn_hidden_size = 12;
    c->model.moe_expert_capacity_factor = capacity_factor;
    c->model.moe_aux_loss_coeff = 0.1;
}

typedef struct tm_fixture {
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    const gt_model_info *info;
    gt_step_state *st;
    int32_t *tokens, *targets; /* [N] device */
} tm_fixture;

static inline void tm_fixture_create(tm_fixture *fx, const gt_config *cfg) {
    gt_error err = {0};
    memset(fx, 0, sizeof *fx);
    assert_int_equal(gt_backend_create_cpu(&fx->b, &err), GT_OK);
    assert_int_equal(fx->b->ops->stream_create(fx->b, &fx->s, &err), GT_OK);
    int rc = gt_model_create(&fx->m, cfg, fx->b, &err);
    if (rc) fprintf(stderr, "gt_model_create: %s\n", err.msg);
    assert_int_equal(rc, GT_OK);
    fx->info = gt_model_get_info(fx->m);
    int N = fx->info->tokens;
    assert_int_equal(fx->b->ops->alloc(fx->b, sizeof *fx->st, (void **)&fx->st, &err), GT_OK);
    assert_int_equal(
        fx->b->ops->alloc(fx->b, 2 * (size_t)N * sizeof(int32_t), (void **)&fx->tokens, &err),
        GT_OK);
    fx->targets = fx->tokens + N;
    uint32_t x = 12345; /* fixed LCG: the same batch every run */
    for (int i = 0; i < 2 * N; i++) {
        x = x * 1664525u + 1013904223u;
        fx->tokens[i] = (int32_t)((x >> 16) % (uint32_t)cfg->model.vocab_size);
    }
    float *host = malloc(fx->info->n_params * sizeof(float));
    assert_non_null(host);
    assert_int_equal(gt_model_init_params(fx->m, cfg->rng.seed, host, &err), GT_OK);
    fx->b->ops->from_float(fx->b, fx->s, fx->info->params, host, fx->info->n_params);
    free(host);
    fx->st->inject_nan = -1;
    fx->st->nan_step = -1;
}

static inline void tm_fixture_destroy(tm_fixture *fx) {
    gt_model_destroy(fx->m);
    fx->b->ops->free(fx->b, fx->st);
    fx->b->ops->free(fx->b, fx->tokens);
    fx->b->ops->stream_destroy(fx->b, fx->s);
    gt_backend_destroy(fx->b);
}

/* Zeroes the per-step values and the gradients, as a trainer does at the start of a step. */
static inline void tm_begin_step(tm_fixture *fx, int64_t step) {
    fx->st->step = step;
    fx->st->loss = 0;
    fx->st->aux_loss = 0;
    fx->st->micro = 0;
    fx->b->ops->memset0(fx->b, fx->s, fx->info->grads, fx->info->n_params * sizeof(float));
}

static inline void tm_check(tm_fixture *fx) {
    gt_error err = {0};
    int rc = fx->b->ops->stream_sync(fx->b, fx->s, &err);
    if (rc) fprintf(stderr, "backend error: %s\n", err.msg);
    assert_int_equal(rc, GT_OK);
}

/* One micro-batch of training; returns the objective whose gradient lands in grads: the
 * mean cross-entropy plus the (coefficient-weighted) MoE aux loss. */
static inline double tm_train_loss(tm_fixture *fx, int64_t step, const gt_unit_exec *exec) {
    tm_begin_step(fx, step);
    gt_model_forward_backward(fx->m, fx->s, fx->tokens, fx->targets, 1.0f, 1, fx->st, exec);
    tm_check(fx);
    return (double)fx->st->loss + (double)fx->st->aux_loss;
}

/* Routing of every MoE layer (top-k choices and rows, hence drops), to tell a smooth change
 * of the loss from a jump: a perturbation that re-routes a token is not a derivative. */
static inline size_t tm_routing(const tm_fixture *fx, int32_t *out) {
    const gt_model *m = fx->m;
    size_t n = 0, nk = (size_t)m->dm.N * (size_t)m->dm.k;
    for (int l = 0; l < m->num_layers; l++) {
        if (!m->layers[l].has_moe) continue;
        if (out) memcpy(out + n, m->layers[l].moe.topk_idx, nk * sizeof(int32_t));
        n += nk;
        if (out) memcpy(out + n, m->layers[l].moe.token_slot, nk * sizeof(int32_t));
        n += nk;
    }
    return n;
}

static inline int tm_same_routing(const tm_fixture *fx, const int32_t *base, int32_t *tmp,
                                  size_t n) {
    tm_routing(fx, tmp);
    return n == 0 || memcmp(base, tmp, n * sizeof(int32_t)) == 0;
}

/* Central differences for a sample of elements of every parameter tensor, compared with the
 * backward pass. eps and the tolerances suit fp32 forward passes of a loss near 3.5.
 * Samples whose perturbation changes the MoE routing are skipped (and counted). */
#define TM_FD_EPS 1e-2
#define TM_FD_SAMPLES 10

static inline void tm_check_gradients(tm_fixture *fx, int64_t step) {
    size_t n = fx->info->n_params;
    float *grads = malloc(n * sizeof(float));
    assert_non_null(grads);
    tm_train_loss(fx, step, NULL);
    memcpy(grads, fx->info->grads, n * sizeof(float));
    size_t nr = tm_routing(fx, NULL);
    int32_t *route = malloc((nr + 1) * sizeof(int32_t)), *tmp = malloc((nr + 1) * sizeof(int32_t));
    assert_non_null(route);
    assert_non_null(tmp);
    tm_routing(fx, route);
    float *p = fx->info->params; /* fp32 on the CPU backend: perturbed in place */
    int failures = 0, samples = 0, rerouted = 0;
    double worst = 0;
    for (int t = 0; t < gt_model_num_tensors(fx->m); t++) {
        const char *name;
        size_t off;
        int ndim, shape[3];
        gt_model_tensor(fx->m, t, &name, &off, &ndim, shape);
        size_t numel = (size_t)shape[0];
        for (int j = 1; j < ndim; j++)
            numel *= (size_t)shape[j];
        double gmax = 0, fdmax = 0;
        for (size_t i = 0; i < numel; i++)
            gmax = fmax(gmax, fabs(grads[off + i]));
        size_t stride = numel / TM_FD_SAMPLES ? numel / TM_FD_SAMPLES : 1;
        for (size_t i = (size_t)t % stride; i < numel; i += stride) {
            float saved = p[off + i];
            p[off + i] = saved + (float)TM_FD_EPS;
            double lp = tm_train_loss(fx, step, NULL);
            int same = tm_same_routing(fx, route, tmp, nr);
            p[off + i] = saved - (float)TM_FD_EPS;
            double lm = tm_train_loss(fx, step, NULL);
            same &= tm_same_routing(fx, route, tmp, nr);
            p[off + i] = saved;
            samples++;
            if (!same) {
                rerouted++;
                continue;
            }
            double fd = (lp - lm) / (2 * TM_FD_EPS), g = grads[off + i];
            double tol = 1e-4 + 1e-3 * gmax + 1e-2 * fabs(fd);
            double ratio = fabs(fd - g) / tol;
            if (ratio > worst) worst = ratio;
            fdmax = fmax(fdmax, fabs(fd));
            if (ratio > 1) {
                if (failures < 20)
                    fprintf(stderr, "%s[%zu]: backward %.6g, finite differences %.6g\n", name, i, g,
                            fd);
                failures++;
            }
        }
        /* the check means something only if the loss really depends on the tensor */
        if (fdmax < 1e-4) {
            fprintf(stderr, "%s: finite differences are all below 1e-4 (max %.3g)\n", name, fdmax);
            failures++;
        }
    }
    fprintf(stderr, "%d samples, %d skipped (re-routed), worst |backward - fd| / tolerance %.3f\n",
            samples, rerouted, worst);
    free(grads);
    free(route);
    free(tmp);
    assert_int_equal(failures, 0);
    assert_true(rerouted * 5 <= samples); /* most samples must be real checks */
}

#endif
