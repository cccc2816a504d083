/* Causal GQA attention for head size 64 on mma.sync (m16n8k16, bf16 operands, fp32
 * accumulators) in FlashAttention-2's register layout: the backend's own tensor-core attention
 * (runtime.cuda.attention=mma, and auto where cuDNN does not take the shape).
 *
 * 64-row tiles, each warp owning 16 rows of a block's tile. Where the loop has at most 4 tiles
 * (T <= 256), a block is two halves of 4 warps that take alternate tiles of the loop (key tiles
 * in the forward and dQ, query tiles in dK/dV), each with its own copies and its own barrier;
 * then half 1 hands its partial results to half 0 through shared memory and half 0 combines
 * them in that fixed order and stores: twice the warps on a short loop. Longer loops keep a
 * block of one half (4 warps), which measured faster there. Scores, probabilities and
 * accumulators stay in registers (the C fragments of a score strip, rounded to bf16 in pairs,
 * are the A fragments of the next product: mma_sync.cuh). The next tile is copied with
 * cp.async while the current one is used.
 * - forward: a block per 64 queries; online softmax in base 2 over the key tiles up to the
 *   diagonal; saves lse (natural log) for the backward.
 * - backward: dK/dV per 64-key tile (a warp owns 16 keys and loops over the group's query heads
 *   and the query tiles from the diagonal on, in order), then dQ per 64-query tile (a warp owns
 *   16 queries, key tiles in order). Each output element is summed by one thread in a fixed
 *   order: no atomics, the same bits on every run. D = rowsum(dO * O) comes from
 *   k_attn_bwd_pre8 (k_attention.cu).
 * Same contract as the other attention kernels (attention.cuh): qkv rows [B*T, (H + 2KV) * 64],
 * out/dout rows [B*T, H * 64], dropout by the shared Philox multiplier, P and dS rounded to
 * bf16 before their products. */
#include "backend/cuda/attention.cuh"
#include "backend/cuda/mma_sync.cuh"

#define AM_T 64           /* rows (queries or keys) per tile */
#define AM_HD 64          /* head size */
#define AM_HALF 128       /* threads of a half */
#define AM_LD (AM_HD + 8) /* bf16 row stride of a tile: 144 bytes, ldmatrix without conflicts */
#define AM_TILE_ELEMS (AM_T * AM_LD)
#define AM_LOG2E 1.4426950408889634f
#define AM_LN2 0.6931471805599453f

/* Rows [r0, r0 + 64) of one head's 64 columns (starting at col0 of rows of `stride` elements)
 * into a tile, asynchronously; rows at or past T are zeros. */
static __device__ __forceinline__ void am_load(bf16 *dst, const bf16 *src, int row_base, int r0,
                                               int T, int stride, int col0) {
#pragma unroll
    for (int k = 0; k < AM_T * 8 / AM_HALF; k++) {
        int idx = (threadIdx.x & (AM_HALF - 1)) + k * AM_HALF, r = idx >> 3, v = idx & 7;
        int t = r0 + r;
        bool ok = t < T;
        const bf16 *p = src + (size_t)(row_base + (ok ? t : 0)) * stride + col0 + v * 8;
        gt_cp_async16(dst + r * AM_LD + v * 8, p, ok);
    }
}

/* The K and V tiles of kv-column pair (kcol, vcol) for key rows [r0, r0 + 64): am_load twice. */
static __device__ __forceinline__ void am_load_kv(bf16 *Kt, bf16 *Vt, const bf16 *qkv, int row_base,
                                                  int r0, int T, int C, int kcol, int vcol) {
    am_load(Kt, qkv, row_base, r0, T, C, kcol);
    am_load(Vt, qkv, row_base, r0, T, C, vcol);
}

/* A 16 x 64 accumulator strip to zero. */
static __device__ __forceinline__ void am_zero(float (&a)[8][4]) {
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            a[nb][e] = 0.0f;
}

/* Barrier of one half's 128 threads (ids 1 and 2; 0 is __syncthreads). */
static __device__ __forceinline__ void am_bar(int half) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + half), "n"(AM_HALF) : "memory");
}

/* One step of a half's K/V loop over double-buffered tiles: copy the next tile nx (when it is
 * still <= qt) into the buffer not in use, then wait for tile `cur` and hold the half until
 * every thread's copies of it have landed. */
static __device__ __forceinline__ void am_kv_step(bf16 *Ks, bf16 *Vs, const bf16 *qkv, int row_base,
                                                  int cur, int nx, int qt, int T, int C, int kcol,
                                                  int vcol, int hf) {
    if (nx <= qt)
        am_load_kv(Ks + (cur ^ 1) * AM_TILE_ELEMS, Vs + (cur ^ 1) * AM_TILE_ELEMS, qkv, row_base,
                   nx * AM_T, T, C, kcol, vcol);
    gt_cp_commit();
    gt_cp_wait<1>();
    am_bar(hf);
}

/* After a half's loop: a half without iterations still has its first copies in flight, and
 * the exchange between halves that follows writes over their tiles. */
static __device__ __forceinline__ void am_drain(int hf) {
    gt_cp_wait<0>();
    am_bar(hf);
}

/* Half 1 hands a 16 x 64 accumulator strip (slot k0..k0+31) to the same thread of half 0:
 * thread-minor layout, no bank conflicts; the caller puts, __syncthreads, then gets. */
static __device__ __forceinline__ void am_put(float *x, const float (&a)[8][4], int k0) {
    int ht = threadIdx.x & (AM_HALF - 1);
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            x[(k0 + nb * 4 + e) * AM_HALF + ht] = a[nb][e];
}
/* a += what the twin thread put (half 0's value first, then half 1's: a fixed order) */
static __device__ __forceinline__ void am_get_add(float (&a)[8][4], const float *x, int k0) {
    int ht = threadIdx.x & (AM_HALF - 1);
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            a[nb][e] += x[(k0 + nb * 4 + e) * AM_HALF + ht];
}

/* 64 floats (per-row statistics of one head) from rows [r0, r0 + 64), zeros past T. */
static __device__ __forceinline__ void am_load_stats(float *dst, const float *src, int r0, int T) {
    int ht = threadIdx.x & (AM_HALF - 1);
    if (ht < AM_T) {
        int t = r0 + ht;
        gt_cp_async4(dst + ht, src + (t < T ? t : 0), t < T);
    }
}

/* A fragments of a warp's 16 rows (row0..) over the 64 columns of a tile: 4 k16 blocks. */
static __device__ __forceinline__ void am_frag_a(uint32_t (&f)[4][4], const bf16 *tile, int row0) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        gt_ldsm_x4(f[kk], tile + (row0 + (lane & 15)) * AM_LD + kk * 16 + (lane >> 4) * 8);
}

/* acc[16 x 64] = A[16 x 64] . Bt^T where the tile holds Bt's 64 rows (n) of 64 k: B fragments
 * straight from rows (S = Q K^T, dP = dO V^T, ...). */
static __device__ __forceinline__ void am_dot_rows(float (&acc)[8][4], const uint32_t (&a)[4][4],
                                                   const bf16 *tile) {
    int lane = threadIdx.x & 31;
    am_zero(acc);
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t bf[4];
            gt_ldsm_x4(bf, tile + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * AM_LD + kk * 16 +
                               ((lane >> 3) & 1) * 8);
            gt_mma_16816(acc[2 * np], a[kk], bf);
            gt_mma_16816(acc[2 * np + 1], a[kk], bf + 2);
        }
}

/* acc[16 x 64] += A[16 x 64 k] . B where the tile holds B's 64 rows (k) of 64 columns (n):
 * B fragments through ldmatrix.trans (O += P V, dV += P^T dO, dQ += dS K, ...). */
static __device__ __forceinline__ void am_acc_cols(float (&acc)[8][4], const uint32_t (&a)[4][4],
                                                   const bf16 *tile) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kb = 0; kb < 4; kb++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t bf[4];
            gt_ldsm_x4_t(bf, tile + (kb * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * AM_LD +
                                 np * 16 + (lane >> 4) * 8);
            gt_mma_16816(acc[2 * np], a[kb], bf);
            gt_mma_16816(acc[2 * np + 1], a[kb], bf + 2);
        }
}

/* C fragments of a 16 x 64 strip -> bf16 A fragments of its four k16 blocks */
static __device__ __forceinline__ void am_to_a(uint32_t (&f)[4][4], const float (&c)[8][4]) {
#pragma unroll
    for (int kb = 0; kb < 4; kb++) {
        f[kb][0] = gt_pack_bf16(c[2 * kb][0], c[2 * kb][1]);
        f[kb][1] = gt_pack_bf16(c[2 * kb][2], c[2 * kb][3]);
        f[kb][2] = gt_pack_bf16(c[2 * kb + 1][0], c[2 * kb + 1][1]);
        f[kb][3] = gt_pack_bf16(c[2 * kb + 1][2], c[2 * kb + 1][3]);
    }
}

/* A warp's 16 x 64 accumulator strip (rows row0.. of the block's tile) times sc, in bf16, into
 * columns [col, col + 64) of rows r0 + row0.. of a [B*T, C] tensor, through the warp's own 16
 * rows of a staging tile (16-byte stores). */
static __device__ __forceinline__ void am_store(bf16 *dst, bf16 *stage, const float (&acc)[8][4],
                                                float sc0, float sc1, int row0, int r0, int T,
                                                int row_base, int C, int col) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nb = 0; nb < 8; nb++) {
        *(uint32_t *)(stage + (row0 + g) * AM_LD + nb * 8 + 2 * t) =
            gt_pack_bf16(acc[nb][0] * sc0, acc[nb][1] * sc0);
        *(uint32_t *)(stage + (row0 + g + 8) * AM_LD + nb * 8 + 2 * t) =
            gt_pack_bf16(acc[nb][2] * sc1, acc[nb][3] * sc1);
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int c = lane + 32 * k, r = c >> 3, v = c & 7, i = r0 + row0 + r;
        if (i < T)
            *(uint4 *)(dst + (size_t)(row_base + i) * C + col + v * 8) =
                *(const uint4 *)(stage + (row0 + r) * AM_LD + v * 8);
    }
}

/* fwd shared memory, per half: Q, K[2], V[2] */
#define AM_FWD_HALF_SMEM (5 * AM_TILE_ELEMS * sizeof(bf16))

template <int HALVES>
__global__ void __launch_bounds__(HALVES *AM_HALF)
    k_attn_fwd_mma(bf16 *out, float *lse, const bf16 *qkv, attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char am_smem[];
    int hf = threadIdx.x / AM_HALF, w = (threadIdx.x % AM_HALF) >> 5;
    int lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
    bf16 *Qs = (bf16 *)am_smem + hf * 5 * AM_TILE_ELEMS, *Ks = Qs + AM_TILE_ELEMS;
    bf16 *Vs = Ks + 2 * AM_TILE_ELEMS;
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int kvh = h / (g.H / g.KV), T = g.T, q0 = qt * AM_T, row_base = b * T;
    int kcol = (g.H + kvh) * AM_HD, vcol = (g.H + g.KV + kvh) * AM_HD;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    /* this half's key tiles: hf, hf + HALVES, ... up to the diagonal tile qt */
    am_load(Qs, qkv, row_base, q0, T, g.C, h * AM_HD);
    if (hf <= qt) am_load_kv(Ks, Vs, qkv, row_base, hf * AM_T, T, g.C, kcol, vcol);
    gt_cp_commit();
    const float c2 = g.scale * AM_LOG2E;
    int i0 = q0 + w * 16 + gr; /* this thread's rows: i0 and i0 + 8 */
    float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    am_zero(o);
    uint32_t qf[4][4];
    for (int kt = hf, n = 0; kt <= qt; kt += HALVES, n++) {
        int cur = n & 1;
        am_kv_step(Ks, Vs, qkv, row_base, cur, kt + HALVES, qt, T, g.C, kcol, vcol, hf);
        if (n == 0) am_frag_a(qf, Qs, w * 16);
        float s[8][4];
        am_dot_rows(s, qf, Ks + cur * AM_TILE_ELEMS);
        int k0 = kt * AM_T;
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = i0 + (e >> 1) * 8, j = k0 + nb * 8 + 2 * tq + (e & 1);
                float v = (j <= i && j < T) ? s[nb][e] * c2 : -INFINITY;
                s[nb][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float base[2], alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            base[r] = mx[r] == -INFINITY ? 0.0f : mx[r]; /* a row with no key yet */
            alpha[r] = exp2f(m[r] - base[r]);
            m[r] = mx[r];
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = e >> 1;
                o[nb][e] *= alpha[r];
                float pv = exp2f(s[nb][e] - base[r]);
                l[r] += pv;
                if (g.p > 0.0f)
                    pv *=
                        drop_mult(g, micro, step, b, h, i0 + r * 8, k0 + nb * 8 + 2 * tq + (e & 1));
                s[nb][e] = pv;
            }
        uint32_t pf[4][4];
        am_to_a(pf, s);
        am_acc_cols(o, pf, Vs + cur * AM_TILE_ELEMS);
        am_bar(hf); /* the next prefetch overwrites this buffer */
    }
    am_drain(hf);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    float inv[2];
    if (HALVES == 2) { /* half 1's (m, l, o) to half 0 through half 1's tiles: o in slots 0..31,
                        * m and l in 32..35 */
        float *x = (float *)((bf16 *)am_smem + 5 * AM_TILE_ELEMS);
        int ht = threadIdx.x % AM_HALF;
        if (hf == 1) {
            am_put(x, o, 0);
            x[32 * AM_HALF + ht] = m[0], x[33 * AM_HALF + ht] = m[1];
            x[34 * AM_HALF + ht] = l[0], x[35 * AM_HALF + ht] = l[1];
        }
        __syncthreads();
        if (hf == 1) return;
        float f0[2], f1[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float m1 = x[(32 + r) * AM_HALF + ht], l1 = x[(34 + r) * AM_HALF + ht];
            float mm = fmaxf(m[r], m1), base = mm == -INFINITY ? 0.0f : mm;
            f0[r] = exp2f(m[r] - base);
            f1[r] = exp2f(m1 - base);
            l[r] = l[r] * f0[r] + l1 * f1[r];
            m[r] = mm;
        }
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[nb][e] = o[nb][e] * f0[e >> 1] + x[(nb * 4 + e) * AM_HALF + ht] * f1[e >> 1];
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    /* half 0's Qs rows of this warp are free: its Q fragments are in registers */
    am_store(out, Qs, o, inv[0], inv[1], w * 16, q0, T, row_base, g.H * AM_HD, h * AM_HD);
    if (tq == 0)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int i = i0 + 8 * r;
            if (i < T) lse[((size_t)b * g.H + h) * T + i] = (m[r] + log2f(l[r])) * AM_LN2;
        }
}

/* P (dropped) and dS of a 16 x 64 strip in place of S and dP. The thread's rows are r0 and
 * r0 + 8, its columns c0 + nb * 8 + 2t (+1); KEYS_ARE_ROWS says which side holds the keys.
 * lq and dq: lse and D of the query side, as the thread's two rows (queries as rows) or as the
 * 64 entries of a stats tile (queries as columns). */
template <bool KEYS_ARE_ROWS>
static __device__ __forceinline__ void
am_p_ds(float (&s)[8][4], float (&dp)[8][4], const attn_geo &g, uint32_t micro, uint32_t step,
        int b, int h, int r0, int c0, const float *lq, const float *dq) {
    int tq = threadIdx.x & 3;
    const float c2 = g.scale * AM_LOG2E;
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int rr = r0 + (e >> 1) * 8, cc = c0 + nb * 8 + 2 * tq + (e & 1);
            int i = KEYS_ARE_ROWS ? cc : rr, j = KEYS_ARE_ROWS ? rr : cc;
            int q = KEYS_ARE_ROWS ? nb * 8 + 2 * tq + (e & 1) : e >> 1;
            float L = lq[q] * AM_LOG2E, Dv = dq[q];
            float pr = 0.0f, ds = 0.0f;
            if (j <= i && i < g.T) {
                pr = exp2f(s[nb][e] * c2 - L);
                float mult = g.p > 0.0f ? drop_mult(g, micro, step, b, h, i, j) : 1.0f;
                ds = pr * (dp[nb][e] * mult - Dv);
                pr *= mult;
            }
            s[nb][e] = pr;
            dp[nb][e] = ds;
        }
}

/* bwd shared memory, per half: two tiles that stay (K, V or Q, dO), two double-buffered tiles
 * (dK/dV: Q and dO; dQ: K and V), and (dK/dV) double-buffered lse and D of the query tile */
#define AM_HALF_BWD (6 * AM_TILE_ELEMS * sizeof(bf16) + 4 * AM_T * sizeof(float))

/* dK and dV of key tile blockIdx.x (tile 0, the longest loop, first) of kv head blockIdx.y of
 * sequence blockIdx.z. */
template <int HALVES>
__global__ void __launch_bounds__(HALVES *AM_HALF)
    k_attn_dkv_mma(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                   attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char am_smem[];
    int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    int hf = threadIdx.x / AM_HALF, w = (threadIdx.x % AM_HALF) >> 5;
    unsigned char *mine = am_smem + hf * AM_HALF_BWD;
    bf16 *Ks = (bf16 *)mine, *Vs = Ks + AM_TILE_ELEMS, *Qs = Vs + AM_TILE_ELEMS;
    bf16 *dOs = Qs + 2 * AM_TILE_ELEMS;
    float *Ls = (float *)(dOs + 2 * AM_TILE_ELEMS), *Ds = Ls + 2 * AM_T;
    int T = g.T, row_base = b * T, k0 = kt * AM_T, group = g.H / g.KV, HO = g.H * AM_HD;
    int nq = (T + AM_T - 1) / AM_T - kt, n_it = group * nq;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    am_load_kv(Ks, Vs, qkv, row_base, k0, T, g.C, (g.H + kvh) * AM_HD, (g.H + g.KV + kvh) * AM_HD);
    float dk[8][4], dv[8][4];
    am_zero(dk);
    am_zero(dv);
    /* this half's iterations: hf, hf + HALVES, ... (iteration it: query head kvh * group + it / nq,
     * query tile kt + it % nq); n counts them, the prefetch runs one ahead */
    for (int it = hf - HALVES, n = -1; it < n_it; it += HALVES, n++) {
        int nx = it + HALVES;
        if (nx < n_it) {
            int h = kvh * group + nx / nq, q0 = (kt + nx % nq) * AM_T, buf = (n + 1) & 1;
            size_t srow = ((size_t)b * g.H + h) * T;
            am_load(Qs + buf * AM_TILE_ELEMS, qkv, row_base, q0, T, g.C, h * AM_HD);
            am_load(dOs + buf * AM_TILE_ELEMS, dout, row_base, q0, T, HO, h * AM_HD);
            am_load_stats(Ls + buf * AM_T, lse + srow, q0, T);
            am_load_stats(Ds + buf * AM_T, D + srow, q0, T);
        }
        gt_cp_commit();
        if (n < 0) continue;
        gt_cp_wait<1>();
        am_bar(hf);
        int cur = n & 1, h = kvh * group + it / nq, q0 = (kt + it % nq) * AM_T;
        const bf16 *Qc = Qs + cur * AM_TILE_ELEMS, *dOc = dOs + cur * AM_TILE_ELEMS;
        float s[8][4], dp[8][4];
        uint32_t kvf[4][4]; /* K then V fragments, from shared memory each time: registers */
        am_frag_a(kvf, Ks, w * 16);
        am_dot_rows(s, kvf, Qc); /* S^T: keys of this warp x the tile's queries */
        am_frag_a(kvf, Vs, w * 16);
        am_dot_rows(dp, kvf, dOc); /* dP^T = V dO^T */
        am_p_ds<true>(s, dp, g, micro, step, b, h, k0 + w * 16 + ((threadIdx.x & 31) >> 2), q0,
                      Ls + cur * AM_T, Ds + cur * AM_T);
        uint32_t pa[4][4];
        am_to_a(pa, s);
        am_acc_cols(dv, pa, dOc); /* dV += P^T dO */
        am_to_a(pa, dp);
        am_acc_cols(dk, pa, Qc); /* dK += dS^T Q */
        am_bar(hf);
    }
    am_drain(hf);
    if (HALVES == 2) {
        float *x = (float *)(am_smem + AM_HALF_BWD); /* half 1's region */
        if (hf == 1) {
            am_put(x, dk, 0);
            am_put(x, dv, 32);
        }
        __syncthreads();
        if (hf == 1) return;
        am_get_add(dk, x, 0);
        am_get_add(dv, x, 32);
    }
    /* half 0's Ks / Vs rows of this warp: read by this warp alone, and no longer */
    am_store(dqkv, Ks, dk, g.scale, g.scale, w * 16, k0, T, row_base, g.C, (g.H + kvh) * AM_HD);
    am_store(dqkv, Vs, dv, 1.0f, 1.0f, w * 16, k0, T, row_base, g.C, (g.H + g.KV + kvh) * AM_HD);
}

/* dQ of query tile gridDim.x - 1 - blockIdx.x (the longest loop first) of head blockIdx.y of
 * sequence blockIdx.z. */
template <int HALVES>
__global__ void __launch_bounds__(HALVES *AM_HALF)
    k_attn_dq_mma(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                  attn_geo g, const gt_step_state *st) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char am_smem[];
    int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int hf = threadIdx.x / AM_HALF, w = (threadIdx.x % AM_HALF) >> 5;
    int gr = (threadIdx.x & 31) >> 2;
    bf16 *Qs = (bf16 *)(am_smem + hf * AM_HALF_BWD), *dOs = Qs + AM_TILE_ELEMS;
    bf16 *Ks = dOs + AM_TILE_ELEMS, *Vs = Ks + 2 * AM_TILE_ELEMS;
    int kvh = h / (g.H / g.KV), T = g.T, row_base = b * T, q0 = qt * AM_T;
    int kcol = (g.H + kvh) * AM_HD, vcol = (g.H + g.KV + kvh) * AM_HD;
    uint32_t micro = g.p > 0.0f ? (uint32_t)st->micro : 0u;
    uint32_t step = g.p > 0.0f ? (uint32_t)st->step : 0u;
    /* this half's key tiles: hf, hf + HALVES, ... up to the diagonal tile qt */
    am_load(Qs, qkv, row_base, q0, T, g.C, h * AM_HD);
    am_load(dOs, dout, row_base, q0, T, g.H * AM_HD, h * AM_HD);
    if (hf <= qt) am_load_kv(Ks, Vs, qkv, row_base, hf * AM_T, T, g.C, kcol, vcol);
    gt_cp_commit();
    float lq[2], dd[2];
    size_t srow = ((size_t)b * g.H + h) * T;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + w * 16 + gr + 8 * r;
        lq[r] = i < T ? lse[srow + i] : 0.0f;
        dd[r] = i < T ? D[srow + i] : 0.0f;
    }
    float dq[8][4];
    am_zero(dq);
    uint32_t qf[4][4], of[4][4];
    for (int kt = hf, n = 0; kt <= qt; kt += HALVES, n++) {
        int cur = n & 1;
        am_kv_step(Ks, Vs, qkv, row_base, cur, kt + HALVES, qt, T, g.C, kcol, vcol, hf);
        if (n == 0) {
            am_frag_a(qf, Qs, w * 16);
            am_frag_a(of, dOs, w * 16);
        }
        const bf16 *Kc = Ks + cur * AM_TILE_ELEMS;
        float s[8][4], dp[8][4];
        am_dot_rows(s, qf, Kc);                        /* S = Q K^T */
        am_dot_rows(dp, of, Vs + cur * AM_TILE_ELEMS); /* dP = dO V^T */
        am_p_ds<false>(s, dp, g, micro, step, b, h, q0 + w * 16 + gr, kt * AM_T, lq, dd);
        uint32_t da[4][4];
        am_to_a(da, dp);
        am_acc_cols(dq, da, Kc); /* dQ += dS K */
        am_bar(hf);
    }
    am_drain(hf);
    if (HALVES == 2) {
        float *x = (float *)(am_smem + AM_HALF_BWD);
        if (hf == 1) am_put(x, dq, 0);
        __syncthreads();
        if (hf == 1) return;
        am_get_add(dq, x, 0);
    }
    am_store(dqkv, Qs, dq, g.scale, g.scale, w * 16, q0, T, row_base, g.C, h * AM_HD);
}

/* Two halves where the loops are short (up to 4 tiles: each half then has at most two), one
 * where they are long enough to keep a block busy alone. */
static int am_halves(const attn_geo *g) {
    return (g->T + AM_T - 1) / AM_T <= 4 ? 2 : 1;
}

int gt_cuda_attn_mma_fwd(gt_cuda_exec cs, void *out, float *lse, const void *qkv, const attn_geo *g,
                         int hd, const gt_step_state *st) {
    if (hd != AM_HD || ((uintptr_t)qkv & 15u) || ((uintptr_t)out & 15u) || g->C % 8) return 0;
    dim3 grid((g->T + AM_T - 1) / AM_T, g->H, g->B);
    if (am_halves(g) == 2)
        gt_launch(k_attn_fwd_mma<2>, grid, 2 * AM_HALF, 2 * AM_FWD_HALF_SMEM, cs, (bf16 *)out, lse,
                  (const bf16 *)qkv, *g, st);
    else
        gt_launch(k_attn_fwd_mma<1>, grid, AM_HALF, AM_FWD_HALF_SMEM, cs, (bf16 *)out, lse,
                  (const bf16 *)qkv, *g, st);
    return 1;
}

int gt_cuda_attn_mma_bwd(gt_cuda_exec cs, void *dqkv, const void *dout, const void *qkv,
                         const float *lse, const float *D, const attn_geo *g, int hd,
                         const gt_step_state *st) {
    if (hd != AM_HD || g->C % 8 || (((uintptr_t)qkv | (uintptr_t)dout | (uintptr_t)dqkv) & 15u))
        return 0;
    dim3 gkv((g->T + AM_T - 1) / AM_T, g->KV, g->B), gq((g->T + AM_T - 1) / AM_T, g->H, g->B);
    if (am_halves(g) == 2) {
        gt_launch(k_attn_dkv_mma<2>, gkv, 2 * AM_HALF, 2 * AM_HALF_BWD, cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, *g, st);
        gt_launch(k_attn_dq_mma<2>, gq, 2 * AM_HALF, 2 * AM_HALF_BWD, cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, *g, st);
    } else {
        gt_launch(k_attn_dkv_mma<1>, gkv, AM_HALF, AM_HALF_BWD, cs, (bf16 *)dqkv,
                  (const bf16 *)dout, (const bf16 *)qkv, lse, D, *g, st);
        gt_launch(k_attn_dq_mma<1>, gq, AM_HALF, AM_HALF_BWD, cs, (bf16 *)dqkv, (const bf16 *)dout,
                  (const bf16 *)qkv, lse, D, *g, st);
    }
    return 1;
}

template <typename K> static cudaError_t am_allow(K kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

cudaError_t gt_cuda_attn_mma_init(void) {
    cudaError_t e = am_allow(k_attn_fwd_mma<1>, AM_FWD_HALF_SMEM);
    if (e == cudaSuccess) e = am_allow(k_attn_fwd_mma<2>, 2 * AM_FWD_HALF_SMEM);
    if (e == cudaSuccess) e = am_allow(k_attn_dkv_mma<1>, AM_HALF_BWD);
    if (e == cudaSuccess) e = am_allow(k_attn_dkv_mma<2>, 2 * AM_HALF_BWD);
    if (e == cudaSuccess) e = am_allow(k_attn_dq_mma<1>, AM_HALF_BWD);
    if (e == cudaSuccess) e = am_allow(k_attn_dq_mma<2>, 2 * AM_HALF_BWD);
    return e;
}
