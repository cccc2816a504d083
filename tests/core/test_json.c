/* The one JSON writer (core/json.h): cJSON's text with Python's separators outside strings, an
 * indented form without tabs, NaN as null, exact 64-bit integers and floats, and failed writes
 * reported (a full disk is an error, not a short file). */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

static cJSON *sample(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", "a, b: \"c\"\ttab");
    cJSON_AddNumberToObject(o, "n", 2);
    cJSON *list = cJSON_AddArrayToObject(o, "list");
    cJSON_AddItemToArray(list, cJSON_CreateNumber(1));
    cJSON_AddItemToArray(list, cJSON_CreateNumber(2.5));
    return o;
}

static void test_line_style_spaces_separators_but_not_strings(void **state) {
    (void)state;
    cJSON *o = sample();
    char *text = gt_json_print(o, GT_JSON_LINE);
    assert_non_null(text);
    assert_string_equal(text,
                        "{\"text\": \"a, b: \\\"c\\\"\\ttab\", \"n\": 2, \"list\": [1, 2.5]}");
    cJSON *back = cJSON_Parse(text);
    assert_non_null(back);
    assert_true(cJSON_Compare(o, back, 1));
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(o);
}

static void test_indent_style_has_one_key_a_line_and_no_tabs(void **state) {
    (void)state;
    cJSON *o = sample();
    char *text = gt_json_print(o, GT_JSON_INDENT);
    assert_non_null(text);
    assert_null(strchr(text, '\t'));
    assert_non_null(strstr(text, "\n  \"n\": 2,\n"));
    assert_non_null(strstr(text, "\"list\": [1, 2.5]"));
    cJSON *back = cJSON_Parse(text);
    assert_true(cJSON_Compare(o, back, 1));
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(o);
}

static void test_nan_and_inf_print_as_null(void **state) {
    (void)state;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "nan", NAN);
    cJSON_AddNumberToObject(o, "inf", INFINITY);
    cJSON_AddItemToObject(o, "fnan", gt_json_float(NAN));
    char *text = gt_json_print(o, GT_JSON_LINE);
    assert_string_equal(text, "{\"nan\": null, \"inf\": null, \"fnan\": null}");
    free(text);
    cJSON_Delete(o);
}

static void test_u64_and_float_print_exactly(void **state) {
    (void)state;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "seed", gt_json_u64(18446744073709551615ull));
    cJSON_AddItemToObject(o, "loss", gt_json_float(4.1701431274414062f));
    char *text = gt_json_print(o, GT_JSON_LINE);
    assert_string_equal(text, "{\"seed\": 18446744073709551615, \"loss\": 4.17014313}");
    cJSON *back = cJSON_Parse(text);
    assert_non_null(back);
    float loss = (float)cJSON_GetObjectItem(back, "loss")->valuedouble;
    assert_true(loss == 4.1701431274414062f);
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(o);
}

static void test_write_to_a_full_disk_is_an_error_naming_it(void **state) {
    (void)state;
    FILE *f = fopen("/dev/full", "w");
    if (!f) skip();
    cJSON *o = sample();
    gt_error err = {0};
    assert_int_equal(gt_json_write(f, o, GT_JSON_LINE, "logger.metrics_file=/dev/full", &err),
                     GT_ERR_IO);
    assert_non_null(strstr(err.msg, "logger.metrics_file=/dev/full"));
    assert_non_null(strstr(err.msg, "No space left on device"));
    fclose(f);
    assert_int_equal(gt_json_write_file("/dev/full", o, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "/dev/full"));
    cJSON_Delete(o);
}

static void test_a_failed_build_is_out_of_memory_not_an_empty_record(void **state) {
    (void)state;
    gt_error err = {0};
    assert_null(gt_json_print(NULL, GT_JSON_LINE));
    assert_int_equal(gt_json_write(stdout, NULL, GT_JSON_LINE, "x", &err), GT_ERR_NOMEM);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_style_spaces_separators_but_not_strings),
        cmocka_unit_test(test_indent_style_has_one_key_a_line_and_no_tabs),
        cmocka_unit_test(test_nan_and_inf_print_as_null),
        cmocka_unit_test(test_u64_and_float_print_exactly),
        cmocka_unit_test(test_write_to_a_full_disk_is_an_error_naming_it),
        cmocka_unit_test(test_a_failed_build_is_out_of_memory_not_an_empty_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
