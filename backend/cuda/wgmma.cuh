/* Building blocks of the warpgroup-MMA kernels (k_moe_wgmma.cu, k_attention_wgmma.cu; both
 * compiled for sm_90a alone, see CMakeLists.txt): mbarriers, TMA copies into shared memory,
 * the shared-memory matrix descriptor of wgmma for 128-byte swizzled tiles, and (host side,
 * wgmma_maps.cu) the tensor maps the TMA copies read through.
 *
 * Tiles use the 128-byte swizzle of both TMA and wgmma, in 1024-byte atoms of 8 rows of 128
 * bytes where the 16-byte chunk c of row r sits at chunk c ^ r; a tile starts 1024-aligned.
 * - k-contiguous ("K-major") operand, rows of 64 k: row o at o * 128, 8-row groups 1024 bytes
 *   apart (the descriptor's stride); a k16 slice starts 32 bytes into the rows.
 * - row-contiguous ("MN-major") operand, [64 k][64 rows] per 8192-byte TMA box: boxes of the
 *   next 64 rows 8192 bytes apart (the descriptor's leading offset), the 8 k groups of one box
 *   1024 bytes apart (stride); a k16 slice starts two atoms (2048 bytes) further. */
#ifndef GT_BACKEND_CUDA_WGMMA_CUH
#define GT_BACKEND_CUDA_WGMMA_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#include "backend/cuda/mma_sync.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ void mb_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(gt_smem_u32(bar)), "r"(count));
}

/* the producer's arrival, announcing the bytes the stage's copies will deliver */
static __device__ __forceinline__ void mb_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(gt_smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void mb_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(gt_smem_u32(bar)) : "memory");
}

/* waits until the phase of the given parity completed */
static __device__ __forceinline__ void mb_wait(uint64_t *bar, int parity) {
    asm volatile("{\n.reg .pred p;\nWG_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WG_WAIT;\n}\n" ::"r"(gt_smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

/* one TMA box of the tensor map into shared memory; completion counted on bar */
static __device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, uint64_t *bar,
                                                int x, int y, int z) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(gt_smem_u32(dst)),
                 "l"((uint64_t)map), "r"(gt_smem_u32(bar)), "r"(x), "r"(y), "r"(z)
                 : "memory");
}

/* `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into shared
 * memory by the bulk copy engine; completion counted on bar */
static __device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes,
                                                 uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(gt_smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(gt_smem_u32(bar))
                 : "memory");
}

/* Matrix descriptor of the k16 slice kk of a swizzled tile at p: address >> 4, leading offset
 * (16 bytes, unused, for K-major; 8192 for MN-major), stride 1024, layout 1 (128-byte
 * swizzle). */
template <bool MN> static __device__ __forceinline__ uint64_t wg_desc(const void *p, int kk) {
    uint64_t a = gt_smem_u32((const unsigned char *)p + (MN ? kk * 2048 : kk * 32));
    uint64_t lbo = MN ? 8192 : 16;
    return ((a & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

static __device__ __forceinline__ void wg_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wg_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void wg_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
#endif

/* Host side (wgmma_maps.cu). gt_wg_maps_init looks up the driver's cuTensorMapEncodeTiled
 * through the runtime (no link against libcuda); gt_wg_map describes a bf16 tensor of up to
 * three dimensions (d0 contiguous) in boxes of b0 x b1 x 1 with the 128-byte swizzle, zeros out
 * of bounds; it returns 0 when the encoder is missing or refuses the tensor. */
cudaError_t gt_wg_maps_init(void);
int gt_wg_map(CUtensorMap *m, const bf16 *p, uint64_t d0, uint64_t d1, uint64_t d2, int b0, int b1);

#endif
