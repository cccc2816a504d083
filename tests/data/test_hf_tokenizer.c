/* Pre-tokenization by PCRE2 and Hugging Face tokenizer.json: GPT-2's, Llama 3's and Qwen2's
 * regexes cut a multilingual text exactly where Hugging Face's tokenizers does (curly
 * apostrophes, dashes, CJK, digits of other scripts, combining marks, Unicode spaces); three
 * tiny trained tokenizer.json files (one with Qwen's NFC normalizer) encode test texts (with
 * special tokens inside) to the ids tokenizers gives; NFC keeps invalid UTF-8 bytes; settings
 * that would change the encoding are refused by name; prepare-data takes --tokenizer.
 * Fixtures: tests/data/hf_fixture.py. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/nfc.h"
#include "data/pretok.h"
#include "data/shard.h"
#include "data/tokenizer.h"

#define LLAMA3_PATTERN                                                                             \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define LINE_MAX_BYTES 8192

static size_t unhex(const char *h, unsigned char *out) {
    size_t n = 0;
    for (; h[0] && h[1] && h[0] != ' ' && h[0] != '\n'; h += 2) {
        unsigned v;
        if (sscanf(h, "%2x", &v) != 1) fail_msg("bad hex in fixture");
        out[n++] = (unsigned char)v;
    }
    return n;
}

static FILE *open_fixture(const char *name) {
    char rel[128], path[600];
    snprintf(rel, sizeof rel, "tests/data/fixtures/%s", name);
    gt_test_source_path(rel, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (re-run tests/data/hf_fixture.py)", path);
    return f;
}

static void check_splits(const char *which, const char *pattern) {
    FILE *f = open_fixture("pretok_expected.txt");
    static char line[LINE_MAX_BYTES], chunks[LINE_MAX_BYTES];
    static unsigned char text[LINE_MAX_BYTES], want[LINE_MAX_BYTES];
    gt_pretok *pre = NULL;
    gt_error err = {0};
    if (gt_pretok_create(&pre, pattern, &err)) fail_msg("%s", err.msg);
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (!fgets(chunks, sizeof chunks, f)) fail_msg("fixture ends early");
        size_t wl = strlen(which);
        if (strncmp(line, which, wl) || line[wl] != ' ') continue;
        size_t n = unhex(line + wl + 1, text);
        const char *c = chunks;
        size_t i = 0;
        int k = 0;
        while (*c && *c != '\n') {
            size_t m = unhex(c, want);
            size_t len = i < n ? gt_pretok_next(pre, text, n, i, GT_BPE_MAX_CHUNK) : 0;
            if (len != m || memcmp(text + i, want, m))
                fail_msg("%s, case %d, chunk %d: got '%.*s', Hugging Face has '%.*s'", which, cases,
                         k, (int)len, (const char *)text + i, (int)m, (const char *)want);
            i += len;
            k++;
            c += 2 * m;
            while (*c == ' ')
                c++;
        }
        assert_int_equal(i, n);
        cases++;
    }
    fclose(f);
    gt_pretok_destroy(pre);
    assert_true(cases >= 5);
}

static void test_gpt2_regex_splits_multilingual_text_like_hugging_face(void **state) {
    (void)state;
    check_splits("gpt2", GT_PRETOK_GPT2);
}

static void test_llama3_regex_splits_multilingual_text_like_hugging_face(void **state) {
    (void)state;
    check_splits("llama3", LLAMA3_PATTERN);
}

static void test_qwen2_regex_splits_multilingual_text_like_hugging_face(void **state) {
    (void)state;
    check_splits("qwen2", QWEN2_PATTERN);
}

static void test_long_chunk_is_cut_and_continues(void **state) {
    (void)state;
    gt_pretok *pre = NULL;
    gt_error err = {0};
    assert_int_equal(gt_pretok_create(&pre, GT_PRETOK_GPT2, &err), GT_OK);
    const unsigned char t[] = "abcdefghij klm";
    assert_int_equal(gt_pretok_next(pre, t, 14, 0, 4), 4);
    assert_int_equal(gt_pretok_next(pre, t, 14, 4, 4), 4);
    assert_int_equal(gt_pretok_next(pre, t, 14, 8, 4), 2);  /* the rest of "abcdefghij" */
    assert_int_equal(gt_pretok_next(pre, t, 14, 10, 4), 4); /* " klm" */
    gt_pretok_destroy(pre);
    assert_int_equal(gt_pretok_create(&pre, "(", &err), GT_ERR_INVALID);
    assert_null(pre);
    assert_non_null(strstr(err.msg, "does not compile"));
}

/* Encodes every case of `which` in hf_expected.txt and compares with Hugging Face's ids; the
 * ids must decode to the text as the tokenizer normalizes it. Returns the number of cases
 * that normalization changed. */
static int check_encodings(const char *which) {
    char json[64];
    snprintf(json, sizeof json, "tok_%s.json", which);
    char rel[128], path[600];
    snprintf(rel, sizeof rel, "tests/data/fixtures/%s", json);
    gt_test_source_path(rel, path, sizeof path);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    if (gt_tokenizer_load_hf(&tk, path, &err)) fail_msg("%s", err.msg);
    FILE *f = open_fixture("hf_expected.txt");
    static char line[LINE_MAX_BYTES], ids_line[LINE_MAX_BYTES];
    static unsigned char text[LINE_MAX_BYTES];
    int cases = 0, changed = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (!fgets(ids_line, sizeof ids_line, f)) fail_msg("fixture ends early");
        size_t wl = strlen(which);
        if (strncmp(line, which, wl) || line[wl] != ' ') continue;
        size_t n = unhex(line + wl + 1, text);
        uint32_t *ids = NULL;
        size_t n_ids = 0, cap = 0;
        if (gt_tokenizer_encode(tk, text, n, &ids, &n_ids, &cap, &err)) fail_msg("%s", err.msg);
        char *p = ids_line;
        for (size_t k = 0; k < n_ids; k++) {
            char *end;
            long want = strtol(p, &end, 10);
            if (end == p)
                fail_msg("%s case %d: %zu ids, Hugging Face has %zu", which, cases, n_ids, k);
            if ((long)ids[k] != want)
                fail_msg("%s case %d ('%.*s'): id %zu is %u, Hugging Face's is %ld", which, cases,
                         (int)n, (const char *)text, k, ids[k], want);
            p = end;
        }
        char *end;
        (void)strtol(p, &end, 10);
        if (end != p)
            fail_msg("%s case %d: Hugging Face has more than %zu ids", which, cases, n_ids);
        unsigned char *back = NULL, *want = NULL;
        size_t back_n = 0, want_n = 0;
        assert_int_equal(gt_tokenizer_decode(tk, ids, n_ids, &back, &back_n, &err), GT_OK);
        assert_int_equal(gt_tokenizer_normalize(tk, text, n, &want, &want_n, &err), GT_OK);
        assert_int_equal(back_n, want_n);
        assert_memory_equal(back, want, want_n);
        changed += want_n != n || memcmp(want, text, n);
        free(want);
        free(back);
        free(ids);
        cases++;
    }
    fclose(f);
    gt_tokenizer_destroy(tk);
    assert_true(cases >= 8);
    return changed;
}

static void test_gpt2_style_tokenizer_json_encodes_like_hugging_face(void **state) {
    (void)state;
    assert_int_equal(check_encodings("gpt2"), 0); /* no normalizer: the bytes come back */
}

static void test_llama3_style_tokenizer_json_encodes_like_hugging_face(void **state) {
    (void)state;
    assert_int_equal(check_encodings("llama3"), 0);
}

static void test_qwen_style_tokenizer_json_with_nfc_encodes_like_hugging_face(void **state) {
    (void)state;
    /* decomposed accents, jamo, the Angstrom sign, marks out of order all change under NFC */
    assert_true(check_encodings("qwen") >= 4);
}

static void expect_refused(const char *json, int code, const char *words) {
    char dir[256], path[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    gt_test_write_text(path, json);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_tokenizer_load_hf(&tk, path, &err), code);
    assert_null(tk);
    if (!strstr(err.msg, words)) fail_msg("expected '%s' in: %s", words, err.msg);
}

#define MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]"
#define BYTE_LEVEL "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"use_regex\":true}"

static void test_tokenizer_json_settings_that_change_encoding_are_refused(void **state) {
    (void)state;

    expect_refused("{" MODEL ",\"byte_fallback\":true}," BYTE_LEVEL "}", GT_ERR_UNSUPPORTED,
                   "byte_fallback");
    expect_refused("{" MODEL "},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}", GT_ERR_UNSUPPORTED,
                   "ByteLevel");
    expect_refused("{" MODEL "},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":"
                   "true}}",
                   GT_ERR_UNSUPPORTED, "add_prefix_space");
    expect_refused("{" MODEL "}," BYTE_LEVEL ",\"added_tokens\":[{\"id\":1,\"content\":\"<s>\","
                   "\"lstrip\":true}]}",
                   GT_ERR_UNSUPPORTED, "lstrip");
    expect_refused("{\"model\":{\"type\":\"Unigram\",\"vocab\":{},\"merges\":[]}," BYTE_LEVEL "}",
                   GT_ERR_UNSUPPORTED, "BPE");
    expect_refused("{" MODEL "}," BYTE_LEVEL "}", GT_ERR_INVALID, "0x00"); /* no byte tokens */
    expect_refused("{\"model\": [1, 2", GT_ERR_INVALID, "not valid JSON");
}

static void test_normalizers_other_than_nfc_are_refused_by_name(void **state) {
    (void)state;
    expect_refused("{\"normalizer\":{\"type\":\"NFKC\"}," MODEL "}," BYTE_LEVEL "}",
                   GT_ERR_UNSUPPORTED, "normalizer NFKC is not supported (supported: none, NFC");
    expect_refused("{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
                   "\"NFC\"},{\"type\":\"Lowercase\"}]}," MODEL "}," BYTE_LEVEL "}",
                   GT_ERR_UNSUPPORTED, "normalizer Lowercase is not supported");
    expect_refused("{\"normalizer\":{\"type\":\"Sequence\"}," MODEL "}," BYTE_LEVEL "}",
                   GT_ERR_UNSUPPORTED, "no normalizers list");
    expect_refused("{\"normalizer\":{\"kind\":\"NFC\"}," MODEL "}," BYTE_LEVEL "}",
                   GT_ERR_UNSUPPORTED, "normalizer without a type");
}

/* tok_qwen.json with `from` replaced by `to`, written to a temporary file */
static void write_qwen_variant(const char *from, const char *to, char *path, size_t path_n) {
    char src[600], dir[256];
    gt_test_source_path("tests/data/fixtures/tok_qwen.json", src, sizeof src);
    FILE *f = fopen(src, "rb");
    if (!f) fail_msg("cannot open %s", src);
    static char json[1 << 16], out[1 << 16];
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = '\0';
    char *at = strstr(json, from);
    if (!at) fail_msg("'%s' is not in tok_qwen.json (re-run tests/data/hf_fixture.py?)", from);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, path_n, "%s/tokenizer.json", dir);
    gt_test_write_text(path, out);
}

static size_t encode_str(const gt_tokenizer *tk, const char *text, uint32_t *ids, size_t max) {
    uint32_t *got = NULL;
    size_t n = 0, cap = 0;
    gt_error err = {0};
    if (gt_tokenizer_encode(tk, (const unsigned char *)text, strlen(text), &got, &n, &cap, &err))
        fail_msg("%s", err.msg);
    assert_true(n <= max);
    memcpy(ids, got, n * sizeof *ids);
    free(got);
    return n;
}

static void test_nfc_inside_a_sequence_normalizes_and_none_does_not(void **state) {
    (void)state;
    const char *nfc = "\"normalizer\":{\"type\":\"NFC\"}";
    char seq_path[400], none_path[400];
    write_qwen_variant(nfc,
                       "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
                       "\"NFC\"},{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
                       "\"NFC\"}]}]}",
                       seq_path, sizeof seq_path);
    gt_tokenizer *seq = NULL, *plain = NULL;
    gt_error err = {0};
    if (gt_tokenizer_load_hf(&seq, seq_path, &err)) fail_msg("%s", err.msg);
    write_qwen_variant(nfc, "\"normalizer\":null", none_path, sizeof none_path);
    if (gt_tokenizer_load_hf(&plain, none_path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(gt_tokenizer_normalizes(seq), 1);
    assert_int_equal(gt_tokenizer_normalizes(plain), 0);
    uint32_t composed[16], decomposed[16], raw[16];
    size_t nc = encode_str(seq, "na\xc3\xafve", composed, 16);
    size_t nd = encode_str(seq, "nai\xcc\x88ve", decomposed, 16);
    size_t nr = encode_str(plain, "nai\xcc\x88ve", raw, 16);
    assert_int_equal(nc, nd);
    assert_memory_equal(composed, decomposed, nc * sizeof *composed);
    assert_true(nr != nc || memcmp(raw, composed, nc * sizeof *raw));
    gt_tokenizer_destroy(seq);
    gt_tokenizer_destroy(plain);
}

static void test_normalized_added_token_outside_nfc_is_refused(void **state) {
    (void)state;
    char path[400];
    write_qwen_variant("\"content\":\"caf\xc3\xa9\"", "\"content\":\"cafe\xcc\x81\"", path,
                       sizeof path);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_tokenizer_load_hf(&tk, path, &err), GT_ERR_UNSUPPORTED);
    assert_null(tk);
    assert_non_null(strstr(err.msg, "not in NFC"));
    write_qwen_variant("\"content\":\"<think>\",\"single_word\":false,\"lstrip\":false,"
                       "\"rstrip\":false,\"normalized\":false,",
                       "\"content\":\"<think>\",", path, sizeof path);
    assert_int_equal(gt_tokenizer_load_hf(&tk, path, &err), GT_ERR_INVALID);
    assert_null(tk);
    assert_non_null(strstr(err.msg, "has no \"normalized\""));
}

static void test_nfc_keeps_invalid_utf8_bytes_and_composes_around_them(void **state) {
    (void)state;
    /* e + acute, a stray 0xff, A + ring, a lone lead byte, an encoded surrogate, NUL, then an
     * acute after an invalid byte, which has nothing to compose with */
    static const unsigned char in[] = "e\xcc\x81\xff"
                                      "A\xcc\x8a\xc3 \xed\xa0\x80\0x\xfe\xcc\x81";
    static const unsigned char want[] = "\xc3\xa9\xff"
                                        "\xc3\x85\xc3 \xed\xa0\x80\0x\xfe\xcc\x81";
    unsigned char *out = NULL;
    size_t n = 0, cap = 0;
    gt_error err = {0};
    assert_int_equal(gt_nfc_append(in, sizeof in - 1, &out, &n, &cap, &err), GT_OK);
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(out, want, n);
    free(out);
}

static void test_nfc_of_a_long_text_is_cut_without_changing_it(void **state) {
    (void)state;
    enum { REPEATS = 50000 }; /* past the piece size, so the text is normalized in pieces */
    unsigned char *in = malloc(REPEATS * 3), *want = malloc(REPEATS * 2), *out = NULL;
    assert_non_null(in);
    assert_non_null(want);
    static const unsigned char decomposed[3] = {'e', 0xcc, 0x81}, composed[2] = {0xc3, 0xa9};
    for (size_t i = 0; i < REPEATS; i++) {
        memcpy(in + sizeof decomposed * i, decomposed, sizeof decomposed);
        memcpy(want + sizeof composed * i, composed, sizeof composed);
    }
    size_t n = 0, cap = 0;
    gt_error err = {0};
    assert_int_equal(gt_nfc_append(in, REPEATS * 3, &out, &n, &cap, &err), GT_OK);
    assert_int_equal(n, REPEATS * 2);
    assert_memory_equal(out, want, n);
    free(out);
    free(in);
    free(want);
}

static void test_qwen_tokenizer_encodes_invalid_utf8_as_bytes(void **state) {
    (void)state;
    char path[600];
    gt_test_source_path("tests/data/fixtures/tok_qwen.json", path, sizeof path);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    if (gt_tokenizer_load_hf(&tk, path, &err)) fail_msg("%s", err.msg);
    const char *text = "cafe\xcc\x81\xff<|im_end|>\xc3";
    uint32_t ids[32], want[32];
    size_t n = encode_str(tk, text, ids, 32);
    size_t w = encode_str(tk, "cafe\xcc\x81", want, 32);
    w += encode_str(tk, "\xff", want + w, 32 - w);
    w += encode_str(tk, "<|im_end|>", want + w, 32 - w);
    w += encode_str(tk, "\xc3", want + w, 32 - w);
    assert_int_equal(n, w);
    assert_memory_equal(ids, want, n * sizeof *ids);
    unsigned char *back = NULL, *norm = NULL;
    size_t back_n = 0, norm_n = 0;
    assert_int_equal(gt_tokenizer_decode(tk, ids, n, &back, &back_n, &err), GT_OK);
    assert_int_equal(
        gt_tokenizer_normalize(tk, (const unsigned char *)text, strlen(text), &norm, &norm_n, &err),
        GT_OK);
    static const char normalized[] = "caf\xc3\xa9\xff<|im_end|>\xc3";
    assert_int_equal(norm_n, strlen(normalized));
    assert_memory_equal(norm, normalized, norm_n);
    assert_int_equal(back_n, norm_n);
    assert_memory_equal(back, norm, norm_n);
    free(back);
    free(norm);
    gt_tokenizer_destroy(tk);
}

static void test_prepare_data_checks_the_round_trip_against_nfc_text(void **state) {
    (void)state;
    char dir[256], in[300], prefix[300], json[600], args[1600];
    static char out[8192];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/p", dir);
    gt_test_source_path("tests/data/fixtures/tok_qwen.json", json, sizeof json);
    static char text[8192];
    text[0] = '\0';
    for (int i = 0; i < 40; i++)
        strcat(text, "<|im_start|>user\nCafe\xcc\x81 na\xc3\xafve \xe1\x84\x80\xe1\x85\xa1"
                     "<|im_end|>\n");
    gt_test_write_text(in, text);
    snprintf(args, sizeof args, "prepare-data --input %s --output %s --tokenizer %s", in, prefix,
             json);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc) fail_msg("prepare-data failed (%d): %s", rc, out);
    assert_non_null(strstr(out, "round trip exact (against the NFC-normalized text)"));
}

static void test_prepare_data_encodes_with_tokenizer_json(void **state) {
    (void)state;
    char dir[256], in[300], prefix[300], json[600], args[1600], shard[400];
    static char out[8192];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/p", dir);
    gt_test_source_path("tests/data/fixtures/tok_gpt2.json", json, sizeof json);
    static char text[4096];
    text[0] = '\0';
    for (int i = 0; i < 40; i++)
        strcat(text, "it’s the end—café au lait, isn't it?<|endoftext|>");
    gt_test_write_text(in, text);
    snprintf(args, sizeof args, "prepare-data --input %s --output %s --tokenizer %s", in, prefix,
             json);
    int rc = gt_test_run(args, out, sizeof out);
    if (rc) fail_msg("prepare-data failed (%d): %s", rc, out);
    assert_non_null(strstr(out, "round trip exact"));
    /* the special token encodes as its id, not as the bytes of its text */
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_tokenizer_load_hf(&tk, json, &err), GT_OK);
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    assert_int_equal(gt_tokenizer_encode(tk, (const unsigned char *)text, strlen(text), &ids,
                                         &n_ids, &cap, &err),
                     GT_OK);
    snprintf(shard, sizeof shard, "%s_train_000000.bin", prefix);
    gt_shard s;
    assert_int_equal(gt_shard_open(&s, shard, &err), GT_OK);
    assert_true(s.count > 0 && (size_t)s.count < n_ids);
    int specials = 0;
    for (int64_t k = 0; k < s.count; k++) {
        assert_int_equal(gt_shard_token(&s, k), ids[k]);
        specials += ids[k] == 0; /* <|endoftext|> is id 0 in the fixture */
    }
    assert_true(specials > 0);
    gt_shard_close(&s);
    free(ids);
    gt_tokenizer_destroy(tk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_regex_splits_multilingual_text_like_hugging_face),
        cmocka_unit_test(test_llama3_regex_splits_multilingual_text_like_hugging_face),
        cmocka_unit_test(test_qwen2_regex_splits_multilingual_text_like_hugging_face),
        cmocka_unit_test(test_long_chunk_is_cut_and_continues),
        cmocka_unit_test(test_gpt2_style_tokenizer_json_encodes_like_hugging_face),
        cmocka_unit_test(test_llama3_style_tokenizer_json_encodes_like_hugging_face),
        cmocka_unit_test(test_qwen_style_tokenizer_json_with_nfc_encodes_like_hugging_face),
        cmocka_unit_test(test_tokenizer_json_settings_that_change_encoding_are_refused),
        cmocka_unit_test(test_normalizers_other_than_nfc_are_refused_by_name),
        cmocka_unit_test(test_nfc_inside_a_sequence_normalizes_and_none_does_not),
        cmocka_unit_test(test_normalized_added_token_outside_nfc_is_refused),
        cmocka_unit_test(test_nfc_keeps_invalid_utf8_bytes_and_composes_around_them),
        cmocka_unit_test(test_nfc_of_a_long_text_is_cut_without_changing_it),
        cmocka_unit_test(test_qwen_tokenizer_encodes_invalid_utf8_as_bytes),
        cmocka_unit_test(test_prepare_data_checks_the_round_trip_against_nfc_text),
        cmocka_unit_test(test_prepare_data_encodes_with_tokenizer_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
