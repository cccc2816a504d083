/* The SSD scan of the Mamba-2 mixer on CUDA in mamba_ssm's chunked form (the fp32 reference is
 * the sequential scan of cpu_mamba.c): per (sequence b, head h, chunk c of L tokens) the cumsum
 * cs of dt*A, the intra-chunk product (C B^T masked by the decay exp(cs_i - cs_j)) x dt x, the
 * chunk's own state, the states passed from chunk to chunk (sequential over chunks only) and
 * their output exp(cs_i) H C_i, then the D skip; and the backward of all of it. The products
 * are batched GEMMs over every chunk (k_mamba_ssd_gemm.cu) on bf16 operands rounded where
 * mamba_ssm's Triton kernels round them: x, B, C, dy as they come, the decay- and dt-weighted
 * factors, the states and their gradients, C B^T and dy x^T after the mask and decay; the
 * cumsums, the state passing, the per-token and per-chunk sums (this file) sum in fp32, and the
 * passed states and their gradients are kept in bf16, which is what the products read them as
 * (and how mamba_ssm passes its states). bf16 in and out, sums in a fixed order (no atomics),
 * no host sync, no allocation: the buffers are the op's workspace (gt_mamba_ws_floats) and
 * the state the forward leaves for the backward (gt_mamba_ssd_state_floats: dt, cs, C B^T, the
 * states entering the chunks and y's part from them), so that the backward recomputes none of
 * the forward. Every shape runs this one path. */
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
/* State entries a passing thread takes: neighbours, one 16-byte load of fp32 where the state's
 * size allows (ck_pass_vec), else one at a time */
#define CK_PASS_V 4

/* Whether the passing kernels' 4 entries are 16 bytes of fp32 and 8 of bf16 on their bounds */
static int ck_pass_vec(const ck_args &a) {
    uintptr_t at = (uintptr_t)a.st | (uintptr_t)a.hin | (uintptr_t)a.gs;
    return ((size_t)a.P * a.S) % CK_PASS_V == 0 && at % 16 == 0;
}
/* The V fp32 at p */
template <bool VEC> static __device__ __forceinline__ void ck_ld4(float *v, const float *p) {
    if (VEC) {
        float4 u = *(const float4 *)p;
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    } else {
#pragma unroll
        for (int j = 0; j < CK_PASS_V; j++)
            v[j] = p[j];
    }
}
/* The V bf16 at p, widened */
template <bool VEC> static __device__ __forceinline__ void ck_ld4(float *v, const bf16 *p) {
    if (VEC) {
        uint2 u = *(const uint2 *)p;
        float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
        float2 hi = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
        v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
    } else {
#pragma unroll
        for (int j = 0; j < CK_PASS_V; j++)
            v[j] = ldf(p + j);
    }
}
/* v rounded to bf16 at p */
template <bool VEC> static __device__ __forceinline__ void ck_st4(bf16 *p, const float *v) {
    if (VEC) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]),
                       hi = __floats2bfloat162_rn(v[2], v[3]);
        uint2 u;
        u.x = *(const uint32_t *)&lo, u.y = *(const uint32_t *)&hi;
        *(uint2 *)p = u;
    } else {
#pragma unroll
        for (int j = 0; j < CK_PASS_V; j++)
            p[j] = tobf(v[j]);
    }
}

/* The states entering the chunks, H_0 = 0, H_{c+1} = exp(cs_last_c) H_c + Sloc_c, from the
 * chunks' own states Sloc (st, fp32), summed in fp32 and stored in bf16 (hin); a thread per
 * (b, h, CK_PASS_V state entries), the neighbouring entries on neighbouring lanes. Where the
 * state's size is no multiple of CK_PASS_V (!VEC), a thread's entries may reach into the next
 * row (b, h), which has its own decays. */
template <bool VEC> __global__ void k_ck_pass_fwd(ck_args a) {
    GT_PDL_ENTRY();
    size_t ps = (size_t)a.P * a.S, rows = (size_t)a.B * a.H, total = rows * ps;
    GT_GRID_STRIDE(i, (total + CK_PASS_V - 1) / CK_PASS_V) {
        size_t e0 = i * CK_PASS_V;
        if (!VEC && (e0 % ps + CK_PASS_V > ps || e0 + CK_PASS_V > total)) {
            for (size_t e = e0; e < e0 + CK_PASS_V && e < total; e++) { /* one at a time */
                size_t bh = e / ps, at = bh * a.nc * ps + e % ps;
                float st = 0.0f;
                for (int c = 0; c < a.nc; c++) {
                    a.hin[at + (size_t)c * ps] = tobf(st);
                    st = expf(ck_cs_last(a, bh, c)) * st + a.st[at + (size_t)c * ps];
                }
            }
            continue;
        }
        size_t bh = e0 / ps, at = bh * a.nc * ps + e0 % ps;
        float st[CK_PASS_V] = {};
        for (int c0 = 0; c0 < a.nc; c0 += CK_PASS_BATCH) {
            float sl[CK_PASS_BATCH][CK_PASS_V], cl[CK_PASS_BATCH];
#pragma unroll
            for (int q = 0; q < CK_PASS_BATCH; q++)
                if (c0 + q < a.nc) {
                    ck_ld4<VEC>(sl[q], a.st + at + (size_t)(c0 + q) * ps);
                    cl[q] = expf(ck_cs_last(a, bh, c0 + q));
                }
#pragma unroll
            for (int q = 0; q < CK_PASS_BATCH; q++)
                if (c0 + q < a.nc) {
                    ck_st4<VEC>(a.hin + at + (size_t)(c0 + q) * ps, st);
#pragma unroll
                    for (int j = 0; j < CK_PASS_V; j++)
                        st[j] = cl[q] * st[j] + sl[q][j];
                }
        }
    }
}

/* Backwards over chunks, from dL/dHin of chunk c's outputs (st, fp32):
 * G_{c+1} = dL/d(the state leaving chunk c), G_c = dHin_c + exp(cs_last_c) G_{c+1}, G_nc = 0,
 * summed in fp32 and stored in bf16 (gs); and lt, exp(cs_last_c) <G_{c+1}, H_c> (the state
 * leaving chunk c holds the entering one H_c times exp(cs_last_c), so this is the loss's
 * derivative through it by each of the chunk's decays), each block's part of it over its
 * entries (a fixed tree). Block (bh, q) takes entries q GT_MAMBA_SSD_PASS_ENTRIES on of row bh,
 * CK_PASS_V neighbours a thread. */
template <bool VEC>
__global__ void __launch_bounds__(GT_MAMBA_SSD_PASS_ENTRIES / CK_PASS_V) k_ck_pass_bwd(ck_args a) {
    GT_PDL_ENTRY();
    __shared__ float red[32];
    size_t ps = (size_t)a.P * a.S, bh = blockIdx.x;
    size_t e0 = (size_t)blockIdx.y * GT_MAMBA_SSD_PASS_ENTRIES + threadIdx.x * CK_PASS_V;
    bool whole = e0 + CK_PASS_V <= ps; /* else the entries past ps are none */
    size_t at = bh * a.nc * ps + (e0 < ps ? e0 : 0);
    float g[CK_PASS_V] = {};
    for (int r0 = 0; r0 < a.nc; r0 += CK_PASS_BATCH) {
        float own[CK_PASS_BATCH][CK_PASS_V], hc[CK_PASS_BATCH][CK_PASS_V], cl[CK_PASS_BATCH];
        float lt[CK_PASS_BATCH];
#pragma unroll
        for (int q = 0; q < CK_PASS_BATCH; q++) {
            int c = a.nc - 1 - (r0 + q);
#pragma unroll
            for (int j = 0; j < CK_PASS_V; j++)
                own[q][j] = 0.0f, hc[q][j] = 0.0f;
            cl[q] = c >= 0 ? expf(ck_cs_last(a, bh, c)) : 0.0f;
            if (c < 0) continue;
            if (whole) {
                ck_ld4<VEC>(own[q], a.st + at + (size_t)c * ps);
                if (c > 0) ck_ld4<VEC>(hc[q], a.hin + at + (size_t)c * ps); /* H_0 = 0 */
            } else {
#pragma unroll
                for (int j = 0; j < CK_PASS_V; j++) {
                    if (e0 + j >= ps) break;
                    own[q][j] = a.st[at + (size_t)c * ps + j];
                    if (c > 0) hc[q][j] = ldf(a.hin + at + (size_t)c * ps + j);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < CK_PASS_BATCH; q++) {
            int c = a.nc - 1 - (r0 + q);
            lt[q] = 0.0f;
#pragma unroll
            for (int j = 0; j < CK_PASS_V; j++)
                lt[q] += g[j] * hc[q][j];
            lt[q] *= cl[q];
            if (c >= 0 && whole) ck_st4<VEC>(a.gs + at + (size_t)c * ps, g);
            if (c >= 0 && !whole)
#pragma unroll
                for (int j = 0; j < CK_PASS_V; j++)
                    if (e0 + j < ps) a.gs[at + (size_t)c * ps + j] = tobf(g[j]);
#pragma unroll
            for (int j = 0; j < CK_PASS_V; j++)
                g[j] = own[q][j] + cl[q] * g[j];
        }
#pragma unroll
        for (int q = 0; q < CK_PASS_BATCH; q++) {
            int c = a.nc - 1 - (r0 + q);
            if (c < 0) break; /* the same for the whole block */
            float sum = block_sum(lt[q], red);
            if (threadIdx.x == 0) a.lt[(bh * a.nc + c) * a.nlt + blockIdx.y] = sum;
        }
    }
}

/* tok = x . dxs, dy . yhin, dy . x per (token, head): a warp each, lanes over p, a fixed tree;
 * and dx's slice of dxbc, dt (dxs + C_n.B_n dy) + D dy (dxs without C B^T's diagonal), from the
 * same loads */
__global__ void k_ck_tok(ck_args a) {
    GT_PDL_ENTRY();
    size_t NH = (size_t)a.B * a.T * a.H, BHT = NH, nw = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x & 31;
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < NH; w += nw) {
        size_t n = w / a.H;
        int h = (int)(w % a.H);
        size_t o = (((n / a.T) * a.H + h) * a.nc * a.L + n % a.T) * a.P;
        size_t q = ((n / a.T) * a.H + h) * a.T + n % a.T;
        int t = (int)(n % a.T);
        float cbd = ck_cb_diag(a, (int)(n / a.T), h / (a.H / a.G), t / a.L, t % a.L);
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, dt = a.dt[q], fd = dt * cbd + ldf(a.D + h);
        for (int p = lane; p < a.P; p += 32) {
            float xv = ck_x(a, n, h, p), dyv = ck_dy(a, n, h, p), dxs = a.dxs[o + p];
            s0 += xv * dxs;
            s1 += dyv * ldf(a.yhin + o + p);
            s2 += dyv * xv;
            a.dxbc[n * a.C + (size_t)h * a.P + p] = tobf(dt * dxs + fd * dyv);
        }
        s0 = warp_sum(s0), s1 = warp_sum(s1), s2 = warp_sum(s2);
        if (lane == 0) {
            a.tok[q] = s0;
            a.tok[BHT + q] = s1;
            a.tok[2 * BHT + q] = s2;
        }
    }
}

/* The decay's gradient by cs_k from the chunk's own products: sum_j<k W_kj - sum_i>k W_ik from
 * k_ck_msum's sums (row k's over the column tiles up to its own, column k's over the row tiles
 * from its own that the chunk reaches, in order) */
static __device__ __forceinline__ float ck_dcs_own(const ck_args &a, size_t z, int Lc, int k) {
    const int T = GT_MAMBA_SSD_DM_TILE;
    float r = 0.0f, c = 0.0f;
    for (int tj = 0; tj <= k / T; tj++)
        r += a.dda[((z * 2) * a.nt + tj) * a.L + k];
    for (int ti = k / T; ti < a.nt && ti * T < Lc; ti++)
        c += a.dda[((z * 2 + 1) * a.nt + ti) * a.L + k];
    return r - c;
}

/* x . (dxs's state part) at token row q: tok's fourth sum, its parts in order */
static __device__ __forceinline__ float ck_tok_state(const ck_args &a, size_t q) {
    size_t BHT = (size_t)a.B * a.H * a.T;
    float v = 0.0f;
    for (int p = 0; p < a.ntp; p++)
        v += a.tok[(3 + p) * BHT + q];
    return v;
}

/* Per chunk, backwards over its tokens: the decay's gradient at token k (dL/d(dt_k A)),
 *   da_k = sum_i>=k (Y_i + own_i) + lt + sum_j<k T_j,
 * with own_i the chunk's own products' gradient by cs_i (ck_dcs_own), Y_i = dy_i . yhin_i (through
 * y's state part, exp(cs_i)), T_j = dt_j x_j . (dxs_j's state part) (through the state leaving the
 * chunk, exp(cs_last - cs_j)) and lt the pass's (through exp(cs_last) H_c). Each term is formed
 * apart, so that none is the small difference of two sums rounded each its own way (own_i's two
 * sums are of the same fp32 terms); the sum over j < k is the chunk's total less the suffix (fp32
 * sums of the same terms). Then ddt = x . (dxs + CB_ii dy) + da A, dA = sum da dt; the dt slice of
 * dzx and the chunk's sums of ddt_bias, dA and dD. A warp per chunk, its lanes over 32 tokens at a
 * time from the chunk's end (lane 0 the latest), the sums a fixed tree. */
__global__ void k_ck_chunk_bwd(ck_args a) {
    GT_PDL_ENTRY();
    size_t Z = (size_t)a.B * a.H * a.nc, BHT = (size_t)a.B * a.H * a.T;
    size_t nw = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x & 31;
    for (size_t z = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; z < Z; z += nw) {
        int c = (int)(z % a.nc), bh = (int)(z / a.nc), b = bh / a.H, h = bh % a.H;
        int Lc = min(a.L, a.T - c * a.L);
        size_t q0 = (size_t)bh * a.T + (size_t)c * a.L;
        float A = -expf(ldf(a.A_log + h)), carry = 0.0f, sb = 0.0f, sA = 0.0f, sD = 0.0f;
        float tT = 0.0f, lt = 0.0f; /* the chunk's sum of T, lt's parts in order */
        for (int i = lane; i < Lc; i += 32)
            tT += a.dt[q0 + i] * ck_tok_state(a, q0 + i);
        tT = warp_sum(tT);
        for (int k = 0; k < a.nlt; k++)
            lt += a.lt[z * a.nlt + k];
        for (int r0 = 0; r0 < Lc; r0 += 32) {
            int i = Lc - 1 - (r0 + lane), t = c * a.L + i;
            size_t q = (size_t)bh * a.T + t, n = (size_t)b * a.T + t;
            float dt = 0.0f, xdxs = 0.0f, dcs = 0.0f;
            if (i >= 0) {
                dt = a.dt[q], xdxs = a.tok[q];
                dcs = a.tok[BHT + q] - dt * ck_tok_state(a, q) + ck_dcs_own(a, z, Lc, i);
                xdxs += ck_cb_diag(a, b, h / (a.H / a.G), c, i) * a.tok[2 * BHT + q];
            }
            if (i == Lc - 1) dcs += lt + tT;
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
    size_t passers = ((size_t)a.B * a.H * ps + CK_PASS_V - 1) / CK_PASS_V;
    gt_launch(ck_pass_vec(a) ? k_ck_pass_fwd<true> : k_ck_pass_fwd<false>,
              gt_grid(passers, CK_THREADS), CK_THREADS, 0, ex, a);
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
                        "gt_mamba_ws_floats or gt_mamba_ssd_state_floats (backend.h and "
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
                        "gt_mamba_ws_floats or gt_mamba_ssd_state_floats (backend.h and "
                        "k_mamba_ssd_gemm.cu disagree)");
        return;
    }
    a.xbc = (const bf16 *)xbc, a.zx = (const bf16 *)zxbcdt, a.dt_bias = (const bf16 *)dt_bias;
    a.A_log = (const bf16 *)A_log, a.D = (const bf16 *)D, a.dy = (const bf16 *)dy;
    a.dxbc = (bf16 *)dxbc, a.dzx = (bf16 *)dzxbcdt;
    size_t Z = (size_t)a.B * a.H * a.nc, NH = (size_t)a.B * a.T * a.H;
    gt_ssd_product(b, ex, a, CK_DH, "mamba_ssd_bwd (dH)");
    dim3 pass((unsigned)(a.B * a.H), (unsigned)a.nlt);
    gt_launch(ck_pass_vec(a) ? k_ck_pass_bwd<true> : k_ck_pass_bwd<false>, pass,
              GT_MAMBA_SSD_PASS_ENTRIES / CK_PASS_V, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (state passing)");
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
