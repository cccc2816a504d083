/* libFuzzer target: the command line. Each input line is one argument (key=value overrides,
 * harness flags, junk) given to gt_cli_load_config; file-reading flags are dropped so the
 * fuzzer cannot point them at a pipe. Seed corpus: tests/fuzz/corpus/override. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "config/keys.h"
#include "config/rules.h"

#define FUZZ_MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int reads_files(const char *a) {
    return !strncmp(a, "--recipe", 8) || !strncmp(a, "--config", 8) || !strcmp(a, "-mr") ||
           !strncmp(a, "--model_recipe_name", 19);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[FUZZ_MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "validate";
    char *save = NULL;
    gt_config one; /* every line through the single-override path too */
    gt_config_defaults(&one);
    for (char *line = strtok_r(text, "\n", &save); line && argc < FUZZ_MAX_ARGS;
         line = strtok_r(NULL, "\n", &save)) {
        if (reads_files(line)) continue;
        argv[argc++] = line;
        gt_error e1 = {0};
        gt_config_override(&one, line, &e1);
        (void)gt_config_suggest_key(line);
    }
    argv[argc] = NULL;
    gt_config cfg;
    gt_error err = {0};
    char *rest[FUZZ_MAX_ARGS + 1];
    int n_rest = 0;
    int checkable = 0;
    int rc = gt_cli_load_config(argc, argv, &cfg, &n_rest, rest, &checkable, &err);
    if (checkable) { /* loaded, or only overrides were bad: the rules run either way */
        gt_report report;
        gt_config_validate(&cfg, &report);
        FILE *sink = fopen("/dev/null", "w");
        if (sink) {
            gt_config_print_json(&cfg, sink);
            gt_report_print(&report, sink);
            if (rc != GT_OK) gt_cli_report_other_errors(&cfg, sink);
            fclose(sink);
        }
    }
    free(text);
    return 0;
}
