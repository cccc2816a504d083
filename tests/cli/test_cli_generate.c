/* graphtrain generate's front-end (cli/cmd_generate.c): ids in, ids out, the tokens/s report
 * naming graph replay or eager steps (the same ids either way), and --device checked. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/hf_convert.h"

#define OUT_MAX (64 * 1024)

static void checkpoint(char *ck, size_t n) {
    char dir[1024], tmp[256];
    gt_test_source_path("tests/train/fixtures/llama", dir, sizeof dir);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, n, "%s/ck", tmp);
    gt_error err = {0};
    if (gt_hf_import(dir, ck, NULL, &err)) fail_msg("import: %s", err.msg);
}

/* the first line that is a list of ids */
static const char *ids_line(const char *out) {
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p >= '0' && *p <= '9') return p;
    return NULL;
}

static void test_generate_replays_a_graph_or_runs_eagerly_with_the_same_ids(void **state) {
    (void)state;
    char ck[512], args[1024];
    char *a = malloc(OUT_MAX), *b = malloc(OUT_MAX);
    checkpoint(ck, sizeof ck);
    snprintf(args, sizeof args,
             "generate --checkpoint %s --prompt-ids 3,17,42 --max-new-tokens 6 --temperature 0 "
             "--device cpu",
             ck);
    assert_int_equal(gt_test_run(args, a, OUT_MAX), 0);
    assert_non_null(strstr(a, "cpu backend: prefill 3 tokens"));
    assert_non_null(strstr(a, "decode 5 tokens"));
    assert_non_null(strstr(a, "graph replay"));
    strncat(args, " --no-graph", sizeof args - strlen(args) - 1);
    assert_int_equal(gt_test_run(args, b, OUT_MAX), 0);
    assert_non_null(strstr(b, "eager"));
    const char *la = ids_line(a), *lb = ids_line(b);
    assert_non_null(la);
    assert_non_null(lb);
    assert_memory_equal(la, lb, strcspn(la, "\n") + 1);
    int commas = 0;
    for (const char *p = la; *p && *p != '\n'; p++)
        commas += *p == ',';
    assert_int_equal(commas, 5);
    free(a);
    free(b);
}

static void test_generate_refuses_an_unknown_device(void **state) {
    (void)state;
    char *out = malloc(OUT_MAX);
    assert_int_equal(
        gt_test_run("generate --checkpoint x --prompt-ids 1 --device tpu", out, OUT_MAX), 2);
    assert_non_null(strstr(out, "unknown argument or bad value: --device"));
    assert_int_equal(gt_test_run("generate --help", out, OUT_MAX), 0);
    assert_non_null(strstr(out, "--no-graph"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_replays_a_graph_or_runs_eagerly_with_the_same_ids),
        cmocka_unit_test(test_generate_refuses_an_unknown_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
