/* Mixture-of-experts kernels: router softmax/top-k, load-balancing loss and router backward,
 * a stable single-block permutation (per-expert warps scanning assignments in token order),
 * gather/combine and their backwards, and grouped GEMMs whose groups are read from DEVICE
 * offsets: the grid is sized for the worst case (ceil(R/64) + E row tiles) and each block
 * finds its expert and row tile from the offsets, so nothing is read back to the host.
 * Everything is deterministic: integer atomics only, fp32 sums in fixed order. The grouped
 * GEMMs here are the fp32 SIMT reference (runtime.cuda.moe_gemm=reference); the tensor-core
 * ones are k_moe_wgmma.cu and k_moe_mma.cu, picked by config/kernel_choice.h. */
#include "backend/cuda/moe_gemm.cuh"

#define MOE_THREADS 256
#define MOE_ROW_THREADS 128 /* row kernels: 8 columns a thread, d = 1024 in one pass */
#define ROUTER_MAX_Q 8      /* experts per lane: E <= 256 */
#define PERMUTE_THREADS 1024
#define PERMUTE_ITEMS 4 /* assignments per thread per round of k_permute_place */
#define GM_BM 64
#define GM_BN 64
#define GM_BK 16

/* ---- router ---- */

/* One warp per token: softmax, then k rounds of a warp argmax (ties: lower expert); the
 * weights renormalized over the k unless pre_softmax, times scale. */
__global__ void k_router_fwd(float *probs, int32_t *topk_idx, float *topk_w, const bf16 *logits,
                             int N, int E, int k, int pre_softmax, float scale) {
    GT_PDL_ENTRY();
    int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (n >= N) return;
    float pv[ROUTER_MAX_Q];
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < ROUTER_MAX_Q; q++) {
        int e = lane + 32 * q;
        pv[q] = e < E ? ldf(logits + (size_t)n * E + e) : -INFINITY;
        mx = fmaxf(mx, pv[q]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < ROUTER_MAX_Q; q++) {
        int e = lane + 32 * q;
        pv[q] = e < E ? expf(pv[q] - mx) : 0.0f;
        sum += pv[q];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int q = 0; q < ROUTER_MAX_Q; q++) {
        int e = lane + 32 * q;
        pv[q] /= sum;
        if (e < E) probs[(size_t)n * E + e] = pv[q];
    }
    float wsum = 0.0f, chosen_p = 0.0f;
    for (int j = 0; j < k; j++) {
        float best = -1.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int q = 0; q < ROUTER_MAX_Q; q++) {
            int e = lane + 32 * q;
            if (e < E && pv[q] > best) {
                best = pv[q];
                bi = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ob > best || (ob == best && oi < bi)) {
                best = ob;
                bi = oi;
            }
        }
#pragma unroll
        for (int q = 0; q < ROUTER_MAX_Q; q++)
            if (lane + 32 * q == bi) pv[q] = -2.0f; /* taken */
        wsum += best;
        if (lane == j) chosen_p = best;
        if (lane == 0) topk_idx[(size_t)n * k + j] = bi;
    }
    if (lane < k) topk_w[(size_t)n * k + lane] = scale * (pre_softmax ? chosen_p : chosen_p / wsum);
}

__global__ void k_router_counts(int32_t *counts, const int32_t *topk_idx, int NK, int E) {
    GT_PDL_ENTRY();
    extern __shared__ int hist[];
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        hist[e] = 0;
    __syncthreads();
    for (int a = threadIdx.x; a < NK; a += blockDim.x) {
        int e = topk_idx[a];
        if (e >= 0 && e < E) atomicAdd(&hist[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        counts[e] = hist[e];
}

static void cuda_moe_router_fwd(gt_backend *b, gt_stream *s, float *probs, int32_t *topk_idx,
                                float *topk_w, int32_t *counts, const void *logits, int N, int E,
                                int k, gt_router_mode mode) {
    if (E <= 0 || E > 32 * ROUTER_MAX_Q || k <= 0 || k > E || k > 32 || N < 0) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED,
                        "moe_router_fwd: E=%d k=%d is not supported (need 1 <= k <= min(E, 32) "
                        "and E <= %d)",
                        E, k, 32 * ROUTER_MAX_Q);
        return;
    }
    if (b->planning) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    int wpb = MOE_THREADS / 32;
    if (N > 0)
        gt_launch(k_router_fwd, (N + wpb - 1) / wpb, MOE_THREADS, 0, cs, probs, topk_idx, topk_w,
                  (const bf16 *)logits, N, E, k, mode.pre_softmax, mode.scale);
    gt_launch(k_router_counts, 1, 1024, E * sizeof(int), cs, counts, topk_idx, N * k, E);
    GT_CUDA_LAUNCHED(b, "moe_router_fwd");
}

/* Column means of probs in a fixed order: one block per expert. */
__global__ void k_col_mean(float *mean, const float *probs, int N, int E) {
    GT_PDL_ENTRY();
    __shared__ double sh[32];
    int e = blockIdx.x;
    double acc = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x)
        acc += probs[(size_t)n * E + e];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) mean[e] = (float)(acc / (double)N);
}

__global__ void k_aux_final(gt_step_state *st, const float *mean, const int32_t *counts, int N,
                            int E, int k, float coeff) {
    GT_PDL_ENTRY();
    float acc = 0.0f;
    for (int e = threadIdx.x; e < E; e += 32)
        acc += (float)counts[e] / (float)(N * k) * mean[e];
    acc = warp_sum(acc);
    if (threadIdx.x == 0) st->aux_loss += coeff * (float)E * acc;
}

static void cuda_moe_aux_loss(gt_backend *b, gt_stream *s, gt_step_state *st, const float *probs,
                              const int32_t *counts, int N, int E, int k, float coeff) {
    float *mean =
        (float *)gt_cuda_scratch(b, GT_SCRATCH_MOE, (size_t)(E > 0 ? E : 1) * 4, "moe_aux_loss");
    if (!mean || N <= 0 || E <= 0 || k <= 0) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    gt_launch(k_col_mean, E, MOE_THREADS, 0, cs, mean, probs, N, E);
    gt_launch(k_aux_final, 1, 32, 0, cs, st, mean, counts, N, E, k, coeff);
    GT_CUDA_LAUNCHED(b, "moe_aux_loss");
}

/* One warp per token: gradient through the scale c, renormalization (w_j = c p_j / S:
 * dp_j = (c dw_j - sum_i dw_i w_i) / S; pre-softmax w_j = c p_j: dp_j = c dw_j), the aux loss
 * and the softmax. */
__global__ void k_router_bwd(bf16 *dlogits, const float *dtopk_w, const float *probs,
                             const int32_t *topk_idx, const float *topk_w, const int32_t *counts,
                             int N, int E, int k, float aux_coeff, int pre_softmax, float scale) {
    GT_PDL_ENTRY();
    int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (n >= N) return;
    const float *p = probs + (size_t)n * E;
    const int32_t *idx = topk_idx + (size_t)n * k;
    const float *tw = topk_w + (size_t)n * k, *dtw = dtopk_w + (size_t)n * k;
    float S = 0.0f, dot = 0.0f;
    for (int j = 0; j < k; j++) {
        S += p[idx[j]];
        dot += dtw[j] * tw[j];
    }
    float pd = 0.0f; /* sum_e p[e] * dp[e] */
    for (int e = lane; e < E; e += 32) {
        float dp = aux_coeff != 0.0f
                       ? aux_coeff * (float)E * (float)counts[e] / ((float)N * (float)k) / (float)N
                       : 0.0f;
        for (int j = 0; j < k; j++)
            if (idx[j] == e) dp += pre_softmax ? scale * dtw[j] : (scale * dtw[j] - dot) / S;
        pd += p[e] * dp;
    }
    pd = warp_sum(pd);
    for (int e = lane; e < E; e += 32) {
        float dp = aux_coeff != 0.0f
                       ? aux_coeff * (float)E * (float)counts[e] / ((float)N * (float)k) / (float)N
                       : 0.0f;
        for (int j = 0; j < k; j++)
            if (idx[j] == e) dp += pre_softmax ? scale * dtw[j] : (scale * dtw[j] - dot) / S;
        dlogits[(size_t)n * E + e] = tobf(p[e] * (dp - pd));
    }
}

static void cuda_moe_router_bwd(gt_backend *b, gt_stream *s, void *dlogits, const float *dtopk_w,
                                const float *probs, const int32_t *topk_idx, const float *topk_w,
                                const int32_t *counts, int N, int E, int k, float aux_coeff,
                                gt_router_mode mode) {
    if (aux_coeff != 0.0f && !counts) {
        gt_backend_fail(b, GT_ERR_INVALID, "moe_router_bwd: aux_coeff needs counts");
        return;
    }
    if (b->planning || N <= 0 || E <= 0 || k <= 0) return;
    int wpb = MOE_THREADS / 32;
    gt_launch(k_router_bwd, (N + wpb - 1) / wpb, MOE_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)dlogits,
              dtopk_w, probs, topk_idx, topk_w, counts, N, E, k, aux_coeff, mode.pre_softmax,
              mode.scale);
    GT_CUDA_LAUNCHED(b, "moe_router_bwd");
}

/* ---- permutation: one block per expert, two passes ----
 * k_permute_count: block e counts the assignments routed to e (and marks out-of-range experts
 * as dropped). k_permute_place: block e starts at its offset (sum of the counts before it, or
 * e * capacity) and walks the assignments in token order, ranking its hits with warp ballots
 * and a block scan, so the placement is stable and identical on every run. */

__global__ void k_permute_count(int32_t *cnt, int32_t *token_slot, const int32_t *topk_idx, int NK,
                                int E) {
    GT_PDL_ENTRY();
    __shared__ int warp_cnt[PERMUTE_THREADS / 32];
    int e = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int c = 0;
    for (int a = threadIdx.x; a < NK; a += blockDim.x) {
        int x = topk_idx[a];
        c += x == e;
        if (e == 0 && (x < 0 || x >= E)) token_slot[a] = -1;
    }
    for (int o = 16; o > 0; o >>= 1)
        c += __shfl_xor_sync(0xffffffffu, c, o);
    if (lane == 0) warp_cnt[wid] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            t += warp_cnt[w];
        cnt[e] = t;
    }
}

__global__ void k_permute_place(int32_t *slot_token, int32_t *token_slot, int32_t *offsets,
                                const int32_t *cnt, const int32_t *topk_idx, int NK, int E,
                                int capacity) {
    GT_PDL_ENTRY();
    __shared__ int warp_hits[PERMUTE_THREADS / 32];
    __shared__ int warp_base[PERMUTE_THREADS / 32];
    __shared__ int base_sh, chunk_total;
    int e = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int nw = blockDim.x >> 5;
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int j = 0; j < e; j++)
            acc += cnt[j];
        base_sh = capacity > 0 ? e * capacity : acc;
        offsets[e] = base_sh;
        if (e == E - 1) offsets[E] = capacity > 0 ? E * capacity : acc + cnt[e];
    }
    __syncthreads();
    /* PERMUTE_ITEMS consecutive assignments a thread per round: a quarter of the rounds (and
     * of the barriers) of one each, the same ranks (assignment order) */
    int base = base_sh, run = 0;
    for (int start = 0; start < NK; start += blockDim.x * PERMUTE_ITEMS) {
        int a0 = start + threadIdx.x * PERMUTE_ITEMS, mine = 0;
        bool hit[PERMUTE_ITEMS];
#pragma unroll
        for (int u = 0; u < PERMUTE_ITEMS; u++) {
            hit[u] = a0 + u < NK && topk_idx[a0 + u] == e;
            mine += hit[u];
        }
        int incl = mine;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) warp_hits[wid] = incl;
        __syncthreads();
        if (wid == 0) {
            int v = lane < nw ? warp_hits[lane] : 0, winc = v;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int y = __shfl_up_sync(0xffffffffu, winc, o);
                if (lane >= o) winc += y;
            }
            if (lane < nw) warp_base[lane] = winc - v;
            if (lane == 31) chunk_total = winc;
        }
        __syncthreads();
        int rank = run + warp_base[wid] + incl - mine;
#pragma unroll
        for (int u = 0; u < PERMUTE_ITEMS; u++) {
            if (!hit[u]) continue;
            int a = a0 + u;
            if (capacity == 0 || rank < capacity) {
                int row = base + rank;
                token_slot[a] = row;
                slot_token[row] = a;
            } else {
                token_slot[a] = -1;
            }
            rank++;
        }
        run += chunk_total;
        __syncthreads(); /* warp_hits / chunk_total are rewritten by the next round */
    }
    if (capacity > 0)
        for (int r = min(cnt[e], capacity) + threadIdx.x; r < capacity; r += blockDim.x)
            slot_token[(size_t)e * capacity + r] = -1;
}

static void cuda_moe_permute(gt_backend *b, gt_stream *s, int32_t *slot_token, int32_t *token_slot,
                             int32_t *offsets, const int32_t *topk_idx, int N, int E, int k,
                             int capacity) {
    if (N < 0 || E <= 0 || k <= 0 || capacity < 0 || E > 8192) {
        gt_backend_fail(b, GT_ERR_INVALID, "moe_permute: bad shape N=%d E=%d k=%d capacity=%d", N,
                        E, k, capacity);
        return;
    }
    int32_t *cnt = (int32_t *)gt_cuda_scratch(b, GT_SCRATCH_PERMUTE, (size_t)E * sizeof(int32_t),
                                              "moe_permute");
    if (b->planning || !cnt) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    gt_launch(k_permute_count, E, PERMUTE_THREADS, 0, cs, cnt, token_slot, topk_idx, N * k, E);
    gt_launch(k_permute_place, E, PERMUTE_THREADS, 0, cs, slot_token, token_slot, offsets, cnt,
              topk_idx, N * k, E, capacity);
    GT_CUDA_LAUNCHED(b, "moe_permute");
}

/* ---- gather / combine ---- */

/* Row kernels: one block per output row, each thread W contiguous columns at a time (W = 8:
 * 16-byte loads and stores, where d % 8 == 0 and the tensors are 16-byte aligned; else 1).
 * Same arithmetic and summation order per element either way. The element-wise grid-stride
 * versions with 64-bit divisions ran at an eighth of the memory bandwidth. */
template <int W> static __device__ __forceinline__ void ldw(float *f, const bf16 *p) {
    if (W == 8)
        ld8(f, p);
    else
        f[0] = ldf(p);
}
template <int W> static __device__ __forceinline__ void stw(bf16 *p, const float *f) {
    if (W == 8)
        st8(p, f);
    else
        p[0] = tobf(f[0]);
}

template <int W>
__global__ void k_gather(bf16 *xe, const bf16 *x, const int32_t *slot_token, int k, int d) {
    GT_PDL_ENTRY();
    int r = blockIdx.x, a = slot_token[r];
    const bf16 *src = a >= 0 ? x + (size_t)(a / k) * d : NULL;
    bf16 *dst = xe + (size_t)r * d;
    for (int c = threadIdx.x * W; c < d; c += blockDim.x * W) {
        float f[W];
        if (src)
            ldw<W>(f, src + c);
        else
            for (int u = 0; u < W; u++)
                f[u] = 0.0f;
        stw<W>(dst + c, f);
    }
}

template <int W>
__global__ void k_gather_bwd(bf16 *dx, const bf16 *dxe, const int32_t *token_slot, int k, int d) {
    GT_PDL_ENTRY();
    int n = blockIdx.x;
    bf16 *dst = dx + (size_t)n * d;
    for (int c = threadIdx.x * W; c < d; c += blockDim.x * W) {
        float acc[W], v[W];
        ldw<W>(acc, dst + c);
        for (int j = 0; j < k; j++) {
            int r = token_slot[(size_t)n * k + j];
            if (r < 0) continue;
            ldw<W>(v, dxe + (size_t)r * d + c);
#pragma unroll
            for (int u = 0; u < W; u++)
                acc[u] += v[u];
        }
        stw<W>(dst + c, acc);
    }
}

template <int W>
__global__ void k_combine_fwd(bf16 *y, const bf16 *ye, const float *topk_w,
                              const int32_t *token_slot, int k, int d) {
    GT_PDL_ENTRY();
    int n = blockIdx.x;
    for (int c = threadIdx.x * W; c < d; c += blockDim.x * W) {
        float acc[W], v[W];
#pragma unroll
        for (int u = 0; u < W; u++)
            acc[u] = 0.0f;
        for (int j = 0; j < k; j++) {
            int r = token_slot[(size_t)n * k + j];
            if (r < 0) continue;
            float wj = topk_w[(size_t)n * k + j];
            ldw<W>(v, ye + (size_t)r * d + c);
#pragma unroll
            for (int u = 0; u < W; u++)
                acc[u] += wj * v[u];
        }
        stw<W>(y + (size_t)n * d + c, acc);
    }
}

template <int W>
__global__ void k_combine_bwd_dye(bf16 *dye, const bf16 *dy, const float *topk_w,
                                  const int32_t *slot_token, int k, int d) {
    GT_PDL_ENTRY();
    int r = blockIdx.x, a = slot_token[r];
    float wa = a >= 0 ? topk_w[a] : 0.0f;
    const bf16 *src = a >= 0 ? dy + (size_t)(a / k) * d : NULL;
    for (int c = threadIdx.x * W; c < d; c += blockDim.x * W) {
        float f[W];
        if (src) {
            ldw<W>(f, src + c);
#pragma unroll
            for (int u = 0; u < W; u++)
                f[u] = wa * f[u];
        } else {
            for (int u = 0; u < W; u++)
                f[u] = 0.0f;
        }
        stw<W>(dye + (size_t)r * d + c, f);
    }
}

/* Launches row kernel K<8> when d % 8 == 0 and every pointer is 16-byte aligned, else K<1>. */
#define MOE_ROWS(kern, rows, d, cs, al, ...)                                                       \
    do {                                                                                           \
        if ((d) % 8 == 0 && (al))                                                                  \
            gt_launch(kern<8>, (rows), MOE_ROW_THREADS, 0, (cs), __VA_ARGS__);                     \
        else                                                                                       \
            gt_launch(kern<1>, (rows), MOE_ROW_THREADS, 0, (cs), __VA_ARGS__);                     \
    } while (0)

/* One warp per assignment. */
__global__ void k_combine_bwd_dw(float *dtopk_w, const bf16 *dy, const bf16 *ye,
                                 const int32_t *token_slot, int NK, int k, int d) {
    GT_PDL_ENTRY();
    int a = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (a >= NK) return;
    int r = token_slot[a];
    float acc = 0.0f;
    if (r >= 0) {
        const bf16 *yr = ye + (size_t)r * d, *g = dy + (size_t)(a / k) * d;
        if (d % 8 == 0 && ((uintptr_t)ye & 15u) == 0 && ((uintptr_t)dy & 15u) == 0) {
            for (int c = 8 * lane; c < d; c += 256) { /* 16-byte loads */
                float gv[8], yv[8];
                ld8(gv, g + c);
                ld8(yv, yr + c);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc += gv[j] * yv[j];
            }
        } else {
            for (int c = lane; c < d; c += 32)
                acc += ldf(g + c) * ldf(yr + c);
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) dtopk_w[a] = acc;
}

static void cuda_moe_gather(gt_backend *b, gt_stream *s, void *xe, const void *x,
                            const int32_t *slot_token, int R, int k, int d) {
    if (b->planning || R <= 0 || d <= 0) return;
    MOE_ROWS(k_gather, (unsigned)R, d, gt_cuda_ex(b, s), al16(xe) && al16(x), (bf16 *)xe,
             (const bf16 *)x, slot_token, k, d);
    GT_CUDA_LAUNCHED(b, "moe_gather");
}

static void cuda_moe_gather_bwd(gt_backend *b, gt_stream *s, void *dx, const void *dxe,
                                const int32_t *token_slot, int N, int k, int d) {
    if (b->planning || N <= 0 || d <= 0) return;
    MOE_ROWS(k_gather_bwd, (unsigned)N, d, gt_cuda_ex(b, s), al16(dx) && al16(dxe), (bf16 *)dx,
             (const bf16 *)dxe, token_slot, k, d);
    GT_CUDA_LAUNCHED(b, "moe_gather_bwd");
}

static void cuda_moe_combine_fwd(gt_backend *b, gt_stream *s, void *y, const void *ye,
                                 const float *topk_w, const int32_t *token_slot, int N, int k,
                                 int d) {
    if (b->planning || N <= 0 || d <= 0) return;
    MOE_ROWS(k_combine_fwd, (unsigned)N, d, gt_cuda_ex(b, s), al16(y) && al16(ye), (bf16 *)y,
             (const bf16 *)ye, topk_w, token_slot, k, d);
    GT_CUDA_LAUNCHED(b, "moe_combine_fwd");
}

static void cuda_moe_combine_bwd(gt_backend *b, gt_stream *s, void *dye, float *dtopk_w,
                                 const void *dy, const void *ye, const float *topk_w,
                                 const int32_t *token_slot, const int32_t *slot_token, int N, int R,
                                 int k, int d) {
    if (b->planning || d <= 0) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    if (R > 0)
        MOE_ROWS(k_combine_bwd_dye, (unsigned)R, d, cs, al16(dye) && al16(dy), (bf16 *)dye,
                 (const bf16 *)dy, topk_w, slot_token, k, d);
    int NK = N * k, wpb = MOE_THREADS / 32;
    if (NK > 0)
        gt_launch(k_combine_bwd_dw, (NK + wpb - 1) / wpb, MOE_THREADS, 0, cs, dtopk_w,
                  (const bf16 *)dy, (const bf16 *)ye, token_slot, NK, k, d);
    GT_CUDA_LAUNCHED(b, "moe_combine_bwd");
}

/* ---- grouped GEMM over device offsets ---- */

/* Finds the expert and row tile of block `t`; returns 0 when t is past the last tile. */
static __device__ int find_tile(const int32_t *offsets, int E, int t, int *e_out, int *r0,
                                int *r1) {
    int cum = 0;
    for (int e = 0; e < E; e++) {
        int lo = offsets[e], hi = offsets[e + 1];
        int tiles = hi > lo ? (hi - lo + GM_BM - 1) / GM_BM : 0;
        if (t < cum + tiles) {
            *e_out = e;
            *r0 = lo + (t - cum) * GM_BM;
            *r1 = min(hi, *r0 + GM_BM);
            return 1;
        }
        cum += tiles;
    }
    return 0;
}

/* out[r, c] = sum_k A[r, k] * W_e(c, k) for the rows of one group's tile, where
 * W_e(c, k) = w[e * w_expert + c * wc + k * wk]; bf16 in and out, fp32 accumulate. */
__global__ void __launch_bounds__(MOE_THREADS)
    k_grouped_mm(bf16 *out, const bf16 *A, const bf16 *w, const int32_t *offsets, int E, int Ncols,
                 int Kdim, size_t w_expert, int wc, int wk) {
    GT_PDL_ENTRY();
    __shared__ float As[GM_BK][GM_BM + 1];
    __shared__ float Ws[GM_BK][GM_BN + 1];
    int e, r0, r1;
    if (!find_tile(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * GM_BN;
    int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const bf16 *we = w + (size_t)e * w_expert;
    float acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            acc[a][c] = 0.0f;
    for (int k0 = 0; k0 < Kdim; k0 += GM_BK) {
        for (int idx = tid; idx < GM_BM * GM_BK; idx += blockDim.x) {
            int r = idx / GM_BK, kk = idx % GM_BK;
            int row = r0 + r, k = k0 + kk;
            As[kk][r] = (row < r1 && k < Kdim) ? ldf(A + (size_t)row * Kdim + k) : 0.0f;
            int c, kw;
            if (wk == 1) {
                c = idx / GM_BK;
                kw = idx % GM_BK;
            } else {
                c = idx % GM_BN;
                kw = idx / GM_BN;
            }
            int col = c0 + c, kg = k0 + kw;
            Ws[kw][c] =
                (col < Ncols && kg < Kdim) ? ldf(we + (size_t)col * wc + (size_t)kg * wk) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GM_BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int a = 0; a < 4; a++)
                av[a] = As[kk][ty + 16 * a];
#pragma unroll
            for (int c = 0; c < 4; c++)
                bv[c] = Ws[kk][tx + 16 * c];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    acc[a][c] += av[a] * bv[c];
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int row = r0 + ty + 16 * a;
        if (row >= r1) continue;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int col = c0 + tx + 16 * c;
            if (col < Ncols) out[(size_t)row * Ncols + col] = tobf(acc[a][c]);
        }
    }
}

/* dw[e][n, k] += sum over the group's rows r of dout[r, n] * a[r, k], rows in order. */
__global__ void __launch_bounds__(MOE_THREADS)
    k_grouped_mm_dw(float *dw, const bf16 *dout, const bf16 *a, const int32_t *offsets, int Nf,
                    int K) {
    GT_PDL_ENTRY();
    __shared__ float Ds[GM_BK][GM_BN + 1];
    __shared__ float As[GM_BK][GM_BN + 1];
    int e = blockIdx.z, k0 = blockIdx.x * GM_BN, n0 = blockIdx.y * GM_BN;
    int lo = offsets[e], hi = offsets[e + 1];
    int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    float acc[4][4];
#pragma unroll
    for (int x = 0; x < 4; x++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            acc[x][c] = 0.0f;
    for (int rb = lo; rb < hi; rb += GM_BK) {
        for (int idx = tid; idx < GM_BK * GM_BN; idx += blockDim.x) {
            int rr = idx / GM_BN, c = idx % GM_BN;
            int row = rb + rr;
            Ds[rr][c] = (row < hi && n0 + c < Nf) ? ldf(dout + (size_t)row * Nf + n0 + c) : 0.0f;
            As[rr][c] = (row < hi && k0 + c < K) ? ldf(a + (size_t)row * K + k0 + c) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < GM_BK; rr++) {
            float dv[4], av[4];
#pragma unroll
            for (int x = 0; x < 4; x++)
                dv[x] = Ds[rr][ty + 16 * x];
#pragma unroll
            for (int c = 0; c < 4; c++)
                av[c] = As[rr][tx + 16 * c];
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    acc[x][c] += dv[x] * av[c];
        }
        __syncthreads();
    }
    float *dwe = dw + (size_t)e * Nf * K;
#pragma unroll
    for (int x = 0; x < 4; x++) {
        int n = n0 + ty + 16 * x;
        if (n >= Nf) continue;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int k = k0 + tx + 16 * c;
            if (k < K) dwe[(size_t)n * K + k] += acc[x][c];
        }
    }
}

/* Checks the shape and chooses the kernels of a grouped GEMM of sizes n x k (the chooser of
 * config/kernel_choice.h, while planning too, so a refusal stops the planning pass; the choice
 * is kept for describe). Returns 1 when there is something to launch into *kern. */
static int gm_check(gt_backend *b, const char *what, int R, int E, int n, int k, gt_kernel *kern) {
    if (R < 0 || E <= 0 || n <= 0 || k <= 0) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: bad shape R=%d E=%d Nf=%d K=%d", what, R, E, n, k);
        return 0;
    }
    gt_cuda_impl *im = (gt_cuda_impl *)b->impl;
    gt_error err;
    memset(&err, 0, sizeof err);
    if (gt_choose_moe_gemm(&im->caps, im->opts.moe_gemm, n, k, kern, &err) != GT_OK) {
        gt_backend_fail(b, err.code, "%s: %s", what, err.msg);
        return 0;
    }
    if (b->planning) im->moe_kernel = *kern;
    return !b->planning && R > 0;
}

/* A chosen kernel that declined the call at launch: the tensors were not as it needs them. */
static void gm_declined(gt_backend *b, const char *what, gt_kernel k) {
    gt_backend_fail(b, GT_ERR_INVALID,
                    "%s (%s): the grouped GEMM declined the call (tensors not 16-byte aligned, or "
                    "the driver refused their tensor maps); pass 16-byte aligned tensors, or set "
                    "runtime.cuda.moe_gemm to other kernels",
                    what, gt_kernel_name(k));
}

/* out[R, Ncols] = A[R, Kdim] @ W_e^T per group, W_e stored [Ncols][Kdim] (kmajor: the
 * forward) or [Kdim][Ncols] (the data gradient), through the chosen kernels: wgmma, mma.sync,
 * or the SIMT reference. */
static void grouped_mm(gt_backend *b, gt_stream *s, const char *what, gt_kernel kern, void *out,
                       const void *A, const void *w, const int32_t *offsets, int R, int E,
                       int Ncols, int Kdim, int kmajor) {
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    bf16 *o = (bf16 *)out;
    const bf16 *a = (const bf16 *)A, *wb = (const bf16 *)w;
    int done = 1;
    if (kern == GT_KERNEL_WGMMA) {
        done = gt_cuda_grouped_mm_wgmma(cs, o, a, wb, offsets, R, E, Ncols, Kdim, kmajor);
    } else if (kern == GT_KERNEL_MMA) {
        done = gt_cuda_grouped_mm_mma(cs, o, a, wb, offsets, R, E, Ncols, Kdim, kmajor);
    } else {
        int wc = kmajor ? Kdim : 1, wk = kmajor ? 1 : Ncols;
        dim3 grid((Ncols + GM_BN - 1) / GM_BN, (R + GM_BM - 1) / GM_BM + E);
        gt_launch(k_grouped_mm, grid, MOE_THREADS, 0, cs, o, a, wb, offsets, E, Ncols, Kdim,
                  (size_t)Ncols * Kdim, wc, wk);
    }
    if (!done)
        gm_declined(b, what, kern);
    else
        GT_CUDA_LAUNCHED(b, what);
}

static void cuda_moe_matmul_fwd(gt_backend *b, gt_stream *s, void *out, const void *a,
                                const void *w, const int32_t *offsets, int R, int E, int Nf,
                                int K) {
    gt_kernel kern;
    if (!gm_check(b, "moe_matmul_fwd", R, E, Nf, K, &kern)) return;
    grouped_mm(b, s, "moe_matmul_fwd", kern, out, a, w, offsets, R, E, Nf, K, 1);
}

static void cuda_moe_matmul_bwd_data(gt_backend *b, gt_stream *s, void *da, const void *dout,
                                     const void *w, const int32_t *offsets, int R, int E, int Nf,
                                     int K) {
    gt_kernel kern;
    if (!gm_check(b, "moe_matmul_bwd_data", R, E, Nf, K, &kern)) return;
    grouped_mm(b, s, "moe_matmul_bwd_data", kern, da, dout, w, offsets, R, E, K, Nf, 0);
}

static void cuda_moe_matmul_bwd_weight(gt_backend *b, gt_stream *s, float *dw, const void *dout,
                                       const void *a, const int32_t *offsets, int R, int E, int Nf,
                                       int K, int accumulate) {
    gt_kernel kern;
    if (!gm_check(b, "moe_matmul_bwd_weight", R, E, Nf, K, &kern)) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    int done = 1;
    if (kern == GT_KERNEL_WGMMA) {
        done = gt_cuda_grouped_mm_dw_wgmma(cs, dw, (const bf16 *)dout, (const bf16 *)a, offsets, R,
                                           E, Nf, K, accumulate);
    } else if (kern == GT_KERNEL_MMA) {
        done = gt_cuda_grouped_mm_dw_mma(cs, dw, (const bf16 *)dout, (const bf16 *)a, offsets, E,
                                         Nf, K, accumulate);
    } else {
        /* the SIMT kernel only accumulates: overwriting is zeroing first */
        if (!accumulate)
            GT_CUDA_OP(b, cudaMemsetAsync(dw, 0, (size_t)E * Nf * K * sizeof(float), cs.cs));
        dim3 grid((K + GM_BN - 1) / GM_BN, (Nf + GM_BN - 1) / GM_BN, E);
        gt_launch(k_grouped_mm_dw, grid, MOE_THREADS, 0, cs, dw, (const bf16 *)dout,
                  (const bf16 *)a, offsets, Nf, K);
    }
    if (!done)
        gm_declined(b, "moe_matmul_bwd_weight", kern);
    else
        GT_CUDA_LAUNCHED(b, "moe_matmul_bwd_weight");
}

extern "C" int gt_cuda_moe_init(int sm90, gt_error *err) {
    cudaError_t e = gt_cuda_grouped_mm_mma_init();
    if (e == cudaSuccess) e = gt_cuda_moe_fp8_init();
    /* the wgmma kernels exist only as sm_90a code: elsewhere there is nothing to set up */
    if (e == cudaSuccess && sm90) e = gt_cuda_grouped_mm_wgmma_init();
    if (e != cudaSuccess)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "setting up the grouped GEMM kernels: %s (the MoE kernels need up "
                            "to 109 KiB of shared memory per block, and on compute capability "
                            "9.0 the driver's cuTensorMapEncodeTiled, which a driver for CUDA "
                            "12 or later has)",
                            cudaGetErrorString(e));
    return GT_OK;
}

extern "C" void gt_cuda_register_moe_ops(gt_backend_ops *ops) {
    ops->moe_router_fwd = cuda_moe_router_fwd;
    ops->moe_aux_loss = cuda_moe_aux_loss;
    ops->moe_router_bwd = cuda_moe_router_bwd;
    ops->moe_permute = cuda_moe_permute;
    ops->moe_gather = cuda_moe_gather;
    ops->moe_gather_bwd = cuda_moe_gather_bwd;
    ops->moe_matmul_fwd = cuda_moe_matmul_fwd;
    ops->moe_matmul_bwd_data = cuda_moe_matmul_bwd_data;
    ops->moe_matmul_bwd_weight = cuda_moe_matmul_bwd_weight;
    ops->moe_combine_fwd = cuda_moe_combine_fwd;
    ops->moe_combine_bwd = cuda_moe_combine_bwd;
}
