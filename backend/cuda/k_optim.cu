/* Step state and optimizer kernels: the LR schedule on device, the micro-batch counter, the
 * NaN test hook, a deterministic two-pass gradient norm (fixed per-block partials, then a
 * fixed-order final sum) that sets the NaN flags and the clip coefficient, and AdamW over the
 * whole flat parameter array in one launch, reading lr/step/clip/flags from the step state,
 * its moments in fp32 or bf16 (the precision-aware optimizer). */
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "core/bf16.h"

#define OPT_THREADS 256
#define GN_MAX_BLOCKS 1024 /* partials of the gradient norm */
#define GN_ITEMS_PER_THREAD 8
#define FINAL_THREADS 1024
/* gt_lr_style and gt_wsd_style values (config/config.h) */
#define LR_CONSTANT 0
#define LR_LINEAR 1
#define LR_COSINE 2
#define LR_INVERSE_SQRT 3
#define LR_WSD 4
#define WSD_EXPONENTIAL 0
#define WSD_LINEAR 1
#define WSD_COSINE 2

/* inverse-square-root and WSD after the warmup, in the double operations of the CPU
 * reference's lr_megatron_tail (backend/cpu/cpu_optim.c), which says what they compute */
static __device__ float lr_megatron_tail(int64_t step, const gt_lr_schedule &sc) {
    double hi = sc.lr_max, lo = sc.lr_min;
    if (step > sc.decay_iters) return sc.lr_min;
    if (sc.style == LR_INVERSE_SQRT) {
        double w = sc.warmup_iters > 1 ? (double)sc.warmup_iters : 1.0;
        double n = step > 1 ? (double)step : 1.0;
        double lr = hi * sqrt(w) / sqrt(n);
        return (float)(lr > lo ? lr : lo);
    }
    int64_t start = (int64_t)sc.decay_iters - sc.wsd_decay_iters;
    double c = 1.0;
    if (step > start) {
        double r = (double)(step - start) / (double)sc.wsd_decay_iters;
        if (sc.wsd_style == WSD_LINEAR)
            c = 1.0 - r;
        else if (sc.wsd_style == WSD_COSINE)
            c = 0.5 * (cos(3.14159265358979323846 * r) + 1.0);
        else if (sc.wsd_style == WSD_EXPONENTIAL)
            c = 2.0 * pow(0.5, r) - 1.0;
        else
            c = 1.0 - sqrt(r);
    }
    /* __dadd_rn/__dmul_rn: no fused multiply-add, so the rounding is the host's */
    return (float)__dadd_rn(lo, __dmul_rn(c, hi - lo));
}

static __device__ float lr_at(int64_t step, gt_lr_schedule sc) {
    if (sc.warmup_iters > 0 && step < sc.warmup_iters)
        return sc.warmup_init +
               (sc.lr_max - sc.warmup_init) * (float)(step + 1) / (float)sc.warmup_iters;
    if (sc.style == LR_CONSTANT) return sc.lr_max;
    if (sc.style == LR_INVERSE_SQRT || sc.style == LR_WSD) return lr_megatron_tail(step, sc);
    if (step >= sc.decay_iters || sc.decay_iters <= sc.warmup_iters) return sc.lr_min;
    float prog = (float)(step - sc.warmup_iters) / (float)(sc.decay_iters - sc.warmup_iters);
    if (sc.style == LR_LINEAR) return sc.lr_max + (sc.lr_min - sc.lr_max) * prog;
    return sc.lr_min + 0.5f * (sc.lr_max - sc.lr_min) * (1.0f + cosf(3.14159265358979f * prog));
}

__global__ void k_step_begin(gt_step_state *st, gt_lr_schedule sc) {
    GT_PDL_ENTRY();
    st->lr = lr_at(st->step, sc);
    st->loss = 0.0f;
    st->aux_loss = 0.0f;
    st->nan_flags = 0;
    st->skipped = 0;
    st->micro = 0;
}

__global__ void k_micro_next(gt_step_state *st) {
    GT_PDL_ENTRY();
    st->micro++;
}

__global__ void k_inject_nan(gt_step_state *st, float *grads, gt_grad_rows rows) {
    GT_PDL_ENTRY();
    if (st->step == (int64_t)st->inject_nan) {
        st->loss = nanf("");
        if (grads) grads[0] = nanf("");
        if (grads && rows.dirty && rows.offset == 0 && rows.rows > 0) rows.dirty[0] = 1;
    }
}

/* The marks of gt_grad_rows over quads (4 elements from index 4q): usable when no quad
 * straddles two rows (offset and d multiples of 4); q0 the first quad of the rows, nq their
 * quads, dq the quads a row. 32-bit row arithmetic: the host takes marks only when the rows'
 * quads fit in 32 bits. */
struct quad_rows {
    const uint8_t *dirty;
    const int32_t *lag; /* gt_grad_rows.lag */
    size_t q0;
    uint32_t nq, dq;
};

/* 1 when quad q lies in a row the marks say is zero */
static __device__ __forceinline__ bool quad_zero(const quad_rows &r, size_t q) {
    if (!r.dirty || q < r.q0 || q - r.q0 >= r.nq) return false;
    return !r.dirty[(uint32_t)(q - r.q0) / r.dq];
}

/* 1 when the rows can be taken a quad at a time (or there are none) */
static bool quads_fit(gt_grad_rows r) {
    if (!r.dirty && !r.lag) return true;
    size_t nq = r.d > 0 ? r.rows * (size_t)(r.d / 4) : 0;
    return r.offset % 4 == 0 && r.d % 4 == 0 && nq > 0 && nq <= 0xffffffffu;
}

static quad_rows to_quad_rows(gt_grad_rows r) {
    quad_rows q = {NULL, NULL, 0, 0, 1};
    if ((!r.dirty && !r.lag) || !quads_fit(r)) return q;
    q.dirty = r.dirty, q.lag = r.lag, q.q0 = r.offset / 4;
    q.nq = (uint32_t)(r.rows * (size_t)(r.d / 4)), q.dq = (uint32_t)(r.d / 4);
    return q;
}

/* The lazy rows element by element (the scalar AdamW) */
struct elem_rows {
    const int32_t *lag;
    size_t off, n;
    uint32_t d;
};
static __device__ __forceinline__ bool elem_waits(const elem_rows &r, size_t i, int64_t step) {
    if (!r.lag || i < r.off || i - r.off >= r.n) return false;
    return r.lag[(i - r.off) / r.d] != step + 1;
}
static elem_rows to_elem_rows(gt_grad_rows r) {
    elem_rows e = {r.lag, r.offset, r.lag ? r.rows * (size_t)r.d : 0,
                   (uint32_t)(r.d > 0 ? r.d : 1)};
    return e;
}

__global__ void k_step_end(gt_step_state *st) {
    GT_PDL_ENTRY();
    if (st->nan_flags && st->nan_step < 0) {
        st->nan_step = (int32_t)st->step;
        st->nan_first = st->nan_flags;
    }
    st->step++;
}

__global__ void k_gradnorm_partial(double *part, const float *g, size_t n) {
    GT_PDL_ENTRY();
    __shared__ double sh[32];
    double acc = 0.0;
    GT_GRID_STRIDE(i, n) {
        double v = g[i];
        acc += v * v;
    }
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* The same over float4 (n4 = n / 4): 16-byte loads reach the memory bandwidth the scalar
 * version did not (1.2 ms against ~0.65 ms ideal for 690 M gradients). */
static __device__ __forceinline__ double quad_sq(float4 v) {
    return (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
}

/* The marked rows first, a warp a row: a lane reads the row's mark (one load a row, not one a
 * quad) and the warp reads the row only where it is marked; unmarked rows are zero and add
 * nothing. Then the quads before and after them, grid-stride, with no test. Checking the mark
 * of every quad instead kept the loads of the marked region waiting on the marks': all
 * threads pass that region at once, at the start of their loops, with the memory idle. */
__global__ void __launch_bounds__(OPT_THREADS, 8)
    k_gradnorm_partial4(double *part, const float4 *g, size_t n4, quad_rows rows) {
    GT_PDL_ENTRY();
    __shared__ double sh[32];
    double acc = 0.0;
    size_t lo = n4, span = 0; /* the marked rows' quads: [lo, lo + span) */
    if (rows.dirty && rows.q0 <= n4 && rows.nq <= n4 - rows.q0) lo = rows.q0, span = rows.nq;
    if (span) {
        size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        size_t nw = (size_t)gridDim.x * blockDim.x / 32, nrows = span / rows.dq;
        for (size_t r = tid / 32; r < nrows; r += nw) {
            if (!rows.dirty[r]) continue;
            for (size_t j = threadIdx.x % 32; j < rows.dq; j += 32)
                acc += quad_sq(g[lo + r * rows.dq + j]);
        }
    }
    GT_GRID_STRIDE(i, lo) acc += quad_sq(g[i]);
    const float4 *after = g + lo + span;
    GT_GRID_STRIDE(i, n4 - lo - span) acc += quad_sq(after[i]);
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void k_gradnorm_final(gt_step_state *st, const double *part, int parts, int check_loss,
                                 int check_grad, float clip) {
    GT_PDL_ENTRY();
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < parts; i += blockDim.x)
        acc += part[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) {
        float norm = (float)sqrt(acc);
        uint32_t flags = st->nan_flags;
        if (check_loss && !isfinite(st->loss)) flags |= GT_NAN_LOSS;
        if (check_grad && !isfinite(norm)) flags |= GT_NAN_GRAD;
        st->nan_flags = flags;
        st->grad_norm = norm;
        st->clip_coef = clip > 0.0f ? fminf(1.0f, clip / (norm + 1e-6f)) : 1.0f;
    }
}

/* What every element of one step's update shares, computed once (adamw_begin, and the lazy
 * rows' table with the same function, so both get the same bits): the decay lr * wd, the step
 * size lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t). With them an element costs a square root
 * and a reciprocal, both correctly rounded, where dividing by the bias corrections and then by
 * the denominator cost three divisions. The lazy rows' replay is bound by that arithmetic, so
 * each division taken out of it shows in its time about one for one (ncu). */
struct adamw_scalars {
    float lr_wd, step_size, rs_bc2;
};

static __device__ __forceinline__ adamw_scalars adamw_scalars_at(float lr, int64_t step,
                                                                 const gt_adamw_params &hp) {
    float t = (float)(step + 1);
    float bc1 = 1.0f - powf(hp.beta1, t), bc2 = 1.0f - powf(hp.beta2, t);
    return {__fmul_rn(lr, hp.weight_decay), __fdiv_rn(lr, bc1), __frcp_rn(__fsqrt_rn(bc2))};
}

/* The step's AdamW scalars from the step state; false (and st->skipped set once) when a NaN
 * check fired, so the update changes nothing. */
static __device__ __forceinline__ bool adamw_begin(gt_step_state *st, const gt_adamw_params &hp,
                                                   adamw_scalars *k, float *clip) {
    if (st->nan_flags) {
        if (blockIdx.x == 0 && threadIdx.x == 0) st->skipped = 1;
        return false;
    }
    *clip = st->clip_coef;
    *k = adamw_scalars_at(st->lr, st->step, hp);
    return true;
}

/* One element: moments and master weight updated in place, g already clipped. The weight
 * decays first, then takes the step with the new fp32 moments, as PyTorch's fused AdamW:
 * w - lr wd w - step_size m / (sqrt(v) / sqrt(bc2) + eps). decay says whether this element
 * decays. Every rounding is spelled out (the intrinsics are not contracted or reassociated),
 * so each kernel variant (fp32 or split master, fp32 or bf16 moments, 4-wide or scalar, the
 * lazy rows' replay) computes the same bits: left to itself, ptxas fused operations in some
 * variants and not in others. */
static __device__ __forceinline__ void adamw_weight(float mi, float vi, float *w,
                                                    const adamw_scalars &k, bool decay,
                                                    const gt_adamw_params &hp) {
    float q = __fmul_rn(mi, __frcp_rn(__fmaf_rn(__fsqrt_rn(vi), k.rs_bc2, hp.eps)));
    float wd = decay ? __fmaf_rn(-k.lr_wd, *w, *w) : *w;
    *w = __fmaf_rn(-k.step_size, q, wd);
}
static __device__ __forceinline__ void adamw_elem(float g, float *m, float *v, float *w,
                                                  const adamw_scalars &k, bool decay,
                                                  const gt_adamw_params &hp) {
    float mi = __fmaf_rn(hp.beta1, *m, __fmul_rn(1.0f - hp.beta1, g));
    float vi = __fmaf_rn(hp.beta2, *v, __fmul_rn(__fmul_rn(1.0f - hp.beta2, g), g));
    *m = mi;
    *v = vi;
    adamw_weight(mi, vi, w, k, decay, hp);
}
/* adamw_elem for g = +0 (the lazy rows' replay): with the betas in [0, 1) that the config and
 * gt_adamw_check enforce, (1 - beta) * +0 is +0, so the same fmas with a +0 addend give the
 * same bits, three products fewer an element and step. */
static __device__ __forceinline__ void adamw_elem_zero(float *m, float *v, float *w,
                                                       const adamw_scalars &k, bool decay,
                                                       const gt_adamw_params &hp) {
    float mi = __fmaf_rn(hp.beta1, *m, 0.0f), vi = __fmaf_rn(hp.beta2, *v, 0.0f);
    *m = mi;
    *v = vi;
    adamw_weight(mi, vi, w, k, decay, hp);
}

/* fp32 or bf16 storage (moments, and the fp32 / bf16 arrays of the 4-wide kernel): fp32 as is,
 * bf16 widened on load and rounded to nearest-even on store. */
static __device__ __forceinline__ float st_load(const float *p, size_t i) {
    return p[i];
}
static __device__ __forceinline__ float st_load(const bf16 *p, size_t i) {
    return __bfloat162float(p[i]);
}
static __device__ __forceinline__ void st_store(float *p, size_t i, float x) {
    p[i] = x;
}
static __device__ __forceinline__ void st_store(bf16 *p, size_t i, float x) {
    p[i] = __float2bfloat16(x);
}
/* four consecutive elements from index 4q (16 bytes of fp32 or 8 of bf16) */
static __device__ __forceinline__ void st_load4(const float *p, size_t q, float *x) {
    float4 f = ((const float4 *)p)[q];
    x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
}
static __device__ __forceinline__ void st_load4(const bf16 *p, size_t q, float *x) {
    uint2 raw = ((const uint2 *)p)[q];
    bf16 h[4];
    memcpy(h, &raw, 8);
#pragma unroll
    for (int k = 0; k < 4; k++)
        x[k] = __bfloat162float(h[k]);
}
static __device__ __forceinline__ void st_store4(float *p, size_t q, const float *x) {
    ((float4 *)p)[q] = make_float4(x[0], x[1], x[2], x[3]);
}
static __device__ __forceinline__ void st_store4(bf16 *p, size_t q, const float *x) {
    bf16 h[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        h[k] = __float2bfloat16(x[k]);
    uint2 raw;
    memcpy(&raw, h, 8);
    ((uint2 *)p)[q] = raw;
}

/* The master weight of element i, or of the four elements of quad q, and its stores. LO: the
 * master is int16 low halves and params the high halves (core/bf16.h's gt_master_split: the
 * compute copy rounded to nearest with ties away from zero); else master is fp32 and params
 * its bf16 copy, rounded to nearest-even. */
template <bool LO>
static __device__ __forceinline__ float master_load(const bf16 *params, const void *master,
                                                    size_t i) {
    if (LO) return gt_master_join(((const uint16_t *)params)[i], ((const int16_t *)master)[i]);
    return ((const float *)master)[i];
}
template <bool LO>
static __device__ __forceinline__ void master_store(bf16 *params, void *master, size_t i, float w) {
    if (LO) {
        gt_master_split(w, &((uint16_t *)params)[i], &((int16_t *)master)[i]);
    } else {
        ((float *)master)[i] = w;
        params[i] = tobf(w);
    }
}
template <bool LO>
static __device__ __forceinline__ void master_load4(const bf16 *params, const void *master,
                                                    size_t q, float *w) {
    if (LO) {
        uint2 h = ((const uint2 *)params)[q], l = ((const uint2 *)master)[q];
        uint16_t his[4];
        int16_t los[4];
        memcpy(his, &h, 8);
        memcpy(los, &l, 8);
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = gt_master_join(his[k], los[k]);
    } else {
        st_load4((const float *)master, q, w);
    }
}
template <bool LO>
static __device__ __forceinline__ void master_store4(bf16 *params, void *master, size_t q,
                                                     const float *w) {
    if (LO) {
        uint16_t his[4];
        int16_t los[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            gt_master_split(w[k], &his[k], &los[k]);
        uint2 h, l;
        memcpy(&h, his, 8);
        memcpy(&l, los, 8);
        ((uint2 *)params)[q] = h;
        ((uint2 *)master)[q] = l;
    } else {
        st_store4((float *)master, q, w);
        st_store4(params, q, w); /* the compute copy: rounded to bf16 */
    }
}

/* One element a thread, grid-stride (any n or alignment); LO as master_load */
template <typename MT, typename VT, bool LO>
__global__ void k_adamw(bf16 *params, void *master, const float *grads, elem_rows rows, MT *m,
                        VT *v, size_t n, size_t n_decay, gt_adamw_params hp, gt_step_state *st) {
    GT_PDL_ENTRY();
    adamw_scalars k;
    float clip;
    if (!adamw_begin(st, hp, &k, &clip)) return;
    int64_t step = st->step;
    GT_GRID_STRIDE(i, n) {
        if (elem_waits(rows, i, step)) continue; /* lazy_catchup's later */
        float mi = st_load(m, i), vi = st_load(v, i);
        float w = master_load<LO>(params, master, i);
        adamw_elem(grads[i] * clip, &mi, &vi, &w, k, i < n_decay, hp);
        st_store(m, i, mi);
        st_store(v, i, vi);
        master_store<LO>(params, master, i, w);
    }
}

/* Quad q's update; zero: its gradient is zero (the marks say so), so it is not loaded */
template <typename MT, typename VT, bool LO>
static __device__ __forceinline__ void
adamw_quad(bf16 *__restrict__ params, void *__restrict__ master, const float *__restrict__ grads,
           MT *__restrict__ m, VT *__restrict__ v, size_t q, bool zero, size_t n_decay,
           const gt_adamw_params &hp, const adamw_scalars &sc, float clip) {
    float gs[4] = {0.f, 0.f, 0.f, 0.f}, ws[4], ms[4], vs[4];
    master_load4<LO>(params, master, q, ws);
    st_load4(m, q, ms);
    st_load4(v, q, vs);
    if (!zero) st_load4(grads, q, gs);
#pragma unroll
    for (int k = 0; k < 4; k++)
        adamw_elem(gs[k] * clip, &ms[k], &vs[k], &ws[k], sc, 4 * q + k < n_decay, hp);
    st_store4(m, q, ms);
    st_store4(v, q, vs);
    master_store4<LO>(params, master, q, ws);
}

/* Four elements from index 4q a thread (n % 4 == 0, aligned arrays), a block per 256 quads
 * and no grid-stride loop: a grid-stride loop over at most 8192 blocks (with one or two quads
 * a trip) made moe's step slower on the H200 and left gpt124m and llama1b level.
 * With lazy rows (row_blocks > 0) the first row_blocks blocks take the rows, a warp 32 rows:
 * a lane reads one row's lag (one coalesced load for the 32) and the warp updates the rows
 * whose lag says this step, together; the other blocks take the quads before and after the
 * rows. A thread taking a quad over the rows too would begin the launch with blocks that read
 * a lag and leave while the memory idles (the embedding is the first tensor). A cap of 5
 * blocks an SM (48 registers) spills and is slower. */
template <typename MT, typename VT, bool LO>
__global__ void k_adamw4(bf16 *__restrict__ params, void *__restrict__ master,
                         const float *__restrict__ grads, quad_rows rows, MT *__restrict__ m,
                         VT *__restrict__ v, size_t n4, size_t n_decay, gt_adamw_params hp,
                         gt_step_state *st, unsigned row_blocks) {
    GT_PDL_ENTRY();
    adamw_scalars sc;
    float clip;
    if (!adamw_begin(st, hp, &sc, &clip)) return;
    size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (!row_blocks) {
        if (q < n4)
            adamw_quad<MT, VT, LO>(params, master, grads, m, v, q, quad_zero(rows, q), n_decay, hp,
                                   sc, clip);
        return;
    }
    if (blockIdx.x >= row_blocks) {
        q -= (size_t)row_blocks * blockDim.x;
        if (q >= n4 - rows.nq) return;
        if (q >= rows.q0) q += rows.nq;
        adamw_quad<MT, VT, LO>(params, master, grads, m, v, q, false, n_decay, hp, sc, clip);
        return;
    }
    uint32_t lane = threadIdx.x % 32, nrows = rows.nq / rows.dq;
    uint32_t base = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 32, r = base + lane;
    bool now = r < nrows && rows.lag[r] == st->step + 1;
    unsigned todo = __ballot_sync(~0u, now);
    unsigned zero = __ballot_sync(~0u, now && rows.dirty && !rows.dirty[r]);
    while (todo) {
        int k = __ffs(todo) - 1;
        todo &= todo - 1;
        size_t q0 = rows.q0 + (size_t)(base + (uint32_t)k) * rows.dq;
        for (uint32_t j = lane; j < rows.dq; j += 32)
            adamw_quad<MT, VT, LO>(params, master, grads, m, v, q0 + j, zero >> k & 1u, n_decay, hp,
                                   sc, clip);
    }
}

static void cuda_step_begin(gt_backend *b, gt_stream *s, gt_step_state *st, gt_lr_schedule sched) {
    if (!st) {
        gt_backend_fail(b, GT_ERR_INVALID, "step_begin: no step state given");
        return;
    }
    if (!gt_lr_schedule_check(b, "step_begin", &sched)) return;
    if (b->planning) return;
    gt_launch(k_step_begin, 1, 1, 0, gt_cuda_ex(b, s), st, sched);
    GT_CUDA_LAUNCHED(b, "step_begin");
}

static void cuda_micro_next(gt_backend *b, gt_stream *s, gt_step_state *st) {
    if (b->planning) return;
    gt_launch(k_micro_next, 1, 1, 0, gt_cuda_ex(b, s), st);
    GT_CUDA_LAUNCHED(b, "micro_next");
}

static void cuda_inject_nan(gt_backend *b, gt_stream *s, gt_step_state *st, float *grads,
                            gt_grad_rows rows) {
    if (b->planning) return;
    gt_launch(k_inject_nan, 1, 1, 0, gt_cuda_ex(b, s), st, grads, rows);
    GT_CUDA_LAUNCHED(b, "inject_nan");
}

static void cuda_step_end(gt_backend *b, gt_stream *s, gt_step_state *st) {
    if (b->planning) return;
    gt_launch(k_step_end, 1, 1, 0, gt_cuda_ex(b, s), st);
    GT_CUDA_LAUNCHED(b, "step_end");
}

static int gradnorm_blocks(size_t n) {
    size_t per_block = (size_t)OPT_THREADS * GN_ITEMS_PER_THREAD;
    size_t blocks = (n + per_block - 1) / per_block;
    if (blocks < 1) blocks = 1;
    if (blocks > GN_MAX_BLOCKS) blocks = GN_MAX_BLOCKS;
    return (int)blocks;
}

static void cuda_grad_norm(gt_backend *b, gt_stream *s, gt_step_state *st, const float *grads,
                           size_t n, gt_grad_rows rows, int check_loss, int check_grad,
                           float clip) {
    if (!gt_grad_rows_check(b, "grad_norm", &rows, n)) return;
    int blocks = gradnorm_blocks(n);
    double *part = (double *)gt_cuda_scratch(b, GT_SCRATCH_GRADNORM,
                                             (size_t)GN_MAX_BLOCKS * sizeof(double), "grad_norm");
    if (!part) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    if (n % 4 == 0 && ((uintptr_t)grads & 15u) == 0)
        gt_launch(k_gradnorm_partial4, blocks, OPT_THREADS, 0, cs, part, (const float4 *)grads,
                  n / 4, to_quad_rows(rows));
    else
        gt_launch(k_gradnorm_partial, blocks, OPT_THREADS, 0, cs, part, grads, n);
    gt_launch(k_gradnorm_final, 1, FINAL_THREADS, 0, cs, st, part, blocks, check_loss, check_grad,
              clip);
    GT_CUDA_LAUNCHED(b, "grad_norm");
}

template <typename MT, typename VT, bool LO>
static void adamw_launch(gt_backend *b, gt_stream *s, void *params, void *master,
                         const float *grads, gt_grad_rows rows, void *m, void *v, size_t n,
                         size_t n_decay, gt_adamw_params hp, gt_step_state *st) {
    /* 4 elements of the int16 halves are 8 bytes: the same 16-byte test covers them */
    uintptr_t bits =
        (uintptr_t)params | (uintptr_t)master | (uintptr_t)grads | (uintptr_t)m | (uintptr_t)v;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    if (n % 4 == 0 && (bits & 15u) == 0 && (quads_fit(rows) || !rows.lag)) {
        /* at least one block: it also records a skipped step (n = 0 included) */
        size_t blocks = n / 4 ? (n / 4 + OPT_THREADS - 1) / OPT_THREADS : 1;
        if (blocks > 0x7fffffffu) { /* over 2^41 parameters: beyond any grid */
            gt_backend_fail(b, GT_ERR_INVALID, "adamw: %zu parameters are too many for one grid",
                            n);
            return;
        }
        quad_rows qr = to_quad_rows(rows);
        unsigned row_blocks = 0;
        if (qr.lag) { /* the rows' blocks, then those of the other quads */
            row_blocks = (unsigned)(((size_t)(qr.nq / qr.dq) + OPT_THREADS - 1) / OPT_THREADS);
            blocks = row_blocks + (n / 4 - qr.nq + OPT_THREADS - 1) / OPT_THREADS;
        }
        gt_launch(k_adamw4<MT, VT, LO>, (unsigned)blocks, OPT_THREADS, 0, cs, (bf16 *)params,
                  master, grads, qr, (MT *)m, (VT *)v, n / 4, n_decay, hp, st, row_blocks);
    } else {
        unsigned grid = gt_grid(n, OPT_THREADS);
        if (grid > 8192) grid = 8192;
        gt_launch(k_adamw<MT, VT, LO>, grid, OPT_THREADS, 0, cs, (bf16 *)params, master, grads,
                  to_elem_rows(rows), (MT *)m, (VT *)v, n, n_decay, hp, st);
    }
    GT_CUDA_LAUNCHED(b, "adamw");
}

template <bool LO>
static void adamw_moments(gt_backend *b, gt_stream *s, void *params, void *master,
                          const float *grads, gt_grad_rows rows, void *m, void *v, size_t n,
                          size_t n_decay, gt_adamw_params hp, gt_step_state *st) {
    if (hp.m_bf16 && hp.v_bf16)
        adamw_launch<bf16, bf16, LO>(b, s, params, master, grads, rows, m, v, n, n_decay, hp, st);
    else if (hp.m_bf16)
        adamw_launch<bf16, float, LO>(b, s, params, master, grads, rows, m, v, n, n_decay, hp, st);
    else if (hp.v_bf16)
        adamw_launch<float, bf16, LO>(b, s, params, master, grads, rows, m, v, n, n_decay, hp, st);
    else
        adamw_launch<float, float, LO>(b, s, params, master, grads, rows, m, v, n, n_decay, hp, st);
}

/* ---- lazy rows: the updates a row missed, replayed (gt_grad_rows.lag) ---- */

#define LZ_THREADS 256
#define LZ_CHUNK 256 /* steps whose scalars a block tabulates at a time */

/* bf16 storage rounds what it keeps: the next step starts from the stored value */
static __device__ __forceinline__ float st_round(const float *, float x) {
    return x;
}
static __device__ __forceinline__ float st_round(const bf16 *, float x) {
    return __bfloat162float(__float2bfloat16(x));
}

/* The updates of steps from .. to - 1 of the row at flat index base (d elements), each as
 * k_adamw computes it for a zero gradient: each step's scalars from the schedule's lr through
 * adamw_scalars_at, tabulated per block; the moments rounded to their storage each step. The
 * arithmetic (a square root and a reciprocal an element and step, correctly rounded) is what
 * bounds these kernels, so with QUADS (base and d multiples of 4, arrays aligned as for
 * k_adamw4) a thread takes four elements and interleaves their steps: 1.9x (ncu, gpt124m). */
template <typename MT, typename VT, bool LO, bool QUADS>
static __device__ void lazy_replay_row(bf16 *params, void *master, MT *m, VT *v, size_t base, int d,
                                       int64_t from, int64_t to, size_t n_decay,
                                       const gt_adamw_params &hp, const gt_lr_schedule &sc) {
    constexpr int E = QUADS ? 4 : 1;
    __shared__ adamw_scalars sh_k[LZ_CHUNK];
    for (int64_t s0 = from; s0 < to; s0 += LZ_CHUNK) {
        int cnt = to - s0 < LZ_CHUNK ? (int)(to - s0) : LZ_CHUNK;
        __syncthreads(); /* the last chunk's table is read by everyone */
        for (int k = threadIdx.x; k < cnt; k += blockDim.x)
            sh_k[k] = adamw_scalars_at(lr_at(s0 + k, sc), s0 + k, hp);
        __syncthreads();
        for (int j = threadIdx.x * E; j < d; j += blockDim.x * E) {
            size_t i0 = base + (size_t)j;
            float ms[E], vs[E], ws[E];
            bool decay[E];
            if (QUADS) {
                st_load4(m, i0 / 4, ms);
                st_load4(v, i0 / 4, vs);
                master_load4<LO>(params, master, i0 / 4, ws);
            } else {
                ms[0] = st_load(m, i0), vs[0] = st_load(v, i0);
                ws[0] = master_load<LO>(params, master, i0);
            }
#pragma unroll
            for (int e = 0; e < E; e++)
                decay[e] = i0 + e < n_decay;
            for (int k = 0; k < cnt; k++)
#pragma unroll
                for (int e = 0; e < E; e++) {
                    adamw_elem_zero(&ms[e], &vs[e], &ws[e], sh_k[k], decay[e], hp);
                    ms[e] = st_round(m, ms[e]);
                    vs[e] = st_round(v, vs[e]);
                }
            if (QUADS) {
                st_store4(m, i0 / 4, ms);
                st_store4(v, i0 / 4, vs);
                master_store4<LO>(params, master, i0 / 4, ws);
            } else {
                st_store(m, i0, ms[0]);
                st_store(v, i0, vs[0]);
                master_store<LO>(params, master, i0, ws[0]);
            }
        }
    }
}

/* What a catch-up launch catches up: the rows of tokens[0..n), then (the sweep, per > 0) the
 * per rows of slice st->step mod period; or, for a flush, whether it replays */
struct lazy_job {
    const int32_t *tokens;
    int n, period, per, replay;
};

/* A block per token, then one per row of the sweep's slice: the first block to claim its row
 * (lag swapped to step + 1) replays it. One launch for both: the sweep's rows fill the GPU
 * beside the tokens' longer replays, and a graph node and a kernel's ramp and tail go (tiny's
 * step is faster than with the sweep launched after the catch-up). */
template <typename MT, typename VT, bool LO, bool QUADS>
__global__ void __launch_bounds__(LZ_THREADS)
    k_lazy_catchup(bf16 *params, void *master, MT *m, VT *v, int32_t *lag, lazy_job job, size_t off,
                   int rows, int d, size_t n_decay, gt_adamw_params hp, gt_lr_schedule sc,
                   const gt_step_state *st) {
    GT_PDL_ENTRY();
    __shared__ int32_t sh_from;
    int64_t step = st->step;
    int64_t r = blockIdx.x < (unsigned)job.n
                    ? (int64_t)job.tokens[blockIdx.x]
                    : step % job.period * job.per + (int64_t)(blockIdx.x - (unsigned)job.n);
    if (r < 0 || r >= rows) return;
    if (threadIdx.x == 0)
        sh_from = lag[r] > step ? (int32_t)(step + 1) : atomicExch(&lag[r], (int32_t)(step + 1));
    __syncthreads();
    int64_t from = sh_from;
    if (from > step) return; /* current already, or another block has it */
    lazy_replay_row<MT, VT, LO, QUADS>(params, master, m, v, off + (size_t)r * d, d, from, step,
                                       n_decay, hp, sc);
}

/* A block per row: rows behind st->step replayed up to it (leaving out a skipped last step) */
template <typename MT, typename VT, bool LO, bool QUADS>
__global__ void __launch_bounds__(LZ_THREADS)
    k_lazy_flush(bf16 *params, void *master, MT *m, VT *v, int32_t *lag, size_t off, int d,
                 size_t n_decay, gt_adamw_params hp, gt_lr_schedule sc, const gt_step_state *st,
                 int replay) {
    GT_PDL_ENTRY();
    int r = blockIdx.x;
    int64_t step = st->step, upto = step - (st->skipped ? 1 : 0);
    int64_t from = lag[r];
    if (from >= step) return;
    if (replay)
        lazy_replay_row<MT, VT, LO, QUADS>(params, master, m, v, off + (size_t)r * d, d, from, upto,
                                           n_decay, hp, sc);
    if (threadIdx.x == 0) lag[r] = (int32_t)step;
}

template <typename MT, typename VT, bool LO, bool QUADS>
static void lazy_launch_as(gt_cuda_exec cs, const gt_adamw_state &os, gt_grad_rows rows,
                           const gt_step_state *st, int catchup, const lazy_job &job) {
    int per = QUADS ? rows.d / 4 : rows.d; /* threads a row takes */
    int threads = per >= LZ_THREADS ? LZ_THREADS : (per + 31) / 32 * 32;
    if (catchup)
        gt_launch(k_lazy_catchup<MT, VT, LO, QUADS>, (unsigned)job.n + (unsigned)job.per, threads,
                  0, cs, (bf16 *)os.params, os.master, (MT *)os.m, (VT *)os.v, rows.lag, job,
                  rows.offset, (int)rows.rows, rows.d, os.n_decay, os.hp, os.sched, st);
    else
        gt_launch(k_lazy_flush<MT, VT, LO, QUADS>, (unsigned)rows.rows, threads, 0, cs,
                  (bf16 *)os.params, os.master, (MT *)os.m, (VT *)os.v, rows.lag, rows.offset,
                  rows.d, os.n_decay, os.hp, os.sched, st, job.replay);
}

/* four elements a thread where the rows and arrays allow it, as k_adamw4 */
template <typename MT, typename VT, bool LO>
static void lazy_launch(gt_cuda_exec cs, const gt_adamw_state &os, gt_grad_rows rows,
                        const gt_step_state *st, int catchup, const lazy_job &job) {
    uintptr_t bits =
        (uintptr_t)os.params | (uintptr_t)os.master | (uintptr_t)os.m | (uintptr_t)os.v;
    if (rows.offset % 4 == 0 && rows.d % 4 == 0 && (bits & 15u) == 0)
        lazy_launch_as<MT, VT, LO, true>(cs, os, rows, st, catchup, job);
    else
        lazy_launch_as<MT, VT, LO, false>(cs, os, rows, st, catchup, job);
}

template <bool LO>
static void lazy_moments(gt_cuda_exec cs, const gt_adamw_state &os, gt_grad_rows rows,
                         const gt_step_state *st, int catchup, const lazy_job &job) {
    if (os.hp.m_bf16 && os.hp.v_bf16)
        lazy_launch<bf16, bf16, LO>(cs, os, rows, st, catchup, job);
    else if (os.hp.m_bf16)
        lazy_launch<bf16, float, LO>(cs, os, rows, st, catchup, job);
    else if (os.hp.v_bf16)
        lazy_launch<float, bf16, LO>(cs, os, rows, st, catchup, job);
    else
        lazy_launch<float, float, LO>(cs, os, rows, st, catchup, job);
}

/* catch-up (tokens and sweep) or flush, once the op's arguments were checked */
static void lazy_run(gt_backend *b, gt_stream *s, const char *what, gt_step_state *st,
                     const gt_adamw_state &os, gt_grad_rows rows, int catchup,
                     const lazy_job &job) {
    if ((catchup && job.n == 0 && job.per == 0) || rows.rows == 0) return;
    gt_cuda_exec cs = gt_cuda_ex(b, s);
    if (os.hp.master_lo)
        lazy_moments<true>(cs, os, rows, st, catchup, job);
    else
        lazy_moments<false>(cs, os, rows, st, catchup, job);
    GT_CUDA_LAUNCHED(b, what);
}

/* (no lazy rows: adamw updates every row) */
static void cuda_lazy_catchup(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                              gt_grad_rows rows, const int32_t *tokens, int n, int sweep) {
    if (!rows.lag || b->planning) return;
    if (!gt_lazy_rows_check(b, "lazy_catchup", st, &os, &rows, 1, tokens, n, sweep)) return;
    int per = sweep > 0 ? (int)((rows.rows + (size_t)sweep - 1) / (size_t)sweep) : 0;
    lazy_run(b, s, "lazy_catchup", st, os, rows, 1, lazy_job{tokens, n, sweep, per, 1});
}

static void cuda_lazy_flush(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                            gt_grad_rows rows, int replay) {
    if (!rows.lag || b->planning) return;
    if (!gt_lazy_rows_check(b, "lazy_flush", st, &os, &rows, 0, NULL, 0, 0)) return;
    lazy_run(b, s, "lazy_flush", st, os, rows, 0, lazy_job{NULL, 0, 0, 0, replay});
}

static void cuda_adamw(gt_backend *b, gt_stream *s, void *params, void *master, const float *grads,
                       gt_grad_rows rows, void *m, void *v, size_t n, size_t n_decay,
                       gt_adamw_params hp, gt_step_state *st) {
    if (!gt_adamw_check(b, "adamw", st, n, n_decay, &hp) ||
        !gt_grad_rows_check(b, "adamw", &rows, n) || b->planning)
        return;
    if (hp.master_lo)
        adamw_moments<true>(b, s, params, master, grads, rows, m, v, n, n_decay, hp, st);
    else
        adamw_moments<false>(b, s, params, master, grads, rows, m, v, n, n_decay, hp, st);
}

extern "C" void gt_cuda_register_optim_ops(gt_backend_ops *ops) {
    ops->step_begin = cuda_step_begin;
    ops->micro_next = cuda_micro_next;
    ops->inject_nan = cuda_inject_nan;
    ops->grad_norm = cuda_grad_norm;
    ops->adamw = cuda_adamw;
    ops->lazy_catchup = cuda_lazy_catchup;
    ops->lazy_flush = cuda_lazy_flush;
    ops->step_end = cuda_step_end;
}
