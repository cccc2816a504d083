/* Grouped GEMMs of the MoE experts on Hopper's warpgroup MMA (wgmma, sm_90a; this file alone
 * is compiled for sm_90a, see CMakeLists.txt), fed by the tensor memory accelerator (TMA).
 * 128x128 block tiles; a block is two consumer warpgroups (64x128 each, m64n128k16) and one
 * producer warp that issues the TMA copies of k steps of 64 into a 3-stage ring guarded by
 * mbarriers (full: the copies landed; empty: both warpgroups finished reading); consumers keep
 * one wgmma group in flight. Two blocks an SM. Same contracts as the mma kernels of
 * k_moe_mma.cu (device offsets, worst-case grid, each block finds its expert's row tile, fixed
 * summation order, no atomics):
 * - k_grouped_mm_wgmma<false>: the forward, out[r, c] = sum_k A[r, k] W_e[c, k];
 * - k_grouped_mm_wgmma<true>: the data gradient, da[r, c] = sum_n dout[r, n] W_e[n, c];
 * - k_grouped_mm_dw_wgmma: dw[e][n, k] (+)= sum over the expert's rows r of dout[r, n] a[r, k].
 *
 * Shared-memory tiles: wgmma.cuh. The A operand of a block is [128 rows][64 k] K-major (one
 * TMA box of 64 x 128) or [64 k][128 rows] MN-major (two boxes of 64 x 64, 8192 bytes apart).
 * What the boxes read past the operands is zero (TMA fills out-of-bounds elements with
 * zeros): k past Kdim, rows past R, columns past Ncols. Rows of the next expert inside a tile
 * only reach outputs that are not stored, except in the weight gradient, whose last k step
 * zeroes them in shared memory. */
#include "backend/cuda/moe_gemm.cuh"
#include "backend/cuda/wgmma.cuh"

#define WG_TILE 128
#define WG_BK 64
#define WG_STAGES 3
#define WG_CONSUMERS 256                    /* two warpgroups */
#define WG_THREADS (WG_CONSUMERS + 32)      /* + the producer warp */
#define WG_TILE_BYTES (WG_TILE * WG_BK * 2) /* one operand tile: 16 KiB */
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)  /* A and B */
/* the ring, its 2 x WG_STAGES mbarriers, and slack to align the ring to 1024 bytes */
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + 2 * WG_STAGES * 8 + 1024)
#define WG_LD_C (WG_TILE + 4) /* fp32 staging of a finished dw tile: 128 x 132 x 4 < 96 KiB */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* the two consumer warpgroups only (the producer warp does not take part) */
static __device__ __forceinline__ void consumers_sync(void) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(WG_CONSUMERS) : "memory");
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

/* The ring of one block: the stages, then the full and empty mbarriers. Thread 0 initializes
 * them (full: the producer's one arrival plus the copies' bytes; empty: one arrival per
 * consumer warp); the caller syncs the block before use. */
struct wg_ring {
    unsigned char *sm;
    uint64_t *full, *empty;
};

static __device__ __forceinline__ wg_ring wg_ring_setup(unsigned char *raw) {
    wg_ring r;
    r.sm = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    r.full = (uint64_t *)(r.sm + WG_STAGES * WG_STAGE_BYTES);
    r.empty = r.full + WG_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_STAGES; s++) {
            mb_init(&r.full[s], 1);
            mb_init(&r.empty[s], WG_CONSUMERS / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    return r;
}

/* The producer warp's lane 0: for each k step, wait for its stage to be free, then issue its
 * copies (load(it, stage bytes, full barrier), 32 KiB in all). */
template <typename Load>
static __device__ __forceinline__ void wg_produce(const wg_ring &r, int iters, Load load) {
    if ((threadIdx.x & 31) != 0) return;
    for (int it = 0; it < iters; it++) {
        int s = it % WG_STAGES;
        if (it >= WG_STAGES) mb_wait(&r.empty[s], ((it / WG_STAGES) + 1) & 1);
        mb_expect_tx(&r.full[s], WG_STAGE_BYTES);
        load(it, r.sm + s * WG_STAGE_BYTES, &r.full[s]);
    }
}

/* The consumers' main loop over `iters` k steps: d += A_tile @ B_tile (this warpgroup's 64
 * rows of A), one wgmma group in flight; a stage is handed back once the group that read it
 * completed. fix(it, stage) may rewrite a landed stage before it is read (it must fence and
 * sync the consumers itself). */
template <bool A_MN, bool B_MN, typename Fix>
static __device__ __forceinline__ void wg_consume(float *d, const wg_ring &r, int iters, Fix fix) {
    int wg = threadIdx.x >> 7, lane = threadIdx.x & 31;
    for (int it = 0; it < iters; it++) {
        int s = it % WG_STAGES;
        mb_wait(&r.full[s], (it / WG_STAGES) & 1);
        unsigned char *st = r.sm + s * WG_STAGE_BYTES;
        fix(it, st);
        const unsigned char *as = st + wg * (A_MN ? 8192 : 64 * 128), *bs = st + WG_TILE_BYTES;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++)
            wg_mma<A_MN, B_MN>(d, wg_desc<A_MN>(as, kk), wg_desc<B_MN>(bs, kk));
        wg_commit();
        wg_wait<1>();
        if (it > 0 && lane == 0) mb_arrive(&r.empty[(it - 1) % WG_STAGES]);
    }
    wg_wait<0>();
}
#endif

/* out[r, c] over the rows of each expert; B_MN: W_e is [Kdim][Ncols] (the data gradient; tW
 * maps w as [E][Kdim][Ncols], boxes of 64 x 64 x 1), else [Ncols][Kdim] (the forward; tW maps
 * w as [E][Ncols][Kdim], boxes of 64 x 128 x 1). tA maps A as [R][Kdim], boxes of 64 x 128. */
template <bool B_MN>
__global__ void __launch_bounds__(WG_THREADS, 2)
    k_grouped_mm_wgmma(bf16 *out, const __grid_constant__ CUtensorMap tA,
                       const __grid_constant__ CUtensorMap tW, const int32_t *offsets, int E,
                       int Ncols, int Kdim) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    int e, r0, r1;
    if (!gt_moe_find_tile<WG_TILE>(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    wg_ring ring = wg_ring_setup(wg_raw);
    __syncthreads();
    int c0 = blockIdx.x * WG_TILE, iters = (Kdim + WG_BK - 1) / WG_BK;
    if (threadIdx.x >= WG_CONSUMERS) {
        wg_produce(ring, iters, [&](int it, unsigned char *st, uint64_t *bar) {
            int k0 = it * WG_BK;
            tma_load(st, &tA, bar, k0, r0, 0);
            if (B_MN) {
                tma_load(st + WG_TILE_BYTES, &tW, bar, c0, k0, e);
                tma_load(st + WG_TILE_BYTES + 8192, &tW, bar, c0 + 64, k0, e);
            } else {
                tma_load(st + WG_TILE_BYTES, &tW, bar, k0, c0, e);
            }
        });
        return;
    }
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    wg_consume<false, B_MN>(d, ring, iters, [](int, unsigned char *) {});
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

/* dw[e][n, k] (+)= sum over the expert's rows r, in order, of dout[r, n] a[r, k]; tD maps dout
 * as [R][Nf] and tX maps a as [R][K], boxes of 64 x 64. Overwriting (accumulate 0) writes the
 * whole tile, zeros for an expert without rows. The tile goes through shared memory so the
 * read-modify-write uses 16-byte accesses. */
__global__ void __launch_bounds__(WG_THREADS, 2)
    k_grouped_mm_dw_wgmma(float *dw, const __grid_constant__ CUtensorMap tD,
                          const __grid_constant__ CUtensorMap tX, const int32_t *offsets, int Nf,
                          int K, int accumulate) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    int e = blockIdx.z, k0 = blockIdx.x * WG_TILE, n0 = blockIdx.y * WG_TILE;
    int lo = offsets[e], hi = max(lo, offsets[e + 1]);
    if (hi == lo && accumulate) return;
    wg_ring ring = wg_ring_setup(wg_raw);
    __syncthreads();
    int iters = (hi - lo + WG_BK - 1) / WG_BK;
    if (threadIdx.x >= WG_CONSUMERS) {
        wg_produce(ring, iters, [&](int it, unsigned char *st, uint64_t *bar) {
            int rb = lo + it * WG_BK;
            tma_load(st, &tD, bar, n0, rb, 0);
            tma_load(st + 8192, &tD, bar, n0 + 64, rb, 0);
            tma_load(st + WG_TILE_BYTES, &tX, bar, k0, rb, 0);
            tma_load(st + WG_TILE_BYTES + 8192, &tX, bar, k0 + 64, rb, 0);
        });
        return;
    }
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    /* the last k step's rows past the expert belong to the next one: zero them (whole 128-byte
     * rows of each of the four 64 x 64 boxes) before they are read */
    wg_consume<true, true>(d, ring, iters, [&](int it, unsigned char *st) {
        int valid = hi - (lo + it * WG_BK);
        if (valid >= WG_BK) return;
        for (int q = threadIdx.x; q < 4 * (WG_BK - valid) * 8; q += WG_CONSUMERS) {
            int box = q / ((WG_BK - valid) * 8), rem = q % ((WG_BK - valid) * 8);
            *(uint4 *)(st + box * 8192 + (valid + rem / 8) * 128 + (rem % 8) * 16) =
                make_uint4(0, 0, 0, 0);
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        consumers_sync();
    });
    consumers_sync(); /* both warpgroups are done with the ring */
    float *cs = (float *)ring.sm;
    int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3, wg = threadIdx.x >> 7;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int r = wg * 64 + q * 16 + (lane >> 2) + 8 * h, c = 8 * j + 2 * (lane & 3);
            *(float2 *)(cs + r * WG_LD_C + c) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
    consumers_sync();
    gt_moe_dw_store_tile<WG_CONSUMERS, WG_LD_C>(dw + (size_t)e * Nf * K, cs, n0, k0, Nf, K,
                                                accumulate);
#endif
}

cudaError_t gt_cuda_grouped_mm_wgmma_init(void) {
    cudaError_t e = gt_wg_maps_init();
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_wgmma<false>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_wgmma<true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_grouped_mm_dw_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 WG_SMEM);
    return e;
}

int gt_cuda_grouped_mm_wgmma(gt_cuda_exec cs, bf16 *out, const bf16 *A, const bf16 *w,
                             const int32_t *offsets, int R, int E, int Ncols, int Kdim,
                             int kmajor) {
    if (!gt_moe_gemm_ok(out, A, w, Ncols, Kdim)) return 0;
    CUtensorMap tA, tW;
    if (!gt_wg_map(&tA, A, Kdim, R, 1, WG_BK, WG_TILE)) return 0;
    if (kmajor ? !gt_wg_map(&tW, w, Kdim, Ncols, E, WG_BK, WG_TILE)
               : !gt_wg_map(&tW, w, Ncols, Kdim, E, 64, WG_BK))
        return 0;
    dim3 grid((Ncols + WG_TILE - 1) / WG_TILE, (R + WG_TILE - 1) / WG_TILE + E);
    if (kmajor)
        gt_launch(k_grouped_mm_wgmma<false>, grid, WG_THREADS, WG_SMEM, cs, out, tA, tW, offsets, E,
                  Ncols, Kdim);
    else
        gt_launch(k_grouped_mm_wgmma<true>, grid, WG_THREADS, WG_SMEM, cs, out, tA, tW, offsets, E,
                  Ncols, Kdim);
    return 1;
}

int gt_cuda_grouped_mm_dw_wgmma(gt_cuda_exec cs, float *dw, const bf16 *dout, const bf16 *a,
                                const int32_t *offsets, int R, int E, int Nf, int K,
                                int accumulate) {
    if (!gt_moe_gemm_ok(dw, dout, a, Nf, K)) return 0;
    CUtensorMap tD, tX;
    if (!gt_wg_map(&tD, dout, Nf, R, 1, 64, WG_BK) || !gt_wg_map(&tX, a, K, R, 1, 64, WG_BK))
        return 0;
    dim3 grid((K + WG_TILE - 1) / WG_TILE, (Nf + WG_TILE - 1) / WG_TILE, E);
    gt_launch(k_grouped_mm_dw_wgmma, grid, WG_THREADS, WG_SMEM, cs, dw, tD, tX, offsets, Nf, K,
              accumulate);
    return 1;
}
