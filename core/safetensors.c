/* safetensors writing and checked reading; see safetensors.h. The header is built and parsed
 * by cJSON (core/json.h); the data is written through an atomic file, in chunks, so a large
 * tensor needs no second copy in its stored dtype. */
#include "core/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/bf16.h"
#include "core/json.h"

#define ST_CHUNK 4096 /* elements converted per write */

int64_t gt_st_numel(const gt_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t gt_st_dtype_bytes(gt_st_dtype d) {
    return d == GT_ST_F32 ? 4 : 2;
}

const char *gt_st_dtype_name(gt_st_dtype d) {
    return d == GT_ST_F32 ? "F32" : d == GT_ST_BF16 ? "BF16" : "F16";
}

static int parse_dtype(const char *s, gt_st_dtype *d) {
    if (!strcmp(s, "F32"))
        *d = GT_ST_F32;
    else if (!strcmp(s, "BF16"))
        *d = GT_ST_BF16;
    else if (!strcmp(s, "F16"))
        *d = GT_ST_F16;
    else
        return 0;
    return 1;
}

static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static char *build_header(const gt_st_tensor *t, int n, size_t *len) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    int ok = root && meta && cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *range = e ? cJSON_CreateArray() : NULL;
        ok = e && shape && range &&
             cJSON_AddStringToObject(e, "dtype", gt_st_dtype_name(t[i].dtype));
        for (int d = 0; ok && d < t[i].ndim; d++)
            ok = cJSON_AddItemToArray(shape, gt_json_u64((unsigned long long)t[i].shape[d]));
        uint64_t bytes = (uint64_t)gt_st_numel(&t[i]) * gt_st_dtype_bytes(t[i].dtype);
        if (ok) ok = cJSON_AddItemToArray(range, gt_json_u64(off));
        if (ok) ok = cJSON_AddItemToArray(range, gt_json_u64(off + bytes));
        if (ok)
            ok = cJSON_AddItemToObject(e, "data_offsets", range);
        else
            cJSON_Delete(range);
        off += bytes;
    }
    char *text = ok ? gt_json_print(root, GT_JSON_LINE) : NULL;
    cJSON_Delete(root);
    if (!text) return NULL;
    /* the data section starts 8-aligned, as the format recommends: pad with spaces */
    size_t l = strlen(text), padded = (l + 7) & ~(size_t)7;
    char *out = realloc(text, padded + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    memset(out + l, ' ', padded - l);
    out[padded] = '\0';
    *len = padded;
    return out;
}

static int write_data(gt_atomic_file *f, const gt_st_tensor *t, gt_error *err) {
    int64_t n = gt_st_numel(t);
    if (t->dtype == GT_ST_F32) return gt_atomic_write(f, t->data, (size_t)n * 4, err);
    uint16_t buf[ST_CHUNK];
    for (int64_t i = 0; i < n; i += ST_CHUNK) {
        int64_t c = n - i < ST_CHUNK ? n - i : ST_CHUNK;
        for (int64_t j = 0; j < c; j++)
            buf[j] = gt_bf16_from_float(t->data[i + j]);
        int rc = gt_atomic_write(f, buf, (size_t)c * 2, err);
        if (rc) return rc;
    }
    return GT_OK;
}

int gt_st_write(const char *path, const gt_st_tensor *t, int n, gt_error *err) {
    for (int i = 0; i < n; i++)
        if (t[i].dtype == GT_ST_F16)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: writing F16 is not supported (use F32 or BF16)", path);
    size_t len = 0;
    char *header = build_header(t, n, &len);
    if (!header) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory writing %s", path);
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++)
        len_le[i] = (unsigned char)((uint64_t)len >> (8 * i));
    gt_atomic_file f;
    int rc = gt_atomic_open(&f, path, err);
    if (!rc) rc = gt_atomic_write(&f, len_le, 8, err);
    if (!rc) rc = gt_atomic_write(&f, header, len, err);
    for (int i = 0; !rc && i < n; i++)
        rc = write_data(&f, &t[i], err);
    if (!rc) rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    free(header);
    return rc;
}

/* One header entry into t; returns a reason when it is malformed, else NULL. */
static const char *parse_entry(const cJSON *e, gt_st_tensor *t, uint64_t data_bytes) {
    if (strlen(e->string) >= GT_ST_NAME_MAX) return "its name is too long";
    snprintf(t->name, sizeof t->name, "%s", e->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(range) ||
        cJSON_GetArraySize(range) != 2)
        return "it lacks dtype, shape or data_offsets";
    if (!parse_dtype(dt->valuestring, &t->dtype))
        return "its dtype is not F32, BF16 or F16 (convert the weights to one of them)";
    t->ndim = cJSON_GetArraySize(shape);
    if (t->ndim > GT_ST_MAX_DIMS) return "it has more than 4 dimensions";
    double numel = 1; /* bounded by the file before any product could overflow */
    for (int d = 0; d < t->ndim; d++) {
        const cJSON *s = cJSON_GetArrayItem(shape, d);
        if (!cJSON_IsNumber(s) || s->valuedouble < 0 || s->valuedouble != floor(s->valuedouble))
            return "its shape is not a list of sizes";
        numel *= s->valuedouble;
        if (numel > (double)data_bytes) return "its shape holds more elements than the file";
        t->shape[d] = (int64_t)s->valuedouble;
    }
    const cJSON *b = cJSON_GetArrayItem(range, 0), *en = cJSON_GetArrayItem(range, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(en) || b->valuedouble < 0 ||
        en->valuedouble < b->valuedouble || en->valuedouble > (double)data_bytes)
        return "its data_offsets lie outside the file";
    t->begin = (uint64_t)b->valuedouble;
    t->end = (uint64_t)en->valuedouble;
    if (t->end - t->begin != (uint64_t)gt_st_numel(t) * gt_st_dtype_bytes(t->dtype))
        return "its data_offsets do not match its shape and dtype";
    return NULL;
}

static int parse_header(gt_st_file *f, const char *text, gt_error *err) {
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return gt_error_set(err, GT_ERR_INVALID, "%s: the safetensors header is not a JSON object",
                            f->path);
    }
    int n = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        n += strcmp(e->string, "__metadata__") != 0;
    f->tensors = calloc((size_t)(n ? n : 1), sizeof *f->tensors);
    int rc = f->tensors ? GT_OK : gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    for (const cJSON *e = root->child; !rc && e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        const char *why = cJSON_IsObject(e) ? parse_entry(e, &f->tensors[f->n], f->data_bytes)
                                            : "it is not an object";
        if (why)
            rc = gt_error_set(err, GT_ERR_INVALID, "%s: tensor '%s' in the header: %s", f->path,
                              e->string, why);
        else
            f->n++;
    }
    cJSON_Delete(root);
    return rc;
}

int gt_st_open(gt_st_file *f, const char *path, gt_error *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *fp = fopen(path, "rb");
    if (!fp) return gt_error_set(err, GT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    f->fp = fp;
    unsigned char len_le[8];
    uint64_t len = 0;
    if (fread(len_le, 1, 8, fp) != 8) {
        gt_st_close(f);
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a safetensors file (shorter than 8 bytes)", path);
    }
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)len_le[i] << (8 * i);
    long long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0) size = ftell(fp);
    if (len == 0 || len > GT_ST_MAX_HEADER || size < 0 || 8 + len > (uint64_t)size) {
        gt_st_close(f);
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a safetensors file (its header length %llu does not fit "
                            "the file of %lld bytes)",
                            path, (unsigned long long)len, size);
    }
    f->data_offset = 8 + len;
    f->data_bytes = (uint64_t)size - f->data_offset;
    char *text = malloc(len + 1);
    int rc = text ? GT_OK : gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading %s", path);
    if (!rc && (fseek(fp, 8, SEEK_SET) != 0 || fread(text, 1, len, fp) != len))
        rc = gt_error_set(err, GT_ERR_IO, "%s: cannot read its header", path);
    if (!rc) {
        text[len] = '\0';
        rc = parse_header(f, text, err);
    }
    free(text);
    if (rc) gt_st_close(f);
    return rc;
}

void gt_st_close(gt_st_file *f) {
    if (!f) return;
    if (f->fp) fclose((FILE *)f->fp);
    free(f->tensors);
    f->fp = NULL;
    f->tensors = NULL;
    f->n = 0;
}

const gt_st_tensor *gt_st_find(const gt_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

int gt_st_read(const gt_st_file *f, const gt_st_tensor *t, float *out, gt_error *err) {
    FILE *fp = f->fp;
    int64_t n = gt_st_numel(t);
    if (fseek(fp, (long)(f->data_offset + t->begin), SEEK_SET) != 0)
        return gt_error_set(err, GT_ERR_IO, "%s: cannot seek to tensor %s", f->path, t->name);
    if (t->dtype == GT_ST_F32) {
        if (fread(out, 4, (size_t)n, fp) != (size_t)n)
            return gt_error_set(err, GT_ERR_IO, "%s: cannot read tensor %s", f->path, t->name);
        return GT_OK;
    }
    uint16_t buf[ST_CHUNK];
    for (int64_t i = 0; i < n; i += ST_CHUNK) {
        int64_t c = n - i < ST_CHUNK ? n - i : ST_CHUNK;
        if (fread(buf, 2, (size_t)c, fp) != (size_t)c)
            return gt_error_set(err, GT_ERR_IO, "%s: cannot read tensor %s", f->path, t->name);
        for (int64_t j = 0; j < c; j++)
            out[i + j] = t->dtype == GT_ST_BF16 ? gt_bf16_to_float(buf[j]) : f16_to_float(buf[j]);
    }
    return GT_OK;
}
