/* Manifest files: a line-based text format, see manifest.h.
 *   graphtrain-manifest 1
 *   tokenizer bpe
 *   vocab corpus.vocab 1a2b3c4d
 *   vocab_size 512
 *   eod 511
 *   shards 2
 *   shard train corpus_train_000000.bin 123456 89abcdef
 *   shard val corpus_val_000000.bin 6789 01234567
 *   end */
#include "data/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/crc32.h"

int gt_manifest_add(gt_manifest *m, const char *name, int is_val, int64_t tokens, uint32_t crc,
                    gt_error *err) {
    if (strlen(name) >= GT_MANIFEST_NAME_MAX || strpbrk(name, " \t\n/"))
        return gt_error_set(err, GT_ERR_INVALID,
                            "shard name '%.100s' is too long or holds a space or '/'; choose a "
                            "shorter --output prefix without spaces",
                            name);
    if (m->n_shards >= GT_MANIFEST_MAX_SHARDS)
        return gt_error_set(err, GT_ERR_INVALID, "more than %d shards in one set",
                            GT_MANIFEST_MAX_SHARDS);
    if (m->n_shards == m->cap) {
        int cap = m->cap ? m->cap * 2 : 16;
        gt_manifest_shard *s = realloc(m->shards, (size_t)cap * sizeof *s);
        if (!s) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (manifest)");
        m->shards = s;
        m->cap = cap;
    }
    gt_manifest_shard *s = &m->shards[m->n_shards++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->is_val = is_val;
    s->tokens = tokens;
    s->crc = crc;
    return GT_OK;
}

void gt_manifest_free(gt_manifest *m) {
    if (!m) return;
    free(m->shards);
    m->shards = NULL;
    m->n_shards = m->cap = 0;
}

int gt_manifest_write(const gt_manifest *m, const char *path, gt_error *err) {
    gt_atomic_file f;
    int rc = gt_atomic_open(&f, path, err);
    if (rc) return rc;
    fprintf(f.f, "%s %d\ntokenizer %s\nvocab %s %08x\nvocab_size %d\neod %d\nshards %d\n",
            GT_MANIFEST_MAGIC, GT_MANIFEST_VERSION, m->tokenizer,
            m->vocab_file[0] ? m->vocab_file : "-", m->vocab_crc, m->vocab_size, m->eod_id,
            m->n_shards);
    for (int i = 0; i < m->n_shards; i++)
        fprintf(f.f, "shard %s %s %lld %08x\n", m->shards[i].is_val ? "val" : "train",
                m->shards[i].name, (long long)m->shards[i].tokens, m->shards[i].crc);
    fprintf(f.f, "end\n");
    if (ferror(f.f)) {
        gt_atomic_abort(&f);
        return gt_error_set(err, GT_ERR_IO, "writing %s failed (disk full?)", path);
    }
    rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}

static int bad(gt_error *err, const char *path, const char *what) {
    return gt_error_set(err, GT_ERR_INVALID,
                        "manifest %s is corrupt (%s); re-create the set with `graphtrain "
                        "prepare-data ... --force`",
                        path, what);
}

static int read_body(gt_manifest *m, FILE *f, const char *path, gt_error *err) {
    char word[64], vocab[GT_MANIFEST_NAME_MAX];
    int version = 0, n = 0;
    if (fscanf(f, "%63s %d", word, &version) != 2 || strcmp(word, GT_MANIFEST_MAGIC))
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a graphtrain manifest (it should start with '%s %d'); "
                            "write it with `graphtrain prepare-data`",
                            path, GT_MANIFEST_MAGIC, GT_MANIFEST_VERSION);
    if (version != GT_MANIFEST_VERSION)
        return gt_error_set(err, GT_ERR_INVALID,
                            "manifest %s has format version %d; this graphtrain reads version "
                            "%d; re-create it with `graphtrain prepare-data ... --force`",
                            path, version, GT_MANIFEST_VERSION);
    if (fscanf(f, " tokenizer %15s vocab %255s %x vocab_size %d eod %d shards %d", m->tokenizer,
               vocab, &m->vocab_crc, &m->vocab_size, &m->eod_id, &n) != 6)
        return bad(err, path, "its header is incomplete");
    if (strcmp(m->tokenizer, "bpe") && strcmp(m->tokenizer, "gpt2") && strcmp(m->tokenizer, "none"))
        return bad(err, path, "unknown tokenizer");
    if (m->vocab_size < 1 || m->eod_id < -1 || m->eod_id >= m->vocab_size || n < 1 ||
        n > GT_MANIFEST_MAX_SHARDS)
        return bad(err, path, "vocabulary size, end-of-document id or shard count out of range");
    snprintf(m->vocab_file, sizeof m->vocab_file, "%s", strcmp(vocab, "-") ? vocab : "");
    if (!strcmp(m->tokenizer, "none") != !m->vocab_file[0])
        return bad(err, path, "a vocabulary file goes with a tokenizer, and only with one");
    for (int i = 0; i < n; i++) {
        char split[16], name[GT_MANIFEST_NAME_MAX];
        long long tokens;
        unsigned crc;
        if (fscanf(f, " shard %15s %255s %lld %x", split, name, &tokens, &crc) != 4 ||
            (strcmp(split, "train") && strcmp(split, "val")) || tokens < 0)
            return bad(err, path, "a shard line is missing or malformed");
        int rc = gt_manifest_add(m, name, !strcmp(split, "val"), tokens, crc, err);
        if (rc) return rc;
    }
    if (fscanf(f, " %63s", word) != 1 || strcmp(word, "end"))
        return bad(err, path, "it does not end with 'end': truncated");
    return GT_OK;
}

int gt_manifest_read(gt_manifest *m, const char *path, gt_error *err) {
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "r");
    if (!f) return gt_error_set(err, GT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    int rc = read_body(m, f, path, err);
    fclose(f);
    if (rc) gt_manifest_free(m);
    return rc;
}

int gt_file_crc32(const char *path, uint32_t *crc, gt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return gt_error_set(err, GT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    uint32_t c = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        c = gt_crc32(c, buf, got);
    int e = ferror(f);
    fclose(f);
    if (e) return gt_error_set(err, GT_ERR_IO, "reading %s failed", path);
    *crc = c;
    return GT_OK;
}
