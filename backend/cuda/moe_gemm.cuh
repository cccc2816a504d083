/* Launchers of the tensor-core grouped GEMMs (k_moe_mma.cu, k_moe_gemm.cu), used by the MoE
 * ops in k_moe.cu unless GT_CUDA_MOE=simt selected the fp32 SIMT reference kernels. */
#ifndef GT_BACKEND_CUDA_MOE_GEMM_CUH
#define GT_BACKEND_CUDA_MOE_GEMM_CUH

#include "backend/cuda/cuda_common.cuh"

/* out[R, Ncols] rows of each group = A[R, Kdim] @ W_e^T, W_e(c, k) = w[e*w_expert + c*wc + k*wk] */
void gt_cuda_grouped_mm_tc(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w,
                           const int32_t *offsets, int R, int E, int Ncols, int Kdim,
                           size_t w_expert, int wc, int wk);
/* dw[e][Nf, K] += dout[group]^T @ a[group] */
void gt_cuda_grouped_mm_dw_tc(cudaStream_t cs, float *dw, const bf16 *dout, const bf16 *a,
                              const int32_t *offsets, int E, int Nf, int K);

/* mma (GT_CUDA_MOE=mma, the default, or mma8; k_moe_mma.cu): mma.sync + ldmatrix, 3-stage
 * cp.async, 128x128 tiles with `warps` 4 (64x64 a warp) or 8 (64x32); return 0 without
 * launching unless Ncols, Kdim % 8 == 0 and the tensors are 16-byte aligned.
 * gt_cuda_grouped_mm_mma_init allows their dynamic shared memory. */
cudaError_t gt_cuda_grouped_mm_mma_init(void);
int gt_cuda_grouped_mm_mma(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w,
                           const int32_t *offsets, int R, int E, int Ncols, int Kdim, int kmajor,
                           int warps);
/* dw[e][Nf, K] (+)= dout[group]^T @ a[group]; accumulate 0 overwrites, with zeros for an
 * expert without rows */
int gt_cuda_grouped_mm_dw_mma(cudaStream_t cs, float *dw, const bf16 *dout, const bf16 *a,
                              const int32_t *offsets, int E, int Nf, int K, int accumulate,
                              int warps);

#endif
