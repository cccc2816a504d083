/* The key table, value parsing, YAML recipes and the command-line loader: spellings a Bridge
 * user writes are accepted, bad input gets an error naming the key, file and line. */
#include "testlib.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "config/keys.h"
#include "config/rules.h"

static int load_text(gt_config *cfg, const char *text, gt_error *err) {
    gt_config_defaults(cfg);
    return gt_config_load_yaml_string(cfg, text, strlen(text), "test.yaml", err);
}

static void test_every_default_round_trips_through_its_text_form(void **state) {
    (void)state;
    gt_config a, b;
    gt_config_defaults(&a);
    memset(&b, 0xff, sizeof b);
    size_t n;
    const gt_key *keys = gt_config_keys(&n);
    assert_true(n > 60);
    for (size_t i = 0; i < n; i++) {
        char va[600], vb[600];
        gt_error err = {0};
        assert_int_equal(gt_config_set(&b, keys[i].name, keys[i].def, &err), GT_OK);
        gt_config_format_value(&a, &keys[i], va, sizeof va);
        gt_error err2 = {0};
        assert_int_equal(gt_config_set(&b, keys[i].name, va, &err2), GT_OK);
        gt_config_format_value(&b, &keys[i], vb, sizeof vb);
        assert_string_equal(va, vb);
    }
}

static void test_defaults_others_rely_on(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    assert_int_equal(c.runtime.device, GT_DEVICE_AUTO);
    assert_int_equal(c.rng.seed, 1234);
    assert_int_equal(c.model.cuda_graph_warmup_steps, 3);
    assert_int_equal(c.runtime.max_shape_buckets, 4);
    assert_int_equal(c.runtime.inject_nan_at_step, -1);
    assert_true(c.rerun_state_machine.check_for_nan_in_loss);
    assert_true(c.ddp.check_for_nan_in_grad);
    assert_int_equal(c.model.cuda_graph_impl, GT_GRAPH_IMPL_NONE);
    assert_int_equal(c.model.cuda_graph_scope, 0);
    /* the tiny workload's shape */
    assert_int_equal(c.model.hidden_size, 512);
    assert_int_equal(c.train.micro_batch_size, 4);
    assert_int_equal(c.env.nccl_graph_register, -1);
}

static void test_scope_accepts_list_string_and_commas(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    const uint32_t want = GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS;
    assert_int_equal(
        load_text(&c, "model:\n  cuda_graph_scope: [attn, moe_router, moe_preprocess]\n", &err),
        GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, want);
    assert_int_equal(
        load_text(
            &c, "model:\n  cuda_graph_scope:\n    - attn\n    - moe_router\n    - moe_preprocess\n",
            &err),
        GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, want);
    assert_int_equal(
        load_text(&c, "model:\n  cuda_graph_scope: attn,moe_router,moe_preprocess\n", &err), GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, want);
    assert_int_equal(load_text(&c, "model:\n  cuda_graph_scope: full_iteration\n", &err), GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, GT_SCOPE_FULL_ITERATION);
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_scope=[attn, 'mlp']", &err), GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_scope=", &err), GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, 0);
}

static void test_bad_scope_name_lists_the_allowed_ones(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_scope=attn,router", &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.cuda_graph_scope"));
    assert_non_null(strstr(err.msg, "'router'"));
    assert_non_null(strstr(err.msg, "moe_router"));
}

static void test_impl_none_clears_the_scope_as_bridge_does(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_impl=transformer_engine", &err),
                     GT_OK);
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_scope=attn", &err), GT_OK);
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_impl=none", &err), GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, 0);
    /* scope written after impl=none: finalize empties it */
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_scope=attn", &err), GT_OK);
    gt_config_finalize(&c);
    assert_int_equal(c.model.cuda_graph_scope, 0);
}

static void test_unknown_key_suggests_the_closest(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_override(&c, "model.num_layer=4", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "did you mean 'model.num_layers'"));
    assert_int_equal(gt_config_override(&c, "cuda_graph_scope=attn", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "did you mean 'model.cuda_graph_scope'"));
    assert_int_equal(gt_config_override(&c, "train.micro_batch=4", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "did you mean 'train.micro_batch_size'"));
    assert_int_equal(gt_config_override(&c, "zzzz.qqqqqqq=1", &err), GT_ERR_INVALID);
    assert_null(strstr(err.msg, "did you mean"));
}

static void test_wrong_types_and_ranges_name_key_and_value(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_override(&c, "model.num_layers=abc", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.num_layers: 'abc' is not a whole number"));
    assert_int_equal(gt_config_override(&c, "model.num_layers=0", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(gt_config_override(&c, "model.hidden_dropout=1.5", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.hidden_dropout"));
    assert_int_equal(gt_config_override(&c, "model.add_qkv_bias=maybe", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "true or false"));
    assert_int_equal(gt_config_override(&c, "model.cuda_graph_impl=full", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "transformer_engine"));
    assert_int_equal(gt_config_override(&c, "model.num_layers=99999999999999999999", &err),
                     GT_ERR_INVALID);
    assert_int_equal(gt_config_override(&c, "model.rotary_base=nan", &err), GT_ERR_INVALID);
    assert_int_equal(gt_config_override(&c, "no_equals_sign", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "key=value"));
    /* nothing above changed the config */
    assert_int_equal(c.model.num_layers, 8);
}

static void test_null_means_unset_only_where_a_key_has_an_unset_value(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c, "model:\n  moe_expert_capacity_factor: 2.0\n", &err), GT_OK);
    assert_int_equal(
        load_text(&c, "model:\n  moe_expert_capacity_factor: null\n  recompute_granularity: ~\n",
                  &err),
        GT_OK);
    assert_true(c.model.moe_expert_capacity_factor <= 0);
    assert_int_equal(c.model.recompute_granularity, GT_RECOMPUTE_NONE);
    assert_int_equal(load_text(&c, "model:\n  num_layers: null\n", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "test.yaml:2:"));
}

static void test_yaml_sections_become_dotted_keys(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c,
                               "# comment\nmodel:\n  num_layers: 3\n  cuda_graph_impl: local\n"
                               "train:\n  micro_batch_size: 2\nrng:\n  seed: 77\n"
                               "env:\n  nccl_graph_register: 0\n",
                               &err),
                     GT_OK);
    assert_int_equal(c.model.num_layers, 3);
    assert_int_equal(c.model.cuda_graph_impl, GT_GRAPH_IMPL_LOCAL);
    assert_int_equal(c.train.micro_batch_size, 2);
    assert_int_equal(c.rng.seed, 77);
    assert_int_equal(c.env.nccl_graph_register, 0);
}

static void test_yaml_errors_carry_file_and_line_and_are_all_reported(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(
        load_text(&c, "model:\n  num_layers: 4\n  num_layerz: 5\ntrain:\n  micro_batch_size: x\n",
                  &err),
        GT_ERR_INVALID);
    assert_non_null(strstr(
        err.msg, "test.yaml:3: unknown key 'model.num_layerz'; did you mean 'model.num_layers'?"));
    assert_non_null(strstr(err.msg, "test.yaml:5: train.micro_batch_size: 'x'"));
}

static void test_malformed_yaml_reports_the_line(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c, "model:\n  num_layers: 4\n   bad: [1, 2\n", &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "test.yaml:"));
    assert_non_null(strstr(err.msg, "malformed YAML"));
    assert_int_equal(load_text(&c, "- just\n- a list\n", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "test.yaml:1: a recipe must be a mapping"));
    assert_int_equal(load_text(&c, "a: &x 1\nb: *x\n", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "aliases"));
    /* a file that sets nothing says so (tests/config/test_yaml.c) */
    assert_int_equal(load_text(&c, "", &err), GT_ERR_INVALID);
    assert_int_equal(load_text(&c, "model: 8\n", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "test.yaml:1: model is a section"));
    assert_int_equal(load_text(&c, "model:\n  num_layers:\n    value: 8\n", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "test.yaml:3: model.num_layers takes a value"));
}

static void test_unreadable_files_are_io_errors_naming_the_path(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_load_yaml(&c, "/nonexistent/x.yaml", &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.yaml"));
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    assert_int_equal(gt_config_load_yaml(&c, dir, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "directory"));
}

/* A file read whole with bad settings (complete = 1) keeps its good settings and leaves each
 * bad one at its earlier value; a malformed or unreadable file is not complete. Through
 * gt_cli_load_config, the bad settings of the file and of the overrides come back together
 * and the configuration stays checkable. */
static void test_bad_settings_of_files_and_overrides_are_collected_together(void **state) {
    (void)state;
    char dir[256], good_bad[512], broken[512];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(good_bad, sizeof good_bad, "%s/good_bad.yaml", dir);
    snprintf(broken, sizeof broken, "%s/broken.yaml", dir);
    gt_test_write_text(
        good_bad, "model:\n  num_layers: 3\n  hidden_size: fast\ntrain:\n  micro_batch_size: 2\n");
    gt_test_write_text(broken, "model:\n  num_layers: [3\n");
    gt_config c;
    gt_error err = {0};
    int complete = -1;
    gt_config_defaults(&c);
    int hidden = c.model.hidden_size;
    assert_int_equal(gt_config_load_yaml_read(&c, good_bad, &complete, &err), GT_ERR_INVALID);
    assert_int_equal(complete, 1);
    assert_int_equal(c.model.num_layers, 3);
    assert_int_equal(c.train.micro_batch_size, 2);
    assert_int_equal(c.model.hidden_size, hidden);
    assert_int_equal(gt_config_load_yaml_read(&c, broken, &complete, &err), GT_ERR_INVALID);
    assert_int_equal(complete, 0);
    assert_int_equal(gt_config_load_yaml_read(&c, "/nonexistent/x.yaml", &complete, &err),
                     GT_ERR_IO);
    assert_int_equal(complete, 0);

    char *a1[] = {"validate", "--config", good_bad, "optimizer.lr=-1", "model.num_layers=5"};
    int checkable = 0;
    assert_int_equal(gt_cli_load_config(5, a1, &c, NULL, NULL, &checkable, &err), GT_ERR_INVALID);
    assert_int_equal(checkable, 1);
    assert_non_null(strstr(err.msg, "good_bad.yaml:3: model.hidden_size: 'fast'"));
    assert_non_null(strstr(err.msg, "optimizer.lr: '-1' is out of range"));
    assert_int_equal(c.model.num_layers, 5); /* the good override still applied */
    /* a bad harness flag stops the load, but keeps the file's findings in the message */
    char *a3[] = {"validate", "--config", good_bad, "--task", "finetune"};
    assert_int_equal(gt_cli_load_config(5, a3, &c, NULL, NULL, &checkable, &err), GT_ERR_INVALID);
    assert_int_equal(checkable, 0);
    assert_non_null(strstr(err.msg, "good_bad.yaml:3: model.hidden_size: 'fast'"));
    assert_non_null(strstr(err.msg, "use --task pretrain"));
    char *a2[] = {"validate", "--config", broken, "optimizer.lr=-1"};
    assert_int_equal(gt_cli_load_config(4, a2, &c, NULL, NULL, &checkable, &err), GT_ERR_INVALID);
    assert_int_equal(checkable, 0);
    assert_non_null(strstr(err.msg, "malformed YAML"));
}

static void test_unreadable_nccl_graph_register_is_reported_not_guessed(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    setenv("NCCL_GRAPH_REGISTER", "off", 1);
    gt_config_read_env(&c);
    unsetenv("NCCL_GRAPH_REGISTER");
    gt_report report;
    assert_true(gt_config_validate(&c, &report) > 0);
    assert_true(gt_report_has(&report, "nccl_graph_register_not_a_number"));
    gt_error err = {0};
    assert_int_equal(gt_config_set(&c, "env.nccl_graph_register", "0", &err), GT_OK);
    gt_config_validate(&c, &report);
    assert_false(gt_report_has(&report, "nccl_graph_register_not_a_number"));
}

static void test_environment_fills_env_keys(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,expandable_segments:True", 1);
    setenv("NCCL_GRAPH_REGISTER", "0", 1);
    gt_config_read_env(&c);
    assert_true(c.env.expandable_segments);
    assert_int_equal(c.env.nccl_graph_register, 0);
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    unsetenv("NCCL_GRAPH_REGISTER");
    gt_config_read_env(&c);
    assert_false(c.env.expandable_segments);
    assert_int_equal(c.env.nccl_graph_register, -1);
}

/* Recipes for one GPU validate; the multi-GPU ones (Bridge's settings) break no rule and are
 * refused only for what graphtrain cannot run yet (parallelism); the hybrid ones (Mamba
 * layers, within the CUDA kernels' shape limits) validate on the GPU too. */
static void test_every_recipe_loads_and_validates(void **state) {
    (void)state;
    char dir[1024];
    gt_test_source_path("recipes", dir, sizeof dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml")) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gt_config c;
        gt_config_defaults(&c);
        gt_error err = {0};
        if (gt_config_load_yaml(&c, path, &err) != GT_OK) fail_msg("%s", err.msg);
        gt_config_finalize(&c);
        gt_report r;
        int errors = gt_config_validate(&c, &r);
        /* multi-GPU recipes: data parallelism runs; anything else only by name (unsupported) */
        int runnable = c.runtime.num_gpus == 1;
        if (runnable ? errors != 0 : errors != r.unsupported) {
            gt_report_print(&r, stderr);
            fail_msg("recipe %s is not valid", e->d_name);
        }
        count++;
    }
    closedir(d);
    assert_true(count >= 15);
}

static void load_recipe(gt_config *c, const char *name) {
    char dir[1024];
    gt_test_source_path("recipes", dir, sizeof dir);
    setenv("GT_RECIPE_DIR", dir, 1);
    char *argv[] = {"validate", "--recipe", (char *)name};
    gt_error err = {0};
    if (gt_cli_load_config(3, argv, c, NULL, NULL, NULL, &err) != GT_OK) fail_msg("%s", err.msg);
}

static void test_workload_recipes_have_the_workloads_md_shapes(void **state) {
    (void)state;
    gt_config c;
    load_recipe(&c, "tiny");
    assert_int_equal(c.model.vocab_size, 32768);
    assert_int_equal(c.model.num_layers, 8);
    assert_int_equal(c.model.seq_length, 256);
    load_recipe(&c, "gpt124m");
    assert_int_equal(c.model.vocab_size, 50304);
    assert_int_equal(c.train.micro_batch_size, 8);
    load_recipe(&c, "llama1b");
    assert_int_equal(c.model.num_query_groups, 8);
    assert_int_equal(c.model.ffn_hidden_size, 5632);
    load_recipe(&c, "moe");
    assert_int_equal(c.model.num_moe_experts, 64);
    assert_int_equal(c.model.moe_router_topk, 8);
    assert_int_equal(c.model.moe_ffn_hidden_size, 384);
    assert_true(c.model.moe_expert_capacity_factor <= 0); /* dropless */
    load_recipe(&c, "demo");
    assert_int_equal(c.model.vocab_size, 512);
    assert_int_equal(c.dataset.source, GT_DATA_SHARDS);
    assert_string_equal(c.dataset.data_path, "data/fortunes");
}

static void test_sources_apply_in_order_and_overrides_win(void **state) {
    (void)state;
    char dir[256], cfgfile[512], recipes[1024];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(cfgfile, sizeof cfgfile, "%s/user.yaml", dir);
    gt_test_write_text(cfgfile,
                       "model:\n  num_layers: 3\n  hidden_size: 256\nruntime:\n  num_gpus: 4\n");
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", recipes, sizeof recipes), 1);
    gt_config c;
    gt_error err = {0};
    char *a1[] = {"validate", "model.num_layers=5", "--recipe", "tiny", "--config", cfgfile, "-ng",
                  "2"};
    assert_int_equal(gt_cli_load_config(8, a1, &c, NULL, NULL, NULL, &err), GT_OK);
    assert_int_equal(c.model.num_layers, 5);    /* override beats config and recipe */
    assert_int_equal(c.model.hidden_size, 256); /* config beats recipe */
    assert_int_equal(c.model.seq_length, 256);  /* recipe beats defaults */
    assert_int_equal(c.runtime.num_gpus, 2);    /* harness flag beats config */
    char *a2[] = {"validate", "--recipe=tiny", "--config=/nonexistent.yaml"};
    assert_int_equal(gt_cli_load_config(3, a2, &c, NULL, NULL, NULL, &err), GT_ERR_IO);
    char *a3[] = {"validate", "--recipe", "no_such_recipe"};
    assert_int_equal(gt_cli_load_config(3, a3, &c, NULL, NULL, NULL, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "graphtrain recipes"));
}

static void test_harness_flags_map_onto_keys_and_enable_the_rng_tracker(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    char recipes[1024];
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", recipes, sizeof recipes), 1);
    char *a[] = {"bench",
                 "-m",
                 "qwen",
                 "-mr",
                 "qwen3_30b_a3b_1gpu",
                 "--task",
                 "pretrain",
                 "-g",
                 "H100",
                 "-c",
                 "fp8_cs",
                 "-ng",
                 "1",
                 "--cuda_graph_impl",
                 "transformer_engine",
                 "--cuda_graph_scope",
                 "attn,moe_router"};
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    assert_int_equal(gt_cli_load_config(17, a, &c, NULL, NULL, NULL, &err), GT_OK);
    assert_int_equal(c.model.num_moe_experts, 128); /* -mr picked the recipe */
    assert_string_equal(c.runtime.gpu, "h100");
    assert_int_equal(c.model.compute_dtype, GT_DTYPE_FP8_CS);
    assert_int_equal(c.model.cuda_graph_impl, GT_GRAPH_IMPL_TE);
    assert_int_equal(c.model.cuda_graph_scope, GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER);
    assert_true(c.model.use_te_rng_tracker);
    assert_true(c.rng.te_rng_tracker);
    char *b[] = {"validate", "--cuda_graph_impl=none"};
    assert_int_equal(gt_cli_load_config(2, b, &c, NULL, NULL, NULL, &err), GT_OK);
    assert_false(c.model.use_te_rng_tracker);
    char *bad[] = {"validate", "--task", "sft"};
    assert_int_equal(gt_cli_load_config(3, bad, &c, NULL, NULL, NULL, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "pretrain"));
    char *missing[] = {"validate", "--cuda_graph_scope"};
    assert_int_equal(gt_cli_load_config(2, missing, &c, NULL, NULL, NULL, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needs a value"));
}

static void test_unknown_flags_are_left_for_the_caller(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    char *a[] = {"bench", "--out", "r.json", "model.num_layers=2", "--json", "extra"};
    char *rest[6];
    int n = 0;
    assert_int_equal(gt_cli_load_config(6, a, &c, &n, rest, NULL, &err), GT_OK);
    assert_int_equal(n, 5);
    assert_string_equal(rest[0], "bench");
    assert_string_equal(rest[1], "--out");
    assert_string_equal(rest[2], "r.json");
    assert_string_equal(rest[3], "--json");
    assert_string_equal(rest[4], "extra");
    assert_int_equal(c.model.num_layers, 2);
}

static void test_reference_lists_every_key_with_default_and_doc(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    gt_config_print_reference(f);
    fclose(f);
    size_t n;
    const gt_key *keys = gt_config_keys(&n);
    for (size_t i = 0; i < n; i++) {
        char cell[160];
        snprintf(cell, sizeof cell, "| `%s` |", keys[i].name);
        if (!strstr(text, cell)) fail_msg("reference lacks %s", keys[i].name);
        assert_non_null(strstr(text, keys[i].doc));
    }
    assert_non_null(strstr(text, "none \\| local \\| transformer_engine"));
    free(text);
}

static void test_resolved_config_prints_as_json_object(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    c.model.cuda_graph_scope = GT_SCOPE_ATTN | GT_SCOPE_MLP;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    gt_config_print_json(&c, f);
    fclose(f);
    assert_non_null(strstr(text, "\"model.cuda_graph_scope\": [\"attn\", \"mlp\"]"));
    assert_non_null(strstr(text, "\"rng.seed\": 1234"));
    assert_non_null(strstr(text, "\"env.nccl_graph_register\": null"));
    assert_non_null(strstr(text, "\"runtime.device\": \"auto\""));
    free(text);
}

static void test_handle_api_creates_loads_and_overrides(void **state) {
    (void)state;
    gt_config *c = NULL;
    gt_error err = {0};
    setenv("NCCL_GRAPH_REGISTER", "1", 1);
    assert_int_equal(gt_config_create(&c, &err), GT_OK);
    unsetenv("NCCL_GRAPH_REGISTER");
    assert_int_equal(c->env.nccl_graph_register, 1);
    char path[1024];
    gt_test_source_path("recipes/moe.yaml", path, sizeof path);
    assert_int_equal(gt_config_load_recipe(c, path, &err), GT_OK);
    assert_int_equal(c->model.num_moe_experts, 64);
    assert_int_equal(gt_config_apply_override(c, "model.cuda_graph_impl=none", &err), GT_OK);
    assert_int_equal(c->model.cuda_graph_scope, 0);
    gt_config_destroy(c);
    gt_config_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_default_round_trips_through_its_text_form),
        cmocka_unit_test(test_defaults_others_rely_on),
        cmocka_unit_test(test_scope_accepts_list_string_and_commas),
        cmocka_unit_test(test_bad_scope_name_lists_the_allowed_ones),
        cmocka_unit_test(test_impl_none_clears_the_scope_as_bridge_does),
        cmocka_unit_test(test_unknown_key_suggests_the_closest),
        cmocka_unit_test(test_wrong_types_and_ranges_name_key_and_value),
        cmocka_unit_test(test_null_means_unset_only_where_a_key_has_an_unset_value),
        cmocka_unit_test(test_yaml_sections_become_dotted_keys),
        cmocka_unit_test(test_yaml_errors_carry_file_and_line_and_are_all_reported),
        cmocka_unit_test(test_malformed_yaml_reports_the_line),
        cmocka_unit_test(test_unreadable_files_are_io_errors_naming_the_path),
        cmocka_unit_test(test_bad_settings_of_files_and_overrides_are_collected_together),
        cmocka_unit_test(test_environment_fills_env_keys),
        cmocka_unit_test(test_unreadable_nccl_graph_register_is_reported_not_guessed),
        cmocka_unit_test(test_every_recipe_loads_and_validates),
        cmocka_unit_test(test_workload_recipes_have_the_workloads_md_shapes),
        cmocka_unit_test(test_sources_apply_in_order_and_overrides_win),
        cmocka_unit_test(test_harness_flags_map_onto_keys_and_enable_the_rng_tracker),
        cmocka_unit_test(test_unknown_flags_are_left_for_the_caller),
        cmocka_unit_test(test_reference_lists_every_key_with_default_and_doc),
        cmocka_unit_test(test_resolved_config_prints_as_json_object),
        cmocka_unit_test(test_handle_api_creates_loads_and_overrides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
