/* Whole-file reads (read_file.h). */
#include "core/read_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gt_read_file(const char *path, size_t max_bytes, char **buf, size_t *n, gt_error *err) {
    *buf = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return gt_error_set(err, GT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, used = 0;
    char *b = malloc(cap + 1);
    while (b) {
        size_t got = fread(b + used, 1, cap - used, f);
        used += got;
        if (used < cap) break;
        if (cap >= max_bytes) {
            free(b);
            fclose(f);
            return gt_error_set(err, GT_ERR_INVALID, "%s is larger than %zu MiB", path,
                                max_bytes >> 20);
        }
        cap *= 2;
        char *nb = realloc(b, cap + 1);
        if (!nb) free(b);
        b = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading %s", path);
    if (bad) {
        free(b);
        return gt_error_set(err, GT_ERR_IO, "reading %s failed", path);
    }
    b[used] = '\0';
    *buf = b;
    *n = used;
    return GT_OK;
}
