/* Warp-level tensor-core building blocks shared by the mma.sync kernels (k_moe_mma.cu,
 * k_attention_mma.cu): 16-byte cp.async copies into shared memory, ldmatrix fragment loads and
 * the m16n8k16 bf16 MMA with fp32 accumulators.
 *
 * Fragment layout of mma.m16n8k16 (g = lane / 4, t = lane % 4):
 * - A (16 x 16, row-major): a0 = (row g, k 2t..2t+1), a1 = (row g+8, k 2t..), a2 = (row g,
 *   k 2t+8..), a3 = (row g+8, k 2t+8..);
 * - B (16 x 8): b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g);
 * - C (16 x 8, fp32): c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, cols 2t, 2t+1).
 * So the C fragments of two neighbouring 8-column blocks, rounded to bf16 in pairs, are the A
 * fragment of the 16-wide k block they cover. */
#ifndef GT_BACKEND_CUDA_MMA_SYNC_CUH
#define GT_BACKEND_CUDA_MMA_SYNC_CUH

#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"

static __device__ __forceinline__ uint32_t gt_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; zeros when !ok (src-size 0 reads nothing) */
static __device__ __forceinline__ void gt_cp_async16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(gt_smem_u32(dst)),
                 "l"(src), "r"(ok ? 16 : 0));
}
/* 4 bytes global -> shared, asynchronously; zero when !ok */
static __device__ __forceinline__ void gt_cp_async4(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(gt_smem_u32(dst)), "l"(src),
                 "r"(ok ? 4 : 0));
}
static __device__ __forceinline__ void gt_cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
/* waits until at most N of this thread's committed groups are still in flight */
template <int N> static __device__ __forceinline__ void gt_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8 x 8 bf16 matrices; lane l gives the address of row l % 8 of matrix l / 8. */
static __device__ __forceinline__ void gt_ldsm_x4(uint32_t *r, const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(gt_smem_u32(p)));
}
/* The same, each matrix transposed. */
static __device__ __forceinline__ void gt_ldsm_x4_t(uint32_t *r, const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(gt_smem_u32(p)));
}
/* c (16 x 8, fp32) += a (16 x 16) . b (16 x 8), bf16 operands */
static __device__ __forceinline__ void gt_mma_16816(float *c, const uint32_t *a,
                                                    const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* two floats -> bf16x2 (round to nearest-even), lo in the low half */
static __device__ __forceinline__ uint32_t gt_pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

#endif
