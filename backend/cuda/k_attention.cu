/* Causal grouped-query attention without a T x T matrix in memory (flash-style tiles with an
 * online softmax), and rotary embeddings. Forward saves lse; backward recomputes the
 * probabilities from it and is deterministic: dK/dV per key tile (looping over the query
 * heads of its group and the query tiles in order) and dQ per query tile in separate kernels,
 * so no float atomics. Dropout masks use the CPU reference's element index
 * ((b*H + h)*T + i)*T + j, so GPU and CPU drop the same probabilities. bf16 I/O, fp32 math;
 * the head size is a compile-time parameter (64 or 128). These fp32 SIMT kernels are the GPU
 * tests' reference, run only with runtime.cuda.attention=reference (or attention_bwd). The
 * choosers of config/kernel_choice.h pick the kernels per planned shape: cuDNN's fused
 * attention (cudnn_attention.c) for the shapes it takes without dropout (its dropout mask is
 * not the Philox mask the CPU reference and these kernels share), k_attention_mma.cu
 * (mma.sync, the same algorithm on tensor cores) for head size 64, and for the backward after
 * cuDNN's forward on compute capability 9.0 k_attention_wgmma.cu. */
#include "backend/cuda/cuda_common.cuh"
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cudnn_attention.h"

#define ATT_BR 64 /* query rows per tile */
#define ATT_BC 64 /* keys per tile */
#define ATT_THREADS 256

/* Loads rows [r0, r0 + 64) of one head (column offset col0) into a float tile with row
 * stride HD + 1; rows past T are zeros. */
template <int HD>
static __device__ __forceinline__ void load_tile(float *dst, const bf16 *src, int row_base, int r0,
                                                 int T, int stride, int col0) {
    for (int idx = threadIdx.x; idx < ATT_BR * HD; idx += blockDim.x) {
        int r = idx / HD, c = idx % HD;
        int t = r0 + r;
        dst[r * (HD + 1) + c] =
            t < T ? ldf(src + (size_t)(row_base + t) * stride + col0 + c) : 0.0f;
    }
}

/* 4x4 block of A[r] . B[c] for r = ty + 16a, c = tx + 16b (A, B tiles of stride HD + 1). */
template <int HD>
static __device__ __forceinline__ void tile_dot(float acc[4][4], const float *A, const float *Bm,
                                                int ty, int tx) {
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            acc[a][c] = 0.0f;
    for (int k = 0; k < HD; k++) {
        float av[4], bv[4];
#pragma unroll
        for (int a = 0; a < 4; a++)
            av[a] = A[(ty + 16 * a) * (HD + 1) + k];
#pragma unroll
        for (int c = 0; c < 4; c++)
            bv[c] = Bm[(tx + 16 * c) * (HD + 1) + k];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[a][c] += av[a] * bv[c];
    }
}

template <int HD>
__global__ void __launch_bounds__(ATT_THREADS)
    k_attn_fwd(bf16 *out, float *lse, const bf16 *qkv, attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + ATT_BR * (HD + 1), *Vs = Ks + ATT_BC * (HD + 1);
    float *Ps = Vs + ATT_BC * (HD + 1); /* [BR][BC + 1] */
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kvh = h / (g.H / g.KV);
    int q0 = qt * ATT_BR, T = g.T, row_base = b * T;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    int orow = tid / 4, oq = tid % 4; /* output row and column phase */
    float acc[HD / 4];
#pragma unroll
    for (int i = 0; i < HD / 4; i++)
        acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    load_tile<HD>(Qs, qkv, row_base, q0, T, g.C, h * HD);
    int last_key = min(T - 1, q0 + ATT_BR - 1);
    for (int k0 = 0; k0 <= last_key; k0 += ATT_BC) {
        __syncthreads();
        load_tile<HD>(Ks, qkv, row_base, k0, T, g.C, (g.H + kvh) * HD);
        load_tile<HD>(Vs, qkv, row_base, k0, T, g.C, (g.H + g.KV + kvh) * HD);
        __syncthreads();
        float s[4][4];
        tile_dot<HD>(s, Qs, Ks, ty, tx);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int i = q0 + ty + 16 * a, j = k0 + tx + 16 * c;
                Ps[(ty + 16 * a) * (ATT_BC + 1) + tx + 16 * c] =
                    (j <= i && j < T) ? s[a][c] * g.scale : -INFINITY;
            }
        __syncthreads();
        /* online softmax of row orow: the 4 threads of the row take 16 columns each */
        int i = q0 + orow;
        float *prow = Ps + orow * (ATT_BC + 1);
        float tmax = -INFINITY;
        for (int c = oq; c < ATT_BC; c += 4)
            tmax = fmaxf(tmax, prow[c]);
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        float mnew = fmaxf(m, tmax);
        float alpha = (m == -INFINITY) ? (mnew == -INFINITY ? 1.0f : 0.0f) : expf(m - mnew);
        float rsum = 0.0f;
        for (int c = oq; c < ATT_BC; c += 4) {
            float sv = prow[c];
            float pv = (sv == -INFINITY) ? 0.0f : expf(sv - mnew);
            rsum += pv;
            prow[c] = pv * drop_mult(g, micro, step, b, h, i, k0 + c);
        }
        rsum += __shfl_xor_sync(0xffffffffu, rsum, 1);
        rsum += __shfl_xor_sync(0xffffffffu, rsum, 2);
        l = l * alpha + rsum;
        m = mnew;
#pragma unroll
        for (int x = 0; x < HD / 4; x++)
            acc[x] *= alpha;
        __syncwarp();
        for (int c = 0; c < ATT_BC; c++) {
            float pv = prow[c];
            const float *vrow = Vs + c * (HD + 1) + oq;
#pragma unroll
            for (int x = 0; x < HD / 4; x++)
                acc[x] += pv * vrow[4 * x];
        }
    }
    int i = q0 + orow;
    if (i < T) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16 *o = out + (size_t)(row_base + i) * (g.H * HD) + h * HD + oq;
#pragma unroll
        for (int x = 0; x < HD / 4; x++)
            o[4 * x] = tobf(acc[x] * inv);
        if (oq == 0) lse[((size_t)b * g.H + h) * T + i] = m + logf(l);
    }
}

/* D[b,h,i] = dO_i . O_i: one warp per row. */
__global__ void k_attn_bwd_pre(float *D, const bf16 *dout, const bf16 *out, int B, int T, int H,
                               int hd) {
    GT_PDL_ENTRY();
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    size_t rows = (size_t)B * H * T;
    if (w >= rows) return;
    int i = (int)(w % T), h = (int)((w / T) % H), b = (int)(w / ((size_t)T * H));
    size_t off = ((size_t)b * T + i) * ((size_t)H * hd) + (size_t)h * hd;
    float acc = 0.0f;
    for (int c = lane; c < hd; c += 32)
        acc += ldf(dout + off + c) * ldf(out + off + c);
    acc = warp_sum(acc);
    if (lane == 0) D[w] = acc;
}

/* The same for hd % 8 == 0 and 16-byte aligned rows: hd / 8 lanes a row, 16-byte loads. */
template <int LPR>
__global__ void k_attn_bwd_pre8(float *D, const bf16 *dout, const bf16 *out, int B, int T, int H) {
    GT_PDL_ENTRY();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, row = t / LPR;
    int part = (int)(t % LPR);
    size_t rows = (size_t)B * H * T;
    float acc = 0.0f;
    if (row < rows) {
        int i = (int)(row % T), h = (int)((row / T) % H), b = (int)(row / ((size_t)T * H));
        size_t off = ((size_t)b * T + i) * ((size_t)H * LPR * 8) + (size_t)h * LPR * 8 + part * 8;
        float x[8], y[8];
        ld8(x, dout + off);
        ld8(y, out + off);
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc += x[j] * y[j];
    }
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o, LPR);
    if (row < rows && part == 0) D[row] = acc;
}

template <int HD>
__global__ void __launch_bounds__(ATT_THREADS)
    k_attn_bwd_dkv(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                   attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + ATT_BC * (HD + 1), *Qs = Vs + ATT_BC * (HD + 1);
    float *dOs = Qs + ATT_BR * (HD + 1);
    float *Ps = dOs + ATT_BR * (HD + 1), *dSs = Ps + ATT_BR * (ATT_BC + 1);
    float *Ls = dSs + ATT_BR * (ATT_BC + 1), *Ds = Ls + ATT_BR;
    int kt = gridDim.x - 1 - blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    int T = g.T, row_base = b * T, k0 = kt * ATT_BC, group = g.H / g.KV;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    int krow = tid / 4, kq = tid % 4;
    float dk[HD / 4], dv[HD / 4];
#pragma unroll
    for (int x = 0; x < HD / 4; x++)
        dk[x] = dv[x] = 0.0f;
    load_tile<HD>(Ks, qkv, row_base, k0, T, g.C, (g.H + kvh) * HD);
    load_tile<HD>(Vs, qkv, row_base, k0, T, g.C, (g.H + g.KV + kvh) * HD);
    int HO = g.H * HD;
    for (int hh = 0; hh < group; hh++) {
        int h = kvh * group + hh;
        for (int q0 = k0; q0 < T; q0 += ATT_BR) {
            __syncthreads();
            load_tile<HD>(Qs, qkv, row_base, q0, T, g.C, h * HD);
            load_tile<HD>(dOs, dout, row_base, q0, T, HO, h * HD);
            for (int r = tid; r < ATT_BR; r += blockDim.x) {
                int i = q0 + r;
                size_t li = ((size_t)b * g.H + h) * T + i;
                Ls[r] = i < T ? lse[li] : 0.0f;
                Ds[r] = i < T ? D[li] : 0.0f;
            }
            __syncthreads();
            float s[4][4], dp[4][4];
            tile_dot<HD>(s, Qs, Ks, ty, tx);
            tile_dot<HD>(dp, dOs, Vs, ty, tx);
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    int r = ty + 16 * a, cc = tx + 16 * c;
                    float pd, ds;
                    p_ds(g, micro, step, b, h, q0 + r, k0 + cc, s[a][c], dp[a][c], Ls[r], Ds[r],
                         &pd, &ds);
                    Ps[r * (ATT_BC + 1) + cc] = pd;
                    dSs[r * (ATT_BC + 1) + cc] = ds;
                }
            __syncthreads();
            for (int r = 0; r < ATT_BR; r++) {
                float pv = Ps[r * (ATT_BC + 1) + krow], dsv = dSs[r * (ATT_BC + 1) + krow];
                const float *dorow = dOs + r * (HD + 1) + kq, *qrow = Qs + r * (HD + 1) + kq;
#pragma unroll
                for (int x = 0; x < HD / 4; x++) {
                    dv[x] += pv * dorow[4 * x];
                    dk[x] += dsv * qrow[4 * x];
                }
            }
        }
    }
    int j = k0 + krow;
    if (j < T) {
        bf16 *dkp = dqkv + (size_t)(row_base + j) * g.C + (g.H + kvh) * HD + kq;
        bf16 *dvp = dqkv + (size_t)(row_base + j) * g.C + (g.H + g.KV + kvh) * HD + kq;
#pragma unroll
        for (int x = 0; x < HD / 4; x++) {
            dkp[4 * x] = tobf(dk[x] * g.scale);
            dvp[4 * x] = tobf(dv[x]);
        }
    }
}

template <int HD>
__global__ void __launch_bounds__(ATT_THREADS)
    k_attn_bwd_dq(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                  attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + ATT_BR * (HD + 1), *Ks = dOs + ATT_BR * (HD + 1);
    float *Vs = Ks + ATT_BC * (HD + 1), *dSs = Vs + ATT_BC * (HD + 1);
    float *Ls = dSs + ATT_BR * (ATT_BC + 1), *Ds = Ls + ATT_BR;
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kvh = h / (g.H / g.KV);
    int T = g.T, row_base = b * T, q0 = qt * ATT_BR;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    int qrow = tid / 4, qq = tid % 4;
    float dq[HD / 4];
#pragma unroll
    for (int x = 0; x < HD / 4; x++)
        dq[x] = 0.0f;
    load_tile<HD>(Qs, qkv, row_base, q0, T, g.C, h * HD);
    load_tile<HD>(dOs, dout, row_base, q0, T, g.H * HD, h * HD);
    for (int r = tid; r < ATT_BR; r += blockDim.x) {
        int i = q0 + r;
        size_t li = ((size_t)b * g.H + h) * T + i;
        Ls[r] = i < T ? lse[li] : 0.0f;
        Ds[r] = i < T ? D[li] : 0.0f;
    }
    int last_key = min(T - 1, q0 + ATT_BR - 1);
    for (int k0 = 0; k0 <= last_key; k0 += ATT_BC) {
        __syncthreads();
        load_tile<HD>(Ks, qkv, row_base, k0, T, g.C, (g.H + kvh) * HD);
        load_tile<HD>(Vs, qkv, row_base, k0, T, g.C, (g.H + g.KV + kvh) * HD);
        __syncthreads();
        float s[4][4], dp[4][4];
        tile_dot<HD>(s, Qs, Ks, ty, tx);
        tile_dot<HD>(dp, dOs, Vs, ty, tx);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int r = ty + 16 * a, cc = tx + 16 * c;
                float pd, ds;
                p_ds(g, micro, step, b, h, q0 + r, k0 + cc, s[a][c], dp[a][c], Ls[r], Ds[r], &pd,
                     &ds);
                dSs[r * (ATT_BC + 1) + cc] = ds;
            }
        __syncthreads();
        const float *dsrow = dSs + qrow * (ATT_BC + 1);
        for (int c = 0; c < ATT_BC; c++) {
            float dsv = dsrow[c];
            const float *krow = Ks + c * (HD + 1) + qq;
#pragma unroll
            for (int x = 0; x < HD / 4; x++)
                dq[x] += dsv * krow[4 * x];
        }
    }
    int i = q0 + qrow;
    if (i < T) {
        bf16 *dqp = dqkv + (size_t)(row_base + i) * g.C + h * HD + qq;
#pragma unroll
        for (int x = 0; x < HD / 4; x++)
            dqp[4 * x] = tobf(dq[x] * g.scale);
    }
}

static size_t fwd_smem(int hd) {
    return sizeof(float) * ((size_t)ATT_BR * (hd + 1) + 2 * (size_t)ATT_BC * (hd + 1) +
                            (size_t)ATT_BR * (ATT_BC + 1));
}
static size_t dkv_smem(int hd) {
    return sizeof(float) * ((size_t)2 * ATT_BC * (hd + 1) + 2 * (size_t)ATT_BR * (hd + 1) +
                            2 * (size_t)ATT_BR * (ATT_BC + 1) + 2 * ATT_BR);
}
static size_t dq_smem(int hd) {
    return sizeof(float) * ((size_t)2 * ATT_BR * (hd + 1) + 2 * (size_t)ATT_BC * (hd + 1) +
                            (size_t)ATT_BR * (ATT_BC + 1) + 2 * ATT_BR);
}

static int attn_check(gt_backend *b, const char *what, int B, int T, int H, int KV, int hd, float p,
                      const gt_step_state *st) {
    if (B <= 0 || T <= 0 || H <= 0 || KV <= 0 || H % KV != 0 || hd <= 0 || hd % 8 != 0) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: bad shape B=%d T=%d H=%d KV=%d hd=%d (H must be a multiple of KV "
                        "and hd of 8)",
                        what, B, T, H, KV, hd);
        return 0;
    }
    if (!(p >= 0.0f && p < 1.0f) || !st) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: attention dropout must be in [0, 1) with a step state, got %g", what,
                        (double)p);
        return 0;
    }
    return 1;
}

static attn_geo make_geo(int B, int T, int H, int KV, int hd, float p, gt_rng_site site) {
    attn_geo g;
    g.B = B, g.T = T, g.H = H, g.KV = KV, g.C = (H + 2 * KV) * hd;
    g.scale = 1.0f / sqrtf((float)hd);
    g.p = p;
    g.keep_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    g.seed = site.seed;
    g.site = site.site;
    return g;
}

static int ptr_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* The kernels of both directions for one shape, from the choosers (config/kernel_choice.h). */
static int attn_choose(const gt_cuda_impl *im, const gt_attn_shape *sh, gt_kernel *fwd,
                       gt_kernel *bwd, gt_error *err) {
    int rc = gt_choose_attention_fwd(&im->caps, im->opts.attention, sh, fwd, err);
    if (!rc) rc = gt_choose_attention_bwd(&im->caps, im->opts.attention_bwd, *fwd, sh, bwd, err);
    return rc;
}

/* cuDNN's plans of a shape (the backward's too when with_bwd) and their workspace; 0 when
 * cuDNN builds none (err says why). */
static int cudnn_plan(gt_cuda_impl *im, gt_stream *s, const gt_cuda_attn_plan *pl, int with_bwd,
                      size_t *bytes, gt_error *err) {
    if (!im->cudnn &&
        gt_cudnn_attn_create((gt_cudnn_attn **)&im->cudnn, gt_cuda_stream(s), err) != GT_OK) {
        im->cudnn = NULL;
        return 0;
    }
    return gt_cudnn_attn_plan((gt_cudnn_attn *)im->cudnn, pl->B, pl->T, pl->H, pl->KV, pl->hd,
                              with_bwd, bytes, err) == GT_OK;
}

/* The plan of an attention call into *out: the kernels the choosers gave its shape. While
 * planning, a new shape is chosen once (and cuDNN plans it when chosen; a shape cuDNN builds
 * no plan for is chosen again knowing that) and kept; in a step the plan is looked up, and a
 * shape that was not planned is chosen now unless its kernels need a plan (cuDNN). Both
 * directions use the same plan, so planning and launch cannot disagree. Returns nonzero
 * after raising a sticky error. */
static int attn_plan(gt_backend *b, gt_stream *s, const char *what, int B, int T, int H, int KV,
                     int hd, float p, gt_cuda_attn_plan *out) {
    gt_cuda_impl *im = (gt_cuda_impl *)b->impl;
    for (int i = 0; i < im->n_attn_plans; i++) {
        const gt_cuda_attn_plan *q = &im->attn_plans[i];
        if (q->B == B && q->T == T && q->H == H && q->KV == KV && q->hd == hd && q->p == p) {
            *out = *q;
            return 0;
        }
    }
    gt_cuda_attn_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.B = B, pl.T = T, pl.H = H, pl.KV = KV, pl.hd = hd, pl.p = p;
    gt_attn_shape sh = {T, hd, p, 0};
    gt_kernel fwd, bwd;
    gt_error err;
    memset(&err, 0, sizeof err);
    if (attn_choose(im, &sh, &fwd, &bwd, &err)) {
        gt_backend_fail(b, err.code, "%s: %s", what, err.msg);
        return 1;
    }
    if (fwd == GT_KERNEL_CUDNN || bwd == GT_KERNEL_CUDNN) {
        if (!b->planning) {
            gt_backend_fail(b, GT_ERR_INVALID,
                            "%s with B=%d T=%d H=%d KV=%d hd=%d was not planned, and cuDNN "
                            "(runtime.cuda.attention) needs a plan: run the op once while "
                            "b->planning is set (the trainer's planning pass), then plan_finish",
                            what, B, T, H, KV, hd);
            return 1;
        }
        gt_error why;
        memset(&why, 0, sizeof why);
        if (cudnn_plan(im, s, &pl, bwd == GT_KERNEL_CUDNN, &pl.ws_bytes, &why)) {
            /* planned */
        } else {
            sh.cudnn_declined = 1;
            if (attn_choose(im, &sh, &fwd, &bwd, &err)) {
                gt_backend_fail(b, err.code, "%s: %s (cuDNN: %s)", what, err.msg, why.msg);
                return 1;
            }
            pl.ws_bytes = 0;
        }
    }
    pl.fwd = fwd, pl.bwd = bwd;
    *out = pl;
    if (!b->planning) return 0;
    if (im->n_attn_plans == im->cap_attn_plans) {
        int cap = im->cap_attn_plans ? 2 * im->cap_attn_plans : 8;
        gt_cuda_attn_plan *np =
            (gt_cuda_attn_plan *)realloc(im->attn_plans, (size_t)cap * sizeof *np);
        if (!np) {
            gt_backend_fail(b, GT_ERR_NOMEM, "out of host memory planning %s", what);
            return 1;
        }
        im->attn_plans = np;
        im->cap_attn_plans = cap;
    }
    im->attn_plans[im->n_attn_plans++] = pl;
    return 0;
}

/* The cuDNN workspace of a shape whose forward is cuDNN's: recorded while planning (both
 * directions reserve it), else the region; NULL while planning or after a sticky error. */
static void *cudnn_ws(gt_backend *b, const gt_cuda_attn_plan *pl) {
    return gt_cuda_scratch(b, GT_SCRATCH_CUDNN, pl->ws_bytes ? pl->ws_bytes : 256,
                           "attention (cuDNN workspace)");
}

/* A chosen kernel that declined the call at launch: the tensors were not as it needs them. */
static void declined(gt_backend *b, const char *what, gt_kernel k) {
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s (%s): the kernels declined the call (tensors not 16-byte aligned, or the "
                    "driver refused their tensor maps); pass 16-byte aligned tensors, or choose "
                    "other kernels (runtime.cuda.attention, runtime.cuda.attention_bwd)",
                    what, gt_kernel_name(k));
}

static void cuda_attention_fwd(gt_backend *b, gt_stream *s, void *out, float *lse, const void *qkv,
                               int B, int T, int H, int KV, int hd, float p, gt_rng_site site,
                               const gt_step_state *st) {
    if (!attn_check(b, "attention_fwd", B, T, H, KV, hd, p, st)) return;
    gt_cuda_attn_plan pl;
    if (attn_plan(b, s, "attention_fwd", B, T, H, KV, hd, p, &pl)) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    if (pl.fwd == GT_KERNEL_CUDNN) {
        void *ws = cudnn_ws(b, &pl);
        if (b->planning || !ws) return;
        if (!ptr_aligned16(out) || !ptr_aligned16(qkv)) {
            declined(b, "attention_fwd", GT_KERNEL_CUDNN);
            return;
        }
        gt_error err;
        memset(&err, 0, sizeof err);
        if (gt_cudnn_attn_fwd((gt_cudnn_attn *)((gt_cuda_impl *)b->impl)->cudnn, cs.cs, out, lse,
                              qkv, B, T, H, KV, hd, ws, &err))
            gt_backend_fail(b, err.code, "attention_fwd (cuDNN): %s", err.msg);
        return;
    }
    if (b->planning) return;
    attn_geo g = make_geo(B, T, H, KV, hd, p, site);
    if (pl.fwd == GT_KERNEL_MMA) {
        if (gt_cuda_attn_mma_fwd(cs, out, lse, qkv, &g, hd, st))
            GT_CUDA_LAUNCHED(b, "attention_fwd");
        else
            declined(b, "attention_fwd", GT_KERNEL_MMA);
        return;
    }
    /* the reference: head size 64 or 128 (the chooser saw to it) */
    dim3 grid((T + ATT_BR - 1) / ATT_BR, H, B);
    if (hd == 64)
        gt_launch(k_attn_fwd<64>, grid, ATT_THREADS, fwd_smem(64), cs, (bf16 *)out, lse,
                  (const bf16 *)qkv, g, st);
    else
        gt_launch(k_attn_fwd<128>, grid, ATT_THREADS, fwd_smem(128), cs, (bf16 *)out, lse,
                  (const bf16 *)qkv, g, st);
    GT_CUDA_LAUNCHED(b, "attention_fwd");
}

static void cuda_attention_bwd(gt_backend *b, gt_stream *s, void *dqkv, const void *dout,
                               const void *qkv, const void *out, const float *lse, int B, int T,
                               int H, int KV, int hd, float p, gt_rng_site site,
                               const gt_step_state *st) {
    if (!attn_check(b, "attention_bwd", B, T, H, KV, hd, p, st)) return;
    gt_cuda_attn_plan pl;
    if (attn_plan(b, s, "attention_bwd", B, T, H, KV, hd, p, &pl)) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    void *ws = NULL;
    if (pl.fwd == GT_KERNEL_CUDNN) {
        ws = cudnn_ws(b, &pl);
        if (!b->planning && !ws) return;
    }
    if (pl.bwd == GT_KERNEL_CUDNN) {
        if (b->planning) return;
        if (!ptr_aligned16(dqkv) || !ptr_aligned16(dout) || !ptr_aligned16(out)) {
            declined(b, "attention_bwd", GT_KERNEL_CUDNN);
            return;
        }
        gt_error err;
        memset(&err, 0, sizeof err);
        if (gt_cudnn_attn_bwd((gt_cudnn_attn *)((gt_cuda_impl *)b->impl)->cudnn, cs.cs, dqkv, dout,
                              qkv, out, lse, B, T, H, KV, hd, ws, &err))
            gt_backend_fail(b, err.code, "attention_bwd (cuDNN): %s", err.msg);
        return;
    }
    float *D = (float *)gt_cuda_scratch(b, GT_SCRATCH_ATTN, (size_t)B * H * T * sizeof(float),
                                        "attention_bwd");
    if (!D) return;
    attn_geo g = make_geo(B, T, H, KV, hd, p, site);
    if (pl.bwd == GT_KERNEL_WGMMA) {
        if (gt_cuda_attn_wgmma_bwd(cs, dqkv, dout, qkv, out, lse, D, &g, hd))
            GT_CUDA_LAUNCHED(b, "attention_bwd");
        else
            declined(b, "attention_bwd", GT_KERNEL_WGMMA);
        return;
    }
    size_t rows = (size_t)B * H * T;
    if ((hd == 64 || hd == 128) && ptr_aligned16(dout) && ptr_aligned16(out)) {
        unsigned blocks = (unsigned)((rows * (hd / 8) + ATT_THREADS - 1) / ATT_THREADS);
        if (hd == 64)
            gt_launch(k_attn_bwd_pre8<8>, blocks, ATT_THREADS, 0, cs, D, (const bf16 *)dout,
                      (const bf16 *)out, B, T, H);
        else
            gt_launch(k_attn_bwd_pre8<16>, blocks, ATT_THREADS, 0, cs, D, (const bf16 *)dout,
                      (const bf16 *)out, B, T, H);
    } else {
        gt_launch(k_attn_bwd_pre, gt_grid(rows * 32, ATT_THREADS), ATT_THREADS, 0, cs, D,
                  (const bf16 *)dout, (const bf16 *)out, B, T, H, hd);
    }
    if (pl.bwd == GT_KERNEL_MMA) {
        if (gt_cuda_attn_mma_bwd(cs, dqkv, dout, qkv, lse, D, &g, hd, st))
            GT_CUDA_LAUNCHED(b, "attention_bwd");
        else
            declined(b, "attention_bwd", GT_KERNEL_MMA);
        return;
    }
    /* the reference: head size 64 or 128 */
    dim3 gkv((T + ATT_BC - 1) / ATT_BC, KV, B), gq((T + ATT_BR - 1) / ATT_BR, H, B);
    if (hd == 64) {
        gt_launch(k_attn_bwd_dkv<64>, gkv, ATT_THREADS, dkv_smem(64), cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, g, st);
        gt_launch(k_attn_bwd_dq<64>, gq, ATT_THREADS, dq_smem(64), cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, g, st);
    } else {
        gt_launch(k_attn_bwd_dkv<128>, gkv, ATT_THREADS, dkv_smem(128), cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, g, st);
        gt_launch(k_attn_bwd_dq<128>, gq, ATT_THREADS, dq_smem(128), cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, g, st);
    }
    GT_CUDA_LAUNCHED(b, "attention_bwd");
}

extern "C" void gt_cuda_attention_describe(gt_backend *b, char *buf, size_t n) {
    const gt_cuda_impl *im = (const gt_cuda_impl *)b->impl;
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < im->n_attn_plans && used < n; i++) {
        const gt_cuda_attn_plan *q = &im->attn_plans[i];
        int seen = 0; /* the same kernels at another shape of the same head size */
        for (int j = 0; j < i && !seen; j++)
            seen = im->attn_plans[j].fwd == q->fwd && im->attn_plans[j].bwd == q->bwd &&
                   im->attn_plans[j].hd == q->hd;
        if (seen) continue;
        int w = snprintf(buf + used, n - used, "%sattention fwd: %s, attention bwd: %s (hd %d)",
                         used ? "; " : "", gt_kernel_name((gt_kernel)q->fwd),
                         gt_kernel_name((gt_kernel)q->bwd), q->hd);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* ---- rotary embeddings ---- */

/* The rotation angles come from a cos/sin table per planned (T, hd, theta), T * hd/2 * 8
 * bytes (256 KiB at T 1024, hd 64): the precise sincosf of angles up to T rad per element cost
 * as much as the memory traffic (k_rope8 took 21 us per call on gpt124m against 12 us of
 * memory time, 38 us against 25 us on llama1b). The table is filled with the expression the
 * kernels evaluated per element, in the same fp32 operation order, so it holds bitwise the cos
 * and sin they computed; rope_turn keeps their roundings of the rotation. */
/* Pair i's inverse frequency f under Llama 3.1's scaling (backend.h), in fp32 */
static __device__ __forceinline__ float rope_scaled_freq(float f, float factor) {
    const float pi = 3.14159265358979323846f, orig = (float)GT_ROPE_ORIGINAL_MAX;
    const float lo = (float)GT_ROPE_LOW_FREQ_FACTOR, hi = (float)GT_ROPE_HIGH_FREQ_FACTOR;
    float wavelen = 2.0f * pi / f;
    if (wavelen < orig / hi) return f;
    if (wavelen > orig / lo) return f / factor;
    float smooth = (orig / wavelen - lo) / (hi - lo);
    return (1.0f - smooth) * f / factor + smooth * f;
}

__global__ void k_rope_table(float2 *tab, int T, int hd, float theta, float factor) {
    GT_PDL_ENTRY();
    int half = hd / 2, total = T * half;
    float l2t = log2f(theta);
    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < total; q += gridDim.x * blockDim.x) {
        int t = q / half, i = q - t * half;
        /* fp32 angle math: the angle error (< 3e-4 rad at t = 2048) is far below bf16's */
        float f = exp2f(-2.0f * (float)i / (float)hd * l2t);
        float ang = (float)t * (factor > 0.0f ? rope_scaled_freq(f, factor) : f);
        float sn, cs;
        sincosf(ang, &sn, &cs);
        tab[q] = make_float2(cs, sn);
    }
}

/* Turns one rotary pair (a, b) by the angle of (cs, sn), or by minus it when inverse. The
 * roundings are pinned to those the per-element kernels compiled to (nvcc fused one product of
 * each output and rounded the other, differently per direction), so the outputs stay bitwise
 * equal to theirs whatever contraction the compiler would pick for the plain expressions. */
static __device__ __forceinline__ void rope_turn(float *x0, float *x1, float cs, float sn,
                                                 int inverse) {
    float a = *x0, b = *x1;
    if (inverse) {
        *x0 = __fmaf_rn(a, cs, __fmul_rn(b, sn));  /* a cos + b sin */
        *x1 = __fmaf_rn(b, cs, -__fmul_rn(a, sn)); /* b cos - a sin */
    } else {
        *x0 = __fmaf_rn(a, cs, -__fmul_rn(b, sn)); /* a cos - b sin */
        *x1 = __fmaf_rn(a, sn, __fmul_rn(b, cs));  /* a sin + b cos */
    }
}

/* Each thread turns eight adjacent rotary pairs (i..i+7 with their partners i+half..) of one
 * head of one token, with 16-byte loads of x and of the table (rows of half * 8 bytes, half a
 * multiple of 8: 64-byte aligned chunks); 32-bit index math. The grid-stride version with
 * 64-bit divisions per element took ~80 us per call at gpt124m size, ten times its memory
 * time; one pair per thread still waited on memory latency. */
/* amax (or NULL): the amax of all of qkv after the turn folded in, the v heads (read, not
 * turned) included: rope_bwd_amax */
__global__ void k_rope8(bf16 *qkv, const float2 *__restrict__ tab, int rows, int T, int H, int KV,
                        int hd, int inverse, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[ATT_THREADS / GT_WARP];
    int half = hd / 2, chunks = half / 8, turned = H + KV, C = (H + 2 * KV) * hd;
    int heads = turned + (amax ? KV : 0);
    int per_row = heads * chunks, total = rows * per_row;
    unsigned m = 0;
    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < total; q += gridDim.x * blockDim.x) {
        int row = q / per_row, rem = q - row * per_row, hh = rem / chunks;
        int i = (rem - hh * chunks) * 8, t = row % T;
        bf16 *x = qkv + (size_t)row * C + hh * hd;
        if (hh >= turned) { /* a v head: its amax only */
            const uint4 v0 = *(const uint4 *)(x + i), v1 = *(const uint4 *)(x + i + half);
            const bf16 *h0 = (const bf16 *)&v0, *h1 = (const bf16 *)&v1;
#pragma unroll
            for (int u = 0; u < 8; u++) {
                unsigned a = gt_abs_bits_bf16(h0[u]), c = gt_abs_bits_bf16(h1[u]);
                m = a > m ? a : m;
                m = c > m ? c : m;
            }
            continue;
        }
        const float4 *cs4 = (const float4 *)(tab + t * half + i);
        float cs[8], sn[8], x0[8], x1[8];
#pragma unroll
        for (int v = 0; v < 4; v++) {
            float4 p = __ldg(cs4 + v); /* (cos, sin) of pairs i + 2v and i + 2v + 1 */
            cs[2 * v] = p.x, sn[2 * v] = p.y, cs[2 * v + 1] = p.z, sn[2 * v + 1] = p.w;
        }
        ld8(x0, x + i);
        ld8(x1, x + i + half);
#pragma unroll
        for (int u = 0; u < 8; u++)
            rope_turn(&x0[u], &x1[u], cs[u], sn[u], inverse);
        m = st8_fold(x + i, x0, m, amax != NULL);
        m = st8_fold(x + i + half, x1, m, amax != NULL);
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}

/* The general case (hd / 2 not a multiple of 8, or unaligned): one pair per thread, one
 * block per token row, same math. */
__global__ void k_rope_odd(bf16 *qkv, const float2 *__restrict__ tab, int T, int H, int KV, int hd,
                           int inverse, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[ATT_THREADS / GT_WARP];
    int half = hd / 2, turned = H + KV, heads = turned + (amax ? KV : 0);
    int row = blockIdx.x, t = row % T;
    bf16 *base = qkv + (size_t)row * (size_t)((H + 2 * KV) * hd);
    const float2 *trow = tab + t * half;
    unsigned m = 0;
    for (int q = threadIdx.x; q < heads * half; q += blockDim.x) {
        int hh = q / half, i = q - hh * half;
        bf16 *x = base + hh * hd;
        bf16 v0, v1;
        if (hh >= turned) { /* a v head: its amax only */
            v0 = x[i], v1 = x[i + half];
        } else {
            float2 p = __ldg(trow + i); /* (cos, sin) */
            float x0 = ldf(x + i), x1 = ldf(x + i + half);
            rope_turn(&x0, &x1, p.x, p.y, inverse);
            v0 = tobf(x0), v1 = tobf(x1);
            x[i] = v0;
            x[i + half] = v1;
        }
        unsigned a = gt_abs_bits_bf16(v0), c = gt_abs_bits_bf16(v1);
        m = a > m ? a : m;
        m = c > m ? c : m;
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}

static gt_cuda_rope_table *rope_table_find(gt_cuda_impl *im, int T, int hd, float theta,
                                           float factor) {
    for (int k = 0; k < im->n_rope_tables; k++) {
        gt_cuda_rope_table *r = &im->rope_tables[k];
        if (r->T == T && r->hd == hd && r->theta == theta && r->factor == factor) return r;
    }
    return NULL;
}

/* While planning: records (T, hd, theta) once; plan_finish builds its table. */
static void rope_table_record(gt_backend *b, const char *what, int T, int hd, float theta,
                              float factor) {
    gt_cuda_impl *im = (gt_cuda_impl *)b->impl;
    if (rope_table_find(im, T, hd, theta, factor)) return;
    if ((size_t)T * (size_t)(hd / 2) >= ((size_t)1 << 30)) {
        /* the kernels index the table with 32-bit math (grid strides included) */
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: T=%d hd=%d needs a rotary table of 2^30 or more entries; use a "
                        "shorter sequence or a smaller head size",
                        what, T, hd);
        return;
    }
    if (im->n_rope_tables == im->cap_rope_tables) {
        int cap = im->cap_rope_tables ? 2 * im->cap_rope_tables : 4;
        gt_cuda_rope_table *nt =
            (gt_cuda_rope_table *)realloc(im->rope_tables, (size_t)cap * sizeof *nt);
        if (!nt) {
            gt_backend_fail(b, GT_ERR_NOMEM, "out of host memory planning %s", what);
            return;
        }
        im->rope_tables = nt;
        im->cap_rope_tables = cap;
    }
    gt_cuda_rope_table *r = &im->rope_tables[im->n_rope_tables++];
    r->T = T, r->hd = hd, r->theta = theta, r->factor = factor, r->tab = NULL;
}

/* Allocates and fills the tables recorded since the last call. Built tables stay where they
 * are (their contents depend only on the key), so graphs captured earlier stay valid. */
extern "C" int gt_cuda_rope_plan_finish(gt_backend *b, gt_error *err) {
    gt_cuda_impl *im = (gt_cuda_impl *)b->impl;
    for (int k = 0; k < im->n_rope_tables; k++) {
        gt_cuda_rope_table *r = &im->rope_tables[k];
        if (r->tab) continue;
        size_t n = (size_t)r->T * (size_t)(r->hd / 2);
        void *tab = NULL;
        int rc = b->ops->alloc(b, n * sizeof(float2), &tab, err);
        if (rc)
            return gt_error_wrap(err, "allocating the rotary table of T=%d hd=%d: ", r->T, r->hd);
        /* outside steps: the legacy stream and a full synchronization are fine here (the
         * backend's own streams do not wait for the legacy one) */
        k_rope_table<<<gt_grid(n, ATT_THREADS), ATT_THREADS>>>((float2 *)tab, r->T, r->hd, r->theta,
                                                               r->factor);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            cudaGetLastError();
            b->ops->free(b, tab);
            return gt_error_set(err, GT_ERR_DEVICE,
                                "filling the rotary table of T=%d hd=%d failed: %s (%s)", r->T,
                                r->hd, cudaGetErrorName(e), cudaGetErrorString(e));
        }
        r->tab = tab;
    }
    return GT_OK;
}

extern "C" void gt_cuda_rope_destroy(gt_backend *b) {
    gt_cuda_impl *im = (gt_cuda_impl *)b->impl;
    for (int k = 0; k < im->n_rope_tables; k++)
        if (im->rope_tables[k].tab) b->ops->free(b, im->rope_tables[k].tab);
    free(im->rope_tables);
    im->rope_tables = NULL;
    im->n_rope_tables = im->cap_rope_tables = 0;
}

static void rope_run(gt_backend *b, gt_stream *s, const char *what, void *qkv, int B, int T, int H,
                     int KV, int hd, float theta, float factor, int inverse, unsigned *amax) {
    if (B < 0 || T < 0 || H <= 0 || KV <= 0 || hd <= 0 || hd % 2 != 0 || !(theta > 0.0f) ||
        !(factor >= 0.0f)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: bad shape B=%d T=%d H=%d KV=%d hd=%d theta=%g (the head size must "
                        "be even and theta > 0)",
                        what, B, T, H, KV, hd, (double)theta);
        return;
    }
    if (B == 0 || T == 0) return;
    if (b->planning) {
        rope_table_record(b, what, T, hd, theta, factor);
        return;
    }
    const gt_cuda_rope_table *r = rope_table_find((gt_cuda_impl *)b->impl, T, hd, theta, factor);
    if (!r) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s with T=%d hd=%d theta=%g was not planned: run the op once while "
                        "b->planning is set (the trainer's planning pass), then plan_finish",
                        what, T, hd, (double)theta);
        return;
    }
    if (!r->tab) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s with T=%d hd=%d: plan_finish was not called after planning, or "
                        "failed (it builds the rotary table)",
                        what, T, hd);
        return;
    }
    const float2 *tab = (const float2 *)r->tab;
    unsigned rows = (unsigned)B * (unsigned)T;
    size_t items = (size_t)rows * (size_t)(H + KV + (amax ? KV : 0)) * (size_t)(hd / 16);
    if ((hd / 2) % 8 == 0 && al16(qkv) && items < (1u << 30))
        gt_launch(k_rope8, gt_grid(items, ATT_THREADS), ATT_THREADS, 0, gt_cuda_ex(b, s),
                  (bf16 *)qkv, tab, (int)rows, T, H, KV, hd, inverse, amax);
    else
        gt_launch(k_rope_odd, rows, ATT_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)qkv, tab, T, H, KV,
                  hd, inverse, amax);
    GT_CUDA_LAUNCHED(b, what);
}

static void cuda_rope_fwd(gt_backend *b, gt_stream *s, void *qkv, int B, int T, int H, int KV,
                          int hd, float theta) {
    rope_run(b, s, "rope_fwd", qkv, B, T, H, KV, hd, theta, 0.0f, 0, NULL);
}
static void cuda_rope_bwd(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV,
                          int hd, float theta) {
    rope_run(b, s, "rope_bwd", dqkv, B, T, H, KV, hd, theta, 0.0f, 1, NULL);
}
static void cuda_rope_scaled_fwd(gt_backend *b, gt_stream *s, void *qkv, int B, int T, int H,
                                 int KV, int hd, float theta, float factor) {
    rope_run(b, s, "rope_scaled_fwd", qkv, B, T, H, KV, hd, theta, factor, 0, NULL);
}
static void cuda_rope_scaled_bwd(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H,
                                 int KV, int hd, float theta, float factor) {
    rope_run(b, s, "rope_scaled_bwd", dqkv, B, T, H, KV, hd, theta, factor, 1, NULL);
}
/* rope_bwd or rope_scaled_bwd with all of dqkv's amax folded in (rope_bwd_amax) */
static void cuda_rope_bwd_amax(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV,
                               int hd, float theta, float factor, uint32_t *amax_bits) {
    if (!amax_bits) {
        gt_backend_fail(b, GT_ERR_INVALID, "rope_bwd_amax: NULL amax");
        return;
    }
    rope_run(b, s, "rope_bwd_amax", dqkv, B, T, H, KV, hd, theta, factor, 1, (unsigned *)amax_bits);
}

template <typename K> static cudaError_t allow_smem(K kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

extern "C" int gt_cuda_attention_init(int sm90, gt_error *err) {
    cudaError_t e = allow_smem(k_attn_fwd<64>, fwd_smem(64));
    if (e == cudaSuccess) e = allow_smem(k_attn_fwd<128>, fwd_smem(128));
    if (e == cudaSuccess) e = allow_smem(k_attn_bwd_dkv<64>, dkv_smem(64));
    if (e == cudaSuccess) e = allow_smem(k_attn_bwd_dkv<128>, dkv_smem(128));
    if (e == cudaSuccess) e = allow_smem(k_attn_bwd_dq<64>, dq_smem(64));
    if (e == cudaSuccess) e = allow_smem(k_attn_bwd_dq<128>, dq_smem(128));
    if (e == cudaSuccess) e = gt_cuda_attn_mma_init();
    /* the wgmma kernels exist only as sm_90a code: elsewhere there is nothing to set up */
    if (e == cudaSuccess && sm90) e = gt_cuda_attn_wgmma_init();
    if (e != cudaSuccess)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "cudaFuncSetAttribute(attention shared memory): %s (the attention "
                            "kernels need up to %zu bytes of shared memory per block)",
                            cudaGetErrorString(e), dkv_smem(128));
    return GT_OK;
}

extern "C" void gt_cuda_register_attention_ops(gt_backend_ops *ops) {
    ops->rope_fwd = cuda_rope_fwd;
    ops->rope_bwd = cuda_rope_bwd;
    ops->rope_scaled_fwd = cuda_rope_scaled_fwd;
    ops->rope_scaled_bwd = cuda_rope_scaled_bwd;
    ops->rope_bwd_amax = cuda_rope_bwd_amax;
    ops->attention_fwd = cuda_attention_fwd;
    ops->attention_bwd = cuda_attention_bwd;
}
