/* graphtrain public API: a transformer pretraining engine whose steps can be captured as
 * CUDA graphs. Opaque handles; functions named gt_<module>_<verb>; every function that can
 * fail returns GT_OK (0) or an error code and fills a gt_error with the cause and the fix.
 * This header is self-contained (the library's only public include folder is include/):
 *
 *   gt_error err;  gt_config *cfg;
 *   gt_config_create(&cfg, &err);                         // defaults + environment
 *   gt_config_load_recipe(cfg, "recipes/tiny.yaml", &err);
 *   gt_config_apply_override(cfg, "train.train_iters=100", &err);
 *   gt_config_check(cfg, stderr, &err);                   // every violated rule at once
 *   gt_trainer *t;  gt_trainer_create(&t, cfg, &err);
 *   gt_step_stats st;  while (...) gt_trainer_step(t, &st, &err);
 *   gt_trainer_destroy(t);  gt_config_destroy(cfg);
 */
#ifndef GRAPHTRAIN_H
#define GRAPHTRAIN_H

#include <stdint.h>
#include <stdio.h>

#define GT_VERSION "0.1.0"

/* ---- errors ---- */

enum {
    GT_OK = 0,
    GT_ERR_INVALID = 2,     /* bad user input: config, file contents, arguments */
    GT_ERR_IO = 3,          /* a file could not be read or written */
    GT_ERR_NOMEM = 4,       /* host or device memory exhausted */
    GT_ERR_DEVICE = 5,      /* a CUDA / cuBLAS / cuDNN / NCCL call failed */
    GT_ERR_NUMERIC = 6,     /* NaN or Inf detected in loss or gradients */
    GT_ERR_INTERRUPTED = 7, /* the user pressed Ctrl-C */
    GT_ERR_UNSUPPORTED = 8, /* a feature this build or backend does not have */
};

#define GT_ERROR_MSG_MAX 16384 /* room for every bad setting of a recipe, one a line */

typedef struct gt_error {
    int code;
    char msg[GT_ERROR_MSG_MAX];
    int count; /* the problems msg reports: 1 from gt_error_set, more where a loader reports
                * several bad settings at once (a message may list fewer than it counts) */
} gt_error;

/* ---- configuration: the key table of Megatron Bridge's names (README, "Configuration") */

typedef struct gt_config gt_config;

/* Defaults, then the environment's settings (PYTORCH_CUDA_ALLOC_CONF ...). */
int gt_config_create(gt_config **cfg, gt_error *err);
/* Accepts NULL. */
void gt_config_destroy(gt_config *cfg);
/* A YAML recipe (Bridge's nesting: model:, train:, optimizer: ...) over the current values. */
int gt_config_load_recipe(gt_config *cfg, const char *path, gt_error *err);
/* One `key=value` override ("model.cuda_graph_impl=local"). */
int gt_config_apply_override(gt_config *cfg, const char *key_eq_value, gt_error *err);
/* Checks every rule before any device work. GT_OK when none is violated (notes may still be
 * printed); else GT_ERR_INVALID with the number of errors and the first in err. report, when
 * not NULL, gets every finding with the keys involved and the fix. */
int gt_config_check(const gt_config *cfg, FILE *report, gt_error *err);

/* ---- training ---- */

typedef struct gt_trainer gt_trainer;

/* How a step ran (model.cuda_graph_impl / cuda_graph_scope; the graph runner sets it). */
typedef enum {
    GT_STEP_EAGER,    /* every kernel launched from the host */
    GT_STEP_CAPTURED, /* this run captured graphs (and ran them) */
    GT_STEP_REPLAYED, /* this run replayed graphs */
} gt_step_mode;

typedef struct gt_step_stats {
    int64_t step; /* step number just completed (1-based) */
    float loss, lr, grad_norm, aux_loss;
    int skipped;        /* update skipped (NaN) */
    uint32_t nan_flags; /* which NaN check fired: 1 loss, 2 gradient norm, 4 an fp8 amax/scale */
    double ms;          /* wall time of the step, host view, including the final sync */
    double tokens_per_s;
    gt_step_mode mode;
} gt_step_stats;

/* Builds everything from a checked config: backend (runtime.device), memory, initial weights
 * (or the checkpoint of checkpoint.load), data source, graph runner. */
int gt_trainer_create(gt_trainer **t, const gt_config *cfg, gt_error *err);
/* Destroys every graph, buffer, stream and the backend. Accepts NULL. */
void gt_trainer_destroy(gt_trainer *t);
/* Runs one training step (eager, captured or replayed as the graph policy says). Returns
 * GT_ERR_NUMERIC naming the step and the check when a NaN check fires (that step's update
 * was skipped). */
int gt_trainer_step(gt_trainer *t, gt_step_stats *stats, gt_error *err);
/* Evaluation loss over train.eval_iters batches of the held-out split (train.eval_interval
 * and train.eval_iters > 0). */
int gt_trainer_eval(gt_trainer *t, float *loss, gt_error *err);
/* A checkpoint of the current state into dir (written whole or not at all). */
int gt_trainer_save(gt_trainer *t, const char *dir, gt_error *err);
/* Optimizer steps completed (a resumed run counts those of its checkpoint). */
int64_t gt_trainer_step_count(const gt_trainer *t);

#endif
