/* The manifest of a shard set (PREFIX.manifest), written last and atomically by prepare-data:
 * the tokenizer and a CRC32 of its vocabulary file, the vocabulary size, the end-of-document
 * id, and every shard with its split, token count and CRC32. Training reads only shards a
 * manifest lists and refuses any whose file, count, vocabulary or checksum differ, so a
 * half-finished or mixed re-run of prepare-data cannot train silently. */
#ifndef GT_DATA_MANIFEST_H
#define GT_DATA_MANIFEST_H

#include <stdint.h>

#include "core/error.h"

#define GT_MANIFEST_MAGIC "graphtrain-manifest"
#define GT_MANIFEST_VERSION 1
#define GT_MANIFEST_SUFFIX ".manifest"
#define GT_MANIFEST_NAME_MAX 256
#define GT_MANIFEST_MAX_SHARDS 1000000

typedef struct gt_manifest_shard {
    char name[GT_MANIFEST_NAME_MAX]; /* file name inside the manifest's folder */
    int is_val;                      /* held out for evaluation */
    int64_t tokens;
    uint32_t crc; /* CRC32 of the whole file, header included */
} gt_manifest_shard;

typedef struct gt_manifest {
    char tokenizer[16];                    /* "bpe", "gpt2", or "none": ids from elsewhere */
    char vocab_file[GT_MANIFEST_NAME_MAX]; /* inside the folder; "" when tokenizer is none */
    uint32_t vocab_crc;
    int vocab_size;
    int eod_id; /* -1: no end-of-document token */
    int n_shards, cap;
    gt_manifest_shard *shards;
} gt_manifest;

/* Appends a shard entry. */
int gt_manifest_add(gt_manifest *m, const char *name, int is_val, int64_t tokens, uint32_t crc,
                    gt_error *err);
int gt_manifest_write(const gt_manifest *m, const char *path, gt_error *err);
/* Reads and checks the syntax; the files it names are checked by the data source. */
int gt_manifest_read(gt_manifest *m, const char *path, gt_error *err);
void gt_manifest_free(gt_manifest *m);

/* CRC32 of a whole file. */
int gt_file_crc32(const char *path, uint32_t *crc, gt_error *err);

#endif
