/* The SSD scan of the Mamba-2 mixer on CUDA in mamba_ssm's chunked form (the fp32 reference is
 * the sequential scan of cpu_mamba.c): per (sequence b, head h, chunk c of L tokens) the cumsum
 * cs of dt*A, the intra-chunk product (C B^T masked by the decay exp(cs_i - cs_j)) x dt x, the
 * chunk's own state, the states passed from chunk to chunk (sequential over chunks only) and
 * their output exp(cs_i) H C_i, then the D skip; and the backward of all of it. The products
 * are batched GEMMs over every chunk (k_mamba_ssd_gemm.cu) on bf16 operands rounded where
 * mamba_ssm's Triton kernels round them: x, B, C, dy as they come, the decay- and dt-weighted
 * factors, the fp32 states and their gradients, C B^T and dy x^T after the mask and decay; the
 * cumsums, the state passing, the per-token and per-chunk sums (this file) stay fp32. bf16 in
 * and out, sums in a fixed order (no atomics), no host sync, no allocation: the buffers are the
 * op's workspace (gt_mamba_ssd_ws_floats) and the state the forward leaves for the backward
 * (gt_mamba_ssd_state_floats: dt, cs, C B^T, the states entering the chunks and y without D),
 * so that the backward recomputes none of the forward. Every shape runs this one path. */
#include "backend/cuda/mamba_ssd.cuh"

/* PyTorch's softplus switches to the identity past this (beta 1), as cpu_mamba.c */
#define CK_SOFTPLUS_THRESHOLD 20.0f

static __device__ __forceinline__ float ck_sigm(float v) {
    return 1.0f / (1.0f + expf(-v));
}
/* dt's pre-activation (raw + dt_bias) at token n, head h */
static __device__ __forceinline__ float ck_dt_pre(const ck_args &a, size_t n, int h) {
    return ldf(a.zx + n * a.in + (a.in - a.H) + h) + ldf(a.dt_bias + h);
}

/* Inclusive sum over a warp's lanes in a fixed order (Hillis-Steele): lane l gets v_0..v_l. */
static __device__ __forceinline__ float ck_warp_scan(float v, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        float u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
    }
    return v;
}

/* dt = softplus(raw + dt_bias) and its cumsum times A within the chunk: a warp per chunk, its
 * lanes over 32 tokens at a time, each round's scan added to the last round's total */
__global__ void k_ck_cumsum(ck_args a) {
    GT_PDL_ENTRY();
    size_t Z = (size_t)a.B * a.H * a.nc, nw = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x & 31;
    for (size_t z = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; z < Z; z += nw) {
        int c = (int)(z % a.nc), bh = (int)(z / a.nc), b = bh / a.H, h = bh % a.H;
        int Lc = min(a.L, a.T - c * a.L);
        float A = -expf(ldf(a.A_log + h)), carry = 0.0f;
        for (int i0 = 0; i0 < Lc; i0 += 32) {
            int i = i0 + lane, t = c * a.L + i;
            float d = 0.0f;
            if (i < Lc) {
                float v = ck_dt_pre(a, (size_t)b * a.T + t, h);
                d = v > CK_SOFTPLUS_THRESHOLD ? v : log1pf(expf(v));
            }
            float acc = carry + ck_warp_scan(d * A, lane);
            if (i < Lc) {
                a.dt[(size_t)bh * a.T + t] = d;
                a.cs[(size_t)bh * a.T + t] = acc;
            }
            carry = __shfl_sync(0xffffffffu, acc, 31);
        }
    }
}

/* cs at the last token of chunk c of row bh: log of the chunk's total decay */
static __device__ __forceinline__ float ck_cs_last(const ck_args &a, size_t bh, int c) {
    int Lc = min(a.L, a.T - c * a.L);
    return a.cs[bh * a.T + (size_t)c * a.L + Lc - 1];
}

/* Chunks whose state entries and decays the passing kernels load before using any: loads
 * issued together, not one dependent round trip per chunk behind the previous store */
#define CK_PASS_BATCH 8

/* In place over hin: the chunk's own state becomes the state entering it,
 * H_0 = 0, H_{c+1} = exp(cs_last_c) H_c + Sloc_c; a thread per (b, h, state entry), the
 * neighbouring entries on neighbouring lanes */
__global__ void k_ck_pass_fwd(ck_args a) {
    GT_PDL_ENTRY();
    size_t ps = (size_t)a.P * a.S, total = (size_t)a.B * a.H * ps;
    GT_GRID_STRIDE(i, total) {
        size_t bh = i / ps, e = i % ps;
        float *v = a.hin + bh * a.nc * ps + e, st = 0.0f;
        for (int c0 = 0; c0 < a.nc; c0 += CK_PASS_BATCH) {
            float own[CK_PASS_BATCH], cl[CK_PASS_BATCH];
#pragma unroll
            for (int q = 0; q < CK_PASS_BATCH; q++)
                if (c0 + q < a.nc) {
                    own[q] = v[(size_t)(c0 + q) * ps];
                    cl[q] = ck_cs_last(a, bh, c0 + q);
                }
#pragma unroll
            for (int q = 0; q < CK_PASS_BATCH; q++)
                if (c0 + q < a.nc) {
                    v[(size_t)(c0 + q) * ps] = st;
                    st = expf(cl[q]) * st + own[q];
                }
        }
    }
}

/* In place over gs, backwards over chunks: dL/dHin of chunk c's outputs becomes
 * G_{c+1} = dL/d(the state leaving chunk c); G_c = dHin_c + exp(cs_last_c) G_{c+1}, G_nc = 0 */
__global__ void k_ck_pass_bwd(ck_args a) {
    GT_PDL_ENTRY();
    size_t ps = (size_t)a.P * a.S, total = (size_t)a.B * a.H * ps;
    GT_GRID_STRIDE(i, total) {
        size_t bh = i / ps, e = i % ps;
        float *v = a.gs + bh * a.nc * ps + e, g = 0.0f;
        for (int r0 = 0; r0 < a.nc; r0 += CK_PASS_BATCH) {
            float own[CK_PASS_BATCH], cl[CK_PASS_BATCH];
#pragma unroll
            for (int q = 0; q < CK_PASS_BATCH; q++) {
                int c = a.nc - 1 - (r0 + q);
                if (c >= 0) {
                    own[q] = v[(size_t)c * ps];
                    cl[q] = ck_cs_last(a, bh, c);
                }
            }
#pragma unroll
            for (int q = 0; q < CK_PASS_BATCH; q++) {
                int c = a.nc - 1 - (r0 + q);
                if (c >= 0) {
                    v[(size_t)c * ps] = g;
                    g = own[q] + expf(cl[q]) * g;
                }
            }
        }
    }
}

/* lt[b,h,c] = <G_{c+1}, H_{c+1}>: the state leaving chunk c is exp(cs_last) times all it sums,
 * so this is the loss's derivative by cs_last through it; a block per chunk */
__global__ void k_ck_lt(ck_args a) {
    GT_PDL_ENTRY();
    __shared__ float red[32];
    size_t z = blockIdx.x, ps = (size_t)a.P * a.S;
    int c = (int)(z % a.nc);
    float s = 0.0f;
    if (c + 1 < a.nc)
        for (size_t e = threadIdx.x; e < ps; e += blockDim.x)
            s += a.gs[z * ps + e] * a.hin[(z + 1) * ps + e];
    s = block_sum(s, red);
    if (threadIdx.x == 0) a.lt[z] = s;
}

/* tok = x . dxs, dy . yf, dy . x per (token, head): a warp each, lanes over p, a fixed tree;
 * and dx's slice of dxbc, dt dxs + D dy, from the same loads */
__global__ void k_ck_tok(ck_args a) {
    GT_PDL_ENTRY();
    size_t NH = (size_t)a.B * a.T * a.H, BHT = NH, nw = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x & 31;
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < NH; w += nw) {
        size_t n = w / a.H;
        int h = (int)(w % a.H);
        size_t o = (((n / a.T) * a.H + h) * a.nc * a.L + n % a.T) * a.P;
        size_t q = ((n / a.T) * a.H + h) * a.T + n % a.T;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, dt = a.dt[q], Dh = ldf(a.D + h);
        for (int p = lane; p < a.P; p += 32) {
            float xv = ck_x(a, n, h, p), dyv = ck_dy(a, n, h, p), dxs = a.dxs[o + p];
            s0 += xv * dxs;
            s1 += dyv * a.yf[o + p];
            s2 += dyv * xv;
            a.dxbc[n * a.C + (size_t)h * a.P + p] = tobf(dt * dxs + Dh * dyv);
        }
        s0 = warp_sum(s0), s1 = warp_sum(s1), s2 = warp_sum(s2);
        if (lane == 0) {
            a.tok[q] = s0;
            a.tok[BHT + q] = s1;
            a.tok[2 * BHT + q] = s2;
        }
    }
}

/* Per chunk, backwards over its tokens: dcs_i = dy_i . (y_i - D x_i) - dt_i x_i . dxs_i (+ lt
 * at the last), da = the reverse cumsum of dcs, ddt = x . dxs + da A, dA = sum da dt; the dt
 * slice of dzx and the chunk's sums of ddt_bias, dA and dD. A warp per chunk, its lanes over
 * 32 tokens at a time from the chunk's end (lane 0 the latest), the sums a fixed tree. */
__global__ void k_ck_chunk_bwd(ck_args a) {
    GT_PDL_ENTRY();
    size_t Z = (size_t)a.B * a.H * a.nc, BHT = (size_t)a.B * a.H * a.T;
    size_t nw = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x & 31;
    for (size_t z = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; z < Z; z += nw) {
        int c = (int)(z % a.nc), bh = (int)(z / a.nc), b = bh / a.H, h = bh % a.H;
        int Lc = min(a.L, a.T - c * a.L);
        float A = -expf(ldf(a.A_log + h)), carry = 0.0f, sb = 0.0f, sA = 0.0f, sD = 0.0f;
        for (int r0 = 0; r0 < Lc; r0 += 32) {
            int i = Lc - 1 - (r0 + lane), t = c * a.L + i;
            size_t q = (size_t)bh * a.T + t, n = (size_t)b * a.T + t;
            float dt = 0.0f, xdxs = 0.0f, dcs = 0.0f;
            if (i >= 0) {
                dt = a.dt[q], xdxs = a.tok[q];
                dcs = a.tok[BHT + q] - dt * xdxs + (i == Lc - 1 ? a.lt[z] : 0.0f);
            }
            float da = carry + ck_warp_scan(dcs, lane);
            carry = __shfl_sync(0xffffffffu, da, 31);
            if (i < 0) continue;
            float v = ck_dt_pre(a, n, h);
            float gr = (xdxs + da * A) * (v > CK_SOFTPLUS_THRESHOLD ? 1.0f : ck_sigm(v));
            a.dzx[n * a.in + (a.in - a.H) + h] = tobf(gr);
            sb += gr;
            sA += da * dt;
            sD += a.tok[2 * BHT + q];
        }
        sb = warp_sum(sb), sA = warp_sum(sA), sD = warp_sum(sD);
        if (lane == 0) {
            a.part[z] = sb;
            a.part[Z + z] = sA;
            a.part[2 * Z + z] = sD;
        }
    }
}

/* ddt_bias, dA_log (dA/dA_log = A), dD: the chunks' sums; a warp per head, its lanes over
 * the (sequence, chunk) pairs (so their loads are in flight together), then a fixed tree */
__global__ void k_ck_param_sum(float *ddt_bias, float *dA_log, float *dD, ck_args a,
                               int accumulate) {
    GT_PDL_ENTRY();
    int h = blockIdx.x, lane = threadIdx.x;
    size_t Z = (size_t)a.B * a.H * a.nc;
    float db = 0.0f, dA = 0.0f, dd = 0.0f;
    for (int q = lane; q < a.B * a.nc; q += 32) {
        size_t z = ((size_t)(q / a.nc) * a.H + h) * a.nc + q % a.nc;
        db += a.part[z];
        dA += a.part[Z + z];
        dd += a.part[2 * Z + z];
    }
    db = warp_sum(db), dA = warp_sum(dA), dd = warp_sum(dd);
    if (lane != 0) return;
    float gA = dA * -expf(ldf(a.A_log + h));
    ddt_bias[h] = accumulate ? ddt_bias[h] + db : db;
    dA_log[h] = accumulate ? dA_log[h] + gA : gA;
    dD[h] = accumulate ? dD[h] + dd : dd;
}

/* dt, cs, CB and the states entering every chunk: the forward's start */
static void ck_states(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what) {
    size_t Z = (size_t)a.B * a.H * a.nc, ps = (size_t)a.P * a.S;
    gt_launch(k_ck_cumsum, gt_grid(Z * 32, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, what);
    gt_ssd_product(b, ex, a, CK_CB, what);
    gt_ssd_product(b, ex, a, CK_SLOC, what);
    gt_launch(k_ck_pass_fwd, gt_grid((size_t)a.B * a.H * ps, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, what);
}

extern "C" void gt_cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                                      const void *zxbcdt, const void *dt_bias, const void *A_log,
                                      const void *D, float *ws, float *state, gt_mamba_shape sh) {
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    ck_args a = gt_ssd_args(sh, ws, state);
    if (!a.fits) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "mamba_ssd_fwd: the chunked scan's workspace or state layout outgrew "
                        "gt_mamba_ssd_ws_floats or gt_mamba_ssd_state_floats (backend.h and "
                        "k_mamba_ssd_gemm.cu disagree)");
        return;
    }
    a.xbc = (const bf16 *)xbc, a.zx = (const bf16 *)zxbcdt, a.dt_bias = (const bf16 *)dt_bias;
    a.A_log = (const bf16 *)A_log, a.D = (const bf16 *)D, a.y = (bf16 *)y;
    ck_states(b, ex, a, "mamba_ssd_fwd (states)");
    gt_ssd_product(b, ex, a, CK_YF, "mamba_ssd_fwd (output)"); /* y itself too */
}

extern "C" void gt_cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt,
                                      float *ddt_bias, float *dA_log, float *dD, const void *dy,
                                      const void *xbc, const void *zxbcdt, const void *dt_bias,
                                      const void *A_log, const void *D, float *ws,
                                      const float *state, gt_mamba_shape sh, int accumulate) {
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    /* the state is only read here (ck_args holds the forward's writable pointers) */
    ck_args a = gt_ssd_args(sh, ws, (float *)state);
    if (!a.fits) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "mamba_ssd_bwd: the chunked scan's workspace or state layout outgrew "
                        "gt_mamba_ssd_ws_floats or gt_mamba_ssd_state_floats (backend.h and "
                        "k_mamba_ssd_gemm.cu disagree)");
        return;
    }
    a.xbc = (const bf16 *)xbc, a.zx = (const bf16 *)zxbcdt, a.dt_bias = (const bf16 *)dt_bias;
    a.A_log = (const bf16 *)A_log, a.D = (const bf16 *)D, a.dy = (const bf16 *)dy;
    a.dxbc = (bf16 *)dxbc, a.dzx = (bf16 *)dzxbcdt;
    size_t Z = (size_t)a.B * a.H * a.nc, ps = (size_t)a.P * a.S;
    size_t NH = (size_t)a.B * a.T * a.H;
    gt_ssd_product(b, ex, a, CK_DH, "mamba_ssd_bwd (dH)");
    gt_launch(k_ck_pass_bwd, gt_grid((size_t)a.B * a.H * ps, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (state passing)");
    gt_launch(k_ck_lt, (unsigned)Z, CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (chunk ends)");
    int tok_done = gt_ssd_product(b, ex, a, CK_DXS, "mamba_ssd_bwd (dx)");
    gt_ssd_product(b, ex, a, CK_DC, "mamba_ssd_bwd (dB, dC)");
    if (!tok_done) {
        gt_launch(k_ck_tok, gt_grid(NH * 32, CK_THREADS), CK_THREADS, 0, ex, a);
        GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (token sums)");
    }
    gt_launch(k_ck_chunk_bwd, gt_grid(Z * 32, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (dt)");
    gt_launch(k_ck_param_sum, (unsigned)a.H, 32, 0, ex, ddt_bias, dA_log, dD, a, accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (parameters)");
}
