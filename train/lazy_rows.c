/* Lazy embedding rows (lazy_rows.h): the decision at the first step and the calls into the
 * backend's lazy-row ops, so the trainer's step and its readers of the optimizer state only
 * say when, never how. */
#include "train/lazy_rows.h"

#include <stdio.h>

void gt_lazy_rows_init(gt_lazy_rows *lr, gt_lazy_rows_setting setting, gt_backend *b, gt_stream *s,
                       gt_model *m, gt_step_state *st) {
    *lr = (gt_lazy_rows){setting, GT_LAZY_ROWS_UNDECIDED, 0, b, s, m, st};
}

void gt_lazy_rows_start(gt_lazy_rows *lr, int grad_hook, gt_adamw_state os) {
    if (lr->state != GT_LAZY_ROWS_UNDECIDED) return;
    if (grad_hook) {
        lr->state = GT_LAZY_ROWS_HOOK_OFF;
        if (lr->setting == GT_LAZY_ROWS_AUTO)
            fprintf(stderr, "graphtrain: note: lazy embedding rows are off: gradients are reduced "
                            "over ranks (a hook or data parallelism), so the rows other ranks "
                            "touched are unknown here and "
                            "AdamW updates every row (optimizer.lazy_embedding_rows=auto; README, "
                            "\"Optimizer\")\n");
        return;
    }
    /* only the model writes the gradients, all zero until now: it may keep the row marks */
    gt_model_track_embedding_rows(lr->m);
    if (!gt_model_grad_rows(lr->m).lag)
        lr->state = GT_LAZY_ROWS_NO_MARKS;
    else if (lr->setting == GT_LAZY_ROWS_OFF)
        lr->state = GT_LAZY_ROWS_SET_OFF;
    else
        lr->state = GT_LAZY_ROWS_ON;
    gt_lazy_rows_flush(lr, os, 0); /* every row is current now: lag = this step */
}

gt_grad_rows gt_lazy_rows_marks(const gt_lazy_rows *lr) {
    gt_grad_rows rows = gt_model_grad_rows(lr->m);
    if (lr->state != GT_LAZY_ROWS_ON) rows.lag = NULL; /* AdamW over every row */
    return rows;
}

void gt_lazy_rows_catchup(const gt_lazy_rows *lr, gt_stream *s, gt_adamw_state os,
                          const int32_t *batch, int n_micro, int n) {
    gt_grad_rows rows = gt_lazy_rows_marks(lr);
    for (int i = 0; rows.lag && i < n_micro; i++)
        lr->b->ops->lazy_catchup(lr->b, s, lr->st, os, rows, batch + (size_t)i * 2 * (size_t)n, n,
                                 i == 0 ? GT_LAZY_ROWS_SWEEP : 0);
}

void gt_lazy_rows_launched(gt_lazy_rows *lr) {
    lr->current = 0;
}

void gt_lazy_rows_flush(gt_lazy_rows *lr, gt_adamw_state os, int replay) {
    gt_grad_rows rows = gt_lazy_rows_marks(lr);
    /* no step launched since the last flush: every row is current already (a checkpoint reads
     * the moments and then the master; one flush serves both) */
    if (!rows.lag || (replay && lr->current)) return;
    lr->b->ops->lazy_flush(lr->b, lr->s, lr->st, os, rows, replay);
    lr->current = 1;
}

const char *gt_lazy_rows_describe(const gt_lazy_rows *lr) {
    switch (lr->state) {
    case GT_LAZY_ROWS_ON:
        return "on";
    case GT_LAZY_ROWS_SET_OFF:
        return "off: optimizer.lazy_embedding_rows=off";
    case GT_LAZY_ROWS_HOOK_OFF:
        return "off: a gradient-reduction hook is set";
    case GT_LAZY_ROWS_NO_MARKS:
        return "off: the model keeps no embedding row marks";
    case GT_LAZY_ROWS_UNDECIDED:
        break;
    }
    return "undecided: decided at the first step";
}
