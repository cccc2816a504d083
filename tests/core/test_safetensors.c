/* safetensors files (core/safetensors.h): what the writer writes reads back exactly (F32) or
 * rounded to nearest-even (BF16), the header is 8-aligned JSON, and malformed files are refused
 * naming the file and the tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/safetensors.h"
#include "testlib.h"

static void path_in(char *buf, size_t n, const char *name) {
    char dir[256];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(buf, n, "%s/%s", dir, name);
}

static void test_written_tensors_read_back_exactly_or_rounded(void **state) {
    (void)state;
    float a[6] = {1.0f, -2.5f, 3.14159265f, 1e-30f, 65504.0f, -0.0f}, b[3] = {0.1f, 0.2f, 0.3f};
    gt_st_tensor t[2] = {{.name = "a", .dtype = GT_ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
                         {.name = "b", .dtype = GT_ST_BF16, .ndim = 1, .shape = {3}, .data = b}};
    char p[512];
    path_in(p, sizeof p, "x.safetensors");
    gt_error err = {0};
    assert_int_equal(gt_st_write(p, t, 2, &err), GT_OK);
    gt_st_file f;
    assert_int_equal(gt_st_open(&f, p, &err), GT_OK);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.data_offset % 8, 0);
    const gt_st_tensor *ta = gt_st_find(&f, "a"), *tb = gt_st_find(&f, "b");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_int_equal(ta->shape[1], 3);
    float ra[6], rb[3];
    assert_int_equal(gt_st_read(&f, ta, ra, &err), GT_OK);
    assert_int_equal(gt_st_read(&f, tb, rb, &err), GT_OK);
    assert_memory_equal(ra, a, sizeof a);
    for (int i = 0; i < 3; i++)
        assert_true(rb[i] == gt_bf16_to_float(gt_bf16_from_float(b[i])));
    gt_st_close(&f);
}

static void write_raw(const char *p, const char *header, size_t data_bytes) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    uint64_t n = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(n >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0, f);
    fclose(f);
}

static void expect_refused(const char *header, size_t data_bytes, const char *needle) {
    char p[512];
    path_in(p, sizeof p, "bad.safetensors");
    write_raw(p, header, data_bytes);
    gt_st_file f;
    gt_error err = {0};
    assert_int_not_equal(gt_st_open(&f, p, &err), GT_OK);
    if (!strstr(err.msg, needle)) fail_msg("message lacks '%s': %s", needle, err.msg);
    assert_non_null(strstr(err.msg, p));
}

static void test_an_unknown_dtype_is_refused_naming_the_tensor(void **state) {
    (void)state;
    expect_refused("{\"w\": {\"dtype\": \"I8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 4,
                   "tensor 'w'");
}

static void test_offsets_that_do_not_match_the_shape_are_refused(void **state) {
    (void)state;
    expect_refused("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}",
                   16, "do not match its shape");
}

static void test_offsets_past_the_end_are_refused(void **state) {
    (void)state;
    expect_refused("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8,
                   "outside the file");
}

static void test_a_huge_shape_is_refused_without_overflow(void **state) {
    (void)state;
    expect_refused("{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
                   "\"data_offsets\": [0, 0]}}",
                   8, "more elements than the file");
}

static void test_a_header_longer_than_the_file_is_refused(void **state) {
    (void)state;
    char p[512];
    path_in(p, sizeof p, "short.safetensors");
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    unsigned char le[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    fwrite(le, 1, 8, f);
    fputs("{}", f);
    fclose(f);
    gt_st_file st;
    gt_error err = {0};
    assert_int_equal(gt_st_open(&st, p, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "is not a safetensors file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_written_tensors_read_back_exactly_or_rounded),
        cmocka_unit_test(test_an_unknown_dtype_is_refused_naming_the_tensor),
        cmocka_unit_test(test_offsets_that_do_not_match_the_shape_are_refused),
        cmocka_unit_test(test_offsets_past_the_end_are_refused),
        cmocka_unit_test(test_a_huge_shape_is_refused_without_overflow),
        cmocka_unit_test(test_a_header_longer_than_the_file_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
