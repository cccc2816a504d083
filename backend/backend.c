/* Backend-independent parts of the op interface: the sticky error, the check of gradient row
 * marks, and destruction. */
#include "backend/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

int gt_lazy_rows_check(gt_backend *b, const char *op, const gt_step_state *st,
                       const gt_adamw_state *os, const gt_grad_rows *rows, int catchup,
                       const int32_t *tokens, int n) {
    if (st && os->params && os->master && os->m && os->v && n >= 0 &&
        !(catchup && n > 0 && !tokens) && rows->d > 0 && rows->rows <= 0x7fffffffu &&
        gt_grad_rows_fit(rows, os->n))
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad arguments (step state, optimizer arrays, %d tokens, rows %zu x %d at "
                    "%zu of %zu parameters); pass the optimizer's arrays and rows of at most "
                    "2^31 inside them",
                    op, n, rows->rows, rows->d, rows->offset, os->n);
    return 0;
}

int gt_lazy_sweep_check(gt_backend *b, const gt_step_state *st, const gt_adamw_state *os,
                        const gt_grad_rows *rows, int period) {
    if (period < 1) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "lazy_sweep: period %d; pass 1 or more (the steps over which every row "
                        "is caught up once)",
                        period);
        return 0;
    }
    return gt_lazy_rows_check(b, "lazy_sweep", st, os, rows, 0, NULL, 0);
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
int gt_backend_create_cuda(gt_backend **b, int device, gt_error *err) {
    (void)device;
    *b = NULL;
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "this graphtrain was built without CUDA (nvcc was not found at build "
                        "time); rebuild on a machine with the CUDA toolkit or set "
                        "runtime.device=cpu");
}
#endif
