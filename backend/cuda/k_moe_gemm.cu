/* Tensor-core grouped GEMMs of the MoE experts (WMMA bf16, fp32 accumulate) over DEVICE
 * offsets, for any strides and sizes: the path when the mma kernels of k_moe_mma.cu cannot
 * take a shape (sizes not multiples of 8, unaligned tensors) and GT_CUDA_MOE=tc. The grid is
 * sized for the worst case (ceil(R/64) + E row tiles x column tiles) and each block finds its
 * expert and row tile by scanning the offsets, so nothing is read back to the host and the
 * launch is graph-safe. The weight gradient sums each expert's rows in a fixed order (no
 * atomics). k_moe.cu keeps the fp32 SIMT versions as the reference. */
#include <cuda_pipeline.h>
#include <mma.h>
#include <string.h>

#include "backend/cuda/moe_gemm.cuh"

using namespace nvcuda;

#define MG_TILE 64
#define MG_BK 32
#define MG_THREADS 128
#define MG_LDK (MG_BK + 8)   /* bf16 k-major tiles */
#define MG_LDN (MG_TILE + 8) /* bf16 n-major tiles */
#define MG_LDC (MG_TILE + 4) /* fp32 output staging */

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> mg_acc;

/* Expert and rows [*r0, *r1) of row tile t; 0 when t is past the last tile. */
static __device__ int mg_find_tile(const int32_t *offsets, int E, int t, int *e_out, int *r0,
                                   int *r1) {
    int cum = 0;
    for (int e = 0; e < E; e++) {
        int lo = offsets[e], hi = offsets[e + 1];
        int tiles = hi > lo ? (hi - lo + MG_TILE - 1) / MG_TILE : 0;
        if (t < cum + tiles) {
            *e_out = e;
            *r0 = lo + (t - cum) * MG_TILE;
            *r1 = min(hi, *r0 + MG_TILE);
            return 1;
        }
        cum += tiles;
    }
    return 0;
}

/* out[r, c] = sum_k A[r, k] * W_e(c, k), W_e(c, k) = w[e*w_expert + c*wc + k*wk]. KMAJOR: the
 * weight is contiguous along k (wk == 1, the forward); else along c (the data gradient). */
template <bool KMAJOR>
__global__ void __launch_bounds__(MG_THREADS)
    k_grouped_mm_tc(bf16 *out, const bf16 *A, const bf16 *w, const int32_t *offsets, int E,
                    int Ncols, int Kdim, size_t w_expert, int wc, int wk) {
    GT_PDL_ENTRY();
    __shared__ __align__(128) bf16 As[MG_TILE * MG_LDK];        /* [row][k] */
    __shared__ __align__(128) bf16 Bs[MG_TILE * (MG_TILE + 8)]; /* [n][k] or [k][n] */
    __shared__ __align__(128) float Cs[MG_TILE * MG_LDC];
    int e, r0, r1;
    if (!mg_find_tile(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * MG_TILE;
    int warp = threadIdx.x >> 5, wy = warp >> 1, wx = warp & 1;
    const bf16 *we = w + (size_t)e * w_expert;
    mg_acc acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    const bf16 zero = __float2bfloat16(0.0f);
    for (int k0 = 0; k0 < Kdim; k0 += MG_BK) {
        for (int idx = threadIdx.x; idx < MG_TILE * MG_BK; idx += blockDim.x) {
            int r = idx / MG_BK, kk = idx % MG_BK, row = r0 + r, k = k0 + kk;
            As[r * MG_LDK + kk] = (row < r1 && k < Kdim) ? A[(size_t)row * Kdim + k] : zero;
            if (KMAJOR) {
                int col = c0 + r;
                Bs[r * MG_LDK + kk] =
                    (col < Ncols && k < Kdim) ? we[(size_t)col * wc + (size_t)k * wk] : zero;
            } else {
                int n = idx % MG_TILE, kr = idx / MG_TILE, col = c0 + n, kg = k0 + kr;
                Bs[kr * MG_LDN + n] =
                    (col < Ncols && kg < Kdim) ? we[(size_t)col * wc + (size_t)kg * wk] : zero;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MG_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(a[i], As + (wy * 32 + i * 16) * MG_LDK + kk, MG_LDK);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int n = wx * 32 + j * 16;
                if (KMAJOR) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bm;
                    wmma::load_matrix_sync(bm, Bs + n * MG_LDK + kk, MG_LDK);
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        wmma::mma_sync(acc[i][j], a[i], bm, acc[i][j]);
                } else {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> bm;
                    wmma::load_matrix_sync(bm, Bs + kk * MG_LDN + n, MG_LDN);
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        wmma::mma_sync(acc[i][j], a[i], bm, acc[i][j]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wy * 32 + i * 16) * MG_LDC + wx * 32 + j * 16, acc[i][j],
                                    MG_LDC, wmma::mem_row_major);
    __syncthreads();
    for (int idx = threadIdx.x; idx < MG_TILE * MG_TILE; idx += blockDim.x) {
        int r = idx / MG_TILE, c = idx % MG_TILE, row = r0 + r, col = c0 + c;
        if (row < r1 && col < Ncols) out[(size_t)row * Ncols + col] = tobf(Cs[r * MG_LDC + c]);
    }
}

/* dw[e][n, k] += sum over the group's rows r (in order) of dout[r, n] * a[r, k]. */
__global__ void __launch_bounds__(MG_THREADS)
    k_grouped_mm_dw_tc(float *dw, const bf16 *dout, const bf16 *a, const int32_t *offsets, int Nf,
                       int K) {
    GT_PDL_ENTRY();
    __shared__ __align__(128) bf16 Ds[MG_BK * MG_LDN]; /* [r][n] */
    __shared__ __align__(128) bf16 As[MG_BK * MG_LDN]; /* [r][k] */
    __shared__ __align__(128) float Cs[MG_TILE * MG_LDC];
    int e = blockIdx.z, k0 = blockIdx.x * MG_TILE, n0 = blockIdx.y * MG_TILE;
    int lo = offsets[e], hi = offsets[e + 1];
    if (hi <= lo) return;
    int warp = threadIdx.x >> 5, wy = warp >> 1, wx = warp & 1;
    mg_acc acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    const bf16 zero = __float2bfloat16(0.0f);
    for (int rb = lo; rb < hi; rb += MG_BK) {
        for (int idx = threadIdx.x; idx < MG_BK * MG_TILE; idx += blockDim.x) {
            int rr = idx / MG_TILE, c = idx % MG_TILE, row = rb + rr;
            Ds[rr * MG_LDN + c] =
                (row < hi && n0 + c < Nf) ? dout[(size_t)row * Nf + n0 + c] : zero;
            As[rr * MG_LDN + c] = (row < hi && k0 + c < K) ? a[(size_t)row * K + k0 + c] : zero;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MG_BK; kk += 16) {
            /* A'(n, r) = Ds[r][n]: col-major with ldm MG_LDN; B'(r, k) = As[r][k]: row-major */
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> am[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(am[i], Ds + kk * MG_LDN + wy * 32 + i * 16, MG_LDN);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> bm;
                wmma::load_matrix_sync(bm, As + kk * MG_LDN + wx * 32 + j * 16, MG_LDN);
#pragma unroll
                for (int i = 0; i < 2; i++)
                    wmma::mma_sync(acc[i][j], am[i], bm, acc[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wy * 32 + i * 16) * MG_LDC + wx * 32 + j * 16, acc[i][j],
                                    MG_LDC, wmma::mem_row_major);
    __syncthreads();
    float *dwe = dw + (size_t)e * Nf * K;
    for (int idx = threadIdx.x; idx < MG_TILE * MG_TILE; idx += blockDim.x) {
        int n = idx / MG_TILE, c = idx % MG_TILE;
        if (n0 + n < Nf && k0 + c < K) dwe[(size_t)(n0 + n) * K + k0 + c] += Cs[n * MG_LDC + c];
    }
}

void gt_cuda_grouped_mm_tc(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w,
                           const int32_t *offsets, int R, int E, int Ncols, int Kdim,
                           size_t w_expert, int wc, int wk) {
    dim3 grid((Ncols + MG_TILE - 1) / MG_TILE, (R + MG_TILE - 1) / MG_TILE + E);
    if (wk == 1)
        gt_launch(k_grouped_mm_tc<true>, grid, MG_THREADS, 0, cs, out, A, w, offsets, E, Ncols,
                  Kdim, w_expert, wc, wk);
    else
        gt_launch(k_grouped_mm_tc<false>, grid, MG_THREADS, 0, cs, out, A, w, offsets, E, Ncols,
                  Kdim, w_expert, wc, wk);
}

void gt_cuda_grouped_mm_dw_tc(cudaStream_t cs, float *dw, const bf16 *dout, const bf16 *a,
                              const int32_t *offsets, int E, int Nf, int K) {
    dim3 grid((K + MG_TILE - 1) / MG_TILE, (Nf + MG_TILE - 1) / MG_TILE, E);
    gt_launch(k_grouped_mm_dw_tc, grid, MG_THREADS, 0, cs, dw, dout, a, offsets, Nf, K);
}
