/* libFuzzer target: any bytes as a YAML recipe. Loading may fail, but never crash, leak or
 * hang; whatever loads must validate and print. Seed corpus: tests/fuzz/corpus/yaml. */
#include <stdint.h>
#include <stdio.h>

#include "config/keys.h"
#include "config/rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gt_config cfg;
    gt_config_defaults(&cfg);
    gt_error err = {0};
    gt_config_load_yaml_string(&cfg, (const char *)data, size, "fuzz.yaml", &err);
    gt_config_finalize(&cfg);
    gt_report report;
    gt_config_validate(&cfg, &report);
    FILE *sink = fopen("/dev/null", "w");
    if (sink) {
        gt_config_print(&cfg, sink);
        gt_config_print_json(&cfg, sink);
        gt_report_print(&report, sink);
        gt_report_print_json(&report, sink);
        fputs(err.msg, sink);
        fclose(sink);
    }
    return 0;
}
