/* The ops of incremental decoding (graphtrain generate, model/model_decode.c): rotary
 * embedding at one position, appending keys and values to a KV cache, attention of one query
 * over the cache, and sampling a token from the logits. They follow backend.h's conventions
 * (enqueued on a stream, no allocation, no host sync, errors into b->sticky, nothing while
 * b->planning) and are a table of their own, next to gt_backend_ops, because only the decoder
 * calls them. Everything that changes from token to token (the position, the last token, the
 * number of draws) lives in the device-resident gt_decode_state, so a captured decode step
 * replays with fresh values. */
#ifndef GT_BACKEND_DECODE_OPS_H
#define GT_BACKEND_DECODE_OPS_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/philox.h"

/* Device memory; read and advanced by the ops, written by the host only between steps. */
typedef struct gt_decode_state {
    int32_t token;  /* the newest token: the input of the next decode step */
    int32_t pos;    /* its position in the sequence (0-based) */
    uint32_t draws; /* tokens sampled so far: the Philox counter of the next draw */
    uint32_t pad_;
} gt_decode_state;

/* Sampling, constant for a whole generation (passed by value into captured kernels). */
typedef struct gt_sample_params {
    float temperature; /* <= 0: greedy */
    int top_k;         /* 0 or >= V: all */
    float top_p;       /* >= 1: all */
    uint32_t pad_;
    uint64_t seed;
} gt_sample_params;

typedef struct gt_decode_ops {
    /* Rotary embedding of the q and k heads of one token's qkv row [(H + 2KV) * hd] at
     * position st->pos, with Llama 3.1's scaling when factor > 0: the rotation rope_fwd /
     * rope_scaled_fwd give row st->pos of a sequence. */
    void (*rope_at)(gt_backend *b, gt_stream *s, void *qkv, const gt_decode_state *st, int H,
                    int KV, int hd, float theta, float factor);
    /* Rows p .. p + n - 1 of the caches kc, vc [L, KV * hd] get the k and v heads of the n
     * rows of qkv [n, (H + 2KV) * hd]; p = st->pos, or 0 when st is NULL (a prefill). */
    void (*kv_store)(gt_backend *b, gt_stream *s, void *kc, void *vc, const void *qkv, int n,
                     const gt_decode_state *st, int H, int KV, int hd);
    /* out[H * hd] = causal GQA attention of the one query row q (qkv's q heads) over cache rows
     * 0 .. st->pos (inclusive), scale 1/sqrt(hd), query head h on kv head h / (H / KV); ws:
     * fp32 workspace of H * L floats, L the caches' rows (st->pos < L). */
    void (*attention)(gt_backend *b, gt_stream *s, void *out, const void *q, const void *kc,
                      const void *vc, const gt_decode_state *st, int L, int H, int KV, int hd,
                      float *ws);
    /* One token from logits [V] (act): greedy (the lowest id among the largest logits), or
     * with weights w_i = exp((l_i - max) / temperature) over the kept ids: those whose logit
     * is at least the top_k-th largest (ties kept), then of those, the ones whose logit is at
     * least the largest threshold t for which the weights of logits >= t reach top_p of the
     * kept weight; the draw u = Philox(seed, st->draws) in [0, 1) times the kept weight picks
     * the first kept id, in id order, whose running weight exceeds u. Then st->token = id,
     * st->pos += 1, st->draws += 1. ws: fp32 workspace of V floats. */
    void (*sample)(gt_backend *b, gt_stream *s, gt_decode_state *st, const void *logits, int V,
                   gt_sample_params p, float *ws);
} gt_decode_ops;

/* The decode ops of b's backend kind; NULL (and a message) where the build has none. */
const gt_decode_ops *gt_decode_ops_of(gt_backend *b, gt_error *err);

/* The CPU's and (in builds with CUDA) the CUDA backend's tables */
const gt_decode_ops *gt_cpu_decode_ops(void);
const gt_decode_ops *gt_cuda_decode_ops(void);

/* The draw's uniform [0, 1) from two Philox words, 53 bits, the same on every backend (host and
 * device code) */
GT_HD double gt_sample_uniform_bits(uint32_t hi, uint32_t lo) {
    return (double)(((uint64_t)(hi >> 5) << 26) | (uint64_t)(lo >> 6)) * (1.0 / 9007199254740992.0);
}
/* Philox counter word of the sampler (distinct from the dropout sites' counters) */
#define GT_SAMPLE_PHILOX_TAG 0x73616d70u /* "samp" */

/* Float keys ordered like the floats (NaN aside), for the threshold searches of sample */
GT_HD uint32_t gt_sample_key(uint32_t bits) {
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

#endif
