/* The tokenizer files of a Hugging Face export: tokenizer.json written from a byte-level BPE
 * learned by graphtrain, read back by graphtrain's own tokenizer.json reader (the reader of
 * prepare-data --tokenizer), encodes a multilingual text to the same ids as the original,
 * the end-of-document token included as a special token; tokenizer_config.json names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "testlib.h"
#include "train/hf_tokenizer_out.h"

static const char k_corpus[] =
    "the quick brown fox jumps over the lazy dog; it’s the end—café au lait, 東京 and 数字, "
    "digits 12345 and ١٢٣٤, HELLO world! The model trains on the data, the data trains it. ";
static const char k_text[] = "the lazy café 東京 it’s end—fox 12345 ١٢٣ HELLO, the data!";

static gt_tokenizer *learned(void) {
    size_t n = strlen(k_corpus), reps = 20;
    unsigned char *text = malloc(n * reps);
    for (size_t i = 0; i < reps * n; i++) /* the corpus repeated; no terminator needed */
        text[i] = (unsigned char)k_corpus[i % n];
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, text, n * reps, 400, &err), GT_OK);
    assert_int_equal(gt_tokenizer_add_eod(tk, &err), GT_OK);
    free(text);
    return tk;
}

static void encode(const gt_tokenizer *tk, const char *text, uint32_t **ids, size_t *n) {
    size_t cap = 0;
    gt_error err = {0};
    *ids = NULL;
    *n = 0;
    int rc = gt_tokenizer_encode(tk, (const unsigned char *)text, strlen(text), ids, n, &cap, &err);
    if (rc) fail_msg("encode: %s", err.msg);
}

static void test_exported_tokenizer_json_encodes_the_same_ids(void **state) {
    (void)state;
    gt_tokenizer *tk = learned(), *back = NULL;
    char tmp[256], path[400];
    gt_test_tmpdir(tmp, sizeof tmp);
    snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
    gt_error err = {0};
    cJSON *j = gt_hf_tokenizer_json(tk);
    assert_non_null(j);
    assert_int_equal(gt_json_write_file(path, j, &err), GT_OK);
    cJSON_Delete(j);
    int rc = gt_tokenizer_load_hf(&back, path, &err);
    if (rc) fail_msg("reading the exported tokenizer.json: %s", err.msg);
    assert_int_equal(gt_tokenizer_vocab_size(back), gt_tokenizer_vocab_size(tk));
    uint32_t *a, *b;
    size_t na, nb;
    encode(tk, k_text, &a, &na);
    encode(back, k_text, &b, &nb);
    assert_true(na > 10 && na < strlen(k_text)); /* merges were used */
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    /* the end-of-document token: a special token of the file, one id in the text */
    char with_eod[256];
    snprintf(with_eod, sizeof with_eod, "the data<|endoftext|>the fox");
    free(b);
    encode(back, with_eod, &b, &nb);
    int seen = 0;
    for (size_t i = 0; i < nb; i++)
        seen += (int)b[i] == gt_tokenizer_eod(tk);
    assert_int_equal(seen, 1);
    free(a);
    free(b);
    gt_tokenizer_destroy(back);
    gt_tokenizer_destroy(tk);
}

static void test_tokenizer_config_names_the_end_of_document_token(void **state) {
    (void)state;
    gt_tokenizer *tk = learned();
    cJSON *c = gt_hf_tokenizer_config_json(tk, 2048);
    assert_non_null(c);
    assert_string_equal(cJSON_GetObjectItem(c, "eos_token")->valuestring, "<|endoftext|>");
    assert_string_equal(cJSON_GetObjectItem(c, "tokenizer_class")->valuestring,
                        "PreTrainedTokenizerFast");
    assert_int_equal(cJSON_GetObjectItem(c, "model_max_length")->valueint, 2048);
    cJSON_Delete(c);
    gt_tokenizer_destroy(tk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exported_tokenizer_json_encodes_the_same_ids),
        cmocka_unit_test(test_tokenizer_config_names_the_end_of_document_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
