/* Unicode NFC normalization of UTF-8 text (utf8proc), as the NFC normalizer of a Hugging Face
 * tokenizer.json (Qwen2, Qwen3) applies it before pre-tokenization. Bytes that are not valid
 * UTF-8 are kept as they are: byte-level BPE encodes any bytes, and dropping or replacing them
 * would lose text. */
#ifndef GT_DATA_NFC_H
#define GT_DATA_NFC_H

#include <stddef.h>

#include "core/error.h"

/* Appends the NFC form of text[0, n) to *out (a malloc'ed buffer grown as needed; *out_n used,
 * *cap its size). Each maximal run of valid UTF-8 is normalized on its own; an invalid byte
 * between two runs is copied and nothing composes across it. */
int gt_nfc_append(const unsigned char *text, size_t n, unsigned char **out, size_t *out_n,
                  size_t *cap, gt_error *err);

#endif
