/* The public configuration functions of include/graphtrain.h (gt_config_create ...), thin
 * wrappers over the key table and the rules for callers that hold an opaque gt_config *. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "config/rules.h"

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

int gt_config_check(const gt_config *cfg, FILE *report, gt_error *err) {
    gt_report *r = malloc(sizeof *r); /* tens of KiB of findings: not on the stack */
    if (!r) return gt_error_set(err, GT_ERR_NOMEM, "gt_config_check: out of host memory");
    int errors = gt_config_validate(cfg, r);
    if (report) gt_report_print(r, report);
    int rc = GT_OK;
    for (int i = 0; errors > 0 && i < r->count; i++) {
        const gt_finding *f = &r->findings[i];
        if (f->severity != GT_SEVERITY_ERROR) continue;
        char keys[256] = "";
        for (int k = 0; k < f->n_keys; k++) {
            size_t used = strlen(keys);
            snprintf(keys + used, sizeof keys - used, "%s%s", k ? ", " : "", f->keys[k]);
        }
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "the configuration breaks %d rule%s; the first, [%s] %s: %s; fix: %s",
                          errors, errors == 1 ? "" : "s", f->rule, keys, f->message, f->fix);
        break;
    }
    if (errors > 0 && rc == GT_OK) /* every error past the findings kept */
        rc = gt_error_set(err, GT_ERR_INVALID, "the configuration breaks %d rules", errors);
    free(r);
    return rc;
}
