/* Validation: every rule of Bridge/Megatron's CUDA-graph constraints (and graphtrain's own)
 * checked before any GPU work, every violation collected into one report, each naming the
 * keys involved, why, and the fix. Notes say where graphtrain differs from Bridge. */
#ifndef GT_CONFIG_RULES_H
#define GT_CONFIG_RULES_H

#include <stdarg.h>
#include <stdbool.h>
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
    bool unsupported; /* an error only because graphtrain cannot run this setting yet */
} gt_finding;

typedef struct gt_report {
    gt_finding findings[GT_REPORT_MAX];
    int count;
    int errors;
    int notes;
    int unsupported; /* errors that are "not supported yet" refusals (config/unsupported.c) */
    int dropped;     /* findings past GT_REPORT_MAX */
} gt_report;

/* A NULL-terminated key list for gt_report_add. */
#define GT_KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Adds one finding (counted even when the report is full); returns it, or NULL when it was
 * counted in `dropped`. keys are static strings, NULL-terminated. */
gt_finding *gt_report_add(gt_report *r, gt_severity sev, const char *rule, const char *const *keys,
                          const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The rule groups gt_config_validate runs (each adds to r, none clears it). */
/* Megatron's parallelism, batch and recompute arithmetic (config/rules_megatron.c). */
void gt_check_megatron_rules(const gt_config *cfg, gt_report *r);
/* Valid settings graphtrain cannot run yet, from one table (config/unsupported.c). */
void gt_check_unsupported(const gt_config *cfg, gt_report *r);
/* The fp8 keys against model.compute_dtype (config/rules_fp8.c) */
void gt_check_fp8_rules(const gt_config *cfg, gt_report *r);

/* Checks every rule; fills report (cleared first) and returns the number of errors. */
int gt_config_validate(const gt_config *cfg, gt_report *report);

/* gt_report_add with a va_list */
gt_finding *gt_report_addv(gt_report *r, gt_severity sev, const char *rule, const char *const *keys,
                           const char *fix, const char *fmt, va_list ap);

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
