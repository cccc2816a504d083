/* The Mamba-2 mixer's ops on the CUDA backend (backend.h; the fp32 reference is cpu_mamba.c):
 * causal conv1d + SiLU, the SSD scan sequential in time (one block per sequence and head, the
 * fp32 state in shared memory), the z-gated RMSNorm. bf16 in and out, fp32 math; every
 * reduction runs in a fixed order (no float atomics), no host sync, no allocation. */
#include "backend/cuda/cuda_common.cuh"
#include "config/cuda_limits.h"

#define MAMBA_THREADS 256
#define COL_X 32 /* channels of a column-sum block (weight gradients) */
#define COL_Y 16 /* row lanes of a column-sum block, summed in lane order */
/* PyTorch's softplus switches to the identity past this (beta 1), as cpu_mamba.c */
#define SOFTPLUS_THRESHOLD 20.0f

static __device__ __forceinline__ float sigm(float x) {
    return 1.0f / (1.0f + expf(-x));
}
static __device__ __forceinline__ float silu_grad(float x) {
    float s = sigm(x);
    return s * (1.0f + x * (1.0f - s));
}
static __device__ __forceinline__ float softplus(float x) {
    return x > SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

static int shape_ok(gt_backend *b, const char *op, gt_mamba_shape m) {
    if (m.B > 0 && m.T > 0 && m.H > 0 && m.P > 0 && m.G > 0 && m.S > 0 && m.K > 0 && m.chunk > 0 &&
        m.H % m.G == 0 && m.K <= GT_CUDA_MAMBA_MAX_CONV &&
        (size_t)m.P * m.S <= GT_CUDA_MAMBA_MAX_STATE)
        return 1;
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s: bad shape B=%d T=%d H=%d P=%d G=%d S=%d K=%d chunk=%d (all > 0, H a "
                    "multiple of G, K <= %d, P*S <= %d for the CUDA kernels)",
                    op, m.B, m.T, m.H, m.P, m.G, m.S, m.K, m.chunk, GT_CUDA_MAMBA_MAX_CONV,
                    GT_CUDA_MAMBA_MAX_STATE);
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

/* ---- SSD scan: one block per (sequence b, head h); warp w owns the state rows p = w, w+nw,
 * ..., lane l the columns s = l, l+32, ...; sums over s per warp (fixed shuffle tree) ---- */

typedef struct ssd_args {
    const bf16 *xbc, *zx, *dt_bias, *A_log, *D;
    int T, H, P, G, S, C, di, in;
} ssd_args;

static ssd_args ssd_make(gt_mamba_shape sh, const void *xbc, const void *zx, const void *dt_bias,
                         const void *A_log, const void *D) {
    ssd_args a;
    a.xbc = (const bf16 *)xbc;
    a.zx = (const bf16 *)zx;
    a.dt_bias = (const bf16 *)dt_bias;
    a.A_log = (const bf16 *)A_log;
    a.D = (const bf16 *)D;
    a.T = sh.T;
    a.H = sh.H;
    a.P = sh.P;
    a.G = sh.G;
    a.S = sh.S;
    a.C = gt_mamba_conv(sh);
    a.di = gt_mamba_inner(sh);
    a.in = gt_mamba_in(sh);
    return a;
}

/* dt's pre-activation (raw + dt_bias) at token n, head h */
static __device__ __forceinline__ float dt_pre(const ssd_args &a, size_t n, int h) {
    return ldf(a.zx + n * a.in + (a.in - a.H) + h) + ldf(a.dt_bias + h);
}

/* Loads token n's x (head h), B and C (group g) into shared memory. */
static __device__ __forceinline__ void ssd_load(const ssd_args &a, size_t n, int h, int g,
                                                float *sx, float *sB, float *sC) {
    const bf16 *row = a.xbc + n * a.C;
    for (int i = threadIdx.x; i < a.P; i += blockDim.x)
        sx[i] = ldf(row + (size_t)h * a.P + i);
    for (int i = threadIdx.x; i < a.S; i += blockDim.x) {
        sB[i] = ldf(row + a.di + (size_t)g * a.S + i);
        if (sC) sC[i] = ldf(row + a.di + (size_t)a.G * a.S + (size_t)g * a.S + i);
    }
}

/* shared: state [P][S], x [P], B [S], C [S] */
__global__ void k_ssd_fwd(bf16 *y, ssd_args a) {
    GT_PDL_ENTRY();
    extern __shared__ float smem[];
    int b = blockIdx.x / a.H, h = blockIdx.x % a.H, g = h / (a.H / a.G);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float *st = smem, *sx = st + (size_t)a.P * a.S, *sB = sx + a.P, *sC = sB + a.S;
    for (int i = threadIdx.x; i < a.P * a.S; i += blockDim.x)
        st[i] = 0.0f;
    float A = -expf(ldf(a.A_log + h)), Dh = ldf(a.D + h);
    for (int t = 0; t < a.T; t++) {
        size_t n = (size_t)b * a.T + t;
        __syncthreads(); /* the previous step's reads of x, B, C are done */
        ssd_load(a, n, h, g, sx, sB, sC);
        float d = softplus(dt_pre(a, n, h)), da = expf(d * A);
        __syncthreads();
        for (int p = warp; p < a.P; p += nw) {
            float acc = 0.0f, dxp = d * sx[p];
            for (int s = lane; s < a.S; s += 32) {
                float *v = &st[(size_t)p * a.S + s];
                *v = da * *v + dxp * sB[s];
                acc += *v * sC[s];
            }
            acc = warp_sum(acc);
            if (lane == 0) y[n * a.di + (size_t)h * a.P + p] = tobf(acc + Dh * sx[p]);
        }
    }
}

/* The backward's workspace (gt_mamba_ssd_ws_floats): sums per (b, h) of the dt_bias, A and D
 * gradients, dB and dC per head, the states S_{kL-1} before segment k (zeros for k = 0) and
 * one segment's states, each per (b, h). */
typedef struct ssd_ws {
    float *part;      /* [3][B*H] */
    float *dBp, *dCp; /* [N][H][S] */
    float *ckpt;      /* [B*H][segs][P*S] */
    float *seg;       /* [B*H][L][P*S] */
    int L, segs;
} ssd_ws;

static ssd_ws ssd_ws_make(float *ws, gt_mamba_shape sh) {
    ssd_ws w;
    size_t BH = (size_t)sh.B * sh.H, N = (size_t)sh.B * sh.T, ps = (size_t)sh.P * sh.S;
    w.L = gt_mamba_ckpt_len(sh);
    w.segs = (sh.T + w.L - 1) / w.L;
    w.part = ws;
    w.dBp = w.part + 3 * BH;
    w.dCp = w.dBp + N * sh.H * sh.S;
    w.ckpt = w.dCp + N * sh.H * sh.S;
    w.seg = w.ckpt + BH * w.segs * ps;
    return w;
}

/* Reverse scan per (b, h). Shared: G = dL/dS_t [P][S] (first the running state while the
 * segment starts are saved), x [P], B [S], C [S], dy [P], 32 floats for block sums.
 * Each thread reads and writes only its own state entries in the saved states, except where a
 * barrier separates the writes from the reads of others (dB, dC: thread per s). */
__global__ void k_ssd_bwd(bf16 *dxbc, bf16 *dzx, const bf16 *dy, ssd_args a, ssd_ws w) {
    GT_PDL_ENTRY();
    extern __shared__ float smem[];
    int bh = blockIdx.x, b = bh / a.H, h = bh % a.H, g = h / (a.H / a.G);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    size_t ps = (size_t)a.P * a.S;
    float *G = smem, *sx = G + ps, *sB = sx + a.P, *sC = sB + a.S, *sdy = sC + a.S;
    float *red = sdy + a.P;
    float *ckpt = w.ckpt + (size_t)bh * w.segs * ps, *seg = w.seg + (size_t)bh * w.L * ps;
    float A = -expf(ldf(a.A_log + h)), Dh = ldf(a.D + h);

    /* forward: the state before each segment */
    for (int i = threadIdx.x; i < (int)ps; i += blockDim.x)
        G[i] = 0.0f;
    for (int t = 0; t < a.T; t++) {
        size_t n = (size_t)b * a.T + t;
        __syncthreads();
        ssd_load(a, n, h, g, sx, sB, NULL);
        float d = softplus(dt_pre(a, n, h)), da = expf(d * A);
        __syncthreads();
        float *ck = t % w.L == 0 ? ckpt + (size_t)(t / w.L) * ps : NULL;
        for (int p = warp; p < a.P; p += nw)
            for (int s = lane; s < a.S; s += 32) {
                size_t k = (size_t)p * a.S + s;
                if (ck) ck[k] = G[k];
                G[k] = da * G[k] + d * sx[p] * sB[s];
            }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < (int)ps; i += blockDim.x)
        G[i] = 0.0f;

    float a_next = 0.0f, acc_db = 0.0f, acc_dA = 0.0f, acc_dD = 0.0f; /* thread 0's sums */
    for (int k = w.segs - 1; k >= 0; k--) {
        int t0 = k * w.L, t1 = min(a.T, t0 + w.L);
        const float *start = ckpt + (size_t)k * ps;
        /* the segment's states S_t0 .. S_{t1-1} */
        for (int t = t0; t < t1; t++) {
            size_t n = (size_t)b * a.T + t;
            __syncthreads();
            ssd_load(a, n, h, g, sx, sB, NULL);
            float d = softplus(dt_pre(a, n, h)), da = expf(d * A);
            __syncthreads();
            const float *prev = t == t0 ? start : seg + (size_t)(t - 1 - t0) * ps;
            float *cur = seg + (size_t)(t - t0) * ps;
            for (int p = warp; p < a.P; p += nw)
                for (int s = lane; s < a.S; s += 32) {
                    size_t e = (size_t)p * a.S + s;
                    cur[e] = da * prev[e] + d * sx[p] * sB[s];
                }
        }
        for (int t = t1 - 1; t >= t0; t--) {
            size_t n = (size_t)b * a.T + t;
            __syncthreads();
            ssd_load(a, n, h, g, sx, sB, sC);
            for (int i = threadIdx.x; i < a.P; i += blockDim.x)
                sdy[i] = ldf(dy + n * a.di + (size_t)h * a.P + i);
            float v = dt_pre(a, n, h), d = softplus(v), da = expf(d * A);
            __syncthreads();
            const float *St = seg + (size_t)(t - t0) * ps;
            const float *Sp = t == 0 ? NULL : t == t0 ? start : St - ps;
            float d_a = 0.0f, d_dt = 0.0f, d_D = 0.0f; /* this thread's shares */
            for (int p = warp; p < a.P; p += nw) {
                float gx = 0.0f;
                for (int s = lane; s < a.S; s += 32) {
                    size_t e = (size_t)p * a.S + s;
                    float gv = sdy[p] * sC[s] + a_next * G[e];
                    G[e] = gv;
                    gx += gv * sB[s];
                    if (Sp) d_a += gv * Sp[e];
                }
                gx = warp_sum(gx);
                if (lane == 0) {
                    dxbc[n * a.C + (size_t)h * a.P + p] = tobf(Dh * sdy[p] + d * gx);
                    d_dt += gx * sx[p];
                    d_D += sdy[p] * sx[p];
                }
            }
            d_a = block_sum(d_a, red); /* its barriers also publish G */
            d_dt = block_sum(d_dt, red);
            d_D = block_sum(d_D, red);
            /* dB, dC of this head: thread per s, over p in order */
            for (int s = threadIdx.x; s < a.S; s += blockDim.x) {
                float cb = 0.0f, cc = 0.0f;
                for (int p = 0; p < a.P; p++) {
                    size_t e = (size_t)p * a.S + s;
                    cc += St[e] * sdy[p];
                    cb += G[e] * sx[p];
                }
                size_t o = (n * a.H + h) * a.S + s;
                w.dCp[o] = cc;
                w.dBp[o] = d * cb;
            }
            if (threadIdx.x == 0) {
                float ddt = d_dt + d_a * A * da;
                float gr = ddt * (v > SOFTPLUS_THRESHOLD ? 1.0f : sigm(v));
                dzx[n * a.in + (a.in - a.H) + h] = tobf(gr);
                acc_db += gr;
                acc_dA += d_a * d * da;
                acc_dD += d_D;
            }
            a_next = da;
        }
    }
    if (threadIdx.x == 0) {
        size_t BH = gridDim.x;
        w.part[bh] = acc_db;
        w.part[BH + bh] = acc_dA;
        w.part[2 * BH + bh] = acc_dD;
    }
}

/* dB and dC of group g at token n: its heads' shares summed in head order */
__global__ void k_ssd_bc_sum(bf16 *dxbc, const float *dBp, const float *dCp, int H, int G, int S,
                             int C, int di, size_t total) {
    GT_PDL_ENTRY();
    int per = H / G;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / ((size_t)2 * G * S);
        int j = (int)(i % ((size_t)2 * G * S)), which = j / (G * S), gs = j % (G * S);
        int g = gs / S, s = gs % S;
        const float *src = which ? dCp : dBp;
        float acc = 0.0f;
        for (int q = 0; q < per; q++)
            acc += src[(n * H + (size_t)g * per + q) * S + s];
        dxbc[n * C + di + (size_t)which * G * S + gs] = tobf(acc);
    }
}

/* ddt_bias, dA_log (dA/dA_log = A), dD: the (b, h) sums added in sequence order */
__global__ void k_ssd_param_sum(float *ddt_bias, float *dA_log, float *dD, const float *part,
                                const bf16 *A_log, int B, int H, int accumulate) {
    GT_PDL_ENTRY();
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    size_t BH = (size_t)B * H;
    float db = 0.0f, dA = 0.0f, dd = 0.0f;
    for (int b = 0; b < B; b++) {
        db += part[(size_t)b * H + h];
        dA += part[BH + (size_t)b * H + h];
        dd += part[2 * BH + (size_t)b * H + h];
    }
    float gA = dA * -expf(ldf(A_log + h));
    ddt_bias[h] = accumulate ? ddt_bias[h] + db : db;
    dA_log[h] = accumulate ? dA_log[h] + gA : gA;
    dD[h] = accumulate ? dD[h] + dd : dd;
}

static size_t ssd_fwd_smem(gt_mamba_shape sh) {
    return ((size_t)sh.P * sh.S + sh.P + 2 * (size_t)sh.S) * sizeof(float);
}
static size_t ssd_bwd_smem(gt_mamba_shape sh) {
    return ((size_t)sh.P * sh.S + 2 * (size_t)sh.P + 2 * (size_t)sh.S + 32) * sizeof(float);
}

static void cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                               const void *zxbcdt, const void *dt_bias, const void *A_log,
                               const void *D, float *ws, gt_mamba_shape sh) {
    (void)ws; /* the forward keeps its state in shared memory */
    if (b->planning || !shape_ok(b, "mamba_ssd_fwd", sh)) return;
    gt_launch(k_ssd_fwd, sh.B * sh.H, MAMBA_THREADS, ssd_fwd_smem(sh), gt_cuda_ex(b, s), (bf16 *)y,
              ssd_make(sh, xbc, zxbcdt, dt_bias, A_log, D));
    GT_CUDA_LAUNCHED(b, "mamba_ssd_fwd");
}

static void cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt,
                               float *ddt_bias, float *dA_log, float *dD, const void *dy,
                               const void *xbc, const void *zxbcdt, const void *dt_bias,
                               const void *A_log, const void *D, float *ws, gt_mamba_shape sh,
                               int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_ssd_bwd", sh)) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    ssd_ws w = ssd_ws_make(ws, sh);
    int C = gt_mamba_conv(sh);
    gt_launch(k_ssd_bwd, sh.B * sh.H, MAMBA_THREADS, ssd_bwd_smem(sh), ex, (bf16 *)dxbc,
              (bf16 *)dzxbcdt, (const bf16 *)dy, ssd_make(sh, xbc, zxbcdt, dt_bias, A_log, D), w);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (scan)");
    size_t total = (size_t)sh.B * sh.T * 2 * sh.G * sh.S;
    gt_launch(k_ssd_bc_sum, gt_grid(total, MAMBA_THREADS), MAMBA_THREADS, 0, ex, (bf16 *)dxbc,
              (const float *)w.dBp, (const float *)w.dCp, sh.H, sh.G, sh.S, C, gt_mamba_inner(sh),
              total);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (dB, dC)");
    gt_launch(k_ssd_param_sum, (sh.H + 127) / 128, 128, 0, ex, ddt_bias, dA_log, dD,
              (const float *)w.part, (const bf16 *)A_log, sh.B, sh.H, accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (parameters)");
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

/* The scan kernels keep a head's state in shared memory: allow them the most a block can have
 * (GT_CUDA_MAMBA_MAX_STATE floats and the vectors fit in it). */
extern "C" int gt_cuda_mamba_init(gt_error *err) {
    int dev = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_ssd_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_ssd_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (e != cudaSuccess)
        return gt_error_set(err, GT_ERR_DEVICE, "setting up the Mamba scan kernels: %s",
                            cudaGetErrorString(e));
    return GT_OK;
}

extern "C" void gt_cuda_register_mamba_ops(gt_backend_ops *ops) {
    ops->mamba_conv_fwd = cuda_mamba_conv_fwd;
    ops->mamba_conv_bwd = cuda_mamba_conv_bwd;
    ops->mamba_ssd_fwd = cuda_mamba_ssd_fwd;
    ops->mamba_ssd_bwd = cuda_mamba_ssd_bwd;
    ops->mamba_gated_norm_fwd = cuda_mamba_gated_norm_fwd;
    ops->mamba_gated_norm_bwd = cuda_mamba_gated_norm_bwd;
}
