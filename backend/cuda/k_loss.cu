/* Loss kernels of the CUDA backend: cross entropy over bf16 logits (one block per row, the row
 * in registers up to V = 65536, else an online softmax over two passes; fp32 math, dlogits
 * written in place, ignored targets give 0) and the deterministic
 * loss sum into the step state. */
#include "backend/cuda/cuda_common.cuh"

#define CE_THREADS 512
#define LOSS_THREADS 1024

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

/* The same with 16-byte loads and stores (V % 8 == 0, aligned rows). */
__global__ void k_cross_entropy8(float *losses, bf16 *dlogits, const bf16 *logits,
                                 const int32_t *targets, int V, float dscale) {
    __shared__ float sh_m[CE_THREADS / 32], sh_s[CE_THREADS / 32];
    __shared__ float sh_tl;
    int n = blockIdx.x, V8 = V / 8;
    const bf16 *x = logits + (size_t)n * V;
    int t = targets[n];
    int valid = t >= 0 && t < V;
    if (threadIdx.x == 0) sh_tl = valid ? ldf(x + t) : 0.0f;
    float m = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j < V8; j += blockDim.x) {
        float v[8];
        ld8(v, x + 8 * j);
        float cm = v[0];
#pragma unroll
        for (int k = 1; k < 8; k++)
            cm = fmaxf(cm, v[k]);
        float mn = fmaxf(m, cm);
        sum = (m == -INFINITY ? 0.0f : sum * expf(m - mn));
#pragma unroll
        for (int k = 0; k < 8; k++)
            sum += expf(v[k] - mn);
        m = mn;
    }
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
    for (int j = threadIdx.x; j < V8; j += blockDim.x) {
        float v[8];
        ld8(v, x + 8 * j);
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = valid ? (expf(v[k] - lse) - (8 * j + k == t ? 1.0f : 0.0f)) * dscale : 0.0f;
        st8(dx + 8 * j, v);
    }
}

/* The row held in registers (V <= 8 * CE_THREADS * C): one read of the logits from memory
 * instead of two (the second pass of k_cross_entropy8 misses L2 once many rows are in
 * flight). Max, then the sum of exponentials, each reduced in a fixed order; then the
 * gradient from the registers. */
template <int C>
__global__ void __launch_bounds__(CE_THREADS)
    k_cross_entropy_reg(float *losses, bf16 *dlogits, const bf16 *logits, const int32_t *targets,
                        int V, float dscale) {
    __shared__ float sh[CE_THREADS / 32];
    int n = blockIdx.x, V8 = V / 8, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const bf16 *x = logits + (size_t)n * V;
    int t = targets[n];
    int valid = t >= 0 && t < V;
    uint4 r[C];
#pragma unroll
    for (int c = 0; c < C; c++) {
        int j = threadIdx.x + c * CE_THREADS;
        r[c] = j < V8 ? *(const uint4 *)(x + 8 * j) : make_uint4(0, 0, 0, 0);
    }
    float tl = valid ? ldf(x + t) : 0.0f;
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < C; c++) {
        if (threadIdx.x + c * CE_THREADS >= V8) continue;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&r[c];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h[k]);
            m = fmaxf(m, fmaxf(f.x, f.y));
        }
    }
    m = warp_max(m);
    if (lane == 0) sh[wid] = m;
    __syncthreads();
    float M = sh[0];
#pragma unroll
    for (int w = 1; w < CE_THREADS / 32; w++)
        M = fmaxf(M, sh[w]);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < C; c++) {
        if (threadIdx.x + c * CE_THREADS >= V8) continue;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&r[c];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h[k]);
            sum += __expf(f.x - M) + __expf(f.y - M);
        }
    }
    float S = block_sum(sum, sh); /* its first barrier also ends the reads of the maxima */
    float lse = M + logf(S);
    if (threadIdx.x == 0) losses[n] = valid ? lse - tl : 0.0f;
    bf16 *dx = dlogits + (size_t)n * V;
#pragma unroll
    for (int c = 0; c < C; c++) {
        int j = threadIdx.x + c * CE_THREADS;
        if (j >= V8) continue;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&r[c];
        float g[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h[k]);
            g[2 * k] =
                valid ? (__expf(f.x - lse) - (8 * j + 2 * k == t ? 1.0f : 0.0f)) * dscale : 0.0f;
            g[2 * k + 1] =
                valid ? (__expf(f.y - lse) - (8 * j + 2 * k + 1 == t ? 1.0f : 0.0f)) * dscale
                      : 0.0f;
        }
        st8(dx + 8 * j, g);
    }
}

static void cuda_cross_entropy(gt_backend *b, gt_stream *s, float *losses, void *dlogits,
                               const void *logits, const int32_t *targets, int N, int V,
                               float dscale) {
    if (b->planning || N <= 0 || V <= 0) return;
    if (V % 8 == 0 && al16(logits) && al16(dlogits) && V <= 8 * CE_THREADS * 16) {
        int chunks = (V / 8 + CE_THREADS - 1) / CE_THREADS;
        cudaStream_t cs = gt_cuda_stream(s);
        const bf16 *lg = (const bf16 *)logits;
        if (chunks <= 4)
            k_cross_entropy_reg<4>
                <<<N, CE_THREADS, 0, cs>>>(losses, (bf16 *)dlogits, lg, targets, V, dscale);
        else if (chunks <= 8)
            k_cross_entropy_reg<8>
                <<<N, CE_THREADS, 0, cs>>>(losses, (bf16 *)dlogits, lg, targets, V, dscale);
        else
            k_cross_entropy_reg<16>
                <<<N, CE_THREADS, 0, cs>>>(losses, (bf16 *)dlogits, lg, targets, V, dscale);
        GT_CUDA_LAUNCHED(b, "cross_entropy");
        return;
    }
    if (V % 8 == 0 && al16(logits) && al16(dlogits)) {
        k_cross_entropy8<<<N, CE_THREADS, 0, gt_cuda_stream(s)>>>(
            losses, (bf16 *)dlogits, (const bf16 *)logits, targets, V, dscale);
        GT_CUDA_LAUNCHED(b, "cross_entropy");
        return;
    }
    k_cross_entropy<<<N, CE_THREADS, 0, gt_cuda_stream(s)>>>(
        losses, (bf16 *)dlogits, (const bf16 *)logits, targets, V, dscale);
    GT_CUDA_LAUNCHED(b, "cross_entropy");
}

__global__ void k_loss_accumulate(gt_step_state *st, const float *losses, int N, float scale) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x)
        acc += losses[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) st->loss += (float)(scale * acc);
}

static void cuda_loss_accumulate(gt_backend *b, gt_stream *s, gt_step_state *st,
                                 const float *losses, int N, float scale) {
    if (b->planning) return;
    k_loss_accumulate<<<1, LOSS_THREADS, 0, gt_cuda_stream(s)>>>(st, losses, N, scale);
    GT_CUDA_LAUNCHED(b, "loss_accumulate");
}

extern "C" void gt_cuda_register_loss_ops(gt_backend_ops *ops) {
    ops->cross_entropy = cuda_cross_entropy;
    ops->loss_accumulate = cuda_loss_accumulate;
}
