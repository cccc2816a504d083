/* The chunk products of the SSD scan (k_mamba_ssd.cu; mamba_ssd.cuh names them), each over
 * every chunk at once: one elementwise pass materializes both bf16 operands per chunk in the
 * workspace (ck_opa / ck_opb: the masks and decays in fp32, then the rounding mamba_ssm's
 * Triton kernels do), one cuBLASLt strided-batched GEMM sums them in fp32
 * (cuda_batched_gemm.c), writing its fp32 result in place where the layouts allow; else, and
 * for y (made of its result and D x), a pass stores it (ck_store). Chunks are taken whole: a
 * shorter last chunk's operands are zero past its end. */
#include "backend/cuda/mamba_ssd.cuh"

#define CK_VEC 8 /* bf16 an operand kernel's thread writes at once (16 bytes) */

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

/* Where the chunk's part of dB's and dC's k starts: after the group's heads' P, rounded up to
 * whole 16-byte units so that k_mamba_ssd_dm.cu writes it apart from the rest */
static __host__ __device__ __forceinline__ int ck_kp(const ck_args &a) {
    return (a.H / a.G * a.P + 7) / 8 * 8;
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
    case CK_YF:
    case CK_DXS:
        *M = x.Lc, *N = a.P, *K = a.L + a.S;
        break;
    default: /* CK_DC, CK_DB: k over the group's heads' P (padded: ck_kp), then the chunk */
        *M = x.Lc, *N = a.S, *K = ck_kp(a) + a.L;
        break;
    }
}

/* Row b*H + h of head x.h + q, for a product run per group (ck_per_group) */
static __device__ __forceinline__ size_t ck_bh(const ck_args &a, const ck_at &x, int q) {
    return (size_t)x.b * a.H + x.h + q;
}
/* cs of head x.h + q at token i of the chunk (per group) */
static __device__ __forceinline__ float ck_cs_q(const ck_args &a, const ck_at &x, int q, int i) {
    return a.cs[ck_bh(a, x, q) * a.T + (size_t)x.c * a.L + i];
}
template <int OP>
static __device__ __forceinline__ float ck_opa(const ck_args &a, const ck_at &x, int m, int k) {
    switch (OP) {
    case CK_CB:
        return ck_c(a, x.n0 + m, x.g, k);
    case CK_SLOC:
        return __expf(x.csl - x.cs[k]) * x.dt[k] * ck_x(a, x.n0 + k, x.h, m);
    case CK_YF:
        if (k < a.L) return k <= m ? x.cb[(size_t)m * a.L + k] * __expf(x.cs[m] - x.cs[k]) : 0.0f;
        return __expf(x.cs[m]) * ck_c(a, x.n0 + m, x.g, k - a.L);
    case CK_DH:
        return ck_dy(a, x.n0 + k, x.h, m) * __expf(x.cs[k]);
    case CK_DXS:
        if (k < a.L)
            return k >= m && k < x.Lc ? x.cb[(size_t)k * a.L + m] * __expf(x.cs[k] - x.cs[m])
                                      : 0.0f;
        return __expf(x.csl - x.cs[m]) * ck_b(a, x.n0 + m, x.g, k - a.L);
    case CK_DC: { /* k past the heads' P: k_mamba_ssd_dm.cu's, never asked here */
        int PP = a.H / a.G * a.P, q = k / a.P;
        if (k >= PP) return 0.0f;
        return __expf(ck_cs_q(a, x, q, m)) * ck_dy(a, x.n0 + m, x.h + q, k % a.P);
    }
    default: { /* CK_DB, as CK_DC */
        int PP = a.H / a.G * a.P, q = k / a.P;
        if (k >= PP) return 0.0f;
        size_t o = ck_bh(a, x, q) * a.T + (size_t)x.c * a.L;
        float w = __expf(a.cs[o + x.Lc - 1] - a.cs[o + m]);
        return w * a.dt[o + m] * ck_x(a, x.n0 + m, x.h + q, k % a.P);
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
    case CK_YF:
        if (k < a.L) return k < x.Lc ? x.dt[k] * ck_x(a, x.n0 + k, x.h, n) : 0.0f;
        return x.hin[(size_t)n * a.S + (k - a.L)];
    case CK_DH:
        return ck_c(a, x.n0 + k, x.g, n);
    case CK_DXS:
        if (k < a.L) return k < x.Lc ? ck_dy(a, x.n0 + k, x.h, n) : 0.0f;
        return x.gs[(size_t)n * a.S + (k - a.L)];
    case CK_DC:
    default: { /* CK_DB */
        int PP = a.H / a.G * a.P;
        if (k < PP) {
            size_t ps = (size_t)a.P * a.S, e = (size_t)(k % a.P) * a.S + n;
            size_t at = (ck_bh(a, x, k / a.P) * a.nc + x.c) * ps + e;
            return OP == CK_DC ? a.hin[at] : a.gs[at];
        }
        int j = k - ck_kp(a); /* between PP and ck_kp: padding */
        if (j < 0 || j >= x.Lc) return 0.0f;
        return OP == CK_DC ? ck_b(a, x.n0 + j, x.g, n) : ck_c(a, x.n0 + j, x.g, n);
    }
    }
}

/* Product OP's result v at (m, n) of chunk x where it goes */
template <int OP>
static __device__ __forceinline__ void ck_store(const ck_args &a, const ck_at &x, int m, int n,
                                                float v) {
    size_t ps = (size_t)a.P * a.S, zp = (x.z * a.L + m) * a.P + n;
    switch (OP) {
    case CK_CB:
        a.cb[(size_t)(x.cb - a.cb) + (size_t)m * a.L + n] = v;
        break;
    case CK_SLOC:
        a.hin[x.z * ps + (size_t)m * a.S + n] = v;
        break;
    case CK_YF:
        a.yf[zp] = v;
        break;
    case CK_DH:
        a.gs[x.z * ps + (size_t)m * a.S + n] = v;
        break;
    case CK_DXS:
        a.dxs[zp] = v; /* dx's dxbc is made of it beside the token sums (k_ck_tok) */
        break;
    case CK_DC: /* the group's dC slice of dxbc */
        a.dxbc[(x.n0 + m) * a.C + a.di + (size_t)(a.G + x.g) * a.S + n] = tobf(v);
        break;
    default: /* CK_DB */
        a.dxbc[(x.n0 + m) * a.C + a.di + (size_t)x.g * a.S + n] = tobf(v);
        break;
    }
}

/* Which index of a product's operand runs along memory where it is read (so that neighbouring
 * threads read neighbouring values): A(m, k) along k except where it is x or dy read over the
 * chunk's tokens (k), B(k, n) along n except where it is B, x, Hin or G read as [n][k]. The
 * materialized operand keeps that order: A as [m][k] where a_k, else [k][m]; B as [k][n] where
 * b_n, else [n][k]. */
template <int OP> struct ck_fast {
    static constexpr bool a_k = OP != CK_SLOC && OP != CK_DH;
    static constexpr bool b_n = OP != CK_CB;
};

template <int OP> static ck_gemm ck_gemm_of(const ck_args &a) {
    ck_at whole = {};
    whole.Lc = a.L;
    ck_gemm g;
    ck_dims<OP>(a, whole, &g.M, &g.N, &g.K);
    g.batch = a.B * a.nc * (ck_per_group(OP) ? a.G : a.H);
    g.ar = ck_fast<OP>::a_k ? g.M : g.K;
    g.lda = ck_round(ck_fast<OP>::a_k ? g.K : g.M);
    g.br = ck_fast<OP>::b_n ? g.K : g.N;
    g.ldb = ck_round(ck_fast<OP>::b_n ? g.N : g.K);
    g.ldc = ck_round(g.N);
    return g;
}

/* Whether the GEMM of product OP writes its result where it goes: the fp32 matrices per chunk
 * of its own layout (rows of N), where those rows are whole 16-byte units. Not dB and dC,
 * which are bf16 slices of dxbc, nor the others otherwise: they go through opc and
 * ck_store. */
template <int OP> static bool ck_in_place(const ck_args &a) {
    int n = OP == CK_CB ? a.L : OP == CK_YF || OP == CK_DXS ? a.P : a.S;
    return OP != CK_DC && OP != CK_DB && n % 4 == 0;
}

/* Product OP's fp32 result buffer (of those written in place) */
template <int OP> static float *ck_result(const ck_args &a) {
    switch (OP) {
    case CK_CB:
        return a.cb;
    case CK_SLOC:
        return a.hin;
    case CK_DH:
        return a.gs;
    case CK_YF:
        return a.yf;
    default: /* CK_DXS */
        return a.dxs;
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

/* The shape's sizes alone (what the products' GEMM shapes are made of) */
static ck_args ck_shape_args(gt_mamba_shape sh) {
    ck_args a = {};
    a.B = sh.B, a.T = sh.T, a.H = sh.H, a.P = sh.P, a.G = sh.G, a.S = sh.S;
    a.L = gt_mamba_chunk_len(sh);
    a.nc = (sh.T + a.L - 1) / a.L;
    a.C = gt_mamba_conv(sh), a.di = gt_mamba_inner(sh), a.in = gt_mamba_in(sh);
    return a;
}

ck_args gt_ssd_args(gt_mamba_shape sh, float *ws, float *state) {
    ck_args a = ck_shape_args(sh);
    size_t BH = (size_t)sh.B * sh.H, Z = BH * a.nc;
    size_t LL = (size_t)a.L * a.L, ps = (size_t)sh.P * sh.S;
    a.dt = ck_align(state);
    a.cs = ck_align(a.dt + BH * sh.T);
    a.cb = ck_align(a.cs + BH * sh.T);
    a.hin = ck_align(a.cb + (size_t)sh.B * sh.G * a.nc * LL);
    a.yf = ck_align(a.hin + Z * ps);
    int state_fits =
        a.yf + Z * a.L * sh.P <= state + gt_mamba_ssd_state_floats(sh, GT_BACKEND_CUDA);
    a.gs = ck_align(ws);
    a.dxs = ck_align(a.gs + Z * ps);
    a.tok = ck_align(a.dxs + Z * a.L * sh.P);
    a.lt = ck_align(a.tok + 3 * BH * sh.T);
    a.part = ck_align(a.lt + Z);
    size_t na = 0, nb = 0, nc = 0;
    ck_need<CK_CB>(a, &na, &nb, &nc);
    ck_need<CK_SLOC>(a, &na, &nb, &nc);
    ck_need<CK_YF>(a, &na, &nb, &nc);
    ck_need<CK_DH>(a, &na, &nb, &nc);
    ck_need<CK_DXS>(a, &na, &nb, &nc);
    ck_need<CK_DC>(a, &na, &nb, &nc);
    ck_need<CK_DB>(a, &na, &nb, &nc);
    ck_gemm db = ck_gemm_of<CK_DB>(a);
    a.opa = (bf16 *)ck_align(a.part + 3 * Z);
    a.opa2 = (bf16 *)ck_align(a.opa + na);
    a.opb = (bf16 *)ck_align(a.opa2 + (size_t)db.batch * db.ar * db.lda);
    a.opc = ck_align(a.opb + nb);
    a.fits = state_fits && a.opc + nc <= ws + gt_mamba_ssd_ws_floats(sh);
    return a;
}

/* CK_VEC neighbouring elements (unit u of rows x ld) of product OP's A (IS_A) or B operand of
 * chunk x into dst, from the formulas of ck_opa / ck_opb in fp32, then rounded; zero outside
 * the chunk's own M x K or K x N. dB's and dC's A past ck_kp is k_mamba_ssd_dm.cu's. */
/* dB's and dC's operands (OP CK_DC or CK_DB), CK_VEC neighbouring elements of row r from
 * column c0, as ck_opa / ck_opb give them but with the head and p of k found once a unit (k
 * runs along A's rows; B's k is its row) instead of two divisions an element */
template <int OP, bool IS_A>
static __device__ __forceinline__ void ck_dbc_unit(const ck_args &a, const ck_at &x, int r, int c0,
                                                   int M, int N, int K, float *v) {
    int PP = a.H / a.G * a.P;
    if (IS_A) { /* m = r, k = c0 + i: only k < ck_kp comes here */
        if (r >= M) return;
        int q = c0 / a.P, p = c0 - q * a.P;
        for (int i = 0; i < CK_VEC && c0 + i < PP; i++) {
            size_t o = ck_bh(a, x, q) * a.T + (size_t)x.c * a.L;
            if (OP == CK_DC)
                v[i] = __expf(a.cs[o + r]) * ck_dy(a, x.n0 + r, x.h + q, p);
            else
                v[i] = __expf(a.cs[o + x.Lc - 1] - a.cs[o + r]) * a.dt[o + r] *
                       ck_x(a, x.n0 + r, x.h + q, p);
            if (++p == a.P) p = 0, q++;
        }
        return;
    }
    int k = r; /* B: n = c0 + i */
    if (k >= K) return;
    if (k < PP) {
        int q = k / a.P, p = k - q * a.P;
        size_t ps = (size_t)a.P * a.S;
        const float *src =
            (OP == CK_DC ? a.hin : a.gs) + (ck_bh(a, x, q) * a.nc + x.c) * ps + (size_t)p * a.S;
#pragma unroll
        for (int i = 0; i < CK_VEC; i++)
            if (c0 + i < N) v[i] = src[c0 + i];
        return;
    }
    int j = k - ck_kp(a); /* between PP and ck_kp: padding */
    if (j < 0 || j >= x.Lc) return;
#pragma unroll
    for (int i = 0; i < CK_VEC; i++)
        if (c0 + i < N)
            v[i] = OP == CK_DC ? ck_b(a, x.n0 + j, x.g, c0 + i) : ck_c(a, x.n0 + j, x.g, c0 + i);
}

template <int OP, bool IS_A>
static __device__ __forceinline__ void ck_operand(const ck_args &a, const ck_at &x, int rows,
                                                  int ld, int u, bf16 *dst) {
    int M, N, K;
    ck_dims<OP>(a, x, &M, &N, &K);
    int per_row = ld / CK_VEC;
    if (u >= rows * per_row) return;
    int r = u / per_row, c0 = (u % per_row) * CK_VEC;
    if (IS_A && (OP == CK_DC || OP == CK_DB) && c0 >= ck_kp(a)) return;
    float v[CK_VEC];
#pragma unroll
    for (int q = 0; q < CK_VEC; q++)
        v[q] = 0.0f;
    if (OP == CK_DC || OP == CK_DB) ck_dbc_unit<OP, IS_A>(a, x, r, c0, M, N, K, v);
#pragma unroll
    for (int q = 0; q < CK_VEC && OP != CK_DC && OP != CK_DB; q++) {
        int c = c0 + q;
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
    *(uint4 *)(dst + ((size_t)x.z * rows + r) * ld + c0) = w;
}

/* Product OP's A operand: dB's beside dC's (both made before either product), the others
 * in opa */
template <int OP> static __host__ __device__ __forceinline__ bf16 *ck_abuf(const ck_args &a) {
    return OP == CK_DB ? a.opa2 : a.opa;
}

/* Both operands of product OP (ck_gemm g) for chunk blockIdx.x, one launch: the first
 * blocks_a rows of blocks A's, the others B's; a thread writes CK_VEC neighbouring elements */
template <int OP>
__global__ void k_ck_operands(ck_args a, ck_gemm g, unsigned blocks_a, unsigned blocks) {
    GT_PDL_ENTRY();
    ck_at x = ck_at_make<OP>(a, blockIdx.x);
    for (unsigned y = blockIdx.y; y < blocks; y += gridDim.y) {
        if (y < blocks_a)
            ck_operand<OP, true>(a, x, g.ar, g.lda, (int)(y * blockDim.x + threadIdx.x),
                                 ck_abuf<OP>(a));
        else
            ck_operand<OP, false>(a, x, g.br, g.ldb,
                                  (int)((y - blocks_a) * blockDim.x + threadIdx.x), a.opb);
    }
}

/* Product OP's result of chunk blockIdx.x (rows x ldc fp32 in opc) through ck_store */
template <int OP> __global__ void k_ck_store(ck_args a, int rows, int ldc) {
    GT_PDL_ENTRY();
    ck_at x = ck_at_make<OP>(a, blockIdx.x);
    int M, N, K;
    ck_dims<OP>(a, x, &M, &N, &K);
    for (int u = (int)(blockIdx.y * blockDim.x + threadIdx.x); u < rows * ldc;
         u += (int)(gridDim.y * blockDim.x)) {
        int m = u / ldc, n = u % ldc;
        if (m < M && n < N) ck_store<OP>(a, x, m, n, a.opc[(size_t)blockIdx.x * rows * ldc + u]);
    }
}

/* Blocks of CK_THREADS over `threads` items */
static unsigned ck_blocks(size_t threads) {
    return (unsigned)((threads + CK_THREADS - 1) / CK_THREADS);
}
/* The grid's rows for `blocks` rows of blocks: the loops above take the rest past the limit */
static unsigned ck_grid_y(unsigned blocks) {
    return blocks < GT_MAX_GRID ? blocks : GT_MAX_GRID;
}

/* Product OP's batched GEMM: into its own buffer where the GEMM writes in place (rows of N),
 * else into opc (rows of ldc) */
template <int OP> static gt_cuda_batched_gemm ck_batched(const ck_args &a) {
    ck_gemm g = ck_gemm_of<OP>(a);
    int ldc = ck_in_place<OP>(a) ? g.N : g.ldc;
    return gt_cuda_batched_gemm{g.M,
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
}

/* Product OP over every chunk: its operands materialized, one batched GEMM, its result written
 * in place by the GEMM (ck_in_place) or stored from opc by ck_store. */
template <int OP>
static void ck_mm(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what) {
    ck_gemm g = ck_gemm_of<OP>(a);
    unsigned blocks_a = ck_blocks((size_t)g.ar * g.lda / CK_VEC);
    unsigned blocks_b = ck_blocks((size_t)g.br * g.ldb / CK_VEC);
    gt_launch(k_ck_operands<OP>, dim3((unsigned)g.batch, ck_grid_y(blocks_a + blocks_b)),
              CK_THREADS, 0, ex, a, g, blocks_a, blocks_a + blocks_b);
    GT_CUDA_LAUNCHED(b, what);
    bool in_place = ck_in_place<OP>(a);
    float *out = in_place ? ck_result<OP>(a) : a.opc;
    int ldc = in_place ? g.N : g.ldc;
    gt_cuda_batched_gemm gg = ck_batched<OP>(a);
    gt_cuda_batched_gemm_f32(b, ex.cs, &gg, ck_abuf<OP>(a), a.opb, out, what);
    if (in_place) return;
    gt_launch(k_ck_store<OP>, dim3((unsigned)g.batch, ck_grid_y(ck_blocks((size_t)g.M * ldc))),
              CK_THREADS, 0, ex, a, g.M, ldc);
    GT_CUDA_LAUNCHED(b, what);
}

void gt_ssd_product(gt_backend *b, gt_cuda_exec ex, const ck_args &a, int op, const char *what) {
    switch (op) {
    case CK_CB:
        ck_mm<CK_CB>(b, ex, a, what);
        break;
    case CK_SLOC:
        ck_mm<CK_SLOC>(b, ex, a, what);
        break;
    case CK_YF:
        ck_mm<CK_YF>(b, ex, a, what);
        break;
    case CK_DH:
        ck_mm<CK_DH>(b, ex, a, what);
        break;
    case CK_DXS:
        ck_mm<CK_DXS>(b, ex, a, what);
        break;
    case CK_DC: { /* dB and dC: M into both A operands, then the two products */
        ck_gemm g = ck_gemm_of<CK_DC>(a);
        gt_ssd_msum(b, ex, a, g.lda, ck_kp(a), what);
        ck_mm<CK_DC>(b, ex, a, what);
        ck_mm<CK_DB>(b, ex, a, what);
        break;
    }
    default:
        gt_backend_fail(b, GT_ERR_INVALID, "%s: no SSD product %d", what, op);
        break;
    }
}

template <int OP> static void ck_plan(gt_backend *b, const ck_args &a, const char *what) {
    gt_cuda_batched_gemm gg = ck_batched<OP>(a);
    gt_cuda_batched_gemm_plan(b, &gg, what);
}

extern "C" void gt_cuda_mamba_ssd_plan(gt_backend *b, gt_mamba_shape sh, int backward) {
    ck_args a = ck_shape_args(sh);
    if (!backward) { /* the states and y, which the backward then reads from the state */
        ck_plan<CK_CB>(b, a, "mamba_ssd_fwd (planning)");
        ck_plan<CK_SLOC>(b, a, "mamba_ssd_fwd (planning)");
        ck_plan<CK_YF>(b, a, "mamba_ssd_fwd (planning)");
        return;
    }
    const char *what = "mamba_ssd_bwd (planning)";
    ck_plan<CK_DH>(b, a, what);
    ck_plan<CK_DXS>(b, a, what);
    ck_plan<CK_DC>(b, a, what);
    ck_plan<CK_DB>(b, a, what);
}
