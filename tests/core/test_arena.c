/* Arena planning: offsets are aligned, pointers are bound after allocation and stay put. */
#include "testlib.h"

#include <string.h>

#include "backend/backend.h"
#include "core/arena.h"

static void test_arena_binds_aligned_pointers(void **state) {
    (void)state;
    gt_error err = {0};
    gt_backend *b = NULL;
    assert_int_equal(gt_backend_create_cpu(&b, &err), GT_OK);
    gt_arena a;
    gt_arena_init(&a, "params");
    void *x = NULL, *y = NULL;
    assert_int_equal(gt_arena_add(&a, "x", 10, &x, &err), GT_OK);
    assert_int_equal(gt_arena_add(&a, "y", 1000, &y, &err), GT_OK);
    assert_int_equal(gt_arena_size(&a), GT_ARENA_ALIGN + 1024);
    assert_int_equal(gt_backend_alloc_arena(b, &a, &err), GT_OK);
    assert_non_null(x);
    assert_ptr_equal((char *)y, (char *)x + GT_ARENA_ALIGN);
    assert_int_equal(((uintptr_t)x) % GT_ARENA_ALIGN, 0);
    gt_arena_release(&a);
    gt_backend_destroy(b);
}

static void test_arena_refuses_tensor_after_allocation(void **state) {
    (void)state;
    gt_error err = {0};
    gt_backend *b = NULL;
    assert_int_equal(gt_backend_create_cpu(&b, &err), GT_OK);
    gt_arena a;
    gt_arena_init(&a, "grads");
    void *x = NULL, *y = NULL;
    assert_int_equal(gt_arena_add(&a, "x", 64, &x, &err), GT_OK);
    assert_int_equal(gt_backend_alloc_arena(b, &a, &err), GT_OK);
    assert_int_equal(gt_arena_add(&a, "late", 64, &y, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "late"));
    gt_arena_release(&a);
    gt_backend_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_binds_aligned_pointers),
        cmocka_unit_test(test_arena_refuses_tensor_after_allocation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
