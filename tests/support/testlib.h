/* Helpers shared by the tests: paths into the source tree, temp dirs, running the binary. */
#ifndef GT_TESTS_TESTLIB_H
#define GT_TESTS_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* For clang-tidy's static analyzer only (scripts/lint.sh): cmocka's _fail and _skip jump out
 * of the test and never return, but cmocka.h does not say so, and the analyzer would follow
 * `if (!p) fail_msg(...);` on into a NULL dereference. Compiled code is unchanged. */
#ifdef __clang_analyzer__
void _fail(const char *const file, const int line) __attribute__((noreturn));
void _skip(const char *const file, const int line) __attribute__((noreturn));
#endif

/* Absolute path of a file in the source tree (from GT_SOURCE_DIR set by ctest). */
const char *gt_test_source_path(const char *rel, char *buf, size_t n);
/* Creates a fresh temporary directory and returns its path (static buffer per call site). */
void gt_test_tmpdir(char *buf, size_t n);
/* Writes text to a new file at path (fails the test when it cannot). */
void gt_test_write_text(const char *path, const char *text);
/* Runs the graphtrain binary (GT_BINARY) with args; captures stdout+stderr into out;
 * returns the exit status. */
int gt_test_run(const char *args, char *out, size_t n);
/* Removes dir and the files directly inside it (a checkpoint folder; no subfolders). */
void gt_test_remove_flat_dir(const char *dir);

#endif
