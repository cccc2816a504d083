/* Writing a shard set: PREFIX_train_NNNNNN.bin and PREFIX_val_NNNNNN.bin shards, the
 * vocabulary PREFIX.vocab, and last the manifest PREFIX.manifest (manifest.h), so a set
 * without its manifest is an unfinished one. An existing set (any of those files) is replaced
 * only when asked (force); its stale files (listed by the old manifest or named like a
 * shard of the prefix, and not part of the new set) are removed after the new manifest. */
#ifndef GT_DATA_SHARD_SET_H
#define GT_DATA_SHARD_SET_H

#include <stdint.h>

#include "config/config.h"
#include "core/error.h"
#include "data/manifest.h"
#include "data/tokenizer.h"

typedef struct gt_shard_set {
    char prefix[GT_PATH_MAX];
    const gt_tokenizer *tk; /* NULL: ids that came from elsewhere */
    int n_train, n_val;
    gt_manifest m;
} gt_shard_set;

/* Refuses an existing set unless force, naming a file of it and the fix (--force). */
int gt_shard_set_begin(gt_shard_set *w, const char *prefix, int vocab_size, const gt_tokenizer *tk,
                       int force, gt_error *err);
/* Writes the next training or validation shard; path (may be NULL) gets its name. */
int gt_shard_set_add(gt_shard_set *w, int is_val, const uint32_t *tokens, int64_t n, char *path,
                     size_t path_n, gt_error *err);
/* Writes the vocabulary, then the manifest, then removes stale files (*removed counts them;
 * may be NULL). */
int gt_shard_set_commit(gt_shard_set *w, int *removed, gt_error *err);
void gt_shard_set_end(gt_shard_set *w);

/* Whether name (no folder) is a shard of the prefix base: BASE_train_DIGITS.bin or
 * BASE_val_DIGITS.bin. */
int gt_shard_set_is_shard_name(const char *base, const char *name);

#endif
