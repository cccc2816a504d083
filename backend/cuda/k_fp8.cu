/* FP8 casts and delayed scaling's update on the CUDA backend (backend.h, "FP8 linear layers"),
 * bitwise what the CPU emulation (backend/cpu/cpu_fp8.c) computes: amax as the max of |x|'s bits
 * (order-free, so deterministic), the scale from it by the same float operations, the cast by
 * the satfinite conversions of cuda_fp8.h (round to nearest even), in pairs where it can. Per-
 * tensor scaling here; the blockwise casts are k_fp8_block.cu's. Every pass is bound by memory
 * bandwidth: 16-byte loads, several in flight a thread, and coalesced stores. */
#include <cuda_fp8.h>
#include <float.h>

#include "backend/cuda/cuda_common.cuh"

#define FP8_THREADS 256
#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
/* GT_FP8_E4M3 / GT_FP8_E5M2 (core/fp8.h) */
#define FMT_E4M3 0

static __device__ float fmt_max(int fmt) {
    return fmt == FMT_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX;
}

/* gt_fp8_scale_from_amax (core/fp8.h) in the same float operations */
static __device__ float scale_from_amax(float amax, float prev, int fmt, int margin) {
    if (!(amax > 0.0f) || isinf(amax) || isnan(amax)) return prev;
    float s = (fmt_max(fmt) / amax) / ldexpf(1.0f, margin);
    return isinf(s) ? FLT_MAX : s;
}

/* Where a cast takes its scale: SCALE_CURRENT, from this tensor's amax (bits in tmp[0], from
 * k_fp8_amax just before, or where the tensor's producer folded them in: spec.amax_bits),
 * every block deriving the same scale by the same float operations;
 * SCALE_META, the one meta holds (delayed scaling, or a tensor whose scale its earlier cast
 * recorded), with the amax added into meta when the cast records one. */
#define SCALE_CURRENT 0
#define SCALE_META 1

typedef struct cast_scale {
    int mode, record, fmt;
    const unsigned *amax_bits; /* SCALE_CURRENT */
    gt_fp8_meta *meta;
} cast_scale;

/* The scale source of tensor e of a batched cast (fp8_cast_experts): its own amax and meta */
static __device__ cast_scale scale_at(cast_scale c, unsigned e) {
    c.amax_bits += e;
    c.meta += e;
    return c;
}

static __device__ float scale_of(const cast_scale &c) {
    if (c.mode == SCALE_META) return c.meta->scale;
    return scale_from_amax(__uint_as_float(*c.amax_bits), 1.0f, c.fmt, 0);
}

/* One thread of the grid: the GEMMs' inverse scale(s) and, under current scaling, the flag
 * (a non-finite amax, or a scale that overflowed: the amax is the whole tensor's, so this one
 * check covers every element, whoever took the amax) and (record) the tensor's meta */
static __device__ void publish_scale(const cast_scale &c, float s, float *scale_inv,
                                     float *scale_inv2, gt_step_state *st) {
    float inv = c.mode == SCALE_META ? c.meta->scale_inv : 1.0f / s;
    *scale_inv = inv;
    if (scale_inv2) *scale_inv2 = inv;
    if (c.mode != SCALE_CURRENT) return;
    unsigned bits = *c.amax_bits;
    float amax = __uint_as_float(bits);
    if (bits >= 0x7f800000u || (s == FLT_MAX && amax > 0.0f))
        atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
    if (c.record) {
        c.meta->scale = s;
        c.meta->scale_inv = inv;
        c.meta->amax = amax;
    }
}

/* A block's max of |x|'s bits into the meta (delayed, recording) and the NaN flag: the cast
 * reads every element anyway, so SCALE_META casts need no amax pass of their own. */
static __device__ void block_amax_done(const cast_scale &c, unsigned m, unsigned *sh,
                                       gt_step_state *st) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
        m = o2 > m ? o2 : m;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        m = sh[w] > m ? sh[w] : m;
    if (m >= 0x7f800000u) atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
    if (c.record) atomicMax((unsigned *)&c.meta->amax, m);
}

static __device__ __forceinline__ uint8_t to_fp8(float v, float s, __nv_fp8_interpretation_t it) {
    return (uint8_t)__nv_cvt_float_to_fp8(v * s, __NV_SATFINITE, it);
}

/* The codes of v[0..7] * s, element k in byte k, converted in pairs: the x2 conversion is the
 * instruction the scalar one issues with a zero beside it, so each code is the same bits */
static __device__ __forceinline__ uint2 to_fp8x8(const float *v, float s,
                                                 __nv_fp8_interpretation_t it) {
    unsigned h[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        h[k] = __nv_cvt_float2_to_fp8x2(make_float2(v[2 * k] * s, v[2 * k + 1] * s), __NV_SATFINITE,
                                        it);
    return make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
}

/* max(m, bits of |v[k]|) over the 8 */
static __device__ __forceinline__ unsigned max_abs_bits8(unsigned m, const float *v) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        unsigned b = gt_abs_bits(v[k]);
        m = b > m ? b : m;
    }
    return m;
}

/* The flat passes keep several 16-byte loads of a thread in flight before using any (the cast
 * FP8_UNROLL, the amax pass, which holds nothing else in registers, FP8_AMAX_UNROLL), the
 * block's FP8_THREADS threads covering that many consecutive runs of FP8_THREADS chunks of 8
 * (each load instruction coalesced); a grid stride on from there. */
#define FP8_UNROLL 4
#define FP8_BLOCK_CHUNKS (FP8_THREADS * FP8_UNROLL)
#define FP8_AMAX_UNROLL 8
#define FP8_AMAX_BLOCK_CHUNKS (FP8_THREADS * FP8_AMAX_UNROLL)
/* the amax pass in at most this many blocks (about one resident wave on the H200), each
 * striding on, so that its atomics stay few */
#define FP8_AMAX_MAX_BLOCKS 1024u

/* *amax_bits = max(*amax_bits, bits of |x|) over the n elements, 8 a thread where x is 16-byte
 * aligned (a non-finite amax sets GT_NAN_FP8 in the cast: publish_scale). Batched
 * (fp8_cast_experts), blockIdx.y is the tensor: amax_bits[y] of the n elements from x + y n. */
__global__ void k_fp8_amax(unsigned *amax_bits, const bf16 *x, size_t n, int vec) {
    GT_PDL_ENTRY();
    amax_bits += blockIdx.y;
    x += (size_t)blockIdx.y * n;
    __shared__ unsigned sh[FP8_THREADS / GT_WARP];
    unsigned m = 0;
    size_t nv = vec ? n / 8 : 0;
    const uint4 *xv = (const uint4 *)x;
    for (size_t i0 = (size_t)blockIdx.x * FP8_AMAX_BLOCK_CHUNKS + threadIdx.x; i0 < nv;
         i0 += (size_t)gridDim.x * FP8_AMAX_BLOCK_CHUNKS) {
        uint4 u[FP8_AMAX_UNROLL];
#pragma unroll
        for (int k = 0; k < FP8_AMAX_UNROLL; k++) {
            size_t i = i0 + (size_t)k * FP8_THREADS;
            u[k] = i < nv ? xv[i] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < FP8_AMAX_UNROLL; k++) {
            float f[8];
            unpack8(f, u[k]);
            m = max_abs_bits8(m, f);
        }
    }
    GT_GRID_STRIDE(i, n - 8 * nv) {
        unsigned b = gt_abs_bits(ldf(x + 8 * nv + i));
        m = b > m ? b : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned o2 = __shfl_xor_sync(0xffffffffu, m, o);
        m = o2 > m ? o2 : m;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        m = sh[w] > m ? sh[w] : m;
    atomicMax(amax_bits, m);
}

/* q[e] = fp8(x[e] * scale) over n elements in order (no transpose), 8 a thread where x is 16-
 * and q 8-byte aligned. Batched, blockIdx.y is the tensor: x + y n to q + y n, scale_inv[y],
 * its own scale source (scale_at). */
__global__ void k_fp8_cast_flat(uint8_t *q, float *scale_inv, const bf16 *x, size_t n, int vec,
                                cast_scale c, gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ unsigned sh[FP8_THREADS / GT_WARP];
    x += (size_t)blockIdx.y * n;
    q += (size_t)blockIdx.y * n;
    scale_inv += blockIdx.y;
    c = scale_at(c, blockIdx.y);
    float s = scale_of(c);
    if (blockIdx.x == 0 && threadIdx.x == 0) publish_scale(c, s, scale_inv, NULL, st);
    __nv_fp8_interpretation_t it = c.fmt == FMT_E4M3 ? __NV_E4M3 : __NV_E5M2;
    unsigned m = 0;
    size_t nv = vec ? n / 8 : 0;
    const uint4 *xv = (const uint4 *)x;
    uint2 *qv = (uint2 *)q;
    for (size_t i0 = (size_t)blockIdx.x * FP8_BLOCK_CHUNKS + threadIdx.x; i0 < nv;
         i0 += (size_t)gridDim.x * FP8_BLOCK_CHUNKS) {
        uint4 u[FP8_UNROLL];
#pragma unroll
        for (int k = 0; k < FP8_UNROLL; k++) {
            size_t i = i0 + (size_t)k * FP8_THREADS;
            u[k] = i < nv ? xv[i] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < FP8_UNROLL; k++) {
            size_t i = i0 + (size_t)k * FP8_THREADS;
            if (i >= nv) break;
            float f[8];
            unpack8(f, u[k]);
            m = max_abs_bits8(m, f);
            qv[i] = to_fp8x8(f, s, it);
        }
    }
    GT_GRID_STRIDE(i, n - 8 * nv) {
        size_t e = 8 * nv + i;
        float v = ldf(x + e);
        unsigned b = gt_abs_bits(v);
        m = b > m ? b : m;
        q[e] = to_fp8(v, s, it);
    }
    if (c.mode == SCALE_META) block_amax_done(c, m, sh, st);
}

/* The transposing cast in FP8_TILE_ROWS x FP8_TILE_COLS tiles of x [rows, cols]: each block
 * reads its tile once, coalesced, converts it once, and writes q [rows, cols] (when q) straight
 * from registers and qt [cols, rows] (when qt) from the codes in shared memory, so both writes
 * are coalesced too; the transposed read a plain kernel would make strides through memory.
 *
 * Loading: 16 threads cover a tile row in 16-byte chunks; thread t reads chunk t % 16 of tile
 * rows t / 16 + FP8_TILE_LOAD_ROWS p, its FP8_TILE_LOADS loads in flight at once, and stores each
 * row's 8 codes as two words in the shared tile. Transposing: a tile column's codes are one
 * stretch of a qt row, FP8_TILE_SEGS threads' 16-byte stores; thread t takes segment
 * seg = t % FP8_TILE_SEGS (tile rows 16 seg .. 16 seg + 15) of word w = t / FP8_TILE_SEGS (tile
 * columns 4 w .. 4 w + 3), turns each 4 x 4 block of bytes around in registers (byte permutes)
 * and stores 16 bytes to each of those 4 qt rows. A warp's 32 reads of one step fall on the
 * same row offset of every segment; the shared words are swizzled (word w of row r lives at
 * w ^ (r / 16) * FP8_TILE_SWIZZLE) so that they hit 32 distinct banks, and the loading's stores
 * do too. 64-row tiles rather than 128: the same eight loads a thread, half the threads and
 * shared memory a block, so twice the blocks fit an SM and one block's loads overlap another's
 * transpose and stores (dev/cuda/fp8_cast_bench.c measures either). */
#define FP8_TILE_ROWS 64
#define FP8_TILE_COLS 128
#define FP8_TILE_THREADS (2 * FP8_TILE_ROWS)
#define FP8_TILE_WORDS (FP8_TILE_COLS / 4)                          /* a tile row's codes */
#define FP8_TILE_LOAD_ROWS (FP8_TILE_THREADS / (FP8_TILE_COLS / 8)) /* rows of a load step */
#define FP8_TILE_LOADS (FP8_TILE_ROWS / FP8_TILE_LOAD_ROWS)         /* a thread's loads */
#define FP8_TILE_SPAN 16 /* tile rows one transposing thread reads: its 16-byte qt stores */
#define FP8_TILE_SEGS (FP8_TILE_ROWS / FP8_TILE_SPAN)     /* threads per qt row stretch */
#define FP8_TILE_SWIZZLE (FP8_TILE_WORDS / FP8_TILE_SEGS) /* a warp's words of one segment */
static_assert(FP8_TILE_COLS == 128 && (FP8_TILE_ROWS == 64 || FP8_TILE_ROWS == 128) &&
                  FP8_TILE_SEGS * FP8_TILE_WORDS == FP8_TILE_THREADS &&
                  GT_WARP / FP8_TILE_SEGS == FP8_TILE_SWIZZLE,
              "the tile kernel's thread maps assume 128-column tiles of 64 or 128 rows");
/* the shared word of tile row r's codes 4 w .. 4 w + 3 (the swizzle above) */
static __device__ __forceinline__ int tile_word(int r, int w) {
    return w ^ ((r / FP8_TILE_SPAN) * FP8_TILE_SWIZZLE);
}

/* x's 8 bf16 at row r, columns cc .. cc + 7 as 16 bytes, zeros past the edges; one 16-byte load
 * where the chunk is whole and aligned (vec) */
static __device__ __forceinline__ uint4 load_chunk(const bf16 *x, int rows, int cols, int r, int cc,
                                                   int vec) {
    if (r >= rows) return make_uint4(0, 0, 0, 0);
    const unsigned short *src = (const unsigned short *)x + (size_t)r * cols + cc;
    if (vec && cc + 8 <= cols) return *(const uint4 *)src;
    unsigned w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (cc + k < cols) w[k / 2] |= (unsigned)src[k] << (16 * (k % 2));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* the first n (> 0) of the 16 bytes u at dst: one 16-byte store where all 16 fit and
 * align >= 2 (dst 16-byte aligned), 8-byte halves where align >= 1, else bytes */
static __device__ __forceinline__ void store16(uint8_t *dst, uint4 u, int n, int align) {
    if (n >= 16 && align >= 2) {
        *(uint4 *)dst = u;
        return;
    }
    unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (n >= 8 * h + 8 && align >= 1) {
            *(uint2 *)(dst + 8 * h) = make_uint2(w[2 * h], w[2 * h + 1]);
            continue;
        }
#pragma unroll
        for (int k = 8 * h; k < 8 * h + 8; k++)
            if (k < n) dst[k] = (uint8_t)(w[k / 4] >> (8 * (k % 4)));
    }
}

/* b[k] = byte k of a[0], a[1], a[2], a[3]: a 4 x 4 block of bytes transposed */
static __device__ __forceinline__ void transpose4x4(unsigned *b, const unsigned *a) {
    unsigned lo01 = __byte_perm(a[0], a[1], 0x5140), hi01 = __byte_perm(a[0], a[1], 0x7362);
    unsigned lo23 = __byte_perm(a[2], a[3], 0x5140), hi23 = __byte_perm(a[2], a[3], 0x7362);
    b[0] = __byte_perm(lo01, lo23, 0x5410);
    b[1] = __byte_perm(lo01, lo23, 0x7632);
    b[2] = __byte_perm(hi01, hi23, 0x5410);
    b[3] = __byte_perm(hi01, hi23, 0x7632);
}

/* vec_in: x 16-byte aligned and cols % 8 == 0; vec_q: q 8-byte aligned and cols % 8 == 0;
 * vec_qt: 2 where qt is 16-byte aligned and rows % 16 == 0, 1 where 8-byte and rows % 8 == 0
 * (either condition on cols or rows keeps every tensor of a batch as aligned as the first).
 * Batched, blockIdx.z is the tensor: x + z rows cols to q and qt at the same offset, the
 * inverse scales [z], its own scale source (scale_at). */
__global__ void __launch_bounds__(FP8_TILE_THREADS)
    k_fp8_cast_tiles(uint8_t *q, uint8_t *qt, float *scale_inv, float *scale_inv_t, const bf16 *x,
                     int rows, int cols, int vec_in, int vec_q, int vec_qt, cast_scale c,
                     gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ __align__(16) unsigned tile[FP8_TILE_ROWS][FP8_TILE_WORDS];
    __shared__ unsigned sh[FP8_TILE_THREADS / GT_WARP];
    size_t zoff = (size_t)blockIdx.z * rows * cols;
    x += zoff;
    if (q) {
        q += zoff;
        scale_inv += blockIdx.z;
    }
    if (qt) {
        qt += zoff;
        scale_inv_t += blockIdx.z;
    }
    c = scale_at(c, blockIdx.z);
    float s = scale_of(c);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        publish_scale(c, s, q ? scale_inv : scale_inv_t, q && qt ? scale_inv_t : NULL, st);
    __nv_fp8_interpretation_t it = c.fmt == FMT_E4M3 ? __NV_E4M3 : __NV_E5M2;
    int r0 = blockIdx.y * FP8_TILE_ROWS, c0 = blockIdx.x * FP8_TILE_COLS;
    int chunk = threadIdx.x % (FP8_TILE_COLS / 8); /* tile columns 8 chunk .. 8 chunk + 7 */
    int row0 = threadIdx.x / (FP8_TILE_COLS / 8);  /* tile rows row0 + FP8_TILE_LOAD_ROWS p */
    int cc = c0 + 8 * chunk;
    uint4 raw[FP8_TILE_LOADS];
#pragma unroll
    for (int p = 0; p < FP8_TILE_LOADS; p++)
        raw[p] = load_chunk(x, rows, cols, r0 + row0 + FP8_TILE_LOAD_ROWS * p, cc, vec_in);
    unsigned m = 0;
#pragma unroll
    for (int p = 0; p < FP8_TILE_LOADS; p++) {
        int tr = row0 + FP8_TILE_LOAD_ROWS * p, r = r0 + tr;
        float f[8];
        unpack8(f, raw[p]);
        m = max_abs_bits8(m, f);
        uint2 codes = to_fp8x8(f, s, it);
        *(uint2 *)&tile[tr][tile_word(tr, 2 * chunk)] = codes;
        if (q && r < rows) {
            uint8_t *dst = q + (size_t)r * cols + cc;
            if (vec_q && cc + 8 <= cols)
                *(uint2 *)dst = codes;
            else
                for (int k = 0; k < 8 && cc + k < cols; k++)
                    dst[k] = (uint8_t)((k < 4 ? codes.x : codes.y) >> (8 * (k % 4)));
        }
    }
    if (c.mode == SCALE_META) block_amax_done(c, m, sh, st); /* holds a __syncthreads */
    if (!qt) return;
    __syncthreads();
    int seg = threadIdx.x % FP8_TILE_SEGS, w = threadIdx.x / FP8_TILE_SEGS;
    int qc = r0 + FP8_TILE_SPAN * seg; /* the qt columns (x's rows) this thread writes */
    if (qc >= rows) return;
    unsigned a[FP8_TILE_SPAN];
#pragma unroll
    for (int i = 0; i < FP8_TILE_SPAN; i++) {
        int tr = FP8_TILE_SPAN * seg + i;
        a[i] = tile[tr][tile_word(tr, w)];
    }
    unsigned b[4][FP8_TILE_SPAN / 4]; /* b[k][g]: column 4 w + k of tile rows 4 g .. 4 g + 3 */
#pragma unroll
    for (int g = 0; g < FP8_TILE_SPAN / 4; g++) {
        unsigned t[4];
        transpose4x4(t, a + 4 * g);
#pragma unroll
        for (int k = 0; k < 4; k++)
            b[k][g] = t[k];
    }
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int qr = c0 + 4 * w + k;
        if (qr >= cols) break;
        store16(qt + (size_t)qr * rows + qc, make_uint4(b[k][0], b[k][1], b[k][2], b[k][3]),
                rows - qc, vec_qt);
    }
}

static int al8(const void *p) {
    return ((uintptr_t)p & 7u) == 0;
}

static int cast_args_ok(gt_backend *b, const char *op, const void *q, const float *scale_inv,
                        const void *x, int rows, int cols, gt_fp8_cast_spec spec,
                        const gt_fp8_meta *meta, const gt_step_state *st) {
    if (rows <= 0 || cols <= 0 || !q || !scale_inv || !x || !st) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: bad shape %d x %d or NULL tensor", op, rows, cols);
        return 0;
    }
    if (!meta && spec.scaling != GT_FP8_BLOCKWISE) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: tensorwise and delayed scaling need the tensor's gt_fp8_meta", op);
        return 0;
    }
    if (spec.amax_bits && spec.scaling != GT_FP8_TENSORWISE) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: an amax taken by the producer is for tensorwise scaling only", op);
        return 0;
    }
    if ((size_t)(rows + FP8_TILE_ROWS - 1) / FP8_TILE_ROWS > GT_MAX_GRID) {
        gt_backend_fail(b, GT_ERR_INVALID, "%s: %d rows exceed the cast's grid (%u tiles of %d)",
                        op, rows, GT_MAX_GRID, FP8_TILE_ROWS);
        return 0;
    }
    return 1;
}

/* Current scaling's amax pass (the scale needs the whole tensor's amax before any element is
 * cast), unless x's producer took the amax already (spec.amax_bits); delayed scaling needs
 * none. Returns the cast's scale source. count tensors of n elements each (fp8_cast_experts;
 * 1 for one tensor): tmp[e] and meta[e] are tensor e's, the pass's blocks split among them. */
static cast_scale begin_cast(gt_backend *b, gt_cuda_exec ex, const void *x, size_t n, int count,
                             gt_fp8_cast_spec spec, gt_fp8_meta *meta, unsigned *tmp) {
    cast_scale c = {SCALE_META, spec.record, (int)spec.format, tmp, meta};
    if (spec.scaling != GT_FP8_TENSORWISE) return c;
    c.mode = SCALE_CURRENT;
    if (spec.amax_bits) {
        c.amax_bits = (const unsigned *)spec.amax_bits;
        return c;
    }
    GT_CUDA_OP(b, cudaMemsetAsync(tmp, 0, (size_t)count * sizeof(unsigned), ex.cs));
    int vec = al16(x) && (count == 1 || n % 8 == 0); /* every tensor 16-byte aligned */
    unsigned grid = gt_grid(vec ? n / 8 / FP8_AMAX_UNROLL + 1 : n, FP8_THREADS);
    unsigned cap = FP8_AMAX_MAX_BLOCKS / (unsigned)count;
    if (cap < 1) cap = 1;
    if (grid > cap) grid = cap;
    gt_launch(k_fp8_amax, dim3(grid, (unsigned)count), FP8_THREADS, 0, ex, tmp, (const bf16 *)x, n,
              vec);
    return c;
}

static void launch_tiles(gt_cuda_exec ex, void *q, void *qt, float *si, float *sit, const void *x,
                         int rows, int cols, int count, cast_scale c, gt_step_state *st) {
    dim3 grid((unsigned)((cols + FP8_TILE_COLS - 1) / FP8_TILE_COLS),
              (unsigned)((rows + FP8_TILE_ROWS - 1) / FP8_TILE_ROWS), (unsigned)count);
    int vec_in = al16(x) && cols % 8 == 0;
    int vec_q = q && al8(q) && cols % 8 == 0;
    int vec_qt = !qt                                     ? 0
                 : al16(qt) && rows % FP8_TILE_SPAN == 0 ? 2
                 : al8(qt) && rows % 8 == 0              ? 1
                                                         : 0;
    gt_launch(k_fp8_cast_tiles, grid, FP8_TILE_THREADS, 0, ex, (uint8_t *)q, (uint8_t *)qt, si, sit,
              (const bf16 *)x, rows, cols, vec_in, vec_q, vec_qt, c, st);
}

static void cuda_fp8_cast(gt_backend *b, gt_stream *s, void *q, float *scale_inv, const void *x,
                          int rows, int cols, int transpose, gt_fp8_cast_spec spec,
                          gt_fp8_meta *meta, gt_step_state *st) {
    if (!cast_args_ok(b, "fp8_cast", q, scale_inv, x, rows, cols, spec, meta, st)) return;
    if (spec.scaling == GT_FP8_BLOCKWISE) {
        gt_cuda_fp8_cast_blockwise(b, s, q, scale_inv, x, rows, cols, transpose, spec, st);
        return;
    }
    unsigned *tmp = (unsigned *)gt_cuda_scratch(b, GT_SCRATCH_FP8, 2 * sizeof(float), "fp8_cast");
    if (b->planning || !tmp) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    size_t n = (size_t)rows * cols;
    cast_scale c = begin_cast(b, ex, x, n, 1, spec, meta, tmp);
    if (transpose) {
        launch_tiles(ex, NULL, q, NULL, scale_inv, x, rows, cols, 1, c, st);
    } else {
        int vec = al16(x) && al8(q);
        unsigned grid = gt_grid(vec ? n / 8 / FP8_UNROLL + 1 : n, FP8_THREADS);
        gt_launch(k_fp8_cast_flat, grid, FP8_THREADS, 0, ex, (uint8_t *)q, scale_inv,
                  (const bf16 *)x, n, vec, c, st);
    }
    GT_CUDA_LAUNCHED(b, "fp8_cast");
}

static void cuda_fp8_cast_pair(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                               float *scale_inv_t, const void *x, int rows, int cols,
                               gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st) {
    if (!cast_args_ok(b, "fp8_cast_pair", q, scale_inv, x, rows, cols, spec, meta, st)) return;
    if (!qt || !scale_inv_t) {
        gt_backend_fail(b, GT_ERR_INVALID, "fp8_cast_pair: NULL transposed output");
        return;
    }
    if (spec.scaling == GT_FP8_BLOCKWISE) {
        gt_cuda_fp8_cast_pair_blockwise(b, s, q, scale_inv, qt, scale_inv_t, x, rows, cols, spec,
                                        st);
        return;
    }
    unsigned *tmp =
        (unsigned *)gt_cuda_scratch(b, GT_SCRATCH_FP8, 2 * sizeof(float), "fp8_cast_pair");
    if (b->planning || !tmp) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    cast_scale c = begin_cast(b, ex, x, (size_t)rows * cols, 1, spec, meta, tmp);
    launch_tiles(ex, q, qt, scale_inv, scale_inv_t, x, rows, cols, 1, c, st);
    GT_CUDA_LAUNCHED(b, "fp8_cast_pair");
}

/* The experts' weights, every expert in the same launches (its amax pass, then the flat cast
 * where only q is wanted, else the tile kernel), grid.y or grid.z the expert: the launches a
 * layer's weights cost no longer grow with the experts, and each expert's codes, scale and
 * meta are those fp8_cast / fp8_cast_pair give its slice, since each block reads only its own
 * expert's elements, amax and meta. */
static void cuda_fp8_cast_experts(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                                  float *scale_inv_t, const void *x, int count, int rows, int cols,
                                  gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st) {
    if (!cast_args_ok(b, "fp8_cast_experts", q ? q : qt, q ? scale_inv : scale_inv_t, x, rows, cols,
                      spec, meta, st))
        return;
    if (count <= 0 || (unsigned)count > GT_MAX_GRID || spec.scaling == GT_FP8_BLOCKWISE ||
        spec.amax_bits || (q && !scale_inv) || (qt && !scale_inv_t)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "fp8_cast_experts: bad arguments (count %d, at most %u; per-tensor "
                        "scaling only, each expert its own amax; each output with its inverse "
                        "scales)",
                        count, GT_MAX_GRID);
        return;
    }
    size_t n = (size_t)rows * cols;
    unsigned *tmp = (unsigned *)gt_cuda_scratch(
        b, GT_SCRATCH_FP8, (size_t)(count > 2 ? count : 2) * sizeof(unsigned), "fp8_cast_experts");
    if (b->planning || !tmp) return;
    gt_cuda_exec ex = gt_cuda_ex(b, s);
    cast_scale c = begin_cast(b, ex, x, n, count, spec, meta, tmp);
    if (qt) {
        launch_tiles(ex, q, qt, scale_inv, scale_inv_t, x, rows, cols, count, c, st);
    } else {
        int vec = al16(x) && al8(q) && n % 8 == 0; /* every expert's slice aligned too */
        unsigned grid = gt_grid(vec ? n / 8 / FP8_UNROLL + 1 : n, FP8_THREADS);
        gt_launch(k_fp8_cast_flat, dim3(grid, (unsigned)count), FP8_THREADS, 0, ex, (uint8_t *)q,
                  scale_inv, (const bf16 *)x, n, vec, c, st);
    }
    GT_CUDA_LAUNCHED(b, "fp8_cast_experts");
}

/* One thread per tensor: TE's amax_and_scale_update, as the CPU's k_fp8_amax_update */
__global__ void k_fp8_amax_update(gt_fp8_meta *meta, float *history, int n, int len, int use_max,
                                  int margin, gt_step_state *st) {
    GT_PDL_ENTRY();
    GT_GRID_STRIDE(t, (size_t)n) {
        gt_fp8_meta *m = &meta[t];
        float *h = history + t * (size_t)len;
        h[0] = m->amax;
        float amax = h[0];
        if (use_max)
            for (int j = 1; j < len; j++)
                amax = isnan(h[j]) || h[j] > amax ? h[j] : amax;
        float s = scale_from_amax(amax, m->scale, m->format, margin);
        if (s == FLT_MAX && amax > 0.0f && !isinf(amax) && !isnan(amax))
            atomicOr(&st->nan_flags, (uint32_t)GT_NAN_FP8);
        m->scale = s;
        m->scale_inv = 1.0f / s;
        float newest = h[0];
        for (int j = 0; j + 1 < len; j++)
            h[j] = h[j + 1];
        h[len - 1] = newest;
        h[0] = 0.0f;
        m->amax = 0.0f;
    }
}

static void cuda_fp8_amax_update(gt_backend *b, gt_stream *s, gt_fp8_meta *meta, float *history,
                                 int n, int history_len, int use_max, int margin,
                                 gt_step_state *st) {
    if (n < 0 || history_len <= 0 || margin < 0 || (n > 0 && (!meta || !history || !st))) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "fp8_amax_update: bad arguments n=%d history_len=%d margin=%d", n,
                        history_len, margin);
        return;
    }
    if (b->planning || n == 0) return;
    gt_launch(k_fp8_amax_update, gt_grid((size_t)n, FP8_THREADS), FP8_THREADS, 0, gt_cuda_ex(b, s),
              meta, history, n, history_len, use_max != 0, margin, st);
    GT_CUDA_LAUNCHED(b, "fp8_amax_update");
}

extern "C" void gt_cuda_register_fp8_ops(gt_backend_ops *ops) {
    ops->fp8_cast = cuda_fp8_cast;
    ops->fp8_cast_pair = cuda_fp8_cast_pair;
    ops->fp8_cast_experts = cuda_fp8_cast_experts;
    ops->fp8_amax_update = cuda_fp8_amax_update;
}
