/* Mock and shard data sources with seeded shuffling and resumable positions; see data.h. */
#include "data/data.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/blend.h"
#include "data/shard.h"

#define GT_MOCK_VALID_SEED_XOR 0x5eed5eed5eed5eedull
#define GT_SHUFFLE_SEED_XOR 0x9e3779b97f4a7c15ull
#define GT_VALID_SHARE_PERCENT 5

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

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* Lists the shard files of data_path for one split (sorted), into names[] (malloc'ed). */
static int list_shards(const char *data_path, gt_data_split split, char ***out, int *n_out,
                       gt_error *err) {
    char dir[GT_PATH_MAX], base[GT_PATH_MAX];
    struct stat st;
    int is_dir = stat(data_path, &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
        snprintf(dir, sizeof dir, "%s", data_path);
        base[0] = '\0';
    } else {
        const char *slash = strrchr(data_path, '/');
        if (slash) {
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - data_path), data_path);
            if (!dir[0]) snprintf(dir, sizeof dir, "/");
            snprintf(base, sizeof base, "%s", slash + 1);
        } else {
            snprintf(dir, sizeof dir, ".");
            snprintf(base, sizeof base, "%s", data_path);
        }
    }
    DIR *dp = opendir(dir);
    if (!dp)
        return gt_error_set(err, GT_ERR_IO,
                            "dataset.data_path=%s: cannot read directory %s: %s; create the "
                            "shards with `graphtrain prepare-data --output %s ...`",
                            data_path, dir, strerror(errno), data_path);
    char **all = NULL, **valid = NULL;
    int n_all = 0, n_valid = 0, cap = 0;
    struct dirent *e;
    int rc = GT_OK;
    while ((e = readdir(dp))) {
        size_t bl = strlen(base);
        /* PREFIX_train_000000.bin matches prefix PREFIX, PREFIXother_... does not */
        if (!ends_with(e->d_name, ".bin") || strncmp(e->d_name, base, bl) ||
            (bl && isalpha((unsigned char)e->d_name[bl])))
            continue;
        if (n_all == cap) {
            cap = cap ? cap * 2 : 16;
            char **a = realloc(all, (size_t)cap * sizeof *a);
            if (!a) {
                rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory listing shards");
                break;
            }
            all = a;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        all[n_all] = malloc(len);
        if (!all[n_all]) {
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory listing shards");
            break;
        }
        snprintf(all[n_all], len, "%s/%s", dir, e->d_name);
        n_all++;
    }
    closedir(dp);
    if (!rc && n_all == 0)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "dataset.data_path=%s: no shard files (%s/%s*.bin) found; create "
                          "them with `graphtrain prepare-data --input FILES --output %s`",
                          data_path, dir, base, data_path);
    if (rc) goto fail;
    qsort(all, (size_t)n_all, sizeof *all, cmp_str);
    /* Explicit validation shards ("_val" in the name) win; otherwise the last 5%. */
    valid = calloc((size_t)n_all, sizeof *valid);
    if (!valid) {
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory listing shards");
        goto fail;
    }
    for (int i = 0; i < n_all; i++)
        if (strstr(strrchr(all[i], '/'), "_val")) valid[n_valid++] = all[i];
    int keep_valid = n_valid > 0;
    int n_hold = n_valid;
    if (!keep_valid) {
        if (n_all < 2) {
            if (split == GT_SPLIT_VALID) {
                rc = gt_error_set(err, GT_ERR_INVALID,
                                  "dataset.data_path=%s: only one shard and no *_val*.bin "
                                  "file, so there is no held-out split for evaluation; "
                                  "re-run prepare-data (it writes a validation shard) or set "
                                  "train.eval_interval=0",
                                  data_path);
                goto fail;
            }
            n_hold = 0;
        } else {
            n_hold = (n_all * GT_VALID_SHARE_PERCENT + 99) / 100;
            if (n_hold < 1) n_hold = 1;
        }
    }
    char **sel = calloc((size_t)n_all, sizeof *sel);
    int n_sel = 0;
    if (!sel) {
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory listing shards");
        goto fail;
    }
    for (int i = 0; i < n_all; i++) {
        int held = keep_valid ? strstr(strrchr(all[i], '/'), "_val") != NULL : i >= n_all - n_hold;
        if (held == (split == GT_SPLIT_VALID)) {
            sel[n_sel++] = all[i];
            all[i] = NULL;
        }
    }
    for (int i = 0; i < n_all; i++)
        free(all[i]);
    free(all);
    free(valid);
    if (n_sel == 0) {
        free(sel);
        return gt_error_set(err, GT_ERR_INVALID,
                            "dataset.data_path=%s: every shard is a validation shard; no "
                            "training shards left",
                            data_path);
    }
    *out = sel;
    *n_out = n_sel;
    return GT_OK;
fail:
    for (int i = 0; i < n_all; i++)
        free(all[i]);
    free(all);
    free(valid);
    return rc;
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
    char **names = NULL;
    int n = 0;
    int rc = list_shards(cfg->dataset.data_path, split, &names, &n, err);
    if (rc) return rc;
    d->shards = calloc((size_t)n, sizeof *d->shards);
    d->first = calloc((size_t)n + 1, sizeof *d->first);
    if (!d->shards || !d->first) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    int64_t tokens = 0;
    for (int i = 0; !rc && i < n; i++) {
        rc = gt_shard_open(&d->shards[i], names[i], err);
        if (rc) break;
        d->n_shards++;
        if (d->shards[i].max_id >= (uint32_t)d->vocab && d->shards[i].count > 0) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "shard %s holds token id %u but model.vocab_size is %d; set "
                              "model.vocab_size=%d (the shard's vocabulary)",
                              names[i], d->shards[i].max_id, d->vocab, d->shards[i].vocab);
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
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
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
