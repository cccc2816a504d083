/* Atomic file writing for shards, vocabularies and checkpoints: data goes to a temporary
 * name beside the target, is fsync'ed, then renamed over the target (and the directory is
 * fsync'ed), so a crash never leaves a half-written file under the real name. */
#ifndef GT_CORE_ATOMIC_FILE_H
#define GT_CORE_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

typedef struct gt_atomic_file {
    FILE *f;
    char path[1024]; /* final name */
    char tmp[1100];  /* temporary name, removed on abort */
} gt_atomic_file;

int gt_atomic_open(gt_atomic_file *a, const char *path, gt_error *err);
int gt_atomic_write(gt_atomic_file *a, const void *data, size_t bytes, gt_error *err);
/* Flushes, fsyncs, closes and renames; on failure the temporary file is removed. */
int gt_atomic_commit(gt_atomic_file *a, gt_error *err);
/* Drops the temporary file; safe after a failed or successful commit. */
void gt_atomic_abort(gt_atomic_file *a);

/* mkdir -p */
int gt_mkdirs(const char *dir, gt_error *err);

#endif
