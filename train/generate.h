/* Sampling from a checkpoint on the CPU backend (graphtrain generate): the prompt's ids, then
 * one token at a time from the logits of the last position, greedy (temperature 0) or with
 * temperature, top-k and top-p from a seeded generator. There is no KV cache yet: each new
 * token reruns the forward over the whole sequence so far (causal attention makes the later,
 * unused positions irrelevant), which is exact but quadratic in the length. */
#ifndef GT_TRAIN_GENERATE_H
#define GT_TRAIN_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef struct gt_generate_opts {
    int max_new_tokens;
    float temperature; /* 0: greedy (argmax; the lowest id among equal logits) */
    int top_k;         /* 0: all */
    float top_p;       /* 1: all */
    uint64_t seed;
    int stop_id; /* generation ends after this id (the end-of-document token); -1: never */
} gt_generate_opts;

/* Continues prompt[n_prompt] from checkpoint ckpt: *out (malloc'ed) gets the *n_out new ids. */
int gt_generate(const char *ckpt, const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                int32_t **out, int *n_out, gt_error *err);

#endif
