/* Incremental decoding with a KV cache (graphtrain generate): a prefill runs the training
 * forward's units over the prompt (no dropout) and stores every attention layer's rotated keys
 * and values in the cache; then each decode step takes the one newest token (its id and
 * position in the device-resident gt_decode_state) through the layers: norm -> qkv -> the q/k
 * transform before RoPE -> RoPE at the position -> append k, v to the cache -> attention of the
 * one query over the cache (GQA) -> o + residual -> the MLP, or the MoE with the router as
 * training computes it -> final norm -> head, leaving the logits of that token. sample turns
 * logits into the next token. Every op is a backend op enqueued on a stream and nothing in a
 * step depends on host values that change per token, so a step (with its sample) can be
 * captured once and replayed for every token. Models with Mamba layers are refused (no
 * recurrent decode state yet). */
#ifndef GT_MODEL_MODEL_DECODE_H
#define GT_MODEL_MODEL_DECODE_H

#include "backend/decode_ops.h"
#include "model/model.h"

typedef struct gt_decoder gt_decoder;

/* A decoder over model m (its parameters, its backend; m's tokens the prefill's) with
 * a cache of max_len positions (prompt and generated tokens). All memory is allocated here. */
int gt_decoder_create(gt_decoder **d, gt_model *m, int max_len, gt_error *err);
void gt_decoder_destroy(gt_decoder *d);

/* The model's forward over tokens [N] (device; N the model's tokens), of which the first n
 * are the prompt and the rest padding (causal attention and dropless routing keep it out of
 * the prompt's rows): fills cache rows 0 .. n-1 and leaves the logits of row n-1. st: a step
 * state for the units (no dropout, no loss). */
void gt_decoder_prefill(gt_decoder *d, gt_stream *s, const int32_t *tokens, int n,
                        gt_step_state *st);
/* One decode step: the logits of the state's token at the state's position (< max_len). */
void gt_decoder_step(gt_decoder *d, gt_stream *s);
/* The next token from the logits (gt_decode_ops.sample): token, pos and draws advance. */
void gt_decoder_sample(gt_decoder *d, gt_stream *s, gt_sample_params p);

gt_decode_state *gt_decoder_state(gt_decoder *d);   /* device memory */
const void *gt_decoder_logits(const gt_decoder *d); /* [V] act, device memory */
/* device bytes the decoder allocated (cache and per-token buffers) */
size_t gt_decoder_bytes(const gt_decoder *d);

#endif
