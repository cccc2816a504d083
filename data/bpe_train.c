/* Learning a byte-level BPE from a corpus. Chunks (GPT-2's pre-split) are counted once per
 * distinct chunk; pair counts are kept incrementally: each pair remembers the chunks it
 * occurs in, and a merge rewrites only those, updating counts by the difference. A lazy max
 * heap gives the most frequent pair each round (an entry whose pair count has since fallen is
 * re-queued with the current count when it surfaces). */
#include "data/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct pair_rec {
    uint64_t key;
    int64_t count;
    int64_t heap_max; /* upper bound of this pair's entries in the heap (0 = none) */
    int32_t *words;   /* chunks that contained the pair when it was last counted (may be stale) */
    int n, cap;
} pair_rec;

typedef struct heap_ent {
    int64_t count;
    uint64_t key;
} heap_ent;

typedef struct bpe_state {
    /* distinct chunks */
    int32_t n_words, words_cap;
    int64_t *freq;    /* [n_words] occurrences in the corpus */
    size_t *src_off;  /* [n_words] first occurrence in the text */
    int32_t *src_len; /* [n_words] */
    size_t *sym_off;  /* [n_words] start in sym */
    int32_t *sym_len; /* [n_words] current number of symbols */
    int32_t *mark;    /* [n_words] last merge that rewrote the chunk */
    uint32_t *sym;    /* symbols of every chunk */
    /* chunk lookup by bytes: open addressing, value = word + 1 */
    int32_t *wh;
    size_t wh_cap;
    /* pairs: open addressing key -> index + 1 into recs */
    int32_t *ph;
    size_t ph_cap;
    pair_rec *recs;
    int32_t n_recs, recs_cap;
    heap_ent *heap;
    size_t heap_n, heap_cap;
} bpe_state;

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void state_free(bpe_state *s) {
    free(s->freq);
    free(s->src_off);
    free(s->src_len);
    free(s->sym_off);
    free(s->sym_len);
    free(s->mark);
    free(s->sym);
    free(s->wh);
    free(s->ph);
    for (int32_t i = 0; i < s->n_recs; i++)
        free(s->recs[i].words);
    free(s->recs);
    free(s->heap);
}

static int grow(void **p, size_t elem, int32_t *cap, int32_t need) {
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Counts distinct chunks of the text. */
static int collect_words(bpe_state *s, const unsigned char *t, size_t n, gt_error *err) {
    s->wh_cap = 1u << 16;
    s->wh = calloc(s->wh_cap, sizeof *s->wh);
    if (!s->wh) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
    gt_pretok *pre = NULL; /* GPT-2's split, the one the learned tokenizer encodes with */
    int rc = gt_pretok_create(&pre, GT_PRETOK_GPT2, err);
    if (rc) return rc;
    for (size_t i = 0; i < n;) {
        size_t len = gt_pretok_next(pre, t, n, i, GT_BPE_MAX_CHUNK);
        size_t mask = s->wh_cap - 1, h = fnv1a(t + i, len) & mask;
        int32_t w = -1;
        while (s->wh[h]) {
            int32_t c = s->wh[h] - 1;
            if ((size_t)s->src_len[c] == len && !memcmp(t + s->src_off[c], t + i, len)) {
                w = c;
                break;
            }
            h = (h + 1) & mask;
        }
        if (w >= 0) {
            s->freq[w]++;
        } else {
            int32_t c = s->words_cap;
            if (grow((void **)&s->freq, sizeof *s->freq, &c, s->n_words + 1) ||
                (c = s->words_cap,
                 grow((void **)&s->src_off, sizeof *s->src_off, &c, s->n_words + 1)) ||
                (c = s->words_cap,
                 grow((void **)&s->src_len, sizeof *s->src_len, &c, s->n_words + 1))) {
                rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
                goto done;
            }
            s->words_cap = c;
            w = s->n_words++;
            s->freq[w] = 1;
            s->src_off[w] = i;
            s->src_len[w] = (int32_t)len;
            s->wh[h] = w + 1;
            if ((size_t)s->n_words * 2 > s->wh_cap) { /* rehash */
                size_t cap = s->wh_cap * 2;
                int32_t *nh = calloc(cap, sizeof *nh);
                if (!nh) {
                    rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
                    goto done;
                }
                for (int32_t k = 0; k < s->n_words; k++) {
                    size_t j = fnv1a(t + s->src_off[k], (size_t)s->src_len[k]) & (cap - 1);
                    while (nh[j])
                        j = (j + 1) & (cap - 1);
                    nh[j] = k + 1;
                }
                free(s->wh);
                s->wh = nh;
                s->wh_cap = cap;
            }
        }
        i += len;
    }
done:
    gt_pretok_destroy(pre);
    if (rc) return rc;
    size_t total = 0;
    for (int32_t w = 0; w < s->n_words; w++)
        total += (size_t)s->src_len[w];
    s->sym = malloc((total ? total : 1) * sizeof *s->sym);
    s->sym_off = malloc(((size_t)s->n_words + 1) * sizeof *s->sym_off);
    s->sym_len = malloc(((size_t)s->n_words + 1) * sizeof *s->sym_len);
    s->mark = malloc(((size_t)s->n_words + 1) * sizeof *s->mark);
    if (!s->sym || !s->sym_off || !s->sym_len || !s->mark)
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
    size_t off = 0;
    for (int32_t w = 0; w < s->n_words; w++) {
        s->sym_off[w] = off;
        s->sym_len[w] = s->src_len[w];
        s->mark[w] = -1;
        for (int32_t k = 0; k < s->src_len[w]; k++)
            s->sym[off + k] = t[s->src_off[w] + k];
        off += (size_t)s->src_len[w];
    }
    return GT_OK;
}

static pair_rec *pair_get(bpe_state *s, uint64_t key, gt_error *err) {
    if ((size_t)(s->n_recs + 1) * 2 > s->ph_cap) {
        size_t cap = s->ph_cap ? s->ph_cap * 2 : (1u << 16);
        int32_t *nh = calloc(cap, sizeof *nh);
        if (!nh) {
            gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
            return NULL;
        }
        for (int32_t k = 0; k < s->n_recs; k++) {
            size_t j = gt_tok_hash64(s->recs[k].key) & (cap - 1);
            while (nh[j])
                j = (j + 1) & (cap - 1);
            nh[j] = k + 1;
        }
        free(s->ph);
        s->ph = nh;
        s->ph_cap = cap;
    }
    size_t mask = s->ph_cap - 1, j = gt_tok_hash64(key) & mask;
    while (s->ph[j]) {
        pair_rec *r = &s->recs[s->ph[j] - 1];
        if (r->key == key) return r;
        j = (j + 1) & mask;
    }
    if (grow((void **)&s->recs, sizeof *s->recs, &s->recs_cap, s->n_recs + 1)) {
        gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
        return NULL;
    }
    pair_rec *r = &s->recs[s->n_recs];
    memset(r, 0, sizeof *r);
    r->key = key;
    s->ph[j] = ++s->n_recs;
    return r;
}

/* Max heap on (count, then smaller key first). */
static int heap_less(const heap_ent *a, const heap_ent *b) {
    if (a->count != b->count) return a->count < b->count;
    return a->key > b->key;
}

static int heap_push(bpe_state *s, int64_t count, uint64_t key) {
    if (count <= 0) return 0;
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 65536;
        heap_ent *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    s->heap[i] = (heap_ent){count, key};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&s->heap[p], &s->heap[i])) break;
        heap_ent t = s->heap[p];
        s->heap[p] = s->heap[i];
        s->heap[i] = t;
        i = p;
    }
    return 0;
}

static heap_ent heap_pop(bpe_state *s) {
    heap_ent top = s->heap[0];
    s->heap[0] = s->heap[--s->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->heap_n && heap_less(&s->heap[m], &s->heap[l])) m = l;
        if (r < s->heap_n && heap_less(&s->heap[m], &s->heap[r])) m = r;
        if (m == i) break;
        heap_ent t = s->heap[m];
        s->heap[m] = s->heap[i];
        s->heap[i] = t;
        i = m;
    }
    return top;
}

/* Adds delta occurrences of every adjacent pair of chunk w (delta < 0 removes them); when
 * adding, records w in the pair's chunk list. */
static int count_pairs(bpe_state *s, int32_t w, int64_t delta, gt_error *err) {
    const uint32_t *p = s->sym + s->sym_off[w];
    for (int32_t k = 0; k + 1 < s->sym_len[w]; k++) {
        pair_rec *r = pair_get(s, gt_tok_pair_key(p[k], p[k + 1]), err);
        if (!r) return GT_ERR_NOMEM;
        r->count += delta;
        if (delta > 0 && (r->n == 0 || r->words[r->n - 1] != w)) {
            if (grow((void **)&r->words, sizeof *r->words, &r->cap, r->n + 1))
                return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
            r->words[r->n++] = w;
        }
        /* the heap holds, for every pair, an entry >= its count: a decrease keeps that
         * true, an increase past the largest entry needs a new one */
        if (delta > 0 && r->count > r->heap_max) {
            r->heap_max = r->count;
            if (heap_push(s, r->count, r->key))
                return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
        }
    }
    return GT_OK;
}

/* Rewrites chunk w with every (a, b) -> z, left to right. */
static void rewrite(bpe_state *s, int32_t w, uint32_t a, uint32_t b, uint32_t z) {
    uint32_t *p = s->sym + s->sym_off[w];
    int32_t len = s->sym_len[w], o = 0;
    for (int32_t k = 0; k < len; k++) {
        if (k + 1 < len && p[k] == a && p[k + 1] == b) {
            p[o++] = z;
            k++;
        } else {
            p[o++] = p[k];
        }
    }
    s->sym_len[w] = o;
}

static int learn(bpe_state *s, gt_tokenizer *tk, int vocab_size, gt_error *err) {
    int rc;
    for (int32_t w = 0; w < s->n_words; w++)
        if ((rc = count_pairs(s, w, s->freq[w], err))) return rc;
    while (tk->n_vocab < vocab_size && s->heap_n > 0) {
        heap_ent e = heap_pop(s);
        pair_rec *r = pair_get(s, e.key, err);
        if (!r) return GT_ERR_NOMEM;
        if (r->count != e.count) { /* stale: its pair's count fell; queue the real count */
            r->heap_max = r->count;
            if (r->count > 0 && heap_push(s, r->count, r->key))
                return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (BPE)");
            continue;
        }
        if (r->count < 2) break; /* the most frequent pair occurs once: nothing to gain */
        uint32_t a = (uint32_t)(e.key >> 32), b = (uint32_t)e.key, z = (uint32_t)tk->n_vocab;
        size_t la, lb;
        const unsigned char *pa = gt_tokenizer_token(tk, a, &la);
        const unsigned char *pb = gt_tokenizer_token(tk, b, &lb);
        unsigned char buf[2 * GT_BPE_MAX_CHUNK];
        memcpy(buf, pa, la);
        memcpy(buf + la, pb, lb);
        if ((rc = gt_tok_add_token(tk, buf, la + lb, err))) return rc;
        if ((rc = gt_tok_add_merge(tk, a, b, z, err))) return rc;
        int32_t merge = tk->n_merges;
        /* the list may grow while we walk it (new pairs of z are appended to other lists,
         * never to this one: (a, b) cannot reappear), so copy it out first */
        int32_t n = r->n, *words = r->words;
        r->words = NULL;
        r->n = r->cap = 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t w = words[i];
            if (s->mark[w] == merge) continue;
            s->mark[w] = merge;
            if ((rc = count_pairs(s, w, -s->freq[w], err))) break;
            rewrite(s, w, a, b, z);
            if ((rc = count_pairs(s, w, s->freq[w], err))) break;
        }
        free(words);
        if (rc) return rc;
    }
    return GT_OK;
}

int gt_bpe_train(gt_tokenizer **out, const unsigned char *text, size_t n, int vocab_size,
                 gt_error *err) {
    *out = NULL;
    if (vocab_size < GT_BPE_MIN_VOCAB || vocab_size > GT_BPE_MAX_VOCAB)
        return gt_error_set(err, GT_ERR_INVALID,
                            "vocabulary size %d: a byte-level BPE needs %d..%d tokens (the 256 "
                            "bytes plus merges)",
                            vocab_size, GT_BPE_MIN_VOCAB, GT_BPE_MAX_VOCAB);
    gt_tokenizer *tk = NULL;
    int rc = gt_tok_alloc(&tk, GT_TOK_BPE, err);
    for (int i = 0; !rc && i < 256; i++) {
        unsigned char c = (unsigned char)i;
        rc = gt_tok_add_token(tk, &c, 1, err);
    }
    if (!rc) rc = gt_tok_index_bytes(tk, "BPE", err);
    bpe_state s;
    memset(&s, 0, sizeof s);
    if (!rc && n > 0) rc = collect_words(&s, text, n, err);
    if (!rc && n > 0) rc = learn(&s, tk, vocab_size, err);
    state_free(&s);
    if (rc) {
        gt_tokenizer_destroy(tk);
        return rc;
    }
    *out = tk;
    return GT_OK;
}
