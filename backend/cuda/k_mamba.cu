/* The Mamba-2 mixer's ops on the CUDA backend (backend.h; the fp32 reference is cpu_mamba.c):
 * the z-gated RMSNorm, the shape checks of the chunked SSD scan (its kernels: k_mamba_ssd.cu)
 * and the registration of the causal conv1d (k_mamba_conv.cu). bf16 in and out, fp32 math;
 * every reduction runs in a fixed order (no float atomics), no host sync, no allocation. */
#include "backend/cuda/mamba_ew.cuh"

/* ---- SSD scan: the chunked kernels of k_mamba_ssd.cu ---- */

static void cuda_mamba_ssd_fwd(gt_backend *b, gt_stream *s, void *y, const void *xbc,
                               const void *zxbcdt, const void *dt_bias, const void *A_log,
                               const void *D, float *ws, float *state, gt_mamba_shape sh) {
    if (!shape_ok(b, "mamba_ssd_fwd", sh)) return;
    if (!state && !b->planning) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "mamba_ssd_fwd: no state buffer given (the CUDA scan "
                        "keeps gt_mamba_ssd_state_floats floats for its backward)");
        return;
    }
    if (b->planning) return;
    gt_cuda_mamba_ssd_fwd(b, s, y, xbc, zxbcdt, dt_bias, A_log, D, ws, state, sh);
}

static void cuda_mamba_ssd_bwd(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt,
                               float *ddt_bias, float *dA_log, float *dD, const void *dy,
                               const void *xbc, const void *zxbcdt, const void *dt_bias,
                               const void *A_log, const void *D, float *ws, const float *state,
                               gt_mamba_shape sh, int accumulate) {
    if (!shape_ok(b, "mamba_ssd_bwd", sh)) return;
    if (!state && !b->planning) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "mamba_ssd_bwd: no state buffer given (the forward's "
                        "of the same inputs, gt_mamba_ssd_state_floats floats)");
        return;
    }
    if (b->planning) return;
    gt_cuda_mamba_ssd_bwd(b, s, dxbc, dzxbcdt, ddt_bias, dA_log, dD, dy, xbc, zxbcdt, dt_bias,
                          A_log, D, ws, state, sh, accumulate);
}

/* ---- gated RMSNorm: u = y * silu(z), out = u * rstd * w per group of gs channels ----
 * A warp per row (a token's group): lane l holds the row's vectors l, l + 32, ... (V channels
 * each, so a warp reads 32 consecutive vectors at a time), the first GN_HOLD of them in
 * registers between the passes (the rest, of rows wider than 32 * GN_HOLD vectors, are read
 * again); sums per lane in vector order, then a fixed shuffle tree. */
#define GN_WARPS 4
#define GN_HOLD 8

static __device__ __forceinline__ float gate(float yv, float zv) {
    return yv * zv * sigm(zv);
}

/* HOLD: the vectors a lane keeps per row (GN_HOLD, or 1 where a row is at most a warp's
 * vectors: the registers for 8, 110 a thread on vectors, leave an SM 18 warps of its 64) */
template <int V, int HOLD>
__global__ void __launch_bounds__(GN_WARPS *GT_WARP)
    k_gnorm_fwd(bf16 *__restrict__ out, float *__restrict__ rstd, const bf16 *__restrict__ y,
                const bf16 *__restrict__ z, int ldz, const bf16 *__restrict__ w, int di, int G,
                size_t rows, float eps) {
    GT_PDL_ENTRY();
    size_t row = (size_t)blockIdx.x * GN_WARPS + threadIdx.x / GT_WARP;
    if (row >= rows) return; /* the whole warp: rows are warp-uniform */
    int lane = threadIdx.x % GT_WARP, g = (int)(row % (size_t)G), gs = di / G, nvec = gs / V;
    size_t n = row / (size_t)G;
    const bf16 *yr = y + n * di + (size_t)g * gs, *zr = z + n * ldz + (size_t)g * gs;
    const bf16 *wg = w + (size_t)g * gs;
    bf16 *o = out + n * di + (size_t)g * gs;
    float u[HOLD][V], ss = 0.0f;
#pragma unroll
    for (int h = 0; h < HOLD; h++) {
        int j = lane + h * GT_WARP;
        if (j >= nvec) break;
        float yv[V], zv[V];
        ldv<V>(yv, yr + (size_t)j * V);
        ldv<V>(zv, zr + (size_t)j * V);
#pragma unroll
        for (int i = 0; i < V; i++) {
            u[h][i] = gate(yv[i], zv[i]);
            ss += u[h][i] * u[h][i];
        }
    }
    for (int j = lane + HOLD * GT_WARP; j < nvec; j += GT_WARP) {
        float yv[V], zv[V];
        ldv<V>(yv, yr + (size_t)j * V);
        ldv<V>(zv, zr + (size_t)j * V);
#pragma unroll
        for (int i = 0; i < V; i++) {
            float uv = gate(yv[i], zv[i]);
            ss += uv * uv;
        }
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)gs + eps);
    if (lane == 0) rstd[row] = r;
#pragma unroll
    for (int h = 0; h < HOLD; h++) {
        int j = lane + h * GT_WARP;
        if (j >= nvec) break;
        float wv[V], ov[V];
        ldv<V>(wv, wg + (size_t)j * V);
#pragma unroll
        for (int i = 0; i < V; i++)
            ov[i] = u[h][i] * r * wv[i];
        stv<V>(o + (size_t)j * V, ov);
    }
    for (int j = lane + HOLD * GT_WARP; j < nvec; j += GT_WARP) {
        float yv[V], zv[V], wv[V], ov[V];
        ldv<V>(yv, yr + (size_t)j * V);
        ldv<V>(zv, zr + (size_t)j * V);
        ldv<V>(wv, wg + (size_t)j * V);
#pragma unroll
        for (int i = 0; i < V; i++)
            ov[i] = gate(yv[i], zv[i]) * r * wv[i];
        stv<V>(o + (size_t)j * V, ov);
    }
}

/* dw[di] (+)= sum_n dout * u * rstd: a block's threads hold V columns each over a run of
 * consecutive tokens (SLAB_CH columns across, RUNS runs), the cluster's blocks split the
 * tokens, and the partial sums are added in run and block order (cluster_sum). */
#define GN_BATCH 4
template <int V>
__global__ void __cluster_dims__(1, RED_CLUSTER, 1) __launch_bounds__(RED_THREADS)
    k_gnorm_bwd_weight(float *dw, const bf16 *__restrict__ dout, const bf16 *__restrict__ y,
                       const bf16 *__restrict__ z, int ldz, const float *__restrict__ rstd, int N,
                       int di, int G, int accumulate) {
    GT_PDL_ENTRY();
    constexpr int SLABV = SLAB_CH / V, RUNS = RED_THREADS / SLABV;
    __shared__ float part[RUNS][SLAB_CH];
    __shared__ float blk[SLAB_CH];
    int lv = threadIdx.x % SLABV, r = threadIdx.x / SLABV, c = blockIdx.x * SLAB_CH + lv * V;
    int runs = RED_CLUSTER * RUNS, per = (N + runs - 1) / runs;
    int n0 = ((int)blockIdx.y * RUNS + r) * per, n1 = n0 + per < N ? n0 + per : N;
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; i++)
        acc[i] = 0.0f;
    if (c < di) {
        int g = c / (di / G); /* a vector's channels share a group: gs is a multiple of V */
        for (int nb = n0; nb < n1; nb += GN_BATCH) {
            uint4 rd[GN_BATCH], ry[GN_BATCH], rz[GN_BATCH];
            float rs[GN_BATCH];
#pragma unroll
            for (int q = 0; q < GN_BATCH; q++) {
                size_t n = (size_t)(nb + q);
                int live = nb + q < n1;
                uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                rd[q] = live ? ld_raw<V>(dout + n * di + c) : zero;
                ry[q] = live ? ld_raw<V>(y + n * di + c) : zero;
                rz[q] = live ? ld_raw<V>(z + n * ldz + c) : zero;
                rs[q] = live ? rstd[n * G + g] : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < GN_BATCH; q++) {
                if (nb + q >= n1) break;
                float dv[V], yv[V], zv[V];
                unpack_raw<V>(dv, rd[q]);
                unpack_raw<V>(yv, ry[q]);
                unpack_raw<V>(zv, rz[q]);
#pragma unroll
                for (int i = 0; i < V; i++)
                    acc[i] += dv[i] * gate(yv[i], zv[i]) * rs[q];
            }
        }
    }
#pragma unroll
    for (int i = 0; i < V; i++)
        part[r][lv * V + i] = acc[i];
    cluster_sum<RUNS, SLAB_CH>(part, blk);
    if (cg::this_cluster().block_rank() != 0) return;
    for (int j = threadIdx.x; j < SLAB_CH; j += blockDim.x) {
        int ch = blockIdx.x * SLAB_CH + j;
        if (ch < di) dw[ch] = accumulate ? dw[ch] + blk[j] : blk[j];
    }
}

/* the gradients of V channels from their y, z, dout, w and the row's rstd r and k =
 * (sum dout w u) / gs r^3, in the CPU's order */
template <int V>
static __device__ __forceinline__ void gn_grads(bf16 *dy, bf16 *dz, const float *yv,
                                                const float *zv, const float *dv, const float *wv,
                                                float r, float k) {
    float gy[V], gz[V];
#pragma unroll
    for (int i = 0; i < V; i++) {
        float sz = zv[i] * sigm(zv[i]), du = r * wv[i] * dv[i] - k * (yv[i] * sz);
        gy[i] = du * sz;
        gz[i] = du * yv[i] * silu_grad(zv[i]);
    }
    stv<V>(dy, gy);
    stv<V>(dz, gz);
}

/* dy and dz of one row (a warp, as the forward): the row's y, z, dout stay in registers (raw
 * bf16) between the dot product and the gradients. Each lane reads y[j] before it writes
 * dy[j], so dy may alias y (the weight kernel runs first): no __restrict__ on either. */
template <int V>
__global__ void __launch_bounds__(GN_WARPS *GT_WARP)
    k_gnorm_bwd_data(bf16 *dy, bf16 *__restrict__ dz, int lddz, const bf16 *__restrict__ dout,
                     const bf16 *y, const bf16 *__restrict__ z, int ldz, const bf16 *__restrict__ w,
                     const float *__restrict__ rstd, int di, int G, size_t rows) {
    GT_PDL_ENTRY();
    size_t row = (size_t)blockIdx.x * GN_WARPS + threadIdx.x / GT_WARP;
    if (row >= rows) return; /* the whole warp */
    int lane = threadIdx.x % GT_WARP, g = (int)(row % (size_t)G), gs = di / G, nvec = gs / V;
    size_t n = row / (size_t)G, o = n * di + (size_t)g * gs;
    const bf16 *zr = z + n * ldz + (size_t)g * gs, *wg = w + (size_t)g * gs;
    bf16 *dzr = dz + n * lddz + (size_t)g * gs;
    float r = rstd[row], dot = 0.0f;
    uint4 ry[GN_HOLD], rz[GN_HOLD], rd[GN_HOLD];
#pragma unroll
    for (int h = 0; h < GN_HOLD; h++) {
        int j = lane + h * GT_WARP;
        if (j >= nvec) break;
        ry[h] = ld_raw<V>(y + o + (size_t)j * V);
        rz[h] = ld_raw<V>(zr + (size_t)j * V);
        rd[h] = ld_raw<V>(dout + o + (size_t)j * V);
    }
#pragma unroll
    for (int h = 0; h < GN_HOLD; h++) {
        int j = lane + h * GT_WARP;
        if (j >= nvec) break;
        float yv[V], zv[V], dv[V], wv[V];
        unpack_raw<V>(yv, ry[h]);
        unpack_raw<V>(zv, rz[h]);
        unpack_raw<V>(dv, rd[h]);
        ldv<V>(wv, wg + (size_t)j * V);
#pragma unroll
        for (int i = 0; i < V; i++)
            dot += dv[i] * wv[i] * gate(yv[i], zv[i]);
    }
    for (int j = lane + GN_HOLD * GT_WARP; j < nvec; j += GT_WARP) {
        float yv[V], zv[V], dv[V], wv[V];
        ldv<V>(yv, y + o + (size_t)j * V);
        ldv<V>(zv, zr + (size_t)j * V);
        ldv<V>(dv, dout + o + (size_t)j * V);
        ldv<V>(wv, wg + (size_t)j * V);
#pragma unroll
        for (int i = 0; i < V; i++)
            dot += dv[i] * wv[i] * gate(yv[i], zv[i]);
    }
    dot = warp_sum(dot);
    float k = dot / (float)gs * r * r * r;
#pragma unroll
    for (int h = 0; h < GN_HOLD; h++) {
        int j = lane + h * GT_WARP;
        if (j >= nvec) break;
        float yv[V], zv[V], dv[V], wv[V];
        unpack_raw<V>(yv, ry[h]);
        unpack_raw<V>(zv, rz[h]);
        unpack_raw<V>(dv, rd[h]);
        ldv<V>(wv, wg + (size_t)j * V);
        gn_grads<V>(dy + o + (size_t)j * V, dzr + (size_t)j * V, yv, zv, dv, wv, r, k);
    }
    for (int j = lane + GN_HOLD * GT_WARP; j < nvec; j += GT_WARP) {
        float yv[V], zv[V], dv[V], wv[V];
        ldv<V>(yv, y + o + (size_t)j * V);
        ldv<V>(zv, zr + (size_t)j * V);
        ldv<V>(dv, dout + o + (size_t)j * V);
        ldv<V>(wv, wg + (size_t)j * V);
        gn_grads<V>(dy + o + (size_t)j * V, dzr + (size_t)j * V, yv, zv, dv, wv, r, k);
    }
}

/* dy, dz and dw's parts together where a row's group fits a warp's lanes in one vector each
 * (gs <= GNF_MAX_GS): block (t, g) takes GNF_TOKENS tokens of group g, each warp every
 * GNF_WARPS-th of them, two rows' loads in flight at once, the row's gradients as
 * k_gnorm_bwd_data makes them, and each lane sums its channels' dout u rstd over its rows;
 * the warps' sums are added in warp order into part[t][channel] (k_gnorm_dw_sum adds the
 * blocks' parts in order). So y, z and dout are read once for both gradients. dy may alias y,
 * as k_gnorm_bwd_data's. */
#define GNF_WARPS 4
#define GNF_TOKENS GT_MAMBA_GNORM_TOKENS /* its parts are the workspace's (backend.h) */
#define GNF_ROWS 2                       /* rows a warp has in flight */
#define GNF_MAX_GS (GT_WARP * VEC)
__global__ void __launch_bounds__(GNF_WARPS *GT_WARP)
    k_gnorm_bwd_fused(bf16 *dy, bf16 *__restrict__ dz, int lddz, const bf16 *__restrict__ dout,
                      const bf16 *y, const bf16 *__restrict__ z, int ldz,
                      const bf16 *__restrict__ w, const float *__restrict__ rstd,
                      float *__restrict__ part, int N, int di, int G) {
    GT_PDL_ENTRY();
    __shared__ float sp[GNF_WARPS][GNF_MAX_GS];
    int warp = threadIdx.x / GT_WARP, lane = threadIdx.x % GT_WARP, g = blockIdx.y;
    int gs = di / G, c = g * gs + lane * VEC;
    bool has = lane * VEC < gs;
    float wv[VEC], acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++)
        wv[i] = 0.0f, acc[i] = 0.0f;
    if (has) ldv<VEC>(wv, w + c);
    int t0 = (int)blockIdx.x * GNF_TOKENS;
    for (int q0 = 0; q0 < GNF_TOKENS / GNF_WARPS; q0 += GNF_ROWS) {
        uint4 ry[GNF_ROWS], rz[GNF_ROWS], rd[GNF_ROWS];
        float r[GNF_ROWS];
#pragma unroll
        for (int u = 0; u < GNF_ROWS; u++) {
            int n = t0 + warp + (q0 + u) * GNF_WARPS;
            bool live = n < N && has;
            uint4 zero = make_uint4(0u, 0u, 0u, 0u);
            ry[u] = live ? ld_raw<VEC>(y + (size_t)n * di + c) : zero;
            rz[u] = live ? ld_raw<VEC>(z + (size_t)n * ldz + c) : zero;
            rd[u] = live ? ld_raw<VEC>(dout + (size_t)n * di + c) : zero;
            r[u] = n < N ? rstd[(size_t)n * G + g] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < GNF_ROWS; u++) {
            int n = t0 + warp + (q0 + u) * GNF_WARPS;
            if (n >= N) break; /* the whole warp */
            float yv[VEC], zv[VEC], dv[VEC], dot = 0.0f;
            unpack_raw<VEC>(yv, ry[u]);
            unpack_raw<VEC>(zv, rz[u]);
            unpack_raw<VEC>(dv, rd[u]);
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                float gt = gate(yv[i], zv[i]);
                dot += dv[i] * wv[i] * gt;
                acc[i] += dv[i] * gt * r[u];
            }
            dot = warp_sum(dot);
            float k = dot / (float)gs * r[u] * r[u] * r[u];
            if (has)
                gn_grads<VEC>(dy + (size_t)n * di + c, dz + (size_t)n * lddz + c, yv, zv, dv, wv,
                              r[u], k);
        }
    }
#pragma unroll
    for (int i = 0; i < VEC; i++)
        if (has) sp[warp][lane * VEC + i] = acc[i];
    __syncthreads();
    for (int j = threadIdx.x; j < gs; j += blockDim.x) {
        float sum = 0.0f;
        for (int q = 0; q < GNF_WARPS; q++)
            sum += sp[q][j];
        part[(size_t)blockIdx.x * di + g * gs + j] = sum;
    }
}

/* dw (+)= the blocks' parts of k_gnorm_bwd_fused, in block order: a thread a channel */
__global__ void k_gnorm_dw_sum(float *dw, const float *__restrict__ part, int blocks, int di,
                               int accumulate) {
    GT_PDL_ENTRY();
    int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= di) return;
    float sum = 0.0f;
    for (int q = 0; q < blocks; q++)
        sum += part[(size_t)q * di + c];
    dw[c] = accumulate ? dw[c] + sum : sum;
}

/* 16-byte vectors need the group size and z's row stride in steps of 8 and aligned pointers */
static int gnorm_vec_ok(int gs, int ldz, const void *a, const void *b, const void *c,
                        const void *d) {
    return gs % VEC == 0 && ldz % VEC == 0 && al16_all(a, b, c, d);
}

static unsigned gnorm_blocks(size_t rows) {
    return (unsigned)((rows + GN_WARPS - 1) / GN_WARPS);
}

static void cuda_mamba_gated_norm_fwd(gt_backend *b, gt_stream *s, void *out, float *rstd,
                                      const void *y, const void *zxbcdt, const void *w, float eps,
                                      gt_mamba_shape sh) {
    if (b->planning || !shape_ok(b, "mamba_gated_norm_fwd", sh)) return;
    if (!(eps > 0)) {
        gt_backend_fail(b, GT_ERR_INVALID, "mamba_gated_norm_fwd: eps is %g; it must be > 0", eps);
        return;
    }
    int di = gt_mamba_inner(sh), in = gt_mamba_in(sh);
    size_t rows = (size_t)sh.B * sh.T * sh.G;
    int vec = gnorm_vec_ok(di / sh.G, in, out, y, zxbcdt, w);
    int one = di / sh.G / (vec ? VEC : 1) <= GT_WARP; /* a vector a lane holds the row */
    gt_launch(vec ? (one ? k_gnorm_fwd<VEC, 1> : k_gnorm_fwd<VEC, GN_HOLD>)
                  : (one ? k_gnorm_fwd<1, 1> : k_gnorm_fwd<1, GN_HOLD>),
              gnorm_blocks(rows), GN_WARPS * GT_WARP, 0, gt_cuda_ex(b, s), (bf16 *)out, rstd,
              (const bf16 *)y, (const bf16 *)zxbcdt, in, (const bf16 *)w, di, sh.G, rows, eps);
    GT_CUDA_LAUNCHED(b, "mamba_gated_norm_fwd");
}

static void cuda_mamba_gated_norm_bwd(gt_backend *b, gt_stream *s, void *dy, void *dzxbcdt,
                                      float *dw, const void *dout, const void *y,
                                      const void *zxbcdt, const void *w, const float *rstd,
                                      float *ws, gt_mamba_shape sh, int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_gated_norm_bwd", sh)) return;
    int di = gt_mamba_inner(sh), in = gt_mamba_in(sh), N = sh.B * sh.T;
    size_t rows = (size_t)N * sh.G;
    int vec = gnorm_vec_ok(di / sh.G, in, dout, y, zxbcdt, w) && al16_all(dy, dzxbcdt, dy, dy);
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    if (vec && di / sh.G <= GNF_MAX_GS && ws) { /* both gradients from one pass */
        int blocks = (N + GNF_TOKENS - 1) / GNF_TOKENS;
        gt_launch(k_gnorm_bwd_fused, dim3((unsigned)blocks, (unsigned)sh.G), GNF_WARPS * GT_WARP, 0,
                  ex, (bf16 *)dy, (bf16 *)dzxbcdt, in, (const bf16 *)dout, (const bf16 *)y,
                  (const bf16 *)zxbcdt, in, (const bf16 *)w, rstd, ws, N, di, sh.G);
        GT_CUDA_LAUNCHED(b, "mamba_gated_norm_bwd");
        gt_launch(k_gnorm_dw_sum, (unsigned)((di + MAMBA_THREADS - 1) / MAMBA_THREADS),
                  MAMBA_THREADS, 0, ex, dw, (const float *)ws, blocks, di, accumulate != 0);
        GT_CUDA_LAUNCHED(b, "mamba_gated_norm_bwd (weight)");
        return;
    }
    dim3 grid((di + SLAB_CH - 1) / SLAB_CH, RED_CLUSTER);
    gt_launch(vec ? k_gnorm_bwd_weight<VEC> : k_gnorm_bwd_weight<1>, grid, RED_THREADS, 0, ex, dw,
              (const bf16 *)dout, (const bf16 *)y, (const bf16 *)zxbcdt, in, rstd, N, di, sh.G,
              accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_gated_norm_bwd (weight)");
    gt_launch(vec ? k_gnorm_bwd_data<VEC> : k_gnorm_bwd_data<1>, gnorm_blocks(rows),
              GN_WARPS * GT_WARP, 0, ex, (bf16 *)dy, (bf16 *)dzxbcdt, in, (const bf16 *)dout,
              (const bf16 *)y, (const bf16 *)zxbcdt, in, (const bf16 *)w, rstd, di, sh.G, rows);
    GT_CUDA_LAUNCHED(b, "mamba_gated_norm_bwd (data)");
}

extern "C" void gt_cuda_register_mamba_ops(gt_backend_ops *ops) {
    gt_cuda_register_mamba_conv_ops(ops);
    ops->mamba_ssd_fwd = cuda_mamba_ssd_fwd;
    ops->mamba_ssd_bwd = cuda_mamba_ssd_bwd;
    ops->mamba_gated_norm_fwd = cuda_mamba_gated_norm_fwd;
    ops->mamba_gated_norm_bwd = cuda_mamba_gated_norm_bwd;
}
