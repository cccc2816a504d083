/* Validation: every rule of Bridge/Megatron's CUDA-graph constraints (and graphtrain's own)
 * checked before any GPU work, every violation collected into one report, each naming the
 * keys involved, why, and the fix. Notes say where graphtrain differs from Bridge. */
#ifndef GT_CONFIG_RULES_H
#define GT_CONFIG_RULES_H

#include <stdio.h>

#include "config/config.h"
#include "core/json.h"

#define GT_REPORT_MAX 64      /* findings kept; more are counted in `dropped` */
#define GT_FINDING_KEYS_MAX 6 /* keys named by one finding */
#define GT_FINDING_TEXT_MAX 512

typedef enum { GT_SEVERITY_ERROR, GT_SEVERITY_NOTE } gt_severity;

typedef struct gt_finding {
    gt_severity severity;
    const char *rule;                      /* stable id, e.g. "full_iteration_needs_local" */
    const char *keys[GT_FINDING_KEYS_MAX]; /* dotted key names (static strings); NULL-ended */
    int n_keys;
    char message[GT_FINDING_TEXT_MAX]; /* why */
    char fix[GT_FINDING_TEXT_MAX];     /* what to change */
} gt_finding;

typedef struct gt_report {
    gt_finding findings[GT_REPORT_MAX];
    int count;
    int errors;
    int notes;
    int dropped; /* findings past GT_REPORT_MAX */
} gt_report;

/* Checks every rule; fills report (cleared first) and returns the number of errors. */
int gt_config_validate(const gt_config *cfg, gt_report *report);

/* Has the report a finding for this rule id? (tests use this) */
int gt_report_has(const gt_report *report, const char *rule);

/* Human-readable: "error [rule] keys: why\n  fix: ..." per finding, then a summary line. */
void gt_report_print(const gt_report *report, FILE *out);
/* JSON array of {"severity","rule","keys","message","fix"} (cJSON, freed by the caller with
 * cJSON_Delete); NULL when out of memory. */
cJSON *gt_report_to_json(const gt_report *report);
/* Prints it on one line (no trailing newline): GT_OK, GT_ERR_IO or GT_ERR_NOMEM. */
int gt_report_print_json(const gt_report *report, FILE *out);

#endif
