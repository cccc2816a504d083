/* graphtrain validate: resolves a configuration (recipe, --config, harness flags, overrides),
 * prints it and every violated rule at once, then the memory plan and whether it fits the GPU
 * named (-g); exit 0 when valid, 2 when not. --json for machines; --reference prints the key
 * table as the README's Markdown reference. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "config/keys.h"
#include "config/rules.h"
#include "core/json.h"
#include "model/memory_plan.h"

#define VALIDATE_EXIT_INVALID 2
#define VALIDATE_GIB (1024.0 * 1024.0 * 1024.0)
#define VALIDATE_EXIT_IO 1 /* the answer could not be written (stdout closed or full) */

static void usage(FILE *out) {
    fprintf(
        out,
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
        "harness flags: -m -mr (any case) --task -g (h100 h200 b200 gb200 gb300)\n"
        "  -c (bf16 fp8_cs fp8_ds fp8_sc fp8_mx nvfp4) -ng -tp -pp -cp -ep -et -vp -gb -mb -sl\n"
        "  --cuda_graph_impl --cuda_graph_scope a,b,c; -d/--dryrun is refused (use validate)\n");
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

/* After a load error: one line counting what --json counts (the bad settings and the rules'
 * errors together), so the two outputs agree. r is NULL when the rules could not run. */
static void print_total(const gt_report *r, const gt_error *load_error, FILE *out) {
    int load_errors = load_error->count > 0 ? load_error->count : 1;
    int rules = r ? r->errors : 0;
    fprintf(out,
            "%d error%s in all (%d bad setting%s, %d from the rules%s), %d note%s: the "
            "configuration is not valid\n",
            load_errors + rules, load_errors + rules == 1 ? "" : "s", load_errors,
            load_errors == 1 ? "" : "s", rules, r ? "" : ", which could not be checked",
            r ? r->notes : 0, r && r->notes == 1 ? "" : "s");
}

/* ---- memory: the plan against the GPU the configuration names (-g, runtime.gpu) ---- */

/* A plan too large for the named GPU is an error of the configuration, reported with the
 * rules' findings (text and JSON); returns the errors it added. */
static int check_gpu_fit(const gt_config *cfg, const gt_memory_plan *mp, gt_report *r) {
    size_t have = gt_memory_gpu_bytes(cfg->runtime.gpu);
    if (!have || mp->total <= have) return 0;
    gt_report_add(r, GT_SEVERITY_ERROR, "plan_fits_gpu_memory",
                  GT_KEYS("runtime.gpu", "train.micro_batch_size", "model.seq_length",
                          "model.num_layers", "model.hidden_size"),
                  "lower train.micro_batch_size (activations scale with it) or model.seq_length, "
                  "shard the optimizer state over the data-parallel GPUs "
                  "(optimizer.use_distributed_optimizer=true with runtime.num_gpus > 1), "
                  "recompute activations (model.recompute_granularity=selective or full), use "
                  "fewer model.num_layers or a smaller model.hidden_size, or a GPU with more "
                  "memory (-g)",
                  "the memory plan needs %.2f GiB per GPU but one %s has %.0f GiB",
                  (double)mp->total / VALIDATE_GIB, cfg->runtime.gpu, (double)have / VALIDATE_GIB);
    return 1;
}

/* Whether the plan fits the GPU named, per GPU (each holds the whole model and gradients; the
 * optimizer state whole, or its 1/dp shards with the distributed optimizer) */
static void print_gpu_fit(const gt_config *cfg, const gt_memory_plan *mp) {
    const char *gpu = cfg->runtime.gpu;
    size_t have = gt_memory_gpu_bytes(gpu);
    double need = (double)mp->total / VALIDATE_GIB;
    if (mp->opt_shards > 1)
        printf("memory per GPU: %.2f GiB (each of the %d data-parallel GPUs holds the whole "
               "model and gradients and its 1/%d of the optimizer state: "
               "optimizer.use_distributed_optimizer)\n",
               need, mp->opt_shards, mp->opt_shards);
    else
        printf(
            "memory per GPU: %.2f GiB (every GPU of runtime.num_gpus=%d holds the whole plan%s)\n",
            need, cfg->runtime.num_gpus,
            gt_memory_dp_size(cfg) > 1 ? "; optimizer.use_distributed_optimizer=true shards "
                                         "the optimizer state over the data-parallel GPUs"
                                       : "");
    if (!gpu[0])
        printf("fit: no GPU named (-g, runtime.gpu); train checks the plan against the free "
               "memory of the GPU it runs on\n");
    else if (!have)
        printf("fit: the memory of a '%s' is not known (known: h100, h200, b200, gb200, "
               "gb300)\n",
               gpu);
    else if (mp->total <= have)
        printf("fit: fits on one %s (%.0f GiB): %.2f GiB to spare\n", gpu,
               (double)have / VALIDATE_GIB, (double)(have - mp->total) / VALIDATE_GIB);
    else
        printf("fit: does not fit on one %s (%.0f GiB): %.2f GiB short\n", gpu,
               (double)have / VALIDATE_GIB, (double)(mp->total - have) / VALIDATE_GIB);
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
    if (rc != GT_OK && checkable) gt_config_validate(&cfg, &report);
    if (rc != GT_OK) {
        /* every problem at once: the rules' findings on the rest of the configuration too */
        if (json) {
            gt_error werr = {0};
            if (print_json(NULL, checkable ? &report : NULL, &err, &werr))
                fprintf(stderr, "graphtrain validate: %s\n", werr.msg);
        } else {
            fprintf(stderr, "graphtrain validate: %s\n", err.msg);
            if (checkable) gt_cli_report_other_errors(&cfg, stderr);
            print_total(checkable ? &report : NULL, &err, stderr);
        }
        return VALIDATE_EXIT_INVALID;
    }
    int errors = gt_config_validate(&cfg, &report);
    /* the device memory the run will need (bf16 compute on the GPU), when the shape itself is
     * sound enough to plan */
    gt_memory_plan mp;
    gt_error merr = {0};
    int planned = gt_memory_plan_compute(&cfg, 2, &mp, &merr) == GT_OK;
    if (planned) errors += check_gpu_fit(&cfg, &mp, &report);
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
        if (!quiet && planned) {
            printf("\n");
            gt_memory_plan_print(&mp, "cuda", stdout);
            print_gpu_fit(&cfg, &mp);
        }
    }
    return errors ? VALIDATE_EXIT_INVALID : 0;
}
