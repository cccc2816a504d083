/* Shard listing from manifests, with the vocabulary checked; see shard_list.h. */
#include "data/shard_list.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GT_VALID_SHARE_PERCENT 5 /* held out when a manifest lists no validation shard */

typedef struct set {
    char path[GT_PATH_MAX + GT_MANIFEST_NAME_MAX]; /* the manifest */
    gt_manifest m;
} set;

typedef struct sets {
    char dir[GT_PATH_MAX];
    set *v;
    int n;
} sets;

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_sets(sets *s) {
    for (int i = 0; i < s->n; i++)
        gt_manifest_free(&s->v[i].m);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int add_set(sets *s, const char *path, gt_error *err) {
    set *v = realloc(s->v, (size_t)(s->n + 1) * sizeof *v);
    if (!v) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (manifests)");
    s->v = v;
    set *e = &v[s->n];
    snprintf(e->path, sizeof e->path, "%s", path);
    int rc = gt_manifest_read(&e->m, path, err);
    if (!rc) s->n++;
    return rc;
}

/* The names of dir's entries ending in suffix, sorted (malloc'ed). */
static int list_names(const char *dir, const char *suffix, char ***out, int *n, gt_error *err) {
    *out = NULL;
    *n = 0;
    DIR *dp = opendir(dir);
    if (!dp) return gt_error_set(err, GT_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = GT_OK, cap = 0;
    while (!rc && (e = readdir(dp))) {
        if (!ends_with(e->d_name, suffix)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **a = realloc(*out, (size_t)cap * sizeof *a);
            if (!a) {
                rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
                break;
            }
            *out = a;
        }
        (*out)[*n] = strdup(e->d_name);
        if (!(*out)[*n])
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        else
            (*n)++;
    }
    closedir(dp);
    if (rc) {
        for (int i = 0; i < *n; i++)
            free((*out)[i]);
        free(*out);
        *out = NULL;
        *n = 0;
    } else if (*n > 1) {
        qsort(*out, (size_t)*n, sizeof **out, cmp_str);
    }
    return rc;
}

static void free_names(char **v, int n) {
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int listed_by(const sets *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->v[i].m.n_shards; k++)
            if (!strcmp(s->v[i].m.shards[k].name, name)) return 1;
    return 0;
}

/* A folder: every manifest in it, one vocabulary, no shard outside them. */
static int read_folder(sets *s, const char *data_path, gt_error *err) {
    char **names;
    int n;
    int rc = list_names(data_path, GT_MANIFEST_SUFFIX, &names, &n, err);
    if (rc) return rc;
    if (n == 0)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "dataset.data_path=%s: the folder holds no manifest (*%s); training "
                          "reads only shard sets that prepare-data completed: create one with "
                          "`graphtrain prepare-data --input FILES --output %s/NAME`",
                          data_path, GT_MANIFEST_SUFFIX, data_path);
    char p[GT_PATH_MAX + GT_MANIFEST_NAME_MAX];
    for (int i = 0; !rc && i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", data_path, names[i]);
        rc = add_set(s, p, err);
    }
    free_names(names, n);
    for (int i = 1; !rc && i < s->n; i++) {
        const gt_manifest *a = &s->v[0].m, *b = &s->v[i].m;
        if (strcmp(a->tokenizer, b->tokenizer) || a->vocab_size != b->vocab_size ||
            a->vocab_crc != b->vocab_crc)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.data_path=%s holds shards of several vocabularies: %s "
                              "(%s, %d tokens, vocabulary CRC %08x) and %s (%s, %d tokens, "
                              "vocabulary CRC %08x); point dataset.data_path at one set's "
                              "prefix, or move the other set elsewhere",
                              data_path, s->v[0].path, a->tokenizer, a->vocab_size, a->vocab_crc,
                              s->v[i].path, b->tokenizer, b->vocab_size, b->vocab_crc);
    }
    if (rc) return rc;
    rc = list_names(data_path, ".bin", &names, &n, err);
    for (int i = 0; !rc && i < n; i++)
        if (!listed_by(s, names[i]))
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.data_path=%s: %s/%s is a shard no manifest there lists, "
                              "so its vocabulary is unknown (a leftover or another set's); "
                              "remove it, or point dataset.data_path at one set's prefix",
                              data_path, data_path, names[i]);
    free_names(names, n);
    return rc;
}

static int check_vocab(const set *e, const char *dir, gt_error *err) {
    if (!e->m.vocab_file[0]) return GT_OK;
    char p[GT_PATH_MAX + GT_MANIFEST_NAME_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, e->m.vocab_file);
    uint32_t crc;
    int rc = gt_file_crc32(p, &crc, err);
    if (rc)
        return gt_error_wrap(err,
                             "manifest %s names the vocabulary %s, which is missing: ", e->path, p);
    if (crc != e->m.vocab_crc)
        return gt_error_set(err, GT_ERR_INVALID,
                            "vocabulary %s does not match manifest %s (CRC32 %08x, the manifest "
                            "says %08x): the set was partly re-written; re-run `graphtrain "
                            "prepare-data ... --force`",
                            p, e->path, crc, e->m.vocab_crc);
    return GT_OK;
}

static int collect(gt_shard_list *l, const sets *s, gt_data_split split, const char *data_path,
                   gt_error *err) {
    int n_train = 0, n_val = 0;
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->v[i].m.n_shards; k++)
            if (s->v[i].m.shards[k].is_val)
                n_val++;
            else
                n_train++;
    /* explicit validation shards win; otherwise the last 5% of the training shards */
    int n_hold = 0;
    if (n_val == 0 && n_train >= 2) {
        n_hold = (n_train * GT_VALID_SHARE_PERCENT + 99) / 100;
        if (n_hold < 1) n_hold = 1;
    }
    if (split == GT_SPLIT_VALID && n_val == 0 && n_hold == 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "dataset.data_path=%s: only one shard and no validation shard, so "
                            "there is no held-out split for evaluation; re-run prepare-data (it "
                            "writes a validation shard) or set train.eval_interval=0",
                            data_path);
    l->s = calloc((size_t)n_train + (size_t)n_val + 1, sizeof *l->s); /* + 1: never 0 bytes */
    if (!l->s) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory listing shards");
    int train_seen = 0;
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->v[i].m.n_shards; k++) {
            const gt_manifest_shard *e = &s->v[i].m.shards[k];
            int held = n_val ? e->is_val : !e->is_val && train_seen++ >= n_train - n_hold;
            if (held != (split == GT_SPLIT_VALID)) continue;
            gt_listed_shard *o = &l->s[l->n++];
            snprintf(o->path, sizeof o->path, "%s/%s", s->dir, e->name);
            snprintf(o->manifest, sizeof o->manifest, "%s", s->v[i].path);
            o->tokens = e->tokens;
            o->crc = e->crc;
        }
    if (l->n == 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "dataset.data_path=%s: every shard is a validation shard; no "
                            "training shards left",
                            data_path);
    return GT_OK;
}

int gt_shard_list_build(gt_shard_list *l, const char *data_path, gt_data_split split,
                        gt_error *err) {
    memset(l, 0, sizeof *l);
    sets s;
    memset(&s, 0, sizeof s);
    struct stat st;
    int rc;
    if (stat(data_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(s.dir, sizeof s.dir, "%s", data_path);
        rc = read_folder(&s, data_path, err);
    } else {
        char p[GT_PATH_MAX + 16];
        snprintf(p, sizeof p, "%s%s", data_path,
                 ends_with(data_path, GT_MANIFEST_SUFFIX) ? "" : GT_MANIFEST_SUFFIX);
        const char *slash = strrchr(p, '/');
        snprintf(s.dir, sizeof s.dir, "%.*s", slash ? (int)(slash - p) : 1, slash ? p : ".");
        if (!s.dir[0]) snprintf(s.dir, sizeof s.dir, "/");
        if (stat(p, &st) != 0)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.data_path=%s: no manifest %s; training reads only shard "
                              "sets that prepare-data completed (it writes the manifest last): "
                              "create it with `graphtrain prepare-data --input FILES --output %s` "
                              "(add --force where an unfinished set is in the way)",
                              data_path, p, data_path);
        else
            rc = add_set(&s, p, err);
    }
    for (int i = 0; !rc && i < s.n; i++)
        rc = check_vocab(&s.v[i], s.dir, err);
    if (!rc) {
        l->vocab_size = s.v[0].m.vocab_size;
        rc = collect(l, &s, split, data_path, err);
    }
    free_sets(&s);
    if (rc) gt_shard_list_free(l);
    return rc;
}

void gt_shard_list_free(gt_shard_list *l) {
    if (!l) return;
    free(l->s);
    l->s = NULL;
    l->n = 0;
}
