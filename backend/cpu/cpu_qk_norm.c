/* CPU reference of the per-head q/k RMSNorm (model.qk_layernorm): forward in place on the q and
 * k heads of the qkv buffer, keeping the raw values and each head's 1/rms for the backward;
 * backward in place on dqkv with the weight gradients as partial rows (row 0 the whole sum in
 * double, the other rows zeros, as cpu_dense.c's rmsnorm does), so results are bitwise
 * reproducible run to run and eager vs replay. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

typedef struct qk_args {
    float *qkv;      /* fwd: qkv; bwd: dqkv [N, (H + 2*KV) * hd] */
    float *raw;      /* fwd output / bwd input: [N, (H + KV) * hd] (fwd: may be NULL) */
    float *rstd;     /* fwd output / bwd input: [N, H + KV] (fwd: may be NULL) */
    float *qpart;    /* bwd: [parts, hd] */
    float *kpart;    /* bwd: [parts, hd] */
    const float *qw; /* [hd] */
    const float *kw; /* [hd] */
    int N, H, KV, hd, parts;
    float eps;
} qk_args;

static void k_qk_norm_fwd(const void *p) {
    const qk_args *a = p;
    int heads = a->H + a->KV, row = (a->H + 2 * a->KV) * a->hd;
    for (int n = 0; n < a->N; n++)
        for (int h = 0; h < heads; h++) {
            float *x = a->qkv + (size_t)n * row + (size_t)h * a->hd;
            const float *w = h < a->H ? a->qw : a->kw;
            double ss = 0;
            for (int i = 0; i < a->hd; i++)
                ss += (double)x[i] * x[i];
            float r = (float)(1.0 / sqrt(ss / a->hd + (double)a->eps));
            size_t o = ((size_t)n * heads + (size_t)h) * a->hd;
            if (a->raw) memcpy(a->raw + o, x, (size_t)a->hd * sizeof(float));
            if (a->rstd) a->rstd[(size_t)n * heads + h] = r;
            for (int i = 0; i < a->hd; i++)
                x[i] = x[i] * r * w[i];
        }
}

/* y_i = x_i r w_i: dx_i = r w_i dy_i - r^3 x_i / hd * sum_j w_j dy_j x_j; dw_i = sum dy_i x_i r
 * over every token and head of its kind (q heads into dqw, k heads into dkw). */
static void k_qk_norm_bwd(const void *p) {
    const qk_args *a = p;
    int heads = a->H + a->KV, row = (a->H + 2 * a->KV) * a->hd;
    memset(a->qpart, 0, (size_t)a->parts * (size_t)a->hd * sizeof(float));
    memset(a->kpart, 0, (size_t)a->parts * (size_t)a->hd * sizeof(float));
    for (int kind = 0; kind < 2; kind++) {
        int h0 = kind ? a->H : 0, h1 = kind ? heads : a->H;
        float *part = kind ? a->kpart : a->qpart;
        for (int i = 0; i < a->hd; i++) {
            double acc = 0; /* one double sum a column, tokens then heads in order */
            for (int n = 0; n < a->N; n++)
                for (int h = h0; h < h1; h++) {
                    size_t o = ((size_t)n * heads + (size_t)h) * a->hd;
                    acc += (double)a->qkv[(size_t)n * row + (size_t)h * a->hd + i] * a->raw[o + i] *
                           a->rstd[(size_t)n * heads + h];
                }
            part[i] = (float)acc;
        }
    }
    for (int n = 0; n < a->N; n++)
        for (int h = 0; h < heads; h++) {
            float *dy = a->qkv + (size_t)n * row + (size_t)h * a->hd;
            const float *x = a->raw + ((size_t)n * heads + (size_t)h) * a->hd;
            const float *w = h < a->H ? a->qw : a->kw;
            double r = a->rstd[(size_t)n * heads + h], dot = 0;
            for (int i = 0; i < a->hd; i++)
                dot += (double)w[i] * dy[i] * x[i];
            double c = r * r * r * dot / a->hd;
            for (int i = 0; i < a->hd; i++)
                dy[i] = (float)(r * w[i] * dy[i] - c * x[i]);
        }
}

static void cpu_qk_norm_fwd(gt_backend *b, gt_stream *s, void *qkv, void *raw, float *rstd,
                            const void *qw, const void *kw, int N, int H, int KV, int hd,
                            float eps) {
    CPU_REQUIRE(b, N >= 0 && H > 0 && KV > 0 && hd > 0,
                "qk_norm_fwd: bad shape N=%d H=%d KV=%d hd=%d", N, H, KV, hd);
    CPU_REQUIRE(b, eps >= 0, "qk_norm_fwd: eps must be >= 0, got %g", (double)eps);
    CPU_REQUIRE(b, qkv && qw && kw, "qk_norm_fwd: no qkv buffer or no norm weights");
    qk_args a = {qkv, raw, rstd, NULL, NULL, qw, kw, N, H, KV, hd, 0, eps};
    gt_cpu_submit(b, s, k_qk_norm_fwd, &a, sizeof a);
}

static void cpu_qk_norm_bwd_part(gt_backend *b, gt_stream *s, void *dqkv, float *qpart,
                                 float *kpart, const void *raw, const float *rstd, const void *qw,
                                 const void *kw, int N, int H, int KV, int hd) {
    CPU_REQUIRE(b, N > 0 && H > 0 && KV > 0 && hd > 0,
                "qk_norm_bwd_part: bad shape N=%d H=%d KV=%d hd=%d", N, H, KV, hd);
    CPU_REQUIRE(b, dqkv && qpart && kpart && raw && rstd && qw && kw,
                "qk_norm_bwd_part: a buffer is missing (the forward must keep raw and rstd)");
    qk_args a = {dqkv, (float *)raw, (float *)rstd,       qpart, kpart, qw, kw, N, H,
                 KV,   hd,           gt_rmsnorm_parts(N), 0};
    gt_cpu_submit(b, s, k_qk_norm_bwd, &a, sizeof a);
}

void gt_cpu_register_qk_norm_ops(gt_backend_ops *ops) {
    ops->qk_norm_fwd = cpu_qk_norm_fwd;
    ops->qk_norm_bwd_part = cpu_qk_norm_bwd_part;
}
