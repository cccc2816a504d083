/* YAML recipes are read strictly: a key or section given twice, a list where one value
 * belongs, a file that sets nothing and a tab are each refused by name and line, and every
 * bad setting of a file is listed, not the first few. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"

static int load_text(gt_config *cfg, const char *text, gt_error *err) {
    gt_config_defaults(cfg);
    return gt_config_load_yaml_string(cfg, text, strlen(text), "t.yaml", err);
}

static void test_a_key_set_twice_is_refused_naming_both_lines(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(
        load_text(&c, "model:\n  num_layers: 4\n  hidden_size: 64\n  num_layers: 6\n", &err),
        GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "t.yaml:4: model.num_layers set twice (lines 2 and 4)"));
    assert_int_equal(c.model.num_layers, 4);
    /* an alias and its key are the same setting */
    assert_int_equal(
        load_text(&c, "model:\n  layernorm_epsilon: 1e-5\n  norm_epsilon: 1e-6\n", &err),
        GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.layernorm_epsilon set twice (lines 2 and 3)"));
}

static void test_a_section_given_twice_is_refused_naming_both_lines(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c,
                               "model:\n  num_layers: 4\ntrain:\n  train_iters: 5\nmodel:\n"
                               "  hidden_size: 64\n",
                               &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "t.yaml:5: section model given twice (lines 1 and 5)"));
    assert_int_equal(err.count, 1);
}

static void test_a_list_where_one_value_belongs_is_refused(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c,
                               "model:\n  num_layers: [1]\ncheckpoint:\n  save: [a, b]\n"
                               "  load: []\n",
                               &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "t.yaml:2: model.num_layers takes one value, not a list"));
    assert_non_null(strstr(err.msg, "t.yaml:4: checkpoint.save takes one value, not a list"));
    assert_non_null(strstr(err.msg, "t.yaml:5: checkpoint.load takes one value"));
    assert_int_equal(err.count, 3);
    assert_int_equal(c.model.num_layers, 8);
    assert_string_equal(c.checkpoint.save, "");
    /* list keys still take lists */
    assert_int_equal(load_text(&c, "model:\n  cuda_graph_scope: [attn, mlp]\n", &err), GT_OK);
    assert_int_equal(c.model.cuda_graph_scope, GT_SCOPE_ATTN | GT_SCOPE_MLP);
}

static void test_every_bad_setting_of_a_file_is_listed(void **state) {
    (void)state;
    char *text = malloc(8192);
    assert_non_null(text);
    size_t used = (size_t)snprintf(text, 8192, "model:\n");
    for (int i = 0; i < 26; i++)
        used += (size_t)snprintf(text + used, 8192 - used, "  bogus_%c: 1\n", 'a' + i);
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c, text, &err), GT_ERR_INVALID);
    assert_int_equal(err.count, 26);
    for (int i = 0; i < 26; i++) {
        char want[64];
        snprintf(want, sizeof want, "t.yaml:%d: unknown key 'model.bogus_%c'", i + 2, 'a' + i);
        if (!strstr(err.msg, want)) fail_msg("%s is not listed in:\n%s", want, err.msg);
    }
    assert_null(strstr(err.msg, "more errors"));
    free(text);
}

static void test_a_file_that_sets_nothing_says_so(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    const char *empties[] = {"", "# only a comment\n", "---\n", "{}\n"};
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        assert_int_equal(load_text(&c, empties[i], &err), GT_ERR_INVALID);
        if (!strstr(err.msg, "t.yaml:1: the file sets nothing"))
            fail_msg("'%s' gave: %s", empties[i], err.msg);
    }
    assert_int_equal(load_text(&c, "train:\n  train_iters: 5\n", &err), GT_OK);
}

static void test_a_tab_is_called_a_tab(void **state) {
    (void)state;
    gt_config c;
    gt_error err = {0};
    assert_int_equal(load_text(&c, "model:\n\tnum_layers: 4\n", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "t.yaml:2: malformed YAML"));
    assert_non_null(strstr(err.msg, "a tab on this line"));
    /* the same through a file */
    char dir[256], path[512];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tab.yaml", dir);
    gt_test_write_text(path, "train:\n  train_iters: 5\n\tmicro_batch_size: 2\n");
    gt_config_defaults(&c);
    assert_int_equal(gt_config_load_yaml(&c, path, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tab"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_key_set_twice_is_refused_naming_both_lines),
        cmocka_unit_test(test_a_section_given_twice_is_refused_naming_both_lines),
        cmocka_unit_test(test_a_list_where_one_value_belongs_is_refused),
        cmocka_unit_test(test_every_bad_setting_of_a_file_is_listed),
        cmocka_unit_test(test_a_file_that_sets_nothing_says_so),
        cmocka_unit_test(test_a_tab_is_called_a_tab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
