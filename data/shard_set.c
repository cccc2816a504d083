/* Shard set writing: shards, vocabulary, manifest last, stale files removed; see shard_set.h. */
#include "data/shard_set.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shard.h"
#include "data/tokenizer_internal.h"

/* prefix -> folder and base name */
static void split_prefix(const char *prefix, char *dir, size_t dn, char *base, size_t bn) {
    const char *slash = strrchr(prefix, '/');
    if (!slash) {
        snprintf(dir, dn, ".");
        snprintf(base, bn, "%s", prefix);
    } else {
        snprintf(dir, dn, "%.*s", (int)(slash - prefix), prefix);
        if (!dir[0]) snprintf(dir, dn, "/");
        snprintf(base, bn, "%s", slash + 1);
    }
}

static int digits_then(const char *p, const char *suffix) {
    const char *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    return q > p && !strcmp(q, suffix);
}

int gt_shard_set_is_shard_name(const char *base, const char *name) {
    size_t bl = strlen(base);
    if (strncmp(name, base, bl)) return 0;
    const char *r = name + bl;
    if (!strncmp(r, "_train_", 7)) return digits_then(r + 7, ".bin");
    if (!strncmp(r, "_val_", 5)) return digits_then(r + 5, ".bin");
    return 0;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* First file of the set at prefix (manifest, vocabulary, a shard) into found; 0 if none. */
static int find_existing(const char *prefix, char *found, size_t n) {
    char dir[GT_PATH_MAX], base[GT_PATH_MAX];
    split_prefix(prefix, dir, sizeof dir, base, sizeof base);
    const char *suffixes[] = {GT_MANIFEST_SUFFIX, ".vocab"};
    for (int i = 0; i < 2; i++) {
        snprintf(found, n, "%s%s", prefix, suffixes[i]);
        if (file_exists(found)) return 1;
    }
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    struct dirent *e;
    int hit = 0;
    while (!hit && (e = readdir(dp)))
        if (gt_shard_set_is_shard_name(base, e->d_name)) {
            snprintf(found, n, "%s/%s", dir, e->d_name);
            hit = 1;
        }
    closedir(dp);
    return hit;
}

int gt_shard_set_begin(gt_shard_set *w, const char *prefix, int vocab_size, const gt_tokenizer *tk,
                       int force, gt_error *err) {
    memset(w, 0, sizeof *w);
    if (strlen(prefix) + 32 >= sizeof w->prefix)
        return gt_error_set(err, GT_ERR_INVALID, "--output %.100s...: the prefix is too long",
                            prefix);
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    w->tk = tk;
    char found[GT_PATH_MAX + 300];
    if (!force && find_existing(prefix, found, sizeof found))
        return gt_error_set(err, GT_ERR_INVALID,
                            "--output %s already holds a shard set (%s exists); add --force to "
                            "replace it (its old shards are removed once the new set is "
                            "complete), or choose another --output",
                            prefix, found);
    gt_manifest *m = &w->m;
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s",
             !tk                       ? "none"
             : tk->kind == GT_TOK_GPT2 ? "gpt2"
                                       : "bpe");
    m->vocab_size = vocab_size;
    m->eod_id = tk ? gt_tokenizer_eod(tk) : -1;
    return GT_OK;
}

int gt_shard_set_add(gt_shard_set *w, int is_val, const uint32_t *tokens, int64_t n, char *path,
                     size_t path_n, gt_error *err) {
    char p[GT_PATH_MAX + 32];
    int idx = is_val ? w->n_val : w->n_train;
    snprintf(p, sizeof p, "%s_%s_%06d.bin", w->prefix, is_val ? "val" : "train", idx);
    int rc = gt_shard_write(p, tokens, n, w->m.vocab_size, err);
    uint32_t crc = 0;
    if (!rc) rc = gt_file_crc32(p, &crc, err);
    const char *name = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
    if (!rc) rc = gt_manifest_add(&w->m, name, is_val, n, crc, err);
    if (rc) return rc;
    if (is_val)
        w->n_val++;
    else
        w->n_train++;
    if (path) snprintf(path, path_n, "%s", p);
    return GT_OK;
}

static int in_set(const gt_manifest *m, const char *name) {
    for (int i = 0; i < m->n_shards; i++)
        if (!strcmp(m->shards[i].name, name)) return 1;
    return 0;
}

static int remove_stale(const gt_shard_set *w, const gt_manifest *old, int *removed,
                        gt_error *err) {
    char dir[GT_PATH_MAX], base[GT_PATH_MAX], p[2 * GT_PATH_MAX];
    split_prefix(w->prefix, dir, sizeof dir, base, sizeof base);
    for (int i = 0; old && i < old->n_shards; i++) {
        if (in_set(&w->m, old->shards[i].name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, old->shards[i].name);
        if (unlink(p) == 0)
            (*removed)++;
        else if (errno != ENOENT)
            return gt_error_set(err, GT_ERR_IO, "cannot remove the stale shard %s: %s", p,
                                strerror(errno));
    }
    DIR *dp = opendir(dir);
    if (!dp) return gt_error_set(err, GT_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = GT_OK;
    while (!rc && (e = readdir(dp))) {
        if (!gt_shard_set_is_shard_name(base, e->d_name) || in_set(&w->m, e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0)
            (*removed)++;
        else
            rc = gt_error_set(err, GT_ERR_IO, "cannot remove the stale shard %s: %s", p,
                              strerror(errno));
    }
    closedir(dp);
    return rc;
}

int gt_shard_set_commit(gt_shard_set *w, int *removed_out, gt_error *err) {
    char p[GT_PATH_MAX + 32];
    int rc = GT_OK;
    gt_manifest *m = &w->m;
    if (w->n_train == 0)
        return gt_error_set(err, GT_ERR_INVALID, "shard set %s has no training shard", w->prefix);
    if (w->tk) {
        snprintf(p, sizeof p, "%s.vocab", w->prefix);
        rc = gt_tokenizer_save(w->tk, p, err);
        if (!rc) rc = gt_file_crc32(p, &m->vocab_crc, err);
        const char *name = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        snprintf(m->vocab_file, sizeof m->vocab_file, "%s", name);
        if (rc) return rc;
    }
    /* the old manifest says which shards were the old set's; read before it is replaced */
    snprintf(p, sizeof p, "%s%s", w->prefix, GT_MANIFEST_SUFFIX);
    gt_manifest old;
    gt_error ignored = {0};
    int have_old = gt_manifest_read(&old, p, &ignored) == GT_OK;
    rc = gt_manifest_write(m, p, err);
    int removed = 0;
    if (!rc) rc = remove_stale(w, have_old ? &old : NULL, &removed, err);
    if (have_old) gt_manifest_free(&old);
    if (removed_out) *removed_out = removed;
    return rc;
}

void gt_shard_set_end(gt_shard_set *w) {
    if (w) gt_manifest_free(&w->m);
}
