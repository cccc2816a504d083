/* The Mamba-2 mixer's ops on the CUDA backend (backend.h; the fp32 reference is cpu_mamba.c):
 * causal conv1d + SiLU, the z-gated RMSNorm, and the shape checks of the chunked SSD scan
 * (its kernels: k_mamba_ssd.cu). bf16 in and out, fp32 math; every reduction runs in a fixed
 * order (no float atomics), no host sync, no allocation. */
#include "backend/cuda/cuda_common.cuh"
#include "config/cuda_limits.h"

#define MAMBA_THREADS 256

static __device__ __forceinline__ float sigm(float x) {
    return 1.0f / (1.0f + expf(-x));
}
static __device__ __forceinline__ float silu_grad(float x) {
    float s = sigm(x);
    return s * (1.0f + x * (1.0f - s));
}

static int shape_ok(gt_backend *b, const char *op, gt_mamba_shape m) {
    if (m.B > 0 && m.T > 0 && m.H > 0 && m.P > 0 && m.G > 0 && m.S > 0 && m.K > 0 && m.chunk > 0 &&
        m.H % m.G == 0 && m.K <= GT_CUDA_MAMBA_MAX_CONV)
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad shape B=%d T=%d H=%d P=%d G=%d S=%d K=%d chunk=%d (all > 0, H a "
                    "multiple of G, K <= %d for the CUDA kernels)",
                    op, m.B, m.T, m.H, m.P, m.G, m.S, m.K, m.chunk, GT_CUDA_MAMBA_MAX_CONV);
    return 0;
}

/* ---- convolution: x is zxbcdt's xBC slice (row stride ld), C channels ----
 * A thread walks one channel through a run of consecutive tokens and keeps the last taps'
 * inputs (and, backward, the next taps' output gradients) in registers, so every input is read
 * once instead of once per tap; a warp's threads hold neighbouring channels, so each token's
 * row is read coalesced. win[j] holds x[n - (MAXC - 1 - j)]: tap k of K reads win[MAXC - K + k];
 * a window is zeroed where a sequence starts (the taps before it are the zero padding). */
#define MAXC GT_CUDA_MAMBA_MAX_CONV
#define CONV_RUN 32   /* tokens a forward thread convolves in order */
#define CONV_LANES 32 /* token runs of a backward block, their weight sums added in run order */

static __device__ __forceinline__ void win_push(float *win, float v) {
#pragma unroll
    for (int j = 0; j < MAXC - 1; j++)
        win[j] = win[j + 1];
    win[MAXC - 1] = v;
}

/* the pre-activation from the window: bias + taps in the CPU's order */
static __device__ __forceinline__ float win_pre(const float *win, const float *wk, float b0,
                                                int K) {
    float acc = b0;
#pragma unroll
    for (int k = 0; k < MAXC; k++)
        if (k < K) acc += wk[k] * win[MAXC - K + k];
    return acc;
}

/* the channel's weights, and its window before token n0 (t0 = n0's position in its sequence) */
static __device__ __forceinline__ void conv_start(float *wk, float *win, const bf16 *x, int ld,
                                                  const bf16 *w, size_t n0, int t0, int c, int K) {
#pragma unroll
    for (int k = 0; k < MAXC; k++)
        wk[k] = k < K ? ldf(w + (size_t)c * K + k) : 0.0f;
#pragma unroll
    for (int j = 0; j < MAXC; j++) {
        int back = MAXC - j; /* win[j] before the first push holds x[n0 - back] */
        win[j] = back < K && t0 - back >= 0 ? ldf(x + (n0 - back) * ld + c) : 0.0f;
    }
}

__global__ void k_conv_fwd(bf16 *xbc, const bf16 *x, int ld, const bf16 *w, const bf16 *bias, int N,
                           int T, int C, int K) {
    GT_PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    size_t n0 = ((size_t)blockIdx.y * blockDim.y + threadIdx.y) * CONV_RUN;
    if (c >= C || n0 >= (size_t)N) return;
    size_t n1 = n0 + CONV_RUN < (size_t)N ? n0 + CONV_RUN : (size_t)N;
    int t = (int)(n0 % (size_t)T);
    float wk[MAXC], win[MAXC], b0 = bias ? ldf(bias + c) : 0.0f;
    conv_start(wk, win, x, ld, w, n0, t, c, K);
    for (size_t n = n0; n < n1; n++, t = t + 1 == T ? 0 : t + 1) {
        if (t == 0)
#pragma unroll
            for (int j = 0; j < MAXC; j++)
                win[j] = 0.0f;
        win_push(win, ldf(x + n * ld + c));
        float v = win_pre(win, wk, b0, K);
        xbc[n * C + c] = tobf(v * sigm(v));
    }
}

/* Both gradients in one pass. Lane r of a block owns tokens [n0, n1): it recomputes each
 * token's pre-activation from the input window, g = dy * silu'(pre), adds g x (the weight
 * gradient) and g (the bias gradient), and emits dx[n] = sum_k w_k g[n + K-1-k] once
 * g[n + K-1] is known: K - 1 tokens past n1 are walked for that alone. The lanes' sums are then
 * added in lane order, so the order is fixed without partial buffers. */
__global__ void __launch_bounds__(32 * CONV_LANES)
    k_conv_bwd(bf16 *dx, int lddx, float *dw, float *dbias, const bf16 *dy, const bf16 *x, int ld,
               const bf16 *w, const bf16 *bias, int N, int T, int C, int K, int accumulate) {
    GT_PDL_ENTRY();
    __shared__ float red[CONV_LANES][32][MAXC + 1];
    int c = blockIdx.x * 32 + threadIdx.x, r = threadIdx.y;
    size_t per = ((size_t)N + CONV_LANES - 1) / CONV_LANES;
    size_t n0 = (size_t)r * per, n1 = n0 + per < (size_t)N ? n0 + per : (size_t)N;
    float acc[MAXC + 1];
#pragma unroll
    for (int k = 0; k <= MAXC; k++)
        acc[k] = 0.0f;
    if (c < C && n0 < n1) {
        int tm = (int)(n0 % (size_t)T), tn = tm;
        float wk[MAXC], win[MAXC], gwin[MAXC], b0 = bias ? ldf(bias + c) : 0.0f;
        conv_start(wk, win, x, ld, w, n0, tm, c, K);
#pragma unroll
        for (int j = 0; j < MAXC; j++)
            gwin[j] = 0.0f;
        for (size_t m = n0; m < n1 + (size_t)(K - 1); m++) {
            float g = 0.0f;
            if (m < (size_t)N) {
                if (tm == 0)
#pragma unroll
                    for (int j = 0; j < MAXC; j++)
                        win[j] = 0.0f;
                win_push(win, ldf(x + m * ld + c));
                g = ldf(dy + m * C + c) * silu_grad(win_pre(win, wk, b0, K));
                if (m < n1) {
#pragma unroll
                    for (int k = 0; k < MAXC; k++)
                        if (k < K) acc[k] += g * win[MAXC - K + k];
                    acc[MAXC] += g;
                }
                tm = tm + 1 == T ? 0 : tm + 1;
            }
            win_push(gwin, g); /* gwin[MAXC - 1 - k] = g[m - k] */
            if (m < n0 + (size_t)(K - 1)) continue;
            size_t n = m - (size_t)(K - 1); /* every tap of dx[n] is known */
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < MAXC; k++)
                if (k < K && tn + (K - 1 - k) < T) s += wk[k] * gwin[MAXC - 1 - k];
            dx[n * lddx + c] = tobf(s);
            tn = tn + 1 == T ? 0 : tn + 1;
        }
    }
#pragma unroll
    for (int k = 0; k <= MAXC; k++)
        red[r][threadIdx.x][k] = acc[k];
    __syncthreads();
    if (r != 0 || c >= C) return;
    for (int k = 0; k <= K; k++) {
        int slot = k < K ? k : MAXC;
        if (k == K && !dbias) break;
        float s = 0.0f;
        for (int q = 0; q < CONV_LANES; q++)
            s += red[q][threadIdx.x][slot];
        float *o = k < K ? &dw[(size_t)c * K + k] : &dbias[c];
        *o = accumulate ? *o + s : s;
    }
}

static void cuda_mamba_conv_fwd(gt_backend *b, gt_stream *s, void *xbc, const void *zxbcdt,
                                const void *w, const void *bias, gt_mamba_shape sh) {
    if (b->planning || !shape_ok(b, "mamba_conv_fwd", sh)) return;
    int C = gt_mamba_conv(sh), ld = gt_mamba_in(sh), N = sh.B * sh.T;
    dim3 block(32, MAMBA_THREADS / 32);
    dim3 grid((C + 31) / 32, (N + CONV_RUN * block.y - 1) / (CONV_RUN * block.y));
    gt_launch(k_conv_fwd, grid, block, 0, gt_cuda_ex(b, s), (bf16 *)xbc,
              (const bf16 *)zxbcdt + gt_mamba_inner(sh), ld, (const bf16 *)w, (const bf16 *)bias, N,
              sh.T, C, sh.K);
    GT_CUDA_LAUNCHED(b, "mamba_conv_fwd");
}

static void cuda_mamba_conv_bwd(gt_backend *b, gt_stream *s, void *dzxbcdt, float *dw, float *dbias,
                                const void *dxbc, const void *zxbcdt, const void *w,
                                const void *bias, gt_mamba_shape sh, int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_conv_bwd", sh)) return;
    int C = gt_mamba_conv(sh), di = gt_mamba_inner(sh), ld = gt_mamba_in(sh), N = sh.B * sh.T;
    gt_launch(k_conv_bwd, (C + 31) / 32, dim3(32, CONV_LANES), 0, gt_cuda_ex(b, s),
              (bf16 *)dzxbcdt + di, ld, dw, dbias, (const bf16 *)dxbc, (const bf16 *)zxbcdt + di,
              ld, (const bf16 *)w, (const bf16 *)bias, N, sh.T, C, sh.K, accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_conv_bwd");
}

/* ---- SSD scan: the chunked kernels of k_mamba_ssd.cu ---- */

static void cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                               const void *zxbcdt, const void *dt_bias, const void *A_log,
                               const void *D, float *ws, gt_mamba_shape sh) {
    if (b->planning || !shape_ok(b, "mamba_ssd_fwd", sh)) return;
    gt_cuda_mamba_ssd_fwd(b, s, y, xbc, zxbcdt, dt_bias, A_log, D, ws, sh);
}

static void cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt,
                               float *ddt_bias, float *dA_log, float *dD, const void *dy,
                               const void *xbc, const void *zxbcdt, const void *dt_bias,
                               const void *A_log, const void *D, float *ws, gt_mamba_shape sh,
                               int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_ssd_bwd", sh)) return;
    gt_cuda_mamba_ssd_bwd(b, s, dxbc, dzxbcdt, ddt_bias, dA_log, dD, dy, xbc, zxbcdt, dt_bias,
                          A_log, D, ws, sh, accumulate);
}

/* ---- gated RMSNorm: u = y * silu(z), out = u * rstd * w per group of gs channels; a block
 * per (token, group) ---- */

__global__ void k_gnorm_fwd(bf16 *out, float *rstd, const bf16 *y, const bf16 *z, int ldz,
                            const bf16 *w, int di, int G, float eps) {
    GT_PDL_ENTRY();
    __shared__ float red[32];
    size_t n = blockIdx.x / G;
    int g = blockIdx.x % G, gs = di / G;
    const bf16 *yr = y + n * di + (size_t)g * gs, *zr = z + n * ldz + (size_t)g * gs;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < gs; i += blockDim.x) {
        float zv = ldf(zr + i), u = ldf(yr + i) * zv * sigm(zv);
        ss += u * u;
    }
    ss = block_sum(ss, red);
    float r = rsqrtf(ss / (float)gs + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    bf16 *o = out + n * di + (size_t)g * gs;
    for (int i = threadIdx.x; i < gs; i += blockDim.x) {
        float zv = ldf(zr + i), u = ldf(yr + i) * zv * sigm(zv);
        o[i] = tobf(u * r * ldf(w + (size_t)g * gs + i));
    }
}

/* dw[di] (+)= sum_n dout * u * rstd. A block: GN_X channels x GN_LANES lanes, lane r summing
 * its run of consecutive tokens, then the lanes added in lane order (a fixed order without
 * partial buffers); half-warps read 32 contiguous bytes of a row. */
#define GN_X 16
#define GN_LANES 64
__global__ void __launch_bounds__(GN_X *GN_LANES)
    k_gnorm_bwd_weight(float *dw, const bf16 *dout, const bf16 *y, const bf16 *z, int ldz,
                       const float *rstd, int N, int di, int G, int accumulate) {
    GT_PDL_ENTRY();
    __shared__ float red[GN_LANES][GN_X];
    int c = blockIdx.x * GN_X + threadIdx.x, r = threadIdx.y, gs = di / G;
    int per = (N + GN_LANES - 1) / GN_LANES, n0 = r * per, n1 = n0 + per < N ? n0 + per : N;
    float acc = 0.0f;
    if (c < di)
        for (int n = n0; n < n1; n++) {
            float zv = ldf(z + (size_t)n * ldz + c);
            float u = ldf(y + (size_t)n * di + c) * zv * sigm(zv);
            acc += ldf(dout + (size_t)n * di + c) * u * rstd[(size_t)n * G + c / gs];
        }
    red[r][threadIdx.x] = acc;
    __syncthreads();
    if (r != 0 || c >= di) return;
    float s = 0.0f;
    for (int q = 0; q < GN_LANES; q++)
        s += red[q][threadIdx.x];
    dw[c] = accumulate ? dw[c] + s : s;
}

/* dy and dz of one (token, group); each thread reads y[i] before it writes dy[i], so dy may
 * alias y (the weight kernel runs first) */
__global__ void k_gnorm_bwd_data(bf16 *dy, bf16 *dz, int lddz, const bf16 *dout, const bf16 *y,
                                 const bf16 *z, int ldz, const bf16 *w, const float *rstd, int di,
                                 int G) {
    GT_PDL_ENTRY();
    __shared__ float red[32];
    size_t n = blockIdx.x / G;
    int g = blockIdx.x % G, gs = di / G;
    size_t o = n * di + (size_t)g * gs;
    const bf16 *zr = z + n * ldz + (size_t)g * gs, *wg = w + (size_t)g * gs;
    float r = rstd[blockIdx.x], dot = 0.0f;
    for (int i = threadIdx.x; i < gs; i += blockDim.x) {
        float zv = ldf(zr + i), u = ldf(y + o + i) * zv * sigm(zv);
        dot += ldf(dout + o + i) * ldf(wg + i) * u;
    }
    dot = block_sum(dot, red);
    float k = dot / (float)gs * r * r * r;
    bf16 *dzr = dz + n * lddz + (size_t)g * gs;
    for (int i = threadIdx.x; i < gs; i += blockDim.x) {
        float zv = ldf(zr + i), sz = zv * sigm(zv), yi = ldf(y + o + i), u = yi * sz;
        float du = r * ldf(wg + i) * ldf(dout + o + i) - k * u;
        dy[o + i] = tobf(du * sz);
        dzr[i] = tobf(du * yi * silu_grad(zv));
    }
}

static void cuda_mamba_gated_norm_fwd(gt_backend *b, gt_stream *s, void *out, float *rstd,
                                      const void *y, const void *zxbcdt, const void *w, float eps,
                                      gt_mamba_shape sh) {
    if (b->planning || !shape_ok(b, "mamba_gated_norm_fwd", sh)) return;
    if (!(eps > 0)) {
        gt_backend_fail(b, GT_ERR_INVALID, "mamba_gated_norm_fwd: eps is %g; it must be > 0", eps);
        return;
    }
    int di = gt_mamba_inner(sh);
    gt_launch(k_gnorm_fwd, sh.B * sh.T * sh.G, MAMBA_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)out,
              rstd, (const bf16 *)y, (const bf16 *)zxbcdt, gt_mamba_in(sh), (const bf16 *)w, di,
              sh.G, eps);
    GT_CUDA_LAUNCHED(b, "mamba_gated_norm_fwd");
}

static void cuda_mamba_gated_norm_bwd(gt_backend *b, gt_stream *s, void *dy, void *dzxbcdt,
                                      float *dw, const void *dout, const void *y,
                                      const void *zxbcdt, const void *w, const float *rstd,
                                      gt_mamba_shape sh, int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_gated_norm_bwd", sh)) return;
    int di = gt_mamba_inner(sh), in = gt_mamba_in(sh), N = sh.B * sh.T;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    gt_launch(k_gnorm_bwd_weight, (di + GN_X - 1) / GN_X, dim3(GN_X, GN_LANES), 0, ex, dw,
              (const bf16 *)dout, (const bf16 *)y, (const bf16 *)zxbcdt, in, rstd, N, di, sh.G,
              accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_gated_norm_bwd (weight)");
    gt_launch(k_gnorm_bwd_data, N * sh.G, MAMBA_THREADS, 0, ex, (bf16 *)dy, (bf16 *)dzxbcdt, in,
              (const bf16 *)dout, (const bf16 *)y, (const bf16 *)zxbcdt, in, (const bf16 *)w, rstd,
              di, sh.G);
    GT_CUDA_LAUNCHED(b, "mamba_gated_norm_bwd (data)");
}

extern "C" void gt_cuda_register_mamba_ops(gt_backend_ops *ops) {
    ops->mamba_conv_fwd = cuda_mamba_conv_fwd;
    ops->mamba_conv_bwd = cuda_mamba_conv_bwd;
    ops->mamba_ssd_fwd = cuda_mamba_ssd_fwd;
    ops->mamba_ssd_bwd = cuda_mamba_ssd_bwd;
    ops->mamba_gated_norm_fwd = cuda_mamba_gated_norm_fwd;
    ops->mamba_gated_norm_bwd = cuda_mamba_gated_norm_bwd;
}
