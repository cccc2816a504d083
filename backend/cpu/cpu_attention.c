/* CPU reference: rotary embedding and causal grouped-query attention with dropout on the
 * probabilities. O(T^2) per head with dots and axpys along contiguous head rows (double in the
 * forward, fp32 in the backward); the backward recomputes probabilities from the saved lse (as
 * flash attention does), and dropout masks come from Philox with the element index
 * ((b*H + h)*T + i)*T + j, so forward, backward and every backend agree. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_ops.h"
#include "core/philox.h"

/* Per-row accumulators live on the stack (ops never allocate); this bounds the head size. */
#define CPU_ATTN_MAX_HD 512
/* Scores of one query row are computed in chunks of this many keys (stack buffer). */
#define ATTN_CHUNK 512

/* ---- rope ---- */

typedef struct rope_args {
    float *qkv; /* [B*T, (H + 2*KV) * hd], q and k heads rotated in place */
    int B, T, H, KV, hd, inverse;
    float theta;
    float factor; /* Llama 3.1 scaling factor; 0 = none */
} rope_args;

/* Pair i's inverse frequency, with Llama 3.1's scaling when factor > 0 (backend.h). */
static double rope_inv_freq(const rope_args *a, int i) {
    double f = pow((double)a->theta, -2.0 * i / a->hd);
    if (a->factor <= 0) return f;
    const double pi = 3.14159265358979323846;
    double wavelen = 2 * pi / f, factor = a->factor;
    if (wavelen < GT_ROPE_ORIGINAL_MAX / GT_ROPE_HIGH_FREQ_FACTOR) return f;
    if (wavelen > GT_ROPE_ORIGINAL_MAX / GT_ROPE_LOW_FREQ_FACTOR) return f / factor;
    double smooth = (GT_ROPE_ORIGINAL_MAX / wavelen - GT_ROPE_LOW_FREQ_FACTOR) /
                    (GT_ROPE_HIGH_FREQ_FACTOR - GT_ROPE_LOW_FREQ_FACTOR);
    return (1 - smooth) * f / factor + smooth * f;
}

/* The angle depends only on (t, i): computed once and applied to every sequence and head. */
static void k_rope(const void *p) {
    const rope_args *a = p;
    int half = a->hd / 2, C = (a->H + 2 * a->KV) * a->hd;
    for (int t = 0; t < a->T; t++)
        for (int i = 0; i < half; i++) {
            double ang = t * rope_inv_freq(a, i);
            double c = cos(ang), s = a->inverse ? -sin(ang) : sin(ang);
            for (int b = 0; b < a->B; b++) {
                float *row = a->qkv + ((size_t)b * a->T + t) * C;
                for (int h = 0; h < a->H + a->KV; h++) { /* q heads, then k heads */
                    float *x = row + (size_t)h * a->hd;
                    double x1 = x[i], x2 = x[i + half];
                    x[i] = (float)(x1 * c - x2 * s);
                    x[i + half] = (float)(x1 * s + x2 * c);
                }
            }
        }
}

static void submit_rope(gt_backend *b, gt_stream *s, const char *what, void *qkv, int B, int T,
                        int H, int KV, int hd, float theta, float factor, int inverse) {
    if (B < 0 || T < 0 || H <= 0 || KV <= 0 || hd <= 0 || hd % 2 != 0 || theta <= 0 || factor < 0) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: bad shape B=%d T=%d H=%d KV=%d hd=%d theta=%g (the head size must "
                        "be even and theta > 0)",
                        what, B, T, H, KV, hd, (double)theta);
        return;
    }
    rope_args a = {qkv, B, T, H, KV, hd, inverse, theta, factor};
    gt_cpu_submit(b, s, k_rope, &a, sizeof a);
}

static void cpu_rope_fwd(gt_backend *b, gt_stream *s, void *qkv, int B, int T, int H, int KV,
                         int hd, float theta) {
    submit_rope(b, s, "rope_fwd", qkv, B, T, H, KV, hd, theta, 0, 0);
}

/* The rotation is orthogonal, so its adjoint is the inverse rotation. */
static void cpu_rope_bwd(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV,
                         int hd, float theta) {
    submit_rope(b, s, "rope_bwd", dqkv, B, T, H, KV, hd, theta, 0, 1);
}

static void cpu_rope_scaled_fwd(gt_backend *b, gt_stream *s, void *qkv, int B, int T, int H, int KV,
                                int hd, float theta, float factor) {
    submit_rope(b, s, "rope_scaled_fwd", qkv, B, T, H, KV, hd, theta, factor, 0);
}

static void cpu_rope_scaled_bwd(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H,
                                int KV, int hd, float theta, float factor) {
    submit_rope(b, s, "rope_scaled_bwd", dqkv, B, T, H, KV, hd, theta, factor, 1);
}

/* ---- attention ---- */

typedef struct attn_args {
    float *out;        /* fwd: out [B*T, H*hd]; bwd: dqkv [B*T, (H+2KV)*hd] */
    float *lse_out;    /* fwd: lse [B,H,T] */
    const float *qkv;  /* [B*T, (H+2KV)*hd] */
    const float *dout; /* bwd: [B*T, H*hd] */
    const float *o;    /* bwd: the forward output [B*T, H*hd] */
    const float *lse;  /* bwd: [B,H,T] */
    int B, T, H, KV, hd;
    float p;
    gt_rng_site site;
    const gt_step_state *st; /* step and micro read at run time */
} attn_args;

/* Geometry of one launch, with the per-step dropout counters already read. */
typedef struct attn_geom {
    const attn_args *a;
    int C, group;
    double scale, keep_scale; /* keep_scale = 1/(1-p) */
    uint32_t micro, step;
} attn_geom;

static attn_geom attn_geom_of(const attn_args *a) {
    attn_geom g;
    g.a = a;
    g.C = (a->H + 2 * a->KV) * a->hd;
    g.group = a->H / a->KV;
    g.scale = 1.0 / sqrt((double)a->hd);
    g.keep_scale = a->p > 0 ? 1.0 / (1.0 - (double)a->p) : 1.0;
    g.micro = a->p > 0 ? (uint32_t)a->st->micro : 0;
    g.step = a->p > 0 ? (uint32_t)a->st->step : 0;
    return g;
}

static const float *q_at(const attn_geom *g, int b, int t, int h) {
    return g->a->qkv + ((size_t)b * g->a->T + t) * g->C + (size_t)h * g->a->hd;
}
static const float *k_at(const attn_geom *g, int b, int t, int kvh) {
    return q_at(g, b, t, g->a->H + kvh);
}
static const float *v_at(const attn_geom *g, int b, int t, int kvh) {
    return q_at(g, b, t, g->a->H + g->a->KV + kvh);
}

/* Dropout multiplier of probability (b, h, i, j): 0 or 1/(1-p); 1 without dropout. */
static float drop_mult(const attn_geom *g, int b, int h, int i, int j) {
    const attn_args *a = g->a;
    if (a->p <= 0) return 1.0f;
    uint64_t idx = (((uint64_t)b * a->H + h) * a->T + i) * a->T + j;
    return gt_dropout_keep(a->site.seed, a->site.site, g->micro, g->step, idx, a->p)
               ? (float)g->keep_scale
               : 0.0f;
}

/* Scaled score of query i (head h) against key j in fp32: the backward's recomputation. */
static float attn_score(const attn_geom *g, const float *q, int b, int j, int kvh) {
    return (float)g->scale * gt_cpu_gemm_dot(q, k_at(g, b, j, kvh), g->a->hd);
}

/* The forward is a small share of a step, so it keeps double scores, exps and sums (lse and
 * out are what the GPU is checked against): dots in four interleaved double lanes. */
#define ATTN_DOT_LANES 4

static double attn_score_d(const attn_geom *g, const float *q, int b, int j, int kvh) {
    const float *k = k_at(g, b, j, kvh);
    int n = g->a->hd, i = 0;
    double part[ATTN_DOT_LANES] = {0};
    for (; i + ATTN_DOT_LANES <= n; i += ATTN_DOT_LANES)
        for (int l = 0; l < ATTN_DOT_LANES; l++)
            part[l] += (double)q[i + l] * k[i + l];
    double s = (part[0] + part[2]) + (part[1] + part[3]);
    for (; i < n; i++)
        s += (double)q[i] * k[i];
    return g->scale * s;
}

/* Scores of query row i over keys 0..i in chunks of ATTN_CHUNK (key order): returns the lse
 * from the running max and double sum of exp. When the row fits one chunk, sc is left holding
 * exp(score - max) and *sum_out the sum, so the output pass needs no second exp. */
static double attn_row_lse(const attn_geom *g, const float *q, int b, int kvh, int i, double *sc,
                           double *sum_out) {
    double mx = -INFINITY, sum = 0;
    int single = i + 1 <= ATTN_CHUNK;
    for (int j0 = 0; j0 <= i; j0 += ATTN_CHUNK) {
        int jn = i + 1 - j0 < ATTN_CHUNK ? i + 1 - j0 : ATTN_CHUNK;
        double cmx = -INFINITY;
        for (int jj = 0; jj < jn; jj++) {
            sc[jj] = attn_score_d(g, q, b, j0 + jj, kvh);
            if (sc[jj] > cmx) cmx = sc[jj];
        }
        if (cmx > mx) {
            if (j0 > 0) sum *= exp(mx - cmx);
            mx = cmx;
        }
        for (int jj = 0; jj < jn; jj++) {
            double e = exp(sc[jj] - mx);
            sum += e;
            if (single) sc[jj] = e;
        }
    }
    *sum_out = sum;
    // cppcheck-suppress invalidFunctionArg ; the loop ran at least once (i >= 0): sum >= 1
    return mx + log(sum);
}

/* Per query row: scores, lse, then out_i = sum_j P_ij m_ij v_j accumulated over the
 * contiguous v rows in key order. */
static void k_attention_fwd(const void *p) {
    const attn_args *a = p;
    attn_geom g = attn_geom_of(a);
    double acc[CPU_ATTN_MAX_HD], sc[ATTN_CHUNK];
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->H; h++) {
            int kvh = h / g.group;
            for (int i = 0; i < a->T; i++) {
                const float *q = q_at(&g, b, i, h);
                double sum, lse = attn_row_lse(&g, q, b, kvh, i, sc, &sum);
                a->lse_out[((size_t)b * a->H + h) * a->T + i] = (float)lse;
                for (int d = 0; d < a->hd; d++)
                    acc[d] = 0;
                for (int j0 = 0; j0 <= i; j0 += ATTN_CHUNK) {
                    int jn = i + 1 - j0 < ATTN_CHUNK ? i + 1 - j0 : ATTN_CHUNK;
                    int single = i + 1 <= ATTN_CHUNK;
                    if (!single)
                        for (int jj = 0; jj < jn; jj++)
                            sc[jj] = exp(attn_score_d(&g, q, b, j0 + jj, kvh) - lse);
                    for (int jj = 0; jj < jn; jj++) {
                        int j = j0 + jj;
                        double pr = (single ? sc[jj] / sum : sc[jj]) * drop_mult(&g, b, h, i, j);
                        const float *v = v_at(&g, b, j, kvh);
                        for (int d = 0; d < a->hd; d++)
                            acc[d] += pr * v[d];
                    }
                }
                float *o = a->out + ((size_t)b * a->T + i) * a->H * a->hd + (size_t)h * a->hd;
                for (int d = 0; d < a->hd; d++)
                    o[d] = (float)acc[d];
            }
        }
}

/* One pass per kv group, probabilities recomputed from the saved lse. For each query row i
 * (heads of the group in order, rows in order) and key j <= i:
 *   ds = P (m dP - D_i) * scale with dP = dout_i . v_j and D_i = dout_i . out_i;
 *   dq_i += ds k_j;  dk_j += ds q_i;  dv_j += P m dout_i.
 * dq_i is summed on the stack in key order; dk_j and dv_j are summed in place in (head, row)
 * order, so every gradient row has one fixed fp32 summation order. */
static void k_attention_bwd(const void *p) {
    const attn_args *a = p;
    attn_geom g = attn_geom_of(a);
    float dq[CPU_ATTN_MAX_HD];
    float scale = (float)g.scale;
    size_t ld_out = (size_t)a->H * a->hd;
    for (int b = 0; b < a->B; b++)
        for (int kvh = 0; kvh < a->KV; kvh++) {
            for (int j = 0; j < a->T; j++) {
                float *row = a->out + ((size_t)b * a->T + j) * g.C;
                memset(row + (size_t)(a->H + kvh) * a->hd, 0, (size_t)a->hd * sizeof *row);
                memset(row + (size_t)(a->H + a->KV + kvh) * a->hd, 0, (size_t)a->hd * sizeof *row);
            }
            for (int h = kvh * g.group; h < (kvh + 1) * g.group; h++)
                for (int i = 0; i < a->T; i++) {
                    const float *q = q_at(&g, b, i, h);
                    size_t off = ((size_t)b * a->T + i) * ld_out + (size_t)h * a->hd;
                    const float *dy = a->dout + off;
                    float di = gt_cpu_gemm_dot(dy, a->o + off, a->hd);
                    float lse = a->lse[((size_t)b * a->H + h) * a->T + i];
                    memset(dq, 0, (size_t)a->hd * sizeof *dq);
                    for (int j = 0; j <= i; j++) {
                        const float *k = k_at(&g, b, j, kvh);
                        const float *v = v_at(&g, b, j, kvh);
                        float *krow = a->out + ((size_t)b * a->T + j) * g.C;
                        float pr = expf(attn_score(&g, q, b, j, kvh) - lse);
                        float m = drop_mult(&g, b, h, i, j);
                        float dp = gt_cpu_gemm_dot(dy, v, a->hd);
                        float ds = pr * (m * dp - di) * scale;
                        gt_cpu_gemm_axpy(dq, ds, k, a->hd);
                        gt_cpu_gemm_axpy(krow + (size_t)(a->H + kvh) * a->hd, ds, q, a->hd);
                        gt_cpu_gemm_axpy(krow + (size_t)(a->H + a->KV + kvh) * a->hd, pr * m, dy,
                                         a->hd);
                    }
                    memcpy(a->out + ((size_t)b * a->T + i) * g.C + (size_t)h * a->hd, dq,
                           (size_t)a->hd * sizeof *dq);
                }
        }
}

static int attn_check(gt_backend *b, const char *what, int B, int T, int H, int KV, int hd, float p,
                      const gt_step_state *st) {
    if (B < 0 || T < 0 || H <= 0 || KV <= 0 || hd <= 0 || H % KV != 0) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: bad shape B=%d T=%d H=%d KV=%d hd=%d; the number of heads must be "
                        "a multiple of the kv heads (model.num_query_groups)",
                        what, B, T, H, KV, hd);
        return 0;
    }
    if (hd > CPU_ATTN_MAX_HD) {
        gt_backend_fail(b, GT_ERR_UNSUPPORTED,
                        "%s: head size %d exceeds the CPU reference limit %d; use a smaller "
                        "kv_channels or the cuda backend",
                        what, hd, CPU_ATTN_MAX_HD);
        return 0;
    }
    if (!(p >= 0 && p < 1) || (p > 0 && !st)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s: attention dropout must be in [0, 1) with a step state, got %g", what,
                        (double)p);
        return 0;
    }
    return 1;
}

static void cpu_attention_fwd(gt_backend *b, gt_stream *s, void *out, float *lse, const void *qkv,
                              int B, int T, int H, int KV, int hd, float p, gt_rng_site site,
                              const gt_step_state *st) {
    if (!attn_check(b, "attention_fwd", B, T, H, KV, hd, p, st)) return;
    attn_args a = {out, lse, qkv, NULL, NULL, NULL, B, T, H, KV, hd, p, site, st};
    gt_cpu_submit(b, s, k_attention_fwd, &a, sizeof a);
}

static void cpu_attention_bwd(gt_backend *b, gt_stream *s, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse, int B, int T,
                              int H, int KV, int hd, float p, gt_rng_site site,
                              const gt_step_state *st) {
    if (!attn_check(b, "attention_bwd", B, T, H, KV, hd, p, st)) return;
    attn_args a = {dqkv, NULL, qkv, dout, out, lse, B, T, H, KV, hd, p, site, st};
    gt_cpu_submit(b, s, k_attention_bwd, &a, sizeof a);
}

void gt_cpu_register_attention_ops(gt_backend_ops *ops) {
    ops->rope_fwd = cpu_rope_fwd;
    ops->rope_bwd = cpu_rope_bwd;
    ops->rope_scaled_fwd = cpu_rope_scaled_fwd;
    ops->rope_scaled_bwd = cpu_rope_scaled_bwd;
    ops->attention_fwd = cpu_attention_fwd;
    ops->attention_bwd = cpu_attention_bwd;
}
