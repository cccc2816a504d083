/* The Mamba-2 mixer's ops on the CUDA backend (backend.h; the fp32 reference is cpu_mamba.c):
 * causal conv1d + SiLU, the z-gated RMSNorm, and the shape checks of the chunked SSD scan
 * (its kernels: k_mamba_ssd.cu). bf16 in and out, fp32 math; every reduction runs in a fixed
 * order (no float atomics), no host sync, no allocation. */
#include "backend/cuda/cuda_common.cuh"
#include "config/cuda_limits.h"

#define MAMBA_THREADS 256
#define COL_X 32 /* channels of a column-sum block (weight gradients) */
#define COL_Y 16 /* row lanes of a column-sum block, summed in lane order */

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

/* ---- convolution: x is zxbcdt's xBC slice (row stride ld), C channels ---- */

/* the pre-activation at token n = b*T + t, channel c: bias + taps in the CPU's order */
static __device__ __forceinline__ float conv_pre(const bf16 *x, int ld, const bf16 *w,
                                                 const bf16 *bias, size_t n, int t, int c, int K) {
    float acc = bias ? ldf(bias + c) : 0.0f;
    for (int k = 0; k < K; k++) {
        int back = K - 1 - k;
        if (t - back >= 0) acc += ldf(w + (size_t)c * K + k) * ldf(x + (n - back) * ld + c);
    }
    return acc;
}

__global__ void k_conv_fwd(bf16 *xbc, const bf16 *x, int ld, const bf16 *w, const bf16 *bias, int T,
                           int C, int K, size_t NC) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, NC) {
        size_t n = i / C;
        int c = (int)(i % C), t = (int)(n % T);
        float v = conv_pre(x, ld, w, bias, n, t, c, K);
        xbc[i] = tobf(v * sigm(v));
    }
}

/* dx at (n, c): the outputs that read x[n] through tap k, their dpre recomputed */
__global__ void k_conv_bwd_data(bf16 *dx, int lddx, const bf16 *dy, const bf16 *x, int ld,
                                const bf16 *w, const bf16 *bias, int T, int C, int K, size_t NC) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, NC) {
        size_t n = i / C;
        int c = (int)(i % C), t = (int)(n % T);
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            int ahead = K - 1 - k;
            if (t + ahead >= T) continue;
            size_t m = n + ahead;
            float pre = conv_pre(x, ld, w, bias, m, t + ahead, c, K);
            acc += ldf(w + (size_t)c * K + k) * (ldf(dy + m * C + c) * silu_grad(pre));
        }
        dx[n * lddx + c] = tobf(acc);
    }
}

/* dw[C][K], dbias[C]: block = COL_X channels x COL_Y row lanes; lane r sums tokens r, r+COL_Y,
 * ... in order, then the lanes are summed in order: deterministic without partial buffers. */
__global__ void k_conv_bwd_weight(float *dw, float *dbias, const bf16 *dy, const bf16 *x, int ld,
                                  const bf16 *w, const bf16 *bias, int N, int T, int C, int K,
                                  int accumulate) {
    GT_PDL_ENTRY();
    __shared__ float red[COL_Y][COL_X][GT_CUDA_MAMBA_MAX_CONV + 1];
    int c = blockIdx.x * COL_X + threadIdx.x, r = threadIdx.y;
    float acc[GT_CUDA_MAMBA_MAX_CONV + 1];
#pragma unroll
    for (int k = 0; k <= GT_CUDA_MAMBA_MAX_CONV; k++)
        acc[k] = 0.0f;
    if (c < C)
        for (int n = r; n < N; n += COL_Y) {
            int t = n % T;
            float g = ldf(dy + (size_t)n * C + c) * silu_grad(conv_pre(x, ld, w, bias, n, t, c, K));
#pragma unroll
            for (int k = 0; k < GT_CUDA_MAMBA_MAX_CONV; k++) {
                int back = K - 1 - k;
                if (k < K && t - back >= 0) acc[k] += g * ldf(x + (size_t)(n - back) * ld + c);
            }
            acc[GT_CUDA_MAMBA_MAX_CONV] += g;
        }
#pragma unroll
    for (int k = 0; k <= GT_CUDA_MAMBA_MAX_CONV; k++)
        red[r][threadIdx.x][k] = acc[k];
    __syncthreads();
    if (r != 0 || c >= C) return;
    for (int k = 0; k <= K; k++) {
        int slot = k < K ? k : GT_CUDA_MAMBA_MAX_CONV;
        if (k == K && !dbias) break;
        float s = 0.0f;
        for (int q = 0; q < COL_Y; q++)
            s += red[q][threadIdx.x][slot];
        float *o = k < K ? &dw[(size_t)c * K + k] : &dbias[c];
        *o = accumulate ? *o + s : s;
    }
}

static void cuda_mamba_conv_fwd(gt_backend *b, gt_stream *s, void *xbc, const void *zxbcdt,
                                const void *w, const void *bias, gt_mamba_shape sh) {
    if (b->planning || !shape_ok(b, "mamba_conv_fwd", sh)) return;
    int C = gt_mamba_conv(sh), ld = gt_mamba_in(sh);
    size_t NC = (size_t)sh.B * sh.T * C;
    gt_launch(k_conv_fwd, gt_grid(NC, MAMBA_THREADS), MAMBA_THREADS, 0, gt_cuda_ex(b, s),
              (bf16 *)xbc, (const bf16 *)zxbcdt + gt_mamba_inner(sh), ld, (const bf16 *)w,
              (const bf16 *)bias, sh.T, C, sh.K, NC);
    GT_CUDA_LAUNCHED(b, "mamba_conv_fwd");
}

static void cuda_mamba_conv_bwd(gt_backend *b, gt_stream *s, void *dzxbcdt, float *dw, float *dbias,
                                const void *dxbc, const void *zxbcdt, const void *w,
                                const void *bias, gt_mamba_shape sh, int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_conv_bwd", sh)) return;
    int C = gt_mamba_conv(sh), di = gt_mamba_inner(sh), ld = gt_mamba_in(sh), N = sh.B * sh.T;
    size_t NC = (size_t)N * C;
    const bf16 *x = (const bf16 *)zxbcdt + di;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    gt_launch(k_conv_bwd_weight, (C + COL_X - 1) / COL_X, dim3(COL_X, COL_Y), 0, ex, dw, dbias,
              (const bf16 *)dxbc, x, ld, (const bf16 *)w, (const bf16 *)bias, N, sh.T, C, sh.K,
              accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_conv_bwd (weight)");
    gt_launch(k_conv_bwd_data, gt_grid(NC, MAMBA_THREADS), MAMBA_THREADS, 0, ex,
              (bf16 *)dzxbcdt + di, ld, (const bf16 *)dxbc, x, ld, (const bf16 *)w,
              (const bf16 *)bias, sh.T, C, sh.K, NC);
    GT_CUDA_LAUNCHED(b, "mamba_conv_bwd (data)");
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

/* dw[di] (+)= sum_n dout * u * rstd: column-sum blocks as k_conv_bwd_weight's */
__global__ void k_gnorm_bwd_weight(float *dw, const bf16 *dout, const bf16 *y, const bf16 *z,
                                   int ldz, const float *rstd, int N, int di, int G,
                                   int accumulate) {
    GT_PDL_ENTRY();
    __shared__ float red[COL_Y][COL_X];
    int c = blockIdx.x * COL_X + threadIdx.x, r = threadIdx.y, gs = di / G;
    float acc = 0.0f;
    if (c < di)
        for (int n = r; n < N; n += COL_Y) {
            float zv = ldf(z + (size_t)n * ldz + c);
            float u = ldf(y + (size_t)n * di + c) * zv * sigm(zv);
            acc += ldf(dout + (size_t)n * di + c) * u * rstd[(size_t)n * G + c / gs];
        }
    red[r][threadIdx.x] = acc;
    __syncthreads();
    if (r != 0 || c >= di) return;
    float s = 0.0f;
    for (int q = 0; q < COL_Y; q++)
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
    gt_launch(k_gnorm_bwd_weight, (di + COL_X - 1) / COL_X, dim3(COL_X, COL_Y), 0, ex, dw,
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
