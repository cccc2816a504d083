/* What the Mamba-2 element-wise kernels share (k_mamba.cu: the gated RMSNorm and the SSD
 * scan's launches; k_mamba_conv.cu: the causal conv1d): the shape check, the SiLU pieces, bf16
 * vectors of V channels, and the deterministic cross-block sums. */
#ifndef GT_BACKEND_CUDA_MAMBA_EW_CUH
#define GT_BACKEND_CUDA_MAMBA_EW_CUH

#include <cooperative_groups.h>

#include "backend/cuda/cuda_common.cuh"
#include "config/cuda_limits.h"

namespace cg = cooperative_groups;

#define MAMBA_THREADS 256

static __device__ __forceinline__ float sigm(float x) {
    return 1.0f / (1.0f + expf(-x));
}
static __device__ __forceinline__ float silu_grad(float x) {
    float s = sigm(x);
    return s * (1.0f + x * (1.0f - s));
}

static inline int shape_ok(gt_backend *b, const char *op, gt_mamba_shape m) {
    if (m.B > 0 && m.T > 0 && m.H > 0 && m.P > 0 && m.G > 0 && m.S > 0 && m.K > 0 && m.chunk > 0 &&
        m.H % m.G == 0 && m.K <= GT_CUDA_MAMBA_MAX_CONV)
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad shape B=%d T=%d H=%d P=%d G=%d S=%d K=%d chunk=%d (all > 0, H a "
                    "multiple of G, K <= %d for the CUDA kernels)",
                    op, m.B, m.T, m.H, m.P, m.G, m.S, m.K, m.chunk, GT_CUDA_MAMBA_MAX_CONV);
    return 0;
}

/* ---- V channels at a time: V = 8 is one 16-byte load or store (rows, strides and pointers
 * allowing), V = 1 the scalar path of any shape. Loads keep the raw bits (a bf16 widens to
 * fp32 by a shift), so a batch of them is in flight before the first is converted. ---- */
#define VEC 8

template <int V> static __device__ __forceinline__ uint4 ld_raw(const bf16 *p) {
    if (V == VEC) return *(const uint4 *)p;
    if (V == 4) {
        uint2 u = *(const uint2 *)p;
        return make_uint4(u.x, u.y, 0u, 0u);
    }
    if (V == 2) return make_uint4(*(const unsigned *)p, 0u, 0u, 0u);
    return make_uint4(*(const unsigned short *)p, 0u, 0u, 0u);
}
static __device__ __forceinline__ float bf16_bits(unsigned bits) {
    return __uint_as_float(bits << 16);
}
template <int V> static __device__ __forceinline__ void unpack_raw(float *f, uint4 u) {
    if (V == VEC) {
        unpack8(f, u);
    } else if (V == 4) {
        f[0] = bf16_bits(u.x & 0xffffu), f[1] = bf16_bits(u.x >> 16);
        f[2] = bf16_bits(u.y & 0xffffu), f[3] = bf16_bits(u.y >> 16);
    } else if (V == 2) {
        f[0] = bf16_bits(u.x & 0xffffu), f[1] = bf16_bits(u.x >> 16);
    } else {
        f[0] = bf16_bits(u.x & 0xffffu);
    }
}
template <int V> static __device__ __forceinline__ void ldv(float *f, const bf16 *p) {
    unpack_raw<V>(f, ld_raw<V>(p));
}
template <int V> static __device__ __forceinline__ void stv(bf16 *p, const float *f) {
    if (V == VEC) {
        st8(p, f);
    } else if (V == 4) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(f[0], f[1]),
                       hi = __floats2bfloat162_rn(f[2], f[3]);
        uint2 u;
        memcpy(&u.x, &lo, 4);
        memcpy(&u.y, &hi, 4);
        *(uint2 *)p = u;
    } else if (V == 2) {
        *(__nv_bfloat162 *)p = __floats2bfloat162_rn(f[0], f[1]);
    } else {
        *p = tobf(f[0]);
    }
}
static inline int al16_all(const void *a, const void *b, const void *c, const void *d) {
    return al16(a) && al16(b) && al16(c) && al16(d);
}

/* ---- deterministic cross-block sums: a cluster of blocks splits the tokens, each block
 * adds its runs' partials part[run][slot] in run order into blk[slot], and the cluster's
 * first block adds the blocks' sums in rank order through distributed shared memory; the
 * order is fixed by the shape alone, and no global scratch is needed. ---- */
#define SLAB_CH 32 /* channels (columns) of a block */
#define RED_THREADS 64
#define RED_CLUSTER 8 /* blocks of a cluster, along gridDim.y: the portable maximum */

/* Leaves the cluster's sum of slot i in the first block's blk[i], in the thread that
 * handles i (i = threadIdx.x + j * blockDim.x); every thread of every block must call it. */
template <int RUNS, int W>
static __device__ __forceinline__ void cluster_sum(float (*part)[W], float *blk) {
    __syncthreads();
    for (int i = threadIdx.x; i < W; i += blockDim.x) {
        float s = 0.0f;
        for (int q = 0; q < RUNS; q++)
            s += part[q][i];
        blk[i] = s;
    }
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    if (cl.block_rank() == 0)
        for (int i = threadIdx.x; i < W; i += blockDim.x) {
            float s = 0.0f;
            for (unsigned q = 0; q < cl.num_blocks(); q++)
                s += cl.map_shared_rank(blk, q)[i];
            blk[i] = s;
        }
    cl.sync(); /* the other blocks' shared memory lives until the first block has read it */
}

#endif
