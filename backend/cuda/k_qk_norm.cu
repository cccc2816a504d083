/* Per-head q/k RMSNorm of the CUDA backend (model.qk_layernorm, Qwen3's q_norm / k_norm), in
 * place on the q and k heads of the qkv buffer between the QKV GEMM and rope. Forward: a warp
 * per (token, head). Backward: a block per weight-gradient partial row (gt_rmsnorm_parts(N)
 * blocks, as the rmsnorm backward), each warp taking the block's (token, head) pairs in a fixed
 * stride and keeping its dw partial in registers; the warps' partials are then added in warp
 * order, so dqw and dkw are deterministic without atomics. bf16 I/O, fp32 math. */
#include "backend/cuda/cuda_common.cuh"

#define QK_THREADS 256
#define QK_WARPS (QK_THREADS / 32)
#define QK_MAX_HD 256 /* head sizes up to this; the attention kernels take 64 and 128 */
#define QK_PER_LANE (QK_MAX_HD / 32)

__global__ void k_qk_norm_fwd(bf16 *qkv, bf16 *raw, float *rstd, const bf16 *qw, const bf16 *kw,
                              int N, int H, int KV, int hd, float eps) {
    GT_PDL_ENTRY();
    int heads = H + KV;
    long pair = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (pair >= (long)N * heads) return;
    int n = (int)(pair / heads), h = (int)(pair % heads);
    bf16 *x = qkv + (size_t)n * (H + 2 * KV) * hd + (size_t)h * hd;
    const bf16 *w = h < H ? qw : kw;
    float v[QK_PER_LANE], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < QK_PER_LANE; j++) {
        int c = lane + 32 * j;
        v[j] = c < hd ? ldf(x + c) : 0.0f;
        ss += v[j] * v[j];
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)hd + eps);
    bf16 *kept = raw ? raw + (size_t)pair * hd : NULL;
#pragma unroll
    for (int j = 0; j < QK_PER_LANE; j++) {
        int c = lane + 32 * j;
        if (c >= hd) continue;
        if (kept) kept[c] = x[c];
        x[c] = tobf(v[j] * r * ldf(w + c));
    }
    if (rstd && lane == 0) rstd[pair] = r;
}

/* dx = r w dy - r^3 x / hd * sum_j w_j dy_j x_j; dw partial += dy x r. Block p owns tokens
 * [p * rows, (p + 1) * rows); warp k its pairs k, k + QK_WARPS, ... in token-major order. */
__global__ void __launch_bounds__(QK_THREADS)
    k_qk_norm_bwd(bf16 *dqkv, float *qpart, float *kpart, const bf16 *raw, const float *rstd,
                  const bf16 *qw, const bf16 *kw, int N, int H, int KV, int hd, int rows) {
    GT_PDL_ENTRY();
    __shared__ float sh[QK_WARPS][2][QK_MAX_HD];
    int heads = H + KV, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int t0 = blockIdx.x * rows, t1 = min(N, t0 + rows);
    float aq[QK_PER_LANE], ak[QK_PER_LANE], wq[QK_PER_LANE], wk[QK_PER_LANE];
#pragma unroll
    for (int j = 0; j < QK_PER_LANE; j++) {
        int c = lane + 32 * j;
        aq[j] = ak[j] = 0.0f;
        wq[j] = c < hd ? ldf(qw + c) : 0.0f;
        wk[j] = c < hd ? ldf(kw + c) : 0.0f;
    }
    long p0 = (long)t0 * heads, p1 = t1 > t0 ? (long)t1 * heads : p0;
    for (long pair = p0 + wid; pair < p1; pair += QK_WARPS) {
        int n = (int)(pair / heads), h = (int)(pair % heads), isk = h >= H;
        bf16 *dy = dqkv + (size_t)n * (H + 2 * KV) * hd + (size_t)h * hd;
        const bf16 *x = raw + (size_t)pair * hd;
        float r = rstd[pair], xv[QK_PER_LANE], gv[QK_PER_LANE], dot = 0.0f;
#pragma unroll
        for (int j = 0; j < QK_PER_LANE; j++) {
            int c = lane + 32 * j;
            xv[j] = c < hd ? ldf(x + c) : 0.0f;
            gv[j] = c < hd ? ldf(dy + c) : 0.0f;
            dot += (isk ? wk[j] : wq[j]) * gv[j] * xv[j];
        }
        dot = warp_sum(dot);
        float coef = r * r * r * dot / (float)hd;
#pragma unroll
        for (int j = 0; j < QK_PER_LANE; j++) {
            int c = lane + 32 * j;
            if (c >= hd) continue;
            dy[c] = tobf(r * (isk ? wk[j] : wq[j]) * gv[j] - coef * xv[j]);
            if (isk)
                ak[j] += gv[j] * xv[j] * r;
            else
                aq[j] += gv[j] * xv[j] * r;
        }
    }
#pragma unroll
    for (int j = 0; j < QK_PER_LANE; j++) {
        int c = lane + 32 * j;
        if (c < hd) {
            sh[wid][0][c] = aq[j];
            sh[wid][1][c] = ak[j];
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * hd; c += blockDim.x) {
        int kind = c >= hd, col = c - kind * hd;
        float t = 0.0f;
        for (int k = 0; k < QK_WARPS; k++)
            t += sh[k][kind][col];
        (kind ? kpart : qpart)[(size_t)blockIdx.x * hd + col] = t;
    }
}

static int qk_shape_ok(gt_backend *b, const char *op, int N, int H, int KV, int hd) {
    if (H <= 0 || KV <= 0 || hd <= 0 || N < 0) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: bad shape N=%d H=%d KV=%d hd=%d", op, N, H, KV, hd);
        return 0;
    }
    if (hd > QK_MAX_HD) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED, "%s: head size %d exceeds the kernel's %d", op, hd,
                        QK_MAX_HD);
        return 0;
    }
    return 1;
}

static void cuda_qk_norm_fwd(gt_backend *b, gt_stream *s, void *qkv, void *raw, float *rstd,
                             const void *qw, const void *kw, int N, int H, int KV, int hd,
                             float eps) {
    if (!qk_shape_ok(b, "qk_norm_fwd", N, H, KV, hd) || b->planning || N == 0) return;
    size_t warps = (size_t)N * (size_t)(H + KV);
    unsigned grid = (unsigned)((warps + QK_WARPS - 1) / QK_WARPS);
    gt_launch(k_qk_norm_fwd, grid, QK_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)qkv, (bf16 *)raw, rstd,
              (const bf16 *)qw, (const bf16 *)kw, N, H, KV, hd, eps);
    GT_CUDA_LAUNCHED(b, "qk_norm_fwd");
}

static void cuda_qk_norm_bwd_part(gt_backend *b, gt_stream *s, void *dqkv, float *qpart,
                                  float *kpart, const void *raw, const float *rstd, const void *qw,
                                  const void *kw, int N, int H, int KV, int hd) {
    if (!qk_shape_ok(b, "qk_norm_bwd_part", N, H, KV, hd) || b->planning || N == 0) return;
    int parts = gt_rmsnorm_parts(N), rows = (N + parts - 1) / parts;
    gt_launch(k_qk_norm_bwd, parts, QK_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)dqkv, qpart, kpart,
              (const bf16 *)raw, rstd, (const bf16 *)qw, (const bf16 *)kw, N, H, KV, hd, rows);
    GT_CUDA_LAUNCHED(b, "qk_norm_bwd_part");
}

extern "C" void gt_cuda_register_qk_norm_ops(gt_backend_ops *ops) {
    ops->qk_norm_fwd = cuda_qk_norm_fwd;
    ops->qk_norm_bwd_part = cuda_qk_norm_bwd_part;
}
