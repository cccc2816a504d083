/* The SSD scan of the Mamba-2 mixer on CUDA in mamba_ssm's chunked form (the fp32 reference is
 * the sequential scan of cpu_mamba.c): per (sequence b, head h, chunk c of L tokens) the cumsum
 * cs of dt*A, the intra-chunk product (C B^T masked by the decay exp(cs_i - cs_j)) x dt x, the
 * chunk's own state, the states passed from chunk to chunk (sequential over chunks only) and
 * their output exp(cs_i) H C_i, then the D skip; and the backward of all of it. Each product
 * runs over every chunk at once as one cuBLASLt strided-batched GEMM (cuda_batched_gemm.c,
 * fp32 sums) on bf16 operands that one elementwise pass per operand materializes in the
 * workspace, per chunk and padded to whole chunks (masks and decays applied in fp32 before the
 * rounding), then a pass that stores the result where it is not the GEMM's own output. They
 * round to bf16 what mamba_ssm's Triton kernels round: x, B, C, dy as they come, the decay- and
 * dt-weighted factors, the fp32 states and their gradients, C B^T and dy x^T after the mask and
 * decay; the cumsums, the state passing, the per-token and per-chunk sums stay fp32. bf16 in and
 * out, sums in a fixed order (no atomics), no host sync, no allocation: the buffers are the op's
 * workspace (gt_mamba_ssd_ws_floats). Every shape runs this one path. */
#include <stdint.h>

#include "backend/cuda/mma_sync.cuh"

#define CK_THREADS 256 /* the elementwise and per-chunk kernels */
#define CK_VEC 8       /* bf16 an operand kernel's thread writes at once (16 bytes) */
/* PyTorch's softplus switches to the identity past this (beta 1), as cpu_mamba.c */
#define CK_SOFTPLUS_THRESHOLD 20.0f

/* The products; the comments give out[m][n] = sum_k a(m, k) b(k, n) of one chunk, with
 * E_ij = exp(cs_i - cs_j), w_j = exp(cs_last - cs_j), xs_j = dt_j x_j, dM_ij = dy_i . x_j. */
enum {
    CK_CB,   /* per (b, g, c): CB[i][j] = C_i . B_j, j <= i (k over S) */
    CK_SLOC, /* Sloc[p][s] = sum_j w_j xs_j[p] B_j[s] (k over the chunk) */
    CK_Y,    /* y[i][p] = sum_j<=i CB_ij E_ij xs_j[p] + exp(cs_i) sum_s Hin[p][s] C_i[s]; + D x */
    CK_YF,   /* the same into fp32, without D (the backward's dcs needs it) */
    CK_DH,   /* dHin[p][s] = sum_i exp(cs_i) dy_i[p] C_i[s] */
    CK_DM,   /* dM[i][j] = dy_i . x_j, j <= i (k over P) */
    CK_DXS,  /* dxs[j][p] = sum_i>=j CB_ij E_ij dy_i[p] + w_j sum_s B_j[s] G[p][s] */
    CK_DC,   /* dC_i[s] = exp(cs_i) sum_p dy_i[p] Hin[p][s] + sum_j<=i dt_j dM_ij E_ij B_j[s] */
    CK_DB,   /* dB_j[s] = w_j sum_p xs_j[p] G[p][s] + sum_i>=j dt_j dM_ij E_ij C_i[s] */
};

/* Pointers into the workspace (laid out as gt_mamba_ssd_ws_floats counts them) and shapes. */
typedef struct ck_args {
    const bf16 *xbc, *zx, *dt_bias, *A_log, *D, *dy;
    bf16 *y, *dxbc, *dzx;
    float *dt, *cs;   /* [B*H][T]: softplus'd dt, cumsum of dt*A within the chunk */
    float *cb;        /* [B*G][nc][L][L] */
    float *hin;       /* [B*H][nc][P][S]: the chunk's own state, then the state entering it */
    float *gs;        /* [B*H][nc][P][S]: dL/dHin of the chunk's outputs, then dL/d(state out) */
    float *dm;        /* [B*H][nc][L][L] */
    float *yf, *dxs;  /* [B*H][nc*L][P]: tokens padded to whole chunks */
    float *tok;       /* [3][B*H][T]: x . dxs, dy . yf, dy . x */
    float *lt;        /* [B*H][nc]: <dL/d(state out), state out> */
    float *part;      /* [3][B*H][nc]: ddt_bias, dA, dD per chunk */
    float *dBp, *dCp; /* [B*H][nc*L][S] per head, before the sum over a group's heads */
    bf16 *opa, *opb;  /* one product's operands per chunk (ck_gemm), reused by the next */
    float *opc;       /* its fp32 result per chunk where that is not the GEMM's own output */
    int B, T, H, P, G, S, L, nc, C, di, in;
    int fits; /* the layout ends inside gt_mamba_ssd_ws_floats */
} ck_args;

/* One product as a batched GEMM over chunks: M x N x K with the chunk's length taken whole
 * (a shorter last chunk's operands are zero past its end), A stored as ar rows of lda, B as br
 * rows of ldb, C as M rows of ldc; leading dimensions rounded up to CK_VEC elements so that
 * every row and every chunk's matrix starts on 16 bytes. */
typedef struct ck_gemm {
    int M, N, K, batch, ar, br;
    int lda, ldb, ldc;
} ck_gemm;

static int ck_round(int n) {
    return (int)gt_mamba_ssd_ld((size_t)n);
}

/* The workspace pointer p rounded up to GT_MAMBA_SSD_WS_ALIGN_FLOATS floats */
static float *ck_align(void *p) {
    uintptr_t u = (uintptr_t)p, al = GT_MAMBA_SSD_WS_ALIGN_FLOATS * sizeof(float);
    return (float *)((u + al - 1) / al * al);
}

/* One chunk of one head (or group, for CK_CB): token n0 is its first, Lc its length. */
typedef struct ck_at {
    int h, g, c, Lc;
    size_t z, n0;
    const float *cs, *dt, *cb, *dm;
    const float *hin, *gs;
    float csl, A, Dh;
} ck_at;

template <int OP> static __device__ __forceinline__ ck_at ck_at_make(const ck_args &a, size_t z) {
    ck_at x;
    int c = (int)(z % a.nc);
    size_t bq = z / a.nc; /* b*H + h, or b*G + g for CK_CB */
    int per = OP == CK_CB ? a.G : a.H;
    int b = (int)(bq / per);
    x.z = z, x.c = c;
    x.h = OP == CK_CB ? 0 : (int)(bq % per);
    x.g = OP == CK_CB ? (int)(bq % per) : x.h / (a.H / a.G);
    x.Lc = min(a.L, a.T - c * a.L);
    x.n0 = (size_t)b * a.T + (size_t)c * a.L;
    size_t bh = (size_t)b * a.H + x.h, LL = (size_t)a.L * a.L, ps = (size_t)a.P * a.S;
    x.cs = a.cs + bh * a.T + (size_t)c * a.L;
    x.dt = a.dt + bh * a.T + (size_t)c * a.L;
    x.cb = a.cb + (((size_t)b * a.G + x.g) * a.nc + c) * LL;
    x.dm = a.dm + (bh * a.nc + c) * LL;
    x.hin = a.hin + (bh * a.nc + c) * ps;
    x.gs = a.gs + (bh * a.nc + c) * ps;
    x.csl = OP == CK_CB ? 0.0f : x.cs[x.Lc - 1];
    x.A = -expf(ldf(a.A_log + x.h));
    x.Dh = ldf(a.D + x.h);
    return x;
}

static __device__ __forceinline__ float ck_x(const ck_args &a, size_t n, int h, int p) {
    return ldf(a.xbc + n * a.C + (size_t)h * a.P + p);
}
static __device__ __forceinline__ float ck_b(const ck_args &a, size_t n, int g, int s) {
    return ldf(a.xbc + n * a.C + a.di + (size_t)g * a.S + s);
}
static __device__ __forceinline__ float ck_c(const ck_args &a, size_t n, int g, int s) {
    return ldf(a.xbc + n * a.C + a.di + (size_t)(a.G + g) * a.S + s);
}
static __device__ __forceinline__ float ck_dy(const ck_args &a, size_t n, int h, int p) {
    return ldf(a.dy + n * a.di + (size_t)h * a.P + p);
}

template <int OP>
static __host__ __device__ __forceinline__ void ck_dims(const ck_args &a, const ck_at &x, int *M,
                                                        int *N, int *K) {
    switch (OP) {
    case CK_CB:
        *M = x.Lc, *N = x.Lc, *K = a.S;
        break;
    case CK_SLOC:
    case CK_DH:
        *M = a.P, *N = a.S, *K = x.Lc;
        break;
    case CK_Y:
    case CK_YF:
    case CK_DXS:
        *M = x.Lc, *N = a.P, *K = a.L + a.S;
        break;
    case CK_DM:
        *M = x.Lc, *N = x.Lc, *K = a.P;
        break;
    default:
        *M = x.Lc, *N = a.S, *K = a.P + a.L;
        break; /* CK_DC, CK_DB */
    }
}

template <int OP>
static __device__ __forceinline__ float ck_opa(const ck_args &a, const ck_at &x, int m, int k) {
    switch (OP) {
    case CK_CB:
        return ck_c(a, x.n0 + m, x.g, k);
    case CK_SLOC:
        return __expf(x.csl - x.cs[k]) * x.dt[k] * ck_x(a, x.n0 + k, x.h, m);
    case CK_Y:
    case CK_YF:
        if (k < a.L) return k <= m ? x.cb[(size_t)m * a.L + k] * __expf(x.cs[m] - x.cs[k]) : 0.0f;
        return __expf(x.cs[m]) * ck_c(a, x.n0 + m, x.g, k - a.L);
    case CK_DH:
        return ck_dy(a, x.n0 + k, x.h, m) * __expf(x.cs[k]);
    case CK_DM:
        return ck_dy(a, x.n0 + m, x.h, k);
    case CK_DXS:
        if (k < a.L)
            return k >= m && k < x.Lc ? x.cb[(size_t)k * a.L + m] * __expf(x.cs[k] - x.cs[m])
                                      : 0.0f;
        return __expf(x.csl - x.cs[m]) * ck_b(a, x.n0 + m, x.g, k - a.L);
    case CK_DC: {
        if (k < a.P) return __expf(x.cs[m]) * ck_dy(a, x.n0 + m, x.h, k);
        int j = k - a.P;
        return j <= m ? x.dt[j] * x.dm[(size_t)m * a.L + j] * __expf(x.cs[m] - x.cs[j]) : 0.0f;
    }
    default: { /* CK_DB */
        if (k < a.P) return __expf(x.csl - x.cs[m]) * x.dt[m] * ck_x(a, x.n0 + m, x.h, k);
        int i = k - a.P;
        return i >= m && i < x.Lc ? x.dt[m] * x.dm[(size_t)i * a.L + m] * __expf(x.cs[i] - x.cs[m])
                                  : 0.0f;
    }
    }
}

template <int OP>
static __device__ __forceinline__ float ck_opb(const ck_args &a, const ck_at &x, int k, int n) {
    switch (OP) {
    case CK_CB:
        return ck_b(a, x.n0 + n, x.g, k);
    case CK_SLOC:
        return ck_b(a, x.n0 + k, x.g, n);
    case CK_Y:
    case CK_YF:
        if (k < a.L) return k < x.Lc ? x.dt[k] * ck_x(a, x.n0 + k, x.h, n) : 0.0f;
        return x.hin[(size_t)n * a.S + (k - a.L)];
    case CK_DH:
        return ck_c(a, x.n0 + k, x.g, n);
    case CK_DM:
        return ck_x(a, x.n0 + n, x.h, k);
    case CK_DXS:
        if (k < a.L) return k < x.Lc ? ck_dy(a, x.n0 + k, x.h, n) : 0.0f;
        return x.gs[(size_t)n * a.S + (k - a.L)];
    case CK_DC:
        if (k < a.P) return x.hin[(size_t)k * a.S + n];
        return k - a.P < x.Lc ? ck_b(a, x.n0 + (k - a.P), x.g, n) : 0.0f;
    default: /* CK_DB */
        if (k < a.P) return x.gs[(size_t)k * a.S + n];
        return k - a.P < x.Lc ? ck_c(a, x.n0 + (k - a.P), x.g, n) : 0.0f;
    }
}

/* Product OP's result v at (m, n) of chunk x where it goes; where the GEMM wrote it there
 * already (in_place), only what is made of it (dx's dxbc) */
template <int OP>
static __device__ __forceinline__ void ck_store(const ck_args &a, const ck_at &x, int m, int n,
                                                float v, bool in_place) {
    size_t LL = (size_t)a.L * a.L, ps = (size_t)a.P * a.S;
    size_t hp = (size_t)x.h * a.P, zp = (x.z * a.L + m) * a.P + n, zs = (x.z * a.L + m) * a.S + n;
    switch (OP) {
    case CK_CB:
        a.cb[(size_t)(x.cb - a.cb) + (size_t)m * a.L + n] = v;
        break;
    case CK_SLOC:
        a.hin[x.z * ps + (size_t)m * a.S + n] = v;
        break;
    case CK_Y:
        a.y[(x.n0 + m) * a.di + hp + n] = tobf(v + x.Dh * ck_x(a, x.n0 + m, x.h, n));
        break;
    case CK_YF:
        a.yf[zp] = v;
        break;
    case CK_DH:
        a.gs[x.z * ps + (size_t)m * a.S + n] = v;
        break;
    case CK_DM:
        a.dm[x.z * LL + (size_t)m * a.L + n] = v;
        break;
    case CK_DXS:
        if (!in_place) a.dxs[zp] = v;
        a.dxbc[(x.n0 + m) * a.C + hp + n] = tobf(x.dt[m] * v + x.Dh * ck_dy(a, x.n0 + m, x.h, n));
        break;
    case CK_DC:
        a.dCp[zs] = v;
        break;
    default:
        a.dBp[zs] = v;
        break; /* CK_DB */
    }
}

/* Which index of a product's operand runs along memory where it is read (so that neighbouring
 * threads read neighbouring values): A(m, k) along k except where it is x or dy read over the
 * chunk's tokens (k), B(k, n) along n except where it is B, x, Hin or G read as [n][k]. The
 * materialized operand keeps that order: A as [m][k] where a_k, else [k][m]; B as [k][n] where
 * b_n, else [n][k]. */
template <int OP> struct ck_fast {
    static constexpr bool a_k = OP != CK_SLOC && OP != CK_DH;
    static constexpr bool b_n = OP != CK_CB && OP != CK_DM;
};

template <int OP> static ck_gemm ck_gemm_of(const ck_args &a) {
    ck_at whole = {};
    whole.Lc = a.L;
    ck_gemm g;
    ck_dims<OP>(a, whole, &g.M, &g.N, &g.K);
    g.batch = a.B * a.nc * (OP == CK_CB ? a.G : a.H);
    g.ar = ck_fast<OP>::a_k ? g.M : g.K;
    g.lda = ck_round(ck_fast<OP>::a_k ? g.K : g.M);
    g.br = ck_fast<OP>::b_n ? g.K : g.N;
    g.ldb = ck_round(ck_fast<OP>::b_n ? g.N : g.K);
    g.ldc = ck_round(g.N);
    return g;
}

/* Whether the GEMM of product OP writes its result where it goes: the fp32 matrices per chunk
 * of its own layout (rows of N), where those rows are whole 16-byte units. Not y, which is made
 * of the result, nor the others otherwise: they go through opc and ck_store. */
template <int OP> static bool ck_in_place(const ck_args &a) {
    int n = OP == CK_CB || OP == CK_DM ? a.L : OP == CK_YF || OP == CK_DXS ? a.P : a.S;
    return OP != CK_Y && n % 4 == 0;
}

/* Product OP's fp32 result buffer (of those written in place) */
template <int OP> static float *ck_result(const ck_args &a) {
    switch (OP) {
    case CK_CB:
        return a.cb;
    case CK_DM:
        return a.dm;
    case CK_SLOC:
        return a.hin;
    case CK_DH:
        return a.gs;
    case CK_YF:
        return a.yf;
    case CK_DXS:
        return a.dxs;
    case CK_DC:
        return a.dCp;
    default:
        return a.dBp; /* CK_DB */
    }
}

/* The larger of *need and product OP's operand and result sizes (elements; the result only
 * where the GEMM does not write it in place) */
template <int OP> static void ck_need(const ck_args &a, size_t *na, size_t *nb, size_t *nc) {
    ck_gemm g = ck_gemm_of<OP>(a);
    size_t ea = (size_t)g.batch * g.ar * g.lda, eb = (size_t)g.batch * g.br * g.ldb;
    size_t ec = ck_in_place<OP>(a) ? 0 : (size_t)g.batch * g.M * g.ldc;
    *na = ea > *na ? ea : *na, *nb = eb > *nb ? eb : *nb, *nc = ec > *nc ? ec : *nc;
}

/* Pointers into the workspace as gt_mamba_ssd_ws_floats counts it, each buffer on 256 bytes */
static ck_args ck_make(gt_mamba_shape sh, float *ws) {
    ck_args a = {};
    a.B = sh.B, a.T = sh.T, a.H = sh.H, a.P = sh.P, a.G = sh.G, a.S = sh.S;
    a.L = gt_mamba_chunk_len(sh);
    a.nc = (sh.T + a.L - 1) / a.L;
    a.C = gt_mamba_conv(sh), a.di = gt_mamba_inner(sh), a.in = gt_mamba_in(sh);
    size_t BH = (size_t)sh.B * sh.H, Z = BH * a.nc;
    size_t LL = (size_t)a.L * a.L, ps = (size_t)sh.P * sh.S;
    a.dt = ck_align(ws);
    a.cs = ck_align(a.dt + BH * sh.T);
    a.cb = ck_align(a.cs + BH * sh.T);
    a.hin = ck_align(a.cb + (size_t)sh.B * sh.G * a.nc * LL);
    a.gs = ck_align(a.hin + Z * ps);
    a.dm = ck_align(a.gs + Z * ps);
    a.yf = ck_align(a.dm + Z * LL);
    a.dxs = ck_align(a.yf + Z * a.L * sh.P);
    a.tok = ck_align(a.dxs + Z * a.L * sh.P);
    a.lt = ck_align(a.tok + 3 * BH * sh.T);
    a.part = ck_align(a.lt + Z);
    a.dBp = ck_align(a.part + 3 * Z);
    a.dCp = ck_align(a.dBp + Z * a.L * sh.S);
    size_t na = 0, nb = 0, nc = 0;
    ck_need<CK_CB>(a, &na, &nb, &nc);
    ck_need<CK_SLOC>(a, &na, &nb, &nc);
    ck_need<CK_Y>(a, &na, &nb, &nc);
    ck_need<CK_DH>(a, &na, &nb, &nc);
    ck_need<CK_DM>(a, &na, &nb, &nc);
    ck_need<CK_DXS>(a, &na, &nb, &nc);
    ck_need<CK_DC>(a, &na, &nb, &nc);
    ck_need<CK_DB>(a, &na, &nb, &nc);
    a.opa = (bf16 *)ck_align(a.dCp + Z * a.L * sh.S);
    a.opb = (bf16 *)ck_align(a.opa + na);
    a.opc = ck_align(a.opb + nb);
    a.fits = a.opc + nc <= ws + gt_mamba_ssd_ws_floats(sh);
    return a;
}

/* Product OP's A (IS_A) or B operand of chunk blockIdx.x, rows x ld bf16 from the formulas of
 * ck_opa / ck_opb in fp32, then rounded; zero outside the chunk's own M x K or K x N. A thread
 * writes CK_VEC neighbouring elements of a row. */
template <int OP, bool IS_A> __global__ void k_ck_operand(ck_args a, int rows, int ld) {
    GT_PDL_ENTRY();
    ck_at x = ck_at_make<OP>(a, blockIdx.x);
    int M, N, K;
    ck_dims<OP>(a, x, &M, &N, &K);
    int per_row = ld / CK_VEC, u = (int)(blockIdx.y * blockDim.x + threadIdx.x);
    if (u >= rows * per_row) return;
    int r = u / per_row, c0 = (u % per_row) * CK_VEC;
    float v[CK_VEC];
#pragma unroll
    for (int q = 0; q < CK_VEC; q++) {
        int c = c0 + q;
        v[q] = 0.0f;
        if (IS_A) {
            int m = ck_fast<OP>::a_k ? r : c, k = ck_fast<OP>::a_k ? c : r;
            if (m < M && k < K) v[q] = ck_opa<OP>(a, x, m, k);
        } else {
            int k = ck_fast<OP>::b_n ? r : c, n = ck_fast<OP>::b_n ? c : r;
            if (n < N && k < K) v[q] = ck_opb<OP>(a, x, k, n);
        }
    }
    uint4 w;
    w.x = gt_pack_bf16(v[0], v[1]), w.y = gt_pack_bf16(v[2], v[3]);
    w.z = gt_pack_bf16(v[4], v[5]), w.w = gt_pack_bf16(v[6], v[7]);
    bf16 *dst = (IS_A ? a.opa : a.opb) + ((size_t)blockIdx.x * rows + r) * ld + c0;
    *(uint4 *)dst = w;
}

/* Product OP's result of chunk blockIdx.x (rows x ldc fp32 at src) through ck_store; src is
 * its own destination (in_place) or opc */
template <int OP>
__global__ void k_ck_store(ck_args a, const float *src, int rows, int ldc, bool in_place) {
    GT_PDL_ENTRY();
    ck_at x = ck_at_make<OP>(a, blockIdx.x);
    int M, N, K;
    ck_dims<OP>(a, x, &M, &N, &K);
    int u = (int)(blockIdx.y * blockDim.x + threadIdx.x), m = u / ldc, n = u % ldc;
    if (m < M && n < N)
        ck_store<OP>(a, x, m, n, src[(size_t)blockIdx.x * rows * ldc + u], in_place);
}

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

/* tok = x . dxs, dy . yf, dy . x per (token, head): a warp each, lanes over p, a fixed tree */
__global__ void k_ck_tok(ck_args a) {
    GT_PDL_ENTRY();
    size_t NH = (size_t)a.B * a.T * a.H, BHT = NH, nw = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x & 31;
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < NH; w += nw) {
        size_t n = w / a.H;
        int h = (int)(w % a.H);
        size_t o = (((n / a.T) * a.H + h) * a.nc * a.L + n % a.T) * a.P;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
        for (int p = lane; p < a.P; p += 32) {
            float xv = ck_x(a, n, h, p), dyv = ck_dy(a, n, h, p);
            s0 += xv * a.dxs[o + p];
            s1 += dyv * a.yf[o + p];
            s2 += dyv * xv;
        }
        s0 = warp_sum(s0), s1 = warp_sum(s1), s2 = warp_sum(s2);
        if (lane == 0) {
            size_t q = ((n / a.T) * a.H + h) * a.T + n % a.T;
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

/* dB and dC of group g at token n: its heads' shares summed in head order */
__global__ void k_ck_bc_sum(ck_args a) {
    GT_PDL_ENTRY();
    int per = a.H / a.G, GS = a.G * a.S;
    size_t total = (size_t)a.B * a.T * 2 * GS;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / (2 * (size_t)GS), b = n / a.T, t = n % a.T;
        int j = (int)(i % (2 * (size_t)GS)), which = j / GS, gs = j % GS;
        int g = gs / a.S, s = gs % a.S;
        const float *src = which ? a.dCp : a.dBp;
        float acc = 0.0f;
        for (int q = 0; q < per; q++)
            acc += src[((b * a.H + (size_t)g * per + q) * a.nc * a.L + t) * a.S + s];
        a.dxbc[n * a.C + a.di + (size_t)which * GS + gs] = tobf(acc);
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

static unsigned ck_blocks(size_t threads) {
    return (unsigned)((threads + CK_THREADS - 1) / CK_THREADS);
}

/* Product OP over every chunk: its operands materialized, one batched GEMM, and its result
 * stored (ck_in_place) or made into what it gives (y, dx's dxbc) by ck_store. */
template <int OP>
static void ck_mm(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what) {
    ck_gemm g = ck_gemm_of<OP>(a);
    gt_launch(k_ck_operand<OP, true>,
              dim3((unsigned)g.batch, ck_blocks((size_t)g.ar * g.lda / CK_VEC)), CK_THREADS, 0, ex,
              a, g.ar, g.lda);
    GT_CUDA_LAUNCHED(b, what);
    gt_launch(k_ck_operand<OP, false>,
              dim3((unsigned)g.batch, ck_blocks((size_t)g.br * g.ldb / CK_VEC)), CK_THREADS, 0, ex,
              a, g.br, g.ldb);
    GT_CUDA_LAUNCHED(b, what);
    bool in_place = ck_in_place<OP>(a);
    float *out = in_place ? ck_result<OP>(a) : a.opc;
    int ldc = in_place ? g.N : g.ldc;
    gt_cuda_batched_gemm gg = {g.M,
                               g.N,
                               g.K,
                               g.batch,
                               ck_fast<OP>::a_k,
                               ck_fast<OP>::b_n,
                               g.lda,
                               g.ldb,
                               ldc,
                               (int64_t)g.ar * g.lda,
                               (int64_t)g.br * g.ldb,
                               (int64_t)g.M * ldc};
    gt_cuda_batched_gemm_f32(b, ex.cs, &gg, a.opa, a.opb, out, what);
    if (in_place && OP != CK_DXS) return;
    gt_launch(k_ck_store<OP>, dim3((unsigned)g.batch, ck_blocks((size_t)g.M * ldc)), CK_THREADS, 0,
              ex, a, (const float *)out, g.M, ldc, in_place);
    GT_CUDA_LAUNCHED(b, what);
}

/* dt, cs, CB and the states entering every chunk: the forward's start, the backward's too */
static void ck_states(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what) {
    size_t Z = (size_t)a.B * a.H * a.nc, ps = (size_t)a.P * a.S;
    gt_launch(k_ck_cumsum, gt_grid(Z * 32, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, what);
    ck_mm<CK_CB>(b, ex, a, what);
    ck_mm<CK_SLOC>(b, ex, a, what);
    gt_launch(k_ck_pass_fwd, gt_grid((size_t)a.B * a.H * ps, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, what);
}

extern "C" void gt_cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                                      const void *zxbcdt, const void *dt_bias, const void *A_log,
                                      const void *D, float *ws, gt_mamba_shape sh) {
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    ck_args a = ck_make(sh, ws);
    if (!a.fits) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "mamba_ssd_fwd: the chunked scan's workspace layout outgrew "
                        "gt_mamba_ssd_ws_floats (backend.h and k_mamba_ssd.cu disagree)");
        return;
    }
    a.xbc = (const bf16 *)xbc, a.zx = (const bf16 *)zxbcdt, a.dt_bias = (const bf16 *)dt_bias;
    a.A_log = (const bf16 *)A_log, a.D = (const bf16 *)D, a.y = (bf16 *)y;
    ck_states(b, ex, a, "mamba_ssd_fwd (states)");
    ck_mm<CK_Y>(b, ex, a, "mamba_ssd_fwd (output)");
}

extern "C" void gt_cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt,
                                      float *ddt_bias, float *dA_log, float *dD, const void *dy,
                                      const void *xbc, const void *zxbcdt, const void *dt_bias,
                                      const void *A_log, const void *D, float *ws,
                                      gt_mamba_shape sh, int accumulate) {
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    ck_args a = ck_make(sh, ws);
    if (!a.fits) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "mamba_ssd_bwd: the chunked scan's workspace layout outgrew "
                        "gt_mamba_ssd_ws_floats (backend.h and k_mamba_ssd.cu disagree)");
        return;
    }
    a.xbc = (const bf16 *)xbc, a.zx = (const bf16 *)zxbcdt, a.dt_bias = (const bf16 *)dt_bias;
    a.A_log = (const bf16 *)A_log, a.D = (const bf16 *)D, a.dy = (const bf16 *)dy;
    a.dxbc = (bf16 *)dxbc, a.dzx = (bf16 *)dzxbcdt;
    size_t Z = (size_t)a.B * a.H * a.nc, ps = (size_t)a.P * a.S;
    size_t NH = (size_t)a.B * a.T * a.H, total = (size_t)a.B * a.T * 2 * a.G * a.S;
    ck_states(b, ex, a, "mamba_ssd_bwd (states)");
    ck_mm<CK_YF>(b, ex, a, "mamba_ssd_bwd (output)");
    ck_mm<CK_DH>(b, ex, a, "mamba_ssd_bwd (dH)");
    gt_launch(k_ck_pass_bwd, gt_grid((size_t)a.B * a.H * ps, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (state passing)");
    gt_launch(k_ck_lt, (unsigned)Z, CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (chunk ends)");
    ck_mm<CK_DM>(b, ex, a, "mamba_ssd_bwd (dM)");
    ck_mm<CK_DXS>(b, ex, a, "mamba_ssd_bwd (dx)");
    ck_mm<CK_DC>(b, ex, a, "mamba_ssd_bwd (dC)");
    ck_mm<CK_DB>(b, ex, a, "mamba_ssd_bwd (dB)");
    gt_launch(k_ck_tok, gt_grid(NH * 32, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (token sums)");
    gt_launch(k_ck_chunk_bwd, gt_grid(Z * 32, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (dt)");
    gt_launch(k_ck_bc_sum, gt_grid(total, CK_THREADS), CK_THREADS, 0, ex, a);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (dB, dC)");
    gt_launch(k_ck_param_sum, (unsigned)a.H, 32, 0, ex, ddt_bias, dA_log, dD, a, accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_ssd_bwd (parameters)");
}
