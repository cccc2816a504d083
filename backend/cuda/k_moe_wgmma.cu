/* Grouped forward GEMM of the MoE experts on Hopper's warpgroup MMA (wgmma, sm_90a; this file
 * alone is compiled for sm_90a, see CMakeLists.txt): out[r, c] = sum_k A[r, k] W_e(c, k) for the
 * rows of each expert, both operands k-contiguous. 128x128 block tiles, two warpgroups of
 * 64x128 (m64n128k16), k steps of 64 through a 3-stage cp.async pipeline, two blocks an SM.
 * Same contract as k_grouped_mm_mma<true> (device offsets, worst-case grid, each block finds
 * its expert's row tile, fixed summation order, no atomics).
 *
 * Shared-memory tiles use the 128-byte swizzle wgmma reads: row r of a [rows][64 k] tile is
 * 128 bytes at r * 128, and its 16-byte chunk c sits at chunk c ^ (r % 8); eight rows make a
 * 1024-byte group (the descriptor's stride). A k16 slice starts 32 bytes further in the row;
 * the hardware applies the same XOR to the address it computes. */
#include <stdint.h>

#include "backend/cuda/moe_gemm.cuh"

#define WG_TILE 128
#define WG_BK 64
#define WG_STAGES 3
#define WG_THREADS 256
#define WG_TILE_BYTES (WG_TILE * WG_BK * 2)         /* one operand tile: 16 KiB */
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)          /* A and B */
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + 1024) /* + slack to align to 1024 bytes */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ uint32_t wg_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void wg_copy16(void *dst, const bf16 *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(wg_smem_u32(dst)),
                 "l"(src), "r"(ok ? 16 : 0));
}

/* Matrix descriptor of a 128-byte-swizzled, k-contiguous tile starting at p: address >> 4,
 * leading offset 16 bytes (unused with this swizzle), stride 1024 bytes between 8-row groups,
 * layout type 1 (128-byte swizzle). */
static __device__ __forceinline__ uint64_t wg_desc(const void *p) {
    uint64_t a = wg_smem_u32(p);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* d[64] += A (64 x 16, from descriptor da) @ B (16 x 128, descriptor db) for the warpgroup. */
static __device__ __forceinline__ void wg_mma_64x128x16(float *d, uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
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
        : "l"(da), "l"(db), "r"(1));
}
#endif

/* One 128x128 output tile of one expert; rows past the expert and columns past Ncols are
 * loaded as zeros and not stored. Requires Ncols % 8 == 0, Kdim % 8 == 0 and 16-byte aligned
 * tensors (gt_cuda_grouped_mm_wgmma checks). */
__global__ void __launch_bounds__(WG_THREADS)
    k_grouped_mm_wgmma(bf16 *out, const bf16 *A, const bf16 *w, const int32_t *offsets, int E,
                       int Ncols, int Kdim) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char wg_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)wg_raw + 1023) & ~(uintptr_t)1023);
    int e, r0, r1;
    if (!gt_moe_find_tile<WG_TILE>(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * WG_TILE, tid = threadIdx.x;
    const bf16 *we = w + (size_t)e * Ncols * Kdim;
    int iters = (Kdim + WG_BK - 1) / WG_BK;
    auto load = [&](int it, int st) {
        int k0 = it * WG_BK;
        unsigned char *as = sm + st * WG_STAGE_BYTES, *bs = as + WG_TILE_BYTES;
#pragma unroll
        for (int q = tid; q < WG_TILE * (WG_BK / 8); q += WG_THREADS) {
            int row = q >> 3, kc = q & 7, at = row * 128 + ((kc ^ (row & 7)) << 4);
            int k = k0 + kc * 8;
            bool oka = row < r1 - r0 && k < Kdim, okb = c0 + row < Ncols && k < Kdim;
            wg_copy16(as + at, oka ? A + (size_t)(r0 + row) * Kdim + k : A, oka);
            wg_copy16(bs + at, okb ? we + (size_t)(c0 + row) * Kdim + k : w, okb);
        }
    };
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
#pragma unroll
    for (int st = 0; st < WG_STAGES - 1; st++) {
        if (st < iters) load(st, st);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    int wg = tid >> 7;
    for (int it = 0; it < iters; it++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(WG_STAGES - 2));
        /* the copies are generic-proxy writes; wgmma reads through the async proxy */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* stage it is in; stage it - 1 is no longer read (waited below) */
        int nx = it + WG_STAGES - 1;
        if (nx < iters) load(nx, nx % WG_STAGES);
        asm volatile("cp.async.commit_group;\n" ::);
        const unsigned char *as = sm + (it % WG_STAGES) * WG_STAGE_BYTES + wg * 64 * 128;
        const unsigned char *bs = sm + (it % WG_STAGES) * WG_STAGE_BYTES + WG_TILE_BYTES;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++)
            wg_mma_64x128x16(d, wg_desc(as + kk * 32), wg_desc(bs + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    /* accumulator layout: warp q of the warpgroup holds rows 16q..16q+15; per n8 block j,
     * d[4j..4j+1] is row lane/4, columns 8j + 2(lane%4) + {0,1}; d[4j+2..3] is row lane/4 + 8 */
    int lane = tid & 31, q = (tid >> 5) & 3;
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

cudaError_t gt_cuda_grouped_mm_wgmma_init(void) {
    return cudaFuncSetAttribute(k_grouped_mm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                WG_SMEM);
}

int gt_cuda_grouped_mm_wgmma(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w,
                             const int32_t *offsets, int R, int E, int Ncols, int Kdim) {
    if ((((uintptr_t)out | (uintptr_t)A | (uintptr_t)w) & 15u) != 0 || Ncols % 8 != 0 ||
        Kdim % 8 != 0)
        return 0;
    dim3 grid((Ncols + WG_TILE - 1) / WG_TILE, (R + WG_TILE - 1) / WG_TILE + E);
    k_grouped_mm_wgmma<<<grid, WG_THREADS, WG_SMEM, cs>>>(out, A, w, offsets, E, Ncols, Kdim);
    return 1;
}
