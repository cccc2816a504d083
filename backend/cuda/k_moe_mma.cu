/* Grouped GEMMs of the MoE experts on mma.sync m16n8k16 (bf16 in, fp32 accumulate) with
 * ldmatrix fragment loads and a 3-stage cp.async pipeline: 128x128 block tiles, 4 warps of
 * 64x64, k steps of 64 (22.2 ms/step on moe against 23.0 with 4 stages of 32; 256-row tiles
 * with 8 warps measured slower, 25.4; 8 warps of 64x32 no faster, 20.89 against 20.82). The
 * default where the sm_90a warpgroup-MMA kernels of k_moe_wgmma.cu cannot run. Same contract as the
 * WMMA kernels of k_moe_gemm.cu (device offsets, worst-case grid, each block finds its expert's row
 * tile, fixed summation order, no atomics), about three times their speed on the moe workload's
 * shapes.
 *
 * Operands sit in shared memory either as [outer][64 k] rows ("k-contiguous", padded to 72
 * elements) or as [64 k][128 outer] rows ("outer-contiguous", padded to 136); both paddings
 * make the eight 16-byte rows of every ldmatrix fall in distinct banks. ldmatrix.trans turns
 * the outer-contiguous tiles into the same fragments. */
#include <stdint.h>

#include "backend/cuda/moe_gemm.cuh"

#define MM_TILE 128
#define MM_BK 64
#define MM_STAGES 3
#define MM_THREADS 128
#define MM_LD_K (MM_BK + 8)    /* [outer][k] tiles */
#define MM_LD_O (MM_TILE + 8)  /* [k][outer] tiles */
#define MM_OPERAND_BYTES 18432 /* max(128*72, 64*136) bf16 */
#define MM_SMEM (MM_STAGES * 2 * MM_OPERAND_BYTES)
#define MM_LD_C (MM_TILE + 4) /* fp32 staging of a finished tile: 128 x 132 x 4 < MM_SMEM */

/* One operand tile of a k step into shared memory. g points at element (outer 0, k 0) of the
 * tile; ld is the global stride between consecutive rows of the stored layout; outer_left and
 * k_left bound the valid part (multiples of 8 along the contiguous dimension). */
template <bool OUTER_CONTIG>
static __device__ __forceinline__ void mm_load(bf16 *s, const bf16 *g, size_t ld, int outer_left,
                                               int k_left, const bf16 *safe) {
    int tid = threadIdx.x;
    if (!OUTER_CONTIG) { /* [outer][k]: 128 rows x MM_BK / 8 chunks */
#pragma unroll
        for (int q = tid; q < MM_TILE * (MM_BK / 8); q += MM_THREADS) {
            int o = q / (MM_BK / 8), kc = (q % (MM_BK / 8)) * 8;
            bool ok = o < outer_left && kc < k_left;
            gt_cp_async16(s + o * MM_LD_K + kc, ok ? g + (size_t)o * ld + kc : safe, ok);
        }
    } else { /* [k][outer]: MM_BK rows x 16 chunks */
#pragma unroll
        for (int q = tid; q < MM_BK * (MM_TILE / 8); q += MM_THREADS) {
            int kr = q >> 4, oc = (q & 15) * 8;
            bool ok = kr < k_left && oc < outer_left;
            gt_cp_async16(s + kr * MM_LD_O + oc, ok ? g + (size_t)kr * ld + oc : safe, ok);
        }
    }
}

/* A fragments (16 rows m x 16 k) of the warp's four m tiles at k offset ks. */
template <bool OUTER_CONTIG>
static __device__ __forceinline__ void mm_frag_a(uint32_t (*a)[4], const bf16 *s, int m0, int ks) {
    int lane = threadIdx.x & 31, mi = lane >> 3, j = lane & 7;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int m = m0 + i * 16;
        if (!OUTER_CONTIG)
            gt_ldsm_x4(a[i], s + (m + (lane & 15)) * MM_LD_K + ks + (lane >> 4) * 8);
        else
            gt_ldsm_x4_t(a[i], s + (ks + j + (mi >> 1) * 8) * MM_LD_O + m + (mi & 1) * 8);
    }
}

/* B fragments (16 k x 8 n) of the warp's eight n tiles at k offset ks. */
template <bool OUTER_CONTIG>
static __device__ __forceinline__ void mm_frag_b(uint32_t (*b)[2], const bf16 *s, int n0, int ks) {
    int lane = threadIdx.x & 31, mi = lane >> 3, j = lane & 7;
#pragma unroll
    for (int p = 0; p < 4; p++) {
        int n = n0 + p * 16;
        uint32_t r[4];
        if (!OUTER_CONTIG)
            gt_ldsm_x4(r, s + (n + j + (mi >> 1) * 8) * MM_LD_K + ks + (mi & 1) * 8);
        else
            gt_ldsm_x4_t(r, s + (ks + j + (mi & 1) * 8) * MM_LD_O + n + (mi >> 1) * 8);
        b[2 * p][0] = r[0], b[2 * p][1] = r[1], b[2 * p + 1][0] = r[2], b[2 * p + 1][1] = r[3];
    }
}

/* The pipelined main loop over `iters` k steps: acc[4][8][4] += A_tile @ B_tile. load(it, st)
 * issues the copies of k step `it` into stage st. */
template <bool A_OC, bool B_OC, typename Load>
static __device__ __forceinline__ void mm_mainloop(float (*acc)[8][4], unsigned char *sm, int iters,
                                                   Load load) {
    int warp = threadIdx.x >> 5, wm = (warp >> 1) * 64, wn = (warp & 1) * 64;
#pragma unroll
    for (int st = 0; st < MM_STAGES - 1; st++) {
        if (st < iters) load(st, st);
        gt_cp_commit();
    }
    for (int it = 0; it < iters; it++) {
        gt_cp_wait<MM_STAGES - 2>();
        __syncthreads(); /* stage it is in; everyone is done with stage it - 1 */
        int nx = it + MM_STAGES - 1;
        if (nx < iters) load(nx, nx % MM_STAGES);
        gt_cp_commit();
        const bf16 *as = (const bf16 *)(sm + (it % MM_STAGES) * 2 * MM_OPERAND_BYTES);
        const bf16 *bs = as + MM_OPERAND_BYTES / 2;
#pragma unroll
        for (int ks = 0; ks < MM_BK; ks += 16) {
            uint32_t a[4][4], b[8][2];
            mm_frag_a<A_OC>(a, as, wm, ks);
            mm_frag_b<B_OC>(b, bs, wn, ks);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    gt_mma_16816(acc[i][j], a[i], b[j]);
        }
    }
    gt_cp_wait<0>();
}

/* out[r, c] = sum_k A[r, k] W_e(c, k) for the rows of each expert. KMAJOR: W_e is [Ncols][Kdim]
 * (the forward); else [Kdim][Ncols] (the data gradient). */
template <bool KMAJOR>
__global__ void __launch_bounds__(MM_THREADS)
    k_grouped_mm_mma(bf16 *out, const bf16 *A, const bf16 *w, const int32_t *offsets, int E,
                     int Ncols, int Kdim) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char sm[];
    int e, r0, r1;
    if (!gt_moe_find_tile<MM_TILE>(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * MM_TILE;
    const bf16 *we = w + (size_t)e * Ncols * Kdim;
    float acc[4][8][4] = {};
    auto load = [&](int it, int st) {
        int k0 = it * MM_BK;
        bf16 *as = (bf16 *)(sm + st * 2 * MM_OPERAND_BYTES), *bs = as + MM_OPERAND_BYTES / 2;
        mm_load<false>(as, A + (size_t)r0 * Kdim + k0, (size_t)Kdim, r1 - r0, Kdim - k0, A);
        if (KMAJOR)
            mm_load<false>(bs, we + (size_t)c0 * Kdim + k0, (size_t)Kdim, Ncols - c0, Kdim - k0, w);
        else
            mm_load<true>(bs, we + (size_t)k0 * Ncols + c0, (size_t)Ncols, Ncols - c0, Kdim - k0,
                          w);
    };
    mm_mainloop<false, !KMAJOR>(acc, sm, (Kdim + MM_BK - 1) / MM_BK, load);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wm = (warp >> 1) * 64, wn = (warp & 1) * 64;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = r0 + wm + i * 16 + (lane >> 2) + h * 8;
            if (row >= r1) continue;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int col = c0 + wn + j * 8 + (lane & 3) * 2;
                if (col < Ncols)
                    *(__nv_bfloat162 *)(out + (size_t)row * Ncols + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

/* dw[e][n, k] (+)= sum over the expert's rows r, in order, of dout[r, n] a[r, k]. Overwriting
 * (accumulate 0) writes the whole tile, zeros for an expert without rows. */
__global__ void __launch_bounds__(MM_THREADS)
    k_grouped_mm_dw_mma(float *dw, const bf16 *dout, const bf16 *a, const int32_t *offsets, int Nf,
                        int K, int accumulate) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char sm[];
    int e = blockIdx.z, k0 = blockIdx.x * MM_TILE, n0 = blockIdx.y * MM_TILE;
    int lo = offsets[e], hi = max(lo, offsets[e + 1]);
    if (hi == lo && accumulate) return;
    float acc[4][8][4] = {};
    auto load = [&](int it, int st) {
        int rb = lo + it * MM_BK;
        bf16 *ds = (bf16 *)(sm + st * 2 * MM_OPERAND_BYTES), *xs = ds + MM_OPERAND_BYTES / 2;
        mm_load<true>(ds, dout + (size_t)rb * Nf + n0, (size_t)Nf, Nf - n0, hi - rb, dout);
        mm_load<true>(xs, a + (size_t)rb * K + k0, (size_t)K, K - k0, hi - rb, a);
    };
    mm_mainloop<true, true>(acc, sm, (hi - lo + MM_BK - 1) / MM_BK, load);
    /* The += goes through shared memory: the tile is staged there, then read-modify-written
     * with 16-byte accesses, eight loads in flight per thread. Straight from the fragments,
     * each load waited for the previous store (the compiler cannot tell they do not alias),
     * 64 serial memory round trips per thread, which made this kernel twice the forward's
     * time. */
    __syncthreads(); /* every warp is done with the pipeline's buffers */
    float *cs = (float *)sm;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wm = (warp >> 1) * 64, wn = (warp & 1) * 64;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int r = wm + i * 16 + (lane >> 2) + h * 8, c = wn + j * 8 + (lane & 3) * 2;
                *(float2 *)(cs + r * MM_LD_C + c) =
                    make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
    __syncthreads();
    gt_moe_dw_store_tile<MM_THREADS, MM_LD_C>(dw + (size_t)e * Nf * K, cs, n0, k0, Nf, K,
                                              accumulate);
}

cudaError_t gt_cuda_grouped_mm_mma_init(void) {
    cudaError_t e = cudaFuncSetAttribute(k_grouped_mm_mma<true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, MM_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_mma<false>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, MM_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_dw_mma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 MM_SMEM);
    return e;
}

int gt_cuda_grouped_mm_mma(gt_cuda_exec cs, bf16 *out, const bf16 *A, const bf16 *w,
                           const int32_t *offsets, int R, int E, int Ncols, int Kdim, int kmajor) {
    if (!gt_moe_gemm_ok(out, A, w, Ncols, Kdim)) return 0;
    dim3 grid((Ncols + MM_TILE - 1) / MM_TILE, (R + MM_TILE - 1) / MM_TILE + E);
    if (kmajor)
        gt_launch(k_grouped_mm_mma<true>, grid, MM_THREADS, MM_SMEM, cs, out, A, w, offsets, E,
                  Ncols, Kdim);
    else
        gt_launch(k_grouped_mm_mma<false>, grid, MM_THREADS, MM_SMEM, cs, out, A, w, offsets, E,
                  Ncols, Kdim);
    return 1;
}

int gt_cuda_grouped_mm_dw_mma(gt_cuda_exec cs, float *dw, const bf16 *dout, const bf16 *a,
                              const int32_t *offsets, int E, int Nf, int K, int accumulate) {
    if (!gt_moe_gemm_ok(dw, dout, a, Nf, K)) return 0;
    dim3 grid((K + MM_TILE - 1) / MM_TILE, (Nf + MM_TILE - 1) / MM_TILE, E);
    gt_launch(k_grouped_mm_dw_mma, grid, MM_THREADS, MM_SMEM, cs, dw, dout, a, offsets, Nf, K,
              accumulate);
    return 1;
}
