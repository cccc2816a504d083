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

__global__ void k_fp8_pack(float *buf, const float *amax, size_t stride, int n,
                           const uint32_t *flags, uint32_t fp8_bit) {
    GT_PDL_ENTRY();
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) buf[i] = amax[(size_t)i * stride];
    if (i == n) buf[n] = (*flags & fp8_bit) ? 1.0f : 0.0f;
}

__global__ void k_fp8_unpack(const float *buf, float *amax, size_t stride, int n, uint32_t *flags,
                             uint32_t fp8_bit) {
    GT_PDL_ENTRY();
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) amax[(size_t)i * stride] = buf[i];
    if (i == n && buf[n] != 0.0f) *flags |= fp8_bit;
}

extern "C" cudaError_t gt_dist_cuda_fp8_pack(cudaStream_t s, float *buf, const float *amax,
                                             size_t stride, int n, const uint32_t *flags,
                                             uint32_t fp8_bit) {
    unsigned blocks = (unsigned)((n + 1 + GT_DIST_THREADS - 1) / GT_DIST_THREADS);
    k_fp8_pack<<<blocks, GT_DIST_THREADS, 0, s>>>(buf, amax, stride, n, flags, fp8_bit);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_dist_cuda_fp8_unpack(cudaStream_t s, const float *buf, float *amax,
                                               size_t stride, int n, uint32_t *flags,
                                               uint32_t fp8_bit) {
    unsigned blocks = (unsigned)((n + 1 + GT_DIST_THREADS - 1) / GT_DIST_THREADS);
    k_fp8_unpack<<<blocks, GT_DIST_THREADS, 0, s>>>(buf, amax, stride, n, flags, fp8_bit);
    return cudaGetLastError();
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
