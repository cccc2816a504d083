/* Blockwise FP8 casts on the CUDA backend (fp8_sc: 1 x 128 tiles of activations and gradients,
 * 128 x 128 blocks of weights, backend.h "FP8 linear layers"), bitwise what the CPU emulation
 * (backend/cpu/cpu_fp8.c) computes: each tile's amax as the max of |x|'s bits (order-free, NaN
 * above Inf), its scale the largest power of two not above fp8_max / amax by the same float
 * division (1 for an all-zero tile), the cast by __nv_cvt_float_to_fp8 with satfinite, and
 * the inverse scales in cuBLASLt's layout (gt_fp8_scale_index). A NaN/Inf amax, or an amax so
 * small that fp8_max / amax overflows, sets GT_NAN_FP8 and the tile keeps scale 1, as on the
 * CPU. No host sync: everything the GEMM reads is written here, in device memory.
 *
 * One kernel for the four forms. A block stages a 128 x 128 tile of x: each thread loads 16
 * bytes (8 columns) of 8 rows into registers and copies them to shared memory. The plain form
 * (q, 1 x 128 tiles along x's rows) comes from the registers: the 16 lanes holding a row reduce
 * its amax by shuffles, convert their 8 values by pairs and store 8 bytes. The transposed form
 * (qt, whose 1 x 128 tiles run along x's columns, requantized from bf16, never from q's codes)
 * comes from shared memory: each thread owns a pair of columns over 32 rows, reads them as one
 * 32-bit word a row (a warp's 32 words of a row are 32 banks), takes their amax partials, which
 * the 4 threads of a column combine through shared memory, then converts its 2 x 32 values by
 * row pairs and stores 32 bytes of each of its 2 rows of qt. One thread per element pass, no
 * per-row reductions: a warp per tile row and a lane per 4 elements made this kernel issue-
 * bound, several times slower than the per-tensor casts. Square (128 x 128 blocks): one scale
 * for the tile, from the staged values, for both forms. */
#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.cuh"

#define BLK_DIM GT_FP8_TILE /* 128 */
#define BLK_THREADS 256
#define BLK_WARPS (BLK_THREADS / GT_WARP)
#define BLK_PITCH_W (BLK_DIM / 2 + 1) /* 32-bit words per shared row (65: rows 1 bank apart) */
#define BLK_ROWS_PER_THREAD (BLK_DIM * 16 / BLK_THREADS) /* 8: 16 threads load a row */
#define BLK_T_ROWS (BLK_DIM / 4) /* rows of a column pair a thread owns for qt: 32 */

/* pow2_scale (cpu_fp8.c): 2^floor(log2(fmt_max / amax)), from amax's bits; flags (or NULL,
 * where another thread raises the same flag) gets GT_NAN_FP8 for a NaN/Inf amax or an
 * overflowing scale */
static __device__ float block_scale(unsigned amax_bits, float fmt_max, uint32_t *flags) {
    if (amax_bits >= 0x7f800000u) { /* Inf or NaN */
        if (flags) atomicOr(flags, (uint32_t)GT_NAN_FP8);
        return 1.0f;
    }
    if (amax_bits == 0) return 1.0f;
    float s = fmt_max / __uint_as_float(amax_bits);
    if (isinf(s)) {
        if (flags) atomicOr(flags, (uint32_t)GT_NAN_FP8);
        return 1.0f;
    }
    /* s >= 448 / 3.4e38 is a normal float here: clearing its mantissa is frexpf's 2^(e - 1) */
    return __uint_as_float(__float_as_uint(s) & 0x7f800000u);
}

/* two fp8 codes of a * s and b * s, a in the low byte (the lower address) */
static __device__ __forceinline__ unsigned cvt2(float a, float b, float s,
                                                __nv_fp8_interpretation_t it) {
    return (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(a * s, b * s), __NV_SATFINITE, it);
}

/* the bits of |lo| and |hi| of a word of two bf16 (lo at the lower address) as fp32 bits */
static __device__ __forceinline__ unsigned lo_bits(unsigned w) {
    return (w << 16) & 0x7fffffffu;
}
static __device__ __forceinline__ unsigned hi_bits(unsigned w) {
    return w & 0x7fff0000u;
}
static __device__ __forceinline__ float lo_f(unsigned w) {
    return __uint_as_float(w << 16);
}
static __device__ __forceinline__ float hi_f(unsigned w) {
    return __uint_as_float(w & 0xffff0000u);
}

/* x [rows, cols] bf16 to q = x [rows, cols] (when q) and qt = x^T [cols, rows] (when qt), from
 * one staging of each tile; square: one scale for the whole 128 x 128 tile (the same for both
 * forms), else one per output row; ld, ld_t: the scales' strides. vec: x 16-byte aligned and
 * cols % 8 == 0 (16-byte loads, 8-byte stores of q); rows16: rows % 16 == 0 (16-byte stores of
 * qt). Grid: (tiles along cols, along rows). */
__global__ void __launch_bounds__(BLK_THREADS, 4)
    k_fp8_cast_block(uint8_t *q, float *scale_inv, size_t ld, uint8_t *qt, float *scale_inv_t,
                     size_t ld_t, const bf16 *x, int rows, int cols, int square, int fmt_e4m3,
                     int vec, int rows16, gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ unsigned tile[BLK_DIM * BLK_PITCH_W];
    __shared__ unsigned red[4][BLK_DIM]; /* qt: the 4 row quarters' amax of each column */
    __shared__ unsigned sh[BLK_WARPS];
    int r0 = blockIdx.y * BLK_DIM, c0 = blockIdx.x * BLK_DIM;
    float fmt_max = fmt_e4m3 ? 448.0f : 57344.0f;
    __nv_fp8_interpretation_t it = fmt_e4m3 ? __NV_E4M3 : __NV_E5M2;
    /* stage: thread t loads columns tc..tc+7 of rows tr0 + 16 k */
    int tc = (threadIdx.x % 16) * 8, tr0 = threadIdx.x / 16;
    uint4 raw[BLK_ROWS_PER_THREAD];
    unsigned m = 0; /* square: the tile's amax */
#pragma unroll
    for (int k = 0; k < BLK_ROWS_PER_THREAD; k++) {
        int r = r0 + tr0 + 16 * k, c = c0 + tc;
        const bf16 *src = x + (size_t)r * cols + c;
        if (r < rows && vec && c + 8 <= cols) {
            raw[k] = *(const uint4 *)src;
        } else {
            bf16 h[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                h[i] = r < rows && c + i < cols ? src[i] : __float2bfloat16(0.0f);
            memcpy(&raw[k], h, 16);
        }
    }
#pragma unroll
    for (int k = 0; k < BLK_ROWS_PER_THREAD; k++) {
        unsigned *dst = &tile[(tr0 + 16 * k) * BLK_PITCH_W + tc / 2];
        unsigned w[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            dst[i] = w[i];
            if (square) {
                unsigned a = lo_bits(w[i]), b = hi_bits(w[i]);
                m = a > m ? a : m;
                m = b > m ? b : m;
            }
        }
    }
    float block_s = 1.0f;
    if (square) {
        for (int o = 16; o > 0; o >>= 1) {
            unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
            m = o2 > m ? o2 : m;
        }
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    }
    __syncthreads();
    if (square) {
        unsigned bm = 0;
        for (int w = 0; w < BLK_WARPS; w++)
            bm = sh[w] > bm ? sh[w] : bm;
        /* every thread derives the same scale; one raises the flag and records it */
        block_s = block_scale(bm, fmt_max, threadIdx.x == 0 ? &st->nan_flags : NULL);
        if (threadIdx.x == 0) {
            if (q) scale_inv[(size_t)blockIdx.y * ld + blockIdx.x] = 1.0f / block_s;
            if (qt) scale_inv_t[(size_t)blockIdx.x * ld_t + blockIdx.y] = 1.0f / block_s;
        }
    }
    if (q) { /* the plain form, from the registers: the 16 lanes tc of a row hold all of it */
        int t = c0 / BLK_DIM; /* the tile's index along q's rows */
#pragma unroll
        for (int k = 0; k < BLK_ROWS_PER_THREAD; k++) {
            int r = r0 + tr0 + 16 * k, c = c0 + tc;
            unsigned w[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
            float s = block_s;
            if (!square) {
                unsigned rm = 0;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    unsigned a = lo_bits(w[i]), b = hi_bits(w[i]);
                    rm = a > rm ? a : rm;
                    rm = b > rm ? b : rm;
                }
                for (int o = 8; o > 0; o >>= 1) { /* within the half warp */
                    unsigned o2 = __shfl_xor_sync(0xffffffffu, rm, o);
                    rm = o2 > rm ? o2 : rm;
                }
                s = block_scale(rm, fmt_max, tc == 0 ? &st->nan_flags : NULL);
                if (tc == 0 && r < rows) scale_inv[(size_t)t * ld + (size_t)r] = 1.0f / s;
            }
            if (r >= rows) continue;
            unsigned lo = cvt2(lo_f(w[0]), hi_f(w[0]), s, it) | cvt2(lo_f(w[1]), hi_f(w[1]), s, it)
                                                                    << 16;
            unsigned hi = cvt2(lo_f(w[2]), hi_f(w[2]), s, it) | cvt2(lo_f(w[3]), hi_f(w[3]), s, it)
                                                                    << 16;
            uint8_t *dst = q + (size_t)r * cols + c;
            if (vec && c + 8 <= cols) {
                *(uint2 *)dst = make_uint2(lo, hi);
            } else {
                for (int i = 0; i < 8 && c + i < cols; i++)
                    dst[i] = (uint8_t)((i < 4 ? lo : hi) >> (8 * (i % 4)));
            }
        }
    }
    if (!qt) return;
    /* the transposed form: thread (cp, quarter) owns columns 2 cp, 2 cp + 1 over rows
     * 32 quarter .. + 31 of the tile */
    int cp = threadIdx.x % (BLK_DIM / 2), quarter = threadIdx.x / (BLK_DIM / 2);
    const unsigned *col = &tile[quarter * BLK_T_ROWS * BLK_PITCH_W + cp];
    float s0 = block_s, s1 = block_s;
    if (!square) {
        unsigned m0 = 0, m1 = 0;
#pragma unroll 8
        for (int i = 0; i < BLK_T_ROWS; i++) {
            unsigned w = col[i * BLK_PITCH_W];
            unsigned a = lo_bits(w), b = hi_bits(w);
            m0 = a > m0 ? a : m0;
            m1 = b > m1 ? b : m1;
        }
        red[quarter][2 * cp] = m0;
        red[quarter][2 * cp + 1] = m1;
        __syncthreads();
        m0 = m1 = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            m0 = red[k][2 * cp] > m0 ? red[k][2 * cp] : m0;
            m1 = red[k][2 * cp + 1] > m1 ? red[k][2 * cp + 1] : m1;
        }
        int j0 = c0 + 2 * cp, tt = r0 / BLK_DIM; /* the tile's index along qt's rows */
        uint32_t *flags = quarter == 0 ? &st->nan_flags : NULL; /* one thread a column */
        s0 = block_scale(m0, fmt_max, flags);
        s1 = block_scale(m1, fmt_max, flags);
        if (quarter == 0 && j0 < cols) scale_inv_t[(size_t)tt * ld_t + (size_t)j0] = 1.0f / s0;
        if (quarter == 0 && j0 + 1 < cols)
            scale_inv_t[(size_t)tt * ld_t + (size_t)(j0 + 1)] = 1.0f / s1;
    }
    /* 32 codes of each column: word v of out0 holds rows 4 v .. 4 v + 3 of column 2 cp */
    unsigned out0[BLK_T_ROWS / 4], out1[BLK_T_ROWS / 4];
#pragma unroll
    for (int v = 0; v < BLK_T_ROWS / 4; v++) {
        unsigned w0 = col[(4 * v) * BLK_PITCH_W], w1 = col[(4 * v + 1) * BLK_PITCH_W];
        unsigned w2 = col[(4 * v + 2) * BLK_PITCH_W], w3 = col[(4 * v + 3) * BLK_PITCH_W];
        out0[v] = cvt2(lo_f(w0), lo_f(w1), s0, it) | cvt2(lo_f(w2), lo_f(w3), s0, it) << 16;
        out1[v] = cvt2(hi_f(w0), hi_f(w1), s1, it) | cvt2(hi_f(w2), hi_f(w3), s1, it) << 16;
    }
    int rb = r0 + quarter * BLK_T_ROWS; /* the first row of x (column of qt) written */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int j = c0 + 2 * cp + h;
        if (j >= cols) continue;
        const unsigned *o = h ? out1 : out0;
        uint8_t *dst = qt + (size_t)j * rows + rb;
        if (rows16 && rb + BLK_T_ROWS <= rows) {
            *(uint4 *)dst = make_uint4(o[0], o[1], o[2], o[3]);
            *(uint4 *)(dst + 16) = make_uint4(o[4], o[5], o[6], o[7]);
        } else {
            for (int i = 0; i < BLK_T_ROWS && rb + i < rows; i++)
                dst[i] = (uint8_t)(o[i / 4] >> (8 * (i % 4)));
        }
    }
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
    /* qt's rows start 16-byte aligned where rows % 16 == 0 (cudaMalloc'd bases are) */
    int rows16 = rows % 16 == 0 && (!qt || al16(qt));
    /* the layout's strides (backend.h): q [rows, cols], qt [cols, rows] */
    size_t ld = gt_fp8_scale_ld(rows, cols, spec.tile_rows);
    size_t ld_t = gt_fp8_scale_ld(cols, rows, spec.tile_rows);
    gt_launch(k_fp8_cast_block, dim3(gx, gy), BLK_THREADS, 0, gt_cuda_ex(b, s), (uint8_t *)q,
              scale_inv, ld, (uint8_t *)qt, scale_inv_t, ld_t, (const bf16 *)x, rows, cols,
              spec.tile_rows == GT_FP8_TILE, spec.format == GT_FP8_E4M3, vec, rows16, st);
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
