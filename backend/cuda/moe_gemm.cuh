/* Launchers of the tensor-core grouped GEMMs (k_moe_mma.cu, k_moe_wgmma.cu), used by the MoE
 * ops in k_moe.cu as runtime.cuda.moe_gemm chooses (config/kernel_choice.h); reference runs
 * the fp32 SIMT kernels of k_moe.cu instead. */
#ifndef GT_BACKEND_CUDA_MOE_GEMM_CUH
#define GT_BACKEND_CUDA_MOE_GEMM_CUH

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_sync.cuh"

/* What the tensor-core grouped GEMMs need: 16-byte aligned tensors, both sizes % 8 == 0. */
static inline int gt_moe_gemm_ok(const void *x, const void *y, const void *z, int a, int b) {
    return (((uintptr_t)x | (uintptr_t)y | (uintptr_t)z) & 15u) == 0 && a % 8 == 0 && b % 8 == 0;
}

/* Expert and rows [*r0, *r1) of TILE-row tile t of a grouped GEMM over device offsets (the
 * grid has one y index per possible tile: R / TILE + E); 0 when t is past the last tile. Warp 0
 * scans the offsets 32 experts at a time (one load and a shuffle scan per 32 experts, instead of a
 * serial walk of dependent loads), then the block reads the answer from shared memory. */
template <int TILE>
static __device__ int gt_moe_find_tile(const int32_t *offsets, int E, int t, int *e_out, int *r0,
                                       int *r1) {
    __shared__ int found[3];
    if (threadIdx.x < 32) {
        int lane = threadIdx.x, cum = 0, hit = 0;
        for (int c = 0; c < E && !hit; c += 32) {
            int e = c + lane, lo = 0, hi = 0;
            if (e < E) lo = offsets[e], hi = offsets[e + 1];
            int tiles = hi > lo ? (hi - lo + TILE - 1) / TILE : 0, incl = tiles;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                int v = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= d) incl += v;
            }
            int excl = cum + incl - tiles;
            bool mine = tiles > 0 && t >= excl && t < excl + tiles;
            unsigned who = __ballot_sync(0xffffffffu, mine);
            if (mine) {
                found[0] = e;
                found[1] = lo + (t - excl) * TILE;
                found[2] = min(hi, found[1] + TILE);
            }
            hit = who != 0;
            cum += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0 && !hit) found[0] = -1;
    }
    __syncthreads();
    if (found[0] < 0) return 0;
    *e_out = found[0], *r0 = found[1], *r1 = found[2];
    return 1;
}

/* The (+)= of a finished 128x128 fp32 weight-gradient tile staged in shared memory (cs, rows
 * of ld floats) into dw_e[n0.., k0..] ([Nf][K]): 16-byte accesses, eight loads in flight per
 * thread before the stores (read straight from the fragments, each load waited on the
 * previous store: the compiler cannot tell they do not alias). accumulate 0 overwrites. */
template <int THREADS, int LD>
static __device__ __forceinline__ void gt_moe_dw_store_tile(float *dwe, const float *cs, int n0,
                                                            int k0, int Nf, int K, int accumulate) {
    for (int base = 0; base < 128 * 128 / 4; base += THREADS * 8) {
        float4 old[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int q = base + u * THREADS + threadIdx.x, r = q >> 5, c = (q & 31) * 4;
            old[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (accumulate && n0 + r < Nf && k0 + c < K)
                old[u] = *(const float4 *)(dwe + (size_t)(n0 + r) * K + k0 + c);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int q = base + u * THREADS + threadIdx.x, r = q >> 5, c = (q & 31) * 4;
            if (n0 + r < Nf && k0 + c < K) {
                const float *t = cs + r * LD + c;
                *(float4 *)(dwe + (size_t)(n0 + r) * K + k0 + c) =
                    make_float4(old[u].x + t[0], old[u].y + t[1], old[u].z + t[2], old[u].w + t[3]);
            }
        }
    }
}

/* mma (runtime.cuda.moe_gemm=mma, auto off compute capability 9.0; k_moe_mma.cu): mma.sync +
 * ldmatrix, 3-stage cp.async, 128x128 tiles of 4 warps; return 0 without launching unless Ncols,
 * Kdim % 8 == 0 and the tensors are 16-byte aligned. gt_cuda_grouped_mm_mma_init allows their
 * dynamic shared memory. */
cudaError_t gt_cuda_grouped_mm_mma_init(void);
int gt_cuda_grouped_mm_mma(gt_cuda_exec cs, bf16 *out, const bf16 *A, const bf16 *w,
                           const int32_t *offsets, int R, int E, int Ncols, int Kdim, int kmajor);
/* dw[e][Nf, K] (+)= dout[group]^T @ a[group]; accumulate 0 overwrites, with zeros for an
 * expert without rows */
int gt_cuda_grouped_mm_dw_mma(gt_cuda_exec cs, float *dw, const bf16 *dout, const bf16 *a,
                              const int32_t *offsets, int E, int Nf, int K, int accumulate);

/* wgmma (runtime.cuda.moe_gemm=wgmma, auto on sm_90; k_moe_wgmma.cu, sm_90a): the same three
 * products on warpgroup MMA fed by TMA; same arguments and conditions as the mma launchers
 * (plus R, the rows of dout and a, for the weight gradient), 0 without launching otherwise.
 * gt_cuda_grouped_mm_wgmma_init also looks up the driver's tensor-map encoder. */
cudaError_t gt_cuda_grouped_mm_wgmma_init(void);
int gt_cuda_grouped_mm_wgmma(gt_cuda_exec cs, bf16 *out, const bf16 *A, const bf16 *w,
                             const int32_t *offsets, int R, int E, int Ncols, int Kdim, int kmajor);
int gt_cuda_grouped_mm_dw_wgmma(gt_cuda_exec cs, float *dw, const bf16 *dout, const bf16 *a,
                                const int32_t *offsets, int R, int E, int Nf, int K,
                                int accumulate);

/* fp8 (k_moe_fp8.cu): gt_cuda_moe_fp8_init allows the mma.sync fp8 kernels' dynamic shared
 * memory (the same 108 KiB as the bf16 mma kernels) */
extern "C" cudaError_t gt_cuda_moe_fp8_init(void);

#endif
