/* Error messages: formatting into the fixed buffer of gt_error, with truncation marked. */
#define GT_ERROR_IMPL /* the real definitions below, not the analyzer's model */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int gt_error_set(gt_error *err, int code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    err->count = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int gt_error_wrap(gt_error *err, const char *fmt, ...) {
    if (!err) return GT_ERR_INVALID;
    char prefix[GT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[GT_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof err->msg) n = sizeof err->msg - 1;
    memcpy(err->msg, prefix, n);
    size_t rest = sizeof err->msg - 1 - n;
    size_t m = strlen(old);
    if (m > rest) m = rest;
    memcpy(err->msg + n, old, m);
    err->msg[n + m] = '\0';
    return err->code ? err->code : GT_ERR_INVALID;
}

void gt_error_clear(gt_error *err) {
    if (!err) return;
    err->code = GT_OK;
    err->count = 0;
    err->msg[0] = '\0';
}
