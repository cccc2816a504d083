/* Grouped GEMMs of the MoE experts on Hopper's warpgroup MMA (wgmma, sm_90a; this file alone
 * is compiled for sm_90a, see CMakeLists.txt). 128x128 block tiles, two warpgroups of 64x128
 * (m64n128k16), k steps of 64 through a 3-stage cp.async pipeline, two blocks an SM. Same
 * contracts as the mma kernels of k_moe_mma.cu (device offsets, worst-case grid, each block
 * finds its expert's row tile, fixed summation order, no atomics):
 * - k_grouped_mm_wgmma<false>: the forward, out[r, c] = sum_k A[r, k] W_e[c, k];
 * - k_grouped_mm_wgmma<true>: the data gradient, da[r, c] = sum_n dout[r, n] W_e[n, c];
 * - k_grouped_mm_dw_wgmma: dw[e][n, k] (+)= sum over the expert's rows r of dout[r, n] a[r, k].
 *
 * Shared-memory tiles use the 128-byte swizzle wgmma reads, in 1024-byte atoms of 8 rows of
 * 128 bytes where the 16-byte chunk c of row r sits at chunk c ^ r:
 * - k-contiguous ("K-major") operand, [128 rows][64 k]: row o at o * 128, so 8-row groups are
 *   1024 bytes apart (the descriptor's stride); a k16 slice starts 32 bytes into the rows.
 * - row-contiguous ("MN-major") operand, [64 k][128 rows]: atoms of 8 k x 64 rows; the 8 k
 *   groups of one 64-row half are 1024 bytes apart (stride), the two halves 8192 bytes
 *   (leading offset); a k16 slice starts two atoms (2048 bytes) further. */
#include <stdint.h>

#include "backend/cuda/moe_gemm.cuh"

#define WG_TILE 128
#define WG_BK 64
#define WG_STAGES 3
#define WG_THREADS 256
#define WG_TILE_BYTES (WG_TILE * WG_BK * 2)         /* one operand tile: 16 KiB */
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)          /* A and B */
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + 1024) /* + slack to align to 1024 bytes */
#define WG_LD_C (WG_TILE + 4) /* fp32 staging of a finished dw tile: 128 x 132 x 4 < 96 KiB */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* One operand tile of a k step into the swizzled layout. g points at element (row 0, k 0);
 * ld is the global stride between consecutive stored rows (k-contiguous: between tile rows;
 * row-contiguous: between k rows); rows_left and k_left bound the valid part (multiples of 8
 * along the contiguous dimension); the rest is zero-filled. */
template <bool MN>
static __device__ __forceinline__ void wg_load(unsigned char *s, const bf16 *g, size_t ld,
                                               int rows_left, int k_left, const bf16 *safe) {
    int tid = threadIdx.x;
    if (!MN) {
#pragma unroll
        for (int q = tid; q < WG_TILE * (WG_BK / 8); q += WG_THREADS) {
            int o = q >> 3, kc = q & 7;
            bool ok = o < rows_left && kc * 8 < k_left;
            gt_cp_async16(s + o * 128 + ((kc ^ (o & 7)) << 4),
                          ok ? g + (size_t)o * ld + kc * 8 : safe, ok);
        }
    } else {
#pragma unroll
        for (int q = tid; q < WG_BK * (WG_TILE / 8); q += WG_THREADS) {
            int kr = q >> 4, oc = q & 15, c = oc & 7;
            bool ok = kr < k_left && oc * 8 < rows_left;
            int at = (oc >> 3) * 8192 + (kr >> 3) * 1024 + (kr & 7) * 128 + ((c ^ (kr & 7)) << 4);
            gt_cp_async16(s + at, ok ? g + (size_t)kr * ld + oc * 8 : safe, ok);
        }
    }
}

/* Matrix descriptor of the k16 slice kk of a swizzled tile at p: address >> 4, leading offset
 * (16 bytes, unused, for K-major; 8192 for MN-major), stride 1024, layout 1 (128-byte
 * swizzle). */
template <bool MN> static __device__ __forceinline__ uint64_t wg_desc(const void *p, int kk) {
    uint64_t a = gt_smem_u32((const unsigned char *)p + (MN ? kk * 2048 : kk * 32));
    uint64_t lbo = MN ? 8192 : 16;
    return ((a & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

/* d[64] += A (64 x 16) @ B (16 x 128) for the warpgroup; TA / TB: operand is MN-major. */
template <int TA, int TB>
static __device__ __forceinline__ void wg_mma(float *d, uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}

/* The pipelined main loop over `iters` k steps: d += A_tile @ B_tile (this warpgroup's 64 rows
 * of A). load(it, st) issues the copies of k step `it` into stage st. */
template <bool A_MN, bool B_MN, typename Load>
static __device__ __forceinline__ void wg_mainloop(float *d, unsigned char *sm, int iters,
                                                   Load load) {
#pragma unroll
    for (int st = 0; st < WG_STAGES - 1; st++) {
        if (st < iters) load(st, st);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    int wg = threadIdx.x >> 7;
    for (int it = 0; it < iters; it++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(WG_STAGES - 2));
        /* the copies are generic-proxy writes; wgmma reads through the async proxy */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* stage it is in; stage it - 1 is no longer read (waited below) */
        int nx = it + WG_STAGES - 1;
        if (nx < iters) load(nx, nx % WG_STAGES);
        asm volatile("cp.async.commit_group;\n" ::);
        const unsigned char *st = sm + (it % WG_STAGES) * WG_STAGE_BYTES;
        const unsigned char *as = st + wg * (A_MN ? 8192 : 64 * 128), *bs = st + WG_TILE_BYTES;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++)
            wg_mma<A_MN, B_MN>(d, wg_desc<A_MN>(as, kk), wg_desc<B_MN>(bs, kk));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
}

static __device__ __forceinline__ unsigned char *wg_aligned(unsigned char *raw) {
    return (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
}
#endif

/* out[r, c] over the rows of each expert; B_MN: W_e is [Kdim][Ncols] (the data gradient),
 * else [Ncols][Kdim] (the forward). Rows past the expert and columns past Ncols are loaded as
 * zeros and not stored. */
template <bool B_MN>
__global__ void __launch_bounds__(WG_THREADS)
    k_grouped_mm_wgmma(bf16 *out, const bf16 *A, const bf16 *w, const int32_t *offsets, int E,
                       int Ncols, int Kdim) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    unsigned char *sm = wg_aligned(wg_raw);
    int e, r0, r1;
    if (!gt_moe_find_tile<WG_TILE>(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * WG_TILE;
    const bf16 *we = w + (size_t)e * Ncols * Kdim;
    auto load = [&](int it, int st) {
        int k0 = it * WG_BK;
        unsigned char *as = sm + st * WG_STAGE_BYTES, *bs = as + WG_TILE_BYTES;
        wg_load<false>(as, A + (size_t)r0 * Kdim + k0, (size_t)Kdim, r1 - r0, Kdim - k0, A);
        if (B_MN)
            wg_load<true>(bs, we + (size_t)k0 * Ncols + c0, (size_t)Ncols, Ncols - c0, Kdim - k0,
                          w);
        else
            wg_load<false>(bs, we + (size_t)c0 * Kdim + k0, (size_t)Kdim, Ncols - c0, Kdim - k0, w);
    };
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    wg_mainloop<false, B_MN>(d, sm, (Kdim + WG_BK - 1) / WG_BK, load);
    /* accumulator layout: warp q of the warpgroup holds rows 16q..16q+15; per n8 block j,
     * d[4j..4j+1] is row lane/4, columns 8j + 2(lane%4) + {0,1}; d[4j+2..3] is row lane/4 + 8 */
    int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3, wg = threadIdx.x >> 7;
    int row = r0 + wg * 64 + q * 16 + (lane >> 2);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = row + 8 * h;
        if (r >= r1) continue;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int col = c0 + 8 * j + 2 * (lane & 3);
            if (col < Ncols)
                *(__nv_bfloat162 *)(out + (size_t)r * Ncols + col) =
                    __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
    }
#endif
}

/* dw[e][n, k] (+)= sum over the expert's rows r, in order, of dout[r, n] a[r, k]. Overwriting
 * (accumulate 0) writes the whole tile, zeros for an expert without rows. The tile goes
 * through shared memory so the read-modify-write uses 16-byte accesses. */
__global__ void __launch_bounds__(WG_THREADS)
    k_grouped_mm_dw_wgmma(float *dw, const bf16 *dout, const bf16 *a, const int32_t *offsets,
                          int Nf, int K, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    unsigned char *sm = wg_aligned(wg_raw);
    int e = blockIdx.z, k0 = blockIdx.x * WG_TILE, n0 = blockIdx.y * WG_TILE;
    int lo = offsets[e], hi = max(lo, offsets[e + 1]);
    if (hi == lo && accumulate) return;
    auto load = [&](int it, int st) {
        int rb = lo + it * WG_BK;
        unsigned char *ds = sm + st * WG_STAGE_BYTES, *xs = ds + WG_TILE_BYTES;
        wg_load<true>(ds, dout + (size_t)rb * Nf + n0, (size_t)Nf, Nf - n0, hi - rb, dout);
        wg_load<true>(xs, a + (size_t)rb * K + k0, (size_t)K, K - k0, hi - rb, a);
    };
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    wg_mainloop<true, true>(d, sm, (hi - lo + WG_BK - 1) / WG_BK, load);
    __syncthreads(); /* every warpgroup is done with the pipeline's buffers */
    float *cs = (float *)sm;
    int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3, wg = threadIdx.x >> 7;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int r = wg * 64 + q * 16 + (lane >> 2) + 8 * h, c = 8 * j + 2 * (lane & 3);
            *(float2 *)(cs + r * WG_LD_C + c) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
    __syncthreads();
    gt_moe_dw_store_tile<WG_THREADS, WG_LD_C>(dw + (size_t)e * Nf * K, cs, n0, k0, Nf, K,
                                              accumulate);
#endif
}

cudaError_t gt_cuda_grouped_mm_wgmma_init(void) {
    cudaError_t e = cudaFuncSetAttribute(k_grouped_mm_wgmma<false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_wgmma<true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_dw_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 WG_SMEM);
    return e;
}

int gt_cuda_grouped_mm_wgmma(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w,
                             const int32_t *offsets, int R, int E, int Ncols, int Kdim,
                             int kmajor) {
    if (!gt_moe_gemm_ok(out, A, w, Ncols, Kdim)) return 0;
    dim3 grid((Ncols + WG_TILE - 1) / WG_TILE, (R + WG_TILE - 1) / WG_TILE + E);
    if (kmajor)
        k_grouped_mm_wgmma<false>
            <<<grid, WG_THREADS, WG_SMEM, cs>>>(out, A, w, offsets, E, Ncols, Kdim);
    else
        k_grouped_mm_wgmma<true>
            <<<grid, WG_THREADS, WG_SMEM, cs>>>(out, A, w, offsets, E, Ncols, Kdim);
    return 1;
}

int gt_cuda_grouped_mm_dw_wgmma(cudaStream_t cs, float *dw, const bf16 *dout, const bf16 *a,
                                const int32_t *offsets, int E, int Nf, int K, int accumulate) {
    if (!gt_moe_gemm_ok(dw, dout, a, Nf, K)) return 0;
    dim3 grid((K + WG_TILE - 1) / WG_TILE, (Nf + WG_TILE - 1) / WG_TILE, E);
    k_grouped_mm_dw_wgmma<<<grid, WG_THREADS, WG_SMEM, cs>>>(dw, dout, a, offsets, Nf, K,
                                                             accumulate);
    return 1;
}
