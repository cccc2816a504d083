/* The kernels the NCCL communicator needs besides NCCL's own (k_comm.cu): the rank-order sum
 * of the shards an all-to-all gathered, the step's loss from the micro-batches' pairs (plain
 * adds in a fixed order, the CPU backend's bits), and the fp8 state packed for its max
 * all-reduce and unpacked. C launchers. */
#ifndef GT_DIST_COMM_CUDA_H
#define GT_DIST_COMM_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

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

/* fp8_sync_nccl.c's packing: buf[i] = the amax at amax[i * stride] (i < n, the fp8 slots'
 * amax fields), buf[n] = 1 where (*flags & fp8_bit), else 0; and back (unpack sets fp8_bit
 * where buf[n] is nonzero). One thread a slot. */
cudaError_t gt_dist_cuda_fp8_pack(cudaStream_t s, float *buf, const float *amax, size_t stride,
                                  int n, const uint32_t *flags, uint32_t fp8_bit);
cudaError_t gt_dist_cuda_fp8_unpack(cudaStream_t s, const float *buf, float *amax, size_t stride,
                                    int n, uint32_t *flags, uint32_t fp8_bit);

#ifdef __cplusplus
}
#endif

#endif
