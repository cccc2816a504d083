/* Lazy embedding rows, the one owner of the trainer's side: when the rows are lazy
 * (optimizer.lazy_embedding_rows, the gradient-reduction hook), the marks and lags each
 * step's ops get, the catch-up inside the step, and the flush that brings every row current
 * before anything reads the optimizer state. The kernels are the backend's (backend.h,
 * gt_grad_rows.lag); the marks' memory is the model's (gt_model_grad_rows). */
#ifndef GT_TRAIN_LAZY_ROWS_H
#define GT_TRAIN_LAZY_ROWS_H

#include "backend/backend.h"
#include "config/config.h"
#include "model/model.h"

/* Each step's catch-up also takes the rows of slice step mod GT_LAZY_ROWS_SWEEP
 * (ceil(rows / GT_LAZY_ROWS_SWEEP) rows a slice), so no row waits longer than that many
 * steps: a step's replays stay short and of like lengths. Without it a row could wait until a
 * periodic flush, and the longest replays would set the catch-up's time, which then grows
 * over the run. The replays' total is the same either way: each row's missed steps, once. */
#define GT_LAZY_ROWS_SWEEP 32

typedef enum {
    GT_LAZY_ROWS_UNDECIDED, /* before the first step */
    GT_LAZY_ROWS_ON,        /* rows are lazy */
    GT_LAZY_ROWS_SET_OFF,   /* optimizer.lazy_embedding_rows=off: AdamW over every row */
    GT_LAZY_ROWS_HOOK_OFF,  /* a gradient-reduction hook is set: AdamW over every row */
    GT_LAZY_ROWS_NO_MARKS,  /* the model keeps no row marks (nothing to be lazy over) */
} gt_lazy_rows_state;

typedef struct gt_lazy_rows {
    gt_lazy_rows_setting setting; /* optimizer.lazy_embedding_rows */
    gt_lazy_rows_state state;
    int current; /* no step launched since the last flush: every row is current */
    gt_backend *b;
    gt_stream *s;
    gt_model *m;
    gt_step_state *st; /* the training step state (its step counter says what rows owe) */
} gt_lazy_rows;

void gt_lazy_rows_init(gt_lazy_rows *lr, gt_lazy_rows_setting setting, gt_backend *b, gt_stream *s,
                       gt_model *m, gt_step_state *st);

/* Before the first step, once the gradient-reduction hook is fixed: the model keeps row marks
 * only while it alone writes the gradients (no hook: rows other ranks touched are unknown
 * here), and the rows are lazy only with marks and the setting auto. A hook with the
 * setting auto prints a note saying the rows are not lazy. os: the optimizer state. */
void gt_lazy_rows_start(gt_lazy_rows *lr, int grad_hook, gt_adamw_state os);

/* The marks (and lags, when lazy) that grad_norm, adamw and inject_nan get. */
gt_grad_rows gt_lazy_rows_marks(const gt_lazy_rows *lr);

/* Inside the step, before the forward: the rows micro-batch i's tokens read get the updates
 * they missed, and the first micro-batch's catch-up takes the sweep's slice too. batch is the
 * device batch [n_micro][2][n] (tokens then targets). Nothing when the rows are not lazy. */
void gt_lazy_rows_catchup(const gt_lazy_rows *lr, gt_stream *s, gt_adamw_state os,
                          const int32_t *batch, int n_micro, int n);

/* A step was launched: rows are behind again (even when it fails after launching). */
void gt_lazy_rows_launched(gt_lazy_rows *lr);

/* Brings every row current (replay 1: enqueues the updates they owe, once per launched step)
 * or marks them current (replay 0: for state just written). */
void gt_lazy_rows_flush(gt_lazy_rows *lr, gt_adamw_state os, int replay);

/* "on", or why not ("off: optimizer.lazy_embedding_rows=off", ...). */
const char *gt_lazy_rows_describe(const gt_lazy_rows *lr);

#endif
