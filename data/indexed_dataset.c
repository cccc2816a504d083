/* Megatron indexed dataset reader (mmap + full index validation); see indexed_dataset.h. */
#include "data/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GT_IDX_PATH_MAX 1024

struct gt_indexed_dataset {
    char prefix[GT_IDX_PATH_MAX];
    const unsigned char *idx, *bin; /* mappings (NULL when the file is empty) */
    size_t idx_bytes, bin_bytes;
    int dtype, itemsize;
    int64_t n_seq, n_doc;
    const unsigned char *lengths, *pointers, *docs; /* unaligned arrays inside idx */
};

static const char k_fix[] = "re-create it with Megatron's tools/preprocess_data.py (or check "
                            "that the .idx and .bin files belong together)";

static int64_t rd_i64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, sizeof v); /* the arrays are not 8-byte aligned (header is 34 bytes) */
    return v;
}

static int32_t rd_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static int dtype_size(int code) {
    switch (code) {
    case GT_IDX_UINT8:
    case GT_IDX_INT8:
        return 1;
    case GT_IDX_INT16:
    case GT_IDX_UINT16:
        return 2;
    case GT_IDX_INT32:
    case GT_IDX_FLOAT32:
        return 4;
    case GT_IDX_INT64:
    case GT_IDX_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

int gt_indexed_exists(const char *prefix) {
    char p[GT_IDX_PATH_MAX + 8];
    struct stat st;
    snprintf(p, sizeof p, "%s.idx", prefix);
    if (stat(p, &st) || !S_ISREG(st.st_mode)) return 0;
    snprintf(p, sizeof p, "%s.bin", prefix);
    return !stat(p, &st) && S_ISREG(st.st_mode);
}

static int map_file(const char *path, const unsigned char **map, size_t *bytes, gt_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return gt_error_set(err, GT_ERR_IO,
                            "cannot open %s: %s; dataset.data_path names a Megatron prefix "
                            "(PREFIX.idx and PREFIX.bin)",
                            path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return gt_error_set(err, GT_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    *bytes = (size_t)st.st_size;
    *map = NULL;
    if (*bytes) {
        void *m = mmap(NULL, *bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return gt_error_set(err, GT_ERR_IO, "cannot map %s: %s", path, strerror(e));
        }
        *map = m;
    }
    close(fd);
    return GT_OK;
}

/* The header and every index entry; the arrays' sizes come from counts that are first
 * bounded by the file size, so no product below can overflow. */
static int check_index(gt_indexed_dataset *d, const char *path, gt_error *err) {
    const unsigned char *h = d->idx;
    if (d->idx_bytes < GT_IDX_HEADER_BYTES || memcmp(h, GT_IDX_MAGIC, GT_IDX_MAGIC_BYTES))
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a Megatron MMapIndexedDataset index (%s; expected the "
                            "header MMIDIDX\\0\\0); %s",
                            path, d->idx_bytes < GT_IDX_HEADER_BYTES ? "too short" : "bad magic",
                            k_fix);
    int64_t version = rd_i64(h + 9);
    if (version != GT_IDX_VERSION)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: index version %lld, but Megatron's format (and this reader) is "
                            "version %d; %s",
                            path, (long long)version, GT_IDX_VERSION, k_fix);
    d->dtype = h[17];
    d->itemsize = dtype_size(d->dtype);
    if (!d->itemsize)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: unknown dtype code %d (Megatron's codes are 1..8); %s", path,
                            d->dtype, k_fix);
    if (d->dtype == GT_IDX_FLOAT32 || d->dtype == GT_IDX_FLOAT64)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: dtype code %d is a floating-point type, which cannot hold token "
                            "ids; tokenize the text with preprocess_data.py",
                            path, d->dtype);
    d->n_seq = rd_i64(h + 18);
    d->n_doc = rd_i64(h + 26);
    size_t room = d->idx_bytes - GT_IDX_HEADER_BYTES;
    if (d->n_seq < 0 || d->n_doc < 1 || (uint64_t)d->n_seq > room / 12 ||
        (uint64_t)d->n_doc > (room - (size_t)d->n_seq * 12) / 8)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: the header counts %lld sequences and %lld document indices, "
                            "which do not fit in its %zu bytes (truncated or corrupt); %s",
                            path, (long long)d->n_seq, (long long)d->n_doc, d->idx_bytes, k_fix);
    size_t need = GT_IDX_HEADER_BYTES + (size_t)d->n_seq * 12 + (size_t)d->n_doc * 8;
    if (d->idx_bytes != need && d->idx_bytes != need + (size_t)d->n_seq)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: %zu bytes, but %lld sequences and %lld document indices need "
                            "%zu (or %zu with sequence modes); %s",
                            path, d->idx_bytes, (long long)d->n_seq, (long long)d->n_doc, need,
                            need + (size_t)d->n_seq, k_fix);
    d->lengths = h + GT_IDX_HEADER_BYTES;
    d->pointers = d->lengths + (size_t)d->n_seq * 4;
    d->docs = d->pointers + (size_t)d->n_seq * 8;
    for (int64_t i = 0; i < d->n_seq; i++) {
        int32_t len = rd_i32(d->lengths + 4 * i);
        int64_t ptr = rd_i64(d->pointers + 8 * i);
        if (len < 0 || ptr < 0 || ptr % d->itemsize || (uint64_t)ptr > d->bin_bytes ||
            (uint64_t)len > (d->bin_bytes - (uint64_t)ptr) / (uint64_t)d->itemsize)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: sequence %lld (length %d at byte %lld) lies outside the "
                                "%zu-byte .bin file; %s",
                                path, (long long)i, len, (long long)ptr, d->bin_bytes, k_fix);
    }
    int64_t prev = 0;
    for (int64_t k = 0; k < d->n_doc; k++) {
        int64_t v = rd_i64(d->docs + 8 * k);
        if ((k == 0 && v != 0) || v < prev || v > d->n_seq || (k == d->n_doc - 1 && v != d->n_seq))
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: document index %lld is %lld; they must start at 0, never "
                                "decrease and end at the sequence count %lld; %s",
                                path, (long long)k, (long long)v, (long long)d->n_seq, k_fix);
        prev = v;
    }
    return GT_OK;
}

int gt_indexed_open(gt_indexed_dataset **out, const char *prefix, gt_error *err) {
    *out = NULL;
    if (strlen(prefix) + 5 > GT_IDX_PATH_MAX)
        return gt_error_set(err, GT_ERR_INVALID, "dataset prefix %.80s... is too long", prefix);
    gt_indexed_dataset *d = calloc(1, sizeof *d);
    if (!d) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    snprintf(d->prefix, sizeof d->prefix, "%s", prefix);
    char idx_path[GT_IDX_PATH_MAX + 8], bin_path[GT_IDX_PATH_MAX + 8];
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);
    int rc = map_file(bin_path, &d->bin, &d->bin_bytes, err);
    if (!rc) rc = map_file(idx_path, &d->idx, &d->idx_bytes, err);
    if (!rc) rc = check_index(d, idx_path, err);
    if (rc) {
        gt_indexed_close(d);
        return rc;
    }
    *out = d;
    return GT_OK;
}

void gt_indexed_close(gt_indexed_dataset *d) {
    if (!d) return;
    if (d->idx) munmap((void *)d->idx, d->idx_bytes);
    if (d->bin) munmap((void *)d->bin, d->bin_bytes);
    free(d);
}

int64_t gt_indexed_num_sequences(const gt_indexed_dataset *d) {
    return d->n_seq;
}

int64_t gt_indexed_num_documents(const gt_indexed_dataset *d) {
    return d->n_doc - 1;
}

int gt_indexed_dtype(const gt_indexed_dataset *d) {
    return d->dtype;
}

const char *gt_indexed_prefix(const gt_indexed_dataset *d) {
    return d->prefix;
}

int32_t gt_indexed_sequence_length(const gt_indexed_dataset *d, int64_t i) {
    return rd_i32(d->lengths + 4 * i);
}

static int64_t token_at(const unsigned char *p, int dtype) {
    switch (dtype) {
    case GT_IDX_UINT8:
        return p[0];
    case GT_IDX_INT8:
        return (int8_t)p[0];
    case GT_IDX_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case GT_IDX_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case GT_IDX_INT32:
        return rd_i32(p);
    default:
        return rd_i64(p);
    }
}

int gt_indexed_read(const gt_indexed_dataset *d, int64_t seq, int64_t offset, int64_t len,
                    int vocab, int32_t *out, gt_error *err) {
    if (seq < 0 || seq >= d->n_seq || offset < 0 || len < 0 ||
        offset + len > gt_indexed_sequence_length(d, seq))
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: tokens [%lld, %lld) of sequence %lld are outside the dataset "
                            "(a bug in the sample index)",
                            d->prefix, (long long)offset, (long long)(offset + len),
                            (long long)seq);
    if (len == 0) return GT_OK; /* an empty .bin is not mapped */
    const unsigned char *p =
        d->bin + rd_i64(d->pointers + 8 * seq) + (size_t)offset * (size_t)d->itemsize;
    for (int64_t t = 0; t < len; t++, p += d->itemsize) {
        int64_t v = token_at(p, d->dtype);
        if (v < 0 || v >= vocab)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s.bin: sequence %lld holds token id %lld, outside "
                                "model.vocab_size %d; set model.vocab_size to the tokenizer's "
                                "vocabulary (padded as Megatron pads it)",
                                d->prefix, (long long)seq, (long long)v, vocab);
        out[t] = (int32_t)v;
    }
    return GT_OK;
}
