/* Tensor-core grouped GEMMs of the MoE experts (WMMA bf16, fp32 accumulate) over DEVICE
 * offsets: the grid is sized for the worst case (ceil(R/64) + E row tiles x column tiles) and
 * each block finds its expert and row tile by scanning the offsets, so nothing is read back
 * to the host and the launch is graph-safe. The weight gradient sums each expert's rows in a
 * fixed order (no atomics). k_moe.cu keeps the fp32 SIMT versions as the reference. The v2
 * kernels at the end (128x128 tiles, cp.async) are opt-in (GT_CUDA_MOE=tc2) until the GPU
 * tests have run them; scripts/gpu-check-ops.sh does. */
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
        k_grouped_mm_tc<true>
            <<<grid, MG_THREADS, 0, cs>>>(out, A, w, offsets, E, Ncols, Kdim, w_expert, wc, wk);
    else
        k_grouped_mm_tc<false>
            <<<grid, MG_THREADS, 0, cs>>>(out, A, w, offsets, E, Ncols, Kdim, w_expert, wc, wk);
}

void gt_cuda_grouped_mm_dw_tc(cudaStream_t cs, float *dw, const bf16 *dout, const bf16 *a,
                              const int32_t *offsets, int E, int Nf, int K) {
    dim3 grid((K + MG_TILE - 1) / MG_TILE, (Nf + MG_TILE - 1) / MG_TILE, E);
    k_grouped_mm_dw_tc<<<grid, MG_THREADS, 0, cs>>>(dw, dout, a, offsets, Nf, K);
}

/* ---- v2 (opt-in, GT_CUDA_MOE=tc2): 128x128 tiles, 8 warps, cp.async double buffering and
 * 16-byte loads; needs Kdim, Ncols % 8 == 0 and 16-byte aligned tensors ---- */

#define M2_TILE 128
#define M2_BK 32
#define M2_THREADS 256
#define M2_LDK (M2_BK + 8)   /* [row][k] tiles */
#define M2_LDN (M2_TILE + 8) /* [k][col] tiles */
#define M2_STAGE_BYTES 10240 /* one buffer of either layout */

static __device__ int m2_find_tile(const int32_t *offsets, int E, int t, int *e_out, int *r0,
                                   int *r1) {
    int cum = 0;
    for (int e = 0; e < E; e++) {
        int lo = offsets[e], hi = offsets[e + 1];
        int tiles = hi > lo ? (hi - lo + M2_TILE - 1) / M2_TILE : 0;
        if (t < cum + tiles) {
            *e_out = e;
            *r0 = lo + (t - cum) * M2_TILE;
            *r1 = min(hi, *r0 + M2_TILE);
            return 1;
        }
        cum += tiles;
    }
    return 0;
}

/* 16 bytes from src into shared dst asynchronously, or zeros when !ok. */
static __device__ __forceinline__ void m2_copy16(bf16 *dst, const bf16 *src, bool ok) {
    if (ok)
        __pipeline_memcpy_async(dst, src, 16);
    else
        *(uint4 *)dst = make_uint4(0u, 0u, 0u, 0u);
}

/* Writes a warp's 16x16 accumulator through its fp32 staging tile: out (bf16) = acc, or
 * outf (fp32) += acc; rows < rows_left and cols < cols_left only (multiples of 8 columns). */
static __device__ __forceinline__ void m2_store(float *stage, const mg_acc &acc, bf16 *out,
                                                float *outf, size_t ld, int rows_left,
                                                int cols_left) {
    int lane = threadIdx.x & 31, r = lane >> 1, c = (lane & 1) * 8;
    wmma::store_matrix_sync(stage, acc, 16, wmma::mem_row_major);
    __syncwarp();
    if (r < rows_left && c < cols_left) {
        const float *s = stage + r * 16 + c;
        if (out) {
            bf16 h[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                h[k] = __float2bfloat16(s[k]);
            uint4 u;
            memcpy(&u, h, 16);
            *(uint4 *)(out + (size_t)r * ld + c) = u;
        } else {
            float4 *d = (float4 *)(outf + (size_t)r * ld + c);
            float4 a = d[0], b = d[1];
            d[0] = make_float4(a.x + s[0], a.y + s[1], a.z + s[2], a.w + s[3]);
            d[1] = make_float4(b.x + s[4], b.y + s[5], b.z + s[6], b.w + s[7]);
        }
    }
    __syncwarp();
}

template <bool KMAJOR>
__global__ void __launch_bounds__(M2_THREADS)
    k_grouped_mm_v2(bf16 *out, const bf16 *A, const bf16 *w, const int32_t *offsets, int E,
                    int Ncols, int Kdim, size_t w_expert) {
    __shared__ __align__(128) unsigned char sm[4 * M2_STAGE_BYTES];
    int e, r0, r1;
    if (!m2_find_tile(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * M2_TILE, tid = threadIdx.x;
    int warp = tid >> 5, wy = warp >> 2, wx = warp & 3;
    const bf16 *we = w + (size_t)e * w_expert;
    mg_acc acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    int iters = (Kdim + M2_BK - 1) / M2_BK;
    auto As = [&](int st) { return (bf16 *)(sm + st * M2_STAGE_BYTES); };
    auto Bs = [&](int st) { return (bf16 *)(sm + (2 + st) * M2_STAGE_BYTES); };
    auto issue = [&](int it, int st) {
        int k0 = it * M2_BK;
        bf16 *as = As(st), *bs = Bs(st);
        for (int q = tid; q < M2_TILE * (M2_BK / 8); q += M2_THREADS) {
            int r = q / (M2_BK / 8), kc = (q % (M2_BK / 8)) * 8, row = r0 + r, k = k0 + kc;
            m2_copy16(as + r * M2_LDK + kc, A + (size_t)row * Kdim + k, row < r1 && k < Kdim);
            if (KMAJOR) { /* weight row c contiguous along k: [col][k] */
                int col = c0 + r;
                m2_copy16(bs + r * M2_LDK + kc, we + (size_t)col * Kdim + k,
                          col < Ncols && k < Kdim);
            } else { /* weight contiguous along the output column: [k][col] */
                int kr = q / (M2_TILE / 8), cc = (q % (M2_TILE / 8)) * 8;
                int kg = k0 + kr, col = c0 + cc;
                m2_copy16(bs + kr * M2_LDN + cc, we + (size_t)kg * Ncols + col,
                          col < Ncols && kg < Kdim);
            }
        }
        __pipeline_commit();
    };
    issue(0, 0);
    for (int it = 0; it < iters; it++) {
        int st = it & 1;
        if (it + 1 < iters) {
            issue(it + 1, st ^ 1);
            __pipeline_wait_prior(1);
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();
        const bf16 *as = As(st), *bs = Bs(st);
#pragma unroll
        for (int kk = 0; kk < M2_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                wmma::load_matrix_sync(a[i], as + (wy * 64 + i * 16) * M2_LDK + kk, M2_LDK);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int n = wx * 32 + j * 16;
                if (KMAJOR) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bm;
                    wmma::load_matrix_sync(bm, bs + n * M2_LDK + kk, M2_LDK);
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        wmma::mma_sync(acc[i][j], a[i], bm, acc[i][j]);
                } else {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> bm;
                    wmma::load_matrix_sync(bm, bs + kk * M2_LDN + n, M2_LDN);
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        wmma::mma_sync(acc[i][j], a[i], bm, acc[i][j]);
                }
            }
        }
        __syncthreads();
    }
    float *stage = (float *)sm + warp * 256; /* the loop is done with the buffers */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int row = r0 + wy * 64 + i * 16, col = c0 + wx * 32 + j * 16;
            m2_store(stage, acc[i][j], out + (size_t)row * Ncols + col, NULL, (size_t)Ncols,
                     r1 - row, Ncols - col);
        }
}

__global__ void __launch_bounds__(M2_THREADS)
    k_grouped_mm_dw_v2(float *dw, const bf16 *dout, const bf16 *a, const int32_t *offsets, int Nf,
                       int K) {
    __shared__ __align__(128) unsigned char sm[4 * M2_STAGE_BYTES];
    int e = blockIdx.z, k0 = blockIdx.x * M2_TILE, n0 = blockIdx.y * M2_TILE;
    int lo = offsets[e], hi = offsets[e + 1];
    if (hi <= lo) return;
    int tid = threadIdx.x, warp = tid >> 5, wy = warp >> 2, wx = warp & 3;
    mg_acc acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    int iters = (hi - lo + M2_BK - 1) / M2_BK;
    auto Ds = [&](int st) { return (bf16 *)(sm + st * M2_STAGE_BYTES); };
    auto Xs = [&](int st) { return (bf16 *)(sm + (2 + st) * M2_STAGE_BYTES); };
    auto issue = [&](int it, int st) {
        int rb = lo + it * M2_BK;
        bf16 *ds = Ds(st), *xs = Xs(st);
        for (int q = tid; q < M2_BK * (M2_TILE / 8); q += M2_THREADS) {
            int rr = q / (M2_TILE / 8), cc = (q % (M2_TILE / 8)) * 8, row = rb + rr;
            m2_copy16(ds + rr * M2_LDN + cc, dout + (size_t)row * Nf + n0 + cc,
                      row < hi && n0 + cc < Nf);
            m2_copy16(xs + rr * M2_LDN + cc, a + (size_t)row * K + k0 + cc,
                      row < hi && k0 + cc < K);
        }
        __pipeline_commit();
    };
    issue(0, 0);
    for (int it = 0; it < iters; it++) {
        int st = it & 1;
        if (it + 1 < iters) {
            issue(it + 1, st ^ 1);
            __pipeline_wait_prior(1);
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();
        const bf16 *ds = Ds(st), *xs = Xs(st);
#pragma unroll
        for (int kk = 0; kk < M2_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> am[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                wmma::load_matrix_sync(am[i], ds + kk * M2_LDN + wy * 64 + i * 16, M2_LDN);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> bm;
                wmma::load_matrix_sync(bm, xs + kk * M2_LDN + wx * 32 + j * 16, M2_LDN);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    wmma::mma_sync(acc[i][j], am[i], bm, acc[i][j]);
            }
        }
        __syncthreads();
    }
    float *stage = (float *)sm + warp * 256;
    float *dwe = dw + (size_t)e * Nf * K;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int n = n0 + wy * 64 + i * 16, k = k0 + wx * 32 + j * 16;
            m2_store(stage, acc[i][j], NULL, dwe + (size_t)n * K + k, (size_t)K, Nf - n, K - k);
        }
}

static int m2_ok(const void *x, const void *y, const void *z, int a, int b) {
    return (((uintptr_t)x | (uintptr_t)y | (uintptr_t)z) & 15u) == 0 && a % 8 == 0 && b % 8 == 0;
}

int gt_cuda_grouped_mm_v2(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w,
                          const int32_t *offsets, int R, int E, int Ncols, int Kdim, int kmajor) {
    if (!m2_ok(out, A, w, Ncols, Kdim)) return 0;
    dim3 grid((Ncols + M2_TILE - 1) / M2_TILE, (R + M2_TILE - 1) / M2_TILE + E);
    size_t w_expert = (size_t)Ncols * Kdim;
    if (kmajor)
        k_grouped_mm_v2<true>
            <<<grid, M2_THREADS, 0, cs>>>(out, A, w, offsets, E, Ncols, Kdim, w_expert);
    else
        k_grouped_mm_v2<false>
            <<<grid, M2_THREADS, 0, cs>>>(out, A, w, offsets, E, Ncols, Kdim, w_expert);
    return 1;
}

int gt_cuda_grouped_mm_dw_v2(cudaStream_t cs, float *dw, const bf16 *dout, const bf16 *a,
                             const int32_t *offsets, int E, int Nf, int K) {
    if (!m2_ok(dw, dout, a, Nf, K)) return 0;
    dim3 grid((K + M2_TILE - 1) / M2_TILE, (Nf + M2_TILE - 1) / M2_TILE, E);
    k_grouped_mm_dw_v2<<<grid, M2_THREADS, 0, cs>>>(dw, dout, a, offsets, Nf, K);
    return 1;
}
