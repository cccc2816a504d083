/* Token shards and data sources: shards round-trip; bad magic, wrong version, truncated files
 * and out-of-range ids are refused naming the file; targets are the next tokens; shuffling is
 * seeded and visits every sequence once per epoch; positions resume exactly; the held-out
 * split comes from the _val shards (or the last 5%) and mock validation uses another seed. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/keys.h"
#include "data/data.h"
#include "data/shard.h"
#include "shard_fixture.h"

#define T 8

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void data_config(gt_config *c, const char *prefix, int shuffle) {
    gt_config_defaults(c);
    char kv[600];
    set(c, "model.seq_length=8");
    set(c, "model.vocab_size=1000");
    set(c, "dataset.source=shards");
    set(c, shuffle ? "dataset.shuffle=true" : "dataset.shuffle=false");
    snprintf(kv, sizeof kv, "dataset.data_path=%s", prefix);
    set(c, kv);
}

/* tokens 0, 1, 2, ... n-1 (ids < vocab) */
static void write_counting(const char *path, int n, int vocab) {
    uint32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++)
        tok[i] = (uint32_t)(i % vocab);
    gt_error err = {0};
    if (gt_shard_write(path, tok, n, vocab, &err) != GT_OK) fail_msg("%s", err.msg);
    free(tok);
}

/* a set whose training shard holds 0, 1, 2, ... n-1 (and val[n_val] when given) */
static void write_counting_set(const char *prefix, int n, int vocab, const uint32_t *val,
                               int n_val) {
    uint32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++)
        tok[i] = (uint32_t)(i % vocab);
    gt_test_write_set(prefix, vocab, tok, n, val, n_val);
    free(tok);
}

static void test_shard_round_trips_tokens_in_narrowest_width(void **state) {
    (void)state;
    char dir[256], p16[300], p32[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(p16, sizeof p16, "%s/a.bin", dir);
    snprintf(p32, sizeof p32, "%s/b.bin", dir);
    uint32_t tok[5] = {0, 65535, 7, 1, 300};
    uint32_t big[3] = {70000, 0, 99999};
    gt_error err = {0};
    assert_int_equal(gt_shard_write(p16, tok, 5, 65536, &err), GT_OK);
    assert_int_equal(gt_shard_write(p32, big, 3, 100000, &err), GT_OK);
    gt_shard s;
    assert_int_equal(gt_shard_open(&s, p16, &err), GT_OK);
    assert_int_equal(s.width, 2);
    assert_int_equal(s.count, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(gt_shard_token(&s, i), tok[i]);
    gt_shard_close(&s);
    assert_int_equal(gt_shard_open(&s, p32, &err), GT_OK);
    assert_int_equal(s.width, 4);
    for (int i = 0; i < 3; i++)
        assert_int_equal(gt_shard_token(&s, i), big[i]);
    gt_shard_close(&s);
}

static void patch_int(const char *path, long offset, uint32_t value) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, offset, SEEK_SET);
    unsigned char b[4] = {(unsigned char)value, (unsigned char)(value >> 8),
                          (unsigned char)(value >> 16), (unsigned char)(value >> 24)};
    fwrite(b, 1, 4, f);
    fclose(f);
}

static void expect_open_fails(const char *path, const char *what) {
    gt_shard s;
    gt_error err = {0};
    assert_int_equal(gt_shard_open(&s, path, &err), GT_ERR_INVALID);
    if (!strstr(err.msg, what) || !strstr(err.msg, path))
        fail_msg("expected '%s' naming %s, got: %s", what, path, err.msg);
}

static void test_shard_with_bad_magic_is_refused(void **state) {
    (void)state;
    char dir[256], p[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/x.bin", dir);
    write_counting(p, 100, 50);
    patch_int(p, 0, 0x12345678);
    expect_open_fails(p, "not a graphtrain token shard");
}

static void test_shard_with_unknown_version_is_refused(void **state) {
    (void)state;
    char dir[256], p[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/x.bin", dir);
    write_counting(p, 100, 50);
    patch_int(p, 4 * GT_SHARD_H_VERSION, 99);
    expect_open_fails(p, "version 99");
}

static void test_truncated_shard_is_refused(void **state) {
    (void)state;
    char dir[256], p[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/x.bin", dir);
    write_counting(p, 100, 50);
    assert_int_equal(truncate(p, GT_SHARD_HEADER_BYTES + 2 * 60), 0);
    expect_open_fails(p, "truncated");
    assert_int_equal(truncate(p, 10), 0); /* not even a header */
    expect_open_fails(p, "truncated");
}

static void test_shard_with_id_outside_vocabulary_is_refused(void **state) {
    (void)state;
    char dir[256], p[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/x.bin", dir);
    write_counting(p, 100, 50);
    patch_int(p, GT_SHARD_HEADER_BYTES + 2 * 10, 60); /* tokens 10 and 11 become 60, 0 */
    expect_open_fails(p, "outside its vocabulary");
}

static void test_targets_are_the_next_tokens_in_order(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_counting_set(prefix, 4 * T + 1, 1000, NULL, 0); /* exactly 4 sequences */
    gt_config c;
    data_config(&c, prefix, 0);
    gt_data *d = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_int_equal(gt_data_num_samples(d), 4);
    int32_t tok[2 * T], tgt[2 * T];
    assert_int_equal(gt_data_next(d, tok, tgt, 2, &err), GT_OK);
    for (int i = 0; i < 2 * T; i++) {
        assert_int_equal(tok[i], i);
        assert_int_equal(tgt[i], i + 1);
    }
    assert_int_equal(gt_data_next(d, tok, tgt, 2, &err), GT_OK); /* sequences 2, 3 */
    assert_int_equal(tok[0], 2 * T);
    assert_int_equal(gt_data_next(d, tok, tgt, 1, &err), GT_OK); /* wraps to epoch 1 */
    assert_int_equal(tok[0], 0);
    assert_int_equal(gt_data_get_pos(d).epoch, 1);
    gt_data_destroy(d);
}

/* first token of each of n sequences / T = the sequence index */
static void order(gt_data *d, int n, int *seq) {
    gt_error err = {0};
    int32_t tok[T], tgt[T];
    for (int i = 0; i < n; i++) {
        assert_int_equal(gt_data_next(d, tok, tgt, 1, &err), GT_OK);
        seq[i] = tok[0] / T;
    }
}

static void test_shuffle_is_seeded_and_visits_each_sequence_once_per_epoch(void **state) {
    (void)state;
    enum { S = 50 };
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_counting_set(prefix, S * T + 1, 1000, NULL, 0);
    gt_config c;
    data_config(&c, prefix, 1);
    gt_data *a = NULL, *b = NULL, *other = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&a, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_int_equal(gt_data_create(&b, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    set(&c, "rng.seed=7");
    assert_int_equal(gt_data_create(&other, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    int sa[2 * S], sb[2 * S], so[S];
    order(a, 2 * S, sa);
    order(b, 2 * S, sb);
    order(other, S, so);
    assert_memory_equal(sa, sb, sizeof sa);
    assert_memory_not_equal(sa, so, sizeof so);
    int seen[S] = {0}, in_order = 1;
    for (int i = 0; i < S; i++) {
        seen[sa[i]]++;
        in_order &= sa[i] == i;
    }
    for (int i = 0; i < S; i++)
        assert_int_equal(seen[i], 1);
    assert_false(in_order);
    assert_memory_not_equal(sa, sa + S, S * sizeof(int)); /* each epoch has its own order */
    gt_data_destroy(a);
    gt_data_destroy(b);
    gt_data_destroy(other);
}

static void test_position_resumes_the_same_sequences(void **state) {
    (void)state;
    enum { S = 30 };
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_counting_set(prefix, S * T + 1, 1000, NULL, 0);
    gt_config c;
    data_config(&c, prefix, 1);
    gt_data *a = NULL, *b = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&a, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    int first[37], rest_a[20], rest_b[20];
    order(a, 37, first); /* into the second epoch */
    gt_data_pos pos = gt_data_get_pos(a);
    order(a, 20, rest_a);
    assert_int_equal(gt_data_create(&b, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_int_equal(gt_data_set_pos(b, pos, &err), GT_OK);
    order(b, 20, rest_b);
    assert_memory_equal(rest_a, rest_b, sizeof rest_a);
    gt_data_destroy(a);
    gt_data_destroy(b);
}

static void test_validation_split_reads_the_val_shards_only(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    uint32_t val[T + 1];
    for (int i = 0; i <= T; i++)
        val[i] = 900 + (uint32_t)i;
    gt_error err = {0};
    write_counting_set(prefix, 10 * T + 1, 1000, val, T + 1);
    gt_config c;
    data_config(&c, prefix, 0);
    gt_data *tr = NULL, *va = NULL;
    assert_int_equal(gt_data_create(&tr, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_int_equal(gt_data_create(&va, &c, GT_SPLIT_VALID, &err), GT_OK);
    assert_int_equal(gt_data_num_samples(tr), 10);
    assert_int_equal(gt_data_num_samples(va), 1);
    int32_t tok[T], tgt[T];
    assert_int_equal(gt_data_next(va, tok, tgt, 1, &err), GT_OK);
    assert_int_equal(tok[0], 900);
    gt_data_destroy(tr);
    gt_data_destroy(va);
}

static void test_single_shard_without_val_file_has_no_validation_split(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_counting_set(prefix, 10 * T + 1, 1000, NULL, 0);
    gt_config c;
    data_config(&c, prefix, 0);
    gt_data *va = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&va, &c, GT_SPLIT_VALID, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "train.eval_interval=0"));
}

static void test_shard_ids_beyond_model_vocab_are_refused_with_fix(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    write_counting_set(prefix, 10 * T + 1, 2000, NULL, 0);
    gt_config c;
    data_config(&c, prefix, 0); /* model.vocab_size=1000 < ids up to 80 ... */
    set(&c, "model.vocab_size=50");
    gt_data *d = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.vocab_size=2000"));
}

static void test_missing_shards_name_prepare_data(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/none", dir);
    gt_config c;
    data_config(&c, prefix, 0);
    gt_data *d = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "prepare-data"));
}

static void test_mock_validation_uses_another_seed(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    set(&c, "model.seq_length=8");
    set(&c, "model.vocab_size=1000");
    gt_data *a = NULL, *a2 = NULL, *v = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&a, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_int_equal(gt_data_create(&a2, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    assert_int_equal(gt_data_create(&v, &c, GT_SPLIT_VALID, &err), GT_OK);
    int32_t ta[4 * T], tg[4 * T], ta2[4 * T], tv[4 * T];
    assert_int_equal(gt_data_next(a, ta, tg, 4, &err), GT_OK);
    for (int i = 0; i + 1 < 4 * T; i++)
        if ((i + 1) % T) assert_int_equal(tg[i], ta[i + 1]);
    assert_int_equal(gt_data_next(a2, ta2, tg, 4, &err), GT_OK);
    assert_int_equal(gt_data_next(v, tv, tg, 4, &err), GT_OK);
    assert_memory_equal(ta, ta2, sizeof ta);
    assert_memory_not_equal(ta, tv, sizeof ta);
    for (int i = 0; i < 4 * T; i++)
        assert_true(ta[i] >= 0 && ta[i] < 1000);
    gt_data_destroy(a);
    gt_data_destroy(a2);
    gt_data_destroy(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_round_trips_tokens_in_narrowest_width),
        cmocka_unit_test(test_shard_with_bad_magic_is_refused),
        cmocka_unit_test(test_shard_with_unknown_version_is_refused),
        cmocka_unit_test(test_truncated_shard_is_refused),
        cmocka_unit_test(test_shard_with_id_outside_vocabulary_is_refused),
        cmocka_unit_test(test_targets_are_the_next_tokens_in_order),
        cmocka_unit_test(test_shuffle_is_seeded_and_visits_each_sequence_once_per_epoch),
        cmocka_unit_test(test_position_resumes_the_same_sequences),
        cmocka_unit_test(test_validation_split_reads_the_val_shards_only),
        cmocka_unit_test(test_single_shard_without_val_file_has_no_validation_split),
        cmocka_unit_test(test_shard_ids_beyond_model_vocab_are_refused_with_fix),
        cmocka_unit_test(test_missing_shards_name_prepare_data),
        cmocka_unit_test(test_mock_validation_uses_another_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
