/* Shared by the CPU op tests (test_cpu_ops.c, test_cpu_moe.c): a CPU backend and stream with
 * a step state, a seeded xorshift generator, and the central-difference gradient check. Each
 * test file defines FD_EPS and FD_FLOOR before including it and sets its own seed. */
#ifndef GT_TESTS_CPU_OP_FIXTURE_H
#define GT_TESTS_CPU_OP_FIXTURE_H

#include "testlib.h"

#include <math.h>
#include <stdlib.h>

#include "backend/backend.h"

typedef struct fixture {
    gt_backend *b;
    gt_stream *s;
    gt_step_state st;
    uint32_t rng;
} fixture;

static inline int fixture_setup(void **state, uint32_t seed) {
    fixture *f = calloc(1, sizeof *f);
    gt_error err = {0};
    if (!f || gt_backend_create_cpu(&f->b, &err) != GT_OK) return -1;
    if (f->b->ops->stream_create(f->b, &f->s, &err) != GT_OK) return -1;
    f->st.nan_step = -1;
    f->st.inject_nan = -1;
    f->rng = seed;
    *state = f;
    return 0;
}

/* check_sticky: fail the group when an op raised an error nobody looked at */
static inline int fixture_teardown(void **state, int check_sticky) {
    fixture *f = *state;
    gt_error err = {0};
    int rc = gt_backend_check(f->b, &err);
    f->b->ops->stream_destroy(f->b, f->s);
    gt_backend_destroy(f->b);
    free(f);
    return check_sticky && rc != GT_OK ? -1 : 0;
}

static inline float urand(uint32_t *s) { /* xorshift32 in [-1, 1) */
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)((*s >> 8) * (1.0 / 8388608.0) - 1.0);
}

static inline float *rand_buf(fixture *f, size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * urand(&f->rng);
    return x;
}

static inline float *zeros(size_t n) {
    return calloc(n, sizeof(float));
}

static inline double dotd(const float *x, const float *y, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * y[i];
    return acc;
}

/* Largest relative error between an analytic gradient and central differences of loss(ctx)
 * with respect to x[0..n); gradients below FD_FLOOR are compared absolutely. */
typedef double (*loss_fn)(void *ctx);

static inline double fd_max_err(loss_fn loss, void *ctx, float *x, size_t n, const float *an,
                                const char *what) {
    double worst = 0;
    size_t wi = 0;
    double wfd = 0;
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + FD_EPS;
        double lp = loss(ctx);
        x[i] = save - FD_EPS;
        double lm = loss(ctx);
        x[i] = save;
        double fd = (lp - lm) / (2.0 * FD_EPS);
        double den = fmax(fmax(fabs(fd), fabs((double)an[i])), FD_FLOOR);
        double e = fabs(fd - an[i]) / den;
        if (e > worst) {
            worst = e;
            wi = i;
            wfd = fd;
        }
    }
    print_message("  %-28s max rel err %.2e (at %zu: fd %.6f analytic %.6f)\n", what, worst, wi,
                  wfd, n ? (double)an[wi] : 0.0);
    return worst;
}

#endif
