/* Dense elementwise and row kernels of the CUDA backend: dtype conversion, embedding (with a
 * sort-based deterministic backward), RMSNorm (deterministic dw through per-block partials),
 * add, dropout, SwiGLU, cross entropy over bf16 logits and the loss sum. bf16 I/O, fp32 math. */
#include "backend/cuda/cuda_common.cuh"
#include "core/philox.h"

#define DENSE_THREADS 256
#define RMS_BWD_ROWS 32    /* rows per block of the rmsnorm backward */
#define RMS_MAX_COLS 32    /* columns per thread: d <= 256 * 32 */
#define DBIAS_ROWS 64      /* rows per partial of the dbias column sums */
#define EMB_SORT_THREADS 1024
#define EMB_SORT_SHARED_MAX 16384 /* keys sorted in shared memory up to this many */
#define CE_THREADS 512
#define LOSS_THREADS 1024

/* ---- conversion ---- */

__global__ void k_to_float(float *dst, const bf16 *src, size_t n) {
    GT_GRID_STRIDE(i, n) dst[i] = ldf(src + i);
}
__global__ void k_from_float(bf16 *dst, const float *src, size_t n) {
    GT_GRID_STRIDE(i, n) dst[i] = tobf(src[i]);
}

static void cuda_to_float(gt_backend *b, gt_stream *s, float *dst, const void *src, size_t n) {
    if (b->planning || n == 0) return;
    k_to_float<<<gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        dst, (const bf16 *)src, n);
    GT_CUDA_LAUNCHED(b, "to_float");
}
static void cuda_from_float(gt_backend *b, gt_stream *s, void *dst, const float *src, size_t n) {
    if (b->planning || n == 0) return;
    k_from_float<<<gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)dst, src, n);
    GT_CUDA_LAUNCHED(b, "from_float");
}

/* ---- dbias: column sums in two fixed-order passes ---- */

__global__ void k_colsum_partial(float *part, const bf16 *x, int M, int N) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r0 = blockIdx.y * DBIAS_ROWS;
    if (c >= N) return;
    int r1 = min(M, r0 + DBIAS_ROWS);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) acc += ldf(x + (size_t)r * N + c);
    part[(size_t)blockIdx.y * N + c] = acc;
}
__global__ void k_colsum_final(float *out, const float *part, int parts, int N) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float acc = 0.0f;
    for (int p = 0; p < parts; p++) acc += part[(size_t)p * N + c];
    out[c] += acc;
}

extern "C" void gt_cuda_dbias(gt_backend *b, gt_stream *s, float *dbias, const void *dout,
                              int M, int N) {
    int parts = (M + DBIAS_ROWS - 1) / DBIAS_ROWS;
    float *part = (float *)gt_cuda_scratch(b, GT_SCRATCH_DBIAS,
                                           (size_t)parts * N * sizeof(float), "matmul dbias");
    if (!part || M <= 0 || N <= 0) return;
    dim3 g1((N + DENSE_THREADS - 1) / DENSE_THREADS, parts);
    k_colsum_partial<<<g1, DENSE_THREADS, 0, gt_cuda_stream(s)>>>(part, (const bf16 *)dout, M,
                                                                  N);
    k_colsum_final<<<(N + DENSE_THREADS - 1) / DENSE_THREADS, DENSE_THREADS, 0,
                     gt_cuda_stream(s)>>>(dbias, part, parts, N);
    GT_CUDA_LAUNCHED(b, "matmul dbias");
}

/* ---- embedding ---- */

__global__ void k_embedding_fwd(bf16 *out, const int32_t *tokens, const bf16 *wte, int N,
                                int d) {
    size_t total = (size_t)N * d;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / d, c = i % d;
        out[i] = wte[(size_t)tokens[n] * d + c];
    }
}

/* Sorts keys (token << 32 | n) ascending with a bitonic network in one block, so every
 * vocabulary row's tokens end up adjacent and in token order. */
__global__ void k_embedding_sort(uint64_t *keys_out, const int32_t *tokens, int N, int P,
                                 int use_shared) {
    extern __shared__ uint64_t sh_keys[];
    uint64_t *a = use_shared ? sh_keys : keys_out;
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        a[i] = i < N ? ((uint64_t)(uint32_t)tokens[i] << 32) | (uint32_t)i : ~(uint64_t)0;
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) {
                int ixj = i ^ j;
                if (ixj > i) {
                    uint64_t x = a[i], y = a[ixj];
                    int up = (i & k) == 0;
                    if ((x > y) == up) {
                        a[i] = y;
                        a[ixj] = x;
                    }
                }
            }
            __syncthreads();
        }
    }
    if (use_shared)
        for (int i = threadIdx.x; i < N; i += blockDim.x) keys_out[i] = a[i];
}

/* One warp per sorted position; the warp at the head of a run of equal tokens sums the run's
 * rows in token order and adds them to dwte[token]. */
__global__ void k_embedding_accum(float *dwte, const bf16 *dout, const uint64_t *keys, int N,
                                  int V, int d) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= N) return;
    uint32_t tok = (uint32_t)(keys[w] >> 32);
    if (w > 0 && (uint32_t)(keys[w - 1] >> 32) == tok) return;
    if (tok >= (uint32_t)V) return;
    int end = w + 1;
    while (end < N && (uint32_t)(keys[end] >> 32) == tok) end++;
    for (int c = lane; c < d; c += 32) {
        float acc = 0.0f;
        for (int r = w; r < end; r++) {
            uint32_t n = (uint32_t)keys[r];
            acc += ldf(dout + (size_t)n * d + c);
        }
        dwte[(size_t)tok * d + c] += acc;
    }
}

static void cuda_embedding_fwd(gt_backend *b, gt_stream *s, void *out, const int32_t *tokens,
                               const void *wte, int N, int d) {
    if (b->planning || N <= 0 || d <= 0) return;
    size_t total = (size_t)N * d;
    k_embedding_fwd<<<gt_grid(total, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)out, tokens, (const bf16 *)wte, N, d);
    GT_CUDA_LAUNCHED(b, "embedding_fwd");
}

static int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

static void cuda_embedding_bwd(gt_backend *b, gt_stream *s, float *dwte, const void *dout,
                               const int32_t *tokens, int N, int V, int d) {
    int P = pow2_at_least(N > 1 ? N : 1);
    uint64_t *keys = (uint64_t *)gt_cuda_scratch(b, GT_SCRATCH_EMBED, (size_t)P * sizeof(uint64_t),
                                                 "embedding_bwd");
    if (!keys || N <= 0 || d <= 0) return;
    int use_shared = P <= EMB_SORT_SHARED_MAX;
    size_t shm = use_shared ? (size_t)P * sizeof(uint64_t) : 0;
    k_embedding_sort<<<1, EMB_SORT_THREADS, shm, gt_cuda_stream(s)>>>(keys, tokens, N, P,
                                                                      use_shared);
    int warps_per_block = DENSE_THREADS / 32;
    k_embedding_accum<<<(N + warps_per_block - 1) / warps_per_block, DENSE_THREADS, 0,
                        gt_cuda_stream(s)>>>(dwte, (const bf16 *)dout, keys, N, V, d);
    GT_CUDA_LAUNCHED(b, "embedding_bwd");
}

/* ---- rmsnorm ---- */

/* One warp per row. */
__global__ void k_rmsnorm_fwd(bf16 *out, float *rstd, const bf16 *inp, const bf16 *w, int N,
                              int d, float eps) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * d;
    float ss = 0.0f;
    for (int c = lane; c < d; c += 32) {
        float v = ldf(x + c);
        ss += v * v;
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)d + eps);
    bf16 *o = out + (size_t)row * d;
    for (int c = lane; c < d; c += 32) o[c] = tobf(ldf(x + c) * r * ldf(w + c));
    if (lane == 0) rstd[row] = r;
}

/* Block = RMS_BWD_ROWS consecutive rows, processed in order; each thread owns the columns
 * tid + k*blockDim, so its dw partial is summed in row order without atomics. */
__global__ void k_rmsnorm_bwd(bf16 *dinp, float *dw_part, const bf16 *dout, const bf16 *inp,
                              const bf16 *w, const float *rstd, int N, int d) {
    __shared__ float sh[32];
    float dwp[RMS_MAX_COLS], wv[RMS_MAX_COLS];
#pragma unroll
    for (int k = 0; k < RMS_MAX_COLS; k++) {
        int c = threadIdx.x + k * blockDim.x;
        dwp[k] = 0.0f;
        wv[k] = c < d ? ldf(w + c) : 0.0f;
    }
    int r0 = blockIdx.x * RMS_BWD_ROWS, r1 = min(N, r0 + RMS_BWD_ROWS);
    for (int r = r0; r < r1; r++) {
        const bf16 *x = inp + (size_t)r * d, *dy = dout + (size_t)r * d;
        float rs = rstd[r];
        float xv[RMS_MAX_COLS], gv[RMS_MAX_COLS];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < RMS_MAX_COLS; k++) {
            int c = threadIdx.x + k * blockDim.x;
            xv[k] = c < d ? ldf(x + c) : 0.0f;
            gv[k] = c < d ? ldf(dy + c) : 0.0f;
            dot += gv[k] * wv[k] * xv[k];
        }
        dot = block_sum(dot, sh);
        float coef = rs * rs * rs * dot / (float)d;
        bf16 *dx = dinp + (size_t)r * d;
#pragma unroll
        for (int k = 0; k < RMS_MAX_COLS; k++) {
            int c = threadIdx.x + k * blockDim.x;
            if (c < d) {
                float g = rs * wv[k] * gv[k] - coef * xv[k];
                dx[c] = tobf(ldf(dx + c) + g);
                dwp[k] += gv[k] * xv[k] * rs;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < RMS_MAX_COLS; k++) {
        int c = threadIdx.x + k * blockDim.x;
        if (c < d) dw_part[(size_t)blockIdx.x * d + c] = dwp[k];
    }
}

static void cuda_rmsnorm_fwd(gt_backend *b, gt_stream *s, void *out, float *rstd,
                             const void *inp, const void *w, int N, int d, float eps) {
    if (b->planning || N <= 0 || d <= 0) return;
    int rows_per_block = DENSE_THREADS / 32;
    k_rmsnorm_fwd<<<(N + rows_per_block - 1) / rows_per_block, DENSE_THREADS, 0,
                    gt_cuda_stream(s)>>>((bf16 *)out, rstd, (const bf16 *)inp, (const bf16 *)w,
                                         N, d, eps);
    GT_CUDA_LAUNCHED(b, "rmsnorm_fwd");
}

static void cuda_rmsnorm_bwd(gt_backend *b, gt_stream *s, void *dinp, float *dw,
                             const void *dout, const void *inp, const void *w,
                             const float *rstd, int N, int d) {
    if (d > DENSE_THREADS * RMS_MAX_COLS) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED, "rmsnorm_bwd: d=%d exceeds the kernel's %d", d,
                        DENSE_THREADS * RMS_MAX_COLS);
        return;
    }
    int blocks = (N + RMS_BWD_ROWS - 1) / RMS_BWD_ROWS;
    float *part = (float *)gt_cuda_scratch(b, GT_SCRATCH_RMSNORM,
                                           (size_t)blocks * d * sizeof(float), "rmsnorm_bwd");
    if (!part || N <= 0 || d <= 0) return;
    k_rmsnorm_bwd<<<blocks, DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)dinp, part, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, rstd, N, d);
    k_colsum_final<<<(d + DENSE_THREADS - 1) / DENSE_THREADS, DENSE_THREADS, 0,
                     gt_cuda_stream(s)>>>(dw, part, blocks, d);
    GT_CUDA_LAUNCHED(b, "rmsnorm_bwd");
}

/* ---- add, dropout, swiglu ---- */

__global__ void k_add(bf16 *out, const bf16 *a, const bf16 *x, size_t n) {
    GT_GRID_STRIDE(i, n) out[i] = tobf(ldf(a + i) + ldf(x + i));
}

static void cuda_add(gt_backend *b, gt_stream *s, void *out, const void *a, const void *x,
                     size_t n) {
    if (b->planning || n == 0) return;
    k_add<<<gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)out, (const bf16 *)a, (const bf16 *)x, n);
    GT_CUDA_LAUNCHED(b, "add");
}

__global__ void k_dropout(bf16 *out, const bf16 *in, size_t n, float p, uint64_t seed,
                          uint32_t site, const gt_step_state *st) {
    uint32_t micro = (uint32_t)st->micro, step = (uint32_t)st->step;
    float scale = 1.0f / (1.0f - p);
    GT_GRID_STRIDE(i, n) {
        int keep = gt_dropout_keep(seed, site, micro, step, i, p);
        out[i] = tobf(keep ? ldf(in + i) * scale : 0.0f);
    }
}

static void dropout_run(gt_backend *b, gt_stream *s, const char *what, void *out,
                        const void *in, size_t n, float p, gt_rng_site site,
                        const gt_step_state *st) {
    if (b->planning || n == 0) return;
    if (!(p >= 0.0f && p < 1.0f) || !st) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: p must be in [0, 1) with a step state, got %g",
                        what, (double)p);
        return;
    }
    if (p == 0.0f) {
        if (out != in)
            GT_CUDA_OP(b, cudaMemcpyAsync(out, in, n * 2, cudaMemcpyDeviceToDevice,
                                          gt_cuda_stream(s)));
        return;
    }
    k_dropout<<<gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)out, (const bf16 *)in, n, p, site.seed, site.site, st);
    GT_CUDA_LAUNCHED(b, what);
}

static void cuda_dropout_fwd(gt_backend *b, gt_stream *s, void *out, const void *in, size_t n,
                             float p, gt_rng_site site, const gt_step_state *st) {
    dropout_run(b, s, "dropout_fwd", out, in, n, p, site, st);
}
static void cuda_dropout_bwd(gt_backend *b, gt_stream *s, void *dx, const void *dy, size_t n,
                             float p, gt_rng_site site, const gt_step_state *st) {
    dropout_run(b, s, "dropout_bwd", dx, dy, n, p, site, st);
}

__global__ void k_swiglu_fwd(bf16 *out, const bf16 *gu, int N, int f) {
    size_t total = (size_t)N * f;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / f, c = i % f;
        float g = ldf(gu + n * 2 * f + c), u = ldf(gu + n * 2 * f + f + c);
        out[i] = tobf(g / (1.0f + expf(-g)) * u);
    }
}
__global__ void k_swiglu_bwd(bf16 *dgu, const bf16 *dout, const bf16 *gu, int N, int f) {
    size_t total = (size_t)N * f;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / f, c = i % f;
        float g = ldf(gu + n * 2 * f + c), u = ldf(gu + n * 2 * f + f + c), dy = ldf(dout + i);
        float sg = 1.0f / (1.0f + expf(-g));
        dgu[n * 2 * f + c] = tobf(dy * u * sg * (1.0f + g * (1.0f - sg)));
        dgu[n * 2 * f + f + c] = tobf(dy * g * sg);
    }
}

static void cuda_swiglu_fwd(gt_backend *b, gt_stream *s, void *out, const void *gu, int N,
                            int f) {
    if (b->planning || N <= 0 || f <= 0) return;
    size_t total = (size_t)N * f;
    k_swiglu_fwd<<<gt_grid(total, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)out, (const bf16 *)gu, N, f);
    GT_CUDA_LAUNCHED(b, "swiglu_fwd");
}
static void cuda_swiglu_bwd(gt_backend *b, gt_stream *s, void *dgu, const void *dout,
                            const void *gu, int N, int f) {
    if (b->planning || N <= 0 || f <= 0) return;
    size_t total = (size_t)N * f;
    k_swiglu_bwd<<<gt_grid(total, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_stream(s)>>>(
        (bf16 *)dgu, (const bf16 *)dout, (const bf16 *)gu, N, f);
    GT_CUDA_LAUNCHED(b, "swiglu_bwd");
}

/* ---- cross entropy: one block per row, online softmax, dlogits written in place ---- */

__global__ void k_cross_entropy(float *losses, bf16 *dlogits, const bf16 *logits,
                                const int32_t *targets, int V, float dscale) {
    __shared__ float sh_m[CE_THREADS / 32], sh_s[CE_THREADS / 32];
    __shared__ float sh_tl;
    int n = blockIdx.x;
    const bf16 *x = logits + (size_t)n * V;
    int t = targets[n];
    int valid = t >= 0 && t < V;
    if (threadIdx.x == 0) sh_tl = valid ? ldf(x + t) : 0.0f;
    float m = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = ldf(x + j);
        if (v > m) {
            sum = sum * expf(m - v) + 1.0f;
            m = v;
        } else {
            sum += expf(v - m);
        }
    }
    /* combine (m, sum) pairs: a fixed butterfly in the warp, then warps in order */
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, sum, o);
        float mm = fmaxf(m, m2);
        sum = (m == -INFINITY ? 0.0f : sum * expf(m - mm)) +
              (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
        m = mm;
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) {
        sh_m[wid] = m;
        sh_s[wid] = sum;
    }
    __syncthreads();
    float M = -INFINITY, S = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
        float mm = fmaxf(M, sh_m[w]);
        S = (M == -INFINITY ? 0.0f : S * expf(M - mm)) +
            (sh_m[w] == -INFINITY ? 0.0f : sh_s[w] * expf(sh_m[w] - mm));
        M = mm;
    }
    float lse = M + logf(S);
    if (threadIdx.x == 0) losses[n] = valid ? lse - sh_tl : 0.0f;
    bf16 *dx = dlogits + (size_t)n * V;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float g = valid ? (expf(ldf(x + j) - lse) - (j == t ? 1.0f : 0.0f)) * dscale : 0.0f;
        dx[j] = tobf(g);
    }
}

static void cuda_cross_entropy(gt_backend *b, gt_stream *s, float *losses, void *dlogits,
                               const void *logits, const int32_t *targets, int N, int V,
                               float dscale) {
    if (b->planning || N <= 0 || V <= 0) return;
    k_cross_entropy<<<N, CE_THREADS, 0, gt_cuda_stream(s)>>>(
        losses, (bf16 *)dlogits, (const bf16 *)logits, targets, V, dscale);
    GT_CUDA_LAUNCHED(b, "cross_entropy");
}

__global__ void k_loss_accumulate(gt_step_state *st, const float *losses, int N, float scale) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) acc += losses[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) st->loss += (float)(scale * acc);
}

static void cuda_loss_accumulate(gt_backend *b, gt_stream *s, gt_step_state *st,
                                 const float *losses, int N, float scale) {
    if (b->planning) return;
    k_loss_accumulate<<<1, LOSS_THREADS, 0, gt_cuda_stream(s)>>>(st, losses, N, scale);
    GT_CUDA_LAUNCHED(b, "loss_accumulate");
}

extern "C" int gt_cuda_dense_init(gt_error *err) {
    cudaError_t e = cudaFuncSetAttribute(k_embedding_sort,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         EMB_SORT_SHARED_MAX * (int)sizeof(uint64_t));
    if (e != cudaSuccess)
        return gt_error_set(err, GT_ERR_DEVICE, "cudaFuncSetAttribute(embedding sort): %s",
                            cudaGetErrorString(e));
    return GT_OK;
}

extern "C" void gt_cuda_register_dense_ops(gt_backend_ops *ops) {
    ops->to_float = cuda_to_float;
    ops->from_float = cuda_from_float;
    ops->embedding_fwd = cuda_embedding_fwd;
    ops->embedding_bwd = cuda_embedding_bwd;
    ops->rmsnorm_fwd = cuda_rmsnorm_fwd;
    ops->rmsnorm_bwd = cuda_rmsnorm_bwd;
    ops->add = cuda_add;
    ops->dropout_fwd = cuda_dropout_fwd;
    ops->dropout_bwd = cuda_dropout_bwd;
    ops->swiglu_fwd = cuda_swiglu_fwd;
    ops->swiglu_bwd = cuda_swiglu_bwd;
    ops->cross_entropy = cuda_cross_entropy;
    ops->loss_accumulate = cuda_loss_accumulate;
}
