/* Shard sets and their manifests: training reads only what a manifest lists and refuses a
 * set whose shards or vocabulary differ from it, by name; a prefix without a manifest is
 * refused naming prepare-data; a folder of several vocabularies, or with a shard no manifest
 * lists, is refused; an existing set is replaced only with force, and then its stale shards
 * go once the new set is complete. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/keys.h"
#include "data/data.h"
#include "data/shard.h"
#include "data/shard_set.h"
#include "data/tokenizer.h"
#include "shard_fixture.h"

#define T 8

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void data_config(gt_config *c, const char *path, int vocab) {
    gt_config_defaults(c);
    char kv[600];
    set(c, "model.seq_length=8");
    snprintf(kv, sizeof kv, "model.vocab_size=%d", vocab);
    set(c, kv);
    set(c, "dataset.source=shards");
    set(c, "dataset.shuffle=false");
    snprintf(kv, sizeof kv, "dataset.data_path=%s", path);
    set(c, kv);
}

static uint32_t *counting(int n, int vocab, int start) {
    uint32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++)
        tok[i] = (uint32_t)((start + i) % vocab);
    return tok;
}

static void write_set(const char *prefix, int vocab, int n_train, int start) {
    uint32_t *tok = counting(n_train, vocab, start);
    gt_test_write_set(prefix, vocab, tok, n_train, tok, T + 1);
    free(tok);
}

/* gt_data_create must fail; the message holds both words */
static void expect_refused(const char *path, int vocab, const char *a, const char *b) {
    gt_config c;
    data_config(&c, path, vocab);
    gt_data *d = NULL;
    gt_error err = {0};
    assert_int_not_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_null(d);
    if (!strstr(err.msg, a) || !strstr(err.msg, b))
        fail_msg("expected '%s' and '%s', got: %s", a, b, err.msg);
}

static int64_t samples(const char *path, int vocab) {
    gt_config c;
    data_config(&c, path, vocab);
    gt_data *d = NULL;
    gt_error err = {0};
    if (gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err) != GT_OK) fail_msg("%s", err.msg);
    int64_t n = gt_data_num_samples(d);
    gt_data_destroy(d);
    return n;
}

static void test_prefix_without_manifest_is_refused_naming_prepare_data(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(p, sizeof p, "%s_train_000000.bin", prefix);
    uint32_t *tok = counting(10 * T + 1, 1000, 0);
    gt_error err = {0};
    assert_int_equal(gt_shard_write(p, tok, 10 * T + 1, 1000, &err), GT_OK);
    free(tok);
    expect_refused(prefix, 1000, "no manifest", "graphtrain prepare-data");
}

static void test_shard_rewritten_after_its_manifest_is_refused_by_name(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_set(prefix, 1000, 10 * T + 1, 0);
    snprintf(p, sizeof p, "%s_train_000000.bin", prefix);
    uint32_t *tok = counting(10 * T + 1, 1000, 5); /* same count, other tokens */
    gt_error err = {0};
    assert_int_equal(gt_shard_write(p, tok, 10 * T + 1, 1000, &err), GT_OK);
    free(tok);
    expect_refused(prefix, 1000, p, "does not match manifest");
}

static void test_shard_of_another_length_is_refused_by_name(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_set(prefix, 1000, 10 * T + 1, 0);
    snprintf(p, sizeof p, "%s_train_000000.bin", prefix);
    uint32_t *tok = counting(20 * T + 1, 1000, 0);
    gt_error err = {0};
    assert_int_equal(gt_shard_write(p, tok, 20 * T + 1, 1000, &err), GT_OK);
    free(tok);
    expect_refused(prefix, 1000, p, "the manifest says 81");
}

static void test_vocabulary_rewritten_after_its_manifest_is_refused(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    const char *text = "the cat sat on the mat; the cat sat on the hat";
    gt_tokenizer *tk = NULL, *other = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, (const unsigned char *)text, strlen(text), 260, &err),
                     GT_OK);
    assert_int_equal(gt_tokenizer_add_eod(tk, &err), GT_OK);
    int vocab = gt_tokenizer_vocab_size(tk);
    uint32_t *tok = counting(10 * T + 1, vocab, 0);
    gt_shard_set w;
    assert_int_equal(gt_shard_set_begin(&w, prefix, vocab, tk, 0, &err), GT_OK);
    assert_int_equal(gt_shard_set_add(&w, 0, tok, 10 * T + 1, NULL, 0, &err), GT_OK);
    assert_int_equal(gt_shard_set_commit(&w, NULL, &err), GT_OK);
    gt_shard_set_end(&w);
    free(tok);
    assert_int_equal(samples(prefix, vocab), 10);
    /* another tokenizer's vocabulary under the set's name (a half-finished re-run) */
    assert_int_equal(gt_bpe_train(&other, (const unsigned char *)"abababab", 8, 258, &err), GT_OK);
    snprintf(p, sizeof p, "%s.vocab", prefix);
    assert_int_equal(gt_tokenizer_save(other, p, &err), GT_OK);
    expect_refused(prefix, vocab, p, "does not match manifest");
    gt_tokenizer_destroy(tk);
    gt_tokenizer_destroy(other);
}

static void test_shards_the_manifest_does_not_list_are_not_read(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_set(prefix, 1000, 10 * T + 1, 0);
    snprintf(p, sizeof p, "%s_train_000001.bin", prefix); /* a leftover of an earlier set */
    uint32_t *tok = counting(30 * T + 1, 1000, 0);
    gt_error err = {0};
    assert_int_equal(gt_shard_write(p, tok, 30 * T + 1, 1000, &err), GT_OK);
    free(tok);
    assert_int_equal(samples(prefix, 1000), 10);
}

static void test_folder_with_shards_of_two_vocabularies_is_refused(void **state) {
    (void)state;
    char dir[256], a[300], b[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_set(a, 1000, 10 * T + 1, 0);
    write_set(b, 2000, 10 * T + 1, 0);
    expect_refused(dir, 2000, "several vocabularies", "a.manifest");
}

static void test_folder_with_a_shard_no_manifest_lists_is_refused(void **state) {
    (void)state;
    char dir[256], a[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    write_set(a, 1000, 10 * T + 1, 0);
    snprintf(p, sizeof p, "%s/stray.bin", dir);
    uint32_t *tok = counting(10 * T + 1, 1000, 0);
    gt_error err = {0};
    assert_int_equal(gt_shard_write(p, tok, 10 * T + 1, 1000, &err), GT_OK);
    free(tok);
    expect_refused(dir, 1000, "stray.bin", "no manifest there lists");
}

static void test_folder_of_sets_with_one_vocabulary_reads_them_all(void **state) {
    (void)state;
    char dir[256], a[300], b[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_set(a, 1000, 10 * T + 1, 0);
    write_set(b, 1000, 5 * T + 1, 0);
    assert_int_equal(samples(dir, 1000), 15);
}

static void test_existing_set_is_refused_without_force(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_set(prefix, 1000, 10 * T + 1, 0);
    gt_shard_set w;
    gt_error err = {0};
    assert_int_equal(gt_shard_set_begin(&w, prefix, 1000, NULL, 0, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--force"));
    assert_non_null(strstr(err.msg, "already holds a shard set"));
    gt_shard_set_end(&w);
}

static void test_force_removes_the_old_sets_shards_once_the_new_one_is_complete(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    uint32_t *tok = counting(30 * T + 3, 1000, 0);
    gt_shard_set w;
    gt_error err = {0};
    assert_int_equal(gt_shard_set_begin(&w, prefix, 1000, NULL, 0, &err), GT_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(gt_shard_set_add(&w, 0, tok + i * (10 * T + 1), 10 * T + 1, NULL, 0, &err),
                         GT_OK);
    assert_int_equal(gt_shard_set_commit(&w, NULL, &err), GT_OK);
    gt_shard_set_end(&w);
    /* the re-run: one shard; the old ones stay until its manifest is written */
    assert_int_equal(gt_shard_set_begin(&w, prefix, 1000, NULL, 1, &err), GT_OK);
    assert_int_equal(gt_shard_set_add(&w, 0, tok, 4 * T + 1, NULL, 0, &err), GT_OK);
    struct stat st;
    snprintf(p, sizeof p, "%s_train_000002.bin", prefix);
    assert_int_equal(stat(p, &st), 0);
    int removed = 0;
    assert_int_equal(gt_shard_set_commit(&w, &removed, &err), GT_OK);
    gt_shard_set_end(&w);
    assert_int_equal(removed, 2);
    assert_int_not_equal(stat(p, &st), 0);
    assert_int_equal(samples(prefix, 1000), 4);
    free(tok);
}

/* the disk-full case: a re-run that wrote a new training shard and stopped leaves the old
 * manifest, which no longer matches; training refuses instead of mixing the two sets */
static void test_unfinished_rewrite_is_refused_not_mixed(void **state) {
    (void)state;
    char dir[256], prefix[300], p[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_set(prefix, 1000, 10 * T + 1, 0);
    uint32_t *tok = counting(10 * T + 1, 1000, 7);
    gt_shard_set w;
    gt_error err = {0};
    assert_int_equal(gt_shard_set_begin(&w, prefix, 1000, NULL, 1, &err), GT_OK);
    assert_int_equal(gt_shard_set_add(&w, 0, tok, 10 * T + 1, NULL, 0, &err), GT_OK);
    gt_shard_set_end(&w); /* no commit: the validation shard and manifest were never written */
    free(tok);
    snprintf(p, sizeof p, "%s_train_000000.bin", prefix);
    expect_refused(prefix, 1000, p, "does not match manifest");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_without_manifest_is_refused_naming_prepare_data),
        cmocka_unit_test(test_shard_rewritten_after_its_manifest_is_refused_by_name),
        cmocka_unit_test(test_shard_of_another_length_is_refused_by_name),
        cmocka_unit_test(test_vocabulary_rewritten_after_its_manifest_is_refused),
        cmocka_unit_test(test_shards_the_manifest_does_not_list_are_not_read),
        cmocka_unit_test(test_folder_with_shards_of_two_vocabularies_is_refused),
        cmocka_unit_test(test_folder_with_a_shard_no_manifest_lists_is_refused),
        cmocka_unit_test(test_folder_of_sets_with_one_vocabulary_reads_them_all),
        cmocka_unit_test(test_existing_set_is_refused_without_force),
        cmocka_unit_test(test_force_removes_the_old_sets_shards_once_the_new_one_is_complete),
        cmocka_unit_test(test_unfinished_rewrite_is_refused_not_mixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
