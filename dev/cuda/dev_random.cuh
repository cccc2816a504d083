/* Device buffers of reproducible pseudo-random values in [-0.5, 0.5) for the CUDA developer
 * tools beside this file (own_vs_lt.cu, wgrad_batch.cu): n elements, fp32 or bf16, from an LCG
 * seeded with `seed`. Not part of the engine. */
#ifndef GT_DEV_CUDA_DEV_RANDOM_CUH
#define GT_DEV_CUDA_DEV_RANDOM_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>

static void *dev_random(size_t n, int fp32, unsigned seed) {
    size_t bytes = n * (fp32 ? 4 : 2);
    void *h = malloc(bytes), *d = NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = ((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
        if (fp32)
            ((float *)h)[i] = v;
        else
            ((__nv_bfloat16 *)h)[i] = __float2bfloat16(v);
    }
    cudaMalloc(&d, bytes);
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    return d;
}

#endif
