/* graphtrain prepare-data through the binary: text becomes training and validation shards
 * whose tokens decode back to the input exactly, with the vocabulary and the manifest beside
 * them and an end-of-document token after each input; an existing set is replaced only with
 * --force, which removes its stale shards; bad arguments are refused with a usage hint. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/shard.h"
#include "data/tokenizer.h"

static void append_shard(const char *path, uint32_t **ids, size_t *n, int *vocab) {
    gt_shard s;
    gt_error err = {0};
    if (gt_shard_open(&s, path, &err) != GT_OK) fail_msg("%s", err.msg);
    *ids = realloc(*ids, (*n + (size_t)s.count) * sizeof **ids);
    for (int64_t i = 0; i < s.count; i++)
        (*ids)[*n + (size_t)i] = gt_shard_token(&s, i);
    *n += (size_t)s.count;
    *vocab = s.vocab;
    gt_shard_close(&s);
}

static void test_prepare_data_writes_shards_that_decode_to_the_input(void **state) {
    (void)state;
    if (!getenv("GT_BINARY")) skip();
    char dir[256], in1[300], in2[300], prefix[300], args[1200], out[8192], path[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(in1, sizeof in1, "%s/a.txt", dir);
    snprintf(in2, sizeof in2, "%s/b.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    /* some text with repeats, plus a few bytes that are not UTF-8 */
    FILE *f = fopen(in1, "wb");
    for (int i = 0; i < 300; i++)
        fprintf(f, "Fortune %d: the quick brown fox.\n%%\n", i % 17);
    fclose(f);
    f = fopen(in2, "wb");
    for (int i = 0; i < 200; i++)
        fputc((i * 37) & 0xff, f);
    fclose(f);
    snprintf(args, sizeof args, "prepare-data --input %s %s --output %s --vocab-size 280", in1, in2,
             prefix);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    assert_non_null(strstr(out, "round trip exact"));

    uint32_t *ids = NULL;
    size_t n = 0;
    int vocab = 0;
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    append_shard(path, &ids, &n, &vocab);
    size_t n_train = n;
    snprintf(path, sizeof path, "%s_val_000000.bin", prefix);
    append_shard(path, &ids, &n, &vocab);
    assert_int_equal(vocab, 280);
    assert_true(n - n_train > 0 && n - n_train < n / 10); /* about 5% held out */

    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    snprintf(path, sizeof path, "%s.vocab", prefix);
    assert_int_equal(gt_tokenizer_load(&tk, path, &err), GT_OK);
    unsigned char *text;
    size_t text_n;
    assert_int_equal(gt_tokenizer_decode(tk, ids, n, &text, &text_n, &err), GT_OK);
    /* the two inputs, concatenated */
    char *want = malloc(20000);
    size_t w = 0;
    f = fopen(in1, "rb");
    w += fread(want, 1, 20000, f);
    fclose(f);
    f = fopen(in2, "rb");
    w += fread(want + w, 1, 20000 - w, f);
    fclose(f);
    assert_int_equal(text_n, w);
    assert_memory_equal(text, want, w);
    assert_true(n < w / 2); /* the learned merges compress the repetitive text */
    free(want);
    free(text);
    free(ids);
    gt_tokenizer_destroy(tk);
}

static void test_prepare_data_without_output_is_refused(void **state) {
    (void)state;
    if (!getenv("GT_BINARY")) skip();
    char out[4096];
    int rc = gt_test_run("prepare-data --input /etc/hostname", out, sizeof out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "--output PREFIX"));
}

static void test_prepare_data_missing_input_names_the_file(void **state) {
    (void)state;
    if (!getenv("GT_BINARY")) skip();
    char out[4096];
    int rc =
        gt_test_run("prepare-data --input /nonexistent/x.txt --output /tmp/never", out, sizeof out);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "/nonexistent/x.txt"));
}

/* a text file of n lines with repeats (so BPE has pairs to merge) */
static void write_corpus(const char *path, int lines, int salt) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < lines; i++)
        fprintf(f, "Fortune %d of %d: the quick brown fox jumps.\n%%\n", (i * 7 + salt) % 23, salt);
    fclose(f);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_prepare_data_writes_end_of_document_after_each_input(void **state) {
    (void)state;
    if (!getenv("GT_BINARY")) skip();
    char dir[256], in1[300], in2[300], prefix[300], args[1200], out[8192], path[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(in1, sizeof in1, "%s/a.txt", dir);
    snprintf(in2, sizeof in2, "%s/b.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    write_corpus(in1, 200, 1);
    write_corpus(in2, 200, 2);
    snprintf(args, sizeof args, "prepare-data --input %s %s --output %s --vocab-size 300", in1, in2,
             prefix);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    snprintf(path, sizeof path, "%s.manifest", prefix);
    assert_true(file_exists(path));
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    snprintf(path, sizeof path, "%s.vocab", prefix);
    assert_int_equal(gt_tokenizer_load(&tk, path, &err), GT_OK);
    assert_int_equal(gt_tokenizer_vocab_size(tk), 300); /* --vocab-size includes it */
    assert_int_equal(gt_tokenizer_eod(tk), 299);        /* the last id */
    uint32_t *ids = NULL;
    size_t n = 0;
    int vocab = 0;
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    append_shard(path, &ids, &n, &vocab);
    snprintf(path, sizeof path, "%s_val_000000.bin", prefix);
    append_shard(path, &ids, &n, &vocab);
    int eods = 0;
    for (size_t i = 0; i < n; i++)
        eods += ids[i] == 299;
    assert_int_equal(eods, 2);
    assert_int_equal(ids[n - 1], 299); /* after the last document too, as Megatron appends */
    free(ids);
    gt_tokenizer_destroy(tk);
}

static void test_prepare_data_refuses_an_existing_set_without_force(void **state) {
    (void)state;
    if (!getenv("GT_BINARY")) skip();
    char dir[256], in[300], prefix[300], args[1200], out[8192];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/a.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    write_corpus(in, 200, 1);
    snprintf(args, sizeof args, "prepare-data --input %s --output %s --vocab-size 300", in, prefix);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    rc = gt_test_run(args, out, sizeof out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "already holds a shard set"));
    assert_non_null(strstr(out, "--force"));
    snprintf(args, sizeof args, "prepare-data --input %s --output %s --vocab-size 300 --force", in,
             prefix);
    rc = gt_test_run(args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d with --force: %s", rc, out);
}

static void test_prepare_data_force_removes_the_old_sets_extra_shards(void **state) {
    (void)state;
    if (!getenv("GT_BINARY")) skip();
    char dir[256], in[300], prefix[300], args[1200], out[8192], path[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/a.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    write_corpus(in, 1500, 3);
    snprintf(args, sizeof args,
             "prepare-data --input %s --output %s --vocab-size 300 --shard-tokens 1024", in,
             prefix);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    snprintf(path, sizeof path, "%s_train_000002.bin", prefix);
    assert_true(file_exists(path));
    snprintf(args, sizeof args, "prepare-data --input %s --output %s --vocab-size 300 --force", in,
             prefix);
    rc = gt_test_run(args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    assert_non_null(strstr(out, "stale shard"));
    assert_false(file_exists(path));
    snprintf(path, sizeof path, "%s_train_000001.bin", prefix);
    assert_false(file_exists(path));
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    assert_true(file_exists(path));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_data_writes_shards_that_decode_to_the_input),
        cmocka_unit_test(test_prepare_data_without_output_is_refused),
        cmocka_unit_test(test_prepare_data_missing_input_names_the_file),
        cmocka_unit_test(test_prepare_data_writes_end_of_document_after_each_input),
        cmocka_unit_test(test_prepare_data_refuses_an_existing_set_without_force),
        cmocka_unit_test(test_prepare_data_force_removes_the_old_sets_extra_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
