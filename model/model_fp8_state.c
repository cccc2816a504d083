/* The fp8 scaling state that outlives a step (delayed scaling's scales and amax history), as
 * the trainer's checkpoints and the data-parallel amax reduction reach it. */
#include "model/model_internal.h"

int gt_model_fp8_delayed_state(const gt_model *m, gt_fp8_meta **meta, float **history, int *n_meta,
                               int *history_len) {
    const gt_model_fp8 *f = &m->fp8;
    int on = f->enabled && f->n_meta > 0 && f->scaling == GT_FP8_DELAYED;
    *meta = on ? f->meta : NULL;
    *history = on ? f->history : NULL;
    *n_meta = on ? f->n_meta : 0;
    *history_len = on ? f->history_len : 0;
    return on;
}
