/* Sampling from a checkpoint (train/generate.h): the greedy continuation of the Hugging Face
 * fixtures equals transformers' own greedy generate, sampling repeats per seed, top-k 1 is
 * greedy, and bad prompts are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/read_file.h"
#include "testlib.h"
#include "train/generate.h"
#include "train/hf_convert.h"

static void imported(const char *name, char *ck, size_t n, char *dir, size_t dn) {
    char rel[256], tmp[256];
    snprintf(rel, sizeof rel, "tests/train/fixtures/%s", name);
    gt_test_source_path(rel, dir, dn);
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(ck, n, "%s/ck", tmp);
    gt_error err = {0};
    if (gt_hf_import(dir, ck, NULL, &err)) fail_msg("import %s: %s", name, err.msg);
}

/* expected.json's tokens and greedy continuation */
static void read_expected(const char *dir, int32_t *tok, int *nt, int32_t *greedy, int *ng) {
    char path[1100], *text;
    size_t n;
    gt_error err = {0};
    snprintf(path, sizeof path, "%s/expected.json", dir);
    assert_int_equal(gt_read_file(path, 1 << 24, &text, &n, &err), GT_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *t = cJSON_GetObjectItem(j, "tokens"), *g = cJSON_GetObjectItem(j, "greedy");
    *nt = cJSON_GetArraySize(t);
    *ng = cJSON_GetArraySize(g);
    assert_true(*nt > 0 && *nt <= 64 && *ng > 0 && *ng <= 64);
    for (int i = 0; i < *nt; i++)
        tok[i] = cJSON_GetArrayItem(t, i)->valueint;
    for (int i = 0; i < *ng; i++)
        greedy[i] = cJSON_GetArrayItem(g, i)->valueint;
    cJSON_Delete(j);
}

static const gt_generate_opts k_greedy = {8, 0.0f, 0, 1.0f, 1, -1};

static void expect_transformers_greedy(const char *name) {
    char ck[512], dir[1024];
    imported(name, ck, sizeof ck, dir, sizeof dir);
    int32_t tok[64], want[64], *got;
    int nt, ng, n;
    read_expected(dir, tok, &nt, want, &ng);
    gt_generate_opts o = k_greedy;
    o.max_new_tokens = ng;
    gt_error err = {0};
    if (gt_generate(ck, tok, nt, &o, &got, &n, &err)) fail_msg("%s", err.msg);
    assert_int_equal(n, ng);
    assert_memory_equal(got, want, (size_t)ng * sizeof *got);
    free(got);
}

static void test_greedy_llama_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("llama");
}

static void test_greedy_mixtral_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("mixtral");
}

static void test_greedy_tied_scaled_llama_continuation_equals_transformers(void **state) {
    (void)state;
    expect_transformers_greedy("llama32");
}

static void run(const char *ck, const gt_generate_opts *o, int32_t *out) {
    static const int32_t prompt[] = {3, 17, 42};
    int32_t *got;
    int n;
    gt_error err = {0};
    if (gt_generate(ck, prompt, 3, o, &got, &n, &err)) fail_msg("%s", err.msg);
    assert_int_equal(n, o->max_new_tokens);
    memcpy(out, got, (size_t)n * sizeof *got);
    free(got);
}

static void test_sampling_repeats_per_seed_and_changes_with_it(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    gt_generate_opts o = {16, 1.0f, 0, 1.0f, 5, -1};
    int32_t a[16], b[16], c[16];
    run(ck, &o, a);
    run(ck, &o, b);
    o.seed = 6;
    run(ck, &o, c);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

static void test_top_k_of_one_is_greedy(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    gt_generate_opts o = {8, 1.5f, 1, 1.0f, 9, -1};
    int32_t a[8], b[8];
    run(ck, &o, a);
    run(ck, &k_greedy, b);
    assert_memory_equal(a, b, sizeof a);
}

static void test_generation_stops_at_the_stop_token(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    int32_t full[8], *got;
    run(ck, &k_greedy, full);
    gt_generate_opts o = k_greedy;
    o.stop_id = full[2];
    int n;
    gt_error err = {0};
    static const int32_t prompt[] = {3, 17, 42};
    assert_int_equal(gt_generate(ck, prompt, 3, &o, &got, &n, &err), GT_OK);
    int first = 0;
    while (full[first] != o.stop_id)
        first++;
    assert_int_equal(n, first + 1);
    free(got);
}

static void test_prompt_outside_the_vocabulary_is_refused(void **state) {
    (void)state;
    char ck[512], dir[1024];
    imported("llama", ck, sizeof ck, dir, sizeof dir);
    static const int32_t prompt[] = {3, 64};
    int32_t *got;
    int n;
    gt_error err = {0};
    assert_int_equal(gt_generate(ck, prompt, 2, &k_greedy, &got, &n, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "prompt token 1 is 64"));
    assert_null(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_llama_continuation_equals_transformers),
        cmocka_unit_test(test_greedy_mixtral_continuation_equals_transformers),
        cmocka_unit_test(test_greedy_tied_scaled_llama_continuation_equals_transformers),
        cmocka_unit_test(test_sampling_repeats_per_seed_and_changes_with_it),
        cmocka_unit_test(test_top_k_of_one_is_greedy),
        cmocka_unit_test(test_generation_stops_at_the_stop_token),
        cmocka_unit_test(test_prompt_outside_the_vocabulary_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
