/* The runtime.cuda.* keys: their environment aliases (fill a key left at auto, refused when
 * they disagree with a set key or carry an unknown value) and what validate prints. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/cuda_keys.h"
#include "config/keys.h"
#include "config/rules.h"

/* defaults, the environment, then overrides, then finalize (as the command line does) */
static void load(gt_config *cfg, const char *override) {
    gt_config_defaults(cfg);
    gt_config_read_env(cfg);
    gt_error err = {0};
    if (override && gt_config_override(cfg, override, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_config_finalize(cfg);
}

static void unset_all(void) {
    for (int i = 0; i < GT_CUDA_CHOICES; i++)
        unsetenv(gt_cuda_env_name(i));
}

static void test_environment_alias_fills_a_key_left_at_auto(void **state) {
    (void)state;
    setenv("GT_CUDA_MOE", "reference", 1);
    setenv("GT_CUDA_PDL", "off", 1);
    gt_config cfg;
    load(&cfg, NULL);
    unset_all();
    assert_int_equal(cfg.runtime.cuda.moe_gemm, GT_CUDA_MOE_REFERENCE);
    assert_int_equal(cfg.runtime.cuda.pdl, GT_CUDA_PDL_OFF);
    assert_int_equal(cfg.runtime.cuda.attention, GT_CUDA_ATTN_AUTO);
    gt_report r;
    assert_int_equal(gt_config_validate(&cfg, &r), 0);
}

static void test_environment_alias_that_disagrees_with_a_set_key_is_refused(void **state) {
    (void)state;
    setenv("GT_CUDA_ATTN_BWD", "cudnn", 1);
    gt_config cfg;
    load(&cfg, "runtime.cuda.attention_bwd=wgmma");
    unset_all();
    gt_cuda_config c;
    gt_error err = {0};
    assert_int_equal(gt_config_cuda_settings(&cfg, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "GT_CUDA_ATTN_BWD=cudnn"));
    assert_non_null(strstr(err.msg, "runtime.cuda.attention_bwd=wgmma"));
    gt_report r;
    assert_true(gt_config_validate(&cfg, &r) > 0);
    assert_true(gt_report_has(&r, "cuda_env_conflicts_with_key"));
}

static void test_environment_alias_that_agrees_with_a_set_key_is_accepted(void **state) {
    (void)state;
    setenv("GT_CUDA_GRAPH_MEMSET", "node", 1);
    gt_config cfg;
    load(&cfg, "runtime.cuda.graph_memset=node");
    unset_all();
    gt_cuda_config c;
    gt_error err = {0};
    assert_int_equal(gt_config_cuda_settings(&cfg, &c, &err), GT_OK);
    assert_int_equal(c.graph_memset, GT_CUDA_MEMSET_NODE);
    gt_report r;
    gt_config_validate(&cfg, &r);
    assert_false(gt_report_has(&r, "cuda_env_conflicts_with_key"));
}

static void test_unknown_environment_value_is_refused_naming_the_key(void **state) {
    (void)state;
    setenv("GT_CUDA_ATTN", "simt", 1);
    gt_config cfg;
    load(&cfg, NULL);
    unset_all();
    assert_int_equal(cfg.runtime.cuda.attention, GT_CUDA_ATTN_AUTO); /* not guessed */
    gt_cuda_config c;
    gt_error err = {0};
    assert_int_equal(gt_config_cuda_settings(&cfg, &c, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "runtime.cuda.attention"));
    assert_non_null(strstr(err.msg, "reference")); /* what simt became */
    gt_report r;
    assert_true(gt_config_validate(&cfg, &r) > 0);
    assert_true(gt_report_has(&r, "cuda_env_unknown_value"));
}

static void test_choice_a_gpu_cannot_run_is_a_note_with_device_auto(void **state) {
    (void)state;
    gt_config cfg;
    load(&cfg, "model.num_moe_experts=8");
    gt_error err = {0};
    assert_int_equal(gt_config_override(&cfg, "model.moe_ffn_hidden_size=100", &err), GT_OK);
    gt_report r;
    assert_int_equal(gt_config_validate(&cfg, &r), 0);
    assert_true(gt_report_has(&r, "cuda_moe_gemm_choice"));
}

/* "  key<spaces>= value" in validate's printout */
static int printed(const char *out, const char *key, const char *value) {
    char pat[96];
    snprintf(pat, sizeof pat, "  %s ", key);
    const char *p = strstr(out, pat);
    if (!p) return 0;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    return !strncmp(p, "= ", 2) && !strncmp(p + 2, value, strlen(value)) &&
           p[2 + strlen(value)] == '\n';
}

static void test_validate_prints_the_runtime_cuda_keys(void **state) {
    (void)state;
    char *out = malloc(256 * 1024);
    assert_int_equal(gt_test_run("validate runtime.cuda.moe_gemm=reference", out, 256 * 1024), 0);
    assert_true(printed(out, "runtime.cuda.attention", "auto"));
    assert_true(printed(out, "runtime.cuda.attention_bwd", "auto"));
    assert_true(printed(out, "runtime.cuda.moe_gemm", "reference"));
    assert_true(printed(out, "runtime.cuda.pdl", "auto"));
    assert_true(printed(out, "runtime.cuda.graph_memset", "auto"));
    free(out);
}

static void test_cuda_settings_format_names_every_key(void **state) {
    (void)state;
    gt_config cfg;
    load(&cfg, "runtime.cuda.attention=mma");
    char buf[160];
    gt_config_cuda_format(&cfg.runtime.cuda, buf, sizeof buf);
    assert_string_equal(buf, "attention=mma attention_bwd=auto moe_gemm=auto pdl=auto "
                             "graph_memset=auto");
}

static int setup(void **state) {
    (void)state;
    unset_all();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_environment_alias_fills_a_key_left_at_auto),
        cmocka_unit_test(test_environment_alias_that_disagrees_with_a_set_key_is_refused),
        cmocka_unit_test(test_environment_alias_that_agrees_with_a_set_key_is_accepted),
        cmocka_unit_test(test_unknown_environment_value_is_refused_naming_the_key),
        cmocka_unit_test(test_choice_a_gpu_cannot_run_is_a_note_with_device_auto),
        cmocka_unit_test(test_validate_prints_the_runtime_cuda_keys),
        cmocka_unit_test(test_cuda_settings_format_names_every_key),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
