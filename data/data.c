/* Mock and shard data sources with seeded shuffling and resumable positions; see data.h. */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32.h"
#include "data/blend.h"
#include "data/shard.h"
#include "data/shard_list.h"

#define GT_MOCK_VALID_SEED_XOR 0x5eed5eed5eed5eedull
#define GT_SHUFFLE_SEED_XOR 0x9e3779b97f4a7c15ull

struct gt_data {
    gt_data_source source;
    int T;     /* seq_length */
    int vocab; /* model.vocab_size */
    uint64_t seed;
    int shuffle;
    gt_data_pos pos;
    /* shards */
    gt_shard *shards;
    int n_shards;
    int64_t *first; /* [n_shards + 1] first global sample index of each shard */
    int64_t n_samples;
    int64_t *perm; /* [n_samples] order of the current epoch (shuffle only) */
    uint64_t perm_epoch;
    /* Megatron indexed datasets: their own (GPTDataset) order replaces perm */
    gt_blend_data *mega;
    int32_t *mega_buf; /* [T + 1] */
    char desc[768];
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A listed shard must be the file its manifest describes: same count, same vocabulary,
 * same CRC32 (the mapping is read once anyway, for the id range check). */
static int check_listed(const gt_shard *sh, const gt_listed_shard *e, int vocab, gt_error *err) {
    const char *fix = "the set was partly re-written or a file replaced; re-run `graphtrain "
                      "prepare-data ... --force`";
    if (sh->count != e->tokens || sh->vocab != vocab)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s does not match manifest %s: %lld tokens of vocabulary "
                            "%d, the manifest says %lld of %d; %s",
                            e->path, e->manifest, (long long)sh->count, sh->vocab,
                            (long long)e->tokens, vocab, fix);
    uint32_t crc = gt_crc32(0, sh->map, sh->map_bytes);
    if (crc != e->crc)
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard %s does not match manifest %s (CRC32 %08x, the manifest says "
                            "%08x); %s",
                            e->path, e->manifest, crc, e->crc, fix);
    return GT_OK;
}

/* Megatron's sample counts per split: train_iters * global batch for training, and for
 * validation (train_iters / eval_interval + 1) * eval_iters * global batch. */
static int open_megatron(gt_data *d, const gt_config *cfg, gt_data_split split, gt_error *err) {
    if (!cfg->dataset.shuffle)
        return gt_error_set(err, GT_ERR_INVALID,
                            "dataset.shuffle=false with Megatron indexed data: Megatron's "
                            "GPTDataset always draws samples in its seeded shuffled order; set "
                            "dataset.shuffle=true");
    if (cfg->rng.seed > UINT32_MAX)
        return gt_error_set(err, GT_ERR_INVALID,
                            "rng.seed=%llu: Megatron's dataset order uses numpy's RandomState, "
                            "whose seed is at most 4294967295; choose a smaller rng.seed",
                            (unsigned long long)cfg->rng.seed);
    const gt_train_config *t = &cfg->train;
    int64_t gbs = t->global_batch_size;
    int64_t evals = t->eval_interval > 0 ? t->train_iters / t->eval_interval + 1 : 1;
    gt_blend_params p = {
        .data_path = cfg->dataset.data_path,
        .split = cfg->dataset.split,
        .which = split == GT_SPLIT_VALID ? GT_MSPLIT_VALID : GT_MSPLIT_TRAIN,
        .num_samples =
            split == GT_SPLIT_VALID ? evals * t->eval_iters * gbs : (int64_t)t->train_iters * gbs,
        .seed = (uint32_t)cfg->rng.seed,
        .seq_length = d->T,
    };
    int rc = gt_blend_data_open(&d->mega, &p, err);
    if (rc) return rc;
    d->mega_buf = malloc(((size_t)d->T + 1) * sizeof *d->mega_buf);
    if (!d->mega_buf) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    d->n_samples = gt_blend_data_len(d->mega);
    d->shuffle = 0; /* the order is the GPTDataset's */
    snprintf(d->desc, sizeof d->desc, "%s", gt_blend_data_describe(d->mega));
    return GT_OK;
}

static int open_shards(gt_data *d, const gt_config *cfg, gt_data_split split, gt_error *err) {
    if (gt_blend_is_megatron(cfg->dataset.data_path)) return open_megatron(d, cfg, split, err);
    gt_shard_list list;
    int rc = gt_shard_list_build(&list, cfg->dataset.data_path, split, err);
    if (rc) return rc;
    int n = list.n;
    d->shards = calloc((size_t)n, sizeof *d->shards);
    d->first = calloc((size_t)n + 1, sizeof *d->first);
    if (!d->shards || !d->first) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    int64_t tokens = 0;
    for (int i = 0; !rc && i < n; i++) {
        const char *name = list.s[i].path;
        rc = gt_shard_open(&d->shards[i], name, err);
        if (rc) break;
        d->n_shards++;
        rc = check_listed(&d->shards[i], &list.s[i], list.vocab_size, err);
        if (rc) break;
        if (d->shards[i].max_id >= (uint32_t)d->vocab && d->shards[i].count > 0) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "shard %s holds token id %u but model.vocab_size is %d; set "
                              "model.vocab_size=%d (the shard's vocabulary)",
                              name, d->shards[i].max_id, d->vocab, d->shards[i].vocab);
            break;
        }
        int64_t samples = d->shards[i].count > d->T ? (d->shards[i].count - 1) / d->T : 0;
        d->first[i + 1] = d->first[i] + samples;
        tokens += d->shards[i].count;
    }
    if (!rc) {
        d->n_samples = d->first[d->n_shards];
        if (d->n_samples == 0)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.data_path=%s (%s split): no shard holds seq_length+1 = "
                              "%d tokens; lower model.seq_length or prepare more text",
                              cfg->dataset.data_path,
                              split == GT_SPLIT_VALID ? "validation" : "training", d->T + 1);
    }
    if (!rc)
        snprintf(d->desc, sizeof d->desc,
                 "shards %s (%s): %d file%s, %lld tokens, %lld sequences of %d, %s",
                 cfg->dataset.data_path, split == GT_SPLIT_VALID ? "validation" : "training", n,
                 n == 1 ? "" : "s", (long long)tokens, (long long)d->n_samples, d->T,
                 d->shuffle ? "shuffled" : "sequential");
    gt_shard_list_free(&list);
    return rc;
}

int gt_data_create(gt_data **out, const gt_config *cfg, gt_data_split split, gt_error *err) {
    *out = NULL;
    if (cfg->model.seq_length <= 0 || cfg->model.vocab_size <= 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "data: model.seq_length (%d) and model.vocab_size (%d) must be > 0",
                            cfg->model.seq_length, cfg->model.vocab_size);
    gt_data *d = calloc(1, sizeof *d);
    if (!d) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    d->source = cfg->dataset.source;
    d->T = cfg->model.seq_length;
    d->vocab = cfg->model.vocab_size;
    d->seed = cfg->rng.seed ^ (split == GT_SPLIT_VALID ? GT_MOCK_VALID_SEED_XOR : 0);
    d->shuffle = cfg->dataset.shuffle && split == GT_SPLIT_TRAIN;
    d->perm_epoch = UINT64_MAX;
    int rc = GT_OK;
    if (d->source == GT_DATA_MOCK) {
        snprintf(d->desc, sizeof d->desc, "mock (%s): random tokens, vocab %d, seed %llu",
                 split == GT_SPLIT_VALID ? "validation" : "training", d->vocab,
                 (unsigned long long)d->seed);
    } else if (d->source == GT_DATA_SHARDS) {
        if (!cfg->dataset.data_path[0])
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.source=shards needs dataset.data_path (a shard prefix "
                              "or directory written by `graphtrain prepare-data`)");
        else
            rc = open_shards(d, cfg, split, err);
    } else {
        rc = gt_error_set(err, GT_ERR_INVALID, "dataset.source: unknown source %d", (int)d->source);
    }
    if (rc) {
        gt_data_destroy(d);
        return rc;
    }
    *out = d;
    return GT_OK;
}

void gt_data_destroy(gt_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n_shards; i++)
        gt_shard_close(&d->shards[i]);
    free(d->shards);
    free(d->first);
    free(d->perm);
    gt_blend_data_close(d->mega);
    free(d->mega_buf);
    free(d);
}

/* The sample order of epoch e: a Fisher-Yates permutation keyed by (seed, epoch). */
static int build_perm(gt_data *d, uint64_t epoch, gt_error *err) {
    if (d->perm_epoch == epoch) return GT_OK;
    if (!d->perm) {
        d->perm = malloc((size_t)d->n_samples * sizeof *d->perm);
        if (!d->perm) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory shuffling");
    }
    for (int64_t i = 0; i < d->n_samples; i++)
        d->perm[i] = i;
    uint64_t x = d->seed ^ GT_SHUFFLE_SEED_XOR ^ (epoch * 0x100000001b3ull);
    for (int64_t i = d->n_samples - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(&x) % (uint64_t)(i + 1));
        int64_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
    return GT_OK;
}

static int read_sample(const gt_data *d, int64_t sample, int32_t *tok, int32_t *tgt,
                       gt_error *err) {
    if (d->mega) {
        int rc = gt_blend_data_sample(d->mega, sample, d->vocab, d->mega_buf, err);
        if (rc) return rc;
        memcpy(tok, d->mega_buf, (size_t)d->T * sizeof *tok);
        memcpy(tgt, d->mega_buf + 1, (size_t)d->T * sizeof *tgt);
        return GT_OK;
    }
    int lo = 0, hi = d->n_shards - 1;
    while (lo < hi) { /* the shard whose [first, next first) holds sample */
        int mid = (lo + hi + 1) / 2;
        if (d->first[mid] <= sample)
            lo = mid;
        else
            hi = mid - 1;
    }
    const gt_shard *s = &d->shards[lo];
    int64_t off = (sample - d->first[lo]) * d->T;
    for (int t = 0; t < d->T; t++) {
        tok[t] = (int32_t)gt_shard_token(s, off + t);
        tgt[t] = (int32_t)gt_shard_token(s, off + t + 1);
    }
    return GT_OK;
}

static void mock_sample(const gt_data *d, uint64_t sample, int32_t *tok, int32_t *tgt) {
    uint64_t x = d->seed * 0x2545f4914f6cdd1dull + sample;
    uint64_t prev = splitmix64(&x) % (uint64_t)d->vocab;
    for (int t = 0; t < d->T; t++) {
        uint64_t next = splitmix64(&x) % (uint64_t)d->vocab;
        tok[t] = (int32_t)prev;
        tgt[t] = (int32_t)next;
        prev = next;
    }
}

int gt_data_next(gt_data *d, int32_t *tokens, int32_t *targets, int B, gt_error *err) {
    for (int b = 0; b < B; b++) {
        int32_t *tok = tokens + (size_t)b * d->T, *tgt = targets + (size_t)b * d->T;
        if (d->source == GT_DATA_MOCK) {
            mock_sample(d, d->pos.cursor++, tok, tgt);
            continue;
        }
        if (d->pos.cursor >= (uint64_t)d->n_samples) { /* epoch wrap */
            d->pos.epoch++;
            d->pos.cursor = 0;
        }
        int64_t sample = (int64_t)d->pos.cursor;
        if (d->shuffle) {
            int rc = build_perm(d, d->pos.epoch, err);
            if (rc) return rc;
            /* build_perm filled perm[0..n_samples) and cursor < n_samples (checked above) */
            // NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign)
            sample = d->perm[sample];
        }
        int rc = read_sample(d, sample, tok, tgt, err);
        if (rc) return rc;
        d->pos.cursor++;
    }
    return GT_OK;
}

gt_data_pos gt_data_get_pos(const gt_data *d) {
    return d->pos;
}

int gt_data_set_pos(gt_data *d, gt_data_pos pos, gt_error *err) {
    if (d->source == GT_DATA_SHARDS && pos.cursor > (uint64_t)d->n_samples)
        return gt_error_set(err, GT_ERR_INVALID,
                            "data position %llu is past the %lld sequences of the data; the "
                            "checkpoint was written for different data or model.seq_length",
                            (unsigned long long)pos.cursor, (long long)d->n_samples);
    d->pos = pos;
    return GT_OK;
}

int64_t gt_data_num_samples(const gt_data *d) {
    return d->source == GT_DATA_MOCK ? 0 : d->n_samples;
}

const char *gt_data_describe(const gt_data *d) {
    return d->desc;
}
