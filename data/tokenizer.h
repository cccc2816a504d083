/* Byte-level BPE tokenizers for prepare-data: one learned from the corpus itself
 * (gt_bpe_train), or GPT-2's from the user's encoder.json + vocab.bpe. Both start from the
 * 256 bytes, so every byte string encodes, and decoding gives the exact bytes back. Text is
 * first split into chunks by GPT-2's regular expression run by PCRE2 (pretok.h), or by the
 * pattern a tokenizer.json names; merges never cross a chunk. */
#ifndef GT_DATA_TOKENIZER_H
#define GT_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define GT_BPE_MIN_VOCAB 256
#define GT_BPE_MAX_VOCAB 1000000
/* Chunks longer than this are cut (bounds the quadratic merge loop on pathological input;
 * training and encoding cut the same way, so the round trip is unaffected). */
#define GT_BPE_MAX_CHUNK 512

typedef struct gt_tokenizer gt_tokenizer;

/* Learns merges from text until the vocabulary has vocab_size tokens (or no pair occurs
 * twice; the result may then be smaller, see gt_tokenizer_vocab_size). Ties between equally
 * frequent pairs go to the smaller (left id, right id). */
int gt_bpe_train(gt_tokenizer **tk, const unsigned char *text, size_t n, int vocab_size,
                 gt_error *err);
/* GPT-2's tokenizer from its two files (byte-to-unicode alphabet, ranked merges). */
/* A Hugging Face tokenizer.json of a byte-level BPE (GPT-2, Llama 3, Qwen): vocab, merges,
 * added tokens, the NFC normalizer (Qwen's) or none, the ByteLevel pre-tokenizer or a Split
 * regex before it (hf_tokenizer.c); options it cannot honour (other normalizers, byte
 * fallback, ...) are refused by name. */
int gt_tokenizer_load_hf(gt_tokenizer **tk, const char *tokenizer_json, gt_error *err);
int gt_tokenizer_load_gpt2(gt_tokenizer **tk, const char *encoder_json, const char *vocab_bpe,
                           gt_error *err);
/* The vocabulary file written beside the shards (PREFIX.vocab), and reading it back. */
int gt_tokenizer_save(const gt_tokenizer *tk, const char *path, gt_error *err);
int gt_tokenizer_load(gt_tokenizer **tk, const char *path, gt_error *err);
void gt_tokenizer_destroy(gt_tokenizer *tk);

int gt_tokenizer_vocab_size(const gt_tokenizer *tk);
/* The end-of-document token prepare-data writes after each document: GPT-2's <|endoftext|>,
 * else an empty token appended as the last id (so a BPE of vocab_size - 1 learned tokens
 * plus it fills vocab_size). Adding is a no-op when there is one; -1 when there is none. */
int gt_tokenizer_add_eod(gt_tokenizer *tk, gt_error *err);
int gt_tokenizer_eod(const gt_tokenizer *tk);
int gt_tokenizer_num_merges(const gt_tokenizer *tk);
/* Merge i (rank order): left + right -> result. */
void gt_tokenizer_merge(const gt_tokenizer *tk, int i, uint32_t *left, uint32_t *right,
                        uint32_t *result);
/* The bytes of one token. */
const unsigned char *gt_tokenizer_token(const gt_tokenizer *tk, uint32_t id, size_t *len);

/* Appends the ids of text to *ids (a malloc'ed array grown as needed; *n used, *cap size). */
int gt_tokenizer_encode(const gt_tokenizer *tk, const unsigned char *text, size_t n, uint32_t **ids,
                        size_t *n_ids, size_t *cap, gt_error *err);
/* 1 when encoding normalizes the text first (a tokenizer.json's NFC normalizer): the ids then
 * decode to gt_tokenizer_normalize's text, not always to the input's bytes. */
int gt_tokenizer_normalizes(const gt_tokenizer *tk);
/* The bytes the ids of text decode to, into a malloc'ed *out of *out_n bytes: as Hugging Face
 * does, the added tokens matched in the raw text are cut out first, and each piece between
 * them is normalized on its own (NFC; invalid UTF-8 bytes kept); a copy of text when the
 * tokenizer does not normalize. */
int gt_tokenizer_normalize(const gt_tokenizer *tk, const unsigned char *text, size_t n,
                           unsigned char **out, size_t *out_n, gt_error *err);
/* Decodes ids into a malloc'ed byte string *out of *out_n bytes; unknown ids are refused. */
int gt_tokenizer_decode(const gt_tokenizer *tk, const uint32_t *ids, size_t n, unsigned char **out,
                        size_t *out_n, gt_error *err);

#endif
