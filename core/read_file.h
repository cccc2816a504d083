/* Reading a whole file into memory, for the loaders of small text files (GPT-2's vocabulary,
 * GEMM algorithm tables). */
#ifndef GT_CORE_READ_FILE_H
#define GT_CORE_READ_FILE_H

#include <stddef.h>

#include "core/error.h"

/* Reads path into a new buffer (*buf, freed by the caller) of *n bytes plus a NUL after them.
 * Errors name the path: GT_ERR_IO (cannot open it, or a read failed), GT_ERR_INVALID (larger
 * than max_bytes), GT_ERR_NOMEM. Works on pipes too (no seeking). */
int gt_read_file(const char *path, size_t max_bytes, char **buf, size_t *n, gt_error *err);

#endif
