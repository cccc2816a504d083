/* Blockwise FP8 casts on the CUDA backend (fp8_sc: 1 x 128 tiles of activations and gradients,
 * 128 x 128 blocks of weights, backend.h "FP8 linear layers"), bitwise what the CPU emulation
 * (backend/cpu/cpu_fp8.c) computes: each tile's amax as the max of |x|'s bits (order-free, NaN
 * above Inf), its scale the largest power of two not above fp8_max / amax by the same float
 * division (1 for an all-zero tile), the cast by __nv_cvt_float_to_fp8 with satfinite, and
 * the inverse scales in cuBLASLt's layout (gt_fp8_scale_index). A NaN/Inf amax, or an amax so
 * small that fp8_max / amax overflows, sets GT_NAN_FP8 and the tile keeps scale 1, as on the
 * CPU. No host sync: everything the GEMM reads is written here, in device memory.
 *
 * One kernel for the four forms: a block stages a 128 x 128 tile of x (bf16) in shared memory,
 * then each warp writes output rows, either rows of the tile (no transpose) or its columns
 * (transpose: the tiles of x^T, whose 1 x 128 tiles run along x's columns, are requantized from
 * bf16, not from x's fp8 codes). The shared rows are 65 words apart, so a warp reading a column
 * (lane l at row l + 32 k) touches 32 different banks. */
#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.cuh"

#define BLK_DIM GT_FP8_TILE /* 128 */
#define BLK_THREADS 256
#define BLK_WARPS (BLK_THREADS / GT_WARP)
#define BLK_PITCH (BLK_DIM + 2) /* bf16 per shared row: 65 words */

/* pow2_scale (cpu_fp8.c): 2^floor(log2(fmt_max / amax)), from amax's bits */
static __device__ float block_scale(unsigned amax_bits, float fmt_max, gt_step_state *st) {
    if (amax_bits >= 0x7f800000u) { /* Inf or NaN */
        atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
        return 1.0f;
    }
    if (amax_bits == 0) return 1.0f;
    float s = fmt_max / __uint_as_float(amax_bits);
    if (isinf(s)) {
        atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
        return 1.0f;
    }
    /* s >= 448 / 3.4e38 is a normal float here: clearing its mantissa is frexpf's 2^(e - 1) */
    return __uint_as_float(__float_as_uint(s) & 0x7f800000u);
}

static __device__ __forceinline__ unsigned warp_max_u(unsigned m) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
        m = o2 > m ? o2 : m;
    }
    return m;
}

/* One output form of a staged tile: q = x's tile (transpose 0) or its transpose (1), q
 * [qr, qc] with its tile corner at (qr0, qc0); square: block_s, the block's scale, else one
 * scale per output row; ld: the scales' stride (gt_fp8_scale_ld of q) */
static __device__ void emit_tile(uint8_t *q, float *scale_inv, size_t ld, const bf16 *tile,
                                 int transpose, int qr, int qc, int qr0, int qc0, int square,
                                 float block_s, float fmt_max, __nv_fp8_interpretation_t it,
                                 gt_step_state *st) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int qt = qc0 / BLK_DIM; /* the tile's index along q's rows */
    for (int j = warp; j < BLK_DIM && qr0 + j < qr; j += BLK_WARPS) {
        float v[4];
        unsigned rm = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int e = lane + 32 * k; /* element along the output row */
            bf16 h = transpose ? tile[e * BLK_PITCH + j] : tile[j * BLK_PITCH + e];
            v[k] = __bfloat162float(h);
            unsigned b = __float_as_uint(v[k]) & 0x7fffffffu;
            rm = b > rm ? b : rm; /* the tile's padding is 0: no effect on the max */
        }
        float s = block_s;
        if (!square) {
            rm = warp_max_u(rm);
            s = lane == 0 ? block_scale(rm, fmt_max, st) : 0.0f;
            s = __shfl_sync(0xffffffffu, s, 0);
            if (lane == 0) scale_inv[(size_t)qt * ld + (size_t)(qr0 + j)] = 1.0f / s;
        }
        uint8_t *dst = q + (size_t)(qr0 + j) * qc + qc0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int e = lane + 32 * k;
            if (qc0 + e < qc) dst[e] = (uint8_t)__nv_cvt_float_to_fp8(v[k] * s, __NV_SATFINITE, it);
        }
    }
}

/* x [rows, cols] bf16 to q = x [rows, cols] (when q) and qt = x^T [cols, rows] (when qt), from
 * one staging of each tile; square: one scale for the whole 128 x 128 tile (the same for both
 * forms), else one per output row; ld, ld_t: the scales' strides. Grid: (tiles along cols,
 * along rows). */
__global__ void k_fp8_cast_block(uint8_t *q, float *scale_inv, size_t ld, uint8_t *qt,
                                 float *scale_inv_t, size_t ld_t, const bf16 *x, int rows, int cols,
                                 int square, int fmt_e4m3, int vec, gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ bf16 tile[BLK_DIM * BLK_PITCH];
    __shared__ unsigned sh[BLK_WARPS];
    int r0 = blockIdx.y * BLK_DIM, c0 = blockIdx.x * BLK_DIM;
    /* stage: thread t loads 8 consecutive columns of rows t / 16 + 16 k */
    int tc = (threadIdx.x % 16) * 8, tr0 = threadIdx.x / 16;
    unsigned m = 0;
    for (int tr = tr0; tr < BLK_DIM; tr += BLK_THREADS / 16) {
        int r = r0 + tr, c = c0 + tc;
        float f[8];
        const bf16 *src = x + (size_t)r * cols + c;
        if (r < rows && vec && c + 8 <= cols) {
            ld8(f, src);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++)
                f[k] = r < rows && c + k < cols ? ldf(src + k) : 0.0f;
        }
        unsigned *dst = (unsigned *)&tile[tr * BLK_PITCH + tc];
#pragma unroll
        for (int k = 0; k < 8; k += 2) {
            __nv_bfloat162 h2 = __floats2bfloat162_rn(f[k], f[k + 1]); /* exact: f came from bf16 */
            unsigned u;
            memcpy(&u, &h2, 4);
            dst[k / 2] = u;
            unsigned b0 = __float_as_uint(f[k]) & 0x7fffffffu;
            unsigned b1 = __float_as_uint(f[k + 1]) & 0x7fffffffu;
            m = b0 > m ? b0 : m;
            m = b1 > m ? b1 : m;
        }
    }
    if (square) {
        m = warp_max_u(m);
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    }
    __syncthreads();
    float fmt_max = fmt_e4m3 ? 448.0f : 57344.0f;
    __nv_fp8_interpretation_t it = fmt_e4m3 ? __NV_E4M3 : __NV_E5M2;
    float block_s = 1.0f;
    if (square) {
        unsigned bm = 0;
        for (int w = 0; w < BLK_WARPS; w++)
            bm = sh[w] > bm ? sh[w] : bm;
        __syncthreads(); /* every thread has read sh before thread 0 reuses it */
        /* one thread derives the scale (and raises the flag) and records it for both forms */
        if (threadIdx.x == 0) {
            float bs = block_scale(bm, fmt_max, st);
            if (q) scale_inv[(size_t)blockIdx.y * ld + blockIdx.x] = 1.0f / bs;
            if (qt) scale_inv_t[(size_t)blockIdx.x * ld_t + blockIdx.y] = 1.0f / bs;
            sh[0] = __float_as_uint(bs);
        }
        __syncthreads();
        block_s = __uint_as_float(sh[0]);
    }
    if (q)
        emit_tile(q, scale_inv, ld, tile, 0, rows, cols, r0, c0, square, block_s, fmt_max, it, st);
    if (qt)
        emit_tile(qt, scale_inv_t, ld_t, tile, 1, cols, rows, c0, r0, square, block_s, fmt_max, it,
                  st);
}

/* The grid's launch for q and/or qt (NULL: not wanted); the caller checked the pointers */
static void launch_block_cast(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                              float *scale_inv_t, const void *x, int rows, int cols,
                              gt_fp8_cast_spec spec, gt_step_state *st, const char *op) {
    if (spec.tile_rows != 1 && spec.tile_rows != GT_FP8_TILE) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: blockwise tiles are 1 or %d rows (got %d)", op,
                        GT_FP8_TILE, spec.tile_rows);
        return;
    }
    unsigned gx = (unsigned)((cols + BLK_DIM - 1) / BLK_DIM);
    unsigned gy = (unsigned)((rows + BLK_DIM - 1) / BLK_DIM);
    if (gy > GT_MAX_GRID) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: %d rows exceed the cast's grid (%u tiles of %d)",
                        op, rows, GT_MAX_GRID, BLK_DIM);
        return;
    }
    if (b->planning) return;
    int vec = al16(x) && cols % 8 == 0;
    /* the layout's strides (backend.h): q [rows, cols], qt [cols, rows] */
    size_t ld = gt_fp8_scale_ld(rows, cols, spec.tile_rows);
    size_t ld_t = gt_fp8_scale_ld(cols, rows, spec.tile_rows);
    gt_launch(k_fp8_cast_block, dim3(gx, gy), BLK_THREADS, 0, gt_cuda_ex(b, s), (uint8_t *)q,
              scale_inv, ld, (uint8_t *)qt, scale_inv_t, ld_t, (const bf16 *)x, rows, cols,
              spec.tile_rows == GT_FP8_TILE, spec.format == GT_FP8_E4M3, vec, st);
    GT_CUDA_LAUNCHED(b, op);
}

extern "C" void gt_cuda_fp8_cast_blockwise(gt_backend *b, gt_stream *s, void *q, float *scale_inv,
                                           const void *x, int rows, int cols, int transpose,
                                           gt_fp8_cast_spec spec, gt_step_state *st) {
    if (transpose)
        launch_block_cast(b, s, NULL, NULL, q, scale_inv, x, rows, cols, spec, st, "fp8_cast");
    else
        launch_block_cast(b, s, q, scale_inv, NULL, NULL, x, rows, cols, spec, st, "fp8_cast");
}

extern "C" void gt_cuda_fp8_cast_pair_blockwise(gt_backend *b, gt_stream *s, void *q,
                                                float *scale_inv, void *qt, float *scale_inv_t,
                                                const void *x, int rows, int cols,
                                                gt_fp8_cast_spec spec, gt_step_state *st) {
    launch_block_cast(b, s, q, scale_inv, qt, scale_inv_t, x, rows, cols, spec, st,
                      "fp8_cast_pair");
}
