/* CPU reference: the FP8 ops (backend.h, "FP8 linear layers"), an exact emulation. A cast
 * rounds x * scale to E4M3 / E5M2 with core/fp8.h (as the GPU's satfinite conversion does)
 * and stores each code's float value; the GEMM sums those exact values in fp32 and scales the
 * sums back, per tensor or per 128-wide K tile. Fixed summation order, so replays agree. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_ops.h"

typedef struct cast_args {
    float *q, *scale_inv;
    const float *x;
    int rows, cols, transpose;
    gt_fp8_cast_spec spec;
    gt_fp8_meta *meta;
    gt_step_state *st;
} cast_args;

/* element (i, j) of the cast's output: x(i, j), or x(j, i) when transposing */
static float src_at(const cast_args *a, int i, int j) {
    return a->transpose ? a->x[(size_t)j * a->cols + i] : a->x[(size_t)i * a->cols + j];
}

static float quantize(float v, float scale, gt_fp8_format f) {
    return gt_fp8_to_float(gt_fp8_from_float(v * scale, f), f);
}

/* Blockwise: the largest power of two not above fp8_max / amax (1 for an all-zero tile), so
 * that scaling back is exact; *bad when amax is not finite or the quotient overflows. */
static float pow2_scale(float amax, gt_fp8_format f, int *bad) {
    if (!isfinite(amax)) {
        *bad = 1;
        return 1.0f;
    }
    if (amax == 0.0f) return 1.0f;
    float s = gt_fp8_max(f) / amax;
    if (isinf(s)) {
        *bad = 1;
        return 1.0f;
    }
    int e;
    (void)frexpf(s, &e); /* s = frac * 2^e, frac in [0.5, 1) */
    return ldexpf(1.0f, e - 1);
}

/* max |x| over rows [r0, r1) x cols [c0, c1) of the output; NaN wins (fmaxf would drop it) */
static float amax_of(const cast_args *a, int r0, int r1, int c0, int c1) {
    float m = 0.0f;
    for (int i = r0; i < r1; i++)
        for (int j = c0; j < c1; j++) {
            float v = fabsf(src_at(a, i, j));
            if (isnan(v)) return NAN;
            if (v > m) m = v;
        }
    return m;
}

/* The float of an amax its producer took as bits (gt_fp8_cast_spec.amax_bits): the max |x|
 * itself, and amax_of's NAN where x holds a NaN, so that the cast records the same bits */
static float given_amax(uint32_t bits) {
    float v;
    memcpy(&v, &bits, sizeof v);
    return isnan(v) ? NAN : v;
}

static void k_fp8_cast(const void *p) {
    const cast_args *a = p;
    int qr = a->transpose ? a->cols : a->rows, qc = a->transpose ? a->rows : a->cols;
    gt_fp8_format f = a->spec.format;
    int bad = 0;
    if (a->spec.scaling == GT_FP8_BLOCKWISE) {
        int tr = a->spec.tile_rows;
        for (int r0 = 0; r0 < qr; r0 += tr)
            for (int c0 = 0; c0 < qc; c0 += GT_FP8_TILE) {
                int r1 = r0 + tr < qr ? r0 + tr : qr;
                int c1 = c0 + GT_FP8_TILE < qc ? c0 + GT_FP8_TILE : qc;
                float scale = pow2_scale(amax_of(a, r0, r1, c0, c1), f, &bad);
                a->scale_inv[gt_fp8_scale_index(qr, qc, tr, r0, c0 / GT_FP8_TILE)] = 1.0f / scale;
                for (int i = r0; i < r1; i++)
                    for (int j = c0; j < c1; j++)
                        a->q[(size_t)i * qc + j] = quantize(src_at(a, i, j), scale, f);
            }
    } else {
        float amax = a->spec.amax_bits ? given_amax(*a->spec.amax_bits) : amax_of(a, 0, qr, 0, qc);
        gt_fp8_meta *m = a->meta;
        if (!isfinite(amax)) bad = 1;
        float scale = m->scale, scale_inv = m->scale_inv;
        if (a->spec.scaling == GT_FP8_TENSORWISE) {
            /* Transformer Engine's current scaling: scale 1 where amax is 0 */
            scale = gt_fp8_scale_from_amax(amax, 1.0f, f, 0);
            if (scale == FLT_MAX && amax > 0.0f) bad = 1; /* fp8_max / amax overflowed */
            scale_inv = 1.0f / scale;
            if (a->spec.record) *m = (gt_fp8_meta){scale, scale_inv, amax, m->format};
        } else if (a->spec.record && (isnan(amax) || amax > m->amax)) {
            m->amax = amax; /* delayed: the step's max so far */
        }
        *a->scale_inv = scale_inv;
        for (int i = 0; i < qr; i++)
            for (int j = 0; j < qc; j++)
                a->q[(size_t)i * qc + j] = quantize(src_at(a, i, j), scale, f);
    }
    if (bad) a->st->nan_flags |= GT_NAN_FP8;
}

static void cpu_fp8_cast(gt_backend *b, gt_stream *s, void *q, float *scale_inv, const void *x,
                         int rows, int cols, int transpose, gt_fp8_cast_spec spec,
                         gt_fp8_meta *meta, gt_step_state *st) {
    CPU_REQUIRE(b, rows > 0 && cols > 0, "fp8_cast: bad shape %d x %d", rows, cols);
    CPU_REQUIRE(b, q && scale_inv && x && st, "fp8_cast: NULL tensor");
    CPU_REQUIRE(b, spec.scaling == GT_FP8_BLOCKWISE || meta,
                "fp8_cast: tensorwise and delayed scaling need the tensor's gt_fp8_meta");
    CPU_REQUIRE(
        b, spec.scaling != GT_FP8_BLOCKWISE || spec.tile_rows == 1 || spec.tile_rows == GT_FP8_TILE,
        "fp8_cast: blockwise tiles are 1 or %d rows (got %d)", GT_FP8_TILE, spec.tile_rows);
    CPU_REQUIRE(b, !spec.amax_bits || spec.scaling == GT_FP8_TENSORWISE,
                "fp8_cast: an amax taken by the producer is for tensorwise scaling only");
    cast_args a = {q, scale_inv, x, rows, cols, transpose != 0, spec, meta, st};
    if (spec.scaling != GT_FP8_BLOCKWISE) a.spec.tile_rows = 1;
    gt_cpu_submit(b, s, k_fp8_cast, &a, sizeof a);
}

/* Both casts, one after the other: the second derives (or adds) exactly what the first did
 * (blockwise: each form's tiles get their own scales, as two fp8_casts give them) */
static void cpu_fp8_cast_pair(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                              float *scale_inv_t, const void *x, int rows, int cols,
                              gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st) {
    CPU_REQUIRE(b, qt && scale_inv_t, "fp8_cast_pair: NULL transposed output");
    cpu_fp8_cast(b, s, q, scale_inv, x, rows, cols, 0, spec, meta, st);
    cpu_fp8_cast(b, s, qt, scale_inv_t, x, rows, cols, 1, spec, meta, st);
}

typedef struct experts_args {
    float *q, *scale_inv, *qt, *scale_inv_t;
    const float *x;
    int count, rows, cols;
    gt_fp8_cast_spec spec;
    gt_fp8_meta *meta;
    gt_step_state *st;
} experts_args;

/* Expert by expert, each slice's fp8_cast(transpose 0) then fp8_cast(transpose 1), exactly */
static void k_fp8_cast_experts(const void *p) {
    const experts_args *g = p;
    size_t n = (size_t)g->rows * g->cols;
    for (int e = 0; e < g->count; e++) {
        cast_args a = {.x = g->x + (size_t)e * n,
                       .rows = g->rows,
                       .cols = g->cols,
                       .spec = g->spec,
                       .meta = g->meta + e,
                       .st = g->st};
        if (g->q) {
            a.q = g->q + (size_t)e * n;
            a.scale_inv = g->scale_inv + e;
            k_fp8_cast(&a);
        }
        if (g->qt) {
            a.q = g->qt + (size_t)e * n;
            a.scale_inv = g->scale_inv_t + e;
            a.transpose = 1;
            k_fp8_cast(&a);
        }
    }
}

static void cpu_fp8_cast_experts(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                                 float *scale_inv_t, const void *x, int count, int rows, int cols,
                                 gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st) {
    CPU_REQUIRE(b, count > 0 && rows > 0 && cols > 0, "fp8_cast_experts: bad shape %d x %d x %d",
                count, rows, cols);
    CPU_REQUIRE(b, (q || qt) && (!q || scale_inv) && (!qt || scale_inv_t) && x && meta && st,
                "fp8_cast_experts: NULL tensor");
    CPU_REQUIRE(b, spec.scaling != GT_FP8_BLOCKWISE,
                "fp8_cast_experts: per-tensor scaling only (tensorwise or delayed)");
    CPU_REQUIRE(b, !spec.amax_bits,
                "fp8_cast_experts: each expert takes its own amax (spec.amax_bits must be NULL)");
    spec.tile_rows = 1;
    experts_args a = {q, scale_inv, qt, scale_inv_t, x, count, rows, cols, spec, meta, st};
    gt_cpu_submit(b, s, k_fp8_cast_experts, &a, sizeof a);
}

/* The producers that take their output's amax (backend.h): the plain op, then the amax of
 * what it stored, which is exactly what the cast's own pass would find (the GPU folds it in as
 * the producer writes; here one more pass costs nothing that matters). */
typedef struct amax_args {
    uint32_t *amax_bits;
    const float *x;
    size_t n;
} amax_args;

static void k_fold_amax(const void *p) {
    const amax_args *a = p;
    uint32_t m = *a->amax_bits;
    for (size_t i = 0; i < a->n; i++) {
        uint32_t v = gt_fp8_amax_bits(a->x[i]);
        m = v > m ? v : m;
    }
    *a->amax_bits = m;
}

static void fold_amax(gt_backend *b, gt_stream *s, uint32_t *amax_bits, const void *x, size_t n) {
    amax_args a = {amax_bits, x, n};
    gt_cpu_submit(b, s, k_fold_amax, &a, sizeof a);
}

static void cpu_rmsnorm_fwd_amax(gt_backend *b, gt_stream *s, void *out, float *rstd,
                                 const void *inp, const void *w, int N, int d, float eps,
                                 uint32_t *amax_bits) {
    CPU_REQUIRE(b, amax_bits, "rmsnorm_fwd_amax: NULL amax");
    b->ops->rmsnorm_fwd(b, s, out, rstd, inp, w, N, d, eps);
    if (N > 0 && d > 0) fold_amax(b, s, amax_bits, out, (size_t)N * d);
}

static void cpu_swiglu_fwd_amax(gt_backend *b, gt_stream *s, void *out, const void *gu, int N,
                                int f, uint32_t *amax_bits) {
    CPU_REQUIRE(b, amax_bits, "swiglu_fwd_amax: NULL amax");
    b->ops->swiglu_fwd(b, s, out, gu, N, f);
    if (N > 0 && f > 0) fold_amax(b, s, amax_bits, out, (size_t)N * f);
}

static void cpu_rmsnorm_bwd_part_amax(gt_backend *b, gt_stream *s, void *dout_res,
                                      const void *din_res, float *part, const void *dout,
                                      const void *inp, const void *w, const float *rstd, int N,
                                      int d, uint32_t *amax_bits) {
    CPU_REQUIRE(b, amax_bits, "rmsnorm_bwd_part_amax: NULL amax");
    b->ops->rmsnorm_bwd_part(b, s, dout_res, din_res, part, dout, inp, w, rstd, N, d);
    if (N > 0 && d > 0) fold_amax(b, s, amax_bits, dout_res, (size_t)N * d);
}

static void cpu_swiglu_bwd_amax(gt_backend *b, gt_stream *s, void *dgu, const void *dout,
                                const void *gu, int N, int f, uint32_t *amax_bits) {
    CPU_REQUIRE(b, amax_bits, "swiglu_bwd_amax: NULL amax");
    b->ops->swiglu_bwd(b, s, dgu, dout, gu, N, f);
    if (N > 0 && f > 0) fold_amax(b, s, amax_bits, dgu, (size_t)N * 2 * f);
}

static void cpu_rope_bwd_amax(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV,
                              int hd, float theta, float factor, uint32_t *amax_bits) {
    CPU_REQUIRE(b, amax_bits, "rope_bwd_amax: NULL amax");
    if (factor > 0.0f)
        b->ops->rope_scaled_bwd(b, s, dqkv, B, T, H, KV, hd, theta, factor);
    else
        b->ops->rope_bwd(b, s, dqkv, B, T, H, KV, hd, theta);
    if (B > 0 && T > 0 && H > 0 && KV > 0 && hd > 0)
        fold_amax(b, s, amax_bits, dqkv, (size_t)B * T * (size_t)(H + 2 * KV) * hd);
}

typedef struct gemm_args {
    float *out;
    int out_fp32, accumulate;
    gt_fp8_operand a, w;
    gt_fp8_scaling scaling;
    const float *bias, *res;
    int M, N, K;
} gemm_args;

static void k_fp8_gemm(const void *p) {
    const gemm_args *g = p;
    const float *qa = g->a.q, *qw = g->w.q;
    int nkt = (g->K + GT_FP8_TILE - 1) / GT_FP8_TILE;
    int blockwise = g->scaling == GT_FP8_BLOCKWISE;
    float tensor_scale = blockwise ? 1.0f : g->a.scale_inv[0] * g->w.scale_inv[0];
    for (int m = 0; m < g->M; m++) {
        const float *arow = qa + (size_t)m * g->K;
        for (int n = 0; n < g->N; n++) {
            const float *wrow = qw + (size_t)n * g->K;
            float acc = 0.0f;
            for (int t = 0; t < nkt; t++) {
                int k0 = t * GT_FP8_TILE, kc = g->K - k0 < GT_FP8_TILE ? g->K - k0 : GT_FP8_TILE;
                float part = gt_cpu_gemm_dot(arow + k0, wrow + k0, kc);
                if (blockwise) {
                    float sa = g->a.scale_inv[gt_fp8_scale_index(g->M, g->K, g->a.tile_rows, m, t)];
                    float sw = g->w.scale_inv[gt_fp8_scale_index(g->N, g->K, g->w.tile_rows, n, t)];
                    part *= sa * sw;
                }
                acc += part;
            }
            if (!blockwise) acc *= tensor_scale;
            size_t o = (size_t)m * g->N + n;
            if (g->bias) acc += g->bias[n];
            if (g->res) acc += g->res[o];
            g->out[o] = g->accumulate ? g->out[o] + acc : acc;
        }
    }
}

static void cpu_fp8_gemm(gt_backend *b, gt_stream *s, void *out, int out_fp32, int accumulate,
                         gt_fp8_operand a, gt_fp8_operand w, gt_fp8_scaling scaling,
                         const void *bias, const void *res, int M, int N, int K) {
    CPU_REQUIRE(b, M >= 0 && N > 0 && K > 0, "fp8_gemm: bad shape M=%d N=%d K=%d", M, N, K);
    CPU_REQUIRE(b, a.q && w.q && a.scale_inv && w.scale_inv, "fp8_gemm: NULL operand");
    CPU_REQUIRE(b, !res || res != out, "fp8_gemm: res must not alias out");
    CPU_REQUIRE(b, a.tile_rows > 0 && w.tile_rows > 0, "fp8_gemm: tile rows must be > 0");
    /* the emulation always sums in fp32: GT_FP8_FAST_ACCUM changes nothing here */
    gemm_args g = {
        out, (out_fp32 & GT_FP8_OUT_FP32) != 0, accumulate != 0, a, w, scaling, bias, res, M, N, K};
    gt_cpu_submit(b, s, k_fp8_gemm, &g, sizeof g);
}

typedef struct update_args {
    gt_fp8_meta *meta;
    float *history;
    int n, len, use_max, margin;
    gt_step_state *st;
} update_args;

static void k_fp8_amax_update(const void *p) {
    const update_args *u = p;
    for (int i = 0; i < u->n; i++) {
        gt_fp8_meta *m = &u->meta[i];
        float *h = u->history + (size_t)i * u->len;
        h[0] = m->amax;
        float amax = h[0];
        if (u->use_max)
            for (int j = 1; j < u->len; j++)
                amax = isnan(h[j]) || h[j] > amax ? h[j] : amax;
        gt_fp8_format f = (gt_fp8_format)m->format;
        float s = gt_fp8_scale_from_amax(amax, m->scale, f, u->margin);
        if (s == FLT_MAX && amax > 0.0f && isfinite(amax)) u->st->nan_flags |= GT_NAN_FP8;
        m->scale = s;
        m->scale_inv = 1.0f / s;
        float newest = h[0];
        for (int j = 0; j + 1 < u->len; j++)
            h[j] = h[j + 1];
        h[u->len - 1] = newest;
        h[0] = 0.0f;
        m->amax = 0.0f;
    }
}

static void cpu_fp8_amax_update(gt_backend *b, gt_stream *s, gt_fp8_meta *meta, float *history,
                                int n, int history_len, int use_max, int margin,
                                gt_step_state *st) {
    CPU_REQUIRE(b, n >= 0 && history_len > 0 && margin >= 0,
                "fp8_amax_update: bad arguments n=%d history_len=%d margin=%d", n, history_len,
                margin);
    CPU_REQUIRE(b, n == 0 || (meta && history && st), "fp8_amax_update: NULL state");
    update_args u = {meta, history, n, history_len, use_max != 0, margin, st};
    gt_cpu_submit(b, s, k_fp8_amax_update, &u, sizeof u);
}

void gt_cpu_register_fp8_ops(gt_backend_ops *ops) {
    ops->fp8_cast = cpu_fp8_cast;
    ops->fp8_cast_pair = cpu_fp8_cast_pair;
    ops->fp8_cast_experts = cpu_fp8_cast_experts;
    ops->fp8_gemm = cpu_fp8_gemm;
    ops->fp8_amax_update = cpu_fp8_amax_update;
    ops->rmsnorm_fwd_amax = cpu_rmsnorm_fwd_amax;
    ops->swiglu_fwd_amax = cpu_swiglu_fwd_amax;
    ops->rmsnorm_bwd_part_amax = cpu_rmsnorm_bwd_part_amax;
    ops->swiglu_bwd_amax = cpu_swiglu_bwd_amax;
    ops->rope_bwd_amax = cpu_rope_bwd_amax;
    gt_cpu_register_fp8_bias_ops(ops);
    gt_cpu_register_moe_fp8_ops(ops);
}
