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
#include "config/kernel_choice.h"

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
    GT_SCRATCH_FP8,         /* an fp8 cast's amax and scale (k_fp8.cu) */
    GT_SCRATCH_COUNT
} gt_scratch_kind;

typedef struct gt_cuda_gemm_plan gt_cuda_gemm_plan; /* cuda_matmul.c */
typedef struct gt_cuda_gemm_tune gt_cuda_gemm_tune; /* cuda_matmul.c: tune-gemm's timing */

/* One planned attention shape and the kernels the choosers (config/kernel_choice.h) gave it:
 * the launch runs exactly these. */
typedef struct gt_cuda_attn_plan {
    int B, T, H, KV, hd;
    float p;         /* attention dropout */
    int fwd, bwd;    /* gt_kernel */
    size_t ws_bytes; /* cuDNN workspace of this shape (fwd or bwd cudnn) */
} gt_cuda_attn_plan;

/* One rotary cos/sin table, built by plan_finish for each (T, hd, theta) the planning pass
 * recorded: float2 [T][hd/2] of (cos, sin) of position t and pair i. */
typedef struct gt_cuda_rope_table {
    int T, hd;
    float theta;
    float factor; /* Llama 3.1 rotary scaling factor; 0 = none */
    void *tab;    /* device memory; NULL until plan_finish fills it */
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
    gt_cuda_config opts; /* runtime.cuda.* as the backend was created with */
    gt_cuda_caps caps;   /* what the choosers know of this device */
    int pdl;             /* programmatic dependent launch on (runtime.cuda.pdl) */
    int graph_fill;      /* memset nodes become kernel nodes after capture (graph_memset) */
    int moe_kernel;      /* gt_kernel the grouped GEMMs planned last, for describe */
    void *cudnn;         /* gt_cudnn_attn *, created by the first planned attention */
    gt_cuda_attn_plan *attn_plans;
    int n_attn_plans, cap_attn_plans;
    gt_cuda_rope_table *rope_tables;
    int n_rope_tables, cap_rope_tables;
    /* cuBLASLt */
    void *lt; /* cublasLtHandle_t */
    void *lt_ws;
    size_t lt_ws_bytes;
    void *lt_scale_stub; /* device floats the block-scaled descriptors point at while planned */
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

/* After capture, memset nodes become kernel nodes writing the same bytes (k_graph_fill.cu),
 * unless runtime.cuda.graph_memset=node; pdl: the backend launches with programmatic
 * dependent launch (its in-edges from kernel nodes stay programmatic). */
int gt_cuda_graph_memsets_to_kernels(cudaGraph_t g, int pdl, int *replaced, gt_error *err);

/* The raw CUDA stream of s (the legacy default stream for NULL). */
static inline cudaStream_t gt_cuda_stream(gt_stream *s) {
    return s ? s->cs : (cudaStream_t)0;
}

/* Where a kernel launch goes (gt_launch, cuda_common.cuh): the stream, and whether the launch
 * allows programmatic dependent launch (the backend's runtime.cuda.pdl). */
typedef struct gt_cuda_exec {
    cudaStream_t cs;
    int pdl;
} gt_cuda_exec;
static inline gt_cuda_exec gt_cuda_ex(gt_backend *b, gt_stream *s) {
    gt_cuda_exec e;
    e.cs = gt_cuda_stream(s);
    e.pdl = ((const gt_cuda_impl *)b->impl)->pdl;
    return e;
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
void gt_cuda_register_fp8_ops(gt_backend_ops *ops);     /* k_fp8.cu (the fp8 GEMM: cuda_matmul.c) */
void gt_cuda_register_moe_fp8_ops(gt_backend_ops *ops); /* k_moe_fp8.cu: the fp8 expert GEMMs */
void gt_cuda_register_fp8_bias_ops(gt_backend_ops *ops); /* cuda_fp8_bias.c */
/* fp8_cast under blockwise scaling (k_fp8_block.cu; fp8_cast checked the pointers) */
void gt_cuda_fp8_cast_blockwise(gt_backend *b, gt_stream *s, void *q, float *scale_inv,
                                const void *x, int rows, int cols, int transpose,
                                gt_fp8_cast_spec spec, gt_step_state *st);
/* fp8_cast_pair under blockwise scaling: both layouts from one reading of x (k_fp8_block.cu) */
void gt_cuda_fp8_cast_pair_blockwise(gt_backend *b, gt_stream *s, void *q, float *scale_inv,
                                     void *qt, float *scale_inv_t, const void *x, int rows,
                                     int cols, gt_fp8_cast_spec spec, gt_step_state *st);
void gt_cuda_register_mamba_ops(gt_backend_ops *ops);      /* k_mamba.cu */
void gt_cuda_register_mamba_conv_ops(gt_backend_ops *ops); /* k_mamba_conv.cu */
void gt_cuda_register_qk_norm_ops(gt_backend_ops *ops);    /* k_qk_norm.cu */
/* the chunked SSD scan behind the mamba_ssd_* ops, shapes checked (k_mamba_ssd.cu) */
void gt_cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                           const void *zxbcdt, const void *dt_bias, const void *A_log,
                           const void *D, float *ws, float *state, gt_mamba_shape sh);
void gt_cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt, float *ddt_bias,
                           float *dA_log, float *dD, const void *dy, const void *xbc,
                           const void *zxbcdt, const void *dt_bias, const void *A_log,
                           const void *D, float *ws, const float *state, gt_mamba_shape sh,
                           int accumulate);

/* One-time kernel attributes (large dynamic shared memory); at backend creation.
 * sm90: the device is compute capability 9.0, where the sm_90a (wgmma) kernels run */
int gt_cuda_attention_init(int sm90, gt_error *err);
int gt_cuda_moe_init(int sm90, gt_error *err);
/* "attention fwd: cudnn, attention bwd: wgmma (hd 64)" for the planned shapes ("" when none
 * was planned); k_attention.cu */
void gt_cuda_attention_describe(gt_backend *b, char *buf, size_t n);
/* Allows the cross-entropy kernel its shared memory (a row of logits); k_loss.cu. */
int gt_cuda_loss_init(gt_error *err);

/* k_attention.cu: rotary tables; plan_finish allocates and fills those not yet built */
int gt_cuda_rope_plan_finish(gt_backend *b, gt_error *err);
void gt_cuda_rope_destroy(gt_backend *b);

/* cuda_matmul.c: plan storage lifetime */
int gt_cuda_matmul_init(gt_backend *b, gt_error *err);
/* backend.h gemm_peak (cuda_peak.c) */
int gt_cuda_gemm_peak(gt_backend *b, int fp8, int n, int reps, double *flops_per_s, gt_error *err);
int gt_cuda_matmul_plan_finish(gt_backend *b, gt_error *err);
void gt_cuda_matmul_destroy(gt_backend *b);
/* "gemm_table=..." for describe: how many planned GEMMs run the table's algorithms */
void gt_cuda_gemm_table_describe(gt_backend *b, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
