/* The bias gradient of an fp8 linear layer on the GPU (backend.h, bias_grad): the column sums
 * matmul_bwd_weight adds for a bf16 bias (k_dense.cu, fixed-order partial sums, no atomics),
 * from the unquantized gradient. The forward's bias is the fp8 GEMM's bias epilogue
 * (cuda_matmul.c). */
#include "backend/cuda/cuda_backend.h"

static void cuda_bias_grad(gt_backend *b, gt_stream *s, float *dbias, const void *dout, int M,
                           int N, int accumulate) {
    if (!dbias || !dout || M < 0 || N <= 0) {
        gt_backend_fail(b, GT_ERR_INVALID, "bias_grad: bad arguments M=%d N=%d (dbias %p)", M, N,
                        (void *)dbias);
        return;
    }
    gt_cuda_dbias(b, s, dbias, dout, M, N, accumulate);
}

void gt_cuda_register_fp8_bias_ops(gt_backend_ops *ops) {
    ops->bias_grad = cuda_bias_grad;
}
