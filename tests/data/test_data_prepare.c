/* graphtrain prepare-data through the binary: text becomes training and validation shards
 * whose tokens decode back to the input exactly, with the vocabulary beside them; bad
 * arguments are refused with a usage hint. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_data_writes_shards_that_decode_to_the_input),
        cmocka_unit_test(test_prepare_data_without_output_is_refused),
        cmocka_unit_test(test_prepare_data_missing_input_names_the_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
