/* graphtrain validate: resolves a configuration (recipe, --config, harness flags, overrides),
 * prints it and every violated rule at once; exit 0 when valid, 2 when not. --json for
 * machines; --reference prints the key table as the README's Markdown reference. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "config/keys.h"
#include "config/rules.h"
#include "core/json.h"
#include "model/memory_plan.h"

#define VALIDATE_EXIT_INVALID 2
#define VALIDATE_EXIT_IO 1 /* the answer could not be written (stdout closed or full) */

static void usage(FILE *out) {
    fprintf(out,
            "usage: graphtrain validate [--recipe NAME|PATH | --config FILE] [harness flags]\n"
            "                           [key=value ...] [--json] [--quiet]\n"
            "       graphtrain validate --reference\n\n"
            "Resolves the configuration (recipe, then --config, then Bridge harness flags, then\n"
            "key=value overrides), prints it, and prints EVERY violated rule at once, each with\n"
            "the keys involved, why, and the fix. Notes say where graphtrain differs from Bridge\n"
            "or cannot run a valid setting yet. Exit status: 0 valid, 2 invalid (or bad input), 1 "
            "when\n"
            "the answer cannot be written.\n\n"
            "  --json       one JSON object: valid, errors (load_errors, the bad settings,\n"
            "               plus the rules broken), notes, load_error, findings, config\n"
            "  --quiet      findings only, not the resolved configuration\n"
            "  --reference  print the configuration reference (Markdown) and exit\n"
            "harness flags: -m -mr --task -g -c -ng --cuda_graph_impl --cuda_graph_scope a,b,c\n");
}

/* load_error: the configuration could not be fully loaded (its message and the bad settings it
 * counts); r may still hold the findings of the rest of it (gt_cli_load_config's *checkable).
 * Returns GT_OK, or an error when stdout cannot take the document. */
static int print_json(const gt_config *cfg, const gt_report *r, const gt_error *load_error,
                      gt_error *err) {
    int load_errors = load_error ? (load_error->count > 0 ? load_error->count : 1) : 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "valid", r && !r->errors && !load_error);
    cJSON_AddNumberToObject(o, "errors", (r ? r->errors : 0) + load_errors);
    cJSON_AddNumberToObject(o, "load_errors", load_errors);
    cJSON_AddNumberToObject(o, "notes", r ? r->notes : 0);
    if (load_error) cJSON_AddStringToObject(o, "load_error", load_error->msg);
    if (r) cJSON_AddItemToObject(o, "findings", gt_report_to_json(r));
    if (cfg) cJSON_AddItemToObject(o, "config", gt_config_to_json(cfg));
    int rc = gt_json_write(stdout, o, GT_JSON_LINE, "validate --json: stdout", err);
    cJSON_Delete(o);
    return rc;
}

int gt_cmd_validate(int argc, char **argv) {
    int json = 0, quiet = 0;
    char *rest[argc > 0 ? argc : 1];
    int n_rest = 0;
    /* flags of this command first, so --help works even with a broken recipe */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--reference")) {
            gt_config_print_reference(stdout);
            return 0;
        }
    }
    gt_config cfg;
    gt_error err = {0};
    int checkable = 0;
    int rc = gt_cli_load_config(argc, argv, &cfg, &n_rest, rest, &checkable, &err);
    for (int i = 1; i < n_rest; i++) {
        if (!strcmp(rest[i], "--json"))
            json = 1;
        else if (!strcmp(rest[i], "--quiet") || !strcmp(rest[i], "-q"))
            quiet = 1;
        else if (rc == GT_OK) {
            rc = gt_error_set(&err, GT_ERR_INVALID,
                              "unknown argument '%.100s'; settings are key=value, see "
                              "`graphtrain validate --help`",
                              rest[i]);
        }
    }
    gt_report report;
    if (rc != GT_OK) {
        /* every problem at once: the rules' findings on the rest of the configuration too */
        if (json) {
            if (checkable) gt_config_validate(&cfg, &report);
            gt_error werr = {0};
            if (print_json(NULL, checkable ? &report : NULL, &err, &werr))
                fprintf(stderr, "graphtrain validate: %s\n", werr.msg);
        } else {
            fprintf(stderr, "graphtrain validate: %s\n", err.msg);
            if (checkable) gt_cli_report_other_errors(&cfg, stderr);
        }
        return VALIDATE_EXIT_INVALID;
    }
    int errors = gt_config_validate(&cfg, &report);
    if (json) {
        if (print_json(&cfg, &report, NULL, &err)) {
            fprintf(stderr, "graphtrain validate: %s\n", err.msg);
            return VALIDATE_EXIT_IO;
        }
    } else {
        if (!quiet) {
            printf("resolved configuration:\n");
            gt_config_print(&cfg, stdout);
            printf("\n");
        }
        gt_report_print(&report, stdout);
        /* the device memory the run will need (bf16 compute on the GPU), when the shape
         * itself is sound enough to plan */
        gt_memory_plan mp;
        gt_error merr = {0};
        if (!quiet && gt_memory_plan_compute(&cfg, 2, &mp, &merr) == GT_OK) {
            printf("\n");
            gt_memory_plan_print(&mp, "cuda", stdout);
        }
    }
    return errors ? VALIDATE_EXIT_INVALID : 0;
}
