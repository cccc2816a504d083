/* Sampling from a checkpoint (graphtrain generate) with a KV cache (model/model_decode.h): the
 * prompt goes through the model's forward once (prefill), then each new token is one decode
 * step over the cache and one draw from its logits, greedy (temperature 0) or with
 * temperature, top-k and top-p from a seeded Philox stream (backend/decode_ops.h). On the cuda
 * backend the decode step and its draw are captured once as a CUDA graph and replayed for
 * every token (or run eagerly with no_graph: the same ops, the same bits); the host reads back
 * only the sampled id. */
#ifndef GT_TRAIN_GENERATE_H
#define GT_TRAIN_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

typedef struct gt_generate_opts {
    int max_new_tokens;
    float temperature; /* 0: greedy (argmax; the lowest id among equal logits) */
    int top_k;         /* 0: all */
    float top_p;       /* 1: all */
    uint64_t seed;
    int stop_id;        /* generation ends after this id (the end-of-document token); -1: never */
    const char *device; /* "cpu", "cuda" or "auto" (NULL: auto, as runtime.device=auto) */
    int no_graph;       /* run the decode steps eagerly instead of replaying a captured graph */
} gt_generate_opts;

typedef struct gt_generate_stats {
    char backend[8];    /* "cpu" or "cuda" */
    int graph;          /* the decode steps replayed one captured graph */
    int prefill_tokens; /* the prompt */
    int decode_steps;   /* tokens after the first (each one decode step) */
    double prefill_ms;  /* prefill and the first draw, to the first id on the host */
    double decode_ms;   /* every decode step and draw, ids read back */
    /* device memory free, and the backend's allocation peak, after the first decode step
     * and after the last: equal when the steps in between allocated nothing */
    size_t free_before, free_after;
    size_t peak_before, peak_after;
} gt_generate_stats;

typedef struct gt_generate_result {
    int32_t *ids; /* [n] the new tokens (the stop id included when it came) */
    int n;
    float *logits; /* [n][V] the logits each id was drawn from (keep_logits), else NULL */
    gt_generate_stats stats;
} gt_generate_result;
void gt_generate_result_free(gt_generate_result *r);

/* Continues prompt[n_prompt] from checkpoint ckpt into r (freed with gt_generate_result_free,
 * also after a failure). */
int gt_generate(const char *ckpt, const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                gt_generate_result *r, gt_error *err);

/* The same from a configuration and fp32 weights [n_params] (the model's flat layout);
 * keep_logits also returns every draw's logits. For tests and tools. */
int gt_generate_model(const gt_config *cfg, const float *master, size_t n_params,
                      const int32_t *prompt, int n_prompt, const gt_generate_opts *o,
                      int keep_logits, gt_generate_result *r, gt_error *err);

/* The configuration and weights of a checkpoint, checked against each other (malloc'ed). */
int gt_generate_load(const char *ckpt, gt_config **cfg, float **master, size_t *n_params,
                     gt_error *err);

#endif
