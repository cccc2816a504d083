/* Dense elementwise and row kernels of the CUDA backend: dtype conversion, embedding (with a
 * sort-based deterministic backward), RMSNorm (deterministic dw through per-block partials),
 * add, dropout, SwiGLU, the dbias column sums. bf16 I/O, fp32 math; 16-byte vector kernels
 * where sizes and alignment allow. The norms and SwiGLU, forward and backward, can also fold
 * their output's amax in for the fp8 cast that reads it next (rmsnorm_fwd_amax,
 * swiglu_fwd_amax, rmsnorm_bwd_part_amax, swiglu_bwd_amax). Cross entropy and the loss sum are
 * in k_loss.cu. */
#include <string.h>

#include <cub/cub.cuh>

#include "backend/cuda/cuda_common.cuh"
#include "core/philox.h"

#define DENSE_THREADS 256
#define RMS_MAX_COLS 32   /* columns per thread: d <= 256 * 32 */
#define DBIAS_ROWS 64     /* rows per partial of the dbias column sums */
#define RMS_BWD_V_WARPS 4 /* warps per block of the vector rmsnorm backward */
#define COLSUM_WARPS 32   /* warps per block of k_colsum_many */
#define RMS_VEC_MAX_K 8   /* vector rmsnorm kernels: d = 256 * K, K <= 8 */

/* ---- conversion ---- */

__global__ void k_to_float(float *dst, const bf16 *src, size_t n) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, n) dst[i] = ldf(src + i);
}
__global__ void k_from_float(bf16 *dst, const float *src, size_t n) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, n) dst[i] = tobf(src[i]);
}

static void cuda_to_float(gt_backend *b, gt_stream *s, float *dst, const void *src, size_t n) {
    if (b->planning || n == 0) return;
    gt_launch(k_to_float, gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s), dst,
              (const bf16 *)src, n);
    GT_CUDA_LAUNCHED(b, "to_float");
}
static void cuda_from_float(gt_backend *b, gt_stream *s, void *dst, const float *src, size_t n) {
    if (b->planning || n == 0) return;
    gt_launch(k_from_float, gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s),
              (bf16 *)dst, src, n);
    GT_CUDA_LAUNCHED(b, "from_float");
}

/* ---- dbias: column sums in two fixed-order passes ---- */

__global__ void k_colsum_partial(float *part, const bf16 *x, int M, int N) {
    GT_PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r0 = blockIdx.y * DBIAS_ROWS;
    if (c >= N) return;
    int r1 = min(M, r0 + DBIAS_ROWS);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++)
        acc += ldf(x + (size_t)r * N + c);
    part[(size_t)blockIdx.y * N + c] = acc;
}
__global__ void k_colsum_final(float *out, const float *part, int parts, int N, int accumulate) {
    GT_PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float acc = 0.0f;
    for (int p = 0; p < parts; p++)
        acc += part[(size_t)p * N + c];
    out[c] = (accumulate ? out[c] : 0.0f) + acc;
}

extern "C" void gt_cuda_dbias(gt_backend *b, gt_stream *s, float *dbias, const void *dout, int M,
                              int N, int accumulate) {
    int parts = (M + DBIAS_ROWS - 1) / DBIAS_ROWS;
    float *part = (float *)gt_cuda_scratch(b, GT_SCRATCH_DBIAS, (size_t)parts * N * sizeof(float),
                                           "matmul dbias");
    if (!part || M <= 0 || N <= 0) return;
    dim3 g1((N + DENSE_THREADS - 1) / DENSE_THREADS, parts);
    gt_launch(k_colsum_partial, g1, DENSE_THREADS, 0, gt_cuda_ex(b, s), part, (const bf16 *)dout, M,
              N);
    gt_launch(k_colsum_final, (N + DENSE_THREADS - 1) / DENSE_THREADS, DENSE_THREADS, 0,
              gt_cuda_ex(b, s), dbias, part, parts, N, accumulate);
    GT_CUDA_LAUNCHED(b, "matmul dbias");
}

/* ---- embedding ---- */

__global__ void k_embedding_fwd(bf16 *out, const int32_t *tokens, const bf16 *wte, int N, int d) {
    GT_PDL_ENTRY();
    size_t total = (size_t)N * d;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / d, c = i % d;
        out[i] = wte[(size_t)tokens[n] * d + c];
    }
}

/* Before the sort: pos[i] = i for i < N; with marks (dirty, V bytes), also the marked rows of
 * dwte zeroed and their marks cleared, thread t looking at row t and each warp zeroing the
 * marked rows among its 32 together. One thread per max(N, V). */
__global__ void k_embedding_prep(int32_t *pos, int N, float *dwte, uint8_t *dirty, int V, int d) {
    GT_PDL_ENTRY();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)N) pos[t] = (int32_t)t;
    if (!dirty) return;
    int lane = threadIdx.x & 31;
    bool mine = t < (size_t)V && dirty[t];
    unsigned marked = __ballot_sync(0xffffffffu, mine);
    size_t first = t - lane;
    bool vec = d % 4 == 0 && ((uintptr_t)dwte & 15u) == 0;
    while (marked) {
        int j = __ffs(marked) - 1;
        marked &= marked - 1;
        float *row = dwte + (first + j) * (size_t)d;
        if (vec)
            for (int c = 4 * lane; c < d; c += 128)
                *(float4 *)(row + c) = make_float4(0.f, 0.f, 0.f, 0.f);
        else
            for (int c = lane; c < d; c += 32)
                row[c] = 0.0f;
    }
    if (mine) dirty[t] = 0;
}

/* One warp per sorted position (tok: the tokens sorted, pos: their positions, in position
 * order among equal tokens); the warp at the head of a run of equal tokens sums the run's rows
 * in position order, adds them to dwte[token] and marks the row in dirty (when given). */
__global__ void k_embedding_accum(float *dwte, uint8_t *dirty, const bf16 *dout,
                                  const uint32_t *toks, const int32_t *pos, int N, int V, int d) {
    GT_PDL_ENTRY();
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= N) return;
    uint32_t tok = toks[w];
    if (w > 0 && toks[w - 1] == tok) return;
    if (tok >= (uint32_t)V) return;
    if (dirty && lane == 0) dirty[tok] = 1;
    int end = w + 1;
    while (end < N && toks[end] == tok)
        end++;
    if (d % 8 == 0 && ((uintptr_t)dout & 15u) == 0 && ((uintptr_t)dwte & 15u) == 0) {
        /* 16-byte loads: eight columns per lane, the same per-column order of additions */
        for (int c = 8 * lane; c < d; c += 256) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int r = w; r < end; r++) {
                float v[8];
                ld8(v, dout + (size_t)pos[r] * d + c);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[j] += v[j];
            }
            float4 *o = (float4 *)(dwte + (size_t)tok * d + c);
            float4 lo = o[0], hi = o[1];
            o[0] = make_float4(lo.x + acc[0], lo.y + acc[1], lo.z + acc[2], lo.w + acc[3]);
            o[1] = make_float4(hi.x + acc[4], hi.y + acc[5], hi.z + acc[6], hi.w + acc[7]);
        }
        return;
    }
    for (int c = lane; c < d; c += 32) {
        float acc = 0.0f;
        for (int r = w; r < end; r++) {
            acc += ldf(dout + (size_t)pos[r] * d + c);
        }
        dwte[(size_t)tok * d + c] += acc;
    }
}

__global__ void k_embedding_fwd8(bf16 *out, const int32_t *tokens, const bf16 *wte, int N, int d) {
    GT_PDL_ENTRY();
    size_t d8 = (size_t)d / 8, total = (size_t)N * d8;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / d8, c = i % d8;
        *(uint4 *)(out + 8 * i) = *(const uint4 *)(wte + (size_t)tokens[n] * d + 8 * c);
    }
}

static void cuda_embedding_fwd(gt_backend *b, gt_stream *s, void *out, const int32_t *tokens,
                               const void *wte, int N, int d) {
    if (b->planning || N <= 0 || d <= 0) return;
    size_t total = (size_t)N * d;
    if (d % 8 == 0 && al16(out) && al16(wte)) {
        gt_launch(k_embedding_fwd8, gt_grid(total / 8, DENSE_THREADS), DENSE_THREADS, 0,
                  gt_cuda_ex(b, s), (bf16 *)out, tokens, (const bf16 *)wte, N, d);
        GT_CUDA_LAUNCHED(b, "embedding_fwd");
        return;
    }
    gt_launch(k_embedding_fwd, gt_grid(total, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s),
              (bf16 *)out, tokens, (const bf16 *)wte, N, d);
    GT_CUDA_LAUNCHED(b, "embedding_fwd");
}

/* The embedding gradient: the positions sorted by token (CUB's radix sort over the token's
 * bits, stable, so equal tokens keep position order and the sums are deterministic), then one
 * warp per run of equal tokens. Scratch: sorted tokens, positions in and out, CUB's storage.
 * Overwriting with marks zeroes only the marked rows (inside the prep kernel); without marks,
 * the whole gradient. */
static void cuda_embedding_bwd(gt_backend *b, gt_stream *s, float *dwte, uint8_t *dirty,
                               const void *dout, const int32_t *tokens, int N, int V, int d,
                               int overwrite) {
    if (N < 0 || d <= 0 || V <= 0) {
        gt_backend_fail(b, GT_ERR_INVALID, "embedding_bwd: bad shape N=%d V=%d d=%d", N, V, d);
        return;
    }
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    if (overwrite && !dirty && !b->planning)
        GT_CUDA_OP(b, cudaMemsetAsync(dwte, 0, (size_t)V * d * sizeof(float), cs.cs));
    if (N == 0 && !(overwrite && dirty)) return;
    int bits = 1;
    while (bits < 31 && ((unsigned)(V - 1) >> bits) != 0)
        bits++;
    size_t cub_bytes = 0;
    /* sizes only: nothing runs with a NULL storage pointer */
    cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                    (const int32_t *)NULL, (int32_t *)NULL, N, 0, bits, cs.cs);
    size_t arr = ((size_t)N * 4 + 255) & ~(size_t)255;
    unsigned char *sc =
        (unsigned char *)gt_cuda_scratch(b, GT_SCRATCH_EMBED, 3 * arr + cub_bytes, "embedding_bwd");
    if (!sc) return;
    uint32_t *toks = (uint32_t *)sc;
    int32_t *pos_in = (int32_t *)(sc + arr), *pos = (int32_t *)(sc + 2 * arr);
    size_t prep = (size_t)N > (size_t)V ? (size_t)N : (size_t)V;
    /* one thread per position and per row, no grid-stride loop: at most 2^31 / 256 blocks */
    unsigned prep_blocks = (unsigned)((prep + DENSE_THREADS - 1) / DENSE_THREADS);
    gt_launch(k_embedding_prep, prep_blocks, DENSE_THREADS, 0, cs, pos_in, N, dwte,
              overwrite ? dirty : (uint8_t *)NULL, V, d);
    if (N == 0) {
        GT_CUDA_LAUNCHED(b, "embedding_bwd");
        return;
    }
    /* token ids are in [0, V) (the data loaders check shards against the vocabulary): their
     * bits as unsigned */
    GT_CUDA_OP(b, cub::DeviceRadixSort::SortPairs(sc + 3 * arr, cub_bytes, (const uint32_t *)tokens,
                                                  toks, pos_in, pos, N, 0, bits, cs.cs));
    int warps_per_block = DENSE_THREADS / 32;
    gt_launch(k_embedding_accum, (N + warps_per_block - 1) / warps_per_block, DENSE_THREADS, 0, cs,
              dwte, dirty, (const bf16 *)dout, toks, pos, N, V, d);
    GT_CUDA_LAUNCHED(b, "embedding_bwd");
}

/* ---- rmsnorm ---- */

/* One warp per row. amax (or NULL): the output's amax folded in (rmsnorm_fwd_amax), so every
 * thread reaches the block's fold, rows past N included. */
__global__ void k_rmsnorm_fwd(bf16 *out, float *rstd, const bf16 *inp, const bf16 *w, int N, int d,
                              float eps, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[DENSE_THREADS / GT_WARP];
    int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    unsigned m = 0;
    if (row < N) {
        const bf16 *x = inp + (size_t)row * d;
        float ss = 0.0f;
        for (int c = lane; c < d; c += 32) {
            float v = ldf(x + c);
            ss += v * v;
        }
        ss = warp_sum(ss);
        float r = rsqrtf(ss / (float)d + eps);
        bf16 *o = out + (size_t)row * d;
        for (int c = lane; c < d; c += 32) {
            bf16 v = tobf(ldf(x + c) * r * ldf(w + c));
            o[c] = v;
            if (amax) {
                unsigned b = gt_abs_bits_bf16(v);
                m = b > m ? b : m;
            }
        }
        if (lane == 0) rstd[row] = r;
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}

/* Block = `rows` consecutive rows, processed in order; each thread owns the columns
 * tid + k*blockDim, so its dw partial is summed in row order without atomics. */
template <int COLS>
__global__ void k_rmsnorm_bwd(bf16 *dinp, const bf16 *din, float *dw_part, const bf16 *dout,
                              const bf16 *inp, const bf16 *w, const float *rstd, int N, int d,
                              int rows, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ float sh[32];
    __shared__ unsigned shm[DENSE_THREADS / GT_WARP];
    unsigned m = 0;
    float dwp[COLS], wv[COLS];
#pragma unroll
    for (int k = 0; k < COLS; k++) {
        int c = threadIdx.x + k * blockDim.x;
        dwp[k] = 0.0f;
        wv[k] = c < d ? ldf(w + c) : 0.0f;
    }
    int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    for (int r = r0; r < r1; r++) {
        const bf16 *x = inp + (size_t)r * d, *dy = dout + (size_t)r * d;
        float rs = rstd[r];
        float xv[COLS], gv[COLS];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < COLS; k++) {
            int c = threadIdx.x + k * blockDim.x;
            xv[k] = c < d ? ldf(x + c) : 0.0f;
            gv[k] = c < d ? ldf(dy + c) : 0.0f;
            dot += gv[k] * wv[k] * xv[k];
        }
        dot = block_sum(dot, sh);
        float coef = rs * rs * rs * dot / (float)d;
        bf16 *dx = dinp + (size_t)r * d;
        const bf16 *dn = din ? din + (size_t)r * d : NULL;
#pragma unroll
        for (int k = 0; k < COLS; k++) {
            int c = threadIdx.x + k * blockDim.x;
            if (c < d) {
                float g = rs * wv[k] * gv[k] - coef * xv[k];
                bf16 v = tobf((dn ? ldf(dn + c) : 0.0f) + g);
                dx[c] = v;
                dwp[k] += gv[k] * xv[k] * rs;
                if (amax) {
                    unsigned bits = gt_abs_bits_bf16(v);
                    m = bits > m ? bits : m;
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < COLS; k++) {
        int c = threadIdx.x + k * blockDim.x;
        if (c < d) dw_part[(size_t)blockIdx.x * d + c] = dwp[k];
    }
    if (amax) gt_block_fold_amax(amax, m, shm);
}

/* Vector versions for d % 256 == 0 (K = d / 256 chunks of 8 columns per lane): one warp per
 * row, 16-byte loads. The backward's warp owns consecutive rows and keeps its dw partial
 * summed in row order; partials are then reduced per column. */
template <int K>
__global__ void k_rmsnorm_fwd_v(bf16 *out, float *rstd, const bf16 *inp, const bf16 *w, int N,
                                float eps, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[DENSE_THREADS / GT_WARP];
    constexpr int d = 256 * K;
    int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    unsigned m = 0;
    if (row < N) {
        const bf16 *x = inp + (size_t)row * d;
        float xv[K][8], ss = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            ld8(xv[k], x + 256 * k + 8 * lane);
#pragma unroll
            for (int j = 0; j < 8; j++)
                ss += xv[k][j] * xv[k][j];
        }
        ss = warp_sum(ss);
        float r = rsqrtf(ss / (float)d + eps);
#pragma unroll
        for (int k = 0; k < K; k++) {
            float wv[8];
            ld8(wv, w + 256 * k + 8 * lane);
#pragma unroll
            for (int j = 0; j < 8; j++)
                xv[k][j] *= r * wv[j];
            m = st8_fold(out + (size_t)row * d + 256 * k + 8 * lane, xv[k], m, amax != NULL);
        }
        if (lane == 0) rstd[row] = r;
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}

/* One warp per row, rpw consecutive rows per warp (ceil(N / 2048): 1 up to N = 2048, 4 at
 * N = 8192), RMS_BWD_V_WARPS warps a block, gt_rmsnorm_parts(N) blocks.
 * A row's x, dy and dinp are loaded together, before the row's reduction, and kept in
 * registers as packed bf16, so each row waits on memory once (reloading them after the
 * reduction, with dinp's first load there, made the kernel latency-bound: 74 us a call at
 * llama1b's d = 2048 against 33 us of memory time). The weight stays in L1 and is read as
 * needed. Each warp sums its dw partial in row order in shared memory; the block then adds
 * its warps' partials in warp order and writes one partial row. */
template <int K>
__global__ void __launch_bounds__(RMS_BWD_V_WARPS * 32)
    k_rmsnorm_bwd_v(bf16 *dinp, const bf16 *din, float *dw_part, const bf16 *dout, const bf16 *inp,
                    const bf16 *w, const float *rstd, int N, int rpw, unsigned *amax) {
    GT_PDL_ENTRY();
    constexpr int d = 256 * K;
    extern __shared__ float sdw[]; /* [RMS_BWD_V_WARPS][d] */
    __shared__ unsigned shm[RMS_BWD_V_WARPS];
    unsigned m = 0;
    int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *mine = sdw + wid * d;
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            mine[256 * k + 8 * lane + j] = 0.0f;
    int r0 = (blockIdx.x * RMS_BWD_V_WARPS + wid) * rpw, r1 = min(N, r0 + rpw);
    for (int r = r0; r < r1; r++) {
        const bf16 *x = inp + (size_t)r * d, *dy = dout + (size_t)r * d;
        bf16 *dx = dinp + (size_t)r * d;
        const bf16 *dn = din ? din + (size_t)r * d : NULL;
        uint4 xp[K], gp[K], dp[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = 256 * k + 8 * lane;
            xp[k] = *(const uint4 *)(x + c);
            gp[k] = *(const uint4 *)(dy + c);
            dp[k] = dn ? *(const uint4 *)(dn + c) : make_uint4(0, 0, 0, 0);
        }
        float rs = rstd[r], dot = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            float xv[8], gv[8], wv[8];
            unpack8(xv, xp[k]);
            unpack8(gv, gp[k]);
            ld8(wv, w + 256 * k + 8 * lane);
#pragma unroll
            for (int j = 0; j < 8; j++)
                dot += gv[j] * wv[j] * xv[j];
        }
        dot = warp_sum(dot);
        float coef = rs * rs * rs * dot / (float)d;
#pragma unroll
        for (int k = 0; k < K; k++) {
            int c = 256 * k + 8 * lane;
            float xv[8], gv[8], wv[8], dv[8];
            unpack8(xv, xp[k]);
            unpack8(gv, gp[k]);
            unpack8(dv, dp[k]);
            ld8(wv, w + c);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                dv[j] += rs * wv[j] * gv[j] - coef * xv[j];
                mine[c + j] += gv[j] * xv[j] * rs;
            }
            m = st8_fold(dx + c, dv, m, amax != NULL);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float t = sdw[c];
#pragma unroll
        for (int q = 1; q < RMS_BWD_V_WARPS; q++)
            t += sdw[q * d + c];
        dw_part[(size_t)blockIdx.x * d + c] = t;
    }
    if (amax) gt_block_fold_amax(amax, m, shm);
}

/* rmsnorm_fwd, and with amax (rmsnorm_fwd_amax) the output's amax folded in as it is stored */
static void rmsnorm_fwd_run(gt_backend *b, gt_stream *s, void *out, float *rstd, const void *inp,
                            const void *w, int N, int d, float eps, unsigned *amax) {
    if (b->planning || N <= 0 || d <= 0) return;
    if (d % 256 == 0 && d <= 256 * RMS_VEC_MAX_K && al16(out) && al16(inp) && al16(w)) {
        int rows_per_block = DENSE_THREADS / 32, grid = (N + rows_per_block - 1) / rows_per_block;
        gt_cuda_exec cs = gt_cuda_ex(b, s);
        switch (d / 256) {
#define RMS_FWD_V(K)                                                                               \
    case K:                                                                                        \
        gt_launch(k_rmsnorm_fwd_v<K>, grid, DENSE_THREADS, 0, cs, (bf16 *)out, rstd,               \
                  (const bf16 *)inp, (const bf16 *)w, N, eps, amax);                               \
        break
            RMS_FWD_V(1);
            RMS_FWD_V(2);
            RMS_FWD_V(3);
            RMS_FWD_V(4);
            RMS_FWD_V(5);
            RMS_FWD_V(6);
            RMS_FWD_V(7);
            RMS_FWD_V(8);
#undef RMS_FWD_V
        default:
            break;
        }
        GT_CUDA_LAUNCHED(b, "rmsnorm_fwd");
        return;
    }
    int rows_per_block = DENSE_THREADS / 32;
    gt_launch(k_rmsnorm_fwd, (N + rows_per_block - 1) / rows_per_block, DENSE_THREADS, 0,
              gt_cuda_ex(b, s), (bf16 *)out, rstd, (const bf16 *)inp, (const bf16 *)w, N, d, eps,
              amax);
    GT_CUDA_LAUNCHED(b, "rmsnorm_fwd");
}

static void cuda_rmsnorm_fwd(gt_backend *b, gt_stream *s, void *out, float *rstd, const void *inp,
                             const void *w, int N, int d, float eps) {
    rmsnorm_fwd_run(b, s, out, rstd, inp, w, N, d, eps, NULL);
}

static void cuda_rmsnorm_fwd_amax(gt_backend *b, gt_stream *s, void *out, float *rstd,
                                  const void *inp, const void *w, int N, int d, float eps,
                                  uint32_t *amax_bits) {
    if (!amax_bits) {
        gt_backend_fail(b, GT_ERR_INVALID, "rmsnorm_fwd_amax: NULL amax");
        return;
    }
    rmsnorm_fwd_run(b, s, out, rstd, inp, w, N, d, eps, (unsigned *)amax_bits);
}

/* dinp = din (zeros if NULL) + the input gradient; part[gt_rmsnorm_parts(N)][d] = the weight
 * gradient's partial rows, block p summing rows [p * rows, (p + 1) * rows) with
 * rows = 4 * ceil(N / 2048): at most GT_RMSNORM_PARTS_MAX blocks (256 at N = 1024, 512 at
 * N = 8192). Both kernels read a row's x, dy and din into registers before the row's
 * reduction and write its gradient after it, from the same threads, so dinp may alias din or
 * inp. */
static void rmsnorm_bwd_parts(gt_cuda_exec cs, void *dinp, const void *din, float *part,
                              const void *dout, const void *inp, const void *w, const float *rstd,
                              int N, int d, unsigned *amax) {
    int blocks = gt_rmsnorm_parts(N);
    int rows = (N + blocks - 1) / blocks;
    rows = (rows + RMS_BWD_V_WARPS - 1) / RMS_BWD_V_WARPS * RMS_BWD_V_WARPS;
    if (d % 256 == 0 && d <= 256 * RMS_VEC_MAX_K && al16(dinp) && (!din || al16(din)) &&
        al16(dout) && al16(inp) && al16(w)) {
        int rpw = rows / RMS_BWD_V_WARPS; /* rows a warp */
        size_t shm = (size_t)RMS_BWD_V_WARPS * d * sizeof(float);
        switch (d / 256) {
#define RMS_BWD_V(K)                                                                               \
    case K:                                                                                        \
        gt_launch(k_rmsnorm_bwd_v<K>, blocks, RMS_BWD_V_WARPS * 32, shm, cs, (bf16 *)dinp,         \
                  (const bf16 *)din, part, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, \
                  rstd, N, rpw, amax);                                                             \
        break
            RMS_BWD_V(1);
            RMS_BWD_V(2);
            RMS_BWD_V(3);
            RMS_BWD_V(4);
            RMS_BWD_V(5);
            RMS_BWD_V(6);
            RMS_BWD_V(7);
            RMS_BWD_V(8);
#undef RMS_BWD_V
        default:
            break;
        }
        return;
    }
    int cols = (d + DENSE_THREADS - 1) / DENSE_THREADS; /* columns per thread */
#define RMS_BWD(C)                                                                                 \
    gt_launch(k_rmsnorm_bwd<C>, blocks, DENSE_THREADS, 0, cs, (bf16 *)dinp, (const bf16 *)din,     \
              part, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, rstd, N, d, rows,      \
              amax)
    if (cols <= 1)
        RMS_BWD(1);
    else if (cols <= 2)
        RMS_BWD(2);
    else if (cols <= 4)
        RMS_BWD(4);
    else if (cols <= 8)
        RMS_BWD(8);
    else if (cols <= 16)
        RMS_BWD(16);
    else
        RMS_BWD(RMS_MAX_COLS);
#undef RMS_BWD
}

static int rmsnorm_bwd_shape_ok(gt_backend *b, const char *op, int N, int d) {
    if (d > DENSE_THREADS * RMS_MAX_COLS) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED, "%s: d=%d exceeds the kernel's %d", op, d,
                        DENSE_THREADS * RMS_MAX_COLS);
        return 0;
    }
    return N > 0 && d > 0;
}

/* Every job's column sums in one launch, out[c] (+)= sum over p of part[p][c]: blockIdx.y is
 * the job and a block owns 32 columns. Warp w sums parts w, w + COLSUM_WARPS, ... in order,
 * then the warp sums are added in warp order. 32 warps a block: at d = 768 a job has only
 * 24 blocks, so the block must carry the memory parallelism. */
typedef struct colsum_jobs {
    gt_colsum_job j[GT_COLSUM_MAX_JOBS];
} colsum_jobs;

__global__ void __launch_bounds__(COLSUM_WARPS * 32)
    k_colsum_many(const __grid_constant__ colsum_jobs jobs) {
    GT_PDL_ENTRY();
    __shared__ float sh[COLSUM_WARPS][32];
    const gt_colsum_job *jb = &jobs.j[blockIdx.y];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, c = blockIdx.x * 32 + lane;
    if (blockIdx.x * 32 >= (unsigned)jb->d) return; /* the whole block: no barrier below */
    float acc = 0.0f;
    if (c < jb->d)
        for (int p = w; p < jb->parts; p += COLSUM_WARPS)
            acc += jb->part[(size_t)p * jb->d + c];
    sh[w][lane] = acc;
    __syncthreads();
    if (w == 0 && c < jb->d) {
        float t = 0.0f;
        for (int k = 0; k < COLSUM_WARPS; k++)
            t += sh[k][lane];
        jb->out[c] = (jb->accumulate ? jb->out[c] : 0.0f) + t;
    }
}

static void cuda_colsum_many(gt_backend *b, gt_stream *s, const gt_colsum_job *jobs, int n) {
    if (b->planning || n == 0) return;
    if (n < 0 || n > GT_COLSUM_MAX_JOBS) {
        gt_backend_fail(b, GT_ERR_INVALID, "colsum_many: %d jobs (at most %d)", n,
                        GT_COLSUM_MAX_JOBS);
        return;
    }
    colsum_jobs cj;
    memset(&cj, 0, sizeof cj);
    int dmax = 0;
    for (int i = 0; i < n; i++) {
        cj.j[i] = jobs[i];
        dmax = jobs[i].d > dmax ? jobs[i].d : dmax;
    }
    dim3 grid((unsigned)(dmax + 31) / 32, (unsigned)n);
    gt_launch(k_colsum_many, grid, COLSUM_WARPS * 32, 0, gt_cuda_ex(b, s), cj);
    GT_CUDA_LAUNCHED(b, "colsum_many");
}

static void cuda_rmsnorm_bwd(gt_backend *b, gt_stream *s, void *dinp, float *dw, const void *dout,
                             const void *inp, const void *w, const float *rstd, int N, int d,
                             int accumulate) {
    int parts = gt_rmsnorm_parts(N);
    float *part = (float *)gt_cuda_scratch(
        b, GT_SCRATCH_RMSNORM, (size_t)(parts > 0 ? parts : 1) * (d > 0 ? d : 1) * sizeof(float),
        "rmsnorm_bwd");
    if (!rmsnorm_bwd_shape_ok(b, "rmsnorm_bwd", N, d) || !part) return;
    rmsnorm_bwd_parts(gt_cuda_ex(b, s), dinp, dinp, part, dout, inp, w, rstd, N, d, NULL);
    GT_CUDA_LAUNCHED(b, "rmsnorm_bwd");
    gt_colsum_job job = {dw, part, parts, d, accumulate};
    cuda_colsum_many(b, s, &job, 1);
}

static void cuda_rmsnorm_bwd_part(gt_backend *b, gt_stream *s, void *dout_res, const void *din_res,
                                  float *part, const void *dout, const void *inp, const void *w,
                                  const float *rstd, int N, int d) {
    if (b->planning || !rmsnorm_bwd_shape_ok(b, "rmsnorm_bwd_part", N, d)) return;
    rmsnorm_bwd_parts(gt_cuda_ex(b, s), dout_res, din_res, part, dout, inp, w, rstd, N, d, NULL);
    GT_CUDA_LAUNCHED(b, "rmsnorm_bwd_part");
}

/* rmsnorm_bwd_part with dout_res's amax folded in as it is stored (rmsnorm_bwd_part_amax) */
static void cuda_rmsnorm_bwd_part_amax(gt_backend *b, gt_stream *s, void *dout_res,
                                       const void *din_res, float *part, const void *dout,
                                       const void *inp, const void *w, const float *rstd, int N,
                                       int d, uint32_t *amax_bits) {
    if (!amax_bits) {
        gt_backend_fail(b, GT_ERR_INVALID, "rmsnorm_bwd_part_amax: NULL amax");
        return;
    }
    if (b->planning || !rmsnorm_bwd_shape_ok(b, "rmsnorm_bwd_part_amax", N, d)) return;
    rmsnorm_bwd_parts(gt_cuda_ex(b, s), dout_res, din_res, part, dout, inp, w, rstd, N, d,
                      (unsigned *)amax_bits);
    GT_CUDA_LAUNCHED(b, "rmsnorm_bwd_part_amax");
}

/* ---- add, dropout, swiglu ---- */

__global__ void k_add(bf16 *out, const bf16 *a, const bf16 *x, size_t n) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, n) out[i] = tobf(ldf(a + i) + ldf(x + i));
}

__global__ void k_add8(bf16 *out, const bf16 *a, const bf16 *x, size_t n8) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, n8) {
        float fa[8], fx[8];
        ld8(fa, a + 8 * i);
        ld8(fx, x + 8 * i);
#pragma unroll
        for (int k = 0; k < 8; k++)
            fa[k] += fx[k];
        st8(out + 8 * i, fa);
    }
}

static void cuda_add(gt_backend *b, gt_stream *s, void *out, const void *a, const void *x,
                     size_t n) {
    if (b->planning || n == 0) return;
    if (n % 8 == 0 && al16(out) && al16(a) && al16(x)) {
        gt_launch(k_add8, gt_grid(n / 8, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s),
                  (bf16 *)out, (const bf16 *)a, (const bf16 *)x, n / 8);
        GT_CUDA_LAUNCHED(b, "add");
        return;
    }
    gt_launch(k_add, gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)out,
              (const bf16 *)a, (const bf16 *)x, n);
    GT_CUDA_LAUNCHED(b, "add");
}

__global__ void k_dropout(bf16 *out, const bf16 *in, size_t n, float p, uint64_t seed,
                          uint32_t site, const gt_step_state *st) {
    GT_PDL_ENTRY();
    uint32_t micro = (uint32_t)st->micro, step = (uint32_t)st->step;
    float scale = 1.0f / (1.0f - p);
    GT_GRID_STRIDE(i, n) {
        int keep = gt_dropout_keep(seed, site, micro, step, i, p);
        out[i] = tobf(keep ? ldf(in + i) * scale : 0.0f);
    }
}

static void dropout_run(gt_backend *b, gt_stream *s, const char *what, void *out, const void *in,
                        size_t n, float p, gt_rng_site site, const gt_step_state *st) {
    if (b->planning || n == 0) return;
    if (!(p >= 0.0f && p < 1.0f) || !st) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: p must be in [0, 1) with a step state, got %g",
                        what, (double)p);
        return;
    }
    if (p == 0.0f) {
        if (out != in)
            GT_CUDA_OP(
                b, cudaMemcpyAsync(out, in, n * 2, cudaMemcpyDeviceToDevice, gt_cuda_stream(s)));
        return;
    }
    gt_launch(k_dropout, gt_grid(n, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)out,
              (const bf16 *)in, n, p, site.seed, site.site, st);
    GT_CUDA_LAUNCHED(b, what);
}

static void cuda_dropout_fwd(gt_backend *b, gt_stream *s, void *out, const void *in, size_t n,
                             float p, gt_rng_site site, const gt_step_state *st) {
    dropout_run(b, s, "dropout_fwd", out, in, n, p, site, st);
}
static void cuda_dropout_bwd(gt_backend *b, gt_stream *s, void *dx, const void *dy, size_t n,
                             float p, gt_rng_site site, const gt_step_state *st) {
    dropout_run(b, s, "dropout_bwd", dx, dy, n, p, site, st);
}

/* sigmoid on the special-function units (exp2 and reciprocal approximations, a few ulp of
 * fp32: far below the bf16 rounding of every output). The IEEE expf and division cost about
 * 30 instructions an element, which made these memory-bound kernels issue-bound. */
static __device__ __forceinline__ float fast_sigmoid(float g) {
    return __fdividef(1.0f, 1.0f + __expf(-g));
}

/* amax (or NULL): the output's amax folded in, one atomic a block (swiglu_fwd_amax) */
__global__ void k_swiglu_fwd(bf16 *out, const bf16 *gu, int N, int f, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[DENSE_THREADS / GT_WARP];
    size_t total = (size_t)N * f;
    unsigned m = 0;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / f, c = i % f;
        float g = ldf(gu + n * 2 * f + c), u = ldf(gu + n * 2 * f + f + c);
        bf16 v = tobf(g * fast_sigmoid(g) * u);
        out[i] = v;
        if (amax) {
            unsigned b = gt_abs_bits_bf16(v);
            m = b > m ? b : m;
        }
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}
__global__ void k_swiglu_bwd(bf16 *dgu, const bf16 *dout, const bf16 *gu, int N, int f,
                             unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[DENSE_THREADS / GT_WARP];
    size_t total = (size_t)N * f;
    unsigned m = 0;
    GT_GRID_STRIDE(i, total) {
        size_t n = i / f, c = i % f;
        float g = ldf(gu + n * 2 * f + c), u = ldf(gu + n * 2 * f + f + c), dy = ldf(dout + i);
        float sg = fast_sigmoid(g);
        bf16 vg = tobf(dy * u * sg * (1.0f + g * (1.0f - sg))), vu = tobf(dy * g * sg);
        dgu[n * 2 * f + c] = vg;
        dgu[n * 2 * f + f + c] = vu;
        if (amax) {
            unsigned bg = gt_abs_bits_bf16(vg), bu = gt_abs_bits_bf16(vu);
            m = bg > m ? bg : m;
            m = bu > m ? bu : m;
        }
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}

/* Eight elements a thread; 32-bit indices (the launcher checks N * f / 8 < 2^31). */
__global__ void k_swiglu_fwd8(bf16 *out, const bf16 *gu, int N, int f, unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[DENSE_THREADS / GT_WARP];
    unsigned f8 = (unsigned)f / 8, total = (unsigned)N * f8, m = 0;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x) {
        unsigned n = i / f8, c = 8 * (i - n * f8);
        const bf16 *row = gu + (size_t)n * 2 * f + c;
        float g[8], u[8];
        ld8(g, row);
        ld8(u, row + f);
#pragma unroll
        for (int k = 0; k < 8; k++)
            g[k] = g[k] * fast_sigmoid(g[k]) * u[k];
        m = st8_fold(out + (size_t)n * f + c, g, m, amax != NULL);
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}
__global__ void k_swiglu_bwd8(bf16 *dgu, const bf16 *dout, const bf16 *gu, int N, int f,
                              unsigned *amax) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[DENSE_THREADS / GT_WARP];
    unsigned f8 = (unsigned)f / 8, total = (unsigned)N * f8, m = 0;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += gridDim.x * blockDim.x) {
        unsigned n = i / f8, c = 8 * (i - n * f8);
        size_t r = (size_t)n * 2 * f + c;
        float g[8], u[8], dy[8], dg[8], du[8];
        ld8(g, gu + r);
        ld8(u, gu + r + f);
        ld8(dy, dout + (size_t)n * f + c);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float sg = fast_sigmoid(g[k]);
            dg[k] = dy[k] * u[k] * sg * (1.0f + g[k] * (1.0f - sg));
            du[k] = dy[k] * g[k] * sg;
        }
        m = st8_fold(dgu + r, dg, m, amax != NULL);
        m = st8_fold(dgu + r + f, du, m, amax != NULL);
    }
    if (amax) gt_block_fold_amax(amax, m, sh);
}

/* swiglu_fwd, and with amax (swiglu_fwd_amax) the output's amax folded in as it is stored */
static void swiglu_fwd_run(gt_backend *b, gt_stream *s, void *out, const void *gu, int N, int f,
                           unsigned *amax) {
    if (b->planning || N <= 0 || f <= 0) return;
    size_t total = (size_t)N * f;
    if (f % 8 == 0 && total / 8 < (1u << 31) && al16(out) && al16(gu)) {
        gt_launch(k_swiglu_fwd8, gt_grid(total / 8, DENSE_THREADS), DENSE_THREADS, 0,
                  gt_cuda_ex(b, s), (bf16 *)out, (const bf16 *)gu, N, f, amax);
        GT_CUDA_LAUNCHED(b, "swiglu_fwd");
        return;
    }
    gt_launch(k_swiglu_fwd, gt_grid(total, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s),
              (bf16 *)out, (const bf16 *)gu, N, f, amax);
    GT_CUDA_LAUNCHED(b, "swiglu_fwd");
}

static void cuda_swiglu_fwd(gt_backend *b, gt_stream *s, void *out, const void *gu, int N, int f) {
    swiglu_fwd_run(b, s, out, gu, N, f, NULL);
}

static void cuda_swiglu_fwd_amax(gt_backend *b, gt_stream *s, void *out, const void *gu, int N,
                                 int f, uint32_t *amax_bits) {
    if (!amax_bits) {
        gt_backend_fail(b, GT_ERR_INVALID, "swiglu_fwd_amax: NULL amax");
        return;
    }
    swiglu_fwd_run(b, s, out, gu, N, f, (unsigned *)amax_bits);
}
/* swiglu_bwd, and with amax (swiglu_bwd_amax) dgu's amax folded in as it is stored */
static void swiglu_bwd_run(gt_backend *b, gt_stream *s, void *dgu, const void *dout, const void *gu,
                           int N, int f, unsigned *amax) {
    if (b->planning || N <= 0 || f <= 0) return;
    size_t total = (size_t)N * f;
    if (f % 8 == 0 && total / 8 < (1u << 31) && al16(dgu) && al16(dout) && al16(gu)) {
        gt_launch(k_swiglu_bwd8, gt_grid(total / 8, DENSE_THREADS), DENSE_THREADS, 0,
                  gt_cuda_ex(b, s), (bf16 *)dgu, (const bf16 *)dout, (const bf16 *)gu, N, f, amax);
        GT_CUDA_LAUNCHED(b, "swiglu_bwd");
        return;
    }
    gt_launch(k_swiglu_bwd, gt_grid(total, DENSE_THREADS), DENSE_THREADS, 0, gt_cuda_ex(b, s),
              (bf16 *)dgu, (const bf16 *)dout, (const bf16 *)gu, N, f, amax);
    GT_CUDA_LAUNCHED(b, "swiglu_bwd");
}

static void cuda_swiglu_bwd(gt_backend *b, gt_stream *s, void *dgu, const void *dout,
                            const void *gu, int N, int f) {
    swiglu_bwd_run(b, s, dgu, dout, gu, N, f, NULL);
}

static void cuda_swiglu_bwd_amax(gt_backend *b, gt_stream *s, void *dgu, const void *dout,
                                 const void *gu, int N, int f, uint32_t *amax_bits) {
    if (!amax_bits) {
        gt_backend_fail(b, GT_ERR_INVALID, "swiglu_bwd_amax: NULL amax");
        return;
    }
    swiglu_bwd_run(b, s, dgu, dout, gu, N, f, (unsigned *)amax_bits);
}

extern "C" void gt_cuda_register_dense_ops(gt_backend_ops *ops) {
    ops->to_float = cuda_to_float;
    ops->from_float = cuda_from_float;
    ops->embedding_fwd = cuda_embedding_fwd;
    ops->embedding_bwd = cuda_embedding_bwd;
    ops->rmsnorm_fwd = cuda_rmsnorm_fwd;
    ops->rmsnorm_bwd = cuda_rmsnorm_bwd;
    ops->rmsnorm_bwd_part = cuda_rmsnorm_bwd_part;
    ops->colsum_many = cuda_colsum_many;
    ops->add = cuda_add;
    ops->dropout_fwd = cuda_dropout_fwd;
    ops->dropout_bwd = cuda_dropout_bwd;
    ops->swiglu_fwd = cuda_swiglu_fwd;
    ops->swiglu_bwd = cuda_swiglu_bwd;
    /* the producers of fp8 casts' inputs, with the cast's amax (backend.h, FP8 section) */
    ops->rmsnorm_fwd_amax = cuda_rmsnorm_fwd_amax;
    ops->swiglu_fwd_amax = cuda_swiglu_fwd_amax;
    ops->rmsnorm_bwd_part_amax = cuda_rmsnorm_bwd_part_amax;
    ops->swiglu_bwd_amax = cuda_swiglu_bwd_amax;
}
