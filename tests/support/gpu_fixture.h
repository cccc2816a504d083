/* Helpers for the GPU tests: a CPU and a CUDA backend side by side, random inputs rounded to
 * bf16 so both backends see identical values, uploads/downloads through to_float/from_float,
 * a planning helper and the relative L2 error used as the per-precision tolerance. */
#ifndef GT_TESTS_GPU_GPU_TESTUTIL_H
#define GT_TESTS_GPU_GPU_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/cuda_keys.h"
#include "config/keys.h"
#include "core/bf16.h"
#include "testlib.h"

#define TOL_BF16 1e-2 /* relative L2 error of bf16 outputs */
#define TOL_F32 1e-4  /* fp32 outputs computed from identical inputs */
#define GPU_MAX_PTRS 512

typedef struct gpu_env {
    gt_backend *cpu, *gpu;
    gt_stream *cs, *gs;
    void *gptr[GPU_MAX_PTRS];
    int ng;
    void *cptr[GPU_MAX_PTRS];
    int nc;
    uint64_t rng;
} gpu_env;

/* x rounded to the nearest bf16 (ties to even), as fp32 */
static inline float bf16_round(float x) {
    return gt_bf16_to_float(gt_bf16_from_float(x));
}

static inline uint64_t env_next(gpu_env *e) {
    e->rng ^= e->rng << 13;
    e->rng ^= e->rng >> 7;
    e->rng ^= e->rng << 17;
    return e->rng;
}

static inline float env_uniform(gpu_env *e) {
    return (float)((env_next(e) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Host array of n values uniform in [-scale, scale], rounded to bf16; freed with free(). */
static inline float *rand_vec(gpu_env *e, size_t n, float scale) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_round(env_uniform(e) * scale);
    return h;
}

static inline int env_open(gpu_env **out) {
    gt_error err = {0};
    gpu_env *e = calloc(1, sizeof *e);
    e->rng = 0x9E3779B97F4A7C15ull;
    if (gt_backend_create_cpu(&e->cpu, &err) != GT_OK) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        free(e);
        return -1;
    }
    /* the kernel choices of a default configuration, with the GT_CUDA_* aliases (how the
     * GPU scripts run these tests with other kernels, e.g. GT_CUDA_MOE=reference) */
    gt_config cfg;
    gt_cuda_config opts;
    gt_config_defaults(&cfg);
    gt_config_read_env(&cfg);
    if (gt_config_cuda_settings(&cfg, &opts, &err) != GT_OK ||
        gt_backend_create_cuda(&e->gpu, 0, &opts, &err) != GT_OK) {
        fprintf(stderr, "cuda backend: %s\n", err.msg);
        gt_backend_destroy(e->cpu);
        free(e);
        return -1;
    }
    if (e->cpu->ops->stream_create(e->cpu, &e->cs, &err) ||
        e->gpu->ops->stream_create(e->gpu, &e->gs, &err)) {
        fprintf(stderr, "stream: %s\n", err.msg);
        return -1;
    }
    *out = e;
    return 0;
}

static inline void env_free_all(gpu_env *e) {
    e->gpu->ops->stream_sync(e->gpu, e->gs, NULL);
    for (int i = 0; i < e->ng; i++)
        e->gpu->ops->free(e->gpu, e->gptr[i]);
    for (int i = 0; i < e->nc; i++)
        e->cpu->ops->free(e->cpu, e->cptr[i]);
    e->ng = e->nc = 0;
}

static inline int env_close(gpu_env *e) {
    if (!e) return 0;
    env_free_all(e);
    e->cpu->ops->stream_destroy(e->cpu, e->cs);
    e->gpu->ops->stream_destroy(e->gpu, e->gs);
    gt_backend_destroy(e->cpu);
    gt_backend_destroy(e->gpu);
    free(e);
    return 0;
}

static inline void *g_alloc(gpu_env *e, size_t bytes) {
    gt_error err = {0};
    void *p = NULL;
    if (e->gpu->ops->alloc(e->gpu, bytes ? bytes : 1, &p, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_true(e->ng < GPU_MAX_PTRS);
    e->gptr[e->ng++] = p;
    e->gpu->ops->memset0(e->gpu, e->gs, p, bytes);
    return p;
}

static inline void *c_alloc(gpu_env *e, size_t bytes) {
    gt_error err = {0};
    void *p = NULL;
    if (e->cpu->ops->alloc(e->cpu, bytes ? bytes : 1, &p, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_true(e->nc < GPU_MAX_PTRS);
    e->cptr[e->nc++] = p;
    return p;
}

static inline void g_sync(gpu_env *e) {
    gt_error err = {0};
    if (e->gpu->ops->stream_sync(e->gpu, e->gs, &err) != GT_OK) fail_msg("gpu: %s", err.msg);
    if (gt_backend_check(e->cpu, &err) != GT_OK) fail_msg("cpu: %s", err.msg);
}

/* fp32 device buffer holding h (zeros when h is NULL) */
static inline float *g_f32(gpu_env *e, const float *h, size_t n) {
    float *d = g_alloc(e, n * sizeof(float));
    if (h) e->gpu->ops->memcpy_h2d(e->gpu, e->gs, d, h, n * sizeof(float));
    g_sync(e);
    return d;
}
static inline int32_t *g_i32(gpu_env *e, const int32_t *h, size_t n) {
    int32_t *d = g_alloc(e, n * sizeof(int32_t));
    if (h) e->gpu->ops->memcpy_h2d(e->gpu, e->gs, d, h, n * sizeof(int32_t));
    g_sync(e);
    return d;
}
/* bf16 act buffer holding h */
static inline void *g_act(gpu_env *e, const float *h, size_t n) {
    void *d = g_alloc(e, n * e->gpu->act_bytes);
    if (h) {
        float *tmp = g_f32(e, h, n);
        e->gpu->ops->from_float(e->gpu, e->gs, d, tmp, n);
        g_sync(e);
    }
    return d;
}
static inline void g_read_f32(gpu_env *e, float *h, const float *d, size_t n) {
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, h, d, n * sizeof(float));
    g_sync(e);
}
static inline void g_read_i32(gpu_env *e, int32_t *h, const int32_t *d, size_t n) {
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, h, d, n * sizeof(int32_t));
    g_sync(e);
}
static inline void g_read_act(gpu_env *e, float *h, const void *d, size_t n) {
    float *tmp = NULL;
    gt_error err = {0};
    if (e->gpu->ops->alloc(e->gpu, n * sizeof(float) + 4, (void **)&tmp, &err))
        fail_msg("%s", err.msg);
    e->gpu->ops->to_float(e->gpu, e->gs, tmp, d, n);
    g_read_f32(e, h, tmp, n);
    e->gpu->ops->free(e->gpu, tmp);
}
/* CPU buffers (fp32 everywhere on the reference backend) */
static inline float *c_f32(gpu_env *e, const float *h, size_t n) {
    float *d = c_alloc(e, n * sizeof(float));
    if (h) memcpy(d, h, n * sizeof(float));
    return d;
}
static inline int32_t *c_i32(gpu_env *e, const int32_t *h, size_t n) {
    int32_t *d = c_alloc(e, n * sizeof(int32_t));
    if (h) memcpy(d, h, n * sizeof(int32_t));
    return d;
}

static inline double rel_l2(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Asserts got (downloaded from the GPU) matches the CPU result within tol; prints the error. */
#define EXPECT_CLOSE(what, got, want, n, tol)                                                      \
    do {                                                                                           \
        double err_ = rel_l2((got), (want), (n));                                                  \
        printf("    %-40s rel L2 error %.3e (tol %.0e)\n", (what), err_, (double)(tol));           \
        if (!(err_ <= (tol)))                                                                      \
            fail_msg("%s: relative L2 error %.3e > %.1e", (what), err_, (double)(tol));            \
    } while (0)

/* Runs `call` once while planning (records shapes, computes nothing), then plan_finish. */
#define GPU_PLAN(e, call)                                                                          \
    do {                                                                                           \
        gt_error perr_ = {0};                                                                      \
        (e)->gpu->planning = 1;                                                                    \
        call;                                                                                      \
        if ((e)->gpu->ops->plan_finish((e)->gpu, &perr_) != GT_OK)                                 \
            fail_msg("plan_finish: %s", perr_.msg);                                                \
    } while (0)

/* Skips a test whose CPU reference op is not there yet. */
#define NEED_CPU(e, op)                                                                            \
    do {                                                                                           \
        if (!(e)->cpu->ops->op) {                                                                  \
            printf("    cpu reference has no " #op " yet: skipped\n");                             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Step states on both backends, initialized from `init`. */
static inline void make_states(gpu_env *e, const gt_step_state *init, gt_step_state **c,
                               gt_step_state **g) {
    *c = c_alloc(e, sizeof **c);
    memcpy(*c, init, sizeof **c);
    *g = g_alloc(e, sizeof **g);
    e->gpu->ops->memcpy_h2d(e->gpu, e->gs, *g, init, sizeof **g);
    g_sync(e);
}
static inline void read_state(gpu_env *e, gt_step_state *h, const gt_step_state *g) {
    e->gpu->ops->memcpy_d2h(e->gpu, e->gs, h, g, sizeof *h);
    g_sync(e);
}

static inline gt_step_state default_state(void) {
    gt_step_state s;
    memset(&s, 0, sizeof s);
    s.step = 3;
    s.lr = 1e-3f;
    s.clip_coef = 1.0f;
    s.nan_step = -1;
    s.inject_nan = -1;
    s.micro = 1;
    return s;
}

/* cmocka hooks shared by the GPU test binaries: one gpu_env per group (the state), and a
 * per-test teardown that frees the buffers a test allocated through it. */
static inline int gpu_group_setup(void **state) {
    gpu_env *e = NULL;
    if (env_open(&e)) return -1;
    *state = e;
    return 0;
}
static inline int gpu_group_teardown(void **state) {
    return env_close(*state);
}
static inline int gpu_free_bufs(void **state) {
    env_free_all(*state);
    return 0;
}

#endif
