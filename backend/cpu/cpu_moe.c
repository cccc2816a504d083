/* CPU reference: mixture-of-experts data movement and expert math: the stable permutation to
 * expert order (dropless or drop-and-pad), gather/scatter of token rows, grouped GEMMs over
 * device offsets and the weighted combine. The router is in cpu_router.c. All loops run in
 * token order, so results are deterministic. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_ops.h"

/* ---- permutation ---- */

typedef struct permute_args {
    gt_backend *b;
    int32_t *slot_token; /* [R] */
    int32_t *token_slot; /* [N*k] */
    int32_t *offsets;    /* [E+1] */
    const int32_t *topk_idx;
    int N, E, k, capacity;
} permute_args;

/* Counting sort by expert, stable in assignment order n*k + j. offsets doubles as the
 * per-expert cursor (ops own no scratch): it ends one group ahead and is shifted back. In
 * drop-and-pad mode offsets[e] = e*C so grouped GEMMs cover each expert's full capacity. */
static void k_permute(const void *p) {
    const permute_args *a = p;
    int A = a->N * a->k, E = a->E, C = a->capacity;
    for (int i = 0; i < A; i++) {
        if (a->topk_idx[i] < 0 || a->topk_idx[i] >= E) {
            gt_backend_fail(a->b, GT_ERR_INVALID,
                            "moe_permute: expert index %d of assignment %d is outside [0, %d)",
                            (int)a->topk_idx[i], i, E);
            return;
        }
    }
    int R = C > 0 ? E * C : A;
    for (int r = 0; r < R; r++)
        a->slot_token[r] = -1;
    if (C > 0) {
        for (int e = 0; e <= E; e++)
            a->offsets[e] = e * C;
    } else {
        memset(a->offsets, 0, (size_t)(E + 1) * sizeof *a->offsets);
        for (int i = 0; i < A; i++)
            a->offsets[a->topk_idx[i] + 1]++;
        for (int e = 0; e < E; e++)
            a->offsets[e + 1] += a->offsets[e];
    }
    for (int i = 0; i < A; i++) {
        int e = a->topk_idx[i];
        int32_t *cur = &a->offsets[e];
        if (C > 0 && *cur >= (e + 1) * C) { /* expert full: dropped */
            a->token_slot[i] = -1;
            continue;
        }
        a->token_slot[i] = *cur;
        a->slot_token[*cur] = i;
        (*cur)++;
    }
    if (C > 0) {
        for (int e = 0; e <= E; e++)
            a->offsets[e] = e * C;
    } else {
        for (int e = E; e > 0; e--)
            a->offsets[e] = a->offsets[e - 1];
        a->offsets[0] = 0;
    }
}

static void cpu_moe_permute(gt_backend *b, gt_stream *s, int32_t *slot_token, int32_t *token_slot,
                            int32_t *offsets, const int32_t *topk_idx, int N, int E, int k,
                            int capacity) {
    CPU_REQUIRE(b, N >= 0 && E > 0 && k > 0 && k <= E && capacity >= 0,
                "moe_permute: bad arguments N=%d E=%d k=%d capacity=%d", N, E, k, capacity);
    permute_args a = {b, slot_token, token_slot, offsets, topk_idx, N, E, k, capacity};
    gt_cpu_submit(b, s, k_permute, &a, sizeof a);
}

/* ---- gather / scatter ---- */

typedef struct gather_args {
    float *out;           /* gather: xe [R,d]; bwd: dx [N,d] (+=) */
    const float *in;      /* gather: x [N,d]; bwd: dxe [R,d] */
    const int32_t *index; /* gather: slot_token [R]; bwd: token_slot [N*k] */
    int rows, k, d;       /* rows: R for gather, N for bwd */
} gather_args;

static void k_gather(const void *p) {
    const gather_args *a = p;
    for (int r = 0; r < a->rows; r++) {
        float *o = a->out + (size_t)r * a->d;
        int32_t t = a->index[r];
        if (t < 0)
            memset(o, 0, (size_t)a->d * sizeof *o);
        else
            memcpy(o, a->in + (size_t)(t / a->k) * a->d, (size_t)a->d * sizeof *o);
    }
}

static void k_gather_bwd(const void *p) {
    const gather_args *a = p;
    for (int n = 0; n < a->rows; n++) {
        float *o = a->out + (size_t)n * a->d;
        for (int j = 0; j < a->k; j++) {
            int32_t r = a->index[(size_t)n * a->k + j];
            if (r < 0) continue;
            const float *g = a->in + (size_t)r * a->d;
            for (int i = 0; i < a->d; i++)
                o[i] += g[i];
        }
    }
}

static void cpu_moe_gather(gt_backend *b, gt_stream *s, void *xe, const void *x,
                           const int32_t *slot_token, int R, int k, int d) {
    CPU_REQUIRE(b, R >= 0 && k > 0 && d > 0, "moe_gather: bad shape R=%d k=%d d=%d", R, k, d);
    gather_args a = {xe, x, slot_token, R, k, d};
    gt_cpu_submit(b, s, k_gather, &a, sizeof a);
}

static void cpu_moe_gather_bwd(gt_backend *b, gt_stream *s, void *dx, const void *dxe,
                               const int32_t *token_slot, int N, int k, int d) {
    CPU_REQUIRE(b, N >= 0 && k > 0 && d > 0, "moe_gather_bwd: bad shape N=%d k=%d d=%d", N, k, d);
    gather_args a = {dx, dxe, token_slot, N, k, d};
    gt_cpu_submit(b, s, k_gather_bwd, &a, sizeof a);
}

/* ---- grouped matmul ---- */

typedef struct gmm_args {
    gt_backend *b;
    float *out;             /* fwd: out [R,Nf]; data: da [R,K]; weight: dw [E][Nf,K] */
    const float *x;         /* fwd: a [R,K]; data/weight: dout [R,Nf] */
    const float *y;         /* fwd/data: w [E][Nf,K]; weight: a [R,K] */
    const int32_t *offsets; /* [E+1], read at run time */
    int R, E, Nf, K;
    int accumulate; /* weight: add into dw (1) or overwrite it (0) */
} gmm_args;

static int offsets_ok(const gmm_args *a, const char *what) {
    for (int e = 0; e < a->E; e++) {
        if (a->offsets[e] < 0 || a->offsets[e] > a->offsets[e + 1] || a->offsets[e + 1] > a->R) {
            gt_backend_fail(a->b, GT_ERR_INVALID,
                            "%s: offsets[%d..%d] = %d..%d are not increasing within [0, %d]", what,
                            e, e + 1, (int)a->offsets[e], (int)a->offsets[e + 1], a->R);
            return 0;
        }
    }
    return 1;
}

/* Each group is one strided GEMM (cpu_gemm.c) on its rows, in expert order. */
static void k_gmm_fwd(const void *p) {
    const gmm_args *a = p;
    if (!offsets_ok(a, "moe_matmul_fwd")) return;
    for (int e = 0; e < a->E; e++) {
        int r0 = a->offsets[e], rows = a->offsets[e + 1] - r0;
        gt_cpu_gemm_args g = {.c = a->out + (size_t)r0 * a->Nf,
                              .ldc = (size_t)a->Nf,
                              .a = a->x + (size_t)r0 * a->K,
                              .a_rs = (size_t)a->K,
                              .a_cs = 1,
                              .b = a->y + (size_t)e * a->Nf * a->K,
                              .b_rs = 1,
                              .b_cs = (size_t)a->K,
                              .bias = NULL,
                              .M = rows,
                              .N = a->Nf,
                              .K = a->K,
                              .accumulate = 0};
        gt_cpu_gemm_run(&g);
    }
}

static void k_gmm_bwd_data(const void *p) {
    const gmm_args *a = p;
    if (!offsets_ok(a, "moe_matmul_bwd_data")) return;
    for (int e = 0; e < a->E; e++) {
        int r0 = a->offsets[e], rows = a->offsets[e + 1] - r0;
        gt_cpu_gemm_args g = {.c = a->out + (size_t)r0 * a->K,
                              .ldc = (size_t)a->K,
                              .a = a->x + (size_t)r0 * a->Nf,
                              .a_rs = (size_t)a->Nf,
                              .a_cs = 1,
                              .b = a->y + (size_t)e * a->Nf * a->K,
                              .b_rs = (size_t)a->K,
                              .b_cs = 1,
                              .bias = NULL,
                              .M = rows,
                              .N = a->K,
                              .K = a->Nf,
                              .accumulate = 0};
        gt_cpu_gemm_run(&g);
    }
}

/* dw[e] (+)= dout[group]^T a[group]: the reduction runs over the group's rows in row order; an
 * empty group leaves dw[e] as it is when accumulating and zeroes it otherwise (K = 0 rows). */
static void k_gmm_bwd_weight(const void *p) {
    const gmm_args *a = p;
    if (!offsets_ok(a, "moe_matmul_bwd_weight")) return;
    for (int e = 0; e < a->E; e++) {
        int r0 = a->offsets[e], rows = a->offsets[e + 1] - r0;
        if (rows == 0 && a->accumulate) continue;
        gt_cpu_gemm_args g = {.c = a->out + (size_t)e * a->Nf * a->K,
                              .ldc = (size_t)a->K,
                              .a = a->x + (size_t)r0 * a->Nf,
                              .a_rs = 1,
                              .a_cs = (size_t)a->Nf,
                              .b = a->y + (size_t)r0 * a->K,
                              .b_rs = (size_t)a->K,
                              .b_cs = 1,
                              .bias = NULL,
                              .M = a->Nf,
                              .N = a->K,
                              .K = rows,
                              .accumulate = a->accumulate};
        gt_cpu_gemm_run(&g);
    }
}

static void submit_gmm(gt_backend *b, gt_stream *s, const char *what, gt_cpu_kernel fn, float *out,
                       const float *x, const float *y, const int32_t *offsets, int R, int E, int Nf,
                       int K, int accumulate) {
    CPU_REQUIRE(b, R >= 0 && E > 0 && Nf > 0 && K > 0, "%s: bad shape R=%d E=%d Nf=%d K=%d", what,
                R, E, Nf, K);
    gmm_args a = {b, out, x, y, offsets, R, E, Nf, K, accumulate != 0};
    gt_cpu_submit(b, s, fn, &a, sizeof a);
}

static void cpu_moe_matmul_fwd(gt_backend *b, gt_stream *s, void *out, const void *x, const void *w,
                               const int32_t *offsets, int R, int E, int Nf, int K) {
    submit_gmm(b, s, "moe_matmul_fwd", k_gmm_fwd, out, x, w, offsets, R, E, Nf, K, 0);
}

static void cpu_moe_matmul_bwd_data(gt_backend *b, gt_stream *s, void *da, const void *dout,
                                    const void *w, const int32_t *offsets, int R, int E, int Nf,
                                    int K) {
    submit_gmm(b, s, "moe_matmul_bwd_data", k_gmm_bwd_data, da, dout, w, offsets, R, E, Nf, K, 0);
}

static void cpu_moe_matmul_bwd_weight(gt_backend *b, gt_stream *s, float *dw, const void *dout,
                                      const void *x, const int32_t *offsets, int R, int E, int Nf,
                                      int K, int accumulate) {
    submit_gmm(b, s, "moe_matmul_bwd_weight", k_gmm_bwd_weight, dw, dout, x, offsets, R, E, Nf, K,
               accumulate);
}

/* ---- combine ---- */

typedef struct combine_args {
    float *y;                  /* fwd: y [N,d]; bwd: dye [R,d] */
    float *dtopk_w;            /* bwd: [N,k] */
    const float *ye;           /* [R,d] */
    const float *dy;           /* bwd: [N,d] */
    const float *topk_w;       /* [N,k] */
    const int32_t *token_slot; /* [N*k] */
    const int32_t *slot_token; /* [R] */
    int N, R, k, d;
} combine_args;

static void k_combine_fwd(const void *p) {
    const combine_args *a = p;
    for (int n = 0; n < a->N; n++) {
        float *y = a->y + (size_t)n * a->d;
        for (int i = 0; i < a->d; i++) {
            double acc = 0;
            for (int j = 0; j < a->k; j++) {
                int32_t r = a->token_slot[(size_t)n * a->k + j];
                if (r >= 0)
                    acc += (double)a->topk_w[(size_t)n * a->k + j] * a->ye[(size_t)r * a->d + i];
            }
            y[i] = (float)acc;
        }
    }
}

static void k_combine_bwd(const void *p) {
    const combine_args *a = p;
    for (int r = 0; r < a->R; r++) {
        float *dye = a->y + (size_t)r * a->d;
        int32_t t = a->slot_token[r];
        if (t < 0) {
            memset(dye, 0, (size_t)a->d * sizeof *dye);
            continue;
        }
        const float *dy = a->dy + (size_t)(t / a->k) * a->d;
        float w = a->topk_w[t];
        for (int i = 0; i < a->d; i++)
            dye[i] = w * dy[i];
    }
    for (int t = 0; t < a->N * a->k; t++) {
        int32_t r = a->token_slot[t];
        double acc = 0;
        if (r >= 0) {
            const float *dy = a->dy + (size_t)(t / a->k) * a->d;
            const float *ye = a->ye + (size_t)r * a->d;
            for (int i = 0; i < a->d; i++)
                acc += (double)dy[i] * ye[i];
        }
        a->dtopk_w[t] = (float)acc;
    }
}

static void cpu_moe_combine_fwd(gt_backend *b, gt_stream *s, void *y, const void *ye,
                                const float *topk_w, const int32_t *token_slot, int N, int k,
                                int d) {
    CPU_REQUIRE(b, N >= 0 && k > 0 && d > 0, "moe_combine_fwd: bad shape N=%d k=%d d=%d", N, k, d);
    combine_args a = {y, NULL, ye, NULL, topk_w, token_slot, NULL, N, 0, k, d};
    gt_cpu_submit(b, s, k_combine_fwd, &a, sizeof a);
}

static void cpu_moe_combine_bwd(gt_backend *b, gt_stream *s, void *dye, float *dtopk_w,
                                const void *dy, const void *ye, const float *topk_w,
                                const int32_t *token_slot, const int32_t *slot_token, int N, int R,
                                int k, int d) {
    CPU_REQUIRE(b, N >= 0 && R >= 0 && k > 0 && d > 0,
                "moe_combine_bwd: bad shape N=%d R=%d k=%d d=%d", N, R, k, d);
    combine_args a = {dye, dtopk_w, ye, dy, topk_w, token_slot, slot_token, N, R, k, d};
    gt_cpu_submit(b, s, k_combine_bwd, &a, sizeof a);
}

void gt_cpu_register_moe_ops(gt_backend_ops *ops) {
    gt_cpu_register_router_ops(ops);
    ops->moe_permute = cpu_moe_permute;
    ops->moe_gather = cpu_moe_gather;
    ops->moe_gather_bwd = cpu_moe_gather_bwd;
    ops->moe_matmul_fwd = cpu_moe_matmul_fwd;
    ops->moe_matmul_bwd_data = cpu_moe_matmul_bwd_data;
    ops->moe_matmul_bwd_weight = cpu_moe_matmul_bwd_weight;
    ops->moe_combine_fwd = cpu_moe_combine_fwd;
    ops->moe_combine_bwd = cpu_moe_combine_bwd;
}
