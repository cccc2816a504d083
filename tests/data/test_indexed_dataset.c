/* Megatron indexed datasets: a dataset written here from the documented .idx/.bin layout reads
 * back; corrupt indexes are refused by name; dataset.split and data_path blends parse as
 * Megatron parses them; samples equal those Megatron's GPTDataset / BlendedDataset draw (the
 * fixture of tests/data/megatron_fixture.py, built with numpy's RandomState); the sample order
 * does not depend on how many readers split the global batch. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/keys.h"
#include "data/blend.h"
#include "data/data.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

#define FIX_T 8
#define MAX_SAMPLES 128

static void put(FILE *f, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n) fail_msg("short write");
}

/* Writes PREFIX.idx/.bin in MMapIndexedDataset's layout: one sequence per document. */
static void write_megatron(const char *prefix, int dtype, const int64_t *tok, const int *lens,
                           int n_docs) {
    char path[600];
    int item = dtype == GT_IDX_UINT16 || dtype == GT_IDX_INT16 ? 2 : dtype == GT_IDX_INT32 ? 4 : 8;
    snprintf(path, sizeof path, "%s.bin", prefix);
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    int k = 0;
    for (int d = 0; d < n_docs; d++)
        for (int t = 0; t < lens[d]; t++, k++) {
            int64_t v = tok[k];
            put(f, &v, (size_t)item); /* little-endian host: the low bytes first */
        }
    fclose(f);
    snprintf(path, sizeof path, "%s.idx", prefix);
    f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    put(f, GT_IDX_MAGIC, GT_IDX_MAGIC_BYTES);
    uint64_t version = 1, s = (uint64_t)n_docs, dc = (uint64_t)n_docs + 1;
    uint8_t code = (uint8_t)dtype;
    put(f, &version, 8);
    put(f, &code, 1);
    put(f, &s, 8);
    put(f, &dc, 8);
    for (int d = 0; d < n_docs; d++) {
        int32_t l = lens[d];
        put(f, &l, 4);
    }
    int64_t ptr = 0;
    for (int d = 0; d < n_docs; d++) {
        put(f, &ptr, 8);
        ptr += (int64_t)lens[d] * item;
    }
    for (int64_t d = 0; d <= n_docs; d++)
        put(f, &d, 8);
    fclose(f);
}

static void test_dataset_written_in_megatron_layout_reads_back(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/ds", dir);
    const int lens[3] = {3, 0, 4};
    const int64_t tok[7] = {5, 60000, 7, 1, 2, 3, 65535};
    write_megatron(prefix, GT_IDX_UINT16, tok, lens, 3);
    assert_true(gt_indexed_exists(prefix));
    gt_indexed_dataset *ds = NULL;
    gt_error err = {0};
    if (gt_indexed_open(&ds, prefix, &err)) fail_msg("%s", err.msg);
    assert_int_equal(gt_indexed_num_sequences(ds), 3);
    assert_int_equal(gt_indexed_num_documents(ds), 3);
    assert_int_equal(gt_indexed_dtype(ds), GT_IDX_UINT16);
    int32_t out[4];
    assert_int_equal(gt_indexed_sequence_length(ds, 2), 4);
    assert_int_equal(gt_indexed_read(ds, 2, 0, 4, 65536, out, &err), GT_OK);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[3], 65535);
    assert_int_equal(gt_indexed_read(ds, 0, 1, 2, 65536, out, &err), GT_OK);
    assert_int_equal(out[0], 60000);
    assert_int_equal(out[1], 7);
    /* a token id the model cannot embed is refused, not passed on */
    assert_int_equal(gt_indexed_read(ds, 0, 0, 3, 1000, out, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.vocab_size"));
    /* reading past a sequence's end is refused */
    assert_int_equal(gt_indexed_read(ds, 0, 2, 2, 65536, out, &err), GT_ERR_INVALID);
    gt_indexed_close(ds);
}

/* Overwrites `n` bytes at `off` of PREFIX.idx (or truncates it to `off` when data is NULL). */
static void patch_idx(const char *prefix, long off, const void *data, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s.idx", prefix);
    if (!data) {
        if (truncate(path, off)) fail_msg("truncate %s", path);
        return;
    }
    FILE *f = fopen(path, "r+b");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, off, SEEK_SET);
    put(f, data, n);
    fclose(f);
}

static void expect_refused(const char *prefix, const char *words) {
    gt_indexed_dataset *ds = NULL;
    gt_error err = {0};
    if (gt_indexed_open(&ds, prefix, &err) != GT_ERR_INVALID) {
        gt_indexed_close(ds);
        fail_msg("a corrupt index ('%s' expected) was accepted", words);
    }
    assert_null(ds);
    assert_non_null(strstr(err.msg, ".idx"));
    if (!strstr(err.msg, words)) fail_msg("expected '%s' in: %s", words, err.msg);
}

static void test_corrupt_index_is_refused_by_name(void **state) {
    (void)state;
    char dir[256], prefix[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    const int lens[2] = {2, 3};
    const int64_t tok[5] = {1, 2, 3, 4, 5};
    const long off_lengths = GT_IDX_HEADER_BYTES, off_ptrs = off_lengths + 2 * 4,
               off_docs = off_ptrs + 2 * 8;
    struct {
        long off;
        int64_t value;
        size_t n;
        const char *words;
    } cases[] = {
        {0, 0x58, 1, "bad magic"},
        {9, 2, 8, "version 2"},
        {17, 9, 1, "unknown dtype code 9"},
        {17, 7, 1, "floating-point"},
        {18, 1000000, 8, "do not fit"},
        {26, 2, 8, "need"},
        {off_lengths, -1, 4, "outside"},
        {off_lengths + 4, 100, 4, "outside"},
        {off_ptrs + 8, 3, 8, "outside"}, /* odd byte offset for 2-byte tokens */
        {off_docs + 8, 3, 8, "document index"},
        {off_docs + 16, 1, 8, "document index"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_megatron(prefix, GT_IDX_UINT16, tok, lens, 2);
        patch_idx(prefix, cases[i].off, &cases[i].value, cases[i].n);
        expect_refused(prefix, cases[i].words);
    }
    write_megatron(prefix, GT_IDX_UINT16, tok, lens, 2);
    patch_idx(prefix, off_docs + 4, NULL, 0); /* truncated inside the document indices */
    expect_refused(prefix, "do not fit");
    write_megatron(prefix, GT_IDX_UINT16, tok, lens, 2);
    patch_idx(prefix, 20, NULL, 0); /* shorter than the header */
    expect_refused(prefix, "too short");
}

static void test_split_shares_normalize_and_round_half_to_even(void **state) {
    (void)state;
    double s[GT_MSPLIT_N];
    gt_error err = {0};
    int64_t b, e;
    assert_int_equal(gt_split_parse("969,30,1", s, &err), GT_OK);
    assert_true(gt_split_range(s, GT_MSPLIT_TRAIN, 1000, &b, &e));
    assert_int_equal(b, 0);
    assert_int_equal(e, 969);
    assert_true(gt_split_range(s, GT_MSPLIT_VALID, 1000, &b, &e));
    assert_int_equal(b, 969);
    assert_int_equal(e, 999);
    assert_true(gt_split_range(s, GT_MSPLIT_TEST, 1000, &b, &e));
    assert_int_equal(e, 1000);
    /* 2.5 sequences round to 2 and 7.5 to 8, as Python's round() does */
    assert_int_equal(gt_split_parse("1 1 2", s, &err), GT_OK);
    assert_true(gt_split_range(s, GT_MSPLIT_VALID, 10, &b, &e));
    assert_int_equal(b, 2);
    assert_int_equal(e, 5);
    assert_true(gt_split_range(s, GT_MSPLIT_TEST, 10, &b, &e));
    assert_int_equal(b, 5);
    assert_int_equal(gt_split_parse("3,1", s, &err), GT_OK); /* test share defaults to 0 */
    assert_false(gt_split_range(s, GT_MSPLIT_TEST, 10, &b, &e));
    assert_int_equal(gt_split_parse("0,0,0", s, &err), GT_ERR_INVALID);
    assert_int_equal(gt_split_parse("90;10", s, &err), GT_ERR_INVALID);
    assert_int_equal(gt_split_parse("1,2,3,4", s, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "dataset.split"));
}

static void test_data_path_blend_parses_as_megatron_does(void **state) {
    (void)state;
    gt_blend_spec s;
    gt_error err = {0};
    assert_int_equal(gt_blend_parse("0.3 /d/a  0.9 /d/b", &s, &err), GT_OK);
    assert_int_equal(s.n, 2);
    assert_true(s.weighted);
    assert_float_equal(s.weight[0], 0.25, 1e-12);
    assert_string_equal(s.prefix[1], "/d/b");
    gt_blend_spec_free(&s);
    assert_int_equal(gt_blend_parse("1,/d/a,3,/d/b", &s, &err), GT_OK); /* a YAML list */
    assert_true(s.weighted);
    assert_float_equal(s.weight[1], 0.75, 1e-12);
    gt_blend_spec_free(&s);
    assert_int_equal(gt_blend_parse("/d/a", &s, &err), GT_OK);
    assert_int_equal(s.n, 1);
    assert_false(s.weighted);
    gt_blend_spec_free(&s);
    assert_int_equal(gt_blend_parse("/d/a /d/b /d/c", &s, &err), GT_OK);
    assert_int_equal(s.n, 3);
    assert_false(s.weighted);
    gt_blend_spec_free(&s);
    assert_int_equal(gt_blend_parse("0.3 /d/a x /d/b", &s, &err), GT_ERR_INVALID);
    assert_int_equal(gt_blend_parse("0 /d/a 0 /d/b", &s, &err), GT_ERR_INVALID);
    assert_int_equal(gt_blend_parse("-1 /d/a 2 /d/b", &s, &err), GT_ERR_INVALID);
}

static void test_blend_indices_follow_the_weights(void **state) {
    (void)state;
    const double w[3] = {0.2, 0.3, 0.5};
    int16_t src[1000];
    int64_t smp[1000], count[3] = {0};
    gt_blend_indices(w, 3, 1000, src, smp);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(smp[i], count[src[i]]); /* each source's samples in order */
        count[src[i]]++;
        for (int k = 0; k < 3 && i >= 10; k++) /* never more than a sample off its share */
            assert_true(llabs(count[k] - (int64_t)(w[k] * (i + 1))) <= 1);
    }
    assert_int_equal(count[0], 200);
    assert_int_equal(count[2], 500);
}

/* ---- the fixture: samples as Megatron draws them ---- */
typedef struct expected {
    int n;
    int32_t tok[MAX_SAMPLES][FIX_T + 1];
} expected;

static void load_case(const char *name, expected *x) {
    char path[600], line[512], want[64];
    gt_test_source_path("tests/data/fixtures/megatron_expected.txt", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (re-run tests/data/megatron_fixture.py)", path);
    snprintf(want, sizeof want, "case %s ", name);
    x->n = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want))) continue;
        x->n = atoi(line + strlen(want));
        assert_true(x->n > 0 && x->n <= MAX_SAMPLES);
        for (int i = 0; i < x->n; i++)
            for (int t = 0; t <= FIX_T; t++)
                if (fscanf(f, "%d", &x->tok[i][t]) != 1) fail_msg("%s: short case %s", path, name);
        break;
    }
    fclose(f);
    if (x->n < 0) fail_msg("%s has no case %s", path, name);
}

static void fixture_prefix(const char *name, char *buf, size_t n) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/data/fixtures/%s", name);
    gt_test_source_path(rel, buf, n);
}

static void check_case(const char *name, const char *data_path, const char *split, int which,
                       int64_t num_samples, uint32_t seed) {
    static expected x;
    load_case(name, &x);
    gt_blend_params p = {data_path, split, which, num_samples, seed, FIX_T};
    gt_blend_data *b = NULL;
    gt_error err = {0};
    if (gt_blend_data_open(&b, &p, &err)) fail_msg("%s: %s", name, err.msg);
    if (gt_blend_data_len(b) != x.n)
        fail_msg("%s: %lld samples, Megatron has %d", name, (long long)gt_blend_data_len(b), x.n);
    for (int i = 0; i < x.n; i++) {
        int32_t tok[FIX_T + 1];
        if (gt_blend_data_sample(b, i, 1000, tok, &err)) fail_msg("%s: %s", name, err.msg);
        for (int t = 0; t <= FIX_T; t++)
            if (tok[t] != x.tok[i][t])
                fail_msg("%s: sample %d token %d is %d, Megatron's is %d", name, i, t, tok[t],
                         x.tok[i][t]);
    }
    gt_blend_data_close(b);
}

static void test_samples_equal_megatron_gpt_dataset(void **state) {
    (void)state;
    char a[600];
    fixture_prefix("megatron_a", a, sizeof a);
    /* three epochs whose last is shuffled apart, a validation split, one epoch */
    check_case("single_train", a, "80,15,5", GT_MSPLIT_TRAIN, 60, 1234);
    check_case("single_valid", a, "80,15,5", GT_MSPLIT_VALID, 7, 1234);
    check_case("single_one_epoch", a, "969,30,1", GT_MSPLIT_TRAIN, -1, 0);
}

static void test_weighted_blend_equals_megatron_blended_dataset(void **state) {
    (void)state;
    char a[600], b[600], path[1300];
    fixture_prefix("megatron_a", a, sizeof a);
    fixture_prefix("megatron_b", b, sizeof b);
    snprintf(path, sizeof path, "0.3 %s 0.7 %s", a, b);
    check_case("blend_train", path, "90,10", GT_MSPLIT_TRAIN, 40, 7);
}

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void megatron_config(gt_config *c, const char *data_path, const char *split) {
    char kv[1400];
    gt_config_defaults(c);
    set(c, "model.seq_length=8");
    set(c, "model.vocab_size=1000");
    set(c, "dataset.source=shards");
    set(c, "rng.seed=1234");
    set(c, "train.train_iters=15");
    set(c, "train.global_batch_size=4");
    snprintf(kv, sizeof kv, "dataset.data_path=%s", data_path);
    set(c, kv);
    snprintf(kv, sizeof kv, "dataset.split=%s", split);
    set(c, kv);
}

/* R readers each take their slice of every global batch of G samples (as data-parallel ranks
 * do); put together they must see what one reader sees, in the same order. */
static void test_sample_order_does_not_depend_on_reader_count(void **state) {
    (void)state;
    static expected x;
    load_case("single_train", &x);
    char a[600];
    fixture_prefix("megatron_a", a, sizeof a);
    gt_config c;
    megatron_config(&c, a, "80,15,5"); /* 15 steps x 4 = Megatron's 60 training samples */
    enum { G = 12, STEPS = 6 };        /* 72 samples: past the end, so the wrap is covered too */
    static int32_t tok[G * FIX_T], tgt[G * FIX_T];
    gt_error err = {0};
    for (int readers = 1; readers <= 4; readers++) {
        if (G % readers) continue;
        int per = G / readers;
        gt_data *d[4] = {0};
        for (int r = 0; r < readers; r++)
            if (gt_data_create(&d[r], &c, GT_SPLIT_TRAIN, &err)) fail_msg("%s", err.msg);
        assert_non_null(strstr(gt_data_describe(d[0]), "Megatron"));
        assert_int_equal(gt_data_num_samples(d[0]), x.n);
        for (int step = 0; step < STEPS; step++)
            for (int r = 0; r < readers; r++) {
                uint64_t first = (uint64_t)step * G + (uint64_t)r * per;
                gt_data_pos pos = {first / (uint64_t)x.n, first % (uint64_t)x.n};
                assert_int_equal(gt_data_set_pos(d[r], pos, &err), GT_OK);
                assert_int_equal(gt_data_next(d[r], tok, tgt, per, &err), GT_OK);
                for (int b = 0; b < per; b++) {
                    int g = (int)((first + (uint64_t)b) % (uint64_t)x.n);
                    for (int t = 0; t < FIX_T; t++) {
                        assert_int_equal(tok[b * FIX_T + t], x.tok[g][t]);
                        assert_int_equal(tgt[b * FIX_T + t], x.tok[g][t + 1]);
                    }
                }
            }
        for (int r = 0; r < readers; r++)
            gt_data_destroy(d[r]);
    }
}

static void test_empty_validation_split_is_refused_naming_dataset_split(void **state) {
    (void)state;
    char a[600];
    fixture_prefix("megatron_a", a, sizeof a);
    gt_config c;
    megatron_config(&c, a, "100,0,0");
    gt_data *d = NULL;
    gt_error err = {0};
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    gt_data_destroy(d);
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_VALID, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "dataset.split"));
    megatron_config(&c, a, "80,15,5");
    set(&c, "dataset.shuffle=false"); /* Megatron has no unshuffled order */
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "dataset.shuffle"));
    megatron_config(&c, a, "80,15,5");
    set(&c, "model.vocab_size=500"); /* the fixture's ids reach 999 */
    assert_int_equal(gt_data_create(&d, &c, GT_SPLIT_TRAIN, &err), GT_OK);
    static int32_t tok[60 * FIX_T], tgt[60 * FIX_T];
    assert_int_equal(gt_data_next(d, tok, tgt, 60, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "model.vocab_size"));
    gt_data_destroy(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataset_written_in_megatron_layout_reads_back),
        cmocka_unit_test(test_corrupt_index_is_refused_by_name),
        cmocka_unit_test(test_split_shares_normalize_and_round_half_to_even),
        cmocka_unit_test(test_data_path_blend_parses_as_megatron_does),
        cmocka_unit_test(test_blend_indices_follow_the_weights),
        cmocka_unit_test(test_samples_equal_megatron_gpt_dataset),
        cmocka_unit_test(test_weighted_blend_equals_megatron_blended_dataset),
        cmocka_unit_test(test_sample_order_does_not_depend_on_reader_count),
        cmocka_unit_test(test_empty_validation_split_is_refused_naming_dataset_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
