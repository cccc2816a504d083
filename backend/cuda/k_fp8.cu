/* FP8 casts and delayed scaling's update on the CUDA backend (backend.h, "FP8 linear layers"),
 * bitwise what the CPU emulation (backend/cpu/cpu_fp8.c) computes: amax as the max of |x|'s bits
 * (order-free, so deterministic), the scale from it by the same float operations, the cast by
 * __nv_cvt_float_to_fp8 with satfinite (round to nearest even). Per-tensor scaling only: the
 * blockwise casts are refused here until their cuBLASLt block-scaled GEMMs are built. */
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

static __device__ float src_at(const bf16 *x, int cols, int transpose, int i, int j) {
    return ldf(transpose ? x + (size_t)j * cols + i : x + (size_t)i * cols + j);
}

/* *amax_bits = max(*amax_bits, bits of |x|) over the n elements; a non-finite block max sets
 * GT_NAN_FP8 */
__global__ void k_fp8_amax(unsigned *amax_bits, const bf16 *x, size_t n, gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[FP8_THREADS / GT_WARP];
    unsigned m = 0;
    GT_GRID_STRIDE(i, n) {
        unsigned b = abs_bits(ldf(x + i));
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

/* Current scaling: scale and scale_inv from the amax (scale 1 where it is 0); record: the
 * tensor's meta takes all three */
__global__ void k_fp8_tensorwise_scale(float *tmp, gt_fp8_meta *meta, float *scale_inv, int record,
                                       gt_step_state *st) {
    GT_PDL_ENTRY();
    float amax = tmp[0];
    int fmt = meta->format;
    float s = scale_from_amax(amax, 1.0f, fmt, 0);
    if (s == FLT_MAX && amax > 0.0f) atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
    tmp[1] = s;
    *scale_inv = 1.0f / s;
    if (record) {
        meta->scale = s;
        meta->scale_inv = 1.0f / s;
        meta->amax = amax;
    }
}

/* q[qr, qc] = fp8(x(i, j) * scale): x(i, j), or x(j, i) when transposing; scale from *scale,
 * and thread 0 copies *scale_inv_src to the GEMM's scale_inv */
__global__ void k_fp8_cast(uint8_t *q, float *scale_inv, const float *scale,
                           const float *scale_inv_src, const bf16 *x, int qr, int qc, int cols,
                           int transpose, int fmt) {
    GT_PDL_ENTRY();
    float s = *scale;
    __nv_fp8_interpretation_t it = fmt == FMT_E4M3 ? __NV_E4M3 : __NV_E5M2;
    size_t n = (size_t)qr * qc;
    GT_GRID_STRIDE(e, n) {
        int i = (int)(e / (size_t)qc), j = (int)(e % (size_t)qc);
        q[e] = (uint8_t)__nv_cvt_float_to_fp8(src_at(x, cols, transpose, i, j) * s, __NV_SATFINITE,
                                              it);
        if (e == 0) *scale_inv = *scale_inv_src;
    }
}

static void cuda_fp8_cast(gt_backend *b, gt_stream *s, void *q, float *scale_inv, const void *x,
                          int rows, int cols, int transpose, gt_fp8_cast_spec spec,
                          gt_fp8_meta *meta, gt_step_state *st) {
    if (rows <= 0 || cols <= 0 || !q || !scale_inv || !x || !st) {
        gt_backend_fail(b, GT_ERR_INVALID, "fp8_cast: bad shape %d x %d or NULL tensor", rows,
                        cols);
        return;
    }
    if (spec.scaling == GT_FP8_BLOCKWISE) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED,
                        "fp8_cast: blockwise scaling (fp8_sc) is not built on the CUDA backend "
                        "yet; use -c fp8_cs or fp8_ds");
        return;
    }
    if (!meta) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "fp8_cast: tensorwise and delayed scaling need the "
                        "tensor's gt_fp8_meta");
        return;
    }
    /* tmp[0]: amax bits, tmp[1]: the scale of a current-scaling cast */
    float *tmp = (float *)gt_cuda_scratch(b, GT_SCRATCH_FP8, 2 * sizeof(float), "fp8_cast");
    if (b->planning || !tmp) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    size_t n = (size_t)rows * cols;
    unsigned grid = gt_grid(n, FP8_THREADS);
    if (grid > 1024) grid = 1024;
    int qr = transpose ? cols : rows, qc = transpose ? rows : cols;
    if (spec.scaling == GT_FP8_TENSORWISE) {
        GT_CUDA_OP(b, cudaMemsetAsync(tmp, 0, sizeof(float), ex.cs));
        gt_launch(k_fp8_amax, grid, FP8_THREADS, 0, ex, (unsigned *)tmp, (const bf16 *)x, n, st);
        gt_launch(k_fp8_tensorwise_scale, 1, 1, 0, ex, tmp, meta, scale_inv, spec.record, st);
        gt_launch(k_fp8_cast, gt_grid(n, FP8_THREADS), FP8_THREADS, 0, ex, (uint8_t *)q, scale_inv,
                  (const float *)&tmp[1], (const float *)scale_inv, (const bf16 *)x, qr, qc, cols,
                  transpose != 0, (int)spec.format);
    } else {
        /* delayed: the step's amax into the meta (a max, so micro-batches and repeated casts
         * of one tensor agree); an evaluation's cast records nothing */
        unsigned *amax = spec.record ? (unsigned *)&meta->amax : (unsigned *)tmp;
        if (!spec.record) GT_CUDA_OP(b, cudaMemsetAsync(tmp, 0, sizeof(float), ex.cs));
        gt_launch(k_fp8_amax, grid, FP8_THREADS, 0, ex, amax, (const bf16 *)x, n, st);
        gt_launch(k_fp8_cast, gt_grid(n, FP8_THREADS), FP8_THREADS, 0, ex, (uint8_t *)q, scale_inv,
                  (const float *)&meta->scale, (const float *)&meta->scale_inv, (const bf16 *)x, qr,
                  qc, cols, transpose != 0, (int)spec.format);
    }
    GT_CUDA_LAUNCHED(b, "fp8_cast");
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
    ops->fp8_amax_update = cuda_fp8_amax_update;
}
