/* Exports a trainer's fp32 master weights or gradients as a weights exchange file
 * (bench/weights_io.h); kept apart from the format code so that links without a trainer. */
#include <stdlib.h>

#include "bench/weights_io.h"

int gt_weights_export(gt_trainer *t, const char *path, gt_error *err) {
    const gt_model *m = gt_trainer_model(t);
    size_t n = gt_model_get_info(m)->n_params;
    float *host = malloc(n * sizeof *host);
    if (!host)
        return gt_error_set(err, GT_ERR_NOMEM, "weights: out of host memory for %zu values", n);
    int rc = gt_trainer_read_master(t, host, err);
    if (!rc) rc = gt_weights_write_model(path, m, host, err);
    free(host);
    return rc;
}

int gt_weights_export_grads(gt_trainer *t, const char *path, gt_error *err) {
    gt_model *m = gt_trainer_model(t);
    const gt_model_info *mi = gt_model_get_info(m);
    gt_backend *b = gt_trainer_backend(t);
    gt_stream *s = gt_trainer_stream(t);
    float *host = malloc(mi->n_params * sizeof *host);
    if (!host)
        return gt_error_set(err, GT_ERR_NOMEM, "weights: out of host memory for %zu values",
                            mi->n_params);
    b->ops->memcpy_d2h(b, s, host, mi->grads, mi->n_params * sizeof *host);
    int rc = b->ops->stream_sync(b, s, err);
    if (!rc) rc = gt_backend_check(b, err);
    if (!rc) rc = gt_weights_write_model(path, m, host, err);
    free(host);
    return rc;
}
