/* The fp8 grouped expert GEMMs (backend.h, "FP8 grouped expert GEMMs") on mma.sync
 * m16n8k32 (E4M3 / E5M2 in, fp32 accumulate, sm_89 and later), the structure of k_moe_mma.cu's
 * bf16 kernels: 128x128 block tiles of 4 warps of 64x64, a 3-stage cp.async pipeline, ldmatrix
 * fragment loads, device offsets (the grid sized for the worst case, each block finding its
 * expert's row tile), fixed summation order, no atomics. Both operands are K-contiguous, so
 * only k_moe_mma.cu's [outer][k] layout is needed: a k step of 128 fp8 codes is the 128 bytes
 * of that kernel's k step of 64 bf16, and the m16n8k32 fp8 fragments are, byte for byte, the
 * m16n8k16 bf16 ones (A: a0 = row g, bytes 4t..4t+3 of the first 16 of the k step's 32, a1 =
 * row g+8, a2 / a3 the second 16; B: b0 = column g, bytes 4t..4t+3, b1 the second 16; g =
 * lane / 4, t = lane % 4), so the b16 ldmatrix loads them unchanged. Whatever order the
 * hardware gives the 32 k positions inside a register pair, A's and B's bytes pair up alike,
 * so the sum is the same. The scales are applied in the epilogue from device pointers: the
 * activations' one inverse scale times the expert's (forward, data gradient) or the two
 * tensors' (weight gradient). Shapes the tensor-core kernels do not take (K not a multiple of
 * 16, unaligned tensors, the weight gradient's rows R not a multiple of 16) run the plain SIMT
 * kernels below, which compute the same sums one output at a time. */
#include <cuda_fp8.h>

#include "backend/cuda/moe_gemm.cuh"

#define FM_TILE 128
#define FM_BK 128 /* fp8 codes (bytes) of a k step */
#define FM_STAGES 3
#define FM_THREADS 128
#define FM_LD (FM_BK + 16)                 /* bytes of a [outer][k] row: conflict-free */
#define FM_OPERAND_BYTES (FM_TILE * FM_LD) /* 18432 */
#define FM_SMEM (FM_STAGES * 2 * FM_OPERAND_BYTES)
#define FM_LD_C (FM_TILE + 4) /* fp32 staging of a finished weight-gradient tile */
#define FM_SIMT_THREADS 256
#define FMT_E4M3 0 /* GT_FP8_E4M3 (core/fp8.h) */

static_assert(FM_TILE * FM_LD_C * 4 <= FM_SMEM, "the staged tile fits the pipeline's buffers");

/* c (16 x 8, fp32) += a (16 x 32) . b (32 x 8), fp8 operands of formats FA, FB */
template <int FA, int FB>
static __device__ __forceinline__ void fm_mma(float *c, const uint32_t *a, const uint32_t *b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FM_MMA(TA, TB)                                                                             \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB ".f32 {%0,%1,%2,%3}, "         \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                        \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
    if (FA == FMT_E4M3 && FB == FMT_E4M3)
        FM_MMA("e4m3", "e4m3");
    else if (FA == FMT_E4M3)
        FM_MMA("e4m3", "e5m2");
    else if (FB == FMT_E4M3)
        FM_MMA("e5m2", "e4m3");
    else
        FM_MMA("e5m2", "e5m2");
#undef FM_MMA
#else
    (void)c, (void)a, (void)b;
    asm volatile("trap;");
#endif
}

/* One [outer][k] operand tile of a k step: g points at (outer 0, k 0), ld is the byte stride of
 * its rows, outer_left and k_left bound the valid part (k_left a multiple of 16 or past the
 * tile). */
static __device__ __forceinline__ void fm_load(uint8_t *s, const uint8_t *g, size_t ld,
                                               int outer_left, int k_left, const uint8_t *safe) {
#pragma unroll
    for (int q = threadIdx.x; q < FM_TILE * (FM_BK / 16); q += FM_THREADS) {
        int o = q / (FM_BK / 16), kc = (q % (FM_BK / 16)) * 16;
        bool ok = o < outer_left && kc < k_left;
        gt_cp_async16(s + o * FM_LD + kc, ok ? g + (size_t)o * ld + kc : safe, ok);
    }
}

/* The same for the weight gradient, whose k runs over the rows [lo, hi) of one expert inside
 * the transposed operands' columns: the step starts at column c (a multiple of 16), chunks wholly
 * inside [lo, hi) are copied asynchronously, those wholly outside are zeros, and the (at most
 * two) chunks a row has across lo or hi are loaded whole (R % 16 == 0 keeps them in bounds),
 * their bytes outside [lo, hi) zeroed. */
static __device__ __forceinline__ void fm_load_cols(uint8_t *s, const uint8_t *g, size_t ld,
                                                    int outer_left, int c, int lo, int hi,
                                                    const uint8_t *safe) {
#pragma unroll
    for (int q = threadIdx.x; q < FM_TILE * (FM_BK / 16); q += FM_THREADS) {
        int o = q / (FM_BK / 16), kc = (q % (FM_BK / 16)) * 16, col = c + kc;
        bool any = o < outer_left && col < hi && col + 16 > lo;
        bool whole = any && col >= lo && col + 16 <= hi;
        uint8_t *dst = s + o * FM_LD + kc;
        if (!any || whole) {
            gt_cp_async16(dst, whole ? g + (size_t)o * ld + kc : safe, whole);
            continue;
        }
        uint4 v = *(const uint4 *)(g + (size_t)o * ld + kc);
        unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int b = 0; b < 16; b++)
            if (col + b < lo || col + b >= hi) w[b / 4] &= ~(0xffu << (8 * (b % 4)));
        *(uint4 *)dst = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* A fragments (16 rows x 32 k) of the warp's four m tiles at byte ks of the k step */
static __device__ __forceinline__ void fm_frag_a(uint32_t (*a)[4], const uint8_t *s, int m0,
                                                 int ks) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < 4; i++)
        gt_ldsm_x4(a[i],
                   (const bf16 *)(s + (m0 + i * 16 + (lane & 15)) * FM_LD + ks + (lane >> 4) * 16));
}

/* B fragments (32 k x 8 n) of the warp's eight n tiles at byte ks */
static __device__ __forceinline__ void fm_frag_b(uint32_t (*b)[2], const uint8_t *s, int n0,
                                                 int ks) {
    int lane = threadIdx.x & 31, mi = lane >> 3, j = lane & 7;
#pragma unroll
    for (int p = 0; p < 4; p++) {
        uint32_t r[4];
        gt_ldsm_x4(
            r, (const bf16 *)(s + (n0 + p * 16 + j + (mi >> 1) * 8) * FM_LD + ks + (mi & 1) * 16));
        b[2 * p][0] = r[0], b[2 * p][1] = r[1], b[2 * p + 1][0] = r[2], b[2 * p + 1][1] = r[3];
    }
}

/* The pipelined main loop over `iters` k steps, k_moe_mma.cu's mm_mainloop with fp8 MMAs */
template <int FA, int FB, typename Load>
static __device__ __forceinline__ void fm_mainloop(float (*acc)[8][4], unsigned char *sm, int iters,
                                                   Load load) {
    int warp = threadIdx.x >> 5, wm = (warp >> 1) * 64, wn = (warp & 1) * 64;
#pragma unroll
    for (int st = 0; st < FM_STAGES - 1; st++) {
        if (st < iters) load(st, st);
        gt_cp_commit();
    }
    for (int it = 0; it < iters; it++) {
        gt_cp_wait<FM_STAGES - 2>();
        __syncthreads(); /* stage it is in; everyone is done with stage it - 1 */
        int nx = it + FM_STAGES - 1;
        if (nx < iters) load(nx, nx % FM_STAGES);
        gt_cp_commit();
        const uint8_t *as = sm + (it % FM_STAGES) * 2 * FM_OPERAND_BYTES;
        const uint8_t *bs = as + FM_OPERAND_BYTES;
#pragma unroll
        for (int ks = 0; ks < FM_BK; ks += 32) {
            uint32_t a[4][4], b[8][2];
            fm_frag_a(a, as, wm, ks);
            fm_frag_b(b, bs, wn, ks);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    fm_mma<FA, FB>(acc[i][j], a[i], b[j]);
        }
    }
    gt_cp_wait<0>();
}

/* out[r, c] = sa sw[e] sum_k A[r, k] W_e[c, k] for the rows of each expert (W [E][Ncols][K]) */
template <int FA, int FB>
__global__ void __launch_bounds__(FM_THREADS)
    k_moe_fp8_mm(bf16 *out, const uint8_t *A, const uint8_t *w, const float *sa, const float *sw,
                 const int32_t *offsets, int E, int Ncols, int Kdim) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char sm[];
    int e, r0, r1;
    if (!gt_moe_find_tile<FM_TILE>(offsets, E, blockIdx.y, &e, &r0, &r1)) return;
    int c0 = blockIdx.x * FM_TILE;
    const uint8_t *we = w + (size_t)e * Ncols * Kdim;
    float acc[4][8][4] = {};
    auto load = [&](int it, int st) {
        int k0 = it * FM_BK;
        uint8_t *as = sm + st * 2 * FM_OPERAND_BYTES, *bs = as + FM_OPERAND_BYTES;
        fm_load(as, A + (size_t)r0 * Kdim + k0, (size_t)Kdim, r1 - r0, Kdim - k0, A);
        fm_load(bs, we + (size_t)c0 * Kdim + k0, (size_t)Kdim, Ncols - c0, Kdim - k0, w);
    };
    fm_mainloop<FA, FB>(acc, sm, (Kdim + FM_BK - 1) / FM_BK, load);
    float scale = sa[0] * sw[e];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wm = (warp >> 1) * 64, wn = (warp & 1) * 64;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = r0 + wm + i * 16 + (lane >> 2) + h * 8;
            if (row >= r1) continue;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int col = c0 + wn + j * 8 + (lane & 3) * 2;
                if (col < Ncols)
                    *(__nv_bfloat162 *)(out + (size_t)row * Ncols + col) = __floats2bfloat162_rn(
                        acc[i][j][2 * h] * scale, acc[i][j][2 * h + 1] * scale);
            }
        }
}

/* dw[e][n, k] (+)= sg sx sum over expert e's columns r of G[n, r] X[k, r] (G [Nf][R], X [K][R]);
 * overwriting writes the whole tile, zeros for an expert without rows */
template <int FA, int FB>
__global__ void __launch_bounds__(FM_THREADS)
    k_moe_fp8_dw(float *dw, const uint8_t *G, const uint8_t *X, const float *sg, const float *sx,
                 const int32_t *offsets, int R, int Nf, int K, int accumulate) {
    GT_PDL_ENTRY();
    extern __shared__ __align__(128) unsigned char sm[];
    int e = blockIdx.z, k0 = blockIdx.x * FM_TILE, n0 = blockIdx.y * FM_TILE;
    int lo = max(0, offsets[e]), hi = min(R, max(lo, offsets[e + 1]));
    if (hi <= lo && accumulate) return;
    int base = lo & ~15, iters = hi > lo ? (hi - base + FM_BK - 1) / FM_BK : 0;
    float acc[4][8][4] = {};
    auto load = [&](int it, int st) {
        int c = base + it * FM_BK;
        uint8_t *gs = sm + st * 2 * FM_OPERAND_BYTES, *xs = gs + FM_OPERAND_BYTES;
        fm_load_cols(gs, G + (size_t)n0 * R + c, (size_t)R, Nf - n0, c, lo, hi, G);
        fm_load_cols(xs, X + (size_t)k0 * R + c, (size_t)R, K - k0, c, lo, hi, X);
    };
    fm_mainloop<FA, FB>(acc, sm, iters, load);
    float scale = sg[0] * sx[0];
    __syncthreads(); /* every warp is done with the pipeline's buffers */
    float *cs = (float *)sm;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wm = (warp >> 1) * 64, wn = (warp & 1) * 64;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int r = wm + i * 16 + (lane >> 2) + h * 8, c = wn + j * 8 + (lane & 3) * 2;
                *(float2 *)(cs + r * FM_LD_C + c) =
                    make_float2(acc[i][j][2 * h] * scale, acc[i][j][2 * h + 1] * scale);
            }
    __syncthreads();
    gt_moe_dw_store_tile<FM_THREADS, FM_LD_C>(dw + (size_t)e * Nf * K, cs, n0, k0, Nf, K,
                                              accumulate);
}

/* ---- the SIMT kernels for the other shapes ---- */

static __device__ __forceinline__ float fp8_value(uint8_t v, int fmt) {
    __half_raw h =
        __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, fmt == FMT_E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(h));
}

/* one output a thread: the expert of row r by a walk over the offsets */
__global__ void k_moe_fp8_mm_simt(bf16 *out, const uint8_t *A, const uint8_t *w, const float *sa,
                                  const float *sw, const int32_t *offsets, int R, int E, int Ncols,
                                  int Kdim, int fa, int fb) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, (size_t)R * Ncols) {
        int r = (int)(i / Ncols), c = (int)(i % Ncols), e = -1;
        for (int g = 0; g < E && e < 0; g++)
            if (r >= offsets[g] && r < offsets[g + 1]) e = g;
        if (e < 0) continue;
        const uint8_t *a = A + (size_t)r * Kdim, *we = w + ((size_t)e * Ncols + c) * Kdim;
        float acc = 0.0f;
        for (int k = 0; k < Kdim; k++)
            acc += fp8_value(a[k], fa) * fp8_value(we[k], fb);
        out[i] = tobf(acc * (sa[0] * sw[e]));
    }
}

__global__ void k_moe_fp8_dw_simt(float *dw, const uint8_t *G, const uint8_t *X, const float *sg,
                                  const float *sx, const int32_t *offsets, int R, int E, int Nf,
                                  int K, int accumulate, int fg, int fx) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(i, (size_t)E * Nf * K) {
        int e = (int)(i / ((size_t)Nf * K)), n = (int)(i / K % Nf), k = (int)(i % K);
        int lo = max(0, offsets[e]), hi = min(R, max(lo, offsets[e + 1]));
        const uint8_t *g = G + (size_t)n * R, *x = X + (size_t)k * R;
        float acc = 0.0f;
        for (int r = lo; r < hi; r++)
            acc += fp8_value(g[r], fg) * fp8_value(x[r], fx);
        float v = acc * (sg[0] * sx[0]);
        dw[i] = accumulate ? dw[i] + v : v;
    }
}

/* ---- launchers ---- */

#define FM_KERNEL(NAME, FA, FB)                                                                    \
    (FA ? (FB ? NAME<1, 1> : NAME<1, 0>) : (FB ? NAME<0, 1> : NAME<0, 0>))

extern "C" cudaError_t gt_cuda_moe_fp8_init(void) {
    void (*mm[4])(bf16 *, const uint8_t *, const uint8_t *, const float *, const float *,
                  const int32_t *, int, int, int) = {k_moe_fp8_mm<0, 0>, k_moe_fp8_mm<0, 1>,
                                                     k_moe_fp8_mm<1, 0>, k_moe_fp8_mm<1, 1>};
    void (*dwk[4])(float *, const uint8_t *, const uint8_t *, const float *, const float *,
                   const int32_t *, int, int, int, int) = {k_moe_fp8_dw<0, 0>, k_moe_fp8_dw<0, 1>,
                                                           k_moe_fp8_dw<1, 0>, k_moe_fp8_dw<1, 1>};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 4 && e == cudaSuccess; i++) {
        e = cudaFuncSetAttribute(mm[i], cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(dwk[i], cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM);
    }
    return e;
}

static int fm_fmt_ok(gt_fp8_format f) {
    return f == GT_FP8_E4M3 || f == GT_FP8_E5M2;
}

static int al16p(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

static void cuda_moe_fp8_matmul(gt_backend *b, gt_stream *s, void *out, int flags, gt_fp8_operand a,
                                gt_fp8_operand w, const int32_t *offsets, int R, int E, int Nf,
                                int K) {
    (void)flags; /* mma.sync sums in the tensor cores' own fp32 accumulator either way */
    if (R < 0 || E <= 0 || Nf <= 0 || K <= 0 || !out || !a.q || !w.q || !a.scale_inv ||
        !w.scale_inv || !offsets || !fm_fmt_ok(a.format) || !fm_fmt_ok(w.format)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "moe_fp8_matmul: bad arguments (R=%d E=%d Nf=%d K=%d, or a NULL operand)",
                        R, E, Nf, K);
        return;
    }
    if (b->planning || R == 0) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    int fa = a.format == GT_FP8_E5M2, fb = w.format == GT_FP8_E5M2;
    const uint8_t *qa = (const uint8_t *)a.q, *qw = (const uint8_t *)w.q;
    if (al16p(out) && al16p(qa) && al16p(qw) && K % 16 == 0 && Nf % 8 == 0) {
        dim3 grid((Nf + FM_TILE - 1) / FM_TILE, (R + FM_TILE - 1) / FM_TILE + E);
        gt_launch(FM_KERNEL(k_moe_fp8_mm, fa, fb), grid, FM_THREADS, FM_SMEM, cs, (bf16 *)out, qa,
                  qw, a.scale_inv, w.scale_inv, offsets, E, Nf, K);
    } else {
        gt_launch(k_moe_fp8_mm_simt, gt_grid((size_t)R * Nf, FM_SIMT_THREADS), FM_SIMT_THREADS, 0,
                  cs, (bf16 *)out, qa, qw, a.scale_inv, w.scale_inv, offsets, R, E, Nf, K, fa, fb);
    }
    GT_CUDA_LAUNCHED(b, "moe_fp8_matmul");
}

static void cuda_moe_fp8_matmul_wgrad(gt_backend *b, gt_stream *s, float *dw, gt_fp8_operand g,
                                      gt_fp8_operand x, const int32_t *offsets, int R, int E,
                                      int Nf, int K, int accumulate) {
    if (R < 0 || E <= 0 || Nf <= 0 || K <= 0 || !dw || !g.q || !x.q || !g.scale_inv ||
        !x.scale_inv || !offsets || !fm_fmt_ok(g.format) || !fm_fmt_ok(x.format)) {
        gt_backend_fail(
            b, GT_ERR_INVALID,
            "moe_fp8_matmul_wgrad: bad arguments (R=%d E=%d Nf=%d K=%d, or a NULL operand)", R, E,
            Nf, K);
        return;
    }
    if (b->planning) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    int fg = g.format == GT_FP8_E5M2, fx = x.format == GT_FP8_E5M2;
    const uint8_t *qg = (const uint8_t *)g.q, *qx = (const uint8_t *)x.q;
    if (R > 0 && al16p(dw) && al16p(qg) && al16p(qx) && R % 16 == 0 && Nf % 8 == 0 && K % 8 == 0) {
        dim3 grid((K + FM_TILE - 1) / FM_TILE, (Nf + FM_TILE - 1) / FM_TILE, E);
        gt_launch(FM_KERNEL(k_moe_fp8_dw, fg, fx), grid, FM_THREADS, FM_SMEM, cs, dw, qg, qx,
                  g.scale_inv, x.scale_inv, offsets, R, Nf, K, accumulate != 0);
    } else {
        gt_launch(k_moe_fp8_dw_simt, gt_grid((size_t)E * Nf * K, FM_SIMT_THREADS), FM_SIMT_THREADS,
                  0, cs, dw, qg, qx, g.scale_inv, x.scale_inv, offsets, R, E, Nf, K,
                  accumulate != 0, fg, fx);
    }
    GT_CUDA_LAUNCHED(b, "moe_fp8_matmul_wgrad");
}

extern "C" void gt_cuda_register_moe_fp8_ops(gt_backend_ops *ops) {
    ops->moe_fp8_matmul = cuda_moe_fp8_matmul;
    ops->moe_fp8_matmul_wgrad = cuda_moe_fp8_matmul_wgrad;
}
