/* The second part of dB's and dC's first operands (k_mamba_ssd_gemm.cu), per (sequence b, group
 * g, chunk c): M[i][j] = sum over the group's heads h of dt_j exp(cs_i - cs_j) dy_i . x_j, for
 * j <= i < Lc (each head with its own dt, cs, dy and x), 0 elsewhere. Tensor cores make each
 * head's dy x^T of a 64 x 64 tile in registers, the decay and dt weight it there, the heads'
 * terms are summed in head order, and the sum is rounded to bf16 once and written into both
 * operands: dC's (m_dc) rows i at columns j, dB's (m_db) rows j at columns i, rows of ldm. No fp32
 * dy x^T per head goes through memory.
 * The same terms times C_i . B_j are the chunk's own products' part of each head's decay
 * gradient: W_ij = CB_ij dt_j exp(cs_i - cs_j) dy_i . x_j is y_i's term from x_j, and the decays
 * it holds are those of tokens j < k <= i, so the part at token k is the sum of W over i >= k,
 * j < k (mamba_ssm's stable form: each W is formed once, in fp32; the difference of y's and dx's
 * sums that give the same in exact arithmetic would cancel their rounding errors only in part).
 * Each block sums its tile's share per head (dda, k_ck_chunk_bwd adds the tiles). */
#include "backend/cuda/mamba_ssd.cuh"

#define MS_TILE GT_MAMBA_SSD_DM_TILE /* rows i and columns j a block makes */
#define MS_KS 64   /* p a shared slab holds: the hybrid's whole head */
/* a slab's row stride: 16 bytes past the row, so that ldmatrix's rows hit distinct banks */
#define MS_LD (MS_KS + 8)
#define MS_OLD (MS_TILE + 8) /* the staged result's row stride */
#define MS_THREADS 128       /* four warps, 16 rows i each */

/* The tile's part of head h's decay gradient from W (the fragments w, a warp's 16 rows each):
 * at token k, the sum of W over the tile's i >= k and j < k, for the k of (j0, i0 + MS_TILE)
 * inside the chunk (elsewhere it has none), into dda. Through the shared scratch sw (a free
 * stage buffer): prefix sums along each row, then suffix sums down each column, so that each
 * k's sum is one entry. Every thread takes part (the block's barriers). */
static __device__ __forceinline__ void ms_dda(const ck_args &a, const ck_at &x, float (*w)[4],
                                              float (*sw)[MS_TILE + 1], int i0, int j0, int h) {
    int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    __syncthreads(); /* every warp has read its fragments of the stage buffer */
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            sw[warp * 16 + g + (e / 2) * 8][nb * 8 + 2 * t + e % 2] = w[nb][e];
    __syncthreads();
    if (tid < MS_TILE) { /* along row tid: sw[r][c] = sum_j<=c W */
        float run = 0.0f;
        for (int c = 0; c < MS_TILE; c++)
            run += sw[tid][c], sw[tid][c] = run;
    }
    __syncthreads();
    if (tid < MS_TILE) { /* down column tid: sw[r][c] = sum_i>=r sum_j<=c W */
        float run = 0.0f;
        for (int r = MS_TILE - 1; r >= 0; r--)
            run += sw[r][tid], sw[r][tid] = run;
    }
    __syncthreads();
    int ti = i0 / MS_TILE, tj = j0 / MS_TILE, end = min(i0 + MS_TILE, x.Lc);
    size_t zh = ((size_t)x.b * a.H + h) * a.nc + x.c;
    float *out = a.dda + ((zh * a.nt + ti) * a.nt + tj) * a.L;
    for (int k = j0 + 1 + tid; k < end; k += MS_THREADS)
        out[k] = sw[max(k - i0, 0)][min(k - j0, MS_TILE) - 1];
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
    static_assert(MS_TILE * (MS_TILE + 1) * sizeof(float) <= sizeof(buf[0]),
                  "W's sums fit a stage buffer");
    bf16(*so)[MS_OLD] = buf[0][0], (*sot)[MS_OLD] = buf[0][1];
    __shared__ float csi[MS_TILE], csj[MS_TILE], dtj[MS_TILE];
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
                acc[nb][e] = j < i && i < x.Lc ? m * x.cb[(size_t)i * a.L + j] : 0.0f;
            }
        ms_dda(a, x, acc, (float(*)[MS_TILE + 1])&buf[bi][0][0][0], i0, j0, x.h + q);
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
