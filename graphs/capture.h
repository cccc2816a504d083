/* One capture, done safely: begin capture, enqueue the body, end capture and instantiate,
 * with every way it can fail (begin refused, an op failing while recorded, a sync inside the
 * captured region, instantiation) turned into one error that names what was being captured,
 * and the guarantee that on failure the stream is no longer capturing and no graph is alive.
 * Internal to graphs/. */
#ifndef GT_GRAPHS_CAPTURE_H
#define GT_GRAPHS_CAPTURE_H

#include <stddef.h>

#include "backend/backend.h"

/* Enqueues the work to capture on stream s. */
typedef void (*gt_capture_body)(void *ctx, gt_stream *s);

typedef struct gt_capture_result {
    gt_graph *graph; /* NULL on failure */
    int nodes;
    double capture_ms; /* host time spent recording (backend figure when it has one) */
    double instantiate_ms;
    size_t mem_before, mem_after; /* device bytes in use (cpu: peak bytes allocated) */
} gt_capture_result;

/* Captures body(ctx, s) into a graph (not launched). label names it in errors ("layer 1
 * attn forward", "full_iteration"). force_fail (test hook) performs a stream sync inside the
 * captured region, the classic mistake that breaks a capture, and makes sure it fails even
 * on a backend that does not detect syncs. */
int gt_graph_capture(gt_backend *b, gt_stream *s, gt_capture_mode mode, const char *label,
                     int force_fail, gt_capture_body body, void *ctx, gt_capture_result *res,
                     gt_error *err);

/* Device bytes in use now: total - free where the backend knows them, else its peak. */
size_t gt_graph_mem_in_use(gt_backend *b);

#endif
