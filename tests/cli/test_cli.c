/* The graphtrain binary's front-end: help texts, exit codes of validate (0 valid, 2 not),
 * JSON output, recipes listing, and the README's configuration reference staying in sync. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define OUT_MAX (256 * 1024)

/* group state: one buffer for the binary's output, shared by the tests in turn */
static int setup(void **state) {
    *state = malloc(OUT_MAX);
    if (!*state) return -1;
    char dir[1024];
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", dir, sizeof dir), 1);
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    unsetenv("NCCL_GRAPH_REGISTER");
    return 0;
}

static int teardown(void **state) {
    free(*state);
    return 0;
}

/* Writes yaml to a file named name in a fresh temporary folder (its path into path), then runs
 * graphtrain with cmd_fmt, in which %s stands for that path; returns the exit status. */
static int run_with_yaml(const char *name, const char *yaml, const char *cmd_fmt, char *path,
                         size_t path_n, char *out) {
    char dir[256], args[1200];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, path_n, "%s/%s", dir, name);
    gt_test_write_text(path, yaml);
    snprintf(args, sizeof args, cmd_fmt, path);
    return gt_test_run(args, out, OUT_MAX);
}

static void test_help_lists_every_command(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("--help", out, OUT_MAX), 0);
    const char *cmds[] = {"train",   "bench",        "validate",
                          "recipes", "prepare-data", "config-reference"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        assert_non_null(strstr(out, cmds[i]));
    assert_non_null(strstr(out, "--cuda_graph_scope"));
    assert_int_equal(gt_test_run("", out, OUT_MAX), 2);
}

static void test_unknown_command_exits_2_and_points_to_help(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("frobnicate", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "unknown command 'frobnicate'"));
}

static void test_command_help_exits_0(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("validate --help", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "usage: graphtrain validate"));
    assert_int_equal(gt_test_run("recipes --help", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "usage: graphtrain recipes"));
    assert_int_equal(gt_test_run("config-reference --help", out, OUT_MAX), 0);
    const char *others[] = {"train", "bench", "prepare-data"};
    for (int i = 0; i < 3; i++) {
        char args[64], want[64];
        snprintf(args, sizeof args, "%s --help", others[i]);
        snprintf(want, sizeof want, "usage: graphtrain %s", others[i]);
        assert_int_equal(gt_test_run(args, out, OUT_MAX), 0);
        assert_non_null(strstr(out, want));
    }
}

static void test_validate_valid_recipe_exits_0(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("validate --recipe tiny", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "model.hidden_size"));
    assert_non_null(strstr(out, "configuration is valid"));
    assert_non_null(strstr(out, "note [nan_checks_inside_full_iteration]"));
}

static void test_validate_reports_every_violation_and_exits_2(void **state) {
    char *out = *state;
    int rc = gt_test_run("validate --quiet model.cuda_graph_impl=transformer_engine "
                         "model.cuda_graph_scope=full_iteration,attn model.cpu_offloading=true "
                         "model.hidden_size=500",
                         out, OUT_MAX);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "6 errors (1 setting graphtrain cannot run yet)"));
    assert_non_null(strstr(out, "error [engine_no_cpu_offloading]"));
    assert_non_null(strstr(out, "error [graphs_need_rng_tracker]"));
    assert_non_null(strstr(out, "error [heads_divide_hidden_size]"));
    assert_non_null(strstr(out, "fix: "));
}

/* A bad override does not hide the rules' findings on the rest: all come in one run, from
 * validate, train and bench alike, and nothing runs. */
static void test_bad_overrides_and_broken_rules_are_reported_together(void **state) {
    char *out = *state;
    int rc = gt_test_run("validate --quiet --recipe tiny model.cuda_graph_scope=attn "
                         "train.micro_batch_size=0 optimizer.lr=-1",
                         out, OUT_MAX);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "2 bad overrides"));
    assert_non_null(strstr(out, "train.micro_batch_size: '0' is out of range"));
    assert_non_null(strstr(out, "optimizer.lr: '-1' is out of range"));
    assert_non_null(strstr(out, "each bad setting above keeps its earlier value"));
    assert_non_null(strstr(out, "error [local_needs_full_iteration]"));
    rc = gt_test_run("validate --json --recipe tiny model.cuda_graph_scope=attn "
                     "train.micro_batch_size=0",
                     out, OUT_MAX);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "\"errors\": 2"));
    assert_non_null(strstr(out, "\"load_error\": "));
    assert_non_null(strstr(out, "\"rule\": \"local_needs_full_iteration\""));
    const char *cmds[] = {"train", "bench"};
    for (int i = 0; i < 2; i++) {
        char args[256];
        snprintf(args, sizeof args,
                 "%s --recipe tiny model.cuda_graph_scope=attn train.micro_batch_size=0", cmds[i]);
        assert_int_equal(gt_test_run(args, out, OUT_MAX), 2);
        assert_non_null(strstr(out, "train.micro_batch_size: '0' is out of range"));
        assert_non_null(strstr(out, "error [local_needs_full_iteration]"));
        assert_non_null(strstr(out, "nothing was run"));
    }
    /* a YAML file's bad settings join them; a malformed file stops before any rule */
    char path[512];
    const char *cmd = "validate --quiet --config %s optimizer.lr=-1";
    assert_int_equal(run_with_yaml("half_bad.yaml",
                                   "model:\n  cuda_graph_impl: local\n  cuda_graph_scope: attn\n"
                                   "  num_layers: lots\n",
                                   cmd, path, sizeof path, out),
                     2);
    assert_non_null(strstr(out, "half_bad.yaml:4: model.num_layers: 'lots'"));
    assert_non_null(strstr(out, "optimizer.lr: '-1' is out of range"));
    assert_non_null(strstr(out, "error [local_needs_full_iteration]"));
    assert_int_equal(run_with_yaml("half_bad.yaml", "model:\n  cuda_graph_impl: [local\n", cmd,
                                   path, sizeof path, out),
                     2);
    assert_non_null(strstr(out, "malformed YAML"));
    assert_null(strstr(out, "and the rules"));
    /* with only a bad override and sound rules, only the override is reported */
    assert_int_equal(gt_test_run("validate --recipe tiny train.micro_batch_size=0", out, OUT_MAX),
                     2);
    assert_null(strstr(out, "and the rules"));
}

static void test_validate_dropless_moe_scope_is_an_error_with_bridges_advice(void **state) {
    char *out = *state;
    int rc = gt_test_run("validate --quiet --recipe moe model.cuda_graph_impl=transformer_engine "
                         "model.cuda_graph_scope=attn,moe",
                         out, OUT_MAX);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "moe_scope_needs_drop_and_pad"));
    assert_non_null(strstr(out, "attn,moe_router,moe_preprocess"));
}

static void test_validate_json_is_one_object(void **state) {
    char *out = *state;
    assert_int_equal(
        gt_test_run("validate --json --recipe tiny model.cuda_graph_scope=attn", out, OUT_MAX), 2);
    assert_true(out[0] == '{');
    assert_non_null(strstr(out, "\"valid\": false"));
    assert_non_null(strstr(out, "\"rule\": \"local_needs_full_iteration\""));
    assert_non_null(strstr(out, "\"config\": {"));
    assert_int_equal(gt_test_run("validate --json --recipe tiny", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "\"valid\": true"));
    assert_int_equal(gt_test_run("validate --json model.nope=1", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "\"load_error\": "));
    assert_non_null(strstr(out, "\"errors\": 1, \"load_errors\": 1,"));
    /* every bad setting counts, from the overrides and from a file, with the rules' errors */
    assert_int_equal(gt_test_run("validate --json --recipe tiny model.nope=1 train.bad=2 "
                                 "model.cuda_graph_scope=attn",
                                 out, OUT_MAX),
                     2);
    assert_non_null(strstr(out, "\"errors\": 3, \"load_errors\": 2,"));
    char path[512];
    assert_int_equal(
        run_with_yaml("three_bad.yaml", "model:\n  nope: 1\n  num_layers: lots\ntrain:\n  x: 1\n",
                      "validate --json --config %s model.zzz=3", path, sizeof path, out),
        2);
    assert_non_null(strstr(out, "\"load_errors\": 4,"));
}

/* The text output's closing line counts what --json counts: bad settings and rule errors */
static void test_validate_text_summary_counts_what_json_counts(void **state) {
    char *out = *state;
    const char *args = "--recipe tiny model.nope=1 train.bad=2 model.cuda_graph_scope=attn";
    char cmd[256];
    snprintf(cmd, sizeof cmd, "validate --json %s", args);
    assert_int_equal(gt_test_run(cmd, out, OUT_MAX), 2);
    assert_non_null(strstr(out, "\"errors\": 3, \"load_errors\": 2,"));
    snprintf(cmd, sizeof cmd, "validate --quiet %s", args);
    assert_int_equal(gt_test_run(cmd, out, OUT_MAX), 2);
    assert_non_null(strstr(out, "3 errors in all (2 bad settings, 1 from the rules), 0 notes"));
    assert_int_equal(gt_test_run("validate --quiet --recipe tiny model.nope=1", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "1 error in all (1 bad setting, 0 from the rules)"));
}

/* The answer written to a full disk is an error (exit 1, said on stderr), not a quiet exit 0. */
static void test_validate_json_to_a_full_stdout_fails(void **state) {
    char *out = *state;
    FILE *probe = fopen("/dev/full", "w");
    if (!probe) skip();
    fclose(probe);
    const char *bin = getenv("GT_BINARY");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s validate --json --recipe tiny 2>&1 >/dev/full",
             bin ? bin : "./graphtrain");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, OUT_MAX - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_non_null(strstr(out, "No space left on device"));
}

static void test_validate_bad_input_names_the_problem(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("validate model.cuda_graph_scop=attn", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "did you mean 'model.cuda_graph_scope'"));
    assert_int_equal(gt_test_run("validate --recipe nosuch", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "unknown recipe 'nosuch'"));
    assert_int_equal(gt_test_run("validate --frobnicate", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "unknown argument '--frobnicate'"));
    char path[512];
    assert_int_equal(run_with_yaml("bad.yaml", "model:\n  num_layers: 4\n  cuda_graph_impl: fast\n",
                                   "validate --config %s", path, sizeof path, out),
                     2);
    char want[600];
    snprintf(want, sizeof want, "%s:3: model.cuda_graph_impl: 'fast' is not one of", path);
    assert_non_null(strstr(out, want));
}

static void test_validate_accepts_bridge_harness_flags(void **state) {
    char *out = *state;
    int rc = gt_test_run("validate --quiet -m qwen -mr qwen3_30b_a3b_1gpu --task pretrain -g h100 "
                         "-c bf16 -ng 1 --cuda_graph_impl transformer_engine "
                         "--cuda_graph_scope attn,moe_router,moe_preprocess",
                         out, OUT_MAX);
    assert_int_equal(rc, 0);
    /* without the harness, impl alone lacks the RNG keys */
    rc = gt_test_run("validate --quiet --recipe tiny model.use_te_rng_tracker=false", out, OUT_MAX);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "graphs_need_rng_tracker"));
}

/* What graphtrain cannot run yet is refused by validate, train and bench alike, by name */
static void test_validate_train_bench_refuse_what_this_engine_cannot_run(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("validate --quiet --recipe llama3_70b -c fp8_sc "
                                 "model.ffn_hidden_size=28600",
                                 out, OUT_MAX),
                     2);
    assert_non_null(strstr(out, "error [engine_no_fp8_blockwise_shape] model.compute_dtype"));
    assert_non_null(strstr(out, "error [engine_no_tensor_parallel]"));
    assert_non_null(strstr(out, "error [engine_no_pipeline_parallel]"));
    assert_non_null(strstr(out, "error [engine_no_context_parallel]"));
    const char *settings[] = {"-c fp8_sc runtime.device=cuda model.ffn_hidden_size=1000",
                              "dataset.packed_sequence=true dataset.pad_to_max_length=true "
                              "dataset.pad_cu_seqlens=true",
                              "model.num_layers=2 model.hybrid_override_pattern=*M "
                              "model.mamba_d_conv=16 runtime.device=cuda"};
    const char *cmds[] = {"validate --quiet", "train", "bench --same-process --steps 1"};
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
            char args[512];
            snprintf(args, sizeof args,
                     "%s --recipe tiny runtime.device=cpu train.train_iters=4 %s", cmds[c],
                     settings[s]);
            int rc = gt_test_run(args, out, OUT_MAX);
            if (rc != 2 || !strstr(out, "cannot run it yet"))
                fail_msg("`%s` exited %d without refusing:\n%s", args, rc, out);
        }
    }
}

/* Recompute trains, and validate shows the activations it saves */
static void test_recompute_trains_and_validate_shows_the_saving(void **state) {
    char *out = *state;
    const char *rc_full = "model.recompute_granularity=full model.recompute_method=uniform "
                          "model.recompute_num_layers=1";
    char args[512];
    snprintf(args, sizeof args, "validate --recipe llama1b %s", rc_full);
    assert_int_equal(gt_test_run(args, out, OUT_MAX), 0);
    assert_non_null(strstr(out, "(recompute; "));
    assert_non_null(strstr(out, " MiB without it)"));
    assert_int_equal(gt_test_run("validate --recipe llama1b", out, OUT_MAX), 0);
    assert_null(strstr(out, "without it)"));
    /* tiny cut down to seconds on the CPU */
    snprintf(args, sizeof args,
             "train --recipe tiny runtime.device=cpu train.train_iters=4 "
             "model.cuda_graph_warmup_steps=2 model.num_layers=2 model.hidden_size=64 "
             "model.ffn_hidden_size=128 model.vocab_size=256 model.seq_length=16 %s",
             rc_full);
    int rc = gt_test_run(args, out, OUT_MAX);
    if (rc != 0) fail_msg("`%s` exited %d:\n%s", args, rc, out);
}

static void test_recipes_lists_each_with_a_description(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("recipes", out, OUT_MAX), 0);
    const char *names[] = {"tiny ",         "gpt124m ",        "llama1b ",
                           "moe ",          "demo ",           "llama3_8b ",
                           "llama3_70b ",   "qwen3_30b_a3b ",  "deepseek_v3 ",
                           "gpt_oss_120b ", "llama3_8b_1gpu ", "qwen3_30b_a3b_1gpu "};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *line = strstr(out, names[i]);
        if (!line) fail_msg("recipe %s not listed", names[i]);
        char *eol = strchr(line, '\n');
        assert_true(eol && eol - line > (long)strlen(names[i]) + 20); /* has a description */
    }
    assert_null(strstr(out, "no description"));
    assert_int_equal(gt_test_run("recipes tiny", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "hidden_size: 512"));
}

/* The text between the config-reference markers of a file in the source tree. */
static char *marked_block(const char *rel) {
    char path[1024];
    gt_test_source_path(rel, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s", path);
    static const char begin[] = "<!-- config-reference:begin -->\n";
    char *text = calloc(1, OUT_MAX);
    assert_non_null(text);
    size_t n = fread(text, 1, OUT_MAX - 1, f);
    fclose(f);
    text[n] = '\0';
    char *b = strstr(text, begin), *e = strstr(text, "<!-- config-reference:end -->");
    if (!b || !e || e < b) fail_msg("%s lacks the config-reference markers", rel);
    b += sizeof begin - 1;
    memmove(text, b, (size_t)(e - b));
    text[e - b] = '\0';
    return text;
}

static void test_readme_and_docs_reference_match_the_generated_one(void **state) {
    char *out = *state;
    assert_int_equal(gt_test_run("config-reference", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "| `model.cuda_graph_scope` |"));
    const char *files[] = {"README.md", "docs/config-reference.md"};
    for (int i = 0; i < 2; i++) {
        char *block = marked_block(files[i]);
        if (strcmp(block, out))
            fail_msg("%s's configuration reference is out of date: paste the output of "
                     "`graphtrain config-reference` between its config-reference markers",
                     files[i]);
        free(block);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_lists_every_command),
        cmocka_unit_test(test_unknown_command_exits_2_and_points_to_help),
        cmocka_unit_test(test_command_help_exits_0),
        cmocka_unit_test(test_validate_valid_recipe_exits_0),
        cmocka_unit_test(test_validate_reports_every_violation_and_exits_2),
        cmocka_unit_test(test_bad_overrides_and_broken_rules_are_reported_together),
        cmocka_unit_test(test_validate_dropless_moe_scope_is_an_error_with_bridges_advice),
        cmocka_unit_test(test_validate_json_is_one_object),
        cmocka_unit_test(test_validate_text_summary_counts_what_json_counts),
        cmocka_unit_test(test_validate_bad_input_names_the_problem),
        cmocka_unit_test(test_validate_accepts_bridge_harness_flags),
        cmocka_unit_test(test_validate_train_bench_refuse_what_this_engine_cannot_run),
        cmocka_unit_test(test_validate_json_to_a_full_stdout_fails),
        cmocka_unit_test(test_recompute_trains_and_validate_shows_the_saving),
        cmocka_unit_test(test_recipes_lists_each_with_a_description),
        cmocka_unit_test(test_readme_and_docs_reference_match_the_generated_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
