/* CPU reference of the decode ops (backend/decode_ops.h), fp32 tensors with double math as
 * the training forward's rope and attention use, so a cached decode step gives the logits
 * the full forward gives at that position. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/decode_ops.h"
#include "core/philox.h"

/* The accumulators of one head live on the stack (ops never allocate) */
#define CPU_DECODE_MAX_HD 1024

/* ---- rope at a position ---- */

typedef struct rope_at_args {
    float *qkv;
    const gt_decode_state *st;
    int H, KV, hd;
    float theta, factor;
} rope_at_args;

/* rope_inv_freq of cpu_attention.c: pair i's inverse frequency, Llama 3.1's scaling */
static double inv_freq(double theta, double factor, int i, int hd) {
    double f = pow(theta, -2.0 * i / hd);
    if (factor <= 0) return f;
    const double pi = 3.14159265358979323846;
    double wavelen = 2 * pi / f;
    if (wavelen < GT_ROPE_ORIGINAL_MAX / GT_ROPE_HIGH_FREQ_FACTOR) return f;
    if (wavelen > GT_ROPE_ORIGINAL_MAX / GT_ROPE_LOW_FREQ_FACTOR) return f / factor;
    double smooth = (GT_ROPE_ORIGINAL_MAX / wavelen - GT_ROPE_LOW_FREQ_FACTOR) /
                    (GT_ROPE_HIGH_FREQ_FACTOR - GT_ROPE_LOW_FREQ_FACTOR);
    return (1 - smooth) * f / factor + smooth * f;
}

static void k_rope_at(const void *p) {
    const rope_at_args *a = p;
    int half = a->hd / 2, t = a->st->pos;
    for (int i = 0; i < half; i++) {
        double ang = t * inv_freq(a->theta, a->factor, i, a->hd);
        double c = cos(ang), s = sin(ang);
        for (int h = 0; h < a->H + a->KV; h++) {
            float *x = a->qkv + (size_t)h * a->hd;
            double x1 = x[i], x2 = x[i + half];
            x[i] = (float)(x1 * c - x2 * s);
            x[i + half] = (float)(x1 * s + x2 * c);
        }
    }
}

static void cpu_rope_at(gt_backend *b, gt_stream *s, void *qkv, const gt_decode_state *st, int H,
                        int KV, int hd, float theta, float factor) {
    CPU_REQUIRE(b,
                qkv && st && H > 0 && KV > 0 && hd > 0 && hd % 2 == 0 && theta > 0 && factor >= 0,
                "decode rope_at: bad arguments H=%d KV=%d hd=%d theta=%g (an even head size, "
                "theta > 0, a decode state)",
                H, KV, hd, (double)theta);
    rope_at_args a = {qkv, st, H, KV, hd, theta, factor};
    gt_cpu_submit(b, s, k_rope_at, &a, sizeof a);
}

/* ---- KV cache append ---- */

typedef struct kv_args {
    float *kc, *vc;
    const float *qkv;
    const gt_decode_state *st;
    int n, H, KV, hd;
} kv_args;

static void k_kv_store(const void *p) {
    const kv_args *a = p;
    int p0 = a->st ? a->st->pos : 0, w = a->KV * a->hd, C = (a->H + 2 * a->KV) * a->hd;
    for (int r = 0; r < a->n; r++) {
        const float *row = a->qkv + (size_t)r * C;
        memcpy(a->kc + (size_t)(p0 + r) * w, row + (size_t)a->H * a->hd, (size_t)w * sizeof(float));
        memcpy(a->vc + (size_t)(p0 + r) * w, row + (size_t)(a->H + a->KV) * a->hd,
               (size_t)w * sizeof(float));
    }
}

static void cpu_kv_store(gt_backend *b, gt_stream *s, void *kc, void *vc, const void *qkv, int n,
                         const gt_decode_state *st, int H, int KV, int hd) {
    CPU_REQUIRE(b, kc && vc && qkv && n > 0 && H > 0 && KV > 0 && hd > 0,
                "decode kv_store: bad arguments n=%d H=%d KV=%d hd=%d", n, H, KV, hd);
    kv_args a = {kc, vc, qkv, st, n, H, KV, hd};
    gt_cpu_submit(b, s, k_kv_store, &a, sizeof a);
}

/* ---- attention of one query over the cache ---- */

typedef struct dattn_args {
    float *out;
    const float *q, *kc, *vc;
    const gt_decode_state *st;
    int L, H, KV, hd;
    float *ws;
} dattn_args;

/* Double scores, exps and sums, as the training forward's attention (cpu_attention.c): a
 * pass for the maximum score, then one for the weights and the weighted values. */
static double dot_d(const float *q, const float *k, int n) {
    double d = 0;
    for (int c = 0; c < n; c++)
        d += (double)q[c] * k[c];
    return d;
}

static void k_decode_attention(const void *p) {
    const dattn_args *a = p;
    int n = a->st->pos + 1, w = a->KV * a->hd, group = a->H / a->KV, hd = a->hd;
    if (n < 1 || n > a->L) return; /* the decoder never steps past the cache */
    double scale = 1.0 / sqrt((double)hd), acc[CPU_DECODE_MAX_HD];
    for (int h = 0; h < a->H; h++) {
        const float *q = a->q + (size_t)h * hd;
        size_t off = (size_t)(h / group) * hd;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double d = scale * dot_d(q, a->kc + (size_t)j * w + off, hd);
            if (d > mx) mx = d;
        }
        memset(acc, 0, (size_t)hd * sizeof *acc);
        for (int j = 0; j < n; j++) {
            double e = exp(scale * dot_d(q, a->kc + (size_t)j * w + off, hd) - mx);
            const float *v = a->vc + (size_t)j * w + off;
            sum += e;
            for (int c = 0; c < hd; c++)
                acc[c] += e * v[c];
        }
        for (int c = 0; c < hd; c++)
            a->out[(size_t)h * hd + c] = (float)(acc[c] / sum);
    }
}

static void cpu_decode_attention(gt_backend *b, gt_stream *s, void *out, const void *q,
                                 const void *kc, const void *vc, const gt_decode_state *st, int L,
                                 int H, int KV, int hd, float *ws) {
    CPU_REQUIRE(b,
                out && q && kc && vc && st && ws && L > 0 && H > 0 && KV > 0 && H % KV == 0 &&
                    hd > 0 && hd <= CPU_DECODE_MAX_HD,
                "decode attention: bad arguments L=%d H=%d KV=%d hd=%d (H a multiple of KV, "
                "hd <= %d)",
                L, H, KV, hd, CPU_DECODE_MAX_HD);
    dattn_args a = {out, q, kc, vc, st, L, H, KV, hd, ws};
    gt_cpu_submit(b, s, k_decode_attention, &a, sizeof a);
}

/* ---- sampling ---- */

typedef struct sample_args {
    gt_decode_state *st;
    const float *logits;
    int V;
    gt_sample_params p;
    float *ws;
} sample_args;

static uint32_t key_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return gt_sample_key(u);
}

/* The largest key t with (the count, or the weight w, of the ids whose key >= t) >= target,
 * bit by bit from the top: the measure only falls as t rises, so this is the cut. */
static uint32_t cut(const float *l, const float *w, int V, double target) {
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; bit--) {
        uint32_t c = t | (1u << bit);
        double m = 0;
        for (int i = 0; i < V; i++)
            if (key_of(l[i]) >= c) m += w ? w[i] : 1.0;
        if (m >= target) t = c;
    }
    return t;
}

static void k_sample(const void *p) {
    const sample_args *a = p;
    const float *l = a->logits;
    int V = a->V, best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    int id = best;
    if (a->p.temperature > 0) {
        uint32_t tk = 0; /* every key is >= 0 */
        if (a->p.top_k > 0 && a->p.top_k < V) tk = cut(l, NULL, V, a->p.top_k);
        /* the weights of the top-k set in ws (zero outside it); the later passes tell the
         * kept ids by their keys again */
        double total = 0;
        for (int i = 0; i < V; i++) {
            int keep = key_of(l[i]) >= tk;
            a->ws[i] = keep ? (float)exp((double)(l[i] - l[best]) / a->p.temperature) : 0.0f;
            total += a->ws[i];
        }
        uint32_t tp = 0;
        if (a->p.top_p < 1) tp = cut(l, a->ws, V, (double)a->p.top_p * total);
        uint32_t th = tk > tp ? tk : tp;
        double kept = 0;
        int last = best;
        for (int i = 0; i < V; i++)
            if (key_of(l[i]) >= th) kept += a->ws[i], last = i;
        gt_philox4 c = {{a->st->draws, 0, GT_SAMPLE_PHILOX_TAG, 0}};
        gt_philox4 r = gt_philox4x32_10(c, a->p.seed);
        double u = gt_sample_uniform_bits(r.v[0], r.v[1]) * kept, acc = 0;
        id = last;
        for (int i = 0; i < V; i++)
            if (key_of(l[i]) >= th) {
                acc += a->ws[i];
                if (u < acc) {
                    id = i;
                    break;
                }
            }
    }
    a->st->token = id;
    a->st->pos += 1;
    a->st->draws += 1;
}

static void cpu_sample(gt_backend *b, gt_stream *s, gt_decode_state *st, const void *logits, int V,
                       gt_sample_params p, float *ws) {
    CPU_REQUIRE(b, st && logits && ws && V > 0 && p.top_k >= 0 && p.top_p > 0,
                "decode sample: bad arguments V=%d top_k=%d top_p=%g (top_k >= 0, top_p > 0)", V,
                p.top_k, (double)p.top_p);
    sample_args a = {st, logits, V, p, ws};
    gt_cpu_submit(b, s, k_sample, &a, sizeof a);
}

static const gt_decode_ops cpu_decode_ops = {
    cpu_rope_at,
    cpu_kv_store,
    cpu_decode_attention,
    cpu_sample,
};

const gt_decode_ops *gt_cpu_decode_ops(void) {
    return &cpu_decode_ops;
}
