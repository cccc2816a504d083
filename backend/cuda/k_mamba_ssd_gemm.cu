/* The chunk products of the SSD scan (k_mamba_ssd.cu; mamba_ssd.cuh names them), each over
 * every chunk at once, one kernel a product (k_ck_fused): a block makes one tile of one
 * chunk's product, its operands formed from ck_opa / ck_opb (the masks and decays in fp32,
 * then the rounding to bf16 mamba_ssm's Triton kernels do) straight into shared memory,
 * summed on tensor cores in fp32 and stored where the product goes (ck_store). No operand
 * goes through global memory but dB's and dC's decay-weighted dy x^T (k_mamba_ssd_dm.cu).
 * Chunks are taken whole: a shorter last chunk's operands are zero past its end. */
#include "backend/cuda/mamba_ssd.cuh"

/* The workspace pointer p rounded up to GT_MAMBA_SSD_WS_ALIGN_FLOATS floats */
static float *ck_align(void *p) {
    uintptr_t u = (uintptr_t)p, al = GT_MAMBA_SSD_WS_ALIGN_FLOATS * sizeof(float);
    return (float *)((u + al - 1) / al * al);
}

/* Where the chunk's part of dB's and dC's k starts: after the group's heads' P, rounded up to
 * whole 8s so that the 8 a thread forms lie in one part */
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
    case CK_DXS: /* k over the state's S in whole slabs, then the chunk */
        *M = x.Lc, *N = a.P, *K = ck_ks(a.S) + a.L;
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
    case CK_YF: {
        int j = k - ck_ks(a.S);
        if (j >= 0) return j < m ? x.cb[(size_t)m * a.L + j] * __expf(x.cs[m] - x.cs[j]) : 0.0f;
        return k < a.S ? __expf(x.cs[m]) * ck_c(a, x.n0 + m, x.g, k) : 0.0f;
    }
    case CK_DH:
        return ck_dy(a, x.n0 + k, x.h, m) * __expf(x.cs[k]);
    case CK_DXS: {
        int i = k - ck_ks(a.S);
        if (i >= 0)
            return i > m && i < x.Lc ? x.cb[(size_t)i * a.L + m] * __expf(x.cs[i] - x.cs[m]) : 0.0f;
        return k < a.S ? __expf(x.csl - x.cs[m]) * ck_b(a, x.n0 + m, x.g, k) : 0.0f;
    }
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
    case CK_YF: {
        int j = k - ck_ks(a.S);
        if (j >= 0) return j < x.Lc ? x.dt[j] * ck_x(a, x.n0 + j, x.h, n) : 0.0f;
        return k < a.S ? ldf(x.hin + (size_t)n * a.S + k) : 0.0f;
    }
    case CK_DH:
        return ck_c(a, x.n0 + k, x.g, n);
    case CK_DXS: {
        int i = k - ck_ks(a.S);
        if (i >= 0) return i < x.Lc ? ck_dy(a, x.n0 + i, x.h, n) : 0.0f;
        return k < a.S ? ldf(x.gs + (size_t)n * a.S + k) : 0.0f;
    }
    case CK_DC:
    default: { /* CK_DB */
        int PP = a.H / a.G * a.P;
        if (k < PP) {
            size_t ps = (size_t)a.P * a.S, e = (size_t)(k % a.P) * a.S + n;
            size_t at = (ck_bh(a, x, k / a.P) * a.nc + x.c) * ps + e;
            return ldf((OP == CK_DC ? a.hin : a.gs) + at);
        }
        int j = k - ck_kp(a); /* between PP and ck_kp: padding */
        if (j < 0 || j >= x.Lc) return 0.0f;
        return OP == CK_DC ? ck_b(a, x.n0 + j, x.g, n) : ck_c(a, x.n0 + j, x.g, n);
    }
    }
}

/* Where product OP's result at (m, n) of chunk x goes: element ck_out_at of its fp32 buffer
 * (ck_out_f32), or of its bf16 one (ck_out_bf16: y's part from the entering state, and dxbc's
 * slices for dC and dB) */
template <int OP> static __device__ __forceinline__ constexpr bool ck_out_is_bf16() {
    return OP == CK_YF || OP == CK_DC || OP == CK_DB;
}
template <int OP> static __device__ __forceinline__ float *ck_out_f32(const ck_args &a) {
    return OP == CK_CB                    ? a.cb
           : OP == CK_SLOC || OP == CK_DH ? a.st
           : OP == CK_DXS ? a.dxs /* dx's dxbc is made of it beside the token sums (k_ck_tok) */
                          : NULL;
}
template <int OP> static __device__ __forceinline__ bf16 *ck_out_bf16(const ck_args &a) {
    return OP == CK_YF ? a.yhin : a.dxbc;
}
template <int OP>
static __device__ __forceinline__ size_t ck_out_at(const ck_args &a, const ck_at &x, int m, int n) {
    size_t ps = (size_t)a.P * a.S;
    switch (OP) {
    case CK_CB:
        return (size_t)(x.cb - a.cb) + (size_t)m * a.L + n;
    case CK_SLOC:
    case CK_DH:
        return x.z * ps + (size_t)m * a.S + n;
    case CK_YF:
    case CK_DXS:
        return (x.z * a.L + m) * a.P + n;
    case CK_DC: /* the group's dC slice of dxbc */
        return (x.n0 + m) * a.C + a.di + (size_t)(a.G + x.g) * a.S + n;
    default: /* CK_DB */
        return (x.n0 + m) * a.C + a.di + (size_t)x.g * a.S + n;
    }
}
/* Product OP's result v at (m, n) of chunk x where it goes */
template <int OP>
static __device__ __forceinline__ void ck_store(const ck_args &a, const ck_at &x, int m, int n,
                                                float v) {
    size_t at = ck_out_at<OP>(a, x, m, n);
    if (ck_out_is_bf16<OP>())
        ck_out_bf16<OP>(a)[at] = tobf(v);
    else
        ck_out_f32<OP>(a)[at] = v;
}
/* The results v0, v1 at (m, n) and (m, n + 1) at once (8 or 4 bytes: the rows and n even) */
template <int OP>
static __device__ __forceinline__ void ck_store2(const ck_args &a, const ck_at &x, int m, int n,
                                                 float v0, float v1) {
    size_t at = ck_out_at<OP>(a, x, m, n);
    if (ck_out_is_bf16<OP>())
        *(__nv_bfloat162 *)(ck_out_bf16<OP>(a) + at) = __floats2bfloat162_rn(v0, v1);
    else
        *(float2 *)(ck_out_f32<OP>(a) + at) = make_float2(v0, v1);
}

/* The shape's sizes alone */
static ck_args ck_shape_args(gt_mamba_shape sh) {
    ck_args a = {};
    a.B = sh.B, a.T = sh.T, a.H = sh.H, a.P = sh.P, a.G = sh.G, a.S = sh.S;
    a.L = gt_mamba_chunk_len(sh);
    a.nc = (sh.T + a.L - 1) / a.L;
    a.C = gt_mamba_conv(sh), a.di = gt_mamba_inner(sh), a.in = gt_mamba_in(sh);
    a.ldm = (int)gt_mamba_ssd_ld((size_t)a.L);
    a.nlt = (sh.P * sh.S + GT_MAMBA_SSD_PASS_ENTRIES - 1) / GT_MAMBA_SSD_PASS_ENTRIES;
    a.ntp = (sh.P + GT_MAMBA_SSD_TOK_MAX_P - 1) / GT_MAMBA_SSD_TOK_MAX_P;
    a.nt = (a.L + GT_MAMBA_SSD_DM_TILE - 1) / GT_MAMBA_SSD_DM_TILE;
    return a;
}

ck_args gt_ssd_args(gt_mamba_shape sh, float *ws, float *state) {
    ck_args a = ck_shape_args(sh);
    size_t BH = (size_t)sh.B * sh.H, Z = BH * a.nc, ZG = (size_t)sh.B * sh.G * a.nc;
    size_t LL = (size_t)a.L * a.L, ps = (size_t)sh.P * sh.S;
    a.dt = ck_align(state);
    a.cs = ck_align(a.dt + BH * sh.T);
    a.cb = ck_align(a.cs + BH * sh.T);
    a.hin = (bf16 *)ck_align(a.cb + ZG * LL);
    a.yhin = (bf16 *)ck_align(a.hin + Z * ps);
    int state_fits = (float *)(a.yhin + Z * a.L * sh.P) <=
                     state + gt_mamba_ssd_state_floats(sh, GT_BACKEND_CUDA);
    a.st = ck_align(ws);
    a.gs = (bf16 *)ck_align(a.st + Z * ps);
    a.dxs = ck_align(a.gs + Z * ps);
    a.tok = ck_align(a.dxs + (sh.P > GT_MAMBA_SSD_TOK_MAX_P ? Z * a.L * sh.P : 0));
    a.lt = ck_align(a.tok + (size_t)(3 + a.ntp) * BH * sh.T);
    a.part = ck_align(a.lt + Z * a.nlt);
    a.m_dc = (bf16 *)ck_align(a.part + 3 * Z);
    a.m_db = (bf16 *)ck_align(a.m_dc + ZG * a.L * a.ldm);
    a.dda = ck_align(a.m_db + ZG * a.L * a.ldm);
    a.fits = state_fits && a.dda + 2 * Z * a.nt * a.L <= ws + gt_mamba_ws_floats(sh);
    return a;
}

/* dB's M (m_db) or dC's (m_dc), k_mamba_ssd_dm.cu's */
template <int OP> static __device__ __forceinline__ const bf16 *ck_m(const ck_args &a) {
    return OP == CK_DB ? a.m_db : a.m_dc;
}

/* ---- the fused path: each block makes one BM x BN tile of one chunk's product, its operands'
 * slabs of CF_BK k formed straight into shared memory (bf16, the same values and rounding as
 * the materialized operands), summed on tensor cores (mma.sync m16n8k16, fp32) in k order and
 * stored through ck_store: no operand goes through global memory but dB's and dC's M part
 * (k_mamba_ssd_dm.cu's, read from its buffer), no GEMM library call, no store pass. A thread
 * forms 8 neighbouring values of an operand at once along the index its source runs along:
 * one 16-byte load of bf16 or two of fp32 (cf_src says where from), then a factor of the row
 * or the decays of C B^T (cf_make); the next slab's loads are in flight while the tensor cores
 * sum the current one. Where the shape or a slab's edge does not allow it, each value comes
 * from ck_opa / ck_opb alone. ---- */
#define CF_BK CK_SLAB /* k of a slab */
#define CF_MAXL 256   /* chunk lengths whose dt and cs a block keeps in shared memory */

/* Whether A's 8 from (m, k) run along m (its source runs along m there), else along k */
template <int OP> static __device__ __forceinline__ bool cf_a_along_m(const ck_args &a, int k) {
    return OP == CK_SLOC || OP == CK_DH || (OP == CK_DXS && k >= ck_ks(a.S));
}
/* Whether B's 8 from (k, n) run along k, else along n */
template <int OP> static __device__ __forceinline__ bool cf_b_along_k(const ck_args &a, int k) {
    return OP == CK_CB || ((OP == CK_YF || OP == CK_DXS) && k < ck_ks(a.S));
}
/* Whether A's 8 can be fp32 (two 16-byte loads): C B^T for y and dx; B's are all bf16 */
template <int OP> static __device__ __forceinline__ constexpr bool cf_a_f32() {
    return OP == CK_YF || OP == CK_DXS;
}
/* dB's or dC's M at (m, j) of chunk x: k_mamba_ssd_dm.cu's */
template <int OP>
static __device__ __forceinline__ const bf16 *cf_m_at(const ck_args &a, const ck_at &x, int m,
                                                      int j) {
    return ck_m<OP>(a) + ((size_t)x.z * a.L + m) * a.ldm + j;
}
/* A(m, k) of product OP alone: dB's and dC's M past ck_kp */
template <int OP>
static __device__ __forceinline__ float cf_a1(const ck_args &a, const ck_at &x, int m, int k) {
    if ((OP == CK_DC || OP == CK_DB) && k >= ck_kp(a))
        return ldf(cf_m_at<OP>(a, x, m, k - ck_kp(a)));
    return ck_opa<OP>(a, x, m, k);
}

/* Where 8 operand values come from: CF_ONE each alone (ck_opa / ck_opb), CF_ZERO none, CF_BF16
 * 8 bf16 at p times f, CF_CB_ROW y's C B^T row at p (value i kept where
 * k + i < m, times exp(cs_m - cs_(k+i))), CF_CB_COL dx's C B^T at p along m (kept where
 * k > m + i, times exp(cs_k - cs_(m+i))): the diagonal is the epilogues' (ck_cb_diag) */
enum { CF_ONE, CF_ZERO, CF_BF16, CF_CB_ROW, CF_CB_COL };
typedef struct cf_src {
    const void *p;
    float f;
    int kind;
} cf_src;
static __device__ __forceinline__ cf_src cf_bf16(const bf16 *p, float f) {
    return cf_src{p, f, CF_BF16};
}
static __device__ __forceinline__ cf_src cf_kind(int kind, const float *p = NULL) {
    return cf_src{p, 1.0f, kind};
}

/* A's 8 from (m, k) along m (am) or k. vec: the launch's rows and pointers lie on 16 bytes;
 * am must be cf_a_along_m's there (a slab reaching over two parts of k takes the other part's
 * values alone), the 8 inside one part of k and inside M x K. */
template <int OP>
static __device__ __forceinline__ cf_src cf_a_src(const ck_args &a, const ck_at &x, int m, int k,
                                                  int M, int K, bool vec, bool am) {
    if (!vec || am != cf_a_along_m<OP>(a, k)) return cf_kind(CF_ONE);
    if (am ? m + 8 > M || k >= K : k + 8 > K || m >= M) return cf_kind(CF_ONE);
    size_t n = x.n0 + m;
    switch (OP) {
    case CK_CB:
        return cf_bf16(a.xbc + n * a.C + a.di + (size_t)(a.G + x.g) * a.S + k, 1.0f);
    case CK_SLOC: /* along m = p; k = j */
        return cf_bf16(a.xbc + (x.n0 + k) * a.C + (size_t)x.h * a.P + m,
                       __expf(x.csl - x.cs[k]) * x.dt[k]);
    case CK_YF: {
        int j = k - ck_ks(a.S);
        if (j >= 0) /* j >= m: none of the 8 before m, all masked */
            return cf_kind(j >= m ? CF_ZERO : CF_CB_ROW, x.cb + (size_t)m * a.L + j);
        if (k >= a.S) return cf_kind(CF_ZERO); /* the state's padding (S is whole 8s: vec) */
        return cf_bf16(a.xbc + n * a.C + a.di + (size_t)(a.G + x.g) * a.S + k, __expf(x.cs[m]));
    }
    case CK_DH: /* along m = p; k = i */
        return cf_bf16(a.dy + (x.n0 + k) * a.di + (size_t)x.h * a.P + m, __expf(x.cs[k]));
    case CK_DXS: {
        int i = k - ck_ks(a.S);
        if (i >= 0)                                       /* along m = j; k = i */
            return i >= x.Lc || i <= m ? cf_kind(CF_ZERO) /* i <= m: all 8 masked */
                                       : cf_kind(CF_CB_COL, x.cb + (size_t)i * a.L + m);
        if (k >= a.S) return cf_kind(CF_ZERO); /* the state's padding (S is whole 8s: vec) */
        return cf_bf16(a.xbc + n * a.C + a.di + (size_t)x.g * a.S + k, __expf(x.csl - x.cs[m]));
    }
    default: { /* CK_DC, CK_DB: the heads' part, then M */
        int PP = a.H / a.G * a.P, kp = ck_kp(a);
        if (k >= kp) return cf_bf16(cf_m_at<OP>(a, x, m, k - kp), 1.0f);
        if (k + 8 > PP) return cf_kind(CF_ONE);
        int q = k / a.P, p = k - q * a.P;
        size_t o = ck_bh(a, x, q) * a.T + (size_t)x.c * a.L;
        if (OP == CK_DC)
            return cf_bf16(a.dy + n * a.di + (size_t)(x.h + q) * a.P + p, __expf(a.cs[o + m]));
        return cf_bf16(a.xbc + n * a.C + (size_t)(x.h + q) * a.P + p,
                       __expf(a.cs[o + x.Lc - 1] - a.cs[o + m]) * a.dt[o + m]);
    }
    }
}
/* B's 8 from (k, n) along k (bk) or n, as cf_a_src */
template <int OP>
static __device__ __forceinline__ cf_src cf_b_src(const ck_args &a, const ck_at &x, int k, int n,
                                                  int N, int K, bool vec, bool bk) {
    if (!vec || bk != cf_b_along_k<OP>(a, k)) return cf_kind(CF_ONE);
    if (bk ? k + 8 > K || n >= N : n + 8 > N || k >= K) return cf_kind(CF_ONE);
    switch (OP) {
    case CK_CB: /* along k = s */
        return cf_bf16(a.xbc + (x.n0 + n) * a.C + a.di + (size_t)x.g * a.S + k, 1.0f);
    case CK_SLOC:
        return cf_bf16(a.xbc + (x.n0 + k) * a.C + a.di + (size_t)x.g * a.S + n, 1.0f);
    case CK_DH:
        return cf_bf16(a.xbc + (x.n0 + k) * a.C + a.di + (size_t)(a.G + x.g) * a.S + n, 1.0f);
    case CK_YF:
    case CK_DXS: {
        int j = k - ck_ks(a.S);
        if (j >= 0) {
            if (j >= x.Lc) return cf_kind(CF_ZERO);
            if (OP == CK_YF)
                return cf_bf16(a.xbc + (x.n0 + j) * a.C + (size_t)x.h * a.P + n, x.dt[j]);
            return cf_bf16(a.dy + (x.n0 + j) * a.di + (size_t)x.h * a.P + n, 1.0f);
        }
        if (k >= a.S) return cf_kind(CF_ZERO); /* along k = s: the state's padding */
        return cf_bf16((OP == CK_YF ? x.hin : x.gs) + (size_t)n * a.S + k, 1.0f);
    }
    default: { /* CK_DC, CK_DB */
        int PP = a.H / a.G * a.P, kp = ck_kp(a);
        if (k < PP) {
            int q = k / a.P, p = k - q * a.P;
            size_t ps = (size_t)a.P * a.S;
            return cf_bf16((OP == CK_DC ? a.hin : a.gs) + (ck_bh(a, x, q) * a.nc + x.c) * ps +
                               (size_t)p * a.S + n,
                           1.0f);
        }
        int j = k - kp;
        if (j < 0 || j >= x.Lc) return cf_kind(CF_ZERO);
        return cf_bf16(a.xbc + (x.n0 + j) * a.C + a.di +
                           (size_t)(OP == CK_DC ? x.g : a.G + x.g) * a.S + n,
                       1.0f);
    }
    }
}

/* k of product OP counted from the chunk's first token where k runs over the state first */
template <int OP> static __device__ __forceinline__ int cf_chunk_k(const ck_args &a, int k) {
    return OP == CK_YF || OP == CK_DXS ? k - ck_ks(a.S) : k;
}

/* The raw 16 or 32 bytes of src (F32: whether it can be fp32, C B^T's) */
template <bool F32> static __device__ __forceinline__ void cf_load(const cf_src &s, uint4 *r) {
    if (s.kind == CF_BF16) {
        r[0] = *(const uint4 *)s.p;
    } else if (F32 && s.kind >= CF_CB_ROW) {
        r[0] = ((const uint4 *)s.p)[0];
        r[F32 ? 1 : 0] = ((const uint4 *)s.p)[1];
    }
}
/* The 8 values of kind (factor f) from their raw bytes r, 8 from (m, k) along m (am) or k,
 * k counted in the chunk for C B^T's kinds (cf_chunk_k); false for CF_ONE (the caller takes them
 * alone) */
template <bool F32>
static __device__ __forceinline__ bool cf_make(const ck_at &x, int kind, float f, const uint4 *r,
                                               int m, int k, float *v) {
    switch (kind) {
    case CF_ONE:
        return false;
    case CF_ZERO:
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = 0.0f;
        return true;
    case CF_BF16:
        unpack8(v, r[0]);
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] *= f;
        return true;
    default:
        break;
    }
    if (!F32) return false;
    const uint32_t w[8] = {r[0].x, r[0].y, r[0].z, r[0].w, r[F32].x, r[F32].y, r[F32].z, r[F32].w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float u = __uint_as_float(w[i]);
        if (kind == CF_CB_ROW)
            u = k + i < m ? u * __expf(x.cs[m] - x.cs[k + i]) : 0.0f;
        else if (kind == CF_CB_COL)
            u = k > m + i ? u * __expf(x.cs[k] - x.cs[m + i]) : 0.0f;
        v[i] = u;
    }
    return true;
}

/* dx's epilogue where a block holds whole rows of dxs (every p of its tokens): what k_ck_tok
 * makes of dxs, from the fragments instead of an fp32 dxs in memory: dx's slice of dxbc, dt
 * dxs + D dy, and the token sums x . dxs, dy . yhin, dy . x, each row's over its quad's lanes
 * (the columns of each in p order, then the lanes in a fixed tree). r0: the warp's first row. */
template <int NB>
static __device__ __forceinline__ void cf_dxs_tok(const ck_args &a, const ck_at &x, float (*acc)[4],
                                                  int r0, int lane, int M, int N, bool vec) {
    int g = lane / 4, t = lane % 4;
    size_t BHT = (size_t)a.B * a.H * a.T;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int m = r0 + g + half * 8;
        bool live = m < M;
        size_t n = x.n0 + m, q = ((size_t)x.b * a.H + x.h) * a.T + (size_t)x.c * a.L + m;
        size_t o = (x.z * a.L + m) * a.P;
        float dt = live ? x.dt[m] : 0.0f, s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
        /* dx = dt (dxs + C_m.B_m dy) + D dy: the diagonal, left out of the product, in fp32 */
        float fd = live ? dt * x.cb[(size_t)m * a.L + m] + x.Dh : 0.0f;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            int p = nb * 8 + 2 * t;
            const float *v = &acc[nb][half * 2];
            if (!live || p >= N) continue;
            size_t xat = n * a.C + (size_t)x.h * a.P + p, yat = n * a.di + (size_t)x.h * a.P + p;
            if (vec && p + 1 < N) { /* both columns from 4- and 8-byte loads */
                float2 xv = __bfloat1622float2(*(const __nv_bfloat162 *)(a.xbc + xat));
                float2 dv = __bfloat1622float2(*(const __nv_bfloat162 *)(a.dy + yat));
                float2 yv = __bfloat1622float2(*(const __nv_bfloat162 *)(a.yhin + o + p));
                s0 += xv.x * v[0], s1 += dv.x * yv.x, s2 += dv.x * xv.x;
                s0 += xv.y * v[1], s1 += dv.y * yv.y, s2 += dv.y * xv.y;
                *(__nv_bfloat162 *)(a.dxbc + xat) =
                    __floats2bfloat162_rn(dt * v[0] + fd * dv.x, dt * v[1] + fd * dv.y);
                continue;
            }
            for (int e = 0; e < 2 && p + e < N; e++) {
                float xv = ldf(a.xbc + xat + e), dyv = ldf(a.dy + yat + e);
                s0 += xv * v[e];
                s1 += dyv * ldf(a.yhin + o + p + e);
                s2 += dyv * xv;
                a.dxbc[xat + e] = tobf(dt * v[e] + fd * dyv);
            }
        }
#pragma unroll
        for (int w = 1; w < 4; w *= 2) {
            s0 += __shfl_xor_sync(0xffffffffu, s0, w);
            s1 += __shfl_xor_sync(0xffffffffu, s1, w);
            s2 += __shfl_xor_sync(0xffffffffu, s2, w);
        }
        if (t == 0 && live) {
            a.tok[q] = s0;
            a.tok[BHT + q] = s1;
            a.tok[2 * BHT + q] = s2;
        }
    }
}

/* The state's part of y or dx, whole in acc when the chunk's first slab is next: y's is kept
 * (yhin, in bf16), dx's dotted with x over the block's columns (tok's fourth sum, part
 * blockIdx.z), each row's in p order and then over its quad's lanes in a fixed tree. The
 * decay's gradient takes both apart from the chunk's own products (k_ck_chunk_bwd). r0: the
 * warp's first row. */
template <int OP, int NB>
static __device__ __forceinline__ void cf_state_part(const ck_args &a, const ck_at &x,
                                                     float (*acc)[4], int r0, int n0, int lane,
                                                     int M, int N, bool vec) {
    int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int m = r0 + g + half * 8;
        float s3 = 0.0f;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            int n = n0 + nb * 8 + 2 * t;
            const float *v = &acc[nb][half * 2];
            if (m >= M || n >= N) continue;
            bool two = vec && n + 1 < N; /* both columns at once (4-byte bf16 pairs) */
            if (OP == CK_YF && two) {
                ck_store2<OP>(a, x, m, n, v[0], v[1]);
            } else if (OP == CK_YF) {
                for (int e = 0; e < 2 && n + e < N; e++)
                    ck_store<OP>(a, x, m, n + e, v[e]);
            } else if (two) {
                float2 xv = __bfloat1622float2(
                    *(const __nv_bfloat162 *)(a.xbc + (x.n0 + m) * a.C + (size_t)x.h * a.P + n));
                s3 += xv.x * v[0], s3 += xv.y * v[1];
            } else {
                for (int e = 0; e < 2 && n + e < N; e++)
                    s3 += ck_x(a, x.n0 + m, x.h, n + e) * v[e];
            }
        }
        if (OP == CK_DXS) {
            s3 += __shfl_xor_sync(0xffffffffu, s3, 1);
            s3 += __shfl_xor_sync(0xffffffffu, s3, 2);
            size_t BHT = (size_t)a.B * a.H * a.T;
            size_t q = ((size_t)x.b * a.H + x.h) * a.T + (size_t)x.c * a.L + m;
            if (t == 0 && m < M) a.tok[(3 + blockIdx.z) * BHT + q] = s3;
        }
    }
}

/* The slab's e-th 8 of A, from (m, k) along m (am) or k, and of B, from (k, n) along k (bk)
 * or n. Along the slab's rows neighbouring threads take neighbouring 8s; across them (the 8
 * stored one per row) neighbouring columns, so that a warp's 2-byte stores hit distinct
 * banks. */
template <int BM> static __device__ __forceinline__ void cf_unit_a(int e, bool am, int *m, int *k) {
    if (am)
        *m = e / CF_BK * 8, *k = e % CF_BK;
    else
        *m = e / (CF_BK / 8), *k = e % (CF_BK / 8) * 8;
}
template <int BN> static __device__ __forceinline__ void cf_unit_b(int e, bool bk, int *k, int *n) {
    if (bk)
        *k = e / BN * 8, *n = e % BN;
    else
        *k = e / (BN / 8), *n = e % (BN / 8) * 8;
}

/* The 8 values v into a shared tile of row stride LD from p on: down p's column (one a row)
 * where down, else along its row (one 16-byte store) */
template <int LD>
static __device__ __forceinline__ void cf_put8(bf16 *p, bool down, const float *v) {
    if (down) {
#pragma unroll
        for (int i = 0; i < 8; i++)
            p[i * LD] = __float2bfloat16(v[i]);
    } else {
        st8(p, v);
    }
}

/* tok (CK_DXS only): the block's tile holds every column, so that cf_dxs_tok does k_ck_tok's
 * work and dxs is not stored */
template <int OP, int BM, int BN>
__global__ void __launch_bounds__(BM * 2, 256 / BM) k_ck_fused(ck_args a, int vec, int tok) {
    GT_PDL_ENTRY();
    constexpr int THREADS = BM * 2, NB = BN / 8; /* a warp: 16 rows, every column */
    constexpr int UA = BM * CF_BK / 8 / THREADS, UB = CF_BK * BN / 8 / THREADS; /* 8s a thread */
    constexpr bool FA = cf_a_f32<OP>();
    __shared__ __align__(16) bf16 sa[BM][CF_BK + 8];
    __shared__ __align__(16) bf16 sb[CF_BK][BN + 8];
    __shared__ float scs[CF_MAXL], sdt[CF_MAXL];
    ck_at x = ck_at_make<OP>(a, blockIdx.x);
    int M, N, K;
    ck_dims<OP>(a, x, &M, &N, &K);
    int m0 = (int)blockIdx.y * BM, n0 = (int)blockIdx.z * BN;
    if (m0 >= M || n0 >= N) return;
    int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (!ck_per_group(OP) && a.L <= CF_MAXL) { /* the chunk's dt and cs, read many times */
        for (int i = tid; i < x.Lc; i += THREADS)
            scs[i] = x.cs[i], sdt[i] = x.dt[i];
        __syncthreads();
        x.cs = scs, x.dt = sdt;
    }
    float acc[NB][4] = {};
    uint4 ra[UA][FA ? 2 : 1], rb[UB][1];
    float fa[UA], fb[UB];
    int ka[UA], kb[UB];
    /* slab k0's sources and loads; e: the thread's u-th 8 */
    auto issue = [&](int k0) {
        bool am = cf_a_along_m<OP>(a, k0), bk = cf_b_along_k<OP>(a, k0);
#pragma unroll
        for (int u = 0; u < UA; u++) {
            int e = tid + u * THREADS;
            int m, k;
            cf_unit_a<BM>(e, am, &m, &k);
            cf_src sr = cf_a_src<OP>(a, x, m0 + m, k0 + k, M, K, vec != 0, am);
            cf_load<FA>(sr, ra[u]);
            fa[u] = sr.f, ka[u] = sr.kind;
        }
#pragma unroll
        for (int u = 0; u < UB; u++) {
            int e = tid + u * THREADS;
            int k, n;
            cf_unit_b<BN>(e, bk, &k, &n);
            cf_src sr = cf_b_src<OP>(a, x, k0 + k, n0 + n, N, K, vec != 0, bk);
            cf_load<false>(sr, rb[u]);
            fb[u] = sr.f, kb[u] = sr.kind;
        }
    };
    issue(0);
    for (int k0 = 0; k0 < K; k0 += CF_BK) {
        __syncthreads(); /* the last slab's fragments are loaded */
        if ((OP == CK_YF || OP == CK_DXS) && k0 == ck_ks(a.S)) /* acc: the state's part alone */
            cf_state_part<OP, NB>(a, x, acc, m0 + warp * 16, n0, lane, M, N, vec != 0);
        bool am = cf_a_along_m<OP>(a, k0), bk = cf_b_along_k<OP>(a, k0);
#pragma unroll
        for (int u = 0; u < UA; u++) {
            int e = tid + u * THREADS;
            int m, k;
            cf_unit_a<BM>(e, am, &m, &k);
            float v[8];
            if (!cf_make<FA>(x, ka[u], fa[u], ra[u], m0 + m, cf_chunk_k<OP>(a, k0 + k), v))
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    int mi = m0 + m + (am ? i : 0), ki = k0 + k + (am ? 0 : i);
                    v[i] = mi < M && ki < K ? cf_a1<OP>(a, x, mi, ki) : 0.0f;
                }
            cf_put8<CF_BK + 8>(&sa[m][k], am, v);
        }
#pragma unroll
        for (int u = 0; u < UB; u++) {
            int e = tid + u * THREADS;
            int k, n;
            cf_unit_b<BN>(e, bk, &k, &n);
            float v[8];
            if (!cf_make<false>(x, kb[u], fb[u], rb[u], 0, 0, v))
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    int ki = k0 + k + (bk ? i : 0), ni = n0 + n + (bk ? 0 : i);
                    v[i] = ni < N && ki < K ? ck_opb<OP>(a, x, ki, ni) : 0.0f;
                }
            cf_put8<BN + 8>(&sb[k][n], bk, v);
        }
        __syncthreads();
        if (k0 + CF_BK < K) issue(k0 + CF_BK); /* in flight during the products below */
#pragma unroll
        for (int kk = 0; kk < CF_BK; kk += 16) {
            uint32_t af[4];
            gt_ldsm_x4(af, &sa[warp * 16 + lane % 16][kk + (lane / 16) * 8]);
            int mi = lane / 8;
#pragma unroll
            for (int nb = 0; nb < NB; nb += 2) {
                /* matrices (k 0-7, nb), (k 8-15, nb), (k 0-7, nb+1), (k 8-15, nb+1), transposed */
                uint32_t bfr[4];
                gt_ldsm_x4_t(bfr, &sb[kk + (mi % 2) * 8 + lane % 8][(nb + mi / 2) * 8]);
                gt_mma_16816(acc[nb], af, bfr);
                gt_mma_16816(acc[nb + 1], af, bfr + 2);
            }
        }
    }
    if (OP == CK_DXS && tok) {
        cf_dxs_tok<NB>(a, x, acc, m0 + warp * 16, lane, M, N, vec != 0);
        return;
    }
    int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int m = m0 + warp * 16 + g + half * 8, n = n0 + nb * 8 + 2 * t;
            const float *v = &acc[nb][half * 2];
            if (m >= M || n >= N) continue;
            /* y = (y - D x - the diagonal) + (C_m.B_m dt_m + D) x: the diagonal, left out of the
             * product, in fp32 */
            size_t yat = (x.n0 + m) * a.di + (size_t)x.h * a.P + n;
            float fd = OP == CK_YF ? x.cb[(size_t)m * a.L + m] * x.dt[m] + x.Dh : 0.0f;
            if (vec && n + 1 < N) {
                if (OP != CK_YF) ck_store2<OP>(a, x, m, n, v[0], v[1]); /* y's: yhin's */
                if (OP == CK_YF) {
                    float2 xv = __bfloat1622float2(*(
                        const __nv_bfloat162 *)(a.xbc + (x.n0 + m) * a.C + (size_t)x.h * a.P + n));
                    *(__nv_bfloat162 *)(a.y + yat) =
                        __floats2bfloat162_rn(v[0] + fd * xv.x, v[1] + fd * xv.y);
                }
                continue;
            }
            for (int e = 0; e < 2 && n + e < N; e++) {
                if (OP != CK_YF) ck_store<OP>(a, x, m, n + e, v[e]);
                if (OP == CK_YF) a.y[yat + e] = tobf(v[e] + fd * ck_x(a, x.n0 + m, x.h, n + e));
            }
        }
}

/* Whether the vector forms of cf_a_src / cf_b_src hold for the launch: every row, head and group
 * slice and chunk of 8 whole bf16 (16 bytes) and the tensors on 16 bytes */
static int cf_vec(const ck_args &a) {
    uintptr_t at = (uintptr_t)a.xbc | (uintptr_t)a.dy | (uintptr_t)a.m_dc | (uintptr_t)a.m_db;
    return a.C % 8 == 0 && a.di % 8 == 0 && a.P % 8 == 0 && a.S % 8 == 0 && a.L % 8 == 0 &&
           a.ldm % 8 == 0 && at % 16 == 0;
}

/* Product OP over every chunk by k_ck_fused: BM rows (64 or 128) and BN columns a block */
template <int OP, int BM, int BN>
static int ck_fused(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what) {
    ck_at whole = {}; /* a chunk's M and N taken whole */
    whole.Lc = a.L;
    int M, N, K;
    ck_dims<OP>(a, whole, &M, &N, &K);
    unsigned batch = (unsigned)(a.B * a.nc * (ck_per_group(OP) ? a.G : a.H));
    dim3 grid(batch, (unsigned)((M + BM - 1) / BM), (unsigned)((N + BN - 1) / BN));
    int tok = OP == CK_DXS && grid.z == 1;
    gt_launch(k_ck_fused<OP, BM, BN>, grid, BM * 2, 0, ex, a, cf_vec(a), tok);
    GT_CUDA_LAUNCHED(b, what);
    return tok;
}

int gt_ssd_product(gt_backend *b, gt_cuda_exec ex, const ck_args &a, int op, const char *what) {
    switch (op) {
    case CK_CB:
        return ck_fused<CK_CB, 128, 128>(b, ex, a, what);
    case CK_SLOC:
        return ck_fused<CK_SLOC, 64, 128>(b, ex, a, what);
    case CK_YF:
        return ck_fused<CK_YF, 128, 64>(b, ex, a, what);
    case CK_DH:
        return ck_fused<CK_DH, 64, 128>(b, ex, a, what);
    case CK_DXS:
        return ck_fused<CK_DXS, 128, GT_MAMBA_SSD_TOK_MAX_P>(b, ex, a, what);
    case CK_DC: { /* dB and dC: M into both A operands, then the two products */
        gt_ssd_msum(b, ex, a, what);
        ck_fused<CK_DC, 128, 128>(b, ex, a, what);
        ck_fused<CK_DB, 128, 128>(b, ex, a, what);
        return 0;
    }
    default:
        gt_backend_fail(b, GT_ERR_INVALID, "%s: no SSD product %d", what, op);
        return 0;
    }
}
