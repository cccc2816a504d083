/* What the files of the SSD scan share (k_mamba_ssd.cu: its kernels and launches;
 * k_mamba_ssd_gemm.cu: its chunk products on tensor cores; k_mamba_ssd_dm.cu: dB's and dC's
 * M): the products, the workspace's pointers and the shapes, one chunk's view of them. */
#ifndef GT_BACKEND_CUDA_MAMBA_SSD_CUH
#define GT_BACKEND_CUDA_MAMBA_SSD_CUH

#include <stdint.h>

#include "backend/cuda/mma_sync.cuh"

#define CK_THREADS 256 /* the elementwise and per-chunk kernels */

/* The products; the comments give out[m][n] = sum_k a(m, k) b(k, n) of one chunk, with
 * E_ij = exp(cs_i - cs_j), w_j = exp(cs_last - cs_j), xs_j = dt_j x_j, dM_ij = dy_i . x_j.
 * y's and dx's k runs over the state's S first (padded to whole slabs: ck_ks), then over the
 * chunk, so that their accumulators hold the state's part alone at the chunk's first slab: y's
 * keeps it (yhin), dx's its dot with x (the decay's gradient takes both, mamba_ssd.cuh's
 * k_ck_chunk_bwd, without them cancelling against the chunk's own products). Both leave C B^T's
 * diagonal out: it is added in fp32 where y and dx are made. */
enum {
    CK_CB,   /* per (b, g, c): CB[i][j] = C_i . B_j, j <= i (k over S) */
    CK_SLOC, /* Sloc[p][s] = sum_j w_j xs_j[p] B_j[s] (k over the chunk) */
    CK_YF,   /* y[i][p] - D x - CB_ii xs_i = exp(cs_i) sum_s Hin[p][s] C_i[s] (yhin, kept in
                the state in bf16) + sum_j<i CB_ij E_ij xs_j[p] */
    CK_DH,   /* dHin[p][s] = sum_i exp(cs_i) dy_i[p] C_i[s] */
    CK_DXS,  /* dxs[j][p] = w_j sum_s B_j[s] G[p][s] + sum_i>j CB_ij E_ij dy_i[p]
                (dL/dxs_j less CB_jj dy_j) */
    /* dB and dC per (b, g, c), the group's heads h summed inside the product: over (h, p)
     * in the first part of k, and in the operand for the second, M_ij = sum_h dt_j dM_ij E_ij
     * with dM_ij = dy_i . x_j (k_mamba_ssd_dm.cu makes it; B and C are the group's) */
    CK_DC, /* dC_i[s] = sum_h exp(cs_i) sum_p dy_i[p] Hin[p][s] + sum_j<=i M_ij B_j[s] */
    CK_DB, /* dB_j[s] = sum_h w_j sum_p xs_j[p] G[p][s] + sum_i>=j M_ij C_i[s] */
};

/* k of a product's slab (k_mamba_ssd_gemm.cu): y's and dx's state part is padded to whole
 * ones */
#define CK_SLAB 32
/* Where the chunk's part of y's and dx's k starts: the state's S in whole slabs */
static __host__ __device__ __forceinline__ int ck_ks(int S) {
    return (S + CK_SLAB - 1) / CK_SLAB * CK_SLAB;
}

/* Whether product OP runs per (sequence, group, chunk) rather than per (sequence, head, chunk) */
static __host__ __device__ __forceinline__ constexpr bool ck_per_group(int op) {
    return op == CK_CB || op == CK_DC || op == CK_DB;
}

/* Pointers into the workspace (laid out as gt_mamba_ws_floats counts them) and shapes. */
typedef struct ck_args {
    const bf16 *xbc, *zx, *dt_bias, *A_log, *D, *dy;
    bf16 *y, *dxbc, *dzx;
    /* the state (the forward writes it, the backward reads it) */
    float *dt, *cs; /* [B*H][T]: softplus'd dt, cumsum of dt*A within the chunk */
    float *cb;      /* [B*G][nc][L][L] */
    bf16 *hin;      /* [B*H][nc][P][S]: the state entering the chunk (bf16: the products'
                       operands are, and mamba_ssm passes its states so) */
    bf16 *yhin;     /* [B*H][nc*L][P]: y's part from the state entering the chunk, tokens
                       padded to whole chunks */
    /* the workspace */
    float *st;         /* [B*H][nc][P][S] fp32: the chunk's own state (forward), dL/dHin of
                          the chunk's outputs (backward), both summed on in the passing */
    bf16 *gs;          /* [B*H][nc][P][S]: dL/d(the state leaving the chunk) */
    float *dxs;        /* [B*H][nc*L][P], tokens padded to whole chunks; only where P >
                          GT_MAMBA_SSD_TOK_MAX_P (else dx's product makes dx and tok itself) */
    float *tok;        /* [3 + ntp][B*H][T]: x . dxs, dy . yhin, dy . x, then x . (dxs's
                          state part) in ntp parts, one per GT_MAMBA_SSD_TOK_MAX_P of p */
    float *lt;         /* [B*H][nc][nlt]: <dL/d(state out), state out>, in parts of
                          GT_MAMBA_SSD_PASS_ENTRIES state entries (k_ck_pass_bwd's blocks) */
    float *part;       /* [3][B*H][nc]: ddt_bias, dA, dD per chunk */
    bf16 *m_dc, *m_db; /* [B*G*nc][L][ldm]: dC's M (rows i) and dB's (rows j, M^T) */
    float *dda;        /* [B*H][nc][2][nt][L]: the decay gradient's terms W from the chunk's own
                          products summed per token: [0][tj][i] over row i's j < i in column
                          tile tj, [1][ti][j] over column j's i > j in row tile ti (k_ck_msum) */
    int B, T, H, P, G, S, L, nc, C, di, in;
    int ldm;  /* L rounded up to whole 16-byte rows of bf16 */
    int nlt;  /* the parts of lt: P*S over GT_MAMBA_SSD_PASS_ENTRIES, rounded up */
    int ntp;  /* the parts of tok's fourth sum: P over GT_MAMBA_SSD_TOK_MAX_P, rounded up */
    int nt;   /* dda's tiles of a chunk: L over GT_MAMBA_SSD_DM_TILE, rounded up */
    int fits; /* the layouts end inside gt_mamba_ws_floats and gt_mamba_ssd_state_floats */
} ck_args;

/* C_i . B_i of token i of chunk c of (sequence b, group g): C B^T's diagonal */
static __device__ __forceinline__ float ck_cb_diag(const ck_args &a, int b, int g, int c, int i) {
    return a.cb[(((size_t)b * a.G + g) * a.nc + c) * (size_t)a.L * a.L + (size_t)i * a.L + i];
}

/* One chunk of one head (or group, where ck_per_group: h is then the group's first head):
 * token n0 is its first, Lc its length. */
typedef struct ck_at {
    int b, h, g, c, Lc;
    size_t z, n0;
    const float *cs, *dt, *cb;
    const bf16 *hin, *gs;
    float csl, A, Dh;
} ck_at;

template <int OP> static __device__ __forceinline__ ck_at ck_at_make(const ck_args &a, size_t z) {
    ck_at x;
    int c = (int)(z % a.nc);
    size_t bq = z / a.nc; /* b*H + h, or b*G + g where ck_per_group */
    int per = ck_per_group(OP) ? a.G : a.H;
    int b = (int)(bq / per);
    x.z = z, x.c = c, x.b = b;
    x.g = ck_per_group(OP) ? (int)(bq % per) : (int)(bq % per) / (a.H / a.G);
    x.h = ck_per_group(OP) ? x.g * (a.H / a.G) : (int)(bq % per);
    x.Lc = min(a.L, a.T - c * a.L);
    x.n0 = (size_t)b * a.T + (size_t)c * a.L;
    size_t bh = (size_t)b * a.H + x.h, LL = (size_t)a.L * a.L, ps = (size_t)a.P * a.S;
    x.cs = a.cs + bh * a.T + (size_t)c * a.L;
    x.dt = a.dt + bh * a.T + (size_t)c * a.L;
    x.cb = a.cb + (((size_t)b * a.G + x.g) * a.nc + c) * LL;
    x.hin = a.hin + (bh * a.nc + c) * ps;
    x.gs = a.gs + (bh * a.nc + c) * ps;
    x.csl = x.cs[x.Lc - 1];
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

/* The workspace ws and the state laid out for shape sh as gt_mamba_ws_floats and
 * gt_mamba_ssd_state_floats count them (fits: both layouts end inside them), each buffer on
 * 256 bytes; the tensors' pointers are the caller's */
ck_args gt_ssd_args(gt_mamba_shape sh, float *ws, float *state);
/* Product op (CK_*) over every chunk (k_mamba_ssd_gemm.cu); CK_DC stands for dB and dC
 * together (their shared operand, then both products). CK_YF's epilogue makes y as well
 * (y - D x plus D x). 1 where CK_DXS's epilogue made dx and the token sums (k_ck_tok's work). */
int gt_ssd_product(gt_backend *b, gt_cuda_exec ex, const ck_args &a, int op, const char *what);
/* M into m_dc and M^T into m_db (k_mamba_ssd_dm.cu) */
void gt_ssd_msum(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what);

#endif
