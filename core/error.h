/* Errors: every function that can fail returns GT_OK or an error code and fills a gt_error
 * whose message names what failed and what to do about it. The CLI prints the message and
 * exits non-zero; nothing inside the library calls exit() or assert(). */
#ifndef GT_CORE_ERROR_H
#define GT_CORE_ERROR_H

#include <stddef.h>

/* The codes (GT_OK, GT_ERR_*) and gt_error are public: include/graphtrain.h defines them. */
#include "graphtrain.h"

/* Sets code, a printf-style message and count 1; returns code so callers can
 * `return gt_error_set(...)`. err may be NULL. */
int gt_error_set(gt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends context ("loading checkpoint x: ") to an existing message. */
int gt_error_wrap(gt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void gt_error_clear(gt_error *err);

/* For clang-tidy's static analyzer only (scripts/lint.sh): it reads one file at a time, so it
 * cannot see that gt_error_set returns its code and would follow `rc = gt_error_set(...)` on
 * as if it were GT_OK. Spelling the return value out here removes those false paths; compiled
 * code is unchanged. core/error.c defines GT_ERROR_IMPL to keep its own definitions. */
#if defined(__clang_analyzer__) && !defined(GT_ERROR_IMPL)
#define gt_error_set(err, code, ...) (gt_error_set((err), (code), __VA_ARGS__), (code))
#endif

#endif
