/* Shared fixture of the tests that train on shards: a complete shard set (shards plus the
 * manifest training requires) from token arrays, written the way prepare-data writes one but
 * without a tokenizer (ids made by the test, manifest tokenizer "none"). */
#ifndef GT_TESTS_SHARD_FIXTURE_H
#define GT_TESTS_SHARD_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>

#include "data/shard_set.h"
#include "testlib.h"

/* PREFIX_train_000000.bin (+ PREFIX_val_000000.bin when val) and PREFIX.manifest; replaces
 * a set already there. */
static inline void gt_test_write_set(const char *prefix, int vocab, const uint32_t *train,
                                     int64_t n_train, const uint32_t *val, int64_t n_val) {
    gt_shard_set w;
    gt_error err = {0};
    int rc = gt_shard_set_begin(&w, prefix, vocab, NULL, 1, &err);
    if (!rc) rc = gt_shard_set_add(&w, 0, train, n_train, NULL, 0, &err);
    if (!rc && val) rc = gt_shard_set_add(&w, 1, val, n_val, NULL, 0, &err);
    if (!rc) rc = gt_shard_set_commit(&w, NULL, &err);
    gt_shard_set_end(&w);
    if (rc) fail_msg("writing the shard set %s: %s", prefix, err.msg);
}

/* A set of n training tokens repeating 0..period-1 (every next token predictable, so a model
 * that learns drives its loss down), plus n_val validation tokens of the same sequence from
 * its fourth token when n_val > 0. */
static inline void gt_test_write_pattern_set(const char *prefix, int vocab, int n, int period,
                                             int n_val) {
    uint32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!tok) fail_msg("out of memory for a pattern of %d tokens", n);
    for (int i = 0; i < n; i++)
        tok[i] = (uint32_t)(i % period);
    gt_test_write_set(prefix, vocab, tok, n, n_val > 0 ? tok + 3 : NULL, n_val);
    free(tok);
}

#endif
