/* Token shard reading (mmap + header checks) and writing; see shard.h. */
#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static int check_header(gt_shard *s, const char *path, size_t file_bytes, gt_error *err) {
    const char *fix = "re-create it with `graphtrain prepare-data`";
    if (file_bytes < GT_SHARD_HEADER_BYTES)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s is truncated: %zu bytes, shorter than its %d-byte header; "
                            "%s",
                            path, file_bytes, GT_SHARD_HEADER_BYTES, fix);
    const unsigned char *h = s->map;
    uint32_t magic = rd32(h + 4 * GT_SHARD_H_MAGIC);
    if (magic != GT_SHARD_MAGIC)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a graphtrain token shard (magic 0x%08x, expected 0x%08x); "
                            "point dataset.data_path at shards written by `graphtrain "
                            "prepare-data`",
                            path, magic, GT_SHARD_MAGIC);
    uint32_t version = rd32(h + 4 * GT_SHARD_H_VERSION);
    if (version != GT_SHARD_VERSION)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s has format version %u; this graphtrain reads version %d; "
                            "%s",
                            path, version, GT_SHARD_VERSION, fix);
    uint32_t width = rd32(h + 4 * GT_SHARD_H_WIDTH);
    if (width != 2 && width != 4)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s declares %u bytes per token (must be 2 or 4); %s", path,
                            width, fix);
    uint64_t count = (uint64_t)rd32(h + 4 * GT_SHARD_H_COUNT_LO) |
                     (uint64_t)rd32(h + 4 * GT_SHARD_H_COUNT_HI) << 32;
    uint32_t vocab = rd32(h + 4 * GT_SHARD_H_VOCAB);
    if (vocab == 0 || vocab > (width == 2 ? 65536u : 0x7fffffffu))
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s declares vocabulary size %u, impossible for %u-byte "
                            "tokens; %s",
                            path, vocab, width, fix);
    uint64_t have = (file_bytes - GT_SHARD_HEADER_BYTES) / width;
    if ((file_bytes - GT_SHARD_HEADER_BYTES) % width != 0 || count != have)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s is truncated or corrupt: header says %llu tokens, the file "
                            "holds %zu bytes of tokens (%llu tokens); %s",
                            path, (unsigned long long)count, file_bytes - GT_SHARD_HEADER_BYTES,
                            (unsigned long long)have, fix);
    s->width = (int)width;
    s->count = (int64_t)count;
    s->vocab = (int)vocab;
    s->tokens = (const unsigned char *)s->map + GT_SHARD_HEADER_BYTES;
    uint32_t mx = 0;
    for (int64_t i = 0; i < s->count; i++) {
        uint32_t v = gt_shard_token(s, i);
        if (v > mx) mx = v;
    }
    s->max_id = mx;
    if (s->count > 0 && mx >= vocab)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s holds token id %u, outside its vocabulary of %u; %s", path,
                            mx, vocab, fix);
    return GT_OK;
}

int gt_shard_open(gt_shard *s, const char *path, gt_error *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return gt_error_set(err, GT_ERR_IO, "cannot open shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gt_error_set(err, GT_ERR_IO, "shard %s is not a regular file", path);
    }
    s->map_bytes = (size_t)st.st_size;
    if (s->map_bytes > 0) {
        s->map = mmap(NULL, s->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (s->map == MAP_FAILED) {
            s->map = NULL;
            int e = errno;
            close(fd);
            return gt_error_set(err, GT_ERR_IO, "cannot map shard %s: %s", path, strerror(e));
        }
    }
    close(fd); /* the mapping keeps the file alive */
    int rc = check_header(s, path, s->map_bytes, err);
    if (rc) gt_shard_close(s);
    return rc;
}

void gt_shard_close(gt_shard *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->map_bytes);
    s->map = NULL;
    s->tokens = NULL;
    s->map_bytes = 0;
}

int gt_shard_write(const char *path, const uint32_t *tokens, int64_t n, int vocab, gt_error *err) {
    if (vocab <= 0)
        return gt_error_set(err, GT_ERR_INVALID, "shard %s: vocabulary size %d must be > 0", path,
                            vocab);
    int width = vocab <= 65536 ? 2 : 4;
    unsigned char h[GT_SHARD_HEADER_BYTES];
    memset(h, 0, sizeof h);
    wr32(h + 4 * GT_SHARD_H_MAGIC, GT_SHARD_MAGIC);
    wr32(h + 4 * GT_SHARD_H_VERSION, GT_SHARD_VERSION);
    wr32(h + 4 * GT_SHARD_H_WIDTH, (uint32_t)width);
    wr32(h + 4 * GT_SHARD_H_COUNT_LO, (uint32_t)((uint64_t)n & 0xffffffffu));
    wr32(h + 4 * GT_SHARD_H_COUNT_HI, (uint32_t)((uint64_t)n >> 32));
    wr32(h + 4 * GT_SHARD_H_VOCAB, (uint32_t)vocab);
    gt_atomic_file f;
    int rc = gt_atomic_open(&f, path, err);
    if (rc) return rc;
    rc = gt_atomic_write(&f, h, sizeof h, err);
    unsigned char buf[8192];
    int64_t i = 0;
    while (!rc && i < n) {
        size_t used = 0;
        for (; i < n && used + 4 <= sizeof buf; i++) {
            if (tokens[i] >= (uint32_t)vocab) {
                gt_atomic_abort(&f);
                return gt_error_set(err, GT_ERR_INVALID,
                                    "shard %s: token %lld has id %u, outside the vocabulary "
                                    "of %d",
                                    path, (long long)i, tokens[i], vocab);
            }
            buf[used++] = (unsigned char)tokens[i];
            buf[used++] = (unsigned char)(tokens[i] >> 8);
            if (width == 4) {
                buf[used++] = (unsigned char)(tokens[i] >> 16);
                buf[used++] = (unsigned char)(tokens[i] >> 24);
            }
        }
        rc = gt_atomic_write(&f, buf, used, err);
    }
    if (!rc) rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}
