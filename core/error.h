/* Errors: every function that can fail returns GT_OK or an error code and fills a gt_error
 * whose message names what failed and what to do about it. The CLI prints the message and
 * exits non-zero; nothing inside the library calls exit() or assert(). */
#ifndef GT_CORE_ERROR_H
#define GT_CORE_ERROR_H

#include <stddef.h>

enum {
    GT_OK = 0,
    GT_ERR_INVALID = 2,     /* bad user input: config, file contents, arguments */
    GT_ERR_IO = 3,          /* a file could not be read or written */
    GT_ERR_NOMEM = 4,       /* host or device memory exhausted */
    GT_ERR_DEVICE = 5,      /* a CUDA / cuBLAS / cuDNN / NCCL call failed */
    GT_ERR_NUMERIC = 6,     /* NaN or Inf detected in loss or gradients */
    GT_ERR_INTERRUPTED = 7, /* the user pressed Ctrl-C */
    GT_ERR_UNSUPPORTED = 8, /* a feature this build or backend does not have */
};

#define GT_ERROR_MSG_MAX 16384 /* room for every bad setting of a recipe, one a line */

typedef struct gt_error {
    int code;
    char msg[GT_ERROR_MSG_MAX];
    int count; /* the problems msg reports: 1 from gt_error_set, more where a loader reports
                * several bad settings at once (a message may list fewer than it counts) */
} gt_error;

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
