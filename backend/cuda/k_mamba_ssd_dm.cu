/* The second part of dB's and dC's first operands (k_mamba_ssd_gemm.cu), per (sequence b, group
 * g, chunk c): M[i][j] = sum over the group's heads h of dt_j exp(cs_i - cs_j) dy_i . x_j, for
 * j <= i < Lc (each head with its own dt, cs, dy and x), 0 elsewhere. Tensor cores make each
 * head's dy x^T of a 64 x 64 tile in registers, the decay and dt weight it there, the heads'
 * terms are summed in head order, and the sum is rounded to bf16 once and written into both
 * operands: dC's (m_dc) rows i at columns j, dB's (m_db) rows j at columns i, rows of ldm. No fp32
 * dy x^T per head goes through memory.
 * The same terms times C_i . B_j are the chunk's own products' terms of each head's decay
 * gradient: W_ij = CB_ij dt_j exp(cs_i - cs_j) dy_i . x_j is y_i's term from x_j, and it holds
 * the decays of tokens j < k <= i, so the gradient by cs_k gains sum_j<k W_kj - sum_i>k W_ik.
 * Each W is formed once here, in fp32, and both sums are of the same W (into dda, per tile:
 * k_ck_chunk_bwd adds them up); as the difference of dy . y and x . dx, whose products round
 * their operands to bf16 each its own way, they would cancel only in part. */
#include "backend/cuda/mamba_ssd.cuh"

#define MS_TILE GT_MAMBA_SSD_DM_TILE /* rows i and columns j a block makes */
#define MS_KS 64                     /* p a shared slab holds: the hybrid's whole head */
/* a slab's row stride: 16 bytes past the row, so that ldmatrix's rows hit distinct banks */
#define MS_LD (MS_KS + 8)
#define MS_OLD (MS_TILE + 8) /* the staged result's row stride */
#define MS_THREADS 128       /* four warps, 16 rows i each */

/* The tile's sums of head h's W (the fragments w, a warp's 16 rows each, 0 where j >= i or
 * past the chunk) into dda: along each row i over the tile's j (each thread's columns, then its
 * quad's lanes) and down each column j over the tile's i (each thread's two rows, its column's
 * 8 lanes, then the 4 warps' in order through colw), fixed trees both. Every thread takes part
 * (the block's barrier). */
static __device__ __forceinline__ void ms_dda(const ck_args &a, const ck_at &x, float (*w)[4],
                                              float (*colw)[MS_TILE], int i0, int j0, int h) {
    int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    size_t zh = ((size_t)x.b * a.H + h) * a.nc + x.c;
    float *row = a.dda + ((zh * 2) * a.nt + j0 / MS_TILE) * a.L;
    float *col = a.dda + ((zh * 2 + 1) * a.nt + i0 / MS_TILE) * a.L;
    float rs[2] = {0.0f, 0.0f}, cs[8][2];
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            rs[0] += w[nb][e], rs[1] += w[nb][2 + e];
            cs[nb][e] = w[nb][e] + w[nb][2 + e];
        }
#pragma unroll
    for (int o = 1; o < 4; o *= 2)
        rs[0] += __shfl_xor_sync(0xffffffffu, rs[0], o),
            rs[1] += __shfl_xor_sync(0xffffffffu, rs[1], o);
#pragma unroll
    for (int o = 4; o < 32; o *= 2)
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                cs[nb][e] += __shfl_xor_sync(0xffffffffu, cs[nb][e], o);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int i = i0 + warp * 16 + g + half * 8;
        if (t == 0 && i < x.Lc) row[i] = rs[half];
    }
    if (g == 0)
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                colw[warp][nb * 8 + 2 * t + e] = cs[nb][e];
    __syncthreads();
    int j = j0 + tid;
    if (tid < MS_TILE && j < x.Lc)
        col[j] = colw[0][tid] + colw[1][tid] + colw[2][tid] + colw[3][tid];
}

/* Block (z, ti, tj): chunk z of (b, g) as ck_at_make<CK_DC> numbers it, rows i0 = 64 ti and
 * columns j0 = 64 tj of its M. Its stages, (head, slab of p) in order, go through two shared
 * buffers: the next stage's copies (cp.async) are in flight while the tensor cores take the
 * current one.
 * vec_in: dy's and x's rows and head slices lie on 16 bytes (copies of 8); vec_out: so do the
 * operands' rows of M (the chunk a whole number of 8 rows: stores of 8). */
__global__ void __launch_bounds__(MS_THREADS) k_ck_msum(ck_args a, int vec_in, int vec_out) {
    GT_PDL_ENTRY();
    /* [stage buffer][dy, x]; after the last stage, M and M^T are staged in buffer 0 */
    __shared__ __align__(16) bf16 buf[2][2][MS_TILE][MS_LD];
    static_assert(MS_OLD == MS_LD, "M's staging reuses a slab's rows");
    bf16(*so)[MS_OLD] = buf[0][0], (*sot)[MS_OLD] = buf[0][1];
    __shared__ float csi[MS_TILE], csj[MS_TILE], dtj[MS_TILE];
    __shared__ float colw[MS_THREADS / 32][MS_TILE]; /* W's column sums per warp (ms_dda) */
    static_assert(MS_THREADS / 32 == 4, "ms_dda sums four warps' column sums");
    ck_at x = ck_at_make<CK_DC>(a, blockIdx.x);
    int i0 = (int)blockIdx.y * MS_TILE, j0 = (int)blockIdx.z * MS_TILE;
    int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    float sum[8][4] = {}, acc[8][4] = {};
    /* a tile with no j <= i inside the chunk is zero */
    bool live = j0 < i0 + MS_TILE && i0 < x.Lc;
    int nk = (a.P + MS_KS - 1) / MS_KS, stages = live ? a.H / a.G * nk : 0;
    /* stage st's slabs of dy (rows i) and x (rows j) into buffer bi */
    auto load = [&](int st, int bi) {
        int h = x.h + st / nk, p0 = st % nk * MS_KS;
        const bf16 zero = __float2bfloat16(0.0f);
        for (int e = tid; vec_in && e < MS_TILE * MS_KS / 8; e += MS_THREADS) {
            int r = e / (MS_KS / 8), k = e % (MS_KS / 8) * 8, p = p0 + k, i = i0 + r;
            int j = j0 + r;
            size_t hp = (size_t)h * a.P + p;
            bool oy = i < x.Lc && p < a.P, ox = j < x.Lc && p < a.P;
            gt_cp_async16(&buf[bi][0][r][k], oy ? a.dy + (x.n0 + i) * a.di + hp : a.dy, oy);
            gt_cp_async16(&buf[bi][1][r][k], ox ? a.xbc + (x.n0 + j) * a.C + hp : a.xbc, ox);
        }
        for (int e = tid; !vec_in && e < MS_TILE * MS_KS; e += MS_THREADS) {
            int r = e / MS_KS, k = e % MS_KS, p = p0 + k, i = i0 + r, j = j0 + r;
            size_t hp = (size_t)h * a.P + p;
            buf[bi][0][r][k] = i < x.Lc && p < a.P ? a.dy[(x.n0 + i) * a.di + hp] : zero;
            buf[bi][1][r][k] = j < x.Lc && p < a.P ? a.xbc[(x.n0 + j) * a.C + hp] : zero;
        }
        gt_cp_commit();
    };
    if (stages > 0) load(0, 0);
    /* C B^T at the thread's fragment positions, the group's for all its heads: read once, while
     * the first slabs are in flight (per head, its loads would stall each head's epilogue) */
    float cbv[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            int i = i0 + warp * 16 + g + h2 * 8, j = j0 + nb * 8 + 2 * t;
            float2 v = make_float2(0.0f, 0.0f);
            if (live && i < x.Lc && j < i) {
                const float *p = x.cb + (size_t)i * a.L + j;
                v = (a.L % 2 == 0) ? *(const float2 *)p
                                   : make_float2(p[0], j + 1 < i ? p[1] : 0.0f);
            }
            cbv[nb][2 * h2] = v.x, cbv[nb][2 * h2 + 1] = j + 1 < i ? v.y : 0.0f;
        }
    for (int st = 0; st < stages; st++) {
        int q = st / nk, bi = st & 1;
        __syncthreads();    /* the last stage's fragments and the last head's decays are read */
        if (st % nk == 0) { /* a new head: its decays, and its sum from zero */
            int h = x.h + q;
            size_t o = ((size_t)x.b * a.H + h) * a.T + (size_t)x.c * a.L;
            if (tid < MS_TILE) {
                int i = i0 + tid;
                csi[tid] = i < x.Lc ? a.cs[o + i] : 0.0f;
            } else {
                int r = tid - MS_TILE, j = j0 + r;
                csj[r] = j < x.Lc ? a.cs[o + j] : 0.0f;
                dtj[r] = j < x.Lc ? a.dt[o + j] : 0.0f;
            }
#pragma unroll
            for (int nb = 0; nb < 8; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[nb][e] = 0.0f;
        }
        if (st + 1 < stages) {
            load(st + 1, bi ^ 1);
            gt_cp_wait<1>(); /* this stage's copies have landed, the next one's may not */
        } else {
            gt_cp_wait<0>();
        }
        __syncthreads();
        bf16(*sy)[MS_LD] = buf[bi][0], (*sx)[MS_LD] = buf[bi][1];
#pragma unroll
        for (int kk = 0; kk < MS_KS; kk += 16) {
            uint32_t af[4];
            gt_ldsm_x4(af, &sy[warp * 16 + lane % 16][kk + (lane / 16) * 8]);
#pragma unroll
            for (int nb = 0; nb < 8; nb += 2) {
                /* matrices (nb, k 0-7), (nb, k 8-15), (nb+1, k 0-7), (nb+1, k 8-15) */
                uint32_t bfr[4];
                int mi = lane / 8;
                gt_ldsm_x4(bfr, &sx[nb * 8 + (mi / 2) * 8 + lane % 8][kk + (mi % 2) * 8]);
                gt_mma_16816(acc[nb], af, bfr);
                gt_mma_16816(acc[nb + 1], af, bfr + 2);
            }
        }
        if (st % nk != nk - 1) continue;
            /* the head's dy x^T is whole: weighted into the heads' sum, and times C B^T (W, in acc)
             * into its decay gradient's part */
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = warp * 16 + g + (e / 2) * 8, cc = nb * 8 + 2 * t + e % 2;
                int i = i0 + r, j = j0 + cc;
                float m = 0.0f;
                if (j <= i && i < x.Lc) {
                    m = acc[nb][e] * dtj[cc] * __expf(csi[r] - csj[cc]);
                    sum[nb][e] += m;
                }
                acc[nb][e] = j < i && i < x.Lc ? m * cbv[nb][e] : 0.0f;
            }
        ms_dda(a, x, acc, colw, i0, j0, x.h + q);
    }
    __syncthreads(); /* every warp is done with the slabs M is staged over */
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = warp * 16 + g + (e / 2) * 8, cc = nb * 8 + 2 * t + e % 2;
            so[r][cc] = sot[cc][r] = __float2bfloat16(sum[nb][e]);
        }
    __syncthreads();
    size_t base = (size_t)blockIdx.x * a.L, ld = (size_t)a.ldm;
    if (vec_out) { /* rows of 8 whole: a row's 8 stay inside the chunk together */
        for (int e = tid; e < MS_TILE * MS_TILE / 8; e += MS_THREADS) {
            int r = e / (MS_TILE / 8), c8 = e % (MS_TILE / 8) * 8;
            if (i0 + r < a.L && j0 + c8 < a.L)
                *(uint4 *)(a.m_dc + (base + i0 + r) * ld + j0 + c8) = *(const uint4 *)&so[r][c8];
            if (j0 + r < a.L && i0 + c8 < a.L)
                *(uint4 *)(a.m_db + (base + j0 + r) * ld + i0 + c8) = *(const uint4 *)&sot[r][c8];
        }
        return;
    }
    for (int e = tid; e < MS_TILE * MS_TILE; e += MS_THREADS) { /* dC's: along j */
        int r = e / MS_TILE, cc = e % MS_TILE, i = i0 + r, j = j0 + cc;
        if (i < a.L && j < a.L) a.m_dc[(base + i) * ld + j] = so[r][cc];
    }
    for (int e = tid; e < MS_TILE * MS_TILE; e += MS_THREADS) { /* dB's: along i */
        int cc = e / MS_TILE, r = e % MS_TILE, i = i0 + r, j = j0 + cc;
        if (i < a.L && j < a.L) a.m_db[(base + j) * ld + i] = sot[cc][r];
    }
}

void gt_ssd_msum(gt_backend *b, gt_cuda_exec ex, const ck_args &a, const char *what) {
    unsigned tiles = (unsigned)((a.L + MS_TILE - 1) / MS_TILE);
    dim3 grid((unsigned)(a.B * a.G * a.nc), tiles, tiles);
    uintptr_t in_at = (uintptr_t)a.dy | (uintptr_t)a.xbc,
              out_at = (uintptr_t)a.m_dc | (uintptr_t)a.m_db;
    int vec_in = a.P % 8 == 0 && a.di % 8 == 0 && a.C % 8 == 0 && in_at % 16 == 0;
    int vec_out = a.L % 8 == 0 && a.ldm % 8 == 0 && out_at % 16 == 0;
    gt_launch(k_ck_msum, grid, MS_THREADS, 0, ex, a, vec_in, vec_out);
    GT_CUDA_LAUNCHED(b, what);
}
