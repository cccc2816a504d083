/* The public handle functions of include/graphtrain.h's usage sketch (gt_config_create ...),
 * thin wrappers over the key table for callers that hold an opaque gt_config *. */
#include <stdlib.h>

#include "config/keys.h"

int gt_config_create(gt_config **cfg, gt_error *err) {
    *cfg = malloc(sizeof **cfg);
    if (!*cfg) return gt_error_set(err, GT_ERR_NOMEM, "gt_config_create: out of host memory");
    gt_config_defaults(*cfg);
    gt_config_read_env(*cfg);
    return GT_OK;
}

void gt_config_destroy(gt_config *cfg) {
    free(cfg);
}

int gt_config_load_recipe(gt_config *cfg, const char *path, gt_error *err) {
    int rc = gt_config_load_yaml(cfg, path, err);
    if (rc == GT_OK) gt_config_finalize(cfg);
    return rc;
}

int gt_config_apply_override(gt_config *cfg, const char *key_eq_value, gt_error *err) {
    int rc = gt_config_override(cfg, key_eq_value, err);
    if (rc == GT_OK) gt_config_finalize(cfg);
    return rc;
}
