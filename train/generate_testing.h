/* The full-recompute generation, kept only as the tests' oracle for the KV-cache decoder:
 * every new token reruns the CPU forward over the whole sequence so far and draws from the
 * last position's logits with the same sample op. Exact and quadratic; not a user option. */
#ifndef GT_TRAIN_GENERATE_TESTING_H
#define GT_TRAIN_GENERATE_TESTING_H

#include "train/generate.h"

/* As gt_generate_model on the CPU backend (o->device and o->no_graph ignored), logits kept. */
int gt_generate_recompute(const gt_config *cfg, const float *master, size_t n_params,
                          const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                          gt_generate_result *r, gt_error *err);

/* Shared by both paths: the prompt and options checked against the model (a message naming
 * the bad value); a copy of cfg for sampling: one sequence of seq_len tokens, no dropout,
 * dropless MoE, no recompute, bf16 linear layers (malloc'ed). */
int gt_generate_check(const gt_config *cfg, const int32_t *prompt, int n_prompt,
                      const gt_generate_opts *o, gt_error *err);
int gt_generate_config(const gt_config *cfg, int seq_len, gt_config **out, gt_error *err);

#endif
