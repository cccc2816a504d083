/* The backward of causal grouped-query attention for head size 64 on Hopper's warpgroup MMA
 * (wgmma, sm_90a; compiled alone for it, see CMakeLists.txt), fed by TMA. It writes no dS:
 * where cuDNN's deterministic backward materializes B x H x T x T of dS and reads it back in a
 * separate dQ GEMM, these two kernels each recompute the scores of their tiles.
 * - k_attn_bwd_dq_wg (first): a block per 128 queries of one head; it computes D =
 *   rowsum(dO * O) of its rows (for itself and the next kernel), then each warpgroup holds 64
 *   queries and loops over the key tiles (64 keys) up to its diagonal: S = Q K^T,
 *   dP = dO V^T, then dQ += dS K.
 * - k_attn_bwd_dkv_wg: a block per 128 keys of one kv head; two consumer warpgroups of 64 keys
 *   each loop over the group's query heads and the query tiles (64 queries) from the diagonal
 *   on, in order: S^T = K Q^T and dP^T = V dO^T, then P^T = exp(scale S^T - lse),
 *   dS^T = P^T (dP^T - D) in registers, then dV += P^T dO and dK += dS^T Q.
 * The block's own rows (K, V or Q, dO) are the first products' A operands, loaded from shared
 * memory into registers every step; P and dS are the second products' A operands straight from
 * the accumulators; every B operand is a shared-memory tile. A producer warpgroup (one thread
 * of it) streams the loop's tiles (for dK/dV also the queries' lse and D) into a 3-stage ring
 * guarded by mbarriers, as in k_moe_wgmma.cu. Every output element is summed by one thread in a
 * fixed order: no atomics, the same bits on every run. P and dS are rounded to bf16 before
 * their products, as in the other attention kernels. Contract of attention.cuh: qkv rows
 * [B*T, (H + 2KV) * 64], dout and out rows [B*T, H * 64], lse and D [B, H, T] fp32 (lse
 * natural-log, of the scores scaled by 1/sqrt(64)). Takes T % 128 == 0 without dropout;
 * gt_cuda_attn_wgmma_bwd returns 0 for anything else. Why it exists and how it compares with
 * cuDNN's backward: docs/design.md, "An attention backward of our own on warpgroup MMA". */
#include "backend/cuda/attention.cuh"
#include "backend/cuda/wgmma.cuh"

#define AW_HD 64
#define AW_BLK 128 /* keys (dK/dV) or queries (dQ) of a block */
#define AW_TILE 64 /* queries (dK/dV) or keys (dQ) of a loop step */
#define AW_STAGES 3
#define AW_CONSUMERS 256                /* two warpgroups */
#define AW_THREADS (AW_CONSUMERS + 128) /* + the producer warpgroup (one thread copies) */
#define AW_BOX 8192                     /* one 64 x 64 bf16 tile */
#define AW_STAGE (2 * AW_BOX + 1024)    /* two tiles, then lse and D (256 B each), padded */
/* the block's own rows: two (dK/dV) or three (dQ) 128-row operands */
#define AW_FIXED (6 * AW_BOX)
#define AW_BARS (2 * AW_STAGES + 1) /* full, empty, and the fixed rows' barrier */
#define AW_SMEM (1024 + AW_FIXED + AW_STAGES * AW_STAGE + AW_BARS * 8)
#define AW_LOG2E 1.4426950408889634f

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d (64 x 64, fp32) (+)= A (64 x 16, bf16 pairs in registers in the fragment layout of mma.sync's
 * A, mma_sync.cuh) @ B (16 x 64 in shared memory); TB: B is MN-major; acc 0 overwrites d. */
template <int TB>
static __device__ __forceinline__ void wg_mma64_rs(float *d, const uint32_t *a, uint64_t db,
                                                   int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, "
                 "%33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}

/* d = A @ B as wg_mma64_rs with acc 0: the first product of an accumulator, which reads
 * nothing of d. */
template <int TB>
static __device__ __forceinline__ void wg_mma64_rs0(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, "
                 "%33, %34, %35}, %36, 0, 1, 1, %37;\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]),
                   "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]),
                   "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]),
                   "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
                   "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]),
                   "=f"(d[30]), "=f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));
}

/* The A fragments (mma_sync.cuh's layout) of the warp's 16 rows of a warpgroup's 64 x 64
 * K-major swizzled tile, all four k16 slices, by ldmatrix. */
static __device__ __forceinline__ void aw_frags(uint32_t (*f)[4], const unsigned char *tile) {
    int lane = threadIdx.x & 31, row = ((threadIdx.x >> 5) & 3) * 16 + (lane & 7) + (lane & 8);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        int chunk = 2 * kk + (lane >> 4);
        gt_ldsm_x4(f[kk], (const bf16 *)(tile + row * 128 + ((chunk ^ (row & 7)) << 4)));
    }
}

/* The block's shared memory: the fixed rows (fixed), the ring's stages, its barriers. */
struct aw_smem {
    unsigned char *fixed, *ring;
    uint64_t *full, *empty, *fixed_bar;
};

static __device__ __forceinline__ aw_smem aw_setup(unsigned char *raw) {
    aw_smem m;
    m.fixed = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    m.ring = m.fixed + AW_FIXED;
    m.full = (uint64_t *)(m.ring + AW_STAGES * AW_STAGE);
    m.empty = m.full + AW_STAGES;
    m.fixed_bar = m.empty + AW_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < AW_STAGES; s++) {
            mb_init(&m.full[s], 1);
            mb_init(&m.empty[s], AW_CONSUMERS / 32);
        }
        mb_init(m.fixed_bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    return m;
}

/* The producer warpgroup's first thread: the fixed rows (fixed(bar), fixed_bytes), then per loop
 * step its stage once both warpgroups handed it back (step(it, stage, bar), `bytes` bytes). */
template <typename Fixed, typename Step>
static __device__ __forceinline__ void aw_produce(const aw_smem &m, uint32_t fixed_bytes, int iters,
                                                  uint32_t bytes, Fixed fixed, Step step) {
    /* registers go to the consumers: 128 x 24 + 256 x 240 of the SM's 65536 */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x != AW_CONSUMERS) return;
    mb_expect_tx(m.fixed_bar, fixed_bytes);
    fixed(m.fixed_bar);
    for (int it = 0; it < iters; it++) {
        int s = it % AW_STAGES;
        if (it >= AW_STAGES) mb_wait(&m.empty[s], ((it / AW_STAGES) + 1) & 1);
        mb_expect_tx(&m.full[s], bytes);
        step(it, m.ring + s * AW_STAGE, &m.full[s]);
    }
}

/* An accumulator as the A fragments of the k16 slices it covers, rounded to bf16: slice kk is
 * the 8-column blocks 2kk and 2kk + 1 (mma_sync.cuh: C fragments of neighbouring blocks form
 * an A fragment). */
static __device__ __forceinline__ void aw_pack(const float *d, uint32_t (*f)[4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const float *x = d + 8 * kk;
        f[kk][0] = gt_pack_bf16(x[0], x[1]), f[kk][1] = gt_pack_bf16(x[2], x[3]);
        f[kk][2] = gt_pack_bf16(x[4], x[5]), f[kk][3] = gt_pack_bf16(x[6], x[7]);
    }
}

/* A step's first two products on the warpgroup's 64 fixed rows: s = A0 B0^T and dp = A1 B1^T
 * over the 64 head columns. A0 and A1 are the fixed rows' tiles at a0 and a1 (K and V in the
 * dK/dV kernel, Q and dO in the dQ one), loaded into f0 and f1 as register operands; B0 and B1
 * are the stage's two tiles (K-major). Returns once s is complete; dp may still run. The
 * fragments are loaded again every step: kept in registers across the loop, CUDA 13.0's ptxas
 * reused them for dS while the next step still needed them, and the gradients came out wrong. */
static __device__ __forceinline__ void aw_scores(float *s, float *dp, uint32_t (*f0)[4],
                                                 uint32_t (*f1)[4], const unsigned char *a0,
                                                 const unsigned char *a1, const unsigned char *st) {
    aw_frags(f0, a0);
    aw_frags(f1, a1);
    wg_fence();
    wg_mma64_rs0<0>(s, f0[0], wg_desc<false>(st, 0));
#pragma unroll
    for (int kk = 1; kk < 4; kk++)
        wg_mma64_rs<0>(s, f0[kk], wg_desc<false>(st, kk), 1);
    wg_commit();
    wg_mma64_rs0<0>(dp, f1[0], wg_desc<false>(st + AW_BOX, 0));
#pragma unroll
    for (int kk = 1; kk < 4; kk++)
        wg_mma64_rs<0>(dp, f1[kk], wg_desc<false>(st + AW_BOX, kk), 1);
    wg_commit();
    wg_wait<1>();
}

/* 2^x by the special-function unit alone (flushes denormals; the scores' exponents here are
 * at most 0) */
static __device__ __forceinline__ float aw_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The elementwise steps between a tile's products, on a warpgroup's 64 x 64 accumulators:
 * thread (warp q, lane) holds rows 16q + lane/4 (+8 for h = 1) and, per 8-column block j,
 * columns 8j + 2(lane % 4) + e. keep(h, j, e) masks (only diagonal tiles need it);
 * l2(j, e, h) and dd(j, e, h) give the lse (times log2 e) and D of the entry's query.
 * aw_p: p = P = exp(scale s - lse) (0 where masked), and pa its bf16 A fragments. */
template <typename Keep, typename L2>
static __device__ __forceinline__ void aw_p(const float *s, float *p, uint32_t (*pa)[4], Keep keep,
                                            L2 l2) {
    const float sl2 = 0.125f * AW_LOG2E; /* 1/sqrt(64) in base 2 */
#pragma unroll
    for (int i = 0; i < 32; i++) {
        int j = i >> 2, h = (i >> 1) & 1, e = i & 1;
        p[i] = keep(h, j, e) ? aw_exp2(fmaf(s[i], sl2, -l2(j, e, h))) : 0.0f;
    }
    aw_pack(p, pa);
}

/* aw_ds: da = the bf16 A fragments of dS = P (dP - D), from P (aw_p's s) and dP. */
template <typename DD>
static __device__ __forceinline__ void aw_ds(const float *p, const float *dp, uint32_t (*da)[4],
                                             DD dd) {
    float g[32];
#pragma unroll
    for (int i = 0; i < 32; i++) {
        int j = i >> 2, h = (i >> 1) & 1, e = i & 1;
        g[i] = p[i] * (dp[i] - dd(j, e, h));
    }
    aw_pack(g, da);
}

/* Stores a warpgroup's 64 x 64 accumulator times mul as bf16 into rows row0.. of dst (stride C). */
static __device__ __forceinline__ void aw_store(bf16 *dst, const float *d, float mul, int C) {
    int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        bf16 *row = dst + (size_t)(q * 16 + (lane >> 2) + 8 * h) * C + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < 8; j++)
            *(__nv_bfloat162 *)(row + 8 * j) =
                __floats2bfloat162_rn(d[4 * j + 2 * h] * mul, d[4 * j + 2 * h + 1] * mul);
    }
}
#endif

/* grid (KV * B, T / 128): block (x, y) takes kv head x % KV of batch x / KV and keys
 * [128 y, 128 y + 128); the blocks with the longest loops (small y) start first. */
__global__ void __launch_bounds__(AW_THREADS, 1)
    k_attn_bwd_dkv_wg(bf16 *dqkv, const __grid_constant__ CUtensorMap tQKV,
                      const __grid_constant__ CUtensorMap tDO, const float *lse, const float *D,
                      int T, int H, int KV) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char aw_raw[];
    int g = blockIdx.x % KV, b = blockIdx.x / KV, n = blockIdx.y, G = H / KV;
    int t0 = 2 * n, per_head = T / AW_TILE - t0, iters = G * per_head;
    aw_smem m = aw_setup(aw_raw);
    if (threadIdx.x >= AW_CONSUMERS) {
        aw_produce(
            m, 4 * AW_BOX, iters, 2 * AW_BOX + 512,
            [&](uint64_t *bar) {
                int r = b * T + n * AW_BLK;
                for (int i = 0; i < 2; i++) {
                    tma_load(m.fixed + i * AW_BOX, &tQKV, bar, (H + g) * AW_HD, r + 64 * i, 0);
                    tma_load(m.fixed + (2 + i) * AW_BOX, &tQKV, bar, (H + KV + g) * AW_HD,
                             r + 64 * i, 0);
                }
            },
            [&](int it, unsigned char *st, uint64_t *bar) {
                int h = g * G + it / per_head, tile = t0 + it % per_head;
                size_t row = (size_t)(b * H + h) * T + tile * AW_TILE;
                tma_load(st, &tQKV, bar, h * AW_HD, b * T + tile * AW_TILE, 0);
                tma_load(st + AW_BOX, &tDO, bar, h * AW_HD, b * T + tile * AW_TILE, 0);
                bulk_load(st + 2 * AW_BOX, lse + row, 256, bar);
                bulk_load(st + 2 * AW_BOX + 256, D + row, 256, bar);
            });
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3;
    int key_lo = n * AW_BLK + wg * 64, key = key_lo + q * 16 + (lane >> 2);
    float dk[32], dv[32];
#pragma unroll
    for (int i = 0; i < 32; i++)
        dk[i] = 0.0f, dv[i] = 0.0f;
    mb_wait(m.fixed_bar, 0);
    for (int it = 0; it < iters; it++) {
        int s = it % AW_STAGES, tile = t0 + it % per_head;
        mb_wait(&m.full[s], (it / AW_STAGES) & 1);
        const unsigned char *st = m.ring + s * AW_STAGE;
        if (tile * AW_TILE + AW_TILE - 1 < key_lo) { /* every key is past every query */
            if (lane == 0) mb_arrive(&m.empty[s]);
            continue;
        }
        uint32_t kf[4][4], vf[4][4];
        float sT[32], dpT[32];
        aw_scores(sT, dpT, kf, vf, m.fixed + wg * AW_BOX, m.fixed + (2 + wg) * AW_BOX, st);
        const float *ls = (const float *)(st + 2 * AW_BOX), *Ds = ls + 64;
        int qb = tile * AW_TILE + 2 * (lane & 3);
        float2 lq[8]; /* this thread's 16 queries: lse times log2 e */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            lq[j] = *(const float2 *)(ls + 8 * j + 2 * (lane & 3));
            lq[j].x *= AW_LOG2E, lq[j].y *= AW_LOG2E;
        }
        auto l2 = [&](int j, int e, int) { return e ? lq[j].y : lq[j].x; };
        uint32_t pa[4][4], da[4][4];
        float pT[32];
        if (key_lo + 63 > tile * AW_TILE) /* the diagonal: keys past queries */
            aw_p(
                sT, pT, pa, [&](int h, int j, int e) { return key + 8 * h <= qb + 8 * j + e; }, l2);
        else
            aw_p(
                sT, pT, pa, [](int, int, int) { return true; }, l2);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_mma64_rs<1>(dv, pa[kk], wg_desc<true>(st + AW_BOX, kk), 1);
        wg_commit();
        wg_wait<1>(); /* dP^T done; dV may still run */
#pragma unroll
        for (int j = 0; j < 8; j++)
            lq[j] = *(const float2 *)(Ds + 8 * j + 2 * (lane & 3));
        aw_ds(pT, dpT, da, [&](int j, int e, int) { return e ? lq[j].y : lq[j].x; });
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_mma64_rs<1>(dk, da[kk], wg_desc<true>(st, kk), 1);
        wg_commit();
        /* all done before the step ends: products left in flight into the next step make
         * ptxas serialize every wgmma (its C7515) */
        wg_wait<0>();
        if (lane == 0) mb_arrive(&m.empty[s]);
    }
    int C = (H + 2 * KV) * AW_HD;
    bf16 *rows = dqkv + (size_t)(b * T + key_lo) * C;
    aw_store(rows + (H + g) * AW_HD, dk, 0.125f, C);
    aw_store(rows + (H + KV + g) * AW_HD, dv, 1.0f, C);
#endif
}

/* grid (H * B, T / 128): block (x, y) takes head x % H of batch x / H and queries
 * [128 m, 128 m + 128) with m = T / 128 - 1 - y, so the longest loops start first. */
__global__ void __launch_bounds__(AW_THREADS, 1)
    k_attn_bwd_dq_wg(bf16 *dqkv, const __grid_constant__ CUtensorMap tQKV,
                     const __grid_constant__ CUtensorMap tDO,
                     const __grid_constant__ CUtensorMap tO, const float *lse, float *D, int T,
                     int H, int KV) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char aw_raw[];
    int h = blockIdx.x % H, b = blockIdx.x / H, mq = T / AW_BLK - 1 - blockIdx.y;
    int g = h / (H / KV), iters = 2 * mq + 2;
    aw_smem m = aw_setup(aw_raw);
    if (threadIdx.x >= AW_CONSUMERS) {
        aw_produce(
            m, 6 * AW_BOX, iters, 2 * AW_BOX,
            [&](uint64_t *bar) {
                int r = b * T + mq * AW_BLK;
                for (int i = 0; i < 2; i++) {
                    tma_load(m.fixed + i * AW_BOX, &tQKV, bar, h * AW_HD, r + 64 * i, 0);
                    tma_load(m.fixed + (2 + i) * AW_BOX, &tDO, bar, h * AW_HD, r + 64 * i, 0);
                    tma_load(m.fixed + (4 + i) * AW_BOX, &tO, bar, h * AW_HD, r + 64 * i, 0);
                }
            },
            [&](int it, unsigned char *st, uint64_t *bar) {
                int r = b * T + it * AW_TILE;
                tma_load(st, &tQKV, bar, (H + g) * AW_HD, r, 0);
                tma_load(st + AW_BOX, &tQKV, bar, (H + KV + g) * AW_HD, r, 0);
            });
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3;
    int q_lo = mq * AW_BLK + wg * 64, qr = q_lo + q * 16 + (lane >> 2);
    const float *lrow = lse + (size_t)(b * H + h) * T;
    float l2[2] = {lrow[qr] * AW_LOG2E, lrow[qr + 8] * AW_LOG2E}, dd[2];
    float dq[32];
#pragma unroll
    for (int i = 0; i < 32; i++)
        dq[i] = 0.0f;
    mb_wait(m.fixed_bar, 0);
    /* D = rowsum(dO * O) of the warpgroup's rows, for this kernel and the dK/dV one after it:
     * the four threads of a row sum 16 columns each, then combine in a fixed order */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int r = q * 16 + (lane >> 2) + 8 * hh;
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            int off = r * 128 + (((2 * (lane & 3) + c) ^ (r & 7)) << 4);
            uint4 a = *(const uint4 *)(m.fixed + (2 + wg) * AW_BOX + off);
            uint4 o = *(const uint4 *)(m.fixed + (4 + wg) * AW_BOX + off);
            const __nv_bfloat162 *a2 = (const __nv_bfloat162 *)&a, *o2 = (const __nv_bfloat162 *)&o;
#pragma unroll
            for (int x = 0; x < 4; x++) {
                float2 fa = __bfloat1622float2(a2[x]), fo = __bfloat1622float2(o2[x]);
                acc = fmaf(fa.x, fo.x, acc);
                acc = fmaf(fa.y, fo.y, acc);
            }
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2);
        dd[hh] = acc;
        if ((lane & 3) == 0) D[(size_t)(b * H + h) * T + qr + 8 * hh] = acc;
    }
    for (int it = 0; it < iters; it++) {
        int s = it % AW_STAGES;
        mb_wait(&m.full[s], (it / AW_STAGES) & 1);
        const unsigned char *st = m.ring + s * AW_STAGE;
        if (it * AW_TILE > q_lo + 63) { /* every key of the tile is past every query */
            if (lane == 0) mb_arrive(&m.empty[s]);
            continue;
        }
        uint32_t qf[4][4], of[4][4];
        float sc[32], dp[32];
        aw_scores(sc, dp, qf, of, m.fixed + wg * AW_BOX, m.fixed + (2 + wg) * AW_BOX, st);
        int kb = it * AW_TILE + 2 * (lane & 3);
        uint32_t da[4][4];
        float pr[32];
        auto lq = [&](int, int, int hh) { return l2[hh]; };
        if (it * AW_TILE + 63 > q_lo) /* the diagonal: keys past queries */
            aw_p(
                sc, pr, da, [&](int hh, int j, int e) { return kb + 8 * j + e <= qr + 8 * hh; },
                lq);
        else
            aw_p(
                sc, pr, da, [](int, int, int) { return true; }, lq);
        wg_wait<0>();
        aw_ds(pr, dp, da, [&](int, int, int hh) { return dd[hh]; });
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_mma64_rs<1>(dq, da[kk], wg_desc<true>(st, kk), 1);
        wg_commit();
        wg_wait<0>(); /* as in k_attn_bwd_dkv_wg */
        if (lane == 0) mb_arrive(&m.empty[s]);
    }
    int C = (H + 2 * KV) * AW_HD;
    aw_store(dqkv + (size_t)(b * T + q_lo) * C + h * AW_HD, dq, 0.125f, C);
#endif
}

cudaError_t gt_cuda_attn_wgmma_init(void) {
    cudaError_t e = gt_wg_maps_init();
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attn_bwd_dkv_wg, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 AW_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attn_bwd_dq_wg, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 AW_SMEM);
    return e;
}

int gt_cuda_attn_wgmma_bwd(gt_cuda_exec cs, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, float *D, const attn_geo *g, int hd) {
    int B = g->B, T = g->T, H = g->H, KV = g->KV;
    if (hd != AW_HD || g->p > 0.0f || T % AW_BLK != 0 || H % KV != 0) return 0;
    if ((((uintptr_t)dqkv | (uintptr_t)dout | (uintptr_t)qkv | (uintptr_t)out | (uintptr_t)lse |
          (uintptr_t)D) &
         15u) != 0)
        return 0;
    CUtensorMap tQKV, tDO, tO;
    if (!gt_wg_map(&tQKV, (const bf16 *)qkv, (uint64_t)g->C, (uint64_t)B * T, 1, AW_HD, AW_TILE) ||
        !gt_wg_map(&tDO, (const bf16 *)dout, (uint64_t)H * AW_HD, (uint64_t)B * T, 1, AW_HD,
                   AW_TILE) ||
        !gt_wg_map(&tO, (const bf16 *)out, (uint64_t)H * AW_HD, (uint64_t)B * T, 1, AW_HD, AW_TILE))
        return 0;
    /* dQ first: it also writes D, which the dK/dV kernel reads */
    gt_launch(k_attn_bwd_dq_wg, dim3(H * B, T / AW_BLK), AW_THREADS, AW_SMEM, cs, (bf16 *)dqkv,
              tQKV, tDO, tO, lse, D, T, H, KV);
    gt_launch(k_attn_bwd_dkv_wg, dim3(KV * B, T / AW_BLK), AW_THREADS, AW_SMEM, cs, (bf16 *)dqkv,
              tQKV, tDO, lse, (const float *)D, T, H, KV);
    return 1;
}
