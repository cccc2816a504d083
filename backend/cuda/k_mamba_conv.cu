/* The Mamba-2 mixer's causal conv1d + SiLU on the CUDA backend (backend.h's mamba_conv_fwd /
 * mamba_conv_bwd; the fp32 reference is cpu_mamba.c): bf16 in and out, fp32 math, the weight
 * and bias gradients summed in a fixed order (no float atomics), no host sync. */
#include "backend/cuda/mamba_ew.cuh"
#include "backend/cuda/mma_sync.cuh"

/* ---- convolution: x is zxbcdt's xBC slice (row stride ld), C channels ----
 * A thread walks V channels through a run of consecutive tokens and keeps the last taps'
 * inputs (and, backward, the next taps' output gradients) in registers, so every input is read
 * once instead of once per tap; neighbouring threads hold neighbouring channels, so each
 * token's row is read coalesced. The width KT is a template parameter for the common widths
 * (2, 3, 4: windows in registers, unrolled); KT = 0 is the generic path (runtime K up to
 * MAXC, scalar). KW = the window's length: win[j] holds x[n - (KW - 1 - j)], so tap k of K
 * reads win[KW - K + k]; a window is zeroed where a sequence starts (the taps before it are
 * the zero padding). */
#define MAXC GT_CUDA_MAMBA_MAX_CONV
#define CONV_MIN_RUN 8       /* tokens a forward thread convolves in order, at least */
#define CONV_BATCH 4         /* forward loads in flight per thread */
#define CONV_BWD_INFLIGHT 16 /* channel-tokens a backward thread has loads in flight for */
#define CONV_BWD_THREADS 128 /* runs of a block: enough in flight per SM */
#define KWIN(KT) ((KT) > 0 ? (KT) : MAXC)

template <int V, int KW>
static __device__ __forceinline__ void win_push(float (*win)[V], const float *v) {
#pragma unroll
    for (int j = 0; j < KW - 1; j++)
#pragma unroll
        for (int i = 0; i < V; i++)
            win[j][i] = win[j + 1][i];
#pragma unroll
    for (int i = 0; i < V; i++)
        win[KW - 1][i] = v[i];
}

template <int V, int KW> static __device__ __forceinline__ void win_zero(float (*win)[V]) {
#pragma unroll
    for (int j = 0; j < KW; j++)
#pragma unroll
        for (int i = 0; i < V; i++)
            win[j][i] = 0.0f;
}

/* channel i's pre-activation from the window: bias + taps in the CPU's order */
template <int V, int KW>
static __device__ __forceinline__ float win_pre(float (*win)[V], float (*wk)[V], const float *b0,
                                                int i, int K) {
    float acc = b0[i];
#pragma unroll
    for (int k = 0; k < KW; k++)
        if (k < K) acc += wk[k][i] * win[KW - K + k][i];
    return acc;
}

/* the channels' weights and bias, and their window before token n0 (t0 = n0's position in its
 * sequence) */
template <int V, int KW>
static __device__ __forceinline__ void
conv_start(float (*wk)[V], float (*win)[V], float *b0, const bf16 *x, int ld, const bf16 *w,
           const bf16 *bias, size_t n0, int t0, int c, int K) {
#pragma unroll
    for (int i = 0; i < V; i++) {
#pragma unroll
        for (int k = 0; k < KW; k++)
            wk[k][i] = k < K ? ldf(w + (size_t)(c + i) * K + k) : 0.0f;
        b0[i] = bias ? ldf(bias + c + i) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < KW; j++) {
        int back = KW - j; /* win[j] before the first push holds x[n0 - back] */
        if (back < K && t0 - back >= 0) {
            ldv<V>(win[j], x + (n0 - back) * ld + c);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++)
                win[j][i] = 0.0f;
        }
    }
}

/* thread (run, channel vector): the vector index fastest, so a warp reads rows coalesced;
 * runs of `run` tokens */
template <int V, int KT>
__global__ void __launch_bounds__(MAMBA_THREADS)
    k_conv_fwd(bf16 *__restrict__ xbc, const bf16 *__restrict__ x, int ld,
               const bf16 *__restrict__ w, const bf16 *__restrict__ bias, int N, int T, int C,
               int Kr, int run) {
    GT_PDL_ENTRY();
    constexpr int KW = KWIN(KT);
    const int K = KT > 0 ? KT : Kr;
    size_t nv = (size_t)(C / V), idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t n0 = idx / nv * (size_t)run;
    int c = (int)(idx % nv) * V;
    if (n0 >= (size_t)N) return;
    size_t n1 = n0 + run < (size_t)N ? n0 + run : (size_t)N;
    int t = (int)(n0 % (size_t)T);
    float wk[KW][V], win[KW][V], b0[V];
    conv_start<V, KW>(wk, win, b0, x, ld, w, bias, n0, t, c, K);
    for (size_t nb = n0; nb < n1; nb += CONV_BATCH) {
        uint4 raw[CONV_BATCH];
#pragma unroll
        for (int u = 0; u < CONV_BATCH; u++)
            raw[u] = nb + u < n1 ? ld_raw<V>(x + (nb + u) * ld + c) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int u = 0; u < CONV_BATCH; u++) {
            size_t n = nb + u;
            if (n >= n1) break;
            if (t == 0) win_zero<V, KW>(win);
            float v[V], o[V];
            unpack_raw<V>(v, raw[u]);
            win_push<V, KW>(win, v);
#pragma unroll
            for (int i = 0; i < V; i++) {
                float p = win_pre<V, KW>(win, wk, b0, i, K);
                o[i] = p * sigm(p);
            }
            stv<V>(xbc + n * C + c, o);
            t = t + 1 == T ? 0 : t + 1;
        }
    }
}

/* Both gradients in one pass. A block holds SLAB_CH channels (SLAB_CH / V threads across) and
 * RUNS runs of tokens; the RED_CLUSTER blocks of a cluster split the tokens. The thread of a
 * run [n0, n1) recomputes each token's pre-activation from the input window, g = dy *
 * silu'(pre), adds g x (the weight gradient) and g (the bias gradient), and emits dx[n] =
 * sum_k w_k g[n + K-1-k] once g[n + K-1] is known: K - 1 tokens past n1 are walked for that
 * alone. The partial sums are then added in run and block order (cluster_sum). */
template <int V, int KT>
__global__ void __cluster_dims__(1, RED_CLUSTER, 1) __launch_bounds__(CONV_BWD_THREADS)
    k_conv_bwd(bf16 *__restrict__ dx, int lddx, float *dw, float *dbias,
               const bf16 *__restrict__ dy, const bf16 *__restrict__ x, int ld,
               const bf16 *__restrict__ w, const bf16 *__restrict__ bias, int N, int T, int C,
               int Kr, int accumulate) {
    GT_PDL_ENTRY();
    constexpr int KW = KWIN(KT), SLABV = SLAB_CH / V, RUNS = CONV_BWD_THREADS / SLABV;
    constexpr int BATCH = CONV_BWD_INFLIGHT / V > 1 ? CONV_BWD_INFLIGHT / V : 1;
    constexpr int SLOTS = KW + 1; /* per channel: the K taps' sums (of KW), then the bias's */
    __shared__ float part[RUNS][SLAB_CH * SLOTS];
    __shared__ float blk[SLAB_CH * SLOTS];
    const int K = KT > 0 ? KT : Kr;
    int lv = threadIdx.x % SLABV, r = threadIdx.x / SLABV, c = blockIdx.x * SLAB_CH + lv * V;
    size_t runs = (size_t)RED_CLUSTER * RUNS, per = ((size_t)N + runs - 1) / runs;
    size_t n0 = ((size_t)blockIdx.y * RUNS + r) * per;
    size_t n1 = n0 + per < (size_t)N ? n0 + per : (size_t)N;
    float acc[SLOTS][V];
#pragma unroll
    for (int k = 0; k < SLOTS; k++)
#pragma unroll
        for (int i = 0; i < V; i++)
            acc[k][i] = 0.0f;
    if (c < C && n0 < n1) {
        int tm = (int)(n0 % (size_t)T), tn = tm;
        float wk[KW][V], win[KW][V], gwin[KW][V], b0[V];
        conv_start<V, KW>(wk, win, b0, x, ld, w, bias, n0, tm, c, K);
        win_zero<V, KW>(gwin);
        size_t mend = n1 + (size_t)(K - 1); /* walked: [n0, mend) */
        for (size_t mb = n0; mb < mend; mb += BATCH) {
            uint4 rx[BATCH], rd[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; u++) {
                size_t m = mb + u;
                int live = m < mend && m < (size_t)N;
                rx[u] = live ? ld_raw<V>(x + m * ld + c) : make_uint4(0u, 0u, 0u, 0u);
                rd[u] = live ? ld_raw<V>(dy + m * C + c) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < BATCH; u++) {
                size_t m = mb + u;
                if (m >= mend) break;
                float g[V];
#pragma unroll
                for (int i = 0; i < V; i++)
                    g[i] = 0.0f;
                if (m < (size_t)N) {
                    if (tm == 0) win_zero<V, KW>(win);
                    float xv[V], dv[V];
                    unpack_raw<V>(xv, rx[u]);
                    unpack_raw<V>(dv, rd[u]);
                    win_push<V, KW>(win, xv);
#pragma unroll
                    for (int i = 0; i < V; i++)
                        g[i] = dv[i] * silu_grad(win_pre<V, KW>(win, wk, b0, i, K));
                    if (m < n1)
#pragma unroll
                        for (int i = 0; i < V; i++) {
#pragma unroll
                            for (int k = 0; k < KW; k++)
                                if (k < K) acc[k][i] += g[i] * win[KW - K + k][i];
                            acc[KW][i] += g[i];
                        }
                    tm = tm + 1 == T ? 0 : tm + 1;
                }
                win_push<V, KW>(gwin, g); /* gwin[KW - 1 - k][i] = g[m - k] */
                if (m < n0 + (size_t)(K - 1)) continue;
                size_t n = m - (size_t)(K - 1); /* every tap of dx[n] is known */
                float s[V];
#pragma unroll
                for (int i = 0; i < V; i++) {
                    s[i] = 0.0f;
#pragma unroll
                    for (int k = 0; k < KW; k++)
                        if (k < K && tn + (K - 1 - k) < T) s[i] += wk[k][i] * gwin[KW - 1 - k][i];
                }
                stv<V>(dx + n * lddx + c, s);
                tn = tn + 1 == T ? 0 : tn + 1;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < V; i++)
#pragma unroll
        for (int k = 0; k < SLOTS; k++)
            part[r][(lv * V + i) * SLOTS + k] = acc[k][i];
    cluster_sum<RUNS, SLAB_CH * SLOTS>(part, blk);
    if (cg::this_cluster().block_rank() != 0) return;
    for (int j = threadIdx.x; j < SLAB_CH * SLOTS; j += blockDim.x) {
        int ch = blockIdx.x * SLAB_CH + j / SLOTS, k = j % SLOTS;
        if (ch >= C) continue;
        float *o = k < K ? &dw[(size_t)ch * K + k] : k == KW && dbias ? &dbias[ch] : NULL;
        if (o) *o = accumulate ? *o + blk[j] : blk[j];
    }
}

/* ---- the convolution on 16-byte rows (C and the row strides multiples of 8, widths 2 to 4):
 * tiles of CT_TOK tokens by CT_CH channels copied (cp.async) into shared memory in whole
 * 128-byte rows, with the CT_HALO x rows before the tile the taps reach (and, backward, the
 * CT_HALO rows of dy after it). A warp takes CT_SPAN consecutive tokens of a tile, a lane two
 * neighbouring channels: each token's row is read from shared memory and stored to global
 * memory 128 contiguous bytes a warp, and the loads are whole cache lines (the register-window
 * kernels above read 4 or 16 bytes a thread from rows far apart, which the memory serves at
 * well under its bandwidth). ---- */
#define CT_CH 64   /* channels of a tile: one 128-byte row */
#define CT_TOK 64  /* tokens of a tile */
#define CT_WARPS 8 /* warps of a block */
#define CT_SPAN (CT_TOK / CT_WARPS)
#define CT_HALO 3 /* K - 1 of the widest width the tile kernels take */
#define CT_XROWS (CT_TOK + 2 * CT_HALO)
#define CT_DROWS (CT_TOK + CT_HALO)
/* backward blocks resident per SM the registers must allow, so that a layer's C / CT_CH x
 * RED_CLUSTER blocks run in one wave */
#define CT_BWD_BLOCKS 4

/* sigmoid from the fast exponential and reciprocal (0 where exp(-x) overflows): a few ulp of
 * fp32, far below the bf16 the convolution stores */
static __device__ __forceinline__ float sigm_fast(float x) {
    return __fdividef(1.0f, 1.0f + __expf(-x));
}

/* rows [r0, r0 + rows) of the CT_CH-channel slab at c0 of src into s; zeros where a row lies
 * before 0 or past N, or the channels past C */
static __device__ __forceinline__ void ct_copy(bf16 (*s)[CT_CH], const bf16 *src, int ld, long r0,
                                               int rows, int N, int c0, int C) {
    for (int i = threadIdx.x; i < rows * (CT_CH / 8); i += blockDim.x) {
        int r = i / (CT_CH / 8), j = i % (CT_CH / 8) * 8;
        long n = r0 + r;
        bool ok = n >= 0 && n < N && c0 + j < C;
        gt_cp_async16(&s[r][j], ok ? src + (size_t)n * ld + c0 + j : src, ok);
    }
}
static __device__ __forceinline__ float2 ct_ld2(const bf16 *p) {
    return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}

/* The lane's two channels' taps and bias */
template <int KT>
static __device__ __forceinline__ void ct_weights(float (*wk)[2], float *b0, const bf16 *w,
                                                  const bf16 *bias, int c, bool live) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
        for (int k = 0; k < KT; k++)
            wk[k][i] = live ? ldf(w + (size_t)(c + i) * KT + k) : 0.0f;
        b0[i] = live && bias ? ldf(bias + c + i) : 0.0f;
    }
}

/* MASK: whether a warp's tokens (and the taps they reach) may cross a sequence's start or end,
 * or the tokens' end; where they cannot (the "plain" spans, nearly all of them), the position
 * checks are left out: the same values, fewer instructions. */

/* The window before token u0 of the tile in xs (row u + CT_HALO holds token u), as the first
 * push (ct_push) expects it: win[j] = x[u0 - (KT - j)], zero before the sequence's start (tm0:
 * u0's position); win[0] is shifted out unread */
template <int KT, bool MASK>
static __device__ __forceinline__ void ct_window(float (*win)[2], const bf16 (*xs)[CT_CH], int u0,
                                                 int tm0, int cl) {
    win[0][0] = win[0][1] = 0.0f;
#pragma unroll
    for (int j = 1; j < KT; j++) {
        int back = KT - j;
        float2 v =
            !MASK || tm0 >= back ? ct_ld2(&xs[u0 + CT_HALO - back][cl]) : make_float2(0.0f, 0.0f);
        win[j][0] = v.x, win[j][1] = v.y;
    }
}

/* pushes token u's x into the window (zeroed first where u starts a sequence: tm, its position) */
template <int KT, bool MASK>
static __device__ __forceinline__ void ct_push(float (*win)[2], const bf16 (*xs)[CT_CH], int u,
                                               int tm, int cl) {
    if (MASK && tm == 0) win_zero<2, KT>(win);
    float2 v = ct_ld2(&xs[u + CT_HALO][cl]);
    const float nv[2] = {v.x, v.y};
    win_push<2, KT>(win, nv);
}
static __device__ __forceinline__ int ct_step(int t, int T) {
    return t + 1 == T ? 0 : t + 1;
}

/* The forward of a warp's CT_SPAN tokens from u0 (token n0, position tm) */
template <int KT, bool MASK>
static __device__ __forceinline__ void
ct_fwd_span(bf16 *xbc, const bf16 (*xs)[CT_CH], float (*wk)[2], const float *b0, int u0, int n0,
            int tm, int cl, int c, int N, int T, int C, bool live) {
    float win[KT][2];
    ct_window<KT, MASK>(win, xs, u0, tm, cl);
#pragma unroll
    for (int u = 0; u < CT_SPAN; u++) {
        ct_push<KT, MASK>(win, xs, u0 + u, tm, cl);
        float o[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float p = win_pre<2, KT>(win, wk, b0, i, KT);
            o[i] = p * sigm_fast(p);
        }
        if (live && (!MASK || n0 + u < N))
            *(__nv_bfloat162 *)(xbc + (size_t)(n0 + u) * C + c) = __floats2bfloat162_rn(o[0], o[1]);
        if (MASK) tm = ct_step(tm, T);
    }
}

/* Forward: one tile a block (the blocks resident on an SM overlap each other's copies) */
template <int KT>
__global__ void __launch_bounds__(CT_WARPS *GT_WARP)
    k_conv_fwd_tile(bf16 *__restrict__ xbc, const bf16 *__restrict__ x, int ld,
                    const bf16 *__restrict__ w, const bf16 *__restrict__ bias, int N, int T,
                    int C) {
    GT_PDL_ENTRY();
    __shared__ __align__(16) bf16 xs[CT_TOK + CT_HALO][CT_CH];
    int c0 = blockIdx.x * CT_CH, t0 = blockIdx.y * CT_TOK;
    ct_copy(xs, x, ld, (long)t0 - CT_HALO, CT_TOK + CT_HALO, N, c0, C);
    gt_cp_commit();
    int lane = threadIdx.x % GT_WARP, u0 = threadIdx.x / GT_WARP * CT_SPAN, cl = 2 * lane;
    int c = c0 + cl, n0 = t0 + u0, tm = n0 % T;
    bool live = c < C, plain = tm >= KT - 1 && tm + CT_SPAN <= T && n0 + CT_SPAN <= N;
    float wk[KT][2], b0[2];
    ct_weights<KT>(wk, b0, w, bias, c, live);
    gt_cp_wait<0>();
    __syncthreads();
    if (plain)
        ct_fwd_span<KT, false>(xbc, xs, wk, b0, u0, n0, tm, cl, c, N, T, C, live);
    else
        ct_fwd_span<KT, true>(xbc, xs, wk, b0, u0, n0, tm, cl, c, N, T, C, live);
}

/* dx of token n (tn: its position in its sequence, stepped on) from the g window of its taps'
 * tokens (gw[KT - 1] = g[n + K-1], so tap k reads g[n + K-1-k] = gw[KT - 1 - k]), none past
 * the sequence's end */
template <int KT, bool MASK>
static __device__ __forceinline__ void ct_emit(bf16 *dx, int lddx, float (*gw)[2], float (*wk)[2],
                                               int n, int &tn, int ne, int T, int c, bool live) {
    float s[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        s[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < KT; k++)
            if (!MASK || tn + (KT - 1 - k) < T) s[i] += wk[k][i] * gw[KT - 1 - k][i];
    }
    if (live && (!MASK || n < ne))
        *(__nv_bfloat162 *)(dx + (size_t)n * lddx + c) = __floats2bfloat162_rn(s[0], s[1]);
    if (MASK) tn = ct_step(tn, T);
}

/* One tile of a warp's backward up to the block's barrier: g = dy silu'(pre) of its CT_SPAN tokens
 * from u0 (token n0, position tm0; the last warp also of the CT_HALO after the tile), g x and g
 * into the weight and bias sums acc, the first K-1 g into gxw (the warp before needs them), dx of
 * the tokens whose taps' g are the warp's own; gw and tn are left for ct_bwd_rest. */
template <int KT, bool MASK>
static __device__ __forceinline__ void
ct_bwd_span(float (*gw)[2], int &tn, float (*acc)[2], float2 (*gxw)[GT_WARP], bf16 *dx, int lddx,
            const bf16 (*xs)[CT_CH], const bf16 (*ds)[CT_CH], float (*wk)[2], const float *b0,
            int u0, int n0, int tm0, int lane, int c, int ne, int T, bool live, bool last) {
    constexpr int H = KT - 1, NG = CT_SPAN + H;
    float win[KT][2];
    int tm = tm0;
    tn = tm0;
    ct_window<KT, MASK>(win, xs, u0, tm0, 2 * lane);
#pragma unroll
    for (int u = 0; u < NG; u++) {
        if (u >= CT_SPAN && !last) break; /* the halo's g: the next warp's */
        ct_push<KT, MASK>(win, xs, u0 + u, tm, 2 * lane);
        float2 d = ct_ld2(&ds[u0 + u][2 * lane]); /* zero past N: g too */
        const float dv[2] = {d.x, d.y};
        float g[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float p = win_pre<2, KT>(win, wk, b0, i, KT), sg = sigm_fast(p);
            g[i] = dv[i] * (sg * (1.0f + p * (1.0f - sg)));
        }
        if (u < CT_SPAN && (!MASK || n0 + u < ne))
#pragma unroll
            for (int i = 0; i < 2; i++) {
#pragma unroll
                for (int k = 0; k < KT; k++)
                    acc[k][i] += g[i] * win[k][i];
                acc[KT][i] += g[i];
            }
        if (u < H) gxw[u][lane] = make_float2(g[0], g[1]);
        win_push<2, KT>(gw, g);
        if (u >= H) ct_emit<KT, MASK>(dx, lddx, gw, wk, n0 + u - H, tn, ne, T, c, live);
        if (MASK) tm = ct_step(tm, T);
    }
}
/* After the barrier: dx of a warp's last K-1 tokens, from the next warp's first g (gxn) */
template <int KT, bool MASK>
static __device__ __forceinline__ void
ct_bwd_rest(float (*gw)[2], int tn, const float2 (*gxn)[GT_WARP], bf16 *dx, int lddx,
            float (*wk)[2], int n0, int lane, int c, int ne, int T, bool live) {
#pragma unroll
    for (int j = 0; j < KT - 1; j++) {
        float2 v = gxn[j][lane];
        const float g[2] = {v.x, v.y};
        win_push<2, KT>(gw, g);
        ct_emit<KT, MASK>(dx, lddx, gw, wk, n0 + CT_SPAN - (KT - 1) + j, tn, ne, T, c, live);
    }
}

/* Backward: the RED_CLUSTER blocks of a cluster split the tokens in whole tiles, each walking
 * its tiles with the next one's copies in flight. A warp makes g = dy silu'(pre) of its tokens
 * (the last warp also of the CT_HALO tokens after the tile), adds g x and g into its lane's
 * weight and bias sums, hands its first K-1 g to the warp before it (gx), and emits dx[n] =
 * sum_k w_k g[n + K-1-k]. The sums are added in warp and block order (cluster_sum). */
template <int KT>
__global__ void __cluster_dims__(1, RED_CLUSTER, 1)
    __launch_bounds__(CT_WARPS *GT_WARP, CT_BWD_BLOCKS)
        k_conv_bwd_tile(bf16 *__restrict__ dx, int lddx, float *dw, float *dbias,
                        const bf16 *__restrict__ dy, const bf16 *__restrict__ x, int ld,
                        const bf16 *__restrict__ w, const bf16 *__restrict__ bias, int N, int T,
                        int C, int accumulate) {
    GT_PDL_ENTRY();
    constexpr int SLOTS = KT + 1, W = CT_CH * SLOTS;
    __shared__ __align__(16) bf16 xs[2][CT_XROWS][CT_CH];
    __shared__ __align__(16) bf16 ds[2][CT_DROWS][CT_CH];
    __shared__ float2 gx[CT_WARPS][CT_HALO][GT_WARP];
    __shared__ float blk[W];
    static_assert(sizeof(float) * CT_WARPS * W <= sizeof xs, "the warps' sums reuse xs");
    int lane = threadIdx.x % GT_WARP, wp = threadIdx.x / GT_WARP;
    int c0 = blockIdx.x * CT_CH, c = c0 + 2 * lane, u0 = wp * CT_SPAN;
    bool live = c < C, last = wp == CT_WARPS - 1;
    int per = (N + RED_CLUSTER - 1) / RED_CLUSTER;
    per = (per + CT_TOK - 1) / CT_TOK * CT_TOK;
    int nb = (int)blockIdx.y * per, ne = min(nb + per, N);
    int nt = nb < ne ? (ne - nb + CT_TOK - 1) / CT_TOK : 0;
    if (nt > 0) {
        ct_copy(xs[0], x, ld, (long)nb - CT_HALO, CT_XROWS, N, c0, C);
        ct_copy(ds[0], dy, C, nb, CT_DROWS, N, c0, C);
    }
    gt_cp_commit();
    float wk[KT][2], b0[2], acc[SLOTS][2];
    ct_weights<KT>(wk, b0, w, bias, c, live);
#pragma unroll
    for (int k = 0; k < SLOTS; k++)
        acc[k][0] = acc[k][1] = 0.0f;
    for (int it = 0; it < nt; it++) {
        int t0 = nb + it * CT_TOK, bf = it & 1;
        if (it + 1 < nt) {
            ct_copy(xs[bf ^ 1], x, ld, (long)t0 + CT_TOK - CT_HALO, CT_XROWS, N, c0, C);
            ct_copy(ds[bf ^ 1], dy, C, t0 + CT_TOK, CT_DROWS, N, c0, C);
        }
        gt_cp_commit();
        gt_cp_wait<1>();
        __syncthreads();
        int n0 = t0 + u0, tm0 = n0 % T, tn;
        /* no sequence start or end among the tokens and taps, none past the block's tokens */
        bool plain = tm0 >= KT - 1 && tm0 + CT_SPAN + KT - 2 < T && n0 + CT_SPAN <= ne;
        float gw[KT][2]; /* gw[KT - 1 - j] = g of the token j before */
        win_zero<2, KT>(gw);
        if (plain)
            ct_bwd_span<KT, false>(gw, tn, acc, gx[wp], dx, lddx, xs[bf], ds[bf], wk, b0, u0, n0,
                                   tm0, lane, c, ne, T, live, last);
        else
            ct_bwd_span<KT, true>(gw, tn, acc, gx[wp], dx, lddx, xs[bf], ds[bf], wk, b0, u0, n0,
                                  tm0, lane, c, ne, T, live, last);
        __syncthreads();
        if (last) continue; /* its halo's g were its own */
        if (plain)
            ct_bwd_rest<KT, false>(gw, tn, gx[wp + 1], dx, lddx, wk, n0, lane, c, ne, T, live);
        else
            ct_bwd_rest<KT, true>(gw, tn, gx[wp + 1], dx, lddx, wk, n0, lane, c, ne, T, live);
    }
    gt_cp_wait<0>();
    float(*part)[W] = (float(*)[W]) & xs[0][0][0]; /* the last tile's reads are behind a barrier */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int k = 0; k < SLOTS; k++)
            part[wp][(2 * lane + i) * SLOTS + k] = acc[k][i];
    cluster_sum<CT_WARPS, W>(part, blk);
    if (cg::this_cluster().block_rank() != 0) return;
    for (int j = threadIdx.x; j < W; j += blockDim.x) {
        int ch = c0 + j / SLOTS, k = j % SLOTS;
        if (ch >= C) continue;
        float *o = k < KT ? &dw[(size_t)ch * KT + k] : dbias ? &dbias[ch] : NULL;
        if (o) *o = accumulate ? *o + blk[j] : blk[j];
    }
}

/* the kernels' instances: the unrolled widths on 16-byte vectors or scalars, the rest generic */
typedef void (*conv_fwd_fn)(bf16 *, const bf16 *, int, const bf16 *, const bf16 *, int, int, int,
                            int, int);
typedef void (*conv_bwd_fn)(bf16 *, int, float *, float *, const bf16 *, const bf16 *, int,
                            const bf16 *, const bf16 *, int, int, int, int, int);

static int conv_fast_width(int K) {
    return K >= 2 && K <= 4;
}
static conv_fwd_fn conv_fwd_kernel(int vec, int K) {
    switch (conv_fast_width(K) ? K : 0) {
    case 2:
        return vec ? k_conv_fwd<VEC, 2> : k_conv_fwd<1, 2>;
    case 3:
        return vec ? k_conv_fwd<VEC, 3> : k_conv_fwd<1, 3>;
    case 4:
        return vec ? k_conv_fwd<VEC, 4> : k_conv_fwd<1, 4>;
    default:
        return k_conv_fwd<1, 0>;
    }
}
/* the scalar backward (the 16-byte rows take the tile kernel) */
static conv_bwd_fn conv_bwd_kernel(int K) {
    switch (conv_fast_width(K) ? K : 0) {
    case 2:
        return k_conv_bwd<1, 2>;
    case 3:
        return k_conv_bwd<1, 3>;
    case 4:
        return k_conv_bwd<1, 4>;
    default:
        return k_conv_bwd<1, 0>;
    }
}
typedef void (*conv_fwd_tile_fn)(bf16 *, const bf16 *, int, const bf16 *, const bf16 *, int, int,
                                 int);
typedef void (*conv_bwd_tile_fn)(bf16 *, int, float *, float *, const bf16 *, const bf16 *, int,
                                 const bf16 *, const bf16 *, int, int, int, int);
/* the tile kernel of width K (2 to 4: conv_fast_width) */
template <typename F> static F conv_tile_kernel(int K, F k2, F k3, F k4) {
    return K == 2 ? k2 : K == 3 ? k3 : k4;
}
/* whether the forward's tiles of N tokens fit the grid's second dimension */
static int conv_tiles_fit(int N) {
    return (N + CT_TOK - 1) / CT_TOK <= 65535;
}

/* 16-byte vectors need the channel count, the row strides and the pointers in steps of 8 */
static int conv_vec_ok(int C, int ld, const void *a, const void *b, const void *c) {
    return C % VEC == 0 && ld % VEC == 0 && al16_all(a, b, c, a);
}

/* Resident blocks per SM of a forward kernel, asked of the runtime once per kernel (it depends
 * on the kernel's registers and the device alone, and a query per launch is host work every
 * step); 0 where the query fails (the shortest runs instead) */
#define CONV_FWD_KERNELS 16
static int conv_fwd_blocks_per_sm(conv_fwd_fn k) {
    static struct {
        conv_fwd_fn k;
        int per_sm;
    } known[CONV_FWD_KERNELS];
    static int n_known;
    for (int i = 0; i < n_known; i++)
        if (known[i].k == k) return known[i].per_sm;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, MAMBA_THREADS, 0) !=
        cudaSuccess) {
        (void)cudaGetLastError(); /* not the launch's error */
        return 0;
    }
    if (n_known < CONV_FWD_KERNELS) known[n_known].k = k, known[n_known++].per_sm = per_sm;
    return per_sm;
}

/* The run length that puts the whole convolution in one wave of resident threads (a
 * partial last wave would leave most SMs idle while it runs), at least CONV_MIN_RUN tokens */
static int conv_fwd_run(gt_backend *b, conv_fwd_fn k, int N, int nv) {
    int per_sm = conv_fwd_blocks_per_sm(k), sms = ((const gt_cuda_impl *)b->impl)->sm_count;
    size_t resident = (size_t)per_sm * (size_t)(sms > 0 ? sms : 0) * MAMBA_THREADS;
    size_t runs = resident / (size_t)nv;                                  /* runs side by side */
    size_t run = runs > 0 ? ((size_t)N + runs - 1) / runs : CONV_MIN_RUN; /* else: waves */
    return run > CONV_MIN_RUN ? (int)run : CONV_MIN_RUN;
}

static void cuda_mamba_conv_fwd(gt_backend *b, gt_stream *s, void *xbc, const void *zxbcdt,
                                const void *w, const void *bias, gt_mamba_shape sh) {
    if (b->planning || !shape_ok(b, "mamba_conv_fwd", sh)) return;
    int C = gt_mamba_conv(sh), ld = gt_mamba_in(sh), N = sh.B * sh.T;
    const bf16 *x = (const bf16 *)zxbcdt + gt_mamba_inner(sh);
    int vec = conv_fast_width(sh.K) && conv_vec_ok(C, ld, x, xbc, x);
    conv_fwd_tile_fn tile =
        vec ? conv_tile_kernel<conv_fwd_tile_fn>(sh.K, k_conv_fwd_tile<2>, k_conv_fwd_tile<3>,
                                                 k_conv_fwd_tile<4>)
            : NULL;
    if (tile && conv_tiles_fit(N)) {
        dim3 grid((C + CT_CH - 1) / CT_CH, (N + CT_TOK - 1) / CT_TOK);
        gt_launch(tile, grid, CT_WARPS * GT_WARP, 0, gt_cuda_ex(b, s), (bf16 *)xbc, x, ld,
                  (const bf16 *)w, (const bf16 *)bias, N, sh.T, C);
        GT_CUDA_LAUNCHED(b, "mamba_conv_fwd");
        return;
    }
    conv_fwd_fn k = conv_fwd_kernel(vec, sh.K);
    int nv = C / (vec ? VEC : 1), run = conv_fwd_run(b, k, N, nv);
    size_t threads = ((size_t)N + run - 1) / run * (size_t)nv;
    unsigned grid = (unsigned)((threads + MAMBA_THREADS - 1) / MAMBA_THREADS);
    gt_launch(k, grid, MAMBA_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)xbc, x, ld, (const bf16 *)w,
              (const bf16 *)bias, N, sh.T, C, sh.K, run);
    GT_CUDA_LAUNCHED(b, "mamba_conv_fwd");
}

static void cuda_mamba_conv_bwd(gt_backend *b, gt_stream *s, void *dzxbcdt, float *dw, float *dbias,
                                const void *dxbc, const void *zxbcdt, const void *w,
                                const void *bias, gt_mamba_shape sh, int accumulate) {
    if (b->planning || !shape_ok(b, "mamba_conv_bwd", sh)) return;
    int C = gt_mamba_conv(sh), di = gt_mamba_inner(sh), ld = gt_mamba_in(sh), N = sh.B * sh.T;
    bf16 *dx = (bf16 *)dzxbcdt + di;
    const bf16 *x = (const bf16 *)zxbcdt + di;
    int vec = conv_fast_width(sh.K) && conv_vec_ok(C, ld, dx, x, dxbc);
    if (vec) {
        dim3 grid((C + CT_CH - 1) / CT_CH, RED_CLUSTER);
        gt_launch(conv_tile_kernel<conv_bwd_tile_fn>(sh.K, k_conv_bwd_tile<2>, k_conv_bwd_tile<3>,
                                                     k_conv_bwd_tile<4>),
                  grid, CT_WARPS * GT_WARP, 0, gt_cuda_ex(b, s), dx, ld, dw, dbias,
                  (const bf16 *)dxbc, x, ld, (const bf16 *)w, (const bf16 *)bias, N, sh.T, C,
                  accumulate != 0);
        GT_CUDA_LAUNCHED(b, "mamba_conv_bwd");
        return;
    }
    dim3 grid((C + SLAB_CH - 1) / SLAB_CH, RED_CLUSTER);
    gt_launch(conv_bwd_kernel(sh.K), grid, CONV_BWD_THREADS, 0, gt_cuda_ex(b, s), dx, ld, dw, dbias,
              (const bf16 *)dxbc, x, ld, (const bf16 *)w, (const bf16 *)bias, N, sh.T, C, sh.K,
              accumulate != 0);
    GT_CUDA_LAUNCHED(b, "mamba_conv_bwd");
}

extern "C" void gt_cuda_register_mamba_conv_ops(gt_backend_ops *ops) {
    ops->mamba_conv_fwd = cuda_mamba_conv_fwd;
    ops->mamba_conv_bwd = cuda_mamba_conv_bwd;
}
