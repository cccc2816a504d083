/* Tokenizers: the byte-level BPE learns the merges computed by hand, round-trips arbitrary
 * bytes, splits text like GPT-2's pattern, survives its vocabulary file; GPT-2's BPE from a
 * hand-made encoder.json / vocab.bpe encodes as GPT-2 would, and inconsistent files are
 * refused. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/pretok.h"
#include "data/tokenizer.h"

static void encode(const gt_tokenizer *tk, const char *text, size_t n, uint32_t **ids, size_t *m) {
    size_t cap = 0;
    gt_error err = {0};
    *ids = NULL;
    *m = 0;
    if (gt_tokenizer_encode(tk, (const unsigned char *)text, n, ids, m, &cap, &err) != GT_OK)
        fail_msg("encode: %s", err.msg);
}

static void test_bpe_learns_the_hand_computed_merges(void **state) {
    (void)state;
    /* aaabdaaabac: aa (4 pairs) -> 256; then ab and (256, a) tie at 2, the smaller pair
     * (97, 98) wins -> 257; then (256, 257) -> 258: "ZYdZYac" -> "XdXac" */
    const char *text = "aaabdaaabac";
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, (const unsigned char *)text, strlen(text), 259, &err),
                     GT_OK);
    assert_int_equal(gt_tokenizer_vocab_size(tk), 259);
    uint32_t want[3][3] = {{'a', 'a', 256}, {'a', 'b', 257}, {256, 257, 258}};
    for (int i = 0; i < 3; i++) {
        uint32_t l, r, z;
        gt_tokenizer_merge(tk, i, &l, &r, &z);
        assert_int_equal(l, want[i][0]);
        assert_int_equal(r, want[i][1]);
        assert_int_equal(z, want[i][2]);
    }
    size_t len;
    const unsigned char *p = gt_tokenizer_token(tk, 258, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(p, "aaab", 4);
    uint32_t *ids;
    size_t m;
    encode(tk, text, strlen(text), &ids, &m);
    uint32_t expect[5] = {258, 'd', 258, 'a', 'c'};
    assert_int_equal(m, 5);
    assert_memory_equal(ids, expect, sizeof expect);
    free(ids);
    gt_tokenizer_destroy(tk);
}

static void test_bpe_stops_when_no_pair_repeats(void **state) {
    (void)state;
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, (const unsigned char *)"abcabc", 6, 1000, &err), GT_OK);
    /* ab (2) -> 256, then (256, c) (2) -> 257; then nothing occurs twice */
    assert_int_equal(gt_tokenizer_vocab_size(tk), 258);
    gt_tokenizer_destroy(tk);
}

static void test_vocab_size_below_the_bytes_is_refused(void **state) {
    (void)state;
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, (const unsigned char *)"ab", 2, 100, &err), GT_ERR_INVALID);
    assert_null(tk);
    assert_non_null(strstr(err.msg, "256"));
}

static void test_bpe_round_trips_arbitrary_bytes(void **state) {
    (void)state;
    enum { CORPUS = 20000, PROBE = 5000 };
    unsigned char *corpus = malloc(CORPUS), *probe = malloc(PROBE);
    const char *words = "the cat sat on the mat; don't stop 1234 \n\t";
    uint64_t x = 42;
    for (int i = 0; i < CORPUS; i++) {
        x = x * 6364136223846793005ull + 1;
        corpus[i] =
            (x >> 60) < 12 ? (unsigned char)words[i % strlen(words)] : (unsigned char)(x >> 33);
    }
    for (int i = 0; i < PROBE; i++) {
        x = x * 6364136223846793005ull + 1;
        probe[i] = (unsigned char)(x >> 40); /* NULs, 0xff, broken UTF-8, anything */
    }
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, corpus, CORPUS, 400, &err), GT_OK);
    assert_true(gt_tokenizer_vocab_size(tk) > 300);
    const unsigned char *inputs[2] = {corpus, probe};
    size_t lens[2] = {CORPUS, PROBE};
    for (int k = 0; k < 2; k++) {
        uint32_t *ids;
        size_t m;
        encode(tk, (const char *)inputs[k], lens[k], &ids, &m);
        unsigned char *back;
        size_t back_n;
        assert_int_equal(gt_tokenizer_decode(tk, ids, m, &back, &back_n, &err), GT_OK);
        assert_int_equal(back_n, lens[k]);
        assert_memory_equal(back, inputs[k], lens[k]);
        if (k == 0) assert_true(m < (size_t)CORPUS * 3 / 4); /* merges compress the corpus */
        free(ids);
        free(back);
    }
    gt_tokenizer_destroy(tk);
    free(corpus);
    free(probe);
}

/* A corpus of a megabyte learns its full vocabulary and round-trips (the size prepare-data
 * meets in the demo; how long it takes is prepare-data's printed time, not a test's). */
static void test_bpe_learns_1024_tokens_from_a_megabyte(void **state) {
    (void)state;
    enum { BYTES = 1 << 20, PROBE = 4096 };
    unsigned char *text = malloc(BYTES);
    uint64_t x = 7;
    size_t n = 0;
    while (n < BYTES) { /* pseudo-words from a small alphabet, with spaces and newlines */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int len = 1 + (int)((x >> 60) % 8);
        for (int k = 0; k < len && n < BYTES; k++) {
            x = x * 6364136223846793005ull + 1;
            text[n++] = (unsigned char)("etaoinshrdlucmfw"[(x >> 59) & 15]);
        }
        if (n < BYTES) text[n++] = (x >> 40) % 12 ? ' ' : '\n';
    }
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, text, BYTES, 1024, &err), GT_OK);
    assert_int_equal(gt_tokenizer_vocab_size(tk), 1024);
    uint32_t *ids;
    size_t m;
    encode(tk, (const char *)text, PROBE, &ids, &m);
    assert_true(m < PROBE / 2); /* the learned merges compress text of the same kind */
    unsigned char *back;
    size_t back_n;
    assert_int_equal(gt_tokenizer_decode(tk, ids, m, &back, &back_n, &err), GT_OK);
    assert_int_equal(back_n, PROBE);
    assert_memory_equal(back, text, PROBE);
    free(ids);
    free(back);
    gt_tokenizer_destroy(tk);
    free(text);
}

static void test_pretokenizer_splits_like_gpt2(void **state) {
    (void)state;
    const char *text = "Hello world's  end\n\nok 42!!";
    const char *want[] = {"Hello", " world", "'s", " ", " end", "\n", "\n", "ok", " 42", "!!"};
    size_t n = strlen(text), i = 0;
    int k = 0;
    gt_pretok *pre = NULL;
    gt_error err = {0};
    assert_int_equal(gt_pretok_create(&pre, GT_PRETOK_GPT2, &err), GT_OK);
    while (i < n) {
        size_t len = gt_pretok_next(pre, (const unsigned char *)text, n, i, GT_BPE_MAX_CHUNK);
        assert_true(k < 10);
        if (len != strlen(want[k]) || memcmp(text + i, want[k], len))
            fail_msg("chunk %d: got '%.*s', want '%s'", k, (int)len, text + i, want[k]);
        i += len;
        k++;
    }
    gt_pretok_destroy(pre);
    assert_int_equal(k, 10);
}

static void test_vocabulary_file_round_trips(void **state) {
    (void)state;
    char dir[256], path[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.vocab", dir);
    const char *text = "one two three two one two three four two one";
    gt_tokenizer *tk = NULL, *back = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, (const unsigned char *)text, strlen(text), 280, &err),
                     GT_OK);
    assert_int_equal(gt_tokenizer_save(tk, path, &err), GT_OK);
    assert_int_equal(gt_tokenizer_load(&back, path, &err), GT_OK);
    assert_int_equal(gt_tokenizer_vocab_size(back), gt_tokenizer_vocab_size(tk));
    uint32_t *a, *b;
    size_t na, nb;
    encode(tk, text, strlen(text), &a, &na);
    encode(back, text, strlen(text), &b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
    gt_tokenizer_destroy(back);
    /* truncated: the last token lines are missing */
    FILE *f = fopen(path, "rb");
    char buf[65536];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(path, "wb");
    fwrite(buf, 1, got - 20, f);
    fclose(f);
    assert_int_equal(gt_tokenizer_load(&back, path, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "truncated"));
    gt_tokenizer_destroy(tk);
}

/* ---- GPT-2 with a hand-made vocabulary ---- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes keep their code point, the other bytes
 * get U+0100 + n in byte order. ids 0..255 follow GPT-2's order: printable bytes first. */
static int gpt2_order(int order[256], unsigned cp[256]) {
    int n = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) {
            order[n++] = b;
            cp[b] = (unsigned)b;
        }
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) {
            order[n++] = b;
            cp[b] = 256u + (unsigned)extra++;
        }
    return n;
}

static void put_json_char(FILE *f, unsigned cp) {
    if (cp == '"' || cp == '\\')
        fprintf(f, "\\%c", (char)cp);
    else if (cp < 0x80)
        fputc((int)cp, f);
    else if (cp < 0x800)
        fprintf(f, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 63)));
}

static void write_gpt2_files(const char *enc, const char *bpe, int consistent) {
    int order[256];
    unsigned cp[256];
    assert_int_equal(gpt2_order(order, cp), 256);
    FILE *f = fopen(enc, "w");
    fputs("{", f);
    for (int id = 0; id < 256; id++) {
        fputs(id ? ", \"" : "\"", f);
        put_json_char(f, cp[order[id]]);
        fprintf(f, "\": %d", id);
    }
    /* "\u0120t" is " t" in the byte alphabet, written with a JSON escape on purpose */
    fputs(",\n \"\\u0120t\": 256, \"he\": 257, \"\xc4\xa0the\": 258, \"<|endoftext|>\": 259}\n", f);
    fclose(f);
    f = fopen(bpe, "w");
    fputs("#version: 0.2\n\xc4\xa0 t\nh e\n", f);
    fputs(consistent ? "\xc4\xa0t he\n" : "t h\n", f); /* "th" is not in encoder.json */
    fclose(f);
}

static void test_gpt2_hand_made_vocabulary_encodes_like_gpt2(void **state) {
    (void)state;
    char dir[256], enc[300], bpe[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    write_gpt2_files(enc, bpe, 1);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    if (gt_tokenizer_load_gpt2(&tk, enc, bpe, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_int_equal(gt_tokenizer_vocab_size(tk), 260);
    assert_int_equal(gt_tokenizer_num_merges(tk), 3);
    uint32_t *ids;
    size_t m;
    /* '!' is GPT-2 id 0; ' ' is 'Ġ' = id 220; byte 0 is 'Ā' = id 188 (after the 188
     * printable bytes) */
    encode(tk, "! \0", 3, &ids, &m);
    uint32_t e1[] = {0, 220, 188};
    assert_int_equal(m, 3);
    assert_memory_equal(ids, e1, sizeof e1);
    free(ids);
    /* "hehe the\n": chunks "hehe", " the", "\n"; "t"+"he" is no merge, " t"+"he" is */
    encode(tk, "hehe the\nthe", 12, &ids, &m);
    uint32_t t_id = 't' - '!';
    uint32_t nl_id = 188 + '\n';
    uint32_t e2[] = {257, 257, 258, nl_id, t_id, 257};
    assert_int_equal(m, 6);
    assert_memory_equal(ids, e2, sizeof e2);
    unsigned char *back;
    size_t back_n;
    assert_int_equal(gt_tokenizer_decode(tk, ids, m, &back, &back_n, &err), GT_OK);
    assert_int_equal(back_n, 12);
    assert_memory_equal(back, "hehe the\nthe", 12);
    free(back);
    free(ids);
    /* the vocabulary file written beside the shards reproduces GPT-2's encoding */
    char saved[300];
    snprintf(saved, sizeof saved, "%s/gpt2.vocab", dir);
    assert_int_equal(gt_tokenizer_save(tk, saved, &err), GT_OK);
    gt_tokenizer *again = NULL;
    assert_int_equal(gt_tokenizer_load(&again, saved, &err), GT_OK);
    uint32_t *ids2;
    size_t m2;
    encode(again, "hehe the\nthe", 12, &ids2, &m2);
    assert_int_equal(m2, 6);
    assert_memory_equal(ids2, e2, sizeof e2);
    free(ids2);
    gt_tokenizer_destroy(again);
    uint32_t eot = 259;
    assert_int_equal(gt_tokenizer_decode(tk, &eot, 1, &back, &back_n, &err), GT_OK);
    assert_int_equal(back_n, 13);
    assert_memory_equal(back, "<|endoftext|>", 13);
    free(back);
    gt_tokenizer_destroy(tk);
}

static void test_gpt2_merge_missing_from_encoder_is_refused(void **state) {
    (void)state;
    char dir[256], enc[300], bpe[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    write_gpt2_files(enc, bpe, 0);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_tokenizer_load_gpt2(&tk, enc, bpe, &err), GT_ERR_INVALID);
    assert_null(tk);
    assert_non_null(strstr(err.msg, "vocab.bpe:4"));
    assert_non_null(strstr(err.msg, "merged result"));
}

static void test_gpt2_encoder_that_is_not_json_is_refused(void **state) {
    (void)state;
    char dir[256], enc[300], bpe[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    write_gpt2_files(enc, bpe, 1);
    FILE *f = fopen(enc, "w");
    fputs("{\"a\": 0, \"b\" 1}", f);
    fclose(f);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    assert_int_equal(gt_tokenizer_load_gpt2(&tk, enc, bpe, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "encoder.json:1"));
}

static void
test_end_of_document_token_is_the_last_id_and_survives_the_vocabulary_file(void **state) {
    (void)state;
    char dir[256], path[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.vocab", dir);
    const char *text = "one two three two one two three four two one";
    gt_tokenizer *tk = NULL, *back = NULL;
    gt_error err = {0};
    assert_int_equal(gt_bpe_train(&tk, (const unsigned char *)text, strlen(text), 270, &err),
                     GT_OK);
    assert_int_equal(gt_tokenizer_eod(tk), -1);
    int before = gt_tokenizer_vocab_size(tk);
    assert_int_equal(gt_tokenizer_add_eod(tk, &err), GT_OK);
    assert_int_equal(gt_tokenizer_eod(tk), before);
    assert_int_equal(gt_tokenizer_vocab_size(tk), before + 1);
    assert_int_equal(gt_tokenizer_add_eod(tk, &err), GT_OK); /* once only */
    assert_int_equal(gt_tokenizer_vocab_size(tk), before + 1);
    /* no text encodes to it, and it decodes to nothing */
    uint32_t *ids;
    size_t n;
    encode(tk, text, strlen(text), &ids, &n);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(ids[i], (uint32_t)before);
    free(ids);
    uint32_t eod = (uint32_t)before;
    unsigned char *out;
    size_t out_n;
    assert_int_equal(gt_tokenizer_decode(tk, &eod, 1, &out, &out_n, &err), GT_OK);
    assert_int_equal(out_n, 0);
    free(out);
    assert_int_equal(gt_tokenizer_save(tk, path, &err), GT_OK);
    assert_int_equal(gt_tokenizer_load(&back, path, &err), GT_OK);
    assert_int_equal(gt_tokenizer_eod(back), before);
    gt_tokenizer_destroy(back);
    gt_tokenizer_destroy(tk);
}

static void test_version_1_vocabulary_file_still_loads_without_end_of_document(void **state) {
    (void)state;
    char dir[256], path[300], text[8192];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/v1.vocab", dir);
    /* the 256 single bytes and no merges, as version 1 wrote them */
    int u = snprintf(text, sizeof text, "graphtrain-tokenizer 1\nkind bpe\nvocab 256\nmerges 0\n");
    for (int i = 0; i < 256; i++)
        u += snprintf(text + u, sizeof text - (size_t)u, "%02x\n", i);
    gt_test_write_text(path, text);
    gt_tokenizer *tk = NULL;
    gt_error err = {0};
    if (gt_tokenizer_load(&tk, path, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_int_equal(gt_tokenizer_vocab_size(tk), 256);
    assert_int_equal(gt_tokenizer_eod(tk), -1);
    gt_tokenizer_destroy(tk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_learns_the_hand_computed_merges),
        cmocka_unit_test(test_bpe_stops_when_no_pair_repeats),
        cmocka_unit_test(test_vocab_size_below_the_bytes_is_refused),
        cmocka_unit_test(test_bpe_round_trips_arbitrary_bytes),
        cmocka_unit_test(test_bpe_learns_1024_tokens_from_a_megabyte),
        cmocka_unit_test(test_pretokenizer_splits_like_gpt2),
        cmocka_unit_test(test_vocabulary_file_round_trips),
        cmocka_unit_test(
            test_end_of_document_token_is_the_last_id_and_survives_the_vocabulary_file),
        cmocka_unit_test(test_version_1_vocabulary_file_still_loads_without_end_of_document),
        cmocka_unit_test(test_gpt2_hand_made_vocabulary_encodes_like_gpt2),
        cmocka_unit_test(test_gpt2_merge_missing_from_encoder_is_refused),
        cmocka_unit_test(test_gpt2_encoder_that_is_not_json_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
