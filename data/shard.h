/* Token shards: the on-disk format of prepared training data. A shard is a 256-int32 header
 * (magic, version, token width, token count, vocabulary size) followed by the token ids as
 * uint16 or uint32, little-endian. Readers memory-map the file and refuse anything whose
 * header or length does not add up, naming the file. */
#ifndef GT_DATA_SHARD_H
#define GT_DATA_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define GT_SHARD_MAGIC 0x48535447u /* "GTSH" read as a little-endian int32 */
#define GT_SHARD_VERSION 1
#define GT_SHARD_HEADER_INTS 256
#define GT_SHARD_HEADER_BYTES (GT_SHARD_HEADER_INTS * 4)

/* Header slots (int32 each). The count is 64-bit, split over two slots. */
enum {
    GT_SHARD_H_MAGIC = 0,
    GT_SHARD_H_VERSION = 1,
    GT_SHARD_H_WIDTH = 2,    /* bytes per token: 2 or 4 */
    GT_SHARD_H_COUNT_LO = 3, /* number of tokens, low 32 bits */
    GT_SHARD_H_COUNT_HI = 4, /* number of tokens, high 32 bits */
    GT_SHARD_H_VOCAB = 5,    /* vocabulary size the ids were drawn from */
};

typedef struct gt_shard {
    char path[512];
    void *map; /* whole file, read-only */
    size_t map_bytes;
    int width;                   /* 2 or 4 */
    int64_t count;               /* tokens */
    int vocab;                   /* header's vocabulary size */
    uint32_t max_id;             /* largest id present (checked when opened) */
    const unsigned char *tokens; /* [count * width] */
} gt_shard;

/* Maps and checks a shard (magic, version, width, length, every id < vocab). */
int gt_shard_open(gt_shard *s, const char *path, gt_error *err);
void gt_shard_close(gt_shard *s);

static inline uint32_t gt_shard_token(const gt_shard *s, int64_t i) {
    const unsigned char *p = s->tokens + (size_t)i * (size_t)s->width;
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    if (s->width == 4) v |= (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return v;
}

/* Writes tokens [n] as a shard (uint16 when vocab <= 65536, else uint32), atomically:
 * temp file, fsync, rename. */
int gt_shard_write(const char *path, const uint32_t *tokens, int64_t n, int vocab, gt_error *err);

#endif
