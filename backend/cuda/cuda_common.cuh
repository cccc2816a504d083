/* Device helpers shared by the kernel files: bf16 conversions and 16-byte vector access,
 * deterministic warp and block reductions (fixed shuffle trees, fixed warp order) and
 * launch-size helpers. Included only by .cu files. */
#ifndef GT_BACKEND_CUDA_CUDA_COMMON_CUH
#define GT_BACKEND_CUDA_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

typedef __nv_bfloat16 bf16;

#define GT_WARP 32
#define GT_MAX_GRID 65535u

static __device__ __forceinline__ float ldf(const bf16 *p) {
    return __bfloat162float(*p);
}
static __device__ __forceinline__ bf16 tobf(float x) {
    return __float2bfloat16(x);
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
 * result. `sh` is 32 floats of shared memory; the order of additions is fixed. */
static __device__ __forceinline__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(r);
}

static __device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double block_sum_d(double v, double *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    double r = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(r);
}

/* ---- programmatic dependent launch ----
 * Every kernel of the backend starts with GT_PDL_ENTRY and is launched through gt_launch.
 * With pdl on in its gt_cuda_exec (runtime.cuda.pdl), a launch may begin while the kernel before it
 * on the stream is still running (in eager streams and as a programmatic edge inside a captured
 * graph); the new kernel's blocks become resident and wait in griddepcontrol.wait until that kernel
 * has finished and its writes are visible, so no kernel reads or writes memory any earlier than
 * with a plain launch. A kernel lets its successor launch once all its own blocks are past
 * their wait. This hides the launch latency between the short kernels of a step. Without the
 * attribute (or before sm_90) both instructions do nothing. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GT_PDL_ENTRY()                                                                             \
    do {                                                                                           \
        asm volatile("griddepcontrol.wait;" ::: "memory");                                         \
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");                            \
    } while (0)
#else
#define GT_PDL_ENTRY()                                                                             \
    do {                                                                                           \
    } while (0)
#endif

/* Launches kernel k on stream ex.cs like k<<<grid, block, smem, ex.cs>>>(args...), allowing
 * the programmatic overlap above when ex.pdl is on. Errors surface through cudaGetLastError,
 * as for <<<>>>. */
template <typename... KArgs, typename... Args>
static inline void gt_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             gt_cuda_exec ex, Args &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = ex.pdl;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ex.cs;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, k, std::forward<Args>(args)...);
}

/* A grid for a grid-stride loop over n items. */
static inline unsigned gt_grid(size_t n, int threads) {
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    if (g < 1) g = 1;
    if (g > 4u * GT_MAX_GRID) g = 4u * GT_MAX_GRID;
    return (unsigned)g;
}

/* ---- 16-byte vector access: 8 bf16 at a time where sizes and pointers allow ---- */

static inline int al16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}
/* eight bf16 packed in 16 bytes -> fp32 */
static __device__ __forceinline__ void unpack8(float *f, uint4 u) {
    bf16 h[8];
    memcpy(h, &u, 16);
#pragma unroll
    for (int i = 0; i < 8; i++)
        f[i] = __bfloat162float(h[i]);
}
static __device__ __forceinline__ void ld8(float *f, const bf16 *p) {
    unpack8(f, *(const uint4 *)p);
}

/* ---- amax for fp8 casts (gt_fp8_cast_spec.amax_bits) ----
 * |v|'s bits (gt_fp8_amax_bits, core/fp8.h): for non-negative floats the integer order is the
 * float order and NaN's bits lie above Inf's, so a max over them is order-free and keeps a
 * NaN, as the CPU's amax does. */
static __device__ __forceinline__ unsigned gt_abs_bits(float v) {
    return __float_as_uint(v) & 0x7fffffffu;
}
/* The bits of |b| for the bf16 b a kernel stores: the value the cast reads back */
static __device__ __forceinline__ unsigned gt_abs_bits_bf16(bf16 b) {
    return gt_abs_bits(__bfloat162float(b));
}
/* *amax = max(*amax, m over the block's threads): one atomic a block (an unsigned max, so the
 * order the blocks land in changes nothing). Every thread of the block calls it (it holds a
 * __syncthreads); blockDim.x a multiple of 32, sh blockDim.x / 32 unsigned of shared memory. */
static __device__ __forceinline__ void gt_block_fold_amax(unsigned *amax, unsigned m,
                                                          unsigned *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
        m = o2 > m ? o2 : m;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        m = sh[w] > m ? sh[w] : m;
    if (m) atomicMax(amax, m);
}

/* st8 that, when fold, also returns max(m, the bits of each |value| as stored in bf16): the
 * amax an fp8 cast of the output would read back (the producers' *_amax ops, backend.h) */
static __device__ __forceinline__ unsigned st8_fold(bf16 *p, const float *f, unsigned m,
                                                    bool fold) {
    bf16 h[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        h[i] = __float2bfloat16(f[i]);
    uint4 u;
    memcpy(&u, h, 16);
    *(uint4 *)p = u;
    if (fold)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            unsigned b = gt_abs_bits_bf16(h[i]);
            m = b > m ? b : m;
        }
    return m;
}
/* fp32 -> eight bf16, one 16-byte store */
static __device__ __forceinline__ void st8(bf16 *p, const float *f) {
    (void)st8_fold(p, f, 0u, false);
}

#define GT_GRID_STRIDE(i, n)                                                                       \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

#endif
