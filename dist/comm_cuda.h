/* The two kernels the NCCL communicator needs besides NCCL's own (k_comm.cu): the rank-order
 * sum of the shards an all-to-all gathered, and the step's loss from the micro-batches' pairs.
 * C launchers; both are plain adds in a fixed order, the CPU backend's bits. */
#ifndef GT_DIST_COMM_CUDA_H
#define GT_DIST_COMM_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* acc[i] = (first ? 0 : acc[i]) + parts[0][i] + parts[1][i] + ... + parts[size-1][i], added
 * one rank at a time (first: parts[0][i] + parts[1][i] + ..., acc unread); parts [size][cnt] */
cudaError_t gt_dist_cuda_rank_sum(cudaStream_t s, float *acc, const float *parts, size_t cnt,
                                  int size, int first);
/* *loss = slots[0] + slots[2] + ..., *aux = slots[1] + slots[3] + ..., in micro-batch order */
cudaError_t gt_dist_cuda_losses(cudaStream_t s, float *loss, float *aux, const float *slots,
                                int n_micro);

#ifdef __cplusplus
}
#endif

#endif
