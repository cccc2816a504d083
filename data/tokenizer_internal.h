/* Internals shared by the tokenizer files (tokenizer.c, bpe_train.c, gpt2_bpe.c): the
 * vocabulary table and the merge lookup. */
#ifndef GT_DATA_TOKENIZER_INTERNAL_H
#define GT_DATA_TOKENIZER_INTERNAL_H

#include "data/pretok.h"
#include "data/tokenizer.h"

/* HF: from a Hugging Face tokenizer.json (its pattern, added tokens and options live only in
 * that file, so a vocabulary file of this kind decodes but does not encode) */
typedef enum { GT_TOK_BPE = 0, GT_TOK_GPT2 = 1, GT_TOK_HF = 2 } gt_tok_kind;

/* added_first bits: some added token matched in the raw / the normalized text starts with the
 * byte */
#define GT_ADDED_RAW 1
#define GT_ADDED_NORMALIZED 2

struct gt_tokenizer {
    gt_tok_kind kind;
    int n_vocab;
    int eod;             /* id of the end-of-document token, -1 when there is none */
    unsigned char *blob; /* bytes of every token, concatenated */
    size_t blob_n, blob_cap;
    size_t *tok_off;  /* [n_vocab + 1] token i = blob[tok_off[i], tok_off[i+1]) */
    int byte_id[256]; /* id of each single-byte token */
    int n_merges, merges_cap;
    uint32_t *m_left, *m_right, *m_result; /* [n_merges], in rank order */
    /* open-addressing map (left, right) -> merge rank + 1 (0 = empty) */
    uint64_t *mh_key;
    int32_t *mh_val;
    size_t mh_cap;
    gt_pretok *pretok; /* the chunking regex (GPT-2's unless the source says otherwise) */
    int can_encode;    /* 0 for a GT_TOK_HF vocabulary read back from its .vocab file */
    int ignore_merges; /* a chunk that is itself a token is emitted whole (Llama 3) */
    int nfc;           /* the text is NFC-normalized before the split (nfc.h) */
    int n_added;       /* added / special tokens, matched in the text before the split */
    uint32_t *added;   /* [n_added] their ids, longest content first */
    /* [n_added] 1: matched in the normalized text (Hugging Face's normalized=true), 0: in the
     * raw text, before normalization */
    unsigned char *added_normalized;
    unsigned char added_first[256]; /* GT_ADDED_* bits: bytes that start some added token */
    int32_t *th_slot; /* token bytes -> id + 1 (open addressing, gt_tok_index_tokens) */
    size_t th_cap;
};

/* An empty tokenizer of the given kind. */
int gt_tok_alloc(gt_tokenizer **tk, gt_tok_kind kind, gt_error *err);
/* Appends a token (id = current n_vocab). */
int gt_tok_add_token(gt_tokenizer *tk, const unsigned char *bytes, size_t len, gt_error *err);
/* Appends a merge with the next rank. */
int gt_tok_add_merge(gt_tokenizer *tk, uint32_t left, uint32_t right, uint32_t result,
                     gt_error *err);
/* Rank of (left, right), or -1. */
int gt_tok_merge_rank(const gt_tokenizer *tk, uint32_t left, uint32_t right);
/* Replaces the pre-tokenizer's pattern. */
int gt_tok_set_pattern(gt_tokenizer *tk, const char *pattern, gt_error *err);
/* Builds the bytes -> id map (lowest id wins) that gt_tok_find reads. */
int gt_tok_index_tokens(gt_tokenizer *tk, gt_error *err);
int gt_tok_find(const gt_tokenizer *tk, const unsigned char *bytes, size_t len);
/* GPT-2's byte-to-unicode alphabet: dec[code point] = byte or -1 (code points < 512), and
 * the decoding of UTF-8 text in it into bytes (-1 when a character is outside it). */
void gt_tok_byte_decoder(int dec[512]);
long gt_tok_unmap(const unsigned char *s, size_t n, const int dec[512], unsigned char *out);
/* Fills byte_id from the single-byte tokens; fails when a byte has none. */
int gt_tok_index_bytes(gt_tokenizer *tk, const char *what, gt_error *err);

static inline uint64_t gt_tok_pair_key(uint32_t a, uint32_t b) {
    return (uint64_t)a << 32 | b;
}

static inline uint64_t gt_tok_hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

#endif
