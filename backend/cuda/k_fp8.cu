/* FP8 casts and delayed scaling's update on the CUDA backend (backend.h, "FP8 linear layers"),
 * bitwise what the CPU emulation (backend/cpu/cpu_fp8.c) computes: amax as the max of |x|'s bits
 * (order-free, so deterministic), the scale from it by the same float operations, the cast by
 * __nv_cvt_float_to_fp8 with satfinite (round to nearest even). Per-tensor scaling here; the
 * blockwise casts are k_fp8_block.cu's. */
#include <cuda_fp8.h>
#include <float.h>

#include "backend/cuda/cuda_common.cuh"

#define FP8_THREADS 256
#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
/* GT_FP8_E4M3 / GT_FP8_E5M2 (core/fp8.h) */
#define FMT_E4M3 0

static __device__ float fmt_max(int fmt) {
    return fmt == FMT_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX;
}

/* |v|'s bits: for non-negative floats the integer order is the float order, and NaN's bits
 * lie above Inf's, so a max over them keeps a NaN as the CPU's amax does */
static __device__ unsigned abs_bits(float v) {
    return __float_as_uint(v) & 0x7fffffffu;
}

/* gt_fp8_scale_from_amax (core/fp8.h) in the same float operations */
static __device__ float scale_from_amax(float amax, float prev, int fmt, int margin) {
    if (!(amax > 0.0f) || isinf(amax) || isnan(amax)) return prev;
    float s = (fmt_max(fmt) / amax) / ldexpf(1.0f, margin);
    return isinf(s) ? FLT_MAX : s;
}

/* Where a cast takes its scale: SCALE_CURRENT, from this tensor's amax (bits in tmp[0], from
 * k_fp8_amax just before), every block deriving the same scale by the same float operations;
 * SCALE_META, the one meta holds (delayed scaling, or a tensor whose scale its earlier cast
 * recorded), with the amax added into meta when the cast records one. */
#define SCALE_CURRENT 0
#define SCALE_META 1

typedef struct cast_scale {
    int mode, record, fmt;
    const unsigned *amax_bits; /* SCALE_CURRENT */
    gt_fp8_meta *meta;
} cast_scale;

static __device__ float scale_of(const cast_scale &c) {
    if (c.mode == SCALE_META) return c.meta->scale;
    return scale_from_amax(__uint_as_float(*c.amax_bits), 1.0f, c.fmt, 0);
}

/* One thread of the grid: the GEMMs' inverse scale(s) and, under current scaling, the
 * overflow flag and (record) the tensor's meta */
static __device__ void publish_scale(const cast_scale &c, float s, float *scale_inv,
                                     float *scale_inv2, gt_step_state *st) {
    float inv = c.mode == SCALE_META ? c.meta->scale_inv : 1.0f / s;
    *scale_inv = inv;
    if (scale_inv2) *scale_inv2 = inv;
    if (c.mode != SCALE_CURRENT) return;
    float amax = __uint_as_float(*c.amax_bits);
    if (s == FLT_MAX && amax > 0.0f) atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
    if (c.record) {
        c.meta->scale = s;
        c.meta->scale_inv = inv;
        c.meta->amax = amax;
    }
}

/* A block's max of |x|'s bits into the meta (delayed, recording) and the NaN flag: the cast
 * reads every element anyway, so SCALE_META casts need no amax pass of their own. */
static __device__ void block_amax_done(const cast_scale &c, unsigned m, unsigned *sh,
                                       gt_step_state *st) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
        m = o2 > m ? o2 : m;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        m = sh[w] > m ? sh[w] : m;
    if (m >= 0x7f800000u) atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
    if (c.record) atomicMax((unsigned *)&c.meta->amax, m);
}

static __device__ __forceinline__ uint8_t to_fp8(float v, float s, __nv_fp8_interpretation_t it) {
    return (uint8_t)__nv_cvt_float_to_fp8(v * s, __NV_SATFINITE, it);
}

/* *amax_bits = max(*amax_bits, bits of |x|) over the n elements, 8 a thread where x is 16-byte
 * aligned; a non-finite block max sets GT_NAN_FP8 */
__global__ void k_fp8_amax(unsigned *amax_bits, const bf16 *x, size_t n, int vec,
                           gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[FP8_THREADS / GT_WARP];
    unsigned m = 0;
    size_t nv = vec ? n / 8 : 0;
    GT_GRID_STRIDE(i, nv) {
        float f[8];
        ld8(f, x + 8 * i);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            unsigned b = abs_bits(f[k]);
            m = b > m ? b : m;
        }
    }
    GT_GRID_STRIDE(i, n - 8 * nv) {
        unsigned b = abs_bits(ldf(x + 8 * nv + i));
        m = b > m ? b : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
        m = o2 > m ? o2 : m;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        m = sh[w] > m ? sh[w] : m;
    if (m >= 0x7f800000u) atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
    atomicMax(amax_bits, m);
}

/* q[e] = fp8(x[e] * scale) over n elements in order (no transpose), 8 a thread where x is 16-
 * and q 8-byte aligned */
__global__ void k_fp8_cast_flat(uint8_t *q, float *scale_inv, const bf16 *x, size_t n, int vec,
                                cast_scale c, gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[FP8_THREADS / GT_WARP];
    float s = scale_of(c);
    if (blockIdx.x == 0 && threadIdx.x == 0) publish_scale(c, s, scale_inv, NULL, st);
    __nv_fp8_interpretation_t it = c.fmt == FMT_E4M3 ? __NV_E4M3 : __NV_E5M2;
    unsigned m = 0;
    size_t nv = vec ? n / 8 : 0;
    GT_GRID_STRIDE(i, nv) {
        float f[8];
        ld8(f, x + 8 * i);
        uint8_t o[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            unsigned b = abs_bits(f[k]);
            m = b > m ? b : m;
            o[k] = to_fp8(f[k], s, it);
        }
        uint2 u;
        memcpy(&u, o, 8);
        *(uint2 *)(q + 8 * i) = u;
    }
    GT_GRID_STRIDE(i, n - 8 * nv) {
        size_t e = 8 * nv + i;
        float v = ldf(x + e);
        unsigned b = abs_bits(v);
        m = b > m ? b : m;
        q[e] = to_fp8(v, s, it);
    }
    if (c.mode == SCALE_META) block_amax_done(c, m, sh, st);
}

/* The transposing cast in FP8_TILE x FP8_TILE tiles of x [rows, cols]: each block reads its tile
 * once, coalesced, converts it once, and writes q [rows, cols] (when q) straight from registers
 * and qt [cols, rows] (when qt) from the codes in shared memory, so both writes are coalesced
 * too; the transposed read a plain kernel would make strides through memory. Thread t covers 8
 * consecutive columns of a row (vec: 16-byte loads where cols % 8 == 0 and x is aligned). */
#define FP8_TILE_DIM 64
#define FP8_TILE_THREADS 256
#define FP8_TILE_PAD 4 /* shared rows 68 bytes apart: the column reads spread over the banks */

__global__ void k_fp8_cast_tiles(uint8_t *q, uint8_t *qt, float *scale_inv, float *scale_inv_t,
                                 const bf16 *x, int rows, int cols, int vec_in, int vec_q,
                                 int vec_qt, cast_scale c, gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ uint8_t tile[FP8_TILE_DIM][FP8_TILE_DIM + FP8_TILE_PAD];
    __shared__ unsigned sh[FP8_TILE_THREADS / GT_WARP];
    float s = scale_of(c);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        publish_scale(c, s, q ? scale_inv : scale_inv_t, q && qt ? scale_inv_t : NULL, st);
    __nv_fp8_interpretation_t it = c.fmt == FMT_E4M3 ? __NV_E4M3 : __NV_E5M2;
    int r0 = blockIdx.y * FP8_TILE_DIM, c0 = blockIdx.x * FP8_TILE_DIM;
    int tc = (threadIdx.x % (FP8_TILE_DIM / 8)) * 8; /* this thread's 8 columns in the tile */
    int tr0 = threadIdx.x / (FP8_TILE_DIM / 8);      /* its first row; rows step by 32 */
    const int rstep = FP8_TILE_THREADS / (FP8_TILE_DIM / 8);
    unsigned m = 0;
    for (int tr = tr0; tr < FP8_TILE_DIM; tr += rstep) {
        int r = r0 + tr, cc = c0 + tc;
        if (r >= rows) break;
        float f[8];
        int full = cc + 8 <= cols;
        const bf16 *src = x + (size_t)r * cols + cc;
        if (full && vec_in)
            ld8(f, src);
        else
            for (int k = 0; k < 8; k++)
                f[k] = cc + k < cols ? ldf(src + k) : 0.0f;
        uint8_t o[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            unsigned b = abs_bits(f[k]);
            m = b > m ? b : m;
            o[k] = to_fp8(f[k], s, it);
            tile[tr][tc + k] = o[k];
        }
        if (q) {
            uint8_t *dst = q + (size_t)r * cols + cc;
            if (full && vec_q) {
                uint2 u;
                memcpy(&u, o, 8);
                *(uint2 *)dst = u;
            } else {
                for (int k = 0; k < 8 && cc + k < cols; k++)
                    dst[k] = o[k];
            }
        }
    }
    if (c.mode == SCALE_META) block_amax_done(c, m, sh, st); /* holds a __syncthreads */
    if (!qt) return;
    __syncthreads();
    /* qt row (c0 + j), columns r0 + i .. r0 + i + 7: tile[i .. i + 7][j] */
    for (int j = tr0; j < FP8_TILE_DIM; j += rstep) {
        int qr = c0 + j, qc = r0 + tc;
        if (qr >= cols) break;
        uint8_t o[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            o[k] = tile[tc + k][j];
        uint8_t *dst = qt + (size_t)qr * rows + qc;
        if (qc + 8 <= rows && vec_qt) {
            uint2 u;
            memcpy(&u, o, 8);
            *(uint2 *)dst = u;
        } else {
            for (int k = 0; k < 8 && qc + k < rows; k++)
                dst[k] = o[k];
        }
    }
}

static int al8(const void *p) {
    return ((uintptr_t)p & 7u) == 0;
}

static int cast_args_ok(gt_backend *b, const char *op, const void *q, const float *scale_inv,
                        const void *x, int rows, int cols, gt_fp8_cast_spec spec,
                        const gt_fp8_meta *meta, const gt_step_state *st) {
    if (rows <= 0 || cols <= 0 || !q || !scale_inv || !x || !st) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: bad shape %d x %d or NULL tensor", op, rows, cols);
        return 0;
    }
    if (!meta && spec.scaling != GT_FP8_BLOCKWISE) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: tensorwise and delayed scaling need the tensor's gt_fp8_meta", op);
        return 0;
    }
    if ((size_t)(rows + FP8_TILE_DIM - 1) / FP8_TILE_DIM > GT_MAX_GRID) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: %d rows exceed the cast's grid (%u tiles of %d)",
                        op, rows, GT_MAX_GRID, FP8_TILE_DIM);
        return 0;
    }
    return 1;
}

/* Current scaling's amax pass (the scale needs the whole tensor's amax before any element is
 * cast); delayed scaling needs none. Returns the cast's scale source. */
static cast_scale begin_cast(gt_backend *b, gt_cuda_exec ex, const void *x, size_t n,
                             gt_fp8_cast_spec spec, gt_fp8_meta *meta, unsigned *tmp,
                             gt_step_state *st) {
    cast_scale c = {SCALE_META, spec.record, (int)spec.format, tmp, meta};
    if (spec.scaling != GT_FP8_TENSORWISE) return c;
    c.mode = SCALE_CURRENT;
    GT_CUDA_OP(b, cudaMemsetAsync(tmp, 0, sizeof(unsigned), ex.cs));
    int vec = al16(x);
    unsigned grid = gt_grid(vec ? n / 8 + 1 : n, FP8_THREADS);
    if (grid > 1024) grid = 1024;
    gt_launch(k_fp8_amax, grid, FP8_THREADS, 0, ex, tmp, (const bf16 *)x, n, vec, st);
    return c;
}

static void launch_tiles(gt_cuda_exec ex, void *q, void *qt, float *si, float *sit, const void *x,
                         int rows, int cols, cast_scale c, gt_step_state *st) {
    dim3 grid((unsigned)((cols + FP8_TILE_DIM - 1) / FP8_TILE_DIM),
              (unsigned)((rows + FP8_TILE_DIM - 1) / FP8_TILE_DIM));
    int vec_in = al16(x) && cols % 8 == 0;
    int vec_q = !q || (al8(q) && cols % 8 == 0);
    int vec_qt = !qt || (al8(qt) && rows % 8 == 0);
    gt_launch(k_fp8_cast_tiles, grid, FP8_TILE_THREADS, 0, ex, (uint8_t *)q, (uint8_t *)qt, si, sit,
              (const bf16 *)x, rows, cols, vec_in, vec_q, vec_qt, c, st);
}

static void cuda_fp8_cast(gt_backend *b, gt_stream *s, void *q, float *scale_inv, const void *x,
                          int rows, int cols, int transpose, gt_fp8_cast_spec spec,
                          gt_fp8_meta *meta, gt_step_state *st) {
    if (!cast_args_ok(b, "fp8_cast", q, scale_inv, x, rows, cols, spec, meta, st)) return;
    if (spec.scaling == GT_FP8_BLOCKWISE) {
        gt_cuda_fp8_cast_blockwise(b, s, q, scale_inv, x, rows, cols, transpose, spec, st);
        return;
    }
    unsigned *tmp = (unsigned *)gt_cuda_scratch(b, GT_SCRATCH_FP8, 2 * sizeof(float), "fp8_cast");
    if (b->planning || !tmp) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    size_t n = (size_t)rows * cols;
    cast_scale c = begin_cast(b, ex, x, n, spec, meta, tmp, st);
    if (transpose) {
        launch_tiles(ex, NULL, q, NULL, scale_inv, x, rows, cols, c, st);
    } else {
        int vec = al16(x) && al8(q);
        unsigned grid = gt_grid(vec ? n / 8 + 1 : n, FP8_THREADS);
        gt_launch(k_fp8_cast_flat, grid, FP8_THREADS, 0, ex, (uint8_t *)q, scale_inv,
                  (const bf16 *)x, n, vec, c, st);
    }
    GT_CUDA_LAUNCHED(b, "fp8_cast");
}

static void cuda_fp8_cast_pair(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                               float *scale_inv_t, const void *x, int rows, int cols,
                               gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st) {
    if (!cast_args_ok(b, "fp8_cast_pair", q, scale_inv, x, rows, cols, spec, meta, st)) return;
    if (!qt || !scale_inv_t) {
        gt_backend_fail(b, GT_ERR_INVALID, "fp8_cast_pair: NULL transposed output");
        return;
    }
    if (spec.scaling == GT_FP8_BLOCKWISE) {
        gt_cuda_fp8_cast_pair_blockwise(b, s, q, scale_inv, qt, scale_inv_t, x, rows, cols, spec,
                                        st);
        return;
    }
    unsigned *tmp =
        (unsigned *)gt_cuda_scratch(b, GT_SCRATCH_FP8, 2 * sizeof(float), "fp8_cast_pair");
    if (b->planning || !tmp) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    cast_scale c = begin_cast(b, ex, x, (size_t)rows * cols, spec, meta, tmp, st);
    launch_tiles(ex, q, qt, scale_inv, scale_inv_t, x, rows, cols, c, st);
    GT_CUDA_LAUNCHED(b, "fp8_cast_pair");
}

/* One thread per tensor: TE's amax_and_scale_update, as the CPU's k_fp8_amax_update */
__global__ void k_fp8_amax_update(gt_fp8_meta *meta, float *history, int n, int len, int use_max,
                                  int margin, gt_step_state *st) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(t, (size_t)n) {
        gt_fp8_meta *m = &meta[t];
        float *h = history + t * (size_t)len;
        h[0] = m->amax;
        float amax = h[0];
        if (use_max)
            for (int j = 1; j < len; j++)
                amax = isnan(h[j]) || h[j] > amax ? h[j] : amax;
        float s = scale_from_amax(amax, m->scale, m->format, margin);
        if (s == FLT_MAX && amax > 0.0f && !isinf(amax) && !isnan(amax))
            atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
        m->scale = s;
        m->scale_inv = 1.0f / s;
        float newest = h[0];
        for (int j = 0; j + 1 < len; j++)
            h[j] = h[j + 1];
        h[len - 1] = newest;
        h[0] = 0.0f;
        m->amax = 0.0f;
    }
}

static void cuda_fp8_amax_update(gt_backend *b, gt_stream *s, gt_fp8_meta *meta, float *history,
                                 int n, int history_len, int use_max, int margin,
                                 gt_step_state *st) {
    if (n < 0 || history_len <= 0 || margin < 0 || (n > 0 && (!meta || !history || !st))) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "fp8_amax_update: bad arguments n=%d history_len=%d margin=%d", n,
                        history_len, margin);
        return;
    }
    if (b->planning || n == 0) return;
    gt_launch(k_fp8_amax_update, gt_grid((size_t)n, FP8_THREADS), FP8_THREADS, 0, gt_cuda_ex(b, s),
              meta, history, n, history_len, use_max != 0, margin, st);
    GT_CUDA_LAUNCHED(b, "fp8_amax_update");
}

extern "C" void gt_cuda_register_fp8_ops(gt_backend_ops *ops) {
    ops->fp8_cast = cuda_fp8_cast;
    ops->fp8_cast_pair = cuda_fp8_cast_pair;
    ops->fp8_amax_update = cuda_fp8_amax_update;
}
