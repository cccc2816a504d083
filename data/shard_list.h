/* Which shard files a data source reads: those the manifest(s) of dataset.data_path list for
 * one split, with the token count and CRC32 each must have. A prefix names PREFIX.manifest; a
 * folder means every manifest in it, which must share one vocabulary, and no shard there may
 * be missing from them. Internal to data/. */
#ifndef GT_DATA_SHARD_LIST_H
#define GT_DATA_SHARD_LIST_H

#include <stdint.h>

#include "config/config.h"
#include "core/error.h"
#include "data/data.h"
#include "data/manifest.h"

typedef struct gt_listed_shard {
    char path[GT_PATH_MAX + GT_MANIFEST_NAME_MAX];
    char manifest[GT_PATH_MAX + GT_MANIFEST_NAME_MAX]; /* the manifest that lists it */
    int64_t tokens;
    uint32_t crc;
} gt_listed_shard;

typedef struct gt_shard_list {
    gt_listed_shard *s;
    int n;
    int vocab_size; /* the manifests' */
} gt_shard_list;

int gt_shard_list_build(gt_shard_list *l, const char *data_path, gt_data_split split,
                        gt_error *err);
void gt_shard_list_free(gt_shard_list *l);

#endif
