/* The CUDA kernel choosers: which kernels run an op family (attention forward, attention
 * backward, grouped GEMM) on a device, for a shape and a runtime.cuda.* setting. Pure functions
 * without CUDA: the CUDA backend calls them both when it plans and when it launches, so the
 * two cannot disagree; validation calls them for the device runtime.gpu names; CPU tests call
 * them for made-up devices. A choice that cannot run is an error naming the key and a value
 * that would work. */
#ifndef GT_CONFIG_KERNEL_CHOICE_H
#define GT_CONFIG_KERNEL_CHOICE_H

#include "config/config.h"
#include "core/error.h"

/* What a choice depends on about the device. */
typedef struct gt_cuda_caps {
    int cc_major, cc_minor; /* compute capability; 0.0 = not known (validation without a GPU) */
    int cudnn;              /* cuDNN fused attention is usable (built in and loaded) */
} gt_cuda_caps;

typedef enum {
    GT_KERNEL_NONE = 0,
    GT_KERNEL_CUDNN,     /* cuDNN fused attention */
    GT_KERNEL_WGMMA,     /* warpgroup MMA, sm_90a (compute capability 9.0 only) */
    GT_KERNEL_MMA,       /* mma.sync tensor-core kernels */
    GT_KERNEL_REFERENCE, /* the fp32 SIMT kernels: the GPU tests' reference, slow */
} gt_kernel;

/* "cudnn", "wgmma", "mma", "reference" ("none" for GT_KERNEL_NONE) */
const char *gt_kernel_name(gt_kernel k);

/* One attention call as far as the choice goes. */
typedef struct gt_attn_shape {
    int T, hd;          /* sequence length, head size */
    float p;            /* attention dropout probability */
    int cudnn_declined; /* planning asked cuDNN and it built no plan for this shape */
} gt_attn_shape;

/* The head sizes the mma attention kernels and the reference kernels take. */
#define GT_ATTN_MMA_HD 64
int gt_attn_reference_hd_ok(int hd); /* 64 or 128 */
/* What cuDNN's fused attention takes here: no dropout, T % 128 == 0, hd % 8 == 0, hd <= 256. */
int gt_attn_cudnn_shape_ok(const gt_attn_shape *sh);

/* Attention forward: auto is cuDNN where it takes the shape, else mma for head size 64. */
int gt_choose_attention_fwd(const gt_cuda_caps *d, gt_cuda_attention setting,
                            const gt_attn_shape *sh, gt_kernel *out, gt_error *err);
/* Attention backward after a forward run by fwd: auto is the warpgroup-MMA kernels for head
 * size 64 on compute capability 9.0 after cuDNN's forward, else cuDNN's backward after cuDNN's
 * forward, else the forward's own family (mma or reference). cudnn needs cuDNN's forward. */
int gt_choose_attention_bwd(const gt_cuda_caps *d, gt_cuda_attention_bwd setting, gt_kernel fwd,
                            const gt_attn_shape *sh, gt_kernel *out, gt_error *err);
/* A grouped GEMM whose two sizes (output columns and the reduced dimension, in either order)
 * are n and k: auto is wgmma on compute capability 9.0, else mma; both need n and k to be
 * multiples of 8. */
int gt_choose_moe_gemm(const gt_cuda_caps *d, gt_cuda_moe_gemm setting, int n, int k,
                       gt_kernel *out, gt_error *err);
/* Programmatic dependent launch: auto is on from compute capability 9.0; on below it is an
 * error. *on receives 1 or 0. */
int gt_choose_pdl(const gt_cuda_caps *d, gt_cuda_pdl setting, int *on, gt_error *err);
/* Memset nodes of captured graphs as kernel nodes (1: auto, kernel) or left alone (0: node). */
int gt_choose_graph_memset(gt_cuda_graph_memset setting);

/* The device of Bridge's -g name (runtime.gpu: h100, h200, b200, ...), cuDNN assumed
 * present; compute capability 0.0 for an empty or unknown name. */
void gt_cuda_caps_of_gpu(const char *gpu, gt_cuda_caps *d);

#endif
