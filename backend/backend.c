/* Backend-independent parts of the op interface: the sticky error, the check of gradient row
 * marks, and destruction. */
#include "backend/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"

static void release_arena(void *owner, void *base) {
    gt_backend *b = owner;
    b->ops->free(b, base);
}

int gt_backend_alloc_arena(gt_backend *b, gt_arena *a, gt_error *err) {
    if (a->bytes == 0) return GT_OK;
    void *base = NULL;
    int rc = b->ops->alloc(b, a->bytes, &base, err);
    if (rc)
        return gt_error_wrap(err, "allocating arena '%s' (%.1f MiB): ", a->name,
                             (double)a->bytes / (1024.0 * 1024.0));
    gt_arena_bind(a, base, release_arena, b);
    return GT_OK;
}

void gt_backend_fail(gt_backend *b, int code, const char *fmt, ...) {
    if (!b || b->sticky.code != GT_OK) return;
    b->sticky.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->sticky.msg, sizeof b->sticky.msg, fmt, ap);
    va_end(ap);
}

int gt_grad_rows_check(gt_backend *b, const char *op, const gt_grad_rows *rows, size_t n) {
    if (gt_grad_rows_fit(rows, n)) return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: %zu rows of %d from element %zu reach past the %zu gradients; pass rows "
                    "inside the gradient array",
                    op, rows->rows, rows->d, rows->offset, n);
    return 0;
}

int gt_lr_schedule_check(gt_backend *b, const char *op, const gt_lr_schedule *sc) {
    int wsd = sc->style == GT_LR_WSD;
    if (sc->warmup_iters >= 0 && sc->decay_iters >= 0 && sc->style >= GT_LR_CONSTANT &&
        sc->style <= GT_LR_WSD &&
        (!wsd || (sc->wsd_decay_iters > 0 && sc->wsd_style >= GT_WSD_EXPONENTIAL &&
                  sc->wsd_style <= GT_WSD_MINUS_SQRT)))
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad learning-rate schedule (warmup %d, decay %d, style %d, WSD "
                    "annealing %d in style %d); iterations must be >= 0, the style constant, "
                    "linear, cosine, inverse-square-root or WSD, and WSD needs annealing steps "
                    "> 0 in a known style",
                    op, (int)sc->warmup_iters, (int)sc->decay_iters, (int)sc->style,
                    (int)sc->wsd_decay_iters, (int)sc->wsd_style);
    return 0;
}

int gt_adamw_check(gt_backend *b, const char *op, const gt_step_state *st, size_t n, size_t n_decay,
                   const gt_adamw_params *hp) {
    if (st && n_decay <= n && hp->beta1 >= 0 && hp->beta1 < 1 && hp->beta2 >= 0 && hp->beta2 < 1 &&
        hp->eps > 0 && hp->weight_decay >= 0)
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad arguments (%sn=%zu n_decay=%zu beta1=%g beta2=%g eps=%g "
                    "weight_decay=%g); pass a step state and n_decay <= n; betas must be in "
                    "[0,1), eps > 0, weight_decay >= 0",
                    op, st ? "" : "no step state, ", n, n_decay, (double)hp->beta1,
                    (double)hp->beta2, (double)hp->eps, (double)hp->weight_decay);
    return 0;
}

int gt_lazy_rows_check(gt_backend *b, const char *op, const gt_step_state *st,
                       const gt_adamw_state *os, const gt_grad_rows *rows, int catchup,
                       const int32_t *tokens, int n, int sweep) {
    if (sweep < 0) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: sweep period %d; pass 0 (no sweep) or the steps over which every "
                        "row is caught up once (1 or more)",
                        op, sweep);
        return 0;
    }
    if (!gt_adamw_check(b, op, st, os->n, os->n_decay, &os->hp)) return 0; /* st checked there */
    if (os->params && os->master && os->m && os->v && n >= 0 && !(catchup && n > 0 && !tokens) &&
        rows->d > 0 && rows->rows <= 0x7fffffffu && gt_grad_rows_fit(rows, os->n))
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad arguments (step state, optimizer arrays, %d tokens, rows %zu x %d at "
                    "%zu of %zu parameters); pass the optimizer's arrays and rows of at most "
                    "2^31 inside them",
                    op, n, rows->rows, rows->d, rows->offset, os->n);
    return 0;
}

int gt_backend_check(gt_backend *b, gt_error *err) {
    if (!b || b->sticky.code == GT_OK) return GT_OK;
    int code = gt_error_set(err, b->sticky.code, "%s", b->sticky.msg);
    gt_error_clear(&b->sticky);
    return code;
}

void gt_backend_destroy(gt_backend *b) {
    if (b && b->ops && b->ops->destroy) b->ops->destroy(b);
}

#ifndef GT_HAVE_CUDA
int gt_backend_create_cuda(gt_backend **b, int device, const gt_cuda_config *opts, gt_error *err) {
    (void)device;
    (void)opts;
    *b = NULL;
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "this graphtrain was built without CUDA (nvcc was not found at build "
                        "time); rebuild on a machine with the CUDA toolkit or set "
                        "runtime.device=cpu");
}
#endif
