/* Tensor-core causal GQA attention (WMMA bf16 16x16x16, fp32 accumulate): the fast path of
 * k_attention.cu for hd 128 and 16-byte aligned tensors (hd 64 has the mma.sync kernels of
 * k_attention_mma.cu). Same algorithm and the same
 * determinism as the SIMT kernels: forward with an online softmax per 64-query tile; backward
 * in two kernels, dK/dV per 64-key tile (looping over the group's query heads and the query
 * tiles in order) and dQ per 64-query tile, so no atomics. Each of the 4 warps owns 16 rows:
 * the score strip, its softmax and its accumulators, so most steps need only __syncwarp. P and
 * dS are rounded to bf16 before their products (as FlashAttention does). */
#include <mma.h>

#include "backend/cuda/attention.cuh"

using namespace nvcuda;

#define TC_TILE 64 /* queries and keys per tile */
#define TC_THREADS 128
#define TC_LDS (TC_TILE + 4) /* fp32 score tiles */
#define TC_LDP (TC_TILE + 8) /* bf16 probability tiles */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> frag_a_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Rows [r0, r0 + 64) of one head into a bf16 tile with row stride LD; rows past T are 0. */
template <int HD, int LD>
static __device__ __forceinline__ void tc_load(bf16 *dst, const bf16 *src, int row_base, int r0,
                                               int T, int stride, int col0) {
    constexpr int VPR = HD / 8;
    for (int idx = threadIdx.x; idx < TC_TILE * VPR; idx += blockDim.x) {
        int r = idx / VPR, v = idx % VPR, t = r0 + r;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (t < T) val = *(const uint4 *)(src + (size_t)(row_base + t) * stride + col0 + v * 8);
        *(uint4 *)(dst + r * LD + v * 8) = val;
    }
}

/* S[16 x 64] (rows w*16..) = A[16 x HD] . B[64 x HD]^T, stored fp32 to S with stride TC_LDS. */
template <int HD, int LD>
static __device__ __forceinline__ void tc_strip_dot(float *S, const bf16 *A, const bf16 *Bm,
                                                    int w) {
    frag_c c[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        wmma::fill_fragment(c[j], 0.0f);
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        frag_a_row a;
        wmma::load_matrix_sync(a, A + w * 16 * LD + kk * 16, LD);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            frag_b_col bm;
            wmma::load_matrix_sync(bm, Bm + j * 16 * LD + kk * 16, LD);
            wmma::mma_sync(c[j], a, bm, c[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        wmma::store_matrix_sync(S + w * 16 * TC_LDS + j * 16, c[j], TC_LDS, wmma::mem_row_major);
}

template <int HD> static constexpr size_t tc_fwd_smem() {
    return sizeof(bf16) * (3 * TC_TILE * (HD + 8) + TC_TILE * TC_LDP) +
           sizeof(float) * (TC_TILE * TC_LDS + TC_TILE * (HD + 4));
}

template <int HD>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_fwd_tc(bf16 *out, float *lse, const bf16 *qkv, attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    constexpr int LD = HD + 8, LDO = HD + 4;
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16 *Qs = (bf16 *)smraw, *Ks = Qs + TC_TILE * LD, *Vs = Ks + TC_TILE * LD;
    bf16 *Ps = Vs + TC_TILE * LD;                 /* [64][TC_LDP] */
    float *Ss = (float *)(Ps + TC_TILE * TC_LDP); /* [64][TC_LDS] */
    float *Os = Ss + TC_TILE * TC_LDS;            /* [64][LDO] */
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kvh = h / (g.H / g.KV), T = g.T, q0 = qt * TC_TILE, row_base = b * T;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    int r = w * 16 + (lane >> 1), half = lane & 1, i = q0 + r;
    for (int x = threadIdx.x; x < TC_TILE * LDO; x += blockDim.x)
        Os[x] = 0.0f;
    tc_load<HD, LD>(Qs, qkv, row_base, q0, T, g.C, h * HD);
    float m = -INFINITY, l = 0.0f;
    int last_key = min(T - 1, q0 + TC_TILE - 1);
    for (int k0 = 0; k0 <= last_key; k0 += TC_TILE) {
        __syncthreads();
        tc_load<HD, LD>(Ks, qkv, row_base, k0, T, g.C, (g.H + kvh) * HD);
        tc_load<HD, LD>(Vs, qkv, row_base, k0, T, g.C, (g.H + g.KV + kvh) * HD);
        __syncthreads();
        tc_strip_dot<HD, LD>(Ss, Qs, Ks, w);
        __syncwarp();
        const float *srow = Ss + r * TC_LDS + half * 32;
        float tmax = -INFINITY;
        for (int c = 0; c < 32; c++) {
            int j = k0 + half * 32 + c;
            if (j <= i && j < T) tmax = fmaxf(tmax, srow[c] * g.scale);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float mnew = fmaxf(m, tmax);
        float alpha = (m == -INFINITY) ? (mnew == -INFINITY ? 1.0f : 0.0f) : expf(m - mnew);
        float rsum = 0.0f;
        bf16 *prow = Ps + r * TC_LDP + half * 32;
        for (int c = 0; c < 32; c++) {
            int j = k0 + half * 32 + c;
            float pv =
                (j <= i && j < T && mnew != -INFINITY) ? expf(srow[c] * g.scale - mnew) : 0.0f;
            rsum += pv;
            prow[c] = tobf(pv * drop_mult(g, micro, step, b, h, i, j));
        }
        rsum += __shfl_xor_sync(0xffffffffu, rsum, 1);
        l = l * alpha + rsum;
        m = mnew;
        float *orow = Os + r * LDO + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++)
            orow[c] *= alpha;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            frag_c acc;
            wmma::load_matrix_sync(acc, Os + w * 16 * LDO + n * 16, LDO, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < TC_TILE / 16; kk++) {
                frag_a_row a;
                frag_b_row bm;
                wmma::load_matrix_sync(a, Ps + w * 16 * TC_LDP + kk * 16, TC_LDP);
                wmma::load_matrix_sync(bm, Vs + kk * 16 * LD + n * 16, LD);
                wmma::mma_sync(acc, a, bm, acc);
            }
            wmma::store_matrix_sync(Os + w * 16 * LDO + n * 16, acc, LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (i < T) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const float *orow = Os + r * LDO + half * (HD / 2);
        bf16 *o = out + (size_t)(row_base + i) * (g.H * HD) + h * HD + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++)
            o[c] = tobf(orow[c] * inv);
        if (half == 0) lse[((size_t)b * g.H + h) * T + i] = m + logf(l);
    }
}

/* P (dropped, bf16) and dS (bf16) of the rows this lane pair owns, from S and dP (fp32). */
static __device__ __forceinline__ void tc_pds_rows(const attn_geo &g, uint32_t micro, uint32_t step,
                                                   int b, int h, int q0, int k0, const float *Ss,
                                                   const float *dPs, const float *Ls,
                                                   const float *Ds, bf16 *Pb, bf16 *dSb, int r,
                                                   int half) {
    int i = q0 + r;
    for (int c = half * 32; c < half * 32 + 32; c++) {
        float pd, ds;
        p_ds(g, micro, step, b, h, i, k0 + c, Ss[r * TC_LDS + c], dPs[r * TC_LDS + c], Ls[r], Ds[r],
             &pd, &ds);
        if (Pb) Pb[r * TC_LDP + c] = tobf(pd);
        dSb[r * TC_LDP + c] = tobf(ds);
    }
}

/* Writes a warp's 16-row accumulator strip (rows r0 + w*16..) times sc into columns
 * [col, col + HD) of rows of a [B*T, C] bf16 tensor, through the fp32 staging tile Ob. */
template <int HD>
static __device__ __forceinline__ void tc_store_rows(bf16 *dst, float *Ob, frag_c (&acc)[HD / 16],
                                                     int w, int r, int half, int r0, int T,
                                                     int row_base, int C, int col, float sc) {
    constexpr int LDO = HD + 4;
#pragma unroll
    for (int n = 0; n < HD / 16; n++)
        wmma::store_matrix_sync(Ob + w * 16 * LDO + n * 16, acc[n], LDO, wmma::mem_row_major);
    __syncwarp();
    int t = r0 + r;
    if (t < T) {
        bf16 *d = dst + (size_t)(row_base + t) * C + col + half * (HD / 2);
        const float *src = Ob + r * LDO + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++)
            d[c] = tobf(src[c] * sc);
    }
    __syncwarp();
}

template <int HD> static constexpr size_t tc_dkv_smem() {
    return sizeof(bf16) * (4 * TC_TILE * (HD + 8) + 2 * TC_TILE * TC_LDP) +
           sizeof(float) * (2 * TC_TILE * TC_LDS + TC_TILE * (HD + 4) + 2 * TC_TILE);
}

template <int HD>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_dkv_tc(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                  attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    constexpr int LD = HD + 8, LDO = HD + 4, NF = HD / 16;
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16 *Ks = (bf16 *)smraw, *Vs = Ks + TC_TILE * LD, *Qs = Vs + TC_TILE * LD;
    bf16 *dOs = Qs + TC_TILE * LD, *Pb = dOs + TC_TILE * LD, *dSb = Pb + TC_TILE * TC_LDP;
    float *Ss = (float *)(dSb + TC_TILE * TC_LDP), *dPs = Ss + TC_TILE * TC_LDS;
    float *Ob = dPs + TC_TILE * TC_LDS, *Ls = Ob + TC_TILE * LDO, *Ds = Ls + TC_TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int kt = gridDim.x - 1 - blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    int T = g.T, row_base = b * T, k0 = kt * TC_TILE, group = g.H / g.KV, HO = g.H * HD;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    int r = w * 16 + (lane >> 1), half = lane & 1;
    frag_c dk[NF], dv[NF];
#pragma unroll
    for (int n = 0; n < NF; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    tc_load<HD, LD>(Ks, qkv, row_base, k0, T, g.C, (g.H + kvh) * HD);
    tc_load<HD, LD>(Vs, qkv, row_base, k0, T, g.C, (g.H + g.KV + kvh) * HD);
    for (int hh = 0; hh < group; hh++) {
        int h = kvh * group + hh;
        for (int q0 = k0; q0 < T; q0 += TC_TILE) {
            __syncthreads();
            tc_load<HD, LD>(Qs, qkv, row_base, q0, T, g.C, h * HD);
            tc_load<HD, LD>(dOs, dout, row_base, q0, T, HO, h * HD);
            for (int x = threadIdx.x; x < TC_TILE; x += blockDim.x) {
                int i = q0 + x;
                size_t li = ((size_t)b * g.H + h) * T + i;
                Ls[x] = i < T ? lse[li] : 0.0f;
                Ds[x] = i < T ? D[li] : 0.0f;
            }
            __syncthreads();
            tc_strip_dot<HD, LD>(Ss, Qs, Ks, w);   /* S rows = queries of strip w */
            tc_strip_dot<HD, LD>(dPs, dOs, Vs, w); /* dP = dO V^T */
            __syncwarp();
            tc_pds_rows(g, micro, step, b, h, q0, k0, Ss, dPs, Ls, Ds, Pb, dSb, r, half);
            __syncthreads();
            /* keys of strip w: dV += P^T dO, dK += dS^T Q over the 64 queries */
#pragma unroll
            for (int kk = 0; kk < TC_TILE / 16; kk++) {
                frag_a_col pa, sa;
                wmma::load_matrix_sync(pa, Pb + kk * 16 * TC_LDP + w * 16, TC_LDP);
                wmma::load_matrix_sync(sa, dSb + kk * 16 * TC_LDP + w * 16, TC_LDP);
#pragma unroll
                for (int n = 0; n < NF; n++) {
                    frag_b_row ob, qb;
                    wmma::load_matrix_sync(ob, dOs + kk * 16 * LD + n * 16, LD);
                    wmma::mma_sync(dv[n], pa, ob, dv[n]);
                    wmma::load_matrix_sync(qb, Qs + kk * 16 * LD + n * 16, LD);
                    wmma::mma_sync(dk[n], sa, qb, dk[n]);
                }
            }
        }
    }
    tc_store_rows<HD>(dqkv, Ob, dk, w, r, half, k0, T, row_base, g.C, (g.H + kvh) * HD, g.scale);
    tc_store_rows<HD>(dqkv, Ob, dv, w, r, half, k0, T, row_base, g.C, (g.H + g.KV + kvh) * HD,
                      1.0f);
}

template <int HD> static constexpr size_t tc_dq_smem() {
    return sizeof(bf16) * (4 * TC_TILE * (HD + 8) + TC_TILE * TC_LDP) +
           sizeof(float) * (2 * TC_TILE * TC_LDS + TC_TILE * (HD + 4) + 2 * TC_TILE);
}

template <int HD>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_dq_tc(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                 attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    constexpr int LD = HD + 8, LDO = HD + 4, NF = HD / 16;
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16 *Qs = (bf16 *)smraw, *dOs = Qs + TC_TILE * LD, *Ks = dOs + TC_TILE * LD;
    bf16 *Vs = Ks + TC_TILE * LD, *dSb = Vs + TC_TILE * LD;
    float *Ss = (float *)(dSb + TC_TILE * TC_LDP), *dPs = Ss + TC_TILE * TC_LDS;
    float *Ob = dPs + TC_TILE * TC_LDS, *Ls = Ob + TC_TILE * LDO, *Ds = Ls + TC_TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kvh = h / (g.H / g.KV), T = g.T, row_base = b * T, q0 = qt * TC_TILE;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    int r = w * 16 + (lane >> 1), half = lane & 1;
    frag_c dq[NF];
#pragma unroll
    for (int n = 0; n < NF; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    tc_load<HD, LD>(Qs, qkv, row_base, q0, T, g.C, h * HD);
    tc_load<HD, LD>(dOs, dout, row_base, q0, T, g.H * HD, h * HD);
    for (int x = threadIdx.x; x < TC_TILE; x += blockDim.x) {
        int i = q0 + x;
        size_t li = ((size_t)b * g.H + h) * T + i;
        Ls[x] = i < T ? lse[li] : 0.0f;
        Ds[x] = i < T ? D[li] : 0.0f;
    }
    int last_key = min(T - 1, q0 + TC_TILE - 1);
    for (int k0 = 0; k0 <= last_key; k0 += TC_TILE) {
        __syncthreads();
        tc_load<HD, LD>(Ks, qkv, row_base, k0, T, g.C, (g.H + kvh) * HD);
        tc_load<HD, LD>(Vs, qkv, row_base, k0, T, g.C, (g.H + g.KV + kvh) * HD);
        __syncthreads();
        tc_strip_dot<HD, LD>(Ss, Qs, Ks, w);
        tc_strip_dot<HD, LD>(dPs, dOs, Vs, w);
        __syncwarp();
        tc_pds_rows(g, micro, step, b, h, q0, k0, Ss, dPs, Ls, Ds, NULL, dSb, r, half);
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < TC_TILE / 16; kk++) {
            frag_a_row sa;
            wmma::load_matrix_sync(sa, dSb + w * 16 * TC_LDP + kk * 16, TC_LDP);
#pragma unroll
            for (int n = 0; n < NF; n++) {
                frag_b_row kb;
                wmma::load_matrix_sync(kb, Ks + kk * 16 * LD + n * 16, LD);
                wmma::mma_sync(dq[n], sa, kb, dq[n]);
            }
        }
    }
    tc_store_rows<HD>(dqkv, Ob, dq, w, r, half, q0, T, row_base, g.C, h * HD, g.scale);
}

static int aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

int gt_cuda_attn_tc_fwd(cudaStream_t cs, void *out, float *lse, const void *qkv, const attn_geo *g,
                        int hd, const gt_step_state *st) {
    if (hd != 128 || !aligned16(qkv)) return 0;
    dim3 grid((g->T + TC_TILE - 1) / TC_TILE, g->H, g->B);
    gt_launch(k_attn_fwd_tc<128>, grid, TC_THREADS, tc_fwd_smem<128>(), cs, (bf16 *)out, lse,
              (const bf16 *)qkv, *g, st);
    return 1;
}

int gt_cuda_attn_tc_bwd(cudaStream_t cs, void *dqkv, const void *dout, const void *qkv,
                        const float *lse, const float *D, const attn_geo *g, int hd,
                        const gt_step_state *st) {
    if (hd != 128 || !aligned16(qkv) || !aligned16(dout)) return 0;
    dim3 gkv((g->T + TC_TILE - 1) / TC_TILE, g->KV, g->B);
    dim3 gq((g->T + TC_TILE - 1) / TC_TILE, g->H, g->B);
    gt_launch(k_attn_dkv_tc<128>, gkv, TC_THREADS, tc_dkv_smem<128>(), cs, (bf16 *)dqkv,
              (const bf16 *)dout, (const bf16 *)qkv, lse, D, *g, st);
    gt_launch(k_attn_dq_tc<128>, gq, TC_THREADS, tc_dq_smem<128>(), cs, (bf16 *)dqkv,
              (const bf16 *)dout, (const bf16 *)qkv, lse, D, *g, st);
    return 1;
}

template <typename K> static cudaError_t tc_allow(K kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

cudaError_t gt_cuda_attn_tc_init(void) {
    cudaError_t e = tc_allow(k_attn_fwd_tc<128>, tc_fwd_smem<128>());
    if (e == cudaSuccess) e = tc_allow(k_attn_dkv_tc<128>, tc_dkv_smem<128>());
    if (e == cudaSuccess) e = tc_allow(k_attn_dq_tc<128>, tc_dq_smem<128>());
    return e;
}
