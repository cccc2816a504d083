/* Loss kernels of the CUDA backend: cross entropy over bf16 logits (up to V = 65536 a cluster
 * of eight blocks per row with the row in registers, else one block per row with an online
 * softmax over two passes; fp32 math, dlogits written in place, ignored targets give 0) and the
 * deterministic loss sum into the step state. */
#include <cooperative_groups.h>

#include "backend/cuda/cuda_common.cuh"

namespace cg = cooperative_groups;

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

/* A cluster of CE_CLUSTER blocks per row, each holding its part of the row in registers: one
 * read of the logits from memory, one write of the gradient, and one exponential per logit
 * (kept from the sum for the gradient). The kernel was arithmetic-bound before (two
 * exponentials, unpacking twice and a target compare per logit: 2.5 TB/s on gpt124m). The
 * blocks of a row exchange their maxima, then their sums of exponentials, through
 * distributed shared memory, each combined in rank order. */
#define CE_CLUSTER 8
#define CE_CL_THREADS 256
#define CE_LOG2E 1.4426950408889634f

template <int C>
__global__ void __cluster_dims__(CE_CLUSTER, 1, 1) __launch_bounds__(CE_CL_THREADS)
    k_cross_entropy_cl(float *losses, bf16 *dlogits, const bf16 *logits, const int32_t *targets,
                       int V, float dscale) {
    __shared__ float sh[CE_CL_THREADS / 32];
    __shared__ float part[2]; /* this block's max, then its sum */
    cg::cluster_group cl = cg::this_cluster();
    int rank = (int)cl.block_rank();
    int n = blockIdx.x / CE_CLUSTER, V8 = V / 8, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int j0 = rank * CE_CL_THREADS * C + threadIdx.x;
    const bf16 *x = logits + (size_t)n * V;
    int t = targets[n];
    int valid = t >= 0 && t < V;
    float e[C][8];
    {
        uint4 r[C];
#pragma unroll
        for (int c = 0; c < C; c++) {
            int j = j0 + c * CE_CL_THREADS;
            r[c] = j < V8 ? *(const uint4 *)(x + 8 * j) : make_uint4(0, 0, 0, 0);
        }
        float m = -INFINITY;
#pragma unroll
        for (int c = 0; c < C; c++) {
            unpack8(e[c], r[c]); /* the logits, until they become exponentials */
            if (j0 + c * CE_CL_THREADS < V8)
#pragma unroll
                for (int k = 0; k < 8; k++)
                    m = fmaxf(m, e[c][k]);
        }
        m = warp_max(m);
        if (lane == 0) sh[wid] = m;
    }
    float tl = valid && rank == 0 && threadIdx.x == 0 ? ldf(x + t) : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = sh[0];
        for (int w = 1; w < CE_CL_THREADS / 32; w++)
            bm = fmaxf(bm, sh[w]);
        part[0] = bm;
    }
    cl.sync();
    float M = -INFINITY;
#pragma unroll
    for (int q = 0; q < CE_CLUSTER; q++)
        M = fmaxf(M, *cl.map_shared_rank(&part[0], q));
    float ml = M * CE_LOG2E, sum = 0.0f;
#pragma unroll
    for (int c = 0; c < C; c++) {
        bool in = j0 + c * CE_CL_THREADS < V8;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            e[c][k] = in ? exp2f(fmaf(e[c][k], CE_LOG2E, -ml)) : 0.0f;
            sum += e[c][k];
        }
    }
    float bs = block_sum(sum, sh);
    if (threadIdx.x == 0) part[1] = bs;
    cl.sync();
    float S = 0.0f;
#pragma unroll
    for (int q = 0; q < CE_CLUSTER; q++)
        S += *cl.map_shared_rank(&part[1], q);
    cl.sync(); /* no block leaves while another still reads its shared memory */
    float lse = M + logf(S), scale = valid ? dscale / S : 0.0f;
    if (rank == 0 && threadIdx.x == 0) losses[n] = valid ? lse - tl : 0.0f;
    bf16 *dx = dlogits + (size_t)n * V;
#pragma unroll
    for (int c = 0; c < C; c++) {
        int j = j0 + c * CE_CL_THREADS;
        if (j >= V8) continue;
        float g[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            g[k] = e[c][k] * scale;
        if (valid && j == (t >> 3)) g[t & 7] -= dscale; /* softmax - onehot at the target */
        st8(dx + 8 * j, g);
    }
}

static void cuda_cross_entropy(gt_backend *b, gt_stream *s, float *losses, void *dlogits,
                               const void *logits, const int32_t *targets, int N, int V,
                               float dscale) {
    if (b->planning || N <= 0 || V <= 0) return;
    if (V % 8 == 0 && al16(logits) && al16(dlogits) && V <= 8 * CE_CLUSTER * CE_CL_THREADS * 4) {
        int chunks = (V / 8 + CE_CLUSTER * CE_CL_THREADS - 1) / (CE_CLUSTER * CE_CL_THREADS);
        cudaStream_t cs = gt_cuda_stream(s);
        const bf16 *lg = (const bf16 *)logits;
        unsigned grid = (unsigned)N * CE_CLUSTER;
        if (chunks <= 1)
            k_cross_entropy_cl<1>
                <<<grid, CE_CL_THREADS, 0, cs>>>(losses, (bf16 *)dlogits, lg, targets, V, dscale);
        else if (chunks <= 2)
            k_cross_entropy_cl<2>
                <<<grid, CE_CL_THREADS, 0, cs>>>(losses, (bf16 *)dlogits, lg, targets, V, dscale);
        else
            k_cross_entropy_cl<4>
                <<<grid, CE_CL_THREADS, 0, cs>>>(losses, (bf16 *)dlogits, lg, targets, V, dscale);
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
