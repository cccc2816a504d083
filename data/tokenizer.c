/* Tokenizer tables, encoding (added tokens, NFC, regex chunks, merges), decoding and the
 * vocabulary file; see tokenizer.h. Training lives in bpe_train.c, GPT-2 file loading in
 * gpt2_bpe.c, tokenizer.json in hf_tokenizer.c, the regex split in pretok.c. */
#include "data/tokenizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "data/nfc.h"

#define GT_VOCAB_FILE_MAGIC "graphtrain-tokenizer"
/* version 2 adds the end-of-document id ("eod N"); version 1 files (none) still load */
#define GT_VOCAB_FILE_VERSION 2
#define GT_GPT2_EOD_TEXT "<|endoftext|>"

int gt_tok_alloc(gt_tokenizer **out, gt_tok_kind kind, gt_error *err) {
    gt_tokenizer *tk = calloc(1, sizeof *tk);
    if (!tk) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (tokenizer)");
    tk->kind = kind;
    tk->eod = -1;
    tk->tok_off = calloc(1, sizeof *tk->tok_off);
    if (!tk->tok_off) {
        free(tk);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (tokenizer)");
    }
    for (int i = 0; i < 256; i++)
        tk->byte_id[i] = -1;
    tk->can_encode = 1;
    int rc = gt_pretok_create(&tk->pretok, GT_PRETOK_GPT2, err);
    if (rc) {
        gt_tokenizer_destroy(tk);
        return rc;
    }
    *out = tk;
    return GT_OK;
}

int gt_tok_set_pattern(gt_tokenizer *tk, const char *pattern, gt_error *err) {
    gt_pretok *p = NULL;
    int rc = gt_pretok_create(&p, pattern, err);
    if (rc) return rc;
    gt_pretok_destroy(tk->pretok);
    tk->pretok = p;
    return GT_OK;
}

static uint64_t bytes_hash(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int gt_tok_index_tokens(gt_tokenizer *tk, gt_error *err) {
    size_t cap = 1024;
    while (cap < (size_t)tk->n_vocab * 2)
        cap *= 2;
    int32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (tokenizer)");
    free(tk->th_slot);
    tk->th_slot = slot;
    tk->th_cap = cap;
    for (int id = 0; id < tk->n_vocab; id++) {
        size_t len;
        const unsigned char *b = gt_tokenizer_token(tk, (uint32_t)id, &len);
        if (gt_tok_find(tk, b, len) >= 0) continue; /* a duplicate: the lowest id wins */
        size_t j = bytes_hash(b, len) & (cap - 1);
        while (slot[j])
            j = (j + 1) & (cap - 1);
        slot[j] = id + 1;
    }
    return GT_OK;
}

int gt_tok_find(const gt_tokenizer *tk, const unsigned char *b, size_t len) {
    if (!tk->th_cap) return -1;
    size_t j = bytes_hash(b, len) & (tk->th_cap - 1);
    while (tk->th_slot[j]) {
        size_t l;
        const unsigned char *t = gt_tokenizer_token(tk, (uint32_t)(tk->th_slot[j] - 1), &l);
        if (l == len && !memcmp(t, b, len)) return tk->th_slot[j] - 1;
        j = (j + 1) & (tk->th_cap - 1);
    }
    return -1;
}

void gt_tokenizer_destroy(gt_tokenizer *tk) {
    if (!tk) return;
    free(tk->blob);
    free(tk->tok_off);
    free(tk->m_left);
    free(tk->m_right);
    free(tk->m_result);
    free(tk->mh_key);
    free(tk->mh_val);
    gt_pretok_destroy(tk->pretok);
    free(tk->added);
    free(tk->added_normalized);
    free(tk->th_slot);
    free(tk);
}

int gt_tok_add_token(gt_tokenizer *tk, const unsigned char *bytes, size_t len, gt_error *err) {
    if (tk->n_vocab >= GT_BPE_MAX_VOCAB)
        return gt_error_set(err, GT_ERR_INVALID, "tokenizer: more than %d tokens",
                            GT_BPE_MAX_VOCAB);
    if (tk->blob_n + len > tk->blob_cap) {
        size_t cap = tk->blob_cap ? tk->blob_cap * 2 : 4096;
        while (cap < tk->blob_n + len)
            cap *= 2;
        unsigned char *b = realloc(tk->blob, cap);
        if (!b) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (tokenizer)");
        tk->blob = b;
        tk->blob_cap = cap;
    }
    size_t *off = realloc(tk->tok_off, (size_t)(tk->n_vocab + 2) * sizeof *off);
    if (!off) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (tokenizer)");
    tk->tok_off = off;
    if (len) memcpy(tk->blob + tk->blob_n, bytes, len);
    tk->blob_n += len;
    tk->n_vocab++;
    tk->tok_off[tk->n_vocab] = tk->blob_n;
    return GT_OK;
}

static int merge_map_put(gt_tokenizer *tk, uint64_t key, int32_t val) {
    size_t mask = tk->mh_cap - 1, i = gt_tok_hash64(key) & mask;
    while (tk->mh_val[i] && tk->mh_key[i] != key)
        i = (i + 1) & mask;
    if (tk->mh_val[i]) return 0; /* duplicate: keep the first (higher priority) rank */
    tk->mh_key[i] = key;
    tk->mh_val[i] = val;
    return 1;
}

int gt_tok_add_merge(gt_tokenizer *tk, uint32_t left, uint32_t right, uint32_t result,
                     gt_error *err) {
    if (tk->n_merges == tk->merges_cap) {
        int cap = tk->merges_cap ? tk->merges_cap * 2 : 256;
        uint32_t *l = realloc(tk->m_left, (size_t)cap * sizeof *l);
        if (l) tk->m_left = l;
        uint32_t *r = realloc(tk->m_right, (size_t)cap * sizeof *r);
        if (r) tk->m_right = r;
        uint32_t *z = realloc(tk->m_result, (size_t)cap * sizeof *z);
        if (z) tk->m_result = z;
        if (!l || !r || !z) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        tk->merges_cap = cap;
    }
    if ((size_t)(tk->n_merges + 1) * 2 > tk->mh_cap) { /* keep the map at most half full */
        size_t cap = tk->mh_cap ? tk->mh_cap * 2 : 1024;
        uint64_t *k = calloc(cap, sizeof *k);
        int32_t *v = calloc(cap, sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        }
        uint64_t *ok = tk->mh_key;
        int32_t *ov = tk->mh_val;
        size_t ocap = tk->mh_cap;
        tk->mh_key = k;
        tk->mh_val = v;
        tk->mh_cap = cap;
        for (size_t i = 0; i < ocap; i++)
            if (ov[i]) merge_map_put(tk, ok[i], ov[i]);
        free(ok);
        free(ov);
    }
    int i = tk->n_merges++;
    tk->m_left[i] = left;
    tk->m_right[i] = right;
    tk->m_result[i] = result;
    merge_map_put(tk, gt_tok_pair_key(left, right), i + 1);
    return GT_OK;
}

int gt_tok_merge_rank(const gt_tokenizer *tk, uint32_t left, uint32_t right) {
    if (!tk->mh_cap) return -1;
    uint64_t key = gt_tok_pair_key(left, right);
    size_t mask = tk->mh_cap - 1, i = gt_tok_hash64(key) & mask;
    while (tk->mh_val[i]) {
        if (tk->mh_key[i] == key) return tk->mh_val[i] - 1;
        i = (i + 1) & mask;
    }
    return -1;
}

int gt_tok_index_bytes(gt_tokenizer *tk, const char *what, gt_error *err) {
    for (int i = 0; i < 256; i++)
        tk->byte_id[i] = -1;
    for (int id = tk->n_vocab - 1; id >= 0; id--) /* lowest id wins */
        if (tk->tok_off[id + 1] - tk->tok_off[id] == 1) tk->byte_id[tk->blob[tk->tok_off[id]]] = id;
    for (int i = 0; i < 256; i++)
        if (tk->byte_id[i] < 0)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: no token for the single byte 0x%02x, so some text could "
                                "not be encoded; a byte-level vocabulary needs all 256 bytes",
                                what, i);
    return GT_OK;
}

int gt_tokenizer_vocab_size(const gt_tokenizer *tk) {
    return tk->n_vocab;
}

int gt_tokenizer_eod(const gt_tokenizer *tk) {
    return tk->eod;
}

int gt_tokenizer_add_eod(gt_tokenizer *tk, gt_error *err) {
    if (tk->eod >= 0) return GT_OK;
    if (tk->kind == GT_TOK_GPT2) { /* GPT-2's own: <|endoftext|>, its last id */
        size_t want = strlen(GT_GPT2_EOD_TEXT);
        for (int id = tk->n_vocab - 1; id >= 0; id--) {
            size_t len;
            const unsigned char *p = gt_tokenizer_token(tk, (uint32_t)id, &len);
            if (len == want && !memcmp(p, GT_GPT2_EOD_TEXT, want)) {
                tk->eod = id;
                return GT_OK;
            }
        }
    }
    /* an empty token: no merge produces it, so no text encodes to it, and it decodes to
     * nothing, so a document's bytes come back exactly */
    int rc = gt_tok_add_token(tk, NULL, 0, err);
    if (!rc) tk->eod = tk->n_vocab - 1;
    return rc;
}

int gt_tokenizer_num_merges(const gt_tokenizer *tk) {
    return tk->n_merges;
}

void gt_tokenizer_merge(const gt_tokenizer *tk, int i, uint32_t *left, uint32_t *right,
                        uint32_t *result) {
    *left = tk->m_left[i];
    *right = tk->m_right[i];
    *result = tk->m_result[i];
}

const unsigned char *gt_tokenizer_token(const gt_tokenizer *tk, uint32_t id, size_t *len) {
    if (id >= (uint32_t)tk->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = tk->tok_off[id + 1] - tk->tok_off[id];
    return tk->blob + tk->tok_off[id];
}

/* ---- encoding: within a chunk, repeatedly merge every occurrence of the best-ranked pair */
static size_t encode_chunk(const gt_tokenizer *tk, uint32_t *sym, size_t len) {
    for (;;) {
        int best = -1;
        for (size_t k = 0; k + 1 < len; k++) {
            int r = gt_tok_merge_rank(tk, sym[k], sym[k + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r;
        }
        if (best < 0) return len;
        uint32_t a = tk->m_left[best], b = tk->m_right[best], z = tk->m_result[best];
        size_t w = 0;
        for (size_t k = 0; k < len; k++) {
            if (k + 1 < len && sym[k] == a && sym[k + 1] == b) {
                sym[w++] = z;
                k++;
            } else {
                sym[w++] = sym[k];
            }
        }
        len = w;
    }
}

static int append_ids(const uint32_t *sym, size_t m, uint32_t **ids, size_t *n_ids, size_t *cap,
                      gt_error *err) {
    if (*n_ids + m > *cap) {
        size_t c = *cap ? *cap * 2 : 65536;
        while (c < *n_ids + m)
            c *= 2;
        uint32_t *p = realloc(*ids, c * sizeof *p);
        if (!p) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory encoding text");
        *ids = p;
        *cap = c;
    }
    memcpy(*ids + *n_ids, sym, m * sizeof *sym);
    *n_ids += m;
    return GT_OK;
}

/* Text without added tokens: regex chunks, then merges inside each. */
static int encode_plain(const gt_tokenizer *tk, const unsigned char *text, size_t n, uint32_t **ids,
                        size_t *n_ids, size_t *cap, gt_error *err) {
    uint32_t sym[GT_BPE_MAX_CHUNK];
    for (size_t i = 0; i < n;) {
        size_t len = gt_pretok_next(tk->pretok, text, n, i, GT_BPE_MAX_CHUNK);
        int whole = tk->ignore_merges ? gt_tok_find(tk, text + i, len) : -1;
        size_t m = 1;
        if (whole >= 0) {
            sym[0] = (uint32_t)whole;
        } else {
            for (size_t k = 0; k < len; k++)
                sym[k] = (uint32_t)tk->byte_id[text[i + k]];
            m = encode_chunk(tk, sym, len);
        }
        int rc = append_ids(sym, m, ids, n_ids, cap, err);
        if (rc) return rc;
        i += len;
    }
    return GT_OK;
}

/* The added token (longest first) of the kind `bit` (GT_ADDED_*) whose content starts at
 * text[i], or -1. */
static int added_at(const gt_tokenizer *tk, const unsigned char *text, size_t n, size_t i,
                    int bit) {
    if (!(tk->added_first[text[i]] & bit)) return -1;
    for (int k = 0; k < tk->n_added; k++) {
        if ((tk->added_normalized[k] ? GT_ADDED_NORMALIZED : GT_ADDED_RAW) != bit) continue;
        size_t len;
        const unsigned char *c = gt_tokenizer_token(tk, tk->added[k], &len);
        if (len && len <= n - i && !memcmp(text + i, c, len)) return k;
    }
    return -1;
}

/* Where the pieces of a text go: their ids (encoding) or, when ids is NULL, the bytes those
 * ids decode to (gt_tokenizer_normalize). */
typedef struct piece_sink {
    uint32_t **ids;
    size_t *n_ids, *ids_cap;
    unsigned char **bytes;
    size_t *n_bytes, *bytes_cap;
} piece_sink;

static int append_bytes(const unsigned char *p, size_t m, unsigned char **out, size_t *n,
                        size_t *cap, gt_error *err) {
    if (*n + m > *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        while (c < *n + m)
            c *= 2;
        unsigned char *b = realloc(*out, c);
        if (!b) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory normalizing text");
        *out = b;
        *cap = c;
    }
    if (m) memcpy(*out + *n, p, m);
    *n += m;
    return GT_OK;
}

static int sink_added(const gt_tokenizer *tk, const piece_sink *s, int k, gt_error *err) {
    if (s->ids) return append_ids(&tk->added[k], 1, s->ids, s->n_ids, s->ids_cap, err);
    size_t len;
    const unsigned char *c = gt_tokenizer_token(tk, tk->added[k], &len);
    return append_bytes(c, len, s->bytes, s->n_bytes, s->bytes_cap, err);
}

typedef int (*piece_fn)(const gt_tokenizer *tk, const piece_sink *s, const unsigned char *text,
                        size_t n, gt_error *err);

/* Cuts text at the added tokens of the kind `bit` (leftmost, longest first, as Hugging Face's
 * matcher) and passes the text between them to `between`. */
static int split_at_added(const gt_tokenizer *tk, const piece_sink *s, const unsigned char *text,
                          size_t n, int bit, piece_fn between, gt_error *err) {
    size_t start = 0;
    for (size_t i = 0; tk->n_added && i < n; i++) {
        int k = added_at(tk, text, n, i, bit);
        if (k < 0) continue;
        int rc = i > start ? between(tk, s, text + start, i - start, err) : GT_OK;
        if (!rc) rc = sink_added(tk, s, k, err);
        if (rc) return rc;
        size_t len;
        (void)gt_tokenizer_token(tk, tk->added[k], &len);
        start = i + len;
        i = start - 1;
    }
    return n > start ? between(tk, s, text + start, n - start, err) : GT_OK;
}

static int sink_plain(const gt_tokenizer *tk, const piece_sink *s, const unsigned char *text,
                      size_t n, gt_error *err) {
    if (s->ids) return encode_plain(tk, text, n, s->ids, s->n_ids, s->ids_cap, err);
    return append_bytes(text, n, s->bytes, s->n_bytes, s->bytes_cap, err);
}

/* A piece between raw-matched added tokens: normalized on its own, then cut again at the
 * added tokens that match the normalized text (Hugging Face's two passes). */
static int sink_segment(const gt_tokenizer *tk, const piece_sink *s, const unsigned char *text,
                        size_t n, gt_error *err) {
    if (!tk->nfc) return split_at_added(tk, s, text, n, GT_ADDED_NORMALIZED, sink_plain, err);
    unsigned char *nfc = NULL;
    size_t nfc_n = 0, nfc_cap = 0;
    int rc = gt_nfc_append(text, n, &nfc, &nfc_n, &nfc_cap, err);
    if (!rc) rc = split_at_added(tk, s, nfc, nfc_n, GT_ADDED_NORMALIZED, sink_plain, err);
    free(nfc);
    return rc;
}

int gt_tokenizer_encode(const gt_tokenizer *tk, const unsigned char *text, size_t n, uint32_t **ids,
                        size_t *n_ids, size_t *cap, gt_error *err) {
    if (!tk->can_encode)
        return gt_error_set(err, GT_ERR_INVALID,
                            "this vocabulary came from a tokenizer.json, whose split pattern "
                            "and added tokens it does not keep; encode with the "
                            "tokenizer.json itself (prepare-data --tokenizer PATH)");
    /* added (special) tokens first, as Hugging Face does: the text between them is split */
    piece_sink s = {.ids = ids, .n_ids = n_ids, .ids_cap = cap};
    return split_at_added(tk, &s, text, n, GT_ADDED_RAW, sink_segment, err);
}

int gt_tokenizer_normalizes(const gt_tokenizer *tk) {
    return tk->nfc;
}

int gt_tokenizer_normalize(const gt_tokenizer *tk, const unsigned char *text, size_t n,
                           unsigned char **out, size_t *out_n, gt_error *err) {
    *out = NULL;
    *out_n = 0;
    size_t cap = 0;
    piece_sink s = {.bytes = out, .n_bytes = out_n, .bytes_cap = &cap};
    int rc = tk->nfc ? split_at_added(tk, &s, text, n, GT_ADDED_RAW, sink_segment, err)
                     : append_bytes(text, n, out, out_n, &cap, err);
    if (!rc && !*out && !(*out = malloc(1))) /* an empty text: a buffer all the same */
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory normalizing text");
    if (rc) {
        free(*out);
        *out = NULL;
        *out_n = 0;
    }
    return rc;
}

int gt_tokenizer_decode(const gt_tokenizer *tk, const uint32_t *ids, size_t n, unsigned char **out,
                        size_t *out_n, gt_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t)tk->n_vocab)
            return gt_error_set(err, GT_ERR_INVALID,
                                "decode: token %zu has id %u, outside the vocabulary of %d", i,
                                ids[i], tk->n_vocab);
        total += tk->tok_off[ids[i] + 1] - tk->tok_off[ids[i]];
    }
    unsigned char *buf = malloc(total ? total : 1);
    if (!buf) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory decoding");
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const unsigned char *p = gt_tokenizer_token(tk, ids[i], &len);
        memcpy(buf + used, p, len);
        used += len;
    }
    *out = buf;
    *out_n = used;
    return GT_OK;
}

/* ---- the vocabulary file: a text header, the merges (left right result), then one line
 * of hex bytes per token ("-" for an empty token). ---- */
int gt_tokenizer_save(const gt_tokenizer *tk, const char *path, gt_error *err) {
    gt_atomic_file f;
    int rc = gt_atomic_open(&f, path, err);
    if (rc) return rc;
    char line[4096];
    int len = snprintf(line, sizeof line, "%s %d\nkind %s\nvocab %d\nmerges %d\neod %d\n",
                       GT_VOCAB_FILE_MAGIC, GT_VOCAB_FILE_VERSION,
                       tk->kind == GT_TOK_GPT2 ? "gpt2"
                       : tk->kind == GT_TOK_HF ? "hf"
                                               : "bpe",
                       tk->n_vocab, tk->n_merges, tk->eod);
    rc = gt_atomic_write(&f, line, (size_t)len, err);
    for (int i = 0; !rc && i < tk->n_merges; i++) {
        len = snprintf(line, sizeof line, "%u %u %u\n", tk->m_left[i], tk->m_right[i],
                       tk->m_result[i]);
        rc = gt_atomic_write(&f, line, (size_t)len, err);
    }
    static const char hex[] = "0123456789abcdef";
    for (int id = 0; !rc && id < tk->n_vocab; id++) {
        size_t n;
        const unsigned char *p = gt_tokenizer_token(tk, (uint32_t)id, &n);
        char *buf = malloc(2 * n + 3);
        if (!buf) {
            gt_atomic_abort(&f);
            return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        }
        size_t u = 0;
        if (n == 0) buf[u++] = '-';
        for (size_t k = 0; k < n; k++) {
            buf[u++] = hex[p[k] >> 4];
            buf[u++] = hex[p[k] & 15];
        }
        buf[u++] = '\n';
        rc = gt_atomic_write(&f, buf, u, err);
        free(buf);
    }
    if (!rc) rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int load_body(gt_tokenizer *tk, FILE *f, const char *path, gt_error *err) {
    char word[64], kind[16];
    int version = 0, vocab = 0, merges = 0;
    if (fscanf(f, "%63s %d", word, &version) != 2 || strcmp(word, GT_VOCAB_FILE_MAGIC))
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a graphtrain vocabulary file (it should start with '%s "
                            "%d'); write it with `graphtrain prepare-data`",
                            path, GT_VOCAB_FILE_MAGIC, GT_VOCAB_FILE_VERSION);
    if (version < 1 || version > GT_VOCAB_FILE_VERSION)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: vocabulary file version %d, this graphtrain reads 1..%d", path,
                            version, GT_VOCAB_FILE_VERSION);
    int eod = -1;
    if (fscanf(f, " kind %15s vocab %d merges %d", kind, &vocab, &merges) != 3 || vocab < 1 ||
        vocab > GT_BPE_MAX_VOCAB || merges < 0 || merges >= vocab ||
        (version >= 2 && (fscanf(f, " eod %d", &eod) != 1 || eod < -1 || eod >= vocab)))
        return gt_error_set(err, GT_ERR_INVALID, "%s: bad header (kind/vocab/merges/eod)", path);
    tk->eod = eod;
    tk->kind = !strcmp(kind, "gpt2") ? GT_TOK_GPT2 : !strcmp(kind, "hf") ? GT_TOK_HF : GT_TOK_BPE;
    tk->can_encode = tk->kind != GT_TOK_HF;
    for (int i = 0; i < merges; i++) {
        unsigned a, b, z;
        if (fscanf(f, "%u %u %u", &a, &b, &z) != 3 || a >= (unsigned)vocab ||
            b >= (unsigned)vocab || z >= (unsigned)vocab)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: merge %d is missing or out of range "
                                "(the file is truncated or corrupt)",
                                path, i);
        int rc = gt_tok_add_merge(tk, a, b, z, err);
        if (rc) return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = GT_OK;
    if (fscanf(f, " ") != 0) { /* skip the newline before the token lines */
    }
    unsigned char *bytes = NULL;
    for (int id = 0; !rc && id < vocab; id++) {
        ssize_t got = getline(&line, &cap, f);
        if (got <= 0) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s: token %d of %d is missing (truncated "
                              "file)",
                              path, id, vocab);
            break;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        size_t n = 0;
        unsigned char *nb = realloc(bytes, (size_t)got / 2 + 1);
        if (!nb) {
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
            break;
        }
        bytes = nb;
        if (strcmp(line, "-")) {
            if (got % 2) {
                rc = gt_error_set(err, GT_ERR_INVALID,
                                  "%s: token %d: odd number of hex "
                                  "digits",
                                  path, id);
                break;
            }
            for (ssize_t k = 0; k < got; k += 2) {
                int hi = hexval(line[k]), lo = hexval(line[k + 1]);
                if (hi < 0 || lo < 0) {
                    rc = gt_error_set(err, GT_ERR_INVALID, "%s: token %d: not hex: %s", path, id,
                                      line);
                    break;
                }
                bytes[n++] = (unsigned char)(hi << 4 | lo);
            }
        }
        if (!rc) rc = gt_tok_add_token(tk, bytes, n, err);
    }
    free(bytes);
    free(line);
    if (!rc) rc = gt_tok_index_bytes(tk, path, err);
    return rc;
}

int gt_tokenizer_load(gt_tokenizer **out, const char *path, gt_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return gt_error_set(err, GT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    gt_tokenizer *tk = NULL;
    int rc = gt_tok_alloc(&tk, GT_TOK_BPE, err);
    if (!rc) rc = load_body(tk, f, path, err);
    fclose(f);
    if (rc) {
        gt_tokenizer_destroy(tk);
        return rc;
    }
    *out = tk;
    return GT_OK;
}
