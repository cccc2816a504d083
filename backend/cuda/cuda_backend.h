/* CUDA backend internals shared by the host code (cuda_backend.c, cuda_matmul.c) and the
 * kernel files (*.cu): the backend state, the one error-checking path for CUDA calls, the
 * scratch regions sized at planning time, and the registration of each file's ops. */
#ifndef GT_BACKEND_CUDA_CUDA_BACKEND_H
#define GT_BACKEND_CUDA_CUDA_BACKEND_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* the interface headers are C: give them C linkage in the .cu files */
#endif

#include "backend/backend.h"

struct gt_stream {
    cudaStream_t cs;
    double capture_t0_ms; /* host clock at begin_capture */
    int capturing;
};

/* Transient device scratch used inside one op. Each user has its own region so ops on
 * different streams never share one; sizes are the maxima recorded while planning. */
typedef enum {
    GT_SCRATCH_RMSNORM = 0, /* per-block dw partials [blocks][d] */
    GT_SCRATCH_EMBED,       /* tokens sorted, positions, CUB radix-sort storage */
    GT_SCRATCH_GRADNORM,    /* per-block sums of squares */
    GT_SCRATCH_ATTN,        /* D_i = dO_i . O_i [B,H,T] */
    GT_SCRATCH_MOE,         /* column means of router probs [E] */
    GT_SCRATCH_DBIAS,       /* per-block dbias partials */
    GT_SCRATCH_CUDNN,       /* cuDNN attention workspace (forward and backward share it) */
    GT_SCRATCH_PERMUTE,     /* tokens routed per expert [E] (moe_permute) */
    GT_SCRATCH_COUNT
} gt_scratch_kind;

typedef struct gt_cuda_gemm_plan gt_cuda_gemm_plan; /* cuda_matmul.c */
typedef struct gt_cuda_gemm_tune gt_cuda_gemm_tune; /* cuda_matmul.c: tune-gemm's timing */

/* Which attention kernels run (GT_CUDA_ATTN=cudnn|tc|simt when the backend is created):
 * cuDNN fused attention where it can take the shape (no dropout, T % 128 == 0), else the
 * tensor-core kernels; "tc" and "simt" force the own kernels (the fp32 SIMT ones are the
 * reference). */
typedef enum { GT_ATTN_CUDNN = 0, GT_ATTN_TC, GT_ATTN_SIMT } gt_attn_mode;

/* Which grouped-GEMM kernels the MoE experts use (GT_CUDA_MOE=wgmma|mma|tc|simt): warpgroup
 * MMA (the default on compute capability 9.0), mma.sync with ldmatrix (the default elsewhere),
 * both with 3-stage pipelines (shapes they cannot take go to tc); the 64x64 WMMA ones; or the
 * fp32 SIMT reference. */
typedef enum { GT_MOE_TC = 0, GT_MOE_SIMT, GT_MOE_MMA, GT_MOE_WGMMA } gt_moe_mode;

/* One planned attention shape and whether cuDNN runs it. */
typedef struct gt_cuda_attn_plan {
    int B, T, H, KV, hd;
    int use_cudnn;
    size_t ws_bytes; /* cuDNN workspace of this shape */
} gt_cuda_attn_plan;

/* One rotary cos/sin table, built by plan_finish for each (T, hd, theta) the planning pass
 * recorded: float2 [T][hd/2] of (cos, sin) of position t and pair i. */
typedef struct gt_cuda_rope_table {
    int T, hd;
    float theta;
    void *tab; /* device memory; NULL until plan_finish fills it */
} gt_cuda_rope_table;

typedef struct gt_cuda_alloc_rec {
    void *ptr;
    size_t bytes;
} gt_cuda_alloc_rec;

typedef struct gt_cuda_impl {
    int device;
    int sm_count;
    size_t allocated, peak; /* bytes through ops->alloc */
    gt_cuda_alloc_rec *allocs;
    int n_allocs, cap_allocs;
    int live_graphs;
    int attn_mode; /* gt_attn_mode */
    /* 1: where cuDNN runs the attention forward, the backward is the own warpgroup-MMA kernels
     * of k_attention_wgmma.cu for head size 64 (the default on compute capability 9.0;
     * GT_CUDA_ATTN_BWD=cudnn keeps cuDNN's) */
    int attn_bwd_wgmma;
    int moe_mode; /* gt_moe_mode */
    void *cudnn;  /* gt_cudnn_attn *, created by the first planned attention */
    gt_cuda_attn_plan *attn_plans;
    int n_attn_plans, cap_attn_plans;
    gt_cuda_rope_table *rope_tables;
    int n_rope_tables, cap_rope_tables;
    /* cuBLASLt */
    void *lt; /* cublasLtHandle_t */
    void *lt_ws;
    size_t lt_ws_bytes;
    gt_cuda_gemm_plan *plans;
    int n_plans, cap_plans;
    struct gt_gemm_table *gemm_table; /* runtime.gemm_table, when made on this machine */
    int gemm_table_used, gemm_table_refused, gemm_table_mismatch;
    gt_cuda_gemm_tune *gemm_tune; /* NULL until graphtrain tune-gemm times a plan */
    /* scratch: one allocation carved into GT_SCRATCH_COUNT regions */
    void *scratch_base;
    size_t scratch_need[GT_SCRATCH_COUNT]; /* recorded while planning */
    size_t scratch_have[GT_SCRATCH_COUNT]; /* allocated by plan_finish */
    void *scratch[GT_SCRATCH_COUNT];
} gt_cuda_impl;

/* Reports a failed CUDA runtime call into the sticky error (ops) and returns nonzero. */
int gt_cuda_fail_call(gt_backend *b, cudaError_t e, const char *call, const char *file, int line);
#define GT_CUDA_OP(b, call)                                                                        \
    do {                                                                                           \
        cudaError_t gt_e_ = (call);                                                                \
        if (gt_e_ != cudaSuccess) gt_cuda_fail_call((b), gt_e_, #call, __FILE__, __LINE__);        \
    } while (0)
/* After a kernel launch: a bad configuration shows up in cudaGetLastError. */
#define GT_CUDA_LAUNCHED(b, what)                                                                  \
    gt_cuda_fail_call((b), cudaGetLastError(), what, __FILE__, __LINE__)

/* Programmatic dependent launch between the backend's kernels (cuda_common.cuh): on from
 * compute capability 9.0 unless GT_CUDA_PDL=off; set when a CUDA backend is created, read by
 * every launch. */
extern int gt_cuda_pdl;
/* After capture, memset nodes become kernel nodes writing the same bytes (k_graph_fill.cu)
 * unless GT_CUDA_GRAPH_MEMSET=node; set when a CUDA backend is created. */
extern int gt_cuda_graph_fill;
int gt_cuda_graph_memsets_to_kernels(cudaGraph_t g, int *replaced, gt_error *err);

/* The raw CUDA stream of s (the legacy default stream for NULL). */
static inline cudaStream_t gt_cuda_stream(gt_stream *s) {
    return s ? s->cs : (cudaStream_t)0;
}

/* While planning: records that `kind` needs `bytes` and returns NULL (compute nothing).
 * Otherwise: the region, or NULL after raising a sticky "not planned" error naming `what`. */
void *gt_cuda_scratch(gt_backend *b, gt_scratch_kind kind, size_t bytes, const char *what);

/* dbias[N] += column sums of dout[M,N] (bf16), deterministic two-pass (k_dense.cu). */
void gt_cuda_dbias(gt_backend *b, gt_stream *s, float *dbias, const void *dout, int M, int N,
                   int accumulate);

/* Registration of the op table entries implemented in each file. */
void gt_cuda_register_matmul_ops(gt_backend_ops *ops);
void gt_cuda_register_dense_ops(gt_backend_ops *ops);
void gt_cuda_register_loss_ops(gt_backend_ops *ops);
void gt_cuda_register_attention_ops(gt_backend_ops *ops);
void gt_cuda_register_optim_ops(gt_backend_ops *ops);
void gt_cuda_register_moe_ops(gt_backend_ops *ops);

/* One-time kernel attributes (large dynamic shared memory); at backend creation. */
/* sm90: the device is compute capability 9.0, where the sm_90a (wgmma) kernels run */
int gt_cuda_attention_init(int sm90, gt_error *err);
/* sm90: the device is compute capability 9.0, where the sm_90a (wgmma) kernels run */
int gt_cuda_moe_init(int sm90, gt_error *err);
/* Allows the cross-entropy kernel its shared memory (a row of logits); k_loss.cu. */
int gt_cuda_loss_init(gt_error *err);

/* k_attention.cu: rotary tables; plan_finish allocates and fills those not yet built */
int gt_cuda_rope_plan_finish(gt_backend *b, gt_error *err);
void gt_cuda_rope_destroy(gt_backend *b);

/* cuda_matmul.c: plan storage lifetime */
int gt_cuda_matmul_init(gt_backend *b, gt_error *err);
int gt_cuda_matmul_plan_finish(gt_backend *b, gt_error *err);
void gt_cuda_matmul_destroy(gt_backend *b);
/* "gemm_table=..." for describe: how many planned GEMMs run the table's algorithms */
void gt_cuda_gemm_table_describe(gt_backend *b, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
