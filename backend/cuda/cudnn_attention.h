/* cuDNN fused attention (causal grouped-query SDPA) forward and backward, called from C
 * through cuDNN's backend API on graphtrain's packed layouts. One handle caches an execution
 * plan pair per shape; calls only enqueue on the given stream, so they are capture-safe. */
#ifndef GT_BACKEND_CUDA_CUDNN_ATTENTION_H
#define GT_BACKEND_CUDA_CUDNN_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_cudnn_attn gt_cudnn_attn; /* one cuDNN handle, plan cache per shape */

/* 1 when this build has cuDNN and the loaded library is new enough (>= 9.0, not 9.10.0/1);
 * 0 otherwise: the caller then uses its own attention kernel. */
int gt_cudnn_attn_available(void);

int gt_cudnn_attn_create(gt_cudnn_attn **a, cudaStream_t stream, gt_error *err);
void gt_cudnn_attn_destroy(gt_cudnn_attn *a); /* accepts NULL; frees every cached plan */

/* Builds (once per shape) the forward plan and, with with_bwd, the backward plan, runs each
 * once on scratch buffers so kernels are loaded before any capture, and returns the workspace
 * bytes that gt_cudnn_attn_fwd (and gt_cudnn_attn_bwd) need for this shape (one buffer serves
 * both; without the backward it is the forward's alone, far smaller than the backward's
 * B x H x T x T dS). A shape planned without the backward refuses gt_cudnn_attn_bwd and a later
 * plan call with it. Must not be called while `a`'s stream is capturing. GT_ERR_UNSUPPORTED for
 * shapes cuDNN cannot run (hd not a multiple of 8 or > 256, T < 2, no engine): fall back to
 * the own kernel. */
int gt_cudnn_attn_plan(gt_cudnn_attn *a, int B, int T, int H, int KV, int hd, int with_bwd,
                       size_t *workspace_bytes, gt_error *err);

/* Layouts (graphtrain's backend.h): qkv [B*T, (H+2KV)*hd] bf16 (q heads, then k heads, then
 * v heads per token); out [B*T, H*hd] bf16; lse [B,H,T] fp32, natural-log log-sum-exp of the
 * causal scores scaled by 1/sqrt(hd); query head h uses kv head h/(H/KV). The shape must have
 * been planned; workspace holds at least the planned bytes, 256-byte aligned. Both only
 * enqueue on `stream` (no sync, no device allocation). */
int gt_cudnn_attn_fwd(gt_cudnn_attn *a, cudaStream_t stream, void *out, float *lse, const void *qkv,
                      int B, int T, int H, int KV, int hd, void *workspace, gt_error *err);
/* dqkv [B*T, (H+2KV)*hd] bf16, overwritten (dK, dV summed over the query heads of each kv
 * group); deterministic: bitwise identical run to run. */
int gt_cudnn_attn_bwd(gt_cudnn_attn *a, cudaStream_t stream, void *dqkv, const void *dout,
                      const void *qkv, const void *out, const float *lse, int B, int T, int H,
                      int KV, int hd, void *workspace, gt_error *err);

/* One line naming the cuDNN version, the chosen engines, op counts and workspace sizes of a
 * planned shape (for logs and benchmarks); GT_ERR_INVALID when the shape is not planned. */
int gt_cudnn_attn_describe(const gt_cudnn_attn *a, int B, int T, int H, int KV, int hd, char *buf,
                           size_t n);

#ifdef __cplusplus
}
#endif

#endif
