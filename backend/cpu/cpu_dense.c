/* CPU reference: dense transformer ops (embedding, rmsnorm, add, dropout, matmul, swiglu) in
 * fp32; matmuls use the blocked GEMM of cpu_gemm.c, row reductions use double accumulators.
 * Every reduction runs in one fixed loop order, so results are bitwise reproducible run to
 * run and eager vs replay. Attention and rope live in
 * cpu_attention.c, cross entropy and the loss sum in cpu_loss.c. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_ops.h"
#include "core/philox.h"

/* ---- embedding ---- */

typedef struct emb_args {
    gt_backend *b;         /* for run-time errors (a token id out of range) */
    float *out;            /* [N,d] fwd output; NULL in bwd */
    float *dwte;           /* [V,d] bwd output (+=) */
    const float *x;        /* fwd: wte [V,d]; bwd: dout [N,d] */
    const int32_t *tokens; /* [N] */
    int N, V, d;
    uint8_t *dirty; /* bwd: [V] marks of the rows of dwte that may be nonzero, or NULL */
    int overwrite;  /* bwd: zero dwte (its marked rows, with marks) first */
} emb_args;

static void k_embedding_fwd(const void *p) {
    const emb_args *a = p;
    for (int n = 0; n < a->N; n++) {
        int32_t t = a->tokens[n];
        float *o = a->out + (size_t)n * a->d;
        if (t < 0 || t >= a->V) {
            gt_backend_fail(a->b, GT_ERR_INVALID,
                            "embedding: token id %d at position %d is outside the vocabulary "
                            "[0, %d); check the data's vocabulary against model.vocab_size",
                            (int)t, n, a->V);
            memset(o, 0, (size_t)a->d * sizeof *o);
            continue;
        }
        memcpy(o, a->x + (size_t)t * a->d, (size_t)a->d * sizeof *o);
    }
}

/* Tokens in sequence order: each row of dwte sums its contributions in token order. */
static void k_embedding_bwd(const void *p) {
    const emb_args *a = p;
    size_t row = (size_t)a->d;
    if (a->overwrite && !a->dirty) memset(a->dwte, 0, (size_t)a->V * row * sizeof(float));
    if (a->overwrite && a->dirty)
        for (int r = 0; r < a->V; r++)
            if (a->dirty[r]) {
                memset(a->dwte + (size_t)r * row, 0, row * sizeof(float));
                a->dirty[r] = 0;
            }
    for (int n = 0; n < a->N; n++) {
        int32_t t = a->tokens[n];
        if (t < 0 || t >= a->V) {
            gt_backend_fail(a->b, GT_ERR_INVALID,
                            "embedding backward: token id %d at position %d is outside the "
                            "vocabulary [0, %d)",
                            (int)t, n, a->V);
            continue;
        }
        float *g = a->dwte + (size_t)t * a->d;
        const float *dy = a->x + (size_t)n * a->d;
        for (int i = 0; i < a->d; i++)
            g[i] += dy[i];
        if (a->dirty) a->dirty[t] = 1;
    }
}

/* The forward does not know V: wte's row count is not part of the op; ids are only checked
 * against INT32_MAX there (the backward, which gets V, checks the range). */
static void cpu_embedding_fwd(gt_backend *b, gt_stream *s, void *out, const int32_t *tokens,
                              const void *wte, int N, int d) {
    CPU_REQUIRE(b, N >= 0 && d > 0, "embedding_fwd: bad shape N=%d d=%d", N, d);
    emb_args a = {b, out, NULL, wte, tokens, N, INT32_MAX, d, NULL, 0};
    gt_cpu_submit(b, s, k_embedding_fwd, &a, sizeof a);
}

static void cpu_embedding_bwd(gt_backend *b, gt_stream *s, float *dwte, uint8_t *dirty,
                              const void *dout, const int32_t *tokens, int N, int V, int d,
                              int overwrite) {
    CPU_REQUIRE(b, N >= 0 && V > 0 && d > 0, "embedding_bwd: bad shape N=%d V=%d d=%d", N, V, d);
    emb_args a = {b, NULL, dwte, dout, tokens, N, V, d, dirty, overwrite != 0};
    gt_cpu_submit(b, s, k_embedding_bwd, &a, sizeof a);
}

/* ---- rmsnorm ---- */

typedef struct rms_args {
    float *out;        /* fwd: out [N,d]; bwd: dinp [N,d] (+=) */
    float *stat;       /* fwd: rstd [N] written; bwd: dw [d] ((+)= by accumulate) */
    const float *inp;  /* [N,d] */
    const float *w;    /* [d] */
    const float *dout; /* bwd: [N,d] */
    const float *rstd; /* bwd: [N] */
    int N, d;
    float eps;
    int accumulate; /* bwd: add into dw (1) or overwrite it (0) */
} rms_args;

static void k_rmsnorm_fwd(const void *p) {
    const rms_args *a = p;
    for (int n = 0; n < a->N; n++) {
        const float *x = a->inp + (size_t)n * a->d;
        float *o = a->out + (size_t)n * a->d;
        double ss = 0;
        for (int i = 0; i < a->d; i++)
            ss += (double)x[i] * x[i];
        float r = (float)(1.0 / sqrt(ss / a->d + (double)a->eps));
        if (a->stat) a->stat[n] = r;
        for (int i = 0; i < a->d; i++)
            o[i] = x[i] * r * a->w[i];
    }
}

/* dw[i] (+)= sum_n dy x r, a double sum per column in row order; columns go in blocks so the
 * rows are read contiguously. */
#define RMS_DW_BLOCK 256

static void rmsnorm_dw(const rms_args *a) {
    double acc[RMS_DW_BLOCK];
    for (int i0 = 0; i0 < a->d; i0 += RMS_DW_BLOCK) {
        int nb = a->d - i0 < RMS_DW_BLOCK ? a->d - i0 : RMS_DW_BLOCK;
        for (int j = 0; j < nb; j++)
            acc[j] = 0;
        for (int n = 0; n < a->N; n++) {
            size_t o = (size_t)n * a->d + (size_t)i0;
            const float *dy = a->dout + o, *x = a->inp + o;
            double r = a->rstd[n];
            for (int j = 0; j < nb; j++)
                acc[j] += (double)dy[j] * x[j] * r;
        }
        for (int j = 0; j < nb; j++)
            a->stat[i0 + j] = (a->accumulate ? a->stat[i0 + j] : 0.0f) + (float)acc[j];
    }
}

/* y_i = x_i r w_i with r = (mean x^2 + eps)^-1/2:
 * dx_i = r w_i dy_i - r^3 x_i / d * sum_j w_j dy_j x_j;  dw_i = sum_n dy_i x_i r.
 * out = din (zeros if NULL) + dx, row by row; a row is read whole before it is written, so
 * out may alias din or inp. */
static void rmsnorm_dx(const rms_args *a, const float *din) {
    for (int n = 0; n < a->N; n++) {
        size_t o = (size_t)n * a->d;
        const float *x = a->inp + o, *dy = a->dout + o, *dn = din ? din + o : NULL;
        float *dx = a->out + o;
        double r = a->rstd[n], dot = 0;
        for (int i = 0; i < a->d; i++)
            dot += (double)a->w[i] * dy[i] * x[i];
        double c = r * r * r * dot / a->d;
        for (int i = 0; i < a->d; i++)
            dx[i] = (dn ? dn[i] : 0.0f) + (float)(r * a->w[i] * dy[i] - c * x[i]);
    }
}

static void k_rmsnorm_bwd(const void *p) {
    const rms_args *a = p;
    rmsnorm_dx(a, a->out);
    if (a->stat) rmsnorm_dw(a);
}

static void cpu_rmsnorm_fwd(gt_backend *b, gt_stream *s, void *out, float *rstd, const void *inp,
                            const void *w, int N, int d, float eps) {
    CPU_REQUIRE(b, N >= 0 && d > 0, "rmsnorm_fwd: bad shape N=%d d=%d", N, d);
    CPU_REQUIRE(b, eps >= 0, "rmsnorm_fwd: eps must be >= 0, got %g", (double)eps);
    rms_args a = {out, rstd, inp, w, NULL, NULL, N, d, eps, 0};
    gt_cpu_submit(b, s, k_rmsnorm_fwd, &a, sizeof a);
}

static void cpu_rmsnorm_bwd(gt_backend *b, gt_stream *s, void *dinp, float *dw, const void *dout,
                            const void *inp, const void *w, const float *rstd, int N, int d,
                            int accumulate) {
    CPU_REQUIRE(b, N >= 0 && d > 0, "rmsnorm_bwd: bad shape N=%d d=%d", N, d);
    rms_args a = {dinp, dw, inp, w, dout, rstd, N, d, 0, accumulate != 0};
    gt_cpu_submit(b, s, k_rmsnorm_bwd, &a, sizeof a);
}

/* The weight gradient left in gt_rmsnorm_parts(N) rows: row 0 holds the sum rmsnorm_bwd
 * computes, the other rows zeros, so colsum_many gives back rmsnorm_bwd's dw bit for bit
 * (x + 0.0f == x). */
typedef struct rms_part_args {
    rms_args r;
    const float *din; /* NULL: zeros */
    int parts;
} rms_part_args;

static void k_rmsnorm_bwd_part(const void *p) {
    const rms_part_args *pa = p;
    rmsnorm_dw(&pa->r); /* first: out may alias inp */
    memset(pa->r.stat + pa->r.d, 0, (size_t)(pa->parts - 1) * (size_t)pa->r.d * sizeof(float));
    rmsnorm_dx(&pa->r, pa->din);
}

static void cpu_rmsnorm_bwd_part(gt_backend *b, gt_stream *s, void *dout_res, const void *din_res,
                                 float *part, const void *dout, const void *inp, const void *w,
                                 const float *rstd, int N, int d) {
    CPU_REQUIRE(b, N > 0 && d > 0, "rmsnorm_bwd_part: bad shape N=%d d=%d", N, d);
    CPU_REQUIRE(b, part != NULL, "rmsnorm_bwd_part: no buffer for the partial rows");
    rms_part_args a = {
        {dout_res, part, inp, w, dout, rstd, N, d, 0, 0}, din_res, gt_rmsnorm_parts(N)};
    gt_cpu_submit(b, s, k_rmsnorm_bwd_part, &a, sizeof a);
}

typedef struct colsum_many_args {
    gt_colsum_job jobs[GT_COLSUM_MAX_JOBS];
    int n;
} colsum_many_args;

static void k_colsum_many(const void *p) {
    const colsum_many_args *a = p;
    for (int j = 0; j < a->n; j++) {
        const gt_colsum_job *jb = &a->jobs[j];
        for (int c = 0; c < jb->d; c++) {
            float t = 0.0f;
            for (int q = 0; q < jb->parts; q++)
                t += jb->part[(size_t)q * (size_t)jb->d + (size_t)c];
            jb->out[c] = (jb->accumulate ? jb->out[c] : 0.0f) + t;
        }
    }
}

static void cpu_colsum_many(gt_backend *b, gt_stream *s, const gt_colsum_job *jobs, int n) {
    CPU_REQUIRE(b, n >= 0 && n <= GT_COLSUM_MAX_JOBS, "colsum_many: %d jobs (at most %d)", n,
                GT_COLSUM_MAX_JOBS);
    colsum_many_args a;
    memset(&a, 0, sizeof a);
    for (int j = 0; j < n; j++) {
        CPU_REQUIRE(b, jobs[j].parts >= 0 && jobs[j].d > 0, "colsum_many: job %d: parts=%d d=%d", j,
                    jobs[j].parts, jobs[j].d);
        a.jobs[j] = jobs[j];
    }
    a.n = n;
    gt_cpu_submit(b, s, k_colsum_many, &a, sizeof a);
}

/* ---- add ---- */

typedef struct add_args {
    float *out;
    const float *x, *y;
    size_t n;
} add_args;

static void k_add(const void *p) {
    const add_args *a = p;
    for (size_t i = 0; i < a->n; i++)
        a->out[i] = a->x[i] + a->y[i];
}

static void cpu_add(gt_backend *b, gt_stream *s, void *out, const void *x, const void *y,
                    size_t n) {
    add_args a = {out, x, y, n};
    gt_cpu_submit(b, s, k_add, &a, sizeof a);
}

/* ---- dropout ---- */

typedef struct drop_args {
    float *out;
    const float *in;
    size_t n;
    float p;
    gt_rng_site site;
    const gt_step_state *st; /* step and micro read at run time: replays see fresh masks */
} drop_args;

/* Forward and backward are the same map: scale kept elements by 1/(1-p), zero the rest. */
static void k_dropout(const void *p) {
    const drop_args *a = p;
    if (a->p <= 0) {
        if (a->out != a->in) memmove(a->out, a->in, a->n * sizeof *a->out);
        return;
    }
    uint32_t micro = (uint32_t)a->st->micro, step = (uint32_t)a->st->step;
    float scale = 1.0f / (1.0f - a->p);
    for (size_t i = 0; i < a->n; i++) {
        int keep = gt_dropout_keep(a->site.seed, a->site.site, micro, step, i, a->p);
        a->out[i] = keep ? a->in[i] * scale : 0.0f;
    }
}

static void submit_dropout(gt_backend *b, gt_stream *s, const char *what, void *out, const void *in,
                           size_t n, float p, gt_rng_site site, const gt_step_state *st) {
    CPU_REQUIRE(b, p >= 0 && p < 1,
                "%s: dropout probability must be in [0, 1), got %g; fix the model's "
                "dropout settings",
                what, (double)p);
    CPU_REQUIRE(b, st != NULL || p == 0, "%s: a step state is needed for dropout", what);
    drop_args a = {out, in, n, p, site, st};
    gt_cpu_submit(b, s, k_dropout, &a, sizeof a);
}

static void cpu_dropout_fwd(gt_backend *b, gt_stream *s, void *out, const void *in, size_t n,
                            float p, gt_rng_site site, const gt_step_state *st) {
    submit_dropout(b, s, "dropout_fwd", out, in, n, p, site, st);
}

static void cpu_dropout_bwd(gt_backend *b, gt_stream *s, void *dx, const void *dy, size_t n,
                            float p, gt_rng_site site, const gt_step_state *st) {
    submit_dropout(b, s, "dropout_bwd", dx, dy, n, p, site, st);
}

/* ---- matmul ---- */

typedef struct mm_args {
    float *out;        /* fwd: out [M,N]; data: da [M,K]; weight: dw [N,K] */
    float *dbias;      /* weight: [N] or NULL */
    const float *x;    /* fwd: a [M,K]; data/weight: dout [M,N] */
    const float *y;    /* fwd: w [N,K]; data: w [N,K]; weight: a [M,K] */
    const float *bias; /* fwd: [N] or NULL */
    const float *res;  /* fwd: [M,N] added to out, or NULL */
    int M, N, K, accumulate;
} mm_args;

/* The three products are one strided GEMM (cpu_gemm.c) each: fp32 sums in a fixed blocked
 * order, so eager runs and replays agree bitwise. */
static void k_matmul_fwd(const void *p) {
    const mm_args *a = p;
    gt_cpu_gemm_args g = {.c = a->out,
                          .ldc = (size_t)a->N,
                          .a = a->x,
                          .a_rs = (size_t)a->K,
                          .a_cs = 1,
                          .b = a->y,
                          .b_rs = 1,
                          .b_cs = (size_t)a->K,
                          .bias = a->bias,
                          .M = a->M,
                          .N = a->N,
                          .K = a->K,
                          .accumulate = 0};
    gt_cpu_gemm_run(&g);
    if (a->res)
        for (size_t i = 0; i < (size_t)a->M * a->N; i++)
            a->out[i] += a->res[i];
}

/* da[M,K] (+)= dout[M,N] w[N,K]: the reduction runs over N. */
static void k_matmul_bwd_data(const void *p) {
    const mm_args *a = p;
    gt_cpu_gemm_args g = {.c = a->out,
                          .ldc = (size_t)a->K,
                          .a = a->x,
                          .a_rs = (size_t)a->N,
                          .a_cs = 1,
                          .b = a->y,
                          .b_rs = (size_t)a->K,
                          .b_cs = 1,
                          .bias = NULL,
                          .M = a->M,
                          .N = a->K,
                          .K = a->N,
                          .accumulate = a->accumulate};
    gt_cpu_gemm_run(&g);
}

/* Column sums of dout in blocks of columns, each a double sum over rows in row order. */
#define MM_DBIAS_BLOCK 256

static void matmul_dbias(const mm_args *a) {
    double acc[MM_DBIAS_BLOCK];
    for (int n0 = 0; n0 < a->N; n0 += MM_DBIAS_BLOCK) {
        int nb = a->N - n0 < MM_DBIAS_BLOCK ? a->N - n0 : MM_DBIAS_BLOCK;
        for (int j = 0; j < nb; j++)
            acc[j] = 0;
        for (int m = 0; m < a->M; m++) {
            const float *dy = a->x + (size_t)m * a->N + (size_t)n0;
            for (int j = 0; j < nb; j++)
                acc[j] += dy[j];
        }
        for (int j = 0; j < nb; j++)
            a->dbias[n0 + j] = (a->accumulate ? a->dbias[n0 + j] : 0.0f) + (float)acc[j];
    }
}

/* dw[N,K] (+)= dout[M,N]^T a[M,K]: the reduction runs over the M tokens. */
static void k_matmul_bwd_weight(const void *p) {
    const mm_args *a = p;
    gt_cpu_gemm_args g = {.c = a->out,
                          .ldc = (size_t)a->K,
                          .a = a->x,
                          .a_rs = 1,
                          .a_cs = (size_t)a->N,
                          .b = a->y,
                          .b_rs = (size_t)a->K,
                          .b_cs = 1,
                          .bias = NULL,
                          .M = a->N,
                          .N = a->K,
                          .K = a->M,
                          .accumulate = a->accumulate};
    gt_cpu_gemm_run(&g);
    if (a->dbias) matmul_dbias(a);
}

#define MM_SHAPE_OK(M, N, K) ((M) >= 0 && (N) > 0 && (K) > 0)

static void cpu_matmul_fwd(gt_backend *b, gt_stream *s, void *out, const void *x, const void *w,
                           const void *bias, const void *res, int M, int N, int K) {
    CPU_REQUIRE(b, MM_SHAPE_OK(M, N, K), "matmul_fwd: bad shape M=%d N=%d K=%d", M, N, K);
    CPU_REQUIRE(b, !res || res != out, "matmul_fwd: res must not alias out");
    mm_args a = {out, NULL, x, w, bias, res, M, N, K, 0};
    gt_cpu_submit(b, s, k_matmul_fwd, &a, sizeof a);
}

static void cpu_matmul_bwd_data(gt_backend *b, gt_stream *s, void *da, const void *dout,
                                const void *w, int M, int N, int K, int accumulate) {
    CPU_REQUIRE(b, MM_SHAPE_OK(M, N, K), "matmul_bwd_data: bad shape M=%d N=%d K=%d", M, N, K);
    mm_args a = {da, NULL, dout, w, NULL, NULL, M, N, K, accumulate != 0};
    gt_cpu_submit(b, s, k_matmul_bwd_data, &a, sizeof a);
}

static void cpu_matmul_bwd_weight(gt_backend *b, gt_stream *s, float *dw, float *dbias,
                                  const void *dout, const void *x, int M, int N, int K,
                                  int accumulate) {
    CPU_REQUIRE(b, MM_SHAPE_OK(M, N, K), "matmul_bwd_weight: bad shape M=%d N=%d K=%d", M, N, K);
    mm_args a = {dw, dbias, dout, x, NULL, NULL, M, N, K, accumulate != 0};
    gt_cpu_submit(b, s, k_matmul_bwd_weight, &a, sizeof a);
}

static void cpu_matmul_bwd_weight_batched(gt_backend *b, gt_stream *s, float *dw, int64_t dw_stride,
                                          const void *dout, int64_t dout_stride, const void *x,
                                          int64_t x_stride, int M, int N, int K, int count,
                                          int accumulate) {
    CPU_REQUIRE(b, MM_SHAPE_OK(M, N, K) && count > 0,
                "matmul_bwd_weight_batched: bad shape M=%d N=%d K=%d count=%d", M, N, K, count);
    CPU_REQUIRE(b, count == 1 || (dw_stride > 0 && dout_stride > 0 && x_stride > 0),
                "matmul_bwd_weight_batched: strides must be > 0 (got %lld, %lld, %lld)",
                (long long)dw_stride, (long long)dout_stride, (long long)x_stride);
    for (int i = 0; i < count; i++)
        cpu_matmul_bwd_weight(b, s, dw + i * dw_stride, NULL, (const float *)dout + i * dout_stride,
                              (const float *)x + i * x_stride, M, N, K, accumulate);
}

/* ---- swiglu ---- */

typedef struct swiglu_args {
    float *out;        /* fwd: out [N,f]; bwd: dgu [N,2f] */
    const float *gu;   /* [N,2f]: gate, then up */
    const float *dout; /* bwd: [N,f] */
    int N, f;
} swiglu_args;

static void k_swiglu_fwd(const void *p) {
    const swiglu_args *a = p;
    for (int n = 0; n < a->N; n++) {
        const float *g = a->gu + (size_t)n * 2 * a->f, *u = g + a->f;
        float *o = a->out + (size_t)n * a->f;
        for (int i = 0; i < a->f; i++) {
            float sig = 1.0f / (1.0f + expf(-g[i]));
            o[i] = g[i] * sig * u[i];
        }
    }
}

/* silu'(g) = sig(g) * (1 + g * (1 - sig(g))) */
static void k_swiglu_bwd(const void *p) {
    const swiglu_args *a = p;
    for (int n = 0; n < a->N; n++) {
        const float *g = a->gu + (size_t)n * 2 * a->f, *u = g + a->f;
        const float *dy = a->dout + (size_t)n * a->f;
        float *dg = a->out + (size_t)n * 2 * a->f, *du = dg + a->f;
        for (int i = 0; i < a->f; i++) {
            float gi = g[i], sig = 1.0f / (1.0f + expf(-gi));
            float dsilu = sig * (1.0f + gi * (1.0f - sig));
            float dyi = dy[i], ui = u[i]; /* read before writing: dgu may alias gu */
            dg[i] = dyi * ui * dsilu;
            du[i] = dyi * gi * sig;
        }
    }
}

static void cpu_swiglu_fwd(gt_backend *b, gt_stream *s, void *out, const void *gu, int N, int f) {
    CPU_REQUIRE(b, N >= 0 && f > 0, "swiglu_fwd: bad shape N=%d f=%d", N, f);
    swiglu_args a = {out, gu, NULL, N, f};
    gt_cpu_submit(b, s, k_swiglu_fwd, &a, sizeof a);
}

static void cpu_swiglu_bwd(gt_backend *b, gt_stream *s, void *dgu, const void *dout, const void *gu,
                           int N, int f) {
    CPU_REQUIRE(b, N >= 0 && f > 0, "swiglu_bwd: bad shape N=%d f=%d", N, f);
    swiglu_args a = {dgu, gu, dout, N, f};
    gt_cpu_submit(b, s, k_swiglu_bwd, &a, sizeof a);
}

void gt_cpu_register_dense_ops(gt_backend_ops *ops) {
    ops->embedding_fwd = cpu_embedding_fwd;
    ops->embedding_bwd = cpu_embedding_bwd;
    ops->rmsnorm_fwd = cpu_rmsnorm_fwd;
    ops->rmsnorm_bwd = cpu_rmsnorm_bwd;
    ops->rmsnorm_bwd_part = cpu_rmsnorm_bwd_part;
    ops->colsum_many = cpu_colsum_many;
    ops->add = cpu_add;
    ops->dropout_fwd = cpu_dropout_fwd;
    ops->dropout_bwd = cpu_dropout_bwd;
    ops->matmul_fwd = cpu_matmul_fwd;
    ops->matmul_bwd_data = cpu_matmul_bwd_data;
    ops->matmul_bwd_weight = cpu_matmul_bwd_weight;
    ops->matmul_bwd_weight_batched = cpu_matmul_bwd_weight_batched;
    ops->swiglu_fwd = cpu_swiglu_fwd;
    ops->swiglu_bwd = cpu_swiglu_bwd;
    gt_cpu_register_loss_ops(ops);
    gt_cpu_register_attention_ops(ops);
    gt_cpu_register_qk_norm_ops(ops);
}
