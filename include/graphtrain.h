/* graphtrain public API: a transformer pretraining engine whose steps can be captured as
 * CUDA graphs. Opaque handles; functions named gt_<module>_<verb>; every function that can
 * fail returns GT_OK (0) or an error code and fills a gt_error with the cause and the fix.
 *
 *   gt_config *cfg;  gt_config_create(&cfg, &err);     // defaults + environment
 *   gt_config_load_recipe(cfg, "recipes/tiny.yaml", &err);
 *   gt_config_apply_override(cfg, "train.train_iters=100", &err);
 *   gt_config_validate(cfg, &report);                   // every violated rule at once
 *   gt_trainer *t;   gt_trainer_create(&t, cfg, &err);
 *   while (...) gt_trainer_step(t, &stats, &err);
 *   gt_trainer_destroy(t);  gt_config_destroy(cfg);
 */
#ifndef GRAPHTRAIN_H
#define GRAPHTRAIN_H

#include "core/error.h"

#define GT_VERSION "0.1.0"

typedef struct gt_config gt_config;
typedef struct gt_trainer gt_trainer;

#endif
