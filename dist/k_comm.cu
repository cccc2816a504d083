/* Kernels of the NCCL communicator (comm_cuda.h): element-wise, one thread per element, every
 * sum formed in rank order exactly as comm_mpi.c forms it on the CPU. */
#include "backend/cuda/cuda_common.cuh"
#include "dist/comm_cuda.h"

#define GT_DIST_THREADS 256

__global__ void k_rank_sum(float *acc, const float *parts, size_t cnt, int size, int first) {
    GT_PDL_ENTRY(); /* launched plainly, where it does nothing; the lint asks every kernel */
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cnt) return;
    float v = first ? parts[i] : acc[i] + parts[i];
    for (int q = 1; q < size; q++)
        v += parts[(size_t)q * cnt + i];
    acc[i] = v;
}

__global__ void k_losses(float *loss, float *aux, const float *slots, int n_micro) {
    GT_PDL_ENTRY();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    float l = 0.0f, a = 0.0f;
    for (int i = 0; i < n_micro; i++) {
        l += slots[2 * i];
        a += slots[2 * i + 1];
    }
    *loss = l;
    *aux = a;
}

extern "C" cudaError_t gt_dist_cuda_rank_sum(cudaStream_t s, float *acc, const float *parts,
                                             size_t cnt, int size, int first) {
    if (cnt == 0) return cudaSuccess;
    unsigned blocks = (unsigned)((cnt + GT_DIST_THREADS - 1) / GT_DIST_THREADS);
    k_rank_sum<<<blocks, GT_DIST_THREADS, 0, s>>>(acc, parts, cnt, size, first);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_dist_cuda_losses(cudaStream_t s, float *loss, float *aux,
                                           const float *slots, int n_micro) {
    k_losses<<<1, 1, 0, s>>>(loss, aux, slots, n_micro);
    return cudaGetLastError();
}
