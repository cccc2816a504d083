/* The weights exchange file (format in weights_io.h): writing the model's tensors from a flat
 * fp32 array (master weights or gradients of a trainer) and reading a file back. */
#include "bench/weights_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"

#define CHUNK_VALUES 16384 /* values converted to little-endian bytes per write */

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Writes n floats as little-endian fp32. */
static int write_floats(gt_atomic_file *a, const float *x, size_t n, gt_error *err) {
    unsigned char buf[CHUNK_VALUES * 4];
    while (n) {
        size_t k = n < CHUNK_VALUES ? n : CHUNK_VALUES;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            put_u32(buf + 4 * i, u);
        }
        int rc = gt_atomic_write(a, buf, 4 * k, err);
        if (rc) return rc;
        x += k;
        n -= k;
    }
    return GT_OK;
}

int gt_weights_write_model(const char *path, const gt_model *m, const float *flat, gt_error *err) {
    int n = gt_model_num_tensors(m);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(m, i, &name, &off, &nd, shape);
        uint64_t numel = 1;
        for (int j = 0; j < nd; j++)
            numel *= (uint64_t)shape[j];
        total += numel;
    }
    gt_atomic_file a;
    int rc = gt_atomic_open(&a, path, err);
    if (rc) return rc;
    unsigned char hdr[GT_WEIGHTS_HEADER_BYTES] = {0};
    put_u32(hdr, GT_WEIGHTS_MAGIC);
    put_u32(hdr + 4, GT_WEIGHTS_VERSION);
    put_u32(hdr + 8, (uint32_t)n);
    put_u64(hdr + 16, total);
    if ((rc = gt_atomic_write(&a, hdr, sizeof hdr, err))) return rc;
    for (int i = 0; i < n; i++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(m, i, &name, &off, &nd, shape);
        unsigned char rec[GT_WEIGHTS_RECORD_BYTES] = {0};
        if (strlen(name) >= GT_WEIGHTS_NAME_MAX) {
            gt_atomic_abort(&a);
            return gt_error_set(err, GT_ERR_INVALID,
                                "weights: tensor name '%s' is longer "
                                "than %d bytes",
                                name, GT_WEIGHTS_NAME_MAX - 1);
        }
        memcpy(rec, name, strlen(name) + 1); /* fits: checked against GT_WEIGHTS_NAME_MAX */
        put_u32(rec + 64, (uint32_t)nd);
        uint64_t numel = 1;
        for (int j = 0; j < 3; j++) {
            put_u32(rec + 68 + 4 * j, j < nd ? (uint32_t)shape[j] : 0);
            if (j < nd) numel *= (uint64_t)shape[j];
        }
        put_u64(rec + 80, numel);
        put_u64(rec + 88, off);
        if ((rc = gt_atomic_write(&a, rec, sizeof rec, err))) return rc;
    }
    for (int i = 0; i < n; i++) {
        const char *name;
        size_t off;
        int nd, shape[3];
        gt_model_tensor(m, i, &name, &off, &nd, shape);
        size_t numel = 1;
        for (int j = 0; j < nd; j++)
            numel *= (size_t)shape[j];
        if ((rc = write_floats(&a, flat + off, numel, err))) return rc;
    }
    rc = gt_atomic_commit(&a, err);
    if (rc) return gt_error_wrap(err, "weights: ");
    return GT_OK;
}

void gt_weights_free(gt_weights *w) {
    if (!w) return;
    free(w->tensors);
    free(w->values);
    memset(w, 0, sizeof *w);
}

int gt_weights_find(const gt_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->tensors[i].name, name)) return i;
    return -1;
}

/* Reads exactly n bytes or fails naming the file and what was expected. */
static int read_exact(FILE *f, void *buf, size_t n, const char *path, const char *what,
                      gt_error *err) {
    if (fread(buf, 1, n, f) != n)
        return gt_error_set(err, GT_ERR_INVALID,
                            "weights file %s is truncated in the %s; "
                            "write it again with `graphtrain bench --export-weights`",
                            path, what);
    return GT_OK;
}

static int read_body(FILE *f, const char *path, gt_weights *w, gt_error *err) {
    unsigned char hdr[GT_WEIGHTS_HEADER_BYTES];
    int rc = read_exact(f, hdr, sizeof hdr, path, "header", err);
    if (rc) return rc;
    if (get_u32(hdr) != GT_WEIGHTS_MAGIC)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a graphtrain weights file (bad "
                            "magic 0x%08x)",
                            path, get_u32(hdr));
    if (get_u32(hdr + 4) != GT_WEIGHTS_VERSION)
        return gt_error_set(err, GT_ERR_INVALID,
                            "weights file %s has version %u; this build "
                            "reads version %d",
                            path, get_u32(hdr + 4), GT_WEIGHTS_VERSION);
    uint32_t n = get_u32(hdr + 8);
    uint64_t total = get_u64(hdr + 16);
    if (n == 0 || n > 1000000 || total > ((uint64_t)1 << 40))
        return gt_error_set(err, GT_ERR_INVALID,
                            "weights file %s: implausible header (%u "
                            "tensors, %llu values)",
                            path, n, (unsigned long long)total);
    w->tensors = calloc(n, sizeof *w->tensors);
    w->values = malloc((size_t)(total ? total : 1) * sizeof(float));
    if (!w->tensors || !w->values)
        return gt_error_set(err, GT_ERR_NOMEM, "weights: out of host memory reading %s", path);
    w->n = (int)n;
    w->n_values = (size_t)total;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char rec[GT_WEIGHTS_RECORD_BYTES];
        if ((rc = read_exact(f, rec, sizeof rec, path, "tensor table", err))) return rc;
        gt_weights_tensor *t = &w->tensors[i];
        if (rec[GT_WEIGHTS_NAME_MAX - 1] != '\0')
            return gt_error_set(err, GT_ERR_INVALID,
                                "weights file %s: tensor %u has an "
                                "unterminated name",
                                path, i);
        memcpy(t->name, rec, GT_WEIGHTS_NAME_MAX);
        t->ndim = (int)get_u32(rec + 64);
        uint64_t numel = 1;
        for (int j = 0; j < 3; j++)
            t->shape[j] = (int)get_u32(rec + 68 + 4 * j);
        if (t->ndim < 1 || t->ndim > 3)
            return gt_error_set(err, GT_ERR_INVALID,
                                "weights file %s: tensor '%s' has %d "
                                "dimensions (1 to 3 allowed)",
                                path, t->name, t->ndim);
        for (int j = 0; j < t->ndim; j++)
            numel *= (uint64_t)t->shape[j];
        t->numel = (size_t)get_u64(rec + 80);
        t->offset = (size_t)get_u64(rec + 88);
        if (numel != t->numel)
            return gt_error_set(err, GT_ERR_INVALID,
                                "weights file %s: tensor '%s' says %zu "
                                "values but its shape holds %llu",
                                path, t->name, t->numel, (unsigned long long)numel);
        sum += numel;
    }
    if (sum != total)
        return gt_error_set(err, GT_ERR_INVALID,
                            "weights file %s: the tensors hold %llu values "
                            "but the header says %llu",
                            path, (unsigned long long)sum, (unsigned long long)total);
    size_t at = 0;
    for (int i = 0; i < w->n; i++) {
        w->tensors[i].data = w->values + at;
        at += w->tensors[i].numel;
    }
    unsigned char buf[CHUNK_VALUES * 4];
    for (size_t done = 0; done < w->n_values;) {
        size_t k = w->n_values - done < CHUNK_VALUES ? w->n_values - done : CHUNK_VALUES;
        if ((rc = read_exact(f, buf, 4 * k, path, "tensor data", err))) return rc;
        for (size_t i = 0; i < k; i++) {
            uint32_t u = get_u32(buf + 4 * i);
            memcpy(&w->values[done + i], &u, 4);
        }
        done += k;
    }
    if (fgetc(f) != EOF)
        return gt_error_set(err, GT_ERR_INVALID,
                            "weights file %s has bytes after the last "
                            "tensor; it is not a file this version wrote",
                            path);
    return GT_OK;
}

int gt_weights_read(const char *path, gt_weights *w, gt_error *err) {
    memset(w, 0, sizeof *w);
    FILE *f = fopen(path, "rb");
    if (!f)
        return gt_error_set(err, GT_ERR_IO, "cannot open weights file %s: %s", path,
                            strerror(errno));
    int rc = read_body(f, path, w, err);
    fclose(f);
    if (rc) gt_weights_free(w);
    return rc;
}
