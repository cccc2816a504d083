/* Loss kernels of the CUDA backend: cross entropy over bf16 logits (one block per row; up to
 * V = 57344 the row staged in shared memory, else one block per row with an online
 * softmax over two passes; fp32 math, dlogits written in place, ignored targets give 0) and the
 * deterministic loss sum into the step state. */
#include "backend/cuda/cuda_common.cuh"

#define CE_THREADS 512
#define LOSS_THREADS 1024

/* log-sum-exp of the block from each thread's running (max, sum of exp(x - max)): a fixed
 * butterfly in the warp, then the warps in order (sh_m, sh_s: CE_THREADS / 32 floats each). */
static __device__ __forceinline__ float ce_block_lse(float m, float sum, float *sh_m, float *sh_s) {
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
    return M + logf(S);
}

/* ---- cross entropy: one block per row, online softmax, dlogits written in place ---- */

__global__ void k_cross_entropy(float *losses, bf16 *dlogits, const bf16 *logits,
                                const int32_t *targets, int V, float dscale) {
    GT_PDL_ENTRY();
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
    float lse = ce_block_lse(m, sum, sh_m, sh_s);
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
    GT_PDL_ENTRY();
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
    float lse = ce_block_lse(m, sum, sh_m, sh_s);
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

/* The row staged in shared memory (bf16, V * 2 bytes, V <= CE_SMEM_MAX_V): one read of the
 * logits from memory and one write of the gradient, with no register pressure, so two or
 * three rows share an SM and one row's loads overlap another's arithmetic and stores (with
 * the row in one block's registers an SM held a single row and its phases ran in turn: 2.5
 * TB/s on gpt124m; blocks of a cluster exchanging partial sums paid more in cluster
 * barriers than they saved). Max, then the sum of exponentials, each reduced in a fixed
 * order, then the gradient; exponentials as exp2 of a fused multiply-add. */
#define CE_SMEM_MAX_V 57344
#define CE_LOG2E 1.4426950408889634f

/* 2^x on the special-function unit, results below 2^-126 flushed to zero (one instruction;
 * exp2f adds a denormal fix-up around it). Such terms are below fp32's normal range and add
 * nothing to a sum of exponentials led by exp(0) = 1. */
static __device__ __forceinline__ float ce_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__global__ void __launch_bounds__(CE_THREADS)
    k_cross_entropy_smem(float *losses, bf16 *dlogits, const bf16 *logits, const int32_t *targets,
                         int V, float dscale) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char ce_raw[];
    const uint4 *row = (const uint4 *)ce_raw;
    __shared__ float sh[32];
    int n = blockIdx.x, V8 = V / 8;
    const bf16 *x = logits + (size_t)n * V;
    for (int j = threadIdx.x; j < V8; j += blockDim.x)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                         (uint32_t)__cvta_generic_to_shared(ce_raw + 16 * j)),
                     "l"(x + 8 * j));
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    int t = targets[n];
    int valid = t >= 0 && t < V;
    __syncthreads();
    float m = -INFINITY;
#pragma unroll 2
    for (int j = threadIdx.x; j < V8; j += blockDim.x) {
        float f[8];
        unpack8(f, row[j]);
#pragma unroll
        for (int k = 0; k < 8; k++)
            m = fmaxf(m, f[k]);
    }
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    float M = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        M = fmaxf(M, sh[w]);
    float ml = M * CE_LOG2E, sum = 0.0f;
#pragma unroll 2
    for (int j = threadIdx.x; j < V8; j += blockDim.x) {
        float f[8];
        unpack8(f, row[j]);
#pragma unroll
        for (int k = 0; k < 8; k++)
            sum += ce_exp2(fmaf(f[k], CE_LOG2E, -ml));
    }
    float S = block_sum(sum, sh); /* its first barrier also ends the reads of the maxima */
    float lse = M + logf(S), scale = valid ? dscale / S : 0.0f;
    /* the target's logit from the staged row: in place, x[t] may already hold a gradient */
    if (threadIdx.x == 0)
        losses[n] = valid ? lse - __bfloat162float(((const bf16 *)ce_raw)[t]) : 0.0f;
    bf16 *dx = dlogits + (size_t)n * V;
    int tj = valid ? t : -1; /* softmax - onehot at the target; constant indices keep f in
                              * registers (f[t & 7] put it in local memory) */
#pragma unroll 2
    for (int j = threadIdx.x; j < V8; j += blockDim.x) {
        float f[8];
        unpack8(f, row[j]);
#pragma unroll
        for (int k = 0; k < 8; k++)
            f[k] = ce_exp2(fmaf(f[k], CE_LOG2E, -ml)) * scale - (8 * j + k == tj ? dscale : 0.0f);
        st8(dx + 8 * j, f);
    }
}

extern "C" int gt_cuda_loss_init(gt_error *err) {
    cudaError_t e = cudaFuncSetAttribute(
        k_cross_entropy_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, CE_SMEM_MAX_V * 2);
    if (e != cudaSuccess)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "cudaFuncSetAttribute(cross-entropy shared memory): %s (the kernel "
                            "needs up to %d KiB of shared memory per block)",
                            cudaGetErrorString(e), CE_SMEM_MAX_V * 2 / 1024);
    return GT_OK;
}

static void cuda_cross_entropy(gt_backend *b, gt_stream *s, float *losses, void *dlogits,
                               const void *logits, const int32_t *targets, int N, int V,
                               float dscale) {
    if (b->planning || N <= 0 || V <= 0) return;
    if (V % 8 == 0 && al16(logits) && al16(dlogits) && V <= CE_SMEM_MAX_V) {
        gt_launch(k_cross_entropy_smem, N, CE_THREADS, (size_t)V * 2, gt_cuda_ex(b, s), losses,
                  (bf16 *)dlogits, (const bf16 *)logits, targets, V, dscale);
        GT_CUDA_LAUNCHED(b, "cross_entropy");
        return;
    }
    if (V % 8 == 0 && al16(logits) && al16(dlogits)) {
        gt_launch(k_cross_entropy8, N, CE_THREADS, 0, gt_cuda_ex(b, s), losses, (bf16 *)dlogits,
                  (const bf16 *)logits, targets, V, dscale);
        GT_CUDA_LAUNCHED(b, "cross_entropy");
        return;
    }
    gt_launch(k_cross_entropy, N, CE_THREADS, 0, gt_cuda_ex(b, s), losses, (bf16 *)dlogits,
              (const bf16 *)logits, targets, V, dscale);
    GT_CUDA_LAUNCHED(b, "cross_entropy");
}

__global__ void k_loss_accumulate(gt_step_state *st, const float *losses, int N, float scale) {
    GT_PDL_ENTRY();
    __shared__ double sh[32];
    double acc = 0.0;
    /* eight loads in flight a thread, added in index order as one at a time would */
    for (int i0 = (int)threadIdx.x; i0 < N; i0 += 8 * (int)blockDim.x) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int i = i0 + k * (int)blockDim.x;
            v[k] = i < N ? losses[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (i0 + k * (int)blockDim.x < N) acc += v[k];
    }
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) st->loss += (float)(scale * acc);
}

static void cuda_loss_accumulate(gt_backend *b, gt_stream *s, gt_step_state *st,
                                 const float *losses, int N, float scale) {
    if (b->planning) return;
    gt_launch(k_loss_accumulate, 1, LOSS_THREADS, 0, gt_cuda_ex(b, s), st, losses, N, scale);
    GT_CUDA_LAUNCHED(b, "loss_accumulate");
}

extern "C" void gt_cuda_register_loss_ops(gt_backend_ops *ops) {
    ops->cross_entropy = cuda_cross_entropy;
    ops->loss_accumulate = cuda_loss_accumulate;
}
