/* Pre-tokenization by a regular expression (PCRE2, Unicode properties on): text is cut into
 * the pattern's successive leftmost matches, and any text between two matches becomes a chunk
 * of its own (Hugging Face's Split with behavior "Isolated"). BPE merges never cross a chunk.
 * GT_PRETOK_GPT2 is GPT-2's pattern (the ByteLevel pre-tokenizer's, tiktoken's r50k/p50k).
 * Bytes that are not valid UTF-8 never match, so they form chunks between matches. */
#ifndef GT_DATA_PRETOK_H
#define GT_DATA_PRETOK_H

#include <stddef.h>

#include "core/error.h"

#define GT_PRETOK_GPT2                                                                             \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct gt_pretok gt_pretok;

int gt_pretok_create(gt_pretok **p, const char *pattern, gt_error *err);
void gt_pretok_destroy(gt_pretok *p);
const char *gt_pretok_pattern(const gt_pretok *p);

/* Length (>= 1) of the chunk starting at text[i] (i < n), at most max_len bytes: a chunk cut
 * there continues at the next call. Calls must walk the text from its start (i = 0, then
 * i + the previous length); the matcher remembers the match it is inside. */
size_t gt_pretok_next(gt_pretok *p, const unsigned char *text, size_t n, size_t i, size_t max_len);

#endif
