/* One guarded capture (see capture.h). The runner calls this for full-iteration graphs,
 * unit graphs and debug.capture_check alike, so every capture fails the same way. */
#include "graphs/capture.h"
#include "core/clock.h"

#include <string.h>

size_t gt_graph_mem_in_use(gt_backend *b) {
    size_t free_bytes = 0, total = 0, peak = 0;
    b->ops->mem_info(b, &free_bytes, &total, &peak);
    if (total > 0 && total >= free_bytes) return total - free_bytes;
    return peak;
}

/* The capture-breaking mistake on purpose: a host sync of a capturing stream. */
static void force_failure(gt_backend *b, gt_stream *s) {
    gt_error e;
    gt_error_clear(&e);
    int rc = b->ops->stream_sync(b, s, &e);
    /* first error wins: if the backend already recorded the sync as the failure, this is a
     * no-op; a backend that let the sync through still gets a failed capture */
    if (rc != GT_OK)
        gt_backend_fail(b, rc,
                        "stream_sync inside a captured region (forced by the "
                        "capture-failure test hook): %s",
                        e.msg);
    else
        gt_backend_fail(b, GT_ERR_DEVICE,
                        "stream_sync inside a captured region (forced by "
                        "the capture-failure test hook)");
}

int gt_graph_capture(gt_backend *b, gt_stream *s, gt_capture_mode mode, const char *label,
                     int force_fail, gt_capture_body body, void *ctx, gt_capture_result *res,
                     gt_error *err) {
    memset(res, 0, sizeof *res);
    if (b->sticky.code != GT_OK) {
        /* an op already failed before this capture: report that, not a capture failure */
        gt_backend_check(b, err);
        return gt_error_wrap(err, "before capturing %s: ", label);
    }
    res->mem_before = gt_graph_mem_in_use(b);
    double t0 = gt_now_ms();
    int rc = b->ops->begin_capture(b, s, mode, err);
    if (rc != GT_OK) return gt_error_wrap(err, "capturing %s: begin_capture failed: ", label);

    body(ctx, s);
    if (force_fail) force_failure(b, s);

    double t1 = gt_now_ms();
    gt_graph *g = NULL;
    gt_graph_info info = {0, 0, 0, 0};
    gt_error end_err;
    gt_error_clear(&end_err);
    rc = b->ops->end_capture(b, s, &g, &info, &end_err);
    /* an op error raised while recording: the backend's end_capture may or may not have
     * seen it; either way the graph is not trustworthy */
    gt_error op_err;
    gt_error_clear(&op_err);
    int op_rc = gt_backend_check(b, &op_err);
    if (rc == GT_OK && op_rc != GT_OK) {
        b->ops->graph_destroy(b, g);
        g = NULL;
    }
    if (rc != GT_OK || op_rc != GT_OK) {
        int code = op_rc != GT_OK ? op_rc : rc;
        if (op_rc != GT_OK && rc != GT_OK)
            return gt_error_set(err, code, "capturing %s failed: %s (end_capture: %s)", label,
                                op_err.msg, end_err.msg);
        return gt_error_set(err, code, "capturing %s failed: %s", label,
                            op_rc != GT_OK ? op_err.msg : end_err.msg);
    }
    res->graph = g;
    res->nodes = info.nodes;
    res->instantiate_ms = info.instantiate_ms;
    res->capture_ms = info.capture_ms > 0 ? info.capture_ms : t1 - t0;
    res->mem_after = gt_graph_mem_in_use(b);
    return GT_OK;
}
